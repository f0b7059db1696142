#!/usr/bin/env bash
# Builds step 11's lever variants (issue 17) into build/variants/NAME from the step's
# kernel: small ones with tools/variant_src.py (each piece replaced is quoted below),
# larger ones from the patches next to this script. Run from the repository root;
# prints one line per variant and exits non-zero if any fails to build.
#   skip     a consumer whose 64 query rows all lie past seqlen_q takes its turns and
#            releases its stages but issues no product and no softmax (the last q tile
#            of a head when seqlen_q is not a multiple of the tile: at N1024 with 192-row
#            tiles, two of the last tile's three consumers)
#   poly4    every 4th column pair of a thread's scores exponentiated on the FMA pipe (a
#            cubic for 2^f after a round-to-nearest split) instead of the MUFU: 25%
#   poly2    the same for every 2nd: 50%
#   kvbound  NOT A CORRECT KERNEL, a bound: K and V are loaded only for an item's first
#            STAGES tiles; later tiles reuse whatever the stage holds. No load scheme
#            (cluster multicast included) can beat a kernel that loads nothing.
#   odirect  (odirect.patch) O written from the registers to global memory: no O buffer
#   n176     (n176.patch) odirect plus 176-key tiles at d128 (FlashAttention-3's 128 x 176)
#   s2       (s2.patch) a second S accumulator: S_{n+1} issued before the softmax of S_n;
#            it fits the registers of two consumers only (two S + O + P: 192 at d64, 224
#            at d128, where ptxas serialises the wgmma), so it has two consumers at d64
#            without a mask too, and at d128 step 11's one-S schedule
#   two      the control for s2: step 11 with two consumers at d64 without a mask
set -uo pipefail
cd "$(dirname "$0")/../.."
here=results/2026-11-22-h100-r13
src=${STEP11_SRC:-steps/11_persistent/kernel.cu}  # step 11 as of the run: STEP11_SRC= a copy of it (README)
mkdir -p build/ab
fail=0
build() {  # NAME SRC [DEFINES]
  if make -s variant step=11 NAME="$1" SRC="$2" DEFINES="${3:-}" >/dev/null 2>&1; then
    echo "built $1: $(grep -o 'Used [0-9]* registers' "build/variants/$1/ptxas.txt" | sort | uniq -c | tr '\n' ' ')$(grep -o '[0-9]* bytes spill stores' "build/variants/$1/ptxas.txt" | sort -u | tr '\n' ' ')"
  else
    echo "FAIL build $1"; fail=1
  fi
}

python3 tools/variant_src.py $src build/ab/skip.cu \
  '    mbarrier_wait(bars.q_full(), (uint32_t)(ordinal & 1));
' '    mbarrier_wait(bars.q_full(), (uint32_t)(ordinal & 1));
    if (w.m0 + c * WG_M >= p.seqlen_q) {  // no row of this consumer exists: keep the protocol, skip the work
        if (w.n_blocks == 0) release(bars.q_empty());
        if (w.n_blocks == 0) return;
        if (c == CONSUMERS - 1) named_barrier_arrive(NB::TURN, 2 * WARPGROUP);
#pragma unroll 1
        for (int n = 0; n < w.n_blocks; n++) {
            mbarrier_wait(bars.k_full(stage_of(n)), parity_of(n));  // a release must not run ahead of its phase
            turn_begin();
            turn_end(false);
            release_after_s(n);
            mbarrier_wait(bars.v_full(stage_of(n)), parity_of(n));
            release(bars.v_empty(stage_of(n)));
        }
        turn_begin();
        turn_end(true);
        return;
    }
' && build skip build/ab/skip.cu

python3 tools/variant_src.py $src build/ab/poly.cu \
  '// Reduces N values pairwise' '// 2^x on the FMA pipe: x = i + f with i = round(x) (adding 1.5 x 2^23 leaves i in the low
// mantissa bits), 2^f for f in [-0.5, 0.5] by a cubic (relative error 1.0e-4, fitted by
// weighted least squares: below fp16'"'"'s rounding of P), then i added to the exponent.
// x is clamped at -127, where the result is exactly 0 (p(0) = 1); NaN passes through.
__device__ __forceinline__ float exp2_fma(float x)
{
    x = x < -127.0f ? -127.0f : x;
    const float shifted = x + 12582912.0f;  // 1.5 x 2^23
    const float f = x - (shifted - 12582912.0f);
    const float p = fmaf(fmaf(fmaf(0.05500858f, f, 0.24221037f), f, 0.6932829f), f, 1.0f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(shifted) << 23));
}
// Column pair nt of the unrolled softmax loop: a constant, so the choice folds away.
__device__ __forceinline__ float exp2_mixed(int nt, float x) { return nt % POLY_EVERY == POLY_EVERY - 1 ? exp2_fma(x) : exp2_approx(x); }

// Reduces N values pairwise' \
  '            for (int nt = 0; nt < BLOCK_N / 8; nt++) {
                s_acc[4 * nt + 2 * r] = row_vals[2 * nt] = exp2_approx(fmaf(s_acc[4 * nt + 2 * r], scale_log2, -m_use));
                s_acc[4 * nt + 2 * r + 1] = row_vals[2 * nt + 1] = exp2_approx(fmaf(s_acc[4 * nt + 2 * r + 1], scale_log2, -m_use));
            }' '            for (int nt = 0; nt < BLOCK_N / 8; nt++) {
                s_acc[4 * nt + 2 * r] = row_vals[2 * nt] = exp2_mixed(nt, fmaf(s_acc[4 * nt + 2 * r], scale_log2, -m_use));
                s_acc[4 * nt + 2 * r + 1] = row_vals[2 * nt + 1] = exp2_mixed(nt, fmaf(s_acc[4 * nt + 2 * r + 1], scale_log2, -m_use));
            }' \
  && build poly4 build/ab/poly.cu -DPOLY_EVERY=4 && build poly2 build/ab/poly.cu -DPOLY_EVERY=2

python3 tools/variant_src.py $src build/ab/kvbound.cu \
  '        mbarrier_arrive_expect_tx(full, L::KV_STAGE_BYTES);
' '        if (n >= C::STAGES) {  // the bound: no copy, the stage keeps an older tile
            mbarrier_arrive(full);
            return;
        }
        mbarrier_arrive_expect_tx(full, L::KV_STAGE_BYTES);
' && build kvbound build/ab/kvbound.cu

python3 tools/variant_src.py $src build/ab/two.cu \
  'using ManyItemsConfig = Config<D, D == 64 ? 3 : 2>;' 'using ManyItemsConfig = Config<D, 2>;' \
  'ManyItemsConfig<64>::CONSUMERS == 3 &&' 'ManyItemsConfig<64>::CONSUMERS == 2 &&' && build two build/ab/two.cu

for v in odirect n176 s2; do
  if [ -f $here/$v.patch ]; then
    patch -s -o build/ab/$v.cu $src $here/$v.patch && build $v build/ab/$v.cu || { echo "FAIL patch $v"; fail=1; }
  fi
done
exit $fail
