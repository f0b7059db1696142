#!/usr/bin/env python3
"""Figure: the 32 row addresses of one step 04 ldmatrix.x4 (the K load, B operand of
S = Q K^T, at d128) in the swizzled [64][D] shared-memory tile. Left: tile rows x physical
16-byte chunks of the row; each addressed chunk is labelled with its lane (and the logical
chunk it holds) and coloured by its 8-lane phase, which is the 8x8 matrix it gives a row of.
Right: the bank group (4 banks) each lane's 16 bytes sit on, one row per phase: each phase
covers all 8 groups once, so it is one conflict-free wavefront.
Data: build/scratch/ldmatrix --use k --dim 128 --format csv.
usage: python3 figures/ldmatrix_lanes.py DATA.csv OUT.svg"""
import sys

from style import BANK_GROUP_COLOURS, plt, read_rows, save

WHAT = {"q": "Q, A operand of S = Q K^T: ldmatrix.x4",
        "k": "K, B operand of S = Q K^T: ldmatrix.x4",
        "v": "V, B operand of O = P V: ldmatrix.x4.trans"}
PHASE_COLOURS = [BANK_GROUP_COLOURS[i] for i in (0, 1, 4, 6)]  # one per 8-lane phase = matrix

rows = read_rows(sys.argv[1])
use = rows[0]["use"]
rows = [r for r in rows if r["use"] == use]
# bytes per tile row (D * 2): the one length that puts every lane's byte inside its own row
row_bytes = next(rb for rb in (128, 256) if all(0 <= r["byte"] - r["row"] * rb < rb for r in rows))
chunks = row_bytes // 16
n_rows = max(r["row"] for r in rows) + 1
phases = max(r["matrix"] for r in rows) + 1

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.4), gridspec_kw={"width_ratios": [chunks, 8 * 1.25]})
for c in range(chunks):
    for t in range(n_rows):
        left.add_patch(plt.Rectangle((c, t), 1, 1, facecolor="#eeeeee", edgecolor="white", linewidth=0.8))
for r in rows:
    place = (r["byte"] - r["row"] * row_bytes) // 16
    left.add_patch(plt.Rectangle((place, r["row"]), 1, 1, facecolor=PHASE_COLOURS[r["matrix"]], edgecolor="white",
                                 linewidth=0.8))
    left.text(place + 0.5, r["row"] + 0.5, f"{r['lane']}\nc{r['chunk']}", ha="center", va="center", color="white",
              fontsize=6.5, linespacing=0.95)
left.set_xlim(0, chunks)
left.set_ylim(n_rows, 0)
left.set_xticks([c + 0.5 for c in range(chunks)], [f"{c}\ng{c % 8}" for c in range(chunks)], fontsize=7)
left.set_yticks([t + 0.5 for t in range(n_rows)], [str(t) for t in range(n_rows)], fontsize=7)
left.set_xlabel(f"physical 16-byte chunk of the {row_bytes}-byte row, and its bank group g (banks 4g..4g+3)")
left.set_ylabel("tile row (key)")
left.set_title("where each lane points: lane number, cN = the logical chunk stored there")

for r in rows:
    group = r["bank"] // 4
    right.add_patch(plt.Rectangle((group, r["matrix"]), 1, 1, facecolor=PHASE_COLOURS[r["matrix"]], edgecolor="white",
                                  linewidth=0.8))
    right.text(group + 0.5, r["matrix"] + 0.5, f"{r['lane']}\nr{r['row']}", ha="center", va="center", color="white",
               fontsize=7, linespacing=0.95)
for p in range(phases):
    hit = len({r["bank"] // 4 for r in rows if r["matrix"] == p})
    right.text(8.15, p + 0.5, f"{hit} of 8 groups:\n{'1 wavefront' if hit == 8 else 'conflict'}", va="center",
               fontsize=7.5)
right.set_xlim(0, 8)
right.set_ylim(phases, 0)
right.set_aspect("equal")
right.set_xticks([g + 0.5 for g in range(8)], [f"g{g}\n{4 * g}-{4 * g + 3}" for g in range(8)], fontsize=7)
right.set_yticks([p + 0.5 for p in range(phases)],
                 [f"lanes {8 * p}-{8 * p + 7}\nmatrix {p}" for p in range(phases)], fontsize=7.5)
right.set_xlabel("bank group (banks)")
right.set_title("each 8-lane phase: lane (rN = its tile row) per bank group")
fig.suptitle(f"{WHAT[use]} (instance 0), [64][{row_bytes // 2}] tile with step 03's swizzle: "
             "the 32 lanes give the addresses of 32 16-byte rows, 8 per matrix", fontsize=9.5)
save(fig, sys.argv[2])
