#!/usr/bin/env python3
"""Figure: step 10's producer/consumer schedule for one block, as a time line (ns). Lanes: the
producer thread (its TMA issues, and its waits on the empty barrier before it refills a stage);
Q and each stage of K and V, which step 10 fills and releases together on one full and one empty
barrier (the copies in flight from their issue until kv_full completes, then the tiles in use
until kv_empty completes: both consumers released them after their P_n V_n); the tensor
cores (each product, coloured by the consumer that issued it, in turn order); each consumer
(its softmax, and what it waits for). Everything drawn is read from the CSV, which
build/scratch/ws_schedule computes by walking the kernel's protocol with durations that are
parameters (a model: see scratch/ws_schedule.c).
Data: build/scratch/ws_schedule --step 10 --format csv.
usage: python3 figures/producer_consumer.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch

from style import BANK_GROUP_COLOURS, lane_bar, plt, read_rows, save, timeline_axes

rows = read_rows(sys.argv[1])
CONSUMER = [BANK_GROUP_COLOURS[0], BANK_GROUP_COLOURS[2]]
PALE_CONSUMER = ["#c3d3e6", "#f4c4c5"]
K_COLOUR, V_COLOUR, Q_COLOUR = BANK_GROUP_COLOURS[3], BANK_GROUP_COLOURS[1], BANK_GROUP_COLOURS[4]
COLOUR = {"K": K_COLOUR, "KV": K_COLOUR, "V": V_COLOUR, "Q": Q_COLOUR}
PALE = {"K": "#d6ecea", "KV": "#d6ecea", "V": "#fbd8b8", "Q": "#c9e3c5"}
consumers = sorted({r["consumer"] for r in rows if r["consumer"] >= 0})
stage_lanes = sorted({r["lane"] for r in rows if " stage " in r["lane"]}, key=lambda name: (name[0] == "V", name))
stages = sorted({r["stage"] for r in rows if " stage " in r["lane"]})
lanes = ["producer", "Q"] + stage_lanes + ["tensor cores"] + [f"consumer {c}" for c in consumers]
y_of = {name: i for i, name in enumerate(lanes)}
end = max(r["end_ns"] for r in rows)
tiles = max(r["tile"] for r in rows) + 1
product = {r["what"]: r["end_ns"] - r["start_ns"] for r in rows if r["lane"] == "tensor cores"}
softmax = next(r["end_ns"] - r["start_ns"] for r in rows if r["what"] == "softmax")
copy = next(r["end_ns"] - r["start_ns"] for r in rows if r["what"] == "in flight")

fig, ax = plt.subplots(figsize=(16, 7.2))


def bar(lane, start, stop, colour, text="", text_colour="white", hatch=None, edge="white", height=0.64):
    lane_bar(ax, y_of[lane], start, stop, colour, text, text_colour, hatch, edge, height, min_width=0.028 * end)


def mark(lane, t, text, colour="black", above=True):
    y = y_of[lane]
    ax.plot([t, t], [y + 0.12, y + 0.88], color=colour, linewidth=1.4, zorder=5)
    ax.text(t, y + (0.06 if above else 0.97), text, ha="center", va="bottom" if not above else "bottom", fontsize=6,
            color=colour, zorder=5)


for r in rows:
    lane, what, c, n = r["lane"], r["what"], r["consumer"], r["tile"]
    s, e = r["start_ns"], r["end_ns"]
    if lane == "producer":
        if what.startswith("issue"):
            tensor = what.split()[1]
            name = tensor + ("" if n < 0 else str(n))
            mark(lane, s, name, COLOUR[tensor])
        else:
            tensor = what.split()[1].split("_")[0].upper()
            bar(lane, s, e, "#eeeeee", f"{what} ({tensor}{n})", "black", hatch="///", edge="#999999", height=0.4)
    elif lane == "Q" or " stage " in lane:
        op = lane.split()[0]
        name = "Q" if op == "Q" else f"K{n} V{n}" if op == "KV" else f"{op}{n}"
        if what == "in flight":
            bar(lane, s, e, COLOUR[op], f"{name} in flight")
        else:
            bar(lane, s, e, PALE[op], f"{name} landed", "black")
            ax.plot([e], [y_of[lane] + 0.5], marker="|", color="black", markersize=12, zorder=5)
    elif lane == "tensor cores":
        label = f"c{c}: S{n}" if what.startswith("S") else f"c{c}: P{n}V{n}"
        bar(lane, s, e, CONSUMER[c], label, hatch=None if what.startswith("S") else "..")
    elif lane.startswith("consumer"):
        if what == "softmax":
            bar(lane, s, e, PALE_CONSUMER[c], f"softmax {n}", "black")
        elif what.startswith("wait"):
            bar(lane, s, e, "white", what, "#555555", hatch="///", edge="#aaaaaa", height=0.4)
        elif what.startswith("issue"):
            mark(lane, s, "S" + str(n) if what == "issue S" else f"PV{n}", CONSUMER[c])
        elif what.startswith("release"):
            ax.plot([s], [y_of[lane] + 0.85], marker="v", color="#444444", markersize=4, zorder=5)

timeline_axes(ax, lanes, end, x_margin=1.06, y_top=-0.3)
handles = [Patch(facecolor=CONSUMER[c], label=f"consumer {c}'s S = Q K^T") for c in consumers]
handles += [Patch(facecolor=CONSUMER[c], hatch="..", label=f"consumer {c}'s O += P V") for c in consumers]
handles += [Patch(facecolor=K_COLOUR, label="a K and a V tile's copies in flight (TMA issue to kv_full)"),
            Patch(facecolor=PALE["K"], label="landed, in use until both consumers released them (kv_empty: the bar)"),
            Patch(facecolor=PALE_CONSUMER[0], label="softmax (and the rest of a tile's work)"),
            Patch(facecolor="white", edgecolor="#aaaaaa", hatch="///", label="waiting (mbarrier, wgmma.wait_group)")]
ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4, frameon=False, fontsize=8)
busy = sum(r["end_ns"] - r["start_ns"] for r in rows if r["lane"] == "tensor cores")
fig.suptitle(f"step 10's warp specialisation, one block over {tiles} key tiles: a producer thread issues the TMA copies "
             f"into {len(stages)} stages of K and V, a tile's K and V on one full barrier (kv_full: landed) and one empty "
             f"barrier (kv_empty: released by both consumers after P_n V_n);\n"
             f"two consumer warpgroups take turns at the tensor cores, S_n of consumer 0, of consumer 1, then P_n V_n of "
             f"each; each waits for its own product before its softmax.  Tensor cores busy {busy} of {end} ns "
             f"({100 * busy / end:.0f}%).\n"
             f"A model computed by build/scratch/ws_schedule --step 10 (the kernel's protocol, event by event): "
             f"one product {product['S = Q K^T']} ns (the wgmma ceiling measured on an H200), softmax {softmax} ns "
             f"(calibrated to step 10's time measured there), a copy {copy} ns (an assumption)", fontsize=9, y=1.0)
save(fig, sys.argv[2])
