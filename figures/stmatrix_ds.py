#!/usr/bin/env python3
"""Figure: step 15's dS stores, stmatrix.x4.trans from the registers dK reads as A. Left: warp 0's
dS^T at k-step 0 as the registers hold it (keys 0-15 as rows, queries 0-15 as columns), each cell
the lane that holds it, coloured by the register (= the 8 x 8 matrix of the stmatrix) it is in.
Right: where the instruction writes those elements, the dS tile [query][key] in its first slab
(keys 0-63, 128-byte rows of eight 16-byte chunks, the slab swizzle): each chunk is one row of
one matrix, 8 keys of one query, labelled with the lane that gives its address; warp 0's chunks
in the colours of the left, warps 1-3's (keys 16-63) in grey with their warp.
Data: build/scratch/backward_wgmma --format stmatrix (the kernel's row addresses, scratch/layouts.h's
ldmatrix maps).
usage: python3 figures/stmatrix_ds.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch

from style import BANK_GROUP_COLOURS, cell_axes, plt, read_rows, save

MATRIX_COLOURS = [BANK_GROUP_COLOURS[i] for i in (0, 1, 4, 6)]
GREYS = ["#d9d9d9", "#bdbdbd", "#a3a3a3"]
QUERIES, CHUNKS, KEYS, CHUNK_W = 16, 8, 16, 3  # CHUNK_W: a chunk's width in cells

cells = read_rows(sys.argv[1])

fig, (left, right) = plt.subplots(1, 2, figsize=(17, 8.6), gridspec_kw={"width_ratios": [KEYS, CHUNKS * CHUNK_W],
                                                                         "wspace": 0.16})
for c in cells:
    if c["warp"] != 0:
        continue
    left.add_patch(plt.Rectangle((c["query"], c["key"]), 1, 1, facecolor=MATRIX_COLOURS[c["reg"]], edgecolor="white",
                                 linewidth=0.8))
    left.text(c["query"] + 0.5, c["key"] + 0.5, str(c["lane"]), ha="center", va="center", fontsize=7, color="white")
left.axhline(8, color="black", linewidth=2)
left.axvline(8, color="black", linewidth=2)
cell_axes(left, QUERIES, KEYS)
left.set_xlabel("query (k of dK = dS^T Q, k-step 0)")
left.set_ylabel("key (rows of warp 0: the wgmma's M)")
left.set_title("registers: dS^T of warp 0 as dK's register A holds it\ncell = the lane holding the element; colour = "
               "its register a0..a3,\none 8 x 8 matrix of the stmatrix each", fontsize=9)

chunks = {}
for c in cells:
    chunks.setdefault((c["smem_row"], c["chunk_col"]), c)
for (row, col), c in chunks.items():
    if row >= QUERIES:
        continue
    warp0 = c["warp"] == 0
    colour = MATRIX_COLOURS[c["reg"]] if warp0 else GREYS[c["warp"] - 1]
    right.add_patch(plt.Rectangle((col * CHUNK_W, row), CHUNK_W, 1, facecolor=colour, edgecolor="white", linewidth=1.0))
    keys = f"keys {16 * c['warp'] + 8 * (c['reg'] % 2)}-{16 * c['warp'] + 8 * (c['reg'] % 2) + 7}"
    label = f"lane {c['addr_lane']}\n{keys}" if warp0 else f"warp {c['warp']}\n{keys}"
    right.text(col * CHUNK_W + CHUNK_W / 2, row + 0.5, label, ha="center", va="center", fontsize=6, linespacing=0.9,
               color="white" if warp0 else "black")
right.set_xlim(0, CHUNKS * CHUNK_W)
right.set_ylim(QUERIES, 0)
right.set_aspect("equal")
right.set_xticks([CHUNK_W * k + CHUNK_W / 2 for k in range(CHUNKS)], [f"{16 * k}-{16 * k + 15}" for k in range(CHUNKS)], fontsize=7)
right.set_yticks([r + 0.5 for r in range(QUERIES)], [str(r) for r in range(QUERIES)], fontsize=7)
right.tick_params(length=0)
right.set_xlabel("byte of the 128-byte row (16-byte chunk)")
right.set_ylabel("query (the dS tile's row)")
right.set_title("shared memory: dS [query][key], slab 0 (keys 0-63), queries 0-15\nchunk = one row of one matrix, "
                "written where the lane named gives its address;\nthe chunk of keys 8c.. lands in column c XOR (query % 8)",
                fontsize=9)
fig.legend(handles=[Patch(facecolor=MATRIX_COLOURS[i], label=f"register a{i}: keys {8 * (i % 2)}-{8 * (i % 2) + 7}, "
                          f"queries {8 * (i // 2)}-{8 * (i // 2) + 7} (lanes {8 * i}-{8 * i + 7} address its rows)")
                    for i in range(4)]
           + [Patch(facecolor=GREYS[w - 1], label=f"warp {w}: its keys {16 * w}-{16 * w + 15}, the same way")
              for w in range(1, 4)],
           loc="lower center", ncol=2, frameon=False, bbox_to_anchor=(0.5, -0.03), fontsize=8)
fig.suptitle("stmatrix.sync.aligned.m8n8.x4.trans (step 15): one instruction a warp stores 16 keys x 16 queries of "
             "dS, transposed on the way out\nthe fragment's column r becomes memory row r; each matrix's 8 rows land "
             "in 8 different 16-byte columns: the 32 banks once.  "
             "Data: build/scratch/backward_wgmma --format stmatrix", fontsize=10, y=0.99)
save(fig, sys.argv[2])
