"""Capture one live verify step as a golden bundle and check it: capture_bundle writes the
step's inputs (only the KV pages it uses), `mlaverify gen --expect-from` adds the fp64 oracle's
expectations (complete_bundle), and `mlaverify check` runs it on a backend and compares the
tokens (check_bundle). An engine does this on a step worth keeping, outside graph capture.

The `mlaverify` command is found through $MLAVERIFY_CLI, then PATH, then beside the library.

    python3 examples/python/capture_bundle.py [OUT_DIR]
"""
import os
import sys
import tempfile

import numpy as np

import mlaverify as mv

out_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="mlav-bundle-")
os.makedirs(out_dir, exist_ok=True)
rng = np.random.default_rng(3)
H, Dl, Dr, page = 8, 512, 64, 16
parents = [-1, 0, 0, 1, 2] + [-1, 0, 1]                  # a 5-node tree, a 3-node chain
q_indptr, kv_lens = [0, 5, 8], [261, 43]                 # prefixes 256 and 40
num_pages = 40                                           # a pool larger than the step needs
kv = rng.uniform(-1, 1, (num_pages, page, Dl + Dr)).astype(np.float32)
page_table = np.zeros((2, 17), np.int32)
ids = rng.permutation(num_pages).astype(np.int32)
page_table[0], page_table[1, :3] = ids[:17], ids[17:20]
q = rng.uniform(-1, 1, (8, H, Dl + Dr)).astype(np.float32)

# [readme:capture]
inputs = os.path.join(out_dir, "step.inputs.safetensors")
bundle = os.path.join(out_dir, "step.safetensors")
info = mv.capture_bundle(inputs, q=q, kv_cache=kv, page_table=page_table, q_indptr=q_indptr,
                         kv_lens=kv_lens, softmax_scale=192 ** -0.5, d_latent=Dl,
                         tree_parents=parents, metadata={"model": "example"})
mv.complete_bundle(inputs, bundle)                      # the fp64 oracle's expectations
passed, report = mv.check_bundle(bundle, backend="cpu")  # or "cuda", or None for AUTO
# [/readme]
print("captured %s: %s" % (inputs, info))
print(report.strip())
assert passed, "the captured bundle did not pass"
print("bundle %s passes on cpu" % bundle)
