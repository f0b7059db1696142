#!/usr/bin/env python3
"""The steps as PyTorch operators (python/fa2.py, python/fa2_ext.cpp): torch.library.opcheck of
fa2::fwd, fa2::bwd and fa2::fwd_kvcache (schema, autograd registration, fake kernels against
the real ones, AOT dispatch with dynamic shapes), the fake kernels under FakeTensorMode, a small
model through fa2.attention compiled with torch.compile(fullgraph=True) (no graph break; its
loss and gradients as in eager), and on the GPU a CUDA graph of a decode step over a paged KV
cache with per-sequence lengths, captured once and replayed with new lengths and queries, and
SDPA's flash path through the steps (fa2.activate_sdpa) inside a transformers Llama model:
prefill, decode and a training step against torch's flash backend, the fallbacks to torch's
kernel, and deactivate_sdpa restoring it. The CUDA graph also captures fa2.attention, and a
KV-cache call between two of other shapes checks that the step's shared workspace stays sound. One PASS/FAIL/SKIP line each.
usage: python3 tests/test_torch_ops.py --cpu | --gpu   (--cpu: step 00 on the CPU; --gpu: the
       default SDPA steps, 13 for decode; after make all)"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import fa2  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

failures = 0


def report(ok, name, detail=""):
    global failures
    failures += not ok
    print(("PASS " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail), flush=True)


def attempt(name, fn):
    """fn() -> (ok, detail); an exception is a FAIL line with its first line."""
    try:
        ok, detail = fn()
    except Exception as e:  # noqa: BLE001 -- a FAIL line, and the next case runs
        ok, detail = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    report(ok, name, detail)


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def opcheck(name, op, args):
    def run():
        torch.library.opcheck(op, args)
        return True, ""
    attempt(f"opcheck {name}", run)


def randn(*shape, device, dtype, grad=False, gen):
    t = torch.randn(*shape, generator=gen, device=device).to(dtype)
    return t.requires_grad_() if grad else t


def paged_cache(gen, device, dtype, lens, page, hkv, d):
    """K and V page pools with the sequences' pages shuffled, a block table, int32 lengths."""
    batch, per_seq = len(lens), max(1, -(-max(lens) // page))
    num_pages = batch * per_seq + 3
    order = torch.randperm(num_pages, generator=torch.Generator().manual_seed(5))[: batch * per_seq]
    table = order.reshape(batch, per_seq).to(torch.int32).to(device)
    k = randn(num_pages, page, hkv, d, device=device, dtype=dtype, gen=gen)
    v = randn(num_pages, page, hkv, d, device=device, dtype=dtype, gen=gen)
    return k, v, table, torch.tensor(lens, dtype=torch.int32, device=device)


def op_checks(device, fwd_step, bwd_step, kv_step, label):
    """opcheck of the three operators on `device`, fwd with inputs that require grad (its autograd
    and fa2::bwd through AOT), and the fake kernels under FakeTensorMode."""
    gen = torch.Generator(device=device).manual_seed(0)
    f16, b16 = torch.float16, torch.bfloat16
    fp, bp, kp = fa2.library_path(fwd_step), fa2.library_path(bwd_step), fa2.library_path(kv_step)
    fwd, bwd, kv = torch.ops.fa2.fwd.default, torch.ops.fa2.bwd.default, torch.ops.fa2.fwd_kvcache.default
    for nq, nk, hq, hkv, d, causal, dtype in ((64, 64, 4, 4, 64, True, f16), (40, 100, 4, 2, 128, False, b16)):
        q = randn(2, nq, hq, d, device=device, dtype=dtype, grad=True, gen=gen)
        k = randn(2, nk, hkv, d, device=device, dtype=dtype, grad=True, gen=gen)
        v = randn(2, nk, hkv, d, device=device, dtype=dtype, grad=True, gen=gen)
        shape = f"B2 H{hq}/{hkv} Nq{nq} Nk{nk} d{d} {'causal' if causal else 'non-causal'} {dtype}"
        opcheck(f"{label} fa2::fwd {shape} (inputs require grad: backward by {os.path.basename(os.path.dirname(bp))})",
                fwd, (q, k, v, causal, None, fp, bp))
        with torch.no_grad():
            o, lse = fwd(q, k, v, causal, None, fp, bp)
        dout = torch.randn_like(o)
        opcheck(f"{label} fa2::bwd {shape}", bwd, (dout, q.detach(), k.detach(), v.detach(), o, lse, causal, None, bp))
    # a strided q ([B, H, N, d] storage seen as [B, N, H, d]) and a scale
    q = randn(1, 4, 80, 64, device=device, dtype=f16, gen=gen).transpose(1, 2)
    opcheck(f"{label} fa2::fwd strided q, scale 0.3", fwd, (q, q, q, False, 0.3, fp, fp))
    # fwd_kvcache: pages with per-sequence lengths, a dense cache with one int length
    k, v, table, lens = paged_cache(gen, device, b16, [0, 17, 200], 16, 2, 128)
    q = randn(3, 1, 8, 128, device=device, dtype=b16, gen=gen)
    opcheck(f"{label} fa2::fwd_kvcache pages of 16, lengths 0/17/200, GQA 8:2", kv,
            (q, k, v, lens, table, False, None, kp))
    kd, vd = (randn(3, 96, 2, 128, device=device, dtype=b16, gen=gen) for _ in range(2))
    q4 = randn(3, 4, 8, 128, device=device, dtype=b16, gen=gen)
    opcheck(f"{label} fa2::fwd_kvcache dense, cache_seqlen 70, causal Nq 4", kv,
            (q4, kd, vd, None, None, True, None, kp, 70))

    def fake():
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode() as mode:
            fq = mode.from_tensor(torch.empty(2, 33, 8, 64, dtype=f16, device=device))
            fk = mode.from_tensor(torch.empty(2, 50, 2, 64, dtype=f16, device=device))
            o, lse = fwd(fq, fk, fk, True, None, fp, bp)
            dq, dk, dv = bwd(o, fq, fk, fk, o, lse, True, None, bp)
        want = ((2, 33, 8, 64), (2, 8, 33), (2, 33, 8, 64), (2, 50, 2, 64))
        got = tuple(tuple(t.shape) for t in (o, lse, dq, dk))
        return (got == want and lse.dtype == torch.float32 and o.dtype == f16 and dv.shape == fk.shape,
                f"shapes {got}, want {want}")
    attempt(f"{label} fake kernels under FakeTensorMode: O, LSE and dQ, dK, dV shapes without running a step", fake)


class Block(torch.nn.Module):
    """Attention (GQA 4:2, causal) through fa2.attention and an MLP, in the model's dtype."""

    def __init__(self, width, heads, kv_heads, step, bwd_step):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, width // heads
        self.step, self.bwd_step = step, bwd_step
        self.qkv = torch.nn.Linear(width, (heads + 2 * kv_heads) * self.d)
        self.out = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(), torch.nn.Linear(2 * width, width))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).split([self.heads * self.d, self.kv_heads * self.d, self.kv_heads * self.d], dim=-1)
        o = fa2.attention(q.view(b, n, self.heads, self.d), k.view(b, n, self.kv_heads, self.d),
                          v.view(b, n, self.kv_heads, self.d), causal=True, step=self.step, backward_step=self.bwd_step)
        x = x + self.out(o.reshape(b, n, -1))
        return x + self.mlp(x)


def compile_check(device, step, bwd_step, backend, label):
    """A two-block model through fa2.attention compiled with fullgraph=True (a graph break would
    raise): its loss and gradients against the same model in eager."""
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    model = torch.nn.Sequential(Block(256, 4, 2, step, bwd_step), Block(256, 4, 2, step, bwd_step)).to(device, dtype)
    x = torch.randn(2, 96, 256, device=device).to(dtype)

    def loss_and_grads(fn):
        model.zero_grad(set_to_none=True)
        loss = fn(x).float().pow(2).mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    def run():
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend=backend)
        loss_c, grads_c = loss_and_grads(compiled)
        loss_e, grads_e = loss_and_grads(model)
        worst = max(rel(a, b) for a, b in zip(grads_c, grads_e))
        err = rel(loss_c, loss_e)
        tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
        return err <= tol and worst <= tol, f"loss rel {err:.1e}, worst gradient rel L2 {worst:.1e} (allowed {tol})"
    attempt(f"{label} torch.compile(fullgraph=True, backend={backend!r}) of a model calling fa2.attention: "
            f"forward and backward, as in eager", run)


def cuda_graph_decode(step):
    """One decode step (B4, Hq32/Hkv8, d128, bf16, pages of 16, per-sequence lengths) captured in a
    CUDA graph; replayed after the lengths, the table and q change in place, against eager calls."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    b16 = torch.bfloat16
    k, v, table, lens = paged_cache(gen, "cuda", b16, [1000, 1, 300, 2048], 16, 8, 128)
    q = randn(4, 1, 32, 128, device="cuda", dtype=b16, gen=gen)

    def call():
        return fa2.attention_with_kvcache(q, k, v, cache_seqlens=lens, block_table=table, step=step)

    def run():
        with torch.no_grad():
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                call()  # warm-up: the step's workspace is allocated and zeroed here, once
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                o_graph = call()
            details, ok = [], True
            for i, new_lens in enumerate(([1000, 1, 300, 2048], [5, 2048, 0, 777], [2048, 2047, 16, 17])):
                lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
                table.copy_(table.roll(1, dims=0))
                q.copy_(randn(4, 1, 32, 128, device="cuda", dtype=b16, gen=gen))
                graph.replay()
                want = call()
                torch.cuda.synchronize()
                same = torch.equal(o_graph, want)
                ok = ok and same
                details.append(f"replay {i} lengths {new_lens}: {'identical' if same else 'DIFFERENT'}")
        return ok, "; ".join(details)
    attempt(f"CUDA graph of step {step}'s decode (pages of 16, per-sequence lengths) captured once, replayed with "
            "new lengths, table and q: O as eager calls give", run)

    def attention_graph():
        q2, k2, v2 = (randn(2, 256, 8, 64, device="cuda", dtype=torch.float16, gen=gen) for _ in range(3))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fa2.attention(q2, k2, v2, causal=True, step=step)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            o = fa2.attention(q2, k2, v2, causal=True, step=step)
        q2.copy_(torch.randn_like(q2))
        g.replay()
        want = fa2.attention(q2, k2, v2, causal=True, step=step)
        torch.cuda.synchronize()
        return torch.equal(o, want), "replayed O differs from an eager call"
    attempt(f"CUDA graph of fa2.attention (step {step}) captured and replayed with a new q", attention_graph)


def workspace_reuse(step):
    """KV-cache calls of several shapes back to back on one stream (the step's workspace shared by
    them: a call with more rows than the last finds the last one's partial results where its own
    counters go), each against step 00 on the CPU."""
    def run():
        gen = torch.Generator(device="cuda").manual_seed(3)
        tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
        lens = [0, 1, 63, 64, 65, 1000]
        details, ok = [], True
        for hq, hkv, nq, dtype in ((4, 1, 2, torch.float16), (8, 2, 3, torch.bfloat16), (4, 1, 1, torch.float16),
                                   (8, 2, 4, torch.bfloat16), (8, 2, 3, torch.bfloat16)):
            k, v, table, seqlens = paged_cache(gen, "cuda", dtype, lens, 64, hkv, 64)
            q = randn(len(lens), nq, hq, 64, device="cuda", dtype=dtype, gen=gen)
            with torch.no_grad():
                o = fa2.attention_with_kvcache(q, k, v, seqlens, table, causal=True, step=step)
                want = fa2.attention_with_kvcache(*(t.cpu() for t in (q, k, v, seqlens, table)), causal=True,
                                                  step="00")
            err = rel(o.cpu(), want)
            ok = ok and err <= tol[dtype]
            details.append(f"H{hq}/{hkv} Nq{nq}: {err:.1e}")
        return ok, ", ".join(details)
    attempt(f"step {step}: KV-cache calls of five shapes in a row on one stream, each as step 00 computes it", run)


def set_attention(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:  # older transformers
        model.config._attn_implementation = name


def sdpa_provider(fwd_step, bwd_step, decode_step):
    """fa2.activate_sdpa inside a transformers Llama (tiny, GQA 8:2, d128, bf16, random weights):
    prefill logits, one decode step over the cache and a training step's gradients against torch's
    flash backend, each at most as far from it as twice torch's eager attention is (plus 1e-3);
    the provider's counts show the steps ran with SDPA left to choose its backend; dropout and a
    refused head dim run torch's kernel; deactivate_sdpa gives torch's flash logits again, bit for
    bit, and SDPA's backend order as it was."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        print("SKIP the SDPA provider in a transformers Llama: transformers is not installed", flush=True)
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=1024, intermediate_size=2048, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=128, max_position_embeddings=1024)
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).cuda()
    tokens = torch.randint(0, 512, (2, 256), device="cuda")

    def outputs():
        """Prefill logits, the next token's logits over the cache, and a training step's gradients."""
        with torch.no_grad():
            out = model(tokens[:, :-1], use_cache=True)
            step = model(tokens[:, -1:], past_key_values=out.past_key_values, use_cache=True)
        model.zero_grad(set_to_none=True)
        loss = model(tokens, labels=tokens).loss
        loss.backward()
        grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        return out.logits.float(), step.logits.float(), grads

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        flash = outputs()
    set_attention(model, "eager")
    eager = outputs()
    set_attention(model, "sdpa")
    # SDPA sets its backend order on its first call that may choose (cuDNN first on sm90 in torch
    # 2.11): the order to come back to after deactivate_sdpa is that one, read before activation
    zeros = torch.zeros(1, 1, 1, 64, dtype=torch.float16, device="cuda")
    F.scaled_dot_product_attention(zeros, zeros, zeros)
    priority = torch._C._get_sdp_priority_order()
    try:
        fa2.activate_sdpa(fwd_step, bwd_step, decode_step)
    except Exception as e:  # noqa: BLE001
        report(False, "fa2.activate_sdpa", f"{type(e).__name__}: {e}")
        return
    try:
        steps = outputs()  # SDPA left to choose: the provider puts its flash path first
        counts = fa2.sdpa_counts()
        names = ("prefill logits", "decode logits", "training gradients")
        details, ok = [], True
        for name, s, e, f in zip(names, steps, eager, flash):
            err, bound = rel(s, f), 2 * rel(e, f) + 1e-3
            ok = ok and err <= bound
            details.append(f"{name} rel L2 {err:.2e} (eager's {rel(e, f):.2e})")
        report(ok, f"SDPA provider (forward {fwd_step}, backward {bwd_step}, decode {decode_step}) in a Llama: "
               "as close to torch's flash backend as eager attention", "; ".join(details))
        print("# " + "; ".join(details), flush=True)
        report(counts["steps_forward"] >= 3 * config.num_hidden_layers and counts["steps_backward"]
               >= config.num_hidden_layers and counts["torch_forward"] == 0 and counts["torch_backward"] == 0,
               f"the steps computed every flash call of the Llama: {counts}", str(counts))

        # what the steps cannot compute: torch's kernel, no error
        gen = torch.Generator(device="cuda").manual_seed(2)
        q, k, v = (randn(1, 4, 128, 128, device="cuda", dtype=torch.float16, gen=gen) for _ in range(3))
        before = fa2.sdpa_counts()["torch_forward"]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        report(fa2.sdpa_counts()["torch_forward"] == before + 1 and bool(torch.isfinite(o).all()),
               "SDPA with dropout_p=0.5 under the provider runs torch's flash kernel")
        q, k, v = (randn(1, 4, 128, 32, device="cuda", dtype=torch.float16, gen=gen, grad=True) for _ in range(3))
        before = fa2.sdpa_counts()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.sum().backward()
        after = fa2.sdpa_counts()
        fell = after["torch_forward"] - before["torch_forward"], after["torch_backward"] - before["torch_backward"]
        report(fell == (1, 1), f"SDPA at head dim 32 (the steps refuse it) runs torch's forward and backward: {fell}",
               f"{before} -> {after}")
    finally:
        fa2.deactivate_sdpa()
    from torch.nn.attention import current_flash_attention_impl

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        again = outputs()
    # logits bit for bit; the gradients to torch's own run-to-run spread (its backward adds dQ
    # with atomics, in no fixed order)
    same = torch.equal(again[0], flash[0]) and torch.equal(again[1], flash[1])
    grad_err = rel(again[2], flash[2])
    restored = torch._C._get_sdp_priority_order() == priority
    report(same and grad_err <= 1e-3 and current_flash_attention_impl() is None and restored,
           "deactivate_sdpa: torch's flash kernels again (the Llama's logits bit for bit as before activation, "
           f"gradients rel L2 {grad_err:.1e}; SDPA's backend order as before)",
           f"logits identical {same}, gradients rel L2 {grad_err:.1e}, order restored {restored}")


def main():
    mode = sys.argv[1] if len(sys.argv) == 2 else ""
    if mode not in ("--cpu", "--gpu"):
        print(__doc__.split("usage: ")[1], file=sys.stderr)
        return 2
    if mode == "--cpu":
        op_checks("cpu", "00", "00", "00", "CPU step 00:")
        compile_check("cpu", "00", "00", "aot_eager", "CPU step 00:")
        return 1 if failures else 0
    if not torch.cuda.is_available():
        print("SKIP the operators on the GPU: torch sees no CUDA device", flush=True)
        return 0
    fwd_step, bwd_step = fa2.default_sdpa_steps()
    op_checks("cuda", fwd_step, bwd_step, "13", f"GPU steps {fwd_step}/{bwd_step}/13:")
    compile_check("cuda", fwd_step, bwd_step, "inductor", f"GPU steps {fwd_step}/{bwd_step}:")
    cuda_graph_decode("13")
    if os.path.exists(os.path.join(ROOT, "build", "step00", "libfa2.so")):
        workspace_reuse("13")
    sdpa_provider(fwd_step, bwd_step, "13")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
