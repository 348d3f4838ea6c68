#!/usr/bin/env bash
# check_builds.sh - configure and build (no tests run) every standard CMake
# build type with gcc and with clang, -Werror on (the project default), each
# in its own directory under $LS_BUILD_MATRIX_DIR (default build-matrix/).
# Prints a table compiler x build type -> ok / FAILED and exits non-zero when
# any combination fails; the failing build's log is named in the table.
#   LS_BUILD_MATRIX_DIR    where the build directories go
#   LS_BUILD_COMPILERS     compilers to try (default "gcc clang")
#   LS_BUILD_TYPES         build types (default "Release RelWithDebInfo Debug MinSizeRel")
#   LS_BUILD_JOBS          parallel jobs (default $(nproc))
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${LS_BUILD_MATRIX_DIR:-build-matrix}
COMPILERS=${LS_BUILD_COMPILERS:-gcc clang}
TYPES=${LS_BUILD_TYPES:-Release RelWithDebInfo Debug MinSizeRel}
JOBS=${LS_BUILD_JOBS:-$(nproc)}
mkdir -p "$OUT"

declare -A result
failed=0
for cc in $COMPILERS; do
  for t in $TYPES; do
    dir="$OUT/$cc-$t"
    log="$dir.log"
    if ! command -v "$cc" >/dev/null 2>&1; then
      result[$cc-$t]="FAILED (no $cc)"
      failed=1
      continue
    fi
    echo "check_builds: $cc $t -> $dir" >&2
    if cmake -S "$ROOT" -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE="$t" \
         -DLS_WERROR=ON >"$log" 2>&1 &&
       cmake --build "$dir" -j "$JOBS" >>"$log" 2>&1; then
      result[$cc-$t]="ok"
    else
      result[$cc-$t]="FAILED (see $log)"
      failed=1
      grep -m 5 -E "error|warning" "$log" >&2 || tail -n 5 "$log" >&2
    fi
  done
done

printf '%-8s' "compiler"
for t in $TYPES; do printf ' %-16s' "$t"; done
printf '\n'
for cc in $COMPILERS; do
  printf '%-8s' "$cc"
  for t in $TYPES; do
    r=${result[$cc-$t]}
    printf ' %-16s' "${r%% *}"
  done
  printf '\n'
done
for k in "${!result[@]}"; do
  case ${result[$k]} in FAILED*) echo "check_builds: $k ${result[$k]}" >&2 ;; esac
done
exit $failed
