#!/usr/bin/env bash
# Runs 85c and 85d: a branch's files laid over the tree (those under .ab-base/combo/, carried
# to the GPU machine beside the work tree, as run84.sh), built in build/combo, then
#   backward        build/tests/gpu_matrix on step 14, `make compare SHAPES=backward`, and
#                   tools/sanitize.sh on step 14
#   decode-lengths  build/tests/gpu_matrix on step 13; tools/ab.sh, 3 rounds, main's step 13
#                   (.ab-base/old/13.cu, built by `make variant` as "old") against the branch's
#                   ("new") at the mixed batch (contiguous and in pages of 16), B8 Nk8192, B1
#                   Nk32768 and B8 Nk8192 given as 8 lengths; then the mutants of step 13
# usage: bash results/2026-11-24-h100-r21/run85cd.sh LOGDIR backward|decode-lengths  (from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$(realpath -m "${1:?usage: run85cd.sh LOGDIR backward|decode-lengths}"); what=${2:?usage: run85cd.sh LOGDIR backward|decode-lengths}
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
rm -rf build/combo && mkdir -p build/combo
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/combo
[ -d .ab-base/combo ] && cp -r .ab-base/combo/. build/combo/
[ -f .ab-base/old/13.cu ] && cp .ab-base/old/13.cu build/combo/old13.cu
cd build/combo
make -s -j16 all >"$log/build.log" 2>&1; stage "built: exit $?"
case $what in
  backward)
    build/tests/gpu_matrix build/step14/libfa2.so >"$log/gm14.log" 2>&1; stage "gpu_matrix exit $?"
    rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv
    PYTHONUNBUFFERED=1 make -s compare SHAPES=backward >"$log/compare-backward.log" 2>&1; stage "compare exit $?"
    mkdir -p "$log/backward"; cp results/compare-*.csv results/ceiling-*.csv "$log/backward/"
    bash tools/sanitize.sh build/step14/fa2 >"$log/sanitize-step14.log" 2>&1
    stage "sanitize exit $?: $(grep -c ^PASS "$log/sanitize-step14.log") PASS $(grep -c ^FAIL "$log/sanitize-step14.log") FAIL" ;;
  decode-lengths)
    make -s variant step=13 NAME=old SRC=old13.cu >"$log/variant.log" 2>&1; stage "variant old: exit $?"
    build/tests/gpu_matrix build/step13/libfa2.so >"$log/gm13.log" 2>&1; stage "gpu_matrix exit $?: $(tail -n 1 "$log/gm13.log")"
    # shellcheck source=reference/shapes.sh
    . reference/shapes.sh
    mixed="--batch 32 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 32768 --dim 128 --dtype bf16 $(shape_flags '32 32 8 1 32768 128 0 bf16 lens=128..32768')"
    b8="--batch 8 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 8192 --dim 128 --dtype bf16"
    shapes="$mixed;$mixed --page-size 16;$b8;--batch 1 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 32768 --dim 128 --dtype bf16;$b8 --seqlens-k 8192,8192,8192,8192,8192,8192,8192,8192"
    bash tools/ab.sh "$log/ab13.csv" 3 "$shapes" old=build/variants/old/fa2 new=build/step13/fa2 >"$log/ab13.log" 2>&1; stage "ab exit $?"
    MUTANT_STEPS=13 bash tests/mutants.sh >"$log/mut13.log" 2>&1
    stage "mutants: $(grep -c '^PASS' "$log/mut13.log") caught, $(grep -c '^FAIL' "$log/mut13.log") not" ;;
  *) stage "unknown: $what" ;;
esac
stage "done"
