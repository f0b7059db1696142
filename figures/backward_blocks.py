#!/usr/bin/env python3
"""Figure: step 14's backward at one small causal shape with Nq != Nk and a GQA group of two.
Left panels, one per query head of kv head 0: the (query row, key) plane cut into the kernel's
64 x 64 tiles; a column of tiles is one key block, one block of fa2_bwd_kernel, and the coloured
tiles are the steps of its walk (numbered in its order: the query blocks from first_query_block
on, query head 0, then query head 1), hatched where the masked body runs; the pale region holds the
hidden pairs (past the causal limit, past Nq or Nk). Right: the key blocks that add into each query
block of dQ, in the order bwd_convert_kernel sums their partials under FA2_DETERMINISTIC=1.
Data: build/scratch/backward_blocks --format csv (the kernel's tiles, first_query_block, the walk,
the masked-body rule and the convert kernel's sum).
usage: python3 figures/backward_blocks.py DATA.csv OUT.svg"""
import sys

from matplotlib.patches import Patch, Polygon

from style import BANK_GROUP_COLOURS, plt, read_rows, save

LIGHT = {"#edc948", "#ff9da7", "#76b7b2"}
rows = read_rows(sys.argv[1])
steps = [r for r in rows if r["kind"] == "step" and r["kv_head"] == 0]
dq = [r for r in rows if r["kind"] == "dq" and r["head"] == 0]
first = rows[0]
nq, nk, group, causal, bm, bn = (first[k] for k in ("seqlen_q", "seqlen_k", "group", "causal", "block_m", "block_n"))
shift = nk - nq
q_blocks, k_blocks = -(-nq // bm), -(-nk // bn)
height, width = q_blocks * bm, k_blocks * bn


def colour(nb):
    return BANK_GROUP_COLOURS[nb % len(BANK_GROUP_COLOURS)]


def text_colour(nb):
    return "black" if colour(nb) in LIGHT else "white"


def visible_end(r):
    """The first key row r does not see (0 when it sees none)."""
    if r >= nq:
        return 0
    return max(0, min(nk, r + shift + 1)) if causal else nk


fig = plt.figure(figsize=(15, 7.2))
grid = fig.add_gridspec(1, group + 1, width_ratios=[width] * group + [width * 0.85], wspace=0.12)
axes = [fig.add_subplot(grid[0, h]) for h in range(group)]
for h, ax in enumerate(axes):
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_aspect("equal")
    for x in range(0, width + 1, bn):
        ax.axvline(x, color="#dddddd", linewidth=0.6, zorder=0)
    for y in range(0, height + 1, bm):
        ax.axhline(y, color="#dddddd", linewidth=0.6, zorder=0)
    for s in (r for r in steps if r["head"] == h):
        nb = s["key_block"]
        ax.add_patch(plt.Rectangle((s["key0"], s["row0"]), bn, bm, facecolor=colour(nb), edgecolor="white",
                                   linewidth=1.2, hatch="////" if s["masked"] else None, zorder=1))
        ax.text(s["key0"] + bn / 2, s["row0"] + bm / 2, f"step {s['step']}", ha="center", va="center", fontsize=7.5,
                color=text_colour(nb), zorder=4,
                bbox={"facecolor": colour(nb), "edgecolor": "none", "pad": 0.6} if s["masked"] else None)
    # The hidden pairs: right of each row's last visible key, and every row past Nq.
    outline = [(width, 0), (width, height), (visible_end(height - 1), height)]
    for r in range(height - 1, -1, -1):
        outline += [(visible_end(r), r + 1), (visible_end(r), r)]
    ax.add_patch(Polygon(outline, closed=True, facecolor="white", alpha=0.72, edgecolor="none", zorder=2))
    if causal:
        # the causal limit: keys below r + shift + 1 are visible to row r
        r_a, r_b = max(0, -shift - 1), min(nq, nk - shift - 1)
        ax.plot([r_a + shift + 1, r_b + shift + 1], [r_a, r_b], color="black", linewidth=1.0, zorder=3)
    ax.axhline(nq, color="black", linewidth=0.8, linestyle=(0, (3, 2)), zorder=3)
    ax.axvline(nk, color="black", linewidth=0.8, linestyle=(0, (3, 2)), zorder=3)
    ax.set_xticks([nb * bn + bn / 2 for nb in range(k_blocks)],
                  [f"block {nb}\nkeys {nb * bn}-{min(nk, nb * bn + bn) - 1}" for nb in range(k_blocks)], fontsize=7)
    ax.xaxis.tick_top()
    ax.set_yticks([qb * bm + bm / 2 for qb in range(q_blocks)],
                  [f"query block {qb}\nrows {qb * bm}-{min(nq, qb * bm + bm) - 1}" for qb in range(q_blocks)]
                  if h == 0 else [""] * q_blocks, fontsize=7)
    ax.tick_params(length=0)
    ax.set_xlabel(f"query head {h} (kv head 0's group of {group})", fontsize=9)
    if causal and shift < 0 and h == 0:
        ax.annotate(f"rows 0-{-shift - 1} see no key:\nLSE = -inf, P = 0, dQ = 0", xy=(4, -shift / 2), fontsize=7,
                    va="center", ha="left", zorder=5)

# dQ: the key blocks that add into each query block of head 0 (every head's are the same).
ax = fig.add_subplot(grid[0, group], sharey=axes[0])
ax.set_xlim(0, k_blocks + 3.2)
ax.set_ylim(height, 0)
for qb in range(q_blocks):
    sources = sorted((r for r in dq if r["query_block"] == qb and r["key_block"] >= 0), key=lambda r: r["order"])
    y = qb * bm + bm * 0.15
    if not sources:
        ax.text(0.1, qb * bm + bm / 2, "none: dQ = 0", va="center", fontsize=7.5, color="#777777")
    for r in sources:
        nb = r["key_block"]
        ax.add_patch(plt.Rectangle((r["order"], y), 1, bm * 0.7, facecolor=colour(nb), edgecolor="white", linewidth=1,
                                   hatch="////" if r["masked"] else None))
        ax.text(r["order"] + 0.5, y + bm * 0.35, str(nb), ha="center", va="center", fontsize=7.5,
                color=text_colour(nb), bbox={"facecolor": colour(nb), "edgecolor": "none", "pad": 0.4}
                if r["masked"] else None)
    if sources:
        ax.text(len(sources) + 0.15, y + bm * 0.35, f"{len(sources)} add{'s' if len(sources) > 1 else ''} per element",
                va="center", fontsize=7)
ax.axhline(nq, color="black", linewidth=0.8, linestyle=(0, (3, 2)))
ax.set_xticks([])
ax.tick_params(axis="y", labelleft=False, length=0)
for spine in ("top", "right", "bottom"):
    ax.spines[spine].set_visible(False)
ax.set_title("dQ: the key blocks that add into each query block\n(red.global.add.f32; with FA2_DETERMINISTIC=1 "
             "their own\npartials, summed left to right by bwd_convert_kernel)", fontsize=8, pad=14)

handles = [Patch(facecolor=colour(nb), label=f"block {nb}") for nb in range(k_blocks)]
handles += [Patch(facecolor="#999999", hatch="////", edgecolor="white", label="masked body"),
            Patch(facecolor="#e8e8e8", label="hidden pairs (P = 0)")]
fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
           bbox_to_anchor=(0.5, 0.0))
fig.suptitle(f"step 14's backward at B1 Hq{group} Hkv1 Nq{nq} Nk{nk}{' causal' if causal else ''} (row i sees keys "
             f"j <= i {'-' if shift < 0 else '+'} {abs(shift)}): one block of fa2_bwd_kernel per column of {bn} keys, "
             f"dK and dV in its registers;\nit walks the query blocks of {bm} rows from first_query_block on, query "
             "head 0 then 1, and every step adds its dS K into dQ\ndata: build/scratch/backward_blocks --format csv (the "
             "tiles, first_query_block, the walk and bwd_convert_kernel of steps/14_backward/kernel.cu)", fontsize=10,
             y=1.08)
save(fig, sys.argv[2])
