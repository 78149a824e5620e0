"""quack_cpp.layernorm / quack_cpp.LayerNorm on the GPU against an independent
float64 reference (rmsnorm_ref with centre=True) and torch.nn.LayerNorm.

Inputs get a per-row offset of several standard deviations: a variance taken
as mean(h^2) - mean^2 in fp32, or a row centred on another row's mean, fails.
Outputs are allocated on poisoned allocator blocks (see test_rmsnorm.py).
"""

import pytest
import torch
import torch.nn.functional as F

import quack_cpp
from rmsnorm_ref import check_grads, run_and_check

pytestmark = pytest.mark.requires_gpu

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = [F32, F16, BF16]
DEV = "cuda"
MS = [1, 7, 199, 4096, 65536]
NS = [1, 2, 3, 7, 8, 100, 127, 256, 1000, 1024, 4097, 8192, 16384, 65537, 131072, 262144]
MAX_ELEMS = 1 << 25


def dname(dt):
    return None if dt is None else str(dt).replace("torch.", "")


def rand(*shape, dtype=BF16, offset=True):
    """Rows off zero by up to 4 standard deviations (per row, varying)."""
    t = torch.randn(*shape, device=DEV, dtype=F32)
    if offset and len(shape) >= 2:
        rows = torch.arange(t.numel() // shape[-1], device=DEV, dtype=F32).reshape(*shape[:-1], 1)
        t = t + (rows % 9 - 4)
    return t.to(dtype)


def wrand(n, dtype=BF16):
    return (1 + 0.5 * torch.randn(n, device=DEV, dtype=F32)).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("m, n", [(m, n) for n in NS for m in MS if m * n <= MAX_ELEMS])
def test_sweep(m, n, dtype):
    run_and_check(rand(m, n, dtype=dtype), wrand(n, dtype), wrand(n, dtype) - 1, eps=1e-5, return_rstd=True,
                  centre=True)


# Rows past 512K columns of fp32 x, or of 16-bit x with fp32 weights, take
# the grid forward: the front passes the workspace the call asks for (the
# query says so), and results, rstd and mean match the float64 reference.
@pytest.mark.parametrize("centre", [False, True], ids=["rmsnorm", "layernorm"])
@pytest.mark.parametrize("m, n, x_dtype, w_dtype", [
    (9, 1 << 20, F32, F32), (5, 1 << 20, BF16, F32), (3, 600008, F16, F32), (4, 1 << 20, F32, None)], ids=str)
def test_long_rows_take_the_grid_forward(centre, m, n, x_dtype, w_dtype):
    from quack_cpp import _C
    x = rand(m, n, dtype=x_dtype)
    w = None if w_dtype is None else wrand(n, w_dtype)
    b = wrand(n, w_dtype) - 1 if w_dtype is not None else None
    codes = {F32: 0, F16: 1, BF16: 2}
    wc = 0 if w is None else codes[w.dtype]
    ws = _C.norm_fwd_ws(centre, m, n, x.data_ptr(), codes[x_dtype], n, 0, 0, 0, 0 if w is None else w.data_ptr(), wc,
                        0 if b is None else b.data_ptr(), wc, x.data_ptr(), codes[x_dtype], n, 0, 0, 0, 0, 1e-5, 0.0,
                        0, 0, 0, 0, 2)
    assert ws > 0
    run_and_check(x, w, b, eps=1e-5, return_rstd=True, centre=centre)


@pytest.mark.parametrize("n", [7, 1000, 4097, 65537, 262144])
@pytest.mark.parametrize("x_dtype, r_dtype, w_dtype, residual_dtype, out_dtype", [
    (BF16, F32, F32, F32, None), (F16, F16, BF16, None, F32), (BF16, BF16, BF16, BF16, BF16),
    (F32, BF16, F16, F16, BF16)], ids=str)
def test_residual_prenorm_mixed_dtypes(x_dtype, r_dtype, w_dtype, residual_dtype, out_dtype, n):
    m = 7 if n > 10000 else 199
    run_and_check(rand(m, n, dtype=x_dtype), wrand(n, w_dtype), wrand(n, w_dtype), rand(m, n, dtype=r_dtype),
                  out_dtype=out_dtype, residual_dtype=residual_dtype, prenorm=True, return_rstd=True,
                  centre=True, eps=1e-5)


@pytest.mark.parametrize("weight_offset", [0.0, 1.0])
@pytest.mark.parametrize("with_weight, with_bias", [(True, True), (True, False), (False, True), (False, False)])
def test_weight_bias_options(with_weight, with_bias, weight_offset):
    n = 1000
    run_and_check(rand(37, n), wrand(n) if with_weight else None, wrand(n, F32) if with_bias else None,
                  weight_offset=weight_offset, centre=True, return_rstd=True)


@pytest.mark.parametrize("n", [7, 1000, 4097, 65537])
def test_strided_and_misaligned_rows(n):
    base = rand(33, n + 9)
    run_and_check(base[:, :n], wrand(n), centre=True, return_rstd=True)  # strided rows
    run_and_check(base[:, 1:n + 1], wrand(n), centre=True, return_rstd=True)  # one element off 16 bytes


def test_constant_rows_and_large_offsets():
    # Rows with a large common offset: the variance is tiny next to mean^2.
    n = 4096
    x = (1000.0 + torch.randn(64, n, device=DEV)).float()
    y, mean, rstd = quack_cpp.layernorm(x, return_mean_rstd=True)
    xd = x.double()
    ref = F.layer_norm(xd, (n,), eps=1e-5)
    assert (y.double() - ref).abs().max().item() < 2e-3
    const = torch.full((3, n), 7.0, device=DEV)
    y0 = quack_cpp.layernorm(const)
    assert bool((y0 == 0).all())  # zero variance: (h - mean) * rsqrt(eps) = 0


def test_matches_torch_layer_norm():
    n = 4096
    x, w, b = rand(64, n), wrand(n), wrand(n) - 1
    ours = quack_cpp.layernorm(x, w, b)
    ref = F.layer_norm(x.double(), (n,), w.double(), b.double(), eps=1e-5)
    assert (ours.double() - ref).abs().max().item() < 0.07  # bf16 output rounding of values up to ~6


@pytest.mark.parametrize("prenorm", [False, True])
@pytest.mark.parametrize("ret", [False, True])
def test_return_structure(prenorm, ret):
    x, r = rand(5, 64), rand(5, 64)
    out = quack_cpp.layernorm(x, residual=r, prenorm=prenorm, return_mean_rstd=ret)
    if not prenorm and not ret:
        assert isinstance(out, torch.Tensor)
        return
    assert isinstance(out, tuple) and len(out) == 1 + prenorm + 2 * ret
    if ret:
        assert out[-2].dtype == F32 and out[-1].dtype == F32 and out[-1].shape == (5,)


@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64)])
def test_empty(shape):
    x = torch.empty(shape, device=DEV, dtype=BF16)
    y, mean, rstd = quack_cpp.layernorm(x, return_mean_rstd=True)
    assert y.shape == x.shape and mean.shape == x.shape[:-1] and rstd.shape == x.shape[:-1]


def test_errors_name_layernorm_and_the_argument():
    x = rand(4, 64)
    with pytest.raises(ValueError, match=r"quack_cpp\.layernorm: weight must have shape \(64,\)"):
        quack_cpp.layernorm(x, wrand(65))
    with pytest.raises(ValueError, match=r"quack_cpp\.layernorm: eps must be >= 0"):
        quack_cpp.layernorm(x, eps=-1.0)
    with pytest.raises(ValueError, match=r"quack_cpp\.layernorm: x must be a CUDA tensor"):
        quack_cpp.layernorm(x.cpu())


# ---------------------------------------------------------------------------
# Autograd.

@pytest.mark.parametrize("n", [3, 100, 1000, 4096, 65536, 262144])
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_backward_matches_float64_autograd(dtype, n):
    m = max(1, min(199, (1 << 21) // n))
    x = rand(m, n, dtype=dtype).requires_grad_()
    w = wrand(n, dtype).requires_grad_()
    b = wrand(n, dtype).requires_grad_()
    check_grads(x, w, b, rtol=1e-3 if dtype == F32 else 3e-2, centre=True, eps=1e-5)


@pytest.mark.parametrize("m", [1, 7, 199, 4096, 65536])
def test_backward_rows(m):
    n = 1024 if m < 65536 else 256
    x = rand(m, n).requires_grad_()
    w = wrand(n, F32).requires_grad_()
    b = wrand(n, F32).requires_grad_()
    check_grads(x, w, b, centre=True, eps=1e-5)


@pytest.mark.parametrize("weight, bias, residual, prenorm, offset, w_dtype",
                         [(True, True, True, True, 1.0, F32), (False, True, True, False, 0.0, BF16),
                          (True, False, False, True, 0.0, BF16), (False, False, False, False, 0.0, BF16),
                          (True, False, True, False, 0.5, F32)])
def test_backward_every_option(weight, bias, residual, prenorm, offset, w_dtype):
    x = rand(7, 3, 1000).requires_grad_()
    w = wrand(1000, w_dtype).requires_grad_() if weight else None
    b = wrand(1000, w_dtype).requires_grad_() if bias else None
    r = rand(7, 3, 1000, dtype=F32).requires_grad_() if residual else None
    check_grads(x, w, b, r, prenorm=prenorm, weight_offset=offset, grad_out_strided=True, centre=True)


def test_backward_misaligned_rows_and_long_split_rows():
    base = rand(33, 1001)
    x = base[:, 1:].detach().requires_grad_()  # the general kernel
    w = wrand(1000, F32).requires_grad_()
    r = rand(33, 1000, dtype=F16).requires_grad_()
    check_grads(x, w, residual=r, prenorm=True, centre=True)
    x = rand(3, 200001, dtype=F32).requires_grad_()  # past the register tiles: the split path
    w = wrand(200001, F32).requires_grad_()
    check_grads(x, w, wrand(200001, F32).requires_grad_(), centre=True, rtol=1e-3)


def test_gradcheck_fp32_small():
    # Finite differences in fp32 (the kernels' widest type): loose, but
    # independent of any reference formula.
    torch.manual_seed(0)
    x = rand(3, 17, dtype=F32).requires_grad_()
    w = wrand(17, F32).requires_grad_()
    b = wrand(17, F32).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, c, d: quack_cpp.layernorm(a, c, d), (x, w, b), eps=1e-2,
                                    atol=2e-2, rtol=2e-2, nondet_tol=0.0)


def test_weight_gradients_are_bit_identical_across_runs():
    x = rand(4096, 4096).requires_grad_()
    w = wrand(4096, F32).requires_grad_()
    b = wrand(4096, F32).requires_grad_()
    gy = rand(4096, 4096, offset=False)
    got = []
    for _ in range(3):
        x.grad = w.grad = b.grad = None
        quack_cpp.layernorm(x, w, b).backward(gy)
        got.append((x.grad.clone(), w.grad.clone(), b.grad.clone()))
    for other in got[1:]:
        assert all(torch.equal(a, c) for a, c in zip(got[0], other))


def test_opcheck():
    x, w, r = rand(9, 300), wrand(300, F32), rand(9, 300, dtype=F16)
    torch.library.opcheck(torch.ops.quack_cpp.layernorm_fwd.default,
                          (x, w, w, r, None, F32, 1e-5, 0.5, True, True))
    torch.library.opcheck(torch.ops.quack_cpp.layernorm_fwd.default,
                          (x, None, None, None, F16, None, 1e-5, 0.0, False, False))
    g, h = rand(9, 300, offset=False), rand(9, 300)
    mean, rstd = h.float().mean(-1), torch.rand(9, device=DEV) + 0.5
    torch.library.opcheck(torch.ops.quack_cpp.layernorm_bwd.default,
                          (g, h, rstd, w, None, 0.0, BF16, None, True, F32, mean))


# ---------------------------------------------------------------------------
# The module and torch.compile.

def test_module_is_a_drop_in_for_torch_layernorm():
    n = 1000
    ours = quack_cpp.LayerNorm(n, device=DEV)
    ref = torch.nn.LayerNorm(n, device=DEV)
    assert set(ours.state_dict()) == set(ref.state_dict()) == {"weight", "bias"}
    with torch.no_grad():
        ref.weight.copy_(wrand(n, F32))
        ref.bias.copy_(wrand(n, F32))
    ours.load_state_dict(ref.state_dict())
    x = rand(8, 3, n, dtype=F32).requires_grad_()
    gy = rand(8, 3, n, dtype=F32, offset=False)
    y = ours(x)
    y.backward(gy)
    gx, gw, gb = x.grad.clone(), ours.weight.grad.clone(), ours.bias.grad.clone()
    x.grad = None
    y_ref = ref(x)
    y_ref.backward(gy)
    assert torch.allclose(y, y_ref, atol=1e-4, rtol=1e-4)
    assert torch.allclose(gx, x.grad, atol=1e-4, rtol=1e-3)
    assert torch.allclose(gw, ref.weight.grad, atol=1e-3, rtol=1e-3)
    assert torch.allclose(gb, ref.bias.grad, atol=1e-3, rtol=1e-3)
    assert quack_cpp.LayerNorm(16, bias=False).bias is None
    assert quack_cpp.LayerNorm(16, elementwise_affine=False).weight is None
    with pytest.raises(ValueError, match="only the last dimension"):
        quack_cpp.LayerNorm((4, 16))


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_forward_and_backward(dynamic):
    torch._dynamo.reset()
    n = 512
    m = quack_cpp.LayerNorm(n, device=DEV)
    with torch.no_grad():
        m.weight.copy_(wrand(n, F32))
        m.bias.copy_(wrand(n, F32))

    def step(x, r):
        y, h = quack_cpp.layernorm(x, m.weight, m.bias, residual=r, prenorm=True)
        return (y.float() * y.float()).sum() + h.float().sum()

    g = torch.compile(step, fullgraph=True, dynamic=dynamic)
    for rows in (8, 37):
        x = rand(rows, n).requires_grad_()
        r = rand(rows, n, dtype=F32).requires_grad_()
        g(x, r).backward()
        got = (x.grad.clone(), r.grad.clone(), m.weight.grad.clone(), m.bias.grad.clone())
        x.grad = r.grad = m.weight.grad = m.bias.grad = None
        step(x, r).backward()
        want = (x.grad, r.grad, m.weight.grad, m.bias.grad)
        for a, b in zip(got, want):  # (inductor's loss gradient may round differently)
            assert a.dtype == b.dtype and torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2)
        x.grad = r.grad = m.weight.grad = m.bias.grad = None
