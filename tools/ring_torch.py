#!/usr/bin/env python3
"""tools/ring_torch.py - the peer of burst's GPU ring: PyTorch's context_parallel ring attention.

Run under torchrun, one process per GPU (burstbench_ring.py does it in the same command as the
burst runs):

  torchrun --nproc_per_node 2 tools/ring_torch.py --seqs 32768,131072 --masks causal,full \
      [--heads 32] [--head-dim 128] [--iters 3] [--rotate default|allgather|alltoall] \
      [--json ring_torch.json]

Each size: global q, k, v, dO of shape [1, H, N, d] bf16 (same seed on every rank),
`context_parallel(mesh, buffers=[q, k, v, dO], buffer_seq_dims=[2, 2, 2, 2])` shards them in
place (head-tail load balancing for causal; non-causal runs with load balancing off, which
context_parallel requires), and F.scaled_dot_product_attention under the FLASH_ATTENTION backend
runs the ring. Times are CUDA events on rank 0 after a barrier, median of --iters after one
warm-up; peak memory is torch.cuda.max_memory_allocated per rank. Rank 0 prints one JSON object
per line and writes them all to --json. PyTorch is a peer and an oracle here, never part of burst.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", default="32768,131072")
    ap.add_argument("--masks", default="causal,full")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--rotate", default="default", choices=["default", "allgather", "alltoall"])
    ap.add_argument("--json", default="ring_torch.json")
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental import _attention as cp_attn
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    mesh = init_device_mesh("cuda", (world,))
    if a.rotate != "default":
        cp_attn.set_rotate_method(a.rotate)
    rows = []
    for n in [int(x) for x in a.seqs.split(",")]:
        for mask in a.masks.split(","):
            causal = mask == "causal"
            cp_attn._cp_options.enable_load_balance = causal
            g = torch.Generator(device="cuda").manual_seed(1234)
            shape = (1, a.heads, n, a.head_dim)
            q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g)
                           for _ in range(4))
            torch.cuda.reset_peak_memory_stats()
            try:
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION), \
                        context_parallel(mesh, buffers=[q, k, v, do], buffer_seq_dims=[2, 2, 2, 2]):
                    def fwd():
                        with torch.no_grad():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                    def fwdbwd():
                        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                        out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                        out.backward(do)

                    def timed(fn):
                        fn()
                        ts = []
                        for _ in range(a.iters):
                            dist.barrier()
                            torch.cuda.synchronize()
                            s = torch.cuda.Event(enable_timing=True)
                            e = torch.cuda.Event(enable_timing=True)
                            s.record()
                            fn()
                            e.record()
                            torch.cuda.synchronize()
                            ts.append(s.elapsed_time(e))
                        t = torch.tensor([sorted(ts)[len(ts) // 2]], device="cuda")
                        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the ring ends with its slowest rank
                        return float(t.item())

                    tf = timed(fwd)
                    tfb = timed(fwdbwd)
                peak = torch.tensor([float(torch.cuda.max_memory_allocated())], device="cuda")
                dist.all_reduce(peak, op=dist.ReduceOp.MAX)
                flops = 4.0 * a.heads * a.head_dim * n * n * (0.5 if causal else 1.0)
                row = dict(impl="torch_cp", gpus=world, seq=n, causal=causal, heads=a.heads,
                           head_dim=a.head_dim, rotate=a.rotate, fwd_ms=tf, fwdbwd_ms=tfb,
                           fwd_tflops_per_gpu=flops / tf * 1e-9 / world,
                           fwdbwd_tflops_per_gpu=3.5 * flops / tfb * 1e-9 / world,
                           peak_mem_gib=peak.item() / 2**30)
            except Exception as ex:  # a size or mask PyTorch refuses: say so, keep going
                row = dict(impl="torch_cp", gpus=world, seq=n, causal=causal, error=str(ex)[:300])
            if rank == 0:
                print(json.dumps(row), flush=True)
                rows.append(row)
            del q, k, v, do
            torch.cuda.empty_cache()
    if rank == 0:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
