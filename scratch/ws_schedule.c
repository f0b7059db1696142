/* ws_schedule - the schedule of one block of steps 10 and 11 (the warp-specialised kernels),
 * computed by walking the kernels' own protocol event by event: a producer thread issues the
 * TMA copies of Q and of the K and V tiles into STAGES stages, completing full mbarriers, and
 * waits on empty mbarriers before it refills a stage; two consumer warpgroups wait on the full
 * barriers, take turns at the tensor cores through named barriers, wait for their products
 * (wgmma.wait_group), run the softmax and release the stages on the empty barriers.
 *
 * The protocol is the kernels' (the producer branch, `if (threadIdx.x < WARPGROUP)`, and the
 * consumers' key loop, key_tile, of steps/10_warp_specialized/kernel.cu and
 * steps/11_intra_warpgroup_overlap/kernel.cu), written out below as one list of operations per
 * thread in the kernels' order. The two steps' barriers differ:
 *  - step 10: one full and one empty barrier per stage for K and V together (kv_full,
 *    kv_empty). load_kv issues K and V of a tile onto the stage's kv_full; a consumer waits on
 *    it before S_n and arrives on kv_empty once P_n V_n, its last product reading the stage, is
 *    done; the producer waits on kv_empty before it refills the stage with both tiles.
 *  - step 11: a full and an empty barrier each for K and for V (k_full, v_full, k_empty,
 *    v_empty): K_n is released after S_n, V_{n-1} after P_{n-1} V_{n-1}, a softmax later, and
 *    the producer refills each as soon as its own release comes.
 * The durations are parameters:
 *
 *  - qk_ns, pv_ns: one consumer's S = Q K^T (m64n128k16 x D/16) and O += P V (m64nDk16 x 8)
 *    at the tensor cores' full rate. MEASURED basis: the wgmma ceiling of an NVIDIA H200,
 *    964.1 TFLOP/s fp16 (results/10_warp_specialized/ceiling-nvidia-h200-2026-11-24.csv),
 *    over its 132 SMs: 2 x 64 x 128 x 128 FLOP / (964.1e12 / 132) = 287 ns at d128.
 *  - softmax_ns: everything a consumer does between its products besides waiting (masking,
 *    the row max and sum, exp2 on the MUFU, the rescale of O, packing P). CALIBRATED: the
 *    value for which this model's step 10 block of 32 key tiles takes the measured time per
 *    block at B4 H16 N4096 d128 fp16 non-causal on the same H200: 0.95677 ms (median of the
 *    three rounds' medians, 0.95712 / 0.95677 / 0.95603 ms, results/10_warp_specialized/
 *    compare-nvidia-h200-2026-11-24.csv) over 16 waves of blocks (2048 blocks of 128 rows,
 *    one per SM on 132 SMs) = 59,798 ns per block. It therefore also absorbs the block's
 *    start, its epilogue and whatever else the model leaves out.
 *  - copy_ns: from a TMA issue to its mbarrier's completion. ASSUMPTION (not measured): 1000 ns,
 *    for every tile alike and with no limit on copies in flight (the producer runs STAGES tiles
 *    ahead; at this shape the copies are not what the consumers wait for).
 * Further ASSUMPTIONS of the model: the tensor cores run one product at a time, in the order
 *  they are issued (the turns make that order consumer 0, 1, 0, 1, ...); a warpgroup's four
 *  warps move together (their four arrivals on an empty barrier are one event); issuing,
 *  arriving and a satisfied wait cost nothing.
 * Its output is a model: the step 11 time it prints with step 10's calibrated softmax is a
 * prediction, printed beside the measured one. --format csv writes the schedule for the
 * figures (figures/producer_consumer.py, figures/skewed_loop.py). */
#include "tool.h"

static const char usage[] =
    "usage: ws_schedule [--step 10|11] [--tiles N] [--qk-ns T] [--pv-ns T] [--softmax-ns T] [--copy-ns T]\n"
    "                   [--format text|csv] [--check]\n"
    "Walks the protocol of one block of step 10 (producer, 2 consumers that take turns, S_n, softmax, P_n V_n;\n"
    "K and V of a stage on one full and one empty barrier) or step 11 (S_n and P_{n-1} V_{n-1} in one turn,\n"
    "the softmax of S_n while P_{n-1} V_{n-1} runs; K and V on barriers of their own) over N key tiles, and\n"
    "prints each thread's operations in order and when each happens (ns).\n"
    "  --step        10 (default) or 11\n"
    "  --tiles       key tiles of the block, 1 to 64 (default 4; the calibration uses 32)\n"
    "  --qk-ns       one consumer's S = Q K^T (default 287: the wgmma ceiling's rate, d128)\n"
    "  --pv-ns       one consumer's O += P V (default 287)\n"
    "  --softmax-ns  a consumer's softmax and other work per tile (default: calibrated so that step 10's\n"
    "                block of 32 tiles takes the measured 59,798 ns; see the header of ws_schedule.c)\n"
    "  --copy-ns     a TMA copy, issue to landed (default 1000, an assumption)\n"
    "  --format csv: one line per interval or event for the figures (figures/):\n"
    "                lane,what,consumer,tile,stage,start_ns,end_ns,phase (phase: prologue, loop, epilogue\n"
    "                or -; lanes: producer, Q, KV stage s (step 10) or K stage s and V stage s\n"
    "                (step 11), tensor cores, consumer c)\n"
    "  --check       assert the schedule keeps the protocol (no stage refilled before both consumers\n"
    "                released it, no tile read before it landed, products one at a time in turn order),\n"
    "                the calibration, and (step 11) the softmax under the previous P V\n";

enum { CONSUMERS = 2, STAGES = 2, MAX_TILES = 64, CALIBRATION_TILES = 32 };
enum { D = 128, BLOCK_N = 128, WG_M = 64 };

/* The measured numbers (see the header), all of one run on an NVIDIA H200. */
#define WGMMA_TFLOPS 964.1     /* fp16 wgmma ceiling */
#define SMS 132
#define STEP10_MS 0.95677      /* B4 H16 N4096 d128 fp16 non-causal, median of 3 rounds */
#define STEP11_MS 0.83982
enum { BENCH_BLOCKS = 4 * 16 * (4096 / (CONSUMERS * WG_M)), BENCH_WAVES = (BENCH_BLOCKS + SMS - 1) / SMS };

static int product_ns(void) { return (int)(2.0 * WG_M * BLOCK_N * D / (WGMMA_TFLOPS * 1e12 / SMS) * 1e9 + 0.5); }
static int measured_block_ns(double ms) { return (int)(ms * 1e6 / BENCH_WAVES + 0.5); }

/* ---- the operations ---- */

typedef enum { OP_WAIT, OP_SIGNAL, OP_TMA, OP_ISSUE, OP_WAIT_GROUP, OP_BUSY } op_kind;
typedef enum { PH_NONE, PH_PROLOGUE, PH_LOOP, PH_EPILOGUE } phase;
static const char *const phase_names[] = {"-", "prologue", "loop", "epilogue"};
typedef enum { PROD_QK, PROD_PV } product;

typedef struct {
    op_kind kind;
    int event;     /* OP_WAIT, OP_SIGNAL, OP_TMA: the barrier */
    int arg;       /* OP_ISSUE: product; OP_WAIT_GROUP: N; OP_BUSY: unused */
    int tile, stage;
    phase ph;
    const char *what;
} op;

typedef struct {
    int expected, count, time;
    char name[32];
} barrier;

enum { MAX_OPS = 24 * MAX_TILES + 16, MAX_TURNS = 2 * MAX_TILES + 2 };
typedef struct {
    const char *lane;
    op ops[MAX_OPS];
    int n_ops, pc, now;
    int group_end[2 * MAX_TILES + 2], groups;
} agent;

typedef struct {
    char lane[24], what[32];
    int consumer, tile, stage, start, end;
    phase ph;
} record;

typedef struct {
    int step, tiles, qk_ns, pv_ns, softmax_ns, copy_ns;
} params;

typedef struct {
    params p;
    barrier bars[1 + 4 * MAX_TILES + CONSUMERS * MAX_TURNS];
    agent agents[1 + CONSUMERS];
    int tc_free;
    record rec[64 * MAX_TILES];
    int n_rec;
    int issue_order[2 * MAX_TURNS * CONSUMERS], issues; /* consumer of each product, in issue order */
    int finished;
} sim;

/* The barriers: q_full, then per key tile n its phase of k_full, v_full, k_empty, v_empty of
 * stage n % STAGES (one phase per tile that passes through the stage), then the turns. Step 10
 * has kv_full and kv_empty alone: its K and V share the phases of k_full and k_empty, and
 * v_full and v_empty go unused. */
static int q_full(void) { return 0; }
static int k_full(int n) { return 1 + n; }
static int v_full(int n) { return 1 + MAX_TILES + n; }
static int k_empty(int n) { return 1 + 2 * MAX_TILES + n; }
static int v_empty(int n) { return 1 + 3 * MAX_TILES + n; }
static int kv_full(int n) { return k_full(n); }
static int kv_empty(int n) { return k_empty(n); }
/* The barrier a product of tile n waits for, and the one its release arrives on, by step. */
static int full_of(int step, product pr, int n) { return step == 10 || pr == PROD_QK ? k_full(n) : v_full(n); }
static int empty_of(int step, char tensor, int n) { return step == 10 || tensor == 'K' ? k_empty(n) : v_empty(n); }
/* turn k of consumer c: the named barrier NB::TURN + c, completed by the previous consumer's
 * bar.arrive after it issued its product (turn_end), or before the loop for consumer 0's first */
static int turn(int c, int k) { return 1 + 4 * MAX_TILES + c * MAX_TURNS + k; }
static int next_turn(int c, int k) { return c < CONSUMERS - 1 ? turn(c + 1, k) : turn(0, k + 1); }

static void add_op(agent *a, op o)
{
    if (a->n_ops >= MAX_OPS) {
        fprintf(stderr, "error: too many operations\n");
        exit(2);
    }
    a->ops[a->n_ops++] = o;
}

static op mk(op_kind kind, int event, int arg, int tile, int stage, phase ph, const char *what)
{
    op o = {kind, event, arg, tile, stage, ph, what};
    return o;
}

/* Step 10's producer: Q, then per tile n load_kv(n), K and V of stage n % STAGES onto the
 * stage's kv_full, after the consumers released the stage's previous tile on kv_empty
 * (n >= STAGES). */
static void build_producer10(agent *a, int tiles)
{
    a->lane = "producer";
    add_op(a, mk(OP_TMA, q_full(), 0, -1, -1, PH_NONE, "issue Q"));
    for (int n = 0; n < tiles; n++) {
        int s = n % STAGES;
        if (n >= STAGES) add_op(a, mk(OP_WAIT, kv_empty(n - STAGES), 0, n - STAGES, s, PH_NONE, "wait kv_empty"));
        add_op(a, mk(OP_TMA, kv_full(n), 0, n, s, PH_NONE, "issue KV"));
    }
}

/* Step 11's producer: Q, then per tile n load() of K, then of V, into stage n % STAGES, each
 * after the consumers released that tensor's previous tile in the stage (n >= STAGES). */
static void build_producer11(agent *a, int tiles)
{
    a->lane = "producer";
    add_op(a, mk(OP_TMA, q_full(), 0, -1, -1, PH_NONE, "issue Q"));
    for (int n = 0; n < tiles; n++) {
        int s = n % STAGES;
        if (n >= STAGES) add_op(a, mk(OP_WAIT, k_empty(n - STAGES), 0, n - STAGES, s, PH_NONE, "wait k_empty"));
        add_op(a, mk(OP_TMA, k_full(n), 0, n, s, PH_NONE, "issue K"));
        if (n >= STAGES) add_op(a, mk(OP_WAIT, v_empty(n - STAGES), 0, n - STAGES, s, PH_NONE, "wait v_empty"));
        add_op(a, mk(OP_TMA, v_full(n), 0, n, s, PH_NONE, "issue V"));
    }
}

/* One turn at the tensor cores: turn_begin (bar.sync), the products, turn_end (bar.arrive
 * for the next consumer, except the last consumer's last turn). */
static void add_turn(agent *a, int c, int *k, int last, phase ph, int tile)
{
    add_op(a, mk(OP_WAIT, turn(c, *k), 0, tile, -1, ph, "wait turn"));
    (void)last;
}
static void end_turn(agent *a, int c, int *k, int last, phase ph, int tile)
{
    if (!(last && c == CONSUMERS - 1)) add_op(a, mk(OP_SIGNAL, next_turn(c, *k), 0, tile, -1, ph, "turn_end"));
    (*k)++;
}

/* Step 10's key_tile: per tile, wait for K and V (kv_full), S_n in one turn, wait, softmax,
 * P_n V_n in the next turn, wait, release K and V (kv_empty). */
static void build_consumer10(agent *a, int c, int tiles)
{
    int k = 0;
    add_op(a, mk(OP_WAIT, q_full(), 0, -1, -1, PH_PROLOGUE, "wait q_full"));
    if (c == CONSUMERS - 1) add_op(a, mk(OP_SIGNAL, turn(0, 0), 0, -1, -1, PH_PROLOGUE, "first turn to consumer 0"));
    for (int n = 0; n < tiles; n++) {
        int s = n % STAGES;
        add_op(a, mk(OP_WAIT, kv_full(n), 0, n, s, PH_LOOP, "wait kv_full"));
        add_turn(a, c, &k, 0, PH_LOOP, n);
        add_op(a, mk(OP_ISSUE, -1, PROD_QK, n, s, PH_LOOP, "issue S"));
        end_turn(a, c, &k, 0, PH_LOOP, n);
        add_op(a, mk(OP_WAIT_GROUP, -1, 0, n, s, PH_LOOP, "wait S"));
        add_op(a, mk(OP_BUSY, -1, 0, n, s, PH_LOOP, "softmax"));
        add_turn(a, c, &k, 0, PH_LOOP, n);
        add_op(a, mk(OP_ISSUE, -1, PROD_PV, n, s, PH_LOOP, "issue PV"));
        end_turn(a, c, &k, n == tiles - 1, PH_LOOP, n);
        add_op(a, mk(OP_WAIT_GROUP, -1, 0, n, s, PH_LOOP, "wait PV"));
        add_op(a, mk(OP_SIGNAL, kv_empty(n), 0, n, s, PH_LOOP, "release KV"));
    }
}

/* Step 11's key loop: S_0 alone (the skew's prologue); then per tile n >= 1 S_n and P_{n-1} V_{n-1} in one turn,
 * wait_group 1 (S_n), release K, softmax of S_n, wait_group 0 (P_{n-1} V_{n-1}), release V;
 * the last P V alone. */
static void build_consumer11(agent *a, int c, int tiles)
{
    int k = 0;
    add_op(a, mk(OP_WAIT, q_full(), 0, -1, -1, PH_PROLOGUE, "wait q_full"));
    if (c == CONSUMERS - 1) add_op(a, mk(OP_SIGNAL, turn(0, 0), 0, -1, -1, PH_PROLOGUE, "first turn to consumer 0"));
    add_op(a, mk(OP_WAIT, k_full(0), 0, 0, 0, PH_PROLOGUE, "wait k_full"));
    add_turn(a, c, &k, 0, PH_PROLOGUE, 0);
    add_op(a, mk(OP_ISSUE, -1, PROD_QK, 0, 0, PH_PROLOGUE, "issue S"));
    end_turn(a, c, &k, 0, PH_PROLOGUE, 0);
    add_op(a, mk(OP_WAIT_GROUP, -1, 0, 0, 0, PH_PROLOGUE, "wait S"));
    add_op(a, mk(OP_SIGNAL, k_empty(0), 0, 0, 0, PH_PROLOGUE, "release K"));
    add_op(a, mk(OP_BUSY, -1, 0, 0, 0, PH_PROLOGUE, "softmax"));
    for (int n = 1; n < tiles; n++) {
        int s = n % STAGES, sp = (n - 1) % STAGES;
        add_op(a, mk(OP_WAIT, k_full(n), 0, n, s, PH_LOOP, "wait k_full"));
        add_op(a, mk(OP_WAIT, v_full(n - 1), 0, n - 1, sp, PH_LOOP, "wait v_full"));
        add_turn(a, c, &k, 0, PH_LOOP, n);
        add_op(a, mk(OP_ISSUE, -1, PROD_QK, n, s, PH_LOOP, "issue S"));
        add_op(a, mk(OP_ISSUE, -1, PROD_PV, n - 1, sp, PH_LOOP, "issue PV"));
        end_turn(a, c, &k, 0, PH_LOOP, n);
        add_op(a, mk(OP_WAIT_GROUP, -1, 1, n, s, PH_LOOP, "wait S"));
        add_op(a, mk(OP_SIGNAL, k_empty(n), 0, n, s, PH_LOOP, "release K"));
        add_op(a, mk(OP_BUSY, -1, 0, n, s, PH_LOOP, "softmax"));
        add_op(a, mk(OP_WAIT_GROUP, -1, 0, n - 1, sp, PH_LOOP, "wait PV"));
        add_op(a, mk(OP_SIGNAL, v_empty(n - 1), 0, n - 1, sp, PH_LOOP, "release V"));
    }
    int last = tiles - 1, s = last % STAGES;
    add_op(a, mk(OP_WAIT, v_full(last), 0, last, s, PH_EPILOGUE, "wait v_full"));
    add_turn(a, c, &k, 1, PH_EPILOGUE, last);
    add_op(a, mk(OP_ISSUE, -1, PROD_PV, last, s, PH_EPILOGUE, "issue PV"));
    end_turn(a, c, &k, 1, PH_EPILOGUE, last);
    add_op(a, mk(OP_WAIT_GROUP, -1, 0, last, s, PH_EPILOGUE, "wait PV"));
    add_op(a, mk(OP_SIGNAL, v_empty(last), 0, last, s, PH_EPILOGUE, "release V"));
}

static void add_record(sim *m, const char *lane, const char *what, int consumer, int tile, int stage, int start,
                       int end, phase ph)
{
    record *r = &m->rec[m->n_rec++];
    snprintf(r->lane, sizeof r->lane, "%s", lane);
    snprintf(r->what, sizeof r->what, "%s", what);
    r->consumer = consumer, r->tile = tile, r->stage = stage, r->start = start, r->end = end, r->ph = ph;
}

static void sim_init(sim *m, const params *p)
{
    memset(m, 0, sizeof *m);
    m->p = *p;
    for (size_t i = 0; i < sizeof m->bars / sizeof *m->bars; i++) m->bars[i].expected = 1;
    for (int n = 0; n < MAX_TILES; n++) m->bars[k_empty(n)].expected = m->bars[v_empty(n)].expected = CONSUMERS;
    if (p->step == 10) build_producer10(&m->agents[0], p->tiles);
    else build_producer11(&m->agents[0], p->tiles);
    for (int c = 0; c < CONSUMERS; c++) {
        static char names[CONSUMERS][16];
        snprintf(names[c], sizeof names[c], "consumer %d", c);
        m->agents[1 + c].lane = names[c];
        if (p->step == 10) build_consumer10(&m->agents[1 + c], c, p->tiles);
        else build_consumer11(&m->agents[1 + c], c, p->tiles);
    }
}

static int done(const barrier *b) { return b->count >= b->expected; }

/* Runs one agent as far as its next unsatisfied wait; returns whether it moved. */
static int step_agent(sim *m, int index)
{
    agent *a = &m->agents[index];
    int consumer = index - 1, moved = 0;
    char what[32];
    while (a->pc < a->n_ops) {
        const op *o = &a->ops[a->pc];
        int start = a->now;
        if (o->kind == OP_WAIT) {
            const barrier *b = &m->bars[o->event];
            if (!done(b)) break;
            if (b->time > a->now) a->now = b->time;
            if (a->now > start) add_record(m, a->lane, o->what, consumer, o->tile, o->stage, start, a->now, o->ph);
        } else if (o->kind == OP_SIGNAL) {
            barrier *b = &m->bars[o->event];
            b->count++;
            if (a->now > b->time) b->time = a->now;
            if (strncmp(o->what, "release", 7) == 0)
                add_record(m, a->lane, o->what, consumer, o->tile, o->stage, a->now, a->now, o->ph);
        } else if (o->kind == OP_TMA) {
            barrier *b = &m->bars[o->event];
            b->count++, b->time = a->now + m->p.copy_ns;
            add_record(m, a->lane, o->what, -1, o->tile, o->stage, a->now, a->now, o->ph);
            char lane[24];
            if (o->tile < 0) snprintf(lane, sizeof lane, "Q");
            else snprintf(lane, sizeof lane, "%s stage %d", o->what + 6, o->stage);
            add_record(m, lane, "in flight", -1, o->tile, o->stage, a->now, b->time, o->ph);
        } else if (o->kind == OP_ISSUE) {
            int dur = o->arg == PROD_QK ? m->p.qk_ns : m->p.pv_ns;
            int run = a->now > m->tc_free ? a->now : m->tc_free;
            m->tc_free = run + dur;
            a->group_end[a->groups++] = m->tc_free;
            m->issue_order[m->issues++] = consumer;
            add_record(m, a->lane, o->what, consumer, o->tile, o->stage, a->now, a->now, o->ph);
            snprintf(what, sizeof what, "%s", o->arg == PROD_QK ? "S = Q K^T" : "O += P V");
            add_record(m, "tensor cores", what, consumer, o->tile, o->stage, run, m->tc_free, o->ph);
        } else if (o->kind == OP_WAIT_GROUP) {
            int end = a->group_end[a->groups - 1 - o->arg];
            if (end > a->now) a->now = end;
            if (a->now > start) add_record(m, a->lane, o->what, consumer, o->tile, o->stage, start, a->now, o->ph);
        } else { /* OP_BUSY */
            a->now += m->p.softmax_ns;
            add_record(m, a->lane, o->what, consumer, o->tile, o->stage, start, a->now, o->ph);
        }
        a->pc++, moved = 1;
    }
    return moved;
}

/* Runs every agent until none can move; then the stages' "held" intervals, from the full
 * barrier's completion to the empty barrier's. Returns the block's end (the last event). */
static int sim_run(sim *m)
{
    int moved = 1;
    while (moved) {
        moved = 0;
        for (int i = 0; i < 1 + CONSUMERS; i++) moved |= step_agent(m, i);
    }
    m->finished = 1;
    for (int i = 0; i < 1 + CONSUMERS; i++) m->finished &= m->agents[i].pc == m->agents[i].n_ops;
    for (int n = 0; n < m->p.tiles; n++) {
        char lane[24];
        if (m->p.step == 10) {
            snprintf(lane, sizeof lane, "KV stage %d", n % STAGES);
            add_record(m, lane, "landed", -1, n, n % STAGES, m->bars[kv_full(n)].time, m->bars[kv_empty(n)].time,
                       PH_NONE);
            continue;
        }
        snprintf(lane, sizeof lane, "K stage %d", n % STAGES);
        add_record(m, lane, "landed", -1, n, n % STAGES, m->bars[k_full(n)].time, m->bars[k_empty(n)].time, PH_NONE);
        snprintf(lane, sizeof lane, "V stage %d", n % STAGES);
        add_record(m, lane, "landed", -1, n, n % STAGES, m->bars[v_full(n)].time, m->bars[v_empty(n)].time, PH_NONE);
    }
    int end = 0;
    for (int i = 0; i < 1 + CONSUMERS; i++) end = m->agents[i].now > end ? m->agents[i].now : end;
    return end;
}

static int block_ns(params p)
{
    static sim m;
    sim_init(&m, &p);
    return sim_run(&m);
}

/* The smallest softmax_ns at which step 10's block of 32 tiles takes at least the measured time. */
static int calibrate_softmax(const params *base)
{
    params p = *base;
    p.step = 10, p.tiles = CALIBRATION_TILES;
    int lo = 0, hi = 100000, target = measured_block_ns(STEP10_MS);
    while (lo < hi) {
        p.softmax_ns = (lo + hi) / 2;
        if (block_ns(p) >= target) hi = p.softmax_ns;
        else lo = p.softmax_ns + 1;
    }
    return lo;
}

static void default_params(params *p)
{
    p->step = 10, p->tiles = 4, p->qk_ns = p->pv_ns = product_ns(), p->softmax_ns = -1, p->copy_ns = 1000;
}

/* ---- output ---- */

static void print_program(const sim *m)
{
    printf("the operations of each thread, in the kernel's order (step %d, %d key tiles):\n", m->p.step, m->p.tiles);
    for (int i = 0; i < 1 + CONSUMERS; i++) {
        const agent *a = &m->agents[i];
        printf("  %s:", a->lane);
        phase ph = PH_NONE;
        int tile = -2;
        for (int j = 0; j < a->n_ops; j++) {
            const op *o = &a->ops[j];
            int producer_tile = i == 0 && o->tile != tile && strcmp(o->what, "issue V") && strcmp(o->what, "wait v_empty");
            int loop_top = o->ph == PH_LOOP && (strcmp(o->what, "wait k_full") == 0 || strcmp(o->what, "wait kv_full") == 0);
            if (j == 0 || o->ph != ph || loop_top || producer_tile) {
                if (o->ph == PH_LOOP) printf("\n    iteration n = %d:", o->tile);
                else if (o->ph != PH_NONE) printf("\n    %s:", phase_names[o->ph]);
                else printf("\n   ");
                ph = o->ph;
            }
            tile = o->tile;
            if (o->kind == OP_ISSUE)
                printf(" %s%s%d;", o->arg == PROD_QK ? "issue S" : "issue P", o->arg == PROD_QK ? "" : "V", o->tile);
            else if (o->kind == OP_WAIT_GROUP) printf(" wgmma.wait_group %d;", o->arg);
            else if (o->kind == OP_BUSY) printf(" softmax %d;", o->tile);
            else if (o->tile >= 0 && strcmp(o->what, "turn_end") && strcmp(o->what, "wait turn"))
                printf(" %s %d;", o->what, o->tile);
            else printf(" %s;", o->what);
        }
        putchar('\n');
    }
    putchar('\n');
}

static void print_timeline(const sim *m)
{
    printf("the schedule, ns (intervals start-end; points at one time):\n");
    printf("  %-13s %-16s %5s %4s %5s %7s %7s\n", "lane", "what", "cons.", "tile", "stage", "start", "end");
    for (int i = 0; i < m->n_rec; i++) {
        const record *r = &m->rec[i];
        if (strcmp(r->lane, "producer") && strncmp(r->lane, "consumer", 8) && strcmp(r->lane, "tensor cores")) continue;
        printf("  %-13s %-16s %5d %4d %5d %7d %7d\n", r->lane, r->what, r->consumer, r->tile, r->stage, r->start,
               r->end);
    }
    putchar('\n');
}

static void print_csv(const sim *m)
{
    printf("lane,what,consumer,tile,stage,start_ns,end_ns,phase\n");
    for (int i = 0; i < m->n_rec; i++) {
        const record *r = &m->rec[i];
        printf("%s,%s,%d,%d,%d,%d,%d,%s\n", r->lane, r->what, r->consumer, r->tile, r->stage, r->start, r->end,
               phase_names[r->ph]);
    }
}

static void print_summary(const sim *m, int end)
{
    long busy = 0;
    for (int i = 0; i < m->n_rec; i++)
        if (strcmp(m->rec[i].lane, "tensor cores") == 0) busy += m->rec[i].end - m->rec[i].start;
    params p = m->p;
    p.tiles = CALIBRATION_TILES;
    params p10 = p, p11 = p;
    p10.step = 10, p11.step = 11;
    printf("durations: S = Q K^T %d ns, O += P V %d ns (per consumer), softmax %d ns, TMA copy %d ns\n", m->p.qk_ns,
           m->p.pv_ns, m->p.softmax_ns, m->p.copy_ns);
    printf("this block (%d tiles): ends at %d ns; the tensor cores busy %ld ns, %.0f%% of it\n", m->p.tiles, end, busy,
           100.0 * busy / end);
    printf("a block of %d tiles (B4 H16 N4096 d128, %d blocks in %d waves on %d SMs), this model:\n", CALIBRATION_TILES,
           BENCH_BLOCKS, BENCH_WAVES, SMS);
    printf("  step 10: %d ns (measured: %d ns per block = %.5f ms / %d waves)\n", block_ns(p10),
           measured_block_ns(STEP10_MS), STEP10_MS, BENCH_WAVES);
    printf("  step 11: %d ns (a prediction with the same durations; measured: %d ns = %.5f ms / %d waves)\n",
           block_ns(p11), measured_block_ns(STEP11_MS), STEP11_MS, BENCH_WAVES);
}

/* ---- --check ---- */

static void check_schedule(int step)
{
    params p;
    default_params(&p);
    p.step = step, p.tiles = 8;
    p.softmax_ns = calibrate_softmax(&p);
    static sim m;
    sim_init(&m, &p);
    sim_run(&m);
    char name[200];
    snprintf(name, sizeof name, "ws_schedule step %d: every thread runs its operations to the end (no wait is left "
             "unsatisfied), 8 tiles", step);
    check(m.finished, name, "a thread is stuck: the protocol deadlocks");
    /* a stage is refilled only after both consumers released its previous tile; a product
     * reads a tile only after its full barrier completed */
    int refill_ok = 1, read_ok = 1;
    for (int i = 0; i < m.n_rec; i++) {
        const record *r = &m.rec[i];
        if (strcmp(r->lane, "producer") == 0 && r->tile >= STAGES && r->start == r->end) {
            const barrier *released = &m.bars[empty_of(step, r->what[6], r->tile - STAGES)];
            refill_ok &= r->start >= released->time && done(released);
        }
        if (strcmp(r->lane, "tensor cores") == 0)
            read_ok &= r->start >= m.bars[full_of(step, r->what[0] == 'S' ? PROD_QK : PROD_PV, r->tile)].time;
    }
    snprintf(name, sizeof name, "ws_schedule step %d: no K or V stage is refilled before both consumers released "
             "its previous tile (empty barrier%s)", step, step == 10 ? ", kv_empty" : "s, k_empty and v_empty");
    check(refill_ok, name, "a TMA issue comes before the stage's release");
    snprintf(name, sizeof name, "ws_schedule step %d: no product starts before its tile landed (full barrier)", step);
    check(read_ok, name, "a product runs on a tile still in flight");
    /* the tensor cores: one product at a time, the issues in turn order 0, 1, 0, 1, ...
     * (step 11: two products per turn) */
    int prev_end = 0, serial = 1, turns = 1, per_turn = step == 10 ? 1 : 2;
    for (int i = 0; i < m.n_rec; i++)
        if (strcmp(m.rec[i].lane, "tensor cores") == 0) serial &= m.rec[i].start >= prev_end, prev_end = m.rec[i].end;
    for (int i = 0; i < m.issues; i++) {
        int turn_index = step == 10 ? i : (i < CONSUMERS ? i : i < m.issues - CONSUMERS ? CONSUMERS + (i - CONSUMERS) / per_turn : 0);
        if (step == 11 && i >= m.issues - CONSUMERS) turn_index = -1;
        if (turn_index >= 0) turns &= m.issue_order[i] == turn_index % CONSUMERS;
    }
    if (step == 11)
        for (int i = m.issues - CONSUMERS; i < m.issues; i++) turns &= m.issue_order[i] == i - (m.issues - CONSUMERS);
    snprintf(name, sizeof name, "ws_schedule step %d: the tensor cores run one product at a time, issued in turns "
             "consumer 0, 1, 0, 1, ... (%d product%s a turn)", step, per_turn, per_turn > 1 ? "s" : "");
    check(serial && turns, name, "products overlap or a consumer issued out of turn");
    if (step == 10) {
        params q = p;
        q.tiles = CALIBRATION_TILES;
        int got = block_ns(q), want = measured_block_ns(STEP10_MS);
        q.softmax_ns--;
        check(got >= want && block_ns(q) < want,
              "ws_schedule: the calibrated softmax is the smallest at which step 10's 32-tile block takes the measured "
              "time per block (0.95677 ms / 16 waves)", "%d ns against %d", got, want);
    } else {
        /* in the loop, each softmax of S_n overlaps the consumer's own P_{n-1} V_{n-1} */
        int overlaps = 1, count = 0;
        for (int i = 0; i < m.n_rec; i++) {
            const record *s = &m.rec[i];
            if (strcmp(s->what, "softmax") || s->ph != PH_LOOP) continue;
            for (int j = 0; j < m.n_rec; j++) {
                const record *pv = &m.rec[j];
                if (strcmp(pv->lane, "tensor cores") || pv->what[0] != 'O' || pv->consumer != s->consumer ||
                    pv->tile != s->tile - 1)
                    continue;
                overlaps &= pv->start < s->end && pv->end > s->start;
                count++;
            }
        }
        check(overlaps && count == CONSUMERS * (p.tiles - 1),
              "ws_schedule step 11: in every loop iteration a consumer's softmax of S_n runs while its own "
              "P_{n-1} V_{n-1} is on the tensor cores", "%d softmaxes checked, overlap %d", count, overlaps);
    }
}

static void run_checks(void)
{
    check(product_ns() == 287, "ws_schedule: one consumer's m64n128 x d128 product at the measured wgmma ceiling "
          "(964.1 TFLOP/s over 132 SMs) is 287 ns", "%d ns", product_ns());
    check_schedule(10);
    check_schedule(11);
}

int main(int argc, char **argv)
{
    params p;
    default_params(&p);
    int csv = 0, step_index = 0;
    const cli_option opts[] = {
        {"--step", &step_index, 0, 0, 0, "10|11"},
        {"--tiles", &p.tiles, 1, MAX_TILES, 1, NULL},
        {"--qk-ns", &p.qk_ns, 1, 100000, 1, NULL},
        {"--pv-ns", &p.pv_ns, 1, 100000, 1, NULL},
        {"--softmax-ns", &p.softmax_ns, 0, 100000, 1, NULL},
        {"--copy-ns", &p.copy_ns, 0, 1000000, 1, NULL},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, sizeof opts / sizeof *opts, run_checks);
    p.step = step_index ? 11 : 10;
    if (p.softmax_ns < 0) p.softmax_ns = calibrate_softmax(&p);
    static sim m;
    sim_init(&m, &p);
    int end = sim_run(&m);
    if (!m.finished) {
        fprintf(stderr, "error: the protocol deadlocked (a bug of this program)\n");
        return 1;
    }
    if (csv) {
        print_csv(&m);
        return 0;
    }
    printf("step %d's block, one producer and %d consumer warpgroups, %d stages of K and V (%s), BLOCK_N = %d, d%d\n"
           "(a model: durations are parameters, see --help and the header of scratch/ws_schedule.c)\n\n",
           p.step, CONSUMERS, STAGES, p.step == 10 ? "kv_full, kv_empty" : "k_full, v_full, k_empty, v_empty", BLOCK_N, D);
    print_program(&m);
    print_timeline(&m);
    print_summary(&m, end);
    return 0;
}
