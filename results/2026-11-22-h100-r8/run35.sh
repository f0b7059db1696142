#!/usr/bin/env bash
# Run 35 (H100): the Hopper ladder's first check. The GPU matrix and compute-sanitizer on
# steps 08-10, then one timed pass (not rounds) of steps 07-10 at the prefill shapes.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run35}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/08_hopper_wgmma  # a folder the device may still hold from before the rename
make -s -j16 build/tests/gpu_matrix build/step07/fa2 build/step08/fa2 build/step08/libfa2.so build/step09/fa2 \
  build/step09/libfa2.so build/step10/fa2 build/step10/libfa2.so 2>&1 | grep -E "error" ; echo "built at $(( $(date +%s) - t0 )) s"
for s in 08 09 10; do bash tools/sanitize.sh build/step$s/fa2 > "$out/run35-sanitize-step$s.txt" 2>&1 & done
build/tests/gpu_matrix build/step08/libfa2.so build/step09/libfa2.so build/step10/libfa2.so > "$out/run35-gpu-matrix.log" 2>&1
echo "matrix rc $? at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$out/run35-gpu-matrix.log") passed, $(grep -c '^FAIL' "$out/run35-gpu-matrix.log") failed"
grep -E '^FAIL' "$out/run35-gpu-matrix.log" | head -5
wait
echo "sanitize at $(( $(date +%s) - t0 )) s: $(cat "$out"/run35-sanitize-step*.txt | grep -c '^PASS') passed, $(cat "$out"/run35-sanitize-step*.txt | grep -c '^FAIL') failed"
grep -h '^FAIL' "$out"/run35-sanitize-step*.txt | head -5
shapes=("--batch 2 --heads 8 --seqlen 1024 --dim 128" "--batch 4 --heads 16 --seqlen 4096 --dim 128"
        "--batch 4 --heads 16 --seqlen 4096 --dim 128 --causal" "--batch 4 --heads 16 --seqlen 4096 --dim 64"
        "--batch 16 --heads 16 --seqlen 1024 --dim 64" "--batch 1 --heads 16 --seqlen 16384 --dim 128 --dtype bf16 --causal"
        "--batch 4 --heads 32 --kv-heads 8 --seqlen 4096 --dim 128 --dtype bf16 --causal")
for shape in "${shapes[@]}"; do
  for s in 07 08 09 10; do
    # shellcheck disable=SC2086
    build/step$s/fa2 $shape --warmup 3 --iters 30 --check off --csv "$out/run35-time.csv" >/dev/null 2>&1 || echo "step $s failed at $shape"
  done
done
awk -F, 'NR > 1 { printf "%-28s B%s H%s/%s N%s d%s %s c%s %9.4f ms %6.0f TFLOP/s\n", $1, $5, $6, $7, $8, $10, $4, $11, $12, $15 }' "$out/run35-time.csv"
echo "all done at $(( $(date +%s) - t0 )) s"
