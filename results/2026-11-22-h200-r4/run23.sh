#!/usr/bin/env bash
# Run 23: profiles of steps 06 and 07 (tools/device_run.sh hopper phase), step 07's info,
# the wgmma ceiling, and an A/B of three consumer warpgroups at d64 (exp/k07_c3.cu).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/exp}; mkdir -p "$out"
exec > >(tee -a "$out/run.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
make -s -j16 ARCH=90 build/step06/fa2 build/step07/fa2 build/step07/libfa2.so build/tests/gpu_matrix build/reference/wgmma_ceiling build/reference/mma_ceiling harness > "$out/build.log" 2>&1 || { echo MAKE FAILED; tail -20 "$out/build.log"; }
mkdir -p exp/b/c3
nvcc -O3 -std=c++17 -lineinfo -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -c exp/k07_c3.cu -o exp/b/c3/kernel.o &&
nvcc -gencode arch=compute_90a,code=sm_90a -Xcompiler -fopenmp exp/b/c3/kernel.o build/common/main.o build/common/{cli,data,reference,check,buffers,device,util,validate}.o -lcudart_static -ldl -lrt -lpthread -lm -o exp/b/c3/fa2 &&
nvcc -gencode arch=compute_90a,code=sm_90a -shared exp/b/c3/kernel.o build/common/validate.o -lcudart_static -ldl -lrt -lpthread -lm -o exp/b/c3/libfa2.so || echo "c3 build failed"
echo "built in $(( $(date +%s) - t0 )) s"
build/reference/wgmma_ceiling --csv "$out/ceiling.csv"; build/reference/mma_ceiling --csv "$out/ceiling.csv"
timeout 300 build/tests/gpu_matrix exp/b/c3/libfa2.so > "$out/matrix-c3.log" 2>&1; echo "matrix c3 rc $?: $(grep -c '^PASS' "$out/matrix-c3.log") pass, $(grep -c '^FAIL' "$out/matrix-c3.log") fail"
grep '^FAIL' "$out/matrix-c3.log" | head
shapes=("--batch 4 --heads 16 --seqlen 4096 --dim 64" "--batch 16 --heads 16 --seqlen 1024 --dim 64"
        "--batch 4 --heads 16 --seqlen 4096 --dim 64 --causal" "--batch 2 --heads 8 --seqlen 1024 --dim 64"
        "--batch 4 --heads 16 --seqlen 4096 --dim 128")
for r in 1 2 3; do
  for s in "${shapes[@]}"; do
    build/step07/fa2 $s --iters 40 --check off --csv "$out/ab-base.csv" > /dev/null 2>&1 || echo "time fail base $s"
    exp/b/c3/fa2 $s --iters 40 --check off --csv "$out/ab-c3.csv" > /dev/null 2>&1 || echo "time fail c3 $s"
  done
done
for s in "${shapes[@]}"; do python3 reference/sdpa.py $s --csv "$out/ab-sdpa.csv" >/dev/null 2>&1 || echo "sdpa fail $s"; done
python3 - "$out" <<'PY'
import csv, sys, statistics as st, collections
out = sys.argv[1]; t = collections.defaultdict(list)
for f in ("ab-base.csv", "ab-c3.csv", "ab-sdpa.csv"):
    for r in csv.DictReader(open(f"{out}/{f}")):
        s = {"ab-base.csv": "base", "ab-c3.csv": "c3"}.get(f, r["step"])
        t[(r["batch"], r["heads_q"], r["seqlen_q"], r["head_dim"], r["causal"]), s].append(float(r["ms_median"]))
for k in sorted({k for k, _ in t}):
    b, c = st.median(t[k, "base"]), st.median(t[k, "c3"]); fl = t.get((k, "torch_sdpa_flash"), [0])[0]; de = t.get((k, "torch_sdpa_default"), [0])[0]; cu = t.get((k, "torch_sdpa_cudnn"), [0])[0]
    print(f"B{k[0]} H{k[1]} N{k[2]} d{k[3]} c{k[4]}: base {b:.4f} {t[k,'base']} c3 {c:.4f} {t[k,'c3']} c3/base {b/c:.3f}x | flash {fl:.4f} cudnn {cu:.4f} default {de:.4f}")
PY
echo "A/B done at $(( $(date +%s) - t0 )) s"
bash tools/device_run.sh "$out/hopper" hopper 2>&1 | grep -v '^device:'
echo "all done at $(( $(date +%s) - t0 )) s"
cd "$out" && tar czf run.tgz run.log *.csv matrix-c3.log hopper build.log 2>/dev/null; ls
