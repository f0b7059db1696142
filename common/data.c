/* data.c - deterministic inputs and the problem's sizes and work. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "numeric.h"

/* splitmix64: draw n of a stream is a pure function of (seed, n), so any part of
 * a tensor can be filled on its own, in parallel, with the same values. */
static uint64_t splitmix64_at(uint64_t seed, uint64_t n)
{
    uint64_t z = seed + (n + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]: never 0, so log() below is finite. */
static double uniform01(uint64_t seed, uint64_t n) { return ((splitmix64_at(seed, n) >> 11) + 1) * (1.0 / 9007199254740992.0); }

/* Box-Muller: independent standard normals, rounded to the dtype, a pair from
 * draws 2i and 2i + 1. Each tensor gets its own stream so Q does not change when
 * the seqlen of K does. */
static void fill_normal(uint16_t *x, size_t n, uint64_t seed, float scale, fa2_dtype t)
{
    const long long pairs = (long long)((n + 1) / 2);
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < pairs; i++) {
        double r = sqrt(-2.0 * log(uniform01(seed, 2 * (uint64_t)i))), a = 6.283185307179586 * uniform01(seed, 2 * (uint64_t)i + 1);
        x[2 * i] = fa2_from_float((float)(scale * r * cos(a)), t);
        if ((size_t)(2 * i + 1) < n) x[2 * i + 1] = fa2_from_float((float)(scale * r * sin(a)), t);
    }
}

uint16_t *fa2_dout_make(const fa2_params *p, uint64_t seed)
{
    const size_t n = fa2_numel_q(p);
    uint16_t *x = fa2_xmalloc(n * sizeof(uint16_t), "dO");
    fill_normal(x, n, seed * 3 + 0x44, 1.0f, p->dtype); /* a stream of its own, beside Q's, K's and V's */
    return x;
}

size_t fa2_numel_q(const fa2_params *p) { return (size_t)p->batch * p->seqlen_q * p->heads_q * p->head_dim; }
size_t fa2_numel_kv(const fa2_params *p) { return (size_t)p->batch * p->seqlen_k * p->heads_kv * p->head_dim; }
size_t fa2_numel_lse(const fa2_params *p) { return (size_t)p->batch * p->heads_q * p->seqlen_q; }

void fa2_problem_make(fa2_problem *pr, const fa2_params *shape, uint64_t seed, float scale)
{
    memset(pr, 0, sizeof *pr);
    pr->p = *shape;
    fa2_set_dense_strides(&pr->p);
    size_t nq = fa2_numel_q(&pr->p), nkv = fa2_numel_kv(&pr->p);
    pr->q = fa2_xmalloc(nq * sizeof(uint16_t), "Q");
    pr->k = fa2_xmalloc(nkv * sizeof(uint16_t), "K");
    pr->v = fa2_xmalloc(nkv * sizeof(uint16_t), "V");
    fill_normal(pr->q, nq, seed * 3 + 0x51, scale, pr->p.dtype);
    fill_normal(pr->k, nkv, seed * 3 + 0x4b, scale, pr->p.dtype);
    fill_normal(pr->v, nkv, seed * 3 + 0x56, 1.0f, pr->p.dtype); /* V stays O(1): scale shapes the softmax only */
    pr->p.q = pr->q;
    pr->p.k = pr->k;
    pr->p.v = pr->v;
    pr->p.o = NULL;
    pr->p.lse = NULL;
}

void fa2_problem_free(fa2_problem *pr)
{
    free(pr->q);
    free(pr->k);
    free(pr->v);
    memset(pr, 0, sizeof *pr);
}

double fa2_visible_pairs(const fa2_params *p)
{
    if (!p->causal) return (double)p->seqlen_q * p->seqlen_k;
    double pairs = 0;
    long long shift = (long long)p->seqlen_k - p->seqlen_q; /* row i sees keys 0 .. i + shift */
    for (long long i = 0; i < p->seqlen_q; i++) {
        long long seen = i + shift + 1;
        pairs += seen <= 0 ? 0 : (seen > p->seqlen_k ? p->seqlen_k : seen);
    }
    return pairs;
}

double fa2_flops(const fa2_params *p) { return 4.0 * p->batch * p->heads_q * fa2_visible_pairs(p) * p->head_dim; }
