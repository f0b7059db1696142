#!/usr/bin/env bash
# Run 71 (H100): the portable steps under device limits and FA2_EMULATE presets.
#  1. build (this tree, ARCH from the GPU; and .ab-base, main before the change, by its own
#     Makefile: `git archive be31d05 | tar -x -C .ab-base`)
#  2. A/B in rounds, no emulation: steps 07 and 12 against their versions before the change,
#     at the bench and decode shapes (tools/ab.sh, 5 rounds)
#  3. FA2_EMULATE=rtx4090 make compare; FA2_EMULATE=a10g make compare SHAPES=decode;
#     FA2_EMULATE=a100 make compare (the timings are the H100's; the rows say "as <preset>")
#  4. make test (the GPU matrix and sanitize under every preset in it)
# usage: bash results/2026-11-24-h100-r15/run71.sh LOGDIR   (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: run71.sh LOGDIR}
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
stage "build"
make -s -j16 all >"$log/run71-build.log" 2>&1 || { stage "build FAILED"; exit 1; }
make -s -C .ab-base -j16 build/step07/fa2 build/step12/fa2 >>"$log/run71-build.log" 2>&1 || { stage "base build FAILED"; exit 1; }
for pr in "" a100 rtx4090 a10g l4 gb10; do
  for d in 64 128; do
    FA2_EMULATE=$pr build/step07/fa2 --plan --dim $d
    FA2_EMULATE=$pr build/step07/fa2 --plan --dim $d --batch 16 --heads 16
    FA2_EMULATE=$pr build/step12/fa2 --plan --dim $d --batch 1 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 32768 --dtype bf16
  done
done >"$log/run71-plans.txt" 2>&1
stage "A/B step 07 bench"
bash tools/ab.sh "$log/run71-ab07-bench.csv" 5 bench base07=.ab-base/build/step07/fa2 new07=build/step07/fa2 >"$log/run71-ab07-bench.log" 2>&1
stage "A/B step 12 decode"
bash tools/ab.sh "$log/run71-ab12-decode.csv" 5 decode base12=.ab-base/build/step12/fa2 new12=build/step12/fa2 >"$log/run71-ab12-decode.log" 2>&1
stage "A/B step 07 decode, step 12 bench"
bash tools/ab.sh "$log/run71-ab-cross.csv" 3 "--batch 1 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 32768 --dtype bf16;--batch 8 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 8192 --dtype bf16;--batch 2 --heads 8 --seqlen 1024 --dim 128" \
  base07=.ab-base/build/step07/fa2 new07=build/step07/fa2 base12=.ab-base/build/step12/fa2 new12=build/step12/fa2 >"$log/run71-ab-cross.log" 2>&1
stage "compare rtx4090"
FA2_EMULATE=rtx4090 make -s compare >"$log/run71-compare-rtx4090.log" 2>&1; stage "  exit $?"
stage "compare a10g decode"
FA2_EMULATE=a10g make -s compare SHAPES=decode >"$log/run71-compare-a10g-decode.log" 2>&1; stage "  exit $?"
stage "compare a100"
FA2_EMULATE=a100 make -s compare >"$log/run71-compare-a100.log" 2>&1; stage "  exit $?"
cp results/compare-*-as-*.csv results/ceiling-*-as-*.csv results/bandwidth-*-as-*.csv "$log/" 2>/dev/null
stage "make test"
make test >"$log/run71-make-test.log" 2>&1; stage "  exit $? : $(tail -n 1 "$log/run71-make-test.log")"
stage "done"
