/* test_abi.c - every step's ABI refuses what it cannot compute, in one line, and
 * touches no memory doing so. Loads each shared library given on the command
 * line and, starting from params every step supports, breaks one field at a time:
 * fa2_supports must say no with one line naming the field, fa2_config must
 * return -1, fa2_forward must return FA2_ERR_UNSUPPORTED, and the buffers behind
 * q, k, v, o and lse must be byte for byte what they were. Host buffers stand in
 * for device memory: a refusal comes before any use, so nothing is dereferenced.
 * A few breaks only some steps refuse (16-byte alignment): those must be refused
 * in one line naming the field, or accepted; a broken workspace (too small,
 * misaligned, overlapping a tensor) must be refused by a step that needs one for
 * these params (fa2_workspace_size > 0) and may be accepted by the others.
 * A KV cache (per-sequence lengths, pages) must be refused, naming the field, by
 * every step but those that take one; fields of one that disagree, by every step;
 * and by every backward. Runs without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* One arena holds every tensor, each in a region 8 times its size (room for the
 * breaks that grow a tensor); it is filled with a pattern and compared after
 * each refused call. */
enum { B = 2, HQ = 4, HKV = 2, NQ = 100, NK = 120, D = 64 };
#define ARENA_BYTES ((size_t)1 << 23)
/* The workspace: the upper half of the arena, past every tensor region. */
#define WORKSPACE_AT ((size_t)1 << 22)
#define WORKSPACE_BYTES ((size_t)1 << 22)
static unsigned char *arena, *arena_copy;
/* The KV cache's int32 arrays: below the workspace, past every tensor region. */
#define CACHE_AT (WORKSPACE_AT - ((size_t)1 << 16))

static fa2_params base_params(void)
{
    fa2_params p = {0};
    p.batch = B, p.heads_q = HQ, p.heads_kv = HKV, p.seqlen_q = NQ, p.seqlen_k = NK, p.head_dim = D;
    p.dtype = FA2_FP16, p.softmax_scale = 0.125f;
    fa2_set_dense_strides(&p);
    size_t at = 0;
    const size_t bytes[4] = {(size_t)B * NQ * HQ * D * 2, (size_t)B * NK * HKV * D * 2, (size_t)B * NK * HKV * D * 2,
                             (size_t)B * NQ * HQ * D * 2};
    void *ptrs[4];
    for (int i = 0; i < 4; i++) {
        ptrs[i] = arena + at;
        at += 8 * bytes[i];
    }
    p.q = ptrs[0], p.k = ptrs[1], p.v = ptrs[2], p.o = ptrs[3];
    p.lse = (float *)(arena + at);
    p.workspace = arena + WORKSPACE_AT, p.workspace_bytes = WORKSPACE_BYTES;
    return p;
}

/* The backward's params: the forward's (with an LSE), and dO, dQ, dK, dV each in a
 * region of its own size after the forward's tensors and LSE, before the workspace. */
static fa2_bwd_params base_bwd_params(void)
{
    fa2_bwd_params bp = {0};
    bp.fwd = base_params();
    fa2_set_dense_bwd_strides(&bp);
    unsigned char *at = (unsigned char *)bp.fwd.lse + (size_t)B * HQ * NQ * 4;
    const size_t q_bytes = (size_t)B * NQ * HQ * D * 2, kv_bytes = (size_t)B * NK * HKV * D * 2;
    bp.dout = at, at += q_bytes;
    bp.dq = at, at += q_bytes;
    bp.dk = at, at += kv_bytes;
    bp.dv = at;
    return bp;
}

/* REFUSE_UNLESS_CACHE: every step but those that take a KV cache (CACHE_STEPS) must refuse. */
typedef enum { MUST_REFUSE, MAY_REFUSE, REFUSE_IF_WORKSPACE, REFUSE_UNLESS_CACHE } expectation;
static const char *const CACHE_STEPS[] = {"00_cpu_reference", "13_split_kv"};
static int takes_cache(const step_abi *s)
{
    for (size_t i = 0; i < sizeof CACHE_STEPS / sizeof *CACHE_STEPS; i++)
        if (!strcmp(s->name(), CACHE_STEPS[i])) return 1;
    return 0;
}
typedef struct {
    const char *what;  /* the break, in words */
    const char *field; /* the reason must contain this */
    expectation expect;
    void (*apply)(fa2_params *p);
} breakage;

static void scale_inf(fa2_params *p) { p->softmax_scale = INFINITY; }
static void scale_nan(fa2_params *p) { p->softmax_scale = NAN; }
static void scale_zero(fa2_params *p) { p->softmax_scale = 0.0f; }
static void scale_negative(fa2_params *p) { p->softmax_scale = -0.125f; }
static void q_row_stride_zero(fa2_params *p) { p->q_row_stride = 0; }
static void k_head_stride_negative(fa2_params *p) { p->k_head_stride = -D; }
static void v_batch_stride_zero(fa2_params *p) { p->v_batch_stride = 0; }
static void o_row_stride_zero(fa2_params *p) { p->o_row_stride = 0; }
static void o_heads_overlap(fa2_params *p) { p->o_head_stride = D / 2; }
static void o_rows_overlap(fa2_params *p) { p->o_row_stride = D; } /* row i + 1 of head 0 is row i of head 1 */
static void q_odd_address(fa2_params *p) { p->q = (const char *)p->q + 1; }
static void lse_odd_address(fa2_params *p) { p->lse = (float *)((char *)p->lse + 2); }
static void o_is_q(fa2_params *p) { p->o = (void *)p->q; }
static void lse_inside_o(fa2_params *p) { p->lse = (float *)p->o + 8; }
static void seqlen_over_limit(fa2_params *p) { p->seqlen_k = FA2_MAX_SEQLEN + 1; }
static void offset_overflow(fa2_params *p) { p->q_batch_stride = INT64_C(1) << 61; }
static void offset_wraps(fa2_params *p) { p->k_row_stride = INT64_MAX / 64; } /* x (NK - 1) overflows */
static void heads_not_multiple(fa2_params *p) { p->heads_kv = 3; }
static void heads_kv_above_q(fa2_params *p) { p->heads_kv = 2 * HQ; } /* heads_q / heads_kv = 0 */
static void batch_zero(fa2_params *p) { p->batch = 0; }
static void dtype_bad(fa2_params *p) { p->dtype = (fa2_dtype)7; }
static void causal_bad(fa2_params *p) { p->causal = 2; }
static void q_null(fa2_params *p) { p->q = NULL; }
static void head_dim_300(fa2_params *p) { p->head_dim = 300, fa2_set_dense_strides(p); }
static void q_element_aligned(fa2_params *p) { p->q = (const char *)p->q + 2; }
static void workspace_short(fa2_params *p) { p->workspace_bytes = 16; }
static void workspace_misaligned(fa2_params *p) { p->workspace = (char *)p->workspace + 8, p->workspace_bytes -= 8; }
static void workspace_over_o(fa2_params *p) { p->workspace = p->o; }
static void o_row_stride_odd(fa2_params *p) { p->o_row_stride = HQ * D + 1, p->o_batch_stride = (HQ * D + 8) * NQ; }

/* The KV cache (fa2.h): the lengths and the block table in the arena below the workspace
 * (never read: a refusal comes first, and a step that takes them is not called), K and V
 * as pools of 16-key pages in their own regions: 8 pages a sequence hold NK = 120 keys. */
enum { PAGE = 16, MAX_PAGES = 8, NUM_PAGES = 2 * B * MAX_PAGES };
static void seqlens_given(fa2_params *p) { p->seqlens_k = (const int32_t *)(arena + CACHE_AT); }
static void paged(fa2_params *p)
{
    p->block_table = (const int32_t *)(arena + CACHE_AT + 256);
    p->page_size = PAGE, p->max_pages = MAX_PAGES, p->num_pages = NUM_PAGES, p->block_table_batch_stride = MAX_PAGES;
    p->k_batch_stride = p->v_batch_stride = (int64_t)PAGE * HKV * D; /* the page stride */
}
static void paged_with_seqlens(fa2_params *p) { paged(p), seqlens_given(p); }
static void page_size_48(fa2_params *p) { paged(p), p->page_size = 48; }
static void page_size_8(fa2_params *p) { paged(p), p->page_size = 8, p->max_pages = 16, p->block_table_batch_stride = 16; }
static void page_size_512(fa2_params *p) { paged(p), p->page_size = 512; }
static void page_size_without_table(fa2_params *p) { p->page_size = PAGE; }
static void pages_short_of_seqlen(fa2_params *p) { paged(p), p->max_pages = 7; } /* 112 keys < NK */
static void num_pages_zero(fa2_params *p) { paged(p), p->num_pages = 0; }
static void max_pages_zero(fa2_params *p) { paged(p), p->max_pages = 0; }
static void table_stride_short(fa2_params *p) { paged(p), p->block_table_batch_stride = MAX_PAGES - 1; }
static void table_misaligned(fa2_params *p) { paged(p), p->block_table = (const int32_t *)((const char *)p->block_table + 2); }
static void seqlens_misaligned(fa2_params *p) { p->seqlens_k = (const int32_t *)(arena + CACHE_AT + 2); }
static void o_over_table(fa2_params *p) { paged(p), p->o = (void *)p->block_table; }
static void lse_over_seqlens(fa2_params *p) { p->lse = (float *)(arena + CACHE_AT); p->seqlens_k = (const int32_t *)(arena + CACHE_AT + 4); }
static void page_pool_overflow(fa2_params *p) { paged(p), p->k_batch_stride = INT64_C(1) << 58; } /* x 31 pages: past 2^61 */

static const breakage breaks[] = {
    {"softmax_scale +inf", "softmax_scale", MUST_REFUSE, scale_inf},
    {"softmax_scale NaN", "softmax_scale", MUST_REFUSE, scale_nan},
    {"softmax_scale 0", "softmax_scale", MUST_REFUSE, scale_zero},
    {"softmax_scale -0.125", "softmax_scale", MUST_REFUSE, scale_negative},
    {"q_row_stride 0", "q_row_stride", MUST_REFUSE, q_row_stride_zero},
    {"k_head_stride -64", "k_head_stride", MUST_REFUSE, k_head_stride_negative},
    {"v_batch_stride 0", "v_batch_stride", MUST_REFUSE, v_batch_stride_zero},
    {"o_row_stride 0 (every row would write one place)", "o_row_stride", MUST_REFUSE, o_row_stride_zero},
    {"o heads overlapping (head stride d/2)", "o strides", MUST_REFUSE, o_heads_overlap},
    {"o rows overlapping another head's (row stride d)", "o strides", MUST_REFUSE, o_rows_overlap},
    {"q at an odd address", "q at address", MUST_REFUSE, q_odd_address},
    {"lse not 4-byte aligned", "lse at address", MUST_REFUSE, lse_odd_address},
    {"o the same memory as q", "o overlaps q", MUST_REFUSE, o_is_q},
    {"lse inside o", "lse overlaps o", MUST_REFUSE, lse_inside_o},
    {"seqlen_k 2^30 + 1", "seqlen", MUST_REFUSE, seqlen_over_limit},
    {"q offsets past 2^61 elements", "q:", MUST_REFUSE, offset_overflow},
    {"k offsets that wrap int64", "k:", MUST_REFUSE, offset_wraps},
    {"heads_kv 3 for heads_q 4", "heads_q", MUST_REFUSE, heads_not_multiple},
    {"heads_kv 8 for heads_q 4", "heads_q", MUST_REFUSE, heads_kv_above_q},
    {"batch 0", "batch", MUST_REFUSE, batch_zero},
    {"dtype 7", "dtype", MUST_REFUSE, dtype_bad},
    {"causal 2", "causal", MUST_REFUSE, causal_bad},
    {"q NULL", "must all be set", MUST_REFUSE, q_null},
    {"head_dim 300", "head_dim", MUST_REFUSE, head_dim_300},
    {"q 2-byte aligned, not 16", "q at address", MAY_REFUSE, q_element_aligned},
    {"o_row_stride not a multiple of 8", "o_row_stride", MAY_REFUSE, o_row_stride_odd},
    {"a workspace of 16 bytes", "workspace", REFUSE_IF_WORKSPACE, workspace_short},
    {"a workspace 8-byte aligned", "workspace at address", REFUSE_IF_WORKSPACE, workspace_misaligned},
    {"the workspace on top of o", "workspace overlaps o", REFUSE_IF_WORKSPACE, workspace_over_o},
    {"per-sequence lengths (seqlens_k)", "seqlens_k", REFUSE_UNLESS_CACHE, seqlens_given},
    {"a paged K and V (block_table, 16-key pages)", "block_table", REFUSE_UNLESS_CACHE, paged},
    {"pages and per-sequence lengths", "seqlens_k", REFUSE_UNLESS_CACHE, paged_with_seqlens},
    {"page_size 48", "page_size 48", MUST_REFUSE, page_size_48},
    {"page_size 8", "page_size 8", MUST_REFUSE, page_size_8},
    {"page_size 512", "page_size 512", MUST_REFUSE, page_size_512},
    {"page_size 16 without a block_table", "without a block_table", MUST_REFUSE, page_size_without_table},
    {"7 pages of 16 for seqlen_k 120", "max_pages 7", MUST_REFUSE, pages_short_of_seqlen},
    {"num_pages 0", "num_pages 0", MUST_REFUSE, num_pages_zero},
    {"max_pages 0", "max_pages 0", MUST_REFUSE, max_pages_zero},
    {"block_table rows closer than max_pages", "block_table_batch_stride", MUST_REFUSE, table_stride_short},
    {"block_table 2-byte aligned", "block_table at address", MUST_REFUSE, table_misaligned},
    {"seqlens_k 2-byte aligned", "seqlens_k at address", MUST_REFUSE, seqlens_misaligned},
    {"o on top of the block_table", "o overlaps block_table", MUST_REFUSE, o_over_table},
    {"lse on top of seqlens_k", "lse overlaps seqlens_k", MUST_REFUSE, lse_over_seqlens},
    {"a K page pool past 2^61 elements", "k:", MUST_REFUSE, page_pool_overflow},
};

/* base_refused: the step refuses the unbroken params here too (a step built for one GPU
 * family, on another or under another's FA2_EMULATE preset): a break it could accept is
 * then refused for that reason, which need not name the break's field. */
static void check_refusal(const step_abi *s, const breakage *br, int base_refused)
{
    fa2_params p = base_params();
    br->apply(&p);
    char why[256] = "", what[256] = "", detail[600];
    const int supported = s->supports(&p, why, sizeof why);
    const int may_accept = br->expect == MAY_REFUSE || (br->expect == REFUSE_IF_WORKSPACE && s->workspace_size(&p) == 0) ||
                           (br->expect == REFUSE_UNLESS_CACHE && takes_cache(s));
    if (supported && may_accept) {
        report(1, "", "%s accepts %s (it can compute it)", s->name(), br->what);
        return;
    }
    memcpy(arena_copy, arena, ARENA_BYTES);
    const int config = s->config(&p, what, sizeof what);
    const int rc = s->forward(&p, NULL);
    /* params the ABI refuses need no workspace (a broken workspace is not such a param) */
    const size_t ws = br->expect == REFUSE_IF_WORKSPACE ? 0 : s->workspace_size(&p);
    const int untouched = memcmp(arena, arena_copy, ARENA_BYTES) == 0;
    const int one_line = why[0] && !strchr(why, '\n') && (strstr(why, br->field) || (base_refused && may_accept));
    snprintf(detail, sizeof detail, "supports %d why '%s' (must name '%s'), config %d, forward %d, workspace %zu, memory %s",
             supported, why, br->field, config, rc, ws, untouched ? "untouched" : "CHANGED");
    report(!supported && one_line && config < 0 && rc == FA2_ERR_UNSUPPORTED && untouched && (ws == 0 || br->expect == MAY_REFUSE),
           detail, "%s refuses %s: %s", s->name(), br->what, why);
}

/* The backward's refusals: a bad field must be refused in one line naming it by every
 * step, with nothing touched; the unbroken params are computed by a step with a backward
 * and refused, in one line saying so, by every other. */
static void bwd_lse_null(fa2_bwd_params *p) { p->fwd.lse = NULL; }
static void bwd_dout_null(fa2_bwd_params *p) { p->dout = NULL; }
static void bwd_dq_row_stride_zero(fa2_bwd_params *p) { p->dq_row_stride = 0; }
static void bwd_dk_is_k(fa2_bwd_params *p) { p->dk = (void *)p->fwd.k; }
static void bwd_dv_is_dq(fa2_bwd_params *p) { p->dv = p->dq; }
static void bwd_dq_odd(fa2_bwd_params *p) { p->dq = (char *)p->dq + 1; }
static void bwd_dk_heads_overlap(fa2_bwd_params *p) { p->dk_head_stride = D / 2; }
static void bwd_scale_nan(fa2_bwd_params *p) { p->fwd.softmax_scale = NAN; }
static void bwd_workspace_short(fa2_bwd_params *p) { p->fwd.workspace_bytes = 16; }
static void bwd_workspace_on_dv(fa2_bwd_params *p) { p->fwd.workspace = p->dv; }
static void bwd_seqlens(fa2_bwd_params *p) { seqlens_given(&p->fwd); }
static void bwd_paged(fa2_bwd_params *p) { paged(&p->fwd); }
typedef struct {
    const char *what, *field;
    int if_workspace; /* only a step that needs a workspace must refuse it */
    void (*apply)(fa2_bwd_params *p);
} bwd_breakage;
static const bwd_breakage bwd_breaks[] = {
    {"lse NULL", "lse", 0, bwd_lse_null},
    {"dout NULL", "dout", 0, bwd_dout_null},
    {"dq_row_stride 0", "dq_row_stride", 0, bwd_dq_row_stride_zero},
    {"dk on top of k", "dk overlaps k", 0, bwd_dk_is_k},
    {"dv on top of dq", "overlaps", 0, bwd_dv_is_dq},
    {"dq 1 byte off", "dq at address", 0, bwd_dq_odd},
    {"dk heads overlapping", "dk strides", 0, bwd_dk_heads_overlap},
    {"softmax_scale NaN", "softmax_scale", 0, bwd_scale_nan},
    {"a backward workspace of 16 bytes", "workspace", 1, bwd_workspace_short},
    {"the backward workspace on top of dv", "workspace overlaps dv", 1, bwd_workspace_on_dv},
    {"per-sequence lengths", "seqlens_k", 0, bwd_seqlens},
    {"a paged K and V", "block_table", 0, bwd_paged},
};

static void check_backward(const step_abi *s, int base_refused)
{
    char why[256] = "", detail[600];
    fa2_bwd_params bp = base_bwd_params();
    const size_t need = s->backward_workspace_size(&bp);
    const int has_backward = s->backward_supports(&bp, why, sizeof why);
    /* a step whose forward refuses these params here (a Hopper step on another GPU) refuses its
     * backward too, in one line naming the compute capability */
    const int other_family = base_refused && strstr(why, "compute capability");
    report(has_backward || (why[0] && !strchr(why, '\n') && (strstr(why, "forward alone") || other_family)), why,
           "%s: the backward of unbroken params is %s", s->name(), has_backward ? "computed" : "refused in one line");
    for (size_t i = 0; i < sizeof bwd_breaks / sizeof *bwd_breaks; i++) {
        const bwd_breakage *br = &bwd_breaks[i];
        if (br->if_workspace && need == 0) continue;
        fa2_bwd_params p = base_bwd_params();
        br->apply(&p);
        why[0] = 0;
        memcpy(arena_copy, arena, ARENA_BYTES);
        const int supported = s->backward_supports(&p, why, sizeof why);
        const int rc = s->backward(&p, NULL);
        const int untouched = memcmp(arena, arena_copy, ARENA_BYTES) == 0;
        /* where the forward is refused for the GPU, a step may say that before it reaches the field */
        const int one_line = why[0] && !strchr(why, '\n') && (strstr(why, br->field) || (base_refused && strstr(why, "compute capability")));
        snprintf(detail, sizeof detail, "supports %d why '%s' (must name '%s'), backward %d, memory %s", supported, why,
                 br->field, rc, untouched ? "untouched" : "CHANGED");
        report(!supported && one_line && rc == FA2_ERR_UNSUPPORTED && untouched, detail, "%s refuses the backward of %s: %s",
               s->name(), br->what, why);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_abi build/stepNN/libfa2.so ...\n");
        return 2;
    }
    arena = aligned_alloc(4096, ARENA_BYTES);
    arena_copy = malloc(ARENA_BYTES);
    for (size_t i = 0; i < ARENA_BYTES; i++) arena[i] = (unsigned char)(i * 131 + 7);
    for (int a = 1; a < argc; a++) {
        step_abi s;
        if (!step_abi_load(&s, argv[a])) {
            report(0, dlerror(), "load the fa2 ABI from %s", argv[a]);
            continue;
        }
        fa2_params p = base_params();
        char why[256] = "";
        const size_t need = s.workspace_size(&p);
        report(need <= WORKSPACE_BYTES, "", "%s needs %zu bytes of workspace here (the test gives %zu)", s.name(), need,
               (size_t)WORKSPACE_BYTES);
        const int base_refused = !s.supports(&p, why, sizeof why);
        if (base_refused) printf("SKIP %s supports none of these params here (%s): only its refusals are checked\n", s.name(), why);
        for (size_t i = 0; i < sizeof breaks / sizeof *breaks; i++) check_refusal(&s, &breaks[i], base_refused);
        check_backward(&s, base_refused);
    }
    free(arena);
    free(arena_copy);
    return test_failures ? 1 : 0;
}
