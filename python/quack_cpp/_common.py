"""What the op modules share: dtype codes, the current CUDA device and
stream, rows as (pointer, stride), the device guard, and the eager
autograd's two rules (_direct: when to call the library without the
torch.library ops; _first_order: a backward that refuses a second
derivative)."""
import functools
from typing import Tuple

import torch
from torch import Tensor

# torch dtype -> quack::DType code (quack/quack.hpp).
_DTYPE_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_DTYPES = "float32, float16 or bfloat16"

_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_current_device = torch._C._cuda_getDevice
_raw_stream = torch._C._cuda_getCurrentRawStream
_contiguous = torch.contiguous_format


def _direct(t: Tensor) -> bool:
    """Whether autograd calls the library itself: eager CUDA tensors do;
    torch.compile tracing and fake or meta tensors take the torch.library
    ops. A Python custom op with its registered autograd costs tens of
    microseconds of host time a call (~50 us for cross_entropy_fwd's ten
    arguments, ~20 us for a two-argument op, against a plain call, timed on
    the 2-core CI machine), and more through register_autograd's wrapper: on
    the H200 (665e218, bench_all --quick) a LayerNorm training step took
    597 us at both N = 4096 and 65536 for 270 / 363 us of kernels -- bound by
    the host, where QuACK's took 230 us."""
    return not _is_compiling() and type(t) is Tensor and t.is_cuda


def _first_order(backward):
    """A torch.autograd.Function's backward that refuses a second derivative:
    run without recording, and under create_graph every gradient it returns
    gets a node that raises ``RuntimeError("<ctx.name>: a second derivative
    ...")`` when differentiated. (torch's once_differentiable flags them only
    when an incoming gradient requires grad, which it does not for a loss
    such as (y * c).sum(): then a penalty on the gradient,
    grad(loss, x, create_graph=True), would silently miss this op's term --
    measured on the H200 at 0af1687.)"""

    @functools.wraps(backward)
    def run(ctx, *grads):
        create_graph = torch.is_grad_enabled()
        with torch.no_grad():
            out = backward(ctx, *grads)
        if not create_graph:
            return out
        outs = out if isinstance(out, tuple) else (out,)
        idx = [i for i, t in enumerate(outs) if isinstance(t, Tensor)]
        if not idx:
            return out
        err = torch._C._functions.DelayedError(
            f"{ctx.name}: a second derivative (double backward) is not implemented".encode(), len(idx))
        flagged = err(*[outs[i].detach().requires_grad_() for i in idx])
        if isinstance(flagged, Tensor):
            flagged = (flagged,)
        outs = list(outs)
        for i, t in zip(idx, flagged):
            outs[i] = t
        return tuple(outs) if isinstance(out, tuple) else outs[0]

    return run


def _row_stride(t: Tensor, n: int) -> int:
    """Row stride (elements) of ``t`` seen as a (rows, n) row-major matrix
    without a copy: the last dimension contiguous and the leading dimensions
    collapsible into one row stride >= n. -1 when that needs a copy."""
    if t.is_contiguous():
        return n
    stride = t.stride()
    if n > 1 and stride[-1] != 1:
        return -1
    shape = t.shape
    row_stride = -1
    span = 0  # elements spanned by the dims already walked, from the inside out
    for i in range(t.dim() - 2, -1, -1):
        size = shape[i]
        if size == 1:
            continue
        if size == 0:
            return n  # no rows: any stride will do
        if row_stride < 0:
            row_stride = stride[i]
        elif stride[i] != span:
            return -1
        span = stride[i] * size
    if row_stride < 0:
        return n  # at most one row
    return row_stride if row_stride >= n else -1  # overlapping rows (expand): copy


def _rows_view(t: Tensor, n: int) -> Tuple[Tensor, int]:
    """``t`` (last dim n) and its row stride as a (rows, n) row-major matrix;
    copied to contiguous when its rows cannot be addressed with one stride."""
    s = n if t.is_contiguous() else _row_stride(t, n)
    if s < 0:
        return t.contiguous(), n
    return t, s


def _on_device(dev: int, launch, *args):
    """launch(*args) with `dev` as the current CUDA device; its result."""
    if _current_device() == dev:
        return launch(*args)
    with torch.cuda.device(dev):
        return launch(*args)
