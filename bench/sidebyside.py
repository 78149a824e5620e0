"""What the side-by-side benchmarks of ops with several directions share
(bench_softmax.py, bench_rmsnorm_bwd.py, bench_layernorm.py,
bench_cross_entropy.py): the run record (date, commit, GPU, versions,
same-run copy bandwidth), checked and timed cells, and the markdown report
with the winner of every row and the cells where quack_cpp loses.

A cell is one (dtype, N, implementation); it holds one timing per direction
("fwd", "bwd", "step", ...), each checked against float64 on memory poisoned
with NaN before it is timed.
"""
from __future__ import annotations

import datetime as _dt
import traceback

from bench_rmsnorm import dist_version, git_commit, gpu_clocks, log, measure_copy, poison, short_reason, time_events

TITLE = {"quack_cpp": "quack_cpp", "torch": "torch eager", "compile": "torch.compile", "liger": "Liger",
         "quack": "QuACK", "quack_cpp_inplace": "quack_cpp in-place"}
# The default --peers. Keys "quack_cpp_<variant>" are variants of quack_cpp
# (a column of their own, never "the peer quack_cpp loses to").
PEERS = ["quack_cpp", "torch", "compile", "liger", "quack"]


def is_ours(key):
    return key == "quack_cpp" or key.startswith("quack_cpp_")


def parse_args(argv, doc, sizes, peers=None, extra=None):
    """The options every side-by-side benchmark takes; extra(parser) adds a
    benchmark's own; peers: the default --peers (PEERS)."""
    import argparse
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--sizes", default=",".join(map(str, sizes)))
    p.add_argument("--total", type=int, default=1 << 28, help="M*N per shape")
    p.add_argument("--peers", default=",".join(peers or PEERS))
    p.add_argument("--rep-ms", type=float, default=40.0, help="time budget per measurement")
    p.add_argument("--copy-gib", type=float, default=1.0)
    p.add_argument("--commit", default=None)
    p.add_argument("--out", default=None, help="markdown record")
    p.add_argument("--json", default=None)
    if extra is not None:
        extra(p)
    return p.parse_args(argv)


class Run:
    """One benchmark run: its record and the copy-bandwidth yardstick."""

    def __init__(self, torch, args):
        self.torch, self.args = torch, args
        # One compiled graph per (dtype, N): lift dynamo's recompile limits
        # (otherwise it falls back to eager after 8 shapes, silently).
        for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                     "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 1024)
        self.record = {"date": _dt.date.today().isoformat(), "commit": git_commit(args.commit),
                       "gpu": torch.cuda.get_device_name(), "clocks": gpu_clocks(), "torch": torch.__version__,
                       "versions": {k: dist_version(d) for k, d in
                                    [("liger", "liger_kernel"), ("quack", "quack-kernels"),
                                     ("cutlass_dsl", "nvidia-cutlass-dsl")]},
                       "total": args.total, "copy": {}, "cells": [], "na": {}, "checks": []}
        self.copy = self.record["copy"]  # (measure_copy's interface: .args, .copy)
        measure_copy(self, torch, "start")

    def makers(self, make_impl):
        """{peer: factory} for the peers that import; the others are n/a with their reason."""
        out = {}
        for key in self.args.peers.split(","):
            try:
                out[key] = make_impl(key, self.torch)
            except Exception as e:
                self.record["na"][key] = short_reason(e)
                log(f"[{key}] n/a: {self.record['na'][key]}")
        return out

    def cell(self, dtname, n, m, key, directions, group=None):
        """Checks and times each (name, fn, check, nbytes) of `directions`,
        where fn() computes the direction's outputs on the current stream and
        check(outputs) returns (ok, detail); records the cell. group: which
        tables the cell belongs to, where one benchmark has tables of
        different shapes (markdown's directions name it)."""
        torch = self.torch
        cell = {"dtype": dtname, "N": n, "M": m, "impl": key}
        if group is not None:
            cell["group"] = group
        try:
            for name, fn, check, nbytes, poison_numel, dtype in directions():
                poison(torch, poison_numel, dtype, "cuda")
                out = fn()
                torch.cuda.synchronize()
                ok, detail = check(out)
                self.record["checks"].append([dtname, n, key, name, "ok" if ok else "WRONG", detail])
                if not ok:
                    log(f"!!!! {key} {name} {dtname} N={n}: {detail}")
                del out
                ms, _ = time_events(torch, [fn], self.args.rep_ms)
                gbps = nbytes / (ms * 1e-3) / 1e9
                cell[name] = {"us": ms * 1e3, "gbps": gbps, "pct": 100 * gbps / self.copy["start"], "ok": ok}
        except Exception as e:
            cell["error"] = short_reason(e)
            log(f"[{key}] {dtname} N={n}: {cell['error']}")
            traceback.print_exc(limit=2)
        self.record["cells"].append(cell)
        log(f"{dtname} N={n:>8} {key:>10}: " + "  ".join(
            f"{d} {v['us']:8.1f} us {v['pct']:5.1f}%" for d, v in cell.items() if isinstance(v, dict)))

    def finish(self):
        measure_copy(self, self.torch, "end")
        return self.record


def markdown(rec, peers, title, directions, bytes_note, shape_note=None, notes=None):
    """The report: one table per (direction, dtype) of % of copy bandwidth
    (us per call), the best of each row in bold, then where quack_cpp loses,
    peers not available, errors and the checks.

    directions: [(key, title)], or (key, title, group, columns): the table
    then holds only the cells recorded with that group (Run.cell) and, when
    columns is not None, only those peers. shape_note replaces "M*N = total
    elements per shape". notes(key, dtname, rows), rows [(N, M, {impl:
    cell})], returns lines to print under that table."""
    copy = rec["copy"]["start"]
    shapes = shape_note or f"M*N = {rec['total']} elements per shape"
    out = [f"# {title} ({rec['date']})", "",
           f"- commit: {rec['commit']}", f"- GPU: {rec['gpu']} (clocks: {rec['clocks']})",
           f"- torch {rec['torch']}; peers: " + ", ".join(f"{k} {v}" for k, v in rec["versions"].items()),
           f"- copy bandwidth (same run): {copy:.0f} GB/s at the start, {rec['copy'].get('end', 0):.0f} GB/s "
           "at the end; every % below is of the start figure",
           f"- {shapes}; {bytes_note}; median of CUDA-event timed calls, each queued behind a GPU sleep "
           "(device time, not the host's: bench_latency.py measures that)",
           "- **bold**: the best of the row; a cell marked WRONG failed the float64 check", ""]
    for entry in directions:
        d, dtitle, group, columns = (tuple(entry) + (None, None))[:4]
        cols = [p for p in peers if columns is None or p in columns]
        cells_d = [c for c in rec["cells"] if c.get("group") == group]
        for dtname in dict.fromkeys(c["dtype"] for c in cells_d):
            out += [f"## {dtitle}, {dtname}: % of copy bandwidth (us per call)", "",
                    "| N | M | " + " | ".join(TITLE[p] for p in cols) + " |",
                    "|---:|---:|" + "---:|" * len(cols)]
            losses = {p: [] for p in cols if is_ours(p)}
            rows = []
            for n in dict.fromkeys(c["N"] for c in cells_d if c["dtype"] == dtname):
                row = {c["impl"]: c for c in cells_d if c["dtype"] == dtname and c["N"] == n}
                vals = {p: row[p][d]["pct"] for p in cols if p in row and d in row[p]}
                best = max(vals.values()) if vals else None
                cells = []
                for p in cols:
                    if p not in row:
                        cells.append("n/a")
                    elif d not in row[p]:
                        cells.append("error")
                    else:
                        c = row[p][d]
                        t = f"{c['pct']:.1f}% ({c['us']:.1f})" + ("" if c["ok"] else " WRONG")
                        cells.append(f"**{t}**" if c["pct"] == best else t)
                m = next(iter(row.values()))["M"]
                rows.append((n, m, row))
                out.append(f"| {n} | {m} | " + " | ".join(cells) + " |")
                theirs = {p: v for p, v in vals.items() if not is_ours(p)}
                for p in losses:
                    ours = vals.get(p)
                    if ours is not None and theirs and ours < max(theirs.values()):
                        winner = max(theirs, key=theirs.get)
                        losses[p].append(f"N = {n}: {ours:.1f}% against {TITLE[winner]} {theirs[winner]:.1f}%")
            out += [""]
            for p, lost in losses.items():
                if lost:
                    out += [f"Where {TITLE[p]} loses: " + "; ".join(lost) + ".", ""]
            if notes is not None:
                lines = notes(d, dtname, rows)
                if lines:
                    out += list(lines) + [""]
    if rec["na"]:
        out += ["## Not available", ""] + [f"- {TITLE[k]}: {v}" for k, v in rec["na"].items()] + [""]
    errors = [c for c in rec["cells"] if "error" in c]
    if errors:
        out += ["## Errors", ""] + [f"- {TITLE[c['impl']]} {c['dtype']} N = {c['N']}"
                                     + (f" ({c['group']}, M = {c['M']})" if "group" in c else "")
                                     + f": {c['error']}" for c in errors] + [""]
    bad = [c for c in rec["checks"] if c[4] != "ok"]
    out += [f"## Checks: {len(rec['checks']) - len(bad)} of {len(rec['checks'])} passed", ""]
    out += [f"- WRONG: {TITLE[c[2]]} {c[3]} {c[0]} N = {c[1]}: {c[5]}" for c in bad]
    return "\n".join(out) + "\n"


def save(rec, text, out, json_path):
    """Prints the report and writes it to `out` and the record to
    `json_path` (each when given)."""
    import json
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rec, f, indent=1)


def write(rec, text, args):
    """Prints the report, writes --out / --json; exit status 1 when
    quack_cpp was wrong or failed in any cell."""
    save(rec, text, args.out, args.json)
    ours_bad = [c for c in rec["checks"] if is_ours(c[2]) and c[4] != "ok"]
    return 1 if ours_bad or any(is_ours(c["impl"]) and "error" in c for c in rec["cells"]) else 0
