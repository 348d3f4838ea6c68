#!/bin/bash
# learn_mini.sh - the learning experiment in miniature (docs/learning.md, "GRPO as the learner"): a hybrid
# model from random weights (fixed seed) gets a short warm start that does not solve the task at length, and
# GRPO with the full gradient must then raise the reward at the long prompt, so that a change that breaks RL
# learning fails CI.  About a minute and a half on one core:
#  1. warm start, --objective sft at P = 64 (2 records, 2 queries, 8 prompts a step, 300 steps, the full
#     gradient): the first 50 steps' mean reward must be at chance (a task whose answer leaks without the
#     prompt would show here) and the last 50 steps' above chance by 0.1 (the answer format is learnt);
#  2. the warm start's reward at P = 1024: 12 detached steps at lr 0 (rollouts only: 12 x 4 prompts x 8
#     members, the same prompts and seeds as the check of step 4);
#  3. GRPO at P = 1024 from those weights, the full gradient (4 prompts of 8 members a step, 40 steps, lr 1e-3);
#  4. the same evaluation of GRPO's weights: it must exceed the warm start's by 0.15 (GRPO learnt).
# The reward is the rollout's (sampled at temperature 1), read from the metrics files.
# LS_LEARN_MINI_LR (default 0.003) sets the warm start's learning rate and LS_LEARN_MINI_RL_LR (default
# 0.001) GRPO's: the fault tests run them at 0 and expect "did not learn" and "GRPO did not raise".
#   learn_mini.sh BUILD_DIR CONFIG
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: learn_mini.sh BUILD_DIR CONFIG" >&2; exit 2; }
TRAIN=$1/trainer/longstraw-train CONFIG=$2
[ -x "$TRAIN" ] || { echo "learn_mini: $TRAIN: not built" >&2; exit 2; }
W=$(mktemp -d /tmp/ls-learn-mini.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
SFT=300 PL=1024 EVAL=12 RL=40
T() { "$TRAIN" --config "$CONFIG" --task recall --recall-records 2 --response-len 2 --train-mode full \
        --beta 0 --quiet "$@"; }
E() { T --grad-mode detached --prompt-len $PL --group 8 --prompts-per-step 4 --steps $EVAL --lr 0 --seed 5001 \
        --load "$1" --out "$W/$2" --metrics "$W/$2.jsonl"; }
T --grad-mode full --objective sft --prompt-len 64 --group 1 --prompts-per-step 8 --steps $SFT \
  --lr "${LS_LEARN_MINI_LR:-0.003}" --seed 1 --out "$W/warm" --metrics "$W/warm.jsonl" --save "$W/warm.safetensors"
# the warm start's own checks first: a warm start that did not learn (or leaks the answer) fails here, before
# the GRPO stage that could only inherit the fault
/usr/bin/python3 - "$W/warm.jsonl" $SFT <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    warm = [json.loads(line)["reward_mean"] for line in f if line.strip()]
sft, chance, bad = int(sys.argv[2]), 0.1, []
first, last = (sum(x) / len(x) for x in (warm[:50], warm[-50:])) if len(warm) >= 50 else (0.0, 0.0)
if len(warm) != sft: bad.append(f"steps: {len(warm)} sft (expected {sft})")
if first >= chance + 0.15: bad.append(f"the sft run starts above chance ({first:.3f}): the answer leaks")
if last <= chance + 0.1: bad.append(f"the sft run did not learn: last 50 steps {last:.3f} <= {chance + 0.1}")
for b in bad: print("learn_mini: FAIL: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
E "$W/warm.safetensors" warm-eval
T --grad-mode full --prompt-len $PL --group 8 --prompts-per-step 4 --steps $RL --lr "${LS_LEARN_MINI_RL_LR:-0.001}" \
  --seed 1001 --load "$W/warm.safetensors" --out "$W/grpo" --metrics "$W/grpo.jsonl" --save "$W/grpo.safetensors"
E "$W/grpo.safetensors" grpo-eval
/usr/bin/python3 - "$W" $SFT $EVAL $RL $PL <<'PY'
import json, os, sys
w, sft, n_eval, rl, pl = sys.argv[1], *map(int, sys.argv[2:])
def rewards(name):
    with open(os.path.join(w, name)) as f:
        return [json.loads(line)["reward_mean"] for line in f if line.strip()]
def mean(xs):
    return sum(xs) / len(xs)
warm, ev0, grpo, ev1 = (rewards(n) for n in ("warm.jsonl", "warm-eval.jsonl", "grpo.jsonl", "grpo-eval.jsonl"))
chance = 0.1
first, last, r0, r1 = mean(warm[:50]), mean(warm[-50:]), mean(ev0), mean(ev1)
print(f"learn_mini: sft at P=64 reward first 50 steps {first:.3f}, last 50 {last:.3f}; at P={pl}: warm start "
      f"{r0:.3f}, after {len(grpo)} GRPO steps {r1:.3f} (GRPO's own rollouts: first 5 steps {mean(grpo[:5]):.3f}, "
      f"last 5 {mean(grpo[-5:]):.3f}); chance {chance}")
bad = []
if (len(warm), len(ev0), len(grpo), len(ev1)) != (sft, n_eval, rl, n_eval):
    bad.append(f"steps: {len(warm)} sft, {len(ev0)} + {len(ev1)} eval, {len(grpo)} GRPO (expected {sft}, {n_eval}, {rl})")
if first >= chance + 0.15: bad.append(f"the sft run starts above chance ({first:.3f}): the answer leaks")
if last <= chance + 0.1: bad.append(f"the sft run did not learn: last 50 steps {last:.3f} <= {chance + 0.1}")
if r1 - r0 < 0.15: bad.append(f"GRPO did not raise the reward at P={pl}: {r0:.3f} -> {r1:.3f} (less than +0.15)")
for b in bad: print("learn_mini: FAIL: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
