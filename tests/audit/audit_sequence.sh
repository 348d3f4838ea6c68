#!/usr/bin/env bash
# audit_sequence.sh BUILD_DIR [SCRATCH] - rule steps.sequence (audit/rules/rank_seq.c,
# docs/audit.md "steps.sequence"): real longstraw-train runs of every kind of
# step pass it, and level 1 as before; copies of them with one fault in a
# trace (tests/audit/audit_sequence_edit.py: seq renumbered, times, counts and every
# digest fixed) are refused by it, its evidence naming rank, file, seq and
# what was out of place.
#
# Each case prints "ok CASE" or "FAIL CASE: why"; exit 1 when any failed.
# Needs python3 and zstd; the CP cases mpirun (skipped without it).
set -uo pipefail
B=$(cd "${1:?usage: audit_sequence.sh BUILD_DIR [SCRATCH]}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
T=${2:-$(mktemp -d /tmp/ls-sequence.XXXXXX)}
mkdir -p "$T"
TRAIN=$B/trainer/longstraw-train
AUDIT=$B/audit/longstraw-audit
EDIT=$HERE/audit_sequence_edit.py
H=$SRC/configs/hybrid-tiny.json
M=$SRC/configs/mla-tiny.json
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# shellcheck source=tests/support/case_lib.sh
. "$(dirname "$0")/../support/case_lib.sh" # ok, bad, failed, MPI

train() { # NAME ARGS...: a run in $T/NAME (P=64, G=2, R=3 unless BASE says otherwise)
  local name=$1; shift
  rm -rf "${T:?}/$name"
  # shellcheck disable=SC2086 # BASE is words
  "$TRAIN" ${BASE---prompt-len 64 --group 2 --response-len 3} --quiet --out "$T/$name" "$@" >"$T/$name.log" 2>&1 ||
    bad "$name" "longstraw-train failed: $(tail -c 300 "$T/$name.log")"
}
train2() { # NAME ARGS...: a CP-2 run
  local name=$1; shift
  rm -rf "${T:?}/$name"
  "${MPI[@]}" "$TRAIN" --prompt-len 64 --group 2 --response-len 3 --quiet --out "$T/$name" "$@" >"$T/$name.log" 2>&1 ||
    bad "$name" "longstraw-train under mpirun failed (what the ranks said first, then mpirun's end): $(grep -m 8 -v -e '^-----' -e '^ *$' "$T/$name.log" | head -c 600) ... $(tail -c 200 "$T/$name.log")"
}

# verdict RUN_JSON: "LEVEL PASS|FAIL MESSAGE" of steps.sequence, LEVEL the run's; without: the level the
# report's other rules prove (the level had steps.sequence not been a rule); evidence RUN_JSON TEXT SEQ RANK: 0 when one of its
# evidence items holds TEXT (* any characters) at SEQ (-2: any) on RANK's trace
verdict() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = [c for lv in d["levels"] for c in lv["checks"] if c["id"] == "steps.sequence"]
print(d["level"], ("PASS" if r and r[0]["pass"] else "FAIL"), r[0]["message"] if r else "(no rule)")
PY
}
without() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
level = 0
for lv in sorted(d["levels"], key=lambda x: x["level"]):
    if any(c["applicable"] and not c["pass"] and c["id"] != "steps.sequence" for c in lv["checks"]):
        break
    level = lv["level"]
print(level)
PY
}
evidence() {
  python3 - "$@" <<'PY'
import fnmatch, json, sys
d = json.load(open(sys.argv[1]))
text, seq, rank = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = [c for lv in d["levels"] for c in lv["checks"] if c["id"] == "steps.sequence"][0]
for e in r["evidence"]:
    if fnmatch.fnmatchcase(e["detail"], "*" + text + "*") and seq in (-2, e.get("seq")) and e.get("rank") == rank and \
            e.get("file") == "rank-%04d/events.jsonl.zst" % rank:
        sys.exit(0)
print("; ".join("rank %s seq %s: %s" % (e.get("rank"), e.get("seq"), e["detail"]) for e in r["evidence"]) or r["message"])
sys.exit(1)
PY
}

# honest NAME: the run passes steps.sequence, and its level is the one its other rules prove (the rule
# changes no honest run's level; without a parity report: 1)
honest() {
  local name=$1
  [ -d "$T/$name" ] || return
  "$AUDIT" "$T/$name" --json "$T/$name.json" >"$T/$name.audit" 2>&1
  local rc=$? v w
  v=$(verdict "$T/$name.json")
  w=$(without "$T/$name.json")
  if [[ "$v" == "$w PASS "* ]] && { [ "$w" = 0 ] || [ $rc = 0 ]; }; then ok "honest $name: level $v"
  else bad "honest $name" "exit $rc, level $w without the rule, level/verdict: $v"; fi
}

# fault NAME FROM RANK STEP TEXT EDIT...: a copy of FROM with EDIT on RANK's STEP is refused by
# steps.sequence with TEXT at the seq the edit reports (TEXT may hold @ for that seq, @1 for it minus one;
# with NOSEQ=1 the evidence's seq is another event's, named in TEXT)
fault() {
  local name=$1 from=$2 rank=$3 step=$4 text=$5
  shift 5
  [ -d "$T/$from" ] || return
  rm -rf "${T:?}/$name"
  cp -r "$T/$from" "$T/$name"
  local at
  at=$(python3 "$EDIT" "$T/$name" "$rank" "$step" "$@") || { bad "$name" "the edit failed"; return; }
  text=${text//@1/$((at - 1))}
  text=${text//@/$at}
  "$AUDIT" "$T/$name" --json "$T/$name.json" >"$T/$name.audit" 2>&1
  local rc=$? v why
  v=$(verdict "$T/$name.json")
  if [ $rc != 1 ] || [[ "$v" != 0\ FAIL* ]]; then bad "$name" "exit $rc, level/verdict: $v"; return; fi
  if why=$(evidence "$T/$name.json" "$text" "$([ "${NOSEQ:-0}" = 1 ] && echo -2 || echo "$at")" "$rank"); then
    ok "$name: $text"
  else bad "$name" "no evidence '$text' at seq $at on rank $rank: $why"; fi
}

# ---- every kind of step, honest ----------------------------------------------------------------
train grpo --config "$H" --steps 2                                   # rollout, the reference kept
train full --config "$H" --steps 1 --grad-mode full
train recapture --config "$H" --steps 1 --grad-mode full --keep-reference off
train beta0 --config "$H" --steps 1 --beta 0
train naive --config "$H" --steps 1 --strategy naive --grad-mode full
train sft --config "$H" --steps 2 --objective sft --grad-mode full
train sftsteps --config "$H" --steps 3 --sft-steps 1
train frozen --config "$H" --steps 3 --prefix-frozen 2
train groups --config "$H" --steps 2 --prompts-per-step 2 --grad-mode full
train probed --config "$H" --steps 2 --grad-mode full --dtype f64 --lora-init random --probe-every 2
train chunks --config "$H" --steps 1 --prompt-len 200 --capture-chunk 64 # the capture in segments
python3 - >"$T/rollouts.jsonl" <<'PY'
import json
print(json.dumps({"prompt": list(range(1, 40)), "responses": [[5, 6, 7], [8, 9]], "rewards": [1.0, 0.0]}))
print(json.dumps({"prompt": list(range(2, 41)), "responses": [[3, 4], [5, 6, 7]], "rewards": [0.0, 1.0],
                  "old_logprobs": [[-1.5, -2.0], [-1.0, -2.5, -3.0]]}))
print(json.dumps({"prompt": list(range(3, 42)), "responses": [[4], [6, 7]], "rewards": [0.5, 0.0],
                  "ref_logprobs": [[-1.5], [-1.0, -2.5]]}))
PY
# given responses; line 2 its old log-probs (no old scoring), line 3 its reference's (no reference capture)
BASE="" train rollouts --config "$H" --grad-mode full --rollouts "$T/rollouts.jsonl"
python3 - >"$T/rollouts-both.jsonl" <<'PY'
import json
for i in range(2):
    print(json.dumps({"prompt": list(range(2 + i, 41 + i)), "responses": [[3, 4], [5, 6, 7]], "rewards": [0.0, 1.0],
                      "old_logprobs": [[-1.5, -2.0], [-1.0, -2.5, -3.0]],
                      "ref_logprobs": [[-1.4, -2.1], [-1.1, -2.4, -3.1]]}))
PY
# every line with its old and its reference log-probs: no step scores anything (the plan's score yields to
# the grammar, whose every score item the recorded paths rule out)
BASE="" train rollouts-both --config "$H" --grad-mode full --rollouts "$T/rollouts-both.jsonl"
train save --config "$H" --steps 1 --save "$T/ck.safetensors"
train resumed --config "$H" --steps 2 --resume "$T/ck.safetensors"  # first_step 1
train mla --config "$M" --steps 1 --grad-mode full
if [ ${#MPI[@]} -gt 0 ]; then
  train2 cp2 --config "$H" --steps 2 --grad-mode full --prompts-per-step 2
  train2 cp2sft --config "$M" --steps 2 --sft-steps 1
fi
# a v2 trainer's runs (examples/torch_cp, profiles/torch-cp.json), with a Python that has torch
TP=${LS_TORCH_PYTHON:-/usr/bin/python3}
TORCH=0
if "$TP" -c "import torch, zstandard" 2>/dev/null; then
  TORCH=1
  tcp() { # NAME ARGS...: a torch_cp CP-2 run's run directory in $T/NAME
    local name=$1; shift
    rm -rf "${T:?}/$name.out" "${T:?}/$name"
    PYTHONPATH=$SRC/python "$TP" "$SRC/examples/torch_cp/train.py" --mode run --cp 2 --weights "$T/tcp-init/weights.safetensors" \
      --out "$T/$name.out" "$@" >"$T/$name.log" 2>&1 && mv "$T/$name.out/run" "$T/$name" ||
      bad "$name" "torch_cp failed: $(tail -c 300 "$T/$name.log")"
  }
  PYTHONPATH=$SRC/python "$TP" "$SRC/examples/torch_cp/train.py" --mode init --seed 5 --out "$T/tcp-init" >/dev/null 2>&1
  tcp torch-full --grad-mode full
  tcp torch-detached --grad-mode detached
else
  echo "skip the torch_cp runs: $TP lacks torch or zstandard"
fi
for r in grpo full recapture beta0 naive sft sftsteps frozen groups probed chunks rollouts rollouts-both resumed mla \
  cp2 cp2sft torch-full torch-detached; do
  honest $r
done

# ---- faults, each refused by steps.sequence ----------------------------------------------------------
# the optimizer moved before the backward (prompt_bwd in full mode, else the replay)
fault opt-before-bwd full 0 0 "step 0: phase optimizer (seq @) before prompt_bwd" move-optimizer
fault opt-before-replay grpo 0 1 "step 1: phase optimizer (seq @) before replay" move-optimizer
# a replay occurrence duplicated, every layer event of it with it
fault replay-twice full 0 0 "step 0: replay begun twice (seq *, seq @)" dup-phase replay
fault replay-twice-group groups 0 1 "replay begun twice in prompt group 1" dup-phase replay 2
# one layer_end duplicated
fault layer-twice full 0 0 "step 0: layer_end replay member 0 layer 3 bwd twice in one replay (seq @1, seq @)" \
  dup-layer replay 0 3 bwd
fault layer-sft sft 0 1 "step 1: layer_end replay member 0 layer 3 bwd 3 times in one replay, 2 expected" \
  dup-layer replay 0 3 bwd
NOSEQ=1 fault layer-capture chunks 0 0 "step 0: capture (seq 0) shows its layer events unevenly: 37 over 9 layer keys" \
  dup-layer capture -1 2 fwd
# a phase dropped
fault no-ref-score full 0 0 "step 0: phase replay (seq @) before score" drop-phase score 2
fault no-finalize grpo 0 1 "step 1: phase optimizer (seq @) before finalize" drop-phase finalize
NOSEQ=1 fault no-optimizer grpo 0 0 "step 0: ended without optimizer after finalize" drop-phase optimizer
fault no-group-rollout groups 0 0 "step 0: phase score (seq @) before rollout" drop-phase rollout 2
# two phases swapped
fault rollout-score full 0 0 "step 0: phase score (seq @) before rollout" swap rollout score
fault replay-bwd full 0 0 "step 0: phase prompt_bwd (seq @) before replay" swap replay prompt_bwd
fault frozen-swap frozen 0 1 "step 1: phase score (seq @) before rollout" swap rollout score
# events out of their phases
fault layer-out full 0 0 "outside its phase (no phase open)" layer-out replay 1 2 fwd
fault optimizer-out grpo 0 1 "step 1: optimizer_step (seq @) outside phase optimizer" optimizer-out
fault nested full 0 0 "step 0: phase rollout (seq @) begun inside phase capture" nest capture rollout
if [ ${#MPI[@]} -gt 0 ]; then
  fault cp2-opt cp2 1 1 "step 1: phase optimizer (seq @) before prompt_bwd" move-optimizer
  fault cp2-replay cp2sft 1 1 "step 1: replay begun twice" dup-phase replay
fi
if [ $TORCH = 1 ]; then
  fault torch-opt torch-full 1 0 "step 0: phase optimizer (seq @) before prompt_bwd" move-optimizer
  fault torch-score torch-detached 0 0 "step 0: score begun twice (seq *, seq @)" dup-phase score
  fault torch-swap torch-full 0 0 "step 0: phase rollout (seq 0) before capture" swap capture rollout
fi
[ $failed = 0 ] && echo "audit_sequence: every honest kind of step passes, every fault refused"
exit $failed
