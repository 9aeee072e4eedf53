"""Why the FlashMLA harness times mlaverify's copy-bound points (B 16, q_len 1) ~16% slower than
tests/sm90_timing does: the harness's data and plan (mlaverify.Plan over a [blocks, 64, 576]
randn pool, a random block table, NaN page tails), timed two ways in one process: the harness's
flush (256 MB zero_ before each replay) and sm90_timing's (a read of twice the L2), each with
the kernel the rule gives and with MLAV_SM90_KERNEL=producer; then the kernels of one eager
run (torch.profiler). Needs MLAVERIFY_LIBRARY and PYTHONPATH=python."""
import os
import sys

import numpy as np
import torch
import mlaverify as mv

D, DV, PAGE = 576, 512, 64
SCALE = 1.0 / 192 ** 0.5
dev = torch.device("cuda")
shapes = [(16, 8, 1, 131072), (16, 8, 1, 32768), (16, 64, 1, 131072), (16, 8, 1, 4096),
          (1, 8, 1, 131072), (1, 128, 16, 131072), (16, 128, 16, 32768)]
max_pages = max(-(-(p + q) // PAGE) for _, _, q, p in shapes)
pool_blocks = 16 * max_pages
gen = torch.Generator(device=dev)
gen.manual_seed(0)
pool = torch.randn(pool_blocks, PAGE, D, dtype=torch.bfloat16, device=dev, generator=gen)
zero_buf = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
l2 = torch.cuda.get_device_properties(dev).L2_cache_size
read_buf = torch.ones(2 * l2 // 4, dtype=torch.float32, device=dev)
sink = torch.empty(1, dtype=torch.float32, device=dev)


def flush(kind):
    if kind == "zero":
        zero_buf.zero_()
    else:
        torch.sum(read_buf, dim=0, keepdim=True, out=sink)


def timed(g, kind, n=40):
    ts = []
    for _ in range(n + 3):
        flush(kind)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    ts = sorted(ts[3:])
    return ts[len(ts) // 2]


print("L2 %d MB; us (median of 40 graph replays); flush zero = 256 MB zero_, read = sum of 2 x L2"
      % (l2 >> 20))
print("%3s %4s %3s %7s | %-8s | %9s %9s | GB/s(zero)" % ("B", "H", "q", "prefix", "kernel",
                                                        "zero", "read"))
for B, H, q, P in shapes:
    kv_len = P + q
    pages = -(-kv_len // PAGE)
    bt = torch.randperm(pool_blocks, device=dev, generator=gen)[:B * pages]
    table = bt.to(torch.int32).view(B, pages).contiguous()
    tail = kv_len % PAGE
    last = table[:, pages - 1].long()
    saved = pool[last, tail:, :].clone() if tail else None
    if tail:
        pool[last, tail:, :] = float("nan")
    T = B * q
    qt = torch.randn(T, H, D, dtype=torch.bfloat16, device=dev, generator=gen)
    nbytes = 2.0 * (B * P * D + T * H * (D + DV))
    for kern in ("rule", "producer"):
        if kern == "producer":
            os.environ["MLAV_SM90_KERNEL"] = "producer"
        try:
            plan = mv.Plan(num_heads=H, softmax_scale=SCALE, dtype="bf16", page_size=PAGE,
                           q_indptr=np.arange(B + 1, dtype=np.int32) * q,
                           kv_lens=np.full(B, kv_len, dtype=np.int32), max_pages=pages,
                           backend="cuda", device=dev)
        finally:
            os.environ.pop("MLAV_SM90_KERNEL", None)
        out = torch.empty(T, H, DV, dtype=torch.bfloat16, device=dev)
        lse = torch.empty(T, H, dtype=torch.float32, device=dev)
        fn = lambda: plan.run(qt, pool, table, None, out=out, lse=lse)  # noqa: E731
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
            fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        tz, tr = timed(g, "zero"), timed(g, "read")
        print("%3d %4d %3d %7d | %-8s | %9.1f %9.1f | %6.0f" % (B, H, q, P, kern, tz, tr,
                                                              nbytes / tz / 1e3))
        if (B, H, q, P) == (16, 8, 1, 131072):
            try:
                from torch.profiler import profile, ProfilerActivity
                flush("read")
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    fn()
                    torch.cuda.synchronize()
                for ev in prof.events():
                    if ev.device_type == torch.autograd.DeviceType.CUDA:
                        print("      eager kernel: %-70.70s %9.1f us"
                              % (ev.name, getattr(ev, "device_time", float("nan"))))
            except Exception as e:  # noqa: BLE001
                print("      profiler: %s" % e)
        del g, plan
    if tail:
        pool[last, tail:, :] = saved
    sys.stdout.flush()
