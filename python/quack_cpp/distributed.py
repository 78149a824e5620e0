"""Vocabulary-parallel cross-entropy across GPUs through torch.distributed.

When a model's vocabulary is sharded over tensor-parallel ranks (Megatron
style), rank r holds logits[..., v_start_r : v_start_r + V_r] and the full
logits exist nowhere. :func:`vocab_parallel_cross_entropy` computes the loss
of the whole vocabulary from the shards:

1. each rank reads its shard once and writes 16 bytes a row -- the shard's
   max m, sum of exp(x' - m), sum of x' (of w_c x'_c with class weights and
   label smoothing) and x'_t when the row's target lies in the shard
   (``quack::CrossEntropyArgs::shard_stats``);
2. one collective: an all-gather of those statistics (world x rows x 16
   bytes); every rank combines them in the same fixed order (lse = M + log
   sum_r s_r exp(m_r - M)) in one launch (``combine_stats``), so every rank
   holds the same loss and lse, bit for bit;
3. the backward writes each rank's slice of dlogits from its shard and the
   whole row's lse (``lse_in``), with no further communication.

Semantics are those of :func:`quack_cpp.cross_entropy` on the gathered
logits (class weights, ignore_index, reductions, label smoothing, z_loss,
softcap; a target outside [0, V) makes its row NaN). No host
synchronisation after the first call for a (group, shard width): the shards'
offsets are exchanged once and cached (pass ``vocab_start`` and
``vocab_size`` to skip even that, e.g. before CUDA-graph capture).
"""

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from ._cross_entropy import _NAME as _CE_NAME
from ._cross_entropy import _REDUCTIONS, _check, _run
from ._common import _DTYPE_CODE, _rows_view

_NAME = "quack_cpp.distributed.vocab_parallel_cross_entropy"

# (id(group), world rank, local width) -> (vocab_start, vocab_size)
_OFFSETS: Dict[Tuple[int, int, int], Tuple[int, int]] = {}


def _dist():
    import torch.distributed as dist  # imported on use: quack_cpp itself does not need it
    return dist


def _shard_range(width: int, group, device) -> Tuple[int, int]:
    """(vocab_start, vocab_size) of this rank's shard: an all-gather of the
    shards' widths in rank order, once per (group, width)."""
    dist = _dist()
    rank = dist.get_rank(group)
    key = (id(group), rank, width)
    if key not in _OFFSETS:
        world = dist.get_world_size(group)
        mine = torch.tensor([width], device=device, dtype=torch.int64)
        widths = torch.empty(world, device=device, dtype=torch.int64)
        dist.all_gather_into_tensor(widths, mine, group=group)
        w = widths.tolist()  # the one host synchronisation, cached
        _OFFSETS[key] = (sum(w[:rank]), sum(w))
    return _OFFSETS[key]


def _call(x: Tensor, xs: int, rows: int, t: Tensor, weight: Optional[Tensor], ignore_index: int, reduction: int,
          label_smoothing: float, z_loss: float, softcap: float, start: int, vocab: int, stats: Optional[Tensor],
          lse_in: Optional[Tensor], dx: Optional[Tensor], dloss: Optional[Tensor]) -> None:
    n = x.shape[-1]
    ts = t.stride(0) if t.numel() > 0 else 1
    args = (rows, n, x.data_ptr(), _DTYPE_CODE[x.dtype], xs, t.data_ptr(), t.dtype == torch.int64, ts,
            weight.data_ptr() if weight is not None else 0, ignore_index, reduction, float(label_smoothing),
            float(z_loss), float(softcap), 0, 0, dx.data_ptr() if dx is not None else 0, n if dx is not None else 0,
            dloss.data_ptr() if dloss is not None else 0)
    _run(x, args, class_offset=start, num_classes=vocab, stats_ptr=stats.data_ptr() if stats is not None else 0,
         lse_in_ptr=lse_in.data_ptr() if lse_in is not None else 0)


def _call_combine(gathered: Tensor, world: int, rows: int, t: Tensor, weight: Optional[Tensor], ignore_index: int,
                  reduction: int, label_smoothing: float, z_loss: float, vocab: int, loss: Tensor,
                  lse: Tensor) -> None:
    """loss and lse of the whole vocabulary from the shards' statistics,
    gathered [world * rows, 4] (shard-major): the library's combine mode, one
    launch (plus the reduction's), the shards merged in rank order."""
    ts = t.stride(0) if t.numel() > 0 else 1
    args = (rows, vocab, 0, _DTYPE_CODE[torch.float32], 0, t.data_ptr(), t.dtype == torch.int64, ts,
            weight.data_ptr() if weight is not None else 0, ignore_index, reduction, float(label_smoothing),
            float(z_loss), 0.0, loss.data_ptr(), lse.data_ptr(), 0, 0, 0)
    _run(gathered, args, combine_ptr=gathered.data_ptr(), combine_shards=world)


class _VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local_logits, target, weight, group, ignore_index, reduction, label_smoothing, z_loss, softcap,
                start, vocab):
        n = local_logits.shape[-1]
        x, xs = _rows_view(local_logits, n)
        rows = x.numel() // n
        t = target.reshape(-1)
        w = weight.to(torch.float32).contiguous() if weight is not None else None
        stats = torch.empty((rows, 4), device=x.device, dtype=torch.float32)
        _call(x, xs, rows, t, w, ignore_index, reduction, label_smoothing, z_loss, softcap, start, vocab, stats,
              None, None, None)
        dist = _dist()
        world = dist.get_world_size(group)
        # The ranks' statistics concatenated along rows (the layout every
        # backend accepts), seen as [world, rows, 4].
        gathered = torch.empty((world * rows, 4), device=x.device, dtype=torch.float32)
        dist.all_gather_into_tensor(gathered, stats, group=group)
        loss = torch.empty((rows,) if reduction == 0 else (), device=x.device, dtype=torch.float32)
        lse = torch.empty((rows,), device=x.device, dtype=torch.float32)
        _call_combine(gathered, world, rows, t, w, ignore_index, reduction, label_smoothing, z_loss, vocab, loss, lse)
        if reduction == 0:
            loss = loss.view(target.shape)
        ctx.save_for_backward(local_logits, t, w, lse)
        ctx.args = (ignore_index, reduction, label_smoothing, z_loss, softcap, start, vocab)
        lse_out = lse.view(target.shape)
        ctx.mark_non_differentiable(lse_out)
        return loss, lse_out

    @staticmethod
    def backward(ctx, dloss, _dlse):
        local_logits, t, w, lse = ctx.saved_tensors
        ignore_index, reduction, label_smoothing, z_loss, softcap, start, vocab = ctx.args
        n = local_logits.shape[-1]
        x, xs = _rows_view(local_logits, n)
        rows = x.numel() // n
        dx = torch.empty((rows, n), device=x.device, dtype=x.dtype)
        g = dloss.to(torch.float32).reshape(-1).contiguous()
        _call(x, xs, rows, t, w, ignore_index, reduction, label_smoothing, z_loss, softcap, start, vocab, None,
              lse.contiguous(), dx, g)
        return dx.view(local_logits.shape), None, None, None, None, None, None, None, None, None, None


def vocab_parallel_cross_entropy(local_logits: Tensor, target: Tensor, group=None, ignore_index: int = -100,
                                 reduction: str = "mean", label_smoothing: float = 0.0, z_loss: float = 0.0,
                                 softcap: Optional[float] = None, weight: Optional[Tensor] = None,
                                 return_lse: bool = False, vocab_start: Optional[int] = None,
                                 vocab_size: Optional[int] = None):
    """Cross-entropy over a vocabulary sharded across ``group`` (default: the
    world): ``local_logits`` (..., V_r) holds this rank's classes
    [vocab_start, vocab_start + V_r) in rank order; ``target`` (...) holds
    indices into the whole vocabulary and is the same on every rank, as is
    ``weight`` (the whole vocabulary's class weights, [V]). Returns the fp32
    loss -- identical on every rank, equal to :func:`quack_cpp.cross_entropy`
    on the gathered logits -- and with ``return_lse`` the whole rows' lse.
    The backward writes this rank's slice of the gradient, no communication.
    ``vocab_start`` / ``vocab_size`` (both or neither) skip the one-time
    exchange of the shards' widths."""
    try:
        _check(local_logits, target, None, ignore_index, reduction, label_smoothing, z_loss, softcap)
    except (TypeError, ValueError) as e:
        raise type(e)(str(e).replace(_CE_NAME, _NAME, 1)) from None
    if (vocab_start is None) != (vocab_size is None):
        raise ValueError(f"{_NAME}: vocab_start and vocab_size go together (both or neither)")
    n = local_logits.shape[-1]
    if vocab_start is None:
        vocab_start, vocab_size = _shard_range(n, group, local_logits.device)
    if not (0 <= vocab_start and vocab_start + n <= vocab_size):
        raise ValueError(f"{_NAME}: the shard [{vocab_start}, {vocab_start + n}) is not inside the vocabulary "
                         f"[0, {vocab_size})")
    if weight is not None:
        if not isinstance(weight, Tensor) or not weight.is_floating_point():
            raise TypeError(f"{_NAME}: weight must be a floating-point torch.Tensor or None")
        if tuple(weight.shape) != (vocab_size,):
            raise ValueError(f"{_NAME}: weight must have shape ({vocab_size},) (the whole vocabulary), "
                             f"got {tuple(weight.shape)}")
        if weight.device != local_logits.device:
            raise ValueError(f"{_NAME}: weight must be on local_logits' device {local_logits.device}, "
                             f"got {weight.device}")
    red = _REDUCTIONS[reduction]
    loss, lse = _VocabParallelCE.apply(local_logits, target, weight, group, ignore_index, red,
                                       float(label_smoothing), float(z_loss),
                                       float(softcap) if softcap is not None else 0.0, int(vocab_start),
                                       int(vocab_size))
    return (loss, lse) if return_lse else loss
