#!/usr/bin/env python3
"""Figure: who holds each element of mma.sync.aligned.m16n8k16.row.col's A (16 x 16 [m][k]),
B (16 x 8 [k][n]) and C (16 x 8 [m][n]). Each cell names the lane that holds the element and
the register (a0..a3, b0..b1, c0..c3); its colour is the lane's group g = lane / 4, the quad
of lanes 4g..4g+3. Thick lines separate the registers' quarters and halves.
Data: build/scratch/mma_fragments --format csv.
usage: python3 figures/fragments.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch

from style import BANK_GROUP_COLOURS, cell_axes, plt, read_rows, save

LIGHT = {"#edc948", "#ff9da7", "#76b7b2"}  # backgrounds that take black text

rows = read_rows(sys.argv[1])
panels = [("A", "a", "A: 16 x 16, [m][k] (Q, or P)", "k", "m"),
          ("B", "b", "B: 16 x 8, [k][n] (K^T, or V)", "n", "k"),
          ("C", "c", "C/D: 16 x 8, [m][n], fp32 (S, or O)", "n", "m")]
cols_of = {op: max(r["col"] for r in rows if r["operand"] == op) + 1 for op, *_ in panels}
fig, axes = plt.subplots(1, 3, figsize=(15, 5.6), gridspec_kw={"width_ratios": [cols_of[p[0]] for p in panels]})
for ax, (op, letter, title, xlabel, ylabel) in zip(axes, panels):
    cells = [r for r in rows if r["operand"] == op]
    n_rows, n_cols = max(r["row"] for r in cells) + 1, cols_of[op]
    for r in cells:
        row, col, lane, reg = r["row"], r["col"], r["lane"], r["reg"]
        colour = BANK_GROUP_COLOURS[lane // 4]
        ax.add_patch(plt.Rectangle((col, row), 1, 1, facecolor=colour, edgecolor="white", linewidth=0.8))
        ax.text(col + 0.5, row + 0.5, f"{lane}\n{letter}{reg}", ha="center", va="center", fontsize=6.5,
                linespacing=0.95, color="black" if colour in LIGHT else "white")
    ax.axhline(8, color="black", linewidth=2)  # a0/a1, b0/b1, c0c1/c2c3
    if op == "A":
        ax.axvline(8, color="black", linewidth=2)  # a0, a1 | a2, a3
    cell_axes(ax, n_cols, n_rows)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
fig.legend(handles=[Patch(facecolor=BANK_GROUP_COLOURS[g], label=f"g = {g}: lanes {4 * g}-{4 * g + 3}") for g in range(8)],
           loc="lower center", ncol=8, frameon=False, bbox_to_anchor=(0.5, -0.04), fontsize=8)
fig.suptitle("mma.sync.m16n8k16: each cell names the lane that holds the element and its register; colour: the lane's "
             "group g = lane / 4 (a quad of 4 lanes).\nA and C: g picks the row (g and g + 8), t = lane % 4 the column "
             "pair; B: g picks the column n, t the pair of k", fontsize=9, y=1.0)
save(fig, sys.argv[2])
