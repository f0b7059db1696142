#!/usr/bin/env bash
# Run 96 (prepared): `make test` on the device with every step as main has them now, and step 13's
# lead from run 95's profile (the bytes in flight an SM at d128) tested, on an H200 or an H100.
#   test=NAME          make test in NAME's copy (main, or an overlay: run89.sh --overlays)
#   stages13=NAME      step 13 rebuilt with other key tiles and stages (make variant: three
#                      stages of 128 keys, 197 KB; four of 64 keys, the same 128 KB as now), each
#                      variant's GPU matrix, then tools/ab.sh, 3 rounds, at the decode set
#                      against NAME's step 13 (two stages of 128 keys at d128, four at d64)
#   profile13=NAME     Nsight Compute on step 13 at B1 Hq32 Hkv8 Nk32768 and B2 Hq8 Hkv1
#                      Nk131072 (bf16 d128), a warm launch (SKIP=3: three calls before it)
#   compare=NAME:SET   make compare SHAPES=SET in NAME's copy, the clock sampled beside it
# On a host of two GPUs (on_gpus.sh beside this script, RUN_SCRIPT=run96.sh), about 17 minutes:
#   RUN_SCRIPT=run96.sh bash results/2026-11-28-h200-r26/on_gpus.sh build/run96 "test=main" \
#     "stages13=main profile13=main compare=main:bench"
# On one GPU, in this order (test 13 minutes, stages 4, profile 1, the bench compare 11 last):
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r26/run96.sh build/run96 test=main \
#     stages13=main profile13=main compare=main:bench >build/run96.out 2>&1 </dev/null &
# `make test` shares the host with nothing that builds or trains (run 95: two at once beside two
# other runs' builds did not finish in 25 minutes); a stage on the other GPU only times.
# To stop it early: kill the process group in LOGDIR/pgid.
# usage: bash results/2026-11-28-h200-r26/run96.sh LOGDIR STAGE...
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
. tools/tree_copy.sh
run_start "${1:?usage: run96.sh LOGDIR STAGE...}"; shift
ps -o pgid= $$ | tr -d ' ' >"$log/pgid"
for what in "$@"; do
  name=${what#*=}; name=${name%%:*}
  tree=$(copy_of "$name") || { stage "$what: no tree for $name: stopping"; break; }
  case $what in
    test=*)
      (cd "$tree" && make -s test) >"$log/test-$name.log" 2>&1
      stage "make test $name: exit $?: $(tail -n 1 "$log/test-$name.log")"
      grep -E '^(FAIL|SKIP)' "$log/test-$name.log" | head -n 20 | tee -a "$log/progress.txt"
      gzip -f "$log/test-$name.log" ;;
    stages13=*)
      contenders="main=build/step13/fa2"
      for v in "s3 -DFA2_SWEEP_BLOCK_N=128 -DFA2_SWEEP_STAGES=3" "n64s4 -DFA2_SWEEP_BLOCK_N=64 -DFA2_SWEEP_STAGES=4"; do
        set -- $v; vname=$1; shift
        (cd "$tree" && make -s step=13 variant NAME="$vname" DEFINES="$*" &&
          build/tests/gpu_matrix "build/variants/$vname/libfa2.so") >"$log/matrix13-$vname.log" 2>&1
        rc=$?
        stage "step 13 $vname ($*): exit $rc: $(grep -c '^PASS' "$log/matrix13-$vname.log") PASS $(grep -c '^FAIL' "$log/matrix13-$vname.log") FAIL"
        # timed only if its matrix ran to the end and failed nothing
        [ $rc = 0 ] && ! grep -q '^FAIL' "$log/matrix13-$vname.log" && contenders+=" $vname=build/variants/$vname/fa2"
        gzip -f "$log/matrix13-$vname.log"
      done
      # shellcheck disable=SC2086
      (cd "$tree" && bash tools/ab.sh "$log/ab13-stages.csv" 3 decode $contenders) >"$log/ab13-stages.log" 2>&1
      stage "ab step 13 stages: exit $?"; grep -A60 '^medians' "$log/ab13-stages.log" | tee -a "$log/progress.txt" ;;
    profile13=*)
      for shape in "--batch 1 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 32768" \
                   "--batch 2 --heads 8 --kv-heads 1 --seqlen-q 1 --seqlen-k 131072"; do
        tag=$(echo "$shape" | awk '{ print "b" $2 "-nk" $10 }')
        # shellcheck disable=SC2086
        (cd "$tree" && SKIP=3 KERNEL_REGEX=fa2_split bash tools/profile.sh build/step13/fa2 $shape --dim 128 --dtype bf16) \
          >"$log/profile13-$tag-$name.log" 2>&1
        stage "profile step 13 $tag $name (warm): exit $?: $(grep -m 1 'gpu__time_duration.sum' "$log/profile13-$tag-$name.log" | tr -s ' ')"
      done ;;
    compare=*:*)
      compare_set "$name" "${what##*:}" ;;
    *) stage "unknown stage $what (allowed: test=NAME, stages13=NAME, profile13=NAME, compare=NAME:SET)" ;;
  esac
done
stage "done"
