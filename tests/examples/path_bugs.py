#!/usr/bin/env python3
"""CP bugs the torch_cp adapter does not declare, on a realistic run, under the CI recipe.

The adapter's own batch (13 tokens: 12 captured positions, even over 2 and 4 ranks; responses and old
log-probs supplied) never takes the path these bugs live on. Each is compiled into the example
(TORCH_CP_BUG: it acts, the run does not declare it, the build identity differs from the clean
build's) and must be refused level 4 by whichever evidence catches it:
  last-shard-short    with uneven shards the last rank captures T // N positions
  stale-old-offset    on the sampling path the old log-probs are the sampler's, one position early
  dkv-remainder-drop  with uneven shards the prompt's reduced K/V gradient loses its remainder row
while the clean build reaches level 4. Then the same recipe on DDP around the CP model (--dp 2: two
replicas of CP-2, four processes, the trace written by le.instrument alone): the clean build reaches
level 4 (parity --like runs DP 1 and 2, parity.dp_grad), and dp-no-scale compiled in (the replicas'
losses not scaled for DDP's average) is refused by parity.dp_grad, parity.grad and the run's probe.

Per build, the CI recipe (docs/evidence.md; examples/torch_cp/README.md): a CP-2 run of a 40-token
prompt whose 4 responses the trainer samples itself (39 captured positions: shards 19|20), its gradient
probed (--probe-every 1), signed; longstraw-parity --adapter examples/torch_cp/adapter.json --like RUN
(the run's prompt length and shard split, the prompt-only path, the run's path in the coverage),
signed; longstraw-audit --require-level 4 --require-signed --require-probe. The table: the level, the
rules that refused each bug, the probe's verdict and the first step's GRPO loss (0 on-policy).

The sources are copied outside the git tree first: a build identity names the repository's HEAD, and a
commit made while the test runs (a shared tree) would split one report into two builds.

usage: path_bugs.py BUILD_DIR OUT_DIR [--markdown FILE]
"""
import json
import os
import shutil
import sys
import tempfile
import time

from example_table import PY, copy_sources, failed_rules, finish, init_weights, run, start

# (bug, DP replicas) -> (level proven, rules that must fail, the probe's verdict, what it is)
TABLE = [
    ("none", 1, 4, [], "pass", "no bug"),
    ("last-shard-short", 1, 1, ["parity.logprob"], "pass",
     "uneven shards: the last rank captures T // N positions, dropping the prompt's last captured one"),
    ("stale-old-offset", 1, 1, ["parity.forward", "parity.grad", "parity.loss"], "pass",
     "sampling path: the old log-probs are the sampler's, read one position early"),
    ("dkv-remainder-drop", 1, 2, ["parity.cp_grad", "parity.grad", "run.probe"], "fail",
     "uneven shards: the prompt's reduced K/V gradient read as T // N rows"),
    ("none", 2, 4, [], "pass", "no bug; DDP around CP-2, two replicas"),
    ("dp-no-scale", 2, 2, ["parity.dp_grad", "parity.grad", "run.probe"], "fail",
     "DDP around CP-2: the replicas' losses not scaled for DDP's average"),
]


def trace_events(path, kind):
    import zstandard
    with open(path, "rb") as f:
        text = zstandard.ZstdDecompressor().stream_reader(f).read().decode()
    return [json.loads(x) for x in text.splitlines()[1:] if f'"ev":"{kind}"' in x]


def main(argv):
    args = start(argv, __doc__)
    if args is None:
        return 2
    build, out, md = args
    only = argv[argv.index("--only") + 1].split(",") if "--only" in argv else None
    parity = os.path.join(build, "parity", "longstraw-parity")
    audit = os.path.join(build, "audit", "longstraw-audit")
    sign = os.path.join(build, "receipts", "longstraw-sign")
    src = tempfile.mkdtemp(prefix="path_bugs-src-")
    try:
        copy_sources(src)
        ex = os.path.join(src, "examples", "torch_cp")
        base = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(src, "python"))
        base.pop("TORCH_CP_BUG", None)
        priv, pub = os.path.join(out, "ci.pem"), os.path.join(out, "ci.pub")
        if run([sign, "keygen", "--private", priv, "--public", pub], base, os.path.join(out, "keygen.log")) != 0:
            print("path_bugs: longstraw-sign keygen failed", file=sys.stderr)
            return 1
        init = init_weights("path_bugs", ex, base, out)
        if init is None:
            return 1
        rows, bad = [], []
        for bug, dp, want_level, want_rules, want_probe, what in TABLE:
            if only and bug not in only:
                continue
            t0 = time.time()
            env = dict(base)
            if bug != "none":
                env["TORCH_CP_BUG"] = bug
            name = bug if dp == 1 else f"{bug}-dp{dp}"
            rdir, par = os.path.join(out, "run-" + name), os.path.join(out, "parity-" + name)
            trc = run([PY, os.path.join(ex, "train.py"), "--mode", "run", "--cp", "2", "--dp", str(dp), "--seed", "3",
                       "--prompt-len", "40", "--probe-every", "1", "--weights",
                       os.path.join(init, "weights.safetensors"), "--out", rdir], env, rdir + ".log")
            src_rc = run([sign, "sign", os.path.join(rdir, "run"), "--key", priv], env, rdir + ".sign.log") \
                if trc == 0 else -1
            prc = run([parity, "--adapter", os.path.join(ex, "adapter.json"), "--like", os.path.join(rdir, "run"),
                       "--jobs", "2", "--quiet", "--key", priv, "--out", par], env, par + ".log")
            rep = os.path.join(out, "audit-" + name + ".json")
            arc = run([audit, os.path.join(rdir, "run"), "--parity", os.path.join(par, "parity.json"), "--json", rep,
                       "--key", pub, "--parity-key", pub, "--require-signed", "--require-probe",
                       "--require-level", "4"], env, os.path.join(out, "audit-" + name + ".txt"))
            secs = time.time() - t0
            if trc != 0 or src_rc != 0 or prc == 2 or arc == 2 or not os.path.exists(rep):
                bad.append(f"{bug}: a step did not complete (train {trc}, sign {src_rc}, parity {prc}, audit {arc}; "
                           f"see {out})")
                continue
            with open(rep) as f:
                report = json.load(f)
            failed = failed_rules(report)
            probes = trace_events(os.path.join(rdir, "run", "rank-0000", "events.jsonl.zst"), "gradient_probe")
            metrics = trace_events(os.path.join(rdir, "run", "rank-0000", "events.jsonl.zst"), "step_metrics")
            with open(os.path.join(par, "parity.json")) as f:
                pj = json.load(f)
            with open(os.path.join(rdir, "run", "manifest.json")) as f:
                paths = json.load(f)["predicate"]["config"].get("paths", {})
            probe = probes[0]["verdict"] if probes else "-"
            loss = metrics[0]["loss"] if metrics else None
            level = report["level"]
            rows.append((name, what, level, ", ".join(f"`{r}` (L{failed[r]})" for r in sorted(failed)) or "-",
                         probe, loss, prc, secs))
            print(f"path_bugs: {name}: level {level}, parity exit {prc}, probe {probe}, loss {loss}, failed "
                  f"{sorted(failed)} ({secs:.0f} s)", flush=True)
            if paths.get("responses") != ["sampled"] or paths.get("old_logprobs") != ["computed"] or \
                    paths.get("shards") != ["uneven"]:
                bad.append(f"{bug}: the run's path is {paths}, expected sampled, computed, uneven")
            cov = pj.get("coverage", {}).get("paths", {})
            if dp > 1 and (pj.get("coverage", {}).get("dps") != [1, dp] or "dp_grad" not in
                           {c.get("kind") for c in pj.get("checks", [])}):
                bad.append(f"{name}: the report did not run DP {dp} (coverage.dps {pj.get('coverage', {}).get('dps')})")
            if bug == "none" and (pj.get("like", {}).get("uncovered") or "sampled" not in cov.get("responses", [])
                                  or "uneven" not in cov.get("shards", [])):
                bad.append(f"none: the report does not cover the run's path: {pj.get('like')} {cov}")
            if pj.get("configurations", [{}])[0].get("prompt_len") != 40:
                bad.append(f"{bug}: the report's batch is not the run's 40-token prompt: {pj.get('configurations')}")
            if level != want_level:
                bad.append(f"{bug}: level {level}, expected {want_level} (failed: {sorted(failed)})")
            for r in want_rules:
                if r not in failed:
                    bad.append(f"{bug}: rule {r} expected to fail; failed: {sorted(failed)}")
            if probe != want_probe:
                bad.append(f"{bug}: the probe's verdict is {probe}, expected {want_probe}")
            assurance = (report.get("assurance") or {}).get("level")
            if bug == "none" and (failed or prc != 0 or assurance != "run-and-parity-signed"):
                bad.append(f"none: failed {sorted(failed)}, parity exit {prc}, assurance {assurance}")
            if bug != "none" and prc != 1:
                bad.append(f"{bug}: longstraw-parity exit {prc}, expected 1")
            if (loss == 0.0) != (bug != "stale-old-offset"):
                bad.append(f"{bug}: the first step's GRPO loss is {loss} (on-policy: 0 unless the old log-probs are wrong)")
        lines = ["| bug (TORCH_CP_BUG) | what | audit level | rules that refused it | probe | first-step loss | "
                 "parity exit | seconds |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| `{b}` | {w} | {lv} | {r} | {p} | {ls:.3g} | {prc} | {s:.0f} |"
                  for b, w, lv, r, p, ls, prc, s in rows]
        return finish("path_bugs", lines, md, bad)
    finally:
        shutil.rmtree(src, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
