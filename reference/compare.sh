#!/usr/bin/env bash
# reference/compare.sh - the engine of `make compare`: every step, the cuBLAS baseline,
# torch SDPA's backends (when torch is installed) and FlashAttention-4 (when flash_attn.cute
# imports: pip install flash-attn-4) on the same shapes, timed by the same rules, in rounds.
# A round runs every contender once at a shape; the order turns by one from round to round
# (and torch's backends and FA4 turn among themselves), so none always runs first or last.
# The tables report, per contender and shape, the median over the rounds of each round's
# median launch time: a ratio does not move with the order of the runs.
#
# usage: bash reference/compare.sh [SET]   (default: $SHAPES, else seed)
#   SET: seed, bench, sweep, decode, backward (reference/shapes.txt), all (bench and sweep), or
#   summary: the README's one table in one run and one CSV: every forward step at the summary
#   set's prefill shape and its decode shape (with the bandwidth probe), the steps with a
#   backward at the backward set's first shape (its headline), each as its own set would time it.
#   Every set but backward leaves out the steps whose folder name ends in _backward (steps 14
#   and 15): their forward is another step's (step 07's, step 10's), which has a row of its
#   own; their rows are backward's.
#   decode's tables give GB/s of K and V read and the % of the streaming-read bandwidth
#   (reference/bandwidth_ceiling) instead of TFLOP/s and the mma ceilings. A shape with
#   options (shapes.txt: page=N, lens=A..B) runs with the harness's --page-size and
#   --seqlens-k, the CSV's page_size and seqlens_k columns say so, and it gets a table of
#   its own, its GB/s counting the keys its sequences hold. It runs the steps that take a KV
#   cache (their kernel file does not answer with fa2_refuse_kv_cache: step 13); neither
#   cuBLAS nor torch runs it (no paged or per-sequence input): a paged table's torch ratios
#   are to the same shape's contiguous rows of the same run, a mixed-length table has none.
#   backward times the backward: every step that has one (its kernel file does not answer
#   with fa2_refuse_backward; step 00 at the seed shape only, in round 1) through the
#   harness's --backward, and torch's backward per backend (sdpa.py --backward), in the
#   same rounds; the table (table.awk's backward mode) reads the rows named <step>_backward,
#   their TFLOP/s counting 2.5 forwards. Round 1 checks the steps' dQ, dK, dV against the
#   harness's fp64 backward on the CPU where it takes at most BWD_FULL_CHECK_MACS
#   multiply-adds (2^32: the seed shape, seconds), and says UNCHECKED with why beyond
#   it (tests/gpu_matrix.c checks the backward over its cases); torch's, on the GPU in fp64, always.
#   ROUNDS (default 3) rounds; ITERS (default 50) timed launches per contender per round, after
#   3 untimed ones (the first loads the module; a round's median needs no more warm-up).
#   STEPS (default: every step the set runs) the steps to time, by number ("11 12" or 11,12):
#   the others are left out, the cuBLAS baseline and torch stay (a step and its neighbour, or
#   a changed step against torch, in minutes where every step takes a quarter of an hour).
#   BACKENDS (default: flash cudnn efficient math default, and fa4 where it imports) the torch
#   backends and FA4 to time, by name ("flash cudnn fa4" or flash,cudnn,fa4): math and
#   efficient take most of a large backward run's time and neither is a target.
# Needs the binaries built (make all). Writes a new pair of files per run:
#   results/compare-<gpu>-<date>[-N].csv   one row per contender, shape and round (the
#                                          harness's columns, page_size and seqlens_k last);
#                                          round 1 checked against fp64
#   results/ceiling-<gpu>-<date>[-N].csv   the mma.sync m16n8k16 ceiling of the GPU, and on
#                                          Hopper the wgmma m64n256k16 ceiling
#   results/bandwidth-<gpu>-<date>[-N].csv the streaming-read bandwidth (SHAPES=decode)
# Exit: 0 all ran and passed, 1 a check failed or a run broke, 2 bad argument or
# missing binaries, 3 no usable GPU.
set -u
cd "$(dirname "$0")/.." || exit 2
PYTHON=${PYTHON:-python3}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-50}

set_name=${1:-${SHAPES:-seed}}
case $set_name in
  seed|bench|sweep|decode|backward|summary) sets=("$set_name") ;;
  all) sets=(bench sweep) ;;
  *) echo "error: compare.sh: SHAPES='$set_name' is not allowed (allowed: seed, bench, sweep, decode, backward, summary, all)" >&2; exit 2 ;;
esac
backward=$([ "$set_name" = backward ] && echo 1 || echo 0)
summary=$([ "$set_name" = summary ] && echo 1 || echo 0)
BWD_FULL_CHECK_MACS=4294967296  # 2^32: the fp64 backward on the CPU does about nine per count
case $ROUNDS in ''|*[!0-9]*|0) echo "error: compare.sh: ROUNDS='$ROUNDS' is not allowed (allowed: an integer >= 1)" >&2; exit 2 ;; esac
case $ITERS in ''|*[!0-9]*|0) echo "error: compare.sh: ITERS='$ITERS' is not allowed (allowed: an integer >= 1)" >&2; exit 2 ;; esac
STEPS=${STEPS:-}
step_ids=" "  # the steps STEPS names, each once, between spaces
for id in ${STEPS//,/ }; do
  if [[ $id != [0-9][0-9] ]] || ! compgen -G "steps/${id}_*/kernel.c*" >/dev/null; then
    echo "error: compare.sh: STEPS='$STEPS' is not allowed (allowed: step numbers of steps/, two digits each, as \"11 12\")" >&2; exit 2
  fi
  [[ $step_ids == *" $id "* ]] || step_ids+="$id "
done
# Shapes as "batch heads_q heads_kv seqlen_q seqlen_k head_dim causal dtype[ options]", each once.
# shellcheck source=reference/shapes.sh
. reference/shapes.sh
BACKENDS=${BACKENDS:-$COMPARE_BACKENDS}
torch_backends=()  # the torch backends BACKENDS names, in COMPARE_BACKENDS' order; fa4 apart
want_fa4=0
for name in ${BACKENDS//,/ }; do
  [[ " $COMPARE_BACKENDS " == *" $name "* ]] ||
    { echo "error: compare.sh: BACKENDS='$BACKENDS' is not allowed (allowed: names among $COMPARE_BACKENDS)" >&2; exit 2; }
done
for name in $COMPARE_BACKENDS; do
  [[ " ${BACKENDS//,/ } " == *" $name "* ]] || continue
  if [ "$name" = fa4 ]; then want_fa4=1; else torch_backends+=("$name"); fi
done
for s in "${sets[@]}" seed; do shapes_of "$s" >/dev/null || exit 2; done  # a malformed shape: its one line
mapfile -t shapes < <(for s in "${sets[@]}"; do shapes_of "$s"; done | awk '!seen[$0]++')
# What each shape times, the forward (F) or the backward (B): one or the other for a whole set,
# both in the summary (its shapes forward, then the backward's headline).
mapfile -t entries < <(for s in "${shapes[@]}"; do echo "$([ $backward = 1 ] && echo B || echo F) $s"; done
                       [ $summary = 1 ] && echo "B $(shapes_of backward | head -n 1)")
seed_shape=$(shapes_of seed | head -n 1)

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$gpu" ]; then
  echo "compare: no GPU found (nvidia-smi lists none): the comparison needs an sm_80 or newer GPU" >&2
  exit 3
fi

fwd_bins=()  # the forward's contenders
bwd_bins=()  # the backward's
missing=()
for dir in steps/[0-9][0-9]_*; do
  compgen -G "$dir/kernel.c*" >/dev/null || continue  # a folder left empty by a rename
  # the backward: the steps with a backward (the others answer with fa2_refuse_backward)
  has_bwd=$( { [ $backward = 1 ] || [ $summary = 1 ]; } && ! grep -q fa2_refuse_backward "$dir"/kernel.c* && echo 1)
  # the forward, in every other set: not the steps named *_backward (14, 15), which teach the
  # backward; their forward is another step's (07's, 10's), timed under that step's own name
  has_fwd=$([ $backward = 0 ] && [[ $dir != *_backward ]] && echo 1)
  [ -n "$has_bwd$has_fwd" ] || continue
  id=$(basename "$dir" | cut -c1-2)
  [ -n "$STEPS" ] && [[ $step_ids != *" $id "* ]] && continue
  step_ids=${step_ids/ $id / }  # found: what is left of STEPS the set does not run
  bin=build/step$id/fa2
  [ -x "$bin" ] || { missing+=("$bin"); continue; }
  [ -n "$has_fwd" ] && fwd_bins+=("$bin")
  [ -n "$has_bwd" ] && bwd_bins+=("$bin")
done
if [ -n "$STEPS" ] && [ -n "${step_ids// /}" ]; then
  # shellcheck disable=SC2086  # split on purpose: the ids, one space apart
  left=$(echo $step_ids)
  echo "error: compare.sh: STEPS='$STEPS' names $left, which SHAPES=$set_name does not run (steps 14 and 15 time in SHAPES=backward alone, and that set only the steps with a backward)" >&2
  exit 2
fi
for bin in build/reference/cublas/fa2 build/reference/mma_ceiling build/reference/wgmma_ceiling build/reference/bandwidth_ceiling; do [ -x "$bin" ] || missing+=("$bin"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "error: compare.sh: not built: ${missing[*]} (build them first: make all)" >&2
  exit 2
fi

slug=$(printf '%s' "$gpu" | tr '[:upper:]' '[:lower:]' | sed -e 's/[^a-z0-9][^a-z0-9]*/-/g' -e 's/^-//' -e 's/-$//')
# Under FA2_EMULATE the steps decide as on the preset's GPU and run on this one: the files
# say so in their name (and every harness row names the preset in its device column).
if [ -n "${FA2_EMULATE:-}" ]; then
  echo "== FA2_EMULATE=$FA2_EMULATE: every step takes its decisions from the limits of $FA2_EMULATE (common/device_limits.c); the timings are this GPU's, $gpu"
  slug=$slug-as-$FA2_EMULATE
fi
today=$(date -u +%F)  # UTC, as the harness dates its rows
mkdir -p results
run_name=$slug-$today
n=2
while [ -e "results/compare-$run_name.csv" ]; do run_name=$slug-$today-$n; n=$((n + 1)); done
csv=results/compare-$run_name.csv
ceiling_csv=results/ceiling-$run_name.csv
bandwidth_csv=""

echo "== mma.sync ceiling of $gpu"
build/reference/mma_ceiling --csv "$ceiling_csv"
rc=$?
[ $rc -eq 3 ] && exit 3
[ $rc -ne 0 ] && echo "compare: the ceiling probe failed (exit $rc): the % of ceiling column stays empty"
build/reference/wgmma_ceiling --csv "$ceiling_csv"
rc=$?
[ $rc -eq 3 ] && echo "compare: no wgmma on this GPU (the Hopper steps run only on compute capability 9.0): the % of wgmma column stays empty"
[ $rc -ne 0 ] && [ $rc -ne 3 ] && echo "compare: the wgmma ceiling probe failed (exit $rc): the % of wgmma column stays empty"

if [ "$set_name" = decode ] || [ $summary = 1 ]; then
  bandwidth_csv=results/bandwidth-$run_name.csv
  echo "== streaming-read bandwidth of $gpu"
  build/reference/bandwidth_ceiling --csv "$bandwidth_csv"
  rc=$?
  [ $rc -eq 3 ] && exit 3
  [ $rc -ne 0 ] && echo "compare: the bandwidth probe failed (exit $rc): the % of bandwidth column stays empty"
fi

torch_ok=0
# Bounded: once, on a freshly started machine, a compare stopped here (after its ceiling
# probes, before its first shape) for 20 minutes; without torch it says so and goes on.
timeout 300 "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1
case $? in
  0) torch_ok=1 ;;
  124) echo "compare: $PYTHON took more than 300 s to import torch and open the GPU: torch SDPA rows skipped" ;;
  *) echo "compare: $PYTHON cannot import torch with CUDA: torch SDPA rows skipped (pip install torch to add them)" ;;
esac
# FlashAttention-4 (pip install flash-attn-4) where it imports: one more contender of the
# torch process, timed by the same rules (sdpa.py --backends fa4), at every shape but the
# decode set's.
fa4_ok=0
if [ $torch_ok = 1 ] && [ $want_fa4 = 1 ]; then
  if timeout 300 "$PYTHON" -c 'import flash_attn.cute' >/dev/null 2>&1; then
    fa4_ok=1
    echo "== FlashAttention-4 (flash_attn.cute) imports: a contender at every shape but the decode set's"
  else
    echo "compare: flash_attn.cute does not import: no FA4 rows (pip install flash-attn-4 to add them)"
  fi
fi
decode_shapes=$(shapes_of decode)

runs=0 failed=0 unsupported=0
run() { # run COMMAND...: one timed run; its own line says what happened
  "$@"
  local rc=$?
  runs=$((runs + 1))
  case $rc in
    0) ;;
    2) unsupported=$((unsupported + 1)) ;;  # the step refused the shape, in one line
    3) echo "compare: $1 found no usable GPU" >&2; exit 3 ;;
    *) failed=$((failed + 1)); echo "compare: $1 exited with $rc" ;;
  esac
}

for entry in "${entries[@]}"; do
  shape=${entry#? }
  bwd=$([ "${entry%% *}" = B ] && echo 1 || echo 0)  # this shape times the backward
  if [ $bwd = 1 ]; then step_bins=("${bwd_bins[@]}"); else step_bins=("${fwd_bins[@]}"); fi
  read -r b h hkv nq nk d causal dtype options <<<"$shape"
  args=(--batch "$b" --heads "$h" --kv-heads "$hkv" --seqlen-q "$nq" --seqlen-k "$nk" --dim "$d" --dtype "$dtype")
  [ "$causal" = 1 ] && args+=(--causal)
  read -ra kv_flags <<<"$(shape_flags "$shape")"  # page=N, lens=A..B: --page-size, --seqlens-k
  args+=("${kv_flags[@]}")
  # the backward's check in round 1: whole (--check full) where the harness's fp64 backward
  # is cheap, else sample, which for the backward says UNCHECKED and why (fa2_bwd_reference_macs)
  full_check=0
  if [ $bwd = 1 ]; then
    args+=(--backward)
    full_check=$(awk -v b="$b" -v h="$h" -v nq="$nq" -v nk="$nk" -v d="$d" -v c="$causal" -v most="$BWD_FULL_CHECK_MACS" 'BEGIN {
      shift = nk - nq
      pairs = c != 1 ? nq * nk : (shift >= 0 ? nq * (shift + 1) + nq * (nq - 1) / 2 : nk * (nk + 1) / 2)
      print (b * h * pairs * d <= most) ? 1 : 0 }')
  fi
  # The contenders: every step that runs at this shape (the CPU step and the scalar step take
  # seconds per launch: the seed shape only, and the summary's forward shapes, which the README's
  # table gives every step at), the cuBLAS baseline, and torch's backends as one.
  # A KV cache's shape (options): the steps whose kernel file does not answer with
  # fa2_refuse_kv_cache (the others would refuse it, exit 2, in one line each).
  contenders=()
  for bin in "${step_bins[@]}"; do
    case $bin in build/step00/*|build/step01/*) [ "$shape" = "$seed_shape" ] || { [ $summary = 1 ] && [ $bwd = 0 ]; } || continue ;; esac
    [ -n "$options" ] && grep -q fa2_refuse_kv_cache steps/"$(basename "$(dirname "$bin")" | cut -c5-6)"_*/kernel.c* && continue
    contenders+=("$bin")
  done
  [ $bwd = 1 ] || [ -n "$options" ] || contenders+=(build/reference/cublas/fa2)  # no backward, no KV cache
  [ $torch_ok = 1 ] && [ -z "$options" ] && contenders+=(torch)  # no paged or per-sequence input
  for ((round = 1; round <= ROUNDS; round++)); do
    echo
    echo "== $dtype B=$b H=$h/$hkv Nq=$nq Nk=$nk d=$d $([ "$causal" = 1 ] && echo causal || echo non-causal)${options:+ $options}, round $round of $ROUNDS"
    check=$([ "$round" = 1 ] && echo sample || echo off)  # round 1 checks against fp64; later rounds only time
    step_check=$([ "$round" = 1 ] && [ "$full_check" = 1 ] && echo full || echo "$check")
    count=${#contenders[@]}
    for ((i = 0; i < count; i++)); do
      c=${contenders[$(( (i + round - 1) % count ))]}
      case $c in
        torch)
          backends=("${torch_backends[@]}")
          [ $fa4_ok = 1 ] && ! grep -qxF "$shape" <<<"$decode_shapes" && backends+=(fa4)
          [ ${#backends[@]} -gt 0 ] || continue  # BACKENDS=fa4 at a decode shape, or without FA4
          order=()
          for ((j = 0; j < ${#backends[@]}; j++)); do
            order+=("${backends[$(( (j + round - 1) % ${#backends[@]} ))]}")
          done
          run "$PYTHON" reference/sdpa.py "${args[@]}" --warmup 3 --iters "$ITERS" --check "$check" --csv "$csv" --require \
              --backends "$(IFS=,; echo "${order[*]}")" ;;
        build/step00/*) [ "$round" = 1 ] && run "$c" "${args[@]}" --iters 1 --check "$step_check" --csv "$csv" ;;
        build/step01/*) run "$c" "${args[@]}" --warmup 2 --iters 10 --check "$step_check" --csv "$csv" ;;
        *) run "$c" "${args[@]}" --warmup 3 --iters "$ITERS" --check "$step_check" --csv "$csv" ;;
      esac
    done
  done
done

echo
echo "== $gpu${FA2_EMULATE:+ as $FA2_EMULATE}, $today: $runs runs ($ROUNDS rounds), $failed failed, $unsupported unsupported; rows in $csv"
[ $summary = 1 ] && awk -v mode=text -v backward=1 -v ceiling_csv="$ceiling_csv" -f reference/table.awk "$csv"
awk -v mode=text -v backward="$backward" -v ceiling_csv="$ceiling_csv" -v bandwidth_csv="$bandwidth_csv" -v shapes="$(printf '%s;' "${shapes[@]}")" \
    -v decode="$(shapes_of decode | tr '\n' ';')" -f reference/table.awk "$csv"
[ $failed -eq 0 ]
