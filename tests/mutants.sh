#!/usr/bin/env bash
# Proves the GPU matrix fails on bugs it exists to catch. Each mutant is a step (07, the
# tuned kernel; 08, its loads on TMA; 12, the persistent kernel: its work queue's counter not
# reset for the next call, the causal order's short last section read as a full one; 13, the
# split-KV decode kernel: among its bugs, a tile's
# last block that leaves its arrival counter at `splits` (the matrix's second call on the same
# workspace then merges nothing), a block with an empty key range that never arrives, and with
# per-sequence lengths a merge that waits for the most splits instead of its tile's, a tile's
# last, shorter key range dropped, a work queue whose next item is not reset for the next
# call, or an item looked up in the wrong group of 32 pairs (batches past 32 tiles); or
# 14, the backward: D = rowsum(dO * O) missing half its products, the dQ atomics of a lane's
# second row dropped, the staged dQ's last reduction of each warp dropped, the causal limit of dK, dV and dQ one key short;
# or 15, the backward on wgmma: D half its products, LSE not in log2 units, the causal limit one
# query late, both consumers' dQ parts added onto the first, the two columns of a dQ pair swapped, dS
# stored with its two 8-key halves swapped) with one planted
# bug (named in its fa2_name), built by `make variant`; each runs through build/tests/gpu_matrix in a
# process of its own (a mutant that writes far out of bounds ends its process with an
# illegal address: it must not end the others' runs too), three at a time, and each must
# draw at least one FAIL line. With --against COMMIT, the matrix of that commit runs on
# the same mutants too, to show which of them it let through.
# usage: bash tests/mutants.sh [--against COMMIT]     (on a GPU machine)
#        bash tests/mutants.sh --texts                 (no GPU, no build: each mutant's text is
#          in its step's kernel exactly once, as make test checks, so that a kernel edit
#          cannot leave a planted bug that no longer plants anything)
#   MUTANT_STEPS="08 14" bash tests/mutants.sh: only the mutants of those steps
#   MUTANT_JOBS=N: N matrices at a time (default 3; each is mostly the CPU's fp64 reference)
#   FA2_TEST_FAIL_LIMIT=1: each matrix stops at its first failing case (test_util.h), which
#     is all a mutant needs; the failing-case counts then say 1 (leave it unset with --against)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
jobs=${MUTANT_JOBS:-3}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "error: MUTANT_JOBS '$jobs' is not allowed (allowed: a whole number from 1)" >&2; exit 2; }
# step | mutant | text in the step's kernel | its replacement
mutants=(
  "07|no_lazy_rescale|__any_sync(0xffffffffu, grown)|nb == 0"
  "07|nan_lse_as_no_key|l_run[mt][r] != 0.0f ? (m_run|l_run[mt][r] > 0.0f ? (m_run"
  "07|o_rows_past_seqlen|if (m0 + row < p.seqlen_q)|if (true)"
  "07|default_stream|C::THREADS, smem_bytes, (cudaStream_t)stream>>>|C::THREADS, smem_bytes, 0>>>"
  "07|small_grid_never|else if (fits[SMALL_GRID].blocks_per_sm >= 1) c.config = SMALL_GRID;|else if (false) c.config = SMALL_GRID;"
  "07|oversized_for_99kb|else if (fits[SMALL_GRID].blocks_per_sm >= 1) c.config = SMALL_GRID;|else if (true) c.config = SMALL_GRID;"
  "07|heads_as_batch|h = blockIdx.y, b = blockIdx.z|h = blockIdx.z % p.heads_q, b = blockIdx.y % p.batch"
  "08|slab_as_row_half|kk / 4 * L::Q_SLAB_BYTES|kk / 4 * 128"
  "08|no_swizzle_in_map|CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B|CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B"
  "12|persistent_queue_not_reset|*draws = 0;|(void)draws;"
  "12|persistent_order_short_section|const int section_pairs = min(ORDER_PAIRS, pairs - section * ORDER_PAIRS);|const int section_pairs = ORDER_PAIRS;"
  "13|merge_unnormalised|exp2_approx((lse_s[i] - row_lse) * LOG2E)|exp2_approx((lse_s[i] - lse_shift) * LOG2E)"
  "13|counter_not_reset|*counter = 0;|(void)counter;"
  "13|empty_range_not_counted|last = atomicAdd(counter, 1) == splits - 1;|last = tile_lo < tile_hi && atomicAdd(counter, 1) == splits - 1;"
  "13|warps_unweighted|weight[w] = exp2_approx(m_merge[w][row] - finite_or_zero(m_max));|weight[w] = m_merge[w][row] == -INFINITY ? 0.0f : 1.0f;"
  "13|splits_overlap|tile_hi = min(n_tiles, tile_lo + tiles_per_split)|tile_hi = min(n_tiles, tile_lo + tiles_per_split + 1)"
  "13|causal_first_row_only|key > row_query[e / 2] + shift|key > row_query[0] + shift"
  "13|large_layout_always|if (fits[LARGE_LAYOUT] > 0) {|if (true) {"
  "13|page_off_by_one|pages[key >> page_shift]|pages[(key >> page_shift) + 1]"
  "13|page_ring_a_tile_late|next_page = page_of(nn + 2);|next_page = page_of(nn + 1);"
  "13|seqlens_k_ignored|const int seqlen_k = p.seqlens_k ? p.seqlens_k[b] : p.seqlen_k;|const int seqlen_k = p.seqlen_k;"
  "13|merge_counts_grid_splits|last = atomicAdd(counter, 1) == splits - 1;|last = atomicAdd(counter, 1) == grid_splits - 1;"
  "13|balanced_last_range_dropped|const bool last = rest != 0|const bool last = rest < 0"
  "13|queue_not_reset|*next_item = 0;|(void)next_item;"
  "13|queue_group_search_off_by_one|if (qs.starts[k][mid] <= j) lo = mid;|if (qs.starts[k][mid] < j) lo = mid;"
  "14|bwd_wrong_d|acc = fmaf(x.x, y.x, fmaf(x.y, y.y, acc));|acc = fmaf(x.x, y.x, acc);"
  "14|bwd_dq_rows_hi_dropped|if (hi_in) atomicAdd(dq_hi + col|if (false) atomicAdd(dq_hi + col"
  "14|bwd_dq_staged_rows_dropped|for (int i = 0; i < DQ_READ_ROWS * D / DQ_SEG; i++)|for (int i = 0; i < DQ_READ_ROWS * D / DQ_SEG - 1; i++)"
  "14|bwd_causal_off_by_one|min(p.seqlen_k - 1, row + shift)|min(p.seqlen_k - 1, row + shift - 1)"
  "14|bwd_order_short_section|return {(int)(in_section / section_pairs),|return {(int)(in_section / BWD_ORDER_PAIRS),"
  "15|wgbwd_wrong_d|acc = fmaf(x.x, y.x, fmaf(x.y, y.y, acc));|acc = fmaf(x.x, y.x, acc);"
  "15|wgbwd_lse_not_log2|p.lse[bh * p.seqlen_q + i] * LOG2E|p.lse[bh * p.seqlen_q + i]"
  "15|wgbwd_causal_off_by_one|vis_lo[r] = p.causal ? keys[r] - shift - m0 - 2 * tq : INT_MIN;|vis_lo[r] = p.causal ? keys[r] - shift - m0 - 2 * tq + 1 : INT_MIN;"
  "15|wgbwd_dq_parts_onto_one|bulk_reduce_add_f32(dq_tile + c * DQ_PART|bulk_reduce_add_f32(dq_tile + 0 * DQ_PART"
  "15|wgbwd_dq_pair_swapped|pack2<T>(lo.x * s, lo.y * s)|pack2<T>(lo.y * s, lo.x * s)"
  "15|wgbwd_ds_key_halves_swapped|st_chunk = 2 * warp + lane / 8 % 2;|st_chunk = 2 * warp + lane / 16 % 2;"
  "15|wgbwd_order_short_section|return {(int)(in_section / section_pairs),|return {(int)(in_section / BWD_ORDER_PAIRS),"
  "15|wgbwd_order_sections_overlap|const int64_t pair = section * BWD_ORDER_PAIRS + in_section % section_pairs;|const int64_t pair = in_section % section_pairs;"
)
if [ -n "${MUTANT_STEPS:-}" ]; then
  kept=()
  for m in "${mutants[@]}"; do [[ " $MUTANT_STEPS " == *" ${m%%|*} "* ]] && kept+=("$m"); done
  [ ${#kept[@]} -gt 0 ] || { echo "error: MUTANT_STEPS='$MUTANT_STEPS' names no step with mutants (allowed: $(printf '%s\n' "${mutants[@]}" | cut -d'|' -f1 | sort -u | paste -sd' '))" >&2; exit 2; }
  mutants=("${kept[@]}")
fi
# mutant_src LINE: the mutant's kernel source, build/mutants/MUTANT.cu, from its line
mutant_src() {
  [ "$(tr -cd '|' <<<"$1" | wc -c)" = 3 ] || { echo "FAIL mutant line '$1': its texts hold a '|' (allowed: none, '|' separates the fields)"; return 1; }
  IFS='|' read -r step mutant from to <<<"$1"
  src=$(ls steps/"${step}"_*/kernel.cu)
  name=$(basename "$(dirname "$src")")
  python3 tools/variant_src.py "$src" "build/mutants/$mutant.cu" "$from" "$to" "\"$name\"" "\"${step}_mutant_$mutant\"" ||
    { echo "FAIL mutant $mutant: its text is not in $src once"; return 1; }
}
mkdir -p build/mutants  # as deep as the step's own file: its #include "../../common/..." still resolve
if [ "${1:-}" = --texts ]; then
  failed=0
  for m in "${mutants[@]}"; do
    if mutant_src "$m"; then echo "PASS mutant $mutant: its text is in $src once"; else failed=1; fi
  done
  exit $failed
fi
make -s all >/dev/null || { echo "FAIL make all"; exit 1; }
libs=()
for m in "${mutants[@]}"; do
  mutant_src "$m" || exit 1
  make -s variant step="$step" NAME="mutant-$mutant" SRC="build/mutants/$mutant.cu" || echo "FAIL build mutant $mutant" &
  libs+=("build/variants/mutant-$mutant/libfa2.so")
done
wait
# run_matrix MATRIX LOG: MATRIX on every mutant's library, one process each, MUTANT_JOBS
# at a time (a new one starts as soon as one ends); the logs go one after the other into LOG,
# each ending "# exit N", N the matrix's exit status (a mutant that makes the step divide by
# zero or fault ends it by a signal).
run_matrix() {
  local i
  for ((i = 0; i < ${#libs[@]}; i++)); do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    { "$1" "${libs[$i]}" >"$2.$i" 2>&1; echo "# exit $? ${libs[$i]}" >>"$2.$i"; } &
  done
  wait
  for ((i = 0; i < ${#libs[@]}; i++)); do cat "$2.$i"; rm -f "$2.$i"; done >"$2"
}
run_matrix build/tests/gpu_matrix build/variants/mutants-matrix.log
if [ "${1:-}" = --against ]; then
  old=build/variants/matrix-$2; rm -rf "$old"; mkdir -p "$old"
  git archive "$2" | tar -x -C "$old"  # that commit's tree, built by its own Makefile
  make -s -C "$old" build/tests/gpu_matrix >"$old.log" 2>&1 || echo "FAIL build the matrix of $2 (see $old.log)"
  run_matrix "$old/build/tests/gpu_matrix" "build/variants/mutants-matrix-$2.log"
fi
# A mutant is caught when its matrix prints a FAIL line, or when the matrix ends by a signal
# or with an error and no FAIL line (make test counts that as a failure too).
for m in "${mutants[@]}"; do
  IFS='|' read -r step mutant _ <<<"$m"
  fails=$(grep -c "^FAIL ${step}_mutant_$mutant" build/variants/mutants-matrix.log)
  status=$(grep -o "^# exit [0-9]* build/variants/mutant-$mutant/" build/variants/mutants-matrix.log | cut -d' ' -f3)
  if [ "$fails" -gt 0 ]; then echo "PASS the matrix catches mutant $mutant ($fails failing cases)"
  elif [ "${status:-0}" -ne 0 ]; then echo "PASS the matrix catches mutant $mutant (its matrix ended with exit $status before its last case)"
  else echo "FAIL the matrix lets mutant $mutant through"; fi
  if [ "${1:-}" = --against ]; then
    echo "# matrix of $2 on mutant $mutant: $(grep -c "^FAIL ${step}_mutant_$mutant" "build/variants/mutants-matrix-$2.log") failing cases"
  fi
done
