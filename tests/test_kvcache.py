#!/usr/bin/env python3
"""python/fa2.py's attention_with_kvcache against a torch reference that gathers each
sequence's keys from the cache into dense K and V and runs an fp32 softmax attention over
them (bottom-right causal within the sequence; a sequence of length 0 gives O = 0 and
LSE = -inf). K and V in pages of 16, 64 and 256 keys, shuffled through the pool, every row
no sequence owns (spare pages, the tail of a sequence's last page, the unused rows of a dense
cache) NaN, so a key read from the wrong page or past a sequence's end reaches O; lengths
0, 1, a page boundary -1/+0/+1 and long in one batch; GQA and MQA; Nq 1 to 4 and 70, causal
and not; fp16 and bf16; cache_seqlens as a tensor, an int, or none; a dense cache; a pool in
another layout, a shared page, tables strided, expanded and of one row; without a cache the
bits of fa2.attention; then each bad input, one ValueError each.
One PASS/FAIL line per case. Step 00 runs on CPU tensors; a GPU step that refuses a KV cache
must raise ValueError with its own reason, and computes the calls that carry none.
usage: python3 tests/test_kvcache.py STEP_ID...   (after make; needs torch)"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import test_torch  # noqa: E402  (its reference, checker and PASS/FAIL lines)
from test_torch import TOLERANCE, fa2, reference, rel_l2, report, torch  # noqa: E402

# Tolerances: test_torch.py's, rel L2 per dtype (fp16 2e-3, bf16 1.6e-2, the harness's), and
# LSE within 1e-2. A KV cache changes only where a key is read from, not the arithmetic (fp32
# scores and sums, P rounded to the dtype before P V, O rounded on output), so the dense
# budget holds. It is applied to each sequence apart: a long sequence's O averages many rows
# of V and is small, so one norm over the batch would hide its error behind the short ones.
LONG = 1000


def make_cache(gen, device, dtype, batch, hkv, d, capacity, lens, page_size, layout, shared, unreached):
    """The keys and values of each sequence, dense ([batch, capacity, hkv, d], read by the
    reference up to each length), and the cache the call reads: without page_size the same
    tensors with every row past a sequence's length NaN; with it, page pools of page_size rows
    in shuffled order, their rows no sequence owns NaN, and the block table [batch, max_pages]
    (capacity becomes max_pages x page_size). Entries no key reaches name a spare NaN page, or
    hold `unreached` where given. shared: sequence 1's first page is sequence 0's (same keys).
    layout "bhnd": the cache lies head-major, [.., hkv, rows, d], passed as a strided view."""
    if page_size:
        capacity = -(-capacity // page_size) * page_size
    lens = [capacity] * batch if lens is None else lens
    k, v = (torch.randn(batch, capacity, hkv, d, generator=gen, device=device).to(dtype) for _ in range(2))
    if shared:
        k[1, :page_size], v[1, :page_size] = k[0, :page_size], v[0, :page_size]
    table = None
    if not page_size:
        k_cache, v_cache = k.clone(), v.clone()
        for b, n in enumerate(lens):
            k_cache[b, n:], v_cache[b, n:] = float("nan"), float("nan")
    else:
        max_pages = capacity // page_size
        owned = [-(-n // page_size) for n in lens]
        num_pages = sum(owned) + batch + 1  # spare pages, NaN, that no sequence owns
        order = torch.randperm(num_pages, generator=gen, device=device).tolist()
        spare = order[sum(owned):]
        k_cache, v_cache = (torch.full((num_pages, page_size, hkv, d), float("nan"), dtype=dtype, device=device)
                            for _ in range(2))
        table = torch.empty(batch, max_pages, dtype=torch.int32)
        at = 0
        for b, n in enumerate(lens):
            for e in range(max_pages):
                if e >= owned[b]:
                    table[b, e] = spare[(b + e) % len(spare)] if unreached is None else unreached
                    continue
                if shared and b == 1 and e == 0:
                    table[b, e] = table[0, 0]  # sequence 0 wrote the keys (its length covers the page)
                    continue
                page, rows = order[at], min(page_size, n - e * page_size)
                at += 1
                table[b, e] = page
                k_cache[page, :rows] = k[b, e * page_size:e * page_size + rows]
                v_cache[page, :rows] = v[b, e * page_size:e * page_size + rows]
        table = table.to(device)
    if layout == "bhnd":
        k_cache, v_cache = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k_cache, v_cache))
    return k, v, k_cache, v_cache, table, lens


def check(label, dtype, q, k, v, lens, causal, scale, o, lse):
    """O and LSE of each sequence against the reference on its own keys; a sequence of length 0
    exactly O = 0 and LSE = -inf."""
    batch, nq, hq, _ = q.shape
    details, ok = [], o.shape == q.shape and lse.shape == (batch, hq, nq)
    if not bool(torch.isfinite(o).all()):
        ok = False
        details.append("O not finite (a NaN row of the cache reached it)")
    for b, n in enumerate(lens):
        if n == 0:
            empty = bool((o[b] == 0).all()) and bool(torch.isneginf(lse[b]).all())
            ok = ok and empty
            details.append(f"seq {b} (0 keys) O = 0, LSE = -inf: {empty}")
            continue
        o_ref, lse_ref = reference(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n], causal, scale)
        err = rel_l2(o[b:b + 1], o_ref)
        seen = torch.isfinite(lse_ref[0])
        lse_err = (lse[b][seen] - lse_ref[0][seen]).abs().max().item()
        if not torch.equal(lse[b][~seen], lse_ref[0][~seen]):  # causal rows with no key: exactly -inf
            lse_err = float("inf")
        ok = ok and err <= TOLERANCE[dtype] and lse_err <= 1e-2
        details.append(f"seq {b} ({n} keys) rel L2 {err:.2e}, LSE {lse_err:.1e}")
    report(ok, label, "; ".join(details) + f" (allowed rel L2 {TOLERANCE[dtype]}, LSE 1e-2)")


def attempt(s, label, *calls, kv_cache=True):
    """The calls' results, or None once one raised, its line reported: for a GPU step, a
    ValueError of one line with the step's own refusal of a KV cache passes (where kv_cache: the
    calls pass one); anything else fails, and the next case runs."""
    try:
        return [call() for call in calls]
    except ValueError as e:
        msg = str(e)
        if (kv_cache and s.runs_on_gpu and s.name in msg and "\n" not in msg
                and ("seqlens_k given" in msg or "block_table given" in msg)):
            report(True, f"{label}: raises ValueError with the step's reason: {msg}")
        else:
            report(False, label, f"ValueError: {msg}")
    except Exception as e:  # noqa: BLE001 -- a FAIL line, and the next case runs
        report(False, label, f"{type(e).__name__}: {e}")
    return None


def case(step, device, hq, hkv, nq, capacity, d, causal, dtype, page_size, lens, seqlens="tensor", layout="bnhd",
         shared=False, unreached=None, table_layout=None):
    """One call of attention_with_kvcache against the reference. seqlens: "tensor" (int32
    [batch]), "int" (lens[0] for every sequence) or None (no cache_seqlens: capacity keys)."""
    s = fa2.step_library(step)
    batch = len(lens) if lens is not None else 2
    gen = torch.Generator(device=device).manual_seed(capacity * 31 + nq * 7 + page_size + hq)
    if seqlens == "int":
        lens = [lens[0]] * batch
    k, v, k_cache, v_cache, table, lens = make_cache(gen, device, dtype, batch, hkv, d, capacity,
                                                     None if seqlens is None else lens, page_size, layout, shared,
                                                     unreached)
    if table_layout == "wide":  # a column slice of a wider table: its rows farther apart than max_pages
        wide = torch.full((batch, table.shape[1] + 3), -7, dtype=torch.int32, device=device)
        wide[:, :table.shape[1]] = table
        table = wide[:, :table.shape[1]]
    elif table_layout == "every-other-column":  # its entries 2 apart (no stride in the ABI): the binding copies it
        wide = torch.full((batch, 2 * table.shape[1]), -7, dtype=torch.int32, device=device)
        wide[:, ::2] = table
        table = wide[:, ::2]
    elif table_layout == "a column's transpose":  # one row, strides (1, 1): its row stride never stepped over
        table = table.reshape(-1, 1).t()
    q = torch.randn(batch, nq, hq, d, generator=gen, device=device).to(dtype)
    cache_seqlens = {"tensor": torch.tensor(lens, dtype=torch.int32, device=device), "int": lens[0],
                     None: None}[seqlens]
    where = f"pages of {page_size}" if page_size else "dense"
    extras = [x for x, on in ((layout, layout != "bnhd"), ("a shared page", shared),
                              (f"unreached entries {unreached}", unreached is not None),
                              (f"block table {table_layout}", table_layout)) if on]
    label = (f"{s.name} kvcache: B{batch} H{hq}/{hkv} Nq{nq} Nk<={k.shape[1]} d{d} "
             f"{'causal' if causal else 'non-causal'} {dtype} {', '.join([where] + extras)}, cache_seqlens "
             + {"tensor": "tensor " + ",".join(map(str, lens)), "int": f"int {lens[0]}", None: "none"}[seqlens])
    scale = d ** -0.5
    got = attempt(s, label, lambda: fa2.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                                               block_table=table, causal=causal, step=step,
                                                               return_lse=True))
    if got is None:
        return
    if device == "cuda":
        torch.cuda.synchronize()
    check(label, dtype, q, k, v, lens, causal, scale, *got[0])


def same_as_attention(step, device):
    """No cache_seqlens, no block table: fa2.attention's call, the same bits; return_lse=False
    gives O alone; under torch.no_grad() a q that requires grad is fine."""
    s = fa2.step_library(step)
    gen = torch.Generator(device=device).manual_seed(5)
    q, k, v = (torch.randn(2, n, h, 64, generator=gen, device=device).half() for n, h in ((3, 4), (200, 2), (200, 2)))
    label = (f"{s.name} kvcache: dense, no cache_seqlens: fa2.attention's bits; O alone without return_lse; "
             "a q that requires grad under torch.no_grad()")
    def without_grad():
        with torch.no_grad():
            return fa2.attention_with_kvcache(q.clone().requires_grad_(), k, v, causal=True, step=step)

    got = attempt(s, label, lambda: fa2.attention_with_kvcache(q, k, v, causal=True, step=step, return_lse=True),
                  lambda: fa2.attention(q, k, v, causal=True, step=step, return_lse=True),
                  lambda: fa2.attention_with_kvcache(q, k, v, causal=True, step=step), without_grad, kv_cache=False)
    if got is None:
        return
    (o, lse), (o_ref, lse_ref), o_alone, o_nograd = got
    ok = (torch.equal(o, o_ref) and torch.equal(lse, lse_ref) and isinstance(o_alone, torch.Tensor)
          and torch.equal(o_alone, o_ref) and o_nograd.grad_fn is None and torch.equal(o_nograd, o_ref))
    report(ok, label)


def expanded_table(step, device):
    """One row of block table expanded over the batch (row stride 0, which the ABI refuses: the
    binding copies it): every sequence reads the same pages, each to its own length, and gets the
    bits of the same call with the table copied out. Then one length expanded over the batch
    gives the bits of that length passed as an int."""
    s = fa2.step_library(step)
    gen = torch.Generator(device=device).manual_seed(9)
    k, v = (torch.randn(6, 16, 2, 64, generator=gen, device=device).half() for _ in range(2))
    q = torch.randn(3, 2, 4, 64, generator=gen, device=device).half()
    row = torch.tensor([[4, 0, 5]], dtype=torch.int32, device=device)
    lens = torch.tensor([48, 1, 20], dtype=torch.int32, device=device)
    one = torch.tensor([20], dtype=torch.int32, device=device).expand(3)
    for label, args, want_args in (("a block_table row expanded over the batch, as the same rows copied",
                                    (lens, row.expand(3, 3)), (lens, row.repeat(3, 1))),
                                   ("cache_seqlens expanded over the batch, as the int",
                                    (one, row.repeat(3, 1)), (20, row.repeat(3, 1)))):
        label = f"{s.name} kvcache: {label}"
        got = attempt(s, label, *(lambda a=a: fa2.attention_with_kvcache(q, k, v, *a, causal=True, step=step)
                                  for a in (args, want_args)))
        if got is not None:
            report(torch.equal(*got), label, "O differs")


def expect_error(s, name, call, want, own=False):
    """call() must raise one ValueError of one line containing `want` (and the step's name where
    the reason is the step's own)."""
    label = f"{s.name} kvcache: {name}"
    try:
        call()
    except ValueError as e:
        msg = str(e)
        ok = want in msg and "\n" not in msg and (s.name in msg or not own)
        report(ok, f"{label} raises ValueError: {msg}", f"want '{want}' in it")
        return
    except Exception as e:  # noqa: BLE001 -- any other exception is the failure
        report(False, label, f"{type(e).__name__}: {e}")
        return
    report(False, label, "no exception")


def error_cases(step, device):
    """Bad input: each one ValueError naming the argument. The binding's own checks come first on
    every step; the values inside cache_seqlens and block_table it reads only for a CPU step
    (on the GPU that would wait for the stream: fa2.h leaves them to the caller)."""
    s = fa2.step_library(step)
    gen = torch.Generator(device=device).manual_seed(3)
    batch, ps = 3, 16
    q = torch.randn(batch, 2, 4, 64, generator=gen, device=device).half()
    pool = torch.randn(12, ps, 2, 64, generator=gen, device=device).half()
    table = torch.arange(12, dtype=torch.int32, device=device).reshape(batch, 4)
    lens = torch.tensor([0, 17, 64], dtype=torch.int32, device=device)

    def call(q=q, k=pool, v=pool, cache_seqlens=lens, block_table=table, **kw):
        return lambda: fa2.attention_with_kvcache(q, k, v, cache_seqlens, block_table, step=step, **kw)

    i32 = dict(dtype=torch.int32, device=device)
    expect_error(s, "cache_seqlens int64", call(cache_seqlens=lens.long()), "cache_seqlens dtype torch.int64")
    expect_error(s, "cache_seqlens float32", call(cache_seqlens=lens.float()), "cache_seqlens dtype torch.float32")
    expect_error(s, "cache_seqlens of batch + 1", call(cache_seqlens=torch.zeros(4, **i32)), "cache_seqlens (4,)")
    expect_error(s, "cache_seqlens [batch, 1]", call(cache_seqlens=torch.zeros(3, 1, **i32)), "cache_seqlens (3, 1)")
    expect_error(s, "cache_seqlens 2.5", call(cache_seqlens=2.5), "cache_seqlens 2.5 (allowed")
    expect_error(s, "cache_seqlens True", call(cache_seqlens=True), "cache_seqlens True (allowed")
    expect_error(s, "cache_seqlens on the meta device", call(cache_seqlens=torch.zeros(3, dtype=torch.int32,
                                                                                     device="meta")),
                 "cache_seqlens on meta")
    expect_error(s, "cache_seqlens int past the table's pages", call(cache_seqlens=65),
                 "cache_seqlens 65 (allowed: 0 to 64, block_table's 4 entries of 16-key pages)")
    expect_error(s, "cache_seqlens int -1", call(cache_seqlens=-1), "cache_seqlens -1 (allowed: 0 to 64")
    dense = torch.randn(batch, 40, 2, 64, generator=gen, device=device).half()
    expect_error(s, "cache_seqlens int past a dense cache", call(k=dense, v=dense, cache_seqlens=41, block_table=None),
                 "cache_seqlens 41 (allowed: 0 to 40, k_cache's seqlen_cache)")
    expect_error(s, "block_table int64", call(block_table=table.long()), "block_table dtype torch.int64")
    expect_error(s, "block_table 1-D", call(block_table=table.flatten()), "block_table (12,)")
    expect_error(s, "block_table of batch - 1", call(block_table=table[:2]), "block_table (2, 4)")
    expect_error(s, "block_table with no entries", call(block_table=table[:, :0]), "block_table (3, 0)")
    expect_error(s, "block_table a list", call(block_table=table.tolist()), "block_table [[0, 1, 2, 3]")
    expect_error(s, "block_table on the meta device", call(block_table=torch.zeros(3, 4, dtype=torch.int32,
                                                                                   device="meta")),
                 "block_table on meta")
    for size in (48, 8, 512):  # not a power of two from 16 to 256: the ABI's rule, the step's reason
        other = torch.zeros(12, size, 2, 64, dtype=torch.float16, device=device)
        expect_error(s, f"page_block_size {size}", call(k=other, v=other, cache_seqlens=None),
                     f"page_size {size} with a block_table (allowed: a power of two from 16 to 256", own=True)
    expect_error(s, "k_cache and v_cache of two shapes", call(v=pool[:, :, :1]),
                 "k_cache (12, 16, 2, 64), v_cache (12, 16, 1, 64) for q (3, 2, 4, 64)")
    expect_error(s, "k_cache of another head_dim", call(k=pool[..., :32], v=pool[..., :32]),
                 "k_cache (12, 16, 2, 32), v_cache (12, 16, 2, 32) for q (3, 2, 4, 64)")
    expect_error(s, "a dense k_cache of another batch", call(k=pool[:2], v=pool[:2], block_table=None),
                 "k_cache (2, 16, 2, 64), v_cache (2, 16, 2, 64) for q (3, 2, 4, 64) (allowed: k_cache and v_cache "
                 "[batch, seqlen_cache, heads_kv, head_dim] (no block_table), with q's batch and head_dim)")
    expect_error(s, "k_cache bf16 for an fp16 q", call(k=pool.bfloat16()),
                 "k_cache dtype torch.bfloat16 (allowed: float16 or bfloat16, the same for q, k_cache, v_cache)")
    expect_error(s, "k_cache 3-D", call(k=pool[0], v=pool[0]),
                 "k_cache: a 4-D torch tensor [num_blocks, page_block_size")
    three = torch.zeros(12, ps, 3, 64, dtype=torch.float16, device=device)
    expect_error(s, "heads_kv 3 for heads_q 4", call(k=three, v=three), "heads_q 4 is not a multiple of heads_kv 3",
                 own=True)
    expect_error(s, "scale=inf", call(scale=float("inf")), "softmax_scale inf", own=True)
    expect_error(s, "q that requires grad", call(q=q.clone().requires_grad_()), "q requires grad (allowed: no autograd")
    expect_error(s, "v_cache that requires grad", call(v=pool.clone().requires_grad_()), "v_cache requires grad")
    if s.runs_on_gpu:
        return
    expect_error(s, "cache_seqlens[2] past the table's pages", call(cache_seqlens=torch.tensor([0, 17, 65], **i32)),
                 "cache_seqlens[2] = 65 (allowed: 0 to 64, block_table's 4 entries of 16-key pages)")
    expect_error(s, "cache_seqlens[0] negative", call(cache_seqlens=torch.tensor([-3, 17, 64], **i32)),
                 "cache_seqlens[0] = -3 (allowed: 0 to 64")
    expect_error(s, "cache_seqlens[1] past a dense cache",
                 call(k=dense, v=dense, cache_seqlens=torch.tensor([0, 41, 3], **i32), block_table=None),
                 "cache_seqlens[1] = 41 (allowed: 0 to 40, k_cache's seqlen_cache)")
    past = table.clone()
    past[1, 1] = 12
    expect_error(s, "a block_table entry past the pool", call(block_table=past),
                 "block_table[1][1] = 12 (allowed: 0 to 11, a page of k_cache and v_cache")
    negative = table.clone()
    negative[2, 3] = -1
    expect_error(s, "a block_table entry -1 that keys reach", call(block_table=negative), "block_table[2][3] = -1")
    expect_error(s, "a block_table entry past the pool, no cache_seqlens (every sequence 64 keys)",
                 call(block_table=past, cache_seqlens=None), "block_table[1][1] = 12")


def main():
    if len(sys.argv) < 2:
        print("usage: test_kvcache.py STEP_ID...", file=sys.stderr)
        return 2
    f16, b16 = torch.float16, torch.bfloat16
    for step in sys.argv[1:]:
        s = fa2.step_library(step)
        dev = "cuda" if s.runs_on_gpu else "cpu"
        for ps in (16, 64, 256):
            for nq in range(1, 5):  # GQA then MQA, fp16 then bf16, causal, the lengths test_paged.c takes
                hq, hkv = (8, 2) if nq % 2 else (4, 1)
                lens = [0, 1, ps - 1, ps, ps + 1, LONG]
                case(step, dev, hq, hkv, nq, LONG, 64, True, f16 if nq <= 2 else b16, ps, lens)
            case(step, dev, 4, 2, 4, 300, 128, False, b16, ps, [3, ps + 1, 0, 300])  # non-causal, d128
            case(step, dev, 4, 1, 70, 300, 64, True, f16, ps, [2, 69, 300])  # causal rows that see no key
            case(step, dev, 8, 2, 3, 300, 64, True, f16, ps, None, seqlens=None)  # every sequence the capacity
            case(step, dev, 8, 2, 1, 300, 64, True, b16, ps, [ps + 1, 0, 0], seqlens="int")
        case(step, dev, 4, 2, 2, 300, 64, True, f16, 64, [5, 130, 64], layout="bhnd", table_layout="wide")
        case(step, dev, 4, 2, 1, 80, 64, True, f16, 16, [40, 33], shared=True)
        case(step, dev, 8, 2, 1, 300, 64, True, f16, 64, [300], table_layout="a column's transpose")  # batch 1
        case(step, dev, 4, 4, 2, 64, 64, False, b16, 16, [0, 1, 17], unreached=-1)
        case(step, dev, 4, 2, 3, 100, 64, True, b16, 16, [16, 100, 7], table_layout="every-other-column")
        expanded_table(step, dev)
        case(step, dev, 8, 2, 4, 500, 128, True, b16, 0, [0, 1, 63, 64, 500])  # dense caches
        case(step, dev, 4, 4, 2, 200, 64, False, f16, 0, [200, 0, 65], layout="bhnd")
        case(step, dev, 4, 1, 3, 200, 64, True, f16, 0, [100, 0, 0], seqlens="int")
        same_as_attention(step, dev)
        error_cases(step, dev)
    return 1 if test_torch.failures else 0


if __name__ == "__main__":
    sys.exit(main())
