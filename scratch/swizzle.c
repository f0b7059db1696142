/* swizzle - where each 16-byte chunk of a [rows][D] shared-memory tile lives
 * with and without the XOR swizzle of steps 03..07, and which banks it covers. */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: swizzle [--dim 64|128] [--rows N] [--format text|csv] [--check]\n"
    "Tiles are [rows][D] of 16-bit elements: a row is D*2 bytes = D/8 chunks of 16 bytes.\n"
    "Swizzled (steps 03-07): physical chunk = chunk ^ (row & 7). Prints, per logical (row, chunk),\n"
    "the physical chunk and the first of the 4 banks the chunk covers, unswizzled (step 02) and\n"
    "swizzled, and how many bank groups one chunk column spans over 8 rows (8 = conflict-free).\n"
    "  --dim   head dimension D (default 128)\n"
    "  --rows  rows to print, 1 to 256 (default 8)\n"
    "  --format csv: one line per (row, chunk) for the figures (figures/): the byte offset and first\n"
    "          bank of the chunk unswizzled, swizzled, and as TMA's 128-byte swizzle stores it (step 08 on:\n"
    "          64-column slabs of the [rows][D] tile)\n"
    "  --check assert the swizzle is a bijection and spreads every chunk column over all banks\n";

typedef struct {
    int dim, swizzled;
} tile_layout;

static int first_bank(const tile_layout *t, int row, int chunk)
{
    return smem_bank(smem_byte_offset(row, chunk * CHUNK_ELEMS, t->dim, t->swizzled));
}

static void physical_cell(int row, int chunk, const void *ctx, grid_cell *cell)
{
    (void)ctx;
    int physical = swizzle_chunk(row, chunk);
    snprintf(cell->text, sizeof cell->text, "%d", physical);
    cell->colour = physical % SWIZZLE_ROWS;
}

static void bank_cell(int row, int chunk, const void *ctx, grid_cell *cell)
{
    int bank = first_bank(ctx, row, chunk);
    snprintf(cell->text, sizeof cell->text, "%d", bank);
    cell->colour = bank / (CHUNK_BYTES / BANK_BYTES);
}

/* Distinct 16-byte bank groups that `chunk` occupies over rows first..first+7:
 * what one 8-lane phase of ldmatrix (or a 16-byte access) reading down a chunk
 * column hits; 8 means each bank is asked for one word. */
static int column_bank_groups(const tile_layout *t, int first, int chunk)
{
    int seen = 0;
    for (int row = first; row < first + SWIZZLE_ROWS; row++)
        seen |= 1 << (first_bank(t, row, chunk) / (CHUNK_BYTES / BANK_BYTES));
    return __builtin_popcount(seen);
}

static void print_column_groups(const tile_layout *t)
{
    printf("%5s |", "grp");
    for (int chunk = 0; chunk < chunks_per_row(t->dim); chunk++) {
        if (chunk && chunk % SWIZZLE_ROWS == 0) printf(" |");
        printf(" %3d", column_bank_groups(t, 0, chunk));
    }
    printf("   <- bank groups one chunk column spans over rows 0-7\n\n");
}

static void run_checks(void)
{
    for (int dim = 64; dim <= 128; dim *= 2) {
        int chunks = chunks_per_row(dim);
        int row_bijective = 1, stays_in_half = 1;
        for (int row = 0; row < BLOCK_M; row++) {
            int seen = 0;
            for (int chunk = 0; chunk < chunks; chunk++) {
                int physical = swizzle_chunk(row, chunk);
                if (physical < chunks) seen |= 1 << physical;
                stays_in_half &= physical / SWIZZLE_ROWS == chunk / SWIZZLE_ROWS;
            }
            row_bijective &= seen == (1 << chunks) - 1;
        }
        char name[100];
        snprintf(name, sizeof name, "swizzle D=%d: chunk -> physical chunk is a bijection in every row", dim);
        check(row_bijective, name, "a row maps two chunks to one place or leaves the row");
        snprintf(name, sizeof name, "swizzle D=%d: only the low 3 bits of the chunk change", dim);
        check(stays_in_half, name, "a chunk moved to another group of 8 chunks");

        /* byte level: every element of a [64][D] tile gets its own 2 bytes inside the tile */
        int bytes = BLOCK_M * dim * ELEM_BYTES;
        unsigned char *used = calloc((size_t)bytes, 1);
        int collisions = 0;
        for (int row = 0; row < BLOCK_M; row++)
            for (int col = 0; col < dim; col++) {
                int at = smem_byte_offset(row, col, dim, 1);
                if (at < 0 || at + ELEM_BYTES > bytes || used[at]) collisions++;
                else used[at] = 1;
            }
        free(used);
        snprintf(name, sizeof name, "swizzle D=%d: element -> byte offset is a bijection on the [64][%d] tile", dim, dim);
        check(!collisions, name, "%d elements collide or fall outside", collisions);

        tile_layout plain = {dim, 0}, swizzled = {dim, 1};
        int spread = 1, plain_spread = 1;
        for (int first = 0; first < BLOCK_M; first += SWIZZLE_ROWS)
            for (int chunk = 0; chunk < chunks; chunk++) {
                spread &= column_bank_groups(&swizzled, first, chunk) == SWIZZLE_ROWS;
                plain_spread &= column_bank_groups(&plain, first, chunk) == 1;
            }
        snprintf(name, sizeof name, "swizzle D=%d: a chunk column over 8 rows covers all 32 banks once", dim);
        check(spread, name, "some column spans fewer than 8 bank groups");
        snprintf(name, sizeof name, "no swizzle D=%d: a chunk column over 8 rows stays in one bank group", dim);
        check(plain_spread, name, "expected the 8-way conflict of a row length that is a multiple of 128 bytes");
    }
}

int main(int argc, char **argv)
{
    int dim = 128, rows = 8, csv = 0;
    const cli_option opts[] = {
        {"--dim", &dim, 64, 128, 64, NULL},
        {"--rows", &rows, 1, 256, 1, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, 3, run_checks);
    int chunks = chunks_per_row(dim);
    if (csv) {
        printf("row,chunk,plain_offset,plain_bank,swizzled_offset,swizzled_bank,tma_offset,tma_bank\n");
        for (int row = 0; row < rows; row++)
            for (int chunk = 0; chunk < chunks; chunk++) {
                const int col = chunk * CHUNK_ELEMS, plain = smem_byte_offset(row, col, dim, 0),
                          swizzled = smem_byte_offset(row, col, dim, 1), tma = tma_byte_offset(row, col, rows);
                printf("%d,%d,%d,%d,%d,%d,%d,%d\n", row, chunk, plain, smem_bank(plain), swizzled, smem_bank(swizzled), tma,
                       smem_bank(tma));
            }
        return 0;
    }
    printf("[%d][%d] tile of 16-bit elements: a row is %d bytes = %d chunks of 16 bytes (8 elements).\n"
           "Swizzled: physical chunk = chunk ^ (row & 7)%s.\n"
           "A row is a multiple of 128 bytes (all 32 banks), so without the swizzle chunk c of every row\n"
           "sits on the same 4 banks; with it, 8 consecutive rows put chunk c on 8 different bank groups.\n\n",
           rows, dim, dim * ELEM_BYTES, chunks,
           chunks > SWIZZLE_ROWS ? "; only the low 3 bits change, chunk c stays in its half row" : "");
    grid_shape shape = {"r\\ch", rows, chunks, 3, SWIZZLE_ROWS, SWIZZLE_ROWS};
    printf("logical (row, chunk) -> physical chunk, swizzled (unswizzled: the chunk itself)\n");
    print_grid(&shape, physical_cell, NULL);
    putchar('\n');
    tile_layout plain = {dim, 0}, swizzled = {dim, 1};
    printf("first bank of each logical chunk, unswizzled (step 02): the chunk covers banks b..b+3\n");
    print_grid(&shape, bank_cell, &plain);
    print_column_groups(&plain);
    printf("first bank of each logical chunk, swizzled (steps 03-07)\n");
    print_grid(&shape, bank_cell, &swizzled);
    print_column_groups(&swizzled);
    return 0;
}
