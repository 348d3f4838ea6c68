#!/usr/bin/python3
"""probe_check.py - the checks of tests/trainer/probe.sh on runs of longstraw-train --probe-every K.

  probe_check.py probes RUN SCHEMA VERDICT STEPS [--min-rel X] [--max-rel X] [--groups N]
      every rank's trace holds exactly one gradient_probe event per step of STEPS (comma-separated,
      global, 0-based) and no other, each valid against SCHEMA (jsonschema), with the top-level
      verdict VERDICT (a|b: either), the same fields on every rank but seconds, rank 0's largest
      group rel_error within [min-rel, max-rel], N groups when given; prints one line per step.
  probe_check.py audits A.json B.json
      the two audit reports give every rule but run.probe the same verdict; prints run.probe's.
  probe_check.py rule REPORT.json ID VERDICT [TEXT]
      rule ID's verdict is VERDICT (and, when given, TEXT is in its message or evidence).
"""
import json
import subprocess
import sys


def events(run, kind):
    out = {}
    rank = 0
    while True:
        path = "%s/rank-%04d/events.jsonl.zst" % (run, rank)
        try:
            text = subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout.decode()
        except (subprocess.CalledProcessError, FileNotFoundError):
            break
        lines = [json.loads(x) for x in text.splitlines()[1:] if x.strip()]
        out[rank] = [e for e in lines if e.get("ev") == kind]
        rank += 1
    if not out:
        sys.exit("probe_check: %s: no trace" % run)
    return out


def probes(argv):
    import jsonschema
    run, schema_path, verdict, steps = argv[0], argv[1], argv[2].split("|"), argv[3]
    want = sorted(int(s) for s in steps.split(",") if s != "")
    opts = {"--min-rel": 0.0, "--max-rel": float("inf"), "--groups": None}
    i = 4
    while i < len(argv):
        opts[argv[i]] = float(argv[i + 1]) if argv[i] != "--groups" else int(argv[i + 1])
        i += 2
    schema = json.load(open(schema_path))
    validator = jsonschema.Draft202012Validator(schema)
    ev = events(run, "gradient_probe")
    bad = []
    for rank, es in ev.items():
        got = [e["step"] for e in es]
        if got != want:
            bad.append("rank %d: gradient_probe on steps %s, expected %s" % (rank, got, want))
        for e in es:
            errs = sorted(validator.iter_errors(e), key=lambda x: list(x.path))
            if errs:
                bad.append("rank %d step %d: not valid against %s: %s" % (rank, e["step"], schema_path, errs[0].message))
            if e["verdict"] not in verdict:
                bad.append("rank %d step %d: verdict %s, expected %s (%s)" % (rank, e["step"], e["verdict"],
                                                                                "|".join(verdict), e.get("reason", "")))
            if opts["--groups"] is not None and len(e["groups"]) != opts["--groups"]:
                bad.append("rank %d step %d: %d groups, expected %d" % (rank, e["step"], len(e["groups"]), opts["--groups"]))
    for k, e0 in enumerate(ev[0]):
        for rank, es in ev.items():
            if rank == 0 or k >= len(es):
                continue
            a = {x: y for x, y in e0.items() if x not in ("rank", "seq", "ts_ns", "seconds")}
            b = {x: y for x, y in es[k].items() if x not in ("rank", "seq", "ts_ns", "seconds")}
            if a != b:
                bad.append("step %d: rank %d's gradient_probe differs from rank 0's" % (e0["step"], rank))
        rel = max([g["rel_error"] for g in e0["groups"]] or [0.0])
        if e0["groups"] and not (opts["--min-rel"] <= rel <= opts["--max-rel"]):
            bad.append("step %d: largest rel_error %.3g outside [%g, %g]" % (e0["step"], rel, opts["--min-rel"],
                                                                           opts["--max-rel"]))
        print("  step %d: %s, %d group(s), %d evaluation(s), largest rel_error %.3g, h %g%s" % (
            e0["step"], e0["verdict"], len(e0["groups"]), e0["evaluations"], rel, e0["h"],
            "; " + e0["reason"] if e0.get("reason") else ""))
    for b in bad:
        print("probe_check: %s: %s" % (run, b))
    return 1 if bad else 0


def verdicts(doc):
    return {c["id"]: c["verdict"] for lv in doc["levels"] for c in lv["checks"]}


def audits(argv):
    a, b = (verdicts(json.load(open(p))) for p in argv[:2])
    pa, pb = a.pop("run.probe", None), b.pop("run.probe", None)
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    print("  run.probe: %s / %s; %d other rules, %s" % (pa, pb, len(a), "every verdict equal" if not diff else
                                                        "differing: " + ", ".join("%s %s/%s" % (k, a.get(k), b.get(k)) for k in diff)))
    return 1 if diff else 0


def rule(argv):
    doc = json.load(open(argv[0]))
    for lv in doc["levels"]:
        for c in lv["checks"]:
            if c["id"] != argv[1]:
                continue
            text = c["message"] + " | " + " | ".join(e["detail"] for e in c["evidence"])
            ok = c["verdict"] == argv[2] and (len(argv) < 4 or argv[3] in text)
            print("  %s: %s: %s" % (argv[1], c["verdict"], text[:300]))
            return 0 if ok else 1
    print("probe_check: %s: no rule %s" % (argv[0], argv[1]))
    return 1


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    fn = {"probes": probes, "audits": audits, "rule": rule}.get(cmd)
    if fn is None:
        sys.exit(__doc__)
    sys.exit(fn(sys.argv[2:]))
