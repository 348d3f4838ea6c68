#!/bin/bash
# cp_paths.sh - CP-2 against one rank on the trainer's own paths (responses sampled, old and reference log-probs
# computed by the trainer), f64, LoRA with random B so that the policy differs from the reference policy:
#  1. per path, the step's finalized gradients (--dump-grads) of `mpirun -np 2` equal the one-rank run's
#     (every tensor within 1e-10 of its own largest value): the reference kept beside the policy's state
#     (--keep-reference on), recaptured (off), two prompt groups a step with the reference kept, and the
#     detached mode; P - 1 = 67 captured positions split 33|34 (uneven), pages of 8 and capture chunks of 12
#     that the shard boundary at 33 cuts; the receipt must say the reference was kept / recaptured;
#  2. 4 steps from zero LoRA B at lr 0.05 with the default --keep-reference auto (kept): the checkpoints equal
#     (1e-8 relative: AdamW amplifies rounding near eps);
#  3. the negative controls: each CP fault the family's registry entry declares (cp_faults: cp-stale-start, the
#     bug this test was written for: the prompt backward started from the reference's shard start state when
#     the reference was kept, every tensor 0.2-1.1 off; cp-local-attention, cp-local-dsa), injected at CP-2
#     on the kept path, must make check 1 fail.
# Every registered family runs it (tests/trainer/train_cp.cmake loops over the registry; the family's tiny
# config and CP faults are read from it by family_info.py).
# The comparison is CP-N against one rank of the same trainer: a different composition of the same math
# (sharded capture with ring attention and GDN state chains, vs one sequential pass), not an independent
# implementation; parity --like adds the independent reference on these paths.
#   cp_paths.sh BUILD_DIR FAMILY      (MPIEXEC and MPIRUN_FLAGS from the environment)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: cp_paths.sh BUILD_DIR FAMILY" >&2; exit 2; }
TRAIN=$1/trainer/longstraw-train fam=$2
HERE=$(cd "$(dirname "$0")" && pwd)
CONFIG=$(python3 "$HERE/family_info.py" "$1" "$HERE/../.." "$fam" config)
mapfile -t FAULTS < <(python3 "$HERE/family_info.py" "$1" "$HERE/../.." "$fam" cp-faults)
PY="/usr/bin/python3 $HERE/cp_paths_check.py"
[ -x "$TRAIN" ] || { echo "cp_paths: $TRAIN: not built" >&2; exit 2; }
[ -n "${MPIEXEC:-}" ] || { echo "cp_paths: MPIEXEC not set" >&2; exit 2; }
W=$(mktemp -d /tmp/ls-cpp.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
rc=0
bad() { echo "cp_paths: $fam: $*" >&2; rc=1; }
COMMON=(--config "$CONFIG" --prompt-len 68 --response-len 5 --group 3 --seed 5 --dtype f64 --train-mode lora
        --page-size 8 --capture-chunk 12 --quiet)
run() { # run NAME NP ARGS...: a run into $W/NAME-npN, its gradients in $W/NAME-npN.st
  local name=$1 np=$2
  shift 2
  $MPIEXEC ${MPIRUN_FLAGS:-} -np "$np" "$TRAIN" "${COMMON[@]}" "$@" --out "$W/$name-np$np" \
    --dump-grads "$W/$name-np$np.st" >"$W/$name-np$np.log" 2>&1 || { bad "$name at -np $np failed: $(tail -3 "$W/$name-np$np.log")"; return 1; }
}
path() { # path NAME WANT_REFERENCE ARGS...: CP-2 against one rank
  local name=$1 want=$2
  shift 2
  run "$name" 1 "$@" && run "$name" 2 "$@" || return 0
  local got
  got=$($PY reference "$W/$name-np2")
  [ "$got" = "$want" ] || bad "$name: the reference was $got, the path wants $want"
  echo -n "cp_paths: $fam $name: "
  $PY grads "$W/$name-np2.st" "$W/$name-np1.st" 1e-10 || bad "$name: CP-2 gradients differ from one rank's"
}
path kept kept --steps 1 --grad-mode full --lora-init random --keep-reference on
path recaptured recaptured --steps 1 --grad-mode full --lora-init random --keep-reference off
path groups2 kept --steps 1 --grad-mode full --lora-init random --keep-reference on --prompts-per-step 2
path detached kept --steps 1 --grad-mode detached --lora-init random --keep-reference on

# 2. four steps from zero LoRA B, the reference kept by the plan
for np in 1 2; do
  $MPIEXEC ${MPIRUN_FLAGS:-} -np $np "$TRAIN" "${COMMON[@]}" --steps 4 --lr 0.05 --grad-mode full --lora-init zero \
    --out "$W/steps4-np$np" --save "$W/steps4-np$np.st" >"$W/steps4-np$np.log" 2>&1 || bad "4 steps at -np $np failed"
done
if [ -f "$W/steps4-np2.st" ] && [ -f "$W/steps4-np1.st" ]; then
  [ "$($PY reference "$W/steps4-np2")" = kept ] || bad "4 steps: the plan did not keep the reference"
  echo -n "cp_paths: $fam 4 steps, checkpoint: "
  $PY grads "$W/steps4-np2.st" "$W/steps4-np1.st" 1e-8 || bad "4 steps: the CP-2 checkpoint differs from one rank's"
fi

# 3. the negative controls: each CP fault the family declares (its registry entry's cp_faults), the bug
# re-introduced, must be seen
for fault in "${FAULTS[@]}"; do
  run "$fault" 2 --steps 1 --grad-mode full --lora-init random --keep-reference on --fault "$fault" || true
  if [ -f "$W/$fault-np2.st" ] && [ -f "$W/kept-np1.st" ]; then
    echo -n "cp_paths: $fam $fault (must differ): "
    if $PY grads "$W/$fault-np2.st" "$W/kept-np1.st" 1e-10; then bad "$fault was not seen"; fi
  else
    bad "$fault: no gradients to compare"
  fi
done
[ ${#FAULTS[@]} -gt 0 ] || bad "the registry lists no CP fault for the family: no negative control"
exit $rc
