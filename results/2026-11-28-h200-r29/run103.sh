#!/usr/bin/env bash
# Run 103: step 12's work queue with its item word written and read by shared-memory atomics
# (branch wip/26-dynamic-schedule, the form run 102 found racecheck clean): its whole check (GPU
# matrix with every preset, compute-sanitizer, its planted bugs: run95.sh's check stage), then
# tools/ab.sh, 7 rounds, at the bench set: main's steps 11 and 12 against the branch's step 12.
# About five minutes.
# On this machine beforehand: bash results/2026-11-24-h100-r22/run89.sh --overlays wip/26-dynamic-schedule
# then on the GPU machine, .ab-base carried, in a process session of its own:
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r29/run103.sh build/run103 >build/run103.out 2>&1 </dev/null &
# usage: bash results/2026-11-28-h200-r29/run103.sh LOGDIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
. tools/tree_copy.sh
run_start "${1:?usage: run103.sh LOGDIR}"
ps -o pgid= $$ | tr -d ' ' >"$log/pgid"
[ -d .ab-base/wip-26-dynamic-schedule ] || { stage "overlay .ab-base/wip-26-dynamic-schedule is missing: stopping"; exit 3; }
bash results/2026-11-28-h200-r26/run95.sh "$log/check" check=wip-26-dynamic-schedule:12 >"$log/check.out" 2>&1
grep -v ' start on \| done$' "$log/check/progress.txt" | tee -a "$log/progress.txt"
main_tree=$(copy_of main) && queue_tree=$(copy_of wip-26-dynamic-schedule) || { stage "no tree: stopping"; exit 1; }
(cd "$queue_tree" && bash tools/ab.sh "$log/ab103.csv" 7 bench main11="$main_tree/build/step11/fa2" \
  main12="$main_tree/build/step12/fa2" queue12=build/step12/fa2) >"$log/ab103.log" 2>&1
stage "ab: exit $?"
grep -A20 '^medians' "$log/ab103.log" | tee -a "$log/progress.txt"
stage "done"
