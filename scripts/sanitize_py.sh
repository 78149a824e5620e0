#!/usr/bin/env bash
# compute-sanitizer memcheck under the Python test suite, many processes at once:
#
#   bash scripts/sanitize_py.sh FILTER LIMIT OUTDIR [TESTDIR]
#
# Collects the tests of TESTDIR (tests/python) matching the pytest -k
# expression FILTER ("" for all), splits them into chunks of
# $SANITIZE_PY_CHUNK (60) test ids, and runs each chunk as one
# `compute-sanitizer --tool memcheck python3 -m pytest @chunk` process,
# $SANITIZE_PY_WORKERS (8) at once, each killed after LIMIT s; none starts
# later than $SANITIZE_DEADLINE s (default: no deadline) after this script
# did. Why chunks: a process pays for torch's start under memcheck once
# (tens of seconds), and one process for the whole suite, or one per file,
# leaves the machine's cores idle (16 xdist workers under one sanitizer
# reached no test in 320 s, eleventh session).
#
# Test files in $SANITIZE_PY_SKIP (space-separated basenames; default the
# CPU-only files: the benchmark tools' tests and this script's own) are left
# out: they launch no kernel, and test_sanitize_scripts.py's stand-in
# sanitizers kept one chunk's process from exiting under memcheck for 300 s
# (twenty-first session). Memory: 16 processes at once ran the GPU out of
# memory under memcheck (the tool's own launch tracking failed, and torch's
# cudaMalloc); 12 did not.
#
# Writes OUTDIR/memcheck_py.log (every chunk's output, in order) and
# OUTDIR/memcheck_py.status (a line per chunk: exit status, tests, "the
# chunk from <first id>"); prints the totals. Exit status 0 only when every
# chunk ran clean (pytest passed, memcheck reported nothing). The running,
# the limits and the totals are scripts/sanitize_runner.sh's, shared with
# scripts/sanitize_cases.sh.
set -uo pipefail
filter=${1-}
limit=${2:?usage: sanitize_py.sh FILTER LIMIT OUTDIR [TESTDIR]}
out=${3:?outdir}
tests=${4:-tests/python}
# shellcheck source=scripts/sanitize_runner.sh
. "$(dirname "${BASH_SOURCE[0]}")/sanitize_runner.sh"
py=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$py" -m pytest --collect-only -q -p no:cacheprovider "$tests" -k "$filter" 2> "$work/collect.err" |
  grep '::' > "$work/all_ids"
skip=${SANITIZE_PY_SKIP-test_bench_all.py test_bench_latency.py test_bench_plots.py test_bench_softmax.py test_bench_timing.py test_sanitize_scripts.py}
: > "$work/ids"
while IFS= read -r id; do
  file=${id%%::*}
  case " $skip " in
    *" ${file##*/} "*) ;;
    *) printf '%s\n' "$id" >> "$work/ids" ;;
  esac
done < "$work/all_ids"
skipped=$(($(wc -l < "$work/all_ids") - $(wc -l < "$work/ids")))
[ "$skipped" -eq 0 ] || echo "memcheck_py: $skipped tests of the CPU-only files left out ($skip)"
if [ ! -s "$work/ids" ]; then
  echo "memcheck_py: no test matches -k '$filter' in $tests"
  cat "$work/collect.err"
  exit 1
fi
# The units: chunks of $SANITIZE_PY_CHUNK test ids, each run as pytest @chunk;
# pytest's own statuses (1 failed tests, 5 none selected) count as failed.
split -d -a 4 -l "${SANITIZE_PY_CHUNK:-60}" "$work/ids" "$work/chunk."
for f in "$work"/chunk.*; do
  printf '%d\tthe chunk from %s\t@%s\n' "$(wc -l < "$f")" "$(head -1 "$f")" "$f"
done > "$work/units"

sanitize_units memcheck_py tests "$limit" "${SANITIZE_PY_WORKERS:-8}" "$work/units" "$out" \
  compute-sanitizer --tool memcheck --error-exitcode 3 "$py" -m pytest -q -p no:cacheprovider
