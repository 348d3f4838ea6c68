#!/usr/bin/env bash
# demo.sh - set up, then run the main job and prove it:
#  1. one full-gradient GRPO step of hybrid-tiny on the synthetic key/value
#     retrieval task with an 8192-token prompt (longstraw-train: trace,
#     receipt, manifest), its gradient probed at that size (--probe-every 1);
#  2. longstraw-parity --like that run: the reduced-size evidence for levels
#     2-4, covering the run's model, trainable set, objective, dtype, CP size
#     and path (its own sampling, scoring and reference, run the way the run did);
#  3. a key made for the demo signs both (longstraw-sign sign, parity --key);
#  4. longstraw-audit with that key trusted and --require-signed: the verdict,
#     its assurance, and an HTML report.
# Everything lands in $LS_DEMO_DIR (default runs/demo-DATE): run/, parity/,
# keys/, audit.html, audit.json.  Arguments are passed on to longstraw-train.
# A key made inside the demo proves only that nothing changed after signing
# (docs/evidence.md: key handling); a CI trusts keys it checked in.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# idle OpenMP threads should sleep, not spin against OpenBLAS's (read at start-up)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # parity's CP-2 runs, as root on a fresh machine
DIR=${LS_DEMO_DIR:-runs/demo-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$DIR"
B=build
SECONDS=0

echo "== 1/4 training: one full-gradient step, P = 8192 ($DIR/run)"
$B/trainer/longstraw-train --config configs/hybrid-tiny.json --prompt-len 8192 \
  --response-len 8 --group 4 --steps 1 --seed 1 --dtype f32 --grad-mode full \
  --strategy longstraw --probe-every 1 --out "$DIR/run" "$@"
t_train=$SECONDS

echo "== 2/4 a key for this demo ($DIR/keys)"
mkdir -p "$DIR/keys"
rm -f "$DIR/keys/demo.pem" "$DIR/keys/demo.pub"
$B/receipts/longstraw-sign keygen --private "$DIR/keys/demo.pem" --public "$DIR/keys/demo.pub"
$B/receipts/longstraw-sign sign "$DIR/run" --key "$DIR/keys/demo.pem"

echo "== 3/4 parity --like the run: reduced-size evidence covering it ($DIR/parity)"
rc=0
$B/parity/longstraw-parity --like "$DIR/run" --out "$DIR/parity" --key "$DIR/keys/demo.pem" --quiet || rc=$?
if [ $rc -eq 2 ]; then echo "demo: longstraw-parity could not run (exit 2)" >&2; exit 2; fi
t_parity=$((SECONDS - t_train))

echo "== 4/4 the audit: signed run and report, keys trusted"
rc=0
$B/audit/longstraw-audit "$DIR/run" --parity "$DIR/parity/parity.json" \
  --key "$DIR/keys/demo.pub" --parity-key "$DIR/keys/demo.pub" --require-signed --require-level 4 --require-probe \
  --html "$DIR/audit.html" --json "$DIR/audit.json" > "$DIR/audit.txt" || rc=$?
head -9 "$DIR/audit.txt"
tail -2 "$DIR/audit.txt"
echo
echo "demo: training ${t_train} s, parity ${t_parity} s, $SECONDS s in all"
echo "demo: the verdict in full: $DIR/audit.txt; the HTML report: $DIR/audit.html"
exit $rc
