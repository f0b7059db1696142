/* layouts.h - the layout formulas of steps 02..09, each written once.
 *
 * The scratch visualizers print from these functions and the GPU verifiers
 * (verify.cu, verify_wgmma.cu) run the real instructions with addresses and
 * registers placed by them, so a printed map is a map the hardware was shown
 * to follow. Plain C that is also valid C++, so nvcc's host pass can include it.
 *
 * Hardware facts used (PTX ISA: "Matrix Fragments for mma.m16n8k16",
 * "ldmatrix", "Register Fragments and Shared Memory Matrix Layouts" of
 * wgmma; CUDA C Programming Guide: "Shared Memory"):
 *  - a warp's 32 lanes form 8 quads; in an mma fragment the quad number
 *    (groupID = lane / 4) picks a row and the thread in the quad (lane % 4)
 *    picks a pair of adjacent columns;
 *  - a Hopper warpgroup (4 warps) splits the 64 rows of a wgmma into 16 per
 *    warp, and each warp holds its rows in exactly the mma.sync fragments;
 *  - ldmatrix moves 8x8 matrices of 16-bit elements, one 16-byte row per
 *    address, and hands them out in exactly that fragment order;
 *  - shared memory has 32 banks of 4 bytes; a bank serves one 4-byte word per
 *    cycle, so 8 rows of a tile whose row length is a multiple of 128 bytes
 *    land in the same banks unless the 16-byte chunks are permuted (swizzled).
 */
#ifndef SCRATCH_LAYOUTS_H
#define SCRATCH_LAYOUTS_H

enum {
    WARP_SIZE = 32,
    THREADS = 128,              /* threads per block in steps 02..06 */
    WARPS = THREADS / WARP_SIZE,
    BLOCK_M = 64,               /* query rows per block: 4 warps x 16 rows (one mma M each) */
    BLOCK_N = 64,               /* keys per iteration */
    ELEM_BYTES = 2,             /* fp16 / bf16 */
    CHUNK_BYTES = 16,           /* one cp.async, one 128-bit access, one ldmatrix row */
    CHUNK_ELEMS = CHUNK_BYTES / ELEM_BYTES,
    BANKS = 32,
    BANK_BYTES = 4,
    SWIZZLE_ROWS = 8,           /* 8 chunks of 16 bytes = 128 bytes = every bank once */
    MMA_M = 16, MMA_N = 8, MMA_K = 16,
    MMA_A_REGS = 4, MMA_B_REGS = 2, MMA_C_REGS = 4,
    HALVES = 2,                 /* 16-bit elements per 32-bit A/B register, lower column (or k) in the low half */
    LDSM_ROWS = 8,              /* ldmatrix: 8x8 matrices */
    LDSM_X4 = 4,                /* matrices of one ldmatrix.x4 */
};

typedef struct {
    int row, col;
} tile_coord;

static inline tile_coord tile_coord_at(int row, int col)
{
    tile_coord c;
    c.row = row;
    c.col = col;
    return c;
}

/* ---- mma.sync.aligned.m16n8k16.row.col, f16/bf16 inputs, f32 accumulators ---- */

static inline int lane_group(int lane) { return lane >> 2; } /* groupID: the quad */
static inline int lane_tig(int lane) { return lane & 3; }    /* thread in group */

/* A, 16x16 [m][k]: a0 (g, 2t..2t+1), a1 (g+8, same), a2 (g, 2t+8..), a3 (g+8, 2t+8..). */
static inline tile_coord mma_a_coord(int lane, int reg, int half)
{
    return tile_coord_at(lane_group(lane) + 8 * (reg & 1), 2 * lane_tig(lane) + half + 8 * (reg >> 1));
}

/* B, 16x8 [k][n]: b0 (k = 2t..2t+1, n = g), b1 (k + 8). A K tile stored [key][d]
 * already is B transposed ("col"), which is why K needs no .trans below. */
static inline tile_coord mma_b_coord(int lane, int reg, int half)
{
    return tile_coord_at(2 * lane_tig(lane) + half + 8 * reg, lane_group(lane));
}

/* C/D, 16x8 [m][n] fp32: c0, c1 (g, 2t..2t+1), c2, c3 (g+8, same). */
static inline tile_coord mma_c_coord(int lane, int reg)
{
    return tile_coord_at(lane_group(lane) + 8 * (reg >> 1), 2 * lane_tig(lane) + (reg & 1));
}

/* P.V k-step j reads keys 16j..16j+15 = S n-tiles 2j and 2j+1. Two C tiles side
 * by side have the A layout, so A register reg, half h is the same lane's
 * accumulator p_source_creg of S n-tile p_source_ntile: no shuffle needed. */
static inline int p_source_ntile(int kstep, int reg) { return 2 * kstep + (reg >> 1); }
static inline int p_source_creg(int reg, int half) { return 2 * (reg & 1) + half; }

/* ---- wgmma.mma_async.sync.aligned.m64nNk16, f16/bf16 inputs, f32 accumulators (sm_90a) ----
 * PTX ISA, "Register Fragments and Shared Memory Matrix Layouts" ("Matrix
 * Fragments for wgmma.mma_async.m64nNk16", "Shared Memory Matrix Layout"). */

enum {
    WG_THREADS = 128,                  /* a warpgroup: 4 consecutive warps, the first one's index divisible by 4 */
    WG_WARPS = WG_THREADS / WARP_SIZE,
    WG_M = 64,                         /* rows of A and D: 16 per warp */
    WG_K = 16,                         /* k of one instruction for 16-bit inputs */
    WG_N_MAX = 256,                    /* n: a multiple of 8 up to 256 */
    WG_A_REGS = 4,                     /* A from registers: 4 x 32 bits, 2 halves each */
    WG_CORE_ROWS = 8,                  /* a shared-memory core matrix: 8 rows of 16 bytes */
};

/* The warp of its warpgroup that a thread of the block is in: it owns rows
 * 16 w .. 16 w + 15 of the A and D tiles. */
static inline int wgmma_warp(int thread) { return thread / WARP_SIZE % WG_WARPS; }

static inline int wgmma_d_regs(int n) { return n / 2; } /* fp32 accumulators per thread */

/* D, 64 x N [m][n] fp32: register i of (warp w, lane l) is the mma.sync C
 * register i % 4 of the n8 block i / 4, 16 rows down per warp:
 * row 16w + g + 8((i >> 1) & 1), column 8(i >> 2) + 2t + (i & 1). */
static inline tile_coord wgmma_d_coord(int warp, int lane, int reg)
{
    tile_coord c = mma_c_coord(lane, reg % MMA_C_REGS);
    return tile_coord_at(warp * MMA_M + c.row, reg / MMA_C_REGS * MMA_N + c.col);
}

/* A from registers, 64 x 16 [m][k]: a0..a3 of (warp w, lane l) are the mma.sync
 * A fragment of rows 16w..16w+15 (a0 (g, 2t..2t+1), a1 (g+8), a2 (g, 2t+8..),
 * a3 (g+8, 2t+8..)), lower column in the low half. */
static inline tile_coord wgmma_a_coord(int warp, int lane, int reg, int half)
{
    tile_coord a = mma_a_coord(lane, reg, half);
    return tile_coord_at(warp * MMA_M + a.row, a.col);
}

/* P.V k-step j reads keys 16j..16j+15, which S = Q K^T (one m64nNk16 over N
 * keys) holds in accumulators 8j..8j+7: the n8 blocks 2j and 2j+1 of the
 * mma.sync reuse above, their registers laid end to end. Register-A reg, half h
 * of P is the same thread's accumulator 8j + 2 reg + h:
 * a_r = pack(s[8j + 2r], s[8j + 2r + 1]), no shuffle. */
static inline int wgmma_p_source_reg(int kstep, int reg, int half)
{
    return MMA_C_REGS * p_source_ntile(kstep, reg) + p_source_creg(reg, half);
}

/* B from shared memory, K-major (imm-trans-b = 0: B[k][n] stored as rows of n
 * with k contiguous, as a K tile [key][d] is for S = Q K^T), no swizzle
 * (descriptor layout type 0). The canonical layout ((8,m),(T,2k)):((1T,SBO),(1,LBO))
 * with T = 8 16-bit elements: core matrices of 8 rows (n) x 16 bytes (8 k), each
 * 128 contiguous bytes; the descriptor's leading byte offset (LBO) steps from a
 * core matrix to the next along k, its stride byte offset (SBO) to the next
 * along n. Byte offset of B[k][n] from the descriptor's start address: */
static inline int wgmma_b_kmajor_offset(int k, int n, int lbo, int sbo)
{
    return n / WG_CORE_ROWS * sbo + k / CHUNK_ELEMS * lbo + n % WG_CORE_ROWS * CHUNK_BYTES + k % CHUNK_ELEMS * ELEM_BYTES;
}

/* The tile elements each fragment register needs, in [row][col] of the shared
 * tiles: Q [BLOCK_M][D], K and V [BLOCK_N][D], O [BLOCK_M][D]. */
static inline tile_coord q_fragment_element(int warp, int kk, int lane, int reg, int half)
{
    tile_coord a = mma_a_coord(lane, reg, half);
    return tile_coord_at(warp * MMA_M + a.row, kk * MMA_K + a.col);
}

/* S = Q K^T: B[k][n] = K[key 8 ntile + n][d 16 kk + k] */
static inline tile_coord k_fragment_element(int ntile, int kk, int lane, int reg, int half)
{
    tile_coord b = mma_b_coord(lane, reg, half);
    return tile_coord_at(ntile * MMA_N + b.col, kk * MMA_K + b.row);
}

/* O = P V: B[k][n] = V[key 16 kk + k][d 8 dtile + n] */
static inline tile_coord v_fragment_element(int kk, int dtile, int lane, int reg, int half)
{
    tile_coord b = mma_b_coord(lane, reg, half);
    return tile_coord_at(kk * MMA_K + b.row, dtile * MMA_N + b.col);
}

static inline tile_coord o_fragment_element(int warp, int dtile, int lane, int reg)
{
    tile_coord c = mma_c_coord(lane, reg);
    return tile_coord_at(warp * MMA_M + c.row, dtile * MMA_N + c.col);
}

/* ---- ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16 ---- */

/* Lanes 8i..8i+7 give the 8 row addresses of matrix i (x1 reads lanes 0-7,
 * x2 lanes 0-15, x4 all 32); matrix i arrives in register i of every lane. */
static inline int ldsm_address_lane(int matrix, int row) { return LDSM_ROWS * matrix + row; }

/* (row, element) of matrix i that `lane` receives in half h of register i.
 * Not transposed: row lane/4, elements 2(lane%4), +1 - the C layout of an 8x8
 * block. .trans: element lane/4 of rows 2(lane%4), +1 - the B layout. */
static inline tile_coord ldsm_received(int lane, int half, int trans)
{
    return trans ? tile_coord_at(2 * (lane % 4) + half, lane / 4) : tile_coord_at(lane / 4, 2 * (lane % 4) + half);
}

/* The three ldmatrix.x4 of step 04 (Q as A; K as B; V as B, .trans because V
 * is stored [key][d] while B wants [d][key] rows). Every operand has
 * 4 x D/16 instances, 4 = BLOCK_M / 16 = BLOCK_N / 16:
 * Q (warp, kk), K (n-tile pair, kk), V (kk, d-tile pair). */
typedef enum { OPERAND_Q, OPERAND_K, OPERAND_V, OPERANDS } operand;

static inline const char *operand_name(operand op) { return op == OPERAND_Q ? "Q" : op == OPERAND_K ? "K" : "V"; }
static inline int ldsm_trans(operand op) { return op == OPERAND_V; }
static inline int ldsm_instances(int dim) { return (BLOCK_N / 16) * (dim / 16); }

/* The tile element that `lane` puts on the address bus. */
static inline tile_coord ldsm_address(operand op, int dim, int instance, int lane)
{
    int outer = instance / (dim / 16), inner = instance % (dim / 16);
    switch (op) {
    case OPERAND_Q: /* matrices: rows 0-7 | 8-15 (a0, a1), then the same rows 8 columns on (a2, a3) */
        return tile_coord_at(outer * 16 + lane % 16, inner * 16 + (lane / 16) * 8);
    case OPERAND_K: /* matrices: keys n0.. d 0-7 (b0), d 8-15 (b1), then keys n0+8.. (b0, b1 of the next n-tile) */
        return tile_coord_at(outer * 16 + (lane / 16) * 8 + lane % 8, inner * 16 + ((lane / 8) % 2) * 8);
    default: /* V: matrices: keys 0-7 (b0), keys 8-15 (b1) of d-tile d0, then of d-tile d0+8 */
        return tile_coord_at(outer * 16 + lane % 8 + ((lane / 8) % 2) * 8, inner * 16 + (lane / 16) * 8);
    }
}

/* The tile element the mma needs in register reg, half h: Q's a0..a3; for K and
 * V b0, b1 of the first n-tile (d-tile) of the pair, then b0, b1 of the second. */
static inline tile_coord ldsm_needed(operand op, int dim, int instance, int lane, int reg, int half)
{
    int outer = instance / (dim / 16), inner = instance % (dim / 16);
    switch (op) {
    case OPERAND_Q: return q_fragment_element(outer, inner, lane, reg, half);
    case OPERAND_K: return k_fragment_element(2 * outer + reg / 2, inner, lane, reg % 2, half);
    default: return v_fragment_element(outer, 2 * inner + reg / 2, lane, reg % 2, half);
    }
}

/* What ldmatrix delivers to `lane` in register reg, half h, given each lane's
 * address: row `r` of matrix reg comes from lane ldsm_address_lane(reg, r). */
static inline tile_coord ldsm_delivered(operand op, int dim, int instance, int lane, int reg, int half)
{
    tile_coord got = ldsm_received(lane, half, ldsm_trans(op));
    tile_coord row_start = ldsm_address(op, dim, instance, ldsm_address_lane(reg, got.row));
    return tile_coord_at(row_start.row, row_start.col + got.col);
}

/* ---- shared-memory tiles [rows][D] of 16-bit elements, 16-byte chunks ---- */

static inline int chunks_per_row(int dim) { return dim / CHUNK_ELEMS; }

/* XOR with the row's low 3 bits: 8 consecutive rows put a given logical chunk in
 * 8 different 16-byte bank groups. Needs at least 8 chunks per row (D >= 64);
 * for D = 128 only the low 3 bits change, so a chunk stays in its half row. */
static inline int swizzle_chunk(int row, int chunk) { return chunk ^ (row % SWIZZLE_ROWS); }

static inline int smem_byte_offset(int row, int col, int dim, int swizzled)
{
    int chunk = col / CHUNK_ELEMS;
    int physical = swizzled ? swizzle_chunk(row, chunk) : chunk;
    return row * dim * ELEM_BYTES + physical * CHUNK_BYTES + (col % CHUNK_ELEMS) * ELEM_BYTES;
}

/* TMA's 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B; step 08 on): a box row is at most
 * 128 bytes, so a [rows][D] tile arrives as D / 64 slabs [rows][64], one after the other,
 * and inside each slab the copy engine applies step 03's swizzle to 128-byte rows (the
 * slabs start on 1024-byte boundaries, where the XOR pattern is anchored). */
enum { TMA_SLAB_ROW_BYTES = 128, TMA_SLAB_ELEMS = TMA_SLAB_ROW_BYTES / ELEM_BYTES };
static inline int tma_byte_offset(int row, int col, int rows)
{
    return col / TMA_SLAB_ELEMS * rows * TMA_SLAB_ROW_BYTES + smem_byte_offset(row, col % TMA_SLAB_ELEMS, TMA_SLAB_ELEMS, 1);
}

/* ---- wgmma descriptors over those slabs: 128-byte swizzle (layout type 1), 16-bit elements ----
 * (PTX ISA, "Matrix Descriptor Format" and "Shared Memory Matrix Layout" of wgmma; the model
 * backward_wgmma's --check emulates and verify_wgmma / verify_wgmma_backward run on the GPU.)
 * K-major (k contiguous): M/N row r at (r / 8) SBO + (r % 8) 128, k at 2k bytes (k < 16 stays in
 * one 128-byte row, LBO unused). MN-major (M/N contiguous): element mn, k at (mn / 64) LBO +
 * (k / 8) SBO + (k % 8) 128 + 2 (mn % 64). Then the swizzle XORs address bits 4-6 with 7-9
 * (the tiles start on 1024-byte boundaries, as the steps align them). Byte offset from the
 * tile's base: */
enum { WGMMA_SW128_ATOM = 1024 }; /* 8 rows of 128 bytes: the swizzle's repeat, the descriptors' SBO */
static inline int wgmma_sw128_address(int kmajor, int start, int lbo, int sbo, int mn, int k)
{
    int a = kmajor ? start + mn / 8 * sbo + mn % 8 * TMA_SLAB_ROW_BYTES + k * ELEM_BYTES
                   : start + mn / 64 * lbo + k / 8 * sbo + k % 8 * TMA_SLAB_ROW_BYTES + mn % 64 * ELEM_BYTES;
    return a ^ ((a >> 7) & 7) << 4;
}

/* The kernel's descriptor for an operand of a [rows][D] slab tile whose M/N index runs along
 * tile rows from r0 and k along columns from c0 (K-major), or k along rows from r0 and M/N
 * along columns from c0 (MN-major). Start as the steps compute it: slab c0 / 64, row r0,
 * 2 (c0 % 64) bytes in (K-major only). */
typedef struct {
    int start, lbo, sbo;
} wgmma_sw128_desc;

static inline wgmma_sw128_desc wgmma_sw128_descriptor(int kmajor, int rows, int r0, int c0)
{
    wgmma_sw128_desc d;
    d.start = c0 / TMA_SLAB_ELEMS * rows * TMA_SLAB_ROW_BYTES + r0 * TMA_SLAB_ROW_BYTES +
              (kmajor ? c0 % TMA_SLAB_ELEMS * ELEM_BYTES : 0);
    d.lbo = kmajor ? 16 : rows * TMA_SLAB_ROW_BYTES; /* K-major: unused, 16 as the steps pass it; MN-major: one slab */
    d.sbo = WGMMA_SW128_ATOM;
    return d;
}

static inline int smem_bank(int byte_offset) { return byte_offset / BANK_BYTES % BANKS; }

/* ---- global -> shared copy (cp.async, 16 bytes per thread per iteration) ---- */

/* Thread t copies chunks t, t + 128, ...: consecutive threads take consecutive
 * 16-byte chunks of a row, so a warp reads whole rows (coalesced) and each
 * group of 8 lanes writes 128 contiguous shared bytes. */
static inline int copy_iterations(int rows, int dim) { return (rows * chunks_per_row(dim) + THREADS - 1) / THREADS; }

/* (row, chunk) copied by `thread` in iteration `iter`; row >= rows means idle. */
static inline tile_coord copy_chunk(int thread, int iter, int dim)
{
    int index = thread + THREADS * iter;
    return tile_coord_at(index / chunks_per_row(dim), index % chunks_per_row(dim));
}

#endif /* SCRATCH_LAYOUTS_H */
