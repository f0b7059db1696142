/* test_paged.c - step 00 with a KV cache (fa2.h): per-sequence key lengths and K and V
 * in pages. Each case runs step 00's tiled loop, its naive twin and its split-KV loop
 * (3 and 64 ranges) against the fp64 reference, which reads the dense K and V each
 * sequence to its own length; the pages are shuffled through the pool and every row
 * no sequence owns holds NaN, so a key read from the wrong page, or past a
 * sequence's end, reaches O. Lengths 0 (O = 0, LSE = -inf on every row), 1, a page
 * boundary -1, +0, +1, and long; page sizes 16, 64, 256; GQA and MQA; Nq 1 to 4,
 * causal (bottom-right within each sequence) and not; fp16 and bf16. Then: the paged
 * run gives the same bits as the dense run of the same lengths (only the addresses
 * differ), and a block table pointing one page at an unowned one fails the check
 * (the NaN fill shows a leak). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

int fa2_cpu_naive_forward(const fa2_params *p);
int fa2_cpu_split_forward(const fa2_params *p, int splits);

enum { MAX_BATCH = 8 };

typedef struct {
    int hq, hkv, nq, nk, d, causal, page_size; /* page_size 0: dense K and V */
    fa2_dtype t;
    int batch;
    int32_t lens[MAX_BATCH]; /* lens[0] < 0: no seqlens_k, every sequence has nk keys */
} paged_case;

/* Runs one forward of the problem's step params (pages or not) by `splits` ranges
 * (0: the naive loop); O and LSE into the caller's dense host buffers. */
static int run_step00(const fa2_problem *pr, int splits, uint16_t *o, float *lse)
{
    fa2_params run;
    fa2_buffers_make(&run, pr, 0, 0);
    const int rc = splits ? fa2_cpu_split_forward(&run, splits) : fa2_cpu_naive_forward(&run);
    fa2_buffers_fetch(&run, 0, o, lse);
    fa2_buffers_free(&run, 0);
    return rc;
}

/* Every row of a sequence of length 0 has O exactly 0 and LSE exactly -inf. */
static int empty_sequences_ok(const fa2_problem *pr, const uint16_t *o, const float *lse, char *why, size_t len)
{
    const fa2_params *p = &pr->p;
    for (int b = 0; b < p->batch; b++) {
        if (!pr->seqlens_k || pr->seqlens_k[b] != 0) continue;
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seqlen_q; i++) {
                const float l = lse[((size_t)b * p->heads_q + h) * p->seqlen_q + i];
                if (!(isinf(l) && l < 0)) return snprintf(why, len, "sequence %d has no key but LSE[%d] = %g", b, i, l), 0;
                for (int c = 0; c < p->head_dim; c++) {
                    const float x = fa2_to_float(o[(((size_t)b * p->seqlen_q + i) * p->heads_q + h) * p->head_dim + c], p->dtype);
                    if (x != 0.0f) return snprintf(why, len, "sequence %d has no key but O[%d][%d] = %g", b, i, c, x), 0;
                }
            }
    }
    return 1;
}

/* A page of the pool no sequence's keys reach (fa2_problem_page keeps batch + 1 of them). */
static int32_t unowned_page(const fa2_problem *pr)
{
    fa2_params step;
    fa2_problem_step_params(pr, &step);
    char *owned = calloc((size_t)step.num_pages, 1);
    for (int b = 0; b < step.batch; b++) {
        const long long keys = pr->seqlens_k ? pr->seqlens_k[b] : step.seqlen_k;
        for (long long e = 0; e * step.page_size < keys; e++) owned[pr->block_table[b * step.block_table_batch_stride + e]] = 1;
    }
    int32_t page = 0;
    while (owned[page]) page++;
    free(owned);
    return page;
}

static void run_case(const paged_case *c)
{
    fa2_params shape = {0};
    shape.batch = c->batch, shape.heads_q = c->hq, shape.heads_kv = c->hkv, shape.seqlen_q = c->nq, shape.seqlen_k = c->nk;
    shape.head_dim = c->d, shape.causal = c->causal, shape.dtype = c->t, shape.softmax_scale = 1.0f / sqrtf((float)c->d);
    shape.seqlens_k = c->lens[0] >= 0 ? c->lens : NULL;
    const uint64_t seed = 11 + (uint64_t)c->nq * 7 + (uint64_t)c->page_size;
    fa2_problem pr;
    fa2_problem_make(&pr, &shape, seed, 1.0f);
    if (c->page_size) fa2_problem_page(&pr, c->page_size, seed, 0);

    char name[240], why[300];
    char layout[32] = "dense";
    if (c->page_size) snprintf(layout, sizeof layout, "pages of %d", c->page_size);
    int at = snprintf(name, sizeof name, "B%d H%d/%d Nq%d Nk<=%d d%d %s %s %s, lengths", c->batch, c->hq, c->hkv, c->nq,
                      c->nk, c->d, c->causal ? "causal" : "non-causal", fa2_dtype_name(c->t), layout);
    for (int b = 0; b < c->batch && at < (int)sizeof name - 8; b++)
        at += snprintf(name + at, sizeof name - at, "%s%d", b ? "," : " ", shape.seqlens_k ? c->lens[b] : c->nk);

    const size_t nq = fa2_numel_q(&pr.p), nl = fa2_numel_lse(&pr.p);
    uint16_t *o = malloc(nq * 2), *o_dense = malloc(nq * 2);
    float *lse = malloc(nl * 4), *lse_dense = malloc(nl * 4);
    fa2_row_set rs;
    fa2_rows_all(&rs, &pr.p);
    fa2_reference ref;
    fa2_reference_alloc(&ref, &rs, c->d);
    fa2_reference_rows(&pr, &rs, &ref);

    static const int runs[] = {1, 0, 3, 64}; /* the tiled loop, naive, keys in 3 and 64 ranges */
    static const char *const run_names[] = {"tiled", "naive", "3 ranges", "64 ranges"};
    for (int r = 0; r < 4; r++) {
        const int rc = run_step00(&pr, runs[r], o, lse);
        const fa2_check_result ck = fa2_check(&pr.p, &rs, o, lse, &ref);
        snprintf(why, sizeof why, "rc %d rel_l2 %.2e max_abs %.2e lse %.2e nonfinite %ld missed %ld unwritten %ld", rc,
                 ck.rel_l2, ck.max_abs, ck.lse_max, ck.nonfinite, ck.special_missed, ck.unwritten);
        const int ok = rc == 0 && ck.pass && empty_sequences_ok(&pr, o, lse, why, sizeof why);
        report(ok, why, "step00 %s vs fp64 %s", run_names[r], name);
    }

    if (c->page_size) {
        /* The same keys dense: the tiled loop must give the same bits (o holds the paged
         * tiled run's O after the 64-range run; run it again). */
        run_step00(&pr, 1, o, lse);
        fa2_problem dense = pr;
        dense.block_table = NULL, dense.k_pages = dense.v_pages = NULL, dense.page_size = 0;
        run_step00(&dense, 1, o_dense, lse_dense);
        const int same = !memcmp(o, o_dense, nq * 2) && !memcmp(lse, lse_dense, nl * 4);
        report(same, "O or LSE differ", "step00 pages give the dense run's bits %s", name);

        /* A leak must show: the first page of the first sequence with keys swapped for
         * one no sequence owns (its rows NaN) must fail the check. */
        int b = 0;
        while (b < c->batch && shape.seqlens_k && c->lens[b] == 0) b++;
        if (b < c->batch) {
            int32_t *entry = pr.block_table + (size_t)b * ((c->nk + c->page_size - 1) / c->page_size);
            const int32_t kept = *entry;
            *entry = unowned_page(&pr);
            const int rc = run_step00(&pr, 1, o, lse);
            const fa2_check_result ck = fa2_check(&pr.p, &rs, o, lse, &ref);
            *entry = kept;
            snprintf(why, sizeof why, "rc %d: the check passed (nonfinite %ld): NaN in an unowned page did not reach O",
                     rc, ck.nonfinite);
            report(rc == 0 && !ck.pass && ck.nonfinite > 0, why, "step00 a table entry on an unowned page fails %s", name);
        }
    }
    free(o), free(o_dense), free(lse), free(lse_dense);
    fa2_reference_free(&ref);
    fa2_rows_free(&rs);
    fa2_problem_free(&pr);
}

int main(void)
{
    static const int page_sizes[] = {16, 64, 256};
    enum { LONG = 1000 };
    for (size_t s = 0; s < sizeof page_sizes / sizeof *page_sizes; s++) {
        const int ps = page_sizes[s];
        for (int nq = 1; nq <= 4; nq++) {
            /* lengths 0, 1, a page boundary -1, +0, +1, long; GQA then MQA, fp16 then bf16 */
            paged_case c = {nq % 2 ? 8 : 4, nq % 2 ? 2 : 1, nq, LONG, 64, 1, ps, nq <= 2 ? FA2_FP16 : FA2_BF16, 6,
                            {0, 1, ps - 1, ps, ps + 1, LONG}};
            run_case(&c);
        }
        /* non-causal, and lengths shorter than the query rows (causal rows with no key) */
        paged_case nc = {4, 2, 4, 300, 128, 0, ps, FA2_BF16, 4, {3, ps + 1, 0, 300}};
        run_case(&nc);
        paged_case short_rows = {4, 1, 70, 300, 64, 1, ps, FA2_FP16, 3, {2, 69, 300}};
        run_case(&short_rows);
        /* pages without per-sequence lengths: every sequence seqlen_k keys, a tail page */
        paged_case full = {8, 2, 3, 300, 64, 1, ps, FA2_FP16, 2, {-1}};
        run_case(&full);
    }
    /* per-sequence lengths on dense K and V */
    paged_case dense = {8, 2, 4, 500, 128, 1, 0, FA2_BF16, 5, {0, 1, 63, 64, 500}};
    run_case(&dense);
    paged_case dense_nc = {4, 4, 2, 200, 64, 0, 0, FA2_FP16, 3, {200, 0, 65}};
    run_case(&dense_nc);
    return test_failures ? 1 : 0;
}
