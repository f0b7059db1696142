/* Step 07 - the portable kernel, tuned for the GPU.
 *
 * Steps 02-06 each added one technique at the tiles of step 02 (64 query rows, 4
 * warps, 64 keys). This step keeps every technique and the staged epilogue of
 * step 06, and tunes what a profile of step 06 asks for, each part measured
 * (docs/07_tuned.md; the A/B runs behind it are in results/):
 *
 * 1. The tile configuration, chosen by the sweep in sweep.sh: WARPS warps per
 *    block, each owning M_TILES x 16 query rows; BLOCK_N keys per tile. (K and V
 *    stay double-buffered as in step 05: the copy of tile nb + 1 is issued one
 *    tile ahead, so a third buffer would only hold nothing.) With 2 m-tiles per
 *    warp every K or V fragment that ldmatrix brings from shared memory feeds
 *    two mma instead of one, halving the
 *    shared-memory traffic per flop (at one m-tile a warp needs 256 bytes of B
 *    fragment per 4096-flop mma: at mma.sync's full rate that is more than the
 *    128 bytes per clock an SM's shared memory delivers). Two m-tiles leave no
 *    room for Q's fragments next to two O accumulators, so Q stays in shared
 *    memory and is re-read with ldmatrix at each key tile (the epilogue then
 *    waits for every copy before O takes Q's place). Where two such blocks
 *    cannot share an SM -- the grid has no more blocks than the GPU has SMs, or
 *    the SM's shared memory holds only one (d128 on an A100 or a 99 KB part) --
 *    a configuration with 8 warps per block keeps 8 warps on each SM: 128 keys
 *    per tile where the block may have 160 KB of shared memory, 64 where it
 *    gets 99 KB (see choose_config; the numbers come from common/device_limits.h).
 *
 * 2. The instruction budget. With two warps per scheduler, every non-mma
 *    instruction competes with the mma for issue slots. So: tiles that need no
 *    mask run a copy of the loop body compiled without masking (the run-time
 *    branch made the compiler shuffle registers around it); row max and row sum
 *    are pairwise trees instead of dependent chains; every address that depends
 *    on the lane is computed once, before the loop (TileCopy, q_addr / k_addr /
 *    v_addr: shared-state-space addresses, the form cp.async and ldmatrix take),
 *    and full key tiles are copied without per-row checks.
 *
 * 3. The O rescale is skipped while no row's max has grown by more than
 *    2^RESCALE_LOG2 (a warp vote), in the configuration where it is long (two
 *    m-tiles at d128: 128 FMUL per lane per key tile); and each key tile waits
 *    at one barrier, for K and V together.
 *
 * 4. Causal launches start with the blocks that see the most keys.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
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

extern "C" const char *fa2_name(void) { return "07_tuned"; }
extern "C" const char *fa2_key_change(void) { return "tuned for the GPU: tiles by blocks per SM, an unmasked loop body, a lazy O rescale"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }
extern "C" size_t fa2_workspace_size(const fa2_params *) { return 0; }  // one pass: no partial results

// No backward in this step: every call is refused in one line (the params' own refusal
// where they are bad), and nothing is touched.
extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len) { return fa2_refuse_backward(p, fa2_name(), why, why_len); }
extern "C" int fa2_backward(const fa2_bwd_params *, void *) { return FA2_ERR_UNSUPPORTED; }
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *) { return 0; }
