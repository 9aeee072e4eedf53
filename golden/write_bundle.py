#!/usr/bin/env python3
"""Write the inputs of a mlaverify golden bundle from numpy arrays (numpy and the standard
library only), so that q / KV cache / page table captured from a live engine can be checked.

A bundle is a safetensors file (golden/FORMAT.md). This script writes the inputs only; the
expectations must come from the library's fp64 oracle, so the second step is

    mlaverify gen --expect-from inputs.safetensors bundle.safetensors
    mlaverify check bundle.safetensors

The format code lives in the Python binding, python/mlaverify/bundle.py (which also captures
torch tensors straight from an engine: mlaverify.capture_bundle); this file is its command
line and keeps the old module interface:

    from write_bundle import write_bundle
    write_bundle("inputs.safetensors", q=q, kv_cache=kv, page_table=pt, q_indptr=qi,
                 kv_lens=kl, tree_parents=parents, softmax_scale=scale, d_latent=512,
                 dtype="bf16")

or from the shell with an .npz holding arrays of those names:

    python3 write_bundle.py --npz capture.npz --d-latent 512 --dtype bf16 inputs.safetensors

numpy has no bfloat16: give BF16 tensors as float32 values (rounded here, to nearest even) or
as uint16 arrays of raw BF16 bits (from torch: t.view(torch.uint16).cpu().numpy()). Nor has it
an fp8 type: an FP8 (E4M3) cache is uint8 e4m3 bytes (from torch: t.view(torch.uint8)) with
kv_dtype="fp8_e4m3" and its kv_scale (shell: --kv-dtype fp8 and an array kv_scale in the .npz).
"""
import os
import sys

# the binding beside this checkout first (an installed `mlaverify` package would do as well)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from mlaverify.bundle import (FORMAT, VERSION, bf16_bits, bf16_to_f32, demo,  # noqa: E402
                              e4m3_bits, e4m3_to_f32, main, read_bundle, write_bundle,
                              write_safetensors)

__all__ = ["FORMAT", "VERSION", "bf16_bits", "bf16_to_f32", "demo", "e4m3_bits", "e4m3_to_f32",
           "main", "read_bundle", "write_bundle", "write_safetensors"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog="write_bundle.py"))
