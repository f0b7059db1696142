/* reference.c - the fp64 reference: softmax(scale * q K^T) V for chosen rows,
 * computed from the same dtype-rounded inputs the kernel reads: the dense K and V,
 * whatever pages the step reads them from, each sequence to its own length. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "numeric.h"

/* Below this many multiply-adds (batch * heads * Nq * Nk * d) a sampled check
 * looks at every row anyway: about a second of fp64 work on one core. */
#define FULL_CHECK_MACS (1LL << 28)
#define SAMPLE_HEADS 4
#define SAMPLE_SPREAD_ROWS 48

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

void fa2_rows_all(fa2_row_set *rs, const fa2_params *p)
{
    int bhn = p->batch * p->heads_q;
    rs->n = bhn * p->seqlen_q;
    rs->bh = fa2_xmalloc(sizeof(int) * (size_t)rs->n, "the rows to check");
    rs->row = fa2_xmalloc(sizeof(int) * (size_t)rs->n, "the rows to check");
    for (int i = 0; i < rs->n; i++) {
        rs->bh[i] = i / p->seqlen_q;
        rs->row[i] = i % p->seqlen_q;
    }
}

/* A spread of (batch, head) pairs (always the first and last) and of rows:
 * the first and last rows, the first rows of the last 64- and 128-row tiles
 * (where tail tiles start for every tile size the steps use), and an even spread. */
void fa2_rows_sample(fa2_row_set *rs, const fa2_params *p)
{
    long long macs = (long long)p->batch * p->heads_q * p->seqlen_q * p->seqlen_k * p->head_dim;
    if (macs <= FULL_CHECK_MACS) {
        fa2_rows_all(rs, p);
        return;
    }
    int nq = p->seqlen_q, bhn = p->batch * p->heads_q;
    int rows[16 + 4 + SAMPLE_SPREAD_ROWS], nr = 0;
    for (int i = 0; i < 8; i++) {
        rows[nr++] = i < nq ? i : nq - 1;
        rows[nr++] = nq - 1 - i >= 0 ? nq - 1 - i : 0;
    }
    rows[nr++] = ((nq - 1) / 64) * 64;
    rows[nr++] = ((nq - 1) / 128) * 128;
    rows[nr++] = ((nq - 1) / 64) * 64 - 1 >= 0 ? ((nq - 1) / 64) * 64 - 1 : 0;
    rows[nr++] = ((nq - 1) / 128) * 128 - 1 >= 0 ? ((nq - 1) / 128) * 128 - 1 : 0;
    for (int i = 0; i < SAMPLE_SPREAD_ROWS; i++) rows[nr++] = (int)((long long)i * (nq - 1) / (SAMPLE_SPREAD_ROWS - 1));
    qsort(rows, (size_t)nr, sizeof(int), cmp_int);
    int unique = 0;
    for (int i = 0; i < nr; i++)
        if (unique == 0 || rows[i] != rows[unique - 1]) rows[unique++] = rows[i];

    int heads[SAMPLE_HEADS], nh = bhn < SAMPLE_HEADS ? bhn : SAMPLE_HEADS;
    for (int i = 0; i < nh; i++) heads[i] = nh == 1 ? 0 : (int)((long long)i * (bhn - 1) / (nh - 1));

    rs->n = nh * unique;
    rs->bh = fa2_xmalloc(sizeof(int) * (size_t)rs->n, "the rows to check");
    rs->row = fa2_xmalloc(sizeof(int) * (size_t)rs->n, "the rows to check");
    for (int h = 0; h < nh; h++)
        for (int r = 0; r < unique; r++) {
            rs->bh[h * unique + r] = heads[h];
            rs->row[h * unique + r] = rows[r];
        }
}

void fa2_rows_free(fa2_row_set *rs)
{
    free(rs->bh);
    free(rs->row);
    memset(rs, 0, sizeof *rs);
}

void fa2_reference_alloc(fa2_reference *ref, const fa2_row_set *rs, int head_dim)
{
    ref->o = fa2_xmalloc(sizeof(double) * (size_t)rs->n * head_dim, "the fp64 reference of O");
    ref->lse = fa2_xmalloc(sizeof(double) * (size_t)rs->n, "the fp64 reference of LSE");
    ref->score_mag = fa2_xmalloc(sizeof(double) * (size_t)rs->n, "the reference's score magnitudes");
    ref->o_spread = fa2_xmalloc(sizeof(double) * (size_t)rs->n * head_dim, "the reference's spread of V around O");
}

void fa2_reference_free(fa2_reference *ref)
{
    free(ref->o);
    free(ref->lse);
    free(ref->score_mag);
    free(ref->o_spread);
    memset(ref, 0, sizeof *ref);
}

void fa2_reference_rows(const fa2_problem *pr, const fa2_row_set *rs, fa2_reference *ref)
{
    const fa2_params *p = &pr->p;
    const int d = p->head_dim, group = p->heads_q / p->heads_kv;

#pragma omp parallel
    {
        double *s = fa2_xmalloc(sizeof(double) * (size_t)p->seqlen_k, "a row of reference scores");
        double *q = fa2_xmalloc(sizeof(double) * (size_t)d, "a reference query row");
#pragma omp for schedule(dynamic, 4)
        for (int r = 0; r < rs->n; r++) {
            int b = rs->bh[r] / p->heads_q, h = rs->bh[r] % p->heads_q, hk = h / group, i = rs->row[r];
            const uint16_t *qrow = pr->q + b * p->q_batch_stride + (int64_t)i * p->q_row_stride + h * p->q_head_stride;
            /* The sequence's own keys, the first nk of the dense K and V: causal is
             * bottom-right within them (fa2.h). */
            const long long nk = pr->seqlens_k ? pr->seqlens_k[b] : p->seqlen_k, shift = nk - p->seqlen_q;
            long long visible = p->causal ? i + shift + 1 : nk;
            if (visible > nk) visible = nk;
            double *o = ref->o + (size_t)r * d, *spread = ref->o_spread + (size_t)r * d;
            memset(o, 0, sizeof(double) * (size_t)d);
            memset(spread, 0, sizeof(double) * (size_t)d);
            ref->score_mag[r] = 0;
            if (visible <= 0) {
                ref->lse[r] = -INFINITY;
                continue;
            }
            for (int c = 0; c < d; c++) q[c] = fa2_to_float(qrow[c], p->dtype);
            /* IEEE throughout: a NaN score is skipped by the max (NaN > m is false) but
             * makes its exp, and with it l, every O entry and LSE, NaN. */
            double m = -INFINITY, mag = 0;
            for (long long j = 0; j < visible; j++) {
                const uint16_t *krow = pr->k + b * p->k_batch_stride + j * p->k_row_stride + hk * p->k_head_stride;
                double acc = 0, acc_abs = 0;
                for (int c = 0; c < d; c++) {
                    const double term = q[c] * fa2_to_float(krow[c], p->dtype);
                    acc += term;
                    acc_abs += fabs(term);
                }
                s[j] = acc * p->softmax_scale;
                if (s[j] > m) m = s[j];
                if (acc_abs * p->softmax_scale > mag) mag = acc_abs * p->softmax_scale;
            }
            double l = 0;
            for (long long j = 0; j < visible; j++) {
                const uint16_t *vrow = pr->v + b * p->v_batch_stride + j * p->v_row_stride + hk * p->v_head_stride;
                double e = exp(s[j] - m);
                l += e;
                for (int c = 0; c < d; c++) o[c] += e * fa2_to_float(vrow[c], p->dtype);
            }
            for (int c = 0; c < d; c++) o[c] /= l;
            for (long long j = 0; j < visible; j++) {
                const uint16_t *vrow = pr->v + b * p->v_batch_stride + j * p->v_row_stride + hk * p->v_head_stride;
                const double prob = exp(s[j] - m) / l;
                for (int c = 0; c < d; c++) spread[c] += prob * fabs(fa2_to_float(vrow[c], p->dtype) - o[c]);
            }
            ref->lse[r] = m + log(l);
            ref->score_mag[r] = mag;
        }
        free(s);
        free(q);
    }
}
