#!/usr/bin/env bash
# Run 89 (prepared): the checks that need a GPU for the branches left ready, in one call.
# Each branch's files differing from main are laid over a copy of the tree (on this machine,
# before the device call, from the repo root; .ab-base/ is ignored by git and carried):
#   bash results/2026-11-24-h100-r22/run89.sh --overlays wip/30-tile-fill wip/28-occupancy-once wip/30-clean-flush
# then on the GPU machine, in a process session of its own (the device call's end kills others):
#   mkdir -p build && setsid nohup bash results/2026-11-24-h100-r22/run89.sh build/run89 STAGE... >build/run89.out 2>&1 </dev/null &
#   probe          bandwidth_ceiling at 128, 256 and 1024 MiB after no flush, the timing's
#                  write flush and a read flush (the lead on docs/measurements/13_split_kv.md)
#   branch=NAME:NN the overlay .ab-base/NAME (a branch name with / turned to -) over a copy of
#                  the tree: build/tests/gpu_matrix on its step NN, then tools/ab.sh, 3 rounds,
#                  main's step NN against it at NN's set (13: decode; 14: backward --backward)
#   check=NAME:NN  build/tests/gpu_matrix on step NN of overlay NAME, and tools/sanitize.sh on it
#                  (a step with no main counterpart to time against: a new step's first run)
#   scratch=NAME   bash scratch/test.sh in overlay NAME's copy: every layout program's checks and,
#                  on this GPU, the hardware verifiers (wip/29-hopper-bwd's verify_wgmma_backward)
#   compare=NAME:SET  make compare SHAPES=SET (bench, decode, backward) in overlay NAME's copy
#                  ("main": the tree as it is), its CSVs into LOGDIR/SET-NAME at once
# Everything runs in copies under build/ (a device call's sync rewrites the work tree).
# usage: bash results/2026-11-24-h100-r22/run89.sh LOGDIR STAGE...
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
if [ "${1:-}" = --overlays ]; then
  shift
  for b in "$@"; do
    dir=.ab-base/${b//\//-}; rm -rf "$dir"; mkdir -p "$dir"
    for f in $(git diff --name-only main..."$b"); do  # what $b changed since it left main
      if git cat-file -e "$b:$f" 2>/dev/null; then mkdir -p "$dir/$(dirname "$f")"; git show "$b:$f" >"$dir/$f"; fi
    done
    echo "$dir: $(find "$dir" -type f | wc -l) files from $b"
  done
  exit 0
fi
log=$(realpath -m "${1:?usage: run89.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
. tools/tree_copy.sh
copy_of() { # copy_of NAME: build/tree-NAME, the tree with overlay NAME (none for main), built
  tree_copy "$PWD/build/tree-$1" "$log/build-$1.log" "$([ "$1" = main ] || echo "$1")"
}
for what in "$@"; do
  case $what in
    probe)
      tree=$(copy_of main)
      for b in 134217728 268435456 1073741824; do for f in none write read; do
        "$tree"/build/reference/bandwidth_ceiling --bytes $b --flush $f 2>&1 | tee -a "$log/probe.log"
      done; done
      stage "probe: done" ;;
    branch=*:*)
      spec=${what#branch=}; name=${spec%%:*}; step=${spec##*:}
      main_tree=$(copy_of main); tree=$(copy_of "$name") || { stage "$what: no tree for $name"; continue; }
      stage "branch $name, step $step: built ($(wc -l <"$log/build-$name.log") lines of build output)"
      "$tree"/build/tests/gpu_matrix "$tree/build/step$step/libfa2.so" >"$log/matrix-$name.log" 2>&1
      stage "  gpu_matrix exit $?: $(grep -c "^PASS ${step}_" "$log/matrix-$name.log") PASS $(grep -c "^FAIL ${step}_" "$log/matrix-$name.log") FAIL"
      set=$([ "$step" = 14 ] && echo "backward --backward" || echo decode)
      (cd "$tree" && bash tools/ab.sh "$log/ab-$name.csv" 3 "$set" main="$main_tree/build/step$step/fa2" new="build/step$step/fa2") \
        >"$log/ab-$name.log" 2>&1
      stage "  ab exit $?"; grep -A40 '^medians' "$log/ab-$name.log" | tee -a "$log/progress.txt"
      gzip -f "$log/matrix-$name.log" ;;
    check=*:*)
      spec=${what#check=}; name=${spec%%:*}; step=${spec##*:}; tree=$(copy_of "$name") || { stage "$what: no tree for $name"; continue; }
      "$tree"/build/tests/gpu_matrix "$tree/build/step$step/libfa2.so" >"$log/matrix-$name-$step.log" 2>&1
      stage "check $name, step $step: gpu_matrix exit $?: $(grep -c "^PASS ${step}_" "$log/matrix-$name-$step.log") PASS $(grep -c "^FAIL ${step}_" "$log/matrix-$name-$step.log") FAIL"
      grep -m 10 '^FAIL' "$log/matrix-$name-$step.log" | tee -a "$log/progress.txt"
      (cd "$tree" && bash tools/sanitize.sh "build/step$step/fa2") >"$log/sanitize-$name-$step.log" 2>&1
      stage "  sanitize exit $?: $(grep -c '^PASS' "$log/sanitize-$name-$step.log") PASS $(grep -c '^FAIL' "$log/sanitize-$name-$step.log") FAIL"
      gzip -f "$log/matrix-$name-$step.log" ;;
    scratch=*)
      name=${what#scratch=}; tree=$(copy_of "$name") || { stage "$what: no tree for $name"; continue; }
      (cd "$tree" && bash scratch/test.sh) >"$log/scratch-$name.log" 2>&1
      stage "scratch ($name): exit $?: $(tail -n 1 "$log/scratch-$name.log")"
      grep -E '^(FAIL|SKIP)' "$log/scratch-$name.log" | head -n 20 | tee -a "$log/progress.txt" ;;
    compare=*:*)
      spec=${what#compare=}; name=${spec%%:*}; set=${spec##*:}; tree=$(copy_of "$name") || { stage "$what: no tree for $name"; continue; }
      (cd "$tree" && rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv &&
        PYTHONUNBUFFERED=1 make -s compare SHAPES="$set") >"$log/compare-$set-$name.log" 2>&1
      stage "compare $set ($name): exit $?"
      mkdir -p "$log/$set-$name"
      cp "$tree"/results/compare-*.csv "$tree"/results/ceiling-*.csv "$tree"/results/bandwidth-*.csv "$log/$set-$name/" 2>/dev/null ;;
    *) stage "unknown stage $what" ;;
  esac
done
stage "done"
