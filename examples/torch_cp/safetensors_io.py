"""safetensors read/write without the safetensors package.

Format: 8-byte little-endian header length N, N bytes of JSON header
({"NAME": {"dtype": "F64"|"F32", "shape": [...], "data_offsets": [begin, end]}, ...}),
then the raw little-endian row-major data. Files are written atomically (temp + rename).
"""
import json
import os
import struct

import torch

_DTYPES = {"F64": torch.float64, "F32": torch.float32}
_NAMES = {torch.float64: "F64", torch.float32: "F32"}
_MAX_HEADER = 1 << 24
_MAX_FILE = 1 << 30      # the example's weights are kilobytes


def save(path, tensors):
    """Write dict NAME -> tensor (float64 or float32) to PATH, names in sorted order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in _NAMES:
            raise ValueError(f"{path}: tensor {name}: dtype {t.dtype} is not float64/float32")
        data = t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load(path):
    """Read PATH into dict NAME -> tensor; raises ValueError naming the file and field."""
    if os.path.getsize(path) > _MAX_FILE:
        raise ValueError(f"{path}: larger than {_MAX_FILE} bytes")
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: truncated (no header length)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > _MAX_HEADER or 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} exceeds the file")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not an object")
    data = raw[8 + n:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(h, dict) or h.get("dtype") not in _DTYPES:
            raise ValueError(f"{path}: tensor {name}: dtype must be F64 or F32")
        shape, offs = h.get("shape"), h.get("data_offsets")
        if (not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape)
                or not isinstance(offs, list) or len(offs) != 2
                or not all(isinstance(o, int) for o in offs)):
            raise ValueError(f"{path}: tensor {name}: bad shape or data_offsets")
        dt = _DTYPES[h["dtype"]]
        esz = 8 if dt == torch.float64 else 4
        count = 1
        for s in shape:
            count *= s
        b, e = offs
        if not (0 <= b <= e <= len(data)) or e - b != count * esz:
            raise ValueError(f"{path}: tensor {name}: data_offsets {offs} do not match shape {shape}")
        t = torch.frombuffer(bytearray(data[b:e]), dtype=dt) if count else torch.zeros(0, dtype=dt)
        out[name] = t.reshape(shape).clone()
    return out
