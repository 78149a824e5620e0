"""Eager training without the custom ops' dispatch: rmsnorm, layernorm and
softmax with a gradient to come call the library from a
torch.autograd.Function (_NormFn, _SoftmaxFn) on eager CUDA tensors, and
their backward calls it directly too; torch.compile and fake tensors keep the
torch.library ops (cross-entropy's _CrossEntropyFn: test_cross_entropy.py).

Without a GPU, CPU tensors stand in (_direct forced) and the bindings are
replaced by recorders: what reaches the library, and that no custom op is
called. On the GPU: the direct path and the ops' path give the same bits,
forward and backward, and a second derivative is refused.
"""
import pytest
import torch

import quack_cpp
from quack_cpp import _common, _rmsnorm, _softmax

F32, BF16 = torch.float32, torch.bfloat16


class NoOps:
    def __getattr__(self, name):
        raise AssertionError(f"custom op {name} called in eager")


@pytest.fixture
def library(monkeypatch):
    """Records the bindings' calls (name and arguments) on CPU tensors."""
    calls = []

    def recorder(name):
        def call(*args):
            calls.append((name, args))
            return 0  # the backward's workspace query: none needed

        return call

    for mod in (_rmsnorm, _softmax):
        monkeypatch.setattr(mod, "_direct", lambda t: True)
        monkeypatch.setattr(mod, "_raw_stream", lambda dev: 0)
    monkeypatch.setattr(_common, "_current_device", lambda: -1)  # a CPU tensor's get_device()
    for name in ("_rmsnorm_fwd", "_rmsnorm_bwd", "_layernorm_fwd", "_layernorm_bwd"):
        monkeypatch.setattr(_rmsnorm, name, recorder(name))
    monkeypatch.setattr(_softmax._C, "softmax_fwd", recorder("softmax_fwd"), raising=False)
    monkeypatch.setattr(_softmax._C, "softmax_bwd", recorder("softmax_bwd"), raising=False)
    monkeypatch.setattr(torch.ops, "quack_cpp", NoOps())
    return calls


@pytest.mark.parametrize("centre", [False, True])
def test_norm_training_reaches_the_library_directly(library, centre):
    calls = library
    n = 48
    x = torch.randn(5, n, dtype=BF16, requires_grad=True)
    w = torch.randn(n, dtype=F32, requires_grad=True)
    b = torch.randn(n, dtype=F32, requires_grad=True)
    r = torch.randn(5, n, dtype=F32, requires_grad=True)
    outs = _rmsnorm._norm_fwd(x, w, b, r, None, None, 1e-5, 0.0, False, False, centre)
    out, res_out, rstd, mean = outs
    fwd = "_layernorm_fwd" if centre else "_rmsnorm_fwd"
    assert [c[0] for c in calls] == [fwd]
    args = calls[0][1]
    # The forward writes h (residual_out: a residual is added) and the
    # statistics for the backward, though prenorm and return_stats are off.
    assert args[15] == res_out.data_ptr() != 0 and args[18] == rstd.data_ptr() != 0
    assert res_out.shape == x.shape and res_out.dtype == F32  # residual_dtype: the residual's
    assert rstd.shape == (5,) and not rstd.requires_grad
    assert (mean is not None) == centre
    if centre:
        assert args[22] == mean.data_ptr() and not mean.requires_grad
    assert out.requires_grad and out.dtype == BF16
    calls.clear()
    out.float().sum().backward()
    bwd = "_layernorm_bwd" if centre else "_rmsnorm_bwd"
    # The workspace query (mode 2), then the run (mode 0).
    assert [(c[0], c[1][27]) for c in calls] == [(bwd, 2), (bwd, 0)]
    assert calls[1][1][2] == res_out.data_ptr()  # h: the forward's residual_out
    if centre:
        assert calls[1][1][-1] == mean.data_ptr()
    for t in (x, w, b, r):
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype


def test_norm_without_grad_is_one_launch_and_no_function(library):
    calls = library
    x = torch.randn(3, 16, dtype=BF16)
    out, res_out, rstd, _ = _rmsnorm._norm_fwd(x, None, None, None, None, None, 1e-6, 0.0, False, False, False)
    assert [c[0] for c in calls] == ["_rmsnorm_fwd"]
    assert out.grad_fn is None and res_out is None and rstd is None
    # requires_grad under no_grad: no gradient to come either.
    x.requires_grad_(True)
    with torch.no_grad():
        out, _, rstd, _ = _rmsnorm._norm_fwd(x, None, None, None, None, None, 1e-6, 0.0, False, False, False)
    assert out.grad_fn is None and rstd is None


@pytest.mark.parametrize("log", [False, True])
def test_softmax_training_reaches_the_library_directly(library, log):
    calls = library
    x = torch.randn(4, 33, dtype=BF16, requires_grad=True)
    y = _softmax._SoftmaxFn.apply(x, log)
    assert [c[0] for c in calls] == ["softmax_fwd"] and calls[0][1][-2] is log
    calls.clear()
    y.float().sum().backward()
    assert [c[0] for c in calls] == ["softmax_bwd"] and x.grad.shape == x.shape


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm", "softmax"])
def test_a_second_derivative_is_refused_naming_the_op(library, op):
    # create_graph: the first derivative works (its value is the same), but
    # its own gradient raises -- also when a constant-weighted loss gives
    # incoming gradients that do not require grad (once_differentiable
    # would let that pass with the op's term silently missing).
    x = torch.randn(4, 32, dtype=BF16, requires_grad=True)
    if op == "softmax":
        fwd = lambda: _softmax._SoftmaxFn.apply(x, False)  # noqa: E731
    else:
        fwd = lambda: _rmsnorm._norm_fwd(x, None, None, None, None, None, 1e-6, 0.0, False, False,  # noqa: E731
                                         op == "layernorm")[0]
    c = torch.randn(4, 32)
    (g,) = torch.autograd.grad((fwd().float() * c).sum(), x, create_graph=True)
    assert g.shape == x.shape and g.requires_grad
    with pytest.raises(RuntimeError, match=f"^quack_cpp.{op}: a second derivative"):
        (x.float().sum() + g.float().pow(2).sum()).backward()
    # Without create_graph nothing is flagged.
    (g,) = torch.autograd.grad((fwd().float() * c).sum(), x)
    assert not g.requires_grad


# ---------------------------------------------------------------------------
# On the GPU.

OPS = ["rmsnorm", "layernorm", "softmax", "log_softmax", "cross_entropy"]


def _step(op):
    """(leaves, a training step's loss) on fresh bf16 inputs: the norms with
    weight, bias and a residual (prenorm: residual_out's gradient too),
    cross-entropy with a mean over 64 rows."""
    dev = "cuda"
    m, n = 64, 1000
    x = torch.randn(m, n, device=dev, dtype=BF16, requires_grad=True)
    if op in ("rmsnorm", "layernorm"):
        w = (1 + 0.5 * torch.randn(n, device=dev)).requires_grad_(True)
        b = torch.randn(n, device=dev, requires_grad=True)
        r = torch.randn(m, n, device=dev, dtype=BF16, requires_grad=True)
        gy, gr = torch.randn(m, n, device=dev), torch.randn(m, n, device=dev)

        def loss():
            y, h = getattr(quack_cpp, op)(x, w, b, residual=r, prenorm=True)
            return (y.float() * gy).sum() + (h.float() * gr).sum()

        return (x, w, b, r), loss
    if op == "cross_entropy":
        t = torch.randint(0, n, (m,), device=dev)
        return (x,), lambda: 3.0 * quack_cpp.cross_entropy(x, t)
    gy = torch.randn(m, n, device=dev)
    return (x,), lambda: (getattr(quack_cpp, op)(x).float() * gy).sum()


def _run(op, seed):
    torch.manual_seed(seed)
    leaves, loss = _step(op)
    value = loss()
    value.backward()
    return [value.detach()] + [t.grad for t in leaves]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("op", OPS)
def test_direct_path_equals_the_ops_bit_for_bit(op, monkeypatch):
    from quack_cpp import _cross_entropy

    direct = _run(op, 1234)
    for mod in (_rmsnorm, _softmax, _cross_entropy):
        monkeypatch.setattr(mod, "_direct", lambda t: False)
    via_ops = _run(op, 1234)
    assert all(torch.isfinite(d).all() for d in direct)
    for d, o in zip(direct, via_ops):
        assert d.dtype == o.dtype and torch.equal(d, o)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("op", OPS)
def test_second_derivative_is_refused(op):
    leaves, loss = _step(op)
    (g,) = torch.autograd.grad(loss(), leaves[0], create_graph=True)
    # A penalty on the gradient: refused, naming the op, not silently
    # missing the op's term.
    with pytest.raises(RuntimeError, match=f"quack_cpp.{op}: a second derivative"):
        g.float().pow(2).sum().backward()
