/* device.c - GPU memory and timing for the harness, through the CUDA runtime. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "harness.h"
#include "device_limits.h"

int fa2_device_open(fa2_device_info *info, const char *step_name)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        fprintf(stderr, "error: no CUDA GPU found (%s): %s runs on a GPU; step 00 runs on the CPU\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", step_name);
        return FA2_EXIT_NO_DEVICE;
    }
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
        fprintf(stderr, "error: GPU %s is sm_%d%d: %s needs sm_80 or newer (mma.sync bf16, cp.async)\n",
                prop.name, prop.major, prop.minor, step_name);
        return FA2_EXIT_NO_DEVICE;
    }
    memset(info, 0, sizeof *info);
    /* Under FA2_EMULATE every result line says which GPU's limits the step obeyed: the
     * timings are still this GPU's. */
    fa2_limits limits;
    if (fa2_limits_get(&limits, NULL, 0) == FA2_LIMITS_OK && limits.preset)
        snprintf(info->name, sizeof info->name, "%.80s as %s", prop.name, limits.preset);
    else
        snprintf(info->name, sizeof info->name, "%.127s", prop.name);
    info->sm_major = prop.major;
    info->sm_minor = prop.minor;
    info->sm_count = prop.multiProcessorCount;
    info->l2_bytes = (size_t)prop.l2CacheSize;
    return 0;
}

size_t fa2_device_free_bytes(void)
{
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
}

void *fa2_device_alloc(size_t bytes)
{
    void *ptr = NULL;
    CUDA_CHECK(cudaMalloc(&ptr, bytes ? bytes : 1));
    return ptr;
}

void fa2_device_free(void *ptr) { CUDA_CHECK(cudaFree(ptr)); }
void fa2_device_upload(void *dst, const void *src, size_t bytes) { CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)); }
void fa2_device_download(void *dst, const void *src, size_t bytes) { CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)); }
void fa2_device_poison(void *ptr, size_t bytes) { CUDA_CHECK(cudaMemset(ptr, 0xff, bytes)); }
void fa2_device_zero(void *ptr, size_t bytes) { CUDA_CHECK(cudaMemset(ptr, 0, bytes)); }
void fa2_device_sync(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

void *fa2_stream_create(void)
{
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return stream;
}

void fa2_stream_destroy(void *stream) { CUDA_CHECK(cudaStreamDestroy((cudaStream_t)stream)); }

void fa2_stream_download(void *dst, const void *src, size_t bytes, void *stream)
{
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
}

int fa2_time_gpu(int (*launch)(const void *ctx), const void *ctx, const fa2_device_info *dev, int warmup, int iters,
                 double *ms_out)
{
    size_t flush_bytes = 2 * (dev->l2_bytes ? dev->l2_bytes : (64u << 20));
    void *flush = fa2_device_alloc(flush_bytes);
    uint32_t *sink = fa2_device_alloc(sizeof(uint32_t));
    CUDA_CHECK(cudaMemset(flush, 0x5a, flush_bytes)); /* defined contents for the flush to read */
    cudaEvent_t *start = fa2_xmalloc(sizeof(cudaEvent_t) * (size_t)iters, "timing events");
    cudaEvent_t *stop = fa2_xmalloc(sizeof(cudaEvent_t) * (size_t)iters, "timing events");
    for (int i = 0; i < iters; i++) {
        CUDA_CHECK(cudaEventCreate(&start[i]));
        CUDA_CHECK(cudaEventCreate(&stop[i]));
    }
    int rc = 0;
    for (int i = 0; i < warmup && !rc; i++) rc = launch(ctx);
    for (int i = 0; i < iters && !rc; i++) {
        fa2_l2_flush_read(flush, flush_bytes, sink, NULL); /* evicts the inputs from L2, leaving it clean */
        CUDA_CHECK(cudaEventRecord(start[i], NULL));
        rc = launch(ctx);
        CUDA_CHECK(cudaEventRecord(stop[i], NULL));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < iters; i++) {
        float ms = 0;
        if (!rc) CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
        ms_out[i] = ms;
        CUDA_CHECK(cudaEventDestroy(start[i]));
        CUDA_CHECK(cudaEventDestroy(stop[i]));
    }
    free(start);
    free(stop);
    fa2_device_free(flush);
    fa2_device_free(sink);
    return rc;
}
