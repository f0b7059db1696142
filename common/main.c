/* main.c - the harness binary: one step, one shape. Checks the step against the
 * fp64 reference (output and LSE poisoned with NaN first), then times it and
 * prints one line (and one CSV row with --csv). Exit codes: exit_codes.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "device_limits.h"

/* The columns every compare CSV has (reference/sdpa.py writes the same); key_change is the
 * step's fa2_key_change(), quoted: it may hold commas. */
#define CSV_HEADER \
    "step,device,date,dtype,batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal," \
    "ms_median,ms_min,ms_max,tflops,rel_l2,max_abs,lse_err,status,key_change\n"

static void write_csv(FILE *f, const fa2_params *p, const char *device, fa2_stats t, double tflops,
                      const fa2_check_result *c, const char *status)
{
    char date[16];
    fa2_today(date, sizeof date);
    if (ftell(f) == 0) fputs(CSV_HEADER, f);
    fprintf(f, "%s,%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%.5f,%.5f,%.5f,%.2f,%.3e,%.3e,%.3e,%s,\"", fa2_name(), device, date,
            fa2_dtype_name(p->dtype), p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim,
            p->causal, t.median, t.min, t.max, tflops, c ? c->rel_l2 : NAN, c ? c->max_abs : NAN,
            c ? c->lse_max : NAN, status);
    for (const char *k = fa2_key_change(); *k; k++) {
        if (*k == '"') fputc('"', f); /* a quote inside a quoted CSV field is doubled */
        fputc(*k, f);
    }
    fputs("\"\n", f);
}

/* Distinct, aligned stand-ins for q, k, v, o, lse and then the workspace, laid out
 * one after the other as the buffers will be, so the step can answer before
 * anything is allocated (it reads no memory through them). */
static void stand_in_pointers(fa2_params *p)
{
    uintptr_t at = 4096;
    const size_t bytes[5] = {fa2_numel_q(p) * 2, fa2_numel_kv(p) * 2, fa2_numel_kv(p) * 2, fa2_numel_q(p) * 2,
                             fa2_numel_lse(p) * sizeof(float)};
    void *ptrs[5];
    for (int i = 0; i < 5; i++) {
        ptrs[i] = (void *)at;
        at += (bytes[i] + 4095) / 4096 * 4096;
    }
    p->q = ptrs[0], p->k = ptrs[1], p->v = ptrs[2], p->o = ptrs[3], p->lse = ptrs[4];
    p->workspace_bytes = fa2_workspace_size(p); /* asked with the tensors set, as the ABI says */
    p->workspace = p->workspace_bytes ? (void *)at : NULL;
}

/* The host memory the run needs (Q, K, V; the host copies of O and LSE; on the
 * CPU also the step's own O and LSE) against the machine's: a shape that cannot
 * fit is refused in one line before any of it is allocated. */
static void check_host_memory(const fa2_params *p, int on_gpu)
{
    const double inputs = (fa2_numel_q(p) + 2.0 * fa2_numel_kv(p)) * 2, outputs = fa2_numel_q(p) * 2.0 + fa2_numel_lse(p) * 4.0;
    const double need = inputs + outputs * (on_gpu ? 1 : 2);
    const double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    if (have > 0 && need > have) {
        fprintf(stderr, "error: out of host memory: the problem needs %.1f GB for Q, K, V, O and LSE, this machine has "
                "%.1f GB\n", need / 1e9, have / 1e9);
        exit(FA2_EXIT_RUNTIME);
    }
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
    stand_in_pointers(&probe);
    if (!fa2_supports(&probe, why, sizeof why)) {
        fprintf(stderr, "error: step %s does not support these params: %s\n", fa2_name(), why);
        return FA2_EXIT_USAGE;
    }
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
    check_host_memory(&p, on_gpu);

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
    char config[160];
    if (fa2_config(&probe, config, sizeof config) < 0) {
        fprintf(stderr, "error: step %s: no configuration for these params: %s\n", fa2_name(), config);
        return FA2_EXIT_RUNTIME;
    }

    fa2_problem pr;
    fa2_problem_make(&pr, &p, opt.seed, opt.input_scale);
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

    fa2_check_result chk;
    int checked = opt.check != CHECK_OFF;
    if (checked) {
        chk = fa2_check_problem(&pr, opt.check, o_host, lse_host);
        /* every element of O and LSE, not only the checked rows, must have been written */
        chk.unwritten = fa2_count_unwritten(&pr.p, o_host, lse_host);
        chk.pass = chk.pass && chk.unwritten == 0;
    }

    double *ms = fa2_xmalloc(sizeof(double) * (size_t)opt.iters, "the launch times");
    if (on_gpu) {
        rc = fa2_time_gpu(fa2_forward, &run, &dev, opt.warmup, opt.iters, ms);
    } else {
        for (int i = 0; i < opt.warmup && !rc; i++) rc = fa2_forward(&run, NULL);
        for (int i = 0; i < opt.iters && !rc; i++) {
            double t0 = fa2_wall_ms();
            rc = fa2_forward(&run, NULL);
            ms[i] = fa2_wall_ms() - t0;
        }
    }
    if (rc) {
        fprintf(stderr, "error: step %s: fa2_forward failed while timing: %s\n", fa2_name(), fa2_last_error());
        return FA2_EXIT_RUNTIME;
    }
    fa2_stats t = fa2_stats_of(ms, opt.iters);
    double tflops = fa2_flops(&p) / (t.median * 1e-3) / 1e12;
    const char *status = !checked ? "UNCHECKED" : (chk.pass ? "PASS" : "FAIL");

    printf("%-20s %s B%d H%d/%d Nq%d Nk%d d%d %s [%s] | %s", fa2_name(), fa2_dtype_name(p.dtype), p.batch, p.heads_q,
           p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim, p.causal ? "causal" : "non-causal", config, status);
    if (checked) {
        printf(" rel_l2 %.1e max_abs %.1e lse %.1e (%d rows)", chk.rel_l2, chk.max_abs, chk.lse_max, chk.rows_checked);
        if (chk.nonfinite || chk.special_missed || chk.unwritten)
            printf(" NON-FINITE %ld, NaN/-inf MISSED %ld, UNWRITTEN %ld", chk.nonfinite, chk.special_missed,
                   chk.unwritten);
    }
    printf(" | %.4f ms (min %.4f, max %.4f, %d launches) %.3g TFLOP/s | %s\n", t.median, t.min, t.max, opt.iters,
           tflops, dev.name);
    if (opt.csv_file) {
        write_csv(opt.csv_file, &p, dev.name, t, tflops, checked ? &chk : NULL, status);
        fclose(opt.csv_file);
    }

    free(ms);
    free(o_host);
    free(lse_host);
    fa2_buffers_free(&run, on_gpu);
    fa2_problem_free(&pr);
    return checked && !chk.pass ? FA2_EXIT_CHECK : 0;
}
