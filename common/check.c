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
#include <stdlib.h>
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

/* ---- the backward ----------------------------------------------------------------
 * dQ, dK and dV against the fp64 backward given the step's own O: D = rowsum(dO * O)
 * taken from O in the dtype, as FA2 takes it (fa2_ref_backward_from_o_f64).
 * The bound on each tensor's relative L2 error is 8 u (u = 2^-11 fp16, 2^-8 bf16:
 * 3.9e-3 and 3.1e-2), the bound tests/test_backward.c holds step 00 to, and why: P and
 * dS are rounded to the dtype before their products (the tensor cores take 16-bit
 * operands) and dQ, dK, dV on output, each a relative error of at most u per element,
 * mostly random in sign, so a tensor's relative L2 error sits near 1-2 u (step 00:
 * 0.4-1.7 u), while a wrong row, head or tile of a 100-row tensor moves it by ~0.1.
 * The reference is given the step's O rather than its own fp64 O because where one
 * key takes nearly all of a row's weight (--scale 30) dP - D nearly cancels, and O's
 * rounding to 16 bits moves dQ and dK by 2 to 90 u of the exact gradient: a cost of
 * the algorithm (the forward keeps O in the dtype), not of the step. The O given is
 * the one the forward check above held to the fp64 forward. The bound is FA2_BWD_TOL_U
 * (harness.h), shared with the test. */

double fa2_bwd_reference_macs(const fa2_params *p)
{
    return (double)p->batch * p->heads_q * fa2_visible_pairs(p) * p->head_dim;
}

static double *to_doubles(const uint16_t *x, size_t n, fa2_dtype t, const char *what)
{
    double *y = fa2_xmalloc(sizeof(double) * (n ? n : 1), what);
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)n; i++) y[i] = fa2_to_float(x[i], t);
    return y;
}

fa2_bwd_check_result fa2_check_backward(const fa2_problem *pr, const uint16_t *o, const uint16_t *dout,
                                        const uint16_t *dq, const uint16_t *dk, const uint16_t *dv)
{
    const fa2_params *p = &pr->p;
    const fa2_dtype t = p->dtype;
    const size_t nq = fa2_numel_q(p), nkv = fa2_numel_kv(p);
    double *q64 = to_doubles(pr->q, nq, t, "the fp64 Q"), *k64 = to_doubles(pr->k, nkv, t, "the fp64 K");
    double *v64 = to_doubles(pr->v, nkv, t, "the fp64 V"), *o64 = to_doubles(o, nq, t, "the fp64 O");
    double *do64 = to_doubles(dout, nq, t, "the fp64 dO");
    double *ref[3] = {fa2_xmalloc(sizeof(double) * (nq ? nq : 1), "the fp64 reference dQ"),
                      fa2_xmalloc(sizeof(double) * (nkv ? nkv : 1), "the fp64 reference dK"),
                      fa2_xmalloc(sizeof(double) * (nkv ? nkv : 1), "the fp64 reference dV")};
    fa2_ref_backward_from_o_f64(p, q64, k64, v64, o64, do64, ref[0], ref[1], ref[2]);
    free(q64), free(k64), free(v64), free(o64), free(do64);

    fa2_bwd_check_result r;
    memset(&r, 0, sizeof r);
    r.tol = FA2_BWD_TOL_U * fa2_unit_roundoff(t);
    const uint16_t *out[3] = {dq, dk, dv};
    const size_t n[3] = {nq, nkv, nkv};
    r.pass = 1;
    for (int g = 0; g < 3; g++) {
        double err2 = 0, ref2 = 0, max_abs = 0;
        long nonfinite = 0, missed = 0, unwritten = 0;
        const uint16_t *x = out[g];
        const double *want = ref[g];
#pragma omp parallel for schedule(static) reduction(+ : err2, ref2, nonfinite, missed, unwritten) reduction(max : max_abs)
        for (long long i = 0; i < (long long)n[g]; i++) {
            const double got = fa2_to_float(x[i], t), w = want[i];
            if (x[i] == FA2_POISON16) {
                unwritten++;
            } else if (!isfinite(w)) { /* NaN reached the entry: the step's must be NaN too */
                missed += isnan(w) ? !isnan(got) : got != w;
            } else if (!isfinite(got)) {
                nonfinite++;
            } else {
                const double e = fabs(got - w);
                err2 += e * e;
                ref2 += w * w;
                if (e > max_abs) max_abs = e;
            }
        }
        r.rel_l2[g] = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
        r.max_abs[g] = max_abs;
        r.nonfinite += nonfinite;
        r.special_missed += missed;
        r.unwritten += unwritten;
        r.pass = r.pass && r.rel_l2[g] <= r.tol;
        free(ref[g]);
    }
    r.pass = r.pass && r.nonfinite == 0 && r.special_missed == 0 && r.unwritten == 0;
    return r;
}
