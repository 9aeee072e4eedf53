#!/usr/bin/env python3
"""The A/B tables of session 40's calls: CSVs named pg-<tree>-<cfg>-b<B>-<round>.csv in the
working directory; per config, the minimum of the rounds a point, geomean of r / b, by batch and
by round, then every point. Usage: ab_table.py CFG [CFG ...] (e.g. p64 p1 fp8)."""
import collections
import csv
import glob
import math
import re
import sys

g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
for cfg in sys.argv[1:]:
    t = collections.defaultdict(lambda: collections.defaultdict(list))
    for f in sorted(glob.glob('pg-*-%s-b*-*.csv' % cfg)):
        v, r = re.match(r'pg-(\w)-%s-b\d+-(\d+)\.csv' % cfg, f).groups()
        for x in csv.DictReader(open(f)):
            k = (int(x['batch']), int(x['heads']), int(x['q_len']), int(x['prefix']))
            t[k][v].append((int(r), float(x['time_us'])))
    ks = sorted(k for k in t if t[k]['b'] and t[k]['r'])
    m = {k: {v: min(u for _, u in t[k][v]) for v in 'br'} for k in ks}
    G = lambda f=lambda k: True: g([m[k]['r'] / m[k]['b'] for k in ks if f(k)])
    print('== %s: %d points, r / b (min of the rounds) %.4f' % (cfg, len(ks), G()))
    for B in sorted({k[0] for k in ks}):
        print('   B %d: %.4f' % (B, G(lambda k: k[0] == B)))
    print('   H x q_len >= 256 from 32k: %.4f; q_len 1 from 32k: %.4f' % (
        G(lambda k: k[3] >= 32768 and k[1] * k[2] >= 256), G(lambda k: k[3] >= 32768 and k[2] == 1)))
    rounds = sorted({r for k in ks for r, _ in t[k]['b']})
    for r in rounds:
        v = [dict(t[k]['r'])[r] / dict(t[k]['b'])[r] for k in ks
             if r in dict(t[k]['r']) and r in dict(t[k]['b'])]
        print('   round %d: %.4f over %d' % (r, g(v), len(v)))
    print('   B H q prefix | b r us | r/b')
    for k in ks:
        print('   %2d %3d %2d %6d | %9.2f %9.2f | %.3f' % (k + (m[k]['b'], m[k]['r'], m[k]['r'] / m[k]['b'])))
