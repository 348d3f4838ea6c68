#!/bin/sh
# pip_install.sh PYTHON TARGET SRC: `pip install ./python` works offline (no build
# isolation, no index, no dependencies fetched) and installs an importable
# longstraw_emit into TARGET, the one imported from outside the source tree.
set -eu
py=$1 target=$2 src=$3
rm -rf "$target"
"$py" -m pip install -q --no-build-isolation --no-deps --no-index --target "$target" "$src"
rm -rf "$src/build" "$src/longstraw_emit.egg-info"   # what setuptools leaves in the source tree
cd /
PYTHONPATH=$target "$py" - "$target" <<'PY'
import sys
import longstraw_emit as le
assert le.__file__.startswith(sys.argv[1]), le.__file__
assert le.jcs({"b": 1, "a": [True, None]}) == '{"a":[true,null],"b":1}'
assert "shards" in le.PATHS and callable(le.gradient_probe)   # the run's path and the probe (torch on call)
print("installed:", le.__file__)
PY
