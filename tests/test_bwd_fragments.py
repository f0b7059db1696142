"""Step 14's backward work split, lane by lane, without a GPU.

Emulates one step of fa2_bwd_kernel's five products for every warp of its tiles (BwdWide: 8
warps, 64 queries x 128 keys; BwdNarrow: 4 warps, 64 x 64; both at d64 and d128; BwdTallStaged: 8
warps, 128 x 128, S and dP warp tiles of 32 queries x 64 keys, d64 only): Q, K, V and dO in swizzled shared
memory as TileCopy writes them, ldmatrix.x4 (and .trans) and mma.m16n8k16 by their PTX fragment
definitions, and the kernel's LaneRows addresses, warp tiles and loops, mirrored here (keep them in
step with steps/14_backward/kernel.cu). Checks S, dP, dV, dK and dQ element by element against
plain matrix products of small integers (exact in fp32), that every output element is written by
exactly one lane, that every ldmatrix phase and every P/dS fragment store touches 32 different
banks, and prints one PASS or FAIL line per tile and head dim.
usage: python3 tests/test_bwd_fragments.py
"""
import random, sys
MMA_M, MMA_N, MMA_K = 16, 8, 16
def swz(row, col): return (((col // 8) ^ (row % 8)) * 8) | (col % 8)

class Smem:
    def __init__(s): s.m = {}
    def put_tile(s, base, mat, cols):  # swizzled [rows][cols]
        for r, row in enumerate(mat):
            for c, x in enumerate(row): s.m[base + (r * cols + swz(r, c)) * 2] = x
    def get(s, addr):
        assert addr % 2 == 0 and addr in s.m, hex(addr)
        return s.m[addr]

def ldsm(sm, addrs, trans):
    # addrs[lane]: row address; returns regs[lane][i] = (lo, hi)
    out = [[None] * 4 for _ in range(32)]
    for i in range(4):
        for l in range(32):
            if not trans:
                a = addrs[8 * i + l // 4]; e = 2 * (l % 4)
                out[l][i] = (sm.get(a + 2 * e), sm.get(a + 2 * e + 2))
            else:
                r0 = addrs[8 * i + 2 * (l % 4)]; r1 = addrs[8 * i + 2 * (l % 4) + 1]
                out[l][i] = (sm.get(r0 + 2 * (l // 4)), sm.get(r1 + 2 * (l // 4)))
    # bank check: each 8-lane phase conflict-free
    for i in range(4):
        banks = set()
        for l in range(8):
            a = addrs[8 * i + l]; assert a % 16 == 0
            for w in range(4): banks.add((a // 4 + w) % 32)
        assert len(banks) == 32, "bank conflict"
    return out

def mma(c, a, b0, b1):
    # c[lane][4], a[lane][4] pairs, b0/b1[lane] pairs
    A = [[0] * 16 for _ in range(16)]; B = [[0] * 8 for _ in range(16)]
    for l in range(32):
        g, t = l // 4, l % 4
        A[g][2*t], A[g][2*t+1] = a[l][0]; A[g+8][2*t], A[g+8][2*t+1] = a[l][1]
        A[g][2*t+8], A[g][2*t+9] = a[l][2]; A[g+8][2*t+8], A[g+8][2*t+9] = a[l][3]
        B[2*t][g], B[2*t+1][g] = b0[l]; B[2*t+8][g], B[2*t+9][g] = b1[l]
    for l in range(32):
        g, t = l // 4, l % 4
        for e in range(4):
            r = g + 8 * (e // 2); n = 2 * t + (e & 1)
            c[l][e] += sum(A[r][k] * B[k][n] for k in range(16))

def mma_x4(acc, nt, a, bf):
    # an ldmatrix.x4 B fragment holds two n-tiles: acc[nt] and acc[nt + 1] += a x each
    mma(acc[nt], a, [x[0] for x in bf], [x[1] for x in bf])
    mma(acc[nt + 1], a, [x[2] for x in bf], [x[3] for x in bf])

def scatter(out, acc, r0, c0):
    # a warp tile's C fragments acc[m-tile][n-tile][lane][4] into out at (r0, c0), each element once
    for mt in range(len(acc)):
        for nt in range(len(acc[mt])):
            for l in range(32):
                g, t = l // 4, l % 4
                for e in range(4):
                    r = r0 + mt * 16 + g + 8 * (e // 2); c = c0 + nt * 8 + 2 * t + (e & 1)
                    assert out[r][c] is None; out[r][c] = acc[mt][nt][l][e]

class LaneRows:
    def __init__(s, cols, row, chunk0, half, span):
        assert span & (span - 1) == 0 and chunk0 % span == 0
        s.cols, s.row_off, s.chunk_xor = cols, row * cols * 2 + chunk0 // 8 * 128, ((chunk0 % 8) ^ half ^ (row % 8)) * 16
        s.span = span
    def at(s, tile, r0, c0):
        assert r0 % 8 == 0 and c0 % 2 == 0 and (c0 % 8 < s.span or s.span >= 8)
        return tile + r0 * s.cols * 2 + c0 // 8 * 128 + s.row_off + ((c0 % 8 * 16) ^ s.chunk_xor)

def run(WARPS, BLOCK_N, D, BLOCK_M):
    WR = 32
    SDP_WM = BLOCK_M // WR; SDP_WN = WARPS // SDP_WM; SDP_WARP_N = BLOCK_N // SDP_WN; SDP_NT = SDP_WARP_N // 8
    KV_WN = BLOCK_N // WR; KV_WD = WARPS // KV_WN
    Q_WM = BLOCK_M // WR; Q_WD = WARPS // Q_WM
    KV_COLS = D // KV_WD; Q_COLS = D // Q_WD; Q_CHUNK = min(Q_COLS, 32)
    assert SDP_WM * SDP_WN == WARPS and SDP_WN * SDP_WARP_N == BLOCK_N and SDP_NT % 2 == 0
    rnd = lambda: random.randint(-3, 3)
    Q = [[rnd() for _ in range(D)] for _ in range(BLOCK_M)]; dO = [[rnd() for _ in range(D)] for _ in range(BLOCK_M)]
    K = [[rnd() for _ in range(D)] for _ in range(BLOCK_N)]; V = [[rnd() for _ in range(D)] for _ in range(BLOCK_N)]
    sm = Smem()
    k_s = 0; v_s = k_s + BLOCK_N * D * 2; q_s = v_s + BLOCK_N * D * 2; do_s = q_s + BLOCK_M * D * 2
    p_s = do_s + BLOCK_M * D * 2; ds_s = p_s + BLOCK_M * BLOCK_N * 2
    for base, m in ((k_s, K), (v_s, V), (q_s, Q), (do_s, dO)): sm.put_tile(base, m, D)
    S = [[None] * BLOCK_N for _ in range(BLOCK_M)]; dP = [[None] * BLOCK_N for _ in range(BLOCK_M)]
    for w in range(WARPS):
        sdp_q0 = w % SDP_WM * WR; sdp_k0 = w // SDP_WM * SDP_WARP_N
        qa = [LaneRows(D, sdp_q0 + l % 16, 0, l // 16, D // 8) for l in range(32)]
        kb = [LaneRows(D, sdp_k0 + l // 16 * 8 + l % 8, 0, l // 8 % 2, D // 8) for l in range(32)]
        for (A_s, B_s, out) in ((q_s, k_s, S), (do_s, v_s, dP)):
            acc = [[[[0] * 4 for _ in range(32)] for _ in range(SDP_NT)] for _ in range(2)]
            for kk in range(D // 16):
                af = [ldsm(sm, [qa[l].at(A_s, mt * 16, 2 * kk) for l in range(32)], False) for mt in range(2)]
                for nt in range(0, SDP_NT, 2):
                    bf = ldsm(sm, [kb[l].at(B_s, nt * 8, 2 * kk) for l in range(32)], False)
                    for mt in range(2):
                        mma_x4(acc[mt], nt, af[mt], bf)
            scatter(out, acc, sdp_q0, sdp_k0)
            # store_scores for P (= S here) and dS (= dP here): swizzled [BLOCK_M][BLOCK_N]
            tile = p_s if out is S else ds_s
            for mt in range(2):
                for nt in range(SDP_NT):
                    for l in range(32):
                        g, t = l // 4, l % 4
                        for hi in range(2):
                            row = sdp_q0 + mt * 16 + g + 8 * hi; col = sdp_k0 + nt * 8 + 2 * t
                            sm.m[tile + (row * BLOCK_N + swz(row, col)) * 2] = acc[mt][nt][l][2 * hi]
                            sm.m[tile + (row * BLOCK_N + swz(row, col + 1)) * 2] = acc[mt][nt][l][2 * hi + 1]
            # store bank check: lanes write 4 bytes at rows g, col 2t
            for mt in range(2):
                for nt in range(SDP_NT):
                    banks = set()
                    for l in range(32):
                        g, t = l // 4, l % 4; row = sdp_q0 + mt * 16 + g; col = sdp_k0 + nt * 8 + 2 * t
                        banks.add(((tile + (row * BLOCK_N + swz(row, col)) * 2) // 4) % 32)
                    assert len(banks) == 32, "store conflict"
    mm = lambda A, B, n, m, k: [[sum(A[i][x] * B[x][j] for x in range(k)) for j in range(m)] for i in range(n)]
    T = lambda A: [list(r) for r in zip(*A)]
    assert S == mm(Q, T(K), BLOCK_M, BLOCK_N, D), "S"
    assert dP == mm(dO, T(V), BLOCK_M, BLOCK_N, D), "dP"
    dV = [[None] * D for _ in range(BLOCK_N)]; dK = [[None] * D for _ in range(BLOCK_N)]; dQ = [[None] * D for _ in range(BLOCK_M)]
    for w in range(WARPS):
        kv_k0 = w % KV_WN * WR; kv_d0 = w // KV_WN * KV_COLS
        dq_q0 = w % Q_WM * WR; dq_d0 = w // Q_WM * Q_COLS
        qbt = [LaneRows(D, l // 8 % 2 * 8 + l % 8, kv_d0 // 8, l // 16, KV_COLS // 8) for l in range(32)]
        kbt = [LaneRows(D, l // 8 % 2 * 8 + l % 8, dq_d0 // 8, l // 16, Q_COLS // 8) for l in range(32)]
        pt = [LaneRows(BLOCK_N, l // 16 * 8 + l % 8, kv_k0 // 8, l // 8 % 2, WR // 8) for l in range(32)]
        dsa = [LaneRows(BLOCK_N, dq_q0 + l % 16, 0, l // 16, BLOCK_N // 8) for l in range(32)]
        for (sc_s, qq_s, out) in ((p_s, do_s, dV), (ds_s, q_s, dK)):
            acc = [[[[0] * 4 for _ in range(32)] for _ in range(KV_COLS // 8)] for _ in range(2)]
            for j in range(BLOCK_M // 16):
                af = [ldsm(sm, [pt[l].at(sc_s, j * 16, 2 * mt) for l in range(32)], True) for mt in range(2)]
                for dt in range(0, KV_COLS // 8, 2):
                    bf = ldsm(sm, [qbt[l].at(qq_s, j * 16, dt) for l in range(32)], True)
                    for mt in range(2):
                        mma_x4(acc[mt], dt, af[mt], bf)
            scatter(out, acc, kv_k0, kv_d0)
        for col0 in range(0, Q_COLS, Q_CHUNK):
            acc = [[[[0] * 4 for _ in range(32)] for _ in range(Q_CHUNK // 8)] for _ in range(2)]
            for kj in range(BLOCK_N // 16):
                af = [ldsm(sm, [dsa[l].at(ds_s, mt * 16, 2 * kj) for l in range(32)], False) for mt in range(2)]
                for dt in range(0, Q_CHUNK // 8, 2):
                    bf = ldsm(sm, [kbt[l].at(k_s, kj * 16, col0 // 8 + dt) for l in range(32)], True)
                    for mt in range(2):
                        mma_x4(acc[mt], dt, af[mt], bf)
            scatter(dQ, acc, dq_q0, dq_d0 + col0)
    assert dV == mm(T(S), dO, BLOCK_N, D, BLOCK_M), "dV"
    assert dK == mm(T(dP), Q, BLOCK_N, D, BLOCK_M), "dK"
    assert dQ == mm(dP, K, BLOCK_M, D, BLOCK_N), "dQ"


random.seed(1)
failed = 0
for (w, n, m, dims) in ((8, 128, 64, (64, 128)), (4, 64, 64, (64, 128)), (8, 128, 128, (64,))):
    for d in dims:
        name = f"backward work split, {w} warps x {m} queries x {n} keys, d{d}: S, dP, dV, dK, dQ exact, conflict-free"
        try:
            run(w, n, d, m)
            print(f"PASS {name}")
        except AssertionError as e:
            failed += 1
            print(f"FAIL {name}: {e or 'assertion'}")
sys.exit(1 if failed else 0)
