#!/bin/sh
# ep_train.sh - expert parallelism of longstraw-train (--ep, trainer/dist/ep.h):
# one step's dumped gradients (--dump-grads) and the checkpoint after two
# steps (--save: weights and AdamW moments) of EP-2, EP-4 (-np 4) and
# CP-2 x EP-2 (-np 4) compared tensor by tensor (tests/ep_compare.py) with
# the EP-1 run of the same CP size: BITWISE, because every rank combines
# every token from the same expert rows in the order a one-rank run does and
# every gradient sum is the same fixed-order sum (the EP exchange moves rows,
# it adds nothing).  CP-2 x EP-2 against one rank (CP-1) agrees to 1e-12
# only: CP's sums over shards round differently (docs/cp.md), not EP's.
# The fault ep-drop-dx (the last EP rank returns zero input gradients for
# its experts' rows) must make the comparison fail.  The objective is sft,
# so that step 1's gradient is not zero (GRPO's first step on the task has
# zero advantages and the policy equals the reference).
# usage: ep_train.sh TRAINER MPIEXEC "MPIRUN_FLAGS" SOURCE_DIR
set -eu
T=$1; MPI=$2; FLAGS=$3; SRC=$4
D=$(mktemp -d /tmp/ls-ep-XXXXXX)
trap 'rm -rf "$D"' EXIT
CMP="python3 $SRC/tests/ep_compare.py"
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
