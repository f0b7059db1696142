#!/usr/bin/env bash
# Run 108: where the ladder's last three losses sit, per SASS instruction. Nsight Compute's
# source counters (tools/source_counters.sh, one launch each, summed per opcode by
# tools/sass_stalls.py) of steps 09 and 10 at fp16 B16 H16 N1024 d64, where step 10 trails step
# 09 by 1.9% with 2.7 times its barrier stalls per issued instruction (run 107), and of steps 11
# and 12 at fp16 B2 H8 N1024 d128, where step 12, one item per block, trails step 11 by 1.2%.
# About three minutes of one H200 (or H100), nothing to copy beforehand.
# On the GPU machine, in a process session of its own:
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r30/run108.sh build/run108 >build/run108.out 2>&1 </dev/null &
# usage: bash results/2026-11-28-h200-r30/run108.sh LOGDIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
# shellcheck source=tools/tree_copy.sh
. tools/tree_copy.sh
run_start "${1:?usage: run108.sh LOGDIR}"
cd "$(copy_tree "$PWD/build/tree108")" || exit 2
make -s -j16 build/step09/fa2 build/step10/fa2 build/step11/fa2 build/step12/fa2 >"$log/build.log" 2>&1 || { stage "build failed"; exit 1; }
stage "built"
for p in "09 fp16-b16-n1024-d64 --batch 16 --heads 16 --seqlen 1024 --dim 64" \
         "10 fp16-b16-n1024-d64 --batch 16 --heads 16 --seqlen 1024 --dim 64" \
         "11 fp16-b2-n1024-d128 --batch 2 --heads 8 --seqlen 1024 --dim 128" \
         "12 fp16-b2-n1024-d128 --batch 2 --heads 8 --seqlen 1024 --dim 128"; do
  read -r id tag args <<<"$p"
  # shellcheck disable=SC2086
  KERNEL_REGEX=fa2_ bash tools/source_counters.sh "$log/sources$id-$tag" build/step$id/fa2 $args --iters 1 --warmup 0 --check off
  stage "source counters step $id $tag: exit $?: $(grep -m 1 -i 'samples' "$log/sources$id-$tag-stalls.txt")"
done
stage "done"
