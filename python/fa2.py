"""The steps of this repository as PyTorch operators, and SDPA's flash path through them.

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

The calls are operators of torch's dispatcher, from a small C++ extension (python/fa2_ext.cpp,
built into build/torch/ by `make torch` or on the first import): torch.ops.fa2.fwd,
torch.ops.fa2.bwd and torch.ops.fa2.fwd_kvcache, each with a schema, one kernel for CPU (step
00) and CUDA, a fake kernel that gives shapes (torch.compile traces them with no graph break),
and autograd registered on fwd. Their `step` argument is the path of a step's libfa2.so
(library_path("07")); attention() and attention_with_kvcache() are thin wrappers over them.

Differentiable: where torch's grad mode is on and q, k or v requires grad, fa2::fwd records a
node whose backward runs fa2::bwd, fa2_backward of backward_step (default: the forward's step)
on dO, the saved q, k, v, O and LSE, on torch's current stream; its refusal (the GPU steps but
14 and 15 compute the forward alone) raises ValueError from .backward() with the step's own
reason. dQ, dK and dV come back dense, in the dtype; LSE, returned with return_lse, is not
differentiable. Elsewhere the call is the plain forward, with no autograd node.
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
outside the pool is the caller's error there, as in fa2.h. Nothing in the call waits for the
GPU, so a CUDA graph captures it, lengths and pages included. Forward only: where grad mode is
on and q, k_cache or v_cache requires grad it raises ValueError rather than return an O that
gradients would silently not flow through (call it under torch.no_grad() or
torch.inference_mode()).

SDPA itself through the steps (torch 2.11 or newer):
    fa2.activate_sdpa()          # F.scaled_dot_product_attention's flash path runs the steps
    fa2.deactivate_sdpa()        # torch's own kernels again
activate_sdpa(forward_step, backward_step, decode_step) registers the steps with
torch.nn.attention.register_flash_attention_impl as the kernels of SDPA's flash path (12 and 15
on compute capability 9.0, 07 and 14 elsewhere; decode_step, 13, for at most
decode_max_seqlen_q query rows); what they refuse, and dropout, runs torch's own kernel.
The libraries come from `make all` (build/stepNN/libfa2.so); fa2.Step is the same library
through ctypes (its fa2_params struct as Fa2Params), as tools/bench_torch.py calls it.
"""
import ctypes
import glob
import numbers
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


class Step:
    """One step's libfa2.so through ctypes: its name, key change and device, and what it supports
    (the operators call it from C++; tools/bench_torch.py times its fa2_forward bare)."""

    def __init__(self, path):
        self.path = path
        self.lib = lib = ctypes.CDLL(path)
        lib.fa2_forward.argtypes = [ctypes.POINTER(Fa2Params), ctypes.c_void_p]
        lib.fa2_supports.argtypes = [ctypes.POINTER(Fa2Params), ctypes.c_char_p, ctypes.c_size_t]
        lib.fa2_workspace_size.argtypes = [ctypes.POINTER(Fa2Params)]
        lib.fa2_workspace_size.restype = ctypes.c_size_t
        for name in ("fa2_name", "fa2_key_change"):
            getattr(lib, name).restype = ctypes.c_char_p
        self.name = lib.fa2_name().decode()
        self.key_change = lib.fa2_key_change().decode()
        self.runs_on_gpu = bool(lib.fa2_runs_on_gpu())

    def workspace_size(self, p):
        return self.lib.fa2_workspace_size(ctypes.byref(p))

    def supports(self, p):
        why = ctypes.create_string_buffer(256)
        return bool(self.lib.fa2_supports(ctypes.byref(p), why, len(why))), why.value.decode()


_steps = {}


def library_path(step):
    """The path of a step's libfa2.so from a step id ("07", 7, "07_tuned") or a path; ValueError
    for a step that does not exist, FileNotFoundError for one not built."""
    if isinstance(step, int) and not isinstance(step, bool):
        step = f"{step:02d}"
    if not isinstance(step, str):
        raise ValueError(f"step {step!r} (allowed: a step id such as '07', or the path of a libfa2.so)")
    if os.path.sep in step or step.endswith(".so"):
        path = os.path.abspath(step)
    else:
        dirs = sorted(glob.glob(os.path.join(ROOT, "steps", step[:2] + "_*")))
        if not step[:2].isdigit() or not dirs:
            have = ", ".join(os.path.basename(d) for d in sorted(glob.glob(os.path.join(ROOT, "steps", "[0-9][0-9]_*"))))
            raise ValueError(f"step '{step}' is not allowed (allowed: {have})")
        path = os.path.join(ROOT, "build", "step" + step[:2], "libfa2.so")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is not built: run `make all` in {ROOT} first")
    return path


def step_library(step):
    """A Step (ctypes) from a step id ("07", 7, "07_tuned") or the path of a libfa2.so, loaded once."""
    path = library_path(step)
    if path not in _steps:
        _steps[path] = Step(path)
    return _steps[path]


def _built_paths():
    """Every built step's library under each name a caller may give it ("07", 7, "07_tuned"), found
    once: a call then costs one dict lookup (and torch.compile traces it)."""
    paths = {}
    for d in sorted(glob.glob(os.path.join(ROOT, "steps", "[0-9][0-9]_*"))):
        name = os.path.basename(d)
        path = os.path.join(ROOT, "build", "step" + name[:2], "libfa2.so")
        if os.path.exists(path):
            paths[name[:2]] = paths[name] = paths[int(name[:2])] = path
    return paths


_PATHS = _built_paths()


def _path(step):
    return _PATHS.get(step) or library_path(step)


# ---- the operators ------------------------------------------------------------------------------
try:
    import torch
except ImportError:  # the ctypes part above needs no torch
    torch = None

EXTENSION_DIR = os.path.join(ROOT, "build", "torch")
_extension = None  # the loaded fa2_ext.so (ctypes), once built


def build_extension(verbose=False):
    """Builds python/fa2_ext.cpp into build/torch/fa2_ext.so with torch's cpp_extension (ninja; a
    no-op when it is up to date) and loads it into the dispatcher. Returns the library's path."""
    global _extension
    from torch.utils import cpp_extension

    cuda_home = cpp_extension.CUDA_HOME or "/usr/local/cuda"
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    os.makedirs(EXTENSION_DIR, exist_ok=True)
    cpp_extension.load(name="fa2_ext", sources=[os.path.join(ROOT, "python", "fa2_ext.cpp")],
                       build_directory=EXTENSION_DIR, is_python_module=False, verbose=verbose,
                       extra_include_paths=[os.path.join(ROOT, "common"), os.path.join(cuda_home, "include")],
                       extra_cflags=["-O2"], extra_ldflags=[f"-L{torch_lib}", "-lc10_cuda", "-ltorch_cuda", "-ldl"])
    path = os.path.join(EXTENSION_DIR, "fa2_ext.so")
    _extension = ctypes.CDLL(path)  # the same library the dispatcher loaded: the provider's switch
    _extension.fa2_ext_sdpa_activate.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_long,
                                                 ctypes.c_char_p, ctypes.c_size_t]
    _extension.fa2_ext_sdpa_count.restype = ctypes.c_long
    return path


def _check_fake_devices(step, named):
    """In a fake kernel: each tensor on the device step computes on and on q's (the real kernel's
    rule and words), so a trace refuses what a call would."""
    s = step_library(step)
    q = named[0][1]
    for name, t in named:
        if t is not None and ((t.device.type == "cuda") != s.runs_on_gpu or t.device != q.device):
            where = "one CUDA device" if s.runs_on_gpu else "the CPU"
            raise ValueError(f"{name} on {t.device} (allowed: {where}, for step {s.name})")


def _register_fakes():
    """Fake kernels: the outputs' shapes, dtypes and strides, as the real kernels give them (O dense
    like q, LSE [batch, heads_q, seqlen_q] float32, dQ/dK/dV dense like q, k, v)."""

    def out_lse(q):
        return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)

    @torch.library.register_fake("fa2::fwd")
    def _(q, k, v, causal, scale, step, backward_step):
        _check_fake_devices(step, (("q", q), ("k", k), ("v", v)))
        return out_lse(q)

    @torch.library.register_fake("fa2::bwd")
    def _(dout, q, k, v, out, lse, causal, scale, step):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    @torch.library.register_fake("fa2::fwd_kvcache")
    def _(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale, step, cache_seqlen=None):
        _check_fake_devices(step, (("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                                   ("block_table", block_table), ("cache_seqlens", cache_seqlens)))
        return out_lse(q)


if torch is not None:
    build_extension()
    _register_fakes()
    _fwd, _bwd, _fwd_kvcache = torch.ops.fa2.fwd.default, torch.ops.fa2.bwd.default, torch.ops.fa2.fwd_kvcache.default


def _not_tensors(named):
    """After the operator refused its arguments: a ValueError naming the first that is not a tensor."""
    for name, t, layout in named:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: a 4-D torch tensor {layout} is required")


def attention(q, k, v, causal=False, scale=None, step="07", return_lse=False, backward_step=None):
    """softmax(scale q k^T) v through one step of this repository (see the module's text)."""
    path = _path(step)
    bpath = path if backward_step is None else _path(backward_step)
    try:
        o, lse = _fwd(q, k, v, causal, scale, path, bpath)
    except (TypeError, RuntimeError):
        layout = "[batch, seqlen, heads, head_dim]"
        _not_tensors((("q", q, layout), ("k", k, layout), ("v", v, layout)))
        raise
    return (o, lse) if return_lse else o


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, block_table=None, causal=False, scale=None,
                           step="13", return_lse=False):
    """softmax(scale q k^T) v over a KV cache, each sequence to its own length, K and V dense or in
    pages through block_table (see the module's text; the names as flash_attn_with_kvcache's)."""
    path = _path(step)
    lens, n = cache_seqlens, None
    if lens is not None and not isinstance(lens, torch.Tensor):
        if isinstance(lens, bool) or not isinstance(lens, numbers.Integral):
            raise ValueError(f"cache_seqlens {lens!r} (allowed: None, an int, or an int32 tensor [batch])")
        lens, n = None, int(lens)
    if block_table is not None and not isinstance(block_table, torch.Tensor):
        raise ValueError(f"block_table {block_table!r} (allowed: None, or an int32 tensor [batch, max_blocks_per_seq])")
    try:
        o, lse = _fwd_kvcache(q, k_cache, v_cache, lens, block_table, causal, scale, path, n)
    except (TypeError, RuntimeError):
        layout = ("[num_blocks, page_block_size, heads_kv, head_dim] (a block_table given)" if block_table is not None
                  else "[batch, seqlen_cache, heads_kv, head_dim] (no block_table)")
        _not_tensors((("q", q, "[batch, seqlen_q, heads_q, head_dim]"), ("k_cache", k_cache, layout),
                      ("v_cache", v_cache, layout)))
        raise
    return (o, lse) if return_lse else o


# ---- the SDPA provider --------------------------------------------------------------------------
SDPA_IMPL = "FA2_STEPS"  # the name under torch.nn.attention.list_flash_attention_impls()


class _SdpaHandle:
    """What torch's registry keeps while the provider is active; remove() restores torch's kernels
    and SDPA's backend order as it was."""

    def __init__(self, priority):
        self.priority = priority

    def remove(self):
        _extension.fa2_ext_sdpa_deactivate()
        if self.priority is not None:
            torch._C._set_sdp_priority_order(self.priority)


def default_sdpa_steps():
    """(forward, backward) steps for this GPU: 12 and 15 on compute capability 9.0 (wgmma, TMA),
    07 and 14 elsewhere."""
    hopper = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    return ("12", "15") if hopper else ("07", "14")


def activate_sdpa(forward_step=None, backward_step=None, decode_step="13", decode_max_seqlen_q=16):
    """F.scaled_dot_product_attention's flash path (and aten::_flash_attention_forward/_backward)
    through the steps: forward_step's forward, backward_step's backward, and decode_step's forward
    where a call has at most decode_max_seqlen_q query rows (None: forward_step's always). Defaults
    from default_sdpa_steps(). What a step refuses (a head dim, an alignment), dropout, a debug mask,
    ragged batches and windows run torch's own flash kernel; SDPA itself sends an explicit mask to
    its other backends. SDPA's flash path comes first in its backend order while the steps are
    active (torch 2.11 puts cuDNN first on compute capability 9.0 and 10.0), as it was after. Registered through torch.nn.attention.register_flash_attention_impl, so
    torch.nn.attention.restore_flash_attention_impl() (or deactivate_sdpa()) undoes it."""
    import torch.nn.functional as F
    from torch.nn import attention as torch_attention

    if not hasattr(torch_attention, "register_flash_attention_impl"):
        raise RuntimeError(f"torch {torch.__version__} has no torch.nn.attention.register_flash_attention_impl "
                           "(torch 2.11 or newer has): the steps cannot become SDPA's flash kernels here")
    default_forward, default_backward = default_sdpa_steps()
    steps = [library_path(default_forward if forward_step is None else forward_step),
             library_path(default_backward if backward_step is None else backward_step),
             library_path(decode_step) if decode_step is not None else ""]
    for role, path in zip(("forward_step", "backward_step", "decode_step"), steps):
        if path and not step_library(path).runs_on_gpu:
            raise ValueError(f"{role} {step_library(path).name} (allowed: a GPU step: SDPA's flash path runs on CUDA)")

    def register():
        priority = None
        if torch.cuda.is_available():
            # SDPA sets its backend order on its first CUDA call (cuDNN first on compute capability
            # 9.0 and 10.0 in torch 2.11): make that call, then put the flash path first
            zeros = torch.zeros(1, 1, 1, 64, dtype=torch.float16, device="cuda")
            F.scaled_dot_product_attention(zeros, zeros, zeros)
            priority = torch._C._get_sdp_priority_order()
            flash = int(torch_attention.SDPBackend.FLASH_ATTENTION)
            torch._C._set_sdp_priority_order([flash] + [b for b in priority if b != flash])
        why = ctypes.create_string_buffer(512)
        if _extension.fa2_ext_sdpa_activate(*(p.encode() for p in steps), decode_max_seqlen_q, why, len(why)):
            if priority is not None:
                torch._C._set_sdp_priority_order(priority)
            raise RuntimeError(why.value.decode())
        return _SdpaHandle(priority)

    torch_attention.register_flash_attention_impl(SDPA_IMPL, register_fn=register)
    torch_attention.activate_flash_attention_impl(SDPA_IMPL)


def sdpa_counts():
    """Calls of SDPA's flash path since the provider was last activated: how many the steps
    computed and how many torch's kernel computed, forward and backward."""
    names = ("steps_forward", "torch_forward", "steps_backward", "torch_backward")
    return {name: _extension.fa2_ext_sdpa_count(i) for i, name in enumerate(names)}


def deactivate_sdpa():
    """torch's own kernels for SDPA's flash path again (a no-op where the steps are not active)."""
    from torch.nn import attention as torch_attention

    if torch_attention.current_flash_attention_impl() == SDPA_IMPL:
        torch_attention.restore_flash_attention_impl()


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--build"]:
        sys.exit("usage: python3 python/fa2.py --build   (builds build/torch/fa2_ext.so; `make torch` runs it)")
    print(build_extension(verbose=True))
