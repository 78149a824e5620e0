#!/usr/bin/env python3
"""Side-by-side cross-entropy benchmark (forward, and training forward + backward) on one GPU, in one process.

Per dtype of the logits (M, V), with int64 targets drawn uniformly from
[0, V) (none ignored), reduction "mean", no class weight, smoothing, z-loss
or softcap, measures in the same run as a 1 GiB device-to-device copy
(bytes read + written):

* fwd: the loss alone (under torch.no_grad, logits not requiring grad), M =
  round(2^28 / V) rows (default) for V = 1024 .. 262144. Model bytes: read
  the M*V logits (the targets and the loss are left out).
* train: loss = f(logits, target) then torch.autograd.grad(loss, logits) on
  a leaf that requires grad, as a training step runs them, M = 8192 rows
  (default) for V = 32000 .. 262144. Model bytes: read the logits once,
  write dlogits once (the two sweeps of a forward that also computes the
  gradient; a second read of the logits -- a separate backward, or
  quack_cpp's two-pass gradient from 32000 classes -- is not counted).

Implementations: quack_cpp.cross_entropy (its forward computes the gradient
when the logits require grad), in the training tables also
with inplace_backward=True ("quack_cpp in-place": the gradient overwrites
the logits); torch eager (F.cross_entropy on the logits as they are, no
upcast); torch.compile (of F.cross_entropy); Liger-Kernel
(liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction, its Triton kernel;
in training it always writes the gradient into the logits); QuACK
(quack.cross_entropy.cross_entropy, CuTe DSL; its backward is a second
kernel that re-reads the logits). The in-place ones get their own copy of
the logits in each training cell. The loss (against a float64 reference over
every row, computed in row slabs) and, in training, dlogits (sampled rows)
are checked on memory poisoned with NaN before each cell is timed. The notes
under each table give quack_cpp's speedup over torch.compile and Liger.

    . bench/peers.sh   # on the GPU machine: the peers carried in .whl/
    python3 bench/bench_cross_entropy.py --commit <sha> --out ... --json ...
"""

from __future__ import annotations

import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sidebyside import PEERS, TITLE, Run, markdown, write  # noqa: E402
from sidebyside import parse_args as sidebyside_args  # noqa: E402

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
SIZES = [1024, 4096, 16384, 32000, 50304, 65536, 128256, 151936, 262144]
TRAIN_SIZES = [32000, 50304, 128256, 151936, 262144]
TRAIN_M = 8192
ALL_PEERS = ["quack_cpp", "quack_cpp_inplace"] + PEERS[1:]
FWD_PEERS = [p for p in ALL_PEERS if p != "quack_cpp_inplace"]  # in-place only differs with a gradient
SPEEDUP_OVER = ("compile", "liger")
LOGIT_SCALE = 2.0  # logits ~ N(0, 2^2)
DEVICE = "cuda"
# Loss: |got - want| <= rtol * |want| (the mean over >= 1024 rows; torch
# eager and Liger return it in the logits' dtype).
LOSS_RTOL = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-4}
# dlogits: |got - want| <= rtol * (|want| + mean |want|) + atol. bf16 is
# loose because torch eager's backward takes exp of its bf16-rounded
# log-softmax: |log p| up to ~16 rounded to bf16 is up to 2^-5 off, so p up
# to ~3% off. fp16 atol: dlogits ~ 1 / (M*V) lie below fp16's smallest
# subnormal (2^-24) and flush to 0 or 2^-24.
GRAD_RTOL = {"bf16": 5e-2, "fp16": 1e-2, "fp32": 1e-4}
GRAD_ATOL = {"bf16": 1e-30, "fp16": 2.0 ** -24, "fp32": 1e-30}


def ints(text):
    return [int(s) for s in text.split(",") if s.strip()]


def parse_args(argv):
    def extra(p):
        p.add_argument("--train-sizes", default=",".join(map(str, TRAIN_SIZES)),
                       help="V of the training tables ('' for none); --sizes: V of the forward tables")
        p.add_argument("--train-m", type=int, default=TRAIN_M, help="rows of the training tables")
    return sidebyside_args(argv, __doc__, SIZES, peers=ALL_PEERS, extra=extra)


# --------------------------------------------------------------------------
# Implementations: (loss, inplace, groups). loss(logits, target) returns the
# mean loss (a scalar tensor), differentiable when the logits require grad;
# inplace: its training overwrites the logits; groups: the tables it is in.
# --------------------------------------------------------------------------

def make_impl(key, torch):
    import torch.nn.functional as F
    both = ("fwd", "train")
    if key in ("quack_cpp", "quack_cpp_inplace"):
        import quack_cpp
        if key == "quack_cpp":
            return (lambda x, t: quack_cpp.cross_entropy(x, t)), False, both
        return (lambda x, t: quack_cpp.cross_entropy(x, t, inplace_backward=True)), True, ("train",)
    if key == "torch":
        return (lambda x, t: F.cross_entropy(x, t)), False, both
    if key == "compile":
        # One function: dynamo keeps a graph per shape and grad mode (the
        # training one with its AOTAutograd backward).
        return torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False), False, both
    if key == "liger":
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction as L

        # (input, target, weight, ignore_index, lse_square_scale, label_smoothing,
        #  reduction, softcap, return_z_loss, return_token_accuracy, return_predicted_tokens)
        # -> (loss, z_loss, token_accuracy, predicted_tokens)
        return (lambda x, t: L.apply(x, t, None, -100, 0.0, 0.0, "mean", None, False, False, False)[0]), True, both
    if key == "quack":
        import importlib
        q = importlib.import_module("quack.cross_entropy")  # the package exports a function named cross_entropy
        return (lambda x, t: q.cross_entropy(x, t, reduction="mean")), False, both
    raise ValueError(key)


def measure_shape(bench, makers, dtname, m, v, group):
    """The cells of one (dtype, V, M) of one table: group "fwd" or "train"."""
    torch = bench.torch
    dtype = getattr(torch, DTYPES[dtname])
    es = torch.finfo(dtype).bits // 8
    x = torch.randn(m, v, device=DEVICE, dtype=dtype).mul_(LOGIT_SCALE)
    t = torch.randint(0, v, (m,), device=DEVICE)
    # float64 reference: the mean loss over every row (in slabs of 16M elements).
    total = torch.zeros((), dtype=torch.float64, device=DEVICE)
    slab = max(1, (1 << 24) // v)  # rows
    for r0 in range(0, m, slab):
        xs, ts = x[r0:r0 + slab].double(), t[r0:r0 + slab]
        total += (torch.logsumexp(xs, -1) - xs.gather(1, ts[:, None]).squeeze(1)).sum()
        del xs
    want_loss = float(total) / m

    def check_loss(loss):
        if loss.numel() != 1:
            return False, f"loss of shape {tuple(loss.shape)}", math.inf
        got = float(loss.detach().double())
        if not math.isfinite(got):
            return False, "non-finite loss (poisoned output not written?)", math.inf
        r = abs(got - want_loss) / (LOSS_RTOL[dtname] * abs(want_loss))
        return r <= 1.0, None, r

    def check_fwd(loss):
        ok, bad, r = check_loss(loss)
        return ok, bad or f"max err / bound: loss {r:.3f}"

    if group == "train":
        # float64 reference of dlogits on sampled rows: (softmax - onehot) / M.
        g = torch.Generator(device="cpu").manual_seed(v)
        rows = torch.unique(torch.cat([torch.tensor([0, m - 1]), torch.randint(0, m, (30,), generator=g)]))
        rows = rows.to(DEVICE)
        want_g = torch.softmax(x.index_select(0, rows).double(), -1)
        want_g[torch.arange(len(rows), device=DEVICE), t.index_select(0, rows)] -= 1.0
        want_g /= m
        bound_g = GRAD_RTOL[dtname] * (want_g.abs() + want_g.abs().mean()) + GRAD_ATOL[dtname]

    def check_train(out):
        loss, dx = out
        ok, bad, rl = check_loss(loss)
        if bad:
            return False, bad
        if dx.dtype != dtype or tuple(dx.shape) != (m, v):
            return False, f"dlogits {dx.dtype} {tuple(dx.shape)}"
        got = dx.detach().index_select(0, rows).double()
        if not bool(torch.isfinite(got).all()):
            return False, "non-finite dlogits (poisoned output not written?)"
        rg = float(((got - want_g).abs() / bound_g).max())
        return ok and rg <= 1.0, f"max err / bound: loss {rl:.3f}, dlogits {rg:.3f}"

    for key, (loss_fn, inplace, groups) in makers.items():
        if group not in groups:
            continue
        if group == "fwd":
            def directions(loss_fn=loss_fn, x=x, t=t):
                def fwd():
                    with torch.no_grad():
                        return loss_fn(x, t)
                return [("fwd", fwd, check_fwd, m * v * es, m, torch.float32)]
        else:
            def directions(loss_fn=loss_fn, inplace=inplace, x=x, t=t):
                # A leaf that requires grad; its own copy where the training overwrites it.
                xg = (x.detach().clone() if inplace else x.detach()).requires_grad_()

                def train():
                    loss = loss_fn(xg, t)
                    (dx,) = torch.autograd.grad(loss, xg)
                    return loss.detach(), dx
                return [("train", train, check_train, 2 * m * v * es, m * v, dtype)]
        bench.cell(dtname, v, m, key, directions, group=group)
    del x, t
    torch.cuda.empty_cache()


def run(args):
    import torch
    torch.manual_seed(0)
    bench = Run(torch, args)
    makers = bench.makers(make_impl)
    for dtname in args.dtypes.split(","):
        for v in ints(args.sizes):
            measure_shape(bench, makers, dtname, max(1, round(args.total / v)), v, "fwd")
        for v in ints(args.train_sizes):
            measure_shape(bench, makers, dtname, args.train_m, v, "train")
    return bench.finish()


def speedups(d, dtname, rows):
    """Notes under a table: quack_cpp's time against torch.compile's and Liger's."""
    lines = []
    for ours in ("quack_cpp", "quack_cpp_inplace"):
        parts = []
        for n, _, row in rows:
            if ours not in row or d not in row[ours]:
                continue
            us = row[ours][d]["us"]
            vs = [f"{row[p][d]['us'] / us:.2f}x over {TITLE[p]}" for p in SPEEDUP_OVER if p in row and d in row[p]]
            if vs:
                parts.append(f"N = {n}: " + ", ".join(vs))
        if parts:
            lines.append(f"Speedup of {TITLE[ours]} (the peer's time / its time): " + "; ".join(parts) + ".")
    return lines


def main(argv=None):
    args = parse_args(argv)
    rec = run(args)
    peers = args.peers.split(",")
    text = markdown(rec, peers, "Cross-entropy forward and training step, side by side",
                    [("fwd", "Forward (loss only, reduction mean)", "fwd", FWD_PEERS),
                     ("train", f"Training forward + backward (loss and dlogits, M = {args.train_m})", "train", None)],
                    "N = V (classes); fwd bytes = read the logits; train bytes = read the logits + write dlogits",
                    shape_note=f"forward: M = round({args.total} / V) rows; training: M = {args.train_m} rows; "
                               f"logits ~ N(0, {LOGIT_SCALE:g}^2), targets uniform, reduction mean",
                    notes=speedups)
    return write(rec, text, args)


if __name__ == "__main__":
    sys.exit(main())
