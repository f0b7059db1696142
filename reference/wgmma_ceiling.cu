/* wgmma_ceiling - the measured peak of wgmma (warpgroup MMA, sm_90a) on this Hopper GPU.
 *
 * mma_ceiling measures what the warp-level mma.sync of steps 02-07 can reach; step 09
 * computes with wgmma, whose ceiling is higher. This probe gives each SM one block of
 * WARPGROUPS warpgroups; each issues wgmma.m64n256k16 back to back, A (64 x 64) and
 * B (256 x 64) from 128-byte swizzled shared memory filled with small non-zero values
 * (zeros would draw less power and could run faster than real data), with up to two
 * commit groups in flight so the tensor cores never wait for an issue.
 *
 * usage: wgmma_ceiling [--csv FILE]   prints fp16 and bf16 TFLOP/s; with --csv appends rows
 * probe,device,date,dtype,tflops (probe wgmma_m64n256k16). Exit 3 without a usable GPU or
 * on a GPU that is not compute capability 9.0 (one line on stderr).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>

#include <type_traits>

#include "probe.h"

// The 128 accumulator operands of m64n256k16 (fp32, one register each).
#define WGMMA_N256_LIST "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define WGMMA_N256_OPERANDS "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]), "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]), "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]), "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]), "+f"(acc[30]), "+f"(acc[31]), "+f"(acc[32]), "+f"(acc[33]), "+f"(acc[34]), "+f"(acc[35]), "+f"(acc[36]), "+f"(acc[37]), "+f"(acc[38]), "+f"(acc[39]), "+f"(acc[40]), "+f"(acc[41]), "+f"(acc[42]), "+f"(acc[43]), "+f"(acc[44]), "+f"(acc[45]), "+f"(acc[46]), "+f"(acc[47]), "+f"(acc[48]), "+f"(acc[49]), "+f"(acc[50]), "+f"(acc[51]), "+f"(acc[52]), "+f"(acc[53]), "+f"(acc[54]), "+f"(acc[55]), "+f"(acc[56]), "+f"(acc[57]), "+f"(acc[58]), "+f"(acc[59]), "+f"(acc[60]), "+f"(acc[61]), "+f"(acc[62]), "+f"(acc[63]), "+f"(acc[64]), "+f"(acc[65]), "+f"(acc[66]), "+f"(acc[67]), "+f"(acc[68]), "+f"(acc[69]), "+f"(acc[70]), "+f"(acc[71]), "+f"(acc[72]), "+f"(acc[73]), "+f"(acc[74]), "+f"(acc[75]), "+f"(acc[76]), "+f"(acc[77]), "+f"(acc[78]), "+f"(acc[79]), "+f"(acc[80]), "+f"(acc[81]), "+f"(acc[82]), "+f"(acc[83]), "+f"(acc[84]), "+f"(acc[85]), "+f"(acc[86]), "+f"(acc[87]), "+f"(acc[88]), "+f"(acc[89]), "+f"(acc[90]), "+f"(acc[91]), "+f"(acc[92]), "+f"(acc[93]), "+f"(acc[94]), "+f"(acc[95]), "+f"(acc[96]), "+f"(acc[97]), "+f"(acc[98]), "+f"(acc[99]), "+f"(acc[100]), "+f"(acc[101]), "+f"(acc[102]), "+f"(acc[103]), "+f"(acc[104]), "+f"(acc[105]), "+f"(acc[106]), "+f"(acc[107]), "+f"(acc[108]), "+f"(acc[109]), "+f"(acc[110]), "+f"(acc[111]), "+f"(acc[112]), "+f"(acc[113]), "+f"(acc[114]), "+f"(acc[115]), "+f"(acc[116]), "+f"(acc[117]), "+f"(acc[118]), "+f"(acc[119]), "+f"(acc[120]), "+f"(acc[121]), "+f"(acc[122]), "+f"(acc[123]), "+f"(acc[124]), "+f"(acc[125]), "+f"(acc[126]), "+f"(acc[127])

constexpr int WARPGROUPS = 2;                // two issuing warpgroups per SM: one waits, the other issues
constexpr int THREADS = WARPGROUPS * 128;
constexpr int N = 256;                       // the widest wgmma: the most flops per instruction issued
constexpr int K_STEPS = 4;                   // 4 x k16 = 64 columns = one 128-byte swizzled row
constexpr int A_BYTES = 64 * 128, B_BYTES = N * 128;
constexpr int ITERS = 4096;                  // K_STEPS wgmma per iteration: a few ms per launch
constexpr double FLOP_PER_WGMMA = 2.0 * 64 * N * 16;

// The wgmma shared-memory descriptor as step 09 builds it: K-major, 128-byte swizzle,
// 1024 bytes from one 8-row group to the next.
__device__ __forceinline__ uint64_t smem_desc(uint32_t smem_addr)
{
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | (uint64_t)(16 >> 4) << 16 | (uint64_t)(1024 >> 4) << 32 | 1ull << 62;
}

template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16(float (&acc)[N / 2], uint64_t a_desc, uint64_t b_desc)
{
    if constexpr (std::is_same<T, __half>::value)
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
                     " wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " WGMMA_N256_LIST ", %128, %129, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_N256_OPERANDS
                     : "l"(a_desc), "l"(b_desc), "r"(1));
    else
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
                     " wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WGMMA_N256_LIST ", %128, %129, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_N256_OPERANDS
                     : "l"(a_desc), "l"(b_desc), "r"(1));
}

// write_out is 0 at run time, but the compiler cannot know it: the accumulators
// stay live, and the stores never cost memory traffic.
template <typename T>
__global__ void __launch_bounds__(THREADS, 1) wgmma_kernel(int write_out, float *out)
{
    extern __shared__ uint8_t smem_raw[];
    // The 128-byte swizzle is anchored at 1024-byte boundaries.
    const uint32_t smem = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023) & ~1023u;
    T *tiles = reinterpret_cast<T *>(smem_raw + (smem - (uint32_t)__cvta_generic_to_shared(smem_raw)));
    for (int i = threadIdx.x; i < (A_BYTES + B_BYTES) / 2; i += THREADS)
        tiles[i] = T(((i * 37 + 11) % 61 - 30) * (1.0f / 64));  // small, non-zero, varied
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // ordinary stores, then tensor-core reads
    __syncthreads();

    float acc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) acc[i] = 0.0f;
    const uint64_t a_desc = smem_desc(smem), b_desc = smem_desc(smem + A_BYTES);
    for (int it = 0; it < ITERS; it++) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");  // the accumulators, as the last group left them
#pragma unroll
        for (int k = 0; k < K_STEPS; k++) wgmma_m64n256k16<T>(acc, a_desc + k * 2, b_desc + k * 2);  // +32 bytes
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (write_out) {
        float sum = 0.0f;
        for (int i = 0; i < N / 2; i++) sum += acc[i];
        out[blockIdx.x * THREADS + threadIdx.x] = sum;
    }
}

// TFLOP/s of the median launch, one block per SM.
template <typename T> static double measure(const cudaDeviceProp &prop)
{
    const int blocks = prop.multiProcessorCount, smem_bytes = A_BYTES + B_BYTES + 1024;
    float *out_dev = NULL;
    CUDA_CHECK(cudaMalloc(&out_dev, sizeof(float) * blocks * THREADS));
    CUDA_CHECK(cudaFuncSetAttribute(wgmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    const double ms = probe_median_ms([&] { wgmma_kernel<T><<<blocks, THREADS, smem_bytes>>>(0, out_dev); });
    CUDA_CHECK(cudaFree(out_dev));
    const double flops = FLOP_PER_WGMMA * K_STEPS * ITERS * WARPGROUPS * (double)blocks;
    return flops / (ms * 1e-3) / 1e12;
}

int main(int argc, char **argv)
{
    const char *csv_path = probe_args(
        argc, argv, "usage: wgmma_ceiling [--csv FILE]   wgmma m64n256k16 fp16/bf16 -> fp32 peak TFLOP/s of GPU 0 (Hopper only)",
        NULL, NULL);
    const cudaDeviceProp prop = probe_gpu("wgmma_ceiling", "compute capability 9.0 (wgmma exists only in sm_90a)",
                                          [](const cudaDeviceProp &p) { return p.major == 9 && p.minor == 0; });
    char date[16];
    probe_date(date);
    FILE *csv = probe_csv_open(csv_path, PROBE_TFLOPS_HEADER);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const double tflops = bf16 ? measure<__nv_bfloat16>(prop) : measure<__half>(prop);
        const char *dtype = bf16 ? "bf16" : "fp16";
        printf("wgmma m64n256k16 %s -> f32: %.1f TFLOP/s  (%s, %d SMs x %d warpgroups, median of %d runs)\n", dtype,
               tflops, prop.name, prop.multiProcessorCount, WARPGROUPS, PROBE_RUNS);
        if (csv) fprintf(csv, "wgmma_m64n256k16,%s,%s,%s,%.1f\n", prop.name, date, dtype, tflops);
    }
    if (csv) fclose(csv);
    return 0;
}
