#!/usr/bin/env python3
"""redigest.py RUN [--receipts]: what an adversary with write access does after
editing a run's files: recompute every digest the manifest holds (its subjects)
so that only the audit's cross-checks of the facts themselves can notice; with
--receipts, each receipt's digest of its trace first.  Importable:
redigest(run, receipts) (tests/audit_sequence_edit.py, tests/audit_invariants_edit.py,
tests/evidence/generate.py)."""
import glob
import hashlib
import json
import os
import sys


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def redigest(run, receipts=False):
    if receipts:
        for rp in sorted(glob.glob(run + "/rank-*/receipt.json")):
            r = json.load(open(rp))
            for s in r["subject"]:
                if os.path.exists(run + "/" + s["name"]):
                    s["digest"]["sha256"] = _sha(run + "/" + s["name"])
            json.dump(r, open(rp, "w"), indent=1)
    p = run + "/manifest.json"
    if os.path.exists(p):
        m = json.load(open(p))
        for s in m["subject"]:
            s["digest"]["sha256"] = _sha(run + "/" + s["name"])
        json.dump(m, open(p, "w"), indent=1)


if __name__ == "__main__":
    redigest(sys.argv[1], "--receipts" in sys.argv[2:])
