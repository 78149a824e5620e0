#!/usr/bin/env python3
"""Side-by-side RMSNorm backward and training-step benchmark on one GPU, in one process.

For M*N = 2^28 elements (default) and N in 256 .. 1M, per dtype, with a
weight in x's dtype, measures in the same run as a 1 GiB device-to-device
copy (bytes read + written):

* bwd: the backward alone, dx and dweight from x and dy (quack_cpp: its
  backward op from the saved rstd; peers: torch.autograd.grad over a kept
  graph). Model bytes: read x and dy, write dx (the weight-sized terms are
  left out).
* step: forward then backward, as a training step runs them (autograd.grad
  of the implementation's forward). Model bytes: read x, write y, read x and
  dy, write dx.

Implementations: quack_cpp, torch eager (F.rms_norm), torch.compile (of
F.rms_norm; AOTAutograd compiles its backward), Liger-Kernel
(LigerRMSNormFunction, not in place) and QuACK (quack.rmsnorm). dx and
dweight are checked against float64 (dx on sampled rows, dweight whole) on
memory poisoned with NaN before each is timed.

    . bench/peers.sh   # on the GPU machine: the peers carried in .whl/
    python3 bench/bench_rmsnorm_bwd.py --commit <sha> --out ... --json ...
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
EPS = 1e-6
# |got - want| <= rtol * (|want| + mean |want|): the peers accumulate in
# fp32 in different orders and round dx to the dtype.
RTOL = {"bf16": 3e-2, "fp16": 5e-3, "fp32": 1e-3}


def parse_args(argv):
    return sidebyside_args(argv, __doc__, SIZES)


def make_impl(key, torch):
    """A factory (x, w, dy) -> (bwd, step), each a callable returning (dx, dw)."""
    import torch.nn.functional as F

    def by_autograd(forward):
        def make(x, w, dy):
            xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
            y = forward(xg, wg)

            def bwd():
                return torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)

            def step():
                return torch.autograd.grad(forward(xg, wg), (xg, wg), dy)
            return bwd, step
        return make

    if key == "quack_cpp":
        import quack_cpp

        def make(x, w, dy):
            # The backward op from the forward's saved rstd (what autograd calls).
            _, _, rstd = torch.ops.quack_cpp.rmsnorm_fwd(x, w, None, None, None, None, EPS, 0.0, False, True)

            def bwd():
                dx, _, dw, _ = torch.ops.quack_cpp.rmsnorm_bwd(dy, x, rstd, w, None, 0.0, x.dtype, None, True, None)
                return dx, dw
            step = by_autograd(lambda xg, wg: quack_cpp.rmsnorm(xg, wg, eps=EPS))(x, w, dy)[1]
            return bwd, step
        return make
    if key == "torch":
        return by_autograd(lambda xg, wg: F.rms_norm(xg, (xg.shape[-1],), wg, EPS))
    if key == "compile":
        fn = torch.compile(lambda xg, wg: F.rms_norm(xg, (xg.shape[-1],), wg, EPS), dynamic=False)
        return by_autograd(fn)
    if key == "liger":
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        return by_autograd(lambda xg, wg: LigerRMSNormFunction.apply(xg, wg, EPS, 0.0, "llama", False))
    if key == "quack":
        import importlib
        qrms = importlib.import_module("quack.rmsnorm")  # the package exports a function named rmsnorm
        return by_autograd(lambda xg, wg: qrms.rmsnorm(xg, wg, eps=EPS))
    raise ValueError(key)


def run(args):
    import torch
    torch.manual_seed(0)
    bench = Run(torch, args)
    makers = bench.makers(make_impl)
    for dtname in args.dtypes.split(","):
        dtype = getattr(torch, DTYPES[dtname])
        es = torch.finfo(dtype).bits // 8
        rtol = RTOL[dtname]
        for n in map(int, args.sizes.split(",")):
            m = max(1, args.total // n)
            x = torch.randn(m, n, device="cuda").to(dtype)
            w = (1 + 0.5 * torch.randn(n, device="cuda")).to(dtype)
            dy = torch.randn(m, n, device="cuda").to(dtype)
            # float64 reference: dw over every row, dx on sampled rows.
            g = torch.Generator(device="cpu").manual_seed(n)
            rows = torch.unique(torch.cat([torch.tensor([0, m - 1]), torch.randint(0, m, (30,), generator=g)]))
            rows = rows.to("cuda")
            want_dw = torch.zeros(n, dtype=torch.float64, device="cuda")
            slab = max(1, (1 << 24) // n)  # rows: slabs of 16M elements
            for r0 in range(0, m, slab):
                xs, dys = x[r0:r0 + slab].double(), dy[r0:r0 + slab].double()
                want_dw += (dys * xs * torch.rsqrt((xs * xs).mean(-1, keepdim=True) + EPS)).sum(0)
            xs, dys, wd = x.index_select(0, rows).double(), dy.index_select(0, rows).double(), w.double()
            rstd = torch.rsqrt((xs * xs).mean(-1, keepdim=True) + EPS)
            xh, gg = xs * rstd, dys * wd
            want_dx = rstd * (gg - xh * (gg * xh).mean(-1, keepdim=True))

            w_dtype = w.dtype

            def check(out):
                dx, dw = out
                if dx.dtype != dtype or dw.dtype != w_dtype:
                    return False, f"dtypes {dx.dtype}, {dw.dtype}"
                got_dx, got_dw = dx.index_select(0, rows).double(), dw.double()
                if not (bool(torch.isfinite(got_dx).all()) and bool(torch.isfinite(got_dw).all())):
                    return False, "non-finite values (poisoned output not written?)"
                rx = float(((got_dx - want_dx).abs() / (rtol * (want_dx.abs() + want_dx.abs().mean()))).max())
                rw = float(((got_dw - want_dw).abs() / (rtol * (want_dw.abs() + want_dw.abs().mean()))).max())
                return max(rx, rw) <= 1.0, f"max err / bound: dx {rx:.3f}, dw {rw:.3f}"

            for key, make in makers.items():
                def directions(make=make, x=x, w=w, dy=dy):
                    bwd, step = make(x, w, dy)
                    return [("bwd", bwd, check, 3 * m * n * es, m * n, dtype),
                            ("step", step, check, 5 * m * n * es, m * n, dtype)]
                bench.cell(dtname, n, m, key, directions)
            del x, w, dy
            torch.cuda.empty_cache()
    return bench.finish()


def main(argv=None):
    args = parse_args(argv)
    rec = run(args)
    text = markdown(rec, args.peers.split(","), "RMSNorm backward and training step, side by side",
                    [("bwd", "Backward"), ("step", "Training step (forward + backward)")],
                    "backward bytes = read x and dy + write dx; step bytes = forward (read x, write y) + backward")
    return write(rec, text, args)


if __name__ == "__main__":
    sys.exit(main())
