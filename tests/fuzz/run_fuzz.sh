#!/usr/bin/env bash
# run_fuzz.sh - build the libFuzzer targets (clang, -DLS_FUZZ=ON, ASan+UBSan)
# in their own build directory and run each for N executions on its corpus
# (tests/fuzz/corpus/<target>/, so new finds are added there), one target at
# a time, then print one table row per target:
#   target | executions | crashes | exec/s | corpus files
#
# Usage: tests/fuzz/run_fuzz.sh [-n RUNS] [-j JOBS] [-a] [-b BUILD_DIR] [-m] [-t] [TARGET...]
#   -n RUNS   executions per target (default 10000000; libFuzzer -runs=RUNS)
#   -j JOBS   run JOBS targets at the same time (default 1)
#   -a        build with AddressSanitizer too (LS_FUZZ_ASAN=ON, build-fuzz;
#             2-5x slower).  Default: UBSan (aborting) only, build-fuzz-fast;
#             every corpus is replayed under ASan+UBSan by the ctests
#             fuzz_replay_* of the sanitizer build.
#   -b DIR    build directory
#   -m        afterwards minimise each corpus in place (libFuzzer -merge=1,
#             keeping the hand-made seed-* inputs)
#   -t        run nothing: print the table of the last run's logs
#   TARGET    fuzz_json, fuzz_config, ... (default: every tests/fuzz/fuzz_*.c)
# Environment: LS_FUZZ_NICE (default 10), LS_FUZZ_FLAGS (extra libFuzzer
# flags).  Crash inputs land in BUILD_DIR/fuzz-out/<target>/; logs next to
# them.  Exit status 1 when any target crashed or did not finish its runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=10000000
JOBS=1
ASAN=OFF
BUILD=
MERGE=0
TABLE_ONLY=0
while getopts "n:j:ab:mt" opt; do
  case $opt in
    n) RUNS=$OPTARG ;;
    j) JOBS=$OPTARG ;;
    a) ASAN=ON ;;
    b) BUILD=$OPTARG ;;
    m) MERGE=1 ;;
    t) TABLE_ONLY=1 ;;
    *) echo "usage: $0 [-n RUNS] [-j JOBS] [-a] [-b BUILD_DIR] [-m] [-t] [TARGET...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ -z "$BUILD" ]; then
  if [ "$ASAN" = ON ]; then BUILD=build-fuzz; else BUILD=build-fuzz-fast; fi
fi
NICE=${LS_FUZZ_NICE:-10}
if [ $# -gt 0 ]; then
  TARGETS=("$@")
else
  TARGETS=()
  for f in tests/fuzz/fuzz_*.c; do TARGETS+=("$(basename "$f" .c)"); done
fi

# Per-target libFuzzer flags: the JSON-based parsers get small inputs so that
# 10M executions fit in minutes, the binary readers somewhat more room.
flags_for() {
  case $1 in
    fuzz_safetensors|fuzz_trace_reader) echo "-max_len=8192" ;;
    fuzz_checkpoint) echo "-max_len=16384" ;; # valid micro checkpoints are 6-9 KiB
    fuzz_audit) echo "-max_len=65536" ;;       # packed run directories: a 1-step run is 18-58 KiB
    *) echo "-max_len=4096" ;;
  esac
}

OUT=$BUILD/fuzz-out
if [ "$TABLE_ONLY" = 0 ]; then
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=clang nice -n "$NICE" cmake -S . -B "$BUILD" -DLS_FUZZ=ON -DLS_FUZZ_ASAN="$ASAN" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLS_CUDA=OFF >/dev/null
fi
nice -n "$NICE" cmake --build "$BUILD" -j 2 --target "${TARGETS[@]}" >/dev/null

mkdir -p "$OUT"
run_one() {
  local t=$1 dir=tests/fuzz/corpus/$1 o=$OUT/$1
  mkdir -p "$dir" "$o"
  rm -f "$o"/crash-* "$o"/leak-* "$o"/timeout-* "$o"/oom-*
  # shellcheck disable=SC2046
  nice -n "$NICE" "$BUILD/tests/$t" -runs="$RUNS" $(flags_for "$t") -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$o/" ${LS_FUZZ_FLAGS:-} "$dir" >"$o/log" 2>&1 || true
}

for t in "${TARGETS[@]}"; do
  run_one "$t" &
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
done
wait

if [ "$MERGE" = 1 ]; then
  for t in "${TARGETS[@]}"; do
    dir=tests/fuzz/corpus/$t
    tmp=$OUT/$t/merged
    rm -rf "$tmp" && mkdir -p "$tmp"
    # hand-made seeds (seed-*) stay; the rest is what adds coverage to them
    find "$dir" -maxdepth 1 -name 'seed-*' -exec cp {} "$tmp"/ \;
    nice -n "$NICE" "$BUILD/tests/$t" -merge=1 $(flags_for "$t") -timeout=25 "$tmp" "$dir" \
      >"$OUT/$t/merge.log" 2>&1
    rm -f "$dir"/* && cp "$tmp"/* "$dir"/
  done
fi
fi

status=0
printf '| %-18s | %12s | %7s | %8s | %12s |\n' target executions crashes exec/s "corpus files"
printf '|%s|%s|%s|%s|%s|\n' -------------------- -------------- --------- ---------- --------------
for t in "${TARGETS[@]}"; do
  log=$OUT/$t/log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  crashes=$(find "$OUT/$t" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | wc -l)
  files=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
  [ -n "$execs" ] || execs=0
  [ -n "$rate" ] || rate=0
  if [ "$crashes" != 0 ] || [ "$execs" -lt "$RUNS" ]; then status=1; fi
  printf '| %-18s | %12s | %7s | %8s | %12s |\n' "$t" "$execs" "$crashes" "$rate" "$files"
done
exit $status
