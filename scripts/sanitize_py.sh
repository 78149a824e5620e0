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
# Writes OUTDIR/memcheck_py.log (every chunk's output, in order) and
# OUTDIR/memcheck_py.status (a line per chunk: exit status, tests, first
# id); prints the totals. Exit status 0 only when every chunk ran clean
# (pytest passed, memcheck reported nothing).
set -uo pipefail
filter=${1-}
limit=${2:?usage: sanitize_py.sh FILTER LIMIT OUTDIR [TESTDIR]}
out=${3:?outdir}
tests=${4:-tests/python}
chunk=${SANITIZE_PY_CHUNK:-60}
workers=${SANITIZE_PY_WORKERS:-8}
deadline=$(($(date +%s) + ${SANITIZE_DEADLINE:-1000000}))
py=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$py" -m pytest --collect-only -q -p no:cacheprovider "$tests" -k "$filter" 2> "$work/collect.err" |
  grep '::' > "$work/ids"
total=$(wc -l < "$work/ids")
if [ "$total" -eq 0 ]; then
  echo "memcheck_py: no test matches -k '$filter' in $tests"
  cat "$work/collect.err"
  exit 1
fi
split -d -a 4 -l "$chunk" "$work/ids" "$work/chunk."

run_chunk() {  # the chunk file
  local f=$1 e
  if [ "$(date +%s)" -ge "$deadline" ]; then
    printf 'skipped %d %s\n' "$(wc -l < "$f")" "$(head -1 "$f")" > "$f.status"
    return 0
  fi
  timeout "$limit" compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$py" -m pytest -q -p no:cacheprovider "@$f" > "$f.log" 2>&1
  e=$?
  printf '%d %d %s\n' "$e" "$(wc -l < "$f")" "$(head -1 "$f")" > "$f.status"
}
export -f run_chunk
export limit deadline py

# shellcheck disable=SC2016
find "$work" -name 'chunk.*' ! -name '*.*.*' | sort | xargs -d '\n' -P "$workers" -n 1 bash -c 'run_chunk "$1"' _
: > "$out/memcheck_py.log"
: > "$out/memcheck_py.status"
for f in $(find "$work" -name 'chunk.*' ! -name '*.*.*' | sort); do
  { echo "== $(basename "$f"): $(wc -l < "$f") tests from $(head -1 "$f")"; cat "$f.log" 2> /dev/null; } \
    >> "$out/memcheck_py.log"
  cat "$f.status" >> "$out/memcheck_py.status" 2> /dev/null || echo "lost $(wc -l < "$f") $(head -1 "$f")" >> "$out/memcheck_py.status"
done

# pytest's exit status: 0 passed, 1 failed tests, 5 none selected; 3 memcheck
# errors; 124 killed at the limit.
awk -v total="$total" '
  $1 == "0"       { clean += $2; next }
  $1 == "3"       { err += $2; bad = bad "\n  memcheck errors in the chunk from " $3; next }
  $1 == "124"     { killed += $2; bad = bad "\n  killed at the limit: the chunk from " $3; next }
  $1 == "skipped" { skipped += $2; next }
  { failed += $2; bad = bad "\n  exit " $1 ": the chunk from " $3 }
  END {
    printf "memcheck_py: %d tests: %d in clean chunks, %d in chunks with memcheck errors, %d in killed chunks, %d in failed chunks, %d not started (deadline)%s\n",
      total, clean, err, killed, failed, skipped, bad
    exit !(clean == total)
  }' "$out/memcheck_py.status"
