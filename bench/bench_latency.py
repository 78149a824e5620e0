"""Small batches, per-call host cost, first-call latency and import time,
every op, side by side (issue 6's "also measured").

    python3 bench/bench_latency.py [--ops rmsnorm,layernorm,softmax,cross_entropy]
        [--dtype bf16] [--small-m 1,4,16,64,256,1024] [--small-n 2048,4096,8192]
        [--host-calls 10000] [--peers quack_cpp,torch,liger,quack]
        [--sections small,host,first,import] [--quick] [--out F.md] [--json F.json]
        [--commit SHA]

Sections, each for every op's forward (RMSNorm with a weight, LayerNorm with
weight and bias, softmax, cross-entropy's mean loss) and every implementation:

* small (inference decode): M rows of N at every (M, N), 20 calls captured in
  one CUDA graph, replayed; us a call and GB/s of the model bytes. The
  captured outputs are checked against float64 after a replay.
* host: M = 1, N = 4096, eager calls in a loop (interleaved rounds, the
  median round), wall us a call including launch: the cost of the Python
  path and the dispatch when the GPU is idle.
* first: the first call of the process at one shape, then of a new N, then
  a warm call, wall ms: we compile nothing at run time; JIT peers compile
  per shape.
* import: `import <package>` in a fresh interpreter, s (torch's own import
  given as the baseline).

Peers: the same calls as the op's side-by-side benchmark (bench_<op>.py),
torch eager as torch's own op; torch.compile is left out (its compile
dominates every first call and it adds nothing to a host-cost comparison
with torch eager) unless --peers names it. A peer that cannot run is n/a
with its reason.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_rmsnorm import dist_version, git_commit, gpu_clocks, log, short_reason  # noqa: E402
from sidebyside import save  # noqa: E402

OPS = ["rmsnorm", "layernorm", "softmax", "cross_entropy"]
ALL_PEERS = ["quack_cpp", "torch", "compile", "liger", "quack"]
DEFAULT_PEERS = ["quack_cpp", "torch", "liger", "quack"]
SECTIONS = ["small", "host", "first", "import"]
TITLE = {"quack_cpp": "quack_cpp", "torch": "torch eager", "compile": "torch.compile", "liger": "Liger",
         "quack": "QuACK"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# |out - ref| <= TOL * max(1, |ref|): two roundings to the output dtype.
TOL = {"bf16": 2 * 2.0 ** -8, "fp16": 2 * 2.0 ** -11, "fp32": 1e-5}
EPS = 1e-6
# The import of each implementation's package (a fresh interpreter each).
IMPORTS = {"torch": "import torch", "quack_cpp": "import quack_cpp",
           "liger": "import liger_kernel.ops.rms_norm", "quack": "import quack"}
FIRST_N = (5120, 3584)  # N values no other section uses
FIRST_M = 256


def csv(kind):
    return lambda s: [kind(v) for v in s.split(",") if v]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=csv(str), default=OPS)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--small-m", type=csv(int), default=None, help="[1,4,16,64,256,1024; --quick: 1,64]")
    p.add_argument("--small-n", type=csv(int), default=None, help="[2048,4096,8192; --quick: 4096]")
    p.add_argument("--graph-calls", type=int, default=20)
    p.add_argument("--host-calls", type=int, default=None, help="[10000; --quick: 2000]")
    p.add_argument("--peers", type=csv(str), default=DEFAULT_PEERS)
    p.add_argument("--sections", type=csv(str), default=SECTIONS)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--commit", default=None)
    a = p.parse_args(argv)
    for name, given, allowed in (("--ops", a.ops, OPS), ("--peers", a.peers, ALL_PEERS),
                                 ("--sections", a.sections, SECTIONS)):
        for v in given:
            if v not in allowed:
                p.error(f"{name}: unknown {v!r}; choose from {','.join(allowed)}")
    if a.small_m is None:
        a.small_m = [1, 64] if a.quick else [1, 4, 16, 64, 256, 1024]
    if a.small_n is None:
        a.small_n = [4096] if a.quick else [2048, 4096, 8192]
    if a.host_calls is None:
        a.host_calls = 2000 if a.quick else 10000
    if min(a.small_m + a.small_n) < 1 or a.host_calls < 5 or a.graph_calls < 1:
        p.error("--small-m, --small-n, --host-calls and --graph-calls must be positive (host calls >= 5)")
    return a


# --------------------------------------------------------------------------
# Ops: inputs, a float64 reference, the model bytes, and each
# implementation's forward (the calls of bench_<op>.py).
# --------------------------------------------------------------------------

def make_inputs(torch, op, m, n, dtype, seed, device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=g)
    x = (randn(m, n) * (3.0 if op in ("softmax", "cross_entropy") else 1.0)).to(dtype)
    if op == "rmsnorm":
        return (x, (1.0 + 0.1 * randn(n)).to(dtype))
    if op == "layernorm":  # fp32 parameters, as mixed-precision training keeps them
        return (x, 1.0 + 0.1 * randn(n), 0.1 * randn(n))
    if op == "softmax":
        return (x,)
    return (x, torch.randint(0, n, (m,), device=device, generator=g))


def _layernorm_terms(torch, inputs):
    """float64 (x_hat * w, b) of layernorm: its output is their sum."""
    x = inputs[0].double()
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + EPS) * inputs[1].double(), inputs[2].double()


def reference(torch, op, inputs):
    """The op's output in float64."""
    import torch.nn.functional as F
    x = inputs[0].double()
    if op == "rmsnorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * inputs[1].double()
    if op == "layernorm":
        scaled, b = _layernorm_terms(torch, inputs)
        return scaled + b
    if op == "softmax":
        return torch.softmax(x, -1)
    return F.cross_entropy(x, inputs[1])


def model_bytes(op, m, n, es):
    """Bytes an ideal kernel moves: read x, write y (not for the loss), the
    parameters once, the targets."""
    if op == "rmsnorm":
        return 2 * m * n * es + n * es
    if op == "layernorm":
        return 2 * m * n * es + 2 * n * 4
    if op == "softmax":
        return 2 * m * n * es
    return m * n * es + m * 8 + 4


def expected(torch, op, inputs):
    """(float64 output, the magnitude an element's rounding error scales
    with): |want|, and for layernorm |x_hat * w| + |b| -- the terms before
    their sum, whose rounding survives it. (A peer given the fp32 parameters
    in x's dtype, as autocast casts them for torch eager, rounds w and b:
    near y = 0 that error is relative to the terms, not to y; torch eager
    measured 1.06 of a |want|-relative bound on the H200, eleventh
    session.)"""
    if op == "layernorm":
        scaled, b = _layernorm_terms(torch, inputs)
        return scaled + b, scaled.abs() + b.abs()
    want = reference(torch, op, inputs)
    return want, want.abs()


def within(torch, got, want, dtname, scale=None):
    """(ok, max error / bound); the bound is TOL relative to `scale` (default
    |want|), at least TOL absolute."""
    got = got.detach().double()
    if got.shape != want.shape:
        return False, float("inf")
    bound = TOL[dtname] * torch.clamp(want.abs() if scale is None else scale, min=1.0)
    ratio = ((got - want).abs() / bound).max().item() if want.numel() else 0.0
    return ratio <= 1.0 and got.isfinite().all().item(), ratio


def make_forward(torch, op, key):
    """forward(*inputs) -> output, for implementation `key` of `op`; raises
    when the peer cannot run it."""
    if op == "rmsnorm":
        import bench_rmsnorm
        impl = bench_rmsnorm.IMPL_CLASSES[key](key)
        impl.load(torch, EPS)
        if not impl.ok:
            raise RuntimeError(impl.reason)
        return lambda x, w: impl.fn(x, w, EPS)
    if op == "layernorm":
        import bench_layernorm
        factory = bench_layernorm.make_impl(key, torch)
        return _per_inputs(lambda x, w, b: factory(x, w, b, x)[0])
    if op == "softmax":
        import bench_softmax
        factory = bench_softmax.make_impl(key, torch)
        return _per_inputs(lambda x: factory(x, x, x)[0])
    import bench_cross_entropy
    loss, _, _ = bench_cross_entropy.make_impl(key, torch)

    def ce(x, t):
        with torch.no_grad():
            return loss(x, t)
    return ce


def _per_inputs(build):
    """forward(*inputs) from build(*inputs) -> callable, built once per set of
    input tensors (the side-by-side factories close over their inputs; the
    set is held while cached, so its ids cannot be reused)."""
    cache = {}

    def fwd(*inputs):
        k = tuple(id(t) for t in inputs)
        if k not in cache:
            cache.clear()
            cache[k] = (inputs, build(*inputs))
        return cache[k][1]()
    return fwd


# --------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------

def section_small(torch, a, fwds, rec):
    dtype = getattr(torch, DTYPES[a.dtype])
    es = torch.empty((), dtype=dtype).element_size()
    for op, impls in fwds.items():
        for n in a.small_n:
            for m in a.small_m:
                inputs = make_inputs(torch, op, m, n, dtype, seed=m * 7 + n)
                want, scale = expected(torch, op, inputs)
                for key, fwd in impls.items():
                    where = f"small {op} {a.dtype} M={m} N={n}"
                    cell = {"op": op, "M": m, "N": n, "impl": key}
                    rec["small"].append(cell)
                    try:
                        side = torch.cuda.Stream()
                        side.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(side):
                            for _ in range(3):
                                fwd(*inputs)
                        torch.cuda.current_stream().wait_stream(side)
                        torch.cuda.synchronize()
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph):
                            for _ in range(a.graph_calls):
                                out = fwd(*inputs)
                        graph.replay()
                        torch.cuda.synchronize()
                        ok, ratio = within(torch, out, want, a.dtype, scale)
                        us = _replay_us(torch, graph, a.graph_calls)
                        cell.update(us=us, gbps=model_bytes(op, m, n, es) / (us * 1e-6) / 1e9, ok=ok,
                                    err_ratio=ratio)
                        log(f"{where:44s} {TITLE[key]:13s} {us:8.2f} us/call" + ("" if ok else "   WRONG"))
                        del graph, out
                    except Exception as e:  # a peer that cannot capture or run this shape
                        cell["error"] = short_reason(e)
                        log(f"{where:44s} {TITLE[key]:13s} n/a: {cell['error']}")
                        torch.cuda.synchronize()
                del inputs, want, scale
        torch.cuda.empty_cache()


def _replay_us(torch, graph, calls):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        graph.replay()
    e1.record()
    torch.cuda.synchronize()
    reps = int(min(2000, max(20, 5.0 / max(e0.elapsed_time(e1) / 20, 1e-4))))  # ~5 ms a sample
    samples = []
    for _ in range(5):
        e0.record()
        for _ in range(reps):
            graph.replay()
        e1.record()
        torch.cuda.synchronize()
        samples.append(e0.elapsed_time(e1) * 1e3 / (reps * calls))
    return statistics.median(samples)


def section_host(torch, a, fwds, rec):
    dtype = getattr(torch, DTYPES[a.dtype])
    rounds = 5
    per_round = max(1, a.host_calls // rounds)
    for op, impls in fwds.items():
        inputs = make_inputs(torch, op, 1, 4096, dtype, seed=11)
        want, scale = expected(torch, op, inputs)
        live, times = {}, {}
        for key, fwd in impls.items():
            cell = {"op": op, "impl": key}
            rec["host"].append(cell)
            try:
                ok, ratio = within(torch, fwd(*inputs), want, a.dtype, scale)
                for _ in range(100):
                    fwd(*inputs)
                torch.cuda.synchronize()
                cell.update(ok=ok, err_ratio=ratio)
                live[key], times[key] = (fwd, cell), []
            except Exception as e:
                cell["error"] = short_reason(e)
                torch.cuda.synchronize()
        # Interleaved rounds: the host's speed drifts during a run.
        for _ in range(rounds):
            for key, (fwd, cell) in list(live.items()):
                try:
                    t0 = time.perf_counter()
                    for _ in range(per_round):
                        fwd(*inputs)
                    torch.cuda.synchronize()
                    times[key].append((time.perf_counter() - t0) / per_round * 1e6)
                except Exception as e:
                    cell["error"] = short_reason(e)
                    del live[key]
        for key, (fwd, cell) in live.items():
            cell["us"] = statistics.median(times[key])
            cell["rounds_us"] = times[key]
            log(f"host {op} {a.dtype} M=1 N=4096 {TITLE[key]:13s} {cell['us']:8.2f} us/call")


def section_first(torch, a, peers, rec):
    """First calls in this process: each op's forward is built and called
    here for the first time (run this section first)."""
    dtype = getattr(torch, DTYPES[a.dtype])
    for op in a.ops:
        data = [make_inputs(torch, op, FIRST_M, n, dtype, seed=n) for n in FIRST_N]
        torch.cuda.synchronize()
        for key in peers:
            cell = {"op": op, "impl": key}
            rec["first"].append(cell)
            try:
                fwd = make_forward(torch, op, key)  # the import and set-up: the import section's
                t0 = time.perf_counter()
                out = fwd(*data[0])
                torch.cuda.synchronize()
                cell["cold_ms"] = (time.perf_counter() - t0) * 1e3
                t0 = time.perf_counter()
                out = fwd(*data[1])
                torch.cuda.synchronize()
                cell["new_n_ms"] = (time.perf_counter() - t0) * 1e3
                t0 = time.perf_counter()
                out = fwd(*data[1])
                torch.cuda.synchronize()
                cell["warm_ms"] = (time.perf_counter() - t0) * 1e3
                want_n, scale_n = expected(torch, op, data[1])
                cell["ok"], cell["err_ratio"] = within(torch, out, want_n, a.dtype, scale_n)
                log(f"first {op} {TITLE[key]:13s} cold {cell['cold_ms']:9.1f} ms, new N {cell['new_n_ms']:9.1f} ms, "
                    f"warm {cell['warm_ms']:.3f} ms")
            except Exception as e:
                cell["error"] = short_reason(e)
                log(f"first {op} {TITLE[key]:13s} n/a: {cell['error']}")
                torch.cuda.synchronize()
        del data


def section_import(peers, rec):
    for key in ["torch"] + [k for k in peers if k in IMPORTS and k != "torch"]:
        code = f"import time; t = time.perf_counter(); {IMPORTS[key]}; print(time.perf_counter() - t)"
        cell = {"impl": key, "statement": IMPORTS[key]}
        rec["import"].append(cell)
        try:
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise RuntimeError((r.stderr.strip().splitlines() or ["exit code %d" % r.returncode])[-1])
            cell["s"] = float(r.stdout.strip().splitlines()[-1])
            log(f"import {key:10s} {cell['s']:.2f} s")
        except Exception as e:
            cell["error"] = short_reason(e)
            log(f"import {key:10s} n/a: {cell['error']}")


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

def _cell(c, value, unit, digits=2):
    if c is None:
        return "n/a"
    if "error" in c and value not in c:
        return "n/a"
    t = f"{c[value]:.{digits}f}{unit}"
    return t + (" WRONG" if c.get("ok") is False else "")


def markdown(rec):
    peers = rec["peers"]
    out = [f"# Small batches, host cost, first calls, imports ({rec['date']})", "",
           f"- commit: {rec['commit']}", f"- GPU: {rec['gpu']} (clocks: {rec['clocks']})",
           f"- torch {rec['torch']}; dtype {rec['dtype']}; peers: " +
           ", ".join(f"{k} {v}" for k, v in rec["versions"].items() if v), ""]
    heads = " | ".join(TITLE[k] for k in peers)
    if rec["small"]:
        out += ["## Small batches: us a call, CUDA-graph replay (GB/s of the model bytes)", ""]
        for op in dict.fromkeys(c["op"] for c in rec["small"]):
            out += [f"### {op}", "", f"| N | M | {heads} |", "|---:|---:|" + "---:|" * len(peers)]
            # (An implementation that failed to import has one cell, without a
            # shape: n/a in every row, its reason under Checks.)
            shapes = dict.fromkeys((c["N"], c["M"]) for c in rec["small"] if c["op"] == op and "N" in c)
            for n, m in shapes:
                row = {c["impl"]: c for c in rec["small"]
                       if c["op"] == op and c.get("N") == n and c.get("M") == m}
                best = min((c["us"] for c in row.values() if "us" in c and c.get("ok")), default=None)
                cells = []
                for k in peers:
                    c = row.get(k)
                    t = _cell(c, "us", "") + (f" ({c['gbps']:.0f})" if c and "gbps" in c else "")
                    cells.append(f"**{t}**" if c and c.get("us") == best and c.get("ok") else t)
                out.append(f"| {n} | {m} | " + " | ".join(cells) + " |")
            out.append("")
    if rec["host"]:
        out += ["## Host cost: wall us a call, eager, M = 1, N = 4096", "", f"| op | {heads} |",
                "|---|" + "---:|" * len(peers)]
        for op in dict.fromkeys(c["op"] for c in rec["host"]):
            row = {c["impl"]: c for c in rec["host"] if c["op"] == op}
            out.append(f"| {op} | " + " | ".join(_cell(row.get(k), "us", "") for k in peers) + " |")
        out.append("")
    if rec["first"]:
        out += [f"## First calls: wall ms (M = {FIRST_M}; cold: N = {FIRST_N[0]}, the process's first call of the op; "
                f"new N: {FIRST_N[1]}; warm: again)", "", "| op | implementation | cold | new N | warm |",
                "|---|---|---:|---:|---:|"]
        for c in rec["first"]:
            if "error" in c:
                out.append(f"| {c['op']} | {TITLE[c['impl']]} | n/a: {c['error']} | | |")
            else:
                out.append(f"| {c['op']} | {TITLE[c['impl']]} | {_cell(c, 'cold_ms', '', 1)} | "
                           f"{_cell(c, 'new_n_ms', '', 1)} | {_cell(c, 'warm_ms', '', 3)} |")
        out.append("")
    if rec["import"]:
        out += ["## Import in a fresh interpreter: s", "", "| package | statement | s |", "|---|---|---:|"]
        for c in rec["import"]:
            out.append(f"| {TITLE.get(c['impl'], c['impl'])} | `{c['statement']}` | "
                       + (f"n/a: {c['error']}" if "error" in c else f"{c['s']:.2f}") + " |")
        out.append("")
    wrong = [c for s in ("small", "host", "first") for c in rec[s] if c.get("ok") is False]
    errors = [c for s in ("small", "host", "first") for c in rec[s] if "error" in c]
    out += [f"## Checks: {len(wrong)} WRONG, {len(errors)} n/a", ""]
    out += [f"- WRONG: {TITLE[c['impl']]} {c['op']} " + (f"M = {c['M']} N = {c['N']} " if "M" in c else "")
            + f"(error / bound {c['err_ratio']:.2f})" for c in wrong]
    out += [f"- n/a: {TITLE[c['impl']]} {c['op']}" + (f" M = {c['M']} N = {c['N']}" if "M" in c else "")
            + f": {c['error']}" for c in errors]
    return "\n".join(out) + "\n"


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"bench_latency needs torch: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 2
    rec = {"kind": "latency", "date": _dt.date.today().isoformat(), "commit": git_commit(a.commit), "gpu": torch.cuda.get_device_name(),
           "clocks": gpu_clocks(), "torch": torch.__version__, "dtype": a.dtype, "peers": a.peers,
           "versions": {k: dist_version(d) for k, d in (("liger", "liger_kernel"), ("quack", "quack-kernels"))},
           "small": [], "host": [], "first": [], "import": []}
    if "first" in a.sections:  # before anything else builds the ops
        section_first(torch, a, a.peers, rec)
    if "small" in a.sections or "host" in a.sections:
        fwds = {}
        for op in a.ops:
            fwds[op] = {}
            for key in a.peers:
                try:
                    fwds[op][key] = make_forward(torch, op, key)
                except Exception as e:
                    msg = short_reason(e)
                    for section in ("small", "host"):
                        if section in a.sections:
                            rec[section].append({"op": op, "impl": key, "error": "import failed: " + msg})
                    log(f"{op} {TITLE[key]}: n/a: {msg}")
        if "small" in a.sections:
            section_small(torch, a, fwds, rec)
        if "host" in a.sections:
            section_host(torch, a, fwds, rec)
    if "import" in a.sections:
        section_import(a.peers, rec)
    save(rec, markdown(rec), a.out, a.json)
    ours_bad = any(c.get("ok") is False or "error" in c for s in ("small", "host", "first") for c in rec[s]
                   if c["impl"] == "quack_cpp")
    return 1 if ours_bad else 0


if __name__ == "__main__":
    sys.exit(main())
