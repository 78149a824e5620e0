#!/usr/bin/env python3
"""Side-by-side RMSNorm forward benchmark on one GPU, in one process.

Measures, in the same run:
  * copy bandwidth: a device-to-device copy of a 1 GiB buffer, bytes read +
    written; every GB/s figure below is also given as % of this;
  * sweep: M*N = 2^28 elements (default) for N in 256 .. 1M, per dtype;
    CUDA-event timing per call, median; inputs rotated when one call's
    bytes are under 4x L2 (never at the default size);
  * small: M in {1, 16, 128, 512} at N = 4096, 20 calls captured in one CUDA
    graph, replayed; time per call (hot L2, launch gaps included);
  * host: M = 1, N = 4096, 10k eager calls from Python in 5 interleaved
    rounds (each a loop with one sync at its end): median wall time per call
    (what a Python caller pays);
  * first: wall time of the first call of an unseen shape (JIT / compile /
    module load), first in the process and again for a second unseen N.

Implementations: quack_cpp.rmsnorm, torch eager F.rms_norm, torch.compile of
the reference formula, Liger-Kernel (Triton) and QuACK (CuTe DSL). Each is
checked against a float64 reference on a sample of rows before it is timed;
one that cannot be imported or run is reported as "n/a [rN]", the reason
rN spelled out under the tables.

Model bytes for RMSNorm forward: read x + write out + read weight once.

Run `python3 bench/bench_rmsnorm.py --help`; bench/README.md has the details.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

ALL_PEERS = ["quack_cpp", "torch", "compile", "liger", "quack"]
PEER_TITLE = {
    "quack_cpp": "quack_cpp",
    "torch": "torch eager",
    "compile": "torch.compile",
    "liger": "Liger",
    "quack": "QuACK",
}
ALL_OPS = ["sweep", "small", "host", "first"]
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DEFAULT_SIZES = [256, 1024, 4096, 16384, 65536, 262144, 1048576]
DEFAULT_SMALL_M = [1, 16, 128, 512]
# Shapes for the first-call section: N values that no other section uses,
# so every implementation meets them cold.
FIRST_SHAPES = [(1024, 5120), (1024, 3584)]
# Tolerances against the float64 reference, |out - ref| <= atol + rtol*|ref|.
# bf16/fp16: two roundings to the output type are allowed (the Llama-style
# formula rounds x*rstd before multiplying by w).
TOL = {"bf16": (1e-2, 1.6e-2), "fp16": (1e-3, 2e-3), "fp32": (1e-5, 1e-4)}


def log(msg: str) -> None:
    print(msg, flush=True)


def csv_list(kind):
    def parse(text):
        return [kind(t) for t in text.split(",") if t.strip()]
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="bench_rmsnorm.py",
        description="RMSNorm forward, side by side on one GPU: quack_cpp, torch "
        "eager, torch.compile, Liger-Kernel, QuACK, against the same run's "
        "device-to-device copy bandwidth.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--ops", type=csv_list(str), default=ALL_OPS,
                   help="sections to run, comma-separated, from: " + ",".join(ALL_OPS))
    p.add_argument("--dtypes", type=csv_list(str), default=None,
                   help="dtypes for the sweep (bf16,fp16,fp32); small/host/first use "
                   "the first one [default: bf16,fp32; --quick: bf16]")
    p.add_argument("--sizes", type=csv_list(int), default=None,
                   help="N values for the sweep [default: %s; --quick: 4096,65536]"
                   % ",".join(map(str, DEFAULT_SIZES)))
    p.add_argument("--peers", type=csv_list(str), default=ALL_PEERS,
                   help="implementations, comma-separated, from: " + ",".join(ALL_PEERS))
    p.add_argument("--elems-log2", type=int, default=None,
                   help="sweep M*N = 2^this [default: 28; --quick: 26]")
    p.add_argument("--small-m", type=csv_list(int), default=None,
                   help="M values for the CUDA-graph section [default: 1,16,128,512; --quick: 1,128]")
    p.add_argument("--small-n", type=int, default=4096, help="N for the small and host sections")
    p.add_argument("--graph-calls", type=int, default=20, help="calls captured in one CUDA graph")
    p.add_argument("--host-calls", type=int, default=None,
                   help="eager calls timed in the host section [default: 10000; --quick: 2000]")
    p.add_argument("--rep-ms", type=float, default=None,
                   help="GPU time to spend timing each cell [default: 100; --quick: 25]")
    p.add_argument("--copy-gib", type=float, default=1.0, help="size of the copy buffer, GiB")
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--quick", action="store_true",
                   help="a short run (well under a minute plus imports): fewer sizes, bf16 only")
    p.add_argument("--out", default=None,
                   help="write a markdown report here (e.g. bench/results/YYYY-MM-DD-rmsnorm.md)")
    p.add_argument("--json", default=None, help="also write the raw results as JSON here")
    p.add_argument("--commit", default=None,
                   help="git commit to record (default: asked from git, if .git is there)")
    p.add_argument("--keep-caches", action="store_true",
                   help="use the default Triton/Inductor/QuACK disk caches instead of fresh "
                   "temporary ones (fresh ones make the first-call section honest)")
    p.add_argument("--deadline-s", type=float, default=540.0,
                   help="after this many seconds, write what was measured and exit (rc 3); "
                   "0 disables")
    a = p.parse_args(argv)

    for name in a.ops:
        if name not in ALL_OPS:
            p.error(f"--ops: unknown section {name!r}; choose from {','.join(ALL_OPS)}")
    for name in a.peers:
        if name not in ALL_PEERS:
            p.error(f"--peers: unknown implementation {name!r}; choose from {','.join(ALL_PEERS)}")
    if a.dtypes is None:
        a.dtypes = ["bf16"] if a.quick else ["bf16", "fp32"]
    for name in a.dtypes:
        if name not in DTYPE_NAMES:
            p.error(f"--dtypes: unknown dtype {name!r}; choose from {','.join(DTYPE_NAMES)}")
    if a.sizes is None:
        a.sizes = [4096, 65536] if a.quick else list(DEFAULT_SIZES)
    if a.elems_log2 is None:
        a.elems_log2 = 26 if a.quick else 28
    if a.small_m is None:
        a.small_m = [1, 128] if a.quick else list(DEFAULT_SMALL_M)
    if a.host_calls is None:
        a.host_calls = 2000 if a.quick else 10000
    if a.rep_ms is None:
        a.rep_ms = 25.0 if a.quick else 100.0
    for n in a.sizes:
        if n < 1 or n > (1 << a.elems_log2):
            p.error(f"--sizes: N={n} must be in 1..2^{a.elems_log2}")
    return a


# --------------------------------------------------------------------------
# Environment facts
# --------------------------------------------------------------------------

def git_commit(explicit):
    if explicit:
        return explicit
    try:
        sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return "unknown (no git repository here; pass --commit)"
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        mark = " (+ uncommitted changes)" if dirty.stdout.strip() else ""
        return sha.stdout.strip() + mark
    except Exception as e:  # git missing
        return f"unknown ({type(e).__name__}; pass --commit)"


def dist_version(name):
    try:
        from importlib import metadata
        return metadata.version(name)
    except Exception:
        return None


def gpu_clocks():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,"
                            "clocks.mem,power.limit", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip() if r.returncode == 0 else None
    except Exception:
        return None


def short_reason(exc: BaseException, limit: int = 240) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("|", "/")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------
# Implementations. Each make(x, w, eps) returns a zero-argument callable that
# computes out = rmsnorm(x) * w on the current stream and returns it.
# --------------------------------------------------------------------------

class Impl:
    def __init__(self, key):
        self.key = key
        self.title = PEER_TITLE[key]
        self.ok = False
        self.reason = ""
        self.version = None
        self.import_s = None
        self.first_call = None  # (shape, seconds) of the first call in the process
        self.fn = None

    def load(self, torch, eps):
        t0 = time.perf_counter()
        try:
            self._load(torch, eps)
            self.ok = True
        except BaseException as e:  # ImportError, OSError from a .so, RuntimeError...
            if isinstance(e, KeyboardInterrupt):
                raise
            self.ok = False
            self.reason = "import failed: " + short_reason(e)
            self.trace = traceback.format_exc()
        self.import_s = time.perf_counter() - t0

    def make(self, x, w, eps):
        fn = self.fn
        return lambda: fn(x, w, eps)


class QuackCppImpl(Impl):
    def _load(self, torch, eps):
        import quack_cpp
        self.version = getattr(quack_cpp, "__version__", None) or dist_version("quack_cpp") \
            or dist_version("quack-cpp")
        self.where = os.path.dirname(getattr(quack_cpp, "__file__", "") or "")
        op = quack_cpp.rmsnorm
        self.fn = lambda x, w, e: op(x, w, eps=e)


class TorchImpl(Impl):
    def _load(self, torch, eps):
        import torch.nn.functional as F
        self.version = torch.__version__
        n = F.rms_norm
        self.fn = lambda x, w, e: n(x, (x.shape[-1],), w, e)


class CompileImpl(Impl):
    def _load(self, torch, eps):
        import torch._dynamo
        cfg = torch._dynamo.config
        # dynamic=False compiles one graph per shape; lift the recompile
        # limits so that the 20-odd shapes of a run all get their own graph
        # instead of falling back to eager after 8.
        for name, value in (("recompile_limit", 256), ("cache_size_limit", 256),
                            ("accumulated_recompile_limit", 4096),
                            ("accumulated_cache_size_limit", 4096)):
            if hasattr(cfg, name):
                setattr(cfg, name, value)
        self.version = torch.__version__

        def reference(x, w):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

        compiled = torch.compile(reference, dynamic=False)
        self.fn = lambda x, w, e: compiled(x, w)


class LigerImpl(Impl):
    def _load(self, torch, eps):
        if os.environ.get("LIGER_KERNEL_IMPL"):
            raise RuntimeError("LIGER_KERNEL_IMPL is set; unset it to bench the default Triton kernels")
        # The submodule, not liger_kernel.ops: always the default Triton kernel.
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        self.version = dist_version("liger-kernel") or dist_version("liger_kernel")
        apply = LigerRMSNormFunction.apply
        # (X, W, eps, offset, casting_mode, in_place): "llama" casting is the
        # reference formula the torch.compile column also runs.
        self.fn = lambda x, w, e: apply(x, w, e, 0.0, "llama", True)


class QuackImpl(Impl):
    def _load(self, torch, eps):
        import quack  # noqa: F401  (installs CuTe DSL patches)
        from quack.rmsnorm import rmsnorm
        cutlass = dist_version("nvidia-cutlass-dsl")
        flavor = [f for f in ("cu13", "cu12") if dist_version(f"nvidia-cutlass-dsl-libs-{f}")]
        self.version = (getattr(quack, "__version__", None) or dist_version("quack-kernels")) \
            + (f" (nvidia-cutlass-dsl {cutlass} {'+'.join(flavor)}, apache-tvm-ffi "
               f"{dist_version('apache-tvm-ffi')})" if cutlass else "")
        self.fn = lambda x, w, e: rmsnorm(x, w, eps=e)


IMPL_CLASSES = {"quack_cpp": QuackCppImpl, "torch": TorchImpl, "compile": CompileImpl,
                "liger": LigerImpl, "quack": QuackImpl}


# --------------------------------------------------------------------------
# Bench state and report
# --------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.t_start = time.perf_counter()
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self.meta = {}
        self.copy = {}          # "start"/"end" -> GB/s
        self.sweep = {}         # (dtype, N) -> {"M":..., key: cell}
        self.small = {}         # (dtype, M) -> {key: cell}
        self.host = {}          # key -> cell
        self.first = {}         # key -> cell
        self.checks = []        # (where, key, status, detail)
        self.notes = []
        self.impls = {}
        self.broken = None      # set when the CUDA context died
        self.finished = False
        self.lock = threading.Lock()
        self.reasons = {}       # n/a reason -> tag, rebuilt by markdown()

    def elapsed(self):
        return time.perf_counter() - self.t_start

    def copy_ref(self):
        return self.copy.get("start") or self.copy.get("end")

    # ---------------- report ----------------
    def na(self, reason):
        """Table cell for a run that could not happen; the reason goes under the tables."""
        if reason not in self.reasons:
            self.reasons[reason] = f"r{len(self.reasons) + 1}"
        return f"n/a [{self.reasons[reason]}]"

    def pct(self, gbps):
        ref = self.copy_ref()
        return 100.0 * gbps / ref if ref and gbps else None

    def fmt_bw(self, cell):
        if cell is None:
            return "-"
        if cell["status"] == "na":
            return self.na(cell["reason"])
        pct = self.pct(cell["gbps"])
        s = f"{cell['gbps']:.0f}" + (f" ({pct:.1f}%)" if pct is not None else "")
        if cell["status"] == "wrong":
            s = "**WRONG** " + s
        return s

    def winner(self, cells, keys, metric="gbps", higher=True):
        good = [(cells[k][metric], k) for k in keys
                if k in cells and cells[k]["status"] == "ok" and cells[k].get(metric)]
        if not good:
            return "-"
        best_v, best_k = (max if higher else min)(good)
        text = PEER_TITLE[best_k]
        mine = cells.get("quack_cpp")
        if best_k != "quack_cpp" and mine and mine["status"] == "ok" and mine.get(metric):
            ratio = mine[metric] / best_v if higher else best_v / mine[metric]
            text += f" (quack_cpp at {100 * ratio:.0f}%)"
        return text

    def markdown(self):
        a = self.args
        keys = [k for k in a.peers]
        m = self.meta
        self.reasons = {}
        L = []
        L.append(f"# RMSNorm forward benchmark, {self.started:%Y-%m-%d %H:%M} UTC")
        L.append("")
        if self.broken:
            L.append(f"> **Run cut short:** {self.broken}")
            L.append("")
        if not self.finished and not self.broken:
            L.append("> **Partial report:** the run did not reach its end (deadline or interrupt).")
            L.append("")
        L.append(f"- commit: {m.get('commit')}")
        L.append(f"- GPU: {m.get('gpu')}")
        if m.get("smi"):
            L.append(f"- nvidia-smi (driver, SM clock, max SM clock, mem clock, power limit): {m['smi']}")
        L.append(f"- python {m.get('python')}, torch {m.get('torch')} (CUDA {m.get('cuda')}), "
                 f"triton {m.get('triton')}")
        for k in keys:
            im = self.impls.get(k)
            if im is None:
                continue
            if im.ok:
                L.append(f"- {im.title}: {im.version or 'version unknown'}; import {im.import_s:.2f} s")
            else:
                L.append(f"- {im.title}: n/a ({im.reason})")
        L.append(f"- command: `{m.get('command')}`")
        L.append(f"- wall time of the run: {self.elapsed():.0f} s")
        ref = self.copy_ref()
        if ref:
            end = self.copy.get("end")
            L.append(f"- **copy bandwidth: {ref:.0f} GB/s** ({a.copy_gib:g} GiB device-to-device "
                     "`y.copy_(x)`, bytes read + written, median)"
                     + (f"; again at the end: {end:.0f} GB/s" if end else ""))
        L.append("")
        L.append("Cells: GB/s of model bytes (read x + write out + read w), median of CUDA-event "
                 "timed calls (each queued behind a GPU sleep: device time, not host time), and in "
                 "brackets % of the copy bandwidth above. **WRONG**: "
                 "the output failed the float64 check (see Correctness); n/a: could not run.")
        L.append("")

        if self.sweep:
            for dt in a.dtypes:
                rows = [(n, self.sweep[(dt, n)]) for n in a.sizes if (dt, n) in self.sweep]
                if not rows:
                    continue
                L.append(f"## {dt}, M*N = 2^{a.elems_log2}: GB/s (% of copy)")
                L.append("")
                L.append("| N | M | " + " | ".join(PEER_TITLE[k] for k in keys) + " | winner |")
                L.append("|---:|---:|" + "---:|" * len(keys) + "---|")
                for n, cells in rows:
                    L.append(f"| {n} | {cells['M']} | "
                             + " | ".join(self.fmt_bw(cells.get(k)) for k in keys)
                             + f" | {self.winner(cells, keys)} |")
                L.append("")

        if self.small:
            dt = a.dtypes[0]
            L.append(f"## Small batches, N = {a.small_n}, {dt}: µs per call (GB/s), "
                     f"CUDA graph of {a.graph_calls} calls replayed")
            L.append("")
            L.append("Data stay in L2 here (it is a latency test): GB/s are not HBM figures.")
            L.append("")
            L.append("| M | " + " | ".join(PEER_TITLE[k] for k in keys) + " | fastest |")
            L.append("|---:|" + "---:|" * len(keys) + "---|")
            for mm in a.small_m:
                cells = self.small.get((dt, mm))
                if cells is None:
                    continue
                out = []
                for k in keys:
                    c = cells.get(k)
                    if c is None:
                        out.append("-")
                    elif c["status"] == "na":
                        out.append(self.na(c["reason"]))
                    else:
                        s = f"{c['us']:.2f} ({c['gbps']:.0f})"
                        out.append(("**WRONG** " + s) if c["status"] == "wrong" else s)
                L.append(f"| {mm} | " + " | ".join(out) + f" | {self.winner(cells, keys, 'us', False)} |")
            L.append("")

        if self.host:
            dt = a.dtypes[0]
            L.append(f"## Eager per-call cost from Python: M = 1, N = {a.small_n}, {dt}, "
                     f"{a.host_calls} calls in 5 rounds interleaved across implementations, one sync at the end "
                     "of each (µs per call, wall, median round)")
            L.append("")
            L.append("| " + " | ".join(PEER_TITLE[k] for k in keys) + " | fastest |")
            L.append("|" + "---:|" * len(keys) + "---|")
            out = []
            for k in keys:
                c = self.host.get(k)
                out.append("-" if c is None else (self.na(c["reason"]) if c["status"] == "na"
                                                   else f"{c['us']:.2f}"))
            L.append("| " + " | ".join(out) + f" | {self.winner(self.host, keys, 'us', False)} |")
            L.append("")

        if self.first:
            dt = a.dtypes[0]
            (m1, n1), (m2, n2) = FIRST_SHAPES
            L.append(f"## First-call latency, {dt} (ms, wall, call + sync)")
            L.append("")
            L.append(f"Cold: the implementation's first call in this process (M={m1}, N={n1}), after "
                     f"its import. New N: the first call of a second unseen N (M={m2}, N={n2}) in "
                     "the now warm process. Warm: the call after that, same shape. Disk caches "
                     + ("were the defaults (--keep-caches)." if a.keep_caches else
                        "were fresh and empty (JIT caches of Triton, Inductor and QuACK)."))
            L.append("")
            L.append("| | cold | new N | warm |")
            L.append("|---|---:|---:|---:|")
            for k in keys:
                c = self.first.get(k)
                if c is None:
                    continue
                if c["status"] == "na":
                    L.append(f"| {PEER_TITLE[k]} | {self.na(c['reason'])} | | |")
                else:
                    flag = " **WRONG**" if c["status"] == "wrong" else ""
                    L.append(f"| {PEER_TITLE[k]}{flag} | {c['cold_ms']:.1f} | {c['new_ms']:.1f} | "
                             f"{c['warm_ms']:.3f} |")
            L.append("")

        if self.reasons:
            L.append("## Why n/a")
            L.append("")
            for reason, tag in self.reasons.items():
                L.append(f"- [{tag}] {reason}")
            L.append("")

        L.append("## Correctness (sampled rows against a float64 reference, outputs poisoned first)")
        L.append("")
        bad = [c for c in self.checks if c[2] != "ok"]
        L.append(f"{len(self.checks)} checks, {len(bad)} failed. Tolerance "
                 "|out - ref| <= atol + rtol*|ref| with (atol, rtol) = "
                 + ", ".join(f"{k}: {v}" for k, v in TOL.items()) + ".")
        L.append("")
        if bad:
            L.append("| where | implementation | detail |")
            L.append("|---|---|---|")
            for where, k, st, detail in bad:
                L.append(f"| {where} | {PEER_TITLE[k]} | **{st.upper()}**: {detail} |")
            L.append("")
        worst = {}
        for where, k, st, detail in self.checks:
            if st == "ok":
                worst.setdefault(k, []).append(detail)
        if worst:
            L.append("Largest error/tolerance ratio seen (passing checks): "
                     + "; ".join(f"{PEER_TITLE[k]} {max(float(d.split('ratio ')[1]) for d in v):.2f}"
                                 for k, v in worst.items() if v) + ".")
            L.append("")

        if self.notes:
            L.append("## Notes")
            L.append("")
            for n in self.notes:
                L.append(f"- {n}")
            L.append("")
        return "\n".join(L)

    def to_json(self):
        def conv(d):
            return {(k if isinstance(k, str) else "/".join(map(str, k))): v for k, v in d.items()}
        return {"meta": self.meta, "copy_gbps": self.copy, "sweep": conv(self.sweep),
                "small": conv(self.small), "host": self.host, "first": self.first,
                "checks": self.checks, "notes": self.notes, "broken": self.broken,
                "finished": self.finished,
                "impls": {k: {"ok": v.ok, "reason": v.reason, "version": v.version,
                              "import_s": v.import_s} for k, v in self.impls.items()}}

    def write(self):
        with self.lock:
            md = self.markdown()
            if self.args.out:
                os.makedirs(os.path.dirname(os.path.abspath(self.args.out)), exist_ok=True)
                with open(self.args.out, "w") as f:
                    f.write(md + "\n")
            if self.args.json:
                os.makedirs(os.path.dirname(os.path.abspath(self.args.json)), exist_ok=True)
                with open(self.args.json, "w") as f:
                    json.dump(self.to_json(), f, indent=1, default=str)
            return md


# --------------------------------------------------------------------------
# Measurement helpers (torch imported by main and passed in)
# --------------------------------------------------------------------------

class ContextBroken(RuntimeError):
    pass


def ensure_alive(torch, bench, where):
    """After an exception: if the CUDA context is dead, nothing more can be measured."""
    try:
        torch.cuda.synchronize()
    except Exception as e:
        bench.broken = f"CUDA context broken after {where}: {short_reason(e, 300)}"
        raise ContextBroken(bench.broken)


def mark_na(torch, bench, cells, key, where, impl, exc):
    """Records a cell that could not run (with the reason), logs it, and stops
    the run if the CUDA context died with it."""
    cells[key] = {"status": "na", "reason": short_reason(exc)}
    log(f"[{bench.elapsed():6.1f}s] {where:34s} {impl.title:13s} n/a: {short_reason(exc)}")
    ensure_alive(torch, bench, f"{impl.title} at {where}")


# The GPU's clock for torch.cuda._sleep's cycle count: a lower bound of the
# sleep is all that matters (H200 boost 1.98 GHz; a slower clock sleeps longer).
SLEEP_CYCLES_PER_S = 2.0e9


def time_events(torch, fns, target_ms, warmup=3, min_iters=5, max_iters=5000):
    """Median ms of one call's device time, CUDA events around each call;
    fns are rotated. Each timed call is queued behind a GPU sleep longer
    than the call's host time, so that its start event, kernels and end
    event reach the GPU back to back: the interval is the kernels' time, not
    the host's (without it a call whose Python costs more than its kernels
    -- small shapes, torch.compile's guards, several launches -- measured the
    host: bench_all --quick cells moved up to 16 points between runs of the
    same kernels, eleventh session). The host cost is measured on its own
    (bench_latency.py)."""
    k = len(fns)
    for i in range(warmup):
        fns[i % k]()
    torch.cuda.synchronize()
    host = []
    for i in range(3):  # host time of a call (enqueue only)
        t0 = time.perf_counter()
        fns[i % k]()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    sleep_cycles = int((20e-6 + 3 * max(host)) * SLEEP_CYCLES_PER_S)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(sleep_cycles)
    e0.record()
    for i in range(3):
        fns[i % k]()
    e1.record()
    torch.cuda.synchronize()
    est = max(e0.elapsed_time(e1) / 3, 1e-3)
    n = int(min(max_iters, max(min_iters, target_ms / est)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        torch.cuda._sleep(sleep_cycles)
        starts[i].record()
        fns[i % k]()
        ends[i].record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return statistics.median(times), n


def check_rows(torch, out, x, w, eps, dtname, rows=64):
    """Compare sampled rows of out with a float64 reference. Returns (ok, detail)."""
    M, N = x.shape
    if tuple(out.shape) != (M, N):
        return False, f"shape {tuple(out.shape)} != {(M, N)}"
    if out.dtype != x.dtype:
        return False, f"dtype {out.dtype} != {x.dtype}"
    g = torch.Generator(device="cpu").manual_seed(1234 + M + N)
    if M <= rows:
        idx = torch.arange(M)
    else:
        idx = torch.randperm(M - 2, generator=g)[: rows - 2] + 1
        idx = torch.cat([torch.tensor([0, M - 1]), idx]).sort().values
    idx = idx.to(x.device)
    xs = x.index_select(0, idx).double()
    ref = xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps) * w.double()
    got = out.index_select(0, idx).double()
    atol, rtol = TOL[dtname]
    err = (got - ref).abs()
    finite = bool(torch.isfinite(got).all())
    ratio = float((err / (atol + rtol * ref.abs())).max()) if finite else float("inf")
    max_abs = float(err.max()) if finite else float("nan")
    detail = f"{len(idx)} rows, max abs err {max_abs:.3g}, ratio {ratio:.3f}"
    if not finite:
        detail = f"{len(idx)} rows, non-finite values in output (poisoned memory not written?), ratio inf"
    return finite and ratio <= 1.0, detail


def poison(torch, numel, dtype, device):
    # Fill a block of the output's size with NaN and free it: the caching
    # allocator hands the same block to the implementation's output next, so
    # an element it fails to write shows up as NaN.
    t = torch.empty(numel, dtype=dtype, device=device)
    t.fill_(float("nan"))
    del t


def run_checked(bench, torch, impl, x, w, eps, dtname, where):
    """Build the callable, run it once on poisoned memory, check it.

    Returns (fn, status, detail, seconds of that first call + sync)."""
    fn = impl.make(x, w, eps)
    poison(torch, x.numel(), x.dtype, x.device)
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if impl.first_call is None:
        impl.first_call = (f"{where}", dt)
    ok, detail = check_rows(torch, out, x, w, eps, dtname)
    del out
    status = "ok" if ok else "wrong"
    bench.checks.append((where, impl.key, status, detail))
    if not ok:
        log(f"!!!! MISMATCH {impl.title} at {where}: {detail}")
    return fn, status, detail, dt


# --------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------

def measure_copy(bench, torch, label):
    a = bench.args
    nbytes = int(a.copy_gib * (1 << 30)) // 16 * 16
    x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    x.random_(0, 255)
    y = torch.empty_like(x)

    def copy_once(src=x, dst=y):
        return dst.copy_(src)

    ms, n = time_events(torch, [copy_once], max(a.rep_ms, 50.0))
    gbps = 2 * nbytes / (ms * 1e-3) / 1e9
    bench.copy[label] = gbps
    assert torch.equal(x[:1 << 20], y[:1 << 20])
    del x, y, copy_once
    torch.cuda.empty_cache()
    log(f"[copy:{label}] {gbps:.0f} GB/s ({2 * nbytes / 2**30:.1f} GiB moved per copy, "
        f"{ms * 1e3:.1f} us, median of {n})")


def section_sweep(bench, torch, impls):
    a = bench.args
    l2 = bench.meta.get("l2_bytes") or (60 << 20)
    for dtname in a.dtypes:
        dtype = getattr(torch, DTYPE_NAMES[dtname])
        esize = torch.empty((), dtype=dtype).element_size()
        for N in a.sizes:
            M = max(1, (1 << a.elems_log2) // N)
            cells = {"M": M}
            bench.sweep[(dtname, N)] = cells
            nbytes = 2 * M * N * esize + N * esize
            nbuf = 1 if nbytes >= 4 * l2 else min(64, math.ceil(4 * l2 / nbytes))
            torch.manual_seed(N)
            xs = [torch.randn(M, N, dtype=dtype, device="cuda") for _ in range(nbuf)]
            w = (1.0 + 0.1 * torch.randn(N, device="cuda")).to(dtype)
            for key, impl in impls.items():
                where = f"sweep {dtname} N={N} M={M}"
                if not impl.ok:
                    cells[key] = {"status": "na", "reason": impl.reason}
                    continue
                try:
                    fn, status, detail, _ = run_checked(bench, torch, impl, xs[0], w, a.eps, dtname, where)
                    fns = [fn] + [impl.make(xi, w, a.eps) for xi in xs[1:]]
                    ms, n = time_events(torch, fns, a.rep_ms)
                    gbps = nbytes / (ms * 1e-3) / 1e9
                    cells[key] = {"status": status, "ms": ms, "gbps": gbps, "iters": n}
                    pct = bench.pct(gbps)
                    log(f"[{bench.elapsed():6.1f}s] {where:34s} {impl.title:13s} {gbps:7.0f} GB/s"
                        + (f" ({pct:5.1f}% of copy)" if pct else "") + f"  {ms * 1e3:9.1f} us"
                        + ("   WRONG" if status != "ok" else ""))
                except ContextBroken:
                    raise
                except Exception as e:
                    mark_na(torch, bench, cells, key, where, impl, e)
            del xs, w
            torch.cuda.empty_cache()
            bench.write()  # a run killed from outside still leaves a report


def section_small(bench, torch, impls):
    a = bench.args
    dtname = a.dtypes[0]
    dtype = getattr(torch, DTYPE_NAMES[dtname])
    esize = torch.empty((), dtype=dtype).element_size()
    N = a.small_n
    for M in a.small_m:
        cells = {}
        bench.small[(dtname, M)] = cells
        torch.manual_seed(M)
        x = torch.randn(M, N, dtype=dtype, device="cuda")
        w = (1.0 + 0.1 * torch.randn(N, device="cuda")).to(dtype)
        nbytes = 2 * M * N * esize + N * esize
        for key, impl in impls.items():
            where = f"small {dtname} N={N} M={M}"
            if not impl.ok:
                cells[key] = {"status": "na", "reason": impl.reason}
                continue
            try:
                fn, status, detail, _ = run_checked(bench, torch, impl, x, w, a.eps, dtname, where)
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        fn()
                torch.cuda.current_stream().wait_stream(side)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(a.graph_calls):
                        out = fn()
                g.replay()
                torch.cuda.synchronize()
                ok, detail2 = check_rows(torch, out, x, w, a.eps, dtname)
                if not ok:
                    status = "wrong"
                    bench.checks.append((where + " (graph replay)", key, "wrong", detail2))
                    log(f"!!!! MISMATCH {impl.title} at {where} after graph replay: {detail2}")
                del out
                reps = 50
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(reps):
                    g.replay()
                e1.record()
                torch.cuda.synchronize()
                per_replay = max(e0.elapsed_time(e1) / reps, 1e-4)
                reps = int(min(5000, max(20, (a.rep_ms / 5) / per_replay)))
                samples = []
                for _ in range(5):
                    e0.record()
                    for _ in range(reps):
                        g.replay()
                    e1.record()
                    torch.cuda.synchronize()
                    samples.append(e0.elapsed_time(e1) / (reps * a.graph_calls))
                ms = statistics.median(samples)
                del g
                cells[key] = {"status": status, "us": ms * 1e3, "gbps": nbytes / (ms * 1e-3) / 1e9}
                log(f"[{bench.elapsed():6.1f}s] {where:34s} {impl.title:13s} {ms * 1e3:8.2f} us/call "
                    f"({cells[key]['gbps']:.0f} GB/s, graph)" + ("   WRONG" if status != "ok" else ""))
            except ContextBroken:
                raise
            except Exception as e:
                mark_na(torch, bench, cells, key, where, impl, e)
        del x, w
        torch.cuda.empty_cache()


def section_host(bench, torch, impls):
    a = bench.args
    dtname = a.dtypes[0]
    dtype = getattr(torch, DTYPE_NAMES[dtname])
    N = a.small_n
    torch.manual_seed(7)
    x = torch.randn(1, N, dtype=dtype, device="cuda")
    w = (1.0 + 0.1 * torch.randn(N, device="cuda")).to(dtype)
    # Interleaved rounds (every implementation once per round, median of the
    # rounds): a host's speed drifts during a run, and timing one loop per
    # implementation back to back let that drift pick the winner.
    rounds = 5
    n = max(1, a.host_calls // rounds)
    fns, times = {}, {}
    for key, impl in impls.items():
        where = f"host {dtname} N={N} M=1"
        if not impl.ok:
            bench.host[key] = {"status": "na", "reason": impl.reason}
            continue
        try:
            fn, status, detail, _ = run_checked(bench, torch, impl, x, w, a.eps, dtname, where)
            for _ in range(200):
                fn()
            torch.cuda.synchronize()
            fns[key] = (fn, status, where, impl)
            times[key] = []
        except ContextBroken:
            raise
        except Exception as e:
            mark_na(torch, bench, bench.host, key, where, impl, e)
    for _ in range(rounds):
        for key in list(fns):
            fn, status, where, impl = fns[key]
            try:
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                torch.cuda.synchronize()
                times[key].append((time.perf_counter() - t0) / n * 1e6)
            except ContextBroken:
                raise
            except Exception as e:
                del fns[key]
                mark_na(torch, bench, bench.host, key, where, impl, e)
    for key, (fn, status, where, impl) in fns.items():
        us = sorted(times[key])[len(times[key]) // 2]
        bench.host[key] = {"status": status, "us": us, "rounds_us": times[key]}
        log(f"[{bench.elapsed():6.1f}s] {where:34s} {impl.title:13s} {us:8.2f} us/call (eager, wall, median of {rounds})")


def section_first(bench, torch, impls):
    a = bench.args
    dtname = a.dtypes[0]
    dtype = getattr(torch, DTYPE_NAMES[dtname])
    data = []
    for M, N in FIRST_SHAPES:
        torch.manual_seed(N)
        data.append((torch.randn(M, N, dtype=dtype, device="cuda"),
                     (1.0 + 0.1 * torch.randn(N, device="cuda")).to(dtype)))
    torch.cuda.synchronize()
    for key, impl in impls.items():
        if not impl.ok:
            bench.first[key] = {"status": "na", "reason": impl.reason}
            continue
        try:
            times, statuses = [], []
            for x, w in data:
                where = f"first {dtname} N={x.shape[1]} M={x.shape[0]}"
                fn, status, detail, call_s = run_checked(bench, torch, impl, x, w, a.eps, dtname, where)
                statuses.append(status)
                times.append(call_s)
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            warm = time.perf_counter() - t0
            st = "ok" if all(v == "ok" for v in statuses) else "wrong"
            bench.first[key] = {"status": st, "cold_ms": times[0] * 1e3, "new_ms": times[1] * 1e3,
                                "warm_ms": warm * 1e3}
            log(f"[{bench.elapsed():6.1f}s] first call {impl.title:13s} cold {times[0] * 1e3:9.1f} ms, "
                f"new N {times[1] * 1e3:9.1f} ms, warm {warm * 1e3:.3f} ms")
        except ContextBroken:
            raise
        except Exception as e:
            bench.first[key] = {"status": "na", "reason": short_reason(e)}
            log(f"[{bench.elapsed():6.1f}s] first call {impl.title:13s} n/a: {short_reason(e)}")
            ensure_alive(torch, bench, f"{impl.title} first call")
    del data
    torch.cuda.empty_cache()


# --------------------------------------------------------------------------

def main(argv=None):
    args = parse_args(argv)
    bench = Bench(args)
    bench.meta["command"] = " ".join([os.path.relpath(sys.argv[0], REPO)
                                      if os.path.exists(sys.argv[0]) else sys.argv[0]]
                                     + (sys.argv[1:] if argv is None else list(argv)))

    if not args.keep_caches:
        # Fresh JIT caches, so that "first call" means a real compile; must
        # be set before torch/triton/quack are imported.
        cache_root = tempfile.mkdtemp(prefix="bench_rmsnorm_cache_")
        os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(cache_root, "triton"))
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cache_root, "inductor"))
        os.environ.setdefault("QUACK_CACHE_DIR", os.path.join(cache_root, "quack"))

    try:
        import torch
    except Exception as e:
        print(f"error: cannot import torch ({short_reason(e)}); this benchmark needs PyTorch "
              "with CUDA on a machine with an NVIDIA GPU.", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA GPU visible to PyTorch (torch.cuda.is_available() is False, torch "
              f"{torch.__version__}, built for CUDA {torch.version.cuda}). This benchmark times "
              "GPU kernels; run it on the GPU machine (see bench/README.md).", file=sys.stderr)
        return 2

    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", None)
    bench.meta.update({
        "commit": git_commit(args.commit),
        "gpu": f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB, "
               f"cc {props.major}.{props.minor}" + (f", L2 {l2 / 2**20:.0f} MiB" if l2 else ""),
        "l2_bytes": l2,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": dist_version("triton"),
        "smi": gpu_clocks(),
        "started_utc": bench.started.isoformat(timespec="seconds"),
    })
    log(f"bench_rmsnorm: {bench.meta['gpu']}; torch {torch.__version__}; commit {bench.meta['commit']}")
    log(f"sections {','.join(args.ops)}; dtypes {','.join(args.dtypes)}; peers {','.join(args.peers)}")

    def on_deadline():
        log(f"!!!! deadline of {args.deadline_s:.0f} s reached: writing the partial report and exiting")
        try:
            md = bench.write()
            print(md, flush=True)
        finally:
            os._exit(3)

    timer = None
    if args.deadline_s and args.deadline_s > 0:
        timer = threading.Timer(args.deadline_s, on_deadline)
        timer.daemon = True
        timer.start()

    with torch.no_grad():
        # A small op first so that context creation is not billed to anyone.
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        for key in args.peers:
            impl = IMPL_CLASSES[key](key)
            impl.load(torch, args.eps)
            bench.impls[key] = impl
            log(f"[{bench.elapsed():6.1f}s] import {impl.title:13s} "
                + (f"ok, {impl.version}, {impl.import_s:.2f} s" if impl.ok else f"n/a: {impl.reason}"))
            if not impl.ok and getattr(impl, "trace", None):
                print(impl.trace, file=sys.stderr, flush=True)
                bench.notes.append(f"{impl.title} import failed: {impl.reason}")
        impls = bench.impls

        try:
            measure_copy(bench, torch, "start")
            for name, section in (("first", section_first), ("sweep", section_sweep),
                                  ("small", section_small), ("host", section_host)):
                if name in args.ops:
                    section(bench, torch, impls)
                    bench.write()
            measure_copy(bench, torch, "end")
            bench.finished = True
        except ContextBroken as e:
            log(f"!!!! {e}; stopping here and reporting what was measured")
        except KeyboardInterrupt:
            log("!!!! interrupted; reporting what was measured")
        except Exception as e:  # a bug here, or an OOM outside the guarded cells
            traceback.print_exc()
            bench.broken = f"benchmark stopped by an unexpected error: {short_reason(e, 300)}"
            log(f"!!!! {bench.broken}; reporting what was measured")
    if timer is not None:
        timer.cancel()

    for key, impl in bench.impls.items():
        if impl.ok and impl.first_call and "first" not in args.ops:
            bench.notes.append(f"{impl.title}: first call in the process ({impl.first_call[0]}) took "
                               f"{impl.first_call[1] * 1e3:.1f} ms (call + sync)")
    start, end = bench.copy.get("start"), bench.copy.get("end")
    if start and end and abs(end - start) / start > 0.03:
        bench.notes.append(f"copy bandwidth moved {100 * (end - start) / start:+.1f}% between start and "
                           "end of the run: clocks or another tenant; treat small gaps with care")
    n_bad = sum(1 for c in bench.checks if c[2] != "ok")
    md = bench.write()
    print("\n" + md, flush=True)
    if args.out:
        log(f"report written to {args.out}")
    if n_bad:
        log(f"!!!! {n_bad} correctness check(s) FAILED: see the Correctness section")
    log(f"done in {bench.elapsed():.0f} s")
    if bench.broken:
        return 4
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
