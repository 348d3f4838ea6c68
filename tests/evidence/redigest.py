#!/usr/bin/env python3
"""redigest.py RUN: what an adversary with write access does after editing a
run's files: recompute every digest the manifest holds (its subjects) so that
only the audit's cross-checks of the facts themselves can notice."""
import hashlib
import json
import sys

run = sys.argv[1]
p = run + "/manifest.json"
m = json.load(open(p))
for s in m["subject"]:
    with open(run + "/" + s["name"], "rb") as f:
        s["digest"]["sha256"] = hashlib.sha256(f.read()).hexdigest()
json.dump(m, open(p, "w"), indent=1)
