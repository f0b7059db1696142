#!/usr/bin/env bash
# Run 48 (H200): the GPU matrix and compute-sanitizer (six shapes, four tools) on step 11
# as it is on main, in parallel. Writes under $OUT (or build/run48).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run48}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
bash tools/check.sh "$out/run48" 11
