"""Reading the CSVs `make compare` writes (reference/compare.sh), for the plot scripts.

Rows have the harness's columns (common/main.c); the ceiling CSV of the same run has
probe,device,date,dtype,tflops. A contender measured in several rounds at a shape has one
row per round: the plots take the median of the rounds' times, as the printed tables do.
"""
import argparse
import csv
import glob
import math
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
from shapes import read_shapes, visible_pairs  # noqa: E402

INT_FIELDS = ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal")


def read_rows(path):
    """Forward rows with a finite time at a dense shape (not a paged or mixed-length KV cache's
    rows: the page_size and seqlens_k columns, absent from older CSVs), TFLOP/s recomputed
    from it: the CSV's column has 2 decimals, and step 00 on the CPU is below 0.01 TFLOP/s.
    Every row named *_backward is left out: the backward's (make compare SHAPES=backward:
    torch_sdpa_<backend>_backward, a step's <name>_backward) and the forward rows of the steps
    named NN_..._backward (14, 15), which reference/table.awk leaves out too: such a step
    teaches the backward, and its forward is another step's."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("page_size") not in (None, "", "0") or r.get("seqlens_k"):
                continue  # a paged or mixed-length KV cache (make compare SHAPES=decode): no plot's
            for k in INT_FIELDS:
                r[k] = int(r[k])
            if r["step"].endswith("_backward"):
                continue  # a backward row, or the forward row of a step that teaches the backward
            try:
                ms = float(r["ms_median"])
            except ValueError:
                continue
            if r["status"] == "UNSUPPORTED" or not math.isfinite(ms) or ms <= 0:
                continue
            pairs = visible_pairs(r["seqlen_q"], r["seqlen_k"], r["causal"])
            r["ms"] = ms
            r["tflops"] = 4.0 * r["batch"] * r["heads_q"] * pairs * r["head_dim"] / (ms * 1e-3) / 1e12
            rows.append(r)
    return rows


def headline_shape(dtype=None):
    """The README's prefill shape, the summary set's first in reference/shapes.txt, as
    (dtype, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal)."""
    shapes = read_shapes("summary")
    if not shapes:
        raise SystemExit("error: reference/shapes.txt has no summary shape")
    return (dtype or shapes[0][7],) + shapes[0][:7]


def shape_of(r):
    return tuple(r[k] for k in ("dtype",) + INT_FIELDS)


def by_step_and_shape(rows):
    """{(step, shape): row} with the row's time the median over its rounds (and FAIL if any round failed)."""
    groups = {}
    for r in rows:
        groups.setdefault((r["step"], shape_of(r)), []).append(r)
    merged = {}
    for key, rs in groups.items():
        r = dict(rs[-1])
        r["ms"] = statistics.median(x["ms"] for x in rs)
        r["tflops"] = statistics.median(x["tflops"] for x in rs)
        r["status"] = "FAIL" if any(x["status"] == "FAIL" for x in rs) else r["status"]
        merged[key] = r
    return merged


def results_csvs_newest_first():
    """results/**/compare-*.csv, newest first: in the order git's commits added them, or, in a
    tree without git's history (a release's archive, a copy), by the date in the file's name (and
    -N for a later run of the day), then the name."""
    try:
        names = subprocess.run(["git", "-C", ROOT, "log", "--diff-filter=A", "--name-only", "--format=", "--",
                                "results"], capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        names = []
    names = [n for n in names if os.path.basename(n).startswith("compare-") and n.endswith(".csv")]
    if names:
        return [os.path.join(ROOT, n) for n in names]

    def order(path):
        dated = re.search(r"(\d{4}-\d\d-\d\d)(?:-(\d+))?\.csv$", path)
        return (dated.group(1), int(dated.group(2) or 1), os.path.basename(path)) if dated else ("", 0, path)
    return sorted(glob.glob(os.path.join(ROOT, "results", "**", "compare-*.csv"), recursive=True), key=order, reverse=True)


def newest_committed_csv(holds=lambda path: True):
    """The newest committed compare CSV (results_csvs_newest_first) for which holds(path) is true,
    for `make plots` with no CSV. A CSV whose rows holds cannot use (it exits: no GPU rows, as a
    backward run's once its rows are left out) does not hold."""
    for path in results_csvs_newest_first():
        if os.path.exists(path):
            try:
                if holds(path):
                    return path
            except SystemExit:
                continue
    raise SystemExit("error: no committed results/**/compare-*.csv with the rows this plot needs: "
                     "give a CSV, or run make compare")


def gpu_of(rows, wanted=None):
    """The GPU the rows were measured on (step 00's rows say CPU): `wanted`, else the last row's."""
    gpus = [r["device"] for r in rows if r["device"] != "CPU"]
    if wanted:
        if wanted not in gpus:
            raise SystemExit(f"error: no rows from device '{wanted}' (devices: {', '.join(sorted(set(gpus)))})")
        return wanted
    if not gpus:
        raise SystemExit("error: no GPU rows in the CSV")
    return gpus[-1]


def on_gpu(rows, gpu):
    """The rows of one GPU, with step 00's CPU rows of the same run (the CSV holds one machine's run)."""
    return [r for r in rows if r["device"] in (gpu, "CPU")]


def shown(path):
    """A CSV's path as a plot names it: relative to the repository."""
    return os.path.relpath(path, ROOT)


def date_range(rows):
    dates = sorted({r["date"] for r in rows})
    return dates[0] if len(dates) == 1 else f"{dates[0]} .. {dates[-1]}"


def default_ceiling_path(compare_path):
    """results/compare-<gpu>-<date>.csv -> results/ceiling-<gpu>-<date>.csv, the probe of the same run."""
    head, name = os.path.split(compare_path)
    return os.path.join(head, name.replace("compare-", "ceiling-", 1)) if name.startswith("compare-") else None


def ceiling_tflops(path, gpu, dtype, probe="mma_sync_m16n8k16"):
    """The TFLOP/s of one ceiling probe (mma_sync_m16n8k16, or wgmma_m64n256k16 on Hopper)
    of the GPU for dtype (last row wins), or None."""
    if not path or not os.path.exists(path):
        return None
    value = None
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["probe"] == probe and r["device"] == gpu and r["dtype"] == dtype:
                value = float(r["tflops"])
    return value


# The peers, in table order, with their label and line style in the plots.
PEERS = {
    "cublas_unfused": ("cuBLAS unfused", "tab:gray", "--"),
    "torch_sdpa_flash": ("torch SDPA flash (FA2)", "tab:red", "-"),
    "torch_sdpa_cudnn": ("torch SDPA cuDNN", "tab:purple", "-."),
    "torch_sdpa_efficient": ("torch SDPA mem-efficient", "tab:brown", ":"),
    "torch_sdpa_math": ("torch SDPA math", "tab:olive", ":"),
    "torch_sdpa_default": ("torch SDPA default", "tab:orange", "--"),
}


def is_step(name):
    return len(name) > 3 and name[:2].isdigit() and name[2] == "_"


def peer_style(name):
    """(label, color, line style) of a peer; a row of another name (a --ctypes run) gets its own name."""
    return PEERS.get(name, (name, "black", "-"))


def base_parser(doc, default_out):
    """The arguments every plot takes: the compare CSV, its ceiling CSV, the output, dtype and GPU."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="?", help="a compare CSV (the harness's columns; default: the newest committed one)")
    ap.add_argument("--ceiling", help="the ceiling CSV (default: the ceiling-*.csv of the same run)")
    ap.add_argument("--out", default=default_out)
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--device", help="the GPU, when the CSV holds several (default: the last row's)")
    return ap


def parse(ap, holds=lambda path, args: True):
    """The parsed arguments, with the CSV defaulted to the newest committed one for which
    holds(path, args) is true (the plot's rows are in it)."""
    a = ap.parse_args()
    a.csv = a.csv or newest_committed_csv(lambda path: holds(path, a))
    return a
