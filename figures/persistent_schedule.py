#!/usr/bin/env python3
"""Figure: step 12's work queue at one shape, under scratch/persistent_schedule's model: one row
per block (one block per SM), its work items left to right in the order it takes them, each as
long as its key tiles (its work under the causal mask; an item's time is not measured here).
Colour: the head; the label: the q tile (and the head where there is room). The queue hands the
list's next item to the block that frees first, and the list runs longest first across a few
heads at a time, so the last items are the shortest and the blocks end close together (the grey
remainder up to the last block's end).
Data: build/scratch/persistent_schedule --format csv (the kernel's list, the model's queue).
usage: python3 figures/persistent_schedule.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch

from style import plt, read_rows, save

items = read_rows(sys.argv[1])
blocks, block_m = items[0]["blocks"], items[0]["block_m"]
heads = sorted({(r["batch"], r["head"]) for r in items})
palette = plt.get_cmap("tab20").colors
colour = {bh: palette[(2 * i) % 20 if i < 10 else (2 * (i - 10) + 1) % 20] for i, bh in enumerate(heads)}
end_of = {}
for r in items:
    end_of[r["block"]] = max(end_of.get(r["block"], 0), r["first_tile"] + r["key_tiles"])
makespan = max(end_of.values())
mean = sum(r["key_tiles"] for r in items) / blocks
m_blocks = max(r["m_block"] for r in items) + 1

fig, ax = plt.subplots(figsize=(14, 3 + blocks * 0.105))
for r in items:
    x, w, y = r["first_tile"], r["key_tiles"], r["block"]
    ax.add_patch(plt.Rectangle((x, y + 0.08), w, 0.84, facecolor=colour[(r["batch"], r["head"])], edgecolor="white",
                               linewidth=0.5))
    label = f"h{r['head']} q{r['m_block']}" if w >= 6 else f"q{r['m_block']}" if w >= 2 else ""
    if label:
        ax.text(x + w / 2, y + 0.5, label, ha="center", va="center", fontsize=4.8)
for b, e in end_of.items():
    if e < makespan:
        ax.add_patch(plt.Rectangle((e, b + 0.08), makespan - e, 0.84, facecolor="#f0f0f0", edgecolor="none"))
ax.axvline(mean, color="black", linestyle=(0, (3, 2)), linewidth=1)
ax.text(mean, -0.6, f"mean {mean:.1f}", ha="center", va="bottom", fontsize=8)
ax.set_xlim(0, makespan * 1.01)
ax.set_ylim(blocks, -1.2)
ax.set_yticks(range(0, blocks, 4), [str(b) for b in range(0, blocks, 4)], fontsize=6)
ax.set_ylabel(f"block = SM (gridDim.x = {blocks})")
ax.set_xlabel("work in key tiles of 128 keys, in the order the block takes its items (an item's length: its key "
              "tiles under the mask)")
for spine in ("top", "right"):
    ax.spines[spine].set_visible(False)
shown = heads[:16]
height = 3 + blocks * 0.105
fig.subplots_adjust(top=1 - 0.75 / height, bottom=1.1 / height)
fig.legend(handles=[Patch(facecolor=colour[bh], label=f"head {bh[1]}" + (f", batch {bh[0]}" if bh[0] else ""))
                    for bh in shown], loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=8, frameon=False, fontsize=8)
fig.suptitle(f"step 12's work queue at B{max(r['batch'] for r in items) + 1} H{len({r['head'] for r in items})} "
             f"N{m_blocks * block_m} causal, {blocks} blocks (one per SM), {len(items)} q tiles of {block_m} rows: "
             f"the list runs longest first across a few heads at a time,\nand the block that frees first takes the "
             f"next item (a model: an item costs its key tiles plus one). Last block done at {makespan} key tiles, "
             f"{100 * (makespan - mean) / mean:.1f}% past the mean; grey: a block idle until then\n"
             "data: build/scratch/persistent_schedule --format csv (the list of steps/12_persistent/kernel.cu, the "
             "model's queue)", fontsize=9.5, y=1.0)
save(fig, sys.argv[2])
