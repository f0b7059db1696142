/* backward_blocks - which (key block, query block) tile pairs each block of step 14's main
 * backward kernel visits, in which order, and where each row of dQ gets its contributions
 * from, with the tiles and formulas of steps/14_backward/kernel.cu:
 *  - fa2_bwd_kernel: one block per (key block of BLOCK_N keys, kv head, batch), grid
 *    (ceil(Nk / BLOCK_N), heads_kv, batch), in one of three tiles (launch_bwd_tile): BwdWide, 64
 *    queries x 128 keys on 8 warps, wherever a block may have its 160 KB at d128 (A100, H100, H200)
 *    and always at d64 (96 KB); else BwdNarrow, 64 x 64 on 4 warps (80 KB at d128, the 99 KB
 *    GPUs). --block-keys picks which. Where a block has 34 KB (d128) or 18 KB (d64) more, the wide
 *    tile stages dQ (BwdWideStaged: H100 and H200 at d128, the A100 at d64; --staged 0 shows the
 *    wide tile without it). At d64, where a block may have 196 KB (H100, H200), BwdTallStaged:
 *    128 queries x 128 keys on 8 warps, dQ staged (--block-queries 128; the kernel instantiates it
 *    at d64 only, this program shows it at d128 too). Each product of a step has its own tiling of
 *    the warps, every warp tile 32 rows deep (BwdTile): S and dP BLOCK_M / 32 (queries) x the rest
 *    (keys), dK and dV BLOCK_N / 32 (keys) x the rest (head dim), dQ BLOCK_M / 32 (queries) x the
 *    rest (head dim): 2 x 4, 4 x 2, 2 x 4 in the wide tile, 2 x 2 for all in the narrow one,
 *    4 x 2 for all in the tall one (its warp tiles of S and dP 32 queries x 64 keys);
 *  - its walk: query blocks of BLOCK_M = 64 rows (128: --block-queries) from first_query_block(n0)
 *    = (causal ? max(0, n0 - shift) / BLOCK_M : 0), shift = Nk - Nq (bottom-right causal: row i
 *    sees keys j <= i + shift), to the last, per_head of them, for each query head of the kv
 *    head's GQA group in turn: step s is query block first_qb + s % per_head of query head
 *    h_kv group + s / per_head;
 *  - a step runs the masked body when m0 + BLOCK_M > Nq, n0 + BLOCK_N > Nk or (causal)
 *    n0 + BLOCK_N - 1 > m0 + shift;
 *  - dQ: each step adds dS K_j into the rows of its query block: straight from the C fragments
 *    (red.global.add.f32 of 2 floats of each of 8 rows: 8 lines per instruction), or, staged,
 *    through a [BLOCK_M][D + 8] fp32 tile, each query slice of 32 rows (2 in the wide tile, 4 in
 *    the tall one) at its own named barrier, read back a whole row at a time (red.global.add.f32
 *    of 32 consecutive floats before sm_90, one line; red.global.add.v4.f32 of 128 on sm_90). With
 *    FA2_DETERMINISTIC=1 the kernel runs over S key blocks per launch (S = bwd_dq_splits(BLOCK_N):
 *    about 256 blocks a launch, at most 16, at most the key blocks), key block nb adding into split
 *    nb % S with the same atomics, and bwd_convert_kernel sums, for a row of query block i, the
 *    splits in order while first_query_block(BLOCK_N split) <= i (block_m the tile's). Where S = the
 *    key blocks (at most 16 of them and a small batch x kv heads, as the default shape), each key block
 *    has a split of its own. The workspace holds the splits of 64-key blocks (BWD_MIN_BLOCK_N), for any
 *    tile.
 * Then what a step costs at --dim, counted from the kernel's loops (mma.sync m16n8k16, ldmatrix.x4,
 * the 4-byte stores of P and dS and the dQ atomics per warp; a model: 4 wavefronts per conflict-free
 * ldmatrix.x4, 1 per conflict-free 4-byte store), the bytes it reads and adds, and the shape's totals: steps,
 * FLOPs against the 2.5 forwards the harness counts, dQ's traffic, the workspace in both modes.
 * --format csv writes the walk and dQ's sources for the figure (figures/backward_blocks.py). */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: backward_blocks [--batch B] [--heads H] [--kv-heads K] [--seqlen-q N] [--seqlen-k N] [--dim 64|128]\n"
    "                       [--block-keys 64|128] [--block-queries 64|128] [--staged 0|1] [--causal 0|1]\n"
    "                       [--format text|csv] [--check]\n"
    "Step 14's backward: the blocks of its main kernel (one per key block and kv head), the\n"
    "query blocks of 64 (or 128) rows each one walks, for every query head of its GQA group, which steps\n"
    "run the masked body, which key blocks add into each query block of dQ (under FA2_DETERMINISTIC=1,\n"
    "into which of the S splits bwd_convert_kernel sums in order), and what a step and the whole shape\n"
    "cost.\n"
    "  --batch, --heads, --kv-heads, --seqlen-q, --seqlen-k, --dim   the shape (default B1 Hq2 Hkv1 Nq400\n"
    "                Nk300 d128: a GQA group of two, rows that see no key, tails on both sides)\n"
    "  --block-keys   the kernel's tile: 128 (default), BwdWide, 64 queries x 128 keys on 8 warps (A100, H100,\n"
    "             H200 at d128; every GPU at d64); 64, BwdNarrow, 64 x 64 on 4 warps (d128 where a block gets 99 KB)\n"
    "  --block-queries  64 (default): the query rows of a step in the tiles above; 128 (with\n"
    "             --block-keys 128 and --staged 1), BwdTallStaged, 128 x 128 on 8 warps, 4 (queries)\n"
    "             x 2 for every product, dQ staged in four query quarters (H100, H200 at d64; the\n"
    "             kernel has it at d64 only)\n"
    "  --staged   1 (the default with 128 keys): dQ staged through shared memory, BwdWideStaged\n"
    "             (H100, H200 at d128; the A100 at d64); 0: the fragments' atomics (the narrow tile\n"
    "             always; the wide one elsewhere)\n"
    "  --causal   1 (default): bottom-right causal mask, as the kernel; 0: none\n"
    "  --format csv: one line per step of a block of batch 0 (kind = step) and per (query head, query block,\n"
    "             key block that adds into it) (kind = dq; key_block -1 where none does), for the figures\n"
    "  --check    assert every tile pair with a visible (row, key) pair is visited exactly once and no other,\n"
    "             the masked body runs exactly where a pair is hidden, the convert kernel's sum takes exactly\n"
    "             the key blocks that visited a query block, and the cost model's FLOPs and counts, in all\n"
    "             tiles\n";

/* The kernel's tiles (steps/14_backward/kernel.cu, mirrored here: keep them in step): BwdTile<WARPS,
 * BLOCK_N, BLOCK_M>, warp tiles BWD_WARP_ROWS deep; the block's query rows, keys and warps are the
 * tile's (bwd_block_m, bwd_block_n and bwd_warps below, set by --block-queries and --block-keys: 64,
 * 128 and 8 (BwdWide), 64, 64 and 4 (BwdNarrow), or 128, 128 and 8 (BwdTallStaged, always staged)). */
enum { BWD_WARP_ROWS = 2 * MMA_M, BWD_MIN_BLOCK_N = 64, MAX_STEPS = 1 << 20 };
/* the staged tile's rows: DQ_STAGE_PAD floats after each, so rows start 8 banks apart */
enum { DQ_STAGE_PAD = 8 };
static int bwd_block_m = 64, bwd_block_n = 128, bwd_warps = 8, bwd_staged = 1;

static void set_tile(int block_n, int staged, int block_m)
{
    bwd_block_m = block_m;
    bwd_block_n = block_n;
    bwd_staged = staged;
    bwd_warps = block_n == 128 ? 8 : 4;
}

/* BwdTile's warp splits: S and dP SDP_WARPS_M (queries) x SDP_WARPS_N (keys), dQ Q_WARPS_M (queries)
 * x Q_WARPS_D (head dim), Q_WARPS_M = SDP_WARPS_M = BLOCK_M / 32: 2 in the 64-query tiles, 4 (the
 * kernel's static_assert on BwdTallStaged) in the 128-query one, where S and dP then split the keys
 * only 2 ways, warp tiles of 32 queries x 64 keys. */
static int q_warps_m(void) { return bwd_block_m / BWD_WARP_ROWS; }
static int sdp_warp_n(void) { return bwd_block_n / (bwd_warps / q_warps_m()); }

typedef struct {
    int batch, heads, kv_heads, seqlen_q, seqlen_k, dim, causal;
} shape;

typedef struct {
    int kv_head, key_block, step, head, query_block, masked;
    long visible; /* visible (row, key) pairs of the BLOCK_M x BLOCK_N tile */
} step_t;

typedef struct {
    int group, shift, q_blocks, k_blocks, n_steps;
    step_t steps[MAX_STEPS];
} walk;

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

/* first_query_block of the kernel (block_m the tile's): the first query block whose rows see key n0. */
static int first_query_block(int n0, int shift, int causal)
{
    return causal ? max_int(0, n0 - shift) / bwd_block_m : 0;
}

static int is_visible(const shape *s, int shift, int row, int key)
{
    return row < s->seqlen_q && key < s->seqlen_k && (!s->causal || key <= row + shift);
}

/* Visible pairs of the tile (query block qb, key block nb), counted row by row. */
static long visible_pairs(const shape *s, int shift, int qb, int nb)
{
    long n = 0;
    int n0 = nb * bwd_block_n;
    for (int row = qb * bwd_block_m; row < min_int((qb + 1) * bwd_block_m, s->seqlen_q); row++) {
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
    w->q_blocks = (s->seqlen_q + bwd_block_m - 1) / bwd_block_m;
    w->k_blocks = (s->seqlen_k + bwd_block_n - 1) / bwd_block_n;
    w->n_steps = 0;
    for (int h_kv = 0; h_kv < s->kv_heads; h_kv++)
        for (int nb = 0; nb < w->k_blocks; nb++) {
            const int n0 = nb * bwd_block_n, first_qb = first_query_block(n0, w->shift, s->causal);
            const int per_head = max_int(0, w->q_blocks - first_qb), steps = w->group * per_head;
            for (int st = 0; st < steps; st++) {
                if (w->n_steps >= MAX_STEPS) cli_error("more than %d steps: a smaller shape", MAX_STEPS);
                step_t *x = &w->steps[w->n_steps++];
                const int m0 = (first_qb + st % per_head) * bwd_block_m;
                x->kv_head = h_kv, x->key_block = nb, x->step = st, x->head = h_kv * w->group + st / per_head;
                x->query_block = first_qb + st % per_head;
                x->masked = m0 + bwd_block_m > s->seqlen_q || n0 + bwd_block_n > s->seqlen_k ||
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
    /* 2 m-tiles; key n-tiles of S and dP: 4 (32 keys) in the 64-query tiles, 8 (64) in the tall one */
    const int m_tiles = BWD_WARP_ROWS / MMA_M, sdp_n_tiles = sdp_warp_n() / MMA_N;
    const int kv_warps_n = bwd_block_n / BWD_WARP_ROWS, kv_warps_d = bwd_warps / kv_warps_n;
    const int q_warps_d = bwd_warps / q_warps_m();
    const int kv_cols = d / kv_warps_d, q_cols = d / q_warps_d, q_chunk = q_cols < 32 ? q_cols : 32;
    /* S = Q K^T, dP = dO V^T, each: d / 16 k-steps of m_tiles ldmatrix of Q (dO), one of K (V)
     * per two key n-tiles, m_tiles x sdp_n_tiles mma (32 queries x SDP_WARP_N keys) */
    const int sdp_mma = d / MMA_K * m_tiles * sdp_n_tiles, sdp_ldsm = d / MMA_K * (m_tiles + sdp_n_tiles / 2);
    /* dV += P^T dO, dK += dS^T Q, each: BLOCK_M / 16 k-steps (queries) of m_tiles ldmatrix.trans of P^T
     * (dS^T), one of dO (Q) per two d-tiles, m_tiles x kv_cols / 8 mma (32 keys x kv_cols) */
    const int kv_mma = bwd_block_m / MMA_K * m_tiles * (kv_cols / MMA_N);
    const int kv_ldsm = bwd_block_m / MMA_K * (m_tiles + kv_cols / (2 * MMA_N));
    /* dQ += dS K: q_cols / q_chunk chunks of block_n / 16 k-steps (keys), m_tiles ldmatrix of dS,
     * one .trans of K per two d-tiles, m_tiles x q_chunk / 8 mma (32 queries x q_chunk) */
    const int chunks = q_cols / q_chunk, ksteps_n = bwd_block_n / MMA_K;
    const int q_mma = chunks * ksteps_n * m_tiles * (q_chunk / MMA_N);
    const int q_ldsm = chunks * ksteps_n * (m_tiles + q_chunk / (2 * MMA_N));
    c.mma = 2 * sdp_mma + 2 * kv_mma + q_mma;
    c.ldsm = 2 * sdp_ldsm + 2 * kv_ldsm + q_ldsm;
    c.sts = 2 * m_tiles * sdp_n_tiles * 2;          /* store_scores of P and dS: rows g and g + 8 per fragment */
    c.red = m_tiles * (q_cols / MMA_N) * 4;         /* dQ: c0..c3 of every fragment, per lane */
    /* staged: rows g and g + 8 of every fragment, then the warp's DQ_READ_ROWS = BWD_WARP_ROWS /
     * q_warps_d rows of its query slice (a half, or a quarter in the tall tile), 32 (sm_80-89) or 128
     * (sm_90) floats per reduction instruction */
    const int read_rows = BWD_WARP_ROWS / q_warps_d;
    c.sts_dq = bwd_staged ? m_tiles * (q_cols / MMA_N) * 2 : 0;
    c.red_sm80 = bwd_staged ? read_rows * d / WARP_SIZE : 0;
    c.red_sm90 = bwd_staged ? read_rows * d / (4 * WARP_SIZE) : 0;
    if (bwd_staged) c.red = 0;
    c.ex2 = BWD_WARP_ROWS * sdp_warp_n() / WARP_SIZE; /* P = exp2(...): the warp's 32 x SDP_WARP_N */
    return c;
}

/* bwd_smem_bytes<tile, D, STAGES>: K, V [block_n][D], STAGES buffers of Q and dO [block_m][D], P and
 * dS [block_m][block_n], and the staged tile's fp32 [block_m][D + 8]; launch_bwd_tile double-buffers
 * the wide and tall tiles, not the narrow one. */
static int tile_stages(void) { return bwd_block_n == 128 ? 2 : 1; }
static long smem_bytes(int d, int stages)
{
    return (2L * bwd_block_n + 2L * stages * bwd_block_m) * d * ELEM_BYTES +
           2L * bwd_block_m * bwd_block_n * ELEM_BYTES +
           (bwd_staged ? (long)bwd_block_m * (d + DQ_STAGE_PAD) * 4 : 0);
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
    const int kv_warps_n = bwd_block_n / BWD_WARP_ROWS, q_warps = q_warps_m();
    const char *tile = bwd_block_m == 128 ? "tall tile with dQ staged"
                       : bwd_block_n == 128 ? (bwd_staged ? "wide tile with dQ staged" : "wide tile")
                                            : "narrow tile";
    const char *where = bwd_block_m == 128   ? "BwdTallStaged: H100, H200 at d64"
                        : bwd_block_n == 64  ? "BwdNarrow: d128 where a block gets 99 KB"
                        : bwd_staged         ? "BwdWideStaged: H100, H200 at d128; the A100 at d64"
                                             : "BwdWide: the A100 at d128, the 99 KB GPUs at d64";
    printf("\nfa2_bwd_kernel, the %s (%s):\n  one block per (key block of %d keys, kv head, batch): grid %d x %d x %d "
           "= %ld blocks of %d warps;\n  each walks query blocks of %d rows for the %d query head(s) of its kv head\n",
           tile, where, bwd_block_n, w->k_blocks, s->kv_heads, s->batch,
           (long)w->k_blocks * s->kv_heads * s->batch, bwd_warps, bwd_block_m, w->group);
    if (bwd_block_n == 64 && s->dim == 64)
        printf("  (at d64 the kernel runs the wide tile on every GPU: this is the narrow tile as it would run)\n");
    if (bwd_block_m == 128 && s->dim == 128)
        printf("  (the kernel instantiates the tall tile at d64 only, as no GPU gives a block its %ld KB at "
               "d128:\n  this is the tall tile as it would run)\n", smem_bytes(s->dim, tile_stages()) / 1024);
    if (bwd_block_m == 64 && bwd_block_n == 128 && bwd_staged && s->dim == 64)
        printf("  (at d64 H100 and H200 run the tall tile, --block-queries 128: this is the A100's)\n");
    printf("  warps per product, each warp tile 32 rows deep: S, dP %d (queries) x %d (keys), %d x %d "
           "each; dV, dK %d (keys) x %d (head dim);\n  dQ %d (queries) x %d (head dim)\n", q_warps,
           bwd_warps / q_warps, BWD_WARP_ROWS, sdp_warp_n(), kv_warps_n, bwd_warps / kv_warps_n, q_warps,
           bwd_warps / q_warps);
    char staging[64] = "";
    if (bwd_staged)
        snprintf(staging, sizeof staging, ", dQ's fp32 staging tile [%d][%d]", bwd_block_m,
                 s->dim + DQ_STAGE_PAD);
    printf("  shared memory: K and V [%d][%d], Q and dO [%d][%d] in %d buffer%s, P and dS [%d][%d]%s: "
           "%ld KB\n\n", bwd_block_n, s->dim, bwd_block_m, s->dim, tile_stages(),
           tile_stages() > 1 ? "s" : "", bwd_block_m, bwd_block_n, staging,
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
           "workspace holds %d: the splits of 64-key blocks, for any tile)\n",
           dq_splits(s, bwd_block_n), dq_splits(s, BWD_MIN_BLOCK_N));
    for (int qb = 0; qb < w->q_blocks; qb++) {
        if (qb >= 6 && qb < w->q_blocks - 4) {
            if (qb == 6) printf("  ...\n");
            continue;
        }
        const int sources = convert_sources(w, s, qb);
        printf("  query block %3d (rows %5d-%-5d): ", qb, qb * bwd_block_m,
               min_int((qb + 1) * bwd_block_m, s->seqlen_q) - 1);
        if (sources == 0) printf("none: its rows see no key, dQ = 0\n");
        else if (sources == 1) printf("key block 0, one add to every element\n");
        else printf("key blocks 0-%d, %d adds to every element\n", sources - 1, sources);
    }

    long steps_all = 0, visible = 0, masked = 0;
    double dq_bytes = 0;
    for (int i = 0; i < w->n_steps; i++) {
        const step_t *x = &w->steps[i];
        steps_all++, visible += x->visible, masked += x->masked;
        dq_bytes += (double)min_int(bwd_block_m, s->seqlen_q - x->query_block * bwd_block_m) * s->dim * 4;
    }
    steps_all *= s->batch, visible *= s->batch, masked *= s->batch, dq_bytes *= s->batch;
    const double tile_flops = (double)steps_all * bwd_warps * c.mma * 2 * MMA_M * MMA_N * MMA_K;
    const double harness_flops = 2.5 * 4 * (double)visible * s->dim;
    printf("\none step, per warp (%d queries x %d keys on %d warps, d%d): %d mma.sync (five products of "
           "%d), %d ldmatrix.x4, %d 4-byte\n  stores of P and dS: %.2f shared-memory wavefronts per mma; "
           "%d ex2\n",
           bwd_block_m, bwd_block_n, bwd_warps, s->dim, c.mma, c.mma / 5, c.ldsm, c.sts,
           (4.0 * c.ldsm + c.sts) / c.mma, c.ex2);
    if (bwd_staged)
        printf("  dQ staged: %d 8-byte stores of the fragments, a named barrier (1 to %d) of its query %s's "
               "%d warps, then per lane %d\n  red.global.add.v4.f32 on sm_90 (128 floats, 4 lines each) or "
               "%d red.global.add.f32 before (32 floats, 1 line each)\n", c.sts_dq, q_warps,
               q_warps == 4 ? "quarter" : "half", bwd_warps / q_warps, c.red_sm90, c.red_sm80);
    else
        printf("  dQ from the fragments: %d red.global.add.f32 per lane (one per %d mma), 8 rows and 8 lines each\n",
               c.red, c.mma / c.red);
    printf("one step, per block: reads Q_i and dO_i, %d KB, and LSE_i and D_i, %d bytes; adds %d KB of fp32 "
           "into dQ; %.2f MFLOP\n", 2 * bwd_block_m * s->dim * ELEM_BYTES / 1024, 2 * bwd_block_m * 4,
           bwd_block_m * s->dim * 4 / 1024,
           bwd_warps * c.mma * 2.0 * MMA_M * MMA_N * MMA_K / 1e6);
    printf("once per block: K_j and V_j in, dK_j and dV_j out, %d KB each way\n",
           2 * bwd_block_n * s->dim * ELEM_BYTES / 1024);
    printf("\nthe shape: %ld steps (%ld with the masked body); they compute %.4g pairs, %.4g visible (%.1f%%)\n",
           steps_all, masked, (double)steps_all * bwd_block_m * bwd_block_n, (double)visible,
           100.0 * visible / ((double)steps_all * bwd_block_m * bwd_block_n + (steps_all == 0)));
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
    snprintf(meta, sizeof meta, "%d,%d,%d,%d,%d,%d", s->seqlen_q, s->seqlen_k, w->group, s->causal,
             bwd_block_m, bwd_block_n);
    for (int i = 0; i < w->n_steps; i++) {
        const step_t *x = &w->steps[i];
        const int row0 = x->query_block * bwd_block_m, key0 = x->key_block * bwd_block_n;
        printf("step,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%ld,-1,%s\n", x->kv_head, x->key_block, x->step, x->head,
               x->query_block, row0, min_int(bwd_block_m, s->seqlen_q - row0), key0,
               min_int(bwd_block_n, s->seqlen_k - key0), x->masked, x->visible, meta);
    }
    for (int h = 0; h < s->heads; h++)
        for (int qb = 0; qb < w->q_blocks; qb++) {
            const int row0 = qb * bwd_block_m, rows = min_int(bwd_block_m, s->seqlen_q - row0);
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
    snprintf(tag, sizeof tag, "%d-query %d-key blocks, B%d Hq%d Hkv%d Nq%d Nk%d d%d%s", bwd_block_m,
             bwd_block_n, s->batch, s->heads, s->kv_heads, s->seqlen_q, s->seqlen_k, s->dim,
             s->causal ? " causal" : "");
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
                for (int row = qb * bwd_block_m; row < (qb + 1) * bwd_block_m; row++)
                    for (int key = nb * bwd_block_n; key < (nb + 1) * bwd_block_n; key++) brute += is_visible(s, w.shift, row, key);
                counted &= brute == vis;
                tiles_visible += vis > 0;
                once &= visits == (vis > 0);
            }
    for (int i = 0; i < w.n_steps; i++) {
        const step_t *x = &w.steps[i];
        mask_exact &= x->masked == (x->visible < (long)bwd_block_m * bwd_block_n);
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
    /* the walk and the masks in every tile (staging changes neither: the tall tile always stages) */
    static const struct {
        int block_n, staged, block_m;
    } tiles[] = {{128, 0, 64}, {64, 0, 64}, {128, 1, 128}};
    for (size_t t = 0; t < sizeof tiles / sizeof *tiles; t++) {
        set_tile(tiles[t].block_n, tiles[t].staged, tiles[t].block_m);
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) check_shape(&shapes[i]);
        /* the cost model: at the seed shape (every tile full) the tensor cores do exactly the 2.5 forwards */
        build(&w, &seed);
        const warp_cost c = cost_of(seed.dim);
        const double tile_flops = (double)w.n_steps * seed.batch * bwd_warps * c.mma * 2 * MMA_M * MMA_N * MMA_K;
        const double fwd_flops = 4.0 * seed.batch * seed.heads * seed.seqlen_q * seed.seqlen_k * seed.dim;
        char name[200];
        snprintf(name, sizeof name, "backward_blocks %d-query %d-key blocks, B2 H8 N1024 d128: the loops' "
                 "mma.sync (%d per warp per step, %d warps) do 2.5 x the forward's FLOPs", bwd_block_m,
                 bwd_block_n, c.mma, bwd_warps);
        check(tile_flops == 2.5 * fwd_flops, name, "%.6g against %.6g", tile_flops, 2.5 * fwd_flops);
    }
    /* the kernel's loops, per warp and step (the header of steps/14_backward/kernel.cu quotes the
     * wide tile's at d128 and the tall tile's 320 mma at d64, as at d128): the narrow tile's warp tiles
     * are the wide one's, its dQ twice as wide; the tall tile's S and dP warp tiles twice as wide (64
     * keys: 6 ldmatrix.x4 for 16 mma a k-step), its dV and dK k twice as long, its dQ as the narrow's */
    static const struct {
        int block_n, staged, block_m;
        const char *tile;
        /* mma.sync, ldmatrix.x4, stores of P and dS, dQ reductions per lane (red.global.add.f32: of the
         * fragments, or staged of whole rows before sm_90) */
        int d128[4], d64[4];
    } loops[] = {{128, 0, 64, "the wide tile (64 x 128, 8 warps)", {320, 144, 32, 32}, {160, 88, 32, 16}},
                 {64, 0, 64, "the narrow tile (64 x 64, 4 warps)", {320, 144, 32, 64}, {160, 80, 32, 32}},
                 {128, 1, 128, "the tall tile (128 x 128, 8 warps, staged)", {640, 256, 64, 64},
                  {320, 144, 64, 32}}};
    for (size_t i = 0; i < sizeof loops / sizeof *loops; i++) {
        set_tile(loops[i].block_n, loops[i].staged, loops[i].block_m);
        const warp_cost c128 = cost_of(128), c64 = cost_of(64);
        const int red128 = c128.red + c128.red_sm80, red64 = c64.red + c64.red_sm80;
        const int *x = loops[i].d128, *y = loops[i].d64;
        char name[300];
        snprintf(name, sizeof name,
                 "backward_blocks: per warp and step of %s, %d mma.sync, %d ldmatrix.x4, %d stores of P and dS, %d "
                 "red.global.add.f32 per lane at d128; %d, %d, %d, %d at d64 (the kernel's loops)",
                 loops[i].tile, x[0], x[1], x[2], x[3], y[0], y[1], y[2], y[3]);
        check(c128.mma == x[0] && c128.ldsm == x[1] && c128.sts == x[2] && red128 == x[3] &&
                  c64.mma == y[0] && c64.ldsm == y[1] && c64.sts == y[2] && red64 == y[3],
              name, "d128 %d, %d, %d, %d; d64 %d, %d, %d, %d", c128.mma, c128.ldsm, c128.sts, red128, c64.mma,
              c64.ldsm, c64.sts, red64);
    }
    /* the staged tiles (BwdWideStaged; BwdTallStaged, at d64 only): their shared memory as
     * bwd_smem_bytes (the kernel's static_asserts quote 194 and 114 KB, and 196 KB in four query
     * quarters, Q_WARPS_M == 4); their reductions add each element of the step's BLOCK_M x D once, in
     * whole lines; their fragment stores write each element once */
    static const struct {
        int block_m, d, want_kb;
    } staged_tiles[] = {{64, 64, 114}, {64, 128, 194}, {128, 64, 196}};
    for (size_t i = 0; i < sizeof staged_tiles / sizeof *staged_tiles; i++) {
        const int d = staged_tiles[i].d;
        set_tile(128, 1, staged_tiles[i].block_m);
        const warp_cost c = cost_of(d);
        const long kb = smem_bytes(d, tile_stages()) / 1024, want_kb = staged_tiles[i].want_kb;
        char name[300];
        snprintf(name, sizeof name, "backward_blocks: the staged %s tile at d%d takes %ld KB (the kernel's "
                 "%ld), its %d stores of 2 floats and its reductions (%d of 128 floats on sm_90, %d of 32 "
                 "before) cover the step's %d x %d dQ once a warp-set, in %d query slices",
                 bwd_block_m == 128 ? "tall" : "wide", d, kb, want_kb, c.sts_dq, c.red_sm90, c.red_sm80,
                 bwd_block_m, d, q_warps_m());
        const long elems = (long)bwd_block_m * d;
        check(kb == want_kb && (bwd_block_m != 128 || q_warps_m() == 4) &&
                  (long)c.sts_dq * 2 * WARP_SIZE * bwd_warps == elems &&
                  (long)c.red_sm90 * 4 * WARP_SIZE * bwd_warps == elems && (long)c.red_sm80 * WARP_SIZE * bwd_warps == elems &&
                  c.red == 0,
              name, "%ld KB, %d stores, %d and %d reductions", kb, c.sts_dq, c.red_sm90, c.red_sm80);
    }
}

int main(int argc, char **argv)
{
    shape s = {1, 2, 1, 400, 300, 128, 1};
    int csv = 0, block_n = 128, block_m = 64, staged = -1;
    const cli_option opts[] = {
        {"--batch", &s.batch, 1, 65535, 1, NULL},
        {"--heads", &s.heads, 1, 256, 1, NULL},
        {"--kv-heads", &s.kv_heads, 1, 256, 1, NULL},
        {"--seqlen-q", &s.seqlen_q, 1, 65536, 1, NULL},
        {"--seqlen-k", &s.seqlen_k, 1, 65536, 1, NULL},
        {"--dim", &s.dim, 64, 128, 64, NULL},
        {"--block-keys", &block_n, 64, 128, 64, NULL},
        {"--block-queries", &block_m, 64, 128, 64, NULL},
        {"--staged", &staged, 0, 1, 1, NULL},
        {"--causal", &s.causal, 0, 1, 1, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, sizeof opts / sizeof *opts, run_checks);
    if (staged == 1 && block_n == 64) cli_error("--staged 1 with --block-keys 64: the narrow tile never stages dQ (allowed: --staged 0)");
    /* BwdTallStaged is the kernel's only 128-query tile: 128 keys, dQ staged */
    if (block_m == 128 && (block_n != 128 || staged == 0))
        cli_error("--block-queries 128 with %s: the 128-query tile (BwdTallStaged) has 128 keys and stages "
                  "dQ (allowed: --block-queries 64, or 128 with --block-keys 128 --staged 1)",
                  block_n != 128 ? "--block-keys 64" : "--staged 0");
    set_tile(block_n, staged < 0 ? block_n == 128 : staged, block_m);
    if (s.heads % s.kv_heads) cli_error("--heads %d is not a multiple of --kv-heads %d", s.heads, s.kv_heads);
    const long q_blocks = (s.seqlen_q + bwd_block_m - 1) / bwd_block_m;
    const long k_blocks = (s.seqlen_k + bwd_block_n - 1) / bwd_block_n;
    if (q_blocks * k_blocks * s.heads > MAX_STEPS)
        cli_error("%ld tile pairs of batch 0 is more than this program holds (%d)", q_blocks * k_blocks * s.heads, MAX_STEPS);
    static walk w;
    build(&w, &s);
    if (csv) print_csv(&s, &w);
    else print_text(&s, &w);
    return 0;
}
