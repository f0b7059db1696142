/* Step 03 - XOR swizzle of shared memory.
 *
 * One change from step 02: each tile's 16-byte chunks are stored at
 *   physical chunk = logical chunk ^ (row % 8)
 * in both the global->shared copies and the fragment reads.
 *
 * Why: shared memory has 32 banks of 4 bytes; a row of a [64][D] tile is D * 2 =
 * 128 or 256 bytes, a multiple of the 128 bytes one pass over the banks covers,
 * so element (row, col) sits in the same bank for every row. A Q or K fragment
 * read takes 8 rows x 4 lanes at one column: 8 lanes per bank, 8 passes
 * (wavefronts) where 1 would do. The XOR moves the 8 rows of a fragment into 8
 * different chunks -- 8 x 4 words, all 32 banks -- without padding and without
 * changing which data a lane gets. The 16-byte copy writes stay conflict-free:
 * 8 lanes still write 8 distinct chunks of one 128-byte line.
 * Tile sizes, warps and the schedule are those of step 02.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <type_traits>

#include "../../common/fa2.h"
#include "../../common/device_limits.h"
#include "../../common/validate.h"

constexpr int BLOCK_M = 64;  // query rows per block
constexpr int BLOCK_N = 64;  // key rows per iteration of the main loop
constexpr int WARPS = 4;
constexpr int THREADS = WARPS * 32;
constexpr int MMA_M = 16, MMA_N = 8, MMA_K = 16;  // mma.sync.m16n8k16
static_assert(BLOCK_M == WARPS * MMA_M, "each warp owns exactly one 16-row m-tile of the query block");
static_assert(BLOCK_N % MMA_K == 0, "P.V consumes keys 16 at a time (the k of m16n8k16)");
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

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

// 2^x on the special-function unit (one MUFU.EX2); exp2(-inf) = 0.
__device__ __forceinline__ float exp2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

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

// ---- global -> shared copies -------------------------------------------------

// Copies a [ROWS][D] tile (row r at src + r * row_stride) into swizzled shared
// memory with 16-byte vector loads and stores; rows past `valid_rows` are zero-filled,
// so a tail tile multiplies by 0 rather than by whatever memory holds.
template <int ROWS, int D>
__device__ __forceinline__ void copy_tile(uint16_t (*tile_smem)[D], const uint16_t *src, int64_t row_stride,
                                          int valid_rows)
{
    constexpr int CHUNKS_PER_ROW = D * 2 / 16;  // 16-byte chunks of one row
    static_assert((ROWS * CHUNKS_PER_ROW) % THREADS == 0, "every thread copies the same number of chunks");
    for (int i = threadIdx.x; i < ROWS * CHUNKS_PER_ROW; i += THREADS) {
        int row = i / CHUNKS_PER_ROW, chunk = i % CHUNKS_PER_ROW;
        uint4 value = make_uint4(0, 0, 0, 0);
        if (row < valid_rows) value = *reinterpret_cast<const uint4 *>(src + row * row_stride + chunk * 8);
        *reinterpret_cast<uint4 *>(&tile_smem[row][swizzle(row, chunk * 8)]) = value;
    }
}

// ---- the kernel --------------------------------------------------------------

template <typename T, int D>
__global__ void __launch_bounds__(THREADS) fa2_mma_kernel(fa2_params p)
{
    static_assert(D % MMA_K == 0, "Q K^T consumes the head dim 16 at a time (the k of m16n8k16)");
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t(*q_smem)[D] = reinterpret_cast<uint16_t(*)[D]>(smem);                      // [BLOCK_M][D]
    uint16_t(*k_smem)[D] = reinterpret_cast<uint16_t(*)[D]>(smem + BLOCK_M * D);        // [BLOCK_N][D]
    uint16_t(*v_smem)[D] = reinterpret_cast<uint16_t(*)[D]>(smem + (BLOCK_M + BLOCK_N) * D);  // [BLOCK_N][D]

    const int m0 = blockIdx.x * BLOCK_M, h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);  // GQA: several query heads share one K/V head
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: row group, thread in group
    const int shift = p.seqlen_k - p.seqlen_q;  // causal: row i sees keys j <= i + shift
    const float scale_log2 = p.softmax_scale * LOG2E;  // exp(x * scale) = exp2(x * scale * log2 e)

    const uint16_t *q = (const uint16_t *)p.q + b * p.q_batch_stride + (int64_t)m0 * p.q_row_stride + h * p.q_head_stride;
    const uint16_t *k = (const uint16_t *)p.k + b * p.k_batch_stride + h_kv * p.k_head_stride;
    const uint16_t *v = (const uint16_t *)p.v + b * p.v_batch_stride + h_kv * p.v_head_stride;

    copy_tile<BLOCK_M, D>(q_smem, q, p.q_row_stride, min(BLOCK_M, p.seqlen_q - m0));
    __syncthreads();

    // Q stays in registers for the whole loop: the A operand of every Q K^T mma.
    uint32_t q_frag[D / MMA_K][4];  // [k-step][a0..a3]
    const int q_row = warp * MMA_M + g;
#pragma unroll
    for (int kk = 0; kk < D / MMA_K; kk++) {
        q_frag[kk][0] = *reinterpret_cast<const uint32_t *>(&q_smem[q_row][swizzle(q_row, kk * MMA_K + 2 * t)]);
        q_frag[kk][1] = *reinterpret_cast<const uint32_t *>(&q_smem[q_row + 8][swizzle(q_row + 8, kk * MMA_K + 2 * t)]);
        q_frag[kk][2] = *reinterpret_cast<const uint32_t *>(&q_smem[q_row][swizzle(q_row, kk * MMA_K + 2 * t + 8)]);
        q_frag[kk][3] = *reinterpret_cast<const uint32_t *>(&q_smem[q_row + 8][swizzle(q_row + 8, kk * MMA_K + 2 * t + 8)]);
    }

    float o_acc[D / MMA_N][4];  // [d-tile][c0..c3]: rows g, g+8 of this warp's 16, cols 2t, 2t+1 of the d-tile
#pragma unroll
    for (int dt = 0; dt < D / MMA_N; dt++) o_acc[dt][0] = o_acc[dt][1] = o_acc[dt][2] = o_acc[dt][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY};  // running max of rows g and g+8, in scaled log2 units
    float l_run[2] = {0.0f, 0.0f};            // this lane's part of the running sum (quad-reduced at the end)

    // Causal: key tiles past the last key the block's last row sees are skipped;
    // only tiles that cross the diagonal, or the seqlen_k tail, need a mask.
    const int key_end = p.causal ? min(p.seqlen_k, max(0, m0 + BLOCK_M + shift)) : p.seqlen_k;
    const int n_blocks = (key_end + BLOCK_N - 1) / BLOCK_N;

    for (int nb = 0; nb < n_blocks; nb++) {
        const int n0 = nb * BLOCK_N;
        __syncthreads();  // every warp is done with the previous K and V tiles
        copy_tile<BLOCK_N, D>(k_smem, k + (int64_t)n0 * p.k_row_stride, p.k_row_stride, min(BLOCK_N, p.seqlen_k - n0));
        copy_tile<BLOCK_N, D>(v_smem, v + (int64_t)n0 * p.v_row_stride, p.v_row_stride, min(BLOCK_N, p.seqlen_k - n0));
        __syncthreads();

        // S = Q K^T: this warp's 16 rows x BLOCK_N keys, as BLOCK_N / 8 n-tiles.
        float s_acc[BLOCK_N / MMA_N][4];  // [key n-tile][c0..c3]
#pragma unroll
        for (int nt = 0; nt < BLOCK_N / MMA_N; nt++) s_acc[nt][0] = s_acc[nt][1] = s_acc[nt][2] = s_acc[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / MMA_K; kk++) {
#pragma unroll
            for (int nt = 0; nt < BLOCK_N / MMA_N; nt++) {
                // B = K^T: element (k = d, n = key) is k_smem[key][d], so b0 is two adjacent d of key row g.
                const int key = nt * MMA_N + g;
                uint32_t b0 = *reinterpret_cast<const uint32_t *>(&k_smem[key][swizzle(key, kk * MMA_K + 2 * t)]);
                uint32_t b1 = *reinterpret_cast<const uint32_t *>(&k_smem[key][swizzle(key, kk * MMA_K + 2 * t + 8)]);
                mma_m16n8k16<T>(s_acc[nt], q_frag[kk], b0, b1);
            }
        }

        const bool needs_mask = n0 + BLOCK_N > p.seqlen_k || (p.causal && n0 + BLOCK_N - 1 > m0 + shift);
        if (needs_mask) {
#pragma unroll
            for (int nt = 0; nt < BLOCK_N / MMA_N; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int row = m0 + q_row + (e >= 2 ? 8 : 0), key = n0 + nt * MMA_N + 2 * t + (e & 1);
                    if (key >= p.seqlen_k || (p.causal && key > row + shift)) s_acc[nt][e] = -INFINITY;
                }
        }

        // Online softmax for rows g (r = 0: c0, c1) and g + 8 (r = 1: c2, c3).
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float row_max = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < BLOCK_N / MMA_N; nt++) row_max = fmaxf(row_max, fmaxf(s_acc[nt][2 * r], s_acc[nt][2 * r + 1]));
            row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));  // the 4 lanes of a quad
            row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));  // share one row
            const float m_new = fmaxf(m_run[r], row_max * scale_log2);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: exp2(-inf) = 0, no NaN
            const float correction = exp2_approx(m_run[r] - m_use);
            m_run[r] = m_new;
            float row_sum = 0.0f;
#pragma unroll
            for (int nt = 0; nt < BLOCK_N / MMA_N; nt++) {
                s_acc[nt][2 * r] = exp2_approx(fmaf(s_acc[nt][2 * r], scale_log2, -m_use));
                s_acc[nt][2 * r + 1] = exp2_approx(fmaf(s_acc[nt][2 * r + 1], scale_log2, -m_use));
                row_sum += s_acc[nt][2 * r] + s_acc[nt][2 * r + 1];
            }
            l_run[r] = l_run[r] * correction + row_sum;
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt++) {
                o_acc[dt][2 * r] *= correction;
                o_acc[dt][2 * r + 1] *= correction;
            }
        }

        // O += P V. The C fragments of key n-tiles 2j and 2j+1 are exactly the A
        // fragment of k-step j, so P never leaves registers.
#pragma unroll
        for (int j = 0; j < BLOCK_N / MMA_K; j++) {
            uint32_t p_frag[4] = {pack2<T>(s_acc[2 * j][0], s_acc[2 * j][1]), pack2<T>(s_acc[2 * j][2], s_acc[2 * j][3]),
                                  pack2<T>(s_acc[2 * j + 1][0], s_acc[2 * j + 1][1]),
                                  pack2<T>(s_acc[2 * j + 1][2], s_acc[2 * j + 1][3])};
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt++) {
                // B = V: element (k = key, n = d) is v_smem[key][d]; the two keys of b0
                // are in different rows, so they take two 16-bit loads.
                const int key = j * MMA_K + 2 * t, col = dt * MMA_N + g;
                uint32_t b0 = v_smem[key][swizzle(key, col)] | (uint32_t)v_smem[key + 1][swizzle(key + 1, col)] << 16;
                uint32_t b1 = v_smem[key + 8][swizzle(key + 8, col)] | (uint32_t)v_smem[key + 9][swizzle(key + 9, col)] << 16;
                mma_m16n8k16<T>(o_acc[dt], p_frag, b0, b1);
            }
        }
    }

    // Epilogue: finish the row sums across the quad, normalise once, store.
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        const int row = m0 + q_row + 8 * r;
        if (row >= p.seqlen_q) continue;
        const float inv_l = l_run[r] != 0.0f ? 1.0f / l_run[r] : 0.0f;  // l = 0: the row saw no key, O = 0; NaN l: NaN O
        uint16_t *o = (uint16_t *)p.o + b * p.o_batch_stride + (int64_t)row * p.o_row_stride + h * p.o_head_stride;
#pragma unroll
        for (int dt = 0; dt < D / MMA_N; dt++)
            *reinterpret_cast<uint32_t *>(o + dt * MMA_N + 2 * t) = pack2<T>(o_acc[dt][2 * r] * inv_l, o_acc[dt][2 * r + 1] * inv_l);
        if (p.lse && t == 0)
            p.lse[((int64_t)b * p.heads_q + h) * p.seqlen_q + row] =
                l_run[r] != 0.0f ? (m_run[r] + log2f(l_run[r])) * LN2 : -INFINITY;
    }
}

// ---- launcher and ABI --------------------------------------------------------

// A block's shared memory: Q [BLOCK_M][D], K and V [BLOCK_N][D].
template <int D>
constexpr int smem_bytes_of() { return (BLOCK_M + 2 * BLOCK_N) * D * 2; }

// One block per (query tile, head, batch).
static long long grid_blocks(const fa2_params *p)
{
    return (long long)((p->seqlen_q + BLOCK_M - 1) / BLOCK_M) * p->heads_q * p->batch;
}

template <typename T, int D>
static int launch(const fa2_params *p, int64_t, void *stream)
{
    constexpr int smem_bytes = smem_bytes_of<D>();
    FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    dim3 grid((p->seqlen_q + BLOCK_M - 1) / BLOCK_M, p->heads_q, p->batch);
    fa2_mma_kernel<T, D><<<grid, THREADS, smem_bytes, (cudaStream_t)stream>>>(*p);
    FA2_CUDA_TRY(cudaGetLastError());
    return FA2_OK;
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
    // Last, the device: the tiles' shared memory must fit what the GPU lets one block have.
    char what[32];
    snprintf(what, sizeof what, "head_dim %d", p->head_dim);
    return fa2_limits_check_smem(fa2_config_smem(p, 0), what, why, why_len);
}

extern "C" int fa2_config_count(void) { return 1; }

extern "C" int fa2_config_smem(const fa2_params *p, int config)
{
    if (config != 0) return -1;
    return p->head_dim == 64 ? smem_bytes_of<64>() : smem_bytes_of<128>();
}

extern "C" int fa2_config(const fa2_params *p, char *what, size_t what_len)
{
    if (!fa2_supports(p, what, what_len)) return -1;
    snprintf(what, what_len, "%d query rows x %d keys, %d warps, %lld blocks", BLOCK_M, BLOCK_N, WARPS, grid_blocks(p));
    return 0;
}

extern "C" int fa2_forward(const fa2_params *p, void *stream)
{
    if (!fa2_supports(p, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    // One launch, or one per chunk of at most 65,535 batches and heads (the grid's y and z).
    if (p->dtype == FA2_FP16)
        return fa2_for_each_grid_chunk(p, p->head_dim == 64 ? launch<__half, 64> : launch<__half, 128>, stream);
    return fa2_for_each_grid_chunk(p, p->head_dim == 64 ? launch<__nv_bfloat16, 64> : launch<__nv_bfloat16, 128>, stream);
}

extern "C" const char *fa2_name(void) { return "03_swizzle"; }
extern "C" const char *fa2_key_change(void) { return "XOR swizzle of 16-byte chunks: conflict-free fragment reads"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }
extern "C" size_t fa2_workspace_size(const fa2_params *) { return 0; }  // one pass: no partial results

// No backward in this step: every call is refused in one line (the params' own refusal
// where they are bad), and nothing is touched.
extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len) { return fa2_refuse_backward(p, fa2_name(), why, why_len); }
extern "C" int fa2_backward(const fa2_bwd_params *, void *) { return FA2_ERR_UNSUPPORTED; }
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *) { return 0; }
