"""scripts/sanitize_cases.sh and scripts/sanitize_py.sh (and the runner they
share, scripts/sanitize_runner.sh) without a GPU.
sanitize_cases.sh: a stand-in test binary (its case listing) and a stand-in
compute-sanitizer (an exit status per case) check the order, the batching,
the totals and the exit status. sanitize_py.sh: a stand-in sanitizer that
runs its program, over a small test directory, checks the chunks and the
totals."""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sanitize_cases.sh"
PY_SCRIPT = ROOT / "scripts" / "sanitize_py.sh"

LISTING = """\
Running main() from gtest_main.cc
Ops/WarpReduce.
  Sum/width1  # GetParam() = 1
  Sum/width2  # GetParam() = 2
Cases/Fwd.
  Match/N4096_bf16_M8192
  Match/N100_f32
  Match/N4194304_f32_w
  Match/N70000_bf16_M300
Edge.
  DeterministicLoss
  Slow
GridCases/Grid.
  Match/G100_bf16_M2
  Match/G1048576_f32_M3
"""

# The stand-in test binary: --gtest_list_tests with gtest's glob filter
# (':'-separated patterns, no negative ones).
LIST_CASES = """\
#!/usr/bin/env bash
for a in "$@"; do case $a in --gtest_filter=*) f=${a#--gtest_filter=};; esac; done
IFS=: read -r -a pats <<< "$f"
suite= shown=
while IFS= read -r line; do
  case $line in
    Running*) echo "$line" ;;
    "  "*) name=${line#  }; name=${name%%  #*}
           for p in "${pats[@]}"; do
             # shellcheck disable=SC2053
             if [[ $suite$name == $p ]]; then
               [ "$shown" = "$suite" ] || { echo "$suite"; shown=$suite; }
               echo "$line"; break
             fi
           done ;;
    *) suite=$line ;;
  esac
done <<'EOF'
@LISTING@EOF
"""

# The stand-in sanitizer: records the filter it got, then an exit status by
# case: errors reported (3) for DeterministicLoss, a test failure (1) for
# N100, killed by the limit for Slow.
SANITIZER = """\
#!/usr/bin/env bash
for a in "$@"; do case $a in --gtest_filter=*) f=${a#--gtest_filter=};; esac; done
echo "$f" >> "$RUNS"
case $f in *Slow*) sleep 5;; esac
case $f in *DeterministicLoss*) echo "ERROR SUMMARY: 1 error"; exit 3;; esac
case $f in *N100_*) exit 1;; esac
echo "ERROR SUMMARY: 0 errors"
"""


@pytest.fixture
def stand_ins(tmp_path):
    if shutil.which("bash") is None or shutil.which("xargs") is None:
        pytest.skip("needs bash and xargs")
    binp = tmp_path / "tests_bin"
    binp.write_text(LIST_CASES.replace("@LISTING@", LISTING))
    san = tmp_path / "compute-sanitizer"
    san.write_text(SANITIZER)
    for p in (binp, san):
        p.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", SANITIZE_BIN=str(binp),
               RUNS=str(tmp_path / "runs"), SANITIZE_SHARDS="1", SANITIZE_BATCH="2")
    return tmp_path, out, env


def run(env, out, *args, tool="racecheck", filt="*", limit="2"):
    return subprocess.run(["bash", str(SCRIPT), tool, filt, limit, str(out), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_biggest_first_big_cases_alone_small_ones_batched(stand_ins):
    tmp, out, env = stand_ins
    r = run(env, out, filt="Ops/*:Cases/*")
    assert r.returncode == 1, r.stdout + r.stderr  # N100 failed
    runs = (tmp / "runs").read_text().split()
    # N x M: 33.5M, 21M and 4.2M alone (>= 2^20), then N100 and the two
    # size-less cases two to a process, in listing order.
    assert runs == ["Cases/Fwd.Match/N4096_bf16_M8192", "Cases/Fwd.Match/N70000_bf16_M300",
                    "Cases/Fwd.Match/N4194304_f32_w", "Cases/Fwd.Match/N100_f32:Ops/WarpReduce.Sum/width1",
                    "Ops/WarpReduce.Sum/width2"]
    assert "racecheck: 6 cases: 4 clean, 0 in processes with errors reported, 0 in killed processes, " \
           "2 in failed processes, 0 not started (deadline)" in r.stdout
    status = (out / "racecheck.status").read_text().splitlines()
    assert len(status) == 5 and status[3] == "1 2 Cases/Fwd.Match/N100_f32:Ops/WarpReduce.Sum/width1", status
    log = (out / "racecheck.log").read_text()
    assert "ERROR SUMMARY: 0 errors" in log and "== Cases/Fwd.Match/N4096_bf16_M8192\n" in log


def test_grid_cases_are_sized_by_g(stand_ins):
    # The grid forward's cases name their columns G<n>: G1048576 x M3 runs
    # alone and first; G100 x M2 (200 elements) comes next, batched with
    # the size-less ones. (G was read as size 0 until the fifty-seventh
    # session: 16 grid cases of up to 3M elements shared one memcheck
    # process.)
    tmp, out, env = stand_ins
    r = run(env, out, filt="GridCases/*:Ops/*")
    assert r.returncode == 0, r.stdout + r.stderr
    runs = (tmp / "runs").read_text().split()
    assert runs == ["GridCases/Grid.Match/G1048576_f32_M3", "GridCases/Grid.Match/G100_bf16_M2:Ops/WarpReduce.Sum/width1",
                    "Ops/WarpReduce.Sum/width2"], runs


def test_row_cap_counts_capped_sizes(stand_ins):
    # QUACK_TEST_MAX_ELEMS=2^20: N4096 x M8192 runs 256 rows (2^20: alone),
    # N70000 x M300 14 rows (980000: batched), N4194304 one row (alone).
    tmp, out, env = stand_ins
    env["QUACK_TEST_MAX_ELEMS"] = "1048576"
    run(env, out, filt="Ops/*:Cases/*")
    runs = (tmp / "runs").read_text().split()
    assert runs == ["Cases/Fwd.Match/N4194304_f32_w", "Cases/Fwd.Match/N4096_bf16_M8192",
                    "Cases/Fwd.Match/N70000_bf16_M300:Cases/Fwd.Match/N100_f32",
                    "Ops/WarpReduce.Sum/width1:Ops/WarpReduce.Sum/width2"], runs


def test_element_budget_splits_batches(stand_ins):
    # Under the cap (2^20) N70000 x M300 runs 14 rows (980000 elements). A
    # budget of 980050 elements a process keeps it from the small cases,
    # which then share one process (100 + 0 + 0 elements, batch 16).
    tmp, out, env = stand_ins
    env.update(QUACK_TEST_MAX_ELEMS="1048576", SANITIZE_BATCH="16", SANITIZE_BATCH_ELEMS="980050")
    run(env, out, filt="Ops/*:Cases/*")
    runs = (tmp / "runs").read_text().split()
    assert runs == ["Cases/Fwd.Match/N4194304_f32_w", "Cases/Fwd.Match/N4096_bf16_M8192",
                    "Cases/Fwd.Match/N70000_bf16_M300",
                    "Cases/Fwd.Match/N100_f32:Ops/WarpReduce.Sum/width1:Ops/WarpReduce.Sum/width2"], runs
    # No budget: the batch size alone.
    (tmp / "runs").unlink()
    env["SANITIZE_BATCH_ELEMS"] = "0"
    run(env, out, filt="Ops/*:Cases/*")
    runs = (tmp / "runs").read_text().split()
    assert runs[2] == ("Cases/Fwd.Match/N70000_bf16_M300:Cases/Fwd.Match/N100_f32:Ops/WarpReduce.Sum/width1:"
                       "Ops/WarpReduce.Sum/width2"), runs


def test_errors_kills_and_clean_runs(stand_ins):
    tmp, out, env = stand_ins
    r = run(env, out, filt="Edge.*")
    assert r.returncode == 1
    # Both size-less cases in one process: its status is the errors' (3) or
    # the kill's (124); each alone shows its own.
    env["SANITIZE_BATCH"] = "1"
    r = run(env, out, filt="Edge.*")
    assert "2 cases: 0 clean, 1 in processes with errors reported, 1 in killed processes" in r.stdout, r.stdout
    assert "errors reported: Edge.DeterministicLoss" in r.stdout
    assert "killed at the limit: Edge.Slow" in r.stdout
    r = run(env, out, filt="Ops/*")
    assert r.returncode == 0 and "2 cases: 2 clean" in r.stdout, r.stdout


def test_deadline_and_empty_filter(stand_ins):
    tmp, out, env = stand_ins
    env["SANITIZE_DEADLINE"] = "0"
    r = run(env, out, filt="Ops/*")
    assert r.returncode == 1 and "2 not started (deadline)" in r.stdout, r.stdout
    assert not (tmp / "runs").exists()
    r = run(env, out, filt="Nothing*")
    assert r.returncode == 1 and "no case matches" in r.stdout


def test_wall_cuts_limits_and_progress_records_each_unit(stand_ins):
    # SANITIZE_WALL=2 with a 10 s limit: Edge.Slow (5 s) is killed at the
    # wall, not at its limit; each unit's status line is in TOOL.progress as
    # it ends. A wall already passed starts nothing.
    import time
    tmp, out, env = stand_ins
    env.update(SANITIZE_BATCH="1", SANITIZE_WALL="2")
    t0 = time.monotonic()
    r = run(env, out, filt="Edge.Slow:Ops/*", limit="10")
    took = time.monotonic() - t0
    assert took < 4.5, took
    assert "killed at the limit: Edge.Slow" in r.stdout, r.stdout
    progress = (out / "racecheck.progress").read_text().splitlines()
    assert sorted(progress) == sorted((out / "racecheck.status").read_text().splitlines()), progress
    assert "124 1 Edge.Slow" in progress and "0 1 Ops/WarpReduce.Sum/width1" in progress, progress
    (tmp / "runs").unlink()
    env["SANITIZE_WALL"] = "0"
    r = run(env, out, filt="Ops/*")
    assert r.returncode == 1 and "2 not started (deadline)" in r.stdout, r.stdout
    assert not (tmp / "runs").exists()


def test_clean_list_and_done_files(stand_ins):
    # A run writes the clean cases to TOOL.clean; a later run given it (and
    # a hand-written file with a comment) as $SANITIZE_DONE leaves them out.
    tmp, out, env = stand_ins
    run(env, out, filt="Cases/*")
    clean = (out / "racecheck.clean").read_text().split()
    assert sorted(clean) == ["Cases/Fwd.Match/N4096_bf16_M8192", "Cases/Fwd.Match/N4194304_f32_w",
                             "Cases/Fwd.Match/N70000_bf16_M300"], clean
    (tmp / "runs").unlink()
    done = tmp / "done.txt"
    done.write_text("# clean at abc1234\nCases/Fwd.Match/N70000_bf16_M300  (racecheck, 1M cap)\n")
    first = tmp / "first.clean"
    shutil.copy(out / "racecheck.clean", first)
    env["SANITIZE_DONE"] = f"{first} {done}"
    r = run(env, out, filt="Cases/*:Edge.DeterministicLoss")
    assert "3 cases left out, already clean" in r.stdout, r.stdout
    assert (tmp / "runs").read_text().split() == ["Cases/Fwd.Match/N100_f32:Edge.DeterministicLoss"]
    assert (out / "racecheck.clean").read_text() == ""
    # Everything already clean: nothing runs, exit 0; a missing file: exit 1.
    (tmp / "runs").unlink()
    r = run(env, out, filt="Cases/Fwd.Match/N4*")
    assert r.returncode == 0 and "already clean" in r.stdout and not (tmp / "runs").exists(), r.stdout
    env["SANITIZE_DONE"] = str(tmp / "missing.txt")
    r = run(env, out, filt="Cases/*")
    assert r.returncode == 1 and "cannot read SANITIZE_DONE" in r.stdout, r.stdout


PASSING_SANITIZER = """\
#!/usr/bin/env bash
while [ "$1" != --error-exitcode ]; do shift; done
shift 2
"$@"
"""

SMALL_TESTS = """\
import pytest

@pytest.mark.parametrize("i", range(5))
def test_fine(i):
    assert i >= 0

def test_broken():
    assert False, "fails on purpose"
"""


def test_sanitize_py_chunks_and_totals(tmp_path):
    if shutil.which("bash") is None or shutil.which("split") is None:
        pytest.skip("needs bash and coreutils")
    import sys
    san = tmp_path / "bin" / "compute-sanitizer"
    san.parent.mkdir()
    san.write_text(PASSING_SANITIZER)
    san.chmod(0o755)
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_small.py").write_text(SMALL_TESTS)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PATH=f"{san.parent}:{os.environ['PATH']}", PYTHON=sys.executable,
               SANITIZE_PY_CHUNK="2", SANITIZE_PY_WORKERS="2")

    def run(filt):
        return subprocess.run(["bash", str(PY_SCRIPT), filt, "60", str(out), str(tests)], env=env,
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    r = run("fine")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "memcheck_py: 5 tests: 5 clean, 0 in processes with errors reported" in r.stdout, r.stdout
    status = (out / "memcheck_py.status").read_text().splitlines()
    assert [line.split()[1] for line in status] == ["2", "2", "1"]  # chunks of 2
    assert status[0].startswith("0 2 the chunk from ") and "test_fine[0]" in status[0], status
    assert (out / "memcheck_py.log").read_text().count("== the chunk from ") == 3
    r = run("")  # everything: the failing test's chunk is reported
    assert r.returncode == 1
    assert "6 tests: 4 clean" in r.stdout and "2 in failed processes" in r.stdout, r.stdout
    assert "exit 1: the chunk from t/test_small.py::test_fine[4]" in r.stdout, r.stdout  # with test_broken
    assert "fails on purpose" in (out / "memcheck_py.log").read_text()
    r = run("no_such_test")
    assert r.returncode == 1 and "no test matches" in r.stdout
    # The CPU-only files are left out by name: here, the stand-in file itself.
    env["SANITIZE_PY_SKIP"] = "test_other.py test_small.py"
    r = run("fine")
    assert r.returncode == 1 and "5 tests of the CPU-only files left out" in r.stdout, r.stdout
    assert "no test matches" in r.stdout


def test_reduce_overhead_probe_settings_exist():
    # scripts/probe_reduce_overhead.py's experiments name inductor settings
    # that this torch has (checked here, on the CPU, before a device call
    # relies on them), and it refuses an unknown experiment.
    pytest.importorskip("torch")
    import importlib.util
    import torch._inductor.config as cfg
    spec = importlib.util.spec_from_file_location("probe", ROOT / "scripts" / "probe_reduce_overhead.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert set(probe.SETTINGS) == {"none", "history", "no_autotune", "no_partition"}
    for settings in probe.SETTINGS.values():
        for section, name, _ in settings:
            assert hasattr(getattr(cfg, section) if section else cfg, name), (section, name)
    assert probe.main(["probe", "bogus"]) == 2
