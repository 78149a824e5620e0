"""Probe: where the cross-entropy time goes (CUDA-event medians, H200).
Compares reduction 'none' (row kernel alone) with 'mean' (plus the one-CTA
denominators and total), the fused gradient, and softmax on the same shape."""
import statistics
import sys

import torch

import quack_cpp


def t_us(fn, iters=30):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


def main():
    cases = [(16384, 16384, torch.bfloat16), (262144, 1024, torch.bfloat16), (1024, 262144, torch.bfloat16),
             (8192, 128256, torch.bfloat16), (8192, 32000, torch.float32)]
    if len(sys.argv) > 1 and sys.argv[1] == "ncu":
        cases = cases[:1] + cases[3:4]
    for m, v, dt in cases:
        x = torch.randn(m, v, device="cuda", dtype=dt) * 2
        t = torch.randint(0, v, (m,), device="cuda")
        nb = x.numel() * x.element_size()
        xg = x.detach().clone().requires_grad_(True)

        def train():
            loss = quack_cpp.cross_entropy(xg, t)
            torch.autograd.grad(loss, xg)

        rows = [("mean", lambda: quack_cpp.cross_entropy(x, t)),
                ("none", lambda: quack_cpp.cross_entropy(x, t, reduction="none")),
                ("softmax", lambda: quack_cpp.softmax(x)),
                ("train", train),
                ("copy", lambda: x.clone())]
        out = []
        for name, fn in rows:
            us = t_us(fn, 3 if len(sys.argv) > 1 else 30)
            traffic = nb * (1 if name in ("mean", "none") else 2)
            out.append(f"{name} {us:.1f} us {traffic / us / 1e3:.0f} GB/s")
        print(f"M={m} V={v} {dt}: " + " | ".join(out), flush=True)


if __name__ == "__main__":
    main()
