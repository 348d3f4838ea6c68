#!/usr/bin/env python3
"""audit_invariants_edit.py RUN EDIT...: what test_audit_invariants does to a
copy of a real run, then every digest recomputed (each receipt's subject, the
manifest's subjects) so that only the audit's checks of the figures can see it.

EDITs, applied in order:
  metrics RANK STEP KEY=JSON...  sets KEY of rank RANK's step_metrics event of
                                 step STEP (a float KEY=+D adds D to it, *F
                                 multiplies it)
  drop-metrics                   removes every step_metrics event of every rank
                                 (seq renumbered, the receipt's event count and
                                 last seq with it): a run that recorded none
  config KEY=JSON | KEY=-        sets (or deletes) predicate.config[KEY] in the
                                 manifest and every receipt; a dotted KEY reaches
                                 into an object (options.input)
  event RANK EV N KEY=JSON...    sets KEY of rank RANK's N-th (0-based) event of
                                 kind EV (layer_end's out_norm, ...), as metrics
  unpin                          removes predicate.profile from the manifest and
                                 every receipt: a v1 run written before runs
                                 pinned their profile (test_audit_profile)
  keep-digests                   recomputes no digest: the edit is left for the
                                 manifest to catch (test_audit_diff)
Prints the seq of each edited event, one a line."""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "evidence"))
from run_edit import dump, read_trace, write_trace  # noqa: E402,F401  (shared with the generators)
from run_edit import redigest as _redigest  # noqa: E402


def redigest(run):
    _redigest(run, receipts=True)


def value(old, text):
    if text[:1] == "+":
        return old + float(text[1:])
    if text[:1] == "*":
        return old * float(text[1:])
    return json.loads(text)


def edit_first(run, rank, pick, kvs, what):
    """The KEY=VALUE edits kvs applied to the first event of rank's trace that pick accepts (its seq
    printed); exits naming what when there is none."""
    path = "%s/rank-%04d/events.jsonl.zst" % (run, rank)
    lines = read_trace(path)
    for i, line in enumerate(lines):
        ev = json.loads(line)
        if pick(ev):
            for kv in kvs:
                k, v = kv.split("=", 1)
                ev[k] = value(ev[k], v)
            lines[i] = dump(ev)
            print(ev["seq"])
            break
    else:
        sys.exit("no %s in %s" % (what, path))
    write_trace(path, lines)


def edit_metrics(run, rank, step, kvs):
    edit_first(run, rank, lambda ev: ev.get("ev") == "step_metrics" and ev.get("step") == step, kvs,
               "step_metrics of step %d" % step)


def edit_event(run, rank, kind, n, kvs):
    seen = [0]  # events of kind so far: the one after the first n is edited

    def nth(ev):
        if ev.get("ev") != kind:
            return False
        seen[0] += 1
        return seen[0] > n
    edit_first(run, rank, nth, kvs, "%s event number %d" % (kind, n))


def drop_metrics(run):
    for path in sorted(glob.glob(run + "/rank-*/events.jsonl.zst")):
        out, seq = [], 0
        for line in read_trace(path):
            ev = json.loads(line)
            if ev.get("ev") == "step_metrics":
                continue
            if "seq" in ev:
                ev["seq"] = seq
                seq += 1
            if ev.get("ev") == "rank_complete":
                ev["events"] = seq - 1  # the events before it
            out.append(dump(ev))
        write_trace(path, out)
        rp = os.path.join(os.path.dirname(path), "receipt.json")
        if os.path.exists(rp):
            r = json.load(open(rp))
            r["predicate"]["events"]["count"] = seq
            r["predicate"]["events"]["last_seq"] = seq - 1
            json.dump(r, open(rp, "w"), indent=1)


def edit_config(run, kv):
    k, v = kv.split("=", 1)
    for p in [run + "/manifest.json"] + sorted(glob.glob(run + "/rank-*/receipt.json")):
        d = json.load(open(p))
        c = d["predicate"]["config"]
        keys = k.split(".")
        for key in keys[:-1]:
            c = c[key]
        if v == "-":
            c.pop(keys[-1], None)
        else:
            c[keys[-1]] = json.loads(v)
        json.dump(d, open(p, "w"), indent=1)


def unpin(run):
    for p in [run + "/manifest.json"] + sorted(glob.glob(run + "/rank-*/receipt.json")):
        if not os.path.exists(p):
            continue
        d = json.load(open(p))
        d["predicate"].pop("profile", None)
        json.dump(d, open(p, "w"), indent=1)


def main():
    run, args = sys.argv[1], sys.argv[2:]
    i = 0
    keep = False
    while i < len(args):
        if args[i] == "metrics":
            rank, step = int(args[i + 1]), int(args[i + 2])
            j = i + 3
            while j < len(args) and "=" in args[j]:
                j += 1
            edit_metrics(run, rank, step, args[i + 3:j])
            i = j
        elif args[i] == "event":
            rank, kind, n = int(args[i + 1]), args[i + 2], int(args[i + 3])
            j = i + 4
            while j < len(args) and "=" in args[j]:
                j += 1
            edit_event(run, rank, kind, n, args[i + 4:j])
            i = j
        elif args[i] == "unpin":
            unpin(run)
            i += 1
        elif args[i] == "keep-digests":
            keep = True
            i += 1
        elif args[i] == "drop-metrics":
            drop_metrics(run)
            i += 1
        elif args[i] == "config":
            edit_config(run, args[i + 1])
            i += 2
        else:
            sys.exit("unknown edit %s" % args[i])
    if not keep:
        redigest(run)


main()
