#!/usr/bin/env python3
"""python/fa2.py against torch SDPA: each step given (by id) on torch tensors of several
layouts, GQA, bottom-right causal with seqlen_q != seqlen_k, LSE, a non-default stream, and
a ValueError carrying the step's own reason for what it refuses. One PASS/FAIL line each.
Step 00 runs on CPU tensors, the others on the GPU.
usage: python3 tests/test_torch.py STEP_ID...   (after make all; needs torch)"""
import contextlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import fa2  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # rel L2, as the harness (common/check.c)
failures = 0


def report(ok, name, detail=""):
    global failures
    failures += not ok
    print(("PASS " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail), flush=True)


def reference(q, k, v, causal, scale):
    """fp32 O and LSE from [B, N, H, d] tensors (bottom-right causal), via the math of SDPA; a row
    that sees no key gets O = 0 and LSE = -inf (fa2.h), where softmax alone would give NaN."""
    qt, kt, vt = (t.transpose(1, 2).float() for t in (q, k, v))
    kt = kt.repeat_interleave(qt.shape[1] // kt.shape[1], dim=1)
    vt = vt.repeat_interleave(qt.shape[1] // vt.shape[1], dim=1)
    s = (qt @ kt.transpose(-1, -2)) * scale
    if causal:
        nq, nk = q.shape[1], k.shape[1]
        keys = torch.arange(nk, device=q.device)
        rows = torch.arange(nq, device=q.device)
        s = s.masked_fill(keys[None, :] > rows[:, None] + nk - nq, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (p @ vt).transpose(1, 2), lse


def rel_l2(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def case(step, name, device, batch, hq, hkv, nq, nk, d, causal, dtype, layout="bnhd", scale=None, stream=None):
    gen = torch.Generator(device=device).manual_seed(nq * 7 + nk)
    if layout == "bhnd":  # torch SDPA's own layout, passed as [B, N, H, d] views
        q, k, v = (torch.randn(batch, h, n, d, generator=gen, device=device).to(dtype).transpose(1, 2)
                   for n, h in ((nq, hq), (nk, hkv), (nk, hkv)))
    else:
        q, k, v = (torch.randn(batch, n, h, d, generator=gen, device=device).to(dtype)
                   for n, h in ((nq, hq), (nk, hkv), (nk, hkv)))
    scale = d ** -0.5 if scale is None else scale
    label = f"{name} B{batch} H{hq}/{hkv} Nq{nq} Nk{nk} d{d} {'causal' if causal else 'non-causal'} {dtype} {layout}"
    if stream is not None:  # the inputs were made on the current stream: the side stream waits for them
        stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        o, lse = fa2.attention(q, k, v, causal=causal, scale=scale, step=step, return_lse=True)
    if device == "cuda":
        torch.cuda.synchronize()
    o_ref, lse_ref = reference(q, k, v, causal, scale)
    seen = torch.isfinite(lse_ref)
    err = rel_l2(o, o_ref)
    lse_err = (lse[seen] - lse_ref[seen]).abs().max().item() if seen.any() else 0.0
    if not torch.equal(lse[~seen], lse_ref[~seen]):  # rows with no key: exactly -inf
        lse_err = float("inf")
    ok = err <= TOLERANCE[dtype] and lse_err <= 1e-2 and o.shape == q.shape
    report(ok, label, f"rel L2 {err:.2e} (allowed {TOLERANCE[dtype]}), LSE error {lse_err:.2e}")


def main():
    if len(sys.argv) < 2:
        print("usage: test_torch.py STEP_ID...", file=sys.stderr)
        return 2
    for step in sys.argv[1:]:
        s = fa2.step_library(step)
        device = "cuda" if s.runs_on_gpu else "cpu"
        name = f"{s.name} from torch:"
        f16, b16 = torch.float16, torch.bfloat16
        case(step, name, device, 2, 4, 4, 300, 300, 64, False, f16)
        case(step, name, device, 2, 4, 4, 257, 257, 128, True, b16, layout="bhnd")
        case(step, name, device, 1, 8, 2, 200, 300, 128, True, b16)        # GQA, causal bottom-right, Nq < Nk
        case(step, name, device, 2, 6, 3, 130, 64, 64, True, f16)         # rows that see no key
        case(step, name, device, 1, 2, 1, 100, 100, 64, False, f16, scale=0.3)
        if device == "cuda":
            case(step, name + " on a non-default stream", device, 2, 4, 4, 1000, 1000, 64, True, f16,
                 stream=torch.cuda.Stream())
        q = torch.zeros(1, 16, 2, 96, dtype=torch.float16, device=device)
        try:
            fa2.attention(q, q, q, step=step)
            # a step that computes d96 must match the reference
            case(step, name + " d96", device, 1, 2, 2, 16, 16, 96, False, f16)
        except ValueError as e:
            report("head_dim 96" in str(e) and s.name in str(e), f"{name} d96 raises ValueError with the step's reason: {e}")
        try:
            fa2.attention(q, q, q, step=step, scale=float("inf"))
            report(False, f"{name} scale=inf is refused", "no exception")
        except ValueError as e:
            report("softmax_scale" in str(e), f"{name} scale=inf raises ValueError: {e}")
        # SDPA itself, where the shapes allow (equal seqlens: is_causal is top-left in torch)
        if device == "cuda":
            q, k, v = (torch.randn(2, 8, 512, 128, device=device, dtype=f16) for _ in range(3))
            o = fa2.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True, step=step)
            err = rel_l2(o.transpose(1, 2), F.scaled_dot_product_attention(q, k, v, is_causal=True))
            report(err <= 2 * TOLERANCE[f16], f"{name} agrees with torch SDPA (default backend): rel L2 {err:.2e}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
