#!/usr/bin/env bash
# The tile-configuration sweep behind step 06's choice (see the kernel's header
# and docs/06_staged_epilogue.md). Rebuilds kernel.cu once per candidate
# (WARPS M_TILES BLOCK_N), checks and times each at the benchmark shapes,
# and writes one CSV (harness columns + config) to the file given.
# usage: bash steps/06_staged_epilogue/sweep.sh OUT.csv [ITERS]
#   SWEEP_CANDIDATES="4 2 64;8 1 128" and SWEEP_SHAPES="--seqlen 1024 --dim 64;..." narrow it.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: sweep.sh OUT.csv [ITERS]}
iters=${2:-30}
make -s harness  # build/common/*.o: main.o and every harness object
NVCC=${NVCC:-nvcc}
ARCH=${ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')}
candidates=(
  "4 1 64" "4 1 128" "8 1 64" "8 1 128"
  "4 2 32" "4 2 64" "8 2 32" "4 2 128"
)
if [ -n "${SWEEP_CANDIDATES:-}" ]; then IFS=';' read -r -a candidates <<<"$SWEEP_CANDIDATES"; fi
build_one() {
  set -- $1
  local dir=build/sweep/w$1_m$2_n$3
  mkdir -p "$dir"
  $NVCC -O3 -std=c++17 -gencode arch=compute_$ARCH,code=sm_$ARCH -Xcompiler -fPIC \
    -DFA2_SWEEP_WARPS=$1 -DFA2_SWEEP_M_TILES=$2 -DFA2_SWEEP_BLOCK_N=$3 \
    -Xptxas -v -c steps/06_staged_epilogue/kernel.cu -o "$dir/kernel.o" 2>"$dir/ptxas.txt"
  $NVCC -gencode arch=compute_$ARCH,code=sm_$ARCH -Xcompiler -fopenmp "$dir/kernel.o" build/common/*.o \
    -lcudart_static -ldl -lrt -lpthread -lm -o "$dir/fa2"
}
export -f build_one; export NVCC ARCH
printf '%s\n' "${candidates[@]}" | xargs -P "$(nproc)" -I{} bash -c 'build_one "{}"'

shapes=("--batch 2 --heads 8 --seqlen 1024 --dim 128" "--batch 4 --heads 16 --seqlen 4096 --dim 128"
        "--batch 4 --heads 16 --seqlen 4096 --dim 128 --causal" "--batch 4 --heads 16 --seqlen 4096 --dim 64"
        "--batch 16 --heads 16 --seqlen 1024 --dim 64")
if [ -n "${SWEEP_SHAPES:-}" ]; then IFS=';' read -r -a shapes <<<"$SWEEP_SHAPES"; fi
rm -f "$out.tmp"
for c in "${candidates[@]}"; do
  set -- $c
  dir=build/sweep/w$1_m$2_n$3
  rm -f "$dir/run.csv"
  echo "== WARPS=$1 M_TILES=$2 BLOCK_N=$3: $(grep -o 'Used [0-9]* registers' "$dir/ptxas.txt" | tr '\n' ' ')$(grep -o '[0-9]* bytes spill stores' "$dir/ptxas.txt" | sort -u | tr '\n' ' ')"
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    "$dir/fa2" $s --iters "$iters" --csv "$dir/run.csv" || true
  done
  awk -v cfg="w$1_m$2_n$3" 'NR==1{print $0",config"; next}{print $0","cfg}' "$dir/run.csv" >>"$out.tmp"
done
awk 'NR==1 || !/^step,/' "$out.tmp" >"$out" && rm -f "$out.tmp"
echo "sweep CSV: $out"
