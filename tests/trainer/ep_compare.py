#!/usr/bin/env python3
"""ep_compare.py - compare two safetensors files (gradient dumps, checkpoints)
tensor by tensor: the same names, shapes and dtypes, and every value within
--tol (0: bitwise; the bytes compared) of the other file's.  Prints the
largest |a - b| and the tensor holding it.  Exit 0 when they agree, 1 when
they differ (with --expect-differ: the other way round), 2 on bad input.
Standard library only (struct), so that it runs wherever the tests do."""
import json
import struct
import sys

FMT = {"F64": "d", "F32": "f", "I64": "q", "I32": "i"}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than a safetensors header")
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], tuple(t["shape"]), body[a:b])
    return out


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    tol, expect_differ, only = 0.0, "--expect-differ" in argv, None
    for a in argv[1:]:
        if a.startswith("--tol="):
            tol = float(a[6:])
        if a.startswith("--only="):
            only = a[7:]
    if len(args) != 2:
        print("usage: ep_compare.py A.safetensors B.safetensors [--tol=X] [--only=SUBSTRING] [--expect-differ]",
              file=sys.stderr)
        return 2
    try:
        A, B = load(args[0]), load(args[1])
    except (OSError, ValueError, KeyError) as e:
        print(f"ep_compare: {e}", file=sys.stderr)
        return 2
    bad, worst, where, n = [], 0.0, "", 0
    if set(A) != set(B):
        bad.append(f"names differ: only in A {sorted(set(A) - set(B))[:5]}, only in B {sorted(set(B) - set(A))[:5]}")
    for name in sorted(set(A) & set(B)):
        if only and only not in name:
            continue
        (da, sa, ba), (db, sb, bb) = A[name], B[name]
        if da != db or sa != sb:
            bad.append(f"{name}: {da}{list(sa)} vs {db}{list(sb)}")
            continue
        n += 1
        if ba == bb:
            continue
        fmt = FMT.get(da)
        if fmt is None:
            bad.append(f"{name}: dtype {da} differs bytewise")
            continue
        k = len(ba) // struct.calcsize(fmt)
        va, vb = struct.unpack(f"<{k}{fmt}", ba), struct.unpack(f"<{k}{fmt}", bb)
        m = max(abs(x - y) for x, y in zip(va, vb))
        if m > worst:
            worst, where = m, name
        if m > tol or tol == 0.0:
            bad.append(f"{name}: max |a-b| {m:.3e} (tolerance {tol:g})")
    print(f"ep_compare: {n} tensors, max |a-b| {worst:.3e}{' in ' + where if where else ''}, "
          f"{len(bad)} outside {'bitwise' if tol == 0 else 'tolerance %g' % tol}")
    for b in bad[:10]:
        print("  " + b)
    differ = len(bad) > 0
    if expect_differ:
        if not differ:
            print("ep_compare: FAIL: the files agree, but they must differ (a fault the comparison must detect)")
        return 0 if differ else 1
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
