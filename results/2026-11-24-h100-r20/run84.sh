#!/usr/bin/env bash
# Run 84: what run 83 left undone for steps 08, 13 and 14, and the backward's profile.
# main with the branch of step 13's single-launch merge (which carries the paged KV cache
# and the bounded deterministic backward) laid over it: the files under .ab-base/combo/.
# Start it in a session of its own, or the device call's end kills it:
#   mkdir -p build && setsid nohup bash results/2026-11-24-h100-r20/run84.sh build/run84 STAGE... >build/run84.out 2>&1 </dev/null &
#   matrix    build/tests/gpu_matrix on steps 08, 13 and 14, with compute-sanitizer beside it
#             on the same steps (tools/sanitize.sh) and under every FA2_EMULATE preset
#   decode    make compare SHAPES=decode (step 13 merges its splits in its last block now)
#   profile   step 14's backward at B4 H16 N4096 d128 fp16: tools/profile.sh's metrics for
#             its main kernel, and the stall samples per SASS opcode (tools/sass_stalls.py)
#   mutants   MUTANT_STEPS=13 tests/mutants.sh (counter_not_reset, empty_range_not_counted)
# usage: bash results/2026-11-24-h100-r20/run84.sh LOGDIR STAGE...  (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$(realpath -m "${1:?usage: run84.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
rm -rf build/combo && mkdir -p build/combo
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/combo
[ -d .ab-base/combo ] && cp -r .ab-base/combo/. build/combo/
cd build/combo
make -s -j16 all >"$log/build.log" 2>&1; stage "built: exit $?"
steps="08 13 14"
for what in "$@"; do
  case $what in
    matrix)
      stage "GPU matrix of steps $steps, compute-sanitizer beside it"
      pids=()
      for id in $steps; do
        bash tools/sanitize.sh build/step$id/fa2 >"$log/sanitize-step$id.log" 2>&1 & pids+=($!)
      done
      for preset in $(build/step00/fa2 --help | sed -n 's/^FA2_EMULATE presets: //p' | tr -d ','); do
        FA2_EMULATE=$preset build/step07/fa2 --plan >/dev/null 2>&1 || { stage "  preset $preset does not fit this GPU"; continue; }
        ( for id in $steps; do
            FA2_EMULATE=$preset build/step$id/fa2 --plan >/dev/null 2>&1 || { echo "# step $id refuses $preset"; continue; }
            FA2_EMULATE=$preset bash tools/sanitize.sh build/step$id/fa2 preset
          done ) >"$log/sanitize-preset-$preset.log" 2>&1 & pids+=($!)
      done
      build/tests/gpu_matrix $(for id in $steps; do echo build/step$id/libfa2.so; done) >"$log/gpu-matrix.log" 2>&1
      stage "  gpu_matrix exit $?: $(tail -n 1 "$log/gpu-matrix.log")"
      wait "${pids[@]}"
      for f in "$log"/sanitize-*.log; do
        stage "  $(basename "$f"): $(grep -c '^PASS' "$f") PASS, $(grep -c '^FAIL' "$f") FAIL"
      done
      gzip -f "$log/gpu-matrix.log" ;;
    decode)
      stage "make compare SHAPES=decode"
      rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv
      PYTHONUNBUFFERED=1 make -s compare SHAPES=decode >"$log/compare-decode.log" 2>&1; stage "  exit $?"
      cp results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv "$log/" 2>/dev/null ;;
    profile)
      stage "step 14's backward under Nsight Compute"
      args="--batch 4 --heads 16 --seqlen 4096 --dim 128 --backward"
      # shellcheck disable=SC2086
      KERNELS=4 bash tools/profile.sh build/step14/fa2 $args >"$log/profile-step14.txt" 2>&1; stage "  metrics: exit $?"
      # shellcheck disable=SC2086
      ncu --clock-control none --kernel-name regex:fa2_bwd_kernel --launch-count 1 --section SourceCounters \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis -f -o "$log/sources-step14" \
        build/step14/fa2 $args --iters 1 --warmup 0 --check off >"$log/sources.log" 2>&1
      ncu -i "$log/sources-step14.ncu-rep" --page details >"$log/details-step14.txt" 2>>"$log/sources.log"
      ncu -i "$log/sources-step14.ncu-rep" --page source --csv --print-source sass >"$log/sources-step14.csv" 2>>"$log/sources.log"
      python3 tools/sass_stalls.py "$log/sources-step14.csv" 30 >"$log/sass-stalls-step14.txt" 2>&1; stage "  stalls: exit $?"
      rm -f "$log/sources-step14.ncu-rep"; gzip -f "$log/sources-step14.csv" ;;
    mutants)
      stage "mutants of step 13"
      MUTANT_STEPS=13 bash tests/mutants.sh >"$log/mutants.log" 2>&1
      stage "  $(grep -c '^PASS' "$log/mutants.log") caught, $(grep -c '^FAIL' "$log/mutants.log") not" ;;
    *) stage "unknown stage $what" ;;
  esac
done
stage "done"
