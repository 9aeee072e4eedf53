#!/usr/bin/env python3
"""Counts of chosen instructions in each kernel of a cubin, without a disassembler.

An sm_90 instruction is 16 bytes, and its opcode (the mnemonic, modifiers aside) sits in the low 12
bits of its first 8. The table below maps those bits to mnemonics (nvcc 13.0): read from
`cuobjdump -sass` of the seesaw kernel's BF16 instances (session 65: 126 codes, none of them mapped
to two mnemonics), and from session 59's Nsight Compute listings of the keys kernel's 8- and 16-row
BF16 instances against the cubin of the same commit (071e66e) built here, which matched them
instruction for instruction (9 codes more: HMMA and MOVM among them). So whether a change adds
branches, TMA issues or mbarrier operations can be seen on a machine with nvcc and no cuobjdump,
before device time:

    nvcc -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++17 -Iinclude -Isrc -DMLAV_BUILDING_LIBRARY \\
         -DMLAV_WITH_CUDA -DMLAV_WITH_SM90 -gencode arch=compute_90a,code=sm_90a -cubin \\
         -o a.cubin src/cuda/sm90/launch_sm90.cu
    bench/diag/sass_census.py a.cubin [KERNEL_SUBSTRING [MNEMONIC ...]]
    bench/diag/sass_census.py --table DUMP     (a cuobjdump -sass listing, gzipped or not: its
                                                table, to check or extend the one below)

An opcode the table lacks counts as ?xyz (spills' LDL and STL among them: the instances it was read
from have none), and each kernel's line says how many such there are. The mapping is an observation,
not a published encoding: where it matters, check it against cuobjdump on the GPU host.
"""
import collections
import gzip
import re
import struct
import sys

from sass_identity import kernel_texts

TABLE = dict((int(k, 16), v) for k, v in (e.split(':') for e in '''
202:MOV 207:SEL 208:FSEL 209:FMNMX 20b:FSETP 20c:ISETP 20f:VIMNMX3 210:IADD3 211:LEA 212:LOP3
213:IABS 219:SHF 220:FMUL 221:FADD 223:FFMA 224:IMAD 225:IMAD 227:IMAD 23a:MOVM 23c:HMMA 23e:F2FP
245:I2FP 246:VIADDMNMX 248:VIMNMX 287:USEL 28c:UISETP 290:UIADD3 291:ULEA 292:ULOP3 297:UIADD3
299:USHF 2a4:UIMAD 2a5:UIMAD 2ca:R2UR 305:F2I 306:I2F 308:MUFU 31c:B2R 348:WARPSYNC 388:STS
3ba:UBLKCP 3bc:UBLKPF 3c4:REDUX 3c6:FENCE 419:SHF 421:FADD 423:FFMA 424:IMAD 435:HFMA2
446:VIADDMNMX 499:USHF 4a4:UIMAD 51d:BAR 589:SHFL 5a7:SYNCS 5b2:SYNCS 5b4:UTMALDG 802:MOV 803:P2R
804:R2P 805:CS2R 806:VOTE 807:SEL 808:FSEL 809:FMNMX 80b:FSETP 80c:ISETP 810:IADD3 811:LEA 812:LOP3
816:PRMT 819:SHF 81c:PLOP3 820:FMUL 823:FFMA 824:IMAD 825:IMAD 827:IMAD 82d:PREEXIT 82f:ELECT
836:VIADD 844:STSM 848:VIMNMX 882:UMOV 886:VOTEU 887:USEL 88c:UISETP 890:UIADD3 891:ULEA 892:ULOP3
899:USHF 8a4:UIMAD 8a5:UIMAD 918:NOP 919:S2R 91a:DEPBAR 91b:ENDCOLLECTIVE 941:BSYNC 942:BREAK
944:CALL 945:BSSY 946:YIELD 947:BRA 948:WARPSYNC 94d:EXIT 950:RET 980:LD 981:LDG 984:LDS 985:ST
986:STG 988:STS 98f:CCTL 992:MEMBAR 9a7:SYNCS 9af:LDGDEPBAR 9b0:ARRIVES 9b9:UTMACCTL 9c3:S2UR
9c5:WARPGROUP 9c8:USETMAXREG 9f0:HGMMA ab9:ULDC abb:ULDC b1d:BAR b82:LDC c02:MOV c07:SEL c0c:ISETP
c10:IADD3 c11:LEA c12:LOP3 c13:IABS c19:SHF c20:FMUL c23:FFMA c24:IMAD c25:IMAD c27:IMAD c36:VIADD
c46:VIADDMNMX c48:VIMNMX c82:UMOV df0:HGMMA e21:FADD e24:IMAD e25:IMAD f89:SHFL fae:LDGSTS
'''.split()))
DEFAULT = ('UTMALDG', 'ELECT', 'BRA', 'BSSY', 'BSYNC', 'SYNCS', 'R2UR', 'HGMMA')


def table_of(dump):
    """low 12 bits -> mnemonic from a cuobjdump -sass listing."""
    opener = gzip.open if dump.endswith('.gz') else open
    line_re = re.compile(r'\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z0-9_.]+).*?'
                         r'/\* 0x([0-9a-f]{16}) \*/')
    seen = collections.defaultdict(set)
    with opener(dump, 'rt') as f:
        for line in f:
            m = line_re.match(line)
            if m:
                seen[int(m.group(2), 16) & 0xfff].add(m.group(1).split('.')[0])
    for k, v in sorted(seen.items()):
        if len(v) > 1:
            print(f'{k:03x} maps to {sorted(v)}: the low 12 bits are not the opcode here',
                  file=sys.stderr)
    return {k: sorted(v)[0] for k, v in seen.items()}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == '--table':
        print(' '.join(f'{k:03x}:{v}' for k, v in sorted(table_of(sys.argv[2]).items())))
        return
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    want = sys.argv[2] if len(sys.argv) > 2 else ''
    ops = sys.argv[3:] or DEFAULT
    for name, text in sorted(kernel_texts(sys.argv[1]).items()):
        if want not in name:
            continue
        count = collections.Counter()
        for i in range(0, len(text) - 15, 16):
            lo = struct.unpack_from('<Q', text, i)[0] & 0xfff
            count[TABLE.get(lo, f'?{lo:03x}')] += 1
        print(name)
        unknown = sum(n for op, n in count.items() if op.startswith('?'))
        print('  instructions %d  ' % (len(text) // 16) +
              '  '.join(f'{op} {count[op]}' for op in ops) + f'  (not in the table: {unknown})')


if __name__ == '__main__':
    main()
