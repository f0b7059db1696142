#!/usr/bin/env python3
"""Step 14's dQ staging (the BwdWideStaged tile), lane by lane, without a GPU.

Mirrors the staged dQ section of steps/14_backward/kernel.cu (keep them in step): every warp's C fragments of its
dQ chunks go to a shared [BLOCK_M][D + 8] fp32 tile by 8-byte stores, the warps of each query slice
of 32 rows (BLOCK_M / 32 of them) meet at a named barrier, 1 + the slice, and each reads back whole
rows of its slice, DQ_RED_VEC floats a lane (4 on sm_90, 1 before), for one reduction instruction
per 32 DQ_RED_VEC consecutive floats of the workspace. Checks, for the staged wide tile (8 warps,
64 queries x 128 keys) at d64 and d128 and the staged 128-query tile (8 warps, 128 x 128, d64
only) with both vector widths, and the narrow tile's split as well (which the step does not stage):
  - the fragment stores: every (row, column) of the step's dQ written once, at row * (D + 8) +
    column, 8-byte aligned; each half-warp of each store (the unit an 8-byte access is served in)
    on 32 different banks;
  - the barrier: every row a warp reads was written only by warps of its named barrier's group,
    the group is the barrier's thread count, and the barrier is one of 1 .. 15 (0 is
    __syncthreads');
  - the reads: every (row, column) read once, back to the value its fragment stored; 16-byte
    aligned for the 16-byte loads; each 8-lane phase of a 16-byte load, and all 32 lanes of a
    4-byte load, on 32 different banks;
  - the reductions: each instruction's lanes cover 32 DQ_RED_VEC consecutive floats of the
    row-major [rows][D] workspace, starting on a 128-byte line, so DQ_RED_VEC whole lines;
  - the staging tile's bytes are what bwd_smem_bytes adds (64 queries: 34 KB at d128, 18 KB at
    d64; 128 queries: 36 KB at d64).
Prints one PASS or FAIL line per case.
usage: python3 tests/test_dq_staging.py
"""
import sys

MMA_M, MMA_N = 16, 8
WARP_ROWS, PAD = 32, 8


def run(WARPS, BLOCK_N, BLOCK_M, D, VEC):
    KV_WN = BLOCK_N // WARP_ROWS
    Q_WM = BLOCK_M // WARP_ROWS; Q_WD = WARPS // Q_WM
    Q_COLS = D // Q_WD; Q_CHUNK = min(Q_COLS, 32)
    STRIDE = D + PAD; READ_ROWS = WARP_ROWS // Q_WD; SEG = 32 * VEC
    # the step's static_asserts
    assert D % 32 == 0 and STRIDE % 32 == 8 and WARP_ROWS % Q_WD == 0
    assert SEG % D == 0 or D % SEG == 0
    assert READ_ROWS * D % SEG == 0 and Q_WM <= 15
    assert KV_WN * (WARPS // KV_WN) == WARPS
    assert BLOCK_M * STRIDE * 4 == {(64, 128): 34, (64, 64): 18, (128, 64): 36}[(BLOCK_M, D)] * 1024

    smem = {}
    writer = {}  # staged row -> warps that wrote into it
    for w in range(WARPS):
        dq_q0 = w % Q_WM * WARP_ROWS; dq_d0 = w // Q_WM * Q_COLS
        for col0 in range(0, Q_COLS, Q_CHUNK):
            for mt in range(WARP_ROWS // MMA_M):
                for dt in range(Q_CHUNK // MMA_N):
                    for hi in range(2):
                        banks = [[], []]
                        for l in range(32):
                            g, t = l // 4, l % 4
                            # the kernel's address: frag = (dq_q0 + mt * 16 + g) * STRIDE + dq_d0 + col0 + dt * 8 + 2t, + 8 rows for c2, c3
                            frag = (dq_q0 + mt * MMA_M + g) * STRIDE + dq_d0 + col0 + dt * MMA_N + 2 * t + hi * 8 * STRIDE
                            assert frag % 2 == 0, "8-byte store not aligned"
                            for e in range(2):
                                row = dq_q0 + mt * MMA_M + g + 8 * hi; col = dq_d0 + col0 + dt * MMA_N + 2 * t + e
                                assert frag + e == row * STRIDE + col, "store address is not the element's (row, column)"
                                assert frag + e not in smem, "element stored twice"
                                smem[frag + e] = (row, col)
                                writer.setdefault(row, set()).add(w)
                                banks[l // 16].append((frag + e) % 32)
                        for half in banks:
                            assert len(set(half)) == 32, f"store bank conflict: {sorted(half)}"
    assert len(smem) == BLOCK_M * D and all(a % STRIDE < D for a in smem), "stores do not cover the step's dQ exactly"

    read = {}
    for w in range(WARPS):
        dq_q0 = w % Q_WM * WARP_ROWS
        group = {x for x in range(WARPS) if x % Q_WM == w % Q_WM}
        barrier = 1 + w % Q_WM  # the kernel's named_barrier_sync_of<Q_WARPS_M, Q_WARPS_D * 32>(1 + warp % Q_WARPS_M)
        assert 1 <= barrier <= 15, "a named barrier outside 1 .. 15"
        assert {x for x in range(WARPS) if 1 + x % Q_WM == barrier} == group, "a barrier's warps are not one slice's"
        assert len(group) * 32 == Q_WD * 32, "the named barrier's thread count is not its group"
        lane_rows = [dq_q0 + w // Q_WM * READ_ROWS + l * VEC // D for l in range(32)]
        lane_cols = [l * VEC % D for l in range(32)]
        for i in range(READ_ROWS * D // SEG):
            r, c = i * SEG // D, i * SEG % D
            gaddr = []
            for l in range(32):
                src = (lane_rows[l] + r) * STRIDE + lane_cols[l] + c
                if VEC == 4: assert src % 4 == 0, "16-byte load not aligned"
                for v in range(VEC):
                    row, col = lane_rows[l] + r, lane_cols[l] + c + v
                    assert col < D and smem[src + v] == (row, col), "read back the wrong element"
                    assert writer[row] <= group, "a row read after a barrier its writers do not meet at"
                    assert (row, col) not in read, "element reduced twice"
                    read[(row, col)] = True
                    gaddr.append(row * D + col)  # the workspace, row-major, from the step's first row
            assert gaddr == list(range(gaddr[0], gaddr[0] + SEG)) and gaddr[0] % 32 == 0, \
                "an instruction's floats are not consecutive whole lines"
            phase = 8 if VEC == 4 else 32
            for p0 in range(0, 32, phase):
                banks = [((lane_rows[l] + r) * STRIDE + lane_cols[l] + c + v) % 32 for l in range(p0, p0 + phase) for v in range(VEC)]
                assert len(set(banks)) == 32, f"load bank conflict: {sorted(banks)}"
    assert len(read) == BLOCK_M * D, "reads do not cover the step's dQ"


def main():
    fails = 0
    for WARPS, BLOCK_N, BLOCK_M, D in ((8, 128, 64, 128), (8, 128, 64, 64), (8, 128, 128, 64), (4, 64, 64, 128), (4, 64, 64, 64)):
        for VEC in (1, 4):
            name = (f"dQ staging, {WARPS} warps x {BLOCK_M} queries x {BLOCK_N} keys, d{D}, "
                    f"{'red.v4 (sm_90)' if VEC == 4 else 'scalar red (sm_80-89)'}")
            if WARPS == 4: name += " (narrow tile: not staged by the step)"
            try:
                run(WARPS, BLOCK_N, BLOCK_M, D, VEC)
                print(f"PASS {name}")
            except AssertionError as e:
                fails += 1
                print(f"FAIL {name}: {e}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
