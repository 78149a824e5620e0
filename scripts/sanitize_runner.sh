# shellcheck shell=bash
# Sourced by scripts/sanitize_cases.sh and scripts/sanitize_py.sh: runs units
# of work (batches of C++ cases, chunks of Python tests) under a sanitizer,
# many at once, each with a time limit, none started past a deadline, and
# sums up what their exit statuses say.
#
#   sanitize_units NAME NOUN LIMIT JOBS UNITS OUTDIR CMD...
#
# UNITS is a file with a line a unit, "<count><TAB><label><TAB><argument>":
# the unit runs CMD with <argument> appended, killed after LIMIT s, JOBS units
# at once; it holds <count> NOUN (cases, tests) and <label> names it in the
# report. No unit starts later than $SANITIZE_DEADLINE s (default: no
# deadline) after this file was sourced, and none runs past $SANITIZE_WALL s
# after it (default: no wall): a unit's limit is cut to the time left, so a
# caller's own time limit can be met (the twenty-third session's outer
# `timeout` killed a racecheck run whose units' limits ran past it, and
# nothing came back). CMD must pass the sanitizer
# --error-exitcode 3, so that the statuses read: 0 clean, 3 errors reported,
# 124 killed at the limit, anything else a failed run (a test failure, a
# crash).
#
# Writes OUTDIR/NAME.log (each unit's output under "== <label>", in UNITS
# order) and OUTDIR/NAME.status (a line a unit: "<exit> <count> <label>", the
# exit "skipped" past the deadline or the wall, "lost" when the unit left
# no status), and OUTDIR/NAME.progress: the same lines, each appended as its
# unit ends (what is left when this script itself is killed);
# prints one line of totals and the units that were not clean. Returns 0 only
# when every unit ran clean.
sanitize_deadline=$(($(date +%s) + ${SANITIZE_DEADLINE:-1000000}))
sanitize_wall=$(($(date +%s) + ${SANITIZE_WALL:-1000000}))

sanitize_units() {
  local name=$1 noun=$2 limit=$3 jobs=$4 units=$5 out=$6
  shift 6
  local work n i
  work=$(mktemp -d)
  # xargs appends the unit's line ("index<TAB>count<TAB>label<TAB>argument")
  # after CMD; the unit's log and status go to $work/<index>.{log,status},
  # the status also to OUTDIR/NAME.progress.
  : > "$out/$name.progress"
  # shellcheck disable=SC2016
  nl -ba -w1 -s"$(printf '\t')" "$units" |
    work=$work limit=$limit deadline=$sanitize_deadline wall=$sanitize_wall progress=$out/$name.progress xargs -d '\n' -P "$jobs" -n 1 bash -c '
      IFS=$(printf "\t") read -r i count label arg <<< "${*: -1}"
      now=$(date +%s)
      if [ "$now" -ge "$deadline" ] || [ "$now" -ge "$wall" ]; then
        printf "skipped %s %s\n" "$count" "$label" | tee "$work/$i.status" >> "$progress"
        exit 0
      fi
      lim=$limit
      [ $((wall - now)) -lt "$lim" ] && lim=$((wall - now))
      timeout "$lim" "${@:1:$#-1}" "$arg" > "$work/$i.log" 2>&1
      e=$?
      # A unit whose every case skipped before any CUDA call (a test that
      # finds its plan does not apply) leaves the sanitizer nothing to
      # check, and it exits 255 ("terminated before first instrumented API
      # call"): clean, with nothing failed (FittedPipeTeams on a "_cshift"
      # case alone in its unit, initcheck at 967078e).
      if [ "$e" -eq 255 ] && grep -q "terminated before first instrumented API call" "$work/$i.log" \
          && ! grep -qiE "\[  FAILED  \]|[0-9]+ failed|error" <(grep -v "terminated before first instrumented" "$work/$i.log"); then
        echo "(no CUDA call: every case skipped)" >> "$work/$i.log"
        e=0
      fi
      printf "%d %s %s\n" "$e" "$count" "$label" | tee "$work/$i.status" >> "$progress"' _ "$@"
  : > "$out/$name.log"
  : > "$out/$name.status"
  n=$(wc -l < "$units")
  for ((i = 1; i <= n; i++)); do
    if [ -f "$work/$i.log" ]; then
      { sed -n "${i}p" "$units" | cut -f2 | sed 's/^/== /'; cat "$work/$i.log"; } >> "$out/$name.log"
    fi
    cat "$work/$i.status" >> "$out/$name.status" 2> /dev/null ||
      sed -n "${i}p" "$units" | cut -f1,2 | sed 's/^/lost /; s/\t/ /' >> "$out/$name.status"
  done
  rm -rf "$work"
  awk -v name="$name" -v noun="$noun" '
    { label = $0; sub(/^[^ ]+ [^ ]+ /, "", label); total += $2 }
    $1 == "0"       { clean += $2; next }
    $1 == "3"       { err += $2; bad = bad "\n  errors reported: " label; next }
    $1 == "124"     { killed += $2; bad = bad "\n  killed at the limit: " label; next }
    $1 == "skipped" { skipped += $2; next }
    { failed += $2; bad = bad "\n  exit " $1 ": " label }
    END {
      printf "%s: %d %s: %d clean, %d in processes with errors reported, %d in killed processes, %d in failed processes, %d not started (deadline)%s\n",
        name, total, noun, clean, err, killed, failed, skipped, bad
      exit !(clean == total)
    }' "$out/$name.status"
}
