#!/usr/bin/env bash
# Checks README's Quick start on a fresh Debian 12 root file system, as a newcomer would run it:
# debootstrap bookworm (minbase, plus sudo), a user with sudo rights, a clean clone of this
# repository's HEAD commit in that user's home, then README's two commands verbatim (the first two
# `sh` blocks under "## Quick start"), one after the other, from the top of the clone. With
# --minimal, the C-compiler-only variant (the third block) runs instead, in its own fresh copy.
#
# Needs root, debootstrap (apt-get install debootstrap) and access to a Debian mirror; not run by
# CI. The debootstrap result is kept as WORKDIR/bookworm-base.tar, so later runs start from a
# copy of it in seconds; every run unpacks a fresh copy (WORKDIR/root-full or root-minimal).
#
# usage: scripts/fresh_debian_check.sh [--mirror URL] [--minimal] [--keep] WORKDIR
#   --mirror URL  the Debian mirror (default: the first URIs / deb line of this machine's apt
#                 sources)
#   --keep        leave the root file system in place afterwards (default: removed when passed)
# Output: each command's log in WORKDIR/<variant>-cmdN.log and its time; exit status 0 when every
# command passed, else the failing command's.
set -euo pipefail

usage() {
    sed -n '/^# usage:/,/^# Output:/{/^# Output:/d;s/^# \{0,1\}//;p;}' "$0" >&2
    exit 2
}

mirror=
variant=full
keep=0
while [ $# -gt 1 ]; do
    case "$1" in
    --mirror) mirror="$2"; shift 2 ;;
    --minimal) variant=minimal; shift ;;
    --keep) keep=1; shift ;;
    *) usage ;;
    esac
done
[ $# -eq 1 ] || usage
work="$(mkdir -p "$1" && cd "$1" && pwd)"
repo="$(cd "$(dirname "$0")/.." && pwd)"
[ "$(id -u)" -eq 0 ] || { echo "fresh_debian_check: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh_debian_check: needs debootstrap" >&2; exit 2; }
case "$work/" in
"$repo"/*) echo "fresh_debian_check: WORKDIR must lie outside the repository" >&2; exit 2 ;;
esac

if [ -z "$mirror" ]; then
    mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *\([^ ]*\).*/\1/p' | head -n1)"
    [ -n "$mirror" ] || mirror="$(cat /etc/apt/sources.list 2>/dev/null | sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\).*/\2/p' | head -n1)"
fi
[ -n "$mirror" ] || { echo "fresh_debian_check: no mirror found in the apt sources: give --mirror URL" >&2; exit 2; }

# README's commands: the sh blocks of the Quick start section, in order
blocks="$work/readme-blocks"
rm -rf "$blocks" && mkdir -p "$blocks"
awk -v dir="$blocks" '
    /^## / { inq = ($0 ~ /^## Quick start/) }
    inq && /^```sh$/ { n++; f = dir "/" n ".sh"; inb = 1; next }
    inb && /^```$/ { inb = 0; close(f); next }
    inb { print > f }
' "$repo/README.md"
if [ "$variant" = full ]; then cmds="1 2"; else cmds="3"; fi
for i in $cmds; do
    [ -s "$blocks/$i.sh" ] || { echo "fresh_debian_check: README's Quick start has no sh block $i" >&2; exit 1; }
done

base="$work/bookworm-base.tar"
if [ ! -f "$base" ]; then
    echo "fresh_debian_check: debootstrap bookworm from $mirror (once; kept as $base)"
    rm -rf "$work/base"
    debootstrap --variant=minbase --include=sudo bookworm "$work/base" "$mirror"
    printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "$mirror" "$mirror" \
        >"$work/base/etc/apt/sources.list"
    tar -C "$work/base" -cf "$base.new" . && mv "$base.new" "$base"
    rm -rf "$work/base"
fi

root="$work/root-$variant"
mounts=()
cleanup() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" || true; done
}
trap cleanup EXIT
# a copy left mounted by an interrupted run is unmounted first (rm -rf must not reach /dev, /sys)
awk -v r="$root/" 'index($2 "/", r) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m"; done
if awk -v r="$root/" 'index($2 "/", r) == 1 { f = 1 } END { exit !f }' /proc/mounts; then
    echo "fresh_debian_check: $root still has mounts; not removing it" >&2
    exit 1
fi
rm -rf "$root" && mkdir -p "$root"
tar -C "$root" -xf "$base"
cp /etc/resolv.conf "$root/etc/resolv.conf"
for m in /proc /sys /dev /dev/pts /dev/shm; do
    mkdir -p "$root$m"
    mount --bind "$m" "$root$m"
    mounts+=("$root$m")
done

# the newcomer: an ordinary user with sudo rights, the repository's HEAD cloned in the home
chroot "$root" useradd -m -s /bin/bash newcomer
echo 'newcomer ALL=(ALL) NOPASSWD:ALL' >"$root/etc/sudoers.d/newcomer"
chmod 0440 "$root/etc/sudoers.d/newcomer"
git clone -q --no-hardlinks "$repo" "$root/home/newcomer/burst"
git -C "$root/home/newcomer/burst" checkout -q --detach "$(git -C "$repo" rev-parse HEAD)"
cp "$blocks"/*.sh "$root/home/newcomer/"
chroot "$root" chown -R newcomer:newcomer /home/newcomer

status=0
for i in $cmds; do
    log="$work/$variant-cmd$i.log"
    echo "fresh_debian_check: $variant, command $i:"
    cat "$blocks/$i.sh"
    t0=$(date +%s)
    if chroot "$root" su -l newcomer -c "cd ~/burst && bash -e ~/$i.sh" >"$log" 2>&1; then
        rc=0
    else
        rc=$?
    fi
    echo "fresh_debian_check: $variant, command $i: exit $rc after $(($(date +%s) - t0)) s (log: $log)"
    if [ $rc -ne 0 ]; then
        tail -n 40 "$log"
        status=$rc
        break
    fi
done
sed -n '/Optional features/,/^$/p' "$work/$variant-cmd${cmds%% *}.log" || true

cleanup
mounts=()
if [ $status -eq 0 ] && [ $keep -eq 0 ]; then rm -rf "$root"; fi
exit $status
