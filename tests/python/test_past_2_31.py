"""Every op on tensors of more than 2^31 elements (issue 7): 8200 x 262144
bf16 (2.15e9 elements, 4.3 GB a tensor), so every row from 8192 on starts
past element 2^31 (byte 2^32) of each row-major operand, where an offset
computed in 32 bits would land in another row (or outside the tensor).
Outputs come from poisoned allocator memory; rows on both sides of 2^31 are
checked against float64, and the sums over every row (the norms' weight
gradients, cross-entropy's mean) in float64 slabs. RMSNorm's forward has its
own such test in test_rmsnorm.py."""

import os

import pytest
import torch

import quack_cpp
from rmsnorm_ref import assert_close, poison_allocator, reference

pytestmark = [pytest.mark.requires_gpu, pytest.mark.huge]

M, N = 8200, 262144
assert M * N > 2**31 and 8192 * N == 2**31
ROWS = [0, 1, 8191, 8192, 8193, 8199]  # both sides of element 2^31
BF16, F32 = torch.bfloat16, torch.float32
RTOL = 1.6e-2  # bf16 outputs: relative to |want| + the formula's terms
SLAB = 256     # rows of a float64 slab


@pytest.fixture(autouse=True)
def _one_at_a_time():
    """The suite runs on several pytest-xdist workers: these tests take a
    lock file so that only one of them (9-17 GB) runs at a time, and give
    their memory back to the device when they end (a worker's caching
    allocator would otherwise keep it)."""
    import fcntl
    import gc
    import tempfile
    with open(os.path.join(tempfile.gettempdir(), "quack_cpp_past_2_31.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            gc.collect()
            torch.cuda.empty_cache()
            fcntl.flock(lock, fcntl.LOCK_UN)


def big(scale=1.0):
    """M x N bf16 N(0, scale^2), generated in place (no fp32 copy)."""
    return torch.empty(M, N, device="cuda", dtype=BF16).normal_(0.0, scale)


def close(got, want, cond, what, rtol=RTOL, atol=1e-30):
    """|got - want| <= rtol * (|want| + cond) + atol everywhere, got finite."""
    g = got.double()
    assert bool(torch.isfinite(g).all()), f"{what}: non-finite values (poisoned output not written?)"
    ratio = ((g - want).abs() / (rtol * (want.abs() + cond) + atol)).max().item()
    assert ratio <= 1.0, f"{what}: max error / bound {ratio:.3g}"


@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward_and_backward(log):
    x, dy = big(2.0), big()
    xg = x.requires_grad_()
    poison_allocator(((M, N), BF16))
    y = (quack_cpp.log_softmax if log else quack_cpp.softmax)(xg)
    xs = x.detach()[ROWS].double()
    if log:
        want = torch.log_softmax(xs, -1)
        centred = xs - xs.amax(-1, keepdim=True)
        cond = centred.abs() + (centred - want).abs()
    else:
        want = torch.softmax(xs, -1)
        cond = torch.full_like(want, 1.0 / N)
    close(y.detach()[ROWS], want, cond, "y")
    poison_allocator(((M, N), BF16))
    y.backward(dy)
    ys, dys = y.detach()[ROWS].double(), dy[ROWS].double()  # what the backward read
    if log:
        want = dys - ys.exp() * dys.sum(-1, keepdim=True)
        cond = dys.abs() + ys.exp() * dys.abs().sum(-1, keepdim=True) * (1.0 + ys.abs())
    else:
        want = ys * (dys - (dys * ys).sum(-1, keepdim=True))
        cond = ys.abs() * (dys.abs() + (dys * ys).abs().sum(-1, keepdim=True))
    close(xg.grad[ROWS], want, cond, "dx")


def _ce_reference(xs, t, smoothing, softcap):
    """float64 (loss, dloss/dx) of rows xs (cross-entropy against class
    indices t, -100 ignored; no reduction, unit upstream gradient) and the
    magnitude of the loss's terms."""
    if softcap:
        th = torch.tanh(xs / softcap)
        z = softcap * th
    else:
        z = xs
    lse = torch.logsumexp(z, -1)
    counted = t != -100
    tc = torch.where(counted, t, torch.zeros_like(t))
    zt = z.gather(1, tc[:, None])[:, 0]
    V = z.shape[-1]
    loss = (1 - smoothing) * (lse - zt) + smoothing * (lse - z.mean(-1))
    loss = torch.where(counted, loss, torch.zeros_like(loss))
    onehot = torch.zeros_like(z).scatter_(1, tc[:, None], 1.0)
    grad = torch.softmax(z, -1) - (1 - smoothing) * onehot - smoothing / V
    if softcap:
        grad = grad * (1 - th * th)
    grad = torch.where(counted[:, None], grad, torch.zeros_like(grad))
    return loss, grad, lse.abs() + zt.abs() + z.abs().mean(-1)


@pytest.mark.parametrize("general", [False, True], ids=["plain_mean", "softcap_smoothing_none"])
def test_cross_entropy_loss_and_gradient(general):
    x = big(2.0)
    t = torch.randint(0, N, (M,), device="cuda")
    t[8193] = -100  # an ignored row past 2^31
    t[5] = -100
    smoothing, softcap = (0.1, 30.0) if general else (0.0, None)
    reduction = "none" if general else "mean"
    xg = x.requires_grad_()
    poison_allocator(((M, N), BF16), ((M,), F32))
    loss = quack_cpp.cross_entropy(xg, t, reduction=reduction, label_smoothing=smoothing, softcap=softcap)
    rows = torch.tensor(ROWS, device="cuda")
    want, want_grad, terms = _ce_reference(x.detach()[ROWS].double(), t[rows], smoothing, softcap)
    counted = int((t != -100).sum())
    if general:
        # fp32 arithmetic; the softcap's tanh is an approximation (~2^-11).
        close(loss.detach()[ROWS], want, terms, "loss", rtol=2e-3)
        loss.backward(torch.ones_like(loss))
        scale = 1.0
    else:
        total = torch.zeros((), dtype=torch.float64, device="cuda")
        for r0 in range(0, M, SLAB):
            part, _, _ = _ce_reference(x.detach()[r0:r0 + SLAB].double(), t[r0:r0 + SLAB], 0.0, None)
            total += part.sum()
        close(loss.detach().reshape(1), (total / counted).reshape(1), torch.zeros(1, device="cuda"), "mean loss",
              rtol=1e-5)
        loss.backward()
        scale = 1.0 / counted
    assert xg.grad.dtype == BF16 and xg.grad.shape == (M, N)
    p = torch.softmax(x.detach()[ROWS].double(), -1) * scale
    close(xg.grad[ROWS], want_grad * scale, p + scale * (t[rows] != -100)[:, None].double(), "dlogits")
    assert bool((xg.grad[8193] == 0).all()), "an ignored row's gradient is exactly 0"


@pytest.mark.parametrize("centre", [False, True], ids=["rmsnorm", "layernorm"])
def test_norm_forward_and_backward(centre):
    x, dy = big(), big()
    w = 1.0 + 0.1 * torch.randn(N, device="cuda")
    b = 0.1 * torch.randn(N, device="cuda")
    xg, wg, bg = x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
    norm = quack_cpp.layernorm if centre else quack_cpp.rmsnorm
    poison_allocator(((M, N), BF16))
    y = norm(xg, wg, bg, eps=1e-5)
    rows = x.detach()[ROWS]
    ref_y, _, _, scale = reference(rows, w.detach(), b.detach(), eps=1e-5, centre=centre)
    assert_close(y.detach()[ROWS], ref_y, scale, "y (rows past 2^31 included)")
    poison_allocator(((M, N), BF16), ((N,), F32))
    y.backward(dy)
    # dx on the sampled rows: float64 autograd of the reference.
    rd = rows.double().requires_grad_()
    yd, _, _, _ = reference(rd, w.detach().double(), b.detach().double(), eps=1e-5, centre=centre)
    yd.backward(dy[ROWS].double())
    want = rd.grad
    err = (xg.grad[ROWS].double() - want).abs()
    assert bool((err <= 3e-2 * (want.abs() + want.abs().mean())).all()), f"dx: max err {err.max().item():.3g}"
    # dw, db: sums over every row, in float64 slabs.
    dw = torch.zeros(N, dtype=torch.float64, device="cuda")
    db = torch.zeros(N, dtype=torch.float64, device="cuda")
    for r0 in range(0, M, SLAB):
        h = x.detach()[r0:r0 + SLAB].double()
        g = dy[r0:r0 + SLAB].double()
        hc = h - h.mean(-1, keepdim=True) if centre else h
        rstd = torch.rsqrt((hc * hc).mean(-1, keepdim=True) + 1e-5)
        dw += (g * hc * rstd).sum(0)
        db += g.sum(0)
    for name, got, want in (("dweight", wg.grad, dw), ("dbias", bg.grad, db)):
        assert got.dtype == F32 and got.shape == (N,)
        err = (got.double() - want).abs()
        # fp32 sums of 8200 terms of |.| ~ 1: a few thousand ulps of fp32 at most.
        assert bool((err <= 1e-4 * (want.abs() + want.abs().mean())).all()), \
            f"{name}: max err {err.max().item():.3g}, max |ref| {want.abs().max().item():.3g}"
