#!/usr/bin/env bash
# learn.sh - a demo that learns: trains hybrid-tiny from random weights on
# the built-in key/value retrieval task (prompt >= 1,024 tokens) with full
# gradients through the prompt state: a supervised warm start made by the
# trainer itself (--sft-steps: cross-entropy on the task's answers through
# the same capture and replay), then GRPO.  Writes the run directory with
# metrics.jsonl and learning.svg (reward, its retrieval and format parts,
# and KL per step) inside it, then prints the retrieval and format parts at
# the start and the end.  About 15 minutes on 2 cores.
#
#   scripts/learn.sh [RUN_DIR] [extra longstraw-train options]
# Environment: LS_LEARN_SFT (warm-start steps), LS_LEARN_GRPO (GRPO steps),
# LS_LEARN_P (prompt length), LS_LEARN_LR.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trainer/longstraw-train ] || LS_CMAKE_ARGS=-DCMAKE_BUILD_TYPE=Release ./scripts/setup.sh
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
RUN=${1:-runs/learn-$(date +%Y%m%d-%H%M%S)}
[ $# -gt 0 ] && shift
SFT=${LS_LEARN_SFT:-1200}
GRPO=${LS_LEARN_GRPO:-200}
P=${LS_LEARN_P:-1024}
LR=${LS_LEARN_LR:-0.003}
mkdir -p "$(dirname "$RUN")"
start=$(date +%s)
./build/trainer/longstraw-train --config configs/hybrid-tiny.json --prompt-len "$P" \
  --response-len 8 --group 8 --steps $((SFT + GRPO)) --sft-steps "$SFT" --seed 1 \
  --train-mode full --grad-mode full --lr "$LR" --top-p 1 --beta 0.04 \
  --out "$RUN" --metrics "$RUN/metrics.jsonl" --plot "$RUN/learning.svg" "$@"
end=$(date +%s)
# the learning curve's numbers: reward parts over the first and last 50 steps
awk -v mins="$(( (end - start + 30) / 60 ))" '
  function num(k,   m) { if (match($0, "\"" k "\":[-0-9.eE+]+")) return substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3); return 0 }
  { r[NR] = num("reward_retrieval"); f[NR] = num("reward_format"); k[NR] = num("kl_mean") }
  END {
    n = NR < 50 ? NR : 50
    for (i = 1; i <= n; i++) { r0 += r[i]; f0 += f[i] }
    for (i = NR - n + 1; i <= NR; i++) { r1 += r[i]; f1 += f[i]; k1 += k[i] }
    printf "learn: %d steps in about %d min; mean over the first / last %d steps:\n", NR, mins, n
    printf "  retrieval %.4f -> %.4f (a random digit string scores 0.08)\n", r0 / n, r1 / n
    printf "  format    %.4f -> %.4f (at most 0.2)\n", f0 / n, f1 / n
    printf "  kl        %.4g (last %d GRPO steps)\n", k1 / n, n
  }' "$RUN/metrics.jsonl"
echo "learn: metrics $RUN/metrics.jsonl, plot $RUN/learning.svg"
