#!/bin/sh
# tests/fuzz/run_fuzz.sh TARGET CORPUS WORK: run libFuzzer TARGET for BURST_FUZZ_SECONDS (default
# 20) over a copy of the seed corpus CORPUS in WORK (recreated; the source tree is not written).
# A crash, leak, timeout, out-of-memory or sanitizer report fails the test and leaves the input
# as WORK.crash-* / WORK.leak-* / WORK.timeout-* / WORK.oom-*; reproduce with: TARGET FILE.
#
# libFuzzer's own exit codes would reach meson as they are: 77 for a crash or leak
# (-error_exitcode's default), which meson counts as a skip. Every nonzero exit is therefore
# reported and turned into 1, and the artifacts the run left are listed.
set -eu
exe=$1 src=$2 work=$3
secs=${BURST_FUZZ_SECONDS:-20}
rm -rf "$work"
rm -f "$work".crash-* "$work".leak-* "$work".timeout-* "$work".oom-* "$work".slow-unit-*
mkdir -p "$work"
cp "$src"/* "$work"/
rc=0
"$exe" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -max_len=4096 \
    -print_final_stats=1 -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$work." \
    "$work" || rc=$?
if [ "$rc" != 0 ]; then
    echo "FAIL: $(basename "$exe") exited $rc"
    ls -1 "$work".* 2>/dev/null | sed 's/^/  input: /'
    exit 1
fi
