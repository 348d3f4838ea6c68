#!/usr/bin/env bash
# learn.sh - the learning experiment (docs/learning.md): a hybrid model from
# random weights learns multi-query associative recall (--task recall) at a
# long prompt, with the full gradient through the prompt state, and the same
# run with the original work's detached gradient as the control: same
# seeds, schedule and budget, only --grad-mode differs.
#
# Per seed and gradient mode, three runs of longstraw-train:
#   1. warm start (the trainer's own, never weights from elsewhere):
#      --objective sft on WARM_P-token prompts, B prompts per step;
#   2. GRPO at P tokens from the warm-started weights (--load), B_RL prompts
#      of G members per step;
#   3. GRPO at P2 tokens from stage 2's weights (skipped when GRPO2 is 0).
# The two modes of a seed run side by side, one thread each.
#
# Writes OUT/seed-S/MODE/{warm,grpo} (run directories with their metrics),
# OUT/seed-S/MODE/metrics.jsonl (both stages, steps numbered on),
# OUT/learning.svg (the reward of every run: a smoothed line over faint raw
# points, chance marked), OUT/table.md (reward at the start and end of each
# stage, minutes, steps, tokens) and prints the table.
#
#   scripts/learn.sh [OUT]
# Environment (defaults in brackets): LS_LEARN_SEEDS [1 2 3], LS_LEARN_MODES
# [full detached], LS_LEARN_CONFIG [configs/hybrid-recall.json],
# LS_LEARN_RECORDS [2], LS_LEARN_QUERIES [2], LS_LEARN_WARM_P [64],
# LS_LEARN_SFT [800], LS_LEARN_B [8], LS_LEARN_LR [0.003], LS_LEARN_P [1024],
# LS_LEARN_GRPO [250], LS_LEARN_B_RL [4], LS_LEARN_G [8],
# LS_LEARN_RL_LR [0.0005], LS_LEARN_P2 [4096], LS_LEARN_GRPO2 [40],
# LS_LEARN_PARALLEL [2: runs at a time].
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trainer/longstraw-train ] || LS_CMAKE_ARGS=-DCMAKE_BUILD_TYPE=Release ./scripts/setup.sh
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMP_NUM_THREADS=1
OUT=${1:-runs/learn-$(date +%Y%m%d-%H%M%S)}
SEEDS=${LS_LEARN_SEEDS:-1 2 3}
MODES=${LS_LEARN_MODES:-full detached}
CONFIG=${LS_LEARN_CONFIG:-configs/hybrid-recall.json}
RECORDS=${LS_LEARN_RECORDS:-2}
Q=${LS_LEARN_QUERIES:-2}
WARM_P=${LS_LEARN_WARM_P:-64}
SFT=${LS_LEARN_SFT:-800}
B=${LS_LEARN_B:-8}
LR=${LS_LEARN_LR:-0.003}
P=${LS_LEARN_P:-1024}
GRPO=${LS_LEARN_GRPO:-250}
B_RL=${LS_LEARN_B_RL:-4}
G=${LS_LEARN_G:-8}
RL_LR=${LS_LEARN_RL_LR:-0.0005}
P2=${LS_LEARN_P2:-4096}
GRPO2=${LS_LEARN_GRPO2:-40}
PAR=${LS_LEARN_PARALLEL:-2}
TRAIN=./build/trainer/longstraw-train
TASK=(--config "$CONFIG" --task recall --recall-records "$RECORDS" --response-len "$Q" --train-mode full --beta 0 --quiet)
mkdir -p "$OUT"

# one (seed, mode): both stages, their wall times in D/times
one() {
  local s=$1 m=$2 D="$OUT/seed-$1/$2" t0 t1 t2 t3
  mkdir -p "$D"
  t0=$(date +%s.%N)
  "$TRAIN" "${TASK[@]}" --grad-mode "$m" --objective sft --prompt-len "$WARM_P" --group 1 --prompts-per-step "$B" \
    --steps "$SFT" --lr "$LR" --seed "$s" --out "$D/warm" --metrics "$D/warm.jsonl" --save "$D/warm.safetensors" \
    > "$D/warm.log" 2>&1
  t1=$(date +%s.%N)
  "$TRAIN" "${TASK[@]}" --grad-mode "$m" --prompt-len "$P" --group "$G" --prompts-per-step "$B_RL" \
    --steps "$GRPO" --lr "$RL_LR" --seed "$((s + 1000))" --load "$D/warm.safetensors" --out "$D/grpo" \
    --metrics "$D/grpo.jsonl" --save "$D/grpo.safetensors" > "$D/grpo.log" 2>&1
  t2=$(date +%s.%N)
  if [ "$GRPO2" -eq 0 ]; then
    : > "$D/grpo2.jsonl"
  else
    "$TRAIN" "${TASK[@]}" --grad-mode "$m" --prompt-len "$P2" --group "$G" --prompts-per-step "$B_RL" \
      --steps "$GRPO2" --lr "$RL_LR" --seed "$((s + 2000))" --load "$D/grpo.safetensors" --out "$D/grpo2" \
      --metrics "$D/grpo2.jsonl" > "$D/grpo2.log" 2>&1
  fi
  t3=$(date +%s.%N)
  echo "$t0 $t1 $t2 $t3" > "$D/times"
}

t_start=$(date +%s)
jobs_running=0
for s in $SEEDS; do
  for m in $MODES; do
    echo "learn: seed $s, $m gradient: $SFT sft steps at P=$WARM_P, $GRPO GRPO steps at P=$P, $GRPO2 at P=$P2" >&2
    one "$s" "$m" &
    jobs_running=$((jobs_running + 1))
    if [ "$jobs_running" -ge "$PAR" ]; then wait -n; jobs_running=$((jobs_running - 1)); fi
  done
done
wait
echo "learn: all runs done in $(( ($(date +%s) - t_start) / 60 )) min" >&2

# the table, the joined metrics and the chart
/usr/bin/env python3 - "$OUT" "$SFT" "$WARM_P" "$P" "$B" "$B_RL" "$G" "$Q" "$P2" "$SEEDS" "$MODES" <<'EOF'
import json, os, sys
out, sft, warm_p, p, b, b_rl, g, q, p2 = sys.argv[1], *map(int, sys.argv[2:10])
seeds, modes = sys.argv[10].split(), sys.argv[11].split()
def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")
rows = []
for s in seeds:
    for m in modes:
        d = os.path.join(out, f"seed-{s}", m)
        warm, grpo, grpo2 = (load(os.path.join(d, n)) for n in ("warm.jsonl", "grpo.jsonl", "grpo2.jsonl"))
        t0, t1, t2, t3 = map(float, open(os.path.join(d, "times")).read().split())
        with open(os.path.join(d, "metrics.jsonl.tmp"), "w") as f:
            for i, r in enumerate(warm + grpo + grpo2):
                r = {k: v for k, v in r.items() if k != "groups"}
                r["step"] = i
                f.write(json.dumps(r, sort_keys=True) + "\n")
        os.replace(os.path.join(d, "metrics.jsonl.tmp"), os.path.join(d, "metrics.jsonl"))
        for stage, recs, P_, B_, members, mins in (("sft", warm, warm_p, b, 1, (t1 - t0) / 60),
                                                    ("grpo", grpo, p, b_rl, g, (t2 - t1) / 60),
                                                    ("grpo", grpo2, p2, b_rl, g, (t3 - t2) / 60)):
            if not recs:
                continue
            n = max(1, min(len(recs) // 10, 50))
            rw = [r["reward_mean"] for r in recs]
            rows.append((s, m, stage, P_, len(recs), mins, len(recs) * B_ * P_,
                         sum(r["tokens"] for r in recs), mean(rw[:n]), mean(rw[-n:]), n))
lines = ["| seed | gradient | stage | prompt | steps | minutes | prompt tokens | response tokens trained | reward, first steps | reward, last steps |",
         "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
for s, m, st, P_, n, mins, pt, rt, r0, r1, k in rows:
    lines.append(f"| {s} | {m} | {st} | {P_} | {n} | {mins:.1f} | {pt:,} | {rt:,} | {r0:.3f} (first {k}) | {r1:.3f} (last {k}) |")
for P_ in sorted({r[3] for r in rows if r[2] == "grpo"}):
    for m in modes:
        ends = [r[9] for r in rows if r[1] == m and r[2] == "grpo" and r[3] == P_]
        lines.append(f"{m}: reward over the last GRPO steps at P={P_}, mean of {len(ends)} seed(s): {mean(ends):.3f} (chance 0.100)  ")
text = "\n".join(lines) + "\n"
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(text)
print(text)
EOF
args=()
for m in $MODES; do
  for s in $SEEDS; do args+=(--metrics "$OUT/seed-$s/$m/metrics.jsonl" --label "$m, seed $s" --group "$m"); done
done
./build/trainer/longstraw-plot "${args[@]}" --series reward_mean --smooth 25 --hline 0.1:chance --ymin 0 --ymax 1 \
  --out "$OUT/learning.svg" \
  --title "recall from random weights: sft at P=$WARM_P (steps 0-$((SFT - 1))), GRPO at P=$P (to $((SFT + GRPO - 1))), then P=$P2"
echo "learn: $OUT/learning.svg, $OUT/table.md" >&2
