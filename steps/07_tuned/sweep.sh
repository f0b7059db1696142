#!/usr/bin/env bash
# The tile-configuration sweep behind step 07's choice (see the kernel's header and
# docs/07_tuned.md). Builds the kernel once per candidate (WARPS M_TILES BLOCK_N) with
# `make variant` (the Makefile's flags), checks and times each at the benchmark shapes
# (reference/shapes.txt, set bench), and writes one CSV (the harness's columns + config).
# usage: bash steps/07_tuned/sweep.sh OUT.csv [ITERS]
#   SWEEP_CANDIDATES="4 2 64;8 1 128" narrows the candidates; SWEEP_SET=seed the shapes.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: sweep.sh OUT.csv [ITERS]}
iters=${2:-30}
make -s harness
candidates=(
  "4 1 64" "4 1 128" "8 1 64" "8 1 128"
  "4 2 32" "4 2 64" "8 2 32" "4 2 128"
)
if [ -n "${SWEEP_CANDIDATES:-}" ]; then IFS=';' read -r -a candidates <<<"$SWEEP_CANDIDATES"; fi
for c in "${candidates[@]}"; do
  set -- $c
  make -s variant step=07 NAME="sweep-w$1_m$2_n$3" \
    DEFINES="-DFA2_SWEEP_WARPS=$1 -DFA2_SWEEP_M_TILES=$2 -DFA2_SWEEP_BLOCK_N=$3" &
done
wait

# shellcheck source=reference/shapes.sh
. reference/shapes.sh
mapfile -t shapes < <(shapes_of "${SWEEP_SET:-bench}")
rm -f "$out.tmp"
for c in "${candidates[@]}"; do
  set -- $c
  dir=build/variants/sweep-w$1_m$2_n$3
  rm -f "$dir/run.csv"
  echo "== WARPS=$1 M_TILES=$2 BLOCK_N=$3: $(grep -o 'Used [0-9]* registers' "$dir/ptxas.txt" | tr '\n' ' ')$(grep -o '[0-9]* bytes spill stores' "$dir/ptxas.txt" | sort -u | tr '\n' ' ')"
  for shape in "${shapes[@]}"; do
    read -r b h hkv nq nk d causal dtype options <<<"$shape"
    [ -n "$options" ] && continue  # a KV cache's shape (shapes.txt's options): step 07 refuses it
    args=(--batch "$b" --heads "$h" --kv-heads "$hkv" --seqlen-q "$nq" --seqlen-k "$nk" --dim "$d" --dtype "$dtype")
    [ "$causal" = 1 ] && args+=(--causal)
    "$dir/fa2" "${args[@]}" --iters "$iters" --csv "$dir/run.csv" || true
  done
  awk -v cfg="w$1_m$2_n$3" 'NR==1{print $0",config"; next}{print $0","cfg}' "$dir/run.csv" >>"$out.tmp"
done
awk 'NR==1 || !/^step,/' "$out.tmp" >"$out" && rm -f "$out.tmp"
echo "sweep CSV: $out"
