/* check.c - pass/fail against the fp64 reference.
 *
 * Tolerances, and why (inputs are already rounded to the dtype, so the
 * reference sees exactly what the kernel sees; what remains is the kernel's own
 * rounding):
 *  - The kernels accumulate in fp32 but round P = exp(S - m) to the dtype before
 *    the P.V product (the tensor cores take 16-bit operands), and round O to the
 *    dtype on output. Each is a relative error of at most one half ulp:
 *    2^-11 (4.9e-4) for fp16, 2^-8 (3.9e-3) for bf16.
 *  - rel_l2: the two roundings add up to about 1 ulp per element, mostly random in
 *    sign, so the L2 error sits near 0.5 ulp; the bound is 4 ulp (fp16 2e-3,
 *    bf16 1.6e-2), far below what one wrong row, column or tile produces
 *    (a row of 64 wrong values in a 1024-row head moves it by ~0.25).
 *  - max_abs: |O| <= max |V| ~ 4.5 for N(0,1) V (V is never scaled); 4 ulp of that
 *    is 1e-2 for fp16, 6e-2 for bf16.
 *  - The scores themselves: each is an fp32 sum of head_dim products, off by at
 *    most about head_dim rounding errors of 2^-24 relative to the sum of the
 *    products' magnitudes (the reference's score_mag). head_dim <= 256, and the
 *    tensor cores' accumulation may truncate rather than round: e = 2^-15
 *    score_mag bounds a row's score errors. With N(0,1) inputs score_mag is about
 *    10 at d128 (e ~ 3e-4); with --scale 30, about 6,500 (e ~ 0.2).
 *  - LSE is fp32 throughout and never rounded to 16 bits, but it is about as
 *    large as the row's largest score, and the softmax weights sum to 1, so it
 *    inherits up to e: |error| <= 1e-3 + e, the 1e-3 for the fp32 sum of up to
 *    10^6 exponentials, exp2 and log2. (At --scale 30 LSE is about 3,000, where
 *    one fp32 ulp is 2.4e-4: a fixed 1e-3 would fail correct kernels.)
 *  - The same score errors move P_j by a factor within exp(+-e) and O_c by at
 *    most 2 e sum_j P_j |V_jc - O_c| (the reference's o_spread), which max_abs
 *    allows on top, element by element. It is near 0 where one key dominates
 *    (P one-hot: O is that V row whatever e is) and matters where two large
 *    scores nearly tie; with N(0,1) inputs it adds about 5e-4.
 * Non-finite values follow IEEE arithmetic (fa2.h): where the reference is NaN
 * (a NaN input reaches the entry) or -inf (LSE of a row that sees no key) the
 * output must be the same; anywhere else a NaN or inf fails. An entry still
 * holding the poison bits was never written, and fails.
 */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "numeric.h"

fa2_tolerance fa2_tolerance_for(fa2_dtype t)
{
    const double lse_abs = 1e-3, score_rel = 1.0 / 32768; /* 2^-15 */
    fa2_tolerance fp16 = {2e-3, 1e-2, lse_abs, score_rel}, bf16 = {1.6e-2, 6e-2, lse_abs, score_rel};
    return t == FA2_BF16 ? bf16 : fp16;
}

static uint32_t float_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

fa2_check_result fa2_check(const fa2_params *p, const fa2_row_set *rs, const uint16_t *o, const float *lse,
                           const fa2_reference *ref)
{
    fa2_check_result r;
    memset(&r, 0, sizeof r);
    r.rows_checked = rs->n;
    const int d = p->head_dim;
    const fa2_tolerance tol = fa2_tolerance_for(p->dtype);
    double err2 = 0, ref2 = 0;
    for (int i = 0; i < rs->n; i++) {
        const int b = rs->bh[i] / p->heads_q, h = rs->bh[i] % p->heads_q, row = rs->row[i];
        const double score_err = tol.score_rel * ref->score_mag[i];
        const uint16_t *orow = o + b * p->o_batch_stride + (int64_t)row * p->o_row_stride + h * p->o_head_stride;
        for (int c = 0; c < d; c++) {
            const double x = fa2_to_float(orow[c], p->dtype), want = ref->o[(size_t)i * d + c];
            if (orow[c] == FA2_POISON16) {
                r.unwritten++;
            } else if (isnan(want)) {
                r.special_missed += !isnan(x);
            } else if (!isfinite(x)) {
                r.nonfinite++;
            } else {
                const double e = fabs(x - want), allowed = tol.max_abs + 2 * score_err * ref->o_spread[(size_t)i * d + c];
                err2 += e * e;
                ref2 += want * want;
                if (e > r.max_abs) r.max_abs = e;
                if (e / allowed > r.o_worst) r.o_worst = e / allowed;
            }
        }
        if (!lse) continue;
        const float x = lse[((size_t)b * p->heads_q + h) * p->seqlen_q + row];
        const double want = ref->lse[i];
        if (float_bits(x) == FA2_POISON32) {
            r.unwritten++;
        } else if (isnan(want) || isinf(want)) { /* NaN reached the row, or -inf: it sees no key */
            r.special_missed += isnan(want) ? !isnan(x) : !(isinf(x) && (x < 0) == (want < 0));
        } else if (!isfinite(x)) {
            r.nonfinite++;
        } else {
            const double e = fabs(x - want), allowed = tol.lse_abs + score_err;
            if (e > r.lse_max) r.lse_max = e;
            if (e / allowed > r.lse_worst) r.lse_worst = e / allowed;
        }
    }
    r.rel_l2 = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    r.pass = r.unwritten == 0 && r.special_missed == 0 && r.nonfinite == 0 && r.rel_l2 <= tol.rel_l2 &&
             r.o_worst <= 1.0 && r.lse_worst <= 1.0;
    return r;
}

long fa2_count_unwritten(const fa2_params *p, const uint16_t *o, const float *lse)
{
    long unwritten = 0;
#pragma omp parallel for collapse(2) reduction(+ : unwritten)
    for (int b = 0; b < p->batch; b++)
        for (int i = 0; i < p->seqlen_q; i++)
            for (int h = 0; h < p->heads_q; h++) {
                const uint16_t *orow = o + b * p->o_batch_stride + (int64_t)i * p->o_row_stride + h * p->o_head_stride;
                for (int c = 0; c < p->head_dim; c++) unwritten += orow[c] == FA2_POISON16;
            }
    if (lse)
        for (size_t i = 0; i < fa2_numel_lse(p); i++) unwritten += float_bits(lse[i]) == FA2_POISON32;
    return unwritten;
}
