#!/usr/bin/env python3
"""Figure: step 06's staged epilogue at d128, one warp, both halves, from the bank model.
Top left, half 1: the warp's first 4-byte st.shared of O (c0,c1 of d-tile 0: rows 0-7, 4 lanes
a row) into the swizzled [64][D] tile, drawn over the banks; each lane is coloured by the bank
group it hits, the dashed boxes are where the same words sit unswizzled. Top right: the same
32 stores sent straight to global memory, as step 05 does: 16 bytes in each of 8 rows, a half
of one 32-byte sector per row. Bottom, half 2: after the barrier, the warp's first 16-byte
chunk store to global memory, thread t on chunk t of the block's rows: 8 lanes write one whole
128-byte line (their colour); gN is the bank group each lane's chunk is read from in shared
memory (one 8-lane phase, 8 different groups).
Data: build/scratch/bank_conflicts --dim 128 --format csv (patterns o-store and o-load).
usage: python3 figures/epilogue.py DATA.csv OUT.svg"""
import sys

from style import BANK_GROUP_COLOURS, plt, read_rows, save

LINE_COLOURS = [BANK_GROUP_COLOURS[i] for i in (0, 1, 4, 6)]  # one per 128-byte line = 8-lane phase
SECTOR, LINE = 32, 128

data = read_rows(sys.argv[1])
store = [r for r in data if r["pattern"] == "o-store"]
chunks = [r for r in data if r["pattern"] == "o-load"]
dim = store[0]["dim"]
row_bytes = dim * 2
rows_st = sorted({r["row"] for r in store})
rows_ch = sorted({r["row"] for r in chunks})

fig = plt.figure(figsize=(13, 7.4))
grid = fig.add_gridspec(2, 2, width_ratios=[32, 30], height_ratios=[len(rows_st), 3.2], hspace=0.55, wspace=0.12)
smem, direct, glob = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])

# half 1: st.shared.b32 into the swizzled tile, x = the 4-byte word of the row's first 128 bytes = bank
words = LINE // 4
for t in rows_st:
    for w in range(words):
        smem.add_patch(plt.Rectangle((w, t), 1, 1, facecolor="#eeeeee", edgecolor="white", linewidth=0.6))
for r in store:
    assert r["byte"] - r["row"] * row_bytes < LINE  # rows 0-7 keep chunk 0 in their first 128 bytes
    w = (r["byte"] - r["row"] * row_bytes) // 4
    smem.add_patch(plt.Rectangle((w, r["row"]), 1, 1, facecolor=BANK_GROUP_COLOURS[r["bank"] // 4],
                                 edgecolor="white", linewidth=0.6))
    smem.text(w + 0.5, r["row"] + 0.5, str(r["lane"]), ha="center", va="center", color="white", fontsize=6.5)
    pw = (r["plain_byte"] - r["row"] * row_bytes) // 4
    smem.add_patch(plt.Rectangle((pw + 0.08, r["row"] + 0.08), 0.84, 0.84, facecolor="none", edgecolor="#555555",
                                 linewidth=0.8, linestyle=(0, (2, 1.5))))
for g in range(1, 8):
    smem.axvline(4 * g, color="#999999", linewidth=0.6)
smem.set_xlim(0, words)
smem.set_ylim(len(rows_st), 0)
smem.set_xticks([4 * g + 2 for g in range(8)], [f"g{g}\n{4 * g}-{4 * g + 3}" for g in range(8)], fontsize=7)
smem.set_yticks([t + 0.5 for t in rows_st], [str(t) for t in rows_st], fontsize=7)
smem.set_xlabel(f"bank (the first 128 of the row's {row_bytes} bytes), in bank groups gN")
smem.set_ylabel("tile row")
groups = len({r["bank"] // 4 for r in store})
smem.set_title(f"1. st.shared.b32, one warp, c0,c1 of d-tile 0: {len(rows_st)} rows in {groups} bank groups,\n"
               f"{store[0]['wavefronts']} wavefront (dashed: unswizzled, all in g0: "
               f"{store[0]['plain_wavefronts']} wavefronts)", fontsize=9)

# the same stores straight to global memory (step 05): x = byte of the row, 32-byte sectors
for t in rows_st:
    for s in range(row_bytes // SECTOR):
        direct.add_patch(plt.Rectangle((s * SECTOR, t), SECTOR, 1, facecolor="#eeeeee", edgecolor="white",
                                       linewidth=1.2))
touched = {(r["row"], r["row_byte"] // SECTOR) for r in store}
for r in store:
    direct.add_patch(plt.Rectangle((r["row_byte"], r["row"]), r["bytes"], 1,
                                   facecolor=BANK_GROUP_COLOURS[r["bank"] // 4], edgecolor="white", linewidth=0.4))
for t, s in touched:
    direct.add_patch(plt.Rectangle((s * SECTOR + 0.6, t + 0.06), SECTOR - 1.2, 0.88, facecolor="none",
                                   edgecolor="black", linewidth=1.2, zorder=3))
for t in rows_st:
    lanes = [r["lane"] for r in store if r["row"] == t]
    end = max(r["row_byte"] + r["bytes"] for r in store if r["row"] == t)
    direct.text((end // SECTOR + 1) * SECTOR + 4, t + 0.5, f"lanes {min(lanes)}-{max(lanes)}", va="center",
                fontsize=7)
for x in range(LINE, row_bytes, LINE):
    direct.axvline(x, color="black", linewidth=1.0, linestyle=":")
direct.set_xlim(0, row_bytes)
direct.set_ylim(len(rows_st), 0)
direct.set_xticks(range(0, row_bytes + 1, SECTOR), [str(x) for x in range(0, row_bytes + 1, SECTOR)], fontsize=7)
direct.set_yticks([t + 0.5 for t in rows_st], [str(t) for t in rows_st], fontsize=7)
direct.set_xlabel("byte of O's row in global memory (cells: 32-byte sectors)")
written = sum(r["bytes"] for r in store)
direct.set_title(f"step 05: the same {len(store)} lanes store to global memory directly: one request,\n"
                 f"{len(touched)} sectors touched (outlined), {written} of their {len(touched) * SECTOR} bytes written",
                 fontsize=9)

# half 2: 16-byte chunk stores to global memory, x = byte of the row
for r in chunks:
    y = rows_ch.index(r["row"])
    line = r["row_byte"] // LINE + y * (row_bytes // LINE)
    glob.add_patch(plt.Rectangle((r["row_byte"], y), r["bytes"], 1, facecolor=LINE_COLOURS[line % 4],
                                 edgecolor="white", linewidth=0.8))
    glob.text(r["row_byte"] + r["bytes"] / 2, y + 0.5, f"{r['lane']}\ng{r['bank'] // 4}", ha="center", va="center",
              color="white", fontsize=7.5, linespacing=0.95)
for x in range(SECTOR, row_bytes, SECTOR):
    glob.axvline(x, color="black", linewidth=2.4 if x % LINE == 0 else 0.9, linestyle="-" if x % LINE == 0 else ":")
glob.set_xlim(0, row_bytes)
glob.set_ylim(len(rows_ch), 0)
glob.set_xticks(range(0, row_bytes + 1, SECTOR), [str(x) for x in range(0, row_bytes + 1, SECTOR)], fontsize=7)
glob.set_yticks([y + 0.5 for y in range(len(rows_ch))], [f"row {t}" for t in rows_ch], fontsize=7.5)
glob.set_xlabel("byte of O's row in global memory (dotted: 32-byte sectors; solid: 128-byte lines); "
                "cell: lane, and gN = the bank group it read its 16 bytes from")
n_lines = len(rows_ch) * row_bytes // LINE
phase_waves = {r["phase"]: r["wavefronts"] for r in chunks}
phases = len(phase_waves)
assert all(len({r["bank"] // 4 for r in chunks if r["phase"] == p}) == 8 for p in phase_waves)
glob.set_title(f"2. after the barrier: st.global.v4, one warp, thread t on chunk t: {len(chunks)} x 16 bytes = "
               f"{n_lines} whole 128-byte lines, {n_lines * LINE // SECTOR} full sectors, one request\n"
               f"(read from the swizzled tile first: {phases} phases of 8 lanes, each on 8 different bank groups, "
               f"{sum(phase_waves.values())} wavefronts)", fontsize=9)
fig.suptitle(f"Step 06's staged epilogue at d{dim}: how one warp's part of O leaves the block", fontsize=10.5)
save(fig, sys.argv[2])
