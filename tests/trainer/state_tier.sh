#!/usr/bin/env bash
# state_tier.sh BUILD_DIR [SCRATCH] - --state-tier host (trainer/model/stage.h, trainer/base/tier.h): the
# prompt state in the host tier, each layer's share staged into the device tier before the layer reads it,
# gives the device tier's gradients and log-probs bit for bit, both families, both gradient modes, one rank
# and CP-2 (when mpirun is found); the device tier holds about two layers' shares (staging) and no
# prompt_state, the host tier the whole state; the plan predicts both tiers within 10%; a staging that skips
# a page is caught by the comparison; the run records the option; bad values exit 2 naming the argument.
# Each case prints "ok CASE" or "FAIL CASE: why"; exit 1 when any failed.
set -uo pipefail
B=$(cd "${1:?usage: state_tier.sh BUILD_DIR [SCRATCH]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=${2:-$(mktemp -d /tmp/ls-statetier.XXXXXX)}
mkdir -p "$T"
TRAIN=$B/trainer/longstraw-train
PLAN=$B/trainer/longstraw-plan
export OMP_NUM_THREADS=1
# shellcheck source=tests/support/case_lib.sh
. "$(dirname "$0")/../support/case_lib.sh" # ok, bad, failed, MPI
ARGS=(--prompt-len 80 --group 3 --response-len 24 --steps 1 --lora-init random)
# run NAME RANKS ARGS...: a run in $T/NAME, its gradients in $T/NAME.grads, its batch (log-probs) in $T/NAME.batch
run() {
  local name=$1 np=$2; shift 2
  rm -rf "${T:?}/$name" "$T/$name.grads" "$T/$name.batch"
  local pre=()
  [ "$np" = 2 ] && pre=("${MPI[@]}")
  "${pre[@]}" "$TRAIN" "${ARGS[@]}" --out "$T/$name" --dump-grads "$T/$name.grads" --dump-batch "$T/$name.batch" "$@" \
    >"$T/$name.log" 2>&1 ||
    { bad "$name" "longstraw-train failed: $(grep -m 5 -v -e '^-----' -e '^ *$' "$T/$name.log" | head -c 600)"; return 1; }
}
field() { # RUN_DIR PYTHON_EXPR over the rank-0000 receipt r
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/rank-0000/receipt.json'))['predicate']; print($2)" "$1"
}
same() { cmp -s "$T/$1.grads" "$T/$2.grads" && cmp -s "$T/$1.batch" "$T/$2.batch"; }

for fam in hybrid mla; do
  for gm in detached full; do
    for np in 1 2; do
      [ "$np" = 2 ] && [ ${#MPI[@]} = 0 ] && { echo "skip $fam $gm cp2: no mpirun"; continue; }
      base=$fam-$gm-np$np
      run "$base-device" "$np" --config "$SRC/configs/$fam-tiny.json" --grad-mode "$gm" || continue
      run "$base-host" "$np" --config "$SRC/configs/$fam-tiny.json" --grad-mode "$gm" --state-tier host || continue
      if same "$base-device" "$base-host"; then ok "$base: gradients and log-probs bit for bit"
      else bad "$base" "the host tier's gradients or log-probs differ from the device tier's"; fi
      # the tiers: no prompt_state on the device, the whole state on the host, about two layers' shares staged
      m=$(python3 - "$T/$base-device" "$T/$base-host" "$SRC/configs/$fam-tiny.json" <<'PY'
import json, sys
def cats(d):
    return {k: v["peak_bytes"] for k, v in json.load(open(d + "/rank-0000/receipt.json"))["predicate"]["memory"]["run"]["categories"].items()}
dv, hs = cats(sys.argv[1]), cats(sys.argv[2])
L = json.load(open(sys.argv[3]))["n_layers"]
S = dv["prompt_state"]
errs = []
if hs.get("prompt_state", 0) != 0: errs.append("prompt_state %d on the device tier" % hs["prompt_state"])
if hs.get("prompt_state_host") != S: errs.append("host tier %s != the device run's state %d" % (hs.get("prompt_state_host"), S))
if dv.get("staging", 0) or dv.get("prompt_state_host", 0): errs.append("the device run staged")
st = hs.get("staging", 0)
# two layers' shares of the (one or two) live states' positions, the decode's pages on top: between one
# layer's share of one state and 2.5 layers' of one state (S holds the reference's state too when kept)
one = S / L
if not (0.5 * one <= st <= 2.5 * one * 2): errs.append("staging %d outside two layers' share (one layer of the live states: %d)" % (st, one))
print("; ".join(errs) if errs else "staging %d bytes, %.2f layers of the live state %d (host tier), %d layers" % (st, st / one, S, L))
PY
)
      case "$m" in staging*) ok "$base: $m" ;; *) bad "$base" "$m" ;; esac
      p=$(field "$T/$base-host" "r['config']['options'].get('state_tier')")
      [ "$p" = host ] && ok "$base: recorded state_tier $p" || bad "$base" "recorded state_tier '$p', want host"
    done
  done
done

# a staging that skips each layer's last page must be caught by the comparison
for fam in hybrid mla; do
  base=$fam-full-np1
  [ -f "$T/$base-device.grads" ] || continue
  run "$base-skip" 1 --config "$SRC/configs/$fam-tiny.json" --grad-mode full --state-tier host --fault stage-skip-page ||
    continue
  if same "$base-device" "$base-skip"; then bad "$base-skip" "a staging that skips a page went unnoticed"
  else ok "$base-skip: a staging that skips a page changes the gradients (caught)"; fi
  f=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['predicate']['config']['faults'])" \
        "$T/$base-skip/rank-0000/receipt.json")
  [ "$f" = "['stage-skip-page']" ] && ok "$base-skip: the fault is recorded ($f)" || bad "$base-skip" "faults recorded: $f"
done

# the plan of each tier against the measured peaks (per step), within 10%
for fam in hybrid mla; do
  for gm in detached full; do
    r=$T/$fam-$gm-np1-host
    [ -d "$r" ] || continue
    out=$(python3 - "$PLAN" "$SRC/configs/$fam-tiny.json" "$gm" "$r" <<'PY'
import json, subprocess, sys
plan, cfg, gm, run = sys.argv[1:5]
d = json.loads(subprocess.run([plan, "--config", cfg, "--prompt-len", "80", "--response-len", "24", "--group", "3",
                               "--grad-mode", gm, "--dtype", "f32", "--state-tier", "host", "--json"],
                              capture_output=True, text=True, check=True).stdout)
m = json.load(open(run + "/rank-0000/receipt.json"))["predicate"]["memory"]["per_step"]
c = {k: v["peak_bytes"] for k, v in m["categories"].items()}
rows = [("host tier", d["host_tier"]["peak"], c["prompt_state_host"]),
        ("device tier", d["peak"]["total"], m["total_peak_bytes"]),
        ("staging", max(ph["memory"]["staging"] for ph in d["phases"] if ph["runs"]), c["staging"])]
bad = [n for n, p, x in rows if not (0.9 <= p / x <= 1.1)]
print(("FAIL " if bad else "") + ", ".join("%s plan %d measured %d (%.3f)" % (n, p, x, p / x) for n, p, x in rows))
PY
)
    case "$out" in FAIL*) bad "plan $fam $gm" "${out#FAIL }" ;; *) ok "plan $fam $gm: $out" ;; esac
  done
done

# bad values: exit 2 naming the argument; a host tier above --host-memory: refused by the plan
"$TRAIN" --config "$SRC/configs/hybrid-tiny.json" --state-tier gpu --out "$T/badtier" >"$T/badtier.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--state-tier" "$T/badtier.log" && ok "--state-tier gpu: exit 2 naming it" || bad badtier "exit $rc: $(head -c 300 "$T/badtier.log")"
"$PLAN" --config "$SRC/configs/hybrid-tiny.json" --prompt-len 80 --state-tier gpu >"$T/badplan.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--state-tier" "$T/badplan.log" && ok "longstraw-plan --state-tier gpu: exit 2 naming it" || bad badplan "exit $rc"
rm -rf "$T/hosttight"
"$TRAIN" "${ARGS[@]}" --config "$SRC/configs/hybrid-tiny.json" --state-tier host --host-memory 1048576 --prompt-len 4096 \
  --out "$T/hosttight" >"$T/hosttight.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--host-memory" "$T/hosttight.log" && ok "--host-memory below the host tier's plan: refused (exit 2)" ||
  bad hosttight "exit $rc: $(head -c 300 "$T/hosttight.log")"
# the audit keeps the tiers apart: an honest host-tier run passes memory.accounting (the device tier's
# categories add up to total_live, the host tier's, "tier": "host", to host_live); a copy whose host_live
# was raised by one byte (digests recomputed) fails it naming host_live
AUDIT=$B/audit/longstraw-audit
if [ -x "$AUDIT" ]; then
  rm -rf "$T/acct" "$T/acct-bad"
  "$TRAIN" "${ARGS[@]}" --config "$SRC/configs/hybrid-tiny.json" --state-tier host --quiet --out "$T/acct" >/dev/null 2>&1 ||
    bad acct "longstraw-train --state-tier host failed"
  acct() { "$AUDIT" "$1" --json "$1.json" >/dev/null 2>&1
           python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
r = [c for lv in d['levels'] for c in lv['checks'] if c['id'] == 'memory.accounting'][0]
print('PASS' if r['pass'] else 'FAIL ' + r['message'])" "$1.json"; }
  v=$(acct "$T/acct"); [ "$v" = PASS ] && ok "audit: a host-tier run's memory accounting holds" || bad acct "$v"
  cp -r "$T/acct" "$T/acct-bad"
  python3 - "$T/acct-bad" "$SRC/tests/evidence" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from run_edit import read_trace, write_trace, dump, redigest
run = sys.argv[1]
path = run + "/rank-0000/events.jsonl.zst"
lines = read_trace(path)
for i, l in enumerate(lines):
    e = json.loads(l)
    if e.get("ev") == "memory" and "host_live" in e:
        e["host_live"] += 1
        lines[i] = dump(e)
        break
else:
    sys.exit("no memory event with host_live")
write_trace(path, lines)
redigest(run, receipts=True)
PY
  v=$(acct "$T/acct-bad")
  case "$v" in *host_live*) ok "audit: host_live one byte off is refused ($v)" ;; *) bad acct-bad "$v" ;; esac
fi
exit $failed
