#!/usr/bin/env bash
# First device run of step 07: build, GPU matrix, harness runs, timing vs step 06 and torch, sanitize.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/exp}; mkdir -p "$out"
exec > >(tee -a "$out/run.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
make -s -j16 ARCH=90 build/step06/fa2 build/step06/libfa2.so build/step07/fa2 build/step07/libfa2.so build/tests/gpu_matrix harness > "$out/build.log" 2>&1 || { echo MAKE FAILED; tail -20 "$out/build.log"; }
mkdir -p exp/b/nopp
nvcc -O3 -std=c++17 -lineinfo -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -c exp/k07_nopp.cu -o exp/b/nopp/kernel.o &&
nvcc -gencode arch=compute_90a,code=sm_90a -Xcompiler -fopenmp exp/b/nopp/kernel.o build/common/main.o build/common/{cli,data,reference,check,buffers,device,util,validate}.o -lcudart_static -ldl -lrt -lpthread -lm -o exp/b/nopp/fa2 || echo "nopp build failed"
echo "built in $(( $(date +%s) - t0 )) s"
for a in "--seqlen 128 --heads 2 --batch 1 --dim 64" "--seqlen 128 --heads 2 --batch 1 --dim 128" "--seqlen 1000 --dim 128 --causal" "--seqlen-q 33 --seqlen-k 300 --dim 64 --dtype bf16"; do
  timeout 60 build/step07/fa2 $a --iters 2 --warmup 1; echo "rc $?"
done
timeout 420 build/tests/gpu_matrix build/step07/libfa2.so > "$out/matrix07.log" 2>&1; echo "matrix07 rc $?: $(grep -c '^PASS' "$out/matrix07.log") pass, $(grep -c '^FAIL' "$out/matrix07.log") fail"
grep '^FAIL' "$out/matrix07.log" | head -30
echo "matrix done at $(( $(date +%s) - t0 )) s"
shapes=("--batch 2 --heads 8 --seqlen 1024 --dim 128" "--batch 4 --heads 16 --seqlen 4096 --dim 128"
        "--batch 4 --heads 16 --seqlen 4096 --dim 128 --causal" "--batch 4 --heads 16 --seqlen 4096 --dim 64"
        "--batch 16 --heads 16 --seqlen 1024 --dim 64")
for r in 1 2; do
  for s in "${shapes[@]}"; do
    timeout 60 build/step06/fa2 $s --iters 40 --check off --csv "$out/t.csv" > /dev/null 2>&1 || echo "time fail 06 $s"
    timeout 60 build/step07/fa2 $s --iters 40 --check off --csv "$out/t.csv" > /dev/null 2>&1 || echo "time fail 07 $s"
    timeout 60 exp/b/nopp/fa2 $s --iters 40 --check off --csv "$out/t-nopp.csv" > /dev/null 2>&1 || echo "time fail nopp $s"
  done
done
for s in "${shapes[@]}"; do timeout 120 python3 reference/sdpa.py $s --csv "$out/sdpa.csv" >/dev/null 2>&1 || echo "sdpa fail $s"; done
echo "timing done at $(( $(date +%s) - t0 )) s"
python3 - "$out" <<'PY'
import csv, sys, statistics as st, collections
out = sys.argv[1]
rows = []
for f, tag in (("t.csv", None), ("t-nopp.csv", "07_nopp"), ("sdpa.csv", None)):
    try:
        for r in csv.DictReader(open(f"{out}/{f}")):
            r["step"] = tag or r["step"]; rows.append(r)
    except FileNotFoundError: pass
t = collections.defaultdict(list)
for r in rows:
    key = (r["batch"], r["heads_q"], r["seqlen_q"], r["head_dim"], r["causal"])
    t[key, r["step"]].append(float(r["ms_median"]))
shapes = sorted({k for k, _ in t})
for k in shapes:
    fl = st.median(t.get((k, "torch_sdpa_flash"), [float("nan")])); de = st.median(t.get((k, "torch_sdpa_default"), [float("nan")]))
    line = f"B{k[0]} H{k[1]} N{k[2]} d{k[3]} c{k[4]}: flash {fl:.4f} default {de:.4f}"
    for s in ("06_staged_epilogue", "07_hopper_wgmma", "07_nopp"):
        if (k, s) in t:
            m = st.median(t[k, s]); line += f" | {s[:7]} {m:.4f} ({fl/m:.3f}x fl, {de/m:.3f}x def)"
    print(line)
PY
timeout 400 bash tools/sanitize.sh build/step07/fa2 > "$out/sanitize07.txt" 2>&1; echo "sanitize rc $?"; grep -E '^(PASS|FAIL)' "$out/sanitize07.txt" | cut -c1-150
echo "all done at $(( $(date +%s) - t0 )) s"
cd "$out" && tar czf run.tgz *.log *.csv *.txt 2>/dev/null; ls
