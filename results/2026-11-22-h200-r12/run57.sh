#!/usr/bin/env bash
# Run 57 (H200): the GPU matrix and compute-sanitizer on step 12 (tools/check.sh).
# usage: bash run57.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run57.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
bash tools/check.sh "$out/run$run" 12
