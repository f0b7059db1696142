#!/usr/bin/env python3
"""Figure: a [8][128] tile of 16-bit elements in shared memory, without and with step 03's
swizzle. Each cell is one 16-byte chunk at its physical place in the row; its number is the
logical chunk stored there and its colour the bank group (4 banks) it occupies. Logical
chunk 0, the column one ldmatrix phase reads, is outlined.
Data: build/scratch/swizzle --dim 128 --rows 8 --format csv.
usage: python3 figures/swizzle_banks.py DATA.csv OUT.svg"""
import sys

from style import BANK_GROUP_COLOURS, plt, read_rows, save

rows = read_rows(sys.argv[1])
n_rows = max(r["row"] for r in rows) + 1
row_bytes = (max(r["chunk"] for r in rows) + 1) * 16
fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
for ax, (key, title) in zip(axes, [("plain", "no swizzle (step 02)"), ("swizzled", "chunk ^ (row % 8) (steps 03-07)")]):
    for r in rows:
        place = r[f"{key}_offset"] % row_bytes // 16
        group = r[f"{key}_bank"] // 4
        ax.add_patch(plt.Rectangle((place, r["row"]), 1, 1, facecolor=BANK_GROUP_COLOURS[group],
                                   edgecolor="black" if r["chunk"] == 0 else "white", linewidth=2.2 if r["chunk"] == 0 else 0.8))
        ax.text(place + 0.5, r["row"] + 0.5, str(r["chunk"]), ha="center", va="center", color="white", fontsize=8)
    ax.set_xlim(0, row_bytes // 16)
    ax.set_ylim(n_rows, 0)
    ax.set_xticks([c + 0.5 for c in range(row_bytes // 16)], [str(c) for c in range(row_bytes // 16)])
    ax.set_yticks([r + 0.5 for r in range(n_rows)], [str(r) for r in range(n_rows)])
    ax.set_xlabel("physical 16-byte chunk of the row (colour: its bank group, banks 4g..4g+3)")
    ax.set_ylabel("row")
    ax.set_title(title)
fig.suptitle("A [8][128] fp16 tile: each cell shows which logical chunk is stored there; chunk 0 outlined "
             "(one ldmatrix phase reads it in 8 rows: 8 bank groups with the swizzle, 1 without)", fontsize=9, y=1.04)
save(fig, sys.argv[2])
