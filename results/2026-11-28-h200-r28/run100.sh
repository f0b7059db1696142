#!/usr/bin/env bash
# Run 100: which handoff of step 12's work item does compute-sanitizer's racecheck follow?
# Runs on main, with the branch wip/26-dynamic-schedule laid over it (its third version: the
# item passed on the named barriers ITEM_FULL and ITEM_EMPTY; the overlay made beforehand by
# `bash results/2026-11-24-h100-r22/run89.sh --overlays wip/26-dynamic-schedule`, and .ab-base
# copied to the GPU machine with the tree). Builds three forms of the handoff word from the
# branch's kernel (`make variant`): plain (the branch as it is: a shared store and load),
# relaxed (st/ld.relaxed.cta.shared) and atomic (atomicExch, and atomicAdd of 0, on the shared
# word); runs each under racecheck at the three shapes where the second version's plain
# handoff reported hazards (more items than blocks), and memcheck at one; --check full
# compares every output row with the fp64 reference. About two minutes.
# usage: bash results/2026-11-28-h200-r28/run100.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${1:?usage: run100.sh OUTDIR}
src=build/ab/step12-plain.cu store='if (lane == 0) *item_smem = item;' load='const unsigned item = *item_smem;'
mkdir -p build/ab
cp .ab-base/wip-26-dynamic-schedule/steps/12_persistent/kernel.cu $src || exit 1
make -s step=12 variant NAME=plain12 SRC=$src || exit 1
python3 tools/variant_src.py $src build/ab/step12-relaxed.cu \
  "$store" 'if (lane == 0) asm volatile("st.relaxed.cta.shared.u32 [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(item_smem)), "r"(item) : "memory");' \
  "$load" 'unsigned item; asm volatile("ld.relaxed.cta.shared.u32 %0, [%1];\n" : "=r"(item) : "r"((uint32_t)__cvta_generic_to_shared(item_smem)) : "memory");' || exit 1
python3 tools/variant_src.py $src build/ab/step12-atomic.cu \
  "$store" 'if (lane == 0) atomicExch(item_smem, item);' "$load" 'const unsigned item = atomicAdd(item_smem, 0u);' || exit 1
make -s step=12 variant NAME=relaxed12 SRC=build/ab/step12-relaxed.cu && make -s step=12 variant NAME=atomic12 SRC=build/ab/step12-atomic.cu || exit 1
for v in plain=build/variants/plain12/fa2 relaxed=build/variants/relaxed12/fa2 atomic=build/variants/atomic12/fa2; do
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
