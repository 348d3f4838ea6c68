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
#   LS_BUILD_REUSE         a build directory configured exactly as one cell
#                          (scripts/test.sh passes build/, gcc Release): that
#                          cell is built there instead of anew.  It is used only
#                          when its cache names the same compiler binary, the
#                          cell's build type, -Werror on, no sanitizer or fuzz
#                          build and no extra C flags; else the cell is built
#                          in the matrix as usual and the reason is printed.
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
if [ -n "${LS_BUILD_REUSE:-}" ] && [ ! -f "$LS_BUILD_REUSE/CMakeCache.txt" ]; then
  echo "check_builds: LS_BUILD_REUSE=$LS_BUILD_REUSE: no CMakeCache.txt; every cell is built anew" >&2
  LS_BUILD_REUSE=
fi

# cache_get DIR KEY: the value of KEY in DIR/CMakeCache.txt (empty if absent)
cache_get() {
  sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" 2>/dev/null | head -n 1
}
# reusable CC TYPE: 0 when $LS_BUILD_REUSE is configured exactly as the cell
# CC x TYPE would be; else 1 (the reason on stderr when it is this cell's
# compiler and type but another setting differs)
reusable() {
  local dir=${LS_BUILD_REUSE:-} kv want have
  [ -n "$dir" ] || return 1
  want=$(readlink -f "$(command -v "$1")")
  [ -n "$want" ] && [ "$want" = "$(readlink -f "$(cache_get "$dir" CMAKE_C_COMPILER)")" ] &&
    [ "$2" = "$(cache_get "$dir" CMAKE_BUILD_TYPE)" ] || return 1
  for kv in LS_WERROR=ON LS_SANITIZE=OFF LS_FUZZ=OFF CMAKE_C_FLAGS=; do
    want=${kv#*=}
    have=$(cache_get "$dir" "${kv%%=*}")
    if [ "$have" != "$want" ]; then
      echo "check_builds: LS_BUILD_REUSE=$dir: ${kv%%=*} is '$have', not '$want'; the cell is built anew" >&2
      return 1
    fi
  done
}
# build_cell CC TYPE DIR LOG: configure DIR as the cell (unless it is $LS_BUILD_REUSE, already
# configured so) and build it, recording ok / FAILED
build_cell() {
  local cc=$1 t=$2 dir=$3 log=$4
  if [ "$dir" = "${LS_BUILD_REUSE:-}" ]; then
    # the same configuration, already built by the caller: build it again (a no-op when up to
    # date; -Werror stops it on any warning) and record the cell there
    echo "check_builds: $cc $t -> $dir (reused: the same configuration)" | tee "$log" >&2
  else
    echo "check_builds: $cc $t -> $dir" >&2
    # a new cell is Ninja's where ninja is installed (setup.sh installs it); one configured before keeps its generator
    local gen=()
    if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
    cmake -S "$ROOT" -B "$dir" "${gen[@]}" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE="$t" -DLS_WERROR=ON >"$log" 2>&1 ||
      { fail_cell "$cc-$t" "$log"; return; }
  fi
  if cmake --build "$dir" -j "$JOBS" >>"$log" 2>&1; then
    result[$cc-$t]="ok"
  else
    fail_cell "$cc-$t" "$log"
  fi
}
fail_cell() {
  result[$1]="FAILED (see $2)"
  failed=1
  grep -m 5 -E "error|warning" "$2" >&2 || tail -n 5 "$2" >&2
}

for cc in $COMPILERS; do
  for t in $TYPES; do
    dir="$OUT/$cc-$t"
    if ! command -v "$cc" >/dev/null 2>&1; then
      result[$cc-$t]="FAILED (no $cc)"
      failed=1
      continue
    fi
    if reusable "$cc" "$t"; then
      build_cell "$cc" "$t" "$LS_BUILD_REUSE" "$dir.log"
    else
      build_cell "$cc" "$t" "$dir" "$dir.log"
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
