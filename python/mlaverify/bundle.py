"""Golden bundles from Python: the safetensors writer and reader of golden/FORMAT.md, and
capture of live engine tensors (numpy and the standard library; torch only if given tensors).

A bundle's expectations always come from the library's fp64 oracle, never from Python:

    capture_bundle("inputs.safetensors", q=q, kv_cache=kv, page_table=pt, q_indptr=qi,
                   kv_lens=kl, tree_parents=parents, softmax_scale=scale)
    complete_bundle("inputs.safetensors", "bundle.safetensors")  # mlaverify gen --expect-from
    check_bundle("bundle.safetensors")                           # mlaverify check

golden/write_bundle.py is the command-line face of this module.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

from .api import FP8_NAMES, is_fp8, kv_scale_value  # the binding's FP8 names and scale rule

FORMAT = "mlaverify-bundle"
VERSION = "1"
_DTYPES = {"bf16": "BF16", "f16": "F16", "f32": "F32"}


def _e4m3_table():
    """The value of each of the 256 float8 e4m3fn bytes (bias 7, 3 mantissa bits, no
    infinities, 0x7f / 0xff NaN), as float32: every one is exact there."""
    b = np.arange(256)
    e, m = (b >> 3) & 0xF, b & 7
    mag = np.where(e == 0, m * 2.0 ** -9, (1.0 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where(b & 0x80, -mag, mag)
    v[(b & 0x7F) == 0x7F] = np.nan
    return v.astype(np.float32)


#: value of every e4m3 byte (the one decode of the format here; e4m3_bits rounds to it)
E4M3_VALUES = _e4m3_table()


def e4m3_to_f32(b):
    """e4m3 bytes (uint8) -> their float32 values (exact; 0x7f and 0xff are NaN). The value of
    a KV element is this times kv_scale."""
    return E4M3_VALUES[np.asarray(b, dtype=np.uint8)]


def e4m3_bits(x):
    """float -> e4m3 bytes (uint8): round to the nearest e4m3 value, ties to the even byte
    (even mantissa), saturating at +-448 (infinities too), NaN -> 0x7f / 0xff: the rule of the
    library's mlav_f32_to_e4m3, as a search of E4M3_VALUES."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x.astype(np.float64)).ravel()
    finite = E4M3_VALUES[:0x7F].astype(np.float64)  # bytes 0..0x7e, increasing
    lo = np.clip(np.searchsorted(finite, a, side="right") - 1, 0, 0x7E)
    hi = np.minimum(lo + 1, 0x7E)
    d_lo, d_hi = a - finite[lo], finite[hi] - a
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (lo % 2 == 1)), hi, lo)
    code = np.where(a >= 448.0, 0x7E, code)
    code = np.where(np.isnan(a), 0x7F, code)
    code = code | np.where(np.signbit(x.ravel()), 0x80, 0)
    return code.astype(np.uint8).reshape(x.shape)


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
                 readout_seed=1, source="golden/write_bundle.py", extra_metadata=None,
                 kv_dtype=None, kv_scale=None):
    """Write an inputs-only bundle (numpy arrays).

    q            [T, H, d_latent + d_rope]        float32 / float16 / uint16 (BF16 bits)
    kv_cache     [num_pages, page_size, d_latent + d_rope]   same dtype as q; with kv_dtype
                                                 "fp8_e4m3": uint8 e4m3 bytes, or float values
                                                 stored as e4m3_bits(value / kv_scale)
    page_table   [B, max_pages] int              KV row j of request b: page
                                                 page_table[b][j // page_size]
    q_indptr     [B + 1] int                     request b owns q rows q_indptr[b]:q_indptr[b+1]
    kv_lens      [B] int                         prefix + draft nodes
    tree_parents [T] int                         local parent of each node, -1 for each root
    draft_tokens [T] int or None                 None: `gen --expect-from` picks them
    dtype        "bf16" | "f16" | "f32"; None infers f32 / f16 from q (uint16 needs "bf16")
    kv_dtype     None (the cache has q's dtype) or "fp8_e4m3" (alias "fp8"): an F8_E4M3 cache
    kv_scale     the FP8 cache's scale (a KV element's value is e4m3(byte) x kv_scale),
                 written as the kv_scale tensor; required with an FP8 cache, refused otherwise
    extra_metadata  dict of further string metadata (a capture's provenance); readers ignore it
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
    fp8 = kv_dtype is not None and is_fp8(kv_dtype)
    if kv_dtype is not None and not fp8 and kv_dtype != dtype:
        raise ValueError("kv_dtype %r with dtype %s: the cache has q's dtype or is fp8_e4m3"
                         % (kv_dtype, dtype))
    if fp8 and kv_scale is None:
        raise ValueError("an fp8_e4m3 cache needs its kv_scale (a KV element's value is "
                         "e4m3(byte) x kv_scale)")
    if not fp8 and kv_scale is not None:
        raise ValueError("kv_scale goes with an fp8_e4m3 cache (kv_dtype='fp8_e4m3') only")
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
    tensors = [("softmax_scale", "F32", [1], np.array([softmax_scale], dtype="<f4"))]
    if fp8:  # the 4-byte tensors first, in the order mlaverify gen writes them
        kv_scale = kv_scale_value(kv_scale)
        tensors.append(("kv_scale", "F32", [1], np.array([kv_scale], dtype="<f4")))
        kv_st = "F8_E4M3"
        if kv_cache.dtype == np.uint8:
            kv_data = np.ascontiguousarray(kv_cache)
        elif np.issubdtype(kv_cache.dtype, np.floating):
            kv_data = e4m3_bits(kv_cache.astype(np.float64) / np.float32(kv_scale))
        else:
            raise ValueError("an fp8_e4m3 kv_cache is uint8 e4m3 bytes or float values, not %s"
                             % kv_cache.dtype)
    else:
        kv_st, kv_data = st, _storage(kv_cache, dtype)
    tensors += [
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
                ("kv_cache", kv_st, kv_cache.shape, kv_data)]
    metadata = {"format": FORMAT, "version": VERSION, "num_heads": H, "d_latent": d_latent,
                "d_rope": W - d_latent, "vocab": vocab, "readout_seed": readout_seed,
                "source": source}
    for k, v in (extra_metadata or {}).items():
        metadata.setdefault(str(k), v)  # provenance may not override the format's keys
    write_safetensors(path, tensors, metadata)


_NP = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I32": "<i4", "F64": "<f8", "I64": "<i8",
       "U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "U32": "<u4", "BOOL": "u1",
       "F8_E4M3": "u1"}


def read_bundle(path):
    """(tensors, metadata) of any bundle; BF16 tensors come back as uint16 bits (bf16_to_f32
    turns them into float32), an F8_E4M3 kv_cache as uint8 bytes (its values:
    e4m3_to_f32(bytes) * tensors["kv_scale"][0])."""
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


# ---- capture from live tensors -------------------------------------------------------------

def _to_host(name, x):
    """numpy array and dtype name of a numpy array or a (CPU or CUDA) torch tensor; BF16
    tensors come back as uint16 bits, torch.float8_e4m3fn ones as uint8 bytes."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.contiguous().view(torch.int16).cpu().numpy().view(np.uint16), "bfloat16"
        if x.dtype == getattr(torch, "float8_e4m3fn", None):
            return x.contiguous().view(torch.uint8).cpu().numpy(), "float8_e4m3fn"
        return x.contiguous().cpu().numpy(), str(x.dtype).replace("torch.", "")
    a = np.asarray(x)
    return a, a.dtype.name


def _chain_parents(q_indptr):
    parents = np.empty(int(q_indptr[-1]), dtype=np.int32)
    for b in range(len(q_indptr) - 1):
        lo, hi = int(q_indptr[b]), int(q_indptr[b + 1])
        parents[lo:hi] = np.arange(lo, hi) - lo - 1
    return parents


def capture_bundle(path, *, q, kv_cache, page_table, q_indptr, kv_lens, softmax_scale,
                   tree_parents=None, tree_mask=None, d_latent=512, dtype=None,
                   draft_tokens=None, vocab=256, readout_seed=1, compact=True,
                   source="mlaverify.capture_bundle", metadata=None, kv_dtype=None,
                   kv_scale=None):
    """Write the inputs of one verify step, taken from live tensors, as an inputs-only bundle.

    Tensors may be numpy arrays or torch tensors (CPU or CUDA; they are copied to the host, so
    this synchronizes: call it outside graph capture, on a step worth keeping).

    q, kv_cache, page_table, q_indptr, kv_lens   as Plan.run / Problem take them
    tree_parents   [T] local parents (-1 at each root); or
    tree_mask      the packed [T, words] mask of the step (it must be a tree: node plus
                   ancestors); neither: every request is a causal chain
    compact        keep only the KV pages the requests use (renumbered in order of first use),
                   so that a capture from a pool of millions of rows stays small
    dtype          None infers from q (torch.bfloat16 -> bf16); numpy uint16 needs "bf16"
    kv_dtype       None infers from kv_cache: torch.float8_e4m3fn -> "fp8_e4m3" (SGLang's and
                   vLLM's fp8_e4m3 caches); a uint8 cache of e4m3 bytes needs "fp8_e4m3"
    kv_scale       an FP8 cache's scale: a float or a 1-element tensor (SGLang: the layer's
                   k_scale; vLLM: layer._k_scale), required with an FP8 cache
    metadata       dict of extra provenance strings (model, step, engine version...)

    Then `complete_bundle(path, out_path)` adds the fp64 oracle's expectations.
    Returns a dict of what was written (T, B, pages kept).
    """
    from .tree import parents_from_tree_mask  # the library is needed only for a mask

    qi = _i32("q_indptr", _to_host("q_indptr", q_indptr)[0])
    kl = _i32("kv_lens", _to_host("kv_lens", kv_lens)[0])
    pt = _i32("page_table", _to_host("page_table", page_table)[0])
    if pt.ndim != 2 or qi.shape != (pt.shape[0] + 1,) or kl.shape != (pt.shape[0],):
        raise ValueError("page_table must be [B, max_pages], q_indptr [B+1], kv_lens [B]")
    if tree_parents is not None:
        parents = _i32("tree_parents", _to_host("tree_parents", tree_parents)[0])
    elif tree_mask is not None:
        parents = parents_from_tree_mask(_to_host("tree_mask", tree_mask)[0], qi)
    else:
        parents = _chain_parents(qi)
    torch = sys.modules.get("torch")
    is_torch_kv = torch is not None and isinstance(kv_cache, torch.Tensor)
    if is_torch_kv and kv_cache.dtype == getattr(torch, "float8_e4m3fn", None):
        # bytes from here on (index_select and the copy need no fp8 kernels)
        kv_cache = kv_cache.view(torch.uint8)
        kv_dtype = "fp8_e4m3" if kv_dtype is None else kv_dtype
        if not is_fp8(kv_dtype):
            raise ValueError("kv_cache is torch.float8_e4m3fn but kv_dtype is %r" % (kv_dtype,))
    if len(kv_cache.shape) != 3:
        raise ValueError("kv_cache must be [num_pages, page_size, W]")
    page_size = int(kv_cache.shape[1])
    kept = int(kv_cache.shape[0])
    if compact:
        used = []
        for b in range(pt.shape[0]):
            n = -(-int(kl[b]) // page_size)
            if n > pt.shape[1]:
                raise ValueError("kv_lens[%d] = %d needs %d pages but page_table has %d columns"
                                 % (b, int(kl[b]), n, pt.shape[1]))
            used.append(pt[b, :n])
        used = np.concatenate(used) if used else np.zeros(0, np.int32)
        if used.size and (used.min() < 0 or used.max() >= kv_cache.shape[0]):
            raise ValueError("page_table holds page ids outside [0, %d)" % kv_cache.shape[0])
        _, first = np.unique(used, return_index=True)
        order = used[np.sort(first)]  # page ids in order of first use
        if order.size == 0:
            order = np.zeros(1, dtype=np.int32)
        remap = {int(p): i for i, p in enumerate(order)}
        new_pt = np.zeros_like(pt)
        for b in range(pt.shape[0]):
            n = -(-int(kl[b]) // page_size)
            new_pt[b, :n] = [remap[int(p)] for p in pt[b, :n]]
        if is_torch_kv:
            idx = torch.from_numpy(order.astype(np.int64)).to(kv_cache.device)
            kv_sel = kv_cache.index_select(0, idx)
        else:
            kv_sel = np.asarray(kv_cache)[order]
        pt, kv_cache, kept = new_pt, kv_sel, int(order.size)
    q_np, q_dt = _to_host("q", q)
    kv_np, kv_dt = _to_host("kv_cache", kv_cache)
    if dtype is None:
        dtype = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}.get(q_dt)
        if dtype is None:
            raise ValueError("say dtype='bf16' (or 'f16'/'f32') for q of dtype %s" % q_dt)
    elif dtype in ("bfloat16",):
        dtype = "bf16"
    fp8 = kv_dtype is not None and is_fp8(kv_dtype)
    if fp8 and kv_dt not in ("uint8", "float8_e4m3fn"):
        raise ValueError("kv_dtype fp8_e4m3 takes a torch.float8_e4m3fn or uint8 kv_cache, "
                         "not %s" % kv_dt)
    if not fp8 and kv_dt == "uint8":
        raise ValueError("kv_cache is uint8: say kv_dtype='fp8_e4m3' if it holds e4m3 bytes")
    if not fp8 and q_dt != kv_dt:
        raise ValueError("q is %s but kv_cache is %s" % (q_dt, kv_dt))
    meta = {"capture_pool_pages": str(kept)}
    meta.update({str(k): str(v) for k, v in (metadata or {}).items()})
    write_bundle(path, q=q_np, kv_cache=kv_np, page_table=pt, q_indptr=qi, kv_lens=kl,
                 tree_parents=parents, softmax_scale=float(softmax_scale), d_latent=d_latent,
                 dtype=dtype,
                 draft_tokens=None if draft_tokens is None else
                 _to_host("draft_tokens", draft_tokens)[0],
                 vocab=vocab, readout_seed=readout_seed, source=source, extra_metadata=meta,
                 kv_dtype="fp8_e4m3" if fp8 else None, kv_scale=kv_scale)
    return {"T": int(qi[-1]), "B": int(pt.shape[0]), "pages": kept}


def find_cli():
    """Path of the `mlaverify` command: $MLAVERIFY_CLI, then PATH, then beside the loaded
    library (a build tree's mlaverify, an install's bin/mlaverify)."""
    env = os.environ.get("MLAVERIFY_CLI")
    if env:
        return env
    found = shutil.which("mlaverify")
    if found:
        return found
    try:
        from . import _lib
        libdir = os.path.dirname(os.path.abspath(_lib.path()))
        for rel in ("mlaverify", "../bin/mlaverify"):
            p = os.path.normpath(os.path.join(libdir, rel))
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    except OSError:
        pass
    raise FileNotFoundError("the mlaverify command was not found: set MLAVERIFY_CLI or put it "
                            "on PATH")


def _cli(args, cli):
    return subprocess.run([cli or find_cli()] + [str(a) for a in args], capture_output=True,
                          text=True)


def complete_bundle(inputs, out, *, cli=None, args=()):
    """`mlaverify gen --expect-from inputs out [args]`: add the fp64 oracle's expectations.
    Returns the command's report; raises RuntimeError with its message on failure."""
    r = _cli(["gen", "--expect-from", inputs] + list(args) + [out], cli)
    if r.returncode != 0:
        raise RuntimeError("mlaverify gen --expect-from %s failed (%d): %s"
                           % (inputs, r.returncode, (r.stderr or r.stdout).strip()))
    return r.stdout


def check_bundle(path, *, backend=None, cli=None):
    """`mlaverify check [--backend B] path`: (passed, report)."""
    args = ["check"] + (["--backend", backend] if backend else []) + [path]
    r = _cli(args, cli)
    return r.returncode == 0, r.stdout + r.stderr


# ---- the command line (golden/write_bundle.py) ---------------------------------------------

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


def main(argv, prog=None):
    """golden/write_bundle.py: write an inputs bundle from an .npz (or --demo)."""
    ap = argparse.ArgumentParser(
        prog=prog, description="Write the inputs of a mlaverify golden bundle from numpy "
                               "arrays (numpy and the standard library only), so that q / KV "
                               "cache / page table captured from a live engine can be checked.")
    ap.add_argument("out", help="the inputs bundle to write (.safetensors)")
    ap.add_argument("--npz", help="arrays q, kv_cache, page_table, q_indptr, kv_lens, "
                                  "tree_parents, softmax_scale [, draft_tokens] [, kv_scale "
                                  "with --kv-dtype fp8]")
    ap.add_argument("--demo", action="store_true", help="write a tiny random case instead")
    ap.add_argument("--d-latent", type=int, default=512)
    ap.add_argument("--dtype", choices=sorted(_DTYPES), default=None)
    ap.add_argument("--kv-dtype", choices=list(FP8_NAMES), default=None,
                    help="an FP8 (E4M3) cache: kv_cache in the npz is uint8 e4m3 bytes (or "
                         "float values to quantize) and the npz holds kv_scale")
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
                 source="golden/write_bundle.py --npz " + args.npz,
                 kv_dtype=args.kv_dtype, kv_scale=z["kv_scale"] if "kv_scale" in z else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
