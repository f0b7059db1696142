"""The benchmark shapes and the work in a shape, for the Python scripts (reference/sdpa.py
and plots/). reference/shapes.txt is the one list of shapes (the bash scripts read it through
reference/shapes.sh); visible_pairs counts what one head computes, as fa2_visible_pairs of
common/harness.h does for the harness's TFLOP/s.
"""
import os

SHAPES_TXT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference", "shapes.txt")


def read_shapes(set_name):
    """(batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, dtype) of each shape of one set
    that has no options: a shape with page=N or lens=A..B (a paged or mixed-length KV cache,
    shapes.txt's header) has no torch SDPA input and no plot."""
    with open(SHAPES_TXT) as f:
        return [tuple(int(x) for x in w[1:8]) + (w[8],) for w in (line.split() for line in f)
                if len(w) == 9 and w[0] == set_name]


def visible_pairs(seqlen_q, seqlen_k, causal):
    """Query-key pairs one head computes: row i sees keys j <= i + seqlen_k - seqlen_q when causal."""
    if not causal:
        return seqlen_q * seqlen_k
    shift = seqlen_k - seqlen_q
    return seqlen_q * (shift + 1) + seqlen_q * (seqlen_q - 1) // 2 if shift >= 0 else seqlen_k * (seqlen_k + 1) // 2
