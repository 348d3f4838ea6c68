"""Test helper: an independent reader of v2 traces (frames, checksums, lines)."""

import json

import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def frames(data):
    """Split a .zst file into its frames' decoded text, verifying each frame's
    content checksum (zstandard raises on a mismatch) and that it has one."""
    out = []
    dctx = zstandard.ZstdDecompressor()
    while data:
        if data[:4] != ZSTD_MAGIC:
            raise ValueError(f"frame {len(out)}: bad magic {data[:4]!r}")
        params = zstandard.get_frame_parameters(data)
        if not params.has_checksum:
            raise ValueError(f"frame {len(out)}: no content checksum")
        obj = dctx.decompressobj()
        text = obj.decompress(data)
        if not obj.eof:
            raise ValueError(f"frame {len(out)}: truncated")
        out.append(text)
        data = obj.unused_data
    return out


def _no_dup(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"key {k!r} repeats")
        d[k] = v
    return d


def parse_lines(text):
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [json.loads(l.decode("utf-8"), object_pairs_hook=_no_dup) for l in lines]


def read(path):
    """(header, events, frame_texts) of a complete trace, checking the v2
    envelope: key order, seq from 0 without gap, ts_ns never decreasing."""
    with open(path, "rb") as f:
        data = f.read()
    texts = frames(data) if path.endswith(".zst") else [data]
    objs = parse_lines(b"".join(texts))
    header, events = objs[0], objs[1:]
    last_ts = 0
    for i, e in enumerate(events):
        keys = list(e)[:5]
        if keys != ["v", "rank", "seq", "ts_ns", "ev"]:
            raise ValueError(f"event {i}: envelope {keys}")
        if e["v"] != 2 or e["rank"] != header["rank"] or e["seq"] != i:
            raise ValueError(f"event {i}: v/rank/seq {e['v']}/{e['rank']}/{e['seq']}")
        if e["ts_ns"] < last_ts:
            raise ValueError(f"event {i}: ts_ns goes back")
        last_ts = e["ts_ns"]
    return header, events, texts
