#!/usr/bin/env python3
"""Figure: the FlashAttention-2 tiling of step 07 in its three tile configurations, side by side.
Each panel is one block: its query rows down, the keys of one key tile across, to scale. Each
16-row m-tile is coloured by the warp that owns it (a warp's second m-tile hatched); thin lines
mark the 8-key n-tiles of the mma. Right: the grid of blocks over query tiles x heads x batch at
the seed shape, B2 H8 N1024, the same for every configuration (each block covers the same rows).
Data: build/scratch/tiling --format csv (one line per configuration, warp and m-tile).
usage: python3 figures/tiling.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch

from style import BANK_GROUP_COLOURS, plt, read_rows, save

LIGHT = {"#edc948", "#ff9da7", "#76b7b2"}  # backgrounds that take black text
NAMES = ["LargeGridConfig", "SmallGridConfig", "SmallGridShortTileConfig"]  # the kernel's names, by config
WHEN = ["more blocks than SMs, and 2 blocks\nfit on an SM: 8 warps per SM",  # choose_config's rule
        "otherwise: 1 block of 8 warps per SM",
        "where 1 does not fit (d128, 99 KB\nper block): 1 block of 8 warps per SM"]
SEED = {"batch": 2, "heads": 8, "seqlen": 1024}  # the shape the grid panel draws

rows = read_rows(sys.argv[1])
configs = sorted({r["config"] for r in rows})
block_n = {c: next(r["block_n"] for r in rows if r["config"] == c) for c in configs}
block_m = max(r["row0"] + r["rows"] for r in rows)
tiles = -(-SEED["seqlen"] // block_m)
grid_w = SEED["batch"] * tiles + (SEED["batch"] - 1)  # the batches side by side, one column apart

fig, axes = plt.subplots(1, len(configs) + 1, figsize=(16, 5.0),
                         gridspec_kw={"width_ratios": [block_n[c] for c in configs] + [grid_w * 9], "wspace": 0.35})
for ax, c in zip(axes, configs):
    tiles_of = [r for r in rows if r["config"] == c]
    warps, m_tiles, n = tiles_of[0]["warps"], tiles_of[0]["m_tiles"], block_n[c]
    for r in tiles_of:
        colour = BANK_GROUP_COLOURS[r["warp"] % len(BANK_GROUP_COLOURS)]
        ax.add_patch(plt.Rectangle((0, r["row0"]), n, r["rows"], facecolor=colour, edgecolor="white", linewidth=1.5,
                                   hatch="///" if r["m_tile"] else None))
        ax.text(n / 2, r["row0"] + r["rows"] / 2,
                f"warp {r['warp']}, m-tile {r['m_tile']}\nrows {r['row0']}-{r['row0'] + r['rows'] - 1}",
                ha="center", va="center", fontsize=7, linespacing=1.0, color="black" if colour in LIGHT else "white",
                bbox={"facecolor": colour, "edgecolor": "none", "pad": 1})
    for key in range(8, n, 8):
        ax.axvline(key, color="white", linewidth=0.4, alpha=0.6)
    for w in range(warps):  # a bracket per warp on the left: its rows
        y0, y1 = w * m_tiles * 16, (w + 1) * m_tiles * 16
        ax.plot([-3, -3], [y0 + 1, y1 - 1], color=BANK_GROUP_COLOURS[w % 8], linewidth=3, solid_capstyle="butt",
                clip_on=False)
    ax.set_xlim(0, n)
    ax.set_ylim(block_m, 0)
    ax.set_aspect("equal")
    ax.set_xticks(range(0, n + 1, 16))
    ax.set_yticks(range(0, block_m + 1, 16))
    ax.tick_params(labelsize=7.5)
    ax.set_xlabel(f"key of the tile (BLOCK_N = {n})")
    if c == configs[0]:
        ax.set_ylabel(f"query row of the block (BLOCK_M = {block_m})")
    ax.set_title(f"configuration {c}: {NAMES[c]}\nTileConfig<{warps}, {m_tiles}, {n}>: {warps} warps x {m_tiles} "
                 f"m-tile{'s' if m_tiles > 1 else ''}\neach K, V fragment feeds {m_tiles} mma\n{WHEN[c]}",
                 fontsize=8.5)

ax = axes[-1]
for b in range(SEED["batch"]):
    x0 = b * (tiles + 1)
    for x in range(tiles):
        for h in range(SEED["heads"]):
            first = b == 0 and x == 0 and h == 0
            ax.add_patch(plt.Rectangle((x0 + x, h), 1, 1, facecolor="#59a14f" if first else "#d9d9d9",
                                       edgecolor="white", linewidth=1))
    ax.text(x0 + tiles / 2, -0.35, f"z = batch {b}", ha="center", va="bottom", fontsize=8)
ax.set_xlim(-0.2, grid_w + 0.2)
ax.set_ylim(SEED["heads"] + 0.2, -1.4)
ax.set_aspect("equal")
ax.set_xticks([b * (tiles + 1) + x + 0.5 for b in range(SEED["batch"]) for x in range(tiles)],
              [str(x) for _ in range(SEED["batch"]) for x in range(tiles)], fontsize=7)
ax.set_yticks([h + 0.5 for h in range(SEED["heads"])], [str(h) for h in range(SEED["heads"])], fontsize=7)
ax.tick_params(length=0)
for spine in ax.spines.values():
    spine.set_visible(False)
ax.set_xlabel(f"x = query tile ({block_m} rows each)")
ax.set_ylabel("y = head")
blocks = tiles * SEED["heads"] * SEED["batch"]
ax.set_title(f"the grid at B{SEED['batch']} H{SEED['heads']} N{SEED['seqlen']}:\n"
             f"{tiles} x {SEED['heads']} x {SEED['batch']} = {blocks} blocks in every configuration\n"
             "green: block (0, 0, 0), rows 0-127 of head 0, batch 0:\none of the panels to the left", fontsize=8.5)

fig.legend(handles=[Patch(facecolor=BANK_GROUP_COLOURS[w], label=f"warp {w}") for w in range(8)]
           + [Patch(facecolor="white", edgecolor="#555555", hatch="///", label="a warp's m-tile 1")],
           loc="lower center", ncol=9, frameon=False, bbox_to_anchor=(0.5, 0.02), fontsize=8)
fig.suptitle("step 07's tiling: which warp owns which 16-row m-tile of a block's query rows, and how many keys a "
             "tile holds (each panel to scale; thin lines: the mma's 8-key n-tiles)", fontsize=9.5, y=1.02)
save(fig, sys.argv[2])
