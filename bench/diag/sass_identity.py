#!/usr/bin/env python3
"""How much machine code two builds of a kernel share, without a disassembler.

ptxas re-allocates the flash kernel's main loop when code outside the loop changes, and the
loop's speed moves with it (docs/PERFORMANCE.md#ptxas). This compares the .text sections of one kernel in two cubins as sequences of 16-byte sm_90/sm_120 instructions: a change
that left the ~1,000-instruction main loop alone shows an identical run of about that length.
It needs only nvcc and readelf, so a variant can be screened in seconds before device time:

    nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -Iinclude -Isrc/cuda -Isrc \\
         -DMLAV_WITH_CUDA -Xptxas=--register-usage-level=10 -cubin -o a.cubin \\
         src/cuda/flash/instantiations/bf16.cu   (likewise b.cubin; the option is the product's,
                                                  src/cuda/CMakeLists.txt)
    bench/diag/sass_identity.py a.cubin b.cubin [KERNEL_SUBSTRING [SUBSTRING_IN_B]]
(default: the BF16 family's instance without features; a second substring names the kernel in
b.cubin where its name differs, e.g. against a build from before the flash folder:
flash_verify_kernelI13__nv_bfloat16Lb0ELb0ELb0ELb0E in a, featuresILb0ELb0ELb0E in b)
"""
import difflib
import re
import subprocess
import sys


def kernel_texts(path):
    """Each kernel's machine code in a cubin: {kernel name: its .text section's bytes}."""
    out = subprocess.run(['readelf', '-S', '-W', path], capture_output=True, text=True,
                         check=True).stdout
    texts = {}
    with open(path, 'rb') as f:
        for line in out.splitlines():
            m = re.search(r'\]\s+\.text\.(\S+)\s+PROGBITS\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)', line)
            if m:
                f.seek(int(m.group(2), 16))
                texts[m.group(1)] = f.read(int(m.group(3), 16))
    return texts


def kernel_text(path, name):
    for kernel, text in kernel_texts(path).items():
        if name in kernel:
            return text
    sys.exit(f'{path}: no .text section whose name contains {name}')


def main():
    if len(sys.argv) not in (3, 4, 5):
        sys.exit(__doc__)
    name = (sys.argv[3] if len(sys.argv) >= 4 else
            'traitsI13__nv_bfloat16S4_NS0_9head_dimsILi512ELi64EEEEENS0_8featuresILb0ELb0ELb0E')
    a = kernel_text(sys.argv[1], name)
    b = kernel_text(sys.argv[2], sys.argv[4] if len(sys.argv) == 5 else name)
    ia = [a[i:i + 16] for i in range(0, len(a), 16)]
    ib = [b[i:i + 16] for i in range(0, len(b), 16)]
    blocks = difflib.SequenceMatcher(None, ia, ib, autojunk=False).get_matching_blocks()
    same = sum(x.size for x in blocks)
    run = max(blocks, key=lambda x: x.size)
    print(f'{len(ia)} and {len(ib)} instructions; {same} identical in order; longest identical '
          f'run {run.size} (at {run.a * 16:#x} in the first, {run.b * 16:#x} in the second)')


if __name__ == '__main__':
    main()
