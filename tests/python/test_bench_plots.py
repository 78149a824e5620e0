"""bench/plots.py: the records' series (both formats) and the PNGs (where
matplotlib is installed). No GPU."""
import importlib.util
import json
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "plots.py")
_spec = importlib.util.spec_from_file_location("bench_plots", _PATH)
plots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plots)


def sidebyside_record():
    cells = []
    for n, ours, peer in ((1024, 70.0, 80.0), (4096, 90.0, 60.0)):
        cells.append({"dtype": "bf16", "N": n, "M": 8, "impl": "quack_cpp",
                      "fwd": {"us": 1.0, "gbps": 1.0, "pct": ours, "ok": True},
                      "train": {"us": 2.0, "gbps": 1.0, "pct": ours / 2, "ok": True}})
        cells.append({"dtype": "bf16", "N": n, "M": 8, "impl": "quack",
                      "fwd": {"us": 1.0, "gbps": 1.0, "pct": peer, "ok": n != 4096}})
    cells.reverse()  # the loader sorts by N
    return {"date": "2026-11-30", "commit": "abc1234", "gpu": "NVIDIA H200", "cells": cells}


def sweep_record():
    return {"meta": {"gpu": "NVIDIA H200, 132 SMs", "commit": "d62ad00", "started_utc": "2026-11-30T06:33:28"},
            "copy_gbps": {"start": 4000.0, "end": 4000.0},
            "sweep": {"fp32/256": {"M": 4, "quack_cpp": {"status": "ok", "gbps": 3000.0},
                                   "liger": {"status": "error: no kernel", "gbps": None}},
                      "fp32/128": {"M": 8, "quack_cpp": {"status": "ok", "gbps": 2000.0}}}}


def test_sidebyside_series():
    series, caption = plots.load_series(sidebyside_record())
    assert set(series) == {"fwd", "train"}
    assert series["fwd"]["bf16"]["quack_cpp"] == [(1024, 70.0, True), (4096, 90.0, True)]
    assert series["fwd"]["bf16"]["quack"] == [(1024, 80.0, True), (4096, 60.0, False)]  # the WRONG cell kept, marked
    assert series["train"]["bf16"]["quack_cpp"] == [(1024, 35.0, True), (4096, 45.0, True)]
    assert "quack" not in series["train"]["bf16"]
    assert caption == "NVIDIA H200, commit abc1234, 2026-11-30"


def test_sweep_series_uses_the_copy_bandwidth_and_drops_failed_peers():
    series, caption = plots.load_series(sweep_record())
    assert series["fwd"]["fp32"]["quack_cpp"] == [(128, 50.0, True), (256, 75.0, True)]
    assert "liger" not in series["fwd"]["fp32"]
    assert caption == "NVIDIA H200, commit d62ad00, 2026-11-30"


def test_unknown_record_is_refused():
    with pytest.raises(ValueError, match="not a recognised benchmark record"):
        plots.load_series({"rows": []})


def test_op_names_from_record_files():
    assert plots.op_name("bench/results/2026-11-30-cross-entropy-b73df5f.json") == "cross-entropy"
    assert plots.op_name("2026-11-30-softmax-4b045d3-quack.json") == "softmax"
    assert plots.op_name("2026-11-30-rmsnorm-fwd.json") == "rmsnorm-fwd"


def test_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    rec = tmp_path / "2026-11-30-toy-abc1234.json"
    rec.write_text(json.dumps(sidebyside_record()))
    written = plots.plot_record(str(rec), str(tmp_path / "out"))
    assert sorted(os.path.basename(p) for p in written) == ["toy-fwd.png", "toy-train.png"]
    for p in written:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
