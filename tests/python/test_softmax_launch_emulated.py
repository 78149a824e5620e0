"""The eager launch path of quack_cpp.softmax on a CPU, against an emulated
kernel: what the Python layer hands the extension for long rows (the
workspace query, a workspace of the size asked for, then the launch with it;
forward and backward) and for short ones (the plain launch), checked without
a GPU. CPU tensors
pose as CUDA tensors; the extension's softmax entry points are replaced by a
fp32 emulation that reads and writes memory only through the raw pointers
and strides it was given (as test_launch_emulated.py does for rmsnorm)."""
import types

import pytest
import torch

import quack_cpp
from quack_cpp import _C, _common, _softmax
from test_launch_emulated import _CODE_DTYPE, _matrix


def _emulate(rows, cols, x_ptr, dtype, x_stride, out_ptr, out_stride, log, stream):
    assert rows > 0 and stream == 12345
    x = _matrix(x_ptr, dtype, x_stride, rows, cols).float()
    y = torch.log_softmax(x, dim=-1) if log else torch.softmax(x, dim=-1)
    _matrix(out_ptr, dtype, out_stride, rows, cols).copy_(y)


def _emulate_bwd(rows, cols, y_ptr, dtype, y_stride, dy_ptr, dy_stride, dx_ptr, dx_stride, log, stream):
    assert rows > 0 and stream == 12345
    y = _matrix(y_ptr, dtype, y_stride, rows, cols).double()
    dy = _matrix(dy_ptr, dtype, dy_stride, rows, cols).double()
    dx = (dy - y.exp() * dy.sum(-1, keepdim=True)) if log else y * (dy - (dy * y).sum(-1, keepdim=True))
    _matrix(dx_ptr, dtype, dx_stride, rows, cols).copy_(dx)


@pytest.fixture
def fake_ext(monkeypatch):
    """CPU tensors pose as CUDA ones; the extension's softmax forward is
    emulated. Returns (calls, ext): ext.ws_bytes is what the workspace query
    answers (the real one reads the device's limits and the tuning)."""
    calls = []
    ext = types.SimpleNamespace(ws_bytes=0, SOFTMAX_FWD_WORKSPACE_MIN_COLS=_C.SOFTMAX_FWD_WORKSPACE_MIN_COLS,
                                SOFTMAX_BWD_WORKSPACE_MIN_COLS=_C.SOFTMAX_BWD_WORKSPACE_MIN_COLS)

    def softmax_fwd(*args):
        calls.append(("plain",) + args)
        _emulate(*args)

    def softmax_fwd_ws(*args):
        *fwd, ws_ptr, ws_bytes, mode = args
        calls.append(("ws", mode, ws_ptr, ws_bytes))
        if mode == 2:
            return ext.ws_bytes
        assert mode == 0 and ws_bytes == ext.ws_bytes and bool(ws_ptr) == bool(ws_bytes)
        _emulate(*fwd)
        return 0

    def softmax_bwd(*args):
        calls.append(("bwd plain",) + args)
        _emulate_bwd(*args)

    def softmax_bwd_ws(*args):
        *bwd, ws_ptr, ws_bytes, mode = args
        calls.append(("bwd ws", mode, ws_ptr, ws_bytes))
        if mode == 2:
            return ext.ws_bytes
        assert mode == 0 and ws_bytes == ext.ws_bytes and bool(ws_ptr) == bool(ws_bytes)
        _emulate_bwd(*bwd)
        return 0

    ext.softmax_fwd = softmax_fwd
    ext.softmax_fwd_ws = softmax_fwd_ws
    ext.softmax_bwd = softmax_bwd
    ext.softmax_bwd_ws = softmax_bwd_ws
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: self.device.type in ("cpu", "cuda")))
    monkeypatch.setattr(_softmax, "_C", ext)
    monkeypatch.setattr(_softmax, "_raw_stream", lambda device: 12345)
    monkeypatch.setattr(_common, "_current_device", lambda: -1)  # CPU tensors' get_device()
    return calls, ext


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("ws_bytes", [0, 4096])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_rows_ask_for_the_workspace_and_pass_it(fake_ext, dtype, ws_bytes, log):
    calls, ext = fake_ext
    ext.ws_bytes = ws_bytes
    n = _C.SOFTMAX_FWD_WORKSPACE_MIN_COLS
    x = (torch.randn(3, n) * 4).to(dtype)
    y = (quack_cpp.log_softmax if log else quack_cpp.softmax)(x)
    assert [c[:2] for c in calls] == [("ws", 2), ("ws", 0)]
    (_, _, ptr, nbytes) = calls[1]
    assert nbytes == ws_bytes and (ptr != 0) == (ws_bytes > 0)
    want = (torch.log_softmax if log else torch.softmax)(x.double(), dim=-1)
    # log-softmax's error is absolute (x - lse): the emulation's fp32 sum of
    # 65536 exponentials puts ~1e-5 on the lse (2e-5 seen at |y| = 0.86 in
    # CI, 2026-12-06), which rtol on values near 0 cannot cover.
    tol = (dict(rtol=2e-5, atol=1e-4 if log else 1e-6) if dtype == torch.float32
           else dict(rtol=1.6e-2, atol=1e-2 if log else 1e-6))
    torch.testing.assert_close(y.double(), want, **tol)


def test_short_rows_take_the_plain_launch(fake_ext):
    calls, _ = fake_ext
    n = _C.SOFTMAX_FWD_WORKSPACE_MIN_COLS - 1
    x = torch.randn(2, n)
    y = quack_cpp.softmax(x)
    assert [c[0] for c in calls] == ["plain"]
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), dim=-1), rtol=2e-5, atol=1e-9)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("ws_bytes", [0, 4096])
@pytest.mark.parametrize("n_from_min", [-1, 0])
def test_the_backward_asks_for_its_workspace_from_its_threshold(fake_ext, n_from_min, ws_bytes, log):
    """Backward rows from SOFTMAX_BWD_WORKSPACE_MIN_COLS columns: the query,
    then the launch with a workspace of the size asked for (none for 0);
    shorter rows the plain launch. dx against float64 either way."""
    calls, ext = fake_ext
    ext.ws_bytes = ws_bytes
    n = _C.SOFTMAX_BWD_WORKSPACE_MIN_COLS + n_from_min
    y = torch.softmax(torch.randn(2, n, dtype=torch.float64) * 3, dim=-1)
    if log:
        y = y.log()
    y, dy = y.float(), torch.randn(2, n)
    dx = _softmax._launch_bwd(y, dy, log)
    if n_from_min < 0:
        assert [c[0] for c in calls] == ["bwd plain"]
    else:
        assert [c[:2] for c in calls] == [("bwd ws", 2), ("bwd ws", 0)]
        (_, _, ptr, nbytes) = calls[1]
        assert nbytes == ws_bytes and (ptr != 0) == (ws_bytes > 0)
    yd, dyd = y.double(), dy.double()
    want = dyd - yd.exp() * dyd.sum(-1, keepdim=True) if log else yd * (dyd - (dyd * yd).sum(-1, keepdim=True))
    torch.testing.assert_close(dx.double(), want, rtol=2e-5, atol=1e-6)


def test_the_workspace_constant_is_the_librarys():
    assert _softmax._FWD_WS_MIN_COLS == _C.SOFTMAX_FWD_WORKSPACE_MIN_COLS == 65536
    assert _softmax._BWD_WS_MIN_COLS == _C.SOFTMAX_BWD_WORKSPACE_MIN_COLS == 65536
    assert set(_CODE_DTYPE) == {0, 1, 2}


# The eager fast path (_softmax's first branch) and the general path must
# hand the extension the same call for every layout the fast path takes, and
# the general path must still serve the rest.
_LAYOUTS = {
    "2-D": lambda: torch.randn(5, 300),
    "3-D, dim = nd - 1": lambda: torch.randn(2, 3, 300),
    "size-1 dims of any stride": lambda: torch.randn(4, 300).unsqueeze(1).as_strided((4, 1, 300), (300, 7, 1)),
    "one row": lambda: torch.randn(300),
    "padded rows (general path)": lambda: torch.randn(5, 512)[:, :300],
    "transposed (general path)": lambda: torch.randn(300, 5).t(),
}


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("layout", list(_LAYOUTS))
def test_eager_fast_path_matches_the_general_path(fake_ext, monkeypatch, layout, log):
    calls, _ = fake_ext
    x = (_LAYOUTS[layout]() * 3).to(torch.bfloat16)
    dim = x.dim() - 1 if layout.startswith("3-D") else -1
    fn = quack_cpp.log_softmax if log else quack_cpp.softmax
    y = fn(x, dim)
    fast = list(calls)
    calls.clear()
    # The general path's launch, called by hand (x's softmax dim is last).
    want_y = _softmax._launch_fwd(x, log)
    general = list(calls)
    assert len(fast) == 1 and fast[0][0] == "plain"
    assert len(general) == 1 and general[0][0] == "plain"
    # Same rows, columns, dtype code, strides and flag; the pointers differ
    # only where the general path copied x or allocated another output.
    assert fast[0][1:3] == general[0][1:3] and fast[0][4:6] == general[0][4:6]
    assert fast[0][7:] == general[0][7:]
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    torch.testing.assert_close(y, want_y, rtol=0, atol=0)
    ref = (torch.log_softmax if log else torch.softmax)(x.double(), dim=-1)
    torch.testing.assert_close(y.double(), ref, rtol=1.6e-2, atol=1e-2 if log else 1e-6)


def test_a_gradient_to_come_takes_the_autograd_path(fake_ext):
    calls, _ = fake_ext
    x = torch.randn(3, 64, requires_grad=True)
    y = quack_cpp.softmax(x)
    assert y.grad_fn is not None and [c[0] for c in calls] == ["plain"]
    with torch.no_grad():
        z = quack_cpp.softmax(x)
    assert z.grad_fn is None
