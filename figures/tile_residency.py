#!/usr/bin/env python3
"""Figure: where each tile of the FlashAttention-2 loop lives, with step 05's tile sizes.
Three panels, each to its own scale: HBM (one head's Q, K, V, O and LSE, the block's query tile
and the current key tile marked), shared memory (one block: the Q tile and two stages each of K
and V), registers (one warp: Q's fragments, S then P, the O accumulator, m and l, with the
32-bit registers each costs a thread). Arrows: what moves where, and how often.
Data: build/scratch/tiling --format residency (one line per object).
usage: python3 figures/tile_residency.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import ConnectionPatch

from style import BANK_GROUP_COLOURS, plt, read_rows, save

rows = read_rows(sys.argv[1])
by_name = {r["object"]: r for r in rows}
COLOUR = {"Q": BANK_GROUP_COLOURS[0], "K": BANK_GROUP_COLOURS[1], "V": BANK_GROUP_COLOURS[2],
          "O": BANK_GROUP_COLOURS[4], "LSE": BANK_GROUP_COLOURS[4], "S then P": BANK_GROUP_COLOURS[6],
          "m": BANK_GROUP_COLOURS[5], "l": BANK_GROUP_COLOURS[5]}


def colour_of(name):
    return COLOUR.get(name.split()[0], COLOUR.get(name, "#999999"))


def size_text(r):
    kind = "fp32" if r["elem_bytes"] == 4 else "16-bit"
    shape = f"{r['rows']} x {r['cols']}" if r["cols"] > 1 else f"{r['rows']} rows"
    count = f"{r['copies']} x " if r["copies"] > 1 else ""
    kb = r["bytes"] / 1024
    return f"{count}[{shape}] {kind}, {kb:g} KB" if kb >= 1 else f"{count}[{shape}] {kind}, {r['bytes']} B"


hbm = [r for r in rows if r["space"] == "hbm"]
smem = [r for r in rows if r["space"] == "smem"]
regs = [r for r in rows if r["space"] == "regs"]
block_m, block_n = by_name["Q tile"]["rows"], by_name["K tile"]["rows"]
dim, seqlen = by_name["Q"]["cols"], by_name["Q"]["rows"]
q_block, k_tile = 3, 5  # which query tile the block owns and which key tile the loop is at, for the drawing

fig, (ax_h, ax_s, ax_r) = plt.subplots(1, 3, figsize=(15, 6.4), gridspec_kw={"width_ratios": [1.25, 1.0, 1.25],
                                                                             "wspace": 0.45})

# HBM: the head's tensors as columns, rows down; LSE drawn wider than its one column so it shows.
gap, lse_w = dim * 0.35, dim * 0.25
x = 0
anchor = {}
for r in hbm:
    w = lse_w if r["cols"] == 1 else dim
    c = colour_of(r["object"])
    ax_h.add_patch(plt.Rectangle((x, 0), w, seqlen, facecolor=c, alpha=0.22, edgecolor=c, linewidth=1))
    mark = k_tile * block_n if r["object"] in ("K", "V") else q_block * block_m
    tile_rows = block_n if r["object"] in ("K", "V") else block_m
    ax_h.add_patch(plt.Rectangle((x, mark), w, tile_rows, facecolor=c, edgecolor="black", linewidth=0.8))
    anchor[r["object"]] = (x + w, mark + tile_rows / 2)
    ax_h.text(x + w / 2, -70, r["object"], ha="center", va="bottom", fontsize=10, fontweight="bold")
    ax_h.text(x + w / 2, -12, f"[{seqlen} x {r['cols']}]" if r["cols"] > 1 else f"[{seqlen}]\nfp32",
              ha="center", va="bottom", fontsize=7)
    x += w + gap
ax_h.set_xlim(-gap / 2, x - gap / 2)
ax_h.set_ylim(seqlen + 20, -160)
ax_h.axis("off")
ax_h.set_title(f"HBM: one head's tensors (N = {seqlen}, d = {dim})\nmarked: the block's query tile "
               f"(rows {q_block * block_m}-{q_block * block_m + block_m - 1})\nand the key tile the loop is at "
               f"(keys {k_tile * block_n}-{k_tile * block_n + block_n - 1})", fontsize=9)


def stack(ax, objects, width_of, height_of, pad):
    """Draw each object (its copies one under the other) down the axes; return each one's box."""
    y, boxes = 0, {}
    for r in objects:
        c = colour_of(r["object"])
        w, h = width_of(r), height_of(r)
        for copy in range(r["copies"]):
            ax.add_patch(plt.Rectangle((0, y), w, h, facecolor=c, edgecolor="black", linewidth=0.8,
                                       alpha=1.0 if copy == 0 else 0.55))
            label = r["object"] + (f", stage {copy}" if r["copies"] > 1 else "")
            ax.text(w / 2, y + h / 2, label, ha="center", va="center", fontsize=8.5,
                    color="black" if r["object"] in ("m", "l") else "white", fontweight="bold")
            boxes.setdefault(r["object"], []).append((0, y, w, h))
            y += h + pad / 3
        ax.text(0, y - pad / 3 + 2, size_text(r) + ("; " + r["moved"] if r["moved"] else ""), ha="left", va="top",
                fontsize=7)
        y += pad
    return boxes, y


# Shared memory: one block's tiles, to scale (rows down, head-dim columns across).
s_boxes, s_end = stack(ax_s, smem, lambda r: r["cols"], lambda r: r["rows"], pad=34)
ax_s.set_xlim(-8, dim + 8)
ax_s.set_ylim(s_end, -10)
ax_s.axis("off")
total = sum(r["bytes"] for r in smem) // 1024
ax_s.set_title(f"shared memory: one block ({total} KB)\n{block_m} query rows, {block_n} keys per tile", fontsize=9)

# Registers: one warp's share (16 rows), to scale across; rows drawn 3x taller so the text fits.
ROW_H = 3.0
r_boxes, r_end = stack(ax_r, regs, lambda r: max(r["cols"], 10), lambda r: r["rows"] * ROW_H, pad=26)
for r in regs:
    x0, y0, w, h = r_boxes[r["object"]][0]
    ax_r.text(w + 3, y0 + h / 2, f"{r['regs_per_thread']} registers\nper thread", ha="left", va="center", fontsize=7)
ax_r.set_xlim(-8, dim + 40)
ax_r.set_ylim(r_end, -10)
ax_r.axis("off")
per_thread = sum(r["regs_per_thread"] for r in regs)
ax_r.set_title(f"registers: one warp (its 16 query rows)\n{per_thread} 32-bit registers per thread "
               f"hold these values", fontsize=9)


def arrow(src_ax, src, dst_ax, dst, text, colour):
    con = ConnectionPatch(xyA=src, coordsA=src_ax.transData, xyB=dst, coordsB=dst_ax.transData, arrowstyle="-|>",
                          color=colour, linewidth=1.2, mutation_scale=10)
    fig.add_artist(con)
    if text:
        a, b = src_ax.transData.transform(src), dst_ax.transData.transform(dst)
        mid = fig.transFigure.inverted().transform(a + 0.7 * (b - a))  # nearer the end: off the HBM columns
        fig.text(mid[0], mid[1] + 0.014, text, ha="center", va="bottom", fontsize=7, color=colour)


def left_mid(box):
    x0, y0, w, h = box
    return (x0, y0 + h / 2)


def right_mid(box):
    x0, y0, w, h = box
    return (x0 + w, y0 + h / 2)


arrow(ax_h, anchor["Q"], ax_s, left_mid(s_boxes["Q tile"][0]), "once", colour_of("Q"))
arrow(ax_h, anchor["K"], ax_s, left_mid(s_boxes["K tile"][0]), "every key tile", colour_of("K"))
arrow(ax_h, anchor["V"], ax_s, left_mid(s_boxes["V tile"][0]), "", colour_of("V"))
arrow(ax_s, right_mid(s_boxes["Q tile"][0]), ax_r, left_mid(r_boxes["Q fragments"][0]), "once", colour_of("Q"))
arrow(ax_s, right_mid(s_boxes["K tile"][0]), ax_r, left_mid(r_boxes["S then P"][0]), "S = Q K^T", colour_of("K"))
arrow(ax_s, right_mid(s_boxes["V tile"][0]), ax_r, left_mid(r_boxes["O accumulator"][0]), "O += P V",
      colour_of("V"))


def to_fig(ax, xy):
    return fig.transFigure.inverted().transform(ax.transData.transform(xy))


def route_back(box, target_ax, target_xy, depth, side_gap, text, colour):
    """After the last key tile: from a register box's left edge, down under the panels, left to
    under an HBM column, and up into it."""
    a = to_fig(ax_r, left_mid(box))
    b = to_fig(target_ax, target_xy)
    x_turn = a[0] - side_gap
    path = [(a[0], a[1]), (x_turn, a[1]), (x_turn, depth), (b[0], depth)]
    fig.add_artist(plt.Line2D([p[0] for p in path], [p[1] for p in path], transform=fig.transFigure,
                              color=colour, linewidth=1.2))
    fig.add_artist(ConnectionPatch(xyA=(b[0], depth), coordsA=fig.transFigure, xyB=(b[0], b[1]),
                                   coordsB=fig.transFigure, arrowstyle="-|>", color=colour, linewidth=1.2,
                                   mutation_scale=10))
    fig.text((b[0] + x_turn) / 2, depth + 0.006, text, ha="center", va="bottom", fontsize=7.5, color=colour)


bottom = to_fig(ax_h, (0, seqlen))[1]
o_col = (anchor["O"][0] - dim / 2, seqlen)
lse_col = (anchor["LSE"][0] - lse_w / 2, seqlen)
route_back(r_boxes["O accumulator"][0], ax_h, o_col, bottom - 0.05, 0.012,
           "after the last key tile: O / l, one 16-bit O row per query row", colour_of("O"))
route_back(r_boxes["l"][0], ax_h, lse_col, bottom - 0.10, 0.024,
           "after the last key tile: LSE = m + log l, one fp32 per query row", colour_of("O"))

save(fig, sys.argv[2])
