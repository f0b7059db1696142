#!/usr/bin/env python3
"""Figure: the accumulator D of wgmma.mma_async.m64nNk16 (f32), who holds each element. Left:
the corner of D the data covers (64 rows x its columns), coloured by the warp of the warpgroup
that holds the row: warp w owns rows 16w..16w+15. Each 16 x 8 box is one mma.sync m16n8 C
fragment, and the box's registers are d(4q)..d(4q+3) for n-tile q; the lighter half of a box
(rows g + 8) is registers d(4q+2), d(4q+3). Right: warp 0's rows 0-15 and columns 0-15 cell by
cell, the lane and the register, coloured by the lane's quad g = lane / 4 (as figures/fragments.py
draws mma.sync's C); every other warp holds its 16 rows the same way.
Data: build/scratch/wgmma_fragments --n N --cols C --format csv.
usage: python3 figures/wgmma_accumulator.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch

from style import BANK_GROUP_COLOURS, cell_axes, plt, read_rows, save

LIGHT = {"#edc948", "#ff9da7", "#76b7b2"}  # backgrounds that take black text
WARP_COLOURS = [BANK_GROUP_COLOURS[i] for i in (0, 1, 2, 4)]
ZOOM = 16  # rows and columns of the right panel

cells = read_rows(sys.argv[1])
n = cells[0]["n"]
n_rows, n_cols = max(c["row"] for c in cells) + 1, max(c["col"] for c in cells) + 1


def lighter(hex_colour, amount):
    rgb = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{int(v + (255 - v) * amount):02x}" for v in rgb)


fig, (left, right) = plt.subplots(1, 2, figsize=(16, 10.5), gridspec_kw={"width_ratios": [n_cols, ZOOM * 1.9],
                                                                          "wspace": 0.12})
for c in cells:
    colour = WARP_COLOURS[c["warp"]]
    if c["mma_reg"] >= 2:  # rows g + 8: registers d(4q+2), d(4q+3)
        colour = lighter(colour, 0.35)
    left.add_patch(plt.Rectangle((c["col"], c["row"]), 1, 1, facecolor=colour, edgecolor="white", linewidth=0.3))
for w in range(n_rows // 16):
    for q in range(n_cols // 8):
        left.add_patch(plt.Rectangle((8 * q, 16 * w), 8, 16, fill=False, edgecolor="black", linewidth=1.4))
        left.text(8 * q + 4, 16 * w + 8, f"warp {w}\nd{4 * q}-d{4 * q + 3}", ha="center", va="center", fontsize=8,
                  color="white", bbox={"facecolor": WARP_COLOURS[w], "edgecolor": "none", "pad": 1.5})
left.add_patch(plt.Rectangle((0, 0), ZOOM, ZOOM, fill=False, edgecolor="red", linewidth=2, linestyle=(0, (4, 2))))
left.set_xlim(0, n_cols)
left.set_ylim(n_rows, 0)
left.set_aspect("equal")
left.set_xticks(range(0, n_cols + 1, 8))
left.set_yticks(range(0, n_rows + 1, 8))
left.tick_params(labelsize=8)
left.set_xlabel(f"column n of D (the first {n_cols} of {n})")
left.set_ylabel("row m of D")
left.set_title(f"D[m][n], 64 x {n_cols} of m64n{n}k16: one warp per 16 rows, one box per mma.sync m16n8 fragment\n"
               "(lighter: rows 16w + g + 8, registers d(4q+2), d(4q+3); dashed red: the cells to the right)",
               fontsize=9)

for c in cells:
    if c["row"] >= ZOOM or c["col"] >= ZOOM:
        continue
    colour = BANK_GROUP_COLOURS[c["g"]]
    right.add_patch(plt.Rectangle((c["col"], c["row"]), 1, 1, facecolor=colour, edgecolor="white", linewidth=0.8))
    right.text(c["col"] + 0.5, c["row"] + 0.5, f"{c['lane']}\nd{c['reg']}", ha="center", va="center", fontsize=7,
               linespacing=0.95, color="black" if colour in LIGHT else "white")
right.axhline(8, color="black", linewidth=2)   # d(4q), d(4q+1) | d(4q+2), d(4q+3)
right.axvline(8, color="black", linewidth=2)   # n-tile 0 | n-tile 1
cell_axes(right, ZOOM, ZOOM)
right.set_xlabel("column n")
right.set_ylabel("row m (warp 0)")
right.set_title("warp 0, rows 0-15, columns 0-15: lane and register of each element\n"
                "columns 0-7 = mma.sync's C (c0..c3 = d0..d3); columns 8-15: the same lanes, d4..d7\n"
                "register i: row 16w + g + 8((i >> 1) & 1), column 8(i >> 2) + 2t + (i & 1)", fontsize=9)
fig.legend(handles=[Patch(facecolor=WARP_COLOURS[w], label=f"warp {w}: rows {16 * w}-{16 * w + 15}")
                    for w in range(4)]
           + [Patch(facecolor=BANK_GROUP_COLOURS[g], label=f"g = {g}: lanes {4 * g}-{4 * g + 3}") for g in range(8)],
           loc="lower center", ncol=6, frameon=False, bbox_to_anchor=(0.5, 0.0), fontsize=8)
fig.suptitle(f"wgmma.mma_async.m64n{n}k16's accumulator (steps 09-12): which warp of the warpgroup, which lane and "
             "which register hold D[m][n]\nit is mma.sync's m16n8 C fragment repeated: warp w owns rows 16w..16w+15, "
             f"and n-tile q of 8 columns is registers d(4q)..d(4q+3) ({n // 2} per thread at n = {n}).  "
             "Data: build/scratch/wgmma_fragments --format csv (scratch/layouts.h)", fontsize=10, y=0.98)
save(fig, sys.argv[2])
