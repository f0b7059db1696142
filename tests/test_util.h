/* test_util.h - what the test programs share: every case prints one line,
 * "PASS name" or "FAIL name: why", which tests/run.sh counts; and the inputs
 * that carry a NaN, for the tests of fa2.h's non-finite semantics. */
#ifndef FA2_TEST_UTIL_H
#define FA2_TEST_UTIL_H

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/harness.h"
#include "../common/numeric.h"

static int test_failures;

/* FA2_TEST_FAIL_LIMIT=N (a whole number, 1 or more): a test program stops, exit 1, at its
 * Nth failing case; unset or empty, it runs every case. tests/mutants.sh passes it on, so a
 * mutant's matrix can stop at the failure that catches it instead of running on. */
static inline int test_fail_limit(void)
{
    static int limit = -1;
    if (limit < 0) {
        const char *env = getenv("FA2_TEST_FAIL_LIMIT");
        char *end = NULL;
        const long n = env && *env ? strtol(env, &end, 10) : 0;
        if (env && *env && (*end != '\0' || n < 1 || n > 1000000000)) {
            fprintf(stderr, "error: FA2_TEST_FAIL_LIMIT '%s' is not allowed (allowed: a whole number from 1, or unset)\n", env);
            exit(2);
        }
        limit = (int)n;
    }
    return limit;
}

/* Prints PASS or FAIL with the formatted case name (and detail on failure). */
static inline void report(int ok, const char *detail, const char *fmt, ...)
{
    const int fail_limit = test_fail_limit(); /* read (and checked) before the first line */
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "PASS " : "FAIL ", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok && detail && *detail) printf(": %s", detail);
    putchar('\n');
    fflush(stdout);
    test_failures += !ok;
    if (!ok && fail_limit > 0 && test_failures >= fail_limit) {
        printf("# stopped at failing case %d (FA2_TEST_FAIL_LIMIT=%d)\n", test_failures, fail_limit);
        exit(1);
    }
}

/* One step's shared library, through the fa2.h ABI. */
typedef struct {
    const char *path;
    int (*forward)(const fa2_params *, void *);
    int (*supports)(const fa2_params *, char *, size_t);
    int (*config)(const fa2_params *, char *, size_t);
    int (*config_count)(void);
    int (*config_smem)(const fa2_params *, int);
    size_t (*workspace_size)(const fa2_params *);
    const char *(*last_error)(void);
    const char *(*name)(void);
    int (*backward)(const fa2_bwd_params *, void *);
    int (*backward_supports)(const fa2_bwd_params *, char *, size_t);
    size_t (*backward_workspace_size)(const fa2_bwd_params *);
} step_abi;

/* 1 if every function of the ABI was found in the library at path. */
static inline int step_abi_load(step_abi *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) return 0;
    *(void **)&s->forward = dlsym(handle, "fa2_forward");
    *(void **)&s->supports = dlsym(handle, "fa2_supports");
    *(void **)&s->config = dlsym(handle, "fa2_config");
    *(void **)&s->config_count = dlsym(handle, "fa2_config_count");
    *(void **)&s->config_smem = dlsym(handle, "fa2_config_smem");
    *(void **)&s->workspace_size = dlsym(handle, "fa2_workspace_size");
    *(void **)&s->last_error = dlsym(handle, "fa2_last_error");
    *(void **)&s->name = dlsym(handle, "fa2_name");
    *(void **)&s->backward = dlsym(handle, "fa2_backward");
    *(void **)&s->backward_supports = dlsym(handle, "fa2_backward_supports");
    *(void **)&s->backward_workspace_size = dlsym(handle, "fa2_backward_workspace_size");
    return s->forward && s->supports && s->config && s->config_count && s->config_smem && s->workspace_size && s->last_error && s->name &&
           s->backward && s->backward_supports && s->backward_workspace_size;
}

/* Where a NaN goes: none, a whole row of Q, a whole row of K, one element of V. */
typedef enum { NAN_NONE, NAN_Q_ROW, NAN_K_ROW, NAN_V_ELEMENT } nan_site;
static const char *const nan_site_names[] = {"", "NaN in Q row", "NaN in K row", "NaN in V element"};

/* Puts a NaN into the dense inputs of pr, batch 0, head 0 (kv head 0): Q row
 * `row`, K row `row`, or V[row][col]. */
static inline void put_nan(fa2_problem *pr, nan_site site, int row, int col)
{
    const fa2_params *p = &pr->p;
    const uint16_t nan16 = fa2_from_float(NAN, p->dtype);
    const size_t q_row = (size_t)row * p->q_row_stride, kv_row = (size_t)row * p->k_row_stride;
    switch (site) {
    case NAN_NONE: break;
    case NAN_Q_ROW: for (int c = 0; c < p->head_dim; c++) pr->q[q_row + c] = nan16; break;
    case NAN_K_ROW: for (int c = 0; c < p->head_dim; c++) pr->k[kv_row + c] = nan16; break;
    case NAN_V_ELEMENT: pr->v[kv_row + col] = nan16; break;
    }
}

/* Entries of the reference that are NaN: a NaN test that reaches none proves nothing. */
static inline long reference_nans(const fa2_reference *ref, const fa2_row_set *rs, int head_dim)
{
    long n = 0;
    for (size_t i = 0; i < (size_t)rs->n * head_dim; i++) n += isnan(ref->o[i]);
    for (int i = 0; i < rs->n; i++) n += isnan(ref->lse[i]);
    return n;
}

#endif
