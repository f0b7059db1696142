/* bank_conflicts - a small model of the shared-memory pipeline, applied to the
 * access patterns of steps 02..07, unswizzled and swizzled.
 *
 * Model (CUDA C Programming Guide, "Shared Memory", compute capability 8.x/9.x):
 *  - 32 banks of 4 bytes; in one wavefront each bank delivers one 4-byte word,
 *    and lanes that want the same word share it (broadcast);
 *  - a request of 4-byte or 2-byte accesses is served for all 32 lanes at once;
 *    8-byte accesses in two half-warp phases, 16-byte accesses (and each 8x8
 *    matrix of ldmatrix) in four quarter-warp phases, because a wavefront moves
 *    at most 128 bytes;
 *  - a phase costs as many wavefronts as the busiest bank has distinct words.
 * Ideal: one wavefront per phase. */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: bank_conflicts [--dim 64|128|both] [--show PATTERN] [--format text|csv] [--check]\n"
    "Counts shared-memory wavefronts per warp request for every access pattern of steps 02-07\n"
    "(BLOCK_M = 64 query rows = 4 warps x 16, BLOCK_N = 64 keys, 128 threads), with tiles\n"
    "unswizzled (step 02) and swizzled (steps 03-07), and the ideal (one wavefront per phase).\n"
    "  --dim    head dimension D (default both)\n"
    "  --show   print the bank schedule of the first request of one pattern:\n"
    "           copy q-frag k-frag v-frag q-ldsm k-ldsm v-ldsm o-store o-load\n"
    "  --format csv: one line per lane of the first request of the --show pattern (default: every\n"
    "           pattern), unswizzled and swizzled, for the figures\n"
    "  --check  assert the model on known cases, that every swizzled pattern is conflict-free and\n"
    "           that the unswizzled step 02 fragment loads conflict as expected\n";

typedef struct {
    int active;
    int offset; /* byte offset in shared memory */
    int bytes;  /* 2, 4, 8 or 16 */
} lane_access;

typedef struct {
    lane_access lane[WARP_SIZE];
} warp_request;

/* Lanes served together: 128 bytes per wavefront at best. */
static int phase_lanes(int bytes) { return bytes <= BANK_BYTES ? WARP_SIZE : WARP_SIZE * BANK_BYTES / bytes; }

/* The distinct words each bank must deliver in one phase, and the first lane
 * asking for each: wavefront w serves word w of every bank. */
typedef struct {
    int count;
    int word[WARP_SIZE];
    int lane[WARP_SIZE];
} bank_queue;

static int schedule_phase(const warp_request *req, int first, int lanes, bank_queue queue[BANKS])
{
    memset(queue, 0, sizeof(bank_queue) * BANKS);
    int wavefronts = 0;
    for (int lane = first; lane < first + lanes; lane++) {
        const lane_access *a = &req->lane[lane];
        if (!a->active) continue;
        for (int word = a->offset / BANK_BYTES; word <= (a->offset + a->bytes - 1) / BANK_BYTES; word++) {
            bank_queue *q = &queue[word % BANKS];
            int seen = 0;
            for (int i = 0; i < q->count; i++) seen |= q->word[i] == word;
            if (seen) continue;
            q->word[q->count] = word;
            q->lane[q->count] = lane;
            q->count++;
            if (q->count > wavefronts) wavefronts = q->count;
        }
    }
    return wavefronts;
}

static int request_lanes_per_phase(const warp_request *req)
{
    for (int lane = 0; lane < WARP_SIZE; lane++)
        if (req->lane[lane].active) return phase_lanes(req->lane[lane].bytes);
    return WARP_SIZE;
}

/* wavefronts of a request, and the ideal: one per phase that has an active lane */
static void request_cost(const warp_request *req, int *wavefronts, int *ideal)
{
    bank_queue queue[BANKS];
    int lanes = request_lanes_per_phase(req);
    *wavefronts = *ideal = 0;
    for (int first = 0; first < WARP_SIZE; first += lanes) {
        int w = schedule_phase(req, first, lanes, queue);
        *wavefronts += w;
        *ideal += w > 0;
    }
}

/* ---- the access patterns of the steps ---- */

typedef struct {
    int requests, wavefronts, ideal, worst;
    warp_request first;
} tally;

static void tally_add(tally *t, const warp_request *req)
{
    int wavefronts, ideal;
    request_cost(req, &wavefronts, &ideal);
    if (t->requests == 0) t->first = *req;
    t->requests++;
    t->wavefronts += wavefronts;
    t->ideal += ideal;
    if (wavefronts > t->worst) t->worst = wavefronts;
}

/* A pattern is a list of warp requests over a [64][D] tile: request r puts each
 * lane on one tile element (row < 0: the lane is idle). In every pattern the
 * number of requests per tile is a multiple of D/16. */
typedef tile_coord (*lane_element_fn)(int request, int lane, int dim);

/* 16-byte chunks by 128 threads, chunk t + 128k, request = (iteration, warp):
 * the cp.async writes of Q/K/V (steps 02-07), the reads of the O tile (06-07). */
static tile_coord chunk_access(int request, int lane, int dim)
{
    tile_coord chunk = copy_chunk(request % WARPS * WARP_SIZE + lane, request / WARPS, dim);
    return chunk.row < BLOCK_M ? tile_coord_at(chunk.row, chunk.col * CHUNK_ELEMS) : tile_coord_at(-1, 0);
}

/* steps 02-03: each A register (2 halves) is one 32-bit load; request = ((warp, kk), reg) */
static tile_coord q_fragment_load(int request, int lane, int dim)
{
    int warp_kk = request / MMA_A_REGS;
    return q_fragment_element(warp_kk / (dim / MMA_K), warp_kk % (dim / MMA_K), lane, request % MMA_A_REGS, 0);
}

/* steps 02-03: K is [key][d], so the 2 halves of b0 (b1), consecutive k = d,
 * are one 32-bit load; every warp loads every (n-tile, kk, reg) */
static tile_coord k_fragment_load(int request, int lane, int dim)
{
    int ntile_kk = request / MMA_B_REGS % (BLOCK_N / MMA_N * (dim / MMA_K));
    return k_fragment_element(ntile_kk / (dim / MMA_K), ntile_kk % (dim / MMA_K), lane, request % MMA_B_REGS, 0);
}

/* steps 02-03: V is [key][d] but a B register pairs 2 consecutive keys, which
 * are 2 rows apart: each half is its own 16-bit load; every warp loads every
 * ((kk, d-tile), reg, half) */
static tile_coord v_fragment_load(int request, int lane, int dim)
{
    int kk_dtile = request / (MMA_B_REGS * HALVES) % (BLOCK_N / MMA_K * (dim / MMA_N));
    int reg = request / HALVES % MMA_B_REGS;
    return v_fragment_element(kk_dtile / (dim / MMA_N), kk_dtile % (dim / MMA_N), lane, reg, request % HALVES);
}

/* steps 04-07: ldmatrix.x4, 32 row addresses of 16 bytes. Warp w loads the Q
 * instances of its own rows (request = instance); every warp loads every K
 * and V instance (request = (warp, instance)). */
static int any_warp_instance(int request, int dim) { return request % ldsm_instances(dim); }
static tile_coord q_ldsm(int request, int lane, int dim) { return ldsm_address(OPERAND_Q, dim, request, lane); }
static tile_coord k_ldsm(int request, int lane, int dim) { return ldsm_address(OPERAND_K, dim, any_warp_instance(request, dim), lane); }
static tile_coord v_ldsm(int request, int lane, int dim) { return ldsm_address(OPERAND_V, dim, any_warp_instance(request, dim), lane); }

/* steps 06-07: c0,c1 (c2,c3) converted to 16 bits are one 32-bit store;
 * request = ((warp, d-tile), pair) */
static tile_coord o_fragment_store(int request, int lane, int dim)
{
    int warp_dtile = request / 2;
    return o_fragment_element(warp_dtile / (dim / MMA_N), warp_dtile % (dim / MMA_N), lane, 2 * (request % 2));
}

typedef struct {
    const char *key, *what, *steps, *access;
    int bytes;                  /* per lane */
    int requests_per_16_cols;   /* requests per tile = this x D/16 */
    lane_element_fn element;
    int unswizzled_ways;        /* expected wavefronts / ideal without the swizzle */
} pattern;

enum { PATTERNS = 9 };
static const pattern patterns[PATTERNS] = {
    {"copy", "Q/K/V tile -> smem, chunk t+128k", "02-07", "cp.async 16 B", CHUNK_BYTES, WARPS, chunk_access, 1},
    {"q-frag", "Q A fragment loads", "02-03", "ld 4 B", 4, WARPS * MMA_A_REGS, q_fragment_load, 8},
    {"k-frag", "K B fragment loads", "02-03", "ld 4 B", 4, WARPS * BLOCK_N / MMA_N * MMA_B_REGS, k_fragment_load, 8},
    {"v-frag", "V B fragment loads", "02-03", "ld 2 B", 2, WARPS * BLOCK_N / MMA_K * (16 / MMA_N) * MMA_B_REGS * HALVES,
     v_fragment_load, 4},
    {"q-ldsm", "Q ldmatrix.x4", "04-07", "ldmatrix", CHUNK_BYTES, WARPS, q_ldsm, 8},
    {"k-ldsm", "K ldmatrix.x4", "04-07", "ldmatrix", CHUNK_BYTES, WARPS * BLOCK_N / 16, k_ldsm, 8},
    {"v-ldsm", "V ldmatrix.x4.trans", "04-07", "ldmatrix", CHUNK_BYTES, WARPS * BLOCK_N / 16, v_ldsm, 8},
    {"o-store", "O fragments -> smem tile", "06-07", "st 4 B", 4, WARPS * (16 / MMA_N) * 2, o_fragment_store, 8},
    {"o-load", "O tile -> registers, chunk t+128k", "06-07", "ld 16 B", CHUNK_BYTES, WARPS, chunk_access, 1},
};

/* Request `request` of a pattern: each lane's shared-memory access. */
static void build_request(const pattern *p, int request, int dim, int swizzled, warp_request *req)
{
    memset(req, 0, sizeof *req);
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        tile_coord at = p->element(request, lane, dim);
        if (at.row < 0) continue;
        lane_access *a = &req->lane[lane];
        a->active = 1;
        a->offset = smem_byte_offset(at.row, at.col, dim, swizzled);
        a->bytes = p->bytes;
    }
}

static tally measure(const pattern *p, int dim, int swizzled)
{
    tally t;
    memset(&t, 0, sizeof t);
    for (int request = 0; request < p->requests_per_16_cols * (dim / 16); request++) {
        warp_request req;
        build_request(p, request, dim, swizzled, &req);
        tally_add(&t, &req);
    }
    return t;
}

static void format_per_request(char *out, size_t size, int total, int requests)
{
    if (total % requests == 0) snprintf(out, size, "%d", total / requests);
    else snprintf(out, size, "%.2f", (double)total / requests);
}

static void print_table(int dim)
{
    printf("D = %d: tiles [64][%d], rows of %d bytes; wavefronts per warp request (average over the %s)\n", dim, dim,
           dim * ELEM_BYTES, "pattern's requests in one tile");
    printf("%-8s %-34s %-6s %-13s %8s | %10s %9s %6s\n", "pattern", "what", "steps", "access", "requests", "unswizzled",
           "swizzled", "ideal");
    for (int i = 0; i < PATTERNS; i++) {
        const pattern *p = &patterns[i];
        tally plain = measure(p, dim, 0), swizzled = measure(p, dim, 1);
        char plain_text[16], swizzled_text[16], ideal_text[16];
        format_per_request(plain_text, sizeof plain_text, plain.wavefronts, plain.requests);
        format_per_request(swizzled_text, sizeof swizzled_text, swizzled.wavefronts, swizzled.requests);
        format_per_request(ideal_text, sizeof ideal_text, plain.ideal, plain.requests);
        printf("%-8s %-34s %-6s %-13s %8d | ", p->key, p->what, p->steps, p->access, plain.requests);
        put_cell(plain_text, 10, plain.wavefronts > plain.ideal ? 0 : 1);
        putchar(' ');
        put_cell(swizzled_text, 9, swizzled.wavefronts > swizzled.ideal ? 0 : 1);
        printf(" %6s\n", ideal_text);
    }
    printf("\n");
}

typedef struct {
    const bank_queue *queue;
} schedule_view;

static void schedule_cell(int wavefront, int bank, const void *ctx, grid_cell *cell)
{
    const bank_queue *q = &((const schedule_view *)ctx)->queue[bank];
    if (wavefront < q->count) {
        snprintf(cell->text, sizeof cell->text, "%d", q->lane[wavefront]);
        cell->colour = wavefront;
    } else snprintf(cell->text, sizeof cell->text, ".");
}

static void print_schedule(const pattern *p, int dim, int swizzled)
{
    tally t = measure(p, dim, swizzled);
    const warp_request *req = &t.first;
    int lanes = request_lanes_per_phase(req);
    printf("%s, D = %d, %s: first request, lane -> (byte offset, bank)\n", p->what, dim,
           swizzled ? "swizzled" : "unswizzled");
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        const lane_access *a = &req->lane[lane];
        char item[32] = "";
        if (a->active) snprintf(item, sizeof item, "%2d:%5d b%d", lane, a->offset, smem_bank(a->offset));
        int line_end = lane % 6 == 5 || lane == WARP_SIZE - 1;
        printf(line_end ? "  %s\n" : "  %-13s", item);
    }
    for (int first = 0; first < WARP_SIZE; first += lanes) {
        bank_queue queue[BANKS];
        int wavefronts = schedule_phase(req, first, lanes, queue);
        if (!wavefronts) continue;
        printf("phase of lanes %d-%d: %d wavefront%s; row = wavefront, column = bank, cell = a lane served\n", first,
               first + lanes - 1, wavefronts, wavefronts == 1 ? "" : "s");
        schedule_view view = {queue};
        grid_shape shape = {"wave", wavefronts, BANKS, 2, 8, 0};
        print_grid(&shape, schedule_cell, &view);
    }
    printf("\n");
}

/* --format csv: the first request of print_schedule, one line per active lane: its tile
 * element (row, col) and access size; row_byte, where the element sits in its row of D
 * 16-bit elements (in global memory, too, a row of Q, K, V or O is D contiguous elements);
 * then, unswizzled and swizzled, the lane's byte offset in shared memory, its first bank, and
 * the wavefronts of its phase (phase = the lanes served together). */
static void print_csv(const pattern *p, int dim)
{
    warp_request plain, swizzled;
    build_request(p, 0, dim, 0, &plain);
    build_request(p, 0, dim, 1, &swizzled);
    int lanes = request_lanes_per_phase(&swizzled), plain_waves[WARP_SIZE], waves[WARP_SIZE];
    for (int first = 0; first < WARP_SIZE; first += lanes) {
        bank_queue queue[BANKS];
        plain_waves[first / lanes] = schedule_phase(&plain, first, lanes, queue);
        waves[first / lanes] = schedule_phase(&swizzled, first, lanes, queue);
    }
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        if (!swizzled.lane[lane].active) continue;
        tile_coord at = p->element(0, lane, dim);
        int phase = lane / lanes, plain_byte = plain.lane[lane].offset, byte = swizzled.lane[lane].offset;
        printf("%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", p->key, dim, lane, phase, at.row, at.col, p->bytes,
               at.col * ELEM_BYTES, plain_byte, smem_bank(plain_byte), plain_waves[phase], byte, smem_bank(byte),
               waves[phase]);
    }
}

/* ---- --check ---- */

static int model_cost(int stride_bytes, int bytes, int *ideal)
{
    warp_request req;
    for (int lane = 0; lane < WARP_SIZE; lane++) req.lane[lane] = (lane_access){1, lane * stride_bytes, bytes};
    int wavefronts;
    request_cost(&req, &wavefronts, ideal);
    return wavefronts;
}

static void check_model(const char *name, int stride_bytes, int bytes, int expected)
{
    int ideal, got = model_cost(stride_bytes, bytes, &ideal);
    check(got == expected, name, "%d wavefronts, expected %d", got, expected);
}

static void run_checks(void)
{
    check_model("model: 32 consecutive 4-byte words take 1 wavefront", 4, 4, 1);
    check_model("model: 32 lanes reading one word take 1 wavefront (broadcast)", 0, 4, 1);
    check_model("model: 32 lanes 2 bytes apart share 16 words, 1 wavefront", 2, 2, 1);
    check_model("model: a 128-byte stride puts 32 words in one bank, 32 wavefronts", 128, 4, 32);
    check_model("model: 8-byte accesses, two half-warp phases, 2 wavefronts", 8, 8, 2);
    check_model("model: 16-byte accesses, four quarter-warp phases, 4 wavefronts", 16, 16, 4);
    check_model("model: 16-byte accesses 256 bytes apart, 8 per bank group per phase, 32 wavefronts", 256, 16, 32);
    for (int dim = 64; dim <= 128; dim *= 2)
        for (int i = 0; i < PATTERNS; i++) {
            const pattern *p = &patterns[i];
            tally plain = measure(p, dim, 0), swizzled = measure(p, dim, 1);
            char name[128];
            snprintf(name, sizeof name, "swizzled %s (step%s %s) D=%d is conflict-free: wavefronts/request = ideal = %d",
                     p->what, strchr(p->steps, '-') ? "s" : "", p->steps, dim, swizzled.ideal / swizzled.requests);
            check(swizzled.wavefronts == swizzled.ideal && swizzled.worst * swizzled.requests == swizzled.ideal, name,
                  "%d wavefronts over %d requests, ideal %d", swizzled.wavefronts, swizzled.requests, swizzled.ideal);
            snprintf(name, sizeof name, "unswizzled %s D=%d costs %dx the ideal%s", p->what, dim, p->unswizzled_ways,
                     p->unswizzled_ways > 1 ? " (bank conflicts)" : "");
            check(plain.wavefronts == p->unswizzled_ways * plain.ideal, name, "%d wavefronts, ideal %d", plain.wavefronts,
                  plain.ideal);
        }
}

int main(int argc, char **argv)
{
    int dim_choice = 2, show = -1, csv = 0;
    const cli_option opts[] = {
        {"--dim", &dim_choice, 0, 0, 0, "64|128|both"},
        {"--show", &show, 0, 0, 0, "copy|q-frag|k-frag|v-frag|q-ldsm|k-ldsm|v-ldsm|o-store|o-load"},
        {"--format", &csv, 0, 0, 0, "text|csv"},
    };
    parse_cli(argc, argv, usage, opts, 3, run_checks);
    if (csv) {
        printf("pattern,dim,lane,phase,row,col,bytes,row_byte,plain_byte,plain_bank,plain_wavefronts,byte,bank,"
               "wavefronts\n");
        for (int dim = 64; dim <= 128; dim *= 2)
            for (int i = 0; i < PATTERNS; i++)
                if ((dim_choice == 2 || dim == 64 << dim_choice) && (show < 0 || show == i)) print_csv(&patterns[i], dim);
        return 0;
    }
    printf("Shared-memory wavefronts per warp request: 32 banks x 4 bytes, one word per bank per wavefront,\n"
           "same word = broadcast; 16-byte accesses and ldmatrix matrices go 8 lanes per phase (128 bytes),\n"
           "so their ideal is 4. BLOCK_M = 64 (4 warps x 16 rows), BLOCK_N = 64 keys, 128 threads.\n\n");
    for (int dim = 64; dim <= 128; dim *= 2) {
        if (dim_choice != 2 && dim != 64 << dim_choice) continue;
        if (show >= 0) {
            print_schedule(&patterns[show], dim, 0);
            print_schedule(&patterns[show], dim, 1);
        } else print_table(dim);
    }
    return 0;
}
