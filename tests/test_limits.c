/* test_limits.c - every step fits every GPU it may run on: under each FA2_EMULATE
 * preset (common/device_limits.c), for each head dim and dtype and for shapes that reach
 * each tile configuration (grids of at most one block per SM and of more than two,
 * the harness's default shape, decode), the configuration the step chooses must
 * ask for no more shared memory per block than the preset allows, and every
 * configuration a step has must be chosen somewhere. A step built for one GPU
 * family may refuse the others' presets, in one line naming the compute capability.
 * Also checks the occupancy arithmetic (fa2_limits_blocks_per_sm) on cases worked
 * by hand. Runs without a GPU: under a preset no decision asks the GPU. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/device_limits.h"
#include "test_util.h"

static fa2_params shape(int batch, int hq, int hkv, int nq, int nk, int d, int causal, fa2_dtype t)
{
    fa2_params p = {0};
    p.batch = batch, p.heads_q = hq, p.heads_kv = hkv, p.seqlen_q = nq, p.seqlen_k = nk, p.head_dim = d;
    p.causal = causal, p.dtype = t, p.softmax_scale = 0.125f;
    fa2_set_dense_strides(&p);
    /* Addresses 2^40 bytes apart, 256-byte aligned, never dereferenced: only fa2_supports,
     * fa2_config and fa2_workspace_size run, and they read the params alone. */
    const uintptr_t apart = (uintptr_t)1 << 40;
    p.q = (const void *)(1 * apart), p.k = (const void *)(2 * apart), p.v = (const void *)(3 * apart);
    p.o = (void *)(4 * apart);
    return p;
}

/* Occupancy worked by hand: 64 K registers in four sub-partitions, warps take
 * registers in units of 256, blocks shared memory plus 1 KB in units of 128. */
static void arithmetic(void)
{
    setenv("FA2_EMULATE", "h100", 1);
    fa2_limits h100;
    fa2_limits_get(&h100, NULL, 0);
    setenv("FA2_EMULATE", "rtx4090", 1);
    fa2_limits ada;
    fa2_limits_get(&ada, NULL, 0);
    const struct { const fa2_limits *l; int threads, regs, smem, want; const char *why; } cases[] = {
        {&h100, 128, 255, 98304, 2, "4 warps of 255 registers, 96 KB: 2 by registers (8 K a warp) and by shared memory (2 x 97 KB of 228)"},
        {&h100, 128, 128, 49152, 4, "4 warps of 128 registers, 48 KB: 4 by registers (4 K a warp) and by shared memory"},
        {&h100, 256, 168, 81920, 1, "8 warps of 168 registers: 5,376 a warp, 3 warps per sub-partition, 12 per SM: 1 block"},
        {&h100, 128, 32, 1024, 16, "4 warps of 32 registers, 1 KB: 16 by threads (2048 per SM)"},
        {&h100, 128, 96, 133120, 1, "130 KB: 1 by shared memory"},
        {&ada, 128, 128, 98304, 1, "99 KB parts: 96 KB + 1 KB reserved leaves no room for a second in 100 KB"},
        {&ada, 128, 128, 49152, 2, "99 KB parts: 48 KB + 1 KB twice in 100 KB"},
        {&ada, 128, 32, 1024, 12, "1536 threads per SM: 12 blocks of 128"},
        {&ada, 256, 128, 163840, 0, "160 KB is over a 99 KB block's opt-in: none"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int got = fa2_limits_blocks_per_sm(cases[i].l, cases[i].threads, cases[i].regs, cases[i].smem);
        char why[64];
        snprintf(why, sizeof why, "got %d, want %d", got, cases[i].want);
        report(got == cases[i].want, why, "occupancy arithmetic: %s", cases[i].why);
    }
    setenv("FA2_EMULATE", "no-such-gpu", 1);
    fa2_limits bad;
    char why[256];
    const int rc = fa2_limits_get(&bad, why, sizeof why);
    report(rc == FA2_LIMITS_BAD_PRESET && strstr(why, "FA2_EMULATE") && strstr(why, "rtx4090"), why,
           "a preset that does not exist is refused in one line naming the allowed ones");
}

int main(int argc, char **argv)
{
    /* The table alone answers: a GPU here would refuse the presets larger than itself. */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    arithmetic();
    for (int a = 1; a < argc; a++) {
        step_abi s;
        if (!step_abi_load(&s, argv[a])) {
            report(0, dlerror(), "load the fa2 ABI from %s", argv[a]);
            continue;
        }
        unsigned chosen = 0;
        int checked = 0, failed = 0, refused = 0;
        char detail[512] = "";
        for (int i = 0; i < fa2_limits_preset_count(); i++) {
            const char *preset = fa2_limits_preset_name(i);
            setenv("FA2_EMULATE", preset, 1);
            fa2_limits l;
            fa2_limits_get(&l, NULL, 0);
            const int heads = 6 * (l.sm_count / 12 > 1 ? l.sm_count / 12 : 1); /* as tests/gpu_matrix.c sizes them */
            for (int d = 64; d <= 128; d += 64)
                for (int t = 0; t < 2; t++) {
                    const fa2_params ps[] = {
                        shape(1, heads, heads / 3, 256, 1000, d, t, (fa2_dtype)t), shape(2, heads, heads / 3, 300, 1000, d, t, (fa2_dtype)t),
                        shape(2, 8, 8, 1024, 1024, d, 0, (fa2_dtype)t),           shape(4, 16, 16, 4096, 4096, d, 1, (fa2_dtype)t),
                        shape(1, 32, 8, 1, 32768, d, 0, (fa2_dtype)t),            shape(8, 32, 8, 1, 8192, d, 0, (fa2_dtype)t),
                        shape(16, 16, 16, 1024, 1024, d, 0, (fa2_dtype)t)};
                    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
                        fa2_params p = ps[k];
                        p.workspace_bytes = s.workspace_size(&p);
                        p.workspace = p.workspace_bytes ? (void *)((uintptr_t)5 << 40) : NULL;
                        char what[256];
                        const int cfg = s.config(&p, what, sizeof what);
                        if (cfg < 0) {
                            if (strstr(what, "compute capability")) { refused++; continue; }
                            failed++;
                            snprintf(detail, sizeof detail, "%s d%d B%d H%d Nq%d: no configuration: %s", preset, d, p.batch, p.heads_q, p.seqlen_q, what);
                            continue;
                        }
                        const int smem = s.config_smem(&p, cfg);
                        checked++;
                        chosen |= 1u << cfg;
                        if (smem < 0 || smem > l.smem_per_block) {
                            failed++;
                            snprintf(detail, sizeof detail, "%s d%d B%d H%d Nq%d: configuration %d (%s) asks for %d bytes, the preset allows %d",
                                     preset, d, p.batch, p.heads_q, p.seqlen_q, cfg, what, smem, l.smem_per_block);
                        }
                    }
                }
        }
        unsetenv("FA2_EMULATE");
        report(failed == 0 && checked > 0, detail, "%s: the configuration chosen fits the preset's shared memory per block "
               "(%d choices over %d presets, head dims 64 and 128, fp16 and bf16; %d refused for the compute capability)",
               s.name(), checked, fa2_limits_preset_count(), refused);
        const unsigned all = (1u << s.config_count()) - 1u;
        snprintf(detail, sizeof detail, "never chosen: mask 0x%x", all & ~chosen);
        report((chosen & all) == all, detail, "%s: each of its %d configurations is chosen under some preset", s.name(), s.config_count());
    }
    return test_failures ? 1 : 0;
}
