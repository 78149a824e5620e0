"""quack_cpp.layernorm / LayerNorm argument checks, shape inference (meta
tensors), the C++ validation through the extension, and torch.compile
tracing: all runnable without a GPU."""
import re

import pytest
import torch

import quack_cpp
from quack_cpp import _C

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
N = 64


def meta(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def raises(exc, *names):
    pattern = "^quack_cpp.layernorm: " + "".join(f"(?=.*{re.escape(n)})" for n in names)
    return pytest.raises(exc, match=pattern)


def test_errors_name_layernorm_and_the_argument():
    x = torch.randn(2, N, dtype=BF16)
    with raises(ValueError, "weight must have shape (64,), got (63,)"):
        quack_cpp.layernorm(x, torch.randn(N - 1))
    with raises(TypeError, "bias must be float32, float16 or bfloat16"):
        quack_cpp.layernorm(x, None, torch.zeros(N, dtype=torch.int32))
    with raises(ValueError, "residual must have x's shape"):
        quack_cpp.layernorm(x, residual=torch.randn(3, N))
    with raises(ValueError, "eps must be >= 0"):
        quack_cpp.layernorm(x, eps=-1e-5)
    with raises(ValueError, "residual_dtype", "prenorm=True"):
        quack_cpp.layernorm(x, residual_dtype=F32)
    with raises(ValueError, "x must be a CUDA tensor"):
        quack_cpp.layernorm(x)


@pytest.mark.parametrize("prenorm", [False, True])
@pytest.mark.parametrize("ret", [False, True])
@pytest.mark.parametrize("residual", [None, F32])
def test_meta_output_structure(prenorm, ret, residual):
    x = meta(4, 3, N)
    r = None if residual is None else meta(4, 3, N, dtype=residual)
    res = quack_cpp.layernorm(x, meta(N, dtype=F32), meta(N, dtype=F32), r, prenorm=prenorm, return_mean_rstd=ret)
    outs = list(res) if isinstance(res, tuple) else [res]
    assert len(outs) == 1 + prenorm + 2 * ret
    assert outs[0].shape == (4, 3, N) and outs[0].dtype == BF16
    if prenorm:
        assert outs[1].dtype == (residual or BF16)
    if ret:
        for t in outs[-2:]:
            assert t.shape == (4, 3) and t.dtype == F32


def test_op_schemas():
    fwd = str(torch.ops.quack_cpp.layernorm_fwd.default._schema)
    assert fwd.startswith("quack_cpp::layernorm_fwd(Tensor x, Tensor? weight, Tensor? bias, Tensor? residual, "
                          "ScalarType? out_dtype, ScalarType? residual_dtype, float eps, float weight_offset, "
                          "bool prenorm, bool return_mean_rstd) -> (Tensor, Tensor, Tensor, Tensor)"), fwd
    bwd = str(torch.ops.quack_cpp.layernorm_bwd.default._schema)
    assert "Tensor mean) -> (Tensor, Tensor, Tensor, Tensor)" in bwd, bwd


def test_backward_op_fake_shapes():
    g, h, stat, w = meta(4, 3, N), meta(4, 3, N), meta(4, 3, dtype=F32), meta(N, dtype=F32)
    dx, dres, dw, db = torch.ops.quack_cpp.layernorm_bwd(g, h, stat, w, None, 0.0, BF16, F32, True, F16, stat)
    assert dx.shape == (4, 3, N) and dres.dtype == F32 and dw.shape == (N,) and db.dtype == F16


def test_extension_validates_without_a_device():
    # check_only / mode 1: the C++ can_implement alone; a bad mean pointer is named.
    args = dict(rows=4, cols=N, x_ptr=1 << 20, x_dtype=2, x_stride=N, res_ptr=0, res_dtype=0, res_stride=0,
                w_ptr=0, w_dtype=0, b_ptr=0, b_dtype=0, out_ptr=2 << 20, out_dtype=2, out_stride=N,
                res_out_ptr=0, res_out_dtype=0, res_out_stride=0, rstd_ptr=0, eps=1e-5, weight_offset=0.0,
                stream=0, mean_ptr=(3 << 20) + 2, check_only=True)
    with pytest.raises(ValueError, match="^quack_cpp.layernorm: mean: pointer is not 4-byte aligned"):
        _C.layernorm_fwd(**args)
    args["mean_ptr"] = 3 << 20
    assert _C.layernorm_fwd(**args) is None
    bwd = dict(rows=4, cols=N, h_ptr=1 << 20, h_dtype=2, h_stride=N, dy_ptr=2 << 20, dy_dtype=2, dy_stride=N,
               dro_ptr=0, dro_dtype=0, dro_stride=0, w_ptr=0, w_dtype=0, rstd_ptr=3 << 20, dx_ptr=4 << 20,
               dx_dtype=2, dx_stride=N, dres_ptr=0, dres_dtype=0, dres_stride=0, dw_ptr=0, dw_dtype=0, db_ptr=0,
               db_dtype=0, weight_offset=0.0, ws_ptr=0, ws_bytes=0, mode=1, stream=0, mean_ptr=0)
    with pytest.raises(ValueError, match=r"^quack_cpp.layernorm: mean: null pointer"):
        _C.layernorm_bwd(**bwd)


def test_module_construction():
    m = quack_cpp.LayerNorm(N, device="meta")
    assert m.weight.shape == (N,) and m.bias.shape == (N,) and m.eps == 1e-5
    assert set(m.state_dict()) == {"weight", "bias"}
    assert quack_cpp.LayerNorm(N, bias=False, device="meta").bias is None
    y = m(meta(2, N))
    assert y.shape == (2, N)
    with pytest.raises(ValueError, match="normalized_shape"):
        quack_cpp.LayerNorm((2, N))
    with pytest.raises(ValueError, match="x's last dimension"):
        m(meta(2, N + 1))


def test_compile_fullgraph_traces_one_op():
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()

    def fn(x, w, b):
        return quack_cpp.layernorm(x, w, b, return_mean_rstd=True)

    g = torch.compile(fn, backend=counter, fullgraph=True)
    y, mean, rstd = g(meta(4, 3, N), meta(N, dtype=F32), meta(N, dtype=F32))
    assert counter.frame_count == 1 and y.shape == (4, 3, N) and mean.shape == (4, 3)


def test_compile_aot_eager_traces_the_backward():
    torch._dynamo.reset()
    w = meta(N, dtype=F32).requires_grad_()
    g = torch.compile(lambda x, w: quack_cpp.layernorm(x, w), backend="aot_eager", fullgraph=True)
    y = g(meta(4, N), w)
    assert y.requires_grad and y.shape == (4, N)
