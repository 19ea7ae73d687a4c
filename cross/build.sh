#!/usr/bin/env bash
# cross/build.sh - cross-build the core for ARCH and run tests under qemu-user.
#
#   cross/build.sh ARCH [meson test arguments]     ARCH: aarch64 | riscv64
#   cross/build.sh aarch64 --suite unit
#   cross/build.sh riscv64 attention schedule
#
# The core only (no optional dependency), warnings as errors (--werror), into build-ARCH; cmocka
# for the target from cross/cmocka.sh into build-deps/ARCH. Needs Debian's gcc-ARCH-linux-gnu
# (and its libc6-dev-*-cross), qemu-user, cmake and a deb-src entry (README, "Cross-building").
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: cross/build.sh aarch64|riscv64 [meson test arguments]}
shift
triplet=$arch-linux-gnu
[ -f "cross/$triplet.ini" ] || { echo "cross/build.sh: no cross/$triplet.ini" >&2; exit 2; }
cross/cmocka.sh "$triplet" "build-deps/$arch"
if [ ! -f "build-$arch/build.ninja" ]; then
    meson setup "build-$arch" --werror --cross-file "cross/$triplet.ini" -Dvulkan=disabled \
        -Dcuda=disabled -Dfabric=disabled -Dmpi=disabled -Dpmix=disabled -Dtests=enabled \
        -Dpkg_config_path="$PWD/build-deps/$arch/lib/pkgconfig"
fi
ninja -C "build-$arch"
meson test -C "build-$arch" --print-errorlogs "$@"
