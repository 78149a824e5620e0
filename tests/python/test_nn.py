"""quack_cpp.RMSNorm against torch.nn.RMSNorm."""
import pytest
import torch

import quack_cpp
from rmsnorm_ref import assert_close, check_grads, reference

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
FP32_EPS = torch.finfo(torch.float32).eps


# ---------------------------------------------------------------------------
# Construction and state (CPU).

@pytest.mark.parametrize("shape", [64, (64,), [64], torch.Size([64])])
def test_constructor_like_torch(shape):
    ours, theirs = quack_cpp.RMSNorm(shape), torch.nn.RMSNorm(shape)
    assert ours.normalized_shape == theirs.normalized_shape == (64,)
    assert ours.eps is None and theirs.eps is None
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    assert torch.equal(ours.weight, theirs.weight)
    assert repr(ours) == repr(theirs) == "RMSNorm((64,), eps=None, elementwise_affine=True)"


def test_factory_kwargs_and_options():
    m = quack_cpp.RMSNorm(32, eps=1e-5, dtype=BF16, device="meta")
    assert m.weight.dtype == BF16 and m.weight.device.type == "meta" and m.eps == 1e-5
    m = quack_cpp.RMSNorm(32, elementwise_affine=False)
    assert m.weight is None and m.bias is None and len(m.state_dict()) == 0
    assert len(torch.nn.RMSNorm(32, elementwise_affine=False).state_dict()) == 0
    m = quack_cpp.RMSNorm(32, bias=True)
    assert list(m.state_dict()) == ["weight", "bias"] and torch.equal(m.bias, torch.zeros(32))
    assert "bias=True" in repr(m)


def test_state_dict_interchange():
    theirs = torch.nn.RMSNorm(16)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(16))
    ours = quack_cpp.RMSNorm(16)
    ours.load_state_dict(theirs.state_dict())
    assert torch.equal(ours.weight, theirs.weight)
    back = torch.nn.RMSNorm(16)
    back.load_state_dict(ours.state_dict())
    assert torch.equal(back.weight, theirs.weight)


@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 4), (), [4, 8]])
def test_only_last_dim(shape):
    with pytest.raises(ValueError, match="quack_cpp.RMSNorm: normalized_shape .*last dimension"):
        quack_cpp.RMSNorm(shape)


def test_bad_constructor_values():
    with pytest.raises(ValueError, match="normalized_shape must be >= 1"):
        quack_cpp.RMSNorm(0)
    with pytest.raises(ValueError, match="eps"):
        quack_cpp.RMSNorm(8, eps=-1.0)


def test_forward_checks():
    m = quack_cpp.RMSNorm(8)
    with pytest.raises(ValueError, match=r"quack_cpp.RMSNorm: x's last dimension must be normalized_shape = 8, got x of shape \(2, 7\)"):
        m(torch.randn(2, 7))
    with pytest.raises(ValueError, match="quack_cpp.rmsnorm: x must be a CUDA tensor"):
        m(torch.randn(2, 8))
    with pytest.raises(ValueError, match="x must have at least one dimension"):
        m(torch.tensor(1.0))


def test_meta_forward():
    m = quack_cpp.RMSNorm(8, device="meta", dtype=F32)
    y = m(torch.empty(3, 5, 8, device="meta", dtype=BF16))
    assert y.shape == (3, 5, 8) and y.dtype == BF16


# ---------------------------------------------------------------------------
# Forward on the GPU.

def _randomize(*mods):
    w = torch.randn(mods[0].weight.shape) * 0.5 + 1.0
    for m in mods:
        with torch.no_grad():
            m.weight.copy_(w)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("x_dtype", [F32, F16, BF16])
@pytest.mark.parametrize("w_dtype", [F32, BF16])
@pytest.mark.parametrize("eps", [None, 1e-5])
def test_matches_torch(x_dtype, w_dtype, eps):
    n = 1000
    ours = quack_cpp.RMSNorm(n, eps=eps, device="cuda", dtype=w_dtype)
    theirs = torch.nn.RMSNorm(n, eps=eps, device="cuda", dtype=w_dtype)
    _randomize(ours, theirs)
    x = torch.randn(3, 37, n, device="cuda", dtype=x_dtype)
    with torch.no_grad():
        y, t = ours(x), theirs(x)
    assert y.dtype == t.dtype == x_dtype and y.shape == t.shape
    ref, _, _, scale = reference(x, ours.weight, eps=FP32_EPS if eps is None else eps)
    assert_close(y, ref, scale, "RMSNorm")
    # torch rounds its own way: within 2 ulps (+ its fp32 error) of ours.
    assert_close(t, ref, scale, "torch.nn.RMSNorm", ulps=3.0, rel32=1e-4)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("x_dtype", [F16, BF16, F32])
def test_default_eps_is_torchs(x_dtype):
    # Rows with mean(x^2) ~ 1e-8: the output depends on eps, so a different
    # default (e.g. finfo(bfloat16).eps) would be far off.
    n = 256
    ours = quack_cpp.RMSNorm(n, device="cuda", dtype=x_dtype)
    theirs = torch.nn.RMSNorm(n, device="cuda", dtype=x_dtype)
    x = (torch.randn(4, n, device="cuda") * 1e-4).to(x_dtype)
    with torch.no_grad():
        y, t = ours(x).double(), theirs(x).double()
    assert torch.allclose(y, t, rtol=2e-2, atol=0), (y - t).abs().max()


@pytest.mark.requires_gpu
def test_no_affine_and_bias():
    n = 300
    x = torch.randn(5, n, device="cuda", dtype=BF16)
    m = quack_cpp.RMSNorm(n, eps=1e-6, elementwise_affine=False, device="cuda")
    with torch.no_grad():
        ref, _, _, scale = reference(x, eps=1e-6)
        assert_close(m(x), ref, scale, "no affine")
        mb = quack_cpp.RMSNorm(n, eps=1e-6, bias=True, device="cuda")
        mb.weight.copy_(torch.randn(n))
        mb.bias.copy_(torch.randn(n))
        ref, _, _, scale = reference(x, mb.weight, mb.bias, eps=1e-6)
        assert_close(mb(x), ref, scale, "bias")


@pytest.mark.requires_gpu
def test_training_step_gradients():
    m = quack_cpp.RMSNorm(128, eps=1e-6, device="cuda")
    with torch.no_grad():
        m.weight.copy_(torch.randn(128))
    x = torch.randn(4, 128, device="cuda", requires_grad=True)
    check_grads(x, m.weight, eps=1e-6, rtol=1e-4)