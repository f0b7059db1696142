#!/usr/bin/env bash
# make step=NN sanitize (and make test on a GPU): compute-sanitizer's four tools
# (memcheck, racecheck, synccheck, initcheck) on the shapes below, each line naming
# the tile configuration that ran. Passes only if every run reports 0 errors.
# usage: bash tools/sanitize.sh BINARY [preset]
#   preset: fewer shapes, those that reach each configuration a step can choose under
#   an FA2_EMULATE preset (make test runs every portable step so under every preset).
set -uo pipefail
bin=$1
# The step the binary is of: its folder's name (build/stepNN), or for a variant (make variant:
# build/variants/NAME) the step number its folder's file `step` holds. The step decides the
# shapes below (its backward, its KV cache, step 12's three consumers).
step_dir=$(basename "$(dirname "$bin")")
[ -f "$(dirname "$bin")/step" ] && step_dir=step$(cat "$(dirname "$bin")/step")
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
if [ -z "$CS" ]; then
  echo "error: compute-sanitizer not found: it ships with the CUDA Toolkit (or set COMPUTE_SANITIZER=...)"; exit 2
fi
# small (a grid smaller than the GPU); tails, causal, GQA, Nq < Nk; causal Nq > Nk (blocks
# whose rows see no key); grids larger than the GPU (a step may choose another tile
# configuration for them) at d128 with peaky inputs (the lazy O rescale runs), at d64
# causal with Nq > Nk, and at d64 without a mask (step 12 takes its third consumer there, and
# under a mask from 8192 keys: its own shape below);
# decode, 3 query rows of a GQA group against 3000 keys (the split-KV step splits and merges);
# and for a step that takes a KV cache, decode in pages (below)
shapes=("--batch 1 --heads 2 --seqlen 128 --dim 64"
        "--batch 1 --heads 4 --kv-heads 2 --seqlen-q 97 --seqlen-k 161 --dim 128 --causal --dtype bf16"
        "--batch 1 --heads 2 --seqlen-q 300 --seqlen-k 40 --dim 64 --causal"
        "--batch 2 --heads 80 --kv-heads 20 --seqlen 200 --dim 128 --scale 4"
        "--batch 2 --heads 80 --kv-heads 20 --seqlen-q 300 --seqlen-k 260 --dim 64 --causal"
        "--batch 2 --heads 80 --kv-heads 20 --seqlen 200 --dim 64"
        "--batch 1 --heads 8 --kv-heads 2 --seqlen-q 3 --seqlen-k 3000 --dim 128 --causal --dtype bf16")
# Under a preset, the shapes that reach each configuration a step can choose there: for
# steps 07 and 08 (the same choice), a grid of at most one block per SM at d128 (its 8-warp configurations, 128 or 64
# keys per tile) and one of more blocks than any preset has SMs at d64 (two 4-warp blocks
# per SM); for step 13, decode at both head dims (its layout for the preset's shared
# memory, split and merged); for a step with one configuration, the first alone.
if [ "${2:-}" = preset ]; then
  case $step_dir in
    step07|step08) shapes=("--batch 1 --heads 6 --kv-heads 2 --seqlen 256 --dim 128 --scale 4"
                    "--batch 2 --heads 96 --kv-heads 32 --seqlen 200 --dim 64 --causal") ;;
    step13) shapes=("--batch 1 --heads 8 --kv-heads 2 --seqlen-q 3 --seqlen-k 3000 --dim 128 --causal --dtype bf16"
                    "--batch 2 --heads 8 --kv-heads 8 --seqlen-q 1 --seqlen-k 2000 --dim 64") ;;
    *) shapes=("--batch 1 --heads 6 --kv-heads 2 --seqlen 256 --dim 128 --scale 4") ;;
  esac
fi
# step 12's causal items of three consumers: d64, at least 8192 keys, more 128-row items than
# an H100's or H200's 132 SMs
[ "${2:-}" != preset ] && [ "$step_dir" = step12 ] &&
  shapes+=("--batch 1 --heads 136 --kv-heads 34 --seqlen-q 64 --seqlen-k 8200 --dim 64 --causal")
# A step that takes a KV cache (its kernel does not call fa2_refuse_kv_cache), under a preset
# too: decode against lengths per sequence (0, 1, the longest) with K and V in shuffled pages
# of 16 keys (tiles cross pages; every row no sequence owns is NaN) and of 256
src=$(ls "$(dirname "$0")/../steps/${step_dir#step}"_*/kernel.cu 2>/dev/null | head -n 1)
if [ -n "$src" ] && ! grep -q fa2_refuse_kv_cache "$src"; then
  shapes+=("--batch 3 --heads 8 --kv-heads 2 --seqlen-q 3 --seqlen-k 3000 --seqlens-k 3000,0,17 --page-size 16 --dim 128 --causal --dtype bf16"
           "--batch 3 --heads 8 --kv-heads 8 --seqlen-q 1 --seqlen-k 2000 --seqlens-k 1,2000,257 --page-size 256 --dim 64")
fi
# A step with a backward (its kernel does not answer with fa2_refuse_backward): the backward
# too, its D, main and dQ-convert kernels, on tails with causal, GQA and Nq != Nk at d128 and
# d64, and with FA2_DETERMINISTIC=1 (the dQ splits, here four, and their reduction in order)
if [ -n "$src" ] && ! grep -q fa2_refuse_backward "$src"; then
  shapes+=("--batch 1 --heads 4 --kv-heads 2 --seqlen-q 97 --seqlen-k 161 --dim 128 --causal --dtype bf16 --backward"
           "--batch 1 --heads 2 --seqlen-q 300 --seqlen-k 40 --dim 64 --causal --backward"
           "FA2_DETERMINISTIC=1 --batch 1 --heads 4 --kv-heads 1 --seqlen 200 --dim 128 --backward")
fi
failed=0
for tool in memcheck racecheck synccheck initcheck; do
  for shape in "${shapes[@]}"; do
    env_set=(); [[ $shape == FA2_DETERMINISTIC=1* ]] && { env_set=(FA2_DETERMINISTIC=1); shape=${shape#FA2_DETERMINISTIC=1 }; }
    # shellcheck disable=SC2086
    out=$(env "${env_set[@]}" "$CS" --tool "$tool" --error-exitcode 9 "$bin" $shape --warmup 0 --iters 1 --check full 2>&1)
    rc=$?
    summary=$(echo "$out" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY" | tail -n 1)
    config=$(echo "$out" | grep -o '\[[^]]*\]' | head -n 1)
    shape="${env_set[*]}${env_set:+ }$shape"
    if [ $rc -eq 0 ]; then echo "PASS $tool $(basename "$(dirname "$bin")")${FA2_EMULATE:+ as $FA2_EMULATE} $shape $config: ${summary:-no errors}"
    else failed=$((failed + 1)); echo "FAIL $tool $(basename "$(dirname "$bin")")${FA2_EMULATE:+ as $FA2_EMULATE} $shape $config (exit $rc): ${summary}"; echo "$out" | grep -m 5 -E "=========|error" ; fi
  done
done
[ $failed -eq 0 ]
