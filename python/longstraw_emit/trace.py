"""The per-rank trace: events.jsonl(.zst), v2 header and envelope.

Format: docs/design.md section 6 and docs/contract.md section 1. One JSON object
per line; line 1 the header, then events with the envelope v, rank, seq, ts_ns,
ev in that order; seq counts 0, 1, 2, ... and ts_ns (time.monotonic_ns() since
open) never decreases. Text is buffered and flushed on phase_begin, phase_end,
error and rank_complete, past flush_bytes of text, and at close. A compressed
trace writes each flush as one complete zstd frame (level 6, content checksum):
a killed process leaves every frame it flushed, each verifiable. The file is
written under its final name (a stream, not an atomic file; never over an
existing file) and fsync'd at close.
"""

import json
import os
import socket
import threading
import time


TRACE_SCHEMA = "urn:longstraw:schema:event-header:v2"
FLUSH_BYTES = 1 << 20
MAX_LINE = 1 << 20  # one event line at most 1 MiB: frames stay small for the reader
FLUSH_KINDS = frozenset(("phase_begin", "phase_end", "error", "rank_complete"))


def _dumps(v):
    return json.dumps(v, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def host_name():
    h = socket.gethostname() or "localhost"
    h = "".join(c if "!" <= c <= "~" else "-" for c in h)
    return h or "localhost"


class TraceWriter:
    """Low-level writer of one rank's trace. RunWriter (run.py) is the API
    trainers use; this class knows framing, envelope and flushing only."""

    def __init__(self, path, header, rank, compress=True, flush_bytes=FLUSH_BYTES, level=6):
        if flush_bytes < 1 or flush_bytes > 2 * FLUSH_BYTES:
            raise ValueError(f"flush_bytes: {flush_bytes} is outside [1, 2 MiB]")
        self.path = path
        self.rank = rank
        self.flush_bytes = flush_bytes
        self._lock = threading.RLock()
        self._buf = []
        self._buf_len = 0
        self._seq = 0
        self._last_ts = 0
        self._closed = False
        self._complete = False
        self._cctx = None
        if compress:
            import zstandard

            self._cctx = zstandard.ZstdCompressor(level=level, write_checksum=True,
                                                  write_content_size=True)
        self.frames = 0  # complete zstd frames (or plain flushes) written
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            raise FileExistsError(f"{path}: exists (a trace is never overwritten: use a fresh run directory)") from None
        self._t0 = time.monotonic_ns()
        self._append(_dumps(header))
        self.flush()

    @property
    def events(self):
        """Events written so far (the next event's seq)."""
        return self._seq

    def _append(self, line):
        b = line.encode("utf-8") + b"\n"
        if len(b) > MAX_LINE:
            raise ValueError(f"{self.path}: event line of {len(b)} bytes exceeds 1 MiB")
        self._buf.append(b)
        self._buf_len += len(b)

    def emit(self, kind, fields):
        """Append one event {v, rank, seq, ts_ns, ev, **fields}; fields is a list
        of (key, value) pairs in the order written, values already checked."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path}: {kind} after close")
            if self._complete:
                raise ValueError(f"{self.path}: {kind} after rank_complete")
            ts = time.monotonic_ns() - self._t0
            if ts < self._last_ts:
                ts = self._last_ts
            head = f'{{"v":2,"rank":{self.rank},"seq":{self._seq},"ts_ns":{ts},"ev":{_dumps(kind)}'
            body = "".join("," + _dumps(k) + ":" + _dumps(v) for k, v in fields)
            self._append(head + body + "}")
            self._seq += 1
            self._last_ts = ts
            if kind == "rank_complete":
                self._complete = True
            if kind in FLUSH_KINDS or self._buf_len >= self.flush_bytes:
                self.flush()
            return self._seq - 1

    def flush(self):
        with self._lock:
            if not self._buf or self._fd is None:
                return
            text = b"".join(self._buf)
            self._buf = []
            self._buf_len = 0
            data = self._cctx.compress(text) if self._cctx is not None else text
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            self.frames += 1

    def close(self):
        """Flush, fsync and close (idempotent)."""
        with self._lock:
            if self._closed:
                return
            try:
                self.flush()
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None
                self._closed = True

    def abandon(self):
        """Close the descriptor without flushing (tests: a killed writer)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._closed = True
