#!/usr/bin/env python3
"""grad_cosine_check.py - the checks of grad_cosine.sh (longstraw-train --grad-cosine-every N).

  grad_cosine_check.py same M_OFF M_ON N
      the two --metrics files (the run without and with --grad-cosine-every N) hold the same steps with the
      same figures (every field but the timings and the three new ones, compared exactly); the measured run
      holds grad_cosine, grad_norm_detached and grad_norm_full on exactly the run-local steps i with
      i % N == 0, the other run on none
  grad_cosine_check.py independent G_DET G_FULL METRICS MODE TOL
      the cosine and the two norms of step 1 (the first line of METRICS, a run with --grad-cosine-every in
      grad mode MODE) against those computed here from two --dump-grads files of the same step: G_DET of
      the run in detached mode, G_FULL in full mode (safetensors read with numpy alone); relative error at
      most TOL.  And the fault check: the two gradients differ (cosine < 0.9999, norms more than 1e-3
      apart), so that a cosine of one gradient with itself fails here; the run's own mode's norm is its
      grad_norm (1e-12)
"""
import json
import struct
import sys

import numpy as np

NEW = ("grad_cosine", "grad_norm_detached", "grad_norm_full")
TIMINGS = ("step_wall_s", "tokens_per_s")


def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def read_st(path):
    """name -> float64 array of a safetensors file (the gradient tensors only)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        dt = {"F64": "<f8", "F32": "<f4"}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[base + a:base + b], dtype=dt).astype(np.float64)
    return out


def same(argv):
    off, on, N = lines(argv[0]), lines(argv[1]), int(argv[2])
    bad = []
    if len(off) != len(on):
        bad.append("%d steps without the option, %d with it" % (len(off), len(on)))
    for a, b in zip(off, on):
        i = a["step"] - off[0]["step"]
        ka = {k: v for k, v in a.items() if k not in NEW + TIMINGS}
        kb = {k: v for k, v in b.items() if k not in NEW + TIMINGS}
        if ka != kb:
            diff = sorted(k for k in set(ka) | set(kb) if ka.get(k) != kb.get(k))
            bad.append("step %d: %s differ" % (a["step"], ", ".join("%s %r/%r" % (k, ka.get(k), kb.get(k)) for k in diff)))
        if any(k in a for k in NEW):
            bad.append("step %d: the run without the option records %s" % (a["step"], [k for k in NEW if k in a]))
        due = i % N == 0
        has = [k in b for k in ("grad_norm_detached", "grad_norm_full")]
        if due and not all(has):
            bad.append("step %d (run-local %d, N %d): not measured" % (b["step"], i, N))
        if not due and (any(has) or "grad_cosine" in b):
            bad.append("step %d (run-local %d, N %d): measured, but not due" % (b["step"], i, N))
    for m in bad:
        print("  " + m)
    print("  %d steps, every figure equal; measured on %s" % (len(on), [b["step"] for b in on if "grad_norm_full" in b])
          if not bad else "  FAIL")
    return 1 if bad else 0


def independent(argv):
    gd, gf = read_st(argv[0]), read_st(argv[1])
    m = lines(argv[2])[0]
    mode, tol = argv[3], float(argv[4])
    if sorted(gd) != sorted(gf):
        print("  the two dumps name other tensors")
        return 1
    names = sorted(gd)
    d = np.concatenate([gd[k] for k in names])
    f = np.concatenate([gf[k] for k in names])
    nd, nf = float(np.sqrt(np.dot(d, d))), float(np.sqrt(np.dot(f, f)))
    cos = float(np.dot(d, f) / (nd * nf))
    rel = lambda a, b: abs(a - b) / max(abs(b), 1e-300)
    errs = {"grad_cosine": rel(m["grad_cosine"], cos), "grad_norm_detached": rel(m["grad_norm_detached"], nd),
            "grad_norm_full": rel(m["grad_norm_full"], nf)}
    print("  %d tensors, %d values: cosine %.12f (recorded %.12f), norms detached %.9e (%.9e), full %.9e (%.9e); "
          "largest rel error %.2e (tol %g)" % (len(names), d.size, cos, m["grad_cosine"], nd, m["grad_norm_detached"],
                                                 nf, m["grad_norm_full"], max(errs.values()), tol))
    rc = 0
    for k, e in errs.items():
        if not e <= tol:
            print("  FAIL: %s: rel error %.3e > %g" % (k, e, tol))
            rc = 1
    if not (cos < 0.9999 and m["grad_cosine"] < 0.9999 and rel(nd, nf) > 1e-3 and
            rel(m["grad_norm_detached"], m["grad_norm_full"]) > 1e-3):
        print("  FAIL: the detached and full gradients do not differ (cosine %.9f, recorded %.9f): the fixture "
              "cannot tell one gradient from the other" % (cos, m["grad_cosine"]))
        rc = 1
    own = m["grad_norm_full" if mode == "full" else "grad_norm_detached"]
    if rel(own, m["grad_norm"]) > 1e-12:
        print("  FAIL: the %s norm %.17g is not the step's grad_norm %.17g" % (mode, own, m["grad_norm"]))
        rc = 1
    return rc


if __name__ == "__main__":
    fn = {"same": same, "independent": independent}.get(sys.argv[1] if len(sys.argv) > 1 else "")
    if fn is None:
        sys.exit(__doc__)
    sys.exit(fn(sys.argv[2:]))
