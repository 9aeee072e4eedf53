#!/usr/bin/env python3
"""Builds the structured bundle inputs of tests/fuzz (seeds in corpus_bundle/, regressions in
regressions/bundle/) that random mutation of small bundles does not reach: thousands of metadata
keys, the largest vocab, the longest request, and the header spellings safetensors refuses
(issue 26). Standard library only; deterministic; rerun it after a format change:
    python3 tests/fuzz/make_bundle_inputs.py"""
import json
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "corpus_bundle")
REGS = os.path.join(HERE, "regressions", "bundle")


def header_bytes(meta, tensors):
    """The writer's header: metadata first, tensors contiguous in the given order, spaces to 8."""
    hdr, at = {"__metadata__": meta}, 0
    for name, dtype, shape, data in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
    text = json.dumps(hdr, separators=(",", ":")).encode()
    return text + b" " * (-len(text) % 8)


def bundle(meta, tensors, header_edit=None):
    text = header_bytes(meta, tensors)
    if header_edit:
        text = header_edit(text)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def i32(*v):
    return struct.pack("<%di" % len(v), *v)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def meta_for(vocab=16, heads=1, dl=1, dr=0, extra=()):
    m = {"format": "mlaverify-bundle", "version": "1", "num_heads": str(heads),
         "d_latent": str(dl), "d_rope": str(dr), "vocab": str(vocab), "readout_seed": "1",
         "source": "tests/fuzz/make_bundle_inputs.py"}
    for k, v in extra:
        m[k] = v
    return m


def requests(lens, vocab=16, expect=True, token=0, margin=0.0):
    """B requests, each a chain of the given length, H 1, dims 1+0, bf16 zeros, page_size 1, no
    prefix: every node sees its ancestors only."""
    B, T = len(lens), sum(lens)
    maxq = max(lens)
    indptr = [0]
    for n in lens:
        indptr.append(indptr[-1] + n)
    parents, pt = [], []
    for n in lens:
        parents += [-1] + list(range(n - 1))
    page = 0
    for n in lens:
        pt += list(range(page, page + n)) + [0] * (maxq - n)
        page += n
    t = [("softmax_scale", "F32", [1], f32(1.0)),
         ("q_indptr", "I32", [B + 1], i32(*indptr)),
         ("kv_lens", "I32", [B], i32(*lens)),
         ("page_table", "I32", [B, maxq], i32(*pt)),
         ("tree_parents", "I32", [T], i32(*parents))]
    if expect:
        acc, lse = [], []
        for n in lens:
            acc += [0] + [-1] * (maxq - 1)
            lse += [math.log(i + 1) for i in range(n)]  # node i sees i + 1 zero scores
        t += [("draft_tokens", "I32", [T], i32(*([1] * T))),
              ("expect_tokens", "I32", [T], i32(*([token] * T))),
              ("expect_accept", "I32", [B, maxq], i32(*acc)),
              ("expect_margin", "F32", [T], f32(*([margin] * T))),
              ("expect_lse", "F32", [T, 1], f32(*lse)),
              ("expect_out", "F32", [T, 1, 1], f32(*([0.0] * T)))]
    t += [("q", "BF16", [T, 1, 1], b"\0\0" * T),
          ("kv_cache", "BF16", [T, 1, 1], b"\0\0" * T)]
    return t


def write(folder, name, data):
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)
    print("%-60s %8d bytes" % (os.path.relpath(os.path.join(folder, name), HERE), len(data)))


def main():
    small = requests([3, 2])
    keys = [("k%07d" % k, "v") for k in range(4000)]
    # seeds: shapes random mutation cannot grow into
    write(SEEDS, "meta_4000_keys.safetensors", bundle(meta_for(extra=keys), small))
    write(SEEDS, "vocab_2p20_600_requests.safetensors",
          bundle(meta_for(vocab=1 << 20), requests([1] * 600)))
    write(SEEDS, "chain_q4096_inputs_only.safetensors",
          bundle(meta_for(), requests([4096], expect=False)))
    # regressions: each once passed the reader (or cost what it should not)
    write(REGS, "meta_30000_keys_quadratic.safetensors", bundle(
        meta_for(extra=[("k%07d" % k, "v") for k in range(30000)]), small))
    write(REGS, "meta_repeated_key_among_4000.safetensors",
          bundle(meta_for(extra=keys), small,
                 lambda h: h.replace(b'"k0000000":"v"', b'"k0000000":"v","k0003999":"w"', 1)))
    write(REGS, "vocab_2p20_600_nodes_readout_memory.safetensors",
          bundle(meta_for(vocab=1 << 20), requests([1] * 600, margin=1.0)))
    write(REGS, "chain_q4097_mask_memory.safetensors",
          bundle(meta_for(), requests([4097], expect=False)))
    write(REGS, "expect_tokens_all_minus_one.safetensors",
          bundle(meta_for(), requests([3, 2], token=-1, margin=float("nan"))))
    write(REGS, "data_offsets_0e0.safetensors", bundle(
        meta_for(), small, lambda h: h.replace(b'"data_offsets":[0,4]', b'"data_offsets":[0e0,4]')))
    write(REGS, "name_escaped_nul.safetensors", bundle(
        meta_for(), small, lambda h: h.replace(b'"kv_cache"', b'"kv_cache\\u0000junk"')))
    write(REGS, "header_invalid_utf8.safetensors", bundle(
        meta_for(), small, lambda h: h.replace(b'"source":"', b'"source":"\xc0\xaf')))
    write(REGS, "header_lone_surrogate.safetensors", bundle(
        meta_for(), small, lambda h: h.replace(b'"source":"', b'"source":"\\ud800')))


if __name__ == "__main__":
    main()
