#!/usr/bin/env bash
# Run 47 (H100): `make test` on the whole tree after step 11 took two consumers under a
# causal mask and tools/sanitize.sh a sixth shape (every step, 00-11, the cuBLAS baseline,
# the GPU matrix, compute-sanitizer on every GPU step, the torch binding). Keeps the
# runner's output and its per-program logs (one tarball) under $OUT (or build/run47).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run47}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
make test >"$out/run47-make-test.log" 2>&1
echo "make test rc $? in $(( $(date +%s) - t0 )) s"
grep -E '^(FAIL|SKIP) ' "$out/run47-make-test.log" | head -20
tail -n 1 "$out/run47-make-test.log"
tar czf "$out/run47-test-logs.tgz" -C build test-logs
