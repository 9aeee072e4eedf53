#!/usr/bin/env python3
"""Per-kernel loop bodies of `cuobjdump -sass` output (stdin): for each backward branch that spans
more than 16 instructions, the count of HMMA, LDSM, LDS, STS, MOVM, LDGSTS, BAR, LDL/STL and all
instructions between its target and itself. Shows whether ptxas kept the loop the source
describes (one tile per body, 68 HMMA and 21 LDSM per warp-tile for the flash loop) or merged or
unrolled it."""
import re
import sys

OPS = ("HMMA", "LDSM", "LDS", "STS", "MOVM", "LDGSTS", "BAR", "LDL", "STL")
fn, body = None, []
line_re = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);")
for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if m:
        fn, body = m.group(1), []
        continue
    m = line_re.match(line)
    if not m or fn is None:
        continue
    addr, text = int(m.group(1), 16), m.group(2)
    words = text.split()
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    body.append((addr, op))
    b = re.search(r"BRA 0x([0-9a-f]+)", text)
    if b:
        tgt = int(b.group(1), 16)
        span = [o for a, o in body if a >= tgt]
        if tgt < addr and len(span) > 16:
            counts = " ".join(f"{k} {sum(o.split(".")[0] == k for o in span):3d}" for k in OPS)
            print(f"{fn} 0x{tgt:04x}-0x{addr:04x}: {counts} instr {len(span):4d}")
