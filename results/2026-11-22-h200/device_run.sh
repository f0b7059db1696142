#!/usr/bin/env bash
# One call on a GPU machine: build, test, time, profile. Everything it prints
# also goes under DIR (default build/device); phases run in the order given.
# usage: bash tools/device_run.sh DIR [build] [test] [time] [ncu] [profile] [stalls] [sanitize] [ncu-table] [evidence] [sources] [sweep] [compare] [compare-all] [hopper]
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/device}; shift || true
mkdir -p "$dir"
phases=${*:-build test time ncu}
dev=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
echo "device: $dev; driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1); $(nvcc --version | tail -n1)"

for phase in $phases; do
  echo "######## $phase"
  case $phase in
    build) make -j"$(nproc)" all 2>&1 | tee "$dir/build.log" | grep -E "error|warning" ;;
    test) make test 2>&1 | tee "$dir/test.log" | grep -vE '^PASS '; cp -r build/test-logs "$dir/" ;;
    time)
      for bin in build/step0[1-9]/fa2; do
        for shape in "--batch 2 --heads 8 --seqlen 1024 --dim 128" "--batch 4 --heads 16 --seqlen 4096 --dim 128" \
                     "--batch 4 --heads 16 --seqlen 4096 --dim 128 --causal" "--batch 4 --heads 16 --seqlen 4096 --dim 64"; do
          # shellcheck disable=SC2086
          "$bin" $shape --csv "$dir/time.csv" 2>&1 | tee -a "$dir/time.log"
        done
      done ;;
    ncu)
      metrics=gpu__time_duration.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_op_ldsm.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
      for bin in build/step0[2-9]/fa2; do
        ncu --clock-control none --launch-count 1 --metrics "$metrics" --csv "$bin" --iters 1 --warmup 0 --check off \
          >"$dir/ncu-$(basename "$(dirname "$bin")").csv" 2>"$dir/ncu-err.log" || tail -n 3 "$dir/ncu-err.log"
        echo "$bin: $(grep -cE 'l1tex|sm__|smsp|gpu__|dram|launch' "$dir/ncu-$(basename "$(dirname "$bin")").csv") metric rows"
      done ;;
    profile)
      for bin in build/step05/fa2 build/step06/fa2; do
        ncu --clock-control none --launch-count 1 --section LaunchStats --section Occupancy --section SchedulerStats \
          --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --page details --csv \
          "$bin" --batch 4 --heads 16 --seqlen 4096 --dim 128 --iters 1 --warmup 0 --check off \
          >"$dir/profile-$(basename "$(dirname "$bin")").csv" 2>>"$dir/ncu-err.log"
        grep -E 'Stall|Issue Slots Busy|Eligible Warps|Achieved Occupancy|Registers Per|Pipe Util' "$dir/profile-$(basename "$(dirname "$bin")").csv" | cut -d, -f13- | head -40
      done ;;
    stalls)
      stall_metrics=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,smsp__warps_active.avg.per_cycle_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active
      for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected selected dispatch_stall lg_throttle no_instruction branch_resolving membar sleeping drain misc tex_throttle imc_miss; do
        stall_metrics+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
      done
      for bin in build/step0[2-9]/fa2; do
        name=$(basename "$(dirname "$bin")")
        ncu --clock-control none --launch-count 1 --metrics "$stall_metrics" --csv "$bin" --batch 4 --heads 16 --seqlen 4096 --dim 128 \
          --iters 1 --warmup 0 --check off >"$dir/stalls-$name.csv" 2>>"$dir/ncu-err.log"
        echo "== $name"; grep -E 'stalled|tensor|issue_active|eligible' "$dir/stalls-$name.csv" | awk -F'","' '{printf "  %-70s %s\n", $13, $15}' | tr -d '"' | sort -k2 -rn | head -8
      done ;;
    sanitize)
      for bin in build/step0[1-9]/fa2; do
        (bash tools/sanitize.sh "$bin" >"$dir/sanitize-$(basename "$(dirname "$bin")").txt" 2>&1; echo "$bin sanitize exit $?") &
      done
      wait
      cat "$dir"/sanitize-step*.txt | grep -cE '^PASS' | sed 's/^/sanitize PASS lines: /'; grep -hE '^FAIL' "$dir"/sanitize-step*.txt ;;
    ncu-table)
      for bin in build/step0[2-9]/fa2; do
        bash tools/profile.sh "$bin" >"$dir/profile-seed-$(basename "$(dirname "$bin")").txt" 2>&1
        bash tools/profile.sh "$bin" --batch 4 --heads 16 --seqlen 4096 --dim 128 >"$dir/profile-big-$(basename "$(dirname "$bin")").txt" 2>&1
      done
      bash tools/ncu_table.sh "$dir"/profile-seed-step*.txt | tee "$dir/ncu-table-seed.md"
      bash tools/ncu_table.sh "$dir"/profile-big-step*.txt | tee "$dir/ncu-table-big.md" ;;
    evidence)
      # The smaller measurements docs/ quotes: executed instructions, global store
      # requests and sectors, local-memory (spill) bytes, clocks; profiles at d64;
      # bf16 at the seed shape; the SM clock under load.
      ev=smsp__inst_executed.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum
      ev+=,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum
      for bin in build/step0[1-9]/fa2; do
        for shape in "--batch 2 --heads 8 --seqlen 1024 --dim 128" "--batch 4 --heads 16 --seqlen 4096 --dim 128"; do
          [[ $bin == *step01* && $shape == *4096* ]] && continue
          echo "== $bin $shape"
          # shellcheck disable=SC2086
          ncu --clock-control none --launch-count 1 --metrics "$ev" --csv "$bin" $shape --iters 1 --warmup 0 --check off 2>/dev/null |
            awk -F'","' '/^"[0-9]/ { gsub(/"/, "", $15); printf "  %-60s %s\n", $13, $15 }'
        done
      done 2>&1 | tee "$dir/evidence-ncu.txt"
      bash tools/profile.sh build/step01/fa2 >"$dir/evidence-profile-seed-step01.txt" 2>&1
      for s in 03 04 05; do
        bash tools/profile.sh "build/step$s/fa2" --batch 4 --heads 16 --seqlen 4096 --dim 64 >"$dir/evidence-profile-d64-step$s.txt" 2>&1
      done
      for bin in build/step0[1-9]/fa2; do "$bin" --dtype bf16 --csv "$dir/evidence-bf16-seed.csv"; done
      for bin in build/step0[1-9]/fa2; do "$bin" --dtype fp16 --csv "$dir/evidence-bf16-seed.csv"; done
      build/step06/fa2 --batch 4 --heads 16 --seqlen 4096 --iters 3000 --check off >/dev/null &
      sleep 3; nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv | tee "$dir/evidence-clocks.txt"; wait
      ;;
    sources)
      # Per-SASS-instruction stall samples of step 06 at B4 H16 N4096 d128, summed by opcode.
      ncu --clock-control none --launch-count 1 --section SourceCounters --section WarpStateStats -f -o "$dir/sources-step06" \
        build/step06/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 128 --iters 1 --warmup 0 --check off >"$dir/sources.log" 2>&1
      ncu -i "$dir/sources-step06.ncu-rep" --page source --csv --print-source sass >"$dir/sources-step06.csv" 2>>"$dir/sources.log"
      python3 tools/sass_stalls.py "$dir/sources-step06.csv" 25 | tee "$dir/sass-stalls-step06.txt" ;;
    sweep) bash steps/06_staged_epilogue/sweep.sh "$dir/sweep.csv" 30 2>&1 | tee "$dir/sweep.log" | grep -E '^==|PASS|FAIL' ;;
    compare) PYTHONUNBUFFERED=1 make compare 2>&1 | tee "$dir/compare.log" | tail -n 40; cp results/compare-*.csv results/ceiling-*.csv "$dir/" ;;
    compare-all) PYTHONUNBUFFERED=1 make compare SHAPES=all 2>&1 | tee "$dir/compare-all.log" | tail -n 120; cp results/compare-*.csv results/ceiling-*.csv "$dir/" ;;
    hopper)
      # Step 07 next to step 06 (profiles at the seed shape and at B4 H16 N4096, d128 and d64),
      # step 07's resources and SASS mix, and the wgmma layout verifier.
      for bin in build/step06/fa2 build/step07/fa2; do
        name=$(basename "$(dirname "$bin")")
        for shape in "seed:" "big:--batch 4 --heads 16 --seqlen 4096 --dim 128" "d64:--batch 4 --heads 16 --seqlen 4096 --dim 64"; do
          # shellcheck disable=SC2086
          bash tools/profile.sh "$bin" ${shape#*:} >"$dir/profile-${shape%%:*}-$name.txt" 2>&1
          echo "== $name ${shape%%:*}"; grep -E 'gpu__time|tensor_op|issue_active|eligible|stalled_(wait|barrier|long|short|math|dispatch)' "$dir/profile-${shape%%:*}-$name.txt"
        done
      done
      make -s step=07 info 2>&1 | tee "$dir/info-step07.txt" | head -n 30
      build/scratch/verify_wgmma 2>&1 | tee "$dir/verify-wgmma.txt" | grep -vE '^PASS' ; grep -c '^PASS' "$dir/verify-wgmma.txt" ;;
    *) echo "unknown phase $phase" ;;
  esac
done
