/* wgmma_fragments - which thread of the warpgroup and which register hold each
 * element of the D and register-A tiles of wgmma.mma_async.sync.aligned.m64nNk16
 * (f16/bf16 inputs, f32 accumulators, sm_90a), and why step 09's S
 * accumulators are the A operand of P.V without a shuffle. */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: wgmma_fragments [--n 64|128|256] [--only d|a|p|all] [--cols C] [--format text|csv|descriptors] [--check]\n"
    "Prints, for wgmma.mma_async.sync.aligned.m64nNk16 (f16/bf16 in, f32 accumulate; one warpgroup of\n"
    "4 warps, 128 threads), the lane and register that own each element, as lane:reg; the warp is\n"
    "w = row / 16:\n"
    "  d  D, 64 x N [m][n]: d0..d(N/2-1), one fp32 each\n"
    "  a  A from registers, 64 x 16 [m][k]: a0..a3, each 32-bit register holds 2 halves (even column low)\n"
    "  p  S = Q K^T accumulators d(8j)..d(8j+7) (keys 16j..16j+15) reused as register A of P.V k-step j\n"
    "  --n N     the n of the instruction: 64 (default; step 09's P V at d64), 128 (its Q K^T) or 256\n"
    "  --cols C  the D columns printed, a multiple of 8 up to N (default 16; the pattern repeats every 8)\n"
    "  --format csv: one line per element of D's first --cols columns, for the figures (figures/):\n"
    "           n,row,col,warp,lane,g,t,reg,ntile,mma_reg: thread 32 warp + lane holds D[row][col] in\n"
    "           register reg, which is register mma_reg = reg % 4 of the mma.sync m16n8 C fragment of\n"
    "           columns 8 ntile..8 ntile + 7 (ntile = reg / 4); --only does not change it\n"
    "  --check   assert that every map is a bijection, that the S -> P reuse lines up, and that step\n"
    "           09's descriptors read every element of Q, K and V where TMA put it (d64, d128)\n";

typedef enum { TILE_D, TILE_A, TILE_P, TILE_ALL } tile_kind;

/* The inverse maps (owner_grid, tool.h) of this program hold (thread * regs + reg) *
 * halves + half, thread = 32 warp + lane. */
enum { N_CHOICES = 3 };
_Static_assert(WG_M <= OWNER_MAX_ROWS && WG_N_MAX <= OWNER_MAX_COLS, "owner_grid holds the largest D tile, 64 x 256");

typedef struct {
    owner_grid grid;
    int regs, halves;  /* per thread: N / 2 and 1 for D, 4 and 2 for A */
} owner_map;

static int n_choice(int index) { return WG_M << index; } /* --n: 64, 128, 256 */

static int owner_thread(const owner_map *m, int code) { return code / m->halves / m->regs; }
static int owner_reg(const owner_map *m, int code) { return code / m->halves % m->regs; }

/* kind: TILE_D (n columns, half 0 only: one fp32 per register) or TILE_A */
static void owner_build(owner_map *m, tile_kind kind, int n)
{
    owner_init(&m->grid, WG_M, kind == TILE_D ? n : WG_K);
    m->regs = kind == TILE_D ? wgmma_d_regs(n) : WG_A_REGS;
    m->halves = kind == TILE_D ? 1 : HALVES;
    for (int thread = 0; thread < WG_THREADS; thread++)
        for (int reg = 0; reg < m->regs; reg++)
            for (int half = 0; half < m->halves; half++) {
                int warp = wgmma_warp(thread), lane = thread % WARP_SIZE;
                tile_coord at = kind == TILE_D ? wgmma_d_coord(warp, lane, reg) : wgmma_a_coord(warp, lane, reg, half);
                owner_put(&m->grid, at.row, at.col, (thread * m->regs + reg) * m->halves + half);
            }
}

typedef struct {
    const owner_map *map;
    char reg_letter;
} owner_view;

/* lane:reg, coloured by warp: the warp is the row's 16-row block */
static void owner_cell(int row, int col, const void *ctx, grid_cell *cell)
{
    const owner_view *v = ctx;
    int code = v->map->grid.owner[row][col], thread = owner_thread(v->map, code);
    snprintf(cell->text, sizeof cell->text, "%d:%c%d", thread % WARP_SIZE, v->reg_letter, owner_reg(v->map, code));
    cell->colour = wgmma_warp(thread);
}

/* For P.V k-step `kstep` over n keys: the element that register-A reg, half h of
 * a thread stands for must be the element that the same thread's source
 * accumulator holds. Returns the number of (thread, reg, half) that agree. */
static int s_to_p_matches(int kstep, int n)
{
    int agree = 0;
    for (int thread = 0; thread < WG_THREADS; thread++)
        for (int reg = 0; reg < WG_A_REGS; reg++)
            for (int half = 0; half < HALVES; half++) {
                int warp = wgmma_warp(thread), lane = thread % WARP_SIZE;
                int source = wgmma_p_source_reg(kstep, reg, half);
                tile_coord p = wgmma_a_coord(warp, lane, reg, half);
                tile_coord s = wgmma_d_coord(warp, lane, source);
                agree += source < wgmma_d_regs(n) && p.row == s.row && kstep * WG_K + p.col == s.col;
            }
    return agree;
}

static int label_width(char letter, int max_reg)
{
    char text[24];
    return snprintf(text, sizeof text, "%d:%c%d", WARP_SIZE - 1, letter, max_reg);
}

static void print_d(int n, int cols)
{
    static owner_map map;
    owner_build(&map, TILE_D, n);
    owner_view view = {&map, 'd'};
    grid_shape shape = {"m\\n", WG_M, cols, label_width('d', wgmma_d_regs(cols) - 1), MMA_N, MMA_M / 2};
    printf("D (64 x %d [m][n], fp32): d(4q)..d(4q+3) are the mma.sync C fragment of columns 8q..8q+7 -\n"
           "d(4q), d(4q+1) (row 16w + g, columns 8q + 2t, +1), d(4q+2), d(4q+3) (row 16w + g + 8, same columns)\n",
           n);
    if (cols < n)
        printf("columns 0-%d of %d (--cols for more): column 8q + c is held by the thread of column c, register + 4q\n",
               cols - 1, n);
    print_grid(&shape, owner_cell, &view);
    putchar('\n');
}

static void print_a(const char *title, const char *corner, int rows)
{
    static owner_map map;
    owner_build(&map, TILE_A, 0);
    owner_view view = {&map, 'a'};
    grid_shape shape = {corner, rows, WG_K, label_width('a', WG_A_REGS - 1), 8, MMA_M / 2};
    printf("%s\n", title);
    print_grid(&shape, owner_cell, &view);
    putchar('\n');
}

typedef struct {
    owner_map d, a;
} s_to_p_maps;

/* Element (row, key) of k-step 0: the accumulator dI of S that holds it and the
 * register aR of P that needs it, as dI>aR when the same thread has both and
 * dI is aR's source; ?? otherwise. */
static void s_to_p_cell(int row, int col, const void *ctx, grid_cell *cell)
{
    const s_to_p_maps *m = ctx;
    int d_code = m->d.grid.owner[row][col], a_code = m->a.grid.owner[row][col];
    int d_reg = owner_reg(&m->d, d_code), a_reg = a_code / HALVES % WG_A_REGS, a_half = a_code % HALVES;
    if (owner_thread(&m->d, d_code) == owner_thread(&m->a, a_code) && wgmma_p_source_reg(0, a_reg, a_half) == d_reg)
        snprintf(cell->text, sizeof cell->text, "d%d>a%d", d_reg, a_reg);
    else snprintf(cell->text, sizeof cell->text, "??");
    cell->colour = a_reg;
}

static void print_s_to_p(int n)
{
    static s_to_p_maps maps;
    owner_build(&maps.d, TILE_D, n);
    owner_build(&maps.a, TILE_A, 0);
    printf("S = Q K^T (m64n%dk16, %d keys) -> P.V (%d k-steps of 16 keys): the accumulators holding keys\n"
           "16j..16j+15, d(8j)..d(8j+7), are, converted to 16 bits and packed in pairs, register A of k-step j:\n",
           n, n, n / WG_K);
    for (int reg = 0; reg < WG_A_REGS; reg++) {
        tile_coord first = wgmma_a_coord(0, 0, reg, 0);
        printf("  a%d = pack(d(8j+%d), d(8j+%d))   row 16w + %-4s keys 16j + %s2t, +1\n", reg,
               wgmma_p_source_reg(0, reg, 0), wgmma_p_source_reg(0, reg, 1), first.row ? "g+8," : "g,",
               first.col ? "8 + " : "");
    }
    printf("\nk-step 0, rows 0-15 (warp 0; warp w holds rows 16w.. the same way, k-step j with d(8j + I)):\n"
           "dI>aR: the lane owning the element in the D grid holds it in dI, and in the A grid needs it in aR\n");
    grid_shape shape = {"m\\key", MMA_M, WG_K, 5, 8, MMA_M / 2};
    print_grid(&shape, s_to_p_cell, &maps);
    for (int kstep = 0; kstep < n / WG_K; kstep++) {
        int agree = s_to_p_matches(kstep, n), total = WG_THREADS * WG_A_REGS * HALVES;
        printf("k-step %2d (keys %3d-%3d, d%d-d%d): element by element, thread, row and key of P (register A) = those"
               " of S (accumulators): %s (%d of %d)\n",
               kstep, kstep * WG_K, kstep * WG_K + WG_K - 1, wgmma_p_source_reg(kstep, 0, 0),
               wgmma_p_source_reg(kstep, WG_A_REGS - 1, 1), agree == total ? "OK" : "MISMATCH", agree, total);
    }
    putchar('\n');
}

/* --format csv: D's owners, element by element, from the forward map (layouts.h). */
static void print_d_csv(int n, int cols)
{
    static owner_map map;
    owner_build(&map, TILE_D, n);
    printf("n,row,col,warp,lane,g,t,reg,ntile,mma_reg\n");
    for (int row = 0; row < WG_M; row++)
        for (int col = 0; col < cols; col++) {
            int code = map.grid.owner[row][col], thread = owner_thread(&map, code), reg = owner_reg(&map, code);
            int lane = thread % WARP_SIZE;
            printf("%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", n, row, col, wgmma_warp(thread), lane, lane_group(lane),
                   lane_tig(lane), reg, reg / MMA_C_REGS, reg % MMA_C_REGS);
        }
}

/* The index formulas the warpgroups of steps 09-12 write out by hand: s_acc / o_acc
 * register i at row row0 + 8 (i / 2 % 2), column 8 (i / 4) + 2t + i % 2
 * (row0 = 16 warp + g), and pack_p's p_frag[j][a] = pack(s_acc[8j + 2a], s_acc[8j + 2a + 1]). */
static int step09_formulas_agree(int n)
{
    int agree = 1;
    for (int thread = 0; thread < WG_THREADS; thread++) {
        int warp = wgmma_warp(thread), lane = thread % WARP_SIZE, g = lane / 4, t = lane % 4;
        for (int i = 0; i < wgmma_d_regs(n); i++) {
            tile_coord at = wgmma_d_coord(warp, lane, i);
            agree &= at.row == 16 * warp + g + 8 * (i / 2 % 2) && at.col == 8 * (i / 4) + 2 * t + i % 2;
        }
    }
    for (int j = 0; j < n / WG_K; j++)
        for (int a = 0; a < WG_A_REGS; a++)
            for (int half = 0; half < HALVES; half++) agree &= wgmma_p_source_reg(j, a, half) == 8 * j + 2 * a + half;
    return agree;
}

/* ---- step 09's descriptors over TMA's slabs (layouts.h: wgmma_sw128_descriptor, _address) ----
 * The kernel's tiles: Q [128][D] (BLOCK_M rows, warpgroup w from row 64 w), K and V [128][D]
 * (BLOCK_N keys), each D / 64 slabs of [rows][64] with the 128-byte swizzle. S = Q K^T: k-step
 * kk reads columns 16 kk..16 kk + 15 of Q (A) and K (B), both K-major; O = P V: k-step j reads
 * keys 16 j..16 j + 15 of V (B), MN-major, its n the head dim. */
enum { STEP09_ROWS = 128 };

/* The byte the descriptor of k-step `kstep` reads for element (mn, k) of the operand, and
 * through *tma the byte where TMA put the same element of the tile. */
static int step09_operand_address(int kmajor, int r0, int kstep, int mn, int k, wgmma_sw128_desc *d, int *tma)
{
    if (kmajor) {
        *d = wgmma_sw128_descriptor(1, STEP09_ROWS, r0, kstep * WG_K); /* start + 32 bytes per k-step in a slab */
        *tma = tma_byte_offset(r0 + mn, kstep * WG_K + k, STEP09_ROWS);
    } else {
        *d = wgmma_sw128_descriptor(0, STEP09_ROWS, kstep * WG_K, 0);  /* start + 16 rows (2048 bytes) per k-step */
        *tma = tma_byte_offset(kstep * WG_K + k, mn, STEP09_ROWS);
    }
    return wgmma_sw128_address(kmajor, d->start, d->lbo, d->sbo, mn, k);
}

/* Elements of one operand of one head dim whose descriptor address is not TMA's (0: all agree). */
static int step09_operand_misses(int kmajor, int r0, int mn_count, int dim)
{
    int misses = 0, tma;
    wgmma_sw128_desc d;
    int ksteps = kmajor ? dim / WG_K : STEP09_ROWS / WG_K;
    for (int kstep = 0; kstep < ksteps; kstep++)
        for (int mn = 0; mn < mn_count; mn++)
            for (int k = 0; k < WG_K; k++) misses += step09_operand_address(kmajor, r0, kstep, mn, k, &d, &tma) != tma;
    return misses;
}

static void print_descriptors_csv(void)
{
    int tma, dim = 128;
    wgmma_sw128_desc d;
    printf("operand,major,kstep,mn,k,start,lbo,sbo,address,tma_address\n");
    for (int kstep = 0; kstep < dim / WG_K; kstep++)
        for (int mn = 0; mn < 2 * WG_CORE_ROWS; mn++)
            for (int k = 0; k < WG_K; k++) {
                int a = step09_operand_address(1, 0, kstep, mn, k, &d, &tma);
                printf("K,K,%d,%d,%d,%d,%d,%d,%d,%d\n", kstep, mn, k, d.start, d.lbo, d.sbo, a, tma);
            }
    for (int kstep = 0; kstep < 2; kstep++)
        for (int k = 0; k < WG_K; k++)
            for (int mn = 0; mn < dim; mn++) {
                int a = step09_operand_address(0, 0, kstep, mn, k, &d, &tma);
                printf("V,MN,%d,%d,%d,%d,%d,%d,%d,%d\n", kstep, mn, k, d.start, d.lbo, d.sbo, a, tma);
            }
}

static void run_checks(void)
{
    static owner_map map;
    char name[128];
    for (int i = 0; i < N_CHOICES; i++) {
        int n = n_choice(i);
        owner_build(&map, TILE_D, n);
        snprintf(name, sizeof name, "wgmma D 64x%d accumulator: (warp, lane, reg) -> element is a bijection, 128 threads x %d regs",
                 n, wgmma_d_regs(n));
        check(owner_complete(&map.grid), name, "%d collisions or elements out of the tile", map.grid.collisions);
    }
    owner_build(&map, TILE_A, 0);
    check(owner_complete(&map.grid), "wgmma register A 64x16: (warp, lane, reg, half) -> element is a bijection, 128 threads x 4 regs x 2 halves",
          "%d collisions or elements out of the tile", map.grid.collisions);
    /* warp w owns rows 16w..16w+15, and a D row stays in one quad: what step 09's
     * row0 = 16 warp + g and its quad shuffles (xor 1, 2) of the softmax rely on */
    int warp_rows = 1, quad_rows = 1;
    for (int thread = 0; thread < WG_THREADS; thread++) {
        int warp = wgmma_warp(thread), lane = thread % WARP_SIZE;
        for (int reg = 0; reg < wgmma_d_regs(WG_N_MAX); reg++) {
            tile_coord at = wgmma_d_coord(warp, lane, reg);
            warp_rows &= at.row / MMA_M == warp;
            quad_rows &= at.row % 8 == lane / 4;
        }
        for (int reg = 0; reg < WG_A_REGS; reg++)
            for (int half = 0; half < HALVES; half++) warp_rows &= wgmma_a_coord(warp, lane, reg, half).row / MMA_M == warp;
    }
    check(warp_rows, "wgmma D and register A: warp w of the warpgroup holds rows 16w..16w+15", "a row leaves its warp");
    check(quad_rows, "wgmma D: rows 16w+g and 16w+g+8 are held by the quad of lanes 4g..4g+3", "a row leaves its quad");
    check(step09_formulas_agree(WG_N_MAX),
          "wgmma D register i = row 16w + g + 8((i >> 1) & 1), column 8(i >> 2) + 2t + (i & 1); "
          "register A r, half h of k-step j = accumulator 8j + 2r + h (step 09's index formulas)",
          "layouts.h and the closed forms disagree");
    for (int i = 0; i < N_CHOICES; i++) {
        int n = n_choice(i), agree = 0;
        for (int kstep = 0; kstep < n / WG_K; kstep++) agree += s_to_p_matches(kstep, n);
        int total = n / WG_K * WG_THREADS * WG_A_REGS * HALVES;
        snprintf(name, sizeof name, "S accumulators d(8j)..d(8j+7) are register A of P.V k-step j, all %d k-steps of N = %d",
                 n / WG_K, n);
        check(agree == total, name, "%d of %d elements agree", agree, total);
    }
    for (int dim = 64; dim <= 128; dim += 64) {
        int misses = step09_operand_misses(1, 0, WG_M, dim) + step09_operand_misses(1, WG_M, WG_M, dim) +
                     step09_operand_misses(1, 0, STEP09_ROWS, dim) + step09_operand_misses(0, 0, dim, dim);
        snprintf(name, sizeof name, "d%d: step 09's descriptors (Q, K K-major; V MN-major) read every element of "
                 "Q, K and V where TMA's 128-byte swizzle put it", dim);
        check(misses == 0, name, "%d elements read from another byte", misses);
    }
}

int main(int argc, char **argv)
{
    int only = TILE_ALL, n_index = 0, cols = 16, csv = 0;
    const cli_option opts[] = {
        {"--n", &n_index, 0, 0, 0, "64|128|256"},
        {"--only", &only, 0, 0, 0, "d|a|p|all"},
        {"--cols", &cols, 8, WG_N_MAX, 8, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv|descriptors"},
    };
    parse_cli(argc, argv, usage, opts, 4, run_checks);
    int n = n_choice(n_index);
    if (cols > n) cli_error("--cols %d is more than the %d columns of D (--n %d)", cols, n, n);
    if (csv == 2) {
        print_descriptors_csv();
        return 0;
    }
    if (csv) {
        print_d_csv(n, cols);
        return 0;
    }
    printf("wgmma.mma_async.sync.aligned.m64n%dk16: D (64x%d f32) = A (64x16) x B (16x%d) + D, per warpgroup\n"
           "(4 consecutive warps, 128 threads). Warp w = (thread / 32) %% 4 owns rows 16w..16w+15 of A and D, and\n"
           "holds them in the mma.sync m16n8k16 fragments (mma_fragments): lane = 4g + t, g = lane >> 2 picks the\n"
           "row, t = lane & 3 a pair of adjacent columns. B is read from shared memory through a descriptor.\n"
           "Cells are lane:reg; the warp is row / 16.\n\n",
           n, n, n);
    if (only == TILE_D || only == TILE_ALL) print_d(n, cols);
    if (only == TILE_A || only == TILE_ALL)
        print_a("A from registers (64 x 16 [m][k]): a0 (16w + g, 2t..2t+1), a1 (16w + g+8), a2 (16w + g, 2t+8..), "
                "a3 (16w + g+8, 2t+8..)",
                "m\\k", WG_M);
    if (only == TILE_P) print_a("A of P.V k-step j, rows 0-15 (warp 0), keys 16j + column:", "m\\key", MMA_M);
    if (only == TILE_P || only == TILE_ALL) print_s_to_p(n);
    return 0;
}
