/* cuda_check.h - the harness's CUDA error macro: a failed call prints where and
 * why in one line, and exits with FA2_EXIT_RUNTIME (the harness has nothing
 * sensible to continue with). */
#ifndef FA2_CUDA_CHECK_H
#define FA2_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "exit_codes.h"

#define CUDA_CHECK(call)                                                                        \
    do {                                                                                        \
        cudaError_t err_ = (call);                                                              \
        if (err_ != cudaSuccess) {                                                              \
            fprintf(stderr, "error: CUDA: %s at %s:%d: %s\n", #call, __FILE__, __LINE__,        \
                    cudaGetErrorString(err_));                                                  \
            exit(FA2_EXIT_RUNTIME);                                                             \
        }                                                                                       \
    } while (0)

#endif
