#!/usr/bin/env python3
"""parity_fd_fake_train.py - a stand-in for longstraw-train in test_parity_fd.

longstraw-parity's finite differences run the trainer at moved weights and
read one number from its log, the loss ("  exact loss X (last step)").  This
script is such a trainer for a loss whose gradient test_parity_fd.c knows
in closed form:

    L(w) = sum over tensors T of s_T * sum_j (0.5 w_j^2 + 0.05 w_j^3 + 0.1 w_j)

with s_T from the JSON object in $LS_FAKE_LOSS ({"tensor name": s_T}; a
tensor not named there has s_T = 1), over every tensor of --load (a
float64 safetensors file).  Sums are math.fsum: the loss is rounded once.

Checks of the pool (exit 4, named on stderr): more than $LS_FAKE_MAX_FILES
(when set) weight files beside --load while it runs.  $LS_FAKE_FAIL names a
run (the basename of --out, e.g. 1-2) that exits 3 instead.  Its decisions
line ("  decisions N digest D", kernels/decisions.h) is the same for every
run, except the runs $LS_FAKE_FLIP names (comma-separated shell patterns
for the last two parts of --out, e.g. fd/1-3 or fd-retry*/0-3), which
decided differently (a routing flipped at its moved weights).
"""
import fnmatch
import json
import math
import os
import struct
import sys


def arg(name):
    a = sys.argv
    for i in range(len(a) - 1):
        if a[i] == name:
            return a[i + 1]
    sys.exit("fake train: no " + name)


def read_f64(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + hlen])
    data = raw[8 + hlen :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F64":
            sys.exit("fake train: %s is %s, not F64" % (name, t["dtype"]))
        b, e = t["data_offsets"]
        out[name] = struct.unpack("<%dd" % ((e - b) // 8), data[b:e])
    return out


def main():
    load, out = arg("--load"), arg("--out")
    run = os.path.basename(out.rstrip("/"))
    if os.environ.get("LS_FAKE_FAIL") == run:
        print("fake train: failing run %s as asked" % run, file=sys.stderr)
        return 3
    most = os.environ.get("LS_FAKE_MAX_FILES")
    if most:
        d = os.path.dirname(load)
        n = sum(1 for f in os.listdir(d) if f.endswith(".safetensors"))
        if n > int(most):
            print("fake train: %d weight files in %s, more than %s" % (n, d, most), file=sys.stderr)
            return 4
    scales = {}
    if os.environ.get("LS_FAKE_LOSS"):
        with open(os.environ["LS_FAKE_LOSS"]) as f:
            scales = json.load(f)
    terms = []
    for name, w in read_f64(load).items():
        s = scales.get(name, 1.0)
        terms.append(s * math.fsum(0.5 * x * x + 0.05 * x * x * x + 0.1 * x for x in w))
    print("fake train: %s" % run)
    print("  exact loss %r (last step)" % math.fsum(terms))
    tail = "/".join(out.rstrip("/").split("/")[-2:])
    flip = any(fnmatch.fnmatchcase(tail, p) for p in os.environ.get("LS_FAKE_FLIP", "").split(",") if p)
    print("  decisions 12 digest %016x (the run's, in order)" % (0xfeed if flip else 0xbeef))
    return 0


if __name__ == "__main__":
    sys.exit(main())
