#!/usr/bin/env bash
# THE main job, on a machine with an NVIDIA Hopper GPU (H100/H200):
# builds and installs the Python package, runs a one-minute demo
# (examples/demo.py: correctness against float64 and torch.nn.RMSNorm, a
# quick timing), then every op's side-by-side benchmark (bench/bench_all.py:
# reports, records, plots and one summary in --out-dir, default bench-out/).
#
#   bash scripts/bench.sh [arguments for bench/bench_all.py ...]
#   bash scripts/bench.sh --quick       # about a minute of GPU time
#   bash scripts/bench.sh --help        # the benchmark's options
#
# Environment (optional): PYTHON (default: python3 when it imports torch,
# else .venv/bin/python as set up by scripts/test.sh), QUACK_BUILD_DIR
# (default: build; the package builds in <it>/python), QUACK_JOBS (default:
# nproc).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${QUACK_BUILD_DIR:-build}
case "$build" in /*) ;; *) build="$root/$build" ;; esac

if [ -n "${PYTHON:-}" ]; then
  py=$PYTHON
elif python3 -c 'import torch' >/dev/null 2>&1; then
  py=python3
elif [ -x .venv/bin/python ]; then
  py="$root/.venv/bin/python"
else
  echo "no Python with torch found: set PYTHON, or run scripts/test.sh once to create .venv" >&2
  exit 1
fi
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "scripts/bench.sh needs a CUDA GPU visible to torch (an H100/H200); none found" >&2
  exit 1
fi

echo "==== build and install quack_cpp ===="
export CMAKE_BUILD_PARALLEL_LEVEL=${QUACK_JOBS:-$(nproc)}
"$py" -m pip install --disable-pip-version-check --no-build-isolation --no-deps \
      --config-settings=build-dir="$build/python" .

echo
echo "==== demo ===="
"$py" examples/demo.py

echo
echo "==== benchmark ===="
"$py" bench/bench_all.py "$@"
