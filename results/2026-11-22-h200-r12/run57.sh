#!/usr/bin/env bash
# Runs 57 (H200) and 59 (H100, after fa2_workspace_size came to return 0 for params the
# ABI refuses, and one split to pass no workspace pointer): the GPU matrix and
# compute-sanitizer on step 12 (tools/check.sh).
# usage: bash run57.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run57.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
bash tools/check.sh "$out/run$run" 12
