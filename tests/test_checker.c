/* test_checker.c - proves the checker can fail: the exact reference passes,
 * and each kind of wrong output (one element off, a NaN where the reference is
 * finite, an element never written, two rows swapped, a wrong LSE, a tail tile
 * left zero, a NaN input's reach answered with a number) is rejected. It also
 * holds the LSE tolerance to its reason: a peaky problem (large scores) passes
 * with its exact LSE, and one just past the bound fails. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/harness.h"
#include "../common/numeric.h"
#include "test_util.h"

typedef enum {
    EXACT, ONE_OFF, ONE_NAN, ONE_UNWRITTEN, ROWS_SWAPPED, LSE_OFF, LSE_UNWRITTEN, TAIL_ZERO, NAN_ANSWERED,
    NAN_LSE_ANSWERED, NAN_EXACT, LSE_PAST_BOUND, LSE_WITHIN_BOUND, O_PAST_BOUND, CORRUPTIONS
} corruption;
static const char *const names[CORRUPTIONS] = {
    "exact reference output", "one element off by 0.1", "one element NaN", "one element never written",
    "two rows swapped", "one LSE off by 0.01", "one LSE never written", "tail tile left zero",
    "a row Q's NaN reaches written as numbers", "that row's LSE written as a number",
    "a NaN in Q, answered with NaN where it reaches", "one LSE of a peaky problem just past its bound",
    "one LSE of a peaky problem just inside its bound", "one O element of a peaky problem just past its bound"};

static void run(fa2_dtype t, corruption c)
{
    fa2_params p = {0};
    p.batch = 1, p.heads_q = 2, p.heads_kv = 1, p.seqlen_q = 100, p.seqlen_k = 80, p.head_dim = 64;
    p.causal = 1, p.dtype = t, p.softmax_scale = 0.125f;
    const int nan_row = 60; /* sees keys 0 .. 40 */
    fa2_problem pr;
    const int peaky = c == LSE_PAST_BOUND || c == LSE_WITHIN_BOUND || c == O_PAST_BOUND;
    fa2_problem_make(&pr, &p, 3, peaky ? 30.0f : 1.0f);
    if (c == NAN_ANSWERED || c == NAN_LSE_ANSWERED || c == NAN_EXACT)
        pr.q[(size_t)nan_row * p.heads_q * p.head_dim + 5] = fa2_from_float(NAN, t); /* head 0, column 5 */
    fa2_row_set rs;
    fa2_rows_all(&rs, &pr.p);
    const int d = p.head_dim;
    fa2_reference ref;
    fa2_reference_alloc(&ref, &rs, d);
    fa2_reference_rows(&pr, &rs, &ref);

    /* the "kernel output": the reference rounded to the dtype, laid out like O and LSE */
    uint16_t *o = malloc(fa2_numel_q(&pr.p) * 2);
    float *lse = malloc(fa2_numel_lse(&pr.p) * 4);
    for (int r = 0; r < rs.n; r++) {
        int h = rs.bh[r] % p.heads_q, i = rs.row[r];
        for (int k = 0; k < d; k++) o[((size_t)i * p.heads_q + h) * d + k] = fa2_from_float((float)ref.o[r * d + k], t);
        lse[(size_t)h * p.seqlen_q + i] = (float)ref.lse[r];
    }
    size_t row_elems = (size_t)p.heads_q * d; /* one query row of every head */
    const float poison32 = fa2_bits_float(FA2_POISON32);
    switch (c) {
    case EXACT: case NAN_EXACT: break;
    case ONE_OFF: o[50 * row_elems + 3] = fa2_from_float(fa2_to_float(o[50 * row_elems + 3], t) + 0.1f, t); break;
    case ONE_NAN: o[99 * row_elems + d + 63] = fa2_from_float(NAN, t); break;
    case ONE_UNWRITTEN: o[99 * row_elems + d + 63] = FA2_POISON16; break;
    case ROWS_SWAPPED: {
        uint16_t tmp[64];
        memcpy(tmp, o + 60 * row_elems, sizeof tmp);
        memcpy(o + 60 * row_elems, o + 61 * row_elems, sizeof tmp);
        memcpy(o + 61 * row_elems, tmp, sizeof tmp);
        break;
    }
    case LSE_OFF: lse[p.seqlen_q + 70] += 0.01f; break;
    case LSE_UNWRITTEN: lse[p.seqlen_q + 70] = poison32; break;
    case TAIL_ZERO: memset(o + 96 * row_elems, 0, 4 * row_elems * 2); break;
    case NAN_ANSWERED: memset(o + nan_row * row_elems, 0, (size_t)d * 2); break; /* O = 0, as if no key */
    case NAN_LSE_ANSWERED: lse[nan_row] = -INFINITY; break;
    case LSE_PAST_BOUND: case LSE_WITHIN_BOUND: {
        const int r = p.seqlen_q + 70; /* rows of head 1 follow head 0 in rs, as in lse */
        const fa2_tolerance tol = fa2_tolerance_for(t);
        lse[r] = (float)(ref.lse[r] + (c == LSE_PAST_BOUND ? 1.05 : 0.95) * (tol.lse_abs + tol.score_rel * ref.score_mag[r]));
        break;
    }
    case O_PAST_BOUND: { /* the element of row 70, head 1 with the largest allowance */
        const int r = p.seqlen_q + 70;
        const fa2_tolerance tol = fa2_tolerance_for(t);
        int worst = 0;
        for (int k = 1; k < d; k++) worst = ref.o_spread[r * d + k] > ref.o_spread[r * d + worst] ? k : worst;
        const double allowed = tol.max_abs + 2 * tol.score_rel * ref.score_mag[r] * ref.o_spread[r * d + worst];
        o[70 * row_elems + d + worst] = fa2_from_float((float)(ref.o[r * d + worst] + 1.5 * allowed), t);
        break;
    }
    case CORRUPTIONS: break;
    }
    fa2_check_result r = fa2_check(&pr.p, &rs, o, lse, &ref);
    char why[200];
    snprintf(why, sizeof why, "checker said %s (rel_l2 %.2e max_abs %.2e lse %.2e x%.2f nonfinite %ld missed %ld unwritten %ld)",
             r.pass ? "pass" : "fail", r.rel_l2, r.max_abs, r.lse_max, r.lse_worst, r.nonfinite, r.special_missed,
             r.unwritten);
    int want_pass = c == EXACT || c == NAN_EXACT || c == LSE_WITHIN_BOUND;
    report(r.pass == want_pass, why, "checker %s %s: %s", want_pass ? "accepts" : "rejects", fa2_dtype_name(t),
           names[c]);
    free(o), free(lse);
    fa2_reference_free(&ref);
    fa2_rows_free(&rs);
    fa2_problem_free(&pr);
}

int main(void)
{
    for (int t = 0; t < 2; t++)
        for (int c = EXACT; c < CORRUPTIONS; c++) run((fa2_dtype)t, (corruption)c);
    return test_failures ? 1 : 0;
}
