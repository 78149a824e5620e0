#!/usr/bin/env bash
# One device call that does a session's GPU work, every log under $OUT:
#
#   OUT=/some/dir bash scripts/gpu_session.sh <commit> [parts...]
#
# parts (default: tests sweep bench):
#   tests      scripts/test.sh (every C++ and Python test; pytest on 8 workers;
#              QUACK_KEEP_GOING: pytest runs even after a ctest failure);
#              slowest_tests.txt: the 40 slowest ctest tests; ctest_times.txt: all;
#              the C++ GPU suite as $QUACK_GPU_TEST_SHARDS (default here 48)
#              gtest shards (test.sh): ctest wall 330 -> 120 s, the part
#              543 -> 299 s (1c3e9a0 / ddf784e; ~2 s of CUDA start-up a
#              case saved); QUACK_GPU_TEST_SHARDS=0 for a ctest test a case
#   cases      build only the C++ GPU tests and run $CASES_FILTER of them (a
#              quick check of a kernel change before a sweep), in
#              $CASES_JOBS (default 8) gtest shards at once: the float64
#              references are CPU-bound (the 43 grid cases ran 215 s in one
#              process, 2026-12-01); cases.log is the shards' logs in turn;
#              $CASES_ARGS more gtest flags (--gtest_also_run_disabled_tests
#              for a DISABLED_ suite)
#   shifted    the forty-third session's shifted rows (RowTuning::shifted_rows,
#              built with no device, off by default): `cases` of their
#              suites, memcheck and initcheck over *Shifted* (at most 90 s of
#              starts), then the softmax and cross-entropy sweeps (bf16,
#              fp32) at odd N beside their aligned neighbours, the defaults
#              (the streams) and shifted_rows=3 side by side; each variable
#              below may be set to override
#   norm_shifted  the forty-seventh session's shifted rows (on by default
#              since the forty-eighth, whose call of this part measured them):
#              the norm forward's (RowTuning::shifted_rows bit 2) and
#              cross-entropy's bulk forward (bit 3): `cases` of
#              RMSNormFwdGpuShifted, CrossEntropyGpuBulkShifted and
#              RawVecLoadShifted, memcheck and initcheck over them, then
#              rmsnorm_sweep (RMSNorm, LayerNorm) and cross_entropy_sweep
#              (bf16, fp32) at odd N beside aligned neighbours, the
#              defaults and shifted_rows=15 side by side (set SWEEP_TUNES
#              to a variant now that 15 is the default)
#   norm_bwd_shifted  the fiftieth session's shifted rows of the norm
#              backward (RowTuning::shifted_rows bit 4, off by default):
#              `cases` of RMSNormBwdGpu.ShiftedRowsMatchFloat64, memcheck
#              and initcheck over its "_shift" cases, then rmsnorm_bwd_sweep
#              (RMSNorm, LayerNorm; bf16, fp32) at odd N beside aligned
#              neighbours, the defaults and shifted_rows=31 side by side
#   bwd_swings  why the norm backward's power-of-two plans swing between
#              widths (the forty-seventh session's widths): the widths at
#              M*N = 2^27 and 2^28, the defaults and bwd_pipe_fit_team=1,
#              then ncu of LayerNorm fp32 at a dip and a peak of each plan
#   widths     model widths (2048 .. 16384: 2560, 3072, 3584, 5120, 6144,
#              7168, 12288 beside the powers of two): the forty-sixth
#              session's hypothesis (config.cpp, bwd_pipe_fit_team: the norm
#              backward's pipelined CTAs fitted to the row) and the
#              forward's norm_fit_team (default since 0b06aca) against its
#              powers of two; rmsnorm_bwd, layernorm_bwd, rmsnorm,
#              layernorm, bf16 and fp32 ($SWEEP_OPS, $SWEEP_DTYPES; both
#              measured at 7123574: docs/KERNELS.md, model widths; softmax's
#              and cross-entropy's reg_fit_team, the default since the
#              forty-seventh session, against its powers of two is
#              SWEEP_OPS="softmax cross_entropy" SWEEP_TUNES=reg_fit_team=0)
#   norm_vpt16  the forty-fourth session's hypothesis (config.cpp,
#              norm_fwd_vpt16_min_cols): 16-bit RMSNorm / LayerNorm forward
#              rows at 8 vectors a thread, as softmax's, from 512 and from
#              2048 elements, beside the defaults; bf16, N = 512 .. 32768
#   sanitize   compute-sanitizer memcheck over the C++ GPU cases ($SANITIZE_FILTER)
#              through scripts/sanitize_cases.sh: the biggest cases first,
#              $SANITIZE_SHARDS processes at once, each killed after
#              $SANITIZE_TIMEOUT s, none started after $SANITIZE_DEADLINE s
#              and none running past $SANITIZE_WALL s (set it within the
#              call's own limit: the units' statuses are then brought back;
#              each also lands in <tool>.progress as it ends);
#              initcheck and synccheck likewise
#   sanitize_py  memcheck under pytest tests/python -k $SANITIZE_PY_FILTER
#              through scripts/sanitize_py.sh ($SANITIZE_PY_CHUNK tests a
#              process, $SANITIZE_PY_WORKERS at once)
#   racecheck  compute-sanitizer racecheck over $RACECHECK_FILTER (shared-memory
#              hazards; each process killed after $RACECHECK_TIMEOUT s), every
#              case's rows capped at $RACECHECK_MAX_ELEMS (default 1048576)
#              elements over its columns, at least 1 (QUACK_TEST_MAX_ELEMS,
#              tests/cpp/support/cuda_test.hpp: case_rows); "" for none.
#              SANITIZE_DONE=bench/results/logs/racecheck-clean.txt leaves out
#              the cases already clean there (scripts/sanitize_cases.sh);
#              racecheck.clean lists this call's, to append to it; at most
#              $SANITIZE_BATCH_ELEMS (default 1048576) capped elements a process
#   reduce_overhead_probe  scripts/probe_reduce_overhead.py's experiments
#              ($PROBE_EXPERIMENTS), natively and under memcheck
#   sweep      bench/cpp/rmsnorm_sweep and softmax_sweep for bf16 and fp32 at
#              the defaults, then once per QUACK_TUNE variant in $SWEEP_TUNES
#              (';'-separated); $SWEEP_OPS picks the ops (default "rmsnorm softmax";
#              also layernorm, rmsnorm_bwd, layernorm_bwd, cross_entropy), $SWEEP_DTYPES the dtypes
#              (default "bf16 f32"), $SWEEP_NS the norms' N, forward and
#              backward, $SOFTMAX_NS softmax's, $CE_NS cross-entropy's
#              classes (default: each sweep's own list);
#              sweep_tables.md: the variants side by side (bench/sweep_table.py)
#   decode     bench/cpp/decode_sweep: decode-sized forwards (bench_latency's
#              small batches, M = 1 .. 1024 at N = 2048 .. 8192) by CUDA-graph
#              replay, us a call, at the defaults and each QUACK_TUNE variant
#              of $DECODE_TUNES (';'-separated), $DECODE_DTYPES (bf16),
#              $DECODE_OPS (all four); decode_sweep.log
#   decode_diag  the fifty-fifth session's open question (docs/KERNELS.md):
#              where a decode-sized forward's cycles go at the tile Liger
#              uses too (2048: 256 threads at 1 vector). The decode part at
#              the defaults and DECODE_NO_WEIGHT=1 (the norms without their
#              parameters), then ncu_latency at M = 1, N = 2048 (RMSNorm,
#              LayerNorm, softmax; quack_cpp, Liger, torch), with the peers
#              carried in .whl/
#   ab         an A/B of two trees' sweeps in one call: the old tree at
#              $AB_OLD (e.g. `git archive <commit> | tar -x -C .ab/old`, a
#              git-ignored folder passed in `carry`), built beside this
#              one's; then $AB_ROUNDS (default 2) rounds of new, old for
#              each op of $SWEEP_OPS and dtype of $SWEEP_DTYPES, at each
#              sweep's default sizes (or $SWEEP_NS / $SOFTMAX_NS / $CE_NS; ops as the sweep's,
#              layernorm and layernorm_bwd included), into ab.log (ab_tables.md: side by side,
#              the rounds' medians)
#   ab_decode  the ab part's two trees through bench/cpp/decode_sweep
#              ($DECODE_OPS, $DECODE_DTYPES, $AB_ROUNDS): ab_decode.log
#   ncu        Nsight Compute reports of sweep kernels ($NCU_RUNS: see its case)
#   ncu_latency  Nsight Compute over bench/latency_probe.py: every kernel of a
#              decode-sized call per implementation (quack_cpp, Liger, torch;
#              $LATENCY_PROBE_ARGS), with the peers carried in .whl/
#   synccheck_repeat  the fifty-seventh session's synccheck question: chosen
#              cases natively and under synccheck (default and a larger
#              mbarrier table), $SYNC_REPEAT times each ($SYNC_RUNS)
#   synccheck_probe  synccheck of softmax_sweep with the chunk kernel forced
#              (the eleventh session's unexplained illegal address), one
#              variable changed a run, each killed after $PROBE_TIMEOUT (120) s
#   norm_bwd_gap  bench/probe_norm_bwd_gap.py: the RMSNorm backward's
#              isolated and back-to-back times and profiled kernels at bf16
#              2048 / 4096 / 8192 / 5120 ($GAP_NS), beside QuACK's (.whl/)
#   norm_bwd_gap_ncu  ncu of our main backward kernel and QuACK's at bf16
#              $GAP_NCU_N (4096): DRAM and L2 bytes, instructions, stalls
#   norm_bwd_l2  both backwards (and ours without dweight) timed from the
#              states before them (after their own call, a 256 MB read, a
#              256 MB write, a GEMM, their own call and 5 ms idle, each
#              other's call; the SM clock over the sleep before each) at
#              $GAP_NS (2048 4096 8192)
#   bench      bench/bench_rmsnorm.py with the peers carried in .whl/
#              (bench/peers.sh), recorded as bench.md / bench.json
#   bench_softmax, bench_rmsnorm_bwd, bench_layernorm, bench_cross_entropy
#              bench/<part>.py likewise (<part>.md / .json), with
#              $BENCH_ARGS_<op> (BENCH_ARGS_softmax, ...), else $BENCH_ARGS
#              (e.g. "--sizes 4100,32001,50257 --dtypes bf16")
#   bench_all  bench/bench_all.py $BENCH_ALL_ARGS (e.g. "--quick", "--ops
#              softmax,layernorm"): reports, records, plots and summary.md in all/,
#              brought back as bench_all.tgz (and bench_all_summary.md)
#   vocab_parallel  two GPUs: tests/python/dist_vocab_parallel.py and
#              bench/bench_vocab_parallel.py under torchrun (after tests)
#   host_breakdown  bench/host_breakdown.py (an eager call's host time
#              by part, beside torch's) as host_breakdown.md
# The device copy of the tree has no .git: pass the commit being measured.
set -uo pipefail
commit=${1:?usage: OUT=dir bash scripts/gpu_session.sh <commit> [parts...]}
shift
out=${OUT:?set OUT to the directory for the logs}
# (Made if missing: a call with OUT=$OUT/sub and no mkdir lost a machine's
# start in the sixty-eighth session, every part failing on its first log.)
mkdir -p "$out"
parts=${*:-tests sweep bench}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1

# libquack and the C++ sweeps and probe (build/rmsnorm_sweep, build/softmax_sweep,
# ...: bench/cpp/CMakeLists.txt's targets), once a call.
build_sweeps() {
  [ -n "${sweeps_built:-}" ] && return 0
  { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUACK_BUILD_BENCH=ON \
      && cmake --build build --target quack rmsnorm_sweep softmax_sweep rmsnorm_bwd_sweep cross_entropy_sweep \
        decode_sweep cluster_exchange_probe; } > "$out/sweep_build.log" 2>&1 || return 1
  sweeps_built=1
}

# The A/B parts' old tree ($old_tree) built beside this one, the given
# targets, into $out/LOG (its last 20 lines printed on a failure).
build_old_tree() {
  local log=$1
  shift
  { cmake -S "$old_tree" -B "$old_tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUACK_BUILD_BENCH=ON \
      -DQUACK_BUILD_TESTS=OFF && cmake --build "$old_tree/build" --target "$@"; } > "$out/$log" 2>&1 \
    || { tail -n 20 "$out/$log"; return 1; }
}

# The Python package, for the bench parts: `tests` installs it; without it
# (a call of bench parts alone) they would run every peer but quack_cpp, as
# the thirteenth session's first call did. Built in build/python, as
# scripts/test.sh and scripts/bench.sh build it.
# The extension links build/libquack.a (CMakeLists.txt: QUACK_PREBUILT_LIB),
# brought up to date with this tree first (an earlier part -- cases, sweep --
# has mostly built it: the seventieth session's bench_all call compiled the
# library a second time in build/python after its cases call), configured
# here as scripts/test.sh does where no part has.
ensure_package() {
  python3 -c "import quack_cpp" 2> /dev/null && return 0
  { { [ -f build/CMakeCache.txt ] \
        || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUACK_BUILD_TESTS=OFF -DQUACK_BUILD_PYTHON=OFF \
             -DQUACK_WERROR=ON; } \
      && cmake --build build --target quack \
      && CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install --disable-pip-version-check --no-build-isolation \
        --no-deps --config-settings=build-dir=build/python \
        --config-settings=cmake.define.QUACK_PREBUILT_LIB="$root/build/libquack.a" .; } > "$out/install.log" 2>&1 \
    || { echo "pip install of quack_cpp failed: install.log"; return 1; }
}

# Runs CMD natively, then under compute-sanitizer memcheck, each killed after
# LIMIT s: appends "== LABEL, none" (then ", memcheck"), the last TAIL lines of
# its output and "exit STATUS" to LOG. (The probes' side-by-side runs.)
native_and_memcheck() {
  local log=$1 label=$2 limit=$3 tail_n=$4 tool
  shift 4
  for tool in none memcheck; do
    {
      echo "== $label, $tool"
      if [ "$tool" = none ]; then
        timeout "$limit" "$@" < /dev/null 2>&1 | tail -n "$tail_n"
      else
        timeout "$limit" compute-sanitizer --tool memcheck "$@" < /dev/null 2>&1 | tail -n "$tail_n"
      fi
      echo "exit ${PIPESTATUS[0]}"
    } >> "$log"
  done
}

# sweep_cmd DIR OP DT: the command line of OP's sweep binary in DIR (a build
# folder) for dtype DT, in the array `cmd` -- rmsnorm, layernorm (rmsnorm_sweep
# with QUACK_SWEEP_LAYERNORM=1), softmax, cross_entropy, rmsnorm_bwd,
# layernorm_bwd; any other OP: rmsnorm. $SWEEP_NS / $SOFTMAX_NS / $CE_NS narrow the
# sizes, $SWEEP_TOTAL (default 2^28) the elements M*N of each when they are
# given. (The sweep and ab parts.)
sweep_cmd() {
  local dir=$1 op=$2 dt=$3 total=${SWEEP_TOTAL:-268435456}
  # shellcheck disable=SC2206
  case $op in
    softmax) cmd=("$dir/softmax_sweep" "$dt" 0 ${SOFTMAX_NS:+$total $SOFTMAX_NS}) ;;
    cross_entropy) cmd=("$dir/cross_entropy_sweep" "$dt" ${CE_NS:+$total $CE_NS}) ;;
    rmsnorm_bwd) cmd=("$dir/rmsnorm_bwd_sweep" "$dt" ${SWEEP_NS:+$total $SWEEP_NS}) ;;
    layernorm_bwd) cmd=(env QUACK_SWEEP_LAYERNORM=1 "$dir/rmsnorm_bwd_sweep" "$dt" ${SWEEP_NS:+$total $SWEEP_NS}) ;;
    layernorm) cmd=(env QUACK_SWEEP_LAYERNORM=1 "$dir/rmsnorm_sweep" "$dt" ${SWEEP_NS:+$total $SWEEP_NS}) ;;
    *) cmd=("$dir/rmsnorm_sweep" "$dt" ${SWEEP_NS:+$total $SWEEP_NS}) ;;
  esac
}

# Each passing gtest case's time in the ctest log $1, into
# $out/gtest_case_times.txt ("ms Prefix/Suite.Test/Param", slowest first)
# and $out/gtest_test_seconds.txt ("seconds cases Suite.Test"); prints the
# 12 costliest tests.
gtest_times() {
  [ -f "$1" ] || { echo "gtest_times: no $1"; return 0; }
  sed -nE 's/^\[ +OK \] ([^ ]+) \(([0-9]+) ms\)$/\2 \1/p' "$1" | sort -rn > "$out/gtest_case_times.txt"
  awk '{ n = split($2, p, "/"); key = n == 3 ? p[2] : $2; s[key] += $1 / 1000; c[key]++ }
       END { for (k in s) printf "%.1f %d %s\n", s[k], c[k], k }' "$out/gtest_case_times.txt" \
    | sort -rn > "$out/gtest_test_seconds.txt"
  awk '{ s += $1; n += $2 } END { printf "gtest: %d passing cases, %.0f case-seconds\n", n, s }' "$out/gtest_test_seconds.txt"
  head -12 "$out/gtest_test_seconds.txt"
}

for part in $parts; do
  start=$SECONDS
  case $part in
    tests)
      QUACK_KEEP_GOING=1 PYTEST_ADDOPTS="${PYTEST_ADDOPTS:--n 8}" QUACK_GPU_TEST_SHARDS=${QUACK_GPU_TEST_SHARDS:-48} \
        bash scripts/test.sh > "$out/tests.log" 2>&1 \
        || status=1
      grep -E "tests passed|tests failed|passed|failed|error" "$out/tests.log" | tail -6
      # The 40 slowest ctest tests (what bounds the suite's wall time at
      # $QUACK_JOBS at once), for trimming the suite's device time.
      # ctest_times.txt: every test's seconds, slowest first (its tail, the
      # fastest GPU tests, is a process's fixed cost: context, module
      # loading), and the sum, against the wall time.
      sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) [ .]+(Passed|\*\*\*Failed|\*\*\*Skipped|Skipped)? *([0-9.]+) sec$/\3 \1/p' \
        "$out/tests.log" | sort -rn > "$out/ctest_times.txt"
      head -40 "$out/ctest_times.txt" > "$out/slowest_tests.txt"
      awk '{s += $1; n++} END {printf "ctest: %d tests, %.0f test-seconds\n", n, s}' "$out/ctest_times.txt"
      # Inside the shards, by gtest case (ctest keeps every test's output in
      # LastTest.log): gtest_case_times.txt, each passing case's ms, slowest
      # first; gtest_test_seconds.txt, the seconds and cases of each test
      # (Suite.Test, its parameters summed). The sixty-ninth session's
      # ctest wall was 222 s against 127 s two sessions before (shard-
      # seconds 2690): where a trim of the suite would pay.
      gtest_times "${QUACK_BUILD_DIR:-build}/Testing/Temporary/LastTest.log" ;;
    cases)
      { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUACK_BUILD_TESTS=ON -DQUACK_BUILD_PYTHON=OFF -DQUACK_WERROR=ON \
          && cmake --build build --target quack_gpu_tests; } > "$out/cases_build.log" 2>&1 \
        || { status=1; tail -n 20 "$out/cases_build.log"; continue; }
      shards=${CASES_JOBS:-8}
      pids=()
      for ((k = 0; k < shards; ++k)); do
        # shellcheck disable=SC2086
        GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$k build/tests/cpp/quack_gpu_tests \
          --gtest_filter="${CASES_FILTER:-*}" ${CASES_ARGS:-} > "$out/cases.$k.log" 2>&1 &
        pids+=("$!")
      done
      for pid in "${pids[@]}"; do wait "$pid" || status=1; done
      for ((k = 0; k < shards; ++k)); do cat "$out/cases.$k.log"; rm -f "$out/cases.$k.log"; done > "$out/cases.log"
      tail -n 3 "$out/cases_build.log"
      # The shards' totals: ran, passed, skipped, failed.
      awk '/^\[==========\] [0-9]+ tests? from .* ran/ {r += $2} /^\[  PASSED  \] [0-9]+/ {p += $4}
           /^\[  SKIPPED \] [0-9]+/ {s += $4} /^\[  FAILED  \] [0-9]+ tests?,/ {f += $4}
           END {printf "cases: %d ran, %d passed, %d skipped, %d failed\n", r, p, s, f}' "$out/cases.log" ;;
    shifted)
      n_odd="4096 4100 32000 32001 50264 50257 128256 128257"
      CASES_FILTER=${CASES_FILTER:-'*Shifted*:*Softmax*Staged*:*SoftmaxGpuRegister*:*CrossEntropyGpuStaged*:*CrossEntropyGpuBalanced*:RowGeom*:RawVec*'} \
        SANITIZE_FILTER=${SANITIZE_FILTER:-'*Shifted*'} SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-150} \
        SANITIZE_DEADLINE=${SANITIZE_DEADLINE:-90} SWEEP_OPS=${SWEEP_OPS:-softmax cross_entropy} \
        SWEEP_DTYPES=${SWEEP_DTYPES:-bf16 f32} SWEEP_TUNES=${SWEEP_TUNES:-shifted_rows=3} \
        SOFTMAX_NS=${SOFTMAX_NS:-$n_odd} CE_NS=${CE_NS:-$n_odd} \
        bash "$root/scripts/gpu_session.sh" "$commit" cases sanitize initcheck sweep || status=1 ;;
    norm_shifted)
      n_odd="4096 4100 4101 8192 8200 16384 16392 32000 32001 5120 5123"
      CASES_FILTER=${CASES_FILTER:-'*RMSNormFwdGpuShifted*:*CrossEntropyGpuBulkShifted*:RawVec*:RowGeom*'} \
        SANITIZE_FILTER=${SANITIZE_FILTER:-'*RMSNormFwdGpuShifted*:*CrossEntropyGpuBulkShifted*:RawVecLoadShifted*'} \
        SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-150} SANITIZE_DEADLINE=${SANITIZE_DEADLINE:-90} \
        SWEEP_OPS=${SWEEP_OPS:-rmsnorm layernorm cross_entropy} \
        SWEEP_DTYPES=${SWEEP_DTYPES:-bf16 f32} SWEEP_TUNES=${SWEEP_TUNES:-shifted_rows=15} \
        SWEEP_NS=${SWEEP_NS:-$n_odd} CE_NS=${CE_NS:-4096 4100 8192 8200 12288 12301 16384 16392} \
        bash "$root/scripts/gpu_session.sh" "$commit" cases sanitize initcheck sweep || status=1 ;;
    norm_bwd_shifted)
      # The fiftieth session's shifted rows of the norm backward
      # (RowTuning::shifted_rows bit 4, built without a device, off by
      # default): `cases` of RMSNormBwdGpu.ShiftedRowsMatchFloat64 (every
      # case under the bit; the "_shift" ones must take the shifted plan,
      # in place too, at three tunings), memcheck and initcheck over the
      # "_shift" cases, then rmsnorm_bwd_sweep (RMSNorm, LayerNorm; bf16,
      # fp32) at odd N beside aligned neighbours -- N + VEC - 1 rounded up is
      # the shifted row's tile (4101 -> 4104's), the defaults (element by
      # element) and shifted_rows=31 side by side.
      n_odd="1024 1025 2048 2049 4096 4101 4104 5120 5123 8191 8192"
      CASES_FILTER=${CASES_FILTER:-'*RMSNormBwdGpu.ShiftedRows*'} \
        SANITIZE_FILTER=${SANITIZE_FILTER:-'*RMSNormBwdGpu.ShiftedRows*_shift'} \
        SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-150} SANITIZE_DEADLINE=${SANITIZE_DEADLINE:-90} \
        SWEEP_OPS=${SWEEP_OPS:-rmsnorm_bwd layernorm_bwd} SWEEP_DTYPES=${SWEEP_DTYPES:-bf16 f32} \
        SWEEP_TUNES=${SWEEP_TUNES:-shifted_rows=31} SWEEP_NS=${SWEEP_NS:-$n_odd} \
        bash "$root/scripts/gpu_session.sh" "$commit" cases sanitize initcheck sweep || status=1 ;;
    bwd_swings)
      # The forty-seventh session's open question (docs/KERNELS.md, model
      # widths): the norm backward's power-of-two plans swing 73-98% of
      # copy from width to width. The widths again at M*N = 2^27 and 2^28
      # (each in its own folder, m<total>/), the fit beside the defaults,
      # then ncu of a dip and a peak of one plan (LayerNorm fp32 +dw,db
      # 5120 at 1024 threads, 6144 likewise; 2560 and 3072 at 512).
      w="2560 3072 4096 5120 6144 7168 8192 12288"
      for total in 134217728 268435456; do
        mkdir -p "$out/m$total"
        OUT="$out/m$total" SWEEP_TOTAL=$total SWEEP_OPS=${SWEEP_OPS:-rmsnorm_bwd layernorm_bwd} \
          SWEEP_DTYPES=${SWEEP_DTYPES:-bf16 f32} SWEEP_NS=${SWEEP_NS:-$w} \
          SWEEP_TUNES=${SWEEP_TUNES:-bwd_pipe_fit_team=1} \
          bash "$root/scripts/gpu_session.sh" "$commit" sweep || status=1
      done
      # (NCU_SKIP 47: the sweep calls each option 22 times -- a check, a
      # warm-up, 20 timed -- dx, then +dw, then +dw,db: the 48th launch is
      # +dw,db's fourth)
      NCU_SKIP=${NCU_SKIP:-47} NCU_RUNS=${NCU_RUNS:-"rmsnorm_bwd_pipe||env QUACK_SWEEP_LAYERNORM=1 build/rmsnorm_bwd_sweep f32 268435456 5120;rmsnorm_bwd_pipe||env QUACK_SWEEP_LAYERNORM=1 build/rmsnorm_bwd_sweep f32 268435456 6144;rmsnorm_bwd_pipe||env QUACK_SWEEP_LAYERNORM=1 build/rmsnorm_bwd_sweep f32 268435456 2560;rmsnorm_bwd_pipe||env QUACK_SWEEP_LAYERNORM=1 build/rmsnorm_bwd_sweep f32 268435456 3072"} \
        bash "$root/scripts/gpu_session.sh" "$commit" ncu || status=1
      # The device tool brings back a bounded number of files: the two
      # folders as one bwd_swings.tgz (the forty-eighth session's first
      # call lost them, 7 files left out).
      (cd "$out" && tar czf bwd_swings.tgz m134217728 m268435456 && rm -rf m134217728 m268435456) || status=1 ;;
    widths)
      w="2048 2560 3072 3584 4096 5120 6144 7168 8192 12288 16384"
      SWEEP_OPS=${SWEEP_OPS:-rmsnorm_bwd layernorm_bwd rmsnorm layernorm} SWEEP_DTYPES=${SWEEP_DTYPES:-bf16 f32} \
        SWEEP_NS=${SWEEP_NS:-$w} SOFTMAX_NS=${SOFTMAX_NS:-$w} CE_NS=${CE_NS:-$w} \
        SWEEP_TUNES=${SWEEP_TUNES:-bwd_pipe_fit_team=1;norm_fit_team=0} \
        bash "$root/scripts/gpu_session.sh" "$commit" sweep || status=1 ;;
    norm_vpt16)
      SWEEP_OPS=${SWEEP_OPS:-rmsnorm layernorm} SWEEP_DTYPES=${SWEEP_DTYPES:-bf16} \
        SWEEP_NS=${SWEEP_NS:-512 1024 2048 4096 8192 16384 32768} \
        SWEEP_TUNES=${SWEEP_TUNES:-norm_fwd_vpt16_min_cols=512;norm_fwd_vpt16_min_cols=2048} \
        bash "$root/scripts/gpu_session.sh" "$commit" sweep || status=1 ;;
    sanitize|initcheck|synccheck)
      # memcheck (sanitize), initcheck or synccheck over the C++ GPU cases
      # in $SANITIZE_FILTER, killed after $SANITIZE_TIMEOUT s.
      # $SANITIZE_TOOL_ARGS: more compute-sanitizer arguments (e.g.
      # "--num-cuda-barriers 1048576": the fifty-seventh session's synccheck
      # runs, where the default table of tracked mbarriers overflowed).
      tool=$part
      [ "$part" = sanitize ] && tool=memcheck
      # shellcheck disable=SC2086
      bash scripts/sanitize_cases.sh "$tool" "${SANITIZE_FILTER:-*}" "${SANITIZE_TIMEOUT:-300}" "$out" \
        ${SANITIZE_TOOL_ARGS:-} || status=1 ;;
    sanitize_py)
      # memcheck under the Python suite ($SANITIZE_PY_FILTER: a pytest -k
      # expression; "" for all of it), the package installed first if need be:
      # scripts/sanitize_py.sh, chunks of $SANITIZE_PY_CHUNK tests a process,
      # $SANITIZE_PY_WORKERS at once, each killed after $SANITIZE_TIMEOUT s.
      ensure_package || { status=1; continue; }
      bash scripts/sanitize_py.sh "${SANITIZE_PY_FILTER-concurrency}" "${SANITIZE_TIMEOUT:-300}" "$out" \
        || status=1 ;;
    reduce_overhead_probe)
      # Issue 7: the one Python test that fails under memcheck only
      # (scripts/probe_reduce_overhead.py): each experiment natively, then
      # under memcheck, each killed after $PROBE_TIMEOUT (300) s.
      ensure_package || { status=1; continue; }
      for exp in ${PROBE_EXPERIMENTS:-none history no_autotune no_partition}; do
        native_and_memcheck "$out/reduce_overhead_probe.log" "$exp" "${PROBE_TIMEOUT:-300}" 120 \
          python3 scripts/probe_reduce_overhead.py "$exp"
      done
      grep -E "^== |^exit|passed|failed|ERROR SUMMARY" "$out/reduce_overhead_probe.log" ;;
    racecheck)
      QUACK_TEST_MAX_ELEMS=${RACECHECK_MAX_ELEMS-1048576} SANITIZE_BATCH_ELEMS=${SANITIZE_BATCH_ELEMS:-1048576} \
        bash scripts/sanitize_cases.sh racecheck "${RACECHECK_FILTER:-*}" "${RACECHECK_TIMEOUT:-300}" "$out" \
        --racecheck-report all || status=1 ;;
    synccheck_repeat)
      # Issue 7: the fifty-seventh session's open synccheck question
      # (bench/results/2026-12-06-sanitizers-2402340-h100.md): which
      # illegal addresses under synccheck follow the run (placement,
      # timing) and which the kernel. Each line of $SYNC_RUNS
      # ("label|tool args|gtest filter", ';'-separated; the default below)
      # runs $SYNC_REPEAT (5) times natively and under synccheck, each
      # killed after $PROBE_TIMEOUT (120) s; synccheck_repeat.log has every
      # run's tail, synccheck_repeat.txt a line a run: label, tool, exit,
      # illegal-address and report counts. The default lines: the grid
      # backward (one CTA an SM, no cluster) that faulted only with the
      # larger mbarrier table, the same case forced onto the grid kernel,
      # a clustered staged forward (256-thread CTAs in 12-CTA clusters)
      # at both tables, and cluster_exchange_probe with one CTA an SM at the
      # larger table.
      { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUACK_BUILD_TESTS=ON -DQUACK_BUILD_BENCH=ON \
          -DQUACK_BUILD_PYTHON=OFF && cmake --build build --target quack_gpu_tests cluster_exchange_probe; } \
        > "$out/synccheck_repeat_build.log" 2>&1 || { status=1; tail -n 20 "$out/synccheck_repeat_build.log"; continue; }
      big="--num-cuda-barriers 1048576"
      g=Cases/RMSNormBwdGpu
      runs=${SYNC_RUNS:-"grid bwd N139264, defaults||gtest $g.MatchesFloat64AndIsDeterministic/N139264_f16_M3_grid_rows_lt_groups;grid bwd N139264, defaults, big table|$big|gtest $g.MatchesFloat64AndIsDeterministic/N139264_f16_M3_grid_rows_lt_groups;grid bwd N139264 forced, big table|$big|gtest $g.GridKernelMatchesFloat64/N139264_f16_M3_grid_rows_lt_groups;staged fwd cl12 G98304||gtest GridCases/RMSNormFwdGpuGrid.MatchesFloat64ReferenceAndStaysInBounds/G98304_f32_M150;staged fwd cl12 G98304, big table|$big|gtest GridCases/RMSNormFwdGpuGrid.MatchesFloat64ReferenceAndStaysInBounds/G98304_f32_M150;probe 16 x 64 one CTA an SM, big table|$big|probe 1 16 64 1000 120"}
      : > "$out/synccheck_repeat.txt"
      while IFS='|' read -r label targs what; do
        [ -n "$label" ] || continue
        case $what in
          "gtest "*) cmd=(build/tests/cpp/quack_gpu_tests "--gtest_filter=${what#gtest }") ;;
          "probe "*) read -r -a pa <<< "${what#probe }"; cmd=(build/cluster_exchange_probe "${pa[@]}") ;;
          *) echo "synccheck_repeat: unknown target '$what'"; status=1; continue ;;
        esac
        for ((k = 1; k <= ${SYNC_REPEAT:-5}; ++k)); do
          for tool in none synccheck; do
            if [ "$tool" = none ]; then pre=(); else read -r -a pre <<< "compute-sanitizer --tool synccheck $targs"; fi
            log=$(timeout "${PROBE_TIMEOUT:-120}" "${pre[@]}" "${cmd[@]}" < /dev/null 2>&1)
            e=$?
            { echo "== $label, $tool, run $k: exit $e"; tail -n 30 <<< "$log"; } >> "$out/synccheck_repeat.log"
            printf '%s | %s | run %d | exit %d | illegal %d | reports %d\n' "$label" "$tool" "$k" "$e" \
              "$(grep -c 'illegal memory access' <<< "$log")" "$(grep -c '^========= [A-Z][a-z]* error detected' <<< "$log")" \
              >> "$out/synccheck_repeat.txt"
          done
        done
      done <<< "$(tr ';' '\n' <<< "$runs")"
      cat "$out/synccheck_repeat.txt" ;;
    synccheck_probe)
      # Issue 7: under synccheck (and only there) the chunk kernel forced as
      # ChunkCases force it (N = 70000 bf16, 128-thread CTAs, 8 KB staged,
      # clusters of 16 or 8) hits an illegal address with no synccheck
      # report, at 300 and 20 rows but not at 5 (eleventh / twelfth
      # sessions); memcheck, racecheck and native runs are clean. Each line
      # below changes one thing from the failing 20-row run: the staging,
      # the CTA size, the cluster size (16, 8, 4, 2, none, at rows enough
      # for several a cluster), CTAs small enough that several of a cluster
      # share an SM against CTAs that own theirs (N = 1M), the default plan,
      # and the RMSNorm persistent clustered kernel at many rows.
      build_sweeps || { status=1; continue; }
      base=chunk_min_kb=0,chunk_min_bwd_kb=0
      while IFS='|' read -r label tune cmd; do
        [ -n "$label" ] || continue
        # $PROBE_MATCH: only the runs whose label contains it.
        [[ -z ${PROBE_MATCH:-} || $label == *"$PROBE_MATCH"* ]] || continue
        {
          echo "== $label (QUACK_TUNE=$tune): $cmd"
          # shellcheck disable=SC2086
          QUACK_TUNE=$tune timeout "${PROBE_TIMEOUT:-120}" compute-sanitizer --tool synccheck $cmd < /dev/null 2>&1 |
            tail -n 40  # (stdin: not the probe list)
          echo "exit ${PIPESTATUS[0]}"
        } >> "$out/synccheck_probe.log"
      done <<PROBES
cl16 t128 s8 M20 (failed before)|$base,chunk_cta_kb=16,chunk_stage_kb=8,chunk_threads=128|build/softmax_sweep bf16 0 1400000 70000
cl16 t128 s8 M5 (clean before)|$base,chunk_cta_kb=16,chunk_stage_kb=8,chunk_threads=128|build/softmax_sweep bf16 0 350000 70000
cl16 t128 no staging M20|$base,chunk_cta_kb=16,chunk_stage_kb=0,chunk_threads=128|build/softmax_sweep bf16 0 1400000 70000
cl16 t128 all staged M20|$base,chunk_cta_kb=16,chunk_stage_kb=64,chunk_threads=128|build/softmax_sweep bf16 0 1400000 70000
cl16 t256 s8 M20|$base,chunk_cta_kb=16,chunk_stage_kb=8,chunk_threads=256|build/softmax_sweep bf16 0 1400000 70000
cl4 t128 s8 M1200|$base,chunk_cta_kb=64,chunk_stage_kb=8,chunk_threads=128|build/softmax_sweep bf16 0 84000000 70000
cl2 t128 s8 M1200|$base,chunk_cta_kb=128,chunk_stage_kb=8,chunk_threads=128|build/softmax_sweep bf16 0 84000000 70000
cl1 t128 s8 M1200|$base,chunk_cta_kb=256,chunk_stage_kb=8,chunk_threads=128|build/softmax_sweep bf16 0 84000000 70000
cl16 t128 s8 N1M M20 (several CTAs an SM)|$base,chunk_cta_kb=128,chunk_stage_kb=8,chunk_threads=128|build/softmax_sweep bf16 0 20971520 1048576
cl16 t1024 s8 N1M M20 (one CTA an SM)|$base,chunk_cta_kb=128,chunk_stage_kb=8,chunk_threads=1024|build/softmax_sweep bf16 0 20971520 1048576
default plan M300||build/softmax_sweep bf16 0 21000000 70000
rmsnorm persistent clusters M1200||build/rmsnorm_sweep bf16 84000000 70000
exchange alone cl16 t128 rows20||build/cluster_exchange_probe 1 16 128 20
exchange alone cl16 t128 rows5||build/cluster_exchange_probe 1 16 128 5
exchange alone cl16 t128 rows1000||build/cluster_exchange_probe 1 16 128 1000
exchange alone cl16 t1024 rows20||build/cluster_exchange_probe 1 16 1024 20
exchange alone cl16 t128 rows20, 120 KB shared (one CTA an SM)||build/cluster_exchange_probe 1 16 128 20 120
exchange alone cl8 t128 rows40||build/cluster_exchange_probe 1 8 128 40
exchange alone cl4 t128 rows1000||build/cluster_exchange_probe 1 4 128 1000
cluster_reduce alone cl16 t128 rows20||build/cluster_exchange_probe 0 16 128 20
cluster_reduce alone cl16 t128 rows1000||build/cluster_exchange_probe 0 16 128 1000
PROBES
      # The same small programs without a tool, and under memcheck.
      for a in "1 16 128 20" "1 16 128 1000" "0 16 128 1000"; do
        # shellcheck disable=SC2086
        native_and_memcheck "$out/synccheck_probe.log" "cluster_exchange_probe $a" "${PROBE_TIMEOUT:-120}" 20 \
          build/cluster_exchange_probe $a
      done
      grep -E "^== |^exit|ERROR SUMMARY|rror|OK|WRONG|launched" "$out/synccheck_probe.log" ;;
    decode)
      build_sweeps || { status=1; continue; }
      IFS=';' read -r -a tunes <<< "${DECODE_TUNES:-}"
      for tune in "" "${tunes[@]}"; do
        for dt in ${DECODE_DTYPES:-bf16}; do
          echo "== decode $dt ${tune:-defaults}" >> "$out/decode_sweep.log"
          QUACK_TUNE=$tune build/decode_sweep "$dt" "${DECODE_OPS:-rmsnorm,layernorm,softmax,cross_entropy}" \
            >> "$out/decode_sweep.log" 2>&1 || status=1
        done
      done
      grep -c WRONG "$out/decode_sweep.log" ;;
    sweep)
      build_sweeps || { status=1; continue; }
      IFS=';' read -r -a tunes <<< "${SWEEP_TUNES:-}"
      for tune in "" "${tunes[@]}"; do
        # shellcheck disable=SC2086
        for dt in ${SWEEP_DTYPES:-bf16 f32}; do
          # In this order, whatever the order of $SWEEP_OPS.
          for op in rmsnorm layernorm softmax cross_entropy rmsnorm_bwd layernorm_bwd; do
            [[ " ${SWEEP_OPS:-rmsnorm softmax} " == *" $op "* ]] || continue
            case $op in
              rmsnorm) log=sweep.log ;;
              layernorm_bwd) log=rmsnorm_bwd_sweep.log ;;
              *) log=${op}_sweep.log ;;
            esac
            sweep_cmd build "$op" "$dt"
            echo "== $op $dt ${tune:-defaults}" >> "$out/$log"
            QUACK_TUNE=$tune "${cmd[@]}" >> "$out/$log" 2>&1 || status=1
          done
        done
      done
      # The variants side by side (bench/sweep_table.py), a table a timed column.
      python3 bench/sweep_table.py "$out"/*sweep.log > "$out/sweep_tables.md" 2>&1 || status=1 ;;
    ab)
      build_sweeps || { status=1; continue; }
      old_tree=${AB_OLD:?set AB_OLD to the old tree}
      build_old_tree ab_build.log rmsnorm_sweep softmax_sweep rmsnorm_bwd_sweep cross_entropy_sweep \
        || { status=1; continue; }
      for ((round = 1; round <= ${AB_ROUNDS:-2}; ++round)); do
        # shellcheck disable=SC2086
        for op in ${SWEEP_OPS:-rmsnorm softmax}; do
          for dt in ${SWEEP_DTYPES:-bf16 f32}; do
            for side in new old; do
              dir=build
              [ "$side" = old ] && dir=$old_tree/build
              sweep_cmd "$dir" "$op" "$dt"
              echo "== $op $dt $side round $round" >> "$out/ab.log"
              "${cmd[@]}" >> "$out/ab.log" 2>&1 || status=1
            done
          done
        done
      done
      grep -c "^== " "$out/ab.log"
      python3 bench/sweep_table.py "$out/ab.log" > "$out/ab_tables.md" 2>&1 || status=1 ;;
    ab_decode)
      # decode_sweep of two trees, alternating: $AB_OLD built beside this
      # one (as the ab part), then $AB_ROUNDS (default 2) rounds of new, old
      # for each dtype of $DECODE_DTYPES (bf16) over $DECODE_OPS (all four)
      # into ab_decode.log. (A change of a decode-sized launch moves it by
      # tenths of a microsecond: only the same call's two trees compare.)
      build_sweeps || { status=1; continue; }
      old_tree=${AB_OLD:?set AB_OLD to the old tree}
      build_old_tree ab_decode_build.log decode_sweep || { status=1; continue; }
      for ((round = 1; round <= ${AB_ROUNDS:-2}; ++round)); do
        for dt in ${DECODE_DTYPES:-bf16}; do
          for side in new old; do
            dir=build
            [ "$side" = old ] && dir=$old_tree/build
            echo "== $side $dt round $round" >> "$out/ab_decode.log"
            "$dir/decode_sweep" "$dt" "${DECODE_OPS:-rmsnorm,layernorm,softmax,cross_entropy}" \
              >> "$out/ab_decode.log" 2>&1 || status=1
          done
        done
      done
      grep -c WRONG "$out/ab_decode.log" ;;
    ncu)
      # One ncu report per entry of $NCU_RUNS, ';'-separated entries of
      # "kernel-regex|QUACK_TUNE|sweep binary and arguments", e.g.
      #   NCU_RUNS="softmax_chunk||softmax_sweep bf16 0 268435456 1048576"
      # (the launch after the first $NCU_SKIP (default 3) of the first
      # matching kernel). A command may start with build/ or with env
      # (`env QUACK_SWEEP_LAYERNORM=1 build/rmsnorm_sweep ...`); otherwise
      # build/ is prefixed. NCU_DETAILS=1 adds --print-details all (the
      # sections' tables, e.g. the warp stall reasons; not yet tried).
      # ComputeWorkloadAnalysis gives each pipe's utilisation (XU: the
      # MUFU.EX2 of softmax and cross-entropy), InstructionStats the mix.
      build_sweeps || { status=1; continue; }
      IFS=';' read -r -a runs <<< "${NCU_RUNS:-}"
      i=0
      for run in "${runs[@]}"; do
        IFS='|' read -r kernel tune cmd <<< "$run"
        i=$((i + 1))
        case $cmd in build/* | env\ *) ;; *) cmd="build/$cmd" ;; esac
        details=()
        [ -n "${NCU_DETAILS:-}" ] && details=(--print-details all)
        # shellcheck disable=SC2086
        QUACK_TUNE=$tune timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --section SpeedOfLight \
          --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
          --section SchedulerStats --section SourceCounters --section ComputeWorkloadAnalysis \
          --section InstructionStats "${details[@]}" -k "regex:$kernel" \
          --launch-skip "${NCU_SKIP:-3}" --launch-count 1 $cmd \
          > "$out/ncu_$i.txt" 2>&1 || status=1
        grep -E "Duration|DRAM Throughput|Achieved Occupancy" "$out/ncu_$i.txt" | head -4
      done ;;
    decode_diag)
      mkdir -p "$out/decode_weights" "$out/decode_no_weight"
      OUT="$out/decode_weights" DECODE_NS=${DECODE_NS:-2048,8192} \
        bash "$root/scripts/gpu_session.sh" "$commit" decode || status=1
      OUT="$out/decode_no_weight" DECODE_NO_WEIGHT=1 DECODE_OPS=rmsnorm,layernorm DECODE_NS=${DECODE_NS:-2048,8192} \
        bash "$root/scripts/gpu_session.sh" "$commit" decode || status=1
      LATENCY_PROBE_ARGS=${LATENCY_PROBE_ARGS:-"--ops rmsnorm,layernorm,softmax --m 1 --n 2048"} \
        bash "$root/scripts/gpu_session.sh" "$commit" ncu_latency || status=1
      (cd "$out" && tar czf decode_diag.tgz decode_weights decode_no_weight && rm -rf decode_weights decode_no_weight) \
        || status=1 ;;
    ncu_latency)
      # Every kernel of bench/latency_probe.py (decode-sized calls of each
      # implementation, $LATENCY_PROBE_ARGS, in NVTX ranges "<op>/<impl>"),
      # with the peers carried in .whl/: ncu_latency.txt; the kernels'
      # durations and launch shapes are grepped to the summary.
      ensure_package || { status=1; continue; }
      # shellcheck source=/dev/null
      . bench/peers.sh
      # (InstructionStats and SchedulerStats: where a decode-sized kernel's
      # cycles go against a peer's at the same tile -- the fifty-fifth
      # session's open question, docs/KERNELS.md)
      # shellcheck disable=SC2086
      timeout "${NCU_TIMEOUT:-300}" ncu --clock-control none --nvtx --section SpeedOfLight --section LaunchStats \
        --section WarpStateStats --section Occupancy --section InstructionStats --section SchedulerStats \
        --metrics smsp__inst_executed.sum,sm__cycles_elapsed.max,smsp__cycles_active.max \
        python3 bench/latency_probe.py ${LATENCY_PROBE_ARGS:-} \
        > "$out/ncu_latency.txt" 2>&1 || status=1
      grep -E "^  [A-Za-z_].*\(|NVTX Push/Pop|Duration|Block Size|Grid Size|Registers Per|event time|n/a" \
        "$out/ncu_latency.txt" | head -120 ;;
    bench)
      ensure_package || { status=1; continue; }
      # shellcheck source=/dev/null
      . bench/peers.sh
      python3 bench/bench_rmsnorm.py --commit "$commit" --out "$out/bench.md" --json "$out/bench.json" \
        > "$out/bench.log" 2>&1 || status=1
      tail -3 "$out/bench.log" ;;
    host_breakdown)
      ensure_package || { status=1; continue; }
      python3 bench/host_breakdown.py --out "$out/host_breakdown.md" > "$out/host_breakdown.log" 2>&1 || status=1
      cat "$out/host_breakdown.md" 2> /dev/null || tail -5 "$out/host_breakdown.log" ;;
    vocab_parallel)
      # Two GPUs (kind nvidia-h200-x2; after `tests`, which installs the
      # package): the torchrun check, the benchmark, the profile. NVLink
      # multicast stays off.
      NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 tests/python/dist_vocab_parallel.py \
        > "$out/vocab_parallel_test.log" 2>&1 || status=1
      tail -n 2 "$out/vocab_parallel_test.log"
      NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 bench/bench_vocab_parallel.py \
        --out "$out/bench_vocab_parallel.md" > "$out/bench_vocab_parallel.log" 2>&1 || status=1
      tail -n 12 "$out/bench_vocab_parallel.log"
      # Where a step's time goes: host enqueue against the kernels (torch.profiler).
      NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 bench/profile_vocab_parallel.py \
        > "$out/profile_vocab_parallel.log" 2>&1 || status=1
      grep "^== " "$out/profile_vocab_parallel.log"
      # The same without c10d's flight recorder (a suspect of the all-gather's
      # host time: ~0.2 ms a call under the profiler on f0ffb00).
      TORCH_NCCL_TRACE_BUFFER_SIZE=0 NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 \
        bench/profile_vocab_parallel.py > "$out/profile_vocab_parallel_notrace.log" 2>&1 || status=1
      grep "^== " "$out/profile_vocab_parallel_notrace.log" ;;
    bench_all)
      ensure_package || { status=1; continue; }
      # shellcheck source=/dev/null
      . bench/peers.sh
      # shellcheck disable=SC2086
      python3 bench/bench_all.py --commit "$commit" --out-dir "$out/all" ${BENCH_ALL_ARGS:-} \
        > "$out/bench_all.log" 2>&1 || status=1
      sed -n '/^## Where quack_cpp loses/,$p' "$out/all/summary.md" | head -40
      # The device tool brings back a bounded number of files: all/ as one.
      cp "$out/all/summary.md" "$out/bench_all_summary.md"
      tar czf "$out/bench_all.tgz" -C "$out" all && rm -rf "$out/all" ;;
    norm_bwd_gap)
      # The fifty-first session's question: where the RMSNorm backward's
      # time goes at bf16 2048 / 4096 / 8192, where QuACK leads
      # bench_rmsnorm_bwd while rmsnorm_bwd_sweep runs our kernels faster
      # (bench/probe_norm_bwd_gap.py: isolated and back-to-back times, the
      # profiled kernels and gaps; QuACK with the peers carried in .whl/).
      ensure_package || { status=1; continue; }
      # shellcheck source=/dev/null
      . bench/peers.sh
      # shellcheck disable=SC2086
      timeout "${GAP_TIMEOUT:-240}" python3 bench/probe_norm_bwd_gap.py ${GAP_NS:-} > "$out/norm_bwd_gap.log" 2>&1 \
        || status=1
      head -80 "$out/norm_bwd_gap.log" ;;
    norm_bwd_l2)
      # Our RMSNorm backward and QuACK's timed from the states before them:
      # after their own call, a 256 MB read, a 256 MB write, a GEMM, their
      # own call and 5 ms idle, each other's call; with the SM clock over
      # the sleep before each (bench/probe_norm_bwd_gap.py --l2). norm_bwd_l2.log.
      ensure_package || { status=1; continue; }
      # shellcheck source=/dev/null
      . bench/peers.sh
      # shellcheck disable=SC2086
      python3 bench/probe_norm_bwd_gap.py --l2 ${GAP_NS:-2048 4096 8192} > "$out/norm_bwd_l2.log" 2>&1 || status=1
      grep -v Warning "$out/norm_bwd_l2.log" | head -20 ;;
    norm_bwd_gap_ncu)
      # ncu of the RMSNorm backward's main kernel, ours beside QuACK's, at
      # bf16 $GAP_NCU_N (default 4096): the fourth of 8 calls each
      # (bench/probe_norm_bwd_gap.py --calls); DRAM and L2 bytes, the
      # instructions, the stalls. ncu_gap_<name>.txt.
      ensure_package || { status=1; continue; }
      # shellcheck source=/dev/null
      . bench/peers.sh
      for pair in "quack_cpp|rmsnorm_bwd_pipe" "QuACK|RMSNormBackward"; do
        IFS='|' read -r name kernel <<< "$pair"
        timeout "${NCU_TIMEOUT:-150}" ncu --clock-control none --section SpeedOfLight \
          --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats \
          --section Occupancy --section LaunchStats --section SchedulerStats --section InstructionStats \
          --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,smsp__inst_executed.sum \
          -k "regex:$kernel" --launch-skip 3 --launch-count 1 \
          python3 bench/probe_norm_bwd_gap.py --calls "$name" "${GAP_NCU_N:-4096}" > "$out/ncu_gap_$name.txt" 2>&1 \
          || status=1
        grep -E "Duration|DRAM Throughput|dram__bytes|lts__t_sectors_op|smsp__inst_executed.sum|Achieved Occupancy|Block Size|Grid Size" \
          "$out/ncu_gap_$name.txt" | head -12
      done ;;
    bench_softmax|bench_rmsnorm_bwd|bench_layernorm|bench_cross_entropy)
      ensure_package || { status=1; continue; }
      # shellcheck source=/dev/null
      . bench/peers.sh
      args_var=BENCH_ARGS_${part#bench_}
      # shellcheck disable=SC2086
      python3 "bench/$part.py" --commit "$commit" --out "$out/$part.md" \
        --json "$out/$part.json" ${!args_var:-${BENCH_ARGS:-}} > "$out/$part.log" 2>&1 || status=1
      grep -A12 "^## " "$out/$part.md" | head -14 ;;
    *) echo "unknown part $part"; status=2 ;;
  esac
  echo "[$part: $((SECONDS - start)) s]"
done
# The device tool brings back a bounded number of files (8 in the twelfth
# session: synccheck's logs were left behind): past 8, the logs travel as
# one logs.tgz beside gpu.txt and the summaries (logs2.tgz, ... where a
# part that runs this script again, `shifted`, packed its own first).
if [ "$(find "$out" -maxdepth 1 -type f | wc -l)" -gt 8 ]; then
  arc=logs.tgz
  k=1
  while [ -e "$out/$arc" ]; do
    k=$((k + 1))
    arc=logs$k.tgz
  done
  (cd "$out" && find . -maxdepth 1 -type f \( -name '*.log' -o -name '*.status' -o -name '*.json' -o -name '*.md' \
      -o -name '*.txt' \) ! -name '*summary.md' ! -name gpu.txt -printf '%f\n' > .packed \
    && tar czf "$arc" -T .packed && xargs rm -f < .packed && rm -f .packed)
fi
exit $status
