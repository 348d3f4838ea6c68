#!/usr/bin/env bash
# bench_audit.sh - longstraw-audit's speed and memory (issue 10, Benchmark).
#  1. the original work's shape: a 32-rank CP run (mpirun -np 32
#     --oversubscribe, hybrid-tiny, P=64, G=2, R=2, 2 steps: ~35,400 events in
#     all), audited REPEAT times: median wall time and peak RSS (target < 0.1 s);
#  2. long single-rank traces: a real one-step run's events repeated (steps
#     renumbered, written through receipts' trace writer by
#     bench_audit_reader gen) at SIZES events; for each, the bare reader
#     (ls_trace_read_file, NULL callback) and the whole audit: wall time,
#     events/s and peak RSS (target >= 1M events/s on one core, bounded
#     memory).  The synthetic run's manifest and receipt do not match its
#     trace, so the audit fails those rules: it still loads and evaluates all.
# Prints tables; asserts nothing; not a ctest.
#
#   bench/bench_audit.sh [--sizes "1000000 3000000 10000000"] [--repeat 5]
#                        [--ranks 32] [--build DIR] [--work DIR] [--keep]
# Environment: BENCH_AUDIT_SIZES, BENCH_AUDIT_REPEAT, BENCH_AUDIT_RANKS,
# BENCH_AUDIT_BUILD (build), BENCH_AUDIT_WORK (a fresh temporary directory).
# Needs python3 (timing: perf_counter), /usr/bin/time (peak RSS), zstd,
# mpirun (Open MPI).  About 2 minutes on 2 cores; the 10M trace takes ~0.2 GB.
set -euo pipefail

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }

SIZES=${BENCH_AUDIT_SIZES:-"1000000 3000000 10000000"}
REPEAT=${BENCH_AUDIT_REPEAT:-5}
RANKS=${BENCH_AUDIT_RANKS:-32}
BUILD=${BENCH_AUDIT_BUILD:-build}
WORK=${BENCH_AUDIT_WORK:-}
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --sizes) SIZES=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_audit.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
for v in REPEAT RANKS; do
    case "${!v}" in ''|*[!0-9]*|0) echo "bench_audit.sh: $v='${!v}' is not a positive integer" >&2; exit 2 ;; esac
done
for s in $SIZES; do
    case "$s" in ''|*[!0-9]*|0|1) echo "bench_audit.sh: --sizes: '$s' is not an integer >= 2" >&2; exit 2 ;; esac
done
TRAIN=$BUILD/trainer/longstraw-train AUDIT=$BUILD/audit/longstraw-audit READER=$BUILD/bench/bench_audit_reader
for x in "$TRAIN" "$AUDIT" "$READER"; do
    [ -x "$x" ] || { echo "bench_audit.sh: $x not built (cmake --build $BUILD)" >&2; exit 2; }
done
for c in python3 zstd mpirun; do
    command -v $c >/dev/null || { echo "bench_audit.sh: $c not found" >&2; exit 2; }
done
CONFIG=configs/hybrid-tiny.json
if [ -z "$WORK" ]; then WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench_audit.XXXXXX"); else mkdir -p "$WORK"; fi
[ "$KEEP" = 1 ] || trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# measure N CMD...: runs CMD N times under /usr/bin/time; prints "median wall
# s, median CPU s (user + sys, from wait4), peak RSS KiB (from /usr/bin/time:
# a child's own getrusage would count the forking interpreter too), exit
# status".  CPU time is the figure to trust on a machine shared with other
# work: wall time then includes waiting for a core.
measure() {
    python3 - "$@" <<'PY'
import os, subprocess, sys, tempfile, time
n = int(sys.argv[1]); cmd = sys.argv[2:]
walls, cpus, rss, rc = [], [], 0, 0
fd, tmp = tempfile.mkstemp(); os.close(fd)
for _ in range(n):
    t0 = time.perf_counter()
    p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", tmp] + cmd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    walls.append(time.perf_counter() - t0)
    cpus.append(ru.ru_utime + ru.ru_stime)
    rss = max(rss, int(open(tmp).read().split()[-1]))
    rc = p.returncode
os.unlink(tmp)
walls.sort(); cpus.sort()
print("%.4f %.4f %d %d" % (walls[n // 2], cpus[n // 2], rss, rc))
PY
}
count_events() { # RUN: events in all (every line of every trace but the header)
    local n=0 f c
    for f in "$1"/rank-*/events.jsonl*; do c=$(zstd -dcf "$f" | wc -l); n=$((n + c - 1)); done
    echo $n
}

echo "bench_audit: $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg); work $WORK" >&2
# ---- 1. the original work's shape -------------------------------------------
RUN=$WORK/cp$RANKS
echo "  run: $RANKS ranks, P=64 G=2 R=2, 2 steps" >&2
T0=$(date +%s)
mpirun --oversubscribe --allow-run-as-root -np "$RANKS" "$TRAIN" --config "$CONFIG" --out "$RUN" \
    --prompt-len 64 --steps 2 --group 2 --response-len 2 --quiet > "$WORK/cp.log" 2>&1 ||
    { echo "bench_audit.sh: the $RANKS-rank run failed:" >&2; tail -20 "$WORK/cp.log" >&2; exit 1; }
echo "  ($(( $(date +%s) - T0 )) s)" >&2
EV=$(count_events "$RUN")
BYTES=$(du -sb "$RUN" | cut -f1)
"$AUDIT" "$RUN" --quiet --require-level 1 && VERDICT="level 1 proven" || VERDICT="level 1 NOT proven (rc $?)"
read -r T CPU RSS RC < <(measure "$REPEAT" "$AUDIT" "$RUN" --quiet)
echo
echo "### 1. $RANKS-rank CP run (hybrid-tiny, P=64, G=2, R=2, 2 steps; $VERDICT; load $(cut -d' ' -f1 /proc/loadavg))"
echo
echo "| ranks | events in all | run bytes | audit wall s | audit CPU s | events/CPU s | peak RSS MiB | target < 0.1 s |"
echo "|------:|------:|------:|------:|------:|------:|------:|:------|"
python3 -c "import sys; n,t,c,r=int(sys.argv[1]),float(sys.argv[2]),float(sys.argv[3]),int(sys.argv[4]); print('| %s | %d | %s | %.3f | %.3f | %.2fM | %.1f | %s |' % (sys.argv[5], n, sys.argv[6], t, c, n/c/1e6, r/1024, ('met' if t < 0.1 else 'NOT met') + ' (wall), ' + ('met' if c < 0.1 else 'NOT met') + ' (CPU)'))" \
    "$EV" "$T" "$CPU" "$RSS" "$RANKS" "$BYTES"
echo "(medians of $REPEAT runs; RSS the largest)"

# ---- 2. long traces -----------------------------------------------------------
SRC=$WORK/one
echo "  run: 1 rank, P=64 G=2 R=4, 1 step (the pattern)" >&2
"$TRAIN" --config "$CONFIG" --out "$SRC" --prompt-len 64 --steps 1 --group 2 --response-len 4 --quiet > "$WORK/one.log" 2>&1 ||
    { echo "bench_audit.sh: the pattern run failed:" >&2; tail -20 "$WORK/one.log" >&2; exit 1; }
echo
echo "### 2. Long single-rank traces (a real 1-step run's $(( $(count_events "$SRC") - 1 )) events repeated; zstd, writer frames; load $(cut -d' ' -f1 /proc/loadavg))"
echo
echo "| events | trace MiB | reader wall s | reader CPU s | reader events/CPU s | reader RSS MiB | audit wall s | audit CPU s | audit events/CPU s | audit RSS MiB |"
echo "|------:|------:|------:|------:|------:|------:|------:|------:|------:|------:|"
for N in $SIZES; do
    D=$WORK/syn$N
    rm -rf "$D"
    cp -r "$SRC" "$D"
    rm -f "$D/rank-0000/events.jsonl.zst"
    echo "  gen: $N events" >&2
    "$READER" gen "$SRC/rank-0000/events.jsonl.zst" "$D/rank-0000/events.jsonl.zst" "$N" >/dev/null
    R_REP=$(( REPEAT < 3 ? REPEAT : 3 ))
    [ "$N" -le 3000000 ] || R_REP=1
    read -r RT RC_ RRSS _ < <(measure "$R_REP" "$READER" read "$D/rank-0000/events.jsonl.zst")
    read -r AT AC ARSS _ < <(measure "$R_REP" "$AUDIT" "$D" --quiet)
    python3 -c "import sys; n=int(sys.argv[1]); b=int(sys.argv[2]); rt,rc,at,ac=map(float,(sys.argv[3],sys.argv[4],sys.argv[6],sys.argv[7])); print('| %d | %.1f | %.2f | %.2f | %.2fM | %.1f | %.2f | %.2f | %.2fM | %.1f |' % (n, b/2**20, rt, rc, n/rc/1e6, int(sys.argv[5])/1024, at, ac, n/ac/1e6, int(sys.argv[8])/1024))" \
        "$N" "$(stat -c %s "$D/rank-0000/events.jsonl.zst")" "$RT" "$RC_" "$RRSS" "$AT" "$AC" "$ARSS"
    rm -rf "$D"
done
