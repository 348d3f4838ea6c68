#!/usr/bin/env bash
# bench_replay.sh - --replay-checkpoint none against layer and chunk (docs/train.md): per family, the
# replay phase's seconds, the step's seconds, the branch graph's peak and the step's measured peak (rank
# 0's receipt) beside the step plan's peak, for each mode, and the ratios layer/none and chunk/none of the
# same run order (none, layer, chunk, none, ...: the median of RUNS triples).  Prints a table; asserts
# nothing; not a ctest.
#
#   bench/bench_replay.sh [--prompt-len P] [--group G] [--response-len R] [--grad-mode M]
#                         [--chunk C] [--runs N] [--build DIR]
# Defaults: P 2048, G 4, R 512, full, C 64, 3 triples, OMP_NUM_THREADS=2 (set it to override), f32, LoRA.
set -euo pipefail
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
P=2048 G=4 R=512 MODE=full RUNS=3 BUILD=build C=64
while [ $# -gt 0 ]; do
    case "$1" in
    --prompt-len) P=$2; shift 2 ;;
    --group) G=$2; shift 2 ;;
    --response-len) R=$2; shift 2 ;;
    --grad-mode) MODE=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --chunk) C=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_replay.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
for v in P G R RUNS C; do
    case "${!v}" in ''|*[!0-9]*|0) echo "bench_replay.sh: $v='${!v}' is not a positive integer" >&2; exit 2 ;; esac
done
case "$MODE" in detached|full) ;; *) echo "bench_replay.sh: --grad-mode '$MODE': detached or full" >&2; exit 2 ;; esac
TRAIN=$BUILD/trainer/longstraw-train
[ -x "$TRAIN" ] || { echo "bench_replay.sh: $TRAIN not built" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
W=$(mktemp -d "${TMPDIR:-/tmp}/bench_replay.XXXXXX")
trap 'rm -rf "$W"' EXIT
echo "P=$P G=$G R=$R $MODE, chunks of $C, $RUNS triple(s), OMP_NUM_THREADS=$OMP_NUM_THREADS, $(date -u +%Y-%m-%d), commit $(git -C "$(dirname "$0")/.." rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "| family | replay | replay phase (s) | step (s) | branch_graph peak (MiB) | step peak (MiB) | plan (MiB) | plan/measured |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for fam in hybrid mla; do
    for i in $(seq 1 "$RUNS"); do
        for rc in none layer chunk; do
            rm -rf "$W/$fam-$rc-$i"
            "$TRAIN" --config "configs/$fam-tiny.json" --prompt-len "$P" --group "$G" --response-len "$R" --steps 1 \
                --grad-mode "$MODE" --replay-checkpoint "$rc" --replay-chunk "$C" --quiet --out "$W/$fam-$rc-$i" >/dev/null
        done
    done
    python3 - "$W" "$fam" "$RUNS" <<'PY'
import json, statistics, sys
w, fam, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def one(rc, i):
    r = json.load(open("%s/%s-%s-%d/rank-0000/receipt.json" % (w, fam, rc, i)))["predicate"]
    ph = {p["phase"]: p["wall_ns_total"] / 1e9 for p in r["phases"]}
    return (ph.get("replay", 0), sum(ph.values()), r["memory"]["run"]["categories"]["branch_graph"]["peak_bytes"],
            r["memory"]["per_step"]["total_peak_bytes"], r["rank_state"]["memory_plan"]["peak_bytes"])
rows = {rc: [one(rc, i) for i in range(1, runs + 1)] for rc in ("none", "layer", "chunk")}
for rc in ("none", "layer", "chunk"):
    m = [statistics.median(x[k] for x in rows[rc]) for k in range(5)]
    print("| %s | %s | %.3f | %.3f | %.2f | %.2f | %.2f | %.3f |" % (fam, rc, m[0], m[1], m[2] / 2**20, m[3] / 2**20,
                                                                m[4] / 2**20, m[4] / m[3]))
for rc in ("layer", "chunk"):
    ratio = lambda k: statistics.median(b[k] / a[k] for a, b in zip(rows["none"], rows[rc]))
    print("| %s | %s/none | %.2fx | %.2fx | %.2fx | %.2fx | | |" % (fam, rc, ratio(0), ratio(1), ratio(2), ratio(3)))
PY
done
