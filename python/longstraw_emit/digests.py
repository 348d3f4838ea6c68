"""Tensor bytes and digests (docs/contract.md section 1).

A tensor's digest is the SHA-256 of its raw little-endian element bytes in its
storage dtype, row-major (C order), whatever its strides or device. torch is
imported only when a torch tensor is passed.
"""

import hashlib
import sys

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


def tensor_bytes(t):
    """The raw little-endian element bytes of t, row-major. t: a torch tensor,
    a numpy array, or bytes-like."""
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
            x = x.to(torch.uint8)
        elif x.dtype in (torch.bfloat16, torch.float16):
            x = x.view(torch.int16)
        return x.numpy().tobytes()
    if hasattr(t, "tobytes") and hasattr(t, "dtype"):  # numpy
        import numpy as np

        a = np.ascontiguousarray(t)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        return a.tobytes(order="C")
    return bytes(memoryview(t))


def tensor_sha256(t):
    """SHA-256 (hex) of tensor_bytes(t)."""
    return hashlib.sha256(tensor_bytes(t)).hexdigest()


def tensors_sha256(ts):
    """SHA-256 (hex) of the concatenated bytes of a list of tensors, in order
    (the output of an allgather into a list)."""
    h = hashlib.sha256()
    for t in ts:
        h.update(tensor_bytes(t))
    return h.hexdigest()


def trainable_digest(lines):
    """target "trainable": SHA-256 of the lines "NAME HEX\\n", in order."""
    h = hashlib.sha256()
    for name, hexd in lines:
        h.update(f"{name} {hexd}\n".encode("utf-8"))
    return h.hexdigest()
