/* cublas_unfused - S = QK^T and O = PV with cuBLAS, a softmax kernel between (S and P round-trip HBM).
 *
 * The textbook way to compute attention, and the baseline the fused steps are
 * measured against. Three launches per call, each a good kernel on its own:
 *   1. S = scale * Q K^T   cuBLAS batched GEMM over (batch, head), fp32 output;
 *   2. P = softmax(S)      one block per query row, P in fp16/bf16, LSE in fp32;
 *   3. O = P V             cuBLAS batched GEMM, fp32 accumulation, O in the dtype.
 *
 * Why it is slow: S and P are Nq x Nk per head and live in HBM between the
 * launches. Per head they cost Nq * Nk * (4 + 4 + 2 + 2) bytes of DRAM traffic
 * (S written by GEMM 1 and read by the softmax in fp32, P written by the softmax
 * and read by GEMM 2 in 16 bits), against only (2 Nq + 2 Nk) * d * 2 bytes for
 * Q, K, V and O. At N = 4096, d = 128 that is 192 MiB per head for S and P versus
 * 4 MiB for the tensors: about 60 us per head at an H100's 3.35 TB/s of HBM3,
 * while the 8.6 GFLOP of the two GEMMs take about 15 us on its tensor cores. So
 * the time goes to memory, and the workspace grows with N^2 (refused past 16 GiB).
 * The fused steps keep S and P in registers and never write them anywhere.
 * It also computes every masked score of a causal problem: cuBLAS knows no mask.
 *
 * Calls share one cached workspace and one cuBLAS handle (made on the device
 * current at the first call), so calls must be ordered: one stream, or synchronised.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>

#include "../common/fa2.h"
#include "../common/validate.h"

constexpr int SOFTMAX_THREADS = 128;  // one block of 4 warps per query row
// float4 chunks of a row each thread keeps in registers: rows of up to
// 4 * 128 * 32 = 16384 keys are read from HBM once; longer rows are read twice.
constexpr int MAX_CACHED_CHUNKS = 32;
// Rows of S and P in the workspace are padded to 8 elements, so each starts
// 16-byte aligned: cuBLAS's tensor-core kernels and the softmax's float4 loads need it.
constexpr int WS_ROW_ALIGN = 8;
constexpr size_t MAX_S_BYTES = size_t(16) << 30;
constexpr int GEMM_POINTER_ARRAYS = 6;  // K, Q, S for GEMM 1; V, P, O for GEMM 2

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T> struct alignas(8) quad { T v[4]; };  // 4 probabilities, one 8-byte store

// (max, sum of exp(x - max)) of two parts of a row, merged. A part that saw no
// key is (-inf, 0); exponents are taken against 0 when both are, so that two such
// parts stay (-inf, 0) instead of exp(-inf + inf) = NaN.
__device__ __forceinline__ void merge_max_sum(float &m, float &l, float m_other, float l_other)
{
    const float m_new = fmaxf(m, m_other);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    l = l * __expf(m - m_use) + l_other * __expf(m_other - m_use);
    m = m_new;
}

// Online softmax of one row of scaled scores (the scale is applied by GEMM 1).
// Each thread folds its float4 chunks into a running (max, sum) in one pass,
// keeping up to CACHED chunks in registers for the pass that writes P, then the
// block merges the 128 partial (max, sum) pairs.
template <typename T, int CACHED>
__global__ void __launch_bounds__(SOFTMAX_THREADS)
softmax_rows_kernel(const float *s_ws, T *p_ws, float *lse, int seqlen_q, int seqlen_k, int64_t ws_ld, int causal)
{
    __shared__ float warp_m_smem[SOFTMAX_THREADS / 32], warp_l_smem[SOFTMAX_THREADS / 32];
    const int64_t row = blockIdx.x;  // (batch * heads_q + head) * seqlen_q + query; also the LSE index
    const long long query = row % seqlen_q;
    const float4 *s_row = reinterpret_cast<const float4 *>(s_ws + row * ws_ld);
    quad<T> *p_row = reinterpret_cast<quad<T> *>(p_ws + row * ws_ld);

    // Bottom-right causal: query i sees keys j <= i + seqlen_k - seqlen_q.
    const long long last_key = causal ? query + seqlen_k - seqlen_q : seqlen_k - 1;
    const int visible = (int)max(0LL, min((long long)seqlen_k, last_key + 1));
    const int visible_chunks = (visible + 3) / 4;
    const int chunks = (seqlen_k + 3) / 4;  // P is written over every key, zeros where masked

    auto load_chunk = [&](int c) {  // scores of keys 4c .. 4c+3, -inf where masked; masked chunks are not read
        float4 x = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        if (c < visible_chunks) {
            x = s_row[c];
            if (4 * c + 1 >= visible) x.y = -INFINITY;
            if (4 * c + 2 >= visible) x.z = -INFINITY;
            if (4 * c + 3 >= visible) x.w = -INFINITY;
        }
        return x;
    };
    float m = -INFINITY, l = 0.0f;
    auto fold_chunk = [&](float4 x) {  // branch-free, so the loads above it are never held back
        const float m_new = fmaxf(m, fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w)));
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: exp(-inf) = 0, not NaN
        l = l * __expf(m - m_use) + __expf(x.x - m_use) + __expf(x.y - m_use) + __expf(x.z - m_use) +
            __expf(x.w - m_use);
        m = m_new;
    };

    // Every load in flight before the first is used: DRAM latency is paid once per row, not per chunk.
    float4 cache[CACHED];
#pragma unroll
    for (int k = 0; k < CACHED; k++) cache[k] = load_chunk(threadIdx.x + k * SOFTMAX_THREADS);
#pragma unroll
    for (int k = 0; k < CACHED; k++) fold_chunk(cache[k]);
    for (int c = threadIdx.x + CACHED * SOFTMAX_THREADS; c < visible_chunks; c += SOFTMAX_THREADS)
        fold_chunk(load_chunk(c));

#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        const float m_other = __shfl_xor_sync(0xffffffffu, m, offset);
        const float l_other = __shfl_xor_sync(0xffffffffu, l, offset);
        merge_max_sum(m, l, m_other, l_other);
    }
    if (threadIdx.x % 32 == 0) {
        warp_m_smem[threadIdx.x / 32] = m;
        warp_l_smem[threadIdx.x / 32] = l;
    }
    __syncthreads();
    m = warp_m_smem[0];
    l = warp_l_smem[0];
    for (int w = 1; w < SOFTMAX_THREADS / 32; w++) merge_max_sum(m, l, warp_m_smem[w], warp_l_smem[w]);

    // A row that sees no key: m = -inf, l = 0; exp(-inf - 0) * 0 writes P = 0, so O = P V = 0.
    const float m_use = m == -INFINITY ? 0.0f : m;
    const float inv_l = l != 0.0f ? 1.0f / l : 0.0f;  // l = 0 only where no key is seen; a NaN l makes P NaN
    auto store_chunk = [&](int c, float4 x) {
        quad<T> prob;
        prob.v[0] = from_float<T>(__expf(x.x - m_use) * inv_l);
        prob.v[1] = from_float<T>(__expf(x.y - m_use) * inv_l);
        prob.v[2] = from_float<T>(__expf(x.z - m_use) * inv_l);
        prob.v[3] = from_float<T>(__expf(x.w - m_use) * inv_l);
        p_row[c] = prob;  // keys past seqlen_k land in the row padding, which GEMM 2 never reads
    };
#pragma unroll
    for (int k = 0; k < CACHED; k++) {
        const int c = threadIdx.x + k * SOFTMAX_THREADS;
        if (c < chunks) store_chunk(c, cache[k]);
    }
    for (int c = threadIdx.x + CACHED * SOFTMAX_THREADS; c < chunks; c += SOFTMAX_THREADS)
        store_chunk(c, load_chunk(c));

    if (lse && threadIdx.x == 0) lse[row] = l != 0.0f ? m + logf(l) : -INFINITY;
}

// The per-(batch, head) matrix addresses cuBLAS's batched GEMM takes, written on
// the GPU in stream order, so general strides and GQA need no host round trip.
__global__ void fill_gemm_pointers_kernel(fa2_params p, const float *s_ws, const uint16_t *p_ws, int64_t ws_ld,
                                          const void **ptrs_ws)
{
    const int64_t count = (int64_t)p.batch * p.heads_q;
    const int64_t bh = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bh >= count) return;
    const int b = (int)(bh / p.heads_q), h = (int)(bh % p.heads_q);
    const int h_kv = h / (p.heads_q / p.heads_kv);  // GQA: several query heads share one K/V head
    const int64_t matrix = (int64_t)p.seqlen_q * ws_ld;
    // fp16 and bf16 are both 2 bytes: element offsets are the same for either dtype.
    ptrs_ws[0 * count + bh] = (const uint16_t *)p.k + b * p.k_batch_stride + h_kv * p.k_head_stride;
    ptrs_ws[1 * count + bh] = (const uint16_t *)p.q + b * p.q_batch_stride + h * p.q_head_stride;
    ptrs_ws[2 * count + bh] = s_ws + bh * matrix;
    ptrs_ws[3 * count + bh] = (const uint16_t *)p.v + b * p.v_batch_stride + h_kv * p.v_head_stride;
    ptrs_ws[4 * count + bh] = p_ws + bh * matrix;
    ptrs_ws[5 * count + bh] = (uint16_t *)p.o + b * p.o_batch_stride + h * p.o_head_stride;
}

static int64_t ws_row_elems(const fa2_params *p) { return (p->seqlen_k + WS_ROW_ALIGN - 1) / WS_ROW_ALIGN * WS_ROW_ALIGN; }
// In double: the ints of fa2_params can multiply past 2^64; the sizes that pass the
// 16 GiB check are exact in a double.
static double s_ws_bytes(const fa2_params *p)
{
    return (double)p->batch * p->heads_q * p->seqlen_q * ws_row_elems(p) * sizeof(float);
}

extern "C" int fa2_supports(const fa2_params *p, char *why, size_t why_len)
{
#define REFUSE(...) do { if (why) snprintf(why, why_len, __VA_ARGS__); return 0; } while (0)
    if (!fa2_validate_params(p, why, why_len) || !fa2_refuse_kv_cache(p, why, why_len)) return 0;
    // 16-bit elements: rows of a multiple of 8 are 16-byte aligned, which cuBLAS's tensor-core GEMMs need.
    if (p->head_dim % 8 || p->head_dim > 256)
        REFUSE("head_dim %d (allowed: a multiple of 8 up to 256)", p->head_dim);
    // The batched GEMMs take one matrix pointer per (batch, head), read on the GPU, where
    // cuBLAS cannot check them: every base and stride must keep them 16-byte aligned.
    if (!fa2_validate_alignment(p, 16, "cuBLAS's tensor-core GEMMs", why, why_len)) return 0;
    const int64_t row_strides[4] = {p->q_row_stride, p->k_row_stride, p->v_row_stride, p->o_row_stride};
    for (int64_t stride : row_strides)
        if (stride < p->head_dim || stride > INT32_MAX)
            REFUSE("row stride %lld (allowed: head_dim %d to 2^31-1, cuBLAS's leading dimension)", (long long)stride,
                   p->head_dim);
    if (s_ws_bytes(p) > MAX_S_BYTES)
        REFUSE("the fp32 score matrices S would take %.2f GiB (allowed: at most 16 GiB; the unfused baseline "
               "stores Nq x Nk scores for every head)", s_ws_bytes(p) / 1073741824.0);
    return 1;
#undef REFUSE
}

extern "C" int fa2_config_count(void) { return 1; }
// Only the softmax kernel's static per-warp max and sum: cuBLAS sizes its own GEMM tiles.
extern "C" int fa2_config_smem(const fa2_params *, int config) { return config == 0 ? (int)(2 * (SOFTMAX_THREADS / 32) * sizeof(float)) : -1; }

extern "C" int fa2_config(const fa2_params *p, char *what, size_t what_len)
{
    if (!fa2_supports(p, what, what_len)) return -1;
    snprintf(what, what_len, "cuBLAS GEMM, softmax kernel, cuBLAS GEMM: %.2f GiB of S and P", 1.5 * s_ws_bytes(p) / 1073741824.0);
    return 0;
}

// Returns FA2_ERR_LAUNCH, with the call and cuBLAS's reason recorded, if `call` fails.
#define CUBLAS_TRY(call)                                                                   \
    do {                                                                                   \
        const cublasStatus_t status_ = (call);                                             \
        if (status_ != CUBLAS_STATUS_SUCCESS) return fa2_fail(#call, cublasGetStatusString(status_)); \
    } while (0)

static cublasHandle_t cublas_handle;
static void *ws;  // [S fp32 | P 16-bit | GEMM pointer arrays], grown when a call needs more
static size_t ws_capacity;

template <typename T>
static void launch_softmax(const fa2_params *p, const float *s_ws, void *p_ws, int64_t ws_ld, cudaStream_t stream)
{
    const int64_t rows = (int64_t)p->batch * p->heads_q * p->seqlen_q;  // <= 2^29: each row of S takes >= 32 bytes
    const int chunks_per_thread = ((p->seqlen_k + 3) / 4 + SOFTMAX_THREADS - 1) / SOFTMAX_THREADS;
    // The fewest cached chunks that hold the row: unused registers would only cost occupancy.
    int cached = 1;
    while (cached < chunks_per_thread && cached < MAX_CACHED_CHUNKS) cached *= 2;
    void (*kernel)(const float *, T *, float *, int, int, int64_t, int) = softmax_rows_kernel<T, MAX_CACHED_CHUNKS>;
    switch (cached) {
    case 1: kernel = softmax_rows_kernel<T, 1>; break;
    case 2: kernel = softmax_rows_kernel<T, 2>; break;
    case 4: kernel = softmax_rows_kernel<T, 4>; break;
    case 8: kernel = softmax_rows_kernel<T, 8>; break;
    case 16: kernel = softmax_rows_kernel<T, 16>; break;
    }
    kernel<<<(unsigned)rows, SOFTMAX_THREADS, 0, stream>>>(s_ws, (T *)p_ws, p->lse, p->seqlen_q, p->seqlen_k, ws_ld,
                                                          p->causal);
}

extern "C" int fa2_forward(const fa2_params *p, void *stream_arg)
{
    if (!fa2_supports(p, NULL, 0)) return FA2_ERR_UNSUPPORTED;
    cudaStream_t stream = (cudaStream_t)stream_arg;
    if (!cublas_handle) {
        const cublasStatus_t status = cublasCreate(&cublas_handle);
        if (status != CUBLAS_STATUS_SUCCESS) {
            cublas_handle = NULL;
            return fa2_fail("cublasCreate", cublasGetStatusString(status));
        }
    }
    CUBLAS_TRY(cublasSetStream(cublas_handle, stream));

    const int64_t count = (int64_t)p->batch * p->heads_q, ws_ld = ws_row_elems(p);
    const size_t s_bytes = (size_t)s_ws_bytes(p), p_bytes = s_bytes / 2;
    const size_t need = s_bytes + p_bytes + GEMM_POINTER_ARRAYS * count * sizeof(void *);
    if (need > ws_capacity) {
        // cudaFree waits for the GPU, so no launch still in flight reads the old workspace.
        if (ws) FA2_CUDA_TRY(cudaFree(ws));
        ws = NULL;
        ws_capacity = 0;
        FA2_CUDA_TRY(cudaMalloc(&ws, need));
        ws_capacity = need;
    }
    float *s_ws = (float *)ws;
    uint16_t *p_ws = (uint16_t *)((char *)ws + s_bytes);
    const void **ptrs_ws = (const void **)((char *)ws + s_bytes + p_bytes);

    fill_gemm_pointers_kernel<<<(unsigned)((count + 255) / 256), 256, 0, stream>>>(*p, s_ws, p_ws, ws_ld, ptrs_ws);
    FA2_CUDA_TRY(cudaGetLastError());

    const cudaDataType t16 = p->dtype == FA2_FP16 ? CUDA_R_16F : CUDA_R_16BF;
    const float scale = p->softmax_scale, one = 1.0f, zero = 0.0f;
    const int batch_count = (int)count;  // <= 2^29: each matrix of S takes at least 32 bytes of 16 GiB
    // cuBLAS is column-major, and a row-major matrix is its column-major transpose:
    // S^T (Nk x Nq, ld ws_ld) = K (Nk x d, read transposed) * Q^T (d x Nq).
    // COMPUTE_32F: fp32 accumulation on the tensor cores, as the fused steps do.
    CUBLAS_TRY(cublasGemmBatchedEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, p->seqlen_k, p->seqlen_q, p->head_dim, &scale,
                                   ptrs_ws + 0 * count, t16, (int)p->k_row_stride, ptrs_ws + 1 * count, t16,
                                   (int)p->q_row_stride, &zero, (void *const *)(ptrs_ws + 2 * count), CUDA_R_32F,
                                   (int)ws_ld, batch_count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));

    if (p->dtype == FA2_FP16) launch_softmax<__half>(p, s_ws, p_ws, ws_ld, stream);
    else launch_softmax<__nv_bfloat16>(p, s_ws, p_ws, ws_ld, stream);
    FA2_CUDA_TRY(cudaGetLastError());

    // O^T (d x Nq, ld o_row_stride) = V^T (d x Nk) * P^T (Nk x Nq, ld ws_ld).
    CUBLAS_TRY(cublasGemmBatchedEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_N, p->head_dim, p->seqlen_q, p->seqlen_k, &one,
                                   ptrs_ws + 3 * count, t16, (int)p->v_row_stride, ptrs_ws + 4 * count, t16, (int)ws_ld,
                                   &zero, (void *const *)(ptrs_ws + 5 * count), t16, (int)p->o_row_stride, batch_count,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return FA2_OK;
}

extern "C" const char *fa2_name(void) { return "cublas_unfused"; }
extern "C" const char *fa2_key_change(void)
{
    return "unfused: S = QK^T and O = PV with cuBLAS, softmax kernel between (S and P round-trip HBM)";
}
extern "C" int fa2_runs_on_gpu(void) { return 1; }
extern "C" size_t fa2_workspace_size(const fa2_params *) { return 0; }  // one pass: no partial results

// No backward in this step: every call is refused in one line (the params' own refusal
// where they are bad), and nothing is touched.
extern "C" int fa2_backward_supports(const fa2_bwd_params *p, char *why, size_t why_len) { return fa2_refuse_backward(p, fa2_name(), why, why_len); }
extern "C" int fa2_backward(const fa2_bwd_params *, void *) { return FA2_ERR_UNSUPPORTED; }
extern "C" size_t fa2_backward_workspace_size(const fa2_bwd_params *) { return 0; }
