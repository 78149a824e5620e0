"""Vocabulary-parallel cross-entropy, time per training step (forward +
backward), under torchrun on one host:

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 bench/bench_vocab_parallel.py [--out FILE.md]

Per V in {32000, 128256, 151936, 262144}, M = 8192 rows, bf16 and fp32
logits sharded evenly over the ranks, compared side by side:
  * quack_cpp.distributed.vocab_parallel_cross_entropy (one all-gather of
    16 bytes a row; the backward without communication);
  * Megatron's approach in torch ops (all-reduce MAX of the row max, then
    all-reduce SUM of the exp sums and of the target logits; the softmax
    saved for the backward), as a custom autograd function;
  * the single-GPU quack_cpp.cross_entropy on the whole logits (one GPU, the
    whole vocabulary: what the split saves).
Each result is checked against float64 first (on a few rows); timing: CUDA
events, 20 steps back to back (the host running ahead, as in training), and
the median of 20 steps alone (the host's enqueue time not hidden); the
step's model bytes = read the logits it holds + write their gradient; % of
the same run's device copy.
"""
import argparse
import statistics

import torch
import torch.distributed as dist
import torch.nn.functional as F

import quack_cpp
from quack_cpp.distributed import vocab_parallel_cross_entropy


class _Megatron(torch.autograd.Function):
    """Megatron-LM's vocab-parallel cross-entropy, written here in torch ops."""

    @staticmethod
    def forward(ctx, local, target, start, group):
        x = local.float()
        m = x.max(dim=-1).values
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
        x = x - m[:, None]
        n = x.shape[-1]
        inside = (target >= start) & (target < start + n)
        col = torch.where(inside, target - start, torch.zeros_like(target))
        pred = torch.where(inside, x.gather(1, col[:, None])[:, 0], torch.zeros_like(m))
        dist.all_reduce(pred, group=group)
        e = torch.exp(x)
        s = e.sum(dim=-1)
        dist.all_reduce(s, group=group)
        loss = torch.log(s) - pred
        e.div_(s[:, None])
        ctx.save_for_backward(e, inside, col)
        ctx.dtype = local.dtype
        return loss.mean()

    @staticmethod
    def backward(ctx, g):
        softmax, inside, col = ctx.saved_tensors
        grad = softmax
        rows = torch.arange(grad.shape[0], device=grad.device)
        grad[rows[inside], col[inside]] -= 1.0
        grad.mul_(g / grad.shape[0])
        return grad.to(ctx.dtype), None, None, None


def timed(fn, iters=20):
    """(median ms of a step alone -- the host's enqueue not hidden --, mean ms
    of a step among `iters` back to back -- the host running ahead, as in
    training)."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier()
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return statistics.median(ts), a.elapsed_time(b) / iters


def copy_bandwidth(dev):
    """GB/s (read + write) of a 256 MiB device-to-device copy."""
    src = torch.empty(1 << 28, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    return 2 * src.numel() / timed(lambda: dst.copy_(src))[0] / 1e6


def measure(dtype, v, rows, rank, world, dev, copy_gbs):
    """One table row: the three implementations at (dtype, V), each checked
    on 64 rows against float64 first."""
    g = torch.Generator(device=dev).manual_seed(v)
    full = (torch.randn(rows, v, device=dev, generator=g) * 2).to(dtype)
    t = torch.randint(0, v, (rows,), device=dev, generator=g)
    start, stop = v * rank // world, v * (rank + 1) // world
    local = full[:, start:stop].contiguous().requires_grad_(True)
    whole = full.detach().requires_grad_(True)
    ref = F.cross_entropy(full[:64].double(), t[:64]).item()
    impls = {
        "qc": (local, lambda x, tt: vocab_parallel_cross_entropy(x, tt, vocab_start=start, vocab_size=v)),
        "meg": (local, lambda x, tt: _Megatron.apply(x, tt, start, None)),
        "one": (whole, lambda x, tt: quack_cpp.cross_entropy(x, tt)),
    }
    cells = []
    for leaf, fn in impls.values():
        sub = fn(leaf[:64].detach(), t[:64]).item()
        ok = abs(sub - ref) <= 1e-3 * max(1.0, abs(ref))

        def run(leaf=leaf, fn=fn):
            leaf.grad = None  # a fresh gradient each step, not accumulated into the last one
            fn(leaf, t).backward()

        alone, chained = timed(run)
        leaf.grad = None
        pct = 100.0 * 2 * leaf.numel() * full.element_size() / chained / 1e6 / copy_gbs
        cells.append(f"{chained:.3f} ({pct:.1f}%) / {alone:.3f}" + ("" if ok else " WRONG"))
    return f"| {str(dtype).split('.')[-1]} | {v} | " + " | ".join(cells) + " |"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="write the markdown table here (rank 0)")
    ap.add_argument("--rows", type=int, default=8192)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    dev = torch.device("cuda")
    copy_gbs = copy_bandwidth(dev)
    lines = [f"# Vocabulary-parallel cross-entropy, {world} x {torch.cuda.get_device_name()}",
             f"- quack_cpp {quack_cpp.__version__}, torch {torch.__version__}; copy {copy_gbs:.0f} GB/s a GPU",
             f"- M = {args.rows} rows; training step = forward + backward, reduction mean; each cell: ms a step "
             "among 20 back to back (% of copy for the step's read + write of the logits it holds) / ms of a "
             "step alone (median of 20, a barrier before each: the host's enqueue not hidden)", "",
             "| dtype | V | quack_cpp vocab-parallel | Megatron (torch ops) | quack_cpp one GPU, whole V |",
             "|---|---:|---:|---:|---:|"]
    for dtype in (torch.bfloat16, torch.float32):
        for v in (32000, 128256, 151936, 262144):
            lines.append(measure(dtype, v, args.rows, rank, world, dev, copy_gbs))
            torch.cuda.empty_cache()
    if rank == 0:
        text = "\n".join(lines) + "\n"
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
