/* verify_wgmma - asks a Hopper GPU what wgmma.mma_async.m64n64k16 really does,
 * and compares it element by element with the wgmma formulas in layouts.h that
 * wgmma_fragments prints and step 09 relies on.
 *
 * One warpgroup (one block of 128 threads) per run issues one wgmma with A from
 * registers and B from shared memory through a matrix descriptor: K-major, no
 * swizzle, core matrices of 8 rows x 16 bytes placed by wgmma_b_kmajor_offset,
 * in two arrangements of the descriptor's leading and stride byte offsets.
 * Inputs are placed by the layouts.h maps, with values that encode positions:
 *  - A[m][0] = m, A[m][1] = 1, B[0][n] = 64, B[1][n] = n and 0 elsewhere give
 *    D[m][n] = 64 m + n: every accumulator register names the element it holds;
 *  - one nonzero A register half and B[k][n] = k + 1 give D = k + 1 on one row:
 *    the row that half feeds and the k it meets;
 *  - one nonzero B element and A[m][k] = k + 1 give D = k + 1 on one column:
 *    where the descriptor found that element;
 *  - random small integers give D = A B + C exactly (fp32 accumulation of
 *    products of integers below 2^8 is exact, in fp16 and in bf16);
 *  - S = Q K^T, its accumulators packed into register A as wgmma_p_source_reg
 *    says, then O = P V over the 4 k-steps of 16 keys: O = S V exactly;
 *  - the steps' own layouts: Q, K and V in TMA's 128-byte-swizzled slabs (placed by
 *    tma_byte_offset, the layout scratch/verify_tma checks the copy engine writes),
 *    S = Q K^T through K-major swizzled descriptors (m64n128k16, d64 and d128) and
 *    O = P V through an MN-major transposing one (m64n64k16, m64n128k16), random
 *    small integers, every element checked.
 * The k labels are only defined up to a relabeling the arithmetic cannot see;
 * these runs show that the maps agree with the hardware and with each other.
 *
 * Prints one PASS/FAIL line per property and exits 1 on any failure; without a
 * GPU of compute capability 9.0 (sm_90a code runs on no other) prints one SKIP
 * line and exits 0. */
#include "tool.h"
#include "layouts.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

static const char usage[] =
    "usage: verify_wgmma\n"
    "Runs wgmma.mma_async.m64n64k16 (f16 and bf16; A from registers, B from shared memory, K-major,\n"
    "no swizzle) on the GPU with position-encoding inputs, then S = Q K^T and O = P V in the steps'\n"
    "own layouts (128-byte-swizzled slabs, K-major and MN-major descriptors), and compares the results with\n"
    "scratch/layouts.h, one PASS/FAIL line each; exits 1 on any failure. Without a GPU of compute\n"
    "capability 9.0 (sm_90a) it prints one SKIP line, exit 0.\n";

#define VERIFIER "verify_wgmma" /* CUDA_OK's FAIL lines (scratch/tool.h) */

enum {
    WG_N = 64,                               /* the instruction verified: m64n64k16 (step 09's P V at d64) */
    D_REGS = WG_N / 2,
    B_ELEMS = WG_K * WG_N,                   /* one B tile, 16 x 64, 2048 bytes */
    B_BYTES = B_ELEMS * ELEM_BYTES,
    KSTEPS = WG_N / WG_K,                    /* P V over the 64 keys of one S tile */
};

/* ---- device side: the raw instructions, nothing derived from layouts.h ---- */

typedef struct {
    uint32_t a[WG_THREADS][WG_A_REGS];
    float c[WG_THREADS][D_REGS];
    uint16_t b[B_ELEMS]; /* the shared-memory image of B, already in the descriptor's layout */
} wgmma_run;

/* The shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
 * bits 0-13 start address, 16-29 leading byte offset, 32-45 stride byte offset,
 * each in 16-byte units; bits 62-63 swizzle mode, 0 = none. The base offset
 * (bits 49-51) only applies to swizzled layouts. */
__device__ uint64_t smem_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32;
}

/* Shared memory written by st.shared (the generic proxy) must be fenced before
 * wgmma reads it through the async proxy; the barrier after it then covers
 * every thread's part of the tile. */
__device__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#define WGMMA_ACC_32                                                                                              \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_OPERANDS_32(d)                                                                                      \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),  \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),   \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),  \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

/* D = A B + D, A from registers, B K-major from shared memory (scale-d 1, no
 * negation, imm-trans-b 0). wgmma is asynchronous: wgmma.fence orders the
 * register writes before it, commit_group closes the group and wait_group 0
 * returns once D is written. All four in one asm statement, so the compiler
 * cannot read or move the accumulators while the tensor cores still write them. */
#define WGMMA_RS_SYNC(type)                                                                                       \
    "wgmma.fence.sync.aligned;\n"                                                                                \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." type "." type " " WGMMA_ACC_32                                 \
    ", {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"                                                                 \
    "wgmma.commit_group.sync.aligned;\n"                                                                         \
    "wgmma.wait_group.sync.aligned 0;\n"

template <bool BF16>
__device__ void wgmma_m64n64k16(float (&d)[D_REGS], const uint32_t (&a)[WG_A_REGS], uint64_t b_desc)
{
    if constexpr (BF16)
        asm volatile(WGMMA_RS_SYNC("bf16")
                     : WGMMA_OPERANDS_32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc)
                     : "memory");
    else
        asm volatile(WGMMA_RS_SYNC("f16")
                     : WGMMA_OPERANDS_32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc)
                     : "memory");
}

/* One warpgroup per block, one wgmma per warpgroup, registers and B image as given. */
template <bool BF16>
__global__ void __launch_bounds__(WG_THREADS) wgmma_kernel(const wgmma_run *in, uint32_t lbo, uint32_t sbo, float *d)
{
    __shared__ __align__(16) uint16_t b_smem[B_ELEMS]; /* 16 bytes: the descriptor's start address unit */
    const wgmma_run *run = &in[blockIdx.x];
    const int thread = threadIdx.x;
    for (int i = thread; i < B_ELEMS; i += WG_THREADS) b_smem[i] = run->b[i];
    fence_proxy_async();
    __syncthreads();
    float acc[D_REGS];
    uint32_t a[WG_A_REGS];
    for (int r = 0; r < D_REGS; r++) acc[r] = run->c[thread][r];
    for (int r = 0; r < WG_A_REGS; r++) a[r] = run->a[thread][r];
    wgmma_m64n64k16<BF16>(acc, a, smem_desc((uint32_t)__cvta_generic_to_shared(b_smem), lbo, sbo));
    for (int r = 0; r < D_REGS; r++) d[(blockIdx.x * WG_THREADS + thread) * D_REGS + r] = acc[r];
}

/* Two fp32 -> one register of two 16-bit values, as step 09 packs P. */
template <bool BF16>
__device__ uint32_t pack2(float lo, float hi)
{
    if constexpr (BF16) {
        __nv_bfloat162 packed = __floats2bfloat162_rn(lo, hi); /* lo in the low half */
        return *reinterpret_cast<uint32_t *>(&packed);
    } else {
        __half2 packed = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&packed);
    }
}

/* S = Q K^T over 64 keys, then O = P V in 4 k-steps of 16 keys. K [key][d] is
 * B of the first product K-major as it stands; V is given per k-step already
 * in B's K-major layout ([d][key]). For each k-step, A register and half of P,
 * the S accumulator it takes. */
typedef struct {
    uint32_t q[WG_THREADS][WG_A_REGS];
    uint16_t k[B_ELEMS];
    uint16_t v[KSTEPS][B_ELEMS];
    int p_source[KSTEPS][WG_A_REGS][HALVES];
} attention_run;

template <bool BF16>
__global__ void __launch_bounds__(WG_THREADS) s_to_p_kernel(const attention_run *in, uint32_t lbo, uint32_t sbo, float *o)
{
    __shared__ __align__(16) uint16_t tiles[(1 + KSTEPS) * B_ELEMS]; /* K, then V of k-steps 0..3 */
    const int thread = threadIdx.x;
    for (int i = thread; i < B_ELEMS; i += WG_THREADS) tiles[i] = in->k[i];
    for (int i = thread; i < KSTEPS * B_ELEMS; i += WG_THREADS) tiles[B_ELEMS + i] = in->v[i / B_ELEMS][i % B_ELEMS];
    fence_proxy_async();
    __syncthreads();
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(tiles);
    float s[D_REGS], out[D_REGS];
    uint32_t q[WG_A_REGS];
    for (int r = 0; r < D_REGS; r++) s[r] = 0.0f, out[r] = 0.0f;
    for (int r = 0; r < WG_A_REGS; r++) q[r] = in->q[thread][r];
    wgmma_m64n64k16<BF16>(s, q, smem_desc(base, lbo, sbo));
    for (int j = 0; j < KSTEPS; j++) {
        uint32_t p[WG_A_REGS];
        for (int r = 0; r < WG_A_REGS; r++) p[r] = pack2<BF16>(s[in->p_source[j][r][0]], s[in->p_source[j][r][1]]);
        wgmma_m64n64k16<BF16>(out, p, smem_desc(base + (1 + j) * B_BYTES, lbo, sbo));
    }
    for (int r = 0; r < D_REGS; r++) o[thread * D_REGS + r] = out[r];
}

/* ---- host side: placing and reading registers through layouts.h ---- */

/* Two arrangements of the same 16 x 64 K-major tile in its 2048 bytes, so that
 * the leading and the stride byte offsets each take two values. */
typedef struct {
    uint32_t lbo, sbo;
    const char *what;
} b_layout;

static const b_layout b_layouts[] = {
    {128, 256, "LBO 128 SBO 256: each 8-row group's two k core matrices adjacent"},
    {1024, 128, "LBO 1024 SBO 128: the 8 core matrices of k 0-7, then those of k 8-15"},
};
enum { B_LAYOUTS = sizeof b_layouts / sizeof b_layouts[0] };

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

static void place_a(uint32_t regs[WG_THREADS][WG_A_REGS], const float a[WG_M][WG_K], int bf16)
{
    for (int thread = 0; thread < WG_THREADS; thread++)
        for (int reg = 0; reg < WG_A_REGS; reg++)
            for (int half = 0; half < HALVES; half++) {
                tile_coord at = wgmma_a_coord(wgmma_warp(thread), thread % WARP_SIZE, reg, half);
                set_half(&regs[thread][reg], half, to_bits(a[at.row][at.col], bf16));
            }
}

static void place_b(uint16_t image[B_ELEMS], const float b[WG_K][WG_N], const b_layout *layout, int bf16)
{
    for (int k = 0; k < WG_K; k++)
        for (int n = 0; n < WG_N; n++)
            image[wgmma_b_kmajor_offset(k, n, layout->lbo, layout->sbo) / ELEM_BYTES] = to_bits(b[k][n], bf16);
}

static void place_c(float regs[WG_THREADS][D_REGS], const float c[WG_M][WG_N])
{
    for (int thread = 0; thread < WG_THREADS; thread++)
        for (int reg = 0; reg < D_REGS; reg++) {
            tile_coord at = wgmma_d_coord(wgmma_warp(thread), thread % WARP_SIZE, reg);
            regs[thread][reg] = c[at.row][at.col];
        }
}

/* Compares a warpgroup's D registers with the expected matrix through the
 * accumulator map; describes the first difference in why. */
static int d_matches(const float *d, const float expect[WG_M][WG_N], char *why, size_t why_len)
{
    for (int thread = 0; thread < WG_THREADS; thread++)
        for (int reg = 0; reg < D_REGS; reg++) {
            tile_coord at = wgmma_d_coord(wgmma_warp(thread), thread % WARP_SIZE, reg);
            float got = d[thread * D_REGS + reg];
            if (got != expect[at.row][at.col]) {
                snprintf(why, why_len, "warp %d lane %d d%d (D[%d][%d]) = %g, expected %g", wgmma_warp(thread),
                         thread % WARP_SIZE, reg, at.row, at.col, got, expect[at.row][at.col]);
                return 0;
            }
        }
    return 1;
}

static float *run_wgmma(const wgmma_run *runs, int count, const b_layout *layout, int bf16)
{
    wgmma_run *dev_in;
    float *dev_d, *d = (float *)malloc(sizeof(float) * count * WG_THREADS * D_REGS);
    CUDA_OK(cudaMalloc(&dev_in, sizeof(wgmma_run) * count));
    CUDA_OK(cudaMalloc(&dev_d, sizeof(float) * count * WG_THREADS * D_REGS));
    CUDA_OK(cudaMemcpy(dev_in, runs, sizeof(wgmma_run) * count, cudaMemcpyHostToDevice));
    if (bf16) wgmma_kernel<true><<<count, WG_THREADS>>>(dev_in, layout->lbo, layout->sbo, dev_d);
    else wgmma_kernel<false><<<count, WG_THREADS>>>(dev_in, layout->lbo, layout->sbo, dev_d);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(d, dev_d, sizeof(float) * count * WG_THREADS * D_REGS, cudaMemcpyDeviceToHost));
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

static const char *dtype_name(int bf16) { return bf16 ? "bf16" : "f16"; }

enum { A_SLOTS = WG_THREADS * WG_A_REGS * HALVES, RANDOM_RUNS = 64 };

/* D = 64 m + n: one run, every register checked against the element it should hold. */
static void verify_accumulators(int bf16)
{
    float a[WG_M][WG_K] = {{0}}, b[WG_K][WG_N] = {{0}}, expect[WG_M][WG_N];
    wgmma_run *run = (wgmma_run *)calloc(1, sizeof(wgmma_run));
    for (int m = 0; m < WG_M; m++) a[m][0] = (float)m, a[m][1] = 1;
    for (int n = 0; n < WG_N; n++) b[0][n] = WG_N, b[1][n] = (float)n;
    for (int m = 0; m < WG_M; m++)
        for (int n = 0; n < WG_N; n++) expect[m][n] = (float)(WG_N * m + n);
    place_a(run->a, a, bf16);
    place_b(run->b, b, &b_layouts[0], bf16);
    float *d = run_wgmma(run, 1, &b_layouts[0], bf16);
    char why[160] = "", name[160];
    snprintf(name, sizeof name,
             "verify wgmma D accumulators (%s): every thread's register i holds D[m][n] = 64 m + n of the element "
             "layouts.h gives",
             dtype_name(bf16));
    check(d_matches(d, expect, why, sizeof why), name, "%s", why);
    free(run);
    free(d);
}

/* One run per register half of A, that half = 1 and B[k][n] = k + 1: D must be
 * k + 1 on the half's row and 0 elsewhere. */
static void verify_a_probe(int bf16)
{
    float b[WG_K][WG_N];
    wgmma_run *runs = (wgmma_run *)calloc(A_SLOTS, sizeof(wgmma_run));
    for (int k = 0; k < WG_K; k++)
        for (int n = 0; n < WG_N; n++) b[k][n] = (float)(k + 1);
    for (int run = 0; run < A_SLOTS; run++) {
        int thread = run / (WG_A_REGS * HALVES), reg = run / HALVES % WG_A_REGS, half = run % HALVES;
        set_half(&runs[run].a[thread][reg], half, to_bits(1, bf16));
        place_b(runs[run].b, b, &b_layouts[0], bf16);
    }
    float *d = run_wgmma(runs, A_SLOTS, &b_layouts[0], bf16);
    int bad = 0;
    char why[224] = "";
    for (int run = 0; run < A_SLOTS; run++) {
        int thread = run / (WG_A_REGS * HALVES), reg = run / HALVES % WG_A_REGS, half = run % HALVES;
        tile_coord at = wgmma_a_coord(wgmma_warp(thread), thread % WARP_SIZE, reg, half);
        float expect[WG_M][WG_N] = {{0}};
        for (int n = 0; n < WG_N; n++) expect[at.row][n] = (float)(at.col + 1);
        char detail[160];
        if (!d_matches(d + run * WG_THREADS * D_REGS, expect, detail, sizeof detail) && !bad++)
            snprintf(why, sizeof why, "thread %d a%d half %d: %s", thread, reg, half, detail);
    }
    char name[160];
    snprintf(name, sizeof name,
             "verify wgmma register A (%s): each A register half feeds the row and meets the k layouts.h gives, %d "
             "one-hot runs",
             dtype_name(bf16), A_SLOTS);
    check(!bad, name, "%d runs differ, first: %s", bad, why);
    free(runs);
    free(d);
}

/* One run per element of B, that element = 1 and A[m][k] = k + 1: D must be
 * k + 1 on the element's column n and 0 elsewhere. */
static void verify_b_probe(const b_layout *layout, int bf16)
{
    float a[WG_M][WG_K];
    wgmma_run *runs = (wgmma_run *)calloc(B_ELEMS, sizeof(wgmma_run));
    for (int m = 0; m < WG_M; m++)
        for (int k = 0; k < WG_K; k++) a[m][k] = (float)(k + 1);
    for (int run = 0; run < B_ELEMS; run++) {
        int k = run / WG_N, n = run % WG_N;
        place_a(runs[run].a, a, bf16);
        runs[run].b[wgmma_b_kmajor_offset(k, n, layout->lbo, layout->sbo) / ELEM_BYTES] = to_bits(1, bf16);
    }
    float *d = run_wgmma(runs, B_ELEMS, layout, bf16);
    int bad = 0;
    char why[224] = "";
    for (int run = 0; run < B_ELEMS; run++) {
        int k = run / WG_N, n = run % WG_N;
        float expect[WG_M][WG_N] = {{0}};
        for (int m = 0; m < WG_M; m++) expect[m][n] = (float)(k + 1);
        char detail[160];
        if (!d_matches(d + run * WG_THREADS * D_REGS, expect, detail, sizeof detail) && !bad++)
            snprintf(why, sizeof why, "B[%d][%d] at byte %d: %s", k, n,
                     wgmma_b_kmajor_offset(k, n, layout->lbo, layout->sbo), detail);
    }
    char name[224];
    snprintf(name, sizeof name,
             "verify wgmma B descriptor (%s), K-major no swizzle, %s: each element feeds the column and meets the k "
             "it should, %d one-hot runs",
             dtype_name(bf16), layout->what, B_ELEMS);
    check(!bad, name, "%d runs differ, first: %s", bad, why);
    free(runs);
    free(d);
}

static void verify_random(const b_layout *layout, int bf16)
{
    float a[WG_M][WG_K], b[WG_K][WG_N], c[WG_M][WG_N];
    wgmma_run *runs = (wgmma_run *)calloc(RANDOM_RUNS, sizeof(wgmma_run));
    float(*expect)[WG_M][WG_N] = (float(*)[WG_M][WG_N])calloc(RANDOM_RUNS, sizeof *expect);
    uint32_t state = 2024u + bf16 + 2 * (uint32_t)layout->lbo;
    for (int run = 0; run < RANDOM_RUNS; run++) {
        for (int m = 0; m < WG_M; m++)
            for (int k = 0; k < WG_K; k++) a[m][k] = (float)small_int(&state, 8);
        for (int k = 0; k < WG_K; k++)
            for (int n = 0; n < WG_N; n++) b[k][n] = (float)small_int(&state, 8);
        for (int m = 0; m < WG_M; m++)
            for (int n = 0; n < WG_N; n++) {
                c[m][n] = (float)small_int(&state, 100);
                expect[run][m][n] = c[m][n];
                for (int k = 0; k < WG_K; k++) expect[run][m][n] += a[m][k] * b[k][n];
            }
        place_a(runs[run].a, a, bf16);
        place_b(runs[run].b, b, layout, bf16);
        place_c(runs[run].c, c);
    }
    float *d = run_wgmma(runs, RANDOM_RUNS, layout, bf16);
    int bad = 0;
    char why[160] = "";
    for (int run = 0; run < RANDOM_RUNS; run++)
        if (!d_matches(d + run * WG_THREADS * D_REGS, expect[run], why, sizeof why)) bad++;
    char name[224];
    snprintf(name, sizeof name, "verify wgmma (%s), %s: D = A B + C element by element, %d random integer runs",
             dtype_name(bf16), layout->what, RANDOM_RUNS);
    check(!bad, name, "%d runs differ, e.g. %s", bad, why);
    free(runs);
    free(expect);
    free(d);
}

/* S = Q K^T (64 x 64 keys), P = S packed through wgmma_p_source_reg, O = P V (64 d columns). */
static void verify_s_to_p(int bf16)
{
    float q[WG_M][WG_K], kt[WG_K][WG_N], v[WG_N][WG_N], s[WG_M][WG_N], expect[WG_M][WG_N];
    const b_layout *layout = &b_layouts[0];
    uint32_t state = 77u + bf16;
    for (int m = 0; m < WG_M; m++)
        for (int d = 0; d < WG_K; d++) q[m][d] = (float)small_int(&state, 2);
    for (int d = 0; d < WG_K; d++)
        for (int key = 0; key < WG_N; key++) kt[d][key] = (float)small_int(&state, 2);
    for (int key = 0; key < WG_N; key++)
        for (int d = 0; d < WG_N; d++) v[key][d] = (float)small_int(&state, 2);
    /* |S| <= 16 * 4 = 64: exact in fp16 and bf16, so P = S exactly */
    for (int m = 0; m < WG_M; m++)
        for (int key = 0; key < WG_N; key++) {
            s[m][key] = 0;
            for (int d = 0; d < WG_K; d++) s[m][key] += q[m][d] * kt[d][key];
        }
    for (int m = 0; m < WG_M; m++)
        for (int d = 0; d < WG_N; d++) {
            expect[m][d] = 0;
            for (int key = 0; key < WG_N; key++) expect[m][d] += s[m][key] * v[key][d];
        }

    attention_run *host = (attention_run *)calloc(1, sizeof(attention_run));
    place_a(host->q, q, bf16);
    place_b(host->k, kt, layout, bf16);
    for (int j = 0; j < KSTEPS; j++) {
        float vj[WG_K][WG_N]; /* B of k-step j: B[k][n] = V[16j + k][n] */
        for (int k = 0; k < WG_K; k++)
            for (int n = 0; n < WG_N; n++) vj[k][n] = v[j * WG_K + k][n];
        place_b(host->v[j], vj, layout, bf16);
        for (int reg = 0; reg < WG_A_REGS; reg++)
            for (int half = 0; half < HALVES; half++) host->p_source[j][reg][half] = wgmma_p_source_reg(j, reg, half);
    }

    attention_run *dev_in;
    float *dev_o, *o = (float *)malloc(sizeof(float) * WG_THREADS * D_REGS);
    CUDA_OK(cudaMalloc(&dev_in, sizeof(attention_run)));
    CUDA_OK(cudaMalloc(&dev_o, sizeof(float) * WG_THREADS * D_REGS));
    CUDA_OK(cudaMemcpy(dev_in, host, sizeof(attention_run), cudaMemcpyHostToDevice));
    if (bf16) s_to_p_kernel<true><<<1, WG_THREADS>>>(dev_in, layout->lbo, layout->sbo, dev_o);
    else s_to_p_kernel<false><<<1, WG_THREADS>>>(dev_in, layout->lbo, layout->sbo, dev_o);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(o, dev_o, sizeof(float) * WG_THREADS * D_REGS, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(dev_in));
    CUDA_OK(cudaFree(dev_o));
    char why[160] = "", name[160];
    snprintf(name, sizeof name,
             "verify S accumulators d(8j)..d(8j+7) packed as register A of P.V k-step j give O = S V, 4 k-steps (%s)",
             dtype_name(bf16));
    check(d_matches(o, expect, why, sizeof why), name, "%s", why);
    free(host);
    free(o);
}

/* ---- the kernels' own layouts: TMA's 128-byte swizzle, steps 08-12 ---- */

/* What steps 09-12 do, on one warpgroup: Q [64][D], K [128][D] and V [128][D] lie in
 * shared memory as TMA stores them (64-column slabs, 128-byte swizzle: the image is placed
 * on the host by layouts.h's tma_byte_offset); S = Q K^T is D / 16 wgmma m64n128k16 with
 * both operands K-major through swizzled descriptors (stride 1024 bytes per 8-row group;
 * k-step kk 32 bytes further, the next slab after four), and O = P V is 8 wgmma m64nDk16
 * with P from registers and V MN-major through a transposing descriptor (leading offset:
 * one slab, [128][64] x 2 bytes; stride 1024; key step j 16 rows of 128 bytes further). */
enum { SW_KEYS = 128, SW_SLAB_ROW = 128, SW_ATOM = 1024, SW_KSTEPS_PV = SW_KEYS / WG_K };

/* The descriptor with swizzle mode 1 (128-byte) in bits 62-63, as the steps build it. */
__device__ uint64_t smem_desc_128b(uint32_t smem_addr, uint32_t lbo, uint32_t sbo)
{
    return smem_desc(smem_addr, lbo, sbo) | 1ull << 62;
}

#define SW_ACC_32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define SW_ACC_64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define SW_OPERANDS_32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define SW_OPERANDS_64(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

/* S (64 x 128) = sum over k-steps of A B, A and B K-major from shared memory; waits. */
template <bool BF16>
__device__ void wgmma_ss_n128(float (&d)[64], uint64_t a_desc, uint64_t b_desc, int accumulate)
{
    if constexpr (BF16)
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n wgmma.fence.sync.aligned;\n"
                     " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " SW_ACC_64 ", %64, %65, p, 1, 1, 0, 0;\n"
                     " wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n}\n"
                     : SW_OPERANDS_64(d) : "l"(a_desc), "l"(b_desc), "r"(accumulate) : "memory");
    else
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n wgmma.fence.sync.aligned;\n"
                     " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " SW_ACC_64 ", %64, %65, p, 1, 1, 0, 0;\n"
                     " wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n}\n"
                     : SW_OPERANDS_64(d) : "l"(a_desc), "l"(b_desc), "r"(accumulate) : "memory");
}

/* O (64 x N) += A B, A from registers, B MN-major (imm-trans-b 1) from shared memory; waits. */
template <bool BF16, int N>
__device__ void wgmma_rs_trans(float (&d)[N / 2], const uint32_t (&a)[WG_A_REGS], uint64_t b_desc)
{
    if constexpr (N == 64 && BF16)
        asm volatile("wgmma.fence.sync.aligned;\n wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SW_ACC_32
                     ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n"
                     : SW_OPERANDS_32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc) : "memory");
    else if constexpr (N == 64)
        asm volatile("wgmma.fence.sync.aligned;\n wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " SW_ACC_32
                     ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n"
                     : SW_OPERANDS_32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc) : "memory");
    else if constexpr (BF16)
        asm volatile("wgmma.fence.sync.aligned;\n wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " SW_ACC_64
                     ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n"
                     : SW_OPERANDS_64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc) : "memory");
    else
        asm volatile("wgmma.fence.sync.aligned;\n wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " SW_ACC_64
                     ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n"
                     : SW_OPERANDS_64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc) : "memory");
}

/* images: Q, K, V (16-bit, already in TMA's layout, each its own byte count); p: [thread][k-step][reg];
 * s: [thread][64]; o: [thread][D / 2]. */
template <bool BF16, int D>
__global__ void __launch_bounds__(WG_THREADS)
    swizzled_kernel(const uint16_t *q_img, const uint16_t *k_img, const uint16_t *v_img, const uint32_t *p, float *s, float *o)
{
    extern __shared__ __align__(16) uint16_t smem[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem), pad = (SW_ATOM - raw % SW_ATOM) % SW_ATOM;
    constexpr int Q_BYTES = WG_M * D * 2, KV_BYTES = SW_KEYS * D * 2;
    uint16_t *tiles = smem + pad / 2;
    for (int i = threadIdx.x; i < Q_BYTES / 2; i += WG_THREADS) tiles[i] = q_img[i];
    for (int i = threadIdx.x; i < KV_BYTES / 2; i += WG_THREADS) tiles[Q_BYTES / 2 + i] = k_img[i];
    for (int i = threadIdx.x; i < KV_BYTES / 2; i += WG_THREADS) tiles[Q_BYTES / 2 + KV_BYTES / 2 + i] = v_img[i];
    fence_proxy_async();
    __syncthreads();
    const uint32_t q = raw + pad, k = q + Q_BYTES, v = k + KV_BYTES;
    constexpr uint32_t Q_SLAB = WG_M * SW_SLAB_ROW, KV_SLAB = SW_KEYS * SW_SLAB_ROW;
    float s_acc[64];
    for (int kk = 0; kk < D / WG_K; kk++)
        wgmma_ss_n128<BF16>(s_acc, smem_desc_128b(q + kk / 4 * Q_SLAB + kk % 4 * 32, 16, SW_ATOM),
                            smem_desc_128b(k + kk / 4 * KV_SLAB + kk % 4 * 32, 16, SW_ATOM), kk > 0);
    float o_acc[D / 2] = {0};
    for (int j = 0; j < SW_KSTEPS_PV; j++) {
        uint32_t a[WG_A_REGS];
        for (int r = 0; r < WG_A_REGS; r++) a[r] = p[(threadIdx.x * SW_KSTEPS_PV + j) * WG_A_REGS + r];
        wgmma_rs_trans<BF16, D>(o_acc, a, smem_desc_128b(v + j * WG_K * SW_SLAB_ROW, KV_SLAB, SW_ATOM));
    }
    for (int r = 0; r < 64; r++) s[threadIdx.x * 64 + r] = s_acc[r];
    for (int r = 0; r < D / 2; r++) o[threadIdx.x * (D / 2) + r] = o_acc[r];
}

/* Runs swizzled_kernel on random small integers (exact in fp16, bf16 and the fp32 sums)
 * and compares every S and O register, through the accumulator map, with Q K^T and P V. */
template <int D>
static void verify_swizzled(int bf16)
{
    enum { QE = WG_M * D, KE = SW_KEYS * D };
    static float qm[WG_M][D], km[SW_KEYS][D], vm[SW_KEYS][D], pm[WG_M][SW_KEYS];
    uint16_t *q_img = (uint16_t *)calloc(QE, 2), *k_img = (uint16_t *)calloc(KE, 2), *v_img = (uint16_t *)calloc(KE, 2);
    uint32_t *p_regs = (uint32_t *)calloc(WG_THREADS * SW_KSTEPS_PV * WG_A_REGS, 4);
    uint32_t state = 12345u + D + bf16;
    for (int r = 0; r < WG_M; r++)
        for (int c = 0; c < D; c++) q_img[tma_byte_offset(r, c, WG_M) / ELEM_BYTES] = to_bits(qm[r][c] = (float)small_int(&state, 2), bf16);
    for (int r = 0; r < SW_KEYS; r++)
        for (int c = 0; c < D; c++) {
            k_img[tma_byte_offset(r, c, SW_KEYS) / ELEM_BYTES] = to_bits(km[r][c] = (float)small_int(&state, 2), bf16);
            v_img[tma_byte_offset(r, c, SW_KEYS) / ELEM_BYTES] = to_bits(vm[r][c] = (float)small_int(&state, 2), bf16);
        }
    for (int r = 0; r < WG_M; r++)
        for (int c = 0; c < SW_KEYS; c++) pm[r][c] = (float)small_int(&state, 2);
    for (int j = 0; j < SW_KSTEPS_PV; j++) {  /* P's k-step j: keys 16 j .. 16 j + 15, placed by the A map */
        float a[WG_M][WG_K];
        uint32_t regs[WG_THREADS][WG_A_REGS];
        for (int r = 0; r < WG_M; r++)
            for (int c = 0; c < WG_K; c++) a[r][c] = pm[r][WG_K * j + c];
        place_a(regs, a, bf16);
        for (int t = 0; t < WG_THREADS; t++)
            for (int r = 0; r < WG_A_REGS; r++) p_regs[(t * SW_KSTEPS_PV + j) * WG_A_REGS + r] = regs[t][r];
    }
    uint16_t *dq, *dk, *dv;
    uint32_t *dp;
    float *ds, *dout;
    float *s = (float *)malloc(sizeof(float) * WG_THREADS * 64), *o = (float *)malloc(sizeof(float) * WG_THREADS * (D / 2));
    CUDA_OK(cudaMalloc(&dq, QE * 2));
    CUDA_OK(cudaMalloc(&dk, KE * 2));
    CUDA_OK(cudaMalloc(&dv, KE * 2));
    CUDA_OK(cudaMalloc(&dp, WG_THREADS * SW_KSTEPS_PV * WG_A_REGS * 4));
    CUDA_OK(cudaMalloc(&ds, sizeof(float) * WG_THREADS * 64));
    CUDA_OK(cudaMalloc(&dout, sizeof(float) * WG_THREADS * (D / 2)));
    CUDA_OK(cudaMemcpy(dq, q_img, QE * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dk, k_img, KE * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dv, v_img, KE * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dp, p_regs, WG_THREADS * SW_KSTEPS_PV * WG_A_REGS * 4, cudaMemcpyHostToDevice));
    const int smem_bytes = (QE + 2 * KE) * 2 + SW_ATOM;
    if (bf16) {
        CUDA_OK(cudaFuncSetAttribute(swizzled_kernel<true, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
        swizzled_kernel<true, D><<<1, WG_THREADS, smem_bytes>>>(dq, dk, dv, dp, ds, dout);
    } else {
        CUDA_OK(cudaFuncSetAttribute(swizzled_kernel<false, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
        swizzled_kernel<false, D><<<1, WG_THREADS, smem_bytes>>>(dq, dk, dv, dp, ds, dout);
    }
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(s, ds, sizeof(float) * WG_THREADS * 64, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(o, dout, sizeof(float) * WG_THREADS * (D / 2), cudaMemcpyDeviceToHost));
    int s_bad = 0, o_bad = 0;
    char why_s[160] = "", why_o[160] = "", name[200];
    for (int t = 0; t < WG_THREADS; t++) {
        for (int reg = 0; reg < 64; reg++) {
            tile_coord at = wgmma_d_coord(wgmma_warp(t), t % WARP_SIZE, reg);
            float want = 0;
            for (int c = 0; c < D; c++) want += qm[at.row][c] * km[at.col][c];
            if (s[t * 64 + reg] != want && s_bad++ == 0)
                snprintf(why_s, sizeof why_s, "S[%d][%d] = %g, expected %g", at.row, at.col, s[t * 64 + reg], want);
        }
        for (int reg = 0; reg < D / 2; reg++) {
            tile_coord at = wgmma_d_coord(wgmma_warp(t), t % WARP_SIZE, reg);
            float want = 0;
            for (int key = 0; key < SW_KEYS; key++) want += pm[at.row][key] * vm[key][at.col];
            if (o[t * (D / 2) + reg] != want && o_bad++ == 0)
                snprintf(why_o, sizeof why_o, "O[%d][%d] = %g, expected %g", at.row, at.col, o[t * (D / 2) + reg], want);
        }
    }
    snprintf(name, sizeof name, "verify wgmma, the steps' layouts (%s, d%d): S = Q K^T from TMA's 128-byte-swizzled slabs, "
             "K-major descriptors, m64n128k16", dtype_name(bf16), D);
    check(!s_bad, name, "%d of %d elements differ, first %s", s_bad, WG_M * SW_KEYS, why_s);
    snprintf(name, sizeof name, "verify wgmma, the steps' layouts (%s, d%d): O = P V, P from registers, V MN-major through "
             "a transposing swizzled descriptor (leading offset one slab), m64n%dk16", dtype_name(bf16), D, D);
    check(!o_bad, name, "%d of %d elements differ, first %s", o_bad, WG_M * D, why_o);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dp), cudaFree(ds), cudaFree(dout);
    free(q_img), free(k_img), free(v_img), free(p_regs), free(s), free(o);
}

int main(int argc, char **argv)
{
    parse_cli(argc, argv, usage, NULL, 0, NULL);
    int devices = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("SKIP verify_wgmma: no usable GPU (no CUDA device)\n");
        return 0;
    }
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
        printf("SKIP verify_wgmma: no usable GPU (%s is sm_%d%d; wgmma is built for sm_90a, which runs only on "
               "compute capability 9.0)\n",
               prop.name, prop.major, prop.minor);
        return 0;
    }
    printf("# verify_wgmma on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        verify_accumulators(bf16);
        verify_a_probe(bf16);
        for (int l = 0; l < B_LAYOUTS; l++) verify_b_probe(&b_layouts[l], bf16);
        for (int l = 0; l < B_LAYOUTS; l++) verify_random(&b_layouts[l], bf16);
        verify_s_to_p(bf16);
        verify_swizzled<64>(bf16);
        verify_swizzled<128>(bf16);
    }
    return check_exit_code();
}
