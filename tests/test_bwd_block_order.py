#!/usr/bin/env python3
"""The backward's causal block order, without a GPU: block_position mirrored (keep it in step with
steps/14_backward/kernel.cu and steps/15_wgmma_backward/kernel.cu, which hold the same function),
and the SMs' balance it buys, simulated with step 15's tiles (step 14's on an H100 or H200: 128
keys a block, 64 queries a step at d128, 128 at d64).

The GPU starts a grid's blocks in the order of their linear index, x fastest. Causal, the main
kernel's block (key block, kv head, batch) walks the query blocks from the first that sees its
keys, so a head's key block 0 has the most steps. block_position maps the start order onto the
blocks in sections of BWD_ORDER_PAIRS (kv head, batch) pairs, key block 0 of every pair in the
section first. Checks:
  - the mapping is a bijection onto the launch's grid (every block once), for grids with and
    without a short last section, and the identity when not causal;
  - within a section the key blocks come in start order, longest first;
  - simulated, the SMs taking blocks greedily (each block's time: its steps, plus 2 steps for its
    K and V loads and its dK and dV epilogue, an assumption), the section order finishes no later
    than the grid's own order at the causal backward shapes of reference/shapes.txt, on 132 SMs
    (H100 SXM, H200) and 114 (H100 PCIe).
Prints one PASS or FAIL line per check. With --simulate, also the table of last-SM finishes over
the mean, per shape, SM count and section size.
usage: python3 tests/test_bwd_block_order.py [--simulate]
"""
import heapq
import sys

BWD_ORDER_PAIRS = 8      # the kernels'
BLOCK_N = 128            # keys a block
failures = 0


def report(ok, name, detail=""):
    global failures
    failures += not ok
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail))


def block_position(bx, by, bz, gx, gy, gz, causal, section=BWD_ORDER_PAIRS):
    """(key block, kv head, batch) of the block with index (bx, by, bz) in a gx x gy x gz grid."""
    if not causal:
        return bx, by, bz
    pairs, key_blocks = gy * gz, gx
    i = bx + key_blocks * (by + gy * bz)
    sec, in_sec = i // (key_blocks * section), i % (key_blocks * section)
    sec_pairs = min(section, pairs - sec * section)
    pair = sec * section + in_sec % sec_pairs
    return in_sec // sec_pairs, pair % gy, pair // gy


def start_order(gx, gy, gz, causal, section=BWD_ORDER_PAIRS):
    """The blocks' positions in the order the GPU starts them."""
    return [block_position(bx, by, bz, gx, gy, gz, causal, section)
            for bz in range(gz) for by in range(gy) for bx in range(gx)]


def check_mapping():
    for gx, gy, gz in [(1, 1, 1), (32, 16, 4), (32, 8, 4), (8, 8, 2), (5, 3, 3), (7, 9, 1), (3, 1, 17), (40, 10, 5)]:
        everything = {(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)}
        for causal in (0, 1):
            order = start_order(gx, gy, gz, causal)
            report(sorted(order) == sorted(everything) and len(set(order)) == len(order),
                   f"grid {gx} x {gy} x {gz}, causal {causal}: every block once")
        plain = start_order(gx, gy, gz, 0)
        report(plain == [(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)],
               f"grid {gx} x {gy} x {gz}: the grid's own order when not causal")
        order = start_order(gx, gy, gz, 1)
        section_blocks = gx * BWD_ORDER_PAIRS
        ok = all(order[i][0] <= order[i + 1][0] for i in range(len(order) - 1) if (i + 1) % section_blocks)
        report(ok, f"grid {gx} x {gy} x {gz}, causal: within a section, key block 0 of every pair first, then 1, ...")


def block_steps(shape, nb):
    """Query steps of key block nb (step 15's walk), times the query heads of its group."""
    b, hq, hkv, nq, nk, d = shape
    block_m = 128 if d == 64 else 64
    shift = nk - nq
    first_qb = max(0, nb * BLOCK_N - shift) // block_m
    return (hq // hkv) * max(0, -(-nq // block_m) - first_qb)


def finish_over_mean(shape, sms, section):
    """The last SM's finish over the mean SM's, greedy start in order (section None: grid order)."""
    b, hq, hkv, nq, nk, d = shape
    gx, gy, gz = -(-nk // BLOCK_N), hkv, b
    order = start_order(gx, gy, gz, 0) if section is None else start_order(gx, gy, gz, 1, section)
    cost = [block_steps(shape, nb) + 2 for nb, _, _ in order]
    free = [0.0] * sms
    heapq.heapify(free)
    last = 0.0
    for c in cost:
        t = heapq.heappop(free) + c
        last = max(last, t)
        heapq.heappush(free, t)
    return last / (sum(cost) / sms) - 1


# The causal shapes of the backward set (reference/shapes.txt): B H Hkv Nq Nk d.
CAUSAL_SHAPES = {"B4 H16 N4096 d128": (4, 16, 16, 4096, 4096, 128),
                 "B1 H16 N16384 d128": (1, 16, 16, 16384, 16384, 128),
                 "B4 Hq32 Hkv8 N4096 d128": (4, 32, 8, 4096, 4096, 128)}


def check_balance():
    for name, shape in CAUSAL_SHAPES.items():
        for sms in (132, 114):
            grid, sections = finish_over_mean(shape, sms, None), finish_over_mean(shape, sms, BWD_ORDER_PAIRS)
            report(sections <= grid + 1e-9, f"{name} causal on {sms} SMs: the section order ends no later "
                   f"(last SM {sections:.1%} past the mean, grid order {grid:.1%})")


def simulate():
    print("last SM's finish past the mean, greedy start: grid order, then sections of 2, 4, 8, 16 pairs")
    for name, shape in CAUSAL_SHAPES.items():
        for sms in (132, 114, 108, 82):
            row = [finish_over_mean(shape, sms, None)] + [finish_over_mean(shape, sms, s) for s in (2, 4, 8, 16)]
            print(f"  {name:24s} {sms:3d} SMs: " + "  ".join(f"{v:6.1%}" for v in row))


check_mapping()
check_balance()
if "--simulate" in sys.argv[1:]:
    simulate()
sys.exit(1 if failures else 0)
