#!/usr/bin/env bash
# reference/compare.sh - the engine of `make compare`: every step, the cuBLAS baseline and
# torch SDPA (when torch is installed) on the same shapes, timed by the same rules, into one
# CSV, then one table per shape.
#
# usage: bash reference/compare.sh [seed|all]   (default: $SHAPES, else seed)
#   seed: B=2 H=8 N=1024 d=128; all: the benchmark shapes and the seqlen sweep (reference/shapes.sh).
# Needs the binaries built (make all and the reference targets). Writes, appending:
#   results/compare-<gpu>-<date>.csv   the harness's CSV rows (common/main.c)
#   results/ceiling-<gpu>-<date>.csv   the mma.sync m16n8k16 ceiling of the GPU, and on Hopper
#                                      the wgmma m64n256k16 ceiling
# Exit: 0 all ran and passed, 1 a check failed or a run broke, 2 bad argument or
# missing binaries, 3 no usable GPU.
set -u
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=reference/shapes.sh
. reference/shapes.sh
PYTHON=${PYTHON:-python3}

mode=${1:-${SHAPES:-seed}}
case $mode in
  seed) shapes=("$SEED_SHAPE") ;;
  all) shapes=("${BENCH_SHAPES[@]}")
       for s in "${SWEEP_SHAPES[@]}"; do  # the sweep's N=4096 point is a benchmark shape already
         case "|$(printf '%s|' "${shapes[@]}")" in *"|$s|"*) ;; *) shapes+=("$s") ;; esac
       done ;;
  *) echo "error: compare.sh: shapes '$mode' is not allowed (allowed: seed, all)" >&2; exit 2 ;;
esac

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$gpu" ]; then
  echo "compare: no GPU found (nvidia-smi lists none): the comparison needs an sm_80 or newer GPU" >&2
  exit 3
fi

step_dirs=(steps/[0-9][0-9]_*)
missing=()
for dir in "${step_dirs[@]}"; do
  id=$(basename "$dir" | cut -c1-2)
  [ -x "build/step$id/fa2" ] || missing+=("build/step$id/fa2")
done
for bin in build/reference/cublas/fa2 build/reference/mma_ceiling build/reference/wgmma_ceiling; do [ -x "$bin" ] || missing+=("$bin"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "error: compare.sh: not built: ${missing[*]} (build them first: make all and the reference targets)" >&2
  exit 2
fi

slug=$(printf '%s' "$gpu" | tr '[:upper:]' '[:lower:]' | sed -e 's/[^a-z0-9][^a-z0-9]*/-/g' -e 's/^-//' -e 's/-$//')
today=$(date -u +%F)  # UTC, as the harness dates its rows
mkdir -p results
csv=results/compare-$slug-$today.csv
ceiling_csv=results/ceiling-$slug-$today.csv

echo "== mma.sync ceiling of $gpu"
build/reference/mma_ceiling --csv "$ceiling_csv"
rc=$?
[ $rc -eq 3 ] && exit 3
[ $rc -ne 0 ] && echo "compare: the ceiling probe failed (exit $rc): the % of ceiling column stays empty"
build/reference/wgmma_ceiling --csv "$ceiling_csv"
rc=$?
[ $rc -eq 3 ] && echo "compare: no wgmma on this GPU (step 07 runs only on compute capability 9.0): the % of wgmma column stays empty"
[ $rc -ne 0 ] && [ $rc -ne 3 ] && echo "compare: the wgmma ceiling probe failed (exit $rc): the % of wgmma column stays empty"

torch_ok=0
if "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  torch_ok=1
else
  echo "compare: $PYTHON cannot import torch with CUDA: torch SDPA rows skipped (pip install torch to add them)"
fi

runs=0 failed=0 unsupported=0
run() { # run COMMAND...: one timed, checked run; its own line says what happened
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

for shape in "${shapes[@]}"; do
  read -r b h hkv n d causal <<<"$shape"
  args=(--batch "$b" --heads "$h" --kv-heads "$hkv" --seqlen "$n" --dim "$d")
  [ "$causal" = 1 ] && args+=(--causal)
  echo
  echo "== B=$b H=$h/$hkv N=$n d=$d $([ "$causal" = 1 ] && echo causal || echo non-causal)"
  for dir in "${step_dirs[@]}"; do
    id=$(basename "$dir" | cut -c1-2)
    case $id in
      # The CPU step and the scalar step take seconds per launch: seed shape only, few launches.
      00) [ "$shape" = "$SEED_SHAPE" ] || continue; extra=(--iters 1) ;;
      01) [ "$shape" = "$SEED_SHAPE" ] || continue; extra=(--warmup 2 --iters 10) ;;
      *) extra=() ;;
    esac
    run "build/step$id/fa2" "${args[@]}" ${extra[@]+"${extra[@]}"} --check sample --csv "$csv"
  done
  run build/reference/cublas/fa2 "${args[@]}" --check sample --csv "$csv"
  if [ $torch_ok = 1 ]; then
    run "$PYTHON" reference/sdpa.py "${args[@]}" --csv "$csv" --require
  fi
done

echo
echo "== $gpu, $today: $runs runs, $failed failed, $unsupported unsupported; rows in $csv"
awk -v mode=text -v ceiling_csv="$ceiling_csv" -v shapes="$(printf '%s;' "${shapes[@]}")" -f reference/table.awk "$csv"
[ $failed -eq 0 ]
