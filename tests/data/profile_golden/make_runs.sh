#!/usr/bin/env bash
# make_runs.sh - how the committed v1 runs of tests/data/profile_golden/ were
# made (kept for the record: the test never runs it).  Every run is a real
# longstraw-train run, small (P=64, R=3, G=2), of each family, one rank and
# CP-2 under mpirun, full and detached, SFT, naive, prefix-frozen, external
# rollouts, each trainer fault and a killed rank, a probed run and the
# stale-start fault under the probe; parity/hybrid.json is a real
# longstraw-parity --like report of the run h2-f64-covered (its model, CP 1
# and 2, float64, its path: responses sampled, the reference kept), which
# covers it.  Regenerating them gives new
# run ids and times: then regenerate the expected reports with
#   tests/audit/audit_profile_golden.sh BUILD_DIR --update
# (with the audit of the commit BEFORE any change to the rules).
#
# usage: make_runs.sh BUILD_DIR   (run from tests/data/profile_golden/)
set -euo pipefail
B=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
TRAIN=$B/trainer/longstraw-train
MPI=(env OMP_NUM_THREADS=1 mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
H=$SRC/configs/hybrid-tiny.json
M=$SRC/configs/mla-tiny.json
BASE=(--prompt-len 64 --response-len 3 --group 2 --quiet)
rm -rf runs parity && mkdir -p runs parity
exec 2>/dev/null # the trainer's summaries
one() { local name=$1; shift; "$TRAIN" "$@" "${BASE[@]}" --out "runs/$name" || true; }
# external rollouts: the file holds the prompt and the group
rollouts() { local name=$1; shift; "$TRAIN" "$@" --quiet --out "runs/$name" || true; }
two() { local name=$1; shift; "${MPI[@]}" -np 2 "$TRAIN" "$@" "${BASE[@]}" --out "runs/$name" || true; }

one h1-full        --config "$H" --steps 1 --grad-mode full
one h1-det-sft     --config "$H" --steps 2 --grad-mode detached --sft-steps 1
one h1-naive       --config "$H" --steps 1 --grad-mode full --strategy naive
one h1-frozen      --config "$H" --steps 2 --grad-mode detached --prefix-frozen 2
one h1-nan         --config "$H" --steps 2 --grad-mode full --fault nan-grad
python3 - > rollouts.jsonl <<'PY'
import json
lines = [{"prompt": list(range(1, 40)), "responses": [[5, 6, 7], [8, 9]], "rewards": [1.0, 0.0]},
         {"prompt": list(range(2, 41)), "responses": [[3, 4], [5, 6, 7]], "rewards": [0.0, 1.0]}]
for l in lines:
    print(json.dumps(l))
PY
rollouts h1-rollouts --config "$H" --grad-mode full --rollouts rollouts.jsonl
rm -f rollouts.jsonl
two h2-full        --config "$H" --steps 1 --grad-mode full
two h2-skip-dkv    --config "$H" --steps 1 --grad-mode full --fault skip-dkv-reduce
two h2-skip-fin    --config "$H" --steps 1 --grad-mode full --fault skip-grad-finalize
two h2-local-attn  --config "$H" --steps 1 --grad-mode full --fault cp-local-attention
two h2-kill        --config "$H" --steps 1 --grad-mode full --fault kill-rank=1@replay
two h2-f64-covered --config "$H" --steps 1 --grad-mode full --dtype f64 --temperature 0.9
two h2-probed      --config "$H" --steps 2 --grad-mode full --dtype f64 --lora-init random --probe-every 1
two h2-stale       --config "$H" --steps 1 --grad-mode full --dtype f64 --lora-init random --probe-every 1 \
                   --fault cp-stale-start
one m1-full        --config "$M" --steps 1 --grad-mode full
two m2-full        --config "$M" --steps 1 --grad-mode full
two m2-det-sft     --config "$M" --steps 2 --grad-mode detached --sft-steps 1
two m2-local-dsa   --config "$M" --steps 1 --grad-mode full --fault cp-local-dsa
OMP_NUM_THREADS=1 "$B/parity/longstraw-parity" --like runs/h2-f64-covered --configs p30-g2-lora \
    --out parity/work --quiet --jobs 2
mv parity/work/parity.json parity/hybrid.json
rm -rf parity/work
