#!/usr/bin/env python3
"""Two `mlaverify bench --engine-csv` files point by point: the variant's exact_us, step_us and
run_us over the base's, and their range and geomean. bench/ab.sh's engine table compares two
builds; this compares any two runs of one build too (e.g. the kernel families, run once with
MLAV_FLASH_FAMILY=legal).

    bench/diag/engine_cmp.py BASE.csv VARIANT.csv NAME
"""
import csv, math, sys
def rows(path):
    d = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            k = (r['batch'], r['heads'], r['q_len'], r['prefix'], r['page_size'], r.get('kv_dtype', r['dtype']))
            d[k] = (float(r['exact_us']), float(r['step_us']), float(r['run_us']))
    return d
if len(sys.argv) != 4:
    sys.exit(__doc__)
base, var = rows(sys.argv[1]), rows(sys.argv[2])
name = sys.argv[3]
rs, rr, re_ = [], [], []
for k in sorted(base, key=lambda k: tuple(int(x) if x.isdigit() else 0 for x in k)):
    if k not in var: continue
    b, v = base[k], var[k]
    rs.append(v[1] / b[1]); rr.append(v[2] / b[2]); re_.append(v[0] / b[0])
    print('%-8s %s exact %.3f step %.3f run %.3f  (base step %.1f run %.1f)' % (name, ' '.join(k), v[0]/b[0], v[1]/b[1], v[2]/b[2], b[1], b[2]))
g = lambda x: math.exp(sum(map(math.log, x)) / len(x))
print('%-8s SUMMARY exact %.3f-%.3f (geo %.3f) step %.3f-%.3f (geo %.3f) run %.3f-%.3f (geo %.3f)' % (name, min(re_), max(re_), g(re_), min(rs), max(rs), g(rs), min(rr), max(rr), g(rr)))
