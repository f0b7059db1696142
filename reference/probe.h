/* probe.h - what the ceiling probes (mma_ceiling.cu, wgmma_ceiling.cu,
 * bandwidth_ceiling.cu) share: the first GPU, checked against what the probe needs; the
 * median time of repeated launches; the UTC date of a row and the CSV the rows are
 * appended to (its header given by the probe). */
#ifndef FA2_PROBE_H
#define FA2_PROBE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>

#include "../common/cuda_check.h"

constexpr int PROBE_RUNS = 9;  // timed launches after one warm-up; the median is reported

// The command line every probe takes: --csv FILE, --help (prints `usage`, exit 0) and, when
// `flag` is not NULL, that one switch (*flag_set = 1 if given). Returns the CSV path or
// NULL; anything else is one line on stderr and exit code 2.
static const char *probe_args(int argc, char **argv, const char *usage, const char *flag, int *flag_set)
{
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            puts(usage);
            exit(0);
        }
        if (flag && !strcmp(argv[i], flag)) {
            *flag_set = 1;
            continue;
        }
        if (!strcmp(argv[i], "--csv") && i + 1 < argc && argv[i + 1][0]) {
            csv_path = argv[++i];
            continue;
        }
        fprintf(stderr, "error: argument '%s' is not allowed (allowed: --csv FILE%s%s, --help)\n", argv[i], flag ? ", " : "",
                flag ? flag : "");
        exit(2);
    }
    return csv_path;
}

// The first GPU. Without one, or when usable(prop) is false, one line on stderr and exit
// code 3: `needs` says what the probe needs ("an sm_80 or newer GPU").
template <typename Usable>
static cudaDeviceProp probe_gpu(const char *program, const char *needs, Usable usable)
{
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        fprintf(stderr, "error: no CUDA GPU found (%s): %s needs %s\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", program, needs);
        exit(3);
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (!usable(prop)) {
        fprintf(stderr, "error: GPU %s is compute capability %d.%d: %s needs %s\n", prop.name, prop.major, prop.minor,
                program, needs);
        exit(3);
    }
    return prop;
}

// The median of PROBE_RUNS timed calls of launch() (device events around each), after one
// untimed call that brings the clocks up and loads the module; before() runs ahead of each
// call, outside its events (a cache flush).
template <typename Before, typename Launch>
static double probe_median_ms_after(Before before, Launch launch)
{
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    before();
    launch();
    CUDA_CHECK(cudaGetLastError());
    double ms[PROBE_RUNS];
    for (int r = 0; r < PROBE_RUNS; r++) {
        before();
        CUDA_CHECK(cudaEventRecord(start));
        launch();
        CUDA_CHECK(cudaEventRecord(stop));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        ms[r] = t;
    }
    CUDA_CHECK(cudaGetLastError());
    std::sort(ms, ms + PROBE_RUNS);
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms[PROBE_RUNS / 2];
}

// The same with nothing run between the calls.
template <typename Launch>
static double probe_median_ms(Launch launch)
{
    return probe_median_ms_after([] {}, launch);
}

// Today in UTC, as the harness dates its rows: "YYYY-MM-DD".
static void probe_date(char (&date)[16])
{
    const time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d", &tm);
}

// The TFLOP/s probes' CSV columns.
constexpr const char *PROBE_TFLOPS_HEADER = "probe,device,date,dtype,tflops\n";

// The CSV to append rows to (`header` first when the file is new), or NULL without --csv;
// a file that cannot be opened is one line on stderr and exit code 2.
static FILE *probe_csv_open(const char *path, const char *header)
{
    if (!path) return NULL;
    FILE *csv = fopen(path, "a");
    if (!csv) {
        fprintf(stderr, "error: --csv: cannot open '%s' for appending\n", path);
        exit(2);
    }
    if (ftell(csv) == 0) fputs(header, csv);
    return csv;
}

#endif
