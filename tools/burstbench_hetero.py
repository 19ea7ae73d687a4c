#!/usr/bin/env python3
"""tools/burstbench_hetero.py - shards sized by speed against equal shards, on ranks of unequal speed.

For one ring of ranks that differ in speed (--backends cpu,vulkan,... and/or --num-threads 4,1,...
for CPU ranks with different thread counts), runs `burstrun --json` three ways on the same problem:
  equal     the layout's equal shards (the baseline);
  auto      shards by each rank's measured speed (--weights auto: every rank times short local
            attention steps on its own backend, in two rounds: at full load, then on the shard
            the first round gave it; burstrun reports both rounds' speeds);
  auto1     (--rounds1) the same with the first round's speeds alone (BURST_SPEED_ROUNDS=1);
  weights   shards by the weights given with --weights (optional, e.g. known thread counts);
  refined   (--refine) shards by the speeds the auto run's ranks showed in the ring itself (each
            rank's shard over its compute time there), which also counts what the quick
            single-step measurement misses (head groups, per-call fixed costs).
Every run is checked first with a small --check run of the same configuration; per rank, the
table below the main one gives each mode's compute / wait / total ms (burstrun's per_rank).

Ideal = the job's work over the sum of the ranks' speeds (work = allowed query/key pairs x batch
x query heads, the unit of the measured speeds), taken from the auto run. The target is a
forward time <= 1.15 x ideal with speed-sized shards; the equal-shard time shows what sizing by
speed buys. Prints a table and writes burstbench_hetero.csv. Measure on a quiet machine: this
script only launches burstrun, it does not control for other load.

    python3 tools/burstbench_hetero.py --burstrun build/tools/burstrun -n 2 --num-threads 4,1 \\
        [--backends cpu,vulkan] [--seq 16384 --heads 8 --head-dim 64 --causal --layout zigzag]
        [--threads] [--device 0,1] [--weights 4,1] [--iters 5] [--csv out.csv]

Tiny smoke run (seconds): --seq 256 --heads 2 --head-dim 32 --iters 1
"""
import argparse
import csv
import json
import os
import subprocess
import sys


def run(args, extra, check=False, env=None):
    seq = min(args.seq, 512) if check else args.seq  # the checks on a small problem
    cmd = [args.burstrun, "-n", str(args.ranks), "--seq", str(seq), "--heads",
           str(args.heads), "--head-dim", str(args.head_dim), "--dtype", args.dtype,
           "--layout", args.layout, "--iters", "1" if check else str(args.iters),
           "--warmup", "0" if check else "1", "--json"]
    if args.causal:
        cmd.append("--causal")
    if args.fwd_only:
        cmd.append("--fwd-only")
    if args.threads:
        cmd.append("--threads")
    if args.backends:
        cmd += ["--backends", args.backends]
    if args.num_threads:
        cmd += ["--num-threads", args.num_threads]
    if args.device:
        cmd += ["--device", args.device]
    if check:
        cmd.append("--check" if not args.fwd_only else "--check-fwd-only")
    cmd += extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                       env=dict(os.environ, **env) if env else None)
    js = None
    for line in reversed(p.stdout.strip().splitlines()):
        if line.startswith("{"):
            js = json.loads(line)
            break
    if p.returncode != 0 or js is None:
        sys.exit(f"burstrun failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n"
                 f"{p.stderr[-2000:]}")
    if check and js.get("check") != "pass":
        sys.exit(f"check failed: {' '.join(cmd)}\n{p.stdout[-2000:]}")
    return js


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burstrun", default="build/tools/burstrun")
    ap.add_argument("-n", "--ranks", type=int, default=2)
    ap.add_argument("--backends", default="", help="one backend per rank (burstrun --backends)")
    ap.add_argument("--num-threads", default="", help="compute threads per rank, e.g. 4,1")
    ap.add_argument("--device", default="", help="device per rank (burstrun --device), e.g. 0,1")
    ap.add_argument("--weights", default="", help="explicit weights to compare as well")
    ap.add_argument("--rounds1", action="store_true",
                    help="also run auto with round 1's speeds alone (BURST_SPEED_ROUNDS=1)")
    ap.add_argument("--refine", action="store_true",
                    help="also run with weights from the auto run's per-rank compute")
    ap.add_argument("--threads", action="store_true", help="ranks as threads (default processes)")
    ap.add_argument("--seq", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--layout", default="zigzag")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--fwd-only", action="store_true")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--csv", default="burstbench_hetero.csv")
    args = ap.parse_args()

    modes = [("equal", []), ("auto", ["--weights", "auto"])]
    if args.rounds1:
        modes.append(("auto1", ["--weights", "auto"]))
    if args.weights:
        modes.append(("weights", ["--weights", args.weights]))
    envs = {"auto1": {"BURST_SPEED_ROUNDS": "1"}}
    for name, extra in modes:
        run(args, extra, check=True, env=envs.get(name))

    results = {name: run(args, extra, env=envs.get(name)) for name, extra in modes}
    if args.refine:  # rows per compute ms of each rank in the auto run
        ja = results["auto"]
        lens, pr = ja.get("shard_lens", []), ja.get("per_rank", [])
        ms = [r.get("fwd", {}).get("compute_ms", 0.0) for r in pr]
        if len(lens) == len(ms) == args.ranks and all(m > 0 for m in ms):
            w = ",".join(f"{n / m:.6g}" for n, m in zip(lens, ms))
            modes.append(("refined", ["--weights", w]))
            run(args, modes[-1][1], check=True)
            results["refined"] = run(args, modes[-1][1])
        else:
            print("refine: the auto run has no per-rank compute times; skipped")
    ideal = results["auto"].get("ideal_fwd_ms")
    speeds = results["auto"].get("rank_speeds", [])
    base = results["equal"]["fwd_ms"]
    print(f"ring: {args.ranks} ranks, backends {results['equal']['backend']}, threads "
          f"{args.num_threads or 'default'}, {'threads' if args.threads else 'processes'}")
    print(f"problem: N={args.seq} Hq={args.heads} d={args.head_dim} {args.dtype} "
          f"{'causal' if args.causal else 'full'} layout {args.layout}")
    print("rank speeds (rows x keys x heads / s), full load: " +
          ", ".join(f"{s:.3g}" for s in speeds) + "; on the shard (sized it): " +
          ", ".join(f"{s:.3g}" for s in results["auto"].get("shard_speeds", [])))
    print(f"ideal forward (work / sum of speeds): {ideal:.3f} ms" if ideal else "ideal: n/a")
    print(f"{'mode':8} {'shard lens':>28} {'fwd ms':>10} {'x ideal':>8} {'vs equal':>9} "
          f"{'bwd ms':>10}")
    rows = []
    for name, _ in modes:
        js = results[name]
        fwd = js["fwd_ms"]
        lens = ",".join(str(x) for x in js.get("shard_lens", []))
        x_ideal = fwd / ideal if ideal else float("nan")
        bwd = js.get("bwd_ms")
        print(f"{name:8} {lens:>28} {fwd:10.3f} {x_ideal:8.2f} {base / fwd:8.2f}x "
              f"{bwd if bwd is not None else float('nan'):10.3f}")
        rows.append({"mode": name, "ranks": args.ranks, "backends": js["backend"],
                     "num_threads": args.num_threads, "seq": args.seq, "heads": args.heads,
                     "head_dim": args.head_dim, "dtype": args.dtype, "causal": int(args.causal),
                     "layout": args.layout, "shard_lens": lens, "fwd_ms": fwd,
                     "bwd_ms": bwd, "ideal_fwd_ms": ideal, "fwd_x_ideal": x_ideal,
                     "speedup_vs_equal": base / fwd,
                     "rank_speeds": ",".join(f"{s:.6g}" for s in speeds),
                     "shard_speeds": ",".join(f"{s:.6g}" for s in js.get("shard_speeds", []))})
    print("per rank, compute / wait / total ms of the forward (last call):")
    for name, _ in modes:
        cells = [f"{r['fwd']['compute_ms']:.2f} / {r['fwd']['wait_ms']:.2f} / "
                 f"{r['fwd']['total_ms']:.2f}" for r in results[name].get("per_rank", [])
                 if "fwd" in r]
        print(f"  {name:8} " + " | ".join(cells))
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
