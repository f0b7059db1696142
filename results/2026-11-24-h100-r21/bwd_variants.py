#!/usr/bin/env python3
"""Variants of step 14's backward for run 85's A/B: each is steps/14_backward/kernel.cu with
pieces replaced, as tools/variant_src.py does (every OLD occurs in the kernel exactly once,
or nothing is written), written to build/ab/14_NAME.cu for

  make variant step=14 NAME=NAME SRC=build/ab/14_NAME.cu

usage: python3 results/2026-11-24-h100-r21/bwd_variants.py [NAME ...]   (default: every variant)
       python3 results/2026-11-24-h100-r21/bwd_variants.py --list

What run 84 measured on fa2_bwd_kernel<__half, 128, 2> (B4 H16 N4096 d128, H100): 2 warps
per scheduler, 0.15 eligible per cycle, short-scoreboard 6.70 cycles per issued
instruction, 39.7% of all stall samples on HMMA waiting for the LDSM that feeds it, and the
fp32 dQ atomics (REDG) 9.7% of the samples, 7.0 points of them MIO throttle. The variants
(results/2026-11-24-h100-r21/README.md: registers, spills, LDSM distances, predictions):

  red2             the dQ atomics in pairs on sm_90 (atomicAdd of a float2: one
                   red.global.add.v2.f32 for the columns 2t, 2t + 1 of a lane's row): half
                   the REDG; sm_80 keeps the scalar form. Targets REDG's MIO throttle.
  parts            the step's 64 queries in two parts of 32: S^T, P^T, dV, dP^T, dS^T and dK
                   one part at a time, so S^T and dP^T hold 16 + 16 fp32 a lane instead of
                   32 + 32 (K's and V's A fragments load once per part: 16 more LDSM a warp
                   a step). Targets register pressure (the spill; room to hoist loads).
  pipe             a rolling prefetch in the five products: each B fragment issued PF
                   fragments (2 PF mma) before the mma that read it (S^T, dP^T: 4, a k-step's
                   A double-buffered; dV, dK, dQ: 6), dQ's first K fragments before the
                   barrier that publishes dS^T (K never changes in shared memory). Targets the
                   HMMA's short-scoreboard wait on LDSM.
  parts_pipe       parts with pipe's prefetch in S^T, dP^T (2: a part has 2 fragments a
                   k-step) and dQ.
  parts_pipe_red2  parts_pipe and red2.

Each does the same multiply-adds in the same order per accumulator (the prefetch and the
parts only move loads and split the loops at k-step boundaries; a float2 atomic adds each of
its two floats as the scalar one does), so the results are those of the kernel up to the
order in which blocks reach the atomics, as now.
"""
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SRC = "steps/14_backward/kernel.cu"

# ---- S^T = K Q^T and dP^T = V dO^T: the k-loop of keys_times_queries_t ----------------
KQ_OLD = """#pragma unroll
        for (int kk = 0; kk < D / MMA_K; kk++) {
            // A (row major, as Q in the forward): rows lane % 16, chunk 2 kk + lane / 16 = a0..a3.
            uint32_t a_frag[4];  // [a0..a3] of the warp's keys for d k-step kk
            ldmatrix_x4(a_frag, a_rows.at(keys_saddr, warp_key0, 2 * kk));
#pragma unroll
            for (int nt = 0; nt < BLOCK_M / MMA_N; nt += 2) {
                // B^T, element (k = d, n = query) = B[query][d]: B's rows are the n of the mma's B,
                // as K's in the forward: queries 8 nt + 0-7 (lanes 0-15) or + 8-15, d chunk
                // 2 kk + lane / 8 % 2.
                uint32_t b_frag[4];  // [b0, b1 of n-tile nt, b0, b1 of n-tile nt + 1]
                ldmatrix_x4(b_frag, b_rows.at(queries_saddr, nt * MMA_N, 2 * kk));
                mma_m16n8k16<T>(acc[nt], a_frag, b_frag[0], b_frag[1]);
                mma_m16n8k16<T>(acc[nt + 1], a_frag, b_frag[2], b_frag[3]);
            }
        }"""
KQ_NEW = """        // Software-pipelined: fragment f is the B of n-tiles 2 (f % NB), + 1 in k-step f / NB;
        // it is loaded PF_KQ fragments (2 PF_KQ mma) before the mma that read it, and a
        // k-step's A with its first B (A double-buffered: PF_KQ <= NB, so a_frag[kk % 2]
        // is never overwritten while k-step kk still reads it).
        constexpr int NB = BLOCK_M / (2 * MMA_N), FR = D / MMA_K * NB, PF_KQ = 4;
        static_assert(PF_KQ >= 1 && PF_KQ <= NB, "A's two buffers hold k-steps kk and kk + 1 only");
        uint32_t a_frag[2][4];          // [k-step % 2][a0..a3] of the warp's keys
        uint32_t b_frag[PF_KQ + 1][4];  // [fragment % (PF_KQ + 1)][b0, b1 of n-tile nt, of nt + 1]
        auto load_kq = [&](int f) {
            const int kk = f / NB, nt = f % NB * 2;
            if (f % NB == 0) ldmatrix_x4(a_frag[kk % 2], a_rows.at(keys_saddr, warp_key0, 2 * kk));
            ldmatrix_x4(b_frag[f % (PF_KQ + 1)], b_rows.at(queries_saddr, nt * MMA_N, 2 * kk));
        };
#pragma unroll
        for (int f = 0; f < PF_KQ; f++) load_kq(f);
#pragma unroll
        for (int f = 0; f < FR; f++) {
            if (f + PF_KQ < FR) load_kq(f + PF_KQ);
            const int kk = f / NB, nt = f % NB * 2, bf = f % (PF_KQ + 1);
            mma_m16n8k16<T>(acc[nt], a_frag[kk % 2], b_frag[bf][0], b_frag[bf][1]);
            mma_m16n8k16<T>(acc[nt + 1], a_frag[kk % 2], b_frag[bf][2], b_frag[bf][3]);
        }"""

# ---- dV += P^T dO -----------------------------------------------------------------------
DV_OLD = """#pragma unroll
        for (int j = 0; j < BLOCK_M / MMA_K; j++) {
            uint32_t p_frag[4];  // [a0..a3]: P^T of the warp's keys x queries 16 j .. 16 j + 15
            p_frag[0] = pack2<T>(st_acc[2 * j][0], st_acc[2 * j][1]);
            p_frag[1] = pack2<T>(st_acc[2 * j][2], st_acc[2 * j][3]);
            p_frag[2] = pack2<T>(st_acc[2 * j + 1][0], st_acc[2 * j + 1][1]);
            p_frag[3] = pack2<T>(st_acc[2 * j + 1][2], st_acc[2 * j + 1][3]);
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt += 2) {
                uint32_t do_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                ldmatrix_x4_trans(do_frag, bt_rows.at(dos_saddr, j * MMA_K, dt));
                mma_m16n8k16<T>(dv_acc[dt], p_frag, do_frag[0], do_frag[1]);
                mma_m16n8k16<T>(dv_acc[dt + 1], p_frag, do_frag[2], do_frag[3]);
            }
        }"""
DV_NEW = """        // Software-pipelined: fragment f is dO's B of d-tiles 2 (f % DT2), + 1 in k-step j = f / DT2,
        // loaded PF_T fragments (2 PF_T mma) before the mma that read it.
        constexpr int DT2 = D / (2 * MMA_N), FR_T = BLOCK_M / MMA_K * DT2, PF_T = 6;
        uint32_t do_frag[PF_T + 1][4];  // [fragment % (PF_T + 1)][b0, b1 of d-tile dt, of dt + 1]
        auto load_do = [&](int f) { ldmatrix_x4_trans(do_frag[f % (PF_T + 1)], bt_rows.at(dos_saddr, f / DT2 * MMA_K, f % DT2 * 2)); };
#pragma unroll
        for (int f = 0; f < PF_T; f++) load_do(f);
        uint32_t p_frag[4];  // [a0..a3]: P^T of the warp's keys x queries 16 j .. 16 j + 15
#pragma unroll
        for (int f = 0; f < FR_T; f++) {
            if (f + PF_T < FR_T) load_do(f + PF_T);
            const int j = f / DT2, dt = f % DT2 * 2, bf = f % (PF_T + 1);
            if (dt == 0) {
                p_frag[0] = pack2<T>(st_acc[2 * j][0], st_acc[2 * j][1]);
                p_frag[1] = pack2<T>(st_acc[2 * j][2], st_acc[2 * j][3]);
                p_frag[2] = pack2<T>(st_acc[2 * j + 1][0], st_acc[2 * j + 1][1]);
                p_frag[3] = pack2<T>(st_acc[2 * j + 1][2], st_acc[2 * j + 1][3]);
            }
            mma_m16n8k16<T>(dv_acc[dt], p_frag, do_frag[bf][0], do_frag[bf][1]);
            mma_m16n8k16<T>(dv_acc[dt + 1], p_frag, do_frag[bf][2], do_frag[bf][3]);
        }"""

# ---- dS^T to shared memory and dK += dS^T Q ----------------------------------------------
DK_OLD = """#pragma unroll
        for (int j = 0; j < BLOCK_M / MMA_K; j++) {
            uint32_t ds_frag[4];  // [a0..a3]: dS^T of the warp's keys x queries 16 j .. 16 j + 15
            ds_frag[0] = pack2<T>(dpt_acc[2 * j][0], dpt_acc[2 * j][1]);
            ds_frag[1] = pack2<T>(dpt_acc[2 * j][2], dpt_acc[2 * j][3]);
            ds_frag[2] = pack2<T>(dpt_acc[2 * j + 1][0], dpt_acc[2 * j + 1][1]);
            ds_frag[3] = pack2<T>(dpt_acc[2 * j + 1][2], dpt_acc[2 * j + 1][3]);
            const int key_lo = warp_key0 + g, key_hi = key_lo + 8, col = j * MMA_K + 2 * t;
            *reinterpret_cast<uint32_t *>(&ds_smem[key_lo][swizzle(key_lo, col)]) = ds_frag[0];
            *reinterpret_cast<uint32_t *>(&ds_smem[key_hi][swizzle(key_hi, col)]) = ds_frag[1];
            *reinterpret_cast<uint32_t *>(&ds_smem[key_lo][swizzle(key_lo, col + 8)]) = ds_frag[2];
            *reinterpret_cast<uint32_t *>(&ds_smem[key_hi][swizzle(key_hi, col + 8)]) = ds_frag[3];
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt += 2) {
                uint32_t q_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                ldmatrix_x4_trans(q_frag, bt_rows.at(qs_saddr, j * MMA_K, dt));
                mma_m16n8k16<T>(dk_acc[dt], ds_frag, q_frag[0], q_frag[1]);
                mma_m16n8k16<T>(dk_acc[dt + 1], ds_frag, q_frag[2], q_frag[3]);
            }
        }"""
DK_NEW = """        // Software-pipelined as dV: Q's fragment f loaded PF_T fragments before its mma.
        uint32_t q_frag[PF_T + 1][4];  // [fragment % (PF_T + 1)][b0, b1 of d-tile dt, of dt + 1]
        auto load_q = [&](int f) { ldmatrix_x4_trans(q_frag[f % (PF_T + 1)], bt_rows.at(qs_saddr, f / DT2 * MMA_K, f % DT2 * 2)); };
#pragma unroll
        for (int f = 0; f < PF_T; f++) load_q(f);
        uint32_t ds_frag[4];  // [a0..a3]: dS^T of the warp's keys x queries 16 j .. 16 j + 15
#pragma unroll
        for (int f = 0; f < FR_T; f++) {
            if (f + PF_T < FR_T) load_q(f + PF_T);
            const int j = f / DT2, dt = f % DT2 * 2, bf = f % (PF_T + 1);
            if (dt == 0) {
                ds_frag[0] = pack2<T>(dpt_acc[2 * j][0], dpt_acc[2 * j][1]);
                ds_frag[1] = pack2<T>(dpt_acc[2 * j][2], dpt_acc[2 * j][3]);
                ds_frag[2] = pack2<T>(dpt_acc[2 * j + 1][0], dpt_acc[2 * j + 1][1]);
                ds_frag[3] = pack2<T>(dpt_acc[2 * j + 1][2], dpt_acc[2 * j + 1][3]);
                const int key_lo = warp_key0 + g, key_hi = key_lo + 8, col = j * MMA_K + 2 * t;
                *reinterpret_cast<uint32_t *>(&ds_smem[key_lo][swizzle(key_lo, col)]) = ds_frag[0];
                *reinterpret_cast<uint32_t *>(&ds_smem[key_hi][swizzle(key_hi, col)]) = ds_frag[1];
                *reinterpret_cast<uint32_t *>(&ds_smem[key_lo][swizzle(key_lo, col + 8)]) = ds_frag[2];
                *reinterpret_cast<uint32_t *>(&ds_smem[key_hi][swizzle(key_hi, col + 8)]) = ds_frag[3];
            }
            mma_m16n8k16<T>(dk_acc[dt], ds_frag, q_frag[bf][0], q_frag[bf][1]);
            mma_m16n8k16<T>(dk_acc[dt + 1], ds_frag, q_frag[bf][2], q_frag[bf][3]);
        }"""

# ---- dQ += dS K ---------------------------------------------------------------------------
DQ_OLD = """        __syncthreads();  // every warp's keys of dS^T are in shared memory
"""
DQ_NEW = """        // dQ's first K fragments before the barrier: K_j never changes in shared memory.
        constexpr int KJ = BLOCK_N / MMA_K, FR_Q = D / (2 * MMA_N) * KJ, PF_Q = 6;
        uint32_t k_frag[PF_Q + 1][4];  // [fragment % (PF_Q + 1)][b0, b1 of d-tile dt, of dt + 1]
        // fragment f: K's B of d-tiles 2 (f / KJ), + 1 for key k-step f % KJ
        auto load_k = [&](int f) { ldmatrix_x4_trans(k_frag[f % (PF_Q + 1)], bt_rows.at(k_saddr, f % KJ * MMA_K, f / KJ * 2)); };
#pragma unroll
        for (int f = 0; f < PF_Q; f++) load_k(f);
        __syncthreads();  // every warp's keys of dS^T are in shared memory
"""
DQ_LOOP_OLD = """#pragma unroll
        for (int dt = 0; dt < D / MMA_N; dt += 2) {
            float dq_acc[2][4] = {};  // [d-tile dt, dt + 1][c0..c3]: queries q_lo, q_lo + 8; cols 2t, 2t + 1
#pragma unroll
            for (int kj = 0; kj < BLOCK_N / MMA_K; kj++) {
                uint32_t k_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                ldmatrix_x4_trans(k_frag, bt_rows.at(k_saddr, kj * MMA_K, dt));
                mma_m16n8k16<T>(dq_acc[0], dst_frag[kj], k_frag[0], k_frag[1]);
                mma_m16n8k16<T>(dq_acc[1], dst_frag[kj], k_frag[2], k_frag[3]);
            }
#pragma unroll
            for (int half = 0; half < 2; half++) {"""
DQ_LOOP_NEW = """        // Software-pipelined: K's fragment f loaded PF_Q fragments before its mma.
        float dq_acc[2][4];  // [d-tile dt, dt + 1][c0..c3]: queries q_lo, q_lo + 8; cols 2t, 2t + 1
#pragma unroll
        for (int f = 0; f < FR_Q; f++) {
            if (f + PF_Q < FR_Q) load_k(f + PF_Q);
            const int dt = f / KJ * 2, kj = f % KJ, bf = f % (PF_Q + 1);
            if (kj == 0) {
#pragma unroll
                for (int e = 0; e < 4; e++) dq_acc[0][e] = dq_acc[1][e] = 0.0f;
            }
            mma_m16n8k16<T>(dq_acc[0], dst_frag[kj], k_frag[bf][0], k_frag[bf][1]);
            mma_m16n8k16<T>(dq_acc[1], dst_frag[kj], k_frag[bf][2], k_frag[bf][3]);
            if (kj < KJ - 1) continue;
#pragma unroll
            for (int half = 0; half < 2; half++) {"""

# ---- the dQ atomics in pairs on sm_90 -------------------------------------------------------
RED_OLD = """                if (lo_in) atomicAdd(dq_lo + col, dq_acc[half][0]), atomicAdd(dq_lo + col + 1, dq_acc[half][1]);
                if (hi_in) atomicAdd(dq_hi + col, dq_acc[half][2]), atomicAdd(dq_hi + col + 1, dq_acc[half][3]);"""
RED_NEW = """                if (lo_in) red_add2(dq_lo + col, dq_acc[half][0], dq_acc[half][1]);
                if (hi_in) red_add2(dq_hi + col, dq_acc[half][2], dq_acc[half][3]);"""
RED_HELPER_OLD = """constexpr int BWD_MIN_BLOCKS = 2;
"""
RED_HELPER_NEW = """constexpr int BWD_MIN_BLOCKS = 2;

// dst[0] += x, dst[1] += y in global memory, the result unused: on sm_90 one vector
// reduction (red.global.add.v2.f32, PTX 8.1) for the two, 8-byte aligned (dst is column
// 2t + 8 dt of a row of D floats in a 16-byte aligned workspace); before it two scalar ones.
__device__ __forceinline__ void red_add2(float *dst, float x, float y)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(x, y));
#else
    atomicAdd(dst, x), atomicAdd(dst + 1, y);
#endif
}
"""

# ---- the step's queries in two parts: S^T and dP^T of 32 queries at a time -------------------
PARTS_SIG_OLD = """    auto keys_times_queries_t = [&](float (&acc)[BLOCK_M / MMA_N][4], uint32_t keys_saddr, uint32_t queries_saddr) {
#pragma unroll
        for (int nt = 0; nt < BLOCK_M / MMA_N; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;"""
PARTS_SIG_NEW = """    // The query block in Q_PARTS parts (see query_step): the products take QNT n-tiles from query q0.
    constexpr int Q_PARTS = 2, QNT = BLOCK_M / MMA_N / Q_PARTS;
    static_assert(QNT % 2 == 0, "a part is whole k-steps of 16 queries for dV and dK");
    auto keys_times_queries_t = [&](float (&acc)[QNT][4], uint32_t keys_saddr, uint32_t queries_saddr, int q0) {
#pragma unroll
        for (int nt = 0; nt < QNT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;"""
PARTS_NT_OLD = """            for (int nt = 0; nt < BLOCK_M / MMA_N; nt += 2) {"""
PARTS_NT_NEW = """            for (int nt = 0; nt < QNT; nt += 2) {"""
PARTS_B_OLD = """ldmatrix_x4(b_frag, b_rows.at(queries_saddr, nt * MMA_N, 2 * kk));"""
PARTS_B_NEW = """ldmatrix_x4(b_frag, b_rows.at(queries_saddr, q0 + nt * MMA_N, 2 * kk));"""
PARTS_BODY_OLD = """        // S^T = K_j Q_i^T: the warp's 16 keys x BLOCK_M queries.
        float st_acc[BLOCK_M / MMA_N][4];  // [query n-tile][c0..c3]: keys g, g+8; queries 8 nt + 2t, + 1
        keys_times_queries_t(st_acc, k_saddr, qs_saddr);

        // P^T = exp2(S^T scale log2e - LSE log2e), in place. Masked: a hidden pair (a key
        // past seqlen_k or past the row's causal limit, a row past seqlen_q) is selected
        // to 0, never computed from -inf: a row that sees no key has LSE = -inf, and
        // -inf - -inf would be NaN. (Every row of it is masked, so its LSE is never used.)
        auto visible = [&](int nt, int e) {
            const int key = n0 + warp_key0 + g + (e >= 2 ? 8 : 0), row = m0 + nt * MMA_N + 2 * t + (e & 1);
            return row < p.seqlen_q && key < p.seqlen_k && (!p.causal || key <= row + shift);
        };
#pragma unroll
        for (int nt = 0; nt < BLOCK_M / MMA_N; nt++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int q_col = nt * MMA_N + 2 * t + c;  // this lane's query column
                const float lse_log2 = !MASKED || m0 + q_col < p.seqlen_q ? p.lse[row0 + q_col] * LOG2E : 0.0f;
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float prob = exp2_approx(fmaf(st_acc[nt][2 * r + c], scale_log2, -lse_log2));
                    st_acc[nt][2 * r + c] = !MASKED || visible(nt, 2 * r + c) ? prob : 0.0f;
                }
            }

        // dV_j += P^T dO_i. The C fragments of query n-tiles 2j, 2j + 1 are the A fragment of
        // k-step j. B = dO (k = query, n = d): dO's rows are the k of B, transposed on the way
        // as V in the forward: queries 16 j + 0-7 / 8-15 (lane / 8 % 2), chunk dt + lane / 16.
#pragma unroll
        for (int j = 0; j < BLOCK_M / MMA_K; j++) {
            uint32_t p_frag[4];  // [a0..a3]: P^T of the warp's keys x queries 16 j .. 16 j + 15
            p_frag[0] = pack2<T>(st_acc[2 * j][0], st_acc[2 * j][1]);
            p_frag[1] = pack2<T>(st_acc[2 * j][2], st_acc[2 * j][3]);
            p_frag[2] = pack2<T>(st_acc[2 * j + 1][0], st_acc[2 * j + 1][1]);
            p_frag[3] = pack2<T>(st_acc[2 * j + 1][2], st_acc[2 * j + 1][3]);
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt += 2) {
                uint32_t do_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                ldmatrix_x4_trans(do_frag, bt_rows.at(dos_saddr, j * MMA_K, dt));
                mma_m16n8k16<T>(dv_acc[dt], p_frag, do_frag[0], do_frag[1]);
                mma_m16n8k16<T>(dv_acc[dt + 1], p_frag, do_frag[2], do_frag[3]);
            }
        }

        // dP^T = V_j dO_i^T: as S^T, with V for K and dO for Q.
        float dpt_acc[BLOCK_M / MMA_N][4];  // [query n-tile][c0..c3], as st_acc
        keys_times_queries_t(dpt_acc, v_saddr, dos_saddr);

        // dS^T = P^T * (dP^T - D), in place in dpt_acc; masked pairs are 0 (a NaN in V at a key
        // a row does not see must not reach that row's dQ through 0 x NaN).
#pragma unroll
        for (int nt = 0; nt < BLOCK_M / MMA_N; nt++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int q_col = nt * MMA_N + 2 * t + c;
                const float d_row = !MASKED || m0 + q_col < p.seqlen_q ? a.d_ws[row0 + q_col] : 0.0f;
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float ds = st_acc[nt][2 * r + c] * (dpt_acc[nt][2 * r + c] - d_row);
                    dpt_acc[nt][2 * r + c] = !MASKED || visible(nt, 2 * r + c) ? ds : 0.0f;
                }
            }

        // dS^T to shared memory for dQ (swizzled: the 8 rows g of a fragment store land in 8
        // different 16-byte chunks of the 128-byte row, so the 4-byte stores are conflict-free),
        // and dK_j += dS^T Q_i from the same registers: B = Q (k = query, n = d), transposed on
        // the way as dO above.
#pragma unroll
        for (int j = 0; j < BLOCK_M / MMA_K; j++) {
            uint32_t ds_frag[4];  // [a0..a3]: dS^T of the warp's keys x queries 16 j .. 16 j + 15
            ds_frag[0] = pack2<T>(dpt_acc[2 * j][0], dpt_acc[2 * j][1]);
            ds_frag[1] = pack2<T>(dpt_acc[2 * j][2], dpt_acc[2 * j][3]);
            ds_frag[2] = pack2<T>(dpt_acc[2 * j + 1][0], dpt_acc[2 * j + 1][1]);
            ds_frag[3] = pack2<T>(dpt_acc[2 * j + 1][2], dpt_acc[2 * j + 1][3]);
            const int key_lo = warp_key0 + g, key_hi = key_lo + 8, col = j * MMA_K + 2 * t;
            *reinterpret_cast<uint32_t *>(&ds_smem[key_lo][swizzle(key_lo, col)]) = ds_frag[0];
            *reinterpret_cast<uint32_t *>(&ds_smem[key_hi][swizzle(key_hi, col)]) = ds_frag[1];
            *reinterpret_cast<uint32_t *>(&ds_smem[key_lo][swizzle(key_lo, col + 8)]) = ds_frag[2];
            *reinterpret_cast<uint32_t *>(&ds_smem[key_hi][swizzle(key_hi, col + 8)]) = ds_frag[3];
#pragma unroll
            for (int dt = 0; dt < D / MMA_N; dt += 2) {
                uint32_t q_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                ldmatrix_x4_trans(q_frag, bt_rows.at(qs_saddr, j * MMA_K, dt));
                mma_m16n8k16<T>(dk_acc[dt], ds_frag, q_frag[0], q_frag[1]);
                mma_m16n8k16<T>(dk_acc[dt + 1], ds_frag, q_frag[2], q_frag[3]);
            }
        }"""
PARTS_BODY_NEW = """        // The step's queries in Q_PARTS parts of BLOCK_M / Q_PARTS: S^T, P^T, dV, dP^T, dS^T and
        // dK for one part at a time, so S^T and dP^T hold QNT n-tiles each (16 + 16 fp32 a lane
        // at Q_PARTS = 2 instead of 32 + 32); each accumulator adds the same products in the
        // same order as over the whole block (dV and dK's k-steps j go 0, 1 | 2, 3).
        auto visible = [&](int nt, int e) {  // nt: the n-tile in the step (0 .. BLOCK_M / MMA_N - 1)
            const int key = n0 + warp_key0 + g + (e >= 2 ? 8 : 0), row = m0 + nt * MMA_N + 2 * t + (e & 1);
            return row < p.seqlen_q && key < p.seqlen_k && (!p.causal || key <= row + shift);
        };
#pragma unroll
        for (int part = 0; part < Q_PARTS; part++) {
            const int nt0 = part * QNT, j0 = nt0 / 2;  // the part's first query n-tile and k-step of 16

            // S^T = K_j Q_i^T: the warp's 16 keys x the part's queries.
            float st_acc[QNT][4];  // [query n-tile - nt0][c0..c3]: keys g, g+8; queries 8 (nt0 + nt) + 2t, + 1
            keys_times_queries_t(st_acc, k_saddr, qs_saddr, nt0 * MMA_N);

            // P^T = exp2(S^T scale log2e - LSE log2e), in place, masked as the kernel does.
#pragma unroll
            for (int nt = 0; nt < QNT; nt++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int q_col = (nt0 + nt) * MMA_N + 2 * t + c;  // this lane's query column
                    const float lse_log2 = !MASKED || m0 + q_col < p.seqlen_q ? p.lse[row0 + q_col] * LOG2E : 0.0f;
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const float prob = exp2_approx(fmaf(st_acc[nt][2 * r + c], scale_log2, -lse_log2));
                        st_acc[nt][2 * r + c] = !MASKED || visible(nt0 + nt, 2 * r + c) ? prob : 0.0f;
                    }
                }

            // dV_j += P^T dO_i over the part's k-steps j0 + j.
#pragma unroll
            for (int j = 0; j < QNT / 2; j++) {
                uint32_t p_frag[4];  // [a0..a3]: P^T of the warp's keys x queries 16 (j0 + j) .. + 15
                p_frag[0] = pack2<T>(st_acc[2 * j][0], st_acc[2 * j][1]);
                p_frag[1] = pack2<T>(st_acc[2 * j][2], st_acc[2 * j][3]);
                p_frag[2] = pack2<T>(st_acc[2 * j + 1][0], st_acc[2 * j + 1][1]);
                p_frag[3] = pack2<T>(st_acc[2 * j + 1][2], st_acc[2 * j + 1][3]);
#pragma unroll
                for (int dt = 0; dt < D / MMA_N; dt += 2) {
                    uint32_t do_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                    ldmatrix_x4_trans(do_frag, bt_rows.at(dos_saddr, (j0 + j) * MMA_K, dt));
                    mma_m16n8k16<T>(dv_acc[dt], p_frag, do_frag[0], do_frag[1]);
                    mma_m16n8k16<T>(dv_acc[dt + 1], p_frag, do_frag[2], do_frag[3]);
                }
            }

            // dP^T = V_j dO_i^T: as S^T, with V for K and dO for Q.
            float dpt_acc[QNT][4];  // [query n-tile - nt0][c0..c3], as st_acc
            keys_times_queries_t(dpt_acc, v_saddr, dos_saddr, nt0 * MMA_N);

            // dS^T = P^T * (dP^T - D), in place in dpt_acc; masked pairs are 0.
#pragma unroll
            for (int nt = 0; nt < QNT; nt++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int q_col = (nt0 + nt) * MMA_N + 2 * t + c;
                    const float d_row = !MASKED || m0 + q_col < p.seqlen_q ? a.d_ws[row0 + q_col] : 0.0f;
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const float ds = st_acc[nt][2 * r + c] * (dpt_acc[nt][2 * r + c] - d_row);
                        dpt_acc[nt][2 * r + c] = !MASKED || visible(nt0 + nt, 2 * r + c) ? ds : 0.0f;
                    }
                }

            // dS^T to shared memory for dQ, and dK_j += dS^T Q_i, over the part's k-steps j0 + j.
#pragma unroll
            for (int j = 0; j < QNT / 2; j++) {
                uint32_t ds_frag[4];  // [a0..a3]: dS^T of the warp's keys x queries 16 (j0 + j) .. + 15
                ds_frag[0] = pack2<T>(dpt_acc[2 * j][0], dpt_acc[2 * j][1]);
                ds_frag[1] = pack2<T>(dpt_acc[2 * j][2], dpt_acc[2 * j][3]);
                ds_frag[2] = pack2<T>(dpt_acc[2 * j + 1][0], dpt_acc[2 * j + 1][1]);
                ds_frag[3] = pack2<T>(dpt_acc[2 * j + 1][2], dpt_acc[2 * j + 1][3]);
                const int key_lo = warp_key0 + g, key_hi = key_lo + 8, col = (j0 + j) * MMA_K + 2 * t;
                *reinterpret_cast<uint32_t *>(&ds_smem[key_lo][swizzle(key_lo, col)]) = ds_frag[0];
                *reinterpret_cast<uint32_t *>(&ds_smem[key_hi][swizzle(key_hi, col)]) = ds_frag[1];
                *reinterpret_cast<uint32_t *>(&ds_smem[key_lo][swizzle(key_lo, col + 8)]) = ds_frag[2];
                *reinterpret_cast<uint32_t *>(&ds_smem[key_hi][swizzle(key_hi, col + 8)]) = ds_frag[3];
#pragma unroll
                for (int dt = 0; dt < D / MMA_N; dt += 2) {
                    uint32_t q_frag[4];  // [b0, b1 of d-tile dt, b0, b1 of d-tile dt + 1]
                    ldmatrix_x4_trans(q_frag, bt_rows.at(qs_saddr, (j0 + j) * MMA_K, dt));
                    mma_m16n8k16<T>(dk_acc[dt], ds_frag, q_frag[0], q_frag[1]);
                    mma_m16n8k16<T>(dk_acc[dt + 1], ds_frag, q_frag[2], q_frag[3]);
                }
            }
        }"""
PARTS = [(PARTS_SIG_OLD, PARTS_SIG_NEW), (PARTS_NT_OLD, PARTS_NT_NEW), (PARTS_B_OLD, PARTS_B_NEW), (PARTS_BODY_OLD, PARTS_BODY_NEW)]

PIPE_KQ = [(KQ_OLD, KQ_NEW)]

# ---- parts with the rolling prefetch of pipe in S^T, dP^T and dQ ----------------------------
# (PARTS_SIG, then KQ_OLD replaced by KQ_NEW over the part's QNT n-tiles from query q0)
PARTS_KQ_NEW = KQ_NEW.replace("NB = BLOCK_M / (2 * MMA_N)", "NB = QNT / 2").replace("PF_KQ = 4;", "PF_KQ = NB;").replace(
    "b_rows.at(queries_saddr, nt * MMA_N, 2 * kk)", "b_rows.at(queries_saddr, q0 + nt * MMA_N, 2 * kk)")
PARTS_PIPE = [(PARTS_SIG_OLD, PARTS_SIG_NEW), (KQ_OLD, PARTS_KQ_NEW), (PARTS_BODY_OLD, PARTS_BODY_NEW),
              (DQ_OLD, DQ_NEW), (DQ_LOOP_OLD, DQ_LOOP_NEW)]

PIPE = PIPE_KQ + [(DV_OLD, DV_NEW), (DK_OLD, DK_NEW), (DQ_OLD, DQ_NEW), (DQ_LOOP_OLD, DQ_LOOP_NEW)]
RED2 = [(RED_HELPER_OLD, RED_HELPER_NEW), (RED_OLD, RED_NEW)]
VARIANTS = {
    "red2": RED2,
    "parts": PARTS,
    "pipe": PIPE,
    "parts_pipe": PARTS_PIPE,
    "parts_pipe_red2": PARTS_PIPE + RED2,
}


def write(name, pairs):
    text = open(os.path.join(ROOT, SRC)).read()
    pairs = pairs + [('"14_backward"', f'"14_{name}"')]  # fa2_name: the harness's rows say which
    for old, new in pairs:
        if text.count(old) != 1:
            print(f"error: bwd_variants: {name}: '{old.strip()[:60]}' occurs {text.count(old)} times in {SRC} (allowed: once)",
                  file=sys.stderr)
            return 1
        text = text.replace(old, new)
    dst = os.path.join(ROOT, "build", "ab", f"14_{name}.cu")  # as deep as SRC: its #include lines resolve
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "w") as f:
        f.write(text)
    print(f"build/ab/14_{name}.cu")
    return 0


def main(argv):
    if argv[1:] == ["--list"]:
        print(" ".join(VARIANTS))
        return 0
    names = argv[1:] or list(VARIANTS)
    bad = [n for n in names if n not in VARIANTS]
    if bad:
        print(f"error: bwd_variants: no variant {' '.join(bad)} (allowed: {' '.join(VARIANTS)})", file=sys.stderr)
        return 2
    return max(write(n, VARIANTS[n]) for n in names)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
