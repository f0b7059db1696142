#!/usr/bin/env python3
"""A short training run through python/fa2.py's operators: one small transformer trained on a
synthetic copy task twice per seed, once with its attention (forward and backward) from a step
of this repository (fa2.attention: torch.ops.fa2.fwd, whose autograd runs torch.ops.fa2.bwd) and
once from torch SDPA, from the same initial weights on the same batches. The
copy can only be learnt through attention (a token of the second half is the token L + 1
positions back), so wrong attention gradients show as a loss that falls later or not at all.

Passes when every run learns (its smoothed loss ends below half of ln(vocab), the loss of a
uniform guess) and the step's curves stay within the noise of the seeds: averaged over the
run, the largest gap between the step and SDPA at one seed is at most the gap between SDPA's
own curves at two seeds. Prints one PASS or FAIL line per rule, a summary line per run, and
writes every step's loss to --csv.

With --compile both models run under torch.compile(fullgraph=True): the operators trace with
no graph break.

usage: python3 python/train.py [--step 14] [--backward-step ID] [--steps 300] [--seeds 0,1] [--compile]
         [--device cuda|cpu] [--dtype bf16|fp16] [--batch 16] [--copy-len 16] [--layers 2]
         [--heads 4] [--kv-heads 2] [--head-dim 64] [--lr 1e-3] [--csv OUT.csv]
Step 00 runs on the CPU (--device cpu), the others on the GPU; after `make all`."""
import argparse
import csv
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa2  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

VOCAB = 64  # tokens 0..62 are data, 63 separates the two halves
SEPARATOR = VOCAB - 1
SMOOTH = 20  # steps in the moving mean the rules read


def copy_batch(gen, batch, copy_len, device):
    """[batch, 2 copy_len + 1] tokens: copy_len random tokens, the separator, the same again."""
    half = torch.randint(0, SEPARATOR, (batch, copy_len), generator=gen)
    sep = torch.full((batch, 1), SEPARATOR, dtype=half.dtype)
    return torch.cat([half, sep, half], dim=1).to(device)


class Block(torch.nn.Module):
    """Pre-norm attention and MLP; the attention's q, k, v in the run's 16-bit dtype."""

    def __init__(self, args, attend):
        super().__init__()
        width = args.heads * args.head_dim
        self.args, self.attend = args, attend
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, (args.heads + 2 * args.kv_heads) * args.head_dim)
        self.out = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x):
        a, (b, n, _) = self.args, x.shape
        q, k, v = self.qkv(self.norm1(x)).split(
            [a.heads * a.head_dim, a.kv_heads * a.head_dim, a.kv_heads * a.head_dim], dim=-1)
        q = q.view(b, n, a.heads, a.head_dim).to(a.torch_dtype)  # [batch, seqlen, heads, head_dim]
        k = k.view(b, n, a.kv_heads, a.head_dim).to(a.torch_dtype)
        v = v.view(b, n, a.kv_heads, a.head_dim).to(a.torch_dtype)
        o = self.attend(q, k, v).reshape(b, n, -1).to(x.dtype)
        x = x + self.out(o)
        return x + self.mlp(self.norm2(x))


class Model(torch.nn.Module):
    def __init__(self, args, attend):
        super().__init__()
        width = args.heads * args.head_dim
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.position = torch.nn.Parameter(0.02 * torch.randn(2 * args.copy_len + 1, width))
        self.blocks = torch.nn.ModuleList(Block(args, attend) for _ in range(args.layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def sdpa_attention(q, k, v):
    """torch SDPA on [batch, seqlen, heads, head_dim], causal, GQA by repeating K and V."""
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    kt, vt = kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True).transpose(1, 2)


def train(args, seed, attend):
    """The loss of every step: the next-token loss over the copied half alone."""
    torch.manual_seed(seed)
    model = Model(args, attend).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    forward = torch.compile(model, fullgraph=True) if args.compile else model
    gen = torch.Generator().manual_seed(1000 + seed)
    losses = []
    for _ in range(args.steps):
        tokens = copy_batch(gen, args.batch, args.copy_len, args.device)
        logits = forward(tokens[:, :-1])
        # predictions at positions copy_len .. 2 copy_len - 1 are the copied tokens
        loss = F.cross_entropy(logits[:, args.copy_len:].reshape(-1, VOCAB),
                               tokens[:, args.copy_len + 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def smooth(xs):
    return [sum(xs[max(0, i - SMOOTH + 1): i + 1]) / (i + 1 - max(0, i - SMOOTH + 1)) for i in range(len(xs))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--step", default="14")
    ap.add_argument("--backward-step", default=None)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--copy-len", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) both models")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    for name, value, ok, allowed in (
            ("--steps", args.steps, args.steps >= SMOOTH, f"at least {SMOOTH}"),
            ("--seeds", args.seeds, len(seeds) == 2 and seeds[0] != seeds[1], "two different seeds"),
            ("--heads/--kv-heads", f"{args.heads}/{args.kv_heads}",
             args.kv_heads >= 1 and args.heads % args.kv_heads == 0, "heads a multiple of kv-heads")):
        if not ok:
            sys.exit(f"error: {name} {value} (allowed: {allowed})")
    args.torch_dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16

    def step_attention(q, k, v):
        return fa2.attention(q, k, v, causal=True, step=args.step, backward_step=args.backward_step)

    curves = {}
    for seed in seeds:
        for impl, attend in (("step", step_attention), ("sdpa", sdpa_attention)):
            start = time.time()
            curves[impl, seed] = train(args, seed, attend)
            print(f"# {impl} seed {seed}: loss {curves[impl, seed][0]:.3f} -> {smooth(curves[impl, seed])[-1]:.3f} "
                  f"(last {SMOOTH} steps) in {time.time() - start:.1f} s", flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["impl", "step_id", "backward_step_id", "device", "dtype", "seed", "iteration", "loss"])
            for (impl, seed), losses in curves.items():
                for i, loss in enumerate(losses):
                    w.writerow([impl, args.step if impl == "step" else "", args.backward_step or args.step
                                if impl == "step" else "", args.device, args.dtype, seed, i, f"{loss:.6f}"])

    smoothed = {key: smooth(losses) for key, losses in curves.items()}
    learnt = 0.5 * math.log(SEPARATOR)
    failed = 0
    for (impl, seed), s in smoothed.items():
        ok = s[-1] < learnt
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {impl} seed {seed} learns the copy: smoothed loss {s[-1]:.3f} "
              f"(allowed: below {learnt:.3f}, half a uniform guess's)")
    n = args.steps
    noise = sum(abs(smoothed["sdpa", seeds[0]][i] - smoothed["sdpa", seeds[1]][i]) for i in range(n)) / n
    gap = max(sum(abs(smoothed["step", s][i] - smoothed["sdpa", s][i]) for i in range(n)) / n for s in seeds)
    ok = gap <= noise
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'} step {args.step} against SDPA: mean gap {gap:.4f} at one seed "
          f"(allowed: at most {noise:.4f}, SDPA's between seeds {seeds[0]} and {seeds[1]})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
