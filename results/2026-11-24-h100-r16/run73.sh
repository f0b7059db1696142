#!/usr/bin/env bash
# Run 73: the device evidence for running where learners are, on final code.
#  1. build
#  2. make test (the GPU matrix, sanitize and test_abi under every preset in it)
#  3. FA2_EMULATE=rtx4090 make compare; FA2_EMULATE=a10g make compare SHAPES=decode;
#     FA2_EMULATE=a100 make compare (the timings are this GPU's; the rows say "as <preset>")
#  4. bash tests/mutants.sh (every planted bug must draw a FAIL from the matrix)
# usage: bash results/2026-11-24-h100-r16/run73.sh LOGDIR   (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: run73.sh LOGDIR}
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
make -s -j16 all >"$log/build.log" 2>&1 || { stage "build FAILED"; exit 1; }
stage "make test"
make test >"$log/make-test.log" 2>&1; stage "  exit $? : $(tail -n 1 "$log/make-test.log")"
cp build/test-logs/gpu-matrix.log "$log/gpu-matrix.log"
cat build/test-logs/sanitize-*.log >"$log/sanitize.log"
stage "compare rtx4090"
FA2_EMULATE=rtx4090 make -s compare >"$log/compare-rtx4090.log" 2>&1; stage "  exit $?"
stage "compare a10g decode"
FA2_EMULATE=a10g make -s compare SHAPES=decode >"$log/compare-a10g-decode.log" 2>&1; stage "  exit $?"
stage "compare a100"
FA2_EMULATE=a100 make -s compare >"$log/compare-a100.log" 2>&1; stage "  exit $?"
cp results/compare-*-as-*.csv "$log/" 2>/dev/null
stage "mutants"
bash tests/mutants.sh >"$log/mutants.txt" 2>&1; stage "  exit $? : $(grep -c '^PASS' "$log/mutants.txt") caught, $(grep -c '^FAIL' "$log/mutants.txt") not"
cp build/variants/mutants-matrix.log "$log/mutants-matrix.log" 2>/dev/null
stage "done"
