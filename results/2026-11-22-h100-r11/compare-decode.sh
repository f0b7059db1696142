#!/usr/bin/env bash
# Runs 53 (H100) and 56 (H200): `ROUNDS=3 ITERS=20 make compare SHAPES=decode` (every step, the cuBLAS
# baseline and torch SDPA's backends at the decode shapes, three rounds, order rotated,
# and the streaming-read bandwidth probe), its printout and the three CSVs it writes kept
# under $OUT (or build/runNN). Stopped at 540 s so that what ran comes back.
# usage: bash compare-decode.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: compare-decode.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv  # only this run's files at the top of results/
make -s -j16 all >/dev/null 2>&1
echo "built in $(( $(date +%s) - t0 )) s"
ROUNDS=3 ITERS=20 timeout 540 make -s compare SHAPES=decode >"$out/run$run-compare-decode.log" 2>&1
echo "compare rc $? in $(( $(date +%s) - t0 )) s"
cp results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv "$out/"
grep -E "runs|failed" "$out/run$run-compare-decode.log" | tail -n 3
