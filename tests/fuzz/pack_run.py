#!/usr/bin/env python3
"""pack_run.py RUN OUT [--plain] - pack a run directory into one fuzz_audit
input (the format of tests/fuzz/fuzz_run_pack.h): each regular file as an
entry, by its index in RUN_NAMES when it has one of the usual names, else by
its literal name.  --plain stores each trace decompressed (the reader
accepts plain JSONL too), so that the fuzzer mutates events, not zstd
frames.  Files above 65535 bytes are cut (the format's u16 length)."""
import os
import subprocess
import sys

RUN_NAMES = ["manifest.json", "manifest.dsse.json", "parity.json", "rank-0000/receipt.json",
             "rank-0000/events.jsonl.zst", "rank-0001/receipt.json", "rank-0001/events.jsonl.zst", "rank-0000",
             "rank-0001", "rank-0002/receipt.json", "rank-0002/events.jsonl.zst", "rank-0002",
             "rank-0000/extra", "rank-0003/receipt.json", "rank-0003/events.jsonl.zst", "notes.txt"]
ALPHA = "abcdefghijklmnopqrstuvwxyz0123456789._-/"


def entry(name, data):
    out = bytearray([0])
    if name in RUN_NAMES:
        out.append(RUN_NAMES.index(name))
    else:
        raw = bytes(ALPHA.index(c) for c in name)
        out.append(16 + len(raw))
        out += raw
    data = data[:65535]
    out += len(data).to_bytes(2, "little") + data
    return bytes(out)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    run, out, plain = sys.argv[1], sys.argv[2], "--plain" in sys.argv[3:]
    blob = bytearray()
    for dirpath, _, files in sorted(os.walk(run)):
        for fn in sorted(files):
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, run)
            with open(path, "rb") as f:
                data = f.read()
            if plain and rel.endswith(".zst"):
                data = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout
            blob += entry(rel, data)
    with open(out, "wb") as f:
        f.write(blob)


main()
