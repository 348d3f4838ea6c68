#!/usr/bin/python3
"""cp_paths_check.py - the numeric side of tests/trainer/cp_paths.sh.

  grads A B TOL      two safetensors files: every tensor's largest difference relative to that tensor's largest
                     |value| in B (floored at 1e-12 of the set's largest, so that a tensor of rounding crumbs is
                     judged against the set); prints the worst tensor; exit 1 when above TOL
  reference RUN      the receipt's memory_plan.reference of rank 0 (none, kept, recaptured)

Reads safetensors itself (8-byte header length, JSON header, data): independent of the trainer's reader.
Exit 2 for bad usage."""
import json, os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prompts_per_step_check import load  # noqa: E402  (the tests' own safetensors reader)


def main(argv):
    if len(argv) == 5 and argv[1] == "grads":
        x, ref, tol = load(argv[2]), load(argv[3]), float(argv[4])
        if set(x) != set(ref):
            print(f"tensor names differ: {sorted(set(x) ^ set(ref))[:5]}")
            return 1
        scale = max((float(np.max(np.abs(v))) for v in ref.values() if v.size), default=0.0)
        if scale == 0.0:
            print("every gradient is zero: nothing was compared")
            return 1
        worst, name = 0.0, "-"
        for k, r in ref.items():
            if not r.size:
                continue
            e = float(np.max(np.abs(x[k] - r))) / max(float(np.max(np.abs(r))), 1e-12 * scale)
            if e > worst:
                worst, name = e, k
        print(f"worst tensor {name}: relative difference {worst:.3e} (tolerance {tol:g})")
        return 0 if worst <= tol else 1
    if len(argv) == 3 and argv[1] == "reference":
        d = json.load(open(argv[2] + "/rank-0000/receipt.json"))
        print(d["predicate"]["rank_state"]["memory_plan"]["reference"])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
