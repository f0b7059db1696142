/* device_limits.c - the GPU's limits, from the CUDA device attributes or from a preset
 * (device_limits.h says what each number is for). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "device_limits.h"

/* Published limits. Per compute capability (shared memory per SM and per block,
 * registers, resident threads and blocks): the CUDA C++ Programming Guide, table
 * "Technical Specifications per Compute Capability", and NVIDIA's tuning guides for
 * Ampere (8.6: 100 KB per SM, 99 KB per block, 48 warps, 16 blocks), Ada (8.9: the
 * same with 24 blocks), Hopper (9.0: 228 KB per SM, 227 KB per block) and Blackwell
 * (12.x: 100 KB per SM, 99 KB per block, 48 warps). Every capability since 8.0 keeps
 * 1 KB of an SM's shared memory per resident block (cudaDevAttrReservedSharedMemoryPerBlock)
 * and has 64 K registers per SM. SM counts are the products' (NVIDIA's architecture
 * whitepapers and datasheets): each row names its source. */
#define KB 1024
typedef struct {
    const char *preset, *name, *source;
    int cc_major, cc_minor, sm_count, smem_per_block, smem_per_sm, threads_per_sm, blocks_per_sm;
} preset_row;

static const preset_row presets[] = {
    {"a100", "NVIDIA A100 (emulated)", "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs",
     8, 0, 108, 163 * KB, 164 * KB, 2048, 32},
    {"a10g", "NVIDIA A10G (emulated)", "AWS EC2 G5 (GA102): deviceQuery reports 80 SMs",
     8, 6, 80, 99 * KB, 100 * KB, 1536, 16},
    {"rtx3090", "NVIDIA GeForce RTX 3090 (emulated)", "NVIDIA Ampere GA102 GPU Architecture whitepaper: 82 SMs",
     8, 6, 82, 99 * KB, 100 * KB, 1536, 16},
    {"rtx4090", "NVIDIA GeForce RTX 4090 (emulated)", "NVIDIA Ada GPU Architecture whitepaper: 128 SMs",
     8, 9, 128, 99 * KB, 100 * KB, 1536, 24},
    {"l4", "NVIDIA L4 (emulated)", "NVIDIA L4 datasheet (AD104, 7,424 CUDA cores): 58 SMs",
     8, 9, 58, 99 * KB, 100 * KB, 1536, 24},
    {"l40s", "NVIDIA L40S (emulated)", "NVIDIA L40S datasheet (AD102, 18,176 CUDA cores): 142 SMs",
     8, 9, 142, 99 * KB, 100 * KB, 1536, 24},
    {"rtx5090", "NVIDIA GeForce RTX 5090 (emulated)", "NVIDIA RTX Blackwell GPU Architecture whitepaper (GB202, 21,760 CUDA cores): 170 SMs",
     12, 0, 170, 99 * KB, 100 * KB, 1536, 32},
    {"gb10", "NVIDIA GB10, DGX Spark (emulated)", "NVIDIA DGX Spark datasheet (GB10, 6,144 CUDA cores): 48 SMs",
     12, 1, 48, 99 * KB, 100 * KB, 1536, 32},
    {"h100", "NVIDIA H100 SXM (emulated)", "NVIDIA H100 Tensor Core GPU Architecture whitepaper (SXM5): 132 SMs",
     9, 0, 132, 227 * KB, 228 * KB, 2048, 32},
    {"h200", "NVIDIA H200 SXM (emulated)", "NVIDIA H200 datasheet (the H100's GH100 with 141 GB of HBM3e): 132 SMs",
     9, 0, 132, 227 * KB, 228 * KB, 2048, 32},
};
enum { PRESETS = sizeof presets / sizeof *presets };
enum { REGS_PER_SM = 64 * KB, RESERVED_PER_BLOCK = 1 * KB };

int fa2_limits_preset_count(void) { return PRESETS; }
const char *fa2_limits_preset_name(int i) { return i >= 0 && i < PRESETS ? presets[i].preset : NULL; }

const char *fa2_limits_preset_names(void)
{
    static char names[256];
    if (!names[0])
        for (int i = 0; i < PRESETS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", presets[i].preset);
    return names;
}

/* The GPU's own limits, asked once per process (the first caller's answer stays). */
static int read_gpu(fa2_limits *l, char *why, size_t why_len)
{
    static fa2_limits gpu;
    static int state = -1; /* -1 not asked yet, else what fa2_limits_get returns */
    static char gpu_why[160];
    if (state < 0) {
        int device = 0, count = 0;
        struct cudaDeviceProp prop;
        cudaError_t err = cudaGetDeviceCount(&count);
        if (err == cudaSuccess && count == 0) err = cudaErrorNoDevice;
        if (err == cudaSuccess) err = cudaGetDevice(&device);
        if (err == cudaSuccess) err = cudaGetDeviceProperties(&prop, device);
        if (err != cudaSuccess) {
            cudaGetLastError(); /* leave no error behind for the caller */
            snprintf(gpu_why, sizeof gpu_why, "no CUDA GPU answers (%s) and FA2_EMULATE is not set", cudaGetErrorString(err));
            state = FA2_LIMITS_NO_GPU;
        } else {
            memset(&gpu, 0, sizeof gpu);
            snprintf(gpu.name, sizeof gpu.name, "%.127s", prop.name);
            gpu.cc_major = prop.major, gpu.cc_minor = prop.minor;
            gpu.sm_count = prop.multiProcessorCount;
            gpu.smem_per_block = (int)prop.sharedMemPerBlockOptin;
            gpu.smem_per_sm = (int)prop.sharedMemPerMultiprocessor;
            gpu.smem_reserved_per_block = (int)prop.reservedSharedMemPerBlock;
            gpu.regs_per_sm = prop.regsPerMultiprocessor;
            gpu.threads_per_sm = prop.maxThreadsPerMultiProcessor;
            gpu.blocks_per_sm = prop.maxBlocksPerMultiProcessor;
            state = FA2_LIMITS_OK;
        }
    }
    if (state == FA2_LIMITS_OK) *l = gpu;
    else if (why) snprintf(why, why_len, "%s", gpu_why);
    return state;
}

int fa2_limits_get(fa2_limits *l, char *why, size_t why_len)
{
    const char *want = getenv("FA2_EMULATE");
    if (!want || !*want) return read_gpu(l, why, why_len);
    for (int i = 0; i < PRESETS; i++) {
        const preset_row *r = &presets[i];
        if (strcmp(want, r->preset) != 0) continue;
        memset(l, 0, sizeof *l);
        l->preset = r->preset;
        snprintf(l->name, sizeof l->name, "%s", r->name);
        l->cc_major = r->cc_major, l->cc_minor = r->cc_minor;
        l->sm_count = r->sm_count;
        l->smem_per_block = r->smem_per_block;
        l->smem_per_sm = r->smem_per_sm;
        l->smem_reserved_per_block = RESERVED_PER_BLOCK;
        l->regs_per_sm = REGS_PER_SM;
        l->threads_per_sm = r->threads_per_sm;
        l->blocks_per_sm = r->blocks_per_sm;
        /* The kernels still run on this GPU: a preset whose blocks may have more shared
         * memory than this GPU's would choose launches this GPU refuses. */
        fa2_limits gpu;
        if (read_gpu(&gpu, NULL, 0) == FA2_LIMITS_OK && l->smem_per_block > gpu.smem_per_block) {
            if (why) snprintf(why, why_len, "FA2_EMULATE '%s' (allowed here: a preset whose blocks get no more shared memory than "
                              "this GPU's %d bytes; %s's get %d)", r->preset, gpu.smem_per_block, r->preset, r->smem_per_block);
            return FA2_LIMITS_BAD_PRESET;
        }
        return FA2_LIMITS_OK;
    }
    if (why) snprintf(why, why_len, "FA2_EMULATE '%.40s' (allowed: %s, or unset for this GPU's own limits)", want, fa2_limits_preset_names());
    return FA2_LIMITS_BAD_PRESET;
}

int fa2_limits_blocks_per_sm(const fa2_limits *l, int threads, int regs_per_thread, int smem_bytes)
{
    if (threads <= 0 || smem_bytes > l->smem_per_block || threads > l->threads_per_sm) return 0;
    const int warps = (threads + 31) / 32;
    int n = l->blocks_per_sm;
    const int by_threads = l->threads_per_sm / (warps * 32);
    n = by_threads < n ? by_threads : n;
    /* Registers: a warp takes regs_per_thread x 32 of them, rounded up to 256, from
     * one of the SM's four sub-partitions (one per scheduler), each a quarter of the file. */
    const int regs_per_warp = (regs_per_thread * 32 + 255) / 256 * 256;
    if (regs_per_warp > 0) {
        const int by_regs = l->regs_per_sm / 4 / regs_per_warp * 4 / warps;
        n = by_regs < n ? by_regs : n;
    }
    /* Shared memory: the block's bytes and the system's reserved share, in units of 128. */
    const int smem_per_resident_block = (smem_bytes + l->smem_reserved_per_block + 127) / 128 * 128;
    const int by_smem = l->smem_per_sm / smem_per_resident_block;
    n = by_smem < n ? by_smem : n;
    return n;
}

int fa2_limits_check_smem(int smem_bytes, const char *what, char *why, size_t why_len)
{
    fa2_limits l;
    char reason[256];
    const int rc = fa2_limits_get(&l, reason, sizeof reason);
    if (rc == FA2_LIMITS_NO_GPU) return 1; /* nothing can launch: the caller's launch says so */
    if (rc == FA2_LIMITS_BAD_PRESET) {
        if (why) snprintf(why, why_len, "%s", reason);
        return 0;
    }
    if (smem_bytes > l.smem_per_block) {
        if (why) snprintf(why, why_len, "shared memory %d bytes per block for %s (allowed: at most %d, the opt-in limit of %s%s%s)",
                          smem_bytes, what, l.smem_per_block, l.name, l.preset ? ", FA2_EMULATE=" : "", l.preset ? l.preset : "");
        return 0;
    }
    return 1;
}

int fa2_for_each_grid_chunk(const fa2_params *p, int (*launch)(const fa2_params *chunk, int64_t rows_before, void *ctx),
                            void *ctx)
{
    if (p->batch <= FA2_GRID_YZ_MAX && p->heads_q <= FA2_GRID_YZ_MAX) return launch(p, 0, ctx);
    const int group = p->heads_q / p->heads_kv;
    const int heads_step = FA2_GRID_YZ_MAX / group * group; /* whole GQA groups */
    /* Heads that fit: batches 65,535 at a time. Heads that do not: one batch at a time,
     * so the chunk's LSE rows ([batch][heads_q][seqlen_q]) stay one contiguous run. */
    const int batch_step = p->heads_q <= FA2_GRID_YZ_MAX ? FA2_GRID_YZ_MAX : 1;
    for (int b0 = 0; b0 < p->batch; b0 += batch_step)
        for (int h0 = 0; h0 < p->heads_q; h0 += heads_step) {
            fa2_params c = *p;
            c.batch = p->batch - b0 < batch_step ? p->batch - b0 : batch_step;
            c.heads_q = p->heads_q - h0 < heads_step ? p->heads_q - h0 : heads_step;
            c.heads_kv = c.heads_q / group;
            const int h0_kv = h0 / group;
            c.q = (const uint16_t *)p->q + b0 * p->q_batch_stride + h0 * p->q_head_stride;
            /* Paged K and V are pools that every sequence indexes through its own row of
             * the block table: the chunk moves the table and the lengths, not the pools. */
            const int64_t kv_b0 = p->block_table ? 0 : b0;
            c.k = (const uint16_t *)p->k + kv_b0 * p->k_batch_stride + h0_kv * p->k_head_stride;
            c.v = (const uint16_t *)p->v + kv_b0 * p->v_batch_stride + h0_kv * p->v_head_stride;
            if (p->seqlens_k) c.seqlens_k = p->seqlens_k + b0;
            if (p->block_table) c.block_table = p->block_table + b0 * p->block_table_batch_stride;
            c.o = (uint16_t *)p->o + b0 * p->o_batch_stride + h0 * p->o_head_stride;
            const int64_t rows_before = ((int64_t)b0 * p->heads_q + h0) * p->seqlen_q;
            if (p->lse) c.lse = p->lse + rows_before;
            const int rc = launch(&c, rows_before, ctx);
            if (rc) return rc;
        }
    return 0;
}
