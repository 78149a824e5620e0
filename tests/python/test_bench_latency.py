"""bench/bench_latency.py without a GPU: options, the float64 references
against torch's own CPU ops, the tolerance check, the torch peer's forward
through the side-by-side benchmarks' factories (on CPU tensors), the import
section, and the report of a recorded-shaped run."""

import pytest

from bench_loader import load

torch = pytest.importorskip("torch")
F = torch.nn.functional



lat = load("bench_latency")


def test_options():
    a = lat.parse_args([])
    assert a.small_m == [1, 4, 16, 64, 256, 1024] and a.small_n == [2048, 4096, 8192]
    assert a.host_calls == 10000 and "compile" not in a.peers and a.ops == lat.OPS
    q = lat.parse_args(["--quick", "--small-n", "8192"])
    assert q.small_m == [1, 64] and q.small_n == [8192] and q.host_calls == 2000
    for bad in (["--ops", "gelu"], ["--peers", "apex"], ["--sections", "warm"], ["--small-m", "0"],
                ["--host-calls", "2"], ["--dtype", "fp8"]):
        with pytest.raises(SystemExit):
            lat.parse_args(bad)


@pytest.mark.parametrize("op", lat.OPS)
def test_reference_is_torchs_op_in_float64(op):
    inputs = lat.make_inputs(torch, op, 5, 300, torch.float32, seed=1, device="cpu")
    x = inputs[0].double()
    want = {"rmsnorm": lambda: F.rms_norm(x, (300,), inputs[1].double(), lat.EPS),
            "layernorm": lambda: F.layer_norm(x, (300,), inputs[1].double(), inputs[2].double(), lat.EPS),
            "softmax": lambda: torch.softmax(x, -1),
            "cross_entropy": lambda: F.cross_entropy(x, inputs[1])}[op]()
    got = lat.reference(torch, op, inputs)
    assert got.dtype == torch.float64 and got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)


def test_within_bounds():
    want = torch.tensor([[0.5, -3.0, 100.0]], dtype=torch.float64)
    ok, ratio = lat.within(torch, want.to(torch.bfloat16), want, "bf16")
    assert ok and ratio <= 1.0
    assert not lat.within(torch, want.float() + 0.05, want, "fp32")[0]          # 0.05 against 1e-5
    assert not lat.within(torch, torch.full_like(want, float("nan")), want, "bf16")[0]
    assert not lat.within(torch, want[:, :2], want, "fp32")[0]                    # a wrong shape
    assert lat.within(torch, (want * (1 + 2 ** -8)).float(), want, "bf16")[0]     # one bf16 ulp
    assert not lat.within(torch, (want * 1.02).float(), want, "bf16")[0]          # 2% off


@pytest.mark.parametrize("n", lat.FIRST_N)
def test_layernorm_bound_scales_with_the_terms(n):
    """torch eager's layernorm, given the fp32 parameters in bf16 (as the
    side-by-side factory casts them), at the first-calls section's shapes:
    outside a bound relative to |y| (as it was on the H200: 1.06), inside
    the bound relative to |x_hat w| + |b|; a 2% error stays outside."""
    inputs = lat.make_inputs(torch, "layernorm", lat.FIRST_M, n, torch.bfloat16, seed=n, device="cpu")
    x, w, b = inputs
    got = F.layer_norm(x, (n,), w.to(x.dtype), b.to(x.dtype), lat.EPS)
    want, scale = lat.expected(torch, "layernorm", inputs)
    assert not lat.within(torch, got, want, "bf16")[0]
    ok, ratio = lat.within(torch, got, want, "bf16", scale)
    assert ok, ratio
    assert not lat.within(torch, (want * 1.02).float(), want, "bf16", scale)[0]
    # Elsewhere the scale is |want|.
    sm = lat.make_inputs(torch, "softmax", 3, 64, torch.float32, seed=1, device="cpu")
    want = lat.reference(torch, "softmax", sm)
    assert torch.equal(lat.expected(torch, "softmax", sm)[1], want.abs())


@pytest.mark.parametrize("op", lat.OPS)
def test_torch_peer_through_the_benchmark_factories(op):
    """The 'torch' forward as built for the GPU run, on CPU tensors: the
    factory plumbing, the call and the tolerance together."""
    fwd = lat.make_forward(torch, op, "torch")
    for seed in (1, 2):  # a second input set rebuilds the per-input callables
        inputs = lat.make_inputs(torch, op, 7, 512, torch.bfloat16, seed=seed, device="cpu")
        want, scale = lat.expected(torch, op, inputs)
        ok, ratio = lat.within(torch, fwd(*inputs), want, "bf16", scale)
        assert ok, f"{op}: error / bound {ratio}"


def test_model_bytes():
    assert lat.model_bytes("softmax", 4, 1024, 2) == 2 * 4 * 1024 * 2
    assert lat.model_bytes("rmsnorm", 4, 1024, 2) == 2 * 4 * 1024 * 2 + 1024 * 2
    assert lat.model_bytes("cross_entropy", 4, 1024, 2) == 4 * 1024 * 2 + 4 * 8 + 4


def test_import_section(monkeypatch):
    monkeypatch.setattr(lat, "IMPORTS", {"torch": "import json", "quack_cpp": "import no_such_module_xyz"})
    rec = {"import": []}
    lat.section_import(["quack_cpp", "liger"], rec)
    by = {c["impl"]: c for c in rec["import"]}
    assert set(by) == {"torch", "quack_cpp"} and by["torch"]["s"] >= 0.0
    assert "no_such_module_xyz" in by["quack_cpp"]["error"]


def test_report():
    rec = {"date": "2026-11-30", "commit": "abc1234", "gpu": "H200", "clocks": "1980 MHz", "torch": "2.11",
           "dtype": "bf16", "peers": ["quack_cpp", "torch", "quack"], "versions": {"quack": "0.6.5"},
           "small": [{"op": "softmax", "M": 1, "N": 4096, "impl": "quack_cpp", "us": 2.0, "gbps": 8.2, "ok": True},
                     {"op": "softmax", "M": 1, "N": 4096, "impl": "torch", "us": 3.5, "gbps": 4.7, "ok": True},
                     {"op": "softmax", "M": 1, "N": 4096, "impl": "quack", "us": 1.0, "gbps": 16.4, "ok": False,
                      "err_ratio": 7.5}],
           "host": [{"op": "softmax", "impl": "quack_cpp", "us": 9.1, "ok": True},
                    {"op": "softmax", "impl": "torch", "us": 6.0, "ok": True},
                    {"op": "softmax", "impl": "quack", "error": "import failed: no module"}],
           "first": [{"op": "softmax", "impl": "quack_cpp", "cold_ms": 0.9, "new_n_ms": 0.1, "warm_ms": 0.02,
                      "ok": True}],
           "import": [{"impl": "torch", "statement": "import torch", "s": 1.5}]}
    text = lat.markdown(rec)
    # The fastest correct cell is bold; a WRONG one is never "best".
    assert "| 4096 | 1 | **2.00 (8)** | 3.50 (5) | 1.00 WRONG (16) |" in text
    assert "| softmax | 9.10 | 6.00 | n/a |" in text
    assert "| softmax | quack_cpp | 0.9 | 0.1 | 0.020 |" in text
    assert "| torch eager | `import torch` | 1.50 |" in text
    assert "1 WRONG, 1 n/a" in text and "QuACK softmax M = 1 N = 4096 (error / bound 7.50)" in text


def test_latency_probe_runs_each_peer_and_names_the_ones_that_cannot(capsys):
    # bench/latency_probe.py's loop on CPU tensors: torch's forward runs and
    # is timed; an unknown implementation is reported n/a with its reason.
    probe = load("latency_probe")
    probe.main(["--device", "cpu", "--ops", "rmsnorm,softmax", "--peers", "torch,nosuchpeer", "--n", "64",
                "--calls", "2", "--dtype", "fp32"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    for op in ("rmsnorm", "softmax"):
        (ran,) = [ln for ln in lines if ln.startswith(op) and " torch " in ln]
        assert "M=1 N=64: wall time a call" in ran
        (na,) = [ln for ln in lines if ln.startswith(op) and "nosuchpeer" in ln]
        assert "n/a:" in na


def test_report_with_a_peer_that_failed_to_import():
    # main() records such a peer as one shapeless cell a section: the small
    # table shows it n/a in every row and names the reason under Checks.
    rec = {"date": "2026-12-06", "commit": "abc1234", "gpu": "H100", "clocks": "1980 MHz", "torch": "2.11",
           "dtype": "bf16", "peers": ["quack_cpp", "liger"], "versions": {},
           "small": [{"op": "cross_entropy", "impl": "liger", "error": "import failed: no module"},
                     {"op": "cross_entropy", "M": 1, "N": 2048, "impl": "quack_cpp", "us": 3.0, "gbps": 1.4,
                      "ok": True},
                     {"op": "cross_entropy", "M": 4, "N": 2048, "impl": "quack_cpp", "us": 5.0, "gbps": 3.3,
                      "ok": True}],
           "host": [], "first": [], "import": []}
    text = lat.markdown(rec)
    assert "| 2048 | 1 | **3.00 (1)** | n/a |" in text
    assert "| 2048 | 4 | **5.00 (3)** | n/a |" in text
    assert "- n/a: Liger cross_entropy: import failed: no module" in text
