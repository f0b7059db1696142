// fa2_ext.cpp - the steps as PyTorch operators, registered with the dispatcher.
//
//   fa2::fwd(q, k, v, causal, scale, step, backward_step) -> (out, lse)
//   fa2::bwd(dout, q, k, v, out, lse, causal, scale, step) -> (dq, dk, dv)
//   fa2::fwd_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale, step,
//                    cache_seqlen) -> (out, lse)
//
// `step` is the path of a step's libfa2.so (python/fa2.py resolves "07" to it). Every step
// exports the same C ABI (common/fa2.h), so one kernel serves them all: the library is opened
// once with dlopen(RTLD_LOCAL) and its functions kept, and a call fills fa2_params from the
// tensors, allocates the outputs from torch's allocator and launches on torch's current
// stream. A step that needs a workspace gets one per device and stream, zero-filled once when
// it is allocated (fa2.h: the step leaves its counters zero at the end of every call), grown
// when a call needs more, never cleared per call. The same kernel is registered for CPU
// (step 00 computes on the host) and CUDA; a tensor on the wrong device for the step is a
// ValueError naming it. fwd has autograd on the operator (an Autograd kernel whose node calls
// fa2::bwd); fwd_kvcache refuses autograd in one line. The fake (meta) kernels that give
// shapes for torch.compile are registered from python/fa2.py.
//
// The SDPA provider: fa2_ext_sdpa_activate() registers kernels for the aten ops of SDPA's
// flash path (_scaled_dot_product_flash_attention, _flash_attention_forward and their
// backwards) on the CUDA key; what the chosen step refuses, and what no step computes
// (dropout, ragged batches, windows, ALiBi), runs torch's own kernel (at::native), so the
// provider never turns a call it cannot compute into an error. fa2_ext_sdpa_deactivate()
// removes them, and torch's kernels are the CUDA kernels again.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_flash_attention_backward_native.h>
#include <ATen/ops/_flash_attention_forward_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_backward_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_native.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fa2.h"

namespace {

using at::Tensor;

// ---- a step's library, opened once --------------------------------------------------------
struct Step {
    std::string name;
    bool gpu = false;
    int (*forward)(const fa2_params *, void *) = nullptr;
    int (*supports)(const fa2_params *, char *, size_t) = nullptr;
    size_t (*workspace_size)(const fa2_params *) = nullptr;
    int (*backward)(const fa2_bwd_params *, void *) = nullptr;
    int (*backward_supports)(const fa2_bwd_params *, char *, size_t) = nullptr;
    size_t (*backward_workspace_size)(const fa2_bwd_params *) = nullptr;
    const char *(*last_error)() = nullptr;
};

std::mutex steps_mutex;

const Step &step_at(c10::string_view path)
{
    // a handful of libraries, compared in place: a call allocates nothing to find its step
    static std::vector<std::pair<std::string, std::unique_ptr<Step>>> steps;
    std::lock_guard<std::mutex> lock(steps_mutex);
    for (auto &entry : steps)
        if (c10::string_view(entry.first) == path) return *entry.second;
    std::string file(path);
    void *h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK_VALUE(h, "step library ", path, " does not load: ", dlerror());
    auto s = std::make_unique<Step>();
    auto sym = [&](const char *name) {
        void *f = dlsym(h, name);
        TORCH_CHECK_VALUE(f, "step library ", path, " exports no ", name, " (common/fa2.h)");
        return f;
    };
    s->forward = reinterpret_cast<decltype(s->forward)>(sym("fa2_forward"));
    s->supports = reinterpret_cast<decltype(s->supports)>(sym("fa2_supports"));
    s->workspace_size = reinterpret_cast<decltype(s->workspace_size)>(sym("fa2_workspace_size"));
    s->backward = reinterpret_cast<decltype(s->backward)>(sym("fa2_backward"));
    s->backward_supports = reinterpret_cast<decltype(s->backward_supports)>(sym("fa2_backward_supports"));
    s->backward_workspace_size =
        reinterpret_cast<decltype(s->backward_workspace_size)>(sym("fa2_backward_workspace_size"));
    s->last_error = reinterpret_cast<decltype(s->last_error)>(sym("fa2_last_error"));
    s->name = reinterpret_cast<const char *(*)()>(sym("fa2_name"))();
    s->gpu = reinterpret_cast<int (*)()>(sym("fa2_runs_on_gpu"))() != 0;
    steps.emplace_back(file, std::move(s));
    return *steps.back().second;
}

// ---- words as Python prints them: shapes as tuples, dtypes as torch.float16 -----------------
// The messages carry numbers as strings: std::to_string, not an ostream's number formatting,
// which an extension built against another C++ runtime than the one loaded can break (seen on
// the H200's image: a segfault in the first number a message printed).
std::string num(int64_t x) { return std::to_string(x); }

std::string shape_str(const Tensor &t)
{
    std::string s = "(";
    for (int64_t i = 0; i < t.dim(); i++) s += (i ? ", " : "") + num(t.size(i));
    return s + (t.dim() == 1 ? ",)" : ")");
}

std::string dtype_str(const Tensor &t) { return "torch." + c10::getDtypeNames(t.scalar_type()).first; }

// t on the device step s computes on, and on q's.
void check_device(const Step &s, const char *name, const Tensor &t, const Tensor &q)
{
    TORCH_CHECK_VALUE(t.is_cuda() == s.gpu && t.device() == q.device(), name, " on ", t.device().str(),
                      " (allowed: ", s.gpu ? "one CUDA device" : "the CPU", ", for step ", s.name, ")");
}

// Each a 4-D fp16 or bf16 tensor of q's dtype on the step's device; head_dim made contiguous
// where it is not (the ABI has no stride for it).
struct Named {
    const char *name;
    Tensor *t;
    const char *layout;
};

void check_inputs(const Step &s, Named *named, int n)
{
    const Tensor &q = *named[0].t;
    auto names = [&]() {
        std::string all;
        for (int i = 0; i < n; i++) all += std::string(i ? ", " : "") + named[i].name;
        return all;
    };
    for (int i = 0; i < n; i++) {
        const Tensor &t = *named[i].t;
        TORCH_CHECK_VALUE(t.dim() == 4, named[i].name, ": a 4-D torch tensor ", named[i].layout, " is required");
        auto st = t.scalar_type();
        TORCH_CHECK_VALUE((st == at::kHalf || st == at::kBFloat16) && st == q.scalar_type(), named[i].name,
                          " dtype ", dtype_str(t), " (allowed: float16 or bfloat16, the same for ", names(), ")");
        check_device(s, named[i].name, t, q);
    }
    for (int i = 0; i < n; i++)
        if (named[i].t->stride(3) != 1) *named[i].t = named[i].t->contiguous();
}

// (batch, row, head) element strides; a dim of size 1 is never stepped over, so it gets the
// stride a contiguous tensor would have (torch may leave any value there, 0 after expand).
void strides3(const Tensor &t, int64_t *batch, int64_t *row, int64_t *head)
{
    int64_t n = t.size(1), h = t.size(2), d = t.size(3);
    *batch = t.size(0) == 1 ? n * h * d : t.stride(0);
    *row = n == 1 ? h * d : t.stride(1);
    *head = h == 1 ? d : t.stride(2);
}

fa2_params make_params(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &o, const Tensor &lse,
                       bool causal, std::optional<double> scale)
{
    fa2_params p{};
    p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.o = o.data_ptr();
    p.lse = lse.defined() ? lse.data_ptr<float>() : nullptr;
    p.batch = (int)q.size(0), p.seqlen_q = (int)q.size(1), p.heads_q = (int)q.size(2), p.head_dim = (int)q.size(3);
    p.seqlen_k = (int)k.size(1), p.heads_kv = (int)k.size(2);
    strides3(q, &p.q_batch_stride, &p.q_row_stride, &p.q_head_stride);
    strides3(k, &p.k_batch_stride, &p.k_row_stride, &p.k_head_stride);
    strides3(v, &p.v_batch_stride, &p.v_row_stride, &p.v_head_stride);
    strides3(o, &p.o_batch_stride, &p.o_row_stride, &p.o_head_stride);
    p.softmax_scale = scale.has_value() ? (float)*scale : 1.0f / std::sqrt((float)q.size(3));
    p.causal = causal ? 1 : 0;
    p.dtype = q.scalar_type() == at::kHalf ? FA2_FP16 : FA2_BF16;
    return p;
}

// ---- workspaces: one per (device, stream), zero-filled once when allocated -----------------
// fa2.h: a forward's workspace begins with counters (fa2_workspace_counter_bytes) that a step
// leaves zero at the end of every call, and the rest it writes before it reads. One buffer
// serves calls of every shape on its stream, so a call with more counters than the last may
// find there what the last wrote as partial results: the buffer remembers how many of its
// leading bytes are known to be zero, and a call that needs more counters than that clears the
// difference first (once per growth, not per call: a model's calls repeat their shapes).
struct Workspace {
    Tensor t;
    size_t zero_prefix = 0;  // leading bytes known to be zero (forward only)
};

struct Workspaces {
    std::mutex mutex;
    std::unordered_map<uint64_t, Workspace> forward, backward;
};

Workspaces &workspaces()
{
    static auto *w = new Workspaces();  // never destroyed: its tensors outlive no allocator
    return *w;
}

uint64_t stream_key(const Tensor &q, void *stream)
{
    return (reinterpret_cast<uint64_t>(stream) << 8) ^ (uint64_t)(q.device().index() + 1) ^
           (q.is_cuda() ? 0x80 : 0);
}

// The workspace of a call of `need` bytes whose first `counters` bytes must be zero (a forward)
// or that may hold anything (counters = 0, a backward). While the stream is capturing a CUDA
// graph, a workspace of the call's own from the caching allocator (the graph's pool), zeroed by
// a memset the graph replays, as torch does for any temporary: kept in `temp` until the call is
// launched; the graph then owns that memory and no later call outside it touches it.
void *workspace(const Tensor &q, void *stream, size_t need, size_t counters, bool forward, Tensor &temp)
{
    if (!need) return nullptr;
    auto opts = q.options().dtype(at::kByte);
    if (q.is_cuda() && c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) {
        temp = forward ? at::zeros({(int64_t)need}, opts) : at::empty({(int64_t)need}, opts);
        return temp.data_ptr();
    }
    Workspaces &all = workspaces();
    std::lock_guard<std::mutex> lock(all.mutex);
    Workspace &w = (forward ? all.forward : all.backward)[stream_key(q, stream)];
    if (!w.t.defined() || (size_t)w.t.numel() < need) {
        // on the current stream, before the call that uses it; the old one goes back to the
        // caching allocator, stream-ordered after the calls that used it
        w.t = forward ? at::zeros({(int64_t)need}, opts) : at::empty({(int64_t)need}, opts);
        w.zero_prefix = forward ? need : 0;
    }
    if (forward) {
        if (counters > w.zero_prefix) w.t.narrow(0, (int64_t)w.zero_prefix, (int64_t)(counters - w.zero_prefix)).zero_();
        // after the call: its counters zero again, the bytes after them its partial results
        w.zero_prefix = need > counters ? counters : std::max(w.zero_prefix, counters);
    }
    return w.t.data_ptr();
}

void *current_stream(const Step &s, const Tensor &q)
{
    return s.gpu ? (void *)c10::cuda::getCurrentCUDAStream(q.device().index()).stream() : nullptr;
}

// Runs the forward; where the step refuses the params (nothing computed), a ValueError with
// the step's reason if raise, else false.
bool run_forward(const Step &s, fa2_params &p, const Tensor &q, bool raise)
{
    void *stream = current_stream(s, q);
    size_t need = s.workspace_size(&p);
    Tensor temp;
    p.workspace = workspace(q, stream, need, need ? fa2_workspace_counter_bytes(&p) : 0, true, temp);
    p.workspace_bytes = need;
    int rc = s.forward(&p, stream);
    if (rc == FA2_OK) return true;
    if (rc == FA2_ERR_UNSUPPORTED) {
        if (!raise) return false;
        char why[256] = "";
        s.supports(&p, why, sizeof why);
        TORCH_CHECK_VALUE(false, "step ", s.name, ": ", why);
    }
    TORCH_CHECK(rc != FA2_ERR_LAUNCH, "step ", s.name, ": ", s.last_error());
    TORCH_CHECK(false, "step ", s.name, ": fa2_forward returned ", num(rc));
}

// O as q (dense) and LSE [batch, heads_q, seqlen_q] float32: what every forward returns, from
// torch's caching allocator.
std::tuple<Tensor, Tensor> forward_outputs(const Tensor &q)
{
    return {at::empty(q.sizes(), q.options()),
            at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat))};
}

// ---- fa2::fwd --------------------------------------------------------------------------------
std::tuple<Tensor, Tensor> fwd(const Tensor &q_in, const Tensor &k_in, const Tensor &v_in, bool causal,
                               std::optional<double> scale, c10::string_view step, c10::string_view backward_step)
{
    const Step &s = step_at(step);
    Tensor q = q_in, k = k_in, v = v_in;
    const char *layout = "[batch, seqlen, heads, head_dim]";
    Named named[] = {{"q", &q, layout}, {"k", &k, layout}, {"v", &v, layout}};
    check_inputs(s, named, 3);
    TORCH_CHECK_VALUE(k.sizes() == v.sizes() && k.size(0) == q.size(0) && k.size(3) == q.size(3), "k ",
                      shape_str(k), ", v ", shape_str(v), " for q ", shape_str(q),
                      " (allowed: k and v [batch, seqlen_k, heads_kv, head_dim] with q's batch and head_dim)");
    c10::OptionalDeviceGuard guard;
    if (s.gpu) guard.reset_device(q.device());
    auto [o, lse] = forward_outputs(q);
    fa2_params p = make_params(q, k, v, o, lse, causal, scale);
    run_forward(s, p, q, true);
    return {o, lse};
}

// ---- fa2::bwd --------------------------------------------------------------------------------
bool run_backward(const Step &s, const Tensor &dout_in, const Tensor &q_in, const Tensor &k_in, const Tensor &v_in,
                  const Tensor &o_in, const Tensor &lse, bool causal, std::optional<double> scale, const Tensor &dq,
                  const Tensor &dk, const Tensor &dv, bool raise)
{
    auto c = [](const Tensor &t) { return t.stride(-1) == 1 ? t : t.contiguous(); };
    Tensor q = c(q_in), k = c(k_in), v = c(v_in), o = c(o_in), dout = c(dout_in);
    fa2_bwd_params bp{};
    bp.fwd = make_params(q, k, v, o, lse, causal, scale);
    bp.dout = dout.data_ptr(), bp.dq = dq.data_ptr(), bp.dk = dk.data_ptr(), bp.dv = dv.data_ptr();
    strides3(dout, &bp.dout_batch_stride, &bp.dout_row_stride, &bp.dout_head_stride);
    strides3(dq, &bp.dq_batch_stride, &bp.dq_row_stride, &bp.dq_head_stride);
    strides3(dk, &bp.dk_batch_stride, &bp.dk_row_stride, &bp.dk_head_stride);
    strides3(dv, &bp.dv_batch_stride, &bp.dv_row_stride, &bp.dv_head_stride);
    auto refuse = [&]() {
        char why[256] = "";
        if (s.backward_supports(&bp, why, sizeof why)) return;
        std::string w(why);
        TORCH_CHECK_VALUE(false, w.find(s.name) != std::string::npos ? w : "step " + s.name + ": " + w);
    };
    if (raise && q.is_cuda() != s.gpu) {
        refuse();  // the step's own reason first (a GPU step without a backward says so on any device)
        check_device(s, "backward", q, q);
    }
    size_t need = s.backward_workspace_size(&bp);
    void *stream = current_stream(s, q);
    Tensor temp;
    bp.fwd.workspace = workspace(q, stream, need, 0, false, temp), bp.fwd.workspace_bytes = need;
    int rc = s.backward(&bp, stream);
    if (rc == FA2_OK) return true;
    if (rc == FA2_ERR_UNSUPPORTED) {
        if (!raise) return false;
        refuse();
    }
    TORCH_CHECK(rc != FA2_ERR_LAUNCH, "step ", s.name, ": ", s.last_error());
    TORCH_CHECK(false, "step ", s.name, ": fa2_backward returned ", num(rc));
}

std::tuple<Tensor, Tensor, Tensor> bwd(const Tensor &dout, const Tensor &q, const Tensor &k, const Tensor &v,
                                       const Tensor &o, const Tensor &lse, bool causal, std::optional<double> scale,
                                       c10::string_view step)
{
    const Step &s = step_at(step);
    c10::OptionalDeviceGuard guard;
    if (s.gpu && q.is_cuda()) guard.reset_device(q.device());
    // dQ, dK, dV dense, in the dtype
    Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(k.sizes(), k.options()),
           dv = at::empty(v.sizes(), v.options());
    run_backward(s, dout, q, k, v, o, lse, causal, scale, dq, dk, dv, true);
    return {dq, dk, dv};
}

// ---- fa2::fwd_kvcache ------------------------------------------------------------------------
std::tuple<Tensor, Tensor> fwd_kvcache(const Tensor &q_in, const Tensor &k_in, const Tensor &v_in,
                                       const std::optional<Tensor> &cache_seqlens, const std::optional<Tensor> &table_in,
                                       bool causal, std::optional<double> scale, c10::string_view step,
                                       std::optional<int64_t> cache_seqlen)
{
    const Step &s = step_at(step);
    Tensor q = q_in, k = k_in, v = v_in;
    const bool paged = table_in.has_value();
    const char *layout = paged ? "[num_blocks, page_block_size, heads_kv, head_dim] (a block_table given)"
                               : "[batch, seqlen_cache, heads_kv, head_dim] (no block_table)";
    Named named[] = {{"q", &q, "[batch, seqlen_q, heads_q, head_dim]"}, {"k_cache", &k, layout}, {"v_cache", &v, layout}};
    check_inputs(s, named, 3);
    const int64_t batch = q.size(0);
    TORCH_CHECK_VALUE(k.sizes() == v.sizes() && k.size(3) == q.size(3) && (paged || k.size(0) == batch), "k_cache ",
                      shape_str(k), ", v_cache ", shape_str(v), " for q ", shape_str(q), " (allowed: k_cache and v_cache ",
                      layout, ", with q's ", paged ? "head_dim" : "batch and head_dim", ")");
    Tensor table;
    int64_t capacity;
    std::string what;
    if (paged) {
        table = *table_in;
        TORCH_CHECK_VALUE(table.scalar_type() == at::kInt, "block_table dtype ", dtype_str(table),
                          " (allowed: torch.int32, indices of pages of k_cache)");
        TORCH_CHECK_VALUE(table.dim() == 2 && table.size(0) == batch && table.size(1) >= 1, "block_table ",
                          shape_str(table), " for q ", shape_str(q),
                          " (allowed: [batch, max_blocks_per_seq], q's batch, at least one entry per sequence)");
        check_device(s, "block_table", table, q);
        if (table.stride(1) != 1 || (table.size(0) > 1 && table.stride(0) < table.size(1)))
            table = table.contiguous();  // e.g. one row expanded over the batch (stride 0)
        capacity = table.size(1) * k.size(1);
        what = "block_table's " + std::to_string(table.size(1)) + " entries of " + std::to_string(k.size(1)) +
               "-key pages";
    } else {
        capacity = k.size(1);
        what = "k_cache's seqlen_cache";
    }
    c10::OptionalDeviceGuard guard;
    if (s.gpu) guard.reset_device(q.device());
    Tensor lens;
    if (cache_seqlen.has_value()) {
        int64_t n = *cache_seqlen;
        TORCH_CHECK_VALUE(0 <= n && n <= capacity, "cache_seqlens ", num(n), " (allowed: 0 to ", num(capacity), ", ", what, ")");
        lens = at::full({batch}, n, q.options().dtype(at::kInt));
    } else if (cache_seqlens.has_value()) {
        lens = *cache_seqlens;
        TORCH_CHECK_VALUE(lens.scalar_type() == at::kInt, "cache_seqlens dtype ", dtype_str(lens),
                          " (allowed: torch.int32, a key count per sequence)");
        TORCH_CHECK_VALUE(lens.dim() == 1 && lens.size(0) == batch, "cache_seqlens ", shape_str(lens), " for q ",
                          shape_str(q), " (allowed: [batch] = (", num(batch), ",), a key count per sequence)");
        check_device(s, "cache_seqlens", lens, q);
        if (lens.stride(0) != 1) lens = lens.contiguous();
    }
    if (!s.gpu) {
        // step 00 reads the lengths and the table entries they reach on the host: each bad one
        // a ValueError naming it (on the GPU reading them would wait for the stream: fa2.h
        // leaves them to the caller)
        std::vector<int64_t> n(batch, capacity);
        if (lens.defined()) {
            auto a = lens.accessor<int32_t, 1>();
            for (int64_t b = 0; b < batch; b++) n[b] = a[b];
        }
        for (int64_t b = 0; b < batch; b++)
            TORCH_CHECK_VALUE(0 <= n[b] && n[b] <= capacity, "cache_seqlens[", num(b), "] = ", num(n[b]), " (allowed: 0 to ",
                              num(capacity), ", ", what, ")");
        if (paged) {
            auto a = table.accessor<int32_t, 2>();
            int64_t num_pages = k.size(0), page_size = k.size(1);
            for (int64_t b = 0; b < batch; b++)
                for (int64_t e = 0; e < (n[b] + page_size - 1) / page_size; e++)
                    TORCH_CHECK_VALUE(0 <= a[b][e] && a[b][e] < num_pages, "block_table[", num(b), "][", num(e), "] = ", num(a[b][e]),
                                      " (allowed: 0 to ", num(num_pages - 1), ", a page of k_cache and v_cache, in every "
                                      "entry sequence ", num(b), "'s ", num(n[b]), " keys reach)");
        }
    }
    auto [o, lse] = forward_outputs(q);
    fa2_params p = make_params(q, k, v, o, lse, causal, scale);
    if (lens.defined()) p.seqlens_k = lens.data_ptr<int32_t>();
    if (paged) {
        p.block_table = table.data_ptr<int32_t>();
        p.max_pages = (int)table.size(1), p.page_size = (int)k.size(1), p.num_pages = (int)k.size(0);
        // one row: its stride is never stepped over (torch may leave any value there)
        p.block_table_batch_stride = batch > 1 ? table.stride(0) : table.size(1);
        p.seqlen_k = p.max_pages * p.page_size;
    }
    run_forward(s, p, q, true);
    return {o, lse};
}

// ---- autograd on the operators ---------------------------------------------------------------
const c10::TypedOperatorHandle<decltype(fwd)> &fwd_op()
{
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fa2::fwd", "").typed<decltype(fwd)>();
    return op;
}

const c10::TypedOperatorHandle<decltype(bwd)> &bwd_op()
{
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fa2::bwd", "").typed<decltype(bwd)>();
    return op;
}

const c10::TypedOperatorHandle<decltype(fwd_kvcache)> &fwd_kvcache_op()
{
    static auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("fa2::fwd_kvcache", "").typed<decltype(fwd_kvcache)>();
    return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Attention : public torch::autograd::Function<Attention> {
    static variable_list forward(AutogradContext *ctx, const Tensor &q, const Tensor &k, const Tensor &v, bool causal,
                                 std::optional<double> scale, const std::string &step, const std::string &bstep)
    {
        at::AutoDispatchBelowADInplaceOrView below;
        auto [o, lse] = fwd_op().call(q, k, v, causal, scale, step, bstep);
        ctx->save_for_backward({q, k, v, o, lse});
        ctx->saved_data["causal"] = causal;
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["bstep"] = bstep;
        ctx->mark_non_differentiable({lse});
        return {o, lse};
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads)
    {
        auto saved = ctx->get_saved_variables();
        Tensor dout = grads[0].defined() ? grads[0] : at::zeros_like(saved[3]);
        auto [dq, dk, dv] = bwd_op().call(dout, saved[0], saved[1], saved[2], saved[3], saved[4],
                                          ctx->saved_data["causal"].toBool(),
                                          ctx->saved_data["scale"].toOptional<double>(),
                                          ctx->saved_data["bstep"].toStringRef());
        return {ctx->needs_input_grad(0) ? dq : Tensor(), ctx->needs_input_grad(1) ? dk : Tensor(),
                ctx->needs_input_grad(2) ? dv : Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    }
};

std::tuple<Tensor, Tensor> fwd_autograd(const Tensor &q, const Tensor &k, const Tensor &v, bool causal,
                                        std::optional<double> scale, c10::string_view step, c10::string_view bstep)
{
    if (!(at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()))) {
        at::AutoDispatchBelowADInplaceOrView below;  // no node: the plain forward
        return fwd_op().call(q, k, v, causal, scale, step, bstep);
    }
    auto out = Attention::apply(q, k, v, causal, scale, std::string(step), std::string(bstep));
    return {out[0], out[1]};
}

std::tuple<Tensor, Tensor> fwd_kvcache_autograd(const Tensor &q, const Tensor &k, const Tensor &v,
                                                const std::optional<Tensor> &lens, const std::optional<Tensor> &table,
                                                bool causal, std::optional<double> scale, c10::string_view step,
                                                std::optional<int64_t> cache_seqlen)
{
    if (at::GradMode::is_enabled()) {
        const char *names[] = {"q", "k_cache", "v_cache"};
        const Tensor *ts[] = {&q, &k, &v};
        for (int i = 0; i < 3; i++)
            TORCH_CHECK_VALUE(!ts[i]->requires_grad(), names[i],
                              " requires grad (allowed: no autograd, as no step has a backward over a KV cache: call it "
                              "under torch.no_grad() or torch.inference_mode(), or pass detached tensors)");
    }
    at::AutoDispatchBelowADInplaceOrView below;
    return fwd_kvcache_op().call(q, k, v, lens, table, causal, scale, step, cache_seqlen);
}

// ---- the SDPA provider -----------------------------------------------------------------------
struct Sdpa {
    const Step *forward = nullptr, *backward = nullptr, *decode = nullptr;
    int64_t decode_max_seqlen_q = 0;
    std::unique_ptr<torch::Library> lib;
    // calls the steps computed and calls torch's kernels computed, forward and backward, since
    // the last activation (tests and tools/bench_torch.py read them)
    std::atomic<int64_t> counts[4] = {};
};

Sdpa &sdpa()
{
    static auto *s = new Sdpa();
    return *s;
}

// A window size as torch's own flash kernels take it: a plain int, or none.
std::optional<int64_t> opt_int(const std::optional<c10::SymInt> &x)
{
    return x.has_value() ? std::optional<int64_t>(x->expect_int()) : std::nullopt;
}

bool sdpa_dtype_ok(const Tensor &q, const Tensor &k, const Tensor &v)
{
    auto st = q.scalar_type();
    return (st == at::kHalf || st == at::kBFloat16) && k.scalar_type() == st && v.scalar_type() == st &&
           q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.device() == q.device() && v.device() == q.device() &&
           k.sizes() == v.sizes() && q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1;
}

// O [B, Nq, Hq, d] dense and LSE from a step, for [B, N, H, d] views; undefined where the
// step refuses (the caller then runs torch's kernel).
std::tuple<Tensor, Tensor> sdpa_forward(const Tensor &q, const Tensor &k, const Tensor &v, bool causal,
                                        std::optional<double> scale)
{
    Sdpa &a = sdpa();
    const Step &s = (a.decode && q.size(1) <= a.decode_max_seqlen_q) ? *a.decode : *a.forward;
    c10::cuda::CUDAGuard guard(q.device());
    auto [o, lse] = forward_outputs(q);
    fa2_params p = make_params(q, k, v, o, lse, causal, scale);
    if (!run_forward(s, p, q, false)) return {};
    a.counts[0]++;
    return {o, lse};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> sdpa_flash_forward(
    const Tensor &q, const Tensor &k, const Tensor &v, const std::optional<Tensor> &cum_seq_q,
    const std::optional<Tensor> &cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal,
    bool return_debug_mask, std::optional<double> scale, std::optional<c10::SymInt> window_left,
    std::optional<c10::SymInt> window_right, const std::optional<Tensor> &seqused_k,
    const std::optional<Tensor> &alibi_slopes)
{
    if (!cum_seq_q.has_value() && !cum_seq_k.has_value() && dropout_p == 0.0 && !return_debug_mask &&
        !window_left.has_value() && !window_right.has_value() && !seqused_k.has_value() &&
        !alibi_slopes.has_value() && sdpa_dtype_ok(q, k, v)) {
        auto [o, lse] = sdpa_forward(q, k, v, is_causal, scale);
        if (o.defined()) {
            auto u64 = q.options().dtype(at::kUInt64);
            return {o, lse, at::empty({2}, u64), at::empty({}, u64), at::empty({0}, q.options())};
        }
    }
    sdpa().counts[1]++;
    return at::native::_flash_attention_forward(q, k, v, cum_seq_q, cum_seq_k, max_q.expect_int(), max_k.expect_int(),
                                                dropout_p, is_causal, return_debug_mask, scale, opt_int(window_left),
                                                opt_int(window_right), seqused_k, alibi_slopes);
}

std::tuple<Tensor, Tensor, Tensor> sdpa_flash_backward(
    const Tensor &dout, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &o, const Tensor &lse,
    const Tensor &cum_seq_q, const Tensor &cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p,
    bool is_causal, const Tensor &rng_state, const Tensor &unused, std::optional<double> scale,
    std::optional<c10::SymInt> window_left, std::optional<c10::SymInt> window_right)
{
    Sdpa &a = sdpa();
    if (!cum_seq_q.defined() && !cum_seq_k.defined() && dropout_p == 0.0 && !window_left.has_value() &&
        !window_right.has_value() && sdpa_dtype_ok(q, k, v) && lse.scalar_type() == at::kFloat && lse.dim() == 3) {
        c10::cuda::CUDAGuard guard(q.device());
        Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(k.sizes(), k.options()),
               dv = at::empty(v.sizes(), v.options());
        Tensor lse_c = lse.is_contiguous() ? lse : lse.contiguous();
        if (run_backward(*a.backward, dout, q, k, v, o, lse_c, is_causal, scale, dq, dk, dv, false)) {
            a.counts[2]++;
            return {dq, dk, dv};
        }
    }
    a.counts[3]++;
    return at::native::_flash_attention_backward(dout, q, k, v, o, lse, cum_seq_q, cum_seq_k, max_q.expect_int(),
                                                 max_k.expect_int(), dropout_p, is_causal, rng_state, unused, scale,
                                                 opt_int(window_left), opt_int(window_right));
}

// SDPA's own entry: [B, H, N, d] tensors, seen as [B, N, H, d] views by the steps.
std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor> sdpa_sdp_forward(
    const Tensor &query, const Tensor &key, const Tensor &value, double dropout_p, bool is_causal,
    bool return_debug_mask, std::optional<double> scale)
{
    if (dropout_p == 0.0 && !return_debug_mask && sdpa_dtype_ok(query, key, value)) {
        auto [o, lse] = sdpa_forward(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), is_causal,
                                     scale);
        if (o.defined()) {
            auto u64 = query.options().dtype(at::kUInt64);
            return {o.transpose(1, 2), lse, Tensor(), Tensor(), c10::SymInt(query.size(2)), c10::SymInt(key.size(2)),
                    at::empty({2}, u64), at::empty({}, u64), at::empty({0}, query.options())};
        }
    }
    // (counted where it calls _flash_attention_forward, which comes back here)
    return at::native::_scaled_dot_product_flash_attention_cuda(query, key, value, dropout_p, is_causal,
                                                                return_debug_mask, scale);
}

std::tuple<Tensor, Tensor, Tensor> sdpa_sdp_backward(const Tensor &dout, const Tensor &query, const Tensor &key,
                                                     const Tensor &value, const Tensor &out, const Tensor &lse,
                                                     const Tensor &cum_seq_q, const Tensor &cum_seq_k,
                                                     c10::SymInt max_q, c10::SymInt max_k, double dropout_p,
                                                     bool is_causal, const Tensor &philox_seed,
                                                     const Tensor &philox_offset, std::optional<double> scale)
{
    Sdpa &a = sdpa();
    if (dropout_p == 0.0 && sdpa_dtype_ok(query, key, value) && lse.scalar_type() == at::kFloat && lse.dim() == 3) {
        c10::cuda::CUDAGuard guard(query.device());
        // dQ, dK, dV as torch's kernel returns them: [B, N, H, d] dense, seen as [B, H, N, d]
        Tensor dq = at::empty({query.size(0), query.size(2), query.size(1), query.size(3)}, query.options());
        Tensor dk = at::empty({key.size(0), key.size(2), key.size(1), key.size(3)}, key.options());
        Tensor dv = at::empty({value.size(0), value.size(2), value.size(1), value.size(3)}, value.options());
        Tensor lse_c = lse.is_contiguous() ? lse : lse.contiguous();
        if (run_backward(*a.backward, dout.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2),
                         value.transpose(1, 2), out.transpose(1, 2), lse_c, is_causal, scale, dq, dk, dv, false)) {
            a.counts[2]++;
            return {dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)};
        }
    }
    // (counted where it calls _flash_attention_backward, which comes back here)
    return at::native::_scaled_dot_product_flash_attention_backward_cuda(
        dout, query, key, value, out, lse, cum_seq_q, cum_seq_k, max_q.expect_int(), max_k.expect_int(), dropout_p,
        is_causal, philox_seed, philox_offset, scale);
}

}  // namespace

// ---- registration ------------------------------------------------------------------------------
TORCH_LIBRARY(fa2, m)
{
    m.def("fwd(Tensor q, Tensor k, Tensor v, bool causal, float? scale, str step, str backward_step)"
          " -> (Tensor out, Tensor lse)");
    m.def("bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, bool causal, float? scale,"
          " str step) -> (Tensor dq, Tensor dk, Tensor dv)");
    m.def("fwd_kvcache(Tensor q, Tensor k_cache, Tensor v_cache, Tensor? cache_seqlens, Tensor? block_table,"
          " bool causal, float? scale, str step, int? cache_seqlen=None) -> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(fa2, CPU, m)
{
    m.impl("fwd", TORCH_FN(fwd));
    m.impl("bwd", TORCH_FN(bwd));
    m.impl("fwd_kvcache", TORCH_FN(fwd_kvcache));
}

TORCH_LIBRARY_IMPL(fa2, CUDA, m)
{
    m.impl("fwd", TORCH_FN(fwd));
    m.impl("bwd", TORCH_FN(bwd));
    m.impl("fwd_kvcache", TORCH_FN(fwd_kvcache));
}

TORCH_LIBRARY_IMPL(fa2, Autograd, m)
{
    m.impl("fwd", TORCH_FN(fwd_autograd));
    m.impl("bwd", torch::autograd::autogradNotImplementedFallback());  // no double backward
    m.impl("fwd_kvcache", TORCH_FN(fwd_kvcache_autograd));
}

// The provider's switch, called from python/fa2.py through ctypes: 0, or -1 with the reason
// in why.
extern "C" int fa2_ext_sdpa_activate(const char *forward, const char *backward, const char *decode,
                                     long decode_max_seqlen_q, char *why, size_t why_len)
{
    try {
        Sdpa &a = sdpa();
        a.lib.reset();
        a.forward = &step_at(forward);
        a.backward = &step_at(backward);
        a.decode = decode && *decode ? &step_at(decode) : nullptr;
        a.decode_max_seqlen_q = decode_max_seqlen_q;
        for (auto &c : a.counts) c = 0;
        TORCH_CHECK_VALUE(a.forward->gpu && a.backward->gpu && (!a.decode || a.decode->gpu),
                          "the SDPA provider needs GPU steps");
        auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CUDA, __FILE__,
                                                    __LINE__);
        lib->impl("_flash_attention_forward", TORCH_FN(sdpa_flash_forward));
        lib->impl("_flash_attention_backward", TORCH_FN(sdpa_flash_backward));
        lib->impl("_scaled_dot_product_flash_attention", TORCH_FN(sdpa_sdp_forward));
        lib->impl("_scaled_dot_product_flash_attention_backward", TORCH_FN(sdpa_sdp_backward));
        a.lib = std::move(lib);
        return 0;
    } catch (const c10::Error &e) {
        snprintf(why, why_len, "%s", e.what_without_backtrace());
        return -1;
    } catch (const std::exception &e) {
        snprintf(why, why_len, "%s", e.what());
        return -1;
    }
}

extern "C" void fa2_ext_sdpa_deactivate(void) { sdpa().lib.reset(); }

// How many calls of SDPA's flash path the steps computed (which = 0 forward, 2 backward) and
// torch's kernels computed (1 forward, 3 backward) since the provider was last activated.
extern "C" long fa2_ext_sdpa_count(int which) { return which >= 0 && which < 4 ? (long)sdpa().counts[which] : -1; }
