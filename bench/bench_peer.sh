#!/usr/bin/env bash
# bench_peer.sh - LongStraw beside a PyTorch full-graph GRPO step of the same model
# (bench/peer/hybrid_torch.py, checked against the trainer by ctest peer_matches_trainer).
# One GRPO step of the hybrid family per cell, f32, G members of R tokens after a prompt of
# P tokens (the same external rollouts and the same initial weights for both tools):
#   LongStraw full / detached   longstraw-train --rollouts ... --grad-mode full|detached --steps 1
#   PyTorch eager               every member its own autograd graph over prompt + response
#   PyTorch ckpt                the same with torch.utils.checkpoint per layer and the attention
#                               in query blocks (no P x P score matrix)
# Each cell is "step time / peak RSS": the step's wall time (LongStraw: step_wall_s of
# --metrics; PyTorch: reference scoring + forwards + backward + AdamW, timed in the script)
# and the process's peak resident set (LongStraw: the receipt's memory.run.rss_peak_bytes;
# PyTorch: getrusage ru_maxrss). A second table gives LongStraw's tracked peak (receipt
# memory.per_step.total_peak_bytes). A PyTorch cell reads "out of memory" when its predicted
# peak (the previous P's RSS before the step plus its growth during the step scaled by (P/P')^2
# for eager, P/P' for ckpt) exceeds --max-mem
# or the run fails for memory (it runs under ulimit -v of --max-mem plus 4 GiB of address
# space), and "–" when it ran past --max-time or a smaller P already did. Prints markdown;
# asserts nothing; not a ctest.
#
#   bench/bench_peer.sh [--prompts "4096 8192 16384 32768"] [--group 4] [--response-len 32]
#                       [--config FILE] [--threads 2] [--max-mem BYTES] [--max-time SECONDS]
#                       [--build DIR] [--work DIR] [--keep]
# Defaults: --max-mem 80% of MemAvailable, --max-time 600. OMP_WAIT_POLICY=passive and
# OMP_NUM_THREADS=--threads for both tools; torch.set_num_threads(--threads).
# Exit: 0 the table printed, 2 bad usage or a LongStraw run failed.
set -euo pipefail

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }

PROMPTS="4096 8192 16384 32768"
G=4
R=32
CONFIG=configs/hybrid-tiny.json
THREADS=2
MAXMEM=
MAXTIME=600
BUILD=build
WORK=
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --prompts) PROMPTS=${2-}; shift 2 ;;
    --group) G=${2-}; shift 2 ;;
    --response-len) R=${2-}; shift 2 ;;
    --config) CONFIG=${2-}; shift 2 ;;
    --threads) THREADS=${2-}; shift 2 ;;
    --max-mem) MAXMEM=${2-}; shift 2 ;;
    --max-time) MAXTIME=${2-}; shift 2 ;;
    --build) BUILD=${2-}; shift 2 ;;
    --work) WORK=${2-}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_peer.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
if [ -z "$MAXMEM" ]; then
    MAXMEM=$(awk '/^MemAvailable:/ { printf "%.0f", $2 * 1024 * 0.8 }' /proc/meminfo)
fi
for v in G:--group R:--response-len THREADS:--threads MAXMEM:--max-mem MAXTIME:--max-time; do
    name=${v%%:*}; val=${!name}
    case "$val" in ''|*[!0-9]*|0) echo "bench_peer.sh: ${v#*:} '$val' is not a positive integer" >&2; exit 2 ;; esac
done
[ -n "$PROMPTS" ] || { echo "bench_peer.sh: --prompts is empty" >&2; exit 2; }
for p in $PROMPTS; do
    case "$p" in ''|*[!0-9]*) echo "bench_peer.sh: --prompts: '$p' is not a positive integer" >&2; exit 2 ;; esac
    [ "$p" -ge 64 ] || { echo "bench_peer.sh: --prompts: $p is below 64 (the trainer's least prompt)" >&2; exit 2; }
done
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN=$BUILD/trainer/longstraw-train
PY=/usr/bin/python3
[ -x "$TRAIN" ] || { echo "bench_peer.sh: $TRAIN not built (cmake --build $BUILD --target longstraw-train)" >&2; exit 2; }
[ -r "$CONFIG" ] || { echo "bench_peer.sh: --config $CONFIG is not readable" >&2; exit 2; }
"$PY" -c "import torch" 2>/dev/null || { echo "bench_peer.sh: $PY cannot import torch" >&2; exit 2; }
if [ -z "$WORK" ]; then WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench_peer.XXXXXX"); else mkdir -p "$WORK"; fi
[ "$KEEP" = 1 ] || trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=$THREADS
log() { echo "bench_peer: $*" >&2; }

# rollouts: a prompt of P tokens and G responses of R tokens from a fixed LCG, rewards spread
rollouts() {
    "$PY" - "$1" "$G" "$R" "$2" <<'EOF'
import json, sys
P, G, R = (int(a) for a in sys.argv[1:4])
s = [12345]
def tok():
    s[0] = (1103515245 * s[0] + 12345) & 0x7FFFFFFF
    return (s[0] >> 8) % 256
prompt = [tok() for _ in range(P)]
resp = [[tok() for _ in range(R)] for _ in range(G)]
rewards = [float(i % 4) / 3.0 for i in range(G)]
with open(sys.argv[4], "w") as f:
    f.write(json.dumps({"prompt": prompt, "responses": resp, "rewards": rewards}) + "\n")
EOF
}

# LongStraw cell: prints "STEP_S RSS_BYTES TRACKED_BYTES"
longstraw() {
    local p=$1 mode=$2 out=$WORK/ls-$1-$2
    local extra=()
    [ -f "$WORK/weights.safetensors" ] || extra=(--save-init "$WORK/weights.safetensors")
    if ! "$TRAIN" --config "$CONFIG" --rollouts "$WORK/rollouts-$p.jsonl" --dtype f32 --grad-mode "$mode" \
            --strategy longstraw --train-mode lora --lora-init zero --steps 1 --seed 1 --quiet \
            --metrics "$out.metrics.jsonl" --out "$out" "${extra[@]}" >"$out.log" 2>&1; then
        log "longstraw-train failed at P=$p ($mode); see $out.log"; cat "$out.log" >&2; exit 2
    fi
    "$PY" - "$out.metrics.jsonl" "$out/rank-0000/receipt.json" <<'EOF'
import json, sys
m = json.loads(open(sys.argv[1]).readline())
r = json.load(open(sys.argv[2]))["predicate"]["memory"]
print(m["step_wall_s"], r["run"]["rss_peak_bytes"], r["per_step"]["total_peak_bytes"])
EOF
}

# PyTorch cell: prints "STEP_S RSS_BYTES BASE_RSS_BYTES", or "oom", or "timeout"
torch_cell() {
    local p=$1 mode=$2 out=$WORK/pt-$1-$2 rc=0
    ( ulimit -v $(( (MAXMEM + (4 << 30)) / 1024 ))
      exec timeout -k 10 "$MAXTIME" "$PY" "$HERE/peer/hybrid_torch.py" --weights "$WORK/weights.safetensors" \
          --config "$CONFIG" --rollouts "$WORK/rollouts-$p.jsonl" --mode "$mode" --threads "$THREADS" \
          --json "$out.json" ) >"$out.log" 2>&1 || rc=$?
    if [ "$rc" = 0 ]; then
        "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['step_s'], d['peak_rss_kib'] * 1024, d['base_rss_kib'] * 1024)" "$out.json"
    elif [ "$rc" = 124 ]; then
        echo timeout
    elif [ "$rc" = 137 ]; then
        echo oom  # SIGKILL before the time limit: the kernel's OOM killer
    elif grep -qi "out of memory\|cannot allocate\|can't allocate\|MemoryError" "$out.log"; then
        echo oom
    else
        log "hybrid_torch.py failed at P=$p ($mode, exit $rc): $(tail -1 "$out.log")"; echo fail
    fi
}

fmt_mem() { awk -v b="$1" 'BEGIN { if (b >= 1073741824) printf "%.1f GiB", b / 1073741824; else printf "%.0f MiB", b / 1048576 }'; }
fmt_cell() { awk -v t="$1" 'BEGIN { printf (t >= 100 ? "%.0f s" : "%.1f s"), t }'; echo -n " / $(fmt_mem "$2")"; }

declare -A PREV_P PREV_RSS PREV_BASE DEAD
ROWS=()
TRACK=()
NOTES=()
log "hybrid $(basename "$CONFIG") f32 G=$G R=$R threads=$THREADS max-mem $(fmt_mem "$MAXMEM") max-time ${MAXTIME}s; work $WORK"
for p in $PROMPTS; do
    rollouts "$p" "$WORK/rollouts-$p.jsonl"
    row="| ${p} |"
    trow="| ${p} |"
    for mode in full detached; do
        log "P=$p LongStraw $mode"
        read -r t rss tracked < <(longstraw "$p" "$mode")
        row+=" $(fmt_cell "$t" "$rss") |"
        trow+=" $(fmt_mem "$tracked") |"
    done
    for mode in eager ckpt; do
        exp=2; [ "$mode" = ckpt ] && exp=1
        if [ -n "${DEAD[$mode]:-}" ]; then
            row+=" ${DEAD[$mode]} |"; continue
        fi
        if [ -n "${PREV_P[$mode]:-}" ]; then
            pred=$(awk -v r="${PREV_RSS[$mode]}" -v z="${PREV_BASE[$mode]}" -v a="$p" -v b="${PREV_P[$mode]}" \
                   -v e="$exp" 'BEGIN { printf "%.0f", z + (r - z) * (a / b) ^ e }')
            if [ "$pred" -gt "$MAXMEM" ]; then
                log "P=$p PyTorch $mode: predicted $(fmt_mem "$pred") > max-mem: out of memory"
                NOTES+=("P=$p PyTorch $mode: not run, predicted peak $(fmt_mem "$pred") > --max-mem $(fmt_mem "$MAXMEM")")
                row+=" out of memory |"; DEAD[$mode]="–"; continue
            fi
        fi
        log "P=$p PyTorch $mode"
        res=$(torch_cell "$p" "$mode")
        case "$res" in
        oom) row+=" out of memory |"; DEAD[$mode]="–"
             NOTES+=("P=$p PyTorch $mode: ran out of memory (see $WORK/pt-$p-$mode.log)") ;;
        timeout) row+=" – |"; DEAD[$mode]="–"
             NOTES+=("P=$p PyTorch $mode: stopped at --max-time ${MAXTIME} s") ;;
        fail) row+=" failed |" ;;
        *) read -r t rss base <<<"$res"
           row+=" $(fmt_cell "$t" "$rss") |"
           PREV_P[$mode]=$p; PREV_RSS[$mode]=$rss; PREV_BASE[$mode]=$base ;;
        esac
    done
    ROWS+=("$row")
    TRACK+=("$trow")
    log "$row"
done

echo "hybrid $(basename "$CONFIG" .json), f32, G=$G, R=$R, $THREADS threads, one run each ($(date -u +%Y-%m-%d))"
echo "(step time / peak RSS)"
echo
echo "| P | LongStraw full | LongStraw detached | PyTorch eager | PyTorch, per-layer checkpointing + blocked attention |"
echo "|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
for n in "${NOTES[@]}"; do echo "- $n"; done
[ "${#NOTES[@]}" = 0 ] || echo
echo "LongStraw's tracked peak per step (receipt memory.per_step.total_peak_bytes)"
echo
echo "| P | full | detached |"
echo "|---|---|---|"
printf '%s\n' "${TRACK[@]}"
