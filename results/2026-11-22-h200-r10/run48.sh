#!/usr/bin/env bash
# Run 48 (H200): the GPU matrix and compute-sanitizer (six shapes, four tools) on step 11
# as it is on main, in parallel. Writes under $OUT (or build/run48).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run48}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
make -s -j16 build/tests/gpu_matrix build/step11/fa2 build/step11/libfa2.so >/dev/null
bash tools/sanitize.sh build/step11/fa2 >"$out/run48-sanitize-step11.txt" 2>&1 &
build/tests/gpu_matrix build/step11/libfa2.so >"$out/run48-gpu-matrix.log" 2>&1
echo "matrix rc $? at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$out/run48-gpu-matrix.log") passed, $(grep -c '^FAIL' "$out/run48-gpu-matrix.log") failed"
wait
echo "sanitize at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$out/run48-sanitize-step11.txt") passed, $(grep -c '^FAIL' "$out/run48-sanitize-step11.txt") failed"
