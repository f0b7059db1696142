#!/usr/bin/env python3
"""Figure: step 11's software-pipelined key loop for one block, as a time line (ns). For each
consumer warpgroup, two lanes: its products on the tensor cores (S_n = Q K_n^T and
P_{n-1} V_{n-1}, issued back to back in one turn) and its softmax (the MUFU's exp2 and the
rest of a tile's work) with what it waits for; the skew is visible as the softmax of S_n running
under P_{n-1} V_{n-1}. The prologue (S_0 alone, its softmax) and the epilogue (the last P V
alone) are shaded. Everything drawn is read from the CSV, which build/scratch/ws_schedule
computes by walking the kernel's loop in its issue order with durations that are parameters (a
model: see scratch/ws_schedule.c).
Data: build/scratch/ws_schedule --step 11 --format csv.
usage: python3 figures/skewed_loop.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch

from style import BANK_GROUP_COLOURS, lane_bar, plt, read_rows, save, timeline_axes

rows = read_rows(sys.argv[1])
CONSUMER = [BANK_GROUP_COLOURS[0], BANK_GROUP_COLOURS[2]]
PALE_CONSUMER = ["#c3d3e6", "#f4c4c5"]
consumers = sorted({r["consumer"] for r in rows if r["consumer"] >= 0})
lanes = ["tensor cores"]
for c in consumers:
    lanes += [f"consumer {c}: tensor cores", f"consumer {c}: softmax (MUFU)"]
y_of = {name: i for i, name in enumerate(lanes)}
end = max(r["end_ns"] for r in rows)
tiles = max(r["tile"] for r in rows) + 1
product = next(r["end_ns"] - r["start_ns"] for r in rows if r["lane"] == "tensor cores")
softmax = next(r["end_ns"] - r["start_ns"] for r in rows if r["what"] == "softmax")

fig, ax = plt.subplots(figsize=(16, 5.8))


def bar(lane, start, stop, colour, text="", text_colour="white", hatch=None, edge="white", height=0.64):
    lane_bar(ax, y_of[lane], start, stop, colour, text, text_colour, hatch, edge, height,
             min_width=(0.025 if hatch != "///" else 0.05) * end)


def name(r):
    n = r["tile"]
    return f"S{n}" if r["what"].startswith("S") else f"P{n}V{n}"


for r in rows:
    lane, what, c, s, e = r["lane"], r["what"], r["consumer"], r["start_ns"], r["end_ns"]
    if lane == "tensor cores":
        hatch = None if what.startswith("S") else ".."
        bar(lane, s, e, CONSUMER[c], f"c{c} {name(r)}", hatch=hatch)
        bar(f"consumer {c}: tensor cores", s, e, CONSUMER[c], name(r), hatch=hatch)
    elif lane.startswith("consumer"):
        mufu = f"{lane}: softmax (MUFU)"
        if what == "softmax":
            bar(mufu, s, e, PALE_CONSUMER[c], f"softmax of S{r['tile']}", "black")
        elif what.startswith("wait"):
            text = {"wait S": "wait_group 1" if r["phase"] == "loop" else "wait_group 0", "wait PV": "wait_group 0"}
            bar(mufu, s, e, "white", text.get(what, what), "#555555", hatch="///", edge="#aaaaaa", height=0.4)
        elif what.startswith("issue"):
            y = y_of[f"{lane}: tensor cores"]
            ax.plot([s, s], [y + 0.1, y + 0.9], color="black", linewidth=1.2, zorder=5)
# the prologue and the epilogue of each consumer, shaded across its two lanes
for c in consumers:
    mine = [r for r in rows if r["consumer"] == c]
    for phase, colour in (("prologue", "#f2f2f2"), ("epilogue", "#f2f2f2")):
        span = [r for r in mine if r["phase"] == phase and r["lane"] != f"consumer {c}" or
                (r["phase"] == phase and r["what"] in ("softmax", "wait S", "wait PV", "wait turn"))]
        span = [r for r in span if r["what"] != "wait q_full"]
        if not span:
            continue
        x0, x1 = min(r["start_ns"] for r in span), max(r["end_ns"] for r in span)
        y = y_of[f"consumer {c}: tensor cores"]
        ax.add_patch(plt.Rectangle((x0, y), x1 - x0, 2, facecolor=colour, edgecolor="#bbbbbb", linewidth=0.8,
                                   linestyle=(0, (3, 2)), zorder=0))
        ax.text(x0 + 10, y + 0.02, phase, ha="left", va="top", fontsize=7, color="#555555", zorder=5)

timeline_axes(ax, lanes, end, x_margin=1.02, y_top=-0.45)
handles = [Patch(facecolor=CONSUMER[c], label=f"consumer {c}: S_n = Q K_n^T") for c in consumers]
handles += [Patch(facecolor=CONSUMER[c], hatch="..", label=f"consumer {c}: P_(n-1) V_(n-1)") for c in consumers]
handles += [Patch(facecolor=PALE_CONSUMER[0], label="softmax of S_n"),
            Patch(facecolor="white", edgecolor="#aaaaaa", hatch="///", label="waiting (wgmma.wait_group, mbarrier, turn)")]
ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, frameon=False, fontsize=8)
busy = sum(r["end_ns"] - r["start_ns"] for r in rows if r["lane"] == "tensor cores")
fig.suptitle(f"step 11's skewed key loop, one block over {tiles} key tiles: each turn of a consumer at the tensor cores "
             "issues S_n = Q K_n^T and P_(n-1) V_(n-1) back to back;\nit waits for S_n alone (wgmma.wait_group 1), runs "
             "the softmax of S_n while P_(n-1) V_(n-1) is still on the tensor cores, then waits for it (wait_group 0). "
             f"Prologue: S_0 alone; epilogue: the last P V alone.\nTensor cores busy {busy} of {end} ns "
             f"({100 * busy / end:.0f}%).  A model computed by build/scratch/ws_schedule --step 11 (the kernel's issue "
             f"order): one product {product} ns (the wgmma ceiling measured on an H200), softmax {softmax} ns (calibrated to step "
             "10's time measured there)", fontsize=9, y=1.02)
save(fig, sys.argv[2])
