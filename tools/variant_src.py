#!/usr/bin/env python3
"""A kernel source with pieces of it replaced, for `make variant SRC=...`: the A/B runs of
a step's levers and the planted bugs of tests/mutants.sh.

usage: python3 tools/variant_src.py SRC DST OLD NEW [OLD NEW ...]

Each OLD must occur in SRC exactly once (else nothing is written, one line names it, exit
1): a variant changes what it says it changes, or it is not built. DST should lie as deep
below the repository root as SRC (build/ab/NAME.cu for steps/NN_name/kernel.cu), so that
the kernel's #include "../../common/..." lines still resolve."""
import sys


def main(argv):
    if len(argv) < 5 or len(argv) % 2 == 0:
        print("usage: python3 tools/variant_src.py SRC DST OLD NEW [OLD NEW ...]", file=sys.stderr)
        return 2
    src, dst, pairs = argv[1], argv[2], argv[3:]
    text = open(src).read()
    for old, new in zip(pairs[0::2], pairs[1::2]):
        if text.count(old) != 1:
            print(f"error: variant_src: '{old[:60]}' occurs {text.count(old)} times in {src} (allowed: once)", file=sys.stderr)
            return 1
        text = text.replace(old, new)
    with open(dst, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
