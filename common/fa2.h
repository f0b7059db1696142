/* fa2.h - the one ABI every step exports (plain C, no CUDA headers needed).
 *
 * Each step directory builds one kernel file into
 *   build/stepNN/fa2        the harness binary (common/ + the step), and
 *   build/stepNN/libfa2.so  a shared library exporting exactly these symbols,
 * so the same harness, the test matrix and Python (ctypes, next to torch) can
 * drive every step the same way.
 *
 * Layout: every tensor is [batch, seqlen, heads, head_dim] by default, described
 * by element strides, as FlashAttention-2 takes it. head_dim is contiguous.
 * LSE is float [batch, heads_q, seqlen_q], contiguous.
 *
 * Semantics:
 *   S = softmax_scale * Q K^T, P = softmax(S) along keys, O = P V.
 *   GQA: query head h reads key/value head h / (heads_q / heads_kv).
 *   causal: query row i sees key j iff j <= i + seqlen_k - seqlen_q (bottom-right
 *   aligned, as FA2). A row that sees no key writes O = 0 and LSE = -inf.
 *   LSE is the natural-log logsumexp of the scaled scores of the row.
 *
 * Non-finite input follows IEEE arithmetic, as the fp64 reference of the harness
 * and torch's math backend do: a NaN in row i of Q makes row i of O and LSE[i]
 * NaN; a NaN in row j of K makes NaN of the O row and LSE of every query row
 * that sees key j; a NaN in V[j][c] makes O[i][c] NaN for every row i that sees
 * key j. A row that saw keys never gets a silent 0 or -inf. One addition, which
 * the tensor cores impose: a key hidden from some rows by the causal mask still
 * enters P V with weight 0 when it shares a key tile with keys those rows see,
 * and 0 x NaN = NaN, so a NaN in V may also reach rows of that tile that do not
 * see its key (torch's math backend multiplies every key's weight by V too).
 *
 * A KV cache (the fields after the workspace): per-sequence key lengths, and K
 * and V in pages gathered through a block table, as vLLM's paged attention and
 * flash_attn_with_kvcache take them; the struct below says how.
 *
 * What every step refuses (fa2_supports says why in one line; fa2_forward then
 * returns FA2_ERR_UNSUPPORTED and touches no memory): a softmax_scale that is not
 * finite and > 0; a stride < 1; an O whose strides make two elements share an
 * address (two threads would race to write it); base pointers not aligned to
 * their element (2 bytes, LSE 4); a seqlen over 2^30 or a tensor whose largest
 * element offset overflows 2^62 bytes; a KV cache whose fields disagree (page
 * fields without a block table, a page_size that is not a power of two from 16
 * to 256, fewer than seqlen_k keys of pages per sequence, an int32 array not
 * 4-byte aligned or overlapping an output). The values inside seqlens_k and
 * block_table lie in memory no check reads (the GPU's): a length past seqlen_k
 * or a page past num_pages is the caller's error, which step 00, reading them
 * on the host, refuses before it computes. Steps refuse more where their kernel
 * needs it (head dims, 16-byte alignment of bases and strides, grid limits; a
 * step that needs a workspace, one smaller than fa2_workspace_size says, not
 * 16-byte aligned, or overlapping a tensor).
 */
#ifndef FA2_H
#define FA2_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FA2_FP16 = 0, FA2_BF16 = 1 } fa2_dtype;

typedef struct {
    const void *q;  /* [batch, seqlen_q, heads_q,  head_dim] elements of dtype */
    const void *k;  /* [batch, seqlen_k, heads_kv, head_dim] */
    const void *v;  /* [batch, seqlen_k, heads_kv, head_dim] */
    void *o;        /* [batch, seqlen_q, heads_q,  head_dim] */
    float *lse;     /* [batch, heads_q, seqlen_q], or NULL if not wanted */

    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;

    /* element strides (not bytes) */
    int64_t q_batch_stride, q_row_stride, q_head_stride;
    int64_t k_batch_stride, k_row_stride, k_head_stride;
    int64_t v_batch_stride, v_row_stride, v_head_stride;
    int64_t o_batch_stride, o_row_stride, o_head_stride;

    float softmax_scale; /* usually 1 / sqrt(head_dim) */
    int causal;          /* 0 or 1 */
    fa2_dtype dtype;

    /* Scratch memory the step may use during the call, on the GPU for a GPU step
     * (a step that splits the keys keeps its partial results there): at least
     * fa2_workspace_size(p) bytes, 16-byte aligned, apart from every tensor; NULL
     * and 0 when fa2_workspace_size says 0. The caller owns it, so no allocation
     * sits in the timed path and two calls on two streams need two workspaces.
     * The caller zero-fills it once, when it allocates it, and afterwards leaves it
     * to the step's calls: its first fa2_workspace_counter_bytes(p) bytes are
     * counters (one int32 per row of LSE, and four for the call) that a step may
     * count in, and a step that counts there leaves them zero again at the end of
     * every call it completes, so every call begins as the first did, with no
     * memset of its own. The rest a step
     * writes before it reads: it may hold anything (a test fills it with NaN). The
     * backward's workspace (fa2_backward_workspace_size) has no counters: it may
     * hold anything when a call begins. */
    void *workspace;
    size_t workspace_bytes;

    /* ---- a KV cache: per-sequence lengths and pages (both optional; zeroed params
     * use neither). Memory as the other tensors': the GPU's for a GPU step, the
     * host's for step 00. Only steps that say so take them (steps 00 and 13); the
     * others refuse them in one line (fa2_refuse_kv_cache in validate.h). ---- */

    /* int32 [batch]: sequence b has seqlens_k[b] keys, 0 .. seqlen_k, its first ones;
     * seqlen_k is then the longest any may have (the capacity of K and V, and the
     * bound the ABI's checks use). NULL: every sequence has seqlen_k keys. Causal
     * stays bottom-right per sequence: row i of sequence b sees key j iff
     * j <= i + seqlens_k[b] - seqlen_q (its query rows are the last of its own
     * sequence). A sequence of length 0 writes O = 0 and LSE = -inf on every row.
     * (flash_attn_with_kvcache calls this cache_seqlens; FA2's kernel seqused_k.) */
    const int32_t *seqlens_k;

    /* int32 [batch][block_table_batch_stride]: key t of sequence b lives in page
     * block_table[b][t / page_size], at row t % page_size of that page; entries
     * 0 .. max_pages - 1 of a row are the sequence's pages in order, each in
     * 0 .. num_pages - 1, and only those its keys reach are read. NULL: K and V are
     * dense, [batch, seqlen_k, heads_kv, head_dim], and the four fields below are 0.
     * Given, K and V are page pools, [num_pages, page_size, heads_kv, head_dim]:
     * k_batch_stride and v_batch_stride are then the strides between pages, the
     * row and head strides those inside a page. Two sequences may share a page
     * (a common prefix); nothing is written to K or V. */
    const int32_t *block_table;
    int64_t block_table_batch_stride; /* elements between the rows of block_table: >= max_pages */
    int max_pages;                    /* entries per row: max_pages * page_size >= seqlen_k */
    int page_size;                    /* keys per page: a power of two, 16 to 256 */
    int num_pages;                    /* pages in each of the K and V pools: >= 1 */
} fa2_params;

/* Error codes returned by fa2_forward. */
enum {
    FA2_OK = 0,
    FA2_ERR_UNSUPPORTED = 1, /* fa2_supports() says no; nothing was computed */
    FA2_ERR_LAUNCH = 2,      /* the CUDA launch or a CUDA call failed: fa2_last_error() says which and why */
};

/* Runs the forward pass. For a GPU step all pointers are device pointers and
 * `stream` is a cudaStream_t (NULL = default stream); the call is asynchronous.
 * For the CPU step (00) the pointers are host pointers and stream is ignored. */
int fa2_forward(const fa2_params *p, void *stream);

/* 1 if the step can compute these params; otherwise 0, and a one-line reason in
 * words is written to why (if why != NULL). */
int fa2_supports(const fa2_params *p, char *why, size_t why_len);

/* Bytes of workspace fa2_forward needs for these params (0 for every step that
 * computes in one pass, and for params the ABI refuses). Depends on the params
 * only, not on the GPU; call it with q, k, v and o set, as fa2_supports. */
size_t fa2_workspace_size(const fa2_params *p);

/* The counters at the start of a forward's workspace (the workspace field says how
 * they are kept): one int32 per row of LSE, batch x heads_q x seqlen_q, rounded up to
 * 16 bytes, then 16 bytes of counters for the whole call (step 13's work queue), so what
 * follows them stays 16-byte aligned. fa2_workspace_size includes them in the size of
 * every step that needs a workspace. */
static inline size_t fa2_workspace_counter_bytes(const fa2_params *p)
{
    return ((size_t)p->batch * (size_t)p->heads_q * (size_t)p->seqlen_q * sizeof(int32_t) + 15) / 16 * 16 + 16;
}

/* The tile configuration fa2_forward would launch for these params on the
 * current GPU: its index (0 .. fa2_config_count() - 1), and in words (tiles,
 * warps, blocks) in what. -1, with the reason in what, when the step does not
 * support the params or no GPU answers (a choice may depend on its SM count). */
int fa2_config(const fa2_params *p, char *what, size_t what_len);
int fa2_config_count(void); /* how many configurations the step can choose from */

/* Bytes of shared memory one block of configuration `config` requests for params
 * like p (its head dim and dtype), whether or not the step would choose it; -1
 * when config is not one of the step's. A test checks, GPU or not, that every
 * configuration a step chooses under every FA2_EMULATE preset fits that GPU. */
int fa2_config_smem(const fa2_params *p, int config);

/* After fa2_forward returned FA2_ERR_LAUNCH: the CUDA call that failed and the
 * runtime's reason ("cudaFuncSetAttribute: no kernel image is available ..."). */
const char *fa2_last_error(void);

const char *fa2_name(void);       /* e.g. "04_ldmatrix" */
const char *fa2_key_change(void); /* one line: what this step adds */
int fa2_runs_on_gpu(void);        /* 0 for step 00, 1 for CUDA steps */

/* ---- the backward pass ---------------------------------------------------------
 * From the forward's inputs, its output O and its LSE, and dO (the loss's gradient
 * with respect to O), the gradients of Q, K and V:
 *   P  = exp(softmax_scale Q K^T - LSE)   recomputed, 0 where the causal mask hides a key
 *   dV = P^T dO          dP = dO V^T       D = rowsum(dO * O)
 *   dS = P * (dP - D)    dQ = softmax_scale dS K      dK = softmax_scale dS^T Q
 * GQA: the dK and dV of a key/value head sum over the query heads of its group. A row
 * that saw no key (LSE = -inf) contributes nothing; a NaN reaches what it reaches in
 * IEEE arithmetic, as in the forward. dQ, dK and dV are in the dtype. */
typedef struct {
    fa2_params fwd;      /* q, k, v, o (the forward's output, read) and lse (required, read),
                          * shapes, strides, scale, causal, dtype; its workspace is the backward's */
    const void *dout;    /* dO: [batch, seqlen_q, heads_q, head_dim], as o */
    void *dq, *dk, *dv;  /* written: as q, k and v */
    int64_t dout_batch_stride, dout_row_stride, dout_head_stride;
    int64_t dq_batch_stride, dq_row_stride, dq_head_stride;
    int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
    int64_t dv_batch_stride, dv_row_stride, dv_head_stride;
} fa2_bwd_params;

/* A step with a backward exports these three, as fa2_forward, fa2_supports and
 * fa2_workspace_size (steps 00 and 14). */
int fa2_backward(const fa2_bwd_params *p, void *stream);
int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len);
size_t fa2_backward_workspace_size(const fa2_bwd_params *p);

/* Fills default strides for the dense [batch, seqlen, heads, head_dim] layout. */
static inline void fa2_set_dense_strides(fa2_params *p)
{
    int64_t d = p->head_dim;
    p->q_head_stride = d;  p->q_row_stride = d * p->heads_q;  p->q_batch_stride = p->q_row_stride * p->seqlen_q;
    p->k_head_stride = d;  p->k_row_stride = d * p->heads_kv; p->k_batch_stride = p->k_row_stride * p->seqlen_k;
    p->v_head_stride = d;  p->v_row_stride = d * p->heads_kv; p->v_batch_stride = p->v_row_stride * p->seqlen_k;
    p->o_head_stride = d;  p->o_row_stride = d * p->heads_q;  p->o_batch_stride = p->o_row_stride * p->seqlen_q;
}

/* The forward's dense strides, and the same for dO (as O), dQ (as Q), dK and dV (as K). */
static inline void fa2_set_dense_bwd_strides(fa2_bwd_params *p)
{
    fa2_set_dense_strides(&p->fwd);
    const fa2_params *f = &p->fwd;
    p->dout_batch_stride = f->o_batch_stride, p->dout_row_stride = f->o_row_stride, p->dout_head_stride = f->o_head_stride;
    p->dq_batch_stride = f->q_batch_stride, p->dq_row_stride = f->q_row_stride, p->dq_head_stride = f->q_head_stride;
    p->dk_batch_stride = f->k_batch_stride, p->dk_row_stride = f->k_row_stride, p->dk_head_stride = f->k_head_stride;
    p->dv_batch_stride = f->v_batch_stride, p->dv_row_stride = f->v_row_stride, p->dv_head_stride = f->v_head_stride;
}

#ifdef __cplusplus
}
#endif
#endif /* FA2_H */
