#!/usr/bin/env bash
# code_search.sh - code search sees the LS_K definitions (scripts/code_index.sh, .ctags.d/longstraw.ctags).
#
#   tests/tools/code_search.sh SRC WORK
#
# Copies the tree SRC (no build trees, no .git, no index) to WORK/clean, builds its indexes and looks
# up a kernel defined with LS_K (KERNEL in FILE): by its expanded names (ctags: KERNEL_f64 a
# function, KERNEL_f32; cscope: the global definition of KERNEL_f64, and a trainer source among its
# callers) and by its LS_K name (ctags: KERNEL).  Then the self-test: the same copy without the
# configuration must fail those look-ups (else they prove nothing).  Exit 0 pass, 1 fail, 2 usage, 77 skipped
# (no ctags or cscope).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: code_search.sh SRC WORK" >&2; exit 2; }
SRC=$(cd "$1" && pwd)
WORK=$2
KERNEL=ls_attn_block_forward
FILE=kernels/cpu/attention.c
for tool in ctags cscope readtags; do
  command -v "$tool" >/dev/null || { echo "code_search: $tool not found: skipped" >&2; exit 77; }
done
grep -q "^[A-Za-z_].*LS_K($KERNEL)(" "$SRC/$FILE" ||
  { echo "code_search: $FILE no longer defines LS_K($KERNEL): pick another kernel" >&2; exit 1; }

# a caller that writes LS_K(KERNEL)(...): a trainer source
CALLER=$(cd "$SRC" && grep -rl --include='*.c' "LS_K($KERNEL)(" trainer | LC_ALL=C sort | head -1)
[ -n "$CALLER" ] || { echo "code_search: no trainer source calls LS_K($KERNEL): pick another kernel" >&2; exit 1; }

# the look-ups: every failure is printed; the count is the exit status
lookups() { # DIR
  local d=$1 bad=0
  # ctags: the float64 name is a function defined in FILE, the float32 and LS_K names point at it too
  readtags -t "$d/tags" -e "${KERNEL}_f64" | grep -P "^${KERNEL}_f64\t$FILE\t.*\tkind:f(\t|$)" >/dev/null ||
    { echo "  ctags: ${KERNEL}_f64 is not a function of $FILE" >&2; bad=$((bad + 1)); }
  readtags -t "$d/tags" -e "${KERNEL}_f32" | grep -P "^${KERNEL}_f32\t$FILE\t" >/dev/null ||
    { echo "  ctags: ${KERNEL}_f32 does not lead to $FILE" >&2; bad=$((bad + 1)); }
  readtags -t "$d/tags" -e "${KERNEL}" | grep -P "^${KERNEL}\t$FILE\t" >/dev/null ||
    { echo "  ctags: the LS_K name ${KERNEL} does not lead to $FILE" >&2; bad=$((bad + 1)); }
  # cscope: the global definition, and a caller written LS_K(KERNEL)(...)
  (cd "$d" && cscope -d -L -1 "${KERNEL}_f64") | grep -q "^$FILE ${KERNEL}_f64 " ||
    { echo "  cscope: no global definition of ${KERNEL}_f64 in $FILE" >&2; bad=$((bad + 1)); }
  (cd "$d" && cscope -d -L -3 "${KERNEL}_f64") | grep -q "^$CALLER " ||
    { echo "  cscope: $CALLER is not among the callers of ${KERNEL}_f64" >&2; bad=$((bad + 1)); }
  return $bad
}

rm -rf "$WORK"
mkdir -p "$WORK/clean"
tar -C "$SRC" --exclude='./.git' --exclude='./build*' --exclude='./.code-index' --exclude='./tags' \
    --exclude='./cscope.*' -cf - . | tar -C "$WORK/clean" -xf -
[ -f "$WORK/clean/.ctags.d/longstraw.ctags" ] || { echo "code_search: $SRC/.ctags.d/longstraw.ctags: missing" >&2; exit 1; }
bash "$WORK/clean/scripts/code_index.sh" "$WORK/clean" 2>"$WORK/index.log" ||
  { cat "$WORK/index.log" >&2; echo "code_search: scripts/code_index.sh failed" >&2; exit 1; }
if ! lookups "$WORK/clean"; then
  echo "code_search: FAIL: the index of a clean tree does not find $KERNEL (above)" >&2
  exit 1
fi
echo "code_search: ${KERNEL}, ${KERNEL}_f32 and ${KERNEL}_f64 found in $FILE; cscope's definition and caller too"

# self-test: without the configuration the same look-ups must fail
rm "$WORK/clean/.ctags.d/longstraw.ctags"
bash "$WORK/clean/scripts/code_index.sh" "$WORK/clean" 2>"$WORK/index-bare.log" ||
  { cat "$WORK/index-bare.log" >&2; echo "code_search: scripts/code_index.sh failed without the configuration" >&2; exit 1; }
set +e
lookups "$WORK/clean" 2>"$WORK/bare-lookups.log"
missed=$?
set -e
if [ "$missed" -ne 5 ]; then
  cat "$WORK/bare-lookups.log" >&2
  echo "code_search: FAIL (self-test): without .ctags.d/longstraw.ctags only $missed of 5 look-ups failed" >&2
  exit 1
fi
echo "code_search: self-test: without the configuration all 5 look-ups fail, as they must"
