#!/bin/sh
# tests/fuzz/run_fuzz.sh TARGET CORPUS WORK: run libFuzzer TARGET for BURST_FUZZ_SECONDS (default
# 20) over a copy of the seed corpus CORPUS in WORK (recreated; the source tree is not written).
# A crash, leak, timeout or sanitizer report fails (libFuzzer exits nonzero) and leaves the input
# as WORK.crash-* / WORK.leak-* / WORK.timeout-*; reproduce with: TARGET FILE.
set -eu
exe=$1 src=$2 work=$3
secs=${BURST_FUZZ_SECONDS:-20}
rm -rf "$work"
mkdir -p "$work"
cp "$src"/* "$work"/
exec "$exe" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$work." "$work"
