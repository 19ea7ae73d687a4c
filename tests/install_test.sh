#!/bin/sh
# tests/install_test.sh BUILD_ROOT SOURCE_ROOT
#
# Install the build into a temporary DESTDIR, then compile examples/embed.c with the system C
# compiler against the INSTALLED copy only, found through pkg-config (burst.pc), and run it:
# once linked against the shared library (found with LD_LIBRARY_PATH), once against libburst.a.
# BURST_TEST_CFLAGS adds compiler flags (a sanitizer build's -fsanitize=...).
# Exit 77 (meson: SKIP) when meson, pkg-config or a C compiler is missing.
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

# --no-rebuild: this runs under `ninja test`, which already built everything.
meson install -C "$build" --destdir "$dest" --no-rebuild >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log" >&2
    echo "FAIL: meson install --destdir failed" >&2
    exit 1
}

pc=$(find "$dest" -name burst.pc | head -n 1)
if [ -z "$pc" ]; then
    echo "FAIL: burst.pc was not installed" >&2
    exit 1
fi
lib_so=$(find "$dest" -name 'libburst.so*' | head -n 1)
lib_a=$(find "$dest" -name 'libburst.a' | head -n 1)
if [ -z "$lib_so" ] || [ -z "$lib_a" ]; then
    echo "FAIL: shared ($lib_so) or static ($lib_a) library missing from the install" >&2
    exit 1
fi
libdir=$(dirname "$lib_so")

# The installed burst.pc first; paths in it are relocated under DESTDIR by the sysroot. The
# system's .pc files stay reachable for burst's private requirements (e.g. libfabric): their -I/-L
# get the sysroot prefix too, which is harmless (burst's headers need none of theirs and the
# linker still searches the system directories).
system_pc=$(pkg-config --variable pc_path pkg-config 2>/dev/null || true)
PKG_CONFIG_LIBDIR=$(dirname "$pc")${system_pc:+:$system_pc}
PKG_CONFIG_PATH=
PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG_LIBDIR PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
cflags=$(pkg-config --cflags burst)
libs=$(pkg-config --libs burst)
static_libs=$(pkg-config --static --libs burst)
echo "pkg-config: cflags [$cflags] libs [$libs] static [$static_libs]"

# Compile a copy of the example outside the source tree, so that only installed headers resolve.
cp "$src/examples/embed.c" "$tmp/embed.c"
cd "$tmp"

# shared
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $xflags -o embed embed.c $cflags $libs -pthread -lm
LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ./embed

# static: the archive in place of -lburst, plus the private libraries burst.pc declares
# shellcheck disable=SC2086
static_rest=$(printf '%s\n' $static_libs | { grep -v -e '^-lburst$' -e '^-L' || true; } | tr '\n' ' ')
# Dependencies installed only as shared libraries (e.g. Debian's libfabric) list their own static
# dependencies in Libs.private; those are not needed (nor installed) when the dependency itself is
# linked shared, so keep only the -l flags this system can resolve.
kept=
for flag in $static_rest; do
    case $flag in
    /*)
        # an archive named by absolute path (the CUDA backend's libcudart_static.a): the sysroot
        # prefixed it, but it is a system file outside the install
        if [ ! -e "$flag" ] && [ -e "${flag#"$dest"}" ]; then
            flag=${flag#"$dest"}
        fi ;;
    -l*)
        name=${flag#-l}
        so=$("$cc" -print-file-name="lib$name.so")
        ar=$("$cc" -print-file-name="lib$name.a")
        [ "$so" != "lib$name.so" ] || [ "$ar" != "lib$name.a" ] || continue ;;
    esac
    kept="$kept $flag"
done
static_rest=$kept
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $xflags -o embed_static embed.c $cflags "$lib_a" $static_rest \
    -pthread -lm
if command -v readelf >/dev/null 2>&1 && readelf -d embed_static | grep -q 'libburst'; then
    echo "FAIL: embed_static still depends on a shared libburst" >&2
    exit 1
fi
env -u LD_LIBRARY_PATH ./embed_static

echo "PASS: installed headers, shared and static library, and burst.pc work"
