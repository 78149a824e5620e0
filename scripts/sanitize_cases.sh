#!/usr/bin/env bash
# compute-sanitizer over the C++ GPU cases, many processes at once:
#
#   bash scripts/sanitize_cases.sh TOOL FILTER LIMIT OUTDIR [tool arguments...]
#
# Lists the cases of build/tests/cpp/quack_gpu_tests ($SANITIZE_BIN) matching
# the gtest FILTER and runs `compute-sanitizer --tool TOOL` over them, the
# largest problems first (N or V times M read from the case's name): cases of
# 2^20 elements or more alone, the rest $SANITIZE_BATCH (16) to a process;
# $SANITIZE_SHARDS (16) processes at once, each killed after LIMIT s; no
# process starts later than $SANITIZE_DEADLINE s (default: no deadline) after
# this script did; the cases named in $SANITIZE_DONE are left out (below).
# Why: racecheck takes minutes on a multi-million-element case and seconds
# on the rest; gtest's round-robin shards (the previous scheme) put a big
# case in every shard, and every shard was killed in one (eleventh session:
# 234 of 697 cases in 320 s).
#
# Writes OUTDIR/TOOL.log (every process's output, in launch order) and
# OUTDIR/TOOL.status (a line per process: exit status, the number of cases,
# then the cases) and OUTDIR/TOOL.clean (the clean cases, a line each: a
# $SANITIZE_DONE file); prints one line of totals and the cases that were not
# clean. Exit status 0 only when every case ran clean. The running, the
# limits and the totals are scripts/sanitize_runner.sh's, shared with
# scripts/sanitize_py.sh.
set -uo pipefail
tool=${1:?usage: sanitize_cases.sh TOOL FILTER LIMIT OUTDIR [tool args...]}
filter=${2:?filter}
limit=${3:?limit}
out=${4:?outdir}
shift 4
# shellcheck source=scripts/sanitize_runner.sh
. "$(dirname "${BASH_SOURCE[0]}")/sanitize_runner.sh"
bin=${SANITIZE_BIN:-build/tests/cpp/quack_gpu_tests}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Full case names ("Suite/Fixture.Test/Param") with their problem sizes:
# the columns (N, V, or G in the grid forward's cases) times the rows (M).
# G was read as size 0 until the fifty-seventh session, which batched 16
# grid cases (rows of up to 1M columns, up to 42M elements) into one memcheck
# process that ran past 110 s. Largest first; the order of equal sizes is
# the listing's. Under QUACK_TEST_MAX_ELEMS (the racecheck runs' row cap,
# test::case_rows) a case's rows are counted as the cap leaves them.
"$bin" --gtest_list_tests --gtest_filter="$filter" | awk -v cap="${QUACK_TEST_MAX_ELEMS:-0}" '
  /^[^ ]/ { suite = $1; next }
  /^  / {
    name = suite $1; n = 0; m = 1; rest = $1
    while (match(rest, /[NVGM][0-9]+/)) {
      v = substr(rest, RSTART + 1, RLENGTH - 1) + 0
      if (substr(rest, RSTART, 1) == "M") m = v; else if (v > n) n = v
      rest = substr(rest, RSTART + RLENGTH)
    }
    if (cap + 0 > 0 && n > 0) { c = int(cap / n); if (c < 1) c = 1; if (m > c) m = c }
    printf "%d\t%d\t%s\n", n * m, NR, name
  }' | sort -t"$(printf '\t')" -k1,1nr -k2,2n > "$work/cases"
[ -s "$work/cases" ] || { echo "$tool: no case matches $filter"; exit 1; }

# $SANITIZE_DONE: files naming cases already run clean under this tool (the
# first word of each line that is not a comment), left out here, so that a
# suite longer than one device call (racecheck's: minutes a case) goes on
# where the last call stopped. Valid while the kernels are the same: the
# files say the commit they ran at.
if [ -n "${SANITIZE_DONE:-}" ]; then
  # shellcheck disable=SC2086
  grep -hv '^#' $SANITIZE_DONE > "$work/done.raw"
  [ $? -le 1 ] || { echo "$tool: cannot read SANITIZE_DONE ($SANITIZE_DONE)"; exit 1; }
  awk 'NF { print $1 }' "$work/done.raw" > "$work/done"
  awk -F'\t' 'NR == FNR { done[$1] = 1; next } !($3 in done)' "$work/done" "$work/cases" > "$work/todo"
  echo "$tool: $(($(wc -l < "$work/cases") - $(wc -l < "$work/todo"))) cases left out, already clean ($SANITIZE_DONE)"
  mv "$work/todo" "$work/cases"
  [ -s "$work/cases" ] || { echo "$tool: every case matching $filter is already clean"; exit 0; }
fi

# The units: cases of 2^20 elements or more alone, the rest
# $SANITIZE_BATCH to a process, and (with $SANITIZE_BATCH_ELEMS > 0) no more
# elements a process than that, so that a killed process loses little: a
# line each, "count<TAB>cases<TAB>--gtest_filter=cases" (cases ':'-joined).
# Why the budget: racecheck took minutes on single cases of 2^18-2^20
# elements (twenty-second session), and a batch of 16 of them would be
# killed whole.
awk -F'\t' -v batch="${SANITIZE_BATCH:-16}" -v budget="${SANITIZE_BATCH_ELEMS:-0}" '
  function unit(k, names) { printf "%d\t%s\t--gtest_filter=%s\n", k, names, names }
  function flush() { if (k > 0) unit(k, cur); cur = ""; k = 0; total = 0 }
  $1 >= 1048576 { unit(1, $3); next }
  {
    if (budget > 0 && k > 0 && total + $1 > budget) flush()
    cur = cur == "" ? $3 : cur ":" $3; total += $1
    if (++k == batch) flush()
  }
  END { flush() }' "$work/cases" > "$work/units"

sanitize_units "$tool" cases "$limit" "${SANITIZE_SHARDS:-16}" "$work/units" "$out" \
  compute-sanitizer --tool "$tool" "$@" --error-exitcode 3 "$bin"
rc=$?
# OUTDIR/TOOL.clean: the cases that ran clean, one a line (a $SANITIZE_DONE
# file for the next call).
awk '$1 == "0" { n = split($3, c, ":"); for (i = 1; i <= n; ++i) print c[i] }' "$out/$tool.status" > "$out/$tool.clean"
exit $rc
