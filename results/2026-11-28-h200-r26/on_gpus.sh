#!/usr/bin/env bash
# A run spread over the GPUs of one host: one run95.sh (or RUN_SCRIPT, a script beside this
# one that takes LOGDIR STAGE...) per argument, the Nth on GPU N
# (RUN_GPU in tools/tree_copy.sh: its own CUDA_VISIBLE_DEVICES, nvidia-smi reading, and copies
# of the tree), each in a process session of its own, logging to LOGROOT-gN. Runs on other GPUs
# share the host's CPUs and nothing on the GPU; the records say which ran beside which. With
# SPLIT_CPUS=1 each run gets its own equal share of the host's cores (taskset), so that builds,
# tests and training runs on one GPU do not slow the others (run 95's two make tests, unpinned
# beside two other runs' builds, did not finish in 25 minutes).
# usage: bash results/2026-11-28-h200-r26/on_gpus.sh LOGROOT "STAGES OF GPU 0" ["STAGES OF GPU 1" ...]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=${1:?usage: on_gpus.sh LOGROOT STAGES...}; shift
n=0 per=$(($(nproc) / $#))
for stages in "$@"; do
  mkdir -p "$root-g$n"
  pin=()
  if [ "${SPLIT_CPUS:-0}" = 1 ] && command -v taskset >/dev/null; then pin=(taskset -c "$((n * per))-$(((n + 1) * per - 1))"); fi
  # shellcheck disable=SC2086
  RUN_GPU=$n setsid nohup ${pin[@]+"${pin[@]}"} bash "results/2026-11-28-h200-r26/${RUN_SCRIPT:-run95.sh}" "$root-g$n" $stages >"$root-g$n.out" 2>&1 </dev/null &
  n=$((n + 1))
done
echo "started $n runs: $root-g0 .. $root-g$((n - 1))"
