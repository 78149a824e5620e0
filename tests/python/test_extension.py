"""quack_cpp._C directly: argument packing and the Status -> exception
mapping, on the paths the library decides without touching a GPU."""
import re

import pytest

import quack_cpp
from quack_cpp import _C

N = 8


def call(**kw):
    args = dict(rows=1, cols=N, x_ptr=256, x_dtype=0, x_stride=N, res_ptr=0, res_dtype=0, res_stride=0,
                w_ptr=0, w_dtype=0, b_ptr=0, b_dtype=0, out_ptr=512, out_dtype=0, out_stride=N,
                res_out_ptr=0, res_out_dtype=0, res_out_stride=0, rstd_ptr=0, eps=1e-6, weight_offset=0.0,
                stream=0)
    args.update(kw)
    return _C.rmsnorm_fwd(**args)


def test_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", _C.version())
    assert quack_cpp.__version__ == quack_cpp.version() == _C.version()


def test_zero_rows_is_a_no_op():
    # Validated, nothing launched: no device needed.
    assert call(rows=0, x_ptr=0, out_ptr=0) is None


@pytest.mark.parametrize("kw, names", [
    (dict(cols=0), ["cols", ">= 1"]),
    (dict(rows=-1), ["rows"]),
    (dict(x_ptr=0), ["x", "null"]),
    (dict(out_ptr=0), ["out", "null"]),
    (dict(x_dtype=7), ["x", "dtype code 7"]),
    (dict(out_dtype=-1), ["out", "dtype code -1"]),
    (dict(x_stride=N - 1), ["x", "row stride"]),
    (dict(x_ptr=257), ["x", "aligned"]),
    (dict(res_ptr=256, res_dtype=1, res_stride=N - 1), ["residual", "row stride"]),
    (dict(w_ptr=258, w_dtype=0), ["weight", "aligned"]),
    (dict(b_ptr=256, b_dtype=9), ["bias", "dtype code 9"]),
    (dict(res_out_ptr=256, res_out_dtype=2, res_out_stride=0), ["residual_out", "row stride"]),
    (dict(rstd_ptr=258), ["rstd", "aligned"]),
    (dict(out_ptr=260), ["out", "overlaps x"]),                         # in place needs x's very pointer
    (dict(w_ptr=512, w_dtype=0), ["out", "overlaps weight"]),           # the weight every row reads
    (dict(rstd_ptr=516), ["rstd", "overlaps out"]),                     # two outputs
    (dict(eps=-1.0), ["eps", ">= 0"]),
    (dict(eps=float("nan")), ["eps", "finite"]),
    (dict(eps=1e300), ["eps", "float32"]),
    (dict(weight_offset=float("inf")), ["weight_offset", "finite"]),
    (dict(weight_offset=-1e39), ["weight_offset", "float32"]),
])
def test_invalid_argument_is_value_error_naming_it(kw, names):
    pattern = "^quack_cpp.rmsnorm: " + "".join(f"(?=.*{re.escape(n)})" for n in names)
    with pytest.raises(ValueError, match=pattern):
        call(**kw)


def test_positional_call():
    assert _C.rmsnorm_fwd(0, N, 0, 0, N, 0, 0, 0, 0, 0, 0, 0, 0, 0, N, 0, 0, 0, 0, 1e-6, 0.0, 0) is None


def test_types_are_checked():
    with pytest.raises(TypeError):
        call(x_ptr=-1)  # pointers are unsigned
    with pytest.raises(TypeError):
        call(eps="1e-6")


# ---------------------------------------------------------------------------
# The forward with a workspace (norm_fwd_ws): the same validation, the
# workspace's alignment, the op's name; mode 2 sizes nothing below the
# shortest row a grid serves, without touching a device.

def fwd_ws(centre=False, **kw):
    args = dict(rows=1, cols=N, x_ptr=256, x_dtype=0, x_stride=N, res_ptr=0, res_dtype=0, res_stride=0,
                w_ptr=0, w_dtype=0, b_ptr=0, b_dtype=0, out_ptr=512, out_dtype=0, out_stride=N,
                res_out_ptr=0, res_out_dtype=0, res_out_stride=0, rstd_ptr=0, eps=1e-6, weight_offset=0.0,
                stream=0, mean_ptr=0, ws_ptr=0, ws_bytes=0, mode=2)
    args.update(kw)
    return _C.norm_fwd_ws(centre, **args)


@pytest.mark.parametrize("centre, op", [(False, "rmsnorm"), (True, "layernorm")])
def test_forward_workspace_binding(centre, op):
    assert _C.NORM_FWD_WORKSPACE_MIN_COLS == 65536
    assert fwd_ws(centre) == 0
    assert fwd_ws(centre, rows=0, x_ptr=0, out_ptr=0, mode=0) == 0
    with pytest.raises(ValueError, match=f"^quack_cpp.{op}: workspace: pointer is not 16-byte aligned"):
        fwd_ws(centre, ws_ptr=4096 + 8, ws_bytes=1 << 20)
    with pytest.raises(ValueError, match=f"^quack_cpp.{op}: eps"):
        fwd_ws(centre, eps=-1.0)


# The softmax forward with a workspace (softmax_fwd_ws): the same
# validation, the workspace's alignment, the op's name; mode 2 sizes nothing
# below the shortest row the grid serves, or without rows, without touching
# a device.

def softmax_ws(**kw):
    args = dict(rows=1, cols=N, x_ptr=256, dtype=2, x_stride=N, out_ptr=512, out_stride=N, log=False, stream=0,
                ws_ptr=0, ws_bytes=0, mode=2)
    args.update(kw)
    return _C.softmax_fwd_ws(**args)


def test_softmax_forward_workspace_binding():
    assert _C.SOFTMAX_FWD_WORKSPACE_MIN_COLS == 65536
    assert softmax_ws() == 0
    big = _C.SOFTMAX_FWD_WORKSPACE_MIN_COLS
    assert softmax_ws(rows=0, cols=big, x_stride=big, out_stride=big) == 0
    assert softmax_ws(rows=0, x_ptr=0, out_ptr=0, mode=0) == 0
    with pytest.raises(ValueError, match="^quack_cpp.softmax: workspace: pointer is not 16-byte aligned"):
        softmax_ws(ws_ptr=4096 + 8, ws_bytes=1 << 20)
    with pytest.raises(ValueError, match="^quack_cpp.softmax: x: .*row stride"):
        softmax_ws(x_stride=N - 1)
    with pytest.raises(ValueError, match="^quack_cpp.softmax: out: overlaps x"):
        softmax_ws(out_ptr=258)
    assert softmax_ws(out_ptr=256) == 0  # in place


# ---------------------------------------------------------------------------
# Cross-entropy through the binding: mode 1 validates, mode 2 sizes the
# workspace; neither touches a device.

def ce(**kw):
    args = dict(rows=4, cols=N, logits_ptr=256, dtype=2, logits_stride=N, target_ptr=1024, target64=True,
                target_stride=1, weight_ptr=0, ignore_index=-100, reduction=1, label_smoothing=0.0, z_loss=0.0,
                softcap=0.0, loss_ptr=2048, lse_ptr=0, dx_ptr=0, dx_stride=0, dloss_ptr=0, ws_ptr=4096,
                ws_bytes=1 << 20, mode=1, stream=0)
    args.update(kw)
    return _C.cross_entropy(**args)


def test_cross_entropy_valid_call_and_workspace_sizes():
    assert ce() == 0
    # mean: 16 bytes of totals + 4 rows' shares; sum: the shares; none: nothing.
    assert ce(mode=2) == 32
    assert ce(mode=2, reduction=2) == 16
    assert ce(mode=2, reduction=0) == 0
    # none with class-weighted smoothing still needs the class weights' sum.
    assert ce(mode=2, reduction=0, weight_ptr=8192, label_smoothing=0.1) == 16
    # In place (dlogits = logits) is accepted.
    assert ce(dx_ptr=256, dx_stride=N) == 0


@pytest.mark.parametrize("kw, names", [
    (dict(cols=0), ["cols", ">= 1"]),
    (dict(logits_ptr=0), ["logits", "null"]),
    (dict(logits_stride=N - 1), ["logits", "row stride"]),
    (dict(dtype=7), ["logits", "dtype code 7"]),
    (dict(target_ptr=0), ["target", "null"]),
    (dict(target_ptr=1028), ["target", "aligned"]),
    (dict(target_stride=-1), ["target_stride"]),
    (dict(weight_ptr=8194), ["weight", "aligned"]),
    (dict(reduction=3), ["reduction", "code 3"]),
    (dict(label_smoothing=1.5), ["label_smoothing", "[0, 1]"]),
    (dict(z_loss=-1.0), ["z_loss", ">= 0"]),
    (dict(softcap=-2.0), ["softcap", ">= 0"]),
    (dict(softcap=1e-40), ["softcap", "normal"]),
    (dict(dx_ptr=258, dx_stride=N), ["dlogits", "overlaps"]),
    (dict(dloss_ptr=3000), ["dloss", "without dlogits"]),
    (dict(ws_ptr=0), ["workspace", "null"]),
    (dict(ws_bytes=16), ["workspace_bytes", "32"]),
])
def test_cross_entropy_invalid_argument_names_it(kw, names):
    pattern = "^quack_cpp.cross_entropy: " + "".join(f"(?=.*{re.escape(n)})" for n in names)
    with pytest.raises(ValueError, match=pattern):
        ce(**kw)


def test_cross_entropy_out_of_range_scalars_are_refused_by_the_binding():
    with pytest.raises(ValueError, match="z_loss"):
        ce(z_loss=1e300)
