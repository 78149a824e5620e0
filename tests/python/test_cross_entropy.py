"""quack_cpp.cross_entropy / CrossEntropyLoss: argument checks run everywhere;
the GPU tests compare the loss, lse and gradients with a float64 torch
reference (F.cross_entropy on upcast logits, softcap and z_loss written out)
on fresh random inputs with ~30% ignored targets."""
import math
import re

import pytest
import torch
import torch.nn.functional as F

import quack_cpp

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = [F32, F16, BF16]
gpu = pytest.mark.requires_gpu


def raises(exc, *names):
    pattern = "^quack_cpp.cross_entropy: " + "".join(f"(?=.*{re.escape(n)})" for n in names)
    return pytest.raises(exc, match=pattern)


# ---------------------------------------------------------------------------
# Checks (no GPU needed: shape, dtype and value checks come first).

def test_logits_checks():
    t = torch.zeros(2, dtype=torch.int64)
    with raises(TypeError, "logits", "torch.Tensor"):
        quack_cpp.cross_entropy([1.0], t)
    with raises(TypeError, "logits", "float64"):
        quack_cpp.cross_entropy(torch.zeros(2, 4, dtype=torch.float64), t)
    with raises(ValueError, "logits", "0-d"):
        quack_cpp.cross_entropy(torch.tensor(1.0), t)
    with raises(ValueError, "class dimension", "size >= 1"):
        quack_cpp.cross_entropy(torch.zeros(2, 0), t)


def test_target_checks():
    x = torch.zeros(2, 4)
    with raises(TypeError, "target", "torch.Tensor"):
        quack_cpp.cross_entropy(x, [0, 1])
    with raises(TypeError, "target", "int64 or int32", "probability"):
        quack_cpp.cross_entropy(x, torch.zeros(2, 4))
    with raises(ValueError, "target", "(2,)", "(3,)"):
        quack_cpp.cross_entropy(x, torch.zeros(3, dtype=torch.int64))


def test_option_checks():
    x, t = torch.zeros(2, 4), torch.zeros(2, dtype=torch.int64)
    with raises(ValueError, "weight", "(4,)"):
        quack_cpp.cross_entropy(x, t, weight=torch.ones(3))
    with raises(TypeError, "weight", "floating"):
        quack_cpp.cross_entropy(x, t, weight=torch.ones(4, dtype=torch.int64))
    with raises(TypeError, "ignore_index"):
        quack_cpp.cross_entropy(x, t, ignore_index=1.5)
    with raises(ValueError, "reduction", "'avg'"):
        quack_cpp.cross_entropy(x, t, reduction="avg")
    for v in (-0.1, 1.5, math.nan):
        with raises(ValueError, "label_smoothing"):
            quack_cpp.cross_entropy(x, t, label_smoothing=v)
    with raises(TypeError, "label_smoothing"):
        quack_cpp.cross_entropy(x, t, label_smoothing="0.1")
    for v in (-1.0, math.inf, math.nan):
        with raises(ValueError, "z_loss"):
            quack_cpp.cross_entropy(x, t, z_loss=v)
    for v in (0.0, -3.0, math.inf):
        with raises(ValueError, "softcap"):
            quack_cpp.cross_entropy(x, t, softcap=v)


def test_cpu_tensor_rejected():
    with raises(ValueError, "logits", "CUDA", "cpu"):
        quack_cpp.cross_entropy(torch.zeros(2, 4), torch.zeros(2, dtype=torch.int64))


def test_module_reduction_check():
    with pytest.raises(ValueError, match="reduction"):
        quack_cpp.CrossEntropyLoss(reduction="avg")


# ---------------------------------------------------------------------------
# Float64 reference.

def reference(x, t, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0, z_loss=0.0,
              softcap=None):
    """(loss, lse) in float64 from logits x (any dtype, upcast); differentiable in x."""
    v = x.shape[-1]
    xd = x.double().reshape(-1, v)
    if softcap is not None:
        xd = softcap * torch.tanh(xd / softcap)
    td = t.reshape(-1)
    wd = weight.double() if weight is not None else None
    loss = F.cross_entropy(xd, td, weight=wd, ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=label_smoothing)
    lse = torch.logsumexp(xd, dim=-1)
    if z_loss:
        counted = (td != ignore_index).double()
        z = z_loss * lse.square() * counted
        if reduction == "none":
            loss = loss + z
        elif reduction == "sum":
            loss = loss + z.sum()
        else:
            loss = loss + z.sum() / counted.sum()
    if reduction == "none":
        loss = loss.reshape(t.shape)
    return loss, lse.reshape(t.shape)


def make(m, v, dtype, ignore=0.3, tdtype=torch.int64, scale=4.0):
    x = (torch.randn(m, v, device="cuda") * scale).to(dtype)
    t = torch.randint(0, v, (m,), device="cuda")
    t[torch.rand(m, device="cuda") < ignore] = -100
    return x, t.to(tdtype)


def grad_tol(dtype):
    # The gradient is stored in the logits' dtype: half an ulp of rounding
    # (2^-9 bf16, 2^-12 f16, 2^-24 f32) plus the fp32 arithmetic (exp2/lg2
    # approximations, ~1e-6 relative after lse's absolute error); bounds
    # relative to the element and to the row's largest gradient.
    return {F32: 2e-5, F16: 2 ** -10, BF16: 2 ** -7}[dtype]


def assert_grad_close(got, ref, dtype, scale=None):
    # bf16 and fp32 gradients are stored at unit upstream scale and rescaled
    # (two roundings: covered by rtol). The absolute term is relative to the
    # gradient's scale -- the largest coefficient a row can carry, upstream
    # factor x class weight / the mean's denominator (`scale`; by default the
    # tensor's largest gradient) -- since p_c - 1 and A p - b - a cancel
    # (V = 1: the exact gradient is 0, ours a rounding residue of the
    # coefficients); plus fp16's subnormal spacing 2^-24. 2e-6 of the scale
    # is below a dropped smoothing term (eps / V >= 3e-6 for V <= 32000).
    got, ref = got.double().reshape(ref.shape), ref.reshape(ref.shape)
    rtol = grad_tol(dtype)
    floor = 2.0 ** -24 if dtype == F16 else 0.0
    if scale is None:
        scale = ref.abs().max().item()
    bound = rtol * ref.abs() + 2e-6 * scale + floor + 1e-30
    bad = (got - ref).abs() > bound
    assert not bad.any(), (
        f"{int(bad.sum())} gradient elements off; worst {(got - ref).abs()[bad].max().item():.3e}, "
        f"first at {bad.nonzero()[0].tolist()}")


def assert_loss_close(got, ref, v):
    # fp32 accumulation over V terms and the MUFU approximations: relative
    # ~1e-6 * sqrt(V)-ish; 2e-5 + 1e-6 sqrt(V) with an absolute floor.
    tol = 2e-5 + 1e-6 * math.sqrt(v)
    got = got.double()
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol, equal_nan=True)


OPTIONS = [
    {},
    {"label_smoothing": 0.1},
    {"weight": True},
    {"weight": True, "label_smoothing": 0.2},
    {"z_loss": 1e-3},
    {"softcap": 30.0},
    {"softcap": 15.0, "label_smoothing": 0.1, "z_loss": 1e-4, "weight": True},
]


def opts_for(o, v):
    o = dict(o)
    if o.get("weight"):
        o["weight"] = torch.rand(v, device="cuda") + 0.5
    return o


# ---------------------------------------------------------------------------
# GPU.

@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("v", [1, 2, 7, 1000, 4096, 32000])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("oi", range(len(OPTIONS)))
def test_forward_and_grad(dtype, v, reduction, oi):
    m = 289 if v <= 4096 else 33
    x, t = make(m, v, dtype)
    o = opts_for(OPTIONS[oi], v)
    xr = x.detach().clone().requires_grad_(True)
    ref, ref_lse = reference(xr, t, reduction=reduction, **o)
    # Forward only (no grad).
    loss, lse = quack_cpp.cross_entropy(x, t, reduction=reduction, return_lse=True, **o)
    assert loss.dtype == torch.float32 and lse.dtype == torch.float32
    assert_loss_close(loss, ref.detach(), v)
    assert_loss_close(lse, ref_lse.detach(), v)
    # Forward + backward with a non-unit upstream gradient.
    xg = x.detach().clone().requires_grad_(True)
    loss2 = quack_cpp.cross_entropy(xg, t, reduction=reduction, **o)
    # The forward-only call may take other tiles (8 vectors a thread, or the
    # streaming forward): the same loss up to the order of the sums.
    assert_loss_close(loss2.detach(), ref.detach(), v)
    g = torch.randn_like(ref) if reduction == "none" else torch.tensor(2.5, device="cuda", dtype=torch.float64)
    (ref * g).sum().backward()
    loss2.backward(g.float())
    assert xg.grad.dtype == dtype
    w = o.get("weight")
    wmax = w.max().item() if w is not None else 1.0
    counted = t != -100
    denom = (w[t[counted]].sum().item() if w is not None else counted.sum().item()) if reduction == "mean" else 1.0
    scale = g.abs().max().item() * wmax / max(denom, 1e-30)
    assert_grad_close(xg.grad, xr.grad, dtype, max(scale, xr.grad.abs().max().item()))


@gpu
@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("v", [50257, 50304, 65536, 128256, 128257, 151936, 262144])
def test_large_vocab(dtype, v):
    # (Odd V: contiguous rows at every offset in their first 16-byte vector,
    # logits and gradient alike -- shifted rows.)
    x, t = make(6, v, dtype)
    o = opts_for({"label_smoothing": 0.1, "z_loss": 1e-4}, v)
    xr = x.detach().clone().requires_grad_(True)
    ref, ref_lse = reference(xr, t, **o)
    # Forward only (the plain forward's streaming kernel from 48 KB rows).
    fwd, lse = quack_cpp.cross_entropy(x, t, return_lse=True, **o)
    assert_loss_close(fwd, ref.detach(), v)
    assert_loss_close(lse, ref_lse.detach(), v)
    xg = x.detach().clone().requires_grad_(True)
    loss = quack_cpp.cross_entropy(xg, t, **o)
    assert_loss_close(loss.detach(), ref.detach(), v)
    ref.backward()
    loss.backward()
    assert_grad_close(xg.grad, xr.grad, dtype)


@gpu
@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("v", [1000, 4096, 50304, 262144])
def test_huge_finite_logits(dtype, v):
    """Logits of any finite magnitude (log2 units break from about 1e10, and
    past 2.36e38 max log2 e is no float): rows shifted by 3e7, -1e12 + 1e6 z,
    a target logit of 2.5e38 beside a -3e38, all -3e38 but the target's
    -2.9e38. lse's own fp32 rounding (2^-24 |lse|) bounds the loss."""
    g = torch.Generator(device="cuda").manual_seed(v)
    x = torch.randn(5, v, device="cuda", generator=g) * 3
    t = torch.randint(0, v, (5,), device="cuda", generator=g)
    x[1] += 3e7
    x[2] = -1e12 + 1e6 * x[2] / 3
    x[3, t[3]] = 2.5e38
    x[3, (t[3] + 1) % v] = -3e38
    x[4] = -3e38
    x[4, t[4]] = -2.9e38
    x = x.to(dtype)
    ref, ref_lse = reference(x, t, reduction="none")
    for grad in (False, True):  # the plain forwards, then the training step
        xg = x.detach().clone().requires_grad_(grad)
        loss, lse = quack_cpp.cross_entropy(xg, t, reduction="none", return_lse=True)
        tol = 4 * 2.0 ** -24 * ref_lse.abs() + 2e-5 + 1e-6 * math.sqrt(v)
        assert torch.isfinite(loss).all() and torch.isfinite(lse).all()
        assert ((lse.double() - ref_lse).abs() <= tol).all(), (lse, ref_lse)
        assert ((loss.detach().double() - ref).abs() <= tol).all(), (loss, ref)
        if grad:
            loss.sum().backward()
            assert torch.isfinite(xg.grad).all()
            # Against float64 where fp32's lse does not bound p_c coarsely:
            # row 0 (ordinary logits), rows 3 and 4 (p_t = 1, the rest 0:
            # a zero gradient). In rows 1 and 2 lse's own rounding (2, 65536)
            # moves every p_c by a factor up to e or more.
            xr = x.detach().double().requires_grad_(True)
            reference(xr, t, reduction="none")[0].sum().backward()
            for r in (0, 3, 4):
                assert_grad_close(xg.grad[r], xr.grad[r], dtype)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("v", [32768, 50257, 100003])
def test_forward_long_rows_with_partial_vectors(dtype, v):
    # Aligned rows (a padded buffer) whose length is not a whole number of
    # 16-byte vectors: the streaming forward's tail; mean and 'none'.
    pad = (v + 7) // 8 * 8 + 8
    base = (torch.randn(40, pad, device="cuda") * 3).to(dtype)
    x = base[:, :v]
    t = torch.randint(0, v, (40,), device="cuda")
    t[::3] = -100
    for red in ("mean", "none"):
        got, lse = quack_cpp.cross_entropy(x, t, reduction=red, label_smoothing=0.05, return_lse=True)
        ref, ref_lse = reference(x, t, reduction=red, label_smoothing=0.05)
        assert_loss_close(got, ref, v)
        assert_loss_close(lse, ref_lse, v)


@gpu
@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_many_rows(dtype, reduction):
    # 50000 rows: the scalar kernels (denominators, the total) split into
    # parts of 16384 rows and combine them in order.
    m, v = 50000, 64
    x, t = make(m, v, dtype)
    o = opts_for({"weight": True, "label_smoothing": 0.1, "z_loss": 1e-4}, v)
    xr = x.detach().clone().requires_grad_(True)
    ref, _ = reference(xr, t, reduction=reduction, **o)
    fwd = quack_cpp.cross_entropy(x, t, reduction=reduction, **o)
    assert_loss_close(fwd, ref.detach(), m)
    xg = x.detach().clone().requires_grad_(True)
    loss = quack_cpp.cross_entropy(xg, t, reduction=reduction, **o)
    assert_loss_close(loss.detach(), ref.detach(), m)
    ref.backward()
    loss.backward()
    assert_grad_close(xg.grad, xr.grad, dtype)
    for _ in range(2):
        assert torch.equal(quack_cpp.cross_entropy(x, t, reduction=reduction, **o), fwd)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_int32_targets_and_leading_shape(dtype):
    x, t = make(4 * 37, 1000, dtype)
    x3, t3 = x.view(4, 37, 1000), t.view(4, 37).to(torch.int32)
    for red in ("mean", "none"):
        got = quack_cpp.cross_entropy(x3, t3, reduction=red)
        ref, _ = reference(x, t, reduction=red)
        assert_loss_close(got.reshape(ref.shape), ref, 1000)
    assert quack_cpp.cross_entropy(x3, t3, reduction="none").shape == (4, 37)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["row_stride", "misaligned", "transposed"])
def test_strided_logits(dtype, layout):
    v, m = 1003, 65
    if layout == "row_stride":
        base = torch.randn(m, v + 13, device="cuda").to(dtype)
        x = base[:, :v]
    elif layout == "misaligned":
        base = torch.randn(m * v + 1, device="cuda").to(dtype)
        x = base[1:].view(m, v)
    else:
        x = torch.randn(v, m, device="cuda").to(dtype).t()
    t = torch.randint(0, v, (m,), device="cuda")
    xr = x.detach().clone().requires_grad_(True)
    ref, _ = reference(xr, t, label_smoothing=0.05)
    xg = x.detach().clone().requires_grad_(True) if layout == "transposed" else x.detach().requires_grad_(True)
    loss = quack_cpp.cross_entropy(xg, t, label_smoothing=0.05)
    assert_loss_close(loss.detach(), ref.detach(), v)
    ref.backward()
    loss.backward()
    assert_grad_close(xg.grad, xr.grad, dtype)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("v", [7, 4096, 128256])
def test_inplace_backward(dtype, v):
    x, t = make(16, v, dtype)
    o = opts_for({"weight": True, "label_smoothing": 0.1}, v)
    xa = x.detach().clone().requires_grad_(True)
    la = quack_cpp.cross_entropy(xa, t, **o)
    la.backward()
    xb = x.detach().clone()
    leaf = xb.requires_grad_(True)
    lb = quack_cpp.cross_entropy(leaf, t, inplace_backward=True, **o)
    assert torch.equal(la.detach(), lb.detach())
    lb.backward()
    assert torch.equal(leaf.grad, xa.grad)
    # The gradient was written into the logits' own memory.
    assert torch.equal(leaf.detach(), xa.grad)


@gpu
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_out_of_range_targets_give_nan_rows(dtype):
    v = 1000
    x, t = make(64, v, dtype, ignore=0.0)
    bad = torch.tensor([3, 17, 40], device="cuda")
    t[bad[0]], t[bad[1]], t[bad[2]] = v, -1, 1 << 40
    xg = x.detach().clone().requires_grad_(True)
    loss = quack_cpp.cross_entropy(xg, t, reduction="none")
    loss.sum().backward()
    good = torch.ones(64, dtype=torch.bool, device="cuda")
    good[bad] = False
    assert loss[bad].isnan().all() and not loss[good].isnan().any()
    assert xg.grad[bad].isnan().all() and not xg.grad[good].isnan().any()
    ref, _ = reference(x[good], t[good], reduction="none")
    assert_loss_close(loss[good].detach(), ref, v)
    assert quack_cpp.cross_entropy(x, t).isnan()


@gpu
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_all_ignored_and_empty(reduction):
    x = torch.randn(9, 100, device="cuda", requires_grad=True)
    t = torch.full((9,), -100, device="cuda")
    loss = quack_cpp.cross_entropy(x, t, reduction=reduction, z_loss=1e-3)
    ref = F.cross_entropy(x.detach().double(), t, reduction=reduction)
    torch.testing.assert_close(loss.detach().double(), ref, equal_nan=True)
    loss.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    e = torch.empty(0, 100, device="cuda")
    te = torch.empty(0, dtype=torch.int64, device="cuda")
    got = quack_cpp.cross_entropy(e, te, reduction=reduction)
    torch.testing.assert_close(got.double(), F.cross_entropy(e.double(), te, reduction=reduction), equal_nan=True)


@gpu
def test_deterministic():
    x, t = make(4096, 4096, BF16)
    w = torch.rand(4096, device="cuda")
    a = quack_cpp.cross_entropy(x, t, weight=w, label_smoothing=0.1)
    for _ in range(3):
        assert torch.equal(quack_cpp.cross_entropy(x, t, weight=w, label_smoothing=0.1), a)


@gpu
def test_upstream_one_leaves_gradient_and_reuse_is_refused():
    x, t = make(32, 512, BF16)
    xg = x.detach().clone().requires_grad_(True)
    loss = quack_cpp.cross_entropy(xg, t)
    loss.backward(retain_graph=True)
    g1 = xg.grad.clone()
    xr = x.detach().clone().requires_grad_(True)
    reference(xr, t)[0].backward()
    assert_grad_close(g1, xr.grad, BF16)
    # A second backward through the same graph would rescale the saved
    # gradient twice: autograd's version check refuses it.
    with pytest.raises(RuntimeError):
        loss.backward()


@gpu
def test_module_matches_torch():
    v = 3000
    x, t = make(50, v, BF16)
    w = torch.rand(v, device="cuda") + 0.1
    t5 = t.clone()
    t5[t5 == -100] = 5  # ignore_index=5 below: every target in range for torch
    for kw in ({}, {"weight": w, "label_smoothing": 0.1, "reduction": "sum"}, {"ignore_index": 5}):
        t = t5 if kw.get("ignore_index") == 5 else t
        ours = quack_cpp.CrossEntropyLoss(**kw)
        theirs = torch.nn.CrossEntropyLoss(**{k: (val.double() if k == "weight" else val) for k, val in kw.items()})
        assert_loss_close(ours(x, t), theirs(x.double(), t), v)
    m = quack_cpp.CrossEntropyLoss(weight=w)
    assert "weight" in dict(m.named_buffers())


@gpu
def test_torch_compile_fullgraph():
    v = 2048
    x, t = make(64, v, BF16)

    def f(x, t):
        return quack_cpp.cross_entropy(x, t, label_smoothing=0.1, z_loss=1e-4)

    cf = torch.compile(f, fullgraph=True)
    xa = x.detach().clone().requires_grad_(True)
    la = cf(xa, t)
    la.backward()
    xb = x.detach().clone().requires_grad_(True)
    lb = f(xb, t)
    lb.backward()
    torch.testing.assert_close(la, lb)
    torch.testing.assert_close(xa.grad, xb.grad)
    with torch.no_grad():
        torch.testing.assert_close(cf(x, t), f(x, t))


@gpu
def test_cuda_graph_capture_forward_backward():
    v = 4096
    x, t = make(128, v, BF16)
    xs = x.detach().clone().requires_grad_(True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # warm-up outside the capture
            xs.grad = None
            quack_cpp.cross_entropy(xs, t, label_smoothing=0.1).backward()
    torch.cuda.current_stream().wait_stream(s)
    xs.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = quack_cpp.cross_entropy(xs, t, label_smoothing=0.1)
        loss.backward()
    new_x, new_t = make(128, v, BF16)
    with torch.no_grad():
        xs.copy_(new_x)
    t.copy_(new_t)
    graph.replay()
    torch.cuda.synchronize()
    xr = new_x.detach().clone().requires_grad_(True)
    ref, _ = reference(xr, new_t, label_smoothing=0.1)
    ref.backward()
    assert_loss_close(loss.detach(), ref.detach(), v)
    assert_grad_close(xs.grad, xr.grad, BF16)



def test_launch_reaches_the_binding(ce_validate_only):
    # The eager launch on CPU tensors, the library call turned into the
    # binding's validate-only mode (mode 1, no stream): every argument reaches
    # the C++ checks, once per call, for each gradient mode; the C++ check
    # refuses an out-of-range label_smoothing by name.
    ce = quack_cpp._cross_entropy
    x = torch.randn(6, 40, dtype=BF16)
    t = torch.randint(0, 40, (6,))
    for grad in (None, "new", "inplace"):
        loss, lse, dx = ce._launch(x.clone(), t, None, -100, 1, 0.1, 1e-4, 0.0, grad)
        assert loss.shape == () and lse.shape == (6,)
    assert ce_validate_only == ["launch"] * 3, "each call launches once"
    with pytest.raises(ValueError, match="label_smoothing"):
        ce._launch(x, t, None, -100, 1, 2.0, 0.0, 0.0, None)

def test_autograd_calls_the_library_directly_in_eager(monkeypatch, ce_validate_only):
    # Training on eager CUDA tensors skips the custom ops' dispatch: the
    # forward and backward reach _launch and _scale themselves, once each,
    # and bump the version of what they overwrite as mutates_args would (a
    # second backward, or another user of in-place logits, is refused). CPU
    # tensors stand in (_direct forced), the library call in validate-only
    # mode; any custom op call fails the test.
    ce = quack_cpp._cross_entropy
    calls = ce_validate_only

    class NoOps:
        def __getattr__(self, name):
            raise AssertionError(f"custom op {name} called in eager")

    monkeypatch.setattr(ce, "_direct", lambda t: True)
    monkeypatch.setattr(ce, "_scale", lambda dx, g: calls.append(("scale", float(g))))
    monkeypatch.setattr(torch.ops, "quack_cpp", NoOps())
    t = torch.randint(0, 40, (6,))
    # bf16, a new gradient: one launch forward, one scale backward.
    x = torch.randn(6, 40, dtype=BF16, requires_grad=True)
    loss, lse = ce._CrossEntropyFn.apply(x, t, None, -100, 1, 0.0, 0.0, 0.0, False)
    assert calls == ["launch"] and loss.shape == () and not lse.requires_grad
    (loss * 2.0).backward(retain_graph=True)
    assert calls == ["launch", ("scale", 2.0)] and x.grad.shape == x.shape
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()  # the saved gradient was rescaled in place
    # In place: the logits' version moves with the forward's write.
    calls.clear()
    y = torch.randn(6, 40, dtype=BF16, requires_grad=True)
    v = y._version
    ce._CrossEntropyFn.apply(y, t, None, -100, 1, 0.0, 0.0, 0.0, True)
    assert calls == ["launch"] and y._version > v
    # fp16: the gradient in the backward, a launch each way, no scale.
    calls.clear()
    h = torch.randn(6, 40, dtype=torch.float16, requires_grad=True)
    loss, _ = ce._CrossEntropyFn.apply(h, t, None, -100, 1, 0.0, 0.0, 0.0, False)
    loss.backward()
    assert calls == ["launch", "launch"] and h.grad.shape == h.shape
    # A second derivative is refused, naming the op (test_eager_autograd.py).
    z = torch.randn(6, 40, dtype=BF16, requires_grad=True)
    loss, _ = ce._CrossEntropyFn.apply(z, t, None, -100, 1, 0.0, 0.0, 0.0, False)
    (g,) = torch.autograd.grad(loss, z, create_graph=True)
    with pytest.raises(RuntimeError, match="^quack_cpp.cross_entropy: a second derivative"):
        g.float().pow(2).sum().backward()


@gpu
def test_opcheck():
    x, t = make(8, 300, F32)
    w = torch.rand(300, device="cuda")
    torch.library.opcheck(torch.ops.quack_cpp.cross_entropy_fwd.default,
                          (x, t, w, -100, 1, 0.1, 1e-4, 0.0, True, None))
    torch.library.opcheck(torch.ops.quack_cpp.cross_entropy_fwd.default,
                          (x, t, w, -100, 0, 0.1, 0.0, 0.0, True, torch.rand(8, device="cuda")))
    torch.library.opcheck(torch.ops.quack_cpp.cross_entropy_fwd.default,
                          (x, t, None, -100, 0, 0.0, 0.0, 20.0, False, None))
