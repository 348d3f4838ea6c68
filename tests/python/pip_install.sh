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
# The example (examples/torch_cp beside SRC), run from outside the repository by the regular
# venv's interpreter, makes a CP-2 run with the installed emitter whose build identity equals the
# same run's with SRC on PYTHONPATH (code digested by content); the installed copy edited by one
# comment line gives another identity (the control).
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
# the example (examples/torch_cp, next to SRC) run by the venv's interpreter from outside the
# repository imports the installed emitter, and its run has the build identity of the same run made
# with the emitter on PYTHONPATH: the code by content, wherever it was loaded from
example="$(cd "$src/.." && pwd)/examples/torch_cp/train.py"
if [ -f "$example" ] && "$py" -c "import torch" 2>/dev/null; then
    # WEIGHTS and a batch once; then a CP-2 step under each interpreter, its receipt's build digest to OUT.digest
    (cd "$outside" && OMP_NUM_THREADS=1 PYTHONPATH="$src" "$py" -B "$example" --mode init --seed 3 \
        --out "$work/ex-init" > "$work/ex-init.log" 2>&1) || { echo "FAIL: the example's init: $(tail -3 "$work/ex-init.log")"; exit 1; }
    run_example() { # OUT PYTHON [ENV...]
        out=$1 p=$2
        shift 2
        (cd "$outside" && env OMP_NUM_THREADS=1 "$@" "$p" -B "$example" --mode run --cp 2 --probe-every 0 \
            --weights "$work/ex-init/weights.safetensors" --batch "$work/ex-init/batch.json" \
            --out "$out" > "$out.log" 2>&1) || { echo "FAIL: the example under $p: $(tail -3 "$out.log")"; exit 1; }
        "$py" - "$out" > "$out.digest" <<'PY' || { echo "FAIL: $out: no receipt with a build digest"; exit 1; }
import glob, json, sys
receipts = sorted(glob.glob(sys.argv[1] + "/run/**/receipt*.json", recursive=True))
assert receipts, "no receipt"
digests = {json.load(open(r))["predicate"]["build"]["build_digest"] for r in receipts}
assert len(digests) == 1, digests
print(digests.pop())
PY
    }
    run_example "$work/ex-installed" "$work/regular/bin/python"
    run_example "$work/ex-pythonpath" "$py" PYTHONPATH="$src"
    installed=$(cat "$work/ex-installed.digest") onpath=$(cat "$work/ex-pythonpath.digest")
    if [ -z "$installed" ] || [ "$installed" != "$onpath" ]; then
        echo "FAIL: the example's build identity with the installed emitter ($installed) is not the one with PYTHONPATH ($onpath)"
        exit 1
    fi
    # the control: the installed copy edited (one comment line) is another identity
    echo "# edited" >> "$site/longstraw_emit/__init__.py"
    run_example "$work/ex-edited" "$work/regular/bin/python"
    if [ "$(cat "$work/ex-edited.digest")" = "$installed" ]; then
        echo "FAIL: an edited installed emitter kept the build identity $installed (not digested by content)"
        exit 1
    fi
    echo "example: run with the installed emitter and with PYTHONPATH: one build identity ($installed); edited: another"
fi
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
