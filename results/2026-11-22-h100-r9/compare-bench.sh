#!/usr/bin/env bash
# Runs 42 and 68 (H100), 43 and 69 (H200): `ROUNDS=3 ITERS=20 make compare SHAPES=bench` (every
# step, the cuBLAS baseline and torch SDPA's backends at the benchmark shapes, three
# rounds, order rotated), its printout and the two CSVs it writes kept under $OUT
# (or build/runNN).  usage: bash compare-bench.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: compare-bench.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
rm -f results/compare-*.csv results/ceiling-*.csv   # only this run's files at the top of results/
make -s -j16 all >/dev/null 2>&1
ROUNDS=3 ITERS=20 make -s compare SHAPES=bench >"$out/run$run-compare-bench.log" 2>&1
echo "compare rc $? in $(( $(date +%s) - t0 )) s"
cp results/compare-*.csv results/ceiling-*.csv "$out/"
grep -E "runs|failed" "$out/run$run-compare-bench.log" | tail -n 3
