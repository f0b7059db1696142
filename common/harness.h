/* harness.h - the host harness shared by every step: options, data, the fp64
 * reference, the checker, device memory and timing. No kernel logic lives here. */
#ifndef FA2_HARNESS_H
#define FA2_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "exit_codes.h"
#include "fa2.h"
#include "validate.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- options (cli.c) ---- */
typedef enum { CHECK_SAMPLE = 0, CHECK_FULL = 1, CHECK_OFF = 2 } check_mode;

typedef struct {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    int causal;
    int32_t *seqlens_k; /* --seqlens-k: [batch] key counts, or NULL: every sequence has seqlen_k */
    int page_size;      /* --page-size: K and V in shuffled pages of this many keys, or 0: dense */
    int pages_in_order; /* --page-order sequential: the pool's pages in the order the sequences read them */
    int plan; /* --plan: print the configuration, run nothing */
    int backward; /* --backward: also check and time the backward (fa2_backward) */
    fa2_dtype dtype;
    uint64_t seed;
    float input_scale; /* multiplies the N(0,1) Q and K; > 1 makes the softmax peaky */
    int warmup, iters;
    check_mode check;
    const char *csv_path; /* NULL: no CSV */
    void *csv_file;       /* FILE *, opened for appending while the options are parsed */
} fa2_options;

/* Parses argv. On bad input prints one line (flag, value, what is allowed) to
 * stderr and exits with FA2_EXIT_USAGE; --help prints usage and exits 0. The
 * --csv file is opened here, so a path that cannot be written stops the run
 * before any work. */
void fa2_parse_options(int argc, char **argv, int runs_on_gpu, fa2_options *opt);
void fa2_params_from_options(const fa2_options *opt, fa2_params *p);
const char *fa2_dtype_name(fa2_dtype t);

/* ---- problem data (data.c) ---- */
typedef struct {
    fa2_params p;       /* host pointers q, k, v (dense layout) and seqlens_k; o and lse unused */
    uint16_t *q, *k, *v; /* dense [batch, seqlen, heads, head_dim], rounded to dtype */
    int32_t *seqlens_k;  /* [batch], the problem's own copy, or NULL: every sequence has seqlen_k keys */
    /* The same keys in pages (fa2_problem_page), or NULL: the step then reads k and v.
     * The dense k and v stay the truth the fp64 reference reads, so a wrong page
     * lookup in a step cannot hide behind the same lookup in the reference. */
    uint16_t *k_pages, *v_pages; /* [num_pages, page_size, heads_kv, head_dim] */
    int32_t *block_table;        /* [batch][max_pages] */
    int page_size;               /* keys per page, 0 when dense */
} fa2_problem;

/* malloc, or one line naming what could not be allocated and exit FA2_EXIT_RUNTIME. */
void *fa2_xmalloc(size_t bytes, const char *what);

/* Deterministic inputs rounded to the dtype: Q and K from N(0, scale^2), V from N(0, 1). */
void fa2_problem_make(fa2_problem *pr, const fa2_params *shape, uint64_t seed, float scale);
void fa2_problem_free(fa2_problem *pr);
/* Sets p's page fields for page_size-key pages (a power of two, 16 to 256) of the keys
 * p's sequences have (p->seqlens_k, read on the host, or seqlen_k each): max_pages
 * for seqlen_k keys, a pool of every sequence's pages plus batch + 1 that no sequence
 * owns, a table row of max_pages entries, and K's and V's strides: dense rows inside
 * a page, the page stride as the batch stride. The pointers are left as they are. */
void fa2_page_layout(fa2_params *p, int page_size);
/* Copies pr's K and V into pages of page_size keys (fa2_page_layout), the pages of
 * all sequences shuffled through the pool by `seed` (in_order: the pool holds them in the
 * order the sequences read them, batch entry after batch entry: a timing experiment, which
 * a step that ignores the block table would pass); every row no key of a sequence
 * occupies (pages no one owns, the tail of a sequence's last page) holds NaN, and
 * table entries past a sequence's keys name an unowned page, so a key read that is
 * not the sequence's reaches O as NaN. */
void fa2_problem_page(fa2_problem *pr, int page_size, uint64_t seed, int in_order);
/* The params a step is given for pr, on the host: pr->p, paged when pr is. */
void fa2_problem_step_params(const fa2_problem *pr, fa2_params *step);
/* Elements of K (or V) as stored: the page pool when paged, else fa2_numel_kv. */
size_t fa2_numel_kv_stored(const fa2_params *p);
size_t fa2_numel_q(const fa2_params *p);
size_t fa2_numel_kv(const fa2_params *p);
size_t fa2_numel_lse(const fa2_params *p);
/* Query-key pairs one head computes (causal: only the visible ones), the mean over
 * the batch when its sequences have lengths of their own (p->seqlens_k, host). */
double fa2_visible_pairs(const fa2_params *p);
/* 4 * batch * heads_q * visible pairs * head_dim: two GEMMs, 2 flop per MAC. */
double fa2_flops(const fa2_params *p);

/* ---- the fp64 reference and the checker (reference.c, check.c) ---- */
/* Rows the checker looks at: every row for small problems, else a spread sample. */
typedef struct {
    int n;
    int *bh;  /* batch * heads_q + head */
    int *row; /* query row */
} fa2_row_set;

void fa2_rows_all(fa2_row_set *rs, const fa2_params *p);
void fa2_rows_sample(fa2_row_set *rs, const fa2_params *p);
void fa2_rows_free(fa2_row_set *rs);

/* The fp64 reference of the chosen rows, in IEEE arithmetic (a NaN input gives
 * NaN wherever it reaches, fa2.h). */
typedef struct {
    double *o;         /* [rows, head_dim] */
    double *lse;       /* [rows]; -inf for a row that sees no key */
    double *score_mag; /* [rows]: max over the row's visible keys j of scale * sum_c |q_c k_jc|,
                          the size that bounds the fp32 rounding error of any of its scores */
    double *o_spread;  /* [rows, head_dim]: sum_j P_j |V_jc - O_c|, how far O_c moves when the
                          weights P_j change by a factor: by at most 2 e o_spread for exp(+-e) */
} fa2_reference;

void fa2_reference_alloc(fa2_reference *ref, const fa2_row_set *rs, int head_dim);
void fa2_reference_free(fa2_reference *ref);
void fa2_reference_rows(const fa2_problem *pr, const fa2_row_set *rs, fa2_reference *ref);

/* ---- the fp64 forward and backward on whole dense tensors (reference_backward.c) ----
 * double [batch, seqlen, heads, head_dim] tensors, LSE double [batch, heads_q, seqlen_q]
 * (lse may be NULL); only shape's sizes, causal and softmax_scale are read. Dense
 * doubles so a test can perturb any input and take finite differences of the
 * forward, which is what checks the backward; the backward then checks the steps'.
 * The backward recomputes P in fp64 (no LSE in: a step's fp32 LSE would leak its
 * error into the reference) and follows fa2.h: dK and dV sum over a group's query
 * heads, a row that sees no key gets dQ = 0 and adds nothing, NaN as IEEE has it. */
void fa2_ref_forward_f64(const fa2_params *shape, const double *q, const double *k, const double *v, double *o,
                         double *lse);
void fa2_ref_backward_f64(const fa2_params *shape, const double *q, const double *k, const double *v,
                          const double *dout, double *dq, double *dk, double *dv);
/* The same with D = rowsum(dO * O) from a given O (a step's forward output, in the
 * dtype), as FA2 computes it: with peaky scores that rounding of O moves dQ and dK by
 * many units of the dtype, and this is what tells that from a step's own error. */
void fa2_ref_backward_from_o_f64(const fa2_params *shape, const double *q, const double *k, const double *v,
                                 const double *o, const double *dout, double *dq, double *dk, double *dv);

/* The bit pattern O and LSE are filled with before a run: all bits set, a NaN in
 * fp16, bf16 and fp32 that no arithmetic produces (a computed NaN has the sign bit
 * clear), so an element still holding it was never written. */
#define FA2_POISON16 0xffffu
#define FA2_POISON32 0xffffffffu

typedef struct {
    double rel_l2;     /* ||o - ref|| / ||ref|| over the checked rows (finite reference entries) */
    double max_abs;    /* max |o - ref| */
    double o_worst;    /* max of |o - ref| / that element's tolerance: <= 1 passes */
    double lse_max;    /* max |lse - lse_ref| over the rows with a finite reference */
    double lse_worst;  /* max of |lse - lse_ref| / that row's tolerance: <= 1 passes */
    long nonfinite;    /* o or lse entries that are NaN/inf where the reference is finite */
    long special_missed; /* entries where the reference is NaN (or LSE -inf) and the output is not */
    long unwritten;    /* checked o entries still holding the poison */
    int rows_checked;
    int pass;
} fa2_check_result;

/* Tolerances (check.c says why). With e = score_rel * score_mag, the bound on the
 * row's score errors: |O error| <= max_abs + 2 e o_spread per element, the L2
 * error of O over all checked rows <= rel_l2, |LSE error| <= lse_abs + e. */
typedef struct { double rel_l2, max_abs, lse_abs, score_rel; } fa2_tolerance;
fa2_tolerance fa2_tolerance_for(fa2_dtype t);

/* Compares host copies of o (element (b, i, h, c) at o[b * o_batch_stride +
 * i * o_row_stride + h * o_head_stride + c], p's o strides) and lse ([batch,
 * heads_q, seqlen_q], or NULL: not checked) with the reference of the rows in rs. */
fa2_check_result fa2_check(const fa2_params *p, const fa2_row_set *rs, const uint16_t *o, const float *lse,
                           const fa2_reference *ref);

/* Elements of O (every one, by p's o strides) and of lse (if not NULL) that still
 * hold the poison: never written. */
long fa2_count_unwritten(const fa2_params *p, const uint16_t *o, const float *lse);

/* ---- the buffers of one call (buffers.c) ---- */
/* run = pr->p with q, k, v copied to the GPU (on_gpu) or left on the host, o and
 * lse allocated there and poisoned with NaN, and a workspace of workspace_bytes
 * (the step's fa2_workspace_size) allocated there once, so no timed call allocates,
 * and zero-filled once (fa2.h: a step may count in it from call to call). */
void fa2_buffers_make(fa2_params *run, const fa2_problem *pr, int on_gpu, size_t workspace_bytes);
void fa2_buffers_poison(fa2_params *run, int on_gpu);
/* Waits for the step and copies O and LSE to the host. */
void fa2_buffers_fetch(const fa2_params *run, int on_gpu, uint16_t *o_host, float *lse_host);
void fa2_buffers_free(fa2_params *run, int on_gpu);
/* The rows of `mode` (full or sample), their fp64 reference, and the check;
 * o_host and lse_host are dense. */
fa2_check_result fa2_check_problem(const fa2_problem *pr, check_mode mode, const uint16_t *o_host,
                                   const float *lse_host);

/* ---- the backward's buffers and check (buffers.c, check.c) ---- */
/* dO: N(0, 1) rounded to the dtype, dense like O, drawn as data.c draws Q, K and V
 * from a stream of `seed` of its own (they do not change with --backward). */
uint16_t *fa2_dout_make(const fa2_params *p, uint64_t seed);

/* The backward's bound: relative L2 error per tensor against the fp64 backward given
 * the step's own O, in units of the dtype's rounding (check.c says why 8). One source
 * for the harness's check and tests/test_backward.c. */
#define FA2_BWD_TOL_U 8.0
static inline double fa2_unit_roundoff(fa2_dtype t) { return t == FA2_BF16 ? 1.0 / 256 : 1.0 / 2048; }

/* bp = the backward of `run` (the forward's params and buffers, where the step runs),
 * dense strides: dO copied there (on the CPU, dout_host itself), dQ, dK, dV and a
 * workspace of workspace_bytes (the step's fa2_backward_workspace_size) allocated
 * there and poisoned with NaN (all bits set) so that an element never written fails. */
void fa2_bwd_buffers_make(fa2_bwd_params *bp, const fa2_params *run, const uint16_t *dout_host, int on_gpu,
                          size_t workspace_bytes);
/* Waits for the step and copies dQ, dK and dV (dense) to the host. */
void fa2_bwd_buffers_fetch(const fa2_bwd_params *bp, int on_gpu, uint16_t *dq_host, uint16_t *dk_host,
                           uint16_t *dv_host);
/* Frees what fa2_bwd_buffers_make allocated (not the forward's buffers). */
void fa2_bwd_buffers_free(fa2_bwd_params *bp, int on_gpu);

typedef struct {
    double rel_l2[3];    /* dQ, dK, dV: ||x - ref|| / ||ref|| over the entries where both are finite */
    double max_abs[3];   /* max |x - ref| over the same entries */
    double tol;          /* the bound on each rel_l2 (check.c says why) */
    long nonfinite;      /* NaN or inf where the reference is finite */
    long special_missed; /* entries where the reference is NaN (or inf) and the output is not the same */
    long unwritten;      /* entries still holding the poison */
    int pass;
} fa2_bwd_check_result;

/* Multiply-adds of one head-dim product for every visible (query, key) pair of every
 * head: the size of the fp64 reference backward's work (it does about nine of them). */
double fa2_bwd_reference_macs(const fa2_params *p);
/* Dense host tensors: dQ, dK and dV against fa2_ref_backward_from_o_f64 on pr's inputs,
 * dout and the step's own O (o), all as the step saw them. */
fa2_bwd_check_result fa2_check_backward(const fa2_problem *pr, const uint16_t *o, const uint16_t *dout,
                                        const uint16_t *dq, const uint16_t *dk, const uint16_t *dv);

/* ---- device memory and timing (device.c) ---- */
typedef struct {
    char name[128];
    int sm_major, sm_minor, sm_count;
    size_t l2_bytes;
} fa2_device_info;

/* 0 and fills info when a CUDA GPU of sm_80 or newer is usable; otherwise prints
 * one line to stderr naming what is missing and returns FA2_EXIT_NO_DEVICE.
 * Every other failed CUDA call of the harness prints the call and the runtime's
 * reason in one line and exits with FA2_EXIT_RUNTIME. */
int fa2_device_open(fa2_device_info *info, const char *step_name);
size_t fa2_device_free_bytes(void);
void *fa2_device_alloc(size_t bytes);
void fa2_device_free(void *ptr);
void fa2_device_upload(void *dst, const void *src, size_t bytes);
void fa2_device_download(void *dst, const void *src, size_t bytes);
void fa2_device_poison(void *ptr, size_t bytes); /* all bits set: NaN in fp16, bf16 and fp32 */
void fa2_device_zero(void *ptr, size_t bytes);   /* all bits clear: a workspace's counters (fa2.h) */
void fa2_device_sync(void);
/* A stream that does not synchronise with the default stream (cudaStreamNonBlocking). */
void *fa2_stream_create(void);
void fa2_stream_destroy(void *stream);
/* Copies device -> host in the stream's order, then waits for the stream. */
void fa2_stream_download(void *dst, const void *src, size_t bytes, void *stream);

/* Times `iters` calls of launch(ctx) (a forward, a backward) after `warmup` untimed
 * ones. Before each timed call a buffer twice the size of L2 is read (fa2_l2_flush_read),
 * so inputs come from DRAM and the L2 holds no dirty line to write back, then the call
 * alone sits between two events. Writes per-call times in ms into ms_out[iters]. Returns
 * 0, or the first non-zero launch(ctx) returned. */
int fa2_time_gpu(int (*launch)(const void *ctx), const void *ctx, const fa2_device_info *dev, int warmup, int iters,
                 double *ms_out);
/* Reads `bytes` of buf (a multiple of 16) on the GPU with ordinary loads, in the stream's
 * order: fills the L2 with clean lines of it (flush.cu says why not a memset). sink: one
 * device word the kernel may write. */
void fa2_l2_flush_read(const void *buf, size_t bytes, uint32_t *sink, void *stream);

/* ---- small utilities (util.c) ---- */
typedef struct { double median, min, max; } fa2_stats;
fa2_stats fa2_stats_of(double *ms, int n); /* sorts ms in place */
double fa2_wall_ms(void);
void fa2_today(char *buf, size_t len); /* YYYY-MM-DD */

#ifdef __cplusplus
}
#endif
#endif
