#!/bin/bash
# ep_audit.sh - the audit of an expert-parallel run (issue 38; docs/audit.md,
# "Expert parallelism"): signed CP-1 x EP-2 and CP-2 x EP-2 runs of the mla
# family, detached and full, reach level 1 with every rule an EP-1 CP-2 run
# of the same mode passes, and the report's header names the grid; a copy of
# the CP-2 x EP-2 run whose traces lack every moe_dx (the experts' input
# gradients, profiles/mla.json collectives.dkv) or ep_grad_gather
# (collectives.finalize) collective, everything else fixed as an adversary
# would (tests/trainer/ep_audit_edit.py), is refused by the rule that requires it;
# a copy whose CP-index-1 EP group disagrees on its shard fails sources.agree.
# usage: ep_audit.sh BUILD_DIR SOURCE_DIR MPIEXEC "MPIRUN_FLAGS"
set -u
B=$1; SRC=$2; MPIEXEC=$3; FLAGS=$4
TRAIN=$B/trainer/longstraw-train SIGN=$B/receipts/longstraw-sign AUDIT=$B/audit/longstraw-audit
T=$(mktemp -d /tmp/ls-epaudit-XXXXXX)
trap 'rm -rf "$T"' EXIT
failed=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $1: $2"; failed=1; }
"$SIGN" keygen --private "$T/k.pem" --public "$T/k.pub" >/dev/null || { echo "keygen failed"; exit 1; }
run() { # NAME NP MODE [options...]: a signed run
  local name=$1 np=$2 mode=$3; shift 3
  # shellcheck disable=SC2086
  "$MPIEXEC" $FLAGS -np "$np" "$TRAIN" --config "$SRC/configs/mla-tiny.json" --prompt-len 64 --group 2 \
    --response-len 3 --steps 1 --grad-mode "$mode" --lora-init random --quiet --out "$T/$name" "$@" \
    >"$T/$name.log" 2>&1 && "$SIGN" sign "$T/$name" --key "$T/k.pem" >/dev/null 2>&1 ||
    { bad "$name" "run or sign failed: $(tail -c 400 "$T/$name.log")"; return 1; }
}
audit() { # NAME: the audit's text report in NAME.txt, its JSON in NAME.json, the level printed
  "$AUDIT" "$T/$1" --key "$T/k.pub" --require-signed --json "$T/$1.json" >"$T/$1.txt" 2>&1
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['level'])" "$T/$1.json" 2>/dev/null || echo none
}
verdicts() { # NAME: "id verdict" per rule
  python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for L in d['levels']:
    for c in L['checks']: print(c['id'], c['verdict'])" "$T/$1.json"
}
# every rule the EP-1 run passes, the EP run passes (its not-applicable ones may apply: they must pass)
same_passes() { # EP1 EP
  local miss
  miss=$(join <(verdicts "$1" | awk '$2=="pass"' | sort) <(verdicts "$2" | sort) | awk '$3!="pass"{print $1" "$3}')
  [ -z "$miss" ] || { bad "$2" "rules the EP-1 run $1 passes, not passed: $miss"; return 1; }
}
for mode in full detached; do
  run ep1-$mode 2 $mode || continue
  l=$(audit ep1-$mode); [ "$l" = 1 ] || bad ep1-$mode "EP-1 CP-2: level $l (1 expected)"
  grep -q "grid CP" "$T/ep1-$mode.txt" && bad ep1-$mode "an EP-1 run's header names a grid"
  for g in "1 2" "2 2"; do
    set -- $g
    name=cp$1-ep$2-$mode
    run "$name" $(($1 * $2)) $mode --ep "$2" || continue
    l=$(audit "$name")
    if [ "$l" = 1 ] && same_passes ep1-$mode "$name" && grep -q "grid CP-$1 x EP-$2" "$T/$name.txt"; then
      ok "CP-$1 x EP-$2 $mode, signed: level 1, every rule the EP-1 run passes, the grid in the header"
    else bad "$name" "level $l (1 expected) or the header names no grid: $(grep -E 'FAIL L1|world' "$T/$name.txt" | head -3)"; fi
  done
done
# the edited copies of the signed CP-2 x EP-2 full run (no longer signed: audited unsigned, as the honest one)
unsigned() { # NAME RULE: RULE's verdict in an unsigned audit of NAME
  "$AUDIT" "$T/$1" --json "$T/$1.u.json" >"$T/$1.u.txt" 2>&1
  python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
print([c['verdict'] for L in d['levels'] for c in L['checks'] if c['id']==sys.argv[2]][0])" "$T/$1.u.json" "$2"
}
if [ -d "$T/cp2-ep2-full" ]; then
  rm -f "$T/cp2-ep2-full/manifest.dsse.json"
  for rule in collectives.dkv collectives.finalize collectives.composition sources.agree; do
    v=$(unsigned cp2-ep2-full $rule); [ "$v" = pass ] || bad honest "the honest run's $rule: $v"
  done
  for e in "moe_dx collectives.dkv" "ep_grad_gather collectives.finalize" "ep_param_gather collectives.finalize"; do
    set -- $e
    rm -rf "$T/no-$1"; cp -r "$T/cp2-ep2-full" "$T/no-$1"
    n=$(python3 "$SRC/tests/trainer/ep_audit_edit.py" "$T/no-$1" "$1")
    v=$(unsigned no-$1 "$2")
    if [ "$n" -gt 0 ] && [ "$v" = fail ] && grep -q "$2.*$1" "$T/no-$1.u.txt" &&
       [ "$(unsigned no-$1 collectives.match)" = pass ]; then
      ok "a copy without its $n $1 collective(s), the ranks still matched: $2 fails naming $1"
    else bad "no-$1" "removed $n; $2: $v"; fi
  done
  # the EP group of CP index 1 (ranks 2, 3) disagreeing on its shard: rank 3 states rank 1's
  rm -rf "$T/shard"; cp -r "$T/cp2-ep2-full" "$T/shard"
  python3 - "$T/shard" <<'PY'
import json, sys
run = sys.argv[1]
a = json.load(open(run + "/rank-0001/receipt.json"))["predicate"]["rank_state"]["prompt_positions"]
p = run + "/rank-0003/receipt.json"
r = json.load(open(p)); r["predicate"]["rank_state"]["prompt_positions"] = a
json.dump(r, open(p, "w"), indent=1)
PY
  python3 -c "import sys; sys.path.insert(0, sys.argv[1] + '/tests/evidence'); from run_edit import redigest; redigest(sys.argv[2], receipts=True)" "$SRC" "$T/shard"
  v=$(unsigned shard sources.agree)
  if [ "$v" = fail ] && grep -q "an EP group holds one shard" "$T/shard.u.txt"; then
    ok "rank 3 stating another CP index's shard: sources.agree fails (an EP group holds one shard)"
  else bad shard "sources.agree: $v"; fi
fi
exit $failed
