"""Every op's side-by-side benchmark in one command, then one summary.

    python3 bench/bench_all.py [--ops rmsnorm,rmsnorm_bwd,layernorm,softmax,log_softmax,cross_entropy,latency]
                               [--dtypes bf16,fp32] [--sizes N,...] [--peers quack_cpp,torch,...]
                               [--rep-ms MS] [--quick] [--out-dir DIR] [--commit SHA]
                               [--deadline-s S]

Each op runs in a process of its own (bench/bench_<op>.py: a CUDA error in
one cannot take the others down), with the options given here passed on; its
report, record and log land in DIR/<op>.md, DIR/<op>.json and DIR/<op>.log,
its output lines echoed here with the op, its place in the run and the time
so far in front (the progress). Then DIR/summary.md: for every op,
direction and dtype, quack_cpp's % of its run's copy bandwidth against the
best peer's at each N, the winner, every cell where quack_cpp loses or fails
its float64 check, and every op that did not finish (its exit code and last
lines); and DIR/plots/<op>-<direction>.png (bench/plots.py, where matplotlib
is installed). An op that fails or runs out of time is reported, never
dropped. "latency" is bench/bench_latency.py: every op's forward at small
batches (CUDA-graph replay), its per-call host cost, first calls and import
times (one dtype: the first of --dtypes); the summary says where quack_cpp
is not the fastest there.

--quick: bf16, N = 4096 and 65536, M*N = 2^26, 10 ms a cell, no
torch.compile unless --peers names it (its compiles are most of a short
run), the cross-entropy training table at V = 32000 only; about a minute of
GPU time plus each process's imports. Without a GPU each op stops at once
and the summary says so.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import plots  # noqa: E402

# op -> its script; the options of --quick for it.
_SIDE_QUICK = ["--dtypes", "bf16", "--sizes", "4096,65536", "--total", str(1 << 26), "--rep-ms", "10"]
OPS = {
    "rmsnorm": ("bench_rmsnorm.py", ["--quick", "--ops", "sweep"]),
    "rmsnorm_bwd": ("bench_rmsnorm_bwd.py", _SIDE_QUICK),
    "layernorm": ("bench_layernorm.py", _SIDE_QUICK),
    "softmax": ("bench_softmax.py", _SIDE_QUICK),
    "log_softmax": ("bench_softmax.py", _SIDE_QUICK),
    "cross_entropy": ("bench_cross_entropy.py", _SIDE_QUICK + ["--train-sizes", "32000", "--train-m", "4096"]),
    # Small batches, host cost, first calls, imports (every op's forward).
    "latency": ("bench_latency.py", ["--quick"]),
}
# The options of this run an op's benchmark does not take (bench_latency
# measures one dtype at its own shapes).
NOT_PASSED = {"latency": ("--dtypes", "--sizes", "--rep-ms")}
ALL_PEERS = ["quack_cpp", "torch", "compile", "liger", "quack"]
QUICK_PEERS = ["quack_cpp", "torch", "liger", "quack"]
NAMES = plots.IMPLS


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated, from: " + ",".join(OPS))
    p.add_argument("--dtypes", default=None, help="passed on (default: each benchmark's; --quick: bf16)")
    p.add_argument("--sizes", default=None, help="N values, passed on (default: each benchmark's)")
    p.add_argument("--peers", default=None,
                   help="implementations, passed on (default: " + ",".join(ALL_PEERS) +
                   "; --quick: " + ",".join(QUICK_PEERS) + ")")
    p.add_argument("--rep-ms", type=float, default=None, help="GPU time a cell, passed on")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out-dir", default="bench-out", help="where the reports, records, logs and plots go")
    p.add_argument("--commit", default=None, help="the commit to record (the GPU machine's copy has no .git)")
    p.add_argument("--deadline-s", type=float, default=0.0,
                   help="stop starting ops, and stop the running one, after this many seconds (0: none)")
    a = p.parse_args(argv)
    a.ops = [o for o in a.ops.split(",") if o]
    for o in a.ops:
        if o not in OPS:
            p.error(f"--ops: unknown op {o!r}; choose from {','.join(OPS)}")
    if a.peers is not None:
        for k in a.peers.split(","):
            if k not in ALL_PEERS:
                p.error(f"--peers: unknown implementation {k!r}; choose from {','.join(ALL_PEERS)}")
    if a.deadline_s < 0:
        p.error("--deadline-s: must be >= 0")
    return a


def op_command(op, args, out_dir, remaining_s=None):
    """The command line of one op's benchmark: its quick options (with
    --quick), then the options given to this run, which win (argparse keeps
    the last)."""
    script, quick = OPS[op]
    cmd = [sys.executable, "-u", os.path.join(HERE, script)]
    if args.quick:
        cmd += quick
    peers = args.peers or (",".join(QUICK_PEERS) if args.quick else None)
    for flag, value in (("--dtypes", args.dtypes), ("--sizes", args.sizes), ("--peers", peers),
                        ("--rep-ms", args.rep_ms), ("--commit", args.commit)):
        if value is not None and flag not in NOT_PASSED.get(op, ()):
            cmd += [flag, str(value)]
    if op == "log_softmax":
        cmd += ["--log"]
    if op == "latency" and args.dtypes:
        cmd += ["--dtype", args.dtypes.split(",")[0]]
    if op == "rmsnorm":
        # Its own deadline writes a partial report before the kill would.
        cmd += ["--deadline-s", str(max(1, int(remaining_s - 10))) if remaining_s else "0"]
    cmd += ["--out", os.path.join(out_dir, op + ".md"), "--json", os.path.join(out_dir, op + ".json")]
    return cmd


def run_op(op, i, n, args, out_dir, t0):
    """Runs one op's benchmark, echoing its lines with the progress in front;
    returns {"rc", "seconds", "tail"}."""
    remaining = args.deadline_s - (time.monotonic() - t0) if args.deadline_s else None
    if remaining is not None and remaining <= 0:
        return {"rc": None, "seconds": 0.0, "tail": ["not started: --deadline-s reached"]}
    cmd = op_command(op, args, out_dir, remaining)
    start = time.monotonic()
    tail = []
    killed = threading.Event()
    with open(os.path.join(out_dir, op + ".log"), "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)

        def kill():
            killed.set()
            proc.kill()

        timer = threading.Timer(remaining, kill) if remaining is not None else None
        if timer:
            timer.start()
        try:
            for line in proc.stdout:
                log.write(line)
                tail = (tail + [line.rstrip("\n")])[-12:]
                print(f"[{op} {i}/{n} {time.monotonic() - t0:6.0f} s] {line.rstrip()}", flush=True)
        finally:
            rc = proc.wait()
            if timer:
                timer.cancel()
    if killed.is_set():
        tail.append(f"killed: --deadline-s reached after {time.monotonic() - start:.0f} s")
    return {"rc": rc, "seconds": time.monotonic() - start, "tail": tail}


def _fmt(p):
    return f"{p:.1f}%"


def summarize_record(op, record):
    """Markdown of one op's record: a table per (direction, dtype), the
    losses as a list of lines (returned separately)."""
    series, caption = plots.load_series(record)
    lines, losses = [f"### {op} ({caption})", ""], []
    for direction in plots.DIRECTIONS:
        if direction not in series:
            continue
        for dtype, impls in sorted(series[direction].items()):
            ours = {n: (p, ok) for n, p, ok in impls.get("quack_cpp", [])}
            peers = {k: {n: (p, ok) for n, p, ok in v} for k, v in impls.items() if not k.startswith("quack_cpp")}
            lines += [f"{direction}, {dtype}: % of copy bandwidth", "",
                      "| N | quack_cpp | best peer | winner |", "|---:|---:|---:|---|"]
            for n in sorted({n for v in impls.values() for n, _, _ in v}):
                good = [(v[n][0], k) for k, v in peers.items() if n in v and v[n][1]]
                wrong = [NAMES.get(k, k) for k, v in peers.items() if n in v and not v[n][1]]
                best = max(good) if good else None
                best_s = f"{_fmt(best[0])} ({NAMES.get(best[1], best[1])})" if best else "none ran"
                if wrong:
                    best_s += "; WRONG: " + ", ".join(wrong)
                if n not in ours:
                    lines.append(f"| {n} | n/a | {best_s} | {NAMES.get(best[1], best[1]) if best else ''} |")
                    losses.append(f"{op} {direction} {dtype} N={n}: quack_cpp did not run")
                    continue
                p, ok = ours[n]
                if not ok:
                    lines.append(f"| {n} | {_fmt(p)} WRONG | {best_s} | - |")
                    losses.append(f"{op} {direction} {dtype} N={n}: quack_cpp FAILED its float64 check")
                    continue
                win = best is None or p >= best[0]
                cell = f"**{_fmt(p)}**" if win else _fmt(p)
                lines.append(f"| {n} | {cell} | {best_s} | {'quack_cpp' if win else NAMES.get(best[1], best[1])} |")
                if not win:
                    losses.append(f"{op} {direction} {dtype} N={n}: {_fmt(p)} against "
                                  f"{NAMES.get(best[1], best[1])} {_fmt(best[0])}")
            lines.append("")
    return lines, losses


def summarize_latency(record):
    """Markdown of bench_latency's record: per section, where quack_cpp is
    slower than the fastest correct peer (the tables are in latency.md)."""
    lines, losses = ["### latency (small batches, host cost, first calls: latency.md)", ""], []

    def compare(section, key, value, label):
        groups = {}
        for c in record.get(section, []):
            groups.setdefault(key(c), {})[c["impl"]] = c
        won = 0
        for k, row in groups.items():
            ours = row.get("quack_cpp")
            peers = [(c[value], i) for i, c in row.items() if i != "quack_cpp" and value in c and c.get("ok", True)]
            if ours is None or value not in ours or ours.get("ok") is False:
                losses.append(f"latency {section} {label(k)}: quack_cpp " +
                              ("FAILED its float64 check" if ours and ours.get("ok") is False else "did not run"))
                continue
            best = min(peers) if peers else None
            if best is None or ours[value] <= best[0]:
                won += 1
            else:
                losses.append(f"latency {section} {label(k)}: {ours[value]:.2f} against "
                              f"{NAMES.get(best[1], best[1])} {best[0]:.2f} ({value})")
        return won, len(groups)

    for section, key, value, label in (
            ("small", lambda c: (c["op"], c.get("M"), c.get("N")), "us", lambda k: f"{k[0]} M={k[1]} N={k[2]}"),
            ("host", lambda c: c["op"], "us", lambda k: k),
            ("first", lambda c: c["op"], "new_n_ms", lambda k: f"{k} (a new N)")):
        won, total = compare(section, key, value, label)
        if total:
            lines.append(f"- {section}: quack_cpp fastest (or tied) in {won} of {total}")
    return lines + [""], losses


def summarize(results, commit=None):
    """summary.md of a run. results: {op: {"rc", "seconds", "tail",
    "record" (the parsed JSON, or None)}} in run order."""
    lines = [f"# All ops, side by side ({_dt.date.today().isoformat()})", "",
             f"- commit: {commit or 'unknown'}",
             "- every % is of the copy bandwidth measured in the same op's run (each report has it)",
             "- **bold**: quack_cpp at or above every peer that passed its float64 check", ""]
    losses, failed = [], []
    for op, r in results.items():
        if r.get("rc") != 0:
            failed.append(f"- {op}: " + ("not started" if r.get("rc") is None else f"exit code {r['rc']}") +
                          f" after {r.get('seconds', 0.0):.0f} s; last lines:\n\n" +
                          "\n".join("      " + t for t in r.get("tail", [])[-6:]) + "\n")
        rec = r.get("record")
        if rec is None:
            continue
        try:
            body, lost = summarize_latency(rec) if rec.get("kind") == "latency" else summarize_record(op, rec)
        except ValueError as e:
            failed.append(f"- {op}: its record could not be read ({e})")
            continue
        lines += body
        losses += lost
    lines += ["## Where quack_cpp loses or fails", ""]
    lines += [f"- {x}" for x in losses] or ["- nowhere in this run"]
    lines += ["", "## Ops that did not finish", ""]
    lines += failed or ["- none"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.monotonic()
    results = {}
    for i, op in enumerate(args.ops, 1):
        print(f"==== [{i}/{len(args.ops)}] {op} ====", flush=True)
        r = run_op(op, i, len(args.ops), args, args.out_dir, t0)
        path = os.path.join(args.out_dir, op + ".json")
        r["record"] = None
        if r["rc"] is not None and os.path.exists(path):
            with open(path) as f:
                try:
                    r["record"] = json.load(f)
                except json.JSONDecodeError as e:
                    r["tail"].append(f"{path}: not JSON ({e})")
        results[op] = r
        print(f"==== {op}: exit code {r['rc']}, {r['seconds']:.0f} s ====", flush=True)
    text = summarize(results, args.commit)
    with open(os.path.join(args.out_dir, "summary.md"), "w") as f:
        f.write(text)
    try:
        for op, r in results.items():
            if r["record"] is not None and r["record"].get("kind") != "latency":
                for name in plots.plot_record(os.path.join(args.out_dir, op + ".json"),
                                              os.path.join(args.out_dir, "plots"), op.replace("_", "-")):
                    print(name)
    except ImportError as e:
        print(f"no plots: {e}")
    print(text)
    return 0 if all(r["rc"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
