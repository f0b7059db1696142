/* Step 14 - the backward pass: dQ, dK and dV on mma.sync.
 *
 * Base: step 07 (07_tuned), the portable kernel; `make step=14 diff` shows what
 * changed against it. Runs on every GPU since Ampere, as step 07 does. The forward
 * is step 07's, unchanged, so that one library runs forward and backward (the
 * harness's --backward, python/fa2.py's autograd); everything below "the backward
 * pass" is new.
 *
 * FlashAttention-2's backward (Dao 2023, "FlashAttention-2: Faster Attention with
 * Better Parallelism and Work Partitioning", Algorithm 2), in three kernels:
 *
 * 1. bwd_prep_kernel: D = rowsum(dO * O) per query row, fp32, into the workspace
 *    (the softmax's own term of dS = P * (dP - D)), and dQ's fp32 accumulator zeroed.
 *
 * 2. fa2_bwd_kernel: one block per (key block of BLOCK_N keys, kv head, batch). K_j and
 *    V_j stay in shared memory for the whole block; dK_j and dV_j are fp32 mma
 *    accumulators in registers; the block walks the query blocks i of 64 rows (128 in the
 *    d64 tile below) that see its keys (causal: bottom-right aligned as the forward, so
 *    from row n0 - (seqlen_k - seqlen_q) on), of every query head of the kv head's GQA
 *    group. For each: Q_i and dO_i by cp.async into swizzled shared memory, LSE_i and D_i
 *    from global memory, then
 *      S  = Q_i K_j^T           P = exp2(S scale log2e - LSE log2e)   (masked)   -> smem
 *      dP = dO_i V_j^T          dS = P * (dP - D_i)                               -> smem
 *      dV_j += P^T dO_i         dK_j += dS^T Q_i
 *      dQ_i += dS K_j  (fp32 reductions into the workspace: "dQ's reductions" below)
 *    with FlashAttention-2's work split (flash_bwd_launch_template.h and kernel_traits.h of
 *    Dao-AILab/flash-attention give the tile shapes): each product has its own tiling of
 *    the warps, every warp tile 32 rows deep. BwdWide, 64 queries x 128 keys and 8 warps
 *    (FA2's d128 tile where a block may have 144 KB):
 *      S, dP    2 (queries) x 4 (keys): 32 x 32 each; A = Q or dO, B = K or V, ldmatrix
 *      dV, dK   4 (keys) x 2 (head dim): 32 keys x D/2; A = P^T or dS^T by ldmatrix.trans
 *               of the P and dS tiles, B = dO or Q by ldmatrix.trans
 *      dQ       2 (queries) x 4 (head dim): 32 x D/4; A = dS by ldmatrix, B = K by .trans
 *    P and dS go through shared memory because the warps that hold a query block's scores
 *    (split by query) are not those that need them as operands (split by key, for dV and
 *    dK, or over all keys, for dQ). Shared memory at d128: K, V 32 KB each, Q, dO 16 KB
 *    each per buffer, two buffers, P, dS 16 KB each: 160 KB, which A100 (163 KB), H100
 *    and H200 (227 KB) blocks take. BwdNarrow, 64 x 64 and 4 warps, 2 x 2 for every
 *    product (the same code), one Q/dO buffer: 80 KB at d128, for GPUs whose blocks get
 *    99 KB (8.6, 8.9, 12.x); at d64 the wide tile takes 96 KB and runs everywhere.
 *
 *    dQ's reductions. A C fragment of dQ holds 2 floats of each of 8 rows per lane group,
 *    so a red.global.add.f32 straight from the fragments touches 8 rows x 16 bytes: 8
 *    cache lines and 8 L2 sectors per instruction, where FA2's order (one row's 32
 *    consecutive floats) touches 1 line and 4 full sectors. Where the block's shared
 *    memory has room for a [64][D + 8] fp32 tile more (BwdWideStaged: 194 KB at d128, 114
 *    KB at d64; H100 and H200 at both, the A100 at d64), each warp stores its fragments
 *    there, the 4 warps that share a query half meet at a named barrier, and each adds
 *    whole rows: 32 floats of one row per instruction before sm_90, 128 (one
 *    red.global.add.v4.f32 per lane, 4 full lines) on sm_90. The products' order changes
 *    with it: dQ first, dV and dK after the reductions, so that the reductions drain under
 *    their 128 mma. Elsewhere the fragments' atomics stay (the A100 at d128, the 99 KB
 *    GPUs). The walk over query blocks carries its position (query head, first row) from
 *    step to step instead of dividing the step index at every use, which also removed the
 *    spill of the loop's invariants on sm_90. Measured on an H100, 3 rounds: 6.59 -> 4.82
 *    ms at B4 H16 N4096 d128 (-27%; -18% at d64), the walk alone 4% of it; profile
 *    counts and the other variants tried on docs/measurements/14_backward.md.
 *
 *    The 128-query tile (BwdTallStaged, d64 only). At d64 a 64-query step runs 160 mma
 *    per warp, half the d128 step's, for the same per-step costs (two __syncthreads, LSE
 *    and D loads, the dQ barrier, the loop head). FA2 takes 128 queries x 128 keys at d64
 *    where a block may have 144 KB; so does this kernel where its 196 KB fit (H100, H200):
 *    8 warps, 4 (queries) x 2 for S and dP (warp tiles 32 queries x 64 keys), dK and dV,
 *    and dQ, staged in four query slices of 32 rows, each at its own named barrier (1 to
 *    4). 320 mma per warp and step, as at d128; half the steps. Measured on an H100, 3
 *    rounds: 3.25 -> 2.78 ms at B4 H16 N4096 d64 (-14%), the d128 shapes unchanged.
 *
 * 3. bwd_convert_kernel: dQ = scale x the fp32 accumulator, rounded to the dtype and
 *    written at dq's strides. (dK is scaled in registers before its store.)
 *
 * GQA and MQA: the dK and dV of a kv head sum over the query heads of its group. The
 * block loops over the group itself, so dK_j and dV_j keep accumulating in registers
 * and are written once, in the dtype: no fp32 workspace for them, no atomics, and no
 * second pass; the price is a grid of heads_kv rather than heads_q blocks per key
 * block (MQA fills fewer SMs at short seqlen_k).
 *
 * Determinism: the blocks of one kv head add into the same dQ rows in whatever order
 * they reach the atomics, and fp32 addition is not associative, so dQ can differ in
 * its last bits from run to run. FA2_DETERMINISTIC=1 in the environment (read at
 * each call, as FA2_EMULATE) launches the main kernel over S key blocks at a time
 * instead, S splits: block x of each launch adds its key block's dQ into partial x of
 * the workspace, with the same atomics, but no two blocks of a launch share a partial
 * and the launches on one stream run in order, so each element's additions come in one
 * order; the convert kernel sums the S partials in order: the same bits every run, for
 * a workspace of S fp32 copies of dQ, S at most MAX_DQ_SPLITS
 * (fa2_backward_workspace_size reads the variable too). (A loop over key blocks inside
 * the kernel would do the same in one launch, but the state it carries spills up to 104
 * bytes at d128, CUDA 13.0, sm_86 to sm_90; plain loads and stores in place of the
 * atomics, 20 to 36 bytes on sm_90.)
 *
 * Why this split (the counts are the kernel's loops). The simpler split gives each of 4
 * warps 16 keys of a 64-key block and computes S^T = K Q^T, so that P^T and dS^T come out
 * of the C fragments already as A fragments; but every warp then reads all 64 rows of Q_i
 * and dO_i for its 16 keys. Per warp and 64 x 64 step at d128 it runs 320 mma.sync for
 * 180 ldmatrix.x4 (1.8 per load);
 * on an H100 (B4 H16 N4096 d128 fp16) it took 10.07 ms against torch's FA2 backward's
 * 4.55 ms, and Nsight Compute put its tensor pipe at 21%, short_scoreboard (mma waiting
 * on ldmatrix) at 40% of the stall samples and the dQ atomics at ~10% of instructions.
 * Here a warp tile is 32 rows of both operands, so a fragment feeds 2 to 4 mma: per warp
 * and 64 x 128 step, again 320 mma (64 each for S, dP, dV, dK, dQ), for 144 ldmatrix.x4
 * (2.2 per load; 32 for S and for dP, 24 for dV and for dK, 32 for dQ) and 32 4-byte
 * stores of P and dS (one wavefront each, 8 ldmatrix.x4's worth): about 16% fewer
 * shared-memory wavefronts per mma. A block reads Q_i, dO_i, LSE_i and D_i once per 128
 * keys instead of per 64, and adds its dQ once per 128 keys: half the atomics. A
 * prediction, from those counts alone: 1.2x to 1.5x at B4 H16 N4096 d128 (10.07 ms to
 * 7 to 8.5 ms), about 1.2x from the wavefronts if shared memory bounds it, the rest from
 * the atomics (~10% of the instructions, now ~5%); short of FA2's 4.55 ms, so whatever
 * else FA2 does (its software pipelining of the loads, its ordering of the five
 * products) would still be missing. Measured on the same GPU model, 3 rounds: 6.60 ms,
 * 1.53x, at the top of the range (1.27x to 1.56x over the six backward shapes, 0.62x to
 * 0.69x torch's FA2 backward; docs/measurements/14_backward.md). What was missing was
 * mostly the dQ reductions' address pattern (dQ's reductions, above).
 *
 * Causal order: a key block's walk is longer the earlier its keys, so the blocks start longest
 * first across heads, not head after head (block_position, where the comment says why).
 *
 * Registers: dK and dV take 128 fp32 per lane at d128 in either tile, S and dP 64 more
 * while dS is formed; at the 255 a thread may have, ptxas spills a little at d128 (CUDA
 * 13.0, the configurations each GPU runs: wide tile 4 bytes on sm_80; none on sm_86 and
 * sm_89 (narrow tile) or sm_90 (staged tile); at d64 none but the 128-query tile's 28 bytes
 * on sm_90), outside the products.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <type_traits>

#include "../../common/fa2.h"
#include "../../common/device_limits.h"
#include "../../common/validate.h"

constexpr int MMA_M = 16, MMA_N = 8, MMA_K = 16;  // mma.sync.m16n8k16
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
// The running max may lag the true max by this much (log2 units) before O is rescaled.
constexpr float RESCALE_LOG2 = 8.0f;

// Tile configurations. sweep.sh rebuilds this file with
// -DFA2_SWEEP_WARPS=.. -DFA2_SWEEP_M_TILES=.. -DFA2_SWEEP_BLOCK_N=..
// to time other candidates (both slots below then take the candidate).
constexpr int STAGES = 2;  // shared-memory buffers for each of K and V, as in step 05
template <int WARPS_, int M_TILES_, int BLOCK_N_>
struct TileConfig {
    static constexpr int WARPS = WARPS_, M_TILES = M_TILES_, BLOCK_N = BLOCK_N_;
    static constexpr int THREADS = WARPS * 32;
    static constexpr int BLOCK_M = WARPS * M_TILES * MMA_M;  // query rows per block
};
#ifdef FA2_SWEEP_WARPS
using LargeGridConfig = TileConfig<FA2_SWEEP_WARPS, FA2_SWEEP_M_TILES, FA2_SWEEP_BLOCK_N>;
using SmallGridConfig = LargeGridConfig;
using SmallGridShortTileConfig = LargeGridConfig;
#else
// Chosen by sweep.sh on an H200 (results/07_tuned/step06-sweep-*.csv), the
// same for head dim 64 and 128:
//  - more 128-row blocks than SMs: 4 warps x 2 m-tiles, 64 keys per tile; two
//    blocks share an SM (registers and shared memory allow two), 8 warps in all;
//  - at most one block per SM (B2 H8 N1024 gives 128 blocks for 132 SMs): a
//    lone block of the first kind leaves its SM with 4 warps, so 8 warps x 1
//    m-tile, 128 keys per tile.
// And where the second asks for more shared memory than a block may have (160 KB
// at d128; GPUs of compute capability 8.6, 8.9 and 12.x give a block 99 KB), the
// same 8 warps with 64 keys per tile (96 KB at d128). FlashAttention-2 also
// shrinks its d128 tiles on sm_86/sm_89 (flash_fwd_launch_template.h: 128 x 32
// keys without a mask, 64 x 64 with one, 4 warps), there to fit two blocks per
// SM; here the block keeps its 128 rows, so the grid is the same in every
// configuration, and gets its 8 warps in one block instead.
using LargeGridConfig = TileConfig<4, 2, 64>;
using SmallGridConfig = TileConfig<8, 1, 128>;
using SmallGridShortTileConfig = TileConfig<8, 1, 64>;
#endif
static_assert(LargeGridConfig::BLOCK_M == SmallGridConfig::BLOCK_M && SmallGridConfig::BLOCK_M == SmallGridShortTileConfig::BLOCK_M,
              "every configuration covers the same query rows, so the grid does not depend on the choice");
// A block's shared memory: Q (then O) [BLOCK_M][D], and STAGES buffers each of K and V [BLOCK_N][D].
template <typename C, int D>
constexpr int smem_bytes_of() { return (C::BLOCK_M + 2 * STAGES * C::BLOCK_N) * D * 2; }

// ---- PTX wrappers ----------------------------------------------------------

// D = A B + D for one 16x8x16 tile. A: 4 regs of 2 x 16-bit (row major),
// B: 2 regs (column major), C/D: 4 fp32. Lane l holds, with g = l / 4, t = l % 4:
//   A: a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
//   B: b0 (k 2t..2t+1, n g) b1 (k 2t+8..2t+9, n g)
//   C: c0 c1 (g, 2t..2t+1) c2 c3 (g+8, 2t..2t+1)
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    if constexpr (std::is_same<T, __half>::value) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Four 8x8 matrices of 16-bit elements from shared memory: lanes 8i..8i+7 give
// the row addresses of matrix i, and register i of lane l receives elements
// (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix i -- exactly an mma
// fragment register. .trans delivers the transposed matrix instead.
// `smem_addr` is a shared-state-space byte address (see the kernel's *_addr).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr));
}

// Asynchronous 16-byte copy global -> shared (LDGSTS): the thread does not wait
// for it and the data never passes through registers. .cg caches in L2 only:
// K and V are read by other blocks from L2, never again by this SM's L1.
// src_bytes = 0 reads nothing and fills the 16 bytes with zeros (tail rows).
__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void *global_src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(global_src), "r"(valid ? 16 : 0));
}

// Closes the group of cp.async issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

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
// keep their alignment.
__device__ __forceinline__ int swizzle(int row, int col) { return (((col / 8) ^ (row % 8)) * 8) | (col % 8); }

// Byte offset of element (row, col) from the start of a swizzled [rows][D] tile.
template <int D>
__device__ __forceinline__ uint32_t swizzled_offset(int row, int col) { return (row * D + swizzle(row, col)) * 2; }

// ---- global -> shared copies -------------------------------------------------

// This thread's share of copying a [ROWS][D] tile into swizzled shared memory,
// 16 bytes per cp.async: one chunk column (col) of rows row0, row0 + ROWS_PER_PASS,
// ... Those rows share row % 8, so the swizzled chunk is the same in every
// pass and the shared address just steps by ROWS_PER_PASS rows: everything that
// depends on the thread is computed once, in the constructor, and a tile's
// copy is a run of cp.async with immediate offsets and one 64-bit add each.
template <int D, int THREADS>
struct TileCopy {
    static constexpr int CHUNKS_PER_ROW = D * 2 / 16;  // 16-byte chunks of one row
    static constexpr int ROWS_PER_PASS = THREADS / CHUNKS_PER_ROW;
    static_assert(THREADS % CHUNKS_PER_ROW == 0, "every thread copies the same chunk column in each pass");
    static_assert(ROWS_PER_PASS % 8 == 0, "a thread's rows share row % 8, so its swizzled chunk is the same in every pass");
    int row0, col;      // this thread's first row and its chunk's first element
    uint32_t smem_off;  // bytes from a tile's start to this thread's first chunk, swizzled

    __device__ TileCopy() : row0(threadIdx.x / CHUNKS_PER_ROW), col(threadIdx.x % CHUNKS_PER_ROW * 8)
    {
        smem_off = swizzled_offset<D>(row0, col);
    }

    // Issues the copy of rows [0, ROWS) from src (row r at src + r * row_stride) to
    // the tile at shared address tile_saddr. A FULL tile has every row; otherwise rows
    // from valid_rows on are zero-filled (a tail tile then multiplies by 0 rather
    // than by whatever memory holds). The caller commits and waits.
    template <int ROWS, bool FULL>
    __device__ __forceinline__ void issue(uint32_t tile_saddr, const uint16_t *src, int64_t row_stride, int valid_rows) const
    {
        static_assert(ROWS % ROWS_PER_PASS == 0, "every thread copies the same number of rows");
        const uint16_t *row_src = src + row0 * row_stride + col;
#pragma unroll
        for (int pass = 0; pass < ROWS / ROWS_PER_PASS; pass++) {
            const uint32_t dst = tile_saddr + smem_off + pass * ROWS_PER_PASS * D * 2;
            if (FULL) {
                cp_async_16(dst, row_src, true);
            } else {
                const bool valid = row0 + pass * ROWS_PER_PASS < valid_rows;
                cp_async_16(dst, valid ? row_src : src + col, valid);  // src-size 0 reads nothing
            }
            row_src += ROWS_PER_PASS * row_stride;
        }
    }
};

// ---- the kernel --------------------------------------------------------------

template <typename T, int D, typename C>
__global__ void __launch_bounds__(C::THREADS) fa2_mma_kernel(fa2_params p)
{
    constexpr int BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, M_TILES = C::M_TILES;
    constexpr int THREADS = C::THREADS;
    static_assert(D % MMA_K == 0, "Q K^T consumes the head dim 16 at a time (the k of m16n8k16)");
    static_assert(D % (2 * MMA_N) == 0, "one ldmatrix.x4.trans of V feeds two 8-column d-tiles");
    static_assert(BLOCK_N % MMA_K == 0, "P.V consumes keys 16 at a time (the k of m16n8k16)");
    static_assert(BLOCK_N % (2 * MMA_N) == 0, "one ldmatrix.x4 of K feeds two 8-key n-tiles");
    static_assert(STAGES >= 2, "the copy of tile nb + 1 needs its own buffer while tile nb is read");
    extern __shared__ __align__(16) uint16_t smem[];
    // The tiles as shared-state-space byte addresses (_saddr), the form cp.async and ldmatrix take.
    constexpr uint32_t ROW_BYTES = D * 2, STAGE_BYTES = BLOCK_N * ROW_BYTES;
    const uint32_t q_saddr = (uint32_t)__cvta_generic_to_shared(smem);  // [BLOCK_M][D]; O in the epilogue
    const uint32_t k_saddr = q_saddr + BLOCK_M * ROW_BYTES;             // [STAGES][BLOCK_N][D]
    const uint32_t v_saddr = k_saddr + STAGES * STAGE_BYTES;            // [STAGES][BLOCK_N][D]

    // Causal blocks near the end of the sequence see the most keys; the GPU starts
    // blocks in index order, so they get the low indices and the short blocks fill
    // the tail of the launch instead of the long ones.
    const int m_block = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m0 = m_block * BLOCK_M, h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);  // GQA: several query heads share one K/V head
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: row group, thread in group
    const int shift = p.seqlen_k - p.seqlen_q;  // causal: row i sees keys j <= i + shift
    const float scale_log2 = p.softmax_scale * LOG2E;  // exp(x * scale) = exp2(x * scale * log2 e)
    const int warp_row0 = warp * M_TILES * MMA_M;      // this warp's first row in the block
    // Skip the O rescale while the running max is close enough (see the softmax
    // below) only where the rescale is long: M_TILES x D / 2 FMUL per row pair.
    constexpr bool LAZY_RESCALE = M_TILES * D >= 256;

    const uint16_t *q = (const uint16_t *)p.q + b * p.q_batch_stride + (int64_t)m0 * p.q_row_stride + h * p.q_head_stride;
    const uint16_t *k = (const uint16_t *)p.k + b * p.k_batch_stride + h_kv * p.k_head_stride;
    const uint16_t *v = (const uint16_t *)p.v + b * p.v_batch_stride + h_kv * p.v_head_stride;

    // Causal: key tiles past the last key the block's last row sees are skipped;
    // only tiles that cross the diagonal, or the seqlen_k tail, need a mask.
    const int key_end = p.causal ? min(p.seqlen_k, max(0, m0 + BLOCK_M + shift)) : p.seqlen_k;
    const int n_blocks = (key_end + BLOCK_N - 1) / BLOCK_N;

    // Prologue: Q, K tile 0 and V tile 0, one commit group; each key tile then
    // commits one group with the next tile's K and V.
    const TileCopy<D, THREADS> tile_copy;
    tile_copy.template issue<BLOCK_M, false>(q_saddr, q, p.q_row_stride, min(BLOCK_M, p.seqlen_q - m0));
    if (n_blocks > 0) {
        tile_copy.template issue<BLOCK_N, false>(k_saddr, k, p.k_row_stride, min(BLOCK_N, p.seqlen_k));
        tile_copy.template issue<BLOCK_N, false>(v_saddr, v, p.v_row_stride, min(BLOCK_N, p.seqlen_k));
    }
    cp_async_commit();

    // This lane's ldmatrix row addresses. Every row a lane points at has
    // row % 8 == lane % 8 (fragments start on multiples of 8 rows), so the swizzle
    // maps 16-byte chunk 8 h + c (c < 8) to 8 h + (c ^ lane % 8): of the chunks a
    // lane reads, only 4 distinct addresses remain, [i] for c = 2 i + its half
    // (k-steps kk with kk % 4 == i); m-tiles, n-tiles, key steps and the next 128
    // bytes (kk / 4) are fixed offsets the loads take as immediates.
    uint32_t q_addr[4], k_addr[4], v_addr[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        // Q (A, row major): rows lane % 16 of the m-tile, chunk 2 kk + lane / 16.
        q_addr[i] = q_saddr + (warp_row0 + lane % 16) * ROW_BYTES + ((2 * i + lane / 16) ^ (lane % 8)) * 16;
        // K (B = K^T): keys (lane / 16) * 8 + lane % 8 of two n-tiles, chunk 2 kk + lane / 8 % 2.
        k_addr[i] = k_saddr + ((lane / 16) * 8 + lane % 8) * ROW_BYTES + ((2 * i + lane / 8 % 2) ^ (lane % 8)) * 16;
        // V (B, transposed on the way): keys (lane / 8 % 2) * 8 + lane % 8, chunk dt + lane / 16.
        v_addr[i] = v_saddr + ((lane / 8 % 2) * 8 + lane % 8) * ROW_BYTES + ((2 * i + lane / 16) ^ (lane % 8)) * 16;
    }

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

    // One key tile: the loop body, instantiated twice. Tiles that need no mask
    // (all but the diagonal ones and the seqlen_k tail) run a copy compiled with
    // no masking code at all, so its compares and selects, and the register
    // shuffling a run-time branch around them costs, leave the hot loop.
    auto key_tile = [&](const int nb, auto masked) {
        const int n0 = nb * BLOCK_N, n1 = n0 + BLOCK_N;
        const uint32_t stage_off = nb % STAGES * STAGE_BYTES, next_off = (nb + 1) % STAGES * STAGE_BYTES;
        // K and V of tile nb have landed (this thread's copies, then, after the
        // barrier, every thread's), and every warp is done with tile nb - 1, whose
        // buffers the copies below overwrite. One barrier per tile: V_nb was issued
        // a whole tile ago, so waiting for it here costs nothing, and the body from
        // Q K^T to P V becomes one stretch of code the compiler schedules as a whole.
        cp_async_wait<0>();
        __syncthreads();
        // Tile nb + 1: only the seqlen_k tail has rows to zero-fill; the others skip the
        // per-row checks. (The choice stays spelled out at each call: a refactor that
        // moved it into TileCopy, among other changes, made ptxas schedule this loop
        // differently and ran 17% slower at d64 on the H200.)
        const bool next_full = n1 + BLOCK_N <= p.seqlen_k;
        if (nb + 1 < n_blocks) {
            const uint16_t *k1 = k + (int64_t)n1 * p.k_row_stride;
            if (next_full) tile_copy.template issue<BLOCK_N, true>(k_saddr + next_off, k1, p.k_row_stride, BLOCK_N);
            else tile_copy.template issue<BLOCK_N, false>(k_saddr + next_off, k1, p.k_row_stride, p.seqlen_k - n1);
            const uint16_t *v1 = v + (int64_t)n1 * p.v_row_stride;
            if (next_full) tile_copy.template issue<BLOCK_N, true>(v_saddr + next_off, v1, p.v_row_stride, BLOCK_N);
            else tile_copy.template issue<BLOCK_N, false>(v_saddr + next_off, v1, p.v_row_stride, p.seqlen_k - n1);
        }
        cp_async_commit();

        // S = Q K^T: this warp's M_TILES x 16 rows x BLOCK_N keys.
        float s_acc[M_TILES][BLOCK_N / MMA_N][4];  // [m-tile][key n-tile][c0..c3]
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (int nt = 0; nt < BLOCK_N / MMA_N; nt++) s_acc[mt][nt][0] = s_acc[mt][nt][1] = s_acc[mt][nt][2] = s_acc[mt][nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / MMA_K; kk++) {
            // ldmatrix.x4 matrices: rows 0-7 / 8-15 (lane % 16) x cols 0-7 / 8-15 (lane / 16) = a0, a1, a2, a3.
            uint32_t q_frag[M_TILES][4];  // [m-tile][a0..a3] for this k-step
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++)
                ldmatrix_x4(q_frag[mt], q_addr[kk % 4] + mt * MMA_M * ROW_BYTES + kk / 4 * 128);
#pragma unroll
            for (int nt = 0; nt < BLOCK_N / MMA_N; nt += 2) {
                // B = K^T: element (k = d, n = key) is K[key][d] of the tile, rows of K are the n of B.
                // Matrices: keys nt*8 + 0-7 (lanes 0-15) or + 8-15 (lanes 16-31), d cols + 0-7 or + 8-15
                // (lane / 8 % 2) = b0, b1 of n-tile nt, then b0, b1 of n-tile nt + 1.
                uint32_t k_frag[4];  // [b0, b1 of n-tile nt, b0, b1 of n-tile nt + 1]
                ldmatrix_x4(k_frag, k_addr[kk % 4] + stage_off + nt * MMA_N * ROW_BYTES + kk / 4 * 128);
#pragma unroll
                for (int mt = 0; mt < M_TILES; mt++) {  // one K fragment, M_TILES mma
                    mma_m16n8k16<T>(s_acc[mt][nt], q_frag[mt], k_frag[0], k_frag[1]);
                    mma_m16n8k16<T>(s_acc[mt][nt + 1], q_frag[mt], k_frag[2], k_frag[3]);
                }
            }
        }

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


        // O += P V. The C fragments of key n-tiles 2j and 2j+1 are exactly the A
        // fragment of k-step j, so P never leaves registers.
#pragma unroll
        for (int j = 0; j < BLOCK_N / MMA_K; j++) {
            uint32_t p_frag[M_TILES][4];  // [m-tile][a0..a3] for key k-step j
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++) {
                p_frag[mt][0] = pack2<T>(s_acc[mt][2 * j][0], s_acc[mt][2 * j][1]);
                p_frag[mt][1] = pack2<T>(s_acc[mt][2 * j][2], s_acc[mt][2 * j][3]);
                p_frag[mt][2] = pack2<T>(s_acc[mt][2 * j + 1][0], s_acc[mt][2 * j + 1][1]);
                p_frag[mt][3] = pack2<T>(s_acc[mt][2 * j + 1][2], s_acc[mt][2 * j + 1][3]);
            }
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt += 2) {
                // B = V: element (k = key, n = d) is V[key][d] of the tile, rows of V are the k of B, so
                // the 8x8 matrices are transposed on the way. Matrices: keys + 0-7 / 8-15
                // (lane / 8 % 2) x d cols dt*8 + 0-7 / 8-15 (lane / 16) = b0, b1 of d-tile dt, dt + 1.
                uint32_t v_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                ldmatrix_x4_trans(v_frag, v_addr[dt % 8 / 2] + stage_off + j * MMA_K * ROW_BYTES + dt / 8 * 128);
#pragma unroll
                for (int mt = 0; mt < M_TILES; mt++) {  // one V fragment, M_TILES mma
                    mma_m16n8k16<T>(o_acc[mt][dt], p_frag[mt], v_frag[0], v_frag[1]);
                    mma_m16n8k16<T>(o_acc[mt][dt + 1], p_frag[mt], v_frag[2], v_frag[3]);
                }
            }
        }
    };

    // Tiles from first_masked on cross the diagonal (causal: some key is past the
    // first row's last visible key) or hold the seqlen_k tail.
    int first_masked = p.seqlen_k / BLOCK_N;
    if (p.causal) first_masked = min(first_masked, max(0, (m0 + shift + 1) / BLOCK_N));
    first_masked = min(first_masked, n_blocks);
    for (int nb = 0; nb < first_masked; nb++) key_tile(nb, std::false_type{});
    for (int nb = first_masked; nb < n_blocks; nb++) key_tile(nb, std::true_type{});

    // Epilogue, 1: finish the row sums across the quad, normalise in registers,
    // write O into the Q tile's shared memory (swizzled: a fragment's 8 rows hit 8
    // different chunks, so the 4-byte stores are conflict-free), and LSE directly.
    cp_async_wait<0>();  // a block that saw no key tile never waited for Q: its copy may still be landing
    __syncthreads();     // every warp is done reading Q (and K, V) before O overwrites it
    uint16_t(*o_smem)[D] = reinterpret_cast<uint16_t(*)[D]>(smem);  // [BLOCK_M][D], the Q tile's space
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
    __syncthreads();

    // Epilogue, 2: 16-byte chunks to global memory, consecutive threads on
    // consecutive chunks of a row, so each 8 threads write one full 128-byte line.
    constexpr int CHUNKS_PER_ROW = D * 2 / 16;
    static_assert((BLOCK_M * CHUNKS_PER_ROW) % THREADS == 0, "every thread stores the same number of chunks");
    uint16_t *o = (uint16_t *)p.o + b * p.o_batch_stride + (int64_t)m0 * p.o_row_stride + h * p.o_head_stride;
#pragma unroll
    for (int i = threadIdx.x; i < BLOCK_M * CHUNKS_PER_ROW; i += THREADS) {
        const int row = i / CHUNKS_PER_ROW, chunk = i % CHUNKS_PER_ROW;
        if (m0 + row < p.seqlen_q)
            *reinterpret_cast<uint4 *>(o + row * p.o_row_stride + chunk * 8) =
                *reinterpret_cast<const uint4 *>(&o_smem[row][swizzle(row, chunk * 8)]);
    }
}

// ---- launcher and ABI --------------------------------------------------------

// Blocks of the launch: every configuration's cover the same rows, so one count serves all.
static long long grid_blocks(const fa2_params *p)
{
    return (long long)((p->seqlen_q + LargeGridConfig::BLOCK_M - 1) / LargeGridConfig::BLOCK_M) * p->heads_q * p->batch;
}

template <typename T, int D, typename C>
static int launch_with(const fa2_params *p, int64_t, void *stream)
{
    constexpr int smem_bytes = smem_bytes_of<C, D>();
    FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_mma_kernel<T, D, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    dim3 grid((p->seqlen_q + C::BLOCK_M - 1) / C::BLOCK_M, p->heads_q, p->batch);
    fa2_mma_kernel<T, D, C><<<grid, C::THREADS, smem_bytes, (cudaStream_t)stream>>>(*p);
    FA2_CUDA_TRY(cudaGetLastError());
    return FA2_OK;
}

enum { LARGE_GRID = 0, SMALL_GRID = 1, SMALL_GRID_SHORT_TILE = 2, CONFIGS = 3 };

// What one configuration asks of an SM, and how many of its blocks fit on one.
struct Fit {
    int smem_bytes, warps, blocks_per_sm;  // blocks_per_sm 0: it does not fit at all
};

// Blocks of configuration C per SM. On the GPU itself the runtime's occupancy
// query answers (it knows the registers ptxas gave this GPU's SASS); under
// FA2_EMULATE the same rules are applied by arithmetic to the preset's numbers,
// with the registers this build's kernel has where a GPU can say (otherwise the
// 255 a thread may have at most, the fewest blocks they could allow).
template <typename T, int D, typename C>
static Fit fit_of(const fa2_limits *l)
{
    constexpr int smem_bytes = smem_bytes_of<C, D>();
    Fit f = {smem_bytes, C::WARPS, 0};
    if (smem_bytes > l->smem_per_block) return f;
    if (!l->preset) {
        if (cudaFuncSetAttribute(fa2_mma_kernel<T, D, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) == cudaSuccess &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f.blocks_per_sm, fa2_mma_kernel<T, D, C>, C::THREADS, smem_bytes) == cudaSuccess)
            return f;
        cudaGetLastError();  // leave no error behind; the arithmetic answers instead
    }
    cudaFuncAttributes attr;
    int regs = 255;
    if (cudaFuncGetAttributes(&attr, fa2_mma_kernel<T, D, C>) == cudaSuccess) regs = attr.numRegs;
    else cudaGetLastError();
    f.blocks_per_sm = fa2_limits_blocks_per_sm(l, C::THREADS, regs, smem_bytes);
    return f;
}

// The configuration a launch takes: LargeGridConfig where two of its 4-warp blocks
// share each SM (the grid has more blocks than SMs, and an SM holds two); else the
// 8-warp configuration with the longest key tile that fits; else, on a GPU that
// fits neither, a lone LargeGridConfig block. -1 when nothing fits.
struct Choice {
    int config;
    long long blocks;
    Fit fit;
};
template <typename T, int D>
static Choice choose_config(const fa2_params *p, const fa2_limits *l)
{
    // Asked once per process and preset: the queries cost microseconds, a launch's whole budget.
    static Fit fits[CONFIGS];
    static const char *fits_for = "";  // the preset (NULL: the GPU) they were asked for; "" not yet
    if (fits_for == nullptr ? l->preset != nullptr : (l->preset == nullptr || strcmp(fits_for, l->preset) != 0)) {
        fits[LARGE_GRID] = fit_of<T, D, LargeGridConfig>(l);
        fits[SMALL_GRID] = fit_of<T, D, SmallGridConfig>(l);
        fits[SMALL_GRID_SHORT_TILE] = fit_of<T, D, SmallGridShortTileConfig>(l);
        fits_for = l->preset;
    }
    Choice c = {-1, grid_blocks(p), fits[LARGE_GRID]};
    if (fits[LARGE_GRID].blocks_per_sm >= 2 && c.blocks > l->sm_count) c.config = LARGE_GRID;
    else if (fits[SMALL_GRID].blocks_per_sm >= 1) c.config = SMALL_GRID;
    else if (fits[SMALL_GRID_SHORT_TILE].blocks_per_sm >= 1) c.config = SMALL_GRID_SHORT_TILE;
    else if (fits[LARGE_GRID].blocks_per_sm >= 1) c.config = LARGE_GRID;
    if (c.config >= 0) c.fit = fits[c.config];
    return c;
}

// The choice for these params, through their dtype and head dim.
static Choice choose(const fa2_params *p, const fa2_limits *l)
{
    if (p->dtype == FA2_FP16) return p->head_dim == 64 ? choose_config<__half, 64>(p, l) : choose_config<__half, 128>(p, l);
    return p->head_dim == 64 ? choose_config<__nv_bfloat16, 64>(p, l) : choose_config<__nv_bfloat16, 128>(p, l);
}

template <typename T, int D>
static int launch(const fa2_params *p, void *stream)
{
    fa2_limits l;
    char why[256];
    if (fa2_limits_get(&l, why, sizeof why) != FA2_LIMITS_OK) return fa2_fail("fa2_limits_get", why);
    // One launch, or one per chunk of at most 65,535 batches and heads (the grid's y and z).
    switch (choose_config<T, D>(p, &l).config) {
    case SMALL_GRID: return fa2_for_each_grid_chunk(p, launch_with<T, D, SmallGridConfig>, stream);
    case SMALL_GRID_SHORT_TILE: return fa2_for_each_grid_chunk(p, launch_with<T, D, SmallGridShortTileConfig>, stream);
    default: return fa2_for_each_grid_chunk(p, launch_with<T, D, LargeGridConfig>, stream);
    }
}

extern "C" int fa2_supports(const fa2_params *p, char *why, size_t why_len)
{
    if (!fa2_validate_params(p, why, why_len) || !fa2_refuse_kv_cache(p, why, why_len)) return 0;
    if (p->head_dim != 64 && p->head_dim != 128) {
        if (why) snprintf(why, why_len, "head_dim %d (allowed: 64, 128)", p->head_dim);
        return 0;
    }
    // 16-byte copies need every row to start on a 16-byte boundary.
    if (!fa2_validate_alignment(p, 16, "16-byte loads and stores", why, why_len)) return 0;
    // The smallest configuration must fit the GPU's shared memory per block.
    const int least = p->head_dim == 64 ? smem_bytes_of<LargeGridConfig, 64>() : smem_bytes_of<LargeGridConfig, 128>();
    char what[32];
    snprintf(what, sizeof what, "head_dim %d", p->head_dim);
    return fa2_limits_check_smem(least, what, why, why_len);
}

extern "C" int fa2_config_count(void) { return CONFIGS; }

extern "C" int fa2_config_smem(const fa2_params *p, int config)
{
    const bool d64 = p->head_dim == 64;
    switch (config) {
    case LARGE_GRID: return d64 ? smem_bytes_of<LargeGridConfig, 64>() : smem_bytes_of<LargeGridConfig, 128>();
    case SMALL_GRID: return d64 ? smem_bytes_of<SmallGridConfig, 64>() : smem_bytes_of<SmallGridConfig, 128>();
    case SMALL_GRID_SHORT_TILE: return d64 ? smem_bytes_of<SmallGridShortTileConfig, 64>() : smem_bytes_of<SmallGridShortTileConfig, 128>();
    default: return -1;
    }
}

static const char *const config_names[CONFIGS] = {"4 warps x 2 m-tiles, 64 keys per tile", "8 warps x 1 m-tile, 128 keys per tile",
                                                  "8 warps x 1 m-tile, 64 keys per tile"};

extern "C" int fa2_config(const fa2_params *p, char *what, size_t what_len)
{
    if (!fa2_supports(p, what, what_len)) return -1;
    fa2_limits l;
    if (fa2_limits_get(&l, what, what_len) != FA2_LIMITS_OK) return -1;  // the choice depends on the GPU's limits
    const Choice c = choose(p, &l);
    if (c.config < 0) {
        snprintf(what, what_len, "no configuration fits %s", l.name);
        return -1;
    }
    snprintf(what, what_len, "%s, %d KB: %lld blocks, %d per SM on %d SMs", config_names[c.config], c.fit.smem_bytes / 1024,
             c.blocks, c.fit.blocks_per_sm, l.sm_count);
    return c.config;
}

extern "C" int fa2_forward(const fa2_params *p, void *stream)
{
    if (!fa2_supports(p, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    if (p->dtype == FA2_FP16)
        return p->head_dim == 64 ? launch<__half, 64>(p, stream) : launch<__half, 128>(p, stream);
    return p->head_dim == 64 ? launch<__nv_bfloat16, 64>(p, stream) : launch<__nv_bfloat16, 128>(p, stream);
}

extern "C" const char *fa2_name(void) { return "14_backward"; }
extern "C" const char *fa2_key_change(void) { return "the backward: FA2's work split on mma.sync (64 queries x 128 keys on 8 warps, 128 x 128 at d64 in a 196 KB block; 64 x 64 on 4 in a 99 KB block), P and dS through shared memory, dK and dV in registers, dQ by fp32 atomics, whole rows where shared memory stages them"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }
extern "C" size_t fa2_workspace_size(const fa2_params *) { return 0; }  // one pass: no partial results

// ==== the backward pass ==========================================================

// The tiles. A block owns BLOCK_N keys and walks the query rows BLOCK_M at a time; its
// warps split each product of a step their own way, FlashAttention-2's sm80 work split
// (Flash_bwd_kernel_traits in csrc/flash_attn/src/kernel_traits.h, picked per head dim and
// shared memory in flash_bwd_launch_template.h, Dao-AILab/flash-attention: at d128, 64
// queries x 128 keys, 8 warps, 2 x 4 for S and dP, 4 x 2 for dK and dV, 2 x 4 for dQ; at
// d64 where a block may have 144 KB, run_mha_bwd_hdim64's 128 x 128, 8 warps, 4 x 2 for
// all three). Every warp tile here is 32 rows (two 16-row m-tiles) deep:
//   S = Q K^T, dP = dO V^T:      BLOCK_M / 32 warps over the queries x the rest over the keys
//   dV += P^T dO, dK += dS^T Q:  BLOCK_N / 32 warps over the keys x the rest over the head dim
//   dQ += dS K:                  BLOCK_M / 32 warps over the queries x the rest over the head dim
// A warp of the first two loads 32 rows of each operand per k-step, 4 ldmatrix.x4 for 8
// mma (BLOCK_M 128: 32 queries x 64 keys, 6 for 16): each fragment feeds two or more mma,
// where a warp of 16 keys (step 14's first kernel) brought in every query row for one.
constexpr int BWD_WARP_ROWS = 2 * MMA_M;
template <int WARPS_, int BLOCK_N_, int BLOCK_M_ = 64>
struct BwdTile {
    static constexpr int WARPS = WARPS_, THREADS = WARPS * 32, BLOCK_M = BLOCK_M_, BLOCK_N = BLOCK_N_;
    static constexpr bool STAGE_DQ = false;  // dQ's atomics straight from the C fragments (the *Staged tiles: through shared memory)
    static constexpr int SDP_WARPS_M = BLOCK_M / BWD_WARP_ROWS, SDP_WARPS_N = WARPS / SDP_WARPS_M;  // S, dP: queries, keys
    static constexpr int SDP_WARP_N = BLOCK_N / SDP_WARPS_N;                                        // S, dP: keys of a warp
    static constexpr int KV_WARPS_N = BLOCK_N / BWD_WARP_ROWS, KV_WARPS_D = WARPS / KV_WARPS_N;     // dK, dV: keys, head dim
    static constexpr int Q_WARPS_M = BLOCK_M / BWD_WARP_ROWS, Q_WARPS_D = WARPS / Q_WARPS_M;        // dQ: queries, head dim
    static_assert(BLOCK_N % BWD_WARP_ROWS == 0 && BLOCK_M % BWD_WARP_ROWS == 0, "warp tiles of 32 keys and 32 queries cover the block");
    static_assert(SDP_WARPS_M * SDP_WARPS_N == WARPS && SDP_WARPS_N * SDP_WARP_N == BLOCK_N,
                  "S and dP: the warps' 32 x SDP_WARP_N tiles cover the step's BLOCK_M x BLOCK_N scores exactly once");
    static_assert(SDP_WARP_N % (2 * MMA_N) == 0, "a warp's S and dP keys are whole pairs of 8-key n-tiles: one ldmatrix.x4 of K or V each");
    static_assert(KV_WARPS_N * KV_WARPS_D == WARPS, "dK and dV: every warp owns 32 keys of one slice of the head dim");
    static_assert(Q_WARPS_M * Q_WARPS_D == WARPS, "dQ: every warp owns 32 query rows of one slice of the head dim");
    static_assert(BLOCK_N * 2 % 128 == 0, "a row of the P and dS tiles is whole 128-byte bank windows, so the swizzle makes their reads conflict-free");
};
// 160 KB at d128 with Q and dO double-buffered: A100, H100 and H200 blocks take it.
using BwdWide = BwdTile<8, 128>;
// The same split at half the keys and warps, 2 x 2 for every product: 80 KB at d128 with one
// Q and dO buffer, for GPUs whose blocks get 99 KB (compute capability 8.6, 8.9 and 12.x).
using BwdNarrow = BwdTile<4, 64>;
// The wide tile with dQ's atomics staged through shared memory (the kernel's dQ section says
// how): a [BLOCK_M][D + DQ_STAGE_PAD] fp32 tile after dS, 34 KB more at d128 (194 KB: H100 and
// H200, not the A100's 163 KB) and 18 KB at d64 (114 KB: A100, H100, H200, not the 99 KB GPUs).
// The launcher takes it wherever it fits, else BwdWide as before. The narrow tile never stages:
// it runs only where the wide one does not fit, the 99 KB GPUs at d128, and its 80 KB and 34 KB
// more would not fit there either, so it keeps the fragments' atomics (the choice is static, by
// tile type; BwdWide and BwdNarrow compile as before).
constexpr int DQ_STAGE_PAD = 8;  // floats after each staged row: rows start 8 banks apart (the dQ section)
struct BwdWideStaged : BwdTile<8, 128> {
    static constexpr bool STAGE_DQ = true;
};
// d64 only: FlashAttention-2's d64 tile where a block may have 144 KB (run_mha_bwd_hdim64 takes
// Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4> there), 128 queries x 128 keys on 8 warps, 4 x 2
// for S and dP (warp tiles 32 queries x 64 keys), dK and dV, and dQ, with dQ staged: a step runs
// 320 mma per warp, as the wide tile's at d128, where the wide tile's d64 step runs 160 for the
// same two __syncthreads, LSE and D loads and dQ barrier. Shared memory: K, V 16 KB each, Q, dO 16
// KB each per buffer, two buffers, P, dS 32 KB each: 160 KB, and the [128][72] fp32 staging tile,
// 36 KB: 196 KB, which H100 and H200 blocks (227 KB) take and the A100's (163 KB) do not. The
// A100 keeps BwdWideStaged at d64 (114 KB): the 128-query tile without staging (160 KB) would fit
// it, but trades the whole-row reductions (measured -18% at d64 on an H100) for the longer step,
// unmeasured; FA2's 144 KB single-buffers dO (kernel_traits.h, kSmemQdOSize: 3 tiles, not 4),
// which this kernel's buffers (Q and dO share a stage) do not do. The 99 KB GPUs keep BwdWide.
struct BwdTallStaged : BwdTile<8, 128, 128> {
    static constexpr bool STAGE_DQ = true;
};
// Floats per dQ reduction lane: red.global.add.v4.f32 on sm_90 and newer (PTX ISA 8.1), one float
// before (no vector red).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr int DQ_RED_VEC = 4;
#else
constexpr int DQ_RED_VEC = 1;
#endif
constexpr int BWD_MIN_BLOCK_N = 64;  // the smallest BLOCK_N of the two: it sizes the deterministic workspace
static_assert(BwdWide::BLOCK_N >= BWD_MIN_BLOCK_N && BwdNarrow::BLOCK_N == BWD_MIN_BLOCK_N,
              "BWD_MIN_BLOCK_N is the smallest key block, so the workspace holds the splits of either tile");
constexpr int BWD_PREP_THREADS = 256;  // the prep and convert kernels: rows of 16-byte chunks

// Shared memory of one block: K_j and V_j [BLOCK_N][D], STAGES buffers each of Q_i and
// dO_i [BLOCK_M][D], then P and dS [BLOCK_M][BLOCK_N]; a tile that stages dQ adds its fp32
// staging tile [BLOCK_M][D + DQ_STAGE_PAD].
template <typename C, int D, int STAGES>
constexpr int bwd_smem_bytes()
{
    return (2 * C::BLOCK_N + 2 * STAGES * C::BLOCK_M) * D * 2 + 2 * C::BLOCK_M * C::BLOCK_N * 2 +
           (C::STAGE_DQ ? C::BLOCK_M * (D + DQ_STAGE_PAD) * 4 : 0);
}
static_assert(bwd_smem_bytes<BwdWideStaged, 128, 2>() == 194 * 1024 && bwd_smem_bytes<BwdWideStaged, 64, 2>() == 114 * 1024,
              "the staged wide tile's sizes BwdWideStaged's comment quotes (and the GPUs it fits)");
static_assert(bwd_smem_bytes<BwdWide, 128, 2>() == 160 * 1024 && bwd_smem_bytes<BwdNarrow, 128, 1>() == 80 * 1024,
              "the sizes the header and the choice below quote");
static_assert(bwd_smem_bytes<BwdTallStaged, 64, 2>() == 196 * 1024 && BwdTallStaged::Q_WARPS_M == 4,
              "the 128-query tile's size BwdTallStaged's comment quotes (and the GPUs it fits), in four query quarters of dQ");

// A lane's ldmatrix row address in a swizzled tile of COLS 16-bit columns, for one
// fragment pattern: the lane points at row `row` (its row in the pattern plus the warp's
// first row, a multiple of 8, so row % 8 == lane % 8) and at chunk chunk0 + c0 + `half`:
// chunk0 the warp's first chunk, a multiple of its span of chunks, a power of two (SPAN);
// c0 the fragment's, even, below SPAN modulo 8, a compile-time constant. The three then
// share no bit below 8, so their sum is their OR, and the swizzle, which XORs a chunk's low
// 3 bits with row % 8, gives chunk 8 (chunk0 / 8 + c0 / 8) + (c0 % 8 ^ chunk0 % 8 ^ half ^
// row % 8): all that depends on the lane is one row offset and one XOR term, two registers
// (the XOR term the same for every pattern with the same chunk0 % 8 and half), and a load
// costs one LOP3 and one add, the fragment's rows and 128-byte steps going into the
// ldmatrix's immediate offset. (Step 07 keeps four precomputed offsets per pattern, one per
// c0 % 8, and no LOP3; at six patterns, 24 registers, the backward's d128 tiles spill.)
template <int COLS>
struct LaneRows {
    uint32_t row_off;    // bytes to the lane's row and to the 128-byte window of chunk0
    uint32_t chunk_xor;  // 16 x (chunk0 % 8 ^ half ^ row % 8)
    template <int SPAN>
    __device__ static LaneRows of(int row, int chunk0, int half)
    {
        static_assert(SPAN > 0 && (SPAN & (SPAN - 1)) == 0, "a warp's span of chunks is a power of two, so chunk0 + c0 + half is chunk0 | c0 | half");
        return LaneRows{(uint32_t)(row * (COLS * 2) + chunk0 / 8 * 128), (uint32_t)(((chunk0 % 8) ^ half ^ (row % 8)) * 16)};
    }
    // The lane's address in the fragment of rows r0 .. (a multiple of 8) and chunks c0, c0 + 1.
    __device__ __forceinline__ uint32_t at(uint32_t tile_saddr, int r0, int c0) const
    {
        return tile_saddr + r0 * (COLS * 2) + c0 / 8 * 128 + row_off + ((c0 % 8 * 16) ^ chunk_xor);
    }
};

// One register of two 16-bit values -> two fp32.
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t x)
{
    if constexpr (std::is_same<T, __half>::value) return __half22float2(*reinterpret_cast<__half2 *>(&x));
    else return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&x));
}

// The first query block of block_m rows (the tile's BLOCK_M) that sees key n0 (causal: row
// r sees keys <= r + shift, so rows from n0 - shift on; all of them otherwise). The main
// kernel starts its walk there and the convert kernel's deterministic sum skips the partials
// of the splits blocks that start past a row's block: the same function and block_m, so they
// agree.
__device__ __forceinline__ int first_query_block(int n0, int shift, int causal, int block_m)
{
    return causal ? max(0, n0 - shift) / block_m : 0;
}

// Causal, a key block's walk starts at the first query block that sees it, so key block 0 of a
// head has the most steps and the last the fewest. The GPU starts blocks in the order of their
// linear index, x fastest (what its scheduler does in practice; CUDA promises no order, and the
// result does not depend on it), which in the grid's own order is each head's key blocks, longest
// first, one head after another: the last head's longest block starts near the end and finishes
// alone. Longest first across heads balances the SMs: the launch's (kv head, batch) pairs in
// sections of BWD_ORDER_PAIRS, and in each section key block 0 of every pair, then key block 1,
// and so on. Eight pairs a section: SMs taking blocks greedily (tests/test_bwd_block_order.py
// --simulate, step 15's tile) then finish within 1.7% of their mean at the causal backward
// shapes on 132, 114, 108 and 82 SMs, where the grid's order leaves the last up to 13.9% past
// it (GQA, whose blocks walk four query heads each); and the resident blocks hold the Q and dO
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

// The workspace: dQ's fp32 accumulator [partials][batch * heads_q * seqlen_q][D]
// (rows in LSE order; one partial, or one per split in the deterministic mode),
// then D [batch * heads_q * seqlen_q].
struct BwdArgs {
    fa2_bwd_params p;
    float *dq_ws;        // [partials][rows][D]: the sum of dS K over key blocks, not yet scaled
    float *d_ws;         // [rows]: D = rowsum(dO * O)
    int batch0, head_kv0;  // this launch's first batch and kv head (a grid's y and z stop at 65,535)
    int deterministic;   // 1: the key blocks in launches of S, dq_ws one partial per split
    int dq_partials;     // partials in dq_ws: the S splits, or 1 (the sum every key block adds to)
    int n_block0;        // this launch's first key block (deterministic; 0 otherwise)
    int block_n;         // keys per block of the tile the main kernel runs (its split x starts at key block x)
    int block_m;         // query rows per step of that tile (its walk's query blocks)
};

// Kernel 1: D = rowsum(dO * O), and dQ's accumulators (the sum, or each split's partial)
// zeroed. A row's D / 8 chunks go to D / 8 consecutive lanes (16-byte loads, each 8 lanes
// of a d64 row reading one 128-byte line), which sum by shuffles.
template <typename T, int D>
__global__ void __launch_bounds__(BWD_PREP_THREADS) bwd_prep_kernel(const BwdArgs a)
{
    constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
    static_assert(32 % CHUNKS == 0 && BWD_PREP_THREADS % CHUNKS == 0, "a row's chunks sit in one warp, in every pass");
    const fa2_params &p = a.p.fwd;
    const int64_t rows_total = (int64_t)p.batch * p.heads_q * p.seqlen_q, total = rows_total * CHUNKS;
    // The bound is warp-uniform (total and the stride are multiples of 32 apart from the
    // last pass, where lanes past the end take part with 0): every shuffle has all 32 lanes.
    for (int64_t base = (int64_t)blockIdx.x * BWD_PREP_THREADS; base < total; base += (int64_t)gridDim.x * BWD_PREP_THREADS) {
        const int64_t idx = base + threadIdx.x, row = idx / CHUNKS;
        const int chunk = (int)(idx % CHUNKS);
        float acc = 0.0f;
        if (idx < total) {
            const int i = (int)(row % p.seqlen_q), h = (int)(row / p.seqlen_q % p.heads_q), b = (int)(row / p.seqlen_q / p.heads_q);
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
            for (int split = 0; split < a.dq_partials; split++) {
                float4 *dq = reinterpret_cast<float4 *>(a.dq_ws + (split * rows_total + row) * D + chunk * 8);
                dq[0] = dq[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
#pragma unroll
        for (int lanes = CHUNKS / 2; lanes > 0; lanes /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, lanes);
        if (idx < total && chunk == 0) a.d_ws[row] = acc;
    }
}

// Named barrier ID (1 to 15: 0 is __syncthreads') for THREADS threads, a multiple of 32: the
// warps that stage one query slice's dQ rows and read them back. Orders their shared-memory
// stores before their loads, as __syncthreads does for the whole block. The operands are
// immediates: with an id in a register ptxas reserves all 16 barriers.
template <int ID, int THREADS>
__device__ __forceinline__ void named_barrier_sync()
{
    static_assert(ID >= 1 && ID <= 15 && THREADS % 32 == 0, "a named barrier other than __syncthreads' 0, for whole warps");
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}
// Named barrier `id`, one of 1 .. LAST, a warp-uniform value, each as an immediate (above): a
// chain of LAST - 1 compares.
template <int LAST, int THREADS>
__device__ __forceinline__ void named_barrier_sync_of(int id)
{
    if constexpr (LAST > 1) {
        if (id == LAST) named_barrier_sync<LAST, THREADS>();
        else named_barrier_sync_of<LAST - 1, THREADS>(id);
    } else {
        named_barrier_sync<1, THREADS>();
    }
}

// dst[0..3] += v, the result unused: one red.global.add.v4.f32 (sm_90 and newer, PTX ISA 8.1;
// REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU, the rounding and scope of the scalar red.global.add.f32
// that atomicAdd compiles to), each float atomic by itself. dst must be 16-byte aligned: the
// workspace is (fa2_validate_workspace), rows are D floats, and a lane's column is a multiple of 4.
__device__ __forceinline__ void red_add_v4(float *dst, float4 v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
#else
    atomicAdd(dst, v.x), atomicAdd(dst + 1, v.y), atomicAdd(dst + 2, v.z), atomicAdd(dst + 3, v.w);
#endif
}

// Kernel 2: one block per (key block, kv head, batch); see the header for the algorithm.
// One block per SM in practice (the wide tile: 256 threads at 220 to 255 registers fill
// the register file; the narrow one: 80 KB of a 99 KB GPU's 100 KB per SM; the 128-query
// one: 196 KB of an H100's 228 KB per SM), so the bound leaves ptxas all 255 registers: dK
// and dV take 128 of them in both tiles at d128, S and dP 64 more while dS is formed (the
// 128-query tile at d64: dK and dV 64, S and dP 128).
template <typename T, int D, typename C, int STAGES>
__global__ void __launch_bounds__(C::THREADS, 1) fa2_bwd_kernel(const BwdArgs a)
{
    constexpr int BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, THREADS = C::THREADS;
    constexpr int KV_COLS = D / C::KV_WARPS_D;            // head-dim columns of a warp's dK and dV
    constexpr int Q_COLS = D / C::Q_WARPS_D;              // head-dim columns of a warp's dQ
    constexpr int Q_CHUNK = Q_COLS < 32 ? Q_COLS : 32;    // dQ columns accumulated at a time
    constexpr int M_TILES = BWD_WARP_ROWS / MMA_M;        // m-tiles of a warp tile, in every product
    constexpr int SDP_N_TILES = C::SDP_WARP_N / MMA_N;    // key n-tiles of a warp's S and dP
    static_assert(D % MMA_K == 0, "S = Q K^T and dP = dO V^T consume the head dim 16 at a time (the k of m16n8k16)");
    static_assert(KV_COLS % (2 * MMA_N) == 0, "a warp's dK and dV columns are whole pairs of d-tiles: one ldmatrix.x4.trans of Q or dO each");
    static_assert(Q_COLS % Q_CHUNK == 0 && Q_CHUNK % (2 * MMA_N) == 0,
                  "a warp's dQ columns are whole chunks of whole pairs of d-tiles: one ldmatrix.x4.trans of K each");
    static_assert(BLOCK_M % MMA_K == 0 && BLOCK_N % MMA_K == 0, "dV, dK (queries) and dQ (keys) consume their k 16 at a time");
    static_assert(SDP_N_TILES % 2 == 0, "one ldmatrix.x4 of K or V feeds two 8-key n-tiles");
    static_assert(STAGES == 1 || STAGES == 2, "Q and dO single- or double-buffered");
    // dQ staged (C::STAGE_DQ; the dQ section below): the staging tile's rows and the reductions.
    constexpr int DQ_STAGE_COLS = D + DQ_STAGE_PAD;                     // floats per staged row
    constexpr int DQ_READ_ROWS = BWD_WARP_ROWS / C::Q_WARPS_D;          // rows of its query slice a warp reads back
    constexpr int DQ_SEG = 32 * DQ_RED_VEC;                             // floats per reduction instruction
    static_assert(!C::STAGE_DQ || (D % 32 == 0 && DQ_STAGE_COLS % 32 == 8),
                  "staged dQ rows are whole 128-byte lines, and a staged row starts 8 banks after the one above, so a half-warp's 8-byte fragment stores (4 rows x 32 bytes) meet 32 different banks");
    static_assert(!C::STAGE_DQ || BWD_WARP_ROWS % C::Q_WARPS_D == 0, "every warp of a query slice reads back the same number of whole rows");
    static_assert(!C::STAGE_DQ || DQ_SEG % D == 0 || D % DQ_SEG == 0,
                  "a reduction instruction covers whole rows or an even part of one, so its rows and columns are the lane's plus constants");
    static_assert(!C::STAGE_DQ || DQ_READ_ROWS * D % DQ_SEG == 0, "a warp's rows are whole reduction instructions");
    static_assert(!C::STAGE_DQ || C::Q_WARPS_M <= 15, "a named barrier for each query slice of dQ, 1 .. Q_WARPS_M (0 is __syncthreads')");
    const fa2_bwd_params &bp = a.p;
    const fa2_params &p = a.p.fwd;
    extern __shared__ __align__(16) uint16_t smem[];
    // The tiles as shared-state-space byte addresses (_saddr), the form cp.async and ldmatrix take.
    constexpr uint32_t ROW_BYTES = D * 2, QTILE_BYTES = BLOCK_M * ROW_BYTES, PTILE_BYTES = BLOCK_M * BLOCK_N * 2;
    const uint32_t k_saddr = (uint32_t)__cvta_generic_to_shared(smem);  // [BLOCK_N][D]
    const uint32_t v_saddr = k_saddr + BLOCK_N * ROW_BYTES;             // [BLOCK_N][D]
    const uint32_t q_saddr = v_saddr + BLOCK_N * ROW_BYTES;             // [STAGES][BLOCK_M][D]
    const uint32_t do_saddr = q_saddr + STAGES * QTILE_BYTES;           // [STAGES][BLOCK_M][D]
    const uint32_t p_saddr = do_saddr + STAGES * QTILE_BYTES;           // [BLOCK_M][BLOCK_N]: P, queries x keys
    const uint32_t ds_saddr = p_saddr + PTILE_BYTES;                    // [BLOCK_M][BLOCK_N]: dS, queries x keys
    uint16_t *p_smem = smem + (2 * BLOCK_N + 2 * STAGES * BLOCK_M) * D;  // the same two tiles, for the fragment stores
    uint16_t *ds_smem = p_smem + BLOCK_M * BLOCK_N;
    [[maybe_unused]] float *dq_stage = reinterpret_cast<float *>(ds_smem + BLOCK_M * BLOCK_N);  // [BLOCK_M][DQ_STAGE_COLS] fp32 (C::STAGE_DQ)

    const BlockPos block = block_position(p.causal);  // causal: longest first across heads
    const int n_block = a.n_block0 + block.nb, h_kv = block.h_kv + a.head_kv0, b = block.b + a.batch0;
    const int n0 = n_block * BLOCK_N;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: row group, thread in group
    // The warp's tile of each product (first row or column in the step or the block):
    const int sdp_q0 = warp % C::SDP_WARPS_M * BWD_WARP_ROWS, sdp_k0 = warp / C::SDP_WARPS_M * C::SDP_WARP_N;  // S, dP
    const int kv_k0 = warp % C::KV_WARPS_N * BWD_WARP_ROWS, kv_d0 = warp / C::KV_WARPS_N * KV_COLS;          // dK, dV
    const int dq_q0 = warp % C::Q_WARPS_M * BWD_WARP_ROWS, dq_d0 = warp / C::Q_WARPS_M * Q_COLS;             // dQ
    const int group = p.heads_q / p.heads_kv;   // GQA: the query heads of this kv head
    const int shift = p.seqlen_k - p.seqlen_q;  // causal: row i sees keys j <= i + shift
    const float scale_log2 = p.softmax_scale * LOG2E;
    const int64_t rows_total = (int64_t)p.batch * p.heads_q * p.seqlen_q;
    float *dq_ws = a.dq_ws + (a.deterministic ? block.nb * rows_total * D : 0);  // [rows][D]: this split's partial, or the shared sum

    // The walk: step s is query block first_qb + s % per_head of query head
    // h_kv * group + s / per_head.
    const int first_qb = first_query_block(n0, shift, p.causal, BLOCK_M);
    const int per_head = max(0, (p.seqlen_q + BLOCK_M - 1) / BLOCK_M - first_qb);
    const int steps = group * per_head;
    // The walk's position, carried from step to step rather than divided out of s where it is
    // used (two integer divisions a step, about 35 instructions each): step s is the query rows
    // m0 .. m0 + BLOCK_M - 1 of query head h, and the next step's position is one compare away.
    struct WalkPos { int h, m0; };
    const int m_first = first_qb * BLOCK_M, m_end = (first_qb + per_head) * BLOCK_M;
    auto walk_next = [&](WalkPos w) { return w.m0 + BLOCK_M < m_end ? WalkPos{w.h, w.m0 + BLOCK_M} : WalkPos{w.h + 1, m_first}; };

    const uint16_t *k = (const uint16_t *)p.k + b * p.k_batch_stride + (int64_t)n0 * p.k_row_stride + h_kv * p.k_head_stride;
    const uint16_t *v = (const uint16_t *)p.v + b * p.v_batch_stride + (int64_t)n0 * p.v_row_stride + h_kv * p.v_head_stride;
    const TileCopy<D, THREADS> tile_copy;
    // Q_i and dO_i of step s into buffer `stage`; rows past seqlen_q are zero-filled.
    auto issue_step = [&](WalkPos w, int stage) {
        const int h = w.h, m0 = w.m0;
        const uint16_t *q = (const uint16_t *)p.q + b * p.q_batch_stride + (int64_t)m0 * p.q_row_stride + h * p.q_head_stride;
        const uint16_t *dout = (const uint16_t *)bp.dout + b * bp.dout_batch_stride + (int64_t)m0 * bp.dout_row_stride + h * bp.dout_head_stride;
        tile_copy.template issue<BLOCK_M, false>(q_saddr + stage * QTILE_BYTES, q, p.q_row_stride, p.seqlen_q - m0);
        tile_copy.template issue<BLOCK_M, false>(do_saddr + stage * QTILE_BYTES, dout, bp.dout_row_stride, p.seqlen_q - m0);
    };
    // Prologue: K_j, V_j (tail keys zero-filled) and step 0, one commit group.
    tile_copy.template issue<BLOCK_N, false>(k_saddr, k, p.k_row_stride, p.seqlen_k - n0);
    tile_copy.template issue<BLOCK_N, false>(v_saddr, v, p.v_row_stride, p.seqlen_k - n0);
    if (steps > 0) issue_step(WalkPos{h_kv * group, m_first}, 0);
    cp_async_commit();

    // This lane's ldmatrix rows, one set per operand (LaneRows: the fragment's rows and
    // chunks; the lanes of matrix i of an x4 are 8 i .. 8 i + 7, register i of each lane):
    //  qa:  A, row major: Q or dO for S or dP. Rows lane % 16 of the warp's queries, chunk
    //       + lane / 16: matrices (rows 0-7, 8-15) x (k 0-7, 8-15) = a0, a1, a2, a3.
    //  kb:  B from its n-rows: K or V for S or dP (B = K^T: element (k = d, n = key) is
    //       K[key][d]). Keys lane / 16 * 8 + lane % 8, chunk + lane / 8 % 2: b0, b1 of the
    //       n-tile of keys 0-7, then b0, b1 of keys 8-15.
    //  pt:  A = P^T or dS^T (m = key, k = query) from the [query][key] tiles, transposed on
    //       the way: queries lane / 16 * 8 + lane % 8, key chunk + lane / 8 % 2: matrices
    //       (queries 0-7, keys 0-7) = a0, (0-7, 8-15) = a1, (8-15, 0-7) = a2, (8-15, 8-15) = a3.
    //  qbt: B from its k-rows, transposed on the way: dO or Q for dV or dK (k = query,
    //       n = d). Queries lane / 8 % 2 * 8 + lane % 8, d chunk + lane / 16: b0, b1 of
    //       d-tile dt, then b0, b1 of d-tile dt + 1.
    //  dsa: A = dS (m = query, k = key) for dQ, row major as qa.
    //  kbt: B = K (k = key, n = d) for dQ, transposed on the way as qbt.
    const LaneRows<D> qa = LaneRows<D>::template of<D / 8>(sdp_q0 + lane % 16, 0, lane / 16);
    const LaneRows<D> kb = LaneRows<D>::template of<D / 8>(sdp_k0 + lane / 16 * 8 + lane % 8, 0, lane / 8 % 2);
    const LaneRows<D> qbt = LaneRows<D>::template of<KV_COLS / 8>(lane / 8 % 2 * 8 + lane % 8, kv_d0 / 8, lane / 16);
    const LaneRows<D> kbt = LaneRows<D>::template of<Q_COLS / 8>(lane / 8 % 2 * 8 + lane % 8, dq_d0 / 8, lane / 16);
    const LaneRows<BLOCK_N> pt = LaneRows<BLOCK_N>::template of<BWD_WARP_ROWS / 8>(lane / 16 * 8 + lane % 8, kv_k0 / 8, lane / 8 % 2);
    const LaneRows<BLOCK_N> dsa = LaneRows<BLOCK_N>::template of<BLOCK_N / 8>(dq_q0 + lane % 16, 0, lane / 16);

    float dk_acc[M_TILES][KV_COLS / MMA_N][4];  // [key m-tile][d-tile][c0..c3]: keys g, g+8 of the m-tile, cols 2t, 2t+1
    float dv_acc[M_TILES][KV_COLS / MMA_N][4];  // the same for dV
#pragma unroll
    for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
        for (int dt = 0; dt < KV_COLS / MMA_N; dt++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk_acc[mt][dt][e] = dv_acc[mt][dt][e] = 0.0f;

    // acc = A B^T for the warp's 32 query rows of a [BLOCK_M][D] tile A (Q or dO) and its
    // 32 key rows of a [BLOCK_N][D] tile B (K or V): S = Q K^T and dP = dO V^T.
    auto queries_times_keys_t = [&](float (&acc)[M_TILES][SDP_N_TILES][4], uint32_t queries_saddr, uint32_t keys_saddr) {
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (int nt = 0; nt < SDP_N_TILES; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / MMA_K; kk++) {
            uint32_t a_frag[M_TILES][4];  // [query m-tile][a0..a3] for d k-step kk
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++) ldmatrix_x4(a_frag[mt], qa.at(queries_saddr, mt * MMA_M, 2 * kk));
#pragma unroll
            for (int nt = 0; nt < SDP_N_TILES; nt += 2) {
                uint32_t b_frag[4];  // [b0, b1 of key n-tile nt, b0, b1 of n-tile nt + 1]
                ldmatrix_x4(b_frag, kb.at(keys_saddr, nt * MMA_N, 2 * kk));
#pragma unroll
                for (int mt = 0; mt < M_TILES; mt++) {
                    mma_m16n8k16<T>(acc[mt][nt], a_frag[mt], b_frag[0], b_frag[1]);
                    mma_m16n8k16<T>(acc[mt][nt + 1], a_frag[mt], b_frag[2], b_frag[3]);
                }
            }
        }
    };

    // acc += A^T B for the warp's 32 keys (columns of a [BLOCK_M][BLOCK_N] tile A: P or dS)
    // and its KV_COLS columns of a [BLOCK_M][D] tile B (dO or Q): dV += P^T dO, dK += dS^T Q.
    auto keys_times_queries = [&](float (&acc)[M_TILES][KV_COLS / MMA_N][4], uint32_t scores_saddr, uint32_t queries_saddr) {
#pragma unroll
        for (int j = 0; j < BLOCK_M / MMA_K; j++) {
            uint32_t a_frag[M_TILES][4];  // [key m-tile][a0..a3] of the transpose, queries 16 j .. 16 j + 15
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++) ldmatrix_x4_trans(a_frag[mt], pt.at(scores_saddr, j * MMA_K, 2 * mt));
#pragma unroll
            for (int dt = 0; dt < KV_COLS / MMA_N; dt += 2) {
                uint32_t b_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                ldmatrix_x4_trans(b_frag, qbt.at(queries_saddr, j * MMA_K, dt));
#pragma unroll
                for (int mt = 0; mt < M_TILES; mt++) {
                    mma_m16n8k16<T>(acc[mt][dt], a_frag[mt], b_frag[0], b_frag[1]);
                    mma_m16n8k16<T>(acc[mt][dt + 1], a_frag[mt], b_frag[2], b_frag[3]);
                }
            }
        }
    };

    // A C fragment of the warp's S or dP tile, rounded to the dtype, into a [BLOCK_M][BLOCK_N]
    // tile: lane 4g + t writes 4 bytes at rows g and g + 8, columns 2t, 2t + 1 of each 8-column
    // n-tile. The 8 rows g of a store land in 8 different 16-byte chunks of their 128-byte
    // bank windows (the swizzle; a row is whole windows) and the 4 lanes t fill one chunk:
    // 32 different banks, one wavefront per store.
    auto store_scores = [&](uint16_t *tile, const float (&acc)[M_TILES][SDP_N_TILES][4]) {
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (int nt = 0; nt < SDP_N_TILES; nt++) {
                const int row_lo = sdp_q0 + mt * MMA_M + g, row_hi = row_lo + 8, col = sdp_k0 + nt * MMA_N + 2 * t;
                *reinterpret_cast<uint32_t *>(tile + row_lo * BLOCK_N + swizzle(row_lo, col)) = pack2<T>(acc[mt][nt][0], acc[mt][nt][1]);
                *reinterpret_cast<uint32_t *>(tile + row_hi * BLOCK_N + swizzle(row_hi, col)) = pack2<T>(acc[mt][nt][2], acc[mt][nt][3]);
            }
    };

    // One step: instantiated twice, as step 07's key tile. Steps that need no mask
    // (every query row in seqlen_q, every key in seqlen_k and, causal, seen by the
    // step's first row) run a copy with no masking code.
    auto query_step = [&](const WalkPos w, const int stage, auto masked) {
        constexpr bool MASKED = decltype(masked)::value;
        const int h = w.h, m0 = w.m0;
        const int64_t row0 = ((int64_t)b * p.heads_q + h) * p.seqlen_q + m0;  // row m0 of head h in LSE order
        const uint32_t qs_saddr = q_saddr + stage * QTILE_BYTES, dos_saddr = do_saddr + stage * QTILE_BYTES;

        // The lane's rows of the step (g and g + 8 of each m-tile) and, loaded before the
        // product that follows, so that the product hides their latency, their LSE (here) and
        // D (before dP); rows past seqlen_q take 0.
        auto load_rows = [&](float (&x)[M_TILES][2], const float *src, float factor) {
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int row = sdp_q0 + mt * MMA_M + g + 8 * r;
                    x[mt][r] = !MASKED || m0 + row < p.seqlen_q ? src[row0 + row] * factor : 0.0f;
                }
        };
        float lse_log2[M_TILES][2];  // [query m-tile][rows g, g + 8]: LSE log2 e
        load_rows(lse_log2, p.lse, LOG2E);

        // S = Q_i K_j^T: the warp's 32 queries x 32 keys.
        float s_acc[M_TILES][SDP_N_TILES][4];  // [query m-tile][key n-tile][c0..c3]: rows g, g+8; keys 2t, 2t+1
        queries_times_keys_t(s_acc, qs_saddr, k_saddr);

        // P = exp2(S scale log2e - LSE log2e), in place. Masked: a hidden pair (a key past
        // seqlen_k or past the row's causal limit, a row past seqlen_q) is selected to 0,
        // never computed from -inf: a row that sees no key has LSE = -inf, and -inf - -inf
        // would be NaN. (Every pair of such a row is masked, so its LSE is never used.) The
        // keys a row sees are a prefix, so one number per row says which: the last of them,
        // counted from the lane's first key column (-1 for a row past seqlen_q), and a pair's
        // test is one compare with an immediate.
        int key_last[M_TILES][2];  // [query m-tile][rows g, g + 8]
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = m0 + sdp_q0 + mt * MMA_M + g + 8 * r;
                const int last = p.causal ? min(p.seqlen_k - 1, row + shift) : p.seqlen_k - 1;  // causal: key <= row + shift
                key_last[mt][r] = row < p.seqlen_q ? last - (n0 + sdp_k0 + 2 * t) : -1;
            }
        auto visible = [&](int mt, int nt, int e) { return nt * MMA_N + (e & 1) <= key_last[mt][e / 2]; };
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (int nt = 0; nt < SDP_N_TILES; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float prob = exp2_approx(fmaf(s_acc[mt][nt][e], scale_log2, -lse_log2[mt][e / 2]));
                    s_acc[mt][nt][e] = !MASKED || visible(mt, nt, e) ? prob : 0.0f;
                }
        // P to shared memory: dV's A is P^T of the warp's 32 keys over all BLOCK_M queries,
        // and the S tiles of those queries are other warps' (SDP_WARPS_M of them).
        store_scores(p_smem, s_acc);

        // dP = dO_i V_j^T: as S, with dO for Q and V for K.
        float d_row[M_TILES][2];  // [query m-tile][rows g, g + 8]: D = rowsum(dO * O)
        load_rows(d_row, a.d_ws, 1.0f);
        float dp_acc[M_TILES][SDP_N_TILES][4];  // as s_acc
        queries_times_keys_t(dp_acc, dos_saddr, v_saddr);

        // dS = P * (dP - D), in place in dp_acc, with P in fp32; masked pairs are 0 (a NaN in
        // V at a key a row does not see must not reach that row's dQ through 0 x NaN). Their P
        // is 0, so P == 0 selects them: asking visible() again, the compiler keeps the first
        // answers, a predicate per pair, live across dP (d128, sm_90, CUDA 13.0: up to 180 bytes spilled).
        // A visible pair whose P underflowed to 0 is zeroed with them, which changes its dS
        // only where dP - D is not finite.
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (int nt = 0; nt < SDP_N_TILES; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float ds = s_acc[mt][nt][e] * (dp_acc[mt][nt][e] - d_row[mt][e / 2]);
                    dp_acc[mt][nt][e] = !MASKED || s_acc[mt][nt][e] != 0.0f ? ds : 0.0f;
                }
        store_scores(ds_smem, dp_acc);
        __syncthreads();  // every warp's P and dS are in shared memory

        // dV_j += P^T dO_i and dK_j += dS^T Q_i: the warp's 32 keys x KV_COLS columns, the
        // step's BLOCK_M queries as k. (Staged dQ: after dQ, below, so that its reductions drain
        // under these 128 mma, as ptxas schedules the unstaged kernel's unmasked step.)
        if constexpr (!C::STAGE_DQ) {
            keys_times_queries(dv_acc, p_saddr, dos_saddr);
            keys_times_queries(dk_acc, ds_saddr, qs_saddr);
        }

        // dQ_i += dS K_j: the warp's 32 query rows x Q_COLS columns over the block's keys, a
        // chunk of Q_CHUNK columns at a time, each added to global memory as soon as it is
        // complete (accumulators for all Q_COLS would sit next to dK's and dV's).
#pragma unroll
        for (int col0 = 0; col0 < Q_COLS; col0 += Q_CHUNK) {
            float dq_acc[M_TILES][Q_CHUNK / MMA_N][4] = {};  // [query m-tile][d-tile of the chunk][c0..c3]: rows g, g+8; cols 2t, 2t+1
#pragma unroll
            for (int kj = 0; kj < BLOCK_N / MMA_K; kj++) {
                uint32_t ds_frag[M_TILES][4];  // [query m-tile][a0..a3] of dS, keys 16 kj .. 16 kj + 15
#pragma unroll
                for (int mt = 0; mt < M_TILES; mt++) ldmatrix_x4(ds_frag[mt], dsa.at(ds_saddr, mt * MMA_M, 2 * kj));
#pragma unroll
                for (int dt = 0; dt < Q_CHUNK / MMA_N; dt += 2) {
                    uint32_t k_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1] of the chunk
                    ldmatrix_x4_trans(k_frag, kbt.at(k_saddr, kj * MMA_K, col0 / MMA_N + dt));
#pragma unroll
                    for (int mt = 0; mt < M_TILES; mt++) {
                        mma_m16n8k16<T>(dq_acc[mt][dt], ds_frag[mt], k_frag[0], k_frag[1]);
                        mma_m16n8k16<T>(dq_acc[mt][dt + 1], ds_frag[mt], k_frag[2], k_frag[3]);
                    }
                }
            }
            if constexpr (C::STAGE_DQ) {
                // The chunk's C fragments into the staging tile at their rows and columns: lane
                // 4g + t's c0, c1 (c2, c3) at row g (g + 8) of the m-tile, columns 2t, 2t + 1 of
                // the d-tile, one 8-byte store each (bank arithmetic below).
#pragma unroll
                for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
                    for (int dt = 0; dt < Q_CHUNK / MMA_N; dt++) {
                        float *frag = dq_stage + (dq_q0 + mt * MMA_M + g) * DQ_STAGE_COLS + dq_d0 + col0 + dt * MMA_N + 2 * t;
                        *reinterpret_cast<float2 *>(frag) = make_float2(dq_acc[mt][dt][0], dq_acc[mt][dt][1]);
                        *reinterpret_cast<float2 *>(frag + 8 * DQ_STAGE_COLS) = make_float2(dq_acc[mt][dt][2], dq_acc[mt][dt][3]);
                    }
            } else {
#pragma unroll
                for (int mt = 0; mt < M_TILES; mt++) {
                    const int q_lo = dq_q0 + mt * MMA_M + g;  // this lane's query rows q_lo, q_lo + 8 of the step
                    float *dq_lo = dq_ws + (row0 + q_lo) * D + dq_d0 + col0 + 2 * t, *dq_hi = dq_lo + 8 * D;
                    const bool lo_in = !MASKED || m0 + q_lo < p.seqlen_q, hi_in = !MASKED || m0 + q_lo + 8 < p.seqlen_q;
#pragma unroll
                    for (int dt = 0; dt < Q_CHUNK / MMA_N; dt++) {
                        const int col = dt * MMA_N;
                        // into the sum every key block adds to (or this split's partial): the result
                        // unused, so RED, not ATOM
                        if (lo_in) atomicAdd(dq_lo + col, dq_acc[mt][dt][0]), atomicAdd(dq_lo + col + 1, dq_acc[mt][dt][1]);
                        if (hi_in) atomicAdd(dq_hi + col, dq_acc[mt][dt][2]), atomicAdd(dq_hi + col + 1, dq_acc[mt][dt][3]);
                    }
                }
            }
        }

        // Staged dQ: each query slice's rows read back whole and added to the workspace with
        // FlashAttention-2's access pattern, one instruction per 32 consecutive floats of one row
        // (sm_80-89: red.global.add.f32, one 128-byte line, 4 full sectors) or per 128 (sm_90:
        // red.global.add.v4.f32, a whole d128 row or two whole d64 rows, 4 lines, 16 sectors),
        // where the fragments' atomics above touch 8 rows x 16 bytes (8 lines, 8 sectors) per
        // instruction. The workspace's layout does not change.
        //  - Banks. A staged row is D + 8 floats (D a multiple of 32), so row r starts 8 r banks
        //    on, mod 32. The fragment stores are 8 bytes a lane, served a half-warp at a time:
        //    lanes 16h .. 16h + 15 are rows g = 4h .. 4h + 3 (relative to a multiple of 8),
        //    starting 8 g mod 32 = 0, 8, 16, 24 banks on, and 8 bytes at column 2t of one 8-column
        //    d-tile: banks 8 (g mod 4) + 2t + e plus a constant, 32 different ones, 2 wavefronts
        //    for 256 bytes, the minimum (with no padding all four rows start at one bank: 4-way).
        //    The reads: lane l takes DQ_RED_VEC floats at column DQ_RED_VEC l of its row segment;
        //    a 16-byte load is served 8 lanes at a time, each 8 lanes 128 contiguous bytes of one
        //    row, and a 4-byte load's 32 lanes read 128 contiguous bytes: 32 banks, the minimum.
        //  - Sync. Rows dq_q0 .. dq_q0 + 31 of the tile (a query slice) are written by the
        //    Q_WARPS_D warps of this dq_q0 (warp % Q_WARPS_M) and read back by the same warps, whole
        //    rows, of which each warp wrote Q_COLS columns only, so those warps meet at named
        //    barrier 1 + warp % Q_WARPS_M (1 or 2 in the wide tile, 1 to 4 in the 128-query one),
        //    Q_WARPS_D x 32 threads (4 warps of the wide tile, 2 of the 128-query one), not the whole
        //    block; __syncwarp would not order the other warps' stores. The tile is written next in
        //    the next step, after the loop's __syncthreads, which every read of this step precedes.
        //  - Rows. Warp w of the slice reads rows DQ_READ_ROWS (w / Q_WARPS_M) on; instruction i
        //    covers the DQ_SEG floats from i DQ_SEG of them, lane l the DQ_RED_VEC from
        //    DQ_RED_VEC l: row and column are the lane's plus constants. Rows past seqlen_q add
        //    nothing (the masked step), as before; the deterministic mode's partial is dq_ws.
        if constexpr (C::STAGE_DQ) {
            named_barrier_sync_of<C::Q_WARPS_M, C::Q_WARPS_D * 32>(1 + warp % C::Q_WARPS_M);
            const int lane_row = lane * DQ_RED_VEC / D, lane_col = lane * DQ_RED_VEC % D;
            const int my_row = dq_q0 + warp / C::Q_WARPS_M * DQ_READ_ROWS + lane_row;  // the lane's first row of the step
            const float *src = dq_stage + my_row * DQ_STAGE_COLS + lane_col;
            float *dst = dq_ws + (row0 + my_row) * D + lane_col;
#pragma unroll
            for (int i = 0; i < DQ_READ_ROWS * D / DQ_SEG; i++) {
                const int r = i * DQ_SEG / D, c = i * DQ_SEG % D;  // the instruction's rows and columns on from the lane's
                if (!MASKED || m0 + my_row + r < p.seqlen_q) {
                    if constexpr (DQ_RED_VEC == 4) red_add_v4(dst + r * D + c, *reinterpret_cast<const float4 *>(src + r * DQ_STAGE_COLS + c));
                    else atomicAdd(dst + r * D + c, src[r * DQ_STAGE_COLS + c]);
                }
            }
            // dV_j += P^T dO_i and dK_j += dS^T Q_i (above for the unstaged tiles), while the
            // reductions drain.
            keys_times_queries(dv_acc, p_saddr, dos_saddr);
            keys_times_queries(dk_acc, ds_saddr, qs_saddr);
        }
    };

    WalkPos pos = {h_kv * group, m_first};  // step s's
    for (int s = 0; s < steps; s++) {
        const int stage = s % STAGES;
        const WalkPos next = walk_next(pos);  // step s + 1's
        if (STAGES == 1 && s > 0) {  // one buffer: every warp is done with step s - 1 before it is overwritten
            __syncthreads();
            issue_step(pos, 0);
            cp_async_commit();
        }
        // Q_s and dO_s have landed (this thread's copies, then, after the barrier, every
        // thread's); every warp is done with step s - 1: its buffer and the P and dS tiles.
        cp_async_wait<0>();
        __syncthreads();
        if (STAGES == 2 && s + 1 < steps) {  // step s + 1 loads while step s computes
            issue_step(next, (s + 1) % 2);
            cp_async_commit();
        }
        const int m0 = pos.m0;
        const bool masked = m0 + BLOCK_M > p.seqlen_q || n0 + BLOCK_N > p.seqlen_k || (p.causal && n0 + BLOCK_N - 1 > m0 + shift);
        if (masked) query_step(pos, stage, std::true_type{});
        else query_step(pos, stage, std::false_type{});
        pos = next;
    }
    cp_async_wait<0>();  // a block with no step never waited for K and V

    // dK_j (times the softmax scale, which dS left out) and dV_j, in the dtype, at their
    // strides: a quad's four 4-byte stores fill 16 contiguous bytes of a row. Written
    // once per block, so staging them for 128-byte lines (step 06) would save little.
#pragma unroll
    for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int key = n0 + kv_k0 + mt * MMA_M + g + 8 * r;
            if (key >= p.seqlen_k) continue;
            uint16_t *dk = (uint16_t *)bp.dk + b * bp.dk_batch_stride + (int64_t)key * bp.dk_row_stride + h_kv * bp.dk_head_stride + kv_d0 + 2 * t;
            uint16_t *dv = (uint16_t *)bp.dv + b * bp.dv_batch_stride + (int64_t)key * bp.dv_row_stride + h_kv * bp.dv_head_stride + kv_d0 + 2 * t;
#pragma unroll
            for (int dt = 0; dt < KV_COLS / MMA_N; dt++) {
                *reinterpret_cast<uint32_t *>(dk + dt * MMA_N) =
                    pack2<T>(dk_acc[mt][dt][2 * r] * p.softmax_scale, dk_acc[mt][dt][2 * r + 1] * p.softmax_scale);
                *reinterpret_cast<uint32_t *>(dv + dt * MMA_N) = pack2<T>(dv_acc[mt][dt][2 * r], dv_acc[mt][dt][2 * r + 1]);
            }
        }
}

// Kernel 3: dQ = softmax_scale x the accumulated dS K, in the dtype at dq's strides, 8
// elements (one 16-byte store) per thread. Deterministic: the sum of the key blocks'
// partials that saw the row, in split order.
template <typename T, int D>
__global__ void __launch_bounds__(BWD_PREP_THREADS) bwd_convert_kernel(const BwdArgs a)
{
    constexpr int CHUNKS = D / 8;
    const fa2_bwd_params &bp = a.p;
    const fa2_params &p = a.p.fwd;
    const int64_t rows_total = (int64_t)p.batch * p.heads_q * p.seqlen_q, total = rows_total * CHUNKS;
    const int shift = p.seqlen_k - p.seqlen_q;
    for (int64_t idx = (int64_t)blockIdx.x * BWD_PREP_THREADS + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * BWD_PREP_THREADS) {
        const int64_t row = idx / CHUNKS;
        const int chunk = (int)(idx % CHUNKS);
        const int i = (int)(row % p.seqlen_q), h = (int)(row / p.seqlen_q % p.heads_q), b = (int)(row / p.seqlen_q / p.heads_q);
        // The partials whose key blocks' walks included row i's query block: the one sum,
        // or, deterministic, the splits in order up to the first whose first key block (split
        // x starts at key block x) starts past the row (its walk's first row, first_query_block
        // times block_m, is past i): causal, first_query_block grows with the key block, so no
        // later key block of that split or of the next ones sees it.
        float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;
        for (int split = 0; split < a.dq_partials && first_query_block(split * a.block_n, shift, p.causal, a.block_m) * a.block_m <= i;
             split++) {
            const float4 *part = reinterpret_cast<const float4 *>(a.dq_ws + (split * rows_total + row) * D + chunk * 8);
            const float4 x = part[0], y = part[1];
            lo.x += x.x, lo.y += x.y, lo.z += x.z, lo.w += x.w;
            hi.x += y.x, hi.y += y.y, hi.z += y.z, hi.w += y.w;
        }
        const float s = p.softmax_scale;
        const uint4 out = {pack2<T>(lo.x * s, lo.y * s), pack2<T>(lo.z * s, lo.w * s), pack2<T>(hi.x * s, hi.y * s), pack2<T>(hi.z * s, hi.w * s)};
        *reinterpret_cast<uint4 *>((uint16_t *)bp.dq + b * bp.dq_batch_stride + (int64_t)i * bp.dq_row_stride + h * bp.dq_head_stride + chunk * 8) = out;
    }
}

// ---- the backward's launcher and ABI --------------------------------------------

// FA2_DETERMINISTIC, read at each call: 1 when it is "1"; 0 when it is unset, empty or
// "0"; -1, with one line in why, for anything else.
static int deterministic_mode(char *why, size_t why_len)
{
    const char *env = getenv("FA2_DETERMINISTIC");
    if (!env || !*env || !strcmp(env, "0")) return 0;
    if (!strcmp(env, "1")) return 1;
    if (why) snprintf(why, why_len, "FA2_DETERMINISTIC '%.32s' (allowed: 0, 1 or unset)", env);
    return -1;
}

static int64_t bwd_rows(const fa2_params *p) { return (int64_t)p->batch * p->heads_q * p->seqlen_q; }
static int bwd_key_blocks(const fa2_params *p, int block_n) { return (p->seqlen_k + block_n - 1) / block_n; }
// The deterministic mode's splits: key blocks per launch, enough that batch x kv heads x
// splits makes about DQ_SPLIT_BLOCKS blocks (a wave of two per SM on a 132-SM H100), at
// most MAX_DQ_SPLITS (the workspace holds that many fp32 copies of dQ) and at most the key
// blocks of block_n keys.
constexpr int DQ_SPLIT_BLOCKS = 256, MAX_DQ_SPLITS = 16;
static int bwd_dq_splits(const fa2_params *p, int block_n)
{
    const int64_t pairs = (int64_t)p->batch * p->heads_kv, want = (DQ_SPLIT_BLOCKS + pairs - 1) / pairs;
    return (int)std::min<int64_t>(std::min<int64_t>(want, MAX_DQ_SPLITS), bwd_key_blocks(p, block_n));
}
// dQ partials the workspace holds: one per split of the smallest key block in the
// deterministic mode (a wider tile has as many splits or fewer), else one sum. A function of
// the params alone, as the workspace's size must be, whichever tile the GPU then takes.
static int64_t bwd_workspace_partials(const fa2_params *p, int deterministic)
{
    return deterministic == 1 ? bwd_dq_splits(p, BWD_MIN_BLOCK_N) : 1;
}

// Blocks of fa2_bwd_kernel<T, D, C, STAGES> per SM, 0 when one does not fit: the runtime's
// occupancy query on the GPU, the same rules by arithmetic under FA2_EMULATE (as step
// 07's fit_of).
template <typename T, int D, typename C, int STAGES>
static int bwd_blocks_per_sm_asked(const fa2_limits *l)
{
    constexpr int smem_bytes = bwd_smem_bytes<C, D, STAGES>();
    if (smem_bytes > l->smem_per_block) return 0;
    int blocks = 0;
    if (!l->preset) {
        if (cudaFuncSetAttribute(fa2_bwd_kernel<T, D, C, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) == cudaSuccess &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fa2_bwd_kernel<T, D, C, STAGES>, C::THREADS, smem_bytes) == cudaSuccess)
            return blocks;
        cudaGetLastError();  // leave no error behind; the arithmetic answers instead
    }
    cudaFuncAttributes attr;
    int regs = 255;
    if (cudaFuncGetAttributes(&attr, fa2_bwd_kernel<T, D, C, STAGES>) == cudaSuccess) regs = attr.numRegs;
    else cudaGetLastError();
    return fa2_limits_blocks_per_sm(l, C::THREADS, regs, smem_bytes);
}

// The same, asked once per process and preset, as choose_config's fits: the occupancy query
// costs microseconds, and at B2 H8 N1024 the whole backward takes about 140.
template <typename T, int D, typename C, int STAGES>
static int bwd_blocks_per_sm(const fa2_limits *l)
{
    static int blocks = 0;
    static const char *asked_for = "";  // the preset (NULL: the GPU) blocks was asked for; "" not yet
    if (asked_for == nullptr ? l->preset != nullptr : (l->preset == nullptr || strcmp(asked_for, l->preset) != 0)) {
        blocks = bwd_blocks_per_sm_asked<T, D, C, STAGES>(l);
        asked_for = l->preset;
    }
    return blocks;
}

template <typename T, int D, typename C, int STAGES>
static int launch_bwd_main(BwdArgs a, cudaStream_t stream)
{
    constexpr int smem_bytes = bwd_smem_bytes<C, D, STAGES>();
    FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_bwd_kernel<T, D, C, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    const fa2_params &p = a.p.fwd;
    // Key blocks in x (up to 2^31 - 1; deterministic, S of them per launch, in order),
    // kv heads and batch in y and z, one launch per 65,535 x 65,535 of them; the kernel
    // adds n_block0, head_kv0 and batch0 to its block index.
    const int n_blocks = bwd_key_blocks(&p, C::BLOCK_N), per_launch = a.deterministic ? a.dq_partials : n_blocks;
    for (int n0 = 0; n0 < n_blocks; n0 += per_launch)
        for (int b0 = 0; b0 < p.batch; b0 += FA2_GRID_YZ_MAX)
            for (int h0 = 0; h0 < p.heads_kv; h0 += FA2_GRID_YZ_MAX) {
                a.n_block0 = n0, a.batch0 = b0, a.head_kv0 = h0;
                dim3 grid(min(per_launch, n_blocks - n0), min(FA2_GRID_YZ_MAX, p.heads_kv - h0), min(FA2_GRID_YZ_MAX, p.batch - b0));
                fa2_bwd_kernel<T, D, C, STAGES><<<grid, C::THREADS, smem_bytes, stream>>>(a);
                FA2_CUDA_TRY(cudaGetLastError());
            }
    return FA2_OK;
}

// The main kernel in the tile launch_bwd_tile chose (the 128-query one at d64 only).
template <typename T, int D>
static int launch_bwd_chosen(BwdArgs a, bool tall, bool staged, bool wide, cudaStream_t stream)
{
    if constexpr (D == 64)
        if (tall) return launch_bwd_main<T, D, BwdTallStaged, 2>(a, stream);
    return staged ? launch_bwd_main<T, D, BwdWideStaged, 2>(a, stream)
           : wide ? launch_bwd_main<T, D, BwdWide, 2>(a, stream)
                  : launch_bwd_main<T, D, BwdNarrow, 1>(a, stream);
}

// The tile: at d64 the 128-query one with dQ staged wherever it fits (BwdTallStaged, 196 KB:
// H100, H200); else the wide one, Q and dO double-buffered (step i + 1 loads under step i's
// math), wherever it fits (160 KB at d128: A100, H100, H200; 96 KB at d64: every GPU here);
// else the narrow one with one buffer (80 KB at d128: the 99 KB GPUs, where two would take
// 112 KB).
template <typename T, int D>
static int launch_bwd_tile(BwdArgs a, const fa2_limits *l, cudaStream_t stream)
{
    const fa2_params &p = a.p.fwd;
    // Each tile asked in the order of preference, so that a GPU asks only up to the one it takes:
    // at d64 the 128-query tile (instantiated at d64 only: at d128 it would take 324 KB), then the
    // wide tile with dQ staged (BwdWideStaged: H100 and H200; A100 at d64 too).
    bool tall = false;
    if constexpr (D == 64) tall = bwd_blocks_per_sm<T, D, BwdTallStaged, 2>(l) > 0;
    const bool staged = tall || bwd_blocks_per_sm<T, D, BwdWideStaged, 2>(l) > 0;
    const bool wide = staged || bwd_blocks_per_sm<T, D, BwdWide, 2>(l) > 0;
    if (!wide && bwd_blocks_per_sm<T, D, BwdNarrow, 1>(l) == 0)
        return fa2_fail("launch_bwd_tile", "no backward tile fits the GPU's shared memory per block");
    static_assert(BwdTallStaged::BLOCK_N == BwdWide::BLOCK_N && BwdWide::BLOCK_M == BwdNarrow::BLOCK_M,
                  "block_n and block_m below: the 128-query tile's key blocks are the wide tile's, the narrow tile's query blocks too");
    a.block_n = wide ? BwdWide::BLOCK_N : BwdNarrow::BLOCK_N;
    a.block_m = tall ? BwdTallStaged::BLOCK_M : BwdWide::BLOCK_M;
    a.dq_partials = a.deterministic ? bwd_dq_splits(&p, a.block_n) : 1;
    // D after the partials the workspace holds, however many of them this tile uses.
    a.d_ws = a.dq_ws + bwd_workspace_partials(&p, a.deterministic) * bwd_rows(&p) * D;
    // The row kernels stride over the rows' 16-byte chunks: at most one wave of resident
    // threads, so a long problem reuses them rather than queueing blocks.
    const int64_t chunks = bwd_rows(&p) * (D / 8);
    const int64_t wave = (int64_t)l->sm_count * (l->threads_per_sm / BWD_PREP_THREADS);
    const int row_grid = (int)std::min((chunks + BWD_PREP_THREADS - 1) / BWD_PREP_THREADS, wave);
    bwd_prep_kernel<T, D><<<row_grid, BWD_PREP_THREADS, 0, stream>>>(a);
    FA2_CUDA_TRY(cudaGetLastError());
    const int rc = launch_bwd_chosen<T, D>(a, tall, staged, wide, stream);
    if (rc != FA2_OK) return rc;
    bwd_convert_kernel<T, D><<<row_grid, BWD_PREP_THREADS, 0, stream>>>(a);
    FA2_CUDA_TRY(cudaGetLastError());
    return FA2_OK;
}

template <typename T, int D>
static int launch_backward(const fa2_bwd_params *p, int deterministic, cudaStream_t stream)
{
    fa2_limits l;
    char why[256];
    if (fa2_limits_get(&l, why, sizeof why) != FA2_LIMITS_OK) return fa2_fail("fa2_limits_get", why);
    BwdArgs a;
    a.p = *p;
    a.dq_ws = (float *)p->fwd.workspace;
    a.batch0 = a.head_kv0 = a.n_block0 = 0;
    a.deterministic = deterministic;
    return launch_bwd_tile<T, D>(a, &l, stream);
}

// dQ's fp32 accumulator (one per split in the deterministic mode) and D, both per
// query row; the size overflowing size_t gives SIZE_MAX, which no workspace reaches.
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *p)
{
    if (!fa2_validate_params(&p->fwd, NULL, 0)) return 0;
    const uint64_t floats_per_row = (uint64_t)bwd_workspace_partials(&p->fwd, deterministic_mode(NULL, 0)) * p->fwd.head_dim + 1;
    uint64_t bytes;
    if (__builtin_mul_overflow(floats_per_row, (uint64_t)bwd_rows(&p->fwd) * sizeof(float), &bytes) || bytes > SIZE_MAX) return SIZE_MAX;
    return (size_t)bytes;
}

extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len)
{
    if (!fa2_validate_bwd_params(p, why, why_len)) return 0;
    // The forward's refusals (head dims 64 and 128, 16-byte aligned q, k, v and o: the
    // backward reads them as the forward does), then its own tensors' alignment.
    if (!fa2_supports(&p->fwd, why, why_len)) return 0;
    if (!fa2_validate_bwd_alignment(p, 16, "16-byte loads and stores", why, why_len)) return 0;
    if (deterministic_mode(why, why_len) < 0) return 0;
    const int least = p->fwd.head_dim == 64 ? bwd_smem_bytes<BwdNarrow, 64, 1>() : bwd_smem_bytes<BwdNarrow, 128, 1>();
    char what[48];
    snprintf(what, sizeof what, "the backward at head_dim %d", p->fwd.head_dim);
    if (!fa2_limits_check_smem(least, what, why, why_len)) return 0;
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
