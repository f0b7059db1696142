#!/usr/bin/env python3
"""Figure: step 01's work split inside one block of 128 threads. Left: the score tile S, 32 query
rows x 32 keys; each cell names the thread that computes the score, its colour is the thread's
place in its row (t % 4: every 4th column); the bars on the left mark the rows of each warp.
Right: the output rows O, 32 x D, held in registers the same way (o_acc[j] = column t % 4 + 4 j).
Data: build/scratch/tiling --step 01 --format csv.
usage: python3 figures/scalar_tiles.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch

from style import BANK_GROUP_COLOURS, plt, read_rows, save

LIGHT = {"#edc948", "#ff9da7", "#76b7b2"}
POSITION = [BANK_GROUP_COLOURS[i] for i in (0, 1, 3, 5)]  # t % 4
WARP = [BANK_GROUP_COLOURS[i] for i in (4, 2, 6, 7)]

cells = read_rows(sys.argv[1])
s_cells = [c for c in cells if c["tile"] == "S"]
o_cells = [c for c in cells if c["tile"] == "O"]
rows = max(c["row"] for c in s_cells) + 1
keys = max(c["col"] for c in s_cells) + 1
dim = max(c["col"] for c in o_cells) + 1
threads = max(c["thread"] for c in cells) + 1
per_row = threads // rows

fig, (left, right) = plt.subplots(1, 2, figsize=(16, 7.4), gridspec_kw={"width_ratios": [keys * 1.6, dim * 0.55],
                                                                         "wspace": 0.12})
for c in s_cells:
    colour = POSITION[c["lane_in_row"]]
    left.add_patch(plt.Rectangle((c["col"], c["row"]), 1, 1, facecolor=colour, edgecolor="white", linewidth=0.5))
    left.text(c["col"] + 0.5, c["row"] + 0.5, str(c["thread"]), ha="center", va="center", fontsize=5.2,
              color="black" if colour in LIGHT else "white")
for c in o_cells:
    right.add_patch(plt.Rectangle((c["col"], c["row"]), 1, 1, facecolor=POSITION[c["lane_in_row"]], edgecolor="white",
                                  linewidth=0.3))
for ax, width in ((left, keys), (right, dim)):
    rows_per_warp = 32 // per_row
    for w in range(rows // rows_per_warp):
        y0, y1 = w * rows_per_warp, (w + 1) * rows_per_warp
        ax.plot([-0.085 * width, -0.085 * width], [y0 + 0.15, y1 - 0.15], color=WARP[w], linewidth=5,
                solid_capstyle="butt", clip_on=False)
        ax.axhline(y1, color="black", linewidth=1.2)
    ax.set_xlim(0, width)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal")
    ax.set_yticks([r + 0.5 for r in range(rows)], [str(r) for r in range(rows)], fontsize=6)
    ax.tick_params(length=0)
left.set_xticks([c + 0.5 for c in range(keys)], [str(c) for c in range(keys)], fontsize=6)
right.set_xticks(range(0, dim + 1, 16))
right.tick_params(axis="x", labelsize=7)
left.set_xlabel(f"key of the tile (BLOCK_N = {keys})")
left.set_ylabel(f"query row of the block (BLOCK_M = {rows})", labelpad=16)
right.set_yticks(range(0, rows + 1, 8), [str(r) for r in range(0, rows + 1, 8)], fontsize=6)
right.set_xlabel(f"column of O (D = {dim})")
left.set_title(f"S = scale Q K^T, {rows} x {keys}: the thread computing each score\n"
               f"thread t: row t / {per_row}, columns t % {per_row} + {per_row} j, j = 0..{keys // per_row - 1} "
               f"({keys // per_row} scores)", fontsize=9)
right.set_title(f"O, {rows} x {dim}, in registers: o_acc[j] of thread t is O[t / {per_row}][t % {per_row} + "
                f"{per_row} j],\nj = 0..{dim // per_row - 1} ({dim // per_row} per thread); same colours", fontsize=9)
fig.legend(handles=[Patch(facecolor=POSITION[i], label=f"t % {per_row} = {i}: columns {i}, {i + per_row}, "
                                                        f"{i + 2 * per_row}, ...") for i in range(per_row)]
           + [Patch(facecolor=WARP[w], label=f"warp {w}: threads {32 * w}-{32 * w + 31}, rows {8 * w}-{8 * w + 7}")
              for w in range(threads // 32)],
           loc="lower center", ncol=4, frameon=False, bbox_to_anchor=(0.5, -0.02), fontsize=8)
fig.suptitle(f"step 01's scalar work split: one block of {threads} threads per {rows} query rows, a key tile of {keys} "
             f"keys; thread t owns row t / {per_row} and every {per_row}th column of it;\nthe {per_row} threads of a "
             f"row are adjacent lanes of one warp, so the row max and row sum combine with two shuffles (xor 1, xor 2)."
             "  Data: build/scratch/tiling --step 01 --format csv", fontsize=9.5, y=1.0)
save(fig, sys.argv[2])
