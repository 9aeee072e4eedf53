#!/usr/bin/env python3
"""The A/B table of two trees benched in rounds (bench/ab_trees.sh, and the session calls under
bench/results/ that ran before it): CSVs of `mlaverify bench` named pg-<tree>-<cfg>-b<B>-<round>.csv.
Per config: each point's least time over its rounds, the geomean of new / base over the points
both trees have, by batch, where tensor-bound (H x q_len >= 256 from 32k) and memory-bound (q_len 1
from 32k), by round (each round's own times), then every point. The config `eng` holds
`--engine-csv` rows: the engine path's run time is compared the same way, and each tree's run /
exact (both least over the rounds) is given with its points within 3%.

  ab_table.py [--dir DIR] [--base b] [--new r] CFG [CFG ...]     e.g. ab_table.py p64 p1 fp8
"""
import argparse
import collections
import csv
import glob
import math
import os
import re


def geomean(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


def table(d, base, new, cfg):
    t = collections.defaultdict(lambda: collections.defaultdict(dict))  # point -> tree -> round
    exact = collections.defaultdict(lambda: collections.defaultdict(dict))  # eng: exact_us
    eng = cfg == "eng"
    pat = re.compile(r"pg-(.+)-%s-b\d+-(\d+)\.csv$" % re.escape(cfg))
    for f in sorted(glob.glob(os.path.join(d, "pg-*-%s-b*-*.csv" % cfg))):
        m = pat.match(os.path.basename(f))
        if not m or m.group(1) not in (base, new):
            continue
        for x in csv.DictReader(open(f)):
            k = (int(x["batch"]), int(x["heads"]), int(x["q_len"]), int(x["prefix"]))
            t[k][m.group(1)][int(m.group(2))] = (
                float(x["run_us"]) if eng else float(x["time_us"]))
            if eng:
                exact[k][m.group(1)][int(m.group(2))] = float(x["exact_us"])
    ks = sorted(k for k in t if t[k][base] and t[k][new])
    best = {k: {v: min(t[k][v].values()) for v in (base, new)} for k in ks}

    def g(keep=lambda k: True):
        return geomean([best[k][new] / best[k][base] for k in ks if keep(k)])

    print("== %s: %d points, %s / %s (min of the rounds) %.4f" % (cfg, len(ks), new, base, g()))
    if eng:
        for v in (base, new):
            r = [best[k][v] / min(exact[k][v].values()) for k in ks]
            print("   %s run / exact %.4f, %d of %d within 3%%" % (
                v, geomean(r), sum(x <= 1.03 for x in r), len(r)))
    for b in sorted({k[0] for k in ks}):
        print("   B %d: %.4f" % (b, g(lambda k: k[0] == b)))
    print("   H x q_len >= 256 from 32k: %.4f; q_len 1 from 32k: %.4f" % (
        g(lambda k: k[3] >= 32768 and k[1] * k[2] >= 256),
        g(lambda k: k[3] >= 32768 and k[2] == 1)))
    for r in sorted({r for k in ks for r in t[k][base]}):
        v = [t[k][new][r] / t[k][base][r] for k in ks if r in t[k][new] and r in t[k][base]]
        print("   round %d: %.4f over %d" % (r, geomean(v), len(v)))
    print("   B H q prefix | %s %s us | %s/%s" % (base, new, new, base))
    for k in ks:
        print("   %2d %3d %2d %6d | %9.2f %9.2f | %.3f" % (
            k + (best[k][base], best[k][new], best[k][new] / best[k][base])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=".", help="where the CSVs are (default: here)")
    ap.add_argument("--base", default="b", help="the base tree's name (default b)")
    ap.add_argument("--new", default="r", help="the new tree's name (default r)")
    ap.add_argument("cfgs", nargs="+", metavar="CFG")
    a = ap.parse_args()
    for cfg in a.cfgs:
        table(a.dir, a.base, a.new, cfg)


if __name__ == "__main__":
    main()
