#!/usr/bin/env python3
"""tools/burstbench_cuda.py - burst's cuda backend beside PyTorch SDPA, in one command.

Runs burstbench_cuda (the C program, which checks every size against an fp64 reference) on a
sweep, once per code path (--paths: "default" = what the backend picks, wgmma on Hopper;
"sm80" = the mma.sync kernels an A100 runs, BURST_CUDA_WGMMA=0), then PyTorch's
scaled_dot_product_attention on the same sizes, same GPU: FLASH_ATTENTION and CUDNN_ATTENTION
for fp16 / bf16, EFFICIENT_ATTENTION for fp32. Prints TFLOP/s and the ratios of each burst path
to FA2 and cuDNN (fp32: to EFFICIENT), then the same for the backward alone (forward+backward
time less the forward's). Writes one CSV with every row and an SVG plot. PyTorch is
only a peer here (never a dependency of burst).

  python3 tools/burstbench_cuda.py --exe build/tools/burstbench_cuda \
      [--seqs 4096,16384,32768,65536] [--dims 64,128] [--masks full,causal] \
      [--dtypes bf16,fp16] [--heads 32 | --width 2048] [--paths default,sm80] [--iters 5] \
      [--bwd-max-seq 16384] [--csv burstbench_cuda.csv] [--svg burstbench_cuda.svg]

The head-dim sweep (H = 2048 / d):
  python3 tools/burstbench_cuda.py --exe build/tools/burstbench_cuda --seqs 8192,16384 \
      --dims 32,40,64,80,96,128,160,192,256 --width 2048 --paths default,sm80

Paths: "default", "sm80" (BURST_CUDA_WGMMA=0) and "simt32" (BURST_CUDA_FP32=simt: fp32 on the
SIMT kernels instead of 3xTF32 on the tensor cores; fp16 / bf16 unchanged).

Accuracy (fp32 in --dtypes): burstbench_cuda runs once more at N = --accuracy-seq on every
head dim and mask, forward and backward, saving its inputs and outputs (--save); on those very
inputs this script computes attention and its gradients in fp64 and with PyTorch's fp32
EFFICIENT_ATTENTION, and prints max |x - x64| / max |x64| over the whole tensor of O, dQ, dK and
dV for burst and for PyTorch (CSV: *_accuracy.csv); --accuracy-seq 0 leaves it out.
"""
import os
import argparse
import csv
import subprocess
import sys


def torch_rows(args, sizes):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    half = [("torch_fa2", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)]
    full = [("torch_eff", SDPBackend.EFFICIENT_ATTENTION)]
    for (dtype, n, d, causal, h) in sizes:
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
        backends = full if dtype == "fp32" else half
        b = args.batch
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


def accuracy_rows(args, env):
    """fp32 errors against fp64 of burst and of PyTorch EFFICIENT on the same inputs: O, and the
    gradients dQ, dK, dV of a random dO; each max |x - x64| / max |x64| over the whole tensor."""
    import tempfile
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    n = args.accuracy_seq
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [args.exe, "--seqs", str(n), "--dims", args.dims, "--masks", args.masks,
               "--dtypes", "fp32", "--heads", str(args.heads), "--width", str(args.width),
               "--batch", "1", "--iters", "1", "--bwd-max-seq", str(n), "--save", tmp,
               "--csv", os.path.join(tmp, "acc.csv")]
        print("$", " ".join(cmd), flush=True)
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode not in (0, 1):
            return rows
        names = ("o", "dq", "dk", "dv")
        for d in (int(x) for x in args.dims.split(",")):
            h = max(args.width // d, 1) if args.width > 0 else args.heads
            for causal in [c for c in (0, 1) if ("causal" if c else "full") in args.masks]:
                tag = os.path.join(tmp, f"fp32_{n}_{d}_{'causal' if causal else 'full'}_")
                t = {x: torch.from_numpy(np.fromfile(tag + x + ".bin", dtype=np.float32))
                     .view(1, n, h, d).transpose(1, 2).cuda()
                     for x in ("q", "k", "v", "do") + names}
                q, k, v = (t[x].clone().requires_grad_() for x in "qkv")
                with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                    ot = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                ot.backward(t["do"])
                peer = dict(zip(names, (ot.detach(), q.grad, k.grad, v.grad)))
                err = {(impl, x): 0.0 for impl in ("burst", "torch_eff") for x in names}
                mag = dict.fromkeys(names, 0.0)
                for hh in range(h):  # fp64 one head at a time: N^2 doubles per head
                    q64, k64, v64 = (t[x][:, hh].double().requires_grad_() for x in "qkv")
                    s = q64 @ k64.transpose(-1, -2) / d ** 0.5
                    if causal:
                        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda")
                                          .triu(1), float("-inf"))
                    o64 = torch.softmax(s, dim=-1) @ v64
                    o64.backward(t["do"][:, hh].double())
                    ref = dict(zip(names, (o64.detach(), q64.grad, k64.grad, v64.grad)))
                    for x in names:
                        mag[x] = max(mag[x], ref[x].abs().max().item())
                        for impl, src in (("burst", t), ("torch_eff", peer)):
                            e = (src[x][:, hh].double() - ref[x]).abs().max().item()
                            err[(impl, x)] = max(err[(impl, x)], e)
                    del s, o64, ref
                for impl in ("burst", "torch_eff"):
                    rows.append(dict(impl=impl, dtype="fp32", heads=h, seq=n, head_dim=d,
                                     causal=causal, **{x: err[(impl, x)] / mag[x] for x in names}))
                del t, q, k, v, ot, peer
                torch.cuda.empty_cache()
    return rows


def print_accuracy(args, rows):
    names = ("o", "dq", "dk", "dv")
    print()
    print(f"fp32 accuracy on the same inputs (N = {args.accuracy_seq}): max |x - x64| / max |x64|,"
          " burst / PyTorch EFFICIENT (ratio)")
    print(f"{'d':>4} {'H':>3} {'causal':>6} |" + "".join(f" {x:>26} |" for x in names))
    by = {(r["impl"], r["head_dim"], r["causal"]): r for r in rows}
    for (impl, d, c), r in sorted(by.items(), key=lambda x: (x[0][1], x[0][2])):
        if impl != "burst":
            continue
        t = by.get(("torch_eff", d, c), {})
        line = f"{d:>4} {r['heads']:>3} {('yes' if c else 'no'):>6} |"
        for x in names:
            tx = t.get(x, float("nan"))
            line += f" {r[x]:8.2e} / {tx:8.2e} ({r[x] / tx if tx else float('nan'):5.2f}) |"
        print(line)
    path = args.csv.replace(".csv", "") + "_accuracy.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["impl", "dtype", "heads", "seq", "head_dim", "causal"]
                           + list(names))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")


def bwd_tflops(r):
    """The backward alone: forward+backward time less the forward's, 2.5x the forward's FLOPs
    (docs/BENCHMARKS.md, conventions); nan where a time is missing."""
    if not r:
        return float("nan")
    f, fb, ft = r["fwd_ms"], r["fwdbwd_ms"], r["fwd_tflops"]
    return 2.5 * ft * f / (fb - f) if fb == fb and f == f and fb > f else float("nan")


def print_backward(sizes, impls, by):
    """The backward alone of every implementation, beside FA2's (or EFFICIENT's) and cuDNN's."""
    print()
    print("TFLOP/s of the backward alone (forward+backward time less the forward's); ratios to FA2"
          " and cuDNN")
    head = f"{'dtype':5} {'N':>6} {'d':>4} {'H':>3} {'causal':>6} |"
    for i in impls:
        head += f" {i:>12} {'/FA2':>5} {'/cuDNN':>6} |"
    print(head + f" {'FA2 (EFF)':>9} {'cuDNN':>7}")
    for s in sizes:
        key = s[:4]
        fa = bwd_tflops(by.get(("torch_fa2",) + key) or by.get(("torch_eff",) + key))
        cu = bwd_tflops(by.get(("torch_cudnn",) + key))
        line = f"{s[0]:5} {s[1]:>6} {s[2]:>4} {s[4]:>3} {('yes' if s[3] else 'no'):>6} |"
        for i in impls:
            b = bwd_tflops(by.get((i,) + key))
            line += f" {b:12.1f} {b / fa if fa == fa else float('nan'):5.2f}"
            line += f" {b / cu if cu == cu else float('nan'):6.2f} |"
        print(line + f" {fa:9.1f} {cu:7.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", required=True)
    ap.add_argument("--seqs", default="4096,16384,32768,65536")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--masks", default="full,causal")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--width", type=int, default=0, help="heads = width / d (overrides --heads)")
    ap.add_argument("--paths", default="default", help="default,sm80,simt32")
    ap.add_argument("--accuracy-seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--bwd-max-seq", type=int, default=16384)
    ap.add_argument("--csv", default="burstbench_cuda.csv")
    ap.add_argument("--svg", default="burstbench_cuda.svg")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()

    rows, failed = [], False
    for path in args.paths.split(","):
        impl = "burst" if path == "default" else "burst_" + path
        env = dict(os.environ)
        if path == "sm80":
            env["BURST_CUDA_WGMMA"] = "0"
        if path == "simt32":
            env["BURST_CUDA_FP32"] = "simt"
        out = args.csv + "." + impl
        cmd = [args.exe, "--seqs", args.seqs, "--dims", args.dims, "--masks", args.masks,
               "--dtypes", args.dtypes, "--heads", str(args.heads), "--width", str(args.width),
               "--batch", str(args.batch), "--iters", str(args.iters), "--bwd-max-seq",
               str(args.bwd_max_seq), "--impl", impl, "--csv", out]
        pre = {"sm80": "BURST_CUDA_WGMMA=0 ", "simt32": "BURST_CUDA_FP32=simt "}.get(path, "")
        print("$", pre + " ".join(cmd), flush=True)
        rc = subprocess.run(cmd, env=env).returncode
        if rc not in (0, 1):  # 1: a size failed its check (marked in the table); keep the rows
            sys.exit(rc)
        failed = failed or rc == 1
        with open(out) as f:
            rows += [dict(r) for r in csv.DictReader(f)]
        os.remove(out)
    for r in rows:
        for key in ("batch", "heads", "seq", "head_dim", "causal"):
            r[key] = int(r[key])
        for key in ("fwd_ms", "fwd_tflops", "fwdbwd_ms", "fwdbwd_tflops", "max_err"):
            r[key] = float(r[key])
    sizes = sorted({(r["dtype"], r["seq"], r["head_dim"], r["causal"], r["heads"]) for r in rows},
                   key=lambda x: (x[0], x[1], x[3], x[2]))
    if not args.no_torch:
        rows += torch_rows(args, sizes)
    fields = ["impl", "dtype", "batch", "heads", "seq", "head_dim", "causal", "fwd_ms", "fwd_tflops",
              "fwdbwd_ms", "fwdbwd_tflops", "max_err"]
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)

    by = {(r["impl"],) + (r["dtype"], r["seq"], r["head_dim"], r["causal"]): r for r in rows}
    impls = [i for i in ("burst", "burst_sm80", "burst_simt32") if any(r["impl"] == i for r in rows)]

    def g(r, k):
        return r[k] if r else float("nan")

    def ratio(x, y):
        return x / y if y and y == y else float("nan")

    print()
    print("TFLOP/s forward / forward+backward; ratios to FA2 and cuDNN (fp32: PyTorch EFFICIENT)")
    head = f"{'dtype':5} {'N':>6} {'d':>4} {'H':>3} {'causal':>6} |"
    for i in impls:
        head += f" {i:>17} {'/FA2':>9} {'/cuDNN':>9} |"
    head += f" {'FA2 (EFF)':>13} {'cuDNN':>13}"
    print(head)
    for s in sizes:
        key = s[:4]
        fa = by.get(("torch_fa2",) + key) or by.get(("torch_eff",) + key)
        cu = by.get(("torch_cudnn",) + key)
        line = f"{s[0]:5} {s[1]:>6} {s[2]:>4} {s[4]:>3} {('yes' if s[3] else 'no'):>6} |"
        for i in impls:
            b = by.get((i,) + key)
            line += (f" {g(b, 'fwd_tflops'):7.1f} / {g(b, 'fwdbwd_tflops'):7.1f}"
                     f" {ratio(g(b, 'fwd_tflops'), g(fa, 'fwd_tflops')):4.2f}/"
                     f"{ratio(g(b, 'fwdbwd_tflops'), g(fa, 'fwdbwd_tflops')):4.2f}"
                     f" {ratio(g(b, 'fwd_tflops'), g(cu, 'fwd_tflops')):4.2f}/"
                     f"{ratio(g(b, 'fwdbwd_tflops'), g(cu, 'fwdbwd_tflops')):4.2f} |")
        line += (f" {g(fa, 'fwd_tflops'):5.1f} / {g(fa, 'fwdbwd_tflops'):5.1f}"
                 f" {g(cu, 'fwd_tflops'):5.1f} / {g(cu, 'fwdbwd_tflops'):5.1f}")
        print(line)
    print_backward(sizes, impls, by)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, key, title in ((axes[0], "fwd_tflops", "forward"), (axes[1], "fwdbwd_tflops", "forward+backward")):
            for impl, style in (("burst", "o-"), ("burst_sm80", "D-"), ("burst_simt32", "x-"),
                                ("torch_fa2", "s--"),
                                ("torch_cudnn", "^:"), ("torch_eff", "v:")):
                for (dt, n, c) in sorted({(s[0], s[1], s[3]) for s in sizes}):
                    pts = sorted((r["head_dim"], r[key]) for r in rows if r["impl"] == impl
                                 and r["dtype"] == dt and r["seq"] == n and r["causal"] == c
                                 and r[key] == r[key])
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                                label=f"{impl} {dt} N={n}{' causal' if c else ''}")
            ax.set_xlabel("head dim d")
            ax.set_ylabel("TFLOP/s")
            ax.set_title(title)
        axes[1].legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(args.svg)
        print(f"wrote {args.csv} and {args.svg}")
    except ImportError:
        print(f"wrote {args.csv} (no matplotlib: no plot)")
    if "fp32" in args.dtypes and not args.no_torch and args.accuracy_seq > 0:
        print_accuracy(args, accuracy_rows(args, dict(os.environ)))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
