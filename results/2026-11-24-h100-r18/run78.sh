#!/usr/bin/env bash
# Run 78: step 09 rebuilt on step 08 (its diff against 08 is wgmma alone), then everything
# the TMA step still needed on the device. Runs from a copy of the tree under build/ (the GPU
# machine's copy of the repository is replaced between commands).
#  1. build; .ab-base (main before the new step 08: its step08 is today's step 09's old self)
#  2. the GPU matrix and compute-sanitizer on step 09; stop here when either fails
#  3. scratch/verify_wgmma (the steps' swizzled K-major and MN-major descriptors)
#  4. A/B in rounds at the bench shapes: steps 08, 09, and 09's old self
#  5. make compare SHAPES=bench (every step, cuBLAS, torch SDPA per backend, in rounds)
#  6. make test (every step, the presets, sanitize); tests/mutants.sh
#  7. Nsight Compute's source page (per-instruction stall samples) of steps 08-12 at
#     B4 H16 N4096 d128 fp16, summed per opcode by tools/sass_stalls.py
# usage: bash results/2026-11-24-h100-r18/run78.sh LOGDIR   (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
log=$(realpath -m "${1:?usage: run78.sh LOGDIR}")
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
rm -rf build/tree && mkdir -p build/tree
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/tree
cd build/tree
make -s -j16 all >"$log/build.log" 2>&1 || { stage "build FAILED"; exit 1; }
make -s -C "$root/.ab-base" -j16 build/step08/fa2 >>"$log/build.log" 2>&1 || { stage "base build FAILED"; exit 1; }
old09=$root/.ab-base/build/step08/fa2
stage "matrix step 09"
build/tests/gpu_matrix build/step09/libfa2.so >"$log/matrix-09.log" 2>&1; rc=$?
pass=$(grep -c '^PASS' "$log/matrix-09.log"); fail=$(grep -c '^FAIL' "$log/matrix-09.log")
stage "  exit $rc: $pass passed, $fail failed"
[ "$rc" -eq 0 ] && [ "$fail" -eq 0 ] || { stage "step 09 matrix FAILED: stop"; exit 1; }
bash tools/sanitize.sh build/step09/fa2 >"$log/sanitize-09.log" 2>&1; rc=$?
stage "sanitize step 09: exit $rc, $(grep -c '^FAIL' "$log/sanitize-09.log") FAIL lines"
make -s build/scratch/verify_wgmma >>"$log/build.log" 2>&1
build/scratch/verify_wgmma >"$log/verify_wgmma.txt" 2>&1; stage "verify_wgmma: exit $?"
stage "A/B bench: 08, 09, 09 before"
bash tools/ab.sh "$log/ab-bench.csv" 3 bench s08=build/step08/fa2 s09=build/step09/fa2 s09_before="$old09" \
  >"$log/ab-bench.log" 2>&1; stage "  exit $?"
stage "make compare SHAPES=bench"
rm -f results/compare-*.csv results/ceiling-*.csv
PYTHONUNBUFFERED=1 make -s compare SHAPES=bench >"$log/compare-bench.log" 2>&1; stage "  exit $?"
cp results/compare-*.csv results/ceiling-*.csv "$log/" 2>/dev/null
stage "make test"
make test >"$log/make-test.log" 2>&1; stage "  exit $? : $(tail -n 1 "$log/make-test.log")"
cp build/test-logs/gpu-matrix.log "$log/gpu-matrix.log"
cat build/test-logs/sanitize-*.log >"$log/sanitize.log"
stage "mutants"
bash tests/mutants.sh >"$log/mutants.log" 2>&1; stage "  exit $? : $(grep -c '^PASS' "$log/mutants.log") caught, $(grep -c '^FAIL' "$log/mutants.log") not"
stage "source-level stalls"
for s in 08 09 10 11 12; do
  ncu --clock-control none --launch-count 1 --section SourceCounters --section WarpStateStats -f -o "$log/sources-step$s" \
    build/step$s/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 128 --iters 1 --warmup 0 --check off >>"$log/sources.log" 2>&1
  ncu -i "$log/sources-step$s.ncu-rep" --page source --csv --print-source sass >"$log/sources-step$s.csv" 2>>"$log/sources.log"
  python3 tools/sass_stalls.py "$log/sources-step$s.csv" 25 >"$log/sass-stalls-step$s.txt" 2>&1
  rm -f "$log/sources-step$s.ncu-rep"; gzip -f "$log/sources-step$s.csv"
done
stage "done"
