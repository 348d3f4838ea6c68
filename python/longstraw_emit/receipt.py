"""The v2 rank receipt: an in-toto Statement whose one subject is the rank's
trace (docs/contract.md section 2), written atomically."""

import json
import os

from .fsutil import atomic_write, sha256_file

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
RECEIPT_PREDICATE = "urn:longstraw:predicate:rank-receipt:v2"
RECEIPT_FILE = "receipt.json"


def dumps_doc(doc):
    """A receipt or manifest as written: indented JSON, UTF-8, one final newline."""
    return (json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def write_receipt(out_dir, predicate):
    """Digest the trace predicate["events"]["file"] names and write
    rank-NNNN/receipt.json. Returns the receipt's path."""
    events = predicate["events"]["file"]
    doc = {"_type": STATEMENT_TYPE,
           "subject": [{"name": events, "digest": {"sha256": sha256_file(os.path.join(out_dir, events))}}],
           "predicateType": RECEIPT_PREDICATE, "predicate": predicate}
    path = os.path.join(out_dir, f"rank-{predicate['rank']:04d}", RECEIPT_FILE)
    atomic_write(path, dumps_doc(doc))
    return path
