"""quack_cpp.rmsnorm argument checks, shape inference (meta tensors) and
torch.compile tracing: all runnable without a GPU."""
import math
import re

import pytest
import torch

import quack_cpp
from quack_cpp import _common

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
N = 64


def cpu(*shape, dtype=BF16):
    return torch.randn(*shape, dtype=dtype)


def meta(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def raises(exc, *names):
    """pytest.raises whose message must start with the op name and mention each name."""
    pattern = "^quack_cpp.rmsnorm: " + "".join(f"(?=.*{re.escape(n)})" for n in names)
    return pytest.raises(exc, match=pattern)


# ---------------------------------------------------------------------------
# Every error names its argument. CPU tensors: shape/dtype/value checks run
# before the device check, so each of these reports its own problem.

def test_weight_shape_message_exact():
    x = cpu(2, 4096)
    with pytest.raises(ValueError) as e:
        quack_cpp.rmsnorm(x, cpu(4095))
    assert str(e.value) == "quack_cpp.rmsnorm: weight must have shape (4096,), got (4095,)"


@pytest.mark.parametrize("bad", [None, 3.0, [1.0, 2.0], "x"])
def test_x_not_a_tensor(bad):
    with raises(TypeError, "x", "torch.Tensor"):
        quack_cpp.rmsnorm(bad)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int8, torch.bool, torch.complex64])
def test_x_dtype(dtype):
    x = torch.zeros(2, N, dtype=dtype)
    with raises(TypeError, "x", str(dtype)):
        quack_cpp.rmsnorm(x)


def test_x_zero_dim():
    with raises(ValueError, "x", "0-d"):
        quack_cpp.rmsnorm(torch.tensor(1.0))


@pytest.mark.parametrize("shape", [(4, 0), (0,), (0, 0), (3, 2, 0)])
def test_x_n_zero(shape):
    with raises(ValueError, "x", "N", ">= 1"):
        quack_cpp.rmsnorm(torch.empty(shape))


@pytest.mark.parametrize("name", ["weight", "bias"])
@pytest.mark.parametrize("shape", [(N - 1,), (N + 1,), (1, N), (N, 1), ()])
def test_vector_shape(name, shape):
    x = cpu(3, N)
    t = torch.ones(shape, dtype=F32)
    with raises(ValueError, f"{name} must have shape ({N},)", str(tuple(shape))):
        quack_cpp.rmsnorm(x, **{name: t})


@pytest.mark.parametrize("name", ["weight", "bias", "residual"])
def test_optional_tensor_type(name):
    with raises(TypeError, name, "torch.Tensor or None"):
        quack_cpp.rmsnorm(cpu(3, N), **{name: [1.0] * N})


@pytest.mark.parametrize("name", ["weight", "bias", "residual"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.uint8])
def test_optional_tensor_dtype(name, dtype):
    shape = (3, N) if name == "residual" else (N,)
    with raises(TypeError, name, str(dtype)):
        quack_cpp.rmsnorm(cpu(3, N), **{name: torch.zeros(shape, dtype=dtype)})


@pytest.mark.parametrize("shape", [(3, N - 1), (2, N), (3, 1, N), (N,), (1, 3, N)])
def test_residual_shape(shape):
    with raises(ValueError, "residual must have x's shape (3, 64)", str(tuple(shape))):
        quack_cpp.rmsnorm(cpu(3, N), residual=cpu(*shape))


@pytest.mark.parametrize("name", ["out_dtype", "residual_dtype"])
@pytest.mark.parametrize("bad", [torch.float64, torch.int8, "bfloat16", 1])
def test_dtype_args(name, bad):
    with raises(TypeError, name):
        quack_cpp.rmsnorm(cpu(3, N), prenorm=True, **{name: bad})


def test_residual_dtype_needs_prenorm():
    with raises(ValueError, "residual_dtype", "prenorm=True"):
        quack_cpp.rmsnorm(cpu(3, N), residual=cpu(3, N), residual_dtype=F32)


@pytest.mark.parametrize("bad, exc", [(-1e-6, ValueError), (-1.0, ValueError), (math.nan, ValueError),
                                      (math.inf, ValueError), (-math.inf, ValueError), ("1e-6", TypeError),
                                      (None, TypeError), (torch.tensor(1e-6), TypeError), (True, TypeError)])
def test_eps(bad, exc):
    with raises(exc, "eps"):
        quack_cpp.rmsnorm(cpu(3, N), eps=bad)


@pytest.mark.parametrize("bad, exc", [(math.nan, ValueError), (math.inf, ValueError), ("1", TypeError),
                                      (None, TypeError), (torch.tensor(1.0), TypeError)])
def test_weight_offset(bad, exc):
    with raises(exc, "weight_offset"):
        quack_cpp.rmsnorm(cpu(3, N), cpu(N), weight_offset=bad)


@pytest.mark.parametrize("eps", [0, 0.0, 1, 1e-5])
def test_eps_accepted_values_reach_the_device_check(eps):
    # Valid values pass every check up to the device one.
    with raises(ValueError, "x must be a CUDA tensor", "cpu"):
        quack_cpp.rmsnorm(cpu(3, N), eps=eps)


def test_cpu_x_rejected_naming_x():
    with raises(ValueError, "x must be a CUDA tensor", "cpu"):
        quack_cpp.rmsnorm(cpu(3, N), cpu(N), cpu(N), residual=cpu(3, N))


def test_shape_checks_run_before_the_device_check():
    with raises(ValueError, "weight must have shape"):
        quack_cpp.rmsnorm(cpu(3, N), cpu(N + 1))
    with raises(TypeError, "out_dtype"):
        quack_cpp.rmsnorm(cpu(3, N), out_dtype=torch.int32)


@pytest.mark.parametrize("name", ["weight", "bias", "residual"])
def test_other_tensor_on_another_device(name):
    # meta x stands in for a CUDA x: the device comparison is the same.
    t = cpu(3, N) if name == "residual" else cpu(N)
    with raises(ValueError, f"{name} must be on x's device meta", "cpu"):
        quack_cpp.rmsnorm(meta(3, N), **{name: t})


# ---------------------------------------------------------------------------
# Shape inference: meta tensors go through the op's fake implementation.

@pytest.mark.parametrize("shape", [(5, N), (N,), (2, 3, N), (0, N), (2, 0, N), (1, 1)])
@pytest.mark.parametrize("x_dtype", [F32, F16, BF16])
def test_meta_default_outputs(shape, x_dtype):
    y = quack_cpp.rmsnorm(meta(*shape, dtype=x_dtype), meta(shape[-1], dtype=F32))
    assert y.shape == shape and y.dtype == x_dtype and y.device.type == "meta" and y.is_contiguous()


@pytest.mark.parametrize("prenorm, residual_dtype", [(False, None), (True, None), (True, F32)])
@pytest.mark.parametrize("return_rstd", [False, True])
@pytest.mark.parametrize("residual", [None, F32, F16])
@pytest.mark.parametrize("out_dtype", [None, F16])
def test_meta_output_structure(prenorm, return_rstd, residual, residual_dtype, out_dtype):
    x = meta(4, 3, N)
    r = None if residual is None else meta(4, 3, N, dtype=residual)
    res = quack_cpp.rmsnorm(x, residual=r, out_dtype=out_dtype, residual_dtype=residual_dtype,
                            prenorm=prenorm, return_rstd=return_rstd)
    outs = list(res) if isinstance(res, tuple) else [res]
    assert len(outs) == 1 + prenorm + return_rstd
    y = outs[0]
    assert y.shape == (4, 3, N) and y.dtype == (out_dtype or BF16) and y.is_contiguous()
    if prenorm:
        h = outs[1]
        expect = residual_dtype or residual or BF16
        assert h.shape == (4, 3, N) and h.dtype == expect and h.is_contiguous()
    if return_rstd:
        rstd = outs[-1]
        assert rstd.shape == (4, 3) and rstd.dtype == F32 and rstd.is_contiguous()


def test_meta_strided_input_gives_contiguous_outputs():
    buf = meta(6, 2 * N)
    x = buf[:, :N].t()[: N // 2].t()  # (6, 32), strides (1, 128): N is not contiguous
    y, h = quack_cpp.rmsnorm(x, prenorm=True)
    assert y.shape == x.shape and y.stride() == (N // 2, 1) and h.stride() == (N // 2, 1)


def test_op_returns_placeholders_for_outputs_not_asked_for():
    out, res_out, rstd = torch.ops.quack_cpp.rmsnorm_fwd(meta(4, N), None, None, None, None, None,
                                                         1e-6, 0.0, False, False)
    assert out.shape == (4, N) and res_out.shape == (0,) and rstd.shape == (0,)
    assert res_out.dtype == BF16 and rstd.dtype == F32


def test_op_schema():
    schema = str(torch.ops.quack_cpp.rmsnorm_fwd.default._schema)
    assert schema.startswith("quack_cpp::rmsnorm_fwd(Tensor x, Tensor? weight, Tensor? bias, Tensor? residual, "
                             "ScalarType? out_dtype, ScalarType? residual_dtype, float eps, float weight_offset, "
                             "bool prenorm, bool return_rstd) -> (Tensor, Tensor, Tensor)"), schema


def test_op_checks_arguments_too():
    with raises(ValueError, "weight must have shape"):
        torch.ops.quack_cpp.rmsnorm_fwd(meta(4, N), meta(N - 1), None, None, None, None, 1e-6, 0.0, False, False)
    with raises(ValueError, "x must be a CUDA tensor"):
        torch.ops.quack_cpp.rmsnorm_fwd(cpu(4, N), None, None, None, None, None, 1e-6, 0.0, False, False)


# ---------------------------------------------------------------------------
# torch.compile traces quack_cpp.rmsnorm into one op, without graph breaks
# (meta tensors; the GPU suite runs the compiled code).

def _fn(x, w, r):
    y, h, rstd = quack_cpp.rmsnorm(x, w, residual=r, prenorm=True, residual_dtype=F32, return_rstd=True,
                                   eps=1e-5, weight_offset=1.0)
    return y * 2, h, rstd


def test_compile_fullgraph_traces_one_op():
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    g = torch.compile(_fn, backend=counter, fullgraph=True)
    y, h, rstd = g(meta(4, 3, N), meta(N, dtype=F32), meta(4, 3, N))
    assert counter.frame_count == 1
    assert y.shape == (4, 3, N) and h.dtype == F32 and rstd.shape == (4, 3)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_compile_aot_eager(requires_grad):
    # aot_eager runs the fake implementations through AOTAutograd; with a
    # weight that requires grad it also traces the backward op.
    torch._dynamo.reset()
    g = torch.compile(_fn, backend="aot_eager", fullgraph=True)
    w = meta(N, dtype=F32).requires_grad_(requires_grad)
    y, h, rstd = g(meta(4, 3, N), w, meta(4, 3, N))
    assert y.shape == (4, 3, N) and y.requires_grad == requires_grad


@pytest.mark.parametrize("residual_dtype, need_dw, bias_dtype", [(None, False, None), (F16, True, F32)])
def test_backward_op_fake_shapes(residual_dtype, need_dw, bias_dtype):
    # The backward op on meta tensors (its fake): (dx, dresidual, dweight,
    # dbias), (0,) placeholders for what was not asked for.
    g, h, rstd, w = meta(4, 3, N), meta(4, 3, N, dtype=F16), meta(4, 3, dtype=F32), meta(N, dtype=F32)
    dx, dres, dw, db = torch.ops.quack_cpp.rmsnorm_bwd(g, h, rstd, w, None, 0.0, BF16, residual_dtype, need_dw,
                                                       bias_dtype)
    assert dx.shape == (4, 3, N) and dx.dtype == BF16 and dx.device.type == "meta"
    assert dres.shape == ((4, 3, N) if residual_dtype else (0,))
    assert residual_dtype is None or dres.dtype == residual_dtype
    assert dw.shape == ((N,) if need_dw else (0,)) and (not need_dw or dw.dtype == F32)
    assert db.shape == ((N,) if bias_dtype else (0,)) and (bias_dtype is None or db.dtype == bias_dtype)


# ---------------------------------------------------------------------------
# Row-stride analysis (pure Python on strides; CPU tensors).

@pytest.mark.parametrize("make, expect", [
    (lambda: torch.empty(5, 8), 8),
    (lambda: torch.empty(8), 8),
    (lambda: torch.empty(2, 3, 8), 8),
    (lambda: torch.empty(5, 12)[:, :8], 12),              # strided rows
    (lambda: torch.empty(5, 12)[:, 2:10], 12),            # strided, offset base
    (lambda: torch.empty(2, 3, 12)[:, :, :8], 12),        # collapsible 3-d
    (lambda: torch.empty(2, 4, 12)[:, :3, :8], -1),       # leading dims do not collapse
    (lambda: torch.empty(3, 2, 8).transpose(0, 1), -1),   # permuted leading dims
    (lambda: torch.empty(5, 16)[:, ::2], -1),             # last dim not contiguous
    (lambda: torch.empty(1, 8).expand(5, 8), -1),         # overlapping rows
    (lambda: torch.empty(1, 12)[:, :8], 8),               # one row
    (lambda: torch.empty(1, 1, 12)[:, :, :8], 8),
    (lambda: torch.empty(3, 1, 12)[:, :, :8], 12),        # size-1 dims are skipped
    (lambda: torch.empty(0, 12)[:, :8], 8),               # no rows
    (lambda: torch.empty(5, 3)[:, :1], 3),                # N = 1: last stride irrelevant
    (lambda: torch.empty(5, 3).t()[:1].t(), 3),           # (5, 1) with strides (3, 1)
    (lambda: torch.empty(2, 5).t()[:, :1], 1),            # (5, 1) with strides (1, 5)
])
def test_row_stride(make, expect):
    t = make()
    assert _common._row_stride(t, t.shape[-1]) == expect
