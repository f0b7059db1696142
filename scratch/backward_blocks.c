/* backward_blocks - which (key block, query block) tile pairs each block of step 14's main
 * backward kernel visits, in which order, and where each row of dQ gets its contributions
 * from, with the tiles and formulas of steps/14_backward/kernel.cu:
 *  - fa2_bwd_kernel: one block per (key block of BLOCK_N keys, kv head, batch), grid
 *    (ceil(Nk / BLOCK_N), heads_kv, batch), in one of two tiles (launch_bwd_tile): BwdWide, 128
 *    keys on 8 warps, wherever a block may have its 160 KB at d128 (A100, H100, H200) and always
 *    at d64 (96 KB); else BwdNarrow, 64 keys on 4 warps (80 KB at d128, the 99 KB GPUs). --block-keys
 *    picks which. Where a block has 34 KB (d128) or 18 KB (d64) more, the wide tile stages dQ
 *    (BwdWideStaged: H100 and H200 at both head dims, the A100 at d64; --staged 0 shows the wide
 *    tile without it). Each product of a step has its own tiling of the warps, every warp tile 32 x 32
 *    rows deep (BwdTile): S and dP 2 (queries) x BLOCK_N / 32 (keys), dK and dV BLOCK_N / 32 (keys)
 *    x the rest (head dim), dQ 2 (queries) x the rest (head dim);
 *  - its walk: query blocks of BWD_BLOCK_M = 64 rows from first_query_block(n0) = (causal ?
 *    max(0, n0 - shift) / 64 : 0), shift = Nk - Nq (bottom-right causal: row i sees keys
 *    j <= i + shift), to the last, per_head of them, for each query head of the kv head's GQA
 *    group in turn: step s is query block first_qb + s % per_head of query head
 *    h_kv group + s / per_head;
 *  - a step runs the masked body when m0 + 64 > Nq, n0 + BLOCK_N > Nk or (causal)
 *    n0 + BLOCK_N - 1 > m0 + shift;
 *  - dQ: each step adds dS K_j into the rows of its query block: straight from the C fragments
 *    (red.global.add.f32 of 2 floats of each of 8 rows: 8 lines per instruction), or, staged,
 *    through a [64][D + 8] fp32 tile read back a whole row at a time (red.global.add.f32 of 32
 *    consecutive floats before sm_90, one line; red.global.add.v4.f32 of 128 on sm_90). With
 *    FA2_DETERMINISTIC=1 the kernel runs over S key blocks per launch (S = bwd_dq_splits(BLOCK_N):
 *    about 256 blocks a launch, at most 16, at most the key blocks), key block nb adding into split
 *    nb % S with the same atomics, and bwd_convert_kernel sums, for a row of query block i, the
 *    splits in order while first_query_block(BLOCK_N split) <= i. Where S = the key blocks (at most
 *    16 of them and a small batch x kv heads, as the default shape), each key block has a split of
 *    its own. The workspace holds the splits of 64-key blocks (BWD_MIN_BLOCK_N), for either tile.
 * Then what a step costs at --dim, counted from the kernel's loops (mma.sync m16n8k16, ldmatrix.x4,
 * the 4-byte stores of P and dS and the dQ atomics per warp; a model: 4 wavefronts per conflict-free
 * ldmatrix.x4, 1 per conflict-free 4-byte store), the bytes it reads and adds, and the shape's totals: steps,
 * FLOPs against the 2.5 forwards the harness counts, dQ's traffic, the workspace in both modes.
 * --format csv writes the walk and dQ's sources for the figure (figures/backward_blocks.py). */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: backward_blocks [--batch B] [--heads H] [--kv-heads K] [--seqlen-q N] [--seqlen-k N] [--dim 64|128]\n"
    "                       [--block-keys 64|128] [--staged 0|1] [--causal 0|1] [--format text|csv] [--check]\n"
    "Step 14's backward: the blocks of its main kernel (one per key block and kv head), the\n"
    "query blocks of 64 rows each one walks, for every query head of its GQA group, which steps run the\n"
    "masked body, which key blocks add into each query block of dQ (under FA2_DETERMINISTIC=1, into which\n"
    "of the S splits bwd_convert_kernel sums in order), and what a step and the whole shape cost.\n"
    "  --batch, --heads, --kv-heads, --seqlen-q, --seqlen-k, --dim   the shape (default B1 Hq2 Hkv1 Nq400\n"
    "                Nk300 d128: a GQA group of two, rows that see no key, tails on both sides)\n"
    "  --block-keys   the kernel's tile: 128 (default), BwdWide, 64 queries x 128 keys on 8 warps (A100, H100,\n"
    "             H200 at d128; every GPU at d64); 64, BwdNarrow, 64 x 64 on 4 warps (d128 where a block gets 99 KB)\n"
    "  --staged   1 (the default with 128 keys): dQ staged through shared memory, BwdWideStaged (H100, H200;\n"
    "             the A100 at d64); 0: the fragments' atomics (the narrow tile always; the wide one elsewhere)\n"
    "  --causal   1 (default): bottom-right causal mask, as the kernel; 0: none\n"
    "  --format csv: one line per step of a block of batch 0 (kind = step) and per (query head, query block,\n"
    "             key block that adds into it) (kind = dq; key_block -1 where none does), for the figures\n"
    "  --check    assert every tile pair with a visible (row, key) pair is visited exactly once and no other,\n"
    "             the masked body runs exactly where a pair is hidden, the convert kernel's sum takes exactly\n"
    "             the key blocks that visited a query block, and the cost model's FLOPs and counts, in both tiles\n";

/* The kernel's tiles (steps/14_backward/kernel.cu, mirrored here: keep them in step): BWD_BLOCK_M
 * query rows per step in both, warp tiles BWD_WARP_ROWS deep; the block's keys and warps are the
 * tile's (bwd_block_n and bwd_warps below, set by --block-keys: 128 and 8, or 64 and 4). */
enum { BWD_BLOCK_M = 64, BWD_WARP_ROWS = 2 * MMA_M, BWD_MIN_BLOCK_N = 64, MAX_STEPS = 1 << 20 };
/* the staged tile's rows: DQ_STAGE_PAD floats after each, so rows start 8 banks apart */
enum { DQ_STAGE_PAD = 8 };
static int bwd_block_n = 128, bwd_warps = 8, bwd_staged = 1;

static void set_tile(int block_n, int staged)
{
    bwd_block_n = block_n;
    bwd_staged = staged;
    bwd_warps = block_n == 128 ? 8 : 4;
}

typedef struct {
    int batch, heads, kv_heads, seqlen_q, seqlen_k, dim, causal;
} shape;

typedef struct {
    int kv_head, key_block, step, head, query_block, masked;
    long visible; /* visible (row, key) pairs of the 64 x BLOCK_N tile */
} step_t;

typedef struct {
    int group, shift, q_blocks, k_blocks, n_steps;
    step_t steps[MAX_STEPS];
} walk;

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

/* first_query_block of the kernel: the first query block whose rows see key n0. */
static int first_query_block(int n0, int shift, int causal) { return causal ? max_int(0, n0 - shift) / BWD_BLOCK_M : 0; }

static int is_visible(const shape *s, int shift, int row, int key)
{
    return row < s->seqlen_q && key < s->seqlen_k && (!s->causal || key <= row + shift);
}

/* Visible pairs of the tile (query block qb, key block nb), counted row by row. */
static long visible_pairs(const shape *s, int shift, int qb, int nb)
{
    long n = 0;
    int n0 = nb * bwd_block_n;
    for (int row = qb * BWD_BLOCK_M; row < min_int((qb + 1) * BWD_BLOCK_M, s->seqlen_q); row++) {
        int last = min_int(n0 + bwd_block_n, s->seqlen_k) - 1; /* the tile's last key in seqlen_k */
        if (s->causal) last = min_int(last, row + shift);
        n += last >= n0 ? last - n0 + 1 : 0;
    }
    return n;
}

/* fa2_bwd_kernel's walk, block by block, for the kv heads of batch 0 (every batch walks alike). */
static void build(walk *w, const shape *s)
{
    w->group = s->heads / s->kv_heads, w->shift = s->seqlen_k - s->seqlen_q;
    w->q_blocks = (s->seqlen_q + BWD_BLOCK_M - 1) / BWD_BLOCK_M;
    w->k_blocks = (s->seqlen_k + bwd_block_n - 1) / bwd_block_n;
    w->n_steps = 0;
    for (int h_kv = 0; h_kv < s->kv_heads; h_kv++)
        for (int nb = 0; nb < w->k_blocks; nb++) {
            const int n0 = nb * bwd_block_n, first_qb = first_query_block(n0, w->shift, s->causal);
            const int per_head = max_int(0, w->q_blocks - first_qb), steps = w->group * per_head;
            for (int st = 0; st < steps; st++) {
                if (w->n_steps >= MAX_STEPS) cli_error("more than %d steps: a smaller shape", MAX_STEPS);
                step_t *x = &w->steps[w->n_steps++];
                const int m0 = (first_qb + st % per_head) * BWD_BLOCK_M;
                x->kv_head = h_kv, x->key_block = nb, x->step = st, x->head = h_kv * w->group + st / per_head;
                x->query_block = first_qb + st % per_head;
                x->masked = m0 + BWD_BLOCK_M > s->seqlen_q || n0 + bwd_block_n > s->seqlen_k ||
                            (s->causal && n0 + bwd_block_n - 1 > m0 + w->shift);
                x->visible = visible_pairs(s, w->shift, x->query_block, nb);
            }
        }
}

/* The step of kv head h's block nb that visits (query head, query block), or NULL. */
static const step_t *visit(const walk *w, int head, int qb, int nb)
{
    for (int i = 0; i < w->n_steps; i++) {
        const step_t *x = &w->steps[i];
        if (x->key_block == nb && x->head == head && x->query_block == qb) return x;
    }
    return NULL;
}

/* bwd_convert_kernel's sum for a row of query block qb: key blocks 0, 1, ... while their walk
 * started at or before qb (first_query_block grows with the key block). How many. */
static int convert_sources(const walk *w, const shape *s, int qb)
{
    int nb = 0;
    while (nb < w->k_blocks && first_query_block(nb * bwd_block_n, w->shift, s->causal) <= qb) nb++;
    return nb;
}

/* ---- what a step costs: the kernel's loops, per warp, at head dim d ---- */

typedef struct {
    int mma, ldsm, sts, red, ex2;
    /* staged dQ: 8-byte stores of the fragments, then, per lane, the reductions of whole rows
     * (and as many shared-memory loads) before sm_90 (one float) and on sm_90 (four) */
    int sts_dq, red_sm80, red_sm90;
} warp_cost;

/* One warp's step in fa2_bwd_kernel<T, d, tile>: queries_times_keys_t (S, dP), keys_times_queries
 * (dV, dK), the dQ loop and store_scores, their loops counted. */
static warp_cost cost_of(int d)
{
    warp_cost c;
    const int m_tiles = BWD_WARP_ROWS / MMA_M, sdp_n_tiles = BWD_WARP_ROWS / MMA_N; /* 2, 4 */
    const int kv_warps_n = bwd_block_n / BWD_WARP_ROWS, kv_warps_d = bwd_warps / kv_warps_n;
    const int q_warps_m = BWD_BLOCK_M / BWD_WARP_ROWS, q_warps_d = bwd_warps / q_warps_m;
    const int kv_cols = d / kv_warps_d, q_cols = d / q_warps_d, q_chunk = q_cols < 32 ? q_cols : 32;
    /* S = Q K^T, dP = dO V^T, each: d / 16 k-steps of m_tiles ldmatrix of Q (dO), one of K (V)
     * per two key n-tiles, m_tiles x sdp_n_tiles mma (32 queries x 32 keys) */
    const int sdp_mma = d / MMA_K * m_tiles * sdp_n_tiles, sdp_ldsm = d / MMA_K * (m_tiles + sdp_n_tiles / 2);
    /* dV += P^T dO, dK += dS^T Q, each: 64 / 16 k-steps (queries) of m_tiles ldmatrix.trans of P^T
     * (dS^T), one of dO (Q) per two d-tiles, m_tiles x kv_cols / 8 mma (32 keys x kv_cols) */
    const int kv_mma = BWD_BLOCK_M / MMA_K * m_tiles * (kv_cols / MMA_N);
    const int kv_ldsm = BWD_BLOCK_M / MMA_K * (m_tiles + kv_cols / (2 * MMA_N));
    /* dQ += dS K: q_cols / q_chunk chunks of block_n / 16 k-steps (keys), m_tiles ldmatrix of dS,
     * one .trans of K per two d-tiles, m_tiles x q_chunk / 8 mma (32 queries x q_chunk) */
    const int chunks = q_cols / q_chunk, ksteps_n = bwd_block_n / MMA_K;
    const int q_mma = chunks * ksteps_n * m_tiles * (q_chunk / MMA_N);
    const int q_ldsm = chunks * ksteps_n * (m_tiles + q_chunk / (2 * MMA_N));
    c.mma = 2 * sdp_mma + 2 * kv_mma + q_mma;
    c.ldsm = 2 * sdp_ldsm + 2 * kv_ldsm + q_ldsm;
    c.sts = 2 * m_tiles * sdp_n_tiles * 2;          /* store_scores of P and dS: rows g and g + 8 per fragment */
    c.red = m_tiles * (q_cols / MMA_N) * 4;         /* dQ: c0..c3 of every fragment, per lane */
    /* staged: rows g and g + 8 of every fragment, then the warp's BWD_WARP_ROWS / q_warps_d rows
     * of its query half, 32 (sm_80-89) or 128 (sm_90) floats per reduction instruction */
    const int read_rows = BWD_WARP_ROWS / q_warps_d;
    c.sts_dq = bwd_staged ? m_tiles * (q_cols / MMA_N) * 2 : 0;
    c.red_sm80 = bwd_staged ? read_rows * d / WARP_SIZE : 0;
    c.red_sm90 = bwd_staged ? read_rows * d / (4 * WARP_SIZE) : 0;
    if (bwd_staged) c.red = 0;
    c.ex2 = BWD_WARP_ROWS * BWD_WARP_ROWS / WARP_SIZE; /* P = exp2(...): the warp's 32 x 32, per lane */
    return c;
}

/* bwd_smem_bytes<tile, D, STAGES>: K, V [block_n][D], STAGES buffers of Q and dO [64][D], P and dS
 * [64][block_n], and the staged tile's fp32 [64][D + 8]; launch_bwd_tile double-buffers the wide
 * tile, not the narrow one. */
static int tile_stages(void) { return bwd_block_n == 128 ? 2 : 1; }
static long smem_bytes(int d, int stages)
{
    return (2L * bwd_block_n + 2L * stages * BWD_BLOCK_M) * d * ELEM_BYTES + 2L * BWD_BLOCK_M * bwd_block_n * ELEM_BYTES +
           (bwd_staged ? (long)BWD_BLOCK_M * (d + DQ_STAGE_PAD) * 4 : 0);
}

/* bwd_dq_splits(block_n): key blocks per launch under FA2_DETERMINISTIC=1, enough for about
 * DQ_SPLIT_BLOCKS = 256 blocks a launch, at most MAX_DQ_SPLITS = 16 and at most the key blocks of
 * block_n keys (the launch's, the tile's; the workspace's, BWD_MIN_BLOCK_N = 64). */
static int dq_splits(const shape *s, int block_n)
{
    const long pairs = (long)s->batch * s->kv_heads, want = (256 + pairs - 1) / pairs;
    const int k_blocks = (s->seqlen_k + block_n - 1) / block_n;
    return (int)(want < 16 ? (want < k_blocks ? want : k_blocks) : (16 < k_blocks ? 16 : k_blocks));
}

/* fa2_backward_workspace_size: (partials x D + 1) floats per query row: 1 partial with the
 * atomics, S = bwd_dq_splits(64) under FA2_DETERMINISTIC=1, whichever tile runs (a partial per
 * 64-key block, the mode before the splits, would be ceil(Nk / 64)). */
static double workspace_bytes(const shape *s, int partials)
{
    const double rows = (double)s->batch * s->heads * s->seqlen_q;
    return (partials * (double)s->dim + 1) * rows * 4;
}

/* ---- output ---- */

/* Bytes in MB below 1e9, else GB, 4 significant digits, into a static buffer of one of two slots. */
static const char *size_of(double bytes)
{
    static char buf[2][32];
    static int slot;
    slot ^= 1;
    if (bytes < 1e9) snprintf(buf[slot], sizeof buf[slot], "%.4g MB", bytes / 1e6);
    else snprintf(buf[slot], sizeof buf[slot], "%.4g GB", bytes / 1e9);
    return buf[slot];
}

typedef struct {
    const walk *w;
    int head;
} grid_ctx;

static void grid_cell_of(int qb, int nb, const void *ctx, grid_cell *cell)
{
    const grid_ctx *g = ctx;
    const step_t *x = visit(g->w, g->head, qb, nb);
    if (!x) {
        snprintf(cell->text, sizeof cell->text, ".");
        return;
    }
    snprintf(cell->text, sizeof cell->text, "%d%s", x->step, x->masked ? "*" : "");
    cell->colour = nb;
}

static void print_text(const shape *s, const walk *w)
{
    const warp_cost c = cost_of(s->dim);
    printf("step 14's backward at B%d Hq%d Hkv%d Nq%d Nk%d d%d%s", s->batch, s->heads, s->kv_heads, s->seqlen_q,
           s->seqlen_k, s->dim, s->causal ? " causal" : "");
    if (s->causal) printf(" (shift = Nk - Nq = %d: row i sees keys j <= i %c %d)", w->shift, w->shift < 0 ? '-' : '+',
                          w->shift < 0 ? -w->shift : w->shift);
    const int kv_warps_n = bwd_block_n / BWD_WARP_ROWS, q_warps_m = BWD_BLOCK_M / BWD_WARP_ROWS;
    printf("\nfa2_bwd_kernel, the %s (%s):\n  one block per (key block of %d keys, kv head, batch): grid %d x %d x %d "
           "= %ld blocks of %d warps;\n  each walks query blocks of %d rows for the %d query head(s) of its kv head\n",
           bwd_block_n == 128 ? (bwd_staged ? "wide tile with dQ staged" : "wide tile") : "narrow tile",
           bwd_block_n == 128 ? (bwd_staged ? "BwdWideStaged: H100, H200; the A100 at d64"
                                            : "BwdWide: the A100 at d128, the 99 KB GPUs at d64")
                              : "BwdNarrow: d128 where a block gets 99 KB",
           bwd_block_n, w->k_blocks, s->kv_heads, s->batch, (long)w->k_blocks * s->kv_heads * s->batch, bwd_warps,
           BWD_BLOCK_M, w->group);
    if (bwd_block_n == 64 && s->dim == 64)
        printf("  (at d64 the kernel runs the wide tile on every GPU: this is the narrow tile as it would run)\n");
    printf("  warps per product, each warp tile 32 rows deep: S, dP %d (queries) x %d (keys); dV, dK %d (keys) x %d (head "
           "dim);\n  dQ %d (queries) x %d (head dim)\n", q_warps_m, kv_warps_n, kv_warps_n, bwd_warps / kv_warps_n,
           q_warps_m, bwd_warps / q_warps_m);
    char staging[64] = "";
    if (bwd_staged) snprintf(staging, sizeof staging, ", dQ's fp32 staging tile [64][%d]", s->dim + DQ_STAGE_PAD);
    printf("  shared memory: K and V [%d][%d], Q and dO [64][%d] in %d buffer%s, P and dS [64][%d]%s: %ld KB\n\n",
           bwd_block_n, s->dim, s->dim, tile_stages(), tile_stages() > 1 ? "s" : "", bwd_block_n, staging,
           smem_bytes(s->dim, tile_stages()) / 1024);

    printf("the walks of kv head 0 (* = the masked body; step s = query block first_qb + s %% per_head of query head "
           "s / per_head):\n");
    printf("block | keys        | first_qb | steps (query head, query block)\n");
    for (int nb = 0; nb < w->k_blocks; nb++) {
        if (nb >= 5 && nb < w->k_blocks - 3) {
            if (nb == 5) printf("  ...\n");
            continue;
        }
        const int n0 = nb * bwd_block_n;
        printf("%5d | %5d-%-5d | %8d |", nb, n0, min_int(n0 + bwd_block_n, s->seqlen_k) - 1,
               first_query_block(n0, w->shift, s->causal));
        int shown = 0, count = 0;
        for (int i = 0; i < w->n_steps; i++) {
            const step_t *x = &w->steps[i];
            if (x->kv_head != 0 || x->key_block != nb) continue;
            count++;
            if (shown < 10) printf(" (%d,%d)%s", x->head, x->query_block, x->masked ? "*" : ""), shown++;
        }
        printf("%s%s\n", count > shown ? " ..." : "", count ? "" : " none: no query row sees these keys");
    }
    for (int h = 0; h < w->group && h < 4; h++) {
        printf("\nquery head %d: the step of block nb (column) that visits query block qb (row), * masked, . none\n", h);
        if (w->q_blocks > 40 || w->k_blocks > 24) {
            printf("  (omitted: more than 40 query blocks or 24 key blocks)\n");
            continue;
        }
        const grid_ctx ctx = {w, h};
        const grid_shape g = {"qb\\nb", w->q_blocks, w->k_blocks, 4, 0, 0};
        print_grid(&g, grid_cell_of, &ctx);
    }

    printf("\ndQ of query head 0: the key blocks that add into each query block (atomics); under\n"
           "FA2_DETERMINISTIC=1 key block nb adds into split nb %% %d, summed by bwd_convert_kernel in order (the\n"
           "workspace holds %d: the splits of 64-key blocks, for either tile)\n",
           dq_splits(s, bwd_block_n), dq_splits(s, BWD_MIN_BLOCK_N));
    for (int qb = 0; qb < w->q_blocks; qb++) {
        if (qb >= 6 && qb < w->q_blocks - 4) {
            if (qb == 6) printf("  ...\n");
            continue;
        }
        const int sources = convert_sources(w, s, qb);
        printf("  query block %3d (rows %5d-%-5d): ", qb, qb * BWD_BLOCK_M, min_int((qb + 1) * BWD_BLOCK_M, s->seqlen_q) - 1);
        if (sources == 0) printf("none: its rows see no key, dQ = 0\n");
        else if (sources == 1) printf("key block 0, one add to every element\n");
        else printf("key blocks 0-%d, %d adds to every element\n", sources - 1, sources);
    }

    long steps_all = 0, visible = 0, masked = 0;
    double dq_bytes = 0;
    for (int i = 0; i < w->n_steps; i++) {
        const step_t *x = &w->steps[i];
        steps_all++, visible += x->visible, masked += x->masked;
        dq_bytes += (double)min_int(BWD_BLOCK_M, s->seqlen_q - x->query_block * BWD_BLOCK_M) * s->dim * 4;
    }
    steps_all *= s->batch, visible *= s->batch, masked *= s->batch, dq_bytes *= s->batch;
    const double tile_flops = (double)steps_all * bwd_warps * c.mma * 2 * MMA_M * MMA_N * MMA_K;
    const double harness_flops = 2.5 * 4 * (double)visible * s->dim;
    printf("\none step, per warp (64 queries x %d keys on %d warps, d%d): %d mma.sync (five products of %d), %d "
           "ldmatrix.x4, %d 4-byte\n  stores of P and dS: %.2f shared-memory wavefronts per mma; %d ex2\n",
           bwd_block_n, bwd_warps, s->dim, c.mma, c.mma / 5, c.ldsm, c.sts, (4.0 * c.ldsm + c.sts) / c.mma, c.ex2);
    if (bwd_staged)
        printf("  dQ staged: %d 8-byte stores of the fragments, a named barrier of its query half's %d warps, then per "
               "lane %d\n  red.global.add.v4.f32 on sm_90 (128 floats, 4 lines each) or %d red.global.add.f32 before "
               "(32 floats, 1 line each)\n", c.sts_dq, bwd_warps / (BWD_BLOCK_M / BWD_WARP_ROWS), c.red_sm90, c.red_sm80);
    else
        printf("  dQ from the fragments: %d red.global.add.f32 per lane (one per %d mma), 8 rows and 8 lines each\n",
               c.red, c.mma / c.red);
    printf("one step, per block: reads Q_i and dO_i, %d KB, and LSE_i and D_i, 512 bytes; adds %d KB of fp32 into dQ; "
           "%.2f MFLOP\n", 2 * BWD_BLOCK_M * s->dim * ELEM_BYTES / 1024, BWD_BLOCK_M * s->dim * 4 / 1024,
           bwd_warps * c.mma * 2.0 * MMA_M * MMA_N * MMA_K / 1e6);
    printf("once per block: K_j and V_j in, dK_j and dV_j out, %d KB each way\n",
           2 * bwd_block_n * s->dim * ELEM_BYTES / 1024);
    printf("\nthe shape: %ld steps (%ld with the masked body); they compute %.4g pairs, %.4g visible (%.1f%%)\n",
           steps_all, masked, (double)steps_all * BWD_BLOCK_M * bwd_block_n, (double)visible,
           100.0 * visible / ((double)steps_all * BWD_BLOCK_M * bwd_block_n + (steps_all == 0)));
    printf("  FLOPs: %.4g on the tensor cores; the harness counts 2.5 forwards = %.4g\n", tile_flops, harness_flops);
    printf("  dQ: %s of fp32 added by atomics (into one sum, or S splits), for a dQ of %s in the dtype\n",
           size_of(dq_bytes), size_of((double)s->batch * s->heads * s->seqlen_q * s->dim * ELEM_BYTES));
    const int ws_splits = dq_splits(s, BWD_MIN_BLOCK_N), k_blocks_64 = (s->seqlen_k + BWD_MIN_BLOCK_N - 1) / BWD_MIN_BLOCK_N;
    printf("  workspace (fa2_backward_workspace_size): %s; with FA2_DETERMINISTIC=1, S = %d splits: %s",
           size_of(workspace_bytes(s, 1)), ws_splits, size_of(workspace_bytes(s, ws_splits)));
    printf(" (a partial per 64-key block: %d, %s)\n", k_blocks_64, size_of(workspace_bytes(s, k_blocks_64)));
}

static void print_csv(const shape *s, const walk *w)
{
    printf("kind,kv_head,key_block,step,head,query_block,row0,rows,key0,keys,masked,visible,order,seqlen_q,seqlen_k,"
           "group,causal,block_m,block_n\n");
    char meta[96];
    snprintf(meta, sizeof meta, "%d,%d,%d,%d,%d,%d", s->seqlen_q, s->seqlen_k, w->group, s->causal, BWD_BLOCK_M,
             bwd_block_n);
    for (int i = 0; i < w->n_steps; i++) {
        const step_t *x = &w->steps[i];
        const int row0 = x->query_block * BWD_BLOCK_M, key0 = x->key_block * bwd_block_n;
        printf("step,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%ld,-1,%s\n", x->kv_head, x->key_block, x->step, x->head,
               x->query_block, row0, min_int(BWD_BLOCK_M, s->seqlen_q - row0), key0,
               min_int(bwd_block_n, s->seqlen_k - key0), x->masked, x->visible, meta);
    }
    for (int h = 0; h < s->heads; h++)
        for (int qb = 0; qb < w->q_blocks; qb++) {
            const int row0 = qb * BWD_BLOCK_M, rows = min_int(BWD_BLOCK_M, s->seqlen_q - row0);
            const int sources = convert_sources(w, s, qb);
            if (sources == 0) printf("dq,%d,-1,-1,%d,%d,%d,%d,-1,-1,-1,0,-1,%s\n", h / w->group, h, qb, row0, rows, meta);
            for (int nb = 0; nb < sources; nb++) {
                const step_t *x = visit(w, h, qb, nb);
                printf("dq,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%ld,%d,%s\n", h / w->group, nb, x ? x->step : -1, h, qb, row0,
                       rows, nb * bwd_block_n, min_int(bwd_block_n, s->seqlen_k - nb * bwd_block_n), x ? x->masked : -1,
                       visible_pairs(s, w->shift, qb, nb), nb, meta);
            }
        }
}

/* ---- --check ---- */

static void check_shape(const shape *s)
{
    static walk w;
    build(&w, s);
    char tag[128], name[400];
    snprintf(tag, sizeof tag, "%d-key blocks, B%d Hq%d Hkv%d Nq%d Nk%d d%d%s", bwd_block_n, s->batch, s->heads,
             s->kv_heads, s->seqlen_q, s->seqlen_k, s->dim, s->causal ? " causal" : "");
    /* each tile pair with a visible pair: one visit; without: none (so no step is spent on hidden pairs only) */
    int once = 1, mask_exact = 1, convert_exact = 1, distinct = 1, counted = 1;
    long tiles_visible = 0;
    for (int h = 0; h < s->heads; h++)
        for (int qb = 0; qb < w.q_blocks; qb++)
            for (int nb = 0; nb < w.k_blocks; nb++) {
                int visits = 0;
                for (int i = 0; i < w.n_steps; i++) {
                    const step_t *x = &w.steps[i];
                    visits += x->key_block == nb && x->head == h && x->query_block == qb;
                }
                const long vis = visible_pairs(s, w.shift, qb, nb);
                long brute = 0; /* the same count, pair by pair */
                for (int row = qb * BWD_BLOCK_M; row < (qb + 1) * BWD_BLOCK_M; row++)
                    for (int key = nb * bwd_block_n; key < (nb + 1) * bwd_block_n; key++) brute += is_visible(s, w.shift, row, key);
                counted &= brute == vis;
                tiles_visible += vis > 0;
                once &= visits == (vis > 0);
            }
    for (int i = 0; i < w.n_steps; i++) {
        const step_t *x = &w.steps[i];
        mask_exact &= x->masked == (x->visible < (long)BWD_BLOCK_M * bwd_block_n);
        for (int j = i + 1; j < w.n_steps && w.steps[j].key_block == x->key_block && w.steps[j].kv_head == x->kv_head; j++)
            distinct &= !(w.steps[j].head == x->head && w.steps[j].query_block == x->query_block);
    }
    for (int h = 0; h < s->heads; h++)
        for (int qb = 0; qb < w.q_blocks; qb++) {
            const int sources = convert_sources(&w, s, qb);
            for (int nb = 0; nb < w.k_blocks; nb++) convert_exact &= (visit(&w, h, qb, nb) != NULL) == (nb < sources);
        }
    snprintf(name, sizeof name, "backward_blocks %s: the %d tile pairs with a visible pair are visited exactly once "
             "each, by the block of their key block, and no other pair is", tag, (int)tiles_visible);
    check(once, name, "a tile pair with a visible pair is missed or visited twice, or a hidden one visited");
    snprintf(name, sizeof name, "backward_blocks %s: each tile's visible pairs, row by row, are those of the pair by "
             "pair mask (row < Nq, key < Nk, causal: key <= row + Nk - Nq)", tag);
    check(counted, name, "the row-by-row count disagrees with the mask");
    snprintf(name, sizeof name, "backward_blocks %s: the masked body runs exactly on the steps with a hidden pair", tag);
    check(mask_exact, name, "a step without a hidden pair is masked, or one with a hidden pair is not");
    snprintf(name, sizeof name, "backward_blocks %s: each block visits a (query head, query block) once: under "
             "FA2_DETERMINISTIC=1 an element of a split gets one add per launch", tag);
    check(distinct, name, "a block visits a (query head, query block) twice");
    snprintf(name, sizeof name, "backward_blocks %s: bwd_convert_kernel's sum for each query block takes exactly the "
             "key blocks whose walk visited it", tag);
    check(convert_exact, name, "the convert kernel reads a partial no step wrote, or misses one");
}

static void run_checks(void)
{
    const shape shapes[] = {
        {1, 2, 1, 400, 300, 128, 1}, {1, 2, 1, 300, 400, 128, 1}, {1, 4, 1, 33, 150, 64, 1},
        {1, 8, 2, 1000, 77, 128, 1}, {1, 4, 4, 1, 300, 64, 1},    {1, 8, 2, 300, 1, 64, 1},
        {1, 4, 4, 200, 65, 128, 0},  {1, 8, 1, 127, 127, 64, 1},  {1, 4, 4, 64, 64, 128, 1},
        {1, 2, 2, 1024, 1024, 128, 1},
    };
    const shape seed = {2, 8, 8, 1024, 1024, 128, 0};
    static walk w;
    for (int block_n = 128; block_n >= 64; block_n -= 64) {
        set_tile(block_n, 0);
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) check_shape(&shapes[i]);
        /* the cost model: at the seed shape (every tile full) the tensor cores do exactly the 2.5 forwards */
        build(&w, &seed);
        const warp_cost c = cost_of(seed.dim);
        const double tile_flops = (double)w.n_steps * seed.batch * bwd_warps * c.mma * 2 * MMA_M * MMA_N * MMA_K;
        const double fwd_flops = 4.0 * seed.batch * seed.heads * seed.seqlen_q * seed.seqlen_k * seed.dim;
        char name[200];
        snprintf(name, sizeof name, "backward_blocks %d-key blocks, B2 H8 N1024 d128: the loops' mma.sync (5 x d / 2 per "
                 "warp per step, %d warps) do 2.5 x the forward's FLOPs", block_n, bwd_warps);
        check(tile_flops == 2.5 * fwd_flops, name, "%.6g against %.6g", tile_flops, 2.5 * fwd_flops);
    }
    /* the kernel's loops, per warp and step (the header of steps/14_backward/kernel.cu quotes the
     * wide tile's at d128): the narrow tile's warp tiles are the wide one's, its dQ twice as wide */
    static const struct {
        int block_n;
        const char *tile;
        int d128[4], d64[4];  /* mma.sync, ldmatrix.x4, stores of P and dS, red.global.add.f32 per lane */
    } loops[] = {{128, "the wide tile (64 x 128, 8 warps)", {320, 144, 32, 32}, {160, 88, 32, 16}},
                 {64, "the narrow tile (64 x 64, 4 warps)", {320, 144, 32, 64}, {160, 80, 32, 32}}};
    for (size_t i = 0; i < sizeof loops / sizeof *loops; i++) {
        set_tile(loops[i].block_n, 0);
        const warp_cost c128 = cost_of(128), c64 = cost_of(64);
        const int *x = loops[i].d128, *y = loops[i].d64;
        char name[300];
        snprintf(name, sizeof name,
                 "backward_blocks: per warp and step of %s, %d mma.sync, %d ldmatrix.x4, %d stores of P and dS, %d "
                 "red.global.add.f32 per lane at d128; %d, %d, %d, %d at d64 (the kernel's loops)",
                 loops[i].tile, x[0], x[1], x[2], x[3], y[0], y[1], y[2], y[3]);
        check(c128.mma == x[0] && c128.ldsm == x[1] && c128.sts == x[2] && c128.red == x[3] && c64.mma == y[0] &&
                  c64.ldsm == y[1] && c64.sts == y[2] && c64.red == y[3],
              name, "d128 %d, %d, %d, %d; d64 %d, %d, %d, %d", c128.mma, c128.ldsm, c128.sts, c128.red, c64.mma,
              c64.ldsm, c64.sts, c64.red);
    }
    /* the staged tile (BwdWideStaged): its shared memory as bwd_smem_bytes (the kernel's static_assert
     * quotes 194 and 114 KB); its reductions add each element of the step's 64 x D once, in whole
     * lines; its fragment stores write each element once */
    set_tile(128, 1);
    for (int d = 64; d <= 128; d += 64) {
        const warp_cost c = cost_of(d);
        const long kb = smem_bytes(d, tile_stages()) / 1024, want_kb = d == 128 ? 194 : 114;
        char name[300];
        snprintf(name, sizeof name, "backward_blocks: the staged wide tile at d%d takes %ld KB (the kernel's %ld), its %d "
                 "stores of 2 floats and its reductions (%d of 128 floats on sm_90, %d of 32 before) cover the step's "
                 "64 x %d dQ once a warp-set", d, kb, want_kb, c.sts_dq, c.red_sm90, c.red_sm80, d);
        const long elems = (long)BWD_BLOCK_M * d;
        check(kb == want_kb && (long)c.sts_dq * 2 * WARP_SIZE * bwd_warps == elems &&
                  (long)c.red_sm90 * 4 * WARP_SIZE * bwd_warps == elems && (long)c.red_sm80 * WARP_SIZE * bwd_warps == elems &&
                  c.red == 0,
              name, "%ld KB, %d stores, %d and %d reductions", kb, c.sts_dq, c.red_sm90, c.red_sm80);
    }
}

int main(int argc, char **argv)
{
    shape s = {1, 2, 1, 400, 300, 128, 1};
    int csv = 0, block_n = 128, staged = -1;
    const cli_option opts[] = {
        {"--batch", &s.batch, 1, 65535, 1, NULL},
        {"--heads", &s.heads, 1, 256, 1, NULL},
        {"--kv-heads", &s.kv_heads, 1, 256, 1, NULL},
        {"--seqlen-q", &s.seqlen_q, 1, 65536, 1, NULL},
        {"--seqlen-k", &s.seqlen_k, 1, 65536, 1, NULL},
        {"--dim", &s.dim, 64, 128, 64, NULL},
        {"--block-keys", &block_n, 64, 128, 64, NULL},
        {"--staged", &staged, 0, 1, 1, NULL},
        {"--causal", &s.causal, 0, 1, 1, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, sizeof opts / sizeof *opts, run_checks);
    if (staged == 1 && block_n == 64) cli_error("--staged 1 with --block-keys 64: the narrow tile never stages dQ (allowed: --staged 0)");
    set_tile(block_n, staged < 0 ? block_n == 128 : staged);
    if (s.heads % s.kv_heads) cli_error("--heads %d is not a multiple of --kv-heads %d", s.heads, s.kv_heads);
    const long q_blocks = (s.seqlen_q + BWD_BLOCK_M - 1) / BWD_BLOCK_M, k_blocks = (s.seqlen_k + bwd_block_n - 1) / bwd_block_n;
    if (q_blocks * k_blocks * s.heads > MAX_STEPS)
        cli_error("%ld tile pairs of batch 0 is more than this program holds (%d)", q_blocks * k_blocks * s.heads, MAX_STEPS);
    static walk w;
    build(&w, &s);
    if (csv) print_csv(&s, &w);
    else print_text(&s, &w);
    return 0;
}
