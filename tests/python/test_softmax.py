"""quack_cpp.softmax / log_softmax: argument checks and shape inference run
everywhere; the GPU tests compare forward and backward with a float64 torch
reference on fresh random inputs, outputs of the raw launch poisoned first."""
import re

import pytest
import torch

import quack_cpp
from quack_cpp import _softmax

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = [F32, F16, BF16]
OPS = [("softmax", quack_cpp.softmax, torch.softmax), ("log_softmax", quack_cpp.log_softmax, torch.log_softmax)]


def raises(exc, op, *names):
    pattern = f"^quack_cpp.{op}: " + "".join(f"(?=.*{re.escape(n)})" for n in names)
    return pytest.raises(exc, match=pattern)


# ---------------------------------------------------------------------------
# Checks (no GPU needed).

@pytest.mark.parametrize("op,fn,_", OPS)
def test_x_not_a_tensor(op, fn, _):
    with raises(TypeError, op, "x", "torch.Tensor"):
        fn([1.0, 2.0])


@pytest.mark.parametrize("op,fn,_", OPS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bool])
def test_x_dtype(op, fn, _, dtype):
    with raises(TypeError, op, "x", str(dtype)):
        fn(torch.zeros(2, 8, dtype=dtype))


@pytest.mark.parametrize("op,fn,_", OPS)
def test_zero_dim_and_empty_dim(op, fn, _):
    with raises(ValueError, op, "x", "0-d"):
        fn(torch.tensor(1.0))
    with raises(ValueError, op, "size >= 1"):
        fn(torch.zeros(3, 0))


@pytest.mark.parametrize("op,fn,_", OPS)
def test_dim_out_of_range_and_wrong_type(op, fn, _):
    x = torch.zeros(2, 3, 4)
    with raises(ValueError, op, "dim", "[-3, 2]"):
        fn(x, dim=3)
    with raises(TypeError, op, "dim"):
        fn(x, dim=1.0)


@pytest.mark.parametrize("op,fn,_", OPS)
def test_cpu_tensor_rejected(op, fn, _):
    with raises(ValueError, op, "x", "CUDA", "cpu"):
        fn(torch.zeros(2, 8))


@pytest.mark.parametrize("log", [False, True])
def test_fake_shapes_on_meta(log):
    x = torch.empty(3, 5, 7, dtype=BF16, device="meta")
    y = torch.ops.quack_cpp.softmax_fwd(x, log)
    assert y.shape == x.shape and y.dtype == BF16 and y.device.type == "meta"
    dx = torch.ops.quack_cpp.softmax_bwd(y, torch.empty_like(y), log)
    assert dx.shape == x.shape and dx.dtype == BF16


def test_public_names():
    assert quack_cpp.softmax is _softmax.softmax and quack_cpp.log_softmax is _softmax.log_softmax


# ---------------------------------------------------------------------------
# GPU: against float64 torch.

def tol(dtype):
    return {F32: (1e-6, 2e-5), F16: (1e-4, 2e-3), BF16: (1e-3, 1.6e-2)}[dtype]


def check(got, want, dtype, scale, cond=None):
    """|got - want| <= atol * scale + rtol * (|want| + cond) + the smallest step
    the output resolves (fp16 subnormals; results below 2^-126 flush to zero).
    cond: the error the inputs' own rounding carries through the formula."""
    atol, rtol = tol(dtype)
    tiny = 2.0 ** -24 if dtype == F16 else 2.0 ** -126
    err = (got.double() - want).abs()
    bound = atol * scale + rtol * (want.abs() + (0 if cond is None else cond)) + tiny
    bad = ~((err <= bound) | (got.double().isnan() & want.isnan()) | (got.double() == want))
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} wrong; first at {bad.nonzero()[0].tolist()}: " \
                          f"got {got.double()[bad][0].item()}, want {want[bad][0].item()}"


def grad_cond(op, y, dy, dtype):
    """How far dx moves when y (saved in its dtype) and the fp32 sums move by
    a relative step: the conditioning of dx = y (dy - sum(dy y)) and of
    dx = dy - exp(y) sum(dy) (cancellation makes |dx| far smaller). fp16
    probabilities below 2^-14 are subnormal: their rounding step is absolute,
    a floor under |y|."""
    if op == "softmax":
        floor = 2.0 ** -24 / tol(dtype)[1] if dtype == F16 else 0.0
        ay = y.abs() + floor
        return ay * (dy.abs() + (dy.abs() * ay).sum(-1, keepdim=True))
    return dy.abs() + y.exp() * dy.abs().sum(-1, keepdim=True) * (1 + y.abs())


# (3, 1048576): fp32 rows past 512K take the grid kernels both ways (128
# ranks, one group of 3 rows), with the workspaces the Python front asks
# for; 16-bit rows their staged CTAs.
SHAPES = [(1, 1), (7, 3), (199, 8), (37, 100), (8192, 1000), (4, 4097), (3, 32768), (2, 65544), (2, 262144), (5, 50257),
          (9, 32001), (3, 128257), (3, 1048576)]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("op,fn,ref", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_backward(op, fn, ref, dtype, shape):
    x = (torch.randn(*shape, device="cuda") * 3).to(dtype).requires_grad_()
    y = fn(x)
    want = ref(x.detach().double(), -1)
    check(y, want, dtype, 1.0 if op == "log_softmax" else 1.0 / shape[-1])
    dy = torch.randn_like(y)
    y.backward(dy)
    xd = x.detach().double().requires_grad_()
    ref(xd, -1).backward(dy.double())
    check(x.grad, xd.grad, dtype, 0.0, grad_cond(op, ref(x.detach().double(), -1), dy.double(), dtype))


@pytest.mark.requires_gpu
@pytest.mark.parametrize("op,fn,ref", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_large_magnitude_rows(op, fn, ref, dtype):
    x = (torch.randn(64, 4096, device="cuda") * 4 + 1e4).to(dtype)
    check(fn(x), ref(x.double(), -1), dtype, 1.0 if op == "log_softmax" else 1.0 / 4096)


def huge_rows(n, dtype, seed):
    """Rows of finite values of any magnitude: shifted by 3e7 and 1e7,
    -1e12 + 2e6 u, one 3e38, 3e38 with 2.5e38 and -3e38, all -3e38 but one
    -2.9e38, two maxima of 3e38 (log2 units break from about 1e10, and past
    2.36e38 max log2 e is no float)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(7, n, device="cuda", generator=g)
    x[0] += 3e7
    x[1] = -1e12 + 2e6 * x[1]
    x[2, n // 2] = 3e38
    x[3, n // 3] = -3e38
    x[3, 0] = 3e38
    x[3, n - 1] = 2.5e38
    x[4] = -3e38
    x[4, n - 1] = -2.9e38
    x[5] += 1e7
    x[6, n // 4] = 3e38
    x[6, 3 * n // 4] = 3e38
    return x.to(dtype)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("op,fn,ref", OPS)
@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("n", [7, 4096, 65544, 131072])
def test_huge_finite_values_match_float64(op, fn, ref, dtype, n):
    x = huge_rows(n, dtype, n)
    want = ref(x.double(), -1)
    # log_softmax of -3e38 against 3e38 is -6e38: -inf in every dtype.
    want = torch.where(want.abs() > 3.5e38, want.sign() * float("inf"), want)
    check(fn(x), want, dtype, 1.0 if op == "log_softmax" else 1.0 / n)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("op,fn,ref", OPS)
def test_special_values_match_torch(op, fn, ref):
    inf, nan = float("inf"), float("nan")
    rows = [[inf, 1.0, 2.0, 3.0], [-inf] * 4, [nan, 1.0, 2.0, 3.0], [-inf, 1.0, -inf, 2.0]]
    x = torch.tensor(rows, device="cuda")
    got = fn(x)
    want = ref(x.cpu(), -1)  # torch's CPU result states the rule
    assert torch.equal(got.isnan().cpu(), want.isnan())
    ok = ~want.isnan()
    assert torch.allclose(got.cpu()[ok], want[ok], rtol=1e-5, atol=1e-7)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("op,fn,ref", OPS)
def test_strided_misaligned_and_other_dim(op, fn, ref):
    base = torch.randn(33, 1001, device="cuda", dtype=BF16)
    x = base[:, 1:1000]  # misaligned rows with a pitch of 1001
    check(fn(x), ref(x.double(), -1), BF16, 1.0 if op == "log_softmax" else 1e-3)
    x3 = torch.randn(5, 6, 7, device="cuda")
    check(fn(x3, dim=1), ref(x3.double(), 1), F32, 1.0)


@pytest.mark.requires_gpu
def test_raw_launch_overwrites_poisoned_output():
    x = torch.randn(16, 300, device="cuda")
    out = _softmax._launch_fwd(x, False)  # fresh allocation; poison then relaunch into it
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    _softmax._C.softmax_fwd(16, 300, x.data_ptr(), 0, 300, out.data_ptr(), 300, False,
                            torch.cuda.current_stream().cuda_stream)
    check(out, torch.softmax(x.double(), -1), F32, 1.0 / 300)


@pytest.mark.requires_gpu
def test_compile_fullgraph_forward_backward():
    def f(x):
        return quack_cpp.log_softmax(x * 2.0).sum()

    x = torch.randn(8, 512, device="cuda", requires_grad=True)
    g = torch.compile(f, fullgraph=True)
    g(x).backward()
    xd = x.detach().double().requires_grad_()
    torch.log_softmax(xd * 2.0, -1).sum().backward()
    # d/dx sum(log_softmax(2x)) = 2 (1 - N softmax(2x)): a cancellation.
    check(x.grad, xd.grad, F32, 0.0, 2 * grad_cond("log_softmax", torch.log_softmax(xd.detach() * 2.0, -1),
                                                   torch.ones_like(xd), F32))
