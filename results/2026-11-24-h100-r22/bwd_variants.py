#!/usr/bin/env python3
"""Variants of step 14's backward main kernel (fa2_bwd_kernel) for run 88's A/B.

Each variant is steps/14_backward/kernel.cu with pieces replaced. Every OLD text must occur in
the kernel exactly once, or nothing is written. The output is build/ab/14_NAME.cu, for

  make variant step=14 NAME=NAME SRC=build/ab/14_NAME.cu

usage: python3 results/2026-11-24-h100-r22/bwd_variants.py [NAME ...]   (default: the four timed)
       python3 results/2026-11-24-h100-r22/bwd_variants.py --list          (the four timed)
       python3 results/2026-11-24-h100-r22/bwd_variants.py dq_before_dk red_v4   (built and read, not timed)

What the profiles say (B4 H16 N4096 d128 fp16 non-causal, H100; run 86 step 14, run 87 torch's
FA2 backward, same 64 x 128 tile and 8 warps; per-instruction columns of their SourceCounters
CSVs, run86-src14.csv.gz and run87-srcfa2.csv.gz):
  - Both execute 33,554,432 REDG, 32 per warp and step, but not the same ones. Step 14's
    REDG.E.ADD.F32 makes 268,435,456 L1 tag requests and 268,435,456 L2 sectors (8.00 and 8.00
    per instruction; the ideal is 134,217,728 sectors). FA2's makes 33,554,432 and 134,217,728
    (1.00 and 4.00 per instruction, the ideal). A lane of step 14 adds c0, c1 of its C fragment
    at columns 2t, 2t + 1 of row g: one instruction touches 8 rows (8 lines), 16 bytes of each in
    4-byte pieces, every other float. FA2 keeps its fp32 dQ accumulator in an order where one
    instruction adds 32 consecutive floats of one row (one line, four full sectors).
  - Step 14's 32 REDG of the unmasked step (SASS 0x5480-0x5820) hold 28.0% of its 732,510
    stall samples: lg_throttle 16.5, mio 5.9, and long_sb 4.1. The long_sb is almost all on
    IMAD.SHL.U32 R25 at 0x5620, which overwrites R25, half of an earlier REDG's address R24.64,
    and so waits until the queued REDG has read it. The 12 LDSM.16.MT88.4 right after
    (0x5820-0x5900) hold another 5.1% (mio 4.4). FA2's REDG hold 2.5%. Samples track time here
    (8.83 ns and 8.93 ns of kernel per sample), so the burst is about 2.1 of step 14's 6.47 ms.
  - The order of the products is not the difference. In the SASS of the unmasked step (every
    step at this shape) ptxas already puts dQ first after the barrier (its 64 HMMA, 16
    LDSM.M88 of dS, 16 LDSM.MT88 of K), then the 32 REDG, then dV and dK (128 HMMA, 48
    LDSM.MT88). The atomics drain under 128 HMMA, as FA2's do under dK's 64. Only the masked
    step keeps the source order: atomics last, 0 HMMA after them, then the loop's wait and
    barrier.
  - The spill (40 bytes stored, 48 loaded) is 7 LDL, 1 LDL.LU and 1 STL per warp and step. All
    of them are in the loop's head and tail, outside the products: the loop counter and 6
    loop-invariant values (first_qb, steps, the shared-memory base among them). They cost little
    by themselves: the LDL hold 0.4% of samples, and their 9.5 M local accesses of one line each
    are about 4% of the REDG's 268 M line requests. Beside them the head computes s / per_head
    and s % per_head twice a step. Each is an IABS, I2F.RP, MUFU.RCP, F2I, IMAD.HI chain of
    about 35 instructions. The step also recomputes the lane's ldmatrix offsets from S2R
    SR_TID.X (5 S2R a step). The head and tail are 199 of the step's 1,107 instructions and hold
    8.0% of the samples.
  - Step 14's l1tex shared-load bank conflicts, 39.4 M of 643 M wavefronts (FA2: 0.6 M), have 0
    excessive wavefronts at every SASS instruction of the same profile (SourceCounters: each
    LDSM and STS at its ideal). So they are not address conflicts. Arbitration with the
    REDG's L1 traffic is one candidate, not shown.

The variants (run 88 times these four; `walk` and the red forms touch different lines):
  walk         the walk's position (query head h, first row m0) carried from step to step, the
               next one compare away, instead of s / per_head and s % per_head at each use.
               Targets the loop head, and with it the spill.
  red_v2       on sm_90 the dQ atomics two columns at a time: red.global.add.v2.f32 (PTX ISA 8.1,
               REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU, the scalar form's rounding and scope) of c0, c1
               (c2, c3) at columns 2t, 2t + 1. Per instruction 8 rows x 32 contiguous bytes (one
               full sector each). sm_80-89 keep the scalar pair.
  walk_red_v2  both.
  walk_red_v4  walk, and on sm_90 the workspace in the fragments' order within each 16 columns
               (column 16G + 8h + 2t + e at 16G + 4t + 2h + e): a lane's four values of a row in
               d-tiles 2G, 2G + 1 are 16 contiguous bytes, one red.global.add.v4.f32, and an
               instruction covers 64 contiguous bytes (2 full sectors) of each of its 8 rows. Rows
               stay rows: any seqlen_q, the deterministic partials and the prep kernel's zeroing
               work as before. The convert kernel reads each chunk back as four 8-byte pairs.
               sm_80-89 keep the natural order and scalar atomics.
Not timed: dq_before_dk (dK's product after dQ's atomics in the source). The unmasked step's SASS
keeps its shape: 192 HMMA before the first REDG and 125 after the last, against 191 and 128.
Only the masked step changes, with 64 HMMA after its atomics instead of 0. The masked steps are
0 of 64 at the profiled shape. At B4 H16 N4096 causal they are 64 of the 1,056 steps of a
(batch, head)'s 32 key blocks. Predicted within +-0.5% at every shape, below the A/B's
resolution. Also not timed: red_v4 without walk, because
walk_red_v4 against walk measures the same change.

SASS of fa2_bwd_kernel<__half, 128, BwdTile<8, 128>, 2> on sm_90 (the H100's d128 kernel), CUDA
13.0.88, the Makefile's flags. Counts are per warp per step, from the loop's head to its back
branch, with the unmasked or the masked body. Method: cuobjdump -xelf, nvdisasm -gi, counting
between the loop's labels. Spills are `-Xptxas -v` bytes stored / loaded. LDL counts LDL.LU too;
(x2), (x4): REDG.E.ADD.F32x2, F32x4.

  variant        regs  spill   unmasked step: all  HMMA  LDSM  REDG      LDL STL   masked: all  REDG  LDL STL
  s14 (as is)    255   40/48                 1107   320   144  32         8   1           1444    32    9   3
  walk           255    0/0                  1027   320   144  32         0   0           1338    32    0   0
  red_v2         255   36/44                 1079   320   144  16 (x2)    8   1           1424    16   10   3
  walk_red_v2    255    4/4                  1013   320   144  16 (x2)    1   0           1291    16    1   0
  walk_red_v4    255    4/4                  1037   320   144   8 (x4)    1   0           1266     8    1   0
  dq_before_dk   255   24/32                 1106   320   144  32         7   0           1428    32    6   0
  red_v4         255   32/36                 1100   320   144   8 (x4)    8   1           1369     8    8   2
walk_red_v4's step is 24 instructions longer than walk_red_v2's, though it has 8 REDG fewer:
27 IMAD.MOV.U32 gather each REDG.F32x4's four values into an aligned register quad, because
c0, c1 of two d-tiles sit in two HMMA accumulator quads. The d64 kernel (B4 H16 N4096 d64;
160 HMMA, 88 LDSM a step, no spills in any variant) has, for s14 / walk / red_v2 / walk_red_v2 /
walk_red_v4, 795 / 739 / 777 / 721 / 731 instructions a step and 16 / 16 / 8 / 8 / 4 REDG.
L1 tag requests and L2 sectors of the dQ atomics per warp and step. s14 and FA2 are measured;
the variants' numbers are worked out from their address patterns:
  s14 256 and 256; red_v2 128 and 128; red_v4 forms 64 and 128; FA2 32 and 128.
The other architectures (make variant ARCH="80 86 89 90"), bytes stored by the kernels those GPUs
run, s14 / walk / red_v2 / walk_red_v2 / walk_red_v4: sm_80 wide tile d128 4 / 4 / 4 / 4 / 0;
sm_86 and sm_89 narrow tile d128 8 / 0 / 12 / 0 / 0; no d64 kernel spills in any of them.

Predictions for the backward rows of tools/ab.sh (the whole fa2_backward call; step 14 at
B4 H16 N4096 d128 fp16 was 6.597 ms in run 85c, 6.47 ms of it the main kernel). The model:
stall samples that go away become time saved, so each number is at most what the variant can
give, and the low end assumes half of it is refilled by other stalls.
  walk         2% to 3% faster (6.60 -> 6.40-6.47 ms). The step loses 80 instructions (67 of
               the head and tail's 199), both divisions, the 9 LDL/STL and the 5 S2R. The head's
               8.0% of samples (0.52 ms) shrinks by 30-40%.
  red_v2       8% to 16% faster (6.60 -> 5.55-6.07 ms). Tag requests and sectors per step halve
               (256 -> 128 each), so under either limit the burst's 33% of samples (2.1 ms)
               halves.
  walk_red_v2  10% to 19% faster (5.32-5.94 ms): the two add.
  walk_red_v4  12% to 27% faster (4.8-5.8 ms). Tag requests fall to a quarter and sectors to
               half. If the L1 tag stage or the REDG count bounds the burst, it loses 3/4 (1.6
               ms); if L2 sectors bound it, 1/2, as red_v2. So walk_red_v4 beating walk_red_v2
               says the L1 side bounded it, and a tie says the L2 side did. Its 27 IMAD.MOV cost
               issue slots, and issue is 19.6% active.
The same percentages hold at every backward shape: d64 has the same 1 REDG per 10 HMMA, and the
causal and GQA shapes run the same unmasked step (causal masks 64 of 1,056 steps).
B2 H8 N1024 (0.14 ms, 16 steps per block) gains less, because its launch and prologue weigh
more. None of these reaches FA2: 4.47 ms needs one line per REDG, as FA2's order gives, plus a
step of about 1,016 instructions.
"""
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SRC = "steps/14_backward/kernel.cu"

# ---- dQ before dK ---------------------------------------------------------------------------
DK_CALL_OLD = """        // dV_j += P^T dO_i and dK_j += dS^T Q_i: the warp's 32 keys x KV_COLS columns, the
        // step's BLOCK_M queries as k.
        keys_times_queries(dv_acc, p_saddr, dos_saddr);
        keys_times_queries(dk_acc, ds_saddr, qs_saddr);
"""
DK_CALL_NEW = """        // dV_j += P^T dO_i: the warp's 32 keys x KV_COLS columns, the step's BLOCK_M queries as
        // k. (dK_j += dS^T Q_i comes after dQ, so that dQ's atomics drain under its mma.)
        keys_times_queries(dv_acc, p_saddr, dos_saddr);
"""
STEP_END_OLD = """            }
        }
    };

    for (int s = 0; s < steps; s++) {"""
STEP_END_NEW = """            }
        }

        // dK_j += dS^T Q_i, while dQ's atomics drain.
        keys_times_queries(dk_acc, ds_saddr, qs_saddr);
    };

    for (int s = 0; s < steps; s++) {"""
DQ_BEFORE_DK = [(DK_CALL_OLD, DK_CALL_NEW), (STEP_END_OLD, STEP_END_NEW)]

# ---- the dQ atomics two columns at a time on sm_90 --------------------------------------------
HELPER_ANCHOR = """// Kernel 2: one block per (key block, kv head, batch); see the header for the algorithm.
"""
RED2_HELPER = """// dst[0] += x and dst[1] += y in global memory, the result unused. On sm_90 and newer one
// vector reduction, red.global.add.v2.f32 (PTX ISA 8.1; the SASS is
// REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU, the scalar form's rounding and scope), 8-byte aligned:
// dst is column 2t of a row of D floats in a 16-byte aligned workspace. Before sm_90 there is
// no vector red: two scalar ones.
__device__ __forceinline__ void red_add2(float *dst, float x, float y)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\\n" ::"l"(dst), "f"(x), "f"(y));
#else
    atomicAdd(dst, x), atomicAdd(dst + 1, y);
#endif
}

"""
RED_OLD = """                    if (lo_in) atomicAdd(dq_lo + col, dq_acc[mt][dt][0]), atomicAdd(dq_lo + col + 1, dq_acc[mt][dt][1]);
                    if (hi_in) atomicAdd(dq_hi + col, dq_acc[mt][dt][2]), atomicAdd(dq_hi + col + 1, dq_acc[mt][dt][3]);"""
RED2_NEW = """                    if (lo_in) red_add2(dq_lo + col, dq_acc[mt][dt][0], dq_acc[mt][dt][1]);
                    if (hi_in) red_add2(dq_hi + col, dq_acc[mt][dt][2], dq_acc[mt][dt][3]);"""
RED_V2 = [(HELPER_ANCHOR, RED2_HELPER + HELPER_ANCHOR), (RED_OLD, RED2_NEW)]

# ---- the dQ workspace in the fragments' order, four columns at a time on sm_90 ---------------
WS_ANCHOR = """// The workspace: dQ's fp32 accumulator [partials][batch * heads_q * seqlen_q][D]
"""
WS_HELPER = """// Where column `col` of a row of dQ's fp32 workspace lies in the row. On sm_90 and newer each
// 16 columns 16 G .. 16 G + 15 are held in the order of a quad's C fragments: column
// 16 G + 8 h + 2 t + e (d-tile 2 G + h, lane t of the quad, element e) at 16 G + 4 t + 2 h + e,
// so that a lane's four values of a row in d-tiles 2 G and 2 G + 1 are 16 contiguous bytes,
// one red.global.add.v4.f32, and a warp's reduction covers 64 contiguous bytes of each of its
// 8 rows (the natural order: 16 bytes in 4-byte pieces, every other float). Rows stay rows,
// so any seqlen_q and the deterministic partials work as before; the convert kernel reads
// the same order back. Before sm_90 (no vector red) the natural order. The main and the
// convert kernel are compiled for the same architecture in one binary, so they agree.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool DQ_WS_QUAD_ORDER = true;
#else
constexpr bool DQ_WS_QUAD_ORDER = false;
#endif
__device__ __forceinline__ int dq_ws_col(int col)
{
    return DQ_WS_QUAD_ORDER ? (col & ~15) | (((col & 7) >> 1) << 2) | (((col >> 3) & 1) << 1) | (col & 1) : col;
}

// dst[lane's columns 2t, 2t + 1 of d-tile 2G, then of d-tile 2G + 1] += x0, x1, x2, x3, the
// result unused; dst = the workspace row + dq_ws_col(16 G + 2 t). On sm_90 one vector reduction
// (PTX ISA 8.1; REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU, the scalar form's rounding and scope),
// 16-byte aligned (a row is D floats of a 16-byte aligned workspace); before it four scalar ones.
__device__ __forceinline__ void dq_add4(float *dst, float x0, float x1, float x2, float x3)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\\n" ::"l"(dst), "f"(x0), "f"(x1), "f"(x2), "f"(x3));
#else
    atomicAdd(dst, x0), atomicAdd(dst + 1, x1), atomicAdd(dst + MMA_N, x2), atomicAdd(dst + MMA_N + 1, x3);
#endif
}

"""
DQ_PTR_OLD = """                float *dq_lo = dq_ws + (row0 + q_lo) * D + dq_d0 + col0 + 2 * t, *dq_hi = dq_lo + 8 * D;"""
DQ_PTR_NEW = """                float *dq_lo = dq_ws + (row0 + q_lo) * D + dq_ws_col(dq_d0 + col0 + 2 * t), *dq_hi = dq_lo + 8 * D;"""
DQ_LOOP_OLD = """                for (int dt = 0; dt < Q_CHUNK / MMA_N; dt++) {
                    const int col = dt * MMA_N;
                    // into the sum every key block adds to (or this split's partial): the result
                    // unused, so RED, not ATOM
""" + RED_OLD + """
                }"""
DQ_LOOP_NEW = """                for (int dt = 0; dt < Q_CHUNK / MMA_N; dt += 2) {
                    // into the sum every key block adds to (or this split's partial): d-tiles dt and
                    // dt + 1 (16 columns from dt * MMA_N, whole in either order) at a time
                    if (lo_in) dq_add4(dq_lo + dt * MMA_N, dq_acc[mt][dt][0], dq_acc[mt][dt][1], dq_acc[mt][dt + 1][0], dq_acc[mt][dt + 1][1]);
                    if (hi_in) dq_add4(dq_hi + dt * MMA_N, dq_acc[mt][dt][2], dq_acc[mt][dt][3], dq_acc[mt][dt + 1][2], dq_acc[mt][dt + 1][3]);
                }"""
CONVERT_OLD = """            const float4 *part = reinterpret_cast<const float4 *>(a.dq_ws + (split * rows_total + row) * D + chunk * 8);
            const float4 x = part[0], y = part[1];
            lo.x += x.x, lo.y += x.y, lo.z += x.z, lo.w += x.w;
            hi.x += y.x, hi.y += y.y, hi.z += y.z, hi.w += y.w;"""
CONVERT_NEW = """            // the chunk's columns 8 chunk + 2 t + e, t = 0..3: four 8-byte pairs (dq_ws_col)
            const float *part = a.dq_ws + (split * rows_total + row) * D;
            const float2 x0 = *reinterpret_cast<const float2 *>(part + dq_ws_col(chunk * 8 + 0));
            const float2 x1 = *reinterpret_cast<const float2 *>(part + dq_ws_col(chunk * 8 + 2));
            const float2 y0 = *reinterpret_cast<const float2 *>(part + dq_ws_col(chunk * 8 + 4));
            const float2 y1 = *reinterpret_cast<const float2 *>(part + dq_ws_col(chunk * 8 + 6));
            lo.x += x0.x, lo.y += x0.y, lo.z += x1.x, lo.w += x1.y;
            hi.x += y0.x, hi.y += y0.y, hi.z += y1.x, hi.w += y1.y;"""
RED_V4 = [(WS_ANCHOR, WS_HELPER + WS_ANCHOR), (DQ_PTR_OLD, DQ_PTR_NEW), (DQ_LOOP_OLD, DQ_LOOP_NEW), (CONVERT_OLD, CONVERT_NEW)]

# ---- the walk's position carried from step to step, not divided out of s --------------------
WALK_DEF_OLD = """    const int steps = group * per_head;
"""
WALK_DEF_NEW = """    const int steps = group * per_head;
    // The walk's position, carried from step to step rather than divided out of s where it is
    // used (two integer divisions a step, about 35 instructions each): step s is the query rows
    // m0 .. m0 + BLOCK_M - 1 of query head h, and the next step's position is one compare away.
    struct WalkPos { int h, m0; };
    const int m_first = first_qb * BLOCK_M, m_end = (first_qb + per_head) * BLOCK_M;
    auto walk_next = [&](WalkPos w) { return w.m0 + BLOCK_M < m_end ? WalkPos{w.h, w.m0 + BLOCK_M} : WalkPos{w.h + 1, m_first}; };
"""
WALK_ISSUE_OLD = """    auto issue_step = [&](int s, int stage) {
        const int h = h_kv * group + s / per_head, m0 = (first_qb + s % per_head) * BLOCK_M;"""
WALK_ISSUE_NEW = """    auto issue_step = [&](WalkPos w, int stage) {
        const int h = w.h, m0 = w.m0;"""
WALK_FIRST_OLD = """    if (steps > 0) issue_step(0, 0);"""
WALK_FIRST_NEW = """    if (steps > 0) issue_step(WalkPos{h_kv * group, m_first}, 0);"""
WALK_QSTEP_OLD = """    auto query_step = [&](const int s, const int stage, auto masked) {
        constexpr bool MASKED = decltype(masked)::value;
        const int h = h_kv * group + s / per_head, m0 = (first_qb + s % per_head) * BLOCK_M;"""
WALK_QSTEP_NEW = """    auto query_step = [&](const WalkPos w, const int stage, auto masked) {
        constexpr bool MASKED = decltype(masked)::value;
        const int h = w.h, m0 = w.m0;"""
WALK_LOOP_OLD = """    for (int s = 0; s < steps; s++) {
        const int stage = s % STAGES;
        if (STAGES == 1 && s > 0) {  // one buffer: every warp is done with step s - 1 before it is overwritten
            __syncthreads();
            issue_step(s, 0);"""
WALK_LOOP_NEW = """    WalkPos pos = {h_kv * group, m_first};  // step s's
    for (int s = 0; s < steps; s++) {
        const int stage = s % STAGES;
        const WalkPos next = walk_next(pos);  // step s + 1's
        if (STAGES == 1 && s > 0) {  // one buffer: every warp is done with step s - 1 before it is overwritten
            __syncthreads();
            issue_step(pos, 0);"""
WALK_NEXT_OLD = """            issue_step(s + 1, (s + 1) % 2);"""
WALK_NEXT_NEW = """            issue_step(next, (s + 1) % 2);"""
WALK_CALL_OLD = """        const int m0 = (first_qb + s % per_head) * BLOCK_M;
        const bool masked = m0 + BLOCK_M > p.seqlen_q || n0 + BLOCK_N > p.seqlen_k || (p.causal && n0 + BLOCK_N - 1 > m0 + shift);
        if (masked) query_step(s, stage, std::true_type{});
        else query_step(s, stage, std::false_type{});"""
WALK_CALL_NEW = """        const int m0 = pos.m0;
        const bool masked = m0 + BLOCK_M > p.seqlen_q || n0 + BLOCK_N > p.seqlen_k || (p.causal && n0 + BLOCK_N - 1 > m0 + shift);
        if (masked) query_step(pos, stage, std::true_type{});
        else query_step(pos, stage, std::false_type{});
        pos = next;"""
WALK = [(WALK_DEF_OLD, WALK_DEF_NEW), (WALK_ISSUE_OLD, WALK_ISSUE_NEW), (WALK_FIRST_OLD, WALK_FIRST_NEW), (WALK_QSTEP_OLD, WALK_QSTEP_NEW),
        (WALK_LOOP_OLD, WALK_LOOP_NEW), (WALK_NEXT_OLD, WALK_NEXT_NEW), (WALK_CALL_OLD, WALK_CALL_NEW)]

VARIANTS = {
    "walk": WALK,
    "red_v2": RED_V2,
    "walk_red_v2": WALK + RED_V2,
    "walk_red_v4": WALK + RED_V4,
}
# Built and read, not timed (the reading above says why): dq_before_dk, red_v4 alone.
EXTRA = {
    "dq_before_dk": DQ_BEFORE_DK,
    "red_v4": RED_V4,
}


def write(name, pairs):
    text = open(os.path.join(ROOT, SRC)).read()
    pairs = pairs + [('"14_backward"', f'"14_{name}"')]  # fa2_name: the harness's rows and gpu_matrix's lines say which
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
    known = {**VARIANTS, **EXTRA}
    names = argv[1:] or list(VARIANTS)
    bad = [n for n in names if n not in known]
    if bad:
        print(f"error: bwd_variants: no variant {' '.join(bad)} (allowed: {' '.join(known)})", file=sys.stderr)
        return 2
    return max(write(n, known[n]) for n in names)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
