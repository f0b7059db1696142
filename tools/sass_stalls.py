#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS opcode.

Reads the CSV of Nsight Compute's source page (per-instruction warp-state samples):
  ncu --section SourceCounters -o REPORT BINARY ARGS...
  ncu -i REPORT.ncu-rep --page source --csv --print-source sass > SOURCE.csv
and prints, per opcode, its share of all stall samples, the instructions it executed
and its four largest stall reasons (each as % of all samples), then the reasons over all.

usage: python3 tools/sass_stalls.py SOURCE.csv [TOP]
"""
import collections
import csv
import re
import sys


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    top = sys.argv[2] if len(sys.argv) == 3 else "20"
    if not top.isdigit():
        print(f"error: TOP '{top}' is not allowed (allowed: a whole number of opcodes to list)", file=sys.stderr)
        return 2
    top = int(top)
    try:
        with open(sys.argv[1], newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        print(f"error: {sys.argv[1]}: {e.strerror} (give the CSV of ncu --page source --csv --print-source sass)", file=sys.stderr)
        return 2
    header_at = next((i for i, r in enumerate(rows) if "Source" in r and "Address" in r), None)
    if header_at is None:
        print(f"error: {sys.argv[1]}: no 'Address,Source' header (not an ncu --page source CSV)", file=sys.stderr)
        return 2
    header = rows[header_at]
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples, executed = collections.Counter(), collections.Counter()
    by_reason = collections.defaultdict(collections.Counter)
    for r in rows[header_at + 1:]:
        if len(r) < len(header) or not r[col["Source"]].strip():
            continue
        opcode = re.sub(r"^@!?U?P\w+\s+", "", r[col["Source"]].strip()).split()[0]
        samples[opcode] += int(r[col["Warp Stall Sampling (All Samples)"]] or 0)
        executed[opcode] += int(r[col["Instructions Executed"]] or 0)
        for reason in reasons:
            by_reason[opcode][reason] += int(r[col[reason]] or 0)
    total = sum(samples.values())
    if total == 0:
        print("error: no stall samples in the file", file=sys.stderr)
        return 2
    print(f"{total} samples")
    print(f"{'opcode':28s} {'samples':>8s} {'executed':>12s}  largest reasons (% of all samples)")
    for opcode, n in samples.most_common(top):
        largest = ", ".join(f"{k[6:]} {v / total * 100:.1f}" for k, v in by_reason[opcode].most_common(4) if v)
        print(f"{opcode:28s} {n / total * 100:7.1f}% {executed[opcode]:12d}  {largest}")
    overall = collections.Counter()
    for c in by_reason.values():
        overall.update(c)
    print("all opcodes: " + ", ".join(f"{k[6:]} {v / total * 100:.1f}" for k, v in overall.most_common(10)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
