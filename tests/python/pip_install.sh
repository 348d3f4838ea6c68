#!/bin/sh
# pip_install.sh PYTHON SRC WORK: `pip install ./python` and `pip install -e ./python` work
# offline, with build isolation (pip's default), and write nothing into the source tree.
#
# In fresh venvs (PYTHON -m venv --system-site-packages: zstandard and torch come from the
# system), WORK/regular gets `pip install --no-index SRC` and WORK/editable gets
# `pip install --no-index -e SRC`. Each: longstraw_emit imported from outside the repository
# is the venv's copy (regular) or SRC's (editable), a few calls work, the metadata names the
# extras, `pip uninstall` removes it. Two `pip wheel` builds are byte-identical. SRC is
# compared before and after each pip call (git status --ignored, or without git a listing
# with checksums); an edit of SRC by someone else during a pip call fails it too.
# Exit 77 (ctest: skipped) where PYTHON has no venv/ensurepip (Debian: python3-venv).
set -eu
py=$1 src=$(cd "$2" && pwd -P) work=$3

if ! "$py" -c "import venv, ensurepip" 2>/dev/null; then
    echo "SKIP: $py has no venv/ensurepip (Debian: apt-get install python3-venv)"
    exit 77
fi

# no index and no network: --no-index on every call; an index URL that refuses connections
# in case anything asks one anyway; no user or site pip configuration; no cache
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1
export PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_NO_INPUT=1
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PYTHONPATH PYTHONDONTWRITEBYTECODE 2>/dev/null || true

rm -rf "$work"
mkdir -p "$work"
outside=$(mktemp -d)   # the imports run here: outside the repository, even where WORK is in it
trap 'rm -rf "$outside"' EXIT

# the source tree's state: git status (untracked and ignored files too) where git sees SRC,
# else the checksums of its files; and its directories, which git does not list while empty
snapshot() {
    if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$src" status --porcelain --ignored --untracked-files=all -- .
    else
        (cd "$src" && find . -type f -exec cksum {} + | LC_ALL=C sort)
    fi
    (cd "$src" && find . -type d | LC_ALL=C sort)
}
# untouched WHAT CMD...: run CMD; fail if SRC's state changed meanwhile. Each pip call is
# checked on its own, so that the window for an unrelated edit of SRC stays short.
untouched() {
    what=$1
    shift
    snapshot >"$work/src-before"
    "$@"
    snapshot >"$work/src-after"
    if ! cmp -s "$work/src-before" "$work/src-after"; then
        echo "FAIL: $what changed the source tree $src:"
        diff "$work/src-before" "$work/src-after" || true
        exit 1
    fi
}

# check VENV EXPECTED_DIR: import longstraw_emit in VENV from a directory outside the
# repository (-I: no PYTHONPATH, no cwd, no user site; -B: an editable import writes no
# __pycache__ into SRC) and check where it came from, a few calls and the metadata
check() {
    (cd "$outside" && "$1/bin/python" -I -B - "$2" <<'PY'
import os, sys
from importlib import metadata
import longstraw_emit as le
want = os.path.realpath(os.path.join(sys.argv[1], "longstraw_emit", "__init__.py"))
assert os.path.realpath(le.__file__) == want, f"imported {le.__file__}, expected {want}"
assert le.jcs({"b": 1, "a": [True, None]}) == '{"a":[true,null],"b":1}', le.jcs({"b": 1, "a": [True, None]})
assert "shards" in le.PATHS and callable(le.gradient_probe), "PATHS or gradient_probe"
md = metadata.metadata("longstraw-emit")
assert md["Version"] == le.__version__, (md["Version"], le.__version__)
assert sorted(md.get_all("Provides-Extra")) == ["torch", "xxhash"], md.get_all("Provides-Extra")
reqs = md.get_all("Requires-Dist")
for r in ("zstandard", 'torch; extra == "torch"', 'xxhash; extra == "xxhash"'):
    assert r in reqs, f"Requires-Dist {r!r} not in {reqs}"
print("imported:", le.__file__)
# the build identity digests the emitter by content: installed or not, the same code is one identity
print("identity:", le.build_digest(le.collect_artifacts(packages=[], native_libraries=False)))
PY
    )
}

# identity: the build digest of the emitter imported from SRC itself (PYTHONPATH), to compare
identity() {
    (cd "$outside" && PYTHONPATH="$src" "$py" -B -c \
        "import longstraw_emit as le; print('identity:', le.build_digest(le.collect_artifacts(packages=[], native_libraries=False)))")
}

# uninstall VENV: pip removes it and longstraw_emit is no longer importable
uninstall() {
    untouched "pip uninstall" "$1/bin/pip" uninstall -y longstraw-emit
    if (cd "$outside" && "$1/bin/python" -I -B -c "import longstraw_emit" 2>/dev/null); then
        echo "FAIL: longstraw_emit still importable in $1 after pip uninstall"
        exit 1
    fi
}

# 1. regular install: the wheel lands in the venv's site-packages
"$py" -m venv --system-site-packages "$work/regular"
untouched "pip install" "$work/regular/bin/pip" install --no-index "$src"
site=$("$work/regular/bin/python" -I -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
untouched "import" check "$work/regular" "$site" > "$work/regular.out"
cat "$work/regular.out"
uninstall "$work/regular"
want=$(identity)
got=$(grep '^identity:' "$work/regular.out")
if [ "$want" != "$got" ]; then
    echo "FAIL: the installed emitter's build identity ($got) is not the source tree's ($want)"
    exit 1
fi

# 2. editable install: a .pth puts SRC on sys.path
"$py" -m venv --system-site-packages "$work/editable"
untouched "pip install -e" "$work/editable/bin/pip" install --no-index -e "$src"
untouched "import (editable)" check "$work/editable" "$src"
uninstall "$work/editable"

# 3. the wheel is reproducible: two builds, the same bytes
for n in 1 2; do
    untouched "pip wheel" "$work/regular/bin/pip" wheel --no-index --no-deps -q -w "$work/wheel$n" "$src"
done
cmp "$work"/wheel1/*.whl "$work"/wheel2/*.whl
echo "pip_install: regular and editable installs offline, source tree untouched"
