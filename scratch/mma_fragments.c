/* mma_fragments - which lane and register hold each element of the A, B and C
 * tiles of mma.sync.aligned.m16n8k16.row.col (f16/bf16 inputs, f32
 * accumulators), and why the S accumulators can feed P.V without a shuffle. */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: mma_fragments [--only a|b|c|p|all] [--format text|csv] [--check]\n"
    "Prints, for mma.sync.aligned.m16n8k16.row.col (f16/bf16 in, f32 accumulate), the lane\n"
    "and register that own each element, as lane:reg:\n"
    "  a  A, 16 x 16 [m][k]: a0..a3, each 32-bit register holds 2 halves (even column low)\n"
    "  b  B, 16 x 8 [k][n]: b0, b1, 2 halves each (even k low)\n"
    "  c  C/D, 16 x 8 [m][n]: c0..c3, one fp32 each\n"
    "  p  S = Q K^T accumulators (n-tiles 2j, 2j+1) reused as the A operand of P.V k-step j\n"
    "  --format csv: one line per element for the figures (figures/): operand (A, B or C), row, col\n"
    "          and the lane, register and half (0 low, 1 high; always 0 for C) that hold it; with\n"
    "          --only a, b or c that operand alone\n"
    "  --check  assert that every map is a bijection and that the S -> P reuse lines up\n";

typedef enum { TILE_A, TILE_B, TILE_C, TILE_P, TILE_ALL } tile_kind;

/* The inverse maps (owner_grid, tool.h) of this program hold lane * 8 + reg * 2 + half. */
typedef owner_grid owner_map;

static int owner_code(int lane, int reg, int half) { return (lane * MMA_A_REGS + reg) * HALVES + half; }
static int owner_lane(int code) { return code / (MMA_A_REGS * HALVES); }
static int owner_reg(int code) { return code / HALVES % MMA_A_REGS; }
static int owner_half(int code) { return code % HALVES; }

/* kind: TILE_A, TILE_B or TILE_C (C uses half 0 only: one fp32 per register) */
static void owner_build(owner_map *m, tile_kind kind)
{
    int regs = kind == TILE_A ? MMA_A_REGS : kind == TILE_B ? MMA_B_REGS : MMA_C_REGS;
    int halves = kind == TILE_C ? 1 : HALVES;
    owner_init(m, kind == TILE_C ? MMA_M : MMA_K, kind == TILE_A ? MMA_K : MMA_N);
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int reg = 0; reg < regs; reg++)
            for (int half = 0; half < halves; half++) {
                tile_coord at = kind == TILE_A ? mma_a_coord(lane, reg, half)
                              : kind == TILE_B ? mma_b_coord(lane, reg, half)
                                               : mma_c_coord(lane, reg);
                owner_put(m, at.row, at.col, owner_code(lane, reg, half));
            }
}

typedef struct {
    const owner_map *map;
    char reg_letter;
} owner_view;

static void owner_cell(int row, int col, const void *ctx, grid_cell *cell)
{
    const owner_view *v = ctx;
    int code = v->map->owner[row][col];
    snprintf(cell->text, sizeof cell->text, "%d:%c%d", owner_lane(code), v->reg_letter, owner_reg(code));
    cell->colour = owner_reg(code);
}

/* The S tiles 2j | 2j+1 side by side, each element named by the accumulator that holds it. */
static void s_pair_cell(int row, int col, const void *ctx, grid_cell *cell)
{
    const owner_map *c_map = ctx;
    int code = c_map->owner[row][col % MMA_N];
    snprintf(cell->text, sizeof cell->text, "%d:c%d", owner_lane(code), owner_reg(code));
    cell->colour = 2 * (col / MMA_N) + owner_reg(code) / 2;
}

/* For every P.V k-step over BLOCK_N keys: the element that A register reg, half h
 * of a lane stands for must be the element that the same lane's source
 * accumulator holds. Returns the number of elements that agree. */
static int s_to_p_matches(int kstep)
{
    int agree = 0;
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int reg = 0; reg < MMA_A_REGS; reg++)
            for (int half = 0; half < HALVES; half++) {
                tile_coord p = mma_a_coord(lane, reg, half);
                tile_coord s = mma_c_coord(lane, p_source_creg(reg, half));
                int s_key = p_source_ntile(kstep, reg) * MMA_N + s.col;
                agree += p.row == s.row && kstep * MMA_K + p.col == s_key;
            }
    return agree;
}

static void print_tile(tile_kind kind, const char *title, const char *corner)
{
    owner_map map;
    owner_build(&map, kind);
    owner_view view = {&map, kind == TILE_A ? 'a' : kind == TILE_B ? 'b' : 'c'};
    grid_shape shape = {corner, map.rows, map.cols, 5, kind == TILE_A ? 8 : 0, 8};
    printf("%s\n", title);
    print_grid(&shape, owner_cell, &view);
    putchar('\n');
}

static void print_s_to_p(void)
{
    owner_map c_map;
    owner_build(&c_map, TILE_C);
    printf("S = Q K^T -> P.V: the accumulators of S n-tiles 2j and 2j+1 (keys 16j..16j+15) are,\n"
           "converted to 16 bits and packed in pairs, the A operand of P.V k-step j:\n");
    for (int reg = 0; reg < MMA_A_REGS; reg++) {
        tile_coord first = mma_a_coord(0, reg, 0);
        printf("  a%d = pack(S tile 2j%s c%d, c%d)   row %-4s keys 16j + %s2t, +1\n", reg,
               p_source_ntile(0, reg) ? "+1" : "  ", p_source_creg(reg, 0), p_source_creg(reg, 1),
               first.row ? "g+8," : "g,", first.col ? "8 + " : "");
    }
    printf("\nS n-tile 2j (columns 0-7) | n-tile 2j+1 (columns 8-15) as accumulators lane:reg;\n"
           "compare with the A grid above: the same lane owns each element.\n");
    grid_shape shape = {"m\\key", MMA_M, 2 * MMA_N, 5, 8, 8};
    print_grid(&shape, s_pair_cell, &c_map);
    int agree = 0;
    for (int kstep = 0; kstep < BLOCK_N / MMA_K; kstep++) agree += s_to_p_matches(kstep);
    int total = BLOCK_N / MMA_K * MMA_M * MMA_K;
    printf("element by element, lane/row/column of P (A fragment) = those of S (C fragments), "
           "all %d k-steps of BLOCK_N = %d: %s (%d of %d)\n\n",
           BLOCK_N / MMA_K, BLOCK_N, agree == total ? "OK" : "MISMATCH", agree, total);
}

/* --format csv: every element of A, B and C (or of the one --only names), row by row. */
static void print_csv(int only)
{
    static const char operand[] = {'A', 'B', 'C'};
    printf("operand,row,col,lane,reg,half\n");
    for (tile_kind kind = TILE_A; kind <= TILE_C; kind++) {
        if (only != TILE_ALL && only != (int)kind) continue;
        owner_map map;
        owner_build(&map, kind);
        for (int row = 0; row < map.rows; row++)
            for (int col = 0; col < map.cols; col++) {
                int code = map.owner[row][col];
                printf("%c,%d,%d,%d,%d,%d\n", operand[kind], row, col, owner_lane(code), owner_reg(code), owner_half(code));
            }
    }
}

static void run_checks(void)
{
    static const char *const names[] = {"A 16x16", "B 16x8", "C 16x8"};
    for (tile_kind kind = TILE_A; kind <= TILE_C; kind++) {
        owner_map map;
        owner_build(&map, kind);
        char name[80];
        snprintf(name, sizeof name, "mma %s fragment: (lane, reg, half) -> element is a bijection", names[kind]);
        check(owner_complete(&map), name, "%d collisions or elements out of the tile", map.collisions);
    }
    /* a C row is held by the 4 lanes of one quad: what the quad shuffles of the softmax rely on */
    int quad_rows = 1;
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int reg = 0; reg < MMA_C_REGS; reg++) quad_rows &= mma_c_coord(lane, reg).row % 8 == lane / 4;
    check(quad_rows, "mma C fragment: rows g and g+8 are held by the quad of lanes 4g..4g+3", "a row leaves its quad");
    for (int kstep = 0; kstep < BLOCK_N / MMA_K; kstep++) {
        char name[96];
        snprintf(name, sizeof name, "S n-tiles %d,%d accumulators are the A operand of P.V k-step %d", 2 * kstep,
                 2 * kstep + 1, kstep);
        int agree = s_to_p_matches(kstep);
        check(agree == MMA_M * MMA_K, name, "%d of %d elements agree", agree, MMA_M * MMA_K);
    }
}

int main(int argc, char **argv)
{
    int only = TILE_ALL, csv = 0;
    const cli_option opts[] = {
        {"--only", &only, 0, 0, 0, "a|b|c|p|all"},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, 2, run_checks);
    if (csv) {
        if (only == TILE_P) cli_error("--format csv covers a, b and c (got --only p)");
        print_csv(only);
        return 0;
    }
    printf("mma.sync.aligned.m16n8k16.row.col: D (16x8 f32) = A (16x16) x B (16x8) + C, per warp.\n"
           "Cells are lane:reg. lane = 4g + t: g = lane >> 2 (groupID) picks the row of A and C and the\n"
           "column n of B; t = lane & 3 picks a pair of adjacent columns of A and C, or of k of B.\n\n");
    if (only == TILE_A || only == TILE_ALL)
        print_tile(TILE_A, "A (row-major 16 x 16, [m][k]): a0 (g, 2t..2t+1), a1 (g+8), a2 (g, 2t+8..), a3 (g+8, 2t+8..)",
                   "m\\k");
    if (only == TILE_B || only == TILE_ALL)
        print_tile(TILE_B, "B (\"col\", 16 x 8 indexed [k][n]): b0 (k = 2t..2t+1, n = g), b1 (k = 2t+8..2t+9)", "k\\n");
    if (only == TILE_C || only == TILE_ALL)
        print_tile(TILE_C, "C/D (16 x 8 [m][n], fp32): c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)", "m\\n");
    if (only == TILE_P || only == TILE_ALL) {
        if (only == TILE_P) print_tile(TILE_A, "A of P.V k-step j (keys 16j + column):", "m\\key");
        print_s_to_p();
    }
    return 0;
}
