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
        rc = self.lib.fa2_forward(ctypes.byref(p), ctypes.c_void_p(stream))
        if rc == FA2_ERR_LAUNCH:
            raise RuntimeError(f"step {self.name}: {self.lib.fa2_last_error().decode()}")
        if rc:
            raise RuntimeError(f"step {self.name}: fa2_forward returned {rc}")


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


def attention(q, k, v, causal=False, scale=None, step="07", return_lse=False):
    """softmax(scale q k^T) v through one step of this repository (see the module's text)."""
    import torch

    s = step_library(step)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: a 4-D torch tensor [batch, seqlen, heads, head_dim] is required")
        if t.dtype not in (torch.float16, torch.bfloat16) or t.dtype != q.dtype:
            raise ValueError(f"{name} dtype {t.dtype} (allowed: float16 or bfloat16, the same for q, k, v)")
        if (t.device.type == "cuda") != s.runs_on_gpu or t.device != q.device:
            where = "one CUDA device" if s.runs_on_gpu else "the CPU"
            raise ValueError(f"{name} on {t.device} (allowed: {where}, for step {s.name})")
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    batch, seqlen_q, heads_q, head_dim = q.shape
    if k.shape != v.shape or k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"k {tuple(k.shape)}, v {tuple(v.shape)} for q {tuple(q.shape)} "
                         "(allowed: k and v [batch, seqlen_k, heads_kv, head_dim] with q's batch and head_dim)")
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, heads_q, seqlen_q, dtype=torch.float32, device=q.device) if return_lse else None

    p = Fa2Params()
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    p.lse = lse.data_ptr() if return_lse else None
    p.batch, p.heads_q, p.heads_kv = batch, heads_q, k.shape[2]
    p.seqlen_q, p.seqlen_k, p.head_dim = seqlen_q, k.shape[1], head_dim
    for prefix, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        batch_stride, row_stride, head_stride = _strides(t)
        setattr(p, f"{prefix}_batch_stride", batch_stride)
        setattr(p, f"{prefix}_row_stride", row_stride)
        setattr(p, f"{prefix}_head_stride", head_stride)
    p.softmax_scale = head_dim ** -0.5 if scale is None else scale
    p.causal = int(bool(causal))
    p.dtype = 0 if q.dtype == torch.float16 else 1
    # The step's scratch (split-KV partial results), from torch's caching allocator on the
    # current stream: reused memory after the first call, and safe across streams.
    need = s.workspace_size(p)
    workspace = torch.empty(need, dtype=torch.uint8, device=q.device) if need else None
    p.workspace, p.workspace_bytes = (workspace.data_ptr(), need) if need else (None, 0)
    ok, why = s.supports(p)
    if not ok:
        raise ValueError(f"step {s.name}: {why}")
    s.forward(p, torch.cuda.current_stream(q.device).cuda_stream if s.runs_on_gpu else 0)
    return (o, lse) if return_lse else o
