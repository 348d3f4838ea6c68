#!/usr/bin/env bash
# bench_cp.sh - context parallelism of the hybrid family over N ranks
# (mpirun, Open MPI): per-rank peak memory by category and wall time per
# phase, per-rank capture time (the load imbalance of contiguous shards),
# communication bytes per purpose against the analytical figure derived from
# trainer/dist/cp.h and the config, and the largest prompt that fits a per-rank
# memory budget.  Prints tables; asserts nothing; not a ctest.
#
#   bench/bench_cp.sh [--prompt-len P] [--ranks "1 2 4"] [--config FILE]
#                     [--budget BYTES] [--group G] [--response-len R]
#                     [--build DIR] [--work DIR] [--keep]
# The same settings from the environment: BENCH_CP_PROMPT (8192),
# BENCH_CP_RANKS ("1 2 4"), BENCH_CP_CONFIG (configs/hybrid-tiny.json),
# BENCH_CP_BUDGET (67108864), BENCH_CP_GROUP (2), BENCH_CP_RESPONSE (8),
# BENCH_CP_BUILD (build), BENCH_CP_WORK (a fresh temporary directory).
# Runs f32, beta 0, one step, OMP_NUM_THREADS=1 (set it to override),
# `mpirun --oversubscribe`: on a machine with fewer cores than ranks the
# ranks time-share, so the wall times are those of that machine.
set -euo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }

P=${BENCH_CP_PROMPT:-8192}
RANKS=${BENCH_CP_RANKS:-"1 2 4"}
CONFIG=${BENCH_CP_CONFIG:-configs/hybrid-tiny.json}
BUDGET=${BENCH_CP_BUDGET:-67108864}
G=${BENCH_CP_GROUP:-2}
R=${BENCH_CP_RESPONSE:-8}
BUILD=${BENCH_CP_BUILD:-build}
WORK=${BENCH_CP_WORK:-}
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --prompt-len) P=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --group) G=$2; shift 2 ;;
    --response-len) R=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_cp.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
for v in P BUDGET G R; do
    case "${!v}" in ''|*[!0-9]*) echo "bench_cp.sh: $v='${!v}' is not a positive integer" >&2; exit 2 ;; esac
done
[ "$P" -ge 128 ] || { echo "bench_cp.sh: --prompt-len $P: want at least 128 (the fit also runs P/2 >= 64)" >&2; exit 2; }
for n in $RANKS; do
    case "$n" in ''|*[!0-9]*|0) echo "bench_cp.sh: --ranks: '$n' is not a positive integer" >&2; exit 2 ;; esac
done
TRAIN=$BUILD/trainer/longstraw-train
[ -x "$TRAIN" ] || { echo "bench_cp.sh: $TRAIN not built (cmake --build $BUILD --target longstraw-train)" >&2; exit 2; }
[ -r "$CONFIG" ] || { echo "bench_cp.sh: --config $CONFIG is not readable" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_cp.sh: mpirun not found (Open MPI)" >&2; exit 2; }
command -v zstd >/dev/null || { echo "bench_cp.sh: zstd not found" >&2; exit 2; }
if [ -z "$WORK" ]; then WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench_cp.XXXXXX"); else mkdir -p "$WORK"; fi
[ "$KEEP" = 1 ] || trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
PFIT=$((P / 2))

train() { # N OUT PROMPT MODE [extra...]
    local n=$1 out=$2 plen=$3 mode=$4
    shift 4
    rm -rf "$out"
    mpirun --oversubscribe --allow-run-as-root -np "$n" "$TRAIN" --config "$CONFIG" --out "$out" \
        --prompt-len "$plen" --steps 1 --grad-mode "$mode" --beta 0 --group "$G" --response-len "$R" --quiet "$@"
}

T0=$(date +%s)
LOAD0=$(cut -d" " -f1-3 /proc/loadavg)
echo "bench_cp: $CONFIG f32, P=$P, G=$G, R=$R, N in {$RANKS}, OMP_NUM_THREADS=$OMP_NUM_THREADS, $(getconf _NPROCESSORS_ONLN) cores; work $WORK" >&2
for mode in full detached; do
    for n in $RANKS; do
        echo "  run: N=$n $mode P=$P" >&2
        train "$n" "$WORK/$mode-n$n-p$P" "$P" "$mode" > "$WORK/$mode-n$n-p$P.log" 2>&1 ||
            { echo "bench_cp.sh: N=$n $mode P=$P failed:" >&2; tail -20 "$WORK/$mode-n$n-p$P.log" >&2; exit 1; }
    done
done
# a second prompt length for the linear fit of the measured peak (full mode)
for n in $RANKS; do
    echo "  run: N=$n full P=$PFIT (fit)" >&2
    train "$n" "$WORK/full-n$n-p$PFIT" "$PFIT" full > "$WORK/full-n$n-p$PFIT.log" 2>&1 ||
        { echo "bench_cp.sh: N=$n full P=$PFIT failed:" >&2; tail -20 "$WORK/full-n$n-p$PFIT.log" >&2; exit 1; }
done

# The plan check: --memory-budget refuses a plan above it (exit 2, "memory
# plan needs") before allocating anything; a plan that passes goes on to
# --load, which names a missing file and so ends the run at once (exit 2,
# "--load:").  Nothing is trained by a probe.
probe() { # N PROMPT -> 0 accepted, 1 refused
    local log="$WORK/probe.log"
    train "$1" "$WORK/probe" "$2" full --memory-budget "$BUDGET" --load "$WORK/no-such-file.safetensors" \
        > "$log" 2>&1 || true
    if grep -q "memory plan needs" "$log"; then return 1; fi
    if grep -q -- "--load:" "$log"; then return 0; fi
    echo "bench_cp.sh: plan probe N=$1 P=$2: neither refused nor accepted:" >&2
    tail -20 "$log" >&2
    exit 1
}
: > "$WORK/fit.txt"
# the measured fit: where the largest rank's per-step peak, linear through the
# runs at P/2 and P, reaches the budget; then one run there to check it
for n in $RANKS; do
    fit=$(python3 - "$WORK" "$n" "$P" "$PFIT" "$BUDGET" <<'PYFIT'
import json, sys
w, n, p, q, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
peak = lambda x: max(json.load(open(f"{w}/full-n{n}-p{x}/rank-{r:04d}/receipt.json"))["predicate"]["memory"]
                     ["per_step"]["total_peak_bytes"] for r in range(n))
slope = (peak(p) - peak(q)) / (p - q)
print(max(64, int((b - peak(q)) / slope + q)) if slope > 0 else 0)
PYFIT
)
    echo "$n $fit" >> "$WORK/fit.txt"
    if [ "$fit" -gt 0 ]; then
        echo "  run: N=$n full P=$fit (the fit's check)" >&2
        train "$n" "$WORK/full-n$n-p$fit" "$fit" full > "$WORK/full-n$n-p$fit.log" 2>&1 ||
            { echo "bench_cp.sh: N=$n full P=$fit failed:" >&2; tail -20 "$WORK/full-n$n-p$fit.log" >&2; exit 1; }
    fi
done
: > "$WORK/plan.txt"
prev=0
for n in $RANKS; do
    # the previous N's limit first (two probes settle it when the limit is the same),
    # else doubling from 1024 to bracket it, then bisection to one token
    if [ "$prev" -gt 0 ] && probe "$n" "$prev" && ! probe "$n" $((prev + 1)); then lo=$prev
    elif ! probe "$n" 64; then lo=0 # 64: the synthetic task's shortest prompt
    else
        lo=64 hi=1024
        while [ "$hi" -lt $((1 << 24)) ] && probe "$n" "$hi"; do lo=$hi; hi=$((hi * 2)); done
        while [ $((hi - lo)) -gt 1 ]; do # lo accepted, hi refused (or the search limit)
            mid=$(((lo + hi) / 2))
            if probe "$n" "$mid"; then lo=$mid; else hi=$mid; fi
        done
    fi
    echo "  plan: N=$n largest accepted P=$lo" >&2
    echo "$n $lo" >> "$WORK/plan.txt"
    prev=$lo
done
echo "bench_cp: runs done in $(($(date +%s) - T0)) s" >&2

HOST="$(getconf _NPROCESSORS_ONLN) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS, load average $LOAD0 at the start, $(cut -d" " -f1-3 /proc/loadavg) at the end"
python3 - "$WORK" "$CONFIG" "$P" "$PFIT" "$BUDGET" "$RANKS" "$HOST" <<'EOF'
import json, subprocess, sys

work, config, P, PFIT, BUDGET, RANKS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), [int(x) for x in sys.argv[6].split()]
cfg = json.load(open(config))
SZ = 4  # f32
MiB = 1 << 20

def rdir(mode, n, p): return f"{work}/{mode}-n{n}-p{p}"

def receipts(mode, n, p):
    return [json.load(open(f"{rdir(mode, n, p)}/rank-{r:04d}/receipt.json"))["predicate"] for r in range(n)]

def events(mode, n, p, r):
    out = subprocess.run(["zstd", "-dc", f"{rdir(mode, n, p)}/rank-{r:04d}/events.jsonl.zst"],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]

def shard(T, N, r):  # trainer/dist/cp.h ls_cp_shard
    return (T // N) * r + ((T % N) * r) // N, (T // N) * (r + 1) + ((T % N) * (r + 1)) // N

def table(title, head, rows, note=None):
    print(f"\n{title}")
    w = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = lambda row: "| " + " | ".join(str(x).rjust(w[i]) if i else str(x).ljust(w[i]) for i, x in enumerate(row)) + " |"
    print(fmt(head))
    print("|" + "|".join("-" * (x + 2) for x in w) + "|")
    for row in rows: print(fmt(row))
    if note: print(note)

CATS = ["prompt_state", "prompt_state_grad", "recompute_checkpoints", "branch_graph", "communication", "scratch"]
PHASES = ["capture", "rollout", "score", "replay", "prompt_bwd", "finalize"]
print(f"\n# bench_cp: {config}, f32, P={P} (T={P-1} captured positions), one step, beta 0; MiB = 2^20 bytes, s = seconds")
print(f"# {sys.argv[7]}")

# 1. memory and phases per rank
for mode in ("full", "detached"):
    rows = []
    for n in RANKS:
        for r, rc in enumerate(receipts(mode, n, P)):
            m = rc["memory"]["per_step"]
            ph = {x["phase"]: x["wall_ns_total"] / 1e9 for x in rc["phases"]}
            pos = rc["rank_state"]["prompt_positions"] if "rank_state" in rc else [0, P - 1]
            rows.append([n, r, f"{pos[0]}-{pos[1]}"] + [f"{m['categories'].get(c, {}).get('peak_bytes', 0) / MiB:.2f}" for c in CATS]
                        + [f"{m['total_peak_bytes'] / MiB:.2f}"] + [f"{ph.get(x, 0):.2f}" for x in PHASES]
                        + [f"{sum(ph.values()):.2f}"])
    table(f"## 1. Per-rank peak memory (per-step scope, MiB) and wall time per phase (s): {mode} mode",
          ["N", "rank", "shard", "p_state", "p_state_grad", "ckpt", "branch", "comm", "scratch", "total"] + PHASES + ["all phases"], rows,
          "shard: the captured positions [begin, end) the rank owns; p_state = prompt_state, ckpt = recompute_checkpoints, branch = branch_graph, comm = communication.")

# 2. per-rank capture time: the load imbalance
rows = []
for n in RANKS:
    T = P - 1
    work_model = []
    for r in range(n):
        s0, s1 = shard(T, n, r)
        L = s1 - s0
        work_model.append(L * L / 2 + L * s0)  # causal attention pairs of the rank's queries
    done, attn, gdn, ring = [], [], [], []
    for r in range(n):
        ev = events("full", n, P, r)
        on = False
        t_begin = t_done = None
        a = g = rg = 0.0
        first_ring = None
        for e in ev:
            k = e.get("ev")
            if k == "phase_begin" and e["phase"] == "capture": on, t_begin = True, e["ts_ns"]
            if not on: continue
            if k == "collective" and e["purpose"] == "kv_ring" and first_ring is None: first_ring = e["ts_ns"]
            if k == "collective" and e["purpose"] == "state_broadcast" and t_done is None: t_done = e["ts_ns"]
            if k == "layer_end":
                if e["kind"] == "attn":
                    a += e["wall_ns"]
                    if first_ring is not None: rg += e["ts_ns"] - first_ring
                    first_ring = None
                elif e["kind"] == "gdn": g += e["wall_ns"]
            if k == "phase_end" and e["phase"] == "capture":
                wall = e["wall_ns"]
                if t_done is None: t_done = e["ts_ns"]
                break
        done.append((t_done - t_begin) / 1e9); attn.append(a / 1e9); gdn.append(g / 1e9); ring.append(rg / 1e9)
        rows.append([n, r, f"{wall / 1e9:.2f}", f"{done[-1]:.2f}", f"{a / 1e9:.2f}", f"{rg / 1e9:.2f}", f"{g / 1e9:.2f}",
                     f"{work_model[r] / max(work_model):.3f}"])
    rows.append([n, "max/min", "", f"{max(done) / min(done):.2f}", f"{max(attn) / min(attn):.2f}",
                 f"{max(ring) / min(ring):.2f}" if min(ring) > 0 else "-", f"{max(gdn) / min(gdn):.2f}",
                 f"{max(work_model) / min(work_model):.2f}"])
table("## 2. Per-rank capture time (full mode, s): contiguous shards under causal attention",
      ["N", "rank", "phase wall", "own layers done", "attn layers", "of which ring", "gdn layers", "attn work (model)"], rows,
      "phase wall: capture phase_end (the same on every rank: the final state_broadcast waits for rank N-1);\n"
      "own layers done: phase begin to the rank's first state_broadcast (its last layer finished, waits in the chain included);\n"
      "attn/gdn layers: sum of the capture layer_end wall of that kind (waits included: a GDN layer's receive waits for\n"
      "rank r-1's whole shard, a send for r+1 to post its receive); of which ring: first kv_ring hop to layer end (waits + merging\n"
      "earlier ranks' blocks); attn work (model): the rank's causal query-key pairs s^2/2 + s*begin, relative to the largest.")

# 3. communication bytes per purpose
H, Hkv, hd = cfg["attn_heads"], cfg["attn_kv_heads"], cfg["head_dim"]
Ln = cfg["n_layers"]
La = sum(1 for i in range(Ln) if (i + 1) % 4 == 0)
Lg = Ln - La
C = 2 * cfg["gdn_hk"] * cfg["gdn_dk"] + cfg["gdn_hv"] * cfg["gdn_dv"]
Sg = cfg["gdn_hv"] * cfg["gdn_dk"] * cfg["gdn_dv"] + (cfg["conv_kernel"] - 1) * C  # state + conv tail, reals

def analytical(purpose, mode, n, r, M, tok, nparams):
    full = mode == "full"
    kv = 2 * M * Hkv * hd * SZ
    f = {
        "kv_ring": La * (2 if full else 1) * (n - 1) * kv,
        "dkv_ring": La * n * 2 * kv if full else 0,
        "state_handoff": Lg * Sg * SZ if r < n - 1 else 0,
        "state_broadcast": Lg * Sg * SZ if r == n - 1 else 0,
        "state_grad_handoff": Lg * Sg * SZ if full and r > 0 else 0,
        "lse_max": 3 * La * tok * H * SZ,
        "lse_sum": 3 * La * tok * H * SZ,
        "out_sum": 3 * La * tok * H * hd * SZ,
        "dq_sum": La * tok * H * hd * SZ,
        "dkv_sum": La * 2 * tok * Hkv * hd * SZ,
        "grad_finalize": nparams * SZ if full else 0,
        "digest_check": 32,
    }
    return f.get(purpose)

FORMULA = {
    "kv_ring": "La x passes x (N-1) hops x 2*M*Hkv*hd*sz (passes: capture, + recompute in full)",
    "dkv_ring": "La x N hops x 4*M*Hkv*hd*sz (K, V, dK, dV; full only)",
    "state_handoff": "Lg x (Hv*dk*dv + (K-1)*C)*sz on ranks 0..N-2",
    "state_broadcast": "Lg x (Hv*dk*dv + (K-1)*C)*sz on rank N-1 (the root)",
    "state_grad_handoff": "Lg x (Hv*dk*dv + (K-1)*C)*sz on ranks 1..N-1 (full only)",
    "lse_max": "3 passes (rollout, score, replay) x La x tokens*H*sz",
    "lse_sum": "3 passes x La x tokens*H*sz",
    "out_sum": "3 passes x La x tokens*H*hd*sz",
    "dq_sum": "La x tokens*H*hd*sz (replay backward)",
    "dkv_sum": "La x 2 x tokens*Hkv*hd*sz (replay backward)",
    "grad_finalize": "n_params*sz (full only; n_params from the optimizer_step event)",
    "digest_check": "32 (one SHA-256 per rank)",
}
rows = []
mismatch = []
for mode in ("full", "detached"):
    for n in RANKS:
        if n < 2: continue
        T = P - 1
        M = max(shard(T, n, r)[1] - shard(T, n, r)[0] for r in range(n))
        recs = receipts(mode, n, P)
        ev0 = events(mode, n, P, 0)
        tok = next(e["tokens"] for e in ev0 if e.get("ev") == "step_metrics")
        nparams = next(e["n_params"] for e in ev0 if e.get("ev") == "optimizer_step")
        meas = [{x["purpose"]: x["bytes_sent"] for x in rc["rank_state"]["communication"]["by_purpose"]} for rc in recs]
        purposes = []
        for mm in meas:
            for k in mm:
                if k not in purposes: purposes.append(k)
        for pu in purposes:
            an = [analytical(pu, mode, n, r, M, tok, nparams) for r in range(n)]
            me = [mm.get(pu, 0) for mm in meas]
            if an[0] is None: continue  # bookkeeping (run_id, open_*, step_status, ...): a few bytes
            ratios = [(m / a) if a else (1.0 if m == 0 else float("inf")) for m, a in zip(me, an)]
            ok = all(m == a for m, a in zip(me, an))
            if not ok: mismatch.append((mode, n, pu, me, an))
            same = len(set(me)) == 1 and len(set(an)) == 1
            rows.append([mode, n, pu, str(me[0]) if same else ",".join(map(str, me)),
                         str(an[0]) if same else ",".join(map(str, an)),
                         f"{min(ratios):.3f}" if min(ratios) == max(ratios) else f"{min(ratios):.3f}-{max(ratios):.3f}",
                         "exact" if ok else "MISMATCH"])
table(f"## 3. Communication bytes sent per rank per step, by purpose: measured (receipt) vs analytical (P={P})",
      ["mode", "N", "purpose", "measured (per rank)", "analytical (per rank)", "ratio", "formula"], rows,
      "One value: every rank the same; otherwise rank 0, 1, ... .  Bytes sent as trainer/dist/comm.c counts them (the payload the\n"
      "rank hands to others: n for allreduce/allgather on every rank, n on a broadcast's root, n for a sendrecv with a peer).\n"
      f"M = longest shard = {max(shard(P-1, RANKS[-1], r)[1] - shard(P-1, RANKS[-1], r)[0] for r in range(RANKS[-1]))} (N={RANKS[-1]}), La = {La} attention layers, Lg = {Lg} GDN layers,\n"
      f"GDN state + conv tail = {Sg} reals, tokens = response tokens of the group, sz = 4.  Formulas:\n" +
      "\n".join(f"  {k}: {v}" for k, v in FORMULA.items()))

# 4. largest prompt under the per-rank budget
plan = {int(a): int(b) for a, b in (l.split() for l in open(f"{work}/plan.txt"))}
fits = {int(a): int(b) for a, b in (l.split() for l in open(f"{work}/fit.txt"))}
peak = lambda n, p: max(x["memory"]["per_step"]["total_peak_bytes"] for x in receipts("full", n, p))
rows = []
for n in RANKS:
    t1, t2 = peak(n, P), peak(n, PFIT)
    fit = fits.get(n, 0)
    tf = peak(n, fit) if fit else 0
    rows.append([n, plan.get(n, "-"), f"{t2 / MiB:.2f}", f"{t1 / MiB:.2f}", f"{(t1 - t2) / (P - PFIT) * 1024 / MiB:.3f}", fit,
                 f"{tf / MiB:.2f}" if fit else "-", ("yes" if tf <= BUDGET else "NO") if fit else "-",
                 f"{fit / plan[n]:.2f}" if plan.get(n) else "-"])
table(f"## 4. Largest prompt under a per-rank budget of {BUDGET} bytes ({BUDGET / MiB:.0f} MiB), full mode",
      ["N", "plan check accepts (P)", f"peak P={PFIT} (MiB)", f"peak P={P} (MiB)", "MiB per 1K tokens",
       "measured fit (P)", "peak there (MiB)", "fits", "fit/plan"], rows,
      "plan check: the largest --prompt-len that --memory-budget lets start (exact, binary search; trainer/run/run_plan.c);\n"
      "measured fit: the prompt length at which the largest rank's measured per-step peak (linear through the runs at\n"
      f"P={PFIT} and P={P}) reaches the budget, then run there without --memory-budget (peak there; fits: <= budget).\n"
      "The plan check plans each rank's shard (trainer/run/run_plan.c) and is conservative (an upper bound on every\n"
      "category), so its limit grows with N but stays below the measured fit.")
if mismatch:
    print("\nanalytical mismatches:")
    for m in mismatch: print("  ", m)
EOF
echo "bench_cp: total $(($(date +%s) - T0)) s" >&2
