/* flush.cu - the L2 flush before each timed launch (fa2_time_gpu, device.c), and the streaming
 * probe's clean flush (reference/bandwidth_ceiling --flush read).
 *
 * A flush must evict the launch's inputs from the L2, so that they come from DRAM, and leave
 * nothing that the launch pays for. A memset of twice the L2 (what the timing did before)
 * evicts them but leaves the L2 full of dirty lines: a launch that then streams its inputs
 * evicts those lines, and each is written back to DRAM while it reads, up to the whole L2
 * (50 MiB on an H100, a third of the bytes of a B1 Nk32768 decode). Reading the buffer instead
 * fills the L2 with clean lines, which it drops for free. The loads are ordinary ones
 * (ld.global.cg: L2 only), not the evict-first streaming form, whose lines the L2 would drop
 * before the older ones it is meant to push out. */
#include <stdint.h>

#include "cuda_check.h"
#include "harness.h"

constexpr int FLUSH_THREADS = 256, FLUSH_BLOCKS_PER_SM = 8;

// XORs every 16-byte vector of buf into one word per thread, stored only when it equals
// `never` (in practice never): the compiler must keep the loads, and the store costs nothing.
__global__ void __launch_bounds__(FLUSH_THREADS) flush_read_kernel(const uint4 *buf, size_t vectors, uint32_t never, uint32_t *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += stride) {
        const uint4 v = __ldcg(buf + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == never) *sink = acc;
}

extern "C" void fa2_l2_flush_read(const void *buf, size_t bytes, uint32_t *sink, void *stream)
{
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    flush_read_kernel<<<sms * FLUSH_BLOCKS_PER_SM, FLUSH_THREADS, 0, (cudaStream_t)stream>>>((const uint4 *)buf, bytes / sizeof(uint4),
                                                                                         0x9e3779b9u, sink);
    CUDA_CHECK(cudaGetLastError());
}
