"""Plots of recorded benchmark runs: % of the same run's copy bandwidth
against N (log scale), one line per implementation, one panel per dtype,
one PNG per (op, direction).

    python3 bench/plots.py OUT_DIR RECORD.json[=OP] ...

RECORD.json is a bench/results/*.json record, either the side-by-side format
(bench/sidebyside.py: "cells" of {dtype, N, impl, <direction>: {gbps, pct,
ok}}) or bench_rmsnorm.py's ("sweep": {"dtype/N": {impl: {gbps, status}}},
"copy_gbps"); OP names the op in titles and file names (default: the file
name without its date and commit). A cell that failed its float64 check is
drawn as an x and left out of the line; a peer that could not run is
absent. Needs matplotlib (the GPU machines have it); load_series works
without it.
"""
import json
import os
import re
import sys
from collections import defaultdict

# Implementation keys in the records -> legend names, in drawing order.
IMPLS = {"quack_cpp": "quack_cpp", "quack_cpp_inplace": "quack_cpp in-place", "torch": "torch eager",
         "compile": "torch.compile", "liger": "Liger", "quack": "QuACK"}
DIRECTIONS = ("fwd", "bwd", "step", "train")


def op_name(path: str) -> str:
    """bench/results/2026-11-30-cross-entropy-b73df5f.json -> cross-entropy."""
    base = os.path.splitext(os.path.basename(path))[0]
    base = re.sub(r"^\d{4}-\d{2}-\d{2}-", "", base)
    return re.sub(r"-[0-9a-f]{7,}(-.*)?$", "", base)


def load_series(record: dict):
    """{direction: {dtype: {impl: [(N, pct, ok), ...] sorted by N}}} and a
    caption (gpu, commit, date)."""
    out = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    if "cells" in record:
        for c in record["cells"]:
            for d in DIRECTIONS:
                if isinstance(c.get(d), dict) and c[d].get("pct") is not None:
                    out[d][c["dtype"]][c["impl"]].append((c["N"], float(c[d]["pct"]), bool(c[d].get("ok", True))))
        caption = f"{record.get('gpu', '?')}, commit {record.get('commit', '?')}, {record.get('date', '?')}"
    elif "sweep" in record:
        copy = float(record["copy_gbps"]["start"])
        for key, cell in record["sweep"].items():
            dtype, n = key.split("/")
            for impl, r in cell.items():
                if isinstance(r, dict) and r.get("status") == "ok" and r.get("gbps") is not None:
                    out["fwd"][dtype][impl].append((int(n), 100.0 * float(r["gbps"]) / copy, True))
        meta = record.get("meta", {})
        caption = f"{meta.get('gpu', '?').split(',')[0]}, commit {meta.get('commit', '?')}, " \
                  f"{meta.get('started_utc', '?')[:10]}"
    else:
        raise ValueError("not a recognised benchmark record (no 'cells' or 'sweep')")
    for d in out.values():
        for s in d.values():
            for pts in s.values():
                pts.sort()
    return out, caption


def plot_record(path: str, out_dir: str, op: str = None):
    """Writes <out_dir>/<op>-<direction>.png for every direction in the
    record; returns the paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(path) as f:
        series, caption = load_series(json.load(f))
    op = op or op_name(path)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for direction, by_dtype in series.items():
        dtypes = sorted(by_dtype, key=lambda t: {"bf16": 0, "fp16": 1, "f16": 1, "fp32": 2, "f32": 2}.get(t, 3))
        fig, axes = plt.subplots(1, len(dtypes), figsize=(5.2 * len(dtypes), 3.8), squeeze=False, sharey=True)
        for ax, dtype in zip(axes[0], dtypes):
            impls = by_dtype[dtype]
            for impl in sorted(impls, key=lambda k: list(IMPLS).index(k) if k in IMPLS else 99):
                pts = impls[impl]
                good = [(n, p) for n, p, ok in pts if ok]
                bad = [(n, p) for n, p, ok in pts if not ok]
                style = dict(lw=2.4, zorder=3) if impl.startswith("quack_cpp") else dict(lw=1.3)
                line = ax.plot([n for n, _ in good], [p for _, p in good], marker="o", ms=3.5,
                               label=IMPLS.get(impl, impl), **style)[0]
                if bad:
                    ax.plot([n for n, _ in bad], [p for _, p in bad], "x", ms=8, color=line.get_color())
            ax.set_xscale("log", base=2)
            ax.set_title(f"{op} {direction}, {dtype}")
            ax.set_xlabel("N (row length)")
            ax.axhline(100.0, color="0.6", lw=0.8, ls="--")
            ax.grid(True, which="major", alpha=0.3)
        axes[0][0].set_ylabel("% of copy bandwidth")
        axes[0][-1].legend(fontsize=8, loc="best")
        fig.suptitle(f"{caption}  (x: failed its float64 check)", fontsize=9)
        fig.tight_layout()
        name = os.path.join(out_dir, f"{op}-{direction}.png")
        fig.savefig(name, dpi=90)
        plt.close(fig)
        written.append(name)
    return written


def main(argv):
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    out_dir = argv[0]
    for spec in argv[1:]:
        path, _, op = spec.partition("=")
        for name in plot_record(path, out_dir, op or None):
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
