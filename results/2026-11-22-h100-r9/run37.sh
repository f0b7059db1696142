#!/usr/bin/env bash
# Run 37 (H100): step 11's first check and the ladder's profiles. The GPU matrix on
# steps 10 and 11 and compute-sanitizer on 11 (in parallel); then one timed pass of
# steps 10 and 11 at the benchmark shapes, alternating, two rounds; then Nsight
# Compute on one launch of each Hopper step at B4 H16 N4096 d128 and d64.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run37}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
make -s -j16 build/tests/gpu_matrix build/step08/fa2 build/step09/fa2 build/step10/fa2 build/step10/libfa2.so \
  build/step11/fa2 build/step11/libfa2.so 2>&1 | grep -E "error"; echo "built at $(( $(date +%s) - t0 )) s"
bash tools/sanitize.sh build/step11/fa2 >"$out/run37-sanitize-step11.txt" 2>&1 &
build/tests/gpu_matrix build/step10/libfa2.so build/step11/libfa2.so >"$out/run37-gpu-matrix.log" 2>&1
echo "matrix rc $? at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$out/run37-gpu-matrix.log") passed, $(grep -c '^FAIL' "$out/run37-gpu-matrix.log") failed"
grep -E '^FAIL' "$out/run37-gpu-matrix.log" | head -8
wait
echo "sanitize at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$out/run37-sanitize-step11.txt") passed, $(grep -c '^FAIL' "$out/run37-sanitize-step11.txt") failed"
grep -A3 '^FAIL' "$out/run37-sanitize-step11.txt" | head -12
# shellcheck source=reference/shapes.sh
. reference/shapes.sh
mapfile -t shapes < <(shapes_of bench)
for round in 1 2; do
  for shape in "${shapes[@]}"; do
    read -r b h hkv nq nk d causal dtype <<<"$shape"
    args=(--batch "$b" --heads "$h" --kv-heads "$hkv" --seqlen-q "$nq" --seqlen-k "$nk" --dim "$d" --dtype "$dtype")
    [ "$causal" = 1 ] && args+=(--causal)
    steps=(10 11); [ "$round" = 2 ] && steps=(11 10)
    for s in "${steps[@]}"; do
      build/step$s/fa2 "${args[@]}" --warmup 3 --iters 30 --check off --csv "$out/run37-time.csv" >/dev/null 2>&1 || echo "step $s failed at $shape"
    done
  done
done
awk -F, 'NR > 1 { printf "%-28s B%s H%s/%s N%s d%s %s c%s %9.4f ms %6.0f TFLOP/s\n", $1, $5, $6, $7, $8, $10, $4, $11, $12, $15 }' "$out/run37-time.csv"
echo "timed at $(( $(date +%s) - t0 )) s"
for d in 128 64; do
  for s in 08 09 10 11; do
    bash tools/profile.sh build/step$s/fa2 --batch 4 --heads 16 --seqlen 4096 --dim $d >"$out/run37-profile-d$d-step$s.txt" 2>&1
    echo "profile step $s d$d rc $?: $(grep -E 'tensor_op_hmma|xu.sum|hit_rate|gpu__time' "$out/run37-profile-d$d-step$s.txt" | awk '{print $NF}' | tr '\n' ' ')"
  done
done
echo "all done at $(( $(date +%s) - t0 )) s"
