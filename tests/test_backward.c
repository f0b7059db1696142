/* test_backward.c - the backward pass on the CPU.
 *
 * 1. The fp64 reference backward (common/reference_backward.c) against central
 *    finite differences of the fp64 forward, on every input element of small
 *    shapes: tails, causal both ways with rows that see no key, GQA and MQA,
 *    peaky scores. Its forward against the harness's fp64 reference, whose
 *    semantics it must share, and rows that see no key get dQ = 0 and change
 *    neither dK nor dV, whatever their Q and dO hold.
 * 2. Step 00's fa2_backward (dQ, dK, dV in fp16 / bf16) against that reference on
 *    the same rounded inputs, and against the fp64 backward that takes D from step
 *    00's O as FA2 does (the tolerance below says why both): tails of every 64-wide
 *    tile, causal with Nq != Nk both ways (dQ rows exactly 0 where a row sees no
 *    key), GQA 4:2, MQA 4:1, decoding, head dims 64 and 128, fp16 and bf16, peaky
 *    scores (scale 30), and a NaN in a row of Q, a row of K or an element of V:
 *    every entry NaN in the exact fp64 reference must be NaN in step 00's, every
 *    finite one finite.
 * The lines starting "#" give the worst errors against their tolerances.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ---- random doubles: splitmix64, Box-Muller ---------------------------------- */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_normal(uint64_t *state)
{
    double u1 = ((rng_next(state) >> 11) + 1) * (1.0 / 9007199254740992.0), u2 = (rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
static double *normal_doubles(size_t n, uint64_t seed, double scale)
{
    double *x = fa2_xmalloc(sizeof(double) * (n ? n : 1), "random doubles");
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(&st);
    return x;
}

static int rows_without_keys(const fa2_params *p) /* causal rows i with i + Nk - Nq < 0 */
{
    if (!p->causal) return 0;
    int shift = p->seqlen_k - p->seqlen_q;
    return shift >= 0 ? 0 : (-shift < p->seqlen_q ? -shift : p->seqlen_q);
}

static fa2_params shape_of(int batch, int hq, int hkv, int nq, int nk, int d, int causal)
{
    fa2_params p = {0};
    p.batch = batch, p.heads_q = hq, p.heads_kv = hkv, p.seqlen_q = nq, p.seqlen_k = nk, p.head_dim = d;
    p.causal = causal, p.softmax_scale = 1.0f / sqrtf((float)d), p.dtype = FA2_FP16;
    return p;
}

static void shape_name(char *name, size_t len, const fa2_params *p)
{
    snprintf(name, len, "B%d H%d/%d Nq%d Nk%d d%d %s", p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k,
             p->head_dim, p->causal ? "causal" : "non-causal");
}

/* ---- 1. the reference against finite differences ------------------------------
 *
 * L = sum(dO * O), so dL/dx is what the backward returns for x = Q, K, V. Central
 * differences (L(x + h) - L(x - h)) / 2h with h = 1e-5 err by
 *  - truncation, h^2 / 6 |L'''|: 1.7e-11 |L'''|; L''' grows with the sizes of
 *    scale * K (for Q) and scale * Q (for K) cubed, about 1e2 for the peaky
 *    inputs (Q, K x 5 at d 16: scale * |row| ~ 5), so ~2e-9;
 *  - rounding, about eps |L| / h with eps = 2^-53 and |L| the size of the terms of
 *    the loss the perturbation touches: L is taken over the one (batch, kv head)
 *    the element belongs to (the rest of the loss does not move), ~sqrt(17 * 4 *
 *    16) ~ 30 at most here, and its terms are each off by a few eps: ~1e-9.
 * The gradients are O(1) (their largest entry per tensor is the scale below), so
 * the central difference should match to ~1e-8 of that scale (measured: 7e-10 at
 * worst); the bound 1e-6 leaves a factor of 100 and is still 10^5 below what a
 * wrong term, sign, factor of scale, causal edge or a missed GQA head produces (an
 * O(1) error). Where the softmax has one key (Nq = Nk = 1) dQ and dK are exactly 0,
 * and so are their differences. */
#define FD_STEP 1e-5
#define FD_TOL 1e-6

typedef struct { int batch, hq, hkv, nq, nk, d, causal; double input_scale; } fd_shape;

static double worst_fd = 0;

/* The (batch b, kv head hk) slice of a dense tensor of `heads` heads into a dense one of
 * `n_heads` heads starting at head h0 (copy in), or back (copy out). */
static void slice(double *dst, const double *src, int batch_b, int rows, int heads, int h0, int n_heads, int d, int out)
{
    for (int i = 0; i < rows; i++)
        for (int h = 0; h < n_heads; h++) {
            double *sub = dst + ((size_t)i * n_heads + h) * d;
            double *full = (double *)src + (((size_t)batch_b * rows + i) * heads + h0 + h) * d;
            if (out) memcpy(full, sub, sizeof(double) * d);
            else memcpy(sub, full, sizeof(double) * d);
        }
}

static double loss_of(const fa2_params *sub, const double *q, const double *k, const double *v, const double *dout,
                      double *o)
{
    fa2_ref_forward_f64(sub, q, k, v, o, NULL);
    double l = 0;
    const size_t n = fa2_numel_q(sub);
    for (size_t i = 0; i < n; i++) l += dout[i] * o[i];
    return l;
}

static void fd_case(fd_shape c, uint64_t seed)
{
    fa2_params p = shape_of(c.batch, c.hq, c.hkv, c.nq, c.nk, c.d, c.causal);
    const size_t nq = fa2_numel_q(&p), nkv = fa2_numel_kv(&p);
    const int d = c.d, group = c.hq / c.hkv;
    double *q = normal_doubles(nq, seed * 4 + 1, c.input_scale), *k = normal_doubles(nkv, seed * 4 + 2, c.input_scale);
    double *v = normal_doubles(nkv, seed * 4 + 3, 1.0), *dout = normal_doubles(nq, seed * 4 + 4, 1.0);
    double *dq = fa2_xmalloc(sizeof(double) * nq, "dQ"), *dk = fa2_xmalloc(sizeof(double) * nkv, "dK");
    double *dv = fa2_xmalloc(sizeof(double) * nkv, "dV");
    double *fq = fa2_xmalloc(sizeof(double) * nq, "dQ by differences"), *fk = fa2_xmalloc(sizeof(double) * nkv, "dK by differences");
    double *fv = fa2_xmalloc(sizeof(double) * nkv, "dV by differences");
    fa2_ref_backward_f64(&p, q, k, v, dout, dq, dk, dv);

    /* The loss of one (batch, kv head): a problem of batch 1, that kv head and its group. */
    fa2_params sub = shape_of(1, group, 1, c.nq, c.nk, d, c.causal);
    const size_t sq = fa2_numel_q(&sub), skv = fa2_numel_kv(&sub);
    for (int b = 0; b < c.batch; b++)
        for (int hk = 0; hk < c.hkv; hk++) {
            double *q0 = malloc(sizeof(double) * sq), *k0 = malloc(sizeof(double) * skv), *v0 = malloc(sizeof(double) * skv);
            double *do0 = malloc(sizeof(double) * sq), *gq = malloc(sizeof(double) * sq), *gk = malloc(sizeof(double) * skv);
            double *gv = malloc(sizeof(double) * skv);
            slice(q0, q, b, c.nq, c.hq, hk * group, group, d, 0);
            slice(do0, dout, b, c.nq, c.hq, hk * group, group, d, 0);
            slice(k0, k, b, c.nk, c.hkv, hk, 1, d, 0);
            slice(v0, v, b, c.nk, c.hkv, hk, 1, d, 0);
            const long long total = (long long)(sq + 2 * skv);
#pragma omp parallel
            {
                double *tq = malloc(sizeof(double) * sq), *tk = malloc(sizeof(double) * skv), *tv = malloc(sizeof(double) * skv);
                double *o = malloc(sizeof(double) * sq);
                memcpy(tq, q0, sizeof(double) * sq), memcpy(tk, k0, sizeof(double) * skv), memcpy(tv, v0, sizeof(double) * skv);
#pragma omp for schedule(dynamic, 16)
                for (long long e = 0; e < total; e++) {
                    double *x = e < (long long)sq ? tq + e : e < (long long)(sq + skv) ? tk + (e - sq) : tv + (e - sq - skv);
                    double *g = e < (long long)sq ? gq + e : e < (long long)(sq + skv) ? gk + (e - sq) : gv + (e - sq - skv);
                    const double x0 = *x;
                    *x = x0 + FD_STEP;
                    const double up = loss_of(&sub, tq, tk, tv, do0, o);
                    *x = x0 - FD_STEP;
                    const double down = loss_of(&sub, tq, tk, tv, do0, o);
                    *x = x0;
                    *g = (up - down) / (2 * FD_STEP);
                }
                free(tq), free(tk), free(tv), free(o);
            }
            slice(gq, fq, b, c.nq, c.hq, hk * group, group, d, 1);
            slice(gk, fk, b, c.nk, c.hkv, hk, 1, d, 1);
            slice(gv, fv, b, c.nk, c.hkv, hk, 1, d, 1);
            free(q0), free(k0), free(v0), free(do0), free(gq), free(gk), free(gv);
        }

    char name[200], why[300];
    shape_name(name, sizeof name, &p);
    if (c.input_scale != 1) snprintf(name + strlen(name), sizeof name - strlen(name), " Q,K x%g", c.input_scale);
    const char *tn[3] = {"dQ", "dK", "dV"};
    const double *an[3] = {dq, dk, dv}, *fd[3] = {fq, fk, fv};
    const size_t ns[3] = {nq, nkv, nkv};
    for (int t = 0; t < 3; t++) {
        double err = 0, mag = 0;
        long bad = 0;
        for (size_t i = 0; i < ns[t]; i++) {
            if (!isfinite(an[t][i]) || !isfinite(fd[t][i])) bad++;
            err = fmax(err, fabs(an[t][i] - fd[t][i]));
            mag = fmax(mag, fabs(an[t][i]));
        }
        const double rel = mag > 0 ? err / mag : err;
        if (rel > worst_fd) worst_fd = rel;
        snprintf(why, sizeof why, "max |analytic - differences| %.2e, %.2e of the largest |%s| %.2e (allowed %.0e), %ld not finite",
                 err, rel, tn[t], mag, FD_TOL, bad);
        report(bad == 0 && rel <= FD_TOL, why, "fp64 reference %s vs finite differences %s", tn[t], name);
    }

    /* Given the fp64 forward's own O, the backward that takes D from a given O is the same one. */
    {
        double *o = fa2_xmalloc(sizeof(double) * nq, "O"), *gq = fa2_xmalloc(sizeof(double) * nq, "dQ");
        double *gk = fa2_xmalloc(sizeof(double) * nkv, "dK"), *gv = fa2_xmalloc(sizeof(double) * nkv, "dV");
        fa2_ref_forward_f64(&p, q, k, v, o, NULL);
        fa2_ref_backward_from_o_f64(&p, q, k, v, o, dout, gq, gk, gv);
        const int same = !memcmp(gq, dq, sizeof(double) * nq) && !memcmp(gk, dk, sizeof(double) * nkv) &&
                         !memcmp(gv, dv, sizeof(double) * nkv);
        report(same, "they differ", "fp64 reference given its own forward's O is the same backward, bit for bit %s", name);
        free(o), free(gq), free(gk), free(gv);
    }

    /* Rows that see no key: dQ exactly 0 (and so are the differences: the forward never
     * reads them); and whatever their Q and dO hold (NaN here), dK and dV do not move. */
    const int empty = rows_without_keys(&p);
    if (empty) {
        long nonzero = 0;
        for (int b = 0; b < c.batch; b++)
            for (int i = 0; i < empty; i++)
                for (int h = 0; h < c.hq; h++)
                    for (int e = 0; e < d; e++) {
                        const size_t at = (((size_t)b * c.nq + i) * c.hq + h) * d + e;
                        nonzero += dq[at] != 0 || fq[at] != 0;
                        q[at] = NAN, dout[at] = NAN;
                    }
        double *dq2 = fa2_xmalloc(sizeof(double) * nq, "dQ"), *dk2 = fa2_xmalloc(sizeof(double) * nkv, "dK");
        double *dv2 = fa2_xmalloc(sizeof(double) * nkv, "dV");
        fa2_ref_backward_f64(&p, q, k, v, dout, dq2, dk2, dv2);
        long moved = 0;
        for (size_t i = 0; i < nkv; i++) moved += memcmp(&dk[i], &dk2[i], sizeof(double)) != 0 || memcmp(&dv[i], &dv2[i], sizeof(double)) != 0;
        for (size_t i = 0; i < nq; i++) moved += memcmp(&dq[i], &dq2[i], sizeof(double)) != 0 && !(dq[i] == 0 && dq2[i] == 0);
        snprintf(why, sizeof why, "%ld dQ entries of those rows not 0, %ld entries changed by NaN in their Q and dO", nonzero, moved);
        report(nonzero == 0 && moved == 0, why, "fp64 reference: %d rows with no key give dQ = 0 and add nothing %s", empty, name);
        free(dq2), free(dk2), free(dv2);
    }
    free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv), free(fq), free(fk), free(fv);
}

/* fa2_ref_forward_f64 computes what the harness's fp64 reference (reference.c) does,
 * on the same rounded inputs: both fp64, so they agree to rounding (1e-12 is 10^4 eps). */
static void forward_matches_harness(int batch, int hq, int hkv, int nq, int nk, int d, int causal)
{
    fa2_params p = shape_of(batch, hq, hkv, nq, nk, d, causal);
    fa2_problem pr;
    fa2_problem_make(&pr, &p, 11 + nq + nk, 1.0f);
    const size_t n_q = fa2_numel_q(&p), n_kv = fa2_numel_kv(&p);
    double *q = fa2_xmalloc(sizeof(double) * n_q, "Q"), *k = fa2_xmalloc(sizeof(double) * n_kv, "K");
    double *v = fa2_xmalloc(sizeof(double) * n_kv, "V"), *o = fa2_xmalloc(sizeof(double) * n_q, "O");
    double *lse = fa2_xmalloc(sizeof(double) * fa2_numel_lse(&p), "LSE");
    for (size_t i = 0; i < n_q; i++) q[i] = fa2_to_float(pr.q[i], p.dtype);
    for (size_t i = 0; i < n_kv; i++) k[i] = fa2_to_float(pr.k[i], p.dtype), v[i] = fa2_to_float(pr.v[i], p.dtype);
    fa2_ref_forward_f64(&p, q, k, v, o, lse);
    fa2_row_set rs;
    fa2_rows_all(&rs, &pr.p);
    fa2_reference ref;
    fa2_reference_alloc(&ref, &rs, d);
    fa2_reference_rows(&pr, &rs, &ref);
    double worst = 0;
    long special = 0;
    for (int r = 0; r < rs.n; r++) {
        const int b = rs.bh[r] / hq, h = rs.bh[r] % hq, i = rs.row[r];
        const double want_lse = ref.lse[r], got_lse = lse[rs.bh[r] * (size_t)nq + i];
        if (isinf(want_lse) || isinf(got_lse)) special += want_lse != got_lse;
        else worst = fmax(worst, fabs(got_lse - want_lse) / fmax(1, fabs(want_lse)));
        for (int c = 0; c < d; c++) {
            const double want = ref.o[(size_t)r * d + c], got = o[(((size_t)b * nq + i) * hq + h) * d + c];
            worst = fmax(worst, fabs(got - want));
            special += (want == 0) != (got == 0) && rows_without_keys(&p) > i;
        }
    }
    char name[200], why[200];
    shape_name(name, sizeof name, &p);
    snprintf(why, sizeof why, "max difference %.2e (allowed 1e-12), %d special values differ", worst, (int)special);
    report(worst <= 1e-12 && special == 0, why, "fp64 forward (dense doubles) vs the harness's fp64 reference %s", name);
    fa2_reference_free(&ref);
    fa2_rows_free(&rs);
    fa2_problem_free(&pr);
    free(q), free(k), free(v), free(o), free(lse);
}

/* ---- 2. step 00's backward against the fp64 reference -------------------------
 *
 * Tolerance, and why. The inputs Q, K, V, dO are rounded to the dtype and the
 * reference sees the same values; what remains is step 00's own rounding, which
 * the GPU steps will share: O (an input to D = rowsum(dO * O)) comes rounded from
 * the forward, P and dS are rounded to the dtype before their products (the tensor
 * cores take 16-bit operands), the rest is fp32, and dQ, dK, dV are rounded on
 * output. Each is a relative error of at most u = 2^-11 (fp16, 4.9e-4) or 2^-8
 * (bf16, 3.9e-3) per element, mostly random in sign, so the relative L2 error of a
 * tensor sits near 1-2 u. The bound is 8 u (fp16 3.9e-3, bf16 3.1e-2): a wrong
 * row, head or tile of a 100-row tensor moves it by ~0.1 or more.
 * One of those roundings is not the step's to avoid: D = rowsum(dO * O) is taken
 * from O in the dtype, as FA2 takes it (the forward keeps O and LSE only). Where a
 * row's weight sits on one key, dP - D nearly cancels and O's rounding, u |dO||O|
 * in D, moves dQ and dK by far more than u of their size: at scale 30 the fp64
 * backward given step 00's O is off the exact gradient by 2 to 90 u depending on
 * the seed (one row that is one-hot enough decides it), and step 00 matches that
 * fp64 backward to 0.4-1.7 u. So each tensor must be within 8 u of the fp64
 * backward given the step's O (the step's own error), and within 8 u plus that
 * backward's own distance from the exact gradient (the part the dtype's O costs,
 * ~0.1 u on N(0,1) inputs) of the exact fp64 gradient. The O it is given is the
 * step's forward output, checked against the fp64 forward as test_cpu does. */

typedef struct {
    int batch, hq, hkv, nq, nk, d, causal;
    fa2_dtype t;
    float scale;  /* multiplies Q and K */
    nan_site nan; /* where a NaN goes (batch 0, head 0), test_util.h */
    int nan_row, nan_col;
} step_shape;

/* [dtype][dQ, dK, dV]: relative L2 errors of step 00 against the exact fp64 gradient
 * on N(0,1) inputs and on peaky ones, against the fp64 backward given its O, and the
 * distance of that backward from the exact gradient */
static double worst_exact[2][3], worst_exact_peaky[2][3], worst_from_o[2][3], worst_o_cost[2][3];

typedef struct {
    double rel_l2;
    long nan_missed; /* NaN in the reference, a number in the step's */
    long nonfinite;  /* finite in the reference, NaN or inf in the step's */
    long unwritten;  /* still the poison */
    long ref_nans;
} compare_result;

/* ||x - ref|| / ||ref|| over the entries where both are finite */
static double rel_l2_finite(const double *x, const double *ref, size_t n)
{
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && isfinite(ref[i])) e2 += (x[i] - ref[i]) * (x[i] - ref[i]), r2 += ref[i] * ref[i];
    return r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
}

static compare_result compare(const uint16_t *x, const double *ref, size_t n, fa2_dtype t)
{
    compare_result r = {0};
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        const double got = fa2_to_float(x[i], t), want = ref[i];
        if (x[i] == FA2_POISON16) r.unwritten++;
        if (isnan(want)) {
            r.ref_nans++;
            r.nan_missed += !isnan(got);
        } else if (!isfinite(got)) {
            r.nonfinite += x[i] != FA2_POISON16;
        } else {
            e2 += (got - want) * (got - want);
            r2 += want * want;
        }
    }
    r.rel_l2 = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
    return r;
}

static double *to_doubles(const uint16_t *x, size_t n, fa2_dtype t)
{
    double *y = fa2_xmalloc(sizeof(double) * (n ? n : 1), "an fp64 copy");
    for (size_t i = 0; i < n; i++) y[i] = fa2_to_float(x[i], t);
    return y;
}

static void step_case(step_shape s)
{
    fa2_params p = shape_of(s.batch, s.hq, s.hkv, s.nq, s.nk, s.d, s.causal);
    p.dtype = s.t;
    fa2_problem pr;
    fa2_problem_make(&pr, &p, 5 + s.nq * 37 + s.nk * 3 + s.d, s.scale);
    put_nan(&pr, s.nan, s.nan_row, s.nan_col);
    const size_t nq = fa2_numel_q(&pr.p), nkv = fa2_numel_kv(&pr.p);

    char name[200], why[400];
    shape_name(name, sizeof name, &pr.p);
    snprintf(name + strlen(name), sizeof name - strlen(name), " %s", fa2_dtype_name(s.t));
    if (s.scale != 1.0f) snprintf(name + strlen(name), sizeof name - strlen(name), " scale %g", (double)s.scale);
    if (s.nan) snprintf(name + strlen(name), sizeof name - strlen(name), " %s %d", nan_site_names[s.nan], s.nan_row);

    /* step 00's forward: O in the dtype and LSE, what its backward reads */
    fa2_params run;
    fa2_buffers_make(&run, &pr, 0, 0);
    int rc_fwd = fa2_forward(&run, NULL);

    /* dO ~ N(0, 1), rounded to the dtype; the reference reads the same values */
    uint16_t *dout = fa2_xmalloc(nq * 2, "dO");
    uint64_t st = 0x0d0 + s.nq * 1000003ull + s.nk;
    for (size_t i = 0; i < nq; i++) dout[i] = fa2_from_float((float)rng_normal(&st), s.t);

    fa2_bwd_params bp;
    memset(&bp, 0, sizeof bp);
    bp.fwd = run;
    bp.dout = dout;
    uint16_t *dq = fa2_xmalloc(nq * 2, "dQ"), *dk = fa2_xmalloc(nkv * 2, "dK"), *dv = fa2_xmalloc(nkv * 2, "dV");
    memset(dq, 0xff, nq * 2), memset(dk, 0xff, nkv * 2), memset(dv, 0xff, nkv * 2); /* FA2_POISON16 */
    bp.dq = dq, bp.dk = dk, bp.dv = dv;
    fa2_set_dense_bwd_strides(&bp);
    const size_t ws = fa2_backward_workspace_size(&bp);
    void *workspace = NULL;
    if (ws && posix_memalign(&workspace, 16, ws) != 0) workspace = NULL;
    if (workspace) memset(workspace, 0xff, ws); /* NaN: a step must not count on a zeroed workspace */
    bp.fwd.workspace = workspace, bp.fwd.workspace_bytes = ws;
    char refused[200] = "";
    int rc = fa2_backward_supports(&bp, refused, sizeof refused) ? fa2_backward(&bp, NULL) : FA2_ERR_UNSUPPORTED;

    /* the O (and LSE) the backward was given: step 00's forward, as test_cpu checks it */
    uint16_t *o16 = fa2_xmalloc(nq * 2, "O");
    float *lse = fa2_xmalloc(fa2_numel_lse(&pr.p) * sizeof(float), "LSE");
    fa2_buffers_fetch(&run, 0, o16, lse);
    fa2_check_result fc = fa2_check_problem(&pr, CHECK_FULL, o16, lse);
    snprintf(why, sizeof why, "rc %d rel_l2 %.2e max_abs %.2e lse %.2e nonfinite %ld missed %ld unwritten %ld", rc_fwd,
             fc.rel_l2, fc.max_abs, fc.lse_max, fc.nonfinite, fc.special_missed, fc.unwritten);
    report(rc_fwd == 0 && fc.pass, why, "step00 forward O and LSE, the backward's inputs, vs fp64 %s", name);

    /* the fp64 references on the same rounded Q, K, V, dO: exact, and with D from step 00's O */
    double *q64 = to_doubles(pr.q, nq, s.t), *k64 = to_doubles(pr.k, nkv, s.t), *v64 = to_doubles(pr.v, nkv, s.t);
    double *do64 = to_doubles(dout, nq, s.t), *o64 = to_doubles(o16, nq, s.t);
    double *rq = fa2_xmalloc(sizeof(double) * nq, "dQ"), *rk = fa2_xmalloc(sizeof(double) * nkv, "dK");
    double *rv = fa2_xmalloc(sizeof(double) * nkv, "dV"), *gq = fa2_xmalloc(sizeof(double) * nq, "dQ");
    double *gk = fa2_xmalloc(sizeof(double) * nkv, "dK"), *gv = fa2_xmalloc(sizeof(double) * nkv, "dV");
    fa2_ref_backward_f64(&pr.p, q64, k64, v64, do64, rq, rk, rv);
    fa2_ref_backward_from_o_f64(&pr.p, q64, k64, v64, o64, do64, gq, gk, gv);

    const char *tn[3] = {"dQ", "dK", "dV"};
    const uint16_t *out[3] = {dq, dk, dv};
    const double *ref[3] = {rq, rk, rv}, *ref_o[3] = {gq, gk, gv};
    const size_t ns[3] = {nq, nkv, nkv};
    const double tol = FA2_BWD_TOL_U * fa2_unit_roundoff(s.t);
    long ref_nans = 0;
    compare_result cr[3];
    for (int t = 0; t < 3; t++) {
        /* NaN and poison against the exact reference, the L2 error against both */
        cr[t] = compare(out[t], ref[t], ns[t], s.t);
        const compare_result co = compare(out[t], ref_o[t], ns[t], s.t);
        const double o_cost = rel_l2_finite(ref_o[t], ref[t], ns[t]), allowed = tol + o_cost;
        ref_nans += cr[t].ref_nans;
        double *worst = s.scale != 1.0f ? &worst_exact_peaky[s.t][t] : &worst_exact[s.t][t];
        *worst = fmax(*worst, cr[t].rel_l2);
        worst_from_o[s.t][t] = fmax(worst_from_o[s.t][t], co.rel_l2);
        worst_o_cost[s.t][t] = fmax(worst_o_cost[s.t][t], o_cost);
        snprintf(why, sizeof why,
                 "rc %d%s%s; rel_l2 %.2e against the fp64 backward given its O (allowed %.2e = %g u), %.2e against the "
                 "exact gradient (allowed %.2e: %g u + %.2e, what O in the dtype costs); NaN missed %ld, non-finite %ld, unwritten %ld",
                 rc, *refused ? " " : "", refused, co.rel_l2, tol, FA2_BWD_TOL_U, cr[t].rel_l2, allowed, FA2_BWD_TOL_U, o_cost,
                 cr[t].nan_missed, cr[t].nonfinite, cr[t].unwritten);
        report(rc == 0 && co.rel_l2 <= tol && cr[t].rel_l2 <= allowed && !cr[t].nan_missed && !cr[t].nonfinite &&
                   !cr[t].unwritten,
               why, "step00 backward %s vs fp64 %s", tn[t], name);
    }

    const int empty = rows_without_keys(&pr.p);
    if (empty) {
        long nonzero = 0;
        for (int b = 0; b < s.batch; b++)
            for (int i = 0; i < empty; i++)
                for (int e = 0; e < s.hq * s.d; e++)
                    nonzero += fa2_to_float(dq[((size_t)b * s.nq + i) * s.hq * s.d + e], s.t) != 0.0f;
        snprintf(why, sizeof why, "%ld entries of those rows are not 0", nonzero);
        report(nonzero == 0, why, "step00 backward: %d rows with no visible key give dQ = 0 %s", empty, name);
    }

    if (s.nan) {
        /* The reference's reach must be what fa2.h says before it can be the truth:
         * a NaN Q row i (head 0) gives NaN in dQ row i and in every dK, dV row of a
         * key row i sees (kv head 0), and nowhere else. */
        if (s.nan == NAN_Q_ROW) {
            long want_kv = 0;
            const int vis = s.causal ? s.nan_row + s.nk - s.nq + 1 : s.nk;
            want_kv = (long)(vis < 0 ? 0 : vis > s.nk ? s.nk : vis) * s.d;
            snprintf(why, sizeof why, "the reference has %ld, %ld, %ld NaN in dQ, dK, dV (want %d, %ld, %ld)",
                     cr[0].ref_nans, cr[1].ref_nans, cr[2].ref_nans, s.d, want_kv, want_kv);
            report(cr[0].ref_nans == s.d && cr[1].ref_nans == want_kv && cr[2].ref_nans == want_kv, why,
                   "fp64 reference backward: a NaN row of Q reaches its dQ row and the dK, dV rows it sees %s", name);
        } else {
            snprintf(why, sizeof why, "the reference has no NaN: the NaN reaches nothing, and the case proves nothing");
            report(ref_nans > 0, why, "step00 backward %s reaches %ld reference entries", name, ref_nans);
        }
    }

    fa2_buffers_free(&run, 0);
    fa2_problem_free(&pr);
    free(workspace), free(dout), free(dq), free(dk), free(dv);
    free(q64), free(k64), free(v64), free(do64), free(o64), free(rq), free(rk), free(rv), free(gq), free(gk), free(gv);
    free(o16), free(lse);
}

int main(void)
{
    /* 1. the reference */
    forward_matches_harness(2, 4, 2, 17, 9, 16, 1);
    forward_matches_harness(1, 3, 1, 9, 17, 8, 1);
    forward_matches_harness(2, 2, 2, 33, 33, 64, 0);

    static const fd_shape fd_shapes[] = {
        {1, 2, 2, 1, 1, 8, 0, 1},   {1, 2, 2, 1, 1, 8, 1, 1},   {2, 4, 2, 5, 5, 8, 0, 1},  {2, 4, 2, 5, 5, 8, 1, 1},
        {1, 3, 1, 17, 9, 16, 0, 1}, {1, 3, 1, 17, 9, 16, 1, 1}, {2, 2, 2, 9, 17, 16, 0, 1}, {2, 2, 2, 9, 17, 16, 1, 1},
        {1, 3, 1, 1, 17, 8, 1, 1},  /* one query row: decoding */
        {1, 4, 2, 17, 9, 16, 1, 5}, {2, 2, 2, 9, 17, 8, 0, 5}, /* peaky: Q, K x 5 */
    };
    for (size_t i = 0; i < sizeof fd_shapes / sizeof *fd_shapes; i++) fd_case(fd_shapes[i], 100 + i);

    /* 2. step 00 */
    static const int seqs[][2] = {{1, 1}, {1, 65}, {63, 65}, {65, 63}, {130, 200}, {200, 130}};
    for (size_t i = 0; i < sizeof seqs / sizeof *seqs; i++)
        for (int causal = 0; causal < 2; causal++) {
            step_shape s = {1, 2, 2, seqs[i][0], seqs[i][1], i % 2 ? 128 : 64, causal, (fa2_dtype)((i + causal) % 2), 1.0f, NAN_NONE, 0, 0};
            step_case(s);
        }
    step_shape gqa[] = {
        {2, 4, 2, 70, 90, 64, 1, FA2_BF16, 1.0f, NAN_NONE, 0, 0},
        {1, 4, 2, 130, 66, 128, 0, FA2_FP16, 1.0f, NAN_NONE, 0, 0},
        {1, 4, 1, 100, 150, 64, 1, FA2_FP16, 1.0f, NAN_NONE, 0, 0},  /* MQA */
        {2, 4, 1, 150, 100, 128, 1, FA2_BF16, 1.0f, NAN_NONE, 0, 0}, /* MQA, 50 rows with no key */
        {2, 8, 2, 4, 2000, 128, 1, FA2_BF16, 1.0f, NAN_NONE, 0, 0},  /* decode: 4 query rows, 32 key tiles */
    };
    for (size_t i = 0; i < sizeof gqa / sizeof *gqa; i++) step_case(gqa[i]);

    /* Peaky: scores in the thousands, one key takes nearly all of a row's weight. */
    for (int t = 0; t < 2; t++)
        for (int causal = 0; causal < 2; causal++) {
            step_shape peaky = {1, 2, 1, 150, 200, 128, causal, (fa2_dtype)t, 30.0f, NAN_NONE, 0, 0};
            step_case(peaky);
        }

    /* NaN (batch 0, head 0): a Q row; a K row that later query rows see and earlier
     * ones do not; a V element of key 0, which every row sees. */
    for (int t = 0; t < 2; t++) {
        step_shape q_nan = {1, 2, 2, 100, 100, 64, 1, (fa2_dtype)t, 1.0f, NAN_Q_ROW, 50, 0};
        step_shape q_nan2 = {1, 4, 2, 90, 70, 64, 0, (fa2_dtype)t, 1.0f, NAN_Q_ROW, 3, 0};
        step_shape k_nan = {1, 2, 2, 100, 130, 64, 1, (fa2_dtype)t, 1.0f, NAN_K_ROW, 97, 0};
        step_shape v_nan = {1, 2, 1, 90, 100, 128, t, (fa2_dtype)t, 1.0f, NAN_V_ELEMENT, 0, 5};
        step_case(q_nan);
        step_case(q_nan2);
        step_case(k_nan);
        step_case(v_nan);
    }

    printf("# backward: fp64 reference vs finite differences: worst %.1e of the gradient's scale (allowed %.0e)\n",
           worst_fd, FD_TOL);
    for (int t = 0; t < 2; t++)
        printf("# backward: step 00 %s, worst rel_l2 dQ dK dV: vs exact fp64 %.1e %.1e %.1e (peaky %.1e %.1e %.1e), "
               "vs fp64 given its O %.1e %.1e %.1e (allowed %.1e); O in the dtype costs up to %.1e %.1e %.1e\n",
               fa2_dtype_name((fa2_dtype)t), worst_exact[t][0], worst_exact[t][1], worst_exact[t][2], worst_exact_peaky[t][0],
               worst_exact_peaky[t][1], worst_exact_peaky[t][2], worst_from_o[t][0], worst_from_o[t][1], worst_from_o[t][2],
               FA2_BWD_TOL_U * fa2_unit_roundoff((fa2_dtype)t), worst_o_cost[t][0], worst_o_cost[t][1], worst_o_cost[t][2]);
    return test_failures ? 1 : 0;
}
