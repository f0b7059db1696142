#!/usr/bin/env bash
# A/B of step-06 variants: build, GPU matrix per variant, interleaved timing, torch SDPA, ncu.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/exp}; mkdir -p "$out"
log="$out/ab.log"; exec > >(tee -a "$log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
make -s -j16 ARCH=90 build/step06/fa2 build/step06/libfa2.so build/tests/gpu_matrix harness >/dev/null 2>&1 || echo MAKE FAILED
build_one() {
  set -- $1
  local d=exp/b/$1; mkdir -p $d
  nvcc -O3 -std=c++17 -lineinfo -gencode arch=compute_90,code=sm_90 -Xcompiler -fPIC -DEXP_LW=$2 -DEXP_LM=$3 -DEXP_LN=$4 -DEXP_PP=$5 $7 \
     -Xptxas -v -c exp/${6}.cu -o $d/kernel.o 2>$d/ptxas.txt || echo "BUILD FAIL $1"
  nvcc -gencode arch=compute_90,code=sm_90 -Xcompiler -fopenmp $d/kernel.o build/common/main.o build/common/{cli,data,reference,check,buffers,device,util,validate}.o -lcudart_static -ldl -lrt -lpthread -lm -o $d/fa2
  nvcc -gencode arch=compute_90,code=sm_90 -shared $d/kernel.o build/common/validate.o -lcudart_static -ldl -lrt -lpthread -lm -o $d/libfa2.so
}
export -f build_one
cat exp/variants.txt | xargs -P 16 -I{} bash -c 'build_one "{}"'
echo "built in $(( $(date +%s) - t0 )) s"
names=(base $(awk '{print $1}' exp/variants.txt))
for n in "${names[@]:1}"; do echo "== $n: $(grep -o 'Used [0-9]* registers\|[0-9]* bytes spill stores' exp/b/$n/ptxas.txt | tr '\n' ' ')"; done
mkdir -p exp/b/base; cp build/step06/fa2 build/step06/libfa2.so exp/b/base/
for n in "${names[@]:1}"; do
  [ "$n" = nosoft ] && continue
  build/tests/gpu_matrix exp/b/$n/libfa2.so > "$out/matrix-$n.log" 2>&1; echo "matrix $n: rc $? $(tail -n1 "$out/matrix-$n.log")"
done
echo "matrix done at $(( $(date +%s) - t0 )) s"
shapes=("--batch 2 --heads 8 --seqlen 1024 --dim 128" "--batch 4 --heads 16 --seqlen 4096 --dim 128"
        "--batch 4 --heads 16 --seqlen 4096 --dim 128 --causal" "--batch 4 --heads 16 --seqlen 4096 --dim 64"
        "--batch 16 --heads 16 --seqlen 1024 --dim 64")
for r in 1 2 3; do
  for s in "${shapes[@]}"; do
    for n in "${names[@]}"; do
      exp/b/$n/fa2 $s --iters 40 --check off --csv "$out/t-$n.csv" > /dev/null 2>&1 || echo "time fail $n $s"
    done
  done
done
for n in "${names[@]}"; do awk -v v=$n -v OFS=, 'NR==1{print $0,"variant"; next} !/^step,/{print $0,v}' "$out/t-$n.csv"; done | awk 'NR==1||!/^step,/' > "$out/ab.csv"
echo "timing done at $(( $(date +%s) - t0 )) s"
for s in "${shapes[@]}"; do python3 reference/sdpa.py $s --csv "$out/sdpa.csv" >/dev/null 2>&1 || echo "sdpa fail $s"; done
echo "sdpa done at $(( $(date +%s) - t0 )) s"
python3 exp/summ.py "$out/ab.csv" "$out/sdpa.csv"
m=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
for n in ${NCU_VARIANTS:-base}; do
  echo "== ncu $n"; ncu --clock-control none --launch-count 1 --metrics $m --csv exp/b/$n/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 128 --iters 1 --warmup 0 --check off 2>/dev/null | awk -F'","' '/^"[0-9]/{gsub(/"/,"",$15); printf "  %-70s %s\n",$13,$15}'
done
echo "all done at $(( $(date +%s) - t0 )) s"
cd "$out" && tar czf ab.tgz *.log *.csv && rm -f t-*.csv matrix-*.log && ls
