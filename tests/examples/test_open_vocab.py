#!/usr/bin/env python3
"""A trainer with its own names is audited by its own profile (issue 23).

The audit keeps no list of phase or layer-kind names for v2 runs: a profile
declares them. This test takes a real CP-2 run of examples/torch_cp, renames
every phase and layer kind in its traces and receipts to names LongStraw never
uses (prefill, generate, ..., mamba2, swa, ...), re-digests the files, writes a
profile with the same renaming into a profile directory of its own, and audits
the renamed run with `longstraw-audit --profiles DIR`:

- the renamed run proves level 1 with exactly the rule verdicts of the original
  run under profiles/torch-cp.json (the names are the trainer's choice, not the
  audit's);
- a trace whose replay-like phase carries a name the profile does not require
  fails rank.phases naming the profile's phase;
- a profile requiring a collective purpose under a layer kind of its own fails
  collectives.composition naming that kind's label, proving the requirement is
  read from the profile's names.

usage: test_open_vocab.py BUILD_DIR WORK_DIR
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import zstandard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import longstraw_emit as le  # noqa: E402

PHASES = {"capture": "prefill", "rollout": "generate", "score": "judge", "replay": "learn",
          "prompt_bwd": "prefill.bwd", "finalize": "sync", "optimizer": "update"}
KINDS = {"gdn": "mamba2", "attn": "swa", "embed": "tok_embed", "head": "lm_out"}


def rename_event(o):
    if "phases" in o and isinstance(o["phases"], list):
        o["phases"] = [PHASES.get(p, p) for p in o["phases"]]
    if "layer_kinds" in o:
        o["layer_kinds"] = [KINDS.get(k, k) for k in o["layer_kinds"]]
    if "profile" in o and isinstance(o["profile"], str):
        o["profile"] = "renamed"
    if isinstance(o.get("phase"), str):
        o["phase"] = PHASES.get(o["phase"], o["phase"])
    if o.get("ev") == "layer_end":
        o["kind"] = KINDS.get(o["kind"], o["kind"])
    return o


def rewrite_trace(path, extra=None):
    """Decode every frame, rename, write one checksummed frame (valid: docs/design.md §6)."""
    with open(path, "rb") as f:
        data = f.read()
    dctx, out = zstandard.ZstdDecompressor(), []
    while data:
        obj = dctx.decompressobj()
        out.append(obj.decompress(data))
        data = obj.unused_data
    text = b"".join(out).decode()
    lines = []
    for line in text.split("\n"):
        if not line:
            continue
        o = rename_event(json.loads(line))
        if extra:
            o = extra(o)
        lines.append(json.dumps(o, separators=(",", ":")))
    raw = ("\n".join(lines) + "\n").encode()
    with open(path, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=6, write_checksum=True).compress(raw))


def rename_run(run, profile_sha, extra=None):
    for name in sorted(os.listdir(run)):
        d = os.path.join(run, name)
        if not name.startswith("rank-"):
            continue
        rec = os.path.join(d, "receipt.json")
        with open(rec) as f:
            doc = json.load(f)
        p = doc["predicate"]
        ev = os.path.join(run, p["events"]["file"])
        rewrite_trace(ev, extra)
        doc["subject"][0]["digest"]["sha256"] = hashlib.sha256(open(ev, "rb").read()).hexdigest()
        p["profile"] = {"name": "renamed", "sha256": profile_sha}
        for ph in p.get("phases", []):
            ph["phase"] = PHASES.get(ph["phase"], ph["phase"])
        with open(rec, "w") as f:
            json.dump(doc, f, indent=1)
    os.remove(os.path.join(run, "manifest.json"))
    le.write_manifest(run)


def renamed_profile(src, dst_dir, tweak=None):
    with open(src) as f:
        p = json.load(f)
    p["name"] = "renamed"
    p["phases"] = [PHASES[x] for x in p["phases"]]
    p["layer_kinds"] = [KINDS[x] for x in p["layer_kinds"]]
    for st in p["steps"] + p.get("sequence", []):
        st["phase"] = PHASES[st["phase"]]
    for rule in p["collectives"].values():
        for q in rule.get("layers", []):
            q["layer_kinds"] = [KINDS[k] for k in q["layer_kinds"]]
            q["phases"] = [PHASES[x] for x in q["phases"]]
        for q in rule.get("steps", []):
            q["phase"] = PHASES[q["phase"]]
    if tweak:
        tweak(p)
    os.makedirs(dst_dir, exist_ok=True)
    path = os.path.join(dst_dir, "renamed.json")
    with open(path, "w") as f:
        json.dump(p, f, indent=1)
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def audit(build, run, profiles=None):
    cmd = [os.path.join(build, "audit", "longstraw-audit"), run, "--json", run + ".audit.json", "--quiet"]
    if profiles:
        cmd += ["--profiles", profiles]
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if rc.returncode == 2:
        raise SystemExit(f"longstraw-audit {run}: unusable: {rc.stderr}")
    with open(run + ".audit.json") as f:
        rep = json.load(f)
    verdicts = {c["id"]: (c["verdict"], c["message"]) for lv in rep["levels"] for c in lv["checks"]}
    return rep["level"], verdicts


def main(argv):
    build, work = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("TORCH_CP_BUG", None)
    train = [sys.executable, os.path.join(ROOT, "examples", "torch_cp", "train.py")]
    subprocess.run(train + ["--mode", "init", "--seed", "5", "--out", os.path.join(work, "init")], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(train + ["--mode", "run", "--cp", "2", "--weights", os.path.join(work, "init", "weights.safetensors"),
                            "--out", os.path.join(work, "orig")], env=env, check=True, stdout=subprocess.DEVNULL)
    orig = os.path.join(work, "orig", "run")
    lvl0, v0 = audit(build, orig)
    bad = []
    if lvl0 != 1:
        bad.append(f"the original run proves level {lvl0}, expected 1 (no parity report)")

    profile_src = os.path.join(ROOT, "profiles", "torch-cp.json")
    # 1. renamed run, renamed profile: the same verdicts
    pdir = os.path.join(work, "profiles")
    sha = renamed_profile(profile_src, pdir)
    ren = os.path.join(work, "renamed")
    shutil.copytree(orig, ren)
    rename_run(ren, sha)
    lvl1, v1 = audit(build, ren, pdir)
    if lvl1 != 1:
        bad.append(f"the renamed run proves level {lvl1}, expected 1: "
                   + "; ".join(f"{k}: {m}" for k, (v, m) in v1.items() if v == "fail"))
    for k, (v, _) in v0.items():
        if k in v1 and v1[k][0] != v:
            bad.append(f"{k}: {v} on the original, {v1[k][0]} renamed ({v1[k][1]})")
    with open(os.path.join(ren, "rank-0000", "receipt.json")) as f:
        phases = [p["phase"] for p in json.load(f)["predicate"]["phases"]]
    if "learn" not in phases or "replay" in phases:
        bad.append(f"the renamed receipt's phases: {phases}")

    # 2. a phase the profile requires, renamed away in the trace: rank.phases names it
    ren2 = os.path.join(work, "renamed-phase")
    shutil.copytree(orig, ren2)

    def learn_away(o):
        if o.get("phase") == "learn":
            o["phase"] = "learn2"
        if isinstance(o.get("phases"), list):
            o["phases"] = [("learn2" if x == "learn" else x) for x in o["phases"]]
        return o
    rename_run(ren2, sha, learn_away)
    lvl2, v2 = audit(build, ren2, pdir)
    ok2 = v2.get("rank.phases", ("?", ""))[0] == "fail" and "learn" in v2["rank.phases"][1]
    if lvl2 != 0 or not ok2:
        bad.append(f"a missing 'learn' phase: level {lvl2}, rank.phases {v2.get('rank.phases')}")

    # 3. a requirement on a layer kind of the profile's own: an extra purpose under "swa" fails
    pdir3 = os.path.join(work, "profiles-extra")

    def extra_purpose(p):
        q = p["collectives"]["collectives.composition"]["layers"][0]
        assert q["layer_kinds"] == ["swa"], q
        q["purposes"] = q["purposes"] + ["swa_extra_sum"]
    sha3 = renamed_profile(profile_src, pdir3, extra_purpose)
    ren3 = os.path.join(work, "renamed-extra")
    shutil.copytree(orig, ren3)
    rename_run(ren3, sha3)
    lvl3, v3 = audit(build, ren3, pdir3)
    comp = v3.get("collectives.composition", ("?", ""))
    if comp[0] != "fail" or lvl3 != 1:
        bad.append(f"a profile requiring swa_extra_sum: level {lvl3}, collectives.composition {comp}")
    print(f"original: level {lvl0}; renamed: level {lvl1} ({sum(v == 'pass' for v, _ in v1.values())} rules pass); "
          f"phase renamed away: level {lvl2} ({v2.get('rank.phases', ('?', ''))[1][:120]}); "
          f"extra purpose: {comp[1][:160]}")
    for b in bad:
        print("test_open_vocab: " + b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
