/* Step 08 - TMA and mbarriers: the copy engine loads the tiles.
 *
 * Step 07's kernel, unchanged in everything it computes (mma.sync m16n8k16 fed by
 * ldmatrix, the three tile configurations chosen from the device limits, the
 * online softmax with its lazy rescale, causal blocks longest first, the staged
 * epilogue), with one change: Q, K and V reach shared memory through the Tensor
 * Memory Accelerator instead of cp.async (docs/08_tma_mbarrier.md).
 *
 * 1. A tensor map per tensor, built on the host (cuTensorMapEncodeTiled, fetched
 *    from the driver at run time: nothing links libcuda), describes Q, K or V as
 *    a 4-D array (head dim, seqlen, heads, batch) with its strides, and a box of
 *    [rows][64] elements. One instruction (cp.async.bulk.tensor) copies one box;
 *    a d128 row is two 128-byte boxes, so a tile is stored as D / 64 slabs.
 * 2. One elected thread issues every copy. In step 07 each of the block's
 *    threads issued 8 to 16 cp.async per K or V tile, each with its own address
 *    arithmetic and, in the seqlen_k tail, a bounds check; here the copy engine
 *    does the addressing, and rows past seqlen come back as zeros by themselves.
 * 3. The box lands 128-byte swizzled (CU_TENSOR_MAP_SWIZZLE_128B): 16-byte chunk c
 *    of 128-byte row r is stored at chunk c ^ (r % 8) -- step 03's XOR, done by
 *    the copy engine. ldmatrix reads it with step 07's addresses, the row length
 *    now 128 bytes and the second half of a d128 row one slab further on.
 * 4. Completion is counted on mbarriers in shared memory: the issuing thread
 *    arms a barrier with the bytes it expects (mbarrier.arrive.expect_tx), the
 *    copy engine counts them down as they land, and every thread waits on the
 *    barrier's phase. One barrier for Q, one per stage for K and V together.
 *    A stage is reused as in step 07: after the block-wide barrier that ends the
 *    tile which read it.
 *
 * TMA and mbarrier transaction counts exist from compute capability 9.0 on: this
 * step is built for sm_90 (and the PTX of compute_90, which the driver compiles for
 * Blackwell GPUs, sm_100 and sm_120), and refuses 8.x GPUs in one line.
 */
#include <cuda.h>          // CUtensorMap and its enums (types only: nothing links libcuda)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled, fetched at run time from the driver
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

// Step 07's tile configurations, chosen there (sweep.sh, on an H200), and the same
// choice among them (choose_config).
constexpr int STAGES = 2;  // shared-memory buffers for each of K and V, as in step 05
template <int WARPS_, int M_TILES_, int BLOCK_N_>
struct TileConfig {
    static constexpr int WARPS = WARPS_, M_TILES = M_TILES_, BLOCK_N = BLOCK_N_;
    static constexpr int THREADS = WARPS * 32;
    static constexpr int BLOCK_M = WARPS * M_TILES * MMA_M;  // query rows per block
};
//  - more 128-row blocks than SMs: 4 warps x 2 m-tiles, 64 keys per tile; two
//    blocks share an SM, 8 warps in all;
//  - at most one block per SM: 8 warps x 1 m-tile, 128 keys per tile;
//  - and where that asks for more shared memory than a block may have (161 KB at
//    d128; an RTX 50xx or a DGX Spark gives a block 99 KB), 64 keys per tile.
using LargeGridConfig = TileConfig<4, 2, 64>;
using SmallGridConfig = TileConfig<8, 1, 128>;
using SmallGridShortTileConfig = TileConfig<8, 1, 64>;
static_assert(LargeGridConfig::BLOCK_M == SmallGridConfig::BLOCK_M && SmallGridConfig::BLOCK_M == SmallGridShortTileConfig::BLOCK_M,
              "every configuration covers the same query rows, so the grid does not depend on the choice");

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
    static constexpr uint32_t BARRIERS = V + STAGES * STAGE_BYTES;        // q_full, then kv_full of each stage
    static constexpr uint32_t BYTES = BARRIERS + (1 + STAGES) * 8 + SWIZZLE_ATOM;  // + room to align the start
    static_assert(Q_SLAB_BYTES % SWIZZLE_ATOM == 0 && KV_SLAB_BYTES % SWIZZLE_ATOM == 0,
                  "every slab starts on a 1024-byte boundary, where TMA's 128-byte swizzle is anchored");
    static_assert(C::BLOCK_M <= 256 && C::BLOCK_N <= 256, "a TMA box has at most 256 rows");
};
template <typename C, int D>
constexpr int smem_bytes_of() { return SmemLayout<C, D>::BYTES; }

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

// One block per SM is all these bounds promise; the 4-warp configuration still fits
// two (128 threads x 255 registers is half an SM's 65,536). Promised nothing, ptxas
// gives the 8-warp d128 kernel 188 registers and places each ldmatrix close to the
// HMMA that reads it, and with one block per SM no other warps hide that shared-memory
// latency; promised one block, it takes 255 and loads the fragments well ahead, as in
// step 07 (whose copy state left it no registers to save).
template <typename T, int D, typename C>
__global__ void __launch_bounds__(C::THREADS, 1)
    fa2_mma_kernel(fa2_params p, const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                   const __grid_constant__ CUtensorMap v_map)
{
    constexpr int BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, M_TILES = C::M_TILES;
    constexpr int THREADS = C::THREADS;
    static_assert(D % MMA_K == 0, "Q K^T consumes the head dim 16 at a time (the k of m16n8k16)");
    static_assert(D % (2 * MMA_N) == 0, "one ldmatrix.x4.trans of V feeds two 8-column d-tiles");
    static_assert(BLOCK_N % MMA_K == 0, "P.V consumes keys 16 at a time (the k of m16n8k16)");
    static_assert(BLOCK_N % (2 * MMA_N) == 0, "one ldmatrix.x4 of K feeds two 8-key n-tiles");
    static_assert(STAGES >= 2, "the copy of tile nb + 1 needs its own buffer while tile nb is read");
    using L = SmemLayout<C, D>;
    extern __shared__ __align__(16) uint16_t smem[];
    // The tiles and barriers as shared-state-space byte addresses (_saddr), the form TMA,
    // mbarriers and ldmatrix take, from the first 1024-byte boundary.
    const uint32_t smem_saddr = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t align_pad = (SWIZZLE_ATOM - smem_saddr % SWIZZLE_ATOM) % SWIZZLE_ATOM;
    constexpr uint32_t ROW_BYTES = SWIZZLE_BYTES, STAGE_BYTES = L::STAGE_BYTES;  // a slab's row; a K or V tile
    const uint32_t q_saddr = smem_saddr + align_pad + L::Q;  // [D / 64][BLOCK_M][64]; O in the epilogue
    const uint32_t k_saddr = smem_saddr + align_pad + L::K;  // [STAGES][D / 64][BLOCK_N][64]
    const uint32_t v_saddr = smem_saddr + align_pad + L::V;  // [STAGES][D / 64][BLOCK_N][64]
    const uint32_t q_full = smem_saddr + align_pad + L::BARRIERS;  // Q has landed
    const uint32_t kv_full = q_full + 8;                           // [STAGES]: K and V of the stage's tile have landed

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

    // Causal: key tiles past the last key the block's last row sees are skipped;
    // only tiles that cross the diagonal, or the seqlen_k tail, need a mask.
    const int key_end = p.causal ? min(p.seqlen_k, max(0, m0 + BLOCK_M + shift)) : p.seqlen_k;
    const int n_blocks = (key_end + BLOCK_N - 1) / BLOCK_N;

    // Thread 0 issues every copy: K and V of key tile nb into stage nb % STAGES, both
    // counted on that stage's barrier (rows past seqlen_k land as zeros).
    auto load_kv = [&](const int nb) {
        const uint32_t stage_off = nb % STAGES * STAGE_BYTES, bar = kv_full + nb % STAGES * 8;
        mbarrier_arrive_expect_tx(bar, 2 * STAGE_BYTES);
        tma_load_tile<BLOCK_N, D>(k_saddr + stage_off, &k_map, bar, nb * BLOCK_N, h_kv, b);
        tma_load_tile<BLOCK_N, D>(v_saddr + stage_off, &v_map, bar, nb * BLOCK_N, h_kv, b);
    };
    // Prologue: the barriers, then Q and key tile 0; each key tile then issues the next.
    if (threadIdx.x == 0) {
        mbarrier_init(q_full, 1);  // one arrival, the expect_tx's; the bytes do the rest
        for (int s = 0; s < STAGES; s++) mbarrier_init(kv_full + s * 8, 1);
        fence_barrier_init();
        mbarrier_arrive_expect_tx(q_full, BLOCK_M * D * 2);  // rows past seqlen_q land as zeros, and count
        tma_load_tile<BLOCK_M, D>(q_saddr, &q_map, q_full, m0, h, b);
        if (n_blocks > 0) load_kv(0);
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them

    // This lane's ldmatrix row addresses. Every row a lane points at has
    // row % 8 == lane % 8 (fragments start on multiples of 8 rows), so the swizzle
    // maps 16-byte chunk c of a slab row to c ^ lane % 8: of the chunks a lane
    // reads, only 4 distinct addresses remain, [i] for c = 2 i + its half (k-steps
    // kk with kk % 4 == i); m-tiles, n-tiles, key steps and the next slab (kk / 4)
    // are fixed offsets the loads take as immediates.
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
        const int n0 = nb * BLOCK_N;
        const uint32_t stage_off = nb % STAGES * STAGE_BYTES;
        // Every warp is done with tile nb - 1, whose stage the copy of tile nb + 1
        // overwrites; then K and V of tile nb have landed. One block-wide barrier per
        // tile, as in step 07; the wait on the mbarrier is each thread's own.
        __syncthreads();
        if (threadIdx.x == 0 && nb + 1 < n_blocks) load_kv(nb + 1);
        mbarrier_wait(kv_full + nb % STAGES * 8, nb / STAGES % 2);  // the stage's (nb / STAGES)-th use

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
                ldmatrix_x4(q_frag[mt], q_addr[kk % 4] + mt * MMA_M * ROW_BYTES + kk / 4 * L::Q_SLAB_BYTES);
#pragma unroll
            for (int nt = 0; nt < BLOCK_N / MMA_N; nt += 2) {
                // B = K^T: element (k = d, n = key) is K[key][d] of the tile, rows of K are the n of B.
                // Matrices: keys nt*8 + 0-7 (lanes 0-15) or + 8-15 (lanes 16-31), d cols + 0-7 or + 8-15
                // (lane / 8 % 2) = b0, b1 of n-tile nt, then b0, b1 of n-tile nt + 1.
                uint32_t k_frag[4];  // [b0, b1 of n-tile nt, b0, b1 of n-tile nt + 1]
                ldmatrix_x4(k_frag, k_addr[kk % 4] + stage_off + nt * MMA_N * ROW_BYTES + kk / 4 * L::KV_SLAB_BYTES);
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
                ldmatrix_x4_trans(v_frag, v_addr[dt % 8 / 2] + stage_off + j * MMA_K * ROW_BYTES + dt / 8 * L::KV_SLAB_BYTES);
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
    mbarrier_wait(q_full, 0);
    for (int nb = 0; nb < first_masked; nb++) key_tile(nb, std::false_type{});
    for (int nb = first_masked; nb < n_blocks; nb++) key_tile(nb, std::true_type{});

    // Epilogue, 1: finish the row sums across the quad, normalise in registers,
    // write O into the Q tile's shared memory (swizzled: a fragment's 8 rows hit 8
    // different chunks, so the 4-byte stores are conflict-free), and LSE directly.
    __syncthreads();  // every warp is done reading Q (and K, V) before O overwrites it
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
    FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_mma_kernel<T, D, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    dim3 grid((p->seqlen_q + C::BLOCK_M - 1) / C::BLOCK_M, p->heads_q, p->batch);
    fa2_mma_kernel<T, D, C><<<grid, C::THREADS, smem_bytes, (cudaStream_t)stream>>>(*p, maps[0], maps[1], maps[2]);
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
    if (l.cc_major < 9) {
        if (why) snprintf(why, why_len, "GPU compute capability %d.%d (allowed: 9.0 or newer; TMA and mbarrier transaction counts arrive with sm_90)", l.cc_major, l.cc_minor);
        return 0;
    }
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

extern "C" const char *fa2_name(void) { return "08_tma_mbarrier"; }
extern "C" const char *fa2_key_change(void) { return "TMA and mbarriers: one thread's bulk tensor copies, 128-byte swizzled by the copy engine, counted on mbarriers"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }
extern "C" size_t fa2_workspace_size(const fa2_params *) { return 0; }  // one pass: no partial results

// No backward in this step: every call is refused in one line (the params' own refusal
// where they are bad), and nothing is touched.
extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len) { return fa2_refuse_backward(p, fa2_name(), why, why_len); }
extern "C" int fa2_backward(const fa2_bwd_params *, void *) { return FA2_ERR_UNSUPPORTED; }
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *) { return 0; }
