#!/usr/bin/env bash
# Waits up to SECONDS for both halves of run 107 under LOGROOT to write "all done", then packs
# their logs (not the tree copies) into OUT and prints each half's progress.
# usage: bash results/2026-11-28-h200-r30/poll.sh LOGROOT SECONDS OUT
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$1 end=$((SECONDS + $2)) out=$3
while [ $SECONDS -lt "$end" ]; do
  grep -q ' all done$' "$root-g0/progress.txt" 2>/dev/null && grep -q ' all done$' "$root-g1/progress.txt" 2>/dev/null && break
  sleep 10
done
# shellcheck disable=SC2046 # one word per log file
tar -czf "$out/$(basename "$root").tgz" "$root"-g*.out $(find "$root"-g0 "$root"-g1 -maxdepth 2 -type f 2>/dev/null) 2>/dev/null
for p in "$root"-g*/progress.txt; do echo "== $p"; cat "$p"; done
