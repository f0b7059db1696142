"""What every figure shares: a reproducible SVG (no date, a fixed hash salt) and one palette."""
import csv

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "fa2-figures"
matplotlib.rcParams["font.size"] = 9
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small files, diffs that read
import matplotlib.pyplot as plt  # noqa: E402

# 8 bank groups of 4 banks (one 16-byte chunk each): one colour per group.
BANK_GROUP_COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"]


def read_rows(path):
    """A scratch program's CSV: one dict per line, whole numbers as int, names (an operand,
    an event, a pattern) as str."""
    def value(text):
        try:
            return int(text)
        except ValueError:
            return text

    with open(path, newline="") as f:
        return [{k: value(v) for k, v in row.items()} for row in csv.DictReader(f)]


def save(fig, path):
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)


def cell_axes(ax, n_cols, n_rows):
    """Axes for a grid of cells, row 0 on top, every row and column labelled by its index."""
    ax.set_xlim(0, n_cols)
    ax.set_ylim(n_rows, 0)
    ax.set_aspect("equal")
    ax.set_xticks([c + 0.5 for c in range(n_cols)], [str(c) for c in range(n_cols)], fontsize=7)
    ax.set_yticks([r + 0.5 for r in range(n_rows)], [str(r) for r in range(n_rows)], fontsize=7)
    ax.tick_params(length=0)


def lane_bar(ax, y, start, stop, colour, text="", text_colour="white", hatch=None, edge="white", height=0.64,
             min_width=0.0):
    """One span of a time line on the lane at row y, with its label where it is wider than min_width."""
    ax.add_patch(plt.Rectangle((start, y + (1 - height) / 2), stop - start, height, facecolor=colour, edgecolor=edge,
                               linewidth=0.6, hatch=hatch, zorder=2))
    if text and stop - start > min_width:
        ax.text((start + stop) / 2, y + 0.5, text, ha="center", va="center", fontsize=7, color=text_colour, zorder=4,
                bbox={"facecolor": colour, "edgecolor": "none", "pad": 0.5} if hatch else None)


def timeline_axes(ax, lanes, end, x_margin, y_top):
    """Axes of a block's time line: one lane per row from the top, time in ns on x."""
    ax.set_xlim(0, end * x_margin)
    ax.set_ylim(len(lanes), y_top)
    ax.set_yticks([i + 0.5 for i in range(len(lanes))], lanes)
    ax.set_xlabel("time in the block (ns), from the producer's first issue")
    ax.tick_params(axis="y", length=0)
    for i in range(len(lanes) + 1):
        ax.axhline(i, color="#e6e6e6", linewidth=0.6, zorder=0)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
