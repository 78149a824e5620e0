"""bench/bench_softmax.py without a GPU: the float64 references and their
error scales for softmax and log-softmax, checked through the torch peer's
forward and backward on CPU tensors, and the peers without a log-softmax."""

import pytest

from bench_loader import load

torch = pytest.importorskip("torch")
sm = load("bench_softmax")


@pytest.mark.parametrize("dtname", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("log", [False, True])
def test_torch_peer_passes_and_a_wrong_output_does_not(log, dtname):
    dtype = getattr(torch, sm.DTYPES[dtname])
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(9, 700, generator=g) * 2).to(dtype)
    dy = torch.randn(9, 700, generator=g).to(dtype)
    rows = torch.tensor([0, 4, 8])
    y, want_y, cond_fwd, want_dx, cond_bwd = sm.references(torch, x, dy, rows, log)
    fwd, bwd = sm.make_impl("torch", torch, log)(x, y, dy)

    def check(out, want, cond):  # as run's checker: the sampled rows, then all of them
        return sm.check(torch, out.index_select(0, rows), want, cond, dtname, torch.arange(len(rows)))
    ok, detail = check(fwd(), want_y, cond_fwd)
    assert ok, detail
    ok, detail = check(bwd(), want_dx, cond_bwd)
    assert ok, detail
    # 3% off everywhere (or, where the value is tiny, 0.05 off) fails.
    bad = fwd().double()
    assert not check(torch.where(bad.abs() > 0.1, bad * 1.03, bad + 0.05).to(dtype), want_y, cond_fwd)[0]
    bad = bwd().double()
    assert not check((bad + 0.05 + bad.abs() * 0.03).to(dtype), want_dx, cond_bwd)[0]


def test_log_references_are_log_softmax():
    x = torch.randn(4, 50, dtype=torch.float64)
    dy = torch.randn(4, 50, dtype=torch.float64)
    rows = torch.arange(4)
    y, want_y, cond_fwd, want_dx, _ = sm.references(torch, x, dy, rows, True)
    assert torch.allclose(want_y, torch.log_softmax(x, -1), rtol=0, atol=1e-14)
    yg = x.clone().requires_grad_()
    torch.log_softmax(yg, -1).backward(dy)
    assert torch.allclose(want_dx, yg.grad, rtol=1e-5, atol=1e-6)  # y went through fp32
    assert bool((cond_fwd >= want_y.abs() - 1e-12).all())


@pytest.mark.parametrize("key", ["liger", "quack"])
def test_peers_without_log_softmax_say_so(key):
    with pytest.raises(RuntimeError, match="no log-softmax"):
        sm.make_impl(key, torch, log=True)


def test_log_option():
    assert sm.parse_args(["--log"]).log and not sm.parse_args([]).log
