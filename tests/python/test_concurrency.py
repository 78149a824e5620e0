"""Concurrency and state, every op forward and backward (issue 7):

* CUDA-graph capture of forward + backward, replayed on new inputs, equals
  eager calls on the same inputs bit for bit (every output and gradient);
* the op launched on four streams at once (one held back by a sleep so the
  launches overlap) equals the same calls one after another, bit for bit;
* an invalid call raises an error naming the argument and leaves the
  library and the CUDA context usable: the next valid call equals the
  earlier one bit for bit, and nothing is pending on the device.

With two GPUs, each op on the non-current one equals the same call on the
current one bit for bit, and an argument on the other device is refused by
name.

Each case builds fresh random inputs from a seed, poisons the outputs'
memory (the caching allocator hands back NaN-filled blocks) and compares
outputs and gradients by bits. GPU only: skipped, with the reason, without
one.
"""
import pytest
import torch

import quack_cpp

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32


def _rand(gen, *shape, dtype=F32, scale=1.0):
    return (torch.randn(*shape, device="cuda", generator=gen) * scale).to(dtype)


def _poison_allocator(nbytes):
    """Fill a block of the caching allocator with NaN and free it, so the
    outputs allocated next start as NaN rather than as earlier results."""
    junk = torch.full((nbytes // 4 + 1024,), float("nan"), device="cuda")
    del junk


class Case:
    """One op's forward + backward: make(seed) -> (leaves, others);
    run(leaves, others) -> every output and gradient; bad(leaves, others)
    raises."""

    def __init__(self, name, make, run, bad, error):
        self.name, self.make, self.run, self.bad, self.error = name, make, run, bad, error

    def __repr__(self):
        return self.name


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


def _backward(outs, grads, leaves):
    for x in leaves:
        x.grad = None
    torch.autograd.backward(outs, grads)
    return [x.grad for x in leaves]


# RMSNorm with residual, prenorm and weight: y, h, dx, dresidual, dweight.
def _rms_make(seed, m=96, n=4100, dtype=BF16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    leaves = [_leaf(_rand(g, m, n, dtype=dtype)), _leaf(_rand(g, m, n, dtype=F32)), _leaf(_rand(g, n, dtype=F32))]
    others = [_rand(g, m, n, dtype=dtype), _rand(g, m, n, dtype=F32)]  # upstream gradients of y and h
    return leaves, others


def _rms_run(leaves, others):
    x, r, w = leaves
    y, h = quack_cpp.rmsnorm(x, w, residual=r, prenorm=True, residual_dtype=F32)
    return [y, h] + _backward([y, h], others, leaves)


def _rms_bad(leaves, others):
    x, r, w = leaves
    quack_cpp.rmsnorm(x, w[:-1].detach(), residual=r)


# LayerNorm with weight and bias: y, dx, dweight, dbias.
def _rms_plain_make(seed, m=12, n=524288, dtype=BF16):
    # One dtype, no residual: 16-bit rows past 128K take the grid kernel (a
    # cooperative launch whose CTAs wait for one another).
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [_leaf(_rand(g, m, n, dtype=dtype)), _leaf(_rand(g, n, dtype=dtype))], [_rand(g, m, n, dtype=dtype)]


def _rms_plain_run(leaves, others):
    x, w = leaves
    y = quack_cpp.rmsnorm(x, w)
    return [y] + _backward([y], others, leaves)


def _rms_plain_bad(leaves, others):
    x, w = leaves
    quack_cpp.rmsnorm(x, w[:-1].detach())


def _ln_make(seed, m=80, n=3000, dtype=F16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    leaves = [_leaf(_rand(g, m, n, dtype=dtype)), _leaf(_rand(g, n, dtype=F32)), _leaf(_rand(g, n, dtype=F32))]
    return leaves, [_rand(g, m, n, dtype=dtype)]


def _ln_run(leaves, others):
    x, w, b = leaves
    y = quack_cpp.layernorm(x, w, b)
    return [y] + _backward([y], others, leaves)


def _ln_bad(leaves, others):
    x, w, b = leaves
    quack_cpp.layernorm(x, w, b[:-1].detach())


# Softmax / log-softmax: y, dx; a short and a long row.
def _sm_make(n, dtype):
    def make(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        return [_leaf(_rand(g, 64, n, dtype=dtype, scale=3.0))], [_rand(g, 64, n, dtype=dtype)]
    return make


def _sm_run(fn):
    def run(leaves, others):
        y = fn(leaves[0])
        return [y] + _backward([y], others, leaves)
    return run


def _sm_bad(fn):
    def bad(leaves, others):
        fn(leaves[0].detach().to(torch.int32))
    return bad


# Cross-entropy: loss, dlogits. Plain options (the two-pass gradient from
# 32000 classes), and the general ones (class weights with smoothing, softcap,
# z_loss) with a per-row loss.
def _ce_make(v, dtype, reduction):
    def make(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        m = 48
        t = torch.randint(0, v, (m,), device="cuda", generator=g)
        t[::7] = -100
        w = torch.rand(v, device="cuda", generator=g) + 0.5
        up = _rand(g, m) if reduction == "none" else _rand(g, 1)[0]
        return [_leaf(_rand(g, m, v, dtype=dtype, scale=2.0))], [t, w, up]
    return make


def _ce_run(general, reduction):
    def run(leaves, others):
        t, w, up = others
        opts = dict(weight=w, label_smoothing=0.1, softcap=20.0, z_loss=1e-4) if general else \
            dict(label_smoothing=0.1)
        loss = quack_cpp.cross_entropy(leaves[0], t, reduction=reduction, **opts)
        return [loss] + _backward([loss], [up], leaves)
    return run


def _ce_bad(leaves, others):
    t = others[0]
    quack_cpp.cross_entropy(leaves[0], t.float())


SM, LSM = quack_cpp.softmax, quack_cpp.log_softmax
CASES = [
    Case("rmsnorm", _rms_make, _rms_run, _rms_bad, "weight must have shape"),
    Case("layernorm", _ln_make, _ln_run, _ln_bad, "bias must have shape"),
    Case("rmsnorm_524288_bf16_grid", _rms_plain_make, _rms_plain_run, _rms_plain_bad, "weight must have shape"),
    Case("layernorm_524288_f32_grid", lambda seed: _ln_make(seed, m=8, n=524288, dtype=F32), _ln_run, _ln_bad,
         "bias must have shape"),
    Case("softmax_4096_bf16", _sm_make(4096, BF16), _sm_run(SM), _sm_bad(SM), "x must be"),
    Case("softmax_100000_f32", _sm_make(100000, F32), _sm_run(SM), _sm_bad(SM), "x must be"),
    Case("log_softmax_8191_f16", _sm_make(8191, F16), _sm_run(LSM), _sm_bad(LSM), "x must be"),
    Case("cross_entropy_4096_bf16", _ce_make(4096, BF16, "mean"), _ce_run(False, "mean"), _ce_bad,
         "target must hold"),
    Case("cross_entropy_50304_bf16", _ce_make(50304, BF16, "mean"), _ce_run(False, "mean"), _ce_bad,
         "target must hold"),
    Case("cross_entropy_general_32000_f32", _ce_make(32000, F32, "none"), _ce_run(True, "none"), _ce_bad,
         "target must hold"),
]


def _same_bits(got, want, what):
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: output {i} shape/dtype"
        assert torch.equal(a.view(torch.uint8) if a.dim() else a.reshape(1).view(torch.uint8),
                           b.view(torch.uint8) if b.dim() else b.reshape(1).view(torch.uint8)), \
            f"{what}: output {i} differs"


def _clone(outs):
    return [o.detach().clone() for o in outs]


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_graph_replay_equals_eager(case):
    leaves, others = case.make(0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up outside the capture
            case.run(leaves, others)
    torch.cuda.current_stream().wait_stream(side)
    for x in leaves:
        x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = case.run(leaves, others)
    for seed in (1, 2):
        new_leaves, new_others = case.make(seed)
        with torch.no_grad():
            for s, n in zip(leaves + others, new_leaves + new_others):
                s.copy_(n)
        _poison_allocator(1 << 24)
        graph.replay()
        torch.cuda.synchronize()
        replayed = _clone(captured)
        eager = _clone(case.run(new_leaves, new_others))
        torch.cuda.synchronize()
        _same_bits(replayed, eager, f"{case.name} replay {seed}")


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_streams_at_once_equal_one_after_another(case):
    inputs = [case.make(seed) for seed in range(4)]
    want = [_clone(case.run(*inp)) for inp in inputs]
    torch.cuda.synchronize()
    _poison_allocator(1 << 26)
    streams = [torch.cuda.Stream() for _ in inputs]
    got = []
    for k, (s, inp) in enumerate(zip(streams, inputs)):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            if k == 0:
                torch.cuda._sleep(20_000_000)  # ~10 ms: the other streams' launches run meanwhile
            got.append(case.run(*inp))
    torch.cuda.synchronize()
    for k, (g, w) in enumerate(zip(got, want)):
        _same_bits(_clone(g), w, f"{case.name} stream {k}")


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_invalid_call_leaves_the_library_usable(case):
    leaves, others = case.make(3)
    want = _clone(case.run(leaves, others))
    with pytest.raises((TypeError, ValueError), match=case.error):
        case.bad(leaves, others)
    torch.cuda.synchronize()  # nothing failed on the device
    got = _clone(case.run(leaves, others))
    torch.cuda.synchronize()
    _same_bits(got, want, f"{case.name} after an invalid call")


_TWO_GPUS = torch.cuda.is_available() and torch.cuda.device_count() >= 2


@pytest.mark.skipif(not _TWO_GPUS, reason="needs 2 GPUs")
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_non_current_device_gives_the_same_bits(case):
    """The op on cuda:1 while cuda:0 is current: its outputs and gradients
    on cuda:1, bit-equal to the same call on cuda:0 (same GPU model, same
    kernels), the current device unchanged; a leaf moved to the other
    device raises an error naming the argument."""
    assert torch.cuda.current_device() == 0
    leaves, others = case.make(5)
    want = _clone(case.run(leaves, others))
    far_leaves = [_leaf(x.detach().to("cuda:1")) for x in leaves]
    far_others = [o.to("cuda:1") for o in others]
    got = case.run(far_leaves, far_others)
    assert torch.cuda.current_device() == 0
    assert all(g.device == torch.device("cuda:1") for g in got)
    torch.cuda.synchronize(1)
    _same_bits([g.detach().cpu() for g in got], [w.cpu() for w in want], f"{case.name} on cuda:1")
    # One argument on the other device.
    if len(far_leaves) > 1:
        mixed = far_leaves[:-1] + [_leaf(far_leaves[-1].detach().to("cuda:0"))]
        with pytest.raises(ValueError, match="must be on"):
            case.run(mixed, far_others)
    elif case.name.startswith("cross_entropy"):
        with pytest.raises(ValueError, match="target must be on logits' device cuda:1, got cuda:0"):
            case.run(far_leaves, [others[0]] + far_others[1:])
    torch.cuda.synchronize(1)
