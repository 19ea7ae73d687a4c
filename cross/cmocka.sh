#!/usr/bin/env bash
# cross/cmocka.sh - build cmocka for a cross target, for the cross builds' unit tests.
#
#   cross/cmocka.sh TRIPLET PREFIX      e.g. cross/cmocka.sh aarch64-linux-gnu build-deps/aarch64
#
# Takes Debian's source package of cmocka (apt-get source: needs a deb-src entry and dpkg-dev),
# builds it with cmake and TRIPLET-gcc, and installs a static libcmocka.a, cmocka.h and
# PREFIX/lib/pkgconfig/cmocka.pc: test programs then link cmocka in, so qemu-user needs only the
# cross toolchain's C library (-L /usr/TRIPLET). Does nothing when PREFIX already has it.
set -euo pipefail
triplet=${1:?usage: cross/cmocka.sh TRIPLET PREFIX}
prefix=$(realpath -m "${2:?usage: cross/cmocka.sh TRIPLET PREFIX}")
[ -f "$prefix/lib/libcmocka.a" ] && [ -f "$prefix/lib/pkgconfig/cmocka.pc" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get source -qq cmocka >/dev/null)
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'cmocka-*')
cmake -S "$src" -B "$work/build" -DCMAKE_SYSTEM_NAME=Linux \
    -DCMAKE_SYSTEM_PROCESSOR="${triplet%%-*}" -DCMAKE_C_COMPILER="$triplet-gcc" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
    -DWITH_STATIC_LIB=ON -DUNIT_TESTING=OFF -DWITH_EXAMPLES=OFF >/dev/null
cmake --build "$work/build" -j "$(nproc)" >/dev/null
cmake --install "$work/build" >/dev/null
# static only: the shared library would have to be found by qemu's loader at run time
rm -f "$prefix"/lib/libcmocka.so*
if [ -f "$prefix/lib/libcmocka-static.a" ]; then
    mv "$prefix/lib/libcmocka-static.a" "$prefix/lib/libcmocka.a"
fi
test -f "$prefix/lib/libcmocka.a" && test -f "$prefix/lib/pkgconfig/cmocka.pc"
