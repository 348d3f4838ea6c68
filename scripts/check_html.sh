#!/bin/sh
# check_html.sh FILE [TEXT] - renders an audit page (longstraw-audit --html)
# in a real headless browser (Debian's chromium) and checks that the DOM it
# built has the verdict section (and TEXT in it, when given), at least one
# <svg> and no <script> element.  Exit 0: all there; 1: a check failed;
# 2: usage; 77: no chromium here (ctest counts that as skipped).
set -u
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 FILE.html [EXPECTED_VERDICT_TEXT]" >&2
    exit 2
fi
file=$1
want=${2:-}
browser=
for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
done
if [ -z "$browser" ]; then
    echo "check_html.sh: SKIP: no chromium found; install it with: apt-get install chromium" >&2
    exit 77
fi
if [ ! -f "$file" ]; then
    echo "check_html.sh: $file: no such file" >&2
    exit 2
fi
case $file in /*) abs=$file ;; *) abs=$(pwd)/$file ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_html.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# a private profile and HOME so the browser writes nothing of the user's
HOME=$tmp timeout 60 "$browser" --headless --disable-gpu --no-sandbox --no-first-run \
    --user-data-dir="$tmp/profile" --dump-dom "file://$abs" >"$tmp/dom.html" 2>"$tmp/err.txt"
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$tmp/dom.html" ]; then
    echo "check_html.sh: $browser failed on $file (exit $rc):" >&2
    tail -5 "$tmp/err.txt" >&2
    exit 1
fi
fail=0
grep -q 'id="verdict"' "$tmp/dom.html" || { echo "check_html.sh: $file: no verdict section in the DOM" >&2; fail=1; }
if [ -n "$want" ]; then
    tr '\n' ' ' <"$tmp/dom.html" | sed 's/.*id="verdict"//; s/<\/section>.*//' | grep -qF -- "$want" ||
        { echo "check_html.sh: $file: the verdict does not say \"$want\"" >&2; fail=1; }
fi
grep -qi '<svg' "$tmp/dom.html" || { echo "check_html.sh: $file: no <svg> in the DOM" >&2; fail=1; }
if grep -qi '<script' "$tmp/dom.html"; then
    echo "check_html.sh: $file: a <script> element in the DOM" >&2
    fail=1
fi
[ $fail -eq 0 ] && echo "check_html.sh: $file renders in $browser: verdict and $(grep -oi '<svg' "$tmp/dom.html" | wc -l) svg(s), no script"
exit $fail
