#!/bin/bash
# bench_speed.sh - one GRPO step of longstraw-train at long prompts, as a
# fraction of the machine's sgemm rate: the step's FLOPs from the plan
# (longstraw-plan --json, trainer/plan/plan_flops.c: the model's math,
# causal attention over visible keys only) over its measured wall time
# (the receipt's phases), against bench_sgemm (N=1024) measured before and
# after each cell (the lower of the two: a shared machine's).  Prints a
# markdown table; asserts nothing.
#
# --threads N runs the trainer on N OpenMP threads and the sgemm ceiling on
# N OpenBLAS threads (default: OMP_NUM_THREADS, else 2).  --phases adds a
# second table, the per-phase roofline of every cell: the phase's wall time,
# its plan FLOPs and rate, the time those FLOPs take at the sgemm rate, the
# bytes the phase holds (the plan's peak of that phase: every one is touched
# at least once, so a lower bound of the bytes moved) and the time those take
# at the copy rate (bench_sgemm copy, one thread), and which of the two bounds
# is the larger.
#
#   bench/bench_speed.sh [--build DIR] [--config FILE] [--prompts "16384 65536"]
#                        [--modes "detached full"] [--group 4] [--response-len 32]
#                        [--beta 0] [--threads N] [--phases] [--keep DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build CONFIG=$ROOT/configs/hybrid-tiny.json PROMPTS="16384 65536" MODES="detached full"
G=4 R=32 BETA=0 KEEP= THREADS=${OMP_NUM_THREADS:-2} PHASES=0
usage() { echo "usage: bench_speed.sh [--build DIR] [--config FILE] [--prompts \"P ...\"] [--modes \"detached full\"] [--group G] [--response-len R] [--beta B] [--threads N] [--phases] [--keep DIR]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  if [ "$1" = --phases ]; then PHASES=1; shift; continue; fi
  [ $# -ge 2 ] || usage
  case $1 in
    --build) BUILD=$2;; --config) CONFIG=$2;; --prompts) PROMPTS=$2;; --modes) MODES=$2;;
    --group) G=$2;; --response-len) R=$2;; --beta) BETA=$2;; --keep) KEEP=$2;; --threads) THREADS=$2;;
    *) usage;;
  esac
  shift 2
done
for x in trainer/longstraw-train trainer/longstraw-plan bench/bench_sgemm; do
  [ -x "$BUILD/$x" ] || { echo "bench_speed: --build $BUILD: no $x" >&2; exit 2; }
done
[ -r "$CONFIG" ] || { echo "bench_speed: --config $CONFIG: cannot read" >&2; exit 2; }
for m in $MODES; do case $m in detached|full) ;; *) echo "bench_speed: --modes: '$m' is not detached or full" >&2; exit 2;; esac; done
case $THREADS in ''|*[!0-9]*|0) echo "bench_speed: --threads: '$THREADS' is not a positive integer" >&2; exit 2;; esac
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMP_NUM_THREADS=$THREADS
WORK=${KEEP:-$(mktemp -d /tmp/ls-speed.XXXXXX)}
mkdir -p "$WORK"
[ -n "$KEEP" ] || trap 'rm -rf "$WORK"' EXIT
sgemm() { OPENBLAS_NUM_THREADS=$THREADS "$BUILD/bench/bench_sgemm" 1024 2 | awk '{print $NF}'; }
COPY=$("$BUILD/bench/bench_sgemm" copy 256 1 | awk '{print $NF}')
ROOF=$WORK/roofline.md
echo "| P | mode | phase | wall (s) | plan GFLOP | GFLOP/s | at sgemm (s) | held MiB | at copy rate (s) | bound |" > "$ROOF"
echo "|---:|---|---|---:|---:|---:|---:|---:|---:|---|" >> "$ROOF"
echo "bench_speed: $(basename "$CONFIG"), $THREADS thread(s), G $G, R $R, beta $BETA; copy rate $COPY GB/s" >&2
echo "| P | mode | step (s) | capture (s) | prompt_bwd (s) | plan GFLOP | GFLOP/s | sgemm GFLOP/s | fraction | peak MiB |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for P in $PROMPTS; do
  for mode in $MODES; do
    s0=$(sgemm)
    rd=$WORK/run-$P-$mode
    rm -rf "$rd"
    args=(--config "$CONFIG" --prompt-len "$P" --response-len "$R" --group "$G" --grad-mode "$mode" --beta "$BETA")
    "$BUILD/trainer/longstraw-train" "${args[@]}" --steps 1 --quiet --out "$rd" >/dev/null
    "$BUILD/trainer/longstraw-plan" "${args[@]}" --json > "$rd.plan.json"
    s1=$(sgemm)
    /usr/bin/python3 - "$rd" "$P" "$mode" "$s0" "$s1" "$COPY" "$ROOF" <<'PY'
import json, sys
rd, P, mode, s0, s1 = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
copy, roof = float(sys.argv[6]), sys.argv[7]
pred = json.load(open(rd + "/rank-0000/receipt.json"))["predicate"]
ph = {p["phase"]: p["wall_ns_total"] / 1e9 for p in pred["phases"]}
step = sum(ph.values())
plan = json.load(open(rd + ".plan.json"))
flops = sum(p["flops"] for p in plan["phases"] if p["runs"])
ceil = min(s0, s1)
peak = pred["memory"]["per_step"]["total_peak_bytes"] / 2**20
rate = flops / step / 1e9
print("| %s | %s | %.1f | %.1f | %s | %.0f | %.1f | %.1f | %.0f%% | %.1f |" % (
    P, mode, step, ph.get("capture", 0), "%.1f" % ph["prompt_bwd"] if "prompt_bwd" in ph else "-",
    flops / 1e9, rate, ceil, 100 * rate / ceil, peak))
with open(roof, "a") as f:
    for p in plan["phases"]:
        if not p["runs"] or p["phase"] not in ph:
            continue
        wall, gf, held = ph[p["phase"]], p["flops"] / 1e9, p["total"]
        t_flop, t_copy = gf / ceil, held / 1e9 / copy
        f.write("| %s | %s | %s | %.2f | %.1f | %.1f | %.2f | %.1f | %.3f | %s |\n" % (
            P, mode, p["phase"], wall, gf, gf / wall if wall > 0 else 0, t_flop, held / 2**20, t_copy,
            "FLOPs" if t_flop >= t_copy else "bytes"))
PY
  done
done
if [ "$PHASES" = 1 ]; then echo; cat "$ROOF"; fi
