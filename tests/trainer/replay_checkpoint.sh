#!/usr/bin/env bash
# replay_checkpoint.sh BUILD_DIR [SCRATCH] - --replay-checkpoint layer (trainer/model/seg_frame.c): the
# response replay that keeps each layer's input and rebuilds the layer's tape during the backward gives the
# gradients of the taped replay bit for bit (the same operations in the same order; under CP the rebuilt
# layer takes its collectives' results from the forward's memo, trainer/base/coll_memo.h), both families,
# both gradient modes, one rank and CP-2 (when mpirun is found); its branch graph is smaller; the trace
# shows the same collectives and layer events; the run records the decision (options.replay_checkpoint,
# paths.replay) and --replay-checkpoint auto takes "layer" when only that plan fits --memory-budget; and the
# audit binds level 4 only with a parity report whose runs took the run's replay and state tier.
# Each case prints "ok CASE" or "FAIL CASE: why"; exit 1 when any failed.
set -uo pipefail
B=$(cd "${1:?usage: replay_checkpoint.sh BUILD_DIR [SCRATCH]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=${2:-$(mktemp -d /tmp/ls-replayck.XXXXXX)}
mkdir -p "$T"
TRAIN=$B/trainer/longstraw-train
export OMP_NUM_THREADS=1
# shellcheck source=tests/support/case_lib.sh
. "$(dirname "$0")/../support/case_lib.sh" # ok, bad, failed, MPI
# run NAME RANKS ARGS...: a run in $T/NAME with its gradients dumped to $T/NAME.grads
run() {
  local name=$1 np=$2; shift 2
  rm -rf "${T:?}/$name" "$T/$name.grads"
  local pre=()
  [ "$np" = 2 ] && pre=("${MPI[@]}")
  "${pre[@]}" "$TRAIN" --prompt-len 80 --group 3 --response-len 24 --steps 1 --lora-init random --out "$T/$name" \
    --dump-grads "$T/$name.grads" "$@" >"$T/$name.log" 2>&1 ||
    { bad "$name" "longstraw-train failed: $(grep -m 5 -v -e '^-----' -e '^ *$' "$T/$name.log" | head -c 600)"; return 1; }
}
field() { # RUN_DIR PYTHON_EXPR over the rank-0000 receipt r
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/rank-0000/receipt.json'))['predicate']; print($2)" "$1"
}
events() { zstd -dc "$1" | python3 -c "
import json,sys,collections
c=collections.Counter()
for l in sys.stdin:
    e=json.loads(l)
    if e.get('ev') in ('collective','layer_end'): c[(e['ev'],e.get('purpose'),e.get('layer'),e.get('dir'),e.get('phase'))]+=1
print(sorted(c.items()))"; }

for fam in hybrid mla; do
  for gm in detached full; do
    for np in 1 2; do
      [ "$np" = 2 ] && [ ${#MPI[@]} = 0 ] && { echo "skip $fam $gm cp2: no mpirun"; continue; }
      base=$fam-$gm-np$np
      run "$base-none" "$np" --config "$SRC/configs/$fam-tiny.json" --grad-mode "$gm" --replay-checkpoint none || continue
      run "$base-layer" "$np" --config "$SRC/configs/$fam-tiny.json" --grad-mode "$gm" --replay-checkpoint layer || continue
      if cmp -s "$T/$base-none.grads" "$T/$base-layer.grads"; then ok "$base: gradients bit for bit"
      else bad "$base" "the checkpointed replay's gradients differ from the taped replay's"; fi
      bn=$(field "$T/$base-none" "r['memory']['run']['categories']['branch_graph']['peak_bytes']" 2>/dev/null)
      bl=$(field "$T/$base-layer" "r['memory']['run']['categories']['branch_graph']['peak_bytes']" 2>/dev/null)
      if [ -n "$bn" ] && [ -n "$bl" ] && [ "$bl" -lt "$bn" ]; then ok "$base: branch graph $bl < $bn bytes"
      else bad "$base" "branch graph peak not smaller (taped '$bn', checkpointed '$bl')"; fi
      for r in "$T/$base-none"/rank-*; do
        rr=$(basename "$r")
        if [ "$(events "$r/events.jsonl.zst")" = "$(events "$T/$base-layer/$rr/events.jsonl.zst")" ]; then :
        else bad "$base" "$rr: the collectives or layer events differ from the taped replay's"; fi
      done
      p=$(field "$T/$base-layer" "r['config']['paths'].get('replay'), r['config']['options'].get('replay_checkpoint')")
      [ "$p" = "['layer'] layer" ] && ok "$base: recorded $p" || bad "$base" "recorded '$p', want ['layer'] layer"
    done
  done
done
# --replay-checkpoint chunk (trainer/step/replay_chunk.c): in float64, chunks of 7 of a 24-token response (the
# last one shorter) give the taped replay's gradients to rounding, one chunk of 24 gives them bit for bit; the
# trace shows the same layer events (each layer once per branch) and the collectives' kinds (under CP each
# chunk's own); the run records the decision
# kinds EVENTS: every layer_end key with its count, and the collectives' (purpose, layer) without theirs
kinds() { zstd -dc "$1" | python3 -c "
import json,sys,collections
le=collections.Counter(); co=set()
for l in sys.stdin:
    e=json.loads(l)
    if e.get('ev')=='layer_end': le[(e.get('phase'),e.get('member'),e.get('layer'),e.get('dir'))]+=1
    elif e.get('ev')=='collective': co.add((e.get('purpose'),e.get('layer')))
print(sorted(le.items(), key=str)); print(sorted(co, key=str))"; }
for fam in hybrid mla; do
  for gm in detached full; do
    for np in 1 2; do
      [ "$np" = 2 ] && [ ${#MPI[@]} = 0 ] && continue
      base=$fam-$gm-np$np-f64
      run "$base-none" "$np" --config "$SRC/configs/$fam-tiny.json" --grad-mode "$gm" --dtype f64 --replay-checkpoint none || continue
      run "$base-chunk" "$np" --config "$SRC/configs/$fam-tiny.json" --grad-mode "$gm" --dtype f64 --replay-checkpoint chunk \
        --replay-chunk 7 || continue
      run "$base-chunk1" "$np" --config "$SRC/configs/$fam-tiny.json" --grad-mode "$gm" --dtype f64 --replay-checkpoint chunk \
        --replay-chunk 24 || continue
      if d=$(python3 "$SRC/tests/trainer/ep_compare.py" "$T/$base-none.grads" "$T/$base-chunk.grads" --tol=1e-9 2>&1); then
        ok "$base: chunks of 7 equal the taped replay to rounding (${d%%,*})"
      else bad "$base" "the chunked replay's gradients differ from the taped replay's: $(echo "$d" | head -3)"; fi
      if cmp -s "$T/$base-none.grads" "$T/$base-chunk1.grads"; then ok "$base: one chunk, bit for bit"
      else bad "$base" "one chunk's gradients differ from the taped replay's"; fi
      for r in "$T/$base-none"/rank-*; do
        rr=$(basename "$r")
        la=$(kinds "$r/events.jsonl.zst") lb=$(kinds "$T/$base-chunk/$rr/events.jsonl.zst")
        [ "$la" = "$lb" ] && [ -n "$la" ] ||
          bad "$base" "$rr: the chunked replay's layer events or collective kinds differ from the taped replay's"
      done
      p=$(field "$T/$base-chunk" "r['config']['paths'].get('replay'), r['config']['options'].get('replay_checkpoint'), r['config']['options'].get('replay_chunk')")
      [ "$p" = "['chunk'] chunk 7" ] && ok "$base: recorded $p" || bad "$base" "recorded '$p', want ['chunk'] chunk 7"
    done
  done
done
# the chunked replay's branch graph at a long response: below the checkpointed replay's (R 512, chunks of 64)
run long-layer 1 --config "$SRC/configs/hybrid-tiny.json" --grad-mode full --response-len 512 --group 1 --replay-checkpoint layer &&
  run long-chunk 1 --config "$SRC/configs/hybrid-tiny.json" --grad-mode full --response-len 512 --group 1 \
    --replay-checkpoint chunk --replay-chunk 64 && {
  bl=$(field "$T/long-layer" "r['memory']['run']['categories']['branch_graph']['peak_bytes']")
  bc=$(field "$T/long-chunk" "r['memory']['run']['categories']['branch_graph']['peak_bytes']")
  if [ "$bc" -lt "$bl" ]; then ok "R 512: branch graph $bc bytes in chunks of 64, $bl checkpointed per layer"
  else bad long-chunk "branch graph $bc bytes in chunks, not below the checkpointed $bl"; fi; }
# refused: a chunked replay of the naive full sequence, a chunk of 0
for bad_args in "--strategy naive --replay-checkpoint chunk" "--replay-chunk 0"; do
  rm -rf "$T/refused"
  # shellcheck disable=SC2086
  "$TRAIN" --config "$SRC/configs/hybrid-tiny.json" --prompt-len 80 --group 2 --response-len 8 --steps 1 $bad_args \
    --out "$T/refused" >"$T/refused.log" 2>&1
  rc=$?
  if [ $rc = 2 ] && grep -q -e "--replay" "$T/refused.log"; then ok "refused: $bad_args (exit 2, naming the option)"
  else bad refused "$bad_args: exit $rc: $(head -c 300 "$T/refused.log")"; fi
done
# auto: taped when it fits (no budget), layer when only the checkpointed plan fits the budget
run auto-free 1 --config "$SRC/configs/hybrid-tiny.json" --grad-mode full --response-len 256 --group 2 &&
  { p=$(field "$T/auto-free" "r['config']['paths'].get('replay')"); [ "$p" = "['taped']" ] && ok "auto without a budget: taped" || bad auto-free "took $p"; }
budget=$(python3 - "$B" "$SRC" <<'PY'
import json, subprocess, sys
b, src = sys.argv[1], sys.argv[2]
def peak(rc):
    out = subprocess.run([b + "/trainer/longstraw-plan", "--config", src + "/configs/hybrid-tiny.json", "--prompt-len", "80",
                          "--response-len", "256", "--group", "2", "--grad-mode", "full", "--dtype", "f32",
                          "--replay-checkpoint", rc, "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["peak"]["total"]
t, l = peak("none"), peak("layer")
assert l < t, (l, t)
print(int((l * 1.1 + t * 1.1) / 2))  # between the two plans with their 10% margin
PY
) || bad auto-budget "longstraw-plan --replay-checkpoint failed"
if [ -n "${budget:-}" ]; then
  run auto-tight 1 --config "$SRC/configs/hybrid-tiny.json" --grad-mode full --response-len 256 --group 2 --memory-budget "$budget" &&
    { p=$(field "$T/auto-tight" "r['config']['paths'].get('replay')"); [ "$p" = "['layer']" ] && ok "auto under a budget of $budget bytes: layer" || bad auto-tight "took $p"; }
  rm -rf "$T/none-tight"
  "$TRAIN" --config "$SRC/configs/hybrid-tiny.json" --prompt-len 80 --group 2 --response-len 256 --steps 1 --grad-mode full \
    --memory-budget "$budget" --replay-checkpoint none --out "$T/none-tight" >"$T/none-tight.log" 2>&1
  rc=$?
  if [ $rc = 2 ] && grep -q "the memory plan needs" "$T/none-tight.log"; then ok "none under that budget: refused by the plan (exit 2)"
  else bad none-tight "exit $rc: the taped replay ran under a budget only the checkpointed plan fits"; fi
fi
# deny by default: a signed CP-2 run with the replay checkpointed and the state in the host tier reaches
# level 4 with a parity report made --like it (its path runs take both), and stays at level 1 with a report
# made --like a run of the default path (replay taped, state in the device tier)
SIGN=$B/receipts/longstraw-sign PARITY=$B/parity/longstraw-parity AUDIT=$B/audit/longstraw-audit
if [ ${#MPI[@]} -gt 0 ] && [ -x "$PARITY" ] && [ -x "$SIGN" ] && [ -x "$AUDIT" ]; then
  rm -rf "$T/keys" && mkdir -p "$T/keys"
  "$SIGN" keygen --private "$T/keys/k.pem" --public "$T/keys/k.pub" >/dev/null
  like() { # NAME ARGS...: a signed CP-2 run and a parity report --like it
    local name=$1; shift
    rm -rf "$T/$name" "$T/$name.par"
    "${MPI[@]}" "$TRAIN" --config "$SRC/configs/hybrid-tiny.json" --prompt-len 96 --group 3 --response-len 6 --steps 1 \
      --grad-mode full --lora-init random --quiet --out "$T/$name" "$@" >"$T/$name.log" 2>&1 &&
      "$SIGN" sign "$T/$name" --key "$T/keys/k.pem" >/dev/null 2>&1 &&
      "$PARITY" --like "$T/$name" --out "$T/$name.par" --key "$T/keys/k.pem" >"$T/$name.par.log" 2>&1 ||
      { bad "$name" "run, sign or parity --like failed: $(tail -c 400 "$T/$name.par.log" 2>/dev/null)"; return 1; }
  }
  level() { "$AUDIT" "$T/$1" --parity "$T/$2.par/parity.json" --key "$T/keys/k.pub" --parity-key "$T/keys/k.pub" \
              --require-signed --json "$T/$1-$2.json" >/dev/null 2>&1
            python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['level'])" "$T/$1-$2.json"; }
  if like ckhost --replay-checkpoint layer --state-tier host && like plain; then
    l=$(level ckhost ckhost); [ "$l" = 4 ] && ok "checkpointed, host tier, CP-2: level 4 with a report --like it" ||
      bad ckhost "level $l with a report --like it (4 expected)"
    l=$(level ckhost plain)
    if [ "$l" = 1 ] && grep -q '"replay' "$T/ckhost-plain.json" && grep -q 'state_tier' "$T/ckhost-plain.json"; then
      ok "the same run against a report of the default path: level 1, replay and state_tier outside"
    else bad ckhost-plain "level $l against a report that never ran the replay checkpointed or the host tier"; fi
  fi
  # the chunked replay: level 4 only with a report whose path runs replayed in chunks
  if like chunked --replay-checkpoint chunk --replay-chunk 4; then
    l=$(level chunked chunked); [ "$l" = 4 ] && ok "in chunks, CP-2: level 4 with a report --like it" ||
      bad chunked "level $l with a report --like it (4 expected)"
    l=$(level chunked plain)
    if [ "$l" = 1 ] && grep -q '"replay' "$T/chunked-plain.json"; then
      ok "the same run against a report of the default path: level 1, replay outside"
    else bad chunked-plain "level $l against a report that never replayed in chunks"; fi
  fi
fi
exit $failed
