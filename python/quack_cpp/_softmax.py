"""Softmax and log-softmax for PyTorch: argument checks, the eager launch,
and the ``quack_cpp::softmax_fwd`` / ``quack_cpp::softmax_bwd`` torch.library
ops with fake implementations and autograd.

As for rmsnorm, an eager call on CUDA tensors goes straight to the kernel
(through _SoftmaxFn when x requires grad); torch.compile tracing and fake
tensors go through the ops. The backward uses the forward's output.
"""

import torch
from torch import Tensor

from . import _C
from ._common import (_DTYPE_CODE, _DTYPES, _contiguous, _direct, _first_order, _grad_enabled, _is_compiling,
                      _on_device, _raw_stream, _rows_view)


# Rows from this length on may take the grid forward (backward), which
# needs a workspace (quack::SoftmaxFwdArgs::workspace, SoftmaxBwdArgs'):
# the launch asks for it.
_FWD_WS_MIN_COLS = _C.SOFTMAX_FWD_WORKSPACE_MIN_COLS
_BWD_WS_MIN_COLS = _C.SOFTMAX_BWD_WORKSPACE_MIN_COLS


def _name(log: bool) -> str:
    return "quack_cpp.log_softmax" if log else "quack_cpp.softmax"


def _check(x, dim, log: bool) -> int:
    """Raises TypeError / ValueError naming the argument; returns dim as a
    non-negative index."""
    name = _name(log)
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _DTYPE_CODE:
        raise TypeError(f"{name}: x must be {_DTYPES}, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError(f"{name}: x must have at least one dimension, got a 0-d tensor")
    if type(dim) is not int:
        raise TypeError(f"{name}: dim must be an int, got {type(dim).__name__}")
    nd = x.dim()
    if not -nd <= dim < nd:
        raise ValueError(f"{name}: dim must be in [{-nd}, {nd - 1}] for x of {nd} dimensions, got {dim}")
    if x.shape[dim] < 1:
        raise ValueError(f"{name}: the softmax dimension must have size >= 1, got x of shape {tuple(x.shape)}")
    if not (x.is_cuda or x.device.type == "meta"):
        raise ValueError(f"{name}: x must be a CUDA tensor, got a tensor on {x.device}")
    return dim % nd


def _launch_fwd(x: Tensor, log: bool) -> Tensor:
    """Softmax over the last dim of a CUDA tensor x; a new contiguous output."""
    n = x.shape[-1]
    x, xs = _rows_view(x, n)
    out = torch.empty_like(x, memory_format=_contiguous)
    rows = x.numel() // n
    if rows == 0:
        return out
    dev = x.get_device()
    args = (rows, n, x.data_ptr(), _DTYPE_CODE[x.dtype], xs, out.data_ptr(), n, log, _raw_stream(dev))
    if n >= _FWD_WS_MIN_COLS:
        _on_device(dev, _launch_long, x, args, _C.softmax_fwd_ws)
    else:
        _on_device(dev, _C.softmax_fwd, *args)
    return out


def _launch_long(x: Tensor, args: tuple, launch) -> None:
    """Long rows: launch (the extension's softmax_fwd_ws or
    softmax_bwd_ws) with the workspace it asks for (the grid kernel's
    exchange logs, from torch's caching allocator on x's stream; none where
    the grid does not serve the row)."""
    nbytes = launch(*args, 0, 0, 2)
    ws = x.new_empty((nbytes,), dtype=torch.uint8) if nbytes else None
    launch(*args, 0 if ws is None else ws.data_ptr(), nbytes, 0)


def _launch_bwd(y: Tensor, dy: Tensor, log: bool) -> Tensor:
    n = y.shape[-1]
    y, ys = _rows_view(y, n)
    if dy.dtype != y.dtype:
        dy = dy.to(y.dtype)
    dy, dys = _rows_view(dy, n)
    dx = torch.empty_like(y, memory_format=_contiguous)
    rows = y.numel() // n
    if rows == 0:
        return dx
    dev = y.get_device()
    args = (rows, n, y.data_ptr(), _DTYPE_CODE[y.dtype], ys, dy.data_ptr(), dys, dx.data_ptr(), n, log,
            _raw_stream(dev))
    if n >= _BWD_WS_MIN_COLS:
        _on_device(dev, _launch_long, y, args, _C.softmax_bwd_ws)
    else:
        _on_device(dev, _C.softmax_bwd, *args)
    return dx


# ---------------------------------------------------------------------------
# torch.library ops (over the last dimension).

@torch.library.custom_op("quack_cpp::softmax_fwd", mutates_args=())
def _softmax_fwd_op(x: Tensor, log: bool) -> Tensor:
    """Softmax (log=False) or log-softmax over x's last dimension."""
    _check(x, -1, log)
    return _launch_fwd(x, log)


@_softmax_fwd_op.register_fake
def _softmax_fwd_fake(x, log):
    _check(x, -1, log)
    return torch.empty_like(x, memory_format=_contiguous)


@torch.library.custom_op("quack_cpp::softmax_bwd", mutates_args=())
def _softmax_bwd_op(y: Tensor, dy: Tensor, log: bool) -> Tensor:
    """Gradient of softmax / log-softmax (over the last dim) from its output y."""
    if dy.shape != y.shape:
        raise ValueError(f"{_name(log)} backward: dy must have y's shape {tuple(y.shape)}, got {tuple(dy.shape)}")
    return _launch_bwd(y, dy, log)


@_softmax_bwd_op.register_fake
def _softmax_bwd_fake(y, dy, log):
    return torch.empty_like(y, memory_format=_contiguous)


def _setup_context(ctx, inputs, output):
    ctx.log = inputs[1]
    ctx.save_for_backward(output)


def _backward(ctx, grad):
    (y,) = ctx.saved_tensors
    if _direct(y):
        return _launch_bwd(y, grad, ctx.log), None
    return torch.ops.quack_cpp.softmax_bwd(y, grad, ctx.log), None


_softmax_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def _bwd_setup_context(ctx, inputs, output):
    y, dy, log = inputs
    ctx.log = log
    ctx.save_for_backward(y, dy)


def _bwd_backward(ctx, ggrad):
    raise NotImplementedError("quack_cpp.softmax: double backward is not implemented")


_softmax_bwd_op.register_autograd(_bwd_backward, setup_context=_bwd_setup_context)


class _SoftmaxFn(torch.autograd.Function):
    """softmax / log_softmax with a gradient to come on eager CUDA tensors
    (_direct): the library called without the op's dispatch and
    register_autograd's wrapper; the op's backward."""

    @staticmethod
    def forward(ctx, x, log):
        y = _launch_fwd(x, log)
        ctx.name = _name(log)
        _setup_context(ctx, (x, log), y)
        return y

    @staticmethod
    @_first_order
    def backward(ctx, grad):
        return _backward(ctx, grad)


# ---------------------------------------------------------------------------
# Public functions.

def _softmax(x: Tensor, dim: int, log: bool) -> Tensor:
    # The eager inference call in one step: a contiguous CUDA tensor of a
    # supported dtype, the last dim, rows shorter than the workspace's, no
    # gradient to come. Every test here is one that _check or the general
    # path below makes too; anything else (and every error) takes that path.
    # (Host time a call, the 2-core CI machine, the extension stubbed: 4.6 us
    # through the general path, of which 1.5 are the output's allocation.)
    if type(x) is Tensor and type(dim) is int and x.is_cuda and x.is_contiguous() and not _is_compiling():
        shape = x.shape
        nd = len(shape)
        code = _DTYPE_CODE.get(x.dtype)
        if (code is not None and nd > 0 and (dim == -1 or dim == nd - 1) and 0 < shape[-1] < _FWD_WS_MIN_COLS
                and not (x.requires_grad and _grad_enabled())):
            n = shape[-1]
            # A contiguous x: empty_like's strides are contiguous ones (up to
            # size-1 dims, which address nothing).
            out = torch.empty_like(x)
            rows = x.numel() // n
            if rows:
                dev = x.get_device()
                _on_device(dev, _C.softmax_fwd, rows, n, x.data_ptr(), code, n, out.data_ptr(), n, log,
                           _raw_stream(dev))
            return out
    d = _check(x, dim, log)
    last = d == x.dim() - 1
    if not last:
        # Another dim: moved last (a copy when not already the fastest),
        # computed, moved back (a strided view of the contiguous result).
        x = x.movedim(d, -1)
    if not _direct(x):
        out = torch.ops.quack_cpp.softmax_fwd(x, bool(log))
    elif _grad_enabled() and x.requires_grad:
        out = _SoftmaxFn.apply(x, bool(log))
    else:
        out = _launch_fwd(x, log)
    return out if last else out.movedim(-1, d)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax along ``dim`` (default: the last), as ``torch.softmax``.

    fp32 arithmetic; the output has x's dtype (float32, float16 or bfloat16).
    Any N >= 1 and any leading shape. A ``dim`` other than the last is
    handled by moving it last, which costs a transposing copy of x when that
    dimension is not already contiguous in memory. Rows containing NaN or
    +inf, and rows of all -inf, give NaN, as torch. Autograd: the backward
    reads the saved output (one pass: dx = y * (dy - sum(dy * y))).
    """
    return _softmax(x, dim, False)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Log-softmax along ``dim`` (default: the last), as ``torch.log_softmax``.

    Same rules as :func:`softmax`; the backward is dx = dy - exp(y) * sum(dy).
    """
    return _softmax(x, dim, True)
