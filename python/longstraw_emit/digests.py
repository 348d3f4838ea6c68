"""Tensor bytes and digests (docs/contract.md section 1).

A tensor's digest is taken over its raw little-endian element bytes in its
storage dtype, row-major (C order), whatever its strides or device. torch is
imported only when a torch tensor is passed.

Two algorithms: SHA-256 for what is kept and signed (param_digest, files) and,
for the cross-rank equality of collective buffers (out_digest, in_digest),
XXH3-128 where the xxhash module is importable (Debian: python3-xxhash), a
non-cryptographic hash several times faster: the ranks' digests are compared
with each other, not with an adversary's choice. A buffer digest is written
"ALG:HEX" ("xxh3_128:" 32 hex digits, "sha256:" 64), so the algorithm is in
the trace.
"""

import hashlib
import sys

try:  # the fast hash is optional: without it buffer digests are SHA-256
    import xxhash as _xxhash
except ImportError:  # pragma: no cover - depends on the machine
    _xxhash = None

DIGEST_ALGS = ("xxh3_128", "sha256")

# torch dtype name -> trace dtype
_TORCH_DTYPES = {
    "torch.float64": "f64", "torch.float32": "f32", "torch.bfloat16": "bf16",
    "torch.float16": "f16", "torch.int64": "i64", "torch.int32": "i32",
    "torch.int8": "i8", "torch.uint8": "u8", "torch.bool": "bool",
}
DTYPES = ("f64", "f32", "bf16", "f16", "i64", "i32", "i8", "u8", "bool")
DTYPE_SIZE = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4, "i8": 1, "u8": 1, "bool": 1}


def _is_torch(t):
    return type(t).__module__.startswith("torch") and hasattr(t, "element_size")


def trace_dtype(t):
    """The trace dtype name of a torch tensor (or a torch.dtype)."""
    name = str(getattr(t, "dtype", t))
    d = _TORCH_DTYPES.get(name)
    if d is None:
        raise ValueError(f"dtype: {name} has no trace dtype (one of {', '.join(DTYPES)})")
    return d


def tensor_buffer(t):
    """The raw little-endian element bytes of t, row-major, as a buffer (a
    memoryview of the tensor's own memory where it is contiguous on the CPU:
    no copy). t: a torch tensor, a numpy array, or bytes-like."""
    if sys.byteorder != "little":
        raise RuntimeError("tensor_bytes: big-endian hosts are not supported")
    if _is_torch(t):
        import torch

        trace_dtype(t)  # refuse dtypes the trace cannot name
        x = t.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        x = x.contiguous().reshape(-1)
        if x.dtype == torch.bool:
            x = x.view(torch.uint8)
        elif x.dtype in (torch.bfloat16, torch.float16):
            x = x.view(torch.int16)
        return memoryview(x.numpy()).cast("B")
    if hasattr(t, "tobytes") and hasattr(t, "dtype"):  # numpy
        import numpy as np

        a = np.ascontiguousarray(t)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        return memoryview(a).cast("B")
    return memoryview(t).cast("B")


def tensor_bytes(t):
    """The raw little-endian element bytes of t, row-major, as bytes (a copy:
    tensor_buffer avoids it)."""
    return bytes(tensor_buffer(t))


def tensor_sha256(t):
    """SHA-256 (hex) of tensor_bytes(t)."""
    return hashlib.sha256(tensor_buffer(t)).hexdigest()


def tensors_sha256(ts):
    """SHA-256 (hex) of the concatenated bytes of a list of tensors, in order
    (the output of an allgather into a list)."""
    h = hashlib.sha256()
    for t in ts:
        h.update(tensor_buffer(t))
    return h.hexdigest()


def default_digest_alg():
    """xxh3_128 where the xxhash module is importable, else sha256."""
    return "xxh3_128" if _xxhash is not None else "sha256"


def check_digest_alg(where, alg):
    """alg itself, or None for the default; raises naming WHERE for an unknown
    algorithm or xxh3_128 without the xxhash module."""
    if alg is None:
        return default_digest_alg()
    if alg not in DIGEST_ALGS:
        raise ValueError(f"{where}: {alg!r} is not one of {', '.join(DIGEST_ALGS)}")
    if alg == "xxh3_128" and _xxhash is None:
        raise ValueError(f"{where}: xxh3_128 needs the xxhash module (Debian: python3-xxhash)")
    return alg


def buffer_digest(ts, alg):
    """"ALG:HEX" over the concatenated bytes of a tensor, or of a list of
    tensors in order (an allgather's output list)."""
    h = _xxhash.xxh3_128() if alg == "xxh3_128" else hashlib.sha256()
    for t in ts if isinstance(ts, (list, tuple)) else (ts,):
        h.update(tensor_buffer(t))
    return f"{alg}:{h.hexdigest()}"


def trainable_digest(lines):
    """target "trainable": SHA-256 of the lines "NAME HEX\\n", in order."""
    h = hashlib.sha256()
    for name, hexd in lines:
        h.update(f"{name} {hexd}\n".encode("utf-8"))
    return h.hexdigest()
