/* main.c - the harness binary: one step, one shape. Checks the step against the
 * fp64 reference (output and LSE poisoned with NaN first), then times it and
 * prints one line (and one CSV row with --csv). With --backward the same for the
 * backward (dQ, dK, dV poisoned first), on a second line and row. Exit codes:
 * exit_codes.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "device_limits.h"

/* The columns every compare CSV has (reference/sdpa.py writes the same); key_change is the
 * step's fa2_key_change(), quoted: it may hold commas. The KV cache's two come last (CSVs
 * written before them end at key_change): page_size (--page-size, 0: contiguous) and
 * seqlens_k (--seqlens-k's key counts joined by ';', empty: every sequence has seqlen_k). */
#define CSV_HEADER \
    "step,device,date,dtype,batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal," \
    "ms_median,ms_min,ms_max,tflops,rel_l2,max_abs,lse_err,status,key_change,page_size,seqlens_k\n"

/* One row; step is fa2_name(), or "<name>_backward" for the backward's row (whose
 * rel_l2 and max_abs are the largest of dQ's, dK's and dV's, and lse_err nan). */
static void write_csv(FILE *f, const char *step, const fa2_params *p, int page_size, const char *device, fa2_stats t,
                      double tflops, int checked, double rel_l2, double max_abs, double lse_err, const char *status)
{
    char date[16];
    fa2_today(date, sizeof date);
    if (ftell(f) == 0) fputs(CSV_HEADER, f);
    fprintf(f, "%s,%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%.5f,%.5f,%.5f,%.2f,%.3e,%.3e,%.3e,%s,\"", step, device, date,
            fa2_dtype_name(p->dtype), p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim,
            p->causal, t.median, t.min, t.max, tflops, checked ? rel_l2 : NAN, checked ? max_abs : NAN,
            checked ? lse_err : NAN, status);
    for (const char *k = fa2_key_change(); *k; k++) {
        if (*k == '"') fputc('"', f); /* a quote inside a quoted CSV field is doubled */
        fputc(*k, f);
    }
    fprintf(f, "\",%d,", page_size);
    for (int b = 0; p->seqlens_k && b < p->batch; b++) fprintf(f, "%s%d", b ? ";" : "", (int)p->seqlens_k[b]);
    fputc('\n', f);
}

/* Distinct, aligned stand-ins for q, k, v, o, lse, the KV cache's arrays (where p has
 * lengths or a page layout) and then the workspace, laid out
 * one after the other as the buffers will be, so the step can answer before
 * anything is allocated (it reads no memory through them). Returns the first
 * address past them. */
static uintptr_t stand_in_pointers(fa2_params *p)
{
    uintptr_t at = 4096;
    const size_t bytes[7] = {fa2_numel_q(p) * 2, fa2_numel_kv_stored(p) * 2, fa2_numel_kv_stored(p) * 2,
                             fa2_numel_q(p) * 2, fa2_numel_lse(p) * sizeof(float), sizeof(int32_t) * (size_t)p->batch,
                             sizeof(int32_t) * (size_t)p->batch * (size_t)p->block_table_batch_stride};
    void *ptrs[7];
    for (int i = 0; i < 7; i++) {
        ptrs[i] = (void *)at;
        at += (bytes[i] + 4095) / 4096 * 4096;
    }
    p->q = ptrs[0], p->k = ptrs[1], p->v = ptrs[2], p->o = ptrs[3], p->lse = ptrs[4];
    if (p->seqlens_k) p->seqlens_k = ptrs[5];
    if (p->page_size) p->block_table = ptrs[6];
    p->workspace_bytes = fa2_workspace_size(p); /* asked with the tensors set, as the ABI says */
    p->workspace = p->workspace_bytes ? (void *)at : NULL;
    return at + (p->workspace_bytes + 4095) / 4096 * 4096;
}

/* The same for the backward: the forward's stand-ins, then dout, dq, dk, dv from
 * `at` on and after them the backward's workspace (apart from the forward's, as
 * main allocates it), sized by the step's fa2_backward_workspace_size. */
static void bwd_stand_in_pointers(fa2_bwd_params *bp, const fa2_params *fwd, uintptr_t at)
{
    memset(bp, 0, sizeof *bp);
    bp->fwd = *fwd;
    const size_t bytes[4] = {fa2_numel_q(fwd) * 2, fa2_numel_q(fwd) * 2, fa2_numel_kv(fwd) * 2, fa2_numel_kv(fwd) * 2};
    void *ptrs[4];
    for (int i = 0; i < 4; i++) {
        ptrs[i] = (void *)at;
        at += (bytes[i] + 4095) / 4096 * 4096;
    }
    bp->dout = ptrs[0], bp->dq = ptrs[1], bp->dk = ptrs[2], bp->dv = ptrs[3];
    fa2_set_dense_bwd_strides(bp);
    bp->fwd.workspace = NULL;
    bp->fwd.workspace_bytes = 0;
    bp->fwd.workspace_bytes = fa2_backward_workspace_size(bp); /* asked with the tensors set */
    bp->fwd.workspace = bp->fwd.workspace_bytes ? (void *)at : NULL;
}

/* --check sample checks the backward whole while its fp64 reference stays within this
 * many multiply-adds (fa2_bwd_reference_macs; it does about nine per count: seconds on
 * a few cores), and says UNCHECKED beyond it rather than take minutes. */
#define FA2_BWD_SAMPLE_MACS 1073741824.0 /* 2^30 */

/* The host memory the run needs (Q, K, V; the host copies of O and LSE; on the
 * CPU also the step's own O and LSE; with the backward, dO, the host copies of dQ,
 * dK and dV, on the CPU the step's own and its workspace, and the fp64 reference
 * where it is checked) against the machine's: a shape that cannot fit is refused in
 * one line before any of it is allocated. */
static void check_host_memory(const fa2_params *p, int on_gpu, int backward, int bwd_checked, size_t bwd_workspace)
{
    const double nq = (double)fa2_numel_q(p), nkv = (double)fa2_numel_kv(p);
    const double inputs = (nq + 2 * nkv) * 2, outputs = nq * 2 + fa2_numel_lse(p) * 4.0;
    double need = inputs + outputs * (on_gpu ? 1 : 2);
    if (backward) {
        const double grads = (nq + 2 * nkv) * 2;
        need += nq * 2 + grads * (on_gpu ? 1 : 2) + (on_gpu ? 0 : (double)bwd_workspace);
        /* the reference: Q, K, V, O, dO and dQ, dK, dV in fp64, and three doubles a row */
        if (bwd_checked) need += 8 * (4 * nq + 4 * nkv) + 24.0 * fa2_numel_lse(p);
    }
    const double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    if (have > 0 && need > have) {
        fprintf(stderr, "error: out of host memory: the problem needs %.1f GB for Q, K, V, O and LSE%s, this machine has "
                "%.1f GB\n", need / 1e9,
                !backward ? "" : bwd_checked ? ", dO, dQ, dK, dV and the fp64 backward" : ", dO, dQ, dK and dV",
                have / 1e9);
        exit(FA2_EXIT_RUNTIME);
    }
}

static int launch_forward(const void *ctx) { return fa2_forward((const fa2_params *)ctx, NULL); }
static int launch_backward(const void *ctx) { return fa2_backward((const fa2_bwd_params *)ctx, NULL); }

/* `warmup` untimed calls of launch(ctx), then `iters` timed ones: CUDA events and an L2
 * flush on the GPU (fa2_time_gpu), the wall clock on the CPU. 0, or the launch's error. */
static int time_launches(int (*launch)(const void *), const void *ctx, int on_gpu, const fa2_device_info *dev,
                         int warmup, int iters, double *ms)
{
    if (on_gpu) return fa2_time_gpu(launch, ctx, dev, warmup, iters, ms);
    int rc = 0;
    for (int i = 0; i < warmup && !rc; i++) rc = launch(ctx);
    for (int i = 0; i < iters && !rc; i++) {
        double t0 = fa2_wall_ms();
        rc = launch(ctx);
        ms[i] = fa2_wall_ms() - t0;
    }
    return rc;
}

/* The shape, as both result lines start. */
static void print_shape(const fa2_params *p, int page_size, int pages_in_order)
{
    printf("%-20s %s B%d H%d/%d Nq%d Nk%d d%d %s", fa2_name(), fa2_dtype_name(p->dtype), p->batch, p->heads_q,
           p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim, p->causal ? "causal" : "non-causal");
    if (p->seqlens_k) printf(" (Nk per sequence)");
    if (page_size) printf(" (K, V in pages of %d%s)", page_size, pages_in_order ? ", in order" : "");
}

int main(int argc, char **argv)
{
    const int on_gpu = fa2_runs_on_gpu();
    fa2_options opt;
    fa2_parse_options(argc, argv, on_gpu, &opt);
    fa2_params p;
    fa2_params_from_options(&opt, &p);

    char why[256] = "";
    fa2_limits limits = {0};
    const int limits_rc = on_gpu ? fa2_limits_get(&limits, why, sizeof why) : FA2_LIMITS_OK;
    if (limits_rc == FA2_LIMITS_BAD_PRESET) {
        fprintf(stderr, "error: %s\n", why);
        return FA2_EXIT_USAGE;
    }
    fa2_params probe = p;
    if (opt.page_size) fa2_page_layout(&probe, opt.page_size); /* reads the lengths: host memory still */
    const uintptr_t past_probe = stand_in_pointers(&probe);
    if (!fa2_supports(&probe, why, sizeof why)) {
        fprintf(stderr, "error: step %s does not support these params: %s\n", fa2_name(), why);
        return FA2_EXIT_USAGE;
    }
    fa2_bwd_params bprobe;
    memset(&bprobe, 0, sizeof bprobe);
    if (opt.backward) { /* the backward's refusal too, before anything is allocated or a GPU opened */
        bwd_stand_in_pointers(&bprobe, &probe, past_probe);
        if (!fa2_backward_supports(&bprobe, why, sizeof why)) {
            fprintf(stderr, "error: step %s does not support these params: %s\n", fa2_name(), why);
            return FA2_EXIT_USAGE;
        }
    }
    const double bwd_macs = fa2_bwd_reference_macs(&p);
    const int bwd_checked =
        opt.backward && (opt.check == CHECK_FULL || (opt.check == CHECK_SAMPLE && bwd_macs <= FA2_BWD_SAMPLE_MACS));
    if (opt.plan) { /* the decision alone: under FA2_EMULATE it asks no GPU */
        char config[256];
        const int c = fa2_config(&probe, config, sizeof config);
        if (c < 0) {
            fprintf(stderr, "error: step %s: no configuration for these params: %s\n", fa2_name(), config);
            return limits_rc == FA2_LIMITS_NO_GPU ? FA2_EXIT_NO_DEVICE : FA2_EXIT_RUNTIME;
        }
        printf("%-20s %s B%d H%d/%d Nq%d Nk%d d%d %s%s%s | configuration %d: %s | %d bytes of shared memory per block\n",
               fa2_name(), fa2_dtype_name(p.dtype), p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim,
               p.causal ? "causal" : "non-causal", on_gpu ? " on " : "", on_gpu ? limits.name : "", c, config,
               fa2_config_smem(&probe, c));
        return 0;
    }
    check_host_memory(&p, on_gpu, opt.backward, bwd_checked, bprobe.fwd.workspace_bytes);

    fa2_device_info dev;
    memset(&dev, 0, sizeof dev);
    if (on_gpu) {
        char who[64];
        snprintf(who, sizeof who, "step %s", fa2_name());
        int rc = fa2_device_open(&dev, who);
        if (rc) return rc;
    } else {
        snprintf(dev.name, sizeof dev.name, "CPU");
    }
    char config[256];
    if (fa2_config(&probe, config, sizeof config) < 0) {
        fprintf(stderr, "error: step %s: no configuration for these params: %s\n", fa2_name(), config);
        return FA2_EXIT_RUNTIME;
    }

    fa2_problem pr;
    fa2_problem_make(&pr, &p, opt.seed, opt.input_scale);
    if (opt.page_size) fa2_problem_page(&pr, opt.page_size, opt.seed, opt.pages_in_order);
    uint16_t *o_host = fa2_xmalloc(fa2_numel_q(&p) * sizeof(uint16_t), "the host copy of O");
    float *lse_host = fa2_xmalloc(fa2_numel_lse(&p) * sizeof(float), "the host copy of LSE");

    fa2_params run;
    fa2_buffers_make(&run, &pr, on_gpu, probe.workspace_bytes);
    int rc = fa2_forward(&run, NULL);
    if (rc) {
        fprintf(stderr, "error: step %s: fa2_forward failed: %s\n", fa2_name(), fa2_last_error());
        return FA2_EXIT_RUNTIME;
    }
    fa2_buffers_fetch(&run, on_gpu, o_host, lse_host);

    /* The backward, once, on this forward's O and LSE (the O its check is given), before
     * the timing runs the forward again. */
    fa2_bwd_params bwd;
    uint16_t *dout_host = NULL, *dq_host = NULL, *dk_host = NULL, *dv_host = NULL;
    if (opt.backward) {
        dout_host = fa2_dout_make(&pr.p, opt.seed);
        dq_host = fa2_xmalloc(fa2_numel_q(&p) * sizeof(uint16_t), "the host copy of dQ");
        dk_host = fa2_xmalloc(fa2_numel_kv(&p) * sizeof(uint16_t), "the host copy of dK");
        dv_host = fa2_xmalloc(fa2_numel_kv(&p) * sizeof(uint16_t), "the host copy of dV");
        fa2_bwd_buffers_make(&bwd, &run, dout_host, on_gpu, bprobe.fwd.workspace_bytes);
        rc = fa2_backward(&bwd, NULL);
        if (rc) {
            if (rc == FA2_ERR_UNSUPPORTED) fa2_backward_supports(&bwd, why, sizeof why);
            fprintf(stderr, "error: step %s: fa2_backward failed: %s\n", fa2_name(),
                    rc == FA2_ERR_UNSUPPORTED ? why : fa2_last_error());
            return FA2_EXIT_RUNTIME;
        }
        fa2_bwd_buffers_fetch(&bwd, on_gpu, dq_host, dk_host, dv_host);
    }

    fa2_check_result chk = {0};
    int checked = opt.check != CHECK_OFF;
    if (checked) {
        chk = fa2_check_problem(&pr, opt.check, o_host, lse_host);
        /* every element of O and LSE, not only the checked rows, must have been written */
        chk.unwritten = fa2_count_unwritten(&pr.p, o_host, lse_host);
        chk.pass = chk.pass && chk.unwritten == 0;
    }

    double *ms = fa2_xmalloc(sizeof(double) * (size_t)opt.iters, "the launch times");
    rc = time_launches(launch_forward, &run, on_gpu, &dev, opt.warmup, opt.iters, ms);
    if (rc) {
        fprintf(stderr, "error: step %s: fa2_forward failed while timing: %s\n", fa2_name(), fa2_last_error());
        return FA2_EXIT_RUNTIME;
    }
    fa2_stats t = fa2_stats_of(ms, opt.iters);
    double tflops = fa2_flops(&p) / (t.median * 1e-3) / 1e12;
    const char *status = !checked ? "UNCHECKED" : (chk.pass ? "PASS" : "FAIL");

    print_shape(&p, opt.page_size, opt.pages_in_order);
    printf(" [%s] | %s", config, status);
    if (checked) {
        printf(" rel_l2 %.1e max_abs %.1e lse %.1e (%d rows)", chk.rel_l2, chk.max_abs, chk.lse_max, chk.rows_checked);
        if (chk.nonfinite || chk.special_missed || chk.unwritten)
            printf(" NON-FINITE %ld, NaN/-inf MISSED %ld, UNWRITTEN %ld", chk.nonfinite, chk.special_missed,
                   chk.unwritten);
    }
    printf(" | %.4f ms (min %.4f, max %.4f, %d launches) %.3g TFLOP/s | %s\n", t.median, t.min, t.max, opt.iters,
           tflops, dev.name);
    fflush(stdout);
    if (opt.csv_file)
        write_csv(opt.csv_file, fa2_name(), &p, opt.page_size, dev.name, t, tflops, checked, checked ? chk.rel_l2 : 0,
                  checked ? chk.max_abs : 0, checked ? chk.lse_max : 0, status);

    int bwd_failed = 0;
    if (opt.backward) {
        fa2_bwd_check_result bchk = {0};
        if (bwd_checked) bchk = fa2_check_backward(&pr, o_host, dout_host, dq_host, dk_host, dv_host);
        rc = time_launches(launch_backward, &bwd, on_gpu, &dev, opt.warmup, opt.iters, ms);
        if (rc) {
            fprintf(stderr, "error: step %s: fa2_backward failed while timing: %s\n", fa2_name(), fa2_last_error());
            return FA2_EXIT_RUNTIME;
        }
        const fa2_stats bt = fa2_stats_of(ms, opt.iters);
        /* FA2 and FA3 count the backward as 2.5 forwards (5 GEMMs of the forward's size
         * against 2: S = Q K^T again, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q) */
        const double btflops = 2.5 * fa2_flops(&p) / (bt.median * 1e-3) / 1e12;
        const char *bstatus = !bwd_checked ? "UNCHECKED" : (bchk.pass ? "PASS" : "FAIL");
        bwd_failed = bwd_checked && !bchk.pass;
        print_shape(&p, opt.page_size, opt.pages_in_order);
        printf(" backward | %s", bstatus);
        double rel_max = 0, abs_max = 0;
        if (bwd_checked) {
            for (int g = 0; g < 3; g++) rel_max = fmax(rel_max, bchk.rel_l2[g]), abs_max = fmax(abs_max, bchk.max_abs[g]);
            if (isnan(bchk.rel_l2[0]) || isnan(bchk.rel_l2[1]) || isnan(bchk.rel_l2[2])) rel_max = NAN;
            printf(" dq rel_l2 %.1e dk %.1e dv %.1e max_abs %.1e (allowed rel_l2 %.1e)", bchk.rel_l2[0], bchk.rel_l2[1],
                   bchk.rel_l2[2], abs_max, bchk.tol);
            if (bchk.nonfinite || bchk.special_missed || bchk.unwritten)
                printf(" NON-FINITE %ld, NaN MISSED %ld, UNWRITTEN %ld", bchk.nonfinite, bchk.special_missed,
                       bchk.unwritten);
        } else if (opt.check == CHECK_SAMPLE) {
            printf(" (its fp64 reference would take %.3g multiply-adds, over 2^30 = 1.07e+09: --check full checks it)",
                   bwd_macs);
        }
        printf(" | %.4f ms (min %.4f, max %.4f, %d launches) %.3g TFLOP/s | %s\n", bt.median, bt.min, bt.max, opt.iters,
               btflops, dev.name);
        if (opt.csv_file) {
            char step[96];
            snprintf(step, sizeof step, "%s_backward", fa2_name());
            write_csv(opt.csv_file, step, &p, opt.page_size, dev.name, bt, btflops, bwd_checked, rel_max, abs_max, NAN, bstatus);
        }
        fa2_bwd_buffers_free(&bwd, on_gpu);
        free(dout_host), free(dq_host), free(dk_host), free(dv_host);
    }
    if (opt.csv_file) fclose(opt.csv_file);

    free(ms);
    free(o_host);
    free(lse_host);
    fa2_buffers_free(&run, on_gpu);
    fa2_problem_free(&pr);
    free(opt.seqlens_k);
    return (checked && !chk.pass) || bwd_failed ? FA2_EXIT_CHECK : 0;
}
