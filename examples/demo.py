#!/usr/bin/env python3
"""A one-minute tour of quack_cpp on a GPU (run by scripts/bench.sh).

1. quack_cpp.rmsnorm against torch's RMSNorm, in float64, for a few shapes;
2. the pre-norm residual form (y, h = rmsnorm(x, w, residual=h, prenorm=True));
3. quack_cpp.RMSNorm as a drop-in for torch.nn.RMSNorm (same state_dict);
4. quack_cpp.LayerNorm against torch.nn.LayerNorm, forward and backward;
5. one timing per shape: quack_cpp vs torch eager, in GB/s of model bytes
   (read x + write y + read the weight), median of CUDA-event timings.

bench/bench_rmsnorm.py is the real benchmark; this only shows the API works.
"""
import statistics
import sys

import torch
import torch.nn.functional as F

import quack_cpp


def reference(x, w, eps, residual=None):
    h = x.double() if residual is None else x.double() + residual.double()
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (y if w is None else y * w.double()), h


def max_rel_err(got, want):
    return ((got.double() - want).abs() / (1.0 + want.abs())).max().item()


def time_ms(fn, iters=50):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA GPU visible to torch: nothing to demo")
        return 1
    torch.manual_seed(0)
    dev = "cuda"
    print(f"quack_cpp {quack_cpp.__version__} | torch {torch.__version__} | {torch.cuda.get_device_name()}")
    tol = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 2e-3}

    print("\n1. rmsnorm(x, weight) against a float64 reference")
    for m, n, dt in [(4096, 4096, torch.bfloat16), (1024, 8192, torch.float16), (2048, 1000, torch.float32),
                     (64, 262144, torch.bfloat16)]:
        x = torch.randn(m, n, device=dev, dtype=dt)
        w = torch.rand(n, device=dev, dtype=dt) + 0.5
        y = quack_cpp.rmsnorm(x, w, eps=1e-6)
        err = max_rel_err(y, reference(x, w, 1e-6)[0])
        ok = err <= tol[dt]
        print(f"   {m:>5} x {n:<7} {str(dt):15} max rel err {err:.2e}  {'ok' if ok else 'FAIL'}")
        if not ok:
            return 1

    print("\n2. pre-norm residual: y, h = rmsnorm(x, w, residual=r, prenorm=True)")
    x = torch.randn(512, 4096, device=dev, dtype=torch.bfloat16)
    r = torch.randn(512, 4096, device=dev, dtype=torch.float32)
    w = torch.rand(4096, device=dev, dtype=torch.bfloat16) + 0.5
    y, h = quack_cpp.rmsnorm(x, w, residual=r, prenorm=True)
    want_y, want_h = reference(x, w, 1e-6, residual=r)
    err_y, err_h = max_rel_err(y, want_y), max_rel_err(h, want_h)
    print(f"   y {y.dtype} max rel err {err_y:.2e}; h {h.dtype} max rel err {err_h:.2e}")
    if err_y > tol[torch.bfloat16] or err_h > tol[torch.float32]:
        return 1

    print("\n3. quack_cpp.RMSNorm as a drop-in for torch.nn.RMSNorm")
    theirs = torch.nn.RMSNorm(4096, device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
    ours = quack_cpp.RMSNorm(4096, device=dev, dtype=torch.bfloat16)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(8, 128, 4096, device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        diff = (ours(x).float() - theirs(x).float()).abs().max().item()
    print(f"   same state_dict, (8, 128, 4096) bf16: max |ours - torch| = {diff:.3g}")
    if diff > 0.05:
        return 1

    print("\n4. quack_cpp.LayerNorm against torch.nn.LayerNorm, forward and backward (fp32 parameters, bf16 x)")
    theirs = torch.nn.LayerNorm(4096, device=dev)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-0.5, 0.5)
    ours = quack_cpp.LayerNorm(4096, device=dev)
    ours.load_state_dict(theirs.state_dict())
    x = (torch.randn(8, 128, 4096, device=dev) + 3).to(torch.bfloat16).requires_grad_()
    gy = torch.randn(8, 128, 4096, device=dev, dtype=torch.bfloat16)
    y = ours(x)
    y.backward(gy)
    gx, gw = x.grad.clone(), ours.weight.grad.clone()
    x.grad = None
    y_ref = torch.nn.functional.layer_norm(x.float(), (4096,), theirs.weight, theirs.bias, 1e-5)
    y_ref.backward(gy.float())
    diff = (y.float() - y_ref).abs().max().item()
    rel_gx = ((gx.float() - x.grad.float()).abs().max() / x.grad.float().abs().max()).item()
    rel_gw = ((gw - theirs.weight.grad).abs().max() / theirs.weight.grad.abs().max()).item()
    print(f"   (8, 128, 4096): max |y - torch| = {diff:.3g}; max rel err dx {rel_gx:.2e}, dweight {rel_gw:.2e}")
    if diff > 0.05 or rel_gx > 2e-2 or rel_gw > 2e-2:
        return 1

    print("\n5. quack_cpp.cross_entropy (label smoothing, ignored targets) against torch, loss and gradient")
    logits = (torch.randn(4096, 32000, device=dev) * 3).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, 32000, (4096,), device=dev)
    target[::5] = -100
    loss = quack_cpp.cross_entropy(logits, target, label_smoothing=0.1)
    loss.backward()
    ours_grad = logits.grad.clone()
    logits.grad = None
    ref = torch.nn.functional.cross_entropy(logits.double(), target, label_smoothing=0.1)
    ref.backward()
    err_loss = abs(loss.item() - ref.item()) / abs(ref.item())
    rel_g = ((ours_grad.double() - logits.grad.double()).abs().max() / logits.grad.double().abs().max()).item()
    print(f"   (4096, 32000) bf16: loss rel err {err_loss:.2e}; max rel err of the gradient {rel_g:.2e}")
    if err_loss > 1e-4 or rel_g > 1e-2:
        return 1

    print("\n6. quick timing (median of 50 CUDA-event timings; bench/bench_rmsnorm.py is the real benchmark)")
    print(f"   {'M x N':>16} {'dtype':>15} {'quack_cpp':>16} {'torch eager':>16}")
    for m, n, dt in [(32768, 4096, torch.bfloat16), (4096, 32768, torch.bfloat16), (256, 262144, torch.bfloat16),
                     (16384, 8192, torch.float32)]:
        x = torch.randn(m, n, device=dev, dtype=dt)
        w = torch.rand(n, device=dev, dtype=dt) + 0.5
        nbytes = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
        t_ours = time_ms(lambda: quack_cpp.rmsnorm(x, w, eps=1e-6))
        t_torch = time_ms(lambda: F.rms_norm(x, (n,), w, eps=1e-6))
        gbs = lambda t: nbytes / (t * 1e-3) / 1e9
        print(f"   {f'{m} x {n}':>16} {str(dt):>15} {gbs(t_ours):>10.0f} GB/s {gbs(t_torch):>10.0f} GB/s")
    print("\ndemo ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
