#!/bin/sh
# End-to-end reference check of the hybrid family (ctest hybrid_reference).
#   run_hybrid_ref.sh SRC_DIR BUILD_DIR [TRAINER]
# Finds a python3 and runs tests/reference/run_hybrid_ref.py, which drives
# longstraw-train (float64, P = 173 over pages of 16 and capture chunks of 40, supplied
# old log-probs far from the policy's, random LoRA-B) and checks every run against the
# pure-Python docs/model.md implementation in hybrid_ref.py.
# Exit: 0 every check ran and agrees, 1 a mismatch or a skipped check, 2 bad usage or a
# trainer failure.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 SRC_DIR BUILD_DIR [TRAINER]" >&2
  exit 2
fi
SRC=$1
BUILD=$2
TRAIN=${3:-$BUILD/trainer/longstraw-train}
if [ -x /usr/bin/python3 ]; then
  PY=/usr/bin/python3
elif command -v python3 >/dev/null 2>&1; then
  PY=$(command -v python3)
else
  echo "run_hybrid_ref: no python3" >&2
  exit 2
fi
exec "$PY" "$SRC/tests/reference/run_hybrid_ref.py" "$SRC" "$TRAIN"
