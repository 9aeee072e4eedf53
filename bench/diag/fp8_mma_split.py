#!/usr/bin/env python3
"""What an FP8 cache's verify would lose by multiplying in e4m3 (mma.sync.m16n8k32 .e4m3, legal on
sm_89+, sm_90a and sm_120), checked on the host before any kernel is written.

The keys kernel (src/cuda/sm90/keys/) converts every K byte to F16 in registers (F2FP) and
transposes K's fragments into V^T's (MOVM): 144 of a warp's 546 instructions a tile at 16 rows on
an H100 (docs/PERFORMANCE.md#hopper, "FP8 cache"). Multiplying the raw bytes instead needs the other
operand in e4m3 too, so q and P would each be split into two e4m3 terms, hi = e4m3(x) and lo =
e4m3(x - hi) (x scaled by a power of two where the kernel can), and every product taken twice:
the same count of mma.sync as today's k16 F16 ones, P's two terms in one k32 product's halves
against V^T's bytes twice. By count, 72 F2FP and 32 of the 68 movmatrix go, and V^T's byte
permutes (32) and P's split (~20) come: ~494 instructions a tile against 546. Measured here
against the fp64 oracle's math on the same e4m3 cache values, out rel-L2 and lse error of:
  f16      today's keys kernel: q as F16 (BF16 q scaled by the block's power of two), K and V exact
           in F16, S in fp32, P rounded to F16, row sums of the unrounded P, O in fp32;
  bf16     the 16-bit paths' way with BF16 operands (the seesaw's BF16 instances): q exact, P
           rounded to BF16;
  split2   q in two terms (scaled so its largest |value| is in [128, 256)), P in two terms with the
           reference at the row's maximum (P <= 1), unscaled: the lazy reference
           (reference_max.cuh) lets P reach 2^8 = 256 of e4m3's 448, so no factor fits;
  split2x  the same with P x 2^8: what a kernel whose reference is always the exact maximum could
           take (rescaling O whenever a tile's maximum rises).
The library's tolerance for BF16 and F16 outputs is rel-L2 5e-3 and lse 1e-3 (tests/test_util.h).
Then P's terms alone on scores that stress their range, the reference at the maximum and 8 below.

    python3 bench/diag/fp8_mma_split.py [seed]    # prints the seed and the tables; numpy and the
                                                  # binding's conversions (python/mlaverify)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from mlaverify.bundle import bf16_bits, bf16_to_f32, e4m3_bits, e4m3_to_f32  # noqa: E402

DL, DR = 512, 64
W = DL + DR


def e4m3(x):
    """x rounded to e4m3 by the binding's rule (mlaverify.bundle: the library's mlav_f32_to_e4m3),
    as float64 values."""
    return e4m3_to_f32(e4m3_bits(x)).astype(np.float64)


def bf16(x):
    """x rounded to BF16 by the binding's rule (mlav_f32_to_bf16), as float64 values."""
    return bf16_to_f32(bf16_bits(x)).astype(np.float64)


def hi_lo(x):
    """x as two e4m3 terms, hi = e4m3(x) and lo = e4m3(x - hi): their sum."""
    hi = e4m3(x)
    return hi + e4m3(x - hi)


def split(x, top):
    """hi_lo of x scaled by a power of two (its largest |x| to [top/2, top)), scaled back."""
    m = np.max(np.abs(x))
    s = np.exp2(np.floor(np.log2(top / m))) if m > 0 else 1.0
    return hi_lo(x * s) / s


def verify(q, k, scale, kind):
    """out [rows, DL] and lse [rows] of softmax(scale q k^T) k[:, :DL] computed the way `kind` says
    (k: the cache's e4m3 values, exact in every kind)."""
    if kind in ("ref", "bf16"):
        qq = q
    elif kind == "f16":
        qq = q.astype(np.float16).astype(np.float64)  # BF16 q, block-scaled: exact in F16
    else:
        qq = split(q, 256.0)
    s = qq @ k.T
    if kind != "ref":
        s = s.astype(np.float32).astype(np.float64)  # fp32 accumulators
    s = s * scale
    m = s.max(axis=1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=1, keepdims=True)
    if kind == "f16":
        p = p.astype(np.float16).astype(np.float64)
    elif kind == "bf16":
        p = bf16(p)
    elif kind == "split2":
        p = hi_lo(p)
    elif kind == "split2x":
        p = np.stack([split(row, 256.0) for row in p])
    o = (p @ k[:, :DL]) / l
    return o, (m + np.log(l))[:, 0]


def case(rng, rows, n, outliers):
    """BF16 q and an e4m3 cache: normal values, a few latent channels `outliers` times larger."""
    q = rng.standard_normal((rows, W))
    kv = rng.standard_normal((n, W))
    if outliers > 1:
        ch = rng.choice(W, 8, replace=False)
        kv[:, ch] *= outliers
        q[:, ch] /= outliers ** 0.5
    return bf16(q), e4m3(kv * 16.0) / 16.0


def p_alone(rng):
    """P's terms alone, on scores made to stress its range: O = sum_j P_j v_j / sum_j P_j with P_j =
    2^(s_j - ref) as the kernels form it, the lazy reference (reference_max.cuh) anywhere from the
    row's maximum (P <= 1) to 8 below it (P <= 256); P rounded as each kind says (split2: hi + lo
    e4m3, unscaled, its range being all of e4m3's); against the same sum in fp64."""
    n = 32768
    print(f"P alone, {n} keys, one row: out rel-L2 with the reference at the maximum / 8 below it")
    print(f"{'scores (log2 units)':>36} {'f16':>19} {'bf16':>19} {'split2':>19}")
    worst = {}
    tail = lambda d: (f"one key at 0, the rest at -{d} +- 1",
                      np.r_[0.0, -d + rng.standard_normal(n - 1)])
    for name, s in [("normal, sd 1", rng.standard_normal(n)),
                    ("normal, sd 3", 3.0 * rng.standard_normal(n)), tail(8), tail(11), tail(14)]:
        v = rng.standard_normal((n, 64))
        cells = []
        for kind in ("f16", "bf16", "split2"):
            rels = []
            for lag in (0.0, 8.0):
                p = np.exp2(s - (s.max() - lag))
                ref = p @ v / p.sum()
                if kind == "f16":
                    pq = p.astype(np.float16).astype(np.float64)
                elif kind == "bf16":
                    pq = bf16(p)
                else:
                    pq = hi_lo(p)
                rels.append(np.linalg.norm(pq @ v / p.sum() - ref) / np.linalg.norm(ref))
            worst[kind] = max(worst.get(kind, 0.0), *rels)
            cells.append(f"{rels[0]:9.2e}/{rels[1]:9.2e}")
        print(f"{name:>36} " + " ".join(cells))
    for kind, rel in worst.items():
        print(f"P alone, worst {kind:>7}: out rel-L2 {rel:.3e}")


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else int(np.random.SeedSequence().entropy % 2**32)
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(192.0)
    print(f"{'rows':>4} {'keys':>6} {'outl':>4} {'kind':>7} {'out_rel_l2':>11} {'lse_err':>9}")
    worst = {}
    for rows, n, outliers in [(16, 512, 1), (16, 4096, 1), (16, 32768, 1), (16, 4096, 8),
                              (16, 32768, 8), (8, 4096, 32)]:
        q, k = case(rng, rows, n, outliers)
        o_ref, lse_ref = verify(q, k, scale, "ref")
        for kind in ("f16", "bf16", "split2", "split2x"):
            o, lse = verify(q, k, scale, kind)
            rel = np.linalg.norm(o - o_ref) / np.linalg.norm(o_ref)
            err = np.max(np.abs(lse - lse_ref))
            worst[kind] = max(worst.get(kind, (0, 0)), (rel, err))
            print(f"{rows:4d} {n:6d} {outliers:4d} {kind:>7} {rel:11.3e} {err:9.2e}")
    for kind, (rel, err) in worst.items():
        print(f"worst {kind:>7}: out rel-L2 {rel:.3e}, lse {err:.2e}")
    p_alone(rng)


if __name__ == "__main__":
    main()
