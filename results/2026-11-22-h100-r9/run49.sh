#!/usr/bin/env bash
# Run 49 (H100): the streaming-read bandwidth probe, three times in a row (each prints
# the median of nine launches). Writes the CSV under $OUT (or build/runNN). It has not
# been run on an H200 yet.
# usage: bash run49.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run49.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
make -s build/reference/bandwidth_ceiling >/dev/null
for i in 1 2 3; do build/reference/bandwidth_ceiling --csv "$out/run$run-bandwidth.csv"; done
