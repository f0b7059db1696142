#!/usr/bin/env bash
# The next device run: main with branches laid over it (the files under .ab-base/combo/,
# as run81.sh), by stage, from copies of the tree under build/. Start it in a session of
# its own, or the device call's end kills it:
#   mkdir -p build && setsid nohup bash results/2026-11-24-h100-r19/run83.sh build/run83 STAGE... >build/run83.out 2>&1 </dev/null &
#   smoke     under compute-sanitizer memcheck, 90 s each: step 13 with a KV cache (pages of
#             16 and 256 keys, per-sequence lengths) and step 14's backward with
#             FA2_DETERMINISTIC=1; a fault or hang drops that step from make test
#   test      make test in build/combo, with MUTANT_STEPS (default "13 14") beside it
#   compare   make compare SHAPES=bench (the README's H100 table: steps 10-12 rebuilt)
#   backward  make compare SHAPES=backward, then again with FA2_DETERMINISTIC=1 (the dQ
#             atomics against the deterministic splits, each against torch in its own rounds)
#   decode    make compare SHAPES=decode
#   train     python/train.py with step 14 on the GPU, its loss CSV
#   ab08      step 08 at B2 H8 N1024 d128 trails step 07 by 3-4%: its SASS loads each
#             fragment a median 13 instructions before the HMMA that reads it (07: 29); with
#             __launch_bounds__(THREADS, 1) ptxas gives the 8x1x128 kernel 255 registers and
#             a median of 30.5 (tools/ldsm_distance.py, no GPU needed). A/B in 3 rounds at
#             the bench shapes: 07, 08, that variant of 08
#   ab10      step 10 trails step 09 at B16 H16 N1024 d64 (2.5% on the H200), where it takes
#             three consumers: A/B in 3 rounds at the bench shapes of 09, 10 and 10 with two
#             consumers always (grid_is_large false)
# usage: bash results/2026-11-24-h100-r19/run83.sh LOGDIR STAGE...  (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$(realpath -m "${1:?usage: run83.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
rm -rf build/combo && mkdir -p build/combo
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/combo
[ -d .ab-base/combo ] && cp -r .ab-base/combo/. build/combo/
cd build/combo
make -s -j16 all >"$log/build.log" 2>&1; stage "built: exit $?"
compare_set() { # compare_set SET NAME [ENV=VALUE]: make compare SHAPES=SET, its CSVs into $log/NAME
  rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv
  (env ${3:+"$3"} PYTHONUNBUFFERED=1 make -s compare SHAPES="$1") >"$log/compare-$2.log" 2>&1; stage "  $2: exit $?"
  mkdir -p "$log/$2"; cp results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv "$log/$2/" 2>/dev/null
}
for what in "$@"; do
  case $what in
    smoke)
      stage "smoke"
      for run in "13|--batch 3 --heads 8 --kv-heads 2 --seqlen-q 2 --seqlen-k 700 --seqlens-k 0,300,700 --page-size 16 --causal --dtype bf16|" \
                 "13|--batch 2 --heads 4 --kv-heads 1 --seqlen-q 1 --seqlen-k 3000 --seqlens-k 257,3000 --page-size 256 --dim 64|" \
                 "14|--batch 2 --heads 8 --kv-heads 2 --seqlen 1000 --dim 128 --causal --backward|FA2_DETERMINISTIC=1"; do
        IFS='|' read -r id args env_set <<<"$run"
        # shellcheck disable=SC2086
        timeout 90 env $env_set compute-sanitizer --tool memcheck --error-exitcode 9 build/step$id/fa2 $args \
          --warmup 0 --iters 1 >>"$log/smoke.log" 2>&1; rc=$?
        stage "  step $id exit $rc: $env_set $args"
        if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
          stage "  step $id faults or hangs: make test runs without it"
          rm -rf steps/"$id"_* build/step$id
        fi
      done
      grep -E '\| (PASS|FAIL)' "$log/smoke.log" | tee -a "$log/progress.txt" ;;
    test)
      stage "make test, the mutants of ${MUTANT_STEPS:-13 14} beside it"
      (MUTANT_STEPS="${MUTANT_STEPS:-13 14}" bash tests/mutants.sh >"$log/mutants.log" 2>&1) &
      make test >"$log/make-test.log" 2>&1; stage "  make test exit $? : $(tail -n 1 "$log/make-test.log")"
      wait; stage "  mutants: $(grep -c '^PASS' "$log/mutants.log") caught, $(grep -c '^FAIL' "$log/mutants.log") not"
      gzip -c build/test-logs/gpu-matrix.log >"$log/gpu-matrix.log.gz"
      cat build/test-logs/sanitize-*.log | gzip -c >"$log/sanitize.log.gz"
      cp build/test-logs/train-step*.csv "$log/" 2>/dev/null ;;
    compare) stage "make compare SHAPES=bench"; compare_set bench bench ;;
    backward)
      stage "make compare SHAPES=backward, atomics then FA2_DETERMINISTIC=1"
      compare_set backward backward
      compare_set backward backward-deterministic FA2_DETERMINISTIC=1 ;;
    decode) stage "make compare SHAPES=decode"; compare_set decode decode ;;
    train)
      stage "python/train.py --step 14"
      python3 python/train.py --step 14 --device cuda --csv "$log/train-step14.csv" >"$log/train.log" 2>&1
      stage "  exit $?: $(grep -c '^PASS' "$log/train.log") PASS, $(grep -c '^FAIL' "$log/train.log") FAIL" ;;
    ab08)
      stage "A/B: step 08 with __launch_bounds__(THREADS, 1)"
      mkdir -p build/ab
      python3 tools/variant_src.py steps/08_tma_mbarrier/kernel.cu build/ab/08_min_blocks_1.cu \
        "__global__ void __launch_bounds__(C::THREADS)
" "__global__ void __launch_bounds__(C::THREADS, 1)
" '"08_tma_mbarrier"' '"08_min_blocks_1"' &&
        make -s variant step=08 NAME=min_blocks_1 SRC=build/ab/08_min_blocks_1.cu >"$log/ab08-build.log" 2>&1
      rm -f "$log/ab08.csv"
      bash tools/ab.sh "$log/ab08.csv" 3 bench s07=build/step07/fa2 s08=build/step08/fa2 \
        s08_min_blocks_1=build/variants/min_blocks_1/fa2 >"$log/ab08.log" 2>&1; stage "  exit $?" ;;
    ab10)
      stage "A/B: step 10 with two consumers always"
      mkdir -p build/ab
      python3 tools/variant_src.py steps/10_warp_specialized/kernel.cu build/ab/10_two_consumers.cu \
        "{ return grid_blocks(p, SmallGridConfig::BLOCK_M) > sm_count; }" "{ return false && sm_count; }" \
        '"10_warp_specialized"' '"10_two_consumers"' &&
        make -s variant step=10 NAME=two_consumers SRC=build/ab/10_two_consumers.cu >"$log/ab10-build.log" 2>&1
      rm -f "$log/ab10.csv"
      bash tools/ab.sh "$log/ab10.csv" 3 bench s09=build/step09/fa2 s10=build/step10/fa2 \
        s10_two_consumers=build/variants/two_consumers/fa2 >"$log/ab10.log" 2>&1; stage "  exit $?" ;;
    *) stage "unknown stage $what" ;;
  esac
done
stage "done"
