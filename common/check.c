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
 *  - max_abs: |O| <= max |V| ~ 4.5 for N(0,1) inputs; 4 ulp of that is 1e-2
 *    for fp16, 6e-2 for bf16.
 *  - LSE is computed in fp32 from fp32 scores, never rounded to 16 bits: 1e-3
 *    absolute (fp32 sums of up to 10^6 terms stay well inside it).
 * NaN or inf anywhere in O (e.g. a poisoned element never written) always fails.
 */
#include <math.h>

#include "harness.h"
#include "numeric.h"

fa2_tolerance fa2_tolerance_for(fa2_dtype t)
{
    fa2_tolerance fp16 = {2e-3, 1e-2, 1e-3}, bf16 = {1.6e-2, 6e-2, 1e-3};
    return t == FA2_BF16 ? bf16 : fp16;
}

fa2_check_result fa2_check(const fa2_params *p, const fa2_row_set *rs, const uint16_t *o, const float *lse,
                           const double *o_ref, const double *lse_ref)
{
    fa2_check_result r = {0, 0, 0, 0, rs->n, 0};
    const int d = p->head_dim;
    double err2 = 0, ref2 = 0;
    for (int i = 0; i < rs->n; i++) {
        int b = rs->bh[i] / p->heads_q, h = rs->bh[i] % p->heads_q, row = rs->row[i];
        const uint16_t *orow = o + ((size_t)b * p->seqlen_q + row) * p->heads_q * d + (size_t)h * d;
        for (int c = 0; c < d; c++) {
            double x = fa2_to_float(orow[c], p->dtype), ref = o_ref[(size_t)i * d + c];
            if (!isfinite(x)) {
                r.nonfinite++;
                continue;
            }
            double e = fabs(x - ref);
            err2 += e * e;
            ref2 += ref * ref;
            if (e > r.max_abs) r.max_abs = e;
        }
        if (lse) {
            double x = lse[((size_t)b * p->heads_q + h) * p->seqlen_q + row], ref = lse_ref[i], e;
            if (isinf(ref) && ref < 0) e = (isinf(x) && x < 0) ? 0 : INFINITY;
            else e = isfinite(x) ? fabs(x - ref) : INFINITY;
            if (e > r.lse_max) r.lse_max = e;
        }
    }
    r.rel_l2 = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    fa2_tolerance tol = fa2_tolerance_for(p->dtype);
    r.pass = r.nonfinite == 0 && r.rel_l2 <= tol.rel_l2 && r.max_abs <= tol.max_abs && r.lse_max <= tol.lse;
    return r;
}
