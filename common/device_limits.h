/* device_limits.h - what the GPU allows a kernel: the one place every launch decision of
 * every step reads its device numbers from (device_limits.c, linked into each step's
 * binary and shared library; steps include it with fa2.h and validate.h).
 *
 * By default the numbers are the GPU's own, read from the CUDA device attributes.
 * FA2_EMULATE=<preset> replaces them with one row of a table of published limits
 * (limits.c cites the source of each row), so an H100 takes every decision an
 * A10G, an RTX 4090 or a DGX Spark would take: which configuration, which tile,
 * how many stages, splits and blocks per SM, and what to refuse. What it cannot
 * change is the GPU itself: the kernels still run on the H100, at its speed. */
#ifndef FA2_DEVICE_LIMITS_H
#define FA2_DEVICE_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "fa2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *preset;          /* the emulated preset ("rtx4090"), or NULL: the GPU's own numbers */
    char name[128];              /* the GPU's name, or the GPU the preset describes */
    int cc_major, cc_minor;      /* compute capability */
    int sm_count;                /* streaming multiprocessors */
    int smem_per_block;          /* bytes of shared memory one block may opt in to */
    int smem_per_sm;             /* bytes of shared memory per SM, for all its resident blocks */
    int smem_reserved_per_block; /* bytes of that the system keeps for each resident block */
    int regs_per_sm;             /* 32-bit registers per SM */
    int threads_per_sm;          /* resident threads per SM */
    int blocks_per_sm;           /* resident blocks per SM */
} fa2_limits;

enum { FA2_LIMITS_OK = 0, FA2_LIMITS_NO_GPU = 1, FA2_LIMITS_BAD_PRESET = 2 };

/* Fills *l and returns FA2_LIMITS_OK; or FA2_LIMITS_NO_GPU (no CUDA GPU answers and
 * no preset is set) or FA2_LIMITS_BAD_PRESET (FA2_EMULATE names no preset, or one
 * whose blocks get more shared memory than this GPU's: the kernels run on this GPU,
 * which would refuse such launches), with one line saying so in why. Under a preset
 * no GPU is needed: the numbers come from the table alone. The GPU's own numbers are
 * read once per process. */
int fa2_limits_get(fa2_limits *l, char *why, size_t why_len);

/* Blocks of `threads` threads, `regs_per_thread` registers each and `smem_bytes`
 * of shared memory (dynamic and static) that can be resident on one SM at once,
 * by the occupancy rules of sm_80 and newer: registers are allocated per warp in
 * units of 256, shared memory per block with its reserved share added, and the
 * SM's thread and block limits apply. 0 when one block does not fit. This is the
 * arithmetic cudaOccupancyMaxActiveBlocksPerMultiprocessor does for the real
 * GPU; the GPU matrix checks that the two agree. */
int fa2_limits_blocks_per_sm(const fa2_limits *l, int threads, int regs_per_thread, int smem_bytes);

/* 1 if a block may request smem_bytes of shared memory on this GPU (or the
 * emulated one), or if no GPU answers (nothing can launch then, and the launch
 * says so); otherwise 0 and one line in why naming the bytes, `what` needs them
 * ("head_dim 128"), and the limit. A bad FA2_EMULATE is refused the same way. */
int fa2_limits_check_smem(int smem_bytes, const char *what, char *why, size_t why_len);

/* A grid's y and z stop at 65,535 blocks (x at 2^31 - 1). The steps put query tiles in
 * x and heads and batch in y and z, so the kernels read all three from block-index
 * registers (uniform, free to re-read); a call whose batch or heads pass 65,535 is cut
 * into launches that fit instead. fa2_for_each_grid_chunk calls launch(chunk, rows_before,
 * ctx) once per chunk -- once, with p itself, when batch and heads_q fit -- where chunk is
 * p with batch <= FA2_GRID_YZ_MAX and heads_q <= FA2_GRID_YZ_MAX (whole GQA groups), q, k,
 * v, o and lse moved to the chunk's first batch and head (paged K and V to the head alone,
 * seqlens_k and block_table to the batch), and rows_before the rows of
 * fa2.h's LSE order that come before the chunk's (its LSE and any per-row workspace start
 * there). Returns the first non-zero return of launch, else 0. */
#define FA2_GRID_YZ_MAX 65535
int fa2_for_each_grid_chunk(const fa2_params *p, int (*launch)(const fa2_params *chunk, int64_t rows_before, void *ctx),
                            void *ctx);

/* The presets' names, comma-separated, for messages and --help. */
const char *fa2_limits_preset_names(void);

/* How many presets there are, and the name of preset i (for the tests). */
int fa2_limits_preset_count(void);
const char *fa2_limits_preset_name(int i);

#ifdef __cplusplus
}
#endif
#endif
