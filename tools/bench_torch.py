#!/usr/bin/env python3
"""What the steps cost as PyTorch operators (python/fa2.py), against the step's own C call and
torch SDPA, on one GPU. Three parts, each in rounds (the variants alternate within a round; a
row gives the median over the rounds):

  percall   host time per call, calls issued back to back (no synchronisation between them, the
            GPU's queue never full): fa2.attention (the operator), the step's own fa2_forward
            through ctypes with a params struct built once, torch SDPA, and with --before the
            binding the operators replaced (a python/fa2.py of ctypes); at B2 H8 N1024 d128 fp16
            with the forward step, and decode B1 Hq32 Hkv8 Nk2048 bf16 with the decode step
            (fa2.attention and attention_with_kvcache with per-sequence lengths).
  backward  the backward through autograd (torch.autograd.grad of fa2.attention's O) and
            torch.ops.fa2.bwd called directly (CUDA events around each of --iters calls issued
            back to back, the median) against the harness's own backward time of the same step
            (build/stepNN/fa2 --backward, its median), at reference/shapes.txt's backward
            shapes.
  llama     a transformers LlamaForCausalLM (random weights, 4 layers, hidden 2048, GQA 16:4,
            d128, bf16, attn_implementation="sdpa") on SDPA's default against the same model
            with fa2.activate_sdpa: prefill B2 N4096 (no grad), one training step B2 N2048
            (forward and backward), one decode token at B1 over a 2048-token cache.

usage: python3 tools/bench_torch.py --csv OUT.csv [--rounds 3] [--llama-rounds 5] [--iters 30]
         [--parts percall,backward,llama]
         [--forward-step 12] [--backward-step 15] [--decode-step 13] [--before OLD_fa2.py]
Prints a readable summary; the CSV has one row per (part, case, variant): its median and the
rounds' values. After make all and make torch, on a GPU."""
import argparse
import csv
import ctypes
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import fa2  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from shapes import read_shapes  # noqa: E402

rows = []


def record(part, case, variant, values, unit, detail=""):
    med = statistics.median(values)
    rows.append(dict(part=part, case=case, variant=variant, median=f"{med:.3f}", unit=unit,
                     rounds=";".join(f"{v:.3f}" for v in values), detail=detail))
    return med


def host_us(fn, calls=200):
    """Host microseconds per call, `calls` calls back to back after a synchronisation."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def c_call(step, q, k, v, causal=False):
    """The step's fa2_forward through ctypes with a params struct built once (workspace too)."""
    s = fa2.step_library(step)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device)
    p = fa2.Fa2Params()
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    p.batch, p.seqlen_q, p.heads_q, p.head_dim = q.shape
    p.seqlen_k, p.heads_kv = k.shape[1], k.shape[2]
    for prefix, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        b, n, h, d = t.shape
        setattr(p, prefix + "_batch_stride", n * h * d)
        setattr(p, prefix + "_row_stride", h * d)
        setattr(p, prefix + "_head_stride", d)
    p.softmax_scale, p.causal, p.dtype = q.shape[3] ** -0.5, int(causal), 0 if q.dtype == torch.float16 else 1
    need = s.workspace_size(p)
    ws = torch.zeros(max(need, 16), dtype=torch.uint8, device=q.device)
    p.workspace, p.workspace_bytes = (ws.data_ptr(), need) if need else (None, 0)
    ok, why = s.supports(p)
    if not ok:
        raise ValueError(f"step {s.name}: {why}")
    stream = torch.cuda.current_stream().cuda_stream
    ref = ctypes.byref(p)
    fwd = s.lib.fa2_forward
    keep = (o, lse, ws)

    def call():
        fwd(ref, stream)
    call.keep = keep
    return call


def load_before(path):
    spec = importlib.util.spec_from_file_location("fa2_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def percall(args, before):
    out = {}
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, dtype):
        return torch.randn(*shape, generator=gen, device=dev).to(dtype)

    # prefill-sized call: B2 H8 N1024 d128 fp16
    q, k, v = (rnd(2, 1024, 8, 128, dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    step = args.forward_step
    path = fa2.library_path(step)
    op = torch.ops.fa2.fwd.default
    variants = {
        f"fa2.attention (operator, step {step})": lambda: fa2.attention(q, k, v, step=step),
        f"C call, prebuilt params (step {step})": c_call(step, q, k, v),
        "torch SDPA (default backend)": lambda: F.scaled_dot_product_attention(qt, kt, vt),
        # where the operator's time goes
        f"part: torch.ops.fa2.fwd called directly (step {step})": lambda: op(q, k, v, False, None, path, path),
        "part: torch.empty of O and LSE (the outputs' allocations)":
            lambda: (torch.empty(2, 1024, 8, 128, dtype=torch.float16, device=dev),
                     torch.empty(2, 8, 1024, device=dev)),
    }
    if before is not None:
        variants[f"before: ctypes binding (step {step})"] = lambda: before.attention(q, k, v, step=step)
    out["B2 H8 N1024 d128 fp16"] = variants
    # decode: B1 Hq32 Hkv8 Nk2048 bf16
    dq = rnd(1, 1, 32, 128, dtype=torch.bfloat16)
    dk, dv = (rnd(1, 2048, 8, 128, dtype=torch.bfloat16) for _ in range(2))
    dqt, dkt, dvt = (t.transpose(1, 2).contiguous() for t in (dq, dk, dv))
    lens = torch.full((1,), 2048, dtype=torch.int32, device=dev)
    ds = args.decode_step
    variants = {
        f"fa2.attention (operator, step {ds})": lambda: fa2.attention(dq, dk, dv, step=ds),
        f"fa2.attention_with_kvcache, cache_seqlens (operator, step {ds})":
            lambda: fa2.attention_with_kvcache(dq, dk, dv, cache_seqlens=lens, step=ds),
        f"C call, prebuilt params (step {ds})": c_call(ds, dq, dk, dv),
        "torch SDPA (default backend, enable_gqa)": lambda: F.scaled_dot_product_attention(dqt, dkt, dvt, enable_gqa=True),
    }
    if before is not None:
        variants[f"before: ctypes binding (step {ds})"] = lambda: before.attention(dq, dk, dv, step=ds)
    out["decode B1 Hq32 Hkv8 Nk2048 bf16"] = variants
    for case, variants in out.items():
        with torch.no_grad():
            for fn in variants.values():
                for _ in range(20):
                    fn()
            values = {name: [] for name in variants}
            for _ in range(args.rounds):
                for name, fn in variants.items():
                    values[name].append(min(host_us(fn) for _ in range(5)))
        print(f"\n== host time per call, back to back: {case}")
        base = None
        for name, vals in values.items():
            med = record("percall", case, name, vals, "us")
            if name.startswith("C call"):
                base = med
        for name, vals in values.items():
            med = statistics.median(vals)
            print(f"  {name:62s} {med:7.2f} us" + (f"  ({med / base:.2f}x the C call)" if base else ""))


def harness_backward_ms(step, shape, iters):
    b, h, hkv, n, nk, d, causal, dtype = shape
    binary = os.path.join(ROOT, "build", f"step{fa2.step_library(step).name[:2]}", "fa2")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "h.csv")
        cmd = [binary, "--batch", str(b), "--heads", str(h), "--kv-heads", str(hkv), "--seqlen-q", str(n),
               "--seqlen-k", str(nk), "--dim", str(d), "--dtype", dtype, "--backward", "--check", "off",
               "--iters", str(iters), "--warmup", "5", "--csv", path] + (["--causal"] if causal else [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            last = list(csv.DictReader(f))[-1]  # the backward's row comes after the forward's
        return float(last["ms_median"])


def gpu_ms(fn, iters):
    """Median GPU milliseconds of fn() over `iters` calls issued back to back (an event pair each,
    one synchronisation at the end), after 5 untimed calls."""
    for _ in range(5):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def autograd_backward_ms(args, shape):
    b, h, hkv, nq, nk, d, causal, dtype = shape
    tdtype = torch.float16 if dtype == "fp16" else torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, nq, h, d, generator=gen, device="cuda").to(tdtype).requires_grad_()
    k, v = (torch.randn(b, nk, hkv, d, generator=gen, device="cuda").to(tdtype).requires_grad_() for _ in range(2))
    o, lse = fa2.attention(q, k, v, causal=causal, step=args.forward_step, backward_step=args.backward_step,
                           return_lse=True)
    dout = torch.randn_like(o)
    through_autograd = gpu_ms(lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True), args.iters)
    path = fa2.library_path(args.backward_step)
    qd, kd, vd, od = q.detach(), k.detach(), v.detach(), o.detach()
    op = torch.ops.fa2.bwd.default
    direct = gpu_ms(lambda: op(dout, qd, kd, vd, od, lse, causal, None, path), args.iters)
    return through_autograd, direct


def backward(args):
    print(f"\n== the backward: through autograd (step {args.backward_step}) against the harness's own time")
    for shape in ((*shape[:6], bool(shape[6]), shape[7]) for shape in read_shapes("backward")):
        b, h, hkv, nq, nk, d, causal, dtype = shape
        case = f"B{b} H{h}/{hkv} N{nq} d{d} {'causal' if causal else 'non-causal'} {dtype}"
        ours, direct, harness = [], [], []
        for _ in range(args.rounds):
            a, d = autograd_backward_ms(args, shape)
            ours.append(a)
            direct.append(d)
            harness.append(harness_backward_ms(args.backward_step, shape, args.iters))
        torch.cuda.empty_cache()
        a = record("backward", case, "autograd (fa2.attention, torch.autograd.grad)", ours, "ms")
        d = record("backward", case, "torch.ops.fa2.bwd called directly", direct, "ms")
        hm = record("backward", case, f"harness (build/step{args.backward_step}/fa2 --backward)", harness, "ms")
        print(f"  {case:40s} autograd {a:8.4f} ms  fa2::bwd {d:8.4f} ms  harness {hm:8.4f} ms  "
              f"autograd/harness {a / hm:.3f}")


def llama(args):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
                         num_attention_heads=16, num_key_value_heads=4, head_dim=128, max_position_embeddings=8192)
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).cuda()
    gen = torch.Generator(device="cuda").manual_seed(1)
    prefill_tokens = torch.randint(0, 32000, (2, 4096), device="cuda", generator=gen)
    train_tokens = torch.randint(0, 32000, (2, 2048), device="cuda", generator=gen)
    cache_tokens = torch.randint(0, 32000, (1, 2048), device="cuda", generator=gen)
    next_token = torch.randint(0, 32000, (1, 1), device="cuda", generator=gen)

    def timed(fn, reps):
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / reps * 1e3

    def prefill():
        with torch.no_grad():
            model(prefill_tokens, use_cache=False)

    def train():
        model.zero_grad(set_to_none=True)
        model(train_tokens, labels=train_tokens).loss.backward()

    state = {}

    def decode():
        with torch.no_grad():
            model(next_token, past_key_values=state["cache"], use_cache=True)
            state["cache"].crop(-1)  # back to the 2048 keys

    def decode_setup():
        with torch.no_grad():
            state["cache"] = model(cache_tokens, use_cache=True).past_key_values

    cases = (("prefill B2 N4096", prefill, 10, None), ("training step B2 N2048", train, 10, None),
             ("decode B1, 2048-token cache", decode, 200, decode_setup))
    results = {}
    for _ in range(args.llama_rounds):
        for variant in ("sdpa", "fa2"):
            if variant == "fa2":
                fa2.activate_sdpa(args.forward_step, args.backward_step, args.decode_step)
            try:
                for name, fn, reps, setup in cases:
                    if setup:
                        setup()
                    results.setdefault((name, variant), []).append(timed(fn, reps))
                counts = fa2.sdpa_counts() if variant == "fa2" else None
            finally:
                fa2.deactivate_sdpa()
            if counts is not None:
                results.setdefault(("counts", "fa2"), []).append(counts)
    print(f"\n== transformers Llama (4 layers, hidden 2048, GQA 16:4, d128, bf16): SDPA's default against "
          f"the steps through fa2.activate_sdpa({args.forward_step}, {args.backward_step}, {args.decode_step})")
    for name, _, _, _ in cases:
        s = record("llama", name, "SDPA default", results[(name, "sdpa")], "ms")
        f = record("llama", name, "fa2.activate_sdpa", results[(name, "fa2")], "ms")
        print(f"  {name:32s} SDPA {s:9.3f} ms  steps {f:9.3f} ms  speedup {s / f:.3f}x")
    print(f"  the provider's last round: {results[('counts', 'fa2')][-1]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--llama-rounds", type=int, default=5)
    ap.add_argument("--parts", default="percall,backward,llama")
    fwd_default, bwd_default = fa2.default_sdpa_steps() if torch.cuda.is_available() else ("12", "15")
    ap.add_argument("--forward-step", default=fwd_default)
    ap.add_argument("--backward-step", default=bwd_default)
    ap.add_argument("--decode-step", default="13")
    ap.add_argument("--before", default=None, help="a python/fa2.py of the ctypes binding, for the before column")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device (tools/bench_torch.py times the GPU steps)")
    parts = args.parts.split(",")
    unknown = set(parts) - {"percall", "backward", "llama"}
    if unknown:
        sys.exit(f"error: --parts {args.parts} (allowed: percall, backward, llama, comma-separated)")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    try:
        if "percall" in parts:
            percall(args, load_before(args.before) if args.before else None)
        if "backward" in parts:
            backward(args)
        if "llama" in parts:
            llama(args)
    finally:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["device", "date", "torch", "part", "case", "variant", "median", "unit",
                                              "rounds", "detail"])
            w.writeheader()
            for r in rows:
                w.writerow(dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d"),
                                torch=torch.__version__, **r))
        print(f"\n# wrote {args.csv}")


if __name__ == "__main__":
    main()
