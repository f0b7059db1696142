#!/usr/bin/env bash
# make step=NN profile: Nsight Compute on one launch of a step, with a curated
# metric list (time, tensor pipe, issue slots, eligible warps, occupancy, shared
# memory bank conflicts and wavefronts, global store requests and sectors, DRAM
# throughput and bytes read, the L2 hit rate, the MUFU instruction count, the top
# stall reasons; on Hopper also the wgmma instruction count).
# usage: bash tools/profile.sh BINARY [harness args...]
#   KERNELS=N profiles the first N kernels (a call that launches more than one, as step 14's
#   backward its prep, main and convert kernels, needs KERNELS=N); each gets its own block.
#   KERNEL_REGEX=RE profiles only the kernels whose names match RE (another program's kernel:
#   BINARY may be a script that takes the harness's --iters, --warmup and --check, as
#   reference/sdpa.py does).
#   SKIP=N profiles a warm call rather than the first: the harness's first call and N - 1 of its
#   N --warmup calls go by unprofiled (ncu's --launch-skip of N x KERNELS matching launches: exact
#   when one call is KERNELS matching kernels, as a forward alone, or with KERNEL_REGEX naming one
#   kernel). Nsight Compute still flushes the caches before the profiled kernel.
set -uo pipefail
bin=$1; shift
NCU=${NCU:-$(command -v ncu || true)}
if [ -z "$NCU" ]; then
  echo "error: ncu (Nsight Compute) not found: install it with the CUDA Toolkit, or set NCU=/path/to/ncu"; exit 2
fi
metrics=gpu__time_duration.sum
metrics+=,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__warps_eligible.avg.per_cycle_active,smsp__warps_active.avg.per_cycle_active
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
metrics+=,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
metrics+=,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_op_ldsm.sum
metrics+=,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,lts__t_sector_hit_rate.pct
# the MUFU (XU pipe: exp2, reciprocal) share of all instructions issued
metrics+=,sm__inst_executed_pipe_xu.sum,smsp__inst_executed.sum
# wgmma (steps 09-12): its instruction count exists only on Hopper. Its tensor-pipe cycles are
# counted by the hmma metric above (steps 09-12 run no HMMA; on an H200 that metric read 69%
# for step 11, and the gmma cycles metric read n/a).
if [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')" = 9.0 ]; then
  metrics+=,sm__inst_executed_pipe_tensor_op_gmma.sum
fi
for r in wait short_scoreboard long_scoreboard barrier math_pipe_throttle mio_throttle dispatch_stall not_selected selected; do
  metrics+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
out=$(mktemp)
# --clock-control none: measure the GPU at the clocks it runs at, never pin or change them.
"$NCU" --clock-control none ${KERNEL_REGEX:+--kernel-name "regex:$KERNEL_REGEX"} --launch-skip $((${SKIP:-0} * ${KERNELS:-1})) --launch-count "${KERNELS:-1}" --metrics "$metrics" --csv "$bin" --iters 1 --warmup "${SKIP:-0}" --check off "$@" >"$out" 2>&1
rc=$?
if grep -q "ERR_NVGPUCTRPERM" "$out"; then
  echo "error: ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): run as root or allow profiling for all users"; rm -f "$out"; exit 2
fi
if [ $rc -ne 0 ] || ! grep -q '"Metric Name"' "$out"; then
  echo "error: ncu failed (exit $rc):"; tail -n 5 "$out"; rm -f "$out"; exit 1
fi
grep -vE '^"|^==' "$out" | head -n 3
awk -F'","' 'NR > 1 && /Metric Name/ {next}
  /^"[0-9]/ { if ($1 != id) { id = $1; printf "== kernel %s\n", $5 }
              gsub(/"/, "", $15); printf "  %-78s %-14s %s\n", $13, $14, $15 }' "$out"
rm -f "$out"
