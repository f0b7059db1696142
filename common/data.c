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
    if (shape->seqlens_k) { /* a copy: the caller's array may not outlive the problem */
        pr->seqlens_k = fa2_xmalloc(sizeof(int32_t) * (size_t)shape->batch, "the sequence lengths");
        memcpy(pr->seqlens_k, shape->seqlens_k, sizeof(int32_t) * (size_t)shape->batch);
    }
    pr->p.seqlens_k = pr->seqlens_k;
    pr->p.block_table = NULL;
    pr->p.page_size = pr->p.max_pages = pr->p.num_pages = 0;
    pr->p.block_table_batch_stride = 0;
}

void fa2_problem_free(fa2_problem *pr)
{
    free(pr->q);
    free(pr->k);
    free(pr->v);
    free(pr->seqlens_k);
    free(pr->k_pages);
    free(pr->v_pages);
    free(pr->block_table);
    memset(pr, 0, sizeof *pr);
}

static long long keys_of(const fa2_params *p, int b) { return p->seqlens_k ? p->seqlens_k[b] : p->seqlen_k; }

void fa2_page_layout(fa2_params *p, int page_size)
{
    long long owned = 0;
    for (int b = 0; b < p->batch; b++) owned += (keys_of(p, b) + page_size - 1) / page_size;
    p->page_size = page_size;
    p->max_pages = (p->seqlen_k + page_size - 1) / page_size;
    p->block_table_batch_stride = p->max_pages;
    p->num_pages = (int)(owned + p->batch + 1); /* the spare pages: NaN, no one's */
    p->k_head_stride = p->v_head_stride = p->head_dim;
    p->k_row_stride = p->v_row_stride = (int64_t)p->heads_kv * p->head_dim;
    p->k_batch_stride = p->v_batch_stride = p->k_row_stride * page_size;
}

size_t fa2_numel_kv_stored(const fa2_params *p)
{
    if (!p->block_table && !p->page_size) return fa2_numel_kv(p);
    return (size_t)p->num_pages * p->page_size * p->heads_kv * p->head_dim;
}

void fa2_problem_page(fa2_problem *pr, int page_size, uint64_t seed, int in_order)
{
    fa2_params layout = pr->p;
    fa2_page_layout(&layout, page_size);
    const int pages = layout.num_pages;
    const size_t page_elems = (size_t)layout.k_batch_stride, row_elems = (size_t)layout.k_row_stride;
    /* The pool's order: a Fisher-Yates shuffle from the seed's own stream, so a step that
     * assumes pages in order, or one sequence's pages together, reads the wrong keys. */
    int *order = fa2_xmalloc(sizeof(int) * (size_t)pages, "the page order");
    for (int i = 0; i < pages; i++) order[i] = i;
    for (int i = pages - 1; i > 0 && !in_order; i--) {
        const int j = (int)(splitmix64_at(seed * 3 + 0x50, (uint64_t)i) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    pr->k_pages = fa2_xmalloc(2 * (size_t)pages * page_elems, "the K pages");
    pr->v_pages = fa2_xmalloc(2 * (size_t)pages * page_elems, "the V pages");
    pr->block_table = fa2_xmalloc(sizeof(int32_t) * (size_t)pr->p.batch * layout.max_pages, "the block table");
    const uint16_t nan16 = fa2_from_float(NAN, pr->p.dtype);
    for (size_t i = 0; i < (size_t)pages * page_elems; i++) pr->k_pages[i] = pr->v_pages[i] = nan16;
    const int unowned = order[pages - 1]; /* the last of the shuffled order: no one's */
    int next = 0;
    for (int b = 0; b < pr->p.batch; b++) {
        const long long keys = keys_of(&pr->p, b);
        for (int e = 0; e < layout.max_pages; e++) {
            const int owns = (long long)e * page_size < keys;
            const int page = owns ? order[next++] : unowned;
            pr->block_table[(size_t)b * layout.max_pages + e] = page;
            for (int r = 0; owns && r < page_size && (long long)e * page_size + r < keys; r++) {
                const size_t from = (size_t)b * pr->p.k_batch_stride + ((size_t)e * page_size + r) * pr->p.k_row_stride;
                const size_t to = (size_t)page * page_elems + (size_t)r * row_elems;
                memcpy(pr->k_pages + to, pr->k + from, 2 * row_elems);
                memcpy(pr->v_pages + to, pr->v + from, 2 * row_elems);
            }
        }
    }
    pr->page_size = page_size;
    free(order);
}

void fa2_problem_step_params(const fa2_problem *pr, fa2_params *step)
{
    *step = pr->p;
    if (!pr->block_table) return;
    fa2_page_layout(step, pr->page_size);
    step->k = pr->k_pages, step->v = pr->v_pages, step->block_table = pr->block_table;
}

static double pairs_of(long long nq, long long nk, int causal)
{
    if (!causal) return (double)nq * nk;
    double pairs = 0;
    long long shift = nk - nq; /* row i sees keys 0 .. i + shift */
    for (long long i = 0; i < nq; i++) {
        long long seen = i + shift + 1;
        pairs += seen <= 0 ? 0 : (seen > nk ? nk : seen);
    }
    return pairs;
}

double fa2_visible_pairs(const fa2_params *p)
{
    if (!p->seqlens_k) return pairs_of(p->seqlen_q, p->seqlen_k, p->causal);
    double pairs = 0;
    for (int b = 0; b < p->batch; b++) pairs += pairs_of(p->seqlen_q, p->seqlens_k[b], p->causal);
    return pairs / p->batch;
}

double fa2_flops(const fa2_params *p) { return 4.0 * p->batch * p->heads_q * fa2_visible_pairs(p) * p->head_dim; }
