/* reference_backward.c - the fp64 reference of the backward pass, and the fp64
 * forward it differentiates.
 *
 * Both work on dense double tensors in the [batch, seqlen, heads, head_dim]
 * layout (LSE [batch, heads_q, seqlen_q]), so a test can perturb any input
 * element and check these gradients against finite differences of this forward
 * (tests/test_backward.c), and then hold a step's backward to them. Only the
 * sizes, causal and softmax_scale of `shape` are read.
 *
 * The backward recomputes P by the softmax itself in fp64 rather than from a
 * given LSE: a step's LSE is fp32, and the reference must not inherit its error.
 * It runs in two passes, as FA2's backward does:
 *   1. per query row: P (from the row max, as reference.c), O = P V,
 *      D = rowsum(dO * O), dS = P * (dP - D) with dP = dO V^T, dQ = scale dS K;
 *      the row's max and sum are kept;
 *   2. per key row: P and dS again from the kept max and sum (the same operations,
 *      so the same values), dK = scale dS^T Q and dV = P^T dO over every query row
 *      of every query head of the key's group that sees the key.
 * Each output element is written by exactly one thread, so no atomics, and the
 * result does not depend on the thread count.
 * fa2_ref_backward_from_o_f64 is the same with D = rowsum(dO * O) taken from a given O,
 * a step's forward output in the dtype: what FA2 itself computes, the forward having
 * kept only O and LSE. Where one key takes nearly all of a row's weight, dP - D nearly
 * cancels (the exact value is about 1 - P_max times dO's spread over V), and O's
 * rounding to 16 bits, u |dO| |O| in D, can move dQ and dK by far more than u of
 * their size. With everything else exact, this separates that part of a step's
 * error, which no implementation of the algorithm avoids, from the step's own.
 * IEEE throughout, as the forward (fa2.h): a NaN score is skipped by the max but
 * makes its exp, the row's sum and with it every P, O and dS of the row NaN.
 * A row that sees no key has O = 0, LSE = -inf, dQ = 0, and adds nothing to dK, dV.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Element offsets in the dense layout. */
static size_t q_at(const fa2_params *s, int b, int i, int h)
{
    return (((size_t)b * s->seqlen_q + i) * s->heads_q + h) * s->head_dim;
}
static size_t kv_at(const fa2_params *s, int b, int j, int hk)
{
    return (((size_t)b * s->seqlen_k + j) * s->heads_kv + hk) * s->head_dim;
}

/* Keys 0 .. visible - 1 are what query row i sees (bottom-right causal). */
static int visible_keys(const fa2_params *s, int i)
{
    if (!s->causal) return s->seqlen_k;
    long long v = (long long)i + s->seqlen_k - s->seqlen_q + 1;
    return v <= 0 ? 0 : (v > s->seqlen_k ? s->seqlen_k : (int)v);
}

static double dot(const double *a, const double *b, int n)
{
    double acc = 0;
    for (int c = 0; c < n; c++) acc += a[c] * b[c];
    return acc;
}

/* Row i of head h: P into p[0 .. visible), the row's max and sum of exp(s - max)
 * into *m and *l; returns visible (0: nothing written). */
static int row_softmax(const fa2_params *s, const double *q, const double *k, int b, int h, int i, double *p,
                       double *m, double *l)
{
    const int d = s->head_dim, hk = h / (s->heads_q / s->heads_kv), visible = visible_keys(s, i);
    const double *qrow = q + q_at(s, b, i, h);
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < visible; j++) {
        p[j] = dot(qrow, k + kv_at(s, b, j, hk), d) * s->softmax_scale;
        if (p[j] > mx) mx = p[j]; /* a NaN score is skipped here, not below */
    }
    for (int j = 0; j < visible; j++) sum += (p[j] = exp(p[j] - mx));
    for (int j = 0; j < visible; j++) p[j] /= sum;
    *m = mx;
    *l = sum;
    return visible;
}

void fa2_ref_forward_f64(const fa2_params *shape, const double *q, const double *k, const double *v, double *o,
                         double *lse)
{
    const fa2_params *s = shape;
    const int d = s->head_dim, group = s->heads_q / s->heads_kv;
    const long long rows = (long long)s->batch * s->heads_q * s->seqlen_q;
#pragma omp parallel
    {
        double *p = fa2_xmalloc(sizeof(double) * (size_t)s->seqlen_k, "a row of fp64 probabilities");
#pragma omp for schedule(static)
        for (long long r = 0; r < rows; r++) {
            const int i = (int)(r % s->seqlen_q), h = (int)(r / s->seqlen_q % s->heads_q),
                      b = (int)(r / s->seqlen_q / s->heads_q);
            double m, l, *orow = o + q_at(s, b, i, h);
            const int visible = row_softmax(s, q, k, b, h, i, p, &m, &l);
            memset(orow, 0, sizeof(double) * (size_t)d);
            for (int j = 0; j < visible; j++) {
                const double *vrow = v + kv_at(s, b, j, h / group);
                for (int c = 0; c < d; c++) orow[c] += p[j] * vrow[c];
            }
            if (lse) lse[((size_t)b * s->heads_q + h) * s->seqlen_q + i] = visible ? m + log(l) : -INFINITY;
        }
        free(p);
    }
}

/* The backward; D from o_given's rows where it is not NULL, else from the fp64 O. */
static void backward(const fa2_params *shape, const double *q, const double *k, const double *v, const double *o_given,
                     const double *dout, double *dq, double *dk, double *dv)
{
    const fa2_params *s = shape;
    const int d = s->head_dim, group = s->heads_q / s->heads_kv;
    const long long rows = (long long)s->batch * s->heads_q * s->seqlen_q;
    const long long keys = (long long)s->batch * s->heads_kv * s->seqlen_k;
    /* per query row, in the order of LSE: the max and the sum of its softmax, and D */
    double *row_m = fa2_xmalloc(sizeof(double) * (size_t)(rows ? rows : 1), "the fp64 row maxima");
    double *row_l = fa2_xmalloc(sizeof(double) * (size_t)(rows ? rows : 1), "the fp64 row sums");
    double *row_d = fa2_xmalloc(sizeof(double) * (size_t)(rows ? rows : 1), "the fp64 rowsum(dO * O)");

    /* pass 1: the query rows */
#pragma omp parallel
    {
        double *p = fa2_xmalloc(sizeof(double) * (size_t)s->seqlen_k, "a row of fp64 probabilities");
        double *o = fa2_xmalloc(sizeof(double) * (size_t)d, "an fp64 row of O");
#pragma omp for schedule(static)
        for (long long r = 0; r < rows; r++) {
            const int i = (int)(r % s->seqlen_q), h = (int)(r / s->seqlen_q % s->heads_q),
                      b = (int)(r / s->seqlen_q / s->heads_q), hk = h / group;
            const size_t lse_i = ((size_t)b * s->heads_q + h) * s->seqlen_q + i;
            const double *dorow = dout + q_at(s, b, i, h);
            double *dqrow = dq + q_at(s, b, i, h);
            const int visible = row_softmax(s, q, k, b, h, i, p, &row_m[lse_i], &row_l[lse_i]);
            memset(o, 0, sizeof(double) * (size_t)d);
            memset(dqrow, 0, sizeof(double) * (size_t)d);
            for (int j = 0; j < visible; j++) {
                const double *vrow = v + kv_at(s, b, j, hk);
                for (int c = 0; c < d; c++) o[c] += p[j] * vrow[c];
            }
            const double dsum = dot(dorow, o_given ? o_given + q_at(s, b, i, h) : o, d);
            row_d[lse_i] = dsum;
            for (int j = 0; j < visible; j++) {
                const double ds = p[j] * (dot(dorow, v + kv_at(s, b, j, hk), d) - dsum);
                const double *krow = k + kv_at(s, b, j, hk);
                for (int c = 0; c < d; c++) dqrow[c] += ds * krow[c];
            }
            for (int c = 0; c < d; c++) dqrow[c] *= s->softmax_scale;
        }
        free(p);
        free(o);
    }

    /* pass 2: the key rows, each summing over the query rows (of all its group's heads) that see it */
    const long long shift = (long long)s->seqlen_k - s->seqlen_q;
#pragma omp parallel for schedule(static)
    for (long long r = 0; r < keys; r++) {
        const int j = (int)(r % s->seqlen_k), hk = (int)(r / s->seqlen_k % s->heads_kv),
                  b = (int)(r / s->seqlen_k / s->heads_kv);
        const double *krow = k + kv_at(s, b, j, hk), *vrow = v + kv_at(s, b, j, hk);
        double *dkrow = dk + kv_at(s, b, j, hk), *dvrow = dv + kv_at(s, b, j, hk);
        memset(dkrow, 0, sizeof(double) * (size_t)d);
        memset(dvrow, 0, sizeof(double) * (size_t)d);
        /* row i sees key j iff j <= i + shift (causal); a row that sees no key sees none of them */
        const long long first = s->causal ? (j - shift > 0 ? j - shift : 0) : 0;
        for (int h = hk * group; h < (hk + 1) * group; h++)
            for (long long i = first; i < s->seqlen_q; i++) {
                const size_t lse_i = ((size_t)b * s->heads_q + h) * s->seqlen_q + i;
                const double *qrow = q + q_at(s, b, (int)i, h), *dorow = dout + q_at(s, b, (int)i, h);
                const double pij = exp(dot(qrow, krow, d) * s->softmax_scale - row_m[lse_i]) / row_l[lse_i];
                const double ds = pij * (dot(dorow, vrow, d) - row_d[lse_i]);
                for (int c = 0; c < d; c++) {
                    dkrow[c] += ds * qrow[c];
                    dvrow[c] += pij * dorow[c];
                }
            }
        for (int c = 0; c < d; c++) dkrow[c] *= s->softmax_scale;
    }
    free(row_m);
    free(row_l);
    free(row_d);
}

void fa2_ref_backward_f64(const fa2_params *shape, const double *q, const double *k, const double *v,
                          const double *dout, double *dq, double *dk, double *dv)
{
    backward(shape, q, k, v, NULL, dout, dq, dk, dv);
}

void fa2_ref_backward_from_o_f64(const fa2_params *shape, const double *q, const double *k, const double *v,
                                 const double *o, const double *dout, double *dq, double *dk, double *dv)
{
    backward(shape, q, k, v, o, dout, dq, dk, dv);
}
