"""RFC 8785 (JCS) canonical JSON, restricted to the v2 build identity's subset.

docs/contract.md section 2: strings, booleans, null, integers of magnitude
below 2^53, arrays and objects. Anything else (a float, a larger integer, a
non-string key, a lone surrogate) raises JcsError naming where it lies, so the
canonical text is exact in every language. receipts/format/jcs.c implements the same
subset; both are tested on tests/data/jcs_vectors.json.
"""

MAX_INT = (1 << 53) - 1

_ESC = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


class JcsError(ValueError):
    """A value outside the JCS subset the build identity allows."""


def _string(s, where):
    out = []
    for ch in s:
        o = ord(ch)
        if 0xD800 <= o <= 0xDFFF:
            raise JcsError(f"{where}: lone surrogate U+{o:04X} is not valid Unicode")
        e = _ESC.get(ch)
        if e is not None:
            out.append(e)
        elif o < 0x20:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _utf16_key(k):
    return k.encode("utf-16-be", "surrogatepass")


def _value(v, where, depth):
    if depth > 64:
        raise JcsError(f"{where}: nested deeper than 64 levels")
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        if -MAX_INT <= v <= MAX_INT:
            return str(int(v))
        raise JcsError(f"{where}: integer {v} has magnitude 2^53 or more")
    if isinstance(v, float):
        raise JcsError(f"{where}: number {v!r} is not an integer (fractional numbers are refused)")
    if isinstance(v, str):
        return _string(v, where)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v)) + "]"
    if isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise JcsError(f"{where}: key {k!r} is not a string")
        parts = []
        for k in sorted(v, key=_utf16_key):
            parts.append(_string(k, f"{where}: key") + ":" + _value(v[k], f"{where}.{k}", depth + 1))
        return "{" + ",".join(parts) + "}"
    raise JcsError(f"{where}: {type(v).__name__} is not a JSON value of the JCS subset")


def jcs(obj):
    """The JCS canonical text of obj (a str; encode as UTF-8 to digest)."""
    return _value(obj, "$", 0)


def jcs_sha256(obj):
    """SHA-256 (hex) of the UTF-8 bytes of jcs(obj)."""
    import hashlib

    return hashlib.sha256(jcs(obj).encode("utf-8")).hexdigest()
