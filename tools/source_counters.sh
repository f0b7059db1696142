#!/usr/bin/env bash
# tools/source_counters.sh - Nsight Compute's per-instruction counters of one kernel launch
# (the SourceCounters section), kept as a CSV and read by tools/sass_stalls.py: where the
# warps wait per SASS opcode (OUT-stalls.txt) and what each memory opcode touches
# (OUT-memory.txt). OUT.csv.gz keeps the counters; the report itself is not kept.
# usage: KERNEL_REGEX=RE bash tools/source_counters.sh OUT BINARY [args...]
#   RE: the kernel to profile (its first launch); BINARY runs with its args as given, so a
#   harness binary wants --iters 1 --warmup 0 --check off among them.
set -uo pipefail
[ $# -ge 2 ] || { echo "error: tools/source_counters.sh: OUT and BINARY are needed (usage: KERNEL_REGEX=RE bash tools/source_counters.sh OUT BINARY [args...])" >&2; exit 2; }
out=$1; shift
[ -n "${KERNEL_REGEX:-}" ] || { echo "error: KERNEL_REGEX is empty (allowed: a regular expression naming the kernel)" >&2; exit 2; }
NCU=${NCU:-$(command -v ncu || true)}
[ -n "$NCU" ] || { echo "error: ncu (Nsight Compute) not found: install it with the CUDA Toolkit, or set NCU=/path/to/ncu" >&2; exit 2; }
# --clock-control none: measure the GPU at the clocks it runs at, never pin or change them.
"$NCU" --clock-control none --kernel-name "regex:$KERNEL_REGEX" --launch-count 1 --section SourceCounters -f -o "$out" "$@" \
  >"$out.log" 2>&1 || { echo "error: ncu failed (exit $?): see $out.log" >&2; exit 1; }
"$NCU" -i "$out.ncu-rep" --page source --csv --print-source sass >"$out.csv" 2>>"$out.log" ||
  { echo "error: ncu could not export the source page: see $out.log" >&2; exit 1; }
rm -f "$out.ncu-rep"
rc=0
python3 "$(dirname "$0")/sass_stalls.py" "$out.csv" 30 >"$out-stalls.txt" || rc=1
python3 "$(dirname "$0")/sass_stalls.py" "$out.csv" --memory >"$out-memory.txt" || rc=1
gzip -f "$out.csv"
exit $rc
