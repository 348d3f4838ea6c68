#!/bin/sh
# ep_train.sh - expert parallelism of longstraw-train (--ep, trainer/dist/ep.h):
# one step's dumped gradients (--dump-grads) and the checkpoint after two
# steps (--save: weights and AdamW moments) of EP-2, EP-4 (-np 4) and
# CP-2 x EP-2 (-np 4) compared tensor by tensor (tests/trainer/ep_compare.py) with
# the EP-1 run of the same CP size: BITWISE, because every rank combines
# every token from the same expert rows in the order a one-rank run does and
# every gradient sum is the same fixed-order sum (the EP exchange moves rows,
# it adds nothing).  CP-2 x EP-2 against one rank (CP-1) agrees to 1e-12
# only: CP's sums over shards round differently (docs/cp.md), not EP's.
# The fault ep-drop-dx (the last EP rank returns zero input gradients for
# its experts' rows) must make the comparison fail.  The objective is sft,
# so that step 1's gradient is not zero (GRPO's first step on the task has
# zero advantages and the policy equals the reference).
# An EP-1 checkpoint resumed or loaded under EP-2 and EP-4 continues as
# EP-1 does; each rank's parameter memory (fixed_weights, gradients,
# optimizer_state) is EP-1's less the other ranks' experts, as
# longstraw-plan --ep N plans it.
# usage: ep_train.sh TRAINER MPIEXEC "MPIRUN_FLAGS" SOURCE_DIR PLAN
set -eu
T=$1; MPI=$2; FLAGS=$3; SRC=$4; PLAN=$5
D=$(mktemp -d /tmp/ls-ep-XXXXXX)
trap 'rm -rf "$D"' EXIT
CMP="python3 $SRC/tests/trainer/ep_compare.py"
COMMON="--config $SRC/configs/mla-tiny.json --prompt-len 64 --response-len 4 --group 2 --dtype f64 --train-mode full
        --grad-mode full --seed 3 --steps 2 --objective sft --quiet"
run() { # NP OUT [options...]
  np=$1; out=$2; shift 2
  # shellcheck disable=SC2086
  if [ "$np" = 0 ]; then "$T" $COMMON --out "$D/$out" --dump-grads "$D/$out.g" --save "$D/$out.ck" "$@" >"$D/$out.log" 2>&1
  else $MPI $FLAGS -np "$np" "$T" $COMMON --out "$D/$out" --dump-grads "$D/$out.g" --save "$D/$out.ck" "$@" >"$D/$out.log" 2>&1
  fi || { echo "ep_train: run $out failed:"; tail -20 "$D/$out.log"; exit 1; }
}
run 0 one
run 2 ep2 --ep 2
run 4 ep4 --ep 4
run 2 cp2 
run 4 cp2ep2 --ep 2
run 2 drop --ep 2 --fault ep-drop-dx
echo "EP-2 vs EP-1:"; $CMP "$D/one.g" "$D/ep2.g"; $CMP "$D/one.ck" "$D/ep2.ck"
echo "EP-4 vs EP-1:"; $CMP "$D/one.g" "$D/ep4.g"; $CMP "$D/one.ck" "$D/ep4.ck"
echo "CP-2 x EP-2 vs CP-2 x EP-1:"; $CMP "$D/cp2.g" "$D/cp2ep2.g"; $CMP "$D/cp2.ck" "$D/cp2ep2.ck"
echo "CP-2 x EP-2 vs CP-1 x EP-1 (CP's rounding):"; $CMP "$D/one.g" "$D/cp2ep2.g" --tol=1e-12
echo "ep-drop-dx vs EP-1 (must differ):"; $CMP "$D/one.g" "$D/drop.g" --expect-differ
# an EP-1 checkpoint resumed (and --load'ed) under EP-2: each rank takes its own experts from the whole
# file, and the step after equals EP-1's resumed step bit for bit
run 0 oneres --resume "$D/one.ck" --steps 1
run 2 ep2res --ep 2 --resume "$D/one.ck" --steps 1
echo "EP-2 resumed from EP-1's checkpoint vs EP-1 resumed:"; $CMP "$D/oneres.ck" "$D/ep2res.ck"; $CMP "$D/oneres.g" "$D/ep2res.g"
run 0 oneload --load "$D/one.ck" --steps 1
run 4 ep4load --ep 4 --load "$D/one.ck" --steps 1
echo "EP-4 --load of EP-1's checkpoint vs EP-1:"; $CMP "$D/oneload.g" "$D/ep4load.g"
# memory: each EP rank holds E/N of the routed experts: fixed_weights, gradients and optimizer_state shrink
# by the other ranks' experts (exactly: full mode, f64, mla-tiny's 3 MoE layers of 8 experts of 3 x 32 x 64),
# and longstraw-plan --ep N plans them (within 10% of the tracker's peaks, as every plan is held)
for n in 1 2 4; do "$PLAN" --config "$SRC/configs/mla-tiny.json" --prompt-len 64 --response-len 4 --group 2 \
    --dtype f64 --train-mode full --ep $n --json > "$D/plan$n.json"; done
python3 - "$D" <<'PY'
import json, sys
d = sys.argv[1]
CATS = ("fixed_weights", "gradients", "optimizer_state")
def peaks(run, rank):
    r = json.load(open(f"{d}/{run}/rank-{rank:04d}/receipt.json"))
    m = (r.get("predicate") or r)["memory"]["per_step"]["categories"]
    return {c: m[c]["peak_bytes"] for c in CATS}
one = peaks("one", 0)
expert = 3 * 8 * 3 * 32 * 64 * 8  # MoE layers x experts x (gate, up, down) x expert_dim x d_model x f64
for run, n in (("ep2", 2), ("ep4", 4)):
    plan = json.load(open(f"{d}/plan{n}.json"))["fixed"]
    for rank in range(n):
        got = peaks(run, rank)
        other = expert * (n - 1) // n
        want = {"fixed_weights": one["fixed_weights"] - 2 * other,  # the weights and the reference copy
                "gradients": one["gradients"] - other, "optimizer_state": one["optimizer_state"] - 2 * other}
        assert got == want, (run, rank, got, want)
        for c in CATS:
            assert abs(plan[c] - got[c]) <= 0.1 * got[c], (run, c, plan[c], got[c])
    print(f"ep_train: EP-{n} per rank", got, "(EP-1", one, ") plan", {c: plan[c] for c in CATS})
PY
# the run records its grid: the manifest's config and the trace header's groups
python3 - "$D" <<'PY'
import json, shutil, subprocess, sys
d = sys.argv[1]
m = json.load(open(f"{d}/cp2ep2/manifest.json"))
c = m["predicate"]["config"] if "predicate" in m else m["config"]
assert c["ep_ranks"] == 2 and c["cp_ranks"] == 2, (c.get("ep_ranks"), c.get("cp_ranks"))
if shutil.which("zstdcat") is None:
    print("ep_train: config records the grid; no zstdcat to read the trace header")
    sys.exit(0)
h = json.loads(subprocess.run(["zstdcat", f"{d}/cp2ep2/rank-0003/events.jsonl.zst"], capture_output=True,
                              check=True).stdout.split(b"\n", 1)[0])
g = {x["name"]: (x.get("kind"), x["members"]) for x in h["groups"]}
assert g == {"world": ("world", [0, 1, 2, 3]), "cp-e1": ("cp", [1, 3]), "ep-c1": ("ep", [2, 3])}, g
print("ep_train: grid recorded:", g)
PY
echo "ep_train: OK"
