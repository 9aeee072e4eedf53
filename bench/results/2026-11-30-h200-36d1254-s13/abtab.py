#!/usr/bin/env python3
# abtab.py DIR BASE V1 [V2 ...]: ratios time(V)/time(BASE) per config, per round (r1, r2)
import csv, glob, os, sys
d, base, vs = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(r, v):
    t = {}
    for f in glob.glob(os.path.join(d, f"r{r}-{v}*.csv")):
        for row in csv.DictReader(open(f)):
            k = (row['batch'], row['heads'], row['q_len'], row['prefix'], row['page_size'], row['dtype'])
            t[k] = float(row['time_us'])
    return t
rounds = sorted({os.path.basename(f).split('-')[0][1:] for f in glob.glob(os.path.join(d, 'r*-*.csv'))})
data = {(r, v): load(r, v) for r in rounds for v in [base] + vs}
keys = sorted(data[(rounds[0], base)], key=lambda k: tuple(int(x) if x.isdigit() else 0 for x in k))
print("B  H  q  prefix page dtype | " + base + " us (rounds) | " + " | ".join(f"{v}/{base}" for v in vs))
for k in keys:
    b = [data[(r, base)].get(k) for r in rounds]
    line = f"{k[0]:>2} {k[1]:>3} {k[2]:>2} {k[3]:>6} {k[4]:>3} {k[5]} | " + " ".join(f"{x:8.1f}" for x in b) + " |"
    for v in vs:
        rs = [data[(r, v)].get(k) / data[(r, base)].get(k) for r in rounds]
        line += " " + "-".join(f"{x:.3f}" for x in rs) + " |"
    print(line)
