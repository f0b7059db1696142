#!/usr/bin/env python3
"""python/fa2.py against torch SDPA: each step given (by id) on torch tensors of several
layouts, GQA, bottom-right causal with seqlen_q != seqlen_k, LSE, a non-default stream, and
a ValueError carrying the step's own reason for what it refuses. One PASS/FAIL line each.
Step 00 runs on CPU tensors, the others on the GPU. The backward through torch.autograd:
dQ, dK, dV of a random loss against SDPA's math backend in fp64 where the step has one (00, 14),
and where it has none (every GPU step but 14), a ValueError from .backward() with its reason.
usage: python3 tests/test_torch.py STEP_ID...   (after make all; needs torch)"""
import contextlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import fa2  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel  # torch >= 2.3

    def math_backend():
        return sdpa_kernel(SDPBackend.MATH)
except ImportError:
    math_backend = contextlib.nullcontext

TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # rel L2, as the harness (common/check.c)
# The backward's gradients, rel L2 per tensor against SDPA's math backend in fp64 on the same
# 16-bit inputs (the exact gradient). The step rounds P and dS to the dtype before their
# products and dQ, dK, dV on output, each a relative error of at most u per element (unit
# roundoff: 2^-11 fp16, 2^-8 bf16), random in sign: about 1-2 u of rel L2, bounded by 8 u
# against an fp64 backward given the step's own O in tests/test_backward.c. Against the exact
# gradient one more error counts: D = rowsum(dO * O) is taken from O in the dtype, as FA2
# takes it, which costs ~0.1 u on these N(0, 1) inputs at the default scale (no row's weight
# sits on one key, where dP - D would cancel and O's rounding would dominate: the C test
# covers those peaky rows against the step's own O). So 8 u + 2 u: fp16 4.9e-3, bf16 3.9e-2,
# while a wrong row, head, tile, scale or GQA sum moves a tensor by 0.1 or more.
UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
GRAD_TOLERANCE = {t: 10 * u for t, u in UNIT.items()}
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


def reference_grads(q, k, v, w, causal, scale):
    """dQ, dK, dV [B, H, N, d] of sum(O * w) by SDPA's math backend in fp64 from the 16-bit
    [B, N, H, d] q, k, v and w. K and V are repeated over each GQA group for SDPA, and the
    gradient of the repeated tensors summed back over the group. Causal is bottom-right, by an
    explicit mask (SDPA's is_causal is top-left); a query row that sees no key is left out
    (fa2.h: it adds nothing to dK, dV, and its dQ is 0, checked apart), so dQ has Nq - Nk
    fewer rows where Nq > Nk."""
    nq, nk, group = q.shape[1], k.shape[1], q.shape[2] // k.shape[2]
    first = max(nq - nk, 0) if causal else 0
    q64 = q.detach()[:, first:].double().transpose(1, 2).contiguous().requires_grad_()
    k64, v64 = (t.detach().double().transpose(1, 2).repeat_interleave(group, dim=1).requires_grad_() for t in (k, v))
    mask = None
    if causal:
        keys, rows = torch.arange(nk, device=q.device), torch.arange(first, nq, device=q.device)
        mask = keys[None, :] <= rows[:, None] + nk - nq  # True: the row sees the key
    with math_backend():
        o = F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask, scale=scale)
    (o * w[:, first:].double().transpose(1, 2)).sum().backward()
    fold = lambda g: g.unflatten(1, (g.shape[1] // group, group)).sum(2)  # noqa: E731
    return q64.grad, fold(k64.grad), fold(v64.grad)


def grad_case(step, name, device, batch, hq, hkv, nq, nk, d, causal, dtype, layout="bnhd", scale=None, backward_step=None):
    """The gradients of sum(O * w), w random, through fa2.attention and .backward(); a step
    without a backward must raise ValueError from .backward() with its own one-line reason."""
    s = fa2.step_library(step if backward_step is None else backward_step)
    gen = torch.Generator(device=device).manual_seed(1000 + nq * 7 + nk)
    shapes = ((nq, hq), (nk, hkv), (nk, hkv))
    if layout == "bhnd":  # leaves in SDPA's layout, passed as [B, N, H, d] views: strided grads
        leaves = [torch.randn(batch, h, n, d, generator=gen, device=device).to(dtype).requires_grad_() for n, h in shapes]
        q, k, v = (t.transpose(1, 2) for t in leaves)
    else:
        leaves = [torch.randn(batch, n, h, d, generator=gen, device=device).to(dtype).requires_grad_() for n, h in shapes]
        q, k, v = leaves
    w = torch.randn(batch, nq, hq, d, generator=gen, device=device).to(dtype)
    scale = d ** -0.5 if scale is None else scale
    label = (f"{name} backward{'' if backward_step is None else ' by step ' + s.name} B{batch} H{hq}/{hkv} "
             f"Nq{nq} Nk{nk} d{d} {'causal' if causal else 'non-causal'} {dtype} {layout}"
             + ("" if scale == d ** -0.5 else f" scale {scale}"))
    o, lse = fa2.attention(q, k, v, causal=causal, scale=scale, step=step, return_lse=True, backward_step=backward_step)
    o_plain, lse_plain = fa2.attention(q.detach(), k.detach(), v.detach(), causal=causal, scale=scale, step=step,
                                       return_lse=True)
    same = torch.equal(o, o_plain) and torch.equal(lse.nan_to_num(), lse_plain.nan_to_num())
    report(o.requires_grad and not lse.requires_grad and o_plain.grad_fn is None and same,
           f"{label}: O differentiable, LSE not, both as without grad",
           f"O requires grad {o.requires_grad}, LSE {lse.requires_grad}, same as without grad {same}")
    try:
        (o * w).sum().backward()
    except ValueError as e:
        msg = str(e)
        report(s.runs_on_gpu and "forward alone" in msg and s.name in msg and "\n" not in msg,
               f"{label}: raises ValueError with the step's reason: {msg}")
        return
    if device == "cuda":
        torch.cuda.synchronize()
    grads = [t.grad if layout == "bhnd" else t.grad.transpose(1, 2) for t in leaves]  # [B, H, N, d]
    want = reference_grads(q, k, v, w, causal, scale)
    first = max(nq - nk, 0) if causal else 0
    details, ok = [], all(g is not None and g.dtype == dtype for g in grads)
    if ok:
        for tname, got, ref in zip(("dQ", "dK", "dV"), grads, want):
            got = got[:, :, first:] if tname == "dQ" else got
            err = rel_l2(got, ref)
            finite = bool(torch.isfinite(got).all())
            ok = ok and finite and err <= GRAD_TOLERANCE[dtype]
            details.append(f"{tname} {err:.2e}" + ("" if finite else " (not finite)"))
        if first:  # rows that see no key: dQ exactly 0
            zero = bool((grads[0][:, :, :first] == 0).all())
            ok = ok and zero
            details.append(f"dQ of the {first} rows with no key {'0' if zero else 'NOT 0'}")
    else:
        details.append("a gradient is missing or not in the dtype")
    print(f"# {label}: rel L2 {', '.join(details)} (allowed {GRAD_TOLERANCE[dtype]:.1e})", flush=True)
    report(ok, f"{label}: dQ, dK, dV against SDPA math in fp64", ", ".join(details))


def backward_cases(step, name, device):
    f16, b16 = torch.float16, torch.bfloat16
    grad_case(step, name, device, 2, 4, 4, 150, 150, 64, False, f16)            # tails of the 64-wide tiles
    grad_case(step, name, device, 1, 8, 2, 100, 230, 64, True, b16)             # GQA 4:1, causal bottom-right, Nq < Nk
    grad_case(step, name, device, 1, 4, 2, 200, 90, 64, True, f16, "bhnd")      # GQA, Nq > Nk: rows that see no key
    grad_case(step, name, device, 2, 2, 2, 129, 129, 64, False, b16, "bhnd", scale=0.2)
    if device == "cpu":
        # dO of any strides: o.sum() hands the backward expanded ones (strides 0), made dense
        q, k, v = (torch.randn(1, 33, 2, 64).half().requires_grad_() for _ in range(3))
        fa2.attention(q, k, v, causal=True, step=step).sum().backward()
        expanded = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        o = fa2.attention(q, k, v, causal=True, step=step)
        (o * torch.ones_like(o)).sum().backward()
        report(all(torch.equal(a, t.grad) for a, t in zip(expanded, (q, k, v))),
               f"{name} backward of o.sum() (an expanded dO) as of a dense dO of ones")
        # the CPU step's own tensors, the backward asked of a step that has none: the library
        # still answers, with its own reason, before anything looks at the device
        if os.path.exists(os.path.join(ROOT, "build", "step07", "libfa2.so")):
            grad_case(step, name, device, 1, 2, 1, 40, 40, 64, True, f16, backward_step="07")
        else:
            print(f"SKIP {name} backward by step 07: build/step07/libfa2.so is not built (make all)", flush=True)
    # without grad mode, the plain forward: no autograd node, however q, k, v require grad
    q = torch.randn(1, 16, 2, 64, device=device).half().requires_grad_()
    with torch.no_grad():
        o = fa2.attention(q, q, q, step=step)
    report(o.grad_fn is None and not o.requires_grad, f"{name} under torch.no_grad(): the plain forward, no grad_fn")


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
        backward_cases(step, name, device)
        # SDPA itself, where the shapes allow (equal seqlens: is_causal is top-left in torch)
        if device == "cuda":
            q, k, v = (torch.randn(2, 8, 512, 128, device=device, dtype=f16) for _ in range(3))
            o = fa2.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True, step=step)
            err = rel_l2(o.transpose(1, 2), F.scaled_dot_product_attention(q, k, v, is_causal=True))
            report(err <= 2 * TOLERANCE[f16], f"{name} agrees with torch SDPA (default backend): rel L2 {err:.2e}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
