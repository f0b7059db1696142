#!/usr/bin/env bash
# Run 90: step 14 with its dQ staged through shared memory (run 88's walk_smem_dq, now the
# step) and the timing's read flush, on the GPU, in one call. Everything runs in a copy of
# the tree, build/tree-r90, and writes only to LOGDIR (under build/: the sync between device
# calls keeps build/ and may remove what a stage leaves in the repository root). Start it in
# a process session of its own, or the device call's end kills it:
#   mkdir -p build && setsid nohup bash results/2026-11-25-h100-r23/run90.sh build/run90 check compare mutants >build/run90.out 2>&1 </dev/null &
#   check    build/tests/gpu_matrix on step 14 (the A100 and 99 KB presets' backward cases
#            included) and, beside it, tools/sanitize.sh on step 14 as this GPU and under the
#            a100 and rtx4090 presets (the three backward tiles)
#   compare  make compare SHAPES=backward, 3 rounds; its CSVs into LOGDIR/backward
#   mutants  MUTANT_STEPS=14 tests/mutants.sh, 8 at a time, each stopping at its first FAIL
#   decode   make compare SHAPES=decode (step 13's split count by the longest range, the
#            read flush); its CSVs into LOGDIR/decode
#   profile  (not run in run 90) step 14's backward and torch's FLASH_ATTENTION backward side by
#            side at B4 H16 N4096, d128 and d64: tools/profile.sh on step 14's first 4 kernels
#            (forward, prep, main, convert) and on FA2's main kernel, then each main kernel's
#            per-instruction counters (tools/source_counters.sh: stalls per opcode, what each
#            memory opcode touches)
# usage: bash results/2026-11-25-h100-r23/run90.sh LOGDIR STAGE...
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
log=$(realpath -m "${1:?usage: run90.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
. tools/tree_copy.sh
tree=$(tree_copy "$PWD/build/tree-r90" "$log/build.log")
stage "built: $([ -f "$tree/.built" ] && echo yes || echo NO, see build.log)"
cd "$tree" || exit 2
for what in "$@"; do
  case $what in
    check)
      pids=()
      bash tools/sanitize.sh build/step14/fa2 >"$log/sanitize14.log" 2>&1 & pids+=($!)
      for preset in a100 rtx4090; do
        FA2_EMULATE=$preset bash tools/sanitize.sh build/step14/fa2 preset >"$log/sanitize14-$preset.log" 2>&1 & pids+=($!)
      done
      build/tests/gpu_matrix build/step14/libfa2.so >"$log/matrix14.log" 2>&1
      stage "gpu_matrix step 14: exit $?: $(grep -c '^PASS 14_' "$log/matrix14.log") PASS $(grep -c '^FAIL 14_' "$log/matrix14.log") FAIL; $(grep -c '^PASS 14_.*as a100' "$log/matrix14.log") PASS as a100"
      wait "${pids[@]}"
      for f in "$log"/sanitize14*.log; do stage "$(basename "$f"): $(grep -c '^PASS' "$f") PASS $(grep -c '^FAIL' "$f") FAIL; $(tail -n 1 "$f")"; done
      gzip -f "$log/matrix14.log" ;;
    compare|decode)
      set=$([ "$what" = compare ] && echo backward || echo decode)
      rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv
      PYTHONUNBUFFERED=1 make -s compare SHAPES="$set" >"$log/compare-$set.log" 2>&1
      stage "compare $set: exit $?"
      mkdir -p "$log/$set" && cp results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv "$log/$set/" 2>/dev/null ;;
    mutants)
      FA2_TEST_FAIL_LIMIT=1 MUTANT_JOBS=8 MUTANT_STEPS=14 bash tests/mutants.sh >"$log/mutants14.log" 2>&1
      stage "mutants 14: exit $?: $(tail -n 1 "$log/mutants14.log")" ;;
    profile)
      printf '#!/bin/sh\nexec python3 reference/sdpa.py "$@"\n' >build/sdpa.sh && chmod +x build/sdpa.sh
      for d in 128 64; do
        args="--batch 4 --heads 16 --seqlen 4096 --dim $d --backward"
        # shellcheck disable=SC2086
        KERNELS=4 bash tools/profile.sh build/step14/fa2 $args >"$log/profile14-d$d.log" 2>&1
        # shellcheck disable=SC2086
        KERNEL_REGEX=fa2_bwd_kernel bash tools/source_counters.sh "$log/src14-d$d" build/step14/fa2 $args --iters 1 --warmup 0 --check off
        stage "profile step 14 d$d: $(grep -m 1 '^RED' "$log/src14-d$d-memory.txt" | tr -s ' ')"
        # shellcheck disable=SC2086
        KERNEL_REGEX=flash_bwd_dq_dk_dv bash tools/profile.sh build/sdpa.sh $args --backends flash >"$log/profilefa2-d$d.log" 2>&1
        # shellcheck disable=SC2086
        KERNEL_REGEX=flash_bwd_dq_dk_dv bash tools/source_counters.sh "$log/srcfa2-d$d" build/sdpa.sh $args --backends flash --warmup 0 --iters 1 --check off
        stage "profile FA2 d$d: $(grep -m 1 '^RED' "$log/srcfa2-d$d-memory.txt" | tr -s ' ')"
      done ;;
    *) stage "unknown stage $what (allowed: check compare mutants decode profile)" ;;
  esac
done
stage "done"
