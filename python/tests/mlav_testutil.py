"""Helpers shared by the binding's tests: random verify problems and a numpy fp64 oracle.

The oracle here is independent of the library (plain numpy, from DESIGN.md section 1), so a
binding that passed the wrong pointer would fail against it even when two backends agree.
"""
import os
import random

import numpy as np

import mlaverify as mv
from mlaverify.bundle import bf16_bits, bf16_to_f32, e4m3_bits, e4m3_to_f32

TOL_OUT = {"f32": 1e-5, "bf16": 5e-3, "f16": 5e-3}
TOL_LSE = {"f32": 1e-5, "bf16": 1e-3, "f16": 1e-3}


def fresh_seed(label):
    """A new seed per test unless MLAV_TEST_SEED is set; printed so a failure can be re-run."""
    env = os.environ.get("MLAV_TEST_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(2**31)
    print("%s: seed=%d (rerun with MLAV_TEST_SEED=%d)" % (label, seed, seed))
    return seed


def make_parents(rng, n, kind):
    """Local parents of one request's draft tree: chain, bushy (wide, shallow) or random."""
    par = np.full(n, -1, dtype=np.int32)
    for i in range(1, n):
        if kind == "chain":
            par[i] = i - 1
        elif kind == "bushy":
            par[i] = rng.integers(0, min(i, 4))
        else:
            par[i] = rng.integers(0, i)
    return par


#: the scale of FP8 test caches: gen's default (the values, in [-1, 1), reach e4m3 224)
FP8_SCALE = float(np.float32(1.0 / 224.0))


def make_case(rng, *, H, Dl=512, Dr=64, dtype="f32", page_size=1, reqs, spare_pages=2,
              poison=True, causal=False, kv_dtype=None, kv_scale=FP8_SCALE):
    """A random verify problem. reqs: list of (q_len, prefix_len, tree kind). The pool is NaN
    outside the rows the requests use (so reading past the page table shows), page ids are
    shuffled, unused page-table columns point at a spare page. Returns a dict with the
    library inputs (q, kv_cache in the dtype's storage: uint16 bits for bf16; uint8 e4m3 bytes
    e4m3(v / kv_scale) for kv_dtype "fp8_e4m3", whose NaN poison is the byte 0x7f), the
    float64 values they hold (an FP8 cache's: e4m3 x kv_scale, exact in float64), and the
    lengths."""
    W = Dl + Dr
    q_lens = np.array([r[0] for r in reqs], dtype=np.int32)
    prefixes = np.array([r[1] for r in reqs], dtype=np.int32)
    kv_lens = prefixes + q_lens
    pages = -(-kv_lens // page_size)
    num_pages = int(pages.sum()) + spare_pages
    perm = rng.permutation(num_pages).astype(np.int32)
    max_pages = int(pages.max()) + 1
    B = len(reqs)
    page_table = np.full((B, max_pages), perm[-1], dtype=np.int32)
    pool = np.full((num_pages, page_size, W), np.nan if poison else 0.0, dtype=np.float32)
    at = 0
    for b in range(B):
        page_table[b, :pages[b]] = perm[at:at + pages[b]]
        at += int(pages[b])
        for j in range(int(kv_lens[b])):
            pool[page_table[b, j // page_size], j % page_size] = rng.uniform(-1, 1, W)
    q_indptr = np.zeros(B + 1, dtype=np.int32)
    q_indptr[1:] = np.cumsum(q_lens)
    T = int(q_indptr[-1])
    q = rng.uniform(-2, 2, (T, H, W)).astype(np.float32)
    parents = np.concatenate([make_parents(rng, int(n), "chain" if causal else r[2])
                              for n, r in zip(q_lens, reqs)]).astype(np.int32)
    mask = None if causal else mv.tree_mask_from_parents(parents, q_indptr)
    if dtype == "bf16":
        q_st, kv_st = bf16_bits(q), bf16_bits(pool)
        q_val, kv_val = bf16_to_f32(q_st), bf16_to_f32(kv_st)
    elif dtype == "f16":
        q_st, kv_st = q.astype(np.float16), pool.astype(np.float16)
        q_val, kv_val = q_st.astype(np.float32), kv_st.astype(np.float32)
    else:
        q_st, kv_st, q_val, kv_val = q, pool, q, pool
    kv_val = kv_val.astype(np.float64)
    fp8 = kv_dtype is not None and mv.api.kv_dtype_name(kv_dtype, dtype) == "fp8_e4m3"
    if fp8:
        kv_st = e4m3_bits(pool.astype(np.float64) / np.float32(kv_scale))
        kv_val = e4m3_to_f32(kv_st).astype(np.float64) * float(np.float32(kv_scale))
    return dict(H=H, Dl=Dl, Dr=Dr, dtype=dtype, page_size=page_size, q=q_st, kv_cache=kv_st,
                q_val=q_val.astype(np.float64), kv_val=kv_val,
                page_table=page_table, tree_mask=mask, parents=parents, q_indptr=q_indptr,
                kv_lens=kv_lens, scale=1.0 / np.sqrt(Dl / 4 + Dr), T=T,
                kv_dtype="fp8_e4m3" if fp8 else dtype,
                kv_scale=float(np.float32(kv_scale)) if fp8 else None)


def plan_for(case, backend, **kw):
    """A Plan for a make_case problem (kv_dtype included: an FP8 case's runs take
    kv_scale=case["kv_scale"])."""
    return mv.Plan(num_heads=case["H"], d_latent=case["Dl"], d_rope=case["Dr"],
                   softmax_scale=case["scale"], dtype=case["dtype"],
                   page_size=case["page_size"], q_indptr=case["q_indptr"],
                   kv_lens=case["kv_lens"], max_pages=case["page_table"].shape[1],
                   kv_dtype=case.get("kv_dtype"), backend=backend, **kw)


def visible(case, b):
    """[q_len, kv_len] bool visibility of request b."""
    lo, hi = int(case["q_indptr"][b]), int(case["q_indptr"][b + 1])
    n, kv = hi - lo, int(case["kv_lens"][b])
    prefix = kv - n
    vis = np.zeros((n, kv), dtype=bool)
    vis[:, :prefix] = True
    if case["tree_mask"] is None:
        vis[:, prefix:] = np.tril(np.ones((n, n), dtype=bool))
    else:
        vis[:, prefix:] = mv.unpack_mask(case["tree_mask"][lo:hi], n)
    return vis


def oracle(case):
    """fp64 out [T, H, Dl] and lse [T, H] straight from the definition."""
    T, H, Dl, ps = case["T"], case["H"], case["Dl"], case["page_size"]
    out = np.zeros((T, H, Dl))
    lse = np.full((T, H), -np.inf)
    for b in range(len(case["kv_lens"])):
        lo, hi = int(case["q_indptr"][b]), int(case["q_indptr"][b + 1])
        kv = int(case["kv_lens"][b])
        if hi == lo:
            continue
        j = np.arange(kv)
        K = case["kv_val"][case["page_table"][b, j // ps], j % ps]          # [kv, W]
        s = case["scale"] * np.einsum("qhw,kw->qhk", case["q_val"][lo:hi], K)
        vis = visible(case, b)[:, None, :]
        s = np.where(vis, s, -np.inf)
        m = s.max(axis=2, keepdims=True)
        m_safe = np.where(np.isfinite(m), m, 0.0)
        p = np.where(vis, np.exp(s - m_safe), 0.0)
        l = p.sum(axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            o = np.einsum("qhk,kd->qhd", p, K[:, :Dl]) / l[:, :, None]
            out[lo:hi] = np.where(l[:, :, None] > 0, o, 0.0)
            lse[lo:hi] = np.where(l > 0, m[:, :, 0] + np.log(l), -np.inf)
    return out, lse


def round_to_dtype(x, dtype):
    """float64 values (an oracle's out) stored in a dtype as the library stores out: BF16 bits,
    float16 or float32, round to nearest even."""
    if dtype == "bf16":
        return bf16_bits(x.astype(np.float32))
    if dtype == "f16":
        return x.astype(np.float16)
    return x.astype(np.float32)


def as_f64(x, dtype):
    """Library output (numpy) as float64 values."""
    x = np.asarray(x)
    if dtype == "bf16":
        return bf16_to_f32(x).astype(np.float64)
    return x.astype(np.float64)


def compare(case, out, lse, ref_out, ref_lse, what, seed, tol_scale=1.0):
    """Per-request out rel-L2 and lse abs error within the dtype's tolerance (FORMAT.md)."""
    dt = case["dtype"]
    out = as_f64(out, dt)
    lse = np.asarray(lse, dtype=np.float64)
    ref_out = as_f64(ref_out, dt)
    ref_lse = np.asarray(ref_lse, dtype=np.float64)
    assert np.array_equal(np.isnan(out), np.isnan(ref_out)), "%s: NaN positions (seed %d)" % (
        what, seed)
    assert np.array_equal(np.isinf(lse), np.isinf(ref_lse)), "%s: inf lse (seed %d)" % (
        what, seed)
    qi = case["q_indptr"]
    for b in range(len(qi) - 1):
        lo, hi = int(qi[b]), int(qi[b + 1])
        if hi == lo:
            continue
        num = np.linalg.norm(np.nan_to_num(out[lo:hi] - ref_out[lo:hi]))
        den = max(np.linalg.norm(np.nan_to_num(ref_out[lo:hi])), 1e-30)
        assert num / den <= TOL_OUT[dt] * tol_scale, \
            "%s: request %d out rel-L2 %.3g > %.1g (seed %d)" % (what, b, num / den,
                                                                TOL_OUT[dt] * tol_scale, seed)
    fin = np.isfinite(ref_lse)
    if fin.any():
        err = np.max(np.abs(lse[fin] - ref_lse[fin]))
        assert err <= TOL_LSE[dt] * tol_scale, "%s: lse abs error %.3g (seed %d)" % (
            what, err, seed)


def sglang_inputs(case, rng):
    """SGLang's views of a page_size-1 case."""
    pt, kv, qi = case["page_table"], case["kv_lens"], case["q_indptr"]
    q_lens = np.diff(qi)
    prefix = kv - q_lens
    B = len(kv)
    pre = [pt[b, :prefix[b]] for b in range(B)]
    draft = [pt[b, prefix[b]:kv[b]] for b in range(B)]
    junk = rng.integers(0, case["kv_cache"].shape[0], 5)  # buffers are often longer
    s = {
        "kv_indptr": np.concatenate([[0], np.cumsum(prefix)]).astype(np.int32),
        "kv_indices": np.concatenate(pre + [junk]).astype(np.int64),
        "out_cache_loc": np.concatenate(draft).astype(np.int64),
        "fi_kv_indptr": np.concatenate([[0], np.cumsum(kv)]).astype(np.int32),
        "fi_kv_indices": np.concatenate([pt[b, :kv[b]] for b in range(B)] + [junk]).astype(
            np.int64),
    }
    full, qlen, rows = [], [], []
    for b in range(B):
        n = int(q_lens[b])
        vis = mv.unpack_mask(case["tree_mask"][qi[b]:qi[b + 1]], n)
        f = np.ones((n, int(prefix[b]) + n), dtype=bool)
        f[:, prefix[b]:] = vis
        full.append(f.ravel())
        qlen.append(vis.ravel())
        rows.append(vis)
    s["full"] = np.concatenate(full)
    s["qlen"] = np.concatenate(qlen)
    maxq = int(q_lens.max())
    dense = np.zeros((case["T"], maxq), dtype=bool)
    for b in range(B):
        dense[qi[b]:qi[b + 1], :q_lens[b]] = rows[b]
    s["dense"] = dense
    s["bits"] = case["tree_mask"][:, 0].copy() if case["tree_mask"].shape[1] == 1 else None
    return s
