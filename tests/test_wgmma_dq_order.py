#!/usr/bin/env python3
"""Step 15's shared-memory stores and dQ's tile order, thread by thread, without a GPU.

Mirrors steps/15_wgmma_backward/kernel.cu (keep them in step) at d64 (128 queries a step) and d128
(64): each consumer c (keys 64c..64c+63) and thread t (warp w = t / 32, g = lane / 4, tq = lane % 4)
of a wgmma m64nNk16 accumulator holds element (16 w + g + 8 (e / 2), 8 nt + 2 tq + e % 2) in
register 4 nt + e. Checks:
  - the dS elements' places: dP^T's accumulators (key rows, query columns) of both consumers put
    every dS[query][key] of the step's tile once, at the slab swizzle TMA writes (slab key / 64,
    row query, 16-byte chunk (key % 64 / 8) ^ (query % 8)); the instruction that stores them,
    stmatrix.x4.trans, and its banks: scratch/backward_wgmma --check;
  - dQ's staging: each consumer's 64 x 64 part in pair order (registers 2q and 2q + 1 of thread t,
    one 8-byte store at q x 256 + 2t) covers the step's BLOCK_M x D once (the rows split at d64,
    the columns at d128), and a warp's store per q is 256 contiguous bytes;
  - the convert kernel: for every row and 8-column chunk, its two float4 reads (the quad's four
    pairs, side by side) are 16-byte aligned and land on exactly the staged elements, in order.
Prints one PASS or FAIL line per case.
usage: python3 tests/test_wgmma_dq_order.py
"""
import sys

WG, PART_COLS, PART = 128, 64, 64 * 64
failures = 0


def report(ok, name, detail=""):
    global failures
    failures += not ok
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail))


def acc_coord(t, reg):
    w, lane = t // 32, t % 32
    return 16 * w + lane // 4 + 8 * (reg % 4 // 2), 8 * (reg // 4) + 2 * (lane % 4) + reg % 2


def ds_places(D, BM):
    owner = {}
    for c in range(2):
        for nt in range(BM // 8):
            for e in range(4):
                for t in range(WG):
                    key, query = acc_coord(t, 4 * nt + e)
                    off = c * BM * 128 + query * 128 + ((key // 8) ^ (query % 8)) * 16 + key % 8 * 2
                    gkey = 64 * c + key
                    want = gkey // 64 * BM * 128 + query * 128 + ((gkey % 64 // 8) ^ (query % 8)) * 16 + gkey % 8 * 2
                    if off != want or off in owner:
                        return f"dS[{query}][{gkey}] at {off}, want {want} (or written twice)"
                    owner[off] = 1
    if len(owner) != BM * 128:
        return f"{len(owner)} of {BM * 128} elements written"
    return ""


def dq_order(D, BM):
    row0_step, col0_step = (64, 0) if BM == 128 else (0, 64)
    where = {}
    for c in range(2):
        for t in range(WG):
            for reg in range(PART_COLS // 2):
                r, col = acc_coord(t, reg)
                where[(c * row0_step + r, c * col0_step + col)] = c * PART + reg // 2 * 2 * WG + 2 * t + reg % 2
    if len(where) != BM * D or sorted(where.values()) != list(range(BM * D)):
        return "the parts do not cover the step's dQ once"
    for c in range(2):  # warp 0's store of pair q: lanes 0..31 at 32 consecutive 8-byte places
        for q in range(PART_COLS // 4):
            spots = sorted(c * PART + q * 2 * WG + 2 * t for t in range(32))
            if spots != list(range(spots[0], spots[0] + 64, 2)):
                return f"consumer {c} pair {q}: warp 0's stores are not 256 contiguous bytes"
    for r in range(BM):
        for col0 in range(0, D, 8):
            part = r // 64 if row0_step else col0 // PART_COLS
            part_row, part_col = r % 64, col0 % PART_COLS
            thread = part_row // 16 * 32 + part_row % 8 * 4
            pair = part_col // 8 * 2 + part_row % 16 // 8
            at = part * PART + pair * 2 * WG + 2 * thread
            if at % 4:
                return f"row {r} chunk {col0}: float {at} not 16-byte aligned"
            for k in range(8):
                if where[(r, col0 + k)] != at + k:
                    return f"dQ[{r}][{col0 + k}] staged at {where[(r, col0 + k)]}, read at {at + k}"
    return ""


for D, BM in ((64, 128), (128, 64)):
    why = ds_places(D, BM)
    report(not why, f"d{D} ({BM} queries): both consumers' dS elements fill the [{BM}][128] tile once at TMA's slab "
           "swizzle", why)
    why = dq_order(D, BM)
    report(not why, f"d{D} ({BM} queries): the two 64 x 64 dQ parts in pair order cover the step once, a warp's "
           "8-byte stores 256 contiguous bytes, and the convert kernel's two float4 per 8 columns read them back", why)
sys.exit(1 if failures else 0)
