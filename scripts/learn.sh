#!/usr/bin/env bash
# learn.sh - a demo that learns, from random weights, on the built-in
# key/value retrieval task, with full gradients through the prompt state:
#
#   1. warm start (the trainer's own, never weights from elsewhere):
#      --objective sft, cross-entropy on the task's answers through the same
#      capture and replay, on short prompts (a curriculum: one record, so
#      that copying is learnt first);
#   2. GRPO at a prompt of 1,024 tokens from the warm-started weights (--load:
#      they become the reference policy, so KL is measured against them).
#
# Writes OUT/warm and OUT/grpo (run directories, each with its metrics.jsonl
# and learning.svg inside, digested by its manifest), OUT/metrics.jsonl (both
# stages, steps numbered on) and OUT/learning.svg (reward, its retrieval and
# format parts, KL), and prints the reward parts at the start and the end of
# each stage.  About 15 minutes on 2 cores.
#
#   scripts/learn.sh [OUT] [extra longstraw-train options for both stages]
# Environment: LS_LEARN_WARM_P (warm-start prompt, 64), LS_LEARN_SFT
# (warm-start steps, 9000), LS_LEARN_P (GRPO prompt, 1024), LS_LEARN_GRPO
# (GRPO steps, 150), LS_LEARN_LR (0.002).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trainer/longstraw-train ] || LS_CMAKE_ARGS=-DCMAKE_BUILD_TYPE=Release ./scripts/setup.sh
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
OUT=${1:-runs/learn-$(date +%Y%m%d-%H%M%S)}
[ $# -gt 0 ] && shift
WARM_P=${LS_LEARN_WARM_P:-64}
SFT=${LS_LEARN_SFT:-9000}
P=${LS_LEARN_P:-1024}
GRPO=${LS_LEARN_GRPO:-150}
LR=${LS_LEARN_LR:-0.002}
TRAIN=./build/trainer/longstraw-train
COMMON=(--config configs/hybrid-tiny.json --response-len 8 --train-mode full --grad-mode full --lr "$LR")
mkdir -p "$OUT"
t0=$(date +%s)
echo "learn: 1/2 warm start: $SFT sft steps at P=$WARM_P" >&2
"$TRAIN" "${COMMON[@]}" --prompt-len "$WARM_P" --group 1 --steps "$SFT" --objective sft --seed 7 --beta 0 \
  --out "$OUT/warm" --metrics "$OUT/warm/metrics.jsonl" --plot "$OUT/warm/learning.svg" \
  --save "$OUT/warm.safetensors" --quiet "$@"
t1=$(date +%s)
echo "learn: 2/2 GRPO: $GRPO steps at P=$P from the warm-started weights" >&2
"$TRAIN" "${COMMON[@]}" --prompt-len "$P" --group 8 --steps "$GRPO" --seed 8 --beta 0.04 \
  --load "$OUT/warm.safetensors" --out "$OUT/grpo" --metrics "$OUT/grpo/metrics.jsonl" \
  --plot "$OUT/grpo/learning.svg" --quiet "$@"
t2=$(date +%s)
# both stages in one file, the GRPO steps numbered on after the warm start's
awk -v off="$SFT" 'FNR == NR { print; next } {
    if (match($0, /"step":[0-9]+/)) $0 = substr($0, 1, RSTART + 6) (substr($0, RSTART + 7, RLENGTH - 7) + off) substr($0, RSTART + RLENGTH)
    print }' "$OUT/warm/metrics.jsonl" "$OUT/grpo/metrics.jsonl" > "$OUT/metrics.jsonl"
./build/trainer/longstraw-plot --metrics "$OUT/metrics.jsonl" --out "$OUT/learning.svg" \
  --series reward_retrieval,reward_format,kl_mean --right kl_mean \
  --title "hybrid-tiny from random weights: sft warm start at P=$WARM_P, then GRPO at P=$P"
# the learning curve's numbers
summary() { # FILE TITLE MINUTES
  awk -v title="$2" -v mins="$3" '
    function num(k) { if (match($0, "\"" k "\":[-0-9.eE+]+")) return substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3) + 0; return 0 }
    { r[NR] = num("reward_retrieval"); f[NR] = num("reward_format"); k[NR] = num("kl_mean") }
    END {
      n = NR < 200 ? int(NR / 4) : 200; if (n < 1) n = 1
      for (i = 1; i <= n; i++) { r0 += r[i]; f0 += f[i] }
      for (i = NR - n + 1; i <= NR; i++) { r1 += r[i]; f1 += f[i]; k1 += k[i] }
      printf "learn: %s: %d steps, %.1f min; means over the first / last %d steps:\n", title, NR, mins, n
      printf "  retrieval %.4f -> %.4f   format %.4f -> %.4f   kl (last) %.4g\n", r0 / n, r1 / n, f0 / n, f1 / n, k1 / n
    }' "$1"
}
summary "$OUT/warm/metrics.jsonl" "warm start, sft, P=$WARM_P" "$(awk -v s=$((t1 - t0)) 'BEGIN { print s / 60 }')"
summary "$OUT/grpo/metrics.jsonl" "GRPO, P=$P" "$(awk -v s=$((t2 - t1)) 'BEGIN { print s / 60 }')"
echo "learn: a response of random digits scores retrieval 0.08 (format 0.2); the answer scores 0.8 + 0.2"
echo "learn: $OUT/metrics.jsonl, $OUT/learning.svg (runs: $OUT/warm, $OUT/grpo)"
