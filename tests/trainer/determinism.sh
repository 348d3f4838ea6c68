#!/bin/bash
# determinism.sh - a longstraw-train run is the same bits on a rerun and for
# any thread count: two steps (capture in several chunks, rollout, the
# reference kept beside the policy, replay, the full prompt backward, AdamW)
# with OMP_NUM_THREADS=1, 2 and 2 again; the saved checkpoints (weights,
# AdamW moments, step, RNG) must be byte-identical.  A kernel whose
# reduction order followed the thread count, or a run reading uninitialised
# memory, fails it.
#   determinism.sh BUILD_DIR CONFIG|FAMILY    (a family: its tiny config, from the registry)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: determinism.sh BUILD_DIR CONFIG|FAMILY" >&2; exit 2; }
TRAIN=$1/trainer/longstraw-train CONFIG=$2
HERE=$(cd "$(dirname "$0")" && pwd)
[ -f "$CONFIG" ] || CONFIG=$(python3 "$HERE/family_info.py" "$1" "$HERE/../.." "$2" config)
[ -x "$TRAIN" ] || { echo "determinism: $TRAIN: not built" >&2; exit 2; }
W=$(mktemp -d /tmp/ls-determinism.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_WAIT_POLICY=passive
run() { # name threads
  OMP_NUM_THREADS=$2 "$TRAIN" --config "$CONFIG" --prompt-len 1100 --capture-chunk 256 --response-len 12 --group 3 \
    --grad-mode full --lora-init random --steps 2 --seed 11 --quiet --save "$W/$1.ckpt" --out "$W/$1" >/dev/null
}
run t1 1
run t2 2
run t2b 2
rc=0
cmp -s "$W/t2.ckpt" "$W/t2b.ckpt" || { echo "determinism: a rerun with 2 threads wrote another checkpoint" >&2; rc=1; }
cmp -s "$W/t1.ckpt" "$W/t2.ckpt" || { echo "determinism: 1 and 2 threads wrote different checkpoints" >&2; rc=1; }
[ $rc -eq 0 ] && echo "determinism: $(basename "$CONFIG"): 1 thread, 2 threads and a rerun: byte-identical checkpoints ($(stat -c %s "$W/t1.ckpt") bytes)"
exit $rc
