/* copy_layout - which thread copies which 16-byte chunk of a Q/K/V tile from
 * global to shared memory (cp.async, steps 02..07), and how many 32-byte
 * sectors each warp's global request touches. --format csv prints when those
 * copies are issued and waited for: the cp.async schedule of step 05's loop. */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: copy_layout [--dim 64|128] [--rows N] [--heads H] [--format text|csv] [--check]\n"
    "A [rows][D] tile of 16-bit elements is copied in 16-byte chunks by 128 threads: thread t takes\n"
    "chunk i = t + 128k in iteration k, row = i / (D/8), chunk = i % (D/8). Prints the thread of\n"
    "every chunk and, per warp request, the 32-byte global-memory sectors it touches. In memory\n"
    "([batch, seqlen, heads, D]) a tile row is D*2 contiguous bytes and consecutive rows are\n"
    "heads*D*2 bytes apart.\n"
    "  --dim    head dimension D (default 128)\n"
    "  --rows   tile rows, 1 to 256 (default 64 = BLOCK_M = BLOCK_N)\n"
    "  --heads  heads of the tensor, 1 to 1024 (default 8): sets the row stride\n"
    "  --format csv: one line per event of step 05's prologue and loop over 4 key tiles, in the\n"
    "           kernel's order, for the figures (figures/): which tile's K or V copy is issued into\n"
    "           which stage and commit group, where cp.async.wait_group N and __syncthreads fall,\n"
    "           which tile is computed from which stage, and whether the data it reads has landed\n"
    "           (ready = 1); --dim, --rows and --heads do not change it\n"
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

/* ---- --format csv: the cp.async schedule of step 05 ----
 *
 * Not a layout but the order of steps/05's loop: its prologue and main loop
 * written out event by event (fa2_mma_kernel in steps/05_cp_async_pipeline/
 * kernel.cu), with the commit-group bookkeeping that cp.async does per thread.
 * Commit groups are numbered 0, 1, 2, ... as the kernel commits them;
 * cp.async.wait_group N returns once every group but the N newest has landed.
 * These constants mirror the kernel's: */
enum {
    STAGES = 2,         /* steps/05 STAGES: shared-memory buffers for each of K and V */
    WAIT_Q = 2,         /* steps/05 prologue, cp_async_wait<2>(): Q has landed, K0 and V0 may fly */
    WAIT_K = 1,         /* steps/05 loop top, cp_async_wait<1>(): K_nb has landed, V_nb may fly */
    WAIT_V = 2,         /* steps/05 before O += P V, cp_async_wait<2>(): V_nb has landed */
    SCHEDULE_TILES = 4, /* n_blocks of the printed schedule: 256 keys, 4 tiles of BLOCK_N */
};

enum { OP_Q, OP_K, OP_V, OPS, OP_NONE = OPS };
static const char *const op_name[OPS + 1] = {"Q", "K", "V", "-"};

typedef struct { /* what one shared-memory buffer (operand, stage) holds */
    int tile, group, consumed, last_read;
} buffer_state;

typedef struct {
    int order, iteration;
    int committed;          /* groups committed so far: the next group's number */
    int waited;             /* newest group this thread's last wait_group guarantees */
    int visible;            /* ... and every thread's, as of the last __syncthreads */
    int last_barrier;       /* order of the last __syncthreads */
    int open_op, open_tile; /* the copy issued into the group not yet committed */
    buffer_state buf[OPS][STAGES];
} schedule;

static void emit(schedule *s, const char *event, int op, int tile, int stage, int group, int wait_n, int ready)
{
    printf("%d,%d,%s,%s,%d,%d,%d,%d,%d\n", s->order++, s->iteration, event, op_name[op], tile, stage, group, wait_n,
           ready);
}

/* copy_tile_async: the tile's copies join the group that the next commit closes. Ready when the
 * buffer is unused, or its tile has been read and every warp has passed a barrier since. */
static void issue(schedule *s, int op, int tile, int stage)
{
    buffer_state *b = &s->buf[op][stage];
    int ready = b->tile < 0 || (b->consumed && b->last_read < s->last_barrier);
    b->tile = tile, b->group = s->committed, b->consumed = 0;
    s->open_op = op, s->open_tile = tile;
    char event[16];
    snprintf(event, sizeof event, "issue %s", op_name[op]);
    emit(s, event, op, tile, stage, s->committed, -1, ready);
}

static void commit(schedule *s) /* cp.async.commit_group: empty if nothing was issued since the last */
{
    emit(s, "commit", s->open_op, s->open_tile, -1, s->committed, -1, -1);
    s->committed++, s->open_op = OP_NONE, s->open_tile = -1;
}

static void wait_group(schedule *s, int n)
{
    s->waited = s->committed - 1 - n;
    emit(s, "wait", OP_NONE, -1, -1, s->waited, n, -1);
}

static void barrier(schedule *s)
{
    s->visible = s->waited, s->last_barrier = s->order;
    emit(s, "barrier", OP_NONE, -1, -1, -1, -1, -1);
}

/* A read of (op, stage) for tile `tile`: ready when that tile's copy is in the buffer and its group
 * has landed for every thread (a wait, then a barrier). */
static void compute(schedule *s, const char *event, int op, int tile, int stage)
{
    buffer_state *b = &s->buf[op][stage];
    int ready = b->tile == tile && b->group <= s->visible;
    b->consumed = 1, b->last_read = s->order;
    emit(s, event, op, tile, stage, b->group, -1, ready);
}

/* The order of steps/05's loop (fa2_mma_kernel), for n_blocks = SCHEDULE_TILES. Columns: order
 * (position in the kernel's order, not time), iteration (nb; -1 = the prologue), event, operand
 * (Q, K, V, or - for none), tile (the key tile copied, committed or computed; -1 for Q or none),
 * stage (the buffer), group (the group an issue joins or a commit closes, the newest one a wait
 * guarantees, the one a read needs), wait_n (the N of a wait), ready (an issue: its buffer is
 * free; a read: its data has landed for every thread; -1 for the other events). */
static void print_schedule_csv(void)
{
    schedule s = {0, -1, 0, -1, -1, -1, OP_NONE, -1, {{{0}}}};
    for (int op = 0; op < OPS; op++)
        for (int stage = 0; stage < STAGES; stage++) s.buf[op][stage] = (buffer_state){-1, -1, 0, -1};
    const int n_blocks = SCHEDULE_TILES;
    printf("order,iteration,event,operand,tile,stage,group,wait_n,ready\n");
    issue(&s, OP_Q, -1, 0); /* prologue: Q | K0 | V0, three commit groups */
    commit(&s);
    if (n_blocks > 0) issue(&s, OP_K, 0, 0);
    commit(&s);
    if (n_blocks > 0) issue(&s, OP_V, 0, 0);
    commit(&s);
    wait_group(&s, WAIT_Q);
    barrier(&s);
    compute(&s, "Q to registers", OP_Q, -1, 0);
    for (int nb = 0; nb < n_blocks; nb++) {
        const int stage = nb % STAGES, next = (nb + 1) % STAGES;
        s.iteration = nb;
        wait_group(&s, WAIT_K);
        barrier(&s);
        if (nb + 1 < n_blocks) issue(&s, OP_K, nb + 1, next);
        commit(&s);
        if (nb + 1 < n_blocks) issue(&s, OP_V, nb + 1, next);
        commit(&s);
        compute(&s, "S = Q K^T", OP_K, nb, stage);
        emit(&s, "softmax", OP_NONE, nb, -1, -1, -1, -1); /* mask, online softmax: registers only */
        wait_group(&s, WAIT_V);
        barrier(&s);
        compute(&s, "P V", OP_V, nb, stage);
    }
}

int main(int argc, char **argv)
{
    tile_copy t = {128, BLOCK_M, 8};
    int csv = 0;
    const cli_option opts[] = {
        {"--dim", &t.dim, 64, 128, 64, NULL},
        {"--rows", &t.rows, 1, 256, 1, NULL},
        {"--heads", &t.heads, 1, 1024, 1, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, 4, run_checks);
    if (csv) {
        print_schedule_csv();
        return 0;
    }
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
