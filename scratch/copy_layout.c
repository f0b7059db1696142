/* copy_layout - which thread copies which 16-byte chunk of a Q/K/V tile from
 * global to shared memory (cp.async, steps 02..07), and how many 32-byte
 * sectors each warp's global request touches. */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: copy_layout [--dim 64|128] [--rows N] [--heads H] [--check]\n"
    "A [rows][D] tile of 16-bit elements is copied in 16-byte chunks by 128 threads: thread t takes\n"
    "chunk i = t + 128k in iteration k, row = i / (D/8), chunk = i % (D/8). Prints the thread of\n"
    "every chunk and, per warp request, the 32-byte global-memory sectors it touches. In memory\n"
    "([batch, seqlen, heads, D]) a tile row is D*2 contiguous bytes and consecutive rows are\n"
    "heads*D*2 bytes apart.\n"
    "  --dim    head dimension D (default 128)\n"
    "  --rows   tile rows, 1 to 256 (default 64 = BLOCK_M = BLOCK_N)\n"
    "  --heads  heads of the tensor, 1 to 1024 (default 8): sets the row stride\n"
    "  --check  assert every chunk is copied exactly once and every request touches the fewest sectors\n";

enum { SECTOR_BYTES = 32, LINE_BYTES = 128 };

typedef struct {
    int dim, rows, heads;
} tile_copy;

static int row_stride_bytes(const tile_copy *t) { return t->heads * t->dim * ELEM_BYTES; }

static void thread_cell(int row, int chunk, const void *ctx, grid_cell *cell)
{
    const tile_copy *t = ctx;
    int index = row * chunks_per_row(t->dim) + chunk;
    int thread = index % THREADS;
    snprintf(cell->text, sizeof cell->text, "%d", thread);
    cell->colour = thread / WARP_SIZE;
}

typedef struct {
    int chunks, first_row, last_row, sectors, lines;
} request_footprint;

/* Adds the ids first..last to the set ids[0..count) and returns its new size. */
static int add_distinct(long *ids, int count, long first, long last)
{
    for (long id = first; id <= last; id++) {
        int seen = 0;
        for (int i = 0; i < count; i++) seen |= ids[i] == id;
        if (!seen) ids[count++] = id;
    }
    return count;
}

/* Distinct 32-byte sectors and 128-byte lines of one warp request, with byte
 * offsets from the tile's first element (itself 32-byte aligned: cudaMalloc
 * returns 256-byte aligned memory and every row/head offset is a multiple of D*2). */
static request_footprint footprint(const tile_copy *t, int iter, int warp)
{
    request_footprint f = {0, -1, -1, 0, 0};
    long sectors[2 * WARP_SIZE], lines[2 * WARP_SIZE]; /* a chunk spans at most 2 of either */
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        tile_coord c = copy_chunk(warp * WARP_SIZE + lane, iter, t->dim);
        if (c.row >= t->rows) continue;
        if (f.first_row < 0) f.first_row = c.row;
        f.last_row = c.row;
        f.chunks++;
        long first = (long)c.row * row_stride_bytes(t) + c.col * CHUNK_BYTES, last = first + CHUNK_BYTES - 1;
        f.sectors = add_distinct(sectors, f.sectors, first / SECTOR_BYTES, last / SECTOR_BYTES);
        f.lines = add_distinct(lines, f.lines, first / LINE_BYTES, last / LINE_BYTES);
    }
    return f;
}

static int ideal_sectors(const request_footprint *f) { return (f->chunks * CHUNK_BYTES + SECTOR_BYTES - 1) / SECTOR_BYTES; }

/* Every (row, chunk) of the tile copied exactly once, and nothing outside it. */
static int copies_each_chunk_once(const tile_copy *t)
{
    int chunks = chunks_per_row(t->dim);
    int *copies = calloc((size_t)(t->rows * chunks), sizeof *copies);
    int bad = 0;
    for (int iter = 0; iter < copy_iterations(t->rows, t->dim); iter++)
        for (int thread = 0; thread < THREADS; thread++) {
            tile_coord c = copy_chunk(thread, iter, t->dim);
            if (c.row < t->rows) copies[c.row * chunks + c.col]++;
        }
    for (int i = 0; i < t->rows * chunks; i++) bad += copies[i] != 1;
    free(copies);
    return !bad;
}

static void print_requests(const tile_copy *t)
{
    printf("global requests (one per warp per iteration; a warp asks for 32 x 16 = 512 bytes at best):\n");
    printf(" iter warp | rows    | bytes | 32 B sectors (ideal) | 128 B lines\n");
    int iterations = copy_iterations(t->rows, t->dim), worst_excess = 0, requests = 0;
    for (int iter = 0; iter < iterations; iter++)
        for (int warp = 0; warp < WARPS; warp++) {
            request_footprint f = footprint(t, iter, warp);
            if (!f.chunks) continue;
            requests++;
            if (f.sectors - ideal_sectors(&f) > worst_excess) worst_excess = f.sectors - ideal_sectors(&f);
            if (iter > 0 && iter < iterations - 1) continue;
            printf(" %4d %4d | %3d-%-3d | %5d | %12d (%4d) | %11d\n", iter, warp, f.first_row, f.last_row,
                   f.chunks * CHUNK_BYTES, f.sectors, ideal_sectors(&f), f.lines);
        }
    if (iterations > 2) printf(" (first and last iteration shown)\n");
    printf("all %d requests: %s\n", requests,
           worst_excess ? "some touch more sectors than their bytes need" : "every one touches exactly the sectors its bytes need");
}

static void run_checks(void)
{
    static const int heads[] = {1, 8, 32};
    static const int tile_rows[] = {BLOCK_M, 17}; /* a full tile and a tail tile */
    for (int dim = 64; dim <= 128; dim *= 2) {
        for (int r = 0; r < 2; r++) {
            tile_copy t = {dim, tile_rows[r], 8};
            char name[96];
            snprintf(name, sizeof name, "copy D=%d rows=%d: every 16-byte chunk is copied exactly once", dim, t.rows);
            check(copies_each_chunk_once(&t), name, "a chunk copied twice or not at all");
        }
        for (int h = 0; h < 3; h++) {
            tile_copy t = {dim, BLOCK_M, heads[h]};
            int excess = 0, whole_rows = 1;
            for (int iter = 0; iter < copy_iterations(t.rows, dim); iter++)
                for (int warp = 0; warp < WARPS; warp++) {
                    request_footprint f = footprint(&t, iter, warp);
                    excess += f.sectors - ideal_sectors(&f);
                    whole_rows &= (f.last_row - f.first_row + 1) * chunks_per_row(dim) == f.chunks;
                }
            char name[112];
            snprintf(name, sizeof name, "copy D=%d heads=%d: each warp request reads whole rows in the fewest 32-byte sectors",
                     dim, heads[h]);
            check(!excess && whole_rows, name, "%d extra sectors, whole rows: %s", excess, whole_rows ? "yes" : "no");
        }
    }
}

int main(int argc, char **argv)
{
    tile_copy t = {128, BLOCK_M, 8};
    const cli_option opts[] = {
        {"--dim", &t.dim, 64, 128, 64, NULL},
        {"--rows", &t.rows, 1, 256, 1, NULL},
        {"--heads", &t.heads, 1, 1024, 1, NULL},
    };
    parse_cli(argc, argv, usage, opts, 3, run_checks);
    int chunks = chunks_per_row(t.dim);
    printf("[%d][%d] tile, %d chunks of 16 bytes per row, %d chunks, %d iterations of 128 threads;\n"
           "thread t copies chunk t + 128k, so warp w (threads 32w..32w+31, one colour on a terminal)\n"
           "takes %d consecutive chunks = %s.\n"
           "cells: thread id; a rule between iterations\n",
           t.rows, t.dim, chunks, t.rows * chunks, copy_iterations(t.rows, t.dim), WARP_SIZE,
           t.dim == 128 ? "2 whole rows" : "4 whole rows");
    grid_shape shape = {"r\\ch", t.rows, chunks, 3, SWIZZLE_ROWS, THREADS / chunks};
    print_grid(&shape, thread_cell, &t);
    printf("\nin global memory a row is %d contiguous bytes; rows are %d bytes apart (heads %d x D %d x 2 bytes)\n",
           t.dim * ELEM_BYTES, row_stride_bytes(&t), t.heads, t.dim);
    print_requests(&t);
    printf("each group of 8 lanes writes one 128-byte run of a shared row: conflict-free with or without the\n"
           "swizzle (see bank_conflicts), which only permutes chunks inside 128-byte groups.\n");
    return 0;
}
