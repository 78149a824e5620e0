"""Independent float64 reference and comparison helpers for the RMSNorm and
LayerNorm tests (centre=True: LayerNorm)."""
import torch

import quack_cpp

F32 = torch.float32

_MANTISSA_BITS = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}


def as_f32(v: float) -> float:
    """v as the kernel sees it (a float32 scalar)."""
    return float(torch.tensor(v, dtype=torch.float32))


def reference(x, weight=None, bias=None, residual=None, eps=1e-6, weight_offset=0.0, centre=False,
              with_mean=False):
    """float64 (y, h, rstd, scale) of RMSNorm (LayerNorm with centre), straight
    from the definition; with_mean: the row means appended (zeros for RMSNorm).
    scale = |h * rstd * (w + offset)| + |b|, the magnitude of what the kernel
    adds in fp32 (its rounding error is relative to this, not to |y|: for
    LayerNorm, |h| rather than |h - mean|, as the kernel rounds h - mean)."""
    h = x.double()
    if residual is not None:
        h = h + residual.double()
    mean = h.mean(dim=-1) if centre else torch.zeros_like(h[..., 0])
    hc = h - mean.unsqueeze(-1)
    rstd = torch.rsqrt((hc * hc).mean(dim=-1) + as_f32(eps))
    y = hc * rstd.unsqueeze(-1)
    mag = (h * rstd.unsqueeze(-1)).abs().detach()
    if weight is not None:
        y = y * (weight.double() + as_f32(weight_offset))
        mag = mag * (weight.double() + as_f32(weight_offset)).abs().detach()
    scale = y.abs().detach() + mag if centre else y.abs().detach()
    if bias is not None:
        y = y + bias.double()
        scale = scale + bias.double().abs().detach()
    if with_mean:
        return y, h, rstd, scale, mean
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
                  prenorm=False, weight_offset=0.0, return_rstd=False, poison=True, centre=False):
    """Calls quack_cpp.rmsnorm (centre: quack_cpp.layernorm, return_rstd its
    return_mean_rstd) on poisoned allocator memory and checks the result's
    structure and every value. Returns the outputs as a list."""
    y_dtype = out_dtype or x.dtype
    h_dtype = residual_dtype or (residual.dtype if residual is not None else x.dtype)
    if poison:
        poison_allocator((x.shape, y_dtype), (x.shape, h_dtype), (x.shape[:-1], F32), device=x.device)
    if centre:
        res = quack_cpp.layernorm(x, weight, bias, residual, out_dtype=out_dtype, residual_dtype=residual_dtype,
                                  eps=eps, prenorm=prenorm, weight_offset=weight_offset,
                                  return_mean_rstd=return_rstd)
    else:
        res = quack_cpp.rmsnorm(x, weight, bias, residual, out_dtype=out_dtype, residual_dtype=residual_dtype,
                                eps=eps, prenorm=prenorm, weight_offset=weight_offset, return_rstd=return_rstd)
    outs = list(res) if isinstance(res, tuple) else [res]
    assert isinstance(res, tuple) == (prenorm or return_rstd)
    assert len(outs) == 1 + prenorm + return_rstd * (1 + centre)
    for t in outs:
        assert t.device == x.device and t.is_contiguous() and not t.requires_grad

    ref_y, ref_h, ref_rstd, scale, ref_mean = reference(x, weight, bias, residual, eps, weight_offset, centre,
                                                        with_mean=True)
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
        if centre:
            mean = outs[-2]
            assert mean.shape == x.shape[:-1] and mean.dtype == F32
            # fp32 sums: relative to the row's magnitude, not to the mean's
            assert_close(mean, ref_mean, ref_h.abs().amax(dim=-1) if ref_h.numel() else ref_mean, "mean")
    return outs


def check_grads(x, weight=None, bias=None, residual=None, prenorm=False, weight_offset=0.0, eps=1e-6,
                rtol=3e-2, grad_out_strided=False, centre=False):
    """quack_cpp.rmsnorm forward + backward on the leaves given (those that
    require grad), with random gradients on y (and on residual_out with
    prenorm), against float64 autograd of `reference`. Each leaf's gradient
    must have its dtype and match within rtol * |ref| + rtol * mean|ref|.
    grad_out_strided: the gradient on y arrives as a view whose rows are 2N
    apart (non-contiguous, passed to the kernel without a copy)."""
    norm = quack_cpp.layernorm if centre else quack_cpp.rmsnorm
    outs = norm(x, weight, bias, residual=residual, prenorm=prenorm, weight_offset=weight_offset, eps=eps)
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
    yd, hd, _, _ = reference(d(x), d(weight), d(bias), d(residual), eps, weight_offset, centre)
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
