#!/usr/bin/env python3
"""Figure: ring attention's causal schedule over 4 GPUs. Each panel is the grid of (query chunk,
key chunk) pairs of one sequence: a cell's colour is the GPU that computes it (the holder of its
query chunk), its number the ring step at which that key chunk's K and V reach the GPU, a
hatched cell the diagonal (half its pairs visible), a blank cell skipped by the mask. Left: the
sequence in 4 contiguous chunks; right: in 8 chunks given out head and tail. The bars under
each panel are each GPU's work.
Data: build/scratch/ring_schedule --format csv (the ring's view: at step i GPU g meets the K and
V of GPU (g - i) mod R with its own query chunks).
usage: python3 figures/ring_schedule.py DATA.csv OUT.svg"""
import sys

from style import BANK_GROUP_COLOURS, plt, read_rows, save

rows = read_rows(sys.argv[1])
cuts = ["contiguous", "head-tail"]
gpus = rows[0]["gpus"]
titles = {"contiguous": f"{gpus} contiguous chunks, GPU g holds chunk g",
          "head-tail": f"{2 * gpus} chunks given out head and tail, GPU g holds g and {2 * gpus - 1}-g"}

fig = plt.figure(figsize=(12, 7.2))
grid = fig.add_gridspec(2, 2, height_ratios=[5, 1.4], hspace=0.35, wspace=0.25)
for col, cut in enumerate(cuts):
    mine = [r for r in rows if r["cut"] == cut]
    chunks = mine[0]["chunks"]
    ax = fig.add_subplot(grid[0, col])
    for r in mine:
        if r["kind"] == "skipped":
            continue
        colour = BANK_GROUP_COLOURS[r["gpu"] % 8]
        ax.add_patch(plt.Rectangle((r["k_chunk"], r["q_chunk"]), 1, 1, facecolor=colour, edgecolor="white",
                                   linewidth=1.2, hatch="///" if r["kind"] == "diagonal" else None))
        ax.text(r["k_chunk"] + 0.5, r["q_chunk"] + 0.5, str(r["step"]), ha="center", va="center", fontsize=9,
                color="black", bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6, "alpha": 0.8})
    ax.set_xlim(0, chunks)
    ax.set_ylim(chunks, 0)
    ax.set_aspect("equal")
    ax.set_xticks([c + 0.5 for c in range(chunks)], [str(c) for c in range(chunks)], fontsize=8)
    holders = {r["q_chunk"]: r["gpu"] for r in mine}
    ax.set_yticks([c + 0.5 for c in range(chunks)], [f"{c} (GPU {holders[c]})" for c in range(chunks)], fontsize=8)
    ax.tick_params(length=0)
    ax.set_xlabel("key chunk (its K and V travel around the ring)")
    ax.set_ylabel("query chunk (stays on its GPU)")
    ax.set_title(titles[cut], fontsize=10)

    bars = fig.add_subplot(grid[1, col])
    work = [sum(r["work2"] for r in mine if r["gpu"] == g) / 2 for g in range(gpus)]
    bars.barh(range(gpus), work, color=[BANK_GROUP_COLOURS[g % 8] for g in range(gpus)])
    bars.set_yticks(range(gpus), [f"GPU {g}" for g in range(gpus)], fontsize=8)
    bars.set_ylim(gpus - 0.5, -0.5)
    for spine in ("top", "right"):
        bars.spines[spine].set_visible(False)
    bars.set_xlabel("work: whole pairs of 2R-chunk size (a diagonal is half of one)", fontsize=8)
    mean = sum(work) / gpus
    bars.set_title(f"the slowest GPU has {max(work) / mean:.2f}x the mean work: every ring step waits for it",
                   fontsize=9)
fig.suptitle(f"ring attention over {gpus} GPUs under the causal mask: each cell one call of a step, its number the "
             "ring step, hatched the diagonal, blank skipped\ndata: build/scratch/ring_schedule --gpus "
             f"{gpus} --format csv", fontsize=10, y=0.99)
save(fig, sys.argv[2])
