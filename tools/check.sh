#!/usr/bin/env bash
# tools/check.sh - the GPU matrix on some steps' libraries and tools/sanitize.sh on each
# of their binaries, in parallel: the correctness part of `make test` for the steps a
# device run changed, with its logs kept. Builds what it needs.
# usage: bash tools/check.sh PREFIX STEP [STEP ...]
#   writes PREFIX-gpu-matrix.log and PREFIX-sanitize-stepNN.txt; prints the counts.
set -uo pipefail
cd "$(dirname "$0")/.."
prefix=${1:?usage: tools/check.sh PREFIX STEP [STEP ...]}
shift
[ $# -gt 0 ] || { echo "error: tools/check.sh: no STEP given (allowed: $(make -s --no-print-directory hopper-steps) and the others under steps/)" >&2; exit 2; }
t0=$(date +%s)
targets=(build/tests/gpu_matrix)
for s in "$@"; do targets+=("build/step$s/fa2" "build/step$s/libfa2.so"); done
make -s -j"$(nproc)" "${targets[@]}" >/dev/null || { echo "FAIL build ${targets[*]}"; exit 1; }
libs=()
for s in "$@"; do
  bash tools/sanitize.sh "build/step$s/fa2" >"$prefix-sanitize-step$s.txt" 2>&1 &
  libs+=("build/step$s/libfa2.so")
done
build/tests/gpu_matrix "${libs[@]}" >"$prefix-gpu-matrix.log" 2>&1
echo "matrix rc $? at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$prefix-gpu-matrix.log") passed, $(grep -c '^FAIL' "$prefix-gpu-matrix.log") failed"
grep -E '^FAIL' "$prefix-gpu-matrix.log" | head -8
wait
for s in "$@"; do
  echo "sanitize step $s at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$prefix-sanitize-step$s.txt") passed, $(grep -c '^FAIL' "$prefix-sanitize-step$s.txt") failed"
  grep -A3 '^FAIL' "$prefix-sanitize-step$s.txt" | head -12
done
