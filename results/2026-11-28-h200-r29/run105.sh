#!/usr/bin/env bash
# Run 105: reference/compare.sh at the bench set, 3 rounds, with steps 11 and 12 alone (step 12
# with its work queue, main 4ab586d), the cuBLAS baseline and torch SDPA: the same rules as `make
# compare`, fewer contenders, so that it fits in the minutes left (the whole ladder's compare
# takes 18 on an H200). In a copy of the tree whose steps/ holds only those two steps after the
# build; compare.sh stops after LIMIT seconds (default 380) if it has not ended, the shapes it
# finished kept in its CSV.
# On the GPU machine, in a process session of its own:
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r29/run105.sh build/run105 >build/run105.out 2>&1 </dev/null &
# usage: bash results/2026-11-28-h200-r29/run105.sh LOGDIR [LIMIT]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
. tools/tree_copy.sh
run_start "${1:?usage: run105.sh LOGDIR [LIMIT]}"
ps -o pgid= $$ | tr -d ' ' >"$log/pgid"
cd "$(copy_tree "$PWD/build/tree105")" || exit 2
make -s -j16 build/step11/fa2 build/step12/fa2 build/reference/cublas/fa2 build/reference/mma_ceiling \
  build/reference/wgmma_ceiling build/reference/bandwidth_ceiling >"$log/build.log" 2>&1 || { stage "build failed"; exit 1; }
find steps -mindepth 1 -maxdepth 1 -type d ! -name '11_*' ! -name '12_*' -exec rm -rf {} +
rm -f results/compare-*.csv results/ceiling-*.csv
stage "built; steps: $(ls steps | tr '\n' ' ')"
ROUNDS=3 PYTHONUNBUFFERED=1 timeout "${2:-380}" bash reference/compare.sh bench >"$log/compare.log" 2>&1
stage "compare: exit $?"
cp results/compare-*.csv results/ceiling-*.csv "$log/" 2>/dev/null
tail -n 3 "$log/compare.log" | tee -a "$log/progress.txt"
stage "done"
