#!/usr/bin/env python3
"""Side-by-side softmax benchmark, forward and backward, on one GPU, in one process.

Measures, in the same run: the copy bandwidth (a 1 GiB device-to-device copy,
bytes read + written), then for M*N = 2^28 elements (default) and N in
256 .. 1M, per dtype, the median CUDA-event time of one call of each
implementation's forward (reads x, writes y) and backward (reads y and dy,
writes dx), as GB/s of those model bytes and % of the copy bandwidth.

Implementations: quack_cpp (softmax forward; backward through the launch its
autograd uses), torch eager (torch.softmax, torch._softmax_backward_data),
torch.compile (of torch.softmax, and of the backward formula in fp32),
Liger-Kernel (Triton) and QuACK (CuTe DSL). Every implementation is checked
on a sample of rows against float64 on fresh memory poisoned with NaN before
it is timed; a wrong one is timed but flagged, one that cannot run is n/a
with its reason under the tables.

    . bench/peers.sh   # on the GPU machine: the peers carried in .whl/
    python3 bench/bench_softmax.py --commit <sha> --out bench/results/<date>-softmax.md --json ...
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_rmsnorm import (dist_version, git_commit, gpu_clocks, log, measure_copy,  # noqa: E402
                           poison, short_reason, time_events)

PEERS = ["quack_cpp", "torch", "compile", "liger", "quack"]
TITLE = {"quack_cpp": "quack_cpp", "torch": "torch eager", "compile": "torch.compile", "liger": "Liger",
         "quack": "QuACK"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
SIZES = [256, 1024, 4096, 16384, 65536, 262144, 1048576]
# |got - want| <= rtol * (|want| + cond) + atol: cond is the conditioning of
# the formula (tests/python/test_softmax.py grad_cond); forward cond = 1/N.
RTOL = {"bf16": 1.6e-2, "fp16": 2e-3, "fp32": 2e-5}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)))
    p.add_argument("--total", type=int, default=1 << 28, help="M*N per shape")
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--rep-ms", type=float, default=40.0, help="time budget per measurement")
    p.add_argument("--copy-gib", type=float, default=1.0)
    p.add_argument("--commit", default=None)
    p.add_argument("--out", default=None, help="markdown record")
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


# --------------------------------------------------------------------------
# Implementations: make(x, y, dy) -> (forward callable, backward callable).
# y is a correct softmax of x (float64 reference rounded), dy random.
# --------------------------------------------------------------------------

def make_impl(key, torch):
    if key == "quack_cpp":
        import quack_cpp
        from quack_cpp import _softmax
        return lambda x, y, dy: (lambda: quack_cpp.softmax(x), lambda: _softmax._launch_bwd(y, dy, False))
    if key == "torch":
        return lambda x, y, dy: (lambda: torch.softmax(x, -1),
                                 lambda: torch._softmax_backward_data(dy, y, -1, x.dtype))
    if key == "compile":
        fwd = torch.compile(lambda x: torch.softmax(x, -1), dynamic=False)

        def bwd_formula(y, dy):
            yf, dyf = y.float(), dy.float()
            return (yf * (dyf - (dyf * yf).sum(-1, keepdim=True))).to(y.dtype)
        bwd = torch.compile(bwd_formula, dynamic=False)
        return lambda x, y, dy: (lambda: fwd(x), lambda: bwd(y, dy))
    if key == "liger":
        from liger_kernel.ops import softmax as lsm

        def make(x, y, dy):
            _, bs, nw, multi = lsm._softmax_forward(x)
            return (lambda: lsm._softmax_forward(x)[0], lambda: lsm._softmax_backward(dy, y, bs, nw, multi))
        return make
    if key == "quack":
        import importlib
        qsm = importlib.import_module("quack.softmax")  # the package exports a function named softmax
        return lambda x, y, dy: (lambda: qsm.softmax_fwd(x), lambda: qsm.softmax_bwd(dy, y))
    raise ValueError(key)


def check(torch, got, want, cond, dtname, rows):
    """Sampled rows of got against the float64 want: (ok, detail)."""
    g, w, c = got.index_select(0, rows).double(), want.index_select(0, rows), cond.index_select(0, rows)
    err = (g - w).abs()
    bound = RTOL[dtname] * (w.abs() + c) + (2.0 ** -24 if dtname == "fp16" else 1e-30)
    if not bool(torch.isfinite(g).all()):
        return False, "non-finite values (poisoned output not written?)"
    ratio = float((err / bound).max())
    return ratio <= 1.0, f"max err / bound {ratio:.3f}"


def run(args):
    import torch
    torch.manual_seed(0)
    # One compiled graph per (dtype, N): lift dynamo's recompile limits
    # (otherwise it falls back to eager after 8 shapes, silently).
    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 1024)
    dev = torch.cuda.get_device_name()
    record = {"date": _dt.date.today().isoformat(), "commit": git_commit(args.commit), "gpu": dev,
              "clocks": gpu_clocks(), "torch": torch.__version__,
              "versions": {k: dist_version(d) for k, d in
                           [("liger", "liger_kernel"), ("quack", "quack-kernels"),
                            ("cutlass_dsl", "nvidia-cutlass-dsl")]},
              "total": args.total, "copy": {}, "cells": [], "na": {}, "checks": []}

    class CopyBench:  # what measure_copy needs
        pass
    cb = CopyBench()
    cb.args, cb.copy = args, record["copy"]
    measure_copy(cb, torch, "start")

    makers = {}
    for key in args.peers.split(","):
        try:
            makers[key] = make_impl(key, torch)
        except Exception as e:
            record["na"][key] = short_reason(e)
            log(f"[{key}] n/a: {record['na'][key]}")

    for dtname in args.dtypes.split(","):
        dtype = getattr(torch, DTYPES[dtname])
        es = torch.finfo(dtype).bits // 8
        for n in map(int, args.sizes.split(",")):
            m = max(1, args.total // n)
            x = (torch.randn(m, n, device="cuda") * 2).to(dtype)
            dy = torch.randn(m, n, device="cuda").to(dtype)
            g = torch.Generator(device="cpu").manual_seed(n)
            rows = torch.unique(torch.cat([torch.tensor([0, m - 1]), torch.randint(0, m, (30,), generator=g)]))
            rows = rows.to("cuda")
            xs = x.index_select(0, rows).double()
            want_y = torch.softmax(xs, -1)
            y = torch.softmax(x.float(), -1).to(dtype)  # the saved output the backward reads
            ys, dys = y.index_select(0, rows).double(), dy.index_select(0, rows).double()
            want_dx_s = ys * (dys - (dys * ys).sum(-1, keepdim=True))
            cond_bwd = ys.abs() * (dys.abs() + (dys * ys).abs().sum(-1, keepdim=True))
            full_idx = torch.arange(len(rows), device="cuda")
            for key, make in makers.items():
                cell = {"dtype": dtname, "N": n, "M": m, "impl": key}
                try:
                    fwd, bwd = make(x, y, dy)
                    for name, fn, want, cond, nbytes in [
                            ("fwd", fwd, want_y, torch.full_like(want_y, 1.0 / n), 2 * m * n * es),
                            ("bwd", bwd, want_dx_s, cond_bwd, 3 * m * n * es)]:
                        poison(torch, m * n, dtype, x.device)
                        out = fn()
                        torch.cuda.synchronize()
                        ok, detail = check(torch, out.index_select(0, rows), want, cond, dtname, full_idx)
                        record["checks"].append([dtname, n, key, name, "ok" if ok else "WRONG", detail])
                        if not ok:
                            log(f"!!!! {key} {name} {dtname} N={n}: {detail}")
                        del out
                        ms, iters = time_events(torch, [fn], args.rep_ms)
                        gbps = nbytes / (ms * 1e-3) / 1e9
                        cell[name] = {"us": ms * 1e3, "gbps": gbps, "pct": 100 * gbps / record["copy"]["start"],
                                      "ok": ok}
                except Exception as e:
                    cell["error"] = short_reason(e)
                    log(f"[{key}] {dtname} N={n}: {cell['error']}")
                    traceback.print_exc(limit=2)
                record["cells"].append(cell)
                c = cell
                log(f"{dtname} N={n:>8} {key:>10}: " + "  ".join(
                    f"{d} {c[d]['us']:8.1f} us {c[d]['pct']:5.1f}%" for d in ("fwd", "bwd") if d in c))
            del x, dy, y
            torch.cuda.empty_cache()
    measure_copy(cb, torch, "end")
    return record


def markdown(rec, peers):
    copy = rec["copy"]["start"]
    out = [f"# Softmax forward and backward, side by side ({rec['date']})", "",
           f"- commit: {rec['commit']}", f"- GPU: {rec['gpu']} (clocks: {rec['clocks']})",
           f"- torch {rec['torch']}; peers: " + ", ".join(f"{k} {v}" for k, v in rec["versions"].items()),
           f"- copy bandwidth (same run): {copy:.0f} GB/s at the start, {rec['copy'].get('end', 0):.0f} GB/s "
           "at the end; every % below is of the start figure",
           f"- M*N = {rec['total']} elements per shape; forward bytes = read x + write y, backward = read y "
           "and dy + write dx; median of CUDA-event timed calls",
           "- **bold**: the best of the row; a cell marked WRONG failed the float64 check", ""]
    for d in ("fwd", "bwd"):
        for dtname in dict.fromkeys(c["dtype"] for c in rec["cells"]):
            title = "Forward" if d == "fwd" else "Backward"
            out += [f"## {title}, {dtname}: % of copy bandwidth (us per call)", "",
                    "| N | M | " + " | ".join(TITLE[p] for p in peers) + " |",
                    "|---:|---:|" + "---:|" * len(peers)]
            losses = []
            for n in dict.fromkeys(c["N"] for c in rec["cells"] if c["dtype"] == dtname):
                row = {c["impl"]: c for c in rec["cells"] if c["dtype"] == dtname and c["N"] == n}
                vals = {p: row[p][d]["pct"] for p in peers if p in row and d in row[p]}
                best = max(vals.values()) if vals else None
                cells = []
                for p in peers:
                    if p not in row:
                        cells.append("n/a")
                    elif d not in row[p]:
                        cells.append("error")
                    else:
                        c = row[p][d]
                        t = f"{c['pct']:.1f}% ({c['us']:.1f})" + ("" if c["ok"] else " WRONG")
                        cells.append(f"**{t}**" if c["pct"] == best else t)
                m = next(iter(row.values()))["M"]
                out.append(f"| {n} | {m} | " + " | ".join(cells) + " |")
                ours = vals.get("quack_cpp")
                if ours is not None and best is not None and ours < best:
                    winner = max(vals, key=vals.get)
                    losses.append(f"N = {n}: {ours:.1f}% against {TITLE[winner]} {best:.1f}%")
            out += [""]
            if losses:
                out += ["Where quack_cpp loses: " + "; ".join(losses) + ".", ""]
    if rec["na"]:
        out += ["## Not available", ""] + [f"- {TITLE[k]}: {v}" for k, v in rec["na"].items()] + [""]
    errors = [c for c in rec["cells"] if "error" in c]
    if errors:
        out += ["## Errors", ""] + [f"- {TITLE[c['impl']]} {c['dtype']} N = {c['N']}: {c['error']}"
                                     for c in errors] + [""]
    bad = [c for c in rec["checks"] if c[4] != "ok"]
    out += [f"## Checks: {len(rec['checks']) - len(bad)} of {len(rec['checks'])} passed", ""]
    out += [f"- WRONG: {TITLE[c[2]]} {c[3]} {c[0]} N = {c[1]}: {c[5]}" for c in bad]
    return "\n".join(out) + "\n"


def main(argv=None):
    args = parse_args(argv)
    rec = run(args)
    peers = [p for p in args.peers.split(",")]
    text = markdown(rec, peers)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)
    ours_bad = [c for c in rec["checks"] if c[2] == "quack_cpp" and c[4] != "ok"]
    return 1 if ours_bad or any(c["impl"] == "quack_cpp" and "error" in c for c in rec["cells"]) else 0


if __name__ == "__main__":
    sys.exit(main())
