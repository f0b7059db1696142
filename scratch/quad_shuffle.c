/* quad_shuffle - the row max / row sum of the online softmax in steps 02..07:
 * each row of an mma C tile lives in the 4 lanes of one quad, and two
 * butterfly shuffles (__shfl_xor_sync with masks 1 and 2) combine them. */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: quad_shuffle [--check]\n"
    "Prints how the row max and row sum of S (16 rows per warp, BLOCK_N = 64 keys = 8 mma n-tiles)\n"
    "are reduced: lane 4g+t holds keys 2t, 2t+1 of every n-tile of rows g and g+8; then\n"
    "x = op(x, __shfl_xor_sync(0xffffffff, x, 1)); x = op(x, __shfl_xor_sync(0xffffffff, x, 2));\n"
    "which lane each lane reads at each stage, whose partials it then holds, and a worked row.\n"
    "  --check  assert partners stay in the quad and every lane ends with each partial exactly once\n";

enum { STAGES = 2, QUAD = 4, NTILES = BLOCK_N / MMA_N };
static const int stage_mask[STAGES] = {1, 2};

/* held[l][s]: how many times lane s's partial is folded into lane l's value.
 * Exactly once per quad lane is what the sum needs (the max would forgive
 * repeats, the sum would not). */
typedef struct {
    int held[WARP_SIZE][WARP_SIZE];
} partials;

static void partials_start(partials *p)
{
    memset(p, 0, sizeof *p);
    for (int lane = 0; lane < WARP_SIZE; lane++) p->held[lane][lane] = 1;
}

/* x += shfl_xor(x, mask): every lane adds what its partner held before the stage. */
static void partials_exchange(partials *p, int mask)
{
    partials before = *p;
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int src = 0; src < WARP_SIZE; src++) p->held[lane][src] += before.held[lane ^ mask][src];
}

static void format_held(const partials *p, int lane, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int src = 0; src < WARP_SIZE && used < size; src++)
        if (p->held[lane][src]) used += snprintf(out + used, size - used, "%s%d", used ? "," : "", src);
}

/* Keys of row g that lane 4g+t holds before any shuffle: columns of c0, c1 of
 * every n-tile (c2, c3 give the same keys of row g+8). */
static int lane_keys(int lane, int keys[2 * NTILES])
{
    int count = 0;
    for (int ntile = 0; ntile < NTILES; ntile++)
        for (int reg = 0; reg < 2; reg++) keys[count++] = ntile * MMA_N + mma_c_coord(lane, reg).col;
    return count;
}

/* A deterministic score row (small integers, so sums are exact). */
static int score(int row, int key) { return (int)((unsigned)(row * 131 + key * 37 + 11) * 2654435761u >> 27) - 16; }

typedef struct {
    int max, sum;
} row_stats;

static row_stats direct_row(int row)
{
    row_stats direct = {-1000, 0};
    for (int key = 0; key < BLOCK_N; key++) {
        int s = score(row, key);
        if (s > direct.max) direct.max = s;
        direct.sum += s;
    }
    return direct;
}

/* Runs the reduction of rows 0-7 of a score tile (row g in quad g): value[stage][lane]. */
static void reduce_rows(row_stats value[STAGES + 1][WARP_SIZE])
{
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        int keys[2 * NTILES], count = lane_keys(lane, keys);
        row_stats own = {-1000, 0};
        for (int i = 0; i < count; i++) {
            int s = score(lane_group(lane), keys[i]);
            if (s > own.max) own.max = s;
            own.sum += s;
        }
        value[0][lane] = own;
    }
    for (int stage = 0; stage < STAGES; stage++)
        for (int lane = 0; lane < WARP_SIZE; lane++) {
            row_stats mine = value[stage][lane], other = value[stage][lane ^ stage_mask[stage]];
            value[stage + 1][lane].max = mine.max > other.max ? mine.max : other.max;
            value[stage + 1][lane].sum = mine.sum + other.sum;
        }
}

static void print_tables(void)
{
    printf("Row max / row sum of S: rows g and g+8 of a warp's 16-row tile are held by the quad of lanes\n"
           "4g..4g+3 (g = lane >> 2); lane 4g+t holds keys 2t, 2t+1 of each of the %d n-tiles (BLOCK_N = %d):\n",
           NTILES, BLOCK_N);
    for (int t = 0; t < QUAD; t++) {
        int keys[2 * NTILES], count = lane_keys(t, keys);
        printf("  t = %d: keys", t);
        for (int i = 0; i < count; i++) printf(" %d", keys[i]);
        printf("\n");
    }
    printf("Each lane first reduces its %d keys, then two butterfly stages combine the quad:\n"
           "  x = op(x, __shfl_xor_sync(0xffffffff, x, 1));   lane l reads lane l ^ 1\n"
           "  x = op(x, __shfl_xor_sync(0xffffffff, x, 2));   lane l reads lane l ^ 2\n"
           "masks below 4 never leave the quad, so rows never mix; all 32 lanes take part (full mask).\n\n",
           2 * NTILES);
    partials p;
    partials_start(&p);
    char held[STAGES][64];
    printf(" lane  g  t | xor 1: reads  then holds partials of | xor 2: reads  then holds partials of\n");
    partials after[STAGES];
    for (int stage = 0; stage < STAGES; stage++) {
        partials_exchange(&p, stage_mask[stage]);
        after[stage] = p;
    }
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        for (int stage = 0; stage < STAGES; stage++) format_held(&after[stage], lane, held[stage], sizeof held[stage]);
        printf(" %4d %2d %2d | %12d  %-22s | %12d  %s\n", lane, lane_group(lane), lane_tig(lane), lane ^ stage_mask[0],
               held[0], lane ^ stage_mask[1], held[1]);
    }

    row_stats value[STAGES + 1][WARP_SIZE];
    reduce_rows(value);
    printf("\nworked example, row 0 of a score tile (lanes 0-3 hold it): max / sum per lane\n"
           " lane | own 16 keys | after xor 1 | after xor 2\n");
    for (int lane = 0; lane < QUAD; lane++)
        printf(" %4d | %4d / %4d | %4d / %4d | %4d / %4d\n", lane, value[0][lane].max, value[0][lane].sum,
               value[1][lane].max, value[1][lane].sum, value[2][lane].max, value[2][lane].sum);
    row_stats direct = direct_row(0);
    int all_hold = 1;
    for (int lane = 0; lane < QUAD; lane++)
        all_hold &= value[STAGES][lane].max == direct.max && value[STAGES][lane].sum == direct.sum;
    printf("direct over the 64 keys: max %d, sum %d -> every lane of the quad holds it: %s\n", direct.max, direct.sum,
           all_hold ? "OK" : "MISMATCH");
}

static void run_checks(void)
{
    int in_quad = 1;
    for (int stage = 0; stage < STAGES; stage++)
        for (int lane = 0; lane < WARP_SIZE; lane++) in_quad &= lane_group(lane ^ stage_mask[stage]) == lane_group(lane);
    check(in_quad, "quad shuffle: xor 1 and xor 2 partners stay inside the quad", "a partner leaves the quad");

    partials p;
    partials_start(&p);
    for (int stage = 0; stage < STAGES; stage++) partials_exchange(&p, stage_mask[stage]);
    int exact = 1;
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int src = 0; src < WARP_SIZE; src++) exact &= p.held[lane][src] == (lane_group(src) == lane_group(lane));
    check(exact, "quad shuffle: after 2 stages every lane holds each partial of its quad exactly once",
          "a partial is missing or counted twice");

    int rows_in_quads = 1;
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int reg = 0; reg < MMA_C_REGS; reg++) rows_in_quads &= mma_c_coord(lane, reg).row % 8 == lane_group(lane);
    check(rows_in_quads, "quad shuffle: the quad of lanes 4g..4g+3 is where the C layout keeps rows g and g+8",
          "a C row is held outside its quad");

    int covered = 1;
    for (int t = 0; t < QUAD; t++) {
        int keys[2 * NTILES], count = lane_keys(t, keys);
        for (int i = 0; i < count; i++) covered &= keys[i] % MMA_N / 2 == t;
    }
    check(covered, "quad shuffle: the 4 lanes of a quad hold disjoint keys covering all 64", "keys overlap");

    int agree = 1;
    row_stats value[STAGES + 1][WARP_SIZE];
    reduce_rows(value);
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        row_stats direct = direct_row(lane_group(lane));
        agree &= value[STAGES][lane].max == direct.max && value[STAGES][lane].sum == direct.sum;
    }
    check(agree, "quad shuffle: the reduced max and sum equal the direct row max and row sum (rows 0-7)",
          "a lane ends with a different max or sum");
}

int main(int argc, char **argv)
{
    parse_cli(argc, argv, usage, NULL, 0, run_checks);
    print_tables();
    return 0;
}
