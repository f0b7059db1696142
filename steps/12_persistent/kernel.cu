/* Step 12 - a persistent kernel: one block per SM, looping over the work.
 *
 * One change from step 11: the grid no longer has a block per (q tile, head,
 * batch). It has one block per SM (fewer when there is less work), and each
 * block works through such items, one after another, until its share is done.
 * What that buys, at the seams between two items of one block:
 *  - no launch of a new block: the registers, the barriers and the producer's
 *    tensor maps stay where they are; the barrier phases simply run on;
 *  - the next item's loads under this item's end: each consumer releases its Q
 *    once its last S = Q K^T has run (a q_empty barrier), so the producer loads
 *    the next Q, and the next K and V tiles into the stages as they free up,
 *    while the consumers finish the last softmax and P V;
 *  - the epilogue under the next item's start: O is staged in a buffer of its
 *    own (no longer in Q's), and the TMA store of it is only waited for when
 *    that buffer is written again, one item later.
 * Who takes what is the tile scheduler's (TileScheduler): units of equal work
 * (one q tile, or under a causal mask the tile that sees the most keys with the
 * one that sees the fewest), so the blocks finish together; a head's units next
 * to each other, so its K and V stay in L2 while its q tiles run. With these
 * units, two consumers beat three at d64 under a causal mask (ManyItemsConfig).
 * A consumer whose rows all lie past seqlen_q (in a head's last, partial q tile) takes
 * its turns without computing; for that branch not to cost more than it saves, the
 * consumer index is taken from lane 0 by a shuffle (see consume).
 * Everything else is step 11's (docs/12_persistent.md).
 */
#include <cuda.h>          // CUtensorMap and its enums (types only: nothing links libcuda)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled, fetched at run time from the driver
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <algorithm>
#include <type_traits>

#include "../../common/fa2.h"
#include "../../common/device_limits.h"
#include "../../common/validate.h"

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
// The running max may lag the true max by this much (log2 units) before O is rescaled.
constexpr float RESCALE_LOG2 = 8.0f;

constexpr int WARPGROUP = 128;  // four consecutive warps, starting at a warp index divisible by 4
constexpr int WG_M = 64;        // wgmma.m64nNk16: the rows of one warpgroup's product
constexpr int WG_K = 16;        // ... and the k of one instruction, for 16-bit inputs
constexpr int SWIZZLE_BYTES = 128;        // TMA SWIZZLE_128B: the XOR pattern repeats every 8 rows of 128 bytes
constexpr int SLAB_COLS = SWIZZLE_BYTES / 2;  // 64 elements: a 128B-swizzled box row is at most 128 bytes, so a
                                              // tile is stored as D / 64 slabs [rows][64]
constexpr int SWIZZLE_ATOM = 8 * SWIZZLE_BYTES;  // 1024 bytes: 8 rows, the unit every slab must be aligned to

template <int D, int CONSUMERS_>
struct Config {
    static constexpr int CONSUMERS = CONSUMERS_;  // consumer warpgroups, WG_M query rows each
    static constexpr int BLOCK_M = CONSUMERS * WG_M;
    static constexpr int BLOCK_N = 128;  // keys per tile: the n of Q K^T's wgmma
    static constexpr int STAGES = 2;     // shared-memory buffers for each of K and V
    static constexpr int THREADS = (CONSUMERS + 1) * WARPGROUP;
    // setmaxnreg: the producer needs a few registers for addresses and loop counters;
    // a consumer holds S (BLOCK_N / 2 per thread), O (D / 2) and P (BLOCK_N / 4), 160
    // at d128 and 128 at d64, plus its softmax temporaries.
    static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = CONSUMERS == 2 ? 240 : 160;
    static_assert((PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) * WARPGROUP <= 65536,
                  "the warpgroups' register budgets must fit in the SM's 64K registers");
    static_assert(D % SLAB_COLS == 0, "the head dim is loaded as 64-column slabs, one 128-byte swizzle span each");
    static_assert(BLOCK_N % WG_K == 0 && BLOCK_N % 8 == 0 && BLOCK_N <= 256,
                  "BLOCK_N is the n of one wgmma (a multiple of 8, at most 256) and P V consumes it 16 keys at a time");
    static_assert(STAGES >= 2, "the copy of tile n + 1 needs its own buffer while tile n is read");
};
// Two consumers (128 query rows per work item) everywhere, except d64 without a causal
// mask when there are more 128-row items than SMs: there a third consumer (192 rows per
// item, FlashAttention-3's choice for d64) was measured 5-15% faster in step 10 and
// 1.07-1.17x in this step, and with fewer items 0.87x the throughput (fewer, larger items
// leave SMs idle). With a causal mask two consumers were as fast at B4 H16 N4096 and
// 1.14x faster at B16 H16 N1024: a 192-row tile wastes more of the key tiles that
// cross the diagonal. See docs/measurements/10_warp_specialized.md and docs/measurements/12_persistent.md.
template <int D>
using FewItemsConfig = Config<D, 2>;
template <int D>
using ManyItemsConfig = Config<D, D == 64 ? 3 : 2>;

// Byte offsets into dynamic shared memory, from a 1024-byte aligned base.
template <int D, typename C>
struct SmemLayout {
    static constexpr uint32_t Q_SLAB_BYTES = WG_M * SWIZZLE_BYTES;       // one 64-column slab of one consumer's Q
    static constexpr uint32_t Q_WG_BYTES = WG_M * D * 2;                 // one consumer's Q (and its O)
    static constexpr uint32_t KV_SLAB_BYTES = C::BLOCK_N * SWIZZLE_BYTES;  // one 64-column slab of a K or V tile
    static constexpr uint32_t KV_STAGE_BYTES = C::BLOCK_N * D * 2;
    static constexpr uint32_t Q = 0;                                   // [CONSUMERS][D / 64][WG_M][64]
    static constexpr uint32_t O = Q + C::CONSUMERS * Q_WG_BYTES;       // [CONSUMERS][D / 64][WG_M][64]
    static constexpr uint32_t K = O + C::CONSUMERS * Q_WG_BYTES;       // [STAGES][D / 64][BLOCK_N][64]
    static constexpr uint32_t V = K + C::STAGES * KV_STAGE_BYTES;      // [STAGES][D / 64][BLOCK_N][64]
    static constexpr uint32_t BARRIERS = V + C::STAGES * KV_STAGE_BYTES;  // q_full, q_empty, then 4 per stage (see Barriers)
    static constexpr uint32_t BYTES = BARRIERS + (2 + 4 * C::STAGES) * 8 + SWIZZLE_ATOM;  // + slack to align the base
    static_assert(BYTES <= 227 * 1024, "an sm_90 block may have at most 227 KB of dynamic shared memory");
    static_assert(Q_SLAB_BYTES % SWIZZLE_ATOM == 0 && KV_SLAB_BYTES % SWIZZLE_ATOM == 0,
                  "every slab starts on a 1024-byte boundary: TMA's and wgmma's 128-byte swizzle is anchored there");
};

// ---- PTX wrappers: mbarriers ---------------------------------------------------
// An mbarrier is 8 bytes of shared memory holding a phase bit, a count of
// arrivals still expected and a count of transaction bytes still expected. The
// phase completes, and the bit flips, when both reach zero; waiters name the
// parity of the phase they wait for. All addresses here are shared-state-space
// byte addresses.

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

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Returns once the phase with this parity has completed. try_wait suspends the
// warp for a while in hardware before it reports false, so the loop does not spin hot.
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

// ---- PTX wrappers: the tensor memory accelerator (TMA) ----------------------------

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

// The reverse: shared memory at src to the box at (col, row, head, batch);
// elements outside the tensor are not written.
__device__ __forceinline__ void tma_store(const CUtensorMap *map, uint32_t src, int col, int row, int head, int batch)
{
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"(map), "r"(src), "r"(col), "r"(row), "r"(head), "r"(batch)
                 : "memory");
}

// Closes this thread's group of TMA stores issued since the last commit.
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until every TMA store group this thread committed has finished reading
// shared memory (the buffer may be written again).
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

// Waits until every TMA store group this thread committed has been written to
// global memory (before the block exits).
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Orders this thread's ordinary shared-memory stores before later reads of the
// same bytes by the copy engine or the tensor cores (the async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- PTX wrappers: named barriers, registers -------------------------------------

// bar.sync waits until `threads` threads have reached barrier `id` (with sync or
// arrive); bar.arrive counts this thread without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Moves this warpgroup's per-thread register allocation to N (sm_90a): the
// producer returns what the consumers take.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

// ---- PTX wrappers: wgmma ----------------------------------------------------------

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
__device__ __forceinline__ void fence_registers(R (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) {
        if constexpr (std::is_same<R, float>::value) asm volatile("" : "+f"(r[i])::"memory");
        else asm volatile("" : "+r"(r[i])::"memory");
    }
}

// The accumulator operand lists of m64n64 (32 fp32 per thread) and m64n128 (64).
#define WGMMA_ACC_32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_ACC_64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define WGMMA_OPERANDS_32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define WGMMA_OPERANDS_64(d) WGMMA_OPERANDS_32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// D (+)= A B for one m64nNk16. Thread (warp w of the warpgroup, lane l, g = l / 4,
// t = l % 4) holds in d[i] the element at
//   row 16 w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2 t + i % 2,
// the m16n8 accumulator of mma.sync repeated N / 8 times along the columns.
// A and B from shared memory (descriptors), both K-major; D = A B when `accumulate` is 0.
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc, int accumulate)
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
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_desc)
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

// ---- softmax helpers (as in step 07) ------------------------------------------------

// 2^x on the special-function unit (one MUFU.EX2); exp2(-inf) = 0.
__device__ __forceinline__ float exp2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Reduces N values pairwise, a balanced tree instead of a chain of N - 1 dependent ops.
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

// The max to subtract in exp2(s - m): a row that has seen no key keeps m = -inf,
// and subtracting 0 instead gives exp2(-inf) = 0 where -inf - -inf would give NaN.
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

// ---- the work items, their order, and the block's shared memory ----------------------------

// What one work item computes: query rows [m0, m0 + BLOCK_M) of head h in batch b,
// against key tiles [0, n_blocks); tiles from first_masked on need a mask.
struct WorkItem {
    int m0, h, h_kv, b, n_blocks, first_masked, shift;
};

// Who computes what. The work is handed out in units: one q tile of one (batch,
// head) pair, or under a causal mask two, q tiles m_blocks - 1 - k and k of the
// pair: those see the most and the fewest keys, and as a tile's keys grow
// linearly with its index every such unit has about the same number of key tiles
// (m_blocks + 1 with Nq = Nk). Block b takes units b, b + gridDim.x, ...: with
// equal units the blocks finish together, whatever the shape. Unit u belongs to
// pair u / units_per_pair, so the units that run at one time are the q tiles of
// a few heads (query heads of one GQA group are consecutive and share one K and
// V): each K/V tile is read from memory about once per head and hit in L2 by the
// head's other q tiles, as in the order of step 11's grid.
// (fa2_supports keeps the count of q tiles under 2^31: ints suffice.)
template <typename C>
struct TileScheduler {
    int m_blocks, units_per_pair, units;
    __device__ explicit TileScheduler(const fa2_params &p)
        : m_blocks((p.seqlen_q + C::BLOCK_M - 1) / C::BLOCK_M), units_per_pair(p.causal ? (m_blocks + 1) / 2 : m_blocks),
          units(units_per_pair * p.heads_q * p.batch) {}
    // The work item of q tile m_block of pair `pair` (pair = b x heads_q + h).
    __device__ WorkItem item(int m_block, int pair, const fa2_params &p) const
    {
        WorkItem w;
        w.m0 = m_block * C::BLOCK_M, w.h = pair % p.heads_q, w.b = pair / p.heads_q;
        w.h_kv = w.h / (p.heads_q / p.heads_kv);  // GQA
        w.shift = p.seqlen_k - p.seqlen_q;        // causal: row i sees keys j <= i + shift
        const int key_end = p.causal ? min(p.seqlen_k, max(0, w.m0 + C::BLOCK_M + w.shift)) : p.seqlen_k;
        w.n_blocks = (key_end + C::BLOCK_N - 1) / C::BLOCK_N;
        // Tiles from first_masked on cross the diagonal or hold the seqlen_k tail.
        w.first_masked = p.seqlen_k / C::BLOCK_N;
        if (p.causal) w.first_masked = min(w.first_masked, max(0, (w.m0 + w.shift + 1) / C::BLOCK_N));
        return w;
    }
    // Calls work(item, first_tile, ordinal) for this block's work items in turn:
    // ordinal counts the block's items, first_tile its K/V tiles before this item
    // (the two clocks of the barrier phases, which run on from item to item).
    template <typename F>
    __device__ void for_each_item(const fa2_params &p, F &&work) const
    {
        // (One call site: the consumer is inlined once, not once per tile of a unit.)
        const int tiles_per_unit = p.causal ? 2 : 1;
        int64_t tile = 0, ordinal = 0;
        for (int64_t j = 0;; j++) {  // the block's j-th q tile: tile j % 2 of its unit j / 2 (causal)
            const int64_t u = blockIdx.x + j / tiles_per_unit * gridDim.x;
            if (u >= units) break;
            const int pair = (int)(u / units_per_pair), k = (int)(u % units_per_pair);
            const int m_block = j % tiles_per_unit == 0 ? (p.causal ? m_blocks - 1 - k : k) : k;
            if (j % tiles_per_unit == 1 && k == m_blocks - 1 - k) continue;  // an odd m_blocks: the middle tile alone
            const WorkItem w = item(m_block, pair, p);
            work(w, tile, ordinal);
            tile += w.n_blocks, ordinal++;
        }
    }
};

// The mbarriers, one 8-byte word each after the tiles (shared-state-space addresses).
template <typename C>
struct Barriers {
    uint32_t base;
    __device__ uint32_t q_full() const { return base; }                                      // Q has landed
    __device__ uint32_t q_empty() const { return base + 8; }                                 // every consumer warp ran its last Q K^T
    __device__ uint32_t k_full(int s) const { return base + 8 * (2 + s); }                   // K of stage s has landed
    __device__ uint32_t v_full(int s) const { return base + 8 * (2 + C::STAGES + s); }       // V of stage s has landed
    __device__ uint32_t k_empty(int s) const { return base + 8 * (2 + 2 * C::STAGES + s); }  // every consumer warp is done with K of s
    __device__ uint32_t v_empty(int s) const { return base + 8 * (2 + 3 * C::STAGES + s); }  // ... with V of s
};

// Named barrier ids (0 is __syncthreads): consumer c's turn at the tensor cores,
// and consumer c's epilogue.
template <typename C>
struct NamedBarrier {
    static constexpr int TURN = 1, EPILOGUE = 1 + C::CONSUMERS;
    static_assert(EPILOGUE + C::CONSUMERS <= 16, "an SM has 16 named barriers per block");
};

// ---- the producer: one thread issues every copy ------------------------------------------

// One work item's loads. The barrier phases run on from item to item: this is the
// block's item number `ordinal` (0, 1, ...), and its K/V tiles are the block's
// tiles first_tile, first_tile + 1, ...; tile g goes to stage g % STAGES.
template <int D, typename C>
__device__ __forceinline__ void produce(const CUtensorMap *q_map, const CUtensorMap *k_map, const CUtensorMap *v_map,
                                        uint32_t smem, Barriers<C> bars, const WorkItem &w, int64_t first_tile, int64_t ordinal)
{
    using L = SmemLayout<D, C>;
    // Q: each consumer's 64 rows as D / 64 slabs; one barrier for all of them. The
    // previous item's Q must first be released (q_empty phase ordinal - 1).
    if (ordinal > 0) mbarrier_wait(bars.q_empty(), (ordinal - 1) & 1);
    mbarrier_arrive_expect_tx(bars.q_full(), C::BLOCK_M * D * 2);
#pragma unroll
    for (int c = 0; c < C::CONSUMERS; c++)
#pragma unroll
        for (int slab = 0; slab < D / SLAB_COLS; slab++)
            tma_load(smem + L::Q + c * L::Q_WG_BYTES + slab * L::Q_SLAB_BYTES, q_map, bars.q_full(), slab * SLAB_COLS,
                     w.m0 + c * WG_M, w.h, w.b);
    // K and V tiles through the stages. Before refilling stage s with block tile g the
    // producer waits for the consumers to release the tile that was there, STAGES
    // tiles back (empty phase g / STAGES - 1 of that stage), maybe of the last item.
    auto load_tile = [&](uint32_t tile_smem, const CUtensorMap *map, uint32_t full, uint32_t empty, int n, int64_t g,
                         uint32_t empty_parity) {
        if (g >= C::STAGES) mbarrier_wait(empty, empty_parity);
        mbarrier_arrive_expect_tx(full, L::KV_STAGE_BYTES);
#pragma unroll
        for (int slab = 0; slab < D / SLAB_COLS; slab++)
            tma_load(tile_smem + slab * L::KV_SLAB_BYTES, map, full, slab * SLAB_COLS, n * C::BLOCK_N, w.h_kv, w.b);
    };
    for (int n = 0; n < w.n_blocks; n++) {
        const int64_t g = first_tile + n;
        const int stage = (int)(g % C::STAGES);
        const uint32_t empty_parity = (g / C::STAGES + 1) & 1, stage_off = stage * L::KV_STAGE_BYTES;
        load_tile(smem + L::K + stage_off, k_map, bars.k_full(stage), bars.k_empty(stage), n, g, empty_parity);
        load_tile(smem + L::V + stage_off, v_map, bars.v_full(stage), bars.v_empty(stage), n, g, empty_parity);
    }
}

// ---- a consumer: 64 query rows of one work item, the whole key loop, the epilogue -----------

// The item's tiles and Q are the block's tiles first_tile, ... and its Q number
// `ordinal`, as in produce.
template <typename T, int D, typename C>
__device__ __forceinline__ void consume(const fa2_params &p, const CUtensorMap *o_map, uint32_t smem, Barriers<C> bars,
                                        const WorkItem &w, int64_t first_tile, int64_t ordinal)
{
    using L = SmemLayout<D, C>;
    using NB = NamedBarrier<C>;
    constexpr int BLOCK_N = C::BLOCK_N, STAGES = C::STAGES, CONSUMERS = C::CONSUMERS;
    // This consumer, 0 .. CONSUMERS - 1. The same in every lane of a warp (a warpgroup is
    // four whole warps), but the compiler cannot prove it from threadIdx.x; a value taken
    // from lane 0 by a shuffle it can. Everything computed from c, the Q and O addresses and
    // the wgmma descriptors, then stays on the uniform datapath (computed once per warp, in
    // uniform registers, where wgmma reads its descriptors) also under the branch on c below:
    // without the shuffle that branch cost 5-12% at every shape (docs/measurements/12_persistent.md).
    const int c = __shfl_sync(0xffffffffu, (int)threadIdx.x / WARPGROUP - 1, 0);
    const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // accumulator coordinates: row group, thread in group
    const int row0 = w.m0 + c * WG_M + warp * 16 + g;  // this thread's rows: row0 and row0 + 8
    const float scale_log2 = p.softmax_scale * LOG2E;  // exp(x * scale) = exp2(x * scale * log2 e)

    const uint32_t q_wg = smem + L::Q + c * L::Q_WG_BYTES;  // this consumer's Q, [D / 64][WG_M][64]
    const uint32_t o_wg = smem + L::O + c * L::Q_WG_BYTES;  // this consumer's O, the same layout
    // Descriptors of the first k-step of Q, K stage 0 and V stage 0 (see smem_desc).
    const uint64_t q_desc = smem_desc(q_wg, 16, 8 * SWIZZLE_BYTES);
    const uint64_t k_desc = smem_desc(smem + L::K, 16, 8 * SWIZZLE_BYTES);
    const uint64_t v_desc = smem_desc(smem + L::V, L::KV_SLAB_BYTES, 8 * SWIZZLE_BYTES);

    float s_acc[BLOCK_N / 2];             // S: reg i = row g + 8 ((i / 2) % 2), key 8 (i / 4) + 2 t + i % 2
    float o_acc[D / 2];                   // O: the same map over the head dim
    uint32_t p_frag[BLOCK_N / WG_K][4];   // P as 16-bit A fragments, [key k-step][a0..a3]
    float m_run[2] = {-INFINITY, -INFINITY};  // running max of rows row0, row0 + 8, in scaled log2 units
    float l_run[2] = {0.0f, 0.0f};            // this thread's part of the running sums
#pragma unroll
    for (int i = 0; i < D / 2; i++) o_acc[i] = 0.0f;

    // The item's tile n is the block's tile first_tile + n: its stage, and the parity
    // of the full and empty phases that tile is in.
    auto stage_of = [&](int n) { return (int)((first_tile + n) % STAGES); };
    auto parity_of = [&](int n) { return (uint32_t)((first_tile + n) / STAGES & 1); };
    // S = Q K_n^T: D / 16 wgmma, each one k-step of 16 head-dim columns, 32 bytes
    // further along the slab's 128-byte rows, the next slab after four.
    auto issue_qk = [&](int n) {
        const uint32_t stage_off = stage_of(n) * L::KV_STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < D / WG_K; kk++) {
            const uint32_t k_off = kk % 4 * 32;  // bytes into the 128-byte row
            wgmma_ss<T, BLOCK_N>(s_acc, desc_advance(q_desc, kk / 4 * L::Q_SLAB_BYTES + k_off),
                                 desc_advance(k_desc, stage_off + kk / 4 * L::KV_SLAB_BYTES + k_off), kk > 0);
        }
        wgmma_commit();
    };
    // O += P_n V_n: BLOCK_N / 16 wgmma, each 16 keys = 16 rows of 128 bytes further.
    auto issue_pv = [&](int n) {
        const uint32_t stage_off = stage_of(n) * L::KV_STAGE_BYTES;
#pragma unroll
        for (int j = 0; j < BLOCK_N / WG_K; j++)
            wgmma_rs<T, D>(o_acc, p_frag[j], desc_advance(v_desc, stage_off + j * WG_K * SWIZZLE_BYTES));
        wgmma_commit();
    };
    // Each consumer warp releases a stage once its own wgmma reading it are done.
    auto release = [&](uint32_t bar) {
        if (lane == 0) mbarrier_arrive(bar);
    };
    // Turns at the tensor cores: consumer c issues its products only after consumer
    // c - 1 has issued its own, so while one consumer is in its softmax the other's
    // products run. Every consumer takes n_blocks + 1 turns; the last consumer hands
    // the first turn out before the loop and keeps its own last one.
    auto turn_begin = [&] {
        named_barrier_sync(NB::TURN + c, 2 * WARPGROUP);
    };
    auto turn_end = [&](bool last) {
        if (!(last && c == CONSUMERS - 1)) named_barrier_arrive(NB::TURN + (c + 1) % CONSUMERS, 2 * WARPGROUP);
    };

    // The online softmax of S_n, in place: masks, updates the running max and sum,
    // and leaves P = exp2(S scale - m) in s_acc. Returns whether O must be rescaled
    // by correction[] (that waits until the P V in flight has finished).
    auto softmax = [&](int n, float (&correction)[2]) {
        if (n >= w.first_masked) {
#pragma unroll
            for (int i = 0; i < BLOCK_N / 2; i++) {
                const int row = row0 + 8 * (i / 2 % 2), key = n * BLOCK_N + 8 * (i / 4) + 2 * t + i % 2;
                if (key >= p.seqlen_k || (p.causal && key > row + w.shift)) s_acc[i] = -INFINITY;
            }
        }
        float tile_max[2];
        bool grown = false;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float row_vals[BLOCK_N / 4];  // this thread's BLOCK_N / 4 scores of the row
#pragma unroll
            for (int nt = 0; nt < BLOCK_N / 8; nt++) row_vals[2 * nt] = s_acc[4 * nt + 2 * r], row_vals[2 * nt + 1] = s_acc[4 * nt + 2 * r + 1];
            float row_max = tree_reduce<MaxOp>(row_vals);
            row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));  // the 4 threads of a quad
            row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));  // share one row
            tile_max[r] = row_max * scale_log2;
            grown |= tile_max[r] > m_run[r] + RESCALE_LOG2;
        }
        // As in step 07: rescale only when some row's max has grown by more than
        // 2^RESCALE_LOG2; the vote keeps the branch warp-uniform.
        const bool rescale = __any_sync(0xffffffffu, grown);
        correction[0] = correction[1] = 1.0f;
        if (rescale) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const float m_new = fmaxf(m_run[r], tile_max[r]);
                correction[r] = exp2_approx(m_run[r] - finite_or_zero(m_new));  // 0 on a row's first visible key
                m_run[r] = m_new;
                l_run[r] *= correction[r];
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float m_use = finite_or_zero(m_run[r]);
            float row_vals[BLOCK_N / 4];
#pragma unroll
            for (int nt = 0; nt < BLOCK_N / 8; nt++) {
                s_acc[4 * nt + 2 * r] = row_vals[2 * nt] = exp2_approx(fmaf(s_acc[4 * nt + 2 * r], scale_log2, -m_use));
                s_acc[4 * nt + 2 * r + 1] = row_vals[2 * nt + 1] = exp2_approx(fmaf(s_acc[4 * nt + 2 * r + 1], scale_log2, -m_use));
            }
            l_run[r] += tree_reduce<SumOp>(row_vals);
        }
        return rescale;
    };
    // P to 16-bit A fragments: keys 16 j .. 16 j + 15 are accumulator regs 8 j .. 8 j + 7,
    // and pairs of them are a0 (row g), a1 (row g + 8), a2, a3 (the next 8 keys).
    auto pack_p = [&] {
#pragma unroll
        for (int j = 0; j < BLOCK_N / WG_K; j++)
#pragma unroll
            for (int a = 0; a < 4; a++) p_frag[j][a] = pack2<T>(s_acc[8 * j + 2 * a], s_acc[8 * j + 2 * a + 1]);
    };

    // S_n has run: its K stage is free, and after the item's last S so is Q (the
    // producer loads the next item's Q under this item's last softmax and P V).
    auto release_after_s = [&](int n) {
        release(bars.k_empty(stage_of(n)));
        if (n == w.n_blocks - 1) release(bars.q_empty());
    };

    mbarrier_wait(bars.q_full(), (uint32_t)(ordinal & 1));
    // None of this consumer's 64 rows exists (the last q tile of a head, when seqlen_q is not
    // a multiple of BLOCK_M: at N1024 with 192-row tiles, two of the three consumers of a
    // head's sixth tile). It takes its turns and releases its stages as the loop below would,
    // and leaves the tensor cores to the others. Each release waits for its tile to land
    // first: an arrival must count towards the phase of this tile, not of one before it.
    if (w.m0 + c * WG_M >= p.seqlen_q) {
        if (w.n_blocks == 0) release(bars.q_empty());
        if (w.n_blocks > 0) {
            if (c == CONSUMERS - 1) named_barrier_arrive(NB::TURN, 2 * WARPGROUP);
            // (Rolled: a rare path, its code kept small next to the consumer's own loop.)
#pragma unroll 1
            for (int n = 0; n < w.n_blocks; n++) {
                mbarrier_wait(bars.k_full(stage_of(n)), parity_of(n));
                turn_begin();
                turn_end(false);
                release_after_s(n);
                mbarrier_wait(bars.v_full(stage_of(n)), parity_of(n));
                release(bars.v_empty(stage_of(n)));
            }
            turn_begin();
            turn_end(true);
        }
        return;
    }
    if (w.n_blocks == 0) release(bars.q_empty());  // a causal item with no visible key: Q is not read
    if (w.n_blocks > 0) {
        float correction[2];
        if (c == CONSUMERS - 1) named_barrier_arrive(NB::TURN, 2 * WARPGROUP);
        // Tile 0: S_0 alone.
        mbarrier_wait(bars.k_full(stage_of(0)), parity_of(0));
        turn_begin();
        wgmma_fence();
        issue_qk(0);
        turn_end(false);
        wgmma_wait<0>();
        fence_registers(s_acc);
        release_after_s(0);
        softmax(0, correction);  // O is still zero: nothing to rescale
        pack_p();
        // Tile n: S_n and P_{n-1} V_{n-1} issued together; the softmax of S_n runs
        // while P_{n-1} V_{n-1} is still on the tensor cores.
        for (int n = 1; n < w.n_blocks; n++) {
            mbarrier_wait(bars.k_full(stage_of(n)), parity_of(n));
            mbarrier_wait(bars.v_full(stage_of(n - 1)), parity_of(n - 1));
            turn_begin();
            fence_registers(s_acc);
            fence_registers(o_acc);
            wgmma_fence();
            issue_qk(n);
            issue_pv(n - 1);
            turn_end(false);
            wgmma_wait<1>();  // S_n is done; P_{n-1} V_{n-1} may still run
            fence_registers(s_acc);
            release_after_s(n);
            const bool rescale = softmax(n, correction);
            wgmma_wait<0>();  // P_{n-1} V_{n-1} is done: O may change, p_frag may be rewritten
            fence_registers(o_acc);
#pragma unroll
            for (int j = 0; j < BLOCK_N / WG_K; j++) fence_registers(p_frag[j]);
            release(bars.v_empty(stage_of(n - 1)));
            if (rescale) {
#pragma unroll
                for (int i = 0; i < D / 2; i++) o_acc[i] *= correction[i / 2 % 2];
            }
            pack_p();
        }
        // The last P V.
        const int last = w.n_blocks - 1;
        mbarrier_wait(bars.v_full(stage_of(last)), parity_of(last));
        turn_begin();
        fence_registers(o_acc);
        wgmma_fence();
        issue_pv(last);
        turn_end(true);
        wgmma_wait<0>();
        fence_registers(o_acc);
        release(bars.v_empty(stage_of(last)));
    }

    // Epilogue: finish the row sums across the quad, normalise, write O as 16-bit
    // pairs into this consumer's O slabs in the 128-byte swizzle the O tensor map
    // expects (16-byte chunk XOR row % 8: a store instruction's 8 rows land in 8
    // different chunks, no bank conflict), then one thread stores the slabs with TMA
    // and goes on without waiting. The slabs still hold the previous item's O until
    // that store has read them: the thread that issued it waits for that first.
    if (threadIdx.x % WARPGROUP == 0) tma_store_wait_read();
    named_barrier_sync(NB::EPILOGUE + c, WARPGROUP);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        const float inv_l = l_run[r] != 0.0f ? 1.0f / l_run[r] : 0.0f;  // l = 0: the row saw no key, O = 0; NaN l: NaN O
        const int row = warp * 16 + g + 8 * r;                          // within the consumer's 64 rows
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            const int col = 8 * dt + 2 * t;
            const uint32_t addr = o_wg + col / SLAB_COLS * L::Q_SLAB_BYTES + row * SWIZZLE_BYTES +
                                  ((col % SLAB_COLS / 8) ^ (row % 8)) * 16 + col % 8 * 2;
            const uint32_t packed = pack2<T>(o_acc[4 * dt + 2 * r] * inv_l, o_acc[4 * dt + 2 * r + 1] * inv_l);
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(packed) : "memory");
        }
        const int q_row = row0 + 8 * r;
        if (p.lse && t == 0 && q_row < p.seqlen_q)
            p.lse[((int64_t)w.b * p.heads_q + w.h) * p.seqlen_q + q_row] =
                l_run[r] != 0.0f ? (m_run[r] + log2f(l_run[r])) * LN2 : -INFINITY;
    }
    fence_proxy_async();  // the stores above, before the copy engine reads them
    named_barrier_sync(NB::EPILOGUE + c, WARPGROUP);
    if (threadIdx.x % WARPGROUP == 0) {
#pragma unroll
        for (int slab = 0; slab < D / SLAB_COLS; slab++)
            tma_store(o_map, o_wg + slab * L::Q_SLAB_BYTES, slab * SLAB_COLS, w.m0 + c * WG_M, w.h, w.b);
        tma_store_commit();
    }
}

// ---- the kernel ------------------------------------------------------------------------

// One block per SM (or per unit of work, when there are fewer), for the whole
// launch, each taking its share of the work (TileScheduler).
template <typename T, int D, typename C>
__global__ void __launch_bounds__(C::THREADS, 1)
    fa2_wgmma_kernel(const fa2_params p, const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                     const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap o_map)
{
    using L = SmemLayout<D, C>;
    extern __shared__ uint8_t smem_raw[];
    // TMA's 128-byte swizzle, and wgmma's reading of it, are anchored at 1024-byte boundaries.
    const uint32_t smem = ((uint32_t)__cvta_generic_to_shared(smem_raw) + SWIZZLE_ATOM - 1) & ~(uint32_t)(SWIZZLE_ATOM - 1);
    const Barriers<C> bars{smem + L::BARRIERS};

    const TileScheduler<C> schedule(p);

    if (threadIdx.x == 0) {
        mbarrier_init(bars.q_full(), 1);  // the producer's arrive.expect_tx; the bytes do the rest
        mbarrier_init(bars.q_empty(), C::CONSUMERS * 4);  // one arrival per consumer warp
        for (int s = 0; s < C::STAGES; s++) {
            mbarrier_init(bars.k_full(s), 1);
            mbarrier_init(bars.v_full(s), 1);
            mbarrier_init(bars.k_empty(s), C::CONSUMERS * 4);  // one arrival per consumer warp
            mbarrier_init(bars.v_empty(s), C::CONSUMERS * 4);
        }
        fence_barrier_init();
    }
    __syncthreads();

    // Producer and consumers walk the same items.
    if (threadIdx.x < WARPGROUP) {
        setmaxnreg_dec<C::PRODUCER_REGS>();
        if (threadIdx.x == 0)
            schedule.for_each_item(p, [&](const WorkItem &w, int64_t first_tile, int64_t ordinal) {
                produce<D, C>(&q_map, &k_map, &v_map, smem, bars, w, first_tile, ordinal);
            });
    } else {
        setmaxnreg_inc<C::CONSUMER_REGS>();
        schedule.for_each_item(p, [&](const WorkItem &w, int64_t first_tile, int64_t ordinal) {
            consume<T, D, C>(p, &o_map, smem, bars, w, first_tile, ordinal);
        });
        // The last O store must be done before the block's shared memory goes away.
        if (threadIdx.x % WARPGROUP == 0) tma_store_wait_all();
    }
}

// ---- launcher and ABI ----------------------------------------------------------------

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

// A tensor map over one of Q, K, V, O: 4 dims, innermost first (head_dim, seqlen,
// heads, batch), strides in bytes for the outer three. A box is [box_rows][64] of
// one head: rows past seqlen belong to no other head, they are outside the tensor.
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

// Work items: q tiles of `block_m` rows x heads x batch (under 2^31: fa2_supports).
static long long work_items(const fa2_params *p, int block_m)
{
    return (long long)((p->seqlen_q + block_m - 1) / block_m) * p->heads_q * p->batch;
}

template <typename T, int D, typename C>
static int launch_with(const fa2_params *p, int sm_count, cudaStream_t stream)
{
    using L = SmemLayout<D, C>;
    CUtensorMap maps[4];
    const int results[4] = {
        make_tensor_map(&maps[0], p->q, p->dtype, D, p->seqlen_q, p->heads_q, p->batch, p->q_row_stride, p->q_head_stride, p->q_batch_stride, WG_M),
        make_tensor_map(&maps[1], p->k, p->dtype, D, p->seqlen_k, p->heads_kv, p->batch, p->k_row_stride, p->k_head_stride, p->k_batch_stride, C::BLOCK_N),
        make_tensor_map(&maps[2], p->v, p->dtype, D, p->seqlen_k, p->heads_kv, p->batch, p->v_row_stride, p->v_head_stride, p->v_batch_stride, C::BLOCK_N),
        make_tensor_map(&maps[3], p->o, p->dtype, D, p->seqlen_q, p->heads_q, p->batch, p->o_row_stride, p->o_head_stride, p->o_batch_stride, WG_M)};
    static const char *const tensors[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++)
        if (results[i] != 0) {
            char reason[96];
            if (results[i] < 0) snprintf(reason, sizeof reason, "the driver has no tensor-map encoder (older than CUDA 12)");
            else snprintf(reason, sizeof reason, "CUresult %d for the tensor map of %s", results[i], tensors[i]);
            return fa2_fail("cuTensorMapEncodeTiled", reason);
        }
    FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_wgmma_kernel<T, D, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES));
    // Units of work (TileScheduler): one q tile each, or two under a causal mask.
    const long long m_blocks = (p->seqlen_q + C::BLOCK_M - 1) / C::BLOCK_M;
    const long long units = (p->causal ? (m_blocks + 1) / 2 : m_blocks) * p->heads_q * p->batch;
    const long long blocks = std::min(units, (long long)sm_count);
    fa2_wgmma_kernel<T, D, C><<<(unsigned)blocks, C::THREADS, L::BYTES, stream>>>(*p, maps[0], maps[1], maps[2], maps[3]);
    FA2_CUDA_TRY(cudaGetLastError());
    return FA2_OK;
}

// A launch takes ManyItemsConfig when there are more 128-row work items than the
// GPU has SMs and no causal mask (the two configurations differ at d64 only).
template <int D>
static bool takes_many_items_config(const fa2_params *p, int sm_count)
{
    return !p->causal && work_items(p, FewItemsConfig<D>::BLOCK_M) > sm_count;
}

// The shared memory a launch requests: launch_with's L::BYTES, of the configuration it takes.
template <int D>
static int smem_bytes(const fa2_params *p, int sm_count)
{
    return takes_many_items_config<D>(p, sm_count) ? SmemLayout<D, ManyItemsConfig<D>>::BYTES : SmemLayout<D, FewItemsConfig<D>>::BYTES;
}

// The SM count, the most blocks a launch has, is the GPU's (or FA2_EMULATE's: common/device_limits.h).
template <typename T, int D>
static int launch(const fa2_params *p, cudaStream_t stream)
{
    fa2_limits l;
    char why[256];
    if (fa2_limits_get(&l, why, sizeof why) != FA2_LIMITS_OK) return fa2_fail("fa2_limits_get", why);
    return takes_many_items_config<D>(p, l.sm_count) ? launch_with<T, D, ManyItemsConfig<D>>(p, l.sm_count, stream)
                                                     : launch_with<T, D, FewItemsConfig<D>>(p, l.sm_count, stream);
}

extern "C" int fa2_supports(const fa2_params *p, char *why, size_t why_len)
{
    if (!fa2_validate_params(p, why, why_len) || !fa2_refuse_kv_cache(p, why, why_len)) return 0;
    if (p->head_dim != 64 && p->head_dim != 128) {
        if (why) snprintf(why, why_len, "head_dim %d (allowed: 64, 128)", p->head_dim);
        return 0;
    }
    // TMA: every base and stride a multiple of 16 bytes, every stride under 2^40 bytes.
    if (!fa2_validate_alignment(p, 16, "TMA tensor maps", why, why_len)) return 0;
    const int64_t strides[] = {p->q_batch_stride, p->q_row_stride, p->q_head_stride, p->k_batch_stride,
                               p->k_row_stride,   p->k_head_stride, p->v_batch_stride, p->v_row_stride,
                               p->v_head_stride, p->o_batch_stride, p->o_row_stride, p->o_head_stride};
    for (size_t i = 0; i < sizeof strides / sizeof *strides; i++)
        if (strides[i] >= (INT64_C(1) << 39)) {
            if (why) snprintf(why, why_len, "stride %lld (allowed: under 2^39 elements, 2^40 bytes, for TMA tensor maps)", (long long)strides[i]);
            return 0;
        }
    const long long items = work_items(p, FewItemsConfig<64>::BLOCK_M);
    if (items > INT32_MAX) {
        if (why) snprintf(why, why_len, "%lld work items (q tiles of %d rows x heads_q x batch; allowed: at most 2^31 - 1, the tile scheduler's int)",
                          items, FewItemsConfig<64>::BLOCK_M);
        return 0;
    }
    // Last, the device (common/device_limits.h: the GPU's own, or FA2_EMULATE's). With no GPU
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
    // The configuration the launch takes must fit the shared memory one block may have.
    char what[32];
    snprintf(what, sizeof what, "head_dim %d", p->head_dim);
    return fa2_limits_check_smem(p->head_dim == 64 ? smem_bytes<64>(p, l.sm_count) : smem_bytes<128>(p, l.sm_count), what, why, why_len);
}

// The configurations, numbered by their consumer warpgroups: 0 for two, 1 for three.
static_assert(FewItemsConfig<64>::CONSUMERS == 2 && FewItemsConfig<128>::CONSUMERS == 2 &&
                  ManyItemsConfig<64>::CONSUMERS == 3 && ManyItemsConfig<128>::CONSUMERS == 2 &&
                  FewItemsConfig<64>::BLOCK_M == FewItemsConfig<128>::BLOCK_M,
              "fa2_config numbers the configurations by their consumer count, 2 or 3; items are counted in 128-row tiles");
extern "C" int fa2_config_count(void) { return 2; }

extern "C" int fa2_config_smem(const fa2_params *p, int config)
{
    const bool d64 = p->head_dim == 64;
    switch (config) {
    case 0: return d64 ? (int)SmemLayout<64, FewItemsConfig<64>>::BYTES : (int)SmemLayout<128, FewItemsConfig<128>>::BYTES;
    case 1: return d64 ? (int)SmemLayout<64, ManyItemsConfig<64>>::BYTES : -1;  // three consumers: at d64 only
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
    const bool many = p->head_dim == 64 ? takes_many_items_config<64>(p, l.sm_count) : takes_many_items_config<128>(p, l.sm_count);
    const int consumers = p->head_dim == 64 ? (many ? ManyItemsConfig<64>::CONSUMERS : FewItemsConfig<64>::CONSUMERS)
                                            : (many ? ManyItemsConfig<128>::CONSUMERS : FewItemsConfig<128>::CONSUMERS);
    const long long items = work_items(p, FewItemsConfig<64>::BLOCK_M);
    snprintf(what, what_len, "%d consumer warpgroups (%d query rows), %d keys per tile: %lld 128-row items %s %d SMs%s",
             consumers, consumers * WG_M, FewItemsConfig<64>::BLOCK_N, items, items > l.sm_count ? ">" : "<=", l.sm_count,
             p->causal ? ", causal" : "");
    return consumers - 2;
}

extern "C" int fa2_forward(const fa2_params *p, void *stream)
{
    if (!fa2_supports(p, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    cudaStream_t s = (cudaStream_t)stream;
    if (p->dtype == FA2_FP16)
        return p->head_dim == 64 ? launch<__half, 64>(p, s) : launch<__half, 128>(p, s);
    return p->head_dim == 64 ? launch<__nv_bfloat16, 64>(p, s) : launch<__nv_bfloat16, 128>(p, s);
}

extern "C" const char *fa2_name(void) { return "12_persistent"; }
extern "C" const char *fa2_key_change(void) { return "one block per SM loops over the work items: the next item's loads and the last one's O store overlap"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }
extern "C" size_t fa2_workspace_size(const fa2_params *) { return 0; }  // one pass: no partial results

// No backward in this step: every call is refused in one line (the params' own refusal
// where they are bad), and nothing is touched.
extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len) { return fa2_refuse_backward(p, fa2_name(), why, why_len); }
extern "C" int fa2_backward(const fa2_bwd_params *, void *) { return FA2_ERR_UNSUPPORTED; }
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *) { return 0; }
