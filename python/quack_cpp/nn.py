"""nn.Module drop-ins for torch.nn layers, backed by quack_cpp's kernels."""
import numbers
from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Parameter, init

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
