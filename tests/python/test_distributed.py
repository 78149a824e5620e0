"""quack_cpp.distributed.vocab_parallel_cross_entropy.

On any machine: a torch model of the cross-shard combine on shard statistics
computed here in float64 from random logits, against
torch.nn.functional.cross_entropy on the whole logits, for even and uneven
splits and every option (the model stands in for the library in the CPU
plumbing test under gloo); the argument checks; the real calls reaching the
binding's validation. The library's combine itself is checked on the GPU (C++
CrossEntropyGpuShards, and the torchrun check). With two or more GPUs:
tests/python/dist_vocab_parallel.py under torchrun (NCCL), which checks loss
and gradients of every rank against float64 and quack_cpp.cross_entropy on
the gathered logits.
"""
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import quack_cpp
from quack_cpp import distributed as qd

F64 = torch.float64


def shard_stats(x, t, bounds, weight=None, label_smoothing=0.0):
    """[world, rows, 4] statistics of each shard [a, b) of x (float64 maths,
    stored as the kernels store them: fp32)."""
    out = []
    for a, b in bounds:
        xs = x[:, a:b].double()
        m = xs.max(dim=1).values
        s = torch.exp(xs - m[:, None]).sum(dim=1)
        if weight is not None and label_smoothing != 0.0:
            d = (xs * weight[a:b].double()).sum(dim=1)
        else:
            d = xs.sum(dim=1)
        inside = (t >= a) & (t < b)
        col = torch.where(inside, t - a, torch.zeros_like(t)).clamp(0, b - a - 1)
        xt = torch.where(inside, xs.gather(1, col[:, None])[:, 0], torch.zeros_like(m))
        out.append(torch.stack([m, s, d, xt], dim=-1))
    return torch.stack(out).float()


def model_combine(stats, t, weight, ignore_index, reduction, label_smoothing, z_loss, vocab):
    """(loss, lse) from the gathered statistics [world, rows, 4], in fp32 torch
    ops: a model of the library's combine mode (quack::CrossEntropyArgs::
    combine_stats), standing in for it in the CPU plumbing test below."""
    m, s, d, xt = stats.unbind(-1)
    mx = m.max(dim=0).values
    base = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
    lse = base + torch.log((s * torch.exp(m - base)).sum(dim=0))
    dsum = d.sum(dim=0)
    x_t = xt.sum(dim=0)
    tl = t.long()
    ignored = tl == ignore_index
    bad = ~ignored & ((tl < 0) | (tl >= vocab))
    counted = ~ignored & ~bad
    safe_t = torch.where(counted, tl, torch.zeros_like(tl))
    wt = weight[safe_t] if weight is not None else torch.ones_like(lse)
    wt = torch.where(counted, wt, torch.zeros_like(wt))
    eps = float(label_smoothing)
    ce = (1.0 - eps) * wt * (lse - x_t)
    if eps != 0.0:
        wsum = weight.sum() if weight is not None else float(vocab)
        ce = ce + eps / vocab * (lse * wsum - dsum)
    z = z_loss * lse * lse
    nan = torch.full_like(lse, math.nan)
    zero = torch.zeros_like(lse)
    ce = torch.where(ignored, zero, torch.where(bad, nan, ce))
    z = torch.where(ignored, zero, torch.where(bad, nan, z))
    if reduction == 0:
        loss = ce + z
    elif reduction == 2:
        loss = (ce + z).sum()
    else:
        # torch's denominator: the counted targets' weights (0 / 0 = NaN).
        loss = ce.sum() / wt.sum() + z.sum() / counted.sum().to(torch.float32)
    return loss, lse


def splits(v, world, even):
    if even:
        cuts = [v * r // world for r in range(world + 1)]
    else:
        cuts = [0] + sorted(torch.randperm(v - 1)[: world - 1].add(1).tolist()) + [v]
    return list(zip(cuts[:-1], cuts[1:]))


@pytest.mark.parametrize("v", [7, 1000, 32000])
@pytest.mark.parametrize("world, even", [(2, True), (2, False), (4, False)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("opts", [{}, {"label_smoothing": 0.1}, {"weight": True, "label_smoothing": 0.2},
                                  {"z_loss": 1e-3, "weight": True}])
def test_combine_model_matches_whole_vocabulary(v, world, even, reduction, opts):
    torch.manual_seed(v * 7 + world)
    rows = 64
    x = torch.randn(rows, v, dtype=F64) * 3
    t = torch.randint(0, v, (rows,))
    t[::5] = -100
    w = torch.rand(v, dtype=F64) + 0.5 if opts.get("weight") else None
    eps = opts.get("label_smoothing", 0.0)
    z = opts.get("z_loss", 0.0)
    stats = shard_stats(x, t, splits(v, world, even), w, eps)
    loss, lse = model_combine(stats, t, w.float() if w is not None else None, -100, qd._REDUCTIONS[reduction],
                              eps, z, v)
    ref = F.cross_entropy(x, t, weight=w, ignore_index=-100, reduction=reduction, label_smoothing=eps)
    ref_lse = torch.logsumexp(x, dim=1)
    if z:
        counted = (t != -100).double()
        zr = z * ref_lse.square() * counted
        ref = ref + (zr if reduction == "none" else zr.sum() if reduction == "sum" else zr.sum() / counted.sum())
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss.double(), ref, rtol=2e-5, atol=2e-5)


def test_combine_nan_rows_and_all_ignored():
    x = torch.randn(4, 10, dtype=F64)
    t = torch.tensor([3, 10, -1, -100])  # fine, past V, negative, ignored
    stats = shard_stats(x, t, [(0, 4), (4, 10)])
    loss, _ = model_combine(stats, t, None, -100, 0, 0.0, 0.0, 10)
    assert torch.isfinite(loss[0]) and torch.isnan(loss[1]) and torch.isnan(loss[2]) and loss[3] == 0
    t_all = torch.full((4,), -100)
    mean, _ = model_combine(shard_stats(x, t_all, [(0, 10)]), t_all, None, -100, 1, 0.0, 0.0, 10)
    total, _ = model_combine(shard_stats(x, t_all, [(0, 10)]), t_all, None, -100, 2, 0.0, 0.0, 10)
    assert math.isnan(mean.item()) and total.item() == 0.0  # as torch: 0 / 0, and 0


def test_argument_checks_name_the_argument():
    x = torch.randn(4, 10)
    t = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"^quack_cpp.distributed.vocab_parallel_cross_entropy: logits must be a CUDA"):
        qd.vocab_parallel_cross_entropy(x, t, vocab_start=0, vocab_size=10)
    with pytest.raises(TypeError, match="target must hold class indices"):
        qd.vocab_parallel_cross_entropy(x, t.float(), vocab_start=0, vocab_size=10)
    with pytest.raises(ValueError, match="label_smoothing"):
        qd.vocab_parallel_cross_entropy(x, t, label_smoothing=2.0, vocab_start=0, vocab_size=10)
    with pytest.raises(ValueError, match="vocab_start and vocab_size go together"):
        qd.vocab_parallel_cross_entropy(x.to("meta"), t.to("meta"), vocab_start=0)
    with pytest.raises(ValueError, match=r"the shard \[8, 18\) is not inside the vocabulary \[0, 12\)"):
        qd.vocab_parallel_cross_entropy(x.to("meta"), t.to("meta"), vocab_start=8, vocab_size=12)
    with pytest.raises(ValueError, match=r"weight must have shape \(20,\)"):
        qd.vocab_parallel_cross_entropy(x.to("meta"), t.to("meta"), vocab_start=0, vocab_size=20,
                                        weight=torch.ones(10, device="meta"))


def test_binding_validates_shard_modes():
    # The C++ checks through the binding's validate-only mode (no device).
    base = dict(rows=4, cols=100, logits_ptr=4096, dtype=2, logits_stride=100, target_ptr=8192, target64=True,
                target_stride=1, weight_ptr=0, ignore_index=-100, reduction=0, label_smoothing=0.0, z_loss=0.0,
                softcap=0.0, loss_ptr=0, lse_ptr=0, dx_ptr=0, dx_stride=0, dloss_ptr=0, ws_ptr=0, ws_bytes=0,
                mode=1, stream=0)

    def call(**kw):
        return quack_cpp._C.cross_entropy(**{**base, **kw})

    call(class_offset=100, num_classes=300, stats_ptr=1 << 20)  # a middle shard's statistics
    call(class_offset=200, num_classes=300, lse_in_ptr=1 << 20, dx_ptr=1 << 21, dx_stride=100)
    cases = [
        (dict(num_classes=300), "num_classes: the logits hold a shard"),
        (dict(class_offset=250, num_classes=300, stats_ptr=1 << 20), r"class_offset: the shard \[250"),
        (dict(class_offset=5), "class_offset: must be 0 when num_classes is 0"),
        (dict(num_classes=-1), "num_classes: must be >= 0"),
        (dict(stats_ptr=(1 << 20) + 8), "shard_stats: pointer is not 16-byte aligned"),
        (dict(stats_ptr=1 << 20, lse_in_ptr=1 << 21), "shard_stats: given with lse_in"),
        (dict(stats_ptr=1 << 20, loss_ptr=1 << 22), "loss: not written with shard_stats"),
        (dict(lse_in_ptr=1 << 20), "dlogits: null pointer"),
        (dict(lse_in_ptr=(1 << 20) + 2, dx_ptr=1 << 21, dx_stride=100), "lse_in: pointer is not aligned"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            call(**kw)


def test_call_reaches_the_binding(ce_validate_only):
    # The module's real _call on CPU tensors, its launch turned into the
    # binding's validate-only mode (mode 1, no stream): every positional and
    # keyword argument reaches the C++ checks, and a misaligned statistics
    # buffer is refused by name (the shard keywords did arrive).
    launches = ce_validate_only
    rows, n, vocab = 6, 40, 100
    x = torch.randn(rows, n, dtype=torch.bfloat16)
    t = torch.randint(0, vocab, (rows,))
    stats = torch.empty(rows * 4 + 4, dtype=torch.float32)
    call = (x, n, rows, t, None, -100, 0, 0.0, 0.0, 0.0, 30, vocab)
    qd._call(*call, stats[:rows * 4].view(rows, 4), None, None, None)
    qd._call(*call, None, torch.zeros(rows), torch.empty_like(x), torch.ones(rows))
    gathered = torch.zeros(3 * rows, 4)
    loss, lse = torch.empty(()), torch.empty(rows)
    qd._call_combine(gathered, 3, rows, t, None, -100, 1, 0.1, 1e-4, vocab, loss, lse)
    assert launches == ["launch"] * 3, "each call launches once"
    with pytest.raises(ValueError, match="shard_stats: pointer is not 16-byte aligned"):
        qd._call(*call, stats[2:2 + rows * 4].view(rows, 4), None, None, None)
    with pytest.raises(ValueError, match=r"class_offset: the shard \[70, 70 \+ 40\)"):
        qd._call(*call[:10], 70, vocab, stats[:rows * 4].view(rows, 4), None, None, None)
    with pytest.raises(ValueError, match="combine_stats: pointer is not 16-byte aligned"):
        qd._call_combine(stats[2:2 + rows * 4], 1, rows, t, None, -100, 1, 0.0, 0.0, vocab, loss, lse)


def _gpus():
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(_gpus() < 2, reason="needs 2 CUDA GPUs (vocab-parallel over NCCL)")
def test_two_gpus_under_torchrun(tmp_path):
    script = os.path.join(os.path.dirname(__file__), "dist_vocab_parallel.py")
    torchrun = shutil.which("torchrun")
    cmd = ([torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]) + [
        "--standalone", "--nproc_per_node=2", script]
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "ALL OK" in r.stdout


# ---------------------------------------------------------------------------
# The module's plumbing (statistics -> all-gather -> combine -> autograd ->
# gradient from lse) on CPU: two gloo ranks, with the library call replaced
# by a float64 torch model of the two shard modes (quack::CrossEntropyArgs'
# formulas), checked against F.cross_entropy on the whole logits and its
# autograd gradient.

def _model_call(x, xs, rows, t, weight, ignore_index, reduction, eps, z, cap, start, vocab, stats, lse_in, dx,
                dloss):
    X = x.double()
    if cap:
        X = cap * torch.tanh(X / cap)
    n = X.shape[1]
    w_cols = weight[start:start + n].double() if (weight is not None and eps) else None
    tl = t.long()
    ignored = tl == ignore_index
    bad = ~ignored & ((tl < 0) | (tl >= vocab))
    inside = ~ignored & ~bad & (tl >= start) & (tl < start + n)
    col = torch.where(inside, tl - start, torch.zeros_like(tl))
    if stats is not None:
        m = X.max(dim=1).values
        s = torch.exp(X - m[:, None]).sum(dim=1)
        d = (X * w_cols).sum(dim=1) if w_cols is not None else X.sum(dim=1)
        xt = torch.where(inside, X.gather(1, col[:, None])[:, 0], torch.zeros_like(m))
        stats.copy_(torch.stack([m, s, d, xt], dim=1).float())
        return
    counted = ~ignored & ~bad
    wt = weight.double()[torch.where(counted, tl, torch.zeros_like(tl))] if weight is not None else \
        torch.ones(rows, dtype=F64)
    wt = torch.where(counted, wt, torch.zeros_like(wt))
    g = dloss.double() if dloss is not None else torch.ones(1, dtype=F64)
    g = g.expand(rows) if g.numel() == 1 else g
    gce, gz = (g / wt.sum(), g / counted.sum()) if reduction == 1 else (g, g)
    lse = lse_in.double()
    p = torch.exp(X - lse[:, None])
    wsum = weight.double().sum() if w_cols is not None else float(vocab)
    a = gce * (1 - eps) * wt
    b = gce * eps / vocab
    A = a + b * wsum + 2 * gz * z * lse
    G = A[:, None] * p - b[:, None] * (w_cols if w_cols is not None else 1.0)
    G[inside, col[inside]] -= a[inside]
    G[ignored] = 0.0
    G[bad] = math.nan
    if cap:
        G = G * (1 - (X / cap) ** 2)
    dx.copy_(G)


def _model_call_combine(gathered, world, rows, t, weight, ignore_index, reduction, eps, z, vocab, loss, lse):
    lo, ls = model_combine(gathered.view(world, rows, 4), t, weight, ignore_index, reduction, eps, z, vocab)
    loss.copy_(lo)
    lse.copy_(ls)


def _gloo_rank(rank, world, port, results):
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    qd._call = _model_call
    qd._call_combine = _model_call_combine
    qd._check = lambda *a: None  # CPU tensors: the model stands in for the CUDA library
    torch.manual_seed(5)
    v, rows = 53, 24
    cuts = [0, 20, 53] if world == 2 else [0, 10, 31, 53]
    bad = 0
    for reduction in ("mean", "sum", "none"):
        for opts in ({}, {"label_smoothing": 0.1, "z_loss": 1e-3}, {"weight": True, "label_smoothing": 0.2},
                     {"softcap": 4.0, "weight": True}):
            x = torch.randn(rows, v, dtype=F64) * 3
            t = torch.randint(0, v, (rows,))
            t[::5] = -100
            w = torch.rand(v, dtype=F64) + 0.5 if opts.get("weight") else None
            eps, z, cap = opts.get("label_smoothing", 0.0), opts.get("z_loss", 0.0), opts.get("softcap")
            a, b = cuts[rank], cuts[rank + 1]
            local = x[:, a:b].float().clone().requires_grad_(True)
            loss = qd.vocab_parallel_cross_entropy(local, t, reduction=reduction, label_smoothing=eps, z_loss=z,
                                                   softcap=cap, weight=w.float() if w is not None else None)
            xr = x.clone().requires_grad_(True)
            xc = cap * torch.tanh(xr / cap) if cap else xr
            ref = F.cross_entropy(xc, t, weight=w, reduction=reduction, label_smoothing=eps)
            if z:
                lse = torch.logsumexp(xc, dim=1)
                zr = z * lse.square() * (t != -100).double()
                ref = ref + (zr if reduction == "none" else zr.sum() if reduction == "sum" else
                             zr.sum() / (t != -100).sum())
            up = torch.linspace(-1, 2, rows, dtype=F64) if reduction == "none" else torch.tensor(1.5, dtype=F64)
            (ref * up).sum().backward()
            loss.backward(up.float())
            bad += not torch.allclose(loss.double(), ref.detach(), rtol=1e-5, atol=1e-5)
            bad += not torch.allclose(local.grad.double(), xr.grad[:, a:b], rtol=1e-4, atol=1e-6)
    results[rank] = bad
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_plumbing_on_cpu_with_gloo(world):
    import socket

    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_gloo_rank, args=(world, port, results), nprocs=world)
    assert dict(results) == {r: 0 for r in range(world)}
