#!/usr/bin/env python3
"""The sm_90a family's FP8 gather (src/cuda/sm90/gather.cuh), checked on the host: a model of
where each of the producer warpgroup's 128 threads copies its raw e4m3 chunks of a 64-key tile
(load_kv_tile for uint8_t: 8 threads a row, lane l raw chunks l + 8k and, lanes 0..3, 32 + l,
each into the place of the first F16 chunk it becomes) and what its in-place conversion
(fp8_convert_tile) reads and writes. Checks: no byte is copied twice; each thread reads only raw
bytes it copied and writes only over them or bytes nobody copied, so the conversion needs no
barrier; the converted stage holds every (row, feature) at the 16-bit layout's place
(sw128_elem, smem_layout.cuh), every byte written; a warp's copy covers contiguous 128-byte
(the fifth: 64-byte) pieces of each of its 4 rows. And the Q tile's chunks (load_q,
q_tile_to_f16) are each one thread's. Nothing here runs on a GPU (test_sm90_layouts_gpu runs the
gather itself). Run: python3 bench/diag/sm90_fp8_gather.py"""

BB = 64 * 128  # one column block of 64 rows (BLOCK_BYTES)
W = 576
ROW_LANES, ROW_STEP, ROWS_PER_THREAD, RAW_LANE = 8, 16, 4, 4


def sw128_chunk(r, c):
    return (c >> 3) * BB + r * 128 + (((c & 7) ^ (r & 7)) << 4)


def sw128_elem(r, col):
    return sw128_chunk(r, col >> 3) + (col & 7) * 2


def gather_dst_fp8(pt):
    return sw128_chunk(pt // ROW_LANES, 2 * (pt % ROW_LANES))


def gather_dst(pt):
    return sw128_chunk(pt // ROW_LANES, pt % ROW_LANES)


def main():
    stage = [None] * (9 * BB)  # byte -> ('raw', row, feature)
    owner = [None] * (9 * BB)
    copies = {}
    for pt in range(128):
        d0, l = gather_dst_fp8(pt), pt % ROW_LANES
        lst = []
        for i in range(ROWS_PER_THREAD):
            r = pt // ROW_LANES + ROW_STEP * i
            d = d0 + i * ROW_STEP * 128
            ks = list(range(RAW_LANE)) + ([RAW_LANE] if l < ROW_LANES // 2 else [])
            for k in ks:
                a, src = d + 2 * k * BB, l * 16 + k * ROW_LANES * 16
                for b in range(16):
                    assert stage[a + b] is None, "two copies to one byte"
                    stage[a + b], owner[a + b] = ('raw', r, src + b), pt
                lst.append((a, r, src))
        copies[pt] = lst
    assert sum(x is not None for x in stage) == 64 * W
    out, touched = [None] * (9 * BB), [None] * (9 * BB)
    for pt in range(128):
        for a, r, f0 in copies[pt]:
            raw = [stage[a + b] for b in range(16)]
            assert raw == [('raw', r, f0 + b) for b in range(16)]
            for half, addr in ((0, a), (1, a ^ 16)):
                for e in range(8):
                    for byte in range(2):
                        x = addr + 2 * e + byte
                        assert touched[x] is None, "a byte converted twice"
                        assert owner[x] in (None, pt), "over another thread's raw bytes"
                        touched[x], out[x] = pt, (r, raw[8 * half + e][2], byte)
    for r in range(64):
        for col in range(W):
            a = sw128_elem(r, col)
            assert out[a] == (r, col, 0) and out[a + 1] == (r, col, 1), (r, col, out[a])
    assert all(x is not None for x in out)
    for w in range(4):
        for i in range(ROWS_PER_THREAD):
            for k in range(RAW_LANE + 1):
                rows = {}
                for pt in range(32 * w, 32 * w + 32):
                    l = pt % ROW_LANES
                    if k == RAW_LANE and l >= ROW_LANES // 2:
                        continue
                    rows.setdefault(pt // ROW_LANES + ROW_STEP * i, []).append(l * 16 + k * 128)
                for offs in rows.values():
                    offs.sort()
                    assert offs == list(range(offs[0], offs[0] + 16 * len(offs), 16))
    qa = set()
    for pt in range(128):
        for i in range(ROWS_PER_THREAD):
            for k in range(9):
                a = gather_dst(pt) + i * ROW_STEP * 128 + k * BB
                assert a not in qa
                qa.add(a)
    assert len(qa) == 64 * W // 8
    print("sm90 FP8 gather: layout, ownership, coalescing and the Q tile's chunks OK")


if __name__ == "__main__":
    main()
