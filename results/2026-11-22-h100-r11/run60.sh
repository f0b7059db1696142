#!/usr/bin/env bash
# Run 60 (H100): tests/mutants.sh -- the planted bugs of step 07 and, new, of step 12
# (the combine's weights unnormalised, the warps' partials merged unweighted, split
# ranges that overlap by a tile, the causal limit of a fragment's first row for both of
# its rows): the GPU matrix must fail on each. Runs 60 (every mutant in one matrix
# process: the out-of-bounds mutant of step 07 ended it early) and 61 (one process each).
# usage: bash run60.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run60.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
t0=$(date +%s)
bash tests/mutants.sh >"$out/run$run-mutants.txt" 2>&1
echo "mutants rc $? in $(( $(date +%s) - t0 )) s"
cat "$out/run$run-mutants.txt"
cp build/variants/mutants-matrix.log "$out/run$run-mutants-matrix.log"
