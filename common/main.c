/* main.c - the harness binary: one step, one shape. Checks the step against the
 * fp64 reference (output and LSE poisoned with NaN first), then times it and
 * prints one line (and one CSV row with --csv). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define CSV_HEADER \
    "step,device,date,dtype,batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal," \
    "ms_median,ms_min,ms_max,tflops,rel_l2,max_abs,lse_err,status\n"

static void write_csv(const char *path, const fa2_params *p, const char *device, fa2_stats t, double tflops,
                      const fa2_check_result *c, const char *status)
{
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "error: --csv: cannot open '%s' for appending\n", path);
        exit(FA2_EXIT_USAGE);
    }
    char date[16];
    fa2_today(date, sizeof date);
    if (ftell(f) == 0) fputs(CSV_HEADER, f);
    fprintf(f, "%s,%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%.5f,%.5f,%.5f,%.2f,%.3e,%.3e,%.3e,%s\n", fa2_name(), device, date,
            fa2_dtype_name(p->dtype), p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim,
            p->causal, t.median, t.min, t.max, tflops, c ? c->rel_l2 : NAN, c ? c->max_abs : NAN,
            c ? c->lse_max : NAN, status);
    fclose(f);
}

int main(int argc, char **argv)
{
    const int on_gpu = fa2_runs_on_gpu();
    fa2_options opt;
    fa2_parse_options(argc, argv, on_gpu, &opt);
    fa2_params p;
    fa2_params_from_options(&opt, &p);

    /* Ask the step before allocating anything; dummy non-NULL pointers stand in. */
    char why[256] = "";
    fa2_params probe = p;
    probe.q = probe.k = probe.v = probe.o = (void *)256;
    if (!fa2_supports(&probe, why, sizeof why)) {
        fprintf(stderr, "error: step %s does not support these params: %s\n", fa2_name(), why);
        return FA2_EXIT_USAGE;
    }

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

    fa2_problem pr;
    fa2_problem_make(&pr, &p, opt.seed, opt.input_scale);
    uint16_t *o_host = malloc(fa2_numel_q(&p) * sizeof(uint16_t));
    float *lse_host = malloc(fa2_numel_lse(&p) * sizeof(float));
    if (!o_host || !lse_host) abort();

    fa2_params run;
    fa2_buffers_make(&run, &pr, on_gpu);
    int rc = fa2_forward(&run, NULL);
    fa2_buffers_fetch(&run, on_gpu, o_host, lse_host);
    if (rc) {
        fprintf(stderr, "error: step %s: fa2_forward returned %d\n", fa2_name(), rc);
        return 1;
    }

    fa2_check_result chk;
    int checked = opt.check != CHECK_OFF;
    if (checked) chk = fa2_check_problem(&pr, opt.check, o_host, lse_host);

    double *ms = malloc(sizeof(double) * (size_t)opt.iters);
    if (!ms) abort();
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
        fprintf(stderr, "error: step %s: fa2_forward returned %d while timing\n", fa2_name(), rc);
        return 1;
    }
    fa2_stats t = fa2_stats_of(ms, opt.iters);
    double tflops = fa2_flops(&p) / (t.median * 1e-3) / 1e12;
    const char *status = !checked ? "UNCHECKED" : (chk.pass ? "PASS" : "FAIL");

    printf("%-20s %s B%d H%d/%d Nq%d Nk%d d%d %s | %s", fa2_name(), fa2_dtype_name(p.dtype), p.batch, p.heads_q,
           p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim, p.causal ? "causal" : "non-causal", status);
    if (checked)
        printf(" rel_l2 %.1e max_abs %.1e lse %.1e (%d rows%s)", chk.rel_l2, chk.max_abs, chk.lse_max,
               chk.rows_checked, chk.nonfinite ? ", NON-FINITE OUTPUT" : "");
    printf(" | %.4f ms (min %.4f, max %.4f, %d launches) %.3g TFLOP/s | %s\n", t.median, t.min, t.max, opt.iters,
           tflops, dev.name);
    if (opt.csv_path) write_csv(opt.csv_path, &p, dev.name, t, tflops, checked ? &chk : NULL, status);

    free(ms);
    free(o_host);
    free(lse_host);
    fa2_buffers_free(&run, on_gpu);
    fa2_problem_free(&pr);
    return checked && !chk.pass ? 1 : 0;
}
