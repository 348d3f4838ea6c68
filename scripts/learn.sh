#!/usr/bin/env bash
# learn.sh - a demo that learns, from random weights, on the built-in
# key/value retrieval task, with full gradients through the prompt state:
#
#   1. warm start (the trainer's own, never weights from elsewhere):
#      --objective sft, cross-entropy on the task's answers through the same
#      capture and replay, on short prompts (a curriculum: one record, so
#      that copying is learnt first);
#   2. GRPO on the same short prompts from the warm-started weights (--load:
#      they become the reference policy, so KL is measured against them);
#   3. GRPO at a prompt of 1,024 tokens (nine records to choose from).
#
# Writes OUT/warm, OUT/grpo-short and OUT/grpo (run directories, each with its metrics.jsonl
# and learning.svg inside, digested by its manifest), OUT/metrics.jsonl (both
# stages, steps numbered on) and OUT/learning.svg (reward, its retrieval and
# format parts, KL), and prints the reward parts at the start and the end of
# each stage.  About 15 minutes on 2 cores.
#
#   scripts/learn.sh [OUT] [extra longstraw-train options for both stages]
# Environment: LS_LEARN_WARM_P (warm-start prompt, 64), LS_LEARN_SFT
# (warm-start steps, 12000), LS_LEARN_P (GRPO prompt, 1024), LS_LEARN_GRPO
# (GRPO steps at P, 150), LS_LEARN_GRPO_SHORT (GRPO steps at the warm-start
# prompt, 300), LS_LEARN_LR (sft, 0.002), LS_LEARN_RL_LR (GRPO, 0.0002).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trainer/longstraw-train ] || LS_CMAKE_ARGS=-DCMAKE_BUILD_TYPE=Release ./scripts/setup.sh
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
OUT=${1:-runs/learn-$(date +%Y%m%d-%H%M%S)}
[ $# -gt 0 ] && shift
WARM_P=${LS_LEARN_WARM_P:-64}
SFT=${LS_LEARN_SFT:-12000}
P=${LS_LEARN_P:-1024}
GRPO=${LS_LEARN_GRPO:-150}
GRPO_SHORT=${LS_LEARN_GRPO_SHORT:-300}
LR=${LS_LEARN_LR:-0.002}
RL_LR=${LS_LEARN_RL_LR:-0.0002}
TRAIN=./build/trainer/longstraw-train
COMMON=(--config configs/hybrid-tiny.json --response-len 8 --train-mode full --grad-mode full)
mkdir -p "$OUT"
t0=$(date +%s)
echo "learn: 1/3 warm start: $SFT sft steps at P=$WARM_P" >&2
# one thread: at 64 tokens and d_model 64 a second one costs more than it gives
OMP_NUM_THREADS=${LS_LEARN_WARM_THREADS:-1} "$TRAIN" "${COMMON[@]}" --lr "$LR" --prompt-len "$WARM_P" --group 1 --steps "$SFT" --objective sft --seed 7 --beta 0 \
  --out "$OUT/warm" --metrics "$OUT/warm/metrics.jsonl" --plot "$OUT/warm/learning.svg" \
  --save "$OUT/warm.safetensors" --quiet "$@"
t1=$(date +%s)
echo "learn: 2/3 GRPO: $GRPO_SHORT steps at P=$WARM_P from the warm-started weights" >&2
"$TRAIN" "${COMMON[@]}" --lr "$RL_LR" --prompt-len "$WARM_P" --group 8 --steps "$GRPO_SHORT" --seed 8 --beta 0.04 \
  --load "$OUT/warm.safetensors" --out "$OUT/grpo-short" --metrics "$OUT/grpo-short/metrics.jsonl" \
  --plot "$OUT/grpo-short/learning.svg" --save "$OUT/grpo-short.safetensors" --quiet "$@"
t2=$(date +%s)
echo "learn: 3/3 GRPO: $GRPO steps at P=$P" >&2
"$TRAIN" "${COMMON[@]}" --lr "$RL_LR" --prompt-len "$P" --group 8 --steps "$GRPO" --seed 9 --beta 0.04 \
  --load "$OUT/grpo-short.safetensors" --out "$OUT/grpo" --metrics "$OUT/grpo/metrics.jsonl" \
  --plot "$OUT/grpo/learning.svg" --quiet "$@"
t3=$(date +%s)
# the three stages in one file, steps numbered on
awk -v a="$SFT" -v b="$((SFT + GRPO_SHORT))" 'FNR == 1 { file++ } {
    off = file == 1 ? 0 : file == 2 ? a : b
    if (match($0, /"step":[0-9]+/)) $0 = substr($0, 1, RSTART + 6) (substr($0, RSTART + 7, RLENGTH - 7) + off) substr($0, RSTART + RLENGTH)
    print }' "$OUT/warm/metrics.jsonl" "$OUT/grpo-short/metrics.jsonl" "$OUT/grpo/metrics.jsonl" > "$OUT/metrics.jsonl"
./build/trainer/longstraw-plot --metrics "$OUT/metrics.jsonl" --out "$OUT/learning.svg" \
  --series reward_retrieval,reward_format,kl_mean --right kl_mean \
  --title "hybrid-tiny from random weights: sft at P=$WARM_P, GRPO at P=$WARM_P, GRPO at P=$P"
# the learning curve's numbers
summary() { # FILE TITLE MINUTES
  awk -v title="$2" -v mins="$3" '
    function num(k) { if (match($0, "\"" k "\":[-0-9.eE+]+")) return substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3) + 0; return 0 }
    { r[NR] = num("reward_retrieval"); f[NR] = num("reward_format"); k[NR] = num("kl_mean") }
    END {
      n = NR < 800 ? int(NR / 4) : 200; if (n < 1) n = 1
      for (i = 1; i <= n; i++) { r0 += r[i]; f0 += f[i] }
      for (i = NR - n + 1; i <= NR; i++) { r1 += r[i]; f1 += f[i]; k1 += k[i] }
      printf "learn: %s: %d steps, %.1f min; means over the first / last %d steps:\n", title, NR, mins, n
      printf "  retrieval %.4f -> %.4f   format %.4f -> %.4f   kl (last) %.4g\n", r0 / n, r1 / n, f0 / n, f1 / n, k1 / n
    }' "$1"
}
summary "$OUT/warm/metrics.jsonl" "warm start, sft, P=$WARM_P" "$(awk -v s=$((t1 - t0)) 'BEGIN { print s / 60 }')"
summary "$OUT/grpo-short/metrics.jsonl" "GRPO, P=$WARM_P" "$(awk -v s=$((t2 - t1)) 'BEGIN { print s / 60 }')"
summary "$OUT/grpo/metrics.jsonl" "GRPO, P=$P" "$(awk -v s=$((t3 - t2)) 'BEGIN { print s / 60 }')"
echo "learn: $(awk -v s=$((t3 - t0)) 'BEGIN { printf "%.1f", s / 60 }') min in all"
echo "learn: a response of random digits scores retrieval 0.08 (format 0.2); the answer scores 0.8 + 0.2"
echo "learn: $OUT/metrics.jsonl, $OUT/learning.svg (runs: $OUT/warm, $OUT/grpo-short, $OUT/grpo)"
