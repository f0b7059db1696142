#!/usr/bin/env bash
# Run 55 (H100): the torch binding's GPU tests (tests/test_torch.py, every GPU step) after
# the non-default-stream case was made to wait for its inputs (run 54 failed it for steps
# 02-12: the side stream read Q, K, V before the default stream had written them).
# usage: bash run55.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run55.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
make -s -j16 all >/dev/null 2>&1
ids=$(ls -d steps/[0-9][0-9]_* | sed 's:steps/\([0-9][0-9]\)_.*:\1:' | grep -v '^00$')
python3 tests/test_torch.py $ids >"$out/run$run-torch-gpu.log" 2>&1
echo "torch-gpu rc $?: $(grep -c '^PASS' "$out/run$run-torch-gpu.log") passed, $(grep -c '^FAIL' "$out/run$run-torch-gpu.log") failed"
grep '^FAIL' "$out/run$run-torch-gpu.log" | head
