/* bandwidth_ceiling - the measured streaming-read bandwidth of this GPU's memory.
 *
 * At decode (one query row, or a few, against a long K and V) attention reads each K
 * and V element once and does two multiply-adds with it: the time is the bytes of K and
 * V over the bandwidth at which memory can be streamed, not the tensor cores' peak. This
 * probe measures that bandwidth the way such a kernel reads: every SM holds as many
 * 256-thread blocks as fit, each thread reads 16-byte vectors in a grid-stride loop,
 * LOADS_IN_FLIGHT independent loads per iteration, with the streaming cache hint
 * (ld.global.cs: the lines are not worth keeping), over a buffer of BUFFER_BYTES, 20x
 * the 50 MB L2 of an H100 or H200, so that the L2 serves almost none of it. Reads only:
 * a kernel that also wrote would share the bandwidth with its writes.
 *
 * usage: bandwidth_ceiling [--csv FILE]   prints GB/s (10^9 bytes per second) of GPU 0;
 * with --csv appends a row probe,device,date,gbps. Exit 3 without a usable GPU.
 */
#include <stdint.h>
#include <stdio.h>

#include "probe.h"

constexpr int THREADS = 256;
constexpr int LOADS_IN_FLIGHT = 4;           // per thread and iteration: enough requests to cover the latency
constexpr size_t BUFFER_BYTES = 1ull << 30;  // 1 GiB
constexpr const char *BANDWIDTH_HEADER = "probe,device,date,gbps\n";

// XORs every 16-byte vector of src[0 .. vectors) into one word per thread; `never` is a
// value the XOR does not take in practice, but the compiler cannot know it: the loads
// stay, and the store costs nothing.
__global__ void __launch_bounds__(THREADS) stream_read_kernel(const uint4 *src, size_t vectors, uint32_t never, uint32_t *out)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += LOADS_IN_FLIGHT * stride) {
        uint4 v[LOADS_IN_FLIGHT];
#pragma unroll
        for (int k = 0; k < LOADS_IN_FLIGHT; k++) v[k] = i + k * stride < vectors ? __ldcs(src + i + k * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int k = 0; k < LOADS_IN_FLIGHT; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    if (acc == never) out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

int main(int argc, char **argv)
{
    const char *csv_path =
        probe_args(argc, argv, "usage: bandwidth_ceiling [--csv FILE]   streaming-read bandwidth of GPU 0's memory, GB/s", NULL, NULL);
    const cudaDeviceProp prop = probe_gpu("bandwidth_ceiling", "a CUDA GPU", [](const cudaDeviceProp &) { return true; });
    char date[16];
    probe_date(date);
    FILE *csv = probe_csv_open(csv_path, BANDWIDTH_HEADER);

    int blocks_per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, stream_read_kernel, THREADS, 0));
    const int blocks = prop.multiProcessorCount * blocks_per_sm;
    uint4 *src = NULL;
    uint32_t *out = NULL;
    CUDA_CHECK(cudaMalloc(&src, BUFFER_BYTES));
    CUDA_CHECK(cudaMalloc(&out, sizeof(uint32_t) * blocks * THREADS));
    CUDA_CHECK(cudaMemset(src, 0x5a, BUFFER_BYTES));  // defined contents (the XOR of equal words is 0, never 1)
    const size_t vectors = BUFFER_BYTES / sizeof(uint4);
    const double ms = probe_median_ms([&] { stream_read_kernel<<<blocks, THREADS>>>(src, vectors, 1u, out); });
    const double gbps = BUFFER_BYTES / (ms * 1e-3) / 1e9;
    printf("%s: streaming read of %zu MiB, %d blocks of %d threads: %.4f ms, %.0f GB/s\n", prop.name,
           BUFFER_BYTES >> 20, blocks, THREADS, ms, gbps);
    if (csv) {
        fprintf(csv, "stream_read,%s,%s,%.0f\n", prop.name, date, gbps);
        fclose(csv);
    }
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(out));
    return 0;
}
