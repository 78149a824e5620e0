"""bench/bench_all.py without a GPU: its options, the command line it gives
each op's benchmark (accepted by that benchmark's own parser), the summary
of recorded runs, and a whole run through stand-in benchmarks."""
import json
import os
import textwrap

import pytest

from bench_loader import BENCH, load

_RESULTS = os.path.join(BENCH, "results")


bench_all = load("bench_all")


def test_unknown_op_or_peer_is_refused():
    with pytest.raises(SystemExit):
        bench_all.parse_args(["--ops", "rmsnorm,gelu"])
    with pytest.raises(SystemExit):
        bench_all.parse_args(["--peers", "quack_cpp,apex"])
    with pytest.raises(SystemExit):
        bench_all.parse_args(["--deadline-s", "-1"])


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("op", [op for op in bench_all.OPS if op != "latency"])
def test_each_benchmark_accepts_its_command(op, quick, tmp_path):
    pytest.importorskip("torch")  # the benchmarks import it (not CUDA) at load
    argv = ["--ops", op, "--commit", "abc1234", "--dtypes", "bf16", "--rep-ms", "5"]
    args = bench_all.parse_args(argv + (["--quick"] if quick else []))
    cmd = bench_all.op_command(op, args, str(tmp_path), remaining_s=100.0)
    script = os.path.basename(cmd[2])
    assert script == bench_all.OPS[op][0]
    mod = load(os.path.splitext(script)[0])
    parsed = mod.parse_args(cmd[3:])
    assert parsed.commit == "abc1234"
    assert parsed.out == os.path.join(str(tmp_path), op + ".md")
    assert parsed.json == os.path.join(str(tmp_path), op + ".json")
    dtypes = parsed.dtypes if isinstance(parsed.dtypes, list) else parsed.dtypes.split(",")
    assert dtypes == ["bf16"]
    assert parsed.rep_ms == 5.0  # given here: wins over --quick's
    peers = parsed.peers if isinstance(parsed.peers, list) else parsed.peers.split(",")
    if quick:
        assert "compile" not in peers and "quack_cpp" in peers
    if op == "rmsnorm":
        assert parsed.deadline_s == 90.0
    if script == "bench_softmax.py":
        assert parsed.log == (op == "log_softmax")


def _recorded(name):
    path = os.path.join(_RESULTS, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} not in bench/results")
    with open(path) as f:
        return json.load(f)


def test_summary_of_a_recorded_cross_entropy_run():
    rec = _recorded("2026-11-30-cross-entropy-e4eb7b2.json")
    text = bench_all.summarize({"cross_entropy": {"rc": 0, "seconds": 90.0, "tail": [], "record": rec}}, "e4eb7b2")
    # Each table row checked against the record itself.
    cells = {(c["dtype"], c["N"], c["impl"]): c for c in rec["cells"] if c["group"] == "fwd"}
    ours = cells[("bf16", 1024, "quack_cpp")]["fwd"]["pct"]
    quack = cells[("bf16", 1024, "quack")]["fwd"]["pct"]
    assert quack > ours
    assert f"cross_entropy fwd bf16 N=1024: {ours:.1f}% against QuACK {quack:.1f}%" in text
    ours16k = cells[("bf16", 16384, "quack_cpp")]["fwd"]["pct"]
    assert f"| 16384 | **{ours16k:.1f}%** |" in text
    # QuACK's failed check at 151936 is named, and not taken as the best peer.
    row = next(line for line in text.splitlines() if line.startswith("| 151936 |") and "WRONG: QuACK" in line)
    assert "(QuACK)" not in row
    assert "train, bf16" in text and "Ops that did not finish" in text and "- none" in text


def test_summary_of_a_recorded_rmsnorm_sweep():
    rec = _recorded("2026-11-30-rmsnorm-fwd-d62ad00.json")
    text = bench_all.summarize({"rmsnorm": {"rc": 0, "seconds": 60.0, "tail": [], "record": rec}})
    assert "### rmsnorm" in text and "fwd, bf16" in text
    n_rows = sum(1 for line in text.splitlines() if line.startswith("| ") and "---" not in line
                 and not line.startswith("| N "))
    assert n_rows == len(rec["sweep"])


def test_summary_lists_failed_ops_and_our_failed_checks():
    rec = {"date": "2026-11-30", "commit": "x", "gpu": "H200", "cells": [
        {"dtype": "bf16", "N": 4096, "M": 8, "impl": "quack_cpp", "fwd": {"pct": 90.0, "ok": False}},
        {"dtype": "bf16", "N": 4096, "M": 8, "impl": "torch", "fwd": {"pct": 40.0, "ok": True}},
        {"dtype": "bf16", "N": 8192, "M": 8, "impl": "torch", "fwd": {"pct": 41.0, "ok": True}}]}
    text = bench_all.summarize({
        "softmax": {"rc": 0, "seconds": 1.0, "tail": [], "record": rec},
        "layernorm": {"rc": 4, "seconds": 12.0, "tail": ["Traceback ...", "RuntimeError: CUDA error"],
                      "record": None},
        "cross_entropy": {"rc": None, "seconds": 0.0, "tail": ["not started: --deadline-s reached"],
                          "record": None}})
    assert "softmax fwd bf16 N=4096: quack_cpp FAILED its float64 check" in text
    assert "softmax fwd bf16 N=8192: quack_cpp did not run" in text
    assert "- layernorm: exit code 4 after 12 s" in text and "RuntimeError: CUDA error" in text
    assert "- cross_entropy: not started" in text


STAND_IN = textwrap.dedent('''
    import argparse, json, sys
    p = argparse.ArgumentParser()
    for a in ("--dtypes", "--sizes", "--peers", "--rep-ms", "--commit", "--out", "--json", "--total",
              "--train-sizes", "--train-m", "--ops", "--deadline-s"):
        p.add_argument(a)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    print("measuring", a.dtypes, flush=True)
    if "FAIL" in sys.argv[0]:
        sys.exit(4)
    rec = {"date": "2026-11-30", "commit": a.commit, "gpu": "stand-in", "cells": [
        {"dtype": "bf16", "N": 4096, "M": 1, "impl": "quack_cpp", "fwd": {"pct": 95.0, "ok": True}},
        {"dtype": "bf16", "N": 4096, "M": 1, "impl": "torch", "fwd": {"pct": 97.0, "ok": True}}]}
    json.dump(rec, open(a.json, "w"))
    open(a.out, "w").write("# report")
''')


def test_a_whole_run_through_stand_in_benchmarks(tmp_path, monkeypatch, capsys):
    (tmp_path / "ok.py").write_text(STAND_IN)
    (tmp_path / "FAIL.py").write_text(STAND_IN)
    monkeypatch.setattr(bench_all, "HERE", str(tmp_path))
    monkeypatch.setattr(bench_all, "OPS", {"softmax": ("ok.py", []), "layernorm": ("FAIL.py", [])})
    monkeypatch.setattr(bench_all.plots, "plot_record", lambda *a, **k: [])
    out = tmp_path / "out"
    rc = bench_all.main(["--ops", "softmax,layernorm", "--out-dir", str(out), "--commit", "c0ffee1",
                         "--dtypes", "bf16"])
    assert rc == 1  # one op failed
    printed = capsys.readouterr().out
    assert "[softmax 1/2" in printed and "measuring bf16" in printed
    summary = (out / "summary.md").read_text()
    assert "softmax fwd bf16 N=4096: 95.0% against torch eager 97.0%" in summary
    assert "- layernorm: exit code 4" in summary
    assert (out / "softmax.log").read_text().startswith("$ ")


def test_the_latency_benchmark_gets_its_own_options():
    args = bench_all.parse_args(["--ops", "latency", "--dtypes", "fp16,fp32", "--sizes", "4096", "--rep-ms", "3",
                                 "--peers", "quack_cpp,torch"])
    cmd = bench_all.op_command("latency", args, "/tmp/o")
    parsed = load("bench_latency").parse_args(cmd[3:])
    assert parsed.dtype == "fp16" and parsed.peers == ["quack_cpp", "torch"]
    assert "--sizes" not in cmd and "--rep-ms" not in cmd


def test_summary_of_a_latency_record():
    rec = {"kind": "latency",
           "small": [{"op": "softmax", "M": 1, "N": 4096, "impl": "quack_cpp", "us": 2.0, "ok": True},
                     {"op": "softmax", "M": 1, "N": 4096, "impl": "torch", "us": 3.0, "ok": True},
                     {"op": "softmax", "M": 64, "N": 4096, "impl": "quack_cpp", "us": 4.0, "ok": True},
                     {"op": "softmax", "M": 64, "N": 4096, "impl": "quack", "us": 3.0, "ok": True},
                     {"op": "softmax", "M": 64, "N": 4096, "impl": "torch", "us": 1.0, "ok": False}],
           "host": [{"op": "softmax", "impl": "quack_cpp", "error": "boom"},
                    {"op": "softmax", "impl": "torch", "us": 6.0, "ok": True}],
           "first": [], "import": []}
    text = bench_all.summarize({"latency": {"rc": 1, "seconds": 5.0, "tail": [], "record": rec}})
    assert "- small: quack_cpp fastest (or tied) in 1 of 2" in text
    assert "latency small softmax M=64 N=4096: 4.00 against QuACK 3.00 (us)" in text  # torch's WRONG 1.0 ignored
    assert "latency host softmax: quack_cpp did not run" in text
    assert "- latency: exit code 1" in text
