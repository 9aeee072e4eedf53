#!/usr/bin/env python3
"""Nsight Compute exports side by side (session 41): warp-state stall shares and the kernels'
headline counters from `ncu --page raw --csv` files, or per-opcode stall shares from
`ncu --page source --csv --print-source sass` files.

  python3 stalls.py raw A.csv[.gz] B.csv[.gz]
  python3 stalls.py source A.csv B.csv
"""
import collections
import csv
import gzip
import re
import sys


def rows_of(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as fh:
        return list(csv.reader(fh))


def num(x):
    try:
        return float(x.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def raw(paths):
    runs = []
    for p in paths:
        rows = rows_of(p)
        i = next(k for k, r in enumerate(rows) if "Kernel Name" in r)
        runs.append(dict(zip(rows[i], rows[i + 2])))
    keys = [k for k in runs[0] if k.startswith("smsp__pcsamp_warps_issue_stalled_")
            and not k.endswith("not_issued")]
    tot = [sum(num(r[k]) for k in keys) for r in runs]
    print("stall reason (share of samples) " + " | ".join(paths))
    for k in sorted(keys, key=lambda k: -num(runs[-1][k])):
        if sum(num(r[k]) for r in runs) > 0.002 * sum(tot):
            print(f"  {k[33:]:26s} " + " ".join(f"{num(r[k]) / t * 100:6.1f}%" for r, t in zip(runs, tot)))
    for k in ["gpu__time_duration.sum", "launch__grid_size", "launch__waves_per_multiprocessor",
              "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
              "smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__inst_executed.sum",
              "launch__registers_per_thread"]:
        if k in runs[0]:
            print(f"  {k:62s} " + " ".join(f"{r.get(k, '')}" for r in runs))


def source(paths):
    for p in paths:
        rows = rows_of(p)
        h = rows[1]
        ix = {c: i for i, c in enumerate(h)}
        data = [r for r in rows[2:] if len(r) > 5]
        stalls = [c for c in h if c.startswith("stall") and "Not" not in c]
        tot = sum(num(r[ix["Warp Stall Sampling (All Samples)"]]) for r in data)
        ex = sum(num(r[ix["Instructions Executed"]]) for r in data)
        g = collections.defaultdict(lambda: [0.0, 0.0, collections.Counter()])
        for r in data:
            src = re.sub(r"^@!?U?P\w+\s+", "", r[1].strip())
            op = (src.split() or ["?"])[0].split(".")[0]
            g[op][0] += num(r[ix["Warp Stall Sampling (All Samples)"]])
            g[op][1] += num(r[ix["Instructions Executed"]])
            for c in stalls:
                g[op][2][c[6:]] += num(r[ix[c]])
        print(f"{p}: {len(data)} instructions, {tot:.0f} samples, {ex:.3g} executed")
        print("  opcode        samples  executed  top stalls (share of all samples)")
        for op, (s, e, c) in sorted(g.items(), key=lambda kv: -kv[1][0])[:20]:
            top = " ".join(f"{k}:{v / tot * 100:.1f}" for k, v in c.most_common(3) if v > 0)
            print(f"  {op:12s} {s / tot * 100:6.1f}% {e / ex * 100:8.1f}%  {top}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("raw", "source"):
        sys.exit(__doc__)
    (raw if sys.argv[1] == "raw" else source)(sys.argv[2:])
