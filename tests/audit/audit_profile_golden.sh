#!/usr/bin/env bash
# audit_profile_golden.sh - the audit's reports of real v1 runs, byte for byte.
#
# tests/data/profile_golden/ holds small runs of longstraw-train (make_runs.sh
# says how they were made), a parity report, and what longstraw-audit said of
# each before its rules took their requirements from profiles/ (stdout, --json,
# --junit, exit status).  Each case of cases.txt is audited again from that
# directory (so every path in the reports is the same relative one) and every
# output must equal the expected bytes.
#
# usage: audit_profile_golden.sh AUDIT [--update]
#   AUDIT     the longstraw-audit executable
#   --update  write the outputs as the expected ones instead (only with the
#             audit whose reports are the reference)
set -uo pipefail
AUDIT=$(realpath "$1")
update=0
[ "${2:-}" = "--update" ] && update=1
here=$(cd "$(dirname "$0")/../data/profile_golden" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$here" || exit 2
mkdir -p expected
fail=0
n=0
while read -r name args; do
    case "$name" in ''|'#'*) continue ;; esac
    n=$((n + 1))
    # shellcheck disable=SC2086 # args are words
    "$AUDIT" $args --json "$out/$name.json" --junit "$out/$name.junit.xml" > "$out/$name.txt" 2> "$out/$name.err"
    echo $? > "$out/$name.rc"
    if [ -s "$out/$name.err" ]; then
        echo "FAIL $name: stderr: $(head -c 300 "$out/$name.err")"
        fail=1
    fi
    for ext in txt json junit.xml rc; do
        if [ $update = 1 ]; then
            cp "$out/$name.$ext" "expected/$name.$ext"
        elif ! cmp -s "$out/$name.$ext" "expected/$name.$ext"; then
            echo "FAIL $name.$ext differs from expected/$name.$ext:"
            diff -u "expected/$name.$ext" "$out/$name.$ext" | head -40
            fail=1
        fi
    done
done < cases.txt
if [ $n -lt 10 ]; then echo "FAIL: only $n cases read from cases.txt"; exit 1; fi
[ $fail = 0 ] && echo "audit_profile_golden: $n cases, every report byte-identical"
exit $fail
