#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention, every backend, timed by the harness's rules.

Writes rows in the harness's CSV format (common/main.c), so the steps, the cuBLAS
baseline and torch land in one table: step = torch_sdpa_flash (PyTorch's
FlashAttention-2), torch_sdpa_cudnn, torch_sdpa_efficient, torch_sdpa_math and
torch_sdpa_default (no backend restriction: what a user gets). With --backends fa4 it
times FlashAttention-4 too (step = fa4: `pip install flash-attn-4`, its CuTe-DSL kernels
for sm_90 and newer, compiled on their first call and kept in its on-disk cache), on the
same [B, N, H, d] storage the steps read; a contender only, nothing of it is in the steps.

With --step NN it also runs a step of this repository on the same torch tensors, through
python/fa2.py (the ctypes binding), checks it against SDPA and times it the same way.

With --backward it times each backend's backward instead (rows torch_sdpa_flash_backward
and so on, as the harness names a step's backward row): the forward runs once, outside the
timed region, on inputs that require grad; each timed launch is torch.autograd.grad of
that output, dO given, the graph retained (autograd.grad returns the gradients and
accumulates none, so nothing is zeroed between launches). dQ, dK and dV of the first
launch are checked whole against an fp64 backward. TFLOP/s count 2.5 forwards, as FA2,
FA3 and the harness count a backward.

Optional: needs torch with CUDA. Without it, one line and exit 0 (exit 3 with --require).
"""
import argparse
import contextlib
import datetime
import os
import statistics
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import fa2  # noqa: E402
from shapes import read_shapes, visible_pairs  # noqa: E402

CSV_HEADER = ("step,device,date,dtype,batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal,"
              "ms_median,ms_min,ms_max,tflops,rel_l2,max_abs,lse_err,status,key_change,page_size,seqlens_k")
BACKENDS = {  # name: (step name in the CSV, what it is)
    "flash": ("torch_sdpa_flash", "PyTorch SDPA, FLASH_ATTENTION backend (FlashAttention-2)"),
    "cudnn": ("torch_sdpa_cudnn", "PyTorch SDPA, CUDNN_ATTENTION backend (cuDNN fused attention)"),
    "efficient": ("torch_sdpa_efficient", "PyTorch SDPA, EFFICIENT_ATTENTION backend (memory-efficient attention)"),
    "math": ("torch_sdpa_math", "PyTorch SDPA, MATH backend (unfused PyTorch ops)"),
    "default": ("torch_sdpa_default", "PyTorch SDPA, no backend restriction (what a user gets)"),
    "fa4": ("fa4", "FlashAttention-4 (pip flash-attn-4: flash_attn.cute.flash_attn_func)"),
}
# rel_l2 and max_abs of the harness (common/check.c, which says why): PASS means the same thing.
TOLERANCE = {"fp16": (2e-3, 1e-2), "bf16": (1.6e-2, 6e-2)}
SAMPLE_SPREAD_ROWS = 32  # plus the first and last 8 rows, as the harness's row sample
DEVICE = "cuda"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, help="key/value heads, a divisor of --heads (GQA); default --heads")
    ap.add_argument("--seqlen", type=int, help="sets --seqlen-q and --seqlen-k (default 1024)")
    ap.add_argument("--seqlen-q", type=int)
    ap.add_argument("--seqlen-k", type=int)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true", help="bottom-right aligned, as FA2 and the steps")
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    ap.add_argument("--shapes", choices=["seed", "bench", "sweep", "decode", "backward"],
                    help="a set of reference/shapes.txt instead")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="which, in this order (default: all)")
    ap.add_argument("--step", action="append", default=[], help="also run this step (its id, e.g. 07) via python/fa2.py")
    ap.add_argument("--backward", action="store_true",
                    help="time and check the backward (dQ, dK, dV) instead of the forward")
    ap.add_argument("--check", choices=["sample", "off"], default="sample",
                    help="sample: the forward's sampled rows, or with --backward dQ, dK, dV whole")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--csv", metavar="FILE", help="append one row per backend to FILE")
    ap.add_argument("--require", action="store_true", help="exit 3 (not 0) when torch or a GPU is missing")
    a = ap.parse_args()
    if a.seqlen is not None and (a.seqlen_q is not None or a.seqlen_k is not None):
        ap.error(f"--seqlen {a.seqlen} with --seqlen-q/--seqlen-k is not allowed (allowed: one or the other)")
    a.seqlen_q = a.seqlen_q or a.seqlen or 1024
    a.seqlen_k = a.seqlen_k or a.seqlen or 1024
    for name in ("batch", "heads", "seqlen_q", "seqlen_k", "dim", "iters"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(a, name)} is not allowed (allowed: >= 1)")
    a.kv_heads = a.kv_heads or a.heads
    if a.kv_heads < 1 or a.heads % a.kv_heads:
        ap.error(f"--kv-heads {a.kv_heads} is not allowed (allowed: a divisor of --heads {a.heads})")
    if a.backward and a.step:
        ap.error("--step with --backward is not allowed (allowed: one or the other)")
    a.backends = a.backends.split(",")
    for b in a.backends:
        if b not in BACKENDS:
            ap.error(f"--backends: '{b}' is not allowed (allowed: {', '.join(BACKENDS)})")
    return a


def fa4_func():
    """FlashAttention-4's flash_attn_func, or the one line why not. Its compiled kernels are
    kept on disk (its FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED), so each process of a
    comparison does not compile them again."""
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:  # not installed, or its CUDA DSL does not load
        return None, f"flash_attn.cute does not import ({one_line(e)}): pip install flash-attn-4"
    return flash_attn_func, ""


def sample_rows(seqlen):
    rows = set(range(min(8, seqlen))) | set(range(max(0, seqlen - 8), seqlen))
    rows |= {i * (seqlen - 1) // (SAMPLE_SPREAD_ROWS - 1) for i in range(SAMPLE_SPREAD_ROWS)}
    return sorted(rows)


def reference_rows(torch, q, k, v, rows, scale, causal):
    """fp64 O and LSE of the sampled query rows, every (batch, head), from the same rounded inputs.
    q, k, v are [B, H, N, d] views; GQA repeats each K/V head for its group of query heads."""
    group = q.shape[1] // k.shape[1]
    idx = torch.tensor(rows, device=q.device)
    q64 = q[:, :, idx, :].double()
    k64 = k.double().repeat_interleave(group, dim=1)
    v64 = v.double().repeat_interleave(group, dim=1)
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if causal:
        shift = k.shape[2] - q.shape[2]
        keys = torch.arange(k.shape[2], device=q.device)
        s = s.masked_fill(keys[None, :] > idx[:, None] + shift, float("-inf"))
    return torch.softmax(s, dim=-1) @ v64, torch.logsumexp(s, dim=-1)


def errors(o_rows, o_ref, lse_rows, lse_ref):
    diff = (o_rows.double() - o_ref)
    rel_l2 = (diff.norm() / o_ref.norm()).item()
    max_abs = diff.abs().max().item()
    lse_err = float("nan") if lse_rows is None else (lse_rows.double() - lse_ref).abs().max().item()
    return rel_l2, max_abs, lse_err


def status_of(err, dtype):
    tol_rel, tol_abs = TOLERANCE[dtype]
    return "PASS" if err[0] <= tol_rel and err[1] <= tol_abs else "FAIL"


# The backward's bound, as the harness's (common/harness.h, FA2_BWD_TOL_U; check.c says why):
# each of dQ, dK, dV within a relative L2 error of 8 units of the dtype's rounding. The
# harness adds what the forward's score and LSE errors carry in at peaky scores; the inputs
# here are N(0, 1), where that is far below it.
BWD_TOL_U = 8.0
UNIT_ROUNDOFF = {"fp16": 1.0 / 2048, "bf16": 1.0 / 256}
REF_CHUNK_ELEMS = 1 << 26  # scores per chunk of the fp64 backward: 512 MB in each of S, P, dP, dS


def reference_backward(torch, q, k, v, do, scale, causal):
    """fp64 dQ, dK, dV of every row, from the same rounded inputs: [B, H, N, d] views in,
    dense [B, H, N, d] float64 out (dK, dV per K/V head, summed over its group of query
    heads). P is recomputed in fp64 and D = rowsum(P * dP), which is rowsum(dO * O) with
    the exact O. Query rows go in chunks, so the scores of one chunk stay within
    REF_CHUNK_ELEMS however long the sequence."""
    b_n, h_n, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    group = h_n // hkv
    shift = nk - nq  # bottom-right aligned causal mask
    dq = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    dk = torch.zeros(k.shape, dtype=torch.float64, device=q.device)
    dv = torch.zeros(v.shape, dtype=torch.float64, device=q.device)
    keys = torch.arange(nk, device=q.device)
    chunk = max(1, REF_CHUNK_ELEMS // nk)
    for b in range(b_n):
        for h in range(h_n):
            hk = h // group
            k64, v64 = k[b, hk].double(), v[b, hk].double()
            for r0 in range(0, nq, chunk):
                r1 = min(nq, r0 + chunk)
                q64, do64 = q[b, h, r0:r1].double(), do[b, h, r0:r1].double()
                s = (q64 @ k64.T) * scale
                if causal:
                    hidden = keys[None, :] > torch.arange(r0, r1, device=q.device)[:, None] + shift
                    s = s.masked_fill(hidden, float("-inf"))
                    p = torch.softmax(s, dim=-1).masked_fill(hidden.all(dim=-1, keepdim=True), 0.0)  # no key: 0
                else:
                    p = torch.softmax(s, dim=-1)
                dp = do64 @ v64.T
                ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))
                dv[b, hk] += p.T @ do64
                dq[b, h, r0:r1] = (ds @ k64) * scale
                dk[b, hk] += (ds.T @ q64) * scale
                del s, p, dp, ds
    return dq, dk, dv


def backward_errors(grads, refs):
    """(largest rel_l2, largest max_abs, nan) over dQ, dK, dV, as the harness's backward row;
    and the three rel_l2 for the line."""
    rels, abss = [], []
    for g, r in zip(grads, refs):
        diff = g.double() - r
        rels.append((diff.norm() / r.norm()).item())
        abss.append(diff.abs().max().item())
    worst = float("nan") if any(x != x for x in rels) else max(rels)
    return (worst, max(abss), float("nan")), rels


def bwd_status_of(rels, dtype):
    bound = BWD_TOL_U * UNIT_ROUNDOFF[dtype]
    return "PASS" if all(x <= bound for x in rels) else "FAIL"  # a NaN fails


class Timer:
    """The harness's timing rule (common/device.c): warm-up, then per launch a read of
    twice the L2 size (so Q, K, V come from DRAM, and the L2 holds no dirty line for the
    launch to write back: common/flush.cu), an event, the launch, an event."""

    def __init__(self, torch, warmup, iters):
        self.torch, self.warmup, self.iters = torch, warmup, iters
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (64 << 20)
        self.flush = torch.full((2 * l2 // 4,), 0x5A5A5A5A, dtype=torch.int32, device=DEVICE)

    def __call__(self, launch):
        torch = self.torch
        for _ in range(self.warmup):
            launch()
        start = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        stop = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        for i in range(self.iters):
            # A Python call takes tens of microseconds to reach the GPU (FA4's interface about
            # a hundred), the harness's C call a few: a GPU-side spin queued first, 400,000
            # clocks (0.2 ms at 2 GHz), keeps that host time out of the events.
            torch.cuda._sleep(400_000)
            self.flush.amax()  # a reduction: every line read, none written
            start[i].record()
            launch()
            stop[i].record()
        torch.cuda.synchronize()
        ms = [a.elapsed_time(b) for a, b in zip(start, stop)]
        return statistics.median(ms), min(ms), max(ms)


def one_line(text):
    return " ".join(str(text).split())[:200]


class Results:
    def __init__(self, torch, csv_path):
        self.device = torch.cuda.get_device_name(0)
        self.date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        self.csv_path = csv_path
        self.failed = 0

    def add(self, step, key_change, shape, timing=None, err=None, status="UNSUPPORTED", why="", flop_factor=1.0):
        """flop_factor: 2.5 for a backward (FA2 and FA3 count it as 2.5 forwards)."""
        b, h, hkv, nq, nk, d, causal, dtype = shape
        nan = float("nan")
        ms = timing or (nan, nan, nan)
        tflops = flop_factor * 4.0 * b * h * visible_pairs(nq, nk, causal) * d / (ms[0] * 1e-3) / 1e12 if timing else nan
        err = err or (nan, nan, nan)
        line = (f"{step:<{30 if step.endswith('_backward') else 22}} {dtype} B{b} H{h}/{hkv} Nq{nq} Nk{nk} d{d} {'causal' if causal else 'non-causal'}"
                f" | {status}")
        if timing:
            line += (f" rel_l2 {err[0]:.1e} max_abs {err[1]:.1e} lse {err[2]:.1e} | {ms[0]:.4f} ms "
                     f"(min {ms[1]:.4f}, max {ms[2]:.4f}) {tflops:.3g} TFLOP/s | {self.device}")
        else:
            line += f": {why}"
        print(line, flush=True)
        self.failed += status == "FAIL"
        if self.csv_path:
            new = not os.path.exists(self.csv_path) or os.path.getsize(self.csv_path) == 0
            with open(self.csv_path, "a") as f:
                if new:
                    f.write(CSV_HEADER + "\n")
                text = key_change.replace('"', '""')
                f.write(f"{step},{self.device},{self.date},{dtype},{b},{h},{hkv},{nq},{nk},{d},{int(causal)},"
                        f"{ms[0]:.5f},{ms[1]:.5f},{ms[2]:.5f},{tflops:.2f},{err[0]:.3e},{err[1]:.3e},{err[2]:.3e},"
                        f"{status},\"{text}\",0,\n")  # contiguous, every sequence seqlen_k keys


# What a backend raises when it has no kernel for the inputs (FA4 asserts or raises
# ValueError on what it does not take), or when the GPU's memory runs out.
REFUSALS = (RuntimeError, NotImplementedError, ValueError, AssertionError, TypeError)


def backend_context(name):
    """SDPA held to backend `name` while it is entered: torch's own choice for default, and
    nothing to hold for fa4."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}.get(name)
    return sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()


def forward_launch(name, inputs, shape):
    """The forward of backend `name` on the [B, H, N, d] views `inputs`, as a function that
    returns O as a [B, H, N, d] view; or None and the one line why not. FA4 is called on the
    [B, N, H, d] storage those views are of, as FA2 and the steps are."""
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right
    q, k, v = inputs
    b, h, hkv, nq, nk, d, causal, dtype = shape
    if name != "fa4":
        # torch's is_causal is top-left aligned; FA2's (and the steps') bottom-right mask is
        # the same only when seqlen_q = seqlen_k, else it is causal_lower_right.
        mask = causal_lower_right(nq, nk) if causal and nq != nk else None
        return (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=bool(causal) and mask is None,
                                                       enable_gqa=hkv != h)), ""
    fa4, why = fa4_func()
    if fa4 is None:
        return None, why
    q_s, k_s, v_s = (t.transpose(1, 2) for t in inputs)
    return (lambda: fa4(q_s, k_s, v_s, softmax_scale=d ** -0.5, causal=bool(causal))[0].transpose(1, 2)), ""


def run_sdpa_backends(torch, args, shape, timer, results, inputs, ref):
    """One row per backend, in the order given; returns the default backend's output (or None)."""
    nq, dtype = shape[3], shape[7]
    rows = sample_rows(nq)
    default_out = None
    for name in args.backends:
        step, text = BACKENDS[name]
        launch, why = forward_launch(name, inputs, shape)
        if launch is None:
            results.add(step, text, shape, why=why)
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with backend_context(name):
                    o = launch()
                    err = errors(o[:, :, rows, :], ref[0], None, ref[1]) if ref else None
                    timing = timer(launch)
            except REFUSALS as e:  # no kernel for these inputs, or out of memory
                reasons = [one_line(w.message) for w in caught] + [one_line(e)]
                results.add(step, text, shape, why=" / ".join(reasons)[:300])
                torch.cuda.empty_cache()
                continue
        if name == "default":
            default_out = o
        results.add(step, text, shape, timing, err, status_of(err, dtype) if err else "UNCHECKED")
    return default_out


def run_sdpa_backward(torch, args, shape, timer, results, inputs, dout, ref):
    """One backward row per backend, in the order given: the forward once, untimed, then the
    backward alone timed (torch.autograd.grad of that output, the graph kept for the next)."""
    q, k, v = inputs
    dtype = shape[7]
    for name in args.backends:
        step, text = BACKENDS[name]
        step, text = step + "_backward", text + ", backward"
        forward, why = forward_launch(name, inputs, shape)
        if forward is None:
            results.add(step, text, shape, why=why)
            continue
        o = grads = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with backend_context(name):
                    o = forward()

                    def launch():
                        return torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)

                    grads = launch()
                    err, rels = backward_errors(grads, ref) if ref else (None, None)
                    del grads
                    timing = timer(launch)
            except REFUSALS as e:  # no kernel for these inputs, or out of memory
                reasons = [one_line(w.message) for w in caught] + [one_line(e)]
                del o, grads
                results.add(step, text, shape, why=" / ".join(reasons)[:300])
                torch.cuda.empty_cache()
                continue
        del o
        torch.cuda.empty_cache()
        if rels:
            print(f"{step}: dq rel_l2 {rels[0]:.1e} dk {rels[1]:.1e} dv {rels[2]:.1e} "
                  f"(allowed {BWD_TOL_U * UNIT_ROUNDOFF[dtype]:.1e} each)")
        results.add(step, text, shape, timing, err, bwd_status_of(rels, dtype) if rels else "UNCHECKED",
                    flop_factor=2.5)


def run_step(torch, step_id, shape, timer, results, storage, ref, sdpa_out):
    """A step of this repository on the same [B, N, H, d] tensors, through python/fa2.py."""
    b, h, hkv, nq, nk, d, causal, dtype = shape
    s = fa2.step_library(step_id)
    q_s, k_s, v_s = storage
    try:
        o_s, lse = fa2.attention(q_s, k_s, v_s, causal=causal, step=step_id, return_lse=True)
    except ValueError as e:
        results.add(s.name, s.key_change, shape, why=str(e))
        return
    o = o_s.transpose(1, 2)
    rows = sample_rows(nq)
    err = errors(o[:, :, rows, :], ref[0], lse[:, :, rows], ref[1]) if ref else None
    if sdpa_out is not None:
        vs_sdpa = ((o.float() - sdpa_out.float()).norm() / sdpa_out.float().norm()).item()
        print(f"{s.name}: rel L2 vs torch_sdpa_default over every row: {vs_sdpa:.2e}")
    timing = timer(lambda: fa2.attention(q_s, k_s, v_s, causal=causal, step=step_id))
    results.add(s.name, s.key_change, shape, timing, err, status_of(err, dtype) if err else "UNCHECKED")


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        print("sdpa.py: torch is not installed: torch SDPA rows skipped")
        return 3 if args.require else 0
    if not torch.cuda.is_available():
        print(f"sdpa.py: torch {torch.__version__} sees no CUDA GPU: torch SDPA rows skipped")
        return 3 if args.require else 0

    shapes = read_shapes(args.shapes) if args.shapes else [
        (args.batch, args.heads, args.kv_heads, args.seqlen_q, args.seqlen_k, args.dim, int(args.causal), args.dtype)]
    timer = Timer(torch, args.warmup, args.iters)
    results = Results(torch, args.csv)
    gen = torch.Generator(device=DEVICE)
    for shape in shapes:
        b, h, hkv, nq, nk, d, causal, dtype = shape
        tdtype = torch.float16 if dtype == "fp16" else torch.bfloat16
        gen.manual_seed(args.seed)
        # Storage is [B, N, H, d], the layout FA2 and the steps take; SDPA gets the
        # [B, H, N, d] transposed views of it (head_dim still contiguous). Every backend
        # reads the same bytes as the steps do, and none pays a copy FA2 itself would not.
        storage = [torch.randn(b, n, heads, d, generator=gen, device=DEVICE, dtype=torch.float32).to(tdtype)
                   for n, heads in ((nq, h), (nk, hkv), (nk, hkv))]
        inputs = [t.transpose(1, 2) for t in storage]
        if args.backward:
            # dO drawn after Q, K, V, dense [B, N, H, d] as the harness's, given as O's [B, H, N, d] view
            dout = torch.randn(b, nq, h, d, generator=gen, device=DEVICE, dtype=torch.float32).to(tdtype).transpose(1, 2)
            ref = (reference_backward(torch, *inputs, dout, d ** -0.5, causal)
                   if args.check == "sample" else None)
            # the [B, H, N, d] views, taken again of the leaves now that they require grad, are
            # what autograd.grad differentiates by: dQ, dK, dV as the backward kernels write them
            inputs = [t.requires_grad_(True).transpose(1, 2) for t in storage]
            run_sdpa_backward(torch, args, shape, timer, results, inputs, dout, ref)
            del storage, inputs, dout, ref
            torch.cuda.empty_cache()
            continue
        ref = reference_rows(torch, *inputs, sample_rows(nq), d ** -0.5, causal) if args.check == "sample" else None
        sdpa_out = run_sdpa_backends(torch, args, shape, timer, results, inputs, ref)
        for step_id in args.step:
            run_step(torch, step_id, shape, timer, results, storage, ref, sdpa_out)
        del storage, inputs, ref, sdpa_out
        torch.cuda.empty_cache()
    return 1 if results.failed else 0  # as the harness: a failed check exits 1


if __name__ == "__main__":
    sys.exit(main())
