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
