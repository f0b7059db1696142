/* test_checker.c - proves the checker can fail: the exact reference passes,
 * and each kind of wrong output (one element off, a NaN left by an unwritten
 * element, two rows swapped, a wrong LSE, a tail tile left zero) is rejected. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/harness.h"
#include "../common/numeric.h"
#include "test_util.h"

typedef enum { EXACT, ONE_OFF, ONE_NAN, ROWS_SWAPPED, LSE_OFF, TAIL_ZERO } corruption;
static const char *const names[] = {"exact reference output", "one element off by 0.1", "one element NaN",
                                    "two rows swapped", "one LSE off by 0.01", "tail tile left zero"};

static void run(fa2_dtype t, corruption c)
{
    fa2_params p = {0};
    p.batch = 1, p.heads_q = 2, p.heads_kv = 1, p.seqlen_q = 100, p.seqlen_k = 80, p.head_dim = 64;
    p.causal = 1, p.dtype = t, p.softmax_scale = 0.125f;
    fa2_problem pr;
    fa2_problem_make(&pr, &p, 3, 1.0f);
    fa2_row_set rs;
    fa2_rows_all(&rs, &pr.p);
    const int d = p.head_dim;
    double *o_ref = malloc(sizeof(double) * rs.n * d), *lse_ref = malloc(sizeof(double) * rs.n);
    fa2_reference_rows(&pr, &rs, o_ref, lse_ref);

    /* the "kernel output": the reference rounded to the dtype, laid out like O and LSE */
    uint16_t *o = malloc(fa2_numel_q(&pr.p) * 2);
    float *lse = malloc(fa2_numel_lse(&pr.p) * 4);
    for (int r = 0; r < rs.n; r++) {
        int h = rs.bh[r] % p.heads_q, i = rs.row[r];
        for (int k = 0; k < d; k++) o[((size_t)i * p.heads_q + h) * d + k] = fa2_from_float((float)o_ref[r * d + k], t);
        lse[(size_t)h * p.seqlen_q + i] = (float)lse_ref[r];
    }
    size_t row_elems = (size_t)p.heads_q * d; /* one query row of every head */
    switch (c) {
    case EXACT: break;
    case ONE_OFF: o[50 * row_elems + 3] = fa2_from_float(fa2_to_float(o[50 * row_elems + 3], t) + 0.1f, t); break;
    case ONE_NAN: o[99 * row_elems + d + 63] = 0xffff; break;
    case ROWS_SWAPPED: {
        uint16_t tmp[64];
        memcpy(tmp, o + 60 * row_elems, sizeof tmp);
        memcpy(o + 60 * row_elems, o + 61 * row_elems, sizeof tmp);
        memcpy(o + 61 * row_elems, tmp, sizeof tmp);
        break;
    }
    case LSE_OFF: lse[p.seqlen_q + 70] += 0.01f; break;
    case TAIL_ZERO: memset(o + 96 * row_elems, 0, 4 * row_elems * 2); break;
    }
    fa2_check_result r = fa2_check(&pr.p, &rs, o, lse, o_ref, lse_ref);
    char why[160];
    snprintf(why, sizeof why, "checker said %s (rel_l2 %.2e max_abs %.2e lse %.2e nonfinite %ld)",
             r.pass ? "pass" : "fail", r.rel_l2, r.max_abs, r.lse_max, r.nonfinite);
    int want_pass = c == EXACT;
    report(r.pass == want_pass, why, "checker %s %s: %s", want_pass ? "accepts" : "rejects", fa2_dtype_name(t),
           names[c]);
    free(o), free(lse), free(o_ref), free(lse_ref);
    fa2_rows_free(&rs);
    fa2_problem_free(&pr);
}

int main(void)
{
    for (int t = 0; t < 2; t++)
        for (int c = EXACT; c <= TAIL_ZERO; c++) run((fa2_dtype)t, (corruption)c);
    return test_failures ? 1 : 0;
}
