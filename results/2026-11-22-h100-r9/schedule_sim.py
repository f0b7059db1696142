#!/usr/bin/env python3
"""The schedule simulation quoted in docs/11_persistent.md: how many key tiles each of
132 persistent blocks is given under step 11's candidate schedulers, at the benchmark
shapes, as the largest block's share against the mean (1.000 = perfectly even). A model
of the work, not a timing: an item costs its key tiles (BLOCK_M = BLOCK_N = 128).
usage: python3 schedule_sim.py [SMS]   (default 132)"""
import sys

SMS = int(sys.argv[1]) if len(sys.argv) > 1 else 132
TILE = 128


def key_tiles(m, n, causal):
    """Key tiles q tile m sees (Nq = Nk = n)."""
    return -(-min(n, (m + 1) * TILE) // TILE) if causal else -(-n // TILE)


def one_tile_items(b, h, n, causal, q_tile_outer):
    """One q tile per item: a head's tiles together (longest first), or the q tile outer."""
    m_blocks, pairs = -(-n // TILE), b * h
    order = [(m, p) for m in range(m_blocks) for p in range(pairs)] if q_tile_outer else \
            [(m, p) for p in range(pairs) for m in range(m_blocks)]
    return [key_tiles(m_blocks - 1 - m if causal else m, n, causal) for m, p in order]


def paired_units(b, h, n, causal):
    """Step 11: a causal unit is q tiles m_blocks - 1 - k and k of one head."""
    m_blocks, units = -(-n // TILE), []
    for _ in range(b * h):
        if not causal:
            units += [key_tiles(m, n, False) for m in range(m_blocks)]
            continue
        for k in range((m_blocks + 1) // 2):
            far = m_blocks - 1 - k
            units.append(key_tiles(far, n, True) + (key_tiles(k, n, True) if k != far else 0))
    return units


def imbalance(items, snake):
    """Blocks take items in rounds of SMS: block k position k, or SMS - 1 - k in odd rounds (snake)."""
    grid = min(SMS, len(items))
    load = [0] * grid
    for start in range(0, len(items), grid):
        for k in range(grid):
            j = grid - 1 - k if snake and (start // grid) % 2 else k
            if start + j < len(items):
                load[k] += items[start + j]
    return max(load) / (sum(load) / grid)


shapes = [(2, 8, 1024, 0), (4, 16, 4096, 0), (4, 16, 4096, 1), (1, 16, 16384, 1), (4, 32, 4096, 1)]
print(f"largest block / mean block, key tiles, {SMS} blocks")
print(f"{'B H N causal':>18} {'head order':>11} {'+ snake':>8} {'q tile outer + snake':>21} {'paired units':>13}")
for b, h, n, causal in shapes:
    print(f"{f'{b} {h} {n} {causal}':>18} {imbalance(one_tile_items(b, h, n, causal, False), False):11.3f}"
          f" {imbalance(one_tile_items(b, h, n, causal, False), True):8.3f}"
          f" {imbalance(one_tile_items(b, h, n, causal, True), True):21.3f}"
          f" {imbalance(paired_units(b, h, n, causal), False):13.3f}")
