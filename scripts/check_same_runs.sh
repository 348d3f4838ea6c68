#!/usr/bin/env bash
# check_same_runs.sh - fingerprints of a fixed set of recorded runs, to prove
# that a change which must not change behaviour (a refactor) does not: run it
# on the build before and after and diff the two files.
#
#   scripts/check_same_runs.sh BUILD_DIR OUT_FILE
#
# The runs: both families (configs/hybrid-tiny.json, configs/mla-tiny.json), f32
# and f64, `full` and `detached` gradients, one rank and `mpirun -np 2`; each one
# supervised step and one GRPO step with random adapters (so that every
# gradient is non-zero).  Per run, OUT_FILE gets the SHA-256 of:
#   - the checkpoint, the step-1 gradients, the step-1 batch and the initial
#     weights (byte for byte);
#   - the metrics JSONL, each rank's trace events and each rank's receipt, with
#     what a rerun changes anyway left out: wall-clock times, rates, ids, host,
#     pid, resident set sizes, the build's identity.
# Two builds of one source give the same file; so must a refactor.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR OUT_FILE" >&2; exit 2; }
build=$(cd "$1" && pwd)
out=$2
train=$build/trainer/longstraw-train
[ -x "$train" ] || { echo "$0: $train: not built" >&2; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)

# the JSON of a receipt or trace line, without the fields a rerun changes
filter=$(cat <<'PY'
import json, sys
DROP = {"ts_ns", "wall_ns", "wall_ns_total", "pid", "start_unix_ns", "end_unix_ns", "run_id", "host",
        "tokens_per_s", "step_wall_s", "rss_peak", "rss_peak_bytes", "rss_bytes", "build", "timing", "executable", "subject"}
def clean(o):
    if isinstance(o, dict):
        return {k: clean(v) for k, v in o.items() if k not in DROP}
    if isinstance(o, list):
        return [clean(v) for v in o]
    return o
for line in sys.stdin:
    if line.strip():
        print(json.dumps(clean(json.loads(line)), sort_keys=True))
PY
)
canon() { python3 -c "$filter" | sha256sum | cut -d' ' -f1; }

: > "$work/out"
for fam in hybrid-tiny mla-tiny; do
  for dt in f32 f64; do
    for mode in full detached; do
      for np in 1 2; do
        name=$fam.$dt.$mode.np$np
        d=$work/$name
        mkdir -p "$d"
        launch=()
        [ "$np" -eq 1 ] || launch=("${mpi[@]}")
        "${launch[@]}" "$train" --config "$src/configs/$fam.json" --out "$d/run" --prompt-len 160 \
          --response-len 4 --group 2 --steps 2 --sft-steps 1 --seed 5 --dtype "$dt" --grad-mode "$mode" \
          --lora-init random --save "$d/ckpt" --dump-grads "$d/grads" --dump-batch "$d/batch" \
          --save-init "$d/init" --metrics "$d/metrics" --quiet > "$d/log" 2>&1 \
          || { cat "$d/log" >&2; echo "$0: $name failed" >&2; exit 1; }
        for f in ckpt grads batch init; do
          echo "$name $f $(sha256sum < "$d/$f" | cut -d' ' -f1)" >> "$work/out"
        done
        echo "$name metrics $(canon < "$d/metrics")" >> "$work/out"
        for r in "$d"/run/rank-*; do
          rk=$(basename "$r")
          echo "$name $rk/events $(zstd -qdc "$r/events.jsonl.zst" | canon)" >> "$work/out"
          echo "$name $rk/receipt $(python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' \
            < "$r/receipt.json" | canon)" >> "$work/out"
        done
      done
    done
  done
done
mv "$work/out" "$out"
echo "$0: $(wc -l < "$out") fingerprints of 16 runs in $out"
