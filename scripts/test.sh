#!/usr/bin/env bash
# test.sh - set up, build and run the whole test suite: the Release build,
# then every build type with gcc and clang built with -Werror
# (scripts/check_builds.sh; skip with LS_SKIP_BUILD_MATRIX=1), then the
# sanitizer (ASan+UBSan) build (skip with LS_SKIP_SANITIZE=1).  Exit non-zero
# on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the suite tests the Release build users build; a build/ configured earlier
# with another type (setup.sh's default is RelWithDebInfo) is switched over
if [ -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
# chromium: the audit's HTML report is rendered in a real headless browser (audit_viz_chromium)
LS_EXTRA_PACKAGES="chromium" LS_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Release" ./scripts/setup.sh
(cd build && ctest --output-on-failure -j "$(nproc)")
if [ "${LS_SKIP_BUILD_MATRIX:-0}" != 1 ]; then
  # the gcc Release cell is build/ itself, built above with the same options
  LS_BUILD_REUSE=build ./scripts/check_builds.sh
fi
if [ "${LS_SKIP_SANITIZE:-0}" != 1 ]; then
  LS_BUILD_DIR=build-asan LS_CMAKE_ARGS="-DLS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug" ./scripts/setup.sh
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$(nproc)" -LE "slow|buildless")
fi
