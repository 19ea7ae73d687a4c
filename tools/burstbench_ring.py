#!/usr/bin/env python3
"""tools/burstbench_ring.py - burst's GPU ring beside PyTorch's context_parallel, in one command.

For each size and mask, runs burstrun with cuda ranks as threads of one process (blocks go
device to device: `transfers` = device; --device 0,1,... puts rank i on GPU i), or with --procs as
rank processes (shm between them, blocks GPU to GPU through CUDA IPC), forward and
forward+backward, with the burst backward (query bundle travels) and the ring backward (K/V and
their gradients travel); then the single-GPU run (one rank) at the sizes of --single; then
PyTorch's context_parallel (tools/ring_torch.py under torchrun, same sizes, same GPUs). Prints
per-GPU TFLOP/s, the ratio of forward+backward times burst / PyTorch, backward bytes on the wire
(burst / ring, against ALGORITHM.md section 2's prediction), overlap and the per-step timeline
(compute vs wait per step, from the engine's statistics: CUDA events on device-to-device rings),
and the peak GPU memory of each run (nvidia-smi, sampled every 20 ms, minus the idle level: includes the CUDA context; "w/o ctx":
the eight local tensors plus the engine's scratch, what the budget counts) beside the memory
budget (local Q, K, V, O, dO, dQ, dK, dV + two blocks). --workspace runs each size with several
plan.workspace_limit values (burstrun --workspace: auto, unlimited or MiB; the ring runs
once per group of heads to stay within the limit) and reports the head groups each used. Writes a
CSV and an SVG.

  python3 tools/burstbench_ring.py --burstrun build/tools/burstrun --gpus 2 \
      --seqs 32768,131072,262144 --masks causal,full [--bwd burst,ring] [--single 131072] \
      [--heads 32] [--head-dim 128] [--iters 3] [--workspace auto,unlimited] [--procs] [--no-torch]

A small --check run (N = 2048, 4 heads, both masks, both backward patterns) precedes the timed ones.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time


class GpuMem:
    """Peak used memory per GPU (MiB) while running, from nvidia-smi."""

    def __init__(self, gpus):
        self.gpus, self.peak, self.stop = gpus, [0] * gpus, False
        self.base = self.sample()

    def sample(self):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout.split()
            return [int(x) for x in out[: self.gpus]] + [0] * (self.gpus - len(out))
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return [0] * self.gpus

    def __enter__(self):
        def loop():
            while not self.stop:
                self.peak = [max(p, s) for p, s in zip(self.peak, self.sample())]
                time.sleep(0.02)
        self.t = threading.Thread(target=loop, daemon=True)
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()

    def used_gib(self):
        return max(p - b for p, b in zip(self.peak, self.base)) / 1024.0


def burstrun(args, ranks, n, causal, bwd, check=False, iters=None, workspace="auto"):
    heads = 4 if check else args.heads  # the fp64 reference of --check: keep it small
    launch = ["--fabric", "shm"] if args.procs else ["--threads"]
    cmd = [args.burstrun] + launch + ["-n", str(ranks), "--backend", "cuda",
           "--device", ",".join(str(i % args.gpus) for i in range(ranks)),
           "--seq", str(n), "--heads", str(heads), "--head-dim", str(args.head_dim),
           "--dtype", "bf16", "--layout", "zigzag" if causal else "natural", "--bwd", bwd,
           "--iters", str(iters or args.iters), "--warmup", "1", "--workspace", workspace, "--json"]
    if causal:
        cmd.append("--causal")
    if args.ranks_per_node and ranks > args.ranks_per_node:
        cmd += ["--ranks-per-node", str(args.ranks_per_node)]
    if check:
        cmd.append("--check")
    print("$", " ".join(cmd), flush=True)
    with GpuMem(args.gpus) as mem:
        p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout[-2000:], p.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"burstrun failed ({p.returncode})")
    j = json.loads(p.stdout)
    j["peak_mem_gib"] = mem.used_gib()
    return j


def predicted_bwd_ratio(h, d):
    """ALGORITHM.md section 2: bytes per backward step, burst (Q, dO bf16 + dQ fp32 + lse, D fp32)
    over ring (K, V bf16 + dK, dV fp32), per token, Hq = Hkv = h."""
    burst = h * (d * (2 * 2 + 4) + 2 * 4)
    ring = h * d * (2 * 2 + 2 * 4)
    return burst / ring


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--burstrun", required=True)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=0, help="ranks (default: one per GPU)")
    ap.add_argument("--ranks-per-node", type=int, default=0,
                    help="two-level ring of this many ranks per (simulated) node; 0 = flat")
    ap.add_argument("--seqs", default="32768,131072")
    ap.add_argument("--masks", default="causal,full")
    ap.add_argument("--bwd", default="burst,ring")
    ap.add_argument("--single", default="131072",
                    help="sizes also run on one GPU (one rank, --workspace unlimited: our fastest "
                         "single-GPU configuration, the reference of the per-GPU ratio)")
    ap.add_argument("--workspace", default="auto",
                    help="burstrun --workspace values to compare, comma-separated (auto, unlimited, "
                         "MiB); the first is the one the summary compares with PyTorch")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--rotate", default="default")
    ap.add_argument("--procs", action="store_true",
                    help="ranks as processes (shm between them; blocks GPU to GPU by CUDA IPC)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--csv", default="burstbench_ring.csv")
    ap.add_argument("--svg", default="burstbench_ring.svg")
    args = ap.parse_args()
    ranks = args.ranks or args.gpus
    seqs = [int(x) for x in args.seqs.split(",")]
    masks = args.masks.split(",")
    h, d = args.heads, args.head_dim
    workspaces = args.workspace.split(",")

    if not args.no_check:
        for mask in masks:
            for bwd in args.bwd.split(","):
                j = burstrun(args, ranks, 2048, mask == "causal", bwd, check=True, iters=1)
                print(f"check N=2048 {mask} bwd={bwd}: {j.get('check')} transfers={j['transfers']}")
                if j.get("check") != "pass":
                    raise SystemExit("check failed")

    rows = []
    singles = [int(x) for x in args.single.split(",") if x]
    for n in seqs:
        for mask in masks:
            causal = mask == "causal"
            flops = 4.0 * h * d * n * n * (0.5 if causal else 1.0)
            runs = [(ranks, bwd, ws) for bwd in args.bwd.split(",") for ws in workspaces]
            if n in singles:
                runs.append((1, "burst", "unlimited"))
            for g, bwd, ws in runs:
                j = burstrun(args, g, n, causal, bwd, workspace=ws)
                gpus = min(g, args.gpus)
                fb = j["fwd_ms"] + j["bwd_ms"]
                row = dict(impl="burst" if g > 1 else "burst_1gpu", gpus=gpus, ranks=g, seq=n,
                           launch="procs" if args.procs else "threads",
                           causal=causal, bwd=bwd, transfers=j["transfers"], workspace=ws,
                           head_groups=j["head_groups"], fwd_ms=j["fwd_ms"],
                           fwdbwd_ms=fb, fwd_tflops_per_gpu=flops / j["fwd_ms"] * 1e-9 / gpus,
                           fwdbwd_tflops_per_gpu=3.5 * flops / fb * 1e-9 / gpus,
                           bytes_bwd_per_rank=j["bytes_bwd_per_rank"],
                           bytes_fwd_per_rank=j["bytes_fwd_per_rank"],
                           ranks_per_node=args.ranks_per_node if g > args.ranks_per_node else 0,
                           # exposed communication: the slowest rank's time blocked on transfers
                           fwd_wait_ms=max(r["fwd"]["wait_ms"] for r in j["per_rank"]),
                           bwd_wait_ms=max(r["bwd"]["wait_ms"] for r in j["per_rank"]),
                           overlap_fwd=j["overlap"]["fwd"], overlap_bwd=j["overlap"]["bwd"],
                           fwd_step_compute_ms=j["fwd_step_ms"]["compute"],
                           fwd_step_wait_ms=j["fwd_step_ms"]["wait"],
                           bwd_step_compute_ms=j["bwd_step_ms"]["compute"],
                           bwd_step_wait_ms=j["bwd_step_ms"]["wait"],
                           peak_mem_gib=j["peak_mem_gib"],
                           scratch_gib=max(j["scratch_fwd_per_rank"], j["scratch_bwd_per_rank"]) / 2**30)
                # the memory budget per rank: 8 local tensors (bf16) + two K/V blocks
                local = n // g
                row["budget_gib"] = (8 * local * h * d * 2 + 2 * 2 * local * h * d * 2) / 2**30
                # what the budget counts, without the CUDA context: the 8 tensors + the scratch
                row["tensors_scratch_gib"] = 8 * local * h * d * 2 / 2**30 + row["scratch_gib"]
                rows.append(row)
                print(json.dumps(row), flush=True)

    if not args.no_torch:
        here = os.path.dirname(os.path.abspath(__file__))
        cmd = ["torchrun", "--standalone", "--nproc_per_node", str(args.gpus),
               os.path.join(here, "ring_torch.py"), "--seqs", args.seqs, "--masks", args.masks,
               "--heads", str(h), "--head-dim", str(d), "--iters", str(args.iters),
               "--rotate", args.rotate, "--json", "ring_torch.json"]
        print("$", " ".join(cmd), flush=True)
        p = subprocess.run(cmd)
        if p.returncode == 0 and os.path.exists("ring_torch.json"):
            with open("ring_torch.json") as f:
                rows += json.load(f)

    fields = sorted({k for r in rows for k in r}, key=lambda k: (k != "impl", k))
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)

    def find(impl, n, causal, bwd=None, ws=None):
        if impl == "burst_1gpu":
            ws = "unlimited"
        for r in rows:
            if r["impl"] == impl and r["seq"] == n and r["causal"] == causal and "error" not in r \
                    and (bwd is None or r.get("bwd") == bwd) \
                    and (impl == "torch_cp" or r.get("workspace") == (ws or workspaces[0])):
                return r
        return None

    pred = predicted_bwd_ratio(h, d)
    print()
    print(f"{ranks} rank {'processes' if args.procs else 'threads'} on {args.gpus} GPU(s), bf16, "
          f"H={h}, d={d}; ms and TFLOP/s per GPU; "
          f"x torch = burst time / PyTorch time (< 1 is faster)")
    print(f"{'N':>7} {'mask':6} {'bwd':5} {'workspace':>9} {'groups':>6} | {'fwd ms':>8} {'fb ms':>8} {'fb TF/GPU':>9} | "
          f"{'torch fwd':>9} {'torch fb':>9} {'x torch':>7} | {'ovl f/b':>9} {'mem GiB':>7} {'w/o ctx':>7} "
          f"{'budget':>6} {'torch mem':>9}")
    for n in seqs:
        for mask in masks:
            c = mask == "causal"
            t = find("torch_cp", n, c)
            for bwd, ws in ((b, w) for b in args.bwd.split(",") for w in workspaces):
                b = find("burst", n, c, bwd, ws)
                if not b:
                    continue
                tf = t["fwd_ms"] if t else float("nan")
                tfb = t["fwdbwd_ms"] if t else float("nan")
                tm = t["peak_mem_gib"] if t else float("nan")
                print(f"{n:>7} {mask:6} {bwd:5} {ws:>9} {b['head_groups']:6d} | {b['fwd_ms']:8.1f} {b['fwdbwd_ms']:8.1f} "
                      f"{b['fwdbwd_tflops_per_gpu']:9.1f} | {tf:9.1f} {tfb:9.1f} "
                      f"{b['fwdbwd_ms'] / tfb:7.2f} | {b['overlap_fwd']:.2f}/{b['overlap_bwd']:.2f} "
                      f"{b['peak_mem_gib']:7.1f} {b['tensors_scratch_gib']:7.1f} {b['budget_gib']:6.1f} "
                      f"{tm:9.1f}")
            bb, br, s1 = find("burst", n, c, "burst"), find("burst", n, c, "ring"), find("burst_1gpu", n, c)
            if bb and br:
                print(f"{'':>7} {mask:6} backward bytes per rank burst / ring = "
                      f"{bb['bytes_bwd_per_rank'] / br['bytes_bwd_per_rank']:.3f} "
                      f"(ALGORITHM.md section 2 predicts {pred:.3f})")
            for ws in workspaces if s1 else ():
                b = find("burst", n, c, "burst", ws)
                if b:
                    print(f"{'':>7} {mask:6} per-GPU fwd+bwd TFLOP/s, workspace {ws} ({b['head_groups']} "
                          f"groups), vs our single GPU (1 group): {b['fwdbwd_tflops_per_gpu']:.1f} / "
                          f"{s1['fwdbwd_tflops_per_gpu']:.1f} = "
                          f"{b['fwdbwd_tflops_per_gpu'] / s1['fwdbwd_tflops_per_gpu']:.3f}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, key, title in ((axes[0], "fwd_ms", "forward"), (axes[1], "fwdbwd_ms", "forward+backward")):
            for impl, bwd, style in (("burst", "burst", "o-"), ("burst", "ring", "s-"), ("torch_cp", None, "^--")):
                for mask in masks:
                    c = mask == "causal"
                    pts = sorted((r["seq"], r[key]) for r in rows if r["impl"] == impl and r["causal"] == c
                                 and "error" not in r and (bwd is None or r.get("bwd") == bwd))
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                                label=f"{impl}{' bwd=' + bwd if bwd else ''} {mask}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("N (tokens)")
            ax.set_ylabel("ms")
            ax.set_title(f"{title}, {args.gpus} GPUs")
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.svg)
        print(f"wrote {args.csv} and {args.svg}")
    except ImportError:
        print(f"wrote {args.csv} (no matplotlib: no plot)")


if __name__ == "__main__":
    main()
