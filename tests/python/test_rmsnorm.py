"""quack_cpp.rmsnorm on the GPU against an independent float64 reference.

Outputs are allocated by the op, so "poisoned outputs" means poisoned
allocator blocks: before each call, blocks of the outputs' sizes are filled
with NaN bytes and freed, and every element of every output must then be
finite and within tolerance (see rmsnorm_ref.assert_close).
"""

import pytest
import torch

import quack_cpp
from rmsnorm_ref import assert_close, assert_rstd_close, check_grads, poison_allocator, reference, run_and_check

pytestmark = pytest.mark.requires_gpu

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = [F32, F16, BF16]
DEV = "cuda"

MS = [0, 1, 7, 199, 8192]
NS = [1, 2, 3, 7, 8, 31, 64, 100, 255, 256, 511, 1000, 1024, 4097, 8192, 12345, 16384, 32768, 65537,
      131072, 262144, 1048576]
# Keeps one sweep case (inputs, outputs, float64 reference) well under 2 GB.
MAX_SWEEP_ELEMS = 1 << 25


def rand(*shape, dtype=BF16):
    return torch.randn(*shape, device=DEV, dtype=dtype)


def dname(dt):
    return None if dt is None else str(dt).replace("torch.", "")


# ---------------------------------------------------------------------------
# Size sweeps.

def _sweep_cases():
    return [(m, n) for n in NS for m in MS if m * n <= MAX_SWEEP_ELEMS]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("m, n", _sweep_cases())
def test_sweep(m, n, dtype):
    run_and_check(rand(m, n, dtype=dtype), rand(n, dtype=dtype), return_rstd=True)


@pytest.mark.parametrize("m, n", [(m, n) for n in NS for m in (7, 199) if m * n <= MAX_SWEEP_ELEMS])
def test_sweep_residual_prenorm_bf16_x_fp32_stream(m, n):
    # bf16 activations with an fp32 residual stream: the most staged bytes per element.
    x, r = rand(m, n, dtype=BF16), rand(m, n, dtype=F32)
    run_and_check(x, rand(n, dtype=BF16), rand(n, dtype=BF16), r, residual_dtype=F32, prenorm=True,
                  return_rstd=True)


@pytest.mark.huge
@pytest.mark.parametrize("m, n, dtype, with_residual", [
    (8192, 8192, BF16, False),
    (8192, 16384, F32, True),
    (1024, 131072, BF16, True),
    (64, 1048576, F32, True),
    (3, 4194304, BF16, False),   # past a 16-CTA cluster's on-chip capacity: chunked
    (3, 4194304, F32, True),
    (2, 16777216, BF16, True),
])
def test_sweep_huge(m, n, dtype, with_residual):
    x = rand(m, n, dtype=dtype)
    r = rand(m, n, dtype=F32) if with_residual else None
    run_and_check(x, rand(n, dtype=F32), None, r, prenorm=with_residual, return_rstd=True)


# ---------------------------------------------------------------------------
# Options.

FEATURE_NS = [7, 1000, 4097, 65537]


@pytest.mark.parametrize("n", FEATURE_NS)
@pytest.mark.parametrize("b_dtype", [None, F32, BF16], ids=lambda d: f"b_{dname(d)}")
@pytest.mark.parametrize("w_dtype", [None, F32, F16, BF16], ids=lambda d: f"w_{dname(d)}")
@pytest.mark.parametrize("x_dtype", DTYPES, ids=lambda d: f"x_{dname(d)}")
def test_weight_bias_dtypes_independent(x_dtype, w_dtype, b_dtype, n):
    w = None if w_dtype is None else rand(n, dtype=w_dtype)
    b = None if b_dtype is None else rand(n, dtype=b_dtype)
    run_and_check(rand(33, n, dtype=x_dtype), w, b)


@pytest.mark.parametrize("n", FEATURE_NS)
@pytest.mark.parametrize("residual_dtype", [None, F32, BF16], ids=lambda d: f"rd_{dname(d)}")
@pytest.mark.parametrize("r_dtype", DTYPES, ids=lambda d: f"r_{dname(d)}")
@pytest.mark.parametrize("x_dtype", DTYPES, ids=lambda d: f"x_{dname(d)}")
def test_residual_prenorm(x_dtype, r_dtype, residual_dtype, n):
    x, r = rand(33, n, dtype=x_dtype), rand(33, n, dtype=r_dtype)
    run_and_check(x, rand(n, dtype=F32), None, r, residual_dtype=residual_dtype, prenorm=True)


@pytest.mark.parametrize("n", FEATURE_NS)
@pytest.mark.parametrize("r_dtype", DTYPES, ids=dname)
def test_residual_without_prenorm(r_dtype, n):
    run_and_check(rand(17, n), rand(n), residual=rand(17, n, dtype=r_dtype))


@pytest.mark.parametrize("n", FEATURE_NS)
@pytest.mark.parametrize("residual_dtype", [None, F32])
def test_prenorm_without_residual(residual_dtype, n):
    # residual_out is then x itself, in residual_dtype.
    x = rand(17, n)
    y, h = run_and_check(x, rand(n), prenorm=True, residual_dtype=residual_dtype)
    assert torch.equal(h, x.to(residual_dtype or x.dtype))


@pytest.mark.parametrize("n", FEATURE_NS)
@pytest.mark.parametrize("out_dtype", DTYPES, ids=lambda d: f"out_{dname(d)}")
@pytest.mark.parametrize("x_dtype", DTYPES, ids=lambda d: f"x_{dname(d)}")
def test_out_dtype(x_dtype, out_dtype, n):
    run_and_check(rand(21, n, dtype=x_dtype), rand(n, dtype=BF16), rand(n, dtype=F32), out_dtype=out_dtype)


@pytest.mark.parametrize("n", FEATURE_NS)
@pytest.mark.parametrize("weight_offset", [0.0, 1.0, -0.5])
@pytest.mark.parametrize("with_weight", [True, False])
def test_weight_offset(weight_offset, with_weight, n):
    w = rand(n, dtype=BF16) * 0.1 if with_weight else None
    run_and_check(rand(21, n), w, weight_offset=weight_offset)


@pytest.mark.parametrize("eps", [0.0, 1e-6, 1e-2, 10.0])
def test_eps(eps):
    x = rand(13, 1000, dtype=F32) * 0.05
    run_and_check(x, rand(1000, dtype=F32), eps=eps, return_rstd=True)


def test_all_zero_rows():
    # h = 0: rstd = 1/sqrt(eps), y = 0 (no 0 * inf).
    x = torch.zeros(4, 256, device=DEV, dtype=F32)
    y, rstd = quack_cpp.rmsnorm(x, eps=1e-6, return_rstd=True)
    assert torch.equal(y, x) and torch.allclose(rstd, torch.full_like(rstd, 1000.0))


@pytest.mark.parametrize("prenorm", [False, True])
@pytest.mark.parametrize("return_rstd", [False, True])
def test_return_structure_and_order(prenorm, return_rstd):
    x, r = rand(9, 300), rand(9, 300)
    run_and_check(x, rand(300), residual=r, prenorm=prenorm, return_rstd=return_rstd)


@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64), (0, 1)])
def test_empty(shape):
    x = torch.empty(shape, device=DEV, dtype=BF16)
    y, h, rstd = quack_cpp.rmsnorm(x, rand(shape[-1]), prenorm=True, return_rstd=True)
    assert y.shape == h.shape == shape and rstd.shape == shape[:-1]


# ---------------------------------------------------------------------------
# Layouts.

@pytest.mark.parametrize("n", [1, 7, 64, 1000, 4097, 65537])
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_strided_rows(dtype, n):
    x = rand(19, n + 64, dtype=dtype)[:, :n]
    r = rand(19, 2 * n, dtype=F32)[:, n:]
    run_and_check(x, rand(n, dtype=dtype), residual=r, prenorm=True)


@pytest.mark.parametrize("n", [1, 7, 8, 64, 1000, 4097, 65537])
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_misaligned_pointers(dtype, n):
    # Base pointers one element past 16-byte alignment and odd row pitches:
    # the kernel must fall back from vector accesses, not fail.
    x = rand(19, n + 3, dtype=dtype)[:, 1:n + 1]
    r = rand(19, n + 5, dtype=BF16)[:, 3:n + 3]
    w = rand(n + 1, dtype=dtype)[1:]
    b = rand(n + 1, dtype=F16)[1:]
    run_and_check(x, w, b, r, prenorm=True, return_rstd=True)


@pytest.mark.parametrize("n", [7, 1000, 4097])
def test_3d(n):
    run_and_check(rand(3, 5, n), rand(n), residual=rand(3, 5, n, dtype=F32), prenorm=True, return_rstd=True)
    # Collapsible strided leading dims: no copy.
    run_and_check(rand(3, 5, n + 9)[:, :, :n], rand(n), return_rstd=True)
    # Non-collapsible leading dims and permuted layouts: copied first.
    run_and_check(rand(3, 6, n)[:, :5], rand(n), residual=rand(5, 3, n).transpose(0, 1), prenorm=True)


@pytest.mark.parametrize("n", [7, 1000])
def test_layouts_that_need_a_copy(n):
    run_and_check(rand(11, 2 * n)[:, ::2], rand(n))                    # last dim not contiguous
    run_and_check(rand(1, n).expand(11, n), rand(n), return_rstd=True)  # overlapping rows
    run_and_check(rand(n, 11).t(), rand(n))                             # column-major
    run_and_check(rand(11, n), rand(2 * n)[::2], rand(2 * n, dtype=F32)[1::2])  # strided weight and bias


def test_inputs_are_not_modified():
    x, r, w = rand(33, 1000), rand(33, 1000, dtype=F32), rand(1000)
    copies = [t.clone() for t in (x, r, w)]
    quack_cpp.rmsnorm(x, w, residual=r, prenorm=True)
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip((x, r, w), copies))


# ---------------------------------------------------------------------------
# Large tensors: offsets past 2^31 elements.

@pytest.mark.huge
def test_more_than_2_31_elements():
    m, n = 8200, 262144  # 2.15e9 elements, 4.0 GiB of bf16
    assert m * n > 2**31
    x = rand(m, n, dtype=BF16)
    w = rand(n, dtype=F32)
    poison_allocator(((m, n), BF16), ((m,), F32))
    y, rstd = quack_cpp.rmsnorm(x, w, return_rstd=True)
    rows = sorted({0, 1, 4095, 4096, 8190, 8191, 8192, m - 1} | set(torch.randint(0, m, (8,)).tolist()))
    ref_y, _, ref_rstd, scale = reference(x[rows], w)
    assert_close(y[rows], ref_y, scale, "out (sampled rows)")
    assert_rstd_close(rstd[rows], ref_rstd)
    assert bool(torch.isfinite(rstd).all())
    del x, y
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# Streams, devices, CUDA graphs, torch.compile.

def test_launches_on_the_current_stream():
    n = 4096
    x = torch.zeros(64, n, device=DEV, dtype=BF16)
    w = rand(n)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms: a launch elsewhere would run first and see zeros
        x.fill_(3.0)
        y = quack_cpp.rmsnorm(x, w)
    side.synchronize()
    expect = w.double().expand(64, n)
    assert torch.allclose(y.double(), expect, rtol=1e-2, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_device_guard_for_a_non_current_device():
    assert torch.cuda.current_device() == 0
    x = torch.randn(33, 1000, device="cuda:1", dtype=BF16)
    w = torch.randn(1000, device="cuda:1", dtype=BF16)
    y = quack_cpp.rmsnorm(x, w)
    assert y.device == x.device and torch.cuda.current_device() == 0
    ref, _, _, scale = reference(x, w)
    assert_close(y, ref, scale, "out on cuda:1")
    with pytest.raises(ValueError, match="weight must be on x's device cuda:1, got cuda:0"):
        quack_cpp.rmsnorm(x, w.to("cuda:0"))


def test_cuda_graph_capture_and_replay():
    m, n = 77, 4097
    x, r, w, b = rand(m, n), rand(m, n, dtype=F32), rand(n), rand(n, dtype=F32)

    def fn():
        return quack_cpp.rmsnorm(x, w, b, r, prenorm=True, return_rstd=True, weight_offset=0.5)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up (first-call device queries happen outside the capture)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fn()
    for _ in range(2):
        x.copy_(rand(m, n))
        r.copy_(rand(m, n, dtype=F32))
        graph.replay()
        eager = fn()
        torch.cuda.synchronize()
        for g, e in zip(captured, eager):
            assert torch.equal(g, e)


def _compiled_fn(x, w, r):
    y, h, rstd = quack_cpp.rmsnorm(x, w, residual=r, prenorm=True, residual_dtype=F32, return_rstd=True,
                                   eps=1e-5, weight_offset=1.0)
    return y.float() * 2, h, rstd


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(dynamic):
    torch._dynamo.reset()
    g = torch.compile(_compiled_fn, fullgraph=True, dynamic=dynamic)
    for m in (5, 37):
        x, w, r = rand(3, m, 1000), rand(1000, dtype=F32), rand(3, m, 1000)
        got, want = g(x, w, r), _compiled_fn(x, w, r)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def test_torch_compile_reduce_overhead():
    # Inductor's CUDA graphs around the op.
    torch._dynamo.reset()
    g = torch.compile(_compiled_fn, fullgraph=True, mode="reduce-overhead")
    x, w, r = rand(4, 8, 512), rand(512, dtype=F32), rand(4, 8, 512)
    for _ in range(3):
        x.copy_(rand(4, 8, 512))
        got = [t.clone() for t in g(x, w, r)]
        want = _compiled_fn(x, w, r)
        for a, b in zip(got, want):
            assert torch.equal(a, b)


def test_torch_compile_module_with_trainable_weight():
    # Weights that require grad: AOTAutograd traces forward and backward ops
    # into one graph; the gradients match eager's.
    torch._dynamo.reset()
    m = quack_cpp.RMSNorm(256, device=DEV)
    with torch.no_grad():
        m.weight.copy_(rand(256, dtype=F32))
    g = torch.compile(m, fullgraph=True)
    x = rand(8, 256).requires_grad_()
    y = g(x)
    gy = rand(8, 256)
    y.backward(gy)
    gx, gw = x.grad.clone(), m.weight.grad.clone()
    x.grad = m.weight.grad = None
    m(x).backward(gy)
    assert torch.equal(gx, x.grad) and torch.equal(gw, m.weight.grad)


def test_opcheck():
    x, w, r = rand(9, 300), rand(300, dtype=F32), rand(9, 300, dtype=F16)
    torch.library.opcheck(torch.ops.quack_cpp.rmsnorm_fwd.default, (x, w, None, r, None, F32, 1e-6, 0.5, True, True))
    torch.library.opcheck(torch.ops.quack_cpp.rmsnorm_fwd.default, (x, None, None, None, F16, None, 1e-6, 0.0, False,
                                                                    False))


# ---------------------------------------------------------------------------
# Autograd.

# (N = 1 is left to the C++ tests, whose bound includes fp32 cancellation:
# there dx = rstd * g * eps / (x^2 + eps), all cancellation.)
@pytest.mark.parametrize("n", [3, 100, 1000, 4096, 65536, 262144])
@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_backward_matches_float64_autograd(dtype, n):
    m = max(1, min(199, (1 << 21) // n))
    x = rand(m, n, dtype=dtype).requires_grad_()
    w = rand(n, dtype=dtype).requires_grad_()
    check_grads(x, w, rtol=1e-4 if dtype == F32 else 3e-2)


@pytest.mark.parametrize("weight, bias, residual, prenorm, offset, w_dtype",
                         [(True, True, True, True, 1.0, F32), (False, True, True, False, 0.0, BF16),
                          (True, False, False, True, 0.0, BF16), (False, False, False, False, 0.0, BF16),
                          (True, False, True, False, 0.5, F32)])
def test_backward_every_option(weight, bias, residual, prenorm, offset, w_dtype):
    x = rand(7, 3, 1000).requires_grad_()
    w = rand(1000, dtype=w_dtype).requires_grad_() if weight else None
    b = rand(1000, dtype=w_dtype).requires_grad_() if bias else None
    r = rand(7, 3, 1000, dtype=F32).requires_grad_() if residual else None
    check_grads(x, w, b, r, prenorm=prenorm, weight_offset=offset, grad_out_strided=True)


def test_backward_misaligned_rows_and_mixed_dtypes():
    # Rows one element off 16 bytes (the general kernel) and an fp16 residual.
    base = rand(33, 1001)
    x = base[:, 1:].detach().requires_grad_()
    w = rand(1000, dtype=F32).requires_grad_()
    r = rand(33, 1000, dtype=F16).requires_grad_()
    check_grads(x, w, residual=r, prenorm=True)


def test_weight_gradients_are_bit_identical_across_runs():
    x = rand(4096, 4096).requires_grad_()
    w = rand(4096, dtype=F32).requires_grad_()
    b = rand(4096, dtype=F32).requires_grad_()
    gy = rand(4096, 4096)
    got = []
    for _ in range(3):
        x.grad = w.grad = b.grad = None
        quack_cpp.rmsnorm(x, w, b).backward(gy)
        got.append((x.grad.clone(), w.grad.clone(), b.grad.clone()))
    for other in got[1:]:
        assert all(torch.equal(a, c) for a, c in zip(got[0], other))


def test_backward_opcheck():
    g, h, rstd = rand(9, 300), rand(9, 300), torch.rand(9, device=DEV) + 0.5
    w = rand(300, dtype=F32)
    torch.library.opcheck(torch.ops.quack_cpp.rmsnorm_bwd.default, (g, h, rstd, w, None, 0.0, BF16, None, True, F32))
    torch.library.opcheck(torch.ops.quack_cpp.rmsnorm_bwd.default,
                          (g, h, rstd, None, rand(9, 300, dtype=F16), 0.0, F16, F32, False, None))


def test_requires_grad_path_matches_fast_path():
    x, w = rand(5, 1000), rand(1000).requires_grad_()
    y = quack_cpp.rmsnorm(x, w)
    assert y.requires_grad
    with torch.no_grad():
        y_fast = quack_cpp.rmsnorm(x, w)
    assert not y_fast.requires_grad and torch.equal(y.detach(), y_fast)
    with torch.inference_mode():
        assert torch.equal(quack_cpp.rmsnorm(x, w), y_fast)
