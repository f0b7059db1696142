#!/usr/bin/env bash
# Run 66: variants66.sh's two variants: the GPU matrix on both side by side, compute-
# sanitizer on skip_s, three rounds against step 11 at the benchmark shapes and at two
# shapes whose last q tile leaves consumers without rows (N1040 at d128: 16 rows in the
# last 128-row tile; N1000 at d64: 40 rows in the last 192-row tile) (tools/ab.sh).
# usage: bash run66.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run66.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
t0=$(date +%s)
make -s -j16 build/step11/fa2 build/tests/gpu_matrix harness >"$out/run$run-build.log" 2>&1 || { cat "$out/run$run-build.log"; exit 1; }
bash results/2026-11-22-h100-r13/variants66.sh | tee -a "$out/run$run-build.log"
for v in cshfl skip_s; do build/tests/gpu_matrix build/variants/$v/libfa2.so >"$out/run$run-matrix-$v.log" 2>&1 & done
bash tools/sanitize.sh build/variants/skip_s/fa2 >"$out/run$run-sanitize-skip_s.txt" 2>&1 &
wait
for v in cshfl skip_s; do
  echo "matrix $v: $(grep -c '^PASS' "$out/run$run-matrix-$v.log") passed, $(grep -c '^FAIL' "$out/run$run-matrix-$v.log") failed"
  grep '^FAIL' "$out/run$run-matrix-$v.log" | head -4
done
echo "sanitize skip_s: $(grep -c '^PASS' "$out/run$run-sanitize-skip_s.txt") passed, $(grep -c '^FAIL' "$out/run$run-sanitize-skip_s.txt") failed"
echo "checked at $(( $(date +%s) - t0 )) s"
bash tools/ab.sh "$out/run$run-ab.csv" 3 bench s11=build/step11/fa2 cshfl=build/variants/cshfl/fa2 skip_s=build/variants/skip_s/fa2
bash tools/ab.sh "$out/run$run-ab-odd.csv" 3 "--batch 16 --heads 16 --seqlen 1040 --dim 128;--batch 16 --heads 16 --seqlen 1000 --dim 64" \
  s11=build/step11/fa2 cshfl=build/variants/cshfl/fa2 skip_s=build/variants/skip_s/fa2
echo "done at $(( $(date +%s) - t0 )) s"
