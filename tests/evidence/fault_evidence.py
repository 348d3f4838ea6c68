#!/usr/bin/python3
"""fault_evidence.py BUILD_DIR OUT_DIR [--markdown FILE] [--family hybrid|mla ...]

longstraw-train's declared faults, each against the evidence that refuses it (issue 36's table).

Per family: a fault-free CP-2 run on the trainer's own path (f64, P = 100: 99 captured positions split
49|50, pages of 8 and capture chunks of 12 that the shard boundary cuts, G = 3 sampled responses of 5
tokens, LoRA B random so that the policy differs from the reference, the reference kept beside the
policy's state, `full` gradients, the gradient probe on every step), `longstraw-parity --like` that run
(its path runs included), and the audit of the run with that report under the CI gate
(`--require-level 4 --require-probe`): it must be certified level 4.  Then the same run with each fault
the trainer declares (and the `detached` gradient, the control of level 4), audited against the same
report.  Every faulted run must be refused level 4, and the table says by which evidence, leaving out
`run.faults` (the trainer's own word that it ran a fault) and the rules that fail only because of it:

- trace: a rule over the run's own trace and receipts (collectives, digests, phases, completion);
- probe: `run.probe`, the run's own gradient against finite differences of its loss at its full size;
- invariant: `run.invariants`, the step's statistics against their mathematics;
- parity: the parity report's negative control of that fault, detected at reduced size.

A gradient fault (one that changes the applied gradient: skip-dkv-reduce, skip-grad-finalize,
cp-stale-start) must be refused by the probe.  Exit 1 when an expectation fails, 2 for bad usage.
"""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAULTS = {
    "hybrid": ["skip-dkv-reduce", "skip-grad-finalize", "cp-stale-start", "cp-local-attention", "nan-grad",
               "untracked-alloc", "kill-rank=1@replay", "detached"],
    "mla": ["skip-dkv-reduce", "skip-grad-finalize", "cp-local-dsa", "nan-grad", "untracked-alloc",
            "kill-rank=1@replay", "detached"],
}
GRADIENT_FAULTS = {"skip-dkv-reduce", "skip-grad-finalize", "cp-stale-start"}


def evidence_of(rule_id):
    if rule_id.startswith("run.probe"):
        return "probe"
    if rule_id.startswith("run.invariants"):
        return "invariant"
    if rule_id.startswith("parity."):
        return "parity"
    return "trace"


def sh(cmd, log, env=None):
    with open(log, "w") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode


def main(argv):
    args = argv[1:]
    md = None
    fams = []
    if "--markdown" in args:
        i = args.index("--markdown")
        md = args[i + 1]
        del args[i:i + 2]
    while "--family" in args:
        i = args.index("--family")
        fams.append(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2 or any(f not in FAULTS for f in fams):
        print(__doc__, file=sys.stderr)
        return 2
    build, out = os.path.abspath(args[0]), os.path.abspath(args[1])
    train = os.path.join(build, "trainer", "longstraw-train")
    audit = os.path.join(build, "audit", "longstraw-audit")
    parity = os.path.join(build, "parity", "longstraw-parity")
    mpirun = os.environ.get("MPIEXEC", "mpirun")
    mpiflags = os.environ.get("MPIRUN_FLAGS", "--oversubscribe" + (" --allow-run-as-root" if os.getuid() == 0 else ""))
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    rc = 0
    rows = []

    def bad(msg):
        nonlocal rc
        print("fault_evidence: FAIL " + msg, file=sys.stderr)
        rc = 1

    for fam in fams or ["hybrid", "mla"]:
        cfg = os.path.join(ROOT, "configs", fam + "-tiny.json")
        base = ["--config", cfg, "--prompt-len", "100", "--response-len", "5", "--group", "3", "--steps", "1",
                "--seed", "5", "--dtype", "f64", "--train-mode", "lora", "--lora-init", "random",
                "--keep-reference", "on", "--page-size", "8", "--capture-chunk", "12", "--probe-every", "1",
                "--quiet"]

        def run(name, extra):
            d = os.path.join(out, fam + "-" + name)
            cmd = [mpirun] + mpiflags.split() + ["-np", "2", train] + base + extra + ["--out", d]
            sh(cmd, d + ".log", env)
            return d

        def verdict(d, par):
            j = d + ".audit.json"
            sh([audit, d, "--parity", par, "--require-level", "4", "--require-probe", "--json", j], d + ".audit.txt")
            try:
                doc = json.load(open(j))
            except (OSError, ValueError):
                return None, []
            failed = []
            for lv in doc.get("levels", []):
                for c in lv.get("checks", []):
                    if c.get("applicable") and not c.get("pass"):
                        failed.append(c["id"])
            return doc.get("level"), failed

        clean = run("clean", ["--grad-mode", "full"])
        par_dir = os.path.join(out, fam + "-parity")
        prc = sh([parity, "--like", clean, "--out", par_dir, "--quiet", "--jobs", "2"], par_dir + ".log", env)
        par = os.path.join(par_dir, "parity.json")
        if prc != 0:
            bad("%s: longstraw-parity --like the clean run exited %d (%s.log)" % (fam, prc, par_dir))
            continue
        controls = {c["fault"]: c.get("detected", False) for c in json.load(open(par)).get("controls", [])}
        level, failed = verdict(clean, par)
        print("fault_evidence: %s clean run: level %s%s" % (fam, level, (", failing " + ", ".join(failed)) if failed else ""))
        if level != 4:
            bad("%s: the clean run is level %s, not 4 (%s)" % (fam, level, ", ".join(failed)))
        for f in FAULTS[fam]:
            name = f.split("=")[0]
            extra = ["--grad-mode", "detached"] if f == "detached" else ["--grad-mode", "full", "--fault", f]
            d = run(name, extra)
            level, failed = verdict(d, par)
            independent = sorted({r for r in failed if r != "run.faults"})
            kinds = {}
            for r in independent:
                kinds.setdefault(evidence_of(r), []).append(r)
            if controls.get(name):
                kinds.setdefault("parity", []).append("control %s detected" % name)
            rows.append((fam, f, level, kinds))
            print("fault_evidence: %s %s: level %s; %s" % (fam, f, level, "; ".join(
                "%s: %s" % (k, ", ".join(v)) for k, v in sorted(kinds.items())) or "only run.faults"))
            if level is None or level >= 4:
                bad("%s %s: certified level %s" % (fam, f, level))
            if name in GRADIENT_FAULTS and "probe" not in kinds:
                bad("%s %s: a gradient fault the probe did not refuse" % (fam, f))
    if md:
        with open(md, "w") as fh:
            fh.write("| family | fault | level | trace | probe | invariant | parity |\n|---|---|---|---|---|---|---|\n")
            for fam, f, level, kinds in rows:
                cells = [", ".join("`%s`" % r if not r.startswith("control") else r for r in kinds.get(k, [])) or "-"
                         for k in ("trace", "probe", "invariant", "parity")]
                fh.write("| %s | `%s` | %s | %s |\n" % (fam, f, level, " | ".join(cells)))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
