/* Step 13 - split-KV decode: the keys of one head cut over many blocks.
 *
 * Base: step 07 (07_tuned), the portable kernel; `make step=13 diff` shows what
 * changed against it. Runs on every GPU since Ampere, as step 07 does.
 *
 * At decode seqlen_q is 1 (or a few tokens of speculative decoding) and seqlen_k
 * is long. Step 07's grid is (query tile, head, batch): B8 Hq32 Nq1 gives 256
 * blocks, each a 128-row tile with one useful row, so the tensor cores compute
 * 127 rows of padding per row (at B8 Hq32 Nk8192 d128, 137 GFLOP for 1); each
 * block streams a whole head's K and V alone, and with GQA four of them stream
 * the same K/V head; at B1 there are 32 blocks for the GPU's SMs. The work is
 * reading K and V once (docs/13_split_kv.md counts blocks, waves and bytes per
 * block). This step changes the grid:
 *
 * 1. Pack a GQA group's query heads, and the few query rows, into the rows of one
 *    16-row m-tile: packed row r is query row r / group of query head
 *    kv_head * group + r % group. Each K/V element is read from memory once per
 *    group, and every row of the tile shares the K and V it multiplies.
 *
 * 2. Split the keys, twice. Across blocks: the grid is (query tile x split, kv
 *    head, batch), and block `split` runs the online softmax over its own range
 *    of key tiles, so B x Hkv blocks become enough to fill the GPU. Within the
 *    block: its 4 warps share the 16 rows and each takes a quarter of every key
 *    tile (step 07's warps each owned rows, which decode does not have). Both
 *    leave partial results -- O normalised by its own row sum, and the row's LSE
 *    -- and both merge them with the rescale the online softmax applies at every
 *    key tile: O = sum_s exp(LSE_s - LSE) O_s, LSE = log sum_s exp(LSE_s). The
 *    warps merge in shared memory at the end of the block; the splits write
 *    fp32 partials to the caller's workspace (fa2_workspace_size) and count
 *    their arrival in an int32 of it, one per output tile. The split that
 *    arrives last merges every split's partials of its tile and writes O and
 *    LSE, in the same launch: no second kernel, no launch gap. One split
 *    writes O directly and touches no workspace.
 *
 * 3. The number of splits comes from the GPU's limits (common/device_limits.h): the SM
 *    count, how many blocks fit on an SM, batch x kv heads x query tiles and the
 *    number of key tiles (choose_plan; the sweep behind it is sweep.sh).
 *    With per-sequence lengths the work is uneven and only the GPU knows it (the lengths
 *    are in its memory; the host would have to wait on the stream to read them). Split
 *    by the longest length, a batch of one long and many short sequences leaves the long
 *    one's few blocks streaming alone at the end. So every warp sums the key tiles of the
 *    whole launch from the lengths and applies choose_plan's wave rule to that work as if
 *    it were tiles of the longest length: one range length for the launch, and each tile
 *    as many ranges as its keys fill (balanced_tiles_per_split). The long sequence gets
 *    many ranges, a short one one, uniform lengths the host's count. A grid of a block per
 *    range the workspace allows (max_splits per tile) is mostly blocks that find no range
 *    and return, each still a pass through an SM: 3968 of 4096 at B8 Hkv8 Nk8192 given as
 *    lengths, a third slower than without them. So one wave of blocks takes the ranges
 *    from a queue instead (fa2_queue_kernel): an int32 counter in the workspace that each
 *    block increments for its next item (a range of one kv head's tile) until none is
 *    left; a block finds its item's tile by a binary search of where each group of 32
 *    tiles' items start, which it counted from the lengths into shared memory. The queue
 *    hands out the full ranges first, then the shorter last ones, longest first (three
 *    classes of length, unsorted within each): each block takes an item when it finishes
 *    one, so the blocks finish within about one item of each other, and it is the last
 *    items taken, the shortest, that decide by how much (the longest-first rule of list
 *    scheduling). The last block to leave resets the counter, as the last block of a
 *    tile resets the tile's. Without lengths the grid and its code are as before.
 *
 * 4. Key tiles and K/V stages from a shared-memory budget: 128 KB where a block
 *    may have it (2 stages of 128 keys at d128, 4 at d64: one block per SM keeps
 *    64 or 96 KB of K and V in flight; sweep.sh), else what a 99 KB block
 *    holds (3 stages of 128 keys at d64, 2 of 64 at d128).
 *
 * 5. A KV cache as serving engines keep it (fa2.h): a length per sequence (seqlens_k,
 *    read by each block for its own sequence: its key tiles, causal shift and tail) and
 *    K and V in pages through a block table (a key tile within one page is looked up
 *    once; with pages of fewer keys than a tile, each copy pass's rows share a page, whose
 *    entry one thread per pass loads two tiles ahead: the copy reads the pass's row
 *    addresses from shared memory and never waits on the table). Range boundaries are
 *    whole tiles, so a tile crosses pages only where pages are smaller than tiles.
 *
 * What stays from step 07: the swizzle, ldmatrix, the cp.async pipeline (one
 * barrier per key tile; at 2 stages it is step 07's double buffer), the unmasked
 * loop body for tiles that need no mask, and the pairwise row reductions. What
 * goes: step 07's two tile configurations (one 16-row tile serves every shape; a
 * long seqlen_q is computed, slower than the prefill steps) and its lazy O
 * rescale, which only paid with two m-tiles.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
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

// The tile: one m-tile of packed rows, WARPS warps that split every key tile.
// sweep.sh rebuilds this file with other key tiles and stages (LargeLayout below)
// and with -DFA2_SWEEP_SPLITS=.. (a fixed split count instead of choose_splits's).
constexpr int WARPS = 4, THREADS = WARPS * 32;
constexpr int BLOCK_M = MMA_M;  // packed rows per block
// Keys per tile and K/V stages come from a budget of shared memory for the K and V
// buffers: 128-key tiles where two stages of them fit, else 64, and as many stages
// as the budget holds. Two budgets, the first that fits the GPU's shared memory per
// block (common/device_limits.h) is taken:
//  - 128 KB, chosen by sweep.sh on an H100: 128 keys, 4 stages at d64, 2
//    at d128 -- one block per SM with 96 KB (d64) or 64 KB (d128) of K and V in
//    flight while it computes on the rest. An A100's blocks may have 163 KB, an
//    H100's 227 KB.
//  - 99 KB less Q, what a block gets on GPUs of compute capability 8.6, 8.9 and
//    12.x: 3 stages of 128 keys at d64; at d128 two 128-key stages would need
//    128 KB, so 2 stages of 64 keys (3 would need 100 KB, 1 KB over).
constexpr int LARGE_KV_BUDGET = 128 * 1024;
constexpr int SMALL_BLOCK_SMEM = 99 * 1024;
template <int D> constexpr int small_kv_budget() { return SMALL_BLOCK_SMEM - BLOCK_M * D * 2; }
template <int D, int BUDGET> constexpr int tile_keys() { return BUDGET / (2 * 128 * D * 2) >= 2 ? 128 : 64; }
template <int D, int BUDGET> constexpr int tile_stages() { return BUDGET / (2 * tile_keys<D, BUDGET>() * D * 2); }

// Splits: at most MAX_SPLITS, and at most MAX_SPLIT_BLOCKS blocks in all, so the
// workspace has a bound that depends on the params alone (fa2_workspace_size):
// 4096 blocks are 31 waves of one block per SM on 132 SMs, far past where more
// splits stop paying (sweep.sh).
constexpr int MAX_SPLITS = 128, MAX_SPLIT_BLOCKS = 4096;

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

// Four floats from global memory through L2 alone (ld.global.cg: the SM's L1 is not
// kept coherent with other SMs' stores), or zeros where `valid` is false. The load is
// predicated, with no branch around it, so a loop's loads issue together, ahead of the
// arithmetic that waits for them.
__device__ __forceinline__ float4 ldcg_float4_or_zero(const float *src, bool valid)
{
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t@p ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%5];\n\t}\n"
                 : "+f"(v.x), "+f"(v.y), "+f"(v.z), "+f"(v.w)
                 : "r"((int)valid), "l"(src));
    return v;
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
// in turn.
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

    // The K and V copies of a tile that crosses pages (fa2.h's paged K and V, pages of
    // fewer keys than a tile). A pass's rows, row0 + pass * ROWS_PER_PASS for the threads'
    // row0 < ROWS_PER_PASS, lie in one page (pages hold a power of two of at least 16 keys,
    // ROWS_PER_PASS is 8 or 16), so the kernel looks each pass's page up once per tile, a
    // tile ahead, and leaves in shared memory (pass_rows[pass]) the addresses of the
    // pass's first row in the K and V pools; this thread's row and chunk are k_bytes and
    // v_bytes further. The copy reads no block table: a 64-bit add and a cp.async per
    // row, as the dense copy's. Rows from valid_rows on are zero-filled (their addresses
    // lie in a page of the pool: a source address that exists).
    template <int ROWS, bool FULL>
    __device__ __forceinline__ void issue_paged(uint32_t k_tile_saddr, uint32_t v_tile_saddr, int64_t k_bytes, int64_t v_bytes,
                                                const ulonglong2 *pass_rows, int valid_rows) const
    {
        static_assert(ROWS % ROWS_PER_PASS == 0, "every thread copies the same number of rows");
        static_assert(ROWS_PER_PASS <= 16 && (ROWS_PER_PASS & (ROWS_PER_PASS - 1)) == 0,
                      "a pass's rows lie in one page of 16 or more keys");
        // The addresses are read 4 passes at a time, before those passes' copies: a cp.async
        // writes shared memory, so no load of it moves past one, and a load per copy would
        // wait out its latency (some 30 cycles) at every pass.
        constexpr int PASSES = ROWS / ROWS_PER_PASS, BATCH = PASSES < 4 ? PASSES : 4;
        static_assert(PASSES % BATCH == 0, "the passes come in whole batches");
#pragma unroll
        for (int pass0 = 0; pass0 < PASSES; pass0 += BATCH) {
            ulonglong2 row[BATCH];
#pragma unroll
            for (int i = 0; i < BATCH; i++) row[i] = pass_rows[pass0 + i];
#pragma unroll
            for (int i = 0; i < BATCH; i++) {
                const int pass = pass0 + i;
                const uint32_t dst_off = smem_off + pass * ROWS_PER_PASS * D * 2;
                const bool valid = FULL || row0 + pass * ROWS_PER_PASS < valid_rows;
                cp_async_16(k_tile_saddr + dst_off, (const void *)(row[i].x + k_bytes), valid);  // src-size 0 reads nothing
                cp_async_16(v_tile_saddr + dst_off, (const void *)(row[i].y + v_bytes), valid);
            }
        }
    }
};

// ---- packed rows ---------------------------------------------------------------

// Packed row r of kv head h_kv: query row r / group of query head h_kv * group +
// r % group. Consecutive rows are the heads of one query row, so the rows of a
// tile share their causal limit in runs of `group`.
struct PackedRow {
    int query, head;
};
__device__ __forceinline__ PackedRow unpack_row(int r, int group, int h_kv) { return {r / group, h_kv * group + r % group}; }
// Where a packed row's results go: its index in fa2.h's LSE order (also the row of each
// split's partials and of the arrival counters), and its row of O.
__device__ __forceinline__ int64_t lse_row_of(const fa2_params &p, int b, PackedRow pr)
{
    return ((int64_t)b * p.heads_q + pr.head) * p.seqlen_q + pr.query;
}
__device__ __forceinline__ uint16_t *o_row_of(const fa2_params &p, int b, PackedRow pr)
{
    return (uint16_t *)p.o + b * p.o_batch_stride + (int64_t)pr.query * p.o_row_stride + pr.head * p.o_head_stride;
}

// ---- the split count on the GPU ---------------------------------------------------

// choose_plan's wave rule (below, on the host), for the blocks of a launch with per-sequence
// lengths: blocks run in waves of `wave` (sm_count x blocks_per_sm), and s splits give each
// block ceil(tiles / s) key tiles of a tile's `tiles`, so s splits of `blocks` tiles take
// waves x that many tile times on each of wave slots: their capacity. The work is the same
// for every s, so the best count has the least capacity, and the count is the fewest splits
// whose capacity is within 5% of the least (a fill work / capacity within 5% of the best) up
// to cap. Whole numbers, so every warp of every block compares them exactly and reaches the
// same count (the host's doubles may round a fill of exactly 95% of the best either way; this
// takes the fewer splits).
__device__ __forceinline__ long long wave_capacity(int blocks, int splits, int tiles, int wave)
{
    const int waves = (blocks * splits + wave - 1) / wave;
    return (long long)waves * wave * ((tiles + splits - 1) / splits);
}
__device__ __forceinline__ bool capacity_near(long long capacity, long long least) { return 20LL * least >= 19LL * capacity; }

// Lane l weighs s = l + 1, l + 33, ... at once; the least capacity is a shuffle reduction, and
// the fewest splits near it the lowest lane of the first ballot that has one. No barrier: each
// warp runs it alone. base_blocks x cap <= MAX_SPLIT_BLOCKS (max_splits): blocks are ints.
__device__ __forceinline__ int wave_splits_warp(int base_blocks, int tiles, int wave, int cap)
{
    static_assert(MAX_SPLITS % 32 == 0, "every lane weighs the same number of split counts");
    constexpr int PER_LANE = MAX_SPLITS / 32;
    const int lane = threadIdx.x % 32;
    long long capacity[PER_LANE], least = LLONG_MAX;  // a count past cap: never the least
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        const int s = 32 * j + lane + 1;
        capacity[j] = s <= cap ? wave_capacity(base_blocks, s, tiles, wave) : LLONG_MAX;
        least = min(least, capacity[j]);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) least = min(least, __shfl_xor_sync(0xffffffffu, least, off));
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        const unsigned near = __ballot_sync(0xffffffffu, 32 * j + lane + 1 <= cap && capacity_near(capacity[j], least));
        if (near) return 32 * j + __ffs(near);
    }
    return cap;  // not reached: the least capacity is near itself
}

// Key tiles of BLOCK_N keys that query tile m_block of a sequence of seqlen_k keys reaches:
// those its last query row sees (causal), every one otherwise.
template <int BLOCK_N>
__device__ __forceinline__ int key_tiles_of_tile(const fa2_params &p, int seqlen_k, int m_block, int group, int rows)
{
    const int last_query = min(rows - 1, m_block * BLOCK_M + BLOCK_M - 1) / group;
    const int key_end = p.causal ? min(seqlen_k, max(0, last_query + 1 + seqlen_k - p.seqlen_q)) : seqlen_k;
    return (key_end + BLOCK_N - 1) / BLOCK_N;
}

// Per-sequence lengths: the key tiles per split, one count for every tile of the launch. Each
// warp reads all the lengths and sums the key tiles of every (query tile, kv head, sequence):
// that work, spread as evenly as whole tiles allow, is `equal` tiles of the longest one's
// length, and the wave rule gives those `equal` tiles s splits; a split then holds the longest
// tile's tiles / s. A tile of t key tiles takes ceil(t / that) splits: the longest s, a short
// one 1. Uniform lengths (where every query tile sees as many keys) give equal = base_blocks:
// the split count and ranges of choose_plan. Each lane keeps LENGTH_LOADS lengths in flight:
// one L2 round trip per 32 x LENGTH_LOADS sequences, not one per 32 (8 in flight made ptxas
// spill at d128 on sm_86 and sm_89). batch x query tiles <= MAX_SPLIT_BLOCKS / 2 where there
// are splits at all (max_splits), so the sums fit easily: work <= 2^11 x 2^24 key tiles
// (fa2.h: a sequence has at most 2^30 keys).
constexpr int LENGTH_LOADS = 4;
template <int BLOCK_N>
__device__ int balanced_tiles_per_split(const fa2_params &p, int m_blocks, int group, int rows, int wave, int cap)
{
    long long work = 0;
    int longest = 0;
    for (int b0 = threadIdx.x % 32; b0 < p.batch; b0 += 32 * LENGTH_LOADS) {
        int seqlen[LENGTH_LOADS];  // past the batch: 0 keys, no tiles
#pragma unroll
        for (int j = 0; j < LENGTH_LOADS; j++) seqlen[j] = b0 + 32 * j < p.batch ? p.seqlens_k[b0 + 32 * j] : 0;
#pragma unroll
        for (int j = 0; j < LENGTH_LOADS; j++)
            for (int m = 0; m < m_blocks; m++) {
                const int tiles = key_tiles_of_tile<BLOCK_N>(p, seqlen[j], m, group, rows);
                work += tiles;
                longest = max(longest, tiles);
            }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        work += __shfl_xor_sync(0xffffffffu, work, off);
        longest = max(longest, __shfl_xor_sync(0xffffffffu, longest, off));
    }
    if (longest == 0) return 1;  // no sequence has a visible key: one empty split per tile
    const int equal = (int)((work * p.heads_kv + longest - 1) / longest);  // <= base_blocks
    const int splits = wave_splits_warp(equal, longest, wave, cap);
    return (longest + splits - 1) / splits;
}

// ---- the work queue (per-sequence lengths) ----------------------------------------
//
// A pair is (sequence b, query tile m), numbered b x m_blocks + m: its key tiles, and so its
// ranges, are the same for every kv head. Its ranges are `full` of tiles_per_split tiles and a
// last, shorter one (or, with no key, one empty range: O = 0, LSE = -inf). An item is one range
// of one kv head's tile. Items are numbered by class, then kv head, then pair, then range:
// class 0 holds the full ranges, classes 1 .. LAST_CLASSES the last ranges, by length from the
// longest (tiles_per_split - 1) down to the empty one, so the queue hands out the longest
// items first. A block takes its next item when it finishes one, so the blocks finish within
// about one item of each other, and the last items taken decide how far apart: the shortest
// (the longest-first rule of list scheduling). The lengths within a class are left unsorted.
constexpr int LAST_CLASSES = 3, ITEM_CLASSES = 1 + LAST_CLASSES;
// Pairs in groups of a warp's 32 lanes; with splits there are at most MAX_SPLIT_BLOCKS / 2
// blocks of one split (max_splits), so at most that many pairs: 64 groups.
constexpr int PAIR_GROUP = 32, MAX_PAIR_GROUPS = MAX_SPLIT_BLOCKS / 2 / PAIR_GROUP;
struct TileItems {
    int full;        // ranges of tiles_per_split tiles
    int last_class;  // the class of the last, shorter range; 0: none
};
__device__ __forceinline__ TileItems tile_items(int n_tiles, int tiles_per_split)
{
    const int full = n_tiles / tiles_per_split, rest = n_tiles - full * tiles_per_split;
    const bool last = rest != 0 || n_tiles == 0;
    return {full, last ? 1 + LAST_CLASSES * (tiles_per_split - 1 - rest) / tiles_per_split : 0};
}
// Items of class k that pair `pair` has, per kv head (past the pairs: none).
template <int BLOCK_N>
__device__ __forceinline__ TileItems pair_items(const fa2_params &p, int pair, int pairs, int m_blocks, int group, int rows,
                                                int tiles_per_split)
{
    if (pair >= pairs) return {0, 0};
    const int b = pair / m_blocks;
    return tile_items(key_tiles_of_tile<BLOCK_N>(p, p.seqlens_k[b], pair - b * m_blocks, group, rows), tiles_per_split);
}
__device__ __forceinline__ int class_count(TileItems t, int k) { return k == 0 ? t.full : t.last_class == k; }

// The queue's shared memory, past K and V: where each group of pairs starts in each class's
// items (per kv head; at most base_blocks x max_splits <= MAX_SPLIT_BLOCKS items in all, so
// 16 bits hold them), the classes' sizes, and the item the block runs now.
struct QueueSmem {
    uint16_t starts[ITEM_CLASSES][MAX_PAIR_GROUPS];
    int class_items[ITEM_CLASSES];
    int n_items, tiles_per_split;
    int pair, h_kv, split, splits;  // pair -1: the queue is empty
};
static_assert(MAX_SPLIT_BLOCKS < 65536, "an item's number fits the 16 bits of QueueSmem::starts");

// ---- the kernel --------------------------------------------------------------

// Shared memory: Q [BLOCK_M][D], then K and V [STAGES][BLOCK_N][D] each, then the
// addresses in pages smaller than a tile [STAGES][PAGE_PASSES] (K's and V's, 8 bytes
// each, for each copy pass of a tile: TileCopy::issue_paged); after the last key tile the K/V space holds the warps' partial results for the merge:
// O [WARPS][BLOCK_M][O_PITCH] fp32 and the row max and sum [WARPS][BLOCK_M] each;
// past them, in the block that merges the splits, each row's split weights
// [BLOCK_M][MAX_SPLITS] and the per-slot sums of O [BLOCK_M][D] (fp32). Last, with
// per-sequence lengths, the work queue's QueueSmem (the launch's items, and the block's).
template <int D, int BLOCK_N_, int STAGES_>
struct SmemLayout {
    static constexpr int BLOCK_N = BLOCK_N_;              // keys per tile
    static constexpr int WARP_KEYS = BLOCK_N / WARPS;     // each warp's share of a key tile
    static constexpr int STAGES = STAGES_;                // buffers for each of K and V
    static_assert(WARP_KEYS % MMA_K == 0, "a warp's keys feed P.V 16 at a time (the k of m16n8k16)");
    static constexpr int O_PITCH = D + 8;  // fp32 per row: the 8 rows of a fragment store start 8 banks apart
    static constexpr int Q_BYTES = BLOCK_M * D * 2, STAGE_BYTES = BLOCK_N * D * 2;
    static constexpr int KV_BYTES = 2 * STAGES * STAGE_BYTES;
    static constexpr int MERGE_BYTES = WARPS * BLOCK_M * (O_PITCH + 2) * 4;
    static constexpr int SPLIT_MERGE_BYTES = BLOCK_M * (MAX_SPLITS + D) * 4;
    static_assert(MERGE_BYTES + SPLIT_MERGE_BYTES <= KV_BYTES,
                  "the warps' partial O, max and sum, the split weights and the slots' sums of O fit where K and V were");
    static constexpr int PAGE_PASSES = BLOCK_N / (THREADS / (D * 2 / 16));  // TileCopy's passes over a tile
    static constexpr int PAGE_BYTES = STAGES * PAGE_PASSES * 16;
    static constexpr int QUEUE_OFF = Q_BYTES + KV_BYTES + PAGE_BYTES;
    static constexpr int BYTES = QUEUE_OFF + (int)(sizeof(QueueSmem) + 15) / 16 * 16;
};
// sweep.sh rebuilds this file with -DFA2_SWEEP_BLOCK_N=.. and -DFA2_SWEEP_STAGES=..
// to time other candidates in the first layout's place.
#ifdef FA2_SWEEP_BLOCK_N
#ifdef FA2_SWEEP_STAGES
template <int D> using LargeLayout = SmemLayout<D, FA2_SWEEP_BLOCK_N, FA2_SWEEP_STAGES>;
#else
template <int D> using LargeLayout = SmemLayout<D, FA2_SWEEP_BLOCK_N, LARGE_KV_BUDGET / (2 * FA2_SWEEP_BLOCK_N * D * 2)>;
#endif
#else
template <int D> using LargeLayout = SmemLayout<D, tile_keys<D, LARGE_KV_BUDGET>(), tile_stages<D, LARGE_KV_BUDGET>()>;
#endif
template <int D> using SmallLayout = SmemLayout<D, tile_keys<D, small_kv_budget<D>()>(), tile_stages<D, small_kv_budget<D>()>()>;
static_assert(SmallLayout<64>::BYTES <= SMALL_BLOCK_SMEM && SmallLayout<128>::BYTES <= SMALL_BLOCK_SMEM,
              "the small layout fits a 99 KB block");
// Splits never outnumber the key tiles of this length, the longest any layout has,
// so the workspace they size (fa2_workspace_size) depends on the params alone.
constexpr int SPLIT_KEY_TILE = 128;
static_assert(LargeLayout<64>::BLOCK_N <= SPLIT_KEY_TILE && LargeLayout<128>::BLOCK_N <= SPLIT_KEY_TILE,
              "no layout has fewer key tiles than the split bound counts");

// One range of key tiles of one query tile (m_block, kv head h_kv, sequence b): range
// `split` of the tile's `splits`. Without per-sequence lengths (QUEUE false) the grid is
// (query tile x grid_splits, kv head, batch), a block per range, and every tile has
// grid_splits ranges of even length; with them (QUEUE true) a block runs one item of the
// work queue after another (fa2_split_kernel), and the item gives the range length and the
// tile's count (queue_splits, in shared memory). A tile of splits > 1: the range's block
// writes O_s (fp32, normalised by its own row sum) to o_part [grid_splits][batch * heads_q *
// seqlen_q][D] and LSE_s to lse_part [grid_splits][batch * heads_q * seqlen_q], rows in the
// order of fa2.h's LSE, and counts its arrival in counters [batch * heads_q * seqlen_q], the
// int32 of its tile's first row (fa2.h: zero when the call begins, and again when it ends);
// the tile's last block to arrive merges the splits into O and LSE.
// Loads in flight per thread while the last block merges O_s (float4 each).
constexpr int MERGE_LOADS = 16;
template <typename T, int D, typename L, bool QUEUE>
__device__ __forceinline__ void split_range(const fa2_params &p, const int m_block, const int h_kv, const int b, const int split,
                                            const int grid_splits, const int queue_tiles_per_split, const int *queue_splits,
                                            int *counters, float *o_part, float *lse_part)
{
    constexpr int BLOCK_N = L::BLOCK_N, WARP_KEYS = L::WARP_KEYS;
    static_assert(D % MMA_K == 0, "Q K^T consumes the head dim 16 at a time (the k of m16n8k16)");
    static_assert(D % (2 * MMA_N) == 0, "one ldmatrix.x4.trans of V feeds two 8-column d-tiles");
    static_assert(WARP_KEYS % (2 * MMA_N) == 0, "one ldmatrix.x4 of K feeds two 8-key n-tiles");
    constexpr int STAGES = L::STAGES;
    static_assert(STAGES >= 2, "the copy of tile nb + STAGES - 1 needs its own buffer while tile nb is read");
    extern __shared__ __align__(16) uint16_t smem[];
    // The tiles as shared-state-space byte addresses (_saddr), the form cp.async and ldmatrix take.
    constexpr uint32_t ROW_BYTES = D * 2;
    const uint32_t q_saddr = (uint32_t)__cvta_generic_to_shared(smem);  // [BLOCK_M][D]
    const uint32_t k_saddr = q_saddr + L::Q_BYTES;                      // [STAGES][BLOCK_N][D]
    const uint32_t v_saddr = k_saddr + STAGES * L::STAGE_BYTES;         // [STAGES][BLOCK_N][D]
    ulonglong2 *const page_rows = reinterpret_cast<ulonglong2 *>(smem + (L::Q_BYTES + L::KV_BYTES) / 2);  // [STAGES][PAGE_PASSES]

    const int group = p.heads_q / p.heads_kv;
    const int rows = group * p.seqlen_q;  // packed rows of this kv head (< 2^31: fa2_supports)
    const int r0 = m_block * BLOCK_M;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: row group, thread in group
    // This sequence's keys (fa2.h: its own length where seqlens_k is given, else seqlen_k).
    const int seqlen_k = p.seqlens_k ? p.seqlens_k[b] : p.seqlen_k;
    const int shift = seqlen_k - p.seqlen_q;  // causal: query row i sees keys j <= i + shift
    const float scale_log2 = p.softmax_scale * LOG2E;  // exp(x * scale) = exp2(x * scale * log2 e)

    // Dense K and V: this sequence's rows. Paged: the pools, the head's column of every
    // page, and the sequence's row of the block table.
    const int64_t kv_batch = p.block_table ? 0 : b;
    const uint16_t *k = (const uint16_t *)p.k + kv_batch * p.k_batch_stride + h_kv * p.k_head_stride;
    const uint16_t *v = (const uint16_t *)p.v + kv_batch * p.v_batch_stride + h_kv * p.v_head_stride;
    const int32_t *pages = p.block_table ? p.block_table + b * p.block_table_batch_stride : nullptr;
    const int page_shift = p.block_table ? __ffs(p.page_size) - 1 : 0;  // page_size is a power of two (fa2.h)

    // The range's key tiles: those the tile's last query row sees (causal), cut into ranges
    // of whole tiles. Without lengths, grid_splits ranges of even length (the last ones may be
    // empty); with them, ranges of the launch's length, the last one shorter (at least one
    // range, so a sequence of no key still writes O = 0 and LSE = -inf).
    const int first_query = r0 / group;
    const int n_tiles = key_tiles_of_tile<BLOCK_N>(p, seqlen_k, m_block, group, rows);
    const int tiles_per_split = QUEUE ? queue_tiles_per_split : (n_tiles + grid_splits - 1) / grid_splits;
    const int tile_lo = min(n_tiles, split * tiles_per_split), tile_hi = min(n_tiles, tile_lo + tiles_per_split);

    // Prologue: Q, each packed row from its own query row and head (committed with
    // the first key tile below).
    constexpr int CHUNKS_PER_ROW = D * 2 / 16;
#pragma unroll
    for (int c = threadIdx.x; c < BLOCK_M * CHUNKS_PER_ROW; c += THREADS) {
        const int row = c / CHUNKS_PER_ROW, col = c % CHUNKS_PER_ROW * 8;
        const PackedRow pr = unpack_row(r0 + row, group, h_kv);
        const bool valid = r0 + row < rows;
        const uint16_t *src = (const uint16_t *)p.q + b * p.q_batch_stride;
        if (valid) src += (int64_t)pr.query * p.q_row_stride + pr.head * p.q_head_stride + col;
        cp_async_16(q_saddr + swizzled_offset<D>(row, col), src, valid);
    }
    // Pages of fewer keys than a tile: each of the tile's copy passes (TileCopy::issue_paged)
    // takes its rows from one page, and thread `pass` (pass < PAGE_PASSES) looks that page
    // up for every tile, two tiles before the tile's copy is issued: the load is issued
    // with one copy and its addresses are stored with the next, in the tile's slot
    // (nn % STAGES), which the barrier of the key tile after that makes every thread's.
    // The copy itself then never waits on the block table, and the table is read once
    // per pass and tile instead of once per row. Tiles past the block's range, and passes
    // past the sequence's last key, read no entry (they take page 0, which exists).
    constexpr int PAGE_PASSES = L::PAGE_PASSES;
    const bool small_pages = pages && p.page_size < BLOCK_N;
    const int pass_key = threadIdx.x * (BLOCK_N / PAGE_PASSES);  // the first key of thread `pass`'s pass in a tile
    const int pass_row = pass_key & (p.page_size - 1);           // its row in its page
    auto page_of = [&](const int nn) {                           // thread `pass`'s block-table entry for tile nn
        const int key = nn * BLOCK_N + pass_key;
        return threadIdx.x < PAGE_PASSES && nn < tile_hi && key < seqlen_k ? pages[key >> page_shift] : 0;
    };
    auto store_page = [&](const int nn, const int page) {  // its row addresses for tile nn, into the tile's slot
        if (threadIdx.x < PAGE_PASSES)
            page_rows[nn % STAGES * PAGE_PASSES + threadIdx.x] =
                make_ulonglong2((uint64_t)(k + page * p.k_batch_stride + pass_row * p.k_row_stride),
                                (uint64_t)(v + page * p.v_batch_stride + pass_row * p.v_row_stride));
    };
    int next_page = 0;  // the entry for the tile after the next one to store (issue_tile's `step`)
    // Key tile nn's K and V into its stage, nn % STAGES. Only the seqlen_k tail has rows
    // to zero-fill; full tiles skip the per-row checks. Paged K and V: a tile within one
    // page (pages of at least a tile's keys: both powers of two, so tiles never straddle
    // one) is the dense copy from that page, looked up once; smaller pages, a tile the
    // addresses above prepared. `step` (the key loop's copies, not the prologue's): the
    // copy of tile nn also stores tile nn + 1's addresses and loads tile nn + 2's entry.
    const TileCopy<D, THREADS> tile_copy;
    auto issue_tile = [&](const int nn, const bool step) {
        const int n0 = nn * BLOCK_N;
        const uint32_t off = nn % STAGES * L::STAGE_BYTES;
        if (small_pages) {
            const ulonglong2 *pass_rows = page_rows + nn % STAGES * PAGE_PASSES;
            const int64_t k_bytes = (tile_copy.row0 * p.k_row_stride + tile_copy.col) * 2;  // this thread's row and chunk
            const int64_t v_bytes = (tile_copy.row0 * p.v_row_stride + tile_copy.col) * 2;  // from a pass's first row
            if (n0 + BLOCK_N <= seqlen_k)
                tile_copy.template issue_paged<BLOCK_N, true>(k_saddr + off, v_saddr + off, k_bytes, v_bytes, pass_rows, BLOCK_N);
            else
                tile_copy.template issue_paged<BLOCK_N, false>(k_saddr + off, v_saddr + off, k_bytes, v_bytes, pass_rows, seqlen_k - n0);
            if (step) {
                store_page(nn + 1, next_page);
                next_page = page_of(nn + 2);
            }
            return;
        }
        const uint16_t *k_tile = k, *v_tile = v;
        if (pages) {  // n0 < seqlen_k: the block's tiles end at its sequence's last key
            const int64_t page = pages[n0 >> page_shift], in_page = n0 & (p.page_size - 1);
            k_tile += page * p.k_batch_stride + in_page * p.k_row_stride;
            v_tile += page * p.v_batch_stride + in_page * p.v_row_stride;
        } else {
            k_tile += (int64_t)n0 * p.k_row_stride;
            v_tile += (int64_t)n0 * p.v_row_stride;
        }
        if (n0 + BLOCK_N <= seqlen_k) {
            tile_copy.template issue<BLOCK_N, true>(k_saddr + off, k_tile, p.k_row_stride, BLOCK_N);
            tile_copy.template issue<BLOCK_N, true>(v_saddr + off, v_tile, p.v_row_stride, BLOCK_N);
        } else {
            tile_copy.template issue<BLOCK_N, false>(k_saddr + off, k_tile, p.k_row_stride, seqlen_k - n0);
            tile_copy.template issue<BLOCK_N, false>(v_saddr + off, v_tile, p.v_row_stride, seqlen_k - n0);
        }
    };
    // Small pages: the addresses of the prologue's tiles and of the key loop's first copy
    // (tiles tile_lo .. tile_lo + STAGES - 1, one slot each), and the entry its step stores.
    // Their loads are issued together, and the barrier waits for them once per block.
    if (small_pages) {
        int first_pages[STAGES];
#pragma unroll
        for (int i = 0; i < STAGES; i++) first_pages[i] = page_of(tile_lo + i);
        next_page = page_of(tile_lo + STAGES);
#pragma unroll
        for (int i = 0; i < STAGES; i++) store_page(tile_lo + i, first_pages[i]);
        __syncthreads();
    }
    // The first STAGES - 1 tiles, one commit group each (Q joins the first); each key
    // tile then commits one group, with the tile STAGES - 1 ahead (or nothing past the
    // range), so "tile nb has landed" is always "at most STAGES - 2 groups pending".
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (tile_lo + i < tile_hi) issue_tile(tile_lo + i, false);
        cp_async_commit();
    }

    // This lane's ldmatrix row addresses (step 07's, for one m-tile). Every row a
    // lane points at has row % 8 == lane % 8 (fragments start on multiples of 8
    // rows, and a warp's keys on a multiple of 16), so the swizzle maps 16-byte
    // chunk 8 h + c (c < 8) to 8 h + (c ^ lane % 8): of the chunks a lane reads,
    // only 4 distinct addresses remain, [i] for c = 2 i + its half; n-tiles, key
    // steps and the next 128 bytes are fixed offsets the loads take as immediates.
    // K and V point at this warp's share of the tile, keys warp * WARP_KEYS on.
    uint32_t q_addr[4], k_addr[4], v_addr[4];
    const uint32_t warp_keys_off = warp * WARP_KEYS * ROW_BYTES;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        // Q (A, row major): rows lane % 16, chunk 2 kk + lane / 16.
        q_addr[i] = q_saddr + (lane % 16) * ROW_BYTES + ((2 * i + lane / 16) ^ (lane % 8)) * 16;
        // K (B = K^T): keys (lane / 16) * 8 + lane % 8 of two n-tiles, chunk 2 kk + lane / 8 % 2.
        k_addr[i] = k_saddr + warp_keys_off + ((lane / 16) * 8 + lane % 8) * ROW_BYTES + ((2 * i + lane / 8 % 2) ^ (lane % 8)) * 16;
        // V (B, transposed on the way): keys (lane / 8 % 2) * 8 + lane % 8, chunk dt + lane / 16.
        v_addr[i] = v_saddr + warp_keys_off + ((lane / 8 % 2) * 8 + lane % 8) * ROW_BYTES + ((2 * i + lane / 16) ^ (lane % 8)) * 16;
    }

    float o_acc[D / MMA_N][4];  // [d-tile][c0..c3]: rows g, g+8, cols 2t, 2t+1; this warp's keys only
    float m_run[2];             // running max of rows g and g+8 over this warp's keys, in scaled log2 units
    float l_run[2];             // this lane's part of the running sum (quad-reduced at the end)
#pragma unroll
    for (int dt = 0; dt < D / MMA_N; dt++) o_acc[dt][0] = o_acc[dt][1] = o_acc[dt][2] = o_acc[dt][3] = 0.0f;
    m_run[0] = m_run[1] = -INFINITY;
    l_run[0] = l_run[1] = 0.0f;
    // The query row of rows g and g + 8 (the causal mask compares keys with it).
    const int row_query[2] = {(r0 + g) / group, (r0 + g + 8) / group};

    // One key tile: the loop body, instantiated twice. Tiles that need no mask
    // (all but the diagonal ones and the seqlen_k tail) run a copy compiled with
    // no masking code at all.
    auto key_tile = [&](const int nb, auto masked) {
        const int n0 = nb * BLOCK_N;
        const uint32_t stage_off = nb % STAGES * L::STAGE_BYTES;
        // K and V of tile nb have landed (this thread's copies, then, after the
        // barrier, every thread's), and every warp is done with tile nb - 1, whose
        // stage the copy of tile nb + STAGES - 1 below overwrites.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (nb + STAGES - 1 < tile_hi) issue_tile(nb + STAGES - 1, true);
        cp_async_commit();

        // S = Q K^T: the 16 rows x this warp's WARP_KEYS keys.
        float s_acc[WARP_KEYS / MMA_N][4];  // [key n-tile][c0..c3]
#pragma unroll
        for (int nt = 0; nt < WARP_KEYS / MMA_N; nt++) s_acc[nt][0] = s_acc[nt][1] = s_acc[nt][2] = s_acc[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / MMA_K; kk++) {
            // ldmatrix.x4 matrices: rows 0-7 / 8-15 (lane % 16) x cols 0-7 / 8-15 (lane / 16) = a0, a1, a2, a3.
            uint32_t q_frag[4];
            ldmatrix_x4(q_frag, q_addr[kk % 4] + kk / 4 * 128);
#pragma unroll
            for (int nt = 0; nt < WARP_KEYS / MMA_N; nt += 2) {
                // B = K^T: element (k = d, n = key) is K[key][d] of the tile, rows of K are the n of B.
                uint32_t k_frag[4];  // [b0, b1 of n-tile nt, b0, b1 of n-tile nt + 1]
                ldmatrix_x4(k_frag, k_addr[kk % 4] + stage_off + nt * MMA_N * ROW_BYTES + kk / 4 * 128);
                mma_m16n8k16<T>(s_acc[nt], q_frag, k_frag[0], k_frag[1]);
                mma_m16n8k16<T>(s_acc[nt + 1], q_frag, k_frag[2], k_frag[3]);
            }
        }

        if constexpr (decltype(masked)::value) {
#pragma unroll
            for (int nt = 0; nt < WARP_KEYS / MMA_N; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = n0 + warp * WARP_KEYS + nt * MMA_N + 2 * t + (e & 1);
                    if (key >= seqlen_k || (p.causal && key > row_query[e / 2] + shift)) s_acc[nt][e] = -INFINITY;
                }
        }

        // Online softmax for rows g (r = 0: c0, c1) and g + 8 (r = 1: c2, c3), over this warp's keys.
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float row_vals[WARP_KEYS / MMA_N * 2];  // this lane's WARP_KEYS / 4 scores of the row
#pragma unroll
            for (int nt = 0; nt < WARP_KEYS / MMA_N; nt++) row_vals[2 * nt] = s_acc[nt][2 * r], row_vals[2 * nt + 1] = s_acc[nt][2 * r + 1];
            float row_max = tree_reduce<MaxOp>(row_vals);
            row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));  // the 4 lanes of a quad
            row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));  // share one row
            const float m_new = fmaxf(m_run[r], row_max * scale_log2);
            const float correction = exp2_approx(m_run[r] - finite_or_zero(m_new));  // 0 on a row's first visible key
            m_run[r] = m_new;
            l_run[r] *= correction;
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt++) {
                o_acc[dt][2 * r] *= correction;
                o_acc[dt][2 * r + 1] *= correction;
            }
            const float m_use = finite_or_zero(m_new);
#pragma unroll
            for (int nt = 0; nt < WARP_KEYS / MMA_N; nt++) {
                s_acc[nt][2 * r] = row_vals[2 * nt] = exp2_approx(fmaf(s_acc[nt][2 * r], scale_log2, -m_use));
                s_acc[nt][2 * r + 1] = row_vals[2 * nt + 1] = exp2_approx(fmaf(s_acc[nt][2 * r + 1], scale_log2, -m_use));
            }
            l_run[r] += tree_reduce<SumOp>(row_vals);
        }

        // O += P V over this warp's keys. The C fragments of key n-tiles 2j and
        // 2j+1 are exactly the A fragment of k-step j, so P never leaves registers.
#pragma unroll
        for (int j = 0; j < WARP_KEYS / MMA_K; j++) {
            uint32_t p_frag[4];
            p_frag[0] = pack2<T>(s_acc[2 * j][0], s_acc[2 * j][1]);
            p_frag[1] = pack2<T>(s_acc[2 * j][2], s_acc[2 * j][3]);
            p_frag[2] = pack2<T>(s_acc[2 * j + 1][0], s_acc[2 * j + 1][1]);
            p_frag[3] = pack2<T>(s_acc[2 * j + 1][2], s_acc[2 * j + 1][3]);
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt += 2) {
                // B = V: rows of V are the k of B, so the 8x8 matrices are transposed on the way.
                uint32_t v_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                ldmatrix_x4_trans(v_frag, v_addr[dt % 8 / 2] + stage_off + j * MMA_K * ROW_BYTES + dt / 8 * 128);
                mma_m16n8k16<T>(o_acc[dt], p_frag, v_frag[0], v_frag[1]);
                mma_m16n8k16<T>(o_acc[dt + 1], p_frag, v_frag[2], v_frag[3]);
            }
        }
    };

    // Tiles from first_masked on cross the diagonal (causal: some key is past the
    // first row's last visible key) or hold the seqlen_k tail.
    int first_masked = seqlen_k / BLOCK_N;
    if (p.causal) first_masked = min(first_masked, max(0, (first_query + shift + 1) / BLOCK_N));
    first_masked = min(max(first_masked, tile_lo), tile_hi);
    for (int nb = tile_lo; nb < first_masked; nb++) key_tile(nb, std::false_type{});
    for (int nb = first_masked; nb < tile_hi; nb++) key_tile(nb, std::true_type{});

    // Merge, 1: each warp's partial result into the K/V space -- its unnormalised
    // O, and the max and sum of each row over the warp's keys.
    cp_async_wait<0>();  // a block with no key tile never waited for Q: its copy may still be landing
    __syncthreads();     // every warp is done reading K and V before they are overwritten
    // This tile's ranges: with the queue, read from the item in shared memory only now (a
    // count kept in a register through the key loop once made ptxas spill 8 bytes at d64 on
    // sm_90, in a kernel that held it for every block).
    const int splits = QUEUE ? *queue_splits : grid_splits;
    float(*o_merge)[BLOCK_M][L::O_PITCH] = reinterpret_cast<float(*)[BLOCK_M][L::O_PITCH]>(smem + L::Q_BYTES / 2);
    float(*m_merge)[BLOCK_M] = reinterpret_cast<float(*)[BLOCK_M]>(&o_merge[WARPS][0][0]);
    float(*l_merge)[BLOCK_M] = m_merge + WARPS;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        const int row = g + 8 * r;
        if (t == 0) m_merge[warp][row] = m_run[r], l_merge[warp][row] = l_run[r];
#pragma unroll
        for (int dt = 0; dt < D / MMA_N; dt++)
            *reinterpret_cast<float2 *>(&o_merge[warp][row][dt * MMA_N + 2 * t]) = make_float2(o_acc[dt][2 * r], o_acc[dt][2 * r + 1]);
    }
    __syncthreads();

    // Merge, 2: 8 threads per row, each 4 consecutive columns at a time (a row's
    // 8 threads read 128 contiguous bytes: one conflict-free float4 phase). Warp w's
    // weight is exp2(m_w - m) with m the largest max: the online softmax's rescale.
    // A warp that saw no key of the row has m_w = -inf and weight 0; if no warp saw
    // one, l = 0 and the row writes O = 0, LSE = -inf; a NaN sum gives NaN.
    constexpr int ROW_THREADS = THREADS / BLOCK_M;
    static_assert(D % (4 * ROW_THREADS) == 0, "a row's threads take 4 columns at a time, the same count each");
    const int row = threadIdx.x / ROW_THREADS, col0 = threadIdx.x % ROW_THREADS * 4;
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; w++) m_max = fmaxf(m_max, m_merge[w][row]);
    float weight[WARPS], l_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; w++) {
        weight[w] = exp2_approx(m_merge[w][row] - finite_or_zero(m_max));
        l_sum += weight[w] * l_merge[w][row];
    }
    const float inv_l = l_sum != 0.0f ? 1.0f / l_sum : 0.0f;  // l = 0: the row saw no key, O = 0; NaN l: NaN O
    const float lse = l_sum != 0.0f ? (m_max + log2f(l_sum)) * LN2 : -INFINITY;
    const int valid_rows = min(BLOCK_M, rows - r0);  // rows of the tile past the kv head's last are padding
    const int64_t n_rows = (int64_t)p.batch * p.heads_q * p.seqlen_q;  // rows of LSE, and of each split's partials
    const PackedRow pr = unpack_row(r0 + row, group, h_kv);
    const int64_t lse_row = lse_row_of(p, b, pr);
    if (row < valid_rows) {
        uint16_t *o = o_row_of(p, b, pr);
#pragma unroll
        for (int c = col0; c < D; c += 4 * ROW_THREADS) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int w = 0; w < WARPS; w++) {
                const float4 part = *reinterpret_cast<const float4 *>(&o_merge[w][row][c]);
                acc.x += weight[w] * part.x, acc.y += weight[w] * part.y, acc.z += weight[w] * part.z, acc.w += weight[w] * part.w;
            }
            acc.x *= inv_l, acc.y *= inv_l, acc.z *= inv_l, acc.w *= inv_l;
            if (splits == 1)  // the final O, in the dtype (8 bytes: 4 elements)
                *reinterpret_cast<uint2 *>(o + c) = make_uint2(pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w));
            else  // this split's O_s, fp32, for the tile's last block
                *reinterpret_cast<float4 *>(o_part + ((int64_t)split * n_rows + lse_row) * D + c) = acc;
        }
        if (col0 == 0) {
            if (splits > 1) lse_part[(int64_t)split * n_rows + lse_row] = lse;
            else if (p.lse) p.lse[lse_row] = lse;
        }
    }
    if (splits == 1) return;

    // Arrival. Every block of the tile arrives, one whose key range was empty too (it
    // wrote O_s = 0 and LSE_s = -inf): the count must reach `splits`. The block that
    // merges reads the others' partials on another SM, and without a fence the GPU
    // promises no order in which another SM sees one SM's stores: the count could be
    // seen before the partials. So the barrier orders every thread's partials before
    // thread 0's __threadfence, which is cumulative (it orders what the barrier let
    // thread 0 observe, every thread's stores, not only its own) before its atomicAdd.
    // The block whose atomicAdd returns splits - 1 arrives last: every other block's
    // partials are ordered before its increment, and its own fence after the atomic
    // orders its loads after them. It resets the counter: nothing else in this call
    // touches it any more, and the next call, a later launch, finds 0 (fa2.h).
    __syncthreads();
    bool last = false;
    if (threadIdx.x == 0) {
        const PackedRow first = unpack_row(r0, group, h_kv);  // the tile's counter is its first row's
        int *counter = counters + lse_row_of(p, b, first);
        __threadfence();
        last = atomicAdd(counter, 1) == splits - 1;
        if (last) {
            *counter = 0;
            __threadfence();
        }
    }
    if (!__syncthreads_or(last)) return;

    // The last block merges the splits: O = sum_s exp(LSE_s - LSE) O_s, LSE = log sum_s
    // exp(LSE_s), computed from the largest LSE_s as the online softmax subtracts its
    // running max. A split that saw no key has LSE_s = -inf and weight 0; if none did,
    // O = 0 and LSE = -inf; a NaN LSE_s reaches the sum (fmaxf skips it, exp2 does not).
    // Other blocks' partials are read with ld.global.cg, from L2: an SM's L1 is not kept
    // coherent with other SMs' stores, and a 128-byte line of lse_part holds 32 rows'
    // LSE_s, so this SM may hold a copy from merging another tile whose rows share it,
    // taken before this tile's splits wrote theirs.
    // Merge, 3: the weights. Each row's ROW_THREADS threads load its LSE_s side by side,
    // every load issued before the first is used.
    static_assert((ROW_THREADS & (ROW_THREADS - 1)) == 0 && 32 % ROW_THREADS == 0,
                  "a row's threads are a power-of-two group of lanes of one warp (the shuffles reduce them)");
    static_assert(MAX_SPLITS % ROW_THREADS == 0, "a row's threads load the same number of LSE_s each");
    constexpr int LSE_PER_THREAD = MAX_SPLITS / ROW_THREADS;
    float *split_weight = reinterpret_cast<float *>(l_merge + WARPS);                      // [BLOCK_M][MAX_SPLITS]
    float4 *o_slot_sum = reinterpret_cast<float4 *>(split_weight + BLOCK_M * MAX_SPLITS);  // [BLOCK_M * D / 4]
    const int row_thread = threadIdx.x % ROW_THREADS;
    float lse_s[LSE_PER_THREAD];
#pragma unroll
    for (int i = 0; i < LSE_PER_THREAD; i++) {
        const int s = row_thread + i * ROW_THREADS;
        lse_s[i] = row < valid_rows && s < splits ? __ldcg(lse_part + s * n_rows + lse_row) : -INFINITY;
    }
    float lse_max = tree_reduce<MaxOp>(lse_s);
#pragma unroll
    for (int off = ROW_THREADS / 2; off > 0; off /= 2) lse_max = fmaxf(lse_max, __shfl_xor_sync(0xffffffffu, lse_max, off));
    const float lse_shift = finite_or_zero(lse_max);  // every split empty: exp2(-inf - 0) = 0, not NaN
    float terms[LSE_PER_THREAD];
#pragma unroll
    for (int i = 0; i < LSE_PER_THREAD; i++) terms[i] = exp2_approx((lse_s[i] - lse_shift) * LOG2E);
    float sum = tree_reduce<SumOp>(terms);
#pragma unroll
    for (int off = ROW_THREADS / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float row_lse = sum != 0.0f ? lse_shift + log2f(sum) * LN2 : -INFINITY;
#pragma unroll
    for (int i = 0; i < LSE_PER_THREAD; i++) {
        const int s = row_thread + i * ROW_THREADS;
        if (s < splits) split_weight[row * MAX_SPLITS + s] = sum != 0.0f ? exp2_approx((lse_s[i] - row_lse) * LOG2E) : 0.0f;
    }
    if (row_thread == 0 && row < valid_rows && p.lse) p.lse[lse_row] = row_lse;
    __syncthreads();

    // Merge, 4: O. A unit is one float4 of one valid row's O (valid_rows x D / 4 of them),
    // a slot one float4 of the block's work (BLOCK_M x D / 4, SLOTS a thread): slot u
    // takes unit u % units and the splits s = u / units (mod slices), so with fewer valid
    // rows than BLOCK_M (GQA 4 at Nq 1 has 4) every thread still has SLOTS slots. Each
    // pass issues SPLITS_IN_FLIGHT splits of every slot, predicated, before it adds any:
    // MERGE_LOADS loads of O_s in flight per thread, not one L2 round trip per split (a
    // loop that waited for each split's load ran 19 us for 48 splits of 256 rows on an H100).
    constexpr int CHUNKS = D / 4;  // float4 columns of a row
    static_assert(BLOCK_M * CHUNKS % THREADS == 0, "every thread has the same number of slots");
    constexpr int SLOTS = BLOCK_M * CHUNKS / THREADS;
    static_assert(MERGE_LOADS % SLOTS == 0, "every slot keeps the same number of splits in flight");
    constexpr int SPLITS_IN_FLIGHT = MERGE_LOADS / SLOTS;
    const int units = valid_rows * CHUNKS, slices = BLOCK_M / valid_rows;
    const int64_t slice_stride = n_rows * D * slices;  // floats from a slot's split s to its split s + slices
    const float *o_src[SLOTS], *w_src[SLOTS];  // the slot's next O_s; its row's weights
    int first_split[SLOTS];                     // splits past the slices: an idle slot
    float4 o_sum[SLOTS];
#pragma unroll
    for (int i = 0; i < SLOTS; i++) {
        const int slot = threadIdx.x + i * THREADS, unit = slot % units, unit_row = unit / CHUNKS, residue = slot / units;
        const PackedRow ur = unpack_row(r0 + unit_row, group, h_kv);
        const int64_t unit_row_lse = lse_row_of(p, b, ur);
        first_split[i] = residue < slices ? residue : splits;
        o_src[i] = o_part + ((int64_t)(residue < slices ? residue : 0) * n_rows + unit_row_lse) * D + unit % CHUNKS * 4;
        w_src[i] = split_weight + unit_row * MAX_SPLITS;
        o_sum[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int s0 = 0; s0 < splits; s0 += SPLITS_IN_FLIGHT * slices) {
        float4 part[SPLITS_IN_FLIGHT][SLOTS];
        float w[SPLITS_IN_FLIGHT][SLOTS];
#pragma unroll
        for (int j = 0; j < SPLITS_IN_FLIGHT; j++)
#pragma unroll
            for (int i = 0; i < SLOTS; i++) {
                const int s = s0 + first_split[i] + j * slices;
                part[j][i] = ldcg_float4_or_zero(o_src[i] + j * slice_stride, s < splits);
                w[j][i] = s < splits ? w_src[i][s] : 0.0f;
            }
#pragma unroll
        for (int j = 0; j < SPLITS_IN_FLIGHT; j++)
#pragma unroll
            for (int i = 0; i < SLOTS; i++) {
                o_sum[i].x += w[j][i] * part[j][i].x, o_sum[i].y += w[j][i] * part[j][i].y;
                o_sum[i].z += w[j][i] * part[j][i].z, o_sum[i].w += w[j][i] * part[j][i].w;
            }
#pragma unroll
        for (int i = 0; i < SLOTS; i++) o_src[i] += SPLITS_IN_FLIGHT * slice_stride;
    }
#pragma unroll
    for (int i = 0; i < SLOTS; i++) o_slot_sum[threadIdx.x + i * THREADS] = o_sum[i];
    __syncthreads();
    // Each unit sums its slices' slots and writes its 4 elements of O, in the dtype.
    for (int unit = threadIdx.x; unit < units; unit += THREADS) {
        float4 acc = o_slot_sum[unit];
        for (int k = 1; k < slices; k++) {
            const float4 x = o_slot_sum[k * units + unit];
            acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
        }
        const PackedRow ur = unpack_row(r0 + unit / CHUNKS, group, h_kv);
        uint16_t *o = o_row_of(p, b, ur);
        *reinterpret_cast<uint2 *>(o + unit % CHUNKS * 4) = make_uint2(pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w));
    }
}

// Warp 0 takes the block's next item from the queue (next_item, in the workspace) and
// writes it to qs: the class from the classes' sizes, the kv head by division, the group of
// pairs by a binary search of the class's starts, and the pair within the group by a scan of
// its 32 pairs' counts (their lengths read again: the L1 or L2 holds them).
template <int BLOCK_N>
__device__ __forceinline__ void take_item(QueueSmem &qs, const fa2_params &p, int *next_item, int pairs, int m_blocks, int group, int rows)
{
    const int lane = threadIdx.x % 32;
    int item = 0;
    if (lane == 0) item = atomicAdd(next_item, 1);
    item = __shfl_sync(0xffffffffu, item, 0);
    if (item >= qs.n_items) {
        if (lane == 0) qs.pair = -1;
        return;
    }
    int k = 0;
    while (item >= p.heads_kv * qs.class_items[k]) item -= p.heads_kv * qs.class_items[k++];
    const int h_kv = item / qs.class_items[k], j = item - h_kv * qs.class_items[k];  // item j of class k of head h_kv
    int lo = 0, hi = (pairs + PAIR_GROUP - 1) / PAIR_GROUP - 1;  // the last group that starts at or before j
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (qs.starts[k][mid] <= j) lo = mid;
        else hi = mid - 1;
    }
    const int pair = lo * PAIR_GROUP + lane;
    const TileItems t = pair_items<BLOCK_N>(p, pair, pairs, m_blocks, group, rows, qs.tiles_per_split);
    const int count = class_count(t, k);
    int upto = count;  // this class's items of the group's pairs up to this lane's
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
        const int x = __shfl_up_sync(0xffffffffu, upto, off);
        if (lane >= off) upto += x;
    }
    const int before = qs.starts[k][lo] + upto - count;
    if (before <= j && j < before + count) {  // one lane: the pair that holds item j
        qs.pair = pair, qs.h_kv = h_kv;
        qs.split = k == 0 ? j - before : t.full;  // a full range in order, or the last
        qs.splits = t.full + (t.last_class != 0);
    }
}

// Without per-sequence lengths: a block per range, the grid (query tile x grid_splits, kv
// head, batch).
template <typename T, int D, typename L>
__global__ void __launch_bounds__(THREADS)
    fa2_split_kernel(fa2_params p, int grid_splits, int *counters, float *o_part, float *lse_part)
{
    split_range<T, D, L, false>(p, blockIdx.x / grid_splits, blockIdx.y, blockIdx.z, blockIdx.x % grid_splits, grid_splits, 0, nullptr,
                                counters, o_part, lse_part);
}

// With them: one wave of blocks (at most sm_count x blocks_per_sm, `wave`) and a queue of
// items (the ranges of every tile of every kv head, at most grid_splits a tile): each block
// counts the items from the lengths, as every other block does, then takes item after item
// until none is left. The queue is two int32 at `queue` (fa2.h: zero when the call begins):
// the next item, and the blocks that have left; the last block to leave sets both to zero
// again for the next call (every block drew its last item before it counted itself out).
// The shared memory of every layout allows one block per SM where it is chosen (128 KB of K
// and V, or a 99 KB block on a 100 KB SM), so registers do not limit the blocks: the second
// bound lets ptxas take up to 255 a thread, where its own choice for this kernel (168) spilled
// at d128: 32 bytes on sm_80, 4 on sm_86 and sm_89, 16 on sm_90.
template <typename T, int D, typename L>
__global__ void __launch_bounds__(THREADS, 1)
    fa2_queue_kernel(fa2_params p, int grid_splits, int wave, int *counters, int *queue, float *o_part, float *lse_part)
{
    constexpr int BLOCK_N = L::BLOCK_N;
    extern __shared__ __align__(16) uint16_t smem[];
    QueueSmem &qs = *reinterpret_cast<QueueSmem *>(smem + L::QUEUE_OFF / 2);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = p.heads_q / p.heads_kv, rows = group * p.seqlen_q;
    const int m_blocks = (rows + BLOCK_M - 1) / BLOCK_M, pairs = p.batch * m_blocks;  // pairs <= MAX_SPLIT_BLOCKS / 2
    const int groups = (pairs + PAIR_GROUP - 1) / PAIR_GROUP;
    // Each warp: the range length, then the items of its groups of pairs, per class.
    const int tiles_per_split = balanced_tiles_per_split<BLOCK_N>(p, m_blocks, group, rows, wave, grid_splits);
    for (int c = warp; c < groups; c += WARPS) {
        const TileItems t = pair_items<BLOCK_N>(p, c * PAIR_GROUP + lane, pairs, m_blocks, group, rows, tiles_per_split);
        const int full = __reduce_add_sync(0xffffffffu, t.full);
        if (lane == 0) qs.starts[0][c] = (uint16_t)full;
#pragma unroll
        for (int k = 1; k < ITEM_CLASSES; k++) {
            const int last = __popc(__ballot_sync(0xffffffffu, t.last_class == k));
            if (lane == 0) qs.starts[k][c] = (uint16_t)last;
        }
    }
    __syncthreads();
    // Warp 0: each class's counts become starts (an exclusive scan, two groups a lane).
    static_assert(MAX_PAIR_GROUPS == 2 * 32, "a lane scans two groups of pairs");
    if (warp == 0) {
        int n_items = 0;
#pragma unroll
        for (int k = 0; k < ITEM_CLASSES; k++) {
            const int c0 = 2 * lane, c1 = 2 * lane + 1;
            const int a = c0 < groups ? qs.starts[k][c0] : 0, both = a + (c1 < groups ? qs.starts[k][c1] : 0);
            int upto = both;
#pragma unroll
            for (int off = 1; off < 32; off *= 2) {
                const int x = __shfl_up_sync(0xffffffffu, upto, off);
                if (lane >= off) upto += x;
            }
            qs.starts[k][c0] = (uint16_t)(upto - both), qs.starts[k][c1] = (uint16_t)(upto - both + a);
            const int total = __shfl_sync(0xffffffffu, upto, 31);
            if (lane == 0) qs.class_items[k] = total;
            n_items += total;
        }
        if (lane == 0) qs.n_items = n_items * p.heads_kv, qs.tiles_per_split = tiles_per_split;
    }
    for (;;) {
        // Every thread is done with the last item's shared memory and qs's item (the first
        // time: warp 0's starts are written); cp.async groups are all drained (split_range
        // waits for every one before its merge).
        __syncthreads();
        if (warp == 0) take_item<BLOCK_N>(qs, p, queue, pairs, m_blocks, group, rows);
        __syncthreads();
        const int pair = qs.pair;
        if (pair < 0) break;
        const int b = pair / m_blocks;
        split_range<T, D, L, true>(p, pair - b * m_blocks, qs.h_kv, b, qs.split, grid_splits, qs.tiles_per_split, &qs.splits, counters,
                                   o_part, lse_part);
    }
    // Leaving. The fence orders this block's last draw before its count; the last block
    // orders every draw it counted before its reset.
    if (threadIdx.x == 0) {
        int *const next_item = queue, *const blocks_left = queue + 1;
        __threadfence();
        if (atomicAdd(blocks_left, 1) == (int)gridDim.x - 1) {
            __threadfence();
            *next_item = 0;
            *blocks_left = 0;
        }
    }
}

// ---- the split count ---------------------------------------------------------

static long long m_blocks_of(const fa2_params *p) { return ((long long)p->heads_q / p->heads_kv * p->seqlen_q + BLOCK_M - 1) / BLOCK_M; }
static long long base_blocks_of(const fa2_params *p) { return (long long)p->batch * p->heads_kv * m_blocks_of(p); }
static int key_tiles_of(const fa2_params *p, int block_n) { return (p->seqlen_k + block_n - 1) / block_n; }

// The most splits these params may take, from the params alone: it sizes the workspace.
static int max_splits(const fa2_params *p)
{
    const long long by_blocks = MAX_SPLIT_BLOCKS / base_blocks_of(p);
    const long long cap = by_blocks < MAX_SPLITS ? by_blocks : MAX_SPLITS;
    const int tiles = key_tiles_of(p, SPLIT_KEY_TILE);
    return (int)(cap < 1 ? 1 : cap < tiles ? cap : tiles);
}

extern "C" size_t fa2_workspace_size(const fa2_params *p)
{
    // Params the ABI refuses need none (fa2_supports says why); the checks also keep the
    // products below inside int64 and the group (heads_q / heads_kv) at least 1.
    // Several splits: the counters (fa2_workspace_counter_bytes: one int32 per row, where a
    // tile counts its arrivals in its first row's, then the work queue's two), then O_s and
    // LSE_s, 16-byte aligned after them.
    if (!fa2_validate_params(p, NULL, 0)) return 0;
    const int splits = max_splits(p);
    return splits > 1 ? fa2_workspace_counter_bytes(p) +
                            (size_t)splits * p->batch * p->heads_q * p->seqlen_q * (p->head_dim + 1) * sizeof(float)
                      : 0;
}

// The launch: the layout, the split count and what they were chosen from.
enum { LARGE_LAYOUT = 0, SMALL_LAYOUT = 1, LAYOUTS = 2 };
struct Plan {
    int layout;  // LARGE_LAYOUT or SMALL_LAYOUT; -1: neither fits the GPU
    int block_n, stages, smem_bytes;
    int splits, blocks_per_sm, sm_count;
    long long base_blocks;  // batch x kv heads x query tiles: the blocks of one split
    bool queued;            // per-sequence lengths and splits: one wave of blocks and a work queue
};

// Blocks of layout L per SM. On the GPU itself the runtime's occupancy query answers
// (it knows the registers ptxas gave this GPU's SASS); under FA2_EMULATE the same
// rules are applied by arithmetic to the preset's numbers, with this build's
// register count where a GPU can say (otherwise the 255 a thread may have at most).
// The kernel of a launch: a block per range, or the queue's (Plan::queued).
template <typename T, int D, typename L, bool QUEUE>
static const void *kernel_of()
{
    return QUEUE ? (const void *)fa2_queue_kernel<T, D, L> : (const void *)fa2_split_kernel<T, D, L>;
}

template <typename T, int D, typename L, bool QUEUE>
static int blocks_per_sm_of(const fa2_limits *l)
{
    if (L::BYTES > l->smem_per_block) return 0;
    int n = 0;
    if (!l->preset) {
        if (cudaFuncSetAttribute(kernel_of<T, D, L, QUEUE>(), cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES) == cudaSuccess &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_of<T, D, L, QUEUE>(), THREADS, L::BYTES) == cudaSuccess)
            return n;
        cudaGetLastError();  // leave no error behind; the arithmetic answers instead
    }
    cudaFuncAttributes attr;
    int regs = 255;
    if (cudaFuncGetAttributes(&attr, kernel_of<T, D, L, QUEUE>()) == cudaSuccess) regs = attr.numRegs;
    else cudaGetLastError();
    return fa2_limits_blocks_per_sm(l, THREADS, regs, L::BYTES);
}

// Splits fill the GPU in waves of sm_count x blocks_per_sm blocks; a last wave that is
// partly empty leaves SMs idle, and so does a split count that does not divide the key
// tiles: 1024 tiles in 63 splits are 60 of 17 tiles, one of 4 and two empty, and every
// block waits for the 17. The efficiency of s splits is the work (base blocks x tiles) over
// what the waves could do in the time of the longest range (waves x wave size x
// ceil(tiles / s)); the choice is the fewest splits within 5% of the best efficiency up to
// max_splits (fewer splits: fewer partial results to write and merge, longer key ranges to
// pipeline). At least one wave's worth of blocks already fills the GPU: s = 1 unless more
// splits fill the last wave better.
// With per-sequence lengths the host cannot weigh the work (the lengths are in the GPU's
// memory, and reading them would wait on the stream): the plan allows max_splits splits, the
// kernel applies the same rule to the lengths (balanced_tiles_per_split), and one wave of
// blocks of the queue's kernel takes the ranges from a queue.
// The layout is the first, of LargeLayout and SmallLayout, that fits the GPU.
template <typename T, int D>
static Plan choose_plan(const fa2_params *p, const fa2_limits *l)
{
    // Asked once per process and preset: the queries cost microseconds, a launch's whole budget.
    static int fits[LAYOUTS], queue_fits[LAYOUTS];  // the grid's kernel, the queue's
    static const char *fits_for = "";  // the preset (NULL: the GPU) they were asked for; "" not yet
    if (fits_for == nullptr ? l->preset != nullptr : (l->preset == nullptr || strcmp(fits_for, l->preset) != 0)) {
        fits[LARGE_LAYOUT] = blocks_per_sm_of<T, D, LargeLayout<D>, false>(l);
        fits[SMALL_LAYOUT] = blocks_per_sm_of<T, D, SmallLayout<D>, false>(l);
        queue_fits[LARGE_LAYOUT] = blocks_per_sm_of<T, D, LargeLayout<D>, true>(l);
        queue_fits[SMALL_LAYOUT] = blocks_per_sm_of<T, D, SmallLayout<D>, true>(l);
        fits_for = l->preset;
    }
    Plan plan = {-1, 0, 0, 0, 1, 0, l->sm_count, base_blocks_of(p), false};
    if (fits[LARGE_LAYOUT] > 0) {
        plan.layout = LARGE_LAYOUT, plan.block_n = LargeLayout<D>::BLOCK_N, plan.stages = LargeLayout<D>::STAGES;
        plan.smem_bytes = LargeLayout<D>::BYTES;
    } else if (fits[SMALL_LAYOUT] > 0) {
        plan.layout = SMALL_LAYOUT, plan.block_n = SmallLayout<D>::BLOCK_N, plan.stages = SmallLayout<D>::STAGES;
        plan.smem_bytes = SmallLayout<D>::BYTES;
    } else {
        return plan;
    }
    plan.blocks_per_sm = fits[plan.layout];
    const long long wave = (long long)plan.sm_count * plan.blocks_per_sm;
    const int cap = max_splits(p);
    double efficiency[MAX_SPLITS + 1], best = 0.0;
    const long long tiles = std::max(1LL, ((long long)p->seqlen_k + plan.block_n - 1) / plan.block_n);  // the longest query tile's
    for (int s = 1; s <= cap; s++) {
        const long long blocks = plan.base_blocks * s, waves = (blocks + wave - 1) / wave;
        efficiency[s] = (double)(plan.base_blocks * tiles) / (double)(waves * wave * ((tiles + s - 1) / s));
        best = efficiency[s] > best ? efficiency[s] : best;
    }
    while (efficiency[plan.splits] < 0.95 * best) plan.splits++;
    if (p->seqlens_k) plan.splits = cap;  // the most; each tile's own count is chosen on the GPU
#ifdef FA2_SWEEP_SPLITS
    plan.splits = FA2_SWEEP_SPLITS < cap ? FA2_SWEEP_SPLITS : cap;  // a sweep build: the fixed count, within the workspace
#endif
    plan.queued = p->seqlens_k && plan.splits > 1;
    if (plan.queued) plan.blocks_per_sm = queue_fits[plan.layout] > 0 ? queue_fits[plan.layout] : 1;
    return plan;
}

// The plan for these params, through their dtype and head dim.
static Plan plan_of(const fa2_params *p, const fa2_limits *l)
{
    if (p->dtype == FA2_FP16) return p->head_dim == 64 ? choose_plan<__half, 64>(p, l) : choose_plan<__half, 128>(p, l);
    return p->head_dim == 64 ? choose_plan<__nv_bfloat16, 64>(p, l) : choose_plan<__nv_bfloat16, 128>(p, l);
}

// ---- launcher and ABI --------------------------------------------------------

// What each launch takes besides its params: the plan of the whole call, and where its
// arrivals are counted and its partial results go (one split writes O directly and
// touches no workspace).
struct Launch {
    Plan plan;
    int *counters;               // [rows], zero between calls (fa2.h), rows = batch x heads_q x seqlen_q
    int *queue;                  // the work queue's next item and blocks left (plan.queued), zero between calls
    float *o_parts, *lse_parts;  // [splits][rows][D] and [splits][rows]
    cudaStream_t stream;
};

// One launch over (query tile x split, kv head, batch); a call whose batch or heads pass
// the grid's 65,535 runs as several (fa2_for_each_grid_chunk), each with its rows'
// share of the workspace, from row rows_before on: its own tiles' counters and partials.
// Queued (never chunked: batch x kv heads <= MAX_SPLIT_BLOCKS / 2 where there are splits):
// one wave of blocks, or fewer where the tiles cannot have that many ranges.
template <typename T, int D, typename L>
static int launch_with(const fa2_params *p, int64_t rows_before, void *launch)
{
    const Launch &a = *(const Launch *)launch;
    int *counters = a.counters ? a.counters + rows_before : nullptr;
    float *o_part = a.o_parts ? a.o_parts + (size_t)a.plan.splits * rows_before * D : nullptr;
    float *lse_part = a.lse_parts ? a.lse_parts + (size_t)a.plan.splits * rows_before : nullptr;
    const int wave = a.plan.sm_count * a.plan.blocks_per_sm;
    if (a.plan.queued) {
        FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_queue_kernel<T, D, L>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES));
        const long long items = base_blocks_of(p) * a.plan.splits;  // the most the tiles may have
        fa2_queue_kernel<T, D, L><<<(unsigned)(items < wave ? items : wave), THREADS, L::BYTES, a.stream>>>(
            *p, a.plan.splits, wave, counters, a.queue, o_part, lse_part);
    } else {
        FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_split_kernel<T, D, L>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES));
        dim3 grid((unsigned)(m_blocks_of(p) * a.plan.splits), p->heads_kv, p->batch);
        fa2_split_kernel<T, D, L><<<grid, THREADS, L::BYTES, a.stream>>>(*p, a.plan.splits, counters, o_part, lse_part);
    }
    FA2_CUDA_TRY(cudaGetLastError());
    return FA2_OK;
}

template <typename T, int D>
static int launch(const fa2_params *p, void *stream)
{
    fa2_limits l;
    char why[256];
    if (fa2_limits_get(&l, why, sizeof why) != FA2_LIMITS_OK) return fa2_fail("fa2_limits_get", why);
    Launch a = {choose_plan<T, D>(p, &l), nullptr, nullptr, nullptr, nullptr, (cudaStream_t)stream};
    if (a.plan.splits > 1) {
        a.counters = (int *)p->workspace;
        a.queue = (int *)((char *)p->workspace + fa2_workspace_counter_bytes(p)) - 4;  // the counters' last 16 bytes (fa2.h)
        a.o_parts = (float *)((char *)p->workspace + fa2_workspace_counter_bytes(p));
        a.lse_parts = a.o_parts + (size_t)a.plan.splits * p->batch * p->heads_q * p->seqlen_q * D;
    }
    return fa2_for_each_grid_chunk(p, a.plan.layout == SMALL_LAYOUT ? launch_with<T, D, SmallLayout<D>> : launch_with<T, D, LargeLayout<D>>, &a);
}

extern "C" int fa2_supports(const fa2_params *p, char *why, size_t why_len)
{
    // A KV cache (per-sequence lengths, pages) is taken: fa2_validate_params checks its fields.
    if (!fa2_validate_params(p, why, why_len)) return 0;
    if (p->head_dim != 64 && p->head_dim != 128) {
        if (why) snprintf(why, why_len, "head_dim %d (allowed: 64, 128)", p->head_dim);
        return 0;
    }
    // 16-byte copies need every row to start on a 16-byte boundary.
    if (!fa2_validate_alignment(p, 16, "16-byte loads and stores", why, why_len)) return 0;
    // Packed rows are ints, and the grid's x is query tiles x splits.
    if ((long long)p->heads_q / p->heads_kv * p->seqlen_q > INT_MAX - BLOCK_M || m_blocks_of(p) * max_splits(p) > INT_MAX) {
        if (why) snprintf(why, why_len, "heads_q / heads_kv x seqlen_q = %lld (allowed: at most 2^31 - 1 - %d packed rows, whose query tiles x splits fit the grid's x)",
                          (long long)p->heads_q / p->heads_kv * p->seqlen_q, BLOCK_M);
        return 0;
    }
    if (!fa2_validate_workspace(p, fa2_workspace_size(p), why, why_len)) return 0;
    // The smaller layout must fit the GPU's shared memory per block.
    char what[32];
    snprintf(what, sizeof what, "head_dim %d", p->head_dim);
    return fa2_limits_check_smem(p->head_dim == 64 ? SmallLayout<64>::BYTES : SmallLayout<128>::BYTES, what, why, why_len);
}

// Configurations: the layout, and one split or several (merged by the last to arrive).
enum { CONFIGS = 2 * LAYOUTS };
extern "C" int fa2_config_count(void) { return CONFIGS; }

extern "C" int fa2_config_smem(const fa2_params *p, int config)
{
    if (config < 0 || config >= CONFIGS) return -1;
    const bool d64 = p->head_dim == 64;
    if (config / 2 == LARGE_LAYOUT) return d64 ? LargeLayout<64>::BYTES : LargeLayout<128>::BYTES;
    return d64 ? SmallLayout<64>::BYTES : SmallLayout<128>::BYTES;
}

extern "C" int fa2_config(const fa2_params *p, char *what, size_t what_len)
{
    if (!fa2_supports(p, what, what_len)) return -1;
    fa2_limits l;
    if (fa2_limits_get(&l, what, what_len) != FA2_LIMITS_OK) return -1;  // the choice depends on the GPU's limits
    const Plan plan = plan_of(p, &l);
    if (plan.layout < 0) {
        snprintf(what, what_len, "no layout fits %s", l.name);
        return -1;
    }
    const int tiles = key_tiles_of(p, plan.block_n);
    if (plan.queued) {  // the lengths are on the GPU: each tile's count is chosen there
        const long long items = plan.base_blocks * plan.splits, wave = (long long)plan.sm_count * plan.blocks_per_sm;
        snprintf(what, what_len, "%d packed rows x %d warps, %d keys per tile, %d stages, %d KB: up to %d splits of %d key tiles per tile, "
                 "chosen on the GPU from the lengths, merged by the last to arrive; %lld blocks (%d per SM on %d SMs) take them from a queue",
                 BLOCK_M, WARPS, plan.block_n, plan.stages, plan.smem_bytes / 1024, plan.splits, tiles, items < wave ? items : wave,
                 plan.blocks_per_sm, plan.sm_count);
    } else {
        snprintf(what, what_len, "%d packed rows x %d warps, %d keys per tile, %d stages, %d KB: %d split%s of %d key tile%s%s, %lld blocks, %d per SM on %d SMs",
                 BLOCK_M, WARPS, plan.block_n, plan.stages, plan.smem_bytes / 1024, plan.splits, plan.splits > 1 ? "s" : "", tiles,
                 tiles > 1 ? "s" : "", plan.splits > 1 ? ", merged by the last to arrive" : "", plan.base_blocks * plan.splits,
                 plan.blocks_per_sm, plan.sm_count);
    }
    return 2 * plan.layout + (plan.splits > 1);
}

extern "C" int fa2_forward(const fa2_params *p, void *stream)
{
    if (!fa2_supports(p, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    if (p->dtype == FA2_FP16)
        return p->head_dim == 64 ? launch<__half, 64>(p, stream) : launch<__half, 128>(p, stream);
    return p->head_dim == 64 ? launch<__nv_bfloat16, 64>(p, stream) : launch<__nv_bfloat16, 128>(p, stream);
}

extern "C" const char *fa2_name(void) { return "13_split_kv"; }
extern "C" const char *fa2_key_change(void) { return "split-KV decode: a GQA group's heads packed as rows, keys split over blocks and warps, merged by LSE"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }

// No backward in this step: every call is refused in one line (the params' own refusal
// where they are bad), and nothing is touched.
extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len) { return fa2_refuse_backward(p, fa2_name(), why, why_len); }
extern "C" int fa2_backward(const fa2_bwd_params *, void *) { return FA2_ERR_UNSUPPORTED; }
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *) { return 0; }
