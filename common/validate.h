/* validate.h - what every step's fa2_supports starts with, and how a step records
 * why a CUDA call failed (validate.c, linked into each step's binary and shared
 * library). Steps include this and fa2.h, nothing else of the harness. */
#ifndef FA2_VALIDATE_H
#define FA2_VALIDATE_H

#include <stddef.h>

#include "fa2.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest seqlen any step takes: row indices plus a tile, or plus seqlen_k -
 * seqlen_q, stay far inside a 32-bit int. */
#define FA2_MAX_SEQLEN (1 << 30)

/* The checks every step shares (fa2.h lists them). 1 if they pass; otherwise 0
 * and one line naming the field, its value and what is allowed in why. */
int fa2_validate_params(const fa2_params *p, char *why, size_t why_len);

/* The one line a step that computes dense K and V of one length gives a KV cache:
 * 1 if p has neither seqlens_k nor block_table, otherwise 0 and a line naming the
 * field in why. Every GPU step but step 13, the decode step, which reads
 * per-sequence lengths and pages, calls it after fa2_validate_params. */
int fa2_refuse_kv_cache(const fa2_params *p, char *why, size_t why_len);

/* 1 if q, k, v, o and every stride in bytes are multiples of `bytes` (16 for a
 * kernel that moves 16-byte chunks); otherwise 0, naming the first that is not
 * and the kernel's `need` ("16-byte cp.async copies") in why. */
int fa2_validate_alignment(const fa2_params *p, int bytes, const char *need, char *why, size_t why_len);

/* 1 if p->workspace holds `need` bytes, 16-byte aligned, apart from q, k, v, o
 * and lse (a step that needs a workspace calls this); otherwise 0 and one line. */
int fa2_validate_workspace(const fa2_params *p, size_t need, char *why, size_t why_len);

/* The backward's checks: fa2_validate_params on its forward params, no KV cache (no
 * backward reads one), an LSE to read,
 * dout, dq, dk and dv set, their strides and alignment as the forward's tensors', and
 * dq, dk and dv each written once, apart from every input and from each other. */
int fa2_validate_bwd_params(const fa2_bwd_params *p, char *why, size_t why_len);

/* fa2_validate_alignment for the backward's own tensors: 1 if dout, dq, dk, dv and
 * each of their strides in bytes are multiples of `bytes`; otherwise 0 and one line. */
int fa2_validate_bwd_alignment(const fa2_bwd_params *p, int bytes, const char *need, char *why, size_t why_len);

/* fa2_validate_workspace for a backward: also apart from dout, dq, dk and dv. */
int fa2_validate_bwd_workspace(const fa2_bwd_params *p, size_t need, char *why, size_t why_len);

/* What fa2_backward_supports says in a step without a backward: the params' own
 * refusal where they are bad, else one line saying the step has no backward. Returns 0. */
int fa2_refuse_backward(const fa2_bwd_params *p, const char *step, char *why, size_t why_len);

/* Records that `call` (its text up to the first '(' is kept) failed with
 * `reason`, for fa2_last_error(); returns FA2_ERR_LAUNCH. */
int fa2_fail(const char *call, const char *reason);

#ifdef __CUDACC__
/* In a CUDA step: returns FA2_ERR_LAUNCH, with the call and the runtime's reason
 * recorded, if `call` does not return cudaSuccess. */
#define FA2_CUDA_TRY(call)                                                           \
    do {                                                                             \
        const cudaError_t fa2_err_ = (call);                                         \
        if (fa2_err_ != cudaSuccess) return fa2_fail(#call, cudaGetErrorString(fa2_err_)); \
    } while (0)
#endif

#ifdef __cplusplus
}
#endif
#endif
