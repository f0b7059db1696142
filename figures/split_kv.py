#!/usr/bin/env python3
"""Figure: step 13's split-KV decode at one shape. Top: the keys of each kv head cut into the
plan's splits, one block each (grid x = split, y = kv head), to scale along the keys. Middle:
block 0's 16 packed rows (a GQA group's query heads, the rest of the m-tile unused) against one
key tile, and the quarter of every key tile each of the block's 4 warps takes. Bottom: the merge,
weight_s = exp(LSE_s - LSE) of each split for each query head of kv head 0, for one made-up
input (the weights of a row sum to 1).
Data: build/scratch/split_kv --format csv (the kernel's choose_plan, split ranges, unpack_row and
the formula of the merge its last block of each tile runs).
usage: python3 figures/split_kv.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch

from style import BANK_GROUP_COLOURS, plt, read_rows, save

LIGHT = {"#edc948", "#ff9da7", "#76b7b2"}
rows = read_rows(sys.argv[1])
splits_rows = [r for r in rows if r["kind"] == "split"]
packed = [r for r in rows if r["kind"] == "row"]
merge = [r for r in rows if r["kind"] == "merge"]
first = rows[0]
splits, sms, block_n, group = first["splits"], first["sms"], first["block_n"], first["group"]
kv_heads = max(r["kv_head"] for r in splits_rows) + 1
keys = max(r["key_hi"] for r in splits_rows)
blocks = len(splits_rows)
heads_q = kv_heads * group

fig = plt.figure(figsize=(15, 11.5))
grid = fig.add_gridspec(3, 2, height_ratios=[kv_heads * 0.55 + 1.2, 3.4, 3.6], width_ratios=[1, 2.2], hspace=0.55,
                        wspace=0.18)
top = fig.add_subplot(grid[0, :])
for r in splits_rows:
    colour = BANK_GROUP_COLOURS[r["split"] % 8]
    top.add_patch(plt.Rectangle((r["key_lo"], r["kv_head"] + 0.08), r["key_hi"] - r["key_lo"], 0.84, facecolor=colour,
                                edgecolor="white", linewidth=1))
    top.text((r["key_lo"] + r["key_hi"]) / 2, r["kv_head"] + 0.5, f"split {r['split']}\ntiles {r['tile_lo']}-"
             f"{r['tile_hi'] - 1}", ha="center", va="center", fontsize=6.3, linespacing=1.0,
             color="black" if colour in LIGHT else "white")
top.set_xlim(0, keys)
top.set_ylim(kv_heads, 0)
top.set_yticks([h + 0.5 for h in range(kv_heads)],
               [f"kv head {h}: q heads {h * group}-{h * group + group - 1}" for h in range(kv_heads)], fontsize=8)
top.set_xticks([r["key_lo"] for r in splits_rows if r["kv_head"] == 0] + [keys])
top.tick_params(axis="x", labelsize=7, rotation=45)
top.set_xlabel(f"key (Nk = {keys}: {keys // block_n} key tiles of {block_n})")
top.set_title(f"the grid: {splits} splits x {kv_heads} kv heads = {blocks} blocks of one 16-row tile each, "
              f"one per SM on {sms} SMs ({sms - blocks} idle); choose_plan: {splits} is the fewest splits whose waves "
              f"fill the GPU within 5% of the best\neach block runs the online softmax over its own {keys // splits} "
              f"keys and writes O_s (normalised by its own row sum) and LSE_s; the tile's last to arrive merges them",
              fontsize=9)

mid = fig.add_subplot(grid[1, 0])
for r in packed:
    used = r["head"] >= 0
    colour = BANK_GROUP_COLOURS[r["head"] % 8] if used else "#e8e8e8"
    mid.add_patch(plt.Rectangle((0, r["row"]), 1, 1, facecolor=colour, edgecolor="white", linewidth=1))
    mid.text(0.5, r["row"] + 0.5, f"query {r['query']}, q head {r['head']}" if used else "unused", ha="center",
             va="center", fontsize=7, color=("black" if colour in LIGHT else "white") if used else "#777777")
mid.set_xlim(0, 1)
mid.set_ylim(16, 0)
mid.set_xticks([])
mid.set_yticks([i + 0.5 for i in range(16)], [str(i) for i in range(16)], fontsize=7)
mid.set_ylabel("packed row r of block (split, kv head 0)")
mid.set_title(f"unpack_row: packed row r = query r / {group} of\nq head kv_head x {group} + r % {group}: the group "
              f"shares K, V", fontsize=9)

warps = fig.add_subplot(grid[1, 1])
quarter = block_n // 4
for w in range(4):
    warps.add_patch(plt.Rectangle((w * quarter, 0), quarter, 16, facecolor=BANK_GROUP_COLOURS[w], edgecolor="white",
                                  linewidth=1.5, alpha=0.85))
    warps.text(w * quarter + quarter / 2, group / 2, f"warp {w}: keys {w * quarter}-{w * quarter + quarter - 1}",
               ha="center", va="center", fontsize=8, color="black" if BANK_GROUP_COLOURS[w] in LIGHT else "white")
warps.add_patch(plt.Rectangle((0, group), block_n, 16 - group, facecolor="white", alpha=0.55, edgecolor="none"))
warps.set_xlim(0, block_n)
warps.set_ylim(16, 0)
warps.set_xticks(range(0, block_n + 1, quarter))
warps.set_yticks([])
warps.set_xlabel(f"key within one key tile of {block_n}")
warps.set_title("inside the block: the 4 warps share the 16 rows and split every key tile;\nthey merge in shared "
                f"memory at the end (pale: rows {group}-15, computed but unused)", fontsize=9)

bottom = fig.add_subplot(grid[2, :])
q_heads = sorted({r["head"] for r in merge})
width = 0.8 / len(q_heads)
for i, h in enumerate(q_heads):
    mine = [r for r in merge if r["head"] == h]
    bottom.bar([r["split"] - 0.4 + width * (i + 0.5) for r in mine], [float(r["weight"]) for r in mine], width,
               color=BANK_GROUP_COLOURS[h % 8], label=f"q head {h}")
bottom.axhline(1 / splits, color="black", linestyle=(0, (3, 2)), linewidth=0.8)
bottom.text(splits - 0.45, 1 / splits, f" 1/{splits}", va="bottom", ha="right", fontsize=7)
bottom.set_xticks(range(splits), [f"split {s}" for s in range(splits)], fontsize=7)
bottom.set_xlim(-0.6, splits - 0.4)
bottom.set_ylabel("weight_s = exp(LSE_s - LSE)")
bottom.legend(fontsize=8, frameon=False, ncol=len(q_heads))
for spine in ("top", "right"):
    bottom.spines[spine].set_visible(False)
bottom.set_title("the merge (by the last block): LSE = log sum_s exp(LSE_s), O = sum_s exp(LSE_s - LSE) O_s; each row's "
                 "weights sum to 1.\nShown for one made-up input (uniform random Q and K, scaled up for a peaky "
                 "softmax): a split weighs what its keys' share of the softmax is", fontsize=9)
fig.suptitle(f"step 13's split-KV decode at B1 Hq{heads_q} Hkv{kv_heads} Nq1 Nk{keys} d128 on {sms} SMs: a GQA "
             f"group's {group} query heads packed as rows of one tile, the keys cut into {splits} splits, and the "
             "merge of their partial results\ndata: build/scratch/split_kv --format csv (choose_plan, the split "
             "ranges, unpack_row and the last block's merge in fa2_split_kernel of steps/13_split_kv/kernel.cu)", fontsize=10, y=0.97)
save(fig, sys.argv[2])
