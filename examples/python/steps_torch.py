"""An engine's loop from torch: one StepPlan for the engine's limits, then at every step the
step's lengths (update) and one run per layer into fixed out/lse buffers. On a CUDA device the
step is captured once in a CUDA graph and replayed (device lengths, padded with q_len 0); on
CPU torch the same calls run directly with host lengths. Each step is checked against the fp64
reference backend.

    python3 examples/python/steps_torch.py
"""
import sys

import numpy as np

import mlaverify as mv

try:
    import torch
except ImportError:
    print("torch is not installed: skipped")
    sys.exit(77)

cuda = torch.cuda.is_available() and mv.cuda_device_count() > 0
dev = "cuda" if cuda else "cpu"
torch.manual_seed(0)
H, Dl, Dr, layers, steps = 16, 512, 64, 2, 4
max_batch, max_q_len, max_kv_len = 4, 8, 1024
max_tokens, P = max_batch * max_q_len, max_kv_len            # page_size 1: P pages per request
scale = 192 ** -0.5
kv_cache = [torch.rand(max_batch * P, 1, Dl + Dr, device=dev).mul(2).sub(1).bfloat16()
            for _ in range(layers)]
page_table = (torch.arange(P, device=dev, dtype=torch.int32)[None, :] * max_batch
              + torch.arange(max_batch, device=dev, dtype=torch.int32)[:, None])  # [B, P]
q = [torch.zeros(max_tokens, H, Dl + Dr, device=dev, dtype=torch.bfloat16) for _ in range(layers)]
out = [torch.zeros(max_tokens, H, Dl, device=dev, dtype=torch.bfloat16) for _ in range(layers)]
lse = [torch.zeros(max_tokens, H, device=dev) for _ in range(layers)]
mask = torch.zeros(max_tokens, mv.tree_mask_words(max_q_len), device=dev, dtype=torch.int32)
d_q_indptr = torch.zeros(max_batch + 1, device=dev, dtype=torch.int32)
d_kv_lens = torch.zeros(max_batch, device=dev, dtype=torch.int32)

# [readme:steps-torch]
plan = mv.StepPlan(num_heads=H, softmax_scale=scale, dtype="bf16", page_size=1, max_pages=P,
                   max_batch=max_batch, max_tokens=max_tokens, max_q_len=max_q_len,
                   max_kv_len=max_kv_len, backend="cuda" if cuda else "cpu")   # once


def step(q_indptr, kv_lens, batch):
    plan.update(q_indptr, kv_lens, batch=batch)           # the step's lengths
    for l in range(layers):                               # every layer: a run, no allocation
        plan.run(q[l], kv_cache[l], page_table, mask, out=out[l], lse=lse[l])


if cuda:   # capture once, with device lengths padded to max_batch (q_len 0)
    step(d_q_indptr, d_kv_lens, max_batch)                # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(d_q_indptr, d_kv_lens, max_batch)
# [/readme]

rng = np.random.default_rng(1)
ref = mv.Plan  # the fp64 oracle, one plan per step's exact lengths
for s in range(steps):
    batch = int(rng.integers(1, max_batch + 1))
    q_lens = rng.integers(1, max_q_len + 1, batch)
    kv_lens = [int(n + rng.integers(0, max_kv_len - n + 1)) for n in q_lens]
    q_indptr = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    T = int(q_indptr[-1])
    parents = np.concatenate([[-1] + list(range(n - 1)) for n in q_lens])   # chains
    mask[:T] = torch.from_numpy(mv.tree_mask_from_parents(parents, q_indptr).view(np.int32))
    for l in range(layers):
        q[l][:T] = torch.rand(T, H, Dl + Dr, device=dev).mul(2).sub(1).bfloat16()
    if cuda:   # write the step into the graph's buffers, then replay
        d_q_indptr.copy_(torch.from_numpy(np.pad(q_indptr, (0, max_batch - batch), mode="edge")))
        d_kv_lens.copy_(torch.from_numpy(np.pad(np.array(kv_lens, np.int32),
                                                (0, max_batch - batch))))
        graph.replay()
        torch.cuda.synchronize()
    else:
        step(q_indptr, kv_lens, batch)
    err = 0.0
    for l in range(layers):
        r = ref(num_heads=H, softmax_scale=scale, dtype="f32", page_size=1, q_indptr=q_indptr,
                kv_lens=kv_lens, max_pages=P, backend="reference")
        o, ls = r.run(q[l][:T].float().cpu().numpy(), kv_cache[l].float().cpu().numpy(),
                      page_table[:batch].cpu().numpy(), mask[:T].cpu().numpy())
        err = max(err, float(np.abs(out[l][:T].float().cpu().numpy() - o).max()),
                  float(np.abs(lse[l][:T].cpu().numpy() - ls).max()))
    print("step %d on %s: %d requests, %d tokens, kv_lens %s; max |diff| vs reference %.2e"
          % (s, dev, batch, T, kv_lens, err))
    assert err < 2e-2, "mismatch against the reference backend"
print("StepPlan loop on %s torch: %d steps ok" % (dev, steps))
