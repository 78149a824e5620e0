"""Independent float64 reference and comparison helpers for the RMSNorm tests."""
import torch

import quack_cpp

F32 = torch.float32

_MANTISSA_BITS = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}


def as_f32(v: float) -> float:
    """v as the kernel sees it (a float32 scalar)."""
    return float(torch.tensor(v, dtype=torch.float32))


def reference(x, weight=None, bias=None, residual=None, eps=1e-6, weight_offset=0.0):
    """float64 (y, h, rstd, scale) of RMSNorm, straight from the definition.
    scale = |h * rstd * (w + offset)| + |b|, the magnitude of what the kernel
    adds in fp32 (its rounding error is relative to this, not to |y|)."""
    h = x.double()
    if residual is not None:
        h = h + residual.double()
    rstd = torch.rsqrt((h * h).mean(dim=-1) + as_f32(eps))
    y = h * rstd.unsqueeze(-1)
    if weight is not None:
        y = y * (weight.double() + as_f32(weight_offset))
    scale = y.abs()
    if bias is not None:
        y = y + bias.double()
        scale = scale + bias.double().abs()
    return y, h, rstd, scale


def ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` at the float64 values v (subnormal spacing near 0)."""
    fi = torch.finfo(dtype)
    mag = v.abs().clamp_min(fi.smallest_normal)
    return torch.exp2(torch.floor(torch.log2(mag)) - _MANTISSA_BITS[dtype])


def assert_close(got: torch.Tensor, ref64: torch.Tensor, scale64: torch.Tensor, what: str,
                 ulps: float = 2.0, rel32: float = 1e-5):
    """got (in its dtype) against the float64 reference.

    float32 outputs: |got - ref| <= rel32 * (scale + |ref|).
    float16/bfloat16: the reference rounded to got's dtype, then at most
    `ulps` ulps of that dtype apart, plus the fp32 term for cancellation.
    Every element must be finite (outputs are allocated from poisoned memory).
    """
    assert got.shape == ref64.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref64.shape)}"
    finite = torch.isfinite(got)
    if not bool(finite.all()):
        bad = (~finite).nonzero()[:5].tolist()
        raise AssertionError(f"{what}: {int((~finite).sum())} non-finite elements, first at {bad}")
    g = got.double()
    if got.dtype == torch.float32:
        tol = rel32 * (scale64 + ref64.abs()) + 1e-30
        ref = ref64
    else:
        ref = ref64.to(got.dtype).double()
        tol = ulps * ulp(ref, got.dtype) + rel32 * scale64
    err = (g - ref).abs()
    bad = err > tol
    if bool(bad.any()):
        idx = bad.nonzero()[:5].tolist()
        first = tuple(idx[0])
        raise AssertionError(
            f"{what} ({got.dtype}): {int(bad.sum())} of {got.numel()} elements out of tolerance; "
            f"first at {idx}: got {g[first].item()!r}, ref {ref64[first].item()!r}, tol {tol[first].item():.3g}")


def assert_rstd_close(got: torch.Tensor, ref64: torch.Tensor, rel: float = 1e-5):
    assert got.dtype == torch.float32, got.dtype
    assert got.shape == ref64.shape, (got.shape, ref64.shape)
    if got.numel() == 0:
        return
    assert bool(torch.isfinite(got).all()), "rstd: non-finite elements"
    err = (got.double() - ref64).abs() / ref64.abs()
    assert float(err.max()) <= rel, f"rstd: max rel error {float(err.max()):.3g} > {rel}"


def poison_allocator(*specs, device="cuda"):
    """Fills cached allocator blocks of the given (shape, dtype) sizes with
    all-ones bytes (NaN in float32/float16/bfloat16) and frees them, so the
    next allocations of those sizes reuse poisoned memory."""
    blocks = []
    for shape, dtype in specs:
        t = torch.empty(shape, dtype=dtype, device=device)
        if t.numel():
            t.view(torch.uint8).fill_(0xFF)
        blocks.append(t)
    del blocks


def run_and_check(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-6,
                  prenorm=False, weight_offset=0.0, return_rstd=False, poison=True):
    """Calls quack_cpp.rmsnorm on poisoned allocator memory and checks the
    result's structure and every value. Returns the outputs as a list."""
    y_dtype = out_dtype or x.dtype
    h_dtype = residual_dtype or (residual.dtype if residual is not None else x.dtype)
    if poison:
        poison_allocator((x.shape, y_dtype), (x.shape, h_dtype), (x.shape[:-1], F32), device=x.device)
    res = quack_cpp.rmsnorm(x, weight, bias, residual, out_dtype=out_dtype, residual_dtype=residual_dtype,
                            eps=eps, prenorm=prenorm, weight_offset=weight_offset, return_rstd=return_rstd)
    outs = list(res) if isinstance(res, tuple) else [res]
    assert isinstance(res, tuple) == (prenorm or return_rstd)
    assert len(outs) == 1 + prenorm + return_rstd
    for t in outs:
        assert t.device == x.device and t.is_contiguous() and not t.requires_grad

    ref_y, ref_h, ref_rstd, scale = reference(x, weight, bias, residual, eps, weight_offset)
    y = outs[0]
    assert y.shape == x.shape and y.dtype == y_dtype
    assert_close(y, ref_y, scale, "out")
    if prenorm:
        h = outs[1]
        assert h.shape == x.shape and h.dtype == h_dtype
        h_scale = x.double().abs() + (0 if residual is None else residual.double().abs())
        assert_close(h, ref_h, h_scale, "residual_out")
    if return_rstd:
        rstd = outs[-1]
        assert rstd.shape == x.shape[:-1] and rstd.dtype == F32
        assert_rstd_close(rstd, ref_rstd)
    return outs


def check_grads(x, weight=None, bias=None, residual=None, prenorm=False, weight_offset=0.0, eps=1e-6,
                rtol=3e-2, grad_out_strided=False):
    """quack_cpp.rmsnorm forward + backward on the leaves given (those that
    require grad), with random gradients on y (and on residual_out with
    prenorm), against float64 autograd of `reference`. Each leaf's gradient
    must have its dtype and match within rtol * |ref| + rtol * mean|ref|.
    grad_out_strided: the gradient on y arrives as a view whose rows are 2N
    apart (non-contiguous, passed to the kernel without a copy)."""
    outs = quack_cpp.rmsnorm(x, weight, bias, residual=residual, prenorm=prenorm, weight_offset=weight_offset,
                             eps=eps)
    y, h = (outs[0], outs[1]) if prenorm else (outs, None)
    gen = torch.Generator(device="cpu").manual_seed(x.shape[-1] + 17)
    gy = torch.randn(y.shape, generator=gen, dtype=F32).to(x.device)
    gh = torch.randn(y.shape, generator=gen, dtype=F32).to(x.device) if prenorm else None
    gy_in = gy.to(y.dtype)
    if grad_out_strided:  # rows 2N apart
        gy_in = torch.empty(y.shape[:-1] + (2 * y.shape[-1],), dtype=y.dtype, device=y.device)[..., :y.shape[-1]]
        gy_in.copy_(gy)
    grads = [gy_in] + ([gh.to(h.dtype)] if prenorm else [])
    torch.autograd.backward([y] + ([h] if prenorm else []), grads)

    leaves = [t for t in (x, weight, bias, residual) if t is not None]
    ref = {id(t): t.detach().double().requires_grad_() for t in leaves}
    d = lambda t: None if t is None else ref[id(t)]  # noqa: E731
    yd, hd, _, _ = reference(d(x), d(weight), d(bias), d(residual), eps, weight_offset)
    outs_d = [yd] + ([hd] if prenorm else [])
    torch.autograd.backward(outs_d, [g.double() for g in grads])
    for t in leaves:
        if not t.requires_grad:
            continue
        got, want = t.grad, ref[id(t)].grad
        assert got is not None and got.dtype == t.dtype and got.shape == t.shape
        err = (got.double() - want).abs()
        bound = rtol * want.abs() + rtol * want.abs().mean()
        assert bool((err <= bound).all()), f"gradient of a {tuple(t.shape)} leaf: max err {err.max().item():.3g}, " \
                                           f"max |ref| {want.abs().max().item():.3g}"
