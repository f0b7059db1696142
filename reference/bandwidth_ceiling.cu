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
 *
 * The same read in the conditions of a timed step, for the question what a decode shape's
 * "% of bandwidth" compares: --bytes N reads N bytes (a multiple of 16 from 1 MiB to
 * 4 GiB; a decode shape's K and V), and --flush KIND runs something before each timed
 * read: read, what the timing of common/device.c and reference/sdpa.py runs, a read of
 * twice the L2 (fa2_l2_flush_read of common/flush.cu), which leaves only clean lines; write,
 * the timing's flush before it, a memset of twice the L2, which leaves the L2 full of dirty
 * lines the read must write back as it evicts them; none (the default), nothing between the
 * reads, whose 1 GiB leaves only clean lines of its own end behind. The row's probe is
 * stream_read with the defaults, stream_read_<MiB>MiB_after_<KIND> otherwise (the ceiling
 * is the default's).
 */
#include <stdint.h>
#include <stdio.h>

#include "../common/harness.h"
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

enum Flush { FLUSH_NONE, FLUSH_WRITE, FLUSH_READ };
static const char *const FLUSH_NAMES[] = {"none", "write", "read"};

int main(int argc, char **argv)
{
    // --bytes and --flush here; what is left (--csv, --help, anything not allowed) to probe_args.
    const char *usage = "usage: bandwidth_ceiling [--csv FILE] [--bytes N] [--flush none|write|read]   "
                        "streaming-read bandwidth of GPU 0's memory, GB/s";
    size_t bytes = BUFFER_BYTES;
    Flush flush = FLUSH_NONE;
    int kept = 1;
    for (int i = 1; i < argc; i++) {
        const bool valued = !strcmp(argv[i], "--bytes") || !strcmp(argv[i], "--flush") || !strcmp(argv[i], "--csv");
        if (valued && i + 1 == argc) {
            fprintf(stderr, "error: %s needs a value (allowed: --csv FILE, --bytes N, --flush none|write|read, --help)\n", argv[i]);
            return 2;
        }
        if (!valued && strcmp(argv[i], "--help")) {
            fprintf(stderr, "error: argument '%s' is not allowed (allowed: --csv FILE, --bytes N, --flush none|write|read, --help)\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--bytes")) {
            char *end = NULL;
            const unsigned long long n = strtoull(argv[++i], &end, 10);
            if (*end || argv[i][0] == '-' || n % 16 || n < (1ull << 20) || n > (4ull << 30)) {
                fprintf(stderr, "error: --bytes '%s' is not allowed (allowed: a multiple of 16 from 1048576 to 4294967296)\n", argv[i]);
                return 2;
            }
            bytes = (size_t)n;
        } else if (!strcmp(argv[i], "--flush")) {
            const char *kind = argv[++i];
            int k = 0;
            while (k < 3 && strcmp(kind, FLUSH_NAMES[k])) k++;
            if (k == 3) {
                fprintf(stderr, "error: --flush '%s' is not allowed (allowed: none, write, read)\n", kind);
                return 2;
            }
            flush = (Flush)k;
        } else {  // --csv FILE or --help: probe_args'
            argv[kept++] = argv[i];
            if (valued) argv[kept++] = argv[++i];
        }
    }
    const char *csv_path = probe_args(kept, argv, usage, NULL, NULL);
    const cudaDeviceProp prop = probe_gpu("bandwidth_ceiling", "a CUDA GPU", [](const cudaDeviceProp &) { return true; });
    char date[16];
    probe_date(date);
    FILE *csv = probe_csv_open(csv_path, BANDWIDTH_HEADER);

    int blocks_per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, stream_read_kernel, THREADS, 0));
    const int blocks = prop.multiProcessorCount * blocks_per_sm;
    // The flush buffer: twice the L2, as the harness's (common/device.c, common/flush.cu).
    const size_t flush_bytes = 2 * (size_t)(prop.l2CacheSize ? prop.l2CacheSize : (64 << 20));
    uint4 *src = NULL, *flush_buf = NULL;
    uint32_t *out = NULL;
    CUDA_CHECK(cudaMalloc(&src, bytes));
    CUDA_CHECK(cudaMalloc(&out, sizeof(uint32_t) * blocks * THREADS));
    CUDA_CHECK(cudaMemset(src, 0x5a, bytes));  // defined contents (the XOR of equal words is 0, never 1)
    if (flush != FLUSH_NONE) {
        CUDA_CHECK(cudaMalloc(&flush_buf, flush_bytes));
        CUDA_CHECK(cudaMemset(flush_buf, 0x5a, flush_bytes));
    }
    int round = 0;
    const auto before = [&] {
        if (flush == FLUSH_WRITE) CUDA_CHECK(cudaMemsetAsync(flush_buf, round++ & 0xff, flush_bytes, NULL));
        if (flush == FLUSH_READ) fa2_l2_flush_read(flush_buf, flush_bytes, out, NULL);
    };
    const size_t vectors = bytes / sizeof(uint4);
    const double ms = probe_median_ms_after(before, [&] { stream_read_kernel<<<blocks, THREADS>>>(src, vectors, 1u, out); });
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    char probe[64] = "stream_read";
    if (bytes != BUFFER_BYTES || flush != FLUSH_NONE) snprintf(probe, sizeof probe, "stream_read_%zuMiB_after_%s", bytes >> 20, FLUSH_NAMES[flush]);
    printf("%s: streaming read of %zu MiB (flush before each: %s, %zu MiB), %d blocks of %d threads: %.4f ms, %.0f GB/s\n",
           prop.name, bytes >> 20, FLUSH_NAMES[flush], flush != FLUSH_NONE ? flush_bytes >> 20 : 0, blocks, THREADS, ms, gbps);
    if (csv) {
        fprintf(csv, "%s,%s,%s,%.0f\n", probe, prop.name, date, gbps);
        fclose(csv);
    }
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(out));
    if (flush_buf) CUDA_CHECK(cudaFree(flush_buf));
    return 0;
}
