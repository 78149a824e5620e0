#!/usr/bin/env bash
# THE test command: from a fresh checkout, builds everything and runs every
# test. Re-runnable: later runs reuse build/ and .venv/ and rebuild only what
# changed.
#
#   bash scripts/test.sh
#
#   1. C++: configure and build libquack and the GoogleTest suites in build/
#      (Release; warnings and register spills are errors), then ctest.
#   2. Install to a temporary prefix; build examples/consumer against it with
#      find_package(quack) and run it.
#   3. Python: pip install the package (quack_cpp), its extension linked to
#      step 1's libquack.a (QUACK_PREBUILT_LIB), and run pytest tests/python.
#
# On a machine without a CUDA GPU every GPU test is skipped and listed as
# skipped (ctest: "Skipped"; pytest -rs: the reason); everything else runs.
#
# Environment (all optional):
#   PYTHON                   interpreter for step 3; default: python3 when it
#                            imports torch (the GPU machine), otherwise .venv/
#                            (created, with torch==2.11.0 numpy pytest nanobind
#                            scikit-build-core from PyPI: what CI does)
#   QUACK_BUILD_DIR          build directory (default: build)
#   QUACK_JOBS               parallel build and test jobs (default: nproc)
#   QUACK_GTEST_SOURCE_DIR   a GoogleTest source tree, where GoogleTest is not
#                            installed (also found without this variable: a
#                            copy in .deps/googletest, or /usr/src/googletest)
#   QUACK_GPU_TEST_SHARDS=N  the C++ GPU suite as N gtest shards, a process
#                            each, instead of a ctest test (and a process) per
#                            case: less CUDA start-up on a GPU machine
#                            (tests/cpp/CMakeLists.txt); skips are then in the
#                            shards' output, not ctest's list (default 0)
#   QUACK_KEEP_GOING=1       after failing C++ tests, run the rest anyway (the
#                            exit status is still the failure's): a device
#                            call then reports the Python suite too
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${QUACK_JOBS:-$(nproc)}
build=${QUACK_BUILD_DIR:-build}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
started=$SECONDS

section() { printf '\n==== %s ====\n' "$*"; }
elapsed() { echo "$((SECONDS - started)) s"; }

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi

# A cache from another checkout or another generator cannot be reused.
if [ -f "$build/CMakeCache.txt" ]; then
  cached_src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  cached_gen=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build/CMakeCache.txt")
  want_gen=${generator[1]:-Unix Makefiles}
  if [ "$cached_src" != "$root" ] || [ "$cached_gen" != "$want_gen" ]; then
    echo "build dir $build was configured for $cached_src ($cached_gen): starting afresh"
    rm -rf "$build"
  fi
fi

# ---------------------------------------------------------------------------
section "C++: configure and build ($jobs jobs)"
cmake_args=(-S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
            -DQUACK_BUILD_TESTS=ON -DQUACK_BUILD_PYTHON=OFF -DQUACK_WERROR=ON
            "-DQUACK_GPU_TEST_SHARDS=${QUACK_GPU_TEST_SHARDS:-0}")
if [ -n "${QUACK_GTEST_SOURCE_DIR:-}" ]; then
  cmake_args+=("-DQUACK_GTEST_SOURCE_DIR=$QUACK_GTEST_SOURCE_DIR")
fi
cmake "${cmake_args[@]}"
cmake --build "$build" --parallel "$jobs"
echo "built in $(elapsed)"

section "C++: ctest"
ctest_rc=0
ctest --test-dir "$build" --output-on-failure --parallel "$jobs" || ctest_rc=$?
if [ "$ctest_rc" -ne 0 ]; then
  [ -n "${QUACK_KEEP_GOING:-}" ] || exit "$ctest_rc"
  echo "ctest failed (exit $ctest_rc); QUACK_KEEP_GOING: running the rest"
fi

# ---------------------------------------------------------------------------
section "C++: install, then build and run examples/consumer against the install"
prefix=$(mktemp -d "${TMPDIR:-/tmp}/quack-prefix.XXXXXX")
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix"
consumer="$build/consumer"
rm -rf "$consumer"
# -Werror: the installed public headers must compile cleanly in a user's build.
cmake -S examples/consumer -B "$consumer" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS=-Werror
cmake --build "$consumer" --parallel "$jobs"
"$consumer/quack_consumer"

# ---------------------------------------------------------------------------
section "Python: environment"
if [ -n "${PYTHON:-}" ]; then
  py=$PYTHON
elif python3 -c 'import torch' >/dev/null 2>&1; then
  py=python3
else
  [ -x .venv/bin/python ] || python3 -m venv .venv
  py="$root/.venv/bin/python"
  if ! "$py" -c 'import torch, numpy, pytest, nanobind, scikit_build_core' >/dev/null 2>&1; then
    echo "installing torch and the build/test tools into .venv (a few minutes)"
    "$py" -m pip install --disable-pip-version-check torch==2.11.0 numpy pytest nanobind scikit-build-core
  fi
fi
"$py" -c 'import sys, torch; print(sys.executable, "| torch", torch.__version__, "| CUDA available:", torch.cuda.is_available())'

if [ ! -f pyproject.toml ]; then
  echo "no pyproject.toml: the Python package is not in this checkout; skipping the Python steps"
  exit 0
fi

section "Python: build and install quack_cpp"
# A persistent build dir: a re-run rebuilds only what changed.
export CMAKE_BUILD_PARALLEL_LEVEL=$jobs
# The library the C++ build above just made, linked into the extension
# instead of compiled again (CMakeLists.txt: QUACK_PREBUILT_LIB).
"$py" -m pip install --disable-pip-version-check --no-build-isolation --no-deps \
      --config-settings=build-dir="$build/python" \
      --config-settings=cmake.define.QUACK_PREBUILT_LIB="$build/libquack.a" .
echo "built and installed in $(elapsed) from the start"

section "Python: pytest"
if [ ! -d tests/python ]; then
  echo "no tests/python in this checkout: no Python tests to run; the C++ tests above ran"
  exit 0
fi
# Run from the repository root; quack_cpp is imported from the install (the
# sources live under python/, so they cannot shadow it).
set +e
"$py" -m pytest tests/python -v -rs
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  # pytest collected nothing. That is a failure where test files exist.
  if compgen -G "tests/python/test_*.py" >/dev/null || compgen -G "tests/python/**/test_*.py" >/dev/null; then
    echo "pytest collected no tests although tests/python has test files" >&2
    exit 5
  fi
  echo "tests/python holds no tests yet; the C++ tests above ran"
  rc=0
fi
if [ "$ctest_rc" -ne 0 ]; then
  echo "pytest exit $rc; ctest had failed (exit $ctest_rc)"
  exit "$ctest_rc"
fi
exit "$rc"
