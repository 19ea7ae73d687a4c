#!/usr/bin/env bash
# tools/vk_toolchain.sh - build the shader toolchain of the Vulkan backend's cooperative-matrix
# kernels from Debian's newer suite, for a Debian 12 machine whose glslang (12) cannot compile
# GL_KHR_cooperative_matrix or GL_NV_cooperative_matrix2.
#
#   tools/vk_toolchain.sh [PREFIX] [SUITE]     default PREFIX .toolchain, SUITE trixie
#
# Fetches the SUITE source packages of glslang, vulkan-loader (whose source carries the Vulkan
# headers), spirv-headers and spirv-tools
# (apt-get source, from the mirror this machine's own apt sources name, through a private apt
# configuration: the machine's sources are not changed) and builds, with cmake and ninja,
#   PREFIX/bin/glslang, glslangValidator   glslang >= 15, statically linked
#   PREFIX/bin/spirv-val                   statically linked
#   PREFIX/include/vulkan/...              Vulkan headers >= 1.4.304
# The binaries need nothing but the Linux kernel, so PREFIX can be copied to another machine.
# Then: meson setup build -Dglslang=PREFIX/bin/glslang -Dvulkan_headers=PREFIX/include
# (docs/BACKENDS.md, "Vulkan shader toolchain"). Needs dpkg-dev, cmake, ninja-build, g++ and
# python3.
# Does nothing for a part PREFIX already has.
set -euo pipefail
prefix=$(realpath -m "${1:-.toolchain}")
suite=${2:-trixie}
jobs=$(nproc)

need_glslang=1 need_headers=1 need_val=1
[ -x "$prefix/bin/glslang" ] && need_glslang=0
[ -f "$prefix/include/vulkan/vulkan_core.h" ] && need_headers=0
[ -x "$prefix/bin/spirv-val" ] && need_val=0
[ $need_glslang$need_headers$need_val = 000 ] && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A private apt: one deb-src entry per Debian mirror of the machine's own sources (one-line and
# deb822 forms; the security archive left out), for SUITE.
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/parts"
{
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true
} | sed -n 's/^deb\(-src\)\? \(\[[^]]*\] \)\?\([^ ]*\) [^ ]* .*/\3/p' >"$work/uris"
{ cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } |
    sed -n 's/^URIs: *//p' | tr ' ' '\n' >>"$work/uris"
{ grep -E '/debian/?$' "$work/uris" || true; } | sed 's,/*$,,' | sort -u |
    while read -r uri; do echo "deb-src $uri $suite main"; done >"$work/apt/sources.list"
if [ ! -s "$work/apt/sources.list" ]; then
    echo "vk_toolchain.sh: no Debian mirror (a URI ending in /debian) in the apt sources" >&2
    exit 1
fi
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=$work/apt/parts"
    -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
    -o "Dir::State::Status=/var/lib/dpkg/status" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" -qq update
# fetch PACKAGE: the upstream source (the .orig tarball only, checked by apt against the suite's
# signed index; without Debian's patches, which adapt the pkg-config files to Debian's
# shared-library build and break glslang's with ENABLE_OPT=OFF), unpacked; its directory on
# stdout
fetch() {
    mkdir -p "$work/src/$1/$1"
    (cd "$work/src/$1" && apt-get "${apt_opts[@]}" -qq source --tar-only "$1" >/dev/null &&
        tar -xf "$(ls ./*.orig.tar.* | grep -v '\.asc$' | head -n 1)" -C "$1" \
            --strip-components=1) || {
        echo "vk_toolchain.sh: apt-get source $1 ($suite) failed" >&2
        return 1
    }
    echo "$work/src/$1/$1"
}
static_flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF
    -DCMAKE_EXE_LINKER_FLAGS=-static -DCMAKE_INSTALL_PREFIX="$prefix")

if [ $need_glslang = 1 ]; then
    src=$(fetch glslang)
    cmake -S "$src" -B "$work/glslang" -G Ninja "${static_flags[@]}" -DENABLE_OPT=OFF \
        -DGLSLANG_TESTS=OFF -DENABLE_HLSL=OFF -DGLSLANG_ENABLE_INSTALL=ON >/dev/null
    cmake --build "$work/glslang" -j "$jobs" --target glslang-standalone >/dev/null
    install -D -m 755 "$work/glslang/StandAlone/glslang" "$prefix/bin/glslang"
    ln -sf glslang "$prefix/bin/glslangValidator"
fi
if [ $need_headers = 1 ]; then
    src=$(fetch vulkan-loader)
    mkdir -p "$prefix/include"
    cp -r "$src/vulkan-headers/include/vulkan" "$src/vulkan-headers/include/vk_video" \
        "$prefix/include/"
fi
if [ $need_val = 1 ]; then
    hdr=$(fetch spirv-headers)
    src=$(fetch spirv-tools)
    cmake -S "$src" -B "$work/spirv-tools" -G Ninja "${static_flags[@]}" \
        -DSPIRV-Headers_SOURCE_DIR="$hdr" -DSPIRV_SKIP_TESTS=ON -DSPIRV_WERROR=OFF \
        -DSPIRV_SKIP_EXECUTABLES=OFF >/dev/null
    cmake --build "$work/spirv-tools" -j "$jobs" --target spirv-val >/dev/null
    install -D -m 755 "$work/spirv-tools/tools/spirv-val" "$prefix/bin/spirv-val"
fi
"$prefix/bin/glslang" --version | head -n 1
"$prefix/bin/spirv-val" --version | head -n 1
grep -m 1 '#define VK_HEADER_VERSION ' "$prefix/include/vulkan/vulkan_core.h"
