/* Step 12 - a persistent kernel: one block per SM, looping over the work.
 *
 * One change from step 11: the grid no longer has a block per (q tile, head, batch) but
 * one per SM (fewer when there is less work), and each block works through such items,
 * one after another (docs/12_persistent.md). The rest is step 11's kernel: the producer
 * warpgroup and setmaxnreg, the turns at the tensor cores, the skewed key loop with its
 * K and V barriers, the online softmax with its lazy rescale, the masked and unmasked loop
 * bodies, the configurations. A block of step 11 takes the whole SM and computes one q
 * tile: at B4 H16 N4096 d128 an SM runs 15.5 of them one after another. At each seam it
 * waits for the next block to be launched, to initialise its barriers, to load Q and the
 * first K and V tiles and to run its first S alone; and the block that ends spends its
 * last microseconds on a softmax, a P V and the O store with nothing queued behind them.
 *
 * 1. The grid is min(q tiles, SMs) blocks, the SM count from the device limits
 *    (common/device_limits.h); __launch_bounds__(THREADS, 1) and setmaxnreg's budgets,
 *    which hand out the whole SM's registers, keep it at one block per SM. A block's
 *    registers, barriers and tensor maps stay where they are from one item to the next.
 * 2. Who takes what is decided as the blocks run, as the hardware's block dispatcher did:
 *    the q tiles are one list; block b starts with item b, and after that a counter in the
 *    workspace hands out the list's next item to the block whose producer is ready for it
 *    (TileScheduler). Under a causal mask the list runs longest first across a few heads at
 *    a time, so the shortest items come last and the SMs end together; the blocks running at
 *    one time share the K and V of those few heads, which the L2 serves to all their q tiles.
 *    The last block out sets the counter back to zero for the next call.
 * 3. The barrier phases run on from item to item: the item's key tile nb is the block's
 *    tile first_tile + nb, in stage (first_tile + nb) % STAGES, and Q's phases count the
 *    block's items. Nothing is initialised again, and the producer runs ahead across the
 *    seam: it fills the stages with the next item's K and V as the consumers free them.
 * 4. Q is released after its last use. Each consumer warp arrives on q_empty once its
 *    wgmma.wait_group has seen the item's last S = Q K^T complete, and the producer loads
 *    the next item's Q under this item's last softmax and P V. In step 11 O was staged in
 *    Q's buffer, which could not be refilled before the epilogue had read it out.
 * 5. So O gets a buffer of its own, [D / 64][BLOCK_M][64] in TMA's 128-byte swizzle
 *    (BLOCK_M x D x 2 bytes: 32 KB at d128, 24 KB at d64 with three consumers), and it
 *    leaves by a TMA store: cp.async.bulk.tensor from shared to global memory, issued by
 *    one thread, which goes on at once; cp.async.bulk.wait_group.read waits only until
 *    the copy engine has read the buffer (PTX ISA, cp.async.bulk.wait_group), and is
 *    called when the buffer is written again, an item later. The store is part of this
 *    step because only here is there a next item to run under it: step 11's 16-byte stores
 *    have the consumers move O's bytes themselves at the end of the item (BLOCK_M x D x 2 /
 *    16 stores, each with its shared-memory load), on the critical path of the block, and
 *    with no next item behind them a TMA store would only change who moves them. The
 *    copy clips the rows past seqlen_q (elements outside the tensor are not written),
 *    where step 11 tested each row.
 * 6. Under a causal mask three consumers at d64 lose to two at short sequences (a 192-row
 *    item's key loop is short, and its diagonal tiles, half masked, a larger share of it)
 *    and win from 8,192 keys: they are taken there (CAUSAL_MANY_KEYS).
 * 7. A consumer none of whose 64 rows exists (a head's last q tile, seqlen_q not a multiple
 *    of the item's rows) keeps the protocol, its turns and its stage releases, and skips
 *    the products and the softmax; the consumer's index comes from a shuffle, so the
 *    compiler knows it is the same in every lane of a warp and keeps the branch and the
 *    descriptors uniform. At N1024 and N512 with 192-row items, 1/9 of the rows are padding
 *    (docs/measurements/12_persistent.md has both A/Bs).
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
// query rows, step 09's block) and, at d64 with many work items, 3 (192 rows; see ManyItemsConfig).
constexpr int STAGES = 2;  // shared-memory buffers for each of K and V, as in step 08
constexpr int REGISTERS_PER_SM = 65536;  // every sm_90 SM; setmaxnreg takes a constant
template <int WARPS_, int M_TILES_, int BLOCK_N_>
struct TileConfig {
    static constexpr int WARPS = WARPS_, M_TILES = M_TILES_, BLOCK_N = BLOCK_N_;  // WARPS: the consumers' warps
    static constexpr int CONSUMERS = WARPS * 32 / WARPGROUP;        // consumer warpgroups
    static constexpr int THREADS = WARPGROUP + WARPS * 32;         // the producer warpgroup, then the consumers
    static constexpr int BLOCK_M = WARPS * M_TILES * MMA_M;  // query rows per work item
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
// Two consumers everywhere, except at d64 when there are more 128-row work items than SMs
// and, under a causal mask, at least CAUSAL_MANY_KEYS keys: there a third consumer
// (FlashAttention-3's choice for d64) was measured 5-15% faster on a kernel with step 11's
// loop and 1.07-1.17x on this step's previous version, and with fewer items 0.87x the
// throughput (fewer, larger items leave SMs idle). Under the mask the 192-row items' key
// loops are short at short sequences, and their diagonal tiles (masked, half wasted) a larger
// share: two consumers were 1.26x faster at B16 H16 N1024, 1.02x at B4 H16 N4096; three were
// 1.10x faster at B2 H16 N8192 and 1.15x at B1 H16 N16384; see
// docs/measurements/10_warp_specialized.md and docs/measurements/12_persistent.md.
using FewItemsConfig = TileConfig<8, 1, 128>;
template <int D>
using ManyItemsConfig = TileConfig<D == 64 ? 12 : 8, 1, 128>;

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
    static constexpr uint32_t Q_SLAB_BYTES = C::BLOCK_M * SWIZZLE_BYTES;   // one 64-column slab of Q or O
    static constexpr uint32_t KV_SLAB_BYTES = C::BLOCK_N * SWIZZLE_BYTES;  // one 64-column slab of a K or V tile
    static constexpr uint32_t STAGE_BYTES = C::BLOCK_N * D * 2;            // one K or V tile
    static constexpr uint32_t Q = 0;                                        // [D / 64][BLOCK_M][64]
    static constexpr uint32_t O = Q + C::BLOCK_M * D * 2;                  // [D / 64][BLOCK_M][64], as Q
    static constexpr uint32_t K = O + C::BLOCK_M * D * 2;                  // [STAGES][D / 64][BLOCK_N][64]
    static constexpr uint32_t V = K + STAGES * STAGE_BYTES;               // [STAGES][D / 64][BLOCK_N][64]
    static constexpr uint32_t BARRIERS = V + STAGES * STAGE_BYTES;        // q_full, q_empty, then k_full, v_full, k_empty, v_empty of each stage
    static constexpr uint32_t ITEM = BARRIERS + (2 + 4 * STAGES) * 8;     // unsigned: the work item the producer's warp took last
    static constexpr uint32_t BYTES = ITEM + 16 + SWIZZLE_ATOM;           // + room to align the start
    static_assert(Q_SLAB_BYTES % SWIZZLE_ATOM == 0 && KV_SLAB_BYTES % SWIZZLE_ATOM == 0,
                  "every slab starts on a 1024-byte boundary, where TMA's 128-byte swizzle is anchored");
    static_assert(BYTES <= 227 * 1024, "an sm_90 block may have at most 227 KB of dynamic shared memory");
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

// The reverse: shared memory at src, swizzled as the map says, to the box at (col, row,
// head, batch). Parts of the box outside the tensor are not written. The copy runs behind
// the thread that issued it, in the bulk async-group of that thread.
__device__ __forceinline__ void tma_store(uint32_t src, const CUtensorMap *map, int col, int row, int head, int batch)
{
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"(map), "r"(src), "r"(col), "r"(row), "r"(head), "r"(batch)
                 : "memory");
}

// Rows [row, row + ROWS) of one head, all D columns, from D / 64 slabs, as one bulk async-group.
template <int ROWS, int D>
__device__ __forceinline__ void tma_store_tile(uint32_t src, const CUtensorMap *map, int row, int head, int batch)
{
#pragma unroll
    for (int slab = 0; slab < D / SLAB_COLS; slab++)
        tma_store(src + slab * ROWS * SWIZZLE_BYTES, map, slab * SLAB_COLS, row, head, batch);
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until this thread's bulk async-groups have read their shared memory (which may
// then be written again); the writes to global memory may still be under way.
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// Waits until they are complete, global memory written (before the block's shared memory goes away).
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Orders this thread's ordinary shared-memory stores (the generic proxy) before the copy
// engine's later reads of the same bytes (the async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

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

// Byte offset of logical element (row, col) of a [ROWS][D] tile of 16-bit elements in
// the layout TMA's 128-byte swizzle gives it: D / 64 slabs [ROWS][64], and in each
// 128-byte row the 16-byte chunk (8 elements) XORed with the row's low 3 bits, so the
// 8 rows any fragment write touches land in 8 different chunks of the 128-byte bank
// window. Within a chunk nothing moves, so 32-bit accesses keep their alignment. The
// copy engine writes Q, K and V so; the epilogue stages O so, for the TMA store to read.
template <int ROWS>
__device__ __forceinline__ uint32_t swizzled_offset(int row, int col)
{
    return col / SLAB_COLS * ROWS * SWIZZLE_BYTES + row * SWIZZLE_BYTES + (((col % SLAB_COLS / 8) ^ (row % 8)) * 16 | col % 8 * 2);
}

// ---- the work items, and who takes them -------------------------------------------

// One work item: query rows [m0, m0 + BLOCK_M) of head h in batch b, against key tiles
// [0, n_blocks). And its place on the block's two clocks, which the barrier phases
// follow from item to item: its key tile nb is the block's key tile first_tile + nb, and
// it is the block's item number `ordinal`, its Q the block's ordinal-th. The tile clock
// runs modulo 2^32: the stage of a tile and the parity of its phase depend on it modulo
// 2 STAGES alone, which divides 2^32. Before the first item: no key tiles, ordinal -1.
struct WorkItem {
    int m0, h, h_kv, b;
    int n_blocks = 0;
    uint32_t first_tile = 0;
    int ordinal = -1;
};
static_assert((STAGES & (STAGES - 1)) == 0, "2 STAGES divides 2^32: the block's tile clock may wrap around");

// Who computes what, decided while the blocks run. The work items are the q tiles of every
// (batch, head) pair in one list. Block b starts with item b; after that a counter in the
// workspace hands out the list's next item to whichever block asks, so an SM whose items
// ran short takes more, as the hardware's block dispatcher did for step 11. A block's
// producer asks (atomicAdd) when it has issued its item's last load, a few key tiles before
// the item ends: asked any earlier, the next item would go to the block that started its
// item first, not to the one that will be free first. Under a causal mask an item's work grows
// with its q tile, and the list runs longest first across ORDER_PAIRS pairs at a time:
// q tile m_blocks - 1 of each of the section's pairs, then m_blocks - 2, and so on, so the
// last items handed out are the shortest and the SMs end together; the section is small
// enough that its K and V stay in L2 while its tiles run (FlashAttention-3's causal
// scheduler orders its list the same way: Dao-AILab/flash-attention,
// hopper/tile_scheduler.hpp). Without the mask every item is as long as every other, and
// the list is a head's q tiles in order, head after head. The producer's warp passes each
// item it takes to the consumers through one word of shared memory, guarded by two named
// barriers: ITEM_FULL (written) and ITEM_EMPTY (read by every consumer warp); the item
// after the list's last is the end. The word is written and read with shared-memory atomics,
// one lane of each warp: FlashAttention-3's scheduler passes its tile with a plain store and
// load on the same two barriers, but a plain pair whose order rests on bar.arrive is what
// compute-sanitizer's racecheck reports as a hazard. Atomic accesses are never a data race in
// the PTX memory model, and racecheck passes them; which item a consumer reads is still the
// barriers' doing. (fa2_supports keeps the count of q tiles under 2^31: ints index the list,
// and an item handed out, at most gridDim.x above it, fits an unsigned.)
constexpr int ORDER_PAIRS = 4;

template <typename C, int ITEM_FULL, int ITEM_EMPTY>
struct TileScheduler {
    int *draws, *blocks_left;  // the workspace's two counters (fa2.h: zero when a call begins)
    unsigned *item_smem;       // the item the producer's warp took last, for the consumers
    static constexpr int HANDOFF_THREADS = 32 + C::WARPS * 32;  // the producer's warp and the consumers

    __device__ static int items(const fa2_params &p) { return (p.seqlen_q + C::BLOCK_M - 1) / C::BLOCK_M * p.heads_q * p.batch; }

    // Item `item` of the list into w, its clocks past the item before.
    __device__ static void locate(const fa2_params &p, const int item, WorkItem &w)
    {
        const int m_blocks = (p.seqlen_q + C::BLOCK_M - 1) / C::BLOCK_M, pairs = p.heads_q * p.batch;
        int pair = item / m_blocks, m_block = item % m_blocks;  // without the mask: a head's tiles in order
        if (p.causal) {  // longest first across a section of ORDER_PAIRS pairs (the last section may be short)
            const int section = item / (ORDER_PAIRS * m_blocks), in_section = item % (ORDER_PAIRS * m_blocks);
            const int section_pairs = min(ORDER_PAIRS, pairs - section * ORDER_PAIRS);
            pair = section * ORDER_PAIRS + in_section % section_pairs;
            m_block = m_blocks - 1 - in_section / section_pairs;
        }
        w.first_tile += w.n_blocks, w.ordinal++;
        w.m0 = m_block * C::BLOCK_M, w.h = pair % p.heads_q, w.b = pair / p.heads_q;
        w.h_kv = w.h / (p.heads_q / p.heads_kv);  // GQA: several query heads share one K/V head
        // Causal: key tiles past the last key the item's last row sees are skipped.
        const int key_end = p.causal ? min(p.seqlen_k, max(0, w.m0 + C::BLOCK_M + p.seqlen_k - p.seqlen_q)) : p.seqlen_k;
        w.n_blocks = (key_end + C::BLOCK_N - 1) / C::BLOCK_N;
    }

    // The producer's warp: lane 0 takes the next item from the queue, and the warp publishes
    // it once every consumer warp has read the one before (at once for the first: the
    // consumers start with ITEM_EMPTY open). false at the list's end, and the block counts
    // itself out; the last block out sets both counters to zero again for the next call
    // (every block drew its last item before it counted itself out, and the fence orders
    // the two).
    __device__ bool next_producer(const fa2_params &p, WorkItem &w, const int lane)
    {
        __syncwarp();  // bar.sync and bar.arrive take the whole warp at once
        unsigned item = 0;
        if (lane == 0) item = gridDim.x + (unsigned)atomicAdd(draws, 1);
        item = __shfl_sync(0xffffffffu, item, 0);
        named_barrier_sync(ITEM_EMPTY, HANDOFF_THREADS);
        if (lane == 0) atomicExch(item_smem, item);
        named_barrier_arrive(ITEM_FULL, HANDOFF_THREADS);
        if (item < (unsigned)items(p)) {
            locate(p, (int)item, w);
            return true;
        }
        if (lane == 0) {
            __threadfence();
            if (atomicAdd(blocks_left, 1) == (int)gridDim.x - 1) {
                __threadfence();
                *draws = 0;
                *blocks_left = 0;
            }
        }
        return false;
    }

    // A consumer thread: the block's first item, and the word opened to the producer's first publication.
    __device__ void start_consumer(const fa2_params &p, WorkItem &w)
    {
        locate(p, blockIdx.x, w);
        named_barrier_arrive(ITEM_EMPTY, HANDOFF_THREADS);
    }

    // A consumer thread: the next item the producer's warp published (lane 0 reads it, an
    // atomic add of 0, for its warp), the word given back unless it is the list's end.
    __device__ bool next_consumer(const fa2_params &p, WorkItem &w, const int lane)
    {
        named_barrier_sync(ITEM_FULL, HANDOFF_THREADS);
        unsigned item = 0;
        if (lane == 0) item = atomicAdd(item_smem, 0u);
        item = __shfl_sync(0xffffffffu, item, 0);
        if (item >= (unsigned)items(p)) return false;
        named_barrier_arrive(ITEM_EMPTY, HANDOFF_THREADS);
        locate(p, (int)item, w);
        return true;
    }
};

// ---- the kernel --------------------------------------------------------------

// One block per SM (or per work item, when there are fewer), for the whole launch, each
// taking work items until none is left (TileScheduler; `queue`: its two counters).
template <typename T, int D, typename C>
__global__ void __launch_bounds__(C::THREADS, 1)
    fa2_wgmma_kernel(fa2_params p, const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                   const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap o_map, int *queue)
{
    constexpr int BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, M_TILES = C::M_TILES;
    constexpr int CONSUMERS = C::CONSUMERS, CONSUMER_THREADS = C::WARPS * 32;  // after the producer's 128 threads
    static_assert(D % WG_K == 0, "Q K^T consumes the head dim 16 at a time (the k of m64nNk16)");
    static_assert(BLOCK_N % WG_K == 0, "P V consumes keys 16 at a time (the k of m64nNk16)");
    static_assert(STAGES >= 2, "the copy of tile nb + 1 needs its own buffer while tile nb is read");
    // Named barriers (0 is __syncthreads'): consumer c waits for its turn at the tensor
    // cores on TURN + c, the consumers meet for the epilogue on EPILOGUE, and the work
    // items pass from the producer's warp to them on ITEM_FULL and ITEM_EMPTY.
    constexpr int TURN = 1, EPILOGUE = TURN + CONSUMERS, ITEM_FULL = EPILOGUE + 1, ITEM_EMPTY = ITEM_FULL + 1;
    static_assert(ITEM_EMPTY < 16, "a block has 16 named barriers, ids 0-15");
    using L = SmemLayout<C, D>;
    extern __shared__ __align__(16) uint16_t smem[];
    // The tiles and barriers as shared-state-space byte addresses (_saddr), the form TMA,
    // mbarriers and the wgmma descriptors take, from the first 1024-byte boundary.
    const uint32_t smem_saddr = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t align_pad = (SWIZZLE_ATOM - smem_saddr % SWIZZLE_ATOM) % SWIZZLE_ATOM;
    constexpr uint32_t STAGE_BYTES = L::STAGE_BYTES;  // a K or V tile
    const uint32_t q_saddr = smem_saddr + align_pad + L::Q;  // [D / 64][BLOCK_M][64]
    const uint32_t o_saddr = smem_saddr + align_pad + L::O;  // [D / 64][BLOCK_M][64]
    const uint32_t k_saddr = smem_saddr + align_pad + L::K;  // [STAGES][D / 64][BLOCK_N][64]
    const uint32_t v_saddr = smem_saddr + align_pad + L::V;  // [STAGES][D / 64][BLOCK_N][64]
    const uint32_t q_full = smem_saddr + align_pad + L::BARRIERS;  // Q has landed
    const uint32_t q_empty = q_full + 8;                           // every consumer warp has run its last S = Q K^T
    const uint32_t k_full = q_empty + 8;                           // [STAGES]: K of the stage's tile has landed
    const uint32_t v_full = k_full + STAGES * 8;                   // [STAGES]: V of the stage's tile has landed
    const uint32_t k_empty = v_full + STAGES * 8;                  // [STAGES]: every consumer warp is done with its K
    const uint32_t v_empty = k_empty + STAGES * 8;                 // [STAGES]: every consumer warp is done with its V

    // The block's work items as the queue hands them out, and the item this thread is at.
    TileScheduler<C, ITEM_FULL, ITEM_EMPTY> schedule{queue, queue + 1, reinterpret_cast<unsigned *>(reinterpret_cast<uint8_t *>(smem) + align_pad + L::ITEM)};
    WorkItem w;
    const int warp = threadIdx.x / 32 - WARPGROUP / 32, lane = threadIdx.x % 32;  // warp: the consumers' 0, 1, ...
    const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: row group, thread in group
    const int shift = p.seqlen_k - p.seqlen_q;  // causal: row i sees keys j <= i + shift
    const float scale_log2 = p.softmax_scale * LOG2E;  // exp(x * scale) = exp2(x * scale * log2 e)
    const int warp_row0 = warp * M_TILES * MMA_M;      // this consumer warp's first row in the item
    // Skip the O rescale while the running max is close enough (see the softmax below):
    // with every product waited for, the D / 2 FMUL per row pair sit between two wgmma
    // on the warp's own time, at every head dim.
    constexpr bool LAZY_RESCALE = true;

    // The item's key tile nb is the block's tile first_tile + nb: its stage, and the parity
    // of the stage's phase that tile is in (its (first_tile + nb) / STAGES-th use).
    auto stage_of = [&](const int nb) { return (w.first_tile + nb) % STAGES; };
    auto parity_of = [&](const int nb) { return (w.first_tile + nb) / STAGES % 2; };

    // Thread 0, the producer's, issues every copy: K or V of key tile nb into its stage,
    // counted on the stage's full barrier of that tensor (rows past seqlen_k land as zeros).
    // Before refilling a stage it waits until every consumer warp has released the tile that
    // was there, STAGES block tiles back, maybe of the item before: the stage's empty phase
    // before the one of tile nb, of parity parity_of(nb) ^ 1. A stage's first fill waits for
    // phase -1, the one before a barrier's first: it counts as complete (PTX ISA,
    // mbarrier.test_wait), so the wait returns at once and needs no test of the clock.
    auto load = [&](const int nb, const uint32_t tile_saddr, const CUtensorMap *map, const uint32_t full, const uint32_t empty) {
        const uint32_t stage = stage_of(nb);
        mbarrier_wait(empty + stage * 8, parity_of(nb) ^ 1);
        mbarrier_arrive_expect_tx(full + stage * 8, STAGE_BYTES);
        tma_load_tile<BLOCK_N, D>(tile_saddr + stage * STAGE_BYTES, map, full + stage * 8, nb * BLOCK_N, w.h_kv, w.b);
    };
    // Prologue: the barriers.
    if (threadIdx.x == 0) {
        mbarrier_init(q_full, 1);  // one arrival, the expect_tx's; the bytes do the rest
        mbarrier_init(q_empty, C::WARPS);  // one arrival per consumer warp
        for (int s = 0; s < STAGES; s++) {
            mbarrier_init(k_full + s * 8, 1);
            mbarrier_init(v_full + s * 8, 1);
            mbarrier_init(k_empty + s * 8, C::WARPS);  // one arrival per consumer warp
            mbarrier_init(v_empty + s * 8, C::WARPS);
        }
        fence_barrier_init();
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them

    // The producer warpgroup: its registers go to the consumers, and its first warp takes
    // the work items, thread 0 copying, item after item, Q once the consumers have released
    // the item before's (q_empty: after its last S), then every key tile, STAGES ahead of
    // the consumers at most: K_nb once the K STAGES block tiles back is released (after its
    // S), V_nb once that V is (after its P V, a turn later).
    if (threadIdx.x < WARPGROUP) {
        setmaxnreg_dec<C::PRODUCER_REGS>();
        if (threadIdx.x < 32) {
            schedule.locate(p, blockIdx.x, w);  // the block's first item: its own index, from no queue
            do {
                if (threadIdx.x == 0) {
                    mbarrier_wait(q_empty, (w.ordinal + 1) % 2);  // phase ordinal - 1: at once for the first item
                    mbarrier_arrive_expect_tx(q_full, BLOCK_M * D * 2);  // rows past seqlen_q land as zeros, and count
                    tma_load_tile<BLOCK_M, D>(q_saddr, &q_map, q_full, w.m0, w.h, w.b);
                    for (int nb = 0; nb < w.n_blocks; nb++) {
                        load(nb, k_saddr, &k_map, k_full, k_empty);
                        load(nb, v_saddr, &v_map, v_full, v_empty);
                    }
                }
            } while (schedule.next_producer(p, w, lane));
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

    // Turns at the tensor cores: consumer c issues its products only after consumer c - 1
    // has issued its own (c - 1 arrives on TURN + c, c syncs there: 2 x 128 threads), so
    // while one consumer is in its softmax the other's products run. Every consumer takes
    // n_blocks + 1 turns (S_0; S_n with P_{n-1} V_{n-1} for each later tile; P_last V_last);
    // the last consumer hands out the first turn before the loop and keeps its own last one.
    const int consumer = __shfl_sync(0xffffffffu, warp / 4, 0);  // uniform in the warp, as the compiler then knows
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
        const uint32_t stage_off = stage_of(nb) * STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < D / WG_K; kk++)
            wgmma_ss<T, BLOCK_N>(s_acc[0], desc_advance(q_desc, kk / 4 * L::Q_SLAB_BYTES + kk % 4 * 32),
                                 desc_advance(k_desc, stage_off + kk / 4 * L::KV_SLAB_BYTES + kk % 4 * 32), kk > 0);
        wgmma_commit();
    };
    // O += P_nb V_nb, one commit group: BLOCK_N / 16 wgmma, each 16 keys = 16 rows of 128
    // bytes further into V. p_frag stays live until the group has completed.
    auto issue_pv = [&](const int nb) {
        const uint32_t stage_off = stage_of(nb) * STAGE_BYTES;
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
                        int row = w.m0 + warp_row0 + mt * MMA_M + g + (e >= 2 ? 8 : 0), key = n0 + nt * MMA_N + 2 * t + (e & 1);
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

    // S_nb is done: this warp's wgmma reading K_nb are, one of the WARPS arrivals the
    // producer waits for; and after the item's last S those reading Q, which the producer
    // then refills with the next item's Q under this item's last softmax and P V.
    auto release_after_s = [&](const int nb) {
        if (lane == 0) mbarrier_arrive(k_empty + stage_of(nb) * 8);
        if (lane == 0 && nb == w.n_blocks - 1) mbarrier_arrive(q_empty);
    };

    // One key tile nb >= 1 of the skewed loop: the loop body, instantiated twice. Tiles
    // that need no mask (all but the diagonal ones and the seqlen_k tail) run a copy
    // compiled with no masking code at all, so its compares and selects, and the register
    // shuffling a run-time branch around them costs, leave the hot loop.
    auto key_tile = [&](const int nb, auto masked) {
        // K of tile nb and V of tile nb - 1 have landed; the waits on the mbarriers are each thread's own.
        mbarrier_wait(k_full + stage_of(nb) * 8, parity_of(nb));
        mbarrier_wait(v_full + stage_of(nb - 1) * 8, parity_of(nb - 1));

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
        release_after_s(nb);

        const bool rescale = softmax(nb, masked);  // while P_{nb-1} V_{nb-1} runs
        wgmma_wait<0>();  // P_{nb-1} V_{nb-1} is done: O may be rescaled, p_frag rewritten
        fence_registers(o_acc[0]);
        fence_registers(p_frag);
        if (lane == 0) mbarrier_arrive(v_empty + stage_of(nb - 1) * 8);  // this warp's wgmma reading V_{nb-1} are done
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

    // The block's work items, one after another; the barrier phases run on from each to the next.
    schedule.start_consumer(p, w);
    do {
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++) {
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt++) o_acc[mt][dt][0] = o_acc[mt][dt][1] = o_acc[mt][dt][2] = o_acc[mt][dt][3] = 0.0f;
            m_run[mt][0] = m_run[mt][1] = -INFINITY;
            l_run[mt][0] = l_run[mt][1] = 0.0f;
        }

        // Tiles from first_masked on cross the diagonal (causal: some key is past the
        // first row's last visible key) or hold the seqlen_k tail.
        int first_masked = p.seqlen_k / BLOCK_N;
        if (p.causal) first_masked = min(first_masked, max(0, (w.m0 + shift + 1) / BLOCK_N));
        first_masked = min(first_masked, w.n_blocks);
        mbarrier_wait(q_full, w.ordinal % 2);
        if (w.n_blocks == 0 && lane == 0) mbarrier_arrive(q_empty);  // a causal item that sees no key: its Q is not read
        // None of this consumer's 64 rows exists (a head's last q tile, seqlen_q not a multiple
        // of BLOCK_M): it keeps the protocol (its turns, its stage releases) and skips the work.
        const bool idle = w.m0 + consumer * WG_M >= p.seqlen_q;
        if (idle && w.n_blocks > 0) {
            if (consumer == CONSUMERS - 1) named_barrier_arrive(TURN, 2 * WARPGROUP);  // the first turn
            mbarrier_wait(k_full + stage_of(0) * 8, parity_of(0));  // a release must not run ahead of its phase
            turn_begin();
            turn_end(false);
            release_after_s(0);
            for (int nb = 1; nb < w.n_blocks; nb++) {
                mbarrier_wait(k_full + stage_of(nb) * 8, parity_of(nb));
                mbarrier_wait(v_full + stage_of(nb - 1) * 8, parity_of(nb - 1));
                turn_begin();
                turn_end(false);
                release_after_s(nb);
                if (lane == 0) mbarrier_arrive(v_empty + stage_of(nb - 1) * 8);
            }
            const int last = w.n_blocks - 1;
            mbarrier_wait(v_full + stage_of(last) * 8, parity_of(last));
            turn_begin();
            turn_end(true);
            if (lane == 0) mbarrier_arrive(v_empty + stage_of(last) * 8);
        }
        if (!idle && w.n_blocks > 0) {
            if (consumer == CONSUMERS - 1) named_barrier_arrive(TURN, 2 * WARPGROUP);  // the first turn
            // The skew's prologue: S_0 alone in the first turn, and its softmax with nothing
            // under it. Masked whatever first_masked says (step 11, point 5); O is still zero,
            // so a correction has nothing to rescale.
            mbarrier_wait(k_full + stage_of(0) * 8, parity_of(0));
            turn_begin();
            fence_registers(s_acc[0]);
            wgmma_fence();
            issue_s(0);
            turn_end(false);
            wgmma_wait<0>();
            fence_registers(s_acc[0]);
            release_after_s(0);
            softmax(0, std::true_type{});
            pack_p();
        }
        for (int nb = 1; !idle && nb < first_masked; nb++) key_tile(nb, std::false_type{});
        for (int nb = max(1, first_masked); !idle && nb < w.n_blocks; nb++) key_tile(nb, std::true_type{});
        if (!idle && w.n_blocks > 0) {
            // The skew's epilogue: P_last V_last alone in the last turn.
            const int last = w.n_blocks - 1;
            mbarrier_wait(v_full + stage_of(last) * 8, parity_of(last));
            turn_begin();
            fence_registers(o_acc[0]);
            wgmma_fence();
            issue_pv(last);
            turn_end(true);
            wgmma_wait<0>();
            fence_registers(o_acc[0]);
            fence_registers(p_frag);
            if (lane == 0) mbarrier_arrive(v_empty + stage_of(last) * 8);
        }

        // Epilogue, 1: finish the row sums across the quad, normalise in registers,
        // write O into its own buffer, swizzled as the O tensor map expects (a fragment's
        // 8 rows hit 8 different chunks, so the 4-byte stores are conflict-free), and LSE
        // directly. The buffer holds the item before's O until its store has read it: the
        // thread that issued that store waits for it, and the barrier tells the others.
        // The producer takes no part: the consumers meet on a named barrier, not __syncthreads.
        if (threadIdx.x == WARPGROUP) tma_store_wait_read();
        named_barrier_sync(EPILOGUE, CONSUMER_THREADS);
        uint8_t *o_smem = reinterpret_cast<uint8_t *>(smem) + align_pad + L::O;  // [D / 64][BLOCK_M][64]
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
                    *reinterpret_cast<uint32_t *>(o_smem + swizzled_offset<BLOCK_M>(row, dt * MMA_N + 2 * t)) =
                        pack2<T>(o_acc[mt][dt][2 * r] * inv_l, o_acc[mt][dt][2 * r + 1] * inv_l);
                if (p.lse && t == 0 && w.m0 + row < p.seqlen_q)
                    p.lse[((int64_t)w.b * p.heads_q + w.h) * p.seqlen_q + w.m0 + row] =
                        l_run[mt][r] != 0.0f ? (m_run[mt][r] + log2f(l_run[mt][r])) * LN2 : -INFINITY;
            }
        fence_proxy_async();  // this thread's stores of O, before the copy engine reads them
        named_barrier_sync(EPILOGUE, CONSUMER_THREADS);

        // Epilogue, 2: one thread hands O to the copy engine and goes on to the next item
        // without waiting; rows past seqlen_q are outside the tensor, and not written. Its
        // warp meets again before the next item: without that point of reconvergence ptxas
        // takes the whole item loop for divergent and holds the item and the scheduler in
        // vector registers, not uniform ones, and the three consumers' 160 spill them.
        if (threadIdx.x == WARPGROUP) tma_store_tile<BLOCK_M, D>(o_saddr, &o_map, w.m0, w.h, w.b);
        __syncwarp();
    } while (schedule.next_consumer(p, w, lane));
    // The last store must be done before the block, and its shared memory, go away.
    if (threadIdx.x == WARPGROUP) tma_store_wait_all();
}

// ---- launcher and ABI --------------------------------------------------------

// Work items of `block_m` query rows: one per (query tile, head, batch).
static long long work_items(const fa2_params *p, int block_m)
{
    return (long long)((p->seqlen_q + block_m - 1) / block_m) * p->heads_q * p->batch;
}

// A launch takes ManyItemsConfig when there are more 128-row work items than the GPU has
// SMs and, under a causal mask, the keys reach CAUSAL_MANY_KEYS (the two configurations
// differ at d64 only).
constexpr int CAUSAL_MANY_KEYS = 8192;
static bool many_items(const fa2_params *p, int sm_count)
{
    return (!p->causal || p->seqlen_k >= CAUSAL_MANY_KEYS) && work_items(p, FewItemsConfig::BLOCK_M) > sm_count;
}

// The shared memory a launch requests: that of the configuration it takes.
template <int D>
static int smem_bytes(const fa2_params *p, int sm_count)
{
    return many_items(p, sm_count) ? smem_bytes_of<ManyItemsConfig<D>, D>() : smem_bytes_of<FewItemsConfig, D>();
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

// A tensor map over one of Q, K, V, O: 4 dims, innermost first (head_dim, seqlen, heads,
// batch), strides in bytes for the outer three. A box is [box_rows][64] of one head:
// rows past seqlen belong to no other head, they are outside the tensor (zeros when
// loaded, not written when stored).
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
static int launch_with(const fa2_params *p, int sm_count, void *stream)
{
    constexpr int smem_bytes = smem_bytes_of<C, D>();
    CUtensorMap maps[4];
    const int results[4] = {
        make_tensor_map(&maps[0], p->q, p->dtype, D, p->seqlen_q, p->heads_q, p->batch, p->q_row_stride, p->q_head_stride, p->q_batch_stride, C::BLOCK_M),
        make_tensor_map(&maps[1], p->k, p->dtype, D, p->seqlen_k, p->heads_kv, p->batch, p->k_row_stride, p->k_head_stride, p->k_batch_stride, C::BLOCK_N),
        make_tensor_map(&maps[2], p->v, p->dtype, D, p->seqlen_k, p->heads_kv, p->batch, p->v_row_stride, p->v_head_stride, p->v_batch_stride, C::BLOCK_N),
        make_tensor_map(&maps[3], p->o, p->dtype, D, p->seqlen_q, p->heads_q, p->batch, p->o_row_stride, p->o_head_stride, p->o_batch_stride, C::BLOCK_M)};
    static const char *const tensors[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++)
        if (results[i] != 0) {
            char reason[96];
            if (results[i] < 0) snprintf(reason, sizeof reason, "the driver has no tensor-map encoder (older than CUDA 12)");
            else snprintf(reason, sizeof reason, "CUresult %d for the tensor map of %s", results[i], tensors[i]);
            return fa2_fail("cuTensorMapEncodeTiled", reason);
        }
    FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_wgmma_kernel<T, D, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    // One block per SM, or per work item (a q tile) when there are fewer; the queue is the
    // last 16 bytes of the workspace's counters (fa2.h), zero when the call begins.
    const long long items = work_items(p, C::BLOCK_M);
    const unsigned blocks = (unsigned)(items < sm_count ? items : sm_count);
    int *queue = (int *)((char *)p->workspace + fa2_workspace_counter_bytes(p)) - 4;
    fa2_wgmma_kernel<T, D, C><<<blocks, C::THREADS, smem_bytes, (cudaStream_t)stream>>>(*p, maps[0], maps[1], maps[2], maps[3], queue);
    FA2_CUDA_TRY(cudaGetLastError());
    return FA2_OK;
}

// The SM count, the most blocks a launch has, is the GPU's (or FA2_EMULATE's: common/device_limits.h).
// One launch, whatever the batch and heads: its grid is one-dimensional.
template <typename T, int D>
static int launch(const fa2_params *p, void *stream)
{
    fa2_limits l;
    char why[256];
    if (fa2_limits_get(&l, why, sizeof why) != FA2_LIMITS_OK) return fa2_fail("fa2_limits_get", why);
    return many_items(p, l.sm_count) ? launch_with<T, D, ManyItemsConfig<D>>(p, l.sm_count, stream)
                                     : launch_with<T, D, FewItemsConfig>(p, l.sm_count, stream);
}

// Whether the params themselves are ones this step computes (the GPU aside): the ABI's
// checks, and this step's own.
static int params_supported(const fa2_params *p, char *why, size_t why_len)
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
                               p->v_head_stride,  p->o_batch_stride, p->o_row_stride, p->o_head_stride};
    for (size_t i = 0; i < sizeof strides / sizeof *strides; i++)
        if (strides[i] >= (INT64_C(1) << 39)) {
            if (why) snprintf(why, why_len, "stride %lld (allowed: under 2^39 elements, 2^40 bytes, for TMA tensor maps)", (long long)strides[i]);
            return 0;
        }
    const long long items = work_items(p, FewItemsConfig::BLOCK_M);
    if (items > INT32_MAX) {
        if (why) snprintf(why, why_len, "%lld work items (q tiles of %d rows x heads_q x batch; allowed: at most 2^31 - 1, the tile scheduler's int)",
                          items, FewItemsConfig::BLOCK_M);
        return 0;
    }
    return 1;
}

// The work queue's two counters (TileScheduler), in the counters every forward workspace
// starts with (fa2.h); none for params the step refuses.
extern "C" size_t fa2_workspace_size(const fa2_params *p) { return params_supported(p, NULL, 0) ? fa2_workspace_counter_bytes(p) : 0; }

extern "C" int fa2_supports(const fa2_params *p, char *why, size_t why_len)
{
    if (!params_supported(p, why, why_len) || !fa2_validate_workspace(p, fa2_workspace_size(p), why, why_len)) return 0;
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
static_assert(FewItemsConfig::CONSUMERS == 2 && ManyItemsConfig<64>::CONSUMERS == 3 && ManyItemsConfig<128>::CONSUMERS == 2,
              "fa2_config numbers the configurations by their consumer count, 2 or 3");
extern "C" int fa2_config_count(void) { return 2; }

extern "C" int fa2_config_smem(const fa2_params *p, int config)
{
    const bool d64 = p->head_dim == 64;
    switch (config) {
    case 0: return d64 ? smem_bytes_of<FewItemsConfig, 64>() : smem_bytes_of<FewItemsConfig, 128>();
    case 1: return d64 ? smem_bytes_of<ManyItemsConfig<64>, 64>() : -1;  // three consumers: at d64 only
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
    const bool many = many_items(p, l.sm_count);
    const int consumers = many && p->head_dim == 64 ? ManyItemsConfig<64>::CONSUMERS : FewItemsConfig::CONSUMERS;
    const int config = consumers - 2, block_m = consumers * WG_M;
    const long long items = work_items(p, FewItemsConfig::BLOCK_M);
    char mask[64] = "";
    if (p->causal) snprintf(mask, sizeof mask, ", causal over %d keys %s %d", p->seqlen_k, p->seqlen_k >= CAUSAL_MANY_KEYS ? ">=" : "<", CAUSAL_MANY_KEYS);
    snprintf(what, what_len, "a producer and %d consumer warpgroups (%d query rows), %d keys per tile, %d stages, %d KB: %lld work items on at most %d blocks (%lld of 128 rows %s %d SMs%s)",
             consumers, block_m, FewItemsConfig::BLOCK_N, STAGES, fa2_config_smem(p, config) / 1024, work_items(p, block_m),
             l.sm_count, items, items > l.sm_count ? ">" : "<=", l.sm_count, mask);
    return config;
}

extern "C" int fa2_forward(const fa2_params *p, void *stream)
{
    if (!fa2_supports(p, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    if (p->dtype == FA2_FP16)
        return p->head_dim == 64 ? launch<__half, 64>(p, stream) : launch<__half, 128>(p, stream);
    return p->head_dim == 64 ? launch<__nv_bfloat16, 64>(p, stream) : launch<__nv_bfloat16, 128>(p, stream);
}

extern "C" const char *fa2_name(void) { return "12_persistent"; }
extern "C" const char *fa2_key_change(void) { return "one block per SM loops over the work items: the next item's loads and the last one's O store overlap"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }

// No backward in this step: every call is refused in one line (the params' own refusal
// where they are bad), and nothing is touched.
extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len) { return fa2_refuse_backward(p, fa2_name(), why, why_len); }
extern "C" int fa2_backward(const fa2_bwd_params *, void *) { return FA2_ERR_UNSUPPORTED; }
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *) { return 0; }
