/* ring_schedule - which GPU computes which (query chunk, key chunk) pair of ring attention, at
 * which step of the ring (docs/context_parallel.md). The sequence is cut into chunks; a GPU
 * keeps the query rows of its own chunks and, at ring step i, holds the K and V of GPU
 * (g - i) mod R: it computes its query chunks against those key chunks, one call of a step per
 * pair (tests/test_ring.py does the arithmetic). Under the causal mask a pair is whole (the key
 * chunk is before the query chunk), the diagonal (the same chunk: half its pairs visible) or
 * skipped (after). Two ways to give out the chunks:
 *   contiguous: R chunks, GPU g holds chunk g: under the mask the last GPU has R - 1 whole
 *               pairs and a diagonal, the first only its diagonal;
 *   head-tail:  2R chunks, GPU g holds chunks g and 2R - 1 - g, one early and one late, as
 *               torch's context_parallel does under the mask: every GPU the same work.
 * Work is counted in whole chunk pairs of the 2R-chunk cut (a diagonal half of one; a
 * contiguous chunk is two of those), so both cuts are counted alike. --format csv writes the
 * pairs for the figure (figures/ring_schedule.py). */
#include "tool.h"

static const char usage[] =
    "usage: ring_schedule [--gpus R] [--causal 0|1] [--format text|csv] [--check]\n"
    "Ring attention's schedule: which GPU computes which (query chunk, key chunk) pair at which ring step,\n"
    "with the sequence in R contiguous chunks and in 2R chunks given out head and tail, and each GPU's work.\n"
    "  --gpus    GPUs in the ring, 1 to 16 (default 4)\n"
    "  --causal  1 (default): the causal mask (pairs after the diagonal skipped); 0: none\n"
    "  --format  csv: one line per pair, for the figures (figures/):\n"
    "            cut,gpus,chunks,gpu,step,q_chunk,k_chunk,kind,work2 (kind: whole|diagonal|skipped; work2:\n"
    "            the pair's work in halves of a head-tail chunk pair)\n"
    "  --check   assert that the ring (each GPU meeting the K and V it holds at each step with its own query\n"
    "            chunks) computes every visible pair once and no other, and that head-tail (or no mask) gives every\n"
    "            GPU the same work\n";

enum { MAX_GPUS = 16 };
enum { CONTIGUOUS = 0, HEAD_TAIL = 1 };
enum { WHOLE = 0, DIAGONAL = 1, SKIPPED = 2 };
static const char *const cut_names[] = {"contiguous", "head-tail"};
static const char *const kind_names[] = {"whole", "diagonal", "skipped"};

/* chunks of a cut and the GPU that holds chunk c */
static int chunks_of(int cut, int gpus) { return cut == HEAD_TAIL ? 2 * gpus : gpus; }
static int holder(int cut, int gpus, int c) { return cut == HEAD_TAIL ? (c < gpus ? c : 2 * gpus - 1 - c) : c; }

static int kind_of(int causal, int q, int k) { return !causal || k < q ? WHOLE : k == q ? DIAGONAL : SKIPPED; }

/* a pair's work in halves of a head-tail chunk pair: a contiguous chunk is two head-tail chunks */
static int work2(int cut, int kind)
{
    const int whole = cut == HEAD_TAIL ? 2 : 8;
    return kind == WHOLE ? whole : kind == DIAGONAL ? whole / 2 : 0;
}

static void run(int gpus, int causal, int csv, int do_check)
{
    for (int cut = CONTIGUOUS; cut <= HEAD_TAIL; cut++) {
        const int chunks = chunks_of(cut, gpus);
        long work[MAX_GPUS] = {0};
        int times[2 * MAX_GPUS][2 * MAX_GPUS] = {{0}}; /* [q chunk][k chunk]: how often the ring computed it */
        int step_at[2 * MAX_GPUS][2 * MAX_GPUS];      /* and at which step */
        /* The ring's view: at step i GPU g holds the K and V of GPU (g - i) mod R's chunks and
         * meets them with the query rows of its own. */
        for (int g = 0; g < gpus; g++)
            for (int step = 0; step < gpus; step++)
                for (int q = 0; q < chunks; q++)
                    for (int k = 0; k < chunks; k++) {
                        if (holder(cut, gpus, q) != g || holder(cut, gpus, k) != (g - step + gpus) % gpus) continue;
                        const int kind = kind_of(causal, q, k);
                        work[g] += work2(cut, kind);
                        times[q][k] += kind != SKIPPED;
                        step_at[q][k] = step;
                        if (csv)
                            printf("%s,%d,%d,%d,%d,%d,%d,%s,%d\n", cut_names[cut], gpus, chunks, g, step, q, k,
                                   kind_names[kind], work2(cut, kind));
                    }
        long most = 0, least = work[0], total = 0;
        for (int g = 0; g < gpus; g++) {
            most = work[g] > most ? work[g] : most;
            least = work[g] < least ? work[g] : least;
            total += work[g];
        }
        if (!csv && !do_check) {
            printf("%s: %d chunks, GPU g holds %s; work per GPU (halves of a head-tail chunk pair):", cut_names[cut],
                   chunks, cut == HEAD_TAIL ? "chunks g and 2R-1-g" : "chunk g");
            for (int g = 0; g < gpus; g++) printf(" %ld", work[g]);
            printf("\n  the slowest GPU has %.2fx the mean: the ring waits for it at every step\n",
                   total ? (double)most * gpus / total : 1.0);
            printf("  the step at which each pair is computed (/: the diagonal, .: skipped):\n");
            for (int q = 0; q < chunks; q++) {
                printf("  q chunk %2d (GPU %2d):", q, holder(cut, gpus, q));
                for (int k = 0; k < chunks; k++) {
                    const int kind = kind_of(causal, q, k);
                    if (kind == SKIPPED) printf("   .");
                    else printf(" %2d%c", step_at[q][k], kind == DIAGONAL ? '/' : ' ');
                }
                printf("\n");
            }
        }
        if (do_check) {
            char name[96];
            int wrong = 0;
            for (int q = 0; q < chunks; q++)
                for (int k = 0; k < chunks; k++) wrong += times[q][k] != (kind_of(causal, q, k) != SKIPPED);
            snprintf(name, sizeof name, "ring_schedule %s, %d GPUs%s: every visible pair computed once, no other",
                     cut_names[cut], gpus, causal ? ", causal" : "");
            check(wrong == 0, name, "%d pairs computed a wrong number of times", wrong);
            if (cut == HEAD_TAIL || !causal) {
                snprintf(name, sizeof name, "ring_schedule %s, %d GPUs%s: every GPU the same work", cut_names[cut], gpus,
                         causal ? ", causal" : "");
                check(most == least, name, "from %ld to %ld", least, most);
            }
        }
    }
}

/* --check: every GPU count, with and without the mask */
static void run_checks(void)
{
    for (int gpus = 1; gpus <= MAX_GPUS; gpus++)
        for (int causal = 0; causal <= 1; causal++) run(gpus, causal, 0, 1);
}

int main(int argc, char **argv)
{
    int gpus = 4, causal = 1, csv = 0;
    const cli_option opts[] = {
        {"--gpus", &gpus, 1, MAX_GPUS, 1, NULL},
        {"--causal", &causal, 0, 1, 1, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, sizeof opts / sizeof *opts, run_checks);
    if (csv) printf("cut,gpus,chunks,gpu,step,q_chunk,k_chunk,kind,work2\n");
    run(gpus, causal, csv, 0);
    return 0;
}
