"""quack_cpp: speed-of-light memory-bound row kernels for NVIDIA Hopper.

    import quack_cpp
    y = quack_cpp.rmsnorm(x, weight, eps=1e-6)
    y, h = quack_cpp.rmsnorm(x, weight, residual=h, prenorm=True)
    y = quack_cpp.layernorm(x, weight, bias)  # same options; autograd
    p = quack_cpp.softmax(logits)            # also log_softmax; autograd
    loss = quack_cpp.cross_entropy(logits, target)  # fwd + grad, one call
    norm = quack_cpp.RMSNorm(4096, device="cuda", dtype=torch.bfloat16)
    ln = quack_cpp.LayerNorm(4096, device="cuda")   # torch.nn.LayerNorm drop-in
    loss = quack_cpp.distributed.vocab_parallel_cross_entropy(local_logits, target)  # vocab shards

Ops are registered with torch.library (``torch.ops.quack_cpp.*``), so
torch.compile(fullgraph=True) treats each as one opaque op; eager calls go
straight to the kernel. Kernels run on the current CUDA stream and allocate
through torch's caching allocator (CUDA-graph capturable).
"""
import torch  # first: loads the CUDA runtime (libcudart) that _C links against

from . import _C, distributed
from ._cross_entropy import cross_entropy
from ._layernorm import layernorm
from ._rmsnorm import rmsnorm
from ._softmax import log_softmax, softmax
from .nn import CrossEntropyLoss, LayerNorm, RMSNorm

__version__ = _C.version()


def version() -> str:
    """The version of the C++ library this package was built with."""
    return _C.version()


__all__ = ["CrossEntropyLoss", "LayerNorm", "RMSNorm", "cross_entropy", "distributed", "layernorm", "log_softmax",
           "rmsnorm", "softmax", "version", "__version__"]
