#!/usr/bin/env python3
"""The torch_cp example's fault table (issue 23): each public CP bug class, compiled into the
PyTorch trainer (TORCH_CP_BUG: the fault acts, the run does not declare it, the build identity
differs from the clean build's), caught at the level it breaks.

For each bug: longstraw-parity --adapter examples/torch_cp/adapter.json (CP 1, 2, float64) makes
the report of that build, the trainer makes a CP-2 run of it, and longstraw-audit scores the run
with the report. The table asserts the level reached and the rules that name the bug; the clean
build reaches level 4. Nothing here is the trainer's word: the run never records the bug, so every
failure is the audit's or parity's own finding (trace rules, digests, parity's comparisons).

The sources (examples/torch_cp, python/longstraw_emit, profiles/torch-cp.json) are copied outside the
git tree first: the build identity digests the code by content (the copy is the same build as the
tree it came from), and an edit made while the table runs (a shared tree) would split one report
into two builds.

usage: fault_table.py BUILD_DIR OUT_DIR [--markdown FILE]
"""
import json
import os
import shutil
import sys
import tempfile

from example_table import PY, copy_sources, failed_rules, finish, init_weights, run, start

# bug -> (level the audit proves, the rules that must fail (each at a level above the proven one),
#         parity's exit status for the bug's build, what the bug is, the public report it reproduces)
TABLE = [
    ("none", 4, [], 0, "no bug", "-"),
    ("zero-state", 1, ["parity.logprob"], 1,
     "non-first ranks start the recurrent layer from a zero state", "fla PR #1004"),
    ("skip-dkv-reduce", 2, ["collectives.dkv", "parity.cp_grad"], 1,
     "the response dK/dV reduction dropped", "TransformerEngine #1557 / Megatron-LM #1464"),
    ("loss-cp-scale", 2, ["parity.cp_grad"], 1,
     "the loss multiplied by the CP size", "Megatron-LM #673 / #906"),
    ("decay-grad", 3, ["parity.grad", "parity.fd_grad"], 1,
     "the A_log / dt_bias gradients corrupted, the forward right", "QwenLM/FlashQLA PR #28"),
    ("fake-reduce", 0, ["collectives.performed"], 1,
     "the gradient all-reduce logged but never performed", "-"),
    # the sender changes its hand-off buffer before the send completed: what the receiver gets (the
    # stale state or the new one) is the transport's timing, so parity's comparisons may or may not
    # see it (exit None: not asserted); the point-to-point rule sees it every time
    ("stale-handoff", 0, ["collectives.p2p"], None,
     "a GDN state handed to the next rank before its last update landed", "-"),
]


def main(argv):
    args = start(argv, __doc__)
    if args is None:
        return 2
    build, out, md = args
    parity = os.path.join(build, "parity", "longstraw-parity")
    audit = os.path.join(build, "audit", "longstraw-audit")
    src = tempfile.mkdtemp(prefix="fault_table-src-")
    try:
        return table(build, out, md, parity, audit, src)
    finally:
        shutil.rmtree(src, ignore_errors=True)


def table(build, out, md, parity, audit, src):
    copy_sources(src)
    EXAMPLE = os.path.join(src, "examples", "torch_cp")
    base = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(src, "python"),
                OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    base.pop("TORCH_CP_BUG", None)
    weights = init_weights("fault_table", EXAMPLE, base, out)
    if weights is None:
        return 1
    rows, bad = [], []
    for bug, want_level, want_rules, want_prc, what, public in TABLE:
        env = dict(base)
        if bug != "none":
            env["TORCH_CP_BUG"] = bug
        par, rdir = os.path.join(out, "parity-" + bug), os.path.join(out, "run-" + bug)
        prc = run([parity, "--adapter", os.path.join(EXAMPLE, "adapter.json"), "--cp", "1,2", "--dtype", "f64",
                   "--jobs", "2", "--quiet", "--out", par], env, par + ".log")
        trc = run([PY, os.path.join(EXAMPLE, "train.py"), "--mode", "run", "--cp", "2", "--weights",
                   os.path.join(weights, "weights.safetensors"), "--batch", os.path.join(weights, "batch.json"),
                   "--out", rdir], env, rdir + ".log")
        rep = os.path.join(out, "audit-" + bug + ".json")
        arc = run([audit, os.path.join(rdir, "run"), "--parity", os.path.join(par, "parity.json"), "--json", rep,
                   "--require-level", "4"], env, os.path.join(out, "audit-" + bug + ".txt"))
        if trc != 0 or arc == 2 or not os.path.exists(rep):
            bad.append(f"{bug}: the run or the audit did not complete (train {trc}, audit {arc}; see {out})")
            continue
        with open(rep) as f:
            report = json.load(f)
        level = report["level"]
        failed = failed_rules(report)
        named = [r for r in want_rules if r in failed]
        rows.append((bug, what, public, level, ", ".join(f"`{r}` (L{failed[r]})" for r in want_rules if r in failed)
                     or "-", prc))
        if level != want_level:
            bad.append(f"{bug}: level {level}, expected {want_level} (failed: {sorted(failed)})")
        if named != want_rules:
            bad.append(f"{bug}: rules {want_rules} expected to fail, failed: {sorted(failed)}")
        for r in want_rules:
            if r in failed and failed[r] != want_level + 1:
                bad.append(f"{bug}: {r} fails at level {failed[r]}, expected the level it breaks, {want_level + 1}")
        if bug == "none" and failed:
            bad.append(f"none: the clean build failed {sorted(failed)}")
        if want_prc is not None and prc != want_prc:
            bad.append(f"{bug}: longstraw-parity exit {prc}, expected {want_prc}")
    lines = ["| bug (TORCH_CP_BUG) | what | reproduces | audit level | rules that name it | parity exit |",
             "|---|---|---|---|---|---|"]
    lines += [f"| `{b}` | {w} | {p} | {lv} | {r} | {prc} |" for b, w, p, lv, r, prc in rows]
    return finish("fault_table", lines, md, bad)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
