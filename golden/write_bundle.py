#!/usr/bin/env python3
"""Write the inputs of a mlaverify golden bundle from numpy arrays (numpy and the standard
library only), so that q / KV cache / page table captured from a live engine can be checked.

A bundle is a safetensors file (golden/FORMAT.md). This script writes the inputs only; the
expectations must come from the library's fp64 oracle, so the second step is

    mlaverify gen --expect-from inputs.safetensors bundle.safetensors
    mlaverify check bundle.safetensors

Use it as a module:

    from write_bundle import write_bundle
    write_bundle("inputs.safetensors", q=q, kv_cache=kv, page_table=pt, q_indptr=qi,
                 kv_lens=kl, tree_parents=parents, softmax_scale=scale, d_latent=512,
                 dtype="bf16")

or from the shell with an .npz holding arrays of those names:

    python3 write_bundle.py --npz capture.npz --d-latent 512 --dtype bf16 inputs.safetensors

numpy has no bfloat16: give BF16 tensors as float32 values (rounded here, to nearest even) or
as uint16 arrays of raw BF16 bits (from torch: t.view(torch.uint16).cpu().numpy()).
"""
import argparse
import json
import struct
import sys

import numpy as np

FORMAT = "mlaverify-bundle"
VERSION = "1"
_DTYPES = {"bf16": "BF16", "f16": "F16", "f32": "F32"}


def bf16_bits(x):
    """float32 -> raw BF16 bits (uint16), round to nearest even, NaN kept quiet: the same
    rounding as the library's mlav_f32_to_bf16."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    nan = np.isnan(x)
    r[nan] = ((u[nan] >> 16) | 0x40) & 0xFFFF
    return r.astype(np.uint16)


def bf16_to_f32(bits):
    """raw BF16 bits (uint16) -> float32"""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _storage(a, dtype):
    """The little-endian bytes of a q / kv_cache tensor in the bundle's dtype."""
    a = np.asarray(a)
    if dtype == "bf16":
        bits = a if a.dtype == np.uint16 else bf16_bits(a)
        return np.ascontiguousarray(bits, dtype="<u2")
    if dtype == "f16":
        return np.ascontiguousarray(a, dtype="<f2")
    return np.ascontiguousarray(a, dtype="<f4")


def _i32(name, a):
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, not {a.dtype}")
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise ValueError(f"{name} does not fit int32")
    return np.ascontiguousarray(a, dtype="<i4")


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, safetensors dtype, shape, numpy array); written contiguously in
    that order after a header padded with spaces to 8 bytes, as the safetensors library does
    (it rejects gaps between tensors, so alignment comes from the order: 4-byte tensors
    first)."""
    header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    offset = 0
    blobs = []
    for name, st_dtype, shape, arr in tensors:
        data = arr.tobytes()
        header[name] = {"dtype": st_dtype, "shape": [int(d) for d in shape],
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def write_bundle(path, *, q, kv_cache, page_table, q_indptr, kv_lens, tree_parents,
                 softmax_scale, d_latent, dtype=None, draft_tokens=None, vocab=256,
                 readout_seed=1, source="golden/write_bundle.py"):
    """Write an inputs-only bundle.

    q            [T, H, d_latent + d_rope]        float32 / float16 / uint16 (BF16 bits)
    kv_cache     [num_pages, page_size, d_latent + d_rope]   same dtype as q
    page_table   [B, max_pages] int              KV row j of request b: page
                                                 page_table[b][j // page_size]
    q_indptr     [B + 1] int                     request b owns q rows q_indptr[b]:q_indptr[b+1]
    kv_lens      [B] int                         prefix + draft nodes
    tree_parents [T] int                         local parent of each node, -1 for each root
    draft_tokens [T] int or None                 None: `gen --expect-from` picks them
    dtype        "bf16" | "f16" | "f32"; None infers f32 / f16 from q (uint16 needs "bf16")
    """
    q = np.asarray(q)
    kv_cache = np.asarray(kv_cache)
    if dtype is None:
        inferred = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}
        if q.dtype not in inferred:
            raise ValueError("say dtype='bf16' (or 'f16'/'f32') for q of dtype %s" % q.dtype)
        dtype = inferred[q.dtype]
    if dtype not in _DTYPES:
        raise ValueError("dtype must be bf16, f16 or f32")
    if q.ndim != 3 or kv_cache.ndim != 3 or q.shape[2] != kv_cache.shape[2]:
        raise ValueError("q must be [T, H, W] and kv_cache [num_pages, page_size, W]")
    T, H, W = q.shape
    if not 1 <= d_latent <= W:
        raise ValueError("d_latent must be in [1, W]")
    page_table = _i32("page_table", page_table)
    if page_table.ndim != 2:
        raise ValueError("page_table must be [B, max_pages]")
    B = page_table.shape[0]
    q_indptr, kv_lens = _i32("q_indptr", q_indptr), _i32("kv_lens", kv_lens)
    tree_parents = _i32("tree_parents", tree_parents)
    if q_indptr.shape != (B + 1,) or kv_lens.shape != (B,) or tree_parents.shape != (T,):
        raise ValueError("q_indptr must be [B+1], kv_lens [B], tree_parents [T]")
    st = _DTYPES[dtype]
    tensors = [
        ("softmax_scale", "F32", [1], np.array([softmax_scale], dtype="<f4")),
        ("q_indptr", "I32", q_indptr.shape, q_indptr),
        ("kv_lens", "I32", kv_lens.shape, kv_lens),
        ("page_table", "I32", page_table.shape, page_table),
        ("tree_parents", "I32", tree_parents.shape, tree_parents),
    ]
    if draft_tokens is not None:
        draft_tokens = _i32("draft_tokens", draft_tokens)
        if draft_tokens.shape != (T,):
            raise ValueError("draft_tokens must be [T]")
        tensors.append(("draft_tokens", "I32", draft_tokens.shape, draft_tokens))
    tensors += [("q", st, q.shape, _storage(q, dtype)),
                ("kv_cache", st, kv_cache.shape, _storage(kv_cache, dtype))]
    metadata = {"format": FORMAT, "version": VERSION, "num_heads": H, "d_latent": d_latent,
                "d_rope": W - d_latent, "vocab": vocab, "readout_seed": readout_seed,
                "source": source}
    write_safetensors(path, tensors, metadata)


_NP = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I32": "<i4", "F64": "<f8", "I64": "<i8",
       "U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "U32": "<u4", "BOOL": "u1"}


def read_bundle(path):
    """(tensors, metadata) of any bundle; BF16 tensors come back as uint16 bits (bf16_to_f32
    turns them into float32)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=_NP[info["dtype"]]).reshape(info["shape"])
    return out, meta


def demo(path):
    """A tiny captured-looking case: 2 requests (a 3-node tree after a 7-row prefix, a 5-node
    tree with no prefix), 4 heads, Dl 32 + Dr 8, BF16, page size 4, shuffled pages, unused
    pages and page slack NaN."""
    rng = np.random.default_rng(7)
    H, Dl, Dr, ps = 4, 32, 8, 4
    q_lens, prefixes = [3, 5], [7, 0]
    parents = [-1, 0, 0] + [-1, 0, 1, 1, 2]
    kv_lens = [p + n for p, n in zip(prefixes, q_lens)]
    pages = [(k + ps - 1) // ps for k in kv_lens]
    num_pages = sum(pages) + 2
    perm = rng.permutation(num_pages)
    max_pages = max(pages) + 1
    page_table = np.full((2, max_pages), perm[-1], dtype=np.int32)
    kv = np.full((num_pages, ps, Dl + Dr), np.nan, dtype=np.float32)
    at = 0
    for b in range(2):
        page_table[b, :pages[b]] = perm[at:at + pages[b]]
        at += pages[b]
        for j in range(kv_lens[b]):
            kv[page_table[b, j // ps], j % ps] = rng.uniform(-1, 1, Dl + Dr)
    T = sum(q_lens)
    q = rng.uniform(-2, 2, (T, H, Dl + Dr)).astype(np.float32)
    write_bundle(path, q=q, kv_cache=kv, page_table=page_table, q_indptr=[0, 3, 8],
                 kv_lens=kv_lens, tree_parents=parents, softmax_scale=1 / np.sqrt(Dl + Dr),
                 d_latent=Dl, dtype="bf16", vocab=64, readout_seed=5,
                 source="golden/write_bundle.py --demo")
    # the file must read back as written
    got, meta = read_bundle(path)
    assert meta["format"] == FORMAT and int(meta["num_heads"]) == H
    assert np.array_equal(got["q"], bf16_bits(q))
    assert np.array_equal(got["page_table"], page_table)
    assert np.array_equal(np.isnan(bf16_to_f32(got["kv_cache"])), np.isnan(kv))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the inputs bundle to write (.safetensors)")
    ap.add_argument("--npz", help="arrays q, kv_cache, page_table, q_indptr, kv_lens, "
                                  "tree_parents, softmax_scale [, draft_tokens]")
    ap.add_argument("--demo", action="store_true", help="write a tiny random case instead")
    ap.add_argument("--d-latent", type=int, default=512)
    ap.add_argument("--dtype", choices=sorted(_DTYPES), default=None)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--readout-seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.demo:
        demo(args.out)
        return 0
    if not args.npz:
        ap.error("give --npz FILE or --demo")
    z = np.load(args.npz)
    write_bundle(args.out, q=z["q"], kv_cache=z["kv_cache"], page_table=z["page_table"],
                 q_indptr=z["q_indptr"], kv_lens=z["kv_lens"], tree_parents=z["tree_parents"],
                 softmax_scale=float(np.asarray(z["softmax_scale"]).reshape(-1)[0]),
                 d_latent=args.d_latent, dtype=args.dtype,
                 draft_tokens=z["draft_tokens"] if "draft_tokens" in z else None,
                 vocab=args.vocab, readout_seed=args.readout_seed,
                 source="golden/write_bundle.py --npz " + args.npz)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
