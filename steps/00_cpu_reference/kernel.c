/* Step 00 - the FlashAttention-2 forward in plain C on the CPU.
 *
 * This is the algorithm every GPU step implements, written so it can be read
 * and stepped through in a debugger:
 *   for each query tile Q_i (BLOCK_M rows):
 *     m = -inf, l = 0, O = 0                       (per row, kept "in registers")
 *     for each key tile K_j, V_j (BLOCK_N rows) the tile can see:
 *       S   = Q_i K_j^T                            (BLOCK_M x BLOCK_N, fp32)
 *       m'  = max(m, rowmax(S) * scale)
 *       P   = exp(S * scale - m')
 *       l   = l * exp(m - m') + rowsum(P)          (fp32 P)
 *       O   = O * exp(m - m') + P V_j              (P rounded to fp16/bf16, like the GPU;
 *                                                   the rescale keeps old work valid)
 *     O /= l, LSE = m + log(l)                     (deferred normalisation)
 * and, for the split-KV step (13), the same loop run on ranges of key tiles,
 * each range's O and LSE merged at the end (forward_tile, merge_splits).
 * Next to it, fa2_cpu_naive_forward materialises the whole S row and is what the
 * tiled loop is checked against in the CPU tests.
 * Arithmetic is fp32 with exp(), not exp2 with the scale folded in: the GPU steps
 * introduce that trick where it pays, and it changes nothing but rounding.
 *
 * A KV cache (fa2.h): each sequence has its own key count (seq_len_k), and its
 * key t, when K and V are paged, lives at row t % page_size of the page the block
 * table names for t / page_size (kv_row). Nothing else changes: the loops run to
 * the sequence's own length, and causal stays bottom-right within it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/fa2.h"
#include "../../common/numeric.h"
#include "../../common/validate.h"

enum { BLOCK_M = 64, BLOCK_N = 64, MAX_DIM = 256, MAX_SPLITS = 64 };

/* Element (b, row, h, 0) of a [batch, seqlen, heads, head_dim] tensor with these element strides. */
static const uint16_t *row_of(const void *base, int64_t bs, int64_t rs, int64_t hs, int b, int row, int h)
{
    return (const uint16_t *)base + b * bs + row * rs + h * hs;
}

/* Keys of sequence b: its own length, or seqlen_k for every sequence. */
static long long seq_len_k(const fa2_params *p, int b) { return p->seqlens_k ? p->seqlens_k[b] : p->seqlen_k; }

/* Element (b, key t, kv head h, 0) of K or V (base, with its strides): the dense row,
 * or row t % page_size of the page the block table gives for t / page_size, whose
 * stride is the tensor's batch stride. */
static const uint16_t *kv_row(const fa2_params *p, const void *base, int64_t bs, int64_t rs, int64_t hs, int b,
                              long long t, int h)
{
    if (!p->block_table) return row_of(base, bs, rs, hs, b, (int)t, h);
    const int32_t page = p->block_table[b * p->block_table_batch_stride + t / p->page_size];
    return (const uint16_t *)base + page * bs + (t % p->page_size) * rs + h * hs;
}
#define K_ROW(p, b, t, h) kv_row(p, (p)->k, (p)->k_batch_stride, (p)->k_row_stride, (p)->k_head_stride, b, t, h)
#define V_ROW(p, b, t, h) kv_row(p, (p)->v, (p)->v_batch_stride, (p)->v_row_stride, (p)->v_head_stride, b, t, h)

/* The values in the cache's arrays, which the ABI's checks cannot read (on a GPU
 * they are device memory); here they are the host's, so fa2_supports refuses a
 * length past seqlen_k or a page outside the pool, naming the entry, before anything
 * is read through it. Only the entries a sequence's keys reach are read, so only
 * those are checked. */
static int kv_cache_values_ok(const fa2_params *p, char *why, size_t why_len)
{
    for (int b = 0; b < p->batch; b++) {
        const long long n = seq_len_k(p, b);
        if (n < 0 || n > p->seqlen_k) {
            if (why) snprintf(why, why_len, "seqlens_k[%d] = %lld (allowed: 0 to seqlen_k = %d)", b, n, p->seqlen_k);
            return 0;
        }
        if (!p->block_table) continue;
        for (long long e = 0; e < (n + p->page_size - 1) / p->page_size; e++) {
            const int32_t page = p->block_table[b * p->block_table_batch_stride + e];
            if (page < 0 || page >= p->num_pages) {
                if (why)
                    snprintf(why, why_len, "block_table[%d][%lld] = %d (allowed: 0 to num_pages - 1 = %d: sequence %d's keys reach it)",
                             b, e, page, p->num_pages - 1, b);
                return 0;
            }
        }
    }
    return 1;
}

/* The online softmax of rows [m0, m0 + rows) of one head over the key tiles
 * [tile_lo, tile_hi) they can see, from m = -inf, l = 0, o = 0: on return o is
 * the unnormalised sum of P V, m the row max (-inf if the rows saw no key) and l
 * the sum of exp(s - m). */
static void attend(const fa2_params *p, int b, int h, int m0, int rows, long long tile_lo, long long tile_hi,
                   float q[][MAX_DIM], float o[][MAX_DIM], float m[], float l[])
{
    const int d = p->head_dim, hk = h / (p->heads_q / p->heads_kv);
    const long long nk = seq_len_k(p, b), shift = nk - p->seqlen_q; /* row i sees keys j <= i + shift */
    float s[BLOCK_M][BLOCK_N];
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < d; c++) o[r][c] = 0;
        m[r] = -INFINITY;
        l[r] = 0;
    }
    for (long long n0 = tile_lo * BLOCK_N; n0 < tile_hi * BLOCK_N && n0 < nk; n0 += BLOCK_N) {
        int cols = (int)(nk - n0 < BLOCK_N ? nk - n0 : BLOCK_N);
        for (int r = 0; r < rows; r++) {
            /* Causal: row m0 + r sees keys up to m0 + r + shift; none of this tile -> skip it. */
            long long visible_end = p->causal ? m0 + r + shift + 1 : nk;
            if (visible_end <= n0) continue;
            float row_max = -INFINITY;
            for (int j = 0; j < cols; j++) {
                const uint16_t *krow = K_ROW(p, b, n0 + j, hk);
                float acc = 0;
                for (int c = 0; c < d; c++) acc += q[r][c] * fa2_to_float(krow[c], p->dtype);
                s[r][j] = n0 + j < visible_end ? acc * p->softmax_scale : -INFINITY;
                if (s[r][j] > row_max) row_max = s[r][j]; /* a NaN score is skipped here ... */
            }
            float m_new = row_max > m[r] ? row_max : m[r];
            /* exp(-inf) = 0 on the first visible tile. (If every score seen so far is
             * NaN, m_new is still -inf and this is NaN, as IEEE arithmetic has it.) */
            float correction = expf(m[r] - m_new);
            float row_sum = 0;
            for (int j = 0; j < cols; j++) {
                float prob = expf(s[r][j] - m_new);  /* ... but not here: NaN reaches l and O */
                row_sum += prob;                      /* l sums fp32 P, as the GPU's registers do */
                s[r][j] = fa2_round(prob, p->dtype); /* P.V sees P rounded, as the tensor cores will */
            }
            l[r] = l[r] * correction + row_sum;
            m[r] = m_new;
            for (int c = 0; c < d; c++) o[r][c] *= correction;
            for (int j = 0; j < cols; j++) {
                const uint16_t *vrow = V_ROW(p, b, n0 + j, hk);
                for (int c = 0; c < d; c++) o[r][c] += s[r][j] * fa2_to_float(vrow[c], p->dtype);
            }
        }
    }
}

/* The LSE of a row from its max and sum: l is exactly 0 only for a row that saw
 * no key (the max's own term is 1), whose LSE is -inf; a NaN l gives NaN. */
static float lse_of(float m, float l) { return l != 0 ? m + logf(l) : -INFINITY; }

/* Merges the partial results of `splits` key ranges of one row: O_s (normalised
 * by its own l) and LSE_s. The weight of range s in the whole softmax is
 * exp(LSE_s - LSE), with LSE = log sum_s exp(LSE_s): the rescale the online
 * softmax applies to O at each key tile, applied once per range. A range that
 * saw no key has LSE_s = -inf and weight 0; if none saw one, O = 0 and LSE = -inf.
 * A NaN LSE_s reaches the sum (fmaxf skips it, exp does not). */
static float merge_splits(int splits, const float *lse_part, const float *o_part, int64_t o_split_stride, int d,
                          float *o)
{
    float lse_max = -INFINITY;
    for (int sp = 0; sp < splits; sp++) lse_max = fmaxf(lse_max, lse_part[sp]);
    const float shift = lse_max == -INFINITY ? 0 : lse_max; /* all -inf: exp(-inf - 0) = 0, not NaN */
    float sum = 0;
    for (int sp = 0; sp < splits; sp++) sum += expf(lse_part[sp] - shift);
    const float lse = sum != 0 ? shift + logf(sum) : -INFINITY;
    for (int c = 0; c < d; c++) o[c] = 0;
    for (int sp = 0; sp < splits; sp++) {
        const float weight = sum != 0 ? expf(lse_part[sp] - lse) : 0; /* (sum 0: every range empty, O = 0) */
        for (int c = 0; c < d; c++) o[c] += weight * o_part[sp * o_split_stride + c];
    }
    return lse;
}

/* One query tile of one head, rows [m0, m0 + rows), its visible key tiles cut into
 * `splits` ranges of whole tiles (as a split-KV GPU step gives each range its
 * own block): each range runs the online softmax alone and leaves O_s = o / l and
 * LSE_s, then merge_splits combines them. One split is the plain FA2 loop. */
static void forward_tile(const fa2_params *p, int splits, int b, int h, int m0, int rows, float *o_part,
                         float *lse_part)
{
    const int d = p->head_dim;
    const long long nk = seq_len_k(p, b), shift = nk - p->seqlen_q;
    float q[BLOCK_M][MAX_DIM], o[BLOCK_M][MAX_DIM], m[BLOCK_M], l[BLOCK_M];
    for (int r = 0; r < rows; r++) {
        const uint16_t *qrow = row_of(p->q, p->q_batch_stride, p->q_row_stride, p->q_head_stride, b, m0 + r, h);
        for (int c = 0; c < d; c++) q[r][c] = fa2_to_float(qrow[c], p->dtype);
    }
    /* Causal: the last query row of the tile sees keys up to m0 + rows - 1 + shift;
     * key tiles past that are skipped whole. */
    long long key_end = p->causal ? m0 + rows + shift : nk;
    if (key_end > nk) key_end = nk;
    const long long tiles = key_end > 0 ? (key_end + BLOCK_N - 1) / BLOCK_N : 0;
    const long long tiles_per_split = (tiles + splits - 1) / splits; /* the last ranges may be empty */

    /* o_part: [splits][BLOCK_M][d], lse_part: [splits][BLOCK_M] */
    for (int sp = 0; sp < splits; sp++) {
        attend(p, b, h, m0, rows, sp * tiles_per_split, (sp + 1) * tiles_per_split, q, o, m, l);
        for (int r = 0; r < rows; r++) {
            const float inv_l = l[r] != 0 ? 1.0f / l[r] : 0.0f;
            for (int c = 0; c < d; c++) o_part[((int64_t)sp * BLOCK_M + r) * d + c] = o[r][c] * inv_l;
            lse_part[sp * BLOCK_M + r] = lse_of(m[r], l[r]);
        }
    }
    for (int r = 0; r < rows; r++) {
        float lse_r[MAX_SPLITS], o_r[MAX_DIM];
        for (int sp = 0; sp < splits; sp++) lse_r[sp] = lse_part[sp * BLOCK_M + r];
        const float lse = merge_splits(splits, lse_r, o_part + (int64_t)r * d, (int64_t)BLOCK_M * d, d, o_r);
        uint16_t *orow = (uint16_t *)p->o + b * p->o_batch_stride + (m0 + r) * p->o_row_stride + h * p->o_head_stride;
        for (int c = 0; c < d; c++) orow[c] = fa2_from_float(o_r[c], p->dtype);
        if (p->lse) p->lse[((size_t)b * p->heads_q + h) * p->seqlen_q + m0 + r] = lse;
    }
}

/* The forward pass with each query tile's keys cut into `splits` ranges
 * (1 .. MAX_SPLITS) and merged: what the split-KV GPU step computes, checked on
 * the CPU by the tests against splits = 1, which is fa2_forward. */
int fa2_cpu_split_forward(const fa2_params *p, int splits)
{
    if (!fa2_supports(p, NULL, 0) || splits < 1 || splits > MAX_SPLITS) return FA2_ERR_UNSUPPORTED;
    const int tiles = (p->seqlen_q + BLOCK_M - 1) / BLOCK_M;
    const long long work = (long long)p->batch * p->heads_q * tiles;
    int failed = 0;
#pragma omp parallel
    {
        float *o_part = malloc(sizeof(float) * (size_t)splits * BLOCK_M * (size_t)p->head_dim);
        float *lse_part = malloc(sizeof(float) * (size_t)splits * BLOCK_M);
        if (!o_part || !lse_part) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (long long w = 0; w < work; w++) {
            if (!o_part || !lse_part) continue;
            int t = (int)(w % tiles), h = (int)(w / tiles % p->heads_q), b = (int)(w / tiles / p->heads_q);
            int m0 = t * BLOCK_M, rows = p->seqlen_q - m0 < BLOCK_M ? p->seqlen_q - m0 : BLOCK_M;
            forward_tile(p, splits, b, h, m0, rows, o_part, lse_part);
        }
        free(o_part);
        free(lse_part);
    }
    return failed ? fa2_fail("malloc", "out of host memory for the partial results of one query tile") : FA2_OK;
}

int fa2_forward(const fa2_params *p, void *stream)
{
    (void)stream;
    return fa2_cpu_split_forward(p, 1);
}

/* The textbook version: materialise the whole score row, softmax it, multiply.
 * fp32 throughout, P not rounded: what the tiled loop must agree with. */
int fa2_cpu_naive_forward(const fa2_params *p)
{
    if (!fa2_supports(p, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    const int d = p->head_dim, group = p->heads_q / p->heads_kv;
    float *s = malloc(sizeof(float) * (size_t)p->seqlen_k), *o = malloc(sizeof(float) * (size_t)d);
    if (!s || !o) {
        free(s);
        free(o);
        return fa2_fail("malloc", "out of host memory for one row of scores");
    }
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seqlen_q; i++) {
                const uint16_t *qrow = row_of(p->q, p->q_batch_stride, p->q_row_stride, p->q_head_stride, b, i, h);
                const long long nk = seq_len_k(p, b), shift = nk - p->seqlen_q;
                const long long visible = p->causal ? (long long)i + shift + 1 : nk; /* keys 0 .. visible - 1 */
                float mx = -INFINITY, sum = 0;
                memset(o, 0, sizeof(float) * (size_t)d);
                for (long long j = 0; j < visible && j < nk; j++) {
                    const uint16_t *krow = K_ROW(p, b, j, h / group);
                    float acc = 0;
                    for (int c = 0; c < d; c++) acc += fa2_to_float(qrow[c], p->dtype) * fa2_to_float(krow[c], p->dtype);
                    s[j] = acc * p->softmax_scale;
                    if (s[j] > mx) mx = s[j];
                }
                for (long long j = 0; j < visible && j < nk; j++) sum += (s[j] = expf(s[j] - mx));
                for (long long j = 0; j < visible && j < nk; j++) {
                    const uint16_t *vrow = V_ROW(p, b, j, h / group);
                    for (int c = 0; c < d; c++) o[c] += s[j] / sum * fa2_to_float(vrow[c], p->dtype);
                }
                uint16_t *orow = (uint16_t *)p->o + b * p->o_batch_stride + i * p->o_row_stride + h * p->o_head_stride;
                for (int c = 0; c < d; c++) orow[c] = fa2_from_float(o[c], p->dtype);
                if (p->lse) p->lse[((size_t)b * p->heads_q + h) * p->seqlen_q + i] = visible > 0 ? mx + logf(sum) : -INFINITY;
            }
    free(s);
    free(o);
    return FA2_OK;
}

/* ---- the backward pass (fa2.h) -----------------------------------------------------
 *
 * FlashAttention-2's backward, tiled as the GPU step will tile it: for each key tile
 * K_j, V_j of a key/value head (BLOCK_N keys, its dK_j and dV_j kept "in registers"),
 * walk every query tile Q_i of every query head of its group that can see it:
 *   P   = exp(S - LSE_i)  with S = scale Q_i K_j^T      (recomputed: the forward kept
 *                                                        only LSE, not the N x N P)
 *   dV_j += P^T dO_i                                     (P rounded, as for P V)
 *   dP  = dO_i V_j^T,     dS = P * (dP - D_i)            (D = rowsum(dO * O), once per row)
 *   dQ_i += scale dS K_j  (fp32, in the workspace: every key tile adds to it)
 *   dK_j += scale dS^T Q_i                               (dS rounded for both products)
 * then write dK_j and dV_j, and at the end dQ. A key hidden from a row by the causal
 * mask adds nothing to it (the CPU skips it; P would be 0 there).
 * Workspace: dQ accumulators [batch, heads_q, seqlen_q, head_dim] and D [batch,
 * heads_q, seqlen_q], fp32. */
static size_t bwd_rows(const fa2_params *p) { return (size_t)p->batch * p->heads_q * p->seqlen_q; }

size_t fa2_backward_workspace_size(const fa2_bwd_params *p)
{
    if (!fa2_validate_params(&p->fwd, NULL, 0)) return 0;
    return bwd_rows(&p->fwd) * ((size_t)p->fwd.head_dim + 1) * sizeof(float);
}

int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len)
{
    if (!fa2_validate_bwd_params(p, why, why_len) || !fa2_supports(&p->fwd, why, why_len)) return 0;
    return fa2_validate_bwd_workspace(p, fa2_backward_workspace_size(p), why, why_len);
}

/* The gradients of one key tile of kv head hk: rows [n0, n0 + cols) of dK and dV. */
static void backward_key_tile(const fa2_bwd_params *bp, int b, int hk, int n0, int cols, float *dq_acc, const float *d_row)
{
    const fa2_params *p = &bp->fwd;
    const int d = p->head_dim, group = p->heads_q / p->heads_kv;
    const long long shift = (long long)p->seqlen_k - p->seqlen_q; /* row i sees keys j <= i + shift */
    float k[BLOCK_N][MAX_DIM], v[BLOCK_N][MAX_DIM], dk[BLOCK_N][MAX_DIM], dv[BLOCK_N][MAX_DIM];
    for (int j = 0; j < cols; j++) {
        const uint16_t *krow = row_of(p->k, p->k_batch_stride, p->k_row_stride, p->k_head_stride, b, n0 + j, hk);
        const uint16_t *vrow = row_of(p->v, p->v_batch_stride, p->v_row_stride, p->v_head_stride, b, n0 + j, hk);
        for (int c = 0; c < d; c++) {
            k[j][c] = fa2_to_float(krow[c], p->dtype), v[j][c] = fa2_to_float(vrow[c], p->dtype);
            dk[j][c] = dv[j][c] = 0;
        }
    }
    /* Causal: rows before n0 - shift see no key of this tile; their query tiles are skipped. */
    const long long first_row = p->causal ? (n0 - shift > 0 ? n0 - shift : 0) : 0;
    for (int h = hk * group; h < (hk + 1) * group; h++)
        for (long long i = first_row; i < p->seqlen_q; i++) {
            const size_t row = ((size_t)b * p->heads_q + h) * p->seqlen_q + (size_t)i;
            const float lse = p->lse[row], d_i = d_row[row];
            float q[MAX_DIM], dout[MAX_DIM];
            const uint16_t *qrow = row_of(p->q, p->q_batch_stride, p->q_row_stride, p->q_head_stride, b, (int)i, h);
            const uint16_t *dorow = row_of(bp->dout, bp->dout_batch_stride, bp->dout_row_stride, bp->dout_head_stride, b, (int)i, h);
            for (int c = 0; c < d; c++) q[c] = fa2_to_float(qrow[c], p->dtype), dout[c] = fa2_to_float(dorow[c], p->dtype);
            float *dq = dq_acc + row * (size_t)d;
            for (int j = 0; j < cols; j++) {
                if (p->causal && n0 + j > i + shift) break; /* hidden, and so is every later key */
                float s = 0, dp = 0;
                for (int c = 0; c < d; c++) s += q[c] * k[j][c], dp += dout[c] * v[j][c];
                const float prob = expf(s * p->softmax_scale - lse);
                const float ds = fa2_round(prob * (dp - d_i), p->dtype) * p->softmax_scale;
                const float prob_r = fa2_round(prob, p->dtype);
                for (int c = 0; c < d; c++) {
                    dv[j][c] += prob_r * dout[c];
                    dk[j][c] += ds * q[c];
                    dq[c] += ds * k[j][c];
                }
            }
        }
    for (int j = 0; j < cols; j++) {
        uint16_t *dkrow = (uint16_t *)bp->dk + b * bp->dk_batch_stride + (int64_t)(n0 + j) * bp->dk_row_stride + hk * bp->dk_head_stride;
        uint16_t *dvrow = (uint16_t *)bp->dv + b * bp->dv_batch_stride + (int64_t)(n0 + j) * bp->dv_row_stride + hk * bp->dv_head_stride;
        for (int c = 0; c < d; c++) dkrow[c] = fa2_from_float(dk[j][c], p->dtype), dvrow[c] = fa2_from_float(dv[j][c], p->dtype);
    }
}

int fa2_backward(const fa2_bwd_params *bp, void *stream)
{
    (void)stream;
    if (!fa2_backward_supports(bp, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    const fa2_params *p = &bp->fwd;
    const int d = p->head_dim;
    const long long rows = (long long)bwd_rows(p);
    float *dq_acc = (float *)p->workspace, *d_row = dq_acc + (size_t)rows * d;
    /* D = rowsum(dO * O) (the softmax's own term of dS), and dQ's accumulators zeroed. */
#pragma omp parallel for
    for (long long r = 0; r < rows; r++) {
        const int i = (int)(r % p->seqlen_q), h = (int)(r / p->seqlen_q % p->heads_q), b = (int)(r / p->seqlen_q / p->heads_q);
        const uint16_t *orow = row_of(p->o, p->o_batch_stride, p->o_row_stride, p->o_head_stride, b, i, h);
        const uint16_t *dorow = row_of(bp->dout, bp->dout_batch_stride, bp->dout_row_stride, bp->dout_head_stride, b, i, h);
        float acc = 0;
        for (int c = 0; c < d; c++) acc += fa2_to_float(dorow[c], p->dtype) * fa2_to_float(orow[c], p->dtype);
        d_row[r] = acc;
        for (int c = 0; c < d; c++) dq_acc[r * d + c] = 0;
    }
    /* One kv head per thread at a time: its key tiles add to the dQ rows of its own
     * group alone, so no two threads touch one accumulator. */
#pragma omp parallel for schedule(dynamic, 1)
    for (long long w = 0; w < (long long)p->batch * p->heads_kv; w++) {
        const int hk = (int)(w % p->heads_kv), b = (int)(w / p->heads_kv);
        for (int n0 = 0; n0 < p->seqlen_k; n0 += BLOCK_N)
            backward_key_tile(bp, b, hk, n0, p->seqlen_k - n0 < BLOCK_N ? p->seqlen_k - n0 : BLOCK_N, dq_acc, d_row);
    }
#pragma omp parallel for
    for (long long r = 0; r < rows; r++) {
        const int i = (int)(r % p->seqlen_q), h = (int)(r / p->seqlen_q % p->heads_q), b = (int)(r / p->seqlen_q / p->heads_q);
        uint16_t *dqrow = (uint16_t *)bp->dq + b * bp->dq_batch_stride + (int64_t)i * bp->dq_row_stride + h * bp->dq_head_stride;
        for (int c = 0; c < d; c++) dqrow[c] = fa2_from_float(dq_acc[r * d + c], p->dtype);
    }
    return FA2_OK;
}

int fa2_supports(const fa2_params *p, char *why, size_t why_len)
{
    if (!fa2_validate_params(p, why, why_len)) return 0;
    if (p->head_dim > MAX_DIM) {
        if (why) snprintf(why, why_len, "head_dim %d (allowed: 1 to %d)", p->head_dim, MAX_DIM);
        return 0;
    }
    return kv_cache_values_ok(p, why, why_len);
}

int fa2_config_count(void) { return 1; }

int fa2_config(const fa2_params *p, char *what, size_t what_len)
{
    if (!fa2_supports(p, what, what_len)) return -1;
    snprintf(what, what_len, "%d x %d tiles, %lld query tiles over OpenMP threads", BLOCK_M, BLOCK_N,
             (long long)p->batch * p->heads_q * ((p->seqlen_q + BLOCK_M - 1) / BLOCK_M));
    return 0;
}

const char *fa2_name(void) { return "00_cpu_reference"; }
const char *fa2_key_change(void) { return "the FA2 algorithm in C: tiles, online softmax, deferred 1/l"; }
int fa2_runs_on_gpu(void) { return 0; }
size_t fa2_workspace_size(const fa2_params *p) { (void)p; return 0; }
int fa2_config_smem(const fa2_params *p, int config) { (void)p; return config == 0 ? 0 : -1; }  /* the CPU has no shared memory to ask for */
