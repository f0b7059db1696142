#!/usr/bin/env python3
"""Figure: step 09's shared-memory operands as its wgmma descriptors read them (d128, 16-bit).
Left, K (K-major, the B of S = Q K^T): the first 16 keys of slab 0, 16 lines of 128 bytes; each
16-byte chunk coloured by the k-step whose descriptor (start + 32 bytes per k-step) reads it.
Right, V (MN-major, the B of O = P V): k-step 0's 16 keys of slab 0; each chunk coloured by its
8 head-dim columns. In both, the 8 chunks of one thick 1024-byte atom that hold the same columns
are one core matrix (8 rows of 16 bytes); the atoms are SBO apart. Every cell is placed at the byte the
descriptor reads, and the script refuses data where that is not where TMA put the element.
Data: build/scratch/wgmma_fragments --format descriptors.
usage: python3 figures/wgmma_descriptor.py DATA.csv OUT.svg"""
import sys

from style import BANK_GROUP_COLOURS, plt, read_rows, save

rows = read_rows(sys.argv[1])
wrong = [r for r in rows if r["address"] != r["tma_address"]]
if wrong:
    sys.exit(f"{len(wrong)} elements read from another byte than TMA wrote them, e.g. {wrong[0]}")
KSTEP_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1"]
LINES = 16  # 128-byte lines drawn: two 1024-byte atoms


def chunks(operand, keep):
    """{(line, chunk in line): element row} of one operand's chunks, each read by one k-step."""
    cells = {}
    for r in rows:
        if r["operand"] == operand and keep(r) and r["address"] < LINES * 128 and r["address"] % 16 == 0:
            cells[(r["address"] // 128, r["address"] % 128 // 16)] = r
    return cells


fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 6.4))
k_cells = chunks("K", lambda r: r["kstep"] < 4)
for (line, place), r in k_cells.items():
    column = 16 * r["kstep"] + r["k"]
    left.add_patch(plt.Rectangle((place, line), 1, 1, facecolor=KSTEP_COLOURS[r["kstep"]], edgecolor="white"))
    left.text(place + 0.5, line + 0.5, f"key {r['mn']}\nc{column}-{column + 7}", ha="center", va="center",
              color="white", fontsize=5.5)
starts = sorted({(r["kstep"], r["start"]) for r in rows if r["operand"] == "K" and r["kstep"] < 4})
for kstep, start in starts:
    left.annotate(f"k-step {kstep}\nstart +{start}", xy=(start / 16, 0), xytext=(start / 16 + 0.5, -1.3),
                  ha="center", fontsize=7, color=KSTEP_COLOURS[kstep],
                  arrowprops={"arrowstyle": "->", "color": KSTEP_COLOURS[kstep]})
v_cells = chunks("V", lambda r: r["kstep"] == 0 and r["mn"] < 64)
for (line, place), r in v_cells.items():
    right.add_patch(plt.Rectangle((place, line), 1, 1, facecolor=BANK_GROUP_COLOURS[r["mn"] // 8], edgecolor="white"))
    right.text(place + 0.5, line + 0.5, f"key {r['k']}\nn{r['mn']}-{r['mn'] + 7}", ha="center", va="center",
               color="white", fontsize=5.5)
k_sbo = rows[0]["sbo"]
v_first = next(r for r in rows if r["operand"] == "V")
v_next = next(r for r in rows if r["operand"] == "V" and r["kstep"] == 1)
for ax, cells in ((left, k_cells), (right, v_cells)):
    for atom in range(0, LINES, 8):
        ax.add_patch(plt.Rectangle((0, atom), 8, 8, fill=False, edgecolor="black", linewidth=2))
        ax.text(8.15, atom + 4, f"bytes {atom * 128}-{atom * 128 + 1023}", va="center", fontsize=7, rotation=90)
    ax.set_xlim(0, 8)
    ax.set_ylim(LINES, -2.2)
    ax.set_xticks([c + 0.5 for c in range(8)], [f"{16 * c}" for c in range(8)], fontsize=7)
    ax.set_yticks([])
    ax.set_xlabel("byte of the 128-byte line (16-byte chunks)")
    ax.set_ylabel("128-byte lines of shared memory, in address order")
    for spine in ax.spines.values():
        spine.set_visible(False)
left.set_title(f"K, K-major (B of S = Q K^T): keys 0-15, head-dim columns 0-63 (slab 0)\n"
               f"colour: the k-step that reads the chunk; SBO {k_sbo}: the next 8 keys; LBO unused",
               fontsize=8.5)
right.set_title(f"V, MN-major (B of O = P V, transposed): k-step 0 = keys 0-15, columns 0-63\n"
                f"colour: 8 head-dim columns; SBO {v_first['sbo']}: the next 8 keys; LBO {v_first['lbo']}: columns "
                f"64-127;\nk-step 1 starts {v_next['start'] - v_first['start']} bytes on", fontsize=8.5)
fig.suptitle("wgmma descriptors over TMA's 128-byte-swizzled slabs (step 09, d128): in one thick atom, the 8 cells "
             "with the same columns are one core matrix (8 rows x 16 bytes)", fontsize=9, y=1.04)
save(fig, sys.argv[2])
