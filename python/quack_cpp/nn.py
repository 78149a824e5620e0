"""nn.Module drop-ins for torch.nn layers, backed by quack_cpp's kernels."""
import numbers
from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Parameter, init

from ._cross_entropy import cross_entropy
from ._layernorm import layernorm
from ._rmsnorm import rmsnorm

# torch.nn.RMSNorm's eps=None: torch documents finfo(x.dtype).eps but uses
# the eps of the fp32 compute type for float16/bfloat16/float32 inputs
# (checked: torch 2.11, F.rms_norm(x_bf16, (N,)) == F.rms_norm(x_bf16, (N,),
# eps=finfo(float32).eps)). Mirror what it computes.
_DEFAULT_EPS = torch.finfo(torch.float32).eps


class _LastDimNorm(torch.nn.Module):
    """What quack_cpp's norm modules share: torch.nn's constructor arguments,
    parameters (weight ones, bias zeros), state_dict keys and the shape check
    of x; only the last dimension is normalised. Subclasses give the op."""

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]
    normalized_shape: Tuple[int, ...]
    elementwise_affine: bool
    _name = ""
    _eps_may_be_none = False

    def __init__(self, normalized_shape, eps, elementwise_affine: bool, bias: bool, device, dtype) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        normalized_shape = tuple(normalized_shape)
        if len(normalized_shape) != 1:
            raise ValueError(
                f"{self._name}: normalized_shape must be an int or a 1-element sequence "
                f"(only the last dimension is normalised), got {normalized_shape}")
        if normalized_shape[0] < 1:
            raise ValueError(f"{self._name}: normalized_shape must be >= 1, got {normalized_shape}")
        if (not self._eps_may_be_none) if eps is None else not eps >= 0:
            raise ValueError(f"{self._name}: eps must be {'None or ' if self._eps_may_be_none else ''}>= 0, "
                             f"got {eps}")
        self.normalized_shape = normalized_shape
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(torch.empty(normalized_shape, **factory_kwargs))
            if bias:
                self.bias = Parameter(torch.empty(normalized_shape, **factory_kwargs))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def _check_x(self, x) -> None:
        n = self.normalized_shape[0]
        if isinstance(x, Tensor) and x.dim() >= 1 and x.shape[-1] != n:
            raise ValueError(f"{self._name}: x's last dimension must be normalized_shape = {n}, "
                             f"got x of shape {tuple(x.shape)}")


class RMSNorm(_LastDimNorm):
    """Drop-in for ``torch.nn.RMSNorm`` over the last dimension.

    Same constructor arguments, attributes and state_dict keys (``weight``,
    ``bias`` when ``bias=True``), plus an optional bias (LayerNorm's
    convention: created only with ``elementwise_affine=True``). ``eps=None``
    uses what torch.nn.RMSNorm uses for float16/bfloat16/float32 inputs,
    ``torch.finfo(torch.float32).eps``.

    Only the last dimension is normalised: ``normalized_shape`` is an int or a
    1-element sequence. The output has x's dtype whatever the weight's dtype.
    """

    eps: Optional[float]
    _name = "quack_cpp.RMSNorm"
    _eps_may_be_none = True

    def __init__(self, normalized_shape: Union[int, Tuple[int, ...], torch.Size],
                 eps: Optional[float] = None, elementwise_affine: bool = True, bias: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        self._check_x(x)
        return rmsnorm(x, self.weight, self.bias, eps=_DEFAULT_EPS if self.eps is None else self.eps)

    def extra_repr(self) -> str:
        s = f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        if self.bias is not None:
            s += ", bias=True"
        return s


class LayerNorm(_LastDimNorm):
    """Drop-in for ``torch.nn.LayerNorm`` normalising the last dimension.

    Same constructor arguments (``normalized_shape``, ``eps=1e-5``,
    ``elementwise_affine=True``, ``bias=True``, ``device``, ``dtype``),
    attributes, initialisation (weight ones, bias zeros) and state_dict keys.
    Only the last dimension is normalised: ``normalized_shape`` is an int or a
    1-element sequence. The output has x's dtype whatever the parameters'
    dtype (fp32 parameters under bf16 activations need no cast).
    """

    eps: float
    _name = "quack_cpp.LayerNorm"

    def __init__(self, normalized_shape: Union[int, Tuple[int, ...], torch.Size], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        self._check_x(x)
        return layernorm(x, self.weight, self.bias, eps=float(self.eps))

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class CrossEntropyLoss(torch.nn.Module):
    """Drop-in for ``torch.nn.CrossEntropyLoss`` (same constructor arguments,
    including the deprecated size_average / reduce), plus ``z_loss``,
    ``softcap`` and ``inplace_backward`` (see :func:`quack_cpp.cross_entropy`).
    Classes are the input's last dimension; target holds class indices."""

    __constants__ = ["ignore_index", "reduction", "label_smoothing", "z_loss", "softcap", "inplace_backward"]

    def __init__(self, weight: Optional[Tensor] = None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0, z_loss: float = 0.0,
                 softcap: Optional[float] = None, inplace_backward: bool = False) -> None:
        super().__init__()
        if size_average is not None or reduce is not None:
            from torch.nn import _reduction
            reduction = _reduction.legacy_get_string(size_average, reduce, emit_warning=True)
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f"quack_cpp.CrossEntropyLoss: reduction must be 'none', 'mean' or 'sum', "
                             f"got {reduction!r}")
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.z_loss = z_loss
        self.softcap = softcap
        self.inplace_backward = inplace_backward

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return cross_entropy(input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing,
                             self.z_loss, self.softcap, False, self.inplace_backward)

    def extra_repr(self) -> str:
        s = f"ignore_index={self.ignore_index}, reduction={self.reduction!r}"
        if self.label_smoothing:
            s += f", label_smoothing={self.label_smoothing}"
        if self.z_loss:
            s += f", z_loss={self.z_loss}"
        if self.softcap is not None:
            s += f", softcap={self.softcap}"
        return s
