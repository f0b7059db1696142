/* ldmatrix - who supplies which row address to ldmatrix.sync.aligned.m8n8
 * .x1/.x2/.x4(.trans).shared.b16, which elements each lane receives, and how
 * step 04 aims it at Q, K and V so that every lane receives exactly its mma
 * fragment. */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: ldmatrix [--use q|k|v|all] [--dim 64|128] [--format text|csv] [--check]\n"
    "Prints ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16:\n"
    "  - which lane gives the address of which row of which 8x8 matrix,\n"
    "  - which 2 elements of matrix i each lane receives in register i (plain and .trans),\n"
    "  - the step 04 loads: Q (A operand, x4), K (B operand, x4), V (B operand of P.V, x4.trans),\n"
    "    each lane's address, its swizzled shared-memory byte and bank, what it receives and\n"
    "    that this equals the fragment the mma needs (OK per use).\n"
    "  --use   which step 04 load to print (default all)\n"
    "  --dim   head dimension D of the [64][D] tiles (default 128)\n"
    "  --format csv: one line per lane of each step 04 load printed (instance 0), for the figures\n"
    "          (figures/): the 8x8 matrix and tile row the lane addresses, its logical 16-byte chunk,\n"
    "          and that chunk's swizzled shared-memory byte offset and first bank\n"
    "  --check assert the maps are bijections and every use delivers its fragments, D = 64 and 128\n";

enum { USE_ALL = OPERANDS };

static void address_cell(int matrix, int row, const void *ctx, grid_cell *cell)
{
    (void)ctx;
    snprintf(cell->text, sizeof cell->text, "%d", ldsm_address_lane(matrix, row));
    cell->colour = matrix;
}

/* Element (row, col) of an 8x8 matrix: the lane.half that receives it. */
static void received_cell(int row, int col, const void *ctx, grid_cell *cell)
{
    int trans = *(const int *)ctx;
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int half = 0; half < HALVES; half++) {
            tile_coord got = ldsm_received(lane, half, trans);
            if (got.row == row && got.col == col) {
                snprintf(cell->text, sizeof cell->text, "%d.%d", lane, half);
                cell->colour = lane / 4;
            }
        }
}

static const char *register_role(operand op, int reg)
{
    static const char *const roles[OPERANDS][LDSM_X4] = {
        {"a0", "a1", "a2", "a3"},
        {"b0 n0", "b1 n0", "b0 n0+8", "b1 n0+8"},
        {"b0 d0", "b1 d0", "b0 d0+8", "b1 d0+8"},
    };
    return roles[op][reg];
}

/* Instances whose delivered elements all equal the needed ones. */
static int use_matches(operand op, int dim)
{
    int good = 0;
    for (int inst = 0; inst < ldsm_instances(dim); inst++) {
        int ok = 1;
        for (int lane = 0; lane < WARP_SIZE; lane++)
            for (int reg = 0; reg < LDSM_X4; reg++)
                for (int half = 0; half < HALVES; half++) {
                    tile_coord got = ldsm_delivered(op, dim, inst, lane, reg, half);
                    tile_coord need = ldsm_needed(op, dim, inst, lane, reg, half);
                    ok &= got.row == need.row && got.col == need.col;
                }
        good += ok;
    }
    return good;
}

/* The two elements of one register: same row (plain) or same column (.trans). */
static void print_pair(tile_coord lo, tile_coord hi, int last)
{
    char text[24];
    if (lo.row == hi.row) snprintf(text, sizeof text, "[%d][%d,%d]", lo.row, lo.col, hi.col);
    else snprintf(text, sizeof text, "[%d,%d][%d]", lo.row, hi.row, lo.col);
    printf(last ? " %s" : " %-12s", text);
}

static void print_use(operand op, int dim)
{
    static const char *const what[OPERANDS] = {
        "Q, A operand of S = Q K^T: ldmatrix.x4, warp 0, k-step kk = 0",
        "K, B operand of S = Q K^T: ldmatrix.x4, n-tiles n0 = 0 and n0+8, k-step kk = 0",
        "V, B operand of O = P V (V is [key][d], B wants d-major rows): ldmatrix.x4.trans, kk = 0, d-tiles d0 = 0 and d0+8",
    };
    static const char *const formula[OPERANDS] = {
        "row = warp*16 + lane%16, col = kk*16 + (lane/16)*8",
        "row = n0 + (lane/16)*8 + lane%8, col = kk*16 + ((lane/8)%2)*8",
        "row = kk*16 + lane%8 + ((lane/8)%2)*8, col = d0 + (lane/16)*8",
    };
    printf("%s\n  address of lane: %s, in a [64][%d] tile\n", what[op], formula[op], dim);
    printf(" lane | address  | swizzled byte bank |");
    for (int reg = 0; reg < LDSM_X4; reg++) printf(reg < LDSM_X4 - 1 ? " r%d=%-9s" : " r%d=%s", reg, register_role(op, reg));
    printf("\n");
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        if (lane && lane % LDSM_ROWS == 0) printf("      (next 8 lanes: the rows of matrix %d)\n", lane / LDSM_ROWS);
        tile_coord at = ldsm_address(op, dim, 0, lane);
        int byte = smem_byte_offset(at.row, at.col, dim, 1);
        printf(" %4d | %3d, %3d | %13d ", lane, at.row, at.col, byte);
        char bank[8];
        snprintf(bank, sizeof bank, "%d", smem_bank(byte));
        put_cell(bank, 4, smem_bank(byte) / 4);
        printf(" |");
        for (int reg = 0; reg < LDSM_X4; reg++)
            print_pair(ldsm_delivered(op, dim, 0, lane, reg, 0), ldsm_delivered(op, dim, 0, lane, reg, 1),
                       reg == LDSM_X4 - 1);
        printf("\n");
    }
    int good = use_matches(op, dim);
    printf("each lane receives the %s fragment it needs, every register and half, all %d instances at D = %d: %s\n\n",
           operand_name(op), ldsm_instances(dim), dim, good == ldsm_instances(dim) ? "OK" : "MISMATCH");
}

/* --format csv: the addresses of print_use, one line per lane. */
static void print_use_csv(operand op, int dim)
{
    static const char *const name[OPERANDS] = {"q", "k", "v"};
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        tile_coord at = ldsm_address(op, dim, 0, lane);
        int byte = smem_byte_offset(at.row, at.col, dim, 1);
        printf("%s,%d,%d,%d,%d,%d,%d\n", name[op], lane, lane / LDSM_ROWS, at.row, at.col / CHUNK_ELEMS, byte,
               smem_bank(byte));
    }
}

static void print_maps(void)
{
    printf("ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16: each 8x8 matrix of 16-bit elements is\n"
           "8 rows of 16 bytes; each row address comes from one lane (cells: the lane giving row `row` of\n"
           "matrix `mat`). x1 reads the addresses of lanes 0-7, x2 of lanes 0-15, x4 of all 32; the other\n"
           "lanes' addresses are ignored. Every lane receives one 32-bit register per matrix.\n");
    grid_shape lanes = {"m\\row", LDSM_X4, LDSM_ROWS, 3, 0, 0};
    print_grid(&lanes, address_cell, NULL);
    static const int plain = 0, trans = 1;
    grid_shape elems = {"r\\col", LDSM_ROWS, LDSM_ROWS, 4, 0, 0};
    printf("\nregister i of each lane holds 2 elements of matrix i; cells: lane.half that receives (row, col)\n"
           "not transposed: lane l gets row l/4, columns 2(l%%4), 2(l%%4)+1 (the mma C/A layout of an 8x8 block)\n");
    print_grid(&elems, received_cell, &plain);
    printf("\n.trans: lane l gets column l/4 of rows 2(l%%4), 2(l%%4)+1 (the mma B layout of an 8x8 block)\n");
    print_grid(&elems, received_cell, &trans);
    printf("\n");
}

static void run_checks(void)
{
    for (int trans = 0; trans <= 1; trans++) {
        int seen[LDSM_ROWS][LDSM_ROWS] = {{0}}, bad = 0;
        for (int lane = 0; lane < WARP_SIZE; lane++)
            for (int half = 0; half < HALVES; half++) {
                tile_coord got = ldsm_received(lane, half, trans);
                if (got.row < 0 || got.row >= LDSM_ROWS || got.col < 0 || got.col >= LDSM_ROWS || seen[got.row][got.col]++)
                    bad++;
            }
        check(!bad, trans ? "ldmatrix .trans: (lane, half) -> element of an 8x8 matrix is a bijection"
                          : "ldmatrix: (lane, half) -> element of an 8x8 matrix is a bijection",
              "%d elements out of range or received twice", bad);
    }
    for (int count = 1; count <= LDSM_X4; count *= 2) {
        unsigned used = 0;
        int bad = 0;
        for (int matrix = 0; matrix < count; matrix++)
            for (int row = 0; row < LDSM_ROWS; row++) {
                int lane = ldsm_address_lane(matrix, row);
                if (lane >= LDSM_ROWS * count || (used >> lane & 1)) bad++;
                used |= 1u << lane;
            }
        char name[80];
        snprintf(name, sizeof name, "ldmatrix.x%d: lanes 0-%d give each row address of matri%s 0%s once", count,
                 LDSM_ROWS * count - 1, count > 1 ? "ces" : "x", count > 1 ? (count == 2 ? "-1" : "-3") : "");
        check(!bad, name, "%d rows given by a wrong or repeated lane", bad);
    }
    for (int dim = 64; dim <= 128; dim *= 2)
        for (operand op = OPERAND_Q; op < OPERANDS; op++) {
            int aligned = 1;
            for (int inst = 0; inst < ldsm_instances(dim); inst++)
                for (int lane = 0; lane < WARP_SIZE; lane++) aligned &= ldsm_address(op, dim, inst, lane).col % CHUNK_ELEMS == 0;
            int good = use_matches(op, dim);
            char name[96];
            snprintf(name, sizeof name, "ldmatrix.x4%s of %s at D=%d delivers the mma fragments (%d instances)",
                     ldsm_trans(op) ? ".trans" : "", operand_name(op), dim, ldsm_instances(dim));
            check(good == ldsm_instances(dim) && aligned, name, "%d of %d instances match, addresses 16-byte aligned: %s",
                  good, ldsm_instances(dim), aligned ? "yes" : "no");
        }
}

int main(int argc, char **argv)
{
    int use = USE_ALL, dim = 128, csv = 0;
    const cli_option opts[] = {
        {"--use", &use, 0, 0, 0, "q|k|v|all"},
        {"--dim", &dim, 64, 128, 64, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, 3, run_checks);
    if (csv) {
        printf("use,lane,matrix,row,chunk,byte,bank\n");
        for (operand op = OPERAND_Q; op < OPERANDS; op++)
            if (use == USE_ALL || use == (int)op) print_use_csv(op, dim);
        return 0;
    }
    if (use == USE_ALL) print_maps();
    printf("step 04 loads (instance 0 shown; bank = first bank of the 16-byte row in the swizzled tile,\n"
           "one phase per 8 lanes = one matrix; cells [row][col] of the elements received, low half first)\n\n");
    for (operand op = OPERAND_Q; op < OPERANDS; op++)
        if (use == USE_ALL || use == (int)op) print_use(op, dim);
    return 0;
}
