#!/usr/bin/env bash
# Run 63: step 11's levers (issue 17) as variants (variants.sh says what each one is):
# the GPU matrix on every variant that claims to be correct (each in its own process,
# side by side), the matrix on steps 11 and 12 themselves (the matrix's one-workspace-
# per-case change, first run on a GPU), then three rounds of every variant against
# step 11 at the benchmark shapes (tools/ab.sh).
# usage: bash run63.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run63.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
t0=$(date +%s)
make -s -j16 build/step11/fa2 build/step11/libfa2.so build/step12/libfa2.so build/tests/gpu_matrix harness >"$out/run$run-build.log" 2>&1 || { cat "$out/run$run-build.log"; exit 1; }
bash results/2026-11-22-h100-r13/variants.sh | tee -a "$out/run$run-build.log"
echo "built at $(( $(date +%s) - t0 )) s"
correct=()
for v in skip poly4 poly2 odirect n176 s2; do [ -f build/variants/$v/libfa2.so ] && correct+=("$v"); done
for v in "${correct[@]}"; do build/tests/gpu_matrix build/variants/$v/libfa2.so >"$out/run$run-matrix-$v.log" 2>&1 & done
build/tests/gpu_matrix build/step11/libfa2.so build/step12/libfa2.so >"$out/run$run-matrix-steps.log" 2>&1 &
wait
for v in "${correct[@]}" steps; do
  echo "matrix $v: $(grep -c '^PASS' "$out/run$run-matrix-$v.log") passed, $(grep -c '^FAIL' "$out/run$run-matrix-$v.log") failed; $(tail -n 1 "$out/run$run-matrix-$v.log")"
  grep '^FAIL' "$out/run$run-matrix-$v.log" | head -4
done
echo "matrices at $(( $(date +%s) - t0 )) s"
contenders=(s11=build/step11/fa2)
for v in skip poly4 poly2 kvbound odirect n176 s2 two; do [ -x build/variants/$v/fa2 ] && contenders+=("$v=build/variants/$v/fa2"); done
bash tools/ab.sh "$out/run$run-ab.csv" 3 bench "${contenders[@]}" 2>&1 | grep -v '^FAIL kvbound'
echo "done at $(( $(date +%s) - t0 )) s"
