#!/usr/bin/env bash
# Run 77: step 09 rebuilt on step 08 (its diff against 08 the tensor-core instruction
# alone), as a variant of the step before it replaces it: the GPU matrix on it, and an
# A/B in rounds at the bench shapes against step 08 and today's step 09.
# usage: bash results/2026-11-24-h100-r17/run77.sh LOGDIR SRC   (SRC: the rebuilt kernel, under build/mutants/)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: run77.sh LOGDIR SRC}; src=${2:?usage: run77.sh LOGDIR SRC}
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
make -s -j16 build/step08/fa2 build/step09/fa2 build/tests/gpu_matrix >"$log/build.log" 2>&1 || { stage "build FAILED"; exit 1; }
make -s variant step=09 NAME=w09 SRC="$src" >>"$log/build.log" 2>&1 || { stage "variant build FAILED"; exit 1; }
build/tests/gpu_matrix build/variants/w09/libfa2.so >"$log/matrix-w09.log" 2>&1
stage "matrix: exit $? $(grep -c '^PASS' "$log/matrix-w09.log") passed $(grep -c '^FAIL' "$log/matrix-w09.log") failed"
bash tools/ab.sh "$log/ab-w09.csv" 3 bench s08=build/step08/fa2 s09=build/step09/fa2 w09=build/variants/w09/fa2 >"$log/ab-w09.log" 2>&1
stage "A/B: exit $?"
stage "done"
