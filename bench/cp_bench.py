#!/usr/bin/env python3
"""Context-parallel verify across R GPUs against one GPU holding the whole cache.

    python3 bench/cp_bench.py --gpus R [--batch 16] [--heads 16] [--qlen 4] \
        [--prefix 32768,131072] [--stripe 1] [--reps 50] [--out cp.csv]

One process per GPU (torch.multiprocessing, NCCL; NCCL_NVLS_ENABLE=0). Per prefix: GPU 0 first
times the unsharded verify of the whole cache (a Plan, one CUDA graph); then every rank builds its
KV shard (token round robin by default: `--stripe`), captures its sharded Plan's run, and the
exchange and merge (mv.cp_merge_states over the world group, scratch preallocated) in one graph,
and the ranks time their replays together (a barrier before each replay, CUDA events around
it, the median; the step's time is the slowest rank's). Reported: one-GPU time, the sharded
verify alone, the exchange + merge alone and the whole step, and the fraction of the ideal R-fold
reduction kept: one_gpu / (R x step). BF16, page_size 64 with shuffled pages, causal chains,
random data; the L2 is not flushed (the shards' sizes differ from the whole cache's; a flush
would charge each side differently), so read the figures as steady-state replays.

`--backend cpu` runs the same plumbing on the CPU backend over gloo, with small dims and
perf_counter timing: a check of the script, not a benchmark.
"""
import argparse
import math
import os
import sys
import time

import numpy as np

D_L, D_R, PAGE = 512, 64, 64


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, required=True, help="ranks R (GPUs, or CPU processes)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--qlen", type=int, default=4)
    ap.add_argument("--prefix", default="32768,131072")
    ap.add_argument("--stripe", type=int, default=1)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", default=None, help="CSV of the rows (rank 0 writes it)")
    return ap.parse_args()


def shard_rows(n, ranks, rank, stripe):
    """Rows of a request of n KV rows that the rank holds (src/common/shard.h's n_r)."""
    full, rem = divmod(n, stripe * ranks)
    return full * stripe + min(max(rem - rank * stripe, 0), stripe)


def timer(torch, cuda):
    if not cuda:
        def t(fn, reps):
            ts = []
            for _ in range(reps):
                a = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - a) * 1e6)
            return float(np.median(ts))
        return t

    def t(fn, reps, barrier=None):
        ts = []
        for _ in range(reps):
            if barrier:
                barrier()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) * 1e3)
        return float(np.median(ts))
    return t


def graph_of(torch, fn, cuda):
    """A callable that replays fn: a CUDA graph of it (warmed up on a side stream), or fn."""
    if not cuda:
        fn()
        return fn
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g.replay


def problem(a, prefix, cuda):
    H = a.heads if cuda else 2
    dl, dr = (D_L, D_R) if cuda else (32, 8)
    kv_len = prefix + a.qlen
    return dict(num_heads=H, d_latent=dl, d_rope=dr, softmax_scale=1.0 / math.sqrt(192.0),
                dtype="bf16" if cuda else "f32", page_size=PAGE,
                q_indptr=np.arange(a.batch + 1, dtype=np.int32) * a.qlen,
                kv_lens=np.full(a.batch, kv_len, dtype=np.int32)), kv_len


def cache_for(torch, rows, batch, width, dev, dtype, gen):
    """A pool of shuffled pages holding `rows` rows of each request, and its page table."""
    pages = max(1, -(-rows // PAGE))
    pool = torch.randn(batch * pages, PAGE, width, dtype=dtype, device=dev, generator=gen)
    pt = torch.randperm(batch * pages, device=dev, generator=gen).to(torch.int32)
    return pool, pt.view(batch, pages).contiguous(), pages


def rank_main(rank, a, init, rows_out):
    import torch
    import torch.distributed as dist
    import mlaverify as mv
    cuda = a.backend == "cuda"
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=init, rank=rank,
                            world_size=a.gpus)
    tm = timer(torch, cuda)
    dtype = torch.bfloat16 if cuda else torch.float32
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234 + rank)
    rows = []
    for prefix in (int(x) for x in a.prefix.split(",")):
        f, kv_len = problem(a, prefix, cuda)
        H, W, T = f["num_heads"], f["d_latent"] + f["d_rope"], a.batch * a.qlen
        qg = torch.Generator(device=dev)
        qg.manual_seed(99)  # the same q on every rank
        q = torch.randn(T, H, W, dtype=dtype, device=dev, generator=qg)
        one = None
        if rank == 0:  # the whole cache on one GPU
            pool, pt, pages = cache_for(torch, kv_len, a.batch, W, dev, dtype, gen)
            with mv.Plan(max_pages=pages, backend=a.backend, device=rank if cuda else None,
                         **f) as plan:
                out = torch.empty(T, H, f["d_latent"], dtype=dtype, device=dev)
                lse = torch.empty(T, H, dtype=torch.float32, device=dev)
                run = graph_of(torch, lambda: plan.run(q, pool, pt, None, out=out, lse=lse),
                               cuda)
                one = tm(run, a.reps)
                del run
            del pool, pt
        n = shard_rows(kv_len, a.gpus, rank, a.stripe)
        pool, pt, pages = cache_for(torch, n, a.batch, W, dev, dtype, gen)
        with mv.Plan(max_pages=pages, backend=a.backend, device=rank if cuda else None,
                     shard=(a.gpus, rank, a.stripe), **f) as plan:
            out = torch.empty(T, H, f["d_latent"], dtype=dtype, device=dev)
            lse = torch.empty(T, H, dtype=torch.float32, device=dev)
            g_out = torch.empty((a.gpus, T, H, f["d_latent"]), dtype=dtype, device=dev)
            g_lse = torch.empty((a.gpus, T, H), dtype=torch.float32, device=dev)
            m_out, m_lse = torch.empty_like(out), torch.empty_like(lse)

            def verify():
                plan.run(q, pool, pt, None, out=out, lse=lse)

            def exchange():
                mv.cp_merge_states(out, lse, gathered=(g_out, g_lse), merged_out=m_out,
                                   merged_lse=m_lse)

            def step():
                verify()
                exchange()
            times = {}
            for name, fn in (("verify", verify), ("exchange", exchange), ("step", step)):
                run = graph_of(torch, fn, cuda)
                dist.barrier()
                t = torch.tensor([tm(run, a.reps)], dtype=torch.float64)
                if cuda:
                    t = t.to(dev)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's
                times[name] = float(t.item())
                del run
        del pool, pt
        if rank == 0:
            row = dict(ranks=a.gpus, batch=a.batch, heads=H, q_len=a.qlen, prefix=prefix,
                       stripe=a.stripe, one_gpu_us=one, verify_us=times["verify"],
                       exchange_us=times["exchange"], step_us=times["step"],
                       kept=one / (a.gpus * times["step"]))
            rows.append(row)
            print("R %d B %d H %d q %d prefix %d: one GPU %.1f us; sharded verify %.1f, exchange "
                  "+ merge %.1f, step %.1f us; %.2f of the ideal %d-fold" % (
                      a.gpus, a.batch, H, a.qlen, prefix, one, times["verify"],
                      times["exchange"], times["step"], row["kept"], a.gpus), flush=True)
    if rank == 0:
        rows_out.extend(rows)
        if a.out:
            with open(a.out, "w") as fh:
                fh.write(",".join(rows[0].keys()) + "\n")
                for r in rows:
                    fh.write(",".join(str(v) for v in r.values()) + "\n")
    dist.destroy_process_group()


def main():
    a = parse()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast
    import tempfile
    import torch
    import torch.multiprocessing as tmp
    if a.backend == "cuda" and torch.cuda.device_count() < a.gpus:
        sys.exit("--gpus %d: %d CUDA devices visible" % (a.gpus, torch.cuda.device_count()))
    with tempfile.TemporaryDirectory() as d:
        tmp.spawn(rank_main, args=(a, "file://" + os.path.join(d, "init"), []), nprocs=a.gpus,
                  join=True)


if __name__ == "__main__":
    main()
