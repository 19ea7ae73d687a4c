#!/usr/bin/env python3
"""tools/burstbench_cuda.py - burst's cuda backend beside PyTorch SDPA, in one command.

Runs burstbench_cuda (the C program) on a sweep, then PyTorch's scaled_dot_product_attention
with the FLASH_ATTENTION and CUDNN_ATTENTION backends on the same sizes, same GPU, and prints
TFLOP/s and the ratios burst / FA2 and burst / cuDNN. Writes one CSV with every row and an SVG
plot. PyTorch is only a peer here (never a dependency of burst).

  python3 tools/burstbench_cuda.py --exe build/tools/burstbench_cuda \
      [--seqs 4096,16384,32768,65536] [--dims 64,128] [--masks full,causal] \
      [--dtypes bf16,fp16] [--heads 32] [--iters 5] [--bwd-max-seq 16384] \
      [--csv burstbench_cuda.csv] [--svg burstbench_cuda.svg]
"""
import argparse
import csv
import subprocess
import sys


def torch_rows(args, sizes):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    backends = [("torch_fa2", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)]
    for (dtype, n, d, causal) in sizes:
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        b, h = args.batch, args.heads
        q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=dt) for _ in range(4))
        flops = 4.0 * b * h * d * n * n * (0.5 if causal else 1.0)
        for name, be in backends:
            try:
                with sdpa_kernel(be):
                    def fwd():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

                    def fwdbwd():
                        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                        out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=bool(causal))
                        out.backward(do)

                    def timed(fn, it):
                        fn()
                        torch.cuda.synchronize()
                        ts = []
                        for _ in range(it):
                            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            s.record()
                            fn()
                            e.record()
                            torch.cuda.synchronize()
                            ts.append(s.elapsed_time(e))
                        ts.sort()
                        return ts[len(ts) // 2]

                    tf = timed(fwd, args.iters)
                    tb = timed(fwdbwd, args.iters) if n <= args.bwd_max_seq else float("nan")
                rows.append(dict(impl=name, dtype=dtype, batch=b, heads=h, seq=n, head_dim=d,
                                 causal=causal, fwd_ms=tf, fwd_tflops=flops / tf * 1e-9,
                                 fwdbwd_ms=tb, fwdbwd_tflops=3.5 * flops / tb * 1e-9))
            except Exception as ex:  # a backend that refuses a size: say so, keep going
                print(f"{name} {dtype} N={n} d={d} causal={causal}: {ex}", file=sys.stderr)
        del q, k, v, do
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", required=True)
    ap.add_argument("--seqs", default="4096,16384,32768,65536")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--masks", default="full,causal")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--bwd-max-seq", type=int, default=16384)
    ap.add_argument("--csv", default="burstbench_cuda.csv")
    ap.add_argument("--svg", default="burstbench_cuda.svg")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()

    cmd = [args.exe, "--seqs", args.seqs, "--dims", args.dims, "--masks", args.masks,
           "--dtypes", args.dtypes, "--heads", str(args.heads), "--batch", str(args.batch),
           "--iters", str(args.iters), "--bwd-max-seq", str(args.bwd_max_seq), "--csv", args.csv]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(args.csv) as f:
        rows = [dict(r) for r in csv.DictReader(f)]
    for r in rows:
        for key in ("batch", "heads", "seq", "head_dim", "causal"):
            r[key] = int(r[key])
        for key in ("fwd_ms", "fwd_tflops", "fwdbwd_ms", "fwdbwd_tflops"):
            r[key] = float(r[key])
    sizes = [(r["dtype"], r["seq"], r["head_dim"], r["causal"]) for r in rows]
    if not args.no_torch:
        rows += torch_rows(args, sizes)
    fields = ["impl", "dtype", "batch", "heads", "seq", "head_dim", "causal", "fwd_ms", "fwd_tflops",
              "fwdbwd_ms", "fwdbwd_tflops"]
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)

    by = {(r["impl"],) + (r["dtype"], r["seq"], r["head_dim"], r["causal"]): r for r in rows}
    print()
    print(f"{'dtype':5} {'N':>6} {'d':>4} {'causal':>6} | {'burst':>6} {'FA2':>6} {'cuDNN':>6} "
          f"{'/FA2':>5} {'/cuDNN':>6} | fwd+bwd {'burst':>6} {'FA2':>6} {'cuDNN':>6} {'/FA2':>5}"
          f" {'/cuDNN':>6}   (TFLOP/s)")
    for s in sizes:
        b, fa, cu = (by.get((i,) + s) for i in ("burst", "torch_fa2", "torch_cudnn"))
        def g(r, k):
            return r[k] if r else float("nan")
        def ratio(x, y):
            return x / y if y and y == y else float("nan")
        print(f"{s[0]:5} {s[1]:>6} {s[2]:>4} {('yes' if s[3] else 'no'):>6} | "
              f"{g(b, 'fwd_tflops'):6.1f} {g(fa, 'fwd_tflops'):6.1f} {g(cu, 'fwd_tflops'):6.1f} "
              f"{ratio(g(b, 'fwd_tflops'), g(fa, 'fwd_tflops')):5.2f} "
              f"{ratio(g(b, 'fwd_tflops'), g(cu, 'fwd_tflops')):6.2f} |         "
              f"{g(b, 'fwdbwd_tflops'):6.1f} {g(fa, 'fwdbwd_tflops'):6.1f} {g(cu, 'fwdbwd_tflops'):6.1f} "
              f"{ratio(g(b, 'fwdbwd_tflops'), g(fa, 'fwdbwd_tflops')):5.2f} "
              f"{ratio(g(b, 'fwdbwd_tflops'), g(cu, 'fwdbwd_tflops')):6.2f}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, key, title in ((axes[0], "fwd_tflops", "forward"), (axes[1], "fwdbwd_tflops", "forward+backward")):
            for impl, style in (("burst", "o-"), ("torch_fa2", "s--"), ("torch_cudnn", "^:")):
                for (dt, d, c) in sorted({(s[0], s[2], s[3]) for s in sizes}):
                    pts = sorted((r["seq"], r[key]) for r in rows if r["impl"] == impl and r["dtype"] == dt
                                 and r["head_dim"] == d and r["causal"] == c and r[key] == r[key])
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                                label=f"{impl} {dt} d={d}{' causal' if c else ''}")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("N")
            ax.set_ylabel("TFLOP/s")
            ax.set_title(title)
        axes[1].legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(args.svg)
        print(f"wrote {args.csv} and {args.svg}")
    except ImportError:
        print(f"wrote {args.csv} (no matplotlib: no plot)")


if __name__ == "__main__":
    main()
