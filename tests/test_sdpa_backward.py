#!/usr/bin/env python3
"""reference/sdpa.py's fp64 backward (reference_backward, what --backward checks torch's dQ,
dK and dV against) against torch autograd through an fp64 attention, on the CPU: GQA and MQA,
causal with Nq < Nk and Nq > Nk (rows that see no key: dQ = 0, nothing to dK, dV), and query
rows split over several chunks. One PASS or FAIL line per case; exit 1 on a failure.
Needs torch (no GPU)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))
import torch  # noqa: E402
import sdpa  # noqa: E402

CASES = [  # batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, chunk rows
    (2, 4, 2, 37, 53, 16, 1, 7),
    (1, 4, 1, 53, 37, 16, 1, 5),
    (2, 2, 2, 40, 40, 8, 0, 40),
    (1, 6, 3, 300, 300, 8, 1, 64),
]


def autograd_backward(q, k, v, do, causal):
    """dQ, dK, dV of softmax(scale Q K^T, bottom-right causal mask) V by autograd, fp64."""
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ kk.transpose(-1, -2)) * q.shape[-1] ** -0.5
    nq, nk = q.shape[2], k.shape[2]
    if causal:
        hidden = torch.arange(nk)[None, :] > torch.arange(nq)[:, None] + (nk - nq)
        s = s.masked_fill(hidden, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row that sees no key: 0
    return torch.autograd.grad(p @ vv, (q, k, v), do)


def main():
    failed = 0
    for b, h, hkv, nq, nk, d, causal, rows in CASES:
        g = torch.Generator().manual_seed(1)
        q = torch.randn(b, h, nq, d, dtype=torch.float64, generator=g)
        k = torch.randn(b, hkv, nk, d, dtype=torch.float64, generator=g)
        v = torch.randn(b, hkv, nk, d, dtype=torch.float64, generator=g)
        do = torch.randn(b, h, nq, d, dtype=torch.float64, generator=g)
        want = autograd_backward(q, k, v, do, causal)
        sdpa.REF_CHUNK_ELEMS = rows * nk
        got = sdpa.reference_backward(torch, q, k, v, do, d ** -0.5, causal)
        worst = max(((x - y).abs().max() / y.abs().max()).item() for x, y in zip(got, want))
        name = f"sdpa.py reference_backward B{b} H{h}/{hkv} Nq{nq} Nk{nk} d{d} {'causal' if causal else 'non-causal'}" \
               f" in chunks of {rows} rows against fp64 autograd: largest error {worst:.1e} of the largest entry"
        ok = worst <= 1e-12
        failed += not ok
        print(("PASS " if ok else "FAIL ") + name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
