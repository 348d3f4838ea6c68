#!/bin/bash
# grad_cosine.sh - longstraw-train --grad-cosine-every N (docs/train.md, "The gradient cosine"), the family of
# CONFIG at P = 68, R = 5, G = 3, LoRA from random B:
#  1. a measurement, not a change: in both grad modes (f64 and f32) a 3-step run with --grad-cosine-every 2
#     saves the checkpoint of the run without it byte for byte, dumps the same step-1 gradients, and writes
#     the same metrics (every figure but the timings); steps 1 and 3 (run-local 0 and 2) are measured, step
#     2 is not; the same for an sft warm-start step, two prompts per step, a capture in chunks with the
#     replay's layer checkpoints, and a replay in chunks;
#  2. independent: the recorded step-1 cosine and norms (both grad modes; one and two prompts per step)
#     equal those computed in numpy from the --dump-grads files of a detached and a full run of the same
#     step (1e-6 relative); the two gradients differ there (cosine < 0.9999, norms apart), so that a cosine
#     of one gradient with itself fails;
#  3. the measured runs' metrics lines, trace step_metrics events, receipts and manifests pass their schemas, and the audit gives every
#     rule the verdict it gives the run without the option;
#  4. bad values exit 2 naming --grad-cosine-every, and so do --strategy naive and --prefix-frozen with it;
#     with MPIEXEC set, mpirun -np 2 with it exits 2 naming it.
#   grad_cosine.sh BUILD_DIR CONFIG|FAMILY    (a family: its tiny config, from the registry)
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: grad_cosine.sh BUILD_DIR CONFIG|FAMILY" >&2; exit 2; }
B=$(cd "$1" && pwd) CONFIG=$2
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$(dirname "$HERE")")
[ -f "$CONFIG" ] || CONFIG=$(python3 "$HERE/family_info.py" "$B" "$SRC" "$2" config) || exit 2
TRAIN=$B/trainer/longstraw-train AUDIT=$B/audit/longstraw-audit VALIDATE=$B/receipts/longstraw-validate
PY="/usr/bin/python3 $HERE/grad_cosine_check.py"
for x in "$TRAIN" "$AUDIT" "$VALIDATE"; do [ -x "$x" ] || { echo "grad_cosine: $x: not built" >&2; exit 2; }; done
W=$(mktemp -d /tmp/ls-gcos.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fam=$(basename "$CONFIG" .json)
rc=0
bad() { echo "grad_cosine: $fam: FAIL: $*" >&2; rc=1; }
T() { "$TRAIN" --config "$CONFIG" --prompt-len 68 --response-len 5 --group 3 --seed 5 --lora-init random --quiet "$@"; }
# verdicts A.json B.json: every rule's verdict equal
verdicts() {
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import json, sys
v = [{c["id"]: c["verdict"] for lv in json.load(open(p))["levels"] for c in lv["checks"]} for p in sys.argv[1:3]]
diff = sorted(k for k in set(v[0]) | set(v[1]) if v[0].get(k) != v[1].get(k))
print("  audit: %d rules, %s" % (len(v[0]), "every verdict equal" if not diff else
      "differing: " + ", ".join("%s %s/%s" % (k, v[0].get(k), v[1].get(k)) for k in diff)))
sys.exit(1 if diff else 0)
EOF
}
# schemas RUN METRICS: the measured lines, the receipt and the manifest against their schemas
schemas() {
  local n=0
  while IFS= read -r line; do
    n=$((n + 1))
    printf '%s\n' "$line" >"$W/line.json"
    "$VALIDATE" "$SRC/schemas/metrics-line.schema.json" "$W/line.json" >/dev/null 2>"$W/v.err" ||
      bad "$2 line $n against metrics-line.schema.json: $(head -3 "$W/v.err")"
  done <"$2"
  if command -v zstd >/dev/null; then # the trace's step_metrics events, measured or not, against their schema
    zstd -dcq "$1/rank-0000/events.jsonl.zst" | grep '"ev":"step_metrics"' >"$W/sm.jsonl"
    [ "$(grep -c grad_norm_full "$W/sm.jsonl")" = 2 ] || bad "$1: not 2 measured step_metrics events in the trace"
    while IFS= read -r line; do
      printf '%s\n' "$line" >"$W/ev.json"
      "$VALIDATE" "$SRC/schemas/event-step_metrics.schema.json" "$W/ev.json" >/dev/null 2>"$W/v.err" ||
        bad "$1: a step_metrics event against its schema: $(head -3 "$W/v.err")"
    done <"$W/sm.jsonl"
  fi
  "$VALIDATE" "$SRC/schemas/receipt.schema.json" "$1/rank-0000/receipt.json" >/dev/null 2>"$W/v.err" ||
    bad "$1: receipt against its schema: $(head -3 "$W/v.err")"
  "$VALIDATE" "$SRC/schemas/manifest.schema.json" "$1/manifest.json" >/dev/null 2>"$W/v.err" ||
    bad "$1: manifest against its schema: $(head -3 "$W/v.err")"
  /usr/bin/python3 -c "import json,sys; o=json.load(open(sys.argv[1]))['predicate']['config']['options']; sys.exit(0 if o.get('grad_cosine_every')==int(sys.argv[2]) else 1)" \
    "$1/rank-0000/receipt.json" "$3" || bad "$1: the receipt does not record options.grad_cosine_every $3"
}

# 1 and 3: bit for bit with and without the option, the cadence, schemas, the audit
for mode in detached full; do
  for dt in f64 f32; do
    for n in 0 2; do
      T --grad-mode $mode --dtype $dt --steps 3 --grad-cosine-every $n --save "$W/s-$mode-$dt-$n.st" \
        --dump-grads "$W/g-$mode-$dt-$n.st" --metrics "$W/m-$mode-$dt-$n.jsonl" --out "$W/r-$mode-$dt-$n" >/dev/null ||
        bad "$mode $dt --grad-cosine-every $n: exit $?"
    done
    echo "grad_cosine: $fam $mode $dt, without / with --grad-cosine-every 2:"
    cmp -s "$W/s-$mode-$dt-0.st" "$W/s-$mode-$dt-2.st" && cmp -s "$W/g-$mode-$dt-0.st" "$W/g-$mode-$dt-2.st" &&
      echo "  checkpoints after 3 steps and step-1 gradient dumps equal byte for byte" ||
      bad "$mode $dt: the measured run's checkpoint or gradients differ from the run without the option"
    $PY same "$W/m-$mode-$dt-0.jsonl" "$W/m-$mode-$dt-2.jsonl" 2 || bad "$mode $dt: the metrics differ"
  done
  schemas "$W/r-$mode-f64-2" "$W/m-$mode-f64-2.jsonl" 2
  for n in 0 2; do "$AUDIT" "$W/r-$mode-f64-$n" --json "$W/a-$mode-$n.json" --quiet >/dev/null; done
  verdicts "$W/a-$mode-0.json" "$W/a-$mode-2.json" || bad "$mode: the option changed an audit verdict"
done
# an sft warm-start step and two prompts per step, bit for bit
for extra in "--sft-steps 1 --steps 2" "--prompts-per-step 2 --steps 2" \
  "--capture-chunk 24 --replay-checkpoint layer --steps 2" "--replay-checkpoint chunk --replay-chunk 2 --steps 2"; do
  for mode in detached full; do
    tag=$(echo "$extra" | tr -dc 'a-z0-9')-$mode
    for n in 0 1; do
      # shellcheck disable=SC2086
      T --grad-mode $mode --dtype f64 $extra --grad-cosine-every $n --save "$W/x-$tag-$n.st" \
        --metrics "$W/x-$tag-$n.jsonl" --out "$W/x-$tag-$n" >/dev/null || bad "$extra $mode --grad-cosine-every $n: exit $?"
    done
    echo "grad_cosine: $fam $mode $extra, without / with --grad-cosine-every 1:"
    cmp -s "$W/x-$tag-0.st" "$W/x-$tag-1.st" && echo "  checkpoints equal byte for byte" ||
      bad "$extra $mode: the measured run's checkpoint differs"
    $PY same "$W/x-$tag-0.jsonl" "$W/x-$tag-1.jsonl" 1 || bad "$extra $mode: the metrics differ"
  done
done
grep -q '"objective":"sft"' "$W/x-sftsteps1steps2-full-1.jsonl" || bad "the sft step was not an sft step"

# 2. against an independent computation from the two modes' gradient dumps (the runs of part 1, f64)
for mode in detached full; do
  echo "grad_cosine: $fam $mode, recorded step 1 against numpy on the detached and full dumps:"
  $PY independent "$W/g-detached-f64-0.st" "$W/g-full-f64-0.st" "$W/m-$mode-f64-2.jsonl" $mode 1e-6 ||
    bad "$mode: the recorded cosine or norms are not the dumps'"
done
for mode in detached full; do
  T --grad-mode $mode --dtype f64 --prompts-per-step 2 --dump-grads "$W/p2-$mode.st" --out "$W/p2-$mode" >/dev/null ||
    bad "B 2 $mode dump: exit $?"
done
for mode in detached full; do
  echo "grad_cosine: $fam $mode, two prompts per step, against numpy:"
  $PY independent "$W/p2-detached.st" "$W/p2-full.st" "$W/x-promptsperstep2steps2-$mode-1.jsonl" $mode 1e-6 ||
    bad "B 2 $mode: the recorded cosine or norms are not the dumps'"
done

# 4. refusals
refused() { # what ARGS...: exit 2 and --grad-cosine-every named
  local what=$1
  shift
  T --out "$W/bad" "$@" >/dev/null 2>"$W/bad.err"
  local st=$?
  rm -rf "$W/bad"
  [ $st -eq 2 ] && grep -q -- "--grad-cosine-every" "$W/bad.err" && echo "  $what: exit 2: $(head -1 "$W/bad.err")" ||
    bad "$what: exit $st, stderr: $(head -2 "$W/bad.err")"
}
echo "grad_cosine: $fam refusals:"
for v in -1 abc 1.5 " 1" 1e3 99999999 ""; do refused "--grad-cosine-every '$v'" --grad-cosine-every "$v"; done
refused "--strategy naive" --grad-cosine-every 1 --strategy naive
refused "--prefix-frozen 2" --grad-cosine-every 1 --prefix-frozen 2 --steps 2
if [ -n "${MPIEXEC:-}" ]; then
  # shellcheck disable=SC2086
  $MPIEXEC ${MPIRUN_FLAGS:-} -np 2 "$TRAIN" --config "$CONFIG" --prompt-len 68 --response-len 5 --group 3 --quiet \
    --grad-cosine-every 1 --out "$W/cp" >/dev/null 2>"$W/cp.err"
  st=$?
  [ $st -eq 2 ] && grep -q -- "--grad-cosine-every" "$W/cp.err" && echo "  mpirun -np 2: exit 2" ||
    bad "mpirun -np 2 --grad-cosine-every 1: exit $st, stderr: $(head -2 "$W/cp.err")"
else
  echo "  (no MPIEXEC: the CP refusal is not run)"
fi
[ $rc -eq 0 ] && echo "grad_cosine: $fam: PASS"
exit $rc
