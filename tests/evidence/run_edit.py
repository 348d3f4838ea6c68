"""run_edit.py: what the audit's adversarial tests do to a copy of a real run
(tests/evidence/generate.py, tests/audit/audit_sequence_edit.py,
tests/audit/audit_invariants_edit.py, redigest.py): read and write a trace's
events, and recompute the digests an adversary with write access recomputes
after an edit."""
import glob
import hashlib
import json
import os
import subprocess


def read_trace(path):
    """A trace's lines (the header first), decompressed."""
    return subprocess.run(["zstd", "-q", "-dc", path], check=True, capture_output=True).stdout.decode().splitlines()


def write_trace(path, lines, level=3):
    """lines written back as one zstd stream with its checksum, at compression level `level`."""
    data = ("\n".join(lines) + "\n").encode()
    subprocess.run(["zstd", "-q", "-f", "--check", "-%d" % level, "-o", path], input=data, check=True)


def dump(ev):
    """An event as the writer prints it: compact JSON, its keys in their order."""
    return json.dumps(ev, separators=(",", ":"))


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def redigest(run, receipts=False):
    """The manifest's subject digests recomputed; with receipts, each receipt's digest of its trace first."""
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
