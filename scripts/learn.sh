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
#
# LS_LEARN_EXPERIMENT picks the experiment; the variables above override its
# defaults:
#   sft      [the default] the experiment above: each mode its own warm start.
#   control  the same-warm-start control: per seed one warm start with the full
#            gradient (stage 1 as above), then GRPO at P=1024 (250 steps, lr
#            5e-4; no stage 3) in both modes from those same weights.
#   rl       GRPO is the learner: per seed one short full-gradient warm start
#            (LS_LEARN_SFT [200] steps at P=64: the answer format and recall at
#            64 tokens, about chance at 4,096), then in both modes from those
#            same weights GRPO at P=1024 (LS_LEARN_GRPO [60] steps) and at
#            P2=4096 (LS_LEARN_GRPO2 [30] steps), lr LS_LEARN_RL_LR [0.001];
#            the warm start and the end evaluated at 4,096.
# With a shared warm start (control, rl; or LS_LEARN_SHARED_WARM=MODE) it is
# OUT/seed-S/warm*, made once with --grad-mode MODE. LS_LEARN_EVAL [0; rl: 12]
# steps of evaluation (the detached step at lr 0: rollouts of the weights, no
# change; B_RL x G rollouts a step, the same prompts and seeds for every
# checkpoint) at LS_LEARN_EVAL_P [the last GRPO stage's P] of the warm start and of
# every run's final weights. LS_LEARN_COSINE [0; rl: 15]: --grad-cosine-every
# for the GRPO stages (the cosine between the detached and the full gradient of
# the step, docs/train.md).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trainer/longstraw-train ] || LS_CMAKE_ARGS=-DCMAKE_BUILD_TYPE=Release ./scripts/setup.sh
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMP_NUM_THREADS=1
OUT=${1:-runs/learn-$(date +%Y%m%d-%H%M%S)}
EXP=${LS_LEARN_EXPERIMENT:-sft}
# the experiment's defaults: shared warm start mode, sft steps, P, GRPO steps, RL lr, GRPO2 steps, eval, cosine
case $EXP in
  sft) d=("" 800 1024 250 0.0005 40 0 0) ;;
  control) d=(full 800 1024 250 0.0005 0 0 0) ;;
  rl) d=(full 200 1024 60 0.001 30 12 15) ;;
  *) echo "learn: LS_LEARN_EXPERIMENT=$EXP: not sft, control or rl" >&2; exit 2 ;;
esac
SHARED=${LS_LEARN_SHARED_WARM-${d[0]}}
SEEDS=${LS_LEARN_SEEDS:-1 2 3}
MODES=${LS_LEARN_MODES:-full detached}
CONFIG=${LS_LEARN_CONFIG:-configs/hybrid-recall.json}
RECORDS=${LS_LEARN_RECORDS:-2}
Q=${LS_LEARN_QUERIES:-2}
WARM_P=${LS_LEARN_WARM_P:-64}
SFT=${LS_LEARN_SFT:-${d[1]}}
B=${LS_LEARN_B:-8}
LR=${LS_LEARN_LR:-0.003}
P=${LS_LEARN_P:-${d[2]}}
GRPO=${LS_LEARN_GRPO:-${d[3]}}
B_RL=${LS_LEARN_B_RL:-4}
G=${LS_LEARN_G:-8}
RL_LR=${LS_LEARN_RL_LR:-${d[4]}}
P2=${LS_LEARN_P2:-4096}
GRPO2=${LS_LEARN_GRPO2:-${d[5]}}
EVAL=${LS_LEARN_EVAL:-${d[6]}}
EVAL_P=${LS_LEARN_EVAL_P:-$([ "$GRPO2" -eq 0 ] && echo "$P" || echo "$P2")}
COSINE=${LS_LEARN_COSINE:-${d[7]}}
PAR=${LS_LEARN_PARALLEL:-2}
TRAIN=./build/trainer/longstraw-train
TASK=(--config "$CONFIG" --task recall --recall-records "$RECORDS" --response-len "$Q" --train-mode full --beta 0 --quiet)
RLX=()
[ "$COSINE" -gt 0 ] && RLX=(--grad-cosine-every "$COSINE")
mkdir -p "$OUT"

# stage 1 with --grad-mode $2 into $3/warm*, for seed $1
warm() {
  "$TRAIN" "${TASK[@]}" --grad-mode "$2" --objective sft --prompt-len "$WARM_P" --group 1 --prompts-per-step "$B" \
    --steps "$SFT" --lr "$LR" --seed "$1" --out "$3/warm" --metrics "$3/warm.jsonl" --save "$3/warm.safetensors" \
    > "$3/warm.log" 2>&1
}
# the reward of the weights $2 at EVAL_P into $3.jsonl (seed $1): EVAL detached steps at lr 0 (the
# weights do not move; the prompts and rollout seeds are the same for every checkpoint of a seed)
evaluate() {
  "$TRAIN" "${TASK[@]}" --grad-mode detached --prompt-len "$EVAL_P" --group "$G" --prompts-per-step "$B_RL" \
    --steps "$EVAL" --lr 0 --seed "$(($1 + 5000))" --load "$2" --out "$3" --metrics "$3.jsonl" > "$3.log" 2>&1
}
# the shared warm start of seed $1 (and its evaluation), its wall time in OUT/seed-S/warm.times
shared_warm() {
  local D="$OUT/seed-$1" t0
  mkdir -p "$D"
  t0=$(date +%s.%N)
  warm "$1" "$SHARED" "$D"
  echo "$t0 $(date +%s.%N)" > "$D/warm.times"
  if [ "$EVAL" -gt 0 ]; then evaluate "$1" "$D/warm.safetensors" "$D/warm-eval"; fi
}

# one (seed, mode): its stages (stage 1 unless shared), their wall times in D/times
one() {
  local s=$1 m=$2 D="$OUT/seed-$1/$2" W t0 t1 t2 t3
  local save2=()
  [ "$EVAL" -gt 0 ] && save2=(--save "$D/grpo2.safetensors")
  mkdir -p "$D"
  t0=$(date +%s.%N)
  if [ -n "$SHARED" ]; then
    W="$OUT/seed-$s/warm.safetensors"
  else
    warm "$s" "$m" "$D"
    W="$D/warm.safetensors"
    if [ "$EVAL" -gt 0 ]; then evaluate "$s" "$W" "$D/warm-eval"; fi
  fi
  t1=$(date +%s.%N)
  "$TRAIN" "${TASK[@]}" --grad-mode "$m" --prompt-len "$P" --group "$G" --prompts-per-step "$B_RL" \
    --steps "$GRPO" --lr "$RL_LR" --seed "$((s + 1000))" --load "$W" --out "$D/grpo" "${RLX[@]}" \
    --metrics "$D/grpo.jsonl" --save "$D/grpo.safetensors" > "$D/grpo.log" 2>&1
  t2=$(date +%s.%N)
  if [ "$GRPO2" -eq 0 ]; then
    : > "$D/grpo2.jsonl"
  else
    "$TRAIN" "${TASK[@]}" --grad-mode "$m" --prompt-len "$P2" --group "$G" --prompts-per-step "$B_RL" \
      --steps "$GRPO2" --lr "$RL_LR" --seed "$((s + 2000))" --load "$D/grpo.safetensors" --out "$D/grpo2" "${RLX[@]}" \
      --metrics "$D/grpo2.jsonl" "${save2[@]}" > "$D/grpo2.log" 2>&1
  fi
  t3=$(date +%s.%N)
  echo "$t0 $t1 $t2 $t3" > "$D/times"
  if [ "$EVAL" -gt 0 ]; then
    evaluate "$s" "$D/$([ "$GRPO2" -eq 0 ] && echo grpo || echo grpo2).safetensors" "$D/eval"
  fi
}

t_start=$(date +%s)
jobs_running=0
# "$@" in the background, PAR at a time
par() {
  "$@" &
  jobs_running=$((jobs_running + 1))
  if [ "$jobs_running" -ge "$PAR" ]; then wait -n; jobs_running=$((jobs_running - 1)); fi
}
echo "learn: experiment $EXP${SHARED:+ (one warm start per seed, $SHARED gradient, shared by the modes)}" >&2
if [ -n "$SHARED" ]; then
  for s in $SEEDS; do
    echo "learn: seed $s, warm start: $SFT sft steps at P=$WARM_P, $SHARED gradient" >&2
    par shared_warm "$s"
  done
  wait
  jobs_running=0
  # the longest runs first (full), so that the short ones fill the other core
  for m in $MODES; do
    for s in $SEEDS; do
      echo "learn: seed $s, $m gradient: $GRPO GRPO steps at P=$P$([ "$GRPO2" -eq 0 ] || echo ", $GRPO2 at P=$P2")" >&2
      par one "$s" "$m"
    done
  done
else
  for s in $SEEDS; do
    for m in $MODES; do
      echo "learn: seed $s, $m gradient: $SFT sft steps at P=$WARM_P, $GRPO GRPO steps at P=$P, $GRPO2 at P=$P2" >&2
      par one "$s" "$m"
    done
  done
fi
wait
echo "learn: all runs done in $(( ($(date +%s) - t_start) / 60 )) min" >&2

# the table, the joined metrics and the chart
/usr/bin/env python3 - "$OUT" "$SFT" "$WARM_P" "$P" "$B" "$B_RL" "$G" "$Q" "$P2" "$SEEDS" "$MODES" "$SHARED" "$EVAL" "$EVAL_P" <<'EOF'
import json, os, sys
out, sft, warm_p, p, b, b_rl, g, q, p2 = sys.argv[1], *map(int, sys.argv[2:10])
seeds, modes = sys.argv[10].split(), sys.argv[11].split()
shared, n_eval, eval_p = sys.argv[12], int(sys.argv[13]), int(sys.argv[14])
def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")
def times(path):
    return list(map(float, open(path).read().split()))
rows, evals, cosines = [], {}, []
def stage_row(s, m, stage, recs, P_, B_, mins):
    n = max(1, min(len(recs) // 10, 50))
    rw = [r["reward_mean"] for r in recs]
    rows.append((s, m, stage, P_, len(recs), mins, len(recs) * B_ * P_,
                 sum(r["tokens"] for r in recs), mean(rw[:n]), mean(rw[-n:]), n))
for s in seeds:
    if shared:
        sd = os.path.join(out, f"seed-{s}")
        warm_shared = load(os.path.join(sd, "warm.jsonl"))
        w0, w1 = times(os.path.join(sd, "warm.times"))
        stage_row(s, f"{shared} (shared warm start)", "sft", warm_shared, warm_p, b, (w1 - w0) / 60)
        if n_eval:
            evals[(s, "warm start")] = mean([r["reward_mean"] for r in load(os.path.join(sd, "warm-eval.jsonl"))])
    for m in modes:
        d = os.path.join(out, f"seed-{s}", m)
        warm = warm_shared if shared else load(os.path.join(d, "warm.jsonl"))
        grpo, grpo2 = (load(os.path.join(d, n)) for n in ("grpo.jsonl", "grpo2.jsonl"))
        t0, t1, t2, t3 = times(os.path.join(d, "times"))
        with open(os.path.join(d, "metrics.jsonl.tmp"), "w") as f:
            for i, r in enumerate(warm + grpo + grpo2):
                r = {k: v for k, v in r.items() if k != "groups"}
                r["step"] = i
                f.write(json.dumps(r, sort_keys=True) + "\n")
                if "grad_cosine" in r:
                    cosines.append((s, m, i - len(warm), r["grad_cosine"], r["grad_norm_detached"], r["grad_norm_full"]))
        os.replace(os.path.join(d, "metrics.jsonl.tmp"), os.path.join(d, "metrics.jsonl"))
        stages = [("grpo", grpo, p, b_rl, (t2 - t1) / 60), ("grpo", grpo2, p2, b_rl, (t3 - t2) / 60)]
        if not shared:
            stages.insert(0, ("sft", warm, warm_p, b, (t1 - t0) / 60))
        for stage, recs, P_, B_, mins in stages:
            if recs:
                stage_row(s, m, stage, recs, P_, B_, mins)
        if n_eval:
            if not shared:
                evals[(s, f"{m}: warm start")] = mean([r["reward_mean"] for r in load(os.path.join(d, "warm-eval.jsonl"))])
            evals[(s, f"{m}: end")] = mean([r["reward_mean"] for r in load(os.path.join(d, "eval.jsonl"))])
lines = ["| seed | gradient | stage | prompt | steps | minutes | prompt tokens | response tokens trained | reward, first steps | reward, last steps |",
         "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
for s, m, st, P_, n, mins, pt, rt, r0, r1, k in rows:
    lines.append(f"| {s} | {m} | {st} | {P_} | {n} | {mins:.1f} | {pt:,} | {rt:,} | {r0:.3f} (first {k}) | {r1:.3f} (last {k}) |")
for P_ in sorted({r[3] for r in rows if r[2] == "grpo"}):
    for m in modes:
        ends = [r[9] for r in rows if r[1] == m and r[2] == "grpo" and r[3] == P_]
        lines.append(f"{m}: reward over the last GRPO steps at P={P_}, mean of {len(ends)} seed(s): {mean(ends):.3f} (chance 0.100)  ")
if n_eval:
    cols = (["warm start"] if shared else [f"{m}: warm start" for m in modes]) + [f"{m}: end" for m in modes]
    lines += ["", f"Evaluation at P={eval_p}: mean reward of {n_eval} steps x {b_rl * g} rollouts at lr 0 (the same prompts "
              "and rollout seeds for every checkpoint of a seed):", "",
              "| seed | " + " | ".join(cols) + " |", "|---:|" + "---:|" * len(cols)]
    for s in seeds + ["mean"]:
        vals = [evals.get((s, c)) if s != "mean" else mean([evals[(t, c)] for t in seeds]) for c in cols]
        lines.append(f"| {s} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    for m in modes:
        w = f"{m}: warm start" if not shared else "warm start"
        gain = mean([evals[(s, f"{m}: end")] - evals[(s, w)] for s in seeds])
        lines.append(f"{m}: reward at P={eval_p}, end less warm start, mean of {len(seeds)} seed(s): {gain:+.3f}  ")
if cosines:
    lines += ["", "Cosine between the detached and the full gradient of the same step (GRPO step; norms detached / full):", "",
              "| seed | run | GRPO step | cosine | norm detached | norm full |", "|---:|---|---:|---:|---:|---:|"]
    for s, m, i, c, nd, nf in cosines:
        lines.append(f"| {s} | {m} | {i} | {c:.3f} | {nd:.3g} | {nf:.3g} |")
    for m in modes:
        cs = [c for _, mm, _, c, _, _ in cosines if mm == m]
        if cs:
            lines.append(f"{m}: mean cosine over {len(cs)} measured steps: {mean(cs):.3f}  ")
    for s in seeds:
        for m in modes:
            with open(os.path.join(out, f"seed-{s}", m, "cosine.jsonl"), "w") as f:
                for ss, mm, i, c, nd, nf in cosines:
                    if (ss, mm) == (s, m):
                        f.write(json.dumps({"step": i, "grad_cosine": c}) + "\n")
text = "\n".join(lines) + "\n"
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(text)
print(text)
EOF
args=()
cargs=()
for m in $MODES; do
  for s in $SEEDS; do
    args+=(--metrics "$OUT/seed-$s/$m/metrics.jsonl" --label "$m, seed $s" --group "$m")
    [ -s "$OUT/seed-$s/$m/cosine.jsonl" ] && cargs+=(--metrics "$OUT/seed-$s/$m/cosine.jsonl" --label "$m run, seed $s" --group "$m")
  done
done
title="recall from random weights: sft at P=$WARM_P (steps 0-$((SFT - 1))), GRPO at P=$P (to $((SFT + GRPO - 1)))"
[ "$GRPO2" -eq 0 ] || title="$title, then P=$P2"
[ -z "$SHARED" ] || title="$title; one $SHARED-gradient warm start per seed"
./build/trainer/longstraw-plot "${args[@]}" --series reward_mean --smooth 25 --hline 0.1:chance --ymin 0 --ymax 1 \
  --out "$OUT/learning.svg" --title "$title"
if [ ${#cargs[@]} -gt 0 ]; then
  ./build/trainer/longstraw-plot "${cargs[@]}" --series grad_cosine --ymin -1 --ymax 1 --hline 0:zero --out "$OUT/cosine.svg" \
    --title "cosine of the detached and the full gradient of the same GRPO step (every $COSINE steps)"
fi
echo "learn: $OUT/learning.svg, $OUT/table.md" >&2
