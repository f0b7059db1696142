/* Step 15 - the backward pass on wgmma (sm_90a): a producer warpgroup, two consumers.
 *
 * Base: step 14 (14_backward), the portable backward; `make step=15 diff` shows what changed
 * against it. Its ABI, its three kernels (prep, main, convert), its walk over the query blocks
 * that see a key block, its GQA loop inside the block, its masks and its deterministic mode are
 * kept; what runs the five products is the Hopper ladder's machinery (steps 08-12): tiles that
 * TMA writes in 128-byte-swizzled slabs, mbarriers with transaction counts, wgmma from matrix
 * descriptors, a producer warpgroup with setmaxnreg, named barriers. Built for sm_90a alone, as
 * steps 09-12; on any other GPU it refuses in one line. The forward is step 10's, unchanged but
 * for its wgmma wrappers (which the backward's products share), so that one library runs the
 * forward and the backward (the harness's --backward, python/fa2.py's autograd).
 *
 * On an H100 it passes the GPU matrix and compute-sanitizer and runs at about cuDNN's backward
 * speed (docs/measurements/15_wgmma_backward.md); its operand layouts are the ones
 * scratch/verify_wgmma_backward.cu checks on the GPU.
 *
 * The plan is "swap" of scratch/backward_wgmma.c, whose --check emulates every operand below
 * element by element. A block owns 128 keys (K, V loaded once) and walks the query blocks of
 * BLOCK_M rows that see them, over every query head of its kv head's group, as step 14.
 * 384 threads: warpgroup 0 the producer (warp 0 issues every copy, warp 1 the dQ reduce-adds),
 * warpgroups 1 and 2 the consumers, consumer c owning keys 64 c .. 64 c + 63. Per step:
 *
 *   producer: Q and LSE log2 e on q_full[stage], dO and D on do_full[stage] (TMA tiles and
 *             one bulk copy each, 2 stages), once the consumers released the stage;
 *   consumer: S^T  = K_c Q^T          m64n(BLOCK_M)k16, A and B K-major from the slabs
 *             dP^T = V_c dO^T         the same
 *             P^T  = exp2(S^T scale log2 e - LSE log2 e), dS^T = P^T (dP^T - D)  (masked)
 *             dV_c += P^T dO          m64n(D)k16, A: S^T's accumulators as register A
 *             dK_c += dS^T Q          the same with dP^T's; B: dO, Q MN-major (imm-trans-b)
 *             dS stored to shared memory [query][key] by stmatrix .trans (dS^T's registers,
 *             transposed on the way), fence.proxy.async, named barrier of both consumers,
 *             then dQ part = dS K: m64n64k16 over the 128 keys, A: dS K-major,
 *             B: K MN-major; staged in shared memory, handed to the producer's warp 1 on a
 *             named barrier, which adds it into the fp32 workspace by cp.reduce.async.bulk.
 *             At d128 dK is issued after dQ instead, so that dQ's part is staged while the
 *             tensor cores run dK (DQ_FIRST; at d64 it measured slower).
 *
 * Why keys as the wgmma M ("swap"). A wgmma's accumulator rows are its M: with S^T = K Q^T a
 * consumer holds P^T for its keys, exactly the A that dV = P^T dO needs, so P never goes through
 * shared memory (nor does dS for dK); with S = Q K^T (queries as M) P and dS would both be stored
 * and read back transposed. Only dS is stored, because dQ = dS K needs it with queries as M and
 * both consumers' keys as k. FlashAttention-3 makes the same choice (Dao-AILab/flash-attention,
 * hopper/flash_bwd_launch_template.h: SdP_swapAB at d64 and d128;
 * hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp: dV, dK with A from registers, dS stored K-major for
 * dQ, a named barrier of the MMA threads after fence_view_async_shared, two dS stages).
 *
 * Tiles. 128 queries per step at d64 and 64 at d128, 128 keys per block (FA3's
 * flash_bwd_launch_template.h: 128 x 128 at d64; 64 x 128 at d128 with a causal mask, 80 x 128
 * without, where 64 here keeps every n a power of two; a starting point, to be measured).
 * Per consumer thread, fp32 accumulators: dV + dK 2 x D/2, S^T + dP^T 2 x BLOCK_M/2, dQ 32:
 * 224 at both head dims (d64: 64 + 128 + 32; d128: 128 + 64 + 32), under the 240 that setmaxnreg
 * gives a consumer (24 for the producer: (24 + 2 x 240) x 128 <= 65,536, FA3's split). Shared
 * memory: K, V, 2 stages of Q and dO, 2 of dS, the two 16 KB dQ staging buffers, LSE and D:
 * 194 KB at d128, 195 KB at d64, of 227 KB; one block per SM.
 *
 * dQ. Each step's dQ (BLOCK_M x D) is two 64 x 64 fp32 parts, one per consumer: at d64 the
 * consumers split its rows, at d128 its columns (consumer c's K descriptor starts at slab c). A
 * part is stored to shared memory in pair order (accumulators 2q and 2q + 1 of thread t, two
 * neighbouring columns of one row, as one 8-byte store at q x 256 + 2t: conflict-free) and
 * reduce-added as 16 contiguous KB (cp.reduce.async.bulk .add.f32: the adds happen at L2, one
 * instruction of one thread per part, where step 14's staged dQ takes 64 warp-wide
 * red.global.add.v4.f32 per 64 x 128 step). So the workspace holds dQ in that tile order, per
 * query block, and the convert kernel reads it back from there
 * (tests/test_wgmma_dq_order.py checks the inverse on the CPU); LSE and D sit beside it, padded
 * to 128 rows per head so that every bulk copy is a whole, 16-byte-aligned run and rows past
 * seqlen_q add only into padding. (FA3 stages and bulk-reduces dQ the same way below head dim
 * 256: mainloop_bwd_sm90_tma_gmma_ws.hpp, dQacc_use_TMA; the reduce-add issued by the producer's
 * second warp, flash_bwd_kernel_sm90.h.)
 *
 * Synchronisation, and why each one exists:
 *  - kv_full (once), q_full / do_full [2 stages] (expect_tx): the producer's copies have landed;
 *  - q_empty / do_empty [2] (one arrival per consumer thread, after its dV, dK and dQ completed):
 *    the producer refills a stage only when nothing reads it;
 *  - named barrier 1 (256 consumer threads): both consumers' dS are stored before either reads
 *    the whole tile; two dS stages make the next step's stores safe without a second barrier;
 *  - named barriers 2 + c (dq_full) and 4 + c (dq_empty), 128 + 32 threads: the staging buffer
 *    of consumer c handed to the producer's warp 1 and back (after cp.async.bulk.wait_group.read).
 *
 * Determinism: as step 14, FA2_DETERMINISTIC=1 launches the key blocks a few at a time, block x
 * of each launch adding into partial x of the workspace, and the convert kernel sums the
 * partials in order; the bulk reduce-adds of one partial then come in stream order.
 *
 * Causal order: a key block's walk is longer the earlier its keys, so the blocks start longest
 * first across heads, not head after head (block_position, where the comment says why).
 */
#include <cuda.h>          // CUtensorMap and its enums (types only: nothing links libcuda)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled, fetched at run time from the driver
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <type_traits>

#include "../../common/fa2.h"
#include "../../common/device_limits.h"
#include "../../common/validate.h"

constexpr int MMA_M = 16, MMA_N = 8;  // a warp's share of a wgmma accumulator: mma.sync's m16n8 fragments
constexpr int WARPGROUP = 128;        // four consecutive warps, starting at a warp index divisible by 4
constexpr int WG_M = 64, WG_K = 16;   // wgmma.m64nNk16: a warpgroup's rows, and the k of one instruction
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
// The running max may lag the true max by this much (log2 units) before O is rescaled.
constexpr float RESCALE_LOG2 = 8.0f;

// Two configurations, 128 keys per tile: 2 consumer warpgroups (8 warps x 1 m-tile = 128
// query rows, step 09's block) and, at d64 on large grids, 3 (192 rows; see LargeGridConfig).
constexpr int STAGES = 2;  // shared-memory buffers for each of K and V, as in step 08
constexpr int REGISTERS_PER_SM = 65536;  // every sm_90 SM; setmaxnreg takes a constant
template <int WARPS_, int M_TILES_, int BLOCK_N_>
struct TileConfig {
    static constexpr int WARPS = WARPS_, M_TILES = M_TILES_, BLOCK_N = BLOCK_N_;  // WARPS: the consumers' warps
    static constexpr int CONSUMERS = WARPS * 32 / WARPGROUP;        // consumer warpgroups
    static constexpr int THREADS = WARPGROUP + WARPS * 32;         // the producer warpgroup, then the consumers
    static constexpr int BLOCK_M = WARPS * M_TILES * MMA_M;  // query rows per block
    // setmaxnreg: the producer keeps the least a warpgroup may have (24 per thread), the
    // consumers share the rest of the SM's registers, in steps of 8: 240 each for two
    // consumers, 160 for three. A consumer holds S (BLOCK_N / 2 fp32 per thread), O (D / 2)
    // and P (BLOCK_N / 4), 160 at d128 and 128 at d64, before its softmax temporaries.
    static constexpr int PRODUCER_REGS = 24;
    static constexpr int CONSUMER_REGS = (REGISTERS_PER_SM / WARPGROUP - PRODUCER_REGS) / CONSUMERS / 8 * 8;
    static_assert(WARPS % 4 == 0 && M_TILES * MMA_M * 4 == WG_M,
                  "whole consumer warpgroups, each warp holding 16 of its warpgroup's 64 rows: one m-tile per warp");
    static_assert(CONSUMER_REGS <= 256 && (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) * WARPGROUP <= REGISTERS_PER_SM,
                  "setmaxnreg gives a thread at most 256 registers, and the warpgroups' budgets must fit the SM's");
};
// Two consumers everywhere, except d64 on grids with more 128-row blocks than SMs: there
// a third consumer (FlashAttention-3's choice for d64) was measured 5-15% faster on a kernel
// with step 11's loop, and 0.87x the throughput on a smaller grid (fewer, larger blocks leave
// SMs idle); see docs/measurements/10_warp_specialized.md.
using SmallGridConfig = TileConfig<8, 1, 128>;
template <int D>
using LargeGridConfig = TileConfig<D == 64 ? 12 : 8, 1, 128>;

// TMA's 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B) allows a box row of at most
// 128 bytes, 64 elements: a [rows][D] tile is stored as D / 64 slabs [rows][64]. The
// XOR pattern repeats every 8 rows of 128 bytes, counted from a 1024-byte boundary
// of the shared address space, so every slab starts on one.
constexpr int SWIZZLE_BYTES = 128;
constexpr int SLAB_COLS = SWIZZLE_BYTES / 2;
constexpr int SWIZZLE_ATOM = 8 * SWIZZLE_BYTES;

// Byte offsets into dynamic shared memory, from its first 1024-byte boundary.
template <typename C, int D>
struct SmemLayout {
    static_assert(D % SLAB_COLS == 0, "the head dim is loaded as 64-column slabs, one 128-byte swizzle span each");
    static constexpr uint32_t Q_SLAB_BYTES = C::BLOCK_M * SWIZZLE_BYTES;   // one 64-column slab of Q
    static constexpr uint32_t KV_SLAB_BYTES = C::BLOCK_N * SWIZZLE_BYTES;  // one 64-column slab of a K or V tile
    static constexpr uint32_t STAGE_BYTES = C::BLOCK_N * D * 2;            // one K or V tile
    static constexpr uint32_t Q = 0;                                        // [D / 64][BLOCK_M][64]; O [BLOCK_M][D] in the epilogue
    static constexpr uint32_t K = Q + C::BLOCK_M * D * 2;                  // [STAGES][D / 64][BLOCK_N][64]
    static constexpr uint32_t V = K + STAGES * STAGE_BYTES;               // [STAGES][D / 64][BLOCK_N][64]
    static constexpr uint32_t BARRIERS = V + STAGES * STAGE_BYTES;        // q_full, kv_full of each stage, kv_empty of each stage
    static constexpr uint32_t BYTES = BARRIERS + (1 + 2 * STAGES) * 8 + SWIZZLE_ATOM;  // + room to align the start
    static_assert(Q_SLAB_BYTES % SWIZZLE_ATOM == 0 && KV_SLAB_BYTES % SWIZZLE_ATOM == 0,
                  "every slab starts on a 1024-byte boundary, where TMA's 128-byte swizzle is anchored");
    static_assert(C::BLOCK_M <= 256 && C::BLOCK_N <= 256, "a TMA box has at most 256 rows");
};
template <typename C, int D>
constexpr int smem_bytes_of() { return SmemLayout<C, D>::BYTES; }

// ---- PTX wrappers ----------------------------------------------------------

// ---- wgmma ---------------------------------------------------------------------

// The shared-memory matrix descriptor of wgmma (PTX ISA, "Matrix Descriptor
// Format"): the start address, the leading- and stride-dimension byte offsets
// (all in 16-byte units) and the swizzle mode, 1 = 128-byte, TMA's SWIZZLE_128B.
// With that swizzle a matrix is made of 1024-byte atoms of 8 rows x 128 bytes:
//  - K-major (Q and K: the k of the product, the head dim, is contiguous): the
//    stride offset steps from one 8-row group to the next (1024 bytes); the
//    leading offset is unused, because one k16 step (32 bytes) stays inside a
//    128-byte row. The next k-step is the same descriptor 32 bytes further.
//  - MN-major (V in P V: the n, the head dim, is contiguous): the stride offset
//    steps from one group of 8 k-rows (keys) to the next (1024 bytes), the
//    leading offset from one 64-column slab of n to the next.
__device__ __forceinline__ uint64_t smem_desc(uint32_t smem_addr, uint32_t leading_bytes, uint32_t stride_bytes)
{
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | (uint64_t)(leading_bytes >> 4) << 16 |
           (uint64_t)(stride_bytes >> 4) << 32 | 1ull << 62;
}
// A descriptor `bytes` further on (the start address is its low bits, in 16-byte units).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Every wgmma before the next one is issued must see the registers as other
// instructions left them: this orders those accesses before it.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the group of wgmma this warp issued since the last commit.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N of this warp's committed groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// The compiler sees a wgmma's accumulators as written when the instruction is
// issued; in truth they are written until wgmma_wait returns. This empty asm,
// placed after the wait, "rewrites" each register so that no read of them is
// moved above the wait (and, placed before the issue, no earlier access below it).
template <typename R, int N>
__device__ __forceinline__ void fence_registers(R (&r)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if constexpr (std::is_same<R, float>::value) asm volatile("" : "+f"(r[i][e])::"memory");
            else asm volatile("" : "+r"(r[i][e])::"memory");
        }
}

// The accumulator operand lists of m64n64 (32 fp32 per thread) and m64n128 (64), over
// [n-tile][c0..c3]: thread (warp w of the warpgroup, lane l, g = l / 4, t = l % 4) holds in
// d[nt][e] the element at row 16 w + g + 8 (e / 2), column 8 nt + 2 t + e % 2: the m16n8
// accumulator of mma.sync, repeated N / 8 times along the columns.
#define WGMMA_ACC_32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_ACC_64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define WGMMA_OPERANDS_32(d) "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define WGMMA_OPERANDS_64(d) WGMMA_OPERANDS_32(d), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
// One m64nNk16 (N = 64 or 128) with A and B from shared memory (descriptors): D (+)= A B, and
// D = A B when `accumulate` is 0. A is K-major. B is K-major (TRANS_B 0: Q K^T in the forward,
// K Q^T and V dO^T in the backward: Q, dO stored [row][d] with d, the k, contiguous) or MN-major
// (TRANS_B 1, imm-trans-b, 16-bit types only: dS K in the backward, K [key][d] being B[k = key][n
// = d] with n contiguous).
#define WGMMA_SS(N, TYPE, ACC, A, B, SCALE_D, TRANS_B)                                                         \
    "{\n .reg .pred p;\n setp.ne.b32 p, " SCALE_D ", 0;\n wgmma.mma_async.sync.aligned.m64n" N "k16.f32." TYPE \
    "." TYPE " " ACC ", " A ", " B ", p, 1, 1, 0, " TRANS_B ";\n}\n"
template <typename T, int N, int TRANS_B>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a_desc, uint64_t b_desc, int accumulate)
{
    static_assert(N == 64 || N == 128, "the products are issued as m64n64k16 or m64n128k16");
    static_assert(TRANS_B == 0 || TRANS_B == 1, "imm-trans-b is 0 (K-major B) or 1 (MN-major B)");
    if constexpr (N == 64 && std::is_same<T, __half>::value)
        asm volatile(WGMMA_SS("64", "f16", WGMMA_ACC_32, "%32", "%33", "%34", "%35")
                     : WGMMA_OPERANDS_32(d)
                     : "l"(a_desc), "l"(b_desc), "r"(accumulate), "n"(TRANS_B));
    else if constexpr (N == 64)
        asm volatile(WGMMA_SS("64", "bf16", WGMMA_ACC_32, "%32", "%33", "%34", "%35")
                     : WGMMA_OPERANDS_32(d)
                     : "l"(a_desc), "l"(b_desc), "r"(accumulate), "n"(TRANS_B));
    else if constexpr (std::is_same<T, __half>::value)
        asm volatile(WGMMA_SS("128", "f16", WGMMA_ACC_64, "%64", "%65", "%66", "%67")
                     : WGMMA_OPERANDS_64(d)
                     : "l"(a_desc), "l"(b_desc), "r"(accumulate), "n"(TRANS_B));
    else
        asm volatile(WGMMA_SS("128", "bf16", WGMMA_ACC_64, "%64", "%65", "%66", "%67")
                     : WGMMA_OPERANDS_64(d)
                     : "l"(a_desc), "l"(b_desc), "r"(accumulate), "n"(TRANS_B));
}

// D += A B with A from registers: a[0..3] is the m16n8k16 A fragment of mma.sync for
// the warp's 16 rows, so an accumulator (S in the forward, S^T and dP^T in the backward)
// converts into it in place. B from shared memory, MN-major (the final 1 is imm-trans-b:
// transposed on the way in).
#define WGMMA_RS(N, TYPE, ACC, A, B) \
    "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." TYPE "." TYPE " " ACC ", {" A "}, " B ", 1, 1, 1, 1;\n"
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b_desc)
{
    static_assert(N == 64 || N == 128, "P V, dV and dK are issued as m64n64k16 (d64) or m64n128k16 (d128)");
    if constexpr (N == 64 && std::is_same<T, __half>::value)
        asm volatile(WGMMA_RS("64", "f16", WGMMA_ACC_32, "%32, %33, %34, %35", "%36")
                     : WGMMA_OPERANDS_32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
    else if constexpr (N == 64)
        asm volatile(WGMMA_RS("64", "bf16", WGMMA_ACC_32, "%32, %33, %34, %35", "%36")
                     : WGMMA_OPERANDS_32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
    else if constexpr (std::is_same<T, __half>::value)
        asm volatile(WGMMA_RS("128", "f16", WGMMA_ACC_64, "%64, %65, %66, %67", "%68")
                     : WGMMA_OPERANDS_64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
    else
        asm volatile(WGMMA_RS("128", "bf16", WGMMA_ACC_64, "%64, %65, %66, %67", "%68")
                     : WGMMA_OPERANDS_64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}


// ---- mbarriers ----------------------------------------------------------------
// An mbarrier is 8 bytes of shared memory holding a phase bit, a count of
// arrivals still expected and a count of transaction bytes still expected. The
// phase completes, and the bit flips, when both reach zero; waiters name the
// parity of the phase they wait for. Addresses are shared-state-space bytes.

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals));
}

// Makes the initialised barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival, and `bytes` more transaction bytes the phase must see land before it completes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// One arrival, no transaction bytes: a consumer warp saying it is done with a stage.
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Returns once the phase with this parity has completed. try_wait suspends the
// thread for a while in hardware before it reports false, so the loop does not spin hot.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

// ---- named barriers, registers ---------------------------------------------------

// bar.sync waits until `threads` threads have reached named barrier `id` (with sync
// or arrive; 0 is __syncthreads' own); bar.arrive counts this thread without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Sets this warpgroup's registers per thread to N (sm_90a; all its threads execute it):
// the producer returns what the consumers then take.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

// ---- the tensor memory accelerator (TMA) ------------------------------------------

// Copies the box at coordinates (col, row, head, batch) of the tensor `map`
// describes into shared memory at dst, swizzled as the map says; as its bytes
// land they count down the transaction bytes bar expects. Parts of the box
// outside the tensor arrive as zeros (their bytes count all the same).
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, uint32_t bar, int col, int row, int head, int batch)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
                 ::"r"(dst), "l"(map), "r"(bar), "r"(col), "r"(row), "r"(head), "r"(batch)
                 : "memory");
}

// Rows [row, row + ROWS) of one head, all D columns: D / 64 boxes, one per slab.
template <int ROWS, int D>
__device__ __forceinline__ void tma_load_tile(uint32_t dst, const CUtensorMap *map, uint32_t bar, int row, int head, int batch)
{
#pragma unroll
    for (int slab = 0; slab < D / SLAB_COLS; slab++)
        tma_load(dst + slab * ROWS * SWIZZLE_BYTES, map, bar, slab * SLAB_COLS, row, head, batch);
}

// 2^x on the special-function unit (one MUFU.EX2); exp2(-inf) = 0.
__device__ __forceinline__ float exp2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Reduces N values pairwise, a balanced tree of depth log2 N: a chain of N - 1
// dependent FMNMX or FADD would wait out each one's latency (about 4 cycles)
// in turn, and with two warps per scheduler little else can fill those cycles.
struct MaxOp { __device__ static float apply(float a, float b) { return fmaxf(a, b); } };
struct SumOp { __device__ static float apply(float a, float b) { return a + b; } };
template <typename Op, int N>
__device__ __forceinline__ float tree_reduce(const float (&x)[N])
{
    static_assert((N & (N - 1)) == 0, "a balanced pairwise tree needs a power-of-two count");
    if constexpr (N == 1) {
        return x[0];
    } else {
        float half[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; i++) half[i] = Op::apply(x[i], x[i + N / 2]);
        return tree_reduce<Op>(half);
    }
}

// The max to subtract in exp2(s - m): a row that has seen no key yet keeps
// m = -inf, and subtracting 0 instead gives exp2(-inf) = 0 where -inf - -inf
// would give NaN.
__device__ __forceinline__ float finite_or_zero(float m) { return m == -INFINITY ? 0.0f : m; }

// Two fp32 -> one register of two 16-bit values, lo in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    if constexpr (std::is_same<T, __half>::value) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
}

// One register of two 16-bit values -> two fp32 (the backward's prep kernel).
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t x)
{
    if constexpr (std::is_same<T, __half>::value) return __half22float2(*reinterpret_cast<__half2 *>(&x));
    else return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&x));
}

// ---- swizzled shared-memory layout ---------------------------------------------

// Physical column of logical element (row, col) in a tile of 16-bit elements:
// the 16-byte chunk (8 elements) is XORed with the row's low 3 bits, so the
// 8 rows any fragment read touches land in 8 different chunks of the 128-byte
// bank window. Within a chunk nothing moves, so 32-bit and 16-byte accesses
// keep their alignment. The epilogue stages O so; the copy engine writes Q, K and
// V with the same XOR, within each 128-byte slab row.
__device__ __forceinline__ int swizzle(int row, int col) { return (((col / 8) ^ (row % 8)) * 8) | (col % 8); }

// ---- the kernel --------------------------------------------------------------

template <typename T, int D, typename C>
__global__ void __launch_bounds__(C::THREADS, 1)
    fa2_wgmma_kernel(fa2_params p, const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                   const __grid_constant__ CUtensorMap v_map)
{
    constexpr int BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, M_TILES = C::M_TILES;
    constexpr int CONSUMERS = C::CONSUMERS, CONSUMER_THREADS = C::WARPS * 32;  // after the producer's 128 threads
    static_assert(D % WG_K == 0, "Q K^T consumes the head dim 16 at a time (the k of m64nNk16)");
    static_assert(BLOCK_N % WG_K == 0, "P V consumes keys 16 at a time (the k of m64nNk16)");
    static_assert(STAGES >= 2, "the copy of tile nb + 1 needs its own buffer while tile nb is read");
    // Named barriers (0 is __syncthreads'): consumer c waits for its turn at the tensor
    // cores on TURN + c, and the consumers meet for the epilogue on EPILOGUE.
    constexpr int TURN = 1, EPILOGUE = TURN + CONSUMERS;
    static_assert(EPILOGUE < 16, "a block has 16 named barriers, ids 0-15");
    using L = SmemLayout<C, D>;
    extern __shared__ __align__(16) uint16_t smem[];
    // The tiles and barriers as shared-state-space byte addresses (_saddr), the form TMA,
    // mbarriers and the wgmma descriptors take, from the first 1024-byte boundary.
    const uint32_t smem_saddr = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t align_pad = (SWIZZLE_ATOM - smem_saddr % SWIZZLE_ATOM) % SWIZZLE_ATOM;
    constexpr uint32_t STAGE_BYTES = L::STAGE_BYTES;  // a K or V tile
    const uint32_t q_saddr = smem_saddr + align_pad + L::Q;  // [D / 64][BLOCK_M][64]; O in the epilogue
    const uint32_t k_saddr = smem_saddr + align_pad + L::K;  // [STAGES][D / 64][BLOCK_N][64]
    const uint32_t v_saddr = smem_saddr + align_pad + L::V;  // [STAGES][D / 64][BLOCK_N][64]
    const uint32_t q_full = smem_saddr + align_pad + L::BARRIERS;  // Q has landed
    const uint32_t kv_full = q_full + 8;                           // [STAGES]: K and V of the stage's tile have landed
    const uint32_t kv_empty = kv_full + STAGES * 8;                // [STAGES]: every consumer warp is done with them

    // Causal blocks near the end of the sequence see the most keys; the GPU starts
    // blocks in index order, so they get the low indices and the short blocks fill
    // the tail of the launch instead of the long ones.
    const int m_block = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m0 = m_block * BLOCK_M, h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);  // GQA: several query heads share one K/V head
    const int warp = threadIdx.x / 32 - WARPGROUP / 32, lane = threadIdx.x % 32;  // warp: the consumers' 0, 1, ...
    const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: row group, thread in group
    const int shift = p.seqlen_k - p.seqlen_q;  // causal: row i sees keys j <= i + shift
    const float scale_log2 = p.softmax_scale * LOG2E;  // exp(x * scale) = exp2(x * scale * log2 e)
    const int warp_row0 = warp * M_TILES * MMA_M;      // this consumer warp's first row in the block
    // Skip the O rescale while the running max is close enough (see the softmax below):
    // with every product waited for, the D / 2 FMUL per row pair sit between two wgmma
    // on the warp's own time, at every head dim.
    constexpr bool LAZY_RESCALE = true;

    // Causal: key tiles past the last key the block's last row sees are skipped;
    // only tiles that cross the diagonal, or the seqlen_k tail, need a mask.
    const int key_end = p.causal ? min(p.seqlen_k, max(0, m0 + BLOCK_M + shift)) : p.seqlen_k;
    const int n_blocks = (key_end + BLOCK_N - 1) / BLOCK_N;

    // Thread 0, the producer's, issues every copy: K and V of key tile nb into stage nb % STAGES,
    // both counted on that stage's full barrier (rows past seqlen_k land as zeros).
    auto load_kv = [&](const int nb) {
        const uint32_t stage_off = nb % STAGES * STAGE_BYTES, bar = kv_full + nb % STAGES * 8;
        mbarrier_arrive_expect_tx(bar, 2 * STAGE_BYTES);
        tma_load_tile<BLOCK_N, D>(k_saddr + stage_off, &k_map, bar, nb * BLOCK_N, h_kv, b);
        tma_load_tile<BLOCK_N, D>(v_saddr + stage_off, &v_map, bar, nb * BLOCK_N, h_kv, b);
    };
    // Prologue: the barriers, then Q.
    if (threadIdx.x == 0) {
        mbarrier_init(q_full, 1);  // one arrival, the expect_tx's; the bytes do the rest
        for (int s = 0; s < STAGES; s++) {
            mbarrier_init(kv_full + s * 8, 1);
            mbarrier_init(kv_empty + s * 8, C::WARPS);  // one arrival per consumer warp
        }
        fence_barrier_init();
        mbarrier_arrive_expect_tx(q_full, BLOCK_M * D * 2);  // rows past seqlen_q land as zeros, and count
        tma_load_tile<BLOCK_M, D>(q_saddr, &q_map, q_full, m0, h, b);
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them

    // The producer warpgroup: its registers go to the consumers, and thread 0 copies
    // every key tile, STAGES ahead of the consumers at most. Before refilling a stage
    // it waits until every consumer warp has released the tile that was there, STAGES
    // tiles back: the stage's empty phase nb / STAGES - 1.
    if (threadIdx.x < WARPGROUP) {
        setmaxnreg_dec<C::PRODUCER_REGS>();
        if (threadIdx.x == 0)
            for (int nb = 0; nb < n_blocks; nb++) {
                if (nb >= STAGES) mbarrier_wait(kv_empty + nb % STAGES * 8, (nb / STAGES - 1) % 2);
                load_kv(nb);
            }
        return;
    }
    // The consumer warpgroups: the rest of the kernel.
    setmaxnreg_inc<C::CONSUMER_REGS>();

    // The matrix descriptors of the first k-step: this consumer's 64 rows of Q (K-major),
    // K of stage 0 (K-major), V of stage 0 (MN-major: the next 64 head-dim columns one
    // slab further on); each 8-row group of 128-byte rows is 1024 bytes further.
    const uint32_t q_wg_saddr = q_saddr + warp / 4 * WG_M * SWIZZLE_BYTES;
    const uint64_t q_desc = smem_desc(q_wg_saddr, 16, 8 * SWIZZLE_BYTES);
    const uint64_t k_desc = smem_desc(k_saddr, 16, 8 * SWIZZLE_BYTES);
    const uint64_t v_desc = smem_desc(v_saddr, L::KV_SLAB_BYTES, 8 * SWIZZLE_BYTES);

    float o_acc[M_TILES][D / MMA_N][4];  // [m-tile][d-tile][c0..c3]: rows g, g+8 of the m-tile, cols 2t, 2t+1
    float m_run[M_TILES][2];             // running max of rows g and g+8, in scaled log2 units
    float l_run[M_TILES][2];             // this lane's part of the running sum (quad-reduced at the end)
#pragma unroll
    for (int mt = 0; mt < M_TILES; mt++) {
#pragma unroll
        for (int dt = 0; dt < D / MMA_N; dt++) o_acc[mt][dt][0] = o_acc[mt][dt][1] = o_acc[mt][dt][2] = o_acc[mt][dt][3] = 0.0f;
        m_run[mt][0] = m_run[mt][1] = -INFINITY;
        l_run[mt][0] = l_run[mt][1] = 0.0f;
    }

    // Turns at the tensor cores: consumer c issues a product only after consumer c - 1
    // has issued its own (c - 1 arrives on TURN + c, c syncs there: 2 x 128 threads), so
    // while one consumer is in its softmax the other's product runs. Every consumer takes
    // 2 n_blocks turns (S, then P V, of each tile); the last consumer hands out the first
    // turn before the loop and keeps its own last one.
    const int consumer = warp / 4;
    auto turn_begin = [&] { named_barrier_sync(TURN + consumer, 2 * WARPGROUP); };
    auto turn_end = [&](const bool last) {
        if (!(last && consumer == CONSUMERS - 1)) named_barrier_arrive(TURN + (consumer + 1) % CONSUMERS, 2 * WARPGROUP);
    };

    // One key tile: the loop body, instantiated twice. Tiles that need no mask
    // (all but the diagonal ones and the seqlen_k tail) run a copy compiled with
    // no masking code at all, so its compares and selects, and the register
    // shuffling a run-time branch around them costs, leave the hot loop.
    auto key_tile = [&](const int nb, auto masked) {
        const int n0 = nb * BLOCK_N;
        const uint32_t stage_off = nb % STAGES * STAGE_BYTES;
        // K and V of tile nb have landed; the wait on the mbarrier is each thread's own.
        mbarrier_wait(kv_full + nb % STAGES * 8, nb / STAGES % 2);  // the stage's (nb / STAGES)-th use

        // S = Q K^T, in this consumer's turn: D / 16 wgmma of this warpgroup, each one k-step of
        // 16 head-dim columns, 32 bytes further along the slabs' 128-byte rows, the next slab after four.
        float s_acc[M_TILES][BLOCK_N / MMA_N][4];  // [m-tile][key n-tile][c0..c3], as in step 08
        turn_begin();
        fence_registers(s_acc[0]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / WG_K; kk++)
            wgmma_ss<T, BLOCK_N, 0>(s_acc[0], desc_advance(q_desc, kk / 4 * L::Q_SLAB_BYTES + kk % 4 * 32),
                                 desc_advance(k_desc, stage_off + kk / 4 * L::KV_SLAB_BYTES + kk % 4 * 32), kk > 0);
        wgmma_commit();
        turn_end(false);
        wgmma_wait<0>();
        fence_registers(s_acc[0]);

        if constexpr (decltype(masked)::value) {
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
                for (int nt = 0; nt < BLOCK_N / MMA_N; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int row = m0 + warp_row0 + mt * MMA_M + g + (e >= 2 ? 8 : 0), key = n0 + nt * MMA_N + 2 * t + (e & 1);
                        if (key >= p.seqlen_k || (p.causal && key > row + shift)) s_acc[mt][nt][e] = -INFINITY;
                    }
        }

        // Online softmax for rows g (r = 0: c0, c1) and g + 8 (r = 1: c2, c3) of each m-tile.
        float tile_max[M_TILES][2];  // the row's max score in this tile, scaled to log2 units
        bool grown = false;          // has some row's max grown past its running max by more than RESCALE_LOG2?
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float row_vals[BLOCK_N / MMA_N * 2];  // this lane's BLOCK_N / 4 scores of the row
#pragma unroll
                for (int nt = 0; nt < BLOCK_N / MMA_N; nt++) row_vals[2 * nt] = s_acc[mt][nt][2 * r], row_vals[2 * nt + 1] = s_acc[mt][nt][2 * r + 1];
                float row_max = tree_reduce<MaxOp>(row_vals);
                row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));  // the 4 lanes of a quad
                row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));  // share one row
                tile_max[mt][r] = row_max * scale_log2;
                grown |= tile_max[mt][r] > m_run[mt][r] + RESCALE_LOG2;
            }
        // Rescale only when the warp must: a running max that is up to RESCALE_LOG2
        // below the true one leaves p = exp2(s - m) <= 2^RESCALE_LOG2, which fp16/bf16
        // P and the fp32 sums hold exactly as well, and the final O / l cancels
        // whichever max was used. Past the first tile a row's max rarely grows that
        // much, so the 4 exp2 and the D / 2 FMUL per row of the O correction mostly
        // drop out. The vote keeps the branch warp-uniform.
        if (!LAZY_RESCALE || __any_sync(0xffffffffu, grown)) {
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float m_new = fmaxf(m_run[mt][r], tile_max[mt][r]);
                    const float correction = exp2_approx(m_run[mt][r] - finite_or_zero(m_new));  // 0 on a row's first visible key
                    m_run[mt][r] = m_new;
                    l_run[mt][r] *= correction;
#pragma unroll
                    for (int dt = 0; dt < D / MMA_N; dt++) {
                        o_acc[mt][dt][2 * r] *= correction;
                        o_acc[mt][dt][2 * r + 1] *= correction;
                    }
                }
        }
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const float m_use = finite_or_zero(m_run[mt][r]);
                float row_vals[BLOCK_N / MMA_N * 2];
#pragma unroll
                for (int nt = 0; nt < BLOCK_N / MMA_N; nt++) {
                    s_acc[mt][nt][2 * r] = row_vals[2 * nt] = exp2_approx(fmaf(s_acc[mt][nt][2 * r], scale_log2, -m_use));
                    s_acc[mt][nt][2 * r + 1] = row_vals[2 * nt + 1] = exp2_approx(fmaf(s_acc[mt][nt][2 * r + 1], scale_log2, -m_use));
                }
                l_run[mt][r] += tree_reduce<SumOp>(row_vals);
            }


        // O += P V, in the next turn: BLOCK_N / 16 wgmma, each 16 keys = 16 rows of 128 bytes further into V.
        // The C fragments of key n-tiles 2j and 2j+1 are exactly the A fragment of k-step j,
        // so P never leaves registers; they stay live until the products complete.
        uint32_t p_frag[BLOCK_N / WG_K][4];  // [key k-step j][a0..a3]
#pragma unroll
        for (int j = 0; j < BLOCK_N / WG_K; j++) {
            p_frag[j][0] = pack2<T>(s_acc[0][2 * j][0], s_acc[0][2 * j][1]);
            p_frag[j][1] = pack2<T>(s_acc[0][2 * j][2], s_acc[0][2 * j][3]);
            p_frag[j][2] = pack2<T>(s_acc[0][2 * j + 1][0], s_acc[0][2 * j + 1][1]);
            p_frag[j][3] = pack2<T>(s_acc[0][2 * j + 1][2], s_acc[0][2 * j + 1][3]);
        }
        turn_begin();
        fence_registers(o_acc[0]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < BLOCK_N / WG_K; j++)
            wgmma_rs<T, D>(o_acc[0], p_frag[j], desc_advance(v_desc, stage_off + j * WG_K * SWIZZLE_BYTES));
        wgmma_commit();
        turn_end(nb == n_blocks - 1);
        wgmma_wait<0>();
        fence_registers(o_acc[0]);
        fence_registers(p_frag);
        // This warp's wgmma reading the stage are done: one of the WARPS arrivals the producer waits for.
        if (lane == 0) mbarrier_arrive(kv_empty + nb % STAGES * 8);
    };

    // Tiles from first_masked on cross the diagonal (causal: some key is past the
    // first row's last visible key) or hold the seqlen_k tail.
    int first_masked = p.seqlen_k / BLOCK_N;
    if (p.causal) first_masked = min(first_masked, max(0, (m0 + shift + 1) / BLOCK_N));
    first_masked = min(first_masked, n_blocks);
    mbarrier_wait(q_full, 0);
    if (n_blocks > 0 && consumer == CONSUMERS - 1) named_barrier_arrive(TURN, 2 * WARPGROUP);  // the first turn
    for (int nb = 0; nb < first_masked; nb++) key_tile(nb, std::false_type{});
    for (int nb = first_masked; nb < n_blocks; nb++) key_tile(nb, std::true_type{});

    // Epilogue, 1: finish the row sums across the quad, normalise in registers,
    // write O into the Q tile's shared memory (swizzled: a fragment's 8 rows hit 8
    // different chunks, so the 4-byte stores are conflict-free), and LSE directly.
    // The producer takes no part: the consumers meet on a named barrier, not __syncthreads.
    named_barrier_sync(EPILOGUE, CONSUMER_THREADS);  // every consumer warp is done reading Q before O overwrites it
    uint16_t(*o_smem)[D] = reinterpret_cast<uint16_t(*)[D]>(smem + (align_pad + L::Q) / 2);  // [BLOCK_M][D], Q's space
#pragma unroll
    for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l_run[mt][r] += __shfl_xor_sync(0xffffffffu, l_run[mt][r], 1);
            l_run[mt][r] += __shfl_xor_sync(0xffffffffu, l_run[mt][r], 2);
            const int row = warp_row0 + mt * MMA_M + g + 8 * r;
            const float inv_l = l_run[mt][r] != 0.0f ? 1.0f / l_run[mt][r] : 0.0f;  // l = 0: the row saw no key, O = 0; NaN l: NaN O
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt++)
                *reinterpret_cast<uint32_t *>(&o_smem[row][swizzle(row, dt * MMA_N + 2 * t)]) =
                    pack2<T>(o_acc[mt][dt][2 * r] * inv_l, o_acc[mt][dt][2 * r + 1] * inv_l);
            if (p.lse && t == 0 && m0 + row < p.seqlen_q)
                p.lse[((int64_t)b * p.heads_q + h) * p.seqlen_q + m0 + row] =
                    l_run[mt][r] != 0.0f ? (m_run[mt][r] + log2f(l_run[mt][r])) * LN2 : -INFINITY;
        }
    named_barrier_sync(EPILOGUE, CONSUMER_THREADS);

    // Epilogue, 2: 16-byte chunks to global memory, consecutive threads on
    // consecutive chunks of a row, so each 8 threads write one full 128-byte line.
    constexpr int CHUNKS_PER_ROW = D * 2 / 16;
    static_assert((BLOCK_M * CHUNKS_PER_ROW) % CONSUMER_THREADS == 0, "every consumer thread stores the same number of chunks");
    uint16_t *o = (uint16_t *)p.o + b * p.o_batch_stride + (int64_t)m0 * p.o_row_stride + h * p.o_head_stride;
#pragma unroll
    for (int i = threadIdx.x - WARPGROUP; i < BLOCK_M * CHUNKS_PER_ROW; i += CONSUMER_THREADS) {
        const int row = i / CHUNKS_PER_ROW, chunk = i % CHUNKS_PER_ROW;
        if (m0 + row < p.seqlen_q)
            *reinterpret_cast<uint4 *>(o + row * p.o_row_stride + chunk * 8) =
                *reinterpret_cast<const uint4 *>(&o_smem[row][swizzle(row, chunk * 8)]);
    }
}

// ---- launcher and ABI --------------------------------------------------------

// Blocks of `block_m` query rows: one per (query tile, head, batch).
static long long grid_blocks(const fa2_params *p, int block_m)
{
    return (long long)((p->seqlen_q + block_m - 1) / block_m) * p->heads_q * p->batch;
}

// A launch takes LargeGridConfig when the grid has more 128-row blocks than the GPU has
// SMs (the rule of step 07; the two configurations differ at d64 only).
static bool grid_is_large(const fa2_params *p, int sm_count) { return grid_blocks(p, SmallGridConfig::BLOCK_M) > sm_count; }

// The shared memory a launch requests: that of the configuration it takes.
template <int D>
static int smem_bytes(const fa2_params *p, int sm_count)
{
    return grid_is_large(p, sm_count) ? smem_bytes_of<LargeGridConfig<D>, D>() : smem_bytes_of<SmallGridConfig, D>();
}

// The driver's tensor-map encoder, fetched through the runtime so that nothing
// links libcuda directly. NULL if the driver has none (older than CUDA 12).
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    if (!encode) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
            found == cudaDriverEntryPointSuccess)
            encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }
    return encode;
}

// A tensor map over one of Q, K, V: 4 dims, innermost first (head_dim, seqlen, heads,
// batch), strides in bytes for the outer three. A box is [box_rows][64] of one head:
// rows past seqlen belong to no other head, they are outside the tensor (zeros).
// Returns the driver's result (CUDA_SUCCESS = 0), or -1 if the driver has no encoder.
static int make_tensor_map(CUtensorMap *map, const void *base, fa2_dtype dtype, int head_dim, int seqlen, int heads,
                           int batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode) return -1;
    const cuuint64_t dims[4] = {(cuuint64_t)head_dim, (cuuint64_t)seqlen, (cuuint64_t)heads, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)row_stride * 2, (cuuint64_t)head_stride * 2, (cuuint64_t)batch_stride * 2};
    const cuuint32_t box[4] = {SLAB_COLS, (cuuint32_t)box_rows, 1, 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    return encode(map, dtype == FA2_FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
                  (void *)base, dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

template <typename T, int D, typename C>
static int launch_with(const fa2_params *p, int64_t, void *stream)
{
    constexpr int smem_bytes = smem_bytes_of<C, D>();
    CUtensorMap maps[3];
    const int results[3] = {
        make_tensor_map(&maps[0], p->q, p->dtype, D, p->seqlen_q, p->heads_q, p->batch, p->q_row_stride, p->q_head_stride, p->q_batch_stride, C::BLOCK_M),
        make_tensor_map(&maps[1], p->k, p->dtype, D, p->seqlen_k, p->heads_kv, p->batch, p->k_row_stride, p->k_head_stride, p->k_batch_stride, C::BLOCK_N),
        make_tensor_map(&maps[2], p->v, p->dtype, D, p->seqlen_k, p->heads_kv, p->batch, p->v_row_stride, p->v_head_stride, p->v_batch_stride, C::BLOCK_N)};
    static const char *const tensors[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++)
        if (results[i] != 0) {
            char reason[96];
            if (results[i] < 0) snprintf(reason, sizeof reason, "the driver has no tensor-map encoder (older than CUDA 12)");
            else snprintf(reason, sizeof reason, "CUresult %d for the tensor map of %s", results[i], tensors[i]);
            return fa2_fail("cuTensorMapEncodeTiled", reason);
        }
    FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_wgmma_kernel<T, D, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    dim3 grid((p->seqlen_q + C::BLOCK_M - 1) / C::BLOCK_M, p->heads_q, p->batch);
    fa2_wgmma_kernel<T, D, C><<<grid, C::THREADS, smem_bytes, (cudaStream_t)stream>>>(*p, maps[0], maps[1], maps[2]);
    FA2_CUDA_TRY(cudaGetLastError());
    return FA2_OK;
}

template <typename T, int D>
static int launch(const fa2_params *p, void *stream)
{
    fa2_limits l;
    char why[256];
    if (fa2_limits_get(&l, why, sizeof why) != FA2_LIMITS_OK) return fa2_fail("fa2_limits_get", why);
    // The configuration from the whole grid; then one launch, or one per chunk of at most
    // 65,535 batches and heads (the grid's y and z).
    return fa2_for_each_grid_chunk(p, grid_is_large(p, l.sm_count) ? launch_with<T, D, LargeGridConfig<D>> : launch_with<T, D, SmallGridConfig>,
                                   stream);
}

extern "C" int fa2_supports(const fa2_params *p, char *why, size_t why_len)
{
    if (!fa2_validate_params(p, why, why_len) || !fa2_refuse_kv_cache(p, why, why_len)) return 0;
    if (p->head_dim != 64 && p->head_dim != 128) {
        if (why) snprintf(why, why_len, "head_dim %d (allowed: 64, 128)", p->head_dim);
        return 0;
    }
    // TMA: every base and stride a multiple of 16 bytes (the epilogue's 16-byte stores
    // ask the same of O), every stride under 2^40 bytes.
    if (!fa2_validate_alignment(p, 16, "TMA tensor maps and 16-byte stores", why, why_len)) return 0;
    const int64_t strides[] = {p->q_batch_stride, p->q_row_stride, p->q_head_stride, p->k_batch_stride,
                               p->k_row_stride,   p->k_head_stride, p->v_batch_stride, p->v_row_stride, p->v_head_stride};
    for (size_t i = 0; i < sizeof strides / sizeof *strides; i++)
        if (strides[i] >= (INT64_C(1) << 39)) {
            if (why) snprintf(why, why_len, "stride %lld (allowed: under 2^39 elements, 2^40 bytes, for TMA tensor maps)", (long long)strides[i]);
            return 0;
        }
    // The device (common/device_limits.h: the GPU's own, or FA2_EMULATE's). With no GPU
    // nothing can launch, and the harness says so itself.
    fa2_limits l;
    char reason[256];
    const int found = fa2_limits_get(&l, reason, sizeof reason);
    if (found == FA2_LIMITS_BAD_PRESET) {
        if (why) snprintf(why, why_len, "%s", reason);
        return 0;
    }
    if (found == FA2_LIMITS_NO_GPU) return 1;
    if (l.cc_major != 9 || l.cc_minor != 0) {
        if (why) snprintf(why, why_len, "GPU compute capability %d.%d (allowed: 9.0; wgmma and setmaxnreg exist only in sm_90a, the Hopper target this step is built for)", l.cc_major, l.cc_minor);
        return 0;
    }
    // The configuration the launch takes must fit the GPU's shared memory per block.
    char what[32];
    snprintf(what, sizeof what, "head_dim %d", p->head_dim);
    return fa2_limits_check_smem(p->head_dim == 64 ? smem_bytes<64>(p, l.sm_count) : smem_bytes<128>(p, l.sm_count), what, why, why_len);
}

// The configurations, numbered by their consumer warpgroups: 0 for two, 1 for three.
static_assert(SmallGridConfig::CONSUMERS == 2 && LargeGridConfig<64>::CONSUMERS == 3 && LargeGridConfig<128>::CONSUMERS == 2,
              "fa2_config numbers the configurations by their consumer count, 2 or 3");
extern "C" int fa2_config_count(void) { return 2; }

extern "C" int fa2_config_smem(const fa2_params *p, int config)
{
    const bool d64 = p->head_dim == 64;
    switch (config) {
    case 0: return d64 ? smem_bytes_of<SmallGridConfig, 64>() : smem_bytes_of<SmallGridConfig, 128>();
    case 1: return d64 ? smem_bytes_of<LargeGridConfig<64>, 64>() : -1;  // three consumers: at d64 only
    default: return -1;
    }
}

extern "C" int fa2_config(const fa2_params *p, char *what, size_t what_len)
{
    if (!fa2_supports(p, what, what_len)) return -1;
    fa2_limits l;
    char reason[256];
    if (fa2_limits_get(&l, reason, sizeof reason) != FA2_LIMITS_OK) {
        snprintf(what, what_len, "%s: the choice depends on its SM count", reason);
        return -1;
    }
    const bool large = grid_is_large(p, l.sm_count);
    const int consumers = large && p->head_dim == 64 ? LargeGridConfig<64>::CONSUMERS : SmallGridConfig::CONSUMERS;
    const int config = consumers - 2, block_m = consumers * WG_M;
    snprintf(what, what_len, "a producer and %d consumer warpgroups (%d query rows), %d keys per tile, %d stages, %d KB: %lld blocks (%lld of 128 rows %s %d SMs)",
             consumers, block_m, SmallGridConfig::BLOCK_N, STAGES, fa2_config_smem(p, config) / 1024, grid_blocks(p, block_m),
             grid_blocks(p, SmallGridConfig::BLOCK_M), large ? ">" : "<=", l.sm_count);
    return config;
}

extern "C" int fa2_forward(const fa2_params *p, void *stream)
{
    if (!fa2_supports(p, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    if (p->dtype == FA2_FP16)
        return p->head_dim == 64 ? launch<__half, 64>(p, stream) : launch<__half, 128>(p, stream);
    return p->head_dim == 64 ? launch<__nv_bfloat16, 64>(p, stream) : launch<__nv_bfloat16, 128>(p, stream);
}

extern "C" const char *fa2_name(void) { return "15_wgmma_backward"; }
extern "C" const char *fa2_key_change(void) { return "the backward on wgmma: keys as M (S^T, dP^T), P^T and dS^T reused from registers for dV and dK, dS through shared memory for dQ, dQ by TMA bulk reduce-add; a producer warpgroup; step 10's forward"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }
extern "C" size_t fa2_workspace_size(const fa2_params *) { return 0; }  // one pass: no partial results

// ==== the backward pass ==========================================================

// ---- more PTX: bulk copies without a tensor map, the async proxy, 16-bit stores ----

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory to
// shared memory as one bulk copy, counted on bar's transaction bytes like a TMA tile: LSE and D
// of a step ride on the barriers of Q and dO.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

// global[i] += shared[i] for bytes / 4 fp32 (cp.reduce.async.bulk .add.f32: the adds are done
// at L2 by the copy engine, element by element, as red.global.add would), completed through
// this thread's bulk async-group.
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes)
{
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until this thread's bulk groups have read their shared memory (the source may be rewritten)...
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// ...and until their writes to global memory are done too.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Orders this thread's generic-proxy shared-memory stores (st.shared) before later reads by the
// async proxy (wgmma's descriptors, a bulk copy's source): without it those may see older bytes.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 (PTX ISA, "Data Movement and Conversion
// Instructions: stmatrix"; sm_90): ldmatrix run backwards. The warp stores four 8 x 8 matrices of
// 16-bit elements; register i of every lane holds matrix i in the mma.sync fragment layout (lane l:
// row l / 4, columns 2 (l % 4), + 1, the lower in the low half), and lanes 8 i .. 8 i + 7 give the
// shared addresses of matrix i's 8 rows in memory, 16 bytes each. With .trans the matrix is written
// transposed: memory row r holds the fragment's column r.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t saddr, const uint32_t (&frag)[4])
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(saddr), "r"(frag[0]),
                 "r"(frag[1]), "r"(frag[2]), "r"(frag[3])
                 : "memory");
}

// ---- the tiles -------------------------------------------------------------------
// Plan "swap" of scratch/backward_wgmma.c (its --check emulates every operand below, and
// scratch/verify_wgmma_backward.cu ran these descriptors, register maps, the dS handoff and the
// bulk reduce-add on an H100). A block owns BWD_BLOCK_N = 128 keys and walks the query blocks of
// BLOCK_M rows that see them, as step 14; consumer warpgroup c owns keys 64 c .. 64 c + 63.
constexpr int BWD_BLOCK_N = 128;
constexpr int BWD_CONSUMERS = 2;
constexpr int BWD_THREADS = (1 + BWD_CONSUMERS) * WARPGROUP;  // the producer warpgroup, then the consumers
constexpr int BWD_STAGES = 2;                                 // Q, dO (with LSE, D) stages; dS stages
constexpr int BWD_PRODUCER_REGS = 24, BWD_CONSUMER_REGS = 240;
constexpr int DQ_PART_COLS = 64;                        // a consumer's dQ part: 64 query rows x 64 columns
constexpr int DQ_PART = WG_M * DQ_PART_COLS;            // fp32 elements of one part (16 KB)
constexpr int BWD_ROW_PAD = 128;                        // LSE, D, dQ rows of a head in the workspace: seqlen_q rounded up
constexpr int BWD_ROW_THREADS = 256;                    // the prep and convert kernels: rows of 16-byte chunks
// Named barriers (0 is __syncthreads'): dS stored (both consumers), then per consumer c its dQ
// staging buffer full (consumer c arrives, the producer's warp 1 waits) and empty (the reverse).
constexpr int BAR_DS = 1, BAR_DQ_FULL = 2, BAR_DQ_EMPTY = BAR_DQ_FULL + BWD_CONSUMERS;
static_assert(BAR_DQ_EMPTY + BWD_CONSUMERS <= 16, "a block has 16 named barriers, ids 0-15");
static_assert(BWD_BLOCK_N == BWD_CONSUMERS * WG_M, "each consumer's S^T and dP^T are one wgmma M: 64 keys");
static_assert((BWD_PRODUCER_REGS + BWD_CONSUMERS * BWD_CONSUMER_REGS) * WARPGROUP <= REGISTERS_PER_SM && BWD_CONSUMER_REGS % 8 == 0,
              "setmaxnreg budgets (multiples of 8) of the three warpgroups fit the SM's 65,536 registers");

// Queries per step: 128 at d64, 64 at d128 (FlashAttention-3's hopper/flash_bwd_launch_template.h:
// 128 x 128 at d64; 64 x 128 at d128 with a causal mask, where 80 x 128 without one is its
// choice; 64 here at both, which keeps every product a power-of-two n). S^T and dP^T are
// m64n(BLOCK_M)k16: at d64 two 64-fp32 accumulators, at d128 two of 32 beside dK and dV's 2 x 64.
template <int D>
struct BwdTile {
    static constexpr int BLOCK_M = D == 64 ? 128 : 64;
    static_assert(D == 64 || D == 128, "head dims 64 and 128");
    static_assert(BLOCK_M % WG_K == 0 && BWD_BLOCK_N % WG_K == 0 && D % WG_K == 0,
                  "every product's k (head dim for S^T and dP^T, queries for dV and dK, keys for dQ) is whole k16 steps");
    static_assert(BWD_ROW_PAD % BLOCK_M == 0, "a head's padded rows are whole query blocks, so no block's LSE, D or dQ crosses into the next head's");
    // dQ = dS K (BLOCK_M x D) in two 64 x 64 parts, one per consumer: the rows split at d64
    // (BLOCK_M = 128), the columns at d128 (BLOCK_M = 64).
    static constexpr int DQ_ROW0_STEP = BLOCK_M == BWD_CONSUMERS * WG_M ? WG_M : 0;
    static constexpr int DQ_COL0_STEP = BLOCK_M == BWD_CONSUMERS * WG_M ? 0 : DQ_PART_COLS;
    static_assert(BLOCK_M * D == BWD_CONSUMERS * DQ_PART, "the two consumers' dQ parts cover the step's BLOCK_M x D exactly");
    // Byte offsets from the first 1024-byte boundary; every tile in 64-column slabs of 128-byte
    // swizzled rows, each slab on a 1024-byte boundary (the swizzle's anchor).
    static constexpr uint32_t KV_SLAB = BWD_BLOCK_N * SWIZZLE_BYTES, Q_SLAB = BLOCK_M * SWIZZLE_BYTES;
    static constexpr uint32_t Q_TILE = BLOCK_M * D * 2, DS_TILE = BLOCK_M * BWD_BLOCK_N * 2;
    static constexpr uint32_t K = 0;                                  // [D / 64][128][64]
    static constexpr uint32_t V = K + BWD_BLOCK_N * D * 2;            // [D / 64][128][64]
    static constexpr uint32_t Q = V + BWD_BLOCK_N * D * 2;            // [STAGES][D / 64][BLOCK_M][64]
    static constexpr uint32_t DO = Q + BWD_STAGES * Q_TILE;           // [STAGES][D / 64][BLOCK_M][64]
    static constexpr uint32_t DS = DO + BWD_STAGES * Q_TILE;          // [STAGES][2][BLOCK_M][64]: dS [query][key]
    static constexpr uint32_t DQ = DS + BWD_STAGES * DS_TILE;         // [CONSUMERS][DQ_PART] fp32, pair order
    static constexpr uint32_t LSE = DQ + BWD_CONSUMERS * DQ_PART * 4;  // [STAGES][BLOCK_M] fp32: LSE log2 e
    static constexpr uint32_t DD = LSE + BWD_STAGES * BLOCK_M * 4;    // [STAGES][BLOCK_M] fp32: D
    static constexpr uint32_t BARRIERS = DD + BWD_STAGES * BLOCK_M * 4;  // kv_full, then q_full, do_full, q_empty, do_empty [STAGES]
    static constexpr uint32_t BYTES = BARRIERS + (1 + 4 * BWD_STAGES) * 8 + SWIZZLE_ATOM;  // + room to align the start
    static_assert(Q_SLAB % SWIZZLE_ATOM == 0 && KV_SLAB % SWIZZLE_ATOM == 0 && DQ % SWIZZLE_ATOM == 0,
                  "every slab starts on a 1024-byte boundary, where TMA's 128-byte swizzle and the descriptors' is anchored");
    static_assert(BYTES <= 227 * 1024, "one block fits sm_90's 227 KB of shared memory per block");
};

// The workspace: dQ's fp32 accumulator [partials][batch * heads_q][rows_pad][D] (one partial,
// or one per split in the deterministic mode), each query block's BLOCK_M x D of it stored as
// the two consumers' 64 x 64 parts in the order their bulk reduce-add writes (pair order:
// accumulators 2q and 2q + 1 of consumer thread t at q x 256 + 2t), which the convert kernel
// undoes; then LSE log2 e and D, [batch * heads_q][rows_pad] each. rows_pad is seqlen_q rounded
// up to 128, so every block's LSE, D and dQ are whole 16-byte-aligned runs for the bulk copies,
// and the rows past seqlen_q of a block land in padding that nothing reads (their dS is 0
// anyway).
struct BwdArgs {
    fa2_bwd_params p;
    float *dq_ws;           // [partials][rows][D], tile order
    float *lse_ws, *d_ws;   // [rows]: LSE log2 e (0 in the padding), D = rowsum(dO * O)
    int rows_pad;           // rows per (batch, query head): seqlen_q rounded up to BWD_ROW_PAD
    int batch0, head_kv0;   // this launch's first batch and kv head (a grid's y and z stop at 65,535)
    int n_block0;           // this launch's first key block (deterministic; 0 otherwise)
    int deterministic;      // 1: key blocks in launches of dq_partials, block x adding into partial x
    int dq_partials;        // partials in dq_ws
};

// The first query block that sees key n0 (causal: row r sees keys <= r + shift): the main
// kernel's walk starts there, and the convert kernel's deterministic sum stops at the first
// split whose first key block starts past a row's block; one function, so they agree.
template <int BLOCK_M>
__device__ __forceinline__ int bwd_first_query_block(int n0, int shift, int causal)
{
    return causal ? max(0, n0 - shift) / BLOCK_M : 0;
}

// Causal, a key block's walk starts at the first query block that sees it, so key block 0 of a
// head has the most steps and the last the fewest. The GPU starts blocks in the order of their
// linear index, x fastest (what its scheduler does in practice; CUDA promises no order, and the
// result does not depend on it), which in the grid's own order is each head's key blocks, longest
// first, one head after another: the last head's longest block starts near the end and finishes
// alone. Longest first across heads balances the SMs: the launch's (kv head, batch) pairs in
// sections of BWD_ORDER_PAIRS, and in each section key block 0 of every pair, then key block 1,
// and so on. Eight pairs a section: SMs taking blocks greedily (tests/test_bwd_block_order.py
// --simulate) then finish within 0.2% of their mean at the causal backward shapes on 132 SMs,
// where the grid's order leaves the last 6.8% (B4 H16 N4096) and 13.9% (GQA) past it, and
// within 1.2% on an H100 PCIe's 114 (4 pairs: 3.9%); and the resident blocks hold the Q and dO
// of about 8 heads, 16 MB at N4096 d128, where the grid's order held about 4.
constexpr int BWD_ORDER_PAIRS = 8;
struct BlockPos { int nb, h_kv, b; };  // key block, kv head, batch: in this launch's grid
__device__ __forceinline__ BlockPos block_position(const int causal)
{
    if (!causal) return {(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
    const int64_t pairs = (int64_t)gridDim.y * gridDim.z, key_blocks = gridDim.x;
    const int64_t id = blockIdx.x + key_blocks * (blockIdx.y + (int64_t)gridDim.y * blockIdx.z);  // the start order
    const int64_t section = id / (key_blocks * BWD_ORDER_PAIRS), in_section = id % (key_blocks * BWD_ORDER_PAIRS);
    const int64_t section_pairs = min((int64_t)BWD_ORDER_PAIRS, pairs - section * BWD_ORDER_PAIRS);
    const int64_t pair = section * BWD_ORDER_PAIRS + in_section % section_pairs;
    return {(int)(in_section / section_pairs), (int)(pair % gridDim.y), (int)(pair / gridDim.y)};
}

// Kernel 1: D = rowsum(dO * O) and LSE log2 e per padded row (0 past seqlen_q), and the
// dQ accumulators zeroed. A row's D / 8 chunks go to D / 8 consecutive lanes (16-byte loads),
// which sum by shuffles, as step 14's.
template <typename T, int D>
__global__ void __launch_bounds__(BWD_ROW_THREADS) bwd_prep_kernel(const BwdArgs a)
{
    constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
    static_assert(32 % CHUNKS == 0 && BWD_ROW_THREADS % CHUNKS == 0, "a row's chunks sit in one warp, in every pass");
    const fa2_params &p = a.p.fwd;
    const int64_t rows_total = (int64_t)p.batch * p.heads_q * a.rows_pad, total = rows_total * CHUNKS;
    // Warp-uniform bound (lanes past the end take part with 0): every shuffle has all 32 lanes.
    for (int64_t base = (int64_t)blockIdx.x * BWD_ROW_THREADS; base < total; base += (int64_t)gridDim.x * BWD_ROW_THREADS) {
        const int64_t idx = base + threadIdx.x, row = idx / CHUNKS;
        const int chunk = (int)(idx % CHUNKS);
        const int i = (int)(row % a.rows_pad);
        const int64_t bh = row / a.rows_pad;  // b * heads_q + h
        float acc = 0.0f;
        if (idx < total) {
            if (i < p.seqlen_q) {
                const int h = (int)(bh % p.heads_q), b = (int)(bh / p.heads_q);
                const uint4 o = *reinterpret_cast<const uint4 *>((const uint16_t *)p.o + b * p.o_batch_stride + (int64_t)i * p.o_row_stride +
                                                                 h * p.o_head_stride + chunk * 8);
                const uint4 dout = *reinterpret_cast<const uint4 *>((const uint16_t *)a.p.dout + b * a.p.dout_batch_stride +
                                                                    (int64_t)i * a.p.dout_row_stride + h * a.p.dout_head_stride + chunk * 8);
                const uint32_t o_regs[4] = {o.x, o.y, o.z, o.w}, dout_regs[4] = {dout.x, dout.y, dout.z, dout.w};
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const float2 x = unpack2<T>(o_regs[r]), y = unpack2<T>(dout_regs[r]);
                    acc = fmaf(x.x, y.x, fmaf(x.y, y.y, acc));
                }
            }
            for (int split = 0; split < a.dq_partials; split++) {
                float4 *dq = reinterpret_cast<float4 *>(a.dq_ws + (split * rows_total + row) * D + chunk * 8);
                dq[0] = dq[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
#pragma unroll
        for (int lanes = CHUNKS / 2; lanes > 0; lanes /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, lanes);
        if (idx < total && chunk == 0) {
            a.d_ws[row] = acc;
            a.lse_ws[row] = i < p.seqlen_q ? p.lse[bh * p.seqlen_q + i] * LOG2E : 0.0f;
        }
    }
}

// Kernel 2: one block per (key block of 128 keys, kv head, batch), 384 threads: the producer
// warpgroup (warp 0: every TMA copy; warp 1: dQ's bulk reduce-adds) and two consumers. The header
// says what each does per step; the comments below say why each wait is where it is.
template <typename T, int D>
__global__ void __launch_bounds__(BWD_THREADS, 1)
    fa2_bwd_wgmma_kernel(const BwdArgs a, const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                         const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap do_map)
{
    using L = BwdTile<D>;
    constexpr int BLOCK_M = L::BLOCK_M, BLOCK_N = BWD_BLOCK_N;
    // dQ before dK at d128 (below: dQ's part is staged while dK runs), where it measured 2-3%
    // faster; at d64, whose S^T and dP^T take twice the registers, 3% slower
    // (docs/measurements/15_wgmma_backward.md).
    constexpr bool DQ_FIRST = D == 128;
    const fa2_bwd_params &bp = a.p;
    const fa2_params &p = a.p.fwd;
    extern __shared__ __align__(16) uint16_t smem[];
    const uint32_t smem_saddr = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t align_pad = (SWIZZLE_ATOM - smem_saddr % SWIZZLE_ATOM) % SWIZZLE_ATOM;
    const uint32_t base = smem_saddr + align_pad;
    unsigned char *const base_ptr = reinterpret_cast<unsigned char *>(smem) + align_pad;  // the same byte, generic
    const uint32_t k_saddr = base + L::K, v_saddr = base + L::V;  // [D / 64][128][64] each
    const uint32_t q_saddr = base + L::Q, do_saddr = base + L::DO;  // [STAGES][D / 64][BLOCK_M][64] each
    const uint32_t ds_saddr = base + L::DS;                         // [STAGES][2][BLOCK_M][64]
    const uint32_t dq_saddr = base + L::DQ;                         // [CONSUMERS][DQ_PART] fp32
    const uint32_t lse_saddr = base + L::LSE, dd_saddr = base + L::DD;  // [STAGES][BLOCK_M] fp32 each
    const float *lse_smem = reinterpret_cast<const float *>(base_ptr + L::LSE);  // the same, for loads
    const float *dd_smem = reinterpret_cast<const float *>(base_ptr + L::DD);
    float *dq_smem = reinterpret_cast<float *>(base_ptr + L::DQ);
    const uint32_t kv_full = base + L::BARRIERS;           // K and V have landed
    const uint32_t q_full = kv_full + 8;                   // [STAGES]: Q and LSE of the stage's step have landed
    const uint32_t do_full = q_full + BWD_STAGES * 8;      // [STAGES]: dO and D
    const uint32_t q_empty = do_full + BWD_STAGES * 8;     // [STAGES]: every consumer warp is done with Q and LSE
    const uint32_t do_empty = q_empty + BWD_STAGES * 8;    // [STAGES]: ... with dO and D

    const BlockPos block = block_position(p.causal);  // causal: longest first across heads
    const int n0 = (a.n_block0 + block.nb) * BLOCK_N, h_kv = a.head_kv0 + block.h_kv, b = a.batch0 + block.b;
    const int group = p.heads_q / p.heads_kv;   // GQA: the query heads of this kv head
    const int shift = p.seqlen_k - p.seqlen_q;  // causal: row i sees keys j <= i + shift
    const int64_t rows_total = (int64_t)p.batch * p.heads_q * a.rows_pad;
    float *dq_ws = a.dq_ws + (a.deterministic ? block.nb * rows_total * D : 0);  // this split's partial, or the one sum

    // The walk, as step 14's: step s is query rows m0 .. m0 + BLOCK_M - 1 of query head h; the
    // producer's two warps and the consumers each walk it, carrying the position.
    const int first_qb = bwd_first_query_block<BLOCK_M>(n0, shift, p.causal);
    const int per_head = max(0, (p.seqlen_q + BLOCK_M - 1) / BLOCK_M - first_qb);
    const int steps = group * per_head;
    struct WalkPos { int h, m0; };
    const int m_first = first_qb * BLOCK_M, m_end = (first_qb + per_head) * BLOCK_M;
    auto walk_next = [&](WalkPos w) { return w.m0 + BLOCK_M < m_end ? WalkPos{w.h, w.m0 + BLOCK_M} : WalkPos{w.h + 1, m_first}; };
    // Row m0 of head h in the workspace's padded rows (LSE, D; times D for dQ).
    auto ws_row = [&](WalkPos w) { return ((int64_t)b * p.heads_q + w.h) * a.rows_pad + w.m0; };

    if (threadIdx.x == 0) {
        mbarrier_init(kv_full, 1);  // one arrival, the expect_tx's; the bytes do the rest
        for (int s = 0; s < BWD_STAGES; s++) {
            mbarrier_init(q_full + s * 8, 1);
            mbarrier_init(do_full + s * 8, 1);
            mbarrier_init(q_empty + s * 8, BWD_CONSUMERS * WARPGROUP);  // one arrival per consumer thread
            mbarrier_init(do_empty + s * 8, BWD_CONSUMERS * WARPGROUP);
        }
        fence_barrier_init();
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them

    if (threadIdx.x < WARPGROUP) {
        setmaxnreg_dec<BWD_PRODUCER_REGS>();
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (warp == 0 && lane == 0 && steps > 0) {
            // K and V once (keys past seqlen_k land as zeros), then Q + LSE and dO + D of every
            // step, each into stage s % 2 once the consumers have released what step s - 2 left
            // there: the stage's empty phase s / 2 - 1. A block with no step loads nothing, so
            // that no copy is in flight when it exits.
            mbarrier_arrive_expect_tx(kv_full, 2 * BLOCK_N * D * 2);
            tma_load_tile<BLOCK_N, D>(k_saddr, &k_map, kv_full, n0, h_kv, b);
            tma_load_tile<BLOCK_N, D>(v_saddr, &v_map, kv_full, n0, h_kv, b);
            WalkPos w = {h_kv * group, m_first};
            for (int s = 0; s < steps; s++, w = walk_next(w)) {
                const int stage = s % BWD_STAGES;
                const int64_t row = ws_row(w);
                if (s >= BWD_STAGES) mbarrier_wait(q_empty + stage * 8, (s / BWD_STAGES - 1) % 2);
                mbarrier_arrive_expect_tx(q_full + stage * 8, L::Q_TILE + BLOCK_M * 4);  // rows past seqlen_q: zeros, counted
                tma_load_tile<BLOCK_M, D>(q_saddr + stage * L::Q_TILE, &q_map, q_full + stage * 8, w.m0, w.h, b);
                bulk_load(lse_saddr + stage * BLOCK_M * 4, a.lse_ws + row, BLOCK_M * 4, q_full + stage * 8);
                if (s >= BWD_STAGES) mbarrier_wait(do_empty + stage * 8, (s / BWD_STAGES - 1) % 2);
                mbarrier_arrive_expect_tx(do_full + stage * 8, L::Q_TILE + BLOCK_M * 4);
                tma_load_tile<BLOCK_M, D>(do_saddr + stage * L::Q_TILE, &do_map, do_full + stage * 8, w.m0, w.h, b);
                bulk_load(dd_saddr + stage * BLOCK_M * 4, a.d_ws + row, BLOCK_M * 4, do_full + stage * 8);
            }
        } else if (warp == 1) {
            // dQ: per step and consumer, wait for its staged part, reduce-add it into the
            // workspace (16 KB, one bulk instruction), and once the copy engine has read it,
            // hand the buffer back. The last hand-back is left out: nobody waits for it, and a
            // named barrier must not be left half-arrived at exit. The block exits only once
            // every add has reached global memory, where the convert kernel reads it.
            WalkPos w = {h_kv * group, m_first};
            for (int s = 0; s < steps; s++, w = walk_next(w)) {
                float *dq_tile = dq_ws + ws_row(w) * D;  // the step's BLOCK_M x D, as two parts
#pragma unroll
                for (int c = 0; c < BWD_CONSUMERS; c++) {
                    named_barrier_sync(BAR_DQ_FULL + c, WARPGROUP + 32);
                    if (lane == 0) {
                        bulk_reduce_add_f32(dq_tile + c * DQ_PART, dq_saddr + c * DQ_PART * 4, DQ_PART * 4);
                        bulk_commit();
                        bulk_wait_read_all();
                    }
                    __syncwarp();
                    if (s + 1 < steps) named_barrier_arrive(BAR_DQ_EMPTY + c, WARPGROUP + 32);
                }
            }
            if (lane == 0) bulk_wait_all();
        }
        return;
    }
    setmaxnreg_inc<BWD_CONSUMER_REGS>();

    // ---- a consumer: keys 64 c .. 64 c + 63 of the block ----
    const int c = threadIdx.x / WARPGROUP - 1, t = threadIdx.x % WARPGROUP;
    const int warp = t / 32, lane = t % 32, g = lane / 4, tq = lane % 4;  // wgmma accumulator: rows 16 warp + g (+ 8), cols 2 tq (+ 1) of each n8
    const float scale_log2 = p.softmax_scale * LOG2E;
    // The descriptors of k-step 0 (scratch/backward_wgmma.c prints them; each k-step is an offset):
    //  S^T = K_c Q^T, dP^T = V_c dO^T: A = K, V K-major from the consumer's 64 keys (row 64 c), B =
    //    Q, dO K-major; k-step kk is 32 bytes further along the 128-byte rows, the next slab after 4.
    //  dV += P^T dO, dK += dS^T Q: B = dO, Q MN-major (n = head dim along the slab rows, LBO one
    //    slab; k = queries, 8-row groups SBO 1024 apart); k-step j is 16 rows (2 KB) further.
    //  dQ = dS K: A = dS K-major from row DQ_ROW0_STEP c (d64: the consumer's 64 queries); B = K
    //    MN-major from column DQ_COL0_STEP c (d128: the consumer's 64 columns, slab c); k-step kk
    //    is 16 keys: A 32 bytes further (next slab after 4), B 16 rows further.
    const uint64_t k_desc = smem_desc(k_saddr + c * WG_M * SWIZZLE_BYTES, 16, SWIZZLE_ATOM);
    const uint64_t v_desc = smem_desc(v_saddr + c * WG_M * SWIZZLE_BYTES, 16, SWIZZLE_ATOM);
    const uint64_t q_desc = smem_desc(q_saddr, 16, SWIZZLE_ATOM), do_desc = smem_desc(do_saddr, 16, SWIZZLE_ATOM);
    const uint64_t q_mn_desc = smem_desc(q_saddr, L::Q_SLAB, SWIZZLE_ATOM), do_mn_desc = smem_desc(do_saddr, L::Q_SLAB, SWIZZLE_ATOM);
    const uint64_t ds_desc = smem_desc(ds_saddr + c * L::DQ_ROW0_STEP * SWIZZLE_BYTES, 16, SWIZZLE_ATOM);
    const uint64_t k_mn_desc = smem_desc(k_saddr + c * L::DQ_COL0_STEP / SLAB_COLS * L::KV_SLAB, L::KV_SLAB, SWIZZLE_ATOM);

    float dv_acc[D / MMA_N][4], dk_acc[D / MMA_N][4];  // [d-tile][c0..c3]: keys 16 warp + g (+ 8), cols 8 dt + 2 tq (+ 1)
#pragma unroll
    for (int dt = 0; dt < D / MMA_N; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++) dv_acc[dt][e] = dk_acc[dt][e] = 0.0f;
    // This thread's two keys (accumulator rows g and g + 8 of its warp), in the block.
    const int key_lo = n0 + c * WG_M + warp * MMA_M + g, key_hi = key_lo + 8;
    // The dS row this lane addresses for stmatrix (k-step 0 of stage 0), in slab c of the dS tile
    // (keys 64 c ..), at the slab swizzle (TMA's layout, which dQ's K-major descriptor reads).
    // Register i of ds_frag[j] holds keys 16 warp + 8 (i % 2) .. + 7 against queries 16 j +
    // 8 (i / 2) .. + 7 (the A fragment order), so lane l gives matrix i = l / 8, row r = l % 8:
    // query 8 (i / 2) + r, keys from 16-byte chunk 2 warp + i % 2. The 8 rows of a matrix are 8
    // consecutive queries, whose swizzle sends that chunk to 8 different columns of 16 bytes: the
    // 32 banks once, no conflict.
    const int st_query = 8 * (lane / 16) + lane % 8, st_chunk = 2 * warp + lane / 8 % 2;
    const uint32_t ds_row = ds_saddr + c * BLOCK_M * SWIZZLE_BYTES + st_query * SWIZZLE_BYTES + ((st_chunk ^ st_query % 8) * 16);

    // One step, instantiated twice (as step 14's): steps that need no mask (every query in
    // seqlen_q, every key in seqlen_k and, causal, seen by the step's first query) run a copy
    // with no masking code.
    auto query_step = [&](const WalkPos w, const int s, auto masked) {
        constexpr bool MASKED = decltype(masked)::value;
        const int stage = s % BWD_STAGES, parity = s / BWD_STAGES % 2, m0 = w.m0;
        const uint32_t q_off = stage * L::Q_TILE, ds_off = stage * L::DS_TILE;
        float s_acc[BLOCK_M / MMA_N][4];   // S^T: [query n-tile][c0..c3]: keys g (+ 8) of the warp's 16, queries 8 nt + 2 tq (+ 1)
        float dp_acc[BLOCK_M / MMA_N][4];  // dP^T, as s_acc

        // S^T = K_c Q^T as soon as Q has landed, then dP^T = V_c dO^T as soon as dO has: both
        // in flight while the first is waited for.
        mbarrier_wait(q_full + stage * 8, parity);
        fence_registers(s_acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / WG_K; kk++)
            wgmma_ss<T, BLOCK_M, 0>(s_acc, desc_advance(k_desc, kk / 4 * L::KV_SLAB + kk % 4 * 32),
                                    desc_advance(q_desc, q_off + kk / 4 * L::Q_SLAB + kk % 4 * 32), kk > 0);
        wgmma_commit();
        mbarrier_wait(do_full + stage * 8, parity);
        fence_registers(dp_acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / WG_K; kk++)
            wgmma_ss<T, BLOCK_M, 0>(dp_acc, desc_advance(v_desc, kk / 4 * L::KV_SLAB + kk % 4 * 32),
                                    desc_advance(do_desc, q_off + kk / 4 * L::Q_SLAB + kk % 4 * 32), kk > 0);
        wgmma_commit();

        // The masks. The queries a key sees are a suffix of the step's (causal: from key - shift
        // on) cut at seqlen_q, so two numbers per key say which, counted from this thread's
        // first query column 2 tq: a pair (key, column 8 nt + e % 2) is visible iff lo <= col < hi.
        // A key past seqlen_k sees none (lo = hi).
        // (The unmasked copy never asks, and the compiler drops them there.)
        int vis_lo[2], vis_hi[2];  // [key g, key g + 8]
        const int keys[2] = {key_lo, key_hi};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            vis_hi[r] = keys[r] < p.seqlen_k ? p.seqlen_q - m0 - 2 * tq : INT_MIN;
            vis_lo[r] = p.causal ? keys[r] - shift - m0 - 2 * tq : INT_MIN;
        }
        auto visible = [&](int nt, int e) {
            const int col = nt * MMA_N + (e & 1);
            return col >= vis_lo[e / 2] && col < vis_hi[e / 2];
        };

        // P^T = exp2(S^T scale log2 e - LSE log2 e), in place, LSE per column (per query). A
        // hidden pair is selected to 0, never computed from -inf: a row that sees no key has
        // LSE = -inf, and exp2(+inf) or -inf - -inf would be inf or NaN.
        wgmma_wait<1>();
        fence_registers(s_acc);
        const float *lse_s = lse_smem + stage * BLOCK_M + 2 * tq;
#pragma unroll
        for (int nt = 0; nt < BLOCK_M / MMA_N; nt++) {
            const float2 lse = *reinterpret_cast<const float2 *>(lse_s + nt * MMA_N);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float prob = exp2_approx(fmaf(s_acc[nt][e], scale_log2, -(e & 1 ? lse.y : lse.x)));
                s_acc[nt][e] = !MASKED || visible(nt, e) ? prob : 0.0f;
            }
        }
        // dS^T = P^T (dP^T - D), in place in dp_acc, D per column; a hidden pair (P == 0: see
        // step 14, which selects on P for the same reason) is 0, so a NaN in V at a key a query
        // does not see stays out of its dQ.
        wgmma_wait<0>();
        fence_registers(dp_acc);
        const float *dd_s = dd_smem + stage * BLOCK_M + 2 * tq;
#pragma unroll
        for (int nt = 0; nt < BLOCK_M / MMA_N; nt++) {
            const float2 dd = *reinterpret_cast<const float2 *>(dd_s + nt * MMA_N);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float ds = s_acc[nt][e] * (dp_acc[nt][e] - (e & 1 ? dd.y : dd.x));
                dp_acc[nt][e] = !MASKED || s_acc[nt][e] != 0.0f ? ds : 0.0f;
            }
        }

        // P^T and dS^T as register A of dV and dK: the accumulators of query n-tiles 2j and 2j + 1
        // are the A fragment of k-step j (queries 16 j ..), the reuse step 09 makes of S for P V.
        uint32_t p_frag[BLOCK_M / WG_K][4], ds_frag[BLOCK_M / WG_K][4];  // [query k-step j][a0..a3]
#pragma unroll
        for (int j = 0; j < BLOCK_M / WG_K; j++) {
            p_frag[j][0] = pack2<T>(s_acc[2 * j][0], s_acc[2 * j][1]);
            p_frag[j][1] = pack2<T>(s_acc[2 * j][2], s_acc[2 * j][3]);
            p_frag[j][2] = pack2<T>(s_acc[2 * j + 1][0], s_acc[2 * j + 1][1]);
            p_frag[j][3] = pack2<T>(s_acc[2 * j + 1][2], s_acc[2 * j + 1][3]);
            ds_frag[j][0] = pack2<T>(dp_acc[2 * j][0], dp_acc[2 * j][1]);
            ds_frag[j][1] = pack2<T>(dp_acc[2 * j][2], dp_acc[2 * j][3]);
            ds_frag[j][2] = pack2<T>(dp_acc[2 * j + 1][0], dp_acc[2 * j + 1][1]);
            ds_frag[j][3] = pack2<T>(dp_acc[2 * j + 1][2], dp_acc[2 * j + 1][3]);
        }
        // dV += P^T dO (BLOCK_M / 16 k-steps), then the dS stores while it runs. The stores read
        // ds_frag, dK's register A: the PTX ISA makes any access to a wgmma's A registers before a
        // wait_group covering it undefined, so they come before dK is issued (FlashAttention-3 also
        // stores dS before its dV and dK products), and a wgmma.fence orders those reads before
        // dK's. dK goes here, before the barrier, unless dQ goes first (DQ_FIRST, below).
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < BLOCK_M / WG_K; j++) wgmma_rs<T, D>(dv_acc, p_frag[j], desc_advance(do_mn_desc, q_off + j * WG_K * SWIZZLE_BYTES));

        // dS [query][key] into this stage's dS tile, one stmatrix .trans per k-step j: ds_frag[j]
        // is four 8 x 8 fragments of dS^T (keys as rows), and the transposing store writes each as
        // 8 query rows of 8 keys, 16 contiguous bytes (ds_row says where this lane's row goes).
#pragma unroll
        for (int j = 0; j < BLOCK_M / WG_K; j++) stmatrix_x4_trans(ds_row + ds_off + j * WG_K * SWIZZLE_BYTES, ds_frag[j]);
        auto issue_dk = [&] {
#pragma unroll
            for (int j = 0; j < BLOCK_M / WG_K; j++) wgmma_rs<T, D>(dk_acc, ds_frag[j], desc_advance(q_mn_desc, q_off + j * WG_K * SWIZZLE_BYTES));
        };
        if constexpr (!DQ_FIRST) {
            wgmma_fence();
            issue_dk();
        }
        wgmma_commit();

        // Both consumers' dS stored, and visible to the async proxy, before either reads the
        // whole tile. Two dS stages: a consumer reaches this barrier of step s only after its dQ of
        // step s - 1 completed, so the stage written at step s + 1 is no longer read (FA3's
        // reasoning for two, mainloop_bwd_sm90_tma_gmma_ws.hpp).
        fence_proxy_async();
        named_barrier_sync(BAR_DS, BWD_CONSUMERS * WARPGROUP);

        // dQ part = dS K: 64 x 64, over the block's 128 keys. DQ_FIRST: dK after it, in a commit
        // group of its own, so that dQ completes first and its part is staged while the tensor
        // cores run dK, where otherwise they idle through the staging.
        float dq_acc[DQ_PART_COLS / MMA_N][4];  // [d-tile][c0..c3] of the consumer's part
        fence_registers(dq_acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / WG_K; kk++)
            wgmma_ss<T, DQ_PART_COLS, 1>(dq_acc, desc_advance(ds_desc, ds_off + kk / 4 * L::Q_SLAB + kk % 4 * 32),
                                         desc_advance(k_mn_desc, kk * WG_K * SWIZZLE_BYTES), kk > 0);
        wgmma_commit();
        if constexpr (DQ_FIRST) {
            issue_dk();
            wgmma_commit();
        }
        // Every read of this stage's Q, dO, LSE and D is done (this thread's) once the products
        // reading them completed: release them. Each thread arrives, not one per warp: LSE and D
        // were read by every lane with ordinary loads, and an mbarrier arrive releases only the
        // arriving thread's own accesses (the PTX memory model), so one lane's arrive would let the
        // copy engine overwrite what another lane has not been ordered to finish reading.
        auto release_q = [&] {
            fence_registers(dk_acc);
            fence_registers(ds_frag);  // the registers wgmma read stay theirs until it completed
            mbarrier_arrive(q_empty + stage * 8);
        };
        wgmma_wait<DQ_FIRST ? 1 : 0>();  // dV and dQ complete, and dK unless it runs on
        fence_registers(dv_acc);
        fence_registers(dq_acc);
        fence_registers(p_frag);
        if constexpr (!DQ_FIRST) release_q();
        mbarrier_arrive(do_empty + stage * 8);
        // The part into the staging buffer in pair order (accumulators 2q and 2q + 1 of thread t,
        // two neighbouring columns of one row, as one 8-byte store at q x 256 + 2t: a warp's 32
        // stores per q are 256 contiguous bytes, two wavefronts with no bank conflict, and half
        // the store instructions of one 4-byte store per accumulator) once the producer's warp 1
        // has read the previous step's, then hand it over.
        if (s > 0) named_barrier_sync(BAR_DQ_EMPTY + c, WARPGROUP + 32);
        float2 *dq_part = reinterpret_cast<float2 *>(dq_smem + c * DQ_PART) + t;  // [32 pairs][WARPGROUP threads]
#pragma unroll
        for (int dt = 0; dt < DQ_PART_COLS / MMA_N; dt++)
#pragma unroll
            for (int h = 0; h < 2; h++) dq_part[(dt * 2 + h) * WARPGROUP] = make_float2(dq_acc[dt][2 * h], dq_acc[dt][2 * h + 1]);
        fence_proxy_async();
        named_barrier_arrive(BAR_DQ_FULL + c, WARPGROUP + 32);
        if constexpr (DQ_FIRST) {
            wgmma_wait<0>();  // dK complete
            release_q();
        }
    };

    if (steps > 0) mbarrier_wait(kv_full, 0);
    WalkPos pos = {h_kv * group, m_first};
    for (int s = 0; s < steps; s++, pos = walk_next(pos)) {
        const bool masked = pos.m0 + BLOCK_M > p.seqlen_q || n0 + BLOCK_N > p.seqlen_k || (p.causal && n0 + BLOCK_N - 1 > pos.m0 + shift);
        if (masked) query_step(pos, s, std::true_type{});
        else query_step(pos, s, std::false_type{});
    }

    // dK (times the softmax scale, which dS left out) and dV, in the dtype, at their strides,
    // straight from the accumulators: a quad's four 4-byte stores fill 16 bytes of a row.
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = r ? key_hi : key_lo;
        if (key >= p.seqlen_k) continue;
        uint16_t *dk = (uint16_t *)bp.dk + b * bp.dk_batch_stride + (int64_t)key * bp.dk_row_stride + h_kv * bp.dk_head_stride + 2 * tq;
        uint16_t *dv = (uint16_t *)bp.dv + b * bp.dv_batch_stride + (int64_t)key * bp.dv_row_stride + h_kv * bp.dv_head_stride + 2 * tq;
#pragma unroll
        for (int dt = 0; dt < D / MMA_N; dt++) {
            *reinterpret_cast<uint32_t *>(dk + dt * MMA_N) =
                pack2<T>(dk_acc[dt][2 * r] * p.softmax_scale, dk_acc[dt][2 * r + 1] * p.softmax_scale);
            *reinterpret_cast<uint32_t *>(dv + dt * MMA_N) = pack2<T>(dv_acc[dt][2 * r], dv_acc[dt][2 * r + 1]);
        }
    }
}

// Kernel 3: dQ = softmax_scale x the accumulated dS K, in the dtype at dq's strides, 8
// elements (one 16-byte store) per thread, read back from the tile order the reduce-adds wrote:
// columns 8 nt .. 8 nt + 7 of a part row are pair 2 nt + hi (hi: the row is the fragment's
// second 8) of the 4 threads of one quad, side by side: 8 consecutive floats, two float4.
// Deterministic: the sum of the splits' partials that saw the row, in split order.
template <typename T, int D>
__global__ void __launch_bounds__(BWD_ROW_THREADS) bwd_convert_kernel(const BwdArgs a)
{
    using L = BwdTile<D>;
    constexpr int CHUNKS = D / 8, BLOCK_M = L::BLOCK_M;
    const fa2_bwd_params &bp = a.p;
    const fa2_params &p = a.p.fwd;
    const int64_t rows_total = (int64_t)p.batch * p.heads_q * a.rows_pad, total = (int64_t)p.batch * p.heads_q * p.seqlen_q * CHUNKS;
    const int shift = p.seqlen_k - p.seqlen_q;
    for (int64_t idx = (int64_t)blockIdx.x * BWD_ROW_THREADS + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * BWD_ROW_THREADS) {
        const int64_t row = idx / CHUNKS;  // in LSE order
        const int col = (int)(idx % CHUNKS) * 8;
        const int i = (int)(row % p.seqlen_q);
        const int64_t bh = row / p.seqlen_q;
        const int h = (int)(bh % p.heads_q), b = (int)(bh / p.heads_q);
        // The part (consumer c) and its row and column; then the first of the four threads (a
        // quad) whose pairs hold the 8 columns, and the pair: the quad's pairs lie side by side,
        // the 8 columns in order.
        const int r = i % BLOCK_M;
        const int part = L::DQ_ROW0_STEP ? r / WG_M : col / DQ_PART_COLS;
        const int part_row = r % WG_M, part_col = col % DQ_PART_COLS;
        const int thread = part_row / MMA_M * 32 + part_row % 8 * 4, pair = part_col / MMA_N * 2 + part_row % MMA_M / 8;
        const int64_t at = (bh * a.rows_pad + i - r) * D + part * DQ_PART + pair * 2 * WARPGROUP + 2 * thread;
        // The partials whose key blocks' walks included row i's block: the one sum, or,
        // deterministic, the splits in order up to the first whose first key block (split x
        // starts at key block x) starts past it (causal: no later key block of it sees the row).
        float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;  // columns col.. col + 3, col + 4.. col + 7
        for (int split = 0; split < a.dq_partials && bwd_first_query_block<BLOCK_M>(split * BWD_BLOCK_N, shift, p.causal) <= i / BLOCK_M; split++) {
            const float *part_ws = a.dq_ws + split * rows_total * D + at;
            const float4 x = *reinterpret_cast<const float4 *>(part_ws), y = *reinterpret_cast<const float4 *>(part_ws + 4);
            lo.x += x.x, lo.y += x.y, lo.z += x.z, lo.w += x.w;
            hi.x += y.x, hi.y += y.y, hi.z += y.z, hi.w += y.w;
        }
        const float s = p.softmax_scale;
        const uint4 out = {pack2<T>(lo.x * s, lo.y * s), pack2<T>(lo.z * s, lo.w * s), pack2<T>(hi.x * s, hi.y * s),
                           pack2<T>(hi.z * s, hi.w * s)};
        *reinterpret_cast<uint4 *>((uint16_t *)bp.dq + b * bp.dq_batch_stride + (int64_t)i * bp.dq_row_stride + h * bp.dq_head_stride + col) = out;
    }
}

// ---- the backward's launcher and ABI --------------------------------------------

// FA2_DETERMINISTIC, read at each call, as step 14: 1 when it is "1"; 0 when it is unset, empty
// or "0"; -1, with one line in why, for anything else.
static int deterministic_mode(char *why, size_t why_len)
{
    const char *env = getenv("FA2_DETERMINISTIC");
    if (!env || !*env || !strcmp(env, "0")) return 0;
    if (!strcmp(env, "1")) return 1;
    if (why) snprintf(why, why_len, "FA2_DETERMINISTIC '%.32s' (allowed: 0, 1 or unset)", env);
    return -1;
}

static int bwd_rows_pad(const fa2_params *p) { return (p->seqlen_q + BWD_ROW_PAD - 1) / BWD_ROW_PAD * BWD_ROW_PAD; }
static int64_t bwd_padded_rows(const fa2_params *p) { return (int64_t)p->batch * p->heads_q * bwd_rows_pad(p); }
static int bwd_key_blocks(const fa2_params *p) { return (p->seqlen_k + BWD_BLOCK_N - 1) / BWD_BLOCK_N; }
// The deterministic mode's splits: key blocks per launch, enough that batch x kv heads x splits
// makes about one wave of this kernel's one block per SM (132 on an H100 SXM), at most
// MAX_DQ_SPLITS (the workspace holds that many fp32 copies of dQ) and at most the key blocks.
constexpr int DQ_SPLIT_BLOCKS = 132, MAX_DQ_SPLITS = 16;
static int bwd_dq_splits(const fa2_params *p, int deterministic)
{
    if (deterministic != 1) return 1;
    const int64_t pairs = (int64_t)p->batch * p->heads_kv, want = (DQ_SPLIT_BLOCKS + pairs - 1) / pairs;
    return (int)std::min<int64_t>(std::min<int64_t>(want, MAX_DQ_SPLITS), bwd_key_blocks(p));
}

template <typename T, int D>
static int launch_backward(const fa2_bwd_params *bp, int deterministic, cudaStream_t stream)
{
    using L = BwdTile<D>;
    constexpr int smem_bytes = L::BYTES;
    const fa2_params *p = &bp->fwd;
    fa2_limits l;
    char why[256];
    if (fa2_limits_get(&l, why, sizeof why) != FA2_LIMITS_OK) return fa2_fail("fa2_limits_get", why);
    CUtensorMap maps[4];
    const int results[4] = {
        make_tensor_map(&maps[0], p->q, p->dtype, D, p->seqlen_q, p->heads_q, p->batch, p->q_row_stride, p->q_head_stride, p->q_batch_stride, L::BLOCK_M),
        make_tensor_map(&maps[1], p->k, p->dtype, D, p->seqlen_k, p->heads_kv, p->batch, p->k_row_stride, p->k_head_stride, p->k_batch_stride, BWD_BLOCK_N),
        make_tensor_map(&maps[2], p->v, p->dtype, D, p->seqlen_k, p->heads_kv, p->batch, p->v_row_stride, p->v_head_stride, p->v_batch_stride, BWD_BLOCK_N),
        make_tensor_map(&maps[3], bp->dout, p->dtype, D, p->seqlen_q, p->heads_q, p->batch, bp->dout_row_stride, bp->dout_head_stride,
                        bp->dout_batch_stride, L::BLOCK_M)};
    static const char *const tensors[4] = {"q", "k", "v", "dout"};
    for (int i = 0; i < 4; i++)
        if (results[i] != 0) {
            char reason[96];
            if (results[i] < 0) snprintf(reason, sizeof reason, "the driver has no tensor-map encoder (older than CUDA 12)");
            else snprintf(reason, sizeof reason, "CUresult %d for the tensor map of %s", results[i], tensors[i]);
            return fa2_fail("cuTensorMapEncodeTiled", reason);
        }
    BwdArgs a;
    a.p = *bp;
    a.rows_pad = bwd_rows_pad(p);
    a.deterministic = deterministic;
    a.dq_partials = bwd_dq_splits(p, deterministic);
    a.dq_ws = (float *)p->workspace;
    a.lse_ws = a.dq_ws + a.dq_partials * bwd_padded_rows(p) * D;
    a.d_ws = a.lse_ws + bwd_padded_rows(p);
    a.batch0 = a.head_kv0 = a.n_block0 = 0;
    // The row kernels stride over the rows' 16-byte chunks: at most one wave of resident
    // threads, so a long problem reuses them rather than queueing blocks.
    const int64_t wave = (int64_t)l.sm_count * (l.threads_per_sm / BWD_ROW_THREADS);
    const int prep_grid = (int)std::min((bwd_padded_rows(p) * (D / 8) + BWD_ROW_THREADS - 1) / BWD_ROW_THREADS, wave);
    bwd_prep_kernel<T, D><<<prep_grid, BWD_ROW_THREADS, 0, stream>>>(a);
    FA2_CUDA_TRY(cudaGetLastError());
    FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_bwd_wgmma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    // Key blocks in x (deterministic: dq_partials of them per launch, in order), kv heads and
    // batch in y and z, one launch per 65,535 x 65,535 of them; the kernel adds n_block0,
    // head_kv0 and batch0 to its block index.
    const int n_blocks = bwd_key_blocks(p), per_launch = deterministic ? a.dq_partials : n_blocks;
    for (int nb0 = 0; nb0 < n_blocks; nb0 += per_launch)
        for (int b0 = 0; b0 < p->batch; b0 += FA2_GRID_YZ_MAX)
            for (int h0 = 0; h0 < p->heads_kv; h0 += FA2_GRID_YZ_MAX) {
                a.n_block0 = nb0, a.batch0 = b0, a.head_kv0 = h0;
                dim3 grid(std::min(per_launch, n_blocks - nb0), std::min(FA2_GRID_YZ_MAX, p->heads_kv - h0), std::min(FA2_GRID_YZ_MAX, p->batch - b0));
                fa2_bwd_wgmma_kernel<T, D><<<grid, BWD_THREADS, smem_bytes, stream>>>(a, maps[0], maps[1], maps[2], maps[3]);
                FA2_CUDA_TRY(cudaGetLastError());
            }
    const int convert_grid = (int)std::min(((int64_t)p->batch * p->heads_q * p->seqlen_q * (D / 8) + BWD_ROW_THREADS - 1) / BWD_ROW_THREADS, wave);
    bwd_convert_kernel<T, D><<<convert_grid, BWD_ROW_THREADS, 0, stream>>>(a);
    FA2_CUDA_TRY(cudaGetLastError());
    return FA2_OK;
}

// dQ's fp32 accumulator (one per split in the deterministic mode), LSE log2 e and D, per padded
// query row; the size overflowing size_t gives SIZE_MAX, which no workspace reaches.
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *p)
{
    if (!fa2_validate_params(&p->fwd, NULL, 0)) return 0;
    const uint64_t floats_per_row = (uint64_t)bwd_dq_splits(&p->fwd, deterministic_mode(NULL, 0)) * p->fwd.head_dim + 2;
    uint64_t bytes;
    if (__builtin_mul_overflow(floats_per_row, (uint64_t)bwd_padded_rows(&p->fwd) * sizeof(float), &bytes) || bytes > SIZE_MAX) return SIZE_MAX;
    return (size_t)bytes;
}

extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len)
{
    if (!fa2_validate_bwd_params(p, why, why_len)) return 0;
    // The forward's refusals (head dims 64 and 128; 16-byte aligned bases and strides of q, k, v
    // and o, under 2^40 bytes, for their tensor maps; a GPU of compute capability 9.0), then the
    // backward's own tensors: dO through a tensor map too, dQ by 16-byte stores.
    if (!fa2_supports(&p->fwd, why, why_len)) return 0;
    if (!fa2_validate_bwd_alignment(p, 16, "TMA tensor maps and 16-byte stores", why, why_len)) return 0;
    const int64_t strides[] = {p->dout_batch_stride, p->dout_row_stride, p->dout_head_stride};
    for (size_t i = 0; i < sizeof strides / sizeof *strides; i++)
        if (strides[i] >= (INT64_C(1) << 39)) {
            if (why) snprintf(why, why_len, "dout stride %lld (allowed: under 2^39 elements, 2^40 bytes, for TMA tensor maps)", (long long)strides[i]);
            return 0;
        }
    if (deterministic_mode(why, why_len) < 0) return 0;
    char what[48];
    snprintf(what, sizeof what, "the backward at head_dim %d", p->fwd.head_dim);
    if (!fa2_limits_check_smem(p->fwd.head_dim == 64 ? BwdTile<64>::BYTES : BwdTile<128>::BYTES, what, why, why_len)) return 0;
    return fa2_validate_bwd_workspace(p, fa2_backward_workspace_size(p), why, why_len);
}

extern "C" int fa2_backward(const fa2_bwd_params *p, void *stream)
{
    if (!fa2_backward_supports(p, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    const int deterministic = deterministic_mode(NULL, 0);
    cudaStream_t s = (cudaStream_t)stream;
    if (p->fwd.dtype == FA2_FP16)
        return p->fwd.head_dim == 64 ? launch_backward<__half, 64>(p, deterministic, s) : launch_backward<__half, 128>(p, deterministic, s);
    return p->fwd.head_dim == 64 ? launch_backward<__nv_bfloat16, 64>(p, deterministic, s)
                                 : launch_backward<__nv_bfloat16, 128>(p, deterministic, s);
}
