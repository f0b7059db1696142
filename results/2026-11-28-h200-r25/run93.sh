#!/usr/bin/env bash
# Run 93: what the Hopper backward (step 15) still needs on a Hopper GPU (an H100, or an H200
# when that is what is lent), in one device session of about 25 minutes, on a copy of the tree
# with branch wip/29-stmatrix-ds laid over it (step 15's dS stored by stmatrix.trans), or on
# main's tree (NAME "main"), or on whichever of the two the ab stage found faster (NAME "picked").
# Before the call, on this machine, from the repository root, a branch's files as an overlay
# (the device call must carry .ab-base); the branch it ran with, made from a patch that stood
# beside this script, is on main now ("Step 15: dS stored by stmatrix.x4.trans"):
#   bash results/2026-11-24-h100-r22/run89.sh --overlays wip/29-stmatrix-ds
# then on the GPU machine, in a process session of its own (the device call's end kills others):
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r25/run93.sh build/run93 STAGE... >build/run93.out 2>&1 </dev/null &
#   verify=NAME    bash scratch/test.sh in NAME's copy: every layout check and, on this GPU, the
#                  hardware verifiers (verify_wgmma_backward runs stmatrix.x4.trans)
#   check=NAME     build/tests/gpu_matrix and tools/sanitize.sh on step 15 of NAME's copy; a FAIL
#                  in either stops the run (nothing after it would be worth its minutes)
#   ab=NAME        tools/ab.sh, 3 rounds, main's step 15 against NAME's at the backward set; NAME
#                  is "picked" from here on if its backward medians add up to no more than main's
#   test=NAME      make test in NAME's copy (every step's GPU matrix and sanitizer) with the
#                  planted bugs of steps 14 and 15 beside it (MUTANT_STEPS="14 15" tests/mutants.sh,
#                  8 at a time, each stopping at its first FAIL); if NAME is not main and make test
#                  fails, main is "picked" and its step 15 checked (check=main)
#   compare=NAME:SET  make compare SHAPES=SET in NAME's copy, its CSVs into LOGDIR/SET-NAME
#   profile=NAME   tools/profile.sh on the backward's three kernels (prep, main, convert) and the
#                  main kernel's per-instruction counters (tools/source_counters.sh), B4 H16 N4096
#                  d128 fp16: where step 15's time goes against the wgmma ceiling
#   conflicts=NAME step 14's 27.5 M shared-load bank conflicts at d128 (results/2026-11-25-h100-r24/
#                  conflicts_plan.md, section 4): Nsight Compute's shared-memory table of its main
#                  kernel (LDS against LDSM), and the kernel under the a100 preset (no dQ staging)
# The order run on an H200 (30 minutes of device time, the machine's start included):
#   ab=wip-29-stmatrix-ds test=picked compare=picked:backward profile=picked
# (the test stage runs the scratch verifiers and step 15's matrix and sanitizer, so verify and
# check are not run apart).
# Its check, ab and compare stages now call tools/tree_copy.sh's check_step, ab_no_slower and
# compare_set, written after the run from this script's own code (compare_set adds the clock
# sampling; the compare stage did not run here).
# usage: bash results/2026-11-28-h200-r25/run93.sh LOGDIR STAGE...
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
. tools/tree_copy.sh
run_start "${1:?usage: run93.sh LOGDIR STAGE...}"; shift
shape="--batch 4 --heads 16 --seqlen 4096 --dim 128 --backward"  # the profiles' (profile.sh adds --iters 1 --warmup 0 --check off)
picked=main
for what in "$@"; do
  name=${what#*=}; name=${name%%:*}; [ "$name" = picked ] && name=$picked
  tree=$(copy_of "$name") || { stage "$what: no tree for $name: stopping"; break; }
  case $what in
    verify=*)
      (cd "$tree" && bash scratch/test.sh) >"$log/scratch-$name.log" 2>&1
      stage "verify $name: exit $?: $(tail -n 1 "$log/scratch-$name.log")"
      grep -E '^(FAIL|SKIP)|verify_wgmma_backward' "$log/scratch-$name.log" | head -n 40 | tee -a "$log/progress.txt" ;;
    check=*)
      check_step 15 "$name" || { stage "check $name failed: stopping"; break; } ;;
    ab=*)
      if ab_no_slower 15 "$name" "backward --backward"; then picked=$name; fi
      stage "  picked: $picked" ;;
    profile=*)
      # shellcheck disable=SC2086
      (cd "$tree" && KERNEL_REGEX=bwd KERNELS=3 bash tools/profile.sh build/step15/fa2 $shape) >"$log/profile15-$name.log" 2>&1
      stage "profile step 15 $name: exit $?"
      # shellcheck disable=SC2086
      (cd "$tree" && KERNEL_REGEX=fa2_bwd_wgmma bash tools/source_counters.sh "$log/src15-$name" build/step15/fa2 $shape \
        --iters 1 --warmup 0 --check off)
      stage "  source counters step 15 $name: exit $?" ;;
    test=*)
      (cd "$tree" && FA2_TEST_FAIL_LIMIT=1 MUTANT_JOBS=8 MUTANT_STEPS="14 15" bash tests/mutants.sh) >"$log/mutants-$name.log" 2>&1 &
      (cd "$tree" && make -s test) >"$log/test-$name.log" 2>&1
      rc=$?
      stage "make test $name: exit $rc: $(tail -n 1 "$log/test-$name.log")"
      grep -E '^(FAIL|SKIP)' "$log/test-$name.log" | head -n 20 | tee -a "$log/progress.txt"
      wait
      stage "  mutants 14 15 $name: $(grep -c '^PASS' "$log/mutants-$name.log") caught, $(grep -c '^FAIL' "$log/mutants-$name.log") FAIL"
      grep '^FAIL' "$log/mutants-$name.log" | tee -a "$log/progress.txt"
      gzip -f "$log/test-$name.log"
      if [ $rc != 0 ] && [ "$name" != main ]; then
        picked=main; stage "  picked: main (make test failed on $name)"
        check_step 15 main || { stage "check main failed: stopping"; break; }
      fi ;;
    compare=*)
      compare_set "$name" "${what##*:}" ;;
    conflicts=*)
      # shellcheck disable=SC2086
      (cd "$tree" && ncu --clock-control none --kernel-name regex:fa2_bwd_kernel --launch-count 1 \
        --section MemoryWorkloadAnalysis_Tables --print-details all build/step14/fa2 $shape --iters 1 --warmup 0 --check off) \
        >"$log/conflicts14-tables-$name.log" 2>&1
      stage "conflicts step 14 $name, shared-memory table: exit $?"
      # shellcheck disable=SC2086
      (cd "$tree" && FA2_EMULATE=a100 KERNEL_REGEX=fa2_bwd_kernel bash tools/profile.sh build/step14/fa2 $shape) \
        >"$log/conflicts14-a100-$name.log" 2>&1
      stage "  step 14 as a100 (no dQ staging): exit $?: $(grep -m 1 'bank_conflicts_pipe_lsu_mem_shared_op_ld' "$log/conflicts14-a100-$name.log" | tr -s ' ')" ;;
    *) stage "unknown stage $what (allowed: verify= check= ab= test= compare=:SET profile= conflicts=, each =NAME)" ;;
  esac
done
stage "done"
