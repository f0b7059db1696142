#!/usr/bin/env python3
"""Long context over several GPUs: torch's context parallelism (ring attention over NCCL) with
the steps as SDPA's flash kernels (fa2.activate_sdpa).

A Llama-style model (transformers, random weights, GQA 16:4, head dim 128, bf16) is trained
on a sequence split over every GPU of the machine by
torch.distributed.tensor.experimental.context_parallel: each GPU holds 1/world of the tokens
(head-tail load balanced under the causal mask), and every attention call becomes a ring of
SDPA flash calls whose outputs are merged by their log-sum-exps (docs/context_parallel.md).
The same runs with torch's own flash kernel are the comparison.

  --check   on a sequence that fits one GPU: the loss and the gradients of the parallel run
            against one GPU running the whole sequence with the same kernels, for the steps
            and for torch's flash kernel (the steps pass when no farther than twice torch's
            distance, plus 1e-3); one PASS/FAIL line each.
  --bench   tokens per second and the most memory any GPU held, for each --seqlens, with the
            steps and with torch's flash kernel: a row each in --csv.

usage: torchrun --nproc_per_node=N python/context_parallel.py [--check] [--bench]
         [--check-seqlen 8192] [--seqlens 8192,65536] [--steps 5] [--layers 4] [--csv OUT.csv]
Run with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 in the
environment (NVLink multicast off); the script sets them for itself too, before torch loads.
One process per GPU; with N = 1 it runs the same code over a ring of one."""
import os

# NVLink multicast off: NCCL's NVLS, torch's symmetric memory and NVSHMEM, in this process
# (torchrun's children each run this line before torch is imported).
for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_name, _value)

import argparse  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa2  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

VOCAB = 8192


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--check-seqlen", type=int, default=8192)
    ap.add_argument("--seqlens", default="8192,65536", help="comma-separated global sequence lengths for --bench")
    ap.add_argument("--steps", type=int, default=5, help="timed training steps per --bench row (after one untimed)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--csv", help="--bench rows, appended")
    a = ap.parse_args()
    if not (a.check or a.bench):
        ap.error("nothing to do (allowed: --check, --bench or both)")
    a.seqlens = [int(s) for s in a.seqlens.split(",")]
    for name in ("steps", "layers"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} {getattr(a, name)} is not allowed (allowed: >= 1)")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    for n in [a.check_seqlen] + a.seqlens:
        if n < 1 or n % (2 * world):
            ap.error(f"sequence length {n} (allowed: a multiple of 2 x world size = {2 * world}: "
                     "the causal load balancer gives each GPU two equal chunks)")
    return a


def build_model(layers, seqlen):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)  # the same weights on every GPU
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=2048, intermediate_size=5632, num_hidden_layers=layers,
                         num_attention_heads=16, num_key_value_heads=4, head_dim=128,
                         max_position_embeddings=seqlen)
    return LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).cuda()


def batch(seqlen):
    """Token ids, next-token labels and positions [1, seqlen], the same on every GPU."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    tokens = torch.randint(0, VOCAB, (1, seqlen + 1), generator=gen, device="cuda")
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous(), torch.arange(seqlen, device="cuda")[None]


class Attention:
    """The attention under test as a context manager: the steps (SDPA's flash path through
    fa2.activate_sdpa) or torch's own flash kernel."""

    def __init__(self, which):
        self.which = which

    def __enter__(self):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if self.which == "steps":
            fa2.activate_sdpa()
        self.kernel = sdpa_kernel(SDPBackend.FLASH_ATTENTION)
        self.kernel.__enter__()

    def __exit__(self, *exc):
        self.kernel.__exit__(*exc)
        if self.which == "steps":
            fa2.deactivate_sdpa()


def loss_and_grads(model, ids, labels, pos, mesh=None):
    """The mean next-token loss over the whole sequence and its gradients. With a mesh, each GPU
    computes its share of the tokens under context_parallel, and the losses and gradients are
    averaged over the GPUs (equal shares: the average of the means is the mean)."""
    from torch.distributed.tensor.experimental import context_parallel

    def local_loss():
        # An all-ones padding mask: no padding, so transformers leaves SDPA's mask to is_causal.
        # Without it, the jump in a GPU's positions (its two chunks of the sequence, head and
        # tail) would read as two packed sequences and become an explicit mask, which SDPA's
        # flash path (and the ring) does not take.
        out = model(input_ids=ids, position_ids=pos, attention_mask=torch.ones_like(ids), use_cache=False)
        return F.cross_entropy(out.logits.float().flatten(0, 1), labels.flatten())

    model.zero_grad(set_to_none=True)
    if mesh is None:
        loss = local_loss()
        loss.backward()
    else:
        ids, labels, pos = ids.clone(), labels.clone(), pos.clone()  # sharded in place
        with context_parallel(mesh, buffers=[ids, labels, pos], buffer_seq_dims=[1, 1, 1],
                              no_restore_buffers={ids, labels, pos}):
            loss = local_loss()
            loss.backward()
        dist.all_reduce(loss.detach(), op=dist.ReduceOp.AVG)
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
    grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
    return loss.detach().float(), grads


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def check(args, mesh, rank, world):
    """The parallel run against one GPU running the whole sequence with the same kernels: the
    steps' distance against torch's flash kernel's under the same parallelism."""
    model = build_model(args.layers, args.check_seqlen)
    ids, labels, pos = batch(args.check_seqlen)
    runs = {}
    for which in ("torch", "steps"):
        with Attention(which):
            counts_before = fa2.sdpa_counts() if which == "steps" else None
            runs[which] = (loss_and_grads(model, ids, labels, pos), loss_and_grads(model, ids, labels, pos, mesh))
            if which == "steps":
                counts = {k: v - counts_before[k] for k, v in fa2.sdpa_counts().items()}
    failed = 0
    if rank == 0:
        dist_of = {w: (abs(cp[0] - one[0]).item(), rel(cp[1], one[1])) for w, (one, cp) in runs.items()}
        bound = tuple(2 * t + 1e-3 for t in dist_of["torch"])
        ok = all(s <= b for s, b in zip(dist_of["steps"], bound))
        kernels = rel(runs["steps"][0][1], runs["torch"][0][1])
        print(f"{'PASS' if ok else 'FAIL'} context parallelism over {world} GPU(s), seqlen {args.check_seqlen}: the steps' "
              f"loss and gradients against the steps on one GPU: loss diff {dist_of['steps'][0]:.2e}, gradients rel L2 "
              f"{dist_of['steps'][1]:.2e}; torch's flash kernel against itself on one GPU {dist_of['torch'][0]:.2e}, "
              f"{dist_of['torch'][1]:.2e} (allowed 2x that + 1e-3); on one GPU the steps' gradients are {kernels:.2e} "
              f"from torch's flash kernel's (loss {runs['steps'][0][0].item():.6f} against {runs['torch'][0][0].item():.6f})",
              flush=True)
        failed += not ok
        ran = counts["steps_forward"] >= 2 * args.layers and counts["steps_backward"] >= 2 * args.layers \
            and counts["torch_forward"] == 0 and counts["torch_backward"] == 0
        print(f"{'PASS' if ran else 'FAIL'} the flash calls of both runs (one GPU, the ring) ran the steps on GPU 0: {counts}",
              flush=True)
        failed += not ran
    del model
    torch.cuda.empty_cache()
    return failed


def bench(args, mesh, rank, world):
    """Tokens per second of a training step (forward, backward, AdamW) and the most memory a
    GPU held, per sequence length and attention; rows on rank 0."""
    rows = []
    for seqlen in args.seqlens:
        for which in ("steps", "torch"):
            model = build_model(args.layers, seqlen)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
            ids, labels, pos = batch(seqlen)
            torch.cuda.reset_peak_memory_stats()
            status, ms = "OK", float("nan")
            try:
                with Attention(which):
                    for i in range(args.steps + 1):
                        if i == 1:  # the first step untimed: allocations, kernels' first launch
                            dist.barrier()
                            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            start.record()
                        loss_and_grads(model, ids, labels, pos, mesh)
                        opt.step()
                    stop.record()
                    torch.cuda.synchronize()
                    ms = start.elapsed_time(stop) / args.steps
            except torch.OutOfMemoryError:
                status = "OOM"
            peak = torch.tensor([torch.cuda.max_memory_allocated() / 2**30], device="cuda")
            dist.all_reduce(peak, op=dist.ReduceOp.MAX)
            ms_t = torch.tensor([ms], device="cuda")
            dist.all_reduce(ms_t, op=dist.ReduceOp.MAX)  # the slowest GPU's time is the step's
            ms = ms_t.item()
            tok_s = seqlen / (ms * 1e-3) if status == "OK" else float("nan")
            rows.append((which, world, seqlen, args.layers, f"{ms:.2f}", f"{tok_s:.0f}", f"{peak.item():.2f}", status))
            if rank == 0:
                print(f"bench {which:<6} world {world} seqlen {seqlen:>7}: {status} {ms:9.2f} ms/step "
                      f"{tok_s:10.0f} tokens/s, peak {peak.item():6.2f} GiB per GPU", flush=True)
            del model, opt
            torch.cuda.empty_cache()
    if rank == 0 and args.csv:
        new = not os.path.exists(args.csv)
        with open(args.csv, "a") as f:
            if new:
                f.write("attention,gpus,seqlen,layers,ms_per_step,tokens_per_s,peak_gib_per_gpu,status,device\n")
            for r in rows:
                f.write(",".join(map(str, r)) + f",{torch.cuda.get_device_name()}\n")


def main():
    args = parse_args()
    from torch.distributed.device_mesh import init_device_mesh

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if "RANK" not in os.environ:  # run without torchrun: a ring of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
    failed = 0
    try:
        if args.check:
            failed += check(args, mesh, rank, world)
        if args.bench:
            bench(args, mesh, rank, world)
    finally:
        dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
