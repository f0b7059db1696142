#!/usr/bin/env bash
# The sweep behind step 13's tile, stage and split choice (see the kernel's header and
# docs/13_split_kv.md). Builds the kernel once per candidate -- BLOCK_N keys per tile,
# STAGES K/V buffers or "auto" (the kernel's 128 KB budget), and a fixed split count or
# "auto" (choose_splits's) -- with
# `make variant`, checks and times each at the decode shapes (reference/shapes.txt, set
# decode) in rounds (tools/ab.sh: round 0 checked against fp64), and writes one CSV of
# every run; it prints each candidate's median per shape.
# usage: bash steps/13_split_kv/sweep.sh OUT.csv [ROUNDS]
#   SWEEP_BLOCK_N="64 128", SWEEP_STAGES="auto 2 3 4 6", SWEEP_SPLITS="auto 8 16 32 64 128"
#   narrow or widen the candidates (every combination is built; default: the kernel's
#   own choices of stages and splits at 64 and 128 keys per tile).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: sweep.sh OUT.csv [ROUNDS]}
rounds=${2:-3}
make -s harness
names=()
for n in ${SWEEP_BLOCK_N:-64 128}; do
  for st in ${SWEEP_STAGES:-auto}; do
    for s in ${SWEEP_SPLITS:-auto}; do
      name=sweep12-n${n}_st${st}_s$s
      defines="-DFA2_SWEEP_BLOCK_N=$n"
      [ "$st" = auto ] || defines="$defines -DFA2_SWEEP_STAGES=$st"
      [ "$s" = auto ] || defines="$defines -DFA2_SWEEP_SPLITS=$s"
      make -s variant step=13 NAME="$name" DEFINES="$defines" &
      names+=("$name=build/variants/$name/fa2")
    done
  done
done
wait
bash tools/ab.sh "$out" "$rounds" decode "${names[@]}"
