#!/usr/bin/env python3
"""Host time of mlav_plan_update with host lengths on a CUDA plan for limits: the whole call (the
checks, the step rule into a pinned staging slot, cudaMemcpyAsync and cudaEventRecord), through a
bare ctypes call on prebuilt structs, median over many calls. The issue's budget is 10 us at B = 64;
bench/diag/schedule_choices times the rule alone on any machine, this the rest on a GPU host:

    MLAVERIFY_LIBRARY=build/libmlaverify.so PYTHONPATH=python python3 bench/diag/host_update.py

Limits: 64 requests, H 16, q_len 16, kv_len 49152 (a production batch with prefixes spread 0.5);
each B is a random batch within them, the same every run (seeded)."""
import ctypes
import statistics
import sys
import time

import numpy as np
import torch

from mlaverify import StepPlan, _lib


def main():
    if not torch.cuda.is_available():
        sys.exit("host_update: no CUDA device")
    H, QL, KV, MB = 16, 16, 49152, 64
    plan = StepPlan(num_heads=H, softmax_scale=0.07, dtype="bf16", page_size=1, max_pages=KV,
                    max_batch=MB, max_tokens=MB * QL, max_q_len=QL, max_kv_len=KV,
                    device="cuda:0")
    lib = _lib.load()
    rng = np.random.default_rng(7)
    stream = torch.cuda.current_stream().cuda_stream
    print("# mlav_plan_update, host lengths, CUDA plan for limits (B<=64 H=16 q_len<=16 "
          "kv_len<=49152): median of 21 samples of 200 calls, us per call")
    print("%6s %10s %10s" % ("B", "median_us", "fastest_us"))
    for B in (1, 16, 32, 64):
        q_len = rng.integers(1, QL + 1, B).astype(np.int32)
        q_indptr = np.concatenate([[0], np.cumsum(q_len)]).astype(np.int32)
        kv = (rng.uniform(0.5, 1.5, B) * 32768).astype(np.int32)
        kv = np.minimum(np.maximum(kv, q_len), KV).astype(np.int32)
        L = _lib.MlavLengths(memory=0, batch=B, q_indptr=q_indptr.ctypes.data,
                             kv_lens=kv.ctypes.data)
        ref = ctypes.byref(L)
        fn, h, ws, wsb = lib.mlav_plan_update, plan._h, plan._ws_ptr, plan.workspace_bytes
        if fn(h, ref, ws, wsb, stream) != 0:
            sys.exit("host_update: " + _lib.text(lib.mlav_last_error(None)))
        samples = []
        for _ in range(21):
            torch.cuda.synchronize()  # an empty queue: the host time, not back-pressure
            t0 = time.perf_counter()
            for _ in range(200):
                fn(h, ref, ws, wsb, stream)
            samples.append((time.perf_counter() - t0) / 200 * 1e6)
        print("%6d %10.2f %10.2f" % (B, statistics.median(samples), min(samples)))
    torch.cuda.synchronize()
    plan.close()


if __name__ == "__main__":
    main()
