#!/usr/bin/env bash
# bench_parity.sh - wall time of longstraw-parity's default matrix and of
# each of its parts (issue 11, Benchmark: it should fit a CI job, under 10
# minutes on 2 cores).  Runs `longstraw-parity --family hybrid` (CP 1,2,4,
# float64 and float32, both configurations) into a fresh directory and
# prints the report's timings as a table, with the whole run's wall and CPU
# time and its verdict.  Asserts nothing; not a ctest.
#
#   bench/bench_parity.sh [--build DIR] [--work DIR] [--keep] [-- PARITY_ARGS...]
# Environment: BENCH_PARITY_BUILD (build), BENCH_PARITY_WORK (a fresh
# temporary directory).  Needs python3, mpirun.  About 3 minutes on 2 cores.
set -euo pipefail
BUILD=${BENCH_PARITY_BUILD:-build}
WORK=${BENCH_PARITY_WORK:-}
KEEP=0
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_parity.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
PARITY=$BUILD/parity/longstraw-parity
[ -x "$PARITY" ] || { echo "bench_parity.sh: $PARITY not built (cmake --build $BUILD)" >&2; exit 2; }
for c in python3 mpirun; do command -v $c >/dev/null || { echo "bench_parity.sh: $c not found" >&2; exit 2; }; done
if [ -z "$WORK" ]; then WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench_parity.XXXXXX"); else mkdir -p "$WORK"; fi
[ "$KEEP" = 1 ] || trap 'rm -rf "$WORK"' EXIT
echo "bench_parity: $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg); work $WORK" >&2
rc=0
python3 - "$PARITY" "$WORK/out" "${EXTRA[@]}" <<'PY' || rc=$?
import json, os, resource, subprocess, sys, time
parity, out, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
cmd = [parity, "--family", "hybrid", "--out", out, "--quiet"] + extra
t0 = time.perf_counter()
p = subprocess.run(cmd)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
rep = json.load(open(os.path.join(out, "parity.json")))
print("\n### longstraw-parity %s (load %s)\n" % (" ".join(cmd[1:]), open("/proc/loadavg").read().split()[0]))
print("| part | trainer runs | wall s |\n|---|---:|---:|")
for t in rep["timings"]:
    print("| %s | %s | %.1f |" % (t["part"], t["runs"] if t["part"] != "total" else "", t["seconds"]))
print("\nwhole run: %.1f s wall, %.1f s CPU (user + system of every process), exit %d; verdict %s; %d checks, %d controls"
      % (wall, ru.ru_utime + ru.ru_stime, p.returncode, "PASS" if rep["pass"] else "FAIL", len(rep["checks"]), len(rep["controls"])))
sys.exit(p.returncode)
PY
exit $rc
