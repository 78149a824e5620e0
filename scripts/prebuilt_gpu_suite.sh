#!/usr/bin/env bash
# The C++ GPU suite from a binary built on the CPU machine, for a device call
# too short for gpu_session.sh's `tests` part (~290 s on a fresh machine, most
# of it the build):
#
#   bash scripts/prebuilt_gpu_suite.sh pack           # here: build, strip, gzip
#   run(carry=[".ab/quack_gpu_tests.gz"],
#       command="bash scripts/prebuilt_gpu_suite.sh run $OUT")  # on the device
#
# pack builds quack_gpu_tests in build/ (configured as scripts/test.sh does)
# and writes .ab/quack_gpu_tests.gz (git-ignored; ~45 MB, within carry's 64
# MiB: the binary is ~89 MB). run unpacks it and runs $SHARDS (48) gtest
# shards $JOBS (16) at a time, as ctest runs scripts/test.sh's
# QUACK_GPU_TEST_SHARDS, each under $SHARD_TIMEOUT (240 s); OUT gets
# gpu_suite.log.gz, exits.txt and the summary line. The binary needs GLIBC
# 2.34 and GLIBCXX 3.4.29 at most (objdump -T, 2026-12-07) and the device's
# libcudart.so.13. It is the C++ suite alone: the Python tests need the
# extension built on the device (`tests`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
packed=.ab/quack_gpu_tests.gz
case ${1:-} in
  pack)
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUACK_BUILD_TESTS=ON -DQUACK_BUILD_PYTHON=OFF \
      -DQUACK_WERROR=ON > /dev/null
    cmake --build build --target quack_gpu_tests
    mkdir -p .ab
    strip --strip-debug -o .ab/quack_gpu_tests build/tests/cpp/quack_gpu_tests
    gzip -f .ab/quack_gpu_tests
    echo "$packed: $(du -h "$packed" | cut -f1), built at $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (+ changes)')" ;;
  run)
    out=${2:?usage: prebuilt_gpu_suite.sh run OUT}
    mkdir -p "$out"
    bin=$(mktemp /tmp/quack_gpu_tests.XXXXXX)
    gunzip -c "$packed" > "$bin"
    chmod +x "$bin"
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
    export BIN=$bin OUTDIR=$out SHARDS=${SHARDS:-48} SHARD_TIMEOUT=${SHARD_TIMEOUT:-240}
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1 || true
    start=$SECONDS
    seq 0 $((SHARDS - 1)) | xargs -P "${JOBS:-16}" -I{} bash -c \
      'GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX={} timeout "$SHARD_TIMEOUT" "$BIN" > "$OUTDIR/shard.{}.log" 2>&1;
       echo "shard {} exit $?" >> "$OUTDIR/exits.txt"'
    echo "wall $((SECONDS - start)) s" >> "$out/exits.txt"
    for ((k = 0; k < SHARDS; ++k)); do cat "$out/shard.$k.log"; done > "$out/gpu_suite.log"
    rm -f "$out"/shard.*.log
    awk '/^\[==========\] [0-9]+ tests? from .* ran/ {r += $2} /^\[  PASSED  \] [0-9]+/ {p += $4}
         /^\[  SKIPPED \] [0-9]+/ {s += $4} /^\[  FAILED  \] [0-9]+ tests?,/ {f += $4}
         END {printf "gpu suite: %d ran, %d passed, %d skipped, %d failed\n", r, p, s, f}' "$out/gpu_suite.log" \
      | tee -a "$out/exits.txt"
    grep -E "^\[  FAILED  \] [A-Za-z]" "$out/gpu_suite.log" | sort -u | head -40 || true
    grep -v "exit 0" "$out/exits.txt" || true
    gzip -f "$out/gpu_suite.log"
    rm -f "$bin"
    ! grep -q "exit [1-9]" "$out/exits.txt" ;;
  *) echo "usage: $0 pack | run OUT" >&2; exit 2 ;;
esac
