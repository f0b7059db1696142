#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention, every backend, timed by the harness's rules.

Writes rows in the harness's CSV format (common/main.c), so the steps, the cuBLAS
baseline and torch land in one table: step = torch_sdpa_flash (PyTorch's
FlashAttention-2), torch_sdpa_cudnn, torch_sdpa_efficient, torch_sdpa_math and
torch_sdpa_default (no backend restriction: what a user gets).

With --ctypes build/stepNN/libfa2.so it also calls a step through the fa2.h ABI on
the same torch tensors, checks it against SDPA and times it the same way.

Optional: needs torch with CUDA. Without it, one line and exit 0 (exit 3 with --require).
"""
import argparse
import contextlib
import ctypes
import datetime
import os
import statistics
import sys
import warnings

CSV_HEADER = ("step,device,date,dtype,batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal,"
              "ms_median,ms_min,ms_max,tflops,rel_l2,max_abs,lse_err,status")

# (batch, heads_q, heads_kv, seqlen, head_dim, causal); "all" is the benchmark list
# reference/compare.sh runs for SHAPES=all (keep the two in step).
SHAPES = {
    "seed": [(2, 8, 8, 1024, 128, False)],
    "all": [(2, 8, 8, 1024, 128, False), (4, 16, 16, 4096, 128, False), (4, 16, 16, 4096, 128, True),
            (4, 16, 16, 4096, 64, False), (16, 16, 16, 1024, 64, False)],
}

# rel_l2, max_abs, lse: the harness's tolerances (common/check.c), so PASS means the same thing.
TOLERANCE = {"fp16": (2e-3, 1e-2, 1e-3), "bf16": (1.6e-2, 6e-2, 1e-3)}
SAMPLE_SPREAD_ROWS = 32  # plus the first and last 8 rows, as the harness's row sample
DEVICE = "cuda"


class Fa2Params(ctypes.Structure):
    """fa2_params of common/fa2.h, field for field (ctypes lays it out with the C ABI's alignment)."""
    _fields_ = [
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
        ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("q_batch_stride", ctypes.c_int64), ("q_row_stride", ctypes.c_int64), ("q_head_stride", ctypes.c_int64),
        ("k_batch_stride", ctypes.c_int64), ("k_row_stride", ctypes.c_int64), ("k_head_stride", ctypes.c_int64),
        ("v_batch_stride", ctypes.c_int64), ("v_row_stride", ctypes.c_int64), ("v_head_stride", ctypes.c_int64),
        ("o_batch_stride", ctypes.c_int64), ("o_row_stride", ctypes.c_int64), ("o_head_stride", ctypes.c_int64),
        ("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int),
        ("dtype", ctypes.c_int),  # fa2_dtype, a C enum: int-sized; FA2_FP16 = 0, FA2_BF16 = 1
    ]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, help="key/value heads, a divisor of --heads (GQA); default --heads")
    ap.add_argument("--seqlen", type=int, default=1024, help="seqlen_q = seqlen_k (torch's is_causal is "
                    "top-left, equal to FA2's bottom-right only when they are equal)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    ap.add_argument("--shapes", choices=sorted(SHAPES), help="a shape list instead of the shape flags")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--csv", metavar="FILE", help="append one row per backend to FILE")
    ap.add_argument("--ctypes", metavar="LIB", help="also run a step's libfa2.so through the fa2.h ABI")
    ap.add_argument("--require", action="store_true", help="exit 3 (not 0) when torch or a GPU is missing")
    a = ap.parse_args()
    for name in ("batch", "heads", "seqlen", "dim", "iters"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(a, name)} is not allowed (allowed: >= 1)")
    a.kv_heads = a.kv_heads or a.heads
    if a.kv_heads < 1 or a.heads % a.kv_heads:
        ap.error(f"--kv-heads {a.kv_heads} is not allowed (allowed: a divisor of --heads {a.heads})")
    return a


def visible_pairs(seqlen_q, seqlen_k, causal):
    """Query-key pairs one head computes, as fa2_visible_pairs: row i sees keys j <= i + seqlen_k - seqlen_q."""
    if not causal:
        return seqlen_q * seqlen_k
    shift = seqlen_k - seqlen_q
    return sum(min(max(i + shift + 1, 0), seqlen_k) for i in range(seqlen_q))


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
    lse = torch.logsumexp(s, dim=-1)
    return torch.softmax(s, dim=-1) @ v64, lse


def errors(torch, o_rows, o_ref, lse_rows, lse_ref):
    diff = (o_rows.double() - o_ref)
    rel_l2 = (diff.norm() / o_ref.norm()).item()
    max_abs = diff.abs().max().item()
    lse_err = float("nan") if lse_rows is None else (lse_rows.double() - lse_ref).abs().max().item()
    return rel_l2, max_abs, lse_err


class Timer:
    """The harness's timing rule (common/device.c): warm-up, then per launch a write of
    twice the L2 size (so Q, K, V come from DRAM), an event, the launch, an event."""

    def __init__(self, torch, warmup, iters):
        self.torch, self.warmup, self.iters = torch, warmup, iters
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (64 << 20)
        self.flush = torch.empty(2 * l2, dtype=torch.uint8, device=DEVICE)

    def __call__(self, launch):
        torch = self.torch
        for _ in range(self.warmup):
            launch()
        start = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        stop = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        for i in range(self.iters):
            # A Python call takes tens of microseconds to reach the GPU, the harness's C
            # call a few: a GPU-side spin queued first keeps that host time out of the events.
            torch.cuda._sleep(100_000)
            self.flush.fill_(i & 0xFF)
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

    def add(self, step, shape, dtype, timing=None, err=None, status="UNSUPPORTED", why=""):
        b, h, hkv, n, d, causal = shape
        nan = float("nan")
        ms = timing or (nan, nan, nan)
        tflops = 4.0 * b * h * visible_pairs(n, n, causal) * d / (ms[0] * 1e-3) / 1e12 if timing else nan
        err = err or (nan, nan, nan)
        line = f"{step:<22} {dtype} B{b} H{h}/{hkv} N{n} d{d} {'causal' if causal else 'non-causal'} | {status}"
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
                f.write(f"{step},{self.device},{self.date},{dtype},{b},{h},{hkv},{n},{n},{d},{int(causal)},"
                        f"{ms[0]:.5f},{ms[1]:.5f},{ms[2]:.5f},{tflops:.2f},{err[0]:.3e},{err[1]:.3e},{err[2]:.3e},"
                        f"{status}\n")


def status_of(err, dtype):
    tol_rel, tol_abs, tol_lse = TOLERANCE[dtype]
    rel_l2, max_abs, lse_err = err
    ok = rel_l2 <= tol_rel and max_abs <= tol_abs and (lse_err != lse_err or lse_err <= tol_lse)  # NaN: no LSE
    return "PASS" if ok else "FAIL"


def run_sdpa_backends(torch, shape, dtype, timer, results, inputs, ref):
    """One row per backend; returns the default backend's output for the --ctypes comparison."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    q, k, v = inputs
    b, h, hkv, n, d, causal = shape
    backends = [("torch_sdpa_flash", SDPBackend.FLASH_ATTENTION), ("torch_sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                ("torch_sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION), ("torch_sdpa_math", SDPBackend.MATH),
                ("torch_sdpa_default", None)]
    rows = sample_rows(n)
    default_out = None
    for step, backend in backends:
        def launch():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != h)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
                    o = launch()
                    err = errors(torch, o[:, :, rows, :], ref[0], None, ref[1])
                    timing = timer(launch)
            except (RuntimeError, NotImplementedError) as e:  # no kernel for these inputs, or out of memory
                reasons = [one_line(w.message) for w in caught] + [one_line(e)]
                results.add(step, shape, dtype, why=" / ".join(reasons)[:300])
                torch.cuda.empty_cache()
                continue
        if backend is None:
            default_out = o
        results.add(step, shape, dtype, timing, err, status_of(err, dtype))
    return default_out


def run_ctypes(torch, lib_path, shape, dtype, timer, results, storage, ref, sdpa_out):
    """A step's libfa2.so called through the fa2.h ABI on torch tensors: device pointers from
    data_ptr(), element strides from stride() of the [B, N, H, d] storage, torch's current stream."""
    lib = ctypes.CDLL(os.path.abspath(lib_path))
    lib.fa2_forward.argtypes = [ctypes.POINTER(Fa2Params), ctypes.c_void_p]
    lib.fa2_forward.restype = ctypes.c_int
    lib.fa2_supports.argtypes = [ctypes.POINTER(Fa2Params), ctypes.c_char_p, ctypes.c_size_t]
    lib.fa2_supports.restype = ctypes.c_int
    lib.fa2_name.restype = ctypes.c_char_p
    lib.fa2_runs_on_gpu.restype = ctypes.c_int
    name = lib.fa2_name().decode()
    if not lib.fa2_runs_on_gpu():
        results.add(name, shape, dtype, why="runs on the CPU (host pointers): use its harness binary instead")
        return

    q_s, k_s, v_s = storage
    b, h, hkv, n, d, causal = shape
    o_s = torch.empty_like(q_s)
    lse = torch.empty(b, h, n, dtype=torch.float32, device=DEVICE)
    p = Fa2Params()
    p.q, p.k, p.v, p.o, p.lse = q_s.data_ptr(), k_s.data_ptr(), v_s.data_ptr(), o_s.data_ptr(), lse.data_ptr()
    p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = b, h, hkv, n, n, d
    for prefix, t in (("q", q_s), ("k", k_s), ("v", v_s), ("o", o_s)):
        batch_stride, row_stride, head_stride, _ = t.stride()
        setattr(p, f"{prefix}_batch_stride", batch_stride)
        setattr(p, f"{prefix}_row_stride", row_stride)
        setattr(p, f"{prefix}_head_stride", head_stride)
    p.softmax_scale = d ** -0.5
    p.causal = int(causal)
    p.dtype = 0 if dtype == "fp16" else 1

    why = ctypes.create_string_buffer(256)
    if not lib.fa2_supports(ctypes.byref(p), why, len(why)):
        results.add(name, shape, dtype, why=why.value.decode())
        return

    def launch():
        rc = lib.fa2_forward(ctypes.byref(p), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc:
            raise RuntimeError(f"{name}: fa2_forward returned {rc}")

    launch()
    o = o_s.transpose(1, 2)
    rows = sample_rows(n)
    err = errors(torch, o[:, :, rows, :], ref[0], lse[:, :, rows], ref[1])
    if sdpa_out is not None:
        vs_sdpa = ((o.float() - sdpa_out.float()).norm() / sdpa_out.float().norm()).item()
        print(f"{name}: rel L2 vs torch_sdpa_default over every row: {vs_sdpa:.2e}")
    results.add(name, shape, dtype, timer(launch), err, status_of(err, dtype))


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

    shapes = SHAPES[args.shapes] if args.shapes else [
        (args.batch, args.heads, args.kv_heads, args.seqlen, args.dim, args.causal)]
    tdtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    timer = Timer(torch, args.warmup, args.iters)
    results = Results(torch, args.csv)
    gen = torch.Generator(device=DEVICE)
    for shape in shapes:
        b, h, hkv, n, d, causal = shape
        gen.manual_seed(args.seed)
        # Storage is [B, N, H, d], the layout FA2 and the steps take; SDPA gets the
        # [B, H, N, d] transposed views of it (head_dim still contiguous). Every backend
        # reads the same bytes as the steps do, and none pays a copy FA2 itself would not.
        storage = [torch.randn(b, n, heads, d, generator=gen, device=DEVICE, dtype=torch.float32).to(tdtype)
                   for heads in (h, hkv, hkv)]
        inputs = [t.transpose(1, 2) for t in storage]
        ref = reference_rows(torch, *inputs, sample_rows(n), d ** -0.5, causal)
        sdpa_out = run_sdpa_backends(torch, shape, args.dtype, timer, results, inputs, ref)
        if args.ctypes:
            run_ctypes(torch, args.ctypes, shape, args.dtype, timer, results, storage, ref, sdpa_out)
        del storage, inputs, ref, sdpa_out
        torch.cuda.empty_cache()
    return 1 if results.failed else 0  # as the harness: a failed check exits 1


if __name__ == "__main__":
    sys.exit(main())
