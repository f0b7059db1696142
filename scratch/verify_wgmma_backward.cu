/* verify_wgmma_backward - asks a Hopper GPU whether the operand layouts of the backward plan in
 * scratch/backward_wgmma.c (plan "swap": one step of 64 queries at d128, 128 at d64, against a
 * block of 128 keys) do what its CPU model says, on the points only the hardware can confirm:
 *  (1) an MN-major A from shared memory (imm-trans-a 1, 16-bit types): dV = P^T dO with P
 *      [queries][128 keys] in TMA's slabs read transposed, consumer c starting at slab c (the
 *      noswap plan's dV and dK; its descriptors at d128, and at d64 over this step's 128 queries);
 *  (2) an MN-major B whose descriptor starts at a later 64-column slab: at d128, dQ = dS K with
 *      consumer c computing columns 64c..64c+63 of dQ, so consumer 1's K descriptor starts at slab
 *      1 (at d64 the consumers split dQ's rows instead: dS's descriptor starts 64 rows down);
 *  (3) the swap chain: S^T = K Q^T (keys as M, both K-major), P^T taken from S^T's accumulators
 *      as register A (d(8j)..d(8j+7), the reuse of wgmma_fragments) into dV = P^T dO with dO
 *      MN-major; the same for dK = dS^T Q from dP^T = V dO^T;
 *  (4) the dS handoff: each consumer stores the register-A fragments of dK (its dP^T accumulators,
 *      dS^T) as dS[query][key] with one stmatrix.x4.trans per k-step at the slab swizzle,
 *      fence.proxy.async, named barrier 1 over the two consumer warpgroups (256 threads), then
 *      both read the whole dS tile as dQ's K-major A;
 *  (5) cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32: each consumer stages its
 *      dQ part (64 x 64 fp32, in fragment order: register r of thread t at r 128 + t) in shared
 *      memory, fence.proxy.async, bar.arrive on dq_full[c] (named barrier 2 + c, 128 + 32
 *      threads); the producer's warp 1 waits there and issues the 16 KB reduce-add into a global
 *      buffer that already holds values, then cp.async.bulk.commit_group / wait_group 0.
 * The block is the plan's: 3 warpgroups, 384 threads, WG 0 the producer (only its warp 1 works
 * here), WG 1 and WG 2 the consumers c = 0, 1. Every descriptor is built on the host by
 * layouts.h's wgmma_sw128_descriptor at the tile row and column backward_wgmma's operand_origin
 * gives (the values it prints), every stmatrix row address by tma_byte_offset of the element
 * that row starts with (ldsm_received, inverted, and wgmma_a_coord), every register-A source by
 * wgmma_p_source_reg; the tiles' images are placed by tma_byte_offset (what verify_tma checks TMA
 * writes).
 * The elementwise step is left out (P = S, dS = dP): inputs are random integers in -1..1, so S and
 * dP are integers of at most 128 in magnitude, exact in fp16 and bf16, and every product sum is
 * exact in fp32; each output is compared element by element with a host reference. Runs f16 and
 * bf16 at d128 and d64. The descriptor values are those backward_wgmma prints for the plan.
 *
 * Prints one PASS/FAIL line per property and exits 1 on any failure; without a GPU of compute
 * capability 9.0 (sm_90a code runs on no other) prints one SKIP line and exits 0. */
#include "tool.h"
#include "layouts.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

static const char usage[] =
    "usage: verify_wgmma_backward\n"
    "Runs one step of the Hopper backward plan of scratch/backward_wgmma.c (swap; 64 queries x 128 keys at\n"
    "d128, 128 x 128 at d64; two consumer warpgroups and a producer warp) on the GPU with random small integers,\n"
    "f16 and bf16: S^T and dP^T from K-major slabs, dV and dK with register A from their accumulators and\n"
    "MN-major B, the dS stores (stmatrix.trans), fence and named barrier, dQ = dS K (K MN-major from slab c at d128), the dQ\n"
    "bulk reduce-add into global memory, and an MN-major A (P^T from a P tile); compares every element with a\n"
    "host reference, one PASS/FAIL line each; exits 1 on any failure. Without a GPU of compute capability 9.0\n"
    "(sm_90a) it prints one SKIP line.\n";

#define VERIFIER "verify_wgmma_backward" /* CUDA_OK's FAIL lines (scratch/tool.h) */

enum {
    BKEYS = 128,             /* keys per block */
    CONSUMERS = 2,           /* consumer c: keys 64c..64c+63 */
    THREADS_BLOCK = 3 * WG_THREADS,
    MAX_D = 128, MAX_BM = 128, MAX_KSTEPS = 8,
    KSTEPS_K = BKEYS / WG_K, /* dQ: k = keys */
    DQ_REGS = 32,            /* dQ part per consumer: 64 x 64 fp32 at both dims */
    STAGE_BYTES = WG_M * 64 * 4,
    /* named barriers, as the plan numbers them (0 is __syncthreads) */
    BAR_DS = 1, BAR_DQ_FULL = 2,
};

/* The plan's step at head dimension dim (backward_wgmma's make_config, plan swap): 128 queries at
 * d64, 64 at d128; S^T, dP^T are m64n(BM)k16 over dim / 16 k-steps, dV, dK m64n(dim)k16 over
 * BM / 16; dQ m64n64k16 over 8, the consumers splitting its rows at d64 (BM = 128) and its
 * columns at d128 (BM = 64: consumer 1's K descriptor starts at slab 1). Shared memory: byte
 * offsets from a 1024-aligned base, every tile in 64-column slabs. */
typedef struct {
    int dim, bm, off_q, off_do, off_k, off_v, off_ds, off_p, image_bytes, off_stage, smem_bytes;
} geometry;

static geometry make_geometry(int dim)
{
    geometry g;
    g.dim = dim, g.bm = dim == 64 ? 128 : 64;
    g.off_q = 0, g.off_do = g.bm * dim * 2, g.off_k = g.off_do + g.bm * dim * 2, g.off_v = g.off_k + BKEYS * dim * 2;
    g.off_ds = g.off_v + BKEYS * dim * 2, g.off_p = g.off_ds + g.bm * BKEYS * 2, g.image_bytes = g.off_p + g.bm * BKEYS * 2;
    g.off_stage = g.image_bytes, g.smem_bytes = g.off_stage + CONSUMERS * STAGE_BYTES;
    return g;
}
static int dq_row0(const geometry *g, int c) { return g->bm >= CONSUMERS * WG_M ? WG_M * c : 0; }
static int dq_col0(const geometry *g, int c) { return g->bm >= CONSUMERS * WG_M ? 0 : g->dim / CONSUMERS * c; }

/* the products, and one more: dV through an MN-major A (property 1) */
enum { OP_S, OP_DP, OP_DV, OP_DK, OP_DQ, OP_DV_MN, OPS };

/* per thread of each consumer, room for the larger dim: S^T, dP^T BM / 2, dV, dK and dV (MN-major A)
 * dim / 2, dQ 32 accumulators */
enum { R_S = 0, R_DP = R_S + 64, R_DV = R_DP + 64, R_DK = R_DV + 64, R_DQ = R_DK + 64, R_DVMN = R_DQ + 32, R_ALL = R_DVMN + 64 };

typedef struct {
    uint32_t start, lbo, sbo; /* start: bytes from the aligned base */
} desc_bytes;

typedef struct {
    desc_bytes desc[OPS][CONSUMERS][MAX_KSTEPS][2]; /* [.][.][.][0] A, [1] B (shared-memory operands only) */
    int p_source[MAX_BM / WG_K][WG_A_REGS][HALVES];  /* register A of k-step j, half h: accumulator */
    uint16_t ds_row[CONSUMERS][WG_THREADS][MAX_BM / WG_K]; /* k-step j: the dS row this lane addresses for stmatrix */
    uint32_t off_ds, off_stage, image_bytes;
} plan_tables;

/* ---- device side: the raw instructions, nothing derived from layouts.h ---- */

/* Matrix descriptor (PTX ISA, "Matrix Descriptor Format" of wgmma): start, leading and stride
 * byte offsets in 16-byte units at bits 0, 16, 32; swizzle mode 1 (128-byte) in bits 62-63. */
__device__ uint64_t desc_128b(uint32_t smem_addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 | 1ull << 62;
}

/* fence.proxy.async (PTX ISA, "Parallel Synchronization and Communication Instructions: membar /
 * fence"): orders this thread's generic-proxy shared-memory writes before later async-proxy
 * reads (wgmma's descriptors, the bulk copy). */
__device__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* bar.sync / bar.arrive with a thread count (PTX ISA, "Parallel Synchronization and Communication
 * Instructions: bar, barrier"): named barriers between some warps of the block. */
__device__ void named_barrier_sync(int id, int threads) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }
__device__ void named_barrier_arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }

/* stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 (PTX ISA, "Data Movement and Conversion
 * Instructions: stmatrix"; sm_90): lanes 8i..8i+7 give the row addresses of matrix i, register i
 * holds matrix i transposed (ldmatrix.trans's map, run backwards). */
__device__ void stmatrix_x4_trans(uint32_t smem_addr, const uint32_t (&r)[4])
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

/* cp.reduce.async.bulk (PTX ISA, "Data Movement and Conversion Instructions:
 * cp.reduce.async.bulk"): global[i] += shared[i] for bytes / 4 fp32 elements, both 16-byte
 * aligned, bytes a multiple of 16; completion through the thread's bulk async-group. */
__device__ void bulk_reduce_add_f32(float *global, uint32_t smem_addr, uint32_t bytes)
{
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(global),
                 "r"(smem_addr), "r"(bytes)
                 : "memory");
}

/* cp.async.bulk.commit_group and cp.async.bulk.wait_group 0 (PTX ISA, "Data Movement and
 * Conversion Instructions: cp.async.bulk.commit_group / cp.async.bulk.wait_group"): close the
 * group of the bulk operations issued so far, then wait until every group has completed (not
 * .read: the writes to global memory too, not only the reads of shared memory). */
__device__ void bulk_commit_and_wait_all()
{
    asm volatile("cp.async.bulk.commit_group;\n cp.async.bulk.wait_group 0;\n" ::: "memory");
}

#define ACC_32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define ACC_64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define OPS_32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define OPS_64(d) OPS_32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

/* wgmma.mma_async.sync.aligned (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
 * Instructions: wgmma.mma_async"), each followed by commit_group and wait_group 0 in the same asm
 * statement so the accumulators are written when it returns. Scale-d 1 (D += A B), scales 1.
 * SS form: A and B from shared memory, imm-trans-a TA and imm-trans-b TB (1: MN-major, 16-bit only). */
#define SS_N64(T) "wgmma.fence.sync.aligned;\n wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " " ACC_32 \
    ", %32, %33, 1, 1, 1, %34, %35;\n wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n"
#define SS_N128(T) "wgmma.fence.sync.aligned;\n wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " " ACC_64 \
    ", %64, %65, 1, 1, 1, %66, %67;\n wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n"
/* RS form: A from 4 registers per thread (no imm-trans-a), B MN-major (imm-trans-b 1). */
#define RS_N64_TB(T) "wgmma.fence.sync.aligned;\n wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " " ACC_32 \
    ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n"
#define RS_N128_TB(T) "wgmma.fence.sync.aligned;\n wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " " ACC_64 \
    ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n"

template <bool BF16, int TA, int TB>
__device__ void wgmma_ss_n64(float (&d)[32], uint64_t a_desc, uint64_t b_desc)
{
    if constexpr (BF16)
        asm volatile(SS_N64("bf16") : OPS_32(d) : "l"(a_desc), "l"(b_desc), "n"(TA), "n"(TB) : "memory");
    else
        asm volatile(SS_N64("f16") : OPS_32(d) : "l"(a_desc), "l"(b_desc), "n"(TA), "n"(TB) : "memory");
}

template <bool BF16, int TA, int TB>
__device__ void wgmma_ss_n128(float (&d)[64], uint64_t a_desc, uint64_t b_desc)
{
    if constexpr (BF16)
        asm volatile(SS_N128("bf16") : OPS_64(d) : "l"(a_desc), "l"(b_desc), "n"(TA), "n"(TB) : "memory");
    else
        asm volatile(SS_N128("f16") : OPS_64(d) : "l"(a_desc), "l"(b_desc), "n"(TA), "n"(TB) : "memory");
}

template <bool BF16>
__device__ void wgmma_rs_n64_mn_b(float (&d)[32], const uint32_t (&a)[WG_A_REGS], uint64_t b_desc)
{
    if constexpr (BF16)
        asm volatile(RS_N64_TB("bf16") : OPS_32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc) : "memory");
    else
        asm volatile(RS_N64_TB("f16") : OPS_32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc) : "memory");
}

template <bool BF16>
__device__ void wgmma_rs_n128_mn_b(float (&d)[64], const uint32_t (&a)[WG_A_REGS], uint64_t b_desc)
{
    if constexpr (BF16)
        asm volatile(RS_N128_TB("bf16") : OPS_64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc) : "memory");
    else
        asm volatile(RS_N128_TB("f16") : OPS_64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc) : "memory");
}

/* m64nNk16 for N = 64 or 128 (the accumulator array's size picks it) */
template <bool BF16, int TA, int TB, int R>
__device__ void wgmma_ss(float (&d)[R], uint64_t a_desc, uint64_t b_desc)
{
    if constexpr (R == 32) wgmma_ss_n64<BF16, TA, TB>(d, a_desc, b_desc);
    else wgmma_ss_n128<BF16, TA, TB>(d, a_desc, b_desc);
}
template <bool BF16, int R>
__device__ void wgmma_rs_mn_b(float (&d)[R], const uint32_t (&a)[WG_A_REGS], uint64_t b_desc)
{
    if constexpr (R == 32) wgmma_rs_n64_mn_b<BF16>(d, a, b_desc);
    else wgmma_rs_n128_mn_b<BF16>(d, a, b_desc);
}

template <bool BF16>
__device__ uint16_t bits16(float x)
{
    if constexpr (BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    else return __half_as_ushort(__float2half_rn(x));
}

template <bool BF16>
__device__ uint32_t pack2(float lo, float hi) { return (uint32_t)bits16<BF16>(lo) | (uint32_t)bits16<BF16>(hi) << 16; }

template <int N>
__device__ void zero(float (&d)[N])
{
    for (int i = 0; i < N; i++) d[i] = 0.0f;
}

/* image: Q, dO, K, V, (dS: zeros), P as they lie in shared memory; out: [consumer][thread][R_ALL];
 * ds_out: the dS tile after the barrier; dq_accum: [consumer][64 x 64] fp32, reduce-added into.
 * DIM 64: BM 128; DIM 128: BM 64 (the plan's tiles). */
template <bool BF16, int DIM>
__global__ void __launch_bounds__(THREADS_BLOCK)
    backward_step(const uint16_t *image, const plan_tables *tab, float *out, uint16_t *ds_out, float *dq_accum)
{
    constexpr int BM = DIM == 64 ? 128 : 64, KSTEPS_D = DIM / WG_K, KSTEPS_Q = BM / WG_K;
    extern __shared__ __align__(16) uint8_t smem_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw), pad = (WGMMA_SW128_ATOM - raw % WGMMA_SW128_ATOM) % WGMMA_SW128_ATOM;
    const uint32_t base = raw + pad;
    uint16_t *tiles = (uint16_t *)(smem_raw + pad);
    float *stage = (float *)(smem_raw + pad + tab->off_stage);
    for (int i = threadIdx.x; i < (int)tab->image_bytes / 2; i += THREADS_BLOCK) tiles[i] = image[i];
    fence_proxy_async();
    __syncthreads();
    const int wg = threadIdx.x / WG_THREADS, t = threadIdx.x % WG_THREADS;
    if (wg == 0) { /* the producer warpgroup: its warp 1 reduce-adds each consumer's staged dQ */
        if (threadIdx.x / WARP_SIZE == 1) {
            for (int c = 0; c < CONSUMERS; c++) {
                named_barrier_sync(BAR_DQ_FULL + c, WG_THREADS + WARP_SIZE);
                if (threadIdx.x % WARP_SIZE == 0)
                    bulk_reduce_add_f32(dq_accum + c * STAGE_BYTES / 4, base + tab->off_stage + c * STAGE_BYTES, STAGE_BYTES);
            }
            if (threadIdx.x % WARP_SIZE == 0) bulk_commit_and_wait_all();
        }
        return;
    }
    const int c = wg - 1;
    float *o = out + ((size_t)c * WG_THREADS + t) * R_ALL;
#define DESC(op, s, ab) desc_128b(base + tab->desc[op][c][s][ab].start, tab->desc[op][c][s][ab].lbo, tab->desc[op][c][s][ab].sbo)
    float s_acc[BM / 2], dp_acc[BM / 2];
    zero(s_acc), zero(dp_acc);
    for (int s = 0; s < KSTEPS_D; s++) wgmma_ss<BF16, 0, 0>(s_acc, DESC(OP_S, s, 0), DESC(OP_S, s, 1));
    for (int s = 0; s < KSTEPS_D; s++) wgmma_ss<BF16, 0, 0>(dp_acc, DESC(OP_DP, s, 0), DESC(OP_DP, s, 1));
    {   /* (3) dV += P^T dO and dK += dS^T Q, A from the accumulators (P = S, dS = dP here) */
        float acc[DIM / 2];
        zero(acc);
        for (int j = 0; j < KSTEPS_Q; j++) {
            uint32_t a[WG_A_REGS];
            for (int r = 0; r < WG_A_REGS; r++) a[r] = pack2<BF16>(s_acc[tab->p_source[j][r][0]], s_acc[tab->p_source[j][r][1]]);
            wgmma_rs_mn_b<BF16>(acc, a, DESC(OP_DV, j, 1));
        }
        for (int r = 0; r < DIM / 2; r++) o[R_DV + r] = acc[r];
        zero(acc);
        for (int j = 0; j < KSTEPS_Q; j++) {
            uint32_t a[WG_A_REGS];
            for (int r = 0; r < WG_A_REGS; r++) a[r] = pack2<BF16>(dp_acc[tab->p_source[j][r][0]], dp_acc[tab->p_source[j][r][1]]);
            wgmma_rs_mn_b<BF16>(acc, a, DESC(OP_DK, j, 1));
        }
        for (int r = 0; r < DIM / 2; r++) o[R_DK + r] = acc[r];
    }
    /* (4) dS: dK's register A (this consumer's dP^T accumulators) stored as dS[query][key] by
     * stmatrix.trans, one per k-step, then both consumers' */
    for (int j = 0; j < KSTEPS_Q; j++) {
        uint32_t a[WG_A_REGS];
        for (int r = 0; r < WG_A_REGS; r++) a[r] = pack2<BF16>(dp_acc[tab->p_source[j][r][0]], dp_acc[tab->p_source[j][r][1]]);
        stmatrix_x4_trans(base + tab->off_ds + tab->ds_row[c][t][j], a);
    }
    for (int r = 0; r < BM / 2; r++) o[R_S + r] = s_acc[r], o[R_DP + r] = dp_acc[r];
    fence_proxy_async();
    named_barrier_sync(BAR_DS, CONSUMERS * WG_THREADS);
    float dq[DQ_REGS];
    zero(dq);
    for (int s = 0; s < KSTEPS_K; s++) wgmma_ss<BF16, 0, 1>(dq, DESC(OP_DQ, s, 0), DESC(OP_DQ, s, 1));
    for (int r = 0; r < DQ_REGS; r++) o[R_DQ + r] = dq[r];
    /* (5) dQ staged in fragment order for the producer's bulk reduce-add */
    for (int r = 0; r < DQ_REGS; r++) stage[c * STAGE_BYTES / 4 + r * WG_THREADS + t] = dq[r];
    fence_proxy_async();
    named_barrier_arrive(BAR_DQ_FULL + c, WG_THREADS + WARP_SIZE);
    /* the dS tile as both consumers left it (read after the barrier: every store is in) */
    for (int i = c * WG_THREADS + t; i < BM * BKEYS; i += CONSUMERS * WG_THREADS) ds_out[i] = tiles[tab->off_ds / 2 + i];
    {   /* (1) dV = P^T dO with P^T read MN-major from the P tile (imm-trans-a 1) */
        float acc[DIM / 2];
        zero(acc);
        for (int j = 0; j < KSTEPS_Q; j++) wgmma_ss<BF16, 1, 1>(acc, DESC(OP_DV_MN, j, 0), DESC(OP_DV_MN, j, 1));
        for (int r = 0; r < DIM / 2; r++) o[R_DVMN + r] = acc[r];
    }
#undef DESC
}

/* ---- host side: placements from layouts.h, the reference, the comparisons ---- */

static uint16_t to_bits(float x, int bf16)
{
    if (bf16) return ((__nv_bfloat16_raw)__float2bfloat16(x)).x;
    return ((__half_raw)__float2half(x)).x;
}

static float round16(float x, int bf16) /* what a 16-bit operand holds of x */
{
    uint16_t b = to_bits(x, bf16);
    if (bf16) {
        __nv_bfloat16_raw r;
        r.x = b;
        return __bfloat162float(__nv_bfloat16(r));
    }
    __half_raw r;
    r.x = b;
    return __half2float(__half(r));
}

static int small_int(uint32_t *state, int span)
{
    *state = *state * 1664525u + 1013904223u;
    return (int)(*state >> 24) % (2 * span + 1) - span;
}

static const char *dtype_name(int bf16) { return bf16 ? "bf16" : "f16"; }

static desc_bytes at_tile(int tile_offset, int kmajor, int rows, int r0, int c0)
{
    wgmma_sw128_desc d = wgmma_sw128_descriptor(kmajor, rows, r0, c0);
    desc_bytes b = {(uint32_t)(tile_offset + d.start), (uint32_t)d.lbo, (uint32_t)d.sbo};
    return b;
}

/* The descriptors at the tile rows and columns of backward_wgmma's operand_origin (plan swap; the
 * MN-major A at noswap's P^T): consumer c owns keys 64c.., k-step s covers k 16s..16s+15. */
static void build_tables(const geometry *g, plan_tables *tab)
{
    memset(tab, 0, sizeof *tab);
    const int bm = g->bm, dim = g->dim;
    for (int c = 0; c < CONSUMERS; c++) {
        int key0 = WG_M * c;
        for (int s = 0; s < dim / WG_K; s++) {
            tab->desc[OP_S][c][s][0] = at_tile(g->off_k, 1, BKEYS, key0, WG_K * s); /* K, K-major, WG's keys */
            tab->desc[OP_S][c][s][1] = at_tile(g->off_q, 1, bm, 0, WG_K * s);       /* Q^T: Q K-major */
            tab->desc[OP_DP][c][s][0] = at_tile(g->off_v, 1, BKEYS, key0, WG_K * s);
            tab->desc[OP_DP][c][s][1] = at_tile(g->off_do, 1, bm, 0, WG_K * s);
        }
        for (int j = 0; j < bm / WG_K; j++) {
            tab->desc[OP_DV][c][j][1] = at_tile(g->off_do, 0, bm, WG_K * j, 0);      /* dO MN-major, k = queries */
            tab->desc[OP_DK][c][j][1] = at_tile(g->off_q, 0, bm, WG_K * j, 0);
            tab->desc[OP_DV_MN][c][j][0] = at_tile(g->off_p, 0, bm, WG_K * j, key0); /* P^T: P MN-major, slab c */
            tab->desc[OP_DV_MN][c][j][1] = at_tile(g->off_do, 0, bm, WG_K * j, 0);
        }
        for (int s = 0; s < KSTEPS_K; s++) {
            tab->desc[OP_DQ][c][s][0] = at_tile(g->off_ds, 1, bm, dq_row0(g, c), WG_K * s);        /* dS K-major */
            tab->desc[OP_DQ][c][s][1] = at_tile(g->off_k, 0, BKEYS, WG_K * s, dq_col0(g, c));      /* K MN-major */
        }
        /* stmatrix: lane l addresses row l % 8 of matrix l / 8 (register l / 8 of every lane); with
         * .trans, the lane and half that hold element 0 of memory row r are those ldsm_received
         * maps to (r, 0), and their register-A element (key row, query col of k-step j) is
         * dS[query][key0 + row], which the row starts with */
        for (int t = 0; t < WG_THREADS; t++)
            for (int j = 0; j < bm / WG_K; j++) {
                const int lane = t % WARP_SIZE, matrix = lane / LDSM_ROWS, row = lane % LDSM_ROWS;
                for (int holder = 0; holder < WARP_SIZE; holder++)
                    for (int h = 0; h < HALVES; h++) {
                        tile_coord m = ldsm_received(holder, h, 1);
                        if (m.row != row || m.col != 0) continue;
                        tile_coord a = wgmma_a_coord(wgmma_warp(t), holder, matrix, h);
                        tab->ds_row[c][t][j] = (uint16_t)tma_byte_offset(WG_K * j + a.col, key0 + a.row, bm);
                    }
            }
    }
    for (int j = 0; j < bm / WG_K; j++)
        for (int r = 0; r < WG_A_REGS; r++)
            for (int h = 0; h < HALVES; h++) tab->p_source[j][r][h] = wgmma_p_source_reg(j, r, h);
    tab->off_ds = g->off_ds, tab->off_stage = g->off_stage, tab->image_bytes = g->image_bytes;
}

static float qm[MAX_BM][MAX_D], dom[MAX_BM][MAX_D], km[BKEYS][MAX_D], vm[BKEYS][MAX_D], pm[MAX_BM][BKEYS];
static float st[BKEYS][MAX_BM], dpt[BKEYS][MAX_BM]; /* S^T, dP^T in fp32 */
static float dq_init[CONSUMERS][STAGE_BYTES / 4];

typedef struct {
    int bad;
    long total;
    char why[200];
} compare;

static void note(compare *cmp, float got, float want, const char *what, int row, int col)
{
    cmp->total++;
    if (got != want && cmp->bad++ == 0)
        snprintf(cmp->why, sizeof cmp->why, "%s[%d][%d] = %g, expected %g", what, row, col, got, want);
}

template <bool BF16, int DIM>
static void launch(const geometry *g, const uint16_t *image, const plan_tables *tab, float *out, uint16_t *ds, float *dq)
{
    const int smem = g->smem_bytes + WGMMA_SW128_ATOM;
    CUDA_OK(cudaFuncSetAttribute(backward_step<BF16, DIM>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    backward_step<BF16, DIM><<<1, THREADS_BLOCK, smem>>>(image, tab, out, ds, dq);
}

static void verify_step(int dim, int bf16)
{
    const geometry geo = make_geometry(dim), *g = &geo;
    const int bm = g->bm;
    uint32_t state = 777u + bf16 + dim;
    uint16_t *image = (uint16_t *)calloc(g->image_bytes / 2, 2);
    for (int q = 0; q < bm; q++)
        for (int d = 0; d < dim; d++) {
            image[(g->off_q + tma_byte_offset(q, d, bm)) / 2] = to_bits(qm[q][d] = (float)small_int(&state, 1), bf16);
            image[(g->off_do + tma_byte_offset(q, d, bm)) / 2] = to_bits(dom[q][d] = (float)small_int(&state, 1), bf16);
        }
    for (int k = 0; k < BKEYS; k++)
        for (int d = 0; d < dim; d++) {
            image[(g->off_k + tma_byte_offset(k, d, BKEYS)) / 2] = to_bits(km[k][d] = (float)small_int(&state, 1), bf16);
            image[(g->off_v + tma_byte_offset(k, d, BKEYS)) / 2] = to_bits(vm[k][d] = (float)small_int(&state, 1), bf16);
        }
    for (int q = 0; q < bm; q++)
        for (int k = 0; k < BKEYS; k++)
            image[(g->off_p + tma_byte_offset(q, k, bm)) / 2] = to_bits(pm[q][k] = (float)small_int(&state, 2), bf16);
    for (int c = 0; c < CONSUMERS; c++)
        for (int i = 0; i < STAGE_BYTES / 4; i++) dq_init[c][i] = (float)small_int(&state, 3);
    for (int k = 0; k < BKEYS; k++)
        for (int q = 0; q < bm; q++) {
            float s = 0, dp = 0;
            for (int d = 0; d < dim; d++) s += km[k][d] * qm[q][d], dp += vm[k][d] * dom[q][d];
            st[k][q] = s, dpt[k][q] = dp;
        }
    plan_tables *tab = (plan_tables *)malloc(sizeof(plan_tables));
    build_tables(g, tab);

    uint16_t *dev_image, *dev_ds;
    plan_tables *dev_tab;
    float *dev_out, *dev_dq;
    const size_t out_n = (size_t)CONSUMERS * WG_THREADS * R_ALL;
    float *out = (float *)malloc(sizeof(float) * out_n), *dq_acc = (float *)malloc(sizeof dq_init);
    uint16_t *ds = (uint16_t *)malloc(bm * BKEYS * 2);
    CUDA_OK(cudaMalloc(&dev_image, g->image_bytes));
    CUDA_OK(cudaMalloc(&dev_tab, sizeof(plan_tables)));
    CUDA_OK(cudaMalloc(&dev_out, sizeof(float) * out_n));
    CUDA_OK(cudaMalloc(&dev_ds, bm * BKEYS * 2));
    CUDA_OK(cudaMalloc(&dev_dq, sizeof dq_init));
    CUDA_OK(cudaMemcpy(dev_image, image, g->image_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dev_tab, tab, sizeof(plan_tables), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dev_dq, dq_init, sizeof dq_init, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dev_out, 0xff, sizeof(float) * out_n)); /* NaN where nothing was written */
    if (dim == 64) bf16 ? launch<true, 64>(g, dev_image, dev_tab, dev_out, dev_ds, dev_dq)
                        : launch<false, 64>(g, dev_image, dev_tab, dev_out, dev_ds, dev_dq);
    else bf16 ? launch<true, 128>(g, dev_image, dev_tab, dev_out, dev_ds, dev_dq)
              : launch<false, 128>(g, dev_image, dev_tab, dev_out, dev_ds, dev_dq);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(out, dev_out, sizeof(float) * out_n, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(ds, dev_ds, bm * BKEYS * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(dq_acc, dev_dq, sizeof dq_init, cudaMemcpyDeviceToHost));

    compare sdp = {0, 0, ""}, dv = {0, 0, ""}, dk = {0, 0, ""}, dq[CONSUMERS] = {{0, 0, ""}, {0, 0, ""}}, red = {0, 0, ""},
            dvmn = {0, 0, ""}, dsi = {0, 0, ""};
    for (int c = 0; c < CONSUMERS; c++)
        for (int t = 0; t < WG_THREADS; t++) {
            const float *o = out + ((size_t)c * WG_THREADS + t) * R_ALL;
            int warp = wgmma_warp(t), lane = t % WARP_SIZE, key0 = WG_M * c;
            for (int r = 0; r < bm / 2; r++) { /* S^T, dP^T: keys x queries */
                tile_coord at = wgmma_d_coord(warp, lane, r);
                note(&sdp, o[R_S + r], st[key0 + at.row][at.col], "S^T", key0 + at.row, at.col);
                note(&sdp, o[R_DP + r], dpt[key0 + at.row][at.col], "dP^T", key0 + at.row, at.col);
            }
            for (int r = 0; r < DQ_REGS; r++) { /* dQ: 64 queries from dq_row0 x 64 columns from dq_col0 */
                tile_coord at = wgmma_d_coord(warp, lane, r);
                int q = dq_row0(g, c) + at.row, col = dq_col0(g, c) + at.col;
                float want = 0;
                for (int k = 0; k < BKEYS; k++) want += round16(dpt[k][q], bf16) * km[k][col];
                note(&dq[c], o[R_DQ + r], want, "dQ", q, col);
                note(&red, dq_acc[c * STAGE_BYTES / 4 + r * WG_THREADS + t], dq_init[c][r * WG_THREADS + t] + want,
                     "dQaccum", q, col);
            }
            for (int r = 0; r < dim / 2; r++) { /* dV, dK, dV via MN-major A: keys x head dim */
                tile_coord at = wgmma_d_coord(warp, lane, r);
                float v = 0, k = 0, vmn = 0;
                for (int q = 0; q < bm; q++) {
                    v += round16(st[key0 + at.row][q], bf16) * dom[q][at.col];
                    k += round16(dpt[key0 + at.row][q], bf16) * qm[q][at.col];
                    vmn += pm[q][key0 + at.row] * dom[q][at.col];
                }
                note(&dv, o[R_DV + r], v, "dV", key0 + at.row, at.col);
                note(&dk, o[R_DK + r], k, "dK", key0 + at.row, at.col);
                note(&dvmn, o[R_DVMN + r], vmn, "dV", key0 + at.row, at.col);
            }
        }
    for (int q = 0; q < bm; q++)
        for (int k = 0; k < BKEYS; k++)
            note(&dsi, (float)ds[tma_byte_offset(q, k, bm) / 2], (float)to_bits(dpt[k][q], bf16), "dS bits", q, k);
    char tag[48], name[400];
    snprintf(tag, sizeof tag, "verify wgmma backward (%s, d%d, %d x %d)", dtype_name(bf16), dim, bm, BKEYS);
#define REPORT(cmp, ...)                                                                                       \
    do {                                                                                                       \
        snprintf(name, sizeof name, __VA_ARGS__);                                                              \
        check(!(cmp).bad, name, "%d of %ld elements differ, first %s", (cmp).bad, (cmp).total, (cmp).why);     \
    } while (0)
    REPORT(sdp, "%s: S^T = K Q^T and dP^T = V dO^T, m64n%dk16 x %d, keys as M, both operands K-major from "
                "128-byte-swizzled slabs (consumer 1's K, V start %u bytes in)", tag, bm, dim / WG_K,
           tab->desc[OP_S][1][0][0].start - g->off_k);
    REPORT(dv, "%s: (3) dV = P^T dO, P^T = S^T's accumulators d(8j)..d(8j+7) as register A, dO MN-major (imm-trans-b 1, "
               "LBO %u, +%u per k-step), m64n%dk16 x %d", tag, tab->desc[OP_DV][0][0][1].lbo,
           tab->desc[OP_DV][0][1][1].start - tab->desc[OP_DV][0][0][1].start, dim, bm / WG_K);
    REPORT(dk, "%s: (3) dK = dS^T Q, dS^T = dP^T's accumulators as register A, Q MN-major, m64n%dk16 x %d", tag, dim,
           bm / WG_K);
    REPORT(dsi, "%s: (4) the dS tile after both consumers' stmatrix.x4.trans of dK's register A (their dP^T "
                "accumulators) holds dS[query][key] where tma_byte_offset puts it", tag);
    for (int c = 0; c < CONSUMERS; c++)
        REPORT(dq[c], "%s: (4)%s dQ[%d..%d][%d..%d] = dS K on consumer %d: dS (both consumers' stores, fence.proxy.async, "
                      "named barrier %d of 256 threads) K-major A (start %u), K MN-major B (start %u: slab %u), m64n64k16 x %d",
               tag, dq_col0(g, c) ? "(2)" : "", dq_row0(g, c), dq_row0(g, c) + WG_M - 1, dq_col0(g, c), dq_col0(g, c) + 63,
               c, BAR_DS, tab->desc[OP_DQ][c][0][0].start - g->off_ds, tab->desc[OP_DQ][c][0][1].start - g->off_k,
               (tab->desc[OP_DQ][c][0][1].start - g->off_k) / (BKEYS * TMA_SLAB_ROW_BYTES), KSTEPS_K);
    REPORT(red, "%s: (5) cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 of each consumer's 16 KB staged dQ "
                "(named barrier 2 + c of 160 threads, producer warp 1) adds into global memory element by element", tag);
    REPORT(dvmn, "%s: (1) dV = P^T dO with A = P [%d][128] MN-major from shared memory (imm-trans-a 1, consumer c at "
                 "slab c), dO MN-major, m64n%dk16 x %d", tag, bm, dim, bm / WG_K);
#undef REPORT
    cudaFree(dev_image), cudaFree(dev_tab), cudaFree(dev_out), cudaFree(dev_ds), cudaFree(dev_dq);
    free(image), free(tab), free(out), free(dq_acc), free(ds);
}

int main(int argc, char **argv)
{
    parse_cli(argc, argv, usage, NULL, 0, NULL);
    int devices = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("SKIP verify_wgmma_backward: no usable GPU (no CUDA device)\n");
        return 0;
    }
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
        printf("SKIP verify_wgmma_backward: no usable GPU (%s is sm_%d%d; wgmma is built for sm_90a, which runs only on "
               "compute capability 9.0)\n",
               prop.name, prop.major, prop.minor);
        return 0;
    }
    printf("# verify_wgmma_backward on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    for (int bf16 = 0; bf16 <= 1; bf16++)
        for (int dim = 128; dim >= 64; dim -= 64) verify_step(dim, bf16);
    return check_exit_code();
}
