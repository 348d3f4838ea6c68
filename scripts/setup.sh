#!/usr/bin/env bash
# setup.sh - install the Debian packages LongStraw needs (only those missing),
# then configure and build into build/ (or $LS_BUILD_DIR).  Idempotent: on a
# machine that has everything it only runs an incremental build.
#   LS_CMAKE_ARGS   extra arguments for cmake (e.g. -DLS_SANITIZE=ON)
#   LS_EXTRA_PACKAGES  more Debian packages to install (space-separated)
set -euo pipefail
cd "$(dirname "$0")/.."

# clang: the build matrix builds every type with clang too; Debian's clang
# brings neither its OpenMP (libomp-dev, for find_package(OpenMP)) nor, with
# --no-install-recommends, its sanitizer and libFuzzer runtimes
# (libclang-rt-14-dev, for tests/fuzz/run_fuzz.sh).  scripts/check_fresh_machine.sh
# proves this list on a fresh Debian 12 root.  python3-torch and
# python3-zstandard: the Python emitter (python/) and the PyTorch example it
# instruments (examples/torch_cp/), whose tests run in the suite; python3-xxhash:
# the emitter's fast buffer digest (XXH3-128); pip and venv: `pip install ./python`
# and `pip install -e` are tested in fresh venvs (the package builds with its own
# standard-library backend, python/_backend/: nothing fetched).  iproute2 (`ip`, not in a minbase
# root): the two-host CP test's network namespaces (scripts/netns-cluster.sh).  universal-ctags and
# cscope: the code-search indexes with LS_K expanded (scripts/code_index.sh; the code_search test).
# ninja-build: new build directories use Ninja (below; make remains where ninja is absent).
PACKAGES=(build-essential cmake pkg-config git libcjson-dev libzstd-dev zstd
          libcriterion-dev libopenblas-dev libopenmpi-dev openmpi-bin libssl-dev
          clang libomp-dev libclang-rt-14-dev python3 python3-jsonschema
          python3-torch python3-zstandard python3-xxhash python3-pip python3-venv iproute2
          universal-ctags cscope ninja-build)
# extra packages a caller needs (scripts/test.sh: chromium, for the audit's HTML render check)
# shellcheck disable=SC2206
PACKAGES+=(${LS_EXTRA_PACKAGES:-})
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

BUILD_DIR=${LS_BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  # a new build directory is Ninja's (ninja-build, above: a clean Debug build 62 s against make's 84 s on
  # 2 cores); one configured before keeps the generator it has
  GEN=(); command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${LS_CMAKE_ARGS:-} >&2
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" >&2
