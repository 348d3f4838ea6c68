#!/usr/bin/env python3
"""ep_audit_edit.py RUN PURPOSE: what tests/trainer/ep_audit.sh does to a copy of a
real EP run: every rank's collectives of PURPOSE (e.g. moe_dx, the expert
input-gradient exchange) removed, then everything an adversary with write
access would fix so that only the profile's requirement can give it away:
seq renumbered, each group's gseq renumbered (no gap, the ranks still
matched), rank_complete's event count, the receipts' event count, last seq
and traffic (rank_state.communication: calls, bytes, by_purpose), every
digest (the receipts' and the manifest's subjects). Prints the number of
events removed over every rank."""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "evidence"))
from run_edit import dump, read_trace, redigest, write_trace  # noqa: E402


def main():
    run, purpose = sys.argv[1], sys.argv[2]
    removed = 0
    for path in sorted(glob.glob(run + "/rank-*/events.jsonl.zst")):
        lines = read_trace(path)
        head, evs = lines[0], [json.loads(x) for x in lines[1:]]
        gone = [e for e in evs if e.get("ev") == "collective" and e.get("purpose") == purpose]
        evs = [e for e in evs if not (e.get("ev") == "collective" and e.get("purpose") == purpose)]
        removed += len(gone)
        gseq = {}
        for seq, ev in enumerate(evs):
            ev["seq"] = seq
            if ev.get("ev") == "collective":
                g = ev["group"]
                gseq[g] = gseq.get(g, -1) + 1
                ev["gseq"] = gseq[g]
            if ev.get("ev") == "rank_complete":
                ev["events"] = seq
        write_trace(path, [head] + [dump(e) for e in evs])
        rp = os.path.join(os.path.dirname(path), "receipt.json")
        if os.path.exists(rp):
            r = json.load(open(rp))
            p = r["predicate"]
            p["events"]["count"] = len(evs)
            p["events"]["last_seq"] = len(evs) - 1
            cm = p.get("rank_state", {}).get("communication")
            if cm is not None:
                by = cm.get("by_purpose", [])
                for it in by:
                    if it.get("purpose") == purpose:
                        cm["calls"] -= it.get("calls", 0)
                        cm["bytes_sent"] -= it.get("bytes_sent", 0)
                cm["by_purpose"] = [it for it in by if it.get("purpose") != purpose]
            json.dump(r, open(rp, "w"), indent=1)
    redigest(run, receipts=True)
    print(removed)


main()
