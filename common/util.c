/* util.c - statistics and clocks for the harness. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "harness.h"

void *fa2_xmalloc(size_t bytes, const char *what)
{
    void *ptr = malloc(bytes ? bytes : 1);
    if (!ptr) {
        fprintf(stderr, "error: out of host memory: cannot allocate %zu bytes (%.2f GB) for %s\n", bytes, bytes / 1e9,
                what);
        exit(FA2_EXIT_RUNTIME);
    }
    return ptr;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

fa2_stats fa2_stats_of(double *ms, int n)
{
    fa2_stats s = {0, 0, 0};
    if (n <= 0) return s;
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    s.min = ms[0];
    s.max = ms[n - 1];
    s.median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    return s;
}

double fa2_wall_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

void fa2_today(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, len, "%Y-%m-%d", &tm);
}
