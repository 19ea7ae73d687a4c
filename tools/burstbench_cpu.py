#!/usr/bin/env python3
"""tools/burstbench_cpu.py - burst's cpu backend beside PyTorch's CPU SDPA, in one command.

Runs burstbench (the C program, which checks every forward against the fp64 reference) on one
rank with T compute threads, then torch.nn.functional.scaled_dot_product_attention on the CPU
with torch.set_num_threads(T) on the same sizes: fp32 and bf16, forward and forward+backward.
PyTorch's forward is checked on sampled rows of the first head against an fp64 computation of
the same inputs (tolerance fp32 1e-4, bf16 1.56e-2, burstbench's). Prints milliseconds, GFLOP/s
(forward 4 B H d pairs, pairs = N^2 or N(N+1)/2 causal; forward+backward 3.5x that) and burst's
speed over PyTorch's (> 1: burst faster); writes one CSV with every row. Without PyTorch
(not importable) it runs the burst side alone and says so. PyTorch is only a peer here, never a
dependency of burst.

  python3 tools/burstbench_cpu.py --exe build/tools/burstbench --threads 16 \\
      [--seqs 4096,8192] [--dims 64,128] [--masks full,causal] [--dtypes fp32,bf16] \\
      [--heads-for 4096:16,8192:8] [--iters 3] [--csv burstbench_cpu.csv] [--no-torch]

Heads: --heads-for maps a sequence length to its head count (other lengths: --heads, 16).
Smoke size: --seqs 512 --dims 64 --iters 1.
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import time

TOL = {"fp32": 1e-4, "bf16": 1.56e-2}


def pairs(n, causal):
    return n * (n + 1) // 2 if causal else n * n


def burst_rows(args, seq, heads):
    """One burstbench run for one sequence length; its CSV rows as dicts."""
    out = f"{args.csv}.burst.{seq}"
    cmd = [args.exe, "--ranks", "1", "--seqs", str(seq), "--dims", args.dims, "--masks",
           args.masks, "--dtypes", args.dtypes, "--heads", str(heads), "--batch",
           str(args.batch), "--iters", str(args.iters), "--num-threads", str(args.threads),
           "--csv", out]
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    if rc not in (0, 1):  # 1: a size failed its check (marked in the rows); keep them
        sys.exit(rc)
    with open(out) as f:
        rows = list(csv.DictReader(f))
    os.remove(out)
    res = []
    for r in rows:
        res.append(dict(impl="burst", dtype=r["dtype"], batch=int(r["batch"]),
                        heads=int(r["heads"]), seq=int(r["seq"]), head_dim=int(r["head_dim"]),
                        causal=int(r["causal"]), threads=int(r["threads"]),
                        fwd_ms=float(r["fwd_ms"]), fwdbwd_ms=float(r["fwd_bwd_ms"]),
                        max_err=float(r["fwd_rel_err"]), check=r["check"]))
    return res, rc


def torch_check(torch, q, k, v, out, causal, dtype):
    """max |out - ref| / max |ref| over 16 sampled rows of head 0, ref in fp64."""
    n = q.shape[2]
    rows = torch.linspace(0, n - 1, 16).long()
    qs = q[0, 0, rows].double()
    s = qs @ k[0, 0].double().T / math.sqrt(q.shape[3])
    if causal:
        keys = torch.arange(n)
        s = s.masked_fill(keys[None, :] > rows[:, None], float("-inf"))
    ref = torch.softmax(s, dim=-1) @ v[0, 0].double()
    err = (out[0, 0, rows].double() - ref).abs().max().item() / ref.abs().max().item()
    return err, "pass" if err <= TOL[dtype] else "fail"


def torch_row(args, torch, F, dtype, seq, d, causal, heads):
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    b = args.batch
    q, k, v, do = (torch.randn(b, heads, seq, d, dtype=dt) for _ in range(4))

    def fwd():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

    def fwdbwd():
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        F.scaled_dot_product_attention(qq, kk, vv, is_causal=bool(causal)).backward(do)

    def timed(fn):
        fn()  # warm-up
        ts = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        ts.sort()
        return ts[len(ts) // 2]

    err, check = torch_check(torch, q, k, v, fwd(), causal, dtype)
    return dict(impl="torch", dtype=dtype, batch=b, heads=heads, seq=seq, head_dim=d,
                causal=causal, threads=torch.get_num_threads(), fwd_ms=timed(fwd),
                fwdbwd_ms=timed(fwdbwd) if not args.fwd_only else float("nan"), max_err=err,
                check=check)


def heads_for(args, seq):
    m = dict(tuple(int(x) for x in kv.split(":")) for kv in args.heads_for.split(",") if kv)
    return m.get(seq, args.heads)


def print_table(rows):
    by = {(r["impl"], r["dtype"], r["seq"], r["head_dim"], r["causal"]): r for r in rows}
    keys = sorted({k[1:] for k in by}, key=lambda k: (k[0], k[1], k[3], k[2]))

    def gf(r, key, mult):
        if not r or not r[key] == r[key] or r[key] <= 0:
            return float("nan")
        return mult * 4.0 * r["batch"] * r["heads"] * r["head_dim"] * \
            pairs(r["seq"], r["causal"]) / r[key] / 1e6

    print()
    print("ms and GFLOP/s, forward | forward+backward; speedup = PyTorch ms / burst ms")
    print(f"{'dtype':5} {'N':>6} {'d':>4} {'H':>3} {'mask':6} | {'burst ms':>9} {'GF/s':>7} "
          f"{'torch ms':>9} {'GF/s':>7} {'speedup':>7} | {'burst ms':>9} {'GF/s':>7} "
          f"{'torch ms':>9} {'GF/s':>7} {'speedup':>7} | check")
    for k in keys:
        b, t = by.get(("burst",) + k), by.get(("torch",) + k)
        ref = b or t
        line = f"{k[0]:5} {k[1]:>6} {k[2]:>4} {ref['heads']:>3} {'causal' if k[3] else 'full':6} |"
        for key, mult in (("fwd_ms", 1.0), ("fwdbwd_ms", 3.5)):
            bm = b[key] if b else float("nan")
            tm = t[key] if t else float("nan")
            line += f" {bm:9.1f} {gf(b, key, mult):7.1f} {tm:9.1f} {gf(t, key, mult):7.1f}"
            line += f" {tm / bm if bm > 0 else float('nan'):7.2f} |"
        line += " burst " + (b["check"] if b else "-") + ", torch " + (t["check"] if t else "-")
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", required=True, help="burstbench")
    ap.add_argument("--threads", type=int, required=True, help="compute threads of both")
    ap.add_argument("--seqs", default="4096,8192")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--masks", default="full,causal")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--heads-for", default="4096:16,8192:8")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--fwd-only", action="store_true", help="PyTorch forward only")
    ap.add_argument("--csv", default="burstbench_cpu.csv")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    for dt in args.dtypes.split(","):
        if dt not in TOL:
            ap.error(f"--dtypes: '{dt}' is not fp32 or bf16")

    torch = F = None
    if not args.no_torch:
        try:
            import torch
            import torch.nn.functional as F
            torch.set_num_threads(args.threads)
            print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
        except ImportError as ex:
            print(f"PyTorch not importable ({ex}): burst only", flush=True)
            torch = None

    rows, failed = [], False
    for seq in (int(s) for s in args.seqs.split(",")):
        heads = heads_for(args, seq)
        r, rc = burst_rows(args, seq, heads)
        rows += r
        failed = failed or rc == 1
        if torch is None:
            continue
        for dtype in args.dtypes.split(","):
            for d in (int(x) for x in args.dims.split(",")):
                for mask in args.masks.split(","):
                    causal = 1 if mask == "causal" else 0
                    t = torch_row(args, torch, F, dtype, seq, d, causal, heads)
                    failed = failed or t["check"] != "pass"
                    rows.append(t)
                    print(f"torch {dtype} N={seq} d={d} {mask}: fwd {t['fwd_ms']:.1f} ms, "
                          f"fwd+bwd {t['fwdbwd_ms']:.1f} ms, err {t['max_err']:.2e}",
                          flush=True)
    fields = ["impl", "dtype", "batch", "heads", "seq", "head_dim", "causal", "threads",
              "fwd_ms", "fwdbwd_ms", "max_err", "check"]
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    print_table(rows)
    print(f"\nCSV: {args.csv}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
