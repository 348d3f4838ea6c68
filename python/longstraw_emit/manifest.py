"""The v2 run manifest (docs/contract.md section 2): an in-toto Statement whose
subjects are every file of the run directory but manifest.json and
manifest.dsse.json, sorted by relative path, with the ranks' agreed run_id,
world, profile, build and config. Written by rank 0 after every rank closed."""

import json
import os
import re

from .build import build_digest
from .fsutil import atomic_write, sha256_file
from .receipt import RECEIPT_FILE, RECEIPT_PREDICATE, STATEMENT_TYPE, dumps_doc

MANIFEST_PREDICATE = "urn:longstraw:predicate:run-manifest:v2"
MANIFEST_FILE = "manifest.json"
DSSE_FILE = "manifest.dsse.json"
RANK_DIR = re.compile(r"^rank-(\d{4})$")
RELPATH = re.compile(r"^[A-Za-z0-9._+@=-]+(/[A-Za-z0-9._+@=-]+)*$")
TMP_MANIFEST = re.compile(r"^\.(manifest|manifest\.dsse)\.json\.tmp\.\d+$")
AGREE = ("run_id", "world", "profile", "build", "config")


class ManifestError(ValueError):
    """The ranks' receipts disagree, or a receipt does not match its trace."""


def _files(out_dir):
    out = []
    for d, dirs, files in os.walk(out_dir):
        dirs.sort()
        for name in files:
            rel = os.path.relpath(os.path.join(d, name), out_dir).replace(os.sep, "/")
            if rel in (MANIFEST_FILE, DSSE_FILE):
                continue
            if TMP_MANIFEST.match(rel):
                raise ManifestError(f"{os.path.join(out_dir, rel)}: another process is writing this run's manifest "
                                    "(one rank of the world writes it)")
            out.append(rel)
    out.sort(key=lambda r: r.encode("utf-8", "surrogateescape"))
    return out


def _read_receipt(out_dir, rel):
    path = os.path.join(out_dir, rel)
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        raise ManifestError(f"{path}: unreadable receipt: {e}") from None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE or \
            doc.get("predicateType") != RECEIPT_PREDICATE:
        what = doc.get("predicateType") if isinstance(doc, dict) else type(doc).__name__
        raise ManifestError(f"{path}: not a v2 rank receipt (predicateType {what!r})")
    p = doc.get("predicate")
    sub = doc.get("subject")
    if not isinstance(p, dict):
        raise ManifestError(f"{path}: predicate: not an object")
    for k in ("run_id", "rank", "world", "profile", "build", "config", "events", "status"):
        if k not in p:
            raise ManifestError(f"{path}: predicate.{k}: missing")
    ev = p["events"].get("file") if isinstance(p["events"], dict) else None
    if not isinstance(ev, str) or not RELPATH.match(ev) or any(c in (".", "..") for c in ev.split("/")):
        raise ManifestError(f"{path}: predicate.events.file: {ev!r} is not a path inside the run directory")
    if p["status"] not in ("complete", "error"):
        raise ManifestError(f"{path}: predicate.status: {p['status']!r} is not complete or error")
    if not isinstance(p["world"], int) or isinstance(p["world"], bool) or not 1 <= p["world"] <= 65536:
        raise ManifestError(f"{path}: predicate.world: {p['world']!r} is not an integer in [1, 65536]")
    if not isinstance(p["build"], dict) or not isinstance(p["build"].get("artifacts"), list):
        raise ManifestError(f"{path}: predicate.build: no artifacts list")
    if not (isinstance(sub, list) and len(sub) == 1 and isinstance(sub[0], dict)
            and isinstance(sub[0].get("digest"), dict) and isinstance(sub[0]["digest"].get("sha256"), str)):
        raise ManifestError(f"{path}: subject: not one subject with a sha256 digest")
    return doc


def write_manifest(out_dir):
    """Check every rank's receipt against the others and against its trace,
    then write RUN/manifest.json atomically. Raises ManifestError naming the
    file and field that disagree. Returns the manifest's path."""
    receipts = {}
    for name in sorted(os.listdir(out_dir)):
        m = RANK_DIR.match(name)
        if m and os.path.isdir(os.path.join(out_dir, name)):
            rel = f"{name}/{RECEIPT_FILE}"
            if os.path.exists(os.path.join(out_dir, rel)):
                receipts[int(m.group(1))] = (rel, _read_receipt(out_dir, rel))
    if not receipts:
        raise ManifestError(f"{out_dir}: no rank-NNNN/{RECEIPT_FILE}")
    first_rank = min(receipts)
    first_rel, first = receipts[first_rank]
    ref = first["predicate"]
    for rank, (rel, doc) in sorted(receipts.items()):
        p = doc["predicate"]
        if p.get("rank") != rank:
            raise ManifestError(f"{rel}: rank {p.get('rank')!r}, its directory says {rank}")
        for k in AGREE:
            if p.get(k) != ref.get(k):
                raise ManifestError(f"{rel}: {k} differs from {first_rel}'s")
        ev = p["events"]["file"]
        sub = doc["subject"][0]
        if sub.get("name") != ev:
            raise ManifestError(f"{rel}: subject {sub.get('name')!r} is not the events file {ev!r}")
        have = sha256_file(os.path.join(out_dir, ev))
        if sub["digest"]["sha256"] != have:
            raise ManifestError(f"{rel}: digest of {ev} is {have}, the receipt says {sub['digest']['sha256']}")
    world = ref["world"]
    if max(receipts) >= world:
        raise ManifestError(f"rank-{max(receipts):04d}: rank not below world {world}")
    try:
        bd = build_digest(ref["build"]["artifacts"])
    except ValueError as e:
        raise ManifestError(f"{first_rel}: build.artifacts: {e}") from None
    if bd != ref["build"].get("build_digest"):
        raise ManifestError(f"{first_rel}: build.build_digest does not match its artifacts")
    ranks = []
    for r in range(world):
        if r in receipts:
            ranks.append({"rank": r, "receipt": receipts[r][0], "status": receipts[r][1]["predicate"]["status"]})
        else:
            ranks.append({"rank": r, "receipt": None, "status": "missing"})
    files = _files(out_dir)
    subjects = [{"name": rel, "digest": {"sha256": sha256_file(os.path.join(out_dir, rel))}} for rel in files]
    doc = {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": MANIFEST_PREDICATE,
           "predicate": {"run_id": ref["run_id"], "world": world, "profile": ref["profile"],
                         "build": ref["build"], "config": ref["config"], "ranks": ranks,
                         "files": len(subjects)}}
    path = os.path.join(out_dir, MANIFEST_FILE)
    atomic_write(path, dumps_doc(doc))
    return path
