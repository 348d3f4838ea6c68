#!/bin/bash
# prompts_per_step.sh - longstraw-train --prompts-per-step B (docs/train.md, docs/model.md §4):
#  1. gradients: the B = 2 step's finalized gradients equal the mean of two single-group steps' on the same
#     two groups (rollouts lines, so that every group is the same in both), f64, both grad modes, the
#     family of CONFIG; max relative error against the set's largest value at most 1e-10;
#  2. --rollouts with B = 2: a 4-line file is 2 steps; a 3-line file is refused naming the file, a 3-line
#     stream stops at its second step naming its last line;
#  3. bad values of --prompts-per-step exit 2 naming the option; --prefix-frozen with B > 1 is refused;
#  4. memory flat in B: the receipt's measured per-step peak of B = 4 within 5% of B = 1's;
#  5. with MPIEXEC set (and MPIRUN_FLAGS): the same memory check under mpirun -np 2, and the CP-2 B = 2
#     run's step-1 gradients and parameters after 2 steps equal the one-rank B = 2 run's (f64, 1e-10).
#   prompts_per_step.sh BUILD_DIR CONFIG
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: prompts_per_step.sh BUILD_DIR CONFIG" >&2; exit 2; }
TRAIN=$1/trainer/longstraw-train CONFIG=$2
HERE=$(cd "$(dirname "$0")" && pwd)
PY="/usr/bin/python3 $HERE/prompts_per_step_check.py"
[ -x "$TRAIN" ] || { echo "prompts_per_step: $TRAIN: not built" >&2; exit 2; }
W=$(mktemp -d /tmp/ls-pps.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fam=$(basename "$CONFIG" .json)
rc=0
bad() { echo "prompts_per_step: $fam: $*" >&2; rc=1; }
T() { "$TRAIN" --config "$CONFIG" --dtype f64 --train-mode full --quiet "$@"; }

# 1. gradients: B = 2 against the mean of two B = 1 steps
$PY rollouts "$W/both.jsonl" 2 7
head -n 1 "$W/both.jsonl" >"$W/l1.jsonl"
tail -n 1 "$W/both.jsonl" >"$W/l2.jsonl"
for mode in detached full; do
  T --grad-mode $mode --rollouts "$W/both.jsonl" --prompts-per-step 2 --dump-grads "$W/g2-$mode.st" --out "$W/b2-$mode" >/dev/null
  T --grad-mode $mode --rollouts "$W/l1.jsonl" --dump-grads "$W/ga-$mode.st" --out "$W/a-$mode" >/dev/null
  T --grad-mode $mode --rollouts "$W/l2.jsonl" --dump-grads "$W/gb-$mode.st" --out "$W/b-$mode" >/dev/null
  echo -n "prompts_per_step: $fam $mode: "
  $PY mean2 "$W/g2-$mode.st" "$W/ga-$mode.st" "$W/gb-$mode.st" 1e-10 || bad "$mode: B = 2 gradients are not the mean of the two groups'"
done

# 2. --rollouts: B lines a step
$PY rollouts "$W/four.jsonl" 4 8
head -n 3 "$W/four.jsonl" >"$W/three.jsonl"
T --rollouts "$W/four.jsonl" --prompts-per-step 2 --out "$W/r4" >/dev/null
steps=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['predicate']['steps'])" "$W/r4/rank-0000/receipt.json")
[ "$steps" = 2 ] || bad "a 4-line rollouts file with --prompts-per-step 2 ran $steps step(s), not 2"
set +e
T --rollouts "$W/three.jsonl" --prompts-per-step 2 --out "$W/r3" >/dev/null 2>"$W/r3.err"
st=$?
set -e
[ $st -eq 2 ] && grep -q "three.jsonl" "$W/r3.err" && grep -q "multiple of --prompts-per-step 2" "$W/r3.err" ||
  bad "a 3-line file with --prompts-per-step 2: exit $st, stderr: $(cat "$W/r3.err")"
set +e
T --rollouts - --prompts-per-step 2 --out "$W/r3s" <"$W/three.jsonl" >/dev/null 2>"$W/r3s.err"
st=$?
set -e
[ $st -eq 2 ] && grep -q -- "-: line 3: the input ended inside a step" "$W/r3s.err" ||
  bad "a 3-line stream with --prompts-per-step 2: exit $st, stderr: $(cat "$W/r3s.err")"

# 3. bad values
for v in 0 abc 99999 -1; do
  set +e
  T --prompts-per-step "$v" --out "$W/bad" >/dev/null 2>"$W/bad.err"
  st=$?
  set -e
  [ $st -eq 2 ] && grep -q -- "--prompts-per-step: '$v'" "$W/bad.err" || bad "--prompts-per-step $v: exit $st: $(cat "$W/bad.err")"
done
set +e
T --prompts-per-step 2 --prefix-frozen 2 --out "$W/bad" >/dev/null 2>"$W/bad.err"
st=$?
set -e
[ $st -eq 2 ] && grep -q -- "--prompts-per-step: not with --prefix-frozen" "$W/bad.err" || bad "B = 2 with --prefix-frozen: exit $st"

# 4. (and 5.) memory flat in B
flat() { # label run1 run4
  local p1 p4
  p1=$($PY peak "$2") p4=$($PY peak "$3")
  echo "prompts_per_step: $fam $1: per-step peak B=1 $p1 bytes, B=4 $p4 bytes"
  /usr/bin/python3 -c "import sys; a,b=int(sys.argv[1]),int(sys.argv[2]); sys.exit(0 if abs(b-a) <= 0.05*a else 1)" "$p1" "$p4" ||
    bad "$1: the per-step peak grows with B: $p1 -> $p4 bytes"
}
M=(--prompt-len 512 --response-len 4 --group 2 --grad-mode full --steps 1)
T "${M[@]}" --out "$W/m1" >/dev/null
T "${M[@]}" --prompts-per-step 4 --out "$W/m4" >/dev/null
flat "one rank" "$W/m1" "$W/m4"
if [ -n "${MPIEXEC:-}" ]; then
  # shellcheck disable=SC2086
  MP="$MPIEXEC ${MPIRUN_FLAGS:-} -np 2"
  # shellcheck disable=SC2086
  $MP "$TRAIN" --config "$CONFIG" --dtype f64 --train-mode full --quiet "${M[@]}" --out "$W/c1" >/dev/null
  # shellcheck disable=SC2086
  $MP "$TRAIN" --config "$CONFIG" --dtype f64 --train-mode full --quiet "${M[@]}" --prompts-per-step 4 --out "$W/c4" >/dev/null
  flat "mpirun -np 2" "$W/c1" "$W/c4"
  # the CP comparison on rollouts lines (rewards that differ within a group: gradients that are not zero)
  C=(--rollouts "$W/four.jsonl" --grad-mode full --prompts-per-step 2)
  T "${C[@]}" --dump-grads "$W/s.grads" --save "$W/s.ckpt" --out "$W/s" >/dev/null
  # shellcheck disable=SC2086
  $MP "$TRAIN" --config "$CONFIG" --dtype f64 --train-mode full --quiet "${C[@]}" --dump-grads "$W/p.grads" \
    --save "$W/p.ckpt" --out "$W/p" >/dev/null
  echo -n "prompts_per_step: $fam CP-2 B=2 step-1 gradients vs one rank: "
  $PY same "$W/p.grads" "$W/s.grads" 1e-10 || bad "CP-2 B = 2 gradients differ from one rank's"
  echo -n "prompts_per_step: $fam CP-2 B=2 after 2 steps vs one rank: "
  $PY same "$W/p.ckpt" "$W/s.ckpt" 1e-10 || bad "CP-2 B = 2 parameters differ from one rank's"
fi
[ $rc -eq 0 ] && echo "prompts_per_step: $fam: passed"
exit $rc
