#!/usr/bin/env python3
"""TFLOP/s against sequence length, one line per step and peer, from the seqlen sweep of
`make compare SHAPES=all`: batch x seqlen fixed (16384 tokens), H=16, d=128, non-causal.
The measured mma.sync ceiling is the dotted line (on Hopper the wgmma ceiling the dash-dotted one).

usage: python3 plots/scaling.py [results/.../compare-<gpu>-<date>.csv] [--out PNG]
"""
import matplotlib

matplotlib.use("Agg")  # files only: no display on a GPU server
import matplotlib.pyplot as plt  # noqa: E402

import csvdata  # noqa: E402


def parse_args():
    ap = csvdata.base_parser(__doc__, "plots/scaling.png")
    ap.add_argument("--tokens", type=int, default=16384, help="batch x seqlen of the sweep")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    # with no CSV given, the newest committed one that holds a sweep (SHAPES=bench runs hold one point of it)
    return csvdata.parse(ap, lambda path, args: len({r["seqlen_q"] for r in sweep_rows(path, args)[0]}) > 1)


def sweep_rows(path, a):
    """The rows of the sweep on one GPU (the last row's, or --device), and that GPU."""
    rows = csvdata.read_rows(path)
    gpu = csvdata.gpu_of(rows, a.device)
    return [r for r in csvdata.on_gpu(rows, gpu)
            if r["dtype"] == a.dtype and r["heads_q"] == a.heads and r["head_dim"] == a.dim and not r["causal"]
            and r["seqlen_q"] == r["seqlen_k"] and r["batch"] * r["seqlen_q"] == a.tokens], gpu


def main():
    a = parse_args()
    rows, gpu = sweep_rows(a.csv, a)
    series = {}
    for (step, shape), r in sorted(csvdata.by_step_and_shape(rows).items(), key=lambda kv: kv[1]["seqlen_q"]):
        series.setdefault(step, []).append((r["seqlen_q"], r["tflops"], r["status"] == "FAIL"))
    if not series:
        raise SystemExit(f"error: {a.csv} has no sweep rows ({a.dtype}, batch x seqlen = {a.tokens}, "
                         f"H={a.heads}, d={a.dim}, non-causal): run make compare SHAPES=all")
    steps = sorted(s for s in series if csvdata.is_step(s))
    peers = [p for p in csvdata.PEERS if p in series] + sorted(
        s for s in series if s not in steps and s not in csvdata.PEERS)

    fig, ax = plt.subplots(figsize=(11, 6.5))
    step_colors = plt.get_cmap("viridis")
    for i, s in enumerate(steps):
        xs, ys, failed = zip(*series[s])
        color = step_colors(0.1 + 0.8 * i / max(len(steps) - 1, 1))
        ax.plot(xs, ys, "o-", color=color, linewidth=2, label=s + (" (FAIL at some N)" if any(failed) else ""))
    for s in peers:
        xs, ys, failed = zip(*series[s])
        name, color, style = csvdata.peer_style(s)
        ax.plot(xs, ys, marker="s", linestyle=style, color=color, linewidth=1.5,
                label=name + (" (FAIL at some N)" if any(failed) else ""))
    ceiling_path = a.ceiling or csvdata.default_ceiling_path(a.csv)
    ceiling = csvdata.ceiling_tflops(ceiling_path, gpu, a.dtype)
    if ceiling:
        ax.axhline(ceiling, color="black", linestyle=":", linewidth=1.5, label=f"mma.sync ceiling {ceiling:.0f}")
    wgmma_ceiling = csvdata.ceiling_tflops(ceiling_path, gpu, a.dtype, "wgmma_m64n256k16")
    if wgmma_ceiling:
        ax.axhline(wgmma_ceiling, color="black", linestyle="-.", linewidth=1.5, label=f"wgmma ceiling {wgmma_ceiling:.0f}")

    seqlens = sorted({x for pts in series.values() for x, _, _ in pts})
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqlens)
    ax.set_xticklabels([str(x) for x in seqlens])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"sequence length N (batch = {a.tokens} / N)", fontsize=11)
    ax.set_ylabel("TFLOP/s", fontsize=11)
    ax.set_title(f"TFLOP/s vs sequence length: {a.dtype}, H={a.heads}, d={a.dim}, non-causal, "
                 f"batch x N = {a.tokens}\n{gpu}, {csvdata.date_range(rows)}\nmake compare SHAPES=all, median of rounds: {csvdata.shown(a.csv)}",
                 fontsize=12)
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=10, frameon=False)
    fig.savefig(a.out, dpi=130, bbox_inches="tight")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
