/* tiling - the FlashAttention-2 tiling of step 07: which warp owns which 16-row m-tile of a
 * block's query rows in each of its three tile configurations, how many keys a tile holds,
 * what that costs per warp and per thread, and the grid of blocks over query tiles, heads
 * and batch. --format csv writes the ownership for the figures (figures/tiling.py). --step 01
 * prints step 01's scalar work split instead (figures/scalar_tiles.py). --format residency
 * lists where each tile of the FA2 loop lives in step 05's kernel (figures/tile_residency.py). */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: tiling [--step 07|01] [--dim 64|128] [--batch B] [--heads H] [--seqlen N] [--format text|csv|residency] [--check]\n"
    "Prints step 07's three tile configurations, TileConfig<WARPS, M_TILES, BLOCK_N>: a block of\n"
    "WARPS warps covers WARPS x M_TILES x 16 query rows (128 in all three); warp w owns the 16-row\n"
    "m-tiles mt = 0..M_TILES-1 at rows w x M_TILES x 16 + 16 mt, and a key tile has BLOCK_N keys.\n"
    "For each: the owner of every 16 rows, the warp's S tile, the accumulators per thread, the\n"
    "shared memory at --dim and the ldmatrix wavefronts per HMMA of one key tile (a model:\n"
    "4 per conflict-free ldmatrix.x4). Then the grid: query tiles x heads x batch.\n"
    "  --dim     head dimension D (default 128)\n"
    "  --batch   batch, 1 to 65535 (default 2)\n"
    "  --heads   query heads, 1 to 65535 (default 8)\n"
    "  --seqlen  query rows, 1 to 1048576 (default 1024; the seed shape is B2 H8 N1024)\n"
    "  --format csv: one line per (configuration, warp, m-tile) for the figures (figures/):\n"
    "           config,warps,m_tiles,block_n,warp,m_tile,row0,rows; config is the number that\n"
    "           `fa2 --plan` prints; the other options do not change it\n"
    "  --step 01: step 01's scalar work split instead (steps/01_scalar/kernel.cu): a block of 128\n"
    "           threads, 32 query rows x 32 keys per tile; thread t owns row t / 4 and, from column t %% 4,\n"
    "           every 4th score of S and every 4th value of O; with --format csv one line per element\n"
    "           of S [32][32] and O [32][D]: tile,row,col,thread,warp,lane,lane_in_row,j (the thread's\n"
    "           j-th element of the row)\n"
    "  --format residency: where each tile of the FA2 loop lives in step 05's kernel (the tiles of\n"
    "           steps 02-06: 64 query rows, 64 keys, 4 warps, K and V in 2 stages), one line each:\n"
    "           object,space,rows,cols,elem_bytes,copies,bytes,regs_per_thread,moved\n"
    "           (no field holds a comma);\n"
    "           space is hbm (one head's tensor, N = --seqlen), smem (one block) or regs (one warp)\n"
    "  --check  assert every query row of a block is owned by exactly one warp and m-tile in each\n"
    "           configuration, that all three cover the same rows, that the grid computes every\n"
    "           query row once, and the kernel's static_asserts on the tiles; and step 01's split: every\n"
    "           element of S and O owned by one thread, the 4 threads of a row adjacent lanes of a warp\n";

/* The three configurations of steps/07_tuned/kernel.cu, mirrored here (keep them in step):
 * LargeGridConfig = TileConfig<4, 2, 64>, SmallGridConfig = TileConfig<8, 1, 128> and
 * SmallGridShortTileConfig = TileConfig<8, 1, 64>, in the order of its enum (LARGE_GRID = 0,
 * SMALL_GRID = 1, SMALL_GRID_SHORT_TILE = 2), which is the "configuration N" of fa2 --plan. */
typedef struct {
    const char *name;
    int warps, m_tiles, block_n;
    const char *when; /* choose_config's rule for it */
} tile_config;

static const tile_config configs[] = {
    {"LargeGridConfig", 4, 2, 64, "when the grid has more blocks than the GPU has SMs and two blocks fit on an SM"},
    {"SmallGridConfig", 8, 1, 128, "otherwise, where one block fits on an SM"},
    {"SmallGridShortTileConfig", 8, 1, 64, "where configuration 1 does not fit (d128 where a block gets 99 KB)"},
};
enum { CONFIGS = sizeof configs / sizeof *configs, KV_STAGES = 2, MAX_ROWS = 1024 };

/* The kernel's formulas: BLOCK_M = WARPS * M_TILES * MMA_M; a warp's first row
 * warp_row0 = warp * M_TILES * MMA_M; m-tile mt starts at warp_row0 + mt * MMA_M. */
static int block_m(const tile_config *c) { return c->warps * c->m_tiles * MMA_M; }
static int threads_of(const tile_config *c) { return c->warps * WARP_SIZE; }
static int warp_row0(const tile_config *c, int warp) { return warp * c->m_tiles * MMA_M; }
static int mtile_row0(const tile_config *c, int warp, int mt) { return warp_row0(c, warp) + mt * MMA_M; }

/* smem_bytes_of: Q (then O) [BLOCK_M][D], and KV_STAGES buffers each of K and V [BLOCK_N][D]. */
static int smem_bytes(const tile_config *c, int dim) { return (block_m(c) + 2 * KV_STAGES * c->block_n) * dim * ELEM_BYTES; }

/* One warp's ldmatrix.x4 and HMMA for one key tile: Q K^T takes D / 16 k-steps, each with
 * M_TILES x4 of Q, BLOCK_N / 16 x4 of K (two 8-key n-tiles each) and M_TILES x BLOCK_N / 8 HMMA;
 * P V takes BLOCK_N / 16 k-steps, each with D / 16 x4.trans of V (two 8-column d-tiles each)
 * and M_TILES x D / 8 HMMA. */
typedef struct {
    int q, k, v, hmma;
} tile_work;

static tile_work work_of(const tile_config *c, int dim)
{
    tile_work w;
    w.q = dim / MMA_K * c->m_tiles;
    w.k = dim / MMA_K * (c->block_n / 16);
    w.v = c->block_n / MMA_K * (dim / 16);
    w.hmma = dim / MMA_K * c->m_tiles * (c->block_n / MMA_N) + c->block_n / MMA_K * c->m_tiles * (dim / MMA_N);
    return w;
}

/* Owners of a block's rows: owner[row] = warp * M_TILES + mt, or -1; claims counts every claim. */
typedef struct {
    int rows, owner[MAX_ROWS], claims[MAX_ROWS], outside;
} row_owners;

static void owners_build(row_owners *o, const tile_config *c)
{
    o->rows = block_m(c), o->outside = 0;
    for (int r = 0; r < MAX_ROWS; r++) o->owner[r] = -1, o->claims[r] = 0;
    for (int warp = 0; warp < c->warps; warp++)
        for (int mt = 0; mt < c->m_tiles; mt++)
            for (int i = 0; i < MMA_M; i++) {
                int row = mtile_row0(c, warp, mt) + i;
                if (row < 0 || row >= o->rows) {
                    o->outside++;
                    continue;
                }
                o->owner[row] = warp * c->m_tiles + mt;
                o->claims[row]++;
            }
}

static void print_config(int index, int dim)
{
    const tile_config *c = &configs[index];
    row_owners o;
    owners_build(&o, c);
    printf("configuration %d: %s = TileConfig<%d, %d, %d>: %d threads, %d rows x %d keys\n", index,
           c->name, c->warps, c->m_tiles, c->block_n, threads_of(c), block_m(c), c->block_n);
    printf("  taken %s\n", c->when);
    printf("    rows |");
    for (int r = 0; r < o.rows; r += MMA_M) {
        char span[24];
        snprintf(span, sizeof span, "%d-%d", r, r + MMA_M - 1);
        put_cell(span, 8, NO_COLOUR);
    }
    printf("\n    warp |");
    for (int r = 0; r < o.rows; r += MMA_M) {
        char text[24];
        snprintf(text, sizeof text, "%d", o.owner[r] / c->m_tiles);
        put_cell(text, 8, o.owner[r] / c->m_tiles);
    }
    printf("\n  m-tile |");
    for (int r = 0; r < o.rows; r += MMA_M) {
        char text[24];
        snprintf(text, sizeof text, "%d", o.owner[r] % c->m_tiles);
        put_cell(text, 8, o.owner[r] / c->m_tiles);
    }
    tile_work w = work_of(c, dim);
    int s_acc = c->m_tiles * (c->block_n / MMA_N) * MMA_C_REGS, o_acc = c->m_tiles * (dim / MMA_N) * MMA_C_REGS;
    printf("\n  per warp: S is %d rows x %d keys; each K or V fragment it loads feeds %d mma\n",
           c->m_tiles * MMA_M, c->block_n, c->m_tiles);
    printf("  per thread: %d + %d fp32 accumulators (S, O) = %d\n", s_acc, o_acc, s_acc + o_acc);
    printf("  shared memory: (%d + 2 x %d x %d) rows x %d x 2 B = %d KB\n", block_m(c), KV_STAGES, c->block_n, dim,
           smem_bytes(c, dim) / 1024);
    printf("  per warp and key tile: ldmatrix.x4 Q %d + K %d + V %d = %d for %d HMMA: %.3f wavefronts per HMMA\n\n",
           w.q, w.k, w.v, w.q + w.k + w.v, w.hmma, 4.0 * (w.q + w.k + w.v) / w.hmma);
}

typedef struct {
    int dim, batch, heads, seqlen;
} shape;

static void print_grid_of(const shape *s)
{
    int rows = block_m(&configs[0]), tiles = (s->seqlen + rows - 1) / rows;
    long long blocks = (long long)tiles * s->heads * s->batch;
    printf("the grid at B%d H%d N%d (--batch, --heads, --seqlen), the same whichever configuration runs:\n",
           s->batch, s->heads, s->seqlen);
    printf("  x = query tile: %d of %d rows (block x: rows %d x .. %d x + %d", tiles, rows, rows, rows, rows - 1);
    if (s->seqlen % rows) printf("; the last tile has %d rows", s->seqlen % rows);
    printf(")\n  y = head: %d, z = batch: %d  ->  %d x %d x %d = %lld blocks\n", s->heads, s->batch, tiles, s->heads,
           s->batch, blocks);
    printf("  causal: block x takes query tile gridDim.x - 1 - x, so the tiles with the most keys start first\n");
    printf("the configuration a launch takes depends on the GPU: fa2 --plan prints it (no GPU with FA2_EMULATE)\n");
}

/* --format csv: one line per (configuration, warp, m-tile). */
static void print_csv(void)
{
    printf("config,warps,m_tiles,block_n,warp,m_tile,row0,rows\n");
    for (int i = 0; i < CONFIGS; i++) {
        const tile_config *c = &configs[i];
        for (int warp = 0; warp < c->warps; warp++)
            for (int mt = 0; mt < c->m_tiles; mt++)
                printf("%d,%d,%d,%d,%d,%d,%d,%d\n", i, c->warps, c->m_tiles, c->block_n, warp, mt,
                       mtile_row0(c, warp, mt), MMA_M);
    }
}

/* Every query row 0..seqlen-1 computed by exactly one (block, warp, m-tile), with the causal
 * order's tile permutation when causal; rows past seqlen fall only in the last block. */
static int grid_covers(const tile_config *c, int seqlen, int causal)
{
    static int claims[4096 + MAX_ROWS];
    int rows = block_m(c), tiles = (seqlen + rows - 1) / rows;
    memset(claims, 0, sizeof claims);
    for (int x = 0; x < tiles; x++) {
        int m_block = causal ? tiles - 1 - x : x, m0 = m_block * rows;
        for (int warp = 0; warp < c->warps; warp++)
            for (int mt = 0; mt < c->m_tiles; mt++)
                for (int i = 0; i < MMA_M; i++) {
                    int row = m0 + mtile_row0(c, warp, mt) + i;
                    if (row >= seqlen && m_block != tiles - 1) return 0;
                    claims[row]++;
                }
    }
    for (int row = 0; row < seqlen; row++)
        if (claims[row] != 1) return 0;
    return 1;
}

/* ---- step 01 (steps/01_scalar/kernel.cu): BLOCK_M = 32 rows, BLOCK_N = 32 keys, 128 threads,
 * THREADS_PER_ROW = 4; thread t: row = t / 4, lane_in_row = t % 4; it computes the scores
 * c = lane_in_row + 4 j of its row (j < BLOCK_N / 4) and holds o_acc[j] = O[row][lane_in_row + 4 j]
 * (j < D / 4). */
enum { S01_BLOCK_M = 32, S01_BLOCK_N = 32, S01_THREADS = 128, S01_PER_ROW = S01_THREADS / S01_BLOCK_M };

static int s01_row(int thread) { return thread / S01_PER_ROW; }
static int s01_lane_in_row(int thread) { return thread % S01_PER_ROW; }
static int s01_col(int thread, int j) { return s01_lane_in_row(thread) + S01_PER_ROW * j; }

static void print_step01(int dim)
{
    printf("step 01's work split (steps/01_scalar/kernel.cu): a block of %d threads (%d warps) per %d query rows;\n"
           "a key tile of %d keys; thread t owns row t / %d and, from column t %% %d, every %dth column of it:\n"
           "%d scores of S and %d values of O (D = %d), in registers; the %d threads of a row are adjacent lanes.\n\n",
           S01_THREADS, S01_THREADS / WARP_SIZE, S01_BLOCK_M, S01_BLOCK_N, S01_PER_ROW, S01_PER_ROW, S01_PER_ROW,
           S01_BLOCK_N / S01_PER_ROW, dim / S01_PER_ROW, dim, S01_PER_ROW);
    printf("S [%d rows][%d keys]: the thread computing each score (warp = thread / 32)\n", S01_BLOCK_M, S01_BLOCK_N);
    printf(" row |");
    for (int c = 0; c < S01_BLOCK_N; c++) printf("%4d", c);
    printf("\n-----+");
    for (int c = 0; c < S01_BLOCK_N; c++) printf("----");
    putchar('\n');
    for (int row = 0; row < S01_BLOCK_M; row++) {
        printf("%4d |", row);
        for (int c = 0; c < S01_BLOCK_N; c++) {
            char text[8];
            int thread = row * S01_PER_ROW + c % S01_PER_ROW;
            snprintf(text, sizeof text, "%d", thread);
            put_cell(text, 4, thread / WARP_SIZE);
        }
        putchar('\n');
    }
    printf("\nO [%d][%d]: thread 4 row + i holds columns i, i + 4, i + 8, ... (o_acc[j] = column i + 4 j)\n",
           S01_BLOCK_M, dim);
}

static void print_step01_csv(int dim)
{
    printf("tile,row,col,thread,warp,lane,lane_in_row,j\n");
    for (int pass = 0; pass < 2; pass++)
        for (int thread = 0; thread < S01_THREADS; thread++)
            for (int j = 0; j < (pass ? dim : S01_BLOCK_N) / S01_PER_ROW; j++)
                printf("%s,%d,%d,%d,%d,%d,%d,%d\n", pass ? "O" : "S", s01_row(thread), s01_col(thread, j), thread,
                       thread / WARP_SIZE, thread % WARP_SIZE, s01_lane_in_row(thread), j);
}

static void check_step01(void)
{
    static int s_claims[S01_BLOCK_M][S01_BLOCK_N], o_claims[S01_BLOCK_M][128];
    memset(s_claims, 0, sizeof s_claims);
    memset(o_claims, 0, sizeof o_claims);
    int inside = 1, adjacent = 1, once = 1;
    for (int thread = 0; thread < S01_THREADS; thread++) {
        for (int j = 0; j < S01_BLOCK_N / S01_PER_ROW; j++) {
            int r = s01_row(thread), c = s01_col(thread, j);
            inside &= r < S01_BLOCK_M && c < S01_BLOCK_N;
            if (inside) s_claims[r][c]++;
        }
        for (int j = 0; j < 128 / S01_PER_ROW; j++) {
            int r = s01_row(thread), c = s01_col(thread, j);
            inside &= c < 128;
            if (inside) o_claims[r][c]++;
        }
        /* xor 1 and xor 2 stay within the row's 4 threads, inside one warp */
        for (int mask = 1; mask <= 2; mask *= 2) {
            int partner = (thread / WARP_SIZE) * WARP_SIZE + ((thread % WARP_SIZE) ^ mask);
            adjacent &= s01_row(partner) == s01_row(thread);
        }
    }
    for (int r = 0; r < S01_BLOCK_M; r++) {
        for (int c = 0; c < S01_BLOCK_N; c++) once &= s_claims[r][c] == 1;
        for (int c = 0; c < 128; c++) once &= o_claims[r][c] == 1;
    }
    check(inside && once, "step 01: every score of S [32][32] and every value of O [32][128] is owned by exactly one "
          "of the 128 threads (row t / 4, columns t % 4 + 4 j)", "an element owned twice, never, or outside the tile");
    check(adjacent, "step 01: a row's 4 threads are adjacent lanes of one warp: the shuffles xor 1 and xor 2 stay "
          "within the row", "a shuffle partner holds another row");
}

/* ---- --format residency: where each tile of the FA2 loop lives, with step 05's tiles
 * (steps/05_cp_async_pipeline/kernel.cu: BLOCK_M = 64 query rows, BLOCK_N = 64 keys, 4 warps of
 * one 16-row m-tile each, K and V in STAGES = 2 shared-memory buffers). One head's tensors live
 * in HBM; a block holds its Q tile and the K/V stages in shared memory; a warp holds, for its 16
 * rows, Q's A fragments (loaded once), S (reused in place as P), the O accumulator and the
 * running max m and sum l of its rows, in registers. Registers are counted per thread: the
 * mma fragments spread a 16-row tile over 32 lanes (fragments.md). */
enum { S05_STAGES = 2, REG_BYTES = 4, FP32_BYTES = 4 };

typedef struct {
    const char *object, *space;
    int rows, cols, elem_bytes, copies;
    int regs_per_thread; /* 32-bit registers per thread, for space "regs" */
    const char *moved;
} residency;

static int residency_of(residency *out, int dim, int seqlen)
{
    int n = 0;
    const int rows_per_warp = MMA_M;
    residency r[] = {
        {"Q", "hbm", seqlen, dim, ELEM_BYTES, 1, 0, "64 rows read once per block"},
        {"K", "hbm", seqlen, dim, ELEM_BYTES, 1, 0, "read a key tile at a time by every query block of the head"},
        {"V", "hbm", seqlen, dim, ELEM_BYTES, 1, 0, "read a key tile at a time by every query block of the head"},
        {"O", "hbm", seqlen, dim, ELEM_BYTES, 1, 0, "written once after the last key tile"},
        {"LSE", "hbm", seqlen, 1, FP32_BYTES, 1, 0, "written once after the last key tile"},
        {"Q tile", "smem", BLOCK_M, dim, ELEM_BYTES, 1, 0, "copied in before the loop"},
        {"K tile", "smem", BLOCK_N, dim, ELEM_BYTES, S05_STAGES, 0, "one stage filled per key tile"},
        {"V tile", "smem", BLOCK_N, dim, ELEM_BYTES, S05_STAGES, 0, "one stage filled per key tile"},
        /* q_frag[D / MMA_K][4]: 32-bit registers each holding two 16-bit elements */
        {"Q fragments", "regs", rows_per_warp, dim, ELEM_BYTES, 1, dim / MMA_K * MMA_A_REGS, "loaded once from the Q tile"},
        /* s_acc[BLOCK_N / MMA_N][4] fp32, exponentiated in place into P */
        {"S then P", "regs", rows_per_warp, BLOCK_N, FP32_BYTES, 1, BLOCK_N / MMA_N * MMA_C_REGS,
         "made and used up within one key tile"},
        /* o_acc[D / MMA_N][4] fp32 */
        {"O accumulator", "regs", rows_per_warp, dim, FP32_BYTES, 1, dim / MMA_N * MMA_C_REGS,
         "rescaled and added to every key tile"},
        /* m_run[2], l_run[2]: rows g and g + 8 of the lane's quad */
        {"m", "regs", rows_per_warp, 1, FP32_BYTES, 1, 2, "updated every key tile"},
        {"l", "regs", rows_per_warp, 1, FP32_BYTES, 1, 2, "updated every key tile"},
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) out[n++] = r[i];
    return n;
}

static long long residency_bytes(const residency *r) { return (long long)r->rows * r->cols * r->elem_bytes * r->copies; }

static void print_residency(int dim, int seqlen)
{
    residency r[16];
    int n = residency_of(r, dim, seqlen);
    printf("object,space,rows,cols,elem_bytes,copies,bytes,regs_per_thread,moved\n");
    for (int i = 0; i < n; i++)
        printf("%s,%s,%d,%d,%d,%d,%lld,%d,%s\n", r[i].object, r[i].space, r[i].rows, r[i].cols, r[i].elem_bytes,
               r[i].copies, residency_bytes(&r[i]), r[i].regs_per_thread, r[i].moved);
}

/* The shared memory adds up to step 05's (64 + 4 x 64) x D x 2 bytes; each register tile's
 * per-thread count times 32 lanes holds the warp's tile exactly (4 bytes a register). */
static void check_residency(void)
{
    for (int dim = 64; dim <= 128; dim += 64) {
        residency r[16];
        int n = residency_of(r, dim, 1024), regs_ok = 1;
        long long smem = 0;
        for (int i = 0; i < n; i++) {
            if (strcmp(r[i].space, "smem") == 0) smem += residency_bytes(&r[i]);
            if (strcmp(r[i].space, "regs") != 0) continue;
            /* a tile of values: every element in one lane; m and l: each row in the 4 lanes of its quad */
            long long held = (long long)r[i].regs_per_thread * WARP_SIZE * REG_BYTES;
            regs_ok &= r[i].cols > 1 ? held == residency_bytes(&r[i]) : held == residency_bytes(&r[i]) * 4;
        }
        char name[160];
        snprintf(name, sizeof name, "residency at d%d: shared memory is step 05's (64 + 4 x 64) x %d x 2 bytes, and "
                 "each register tile fills a warp's registers exactly", dim, dim);
        check(smem == (long long)(BLOCK_M + 2 * S05_STAGES * BLOCK_N) * dim * ELEM_BYTES && regs_ok, name,
              "shared memory %lld bytes, or a register tile that does not match its per-thread count", smem);
    }
}

static void run_checks(void)
{
    check_step01();
    static const int seqlens[] = {1, 15, 127, 128, 129, 1000, 1024, 4096};
    for (int i = 0; i < CONFIGS; i++) {
        const tile_config *c = &configs[i];
        row_owners o;
        owners_build(&o, c);
        int twice = 0, never = 0, contiguous = 1;
        for (int r = 0; r < o.rows; r++) twice += o.claims[r] > 1, never += o.claims[r] == 0;
        for (int warp = 0; warp < c->warps; warp++)
            for (int r = warp_row0(c, warp); r < warp_row0(c, warp) + c->m_tiles * MMA_M; r++)
                contiguous &= o.owner[r] / c->m_tiles == warp;
        char name[160];
        snprintf(name, sizeof name, "step 07 configuration %d (TileConfig<%d, %d, %d>): each of the block's %d query rows"
                 " is owned by exactly one warp and m-tile", i, c->warps, c->m_tiles, c->block_n, o.rows);
        check(!o.outside && !twice && !never, name, "%d rows claimed twice, %d never, %d claims outside the block", twice,
              never, o.outside);
        snprintf(name, sizeof name, "step 07 configuration %d: warp w owns one run of %d rows from w x %d (q_addr's warp_row0)",
                 i, c->m_tiles * MMA_M, c->m_tiles * MMA_M);
        check(contiguous, name, "a warp's m-tiles are not one run of rows");
        int covers = 1;
        for (size_t s = 0; s < sizeof seqlens / sizeof *seqlens; s++)
            covers &= grid_covers(c, seqlens[s], 0) && grid_covers(c, seqlens[s], 1);
        snprintf(name, sizeof name, "step 07 configuration %d: the grid computes every query row once, at N = 1 to 4096,"
                 " causal order or not", i);
        check(covers, name, "a row computed twice or never, or a row past N outside the last block");
        /* the kernel's static_asserts (TileCopy, the key loops, the epilogue), at both head dims */
        int asserts = 1;
        for (int dim = 64; dim <= 128; dim += 64) {
            int chunks = dim * ELEM_BYTES / CHUNK_BYTES, per_pass = threads_of(c) / chunks;
            asserts &= threads_of(c) % chunks == 0 && per_pass % SWIZZLE_ROWS == 0;
            asserts &= block_m(c) % per_pass == 0 && c->block_n % per_pass == 0;
            asserts &= c->block_n % MMA_K == 0 && c->block_n % (2 * MMA_N) == 0;
            asserts &= block_m(c) * chunks % threads_of(c) == 0;
        }
        snprintf(name, sizeof name, "step 07 configuration %d: the kernel's static_asserts on its tiles hold at d64 and d128", i);
        check(asserts, name, "a copy pass, a key step or the epilogue does not divide evenly");
    }
    int same = 1;
    for (int i = 1; i < CONFIGS; i++) same &= block_m(&configs[i]) == block_m(&configs[0]);
    check(same, "step 07: every configuration covers the same query rows: the grid does not depend on the choice",
          "BLOCK_M differs between configurations");
    check_residency();
}

int main(int argc, char **argv)
{
    shape s = {128, 2, 8, 1024};
    int csv = 0, step01 = 0;
    const cli_option opts[] = {
        {"--dim", &s.dim, 64, 128, 64, NULL},
        {"--batch", &s.batch, 1, 65535, 1, NULL},
        {"--heads", &s.heads, 1, 65535, 1, NULL},
        {"--seqlen", &s.seqlen, 1, 1 << 20, 1, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv|residency"},
        {"--step", &step01, 0, 0, 0, "07|01"},
    };
    parse_cli(argc, argv, usage, opts, 6, run_checks);
    if (csv == 2) {
        print_residency(s.dim, s.seqlen);
        return 0;
    }
    if (step01) {
        if (csv) print_step01_csv(s.dim);
        else print_step01(s.dim);
        return 0;
    }
    if (csv) {
        print_csv();
        return 0;
    }
    printf("step 07's tile configurations (steps/07_tuned/kernel.cu, TileConfig<WARPS, M_TILES, BLOCK_N>):\n"
           "warp w owns M_TILES m-tiles of 16 rows, m-tile mt from row (w x M_TILES + mt) x 16; D = %d.\n"
           "A K or V fragment serves every m-tile of its warp: M_TILES = 2 halves the loads per mma.\n\n",
           s.dim);
    for (int i = 0; i < CONFIGS; i++) print_config(i, s.dim);
    print_grid_of(&s);
    return 0;
}
