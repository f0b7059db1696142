#!/usr/bin/env python3
"""Ring attention's arithmetic on one device: what context parallelism asks of a step.

The sequence is cut into R chunks, as R GPUs would hold it. The query chunk r meets every K/V
chunk in turn (causal: the chunks before it whole, its own under the mask, none after), one
call of the step each, and the partial outputs are merged by their log-sum-exps:
    lse_r = log sum_c exp(lse_rc),   O_r = sum_c exp(lse_rc - lse_r) O_rc.
The backward runs the step's backward once per (query chunk, K/V chunk) pair with the MERGED
O and LSE of the query chunk (its P = exp(S - lse_r) is then the whole row's softmax), sums
dQ over the K/V chunks and dK, dV over the query chunks. Each is checked against an fp64
reference of the whole sequence, and the merged O against one call over the whole sequence;
a merge that ignores the LSE weights is run too and must fail the same check (so the check can
fail). One PASS/FAIL line per case.
usage: python3 tests/test_ring.py --cpu          step 00 (forward and backward on the CPU)
       python3 tests/test_ring.py --gpu [F:B ...] forward step F with backward step B (default:
                                                  07:14, and the SDPA provider's pair where it differs)"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import test_torch  # noqa: E402  (its tolerances and PASS/FAIL lines)
from test_torch import GRAD_TOLERANCE, TOLERANCE, fa2, report, torch  # noqa: E402

# O's relative L2 error against fp64 and the gradients' are test_torch.py's (the harness's
# for O; 10 units of the dtype's rounding per gradient, D taken from the rounded O); the LSE
# is fp32, its error in natural-log units.
LSE_TOL = 1e-3
DTYPE_NAME = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


def bounds(n, parts):
    """[start, end) of `parts` chunks of n rows, the first ones a row longer where n does not divide."""
    cuts = [n * i // parts for i in range(parts + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def pairs_of(r, causal, n_chunks):
    """The K/V chunks query chunk r meets, and whether each is under the mask."""
    return [(c, causal and c == r) for c in range(n_chunks) if not causal or c <= r]


def merge(parts, weighted=True):
    """[(O_c [B, N, H, d], lse_c [B, H, N])] -> merged O (fp32) and lse. weighted=False: the
    plain mean of the O_c (the wrong merge the test must catch), lse as the right one."""
    lses = torch.stack([lse for _, lse in parts])  # [C, B, H, N]
    lse = torch.logsumexp(lses, dim=0)
    if not weighted:
        return sum(o.float() for o, _ in parts) / len(parts), lse
    w = torch.exp(lses - lse)  # [C, B, H, N]: the share of each chunk's softmax mass in the row
    return sum(o.float() * w[i].permute(0, 2, 1).unsqueeze(-1) for i, (o, _) in enumerate(parts)), lse


def ring_forward(q, k, v, causal, fwd_step, n_chunks, weighted=True):
    qb, kb = bounds(q.shape[1], n_chunks), bounds(k.shape[1], n_chunks)
    outs, lses = [], []
    for r, (q0, q1) in enumerate(qb):
        parts = [fa2.attention(q[:, q0:q1], k[:, kb[c][0]:kb[c][1]], v[:, kb[c][0]:kb[c][1]], causal=masked,
                               step=fwd_step, return_lse=True)
                 for c, masked in pairs_of(r, causal, n_chunks)]
        o, lse = merge(parts, weighted)
        outs.append(o.to(q.dtype))
        lses.append(lse.contiguous())
    return torch.cat(outs, dim=1), torch.cat(lses, dim=2)


def ring_backward(q, k, v, out, lse, dout, causal, bwd_step, n_chunks):
    """dQ, dK, dV (fp32) from the step's backward over every (query chunk, K/V chunk) pair."""
    qb, kb = bounds(q.shape[1], n_chunks), bounds(k.shape[1], n_chunks)
    dq, dk, dv = (torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in (q, k, v))
    path = fa2._path(bwd_step)
    for r, (q0, q1) in enumerate(qb):
        q_r, o_r, do_r = (t[:, q0:q1].contiguous() for t in (q, out, dout))
        lse_r = lse[:, :, q0:q1].contiguous()
        for c, masked in pairs_of(r, causal, n_chunks):
            k0, k1 = kb[c]
            g = torch.ops.fa2.bwd(do_r, q_r, k[:, k0:k1].contiguous(), v[:, k0:k1].contiguous(), o_r, lse_r,
                                  masked, None, path)
            dq[:, q0:q1] += g[0].float()
            dk[:, k0:k1] += g[1].float()
            dv[:, k0:k1] += g[2].float()
    return dq, dk, dv


def reference(q, k, v, dout, causal):
    """fp64 O, LSE, dQ, dK, dV of the whole sequence (bottom-right causal, GQA)."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    group = q.shape[2] // k.shape[2]
    qh, kh, vh = q64.transpose(1, 2), k64.repeat_interleave(group, 2).transpose(1, 2), v64.repeat_interleave(group, 2).transpose(1, 2)
    s = qh @ kh.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        nq, nk = q.shape[1], k.shape[1]
        hidden = torch.arange(nk, device=q.device)[None, :] > torch.arange(nq, device=q.device)[:, None] + (nk - nq)
        s = s.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = (torch.softmax(s, dim=-1) @ vh).transpose(1, 2)
    o.backward(dout.double())
    return o.detach(), lse.detach(), q64.grad, k64.grad, v64.grad


def case(device, fwd_step, bwd_step, b, h, hkv, nq, nk, d, causal, dtype, n_chunks):
    name = (f"ring of {n_chunks} chunks, steps {fwd_step}/{bwd_step}, {DTYPE_NAME[dtype]} B{b} H{h}/{hkv} Nq{nq} Nk{nk} "
            f"d{d} {'causal' if causal else 'non-causal'}")
    gen = torch.Generator(device=device).manual_seed(nq * 31 + d)
    q, k, v, dout = (torch.randn(b, n, heads, d, generator=gen, device=device).to(dtype)
                     for n, heads in ((nq, h), (nk, hkv), (nk, hkv), (nq, h)))
    o_ref, lse_ref, dq_ref, dk_ref, dv_ref = reference(q, k, v, dout, causal)
    o_full = fa2.attention(q, k, v, causal=causal, step=fwd_step)
    o, lse = ring_forward(q, k, v, causal, fwd_step, n_chunks)
    errs = {"O": rel(o, o_ref), "O vs one call": rel(o, o_full), "one call's O": rel(o_full, o_ref)}
    lse_err = (lse.double() - lse_ref).abs().max().item()
    ok = all(e <= TOLERANCE[dtype] for e in errs.values()) and lse_err <= LSE_TOL
    report(ok, name + ": forward merged by LSE", ", ".join(f"{key} rel L2 {e:.1e}" for key, e in errs.items())
           + f", LSE {lse_err:.1e} (allowed {TOLERANCE[dtype]:.1e}, LSE {LSE_TOL:.0e})")
    o_mean, _ = ring_forward(q, k, v, causal, fwd_step, n_chunks, weighted=False)
    report(rel(o_mean, o_ref) > TOLERANCE[dtype], name + ": a merge without the LSE weights fails the same check",
           f"rel L2 {rel(o_mean, o_ref):.1e}")
    grads = ring_backward(q, k, v, o, lse, dout, causal, bwd_step, n_chunks)
    gerr = [rel(g, r) for g, r in zip(grads, (dq_ref, dk_ref, dv_ref))]
    report(all(e <= GRAD_TOLERANCE[dtype] for e in gerr), name + ": backward with the merged O and LSE, summed",
           "dQ {:.1e} dK {:.1e} dV {:.1e} (allowed {:.1e})".format(*gerr, GRAD_TOLERANCE[dtype]))


def main(argv):
    if len(argv) < 2 or argv[1] not in ("--cpu", "--gpu"):
        print(__doc__.split("usage: ")[1], file=sys.stderr)
        return 2
    if argv[1] == "--cpu":
        device, step_pairs = "cpu", [("00", "00")]
        shapes = [(1, 2, 1, 96, 96, 64, True, torch.float16, 3), (1, 2, 2, 64, 80, 64, False, torch.bfloat16, 2)]
    else:
        if not torch.cuda.is_available():
            print("SKIP ring attention on the GPU: torch sees no CUDA GPU")
            return 0
        device = "cuda"
        step_pairs = [tuple(a.split(":")) for a in argv[2:]] or sorted({("07", "14"), fa2.default_sdpa_steps()})
        shapes = [(2, 8, 2, 1000, 1000, 128, True, torch.bfloat16, 4), (2, 4, 4, 1024, 1024, 64, False, torch.float16, 4),
                  (1, 8, 1, 333, 700, 128, False, torch.float16, 3), (1, 4, 4, 2048, 2048, 64, True, torch.float16, 8)]
    torch.backends.cuda.matmul.allow_tf32 = False
    for fwd_step, bwd_step in step_pairs:
        for shape in shapes:
            b, h, hkv, nq, nk, d, causal, dtype, n_chunks = shape
            try:
                case(device, fwd_step, bwd_step, b, h, hkv, nq, nk, d, causal, dtype, n_chunks)
            except Exception as e:  # noqa: BLE001 -- a FAIL line, and the next case runs
                report(False, f"ring, steps {fwd_step}/{bwd_step}, shape {shape}", f"{type(e).__name__}: {str(e).splitlines()[0]}")
    return 1 if test_torch.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
