/* test_util.h - every test program prints one line per case, "PASS name" or
 * "FAIL name: why"; tests/run.sh counts them. */
#ifndef FA2_TEST_UTIL_H
#define FA2_TEST_UTIL_H

#include <stdarg.h>
#include <stdio.h>

static int test_failures;

/* Prints PASS or FAIL with the formatted case name (and detail on failure). */
static void report(int ok, const char *detail, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "PASS " : "FAIL ", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok && detail && *detail) printf(": %s", detail);
    putchar('\n');
    fflush(stdout);
    test_failures += !ok;
}

#endif
