"""Two-GPU check of quack_cpp.distributed.vocab_parallel_cross_entropy, run by
tests/python/test_distributed.py (or by hand):

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 tests/python/dist_vocab_parallel.py

Every rank builds the same whole logits from a seed, keeps its shard, and
checks, for V in {32000, 128256, 262144} split evenly and unevenly, with
ignored targets, class weights, label smoothing, z_loss and softcap: the
loss (identical on every rank, bit for bit) and lse against float64
(torch's F.cross_entropy on the whole logits) and against
quack_cpp.cross_entropy on the whole logits; this rank's slice of the
gradient against the float64 gradient; then forward and backward captured
in one CUDA graph and replayed on new inputs, equal to eager steps. Prints
ALL OK on rank 0.
"""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import quack_cpp
from quack_cpp.distributed import vocab_parallel_cross_entropy


def reference(x, t, weight, reduction, eps, z, cap):
    xd = x.double()
    if cap:
        xd = cap * torch.tanh(xd / cap)
    loss = F.cross_entropy(xd, t, weight=weight.double() if weight is not None else None, reduction=reduction,
                           label_smoothing=eps)
    lse = torch.logsumexp(xd, dim=-1)
    if z:
        counted = (t != -100).double()
        zr = z * lse.square() * counted
        loss = loss + (zr if reduction == "none" else zr.sum() if reduction == "sum" else zr.sum() / counted.sum())
    return loss, lse


def graph_check(rank, world, dev):
    """Forward and backward captured in one CUDA graph (vocab_start /
    vocab_size given: no host synchronisation; the all-gather captured), then
    replayed on new logits and targets: loss and gradient equal an eager
    step's on the same inputs, bit for bit."""
    v, rows = 32000, 64
    a, b = v * rank // world, v * (rank + 1) // world
    static_x = torch.zeros(rows, b - a, device=dev, dtype=torch.bfloat16, requires_grad=True)
    static_t = torch.zeros(rows, device=dev, dtype=torch.int64)

    def step():
        static_x.grad = None
        loss = vocab_parallel_cross_entropy(static_x, static_t, label_smoothing=0.1, z_loss=1e-4, vocab_start=a,
                                            vocab_size=v)
        loss.backward()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    static_x.grad = None
    with torch.cuda.graph(graph):
        static_loss = vocab_parallel_cross_entropy(static_x, static_t, label_smoothing=0.1, z_loss=1e-4,
                                                   vocab_start=a, vocab_size=v)
        static_loss.backward()
    for seed in (1, 2):
        g = torch.Generator(device=dev).manual_seed(seed)
        full = (torch.randn(rows, v, device=dev, generator=g) * 3).to(torch.bfloat16)
        t = torch.randint(0, v, (rows,), device=dev, generator=g)
        t[::5] = -100
        with torch.no_grad():
            static_x.copy_(full[:, a:b])
            static_t.copy_(t)
        graph.replay()
        torch.cuda.synchronize()
        replay_loss, replay_grad = static_loss.clone(), static_x.grad.clone()
        eager = full[:, a:b].clone().requires_grad_(True)
        loss = vocab_parallel_cross_entropy(eager, t, label_smoothing=0.1, z_loss=1e-4, vocab_start=a, vocab_size=v)
        loss.backward()
        assert torch.equal(replay_loss, loss.detach()), f"rank {rank}: replayed loss {replay_loss} != eager {loss}"
        assert torch.equal(replay_grad, eager.grad), f"rank {rank}: replayed gradient differs from eager"


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda")
    cases = 0
    for v in (32000, 128256, 262144):
        for even in (True, False):
            cuts = [v * r // world for r in range(world + 1)] if even else \
                [0] + [v * r // world + 1001 * r for r in range(1, world)] + [v]
            a, b = cuts[rank], cuts[rank + 1]
            for dtype in (torch.bfloat16, torch.float32):
                for reduction in ("mean", "sum", "none"):
                    for opts in ({}, {"label_smoothing": 0.1, "z_loss": 1e-4},
                                 {"weight": True, "label_smoothing": 0.2}, {"softcap": 30.0}):
                        g = torch.Generator(device=dev).manual_seed(v + 17 * cases)
                        rows = 96
                        x = (torch.randn(rows, v, device=dev, generator=g) * 3).to(dtype)
                        t = torch.randint(0, v, (rows,), device=dev, generator=g)
                        t[::7] = -100
                        w = torch.rand(v, device=dev, generator=g) + 0.5 if opts.get("weight") else None
                        eps, z, cap = opts.get("label_smoothing", 0.0), opts.get("z_loss", 0.0), opts.get("softcap")
                        local = x[:, a:b].contiguous().requires_grad_(True)
                        loss, lse = vocab_parallel_cross_entropy(local, t, reduction=reduction, label_smoothing=eps,
                                                                 z_loss=z, softcap=cap, weight=w, return_lse=True)
                        xr = x.detach().clone().requires_grad_(True)
                        ref, ref_lse = reference(xr, t, w, reduction, eps, z, cap)
                        tol = 2e-5 + 1e-6 * v ** 0.5
                        torch.testing.assert_close(loss.double(), ref.detach(), rtol=tol, atol=tol)
                        torch.testing.assert_close(lse.double(), ref_lse.detach(), rtol=tol, atol=tol)
                        single = quack_cpp.cross_entropy(x, t, weight=w, reduction=reduction, label_smoothing=eps,
                                                         z_loss=z, softcap=cap)
                        torch.testing.assert_close(loss, single, rtol=tol, atol=tol)
                        # The same loss on every rank, bit for bit.
                        flat = loss.detach().reshape(-1).float()
                        all_l = [torch.empty_like(flat) for _ in range(world)]
                        dist.all_gather(all_l, flat)
                        assert all(torch.equal(all_l[0], o) for o in all_l), "ranks disagree on the loss"
                        up = torch.randn_like(ref) if reduction == "none" else torch.tensor(1.5, device=dev,
                                                                                            dtype=torch.float64)
                        (ref * up).sum().backward()
                        loss.backward(up.float())
                        gref = xr.grad[:, a:b]
                        scale = gref.abs().max().item()
                        rt = {torch.float32: 2e-5, torch.bfloat16: 2 ** -7}[dtype]
                        # A capped logit carries tanh.approx's absolute error
                        # dcap (the C++ suite's model), so p = exp(x' - lse) is
                        # off by about dcap relative: bounded against the row's scale.
                        dcap = (24 + 48 / cap) * 2.0 ** -24 * cap if cap else 0.0
                        bound = rt * gref.abs() + (2e-6 + 20 * dcap) * scale + 1e-30
                        bad = (local.grad.double() - gref).abs() > bound
                        assert not bad.any(), (f"rank {rank} V={v} even={even} {dtype} {reduction} {opts}: "
                                               f"{int(bad.sum())} gradient elements off")
                        cases += 1
    graph_check(rank, world, dev)
    dist.barrier()
    if rank == 0:
        print(f"{cases} cases and a CUDA-graph replay on {world} ranks: ALL OK")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
