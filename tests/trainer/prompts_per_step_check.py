#!/usr/bin/python3
"""prompts_per_step_check.py - the numeric side of tests/trainer/prompts_per_step.sh.

  rollouts OUT N SEED           write N rollouts lines (one group each: prompt, 2 responses, rewards)
  mean2 B2 A B [TOL]            the B = 2 step's gradients (safetensors B2) against the mean of two single-group
                                steps' (A, B): the largest error relative to the largest value of the set
  same X Y [TOL]                two safetensors files (parameters): the largest error relative to the set's largest
  peak RUN                      the receipt's measured per-step peak (rank 0, memory.per_step.total_peak_bytes)

Reads safetensors itself (an 8-byte header length, a JSON header, the data), so it checks the trainer's files
independently of the trainer's reader.  Exit 1 when above TOL, 2 for bad usage."""
import json, random, struct, sys

import numpy as np

DT = {"F32": np.float32, "F64": np.float64}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[base + a:base + b], dtype=DT[v["dtype"]]).astype(np.float64)
    return out


def rel_err(x, ref, what):
    if set(x) != set(ref):
        print(f"{what}: tensor names differ: {sorted(set(x) ^ set(ref))[:5]}")
        return float("inf")
    scale = max(float(np.max(np.abs(v))) if v.size else 0.0 for v in ref.values()) or 1.0
    worst, name = 0.0, ""
    for k in ref:
        e = float(np.max(np.abs(x[k] - ref[k]))) if ref[k].size else 0.0
        if e > worst:
            worst, name = e, k
    print(f"{what}: max error {worst:.3e} ({name or '-'}), relative to the set's largest |value| {scale:.3e}: "
          f"{worst / scale:.3e}")
    return worst / scale


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = argv[1]
    if cmd == "rollouts" and len(argv) == 5:
        rng = random.Random(int(argv[4]))
        with open(argv[2], "w") as f:
            for _ in range(int(argv[3])):
                P = 80
                line = {"prompt": [rng.randrange(32, 127) for _ in range(P)],
                        "responses": [[rng.randrange(48, 58) for _ in range(6)] for _ in range(2)],
                        "rewards": [round(rng.random(), 3), round(rng.random(), 3)]}
                f.write(json.dumps(line) + "\n")
        return 0
    if cmd == "mean2" and len(argv) in (5, 6):
        tol = float(argv[5]) if len(argv) == 6 else 1e-10
        g2, a, b = load(argv[2]), load(argv[3]), load(argv[4])
        mean = {k: 0.5 * (a[k] + b[k]) for k in a}
        nz = sum(int(np.count_nonzero(v)) for v in g2.values())
        if nz == 0:
            print("mean2: the B = 2 gradients are all zero: nothing was compared")
            return 1
        return 0 if rel_err(g2, mean, "B=2 vs mean of two B=1") <= tol else 1
    if cmd == "same" and len(argv) in (4, 5):
        tol = float(argv[4]) if len(argv) == 5 else 1e-10
        return 0 if rel_err(load(argv[2]), load(argv[3]), "parameters") <= tol else 1
    if cmd == "peak" and len(argv) == 3:
        d = json.load(open(argv[2] + "/rank-0000/receipt.json"))
        print(d["predicate"]["memory"]["per_step"]["total_peak_bytes"])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
