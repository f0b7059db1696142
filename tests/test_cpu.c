/* test_cpu.c - the CPU tests: step 00's tiled online-softmax loop and its naive
 * materialise-S twin, each against the fp64 reference, and each other, on many
 * shapes (seqlen 1, tails of every tile, Nq != Nk both ways, causal rows that
 * see no key, GQA, several head dims, fp16 and bf16); peaky inputs (--scale 30
 * and 100, where LSE is in the thousands); and a NaN in Q, K or V, which must
 * reach exactly the outputs fa2.h says it reaches. On each, the keys cut into
 * 2, 3 and 64 ranges (step 00's split-KV loop: ranges run alone, then merged by
 * their LSE), against the fp64 reference: 64 ranges leave most of them empty. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

int fa2_cpu_naive_forward(const fa2_params *p);
int fa2_cpu_split_forward(const fa2_params *p, int splits);

typedef struct {
    int batch, hq, hkv, nq, nk, d, causal;
    fa2_dtype t;
    float scale;   /* multiplies Q and K */
    nan_site nan;  /* where a NaN goes (batch 0, head 0) */
    int nan_row, nan_col;
} shape;

static int rows_without_keys(const fa2_params *p) /* causal rows i with i + Nk - Nq < 0 */
{
    if (!p->causal) return 0;
    int shift = p->seqlen_k - p->seqlen_q;
    return shift >= 0 ? 0 : (-shift < p->seqlen_q ? -shift : p->seqlen_q);
}

/* O exactly 0 and LSE exactly -inf on every row that sees no key. */
static int empty_rows_ok(const fa2_params *p, const uint16_t *o, const float *lse, char *why, size_t len)
{
    int empty = rows_without_keys(p);
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < empty; i++) {
                const uint16_t *row = o + (((size_t)b * p->seqlen_q + i) * p->heads_q + h) * p->head_dim;
                for (int c = 0; c < p->head_dim; c++)
                    if (fa2_to_float(row[c], p->dtype) != 0.0f) {
                        snprintf(why, len, "row %d sees no key but O[%d] = %g", i, c, fa2_to_float(row[c], p->dtype));
                        return 0;
                    }
                float l = lse[((size_t)b * p->heads_q + h) * p->seqlen_q + i];
                if (!(isinf(l) && l < 0)) {
                    snprintf(why, len, "row %d sees no key but LSE = %g", i, l);
                    return 0;
                }
            }
    return 1;
}

static void run_shape(shape s)
{
    fa2_params p = {0};
    p.batch = s.batch, p.heads_q = s.hq, p.heads_kv = s.hkv, p.seqlen_q = s.nq, p.seqlen_k = s.nk;
    p.head_dim = s.d, p.causal = s.causal, p.dtype = s.t, p.softmax_scale = 1.0f / sqrtf((float)s.d);
    fa2_problem pr;
    fa2_problem_make(&pr, &p, 7 + s.nq * 31 + s.nk, s.scale);
    put_nan(&pr, s.nan, s.nan_row, s.nan_col);

    char name[200], why[240];
    snprintf(name, sizeof name, "B%d H%d/%d Nq%d Nk%d d%d %s %s", s.batch, s.hq, s.hkv, s.nq, s.nk, s.d,
             s.causal ? "causal" : "non-causal", fa2_dtype_name(s.t));
    if (s.scale != 1.0f) snprintf(name + strlen(name), sizeof name - strlen(name), " scale %g", (double)s.scale);
    if (s.nan)
        snprintf(name + strlen(name), sizeof name - strlen(name), " %s %d", nan_site_names[s.nan], s.nan_row);
    size_t nq = fa2_numel_q(&pr.p), nl = fa2_numel_lse(&pr.p);
    uint16_t *o_tiled = malloc(nq * 2), *o_naive = malloc(nq * 2);
    float *l_tiled = malloc(nl * 4), *l_naive = malloc(nl * 4);

    fa2_params run;
    fa2_buffers_make(&run, &pr, 0, 0);
    int rc = fa2_forward(&run, NULL);
    fa2_buffers_fetch(&run, 0, o_tiled, l_tiled);
    fa2_buffers_poison(&run, 0);
    rc |= fa2_cpu_naive_forward(&run);
    fa2_buffers_fetch(&run, 0, o_naive, l_naive);
    fa2_buffers_free(&run, 0);

    fa2_row_set rs;
    fa2_rows_all(&rs, &pr.p);
    fa2_reference ref;
    fa2_reference_alloc(&ref, &rs, s.d);
    fa2_reference_rows(&pr, &rs, &ref);
    fa2_check_result ct = fa2_check(&pr.p, &rs, o_tiled, l_tiled, &ref);
    fa2_check_result cn = fa2_check(&pr.p, &rs, o_naive, l_naive, &ref);
    const long nans = reference_nans(&ref, &rs, s.d);
    snprintf(why, sizeof why, "rc %d rel_l2 %.2e max_abs %.2e lse %.2e (x%.2f of tol) nonfinite %ld missed %ld unwritten %ld",
             rc, ct.rel_l2, ct.max_abs, ct.lse_max, ct.lse_worst, ct.nonfinite, ct.special_missed, ct.unwritten);
    report(rc == 0 && ct.pass, why, "step00 tiled vs fp64 %s", name);
    snprintf(why, sizeof why, "rel_l2 %.2e max_abs %.2e lse %.2e (x%.2f of tol) nonfinite %ld missed %ld unwritten %ld",
             cn.rel_l2, cn.max_abs, cn.lse_max, cn.lse_worst, cn.nonfinite, cn.special_missed, cn.unwritten);
    report(cn.pass, why, "step00 naive vs fp64 %s", name);
    if (s.nan) {
        snprintf(why, sizeof why, "the reference has no NaN: the NaN reaches nothing, and the case proves nothing");
        report(nans > 0, why, "step00 %s reaches %ld reference entries", name, nans);
    }

    /* tiled vs naive directly: they differ only by the rounding of P (NaN where both are) */
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < nq; i++) {
        double a = fa2_to_float(o_tiled[i], s.t), b = fa2_to_float(o_naive[i], s.t);
        if (isnan(a) && isnan(b)) continue;
        e2 += (a - b) * (a - b);
        r2 += b * b;
    }
    double rel = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
    snprintf(why, sizeof why, "rel_l2 %.2e", rel);
    report(rel <= fa2_tolerance_for(s.t).rel_l2, why, "step00 tiled vs naive %s", name);

    if (rows_without_keys(&pr.p)) {
        int ok = empty_rows_ok(&pr.p, o_tiled, l_tiled, why, sizeof why);
        report(ok, why, "step00 rows with no visible key give O=0, LSE=-inf %s", name);
    }

    static const int split_counts[] = {2, 3, 64};
    for (size_t i = 0; i < sizeof split_counts / sizeof *split_counts; i++) {
        fa2_buffers_make(&run, &pr, 0, 0);
        rc = fa2_cpu_split_forward(&run, split_counts[i]);
        fa2_buffers_fetch(&run, 0, o_naive, l_naive);
        fa2_buffers_free(&run, 0);
        fa2_check_result cs = fa2_check(&pr.p, &rs, o_naive, l_naive, &ref);
        snprintf(why, sizeof why, "rc %d rel_l2 %.2e max_abs %.2e lse %.2e (x%.2f of tol) nonfinite %ld missed %ld unwritten %ld",
                 rc, cs.rel_l2, cs.max_abs, cs.lse_max, cs.lse_worst, cs.nonfinite, cs.special_missed, cs.unwritten);
        int ok = rc == 0 && cs.pass && (!rows_without_keys(&pr.p) || empty_rows_ok(&pr.p, o_naive, l_naive, why, sizeof why));
        report(ok, why, "step00 keys in %d ranges, merged, vs fp64 %s", split_counts[i], name);
    }
    free(o_tiled), free(o_naive), free(l_tiled), free(l_naive);
    fa2_reference_free(&ref);
    fa2_rows_free(&rs);
    fa2_problem_free(&pr);
}

int main(void)
{
    static const int seqs[][2] = {{1, 1}, {1, 65}, {17, 17}, {64, 64}, {65, 63}, {127, 129}, {200, 37}, {37, 200}};
    static const int dims[] = {16, 64, 128};
    for (size_t i = 0; i < sizeof seqs / sizeof *seqs; i++)
        for (int causal = 0; causal < 2; causal++)
            for (size_t j = 0; j < sizeof dims / sizeof *dims; j++) {
                shape s = {1, 2, 2, seqs[i][0], seqs[i][1], dims[j], causal, j % 2 ? FA2_BF16 : FA2_FP16, 1.0f, NAN_NONE, 0, 0};
                run_shape(s);
            }
    shape gqa = {2, 8, 2, 70, 90, 64, 1, FA2_BF16, 1.0f, NAN_NONE, 0, 0};
    shape gqa2 = {2, 4, 1, 130, 66, 128, 0, FA2_FP16, 1.0f, NAN_NONE, 0, 0};
    run_shape(gqa);
    run_shape(gqa2);
    /* decode: a few query rows, many key tiles (16 per range at 2 splits) */
    shape decode = {2, 8, 2, 4, 2000, 128, 1, FA2_BF16, 1.0f, NAN_NONE, 0, 0};
    run_shape(decode);

    /* Peaky inputs: scores in the thousands, LSE too; every key tile after the first
     * can move the running max by far more than 2^8. */
    for (int t = 0; t < 2; t++)
        for (int causal = 0; causal < 2; causal++) {
            shape peaky = {1, 2, 1, 150, 200, 128, causal, (fa2_dtype)t, t ? 100.0f : 30.0f, NAN_NONE, 0, 0};
            run_shape(peaky);
            peaky.scale = t ? 30.0f : 100.0f;
            run_shape(peaky);
        }

    /* NaN inputs (batch 0, head 0): a Q row; a K row that later query rows see and
     * earlier ones do not (causal); a V element of key 0, which every row sees. */
    for (int t = 0; t < 2; t++) {
        shape q_nan = {1, 2, 2, 100, 100, 64, 1, (fa2_dtype)t, 1.0f, NAN_Q_ROW, 50, 0};
        shape k_nan = {1, 2, 2, 100, 130, 64, 1, (fa2_dtype)t, 1.0f, NAN_K_ROW, 97, 0};
        shape v_nan = {1, 2, 1, 90, 100, 128, t, (fa2_dtype)t, 1.0f, NAN_V_ELEMENT, 0, 5};
        run_shape(q_nan);
        run_shape(k_nan);
        run_shape(v_nan);
    }
    return test_failures ? 1 : 0;
}
