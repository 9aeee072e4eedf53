"""Summarize engine_kernels.sh's ncu CSV: per kernel (name shortened, grid), the launches' count
and median duration in us, so that the exact plan's kernels and the step's sit side by side."""
import csv
import re
import statistics
import sys

SCALE = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}


def short(name):
    """The kernel's name without its parameter list and namespaces, its template arguments kept
    (they tell the STEP instance from the exact plan's)."""
    if name.endswith(")"):  # the parameter list: from the '(' that balances the last ')'
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = name[5:] if name.startswith("void ") else name
    return re.sub(r"mlav90::|seesaw::|mlav::|flash::|__nv_|\(bool\)", "", name)[:110]


def main(path):
    launches = {}
    with open(path, newline="") as fh:
        rows = [line for line in fh if line.startswith('"')]
    for r in csv.DictReader(rows):
        key = (r["ID"], short(r["Kernel Name"]), r.get("Grid Size", ""))
        d = launches.setdefault(key, {})
        d[r["Metric Name"]] = (r["Metric Unit"], r["Metric Value"])
    groups, dram = {}, {}
    for (_, name, grid), m in launches.items():
        unit, val = m.get("gpu__time_duration.sum", ("", ""))
        if unit in SCALE:
            us = float(val.replace(",", "")) * SCALE[unit]
            groups.setdefault((name, grid), []).append(us)
        # DRAM bytes read, where the run asked for them (engine_kernels.sh's METRICS)
        bunit, bval = m.get("dram__bytes_read.sum", ("", ""))
        mb = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}.get(bunit)
        if mb is not None:
            dram.setdefault((name, grid), []).append(float(bval.replace(",", "")) * mb)
    if not groups:
        print("  no kernels read (see the .err beside the CSV)")
    for (name, grid), v in sorted(groups.items(), key=lambda kv: kv[0]):
        d = dram.get((name, grid))
        rd = f"  {statistics.median(d):9.1f} MB read" if d else ""
        print(f"  {len(v):3d} x {statistics.median(v):8.2f} us{rd}  grid {grid:>14}  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
