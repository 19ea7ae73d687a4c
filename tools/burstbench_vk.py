#!/usr/bin/env python3
"""tools/burstbench_vk.py - the Vulkan backend against PyTorch SDPA on the same sizes, same GPU.

Runs `burstrun --backend vulkan` (one rank) for each Vulkan path (coopmat = the default: the
subgroup-scope kernels, fwd_cmq with its softmax in registers where the device's accumulator
layout passed its check, as their KHR builds where the device offers VK_KHR_cooperative_matrix;
coopmat_cm2 = BURST_VK_CM2=1: the kernels *_cm2 on workgroup-scope matrices first where the
device has VK_NV_cooperative_matrix2; coopmat_khr = BURST_VK_CM2=0, the default spelled out;
coopmat_nv = also BURST_VK_COOPMAT_KHR=0: their GL_NV_cooperative_matrix builds;
coopmat@BRxBC = coopmat_khr with that fwd_cmq tile (BURST_VK_CMQ_TILE); coopmat_smem =
BURST_VK_CM2=0 BURST_VK_CMQ=0: the forward fwd_cm, softmax through shared memory; tiled = BURST_VK_COOPMAT=0: the register-tiled kernels
(fwd_rt, dq_rt, dkv_rt); tiled@BRxBCxDC = the same with that tile where valid (BURST_VK_RT_TILE);
scalar = also BURST_VK_RT=0: the scalar kernels (the last resort); fp32
inputs take the *_cmq kernels in two fp16 halves up to d = 128 on the coopmat paths but
coopmat_smem, and tiled keeps them on the register-tiled ones),
forward only and (unless --fwd-only) forward+backward, with BURST_VK_PROFILE=1 so the GPU time
of the kernels themselves (timestamp queries) is reported beside burstrun's wall time (which also
counts host staging of caller tensors and the host-side output casts). Then PyTorch's
scaled_dot_product_attention with the FLASH_ATTENTION and CUDNN_ATTENTION backends (and
EFFICIENT_ATTENTION for fp32, which the other two do not take) on the same sizes. Prints a
table (TFLOP/s with the field's convention: fwd 4 B N^2 H d, halved when causal; fwd+bwd 3.5x)
and writes burstbench_vk.csv. Before timing, a small checked run (--check) of each
path guards against timing a wrong kernel; its largest error against the fp64 reference (max
|x - x64| / max |x64| per tensor, on sampled rows) is printed, and for fp32 beside it that of
PyTorch's EFFICIENT_ATTENTION against fp64 at the same size (O, dQ, dK, dV of random inputs).

    python3 tools/burstbench_vk.py --burstrun build/tools/burstrun [--seq 16384 --heads 32
        --head-dim 128 --dtype fp16 --causal] [--paths coopmat,coopmat_cm2,coopmat_nv,tiled]
        [--fwd-only]
        [--no-torch]

--head-dim takes a list (32,40,64,...): one size after the other, each beside PyTorch, with
--width W running W / d heads at head dim d (the work per score then stays the same); a list
also prints a summary line per head dim (each path against FA2) and plots TFLOP/s against the
head dim into --svg (where matplotlib is installed). The CSV has every size's rows.
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys

PATHS = {
    "coopmat": {},
    "coopmat_cm2": {"BURST_VK_CM2": "1"},  # the workgroup-scope kernels (opt-in)
    "coopmat_khr": {"BURST_VK_CM2": "0"},  # no workgroup-scope forward: the subgroup-scope one
    "coopmat_nv": {"BURST_VK_CM2": "0", "BURST_VK_COOPMAT_KHR": "0"},  # its NV builds
    # the forward's softmax through shared memory
    "coopmat_smem": {"BURST_VK_CM2": "0", "BURST_VK_CMQ": "0"},
    "tiled": {"BURST_VK_COOPMAT": "0"},
    "scalar": {"BURST_VK_COOPMAT": "0", "BURST_VK_RT": "0"},
}


def path_env(path):
    """The environment of a path name: one of PATHS, tiled@BRxBCxDC (a fwd_rt tile) or
    coopmat@BRxBC (a fwd_cmq tile)."""
    if path.startswith("tiled@"):
        return dict(PATHS["tiled"], BURST_VK_RT_TILE=path[6:].replace("x", ","))
    if path.startswith("coopmat@"):
        return dict(PATHS["coopmat_khr"], BURST_VK_CMQ_TILE=path[8:].replace("x", ","))
    return PATHS[path]


def run_burst(args, path, fwd_only, seq, check=False):
    env = dict(os.environ, BURST_VK_PROFILE="1", BURST_LOG="warn,vulkan=info", **path_env(path))
    cmd = [args.burstrun, "--threads", "-n", "1", "--backend", "vulkan", "--seq", str(seq),
           "--heads", str(args.heads), "--head-dim", str(args.head_dim), "--dtype", args.dtype,
           "--iters", str(args.iters), "--warmup", str(args.warmup), "--json"]
    if args.causal:
        cmd.append("--causal")
    if fwd_only:
        cmd.append("--fwd-only")
    if check:
        cmd += ["--check-fwd-only" if fwd_only else "--check", "--iters", "1"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    out = p.stdout.strip().splitlines()
    js = None
    for line in reversed(out):
        if line.startswith("{"):
            js = json.loads(line)
            break
    prof = {}
    for m in re.finditer(r"vulkan: profile: (\S+)\s+(\d+) dispatches\s+([\d.]+) ms"
                         r"(?: \(fastest ([\d.]+) ms\))?", p.stderr):
        fastest = float(m.group(4)) if m.group(4) else float(m.group(3)) / int(m.group(2))
        prof[m.group(1)] = (int(m.group(2)), float(m.group(3)), fastest)
    if p.returncode != 0 or js is None:
        sys.stderr.write(f"[{path}] burstrun failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}\n")
    return js, prof


def kernel_ms(prof, names):
    """GPU ms of one forward (or backward) call: the fastest dispatch of each kernel named (one
    dispatch per kernel and call on a GPU; the first calls run while the GPU clocks up)."""
    return sum(prof[n][2] for n in names if n in prof)


# PyTorch SDPA backends timed beside us: FA2 and cuDNN take fp16 / bf16; for fp32 the
# memory-efficient kernel is PyTorch's fastest (the "fp32 SDPA" compared against)
TORCH_NAMES = ("fa2", "cudnn", "efficient")


def torch_sdpa(args):
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:  # noqa: BLE001
        return {"error": f"no torch: {e}"}
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    B, H, N, d = 1, args.heads, args.seq, args.head_dim
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, N, d, device="cuda", dtype=dt)
    res = {}
    backends = {"fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for name in TORCH_NAMES:
        be = backends[name]
        if name == "efficient" and args.dtype != "fp32":
            continue
        try:
            with sdpa_kernel(be):
                def fwd():
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

                def fb():
                    o = fwd()
                    o.backward(do)

                for f, key in ((fwd, "fwd"), (fb, "fwd_bwd")):
                    for _ in range(2):
                        f()
                    torch.cuda.synchronize()
                    times = []
                    for _ in range(args.iters):
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        f()
                        e.record()
                        torch.cuda.synchronize()
                        times.append(s.elapsed_time(e))
                    res[f"{name}_{key}_ms"] = sorted(times)[len(times) // 2]
        except Exception as e:  # noqa: BLE001
            res[f"{name}_error"] = str(e)[:200]
    return res


def check_seq(args):
    """The checked run's length: --check-seq, shortened (to a multiple of 64) where burstrun's
    fp64 backward reference would exceed its 4e9 multiply-adds (N^2 H d)."""
    if args.fwd_only:
        return args.check_seq
    fit = int((3.9e9 / (args.heads * args.head_dim)) ** 0.5) // 64 * 64
    return max(64, min(args.check_seq, fit))


def torch_fp32_error(args):
    """PyTorch EFFICIENT_ATTENTION's fp32 error against fp64 at the check size: the largest
    max |x - x64| / max |x64| over O, dQ, dK, dV (random normal inputs and dO; O alone with
    --fwd-only, as burst's check then)."""
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception:  # noqa: BLE001
        return float("nan")
    B, H, N, d = 1, args.heads, check_seq(args), args.head_dim
    x = [torch.randn(B, H, N, d, device="cuda", dtype=torch.float32) for _ in range(4)]
    out = {}
    for name, dt in (("eff", torch.float32), ("ref", torch.float64)):
        q, k, v = (t.detach().to(dt).clone().requires_grad_() for t in x[:3])
        if name == "eff":
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
        else:
            with sdpa_kernel(SDPBackend.MATH):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
        if args.fwd_only:
            out[name] = [o.detach().double()]
            continue
        o.backward(x[3].to(dt))
        out[name] = [o.detach().double(), q.grad.double(), k.grad.double(), v.grad.double()]
    return max(((a - r).abs().max() / r.abs().max()).item()
               for a, r in zip(out["eff"], out["ref"]))


def bench_one(args):
    """The paths and PyTorch at one size (args.head_dim, args.heads): rows of the CSV."""
    flops_fwd = 4.0 * args.seq * args.seq * args.heads * args.head_dim * (0.5 if args.causal else 1.0)
    size = {"d": args.head_dim, "heads": args.heads, "seq": args.seq, "dtype": args.dtype,
            "causal": args.causal}
    rows = []
    for path in args.paths.split(","):
        js, _ = run_burst(args, path, args.fwd_only, check_seq(args), check=True)
        ok = js is not None and js.get("check") == "pass"
        print(f"[{path}] check at N={check_seq(args)}: {js.get('check') if js else 'failed'}"
              f" (max_rel_err {js.get('max_rel_err') if js else None})", flush=True)
        if args.dtype == "fp32" and not args.no_torch and "torch_err" not in size:
            size["torch_err"] = torch_fp32_error(args)
            print(f"torch EFFICIENT fp32 at N={check_seq(args)}: max_rel_err "
                  f"{size['torch_err']:.3g}", flush=True)
        size_err = js.get("max_rel_err") if js else None
        for fwd_only in (True,) if args.fwd_only else (True, False):
            js, prof = run_burst(args, path, fwd_only, args.seq)
            if js is None:
                continue
            wall = js["fwd_ms"] + (0.0 if fwd_only else js["bwd_ms"])
            kern = kernel_ms(prof, ["fwd", "fwd_cm", "fwd_cmq", "fwd_rt"])
            if not fwd_only:
                kern += kernel_ms(prof, ["dq", "dkv", "dq_cm", "dkv_cm", "dq_cmq", "dkv_cmq",
                                         "dq_rt", "dkv_rt", "dkvq_rt", "delta"])
            f = flops_fwd * (1.0 if fwd_only else 3.5)
            rows.append(dict(size, impl=f"vulkan-{path}", what="fwd" if fwd_only else "fwd+bwd",
                             checked=ok, max_rel_err=size_err, wall_ms=wall, kernel_ms=kern,
                             tflops_wall=f / wall / 1e9,
                             tflops_kernel=f / kern / 1e9 if kern else 0))
            print(rows[-1], flush=True)
    if not args.no_torch:
        t = torch_sdpa(args)
        print("torch:", t, flush=True)
        for name in TORCH_NAMES:
            for key, mult, what in (("fwd", 1.0, "fwd"), ("fwd_bwd", 3.5, "fwd+bwd")):
                ms = t.get(f"{name}_{key}_ms")
                if ms:
                    rows.append(dict(size, impl=f"torch-{name}", what=what, checked=True,
                                     wall_ms=ms, kernel_ms=ms,
                                     tflops_wall=flops_fwd * mult / ms / 1e9,
                                     tflops_kernel=flops_fwd * mult / ms / 1e9))
    print(f"\nB=1 N={args.seq} H={args.heads} d={args.head_dim} {args.dtype} causal={args.causal}")
    print(f"{'impl':18} {'what':8} {'kernel ms':>10} {'TFLOP/s':>8} {'wall ms':>10} {'TFLOP/s':>8}")
    for r in rows:
        print(f"{r['impl']:18} {r['what']:8} {r['kernel_ms']:10.2f} {r['tflops_kernel']:8.1f} "
              f"{r['wall_ms']:10.2f} {r['tflops_wall']:8.1f}")
    return rows


def summary(rows, dims, paths):
    """One line per head dim: each path's kernel TFLOP/s (fwd / fwd+bwd) and its ratio to FA2,
    then FA2's and cuDNN's."""
    by = {(r["d"], r["impl"], r["what"]): r["tflops_kernel"] for r in rows}

    def pair(d, impl):
        return by.get((d, impl, "fwd"), float("nan")), by.get((d, impl, "fwd+bwd"), float("nan"))

    print("\nkernel TFLOP/s, fwd / fwd+bwd (vs FA2)")
    print(f"{'d':>4} {'heads':>5} " + " ".join(f"{p:>28}" for p in paths)
          + f" {'FA2':>15} {'cuDNN':>15}")
    for d in dims:
        fa = pair(d, "torch-fa2")
        heads = next((r["heads"] for r in rows if r["d"] == d), 0)
        line = f"{d:4d} {heads:5d} "
        for p in paths:
            b = pair(d, f"vulkan-{p}")
            line += (f" {b[0]:6.1f} / {b[1]:6.1f} ({b[0] / fa[0]:4.2f} / {b[1] / fa[1]:4.2f})"
                     if fa[0] == fa[0] else f" {b[0]:6.1f} / {b[1]:6.1f}" + " " * 14)
        cu = pair(d, "torch-cudnn")
        print(line + f" {fa[0]:6.1f} / {fa[1]:6.1f} {cu[0]:6.1f} / {cu[1]:6.1f}")


def plot(rows, args):
    """TFLOP/s against the head dim, forward and forward+backward, into args.svg."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    impls = sorted({r["impl"] for r in rows})
    for ax, what in zip(axes, ("fwd", "fwd+bwd")):
        for impl in impls:
            pts = sorted((r["d"], r["tflops_kernel"]) for r in rows
                         if r["impl"] == impl and r["what"] == what)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts],
                        "o-" if impl.startswith("vulkan") else "s--", label=impl)
        ax.set_xlabel("head dim d")
        ax.set_ylabel("TFLOP/s (kernel time)")
        ax.set_title(f"{what}, {args.dtype}, N={args.seq}{', causal' if args.causal else ''}")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.svg)
    print(f"wrote {args.svg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--burstrun", default="build/tools/burstrun")
    ap.add_argument("--seq", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", default="128", help="a head dim or a list: 32,64,128")
    ap.add_argument("--width", type=int, default=0,
                    help="heads x head dim: each head dim runs width / d heads (not --heads)")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--iters", type=int, default=3)
    # the GPU clocks up during the first calls (seen at 345-420 MHz at the start of a run):
    # calls before the timed ones, whose kernel time the profile does not count apart
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--paths", default="coopmat,coopmat_cm2,coopmat_nv,tiled")
    ap.add_argument("--fwd-only", action="store_true", help="time the forward alone")
    ap.add_argument("--check-seq", type=int, default=1024)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--csv", default="burstbench_vk.csv")
    ap.add_argument("--svg", default="burstbench_vk.svg", help="the plot, for several head dims")
    args = ap.parse_args()

    dims = [int(x) for x in args.head_dim.split(",")]
    rows = []
    for d in dims:
        one = argparse.Namespace(**vars(args))
        one.head_dim = d
        one.heads = max(1, args.width // d) if args.width else args.heads
        rows += bench_one(one)
    if len(dims) > 1:
        summary(rows, dims, args.paths.split(","))
        plot(rows, args)
    with open(args.csv, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()) if rows else ["impl"],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
