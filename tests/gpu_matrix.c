/* gpu_matrix.c - the GPU test matrix. Loads each step's shared library given on
 * the command line (they all export the fa2.h ABI) and checks every step against
 * one fp64 reference per case:
 *   - seqlens 1 to 1025, Nq = Nk and six Nq != Nk pairs both ways, causal on/off,
 *     heads_q = heads_kv and 4 x heads_kv, d 64/128, fp16/bf16 (every row checked);
 *   - Q, K, V as strided views of one packed QKV tensor;
 *   - the tile configurations: shapes sized from this GPU's SM count so that every
 *     configuration a step can choose runs (each line names the one that ran, and
 *     a step with a configuration no case reached fails), with peaky inputs
 *     (Q and K scaled by 4) that move the running max by more than 2^8 after a
 *     row's first key tile, so the O rescale runs with corrections far below 1;
 *   - inputs scaled by 30 and 100 (LSE in the thousands);
 *   - layouts: [batch, heads, seqlen, dim], padded rows with a non-dense O, strides
 *     that are not multiples of 8 and bases 2 bytes off 16-byte alignment (the
 *     last two may be refused, in one line, by steps that need alignment);
 *   - GQA ratios 2, 3, 8 and MQA; seqlens 4097, 20000 (K and V of 10 MB a head,
 *     more than the L2 holds for five) and 70001; a Q and O of more than
 *     2^31 elements (long Q, short K); lse = NULL; a non-default stream; softmax
 *     scales other than 1/sqrt(d); a NaN in a row of Q, a row of K, an element of V;
 *   - decode: 1 to 5 query rows, 3000 to 20000 keys, GQA groups 1 to 32, causal
 *     with Nq > 1, peaky scores and NaN in a K row or V element of one key range;
 *   - a KV cache (fa2.h): lengths per sequence mixed in one batch (0, 1, a page
 *     boundary -1/0/+1, one near a 128-key boundary, the longest), K and V in pages
 *     of 16, 32, 64 and 256 keys shuffled through the pool (fa2_problem_page), blocks
 *     that run many key tiles of small pages, block table
 *     rows and pages padded past their minimum strides, pages without per-sequence
 *     lengths, lengths on dense K and V, NaN in a sequence's K row and V element,
 *     Nq 1 to 4 causal and not, GQA and MQA, batches of 100 and 2048 uneven lengths
 *     (more key ranges than blocks of a wave), batch 70,000 (a second launch, whose
 *     sequences have lengths, table rows and pages of their own), and two 99 KB
 *     presets. Every row no key of a sequence occupies holds NaN (unowned pages, a
 *     last page's tail, dense rows past a length, table entries past a sequence's
 *     keys naming an unowned page), so a key read that is not the sequence's reaches O. A step that does not take a cache must
 *     refuse every such case in one line naming the field, and its fa2_forward must
 *     touch nothing; a step that takes one must take every case.
 * Every tensor lives inside a guard zone: input padding and guards hold NaN (a
 * kernel that reads them produces NaN and fails), O and LSE with their padding and
 * guards are poisoned before each step runs, and after it every O and LSE element
 * must have been written and every byte around them must still hold the poison.
 * A step's workspace (fa2_workspace_size) is poisoned too, between guards that
 * must stay poisoned, all but its counters (fa2.h's fa2_workspace_counter_bytes),
 * which are zeroed as an allocator does once; a step that needs a workspace runs each
 * case twice on it, O and LSE poisoned again between, and both calls must pass (the
 * first must leave the counters as the second needs them). In the KV-cache cases the inputs, the page pools, the block
 * table and seqlens_k sit in guard zones too (int32 guards all bits set), and every
 * byte of those allocations must be as uploaded after each step.
 * The backward, for every step whose fa2_backward_supports takes the params (the
 * others say they compute the forward alone): dQ, dK and dV from the step's own
 * forward O and LSE, against the fp64 backward given that O, over tails (seqlen 1,
 * odd lengths), causal with Nq != Nk both ways (rows that see no key), GQA 4:1 and
 * MQA, d 64 and 128, fp16 and bf16, a padded and a [b,h,s,d] layout, Q and K scaled
 * by 4 and 30, a NaN in a Q row, a 99 KB preset, and FA2_DETERMINISTIC=1 (which must
 * give the same bits twice); dQ, dK, dV and the workspace are poisoned inside guard
 * zones, as O is, and every element must be written and nothing around them.
 * Without a usable GPU it prints one SKIP line per step and exits 0. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/device_limits.h"
#include "test_util.h"

typedef struct {
    step_abi abi;
    unsigned reached; /* bit i: configuration i ran in a passing case */
    double o_worst, lse_worst; /* the largest error over all cases, in units of its tolerance */
    char o_worst_case[512], lse_worst_case[512];
    int kv_taken, kv_refused; /* KV-cache cases it ran, and refused in one line naming the field */
} step_lib;

typedef enum { DENSE, PACKED_QKV, BHSD, PADDED, ODD_STRIDES, OFFSET_BASES } layout;
static const char *const layout_names[] = {"", "packed-qkv", "[b,h,s,d]", "padded rows, non-dense O",
                                           "strides not multiples of 8", "bases 2 bytes off 16-byte alignment"};

enum { KV_MAX_BATCH = 32 }; /* lengths a KV-cache case lists */

typedef struct {
    int batch, hq, hkv, nq, nk, d, causal;
    fa2_dtype t;
    float input_scale;   /* multiplies Q and K */
    float softmax_scale; /* 0: 1 / sqrt(d) */
    layout lay;
    nan_site nan;
    int nan_row, nan_col;
    int no_lse, on_stream;
    int may_refuse;    /* a step may refuse it (alignment, or its workspace limit), in one line */
    const char *preset; /* FA2_EMULATE for this case (NULL: this GPU's own limits) */
    int rescale_probe; /* the inputs must move some row's running max by > 2^8 after its first key tile */
    /* A KV cache (fa2.h): seqlens_k from lens when seqlens is set (sequence b has
     * lens[b % n_lens] keys: a batch past n_lens repeats them), K and V in shuffled pages of page_size keys when that is not 0; kv_pad
     * pads the block table's rows (3 entries) and the pool's pages (64 elements) with NaN
     * and unowned pages, so a step must read block_table_batch_stride and k/v_batch_stride. */
    int seqlens, n_lens, page_size, kv_pad;
    int32_t lens[KV_MAX_BATCH];
    int deterministic; /* the backward's cases: FA2_DETERMINISTIC=1 (and the same bits twice) */
} test_case;

/* Elements of NaN/poison before and after every tensor, and LSE floats likewise. */
enum { GUARD = 4096 };
enum { WS_GUARD = 4096 }; /* bytes of poison before and after a step's workspace */
/* Cases with at most this many multiply-adds check every row; larger ones a spread sample. */
#define FULL_CHECK_MACS (1LL << 30)

/* ---- tensors in guarded device allocations ---------------------------------------- */

typedef struct {
    int batch, seqlen, heads, d;
    int64_t bs, rs, hs;
} tensor_layout;

static int64_t span_of(const tensor_layout *l) /* largest element offset + 1 */
{
    return (int64_t)(l->batch - 1) * l->bs + (int64_t)(l->seqlen - 1) * l->rs + (int64_t)(l->heads - 1) * l->hs + l->d;
}

static int is_dense(const tensor_layout *l)
{
    return l->hs == l->d && l->rs == (int64_t)l->heads * l->d && l->bs == l->rs * l->seqlen;
}

typedef struct {
    uint16_t *dev;  /* the allocation */
    size_t elems;   /* its size */
} device_buffer;

/* A device buffer holding `count` tensors (their data dense on the host, dense[i]
 * laid out by lay[i] from element at[i] of the buffer) and NaN everywhere else:
 * GUARD elements before the first, after the last, and all padding. */
static device_buffer upload_tensors(int count, const uint16_t *const *dense, const tensor_layout *lay, const size_t *at)
{
    size_t end = 0;
    for (int i = 0; i < count; i++) {
        const size_t e = at[i] + (size_t)span_of(&lay[i]);
        if (e > end) end = e;
    }
    device_buffer buf = {NULL, end + GUARD};
    buf.dev = fa2_device_alloc(buf.elems * 2);
    fa2_device_poison(buf.dev, buf.elems * 2); /* all bits set: a NaN */
    if (count == 1 && is_dense(&lay[0])) {
        fa2_device_upload(buf.dev + at[0], dense[0], (size_t)span_of(&lay[0]) * 2);
        return buf;
    }
    uint16_t *host = fa2_xmalloc(buf.elems * 2, "a strided input");
    memset(host, 0xff, buf.elems * 2);
    for (int i = 0; i < count; i++) {
        const tensor_layout *l = &lay[i];
        for (int b = 0; b < l->batch; b++)
            for (int s = 0; s < l->seqlen; s++)
                for (int h = 0; h < l->heads; h++)
                    memcpy(host + at[i] + b * l->bs + s * l->rs + h * l->hs,
                           dense[i] + (((size_t)b * l->seqlen + s) * l->heads + h) * l->d, (size_t)l->d * 2);
    }
    fa2_device_upload(buf.dev, host, buf.elems * 2);
    free(host);
    return buf;
}

/* The strides of one tensor of `seqlen` rows and `heads` heads in layout `lay`. */
static tensor_layout layout_of(layout lay, int is_output, int batch, int seqlen, int heads, int d)
{
    tensor_layout l = {batch, seqlen, heads, d, 0, 0, 0};
    switch (lay) {
    case DENSE: case PACKED_QKV: case OFFSET_BASES:
        l.hs = d, l.rs = (int64_t)heads * d, l.bs = l.rs * seqlen;
        break;
    case BHSD:
        l.rs = d, l.hs = (int64_t)seqlen * d, l.bs = l.hs * heads;
        break;
    case PADDED: /* rows padded by 64 elements; O also padded between heads */
        l.hs = is_output ? d + 8 : d;
        l.rs = (int64_t)heads * l.hs + (is_output ? 16 : 64);
        l.bs = l.rs * seqlen + 128;
        break;
    case ODD_STRIDES:
        l.hs = d, l.rs = (int64_t)heads * d + 1, l.bs = l.rs * seqlen + 3;
        break;
    }
    return l;
}

static void set_strides(const tensor_layout *l, int64_t *bs, int64_t *rs, int64_t *hs) { *bs = l->bs, *rs = l->rs, *hs = l->hs; }

/* ---- the rescale probe -------------------------------------------------------------- */

/* Over the checked rows: how many see their running max grow by more than 2^8
 * (RESCALE_LOG2 of steps 07-12) at some key tile after their first, with
 * tiles of `tile` keys, and the largest such growth in log2 units. */
static int rows_with_big_jumps(const fa2_problem *pr, const fa2_row_set *rs, int tile, double *largest_log2)
{
    const fa2_params *p = &pr->p;
    const int d = p->head_dim, group = p->heads_q / p->heads_kv;
    const long long shift = (long long)p->seqlen_k - p->seqlen_q;
    int rows = 0;
    double largest = 0;
#pragma omp parallel for reduction(+ : rows) reduction(max : largest) schedule(dynamic, 4)
    for (int r = 0; r < rs->n; r++) {
        const int b = rs->bh[r] / p->heads_q, h = rs->bh[r] % p->heads_q, i = rs->row[r];
        long long visible = p->causal ? i + shift + 1 : p->seqlen_k;
        if (visible > p->seqlen_k) visible = p->seqlen_k;
        const uint16_t *q = pr->q + b * p->q_batch_stride + (int64_t)i * p->q_row_stride + h * p->q_head_stride;
        double m = -INFINITY, jump = 0;
        for (long long n0 = 0; n0 < visible; n0 += tile) {
            double tile_max = -INFINITY;
            for (long long j = n0; j < visible && j < n0 + tile; j++) {
                const uint16_t *k = pr->k + b * p->k_batch_stride + j * p->k_row_stride + (h / group) * p->k_head_stride;
                double acc = 0;
                for (int c = 0; c < d; c++) acc += fa2_to_float(q[c], p->dtype) * fa2_to_float(k[c], p->dtype);
                if (acc * p->softmax_scale > tile_max) tile_max = acc * p->softmax_scale;
            }
            if (m > -INFINITY && (tile_max - m) * 1.4426950408889634 > jump) jump = (tile_max - m) * 1.4426950408889634;
            if (tile_max > m) m = tile_max;
        }
        rows += jump > 8;
        if (jump > largest) largest = jump;
    }
    *largest_log2 = largest;
    return rows;
}

/* ---- one case ------------------------------------------------------------------------ */

static void case_name(char *name, size_t len, const test_case *c, const fa2_params *p)
{
    int n = snprintf(name, len, "B%d H%d/%d Nq%d Nk%d d%d %s %s", c->batch, c->hq, c->hkv, c->nq, c->nk, c->d,
                     c->causal ? "causal" : "non-causal", fa2_dtype_name(c->t));
    if (c->lay) n += snprintf(name + n, len - n, " %s", layout_names[c->lay]);
    if (c->input_scale != 1.0f) n += snprintf(name + n, len - n, " scale %g", (double)c->input_scale);
    if (c->softmax_scale) n += snprintf(name + n, len - n, " softmax_scale %g", (double)p->softmax_scale);
    if (c->nan) n += snprintf(name + n, len - n, " %s %d", nan_site_names[c->nan], c->nan_row);
    if (c->no_lse) n += snprintf(name + n, len - n, " lse=NULL");
    if (c->on_stream) n += snprintf(name + n, len - n, " non-default stream");
    if (c->page_size) n += snprintf(name + n, len - n, " pages of %d%s", c->page_size, c->kv_pad ? " (table rows and pages padded)" : "");
    for (int b = 0; c->seqlens && b < c->batch && b < c->n_lens; b++)
        n += snprintf(name + n, len - n, "%s%d", b ? "," : " lengths ", c->lens[b]);
    if (c->seqlens && c->batch > c->n_lens) n += snprintf(name + n, len - n, ", ... (repeating)");
    if (c->deterministic) n += snprintf(name + n, len - n, " FA2_DETERMINISTIC=1");
    if (c->preset) snprintf(name + n, len - n, " as %s", c->preset);
}

/* Writes outside a tensor's elements: every element of the host copy of its allocation
 * that is not an element of the tensor (laid out by l from element `start`) must still
 * hold the poison. Overwrites the tensor's elements. */
static long tensor_writes_outside(uint16_t *alloc, size_t elems, const tensor_layout *l, size_t start)
{
    if (is_dense(l)) { /* one range: look at what is around it */
        const size_t end = start + (size_t)span_of(l);
        long n = 0;
        for (size_t i = 0; i < start; i++) n += alloc[i] != FA2_POISON16;
        for (size_t i = end; i < elems; i++) n += alloc[i] != FA2_POISON16;
        return n;
    }
    for (int b = 0; b < l->batch; b++)
        for (int i = 0; i < l->seqlen; i++)
            for (int h = 0; h < l->heads; h++)
                memset(alloc + start + b * l->bs + (int64_t)i * l->rs + h * l->hs, 0xff, (size_t)l->d * 2);
    long n = 0;
    for (size_t i = 0; i < elems; i++) n += alloc[i] != FA2_POISON16;
    return n;
}

/* The same for O, laid out by p's o strides. */
static long writes_outside(uint16_t *o_alloc, size_t elems, const fa2_params *p, size_t start)
{
    const tensor_layout l = {p->batch, p->seqlen_q, p->heads_q, p->head_dim, p->o_batch_stride, p->o_row_stride,
                             p->o_head_stride};
    return tensor_writes_outside(o_alloc, elems, &l, start);
}

/* Bytes of the guards around a step's workspace (its ws_bytes after WS_GUARD poisoned
 * bytes at ws_alloc, and WS_GUARD more after them) that are no longer poison. */
static long workspace_guards_written(const unsigned char *ws_alloc, size_t ws_bytes)
{
    unsigned char guards[2][WS_GUARD];
    fa2_device_sync();
    fa2_device_download(guards[0], ws_alloc, WS_GUARD);
    fa2_device_download(guards[1], ws_alloc + WS_GUARD + ws_bytes, WS_GUARD);
    long written = 0;
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < WS_GUARD; i++) written += guards[g][i] != 0xff;
    return written;
}

/* Bytes of the bytes at dev that are not zero (a workspace's counters after a call: fa2.h). */
static long nonzero_bytes(const unsigned char *dev, size_t bytes)
{
    unsigned char *host = fa2_xmalloc(bytes, "a copy of the workspace's counters");
    fa2_device_sync();
    fa2_device_download(host, dev, bytes);
    long n = 0;
    for (size_t i = 0; i < bytes; i++) n += host[i] != 0;
    free(host);
    return n;
}

static long lse_writes_outside(const float *lse_alloc, size_t n)
{
    long bad = 0;
    uint32_t bits;
    for (size_t i = 0; i < GUARD; i++) {
        memcpy(&bits, &lse_alloc[i], 4);
        bad += bits != FA2_POISON32;
        memcpy(&bits, &lse_alloc[GUARD + n + i], 4);
        bad += bits != FA2_POISON32;
    }
    return bad;
}

/* ---- the KV cache: int32 arrays in guards, snapshots of the inputs ---------------------- */

/* A device allocation of n int32 between GUARD int32 of all bits set (-1) on each side,
 * the n values at element GUARD. */
static int32_t *upload_ints(const int32_t *host, size_t n)
{
    int32_t *dev = fa2_device_alloc((n + 2 * GUARD) * 4);
    fa2_device_poison(dev, (n + 2 * GUARD) * 4);
    fa2_device_upload(dev + GUARD, host, n * 4);
    return dev;
}

/* Every byte of one input allocation as uploaded (guards and padding included): a step
 * may read its inputs, never write them. */
typedef struct {
    const void *dev;
    unsigned char *host;
    size_t bytes;
} snapshot;

static snapshot snapshot_take(const void *dev, size_t bytes)
{
    snapshot s = {dev, fa2_xmalloc(bytes, "a snapshot of an input"), bytes};
    fa2_device_sync();
    fa2_device_download(s.host, dev, bytes);
    return s;
}

/* Bytes of the snapshots' allocations that differ from what was uploaded. */
static long snapshots_changed(const snapshot *s, int n)
{
    long changed = 0;
    fa2_device_sync();
    for (int i = 0; i < n; i++) {
        unsigned char *now = fa2_xmalloc(s[i].bytes, "a copy of an input");
        fa2_device_download(now, s[i].dev, s[i].bytes);
        for (size_t j = 0; j < s[i].bytes; j++) changed += now[j] != s[i].host[j];
        free(now);
    }
    return changed;
}

/* NaN in every row of the dense K and V past its sequence's length (all heads): the
 * fp64 reference reads only a sequence's own keys, and a step that reads one more,
 * on dense K and V as through pages, gets NaN in O. */
static void nan_past_lengths(fa2_problem *pr)
{
    const fa2_params *p = &pr->p;
    const uint16_t nan16 = fa2_from_float(NAN, p->dtype);
    const size_t row = (size_t)p->heads_kv * p->head_dim; /* dense rows: all heads of one key */
    for (int b = 0; b < p->batch; b++)
        for (int j = pr->seqlens_k[b]; j < p->seqlen_k; j++) {
            const size_t at = (size_t)b * p->k_batch_stride + (size_t)j * p->k_row_stride;
            for (size_t e = 0; e < row; e++) pr->k[at + e] = pr->v[at + e] = nan16;
        }
}

/* A page of pr's pool that no sequence's keys reach (fa2_problem_page keeps batch + 1 of
 * them, every row NaN). */
static int32_t unowned_page(const fa2_problem *pr, const fa2_params *paged)
{
    char *owned = calloc((size_t)paged->num_pages, 1);
    for (int b = 0; b < paged->batch; b++) {
        const long long keys = pr->seqlens_k ? pr->seqlens_k[b] : paged->seqlen_k;
        for (long long e = 0; e * paged->page_size < keys; e++) owned[pr->block_table[(size_t)b * paged->max_pages + e]] = 1;
    }
    int32_t page = 0;
    while (owned[page]) page++;
    free(owned);
    return page;
}

/* After a refused call: elements of O's and LSE's allocations, and bytes of the
 * workspace's, that no longer hold what they held before it (fa2.h: a refused call touches
 * no memory): the poison, and zeros in the counter_bytes from ws_counters on. */
static long outputs_touched(const uint16_t *o_dev, size_t o_elems, const float *lse_dev, size_t lse_elems,
                            const unsigned char *ws_dev, size_t ws_bytes, const unsigned char *ws_counters,
                            size_t counter_bytes)
{
    long touched = 0;
    fa2_device_sync();
    uint16_t *o = fa2_xmalloc(o_elems * 2, "a copy of O");
    fa2_device_download(o, o_dev, o_elems * 2);
    for (size_t i = 0; i < o_elems; i++) touched += o[i] != FA2_POISON16;
    free(o);
    if (lse_dev) {
        uint32_t *lse = fa2_xmalloc(lse_elems * 4, "a copy of LSE");
        fa2_device_download(lse, lse_dev, lse_elems * 4);
        for (size_t i = 0; i < lse_elems; i++) touched += lse[i] != FA2_POISON32;
        free(lse);
    }
    if (ws_dev) {
        unsigned char *ws = fa2_xmalloc(ws_bytes, "a copy of the workspace");
        fa2_device_download(ws, ws_dev, ws_bytes);
        for (size_t i = 0; i < ws_bytes; i++) {
            const int counter = ws_dev + i >= ws_counters && ws_dev + i < ws_counters + counter_bytes;
            touched += ws[i] != (counter ? 0 : 0xff);
        }
        free(ws);
    }
    return touched;
}

static void run_case(step_lib *steps, int nsteps, const test_case *c)
{
    fa2_params p = {0};
    p.batch = c->batch, p.heads_q = c->hq, p.heads_kv = c->hkv, p.seqlen_q = c->nq, p.seqlen_k = c->nk;
    p.head_dim = c->d, p.causal = c->causal, p.dtype = c->t;
    p.softmax_scale = c->softmax_scale ? c->softmax_scale : 1.0f / sqrtf((float)c->d);
    int32_t *lens = NULL; /* host memory: fa2_problem_make copies it */
    if (c->seqlens) {
        lens = fa2_xmalloc(sizeof(int32_t) * (size_t)p.batch, "the sequence lengths");
        for (int b = 0; b < p.batch; b++) lens[b] = c->lens[b % c->n_lens];
    }
    p.seqlens_k = lens;
    const int kv_cache = c->seqlens || c->page_size;
    char name[512], why[512], config[256];
    case_name(name, sizeof name, c, &p);
    /* Every step reads FA2_EMULATE at each call (common/device_limits.h), so one process can
     * take each case under another GPU's limits. */
    if (c->preset) setenv("FA2_EMULATE", c->preset, 1);
    else unsetenv("FA2_EMULATE");
    fa2_limits limits;
    if (fa2_limits_get(&limits, why, sizeof why) != FA2_LIMITS_OK) {
        report(0, why, "%s: the limits", name);
        free(lens);
        return;
    }

    /* A case that cannot fit on this GPU says so: Q, K, V, O and LSE, and the unfused
     * baseline's workspace (6 bytes a score, up to its 16 GiB limit of S). */
    const double scores = (double)p.batch * p.heads_q * p.seqlen_q * p.seqlen_k;
    const double need = (fa2_numel_q(&p) * 2.0 + fa2_numel_kv(&p) * 2.0) * 2 + fa2_numel_lse(&p) * 4.0 +
                        (scores * 4 <= 17179869184.0 ? scores * 6 : 0);
    if (need > 0.8 * (double)fa2_device_free_bytes()) {
        printf("SKIP %s: needs %.1f GB of GPU memory, %.1f GB free\n", name, need / 1e9, fa2_device_free_bytes() / 1e9);
        free(lens);
        return;
    }

    fa2_problem pr;
    fa2_problem_make(&pr, &p, 1000 + (uint64_t)c->nq * 7 + c->nk, c->input_scale);
    free(lens);
    p.seqlens_k = NULL; /* pr has its own copy */
    put_nan(&pr, c->nan, c->nan_row, c->nan_col);
    if (c->seqlens) nan_past_lengths(&pr);
    if (c->page_size) fa2_problem_page(&pr, c->page_size, 1000 + (uint64_t)c->nq * 7 + c->nk, 0);
    fa2_row_set rs;
    const long long macs = (long long)p.batch * p.heads_q * p.seqlen_q * p.seqlen_k * p.head_dim;
    if (macs <= FULL_CHECK_MACS) fa2_rows_all(&rs, &pr.p);
    else fa2_rows_sample(&rs, &pr.p);
    fa2_reference ref;
    fa2_reference_alloc(&ref, &rs, c->d);
    fa2_reference_rows(&pr, &rs, &ref);
    if (c->nan) {
        const long nans = reference_nans(&ref, &rs, c->d);
        report(nans > 0, "the NaN reaches no reference entry: the case proves nothing", "%s reaches %ld reference entries",
               name, nans);
    }
    if (c->rescale_probe) {
        for (int tile = 64; tile <= 128; tile *= 2) {
            double largest = 0;
            const int rows = rows_with_big_jumps(&pr, &rs, tile, &largest);
            snprintf(why, sizeof why, "no checked row's max grows by more than 2^8 after its first tile");
            report(rows > 0, why, "%s reaches the O rescale: %d of %d checked rows see their max grow by more than "
                   "2^8 after their first %d-key tile (corrections down to 2^-%.0f)", name, rows, rs.n, tile, largest);
        }
    }

    /* Inputs, each in its layout inside NaN guards. */
    const tensor_layout lq = layout_of(c->lay, 0, p.batch, p.seqlen_q, p.heads_q, p.head_dim);
    const tensor_layout lkv = layout_of(c->lay, 0, p.batch, p.seqlen_k, p.heads_kv, p.head_dim);
    const tensor_layout lo = layout_of(c->lay, 1, p.batch, p.seqlen_q, p.heads_q, p.head_dim);
    const size_t base = GUARD + (c->lay == OFFSET_BASES ? 1 : 0);
    device_buffer inputs[3];
    int n_inputs = 3;
    fa2_params run = p;
    run.seqlens_k = NULL; /* the KV cache's arrays go to the GPU below */
    int32_t *table_dev = NULL, *lens_dev = NULL;
    size_t table_elems = 0;
    if (c->lay == PACKED_QKV && !pr.block_table) { /* one [batch, seqlen, 3, heads, d] tensor behind three views */
        tensor_layout packed = lq;
        packed.rs = 3 * lq.rs, packed.bs = packed.rs * p.seqlen_q;
        const uint16_t *dense[3] = {pr.q, pr.k, pr.v};
        const tensor_layout lays[3] = {packed, packed, packed};
        const size_t at[3] = {base, base + lq.rs, base + 2 * lq.rs};
        inputs[0] = upload_tensors(3, dense, lays, at);
        n_inputs = 1;
        run.q = inputs[0].dev + at[0], run.k = inputs[0].dev + at[1], run.v = inputs[0].dev + at[2];
        set_strides(&packed, &run.q_batch_stride, &run.q_row_stride, &run.q_head_stride);
        set_strides(&packed, &run.k_batch_stride, &run.k_row_stride, &run.k_head_stride);
        set_strides(&packed, &run.v_batch_stride, &run.v_row_stride, &run.v_head_stride);
    } else { /* Q, K and V apart, each in NaN guards; paged: K and V are page pools [num_pages, page_size, heads_kv, d] */
        fa2_params paged;
        tensor_layout lk = lkv;
        const uint16_t *dense[3] = {pr.q, pr.k, pr.v};
        if (pr.block_table) {
            fa2_problem_step_params(&pr, &paged); /* the page fields, and K's and V's strides in the pool */
            lk = (tensor_layout){paged.num_pages, paged.page_size, paged.heads_kv, paged.head_dim,
                                 paged.k_batch_stride + (c->kv_pad ? 64 : 0), paged.k_row_stride, paged.k_head_stride};
            dense[1] = pr.k_pages, dense[2] = pr.v_pages;
        }
        const tensor_layout lays[3] = {lq, lk, lk};
        for (int i = 0; i < 3; i++) inputs[i] = upload_tensors(1, &dense[i], &lays[i], &base);
        run.q = inputs[0].dev + base, run.k = inputs[1].dev + base, run.v = inputs[2].dev + base;
        set_strides(&lq, &run.q_batch_stride, &run.q_row_stride, &run.q_head_stride);
        set_strides(&lk, &run.k_batch_stride, &run.k_row_stride, &run.k_head_stride);
        set_strides(&lk, &run.v_batch_stride, &run.v_row_stride, &run.v_head_stride);
        if (pr.block_table) {
            run.page_size = paged.page_size, run.max_pages = paged.max_pages, run.num_pages = paged.num_pages;
            /* The table's rows, padded by kv_pad with an unowned page (its rows NaN). */
            run.block_table_batch_stride = paged.max_pages + (c->kv_pad ? 3 : 0);
            table_elems = (size_t)p.batch * run.block_table_batch_stride;
            int32_t *table = fa2_xmalloc(table_elems * 4, "the block table");
            const int32_t spare = unowned_page(&pr, &paged);
            for (int b = 0; b < p.batch; b++)
                for (int64_t e = 0; e < run.block_table_batch_stride; e++)
                    table[b * run.block_table_batch_stride + e] = e < paged.max_pages ? pr.block_table[(size_t)b * paged.max_pages + e] : spare;
            table_dev = upload_ints(table, table_elems);
            free(table);
            run.block_table = table_dev + GUARD;
        }
    }
    if (c->seqlens) {
        lens_dev = upload_ints(pr.seqlens_k, (size_t)p.batch);
        run.seqlens_k = lens_dev + GUARD;
    }
    /* KV-cache cases: every byte of the inputs' allocations, the pools', the table's and
     * the lengths' (guards and padding included), as uploaded. */
    snapshot snaps[5];
    int n_snaps = 0;
    for (int i = 0; kv_cache && i < n_inputs; i++) snaps[n_snaps++] = snapshot_take(inputs[i].dev, inputs[i].elems * 2);
    if (table_dev) snaps[n_snaps++] = snapshot_take(table_dev, (table_elems + 2 * GUARD) * 4);
    if (lens_dev) snaps[n_snaps++] = snapshot_take(lens_dev, ((size_t)p.batch + 2 * GUARD) * 4);
    /* O and LSE, poisoned before each step. */
    const size_t o_elems = base + (size_t)span_of(&lo) + GUARD, n_lse = fa2_numel_lse(&p);
    uint16_t *o_dev = fa2_device_alloc(o_elems * 2);
    float *lse_dev = c->no_lse ? NULL : fa2_device_alloc((n_lse + 2 * GUARD) * 4);
    run.o = o_dev + base;
    run.lse = c->no_lse ? NULL : lse_dev + GUARD;
    set_strides(&lo, &run.o_batch_stride, &run.o_row_stride, &run.o_head_stride);
    uint16_t *o_host = fa2_xmalloc(o_elems * 2, "the host copy of O");
    float *lse_host = c->no_lse ? NULL : fa2_xmalloc((n_lse + 2 * GUARD) * 4, "the host copy of LSE");
    void *stream = c->on_stream ? fa2_stream_create() : NULL;
    fa2_params host_view = p; /* O's layout, from element (0, 0, 0, 0) of the host copy */
    set_strides(&lo, &host_view.o_batch_stride, &host_view.o_row_stride, &host_view.o_head_stride);
    /* One workspace for the case, as large as the neediest step asks (fa2_workspace_size
     * reads the params, which are the same for every step), between WS_GUARD bytes of poison. */
    size_t ws_max = 0;
    for (int s = 0; s < nsteps; s++) {
        const size_t need = steps[s].abi.workspace_size(&run);
        ws_max = need > ws_max ? need : ws_max;
    }
    unsigned char *ws_dev = ws_max ? fa2_device_alloc(ws_max + 2 * WS_GUARD) : NULL;

    for (int s = 0; s < nsteps; s++) {
        step_lib *st = &steps[s];
        const size_t ws_bytes = st->abi.workspace_size(&run);
        const size_t counter_bytes = ws_bytes ? fa2_workspace_counter_bytes(&run) : 0;
        run.workspace = ws_bytes ? ws_dev + WS_GUARD : NULL;
        run.workspace_bytes = ws_bytes;
        fa2_device_poison(o_dev, o_elems * 2);
        if (lse_dev) fa2_device_poison(lse_dev, (n_lse + 2 * GUARD) * 4);
        if (ws_dev) fa2_device_poison(ws_dev, ws_max + 2 * WS_GUARD);
        if (counter_bytes) fa2_device_zero(ws_dev + WS_GUARD, counter_bytes); /* fa2.h: zero before the first call */
        fa2_device_sync(); /* a non-blocking stream does not wait for the poison by itself */
        if (!st->abi.supports(&run, why, sizeof why)) {
            const int one_line = why[0] && !strchr(why, '\n');
            /* a step built for one GPU family refuses the others' presets */
            const int other_family = c->preset && strstr(why, "compute capability");
            if (kv_cache) {
                /* A step that does not take a KV cache refuses it in one line naming the field
                 * (fa2_refuse_kv_cache), and its fa2_forward returns FA2_ERR_UNSUPPORTED and
                 * touches nothing: O, LSE, the workspace, the inputs, the table, the lengths. */
                const int names_field = strstr(why, "seqlens_k") || strstr(why, "block_table");
                const int rc = st->abi.forward(&run, stream);
                const long touched = outputs_touched(o_dev, o_elems, lse_dev, n_lse + 2 * GUARD, ws_dev, ws_max + 2 * WS_GUARD,
                                                     ws_dev + WS_GUARD, counter_bytes) +
                                     snapshots_changed(snaps, n_snaps);
                st->kv_refused += names_field;
                char detail[160];
                snprintf(detail, sizeof detail, "%s; fa2_forward returned %d (want %d), %ld elements or bytes touched",
                         names_field ? "names the field" : "names neither seqlens_k nor block_table", rc, FA2_ERR_UNSUPPORTED, touched);
                report((names_field || other_family || c->may_refuse) && one_line && rc == FA2_ERR_UNSUPPORTED && touched == 0,
                       detail, "%s %s: refused: %s", st->abi.name(), name, why);
                continue;
            }
            report((c->may_refuse || other_family) && one_line, why, "%s %s: refused: %s", st->abi.name(), name, why);
            continue;
        }
        st->kv_taken += kv_cache;
        const int config_index = st->abi.config(&run, config, sizeof config);
        /* What the launch asks for must fit the GPU (or the emulated one): on the H100 a
         * preset's oversized request would still run, so this is where it is caught. */
        const int smem = config_index >= 0 ? st->abi.config_smem(&run, config_index) : -1;
        if (config_index < 0 || smem < 0 || smem > limits.smem_per_block) {
            snprintf(why, sizeof why, "configuration %d asks for %d bytes of shared memory per block, %s allows %d",
                     config_index, smem, limits.name, limits.smem_per_block);
            report(0, why, "%s %s {%s}", st->abi.name(), name, config);
            continue;
        }
        /* A step with a workspace runs the case twice on it: the first call must leave its
         * counters zero (fa2.h), and the second, on the first's counters and partials, must
         * pass as well. O and LSE are poisoned again before the second. */
        const int calls = ws_bytes ? 2 : 1;
        for (int call = 0; call < calls; call++) {
            const char *which = call ? " (second call, same workspace)" : "";
            if (call) {
                fa2_device_poison(o_dev, o_elems * 2);
                if (lse_dev) fa2_device_poison(lse_dev, (n_lse + 2 * GUARD) * 4);
                fa2_device_sync();
            }
            int rc = st->abi.forward(&run, stream);
            if (rc) {
                snprintf(why, sizeof why, "fa2_forward returned %d: %s", rc, st->abi.last_error());
                report(0, why, "%s %s {%s}%s", st->abi.name(), name, config, which);
                break;
            }
            if (stream) {
                fa2_stream_download(o_host, o_dev, o_elems * 2, stream);
                if (lse_dev) fa2_stream_download(lse_host, lse_dev, (n_lse + 2 * GUARD) * 4, stream);
            } else {
                fa2_device_sync();
                fa2_device_download(o_host, o_dev, o_elems * 2);
                if (lse_dev) fa2_device_download(lse_host, lse_dev, (n_lse + 2 * GUARD) * 4);
            }
            const float *lse_view = lse_host ? lse_host + GUARD : NULL;
            fa2_check_result r = fa2_check(&host_view, &rs, o_host + base, lse_view, &ref);
            const long unwritten = fa2_count_unwritten(&host_view, o_host + base, lse_view);
            const long outside = writes_outside(o_host, o_elems, &host_view, base) +
                                 (lse_host ? lse_writes_outside(lse_host, n_lse) : 0) +
                                 (ws_bytes ? workspace_guards_written(ws_dev, ws_bytes) : 0);
            const long inputs_written = snapshots_changed(snaps, n_snaps); /* 0 snapshots but in KV-cache cases */
            const long counters_left = counter_bytes ? nonzero_bytes(ws_dev + WS_GUARD, counter_bytes) : 0;
            snprintf(why, sizeof why,
                     "rel_l2 %.2e max_abs %.2e (x%.2f of tol) lse %.2e (x%.2f) nonfinite %ld NaN/-inf missed %ld "
                     "unwritten %ld written outside O/LSE/workspace %ld, into inputs/pages/table/lengths %ld, "
                     "workspace counters left non-zero %ld bytes",
                     r.rel_l2, r.max_abs, r.o_worst, r.lse_max, r.lse_worst, r.nonfinite, r.special_missed, unwritten,
                     outside, inputs_written, counters_left);
            const int ok = r.pass && unwritten == 0 && outside == 0 && inputs_written == 0 && counters_left == 0;
            if (r.o_worst > st->o_worst) st->o_worst = r.o_worst, snprintf(st->o_worst_case, sizeof st->o_worst_case, "%s", name);
            if (r.lse_worst > st->lse_worst) st->lse_worst = r.lse_worst, snprintf(st->lse_worst_case, sizeof st->lse_worst_case, "%s", name);
            if (ok && config_index >= 0) st->reached |= 1u << config_index;
            report(ok, why, "%s %s {%s}%s", st->abi.name(), name, config, which);
        }
    }
    if (stream) fa2_stream_destroy(stream);
    free(o_host);
    free(lse_host);
    fa2_device_free(o_dev);
    if (ws_dev) fa2_device_free(ws_dev);
    if (lse_dev) fa2_device_free(lse_dev);
    for (int i = 0; i < n_inputs; i++) fa2_device_free(inputs[i].dev);
    if (table_dev) fa2_device_free(table_dev);
    if (lens_dev) fa2_device_free(lens_dev);
    for (int i = 0; i < n_snaps; i++) free(snaps[i].host);
    fa2_reference_free(&ref);
    fa2_rows_free(&rs);
    fa2_problem_free(&pr);
}

/* ---- the backward ------------------------------------------------------------------------ */

/* A tensor written by a step, in a device allocation of NaN guards: GUARD elements (or
 * one more, OFFSET_BASES) before it, GUARD after, and its padding; a host copy of the
 * whole allocation for the checks. */
typedef struct {
    uint16_t *dev, *host;
    size_t elems, start;
    tensor_layout l;
} guarded_output;

static guarded_output guarded_alloc(const tensor_layout *l, size_t start)
{
    guarded_output g = {NULL, NULL, start + (size_t)span_of(l) + GUARD, start, *l};
    g.dev = fa2_device_alloc(g.elems * 2);
    g.host = fa2_xmalloc(g.elems * 2, "the host copy of an output");
    return g;
}

static void guarded_free(guarded_output *g)
{
    fa2_device_free(g->dev);
    free(g->host);
}

/* The tensor's elements from the host copy, dense [batch, seqlen, heads, d]. */
static uint16_t *dense_copy(const guarded_output *g)
{
    const tensor_layout *l = &g->l;
    uint16_t *x = fa2_xmalloc((size_t)l->batch * l->seqlen * l->heads * l->d * 2, "a dense copy of an output");
    for (int b = 0; b < l->batch; b++)
        for (int i = 0; i < l->seqlen; i++)
            for (int h = 0; h < l->heads; h++)
                memcpy(x + (((size_t)b * l->seqlen + i) * l->heads + h) * l->d, g->host + g->start + b * l->bs + (int64_t)i * l->rs + h * l->hs,
                       (size_t)l->d * 2);
    return x;
}

/* The bound on the relative L2 error of each of dQ, dK and dV in one case.
 *  - FA2_BWD_TOL_U u (u = 2^-11 fp16, 2^-8 bf16): what the harness holds every backward
 *    to against the fp64 backward given the step's own O (check.c says why: P and dS
 *    rounded to the dtype before their products, dQ, dK, dV on output).
 *  - 2 e + 1e-3, what the forward's own errors add: the backward recomputes P = exp(S -
 *    LSE) from the LSE the step's forward wrote, which the forward's check allows off by
 *    1e-3 + e, and from scores that are themselves off by up to e (e = 2^-15 score_mag,
 *    check.c: fp32 sums of head_dim products on the tensor cores). Each P_ij is then off
 *    by a factor within exp(+-(2 e + 1e-3)), a relative error that P^T dO, dS = P (dP - D)
 *    and their products carry whole into dV, dK and dQ.
 * score_mag, the sum of |scale q_c k_c| of a row, is taken as scale x (the RMS norm of Q's
 * rows) x (that of K's rows): about 11 at d128 with N(0,1) inputs (e = 3.5e-4, under one u
 * of fp16), 16 times that with Q and K scaled by 4 (e = 5.5e-3), 900 times at 30 (e ~ 0.3:
 * there the bound is as loose as the forward's LSE bound it follows; that case checks
 * that nothing overflows, not the last bits). A wrong D, a missed key block of dQ or a
 * causal limit off by one moves a tensor by 10% to 100%. */
static double bwd_tolerance(const fa2_problem *pr)
{
    const fa2_params *p = &pr->p;
    double q2 = 0, k2 = 0;
    const size_t nq = fa2_numel_q(p), nkv = fa2_numel_kv(p);
    for (size_t i = 0; i < nq; i++) {
        const double x = fa2_to_float(pr->q[i], p->dtype);
        q2 += isfinite(x) ? x * x : 0;
    }
    for (size_t i = 0; i < nkv; i++) {
        const double x = fa2_to_float(pr->k[i], p->dtype);
        k2 += isfinite(x) ? x * x : 0;
    }
    const double q_row = sqrt(q2 / (nq / p->head_dim)), k_row = sqrt(k2 / (nkv / p->head_dim));
    const double e = fa2_tolerance_for(p->dtype).score_rel * p->softmax_scale * q_row * k_row;
    return FA2_BWD_TOL_U * fa2_unit_roundoff(p->dtype) + 2 * e + 1e-3;
}

/* One backward case on every step that has a backward: the step's own forward (O and LSE),
 * then its backward, checked against the fp64 backward given that O. */
static void run_bwd_case(step_lib *steps, int nsteps, const test_case *c)
{
    fa2_params p = {0};
    p.batch = c->batch, p.heads_q = c->hq, p.heads_kv = c->hkv, p.seqlen_q = c->nq, p.seqlen_k = c->nk;
    p.head_dim = c->d, p.causal = c->causal, p.dtype = c->t;
    p.softmax_scale = c->softmax_scale ? c->softmax_scale : 1.0f / sqrtf((float)c->d);
    char name[512], why[512];
    case_name(name, sizeof name, c, &p);
    if (c->preset) setenv("FA2_EMULATE", c->preset, 1);
    else unsetenv("FA2_EMULATE");
    /* read by each step at each call, fa2_backward_workspace_size included */
    if (c->deterministic) setenv("FA2_DETERMINISTIC", "1", 1);
    else unsetenv("FA2_DETERMINISTIC");
    fa2_limits limits;
    if (fa2_limits_get(&limits, why, sizeof why) != FA2_LIMITS_OK) {
        printf("SKIP backward %s: %s\n", name, why);
        unsetenv("FA2_DETERMINISTIC");
        return;
    }

    fa2_problem pr;
    fa2_problem_make(&pr, &p, 2000 + (uint64_t)c->nq * 7 + c->nk, c->input_scale);
    put_nan(&pr, c->nan, c->nan_row, c->nan_col);
    uint16_t *dout_host = fa2_dout_make(&p, 3000 + (uint64_t)c->nq);
    const double tol = bwd_tolerance(&pr);

    /* Inputs (Q, K, V and dO) in the case's layout inside NaN guards; O, dQ, dK and dV
     * in its output layout inside poisoned guards. */
    const tensor_layout lq = layout_of(c->lay, 0, p.batch, p.seqlen_q, p.heads_q, p.head_dim);
    const tensor_layout lkv = layout_of(c->lay, 0, p.batch, p.seqlen_k, p.heads_kv, p.head_dim);
    const tensor_layout lo = layout_of(c->lay, 1, p.batch, p.seqlen_q, p.heads_q, p.head_dim);
    const tensor_layout lgkv = layout_of(c->lay, 1, p.batch, p.seqlen_k, p.heads_kv, p.head_dim);
    const size_t base = GUARD;
    const uint16_t *dense[4] = {pr.q, pr.k, pr.v, dout_host};
    const tensor_layout in_lays[4] = {lq, lkv, lkv, lq};
    device_buffer inputs[4];
    for (int i = 0; i < 4; i++) inputs[i] = upload_tensors(1, &dense[i], &in_lays[i], &base);
    guarded_output o = guarded_alloc(&lo, base), dq = guarded_alloc(&lo, base), dk = guarded_alloc(&lgkv, base),
                   dv = guarded_alloc(&lgkv, base);
    const size_t n_lse = fa2_numel_lse(&p);
    float *lse_dev = fa2_device_alloc(n_lse * 4);

    fa2_bwd_params bp;
    memset(&bp, 0, sizeof bp);
    fa2_params *run = &bp.fwd;
    *run = p;
    run->q = inputs[0].dev + base, run->k = inputs[1].dev + base, run->v = inputs[2].dev + base, run->o = o.dev + base;
    run->lse = lse_dev;
    set_strides(&lq, &run->q_batch_stride, &run->q_row_stride, &run->q_head_stride);
    set_strides(&lkv, &run->k_batch_stride, &run->k_row_stride, &run->k_head_stride);
    set_strides(&lkv, &run->v_batch_stride, &run->v_row_stride, &run->v_head_stride);
    set_strides(&lo, &run->o_batch_stride, &run->o_row_stride, &run->o_head_stride);
    bp.dout = inputs[3].dev + base, bp.dq = dq.dev + base, bp.dk = dk.dev + base, bp.dv = dv.dev + base;
    set_strides(&lq, &bp.dout_batch_stride, &bp.dout_row_stride, &bp.dout_head_stride);
    set_strides(&lo, &bp.dq_batch_stride, &bp.dq_row_stride, &bp.dq_head_stride);
    set_strides(&lgkv, &bp.dk_batch_stride, &bp.dk_row_stride, &bp.dk_head_stride);
    set_strides(&lgkv, &bp.dv_batch_stride, &bp.dv_row_stride, &bp.dv_head_stride);
    /* One workspace, as large as the neediest step's forward or backward asks, between guards. */
    size_t ws_max = 0;
    for (int s = 0; s < nsteps; s++) {
        const size_t f = steps[s].abi.workspace_size(run), b = steps[s].abi.backward_workspace_size(&bp);
        ws_max = f > ws_max ? f : ws_max;
        ws_max = b > ws_max ? b : ws_max;
    }
    unsigned char *ws_dev = ws_max ? fa2_device_alloc(ws_max + 2 * WS_GUARD) : NULL;

    for (int s = 0; s < nsteps; s++) {
        step_lib *st = &steps[s];
        const size_t fwd_ws = st->abi.workspace_size(run), bwd_ws = st->abi.backward_workspace_size(&bp);
        run->workspace = bwd_ws ? ws_dev + WS_GUARD : NULL, run->workspace_bytes = bwd_ws;
        why[0] = 0;
        if (!st->abi.backward_supports(&bp, why, sizeof why)) {
            if (strstr(why, "forward alone")) continue; /* a step without a backward: nothing to check */
            /* a step built for one GPU family refuses the others' presets */
            const int other_family = c->preset && strstr(why, "compute capability");
            report((c->may_refuse || other_family) && why[0] && !strchr(why, '\n'), why, "%s backward %s: refused: %s",
                   st->abi.name(), name, why);
            continue;
        }
        /* The step's own forward writes O and LSE, with its own workspace. */
        run->workspace = fwd_ws ? ws_dev + WS_GUARD : NULL, run->workspace_bytes = fwd_ws;
        fa2_device_poison(o.dev, o.elems * 2);
        fa2_device_poison(lse_dev, n_lse * 4);
        int rc = st->abi.forward(run, NULL);
        run->workspace = bwd_ws ? ws_dev + WS_GUARD : NULL, run->workspace_bytes = bwd_ws;
        uint16_t *dq_first = NULL;
        for (int pass = 0; rc == FA2_OK && pass < (c->deterministic ? 2 : 1); pass++) {
            fa2_device_poison(dq.dev, dq.elems * 2);
            fa2_device_poison(dk.dev, dk.elems * 2);
            fa2_device_poison(dv.dev, dv.elems * 2);
            if (ws_dev) fa2_device_poison(ws_dev, ws_max + 2 * WS_GUARD);
            rc = st->abi.backward(&bp, NULL);
            fa2_device_sync();
            fa2_device_download(dq.host, dq.dev, dq.elems * 2);
            if (pass == 0 && c->deterministic) {
                dq_first = fa2_xmalloc(dq.elems * 2, "the first pass's dQ");
                memcpy(dq_first, dq.host, dq.elems * 2);
            }
        }
        if (rc != FA2_OK) {
            snprintf(why, sizeof why, "fa2_forward or fa2_backward returned %d: %s", rc, st->abi.last_error());
            report(0, why, "%s backward %s", st->abi.name(), name);
            free(dq_first);
            continue;
        }
        /* Deterministic: the second pass's dQ (in dq.host) has the first one's bits. */
        const int same_bits = !dq_first || memcmp(dq_first, dq.host, dq.elems * 2) == 0;
        free(dq_first);
        fa2_device_download(o.host, o.dev, o.elems * 2);
        fa2_device_download(dk.host, dk.dev, dk.elems * 2);
        fa2_device_download(dv.host, dv.dev, dv.elems * 2);
        uint16_t *o_d = dense_copy(&o), *dq_d = dense_copy(&dq), *dk_d = dense_copy(&dk), *dv_d = dense_copy(&dv);
        const long outside = tensor_writes_outside(dq.host, dq.elems, &dq.l, dq.start) +
                             tensor_writes_outside(dk.host, dk.elems, &dk.l, dk.start) +
                             tensor_writes_outside(dv.host, dv.elems, &dv.l, dv.start) +
                             (bwd_ws ? workspace_guards_written(ws_dev, bwd_ws) : 0);
        const fa2_bwd_check_result r = fa2_check_backward(&pr, o_d, dout_host, dq_d, dk_d, dv_d);
        const int ok = r.rel_l2[0] <= tol && r.rel_l2[1] <= tol && r.rel_l2[2] <= tol && r.nonfinite == 0 &&
                       r.special_missed == 0 && r.unwritten == 0 && outside == 0 && same_bits;
        snprintf(why, sizeof why,
                 "rel_l2 dq %.2e dk %.2e dv %.2e (tol %.2e) nonfinite %ld NaN missed %ld unwritten %ld "
                 "written outside dQ/dK/dV/workspace %ld%s",
                 r.rel_l2[0], r.rel_l2[1], r.rel_l2[2], tol, r.nonfinite, r.special_missed, r.unwritten, outside,
                 same_bits ? "" : "; FA2_DETERMINISTIC=1 gave dQ other bits the second time");
        report(ok, why, "%s backward %s (rel_l2 dq %.1e dk %.1e dv %.1e, tol %.1e)", st->abi.name(), name, r.rel_l2[0],
               r.rel_l2[1], r.rel_l2[2], tol);
        free(o_d), free(dq_d), free(dk_d), free(dv_d);
    }
    unsetenv("FA2_DETERMINISTIC");
    if (ws_dev) fa2_device_free(ws_dev);
    fa2_device_free(lse_dev);
    guarded_free(&o), guarded_free(&dq), guarded_free(&dk), guarded_free(&dv);
    for (int i = 0; i < 4; i++) fa2_device_free(inputs[i].dev);
    free(dout_host);
    fa2_problem_free(&pr);
}

/* ---- the cases --------------------------------------------------------------------------- */

static test_case shape(int batch, int hq, int hkv, int nq, int nk, int d, int causal, fa2_dtype t)
{
    test_case c;
    memset(&c, 0, sizeof c);
    c.batch = batch, c.hq = hq, c.hkv = hkv, c.nq = nq, c.nk = nk, c.d = d, c.causal = causal, c.t = t;
    c.input_scale = 1.0f;
    return c;
}

/* A shape for the tile configurations a step chooses by grid size, on a GPU of sm_count
 * SMs: `large` 0 gives a grid of at most one 128-row block per SM (batch 1, 256 rows: 2
 * blocks per head), 1 one of more than two per SM (batch 2, 300 rows: 3 per head).
 * Peaky inputs (the O rescale runs), GQA 3. */
static int config_heads(int sm_count) { return 6 * (sm_count / 12 > 1 ? sm_count / 12 : 1); }
static long long config_blocks(int sm_count, int large) { return (large ? 2LL * 3 : 2LL) * config_heads(sm_count); }
static test_case config_case(int sm_count, int large, int d, int causal, fa2_dtype t)
{
    const int heads = config_heads(sm_count);
    test_case c = shape(large ? 2 : 1, heads, heads / 3, large ? 300 : 256, 1000, d, causal, t);
    c.input_scale = 4.0f, c.rescale_probe = 1;
    return c;
}

/* ---- the KV cache -------------------------------------------------------------------------- */

/* A case with a KV cache: K and V in shuffled pages of page_size keys (0: dense), and
 * lengths per sequence from the n_lens of lens, repeated past them (NULL: every sequence
 * has nk keys). LENS(a) passes an array and its count. */
#define LENS(a) (a), (int)(sizeof(a) / sizeof *(a))
static test_case kv_case(int batch, int hq, int hkv, int nq, int nk, int d, int causal, fa2_dtype t, int page_size,
                         const int32_t *lens, int n_lens)
{
    test_case c = shape(batch, hq, hkv, nq, nk, d, causal, t);
    c.page_size = page_size;
    if (lens) {
        c.seqlens = 1, c.n_lens = n_lens < KV_MAX_BATCH ? n_lens : KV_MAX_BATCH;
        memcpy(c.lens, lens, sizeof(int32_t) * (size_t)c.n_lens);
    }
    return c;
}

/* Decode against a KV cache (fa2.h), the shapes of serving: every row checked. The
 * longest length is nk, the capacity, so the split-KV step cuts it over blocks while
 * the short sequences' blocks have few tiles or none. Pages of 16 and 64 keys are
 * smaller than step 13's 64- and 128-key tiles: its tiles cross pages. */
static void kv_cache_cases(step_lib *steps, int nsteps)
{
    static const int page_sizes[] = {16, 64, 256};
    /* Shuffled pages, seven lengths in one batch: 0 (O = 0, LSE = -inf), 1 (causal Nq > 1:
     * rows that see no key beside one that sees one), a page boundary -1, +0, +1, one
     * around a 128-key boundary (-1, +0, +1, +2 as Nq is 1 to 4) and the longest. GQA 4
     * (odd Nq) and MQA 8 or 32 (even), causal on alternate Nq (the other half for bf16),
     * both head dims for every page size and dtype, half the cases with padded strides. */
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 2; t++)
            for (int nq = 1; nq <= 4; nq++) {
                const int ps = page_sizes[s], nk = nq % 2 ? 3001 : 4099;
                const int32_t lens[7] = {0, 1, ps - 1, ps, ps + 1, 128 * (8 + nq) + nq - 2, nk};
                const int hq = nq % 2 ? 8 : nq == 2 ? 8 : 32, hkv = nq % 2 ? 2 : 1;
                test_case c = kv_case(7, hq, hkv, nq, nk, (nq + s) % 2 ? 64 : 128, (nq + t) % 2 == 0, (fa2_dtype)t, ps, LENS(lens));
                c.kv_pad = (s + t + nq) % 2;
                run_case(steps, nsteps, &c);
            }
    /* Pages without lengths of their own: every sequence has nk keys, its last page a
     * tail of one key (2049 = 2048 + 1) whose other rows hold NaN. */
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 2; t++) {
            test_case c = kv_case(3, 8, 2, 1 + s, 2049, (s + t) % 2 ? 64 : 128, s != 1, (fa2_dtype)t, page_sizes[s], NULL, 0);
            c.kv_pad = t;
            run_case(steps, nsteps, &c);
        }
    /* Pages of 16 and 32 keys with many key tiles per block: 16 sequences x 8 kv heads are
     * about a wave of blocks, so a block takes few splits and each one's copies go round
     * step 13's ring of page addresses (one slot per K/V stage) many times; lengths that
     * end mid-page and mid-tile, one of a single page and a bit. */
    for (int s = 0; s < 2; s++)
        for (int d = 64; d <= 128; d += 64) {
            const int32_t lens[8] = {4097, 4000, 2049, 3001, 17, 4096, 129, 1000};
            test_case c = kv_case(16, 16, 8, 1 + s, 4097, d, s, (fa2_dtype)(d == 128), 16 << s, LENS(lens));
            c.kv_pad = s;
            run_case(steps, nsteps, &c);
        }
    /* Lengths on dense K and V (their rows past a length hold NaN): around both tile sizes'
     * first boundaries, 0, 1 and the longest; decode and causal Nq 4. */
    for (int t = 0; t < 2; t++)
        for (int d = 64; d <= 128; d += 64) {
            const int32_t lens[8] = {0, 1, 63, 64, 65, 128, 129, 2500};
            test_case c = kv_case(8, d == 64 ? 8 : 32, d == 64 ? 2 : 1, d == 64 ? 1 : 4, 2500, d, d == 128, (fa2_dtype)t, 0, LENS(lens));
            run_case(steps, nsteps, &c);
        }
    /* Very uneven lengths, from which step 13 sizes its splits on the GPU: 32 sequences spread
     * geometrically from 1 to 4096 keys in no order (two of them 0, the longest in the middle,
     * 128 and 129 around a tile boundary), and three of 1, 5000 and 17. The long sequence's
     * tiles take many splits (14 to 27 of the 5000), the shortest ones one, and those between
     * counts between, below the grid's (a merge must wait for its tile's own count) and with a
     * last range shorter than the others. Nq 1 to 4, causal on alternate Nq (the other half
     * for bf16), GQA 4 and MQA, dense and in pages of 16 (tiles cross pages) and 64. Then a
     * uniform batch given as lengths: the host's split count and ranges, found on the GPU. */
    static const int32_t spread[32] = {0,    3,    1,   7,    2,   17,   5,    41,  12, 99, 29,  240, 70,  4096, 169, 580,
                                       410, 1400, 990, 3380, 2400, 0,   1,    2,   4,  9,  22,  53,  128, 129,  700, 1700};
    static const int32_t one_long[3] = {1, 5000, 17};
    for (int t = 0; t < 2; t++)
        for (int nq = 1; nq <= 4; nq++) {
            const int causal = (nq + t) % 2 == 0, d = (nq + t) % 2 ? 128 : 64;
            test_case c = kv_case(32, nq % 2 ? 8 : 32, nq % 2 ? 2 : 1, nq, 4096, d, causal, (fa2_dtype)t, nq == 2 ? 16 : nq == 4 ? 64 : 0,
                                  LENS(spread));
            run_case(steps, nsteps, &c);
            c = kv_case(3, nq % 2 ? 32 : 8, nq % 2 ? 8 : 1, nq, 5000, 192 - d, !causal, (fa2_dtype)t, nq == 3 ? 16 : 0, LENS(one_long));
            run_case(steps, nsteps, &c);
        }
    {
        static const int32_t uniform[4] = {5000, 5000, 5000, 5000};
        test_case c = kv_case(4, 32, 8, 1, 5000, 128, 0, FA2_BF16, 0, LENS(uniform));
        run_case(steps, nsteps, &c);
    }
    /* Step 13's work queue (lengths and splits: one wave of blocks takes the key ranges as
     * items) past one group of 32 (sequence, query tile) pairs and with many more items than
     * blocks: 2048 sequences of up to 1500 keys, one kv head (2048 pairs, the most a launch with
     * splits may have: 64 groups; 2048 items or more for at most a wave of blocks), in pages
     * of 64; and 100 sequences whose longest (9000, 7000, 8191 keys) split many ways, two query
     * tiles each (GQA 8, Nq 3, causal: the tiles see different keys), 200 pairs in 7 groups,
     * in pages of 16. */
    {
        static const int32_t many[32] = {1500, 0,   1,   700, 129, 33,   1024, 5,   260, 1300, 64,   17,  900, 2,   450, 128,
                                         1100, 77,  9,   600, 1499, 3,   350,  16,  800, 40,  1200, 250, 127, 0,   550, 1025};
        test_case c = kv_case(2048, 8, 1, 1, 1500, 64, 0, FA2_FP16, 64, LENS(many));
        run_case(steps, nsteps, &c);
        static const int32_t few_long[32] = {9000, 1,  17, 300, 0,    129, 2000, 45, 640,  5,  128, 7000, 3,   999, 256,  60,
                                             1,    4500, 77, 2,  1023, 33,  8,    3100, 0, 190, 12,  510,  64,  1500, 27, 8191};
        c = kv_case(100, 16, 2, 3, 9000, 128, 1, FA2_BF16, 16, LENS(few_long));
        run_case(steps, nsteps, &c);
    }
    /* NaN in a sequence's own K row (its last key: the last page) and V element (mid-
     * sequence), through pages: the NaN reaches the rows that see it, and only through
     * the page the table names. */
    for (int t = 0; t < 2; t++) {
        const int32_t lens[3] = {3000, 5, 0};
        test_case c = kv_case(3, 8, 2, 2, 3000, 64 << t, 1, (fa2_dtype)t, 64, LENS(lens));
        c.nan = NAN_K_ROW, c.nan_row = 2999;
        run_case(steps, nsteps, &c);
        c = kv_case(3, 8, 1, 1, 3000, 128 >> t, 0, (fa2_dtype)t, 16, LENS(lens));
        c.nan = NAN_V_ELEMENT, c.nan_row = 1500, c.nan_col = 9;
        run_case(steps, nsteps, &c);
    }
    /* Batch past the grid's z limit (65,535): the steps run a second launch for sequences
     * 65,535 on (fa2_for_each_grid_chunk), which must read their own lengths, table rows and
     * pages (sequence 65,535 + b has length lens[(b + 7) % 8], not lens[b]). */
    {
        const int32_t lens[8] = {0, 17, 1, 16, 15, 3, 32, 33};
        test_case c = kv_case(70000, 2, 1, 1, 33, 64, 0, FA2_BF16, 16, LENS(lens));
        run_case(steps, nsteps, &c);
    }
    /* A GPU whose blocks get 99 KB of shared memory (step 13's small layout: 64-key tiles
     * at d128, 128 at d64 in 3 stages): pages of 256 at d64, of 16 at both head dims. */
    static const char *const small_presets[] = {"rtx4090", "gb10"};
    for (int t = 0; t < 2; t++) {
        setenv("FA2_EMULATE", small_presets[t], 1);
        fa2_limits pl;
        char why[256];
        const int usable = fa2_limits_get(&pl, why, sizeof why) == FA2_LIMITS_OK;
        unsetenv("FA2_EMULATE");
        if (!usable) {
            printf("SKIP the KV-cache cases as %s: %s\n", small_presets[t], why);
            continue;
        }
        for (int i = 0; i < 3; i++) {
            const int d = i == 1 ? 128 : 64, ps = i == 0 ? 256 : 16;
            const int32_t lens[5] = {ps + 1, 0, 1, 4097, ps - 1};
            test_case c = kv_case(5, 16, 2, d == 64 ? 1 : 3, 4097, d, d == 128, (fa2_dtype)t, ps, LENS(lens));
            c.kv_pad = d == 128, c.preset = small_presets[t];
            run_case(steps, nsteps, &c);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_matrix build/stepNN/libfa2.so ...\n");
        return 2;
    }
    int nsteps = argc - 1;
    step_lib *steps = calloc((size_t)nsteps, sizeof *steps);
    for (int s = 0; s < nsteps; s++)
        if (!step_abi_load(&steps[s].abi, argv[s + 1])) {
            fprintf(stderr, "error: cannot load the fa2 ABI from %s: %s\n", argv[s + 1], dlerror());
            return 1;
        } else if (strncmp(steps[s].abi.name(), "00_", 3) == 0) {
            /* step 00's ABI takes host pointers: the matrix's device buffers would crash it */
            fprintf(stderr, "error: gpu_matrix: %s is step 00, the CPU step (allowed: the GPU steps' libraries)\n", argv[s + 1]);
            return 2;
        }
    fa2_device_info dev;
    if (fa2_device_open(&dev, "the GPU matrix")) {
        for (int s = 0; s < nsteps; s++) printf("SKIP %s GPU matrix: no usable GPU\n", steps[s].abi.name());
        return 0;
    }
    printf("# GPU matrix on %s (sm_%d%d, %d SMs)\n", dev.name, dev.sm_major, dev.sm_minor, dev.sm_count);
    const fa2_dtype FP16 = FA2_FP16, BF16 = FA2_BF16;

    /* Seqlens, causal, GQA 1 and 4, head dims, dtypes: every row checked. */
    static const int seq_pairs[][2] = {{1, 1},    {17, 17},  {64, 64},    {127, 127}, {1000, 1000}, {1025, 1025},
                                       {17, 64},  {64, 17},  {127, 1000}, {1000, 127}, {1, 1025},   {1025, 1}};
    for (size_t i = 0; i < sizeof seq_pairs / sizeof *seq_pairs; i++)
        for (int causal = 0; causal < 2; causal++)
            for (int gqa = 0; gqa < 2; gqa++)
                for (int d = 64; d <= 128; d += 64)
                    for (int t = 0; t < 2; t++) {
                        test_case c = shape(2, 4, gqa ? 1 : 4, seq_pairs[i][0], seq_pairs[i][1], d, causal, (fa2_dtype)t);
                        run_case(steps, nsteps, &c);
                    }
    /* Q, K, V as views of one packed tensor. */
    for (int n = 127; n <= 1000; n += 873)
        for (int d = 64; d <= 128; d += 64)
            for (int t = 0; t < 2; t++) {
                test_case c = shape(2, 4, 4, n, n, d, 1, (fa2_dtype)t);
                c.lay = PACKED_QKV;
                run_case(steps, nsteps, &c);
            }
    /* The tile configurations: a grid of at most as many 128-row blocks as SMs, and one
     * of three times as many; peaky inputs, GQA 3. */
    const double started_s = fa2_wall_ms() / 1e3;
    unsetenv("FA2_EMULATE"); /* the GPU's own limits; the preset cases set their own */
    fa2_limits gpu;
    if (fa2_limits_get(&gpu, NULL, 0) != FA2_LIMITS_OK) gpu.sm_count = dev.sm_count;
    for (int large = 0; large < 2; large++)
        for (int d = 64; d <= 128; d += 64)
            for (int t = 0; t < 2; t++)
                for (int causal = 0; causal < 2; causal++) {
                    test_case c = config_case(gpu.sm_count, large, d, causal, (fa2_dtype)t);
                    run_case(steps, nsteps, &c);
                }
    /* Scores in the thousands. */
    for (int t = 0; t < 2; t++)
        for (int big = 0; big < 2; big++)
            for (int d = 64; d <= 128; d += 64) {
                test_case c = shape(1, 2, 2, 300, 300, d, d == 64, (fa2_dtype)t);
                c.input_scale = big ? 100.0f : 30.0f, c.rescale_probe = 1;
                run_case(steps, nsteps, &c);
            }
    /* Layouts. */
    for (int lay = BHSD; lay <= OFFSET_BASES; lay++)
        for (int d = 64; d <= 128; d += 64) {
            test_case c = shape(2, 4, 2, 200, 257, d, d == 128, d == 64 ? FP16 : BF16);
            c.lay = (layout)lay;
            c.may_refuse = lay == ODD_STRIDES || lay == OFFSET_BASES;
            run_case(steps, nsteps, &c);
        }
    /* GQA ratios 2, 3, 8 and MQA. */
    static const int groups[][2] = {{4, 2}, {6, 2}, {16, 2}, {8, 1}};
    for (int g = 0; g < 4; g++)
        for (int d = 64; d <= 128; d += 64) {
            test_case c = shape(2, groups[g][0], groups[g][1], 257, 300, d, g % 2, d == 64 ? BF16 : FP16);
            run_case(steps, nsteps, &c);
        }
    /* Long sequences (sampled rows). The unfused baseline refuses 70001 x 70001: its S would be 18 GiB. */
    {
        test_case c = shape(1, 2, 1, 4097, 4097, 128, 1, BF16);
        run_case(steps, nsteps, &c);
        c = shape(1, 1, 1, 70001, 70001, 64, 1, FP16);
        c.may_refuse = 1;
        run_case(steps, nsteps, &c);
        c = shape(1, 4, 1, 1, 70001, 128, 0, FP16);
        run_case(steps, nsteps, &c);
        c = shape(1, 2, 2, 70001, 64, 64, 1, BF16); /* rows 0 .. 69936 see no key */
        run_case(steps, nsteps, &c);
        /* causal d64 over more than 8192 keys, Nq < Nk, GQA 3: the persistent step's causal
         * items of three consumers (192 rows), whose last item is partly past the rows */
        c = shape(1, 6, 2, 3000, 9001, 64, 1, BF16);
        run_case(steps, nsteps, &c);
    }
    /* K and V of 10 MB per head, five heads: together more than a 50 MB L2 holds; causal
     * with Nq < Nk, so every q tile sees 16,000 to 20,000 keys and a tile scheduler that
     * pairs q tiles pairs long key loops (the persistent step's causal units). */
    {
        test_case c = shape(1, 5, 5, 4000, 20000, 128, 1, BF16);
        run_case(steps, nsteps, &c);
    }
    /* Causal with 6 (batch, head) pairs, a batch boundary inside the first: the persistent
     * step's causal list runs longest first over 4 pairs at a time, then the 2 left. */
    for (int d = 64; d <= 128; d += 64) {
        test_case c = shape(2, 3, 3, 300, 300, d, 1, d == 64 ? FP16 : BF16);
        run_case(steps, nsteps, &c);
    }
    /* Q and O of more than 2^31 elements: 524,300 x 32 heads x 128. */
    {
        test_case c = shape(1, 32, 8, 524300, 130, 128, 0, FP16);
        run_case(steps, nsteps, &c);
    }
    /* No LSE; a non-default stream; other softmax scales. */
    for (int d = 64; d <= 128; d += 64) {
        test_case c = shape(2, 4, 4, 300, 300, d, d == 64, d == 64 ? FP16 : BF16);
        c.no_lse = 1;
        run_case(steps, nsteps, &c);
        c = shape(2, 8, 2, 1000, 1000, d, d == 128, d == 64 ? BF16 : FP16);
        c.on_stream = 1;
        run_case(steps, nsteps, &c);
        c = shape(2, 4, 2, 200, 300, d, 1, d == 64 ? FP16 : BF16);
        c.softmax_scale = d == 64 ? 0.3f : 2.0f;
        run_case(steps, nsteps, &c);
    }
    /* NaN inputs (batch 0, head 0): a Q row; a K row later rows see and earlier ones do
     * not (causal); an element of V at key 0, which every row sees. */
    for (int t = 0; t < 2; t++) {
        test_case c = shape(2, 4, 4, 100, 100, 64, 1, (fa2_dtype)t);
        c.nan = NAN_Q_ROW, c.nan_row = 50;
        run_case(steps, nsteps, &c);
        c = shape(2, 4, 2, 100, 130, 128, 1, (fa2_dtype)t);
        c.nan = NAN_K_ROW, c.nan_row = 97;
        run_case(steps, nsteps, &c);
        c = shape(2, 4, 1, 90, 200, 128, t, (fa2_dtype)t);
        c.nan = NAN_V_ELEMENT, c.nan_row = 0, c.nan_col = 5;
        run_case(steps, nsteps, &c);
    }

    /* The backward, for the steps that have one: tails (seqlen 1, odd lengths), causal with
     * Nq != Nk both ways (Nq > Nk: rows that see no key, LSE = -inf), GQA 4:1 and MQA,
     * d64/d128, fp16/bf16, then a padded and a [b,h,s,d] layout, peaky scores (Q and K
     * scaled by 4 and 30), a NaN in a Q row, FA2_DETERMINISTIC=1, a 99 KB preset (step 14's
     * narrow tile at d128), the A100 preset (its wide tile unstaged at d128), and the edges
     * of step 14's tiles, its 128-query tile at d64 among them; 12 (kv head, batch) pairs for
     * the causal block order's sections. */
    {
        static const int bwd_seqs[][2] = {{1, 1}, {17, 17}, {127, 127}, {1, 300}, {300, 1}, {65, 200}, {200, 65}, {333, 1000}};
        static const int bwd_heads[3][2] = {{4, 4}, {8, 2}, {8, 1}}; /* heads_q, heads_kv: 1:1, GQA 4:1, MQA */
        for (size_t i = 0; i < sizeof bwd_seqs / sizeof *bwd_seqs; i++)
            for (int causal = 0; causal < 2; causal++)
                for (int d = 64; d <= 128; d += 64)
                    for (int t = 0; t < 2; t++) {
                        const int *heads = bwd_heads[i % 3];
                        test_case c = shape(2, heads[0], heads[1], bwd_seqs[i][0], bwd_seqs[i][1], d, causal, (fa2_dtype)t);
                        run_bwd_case(steps, nsteps, &c);
                    }
        for (int lay = BHSD; lay <= PADDED; lay++)
            for (int d = 64; d <= 128; d += 64) {
                test_case c = shape(2, 4, 1, 200, 257, d, d == 128, d == 64 ? FP16 : BF16);
                c.lay = (layout)lay;
                run_bwd_case(steps, nsteps, &c);
            }
        for (int t = 0; t < 2; t++)
            for (int big = 0; big < 2; big++)
                for (int d = 64; d <= 128; d += 64) {
                    test_case c = shape(1, 4, 1, 300, 300, d, d == 64, (fa2_dtype)t);
                    c.input_scale = big ? 30.0f : 4.0f;
                    run_bwd_case(steps, nsteps, &c);
                }
        for (int t = 0; t < 2; t++) {
            test_case c = shape(2, 4, 4, 100, 100, 64 << t, 0, (fa2_dtype)t);
            c.nan = NAN_Q_ROW, c.nan_row = 50;
            run_bwd_case(steps, nsteps, &c);
        }
        /* the causal block order's sections (steps 14 and 15: 8 (kv head, batch) pairs a section):
         * 12 pairs, a full section and a short one, with and without the deterministic mode */
        for (int d = 64; d <= 128; d += 64)
            for (int det = 0; det < 2; det++) {
                test_case c = shape(3, 8, 4, 150, 700, d, 1, d == 64 ? BF16 : FP16);
                c.deterministic = det;
                run_bwd_case(steps, nsteps, &c);
            }
        for (int d = 64; d <= 128; d += 64) {
            test_case c = shape(2, 8, 2, 257, 1000, d, 1, d == 64 ? FP16 : BF16);
            c.deterministic = 1;
            run_bwd_case(steps, nsteps, &c);
            c = shape(1, 4, 1, 1000, 333, d, d == 128, d == 64 ? BF16 : FP16);
            c.deterministic = 1;
            run_bwd_case(steps, nsteps, &c);
            c = shape(2, 8, 2, 500, 500, d, 1, d == 64 ? BF16 : FP16);
            c.preset = "rtx4090";
            run_bwd_case(steps, nsteps, &c);
            /* the A100's 163 KB: step 14's wide tile with the fragments' dQ atomics at d128, the
             * staged tile at d64 (this GPU's own limits take the staged tile at both) */
            c.preset = "a100";
            run_bwd_case(steps, nsteps, &c);
            c = shape(1, 4, 1, 300, 700, d, 0, d == 64 ? FP16 : BF16);
            c.preset = "a100", c.deterministic = 1;
            run_bwd_case(steps, nsteps, &c);
        }
        /* Step 14's tiles (64 queries x 128 keys, 8 warps of 32 x 32; 64 x 64, 4 warps, under a
         * 99 KB preset at d128): whole query and key blocks (64, 128), one key into a second
         * block (129), a key block whose last warp of 32 keys has none (96), causal with Nq !=
         * Nk across block edges both ways; then the deterministic mode under the 99 KB preset,
         * whose 64-key blocks the convert kernel's sum must count by. */
        static const int tile_seqs[][2] = {{64, 128}, {128, 129}, {129, 96}, {192, 130}, {130, 385}};
        for (size_t i = 0; i < sizeof tile_seqs / sizeof *tile_seqs; i++)
            for (int causal = 0; causal < 2; causal++)
                for (int d = 64; d <= 128; d += 64) {
                    test_case c = shape(1, 4, 2, tile_seqs[i][0], tile_seqs[i][1], d, causal, (fa2_dtype)((i + causal) % 2));
                    run_bwd_case(steps, nsteps, &c);
                }
        for (int d = 64; d <= 128; d += 64) {
            test_case c = shape(2, 4, 1, 300, 700, d, 1, d == 64 ? FP16 : BF16);
            c.preset = "rtx4090";
            c.deterministic = 1;
            run_bwd_case(steps, nsteps, &c);
        }
        /* Step 14's 128-query tile (128 queries x 128 keys, 8 warps of 32 queries x 64 keys for
         * S and dP, four query quarters of staged dQ; d64 where a block may have 196 KB: this
         * GPU's own limits on an H100 or H200, not the presets): whole query blocks of 128 and one
         * row past them (128, 129, 255, 256) against key lengths on and off the 128-key blocks,
         * causal with Nq != Nk both ways (the diagonal crossing a step's quarters, rows that see
         * no key), GQA 4:2; then its deterministic mode, whose splits the convert kernel counts
         * in query blocks of 128, causal with Nq > Nk and Nq < Nk. */
        static const int tall_seqs[][2] = {{128, 200}, {129, 64}, {255, 384}, {256, 129}, {129, 129}, {256, 256}};
        for (size_t i = 0; i < sizeof tall_seqs / sizeof *tall_seqs; i++)
            for (int causal = 0; causal < 2; causal++)
                for (int t = 0; t < 2; t++) {
                    test_case c = shape(1, 4, 2, tall_seqs[i][0], tall_seqs[i][1], 64, causal, (fa2_dtype)t);
                    run_bwd_case(steps, nsteps, &c);
                }
        for (int t = 0; t < 2; t++) {
            test_case c = shape(1, 4, 1, 700, 300, 64, 1, (fa2_dtype)t);
            c.deterministic = 1;
            run_bwd_case(steps, nsteps, &c);
            c = shape(2, 8, 2, 255, 900, 64, 1, (fa2_dtype)t);
            c.deterministic = 1;
            run_bwd_case(steps, nsteps, &c);
        }
        unsetenv("FA2_EMULATE");
    }

    /* Decode: one to five query rows and long keys, the split-KV step's shapes (its keys
     * cut over many blocks, merged by LSE). GQA groups 4, 3 (15 packed rows), 1 and MQA
     * 32:1 (two 16-row tiles per query row); causal with Nq > 1 (bottom-right: the rows'
     * last keys differ); odd Nk. */
    for (int t = 0; t < 2; t++)
        for (int d = 64; d <= 128; d += 64) {
            test_case dec[] = {shape(4, 32, 8, 1, 8191, d, 0, (fa2_dtype)t), shape(2, 32, 8, 4, 4099, d, 1, (fa2_dtype)t),
                               shape(3, 24, 8, 5, 3000, d, 1, (fa2_dtype)t), shape(1, 32, 1, 3, 20000, d, 0, (fa2_dtype)t),
                               shape(2, 16, 16, 1, 16385, d, 0, (fa2_dtype)t)};
            for (size_t i = 0; i < sizeof dec / sizeof *dec; i++) run_case(steps, nsteps, &dec[i]);
        }
    /* Decode with peaky scores (the running max of a later key range far above an
     * earlier one's: the merge rescales by up to e^-thousands) and NaN in a K row
     * or a V element that one key range alone sees. */
    {
        test_case c = shape(2, 8, 2, 2, 6000, 128, 1, BF16);
        c.input_scale = 30.0f, c.rescale_probe = 1;
        run_case(steps, nsteps, &c);
        for (int t = 0; t < 2; t++) {
            c = shape(1, 8, 2, 1, 5000, 64 << t, 0, (fa2_dtype)t);
            c.nan = NAN_K_ROW, c.nan_row = 3001;
            run_case(steps, nsteps, &c);
            c.nan = NAN_V_ELEMENT, c.nan_row = 4095, c.nan_col = 7;
            run_case(steps, nsteps, &c);
        }
    }

    kv_cache_cases(steps, nsteps);

    /* Batch and heads past the grid's y and z limit (65,535), tiny seqlens: the steps cut
     * such a call into launches that fit (fa2_for_each_grid_chunk), by batch, and by heads
     * in whole GQA groups (69,999 = 3 x 23,333 query heads: 65,535 of them, then 4,464). */
    {
        test_case c = shape(70000, 2, 1, 3, 5, 64, 1, BF16);
        run_case(steps, nsteps, &c);
        c = shape(2, 69999, 23333, 2, 3, 128, 0, FP16);
        run_case(steps, nsteps, &c);
    }

    /* Every preset of common/device_limits.c: the shapes that reach each configuration a step can
     * choose there (sized from the preset's SM count), the harness's default shape, and
     * decode with one and with several splits. The kernels run on this GPU; every
     * decision, and the shared memory each launch asks for, is the preset's. */
    printf("# the cases with this GPU's limits took %.0f s\n", fa2_wall_ms() / 1e3 - started_s);
    for (int i = 0; i < fa2_limits_preset_count(); i++) {
        const char *preset = fa2_limits_preset_name(i);
        setenv("FA2_EMULATE", preset, 1);
        fa2_limits pl;
        char why[256];
        if (fa2_limits_get(&pl, why, sizeof why) != FA2_LIMITS_OK) { /* a larger GPU than this one */
            printf("SKIP the cases as %s: %s\n", preset, why);
            continue;
        }
        for (int large = 0; large < 2; large++)
            for (int d = 64; d <= 128; d += 64) {
                test_case c = config_case(pl.sm_count, large, d, large ^ (d == 128), large ? BF16 : FP16);
                c.preset = preset;
                run_case(steps, nsteps, &c);
            }
        test_case pc[] = {shape(2, 8, 8, 1024, 1024, 128, 0, FP16), shape(1, 32, 8, 1, 8191, 128, 0, BF16),
                          shape(1, 32, 8, 1, 8191, 64, 0, FP16), shape(2, 32, 8, 4, 4099, 128, 1, BF16)};
        for (size_t k = 0; k < sizeof pc / sizeof *pc; k++) {
            pc[k].preset = preset;
            run_case(steps, nsteps, &pc[k]);
        }
    }
    unsetenv("FA2_EMULATE");
    printf("# with the presets' cases: %.0f s\n", fa2_wall_ms() / 1e3 - started_s);
    /* The preset of this GPU (the one whose numbers are this GPU's) takes every decision
     * the GPU itself takes: its row of published limits matches the device attributes, and
     * the occupancy arithmetic the steps use under a preset matches the runtime's query
     * they use on the GPU (each decision line names the blocks per SM). */
    {
        const char *own = NULL;
        for (int i = 0; i < fa2_limits_preset_count() && !own; i++) {
            setenv("FA2_EMULATE", fa2_limits_preset_name(i), 1);
            fa2_limits pl;
            fa2_limits_get(&pl, NULL, 0);
            if (pl.cc_major == gpu.cc_major && pl.cc_minor == gpu.cc_minor && pl.sm_count == gpu.sm_count &&
                pl.smem_per_block == gpu.smem_per_block) {
                own = fa2_limits_preset_name(i);
                char why[256];
                snprintf(why, sizeof why, "preset: smem/SM %d reserved %d regs %d threads %d blocks %d; GPU: %d %d %d %d %d",
                         pl.smem_per_sm, pl.smem_reserved_per_block, pl.regs_per_sm, pl.threads_per_sm, pl.blocks_per_sm,
                         gpu.smem_per_sm, gpu.smem_reserved_per_block, gpu.regs_per_sm, gpu.threads_per_sm, gpu.blocks_per_sm);
                report(pl.smem_per_sm == gpu.smem_per_sm && pl.smem_reserved_per_block == gpu.smem_reserved_per_block &&
                       pl.regs_per_sm == gpu.regs_per_sm && pl.threads_per_sm == gpu.threads_per_sm && pl.blocks_per_sm == gpu.blocks_per_sm,
                       why, "preset %s is this GPU's limits (%s)", own, dev.name);
            }
        }
        unsetenv("FA2_EMULATE");
        if (!own) printf("SKIP no preset describes %s: its decisions under emulation are not compared with its own\n", dev.name);
        for (int st = 0; own && st < nsteps; st++) {
            int same = 0, n = 0;
            char detail[600] = "";
            for (int large = 0; large < 2; large++)
                for (int d = 64; d <= 128; d += 64)
                    for (int t = 0; t < 2; t++) {
                        const test_case cs[] = {config_case(gpu.sm_count, large, d, t, (fa2_dtype)t), shape(1 + 7 * large, 32, 8, 1, 8192, d, 0, (fa2_dtype)t)};
                        for (int k = 0; k < 2; k++) {
                            fa2_params p = {0};
                            p.batch = cs[k].batch, p.heads_q = cs[k].hq, p.heads_kv = cs[k].hkv, p.seqlen_q = cs[k].nq, p.seqlen_k = cs[k].nk;
                            p.head_dim = cs[k].d, p.causal = cs[k].causal, p.dtype = cs[k].t, p.softmax_scale = 0.125f;
                            fa2_set_dense_strides(&p);
                            /* never dereferenced: fa2_config reads the params alone */
                            p.q = (const void *)((uintptr_t)1 << 40), p.k = (const void *)((uintptr_t)2 << 40);
                            p.v = (const void *)((uintptr_t)3 << 40), p.o = (void *)((uintptr_t)4 << 40);
                            p.workspace_bytes = steps[st].abi.workspace_size(&p);
                            p.workspace = p.workspace_bytes ? (void *)((uintptr_t)5 << 40) : NULL;
                            char real[256], emulated[256];
                            const int a = steps[st].abi.config(&p, real, sizeof real);
                            setenv("FA2_EMULATE", own, 1);
                            const int b = steps[st].abi.config(&p, emulated, sizeof emulated);
                            unsetenv("FA2_EMULATE");
                            n++;
                            if (a == b && !strcmp(real, emulated)) same++;
                            else snprintf(detail, sizeof detail, "d%d B%d H%d Nq%d: GPU {%s}, %s {%s}", p.head_dim, p.batch, p.heads_q, p.seqlen_q, real, own, emulated);
                        }
                    }
            report(same == n, detail, "%s: under FA2_EMULATE=%s it decides as on the GPU itself, blocks per SM included (%d of %d shapes)",
                   steps[st].abi.name(), own, same, n);
        }
    }
    /* The configuration shapes do what they say for every SM count the presets have, for
     * this GPU's, and for small GPUs (28 SMs: an RTX 3060; 48: a DGX Spark). */
    {
        int counts[32], n = 0;
        counts[n++] = 28, counts[n++] = 48, counts[n++] = gpu.sm_count;
        for (int i = 0; i < fa2_limits_preset_count(); i++) {
            setenv("FA2_EMULATE", fa2_limits_preset_name(i), 1);
            fa2_limits pl;
            fa2_limits_get(&pl, NULL, 0);
            counts[n++] = pl.sm_count;
        }
        unsetenv("FA2_EMULATE");
        for (int i = 0; i < n; i++) {
            const long long small = config_blocks(counts[i], 0), large = config_blocks(counts[i], 1);
            report(small <= counts[i] && large > 2LL * counts[i], "", "configuration shapes for %d SMs: %lld blocks <= %d, %lld > 2 x %d",
                   counts[i], small, counts[i], large, counts[i]);
        }
    }

    /* A step takes the KV cache in every case or refuses it in every case. */
    for (int s = 0; s < nsteps; s++) {
        const step_lib *st = &steps[s];
        if (!st->kv_taken && !st->kv_refused) continue;
        char why[160];
        snprintf(why, sizeof why, "it ran %d KV-cache cases and refused %d naming seqlens_k or block_table", st->kv_taken,
                 st->kv_refused);
        report(!st->kv_taken || !st->kv_refused, why, "%s: %s the KV cache in every case (%d)", st->abi.name(),
               st->kv_taken ? "takes" : "refuses", st->kv_taken + st->kv_refused);
    }
    /* Every configuration of every step ran in a passing case; how close each step came to its tolerances. */
    for (int s = 0; s < nsteps; s++) {
        printf("# %s: largest O error x%.3f of its tolerance (%s); largest LSE error x%.3f (%s)\n", steps[s].abi.name(),
               steps[s].o_worst, steps[s].o_worst_case, steps[s].lse_worst, steps[s].lse_worst_case);
        const int n = steps[s].abi.config_count();
        unsigned missing = 0;
        for (int i = 0; i < n; i++) missing |= !(steps[s].reached >> i & 1u) ? 1u << i : 0u;
        char why[96];
        snprintf(why, sizeof why, "configurations never reached by a passing case: mask 0x%x", missing);
        report(missing == 0, why, "%s: every one of its %d tile configurations ran and passed", steps[s].abi.name(), n);
    }
    return test_failures ? 1 : 0;
}
