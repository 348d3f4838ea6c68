"""Argument checks shared by the writers: each failure names the field."""

import math
import re

MAX_INT = (1 << 53) - 1
IDENT = re.compile(r"^[a-z][a-z0-9_]*$")
METRIC = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
VOCAB = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
PROFILE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
TOKEN = re.compile(r"^[!-~]+$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _plain(v):
    """A 0-dim tensor or numpy scalar as its Python number."""
    if hasattr(v, "item") and not isinstance(v, (bool, int, float)):
        return v.item()
    return v


def uint(where, v, minimum=0):
    v = _plain(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{where}: {v!r} is not an integer")
    if v < minimum or v > MAX_INT:
        raise ValueError(f"{where}: {v} is outside [{minimum}, 2^53-1]")
    return int(v)


def number(where, v, nonneg=False):
    v = _plain(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{where}: {v!r} is not a number")
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{where}: non-finite value {v!r} refused")
    if isinstance(v, int) and abs(v) > MAX_INT:
        v = float(v)
    if nonneg and v < 0:
        raise ValueError(f"{where}: {v!r} is negative")
    return v


def number_or_null(where, v):
    """A metric: a finite number, or None (null: no value). NaN and inf are
    refused like everywhere else (docs/style.md rule 11): record them with
    an error event, never as a silent null."""
    v = _plain(v)
    if v is None:
        return None
    return number(where, v)


def ident(where, s, pattern=IDENT):
    if not isinstance(s, str) or not pattern.match(s):
        raise ValueError(f"{where}: {s!r} does not match {pattern.pattern}")
    return s


def token(where, s):
    if not isinstance(s, str) or not TOKEN.match(s):
        raise ValueError(f"{where}: {s!r} is not a non-empty printable ASCII string without spaces")
    return s


def one_of(where, s, allowed):
    if s not in allowed:
        raise ValueError(f"{where}: {s!r} is not one of {', '.join(allowed)}")
    return s
