#!/usr/bin/env bash
# bench_groups.sh - --prompts-per-step B: the measured per-step peak memory
# (the receipt's memory.per_step.total_peak_bytes, rank 0) and the seconds
# per step for B = 1, 2, 4, 8 at a fixed prompt length, on one rank and
# under `mpirun -np 2` (CP-2): the peak stays flat in B (one prompt state
# live at a time), the time grows with B.  Prints a table; asserts nothing;
# not a ctest.
#
#   bench/bench_groups.sh [--prompt-len P] [--bs "1 2 4 8"] [--config FILE]
#                         [--group G] [--response-len R] [--grad-mode M]
#                         [--steps S] [--build DIR] [--no-mpi]
# Defaults: P 4096, B "1 2 4 8", configs/hybrid-tiny.json, G 4, R 8, full,
# 2 steps (seconds per step = the run's step phases / S), f32, LoRA,
# OMP_NUM_THREADS=1 (set it to override), `mpirun --oversubscribe`.
set -euo pipefail
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
P=4096 BS="1 2 4 8" CONFIG=configs/hybrid-tiny.json G=4 R=8 MODE=full STEPS=2 BUILD=build MPI=1
while [ $# -gt 0 ]; do
    case "$1" in
    --prompt-len) P=$2; shift 2 ;;
    --bs) BS=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --group) G=$2; shift 2 ;;
    --response-len) R=$2; shift 2 ;;
    --grad-mode) MODE=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --no-mpi) MPI=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_groups.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
for v in P G R STEPS; do
    case "${!v}" in ''|*[!0-9]*) echo "bench_groups.sh: $v='${!v}' is not a positive integer" >&2; exit 2 ;; esac
done
TRAIN=$BUILD/trainer/longstraw-train
[ -x "$TRAIN" ] || { echo "bench_groups.sh: $TRAIN not built" >&2; exit 2; }
[ "$MPI" = 0 ] || command -v mpirun >/dev/null || { echo "bench_groups.sh: mpirun not found (use --no-mpi)" >&2; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/bench_groups.XXXXXX")
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ROOT=()
[ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)
figures() { # run dir -> "peak_bytes seconds_per_step"
    /usr/bin/python3 - "$1" "$STEPS" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/rank-0000/receipt.json"))["predicate"]
peak = d["memory"]["per_step"]["total_peak_bytes"]
wall = sum(p["wall_ns_total"] for p in d["phases"])  # every phase of every step, optimizer included
print(peak, "%.3f" % (wall * 1e-9 / int(sys.argv[2])))
PY
}
echo "bench_groups: $(basename "$CONFIG") P=$P G=$G R=$R $MODE, $STEPS steps, f32, OMP_NUM_THREADS=$OMP_NUM_THREADS"
printf '| ranks | B | per-step peak (bytes) | vs B = 1 | s / step |\n|---:|---:|---:|---:|---:|\n'
for np in 1 2; do
    [ "$np" = 2 ] && [ "$MPI" = 0 ] && continue
    base=
    for B in $BS; do
        args=(--config "$CONFIG" --prompt-len "$P" --group "$G" --response-len "$R" --grad-mode "$MODE"
              --steps "$STEPS" --prompts-per-step "$B" --quiet --out "$W/n$np-b$B")
        if [ "$np" = 1 ]; then "$TRAIN" "${args[@]}" >/dev/null
        else mpirun --oversubscribe "${ROOT[@]}" -np 2 "$TRAIN" "${args[@]}" >/dev/null; fi
        read -r peak secs < <(figures "$W/n$np-b$B")
        [ -n "$base" ] || base=$peak
        printf '| %s | %s | %s | %s | %s |\n' "$np" "$B" "$peak" \
            "$(/usr/bin/python3 -c "import sys; print('%+.2f%%' % (100.0*(int(sys.argv[1])-int(sys.argv[2]))/int(sys.argv[2])))" "$peak" "$base")" "$secs"
    done
done
