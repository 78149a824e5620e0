#!/usr/bin/env python3
"""Side-by-side softmax benchmark, forward and backward, on one GPU, in one process.

Measures, in the same run: the copy bandwidth (a 1 GiB device-to-device copy,
bytes read + written), then for M*N = 2^28 elements (default) and N in
256 .. 1M, per dtype, the median CUDA-event time of one call of each
implementation's forward (reads x, writes y) and backward (reads y and dy,
writes dx), as GB/s of those model bytes and % of the copy bandwidth.

Implementations: quack_cpp (softmax forward; backward through the launch its
autograd uses), torch eager (torch.softmax, torch._softmax_backward_data),
torch.compile (of torch.softmax, and of the backward formula in fp32),
Liger-Kernel (Triton) and QuACK (CuTe DSL). With --log, log-softmax instead:
quack_cpp.log_softmax, torch.log_softmax / torch._log_softmax_backward_data,
torch.compile of both; Liger and QuACK have no log-softmax (n/a, said so). Every implementation is checked
on a sample of rows against float64 on fresh memory poisoned with NaN before
it is timed; a wrong one is timed but flagged, one that cannot run is n/a
with its reason under the tables.

    . bench/peers.sh   # on the GPU machine: the peers carried in .whl/
    python3 bench/bench_softmax.py --commit <sha> --out bench/results/<date>-softmax.md --json ...
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sidebyside import Run, markdown, write  # noqa: E402
from sidebyside import parse_args as sidebyside_args  # noqa: E402

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
SIZES = [256, 1024, 4096, 16384, 65536, 262144, 1048576]
# |got - want| <= rtol * (|want| + cond) + atol: cond is the conditioning of
# the formula (tests/python/test_softmax.py grad_cond); forward cond = 1/N.
RTOL = {"bf16": 1.6e-2, "fp16": 2e-3, "fp32": 2e-5}


def parse_args(argv):
    def extra(p):
        p.add_argument("--log", action="store_true", help="log-softmax instead of softmax")
    return sidebyside_args(argv, __doc__, SIZES, extra=extra)


# --------------------------------------------------------------------------
# Implementations: make(x, y, dy) -> (forward callable, backward callable).
# y is a correct softmax of x (float64 reference rounded), dy random.
# --------------------------------------------------------------------------

def make_impl(key, torch, log=False):
    """log: log-softmax (y = log_softmax(x), dx = dy - exp(y) sum(dy))."""
    if key == "quack_cpp":
        import quack_cpp
        from quack_cpp import _softmax
        op = quack_cpp.log_softmax if log else quack_cpp.softmax
        return lambda x, y, dy: (lambda: op(x), lambda: _softmax._launch_bwd(y, dy, log))
    if key == "torch":
        op = torch.log_softmax if log else torch.softmax
        back = torch._log_softmax_backward_data if log else torch._softmax_backward_data
        return lambda x, y, dy: (lambda: op(x, -1), lambda: back(dy, y, -1, x.dtype))
    if key == "compile":
        op = torch.log_softmax if log else torch.softmax
        fwd = torch.compile(lambda x: op(x, -1), dynamic=False)

        def bwd_formula(y, dy):
            yf, dyf = y.float(), dy.float()
            if log:
                return (dyf - yf.exp() * dyf.sum(-1, keepdim=True)).to(y.dtype)
            return (yf * (dyf - (dyf * yf).sum(-1, keepdim=True))).to(y.dtype)
        bwd = torch.compile(bwd_formula, dynamic=False)
        return lambda x, y, dy: (lambda: fwd(x), lambda: bwd(y, dy))
    if log and key in ("liger", "quack"):
        raise RuntimeError("no log-softmax in its API")
    if key == "liger":
        from liger_kernel.ops import softmax as lsm

        def make(x, y, dy):
            _, bs, nw, multi = lsm._softmax_forward(x)
            return (lambda: lsm._softmax_forward(x)[0], lambda: lsm._softmax_backward(dy, y, bs, nw, multi))
        return make
    if key == "quack":
        import importlib
        qsm = importlib.import_module("quack.softmax")  # the package exports a function named softmax
        return lambda x, y, dy: (lambda: qsm.softmax_fwd(x), lambda: qsm.softmax_bwd(dy, y))
    raise ValueError(key)


def check(torch, got, want, cond, dtname, rows):
    """Sampled rows of got against the float64 want: (ok, detail)."""
    g, w, c = got.index_select(0, rows).double(), want.index_select(0, rows), cond.index_select(0, rows)
    err = (g - w).abs()
    bound = RTOL[dtname] * (w.abs() + c) + (2.0 ** -24 if dtname == "fp16" else 1e-30)
    if not bool(torch.isfinite(g).all()):
        return False, "non-finite values (poisoned output not written?)"
    ratio = float((err / bound).max())
    return ratio <= 1.0, f"max err / bound {ratio:.3f}"


def references(torch, x, dy, rows, log):
    """(y, want_y, cond_fwd, want_dx, cond_bwd): y the saved output the
    backward reads (the op in fp32, rounded to x's dtype); the float64
    forward of x and backward from (y, dy) on `rows`, each with the
    magnitude its rounding scales with (check's cond)."""
    xs = x.index_select(0, rows).double()
    n = x.shape[-1]
    if log:
        # y = (x - max) - ln s: its error is relative to those two terms;
        # dx = dy - exp(y) sum(dy): to its terms, y's own rounding carried
        # through exp.
        want_y = torch.log_softmax(xs, -1)
        y = torch.log_softmax(x.float(), -1).to(x.dtype)
        ys, dys = y.index_select(0, rows).double(), dy.index_select(0, rows).double()
        want_dx = dys - ys.exp() * dys.sum(-1, keepdim=True)
        cond_bwd = dys.abs() + ys.exp() * dys.abs().sum(-1, keepdim=True) * (1.0 + ys.abs())
        centred = xs - xs.amax(-1, keepdim=True)
        cond_fwd = centred.abs() + (centred - want_y).abs()
    else:
        want_y = torch.softmax(xs, -1)
        y = torch.softmax(x.float(), -1).to(x.dtype)
        ys, dys = y.index_select(0, rows).double(), dy.index_select(0, rows).double()
        want_dx = ys * (dys - (dys * ys).sum(-1, keepdim=True))
        cond_bwd = ys.abs() * (dys.abs() + (dys * ys).abs().sum(-1, keepdim=True))
        cond_fwd = torch.full_like(want_y, 1.0 / n)
    return y, want_y, cond_fwd, want_dx, cond_bwd


def run(args):
    import torch
    torch.manual_seed(0)
    bench = Run(torch, args)
    makers = bench.makers(lambda key, torch: make_impl(key, torch, args.log))
    for dtname in args.dtypes.split(","):
        dtype = getattr(torch, DTYPES[dtname])
        es = torch.finfo(dtype).bits // 8
        for n in map(int, args.sizes.split(",")):
            m = max(1, args.total // n)
            x = (torch.randn(m, n, device="cuda") * 2).to(dtype)
            dy = torch.randn(m, n, device="cuda").to(dtype)
            g = torch.Generator(device="cpu").manual_seed(n)
            rows = torch.unique(torch.cat([torch.tensor([0, m - 1]), torch.randint(0, m, (30,), generator=g)]))
            rows = rows.to("cuda")
            y, want_y, cond_fwd, want_dx, cond_bwd = references(torch, x, dy, rows, args.log)
            full = torch.arange(len(rows), device="cuda")

            def checker(want, cond):
                return lambda out: check(torch, out.index_select(0, rows), want, cond, dtname, full)
            for key, make in makers.items():
                def directions(make=make, x=x, y=y, dy=dy):
                    fwd, bwd = make(x, y, dy)
                    return [("fwd", fwd, checker(want_y, cond_fwd), 2 * m * n * es, m * n, dtype),
                            ("bwd", bwd, checker(want_dx, cond_bwd), 3 * m * n * es, m * n, dtype)]
                bench.cell(dtname, n, m, key, directions)
            del x, dy, y
            torch.cuda.empty_cache()
    return bench.finish()


def main(argv=None):
    args = parse_args(argv)
    rec = run(args)
    what = "Log-softmax" if args.log else "Softmax"
    text = markdown(rec, args.peers.split(","), what + " forward and backward, side by side",
                    [("fwd", "Forward"), ("bwd", "Backward")],
                    "forward bytes = read x + write y, backward = read y and dy + write dx")
    return write(rec, text, args)


if __name__ == "__main__":
    sys.exit(main())
