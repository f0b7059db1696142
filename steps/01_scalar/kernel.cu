/* Step 01 - FlashAttention-2 as a scalar CUDA kernel ("numba style").
 *
 * The algorithm of step 00, moved to the GPU with the most direct mapping:
 *  - one block per (query tile of BLOCK_M rows, head, batch): enough blocks to
 *    fill the GPU at the seed shape (32 tiles x 8 heads x 2 = 512 blocks); the
 *    grid's y and z (heads, batch) stop at 65,535, so a larger call runs as
 *    several launches (fa2_for_each_grid_chunk: torch takes batch 70,000);
 *  - Q, K, V tiles and the score tile S live in shared memory as fp32
 *    (converted from fp16/bf16 when loaded), all math is scalar fp32 FMA;
 *  - thread t owns query row t / 4 and every 4th column of it, starting at t % 4:
 *    8 scores of S and D / 4 values of O, which stay in registers (o_acc);
 *  - the row max and row sum are combined over the 4 threads of a row with two
 *    warp shuffles (the 4 threads are adjacent lanes of one warp).
 * No tensor cores, no vector loads, no care for bank conflicts: this is the
 * baseline the tensor-core steps are measured against.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>

#include "../../common/fa2.h"
#include "../../common/device_limits.h"
#include "../../common/validate.h"

constexpr int BLOCK_M = 32;  // query rows per block
constexpr int BLOCK_N = 32;  // key rows per iteration
constexpr int THREADS = 128;
constexpr int THREADS_PER_ROW = THREADS / BLOCK_M;
static_assert(THREADS % BLOCK_M == 0, "every query row must get the same number of threads");
static_assert(THREADS_PER_ROW == 4, "the row max / row sum shuffles combine exactly 4 lanes (xor 1, xor 2)");
static_assert(BLOCK_N % THREADS_PER_ROW == 0, "each thread of a row owns the same number of score columns");

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Copies `rows` rows of D elements (row r at src + r * row_stride) into a
// [BLOCK][D] fp32 tile, writing zeros past the last valid row so that tail
// tiles contribute nothing (0 * V, and masked scores never read garbage).
template <typename T, int D, int BLOCK>
__device__ void load_tile(float (*tile)[D], const T *src, int64_t row_stride, int rows)
{
    for (int i = threadIdx.x; i < BLOCK * D; i += THREADS) {
        int r = i / D, c = i % D;
        tile[r][c] = r < rows ? to_float(src[r * row_stride + c]) : 0.0f;
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(THREADS) fa2_scalar_kernel(fa2_params p)
{
    extern __shared__ float smem[];
    float(*q_smem)[D] = reinterpret_cast<float(*)[D]>(smem);                  // [BLOCK_M][D]
    float(*k_smem)[D] = reinterpret_cast<float(*)[D]>(smem + BLOCK_M * D);    // [BLOCK_N][D]
    float(*v_smem)[D] = reinterpret_cast<float(*)[D]>(smem + (BLOCK_M + BLOCK_N) * D);
    float(*s_smem)[BLOCK_N] = reinterpret_cast<float(*)[BLOCK_N]>(smem + (BLOCK_M + 2 * BLOCK_N) * D);

    const int m0 = blockIdx.x * BLOCK_M, h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);  // GQA: several query heads share one K/V head
    const int row = threadIdx.x / THREADS_PER_ROW;  // this thread's query row in the tile
    const int lane_in_row = threadIdx.x % THREADS_PER_ROW;
    const long long shift = (long long)p.seqlen_k - p.seqlen_q;  // row i sees keys j <= i + shift

    const T *q = (const T *)p.q + b * p.q_batch_stride + m0 * p.q_row_stride + h * p.q_head_stride;
    const T *k = (const T *)p.k + b * p.k_batch_stride + h_kv * p.k_head_stride;
    const T *v = (const T *)p.v + b * p.v_batch_stride + h_kv * p.v_head_stride;
    load_tile<T, D, BLOCK_M>(q_smem, q, p.q_row_stride, min(BLOCK_M, p.seqlen_q - m0));

    float o_acc[D / THREADS_PER_ROW];  // O[row][lane_in_row + 4 j]
    for (int j = 0; j < D / THREADS_PER_ROW; j++) o_acc[j] = 0.0f;
    float m_run = -INFINITY, l_run = 0.0f;

    // Causal: key tiles past the last key the tile's last row sees are skipped.
    long long key_end = p.causal ? m0 + BLOCK_M + shift : p.seqlen_k;
    key_end = min(key_end, (long long)p.seqlen_k);

    for (int n0 = 0; n0 < key_end; n0 += BLOCK_N) {
        __syncthreads();  // the previous iteration is done reading k_smem, v_smem, s_smem
        load_tile<T, D, BLOCK_N>(k_smem, k + n0 * p.k_row_stride, p.k_row_stride, min(BLOCK_N, p.seqlen_k - n0));
        load_tile<T, D, BLOCK_N>(v_smem, v + n0 * p.v_row_stride, p.v_row_stride, min(BLOCK_N, p.seqlen_k - n0));
        __syncthreads();

        // S = scale * Q K^T for this thread's columns, masked.
        float row_max = -INFINITY;
        for (int c = lane_in_row; c < BLOCK_N; c += THREADS_PER_ROW) {
            float acc = 0.0f;
            for (int d = 0; d < D; d++) acc += q_smem[row][d] * k_smem[c][d];
            int key = n0 + c;
            bool visible = key < p.seqlen_k && (!p.causal || key <= m0 + row + shift);
            s_smem[row][c] = visible ? acc * p.softmax_scale : -INFINITY;
            row_max = fmaxf(row_max, s_smem[row][c]);
        }
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));

        // Online softmax: new running max, rescale what was accumulated so far.
        float m_new = fmaxf(m_run, row_max);
        float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet: exp(-inf) = 0, not NaN
        float correction = __expf(m_run - m_use);
        float row_sum = 0.0f;
        for (int c = lane_in_row; c < BLOCK_N; c += THREADS_PER_ROW) {
            float prob = __expf(s_smem[row][c] - m_use);
            s_smem[row][c] = prob;
            row_sum += prob;
        }
        row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
        row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);
        l_run = l_run * correction + row_sum;
        m_run = m_new;
        __syncwarp();  // P of this row was written by the 4 lanes of this row, all in this warp

        // O = O * correction + P V for this thread's columns.
        for (int j = 0; j < D / THREADS_PER_ROW; j++) {
            float acc = o_acc[j] * correction;
            for (int c = 0; c < BLOCK_N; c++) acc += s_smem[row][c] * v_smem[c][lane_in_row + THREADS_PER_ROW * j];
            o_acc[j] = acc;
        }
    }

    // Deferred normalisation, once per row. l is exactly 0 only for a row that saw
    // no key (the max's own term is exp(0) = 1): it writes O = 0, LSE = -inf. A NaN
    // that reached the row made l NaN, and O and LSE follow.
    if (m0 + row < p.seqlen_q) {
        const float inv_l = l_run != 0.0f ? 1.0f / l_run : 0.0f;
        T *o = (T *)p.o + b * p.o_batch_stride + (m0 + row) * p.o_row_stride + h * p.o_head_stride;
        for (int j = 0; j < D / THREADS_PER_ROW; j++)
            o[lane_in_row + THREADS_PER_ROW * j] = from_float<T>(o_acc[j] * inv_l);
        if (p.lse && lane_in_row == 0)
            p.lse[((int64_t)b * p.heads_q + h) * p.seqlen_q + m0 + row] = l_run != 0.0f ? m_run + logf(l_run) : -INFINITY;
    }
}

// A block's shared memory: the fp32 tiles Q [BLOCK_M][D], K and V [BLOCK_N][D], S [BLOCK_M][BLOCK_N].
template <int D>
constexpr int smem_bytes_of() { return (int)sizeof(float) * ((BLOCK_M + 2 * BLOCK_N) * D + BLOCK_M * BLOCK_N); }

// One block per (query tile, head, batch).
static long long grid_blocks(const fa2_params *p)
{
    return (long long)((p->seqlen_q + BLOCK_M - 1) / BLOCK_M) * p->heads_q * p->batch;
}

template <typename T, int D>
static int launch(const fa2_params *p, int64_t, void *stream)
{
    constexpr int smem_bytes = smem_bytes_of<D>();
    FA2_CUDA_TRY(cudaFuncSetAttribute(fa2_scalar_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    dim3 grid((p->seqlen_q + BLOCK_M - 1) / BLOCK_M, p->heads_q, p->batch);
    fa2_scalar_kernel<T, D><<<grid, THREADS, smem_bytes, (cudaStream_t)stream>>>(*p);
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
    snprintf(what, what_len, "%d query rows x %d keys, %d threads, %lld blocks", BLOCK_M, BLOCK_N, THREADS, grid_blocks(p));
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

extern "C" const char *fa2_name(void) { return "01_scalar"; }
extern "C" const char *fa2_key_change(void) { return "scalar fp32 CUDA: tiles in shared memory, one thread per row slice"; }
extern "C" int fa2_runs_on_gpu(void) { return 1; }
extern "C" size_t fa2_workspace_size(const fa2_params *) { return 0; }  // one pass: no partial results

// No backward in this step: every call is refused in one line (the params' own refusal
// where they are bad), and nothing is touched.
extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len) { return fa2_refuse_backward(p, fa2_name(), why, why_len); }
extern "C" int fa2_backward(const fa2_bwd_params *, void *) { return FA2_ERR_UNSUPPORTED; }
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *) { return 0; }
