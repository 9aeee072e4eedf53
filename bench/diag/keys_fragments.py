#!/usr/bin/env python3
"""The register layouts of the sm_90a keys kernel (src/cuda/sm90/keys/), checked on the host:
numpy models of mma.m16n8k16's fragments (fp8_fragments.py's, PTX ISA "Matrix Fragments for
mma.m16n8k16") and of movmatrix.m8n8.trans.b16, then one warp's S^T = K Q^T over its half of the
features and O^T = V^T P^T over its 16 keys, lane by lane from those fragments, against numpy's
products. Nothing here runs on a GPU; it checks the kernel's algebra, not the kernel.

- Feature order: within a 64-feature group (32 for the rope), lane (g, t) loads the 16 (8)
  contiguous bytes at 16 t (8 t) of keys g and g + 8; word s is k16 step s, its bytes e = 0..3 the
  A fragment's columns 2t, 2t+1 (e 0, 1) and 2t+8, 2t+9 (e 2, 3), and Q's B fragment reads the
  same physical features (one 8-byte load of row g: b0 = e 0, 1; b1 = e 2, 3).
- V^T's A fragment of the m-tile made from step s of group u is K's, each 8x8 register
  transposed: (trans a0, trans a2, trans a1, trans a3); its row k is dim keys_dim(h, u, s, k).
- P^T's B fragment of an n8 tile: trans(pack(c0, c1)) for keys 0-7, trans(pack(c2, c3)) for 8-15.

    python3 bench/diag/keys_fragments.py      # prints the checks; exits 1 on a mismatch
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fp8_fragments import LANES, accum_positions, mma_16816  # noqa: E402


def movtrans(pairs):
    """movmatrix.m8n8.trans.b16: lane (g, t) holds row g, cols 2t, 2t+1 of an 8x8 matrix; returns
    the transpose in the same layout."""
    m = np.zeros((8, 8))
    for l in range(LANES):
        g, t = l // 4, l % 4
        m[g, 2 * t], m[g, 2 * t + 1] = pairs[l]
    return [(m.T[l // 4, 2 * (l % 4)], m.T[l // 4, 2 * (l % 4) + 1]) for l in range(LANES)]


def keys_dim(h, u, s, k):
    """keys/traits.cuh's keys_dim: the physical dim of row k of the O^T m-tile (group u, step s,
    half h)."""
    return 256 * h + 64 * u + 16 * ((k & 7) >> 1) + 4 * s + ((k & 1) | ((k >> 3) << 1))


def a_regs(kmat, feat):
    """K's A fragment (16 keys x one k16 step) per lane as 4 register pairs: a0 (key g, e 0, 1),
    a1 (key g + 8, e 0, 1), a2 (key g, e 2, 3), a3 (key g + 8, e 2, 3); feat(t, e) the feature."""
    out = []
    for l in range(LANES):
        g, t = l // 4, l % 4
        out.append([(kmat[r, feat(t, e)], kmat[r, feat(t, e + 1)])
                    for r, e in ((g, 0), (g + 8, 0), (g, 2), (g + 8, 2))])
    return out


def flat_a(regs):
    return [[x for pair in regs[l] for x in pair] for l in range(LANES)]


def check(rng, rows):
    ntn = rows // 8
    k = rng.standard_normal((16, 576))
    q = rng.standard_normal((rows, 576))
    p = rng.standard_normal((16, rows))  # any P^T (keys x rows) in S^T's C layout
    ok = True
    for h in range(2):
        s_t = np.zeros((16, rows))
        kf = {}
        steps = [(lambda t, e, u=u, s=s: 256 * h + 64 * u + 16 * t + 4 * s + e, (u, s))
                 for u in range(4) for s in range(4)]
        steps += [(lambda t, e, s=s: 512 + 32 * h + 8 * t + 4 * s + e, None) for s in range(2)]
        for feat, key in steps:
            regs = a_regs(k, feat)
            if key:
                kf[key] = regs
            for n in range(ntn):
                b = [[q[8 * n + l // 4, feat(l % 4, e)] for e in range(4)] for l in range(LANES)]
                s_t[:, 8 * n:8 * n + 8] += mma_16816(flat_a(regs), b)
        feats = list(range(256 * h, 256 * h + 256)) + list(range(512 + 32 * h, 544 + 32 * h))
        ok &= np.allclose(s_t, k[:, feats] @ q[:, feats].T)
        o_t = np.zeros((512, rows))
        for n in range(ntn):
            c = [[p[r, 8 * n + col] for r, col in accum_positions(l)] for l in range(LANES)]
            b0 = movtrans([(c[l][0], c[l][1]) for l in range(LANES)])
            b1 = movtrans([(c[l][2], c[l][3]) for l in range(LANES)])
            b = [[b0[l][0], b0[l][1], b1[l][0], b1[l][1]] for l in range(LANES)]
            for (u, s), regs in kf.items():
                tr = [movtrans([regs[l][i] for l in range(LANES)]) for i in range(4)]
                a = [[tr[0][l], tr[2][l], tr[1][l], tr[3][l]] for l in range(LANES)]
                d = mma_16816(flat_a(a), b)
                for r in range(16):
                    o_t[keys_dim(h, u, s, r), 8 * n:8 * n + 8] += d[r]
        ref = k[:, :512].T @ p
        lo, hi = 256 * h, 256 * h + 256
        ok &= np.allclose(o_t[lo:hi], ref[lo:hi]) and not o_t[:lo].any() and not o_t[hi:].any()
        ok &= sorted(keys_dim(h, u, s, r) for u in range(4) for s in range(4)
                     for r in range(16)) == list(range(lo, hi))
    print(f"keys kernel, {rows} rows: S^T over each half's features, O^T over each half's dims, "
          f"keys_dim a bijection: {'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    rng = np.random.default_rng(49)
    ok = all([check(rng, 8), check(rng, 16)])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
