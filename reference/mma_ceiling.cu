/* mma_ceiling - the measured peak of mma.sync.aligned.m16n8k16 (f32 accumulate) on this GPU.
 *
 * The tensor-core steps compute with warp-level mma.sync m16n8k16, so their ceiling is
 * what that instruction can reach, not the datasheet number: on Hopper the datasheet
 * peak needs wgmma (warpgroup MMA fed from shared memory), and mma.sync tops out well
 * below it. This probe fills every SM with as many warps as fit, and each warp runs a
 * long loop of mma.sync on register operands only (no memory traffic at all) over
 * CHAINS independent accumulators, so the tensor pipe never waits for a result.
 *
 * usage: mma_ceiling [--csv FILE]   prints fp16 and bf16 TFLOP/s; with --csv appends
 * rows probe,device,date,dtype,tflops. Exit 3 without a usable GPU.
 *
 * --latency-table adds what the FA2 kernels actually live with: few warps per
 * scheduler and few independent mma in flight per warp. It prints fp16 TFLOP/s
 * for 1-4 warps per scheduler (blocks of 4 warps, one per scheduler, 1-4 blocks
 * per SM) times 1, 2, 4 or 8 independent accumulator chains per warp; with --csv
 * those rows are appended as probe mma_sync_w<warps per scheduler>_c<chains>.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>

#include "probe.h"


constexpr int THREADS = 256;  // 8 warps per block
// A dependent mma.sync waits for the previous result (tens of cycles); with 8
// independent accumulators a warp always has an mma whose inputs are ready.
constexpr int CHAINS = 8;
constexpr int TABLE_THREADS = 128;  // --latency-table: 4 warps per block, one on each scheduler of its SM
constexpr int ITERS = 16384;  // CHAINS mma per iteration: a few ms per run, long enough for events and clocks
constexpr double FLOP_PER_MMA = 2.0 * 16 * 8 * 16;

template <bool BF16>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    // volatile: the compiler may neither drop these nor sink them into the rarely taken store below.
    if constexpr (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <bool BF16> __device__ uint32_t pack2(float x, float y);
template <> __device__ uint32_t pack2<false>(float x, float y)
{
    __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ uint32_t pack2<true>(float x, float y)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t *>(&h);
}

// write_out is 0 at run time, but the compiler cannot know it: the accumulators
// stay live, and the stores never cost memory traffic.
template <bool BF16, int CHAINS>
__global__ void __launch_bounds__(THREADS) mma_chains_kernel(int write_out, float *out)
{
    // Small distinct operands per lane: finite sums, and data that toggles like real inputs.
    const float x = (threadIdx.x % 32 + 1) * (1.0f / 64);
    uint32_t a[4], b[2];
    for (int i = 0; i < 4; i++) a[i] = pack2<BF16>(x, -x * (i + 1) * 0.5f);
    for (int i = 0; i < 2; i++) b[i] = pack2<BF16>(0.25f * x, x * (i + 1));
    float acc[CHAINS][4] = {};
#pragma unroll 4
    for (int it = 0; it < ITERS; it++) {
#pragma unroll
        for (int c = 0; c < CHAINS; c++) mma_m16n8k16<BF16>(acc[c], a, b);
    }
    if (write_out) {
        float sum = 0.0f;
        for (int c = 0; c < CHAINS; c++) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
        out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
    }
}

// TFLOP/s of the median launch of `blocks` blocks of `threads` threads.
template <bool BF16, int CHAINS> static double measure(int blocks, int threads)
{
    float *out_dev = NULL;
    CUDA_CHECK(cudaMalloc(&out_dev, sizeof(float) * blocks * threads));
    const double ms = probe_median_ms([&] { mma_chains_kernel<BF16, CHAINS><<<blocks, threads>>>(0, out_dev); });
    CUDA_CHECK(cudaFree(out_dev));
    const double flops = FLOP_PER_MMA * CHAINS * ITERS * (threads / 32) * (double)blocks;
    return flops / (ms * 1e-3) / 1e12;
}

// The ceiling: every SM holding as many 8-warp blocks as fit at once.
template <bool BF16> static double measure_ceiling(const cudaDeviceProp &prop, int *blocks_per_sm)
{
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, mma_chains_kernel<BF16, CHAINS>, THREADS, 0));
    return measure<BF16, CHAINS>(prop.multiProcessorCount * *blocks_per_sm, THREADS);
}

// One row of --latency-table: fp16, `warps` warps per scheduler, CHAINS_ chains per warp.
template <int CHAINS_> static void table_row(const cudaDeviceProp &prop, const char *date, FILE *csv, int warps)
{
    const double tflops = measure<false, CHAINS_>(prop.multiProcessorCount * warps, TABLE_THREADS);
    printf("  %d warp(s) per scheduler, %d chain(s) per warp: %6.1f TFLOP/s\n", warps, CHAINS_, tflops);
    if (csv) fprintf(csv, "mma_sync_w%d_c%d,%s,%s,fp16,%.1f\n", warps, CHAINS_, prop.name, date, tflops);
}

int main(int argc, char **argv)
{
    int latency_table = 0;
    const char *csv_path = probe_args(
        argc, argv, "usage: mma_ceiling [--csv FILE] [--latency-table]   mma.sync m16n8k16 fp16/bf16 -> fp32 peak TFLOP/s of GPU 0",
        "--latency-table", &latency_table);

    // bf16 mma.sync m16n8k16 needs sm_80.
    const cudaDeviceProp prop = probe_gpu("mma_ceiling", "an sm_80 or newer GPU",
                                          [](const cudaDeviceProp &p) { return p.major >= 8; });
    char date[16];
    probe_date(date);
    FILE *csv = probe_csv_open(csv_path, PROBE_TFLOPS_HEADER);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        int blocks_per_sm = 0;
        const double tflops = bf16 ? measure_ceiling<true>(prop, &blocks_per_sm) : measure_ceiling<false>(prop, &blocks_per_sm);
        const char *dtype = bf16 ? "bf16" : "fp16";
        printf("mma.sync m16n8k16 %s -> f32: %.1f TFLOP/s  (%s, %d SMs x %d warps, median of %d runs)\n", dtype,
               tflops, prop.name, prop.multiProcessorCount, blocks_per_sm * THREADS / 32, PROBE_RUNS);
        if (csv) fprintf(csv, "mma_sync_m16n8k16,%s,%s,%s,%.1f\n", prop.name, date, dtype, tflops);
    }
    if (latency_table) {
        puts("mma.sync m16n8k16 fp16 -> f32 with few warps and few independent mma (fp16):");
        for (int warps = 1; warps <= 4; warps++) {
            table_row<1>(prop, date, csv, warps);
            table_row<2>(prop, date, csv, warps);
            table_row<4>(prop, date, csv, warps);
            table_row<8>(prop, date, csv, warps);
        }
    }
    if (csv) fclose(csv);
    return 0;
}
