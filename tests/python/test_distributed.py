"""quack_cpp.distributed.vocab_parallel_cross_entropy.

On any machine: the cross-shard combine (quack_cpp.distributed._combine) on
shard statistics computed here in float64 from random logits, against
torch.nn.functional.cross_entropy on the whole logits, for even and uneven
splits and every option; the argument checks. With two or more GPUs:
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
def test_combine_matches_whole_vocabulary(v, world, even, reduction, opts):
    torch.manual_seed(v * 7 + world)
    rows = 64
    x = torch.randn(rows, v, dtype=F64) * 3
    t = torch.randint(0, v, (rows,))
    t[::5] = -100
    w = torch.rand(v, dtype=F64) + 0.5 if opts.get("weight") else None
    eps = opts.get("label_smoothing", 0.0)
    z = opts.get("z_loss", 0.0)
    stats = shard_stats(x, t, splits(v, world, even), w, eps)
    loss, lse = qd._combine(stats, t, w.float() if w is not None else None, -100, qd._REDUCTIONS[reduction],
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
    loss, _ = qd._combine(stats, t, None, -100, 0, 0.0, 0.0, 10)
    assert torch.isfinite(loss[0]) and torch.isnan(loss[1]) and torch.isnan(loss[2]) and loss[3] == 0
    t_all = torch.full((4,), -100)
    mean, _ = qd._combine(shard_stats(x, t_all, [(0, 10)]), t_all, None, -100, 1, 0.0, 0.0, 10)
    total, _ = qd._combine(shard_stats(x, t_all, [(0, 10)]), t_all, None, -100, 2, 0.0, 0.0, 10)
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
