#!/usr/bin/env bash
# Run 24: make compare SHAPES=all (every step, cuBLAS, both ceilings, torch SDPA), then sanitize step 07.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/exp}; mkdir -p "$out"
t0=$(date +%s)
bash tools/device_run.sh "$out/d" build compare-all > "$out/compare-run.log" 2>&1
tail -n 75 "$out/compare-run.log"
echo "compare done at $(( $(date +%s) - t0 )) s"
timeout $(( 560 - ($(date +%s) - t0) )) bash tools/sanitize.sh build/step07/fa2 > "$out/sanitize07.txt" 2>&1; echo "sanitize rc $?"; grep -cE '^PASS' "$out/sanitize07.txt"; grep -E '^FAIL' "$out/sanitize07.txt"
echo "all done at $(( $(date +%s) - t0 )) s"
sed -i "s#$PWD#REPO#g" "$out"/*.log "$out"/d/*.log 2>/dev/null
cd "$out" && tar czf run.tgz compare-run.log sanitize07.txt d 2>/dev/null; ls
