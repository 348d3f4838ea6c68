#!/usr/bin/env bash
# adversarial.sh BUILD_DIR [SCRATCH] - the audit's adversarial suite
# (docs/evidence.md): real runs made here by longstraw-train, then, for each
# class of attack or honest mistake, a changed copy and the rule that must
# refuse it with its evidence; and the honest cases that must be certified.
# Parity reports here are hand-written (the level logic's fixtures; the real
# reports are test_parity's and test_parity_table's), derived by
# make_report.py from the run they stand beside.
#
# Each case prints "ok CASE" or "FAIL CASE: why"; exit 1 when any failed.
# Needs python3 (JSON edits), zstd, longstraw-sign.
set -uo pipefail
B=$(cd "${1:?usage: adversarial.sh BUILD_DIR [SCRATCH]}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
T=${2:-$(mktemp -d /tmp/ls-adversarial.XXXXXX)}
mkdir -p "$T"
TRAIN=$B/trainer/longstraw-train
AUDIT=$B/audit/longstraw-audit
SIGN=$B/receipts/longstraw-sign
CFG=$SRC/configs/hybrid-tiny.json
export OMP_NUM_THREADS=1
failed=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1: $2"; failed=1; }

train() { # NAME ARGS...: a run in $T/NAME (f64, P=64, G=2, R=4)
  local name=$1; shift
  rm -rf "$T/$name"
  "$TRAIN" --config "${RUN_CFG:-$CFG}" --prompt-len 64 --group 2 --response-len 4 --dtype f64 --quiet --out "$T/$name" "$@" \
    >"$T/$name.log" 2>&1
}

# audit_json RUN ARGS...: the audit's exit status in $RC, its report in $T/report.json, stdout in $T/audit.out
audit_json() {
  local run=$1; shift
  rm -f "$T/report.json"
  "$AUDIT" "$run" --json "$T/report.json" "$@" >"$T/audit.out" 2>"$T/audit.err"
  RC=$?
}

# rule_is ID VERDICT [SUBSTRING]: in $T/report.json, rule ID has VERDICT and
# (when given) SUBSTRING in its message or evidence
rule_is() {
  python3 - "$T/report.json" "$@" <<'EOF'
import json, sys
path, rid, verdict = sys.argv[1:4]
sub = sys.argv[4] if len(sys.argv) > 4 else None
try:
    d = json.load(open(path))
except Exception as e:
    print("no report: %s" % e); sys.exit(1)
for lv in d["levels"]:
    for c in lv["checks"]:
        if c["id"] != rid: continue
        if c["verdict"] != verdict:
            print("%s is %s, not %s: %s" % (rid, c["verdict"], verdict, c["message"])); sys.exit(1)
        text = c["message"] + " " + " ".join(e["file"] + ": " + e["detail"] for e in c["evidence"])
        if sub and sub not in text:
            print("%s does not say '%s': %s" % (rid, sub, text[:600])); sys.exit(1)
        sys.exit(0)
print("no rule %s" % rid); sys.exit(1)
EOF
}
level_is() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d['level']==int(sys.argv[2]) else (print('level %d, want %s' % (d['level'], sys.argv[2])) or 1))" "$T/report.json" "$1"; }
field_is() { # PYTHON-EXPR-ON-d EXPECTED
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); v=eval(sys.argv[2]); sys.exit(0 if str(v)==sys.argv[3] else (print('%s is %r, want %s' % (sys.argv[2], v, sys.argv[3])) or 1))" "$T/report.json" "$1" "$2"
}
# check CASE COMMAND...: the command's output is the failure reason
check() {
  local name=$1; shift
  local why
  if why=$("$@" 2>&1); then ok "$name"; else bad "$name" "$why"; fi
}

# recompute the manifest's digests after an edit (an adversary with write access does)
redigest() { python3 "$HERE/redigest.py" "$1"; }
report() { python3 "$HERE/make_report.py" "$@"; } # RUN OUT [edits...]

# ---- the runs ------------------------------------------------------------
train base --grad-mode full --steps 2 --temperature 0.9 --save "$T/base.ckpt" || { echo "FAIL training base"; exit 1; }
train resumed --grad-mode full --steps 2 --temperature 0.9 --resume "$T/base.ckpt" || { echo "FAIL training resumed"; exit 1; }
train frozen --steps 4 --prefix-frozen 4 || { echo "FAIL training frozen"; exit 1; }
train untracked --steps 1 --fault untracked-alloc || { echo "FAIL training untracked"; exit 1; }
rm -f "$T"/[ab].pem "$T"/[ab].pub
"$SIGN" keygen --private "$T/a.pem" --public "$T/a.pub" >/dev/null
"$SIGN" keygen --private "$T/b.pem" --public "$T/b.pub" >/dev/null

# ---- honest cases ----------------------------------------------------------
audit_json "$T/resumed"
check "resumed run: level 1 on the steps it ran (2..3)" sh -c "test $RC = 0 && $(declare -f level_is); T=$T level_is 1"
check "resumed run: its steps are 2..3" field_is "(d['first_step'], d['steps'])" "(2, 2)"
report "$T/base" "$T/base-parity.json"
audit_json "$T/base" --parity "$T/base-parity.json" --require-level 4
check "a covering same-build report: level 4" sh -c "test $RC = 0"
check "the verdict states its assurance (unsigned)" field_is "d['assurance']['level']" "unsigned"

# ---- exact steps and faults -----------------------------------------------------
audit_json "$T/frozen"
check "prefix-frozen: steps.exact names 1 of 4 exact" rule_is steps.exact fail "1 of 4 steps exact"
check "prefix-frozen: level 1 only" level_is 1
check "prefix-frozen: the report lists steps 1-3" field_is "d['prefix_frozen_steps']" "[1, 2, 3]"
grep -q "1 of 4 exact" "$T/audit.out" && ok "prefix-frozen: the text summary says 1 of 4 exact" ||
  bad "prefix-frozen text" "$(head -5 "$T/audit.out")"
report "$T/frozen" "$T/frozen-parity.json"
audit_json "$T/frozen" --parity "$T/frozen-parity.json"
check "prefix-frozen with a covering report: still level 1" level_is 1

audit_json "$T/untracked" --junit "$T/untracked.xml" --html "$T/untracked.html"
check "untracked-alloc: run.faults fails at level 1" rule_is run.faults fail "untracked-alloc"
check "untracked-alloc: level 0" level_is 0
check "untracked-alloc: the JSON names it" field_is "[f['name'] for f in d['faults']]" "['untracked-alloc']"
for out in audit.out untracked.xml untracked.html; do
  grep -q "untracked-alloc" "$T/$out" && ok "untracked-alloc: $out names it" || bad "untracked-alloc $out" "not named"
done
report "$T/untracked" "$T/untracked-parity.json"
audit_json "$T/untracked" --parity "$T/untracked-parity.json"
check "untracked-alloc with a covering report: still level 0" level_is 0

# ---- one source of a fact edited, the digests recomputed ------------------------
edit_cfg() { # RUN FILE KEY VALUE(JSON)
  python3 - "$@" <<'EOF'
import json, sys
run, f, k, v = sys.argv[1:5]
p = "%s/%s" % (run, f)
d = json.load(open(p))
c = d["predicate"]["config"]
if "." in k:
    a, b = k.split(".", 1); c[a][b] = json.loads(v)
else:
    c[k] = json.loads(v)
json.dump(d, open(p, "w"))
EOF
}
for kv in "dtype:\"f32\"" "grad_mode:\"detached\"" "faults:[\"skip-dkv-reduce\"]" "first_step:1" "group:3" "options.seed:7"; do
  k=${kv%%:*}; v=${kv#*:}
  rm -rf "$T/e"; cp -a "$T/base" "$T/e"
  edit_cfg "$T/e" rank-0000/receipt.json "$k" "$v"
  redigest "$T/e"
  audit_json "$T/e" --parity "$T/base-parity.json"
  check "receipt config '$k' edited, digests recomputed: sources.agree names both places" \
    rule_is sources.agree fail "config \"${k%%.*}\""
done
rm -rf "$T/e"; cp -a "$T/untracked" "$T/e"
edit_cfg "$T/e" manifest.json faults "[]"; redigest "$T/e"
audit_json "$T/e"
check "a fault removed from the manifest only: sources.agree" rule_is sources.agree fail "faults"
check "... and the fault still caps the run" rule_is run.faults fail "untracked-alloc"
rm -rf "$T/e"; cp -a "$T/base" "$T/e"
python3 - "$T/e" <<'EOF'
import json, sys
for f in ["manifest.json", "rank-0000/receipt.json"]:
    p = sys.argv[1] + "/" + f
    d = json.load(open(p)); d["predicate"]["config"]["cp_ranks"] = 2; json.dump(d, open(p, "w"))
EOF
redigest "$T/e"
audit_json "$T/e"
check "cp_ranks edited everywhere but the world: sources.agree" rule_is sources.agree fail "cp_ranks"

rm -rf "$T/e"; cp -a "$T/base" "$T/e"
python3 - "$T/e" <<'EOF'
import json, sys
p = sys.argv[1] + "/rank-0000/receipt.json"
d = json.load(open(p)); d["predicate"]["rank_state"]["world"] = 2; json.dump(d, open(p, "w"))
EOF
redigest "$T/e"
audit_json "$T/e"
check "a rank's own state edited (rank_state.world): sources.agree" rule_is sources.agree fail "(rank_state) says"

# the strategy relabelled everywhere (digests recomputed): the trace's segments do not fit it
relabel() { # RUN STRATEGY
  python3 - "$@" <<'EOF'
import json, sys, glob
run, st = sys.argv[1:3]
for p in [run + "/manifest.json"] + glob.glob(run + "/rank-*/receipt.json"):
    d = json.load(open(p)); d["predicate"]["config"]["strategy"] = st; json.dump(d, open(p, "w"))
EOF
}
train naive --strategy naive --steps 1 || bad "training naive" "see $T/naive.log"
rm -rf "$T/e"; cp -a "$T/naive" "$T/e"; relabel "$T/e" longstraw; redigest "$T/e"
audit_json "$T/e"
check "a naive run relabelled longstraw: sources.agree names the naive-shaped segments" \
  rule_is sources.agree fail "naive-shaped"
rm -rf "$T/e"; cp -a "$T/base" "$T/e"; relabel "$T/e" naive; redigest "$T/e"
audit_json "$T/e"
check "a LongStraw run relabelled naive: sources.agree" rule_is sources.agree fail "says strategy naive"

# ---- reports that do not cover the run -------------------------------------------
RUN_CFG="$SRC/configs/hybrid-small.json" train small-model --grad-mode full --steps 1 --temperature 0.9 ||
  bad "training small-model" "see $T/small-model.log"
audit_json "$T/small-model" --parity "$T/base-parity.json"
check "hybrid-small beside a hybrid-tiny report: parity.coverage names d_model" rule_is parity.coverage fail "(d_model)"
for edit in "model.d_model=128:d_model" "train_modes=[{\"train_mode\":\"full\"}]:train_mode" \
            "objectives=[{\"objective\":\"grpo\",\"epsilon\":0.2,\"beta\":0.04,\"temperature\":1}]:objective" \
            "dtypes=[\"f32\"]:dtype" "worlds=[2]:world" "grad_modes=[\"detached\"]:grad_mode"; do
  e=${edit%:*}; field=${edit##*:}
  report "$T/base" "$T/p.json" "$e"
  audit_json "$T/base" --parity "$T/p.json"
  check "a report covering another $field: parity.coverage names $field" rule_is parity.coverage fail "($field)"
  check "... and the run is level 1" level_is 1
done
report "$T/base" "$T/p.json" "build_digest=$(printf '0%.0s' {1..64})"
audit_json "$T/base" --parity "$T/p.json"
check "a report of another build: parity.build" rule_is parity.build fail "from build 0000"
report "$T/base" "$T/p.json" "schema=urn:longstraw:schema:parity:v2" "-coverage"
audit_json "$T/base" --parity "$T/p.json"
check "an older (v2) report replayed: it covers nothing" rule_is parity.coverage fail "before coverage was recorded"

# ---- signatures ----------------------------------------------------------------------
rm -rf "$T/s"; cp -a "$T/base" "$T/s"
"$SIGN" sign "$T/s" --key "$T/a.pem" >/dev/null
report "$T/s" "$T/s/parity.json" # written by hand: no trainer run behind it
audit_json "$T/s" --key "$T/a.pub" --require-level 4
check "signed run + hand-written report, no --require-signed: level 4, assurance run-signed" \
  sh -c "test $RC = 0 && $(declare -f field_is); T=$T field_is \"d['assurance']['level']\" run-signed"
audit_json "$T/s" --key "$T/a.pub" --require-signed --require-level 1
check "... with --require-signed: exit 1" sh -c "test $RC = 1"
check "... parity.signature names it unauthenticated" rule_is parity.signature fail "unauthenticated"
check "... and levels 2-4 are not proven" level_is 1
sign_report() { "$SIGN" sign-parity "$1" --key "$2" >/dev/null; }
sign_report "$T/s/parity.json" "$T/b.pem"
audit_json "$T/s" --key "$T/a.pub" --parity-key "$T/a.pub" --require-signed
check "a report signed by another key: parity.signature" rule_is parity.signature fail "no signature by key"
sign_report "$T/s/parity.json" "$T/a.pem"
audit_json "$T/s" --key "$T/a.pub" --parity-key "$T/a.pub" --require-signed --require-level 4
check "run and report signed by trusted keys: level 4, run-and-parity-signed" \
  sh -c "test $RC = 0 && $(declare -f field_is); T=$T field_is \"d['assurance']['level']\" run-and-parity-signed"
python3 -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); d['notes'].append('edited'); json.dump(d,open(p,'w'))" "$T/s/parity.json"
audit_json "$T/s" --key "$T/a.pub" --parity-key "$T/a.pub" --require-signed
check "the report edited after signing: refused" rule_is parity.signature fail "not the payload"
cp "$T/s/manifest.dsse.json" "$T/s/parity.dsse.json"
audit_json "$T/s" --key "$T/a.pub" --parity-key "$T/a.pub" --require-signed
check "a manifest's envelope passed off as the report's: refused (payload type)" rule_is parity.signature fail ""
rm -f "$T/s/parity.dsse.json"
audit_json "$T/s" --key "$T/b.pub" --require-level 1
check "the run signed by another key: manifest.signature" rule_is manifest.signature fail ""
audit_json "$T/s" --require-signed --require-level 1
check "--require-signed without --key: exit 1" sh -c "test $RC = 1"

if [ $failed = 0 ]; then rm -rf "$T"; echo "adversarial: all cases passed"; else echo "adversarial: failures (scratch kept: $T)"; fi
exit $failed
