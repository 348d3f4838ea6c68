#!/usr/bin/env bash
# dense_train.sh BUILD_DIR [SCRATCH] - the dense family end to end (trainer/families/dense/README.md): its
# config refused by key name where it carries another family's key or a typo (exit 2); one step trained on one
# rank and under CP-2 in both train modes (lora, full) and both gradient modes (detached, full), each run audited
# to level 1 against the family's pinned profile; longstraw-parity --family dense (the matrix's two configurations,
# CP 1 and 2, float64 and float32: the independent reference, finite differences, the CP and naive comparisons and
# the controls cp-local-attention, skip-dkv-reduce, skip-grad-finalize, detached) passes; a run's own path
# (parity --like) and the audit certify a CP-2 full-mode run at level 4; and the faults are seen: a CP-2 run with
# skip-dkv-reduce stays below level 3, a reference that drops RoPE fails parity (exit 1), a profile edited after
# the build fails profile.match, the reference refuses a hybrid batch (exit 2) and a weights file short of a
# tensor (exit 1); the memory plan is within 10% of the measured peak (bench/plan_sweep.py).  Each case prints
# "ok CASE" or "FAIL CASE: why"; exit 1 when any failed.  About 90 s on 2 cores.
set -uo pipefail
B=$(cd "${1:?usage: dense_train.sh BUILD_DIR [SCRATCH]}" && pwd)
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
D=$SRC/trainer/families/dense
T=${2:-$(mktemp -d /tmp/ls-dense.XXXXXX)}
mkdir -p "$T"
export OMP_NUM_THREADS=1
# shellcheck source=tests/support/case_lib.sh
. "$SRC/tests/support/case_lib.sh" # ok, bad, failed, MPI
TRAIN=$B/trainer/longstraw-train PARITY=$B/parity/longstraw-parity AUDIT=$B/audit/longstraw-audit
CFG=$D/dense-tiny.json
PY=${PYTHON:-python3}

# ---- the config: another family's key, a typo: exit 2 naming the key
edit_cfg() { # OUT PYTHON-STATEMENT on dict c
  "$PY" -c "import json,sys; c=json.load(open(sys.argv[1])); $2; json.dump(c, open(sys.argv[3], 'w'))" "$CFG" "$2" "$1"
}
refused() { # CASE CONFIG WANT: longstraw-train exits 2 and stderr holds WANT
  "$TRAIN" --config "$2" --prompt-len 64 --out "$T/refused" >"$T/refused.log" 2>&1
  local rc=$?
  if [ $rc = 2 ] && grep -qF -- "$3" "$T/refused.log"; then ok "config refused: $1"
  else bad "config refused: $1" "exit $rc: $(head -c 300 "$T/refused.log")"; fi
}
edit_cfg "$T/gdn.json" "c['gdn_hk'] = 2"
refused "a GDN key" "$T/gdn.json" "key 'gdn_hk': belongs to the hybrid family, not to this dense config"
edit_cfg "$T/typo.json" "c['attn_head'] = c.pop('attn_heads')"
refused "a typo" "$T/typo.json" "key 'attn_head': unknown (did you mean 'attn_heads'?)"
edit_cfg "$T/mla.json" "c['heads'] = 4"
refused "an mla key" "$T/mla.json" "key 'heads': belongs to the mla family"

# ---- training: NAME NP ARGS...: one f64 step into $T/NAME, audited to level 1 against the pinned profile (found
# by the audit itself: profiles/ lacks it, the registry names the family folder's dense.json)
level() { # RUN [PARITY.json]: the audit's level ("none": no report)
  local par=()
  [ $# -gt 1 ] && par=(--parity "$2")
  "$AUDIT" "$1" "${par[@]}" --json "$1.audit.json" >"$1.audit.txt" 2>&1
  "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['level'])" "$1.audit.json" 2>/dev/null || echo none
}
run() {
  local name=$1 np=$2; shift 2
  rm -rf "${T:?}/$name"
  local pre=()
  if [ "$np" = 2 ]; then
    [ ${#MPI[@]} -gt 0 ] || { echo "skip $name: no mpirun"; return 1; }
    pre=("${MPI[@]}")
  fi
  "${pre[@]}" "$TRAIN" --config "$CFG" --prompt-len 64 --group 3 --response-len 4 --steps 1 --dtype f64 \
    --quiet --out "$T/$name" "$@" >"$T/$name.log" 2>&1
  local rc=$?
  if [ $rc != 0 ]; then
    bad "train $name" "exit $rc: $(tail -c 400 "$T/$name.log")"
    return 1
  fi
  local l
  l=$(level "$T/$name")
  if [ "$l" != none ] && [ "$l" -ge 1 ]; then ok "train $name ($*): level $l"
  else bad "train $name" "audit level $l: $(grep -m3 FAIL "$T/$name.audit.txt")"; fi
}
run cp1-lora-detached 1 --train-mode lora --grad-mode detached
run cp1-full-full 1 --train-mode full --grad-mode full
run cp2-lora-full 2 --train-mode lora --grad-mode full --lora-init random
run cp2-full-detached 2 --train-mode full --grad-mode detached
if [ ${#MPI[@]} -gt 0 ]; then
  # the response dK/dV reduction dropped: its rule fails, the run stays below level 3
  rm -rf "$T/cp2-skip"
  "${MPI[@]}" "$TRAIN" --config "$CFG" --prompt-len 64 --group 3 --response-len 4 --steps 1 --dtype f64 --quiet \
    --grad-mode full --fault skip-dkv-reduce --out "$T/cp2-skip" >"$T/cp2-skip.log" 2>&1
  l=$(level "$T/cp2-skip")
  if [ "$l" != none ] && [ "$l" -lt 3 ] && grep -q "FAIL L3 collectives.dkv" "$T/cp2-skip.audit.txt"; then
    ok "fault skip-dkv-reduce: level $l, collectives.dkv fails"
  else bad "fault skip-dkv-reduce" "level $l: $(grep -m3 FAIL "$T/cp2-skip.audit.txt")"; fi
fi

if [ ${#MPI[@]} -gt 0 ]; then # a fault with no subject here is refused, not run as a no-op
  rm -rf "${T:?}/stale"
  "${MPI[@]}" "$TRAIN" --config "$CFG" --prompt-len 64 --steps 1 --quiet --fault cp-stale-start --out "$T/stale" \
    >"$T/stale.log" 2>&1
  rc=$?
  [ $rc != 0 ] && grep -q "cp-stale-start: does not apply to family 'dense'" "$T/stale.log" &&
    ok "fault cp-stale-start refused (no state between shards)" || bad "cp-stale-start" "exit $rc: $(head -c 300 "$T/stale.log")"
fi

# ---- the memory plan (the hybrid family's terms, no recurrent layer) against the tracker's peak, within 10%
cells="dense:1024:8:32:detached:1 dense:1024:8:32:full:1 dense:1024:2:128:full:1:chunk32"
[ ${#MPI[@]} -gt 0 ] && cells="$cells dense:1024:1:8:full:2 dense:2048:2:64:detached:2"
if "$PY" "$SRC/bench/plan_sweep.py" --build "$B" --cells "$cells" >"$T/plan.log" 2>&1; then
  ok "plan vs measured: $(tail -n 1 "$T/plan.log")"
else bad "plan vs measured" "$(tail -c 600 "$T/plan.log")"; fi

# ---- a dense run's manifest and receipts are valid; one without a dense key is not (longstraw-validate checks the
# config against the registry after the schema, as the readers do: the schemas name no family)
VALIDATE=$B/receipts/longstraw-validate
if "$VALIDATE" manifest "$T/cp1-full-full/manifest.json" >"$T/valid.log" 2>&1 &&
   "$VALIDATE" receipt "$T/cp1-full-full/rank-0000/receipt.json" >>"$T/valid.log" 2>&1; then ok "schemas: the run is valid"
else bad "schemas" "$(tail -c 300 "$T/valid.log")"; fi
"$PY" -c "import json,sys; m=json.load(open(sys.argv[1])); del m['predicate']['config']['rope_dim']; json.dump(m, open(sys.argv[2], 'w'))" \
  "$T/cp1-full-full/manifest.json" "$T/no-rope-dim.json"
"$VALIDATE" manifest "$T/no-rope-dim.json" >"$T/invalid.log" 2>&1 && bad "schemas" "a dense manifest without rope_dim is valid" ||
  ok "schemas: a dense manifest without rope_dim is invalid"

# ---- the profile is pinned: the same file edited after the build fails profile.match
mkdir -p "$T/edited"
sed 's/"description": "longstraw-train/"description": "edited: longstraw-train/' "$D/dense.json" >"$T/edited/dense.json"
"$AUDIT" "$T/cp1-lora-detached" --profiles "$T/edited" >"$T/edited.txt" 2>&1
if grep -q "FAIL.*profile.match" "$T/edited.txt"; then ok "an edited profile fails profile.match"
else bad "edited profile" "$(grep -m3 -i profile "$T/edited.txt")"; fi

# ---- the independent reference refuses what is not a dense batch or model
rm -rf "${T:?}/dump"
"$TRAIN" --config "$CFG" --prompt-len 64 --group 2 --response-len 3 --steps 1 --dtype f64 --quiet \
  --save-init "$T/init.safetensors" --dump-batch "$T/batch.json" --out "$T/dump" >"$T/dump.log" 2>&1 ||
  bad "dump" "$(tail -c 300 "$T/dump.log")"
"$PY" "$D/dense_ref.py" "$T/init.safetensors" "$T/batch.json" --json "$T/ref.json" >"$T/ref.log" 2>&1 &&
  "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); assert len(d['policy']) == 2" "$T/ref.json" &&
  ok "reference on a dense batch" || bad "reference" "$(tail -c 300 "$T/ref.log")"
"$PY" -c "import json,sys; b=json.load(open(sys.argv[1])); b['config']['family'] = 'hybrid'; json.dump(b, open(sys.argv[2], 'w'))" \
  "$T/batch.json" "$T/hybrid-batch.json"
"$PY" "$D/dense_ref.py" "$T/init.safetensors" "$T/hybrid-batch.json" --json "$T/x.json" >"$T/x.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "family dense only" "$T/x.log" && ok "reference refuses a hybrid batch (exit 2)" ||
  bad "reference hybrid batch" "exit $rc: $(tail -c 200 "$T/x.log")"
"$PY" - "$SRC/tests/reference" "$T/init.safetensors" "$T/short.safetensors" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import hybrid_ref as H
t, dt = H.read_safetensors(sys.argv[2])
del t["layers.1.attn.k_norm.weight"]
H.write_safetensors(sys.argv[3], t, dt)
PY
"$PY" "$D/dense_ref.py" "$T/short.safetensors" "$T/batch.json" --json "$T/x.json" >"$T/x.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "layers.1.attn.k_norm.weight" "$T/x.log" && ok "reference refuses a missing tensor (exit 1)" ||
  bad "reference missing tensor" "exit $rc: $(tail -c 200 "$T/x.log")"

[ ${#MPI[@]} -gt 0 ] || { echo "skip parity: no mpirun"; exit $failed; }
rm -rf "${T:?}/par" "${T:?}/par-like" "${T:?}/par-norope"
# ---- parity: the family's matrix (CP 1 and 2, both dtypes): every check and control, finite differences included
t0=$(date +%s)
"$PARITY" --family dense --cp 1,2 --jobs 2 --quiet --out "$T/par" >"$T/par.log" 2>&1
rc=$?
why=$("$PY" - "$T/par/parity.json" <<'PY' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
bad = [c["name"] for c in d["checks"] if not c["pass"]]
kinds = {c["kind"] for c in d["checks"]}
for k in ("ref_logprob", "ref_loss", "logprob", "grad", "fd_grad", "cp_grad", "cp_params"):
    if k not in kinds: bad.append("no %s check" % k)
if d["family"] != "dense": bad.append("family %r" % d["family"])
if sorted(d["worlds"]) != [1, 2]: bad.append("worlds %r" % d["worlds"])
ctl = d["controls"]
if len(ctl) < 4 or not all(c["detected"] for c in ctl): bad.append("controls %r" % [(c["fault"], c["detected"]) for c in ctl])
print("; ".join(bad[:5]))
PY
)
if [ $rc = 0 ] && [ -z "$why" ]; then ok "parity --family dense: pass, every control detected ($(( $(date +%s) - t0 )) s)"
else bad "parity --family dense" "exit $rc: $why $(tail -c 300 "$T/par.log")"; fi

# ---- level 4: the CP-2 full-mode run with a report --like it
"$PARITY" --like "$T/cp2-lora-full" --jobs 2 --quiet --out "$T/par-like" >"$T/par-like.log" 2>&1
rc=$?
l=$(level "$T/cp2-lora-full" "$T/par-like/parity.json")
if [ $rc = 0 ] && [ "$l" = 4 ]; then ok "parity --like the CP-2 full-mode run: the audit's level 4"
else bad "level 4" "parity exit $rc, level $l: $(grep -m3 FAIL "$T/cp2-lora-full.audit.txt")"; fi

# ---- the reference's comparison catches a model error: a reference without RoPE fails parity (exit 1)
cat >"$T/norope_ref.py" <<PY
import sys
sys.path.insert(0, "$D")
import dense_ref
dense_ref.H.Model.rope = lambda self, x, pos: list(x)
sys.exit(dense_ref.main(sys.argv))
PY
"$PARITY" --family dense --cp 1 --dtype f64 --configs d30-g2-lora --fd-max 1 --quiet --reference "$T/norope_ref.py" \
  --out "$T/par-norope" >"$T/par-norope.log" 2>&1
rc=$?
fails=$("$PY" -c "import json,sys; print(sum(1 for c in json.load(open(sys.argv[1]))['checks'] if c['kind'] == 'ref_logprob' and not c['pass']))" \
        "$T/par-norope/parity.json" 2>/dev/null || echo 0)
if [ $rc = 1 ] && [ "$fails" -gt 0 ]; then ok "a reference without RoPE: parity fails ($fails ref_logprob check(s))"
else bad "reference without RoPE" "exit $rc, $fails failing ref_logprob checks: $(tail -c 300 "$T/par-norope.log")"; fi
exit $failed
