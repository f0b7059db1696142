#!/usr/bin/env bash
# The sweep behind step 12's tile and split choice (see the kernel's header and
# docs/12_split_kv.md). Builds the kernel once per candidate -- BLOCK_N keys per tile
# and a fixed split count, or "auto" for choose_splits's -- with `make variant`, checks
# and times each at the decode shapes (reference/shapes.txt, set decode), in rounds
# (tools/ab.sh), and writes one CSV of every run plus a summary of medians.
# usage: bash steps/12_split_kv/sweep.sh OUT.csv [ROUNDS]
#   SWEEP_BLOCK_N="64 128" and SWEEP_SPLITS="auto 1 2 4 8 16 32 64 128" narrow the candidates.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: sweep.sh OUT.csv [ROUNDS]}
rounds=${2:-3}
make -s harness
names=()
for n in ${SWEEP_BLOCK_N:-64 128}; do
  for s in ${SWEEP_SPLITS:-auto 1 2 4 8 16 32 64 128}; do
    defines="-DFA2_SWEEP_BLOCK_N=$n"
    [ "$s" = auto ] || defines="$defines -DFA2_SWEEP_SPLITS=$s"
    make -s variant step=12 NAME="sweep12-n${n}_s$s" DEFINES="$defines" &
    names+=("sweep12-n${n}_s$s=build/variants/sweep12-n${n}_s$s/fa2")
  done
done
wait
bash tools/ab.sh "$out" "$rounds" decode "${names[@]}"
