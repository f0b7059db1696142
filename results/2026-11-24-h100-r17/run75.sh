#!/usr/bin/env bash
# Run 75: why step 08 is slower than step 07 at B2 H8 N1024 d128 (one block per SM) and
# faster at the large shapes (run 74). Two variants of step 08 (variants08.py): the tensor
# maps prefetched; the boxes of a tile issued by one lane in each of several warps instead
# of one thread. A/B in rounds against steps 07 and 08, and Nsight Compute at that shape.
# usage: bash results/2026-11-24-h100-r17/run75.sh LOGDIR   (on the GPU machine, after run 74's build)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: run75.sh LOGDIR}
mkdir -p "$log" build/mutants
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "variants"
python3 results/2026-11-24-h100-r17/variants08.py build/mutants/v08 || exit 1
mv build/mutants/v08/prefetch.cu build/mutants/v08_prefetch.cu; mv build/mutants/v08/spread.cu build/mutants/v08_spread.cu
for v in prefetch spread; do
  make -s variant step=08 NAME=v08-$v SRC=build/mutants/v08_$v.cu >>"$log/build.log" 2>&1 || { stage "build $v FAILED"; exit 1; }
done
build/tests/gpu_matrix build/variants/v08-spread/libfa2.so >"$log/matrix-spread.log" 2>&1; stage "  matrix spread: exit $? $(grep -c '^PASS' "$log/matrix-spread.log") passed $(grep -c '^FAIL' "$log/matrix-spread.log") failed"
stage "A/B"
bash tools/ab.sh "$log/ab-variants.csv" 5 "--batch 2 --heads 8 --seqlen 1024 --dim 128;--batch 4 --heads 16 --seqlen 4096 --dim 128;--batch 16 --heads 16 --seqlen 1024 --dim 64" \
  s07=build/step07/fa2 s08=build/step08/fa2 prefetch=build/variants/v08-prefetch/fa2 spread=build/variants/v08-spread/fa2 >"$log/ab-variants.log" 2>&1
stage "  exit $?"
stage "ncu at B2 H8 N1024 d128"
for b in build/step07/fa2 build/step08/fa2 build/variants/v08-spread/fa2; do
  bash tools/profile.sh $b --batch 2 --heads 8 --seqlen 1024 --dim 128
done >"$log/ncu-b2.txt" 2>&1
stage "done"
