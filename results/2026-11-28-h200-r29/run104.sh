#!/usr/bin/env bash
# Run 104: does the queue's draw cost step 12 its time at d64 without a mask (1.0-1.5% behind
# the static schedule in runs 101-103)? The producer's thread waits for its atomicAdd on the
# workspace counter after the item's last load, before it may load the next item's first K and
# V. The variant "early" issues that atomicAdd before the last load's wait for its stage and
# uses the result after it, so that the wait hides its latency. Its GPU matrix and
# compute-sanitizer, then tools/ab.sh, 5 rounds, at the bench set: main's steps 11 and 12, the
# branch's step 12 and the variant. About five minutes.
# On this machine beforehand: bash results/2026-11-24-h100-r22/run89.sh --overlays wip/26-dynamic-schedule
# then on the GPU machine, .ab-base carried, in a process session of its own:
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r29/run104.sh build/run104 >build/run104.out 2>&1 </dev/null &
# usage: bash results/2026-11-28-h200-r29/run104.sh LOGDIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
. tools/tree_copy.sh
run_start "${1:?usage: run104.sh LOGDIR}"
ps -o pgid= $$ | tr -d ' ' >"$log/pgid"
main_tree=$(copy_of main) && queue_tree=$(copy_of wip-26-dynamic-schedule) || { stage "no tree: stopping"; exit 1; }
cd "$queue_tree" || exit 2
mkdir -p build/ab
python3 tools/variant_src.py steps/12_persistent/kernel.cu build/ab/step12-early.cu \
  "    unsigned *item_smem;       // the item the producer's warp took last, for the consumers" \
  "    unsigned *item_smem;       // the item the producer's warp took last, for the consumers
    unsigned drawn = 0;        // lane 0 of the producer's warp: the item it drew at its item's last load" \
  "        if (lane == 0) item = gridDim.x + (unsigned)atomicAdd(draws, 1);" \
  "        if (lane == 0) item = w.n_blocks > 0 ? drawn : gridDim.x + (unsigned)atomicAdd(draws, 1);" \
  "                    for (int nb = 0; nb < w.n_blocks; nb++) {" \
  "                    for (int nb = 0; nb < w.n_blocks; nb++) {
                        if (nb == w.n_blocks - 1) schedule.drawn = gridDim.x + (unsigned)atomicAdd(schedule.draws, 1);" &&
  make -s step=12 variant NAME=early12 SRC=build/ab/step12-early.cu >"$log/build-early.log" 2>&1 || { stage "variant early did not build"; exit 1; }
stage "built"
check_binaries 12 early build/variants/early12/fa2 build/variants/early12/libfa2.so
bash tools/ab.sh "$log/ab104.csv" 5 bench main11="$main_tree/build/step11/fa2" main12="$main_tree/build/step12/fa2" \
  queue12=build/step12/fa2 early12=build/variants/early12/fa2 >"$log/ab104.log" 2>&1
stage "ab: exit $?"
grep -A20 '^medians' "$log/ab104.log" | tee -a "$log/progress.txt"
stage "done"
