"""Cross-entropy for PyTorch: argument checks, the eager launch, the
``quack_cpp::cross_entropy_fwd`` / ``cross_entropy_fwd_inplace`` /
``cross_entropy_scale_grad`` torch.library ops with fake implementations,
autograd, and the public :func:`cross_entropy`.

Training fast path: when the logits need a gradient, the forward computes it
for a unit upstream gradient (in the same sweep over the logits, or from
32000 classes with the plain options in a second pass from lse, which the
library measured faster there); the backward then rescales it in place on
the device only where the upstream gradient is not exactly 1 (no host
synchronisation).
"""

import functools
import math
import numbers
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _C
from ._common import (_DTYPE_CODE, _DTYPES, _contiguous, _direct, _first_order, _grad_enabled, _is_compiling,
                      _on_device, _raw_stream, _rows_view)

_NAME = "quack_cpp.cross_entropy"
_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
_TARGET_DTYPES = (torch.int64, torch.int32)


def _check_real(name: str, v, lo: float, hi: float) -> None:
    if type(v) is not float and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
        raise TypeError(f"{_NAME}: {name} must be a real number, got {type(v).__name__}")
    if not (lo <= v <= hi):
        raise ValueError(f"{_NAME}: {name} must be in [{lo}, {hi}], got {v}")


def _check(logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap) -> None:
    """Raises TypeError / ValueError naming the argument."""
    if not isinstance(logits, Tensor):
        raise TypeError(f"{_NAME}: logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dtype not in _DTYPE_CODE:
        raise TypeError(f"{_NAME}: logits must be {_DTYPES}, got {logits.dtype}")
    if logits.dim() == 0:
        raise ValueError(f"{_NAME}: logits must have at least one dimension (classes last), got a 0-d tensor")
    if logits.shape[-1] < 1:
        raise ValueError(f"{_NAME}: the class dimension (logits' last) must have size >= 1, "
                         f"got logits of shape {tuple(logits.shape)}")
    if not isinstance(target, Tensor):
        raise TypeError(f"{_NAME}: target must be a torch.Tensor, got {type(target).__name__}")
    if target.dtype not in _TARGET_DTYPES:
        raise TypeError(f"{_NAME}: target must hold class indices as int64 or int32, got {target.dtype} "
                        "(class-probability targets are not supported)")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"{_NAME}: target must have logits' shape without the class dimension, "
                         f"{tuple(logits.shape[:-1])}, got {tuple(target.shape)}")
    if weight is not None:
        if not isinstance(weight, Tensor):
            raise TypeError(f"{_NAME}: weight must be a torch.Tensor or None, got {type(weight).__name__}")
        if not weight.is_floating_point():
            raise TypeError(f"{_NAME}: weight must be a floating-point tensor, got {weight.dtype}")
        if tuple(weight.shape) != (logits.shape[-1],):
            raise ValueError(f"{_NAME}: weight must have shape ({logits.shape[-1]},) (one per class), "
                             f"got {tuple(weight.shape)}")
    if type(ignore_index) is not int:
        raise TypeError(f"{_NAME}: ignore_index must be an int, got {type(ignore_index).__name__}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{_NAME}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    _check_real("label_smoothing", label_smoothing, 0.0, 1.0)
    _check_real("z_loss", z_loss, 0.0, math.inf)
    if z_loss == math.inf:
        raise ValueError(f"{_NAME}: z_loss must be finite, got {z_loss}")
    if softcap is not None:
        _check_real("softcap", softcap, 0.0, math.inf)
        if not (0.0 < softcap < math.inf):
            raise ValueError(f"{_NAME}: softcap must be None or a finite number > 0, got {softcap}")
    dev = logits.device
    if not (logits.is_cuda or dev.type == "meta"):
        raise ValueError(f"{_NAME}: logits must be a CUDA tensor, got a tensor on {dev}")
    if target.device != dev:
        raise ValueError(f"{_NAME}: target must be on logits' device {dev}, got {target.device}")
    if weight is not None and weight.device != dev:
        raise ValueError(f"{_NAME}: weight must be on logits' device {dev}, got {weight.device}")


def _loss_shape(logits: Tensor, reduction: int):
    return tuple(logits.shape[:-1]) if reduction == 0 else ()


def _run(on: Tensor, args: tuple, **shard) -> None:
    """The library call: `args` are quack::CrossEntropyArgs as the binding's
    leading positional arguments, `shard` its vocabulary-sharding keywords;
    launched on `on`'s device's current stream (_run_on)."""
    dev = on.get_device()
    _on_device(dev, _run_on, on, dev, args, shard)


def _run_on(on: Tensor, dev: int, args: tuple, shard: Optional[dict]) -> None:
    """_run with `dev` current: one library call where the call needs no
    workspace (the binding's mode 3 launches then), else two (mode 3 answers
    the workspace's size, allocated on `on`'s device; mode 0 launches with
    it). (One binding call where a query in mode 2, then mode 0, made two:
    the loss-only fast path's way since c1817d6, the general path's too.)"""
    launch = functools.partial(_C.cross_entropy, **shard) if shard else _C.cross_entropy
    stream = _raw_stream(dev)
    nbytes = launch(*args, 0, 0, 3, stream)
    if nbytes:
        ws = on.new_empty((nbytes,), dtype=torch.uint8)
        launch(*args, ws.data_ptr(), nbytes, 0, stream)


def _launch(logits: Tensor, target: Tensor, weight: Optional[Tensor], ignore_index: int, reduction: int,
            label_smoothing: float, z_loss: float, softcap: float, grad: Optional[str],
            dloss: Optional[Tensor] = None, want_lse: bool = True):
    """The kernel on the current stream. grad: None (no gradient), "new" (a
    new contiguous tensor) or "inplace" (into logits), times the upstream
    gradient dloss (None: 1). Returns (loss, lse, dx): dx None without a
    gradient, lse None unless want_lse (tensors not allocated are host time
    saved: each torch.empty is microseconds of a small call)."""
    n = logits.shape[-1]
    lead = tuple(logits.shape[:-1])
    x, xs = _rows_view(logits, n)
    rows = x.numel() // n
    dev = logits.device
    loss = torch.empty(_loss_shape(logits, reduction), device=dev, dtype=torch.float32)
    lse = torch.empty(lead, device=dev, dtype=torch.float32) if want_lse else None
    if grad == "new":
        dx = torch.empty_like(x, memory_format=_contiguous)
        dxs = n
    elif grad == "inplace":
        dx, dxs = x, xs
    else:
        dx, dxs = None, 0
    t = target.reshape(-1)
    ts = t.stride(0) if t.numel() > 0 else 1
    w = weight.to(torch.float32).contiguous() if weight is not None else None
    wptr = w.data_ptr() if w is not None else 0
    dxp = dx.data_ptr() if grad is not None else 0
    code = _DTYPE_CODE[logits.dtype]
    t64 = t.dtype == torch.int64
    g = None
    if dloss is not None and grad is not None:
        g = dloss.to(torch.float32).reshape(-1).contiguous()
        if g.numel() != (rows if reduction == 0 else 1):
            raise ValueError(f"{_NAME} backward: the upstream gradient must have "
                             f"{rows if reduction == 0 else 1} elements, got {g.numel()}")
    gptr = g.data_ptr() if g is not None else 0
    args = (rows, n, x.data_ptr(), code, xs, t.data_ptr(), t64, ts, wptr, ignore_index, reduction,
            float(label_smoothing), float(z_loss), float(softcap), loss.data_ptr(),
            lse.data_ptr() if lse is not None else 0, dxp, dxs, gptr)
    _run(x, args)
    if grad == "inplace" and dx is not logits and dx.data_ptr() != logits.data_ptr():
        # logits' rows could not be addressed with one stride: the gradient
        # went to a contiguous copy; write it back.
        logits.copy_(dx.view(logits.shape))
    if grad == "new":
        dx = dx.view(logits.shape)
    return loss, lse, dx


# ---------------------------------------------------------------------------
# torch.library ops (classes on the last dimension).

@torch.library.custom_op("quack_cpp::cross_entropy_fwd", mutates_args=())
def _ce_fwd_op(logits: Tensor, target: Tensor, weight: Optional[Tensor], ignore_index: int, reduction: int,
               label_smoothing: float, z_loss: float, softcap: float, want_grad: bool,
               dloss: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """(loss, lse, dlogits); dlogits (times the upstream gradient dloss, or
    for a unit one) is empty unless want_grad."""
    loss, lse, dx = _launch(logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap,
                            "new" if want_grad else None, dloss)
    if dx is None:
        dx = torch.empty((0,), device=logits.device, dtype=logits.dtype)
    return loss, lse, dx


@_ce_fwd_op.register_fake
def _ce_fwd_fake(logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, want_grad,
                 dloss):
    dev = logits.device
    loss = logits.new_empty(_loss_shape(logits, reduction), dtype=torch.float32)
    lse = logits.new_empty(tuple(logits.shape[:-1]), dtype=torch.float32)
    dx = (torch.empty_like(logits, memory_format=_contiguous) if want_grad
          else torch.empty((0,), device=dev, dtype=logits.dtype))
    return loss, lse, dx


@torch.library.custom_op("quack_cpp::cross_entropy_fwd_inplace", mutates_args=("logits",))
def _ce_fwd_inplace_op(logits: Tensor, target: Tensor, weight: Optional[Tensor], ignore_index: int,
                       reduction: int, label_smoothing: float, z_loss: float, softcap: float,
                       dloss: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """(loss, lse); logits is overwritten with dlogits (times dloss, or for a
    unit upstream gradient)."""
    loss, lse, _ = _launch(logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap,
                           "inplace", dloss)
    return loss, lse


@_ce_fwd_inplace_op.register_fake
def _ce_fwd_inplace_fake(logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap,
                         dloss):
    loss = logits.new_empty(_loss_shape(logits, reduction), dtype=torch.float32)
    lse = logits.new_empty(tuple(logits.shape[:-1]), dtype=torch.float32)
    return loss, lse


def _scale(dlogits: Tensor, dloss: Tensor) -> None:
    """dlogits *= dloss (one scalar, or one per row of dlogits), skipping rows
    whose factor is exactly 1."""
    n = dlogits.shape[-1]
    rows = dlogits.numel() // n if n else 0
    if rows == 0:
        return
    g = dloss.to(torch.float32).reshape(-1).contiguous()
    per_row = g.numel() != 1
    if g.numel() not in (1, rows):
        raise ValueError(f"{_NAME} backward: the upstream gradient must have 1 or {rows} elements, "
                         f"got {g.numel()}")
    x, xs = _rows_view(dlogits, n)
    if x.data_ptr() != dlogits.data_ptr() and not dlogits.is_contiguous():
        raise ValueError(f"{_NAME} backward: dlogits must be addressable with one row stride")
    dev = x.get_device()
    _on_device(dev, _C.cross_entropy_scale_grad, rows, n, x.data_ptr(), _DTYPE_CODE[x.dtype], xs, g.data_ptr(),
               per_row, _raw_stream(dev))


@torch.library.custom_op("quack_cpp::cross_entropy_scale_grad", mutates_args=("dlogits",))
def _ce_scale_op(dlogits: Tensor, dloss: Tensor) -> None:
    """dlogits *= dloss (one scalar, or one per row of dlogits), skipping rows
    whose factor is exactly 1."""
    _scale(dlogits, dloss)


@_ce_scale_op.register_fake
def _ce_scale_fake(dlogits, dloss):
    return None


def _mutated(t: Tensor) -> None:
    """What a custom op's mutates_args does for autograd: the version bump
    that makes a saved copy of `t` refuse a second use."""
    torch.autograd.graph.increment_version(t)


class _CrossEntropyFn(torch.autograd.Function):
    """Autograd over the fused forward: the gradient for a unit upstream
    factor is computed with the loss; backward rescales it in place.

    float16 logits are the exception: a gradient stored at unit scale would
    underflow fp16's range under loss scaling (GradScaler multiplies the
    upstream gradient by up to 2^16), so their backward computes the gradient
    with the upstream factor applied before the one rounding (a second read
    of the logits)."""

    @staticmethod
    def forward(ctx, logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap,
                inplace):
        ops = torch.ops.quack_cpp
        ctx.name = _NAME
        ctx.late = logits.dtype == torch.float16
        opts = (ignore_index, reduction, label_smoothing, z_loss, softcap)
        ctx.opts = opts
        ctx.inplace = inplace
        direct = _direct(logits)
        if ctx.late:
            if direct:
                loss, lse, _ = _launch(logits, target, weight, *opts, None)
            else:
                loss, lse, _ = ops.cross_entropy_fwd(logits, target, weight, *opts, False, None)
            ctx.save_for_backward(logits, target, weight)
        elif inplace:
            if direct:
                loss, lse, _ = _launch(logits, target, weight, *opts, "inplace")
                _mutated(logits)
            else:
                loss, lse = ops.cross_entropy_fwd_inplace(logits, target, weight, *opts, None)
            ctx.save_for_backward(logits)
        else:
            if direct:
                loss, lse, dx = _launch(logits, target, weight, *opts, "new")
            else:
                loss, lse, dx = ops.cross_entropy_fwd(logits, target, weight, *opts, True, None)
            ctx.save_for_backward(dx)
        ctx.mark_non_differentiable(lse)
        return loss, lse

    @staticmethod
    @_first_order
    def backward(ctx, grad_loss, grad_lse):
        ops = torch.ops.quack_cpp
        if ctx.late:
            logits, target, weight = ctx.saved_tensors
            direct = _direct(logits)
            if ctx.inplace:
                if direct:
                    _launch(logits, target, weight, *ctx.opts, "inplace", grad_loss)
                    _mutated(logits)
                else:
                    ops.cross_entropy_fwd_inplace(logits, target, weight, *ctx.opts, grad_loss)
                dx = logits
            elif direct:
                _, _, dx = _launch(logits, target, weight, *ctx.opts, "new", grad_loss)
            else:
                _, _, dx = ops.cross_entropy_fwd(logits, target, weight, *ctx.opts, True, grad_loss)
        else:
            (dx,) = ctx.saved_tensors
            if _direct(dx):
                _scale(dx, grad_loss)
                _mutated(dx)
            else:
                ops.cross_entropy_scale_grad(dx, grad_loss)
        return dx, None, None, None, None, None, None, None, None


# A 0-d float32 tensor a device (by index): the template of a reduced loss,
# for torch.empty_like, whose arguments parse faster than new_empty's dtype
# keyword (1.2 against 3.1 us on the CI machine). Made outside any CUDA-graph
# capture, so that it holds no block of a graph's private memory pool.
_LOSS_TEMPLATE = {}


def _scalar_loss(dev: int, like: Tensor) -> Tensor:
    t = _LOSS_TEMPLATE.get(dev)
    if t is None:
        t = like.new_empty((), dtype=torch.float32)
        if torch.cuda.is_current_stream_capturing():
            return t
        _LOSS_TEMPLATE[dev] = t
    return torch.empty_like(t)


def _fast_loss(logits: Tensor, target, ignore_index, reduction, label_smoothing, z_loss) -> Optional[Tensor]:
    """The eager loss-only call ``cross_entropy(logits, target[,
    ignore_index][, reduction][, label_smoothing][, z_loss])`` in one step:
    contiguous CUDA logits of a supported dtype (the caller tested the other
    options and the logits' type), a contiguous int64 / int32 target of the
    logits' leading shape on their device, at least one row, float options
    in range, no gradient to come. The loss, launched as _launch would
    launch it, with one library call where the workspace is not needed
    (the binding's mode 3). Every test here is one that _check or _launch
    makes; None when one fails: the general path then runs, and raises any
    error."""
    if not (type(target) is Tensor and logits.is_cuda and logits.is_contiguous() and target.is_contiguous()
            and type(ignore_index) is int and type(reduction) is str and type(label_smoothing) is float
            and 0.0 <= label_smoothing <= 1.0 and type(z_loss) is float and 0.0 <= z_loss < math.inf) \
            or _is_compiling():
        return None
    red = _REDUCTIONS.get(reduction)
    code = _DTYPE_CODE.get(logits.dtype)
    shape = logits.shape
    tdt = target.dtype
    if (red is None or code is None or not shape or shape[-1] < 1 or (tdt is not torch.int64 and tdt is not torch.int32)
            or target.shape != shape[:-1] or not target.is_cuda):
        return None
    dev = logits.get_device()
    n = shape[-1]
    rows = logits.numel() // n
    if rows == 0 or target.get_device() != dev or (logits.requires_grad and _grad_enabled()):
        return None
    loss = _scalar_loss(dev, logits) if red else logits.new_empty(shape[:-1], dtype=torch.float32)
    args = (rows, n, logits.data_ptr(), code, n, target.data_ptr(), tdt is torch.int64, 1, 0, ignore_index, red,
            label_smoothing, z_loss, 0.0, loss.data_ptr(), 0, 0, 0, 0)
    _on_device(dev, _run_on, logits, dev, args, None)
    return loss


def cross_entropy(logits: Tensor, target: Tensor, weight: Optional[Tensor] = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap: Optional[float] = None, return_lse: bool = False, inplace_backward: bool = False):
    """Cross-entropy of ``logits`` (..., V) (classes last) against class
    indices ``target`` (...), as ``torch.nn.functional.cross_entropy`` for 2-D
    logits, plus PaLM's ``z_loss`` and Gemma 2's ``softcap``.

    - logits: float32, float16 or bfloat16, CUDA, any leading shape (flattened
      to rows; unlike torch, the class dimension is the last one for 3-D and
      higher logits). target: int64 or int32 with logits' leading shape.
    - weight (V,): class weights (any float dtype, used in fp32); ignore_index,
      reduction ('mean', 'sum', 'none') and label_smoothing exactly as torch,
      including how smoothing meets weights and ignored targets; 'mean'
      divides by the total weight of the counted targets (NaN when it is 0).
    - z_loss: adds z_loss * lse**2 for each counted row; with 'mean' that term
      is averaged over the counted rows (not weighted by class).
    - softcap: the logits are first replaced by softcap * tanh(logits / softcap).
    - A target outside [0, V) that is not ignore_index gives that row a NaN
      loss and NaN gradient (so a reduced loss is NaN); it is never used as an
      address. Nothing synchronises with the host: CUDA-graph capturable.

    Returns the fp32 loss (shape () or, for 'none', logits' leading shape),
    and with ``return_lse=True`` also the fp32 per-row log-sum-exp (not
    differentiable). When ``logits`` requires grad, the forward also computes
    the gradient, reading the logits once or twice (float16 logits: in the
    backward, so that loss scaling cannot underflow it); ``inplace_backward=True``
    writes that gradient into the logits' own memory (saving a logits-sized
    tensor; the logits' values are gone afterwards and autograd's version
    check protects any other user of them).
    """
    if weight is None and softcap is None and not return_lse and type(logits) is Tensor:
        loss = _fast_loss(logits, target, ignore_index, reduction, label_smoothing, z_loss)
        if loss is not None:
            return loss
    _check(logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap)
    red = _REDUCTIONS[reduction]
    cap = 0.0 if softcap is None else float(softcap)
    ls, z = float(label_smoothing), float(z_loss)
    if _grad_enabled() and logits.requires_grad:
        loss, lse = _CrossEntropyFn.apply(logits, target, weight, ignore_index, red, ls, z, cap,
                                          bool(inplace_backward))
    elif _is_compiling() or type(logits) is not Tensor or not logits.is_cuda:
        loss, lse, _ = torch.ops.quack_cpp.cross_entropy_fwd(logits, target, weight, ignore_index, red, ls, z, cap,
                                                              False, None)
    else:
        loss, lse, _ = _launch(logits, target, weight, ignore_index, red, ls, z, cap, None,
                               want_lse=bool(return_lse))
    return (loss, lse) if return_lse else loss
