/* verify - asks the GPU what mma.m16n8k16 and ldmatrix really do, and compares
 * it element by element with the formulas in layouts.h that the visualizers print.
 *
 * mma: inputs are placed in registers by the layouts.h maps, with values that
 * encode positions:
 *  - one nonzero A register half and B = ones light up exactly one row of D:
 *    the row that A half feeds, read through the C map;
 *  - one nonzero B half and A = ones light up one column of D;
 *  - one nonzero A half and B[k][n] = k + 1 give D = k + 1 on that row: the k
 *    that A half meets in B;
 *  - random small integers give D = A B + C exactly (fp32 accumulation of
 *    products of integers below 2^8 is exact, in fp16 and in bf16).
 * The k, row and column labels themselves are only defined up to a relabeling
 * that the arithmetic cannot see; these runs show the three maps agree with
 * the hardware and with each other, which is all a kernel relies on.
 * ldmatrix: a shared tile whose 16-bit elements hold their own index is read
 * with addresses placed by layouts.h; each lane must receive the element the
 * formulas say (and, for step 04's loads, the element its mma fragment needs).
 *
 * Prints one PASS/FAIL line per property and exits 1 on any failure; without a
 * usable GPU (none, or below sm_80) prints one SKIP line and exits 0. */
#include "tool.h"
#include "layouts.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

static const char usage[] =
    "usage: verify\n"
    "Runs mma.sync.aligned.m16n8k16 (f16 and bf16) and ldmatrix x1/x2/x4(.trans) on the GPU with\n"
    "position-encoding inputs and compares the results with scratch/layouts.h, one PASS/FAIL line\n"
    "each; exits 1 on any failure. Without a usable GPU (sm_80+) it prints one SKIP line, exit 0.\n";

#define VERIFIER "verify" /* CUDA_OK's FAIL lines (scratch/tool.h) */

/* ---- device side: the raw instructions, nothing derived from layouts.h ---- */

typedef struct {
    uint32_t a[WARP_SIZE][MMA_A_REGS];
    uint32_t b[WARP_SIZE][MMA_B_REGS];
    float c[WARP_SIZE][MMA_C_REGS];
} mma_regs;

template <bool BF16>
__device__ void mma_16816(float d[MMA_C_REGS], const uint32_t a[MMA_A_REGS], const uint32_t b[MMA_B_REGS],
                          const float c[MMA_C_REGS])
{
    if constexpr (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                       "f"(c[2]), "f"(c[3]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                       "f"(c[2]), "f"(c[3]));
}

/* One warp per block, one mma per warp, registers as given. */
template <bool BF16>
__global__ void mma_kernel(const mma_regs *in, float *d)
{
    const mma_regs *w = &in[blockIdx.x];
    const int lane = threadIdx.x;
    float out[MMA_C_REGS];
    mma_16816<BF16>(out, w->a[lane], w->b[lane], w->c[lane]);
    for (int r = 0; r < MMA_C_REGS; r++) d[(blockIdx.x * WARP_SIZE + lane) * MMA_C_REGS + r] = out[r];
}

/* One P.V k-step: Q (A), K n-tiles 0 and 1 (B), V d-tile 0 (B), and for each
 * A register half of P the S accumulator it takes: ntile * 4 + creg. */
typedef struct {
    uint32_t q[WARP_SIZE][MMA_A_REGS];
    uint32_t k[2][WARP_SIZE][MMA_B_REGS];
    uint32_t v[WARP_SIZE][MMA_B_REGS];
    int p_source[MMA_A_REGS * HALVES];
} attention_regs;

/* S = Q K^T over two n-tiles, then O = P V with P packed from S's accumulators
 * as p_source says. */
template <bool BF16>
__global__ void s_to_p_kernel(const attention_regs *in, float *o)
{
    const int lane = threadIdx.x;
    const int *p_source = in->p_source;
    const float zero[MMA_C_REGS] = {0, 0, 0, 0};
    float s[2][MMA_C_REGS];
    mma_16816<BF16>(s[0], in->q[lane], in->k[0][lane], zero);
    mma_16816<BF16>(s[1], in->q[lane], in->k[1][lane], zero);
    uint32_t p[MMA_A_REGS];
    for (int r = 0; r < MMA_A_REGS; r++) {
        int lo = p_source[r * HALVES], hi = p_source[r * HALVES + 1];
        float x = s[lo / MMA_C_REGS][lo % MMA_C_REGS], y = s[hi / MMA_C_REGS][hi % MMA_C_REGS];
        if constexpr (BF16) {
            __nv_bfloat162 packed = __floats2bfloat162_rn(x, y); /* x in the low half */
            p[r] = *reinterpret_cast<uint32_t *>(&packed);
        } else {
            __half2 packed = __floats2half2_rn(x, y);
            p[r] = *reinterpret_cast<uint32_t *>(&packed);
        }
    }
    float out[MMA_C_REGS];
    mma_16816<BF16>(out, p, in->v[lane], zero);
    for (int r = 0; r < MMA_C_REGS; r++) o[lane * MMA_C_REGS + r] = out[r];
}

enum { LDSM_VARIANTS = 6, UNWRITTEN = 0xdeadbeefu };

/* variant = log2(matrices) + 3 * trans; block b reads with lane_bytes[b][lane]. */
__global__ void ldmatrix_kernel(const uint16_t *image, int image_elems, const uint32_t *lane_bytes, int variant,
                                uint32_t *out)
{
    extern __shared__ uint4 smem_raw[]; /* uint4: the 16-byte alignment ldmatrix rows need */
    uint16_t *smem = reinterpret_cast<uint16_t *>(smem_raw);
    for (int i = threadIdx.x; i < image_elems; i += WARP_SIZE) smem[i] = image[i];
    __syncwarp();
    const int i = blockIdx.x * WARP_SIZE + threadIdx.x;
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem) + lane_bytes[i];
    uint32_t r[LDSM_X4] = {UNWRITTEN, UNWRITTEN, UNWRITTEN, UNWRITTEN};
    switch (variant) {
    case 0: asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr)); break;
    case 1:
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
        break;
    case 2:
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
        break;
    case 3: asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr)); break;
    case 4:
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(addr));
        break;
    default:
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    }
    for (int j = 0; j < LDSM_X4; j++) out[i * LDSM_X4 + j] = r[j];
}

/* ---- host side: placing and reading registers through layouts.h ---- */

static uint16_t to_bits(float x, int bf16)
{
    if (bf16) return ((__nv_bfloat16_raw)__float2bfloat16(x)).x;
    return ((__half_raw)__float2half(x)).x;
}

static void set_half(uint32_t *reg, int half, uint16_t bits)
{
    int shift = 16 * half; /* the lower column (or k) sits in the low 16 bits */
    *reg = (*reg & ~(0xffffu << shift)) | ((uint32_t)bits << shift);
}

/* Puts matrix[row][col] (cols wide) into the register halves that the
 * fragment map `coord` assigns to it. */
static void place_halves(uint32_t *regs, int regs_per_lane, tile_coord (*coord)(int, int, int), const float *matrix,
                         int cols, int bf16)
{
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int reg = 0; reg < regs_per_lane; reg++)
            for (int half = 0; half < HALVES; half++) {
                tile_coord at = coord(lane, reg, half);
                set_half(&regs[lane * regs_per_lane + reg], half, to_bits(matrix[at.row * cols + at.col], bf16));
            }
}

static void place_a(uint32_t regs[WARP_SIZE][MMA_A_REGS], const float a[MMA_M][MMA_K], int bf16)
{
    place_halves(&regs[0][0], MMA_A_REGS, mma_a_coord, &a[0][0], MMA_K, bf16);
}

static void place_b(uint32_t regs[WARP_SIZE][MMA_B_REGS], const float b[MMA_K][MMA_N], int bf16)
{
    place_halves(&regs[0][0], MMA_B_REGS, mma_b_coord, &b[0][0], MMA_N, bf16);
}

static void place_c(float regs[WARP_SIZE][MMA_C_REGS], const float c[MMA_M][MMA_N])
{
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int reg = 0; reg < MMA_C_REGS; reg++) {
            tile_coord at = mma_c_coord(lane, reg);
            regs[lane][reg] = c[at.row][at.col];
        }
}

/* Compares a warp's D registers with the expected matrix through the C map;
 * describes the first difference in why. */
static int d_matches(const float *d, const float expect[MMA_M][MMA_N], char *why, size_t why_len)
{
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int reg = 0; reg < MMA_C_REGS; reg++) {
            tile_coord at = mma_c_coord(lane, reg);
            float got = d[lane * MMA_C_REGS + reg];
            if (got != expect[at.row][at.col]) {
                snprintf(why, why_len, "lane %d c%d (D[%d][%d]) = %g, expected %g", lane, reg, at.row, at.col, got,
                         expect[at.row][at.col]);
                return 0;
            }
        }
    return 1;
}

static float *run_mma(const mma_regs *warps, int count, int bf16)
{
    mma_regs *dev_in;
    float *dev_d, *d = (float *)malloc(sizeof(float) * count * WARP_SIZE * MMA_C_REGS);
    CUDA_OK(cudaMalloc(&dev_in, sizeof(mma_regs) * count));
    CUDA_OK(cudaMalloc(&dev_d, sizeof(float) * count * WARP_SIZE * MMA_C_REGS));
    CUDA_OK(cudaMemcpy(dev_in, warps, sizeof(mma_regs) * count, cudaMemcpyHostToDevice));
    if (bf16) mma_kernel<true><<<count, WARP_SIZE>>>(dev_in, dev_d);
    else mma_kernel<false><<<count, WARP_SIZE>>>(dev_in, dev_d);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(d, dev_d, sizeof(float) * count * WARP_SIZE * MMA_C_REGS, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(dev_in));
    CUDA_OK(cudaFree(dev_d));
    return d;
}

/* a tiny deterministic generator: small integers, exact in fp16 and bf16 */
static int small_int(uint32_t *state, int span)
{
    *state = *state * 1664525u + 1013904223u;
    return (int)(*state >> 24) % (2 * span + 1) - span;
}

enum { A_SLOTS = WARP_SIZE * MMA_A_REGS * HALVES, B_SLOTS = WARP_SIZE * MMA_B_REGS * HALVES, RANDOM_RUNS = 64 };

typedef enum { PROBE_A_ROW, PROBE_B_COLUMN, PROBE_K } mma_probe;

typedef struct {
    int lane, reg, half;
} register_half;

/* Run `run` of a probe sets one register half of A (or of B for PROBE_B_COLUMN). */
static register_half probed_half(mma_probe probe, int run)
{
    int regs = probe == PROBE_B_COLUMN ? MMA_B_REGS : MMA_A_REGS;
    register_half h = {run / (HALVES * regs), run / HALVES % regs, run % HALVES};
    return h;
}

/* One run per register half of A (or B): that half = 1, the other operand set
 * so that D shows where the half went. */
static void verify_mma_probe(mma_probe probe, int bf16)
{
    int runs = probe == PROBE_B_COLUMN ? B_SLOTS : A_SLOTS;
    mma_regs *warps = (mma_regs *)calloc(runs, sizeof(mma_regs));
    float ones_a[MMA_M][MMA_K], ones_b[MMA_K][MMA_N], k_plus_one[MMA_K][MMA_N];
    for (int k = 0; k < MMA_K; k++) {
        for (int m = 0; m < MMA_M; m++) ones_a[m][k] = 1;
        for (int n = 0; n < MMA_N; n++) ones_b[k][n] = 1, k_plus_one[k][n] = (float)(k + 1);
    }
    for (int run = 0; run < runs; run++) {
        register_half h = probed_half(probe, run);
        mma_regs *w = &warps[run];
        if (probe == PROBE_B_COLUMN) {
            place_a(w->a, ones_a, bf16);
            set_half(&w->b[h.lane][h.reg], h.half, to_bits(1, bf16));
        } else {
            place_b(w->b, probe == PROBE_K ? k_plus_one : ones_b, bf16);
            set_half(&w->a[h.lane][h.reg], h.half, to_bits(1, bf16));
        }
    }
    float *d = run_mma(warps, runs, bf16);
    int bad = 0;
    char why[160] = "";
    for (int run = 0; run < runs && !bad; run++) {
        register_half h = probed_half(probe, run);
        int lane = h.lane, reg = h.reg, half = h.half;
        float expect[MMA_M][MMA_N] = {{0}};
        if (probe == PROBE_B_COLUMN) {
            tile_coord at = mma_b_coord(lane, reg, half);
            for (int m = 0; m < MMA_M; m++) expect[m][at.col] = 1;
        } else {
            tile_coord at = mma_a_coord(lane, reg, half);
            for (int n = 0; n < MMA_N; n++) expect[at.row][n] = probe == PROBE_K ? (float)(at.col + 1) : 1;
        }
        char detail[128];
        if (!d_matches(d + run * WARP_SIZE * MMA_C_REGS, expect, detail, sizeof detail)) {
            bad++;
            snprintf(why, sizeof why, "%c lane %d reg %d half %d: %s", probe == PROBE_B_COLUMN ? 'B' : 'A', lane, reg,
                     half, detail);
        }
    }
    static const char *const what[] = {
        "A fragment (%s): each A register half feeds the D row layouts.h gives, %d one-hot runs",
        "B fragment (%s): each B register half feeds the D column layouts.h gives, %d one-hot runs",
        "k index (%s): each A register half multiplies the B elements of the k layouts.h gives it, %d one-hot runs",
    };
    char name[160] = "verify mma ";
    snprintf(name + strlen(name), sizeof name - strlen(name), what[probe], bf16 ? "bf16" : "f16", runs);
    check(!bad, name, "%s", why);
    free(warps);
    free(d);
}

static void verify_mma_random(int bf16)
{
    mma_regs *warps = (mma_regs *)calloc(RANDOM_RUNS, sizeof(mma_regs));
    float(*expect)[MMA_M][MMA_N] = (float(*)[MMA_M][MMA_N])calloc(RANDOM_RUNS, sizeof *expect);
    uint32_t state = 2024u + bf16;
    for (int run = 0; run < RANDOM_RUNS; run++) {
        float a[MMA_M][MMA_K], b[MMA_K][MMA_N], c[MMA_M][MMA_N];
        for (int m = 0; m < MMA_M; m++)
            for (int k = 0; k < MMA_K; k++) a[m][k] = (float)small_int(&state, 8);
        for (int k = 0; k < MMA_K; k++)
            for (int n = 0; n < MMA_N; n++) b[k][n] = (float)small_int(&state, 8);
        for (int m = 0; m < MMA_M; m++)
            for (int n = 0; n < MMA_N; n++) {
                c[m][n] = (float)small_int(&state, 100);
                expect[run][m][n] = c[m][n];
                for (int k = 0; k < MMA_K; k++) expect[run][m][n] += a[m][k] * b[k][n];
            }
        place_a(warps[run].a, a, bf16);
        place_b(warps[run].b, b, bf16);
        place_c(warps[run].c, c);
    }
    float *d = run_mma(warps, RANDOM_RUNS, bf16);
    int bad = 0;
    char why[160] = "";
    for (int run = 0; run < RANDOM_RUNS; run++)
        if (!d_matches(d + run * WARP_SIZE * MMA_C_REGS, expect[run], why, sizeof why)) bad++;
    char name[128];
    snprintf(name, sizeof name, "verify mma C fragment (%s): D = A B + C element by element, %d random integer runs",
             bf16 ? "bf16" : "f16", RANDOM_RUNS);
    check(!bad, name, "%d runs differ, e.g. %s", bad, why);
    free(warps);
    free(expect);
    free(d);
}

/* S = Q K^T (16 x 16 keys), P = S packed through p_source_*, O = P V (8 d columns). */
static void verify_s_to_p(int bf16)
{
    uint32_t state = 77u + bf16;
    float q[MMA_M][MMA_K], k0t[MMA_K][MMA_N], k1t[MMA_K][MMA_N], v[MMA_K][MMA_N], s[MMA_M][2 * MMA_N];
    float expect[MMA_M][MMA_N] = {{0}};
    for (int m = 0; m < MMA_M; m++)
        for (int d = 0; d < MMA_K; d++) q[m][d] = (float)small_int(&state, 2);
    for (int d = 0; d < MMA_K; d++)
        for (int n = 0; n < MMA_N; n++) k0t[d][n] = (float)small_int(&state, 2), k1t[d][n] = (float)small_int(&state, 2);
    for (int key = 0; key < MMA_K; key++)
        for (int n = 0; n < MMA_N; n++) v[key][n] = (float)small_int(&state, 2);
    /* |S| <= 16 * 4 = 64: exact in fp16 and bf16, so P = S exactly */
    for (int m = 0; m < MMA_M; m++)
        for (int key = 0; key < 2 * MMA_N; key++) {
            s[m][key] = 0;
            for (int d = 0; d < MMA_K; d++) s[m][key] += q[m][d] * (key < MMA_N ? k0t[d][key] : k1t[d][key - MMA_N]);
        }
    for (int m = 0; m < MMA_M; m++)
        for (int n = 0; n < MMA_N; n++)
            for (int key = 0; key < MMA_K; key++) expect[m][n] += s[m][key] * v[key][n];

    attention_regs host;
    memset(&host, 0, sizeof host);
    place_a(host.q, q, bf16);
    place_b(host.k[0], k0t, bf16);
    place_b(host.k[1], k1t, bf16);
    place_b(host.v, v, bf16);
    for (int reg = 0; reg < MMA_A_REGS; reg++)
        for (int half = 0; half < HALVES; half++)
            host.p_source[reg * HALVES + half] = p_source_ntile(0, reg) * MMA_C_REGS + p_source_creg(reg, half);

    attention_regs *dev_in;
    float *dev_o, o[WARP_SIZE * MMA_C_REGS];
    CUDA_OK(cudaMalloc(&dev_in, sizeof host));
    CUDA_OK(cudaMalloc(&dev_o, sizeof o));
    CUDA_OK(cudaMemcpy(dev_in, &host, sizeof host, cudaMemcpyHostToDevice));
    if (bf16) s_to_p_kernel<true><<<1, WARP_SIZE>>>(dev_in, dev_o);
    else s_to_p_kernel<false><<<1, WARP_SIZE>>>(dev_in, dev_o);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(o, dev_o, sizeof o, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(dev_in));
    CUDA_OK(cudaFree(dev_o));
    char why[128] = "", name[128];
    snprintf(name, sizeof name, "verify S accumulators (n-tiles 0, 1) packed as the A operand of P.V give O = S V (%s)",
             bf16 ? "bf16" : "f16");
    check(d_matches(o, expect, why, sizeof why), name, "%s", why);
}

/* Runs ldmatrix variant over `warps` address sets and returns the registers. */
static uint32_t *run_ldmatrix(const uint16_t *image, int image_elems, const uint32_t *lane_bytes, int warps, int variant)
{
    uint16_t *dev_image;
    uint32_t *dev_bytes, *dev_out, *out = (uint32_t *)malloc(sizeof(uint32_t) * warps * WARP_SIZE * LDSM_X4);
    CUDA_OK(cudaMalloc(&dev_image, sizeof(uint16_t) * image_elems));
    CUDA_OK(cudaMalloc(&dev_bytes, sizeof(uint32_t) * warps * WARP_SIZE));
    CUDA_OK(cudaMalloc(&dev_out, sizeof(uint32_t) * warps * WARP_SIZE * LDSM_X4));
    CUDA_OK(cudaMemcpy(dev_image, image, sizeof(uint16_t) * image_elems, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dev_bytes, lane_bytes, sizeof(uint32_t) * warps * WARP_SIZE, cudaMemcpyHostToDevice));
    ldmatrix_kernel<<<warps, WARP_SIZE, sizeof(uint16_t) * image_elems>>>(dev_image, image_elems, dev_bytes, variant,
                                                                         dev_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(out, dev_out, sizeof(uint32_t) * warps * WARP_SIZE * LDSM_X4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(dev_image));
    CUDA_OK(cudaFree(dev_bytes));
    CUDA_OK(cudaFree(dev_out));
    return out;
}

static uint16_t received_half(const uint32_t *out, int warp, int lane, int reg, int half)
{
    return (uint16_t)(out[(warp * WARP_SIZE + lane) * LDSM_X4 + reg] >> (16 * half));
}

/* Matrices stacked as a [32][8] tile (matrix i = rows 8i..8i+7), element value =
 * its index; lanes whose address the variant ignores point at decoy rows
 * holding 0xffff, which must never arrive. */
static void verify_ldmatrix_basic(int matrices, int trans)
{
    enum { TILE_ROWS = LDSM_X4 * LDSM_ROWS, DECOY = 0xffff };
    uint16_t image[(TILE_ROWS + LDSM_ROWS) * LDSM_ROWS];
    for (int i = 0; i < TILE_ROWS * LDSM_ROWS; i++) image[i] = (uint16_t)i;
    for (int i = TILE_ROWS * LDSM_ROWS; i < (TILE_ROWS + LDSM_ROWS) * LDSM_ROWS; i++) image[i] = DECOY;
    uint32_t lane_bytes[WARP_SIZE];
    for (int lane = 0; lane < WARP_SIZE; lane++) lane_bytes[lane] = (TILE_ROWS + lane % LDSM_ROWS) * CHUNK_BYTES;
    for (int matrix = 0; matrix < matrices; matrix++)
        for (int row = 0; row < LDSM_ROWS; row++)
            lane_bytes[ldsm_address_lane(matrix, row)] = (matrix * LDSM_ROWS + row) * CHUNK_BYTES;
    int variant = (matrices == 1 ? 0 : matrices == 2 ? 1 : 2) + 3 * trans;
    uint32_t *out = run_ldmatrix(image, (int)(sizeof image / sizeof image[0]), lane_bytes, 1, variant);
    int bad = 0;
    char why[128] = "";
    for (int lane = 0; lane < WARP_SIZE; lane++)
        for (int reg = 0; reg < matrices; reg++)
            for (int half = 0; half < HALVES; half++) {
                tile_coord at = ldsm_received(lane, half, trans);
                int expect = (reg * LDSM_ROWS + at.row) * LDSM_ROWS + at.col, got = received_half(out, 0, lane, reg, half);
                if (got != expect && !bad++)
                    snprintf(why, sizeof why, "lane %d reg %d half %d got element %d, expected %d (matrix %d row %d col %d)",
                             lane, reg, half, got, expect, reg, at.row, at.col);
            }
    char name[128];
    snprintf(name, sizeof name, "verify ldmatrix.x%d%s: lanes 0-%d address, every lane receives what layouts.h says",
             matrices, trans ? ".trans" : "", LDSM_ROWS * matrices - 1);
    check(!bad, name, "%d elements differ, first: %s", bad, why);
    free(out);
}

/* Step 04's loads: a [64][D] tile in shared memory (swizzled or not), element
 * value = row * D + col; every instance's lanes must receive their fragments. */
static void verify_ldmatrix_use(operand op, int dim, int swizzled)
{
    int elems = BLOCK_M * dim, warps = ldsm_instances(dim);
    uint16_t *image = (uint16_t *)malloc(sizeof(uint16_t) * elems);
    uint32_t *lane_bytes = (uint32_t *)malloc(sizeof(uint32_t) * warps * WARP_SIZE);
    for (int row = 0; row < BLOCK_M; row++)
        for (int col = 0; col < dim; col++) image[smem_byte_offset(row, col, dim, swizzled) / ELEM_BYTES] = (uint16_t)(row * dim + col);
    for (int inst = 0; inst < warps; inst++)
        for (int lane = 0; lane < WARP_SIZE; lane++) {
            tile_coord at = ldsm_address(op, dim, inst, lane);
            lane_bytes[inst * WARP_SIZE + lane] = (uint32_t)smem_byte_offset(at.row, at.col, dim, swizzled);
        }
    uint32_t *out = run_ldmatrix(image, elems, lane_bytes, warps, 2 + 3 * ldsm_trans(op));
    int bad = 0;
    char why[160] = "";
    for (int inst = 0; inst < warps; inst++)
        for (int lane = 0; lane < WARP_SIZE; lane++)
            for (int reg = 0; reg < LDSM_X4; reg++)
                for (int half = 0; half < HALVES; half++) {
                    tile_coord need = ldsm_needed(op, dim, inst, lane, reg, half);
                    int got = received_half(out, inst, lane, reg, half);
                    if (got != need.row * dim + need.col && !bad++)
                        snprintf(why, sizeof why, "instance %d lane %d reg %d half %d got [%d][%d], needs [%d][%d]", inst,
                                 lane, reg, half, got / dim, got % dim, need.row, need.col);
                }
    char name[128];
    snprintf(name, sizeof name, "verify ldmatrix.x4%s of %s, D=%d, %s tile: every lane receives its mma fragment",
             ldsm_trans(op) ? ".trans" : "", operand_name(op), dim, swizzled ? "swizzled" : "unswizzled");
    check(!bad, name, "%d elements differ, first: %s", bad, why);
    free(image);
    free(lane_bytes);
    free(out);
}

int main(int argc, char **argv)
{
    parse_cli(argc, argv, usage, NULL, 0, NULL);
    int devices = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("SKIP verify: no usable GPU (no CUDA device)\n");
        return 0;
    }
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
        printf("SKIP verify: no usable GPU (%s is sm_%d%d, mma.m16n8k16 with bf16 needs sm_80+)\n", prop.name,
               prop.major, prop.minor);
        return 0;
    }
    printf("# verify on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        verify_mma_probe(PROBE_A_ROW, bf16);
        verify_mma_probe(PROBE_B_COLUMN, bf16);
        verify_mma_probe(PROBE_K, bf16);
        verify_mma_random(bf16);
        verify_s_to_p(bf16);
    }
    for (int trans = 0; trans <= 1; trans++)
        for (int matrices = 1; matrices <= LDSM_X4; matrices *= 2) verify_ldmatrix_basic(matrices, trans);
    for (int dim = 64; dim <= 128; dim *= 2)
        for (int swizzled = 0; swizzled <= 1; swizzled++)
            for (operand op = OPERAND_Q; op < OPERANDS; op = (operand)(op + 1)) verify_ldmatrix_use(op, dim, swizzled);
    return check_exit_code();
}
