#!/usr/bin/env python3
"""audit_sequence_edit.py RUN RANK STEP EDIT ARGS...: what tests/audit/audit_sequence.sh
does to a copy of a real run's trace, then everything an adversary with write
access would fix so that only the order of the events can give it away: seq
renumbered, ts_ns kept non-decreasing, rank_complete's event count, the
receipt's event count, last seq and phase totals, every digest (the
receipts' and the manifest's subjects).

A phase occurrence is a phase_begin .. its phase_end and every event between
(layer_end, collective, memory, optimizer_step, param_digest ...). The EDITs
(occurrences of STEP on rank RANK; N counts from 1):

  move-optimizer                the optimizer phase moved to just before the
                                step's last backward (prompt_bwd, else replay)
  dup-phase PHASE [N]           the N-th PHASE occurrence duplicated in place,
                                its layer events with it
  drop-phase PHASE [N]          the N-th PHASE occurrence removed (and the
                                memory event after its phase_end)
  swap PHASE_A PHASE_B          the first occurrences of the two swapped
  dup-layer PHASE MEMBER LAYER DIR
                                one layer_end duplicated right after itself
  optimizer-out                 the optimizer_step event moved out of its phase
                                (just after the phase_end)
  layer-out PHASE MEMBER LAYER DIR
                                one layer_end moved out of its phase (just
                                after that occurrence's phase_end)
  nest PHASE_A PHASE_B          the first PHASE_A occurrence's phase_end moved
                                after the first PHASE_B's phase_begin
Prints the seq the edit put the moved, repeated or first displaced event at,
in the edited trace (-1 when none)."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "evidence"))
from run_edit import dump, read_trace, write_trace  # noqa: E402,F401  (shared with the generators)
from run_edit import redigest as _redigest  # noqa: E402


def redigest(run):
    _redigest(run, receipts=True)


def occurrences(evs, step, phase):
    """[(begin, end)] indices (inclusive) of PHASE's occurrences in STEP."""
    out, start = [], None
    for i, e in enumerate(evs):
        if e.get("ev") == "phase_begin" and e.get("step") == step and e.get("phase") == phase:
            start = i
        elif e.get("ev") == "phase_end" and e.get("step") == step and e.get("phase") == phase and start is not None:
            out.append((start, i))
            start = None
    if not out:
        sys.exit("no %s occurrence in step %d" % (phase, step))
    return out


def find_layer(evs, step, phase, member, layer, d):
    for i, e in enumerate(evs):
        if (e.get("ev") == "layer_end" and e.get("step") == step and e.get("phase") == phase
                and e.get("member") == member and e.get("layer") == layer and e.get("dir") == d):
            return i
    sys.exit("no layer_end %s member %d layer %d %s in step %d" % (phase, member, layer, d, step))


def edit(evs, step, op, args):
    """Edits the event list (header excluded) in place; returns the index of the event to report."""
    if op == "move-optimizer":
        b, e = occurrences(evs, step, "optimizer")[0]
        block = evs[b:e + 1]
        del evs[b:e + 1]
        try:
            tb, _ = occurrences(evs, step, "prompt_bwd")[-1]
        except SystemExit:
            tb, _ = occurrences(evs, step, "replay")[-1]
        evs[tb:tb] = block
        return tb
    if op in ("dup-phase", "drop-phase"):
        n = int(args[1]) if len(args) > 1 else 1
        b, e = occurrences(evs, step, args[0])[n - 1]
        if op == "drop-phase":  # with the memory event its phase_end wrote
            if e + 1 < len(evs) and evs[e + 1].get("ev") == "memory" and evs[e + 1].get("phase") == args[0]:
                e += 1
            del evs[b:e + 1]
            return b
        evs[e + 1:e + 1] = [dict(x) for x in evs[b:e + 1]]
        return e + 1
    if op == "swap":
        (a0, a1), (b0, b1) = occurrences(evs, step, args[0])[0], occurrences(evs, step, args[1])[0]
        if a0 > b0:
            (a0, a1), (b0, b1) = (b0, b1), (a0, a1)
        A, mid, B = evs[a0:a1 + 1], evs[a1 + 1:b0], evs[b0:b1 + 1]
        evs[a0:b1 + 1] = B + mid + A
        return a0
    if op in ("dup-layer", "layer-out"):
        i = find_layer(evs, step, args[0], int(args[1]), int(args[2]), args[3])
        if op == "dup-layer":
            evs.insert(i + 1, dict(evs[i]))
            return i + 1
        ev = evs.pop(i)
        j = next(k for k in range(i, len(evs)) if evs[k].get("ev") == "phase_end")
        evs.insert(j + 1, ev)
        return j + 1
    if op == "optimizer-out":
        i = next(k for k, e in enumerate(evs) if e.get("ev") == "optimizer_step" and e.get("step") == step)
        ev = evs.pop(i)
        j = next(k for k in range(i, len(evs)) if evs[k].get("ev") == "phase_end")
        evs.insert(j + 1, ev)
        return j + 1
    if op == "nest":
        _, a1 = occurrences(evs, step, args[0])[0]
        end = evs.pop(a1)
        b0, _ = occurrences(evs, step, args[1])[0]
        evs.insert(b0 + 1, end)
        return b0
    sys.exit("unknown edit %s" % op)


def main():
    run, rank, step, op, args = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
    path = "%s/rank-%04d/events.jsonl.zst" % (run, rank)
    lines = read_trace(path)
    head, evs = lines[0], [json.loads(x) for x in lines[1:]]
    at = edit(evs, step, op, args)
    ts, counts, walls = 0, {}, {}
    for seq, ev in enumerate(evs):
        ev["seq"] = seq
        ts = max(ts, ev["ts_ns"])
        ev["ts_ns"] = ts
        if ev.get("ev") == "rank_complete":
            ev["events"] = seq
        if ev.get("ev") == "phase_end":
            counts[ev["phase"]] = counts.get(ev["phase"], 0) + 1
            walls[ev["phase"]] = walls.get(ev["phase"], 0) + ev.get("wall_ns", 0)
    write_trace(path, [head] + [dump(e) for e in evs])
    rp = os.path.join(os.path.dirname(path), "receipt.json")
    if os.path.exists(rp):
        r = json.load(open(rp))
        r["predicate"]["events"]["count"] = len(evs)
        r["predicate"]["events"]["last_seq"] = len(evs) - 1
        for ph in r["predicate"].get("phases", []):
            if ph.get("phase") in counts:
                ph["count"] = counts[ph["phase"]]
                if "wall_ns_total" in ph:
                    ph["wall_ns_total"] = walls[ph["phase"]]
        json.dump(r, open(rp, "w"), indent=1)
    redigest(run)
    print(at if at is not None else -1)


main()
