"""The eager loss-only path of quack_cpp.cross_entropy on a CPU, against an
emulated library call: the fast path (_cross_entropy._fast_loss: one binding
call in mode 3 where no workspace is needed, the query's answer then the
launch where one is, as the general path's _launch) must hand the library
the arguments the general path hands it, and every other call must reach the
general path. CPU tensors pose as CUDA tensors; the binding's cross_entropy
is replaced by a float64 emulation that reads and writes memory only
through the raw pointers and strides it was given (as
test_launch_emulated.py does for rmsnorm)."""
import types

import pytest
import torch

import quack_cpp
from quack_cpp import _common, _cross_entropy as ce
from test_launch_emulated import _matrix, _raw

F32, BF16 = torch.float32, torch.bfloat16


def _emulate(rows, cols, logits_ptr, dtype, logits_stride, target_ptr, target64, target_stride, weight_ptr,
             ignore_index, reduction, label_smoothing, z_loss, softcap, loss_ptr, lse_ptr):
    """The loss (no softcap) in float64, torch's semantics with class
    weights, written as float32 through loss_ptr (and lse through lse_ptr)."""
    assert softcap == 0.0
    x = _matrix(logits_ptr, dtype, logits_stride, rows, cols).double()
    t = _raw(target_ptr, (rows - 1) * target_stride + 1, torch.int64 if target64 else torch.int32)[::target_stride]
    w = _raw(weight_ptr, cols, F32).double() if weight_ptr else torch.ones(cols, dtype=torch.float64)
    lse = torch.logsumexp(x, dim=-1)
    counted = t != ignore_index
    bad = counted & ((t < 0) | (t >= cols))
    tc = t.clamp(0, cols - 1).long()
    xt, wt = x.gather(1, tc[:, None])[:, 0], w[tc]
    row = (1 - label_smoothing) * wt * (lse - xt) + label_smoothing / cols * (w * (lse[:, None] - x)).sum(-1)
    z = z_loss * lse * lse
    row = torch.where(counted, row, 0.0)
    z = torch.where(counted, z, 0.0)
    wt = torch.where(counted, wt, 0.0)
    row = torch.where(bad, float("nan"), row)
    if reduction == 0:
        out = row + z
    elif reduction == 1:
        n, wsum = counted.sum(), wt.sum()
        out = (row.sum() / wsum + z.sum() / n) if wsum != 0 else torch.tensor(float("nan"), dtype=torch.float64)
    else:
        out = (row + z).sum()
    _raw(loss_ptr, rows if reduction == 0 else 1, F32).copy_(out.reshape(-1).float())
    if lse_ptr:
        _raw(lse_ptr, rows, F32).copy_(lse.float())


@pytest.fixture
def lib(monkeypatch):
    """CPU tensors pose as CUDA ones; the binding's cross_entropy is
    emulated. Returns the list of its calls: (mode, the library's arguments
    but the workspace, mode and stream, ws_ptr, ws_bytes)."""
    calls = []

    def cross_entropy(*a, **shard):
        assert not shard
        args, (ws_ptr, ws_bytes, mode, stream) = a[:19], a[19:]
        calls.append((mode, args, ws_ptr, ws_bytes))
        rows, reduction = args[0], args[10]
        # As the library: a reduced loss of two rows or more needs the rows'
        # shares; one row's own kernel writes it (ce_one_row_loss).
        need = 64 if reduction != 0 and rows > 1 else 0
        if mode == 2 or (mode == 3 and need):
            return need
        assert mode in (0, 3) and stream == 12345
        assert ws_bytes == need and (ws_ptr != 0) == (need > 0)
        dx_ptr, dloss_ptr = args[16], args[18]
        assert dx_ptr == 0 and dloss_ptr == 0
        _emulate(*args[:16])
        return 0

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: self.device.type in ("cpu", "cuda")))
    monkeypatch.setattr(ce, "_C", types.SimpleNamespace(cross_entropy=cross_entropy))
    monkeypatch.setattr(ce, "_raw_stream", lambda device: 12345)
    monkeypatch.setattr(ce, "_LOSS_TEMPLATE", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(_common, "_current_device", lambda: -1)  # CPU tensors' get_device()
    return calls


def _targets(m, v, dtype=torch.int64, ignored=()):
    t = torch.randint(0, v, (m,), dtype=dtype)
    for r in ignored:
        t[r] = -100
    return t


# (logits, target, keywords): calls the fast path takes.
_FAST = {
    "mean, 5 rows, two ignored": lambda: (torch.randn(5, 96).to(BF16), _targets(5, 96, ignored=(1, 3)), {}),
    "one row: a single library call": lambda: (torch.randn(1, 96).to(BF16), _targets(1, 96), {}),
    "sum, int32 targets, smoothing and z-loss": lambda: (
        torch.randn(7, 50) * 3, _targets(7, 50, torch.int32), dict(reduction="sum", label_smoothing=0.1,
                                                                   z_loss=1e-3)),
    "none, 3-D logits": lambda: (torch.randn(2, 3, 40).to(BF16), _targets(6, 40).view(2, 3),
                                 dict(reduction="none")),
    "ignore_index of a class": lambda: (torch.randn(4, 30), _targets(4, 30), dict(ignore_index=3)),
    "every row ignored (NaN mean)": lambda: (torch.randn(3, 30), _targets(3, 30, ignored=(0, 1, 2)), {}),
}
# Calls the fast path must leave to the general path.
_GENERAL = {
    "class weights": lambda: (torch.randn(5, 40), _targets(5, 40), dict(weight=torch.rand(40))),
    "return_lse": lambda: (torch.randn(5, 40), _targets(5, 40), dict(return_lse=True)),
    "padded logits rows": lambda: (torch.randn(5, 64)[:, :40], _targets(5, 40), {}),
    "strided target": lambda: (torch.randn(5, 40), _targets(10, 40)[::2], {}),
    "an int label_smoothing": lambda: (torch.randn(5, 40), _targets(5, 40), dict(label_smoothing=0)),
}


@pytest.mark.parametrize("case", list(_FAST) + list(_GENERAL))
def test_the_fast_path_makes_the_general_paths_call(lib, monkeypatch, case):
    torch.manual_seed(len(case))
    logits, target, kw = (_FAST.get(case) or _GENERAL[case])()
    taken = []
    real = ce._fast_loss
    monkeypatch.setattr(ce, "_fast_loss", lambda *a: taken.append(real(*a)) or taken[-1])
    out = quack_cpp.cross_entropy(logits, target, **kw)
    # The fast path's loss, or (None) the general path's.
    assert len(taken) <= 1 and bool(taken and taken[0] is not None) == (case in _FAST)
    public = list(lib)
    lib.clear()
    red = ce._REDUCTIONS[kw.get("reduction", "mean")]
    weight = kw.get("weight")
    want = ce._launch(logits, target, weight, kw.get("ignore_index", -100), red,
                      float(kw.get("label_smoothing", 0.0)), float(kw.get("z_loss", 0.0)), 0.0, None,
                      want_lse=bool(kw.get("return_lse")))[0]
    general = list(lib)
    if case in _FAST:
        # One call where no workspace is needed, else the query's answer
        # and the launch with it (both paths).
        needs_ws = red != 0 and target.numel() > 1
        assert [c[0] for c in public] == ([3, 0] if needs_ws else [3])
        assert [c[0] for c in general] == [c[0] for c in public]
        # The same library arguments but for the loss's pointer.
        (fa, ga) = public[-1][1], general[-1][1]
        assert fa[:14] == ga[:14] and fa[15:] == ga[15:]
        assert out.dtype == F32 and out.shape == (target.shape if red == 0 else ())
        torch.testing.assert_close(out, want, rtol=0, atol=0, equal_nan=True)
    else:
        # The general path's calls: mode 3, then 0 where it answered a size.
        assert [c[0] for c in public] == [c[0] for c in general] and [c[0] for c in public] in ([3], [3, 0])
        loss = out[0] if isinstance(out, tuple) else out
        torch.testing.assert_close(loss, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("case", list(_FAST))
def test_the_fast_paths_loss_matches_float64(lib, case):
    torch.manual_seed(len(case) + 1)
    logits, target, kw = _FAST[case]()
    out = quack_cpp.cross_entropy(logits, target, **kw)
    t = target.reshape(-1).long()
    x = logits.reshape(-1, logits.shape[-1]).double()
    ref = torch.nn.functional.cross_entropy(x, t, ignore_index=kw.get("ignore_index", -100),
                                            reduction=kw.get("reduction", "mean"),
                                            label_smoothing=kw.get("label_smoothing", 0.0))
    zl = kw.get("z_loss", 0.0)
    if zl:
        counted = t != kw.get("ignore_index", -100)
        z = zl * torch.logsumexp(x, -1) ** 2 * counted
        ref = ref + (z.sum() if kw.get("reduction") == "sum" else z.sum() / counted.sum())
    torch.testing.assert_close(out.double().reshape(ref.shape), ref, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_bad_arguments_reach_the_general_paths_errors(lib):
    x, t = torch.randn(3, 20), _targets(3, 20)
    with pytest.raises(ValueError, match="reduction"):
        quack_cpp.cross_entropy(x, t, reduction="avg")
    with pytest.raises(ValueError, match="target"):
        quack_cpp.cross_entropy(x, _targets(4, 20))
    with pytest.raises(TypeError, match="target"):
        quack_cpp.cross_entropy(x, t.float())
    with pytest.raises(ValueError, match="label_smoothing"):
        quack_cpp.cross_entropy(x, t, label_smoothing=1.5)
    assert not lib, "no library call for a refused argument"


def test_logits_that_need_a_gradient_take_it_only_when_one_is_to_come(lib, monkeypatch):
    taken = []
    real = ce._fast_loss
    monkeypatch.setattr(ce, "_fast_loss", lambda *a: taken.append(real(*a)) or taken[-1])
    x, t = torch.randn(3, 20, requires_grad=True), _targets(3, 20)
    with torch.no_grad():
        quack_cpp.cross_entropy(x, t)
    assert taken[-1] is not None and [c[0] for c in lib] == [3, 0]
    assert real(x, t, -100, "mean", 0.0, 0.0) is None, "with grad enabled: the autograd path"


def test_the_loss_template_is_not_kept_from_a_capture(lib, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    quack_cpp.cross_entropy(torch.randn(1, 20), _targets(1, 20))
    assert ce._LOSS_TEMPLATE == {}
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    quack_cpp.cross_entropy(torch.randn(1, 20), _targets(1, 20))
    assert list(ce._LOSS_TEMPLATE) == [-1]
