#!/usr/bin/env bash
# Turns the outputs of tools/profile.sh (one file per step) into one markdown table, a
# column per step (results/06_staged_epilogue/ncu-table-big.md was written by it).
# usage: bash tools/ncu_table.sh profile-step02.txt profile-step03.txt ...
set -euo pipefail
cols=("gpu__time_duration.sum|time (us)|1000"
      "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active|tensor pipe %|1"
      "smsp__issue_active.avg.pct_of_peak_sustained_active|issue slots busy %|1"
      "smsp__warps_eligible.avg.per_cycle_active|eligible warps / scheduler|1"
      "sm__warps_active.avg.pct_of_peak_sustained_active|occupancy %|1"
      "launch__registers_per_thread|registers|1"
      "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum|smem load bank conflicts|1"
      "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum|smem load wavefronts|1"
      "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum|smem store bank conflicts|1"
      "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio|stall: wait|1"
      "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio|stall: long scoreboard|1"
      "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio|stall: short scoreboard|1"
      "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio|stall: barrier|1")
printf "| step |"; for c in "${cols[@]}"; do IFS='|' read -r _ title _ <<<"$c"; printf " %s |" "$title"; done; echo
printf "|---|"; for _ in "${cols[@]}"; do printf "%s" "---|"; done; echo
for f in "$@"; do
  step=$(grep -m1 -oE '^[0-9][0-9]_[a-z_]+' "$f" || basename "$f" .txt)
  printf "| %s |" "$step"
  for c in "${cols[@]}"; do
    IFS='|' read -r metric _ div <<<"$c"
    v=$(awk -v m="$metric" '$1 == m {print $NF}' "$f" | tr -d ',')
    if [ -n "$v" ] && [ "$div" != 1 ]; then v=$(awk -v x="$v" -v d="$div" 'BEGIN {printf "%.1f", x / d}'); fi
    printf " %s |" "${v:--}"
  done
  echo
done
