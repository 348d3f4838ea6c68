#!/bin/bash
# probe.sh - the in-run gradient probe (longstraw-train --probe-every K, docs/train.md) and the audit's
# run.probe (docs/audit.md), on hybrid-tiny and mla-tiny at P = 68, R = 5, G = 3, LoRA from random B:
#  1. fault-free it passes, f64 and f32, one rank and (with MPIEXEC) CP-2, both families; every rank's
#     event the same, each valid against schemas/event-gradient_probe.schema.json; mla in f32 is the
#     exception the probe states: a DSA or MoE decision flips at every step its float32 rounding can
#     resolve, so it is not judged (not_applicable, "not judged") and run.probe does not pass;
#  2. it sees the faults that corrupt the applied gradient: --fault cp-stale-start (the CP prompt
#     backward from a stale start state, a bug this trainer had: 0.2-1.1 off while the loss and the
#     log-probs were right), skip-dkv-reduce, skip-grad-finalize (CP-2, f64): verdict fail, the run
#     completes (exit 0) and its summary says GRADIENT PROBE FAILED; the audit's run.probe fails naming
#     the step, and on skip-grad-finalize that the ranks' probes differ;
#  3. detached: verdict reported, the applied gradient measurably off (rel_error > 1e-2);
#  4. theta restored bit for bit: a probed run's --save checkpoint equals an unprobed run's byte for byte
#     (3 steps; one rank and CP-2, both families) and so does its summary's decision ledger;
#  5. the audit gives every rule but run.probe the same verdict with and without --probe-every 1 (one
#     rank and CP-2, both families); run.probe passes on the probed run, is not applicable on the
#     unprobed one, and fails it with --require-probe;
#  6. --probe-every 2 over 3 steps probes steps 0 and 2 (and run.probe passes); --probe-groups layer has
#     one group per layer; an sft warm-start step, a prefix-frozen step (not_applicable), two prompt
#     groups a step; bad values exit 2.
#   probe.sh BUILD_DIR    (MPIEXEC and MPIRUN_FLAGS in the environment for the CP-2 parts)
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: probe.sh BUILD_DIR" >&2; exit 2; }
B=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$(dirname "$HERE")")
TRAIN=$B/trainer/longstraw-train AUDIT=$B/audit/longstraw-audit
SCHEMA=$SRC/schemas/event-gradient_probe.schema.json
PY="/usr/bin/python3 $HERE/probe_check.py"
[ -x "$TRAIN" ] && [ -x "$AUDIT" ] || { echo "probe: $TRAIN or $AUDIT not built" >&2; exit 2; }
W=$(mktemp -d /tmp/ls-probe.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
rc=0
bad() { echo "probe: FAIL: $*" >&2; rc=1; }
A=(--prompt-len 68 --response-len 5 --group 3 --seed 5 --train-mode lora --lora-init random --quiet)
# T NP FAMILY OUT ARGS...: a run on NP ranks (2 only with MPIEXEC); stdout in OUT.log
T() {
  local np=$1 fam=$2 out=$3
  shift 3
  if [ "$np" = 1 ]; then
    "$TRAIN" --config "$SRC/configs/$fam-tiny.json" "${A[@]}" --out "$out" "$@" >"$out.log" 2>"$out.err"
  else
    # shellcheck disable=SC2086
    $MPIEXEC ${MPIRUN_FLAGS:-} -np "$np" "$TRAIN" --config "$SRC/configs/$fam-tiny.json" "${A[@]}" --out "$out" "$@" \
      >"$out.log" 2>"$out.err"
  fi
}
NPS="1"
if [ -n "${MPIEXEC:-}" ]; then NPS="1 2"; else echo "probe: no MPIEXEC: the CP-2 parts are skipped"; fi

# 1. fault-free: pass (mla f32: not judged, and said why)
for fam in hybrid mla; do
  for dt in f64 f32; do
    for np in $NPS; do
      r=$W/ok-$fam-$dt-$np
      T "$np" $fam "$r" --steps 1 --dtype $dt --grad-mode full --probe-every 1 || { bad "$fam $dt np $np: exit $?: $(tail -2 "$r.err")"; continue; }
      echo "probe: $fam $dt np $np:"
      if [ $fam = mla ] && [ $dt = f32 ]; then
        $PY probes "$r" "$SCHEMA" "pass|not_applicable" 0 || bad "$fam $dt np $np"
        if zstd -dc "$r/rank-0000/events.jsonl.zst" | grep '"ev":"gradient_probe".*"verdict":"not_applicable"' >/dev/null; then
          grep -q "not judged" "$r.log" || bad "$fam $dt np $np: not judged, but the summary does not say why"
          $AUDIT "$r" --json "$r.json" --quiet >/dev/null
          $PY rule "$r.json" run.probe fail "verdict not_applicable" || bad "$fam $dt np $np: run.probe passed a probe that was not judged"
        fi
      else
        max=1e-8
        [ $dt = f32 ] && max=1e-2
        $PY probes "$r" "$SCHEMA" pass 0 --max-rel $max || bad "$fam $dt np $np"
      fi
    done
  done
done

# 2. the faults that corrupt the applied gradient (CP-2, f64)
if [ -n "${MPIEXEC:-}" ]; then
  for f in cp-stale-start skip-dkv-reduce skip-grad-finalize; do
    r=$W/fault-$f
    T 2 hybrid "$r" --steps 1 --dtype f64 --grad-mode full --probe-every 1 --fault $f ||
      bad "--fault $f: the probed run did not complete (exit $?): $(tail -2 "$r.err")"
    echo "probe: hybrid --fault $f (CP-2):"
    if [ $f = cp-stale-start ]; then
      $PY probes "$r" "$SCHEMA" fail 0 --min-rel 0.1 || bad "--fault $f: the probe did not fail"
    else # the ranks' gradients differ: each rank's event its own
      zstd -dc "$r/rank-0000/events.jsonl.zst" | grep '"ev":"gradient_probe".*"verdict":"fail"' >/dev/null ||
        bad "--fault $f: rank 0's probe did not fail"
    fi
    grep -q "GRADIENT PROBE FAILED on 1 of 1" "$r.log" || bad "--fault $f: the summary does not say the probe failed"
    $AUDIT "$r" --json "$r.json" --quiet >/dev/null
    $PY rule "$r.json" run.probe fail "step 0 rank 0: verdict fail: group all" || bad "--fault $f: run.probe did not fail"
    [ $f = skip-grad-finalize ] && { $PY rule "$r.json" run.probe fail "rank 1's gradient_probe differs from rank 0's" ||
      bad "--fault $f: run.probe did not name the ranks' disagreement"; }
  done
fi

# 3. detached: reported, the difference measured
r=$W/detached
T 1 hybrid "$r" --steps 1 --dtype f64 --grad-mode detached --probe-every 1 || bad "detached: exit $?"
echo "probe: hybrid detached:"
$PY probes "$r" "$SCHEMA" reported 0 --min-rel 1e-2 || bad "detached: not reported, or no difference"
grep -q "1 reported; detached: the applied gradient is" "$r.log" || bad "detached: the summary does not report it"

# 4. theta restored bit for bit; 5. the audit alike with and without the probe
for fam in hybrid mla; do
  for np in $NPS; do
    for p in 0 1; do
      T "$np" $fam "$W/save-$fam-$np-$p" --steps 3 --dtype f32 --grad-mode full --probe-every $p \
        --save "$W/save-$fam-$np-$p.ckpt" || bad "$fam np $np probe $p: exit $?"
      $AUDIT "$W/save-$fam-$np-$p" --json "$W/save-$fam-$np-$p.json" --quiet >/dev/null
    done
    if cmp -s "$W/save-$fam-$np-0.ckpt" "$W/save-$fam-$np-1.ckpt"; then
      echo "probe: $fam np $np: the probed run's checkpoint equals the unprobed one's byte for byte"
    else
      bad "$fam np $np: the probed run's checkpoint differs from the unprobed run's"
    fi
    [ "$(grep decisions "$W/save-$fam-$np-0.log")" = "$(grep decisions "$W/save-$fam-$np-1.log")" ] ||
      bad "$fam np $np: the probe changed the run's decision ledger"
    echo -n "probe: $fam np $np audit, unprobed / probed:"
    $PY audits "$W/save-$fam-$np-0.json" "$W/save-$fam-$np-1.json" || bad "$fam np $np: the probe changed an audit verdict"
    $PY rule "$W/save-$fam-$np-0.json" run.probe not_applicable || bad "$fam np $np: run.probe applies to an unprobed run"
    [ $fam = hybrid ] && { $PY rule "$W/save-$fam-$np-1.json" run.probe pass || bad "$fam np $np: run.probe did not pass"; }
    $AUDIT "$W/save-$fam-$np-0" --require-probe --json "$W/req.json" --quiet >/dev/null
    $PY rule "$W/req.json" run.probe fail "--require-probe: the run probed no step" || bad "$fam np $np: --require-probe"
  done
done

# 6. which steps, layer groups, sft, prefix-frozen, two groups a step, bad values
r=$W/every2
T 1 hybrid "$r" --steps 3 --dtype f64 --grad-mode full --probe-every 2 --probe-groups layer || bad "every 2: exit $?"
echo "probe: --probe-every 2 --probe-groups layer, 3 steps:"
$PY probes "$r" "$SCHEMA" pass 0,2 --groups 8 --max-rel 1e-7 || bad "--probe-every 2 --probe-groups layer"
$AUDIT "$r" --json "$r.json" --quiet >/dev/null
$PY rule "$r.json" run.probe pass "2 probed step(s) (every 2)" || bad "--probe-every 2: run.probe"
r=$W/sft
T 1 mla "$r" --steps 2 --sft-steps 1 --dtype f64 --grad-mode full --probe-every 1 || bad "sft: exit $?"
echo "probe: mla, an sft step then a grpo step:"
$PY probes "$r" "$SCHEMA" pass 0,1 --max-rel 1e-7 || bad "an sft step's probe"
r=$W/frozen
T 1 hybrid "$r" --steps 2 --prefix-frozen 2 --dtype f64 --grad-mode detached --probe-every 1 || bad "frozen: exit $?"
echo "probe: prefix-frozen 2 (detached):"
$PY probes "$r" "$SCHEMA" "reported|not_applicable" 0,1 || bad "prefix-frozen"
zstd -dc "$r/rank-0000/events.jsonl.zst" | grep '"ev":"gradient_probe"' | tail -1 |
  grep '"step":1,.*"verdict":"not_applicable","reason":"a prefix-frozen step.*"prefix_frozen":true' >/dev/null ||
  bad "the prefix-frozen step's probe is not not_applicable, marked prefix_frozen"
if [ -n "${MPIEXEC:-}" ]; then
  r=$W/b2
  T 2 mla "$r" --steps 1 --prompts-per-step 2 --dtype f64 --grad-mode full --probe-every 1 || bad "B = 2: exit $?"
  echo "probe: mla CP-2, two prompt groups a step:"
  $PY probes "$r" "$SCHEMA" pass 0 --max-rel 1e-7 || bad "B = 2"
fi
for v in "--probe-every -1" "--probe-every abc" "--probe-every 1000001" "--probe-groups tensor"; do
  # shellcheck disable=SC2086
  "$TRAIN" --config "$SRC/configs/hybrid-tiny.json" --out "$W/badv" $v >/dev/null 2>"$W/badv.err"
  st=$?
  [ $st -eq 2 ] && grep -q -- "${v%% *}" "$W/badv.err" || bad "$v: exit $st: $(cat "$W/badv.err")"
done
[ $rc -eq 0 ] && echo "probe: passed"
exit $rc
