"""The eager launch path of quack_cpp.rmsnorm on a CPU, against an emulated kernel.

What the Python layer hands the extension (row count, pointers, dtype codes,
row strides, copies of layouts that need one, output allocation) is checked
without a GPU: CPU tensors pose as CUDA tensors, and _C.rmsnorm_fwd is
replaced by (1) the library's own argument validation, _C.rmsnorm_fwd_check,
then (2) a fp32 emulation of the kernel that reads and writes memory only
through the raw pointers and strides it was given. The results go through
the same float64 comparison as the GPU tests.
"""
import ctypes

import pytest
import torch

from quack_cpp import _C, _common, _layernorm, _rmsnorm
from rmsnorm_ref import check_grads, run_and_check

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = [F32, F16, BF16]
_CODE_DTYPE = {0: F32, 1: F16, 2: BF16}


def _raw(ptr, numel, dtype):
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=dtype)


def _matrix(ptr, code, stride, rows, cols):
    assert ptr != 0 and stride >= cols
    return _raw(ptr, (rows - 1) * stride + cols, _CODE_DTYPE[code]).as_strided((rows, cols), (stride, 1))


def _emulated_kernel(calls, centre=False):
    """_C.rmsnorm_fwd, or with centre _C.layernorm_fwd (two more arguments:
    the mean's pointer and check_only, which the Python layer passes False)."""
    def kernel(rows, cols, x_ptr, x_dtype, x_stride, res_ptr, res_dtype, res_stride, w_ptr, w_dtype, b_ptr,
               b_dtype, out_ptr, out_dtype, out_stride, res_out_ptr, res_out_dtype, res_out_stride, rstd_ptr, eps,
               weight_offset, stream, *ln):
        args = locals().copy()
        for k in ("calls", "centre", "ln"):
            args.pop(k, None)
        assert len(ln) == (2 if centre else 0)
        if centre:
            mean_ptr, check_only = ln
            assert check_only is False
            _C.layernorm_fwd(**args, mean_ptr=mean_ptr, check_only=True)
            args["mean_ptr"] = mean_ptr
        else:
            _C.rmsnorm_fwd_check(**args)
        calls.append(args)
        assert rows > 0 and stream == 12345
        h = _matrix(x_ptr, x_dtype, x_stride, rows, cols).float()
        if res_ptr:
            h = h + _matrix(res_ptr, res_dtype, res_stride, rows, cols).float()
        if centre:
            mean = h.mean(dim=-1)
            h0 = h
            h = h - mean[:, None]
        rstd = torch.rsqrt((h * h).mean(dim=-1) + torch.tensor(eps, dtype=F32))
        y = h * rstd[:, None]
        if centre:
            if ln[0]:
                _raw(ln[0], rows, F32).copy_(mean)
            h = h0
        if w_ptr:
            y = y * (_raw(w_ptr, cols, _CODE_DTYPE[w_dtype]).float() + torch.tensor(weight_offset, dtype=F32))
        if b_ptr:
            y = y + _raw(b_ptr, cols, _CODE_DTYPE[b_dtype]).float()
        _matrix(out_ptr, out_dtype, out_stride, rows, cols).copy_(y)
        if res_out_ptr:
            _matrix(res_out_ptr, res_out_dtype, res_out_stride, rows, cols).copy_(h)
        if rstd_ptr:
            _raw(rstd_ptr, rows, F32).copy_(rstd)
    return kernel


# The workspace the emulated forward asks for (rows of at least
# NORM_FWD_WORKSPACE_MIN_COLS columns go through _C.norm_fwd_ws: the query,
# then the launch with the workspace).
_EMULATED_FWD_WS = 48


def _emulated_fwd_ws(calls):
    kernel = _emulated_kernel(calls)

    def launch(centre, *args):
        *fwd, mean_ptr, ws_ptr, ws_bytes, mode = args
        assert not centre and mean_ptr == 0 and fwd[1] >= _C.NORM_FWD_WORKSPACE_MIN_COLS
        if mode == 2:  # the query (the real one reads the device's limits)
            return _EMULATED_FWD_WS
        assert mode == 0 and ws_bytes == _EMULATED_FWD_WS and ws_ptr != 0
        kernel(*fwd)
        return 0
    return launch


# The workspace size the emulated backward asks for.
_EMULATED_WS = 64


def _emulated_bwd_kernel(calls):
    def kernel(rows, cols, h_ptr, h_dtype, h_stride, dy_ptr, dy_dtype, dy_stride, dro_ptr, dro_dtype, dro_stride,
               w_ptr, w_dtype, rstd_ptr, dx_ptr, dx_dtype, dx_stride, dres_ptr, dres_dtype, dres_stride, dw_ptr,
               dw_dtype, db_ptr, db_dtype, weight_offset, ws_ptr, ws_bytes, mode, stream):
        args = locals().copy()
        args.pop("calls", None)
        calls.append(args)
        if mode == 2:  # the workspace query (the real one reads the device's limits)
            return _EMULATED_WS if (dw_ptr or db_ptr) else 0
        assert mode == 0 and stream == 12345
        _C.rmsnorm_bwd(**{**args, "mode": 1})  # the library's own validation, no device touched
        assert ws_bytes == (_EMULATED_WS if (dw_ptr or db_ptr) else 0) and bool(ws_ptr) == bool(ws_bytes)
        if rows > 0:
            h = _matrix(h_ptr, h_dtype, h_stride, rows, cols).float()
            dy = _matrix(dy_ptr, dy_dtype, dy_stride, rows, cols).float()
            rstd = _raw(rstd_ptr, rows, F32)[:, None]
            w = _raw(w_ptr, cols, _CODE_DTYPE[w_dtype]).float() + weight_offset if w_ptr else 1.0
            xh, g = h * rstd, dy * w
            dh = rstd * (g - xh * (g * xh).mean(dim=-1, keepdim=True))
            if dro_ptr:
                dh = dh + _matrix(dro_ptr, dro_dtype, dro_stride, rows, cols).float()
            _matrix(dx_ptr, dx_dtype, dx_stride, rows, cols).copy_(dh)
            if dres_ptr:
                _matrix(dres_ptr, dres_dtype, dres_stride, rows, cols).copy_(dh)
        if dw_ptr:
            _raw(dw_ptr, cols, _CODE_DTYPE[dw_dtype]).copy_((dy * xh).sum(0) if rows else 0)
        if db_ptr:
            _raw(db_ptr, cols, _CODE_DTYPE[db_dtype]).copy_(dy.sum(0) if rows else 0)
        return 0
    return kernel


@pytest.fixture
def launches(monkeypatch):
    """CPU tensors pose as CUDA ones; returns the list of emulated launches."""
    calls = []
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: self.device.type in ("cpu", "cuda")))
    monkeypatch.setattr(_rmsnorm, "_rmsnorm_fwd", _emulated_kernel(calls))
    monkeypatch.setattr(_rmsnorm, "_layernorm_fwd", _emulated_kernel(calls, centre=True))
    monkeypatch.setattr(_rmsnorm, "_norm_fwd_ws", _emulated_fwd_ws(calls))
    monkeypatch.setattr(_rmsnorm, "_rmsnorm_bwd", _emulated_bwd_kernel(calls))
    monkeypatch.setattr(_rmsnorm, "_raw_stream", lambda device: 12345)
    monkeypatch.setattr(_common, "_current_device", lambda: -1)  # CPU tensors' get_device()
    return calls


def rand(*shape, dtype=BF16):
    return torch.randn(*shape, dtype=dtype)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 100, 1000, 4097, 65537])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sizes(launches, dtype, n):
    for m in (1, 7):
        run_and_check(rand(m, n, dtype=dtype), rand(n, dtype=dtype), return_rstd=True)
    assert [c["rows"] for c in launches] == [1, 7] and all(c["x_stride"] == n for c in launches)


@pytest.mark.parametrize("b_dtype", [None, F32, BF16])
@pytest.mark.parametrize("w_dtype", [None, F32, F16, BF16])
@pytest.mark.parametrize("x_dtype", DTYPES)
def test_weight_bias_dtypes(launches, x_dtype, w_dtype, b_dtype):
    n = 100
    w = None if w_dtype is None else rand(n, dtype=w_dtype)
    b = None if b_dtype is None else rand(n, dtype=b_dtype)
    run_and_check(rand(5, n, dtype=x_dtype), w, b, weight_offset=0.25)
    (c,) = launches
    assert (c["w_ptr"] != 0) == (w is not None) and (c["b_ptr"] != 0) == (b is not None)


@pytest.mark.parametrize("residual_dtype", [None, F32, BF16])
@pytest.mark.parametrize("r_dtype", DTYPES)
@pytest.mark.parametrize("x_dtype", DTYPES)
def test_residual_prenorm(launches, x_dtype, r_dtype, residual_dtype):
    run_and_check(rand(6, 77, dtype=x_dtype), rand(77), residual=rand(6, 77, dtype=r_dtype),
                  residual_dtype=residual_dtype, prenorm=True, return_rstd=True)


@pytest.mark.parametrize("out_dtype", DTYPES)
def test_out_dtype_and_prenorm_without_residual(launches, out_dtype):
    run_and_check(rand(6, 77), out_dtype=out_dtype, prenorm=True)
    run_and_check(rand(6, 77), out_dtype=out_dtype, prenorm=True, residual_dtype=F32)


def test_strided_and_misaligned(launches):
    n = 50
    x = rand(9, n + 3)[:, 1:n + 1]
    r = rand(9, n + 5, dtype=F32)[:, 3:n + 3]
    w, b = rand(n + 1)[1:], rand(n + 1, dtype=F16)[1:]
    run_and_check(x, w, b, r, prenorm=True, return_rstd=True)
    (c,) = launches
    # Passed as they are: no copies.
    assert (c["x_ptr"], c["x_stride"]) == (x.data_ptr(), n + 3)
    assert (c["res_ptr"], c["res_stride"]) == (r.data_ptr(), n + 5)
    assert (c["w_ptr"], c["b_ptr"]) == (w.data_ptr(), b.data_ptr())
    assert c["out_stride"] == c["res_out_stride"] == n


def test_3d_layouts(launches):
    n = 40
    x = rand(3, 5, n + 7)[:, :, :n]  # collapsible: no copy
    run_and_check(x, rand(n), return_rstd=True)
    assert (launches[-1]["rows"], launches[-1]["x_ptr"], launches[-1]["x_stride"]) == (15, x.data_ptr(), n + 7)
    x = rand(3, 6, n)[:, :5]  # not collapsible: copied
    r = rand(5, 3, n, dtype=F32).transpose(0, 1)
    run_and_check(x, rand(n), residual=r, prenorm=True)
    c = launches[-1]
    assert c["rows"] == 15 and c["x_ptr"] != x.data_ptr() and c["x_stride"] == n and c["res_stride"] == n


def test_layouts_that_need_a_copy(launches):
    n = 30
    for x in (rand(11, 2 * n)[:, ::2], rand(1, n).expand(11, n), rand(n, 11).t()):
        run_and_check(x, rand(2 * n)[::2], rand(2 * n, dtype=F32)[1::2])
        assert launches[-1]["x_stride"] == n


def test_zero_rows_launch_nothing(launches):
    for shape in [(0, 64), (2, 0, 64)]:
        y, h, rstd = _rmsnorm.rmsnorm(torch.empty(shape), rand(64), prenorm=True, return_rstd=True)
        assert y.shape == h.shape == shape and rstd.shape == shape[:-1]
    assert launches == []


def test_requires_grad_goes_through_the_op(launches):
    x = rand(3, 8, dtype=F32).requires_grad_()
    w = rand(8, dtype=F32)
    y = _rmsnorm.rmsnorm(x, w)  # torch.ops.quack_cpp.rmsnorm_fwd, recorded by autograd
    assert y.requires_grad and y.grad_fn is not None
    with torch.no_grad():
        y_fast = _rmsnorm.rmsnorm(x, w)  # direct launch
    assert not y_fast.requires_grad and torch.equal(y.detach(), y_fast)
    assert len(launches) == 2
    # With a gradient to come the forward also writes rstd for the backward.
    assert launches[0]["rstd_ptr"] != 0 and launches[1]["rstd_ptr"] == 0
    assert {k for k in launches[0] if launches[0][k] != launches[1][k]} <= {"out_ptr", "rstd_ptr"}


# The eager fast path (_rmsnorm._fast_fwd: x and at most a weight, no
# gradient to come) must hand the extension the call the general path's
# _launch makes, and leave every other call to the general path.
_FAST = {
    "2-D, bf16 weight": lambda: (rand(5, 96), rand(96), {}),
    "weight and bias of two dtypes": lambda: (rand(5, 96), rand(96, dtype=F32), dict(bias=rand(96, dtype=F16))),
    "bias alone": lambda: (rand(5, 96, dtype=F32), None, dict(bias=rand(96))),
    "3-D, fp32 weight, eps, offset": lambda: (rand(2, 3, 96), rand(96, dtype=F32), dict(eps=1e-5, weight_offset=1.0)),
    "one row, no weight": lambda: (rand(96, dtype=F16), None, {}),
    "size-1 dims of any stride": lambda: (rand(4, 96).unsqueeze(1).as_strided((4, 1, 96), (96, 5, 1)),
                                          rand(96, dtype=F16), {}),
}
_GENERAL = {
    "padded rows": lambda: (rand(5, 128)[:, :96], rand(96), {}),
    "non-contiguous weight": lambda: (rand(5, 96), rand(192)[::2], {}),
    "non-contiguous bias": lambda: (rand(5, 96), rand(96), dict(bias=rand(192)[::2])),
    "integer eps": lambda: (rand(5, 96), rand(96), dict(eps=0)),
    "weight as a parameter needing no gradient": lambda: (rand(5, 96), torch.nn.Parameter(rand(96), False), {}),
}


@pytest.mark.parametrize("centre", [False, True], ids=["rmsnorm", "layernorm"])
@pytest.mark.parametrize("case", list(_FAST) + list(_GENERAL))
def test_eager_fast_path_makes_the_general_paths_call(launches, monkeypatch, case, centre):
    x, w, kw = (_FAST.get(case) or _GENERAL[case])()
    fast_calls = []
    real_fast = _rmsnorm._fast_fwd
    spy = lambda *a: fast_calls.append(real_fast(*a)) or fast_calls[-1]  # noqa: E731
    monkeypatch.setattr(_rmsnorm, "_fast_fwd", spy)
    monkeypatch.setattr(_layernorm, "_fast_fwd", spy)
    y = (_layernorm.layernorm if centre else _rmsnorm.rmsnorm)(x, w, **kw)
    took_fast = fast_calls[0] is not None
    assert took_fast == (case in _FAST or case.startswith("weight as a parameter"))
    eps = float(kw.get("eps", 1e-5 if centre else 1e-6))
    want = _rmsnorm._launch(x, w, kw.get("bias"), None, x.dtype, x.dtype, eps, kw.get("weight_offset", 0.0), False,
                            False, centre)[0]
    assert len(launches) == 2
    # The same call but for the output's pointer (and, where the general path
    # copied an operand, the copy's: twice, once a call).
    same = {k for k in launches[0] if launches[0][k] == launches[1][k]}
    assert set(launches[0]) - same <= ({"out_ptr"} if took_fast else {"out_ptr", "x_ptr", "w_ptr", "b_ptr"})
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    # And the float64 reference, through the public call once more (its
    # poisoning allocates rstd's shape: not for a 1-D x).
    run_and_check(x, w, poison=x.dim() > 1, centre=centre, **kw)


def test_eager_fast_path_leaves_a_gradient_to_the_autograd_path(launches):
    x, w = rand(3, 8, dtype=F32), rand(8, dtype=F32).requires_grad_()
    assert _rmsnorm.rmsnorm(x, w).grad_fn is not None and launches[-1]["rstd_ptr"] != 0
    with torch.no_grad():
        assert _rmsnorm.rmsnorm(x, w).grad_fn is None and launches[-1]["rstd_ptr"] == 0


@pytest.mark.parametrize("weight, bias, residual, prenorm, offset",
                         [(True, False, False, False, 0.0), (True, True, True, True, 1.0),
                          (False, True, True, False, 0.0), (True, False, False, True, 0.0),
                          (False, False, False, False, 0.0)])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_backward_through_the_emulated_kernel(launches, dtype, weight, bias, residual, prenorm, offset):
    # The Python layer's backward wiring (which tensors reach the kernel, in
    # which dtypes, the gradient arriving on residual_out, the workspace)
    # against float64 autograd of the formula.
    torch.manual_seed(0)
    x = rand(5, 3, 40, dtype=dtype).requires_grad_()
    w = rand(40, dtype=F32).requires_grad_() if weight else None
    b = rand(40, dtype=dtype).requires_grad_() if bias else None
    r = rand(5, 3, 40, dtype=F32).requires_grad_() if residual else None
    check_grads(x, w, b, r, prenorm=prenorm, weight_offset=offset, eps=1e-5, rtol=1e-4 if dtype == F32 else 3e-2,
                grad_out_strided=residual)
    bwd = [c for c in launches if "h_ptr" in c]
    assert [c["mode"] for c in bwd] == [2, 0]
    assert (bwd[1]["dro_ptr"] != 0) == prenorm and (bwd[1]["dres_ptr"] != 0) == residual
    assert bwd[1]["dy_stride"] == (80 if residual else 40)  # a strided gradient is passed as it is
