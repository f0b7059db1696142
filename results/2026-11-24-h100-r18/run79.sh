#!/usr/bin/env bash
# Runs 79 and 80: what run 78 did not reach (its make compare stopped after the ceiling
# probes until the machine was taken back), by stage, from a copy of the tree under build/.
#   torch    how long python3 takes to import torch and see the GPU (run 78's compare waited there)
#   compare  make compare SHAPES=bench (every step, cuBLAS, torch SDPA per backend, in rounds)
#   sources  Nsight Compute's source page (per-instruction stall samples) of steps 08-12 at
#            B4 H16 N4096 d128 fp16, summed per opcode by tools/sass_stalls.py
#   test     make test (every step, the presets, sanitize) and, beside it, tests/mutants.sh
# usage: bash results/2026-11-24-h100-r18/run79.sh LOGDIR STAGE...   (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$(realpath -m "${1:?usage: run79.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
rm -rf build/tree && mkdir -p build/tree
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/tree
cd build/tree
make -s -j16 all >"$log/build.log" 2>&1 || { stage "build FAILED"; exit 1; }
for what in "$@"; do
  case $what in
    torch)
      stage "torch"
      timeout 300 python3 -c 'import time; t = time.time(); import torch; print(torch.__version__, "import", round(time.time() - t, 1), "s"); print("cuda", torch.cuda.is_available(), round(time.time() - t, 1), "s")' \
        >"$log/torch.txt" 2>&1; stage "  exit $?: $(tr '\n' ' ' <"$log/torch.txt")" ;;
    compare)
      stage "make compare SHAPES=bench"
      rm -f results/compare-*.csv results/ceiling-*.csv
      PYTHONUNBUFFERED=1 make -s compare SHAPES=bench >"$log/compare-bench.log" 2>&1; stage "  exit $?"
      cp results/compare-*.csv results/ceiling-*.csv "$log/" 2>/dev/null ;;
    sources)
      stage "source-level stalls"
      for s in 08 09 10 11 12; do
        ncu --clock-control none --launch-count 1 --section SourceCounters --section WarpStateStats -f -o "$log/sources-step$s" \
          build/step$s/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 128 --iters 1 --warmup 0 --check off >>"$log/sources.log" 2>&1
        ncu -i "$log/sources-step$s.ncu-rep" --page source --csv --print-source sass >"$log/sources-step$s.csv" 2>>"$log/sources.log"
        python3 tools/sass_stalls.py "$log/sources-step$s.csv" 25 >"$log/sass-stalls-step$s.txt" 2>&1
        rm -f "$log/sources-step$s.ncu-rep"; gzip -f "$log/sources-step$s.csv"
      done; stage "  done" ;;
    test)
      stage "make test, tests/mutants.sh beside it"
      bash tests/mutants.sh >"$log/mutants.log" 2>&1 &
      make test >"$log/make-test.log" 2>&1; stage "  make test exit $? : $(tail -n 1 "$log/make-test.log")"
      wait; stage "  mutants: $(grep -c '^PASS' "$log/mutants.log") caught, $(grep -c '^FAIL' "$log/mutants.log") not"
      cp build/test-logs/gpu-matrix.log "$log/gpu-matrix.log"
      cat build/test-logs/sanitize-*.log >"$log/sanitize.log" ;;
    *) stage "unknown stage $what" ;;
  esac
done
stage "done"
