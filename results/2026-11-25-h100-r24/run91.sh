#!/usr/bin/env bash
# Run 91: the three prepared branches on the GPU, in one call, in copies of the tree under
# build/ (a device call's sync rewrites the work tree). Overlays first, on this machine:
#   bash results/2026-11-24-h100-r22/run89.sh --overlays wip/30-merge-loads wip/28-d64-tile wip/29-hopper-kernel
# then on the GPU machine, in a process session of its own:
#   mkdir -p build && setsid nohup bash results/2026-11-25-h100-r24/run91.sh build/run91 STAGE... >build/run91.out 2>&1 </dev/null &
#   first15=NAME   step 15 of overlay NAME, its first runs (the plan's order: d128, d64, tails
#                  with causal GQA, deterministic), each under a 60 s limit: a hang in a new
#                  pipeline is a barrier or a phase, and must not eat the rest of the run
#   check15=NAME   build/tests/gpu_matrix on step 15 and tools/sanitize.sh on it, 600 s limit each;
#                  writes LOGDIR/step15-ok when both pass
#   compare15=NAME make compare SHAPES=backward in overlay NAME's copy, only after step15-ok
#   pageorder      step 13 (main) at the decode shapes in pages of 16: the pool shuffled (the
#                  harness's default) against pages in read order (--page-order sequential),
#                  3 rounds (the TLB-reach lead of docs/measurements/13_split_kv.md)
#   branch=, compare=   run89.sh's stages (their logs in the same LOGDIR)
#   profile        run90.sh's profile stage: step 14 and FA2's backward side by side
# usage: bash results/2026-11-25-h100-r24/run91.sh LOGDIR STAGE...
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
log=$(realpath -m "${1:?usage: run91.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
. tools/tree_copy.sh
tree_of() { # tree_of NAME: the copy run89.sh's stages use, build/tree-NAME with overlay NAME
  tree_copy "$root/build/tree-$1" "$log/build-$1.log" "$([ "$1" = main ] || echo "$1")"
}
for what in "$@"; do
  case $what in
    first15=*)
      tree=$(tree_of "${what#first15=}") || exit 3; cd "$tree" || exit 2
      stage "step 15 built: $([ -x build/step15/fa2 ] && echo yes || echo NO)"
      while IFS= read -r args; do
        out=$(eval "timeout 60 env $args" 2>&1); rc=$?
        echo "== rc $rc: $args"$'\n'"$out" >>"$log/first15.log"
        stage "  rc $rc: $args: $(grep -E 'PASS|FAIL|error' <<<"$out" | tr '\n' ' ' | cut -c1-300)"
      done <<'RUNS'
build/step15/fa2 --backward --seqlen 512
build/step15/fa2 --backward --seqlen 512 --dim 64
build/step15/fa2 --backward --seqlen-q 97 --seqlen-k 161 --causal --heads 4 --kv-heads 2 --dtype bf16
build/step15/fa2 --backward --seqlen-q 300 --seqlen-k 100 --heads 2
build/step15/fa2 --backward --batch 2 --heads 8 --kv-heads 2 --seqlen 1000 --causal
FA2_DETERMINISTIC=1 build/step15/fa2 --backward --batch 2 --heads 8 --kv-heads 2 --seqlen 1000
RUNS
      cd "$root" ;;
    check15=*)
      tree=$(tree_of "${what#check15=}") || exit 3; cd "$tree" || exit 2
      timeout 600 build/tests/gpu_matrix build/step15/libfa2.so >"$log/matrix15.log" 2>&1; m=$?
      pass=$(grep -c '^PASS 15_' "$log/matrix15.log"); fail=$(grep -c '^FAIL 15_' "$log/matrix15.log")
      stage "gpu_matrix step 15: exit $m: $pass PASS $fail FAIL"
      grep -m 12 '^FAIL' "$log/matrix15.log" | tee -a "$log/progress.txt"
      timeout 600 bash tools/sanitize.sh build/step15/fa2 >"$log/sanitize15.log" 2>&1; s=$?
      stage "  sanitize exit $s: $(grep -c '^PASS' "$log/sanitize15.log") PASS $(grep -c '^FAIL' "$log/sanitize15.log") FAIL"
      grep -m 6 '^FAIL' "$log/sanitize15.log" | tee -a "$log/progress.txt"
      [ $m = 0 ] && [ "$fail" = 0 ] && [ "$pass" -gt 0 ] && [ $s = 0 ] && touch "$log/step15-ok"
      gzip -f "$log/matrix15.log"; cd "$root" ;;
    compare15=*)
      if [ -f "$log/step15-ok" ]; then bash results/2026-11-24-h100-r22/run89.sh "$log" "compare=${what#compare15=}:backward"
      else stage "compare15: skipped (step 15's matrix or sanitize did not pass)"; fi ;;
    pageorder)
      tree=$(tree_of main) || exit 3
      printf '#!/bin/sh\nexec %s "$@" --page-order sequential\n' "$tree/build/step13/fa2" >"$log/step13-sequential.sh"
      chmod +x "$log/step13-sequential.sh"
      . reference/shapes.sh
      shapes=$(shapes_of decode | awk '$9 == "page=16"' | while read -r b h hkv nq nk d c t o; do
        printf -- '--batch %s --heads %s --kv-heads %s --seqlen-q %s --seqlen-k %s --dim %s --dtype %s%s --page-size 16;' \
          "$b" "$h" "$hkv" "$nq" "$nk" "$d" "$t" "$([ "$c" = 1 ] && echo ' --causal')"; done)
      (cd "$tree" && bash tools/ab.sh "$log/ab-pageorder.csv" 3 "${shapes%;}" \
        shuffled=build/step13/fa2 sequential="$log/step13-sequential.sh") >"$log/ab-pageorder.log" 2>&1
      stage "pageorder: exit $?"; grep -A10 '^medians' "$log/ab-pageorder.log" | tee -a "$log/progress.txt" ;;
    branch=*|compare=*) bash results/2026-11-24-h100-r22/run89.sh "$log" "$what" ;;
    profile) bash results/2026-11-25-h100-r23/run90.sh "$log" profile ;;
    *) stage "unknown stage $what (allowed: first15= check15= compare15= pageorder branch= compare= profile)" ;;
  esac
done
stage "done"
