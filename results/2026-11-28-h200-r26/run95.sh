#!/usr/bin/env bash
# Run 95 (prepared): the measurements the Hopper backward and the decode step still lack on an
# H200 (or an H100), and step 15's dQ staged in pairs checked and timed, in about 25 minutes of
# one machine and 12 more. NAME is main (the tree as it is), an overlay (a branch's files: run89.sh
# --overlays), or "picked": main, or the branch an ab stage found no slower.
#   check=NAME:NN     step NN's GPU matrix and compute-sanitizer in NAME's copy (check_step in
#                     tools/tree_copy.sh), the planted bugs of step NN beside them
#                     (MUTANT_STEPS=NN tests/mutants.sh, each stopping at its first FAIL); a FAIL
#                     in the matrix or the sanitizer keeps NAME from being picked
#   ab=NAME:NN        tools/ab.sh, 3 rounds, main's step NN against NAME's at the step's set
#                     (14, 15: the backward set, the backward's rows; 13: decode; any other: bench)
#                     (ab_no_slower); NAME is "picked" from here on if it is no slower, and stays
#                     picked while its later A/Bs are no slower either
#   await=LOGDIR:NAME waits (30 minutes at most) for the run logging to LOGDIR to give its verdict
#                     on NAME (its ab stage's "picked" line): NAME stays picked here only if it
#                     was picked there too (the A/Bs of one branch split over two GPUs)
#   test=NAME         make test in NAME's copy (every step's GPU matrix and sanitizer, the
#                     scratch verifiers, torch on the GPU)
#   compare=NAME:SET  make compare SHAPES=SET in NAME's copy (compare_set in tools/tree_copy.sh: its
#                     CSVs into LOGDIR/SET-NAME, the GPU's SM clock, power, temperature and
#                     clock-event reasons sampled every 200 ms beside it)
#   profile14=NAME    Nsight Compute on step 14's main kernel at B4 H16 N4096 d128 fp16: its time and
#                     its shared-load bank conflicts (27.5 M in run 91, H100)
#   profile13=NAME    Nsight Compute on step 13's kernels (the split kernel with its merge, one
#                     launch) at the two decode shapes under 85% of the bandwidth, B1 Hq32 Hkv8
#                     Nk32768 and B2 Hq8 Hkv1 Nk131072 (bf16 d128): the kernel's time against the
#                     whole call's, where the 8-11 us over the bytes' time sit (run 95: the first,
#                     cold launch)
#   profile13warm=NAME the same after three calls (SKIP=3): a warm launch
#   probe=NAME        reference/bandwidth_ceiling at 128 MiB (B1's and B2's K and V), 256 MiB and
#                     1 GiB, after no flush, the timing's memset and the read flush (run 89's probe)
#   ab12with11=NAME[:ROUNDS]  tools/ab.sh, ROUNDS (default 3) rounds, bench: main's step 11,
#                     main's step 12, NAME's step 12
#   consumers10=NAME  step 10 rebuilt with two consumer warpgroups where it takes three (d64 on
#                     grids of more 128-row blocks than SMs), its GPU matrix, then tools/ab.sh, 3
#                     rounds, at the bench set against NAME's step 10 (the 3.1% step 10 lost to
#                     step 09 at B16 H16 N1024 d64 on the H100, run 85: 192-row tiles pad 1024
#                     rows to 1152)
#   stages13=NAME     step 13 rebuilt with other key tiles and stages (make variant: three stages
#                     of 128 keys, 197 KB; four of 64 keys, the same 128 KB as now; six of 64
#                     keys, 197 KB), each variant's GPU matrix, then tools/ab.sh, 3 rounds, at the
#                     decode set against NAME's step 13 (two stages of 128 keys at d128, four at d64)
# Before the call, on this machine, from the repository root: the branches from the patches
# beside this script, then their files as overlays (the device call must carry .ab-base):
#   git switch -c wip/29-dq-pairs && git apply --index results/2026-11-28-h200-r26/dq-pairs.patch &&
#     git commit -m "Step 15: dQ staged in pairs" && git switch main
#   git switch -c wip/28-dq-half-rows && git apply --index results/2026-11-28-h200-r26/dq-half-rows.patch &&
#     git commit -m "Step 14: dQ read back in half rows at d128" && git switch main
#   bash results/2026-11-24-h100-r22/run89.sh --overlays wip/29-dq-pairs wip/28-dq-half-rows
# then on the GPU machine, in a process session of its own (a call's end kills the others), or
# on a host of several GPUs one run per GPU through on_gpus.sh beside this script:
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r26/run95.sh build/run95 STAGE... >build/run95.out 2>&1 </dev/null &
# The order for an H200, about 25 minutes (check 3, ab 2, test 13, backward 6, profile 1), the
# decode compare (12) last, for the minutes that are left or the next machine:
#   check=wip-29-dq-pairs:15 ab=wip-29-dq-pairs:15 test=picked compare=picked:backward profile13=main compare=main:decode
# and step 14's readback in half rows (6 minutes: check 3, ab 2, profile 1) on a later machine:
#   check=wip-28-dq-half-rows:14 ab=wip-28-dq-half-rows:14 profile14=main profile14=wip-28-dq-half-rows
# (Run 95 ran all of these on four GPUs at once; run 96's stages and command: the README beside
# this script, "Next: run 96".)
# To stop it early: kill the process group in LOGDIR/pgid (never a pattern that matches the
# command line of the shell that runs the kill).
# usage: bash results/2026-11-28-h200-r26/run95.sh LOGDIR STAGE...
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
. tools/tree_copy.sh
run_start "${1:?usage: run95.sh LOGDIR STAGE...}"; shift
ps -o pgid= $$ | tr -d ' ' >"$log/pgid"
picked=main failing=
# reject NAME: a failed check, a slower A/B or another run's verdict: NAME is picked no more
reject() { failing="$failing $1"; [ "$picked" = "$1" ] && picked=main; }
for what in "$@"; do
  case $what in
    await=*:*)  # another run's verdict on a branch (its ab stages) joins this run's
      other=${what#await=}; other_log=${other%:*}; who=${other##*:}
      for _ in $(seq 180); do grep -qE ' picked: | done$' "$other_log/progress.txt" 2>/dev/null && break; sleep 10; done
      if grep -qE " picked: $who\$" "$other_log/progress.txt" 2>/dev/null; then stage "await $other_log: $who picked there too"
      else reject "$who"; stage "await $other_log: $who not picked there (or no verdict in 30 minutes): picked $picked"; fi
      continue ;;
  esac
  name=${what#*=}; name=${name%%:*}; [ "$name" = picked ] && name=$picked
  tree=$(copy_of "$name") || { stage "$what: no tree for $name: stopping"; break; }
  case $what in
    check=*:*)
      id=${what##*:}
      (cd "$tree" && FA2_TEST_FAIL_LIMIT=1 MUTANT_JOBS=8 MUTANT_STEPS="$id" bash tests/mutants.sh) >"$log/mutants$id-$name.log" 2>&1 &
      mutants=$!
      check_step "$id" "$name"; failed=$?
      wait $mutants
      stage "  mutants of step $id $name: $(grep -c '^PASS' "$log/mutants$id-$name.log") caught, $(grep -c '^FAIL' "$log/mutants$id-$name.log") FAIL"
      grep '^FAIL' "$log/mutants$id-$name.log" | tee -a "$log/progress.txt"
      [ $failed = 0 ] || { reject "$name"; stage "check $name failed: it cannot be picked"; } ;;
    ab=*:*)
      # a branch is picked only while none of its checks failed and none of its A/Bs was slower
      case " $failing " in *" $name "*) stage "ab $name: skipped, one of its checks or A/Bs failed"; stage "  picked: $picked"; continue ;; esac
      id=${what##*:}
      set=$(case $id in 13) echo decode ;; 14 | 15) echo "backward --backward" ;; *) echo bench ;; esac)
      if ab_no_slower "$id" "$name" "$set"; then picked=$name; else reject "$name"; fi
      stage "  picked: $picked" ;;
    test=*)
      (cd "$tree" && make -s test) >"$log/test-$name.log" 2>&1
      stage "make test $name: exit $?: $(tail -n 1 "$log/test-$name.log")"
      grep -E '^(FAIL|SKIP)' "$log/test-$name.log" | head -n 20 | tee -a "$log/progress.txt"
      gzip -f "$log/test-$name.log" ;;
    compare=*:*)
      compare_set "$name" "${what##*:}" ;;
    profile14=*)
      # shellcheck disable=SC2086
      (cd "$tree" && KERNEL_REGEX=fa2_bwd_kernel bash tools/profile.sh build/step14/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 128 --backward) \
        >"$log/profile14-$name.log" 2>&1
      stage "profile step 14 $name: exit $?: $(grep -m 1 'gpu__time_duration.sum' "$log/profile14-$name.log" | tr -s ' ');$(grep -m 1 \
        'bank_conflicts_pipe_lsu_mem_shared_op_ld' "$log/profile14-$name.log" | tr -s ' ')" ;;
    profile13=* | profile13warm=*)
      kind=${what%%=*} skip=$([ "${what%%=*}" = profile13warm ] && echo 3 || echo 0)
      for shape in "--batch 1 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 32768" \
                   "--batch 2 --heads 8 --kv-heads 1 --seqlen-q 1 --seqlen-k 131072"; do
        tag=$(echo "$shape" | awk '{ print "b" $2 "-nk" $10 }')
        # shellcheck disable=SC2086
        (cd "$tree" && SKIP=$skip KERNEL_REGEX=fa2_ bash tools/profile.sh build/step13/fa2 $shape --dim 128 --dtype bf16) \
          >"$log/$kind-$tag-$name.log" 2>&1
        rc=$?
        stage "profile step 13 $tag $name$([ "$skip" = 0 ] || echo ' (warm)'): exit $rc: $(grep -m 1 'gpu__time_duration.sum' "$log/$kind-$tag-$name.log" | tr -s ' ')"
      done ;;
    stages13=*)
      contenders="main=build/step13/fa2"
      for v in "s3 -DFA2_SWEEP_BLOCK_N=128 -DFA2_SWEEP_STAGES=3" "n64s4 -DFA2_SWEEP_BLOCK_N=64 -DFA2_SWEEP_STAGES=4" \
               "n64s6 -DFA2_SWEEP_BLOCK_N=64 -DFA2_SWEEP_STAGES=6"; do
        vname=${v%% *} defines=${v#* }
        (cd "$tree" && make -s step=13 variant NAME="$vname" DEFINES="$defines" &&
          build/tests/gpu_matrix "build/variants/$vname/libfa2.so") >"$log/matrix13-$vname.log" 2>&1
        rc=$?
        stage "step 13 $vname ($defines): exit $rc: $(grep -c '^PASS' "$log/matrix13-$vname.log") PASS $(grep -c '^FAIL' "$log/matrix13-$vname.log") FAIL"
        # timed only if its matrix ran to the end and failed nothing
        [ $rc = 0 ] && ! grep -q '^FAIL' "$log/matrix13-$vname.log" && contenders+=" $vname=build/variants/$vname/fa2"
        gzip -f "$log/matrix13-$vname.log"
      done
      # shellcheck disable=SC2086
      (cd "$tree" && bash tools/ab.sh "$log/ab13-stages.csv" 3 decode $contenders) >"$log/ab13-stages.log" 2>&1
      stage "ab step 13 stages: exit $?"; grep -A60 '^medians' "$log/ab13-stages.log" | tee -a "$log/progress.txt" ;;
    probe=*)
      # the streaming read at a decode shape's bytes (B1 and B2: 128 MiB), twice that and 1 GiB,
      # after no flush, the memset and the read flush (the decode timing's): the ceiling a
      # kernel reading those bytes meets under the same timing
      for b in 134217728 268435456 1073741824; do for f in none write read; do
        "$tree"/build/reference/bandwidth_ceiling --bytes $b --flush $f >>"$log/probe-$name.log" 2>&1
      done; done
      stage "probe $name: $(grep -c 'GB/s' "$log/probe-$name.log") reads"; grep 'GB/s' "$log/probe-$name.log" | tee -a "$log/progress.txt" ;;
    ab12with11=*)
      # step 12 of NAME against main's, with main's step 11 in the same rounds (the ladder's
      # ratio 12 / 11 of NAME's step without a whole compare)
      rounds=3; [[ $what == *:* ]] && rounds=${what##*:}
      tree=$(copy_of "$name") && main_tree=$(copy_of main) &&
        (cd "$tree" && bash tools/ab.sh "$log/ab12with11-$name.csv" "$rounds" bench main11="$main_tree/build/step11/fa2" \
          main="$main_tree/build/step12/fa2" new="build/step12/fa2") >"$log/ab12with11-$name.log" 2>&1
      stage "ab step 12 $name with step 11: exit $?"; grep -A40 '^medians' "$log/ab12with11-$name.log" | tee -a "$log/progress.txt" ;;
    consumers10=*)
      # step 10 with two consumers where it takes three (d64, more 128-row blocks than SMs)
      (cd "$tree" && mkdir -p build/ab && python3 tools/variant_src.py steps/10_warp_specialized/kernel.cu build/ab/step10-two-consumers.cu \
          "using LargeGridConfig = TileConfig<D == 64 ? 12 : 8, 1, 128>;" "using LargeGridConfig = TileConfig<8, 1, 128>;" \
          "LargeGridConfig<64>::CONSUMERS == 3" "LargeGridConfig<64>::CONSUMERS == 2" &&
        make -s step=10 variant NAME=two10 SRC=build/ab/step10-two-consumers.cu &&
        build/tests/gpu_matrix build/variants/two10/libfa2.so) >"$log/matrix10-two-consumers.log" 2>&1
      rc=$?
      stage "step 10 with two consumers at d64: exit $rc: $(grep -c '^PASS' "$log/matrix10-two-consumers.log") PASS $(grep -c '^FAIL' "$log/matrix10-two-consumers.log") FAIL"
      # The variant never chooses three consumers, so the matrix's coverage line (every
      # configuration reached by a passing case) fails by construction (run 97): timed when
      # that line is its only failure and every case ran.
      if grep -q '^# 10_warp_specialized: largest O error' "$log/matrix10-two-consumers.log" &&
         ! grep '^FAIL' "$log/matrix10-two-consumers.log" | grep -qv 'configurations never reached by a passing case'; then
        (cd "$tree" && bash tools/ab.sh "$log/ab10-two-consumers.csv" 3 bench main=build/step10/fa2 two=build/variants/two10/fa2) \
          >"$log/ab10-two-consumers.log" 2>&1
        stage "ab step 10 two consumers: exit $?"; grep -A40 '^medians' "$log/ab10-two-consumers.log" | tee -a "$log/progress.txt"
      fi
      gzip -f "$log/matrix10-two-consumers.log" ;;
    *) stage "unknown stage $what (allowed: check=NAME:NN, ab=NAME:NN, await=LOGDIR:NAME, test=NAME, compare=NAME:SET, profile13=NAME, profile13warm=NAME, profile14=NAME, stages13=NAME, consumers10=NAME, ab12with11=NAME[:ROUNDS], probe=NAME)" ;;
  esac
done
stage "done"
