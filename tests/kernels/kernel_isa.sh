#!/usr/bin/env bash
# kernel_isa.sh BUILD_DIR [SCRATCH] - the CPU kernels' ISA (kernels/isa.h) is part of what ran and of what
# parity proves: LS_KERNEL_ISA outside auto|portable|avx2|avx512, or above what the CPU runs, is exit 2
# naming LS_KERNEL_ISA; a run records the ISA it used in its build object (manifest and receipt,
# "kernel_isa"), and runs with two ISAs have two build digests; a parity report --like a run made with the
# portable path (parity --like runs its trainers with the run's ISA) certifies that run (level 4, the
# documented gate) and not the same run made with the CPU's best ISA (level 1, parity.build), since that
# ISA's kernels were never proven, and parity.build names the difference ("kernel_isa: portable vs avx512", the
# report recording the build it ran); --like refuses an LS_KERNEL_ISA other than the run's (exit 2, named).  Where the
# CPU runs only the portable path, the cases that need two ISAs are skipped and say so.
# Each case prints "ok CASE" or "FAIL CASE: why"; exit 1 when any failed.  About 25 s on 2 cores.
set -uo pipefail
B=$(cd "${1:?usage: kernel_isa.sh BUILD_DIR [SCRATCH]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=${2:-$(mktemp -d /tmp/ls-isa.XXXXXX)}
mkdir -p "$T"
export OMP_NUM_THREADS=2
# shellcheck source=tests/support/case_lib.sh
. "$(dirname "$0")/../support/case_lib.sh" # ok, bad, failed, MPI
TRAIN=$B/trainer/longstraw-train SIGN=$B/receipts/longstraw-sign PARITY=$B/parity/longstraw-parity
AUDIT=$B/audit/longstraw-audit
rm -rf "$T/keys" && mkdir -p "$T/keys"
"$SIGN" keygen --private "$T/keys/k.pem" --public "$T/keys/k.pub" >/dev/null || { echo "keygen failed"; exit 1; }
# run NAME ISA: a signed hybrid-tiny run (f32, full, P 160: the attention takes the GEMM-path tiles)
run() {
  local name=$1 isa=$2
  rm -rf "${T:?}/$name"
  LS_KERNEL_ISA=$isa "$TRAIN" --config "$SRC/configs/hybrid-tiny.json" --prompt-len 160 --group 2 --response-len 4 \
    --steps 1 --dtype f32 --grad-mode full --lora-init random --quiet --out "$T/$name" >"$T/$name.log" 2>&1 &&
    "$SIGN" sign "$T/$name" --key "$T/keys/k.pem" >/dev/null 2>&1
}
field() { # RUN KEY: predicate.build.KEY of RUN's manifest
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['predicate']['build'].get(sys.argv[2]))" \
    "$T/$1/manifest.json" "$2" 2>/dev/null
}
for v in avx9 AVX512 " "; do
  rm -rf "$T/refused"
  LS_KERNEL_ISA=$v "$TRAIN" --config "$SRC/configs/hybrid-tiny.json" --out "$T/refused" >"$T/refused.log" 2>&1
  rc=$?
  if [ $rc = 2 ] && grep -q "LS_KERNEL_ISA" "$T/refused.log" && [ ! -e "$T/refused" ]; then ok "LS_KERNEL_ISA='$v': exit 2, named"
  else bad "LS_KERNEL_ISA='$v'" "exit $rc: $(head -c 300 "$T/refused.log")"; fi
done
rm -rf "$T/best"
best=$(LS_KERNEL_ISA=auto "$TRAIN" --config "$SRC/configs/hybrid-tiny.json" --prompt-len 64 --group 2 --response-len 2 \
         --steps 1 --quiet --out "$T/best" >/dev/null 2>&1 && field best kernel_isa)
case $best in portable|avx2|avx512) ok "auto records the CPU's best: $best" ;; *) bad "auto" "kernel_isa '$best'" ;; esac
if [ "$best" != avx512 ]; then
  rm -rf "$T/refused"
  LS_KERNEL_ISA=avx512 "$TRAIN" --config "$SRC/configs/hybrid-tiny.json" --out "$T/refused" >"$T/refused.log" 2>&1
  rc=$?
  [ $rc = 2 ] && grep -q "this CPU runs at most $best" "$T/refused.log" && ok "avx512 on a $best CPU: exit 2" ||
    bad "avx512 above the CPU" "exit $rc: $(head -c 300 "$T/refused.log")"
fi
run port portable || { bad "portable run" "$(tail -c 400 "$T/port.log")"; exit 1; }
[ "$(field port kernel_isa)" = portable ] && ok "a portable run records kernel_isa portable" ||
  bad "portable record" "kernel_isa '$(field port kernel_isa)'"
"$AUDIT" "$T/port" >/dev/null 2>&1 && ok "the record is valid to the audit (schemas)" || bad "schema" "audit of port exit $?"
rm -rf "$T/par"
"$PARITY" --like "$T/port" --out "$T/par" --key "$T/keys/k.pem" --quiet >"$T/par.log" 2>&1 ||
  { bad "parity --like the portable run" "$(tail -c 500 "$T/par.log")"; exit 1; }
rm -rf "$T/par2"
LS_KERNEL_ISA=avx2 "$PARITY" --like "$T/port" --out "$T/par2" --quiet >"$T/par2.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "LS_KERNEL_ISA says avx2" "$T/par2.log" && ok "parity --like a portable run under LS_KERNEL_ISA=avx2: exit 2" ||
  bad "parity --like, another LS_KERNEL_ISA" "exit $rc: $(tail -c 300 "$T/par2.log")"
level() { # RUN: the audit's level of RUN with the report (the documented gate's options)
  "$AUDIT" "$T/$1" --parity "$T/par/parity.json" --key "$T/keys/k.pub" --parity-key "$T/keys/k.pub" \
    --require-signed --json "$T/$1.audit.json" >"$T/$1.audit.txt" 2>&1
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['level'])" "$T/$1.audit.json" 2>/dev/null || echo none
}
l=$(level port)
[ "$l" = 4 ] && ok "the portable run with a report --like it: level 4" ||
  bad "portable level" "level $l: $(grep -m 3 FAIL "$T/port.audit.txt")"
if [ "$best" = portable ]; then
  echo "skip: this CPU runs only the portable kernels (no second ISA to compare)"
else
  run fast "$best" || { bad "$best run" "$(tail -c 400 "$T/fast.log")"; exit 1; }
  [ "$(field fast kernel_isa)" = "$best" ] && [ "$(field fast build_digest)" != "$(field port build_digest)" ] &&
    ok "a $best run records $best, and its build digest is not the portable run's" ||
    bad "$best record" "kernel_isa '$(field fast kernel_isa)', digests $(field fast build_digest) $(field port build_digest)"
  l=$(level fast)
  if [ "$l" = 1 ] && grep -q "parity.build" "$T/fast.audit.txt"; then
    ok "the $best run with the portable run's report: level 1 (parity.build)"
  else bad "$best vs portable report" "level $l: $(grep -m 3 FAIL "$T/fast.audit.txt")"; fi
  # parity.build names what differs: the report records the build it ran (its "build"), and the one
  # difference between the two builds of one binary is the kernels' ISA
  [ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['build'].get('kernel_isa'))" \
        "$T/par/parity.json" 2>/dev/null)" = portable ] && ok "the report records its build object (kernel_isa portable)" ||
    bad "report build" "no build object with kernel_isa portable in $T/par/parity.json"
  # one grep (under pipefail a `grep | grep -q` pipe fails when the second stops early: SIGPIPE)
  if grep -q "parity\.build.*kernel_isa: portable vs $best" "$T/fast.audit.txt"; then
    ok "parity.build names the difference: kernel_isa: portable vs $best"
  else bad "parity.build names kernel_isa" "$(grep -A 3 "FAIL L2 parity.build" "$T/fast.audit.txt" | head -c 800)"; fi
fi
exit $failed
