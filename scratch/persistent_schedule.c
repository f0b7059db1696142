/* persistent_schedule - which block of step 12's persistent kernel takes which work item
 * (batch, head, query tile), in which order, with the kernel's own TileScheduler
 * (steps/12_persistent/kernel.cu): the work comes in units, one q tile of one (batch, head)
 * pair, or under a causal mask two, q tiles m_blocks - 1 - k and k of the pair (the one that
 * sees the most keys with the one that sees the fewest); unit u belongs to pair
 * u / units_per_pair; block b takes units b, b + gridDim.x, b + 2 gridDim.x, ... and within a
 * causal unit first the long tile, then the short one (the middle tile of an odd m_blocks
 * alone). The grid is min(units, SMs) blocks. An item's work is its key tiles, n_blocks =
 * ceil(key_end / BLOCK_N), key_end = min(seqlen_k, m0 + BLOCK_M + seqlen_k - seqlen_q) under the
 * mask. The configuration is the kernel's: 2 consumers (BLOCK_M = 128) except d64 without a
 * mask when there are more 128-row items than SMs (3 consumers, BLOCK_M = 192); BLOCK_N = 128.
 * --format csv writes the assignment for the figures (figures/persistent_schedule.py).
 * The text output ends with the balance against step 11's grid: the same q tiles, one block
 * each, which an SM takes as its last block ends (balance(), below). */
#include "tool.h"

static const char usage[] =
    "usage: persistent_schedule [--batch B] [--heads H] [--seqlen N] [--dim 64|128] [--causal 0|1] [--sms S]\n"
    "                           [--format text|csv] [--check]\n"
    "Step 12's tile scheduler: which block (one per SM) computes which (batch, head, query tile) work item, in\n"
    "which order, and how many key tiles each item has (its work). Times are counted in key tiles, the\n"
    "item's work; a block's items run one after another.\n"
    "  --batch   batch, 1 to 64 (default 1)\n"
    "  --heads   query heads, 1 to 128 (default 16)\n"
    "  --seqlen  query and key rows, 1 to 65536 (default 4096)\n"
    "  --dim     head dimension (default 128)\n"
    "  --causal  1 (default): bottom-right causal mask; 0: none\n"
    "  --sms     the GPU's SMs, 1 to 1024 (default 132, an H100 SXM)\n"
    "  --format csv: one line per work item, for the figures (figures/):\n"
    "           block,ordinal,unit,batch,head,m_block,row0,rows,key_tiles,first_tile,blocks,block_m\n"
    "           (first_tile: the block's key tiles before this item, the item's start in key tiles)\n"
    "  --check  assert every query tile of every head is computed exactly once, each block's items follow\n"
    "           the kernel's order, (causal, Nq = Nk) every unit of two tiles holds m_blocks + 1 key tiles, and\n"
    "           the balance model's SMs end within list scheduling's bounds\n";

enum { WG_M = 64, BLOCK_N = 128, MAX_ITEMS = 1 << 16, MAX_SMS = 1024 };

typedef struct {
    int batch, heads, seqlen, dim, causal, sms;
} shape;

typedef struct {
    int block, ordinal, unit, batch, head, m_block, row0, rows, key_tiles, first_tile;
} item;

typedef struct {
    int block_m, m_blocks, units_per_pair, units, blocks, n_items;
    item items[MAX_ITEMS];
} schedule;

/* many_items(): !causal && 128-row items > SMs; then d64 has 3 consumers (ManyItemsConfig) */
static int consumers_of(const shape *s)
{
    long items128 = (long)((s->seqlen + 2 * WG_M - 1) / (2 * WG_M)) * s->heads * s->batch;
    return !s->causal && items128 > s->sms && s->dim == 64 ? 3 : 2;
}

/* the WorkItem's n_blocks, as TileScheduler::next computes it (seqlen_q = seqlen_k here: shift 0) */
static int key_tiles_of(const shape *s, int block_m, int m_block)
{
    int m0 = m_block * block_m, key_end = s->causal ? (m0 + block_m < s->seqlen ? m0 + block_m : s->seqlen) : s->seqlen;
    return (key_end + BLOCK_N - 1) / BLOCK_N;
}

/* TileScheduler::next, called until it returns false, block by block */
static void build(schedule *sc, const shape *s)
{
    sc->block_m = consumers_of(s) * WG_M;
    sc->m_blocks = (s->seqlen + sc->block_m - 1) / sc->block_m;
    sc->units_per_pair = s->causal ? (sc->m_blocks + 1) / 2 : sc->m_blocks;
    sc->units = sc->units_per_pair * s->heads * s->batch;
    sc->blocks = sc->units < s->sms ? sc->units : s->sms;
    sc->n_items = 0;
    int tiles_per_unit = s->causal ? 2 : 1;
    for (int block = 0; block < sc->blocks; block++) {
        int tile = 0, ordinal = 0;
        for (long j = 0;; j++) {
            long u = block + j / tiles_per_unit * sc->blocks;
            if (u >= sc->units) break;
            int pair = (int)(u / sc->units_per_pair), k = (int)(u % sc->units_per_pair);
            int m_block = j % tiles_per_unit == 0 ? (s->causal ? sc->m_blocks - 1 - k : k) : k;
            if (j % tiles_per_unit == 1 && k == sc->m_blocks - 1 - k) continue;
            if (sc->n_items >= MAX_ITEMS) cli_error("more than %d work items", MAX_ITEMS);
            item *it = &sc->items[sc->n_items++];
            it->block = block, it->ordinal = ordinal, it->unit = (int)u, it->batch = pair / s->heads;
            it->head = pair % s->heads, it->m_block = m_block, it->row0 = m_block * sc->block_m;
            it->rows = s->seqlen - it->row0 < sc->block_m ? s->seqlen - it->row0 : sc->block_m;
            it->key_tiles = key_tiles_of(s, sc->block_m, m_block), it->first_tile = tile;
            tile += it->key_tiles, ordinal++;
        }
    }
}

static int block_tiles(const schedule *sc, int block)
{
    int t = 0;
    for (int i = 0; i < sc->n_items; i++) t += sc->items[i].block == block ? sc->items[i].key_tiles : 0;
    return t;
}

/* The balance model. An item costs its key tiles plus ITEM_COST, what a block spends around
 * them (Q's load, the pipeline's fill, O's store), the same in both steps: the model leaves out
 * what persistence hides of it, and counts only who waits for whom at the end. Step 11
 * launches one block per q tile, grid (q tiles, heads, batch), a causal head's tiles longest
 * first; an SM takes the next block in the order of the linear index, x fastest, as its block
 * ends (what the hardware does in practice; CUDA promises no order), one block an SM at a time
 * (step 11's d128 blocks fill an SM). ORDER_PAIRS: the order step 12 does not use, longest
 * first across that many (batch, head) pairs at a time, taken as SMs free (the backward steps'
 * causal order), given for comparison. */
enum { ITEM_COST = 1, ORDER_PAIRS = 4 };

/* the time the last SM ends when the SMs take the n items of cost[] in order, each the next
 * one as it frees (list scheduling) */
static long greedy_end(const int *cost, int n, int sms)
{
    static long busy_until[MAX_SMS];
    for (int i = 0; i < sms; i++) busy_until[i] = 0;
    long end = 0;
    for (int i = 0; i < n; i++) {
        int first_free = 0;
        for (int m = 1; m < sms; m++) first_free = busy_until[m] < busy_until[first_free] ? m : first_free;
        busy_until[first_free] += cost[i];
        end = busy_until[first_free] > end ? busy_until[first_free] : end;
    }
    return end;
}

typedef struct {
    long total, grid_end, pairs_end, schedule_end; /* work, and where the last SM ends in each order */
    int max_cost;
} balance_model;

/* Where the last SM ends when the SMs take the q tiles as they free, in sections of `section`
 * (batch, head) pairs, a section's longest tiles first across its pairs (causal; in order
 * without the mask). A section of 1 pair is step 11's grid order. */
static long sections_end(const schedule *sc, const shape *s, int section, long *total, int *max_cost)
{
    static int cost[MAX_ITEMS];
    int n_pairs = s->batch * s->heads, n = 0;
    *total = 0, *max_cost = 0;
    for (int first = 0; first < n_pairs; first += section)
        for (int x = 0; x < sc->m_blocks; x++)
            for (int pair = first; pair < first + section && pair < n_pairs; pair++) {
                cost[n] = key_tiles_of(s, sc->block_m, s->causal ? sc->m_blocks - 1 - x : x) + ITEM_COST;
                *total += cost[n], *max_cost = cost[n] > *max_cost ? cost[n] : *max_cost;
                n++;
            }
    return greedy_end(cost, n, s->sms);
}

static balance_model balance(const schedule *sc, const shape *s)
{
    static long block_work[MAX_SMS];
    balance_model bm = {0, 0, 0, 0, 0};
    bm.grid_end = sections_end(sc, s, 1, &bm.total, &bm.max_cost);
    bm.pairs_end = sections_end(sc, s, ORDER_PAIRS, &bm.total, &bm.max_cost);
    for (int b = 0; b < sc->blocks; b++) block_work[b] = 0;
    for (int i = 0; i < sc->n_items; i++) block_work[sc->items[i].block] += sc->items[i].key_tiles + ITEM_COST;
    for (int b = 0; b < sc->blocks; b++) bm.schedule_end = block_work[b] > bm.schedule_end ? block_work[b] : bm.schedule_end;
    return bm;
}

static void print_balance(const schedule *sc, const shape *s)
{
    balance_model bm = balance(sc, s);
    double mean = (double)bm.total / s->sms;
    printf("\nbalance, an item costing its key tiles + %d (the mean: %.1f per SM):\n", ITEM_COST, mean);
    printf("  step 11's grid, a block per q tile%s, SMs taking the next as one ends: the last ends at %ld, "
           "%.1f%% after the mean\n", s->causal ? " (longest first in a head, head after head)" : "", bm.grid_end,
           100.0 * (bm.grid_end / mean - 1));
    printf("  step 12, this schedule: the last block ends at %ld, %.1f%% after the mean; step 12 / step 11 = %.3f\n",
           bm.schedule_end, 100.0 * (bm.schedule_end / mean - 1), (double)bm.schedule_end / bm.grid_end);
    printf("  longest first across %d (batch, head) pairs at a time, SMs taking the next as one ends: %ld, %.1f%% "
           "after the mean\n", ORDER_PAIRS, bm.pairs_end, 100.0 * (bm.pairs_end / mean - 1));
}

static void print_text(const schedule *sc, const shape *s)
{
    printf("step 12 at B%d H%d N%d d%d%s on %d SMs: %d consumers, BLOCK_M = %d, BLOCK_N = %d\n", s->batch, s->heads,
           s->seqlen, s->dim, s->causal ? " causal" : "", s->sms, sc->block_m / WG_M, sc->block_m, BLOCK_N);
    printf("%d q tiles per head; units of %s: %d per (batch, head) pair, %d in all; grid = min(units, SMs) = %d blocks\n",
           sc->m_blocks, s->causal ? "two q tiles (m_blocks - 1 - k, then k)" : "one q tile", sc->units_per_pair,
           sc->units, sc->blocks);
    printf("block b takes units b, b + %d, ...; unit u is pair u / %d (batch, head), k = u %% %d\n\n", sc->blocks,
           sc->units_per_pair, sc->units_per_pair);
    printf("block | items in order: (batch, head, q tile) key tiles ...             | key tiles\n");
    int min = 1 << 30, max = 0;
    long total = 0;
    for (int b = 0; b < sc->blocks; b++) {
        int t = block_tiles(sc, b);
        min = t < min ? t : min, max = t > max ? t : max, total += t;
        if (b >= 6 && b < sc->blocks - 6) {
            if (b == 6) printf("  ...\n");
            continue;
        }
        printf("%5d |", b);
        int shown = 0;
        for (int i = 0; i < sc->n_items; i++) {
            const item *it = &sc->items[i];
            if (it->block != b) continue;
            if (shown++ < 6) printf(" (%d,%d,%d) %d", it->batch, it->head, it->m_block, it->key_tiles);
            else if (shown == 7) printf(" ...");
        }
        printf(" | %d\n", t);
    }
    printf("\nkey tiles per block: most %d, fewest %d, mean %.1f: the last block ends at %d, %.1f%% after the mean\n",
           max, min, (double)total / sc->blocks, max, 100.0 * (max * sc->blocks - total) / total);
    print_balance(sc, s);
}

static void print_csv(const schedule *sc)
{
    printf("block,ordinal,unit,batch,head,m_block,row0,rows,key_tiles,first_tile,blocks,block_m\n");
    for (int i = 0; i < sc->n_items; i++) {
        const item *it = &sc->items[i];
        printf("%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", it->block, it->ordinal, it->unit, it->batch, it->head,
               it->m_block, it->row0, it->rows, it->key_tiles, it->first_tile, sc->blocks, sc->block_m);
    }
}

static void check_shape(const shape *s)
{
    static schedule sc;
    static unsigned char seen[MAX_ITEMS];
    build(&sc, s);
    memset(seen, 0, sizeof seen);
    int once = 1, order = 1, units_equal = 1;
    for (int i = 0; i < sc.n_items; i++) {
        const item *it = &sc.items[i];
        long index = ((long)it->batch * s->heads + it->head) * sc.m_blocks + it->m_block;
        once &= seen[index] == 0, seen[index] = 1;
        /* the kernel's order: a block's units ascend by gridDim.x; within a causal unit, the long tile first */
        if (i > 0 && sc.items[i - 1].block == it->block) {
            const item *prev = &sc.items[i - 1];
            order &= it->unit == prev->unit ? (s->causal && prev->m_block > it->m_block)
                                            : it->unit == prev->unit + sc.blocks;
            order &= it->first_tile == prev->first_tile + prev->key_tiles;
        }
    }
    for (long i = 0; i < (long)sc.m_blocks * s->heads * s->batch; i++) once &= seen[i] == 1;
    if (s->causal && s->seqlen % sc.block_m == 0)
        for (int u = 0; u < sc.units; u++) {
            int tiles = 0, parts = 0;
            for (int i = 0; i < sc.n_items; i++)
                if (sc.items[i].unit == u) tiles += sc.items[i].key_tiles, parts++;
            if (parts == 2) units_equal &= tiles == sc.m_blocks * sc.block_m / BLOCK_N + 1;
        }
    char name[200];
    snprintf(name, sizeof name, "persistent_schedule B%d H%d N%d d%d%s on %d SMs: every (batch, head, q tile) is "
             "computed exactly once", s->batch, s->heads, s->seqlen, s->dim, s->causal ? " causal" : "", s->sms);
    check(once, name, "an item is computed twice or never");
    snprintf(name, sizeof name, "persistent_schedule B%d H%d N%d d%d%s on %d SMs: each block takes units b, b + "
             "gridDim.x, ... (long tile first), its items back to back", s->batch, s->heads, s->seqlen, s->dim,
             s->causal ? " causal" : "", s->sms);
    check(order, name, "a block's items are out of the kernel's order");
    /* list scheduling ends no earlier than the mean and no later than the mean plus the largest
     * item (Graham's bound); a static schedule no earlier than the mean */
    balance_model bm = balance(&sc, s);
    double mean = (double)bm.total / s->sms;
    int bounded = bm.grid_end >= mean && bm.grid_end <= mean + bm.max_cost && bm.pairs_end >= mean &&
                  bm.pairs_end <= mean + bm.max_cost && bm.schedule_end >= mean;
    snprintf(name, sizeof name, "persistent_schedule B%d H%d N%d d%d%s on %d SMs: the balance model's orders end "
             "between the mean and the mean plus one item", s->batch, s->heads, s->seqlen, s->dim,
             s->causal ? " causal" : "", s->sms);
    check(bounded, name, "grid %ld, pairs %ld, schedule %ld against a mean of %.1f and an item of at most %d",
          bm.grid_end, bm.pairs_end, bm.schedule_end, mean, bm.max_cost);
    if (s->causal && s->seqlen % sc.block_m == 0) {
        snprintf(name, sizeof name, "persistent_schedule B%d H%d N%d causal: every unit of two q tiles holds "
                 "m_blocks + 1 = %d key tiles", s->batch, s->heads, s->seqlen, sc.m_blocks + 1);
        check(units_equal, name, "units of unequal work");
    }
}

static void run_checks(void)
{
    const shape shapes[] = {
        {1, 16, 4096, 128, 1, 132}, {4, 16, 4096, 128, 1, 132}, {4, 16, 4096, 64, 0, 132},
        {1, 3, 1000, 64, 1, 132},  {2, 5, 777, 128, 1, 7},      {16, 16, 1024, 64, 1, 132},
        {1, 16, 16384, 128, 1, 132},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) check_shape(&shapes[i]);
}

int main(int argc, char **argv)
{
    shape s = {1, 16, 4096, 128, 1, 132};
    int csv = 0;
    const cli_option opts[] = {
        {"--batch", &s.batch, 1, 64, 1, NULL},
        {"--heads", &s.heads, 1, 128, 1, NULL},
        {"--seqlen", &s.seqlen, 1, 65536, 1, NULL},
        {"--dim", &s.dim, 64, 128, 64, NULL},
        {"--causal", &s.causal, 0, 1, 1, NULL},
        {"--sms", &s.sms, 1, MAX_SMS, 1, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, sizeof opts / sizeof *opts, run_checks);
    long tiles = (long)((s.seqlen + 2 * WG_M - 1) / (2 * WG_M)) * s.heads * s.batch;
    if (tiles > MAX_ITEMS) cli_error("%ld q tiles is more than this program holds (%d)", tiles, MAX_ITEMS);
    static schedule sc;
    build(&sc, &s);
    if (csv) print_csv(&sc);
    else print_text(&sc, &s);
    return 0;
}
