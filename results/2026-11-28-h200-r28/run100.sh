#!/usr/bin/env bash
# Run 100: which handoff of step 12's work item does compute-sanitizer's racecheck follow?
# Three builds of the queue (branch wip/26-dynamic-schedule, the item passed on the named
# barriers ITEM_FULL and ITEM_EMPTY), made on the build machine and carried: plain (a
# shared store and load), relaxed (st/ld.relaxed.cta.shared), atomic (atomicExch and
# atomicAdd of 0 on the shared word). Each under racecheck at the three shapes where the
# plain handoff reported hazards (more items than blocks), and memcheck at one; --check full
# compares every output row with the fp64 reference.
# usage: bash results/2026-11-28-h200-r28/run100.sh OUT
set -uo pipefail
out=${1:?usage: run100.sh OUT}
for v in plain=build/step12/fa2 relaxed=build/variants/relaxed12/fa2 atomic=build/variants/atomic12/fa2; do
  name=${v%%=*} bin=${v#*=}
  for shape in "--batch 2 --heads 80 --kv-heads 20 --seqlen 200 --dim 128 --scale 4" \
               "--batch 2 --heads 80 --kv-heads 20 --seqlen-q 300 --seqlen-k 260 --dim 64 --causal" \
               "--batch 2 --heads 80 --kv-heads 20 --seqlen 200 --dim 64"; do
    # shellcheck disable=SC2086
    r=$(compute-sanitizer --tool racecheck --error-exitcode 9 "$bin" $shape --warmup 0 --iters 1 --check full 2>&1)
    echo "$name racecheck $shape: exit $?: $(echo "$r" | grep -E 'RACECHECK SUMMARY' | tail -n 1) $(echo "$r" | grep -oE '(PASS|FAIL) rel_l2 [^|]*' | head -n 1)"
    echo "$r" >>"$out/run100-$name.log"
  done
  # shellcheck disable=SC2086
  r=$(compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" --batch 2 --heads 80 --kv-heads 20 --seqlen-q 300 --seqlen-k 260 --dim 64 --causal --warmup 0 --iters 1 --check full 2>&1)
  echo "$name memcheck: exit $?: $(echo "$r" | grep -E 'ERROR SUMMARY' | tail -n 1)"
done
