/* buffers.c - the tensors one forward call works on, and one backward call (dO
 * and dQ, dK, dV): inputs copied to where the step runs (GPU or host), outputs
 * poisoned with NaN so that an element the step never writes fails the check; the
 * forward's workspace zero-filled once, as fa2.h asks of its allocator. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

void fa2_buffers_make(fa2_params *run, const fa2_problem *pr, int on_gpu, size_t workspace_bytes)
{
    fa2_problem_step_params(pr, run); /* dense, or K and V in pages */
    size_t nq = fa2_numel_q(run) * 2, nkv = fa2_numel_kv_stored(run) * 2, nlse = fa2_numel_lse(run) * sizeof(float);
    if (on_gpu) {
        void *q = fa2_device_alloc(nq), *k = fa2_device_alloc(nkv), *v = fa2_device_alloc(nkv);
        fa2_device_upload(q, pr->q, nq);
        fa2_device_upload(k, run->k, nkv);
        fa2_device_upload(v, run->v, nkv);
        run->q = q;
        run->k = k;
        run->v = v;
        if (run->seqlens_k) { /* the KV cache's arrays live where the step runs, as the tensors */
            const size_t bytes = sizeof(int32_t) * (size_t)run->batch;
            void *lens = fa2_device_alloc(bytes);
            fa2_device_upload(lens, run->seqlens_k, bytes);
            run->seqlens_k = lens;
        }
        if (run->block_table) {
            const size_t bytes = sizeof(int32_t) * (size_t)run->batch * (size_t)run->block_table_batch_stride;
            void *table = fa2_device_alloc(bytes);
            fa2_device_upload(table, run->block_table, bytes);
            run->block_table = table;
        }
        run->o = fa2_device_alloc(nq);
        run->lse = fa2_device_alloc(nlse);
        run->workspace = workspace_bytes ? fa2_device_alloc(workspace_bytes) : NULL;
        if (workspace_bytes) fa2_device_zero(run->workspace, workspace_bytes);
    } else {
        run->o = fa2_xmalloc(nq, "O");
        run->lse = fa2_xmalloc(nlse, "LSE");
        run->workspace = workspace_bytes ? fa2_xmalloc(workspace_bytes, "the workspace") : NULL;
        if (workspace_bytes) memset(run->workspace, 0, workspace_bytes);
    }
    /* Zero-filled once, here, and never again by the harness (fa2.h): a step that counts in
     * it leaves its counters zero after every call, so the timed calls begin as the first. */
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
        if (run->seqlens_k) fa2_device_free((void *)run->seqlens_k);
        if (run->block_table) fa2_device_free((void *)run->block_table);
    } else { /* q, k, v and the cache's arrays are the problem's */
        free(run->o);
        free(run->lse);
        free(run->workspace);
    }
    run->q = run->k = run->v = run->o = run->workspace = NULL;
    run->lse = NULL;
    run->seqlens_k = run->block_table = NULL;
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

/* ---- the backward ---- */

void fa2_bwd_buffers_make(fa2_bwd_params *bp, const fa2_params *run, const uint16_t *dout_host, int on_gpu,
                          size_t workspace_bytes)
{
    const size_t nq = fa2_numel_q(run) * 2, nkv = fa2_numel_kv(run) * 2;
    memset(bp, 0, sizeof *bp);
    bp->fwd = *run; /* q, k, v, o and lse: the forward's, read */
    fa2_set_dense_bwd_strides(bp);
    if (on_gpu) {
        void *dout = fa2_device_alloc(nq);
        fa2_device_upload(dout, dout_host, nq);
        bp->dout = dout;
        bp->dq = fa2_device_alloc(nq);
        bp->dk = fa2_device_alloc(nkv);
        bp->dv = fa2_device_alloc(nkv);
        bp->fwd.workspace = workspace_bytes ? fa2_device_alloc(workspace_bytes) : NULL;
        fa2_device_poison(bp->dq, nq);
        fa2_device_poison(bp->dk, nkv);
        fa2_device_poison(bp->dv, nkv);
        if (workspace_bytes) fa2_device_poison(bp->fwd.workspace, workspace_bytes);
    } else {
        bp->dout = dout_host;
        bp->dq = fa2_xmalloc(nq, "dQ");
        bp->dk = fa2_xmalloc(nkv, "dK");
        bp->dv = fa2_xmalloc(nkv, "dV");
        bp->fwd.workspace = workspace_bytes ? fa2_xmalloc(workspace_bytes, "the backward's workspace") : NULL;
        memset(bp->dq, 0xff, nq); /* FA2_POISON16 in every element */
        memset(bp->dk, 0xff, nkv);
        memset(bp->dv, 0xff, nkv);
        if (workspace_bytes) memset(bp->fwd.workspace, 0xff, workspace_bytes); /* no step may count on zeros */
    }
    bp->fwd.workspace_bytes = workspace_bytes;
}

void fa2_bwd_buffers_fetch(const fa2_bwd_params *bp, int on_gpu, uint16_t *dq_host, uint16_t *dk_host,
                           uint16_t *dv_host)
{
    const size_t nq = fa2_numel_q(&bp->fwd) * 2, nkv = fa2_numel_kv(&bp->fwd) * 2;
    if (on_gpu) {
        fa2_device_sync();
        fa2_device_download(dq_host, bp->dq, nq);
        fa2_device_download(dk_host, bp->dk, nkv);
        fa2_device_download(dv_host, bp->dv, nkv);
    } else {
        memcpy(dq_host, bp->dq, nq);
        memcpy(dk_host, bp->dk, nkv);
        memcpy(dv_host, bp->dv, nkv);
    }
}

void fa2_bwd_buffers_free(fa2_bwd_params *bp, int on_gpu)
{
    if (on_gpu) {
        fa2_device_free((void *)bp->dout);
        fa2_device_free(bp->dq);
        fa2_device_free(bp->dk);
        fa2_device_free(bp->dv);
        if (bp->fwd.workspace) fa2_device_free(bp->fwd.workspace);
    } else { /* dout is the caller's */
        free(bp->dq);
        free(bp->dk);
        free(bp->dv);
        free(bp->fwd.workspace);
    }
    bp->dout = NULL;
    bp->dq = bp->dk = bp->dv = bp->fwd.workspace = NULL;
}
