"""Minimal safetensors reader/writer (no `safetensors` package on this machine).

Format: 8-byte little-endian u64 header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the data section; offsets are relative to the start of the data section.
Tensors are little-endian and C-contiguous. load_file checks every entry's bounds and
byte size, so a truncated or inconsistent file fails with a message naming the tensor.
"""
import json
import struct

import torch

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
           "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
           "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def _raw_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: reinterpret the bits
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def save_file(tensors, path, metadata=None):
    """Writes {name: tensor} to path; metadata is an optional {str: str}."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _NAMES:
            raise ValueError(f"safetensors_lite: tensor '{name}' has unsupported dtype {t.dtype}")
        blob = _raw_bytes(t)
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)  # data section starts 8-byte aligned, as upstream does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson)
        for blob in blobs:
            f.write(blob)


def load_file(path, with_metadata=False):
    """Returns {name: tensor} (and the metadata dict when with_metadata=True)."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(buf)} bytes)")
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    data = memoryview(buf)[8 + n:]
    out = {}
    for name, e in header.items():
        if e["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has unsupported dtype {e['dtype']}")
        dt, shape = _DTYPES[e["dtype"]], list(e["shape"])
        b, end = e["data_offsets"]
        numel = 1
        for s in shape:
            numel *= s
        want = numel * torch.empty((), dtype=dt).element_size()
        if not (0 <= b <= end <= len(data)) or end - b != want:
            raise ValueError(f"{path}: tensor '{name}' offsets [{b}, {end}) do not hold "
                             f"{e['dtype']}{shape} ({want} bytes) inside {len(data)} data bytes")
        raw = bytearray(data[b:end])  # a private, writable copy
        t = torch.frombuffer(raw, dtype=dt) if numel else torch.empty(0, dtype=dt)
        out[name] = t.reshape(shape)
    return (out, metadata) if with_metadata else out
