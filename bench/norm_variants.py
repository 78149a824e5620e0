#!/usr/bin/env python3
"""Diagnostic: quack_cpp's RMSNorm and LayerNorm forward and backward on the
same shapes with each parameter layout (no affine; weight in x's dtype;
fp32 weight and bias), so that the cost of centring and of fp32 parameters
can be told apart. Prints % of the same run's copy bandwidth (model bytes:
fwd read x + write y; bwd read x and dy + write dx).

    python3 bench/norm_variants.py [--dtype bf16] [--sizes 1024,4096,...] [--total 268435456]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_rmsnorm import time_events  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--sizes", default="256,1024,4096,16384,65536,262144")
    p.add_argument("--total", type=int, default=1 << 28)
    a = p.parse_args()
    import torch
    import quack_cpp  # noqa: F401  (registers torch.ops.quack_cpp)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    es = torch.finfo(dt).bits // 8
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms, _ = time_events(torch, [lambda: dst.copy_(src)], 50.0)
    copy = 2 * (1 << 30) / (copy_ms * 1e-3) / 1e9
    src = dst = None
    print(f"copy {copy:.0f} GB/s; {a.dtype}; % of copy (us)")
    ops = torch.ops.quack_cpp
    print(f"{'N':>7} {'layout':>10} | {'rms fwd':>14} {'ln fwd':>14} | {'rms bwd':>14} {'ln bwd':>14}")
    for n in map(int, a.sizes.split(",")):
        m = max(1, a.total // n)
        x = (torch.randn(m, n, device="cuda") + 0.5).to(dt)
        dy = torch.randn(m, n, device="cuda").to(dt)
        for layout in ("none", "w_x", "wb_f32"):
            w = None if layout == "none" else torch.ones(n, device="cuda", dtype=dt if layout == "w_x" else torch.float32)
            b = torch.zeros(n, device="cuda") if layout == "wb_f32" else None
            bd = None if b is None else b.dtype
            cells = []
            _, _, rstd = ops.rmsnorm_fwd(x, w, b, None, None, None, 1e-6, 0.0, False, True)
            _, _, mean, lrstd = ops.layernorm_fwd(x, w, b, None, None, None, 1e-5, 0.0, False, True)
            fns = [lambda: ops.rmsnorm_fwd(x, w, b, None, None, None, 1e-6, 0.0, False, False),
                   lambda: ops.layernorm_fwd(x, w, b, None, None, None, 1e-5, 0.0, False, False),
                   lambda: ops.rmsnorm_bwd(dy, x, rstd, w, None, 0.0, dt, None, w is not None, bd),
                   lambda: ops.layernorm_bwd(dy, x, lrstd, w, None, 0.0, dt, None, w is not None, bd, mean)]
            for k, fn in enumerate(fns):
                ms, _ = time_events(torch, [fn], 30.0)
                nbytes = (2 if k < 2 else 3) * m * n * es
                cells.append(f"{100 * nbytes / (ms * 1e-3) / 1e9 / copy:5.1f}% ({ms * 1e3:6.1f})")
            print(f"{n:>7} {layout:>10} | {cells[0]:>14} {cells[1]:>14} | {cells[2]:>14} {cells[3]:>14}", flush=True)
        x = dy = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
