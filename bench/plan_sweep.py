#!/usr/bin/python3
"""The step plan against the tracker's peak, over a grid of runs.

Runs longstraw-train (one step per cell; under mpirun for CP > 1) and reads
every rank's receipt: rank_state.memory_plan.peak_bytes (the plan the trainer
checked, trainer/plan) against memory.per_step.total_peak_bytes (what the
memory tracker measured in that step).  Prints one table row per cell and
rank group; exits 1 when any rank's plan is off by more than --tolerance
(relative to the measured peak), 2 on bad usage.  Standard library only.

usage: plan_sweep.py --build DIR [--grid small|full] [--tolerance 0.10]
                     [--cells "family:P:G:R:mode:N[:replay] ..."] (replay: auto, none, layer, chunkC) [--keep DIR]
  --grid small   the test suite's grid (a few minutes on 2 cores)
  --grid full    both families, both modes, CP 1/2/4, P 1K..64K, G 1..16
                 (hours on 2 cores: bench only)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def grid(name):
    cells = []
    if name == "small":
        for fam, Ps in (("hybrid", (1024, 4096)), ("mla", (1024, 2048))):
            for P in Ps:
                for mode in ("detached", "full"):
                    for N in (1, 2, 4):
                        G, R = (1, 8) if N == 2 else (8, 32)
                        cells.append((fam, P, G, R, mode, N, "auto"))
        cells.append(("hybrid", 1024, 16, 64, "detached", 1, "auto"))
        # long responses replayed taped, checkpointed per layer and in chunks (--replay-checkpoint chunk
        # --replay-chunk C: 'chunkC')
        for fam, R, rcs in (("hybrid", 256, ("none", "layer", "chunk64")), ("mla", 128, ("none", "layer", "chunk32"))):
            for N in (1, 2):
                for rc in rcs:
                    cells.append((fam, 1024, 2, R, "full", N, rc))
    else:
        for fam, Ps in (("hybrid", (1024, 4096, 16384, 65536)), ("mla", (1024, 4096, 16384))):
            for P in Ps:
                for mode in ("detached", "full"):
                    for N in (1, 2, 4):
                        for G, R in ((1, 8), (16, 32)):
                            cells.append((fam, P, G, R, mode, N, "auto"))
                for N in (1, 2, 4):
                    for rc in ("none", "layer", "chunk128"):
                        cells.append((fam, P, 4, 512, "full", N, rc))
    return cells


def parse_cells(text):
    out = []
    for tok in text.split():
        parts = tok.split(":")
        if len(parts) == 6:
            parts.append("auto")
        if (len(parts) != 7 or not parts[0].isidentifier() or parts[4] not in ("detached", "full") or
                not (parts[6] in ("auto", "none", "layer") or
                     (parts[6].startswith("chunk") and parts[6][5:].isdigit() and int(parts[6][5:]) > 0))):
            raise ValueError("--cells: '%s' is not family:P:G:R:mode:N[:replay]" % tok)
        out.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3]), parts[4], int(parts[5]), parts[6]))
    return out


_FAMILIES = {}


def tiny_config(train, fam):
    """The family's tiny config, from the registry (longstraw-train --families), relative to the source tree."""
    if not _FAMILIES:
        out = subprocess.run([train, "--families"], check=True, capture_output=True, text=True).stdout
        for f in json.loads(out)["families"]:
            _FAMILIES[f["name"]] = f["files"].get("tiny_config")
    if not _FAMILIES.get(fam):
        raise ValueError("family %r: no tiny config in the registry (%s)" % (fam, ", ".join(sorted(_FAMILIES))))
    return _FAMILIES[fam]


def run_cell(build, work, cell):
    fam, P, G, R, mode, N, rc = cell
    rd = os.path.join(work, "%s-P%d-G%d-R%d-%s-N%d-%s" % cell)
    train = os.path.join(build, "trainer", "longstraw-train")
    cfg = os.path.join(ROOT, tiny_config(train, fam))
    args = [train, "--config", cfg, "--prompt-len", str(P),
            "--response-len", str(R), "--group", str(G), "--grad-mode", mode, "--steps", "1", "--quiet",
            "--out", rd]
    if rc.startswith("chunk"):
        args += ["--replay-checkpoint", "chunk", "--replay-chunk", rc[5:]]
    else:
        args += ["--replay-checkpoint", rc]
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    if N > 1:
        env["OMP_NUM_THREADS"] = "1"
        mpi = ["mpirun", "--oversubscribe", "-np", str(N)]
        if os.geteuid() == 0:
            mpi.insert(1, "--allow-run-as-root")
        args = mpi + args
    t0 = time.time()
    p = subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.time() - t0
    if p.returncode != 0:
        return None, dt, "exit %d: %s" % (p.returncode, p.stderr.strip().splitlines()[-1:] or "")
    ranks = []
    for r in range(N):
        f = os.path.join(rd, "rank-%04d" % r, "receipt.json")
        pred = json.load(open(f))["predicate"]
        mp = pred["rank_state"]["memory_plan"]
        ranks.append((mp["peak_bytes"], pred["memory"]["per_step"]["total_peak_bytes"], mp["peak_phase"],
                      mp["reference"]))
    return ranks, dt, None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--grid", choices=("small", "full"), default="small")
    ap.add_argument("--cells")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--keep")
    try:
        a = ap.parse_args(argv)
        cells = parse_cells(a.cells) if a.cells else grid(a.grid)
    except SystemExit as e:
        return 2 if e.code else 0
    except ValueError as e:
        print("plan_sweep: %s" % e, file=sys.stderr)
        return 2
    if not os.access(os.path.join(a.build, "trainer", "longstraw-train"), os.X_OK):
        print("plan_sweep: --build %s: no trainer/longstraw-train" % a.build, file=sys.stderr)
        return 2
    work = a.keep or tempfile.mkdtemp(prefix="ls-plan-sweep-")
    os.makedirs(work, exist_ok=True)
    print("| family | P | G | R | mode | CP | replay | plan (MiB) | measured (MiB) | plan/measured | peak phase | reference | s |")
    print("|---|---:|---:|---:|---|---:|---|---:|---:|---:|---|---|---:|")
    bad, worst = 0, 0.0
    for cell in cells:
        ranks, dt, err = run_cell(a.build, work, cell)
        fam, P, G, R, mode, N, rc = cell
        if err:
            print("| %s | %d | %d | %d | %s | %d | %s | run failed: %s |" % (fam, P, G, R, mode, N, rc, err))
            bad += 1
            continue
        ratios = [pl / me for pl, me, _, _ in ranks]
        lo, hi = min(ratios), max(ratios)
        worst = max(worst, abs(lo - 1), abs(hi - 1))
        off = abs(lo - 1) > a.tolerance or abs(hi - 1) > a.tolerance
        bad += off
        pl, me = ranks[0][0], ranks[0][1]
        print("| %s | %d | %d | %d | %s | %d | %s | %.2f | %.2f | %s | %s | %s | %.1f |%s" % (
            fam, P, G, R, mode, N, rc, pl / 2**20, me / 2**20,
            "%.3f" % lo if lo == hi else "%.3f-%.3f" % (lo, hi), ranks[0][2], ranks[0][3], dt,
            " **off by more than %.0f%%**" % (100 * a.tolerance) if off else ""))
        sys.stdout.flush()
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("\n%d cell(s), largest deviation %.1f%%, %d outside %.0f%%" % (len(cells), 100 * worst, bad,
                                                                         100 * a.tolerance))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
