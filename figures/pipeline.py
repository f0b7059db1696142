#!/usr/bin/env python3
"""Figure: the cp.async schedule of step 05's loop over 4 key tiles, event by event in the
kernel's order. One lane per shared-memory buffer (Q; K stage 0 and 1; V stage 0 and 1): a
solid bar from the issue of a tile's copy to the cp.async.wait_group that guarantees it has
landed, a pale bar from there to the mma that reads it. The commit groups above, numbered as
the kernel commits them (the last iteration commits two empty ones). The compute lane below.
Dashed lines: cp.async.wait_group N; solid grey lines: __syncthreads. The x axis is the order
of the events, not time. A read or an issue the schedule does not make safe is outlined red.
Data: build/scratch/copy_layout --format csv.
usage: python3 figures/pipeline.py DATA.csv OUT.svg"""
import sys

from style import BANK_GROUP_COLOURS, plt, read_rows, save

COLOUR = {"Q": BANK_GROUP_COLOURS[4], "K": BANK_GROUP_COLOURS[0], "V": BANK_GROUP_COLOURS[1]}
PALE = {"Q": "#c9e3c5", "K": "#c3d3e6", "V": "#fbd8b8"}
events = read_rows(sys.argv[1])
stages = max(e["stage"] for e in events) + 1
lanes = ["commit groups", "Q"] + [f"{op} stage {s}" for op in "KV" for s in range(stages)] + ["compute"]
lane_y = {name: i for i, name in enumerate(lanes)}


def buffer_lane(e):
    return "Q" if e["operand"] == "Q" else f"{e['operand']} stage {e['stage']}"


def tile_name(e):
    return e["operand"] if e["operand"] == "Q" else f"{e['operand']}{e['tile']}"


def label(e):
    if e["event"].startswith("issue"):
        return f"issue {tile_name(e)}"
    if e["event"] == "commit":
        return f"commit g{e['group']}"
    if e["event"] == "wait":
        return f"wait_group {e['wait_n']}: g{e['group']} done"
    if e["event"] == "barrier":
        return "__syncthreads"
    if e["event"] == "Q to registers":
        return "Q -> registers"
    if e["event"] == "S = Q K^T":
        return f"S = Q K{e['tile']}^T"
    if e["event"] == "softmax":
        return f"softmax {e['tile']}"
    return f"O += P V{e['tile']}"


n = len(events)
fig, ax = plt.subplots(figsize=(15, 6.2))
iterations = sorted({e["iteration"] for e in events})
for i, it in enumerate(iterations):
    span = [e["order"] for e in events if e["iteration"] == it]
    ax.axvspan(min(span), max(span) + 1, color="#f4f4f4" if i % 2 == 0 else "white", zorder=0)
    name = "prologue" if it < 0 else f"iteration nb = {it}: tile {it} from stage {it % stages}"
    ax.text((min(span) + max(span) + 1) / 2, -0.75, name, ha="center", va="center", fontsize=8.5, zorder=5,
            bbox={"facecolor": "#f4f4f4" if i % 2 == 0 else "white", "edgecolor": "none", "pad": 1})
for e in events:
    x = e["order"] + 0.5
    if e["event"] == "barrier":
        ax.axvline(x, color="#555555", linewidth=1.6, zorder=1)
    elif e["event"] == "wait":
        ax.axvline(x, color="#555555", linewidth=1.0, linestyle=(0, (3, 2)), zorder=1)

for e in events:
    if e["event"] == "commit":
        y = lane_y["commit groups"]
        empty = e["operand"] == "-"
        ax.add_patch(plt.Rectangle((e["order"] + 0.1, y + 0.2), 0.8, 0.6, zorder=3, linewidth=0.8,
                                   facecolor="white" if empty else COLOUR[e["operand"]], edgecolor="#555555",
                                   hatch="////" if empty else None))
        ax.text(e["order"] + 0.5, y + 0.5, f"g{e['group']}", ha="center", va="center", fontsize=7, zorder=4,
                color="black" if empty else "white")
    if not e["event"].startswith("issue"):
        continue
    # the wait that guarantees this copy's group, and the read that consumes the tile
    # (or the last event, where none does: the figure then shows the bar running off the end)
    wait = next((w for w in events if w["event"] == "wait" and w["order"] > e["order"] and w["group"] >= e["group"]),
                events[-1])
    read = next((r for r in events if r["order"] > e["order"] and r["operand"] == e["operand"]
                 and r["tile"] == e["tile"] and not r["event"].startswith("issue") and r["event"] != "commit"),
                events[-1])
    y = lane_y[buffer_lane(e)]
    ax.add_patch(plt.Rectangle((e["order"] + 0.5, y + 0.2), wait["order"] - e["order"], 0.6, zorder=2,
                               facecolor=COLOUR[e["operand"]], edgecolor="red" if e["ready"] == 0 else "white",
                               linewidth=2 if e["ready"] == 0 else 0.5))
    ax.text((e["order"] + wait["order"]) / 2 + 0.5, y + 0.5, f"{tile_name(e)} in flight (g{e['group']})",
            ha="center", va="center", fontsize=7.5, color="white", zorder=4)
    ax.add_patch(plt.Rectangle((wait["order"] + 0.5, y + 0.2), read["order"] - wait["order"], 0.6, zorder=2,
                               facecolor=PALE[e["operand"]], edgecolor="white", linewidth=0.5))
    if read["order"] - wait["order"] >= 3:
        ax.text((wait["order"] + read["order"]) / 2 + 0.5, y + 0.5, "landed", ha="center", va="center", fontsize=7,
                zorder=4)

for e in events:
    if e["ready"] < 0 or e["event"].startswith("issue"):
        continue
    y = lane_y["compute"]
    bad = e["ready"] == 0
    ax.add_patch(plt.Rectangle((e["order"] + 0.08, y + 0.15), 0.84, 0.7, zorder=3, facecolor=COLOUR[e["operand"]],
                               edgecolor="red" if bad else "white", linewidth=2 if bad else 0.5))
    # the read: a mark on the buffer lane it reads
    by = lane_y[buffer_lane(e)]
    ax.add_patch(plt.Rectangle((e["order"] + 0.3, by + 0.1), 0.4, 0.8, zorder=3, facecolor=COLOUR[e["operand"]],
                               edgecolor="red" if bad else "black", linewidth=2 if bad else 0.8))
for e in events:
    if e["event"] == "softmax":
        ax.add_patch(plt.Rectangle((e["order"] + 0.08, lane_y["compute"] + 0.15), 0.84, 0.7, zorder=3,
                                   facecolor="#bab0ac", edgecolor="white", linewidth=0.5))

ax.set_xlim(0, n)
ax.set_ylim(len(lanes), -1.2)
ax.set_yticks([i + 0.5 for i in range(len(lanes))], lanes)
ax.set_xticks([e["order"] + 0.5 for e in events], [label(e) for e in events], rotation=90, fontsize=7.5)
ax.tick_params(axis="x", length=0)
for spine in ("top", "right"):
    ax.spines[spine].set_visible(False)
unsafe = sum(e["ready"] == 0 for e in events)
ax.set_xlabel("the events of the kernel, in program order: x is order, not time "
              "(a copy in flight runs in the background while the events after it execute)")
fig.suptitle(f"step 05's cp.async pipeline over {len(iterations) - 1} key tiles, {stages} stages each for K and V\n"
             "solid bar: a tile's copy in flight, from its issue to the cp.async.wait_group that guarantees it; pale: landed; "
             "black-edged mark: read by the mma; hatched: an empty commit group\n"
             "dashed line: cp.async.wait_group N (all groups but the N newest done); grey line: __syncthreads; "
             + ("every read comes after a wait and a barrier that cover it, every issue after a barrier that follows "
                "the last read of its buffer" if not unsafe
                else f"{unsafe} reads or issues NOT covered by a wait and a barrier (outlined red)"),
             fontsize=9)
save(fig, sys.argv[2])
