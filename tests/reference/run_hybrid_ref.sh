#!/bin/sh
# End-to-end reference check of the hybrid family (ctest hybrid_reference).
#   run_hybrid_ref.sh SRC_DIR BUILD_DIR [TRAINER]
# Feeds one external rollout group (no old_logprobs, so the trainer scores them) to
# longstraw-train in float64 with random LoRA-B (so policy != reference), then lets
# tests/reference/hybrid_ref.py recompute old/ref log-probs, advantages and the loss
# from MODEL.md alone. Twice: with the trainer's initial weights, and with every
# RMSNorm weight perturbed and loaded back through --load (the initial norm weights
# are 0 / 1, which would not tell 1+w from w).
# Exit: hybrid_ref.py's code (0 agree, 1 mismatch), 2 on bad usage or a trainer failure.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 SRC_DIR BUILD_DIR [TRAINER]" >&2
  exit 2
fi
SRC=$1
BUILD=$2
TRAIN=${3:-$BUILD/trainer/longstraw-train}
REF=$SRC/tests/reference/hybrid_ref.py
CONFIG=$SRC/configs/hybrid-tiny.json
if [ -x /usr/bin/python3 ]; then
  PY=/usr/bin/python3
elif command -v python3 >/dev/null 2>&1; then
  PY=$(command -v python3)
else
  echo "run_hybrid_ref: no python3" >&2
  exit 2
fi
if [ ! -x "$TRAIN" ]; then
  echo "run_hybrid_ref: trainer $TRAIN not built" >&2
  exit 2
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/hybrid_ref.XXXXXX") || exit 2
keep=0
cleanup() { if [ $keep -eq 0 ]; then rm -rf "$TMP"; else echo "run_hybrid_ref: kept $TMP" >&2; fi; }
trap cleanup EXIT

# 40 prompt tokens, three responses of 3, 5 and 4 tokens, distinct rewards.
cat > "$TMP/rollouts.jsonl" <<'JSON'
{"prompt":[130,183,14,238,127,26,80,57,190,240,126,194,52,127,6,110,208,143,93,199,81,36,71,227,64,67,0,2,107,110,84,85,148,160,101,104,93,100,196,152],"responses":[[11,184,212],[84,74,135,33,169],[154,1,173,33]],"rewards":[1.0,0.0,0.5]}
JSON

# train NAME [extra trainer args]: one step; leaves $TMP/NAME.{safetensors,json,log}
train() {
  name=$1
  shift
  if ! "$TRAIN" --config "$CONFIG" --rollouts "$TMP/rollouts.jsonl" --dtype f64 \
      --lora-init random --train-mode lora --temperature 0.9 --out "$TMP/run-$name" \
      --save-init "$TMP/$name.safetensors" --dump-batch "$TMP/$name.json" --quiet "$@" \
      > "$TMP/$name.log" 2>&1; then
    cat "$TMP/$name.log" >&2
    echo "run_hybrid_ref: longstraw-train failed ($name)" >&2
    keep=1
    exit 2
  fi
  cat "$TMP/$name.log"
  # the printed step-1 loss ("...: loss 0.004673, grad-norm ...") is at ratio 1
  LOSS=$(sed -n 's/.*: loss \([-+0-9.eEnaif]*\),.*/\1/p' "$TMP/$name.log" | head -n 1)
  [ -n "$LOSS" ] || echo "run_hybrid_ref: note: no printed loss found, loss not compared"
}

refcheck() {
  "$PY" "$REF" "$@"
  rc=$?
  if [ $rc -ne 0 ]; then
    keep=1
    exit $rc
  fi
}

echo "== initial weights"
train init
refcheck "$TMP/init.safetensors" "$TMP/init.json" ${LOSS:+--expect-loss "$LOSS"}

echo "== perturbed RMSNorm weights, loaded with --load"
refcheck --perturb-norms "$TMP/init.safetensors" "$TMP/perturbed.safetensors" 7
train pert --load "$TMP/perturbed.safetensors"
refcheck "$TMP/pert.safetensors" "$TMP/pert.json" --require-perturbed-norms ${LOSS:+--expect-loss "$LOSS"}
exit 0
