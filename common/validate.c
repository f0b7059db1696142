/* validate.c - the parameter checks every step's fa2_supports() starts with, and
 * the record of the last failed CUDA call (linked into each step's binary and
 * shared library). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "validate.h"

#define REFUSE(...) do { if (why) snprintf(why, why_len, __VA_ARGS__); return 0; } while (0)

/* Element offsets past which a tensor is refused: 2^61 elements of 2 bytes keep
 * every byte offset, and every sum of offsets a kernel forms, inside int64. */
#define MAX_OFFSET (INT64_C(1) << 61)

typedef struct { int64_t size, stride; } dim;

/* The four dims of a [batch, seqlen, heads, head_dim] tensor (head_dim contiguous). */
static void dims_of(dim d[4], int batch, int seqlen, int heads, int head_dim, int64_t bs, int64_t rs, int64_t hs)
{
    d[0] = (dim){head_dim, 1};
    d[1] = (dim){seqlen, rs};
    d[2] = (dim){heads, hs};
    d[3] = (dim){batch, bs};
}

/* The largest element offset of the tensor, or -1 if it passes MAX_OFFSET. */
static int64_t last_offset(const dim d[4])
{
    int64_t last = 0;
    for (int i = 0; i < 4; i++) {
        int64_t term;
        if (__builtin_mul_overflow(d[i].size - 1, d[i].stride, &term) || __builtin_add_overflow(last, term, &last) ||
            last >= MAX_OFFSET)
            return -1;
    }
    return last;
}

/* 1 if no two elements of the tensor share an offset: sorted by stride, each dim's
 * stride is at least the span of the smaller ones. (Layouts that interleave without
 * overlapping also exist; they are refused too.) */
static int dims_nest(const dim d_in[4])
{
    dim d[4];
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (d_in[i].size > 1) d[n++] = d_in[i];
    for (int i = 1; i < n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && d[j].stride < d[j - 1].stride; j--) {
            dim t = d[j];
            d[j] = d[j - 1];
            d[j - 1] = t;
        }
    int64_t span = 1;
    for (int i = 0; i < n; i++) {
        if (d[i].stride < span) return 0;
        span += (d[i].size - 1) * d[i].stride; /* cannot overflow: last_offset() passed */
    }
    return 1;
}

static const char *const TENSOR_NAMES[4] = {"q", "k", "v", "o"};
static const char *const DIM_NAMES[4] = {"", "row", "head", "batch"}; /* as in the ABI's <tensor>_<dim>_stride */

/* The base pointers and the dims of q, k, v and o, in that order. Paged K and V
 * are pools of num_pages pages of page_size rows, their batch stride the page's. */
static void tensors_of(const fa2_params *p, const void *bases[4], dim d[4][4])
{
    const int kv_outer = p->block_table ? p->num_pages : p->batch, kv_rows = p->block_table ? p->page_size : p->seqlen_k;
    bases[0] = p->q, bases[1] = p->k, bases[2] = p->v, bases[3] = p->o;
    dims_of(d[0], p->batch, p->seqlen_q, p->heads_q, p->head_dim, p->q_batch_stride, p->q_row_stride, p->q_head_stride);
    dims_of(d[1], kv_outer, kv_rows, p->heads_kv, p->head_dim, p->k_batch_stride, p->k_row_stride, p->k_head_stride);
    dims_of(d[2], kv_outer, kv_rows, p->heads_kv, p->head_dim, p->v_batch_stride, p->v_row_stride, p->v_head_stride);
    dims_of(d[3], p->batch, p->seqlen_q, p->heads_q, p->head_dim, p->o_batch_stride, p->o_row_stride, p->o_head_stride);
}

/* [first, last] byte addresses, for the overlap checks. */
typedef struct { uintptr_t first, last; } range;
static int overlap(range a, range b) { return a.first <= b.last && b.first <= a.last; }
static range bytes_of(const void *base, int64_t last_offset, int elem_bytes)
{
    return (range){(uintptr_t)base, (uintptr_t)base + (uintptr_t)last_offset * elem_bytes + elem_bytes - 1};
}
/* lse is [batch, heads_q, seqlen_q] floats: < 2^62 bytes, the sizes are capped above. */
static range lse_bytes(const fa2_params *p) { return bytes_of(p->lse, (int64_t)p->batch * p->heads_q * p->seqlen_q - 1, 4); }

/* The byte ranges of the KV cache's int32 arrays (fa2_validate_params passed):
 * seqlens_k [batch] and block_table [batch][block_table_batch_stride], read up to
 * entry max_pages - 1 of the last row. A missing one gets an empty range. */
static const char *const CACHE_NAMES[2] = {"seqlens_k", "block_table"};
static void cache_ranges(const fa2_params *p, range r[2])
{
    const range none = {1, 0}; /* first > last: overlaps nothing */
    r[0] = p->seqlens_k ? bytes_of(p->seqlens_k, p->batch - 1, 4) : none;
    r[1] = p->block_table ? bytes_of(p->block_table, (p->batch - 1) * p->block_table_batch_stride + p->max_pages - 1, 4)
                          : none;
}

/* The KV cache's fields against each other and the shape, before the tensors' checks
 * (paged K and V take their dims from num_pages and page_size). Reads no memory: the
 * lengths and pages themselves lie where a GPU step keeps them. */
static int check_kv_cache(const fa2_params *p, char *why, size_t why_len)
{
    if ((uintptr_t)p->seqlens_k % 4)
        REFUSE("seqlens_k at address %p (allowed: 4-byte aligned, an int32 per sequence)", (const void *)p->seqlens_k);
    if (!p->block_table) {
        /* a page field with no table is a caller who forgot the table: say so rather than
         * read K and V as dense */
        if (p->page_size || p->max_pages || p->num_pages || p->block_table_batch_stride)
            REFUSE("page_size %d, max_pages %d, num_pages %d, block_table_batch_stride %lld without a block_table "
                   "(allowed: all 0 when block_table is NULL, K and V dense)", p->page_size, p->max_pages, p->num_pages,
                   (long long)p->block_table_batch_stride);
        return 1;
    }
    if ((uintptr_t)p->block_table % 4)
        REFUSE("block_table at address %p (allowed: 4-byte aligned, int32 page indices)", (const void *)p->block_table);
    if (p->page_size < 16 || p->page_size > 256 || (p->page_size & (p->page_size - 1)))
        REFUSE("page_size %d with a block_table (allowed: a power of two from 16 to 256 keys)", p->page_size);
    if (p->num_pages < 1) REFUSE("num_pages %d with a block_table (allowed: >= 1 page in the K and V pools)", p->num_pages);
    if (p->max_pages < 1) REFUSE("max_pages %d with a block_table (allowed: >= 1 entry per sequence)", p->max_pages);
    if ((int64_t)p->max_pages * p->page_size < p->seqlen_k)
        REFUSE("max_pages %d x page_size %d = %lld keys per sequence, below seqlen_k %d (allowed: pages for the "
               "longest sequence, seqlen_k keys)", p->max_pages, p->page_size, (long long)p->max_pages * p->page_size,
               p->seqlen_k);
    if (p->block_table_batch_stride < p->max_pages || p->block_table_batch_stride > MAX_OFFSET / p->batch)
        REFUSE("block_table_batch_stride %lld (allowed: max_pages %d to 2^61 / batch, elements between the rows of the "
               "table)", (long long)p->block_table_batch_stride, p->max_pages);
    return 1;
}

/* One tensor's own checks: strides >= 1, its base 2-byte aligned, every offset below
 * MAX_OFFSET. 1 and its byte range in *r if they pass; otherwise 0 and one line in why. */
static int check_tensor(const char *name, const void *base, const dim d[4], range *r, char *why, size_t why_len)
{
    for (int i = 1; i < 4; i++)
        if (d[i].stride < 1) REFUSE("%s_%s_stride %lld (allowed: >= 1 element)", name, DIM_NAMES[i], (long long)d[i].stride);
    if ((uintptr_t)base % 2) REFUSE("%s at address %p (allowed: 2-byte aligned, a 16-bit element)", name, base);
    const int64_t last = last_offset(d);
    if (last < 0)
        REFUSE("%s: its sizes and strides reach an element offset past 2^61 (allowed: offsets below 2^61 "
               "elements, so that byte offsets fit in int64)", name);
    *r = bytes_of(base, last, 2);
    return 1;
}

int fa2_validate_params(const fa2_params *p, char *why, size_t why_len)
{
    if (!p) REFUSE("params is NULL");
    if (!p->q || !p->k || !p->v || !p->o) REFUSE("q, k, v and o must all be set (lse may be NULL)");
    if (p->batch < 1 || p->heads_q < 1 || p->heads_kv < 1 || p->seqlen_q < 1 || p->seqlen_k < 1 || p->head_dim < 1)
        REFUSE("batch %d, heads_q %d, heads_kv %d, seqlen_q %d, seqlen_k %d, head_dim %d (allowed: each >= 1)", p->batch,
               p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim);
    if (p->seqlen_q > FA2_MAX_SEQLEN || p->seqlen_k > FA2_MAX_SEQLEN)
        REFUSE("seqlen_q %d, seqlen_k %d (allowed: at most 2^30)", p->seqlen_q, p->seqlen_k);
    if (p->heads_q % p->heads_kv) REFUSE("heads_q %d is not a multiple of heads_kv %d", p->heads_q, p->heads_kv);
    if (p->dtype != FA2_FP16 && p->dtype != FA2_BF16) REFUSE("dtype %d (allowed: fp16, bf16)", (int)p->dtype);
    if (p->causal != 0 && p->causal != 1) REFUSE("causal %d (allowed: 0, 1)", p->causal);
    if (!isfinite(p->softmax_scale) || !(p->softmax_scale > 0))
        REFUSE("softmax_scale %g (allowed: finite and > 0)", (double)p->softmax_scale);

    if (!check_kv_cache(p, why, why_len)) return 0;

    const void *bases[4];
    dim d[4][4];
    tensors_of(p, bases, d);
    range ranges[4];
    for (int t = 0; t < 4; t++)
        if (!check_tensor(TENSOR_NAMES[t], bases[t], d[t], &ranges[t], why, why_len)) return 0;
    range cache[2];
    cache_ranges(p, cache);
    for (int c = 0; c < 2; c++)
        if (overlap(ranges[3], cache[c])) REFUSE("o overlaps %s (allowed: an output apart from the inputs)", CACHE_NAMES[c]);
    if (!dims_nest(d[3]))
        REFUSE("o strides (batch %lld, row %lld, head %lld) let two elements share an address (allowed: strides that "
               "nest, so every element of O is written once)", (long long)p->o_batch_stride, (long long)p->o_row_stride,
               (long long)p->o_head_stride);
    for (int t = 0; t < 3; t++)
        if (overlap(ranges[3], ranges[t])) REFUSE("o overlaps %s (allowed: an output apart from the inputs)", TENSOR_NAMES[t]);
    if (p->lse) {
        if ((uintptr_t)p->lse % 4) REFUSE("lse at address %p (allowed: 4-byte aligned, a float)", (void *)p->lse);
        const range lse = lse_bytes(p);
        for (int t = 0; t < 4; t++)
            if (overlap(lse, ranges[t])) REFUSE("lse overlaps %s (allowed: an output apart from the others)", TENSOR_NAMES[t]);
        for (int c = 0; c < 2; c++)
            if (overlap(lse, cache[c])) REFUSE("lse overlaps %s (allowed: an output apart from the inputs)", CACHE_NAMES[c]);
    }
    return 1;
}

int fa2_refuse_kv_cache(const fa2_params *p, char *why, size_t why_len)
{
    if (p->seqlens_k)
        REFUSE("seqlens_k given (allowed: NULL; this step takes one seqlen_k for the whole batch; steps 00 and 13 "
               "take per-sequence lengths)");
    if (p->block_table)
        REFUSE("block_table given (allowed: NULL; this step reads dense K and V; steps 00 and 13 read them in pages)");
    return 1;
}

/* Every base of four 16-bit tensors, and their batch, row and head strides, a multiple of
 * `bytes` (the forward's q, k, v, o and the backward's dout, dq, dk, dv alike). */
static int aligned(const void *const bases[4], const dim d[4][4], const char *const names[4], int bytes, const char *need,
                   char *why, size_t why_len)
{
    for (int t = 0; t < 4; t++)
        if ((uintptr_t)bases[t] % (uintptr_t)bytes)
            REFUSE("%s at address %p (allowed: %d-byte aligned, for %s)", names[t], bases[t], bytes, need);
    static const int order[3] = {3, 1, 2}; /* batch, row, head: the ABI's order of the strides */
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 3; k++) {
            const int64_t stride = d[t][order[k]].stride;
            if (stride * 2 % bytes)
                REFUSE("%s_%s_stride %lld (allowed: a multiple of %d elements, for %s)", names[t], DIM_NAMES[order[k]],
                       (long long)stride, bytes / 2, need);
        }
    return 1;
}

int fa2_validate_alignment(const fa2_params *p, int bytes, const char *need, char *why, size_t why_len)
{
    const void *bases[4];
    dim d[4][4];
    tensors_of(p, bases, d);
    return aligned(bases, d, TENSOR_NAMES, bytes, need, why, why_len);
}

/* The workspace's bytes against four tensors' (their params already validated, so every
 * last_offset is >= 0): the forward's Q, K, V, O or the backward's dQ, dK, dV, dO. */
static int workspace_apart(range ws, const void *const bases[4], dim d[4][4], const char *const names[4], char *why,
                           size_t why_len)
{
    for (int t = 0; t < 4; t++)
        if (overlap(ws, bytes_of(bases[t], last_offset(d[t]), 2)))
            REFUSE("workspace overlaps %s (allowed: memory apart from every tensor)", names[t]);
    return 1;
}

int fa2_validate_workspace(const fa2_params *p, size_t need, char *why, size_t why_len)
{
    if (need == 0) return 1;
    if (!p->workspace || p->workspace_bytes < need)
        REFUSE("workspace %p of %zu bytes (allowed: at least %zu bytes, fa2_workspace_size)", p->workspace,
               p->workspace_bytes, need);
    if ((uintptr_t)p->workspace % 16) REFUSE("workspace at address %p (allowed: 16-byte aligned)", p->workspace);
    const range ws = bytes_of(p->workspace, (int64_t)p->workspace_bytes - 1, 1);
    const void *bases[4];
    dim d[4][4];
    tensors_of(p, bases, d);
    if (!workspace_apart(ws, bases, d, TENSOR_NAMES, why, why_len)) return 0;
    if (p->lse && overlap(ws, lse_bytes(p))) REFUSE("workspace overlaps lse (allowed: memory apart from every tensor)");
    range cache[2];
    cache_ranges(p, cache);
    for (int c = 0; c < 2; c++)
        if (overlap(ws, cache[c])) REFUSE("workspace overlaps %s (allowed: memory apart from every tensor)", CACHE_NAMES[c]);
    return 1;
}

/* ---- the backward's params ---- */

static const char *const GRAD_NAMES[4] = {"dout", "dq", "dk", "dv"};

/* dO, dQ, dK, dV: laid out as O, Q, K, V. */
static void grads_of(const fa2_bwd_params *bp, const void *bases[4], dim d[4][4])
{
    const fa2_params *p = &bp->fwd;
    bases[0] = bp->dout, bases[1] = bp->dq, bases[2] = bp->dk, bases[3] = bp->dv;
    dims_of(d[0], p->batch, p->seqlen_q, p->heads_q, p->head_dim, bp->dout_batch_stride, bp->dout_row_stride, bp->dout_head_stride);
    dims_of(d[1], p->batch, p->seqlen_q, p->heads_q, p->head_dim, bp->dq_batch_stride, bp->dq_row_stride, bp->dq_head_stride);
    dims_of(d[2], p->batch, p->seqlen_k, p->heads_kv, p->head_dim, bp->dk_batch_stride, bp->dk_row_stride, bp->dk_head_stride);
    dims_of(d[3], p->batch, p->seqlen_k, p->heads_kv, p->head_dim, bp->dv_batch_stride, bp->dv_row_stride, bp->dv_head_stride);
}

int fa2_validate_bwd_params(const fa2_bwd_params *bp, char *why, size_t why_len)
{
    if (!bp) REFUSE("params is NULL");
    const fa2_params *p = &bp->fwd;
    if (!fa2_validate_params(p, why, why_len)) return 0;
    /* No backward reads a KV cache: training attends over dense K and V of one length. */
    if (p->seqlens_k) REFUSE("seqlens_k given to the backward (allowed: NULL; the backward takes one seqlen_k for the batch)");
    if (p->block_table) REFUSE("block_table given to the backward (allowed: NULL; the backward reads dense K and V)");
    if (!p->lse) REFUSE("lse is NULL (allowed: the forward's LSE, from which the backward recomputes P)");
    if (!bp->dout || !bp->dq || !bp->dk || !bp->dv) REFUSE("dout, dq, dk and dv must all be set");
    const void *bases[4], *fwd_bases[4];
    dim d[4][4], fwd_d[4][4];
    grads_of(bp, bases, d);
    tensors_of(p, fwd_bases, fwd_d);
    range ranges[4], reads[5];
    for (int t = 0; t < 4; t++)
        if (!check_tensor(GRAD_NAMES[t], bases[t], d[t], &ranges[t], why, why_len)) return 0;
    /* What the backward reads: q, k, v, o (fa2_validate_params passed: offsets >= 0), lse, dout. */
    for (int t = 0; t < 4; t++) reads[t] = bytes_of(fwd_bases[t], last_offset(fwd_d[t]), 2);
    reads[4] = lse_bytes(p);
    static const char *const READ_NAMES[5] = {"q", "k", "v", "o", "lse"};
    for (int t = 1; t < 4; t++) {
        if (!dims_nest(d[t]))
            REFUSE("%s strides let two elements share an address (allowed: strides that nest, so every element is "
                   "written once)", GRAD_NAMES[t]);
        for (int r = 0; r < 5; r++)
            if (overlap(ranges[t], reads[r])) REFUSE("%s overlaps %s (allowed: an output apart from the inputs)", GRAD_NAMES[t], READ_NAMES[r]);
        for (int u = 0; u < 4; u++)
            if (u != t && overlap(ranges[t], ranges[u]))
                REFUSE("%s overlaps %s (allowed: an output apart from the inputs and the other outputs)", GRAD_NAMES[t], GRAD_NAMES[u]);
    }
    return 1;
}

int fa2_validate_bwd_alignment(const fa2_bwd_params *bp, int bytes, const char *need, char *why, size_t why_len)
{
    const void *bases[4];
    dim d[4][4];
    grads_of(bp, bases, d);
    return aligned(bases, d, GRAD_NAMES, bytes, need, why, why_len);
}

int fa2_validate_bwd_workspace(const fa2_bwd_params *bp, size_t need, char *why, size_t why_len)
{
    if (need && (!bp->fwd.workspace || bp->fwd.workspace_bytes < need))
        REFUSE("workspace %p of %zu bytes (allowed: at least %zu bytes, fa2_backward_workspace_size)", bp->fwd.workspace,
               bp->fwd.workspace_bytes, need);
    if (!fa2_validate_workspace(&bp->fwd, need, why, why_len)) return 0;
    if (need == 0) return 1;
    const range ws = bytes_of(bp->fwd.workspace, (int64_t)bp->fwd.workspace_bytes - 1, 1);
    const void *bases[4];
    dim d[4][4];
    grads_of(bp, bases, d);
    return workspace_apart(ws, bases, d, GRAD_NAMES, why, why_len);
}

int fa2_refuse_backward(const fa2_bwd_params *bp, const char *step, char *why, size_t why_len)
{
    if (!fa2_validate_bwd_params(bp, why, why_len)) return 0;
    REFUSE("fa2_backward: step %s computes the forward alone (allowed: a step with a backward: 00, 14 or 15)", step);
}

static _Thread_local char last_error[256];

int fa2_fail(const char *call, const char *reason)
{
    const size_t name_len = strcspn(call, "(");
    snprintf(last_error, sizeof last_error, "%.*s: %s", (int)name_len, call, reason);
    return FA2_ERR_LAUNCH;
}

const char *fa2_last_error(void) { return last_error[0] ? last_error : "no CUDA call has failed"; }
