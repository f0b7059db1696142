/* gpu_matrix.c - the GPU test matrix. Loads each step's shared library given on
 * the command line (they all export the same fa2.h ABI), and for every case
 * checks every step against one fp64 reference, every row:
 *   seqlens 1, 17, 64, 127, 1000, 1025 (Nq = Nk), six Nq != Nk pairs both ways,
 *   causal on/off, heads_q = heads_kv and = 4 x heads_kv, d 64/128, fp16/bf16,
 *   plus Q, K, V read as strided views of one packed QKV tensor, and large grids
 *   (B4 H16/4, hundreds of blocks: a step may pick another tile configuration when
 *   the grid is larger than the GPU) checked on a spread sample of rows.
 * O and LSE are poisoned with NaN before each step runs.
 * Without a usable GPU it prints one SKIP line per step and exits 0. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/harness.h"
#include "test_util.h"

typedef struct {
    void *handle;
    const char *path;
    int (*forward)(const fa2_params *, void *);
    int (*supports)(const fa2_params *, char *, size_t);
    const char *(*name)(void);
} step_lib;

typedef struct { int nq, nk, causal, gqa, d, packed, large; fa2_dtype t; } test_case;

static const int seq_pairs[][2] = {{1, 1},     {17, 17},  {64, 64},   {127, 127}, {1000, 1000}, {1025, 1025},
                                   {17, 64},   {64, 17},  {127, 1000}, {1000, 127}, {1, 1025},   {1025, 1}};

static int load(step_lib *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!s->handle) return 0;
    *(void **)&s->forward = dlsym(s->handle, "fa2_forward");
    *(void **)&s->supports = dlsym(s->handle, "fa2_supports");
    *(void **)&s->name = dlsym(s->handle, "fa2_name");
    return s->forward && s->supports && s->name;
}

/* Q, K, V as views of one [batch, seqlen, 3, heads, d] tensor (heads_q = heads_kv, Nq = Nk). */
static void make_packed(fa2_params *run, const fa2_problem *pr)
{
    const fa2_params *p = &pr->p;
    size_t row = (size_t)p->heads_q * p->head_dim, rows = (size_t)p->batch * p->seqlen_q;
    uint16_t *host = malloc(rows * 3 * row * 2);
    for (size_t r = 0; r < rows; r++) {
        memcpy(host + (3 * r + 0) * row, pr->q + r * row, row * 2);
        memcpy(host + (3 * r + 1) * row, pr->k + r * row, row * 2);
        memcpy(host + (3 * r + 2) * row, pr->v + r * row, row * 2);
    }
    fa2_device_free((void *)run->q);
    fa2_device_free((void *)run->k);
    fa2_device_free((void *)run->v);
    uint16_t *dev = fa2_device_alloc(rows * 3 * row * 2);
    fa2_device_upload(dev, host, rows * 3 * row * 2);
    free(host);
    /* one allocation behind three views: run->q owns it, k and v point inside */
    run->q = dev;
    run->k = dev + row;
    run->v = dev + 2 * row;
    run->q_row_stride = run->k_row_stride = run->v_row_stride = (int64_t)(3 * row);
    run->q_batch_stride = run->k_batch_stride = run->v_batch_stride = (int64_t)(3 * row) * p->seqlen_q;
}

static void run_case(step_lib *steps, int nsteps, test_case c)
{
    fa2_params p = {0};
    p.batch = c.large ? 4 : 2, p.heads_q = c.large ? 16 : 4, p.seqlen_q = c.nq, p.seqlen_k = c.nk;
    p.heads_kv = c.gqa ? p.heads_q / 4 : p.heads_q;
    p.head_dim = c.d, p.causal = c.causal, p.dtype = c.t, p.softmax_scale = 1.0f / sqrtf((float)c.d);
    fa2_problem pr;
    fa2_problem_make(&pr, &p, 1000 + c.nq * 7 + c.nk, 1.0f);
    fa2_row_set rs;
    if (c.large) fa2_rows_sample(&rs, &pr.p);
    else fa2_rows_all(&rs, &pr.p);
    double *o_ref = malloc(sizeof(double) * (size_t)rs.n * c.d), *lse_ref = malloc(sizeof(double) * rs.n);
    fa2_reference_rows(&pr, &rs, o_ref, lse_ref);

    fa2_params run;
    fa2_buffers_make(&run, &pr, 1);
    if (c.packed) make_packed(&run, &pr);
    uint16_t *o = malloc(fa2_numel_q(&p) * 2);
    float *lse = malloc(fa2_numel_lse(&p) * 4);
    char name[128], why[256];
    snprintf(name, sizeof name, "B%d H%d/%d Nq%d Nk%d d%d %s %s%s", p.batch, p.heads_q, p.heads_kv, c.nq, c.nk, c.d,
             c.causal ? "causal" : "non-causal", fa2_dtype_name(c.t), c.packed ? " packed-qkv" : "");
    for (int s = 0; s < nsteps; s++) {
        fa2_buffers_poison(&run, 1);
        if (!steps[s].supports(&run, why, sizeof why)) {
            report(0, why, "%s %s (refused)", steps[s].name(), name);
            continue;
        }
        int rc = steps[s].forward(&run, NULL);
        fa2_buffers_fetch(&run, 1, o, lse);
        fa2_check_result r = fa2_check(&p, &rs, o, lse, o_ref, lse_ref);
        snprintf(why, sizeof why, "rc %d rel_l2 %.2e max_abs %.2e lse %.2e nonfinite %ld", rc, r.rel_l2, r.max_abs,
                 r.lse_max, r.nonfinite);
        report(rc == 0 && r.pass, why, "%s %s", steps[s].name(), name);
    }
    if (c.packed) { /* k and v point into q's allocation */
        run.k = run.v = NULL;
        fa2_device_free((void *)run.q);
        fa2_device_free(run.o);
        fa2_device_free(run.lse);
    } else {
        fa2_buffers_free(&run, 1);
    }
    free(o), free(lse), free(o_ref), free(lse_ref);
    fa2_rows_free(&rs);
    fa2_problem_free(&pr);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_matrix build/stepNN/libfa2.so ...\n");
        return 2;
    }
    int nsteps = argc - 1;
    step_lib *steps = calloc((size_t)nsteps, sizeof *steps);
    for (int s = 0; s < nsteps; s++)
        if (!load(&steps[s], argv[s + 1])) {
            fprintf(stderr, "error: cannot load the fa2 ABI from %s: %s\n", argv[s + 1], dlerror());
            return 1;
        }
    fa2_device_info dev;
    if (fa2_device_open(&dev, "the GPU matrix")) {
        for (int s = 0; s < nsteps; s++) printf("SKIP %s GPU matrix: no usable GPU\n", steps[s].name());
        return 0;
    }
    printf("# GPU matrix on %s (sm_%d%d, %d SMs)\n", dev.name, dev.sm_major, dev.sm_minor, dev.sm_count);
    for (size_t i = 0; i < sizeof seq_pairs / sizeof *seq_pairs; i++)
        for (int causal = 0; causal < 2; causal++)
            for (int gqa = 0; gqa < 2; gqa++)
                for (int d = 64; d <= 128; d += 64)
                    for (int t = 0; t < 2; t++) {
                        test_case c = {seq_pairs[i][0], seq_pairs[i][1], causal, gqa, d, 0, 0, (fa2_dtype)t};
                        run_case(steps, nsteps, c);
                    }
    for (int n = 127; n <= 1000; n += 873)
        for (int d = 64; d <= 128; d += 64)
            for (int t = 0; t < 2; t++) {
                test_case c = {n, n, 1, 0, d, 1, 0, (fa2_dtype)t};
                run_case(steps, nsteps, c);
            }
    static const int large_pairs[][2] = {{1000, 1000}, {1025, 127}};
    for (int i = 0; i < 2; i++)
        for (int causal = 0; causal < 2; causal++)
            for (int d = 64; d <= 128; d += 64)
                for (int t = 0; t < 2; t++) {
                    test_case c = {large_pairs[i][0], large_pairs[i][1], causal, 1, d, 0, 1, (fa2_dtype)t};
                    run_case(steps, nsteps, c);
                }
    return test_failures ? 1 : 0;
}
