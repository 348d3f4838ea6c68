#!/usr/bin/env bash
# ep_parity.sh BUILD_DIR [SCRATCH] - longstraw-parity covers expert parallelism (docs/parity.md, "Expert
# parallelism"): --like a signed mla CP-1 x EP-2 run runs the matrix and the run's path also at EP-2 (--ep 2 on
# 1 x 2 and 2 x 2 ranks), every EP check (log-probs, gradients and updated weights against the EP-1 run of the
# same CP size, against the independent reference and the naive gradient) passes, the control ep-drop-dx is
# detected, the coverage states eps [1, 2], and the audit (the documented gate: --require-signed, both keys)
# certifies the run at level 4; the same run against a report --like an EP-1 run stays at level 1, its
# parity.coverage naming the EP size; with ep-drop-dx put into every EP path run
# (LONGSTRAW_PARITY_TEST_PATH_FAULT) the report fails (exit 1: the path's cp_grad at EP-2, level 3 does not
# hold) and the audit does not reach level 3; --eps refusals, exit 2 naming --eps.
# Each case prints "ok CASE" or "FAIL CASE: why"; exit 1 when any failed.  About 50 s on 2 cores.
set -uo pipefail
B=$(cd "${1:?usage: ep_parity.sh BUILD_DIR [SCRATCH]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=${2:-$(mktemp -d /tmp/ls-epparity.XXXXXX)}
mkdir -p "$T"
export OMP_NUM_THREADS=1
# shellcheck source=tests/support/case_lib.sh
. "$(dirname "$0")/../support/case_lib.sh" # ok, bad, failed, MPI
TRAIN=$B/trainer/longstraw-train SIGN=$B/receipts/longstraw-sign PARITY=$B/parity/longstraw-parity
AUDIT=$B/audit/longstraw-audit
[ ${#MPI[@]} -gt 0 ] || { echo "skip: no mpirun"; exit 0; }
rm -rf "$T/keys" && mkdir -p "$T/keys"
"$SIGN" keygen --private "$T/keys/k.pem" --public "$T/keys/k.pub" >/dev/null || { echo "keygen failed"; exit 1; }
# usage: every bad --eps is exit 2 naming --eps (before any run)
refused() { # CASE ARGS...: exit 2 and "--eps" on stderr
  local name=$1; shift
  "$PARITY" "$@" --out "$T/refused" >"$T/refused.log" 2>&1
  local rc=$?
  if [ $rc = 2 ] && grep -q -- "--eps" "$T/refused.log"; then ok "refused: $name"
  else bad "refused: $name" "exit $rc: $(head -c 300 "$T/refused.log")"; fi
}
refused "--eps 1,3 (3 does not divide mla-tiny's 8 experts)" --family mla --eps 1,3
refused "--eps 2 (no 1)" --family mla --eps 2
refused "--eps 1,9" --family mla --eps 1,9
refused "--eps 1,2 --family hybrid" --family hybrid --eps 1,2
refused "--eps with --adapter" --adapter "$SRC/adapters/longstraw-train.json" --eps 1,2
# run NAME NP ARGS...: a signed mla run (f64, full, LoRA B random, one step) in $T/NAME
run() {
  local name=$1 np=$2; shift 2
  rm -rf "${T:?}/$name"
  local pre=()
  [ "$np" = 2 ] && pre=("${MPI[@]}")
  "${pre[@]}" "$TRAIN" --config "$SRC/configs/mla-tiny.json" --prompt-len 64 --group 3 --response-len 4 --steps 1 \
    --dtype f64 --grad-mode full --lora-init random --quiet --out "$T/$name" "$@" >"$T/$name.log" 2>&1 &&
    "$SIGN" sign "$T/$name" --key "$T/keys/k.pem" >/dev/null 2>&1 ||
    { bad "$name" "run or sign failed: $(tail -c 400 "$T/$name.log")"; return 1; }
}
like() { # RUN PAR [env...]: parity --like RUN into $T/PAR (signed); its exit status printed
  local r=$1 p=$2; shift 2
  rm -rf "${T:?}/$p"
  env "$@" "$PARITY" --like "$T/$r" --out "$T/$p" --key "$T/keys/k.pem" --quiet >"$T/$p.log" 2>&1
  echo $?
}
level() { # RUN PAR: the audit's level of RUN with the report of PAR (the documented gate's options)
  "$AUDIT" "$T/$1" --parity "$T/$2/parity.json" --key "$T/keys/k.pub" --parity-key "$T/keys/k.pub" \
    --require-signed --json "$T/$1-$2.json" >"$T/$1-$2.txt" 2>&1
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['level'])" "$T/$1-$2.json" 2>/dev/null || echo none
}
run ep2 2 --ep 2 || exit 1
g=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['predicate']['config']; print(c['cp_ranks'], c['ep_ranks'])" \
      "$T/ep2/manifest.json")
[ "$g" = "1 2" ] && ok "the run records CP-1 x EP-2" || bad grid "cp_ranks, ep_ranks: '$g'"
refused "--eps with --like (the run's EP size is taken)" --like "$T/ep2" --eps 1,2
t0=$(date +%s)
rc=$(like ep2 ep2.par)
secs=$(( $(date +%s) - t0 ))
if [ "$rc" = 0 ]; then ok "parity --like the EP-2 run: exit 0 (${secs} s)"
else bad "parity --like ep2" "exit $rc: $(tail -c 600 "$T/ep2.par.log")"; fi
# the report: EP sizes asked and covered, every EP check passing at world cp x 2, on the path and the matrix,
# the control ep-drop-dx detected at every EP run
why=$(python3 - "$T/ep2.par/parity.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
if d.get("eps") != [1, 2]: bad.append(f"eps {d.get('eps')}")
if sorted(d["coverage"].get("eps", [])) != [1, 2]: bad.append(f"coverage.eps {d['coverage'].get('eps')}")
ep = [c for c in d["checks"] if c.get("ep") == 2]
kinds = {(c["kind"], c["configuration"].startswith("path")) for c in ep}
for k in ("logprob", "ref_logprob", "cp_grad", "cp_params", "grad"):
    for path in (True, False):
        if (k, path) not in kinds: bad.append(f"no ep 2 {k} check on the {'path' if path else 'matrix'}")
if ("ref_loss", True) not in kinds: bad.append("no ep 2 ref_loss check on the path")
for c in ep:
    if not c["pass"]: bad.append(f"{c['name']} fails ({c['max_rel_err']})")
    if c["world"] not in (2, 4): bad.append(f"{c['name']}: world {c['world']}")
    if c["kind"] in ("cp_grad", "cp_params", "logprob") and "ep1" in c["reference"] and c["max_rel_err"] != 0:
        bad.append(f"{c['name']}: EP-2 is not EP-1's bit for bit ({c['max_rel_err']})")
drops = [c for c in d["controls"] if c["fault"] == "ep-drop-dx"]
if len(drops) < 4: bad.append(f"{len(drops)} ep-drop-dx controls (path and matrix at CP 1 and 2 expected)")
for c in drops:
    if not c["detected"] or c["max_rel_err"] < 1e-3: bad.append(f"ep-drop-dx {c['check']} not detected ({c['max_rel_err']})")
if not all(l["holds"] for l in d["levels"]): bad.append("a level does not hold")
print("; ".join(bad))
PY
)
[ -z "$why" ] && ok "the report: eps [1, 2], every EP-2 check passes (EP-1 bit for bit), ep-drop-dx detected" ||
  bad "ep2 report" "$why"
l=$(level ep2 ep2.par)
[ "$l" = 4 ] && ok "CP-1 x EP-2, signed: level 4 with a report --like it" ||
  bad "ep2 level" "level $l with a report --like it (4 expected): $(grep -m 3 FAIL "$T/ep2-ep2.par.txt")"
# deny by default: a report of an EP-1 run states no eps; the EP-2 run stays at level 1, the coverage naming EP
run ep1 1 || exit 1
rc=$(like ep1 ep1.par)
[ "$rc" = 0 ] || bad "parity --like ep1" "exit $rc: $(tail -c 600 "$T/ep1.par.log")"
l=$(level ep2 ep1.par)
msg=$(python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for L in d['levels']:
    for c in L['checks']:
        if c['id']=='parity.coverage': print(c.get('message',''))" "$T/ep2-ep1.par.json" 2>/dev/null)
if [ "$l" = 1 ] && ! grep -q '"eps"' "$T/ep1.par/parity.json" && [[ "$msg" == *"EP-2"*"(ep)"* ]]; then
  ok "the EP-2 run against a report --like an EP-1 run: level 1, parity.coverage names ep"
else bad "ep2 vs ep1 report" "level $l, coverage message '$msg'"; fi
# the control put back into the path: every EP path run with ep-drop-dx fails the report and the audit's level 3
rc=$(like ep2 fault.par LONGSTRAW_PARITY_TEST_PATH_FAULT=ep-drop-dx)
why=$(python3 - "$T/fault.par/parity.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
fails = [c for c in d["checks"] if c["kind"] == "cp_grad" and c.get("ep") == 2 and c["configuration"].startswith("path")]
if not fails or any(c["pass"] or c["max_rel_err"] < 1e-3 for c in fails):
    bad.append("the path's EP-2 cp_grad passes: " + ", ".join(f"{c['name']} {c['max_rel_err']}" for c in fails))
lv = {l["level"]: l["holds"] for l in d["levels"]}
if lv.get(3) or lv.get(4): bad.append(f"levels {lv}")
if d["pass"]: bad.append("the report passes")
if not any("TEST ONLY" in n and "EP > 1" in n for n in d["notes"]): bad.append("no TEST ONLY note")
print("; ".join(bad))
PY
)
l=$(level ep2 fault.par)
if [ "$rc" = 1 ] && [ -z "$why" ] && [ "$l" != none ] && [ "$l" -lt 3 ]; then
  ok "ep-drop-dx in every EP path run: the report fails (exit 1, the path's cp_grad at EP-2), the audit level $l"
else bad "ep-drop-dx put back" "exit $rc, audit level $l: $why"; fi
exit $failed
