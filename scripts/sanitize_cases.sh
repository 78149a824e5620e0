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
# this script did. Why: racecheck takes minutes on a multi-million-element case
# and seconds on the rest; gtest's round-robin shards (the previous scheme)
# put a big case in every shard, and every shard was killed in one
# (eleventh session: 234 of 697 cases in 320 s).
#
# Writes OUTDIR/TOOL.log (every process's output, in launch order) and
# OUTDIR/TOOL.status (a line per process: exit status, then its cases);
# prints one line of totals and the cases that were not clean. Exit status 0
# only when every case ran clean.
set -uo pipefail
tool=${1:?usage: sanitize_cases.sh TOOL FILTER LIMIT OUTDIR [tool args...]}
filter=${2:?filter}
limit=${3:?limit}
out=${4:?outdir}
shift 4
bin=${SANITIZE_BIN:-build/tests/cpp/quack_gpu_tests}
jobs=${SANITIZE_SHARDS:-16}
batch=${SANITIZE_BATCH:-16}
deadline=$(($(date +%s) + ${SANITIZE_DEADLINE:-1000000}))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Full case names ("Suite/Fixture.Test/Param") with their problem sizes,
# largest first; the order of equal sizes is the listing's.
"$bin" --gtest_list_tests --gtest_filter="$filter" | awk '
  /^[^ ]/ { suite = $1; next }
  /^  / {
    name = suite $1; n = 0; m = 1; rest = $1
    while (match(rest, /[NVM][0-9]+/)) {
      v = substr(rest, RSTART + 1, RLENGTH - 1) + 0
      if (substr(rest, RSTART, 1) == "M") m = v; else if (v > n) n = v
      rest = substr(rest, RSTART + RLENGTH)
    }
    printf "%d\t%d\t%s\n", n * m, NR, name
  }' | sort -t"$(printf '\t')" -k1,1nr -k2,2n > "$work/cases"
total=$(wc -l < "$work/cases")
[ "$total" -gt 0 ] || { echo "$tool: no case matches $filter"; exit 1; }

# Batches: a line of ':'-joined case names each.
awk -F'\t' -v batch="$batch" '
  $1 >= 1048576 { print $3; next }
  { cur = cur == "" ? $3 : cur ":" $3; if (++k == batch) { print cur; cur = ""; k = 0 } }
  END { if (cur != "") print cur }' "$work/cases" > "$work/batches"

run_batch() {  # index, filter; the rest of the arguments go to the tool
  local i=$1 f=$2 e
  shift 2
  if [ "$(date +%s)" -ge "$deadline" ]; then
    printf 'skipped %s\n' "$f" > "$work/$i.status"
    return 0
  fi
  timeout "$limit" compute-sanitizer --tool "$tool" "$@" --error-exitcode 3 "$bin" --gtest_filter="$f" \
    > "$work/$i.log" 2>&1
  e=$?
  printf '%d %s\n' "$e" "$f" > "$work/$i.status"
}
export -f run_batch
export tool limit bin deadline work

# xargs appends the batch's line ("index<TAB>filter") after the tool's arguments.
# shellcheck disable=SC2016
nl -ba -w1 -s"$(printf '\t')" "$work/batches" |
  xargs -d '\n' -P "$jobs" -n 1 bash -c \
    'IFS=$(printf "\t") read -r i f <<< "${*: -1}"; run_batch "$i" "$f" "${@:1:$#-1}"' _ "$@"
nb=$(wc -l < "$work/batches")
: > "$out/$tool.log"
: > "$out/$tool.status"
for ((i = 1; i <= nb; i++)); do
  [ -f "$work/$i.log" ] && cat "$work/$i.log" >> "$out/$tool.log"
  cat "$work/$i.status" >> "$out/$tool.status" 2> /dev/null || printf 'lost %s\n' "$(sed -n "${i}p" "$work/batches")" >> "$out/$tool.status"
done

# Totals per case: clean (exit 0), sanitizer errors (3), killed (124), not
# started (deadline), failed otherwise.
awk -v tool="$tool" -v total="$total" '
  { n = split($2, c, ":") }
  $1 == "0"       { clean += n; next }
  $1 == "3"       { err += n; bad = bad "\n  errors reported: " $2; next }
  $1 == "124"     { killed += n; bad = bad "\n  killed at the limit: " $2; next }
  $1 == "skipped" { skipped += n; next }
  { failed += n; bad = bad "\n  exit " $1 ": " $2 }
  END {
    printf "%s: %d cases: %d clean, %d in processes with errors reported, %d in killed processes, %d in failed processes, %d not started (deadline)%s\n",
      tool, total, clean, err, killed, failed, skipped, bad
    exit !(clean == total)
  }' "$out/$tool.status"
