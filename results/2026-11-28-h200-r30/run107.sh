#!/usr/bin/env bash
# Run 107: what #26's done-when still needs on an H200 after step 12's work queue, on a host of
# two, each GPU with half the host's cores (taskset), each half in a process session of its own:
#   GPU 0  `make test` on main (every step's GPU matrix and sanitizer, the scratch verifiers,
#          torch on the GPU: run95.sh test=main), then Nsight Compute on warm launches
#          (tools/profile.sh, SKIP=3): steps 09 and 10 at fp16 B16 H16 N1024 d64, where step 10
#          trails step 09 (runs 85, 97), and steps 11 and 12 at bf16 B1 H16 N16384 d128 causal,
#          where step 12 trails step 11 (runs 103, 104)
#   GPU 1  run 106's A/B (run106.sh with PROFILE=0: the item word plain, ORDER_PAIRS 1 and 8,
#          clocks sampled beside it), then `make compare SHAPES=bench` on main (run95.sh
#          compare=main:bench), whose CSV rewrites docs/results-h200.md
# About 24 minutes (the compare's 19 the longest).
# usage: bash results/2026-11-28-h200-r30/run107.sh LOGROOT     (starts both halves and returns;
#   each writes LOGROOT-gN/progress.txt and ends it with a line "all done")
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
here=results/2026-11-28-h200-r30
root=${1:?usage: run107.sh LOGROOT}
if [ "${2:-}" = --gpu ]; then
  n=$3 log=$root-g$n
  if [ "$n" = 0 ]; then
    bash results/2026-11-28-h200-r26/run95.sh "$log" test=main
    # shellcheck source=tools/tree_copy.sh
    . tools/tree_copy.sh
    run_start "$log"
    tree=$trees-main  # run95.sh's copy of main on this GPU (trees: run_start's)
    for p in "09 fp16-b16-n1024-d64 --batch 16 --heads 16 --seqlen 1024 --dim 64" \
             "10 fp16-b16-n1024-d64 --batch 16 --heads 16 --seqlen 1024 --dim 64" \
             "11 bf16-b1-n16384-causal --batch 1 --heads 16 --seqlen 16384 --dim 128 --causal --dtype bf16" \
             "12 bf16-b1-n16384-causal --batch 1 --heads 16 --seqlen 16384 --dim 128 --causal --dtype bf16"; do
      read -r id tag args <<<"$p"
      # shellcheck disable=SC2086
      (cd "$tree" && SKIP=3 KERNEL_REGEX=fa2_ bash tools/profile.sh build/step$id/fa2 $args) >"$log/profile$id-$tag.log" 2>&1
      stage "profile step $id $tag (warm): exit $?: $(grep -m 1 'gpu__time_duration.sum' "$log/profile$id-$tag.log" | tr -s ' ')"
    done
  else
    PROFILE=0 bash results/2026-11-28-h200-r29/run106.sh "$log"
    bash results/2026-11-28-h200-r26/run95.sh "$log" compare=main:bench
  fi
  echo "$(date -u +%T) all done" >>"$log/progress.txt"
  exit 0
fi
per=$(($(nproc) / 2))
for n in 0 1; do
  mkdir -p "$root-g$n"
  RUN_GPU=$n setsid nohup taskset -c "$((n * per))-$(((n + 1) * per - 1))" bash "$here/run107.sh" "$root" --gpu $n \
    >"$root-g$n.out" 2>&1 </dev/null &
done
echo "started: $root-g0, $root-g1"
