#!/bin/bash
# learn_mini.sh - the learning experiment in miniature (docs/learning.md): a hybrid model from random
# weights (fixed seed) learns multi-query associative recall, so that a change that breaks learning
# fails CI.  About a minute on one core:
#  1. warm start, --objective sft at P = 64 (2 records, 2 queries, 8 prompts a step, 450 steps): the mean
#     reward of the last 100 steps must exceed chance (0.1) by 0.15, and the first 50 steps' must not
#     (the model starts at chance: a task whose answer leaks without the prompt would show here);
#  2. GRPO at P = 256 from those weights (4 prompts of 8 members a step, 30 steps): the mean reward
#     must stay above chance by 0.15.
# The reward is the rollout's (sampled at temperature 1), read from the metrics files.
# LS_LEARN_MINI_LR (default 0.003) sets the warm start's learning rate: the fault test runs it at 0 and
# expects "did not learn".
#   learn_mini.sh BUILD_DIR CONFIG
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: learn_mini.sh BUILD_DIR CONFIG" >&2; exit 2; }
TRAIN=$1/trainer/longstraw-train CONFIG=$2
[ -x "$TRAIN" ] || { echo "learn_mini: $TRAIN: not built" >&2; exit 2; }
W=$(mktemp -d /tmp/ls-learn-mini.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
T() { "$TRAIN" --config "$CONFIG" --task recall --recall-records 2 --response-len 2 --train-mode full \
        --grad-mode full --beta 0 --quiet "$@"; }
T --objective sft --prompt-len 64 --group 1 --prompts-per-step 8 --steps 450 --lr "${LS_LEARN_MINI_LR:-0.003}" --seed 1 \
  --out "$W/warm" --metrics "$W/warm.jsonl" --save "$W/warm.safetensors"
T --prompt-len 256 --group 8 --prompts-per-step 4 --steps 30 --lr 0.0005 --seed 1001 \
  --load "$W/warm.safetensors" --out "$W/grpo" --metrics "$W/grpo.jsonl"
/usr/bin/python3 - "$W/warm.jsonl" "$W/grpo.jsonl" <<'PY'
import json, sys
def rewards(path):
    with open(path) as f:
        return [json.loads(line)["reward_mean"] for line in f if line.strip()]
def mean(xs):
    return sum(xs) / len(xs)
warm, grpo = rewards(sys.argv[1]), rewards(sys.argv[2])
chance, margin = 0.1, 0.15
first, last, rl = mean(warm[:50]), mean(warm[-100:]), mean(grpo)
print(f"learn_mini: sft reward first 50 steps {first:.3f}, last 100 steps {last:.3f}; "
      f"GRPO at P=256 {rl:.3f} over {len(grpo)} steps; chance {chance}")
bad = []
if len(warm) != 450 or len(grpo) != 30: bad.append(f"steps: {len(warm)} sft, {len(grpo)} GRPO (expected 450, 30)")
if first >= chance + margin: bad.append(f"the sft run starts above chance ({first:.3f}): the answer leaks")
if last <= chance + margin: bad.append(f"the sft run did not learn: last 100 steps {last:.3f} <= {chance + margin}")
if rl <= chance + margin: bad.append(f"GRPO at P=256 fell to {rl:.3f} <= {chance + margin}")
for b in bad: print("learn_mini: FAIL: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
