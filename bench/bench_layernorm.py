#!/usr/bin/env python3
"""Side-by-side LayerNorm benchmark (forward, backward, training step) on one GPU, in one process.

For M*N = 2^28 elements (default) and N in 256 .. 256K, per dtype of x, with
fp32 weight and bias (the training layout; QuACK requires it), measures in
the same run as a 1 GiB device-to-device copy (bytes read + written):

* fwd: y = LayerNorm(x). Model bytes: read x, write y.
* bwd: dx, dweight and dbias from x, dy and the forward's saved statistics
  (quack_cpp and QuACK: their backward ops; the others: torch.autograd.grad
  over a kept graph). Model bytes: read x and dy, write dx.
* step: forward then backward, as a training step runs them. Model bytes:
  read x, write y, read x and dy, write dx.

Implementations: quack_cpp, torch eager (F.layer_norm), torch.compile (of
F.layer_norm), Liger-Kernel (LigerLayerNormFunction) and QuACK
(quack.rmsnorm.layernorm_fwd / layernorm_bwd; no autograd function, so its
step is the two called in turn). Outputs are checked against float64 (y and
dx on sampled rows, dweight / dbias whole) on memory poisoned with NaN before
each direction is timed.

    . bench/peers.sh   # on the GPU machine: the peers carried in .whl/
    python3 bench/bench_layernorm.py --commit <sha> --out ... --json ...
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sidebyside import Run, markdown, write  # noqa: E402
from sidebyside import parse_args as sidebyside_args  # noqa: E402

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
SIZES = [256, 1024, 4096, 16384, 65536, 262144]
EPS = 1e-5
RTOL = {"bf16": 3e-2, "fp16": 5e-3, "fp32": 1e-3}


def make_impl(key, torch):
    """A factory (x, w, b, dy) -> (fwd, bwd, step): fwd returns y, bwd and
    step return (dx, dw, db)."""
    import torch.nn.functional as F

    def by_autograd(forward):
        def make(x, w, b, dy):
            xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))
            y = forward(xg, wg, bg)

            def fwd():
                with torch.no_grad():
                    return forward(x, w, b)

            def bwd():
                return torch.autograd.grad(y, (xg, wg, bg), dy, retain_graph=True)

            def step():
                return torch.autograd.grad(forward(xg, wg, bg), (xg, wg, bg), dy)
            return fwd, bwd, step
        return make

    if key == "quack_cpp":
        import quack_cpp

        def make(x, w, b, dy):
            fwd, _, step = by_autograd(lambda xg, wg, bg: quack_cpp.layernorm(xg, wg, bg, eps=EPS))(x, w, b, dy)
            _, _, mean, rstd = torch.ops.quack_cpp.layernorm_fwd(x, w, b, None, None, None, EPS, 0.0, False, True)

            def bwd():  # the backward op from the saved statistics (what autograd calls)
                dx, _, dw, db = torch.ops.quack_cpp.layernorm_bwd(dy, x, rstd, w, None, 0.0, x.dtype, None, True,
                                                                  b.dtype, mean)
                return dx, dw, db
            return fwd, bwd, step
        return make
    if key == "torch":
        # (eager needs the parameters in x's dtype: cast, as autocast would; the
        # gradients come back in fp32 through the casts)
        return by_autograd(lambda xg, wg, bg: F.layer_norm(xg, (xg.shape[-1],), wg.to(xg.dtype), bg.to(xg.dtype),
                                                           EPS))
    if key == "compile":
        fn = torch.compile(lambda xg, wg, bg: F.layer_norm(xg, (xg.shape[-1],), wg, bg, EPS), dynamic=False)
        return by_autograd(fn)
    if key == "liger":
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        return by_autograd(lambda xg, wg, bg: LigerLayerNormFunction.apply(xg, wg, bg, EPS))
    if key == "quack":
        import importlib
        q = importlib.import_module("quack.rmsnorm")

        def make(x, w, b, dy):
            _, rstd, mean = q.layernorm_fwd(x, w, b, eps=EPS, return_rstd=True, return_mean=True)

            def fwd():
                return q.layernorm_fwd(x, w, b, eps=EPS)

            def bwd():
                return q.layernorm_bwd(x, w, dy, rstd, mean, has_bias=True)

            def step():
                _, r, mu = q.layernorm_fwd(x, w, b, eps=EPS, return_rstd=True, return_mean=True)
                return q.layernorm_bwd(x, w, dy, r, mu, has_bias=True)
            return fwd, bwd, step
        return make
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
            x = (torch.randn(m, n, device="cuda") + 0.5).to(dtype)
            w = 1 + 0.5 * torch.randn(n, device="cuda")
            b = 0.5 * torch.randn(n, device="cuda")
            dy = torch.randn(m, n, device="cuda").to(dtype)
            g = torch.Generator(device="cpu").manual_seed(n)
            rows = torch.unique(torch.cat([torch.tensor([0, m - 1]), torch.randint(0, m, (30,), generator=g)]))
            rows = rows.to("cuda")
            # float64 references: dw / db over every row (in 16M-element slabs), y and dx on sampled rows.
            want_dw = torch.zeros(n, dtype=torch.float64, device="cuda")
            want_db = torch.zeros(n, dtype=torch.float64, device="cuda")
            slab = max(1, (1 << 24) // n)  # rows
            for r0 in range(0, m, slab):
                xs, dys = x[r0:r0 + slab].double(), dy[r0:r0 + slab].double()
                want_dw += (dys * F_norm(xs)).sum(0)
                want_db += dys.sum(0)
            xs, dys, wd, bd = x.index_select(0, rows).double(), dy.index_select(0, rows).double(), w.double(), b.double()
            xh = F_norm(xs)
            want_y = xh * wd + bd
            gg = dys * wd
            rstd = torch.rsqrt(xs.var(-1, unbiased=False, keepdim=True) + EPS)
            want_dx = rstd * (gg - gg.mean(-1, keepdim=True) - xh * (gg * xh).mean(-1, keepdim=True))

            def rel(got, want):
                return float(((got.double() - want).abs() / (rtol * (want.abs() + want.abs().mean()))).max())

            def check_fwd(y):
                if y.dtype != dtype:
                    return False, f"dtype {y.dtype}"
                got = y.index_select(0, rows)
                if not bool(torch.isfinite(got).all()):
                    return False, "non-finite values (poisoned output not written?)"
                r = rel(got, want_y)
                return r <= 1.0, f"max err / bound: y {r:.3f}"

            def check_bwd(out, w_dtype=w.dtype, b_dtype=b.dtype):
                dx, dw, db = out[:3]
                if dx.dtype != dtype or dw.dtype != w_dtype or db.dtype != b_dtype:
                    return False, f"dtypes {dx.dtype}, {dw.dtype}, {db.dtype}"
                got_dx = dx.index_select(0, rows)
                if not all(bool(torch.isfinite(t).all()) for t in (got_dx, dw, db)):
                    return False, "non-finite values (poisoned output not written?)"
                rs = rel(got_dx, want_dx), rel(dw, want_dw), rel(db, want_db)
                return max(rs) <= 1.0, "max err / bound: dx {:.3f}, dw {:.3f}, db {:.3f}".format(*rs)

            for key, make in makers.items():
                def directions(make=make, x=x, w=w, b=b, dy=dy):
                    fwd, bwd, step = make(x, w, b, dy)
                    return [("fwd", fwd, check_fwd, 2 * m * n * es, m * n, dtype),
                            ("bwd", bwd, check_bwd, 3 * m * n * es, m * n, dtype),
                            ("step", step, check_bwd, 5 * m * n * es, m * n, dtype)]
                bench.cell(dtname, n, m, key, directions)
            del x, w, b, dy
            torch.cuda.empty_cache()
    return bench.finish()


def F_norm(xs):
    """(x - mean) * rstd over the last dimension, float64."""
    import torch
    mean = xs.mean(-1, keepdim=True)
    return (xs - mean) * torch.rsqrt(((xs - mean) ** 2).mean(-1, keepdim=True) + EPS)


def parse_args(argv):
    return sidebyside_args(argv, __doc__, SIZES)


def main(argv=None):
    args = parse_args(argv)
    rec = run(args)
    text = markdown(rec, args.peers.split(","), "LayerNorm forward, backward and training step, side by side",
                    [("fwd", "Forward"), ("bwd", "Backward"), ("step", "Training step (forward + backward)")],
                    "fwd bytes = read x + write y; bwd bytes = read x and dy + write dx; step = both")
    return write(rec, text, args)


if __name__ == "__main__":
    sys.exit(main())
