#!/usr/bin/env python3
"""Bar chart of the step-by-step progression: TFLOP/s of every step at one shape (the
README's prefill shape, the summary set of reference/shapes.txt, unless --shape), on a log
scale so that the CPU step and the first GPU steps show next to the fast ones, with the peers
(cuBLAS unfused, torch SDPA) and the measured mma.sync ceiling (and on Hopper the wgmma
ceiling) as labelled lines.

usage: python3 plots/progression.py [results/.../compare-<gpu>-<date>.csv] [--out PNG]
"""
import math
import textwrap

import matplotlib

matplotlib.use("Agg")  # files only: no display on a GPU server
import matplotlib.pyplot as plt  # noqa: E402

import csvdata  # noqa: E402


def parse_args():
    ap = csvdata.base_parser(__doc__, "plots/progression.png")
    ap.add_argument("--shape", help="batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal (default: the README's prefill shape)")
    a = ap.parse_args()
    if a.shape is None:
        a.shape = csvdata.headline_shape(a.dtype)
    else:
        try:
            b, h, hkv, nq, nk, d, causal = (int(x) for x in a.shape.split(","))
        except ValueError:
            ap.error(f"--shape '{a.shape}' is not allowed "
                     "(allowed: seven integers batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal)")
        a.shape = (a.dtype, b, h, hkv, nq, nk, d, causal)
    # with no CSV given, the newest committed one with two or more GPU steps' rows at the shape
    # (a progression: a run of one step, as a STEPS=12 comparison against FA4, is not one)
    a.csv = a.csv or csvdata.newest_committed_csv(
        lambda path: len({r["step"] for r in csvdata.read_rows(path) if csvdata.shape_of(r) == a.shape
                          and csvdata.is_step(r["step"]) and r["device"] != "CPU"}) >= 2)
    return a


def spread_labels(values, min_ratio):
    """y positions (log scale) for labels of these values, pushed apart to a factor min_ratio, in value order."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ys = [0.0] * len(values)
    last = None
    for i in order:
        ys[i] = values[i] if last is None else max(values[i], last * min_ratio)
        last = ys[i]
    return ys


def main():
    a = parse_args()
    rows = csvdata.read_rows(a.csv)
    gpu = csvdata.gpu_of(rows, a.device)
    rows = csvdata.on_gpu(rows, gpu)
    at_shape = {step: r for (step, shape), r in csvdata.by_step_and_shape(rows).items() if shape == a.shape}
    steps = sorted(s for s in at_shape if csvdata.is_step(s))
    peers = [p for p in csvdata.PEERS if p in at_shape] + sorted(
        s for s in at_shape if not csvdata.is_step(s) and s not in csvdata.PEERS)
    if not steps and not peers:
        raise SystemExit(f"error: {a.csv} has no rows at {a.dtype} shape {a.shape[1:]}")
    ceiling_path = a.ceiling or csvdata.default_ceiling_path(a.csv)
    ceiling = csvdata.ceiling_tflops(ceiling_path, gpu, a.dtype)
    wgmma_ceiling = csvdata.ceiling_tflops(ceiling_path, gpu, a.dtype, "wgmma_m64n256k16")

    fig, ax = plt.subplots(figsize=(13, 6.5))
    values = [at_shape[s]["tflops"] for s in steps]
    colors = ["tab:gray" if at_shape[s]["device"] == "CPU" else "tab:blue" for s in steps]
    bars = ax.bar(range(len(steps)), values, color=colors, width=0.65, zorder=2)
    for bar, s, v in zip(bars, steps, values):
        failed = at_shape[s]["status"] == "FAIL"
        if failed:
            bar.set_hatch("//")
            bar.set_edgecolor("tab:red")
        ax.annotate(f"{v:.3g}" + ("\nFAIL" if failed else ""), (bar.get_x() + bar.get_width() / 2, v),
                    xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=10, zorder=3)
    ax.set_xticks(range(len(steps)))
    # number, then the name wrapped to the bar's width: 06_staged_epilogue -> 06 / staged / epilogue
    ax.set_xticklabels([s[:2] + "\n" + textwrap.fill(s[3:].replace("_", " "), 12) for s in steps], fontsize=9)
    ax.set_xlim(-0.6, max(len(steps), 1) - 0.4)

    lines = [(name, at_shape[p]["tflops"], color, style)
             for p in peers for name, color, style in [csvdata.peer_style(p)]]
    if ceiling:
        lines.append(("mma.sync ceiling", ceiling, "black", ":"))
    if wgmma_ceiling:
        lines.append(("wgmma ceiling", wgmma_ceiling, "black", "-."))
    all_values = values + [v for _, v, _, _ in lines]
    bottom, top = min(all_values) / 3, max(all_values) * 3
    ax.set_yscale("log")
    ax.set_ylim(bottom, top)
    for _, v, color, style in lines:
        ax.axhline(v, color=color, linestyle=style, linewidth=1.4, zorder=1)
    # Labels in the right margin at each line's height, pushed apart where lines are close.
    gap = math.exp(math.log(top / bottom) * 0.045)
    for (name, v, color, _), y in zip(lines, spread_labels([v for _, v, _, _ in lines], gap)):
        ax.annotate(f"{name}  {v:.3g}", xy=(1.0, v), xytext=(1.01, y), xycoords=("axes fraction", "data"),
                    textcoords=("axes fraction", "data"), va="center", fontsize=10, color=color,
                    arrowprops=dict(arrowstyle="-", color=color, linewidth=0.8) if y / v > 1.01 else None)

    dtype, b, h, hkv, nq, nk, d, causal = a.shape
    gqa = f" (KV {hkv})" if hkv != h else ""
    seqlen = f"N={nq}" if nq == nk else f"Nq={nq}, Nk={nk}"
    ax.set_ylabel("TFLOP/s, log scale (4·B·H·visible pairs·d / time)", fontsize=11)
    ax.set_title(f"FlashAttention-2 forward, step by step: {dtype}, B={b}, H={h}{gqa}, {seqlen}, d={d}, "
                 f"{'causal' if causal else 'non-causal'}\n{gpu}, {csvdata.date_range(rows)}; step 00 on the host CPU\n"
                 f"make compare, median of rounds: {csvdata.shown(a.csv)}",
                 fontsize=12)
    ax.grid(axis="y", which="both", alpha=0.25, zorder=0)
    ax.spines[["top", "right"]].set_visible(False)
    fig.savefig(a.out, dpi=130, bbox_inches="tight")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
