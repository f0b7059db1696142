#!/usr/bin/env bash
# Runs 41, 47 (steps 00-11), 54, 58, 65 and 67 (00-12) on the H100: `make test` on the whole tree (every step, the cuBLAS
# baseline, the GPU matrix, compute-sanitizer on every GPU step, the torch binding). Run 47
# came after step 11 took two consumers under a causal mask and tools/sanitize.sh a sixth
# shape. Keeps the runner's output and its per-program logs (one tarball) under $OUT (or
# build/runNN).  usage: bash make-test.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: make-test.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
make test >"$out/run$run-make-test.log" 2>&1
echo "make test rc $? in $(( $(date +%s) - t0 )) s"
grep -E '^(FAIL|SKIP) ' "$out/run$run-make-test.log" | head -20
tail -n 1 "$out/run$run-make-test.log"
tar czf "$out/run$run-test-logs.tgz" -C build test-logs
