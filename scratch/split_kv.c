/* split_kv - step 13's split of the keys over blocks and the merge of the splits' partial
 * results, with the kernel's formulas (steps/13_split_kv/kernel.cu):
 *  - packing (unpack_row): packed row r of kv head h_kv is query row r / group of query head
 *    h_kv * group + r % group, group = heads_q / heads_kv; a block holds BLOCK_M = 16 packed
 *    rows; m_blocks = ceil(group * seqlen_q / 16) (m_blocks_of);
 *  - the split count (choose_plan, max_splits): base_blocks = batch x heads_kv x m_blocks; at
 *    most min(MAX_SPLIT_BLOCKS / base_blocks, MAX_SPLITS, key tiles of 128) splits; the
 *    efficiency of s splits is the work, base_blocks x n_tiles, over what the waves could do
 *    in the time of the longest range, waves x wave x ceil(n_tiles / s), wave = SMs x blocks
 *    per SM; the choice is the fewest splits within 5% of the best;
 *  - the ranges (fa2_split_kernel): tiles_per_split = ceil(n_tiles / splits), split s takes
 *    key tiles [s tiles_per_split, min(n_tiles, (s + 1) tiles_per_split));
 *  - the merge (fa2_split_kernel, in the last block of a tile to arrive): LSE = log sum_s
 *    exp(LSE_s), O = sum_s exp(LSE_s - LSE) O_s.
 * The layout's key tile (BLOCK_N) and the blocks per SM are inputs here: at d128 on an H100 the
 * kernel takes LargeLayout, 128 keys x 2 stages, 1 block per SM (what FA2_EMULATE=h100
 * build/step13/fa2 --plan prints for the decode shape). The merge weights are those of one
 * input of this program's own (Q and K uniform in [-scale, scale), a fixed seed; --scale makes
 * the softmax peakier), computed in double for the query heads of kv head 0: an illustration
 * of the formula, not a measurement.
 * --format csv writes all of it for the figures (figures/split_kv.py). */
#include "tool.h"

#include <math.h>

static const char usage[] =
    "usage: split_kv [--batch B] [--heads H] [--kv-heads K] [--seqlen-q N] [--seqlen-k N] [--dim 64|128]\n"
    "                [--sms S] [--blocks-per-sm N] [--block-n 64|128] [--scale X] [--format text|csv] [--check]\n"
    "Step 13's split-KV plan: how a GQA group's query heads are packed as the rows of a 16-row tile, how many\n"
    "splits the keys are cut into (choose_plan) and which key tiles each split's block takes; then the\n"
    "merge of the splits' partial results, with the weights exp(LSE_s - LSE) for one random input.\n"
    "  --batch, --heads, --kv-heads, --seqlen-q, --seqlen-k, --dim   the shape (default B1 Hq32 Hkv8 Nq1\n"
    "                Nk32768 d128, a decode step)\n"
    "  --sms            the GPU's SMs (default 132, an H100 SXM)\n"
    "  --blocks-per-sm  blocks of the layout one SM holds (default 1: LargeLayout at d128 on an H100)\n"
    "  --block-n        keys per tile of the layout (default 128)\n"
    "  --scale          Q and K uniform in [-scale, scale), 1 to 16 (default 1); larger: a peakier softmax\n"
    "  --format csv: one line per split (kind = split), per packed row of block 0 (kind = row) and per\n"
    "                (row of kv head 0, split) merge weight (kind = merge), for the figures (figures/)\n"
    "  --check      assert the splits cover every key tile once, the plan is the kernel's rule, the\n"
    "               packing is a bijection and the merge gives the whole softmax's LSE\n";

enum { BLOCK_M = 16, WARPS = 4, MAX_SPLITS = 128, MAX_SPLIT_BLOCKS = 4096, SPLIT_KEY_TILE = 128 };

typedef struct {
    int batch, heads, kv_heads, seqlen_q, seqlen_k, dim, sms, blocks_per_sm, block_n_index, scale;
} shape;

typedef struct {
    int group, m_blocks, base_blocks, cap, splits, n_tiles, tiles_per_split, block_n;
    double efficiency[MAX_SPLITS + 1];
} plan;

static int block_n_of(const shape *s) { return s->block_n_index ? 128 : 64; }

static void make_plan(plan *p, const shape *s)
{
    p->group = s->heads / s->kv_heads;
    p->m_blocks = (p->group * s->seqlen_q + BLOCK_M - 1) / BLOCK_M;
    p->base_blocks = s->batch * s->kv_heads * p->m_blocks;
    long by_blocks = MAX_SPLIT_BLOCKS / p->base_blocks;
    long cap = by_blocks < MAX_SPLITS ? by_blocks : MAX_SPLITS;
    int tiles128 = (s->seqlen_k + SPLIT_KEY_TILE - 1) / SPLIT_KEY_TILE;
    p->cap = (int)(cap < 1 ? 1 : cap < tiles128 ? cap : tiles128);
    long wave = (long)s->sms * s->blocks_per_sm;
    p->block_n = block_n_of(s);
    p->n_tiles = (s->seqlen_k + p->block_n - 1) / p->block_n; /* non-causal: every key */
    double best = 0;
    for (int k = 1; k <= p->cap; k++) {
        long blocks = (long)p->base_blocks * k, waves = (blocks + wave - 1) / wave;
        long longest = (p->n_tiles + k - 1) / k; /* the key tiles of the longest range */
        p->efficiency[k] = (double)((long)p->base_blocks * p->n_tiles) / (double)(waves * wave * longest);
        best = p->efficiency[k] > best ? p->efficiency[k] : best;
    }
    p->splits = 1;
    while (p->efficiency[p->splits] < 0.95 * best) p->splits++;
    p->tiles_per_split = (p->n_tiles + p->splits - 1) / p->splits;
}

static int tile_lo(const plan *p, int split) { int t = split * p->tiles_per_split; return t < p->n_tiles ? t : p->n_tiles; }
static int tile_hi(const plan *p, int split)
{
    int t = tile_lo(p, split) + p->tiles_per_split;
    return t < p->n_tiles ? t : p->n_tiles;
}

/* ---- the merge, for one input ---- */

static unsigned long long rng_state;
static double uniform(double scale)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return scale * (2.0 * (double)(rng_state >> 11) / 9007199254740992.0 - 1.0);
}

enum { MAX_GROUP = 16 };
typedef struct {
    int rows;                                 /* the group's query heads (seqlen_q = 1 rows each) */
    double lse_split[MAX_GROUP][MAX_SPLITS];  /* LSE_s of each row */
    double lse[MAX_GROUP], lse_whole[MAX_GROUP];
} merge;

/* Row r = query head r of kv head 0 (query 0): its scores against every key, LSE per split and
 * the whole, in double. */
static void make_merge(merge *m, const shape *s, const plan *p)
{
    int keys = s->seqlen_k, dim = s->dim;
    m->rows = p->group < MAX_GROUP ? p->group : MAX_GROUP;
    double *kmat = malloc(sizeof(double) * (size_t)keys * dim), q[128];
    if (!kmat) {
        fprintf(stderr, "error: out of memory\n");
        exit(2);
    }
    rng_state = 1;
    for (long i = 0; i < (long)keys * dim; i++) kmat[i] = uniform(s->scale);
    double scale = 1.0 / sqrt((double)dim);
    for (int r = 0; r < m->rows; r++) {
        for (int d = 0; d < dim; d++) q[d] = uniform(s->scale);
        double max_s[MAX_SPLITS], sum_s[MAX_SPLITS], max_all = -INFINITY;
        for (int sp = 0; sp < p->splits; sp++) max_s[sp] = -INFINITY, sum_s[sp] = 0;
        double *score = malloc(sizeof(double) * (size_t)keys);
        for (int j = 0; j < keys; j++) {
            double acc = 0;
            for (int d = 0; d < dim; d++) acc += q[d] * kmat[(long)j * dim + d];
            score[j] = acc * scale;
            int sp = j / p->block_n / p->tiles_per_split;
            max_s[sp] = score[j] > max_s[sp] ? score[j] : max_s[sp];
            max_all = score[j] > max_all ? score[j] : max_all;
        }
        double whole = 0;
        for (int j = 0; j < keys; j++) {
            int sp = j / p->block_n / p->tiles_per_split;
            sum_s[sp] += exp(score[j] - max_s[sp]);
            whole += exp(score[j] - max_all);
        }
        free(score);
        double lmax = -INFINITY;
        for (int sp = 0; sp < p->splits; sp++) {
            m->lse_split[r][sp] = sum_s[sp] > 0 ? max_s[sp] + log(sum_s[sp]) : -INFINITY;
            lmax = m->lse_split[r][sp] > lmax ? m->lse_split[r][sp] : lmax;
        }
        double sum = 0;
        for (int sp = 0; sp < p->splits; sp++) sum += exp(m->lse_split[r][sp] - lmax);
        m->lse[r] = lmax + log(sum);           /* the merge's LSE */
        m->lse_whole[r] = max_all + log(whole); /* the unsplit softmax's */
    }
    free(kmat);
}

static double weight(const merge *m, int r, int split) { return exp(m->lse_split[r][split] - m->lse[r]); }

/* ---- output ---- */

static void print_text(const shape *s, const plan *p, const merge *m)
{
    printf("step 13 at B%d Hq%d Hkv%d Nq%d Nk%d d%d on %d SMs, %d block(s) per SM, %d keys per tile\n", s->batch,
           s->heads, s->kv_heads, s->seqlen_q, s->seqlen_k, s->dim, s->sms, s->blocks_per_sm, p->block_n);
    printf("packing: group = %d query heads per kv head; packed row r = query r / %d of query head h_kv x %d + r %% %d;\n"
           "  %d packed rows per kv head -> m_blocks = %d tile(s) of %d rows (%d rows used)\n", p->group, p->group,
           p->group, p->group, p->group * s->seqlen_q, p->m_blocks, BLOCK_M, p->group * s->seqlen_q);
    printf("  block 0's rows:");
    for (int r = 0; r < BLOCK_M; r++) {
        if (r < p->group * s->seqlen_q) printf(" %d=(q%d,h%d)", r, r / p->group, r % p->group);
        else if (r == p->group * s->seqlen_q) printf(" %d-15 unused", r);
    }
    printf("\nsplits (choose_plan): base blocks = %d x %d x %d = %d; at most %d splits; efficiency of s splits:\n ",
           s->batch, s->kv_heads, p->m_blocks, p->base_blocks, p->cap);
    for (int k = 1; k <= p->cap && k <= 40; k++) printf(" %d:%.2f", k, p->efficiency[k]);
    printf("%s\n  -> %d splits (the fewest within 5%% of the best): %d blocks on %d SMs x %d\n", p->cap > 40 ? " ..." : "",
           p->splits, p->base_blocks * p->splits, s->sms, s->blocks_per_sm);
    printf("key tiles: %d of %d keys; %d per split\n", p->n_tiles, p->block_n, p->tiles_per_split);
    printf("  split | tiles       | keys\n");
    for (int k = 0; k < p->splits; k++)
        printf("  %5d | %4d - %4d | %6d - %6d\n", k, tile_lo(p, k), tile_hi(p, k) - 1, tile_lo(p, k) * p->block_n,
               (tile_hi(p, k) < p->n_tiles ? tile_hi(p, k) * p->block_n : s->seqlen_k) - 1);
    printf("within a block, warp w takes keys %d w .. %d w + %d of every key tile\n", p->block_n / WARPS,
           p->block_n / WARPS, p->block_n / WARPS - 1);
    printf("\nthe merge (by the last block of the tile), for one input of uniform Q, K in [-%d, %d) (a made-up input):\n"
           "LSE = log sum_s exp(LSE_s); weight_s = exp(LSE_s - LSE); O = sum_s weight_s O_s\n", s->scale, s->scale);
    for (int r = 0; r < m->rows; r++) {
        printf("  q head %d: LSE %.4f (the unsplit softmax's %.4f); weights", r, m->lse[r], m->lse_whole[r]);
        for (int k = 0; k < p->splits && k < 16; k++) printf(" %.3f", weight(m, r, k));
        printf("%s\n", p->splits > 16 ? " ..." : "");
    }
}

static void print_csv(const shape *s, const plan *p, const merge *m)
{
    printf("kind,kv_head,split,block,tile_lo,tile_hi,key_lo,key_hi,row,query,head,lse,weight,splits,sms,block_n,group\n");
    for (int h = 0; h < s->kv_heads && h < 64; h++)
        for (int k = 0; k < p->splits; k++)
            printf("split,%d,%d,%d,%d,%d,%d,%d,-1,-1,-1,,,%d,%d,%d,%d\n", h, k, h * p->m_blocks * p->splits + k,
                   tile_lo(p, k), tile_hi(p, k), tile_lo(p, k) * p->block_n,
                   tile_hi(p, k) < p->n_tiles ? tile_hi(p, k) * p->block_n : s->seqlen_k, p->splits, s->sms,
                   p->block_n, p->group);
    for (int r = 0; r < BLOCK_M; r++) {
        int used = r < p->group * s->seqlen_q;
        printf("row,0,-1,0,-1,-1,-1,-1,%d,%d,%d,,,%d,%d,%d,%d\n", r, used ? r / p->group : -1, used ? r % p->group : -1,
               p->splits, s->sms, p->block_n, p->group);
    }
    for (int r = 0; r < m->rows; r++)
        for (int k = 0; k < p->splits; k++)
            printf("merge,0,%d,%d,%d,%d,-1,-1,%d,0,%d,%.6f,%.6f,%d,%d,%d,%d\n", k, k, tile_lo(p, k), tile_hi(p, k), r, r,
                   m->lse_split[r][k], weight(m, r, k), p->splits, s->sms, p->block_n, p->group);
}

/* ---- --check ---- */

static void check_shape(const shape *s, int with_merge)
{
    plan p;
    make_plan(&p, s);
    char name[320], tag[96];
    snprintf(tag, sizeof tag, "B%d Hq%d Hkv%d Nq%d Nk%d d%d on %d SMs", s->batch, s->heads, s->kv_heads, s->seqlen_q,
             s->seqlen_k, s->dim, s->sms);
    int covered = 1, claims = 0;
    for (int t = 0; t < p.n_tiles; t++) {
        int owners = 0;
        for (int k = 0; k < p.splits; k++) owners += t >= tile_lo(&p, k) && t < tile_hi(&p, k);
        covered &= owners == 1, claims += owners;
    }
    snprintf(name, sizeof name, "split_kv %s: the %d splits take every one of the %d key tiles exactly once", tag,
             p.splits, p.n_tiles);
    check(covered, name, "%d claims", claims);
    /* the rule: fewest splits within 5% of the best, none past the cap */
    double best = 0;
    for (int k = 1; k <= p.cap; k++) best = p.efficiency[k] > best ? p.efficiency[k] : best;
    int rule = p.splits >= 1 && p.splits <= p.cap && p.efficiency[p.splits] >= 0.95 * best;
    for (int k = 1; k < p.splits; k++) rule &= p.efficiency[k] < 0.95 * best;
    snprintf(name, sizeof name, "split_kv %s: %d splits is the fewest within 5%% of the best wave efficiency "
             "(choose_plan)", tag, p.splits);
    check(rule, name, "the choice breaks the rule");
    int bijection = 1;
    static unsigned char seen[1 << 16];
    memset(seen, 0, sizeof seen);
    for (int h_kv = 0; h_kv < s->kv_heads; h_kv++)
        for (int r = 0; r < p.group * s->seqlen_q; r++) {
            int query = r / p.group, head = h_kv * p.group + r % p.group, index = query * s->heads + head;
            bijection &= query < s->seqlen_q && head / p.group == h_kv && !seen[index];
            seen[index] = 1;
        }
    for (int i = 0; i < s->seqlen_q * s->heads; i++) bijection &= seen[i];
    snprintf(name, sizeof name, "split_kv %s: packed rows (kv head, r) -> (query r / group, head h_kv group + r %% "
             "group) cover every (query, head) once", tag);
    check(bijection, name, "a (query, head) packed twice or never");
    if (with_merge) {
        static merge m;
        make_merge(&m, s, &p);
        int exact = 1;
        for (int r = 0; r < m.rows; r++) {
            double sum = 0;
            for (int k = 0; k < p.splits; k++) sum += weight(&m, r, k);
            exact &= fabs(sum - 1) < 1e-9 && fabs(m.lse[r] - m.lse_whole[r]) < 1e-9;
        }
        snprintf(name, sizeof name, "split_kv %s: the merge's weights sum to 1 and its LSE is the unsplit softmax's "
                 "(to 1e-9, in double)", tag);
        check(exact, name, "the merge does not reproduce the whole softmax");
    }
}

static void run_checks(void)
{
    const shape decode = {1, 32, 8, 1, 32768, 128, 132, 1, 1, 1};
    check_shape(&decode, 1);
    const shape others[] = {
        {8, 32, 8, 1, 8192, 128, 132, 1, 1, 1}, {1, 32, 32, 1, 4096, 64, 108, 2, 1, 1},
        {4, 16, 2, 4, 1000, 64, 132, 1, 0, 1},  {1, 8, 1, 3, 777, 128, 58, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) check_shape(&others[i], 0);
    shape small = {1, 8, 2, 1, 3000, 64, 132, 1, 1, 3};
    check_shape(&small, 1);
}

int main(int argc, char **argv)
{
    shape s = {1, 32, 8, 1, 32768, 128, 132, 1, 1, 1};
    int csv = 0;
    const cli_option opts[] = {
        {"--batch", &s.batch, 1, 64, 1, NULL},
        {"--heads", &s.heads, 1, 256, 1, NULL},
        {"--kv-heads", &s.kv_heads, 1, 256, 1, NULL},
        {"--seqlen-q", &s.seqlen_q, 1, 64, 1, NULL},
        {"--seqlen-k", &s.seqlen_k, 1, 1 << 17, 1, NULL},
        {"--dim", &s.dim, 64, 128, 64, NULL},
        {"--sms", &s.sms, 1, 1024, 1, NULL},
        {"--blocks-per-sm", &s.blocks_per_sm, 1, 32, 1, NULL},
        {"--block-n", &s.block_n_index, 0, 0, 0, "64|128"},
        {"--scale", &s.scale, 1, 16, 1, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, sizeof opts / sizeof *opts, run_checks);
    if (s.heads % s.kv_heads) cli_error("--heads %d is not a multiple of --kv-heads %d", s.heads, s.kv_heads);
    if (s.heads * s.seqlen_q > 1 << 16) cli_error("--heads x --seqlen-q is more than this program holds (65536)");
    plan p;
    make_plan(&p, &s);
    static merge m;
    make_merge(&m, &s, &p);
    if (csv) print_csv(&s, &p, &m);
    else print_text(&s, &p, &m);
    return 0;
}
