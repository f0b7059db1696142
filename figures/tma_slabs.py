#!/usr/bin/env python3
"""Figure: a [16][128] tile of 16-bit elements as TMA writes it with the 128-byte swizzle
(step 08 on): two 64-column slabs one after the other, each [16][64]; inside a slab, logical
chunk c of row r sits at chunk c ^ (r % 8). Thick outlines: the 1024-byte atoms (8 rows of
128 bytes) the swizzle repeats over, which every slab must start on, and which a wgmma
descriptor steps over (its stride byte offset, 1024).
Data: build/scratch/swizzle --dim 128 --rows 16 --format csv (its tma_offset column).
usage: python3 figures/tma_slabs.py DATA.csv OUT.svg"""
import sys

from style import BANK_GROUP_COLOURS, plt, read_rows, save

rows = read_rows(sys.argv[1])
n_rows = max(r["row"] for r in rows) + 1
fig, ax = plt.subplots(figsize=(6.2, 7.2))
for r in rows:
    line = r["tma_offset"] // 128  # 128-byte lines of shared memory from the tile's start
    place = r["tma_offset"] % 128 // 16
    ax.add_patch(plt.Rectangle((place, line), 1, 1, facecolor=BANK_GROUP_COLOURS[r["chunk"] % 8], edgecolor="white"))
    ax.text(place + 0.5, line + 0.5, f"r{r['row']} c{r['chunk']}", ha="center", va="center", color="white", fontsize=6.5)
lines = max(r["tma_offset"] for r in rows) // 128 + 1
for atom in range(0, lines, 8):
    ax.add_patch(plt.Rectangle((0, atom), 8, 8, fill=False, edgecolor="black", linewidth=2))
    slab, first = divmod(atom, n_rows)
    ax.text(8.2, atom + 4, f"bytes {atom * 128}-{atom * 128 + 1023}\nslab {slab} (columns {64 * slab}-{64 * slab + 63}),\n"
            f"rows {first}-{first + 7}", va="center", fontsize=8)
ax.set_xlim(0, 8)
ax.set_ylim(lines, 0)
ax.set_xticks([c + 0.5 for c in range(8)], [str(c) for c in range(8)])
ax.set_yticks([])
ax.set_xlabel("16-byte chunk of a 128-byte line (colour: the logical chunk mod 8)")
ax.set_ylabel("128-byte lines of shared memory, in address order")
ax.set_title("TMA, 128-byte swizzle: a [16][128] tile as two [16][64] slabs\n"
             "cell rN cM = logical chunk M (columns 8M..8M+7) of row N", fontsize=9)
save(fig, sys.argv[2])
