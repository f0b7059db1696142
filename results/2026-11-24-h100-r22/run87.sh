#!/usr/bin/env bash
# Run 87 (main with step 13's work queue and page ring merged): torch's FlashAttention-2
# backward profiled as run 86 profiled step 14's, the decode compare, the mutants.
# Start it in a process session of its own, or the device call's end kills it:
#   mkdir -p build && setsid nohup bash results/2026-11-24-h100-r22/run87.sh build/run87 STAGE... >build/run87.out 2>&1 </dev/null &
#   fa2prof   torch SDPA's FLASH_ATTENTION backward at B4 H16 N4096 d128 fp16, its main kernel
#             (flash_bwd_dq_dk_dv...): the metrics of tools/profile.sh and per-SASS-opcode stall
#             samples (tools/sass_stalls.py), beside run 86's stalls14.txt and profile14.log
#   decode    make compare SHAPES=decode (the README's decode table)
#   mutants   MUTANT_STEPS="13 14" tests/mutants.sh
# It runs in the work tree itself, so a device call made while it runs syncs the tree over the
# files it writes under results/ (what that cost run 87: README.md); later scripts use a copy.
# usage: bash results/2026-11-24-h100-r22/run87.sh LOGDIR STAGE...  (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$(realpath -m "${1:?usage: run87.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
make -s -j16 all >"$log/build.log" 2>&1; stage "built: exit $?"
for what in "$@"; do
  case $what in
    fa2prof)
      sdpa="python3 reference/sdpa.py --batch 4 --heads 16 --seqlen 4096 --dim 128 --backward --backends flash --warmup 0 --iters 1 --check off"
      printf '#!/bin/sh\nexec python3 reference/sdpa.py "$@"\n' >build/sdpa.sh; chmod +x build/sdpa.sh
      KERNEL_REGEX=flash_bwd_dq_dk_dv bash tools/profile.sh build/sdpa.sh --batch 4 --heads 16 --seqlen 4096 --dim 128 --backward --backends flash >"$log/profile-fa2.log" 2>&1
      stage "fa2 metrics: exit $?"
      # shellcheck disable=SC2086
      ncu --clock-control none --kernel-name regex:flash_bwd_dq_dk_dv --launch-count 1 --section SourceCounters -f -o "$log/srcfa2" $sdpa >"$log/srcfa2.log" 2>&1
      ncu -i "$log/srcfa2.ncu-rep" --page source --csv --print-source sass >"$log/srcfa2.csv" 2>>"$log/srcfa2.log"
      python3 tools/sass_stalls.py "$log/srcfa2.csv" 30 >"$log/stallsfa2.txt" 2>&1; stage "  stalls: exit $?"
      rm -f "$log/srcfa2.ncu-rep"; gzip -f "$log/srcfa2.csv" ;;
    decode)
      stage "make compare SHAPES=decode"
      rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv
      PYTHONUNBUFFERED=1 make -s compare SHAPES=decode >"$log/compare-decode.log" 2>&1; stage "  exit $?"
      mkdir -p "$log/decode"; cp results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv "$log/decode/" 2>/dev/null ;;
    mutants)
      stage "mutants of steps 13 and 14"
      MUTANT_STEPS="13 14" bash tests/mutants.sh >"$log/mutants.log" 2>&1
      stage "  exit $?: $(grep -c '^PASS' "$log/mutants.log") caught, $(grep -c '^FAIL' "$log/mutants.log") not"
      grep '^FAIL' "$log/mutants.log" | tee -a "$log/progress.txt" ;;
    *) stage "unknown stage $what" ;;
  esac
done
stage "done"
