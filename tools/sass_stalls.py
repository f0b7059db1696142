#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS opcode.

Reads the CSV of Nsight Compute's source page (per-instruction warp-state samples):
  ncu --section SourceCounters -o REPORT BINARY ARGS...
  ncu -i REPORT.ncu-rep --page source --csv --print-source sass > SOURCE.csv
and prints, per opcode, its share of all stall samples, the instructions it executed
and its four largest stall reasons (each as % of all samples), then the reasons over all.
With --memory instead, per global or local memory opcode (RED, ATOM, LDG, STG, LDL, STL,
LDGSTS): instructions executed, L1 tag requests and L2 sectors (global, their ideal; local),
its stall samples and lg_throttle samples, and the requests and sectors per instruction: how
many lines and sectors one warp instruction touches.
(tools/source_counters.sh takes the CSV and runs both.)

usage: python3 tools/sass_stalls.py SOURCE.csv [TOP | --memory]
"""
import collections
import csv
import re
import sys


MEMORY_OPCODE = re.compile(r"(RED|ATOM|LDG|STG|LDL|STL|LDGSTS)")
MEMORY_COLUMNS = ["Instructions Executed", "L1 Tag Requests Global", "L2 Theoretical Sectors Global",
                  "L2 Theoretical Sectors Global Ideal", "L2 Theoretical Sectors Local",
                  "Warp Stall Sampling (All Samples)", "stall_lg"]


def opcode_of(row, col):
    """The row's opcode with its modifiers, without a predicate (@P0, @!UP1)."""
    return re.sub(r"^@!?U?P\w+\s+", "", row[col["Source"]].strip()).split()[0]


def instructions(rows, header, col):
    """The rows that are SASS instructions: whole rows with a source line."""
    return (r for r in rows if len(r) >= len(header) and r[col["Source"]].strip())


def memory_table(rows, header, col):
    sums = collections.defaultdict(collections.Counter)
    for r in instructions(rows, header, col):
        opcode = opcode_of(r, col)
        if MEMORY_OPCODE.match(opcode):
            for name in MEMORY_COLUMNS:
                if name in col:
                    sums[opcode][name] += int(r[col[name]].replace(",", "") or 0)
    print(f"{'opcode':40s} {'executed':>11s} {'L1 tag req':>11s} {'L2 sectors':>11s} {'(ideal)':>11s} {'L2 local':>10s} "
          f"{'samples':>8s} {'lg':>8s}  tag/inst sect/inst")
    for opcode, c in sorted(sums.items(), key=lambda kv: -kv[1]["Warp Stall Sampling (All Samples)"]):
        n = [c[name] for name in MEMORY_COLUMNS]
        e = n[0] or 1
        print(f"{opcode:40s} {n[0]:11d} {n[1]:11d} {n[2]:11d} {n[3]:11d} {n[4]:10d} {n[5]:8d} {n[6]:8d}"
              f"  {n[1] / e:8.2f} {n[2] / e:9.2f}")
    return 0


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    top = sys.argv[2] if len(sys.argv) == 3 else "20"
    if not top.isdigit() and top != "--memory":
        print(f"error: TOP '{top}' is not allowed (allowed: a whole number of opcodes to list, or --memory)", file=sys.stderr)
        return 2
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
    if top == "--memory":
        return memory_table(rows[header_at + 1:], header, col)
    top = int(top)
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples, executed = collections.Counter(), collections.Counter()
    by_reason = collections.defaultdict(collections.Counter)
    for r in instructions(rows[header_at + 1:], header, col):
        opcode = opcode_of(r, col)
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
