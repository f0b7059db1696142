/* cli.c - command-line options. Every bad input gets one line naming the flag,
 * the value and what is allowed, and exit code 2, before anything is allocated. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "device_limits.h"

static const char *usage_text =
    "usage: fa2 [options]   (one FlashAttention-2 forward: check against fp64, then time)\n"
    "  --batch N          batch size                                (default 2)\n"
    "  --heads N          query heads                               (default 8)\n"
    "  --kv-heads N       key/value heads, a divisor of --heads (GQA) (default = --heads)\n"
    "  --seqlen N         sets --seqlen-q and --seqlen-k            (default 1024)\n"
    "  --seqlen-q N       query rows (instead of --seqlen)\n"
    "  --seqlen-k N       key rows (instead of --seqlen)\n"
    "  --dim N            head dimension                            (default 128)\n"
    "  --causal           bottom-right causal mask, as FlashAttention-2\n"
    "  --seqlens-k LIST   each sequence's own key count, comma-separated, one per batch\n"
    "                     entry, each 0 to seqlen_k (a KV cache: steps 00 and 13)\n"
    "  --page-size N      K and V in pages of N keys (16 to 256, a power of two), shuffled\n"
    "                     through the pool by --seed, every row no sequence owns NaN (steps 00 and 13)\n"
    "  --page-order O     shuffled | sequential: the pool's pages in the order they are read, for\n"
    "                     timing what the shuffle costs (default shuffled; with --page-size)\n"
    "  --backward         also the backward: dQ, dK, dV checked against fp64 (given the\n"
    "                     step's O), then timed on a second line (steps 00 and 14)\n"
    "  --dtype T          fp16 | bf16                               (default fp16)\n"
    "  --seed N           input seed                                (default 1)\n"
    "  --scale X          scales Q and K; larger makes the softmax peaky (default 1)\n"
    "  --warmup N         untimed launches                          (default 10 GPU, 0 CPU)\n"
    "  --iters N          timed launches, median reported           (default 100 GPU, 3 CPU)\n"
    "  --check M          full | sample | off                       (default sample:\n"
    "                     every row of small problems, a spread of rows of large ones;\n"
    "                     the backward whole up to 2^30 multiply-adds of its fp64\n"
    "                     reference, else UNCHECKED; full checks it whatever its size)\n"
    "  --csv FILE         append one result row to FILE (opened before any work)\n"
    "  --plan             print the configuration the step would launch, and its shared\n"
    "                     memory, then stop: no GPU needed under FA2_EMULATE\n"
    "  --help             this text\n"
    "Environment: FA2_EMULATE=PRESET makes a GPU step take every decision (tiles, stages,\n"
    "  splits, what it refuses) from another GPU's published limits; the timings stay this\n"
    "  GPU's, and the result line names the preset (the list below; common/device_limits.c).\n"
    "Each flag may be given once. Bad input gets one line on stderr naming the flag,\n"
    "the value and what is allowed.\n"
    "exit codes: 0 pass; 1 check failed; 2 bad input or params the step refuses;\n"
    "  3 no usable GPU; 4 a host allocation or a CUDA call failed (the reason is printed)\n";

static void die_usage(const char *flag, const char *value, const char *allowed)
{
    fprintf(stderr, "error: %s: '%s' is not allowed (allowed: %s)\n", flag, value, allowed);
    exit(FA2_EXIT_USAGE);
}

static long long parse_int(const char *flag, const char *s, long long lo, long long hi)
{
    char *end = NULL, allowed[96];
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        snprintf(allowed, sizeof allowed, "an integer from %lld to %lld", lo, hi);
        die_usage(flag, s, allowed);
    }
    return v;
}

static double parse_real(const char *flag, const char *s, double lo, double hi)
{
    char *end = NULL, allowed[96];
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        snprintf(allowed, sizeof allowed, "a number from %g to %g", lo, hi);
        die_usage(flag, s, allowed);
    }
    return v;
}

/* --seqlens-k: exactly `batch` integers from 0 to seqlen_k, comma-separated. */
static int32_t *parse_seqlens(const char *text, int batch, int seqlen_k)
{
    char allowed[160];
    snprintf(allowed, sizeof allowed, "%d comma-separated key counts (one per --batch entry), each from 0 to seqlen_k %d",
             batch, seqlen_k);
    int32_t *lens = fa2_xmalloc(sizeof(int32_t) * (size_t)batch, "the sequence lengths");
    const char *at = text;
    for (int b = 0; b < batch; b++) {
        char *end = NULL;
        errno = 0;
        const long long v = strtoll(at, &end, 10);
        if (errno || end == at || v < 0 || v > seqlen_k || *end != (b + 1 < batch ? ',' : '\0'))
            die_usage("--seqlens-k", text, allowed);
        lens[b] = (int32_t)v;
        at = end + 1;
    }
    return lens;
}

const char *fa2_dtype_name(fa2_dtype t) { return t == FA2_BF16 ? "bf16" : "fp16"; }

void fa2_parse_options(int argc, char **argv, int runs_on_gpu, fa2_options *opt)
{
    int heads_kv = -1, seqlen = 1024, seqlen_q = -1, seqlen_k = -1, warmup = -1, iters = -1, given_seqlen = 0;
    const char *seqlens_text = NULL;
    int page_order_given = 0;
    memset(opt, 0, sizeof *opt);
    opt->batch = 2;
    opt->heads_q = 8;
    opt->head_dim = 128;
    opt->dtype = FA2_FP16;
    opt->seed = 1;
    opt->input_scale = 1.0f;
    opt->check = CHECK_SAMPLE;

    static const char *const with_value[] = {"--batch", "--heads", "--kv-heads", "--seqlen", "--seqlen-q",
                                             "--seqlen-k", "--dim", "--dtype", "--seed", "--scale",
                                             "--warmup", "--iters", "--check", "--csv", "--seqlens-k", "--page-size",
                                             "--page-order"};
    enum { N_FLAGS = sizeof with_value / sizeof *with_value };
    const char *given[N_FLAGS] = {0}; /* the value each flag was given, to refuse a second one */
    for (int i = 1; i < argc; i++) {
        char flag[64];
        const char *arg = argv[i], *val = NULL, *eq = strchr(arg, '=');
        if (strncmp(arg, "--", 2) != 0) die_usage("argument", arg, "options starting with --, see --help");
        if (eq) {
            snprintf(flag, sizeof flag, "%.*s", (int)(eq - arg), arg);
            val = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", arg);
        }
        if (!strcmp(flag, "--help")) {
            fputs(usage_text, stdout);
            printf("FA2_EMULATE presets: %s\n", fa2_limits_preset_names());
            exit(0);
        }
        if (!strcmp(flag, "--causal")) {
            if (val) die_usage("--causal", val, "no value: --causal alone turns the mask on");
            if (opt->causal) die_usage("--causal", "--causal", "each flag once");
            opt->causal = 1;
            continue;
        }
        if (!strcmp(flag, "--backward")) {
            if (val) die_usage("--backward", val, "no value: --backward alone");
            if (opt->backward) die_usage("--backward", "--backward", "each flag once");
            opt->backward = 1;
            continue;
        }
        if (!strcmp(flag, "--plan")) {
            if (val) die_usage("--plan", val, "no value: --plan alone");
            if (opt->plan) die_usage("--plan", "--plan", "each flag once");
            opt->plan = 1;
            continue;
        }
        int known = -1;
        for (int j = 0; j < N_FLAGS; j++)
            if (!strcmp(flag, with_value[j])) known = j;
        if (known < 0) die_usage("option", flag, "the options listed by --help");
        if (!val) {
            if (i + 1 >= argc) die_usage(flag, "", "a value after the flag");
            val = argv[++i];
        }
        if (given[known]) {
            char allowed[160];
            snprintf(allowed, sizeof allowed, "each flag once; it was already given '%.100s'", given[known]);
            die_usage(flag, val, allowed);
        }
        given[known] = val;
        if (!strcmp(flag, "--batch")) opt->batch = (int)parse_int(flag, val, 1, 1 << 24);
        else if (!strcmp(flag, "--heads")) opt->heads_q = (int)parse_int(flag, val, 1, 1024);
        else if (!strcmp(flag, "--kv-heads")) heads_kv = (int)parse_int(flag, val, 1, 1024);
        else if (!strcmp(flag, "--seqlen")) seqlen = (int)parse_int(flag, val, 1, 1 << 20), given_seqlen = 1;
        else if (!strcmp(flag, "--seqlen-q")) seqlen_q = (int)parse_int(flag, val, 1, 1 << 20);
        else if (!strcmp(flag, "--seqlen-k")) seqlen_k = (int)parse_int(flag, val, 1, 1 << 20);
        else if (!strcmp(flag, "--dim")) opt->head_dim = (int)parse_int(flag, val, 1, 512);
        else if (!strcmp(flag, "--seed")) opt->seed = (uint64_t)parse_int(flag, val, 0, INT64_MAX);
        else if (!strcmp(flag, "--scale")) opt->input_scale = (float)parse_real(flag, val, 1e-3, 100.0);
        else if (!strcmp(flag, "--warmup")) warmup = (int)parse_int(flag, val, 0, 100000);
        else if (!strcmp(flag, "--iters")) iters = (int)parse_int(flag, val, 1, 100000);
        else if (!strcmp(flag, "--page-size")) {
            opt->page_size = (int)parse_int(flag, val, 16, 256);
            if (opt->page_size & (opt->page_size - 1)) die_usage(flag, val, "a power of two from 16 to 256");
        } else if (!strcmp(flag, "--page-order")) {
            if (!strcmp(val, "shuffled")) opt->pages_in_order = 0, page_order_given = 1;
            else if (!strcmp(val, "sequential")) opt->pages_in_order = 1, page_order_given = 1;
            else die_usage(flag, val, "shuffled, sequential");
        } else if (!strcmp(flag, "--seqlens-k")) {
            seqlens_text = val; /* parsed once --batch and the seqlen are known */
        } else if (!strcmp(flag, "--csv")) {
            if (!*val) die_usage(flag, val, "a file path");
            opt->csv_path = val;
        } else if (!strcmp(flag, "--dtype")) {
            if (!strcmp(val, "fp16")) opt->dtype = FA2_FP16;
            else if (!strcmp(val, "bf16")) opt->dtype = FA2_BF16;
            else die_usage(flag, val, "fp16, bf16");
        } else if (!strcmp(flag, "--check")) {
            if (!strcmp(val, "full")) opt->check = CHECK_FULL;
            else if (!strcmp(val, "sample")) opt->check = CHECK_SAMPLE;
            else if (!strcmp(val, "off")) opt->check = CHECK_OFF;
            else die_usage(flag, val, "full, sample, off");
        }
    }

    opt->heads_kv = heads_kv < 0 ? opt->heads_q : heads_kv;
    if (opt->heads_q % opt->heads_kv != 0) {
        char v[32], allowed[64];
        snprintf(v, sizeof v, "%d", opt->heads_kv);
        snprintf(allowed, sizeof allowed, "a divisor of --heads %d", opt->heads_q);
        die_usage("--kv-heads", v, allowed);
    }
    if (given_seqlen && (seqlen_q >= 0 || seqlen_k >= 0)) {
        char v[64];
        snprintf(v, sizeof v, "%d with --seqlen-%s %d", seqlen, seqlen_q >= 0 ? "q" : "k",
                 seqlen_q >= 0 ? seqlen_q : seqlen_k);
        die_usage("--seqlen", v, "--seqlen alone, or --seqlen-q and --seqlen-k (a missing one takes the default 1024)");
    }
    opt->seqlen_q = seqlen_q < 0 ? seqlen : seqlen_q;
    opt->seqlen_k = seqlen_k < 0 ? seqlen : seqlen_k;
    if (seqlens_text) opt->seqlens_k = parse_seqlens(seqlens_text, opt->batch, opt->seqlen_k);
    if (page_order_given && !opt->page_size)
        die_usage("--page-order", opt->pages_in_order ? "sequential" : "shuffled", "with --page-size only");
    opt->warmup = warmup >= 0 ? warmup : (runs_on_gpu ? 10 : 0);
    opt->iters = iters >= 0 ? iters : (runs_on_gpu ? 100 : 3);
    if (opt->csv_path) {
        FILE *f = fopen(opt->csv_path, "a");
        if (!f) {
            char allowed[160];
            snprintf(allowed, sizeof allowed, "a file that can be opened for appending (%s)", strerror(errno));
            die_usage("--csv", opt->csv_path, allowed);
        }
        opt->csv_file = f;
    }
}

void fa2_params_from_options(const fa2_options *opt, fa2_params *p)
{
    memset(p, 0, sizeof *p);
    p->batch = opt->batch;
    p->heads_q = opt->heads_q;
    p->heads_kv = opt->heads_kv;
    p->seqlen_q = opt->seqlen_q;
    p->seqlen_k = opt->seqlen_k;
    p->head_dim = opt->head_dim;
    p->causal = opt->causal;
    p->seqlens_k = opt->seqlens_k; /* host memory: fa2_problem_make copies it */
    p->dtype = opt->dtype;
    p->softmax_scale = (float)(1.0 / sqrt((double)opt->head_dim));
    fa2_set_dense_strides(p);
}
