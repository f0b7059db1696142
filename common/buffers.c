/* buffers.c - the tensors one forward call works on: inputs copied to where the
 * step runs (GPU or host), outputs poisoned with NaN so that an element the
 * step never writes fails the check. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

void fa2_buffers_make(fa2_params *run, const fa2_problem *pr, int on_gpu, size_t workspace_bytes)
{
    const fa2_params *p = &pr->p;
    size_t nq = fa2_numel_q(p) * 2, nkv = fa2_numel_kv(p) * 2, nlse = fa2_numel_lse(p) * sizeof(float);
    *run = *p;
    if (on_gpu) {
        void *q = fa2_device_alloc(nq), *k = fa2_device_alloc(nkv), *v = fa2_device_alloc(nkv);
        fa2_device_upload(q, pr->q, nq);
        fa2_device_upload(k, pr->k, nkv);
        fa2_device_upload(v, pr->v, nkv);
        run->q = q;
        run->k = k;
        run->v = v;
        run->o = fa2_device_alloc(nq);
        run->lse = fa2_device_alloc(nlse);
        run->workspace = workspace_bytes ? fa2_device_alloc(workspace_bytes) : NULL;
    } else {
        run->o = fa2_xmalloc(nq, "O");
        run->lse = fa2_xmalloc(nlse, "LSE");
        run->workspace = workspace_bytes ? fa2_xmalloc(workspace_bytes, "the workspace") : NULL;
    }
    run->workspace_bytes = workspace_bytes;
    fa2_buffers_poison(run, on_gpu);
}

void fa2_buffers_poison(fa2_params *run, int on_gpu)
{
    size_t nq = fa2_numel_q(run) * 2, nlse = fa2_numel_lse(run) * sizeof(float);
    if (on_gpu) {
        fa2_device_poison(run->o, nq);
        fa2_device_poison(run->lse, nlse);
    } else {
        memset(run->o, 0xff, nq); /* FA2_POISON16 / FA2_POISON32 in every element */
        memset(run->lse, 0xff, nlse);
    }
}

void fa2_buffers_fetch(const fa2_params *run, int on_gpu, uint16_t *o_host, float *lse_host)
{
    size_t nq = fa2_numel_q(run) * 2, nlse = fa2_numel_lse(run) * sizeof(float);
    if (on_gpu) {
        fa2_device_sync();
        fa2_device_download(o_host, run->o, nq);
        fa2_device_download(lse_host, run->lse, nlse);
    } else {
        memcpy(o_host, run->o, nq);
        memcpy(lse_host, run->lse, nlse);
    }
}

void fa2_buffers_free(fa2_params *run, int on_gpu)
{
    if (on_gpu) {
        fa2_device_free((void *)run->q);
        fa2_device_free((void *)run->k);
        fa2_device_free((void *)run->v);
        fa2_device_free(run->o);
        fa2_device_free(run->lse);
        if (run->workspace) fa2_device_free(run->workspace);
    } else {
        free(run->o);
        free(run->lse);
        free(run->workspace);
    }
    run->q = run->k = run->v = run->o = run->workspace = NULL;
    run->lse = NULL;
}

fa2_check_result fa2_check_problem(const fa2_problem *pr, check_mode mode, const uint16_t *o_host,
                                   const float *lse_host)
{
    fa2_row_set rs;
    if (mode == CHECK_FULL) fa2_rows_all(&rs, &pr->p);
    else fa2_rows_sample(&rs, &pr->p);
    fa2_reference ref;
    fa2_reference_alloc(&ref, &rs, pr->p.head_dim);
    fa2_reference_rows(pr, &rs, &ref);
    fa2_check_result chk = fa2_check(&pr->p, &rs, o_host, lse_host, &ref);
    fa2_reference_free(&ref);
    fa2_rows_free(&rs);
    return chk;
}
