#!/usr/bin/env bash
# test.sh - set up, build and run the whole test suite: the release build,
# then the sanitizer (ASan+UBSan) build.  Exit non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
./scripts/setup.sh
(cd build && ctest --output-on-failure -j "$(nproc)")
if [ "${LS_SKIP_SANITIZE:-0}" != 1 ]; then
  LS_BUILD_DIR=build-asan LS_CMAKE_ARGS="-DLS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug" ./scripts/setup.sh
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$(nproc)" -LE slow)
fi
