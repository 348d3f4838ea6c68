#!/usr/bin/env bash
# bench_probe.sh - the in-run gradient probe's cost and accuracy (longstraw-train
# --probe-every 1, docs/train.md "The gradient probe"): per family, dtype and
# prompt length, one fault-free full-mode step (LoRA, random B) with its probe:
# the step's time (the receipt's phases: capture .. optimizer, the probe not
# among them), the probe's (its gradient_probe event's seconds, rank 0), their
# ratio, the evaluations it made (4 per direction tried), the step h its
# differences ended at, its verdict and rel_error against its tolerance.
# Prints a table; asserts nothing; not a ctest.
#
#   bench/bench_probe.sh [--prompt-lens "8192"] [--configs "hybrid-tiny mla-tiny"]
#                        [--dtypes "f64 f32"] [--group G] [--response-len R]
#                        [--ranks N] [--seed S] [--build DIR]
# Defaults: P 8192, both tiny configs, f64 and f32, G 4, R 8, one rank
# (--ranks 2: under mpirun), seed 1, OMP_NUM_THREADS=1 (set it to override).
set -euo pipefail
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
PS="8192" CONFIGS="hybrid-tiny mla-tiny" DTYPES="f64 f32" G=4 R=8 NP=1 SEED=1 BUILD=build
while [ $# -gt 0 ]; do
    case "$1" in
    --prompt-lens) PS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --dtypes) DTYPES=$2; shift 2 ;;
    --group) G=$2; shift 2 ;;
    --response-len) R=$2; shift 2 ;;
    --ranks) NP=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_probe.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
for v in G R NP SEED; do
    case "${!v}" in ''|*[!0-9]*) echo "bench_probe.sh: $v='${!v}' is not a positive integer" >&2; exit 2 ;; esac
done
TRAIN=$BUILD/trainer/longstraw-train
[ -x "$TRAIN" ] || { echo "bench_probe.sh: $TRAIN not built" >&2; exit 2; }
command -v zstd >/dev/null || { echo "bench_probe.sh: zstd not found" >&2; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/bench_probe.XXXXXX")
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
LAUNCH=()
if [ "$NP" != 1 ]; then
    command -v mpirun >/dev/null || { echo "bench_probe.sh: mpirun not found" >&2; exit 2; }
    LAUNCH=(mpirun --oversubscribe -np "$NP")
    [ "$(id -u)" = 0 ] && LAUNCH+=(--allow-run-as-root)
fi
figures() { # run dir -> one table row's figures
    zstd -dc "$1/rank-0000/events.jsonl.zst" | /usr/bin/python3 -c '
import json, sys
rec = json.load(open(sys.argv[1] + "/rank-0000/receipt.json"))["predicate"]
step = sum(p["wall_ns_total"] for p in rec["phases"]) * 1e-9
pr = [e for e in map(json.loads, sys.stdin.read().splitlines()[1:]) if e.get("ev") == "gradient_probe"][0]
g = max(pr["groups"], key=lambda g: g["rel_error"])
print("%.2f | %.2f | %.2f | %d | %.3g | %s | %.2g | %.2g |" % (step, pr["seconds"], pr["seconds"] / step,
      pr["evaluations"], g["h"], pr["verdict"], g["rel_error"], g["tolerance"]))' "$1"
}
echo "bench_probe: G=$G R=$R, full, LoRA (random B), seed $SEED, $NP rank(s), OMP_NUM_THREADS=$OMP_NUM_THREADS, $(date -u +%F)"
printf '| config | dtype | P | step s | probe s | probe / step | evaluations | h | verdict | rel_error | tolerance |\n'
printf '|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|\n'
for cfg in $CONFIGS; do
    for dt in $DTYPES; do
        for P in $PS; do
            out=$W/$cfg-$dt-$P
            if ! "${LAUNCH[@]}" "$TRAIN" --config "configs/$cfg.json" --prompt-len "$P" --group "$G" --response-len "$R" \
                --steps 1 --seed "$SEED" --dtype "$dt" --grad-mode full --train-mode lora --lora-init random \
                --probe-every 1 --quiet --out "$out" >"$out.log" 2>&1; then
                echo "| $cfg | $dt | $P | the run failed: $(tail -1 "$out.log") |"
                continue
            fi
            echo "| $cfg | $dt | $P | $(figures "$out")"
        done
    done
done
