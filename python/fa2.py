"""A step of this repository, called from PyTorch through its shared library.

    import sys; sys.path.insert(0, "python")        # from the repository root, after `make all`
    import fa2
    o = fa2.attention(q, k, v, causal=True, step="07")
    o, lse = fa2.attention(q, k, v, return_lse=True)

q is [batch, seqlen_q, heads_q, head_dim], k and v [batch, seqlen_k, heads_kv, head_dim]
(FlashAttention-2's layout; heads_q a multiple of heads_kv for GQA), fp16 or bf16, on the GPU
for the GPU steps and on the CPU for step 00. Any strides: each step reads the tensors in
place through the fa2.h ABI (a head_dim that is not contiguous is copied first: the ABI has
no stride for it). Returns O as a new [batch, seqlen_q, heads_q, head_dim] tensor and, with
return_lse, LSE as [batch, heads_q, seqlen_q] float32. The call is ordered on torch's current
stream. What a step cannot compute raises ValueError with the step's own reason.

Differentiable: where torch's grad mode is on and q, k or v requires grad, the call goes
through a torch.autograd.Function whose backward runs fa2_backward of backward_step (default:
the forward's step) on dO, the saved q, k, v, O and LSE (the forward then always computes
LSE), on torch's current stream; its refusal (the GPU steps but 14 compute the forward
alone) raises ValueError from .backward() with the step's own reason. dQ, dK and dV come back
dense, in the dtype; LSE, returned with return_lse, is not differentiable. Elsewhere the call
is the plain forward, with no autograd in its path.
    o = fa2.attention(q.requires_grad_(), k, v, causal=True, step="00")   # CPU tensors
    (o * w).sum().backward()                                              # q.grad from step 00

A KV cache, with flash_attn_with_kvcache's argument names and layouts (fa2.h's seqlens_k and
block_table):
    o = fa2.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, block_table=table,
                                   causal=True, step="00")
q as above; k_cache and v_cache [batch, seqlen_cache, heads_kv, head_dim], or, given block_table
(int32 [batch, max_blocks_per_seq]: sequence b's pages in order), page pools [num_blocks,
page_block_size, heads_kv, head_dim] with page_block_size a power of two from 16 to 256;
cache_seqlens an int32 tensor [batch] or an int (every sequence that long): sequence b attends
to its first cache_seqlens[b] keys, at most the capacity (seqlen_cache, or max_blocks_per_seq x
page_block_size, every key of it when cache_seqlens is None). Causal is bottom-right within each
sequence; a sequence of 0 keys gives O = 0 and LSE = -inf. Step 00 computes it; for it the call
first reads the lengths and the table entries they reach (each bad one a ValueError); for a GPU
step it does not (that would wait for the stream), so a length past the capacity or a page
outside the pool is the caller's error there, as in fa2.h. The GPU steps refuse a KV cache
with their reason so far (the default, step 13, until its kernel reads pages); without
cache_seqlens and block_table the call is attention()'s. Forward only: where grad mode is on and
q, k_cache or v_cache requires grad it raises ValueError rather than return an O that gradients
would silently not flow through (call it under torch.no_grad() or torch.inference_mode()).
Needs only ctypes and torch; the libraries come from `make all` (build/stepNN/libfa2.so).
"""
import ctypes
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FA2_ERR_LAUNCH = 2  # common/fa2.h


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
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
        # the KV cache: NULL and zeros here, dense K and V of one length
        ("seqlens_k", ctypes.c_void_p), ("block_table", ctypes.c_void_p),
        ("block_table_batch_stride", ctypes.c_int64),
        ("max_pages", ctypes.c_int), ("page_size", ctypes.c_int), ("num_pages", ctypes.c_int),
    ]


class Fa2BwdParams(ctypes.Structure):
    """fa2_bwd_params of common/fa2.h, field for field."""
    _fields_ = [
        ("fwd", Fa2Params),
        ("dout", ctypes.c_void_p), ("dq", ctypes.c_void_p), ("dk", ctypes.c_void_p), ("dv", ctypes.c_void_p),
        ("dout_batch_stride", ctypes.c_int64), ("dout_row_stride", ctypes.c_int64), ("dout_head_stride", ctypes.c_int64),
        ("dq_batch_stride", ctypes.c_int64), ("dq_row_stride", ctypes.c_int64), ("dq_head_stride", ctypes.c_int64),
        ("dk_batch_stride", ctypes.c_int64), ("dk_row_stride", ctypes.c_int64), ("dk_head_stride", ctypes.c_int64),
        ("dv_batch_stride", ctypes.c_int64), ("dv_row_stride", ctypes.c_int64), ("dv_head_stride", ctypes.c_int64),
    ]


class Step:
    """One step's libfa2.so with the fa2.h functions typed."""

    def __init__(self, path):
        self.path = path
        self.lib = lib = ctypes.CDLL(path)
        lib.fa2_forward.argtypes = [ctypes.POINTER(Fa2Params), ctypes.c_void_p]
        lib.fa2_supports.argtypes = [ctypes.POINTER(Fa2Params), ctypes.c_char_p, ctypes.c_size_t]
        lib.fa2_workspace_size.argtypes = [ctypes.POINTER(Fa2Params)]
        lib.fa2_workspace_size.restype = ctypes.c_size_t
        lib.fa2_backward.argtypes = [ctypes.POINTER(Fa2BwdParams), ctypes.c_void_p]
        lib.fa2_backward_supports.argtypes = [ctypes.POINTER(Fa2BwdParams), ctypes.c_char_p, ctypes.c_size_t]
        lib.fa2_backward_workspace_size.argtypes = [ctypes.POINTER(Fa2BwdParams)]
        lib.fa2_backward_workspace_size.restype = ctypes.c_size_t
        for name in ("fa2_name", "fa2_key_change", "fa2_last_error"):
            getattr(lib, name).restype = ctypes.c_char_p
        self.name = lib.fa2_name().decode()
        self.key_change = lib.fa2_key_change().decode()
        self.runs_on_gpu = bool(lib.fa2_runs_on_gpu())

    def workspace_size(self, p):
        return self.lib.fa2_workspace_size(ctypes.byref(p))

    def supports(self, p):
        why = ctypes.create_string_buffer(256)
        return bool(self.lib.fa2_supports(ctypes.byref(p), why, len(why))), why.value.decode()

    def forward(self, p, stream):
        self._check(self.lib.fa2_forward(ctypes.byref(p), ctypes.c_void_p(stream)), "fa2_forward")

    def backward_workspace_size(self, bp):
        return self.lib.fa2_backward_workspace_size(ctypes.byref(bp))

    def backward_supports(self, bp):
        why = ctypes.create_string_buffer(256)
        return bool(self.lib.fa2_backward_supports(ctypes.byref(bp), why, len(why))), why.value.decode()

    def backward(self, bp, stream):
        self._check(self.lib.fa2_backward(ctypes.byref(bp), ctypes.c_void_p(stream)), "fa2_backward")

    def _check(self, rc, call):
        if rc == FA2_ERR_LAUNCH:
            raise RuntimeError(f"step {self.name}: {self.lib.fa2_last_error().decode()}")
        if rc:
            raise RuntimeError(f"step {self.name}: {call} returned {rc}")


_steps = {}


def step_library(step):
    """A Step from a step id ("07", 7, "07_tuned") or the path of a libfa2.so, loaded once."""
    if isinstance(step, int):
        step = f"{step:02d}"
    if os.path.sep in step or step.endswith(".so"):
        path = os.path.abspath(step)
    else:
        dirs = sorted(glob.glob(os.path.join(ROOT, "steps", step[:2] + "_*")))
        if not step[:2].isdigit() or not dirs:
            have = ", ".join(os.path.basename(d) for d in sorted(glob.glob(os.path.join(ROOT, "steps", "[0-9][0-9]_*"))))
            raise ValueError(f"step '{step}' is not allowed (allowed: {have})")
        path = os.path.join(ROOT, "build", "step" + step[:2], "libfa2.so")
    if path not in _steps:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is not built: run `make all` in {ROOT} first")
        _steps[path] = Step(path)
    return _steps[path]


def _strides(t):
    """(batch, row, head) element strides of a [batch, seqlen, heads, head_dim] tensor. A dim of
    size 1 is never stepped over, so it gets the stride a contiguous tensor would have: torch
    leaves any value there (0 after expand), which the ABI would refuse."""
    b, n, h, d = t.shape
    dense = (n * h * d, h * d, d)
    return tuple(dense[i] if size == 1 else t.stride(i) for i, size in enumerate((b, n, h)))


def _set_strides(p, prefix, t):
    batch_stride, row_stride, head_stride = _strides(t)
    setattr(p, f"{prefix}_batch_stride", batch_stride)
    setattr(p, f"{prefix}_row_stride", row_stride)
    setattr(p, f"{prefix}_head_stride", head_stride)


def _check_device(s, name, t, q):
    """t on q's device, the one step s computes on."""
    if (t.device.type == "cuda") != s.runs_on_gpu or t.device != q.device:
        where = "one CUDA device" if s.runs_on_gpu else "the CPU"
        raise ValueError(f"{name} on {t.device} (allowed: {where}, for step {s.name})")


def _checked_inputs(s, named):
    """The (name, tensor, layout) triples, q first: each a 4-D fp16 or bf16 tensor of q's dtype on
    step s's device, returned with head_dim contiguous (copied where it is not: the ABI has no
    stride for it)."""
    import torch

    q = named[0][1]
    names = ", ".join(name for name, _, _ in named)
    for name, t, layout in named:
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: a 4-D torch tensor {layout} is required")
        if t.dtype not in (torch.float16, torch.bfloat16) or t.dtype != q.dtype:
            raise ValueError(f"{name} dtype {t.dtype} (allowed: float16 or bfloat16, the same for {names})")
        _check_device(s, name, t, q)
    return tuple(t if t.stride(-1) == 1 else t.contiguous() for _, t, _ in named)


def _params(q, k, v, o, lse, causal, scale, seqlens_k=None, block_table=None):
    """Fa2Params for checked tensors (lse None: not wanted); the workspace is left for the caller.
    A KV cache (fa2.h), checked: seqlens_k int32 [batch], and with block_table int32 [batch,
    max_pages] k and v are page pools [num_pages, page_size, heads_kv, head_dim] whose batch
    stride is the page's; seqlen_k is then the capacity, max_pages x page_size."""
    import torch

    batch, seqlen_q, heads_q, head_dim = q.shape
    p = Fa2Params()
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    p.lse = lse.data_ptr() if lse is not None else None
    p.batch, p.heads_q, p.heads_kv = batch, heads_q, k.shape[2]
    p.seqlen_q, p.seqlen_k, p.head_dim = seqlen_q, k.shape[1], head_dim
    for prefix, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        _set_strides(p, prefix, t)
    p.softmax_scale = head_dim ** -0.5 if scale is None else scale
    p.causal = int(bool(causal))
    p.dtype = 0 if q.dtype == torch.float16 else 1
    if seqlens_k is not None:
        p.seqlens_k = seqlens_k.data_ptr()
    if block_table is not None:
        p.block_table = block_table.data_ptr()
        p.max_pages, p.page_size, p.num_pages = block_table.shape[1], k.shape[1], k.shape[0]
        # one row: its stride is never stepped over (torch may leave any value there, as _strides says)
        p.block_table_batch_stride = block_table.stride(0) if batch > 1 else p.max_pages
        p.seqlen_k = p.max_pages * p.page_size
    return p


def _stream(s, device):
    import torch

    return torch.cuda.current_stream(device).cuda_stream if s.runs_on_gpu else 0


def _forward(s, q, k, v, causal, scale, return_lse, seqlens_k=None, block_table=None):
    """O, and LSE where return_lse (else None), from step s on checked tensors (and KV cache)."""
    import torch

    batch, seqlen_q, heads_q, _ = q.shape
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, heads_q, seqlen_q, dtype=torch.float32, device=q.device) if return_lse else None
    p = _params(q, k, v, o, lse, causal, scale, seqlens_k, block_table)
    # The step's scratch (split-KV partial results and the tiles' arrival counters), from
    # torch's caching allocator on the current stream: reused memory after the first call,
    # and safe across streams. Zero-filled, once per allocation, as fa2.h asks: the counters
    # must be zero when a call begins (the step leaves them so when it ends).
    need = s.workspace_size(p)
    workspace = torch.zeros(need, dtype=torch.uint8, device=q.device) if need else None
    p.workspace, p.workspace_bytes = (workspace.data_ptr(), need) if need else (None, 0)
    ok, why = s.supports(p)
    if not ok:
        raise ValueError(f"step {s.name}: {why}")
    s.forward(p, _stream(s, q.device))
    return o, lse


def _backward(s, q, k, v, o, lse, dout, causal, scale):
    """dQ, dK, dV (dense, in the dtype) from fa2_backward of step s."""
    import torch

    dout = dout.contiguous()
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    bp = Fa2BwdParams()
    bp.fwd = _params(q, k, v, o, lse, causal, scale)
    bp.dout, bp.dq, bp.dk, bp.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    for prefix, t in (("dout", dout), ("dq", dq), ("dk", dk), ("dv", dv)):
        _set_strides(bp, prefix, t)
    # dQ's fp32 accumulators and D (steps 00 and 14); torch's allocations are 16-byte aligned.
    need = s.backward_workspace_size(bp)
    workspace = torch.empty(need, dtype=torch.uint8, device=q.device) if need else None
    bp.fwd.workspace, bp.fwd.workspace_bytes = (workspace.data_ptr(), need) if need else (None, 0)
    # The step's own reason first (a GPU step without a backward says so whatever the device).
    ok, why = s.backward_supports(bp)
    if not ok:
        raise ValueError(why if s.name in why else f"step {s.name}: {why}")
    _check_device(s, "backward", q, q)
    s.backward(bp, _stream(s, q.device))
    return dq, dk, dv


_function = None


def _attention_function():
    """The torch.autograd.Function, made once torch is imported (the module itself needs no torch)."""
    global _function
    if _function is None:
        import torch
        from torch.autograd.function import once_differentiable

        class Attention(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, causal, scale, step, backward_step):
                o, lse = _forward(step, q, k, v, causal, scale, True)  # the backward needs LSE
                ctx.save_for_backward(q, k, v, o, lse)
                ctx.causal, ctx.scale, ctx.backward_step = causal, scale, backward_step
                ctx.mark_non_differentiable(lse)
                return o, lse

            @staticmethod
            @once_differentiable
            def backward(ctx, dout, _dlse):
                q, k, v, o, lse = ctx.saved_tensors
                grads = _backward(ctx.backward_step, q, k, v, o, lse, dout, ctx.causal, ctx.scale)
                return tuple(g if need else None for g, need in zip(grads, ctx.needs_input_grad)) + (None,) * 4

        _function = Attention
    return _function


def attention(q, k, v, causal=False, scale=None, step="07", return_lse=False, backward_step=None):
    """softmax(scale q k^T) v through one step of this repository (see the module's text)."""
    import torch

    s = step_library(step)
    layout = "[batch, seqlen, heads, head_dim]"
    q, k, v = _checked_inputs(s, (("q", q, layout), ("k", k, layout), ("v", v, layout)))
    batch, seqlen_q, heads_q, head_dim = q.shape
    if k.shape != v.shape or k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"k {tuple(k.shape)}, v {tuple(v.shape)} for q {tuple(q.shape)} "
                         "(allowed: k and v [batch, seqlen_k, heads_kv, head_dim] with q's batch and head_dim)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        bs = s if backward_step is None else step_library(backward_step)
        o, lse = _attention_function().apply(q, k, v, causal, scale, s, bs)
        return (o, lse) if return_lse else o
    o, lse = _forward(s, q, k, v, causal, scale, return_lse)
    return (o, lse) if return_lse else o


def _cache_seqlens(s, cache_seqlens, q, capacity, what):
    """cache_seqlens as an int32 tensor [batch] on q's device, or None (every sequence capacity
    keys long); an int gives every sequence that many keys."""
    import numbers

    import torch

    batch = q.shape[0]
    if cache_seqlens is None:
        return None
    if isinstance(cache_seqlens, numbers.Integral) and not isinstance(cache_seqlens, bool):
        if not 0 <= cache_seqlens <= capacity:
            raise ValueError(f"cache_seqlens {cache_seqlens} (allowed: 0 to {capacity}, {what})")
        return torch.full((batch,), int(cache_seqlens), dtype=torch.int32, device=q.device)
    if not isinstance(cache_seqlens, torch.Tensor):
        raise ValueError(f"cache_seqlens {cache_seqlens!r} (allowed: None, an int, or an int32 tensor [batch])")
    if cache_seqlens.dtype != torch.int32:
        raise ValueError(f"cache_seqlens dtype {cache_seqlens.dtype} (allowed: torch.int32, a key count per sequence)")
    if tuple(cache_seqlens.shape) != (batch,):
        raise ValueError(f"cache_seqlens {tuple(cache_seqlens.shape)} for q {tuple(q.shape)} "
                         f"(allowed: [batch] = ({batch},), a key count per sequence)")
    _check_device(s, "cache_seqlens", cache_seqlens, q)
    return cache_seqlens if cache_seqlens.stride(0) == 1 else cache_seqlens.contiguous()


def _block_table(s, block_table, q, k_cache):
    """block_table checked against q and the page pool k_cache, as an int32 tensor [batch,
    max_pages] whose rows are max_pages or more elements apart (copied where they are not)."""
    import torch

    if not isinstance(block_table, torch.Tensor):
        raise ValueError(f"block_table {block_table!r} (allowed: None, or an int32 tensor [batch, max_blocks_per_seq])")
    if block_table.dtype != torch.int32:
        raise ValueError(f"block_table dtype {block_table.dtype} (allowed: torch.int32, indices of pages of k_cache)")
    if block_table.dim() != 2 or block_table.shape[0] != q.shape[0] or block_table.shape[1] < 1:
        raise ValueError(f"block_table {tuple(block_table.shape)} for q {tuple(q.shape)} "
                         "(allowed: [batch, max_blocks_per_seq], q's batch, at least one entry per sequence)")
    _check_device(s, "block_table", block_table, q)
    if block_table.stride(1) != 1 or (block_table.shape[0] > 1 and block_table.stride(0) < block_table.shape[1]):
        block_table = block_table.contiguous()  # e.g. one row expanded over the batch (stride 0)
    return block_table


def _check_cache_values(seqlens, block_table, batch, capacity, what, k_cache):
    """The lengths and the table entries the keys reach, read on the host: a length past the
    capacity or a page outside the pool (fa2.h leaves both to the caller; step 00 would refuse
    them with no reason), each in one line naming the entry."""
    lens = seqlens.tolist() if seqlens is not None else [capacity] * batch
    for b, n in enumerate(lens):
        if not 0 <= n <= capacity:
            raise ValueError(f"cache_seqlens[{b}] = {n} (allowed: 0 to {capacity}, {what})")
    if block_table is None:
        return
    num_pages, page_size = k_cache.shape[:2]
    for b, n in enumerate(lens):
        reached = block_table[b, :(n + page_size - 1) // page_size]
        bad = ((reached < 0) | (reached >= num_pages)).nonzero()
        if bad.numel():
            e = int(bad[0, 0])
            raise ValueError(f"block_table[{b}][{e}] = {int(reached[e])} (allowed: 0 to {num_pages - 1}, a page of "
                             f"k_cache and v_cache, in every entry sequence {b}'s {n} keys reach)")


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, block_table=None, causal=False, scale=None,
                           step="13", return_lse=False):
    """softmax(scale q k^T) v over a KV cache, each sequence to its own length, K and V dense or in
    pages through block_table (see the module's text; the names as flash_attn_with_kvcache's)."""
    import torch

    s = step_library(step)
    paged = block_table is not None
    layout = ("[num_blocks, page_block_size, heads_kv, head_dim] (a block_table given)" if paged
              else "[batch, seqlen_cache, heads_kv, head_dim] (no block_table)")
    named = (("q", q, "[batch, seqlen_q, heads_q, head_dim]"), ("k_cache", k_cache, layout),
             ("v_cache", v_cache, layout))
    q, k_cache, v_cache = _checked_inputs(s, named)
    if torch.is_grad_enabled() and any(t.requires_grad for _, t, _ in named):
        name = next(name for name, t, _ in named if t.requires_grad)
        raise ValueError(f"{name} requires grad (allowed: no autograd, as no step has a backward over a KV cache: "
                         "call it under torch.no_grad() or torch.inference_mode(), or pass detached tensors)")
    batch, _, _, head_dim = q.shape
    if k_cache.shape != v_cache.shape or k_cache.shape[3] != head_dim or (not paged and k_cache.shape[0] != batch):
        same = "head_dim" if paged else "batch and head_dim"
        raise ValueError(f"k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)} for q {tuple(q.shape)} "
                         f"(allowed: k_cache and v_cache {layout}, with q's {same})")
    if paged:
        block_table = _block_table(s, block_table, q, k_cache)
        capacity = block_table.shape[1] * k_cache.shape[1]
        what = f"block_table's {block_table.shape[1]} entries of {k_cache.shape[1]}-key pages"
    else:
        capacity, what = k_cache.shape[1], "k_cache's seqlen_cache"
    seqlens = _cache_seqlens(s, cache_seqlens, q, capacity, what)
    if not s.runs_on_gpu:  # on the GPU, reading them would wait for the stream: the caller's (fa2.h)
        _check_cache_values(seqlens, block_table, batch, capacity, what, k_cache)
    o, lse = _forward(s, q, k_cache, v_cache, causal, scale, return_lse, seqlens, block_table)
    return (o, lse) if return_lse else o
