#!/bin/sh
# tests/install_test.sh BUILD_ROOT SOURCE_ROOT
#
# Install the build into a temporary DESTDIR and use the INSTALLED copy only, as an embedding
# program does:
#   - burst.pc: `pkg-config --cflags burst` is exactly the include directory; no Requires (no
#     other package's .pc or headers); the static link line links as printed;
#   - libburst.so links no MPI and no libfabric (ldd / readelf);
#   - examples/embed.c built with pkg-config (shared, and static with libburst.a) and with CMake
#     (find_package(burst), target burst::burst), each run without LD_LIBRARY_PATH;
#   - the installed burstrun runs from the prefix without LD_LIBRARY_PATH (install rpath).
# The .pc is read with its prefix redefined to the DESTDIR copy (--define-variable), as a program
# built against the real prefix sees it there.
# BURST_TEST_CFLAGS adds compiler flags (a sanitizer build's -fsanitize=...).
# Exit 77 (meson: SKIP) when meson, pkg-config or a C compiler is missing; without cmake the CMake
# part alone is skipped (said so).
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_ROOT SOURCE_ROOT" >&2
    exit 2
fi
build=$1
src=$2
cc=${CC:-cc}
xflags=${BURST_TEST_CFLAGS:-} # e.g. -fsanitize=address,undefined in a sanitizer build

for tool in meson pkg-config "$cc"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIP: $tool not found"
        exit 77
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/burst-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
dest=$tmp/dest
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# --no-rebuild: this runs under `ninja test`, which already built everything.
meson install -C "$build" --destdir "$dest" --no-rebuild >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log" >&2
    fail "meson install --destdir failed"
}

pc=$(find "$dest" -name burst.pc | head -n 1)
[ -n "$pc" ] || fail "burst.pc was not installed"
lib_so=$(find "$dest" -name 'libburst.so.*.*' | head -n 1)
lib_a=$(find "$dest" -name 'libburst.a' | head -n 1)
if [ -z "$lib_so" ] || [ -z "$lib_a" ]; then
    fail "shared ($lib_so) or static ($lib_a) library missing from the install"
fi
! grep -q '^Requires' "$pc" || fail "burst.pc has Requires lines: $(grep '^Requires' "$pc")"

# Only the installed burst.pc is visible.
PKG_CONFIG_LIBDIR=$(dirname "$pc")
PKG_CONFIG_PATH=
export PKG_CONFIG_LIBDIR PKG_CONFIG_PATH
unset PKG_CONFIG_SYSROOT_DIR || true
prefix=$(pkg-config --variable=prefix burst)
pc_at="pkg-config --define-variable=prefix=$dest$prefix"
incdir=$($pc_at --variable=includedir burst)
cflags=$($pc_at --cflags burst | sed "s/ *$//")
libs=$($pc_at --libs burst)
static_libs=$($pc_at --static --libs burst)
echo "pkg-config: cflags [$cflags] libs [$libs] static [$static_libs]"
[ "$cflags" = "-I$incdir" ] || fail "pkg-config --cflags burst is [$cflags], not [-I$incdir]"
[ -f "$incdir/burst/burst.h" ] || fail "$incdir/burst/burst.h is not installed"

# libburst links neither MPI nor libfabric (libfabric is opened at run time).
needed=$(if command -v readelf >/dev/null 2>&1; then readelf -d "$lib_so"; else ldd "$lib_so"; fi)
if printf '%s\n' "$needed" | grep -E 'libmpi|libfabric|libopen-'; then
    fail "libburst.so links MPI or libfabric (above)"
fi
if command -v ldd >/dev/null 2>&1 && ldd "$lib_so" | grep -E 'libmpi|libfabric'; then
    fail "ldd: libburst.so loads MPI or libfabric (above)"
fi

# Compile a copy of the example outside the source tree, so that only installed headers resolve.
cp "$src/examples/embed.c" "$tmp/embed.c"
cd "$tmp"

# shared, through pkg-config; runs through the rpath burst.pc gives (no LD_LIBRARY_PATH)
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $xflags -o embed embed.c $cflags $libs -pthread -lm
env -u LD_LIBRARY_PATH ./embed
# (and it found the installed copy, not another libburst on the system)
loaded_from() {
    env -u LD_LIBRARY_PATH ldd "$1" | awk '/libburst\.so/ { print $3 }'
}
if command -v ldd >/dev/null 2>&1; then
    case $(loaded_from ./embed) in
    "$dest"/*) ;;
    *) fail "./embed loads libburst from [$(loaded_from ./embed)], not from the install" ;;
    esac
fi

# static: the archive in place of -lburst, then the rest of `--static --libs` exactly as burst.pc
# gives it (README's line; each library must link here)
# shellcheck disable=SC2086
static_rest=$(printf '%s\n' $static_libs | { grep -v -e '^-lburst$' || true; } | tr '\n' ' ')
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $xflags -o embed_static embed.c $cflags "$lib_a" $static_rest \
    -pthread -lm
if command -v readelf >/dev/null 2>&1 && readelf -d embed_static | grep -q 'libburst'; then
    fail "embed_static still depends on a shared libburst"
fi
env -u LD_LIBRARY_PATH ./embed_static

# CMake: find_package(burst) from the prefix, the imported target burst::burst
if command -v cmake >/dev/null 2>&1; then
    mkdir cm
    cat >cm/CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.13)
project(embed C)
find_package(Threads REQUIRED)
find_package(burst 0.6 REQUIRED)
add_executable(embed ../embed.c)
set_property(TARGET embed PROPERTY C_STANDARD 11)
target_link_libraries(embed PRIVATE burst::burst Threads::Threads m)
CMAKE
    if ! cmake -S cm -B cm/build -DCMAKE_PREFIX_PATH="$dest$prefix" -DCMAKE_C_COMPILER="$cc" \
        -DCMAKE_C_FLAGS="-Wall -Wextra -Werror $xflags" >cmake.log 2>&1 ||
        ! cmake --build cm/build >>cmake.log 2>&1; then
        cat cmake.log >&2
        fail "the CMake project with find_package(burst) did not build"
    fi
    if command -v readelf >/dev/null 2>&1 && readelf -d cm/build/embed | grep -E 'libmpi|libfabric'; then
        fail "the CMake-built program links MPI or libfabric (above)"
    fi
    env -u LD_LIBRARY_PATH ./cm/build/embed
    if command -v ldd >/dev/null 2>&1; then
        case $(loaded_from ./cm/build/embed) in
        "$dest"/*) ;;
        *) fail "the CMake-built program loads libburst from [$(loaded_from ./cm/build/embed)]" ;;
        esac
    fi
    cmake_done="CMake find_package(burst)"
else
    echo "cmake not found: the CMake package is not checked"
    cmake_done="(no cmake)"
fi

# the installed burstrun, from the prefix, without LD_LIBRARY_PATH
burstrun=$(find "$dest" -name burstrun -type f | head -n 1)
[ -x "$burstrun" ] || fail "burstrun was not installed"
if command -v ldd >/dev/null 2>&1; then
    case $(loaded_from "$burstrun") in
    "$dest"/*) ;;
    *) fail "the installed burstrun loads libburst from [$(loaded_from "$burstrun")]" ;;
    esac
fi
env -u LD_LIBRARY_PATH "$burstrun" --threads -n 2 --seq 64 --heads 1 --head-dim 16 >burstrun.log 2>&1 || {
    cat burstrun.log >&2
    fail "the installed $burstrun did not run without LD_LIBRARY_PATH"
}

echo "PASS: installed headers; burst.pc (cflags exact, shared and static); $cmake_done;" \
    "libburst without MPI; burstrun and the programs run without LD_LIBRARY_PATH"
