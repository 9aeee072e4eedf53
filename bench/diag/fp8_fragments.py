#!/usr/bin/env python3
"""The register layouts of an FP8 flash loop that converts in registers (docs/PERFORMANCE.md#fp8-kv,
"what would pay"), checked on the host: numpy models of ldmatrix (.x1, plain and .trans, b16) on
e4m3 bytes, of the byte permute that pairs two keys of V, and of mma.sync.m16n8k16's fragments
(PTX ISA, "Matrix Fragments for mma.m16n8k16"), then S = Q K^T and O = P V computed lane by lane
from those fragments against numpy's products. Nothing here runs on a GPU; the kernel that would use
these layouts does not exist yet.

- K: one ldmatrix (8 keys x 16 bytes = 16 depths) gives lane (g, t) = (lane / 4, lane % 4) the
  depths 4t .. 4t+3 of key g; as the B fragment of an n8 x k16 tile they stand at k = 2t, 2t+1
  (register 0) and 2t+8, 2t+9 (register 1), so the tile's depth order is the permutation PI below,
  and Q's A fragment takes depths 4t, 4t+1 (registers 0, 1: rows g, g+8) and 4t+2, 4t+3
  (registers 2, 3) of each 16-depth chunk: one 8-byte load per row from a row-major Q.
- V: one ldmatrix.trans (8 keys x 16 bytes = 16 dims) gives lane (g, t) the bytes of keys 2t and
  2t+1 at dims 2g and 2g+1; a byte permute pairs the keys per dim, so the lane holds the B
  fragment (k = 2t, 2t+1; n = g) of two n8 tiles at once: even dims (n = g: dim 2g) and odd
  (dim 2g+1). The accumulators of the two tiles then hold, per row, dims 4t, 4t+2 (even) and
  4t+1, 4t+3 (odd): four consecutive dims per lane, which the epilogue writes in order.

    python3 bench/diag/fp8_fragments.py       # prints the checks; exits 1 on a mismatch
"""
import sys

import numpy as np

LANES = 32


def ldmatrix(rows16):
    """ldmatrix .x1 .b16: an 8 x 8 matrix of 16-bit elements (8 rows of 16 bytes, here given as
    an [8, 16] byte array); lane (g, t) gets row g's elements 2t, 2t+1: bytes 4t .. 4t+3."""
    return [rows16[l // 4, 4 * (l % 4):4 * (l % 4) + 4] for l in range(LANES)]


def ldmatrix_trans(rows16):
    """ldmatrix .x1 .trans .b16: lane (g, t) gets the transposed matrix's row g, elements 2t, 2t+1,
    that is the original rows 2t and 2t+1 at element g: bytes (2t, 2g), (2t, 2g+1), (2t+1, 2g),
    (2t+1, 2g+1)."""
    out = []
    for l in range(LANES):
        g, t = l // 4, l % 4
        out.append(np.array([rows16[2 * t, 2 * g], rows16[2 * t, 2 * g + 1],
                             rows16[2 * t + 1, 2 * g], rows16[2 * t + 1, 2 * g + 1]]))
    return out


def pair_keys(b4):
    """prmt: from bytes (k0 d0, k0 d1, k1 d0, k1 d1) the pairs (k0 d0, k1 d0), (k0 d1, k1 d1)."""
    return np.array([b4[0], b4[2]]), np.array([b4[1], b4[3]])


# PI[kk]: the depth (within a 16-depth chunk) at the mma's k index kk
PI = np.array([4 * ((kk % 8) // 2) + (2 if kk >= 8 else 0) + kk % 2 for kk in range(16)])


def mma_16816(a, b):
    """mma.m16n8k16 from per-lane fragments: a[lane] = (a0..a7), b[lane] = (b0..b3); returns the
    16 x 8 result, by the PTX ISA's element positions."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for l in range(LANES):
        g, t = l // 4, l % 4
        for i, (r, c) in enumerate([(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
                                    (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8),
                                    (g + 8, 2 * t + 9)]):
            A[r, c] = a[l][i]
        for i, (r, c) in enumerate([(2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)]):
            B[r, c] = b[l][i]
    return A @ B


def accum_positions(l):
    """mma.m16n8k16's accumulator elements c0..c3 of lane l: (row, col)."""
    g, t = l // 4, l % 4
    return [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]


def check_scores(rng):
    """S[16 rows, 8 keys] over one 16-depth chunk: K's bytes by ldmatrix, Q by PI."""
    q = rng.standard_normal((16, 16))
    kbytes = rng.integers(0, 256, (8, 16))  # 8 keys x 16 depths, the values being the bytes
    kval = kbytes.astype(float)             # any decoding: a byte stands for its own value
    frag = ldmatrix(kbytes)
    b = [[frag[l][0], frag[l][1], frag[l][2], frag[l][3]] for l in range(LANES)]
    a = []
    for l in range(LANES):
        g, t = l // 4, l % 4
        a.append([q[g, 4 * t], q[g, 4 * t + 1], q[g + 8, 4 * t], q[g + 8, 4 * t + 1],
                  q[g, 4 * t + 2], q[g, 4 * t + 3], q[g + 8, 4 * t + 2], q[g + 8, 4 * t + 3]])
    # the lane's B registers hold depths 4t..4t+3 at k = 2t, 2t+1, 2t+8, 2t+9: PI's order
    for l in range(LANES):
        g, t = l // 4, l % 4
        for i, kk in enumerate([2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9]):
            assert kbytes[g, PI[kk]] == b[l][i]
    s = mma_16816(a, b)
    return np.allclose(s, q @ kval.T), np.abs(s - q @ kval.T).max()


def check_values(rng):
    """O[16 rows, 16 dims] over 16 keys: V's bytes by ldmatrix.trans (keys 0-7 and 8-15), two n8
    tiles (even and odd dims) from each load; the accumulators' dims put back in order."""
    p = rng.standard_normal((16, 16))
    vbytes = rng.integers(0, 256, (16, 16))  # 16 keys x 16 dims
    lo, hi = ldmatrix_trans(vbytes[0:8]), ldmatrix_trans(vbytes[8:16])
    a = []
    for l in range(LANES):
        g, t = l // 4, l % 4
        a.append([p[g, 2 * t], p[g, 2 * t + 1], p[g + 8, 2 * t], p[g + 8, 2 * t + 1],
                  p[g, 2 * t + 8], p[g, 2 * t + 9], p[g + 8, 2 * t + 8], p[g + 8, 2 * t + 9]])
    b_even, b_odd = [], []
    for l in range(LANES):
        e0, o0 = pair_keys(lo[l])
        e1, o1 = pair_keys(hi[l])
        b_even.append([e0[0], e0[1], e1[0], e1[1]])
        b_odd.append([o0[0], o0[1], o1[0], o1[1]])
    ce, co = mma_16816(a, b_even), mma_16816(a, b_odd)
    # each lane's accumulators: even c0, c1 at dims 4t, 4t+2; odd at 4t+1, 4t+3 (rows g, g+8)
    out = np.zeros((16, 16))
    for l in range(LANES):
        t = l % 4
        for i, (r, c) in enumerate(accum_positions(l)):
            assert c // 2 == t
            out[r, 2 * c] = ce[r, c]
            out[r, 2 * c + 1] = co[r, c]
        rows = {accum_positions(l)[0][0], accum_positions(l)[2][0]}
        dims = sorted({2 * c + e for (_, c) in accum_positions(l) for e in (0, 1)})
        assert dims == [4 * t, 4 * t + 1, 4 * t + 2, 4 * t + 3] and len(rows) == 2
    ref = p @ vbytes.astype(float)
    return np.allclose(out, ref), np.abs(out - ref).max()


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 17
    rng = np.random.default_rng(seed)
    assert sorted(PI.tolist()) == list(range(16)), "PI is a permutation"
    ok = True
    for name, fn in (("S = Q K^T from ldmatrix on K's bytes, Q in PI's depth order", check_scores),
                     ("O = P V from ldmatrix.trans on V's bytes, even and odd dims", check_values)):
        good, err = True, 0.0
        for _ in range(200):
            g, e = fn(rng)
            good &= g
            err = max(err, e)
        print("%-66s %s (max |diff| %.2e, 200 random tiles, seed %d)" %
              (name, "ok" if good else "MISMATCH", err, seed))
        ok &= good
    print("PI (depth at mma k index 0..15):", " ".join(str(d) for d in PI))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
