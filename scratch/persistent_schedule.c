/* persistent_schedule - which block of step 12's persistent kernel takes which work item
 * (batch, head, query tile), in which order: the kernel's list (TileScheduler::locate in
 * steps/12_persistent/kernel.cu: without a mask a head's q tiles in order, head after head;
 * under a causal mask longest first across ORDER_PAIRS (batch, head) pairs at a time) handed
 * out by the kernel's queue to whichever block frees first. When a block frees is the GPU's
 * doing; here it comes from a model: an item costs its key tiles plus ITEM_COST (what a block
 * spends around them: Q's load, the pipeline's fill, O's store), the blocks start together,
 * and a tie goes to the lower block. The grid is min(items, SMs) blocks. An item's key tiles
 * are n_blocks = ceil(key_end / BLOCK_N), key_end = min(seqlen_k, m0 + BLOCK_M + seqlen_k -
 * seqlen_q) under the mask. The configuration is the kernel's: 2 consumers (BLOCK_M = 128)
 * except d64 when there are more 128-row items than SMs, under the mask only from
 * CAUSAL_MANY_KEYS keys (3 consumers, BLOCK_M = 192); BLOCK_N = 128. --format csv writes the assignment for the figures
 * (figures/persistent_schedule.py). The text output ends with the balance against step 11's
 * grid: the same q tiles, one block each, which an SM takes as its last block ends. */
#include "tool.h"

static const char usage[] =
    "usage: persistent_schedule [--batch B] [--heads H] [--seqlen N] [--dim 64|128] [--causal 0|1] [--sms S]\n"
    "                           [--format text|csv] [--check]\n"
    "Step 12's work queue under a model: the kernel's list of (batch, head, query tile) work items, each taken\n"
    "by the block (one per SM) that frees first, an item costing its key tiles plus one; times are counted in\n"
    "key tiles, a block's items run one after another.\n"
    "  --batch   batch, 1 to 64 (default 1)\n"
    "  --heads   query heads, 1 to 128 (default 16)\n"
    "  --seqlen  query and key rows, 1 to 65536 (default 4096)\n"
    "  --dim     head dimension (default 128)\n"
    "  --causal  1 (default): bottom-right causal mask; 0: none\n"
    "  --sms     the GPU's SMs, 1 to 1024 (default 132, an H100 SXM)\n"
    "  --format csv: one line per work item, for the figures (figures/):\n"
    "           block,ordinal,item,batch,head,m_block,row0,rows,key_tiles,first_tile,blocks,block_m\n"
    "           (item: its place in the list; first_tile: the block's key tiles before it, the item's start)\n"
    "  --check  assert every query tile of every head is in the list exactly once, each block's items come in\n"
    "           the list's order and back to back, a causal section's items longest first, and the model's\n"
    "           orders end within list scheduling's bounds\n";

enum { WG_M = 64, BLOCK_N = 128, MAX_ITEMS = 1 << 16, MAX_SMS = 1024 };
/* ORDER_PAIRS: the kernel's section of (batch, head) pairs under the mask; CAUSAL_MANY_KEYS:
 * the keys from which the kernel takes 3 consumers at d64 under the mask; ITEM_COST: the
 * model's cost of an item around its key tiles */
enum { ORDER_PAIRS = 4, CAUSAL_MANY_KEYS = 8192, ITEM_COST = 1 };

typedef struct {
    int batch, heads, seqlen, dim, causal, sms;
} shape;

typedef struct {
    int block, ordinal, index, batch, head, m_block, row0, rows, key_tiles, first_tile;
} item;

typedef struct {
    int block_m, m_blocks, blocks, n_items;
    long end, total; /* the model's time the last block ends, and every block's work, in key tiles + ITEM_COST */
    item items[MAX_ITEMS];      /* in the list's order */
} schedule;

/* many_items(): (!causal || seqlen_k >= CAUSAL_MANY_KEYS) && 128-row items > SMs; then d64 has
 * 3 consumers (ManyItemsConfig) */
static int consumers_of(const shape *s)
{
    long items128 = (long)((s->seqlen + 2 * WG_M - 1) / (2 * WG_M)) * s->heads * s->batch;
    return (!s->causal || s->seqlen >= CAUSAL_MANY_KEYS) && items128 > s->sms && s->dim == 64 ? 3 : 2;
}

/* the WorkItem's n_blocks, as TileScheduler::locate computes it (seqlen_q = seqlen_k here: shift 0) */
static int key_tiles_of(const shape *s, int block_m, int m_block)
{
    int m0 = m_block * block_m, key_end = s->causal ? (m0 + block_m < s->seqlen ? m0 + block_m : s->seqlen) : s->seqlen;
    return (key_end + BLOCK_N - 1) / BLOCK_N;
}

/* TileScheduler::locate: item `index` of the list, its (batch, head) pair and q tile, with
 * `order_pairs` pairs a causal section (the kernel's ORDER_PAIRS; 1: step 11's grid order) */
static void locate(const shape *s, int m_blocks, int order_pairs, int index, int *pair, int *m_block)
{
    int pairs = s->heads * s->batch;
    *pair = index / m_blocks, *m_block = index % m_blocks;
    if (s->causal) {
        int section = index / (order_pairs * m_blocks), in_section = index % (order_pairs * m_blocks);
        int section_pairs = pairs - section * order_pairs < order_pairs ? pairs - section * order_pairs : order_pairs;
        *pair = section * order_pairs + in_section % section_pairs;
        *m_block = m_blocks - 1 - in_section / section_pairs;
    }
}

/* the time the last SM ends when the SMs take the n items of cost[] in order, each the next
 * one as it frees (list scheduling; a tie to the lower SM); with who, the SM of each item and
 * its start */
static long greedy_end(const int *cost, int n, int sms, int *who, long *start)
{
    static long busy_until[MAX_SMS];
    for (int i = 0; i < sms; i++) busy_until[i] = 0;
    long end = 0;
    for (int i = 0; i < n; i++) {
        int first_free = 0;
        for (int m = 1; m < sms; m++) first_free = busy_until[m] < busy_until[first_free] ? m : first_free;
        if (who) who[i] = first_free, start[i] = busy_until[first_free];
        busy_until[first_free] += cost[i];
        end = busy_until[first_free] > end ? busy_until[first_free] : end;
    }
    return end;
}

/* The list, and the queue handing it out under the model */
static void build(schedule *sc, const shape *s)
{
    static int cost[MAX_ITEMS], who[MAX_ITEMS], tiles_before[MAX_SMS], ordinal[MAX_SMS];
    static long start[MAX_ITEMS];
    sc->block_m = consumers_of(s) * WG_M;
    sc->m_blocks = (s->seqlen + sc->block_m - 1) / sc->block_m;
    sc->n_items = sc->m_blocks * s->heads * s->batch;  /* main keeps it within MAX_ITEMS */
    sc->blocks = sc->n_items < s->sms ? sc->n_items : s->sms, sc->total = 0;
    for (int i = 0; i < sc->n_items; i++) {
        item *it = &sc->items[i];
        int pair, m_block;
        locate(s, sc->m_blocks, ORDER_PAIRS, i, &pair, &m_block);
        it->index = i, it->batch = pair / s->heads, it->head = pair % s->heads, it->m_block = m_block;
        it->row0 = m_block * sc->block_m;
        it->rows = s->seqlen - it->row0 < sc->block_m ? s->seqlen - it->row0 : sc->block_m;
        it->key_tiles = key_tiles_of(s, sc->block_m, m_block);
        cost[i] = it->key_tiles + ITEM_COST, sc->total += cost[i];
    }
    sc->end = greedy_end(cost, sc->n_items, sc->blocks, who, start);
    for (int b = 0; b < sc->blocks; b++) tiles_before[b] = 0, ordinal[b] = 0;
    for (int i = 0; i < sc->n_items; i++) {
        item *it = &sc->items[i];
        it->block = who[i], it->ordinal = ordinal[who[i]]++, it->first_tile = tiles_before[who[i]];
        tiles_before[who[i]] += it->key_tiles;
    }
}

/* Step 11's grid under the same model: (q tiles, heads, batch), a causal head's tiles longest
 * first, which is the list with one pair a section; an SM takes the next block in the order of
 * the linear index, x fastest, as its block ends (what the hardware does in practice; CUDA
 * promises no order), one block an SM at a time (step 11's d128 blocks fill an SM). */
static long grid_end(const schedule *sc, const shape *s, int *max_cost)
{
    static int cost[MAX_ITEMS];
    *max_cost = 0;
    for (int i = 0; i < sc->n_items; i++) {
        int pair, m_block;
        locate(s, sc->m_blocks, 1, i, &pair, &m_block);
        cost[i] = key_tiles_of(s, sc->block_m, m_block) + ITEM_COST;
        *max_cost = cost[i] > *max_cost ? cost[i] : *max_cost;
    }
    return greedy_end(cost, sc->n_items, s->sms, NULL, NULL);
}

static void print_text(const schedule *sc, const shape *s)
{
    printf("step 12 at B%d H%d N%d d%d%s on %d SMs: %d consumers, BLOCK_M = %d, BLOCK_N = %d\n", s->batch, s->heads,
           s->seqlen, s->dim, s->causal ? " causal" : "", s->sms, sc->block_m / WG_M, sc->block_m, BLOCK_N);
    printf("%d q tiles per head, %d work items; grid = min(items, SMs) = %d blocks\n", sc->m_blocks, sc->n_items,
           sc->blocks);
    if (s->causal)
        printf("the list: longest first across %d (batch, head) pairs at a time: q tile %d of each, then %d, ...\n",
               ORDER_PAIRS, sc->m_blocks - 1, sc->m_blocks - 2);
    else printf("the list: a head's q tiles in order, head after head\n");
    printf("the queue hands the next item to the block that frees first (a model: an item costs its key tiles + %d)\n\n",
           ITEM_COST);
    printf("block | items in order: (batch, head, q tile) key tiles ...             | key tiles\n");
    int min = 1 << 30, max = 0;
    for (int b = 0; b < sc->blocks; b++) {
        int t = 0, shown = 0;
        for (int i = 0; i < sc->n_items; i++) t += sc->items[i].block == b ? sc->items[i].key_tiles : 0;
        min = t < min ? t : min, max = t > max ? t : max;
        if (b >= 6 && b < sc->blocks - 6) {
            if (b == 6) printf("  ...\n");
            continue;
        }
        printf("%5d |", b);
        for (int i = 0; i < sc->n_items; i++) {
            const item *it = &sc->items[i];
            if (it->block != b) continue;
            if (shown++ < 6) printf(" (%d,%d,%d) %d", it->batch, it->head, it->m_block, it->key_tiles);
            else if (shown == 7) printf(" ...");
        }
        printf(" | %d\n", t);
    }
    int max_cost;
    long grid = grid_end(sc, s, &max_cost);
    double mean = (double)sc->total / s->sms;
    printf("\nkey tiles per block: most %d, fewest %d\n", max, min);
    printf("balance, an item costing its key tiles + %d (the mean: %.1f per SM):\n", ITEM_COST, mean);
    printf("  step 11's grid, a block per q tile%s, SMs taking the next as one ends: the last ends at %ld, "
           "%.1f%% after the mean\n", s->causal ? " (longest first in a head, head after head)" : "", grid,
           100.0 * (grid / mean - 1));
    printf("  step 12, the queue: the last block ends at %ld, %.1f%% after the mean; step 12 / step 11 = %.3f\n",
           sc->end, 100.0 * (sc->end / mean - 1), (double)sc->end / grid);
}

static void print_csv(const schedule *sc)
{
    printf("block,ordinal,item,batch,head,m_block,row0,rows,key_tiles,first_tile,blocks,block_m\n");
    for (int i = 0; i < sc->n_items; i++) {
        const item *it = &sc->items[i];
        printf("%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", it->block, it->ordinal, it->index, it->batch, it->head,
               it->m_block, it->row0, it->rows, it->key_tiles, it->first_tile, sc->blocks, sc->block_m);
    }
}

static void check_shape(const shape *s)
{
    static schedule sc;
    static unsigned char seen[MAX_ITEMS];
    static int last_of[MAX_SMS];
    static long tiles_of[MAX_SMS];
    build(&sc, s);
    memset(seen, 0, sizeof seen);
    for (int b = 0; b < sc.blocks; b++) last_of[b] = -1, tiles_of[b] = 0;
    int once = 1, order = 1, longest_first = 1;
    for (int i = 0; i < sc.n_items; i++) {
        const item *it = &sc.items[i];
        long index = ((long)it->batch * s->heads + it->head) * sc.m_blocks + it->m_block;
        once &= seen[index] == 0, seen[index] = 1;
        /* a block's items: later in the list than its item before, and right after it */
        order &= it->index > last_of[it->block] && it->first_tile == tiles_of[it->block];
        last_of[it->block] = it->index, tiles_of[it->block] += it->key_tiles;
        /* under the mask, a section's items never grow (the list is longest first) */
        if (s->causal && i > 0 && i % (ORDER_PAIRS * sc.m_blocks) != 0) longest_first &= it->key_tiles <= sc.items[i - 1].key_tiles;
    }
    for (long i = 0; i < (long)sc.m_blocks * s->heads * s->batch; i++) once &= seen[i] == 1;
    char name[256], what[120];
    snprintf(what, sizeof what, "B%d H%d N%d d%d%s on %d SMs", s->batch, s->heads, s->seqlen, s->dim,
             s->causal ? " causal" : "", s->sms);
    snprintf(name, sizeof name, "persistent_schedule %s: every (batch, head, q tile) is in the list exactly once", what);
    check(once, name, "an item is listed twice or never");
    snprintf(name, sizeof name, "persistent_schedule %s: each block's items come in the list's order, back to back", what);
    check(order, name, "a block's items are out of the list's order");
    if (s->causal) {
        snprintf(name, sizeof name, "persistent_schedule %s: each section of %d pairs lists its items longest first", what,
                 ORDER_PAIRS);
        check(longest_first, name, "an item of a section is longer than the one before it");
    }
    /* list scheduling ends no earlier than the mean and no later than the mean plus the largest item (Graham) */
    int max_cost;
    long grid = grid_end(&sc, s, &max_cost);
    double mean = (double)sc.total / s->sms;
    int bounded = grid >= mean && grid <= mean + max_cost && sc.end >= mean && sc.end <= (double)sc.total / sc.blocks + max_cost;
    snprintf(name, sizeof name, "persistent_schedule %s: the balance model's orders end between the mean and the mean "
             "plus one item", what);
    check(bounded, name, "grid %ld, queue %ld against a mean of %.1f and an item of at most %d", grid, sc.end, mean,
          max_cost);
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
