#!/usr/bin/env bash
# Run 106 (prepared, not run): why step 12 with its queue stays 1.2-1.3% behind step 11 at bf16
# B1 H16 N16384 d128 causal (runs 103, 104), where the balance model has the two level, and what
# the queue's atomic item word costs. Three questions, each a variant of main's step 12
# (`make variant`, from the kernel itself by tools/variant_src.py):
#   plain12   the item word written and read by a plain store and load (FlashAttention-3's
#             form, which racecheck reports): is the atomic word the 0.5-1% the runs two
#             machines apart suggest at the d64 shapes?
#   pairs1    ORDER_PAIRS 1: the causal list is step 11's own order (each head's q tiles longest
#             first, head after head): if step 12 then matches step 11 at N16384, the four
#             heads at a time are what costs there (their K and V in L2: 32 of its 50 MB)
#   pairs8    ORDER_PAIRS 8: the other way
# tools/ab.sh, 5 rounds, at five shapes (N16384 causal, the seed shape, B4 H16 N4096 d64,
# B16 H16 N1024 d64, B4 H16 N4096 causal): main's steps 11 and 12 and the three, with the SM
# clock, power and clock-event reasons sampled every 100 ms beside it (read only, never set: do
# the slow launches at N16384 come with a lower clock?); then Nsight Compute on a warm launch of
# steps 11 and 12 at N16384 (time, tensor pipe, L2 hit rate, DRAM bytes). About eight minutes.
# On the GPU machine, in a process session of its own:
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r29/run106.sh build/run106 >build/run106.out 2>&1 </dev/null &
# It ran as half of run 107 (results/2026-11-28-h200-r30/run107.sh), its profiles on the other GPU.
# usage: [RUN_GPU=N] [PROFILE=0] bash results/2026-11-28-h200-r29/run106.sh LOGDIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
. tools/tree_copy.sh
run_start "${1:?usage: run106.sh LOGDIR}"
ps -o pgid= $$ | tr -d ' ' >"$log/pgid"
cd "$(copy_tree "$PWD/build/tree106")" && mkdir -p build/ab || exit 2
src=steps/12_persistent/kernel.cu
python3 tools/variant_src.py $src build/ab/step12-plain.cu \
  "if (lane == 0) atomicExch(item_smem, item);" "if (lane == 0) *item_smem = item;" \
  "if (lane == 0) item = atomicAdd(item_smem, 0u);" "if (lane == 0) item = *item_smem;" &&
  python3 tools/variant_src.py $src build/ab/step12-pairs1.cu "constexpr int ORDER_PAIRS = 4;" "constexpr int ORDER_PAIRS = 1;" &&
  python3 tools/variant_src.py $src build/ab/step12-pairs8.cu "constexpr int ORDER_PAIRS = 4;" "constexpr int ORDER_PAIRS = 8;" || exit 1
make -s -j16 build/step11/fa2 build/step12/fa2 >"$log/build.log" 2>&1 || { stage "build failed"; exit 1; }
for v in plain pairs1 pairs8; do make -s step=12 variant NAME=$v SRC=build/ab/step12-$v.cu >"$log/build-$v.log" 2>&1 & done
wait
for v in plain pairs1 pairs8; do [ -x build/variants/$v/fa2 ] || { stage "variant $v did not build"; exit 1; }; done
stage "built"
reasons=clocks_event_reasons.active
nvidia-smi --query-gpu=$reasons --format=csv,noheader >/dev/null 2>&1 || reasons=clocks_throttle_reasons.active
nvidia-smi -i "$gpu" --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons --format=csv -lms 100 \
  >"$log/clocks-ab106.csv" 2>&1 &
sampler=$!
shapes="--batch 1 --heads 16 --seqlen 16384 --dim 128 --causal --dtype bf16;--batch 2 --heads 8 --seqlen 1024 --dim 128"
shapes+=";--batch 4 --heads 16 --seqlen 4096 --dim 64;--batch 16 --heads 16 --seqlen 1024 --dim 64"
shapes+=";--batch 4 --heads 16 --seqlen 4096 --dim 128 --causal"
bash tools/ab.sh "$log/ab106.csv" 5 "$shapes" main11=build/step11/fa2 main12=build/step12/fa2 \
  plain12=build/variants/plain/fa2 pairs1=build/variants/pairs1/fa2 pairs8=build/variants/pairs8/fa2 >"$log/ab106.log" 2>&1
stage "ab: exit $?"
kill $sampler 2>/dev/null
grep -A12 '^medians' "$log/ab106.log" | tee -a "$log/progress.txt"
gzip -f "$log/clocks-ab106.csv"
# PROFILE=0 leaves the profiles to another run (run 107 takes them on its other GPU)
for id in $([ "${PROFILE:-1}" = 0 ] || echo 11 12); do
  SKIP=3 KERNEL_REGEX=fa2_ bash tools/profile.sh build/step$id/fa2 --batch 1 --heads 16 --seqlen 16384 --dim 128 --causal --dtype bf16 \
    >"$log/profile$id-n16384.log" 2>&1
  stage "profile step $id at N16384 causal (warm): exit $?: $(grep -m 1 'gpu__time_duration.sum' "$log/profile$id-n16384.log" | tr -s ' ');$(grep -m 1 'lts__t_sector_hit_rate' "$log/profile$id-n16384.log" | tr -s ' ')"
done
stage "done"
