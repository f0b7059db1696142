/* backward_wgmma - the operand layouts of a Hopper (sm_90a) backward on wgmma, checked on
 * the CPU before the kernel exists: for each of the five products of a step, the wgmma
 * shape, where its A and B come from (registers: which accumulators; shared memory: which
 * tile, K-major or MN-major, the descriptor's start, leading and stride byte offsets over
 * the 128-byte-swizzled slabs TMA writes), which warpgroup issues it, and what it needs from
 * the others. --check emulates every descriptor and register map element by element.
 *
 * FlashAttention-3's choices this starts from (Dao-AILab/flash-attention, hopper/, the tree
 * of commit 0251105a; facts only, no code):
 *  - tiles, flash_bwd_launch_template.h (run_mha_bwd_hdim64 / _hdim128, Arch >= 90): d64
 *    128 queries x 128 keys; d128 64 x 128 with a causal mask, 80 x 128 without; 2 MMA
 *    warpgroups, 2 stages of Q and of dO, 2 of dS; SdP_swapAB = true at both (S and dP
 *    computed transposed, keys as the wgmma M); dQ_swapAB only at d128 non-causal;
 *  - mainloop_bwd_sm90_tma_gmma_ws.hpp: Mma_dKV_is_RS (AtomLayoutMSdP == 1, the dK/dV atom
 *    spread over both warpgroups, SdP_swapAB, !dKV_swapAB): dV and dK take P^T and dS^T
 *    from registers, and then no P tile exists in shared memory (SmemP_t is empty); dS is
 *    written to shared memory K-major (PdS_Major = K) for dQ = dS K; a named barrier (PdS)
 *    of the 256 MMA threads, after fence_view_async_shared, sits between the dS stores and
 *    the dQ wgmma; dQ is accumulated in fp32 by staging each warpgroup's dQ in shared memory
 *    and an SM90_BULK_REDUCE_ADD (cp.reduce.async.bulk .add.f32) into the dQaccum workspace
 *    when head dim < 256 (dQacc_use_TMA), atomicAdd of float4 otherwise; the staging buffer
 *    is handed between each MMA warpgroup and the producer's second warp by the named
 *    barriers dQFullWG1+w / dQEmptyWG1+w of 128 + 32 threads;
 *  - flash_bwd_kernel_sm90.h: one load warpgroup (warp 0: TMA of K, V once and of Q, dO,
 *    LSE, dPsum per step; warp 1: the dQ reduce-add), registers 24 for it and 240 for the MMA
 *    warpgroups (2 of them).
 *
 * THE PLAN for this repository's kernel, as these layouts give it (plan "swap", the default):
 *  1. Block = one key block of 128 keys (K, V loaded once by TMA) x the query blocks that see
 *     it, as step 14; 3 warpgroups, 384 threads: WG 0 producer (warp 0 TMA, warp 1 dQ reduce),
 *     WG 1 and WG 2 consumers, consumer c owns keys 64c..64c+63 of the block: dK, dV for those
 *     keys in registers (64 x D fp32 each: 2 x 32 regs per thread at d64, 2 x 64 at d128).
 *  2. Producer: K, V on one mbarrier at the start; per step Q + LSE on q_full[stage], dO + D
 *     on do_full[stage] (2 stages each, expect_tx bytes); consumers release q_empty / do_empty
 *     (count 2 warpgroups) when dK (reads Q) and dV (reads dO) of that stage have completed.
 *  3. Per step, in each consumer: S^T = K_c Q^T and dP^T = V_c dO^T (both operands K-major from
 *     the TMA slabs), P^T = exp2(S^T scale log2e - LSE) (LSE per column: per query), dS^T = P^T
 *     (dP^T - D); dV += P^T dO (A: S^T's accumulators, the step 09 register reuse; B: dO
 *     MN-major); dS^T stored (stmatrix .trans from dK's register A, the slab swizzle) as dS [query][key];
 *     fence.proxy.async + named barrier (256 consumer threads); dQ part = dS K (A: dS K-major,
 *     both warpgroups' keys; B: K MN-major); dK += dS^T Q (A: dP^T's accumulators; B: Q MN-major).
 *     Named barriers: 1 = dS stored (256 consumer threads); 2 + c = dq_full[c], 4 + c =
 *     dq_empty[c] (128 + 32 threads: consumer c and the producer's warp 1). A consumer waits on
 *     its dQ wgmma (wait_group) before the next step's dS barrier, so with 2 dS stages the
 *     stage written in step i + 2 is no longer read by step i's dQ (FA3's reasoning for
 *     kStages_dS = 2, mainloop_bwd_sm90_tma_gmma_ws.hpp, comment above its PdS barrier).
 *     Accumulators per consumer thread (swap): dV + dK 2 x D/2, S^T + dP^T 2 x BM/2, dQ 32: 224 fp32 at
 *     both dims (d64: 64 + 128 + 32; d128: 128 + 64 + 32), under FA3's 240 (setmaxnreg).
 *  4. dQ: each consumer's dQ part (64 x 64 fp32 at d128: queries x half of d; 64 queries x 64
 *     at d64) is stored to its staging buffer (16 KB), bar.arrive dq_full[c] (160 threads), the
 *     producer's warp 1 issues cp.reduce.async.bulk.global.shared::cta.add.f32 of the 16 KB,
 *     waits on its bulk group and bar.arrive dq_empty[c]. The workspace holds dQ in the
 *     staging order (fragment order), which the convert kernel undoes.
 *  5. Two options to measure: (a) "noswap" (--plan noswap): S = Q K^T with queries as M,
 *     P and dS both through shared memory read back as MN-major (transposing) A for dV and dK,
 *     dQ from dS's accumulators in registers, one dQ partial per consumer (twice the reduce
 *     bytes); against "swap" (only dS through shared memory); (b) dQ by TMA reduce-add of a
 *     staged tile against red.global.add(.v4).f32 straight from the accumulators (no staging
 *     buffer, no dq_full/dq_empty barriers, 4 to 16 times the instructions).
 *
 * What the --check proves and what it does not: the maps of layouts.h (the register-A reuse
 * of wgmma_fragments, the slab swizzle that verify_tma checks TMA writes) and a model of the
 * 128-byte-swizzle descriptor address (below) put every operand element where the product's
 * math needs it. The descriptor model is the one verify_wgmma checks on the GPU for K-major
 * A and B and MN-major B; verify_wgmma_backward runs this plan's own descriptors (d128: MN-major B
 * from a later slab, MN-major A as the noswap plan's P^T, the register reuse, the dS handoff and
 * the dQ bulk reduce-add) on the GPU. */
#include "tool.h"
#include "layouts.h"

static const char usage[] =
    "usage: backward_wgmma [--dim 64|128] [--plan swap|noswap] [--format text|csv|stmatrix] [--check]\n"
    "The five products of a Hopper backward step on wgmma (S, dP, dV, dK, dQ): shape, A and B\n"
    "(registers or a shared-memory tile, K-major or MN-major, descriptor start / LBO / SBO over\n"
    "128-byte-swizzled slabs), the issuing warpgroup, what it needs from the others, and the\n"
    "shared-memory budget of the tile against 227 KB.\n"
    "  --dim      64 or 128 (default): 128 queries x 128 keys at d64, 64 x 128 at d128 (swap)\n"
    "  --plan     swap (default): S^T and dP^T with keys as M, P^T and dS^T reused from registers, dS\n"
    "             through shared memory for dQ; noswap: S and dP with queries as M, P and dS through\n"
    "             shared memory read MN-major for dV and dK, dQ from registers (64 x 128 at both dims)\n"
    "  --format csv: one line per operand of each product and consumer warpgroup; stmatrix (plan swap):\n"
    "             one line per dS element consumer 0 stores at k-step 0 (16 queries): the lane and register\n"
    "             that hold it, the lane whose row address stmatrix.x4.trans writes it at, its byte offset\n"
    "  --check    emulate every operand map element by element, in both plans at both dims\n";

enum {
    BKEYS = 128,                 /* keys per block, both plans, both dims */
    CONSUMERS = 2,               /* consumer warpgroups; consumer c owns keys 64c.. (swap) */
    STAGES_QDO = 2, STAGES_DS = 2,
    SMEM_LIMIT = 227 * 1024,     /* what one block may have on sm_90 */
    SW_ROW = 128, SW_ATOM = 1024,/* 128-byte swizzle: rows of 128 bytes, 8-row atoms */
    MAX_ROWS = 128, MAX_COLS = 128,
    PRODUCTS = 5,
};

typedef enum { M_Q, M_K, M_V, M_DO, M_P, M_DS, MATRICES } matrix;
static const char *matrix_name[MATRICES] = {"Q", "K", "V", "dO", "P", "dS"};

/* An element of the block's math, in canonical orientation: Q, dO [query][d], K, V [key][d],
 * P, dS [query][key] (block-local indices). */
typedef struct {
    int mat, row, col;
} elem;

static elem el(int mat, int row, int col)
{
    elem e = {mat, row, col};
    return e;
}
static int elem_eq(elem a, elem b) { return a.mat == b.mat && a.row == b.row && a.col == b.col; }

typedef enum { PLAN_SWAP, PLAN_NOSWAP } plan_kind;
typedef struct {
    int dim, bm, plan;
} config;

static config make_config(int dim, int plan)
{
    config c = {dim, plan == PLAN_SWAP && dim == 64 ? 128 : 64, plan};
    return c;
}

/* P / dS stages: 2 (FA3's Stages_dS at d64 and d128), 1 for noswap at d128, where two stages of
 * both P and dS and the two dQ staging buffers would not fit (263240 bytes) */
static int stages_ds(const config *c) { return c->plan == PLAN_NOSWAP && c->dim == 128 ? 1 : STAGES_DS; }

static int tile_rows(const config *c, int mat) { return mat == M_K || mat == M_V ? BKEYS : c->bm; }
static int tile_cols(const config *c, int mat) { return mat == M_P || mat == M_DS ? BKEYS : c->dim; }

/* The descriptor model (the address a 128-byte-swizzle descriptor reaches, and the descriptor the
 * kernel builds for an operand of a slab tile) lives in layouts.h, where verify_wgmma_backward
 * runs the same descriptors on the GPU. */

/* ---- the products ---- */

typedef enum { SRC_SMEM, SRC_REGS } source;
typedef struct {
    source src;
    int mat;        /* SRC_SMEM: the tile */
    int kmajor;     /* SRC_SMEM */
    int product;    /* SRC_REGS: whose accumulators (after the elementwise step) */
} operand_spec;

typedef struct {
    const char *name, *math;
    operand_spec a, b;
} product_spec;

enum { P_S, P_DP, P_DV, P_DK, P_DQ };

static product_spec product(const config *c, int p)
{
    int swap = c->plan == PLAN_SWAP;
    product_spec s;
    operand_spec smem_k = {SRC_SMEM, 0, 1, -1}, smem_mn = {SRC_SMEM, 0, 0, -1}, regs = {SRC_REGS, -1, -1, 0};
    switch (p) {
    case P_S:
        s.name = swap ? "S^T = K Q^T" : "S = Q K^T", s.math = "P = exp2(S scale log2e - LSE)";
        s.a = smem_k, s.a.mat = swap ? M_K : M_Q;
        s.b = smem_k, s.b.mat = swap ? M_Q : M_K;
        break;
    case P_DP:
        s.name = swap ? "dP^T = V dO^T" : "dP = dO V^T", s.math = "dS = P (dP - D)";
        s.a = smem_k, s.a.mat = swap ? M_V : M_DO;
        s.b = smem_k, s.b.mat = swap ? M_DO : M_V;
        break;
    case P_DV:
        s.name = "dV += P^T dO", s.math = "";
        if (swap) s.a = regs, s.a.product = P_S;
        else s.a = smem_mn, s.a.mat = M_P;
        s.b = smem_mn, s.b.mat = M_DO;
        break;
    case P_DK:
        s.name = "dK += dS^T Q", s.math = "";
        if (swap) s.a = regs, s.a.product = P_DP;
        else s.a = smem_mn, s.a.mat = M_DS;
        s.b = smem_mn, s.b.mat = M_Q;
        break;
    default:
        s.name = "dQ += dS K", s.math = "";
        if (swap) s.a = smem_k, s.a.mat = M_DS;
        else s.a = regs, s.a.product = P_DP;
        s.b = smem_mn, s.b.mat = M_K;
        break;
    }
    return s;
}

/* The geometry each consumer warpgroup w gives a product: its n and k-steps. */
static int product_n(const config *c, int p)
{
    switch (p) {
    case P_S: case P_DP: return c->plan == PLAN_SWAP ? c->bm : BKEYS / CONSUMERS;
    case P_DV: case P_DK: return c->dim;
    default: return c->plan == PLAN_SWAP && c->bm < CONSUMERS * WG_M ? c->dim / CONSUMERS : c->dim;
    }
}
static int product_ksteps(const config *c, int p)
{
    switch (p) {
    case P_S: case P_DP: return c->dim / WG_K;
    case P_DV: case P_DK: return c->bm / WG_K;
    default: return (c->plan == PLAN_SWAP ? BKEYS : BKEYS / CONSUMERS) / WG_K;
    }
}
/* swap dQ: the warpgroups split dQ's rows where there are 128 (d64), else its columns (d128) */
static int dq_row0(const config *c, int w) { return c->plan == PLAN_SWAP && c->bm >= CONSUMERS * WG_M ? WG_M * w : 0; }
static int dq_col0(const config *c, int w)
{
    return c->plan == PLAN_SWAP && c->bm < CONSUMERS * WG_M ? c->dim / CONSUMERS * w : 0;
}

/* What the math needs: A[m][k] and B[k][n] of k-step s of warpgroup w (written from the
 * products' formulas alone, independent of any layout). */
static elem need_a(const config *c, int p, int w, int s, int m, int k)
{
    int swap = c->plan == PLAN_SWAP, key0 = WG_M * w, kk = WG_K * s + k;
    switch (p) {
    case P_S: return swap ? el(M_K, key0 + m, kk) : el(M_Q, m, kk);
    case P_DP: return swap ? el(M_V, key0 + m, kk) : el(M_DO, m, kk);
    case P_DV: return el(M_P, kk, key0 + m);  /* P^T[key][query] = P[query][key] */
    case P_DK: return el(M_DS, kk, key0 + m); /* dS^T[key][query] */
    default: return swap ? el(M_DS, dq_row0(c, w) + m, kk) : el(M_DS, m, key0 + kk);
    }
}

static elem need_b(const config *c, int p, int w, int s, int k, int n)
{
    int swap = c->plan == PLAN_SWAP, key0 = WG_M * w, kk = WG_K * s + k;
    switch (p) {
    case P_S: return swap ? el(M_Q, n, kk) : el(M_K, key0 + n, kk); /* B[k][n] = Q^T or K^T */
    case P_DP: return swap ? el(M_DO, n, kk) : el(M_V, key0 + n, kk);
    case P_DV: return el(M_DO, kk, n);
    case P_DK: return el(M_Q, kk, n);
    default: return swap ? el(M_K, kk, dq_col0(c, w) + n) : el(M_K, key0 + kk, n);
    }
}

/* The element accumulator (row, col) of product p in warpgroup w holds after the elementwise
 * step (S -> P, dP -> dS); dV, dK, dQ hold their outputs (mat -1, not read as operands). */
static elem acc_elem(const config *c, int p, int w, int row, int col)
{
    int swap = c->plan == PLAN_SWAP, key0 = WG_M * w, mat = p == P_S ? M_P : p == P_DP ? M_DS : -1;
    return swap ? el(mat, col, key0 + row) : el(mat, row, key0 + col);
}

/* Where the kernel points the descriptor of a shared-memory operand: the tile row and column
 * its (mn, k) = (0, 0) sits at, for warpgroup w and k-step s. This is the layout choice the
 * check tests against need_a / need_b. */
static void operand_origin(const config *c, int p, int is_a, int w, int s, int *r0, int *c0)
{
    int swap = c->plan == PLAN_SWAP, key0 = WG_M * w, k0 = WG_K * s;
    switch (p) {
    case P_S: case P_DP:
        *r0 = swap == is_a ? key0 : 0, *c0 = k0; /* the key-indexed operand starts at the WG's keys */
        return;
    case P_DV: case P_DK:
        *r0 = k0, *c0 = is_a ? key0 : 0;   /* P^T / dS^T (noswap) and dO / Q: k = query along rows */
        return;
    default:
        if (is_a) *r0 = dq_row0(c, w), *c0 = k0;            /* swap: dS K-major */
        else *r0 = (swap ? 0 : key0) + k0, *c0 = dq_col0(c, w); /* K MN-major */
        return;
    }
}

/* ---- shared-memory tiles: the image TMA (or the consumers' stores) lay down ---- */

typedef struct {
    int rows, cols, collisions, out_of_tile;
    int at[MAX_ROWS * MAX_COLS];  /* byte offset / 2 -> row * cols + col, -1: nothing */
} tile_image;

static void image_build(tile_image *t, int rows, int cols)
{
    t->rows = rows, t->cols = cols, t->collisions = 0, t->out_of_tile = 0;
    for (int i = 0; i < rows * cols; i++) t->at[i] = -1;
    for (int r = 0; r < rows; r++)
        for (int col = 0; col < cols; col++) {
            int off = tma_byte_offset(r, col, rows);
            if (off < 0 || off >= rows * cols * ELEM_BYTES || off % ELEM_BYTES) t->out_of_tile++;
            else if (t->at[off / ELEM_BYTES] >= 0) t->collisions++;
            else t->at[off / ELEM_BYTES] = r * cols + col;
        }
}

static int image_bijective(const tile_image *t)
{
    if (t->collisions || t->out_of_tile) return 0;
    for (int i = 0; i < t->rows * t->cols; i++)
        if (t->at[i] < 0) return 0;
    return 1;
}

static tile_image images[MATRICES];

static void build_images(const config *c)
{
    for (int m = 0; m < MATRICES; m++) image_build(&images[m], tile_rows(c, m), tile_cols(c, m));
}

/* The element a shared-memory operand reads at (mn, k), through the descriptor model. */
static elem smem_read(const config *c, const operand_spec *o, int p, int is_a, int w, int s, int mn, int k,
                      wgmma_sw128_desc *used)
{
    int r0, c0, rows = tile_rows(c, o->mat);
    operand_origin(c, p, is_a, w, s, &r0, &c0);
    wgmma_sw128_desc d = wgmma_sw128_descriptor(o->kmajor, rows, r0, c0);
    if (used) *used = d;
    int off = wgmma_sw128_address(o->kmajor, d.start, d.lbo, d.sbo, mn, k);
    const tile_image *t = &images[o->mat];
    if (off < 0 || off >= t->rows * t->cols * ELEM_BYTES || t->at[off / ELEM_BYTES] < 0) return el(-1, -1, -1);
    int idx = t->at[off / ELEM_BYTES];
    return el(o->mat, idx / t->cols, idx % t->cols);
}

/* Element-by-element agreement of one operand of product p over every warpgroup and k-step;
 * also which warpgroups wrote the P / dS elements it reads (bit w of *writers_of_w[w]). */
typedef struct {
    long agree, total;
    int writers[CONSUMERS];
} operand_result;

/* The kernel's dS stores in plan swap (steps/15_wgmma_backward, ds_row): per k-step j one
 * stmatrix.x4.trans of the four registers of dK's A (dS^T, keys as rows), lane l giving the
 * address of row l % 8 of matrix l / 8: query 16 j + 8 (l / 16) + l % 8, the 8 keys of 16-byte
 * chunk 2 warp + (l / 8) % 2 of warpgroup w's slab. The byte offset in the dS tile [bm][128]. */
static int ds_stmatrix_row(const config *c, int w, int warp, int lane, int j)
{
    int query = WG_K * j + 8 * (lane / 16) + lane % 8, chunk = 2 * warp + lane / 8 % 2;
    return w * c->bm * SW_ROW + query * SW_ROW + (chunk ^ query % 8) * 16;
}

/* Where stmatrix (.trans or not) of warpgroup w's k-step j puts the element that half h of
 * register reg of a thread holds: the byte offset in the dS tile. The PTX ISA's stmatrix maps are
 * ldmatrix's: lanes 8i..8i+7 address matrix i's rows, and ldsm_received says which (row, element)
 * of matrix i a lane's half is. *held is the element's (key, query) in dP^T's accumulator, and
 * *addr_lane the lane whose row address the instruction writes it at. */
static int ds_stmatrix_at(const config *c, int w, int thread, int j, int reg, int h, int trans, tile_coord *held,
                          int *addr_lane)
{
    int warp = wgmma_warp(thread), lane = thread % WARP_SIZE;
    *held = wgmma_d_coord(warp, lane, wgmma_p_source_reg(j, reg, h));
    tile_coord m = ldsm_received(lane, h, trans);
    *addr_lane = ldsm_address_lane(reg, m.row);
    return ds_stmatrix_row(c, w, warp, *addr_lane, j) + m.col * ELEM_BYTES;
}

/* ds_stmatrix_at against where dQ's K-major A reads each dS element (tma_byte_offset of its
 * canonical (query, key)): counts the halves that agree into *agree of *total; *conflicts counts
 * the matrices whose 8 rows do not fall in 8 different 16-byte columns of the 128-byte rows (a
 * bank conflict). */
static void ds_stmatrix_check(const config *c, int trans, long *agree, long *total, int *conflicts)
{
    *agree = *total = 0, *conflicts = 0;
    for (int w = 0; w < CONSUMERS; w++)
        for (int thread = 0; thread < WG_THREADS; thread++)
            for (int j = 0; j < c->bm / WG_K; j++)
                for (int reg = 0; reg < WG_A_REGS; reg++)
                    for (int h = 0; h < HALVES; h++) {
                        tile_coord d;
                        int addr_lane, at = ds_stmatrix_at(c, w, thread, j, reg, h, trans, &d, &addr_lane);
                        elem e = acc_elem(c, P_DP, w, d.row, d.col);
                        *agree += at == tma_byte_offset(e.row, e.col, c->bm);
                        (*total)++;
                    }
    for (int w = 0; w < CONSUMERS; w++)
        for (int warp = 0; warp < WG_WARPS; warp++)
            for (int j = 0; j < c->bm / WG_K; j++)
                for (int reg = 0; reg < WG_A_REGS; reg++) {
                    int columns = 0;
                    for (int row = 0; row < LDSM_ROWS; row++)
                        columns |= 1 << ds_stmatrix_row(c, w, warp, ldsm_address_lane(reg, row), j) / 16 % 8;
                    *conflicts += columns != 0xff;
                }
}

static int writer_of(const config *c, int mat, int row, int col);

static operand_result check_operand_wgs(const config *c, int p, int is_a, operand_spec o, int w_lo, int w_hi)
{
    operand_result r = {0, 0, {0, 0}};
    int n = product_n(c, p);
    for (int w = w_lo; w <= w_hi; w++)
        for (int s = 0; s < product_ksteps(c, p); s++) {
            if (o.src == SRC_SMEM) {
                int mns = is_a ? WG_M : n;
                for (int mn = 0; mn < mns; mn++)
                    for (int k = 0; k < WG_K; k++) {
                        elem got = smem_read(c, &o, p, is_a, w, s, mn, k, NULL);
                        elem want = is_a ? need_a(c, p, w, s, mn, k) : need_b(c, p, w, s, k, mn);
                        r.agree += elem_eq(got, want), r.total++;
                        if (got.mat == M_P || got.mat == M_DS) r.writers[w] |= 1 << writer_of(c, got.mat, got.row, got.col);
                    }
            } else { /* register A: the same thread's accumulator wgmma_p_source_reg(s, reg, half) */
                int src_regs = wgmma_d_regs(product_n(c, o.product));
                for (int thread = 0; thread < WG_THREADS; thread++)
                    for (int reg = 0; reg < WG_A_REGS; reg++)
                        for (int half = 0; half < HALVES; half++) {
                            int warp = wgmma_warp(thread), lane = thread % WARP_SIZE;
                            int src = wgmma_p_source_reg(s, reg, half);
                            tile_coord a = wgmma_a_coord(warp, lane, reg, half);
                            elem want = need_a(c, p, w, s, a.row, a.col);
                            int ok = 0;
                            if (src < src_regs) {
                                tile_coord d = wgmma_d_coord(warp, lane, src);
                                ok = elem_eq(acc_elem(c, o.product, w, d.row, d.col), want);
                            }
                            r.agree += ok, r.total++;
                        }
            }
        }
    return r;
}

/* The consumers' stores of P (noswap) and dS: each thread of warpgroup w stores the elements
 * of its accumulators of S / dP at tma_byte_offset of their canonical (query, key). Returns
 * the warpgroup that stores (row, col) of mat, -1 for none; *cover counts stores per element. */
static int store_owner[MATRICES][MAX_ROWS][MAX_COLS];

static operand_result check_operand(const config *c, int p, int is_a, operand_spec o)
{
    return check_operand_wgs(c, p, is_a, o, 0, CONSUMERS - 1);
}

static int stored_tiles(const config *c, int mat) { return mat == M_DS || (mat == M_P && c->plan == PLAN_NOSWAP); }

static void build_stores(const config *c, int *collisions, int *outside)
{
    *collisions = *outside = 0;
    for (int m = M_P; m <= M_DS; m++) {
        for (int r = 0; r < MAX_ROWS; r++)
            for (int col = 0; col < MAX_COLS; col++) store_owner[m][r][col] = -1;
        if (!stored_tiles(c, m)) continue;
        int p = m == M_P ? P_S : P_DP;
        for (int w = 0; w < CONSUMERS; w++)
            for (int thread = 0; thread < WG_THREADS; thread++)
                for (int reg = 0; reg < wgmma_d_regs(product_n(c, p)); reg++) {
                    tile_coord d = wgmma_d_coord(wgmma_warp(thread), thread % WARP_SIZE, reg);
                    elem e = acc_elem(c, p, w, d.row, d.col);
                    if (e.row < 0 || e.row >= tile_rows(c, m) || e.col < 0 || e.col >= tile_cols(c, m)) (*outside)++;
                    else if (store_owner[m][e.row][e.col] >= 0) (*collisions)++;
                    else store_owner[m][e.row][e.col] = w;
                }
    }
}

static int writer_of(const config *c, int mat, int row, int col)
{
    (void)c;
    int w = store_owner[mat][row][col];
    return w < 0 ? CONSUMERS : w; /* bit CONSUMERS: nobody */
}

static int stores_complete(const config *c)
{
    for (int m = M_P; m <= M_DS; m++)
        if (stored_tiles(c, m))
            for (int r = 0; r < tile_rows(c, m); r++)
                for (int col = 0; col < tile_cols(c, m); col++)
                    if (store_owner[m][r][col] < 0) return 0;
    return 1;
}

/* ---- the shared-memory budget ---- */

typedef struct {
    const char *name;
    int bytes;
} budget_line;

static int budget(const config *c, int dq_tma, budget_line *lines, int *count)
{
    int n = 0, total = 0, bm = c->bm, d = c->dim;
    budget_line all[] = {
        {"K [128][D]", BKEYS * d * ELEM_BYTES},
        {"V [128][D]", BKEYS * d * ELEM_BYTES},
        {"Q [BM][D] x 2 stages", STAGES_QDO * bm * d * ELEM_BYTES},
        {"dO [BM][D] x 2 stages", STAGES_QDO * bm * d * ELEM_BYTES},
        {"LSE [BM] fp32 x 2", STAGES_QDO * bm * 4},
        {"D [BM] fp32 x 2", STAGES_QDO * bm * 4},
        {"P [BM][128] x stages (noswap)", c->plan == PLAN_NOSWAP ? stages_ds(c) * bm * BKEYS * ELEM_BYTES : 0},
        {"dS [BM][128] x stages", stages_ds(c) * bm * BKEYS * ELEM_BYTES},
        {"dQ staging fp32 (TMA reduce-add)", dq_tma ? (c->plan == PLAN_SWAP ? bm * d : CONSUMERS * bm * d) * 4 : 0},
        {"mbarriers (K/V, Q, dO full/empty x 2)", 9 * 8},
    };
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i].bytes) lines[n++] = all[i], total += all[i].bytes;
    *count = n;
    return total;
}

/* ---- printing ---- */

static void describe_operand(const config *c, int p, int is_a, operand_spec o, char *text, size_t size)
{
    if (o.src == SRC_REGS) {
        snprintf(text, size, "regs: %s accumulators d(8j)..d(8j+7) (%s)", product(c, o.product).name,
                 o.product == P_S ? "P^T" : c->plan == PLAN_SWAP ? "dS^T" : "dS");
        return;
    }
    wgmma_sw128_desc d0, d1;
    smem_read(c, &o, p, is_a, 0, 0, 0, 0, &d0);
    smem_read(c, &o, p, is_a, 0, product_ksteps(c, p) > 1 ? 1 : 0, 0, 0, &d1);
    wgmma_sw128_desc e0;
    smem_read(c, &o, p, is_a, 1, 0, 0, 0, &e0);
    snprintf(text, size, "smem %s [%d][%d] %s, LBO %d SBO %d, start %d (+%d/kstep, wg1 %d)", matrix_name[o.mat],
             tile_rows(c, o.mat), tile_cols(c, o.mat), o.kmajor ? "K-major" : "MN-major", d0.lbo, d0.sbo, d0.start,
             d1.start - d0.start, e0.start);
}

static const char *needs(const config *c, int p)
{
    int swap = c->plan == PLAN_SWAP;
    switch (p) {
    case P_S: return "Q, LSE (q_full mbarrier), K (kv mbarrier)";
    case P_DP: return "dO, D (do_full mbarrier), V";
    case P_DV: return swap ? "P^T: own S^T registers, no exchange" : "P: own WG's stores, fence.proxy.async + bar (128 thr)";
    case P_DK: return swap ? "dS^T: own dP^T registers, no exchange" : "dS: own WG's stores, fence.proxy.async + bar (128 thr)";
    default: return swap ? "dS: both WGs' stores, fence.proxy.async + named barrier (256 thr)" : "dS: own dP registers";
    }
}

static void print_text(const config *c)
{
    printf("Hopper backward on wgmma, plan %s, d%d: block = %d keys x steps of %d queries, %d consumer warpgroups\n"
           "(WG c = consumer c, owning keys 64c..64c+63) + 1 producer warpgroup (TMA; dQ reduce-add). 128-byte-swizzled\n"
           "slabs of 64 columns, descriptors as the steps build them (byte offsets from the tile's 1024-aligned base).\n\n",
           c->plan == PLAN_SWAP ? "swap" : "noswap", c->dim, BKEYS, c->bm, CONSUMERS);
    printf("%-14s %-12s %-6s %-8s | A / B\n", "product", "wgmma", "issuer", "k-steps");
    for (int p = 0; p < PRODUCTS; p++) {
        product_spec s = product(c, p);
        char a[200], b[200];
        describe_operand(c, p, 1, s.a, a, sizeof a);
        describe_operand(c, p, 0, s.b, b, sizeof b);
        char shape[24];
        snprintf(shape, sizeof shape, "m64n%dk16", product_n(c, p));
        printf("%-14s %-12s %-6s %-8d | A %s\n", s.name, shape, "WG c", product_ksteps(c, p), a);
        printf("%-14s %-12s %-6s %-8s | B %s\n", "", "", "", "", b);
        printf("%-14s %-12s %-6s %-8s | needs %s%s%s\n", "", "", "", "", needs(c, p), *s.math ? "; then " : "", s.math);
    }
    int swap = c->plan == PLAN_SWAP, acc = 0;
    for (int p = 0; p < PRODUCTS; p++) acc += wgmma_d_regs(product_n(c, p));
    printf("\nfp32 accumulators per consumer thread, an upper bound (S and dP shrink to 16-bit P, dS once formed): %d\n"
           "(S %d, dP %d, dV %d, dK %d, dQ %d; FA3 gives a consumer 240 registers in all)\n", acc,
           wgmma_d_regs(product_n(c, P_S)), wgmma_d_regs(product_n(c, P_DP)), wgmma_d_regs(product_n(c, P_DV)),
           wgmma_d_regs(product_n(c, P_DK)), wgmma_d_regs(product_n(c, P_DQ)));
    printf("who writes what another reads: %s\n",
           swap ? "dS: WG c stores its dP^T accumulators (keys 64c.., all queries) as dS[query][key] (stmatrix.x4.trans\n"
                  "  of dK's register A, one per k-step, at the slab swizzle), read by both WGs as dQ's K-major A; P is\n"
                  "  never stored (dV reads S^T's registers)."
                : "P and dS: WG c stores its S / dP accumulators (all queries, keys 64c..) as P, dS[query][key], read\n"
                  "  by WG c as MN-major A of dV, dK (only its own keys: a barrier of its 128 threads after fence.proxy.async).");
    if (swap)
        printf("P^T from registers works only because S^T puts keys on M: with S = Q K^T (noswap), accumulator rows are\n"
               "queries, register A of dV needs rows = keys, and the reuse fails (--check asserts it fails).\n");
    if (swap && c->dim == 128)
        printf("FA3 uses 80 queries at d128 without a mask (dQ_swapAB: dQ^T = K^T dS^T, m = head dim); 64 is its causal tile.\n");
    budget_line lines[16];
    int count, total = budget(c, 1, lines, &count), atomics = budget(c, 0, lines + 8, &count);
    budget(c, 1, lines, &count);
    printf("\nshared memory (bytes; BM = %d, P/dS stages %d):\n", c->bm, stages_ds(c));
    for (int i = 0; i < count; i++) printf("  %-38s %7d\n", lines[i].name, lines[i].bytes);
    printf("  %-38s %7d of %d (%s)\n", "total, dQ by TMA reduce-add", total, SMEM_LIMIT, total <= SMEM_LIMIT ? "fits" : "DOES NOT FIT");
    printf("  %-38s %7d of %d (%s)\n", "total, dQ by atomics (no staging)", atomics, SMEM_LIMIT,
           atomics <= SMEM_LIMIT ? "fits" : "DOES NOT FIT");
    int dq_parts = swap ? 1 : CONSUMERS;
    printf("dQ per step: %d x %d x %d fp32 = %d bytes reduce-added (TMA: %d bulk copies of %d B; atomics: %d red.v4.f32\n"
           "per thread)\n",
           dq_parts, c->bm, c->dim, dq_parts * c->bm * c->dim * 4, CONSUMERS, dq_parts * c->bm * c->dim * 4 / CONSUMERS,
           dq_parts * c->bm * c->dim / CONSUMERS / WG_THREADS / 4);
}

static void print_csv(const config *c)
{
    printf("plan,dim,block_m,product,wgmma,wg,operand,source,tile,major,start_s0,start_s1,lbo,sbo,agree,total\n");
    for (int p = 0; p < PRODUCTS; p++) {
        product_spec s = product(c, p);
        for (int w = 0; w < CONSUMERS; w++)
            for (int is_a = 1; is_a >= 0; is_a--) {
                operand_spec o = is_a ? s.a : s.b;
                operand_result r = check_operand_wgs(c, p, is_a, o, w, w);
                wgmma_sw128_desc d0 = {0, 0, 0}, d1 = {0, 0, 0};
                if (o.src == SRC_SMEM) {
                    smem_read(c, &o, p, is_a, w, 0, 0, 0, &d0);
                    smem_read(c, &o, p, is_a, w, product_ksteps(c, p) > 1, 0, 0, &d1);
                }
                printf("%s,%d,%d,%s,m64n%dk16,%d,%s,%s,%s,%s,%d,%d,%d,%d,%ld,%ld\n", c->plan == PLAN_SWAP ? "swap" : "noswap",
                       c->dim, c->bm, s.name, product_n(c, p), w, is_a ? "A" : "B", o.src == SRC_SMEM ? "smem" : "regs",
                       o.src == SRC_SMEM ? matrix_name[o.mat] : product(c, o.product).name,
                       o.src == SRC_SMEM ? (o.kmajor ? "K" : "MN") : "-", d0.start, d1.start, d0.lbo, d0.sbo, r.agree,
                       r.total);
            }
    }
}

/* The dS stores of consumer 0 at k-step 0 (its 64 keys x queries 0..15), an element a line: the
 * warp and lane that hold it, in which register-A register and half, its key (in the consumer's
 * 64) and query, the lane whose row address stmatrix.x4.trans writes it at, and where: the byte
 * offset in the dS tile, its 128-byte row and 16-byte column (figures/stmatrix_ds.py draws it). */
static void print_stmatrix_csv(const config *c)
{
    printf("warp,lane,reg,half,key,query,addr_lane,byte,smem_row,chunk_col\n");
    for (int thread = 0; thread < WG_THREADS; thread++)
        for (int reg = 0; reg < WG_A_REGS; reg++)
            for (int h = 0; h < HALVES; h++) {
                tile_coord d;
                int addr_lane, at = ds_stmatrix_at(c, 0, thread, 0, reg, h, 1, &d, &addr_lane);
                printf("%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", wgmma_warp(thread), thread % WARP_SIZE, reg, h, d.row, d.col,
                       addr_lane, at, at / SW_ROW, at % SW_ROW / 16);
            }
}

/* ---- checks ---- */

static void check_config(const config *c)
{
    char name[256], tag[32];
    snprintf(tag, sizeof tag, "%s d%d (%dx%d)", c->plan == PLAN_SWAP ? "swap" : "noswap", c->dim, c->bm, BKEYS);
    build_images(c);
    for (int m = 0; m < MATRICES; m++) {
        if ((m == M_P || m == M_DS) && !stored_tiles(c, m)) continue;
        snprintf(name, sizeof name, "%s: tile %s [%d][%d], slab swizzle offset -> element is a bijection", tag,
                 matrix_name[m], images[m].rows, images[m].cols);
        check(image_bijective(&images[m]), name, "%d collisions, %d outside", images[m].collisions, images[m].out_of_tile);
    }
    int collisions, outside;
    build_stores(c, &collisions, &outside);
    snprintf(name, sizeof name, "%s: the consumers' stores of %s cover the tile once (2 WGs x 128 threads x accumulators)",
             tag, c->plan == PLAN_SWAP ? "dS" : "P and dS");
    check(!collisions && !outside && stores_complete(c), name, "%d collisions, %d outside, or a hole", collisions, outside);
    if (c->plan == PLAN_SWAP) {
        long agree, total;
        int conflicts;
        ds_stmatrix_check(c, 1, &agree, &total, &conflicts);
        snprintf(name, sizeof name, "%s: dS by stmatrix.x4.trans of dK's register A (one per k-step, the kernel's row "
                 "addresses) puts each of its %ld elements where dQ's K-major A reads it", tag, total);
        check(agree == total, name, "%ld of %ld agree", agree, total);
        snprintf(name, sizeof name, "%s: each stmatrix matrix's 8 rows fall in 8 different 16-byte columns: the 32 banks "
                 "once, no conflict", tag);
        check(!conflicts, name, "%d matrices conflict", conflicts);
        ds_stmatrix_check(c, 0, &agree, &total, &conflicts);
        snprintf(name, sizeof name, "%s: the same stores without .trans miss (the transpose is needed: the registers hold "
                 "dS^T)", tag);
        check(agree < total, name, "all %ld agree", total);
    }
    for (int p = 0; p < PRODUCTS; p++) {
        product_spec s = product(c, p);
        int n = product_n(c, p);
        snprintf(name, sizeof name, "%s: %s is m64n%dk16 (n a multiple of 16 up to 256) over %d k-steps", tag, s.name, n,
                 product_ksteps(c, p));
        check(n % 16 == 0 && n <= WG_N_MAX && product_ksteps(c, p) > 0, name, "n %d", n);
        for (int is_a = 1; is_a >= 0; is_a--) {
            operand_spec o = is_a ? s.a : s.b;
            operand_result r = check_operand(c, p, is_a, o);
            snprintf(name, sizeof name, "%s: %s %s (%s%s%s) reaches exactly the element the math needs, %ld elements", tag,
                     s.name, is_a ? "A" : "B", o.src == SRC_SMEM ? matrix_name[o.mat] : "registers of ",
                     o.src == SRC_SMEM ? (o.kmajor ? " K-major" : " MN-major") : product(c, o.product).name, "", r.total);
            check(r.agree == r.total, name, "%ld of %ld agree", r.agree, r.total);
            if (o.src == SRC_SMEM) {
                /* the transpose is real: the other form reads other elements */
                operand_spec flipped = o;
                flipped.kmajor = !o.kmajor;
                operand_result f = check_operand(c, p, is_a, flipped);
                snprintf(name, sizeof name, "%s: %s %s as %s instead misses (the form is needed, not incidental)", tag,
                         s.name, is_a ? "A" : "B", flipped.kmajor ? "K-major" : "MN-major");
                check(f.agree < f.total, name, "it agrees too");
                if (!o.kmajor) {
                    snprintf(name, sizeof name, "%s: %s %s MN-major is allowed: 16-bit elements (wgmma takes MN-major A "
                             "and B only for f16/bf16)", tag, s.name, is_a ? "A" : "B");
                    check(ELEM_BYTES == 2, name, "elements of %d bytes", ELEM_BYTES);
                }
                if (o.mat == M_P || o.mat == M_DS) {
                    int expect = c->plan == PLAN_SWAP ? 3 : 0;
                    int ok = 1;
                    for (int w = 0; w < CONSUMERS; w++) ok &= r.writers[w] == (expect ? expect : 1 << w);
                    snprintf(name, sizeof name, "%s: %s reads %s stored by %s", tag, s.name, matrix_name[o.mat],
                             expect ? "both warpgroups (a barrier of the 256 consumer threads)" : "its own warpgroup only");
                    check(ok, name, "writer sets %d, %d", r.writers[0], r.writers[1]);
                }
            }
        }
    }
    if (c->plan == PLAN_NOSWAP) {
        /* P^T cannot come from S's accumulators: S's rows are queries */
        operand_spec regs = {SRC_REGS, -1, -1, P_S};
        operand_result r = check_operand(c, P_DV, 1, regs);
        snprintf(name, sizeof name, "%s: dV's A = P^T from S = Q K^T's accumulators does not line up (%ld of %ld): P goes "
                 "through shared memory", tag, r.agree, r.total);
        check(r.agree < r.total, name, "it lines up");
    }
    budget_line lines[16];
    int count, total = budget(c, 1, lines, &count);
    snprintf(name, sizeof name, "%s: shared memory with dQ staged for TMA reduce-add, %d P/dS stage(s): %d bytes <= %d "
             "(227 KB)", tag, stages_ds(c), total, SMEM_LIMIT);
    check(total <= SMEM_LIMIT, name, "over by %d", total - SMEM_LIMIT);
}

static void run_checks(void)
{
    /* the descriptor model reproduces the placements verify_wgmma runs on the GPU: K-major k-step kk
     * at +32 (kk % 4) and the next slab after 4; MN-major V with LBO one slab, SBO 1024 */
    int ok = 1;
    for (int rows = 64; rows <= 128; rows += 64)
        for (int d = 64; d <= 128; d += 64)
            for (int kk = 0; kk < d / WG_K; kk++)
                for (int r = 0; r < rows; r++)
                    for (int k = 0; k < WG_K; k++) {
                        wgmma_sw128_desc q = wgmma_sw128_descriptor(1, rows, 0, WG_K * kk);
                        ok &= wgmma_sw128_address(1, q.start, q.lbo, q.sbo, r, k) == tma_byte_offset(r, WG_K * kk + k, rows);
                        ok &= q.start == kk / 4 * rows * SW_ROW + kk % 4 * 32;
                    }
    for (int j = 0; j < 8; j++)
        for (int n = 0; n < 128; n++)
            for (int k = 0; k < WG_K; k++) {
                wgmma_sw128_desc v = wgmma_sw128_descriptor(0, 128, WG_K * j, 0);
                ok &= v.lbo == 128 * SW_ROW && v.sbo == SW_ATOM && v.start == j * WG_K * SW_ROW;
                ok &= wgmma_sw128_address(0, v.start, v.lbo, v.sbo, n, k) == tma_byte_offset(WG_K * j + k, n, 128);
            }
    check(ok, "descriptor model = the steps' descriptors over TMA's slabs (K-major Q, K; MN-major V, as verify_wgmma runs)",
          "the model and tma_byte_offset disagree");
    for (int plan = PLAN_SWAP; plan <= PLAN_NOSWAP; plan++)
        for (int dim = 64; dim <= 128; dim += 64) {
            config c = make_config(dim, plan);
            check_config(&c);
        }
}

int main(int argc, char **argv)
{
    int dim_index = 1, plan = PLAN_SWAP, format = 0;  /* format: text, csv, stmatrix */
    const cli_option opts[] = {
        {"--dim", &dim_index, 0, 0, 0, "64|128"},
        {"--plan", &plan, 0, 0, 0, "swap|noswap"},
        {"--format", &format, 0, 0, 0, "text|csv|stmatrix"},
    };
    parse_cli(argc, argv, usage, opts, 3, run_checks);
    config c = make_config(dim_index ? 128 : 64, plan);
    build_images(&c);
    int collisions, outside;
    build_stores(&c, &collisions, &outside);
    if (format == 2 && plan != PLAN_SWAP) cli_error("--format stmatrix needs --plan swap (noswap stores no dS^T from registers)");
    if (format == 2) print_stmatrix_csv(&c);
    else if (format == 1) print_csv(&c);
    else print_text(&c);
    return 0;
}
