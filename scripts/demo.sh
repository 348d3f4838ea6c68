#!/usr/bin/env bash
# demo.sh - set up, then run the main job: one GRPO step of hybrid-tiny on the
# synthetic key/value retrieval task with a long prompt, in `full` gradient
# mode, writing a run directory with trace, receipt and manifest; then print
# its summary.  Arguments are passed on to longstraw-train.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# idle OpenMP threads should sleep, not spin against OpenBLAS's (read at start-up)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
RUN=${LS_DEMO_RUN:-runs/demo-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$(dirname "$RUN")"
./build/trainer/longstraw-train --config configs/hybrid-tiny.json --prompt-len 8192 \
  --response-len 8 --group 4 --steps 1 --seed 1 --dtype f32 --grad-mode full \
  --strategy longstraw --out "$RUN" "$@"
