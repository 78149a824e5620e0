"""LayerNorm for PyTorch: the ``quack_cpp::layernorm_fwd`` /
``quack_cpp::layernorm_bwd`` torch.library ops (with autograd) and the
public ``layernorm``. Everything but the ops' signatures is RMSNorm's
(_rmsnorm.py): the checks, the launches and the backward, in their centred
mode -- the C++ library runs the same kernels.

The forward op always returns four tensors, ``(out, residual_out, mean,
rstd)``; an output that was not asked for is an empty placeholder of shape
(0,).
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from ._rmsnorm import (_backward, _check, _fast_fwd, _launch, _launch_bwd, _norm_fwd, _resolve_dtypes,
                       _rmsnorm_bwd_fake, _setup_context)

_NAME = "quack_cpp.layernorm"


@torch.library.custom_op("quack_cpp::layernorm_fwd", mutates_args=())
def _layernorm_fwd_op(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                      residual: Optional[Tensor], out_dtype: Optional[torch.dtype],
                      residual_dtype: Optional[torch.dtype], eps: float, weight_offset: float,
                      prenorm: bool, return_mean_rstd: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """quack_cpp.layernorm as one op: (out, residual_out, mean, rstd); an
    output not asked for (prenorm / return_mean_rstd False) is an empty (0,)
    tensor."""
    _check(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset, prenorm, _NAME)
    out_dtype, residual_dtype = _resolve_dtypes(x, residual, out_dtype, residual_dtype)
    out, res_out, rstd, mean = _launch(x, weight, bias, residual, out_dtype, residual_dtype, eps,
                                       weight_offset, prenorm, return_mean_rstd, centre=True)
    if res_out is None:
        res_out = x.new_empty((0,), dtype=residual_dtype)
    if rstd is None:
        rstd = x.new_empty((0,), dtype=torch.float32)
        mean = x.new_empty((0,), dtype=torch.float32)
    return out, res_out, mean, rstd


@_layernorm_fwd_op.register_fake
def _layernorm_fwd_fake(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset,
                        prenorm, return_mean_rstd):
    _check(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset, prenorm, _NAME)
    out_dtype, residual_dtype = _resolve_dtypes(x, residual, out_dtype, residual_dtype)
    shape = x.shape
    out = x.new_empty(shape, dtype=out_dtype)
    res_out = x.new_empty(shape if prenorm else (0,), dtype=residual_dtype)
    stats = shape[:-1] if return_mean_rstd else (0,)
    return out, res_out, x.new_empty(stats, dtype=torch.float32), x.new_empty(stats, dtype=torch.float32)


@torch.library.custom_op("quack_cpp::layernorm_bwd", mutates_args=())
def _layernorm_bwd_op(grad_out: Tensor, h: Tensor, rstd: Tensor, weight: Optional[Tensor],
                      grad_residual_out: Optional[Tensor], weight_offset: float, x_dtype: torch.dtype,
                      residual_dtype: Optional[torch.dtype], need_dweight: bool,
                      bias_dtype: Optional[torch.dtype], mean: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """LayerNorm backward as one op: (dx, dresidual, dweight, dbias); an output
    not asked for is an empty (0,) placeholder."""
    dx, dres, dw, db = _launch_bwd(grad_out, h, rstd, weight, grad_residual_out, weight_offset, x_dtype,
                                   residual_dtype, need_dweight, bias_dtype, mean)
    return tuple(h.new_empty((0,)) if t is None else t for t in (dx, dres, dw, db))


@_layernorm_bwd_op.register_fake
def _layernorm_bwd_fake(grad_out, h, rstd, weight, grad_residual_out, weight_offset, x_dtype, residual_dtype,
                        need_dweight, bias_dtype, mean):
    return _rmsnorm_bwd_fake(grad_out, h, rstd, weight, grad_residual_out, weight_offset, x_dtype,
                             residual_dtype, need_dweight, bias_dtype)


def _setup_context_ln(ctx, inputs, output):
    _setup_context(ctx, inputs, output, mean=output[2])


_layernorm_fwd_op.register_autograd(_backward, setup_context=_setup_context_ln)


def layernorm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
              residual: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None,
              residual_dtype: Optional[torch.dtype] = None, eps: float = 1e-5,
              prenorm: bool = False, return_mean_rstd: bool = False, weight_offset: float = 0.0):
    """LayerNorm over the last dimension of ``x``, with optional residual add.

    With N = x.shape[-1] and fp32 arithmetic throughout::

        h    = x + residual                       (x alone without residual)
        mean = mean(h, dim=-1)
        rstd = 1 / sqrt(mean((h - mean) ** 2, dim=-1) + eps)
        y    = (h - mean) * rstd * (weight + weight_offset) + bias

    The variance is taken about the mean from the values held on chip (no
    ``mean(h^2) - mean^2`` cancellation). An absent weight is a scale of
    exactly 1; an absent bias adds nothing. weight_offset = 1 gives
    Megatron's LayerNorm1P (``1 + w``).

    Args: as :func:`quack_cpp.rmsnorm` (x of any leading shape and any of
    float32/float16/bfloat16, strided rows, weight / bias / residual in any
    of the three dtypes, out_dtype, residual_dtype with prenorm), and
        eps: >= 0, added to the variance (torch.nn.LayerNorm's 1e-5).
        return_mean_rstd: also return mean and rstd, fp32 of shape
            x.shape[:-1].

    Returns:
        ``y``; ``(y, residual_out)`` with prenorm; ``mean, rstd`` appended
        with return_mean_rstd.

    Raises: as :func:`quack_cpp.rmsnorm`, with messages naming
    ``quack_cpp.layernorm`` and the argument.

    Autograd: gradients for x, weight, bias and residual (and through
    residual_out with prenorm); dweight and dbias accumulated in fp32,
    bit-identical run after run. mean and rstd are not differentiable.
    """
    if (residual is None and out_dtype is None and residual_dtype is None and not prenorm and not return_mean_rstd
            and type(x) is Tensor):
        out = _fast_fwd(x, weight, bias, eps, weight_offset, True)
        if out is not None:
            return out
    _check(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset, prenorm, _NAME)
    out, res_out, rstd, mean = _norm_fwd(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset,
                                         prenorm, return_mean_rstd, centre=True)
    if prenorm:
        return (out, res_out, mean, rstd) if return_mean_rstd else (out, res_out)
    return (out, mean, rstd) if return_mean_rstd else out
