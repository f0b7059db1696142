#!/usr/bin/env bash
# Run 102: step 12's work queue (branch wip/26-dynamic-schedule, third version), the one of run
# 101's changes that was faster than the step at the causal shapes and no slower at the seed:
# which form of its item handoff compute-sanitizer's racecheck follows (run100.sh beside run 99's
# record), its whole check (GPU matrix with every preset, compute-sanitizer, its planted bugs:
# run95.sh's check stage), both at once; then tools/ab.sh, 7 rounds, at the bench set: main's
# steps 11 and 12 against the branch's step 12 (run95.sh's ab12with11 stage). About eight
# minutes. Run 103 was its second half alone, on the branch with the atomic word:
#   bash results/2026-11-28-h200-r26/run95.sh LOGDIR check=wip-26-dynamic-schedule:12 ab12with11=wip-26-dynamic-schedule:7
# On this machine beforehand: bash results/2026-11-24-h100-r22/run89.sh --overlays wip/26-dynamic-schedule
# then on the GPU machine, .ab-base carried, in a process session of its own:
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r29/run102.sh build/run102 >build/run102.out 2>&1 </dev/null &
# usage: bash results/2026-11-28-h200-r29/run102.sh LOGDIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
. tools/tree_copy.sh
run_start "${1:?usage: run102.sh LOGDIR}"
ps -o pgid= $$ | tr -d ' ' >"$log/pgid"
[ -d .ab-base/wip-26-dynamic-schedule ] || { stage "overlay .ab-base/wip-26-dynamic-schedule is missing: stopping"; exit 3; }
bash results/2026-11-28-h200-r28/run100.sh "$log" >"$log/run100.out" 2>&1 &
handoff=$!
bash results/2026-11-28-h200-r26/run95.sh "$log/queue" check=wip-26-dynamic-schedule:12 ab12with11=wip-26-dynamic-schedule:7 \
  >"$log/queue.out" 2>&1
wait $handoff
stage "handoff forms under racecheck (run100.sh): exit $?"; tee -a "$log/progress.txt" <"$log/run100.out"
grep -v ' start on \| done$' "$log/queue/progress.txt" | tee -a "$log/progress.txt"
for f in "$log"/run100-*.log; do gzip -f "$f"; done
stage "done"
