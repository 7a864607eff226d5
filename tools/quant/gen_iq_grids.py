#!/usr/bin/env python3
"""gen_iq_grids.py — writes engine/kernels/quant_iq_tables.c, the codebooks of the lattice types
(IQ1_S/IQ1_M, IQ2_XXS/IQ2_XS/IQ2_S, IQ3_XXS/IQ3_S) as compact codes.

The grids are data of the formats (the GGUF/ggml definitions, ggml-common.h): each entry is a
vector of 8 (IQ1, IQ2) or 4 (IQ3) small values drawn from a set of 3 or 8 levels. We store an
entry as one uint16: element k's level index in bits BITS*k .. BITS*k + BITS - 1 (BITS = 2 for
the 3-level sets, 3 for the 8-level sets); engine/kernels/quant_iq.c expands the codes into byte tables
once at start-up. The sign table of IQ2/IQ3 is not data: it is the 7 stored bits plus an even
parity bit, computed in quant_iq.c.

    tools/quant/gen_iq_grids.py /path/to/llama.cpp/ggml/src/ggml-common.h > engine/kernels/quant_iq_tables.c

Checks every value against its level set and every entry's round trip before writing.
"""
import re
import sys

# name in ggml-common.h -> (our name, bytes per entry read from the integer, levels, signed)
GRIDS = [
    ("iq2xxs_grid", "quant_iq2xxs_codes", 8, (8, 25, 43), False),
    ("iq2xs_grid", "quant_iq2xs_codes", 8, (8, 25, 43), False),
    ("iq2s_grid", "quant_iq2s_codes", 8, (8, 25, 43), False),
    ("iq3xxs_grid", "quant_iq3xxs_codes", 4, (4, 12, 20, 28, 36, 44, 52, 62), False),
    ("iq3s_grid", "quant_iq3s_codes", 4, (1, 3, 5, 7, 9, 11, 13, 15), False),
    ("iq1s_grid", "quant_iq1s_codes", 8, (-1, 0, 1), True),
]


def entries(src, name):
    m = re.search(r"GGML_TABLE_BEGIN\(\w+,\s*" + name + r",\s*\w+\)(.*?)GGML_TABLE_END", src, re.S)
    if not m:
        sys.exit(f"gen_iq_grids: no table {name}")
    return [int(v, 16) for v in re.findall(r"0x([0-9a-fA-F]+)", m.group(1))]


def encode(value, width, levels, signed):
    bits = 2 if len(levels) <= 4 else 3
    code = 0
    for k in range(width):
        b = (value >> (8 * k)) & 0xFF
        if signed and b >= 128:
            b -= 256
        code |= levels.index(b) << (bits * k)
    return code


def main():
    src = open(sys.argv[1], encoding="utf-8").read()
    out = ["/*",
           " * quant_iq_tables.c — the codebooks of the lattice weight types, as compact codes (written by",
           " * tools/quant/gen_iq_grids.py from the format definitions; do not edit by hand).",
           " *",
           " * Entry i of a grid is one uint16: element k's level index in bits BITS*k.. (BITS 2 for a set",
           " * of 3 levels, 3 for a set of 8); the levels are in quant_iq.c (IQ_LEVELS_*), which expands",
           " * the codes into byte tables once.",
           " */",
           '#include "quant_iq.h"', ""]
    for gname, ours, width, levels, signed in GRIDS:
        vals = entries(src, gname)
        codes = [encode(v, width, levels, signed) for v in vals]
        out.append(f"/* {len(codes)} entries of {width} values in {{{', '.join(map(str, levels))}}} */")
        out.append(f"const uint16_t {ours}[{len(codes)}] = {{")
        for i in range(0, len(codes), 12):
            out.append("    " + " ".join(f"0x{c:04x}," for c in codes[i:i + 12]))
        out.append("};")
        out.append("")
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
