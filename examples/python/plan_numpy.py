"""Plan once, run on numpy arrays: a draft tree and a chain after their prefixes, on AUTO (the
CUDA backend when a GPU is there, host arrays mapped to it and back; else the CPU backend),
checked against the fp64 reference backend, then greedy acceptance of the tree.

    python3 examples/python/plan_numpy.py
"""
import numpy as np

import mlaverify as mv

# [readme:numpy]
rng = np.random.default_rng(0)
H, W = 8, 576                                             # d_latent 512 + d_rope 64
parents = [-1, 0, 0, 1, 1, 2, 3, 3, 5] + [-1, 0, 1, 2]    # a 9-node tree, a 4-node chain
q_indptr, kv_lens = [0, 9, 13], [1009, 204]               # prefixes 1000 and 200, then drafts
pool = rng.uniform(-1, 1, (1213, 1, W)).astype(np.float32)  # page_size 1: a token pool
page_table = np.zeros((2, 1009), np.int32)                # [B, max_pages]
page_table[0], page_table[1, :204] = np.arange(1009), np.arange(1009, 1213)
q = rng.uniform(-2, 2, (13, H, W)).astype(np.float32)

plan = mv.Plan(num_heads=H, softmax_scale=192 ** -0.5, dtype="f32", page_size=1,
               q_indptr=q_indptr, kv_lens=kv_lens)        # backend="auto"
mask = mv.tree_mask_from_parents(parents, q_indptr)       # uint32 [13, 1]
out, lse = plan.run(q, pool, page_table, mask)            # [13, 8, 512] float32, [13, 8]
# [/readme]

ref = mv.Plan(num_heads=H, softmax_scale=192 ** -0.5, dtype="f32", page_size=1,
              q_indptr=q_indptr, kv_lens=kv_lens, backend="reference")
ref_out, ref_lse = ref.run(q, pool, page_table, mask)
err = max(float(np.abs(out - ref_out).max()), float(np.abs(lse - ref_lse).max()))
print("plan on %s: out %s, lse %s; max |diff| vs reference %.2e"
      % (plan.backend, out.shape, lse.shape, err))
assert err < 1e-3, "mismatch against the reference backend"

# the target model's token at each node of the tree: walk the draft greedily
draft = rng.integers(0, 3, 9)
target = rng.integers(0, 3, 9)
path, bonus = mv.accept_greedy(parents[:9], draft, target)
print("accepted nodes %s, bonus token %d" % (list(path), bonus))
