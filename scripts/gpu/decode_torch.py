#!/usr/bin/env python3
"""scripts/gpu/decode_torch.py - burst's decode step beside PyTorch SDPA, in one command.

Runs tools/burstbench_decode (the C program: the cuda backend's decode_step over a paged cache,
checked against fp64 up to --check-max keys) on a sweep, then PyTorch's
scaled_dot_product_attention on the same GPU with a [1, Hq, t, d] query against [1, Hkv, N, d]
keys and values (contiguous: PyTorch has no paged cache here), and prints one table: microseconds
per step, GB/s of K and V read and % of the device copy bandwidth burstbench_decode measured.
PyTorch variants:
  torch_gqa      SDPA with enable_gqa=True on [1, Hkv, N, d] (whatever backend PyTorch picks)
  torch_fa_rep   K and V expanded to Hq heads beforehand (not timed), FLASH_ATTENTION: reads
                 Hq / Hkv times the bytes (its GB/s counts the bytes it reads)
  torch_eff_rep  the same on EFFICIENT_ATTENTION
A variant PyTorch refuses is left out.

With --burstrun, a second table gives the latency of one whole step as a caller sees it: burst's
public burst_decode (burstrun --prefill N --decode STEPS, one rank: the new token's K/V appended to
the cache, the attention, the output written, the call returning once it is done; median and p99
over the steps) beside SDPA (torch_gqa) called and then waited for (torch.cuda.synchronize) each
step, median and p99 of the wall time. With t > 1 PyTorch runs no mask (SDPA's is_causal aligns
the top left, not the decode step's bottom right): a timing peer only. PyTorch is a peer here,
never a dependency of burst.

  python3 scripts/gpu/decode_torch.py --exe build/tools/burstbench_decode \
      [--ctx 8192,32768,131072,262144,524288,1048576] [--t 1,4] [--block-lens 256,16] \
      [--hq 32] [--hkv 8] [--d 128] [--dtype bf16] [--iters 50] [--csv decode.csv] \
      [--burstrun build/tools/burstrun --api-ctx 131072,1048576 --api-steps 200]
"""
import argparse
import csv
import json
import subprocess
import sys
import time


def burst_rows(args):
    cmd = [args.exe, "--ctx", args.ctx, "--t", args.t, "--block-lens", args.block_lens,
           "--hq", str(args.hq), "--hkv", str(args.hkv), "--d", str(args.d), "--dtype", args.dtype,
           "--iters", str(args.iters), "--check-max", str(args.check_max), "--csv",
           args.csv + ".burst"]
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(r.stdout)
    rows = []
    try:
        with open(args.csv + ".burst") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        pass
    return rows, r.returncode


def torch_qkv(torch, args, n, t):
    """A [1, Hq, t, d] query and [1, Hkv, n, d] keys and values on the GPU, in args.dtype."""
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    return (torch.randn(1, args.hq, t, args.d, device="cuda", dtype=dt),
            torch.randn(1, args.hkv, n, args.d, device="cuda", dtype=dt),
            torch.randn(1, args.hkv, n, args.d, device="cuda", dtype=dt))


def torch_rows(args, peak):
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"PyTorch not available ({e}): burst only")
        return []
    es = {"bf16": 2, "fp16": 2, "fp32": 4}[args.dtype]
    rows = []
    for n in (int(x) for x in args.ctx.split(",")):
        for t in (int(x) for x in args.t.split(",")):
            q, k, v = torch_qkv(torch, args, n, t)
            rep = args.hq // args.hkv
            variants = [("torch_gqa", None, k, v, {"enable_gqa": True}, 1)]
            kr = vr = None
            try:
                kr = k.repeat_interleave(rep, dim=1)
                vr = v.repeat_interleave(rep, dim=1)
                variants += [("torch_fa_rep", SDPBackend.FLASH_ATTENTION, kr, vr, {}, rep),
                             ("torch_eff_rep", SDPBackend.EFFICIENT_ATTENTION, kr, vr, {}, rep)]
            except RuntimeError as e:  # out of memory at the longest contexts
                print(f"torch: no expanded K/V at N = {n}: {e}")
            for name, be, kk, vv, kw, mult in variants:
                try:
                    def step():
                        return F.scaled_dot_product_attention(q, kk, vv, **kw)

                    if be is not None:
                        with sdpa_kernel(be):
                            us = time_it(torch, step, args.iters)
                    else:
                        us = time_it(torch, step, args.iters)
                except (RuntimeError, TypeError) as e:
                    print(f"torch {name} N={n} t={t}: not run ({str(e).splitlines()[0][:100]})")
                    continue
                gbps = 2.0 * n * args.hkv * mult * args.d * es / (us * 1e-6) / 1e9
                rows.append({"impl": name, "dtype": args.dtype, "ctx": str(n), "t": str(t),
                             "block_len": "-", "us_per_step": f"{us:.3f}", "gbps": f"{gbps:.1f}",
                             "pct_peak": f"{100 * gbps / peak:.2f}" if peak > 0 else "0",
                             "max_err": "nan"})
            del q, k, v, kr, vr, variants
            torch.cuda.empty_cache()
    return rows


def api_rows(args):
    """burst_decode's step latency through burstrun, one rank, per (ctx, t)."""
    rows = []
    for n in (int(x) for x in args.api_ctx.split(",")):
        for t in (int(x) for x in args.t.split(",")):
            cmd = [args.burstrun, "--backend", "cuda", "--threads", "-n", "1", "--prefill",
                   str(n), "--decode", str(args.api_steps), "--spec", str(t), "--heads",
                   str(args.hq), "--kv-heads", str(args.hkv), "--head-dim", str(args.d),
                   "--dtype", args.dtype, "--json"]
            print("+", " ".join(cmd), flush=True)
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            js = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
            try:
                j = json.loads(js[-1])
            except (IndexError, ValueError):
                print(r.stdout[-2000:])
                continue
            rows.append({"impl": "burst_decode", "ctx": n, "t": t,
                         "median_us": 1e3 * j["step_ms_median"], "p99_us": 1e3 * j["step_ms_p99"]})
    return rows


def torch_sync_rows(args):
    """SDPA (enable_gqa) launched and waited for, each step: wall-time median and p99."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return []
    rows = []
    for n in (int(x) for x in args.api_ctx.split(",")):
        for t in (int(x) for x in args.t.split(",")):
            q, k, v = torch_qkv(torch, args, n, t)
            ts = []
            for it in range(args.api_steps + 10):
                t0 = time.perf_counter()
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                torch.cuda.synchronize()
                if it >= 10:
                    ts.append(time.perf_counter() - t0)
            ts.sort()
            rows.append({"impl": "torch_gqa+sync", "ctx": n, "t": t,
                         "median_us": 1e6 * ts[len(ts) // 2],
                         "p99_us": 1e6 * ts[min(len(ts) - 1, int(0.99 * len(ts)))]})
            del q, k, v
            torch.cuda.empty_cache()
    return rows


def print_latency(args, rows):
    with open(args.csv + ".latency", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["impl", "ctx", "t", "median_us", "p99_us"])
        w.writeheader()
        w.writerows(rows)
    print(f"\none step as a caller sees it (synchronous), {args.dtype}, Hq {args.hq}, "
          f"Hkv {args.hkv}, d {args.d}")
    print(f"{'ctx':>8} {'t':>3} {'impl':<16} {'median us':>10} {'p99 us':>9} {'x torch':>8}")
    for key in sorted({(r["ctx"], r["t"]) for r in rows}):
        group = [r for r in rows if (r["ctx"], r["t"]) == key]
        peer = [r["median_us"] for r in group if r["impl"].startswith("torch")]
        for r in group:
            ratio = f"{peer[0] / r['median_us']:.2f}x" if peer and r["impl"] == "burst_decode" \
                else ""
            print(f"{key[0]:>8} {key[1]:>3} {r['impl']:<16} {r['median_us']:>10.1f} "
                  f"{r['p99_us']:>9.1f} {ratio:>8}")
    print("(x torch: SDPA's median / burst_decode's; > 1 = burst faster. burst_decode also "
          "appends the step's K/V to its cache)")


def time_it(torch, step, iters):
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        step()
    e.record()
    torch.cuda.synchronize()
    return 1e3 * s.elapsed_time(e) / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", required=True)
    ap.add_argument("--ctx", default="8192,32768,131072,262144,524288,1048576")
    ap.add_argument("--t", default="1,4")
    ap.add_argument("--block-lens", default="256,16")
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--check-max", type=int, default=131072)
    ap.add_argument("--csv", default="decode.csv")
    ap.add_argument("--burstrun", help="burstrun, for the synchronous step latency table")
    ap.add_argument("--api-ctx", default="131072,1048576")
    ap.add_argument("--api-steps", type=int, default=200)
    args = ap.parse_args()
    brows, rc = burst_rows(args)
    peak = float(brows[0]["peak_gbps"]) if brows else 0.0
    trows = torch_rows(args, peak)
    rows = brows + trows
    fields = ["impl", "dtype", "ctx", "t", "block_len", "us_per_step", "gbps", "pct_peak",
              "max_err"]
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print(f"\ndecode step, {args.dtype}, Hq {args.hq}, Hkv {args.hkv}, d {args.d}; copy bandwidth "
          f"{peak:.0f} GB/s")
    print(f"{'ctx':>8} {'t':>3} {'impl':<14} {'bl':>5} {'us/step':>10} {'GB/s':>8} {'%peak':>6} "
          f"{'vs best torch':>13}")
    key = lambda r: (int(r["ctx"]), int(r["t"]))
    for ctx_t in sorted({key(r) for r in rows}):
        group = [r for r in rows if key(r) == ctx_t]
        best = min((float(r["us_per_step"]) for r in group if r["impl"].startswith("torch")),
                   default=0.0)
        for r in group:
            us = float(r["us_per_step"])
            ratio = f"{best / us:.2f}x" if best > 0 and r["impl"] == "burst" else ""
            print(f"{ctx_t[0]:>8} {ctx_t[1]:>3} {r['impl']:<14} {r['block_len']:>5} {us:>10.1f} "
                  f"{float(r['gbps']):>8.0f} {float(r['pct_peak']):>6.1f} {ratio:>13}")
    print("(vs best torch: the fastest PyTorch variant's time / burst's; > 1 = burst faster)")
    if args.burstrun:
        print_latency(args, api_rows(args) + torch_sync_rows(args))
    return rc


if __name__ == "__main__":
    sys.exit(main())
