#!/usr/bin/env python3
"""Summarize the per-SASS-instruction stall samples that `bench/ncu.sh SOURCE=1` (or
`ncu --page source --csv --print-source sass`) writes: instructions per loop trip by opcode, the
instructions that hold the most samples with their top stall reasons, and sample shares of index
ranges. Standard library only.

    python3 bench/diag/ncu_summary.py ncu-source.csv[.gz] [--top N] [--range A-B ...] [--dump A-B]

Instruction indices are the row numbers of the SASS listing (0 = the kernel's first
instruction), as --top and --dump print them. "Per trip" divides execution counts by the
execution count of the kernel's first HMMA (or HGMMA in the sm_90a kernels), i.e. warp x
loop-trip (one 16-key tile in the legal flash kernel, one 64-key tile's S in the sm_90a ones)."""
import argparse
import collections
import csv
import gzip
import re
import sys


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    # the first row names the kernel; the second is the header
    hdr = rows[1]
    return rows[0], hdr, rows[2:]


def num(s):
    try:
        return int(s)
    except ValueError:
        return 0


def opcode(src):
    src = re.sub(r"^@!?U?P\w+\s+", "", src.strip())
    return src.split()[0].split(".")[0] if src else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25, help="instructions with the most samples")
    ap.add_argument("--range", action="append", default=[], help="A-B: share of samples")
    ap.add_argument("--dump", help="A-B: print these instructions with counts and samples")
    a = ap.parse_args()

    kernel, hdr, data = read(a.csv)
    ix = {h: i for i, h in enumerate(hdr)}
    S, E = ix["Warp Stall Sampling (All Samples)"], ix["Instructions Executed"]
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    samples = [num(r[S]) for r in data]
    execs = [num(r[E]) for r in data]
    total = sum(samples) or 1
    print(" ".join(x for x in kernel if x))
    print(f"{len(data)} SASS instructions, {sum(samples)} stall samples")

    # the first tensor-core instruction: HMMA (mma.sync, the legal family) or HGMMA (wgmma, the
    # sm_90a kernels: a warp x tile of S there)
    trip = next((execs[k] for k, r in enumerate(data) if opcode(r[1]) in ("HMMA", "HGMMA")), 0)
    if trip:
        ops, smp = collections.Counter(), collections.Counter()
        for k, r in enumerate(data):
            ops[opcode(r[1])] += execs[k]
            smp[opcode(r[1])] += samples[k]
        print(f"\nper trip (first HMMA or HGMMA executed {trip} times): "
              f"{sum(ops.values()) / trip:.1f} instructions")
        for op, n in ops.most_common(20):
            print(f"  {op:10s} {n / trip:7.1f}   samples {100 * smp[op] / total:5.1f}%")

    print(f"\ntop {a.top} instructions by samples:")
    for k in sorted(sorted(range(len(data)), key=lambda k: -samples[k])[: a.top]):
        r = data[k]
        why = sorted(((num(r[ix[h]]), h[6:]) for h in stalls), reverse=True)[:2]
        why = ", ".join(f"{w} {n}" for n, w in why if n)
        print(f"  {k:5d} {100 * samples[k] / total:5.1f}%  x{execs[k]:<7d} {r[1].strip()[:64]:64s} {why}")

    for spec in a.range:
        lo, hi = map(int, spec.split("-"))
        s = sum(samples[lo:hi])
        print(f"range {spec}: {100 * s / total:.1f}% of samples, "
              f"{sum(execs[lo:hi]) / (trip or 1):.1f} instructions per trip")
    if a.dump:
        lo, hi = map(int, a.dump.split("-"))
        for k in range(lo, min(hi, len(data))):
            print(f"  {k:5d} x{execs[k]:<7d} {samples[k]:5d} {data[k][1].strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
