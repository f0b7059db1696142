/* Step 11 - intra-warpgroup overlap: the softmax of S_n under P_{n-1} V_{n-1}.
 *
 * One change from step 10: the order of a consumer's key loop
 * (docs/11_intra_warpgroup_overlap.md). The rest is step 10's kernel: the producer
 * warpgroup and setmaxnreg, the stages, the consumers' turns at the tensor cores, the
 * online softmax with its lazy rescale, the masked and unmasked loop bodies, causal
 * blocks longest first, the staged epilogue. In step 10 a consumer's key tile is a
 * chain: S_n = Q K_n^T, wait, softmax, P_n V_n, wait. While it is in its softmax the
 * tensor cores can run only the other consumer's product, and they idle whenever
 * that product is the shorter of the two, or the other consumer is in its softmax too.
 *
 * 1. wgmma runs behind the warpgroup that issued it. wgmma.commit_group closes the
 *    wgmma this warp issued since the last commit into a group; wgmma.wait_group N
 *    returns once at most the N most recent groups are pending, every older one
 *    complete (PTX ISA, wgmma.commit_group and wgmma.wait_group). So in one turn a
 *    consumer issues S_n, then O += P_{n-1} V_{n-1}, as two groups in that order,
 *    waits with wait_group 1 for S_n alone, and computes the softmax of S_n while
 *    P_{n-1} V_{n-1} may still run; wait_group 0 then ends that product before S_n
 *    becomes P_n. The loop is skewed by one tile: a prologue issues S_0 alone and an
 *    epilogue P_last V_last alone, so a consumer takes n_blocks + 1 turns where step
 *    10's took 2 n_blocks.
 * 2. O may be multiplied by the softmax's correction only when no product writes it:
 *    the rescale moves out of the softmax, after wait_group 0.
 * 3. A consumer now reads two key tiles at once: K_n in S_n, V_{n-1} in P_{n-1} V_{n-1}.
 *    With step 10's one full and one empty barrier per stage for K and V together, both
 *    stages would be held at once: tile n + 1's copy could start only when every
 *    consumer had finished P_{n-1} V_{n-1}, just before S_{n+1} needs it, and no copy
 *    would run ahead. So K and V get a full and an empty barrier each, as
 *    FlashAttention-3's pipeline_k and pipeline_v (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp):
 *    K_n's stage is released as soon as S_n is done, V_{n-1}'s once its product is,
 *    and each refill again runs at least a turn ahead of the product that reads it.
 * 4. S_n (BLOCK_N / 2 = 64 fp32 per thread) and P_{n-1} (BLOCK_N / 4 = 32 registers of
 *    two 16-bit values) are live at once, next to O (D / 2): 160 at d128 before the
 *    softmax's temporaries, within the 240 that setmaxnreg gives each of two consumers,
 *    and 128 at d64 within the 160 of three. The budgets are step 10's, and now needed:
 *    compiled with smaller ones, step 10's loop fits in 168 at d128 and 152 at d64, this
 *    one in 200 and 160; below that ptxas spills, and soon serialises the wgmma (info
 *    C7512), which undoes the overlap. With step 10's budgets it spills nothing and
 *    keeps every wgmma asynchronous (make step=11 info).
 * 5. The prologue's S_0 goes through the masked softmax whatever the block: the mask
 *    changes nothing on a tile that needs none, and a third compiled copy of the
 *    softmax, for one tile per block, would save only its compares.
 */
#include <cuda.h>          // CUtensorMap and its enums (types only: nothing links libcuda)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled, fetched at run time from the driver
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
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
    // consumers, 160 for three. A consumer holds S_n (BLOCK_N / 2 fp32 per thread), O (D / 2)
    // and P_{n-1} (BLOCK_N / 4) at once, 160 at d128 and 128 at d64, before its softmax temporaries.
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
    static constexpr uint32_t BARRIERS = V + STAGES * STAGE_BYTES;        // q_full, then k_full, v_full, k_empty, v_empty of each stage
    static constexpr uint32_t BYTES = BARRIERS + (1 + 4 * STAGES) * 8 + SWIZZLE_ATOM;  // + room to align the start
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

// D (+)= A B for one m64nNk16, A and B from shared memory (descriptors), both K-major;
// D = A B when `accumulate` is 0.
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a_desc, uint64_t b_desc, int accumulate)
{
    static_assert(N == 128, "Q K^T is issued as m64n128k16 only (BLOCK_N = 128)");
    if constexpr (std::is_same<T, __half>::value)
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                     " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_ACC_64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_OPERANDS_64(d)
                     : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    else
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                     " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_ACC_64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_OPERANDS_64(d)
                     : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// D += A B with A from registers: a[0..3] is the m16n8k16 A fragment of mma.sync for
// the warp's 16 rows, so an accumulator of S converts into it in place. B from
// shared memory, MN-major (the final 1 is imm-trans-b: transposed on the way in).
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b_desc)
{
    static_assert(N == 64 || N == 128, "P V is issued as m64n64k16 (d64) or m64n128k16 (d128)");
    if constexpr (N == 64 && std::is_same<T, __half>::value)
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WGMMA_ACC_32 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                     : WGMMA_OPERANDS_32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
    else if constexpr (N == 64)
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_ACC_32 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                     : WGMMA_OPERANDS_32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
    else if constexpr (std::is_same<T, __half>::value)
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_ACC_64 ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                     : WGMMA_OPERANDS_64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_ACC_64 ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
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
    const uint32_t k_full = q_full + 8;                            // [STAGES]: K of the stage's tile has landed
    const uint32_t v_full = k_full + STAGES * 8;                   // [STAGES]: V of the stage's tile has landed
    const uint32_t k_empty = v_full + STAGES * 8;                  // [STAGES]: every consumer warp is done with its K
    const uint32_t v_empty = k_empty + STAGES * 8;                 // [STAGES]: every consumer warp is done with its V

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

    // Thread 0, the producer's, issues every copy: K or V of key tile nb into stage nb % STAGES,
    // counted on the stage's full barrier of that tensor (rows past seqlen_k land as zeros).
    // Before refilling a stage it waits until every consumer warp has released the tile that
    // was there, STAGES tiles back: the stage's empty phase nb / STAGES - 1 of that tensor.
    auto load = [&](const int nb, const uint32_t tile_saddr, const CUtensorMap *map, const uint32_t full, const uint32_t empty) {
        const uint32_t stage = nb % STAGES;
        if (nb >= STAGES) mbarrier_wait(empty + stage * 8, (nb / STAGES - 1) % 2);
        mbarrier_arrive_expect_tx(full + stage * 8, STAGE_BYTES);
        tma_load_tile<BLOCK_N, D>(tile_saddr + stage * STAGE_BYTES, map, full + stage * 8, nb * BLOCK_N, h_kv, b);
    };
    // Prologue: the barriers, then Q.
    if (threadIdx.x == 0) {
        mbarrier_init(q_full, 1);  // one arrival, the expect_tx's; the bytes do the rest
        for (int s = 0; s < STAGES; s++) {
            mbarrier_init(k_full + s * 8, 1);
            mbarrier_init(v_full + s * 8, 1);
            mbarrier_init(k_empty + s * 8, C::WARPS);  // one arrival per consumer warp
            mbarrier_init(v_empty + s * 8, C::WARPS);
        }
        fence_barrier_init();
        mbarrier_arrive_expect_tx(q_full, BLOCK_M * D * 2);  // rows past seqlen_q land as zeros, and count
        tma_load_tile<BLOCK_M, D>(q_saddr, &q_map, q_full, m0, h, b);
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them

    // The producer warpgroup: its registers go to the consumers, and thread 0 copies
    // every key tile, STAGES ahead of the consumers at most: K_nb once K_{nb - STAGES} is
    // released (after S_{nb - STAGES}), V_nb once V_{nb - STAGES} is (after
    // P_{nb - STAGES} V_{nb - STAGES}, a turn later).
    if (threadIdx.x < WARPGROUP) {
        setmaxnreg_dec<C::PRODUCER_REGS>();
        if (threadIdx.x == 0)
            for (int nb = 0; nb < n_blocks; nb++) {
                load(nb, k_saddr, &k_map, k_full, k_empty);
                load(nb, v_saddr, &v_map, v_full, v_empty);
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

    // Turns at the tensor cores: consumer c issues its products only after consumer c - 1
    // has issued its own (c - 1 arrives on TURN + c, c syncs there: 2 x 128 threads), so
    // while one consumer is in its softmax the other's products run. Every consumer takes
    // n_blocks + 1 turns (S_0; S_n with P_{n-1} V_{n-1} for each later tile; P_last V_last);
    // the last consumer hands out the first turn before the loop and keeps its own last one.
    const int consumer = warp / 4;
    auto turn_begin = [&] { named_barrier_sync(TURN + consumer, 2 * WARPGROUP); };
    auto turn_end = [&](const bool last) {
        if (!(last && consumer == CONSUMERS - 1)) named_barrier_arrive(TURN + (consumer + 1) % CONSUMERS, 2 * WARPGROUP);
    };

    float s_acc[M_TILES][BLOCK_N / MMA_N][4];  // S_n: [m-tile][key n-tile][c0..c3], as in step 08; P_n once exponentiated
    uint32_t p_frag[BLOCK_N / WG_K][4];        // P_{n-1} as A fragments: [key k-step j][a0..a3], live across the next S_n
    float correction[M_TILES][2];              // O's factor for rows g and g+8 of each m-tile, from S_n's softmax
    // S_nb = Q K_nb^T, one commit group: D / 16 wgmma of this warpgroup, each one k-step of
    // 16 head-dim columns, 32 bytes further along the slabs' 128-byte rows, the next slab after four.
    auto issue_s = [&](const int nb) {
        const uint32_t stage_off = nb % STAGES * STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < D / WG_K; kk++)
            wgmma_ss<T, BLOCK_N>(s_acc[0], desc_advance(q_desc, kk / 4 * L::Q_SLAB_BYTES + kk % 4 * 32),
                                 desc_advance(k_desc, stage_off + kk / 4 * L::KV_SLAB_BYTES + kk % 4 * 32), kk > 0);
        wgmma_commit();
    };
    // O += P_nb V_nb, one commit group: BLOCK_N / 16 wgmma, each 16 keys = 16 rows of 128
    // bytes further into V. p_frag stays live until the group has completed.
    auto issue_pv = [&](const int nb) {
        const uint32_t stage_off = nb % STAGES * STAGE_BYTES;
#pragma unroll
        for (int j = 0; j < BLOCK_N / WG_K; j++)
            wgmma_rs<T, D>(o_acc[0], p_frag[j], desc_advance(v_desc, stage_off + j * WG_K * SWIZZLE_BYTES));
        wgmma_commit();
    };

    // The online softmax of S_nb, in s_acc: the mask (compiled in or out), the running max
    // and sum, then P = exp2(S scale - m). O is not touched: a product may be writing it.
    // Returns whether O must be multiplied by correction once that product is done.
    auto softmax = [&](const int nb, auto masked) {
        const int n0 = nb * BLOCK_N;
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
        const bool rescale = !LAZY_RESCALE || __any_sync(0xffffffffu, grown);
        if (rescale) {
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float m_new = fmaxf(m_run[mt][r], tile_max[mt][r]);
                    correction[mt][r] = exp2_approx(m_run[mt][r] - finite_or_zero(m_new));  // 0 on a row's first visible key
                    m_run[mt][r] = m_new;
                    l_run[mt][r] *= correction[mt][r];
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
        return rescale;
    };
    // P_nb into p_frag, which P_{nb-1} V_{nb-1} no longer reads: the C fragments of key
    // n-tiles 2j and 2j+1 are exactly the A fragment of k-step j, so P never leaves registers.
    auto pack_p = [&] {
#pragma unroll
        for (int j = 0; j < BLOCK_N / WG_K; j++) {
            p_frag[j][0] = pack2<T>(s_acc[0][2 * j][0], s_acc[0][2 * j][1]);
            p_frag[j][1] = pack2<T>(s_acc[0][2 * j][2], s_acc[0][2 * j][3]);
            p_frag[j][2] = pack2<T>(s_acc[0][2 * j + 1][0], s_acc[0][2 * j + 1][1]);
            p_frag[j][3] = pack2<T>(s_acc[0][2 * j + 1][2], s_acc[0][2 * j + 1][3]);
        }
    };

    // One key tile nb >= 1 of the skewed loop: the loop body, instantiated twice. Tiles
    // that need no mask (all but the diagonal ones and the seqlen_k tail) run a copy
    // compiled with no masking code at all, so its compares and selects, and the register
    // shuffling a run-time branch around them costs, leave the hot loop.
    auto key_tile = [&](const int nb, auto masked) {
        // K of tile nb and V of tile nb - 1 have landed; the waits on the mbarriers are each thread's own.
        mbarrier_wait(k_full + nb % STAGES * 8, nb / STAGES % 2);              // the stage's (nb / STAGES)-th use
        mbarrier_wait(v_full + (nb - 1) % STAGES * 8, (nb - 1) / STAGES % 2);

        // In this consumer's turn, two commit groups: S_nb, then P_{nb-1} V_{nb-1}.
        turn_begin();
        fence_registers(s_acc[0]);
        fence_registers(o_acc[0]);
        wgmma_fence();
        issue_s(nb);
        issue_pv(nb - 1);
        turn_end(false);
        wgmma_wait<1>();  // the older group, S_nb, is done; P_{nb-1} V_{nb-1} may still run
        fence_registers(s_acc[0]);
        // This warp's wgmma reading K_nb are done: one of the WARPS arrivals the producer waits for.
        if (lane == 0) mbarrier_arrive(k_empty + nb % STAGES * 8);

        const bool rescale = softmax(nb, masked);  // while P_{nb-1} V_{nb-1} runs
        wgmma_wait<0>();  // P_{nb-1} V_{nb-1} is done: O may be rescaled, p_frag rewritten
        fence_registers(o_acc[0]);
        fence_registers(p_frag);
        if (lane == 0) mbarrier_arrive(v_empty + (nb - 1) % STAGES * 8);  // ... and those reading V_{nb-1}
        if (rescale) {
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int dt = 0; dt < D / MMA_N; dt++) {
                        o_acc[mt][dt][2 * r] *= correction[mt][r];
                        o_acc[mt][dt][2 * r + 1] *= correction[mt][r];
                    }
        }
        pack_p();
    };

    // Tiles from first_masked on cross the diagonal (causal: some key is past the
    // first row's last visible key) or hold the seqlen_k tail.
    int first_masked = p.seqlen_k / BLOCK_N;
    if (p.causal) first_masked = min(first_masked, max(0, (m0 + shift + 1) / BLOCK_N));
    first_masked = min(first_masked, n_blocks);
    mbarrier_wait(q_full, 0);
    if (n_blocks > 0) {
        if (consumer == CONSUMERS - 1) named_barrier_arrive(TURN, 2 * WARPGROUP);  // the first turn
        // The skew's prologue: S_0 alone in the first turn, and its softmax with nothing
        // under it. Masked whatever first_masked says (header, point 5); O is still zero,
        // so a correction has nothing to rescale.
        mbarrier_wait(k_full, 0);
        turn_begin();
        fence_registers(s_acc[0]);
        wgmma_fence();
        issue_s(0);
        turn_end(false);
        wgmma_wait<0>();
        fence_registers(s_acc[0]);
        if (lane == 0) mbarrier_arrive(k_empty);
        softmax(0, std::true_type{});
        pack_p();
    }
    for (int nb = 1; nb < first_masked; nb++) key_tile(nb, std::false_type{});
    for (int nb = max(1, first_masked); nb < n_blocks; nb++) key_tile(nb, std::true_type{});
    if (n_blocks > 0) {
        // The skew's epilogue: P_last V_last alone in the last turn.
        const int last = n_blocks - 1;
        mbarrier_wait(v_full + last % STAGES * 8, last / STAGES % 2);
        turn_begin();
        fence_registers(o_acc[0]);
        wgmma_fence();
        issue_pv(last);
        turn_end(true);
        wgmma_wait<0>();
        fence_registers(o_acc[0]);
        fence_registers(p_frag);
        if (lane == 0) mbarrier_arrive(v_empty + last % STAGES * 8);
    }

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

extern "C" const char *fa2_name(void) { return "11_intra_warpgroup_overlap"; }
extern "C" const char *fa2_key_change(void) { return "the softmax of S_n runs while P_{n-1} V_{n-1} is on the tensor cores"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }
extern "C" size_t fa2_workspace_size(const fa2_params *) { return 0; }  // one pass: no partial results

// No backward in this step: every call is refused in one line (the params' own refusal
// where they are bad), and nothing is touched.
extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len) { return fa2_refuse_backward(p, fa2_name(), why, why_len); }
extern "C" int fa2_backward(const fa2_bwd_params *, void *) { return FA2_ERR_UNSUPPORTED; }
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *) { return 0; }
