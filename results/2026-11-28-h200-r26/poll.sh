#!/usr/bin/env bash
# Waits up to SECONDS for the runs under LOGROOT-g* to print "done" (or END: run 107's halves end
# on "all done", after the run95.sh stages that print "done"), then packs their logs (not the
# tree copies) into OUT/LOGROOT's name.tgz and prints each run's progress.
# usage: bash results/2026-11-28-h200-r26/poll.sh LOGROOT SECONDS OUT [END]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$1 seconds=$2 out=$3 end_line=${4:-done}
end=$((SECONDS + seconds))
while [ $SECONDS -lt "$end" ]; do
  pending=0
  for p in "$root"-g*/progress.txt; do grep -q " $end_line\$" "$p" 2>/dev/null || pending=1; done
  [ $pending = 0 ] && break
  sleep 10
done
tar -czf "$out/$(basename "$root").tgz" "$root"-g*.out $(for d in "$root"-g*/; do find "$d" -maxdepth 2 -type f; done) 2>/dev/null
for p in "$root"-g*/progress.txt; do echo "== $p"; cat "$p"; done
