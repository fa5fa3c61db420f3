"""safetensors files (Hugging Face's format for weights), read as data: one file, or the shards a
model.safetensors.index.json names. Tensors of float32, float16, bfloat16 and float64 come back
as float32 NumPy arrays."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from output_files import ExportError


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """safetensors: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape,
    data_offsets: [begin, end]}} (offsets relative to the data after the header), then data.
    float32, float16, bfloat16 (the upper half of a float32) and float64 tensors, as float32."""
    raw = path.read_bytes()
    if len(raw) < 8:
        raise ExportError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ExportError(f"{path}: safetensors header of {n} bytes runs past the file")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise ExportError(f"{path}: safetensors header is not JSON ({e})") from e
    dtypes = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "BF16": "<u2"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], [int(d) for d in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError) as e:
            raise ExportError(f"{path}: tensor '{name}' has a malformed entry ({e})") from e
        if dtype not in dtypes:
            raise ExportError(f"{path}: tensor '{name}' has dtype {dtype}, expected F32, F16, BF16 or F64")
        size = np.dtype(dtypes[dtype]).itemsize
        count = int(np.prod(shape))
        if not (0 <= begin <= end <= len(raw) - 8 - n) or end - begin != count * size:
            raise ExportError(f"{path}: tensor '{name}' bytes {begin}..{end} do not hold shape {shape} of {dtype}")
        arr = np.frombuffer(raw, dtype=dtypes[dtype], count=count, offset=8 + n + begin)
        if dtype == "BF16":  # bfloat16 is the upper 16 bits of a float32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.astype(np.float32).reshape(shape)
    return out


def read_safetensors_folder(folder: Path) -> dict[str, np.ndarray]:
    """model.safetensors, or the shards model.safetensors.index.json names (its weight_map)."""
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.exists():
        return read_safetensors(single)
    if not index.exists():
        raise ExportError(f"{folder}: neither model.safetensors nor model.safetensors.index.json")
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ExportError(f"{index}: not a safetensors index with a weight_map ({e})") from e
    out: dict[str, np.ndarray] = {}
    for shard in shards:
        if Path(shard).name != shard:
            raise ExportError(f"{index}: shard name '{shard}' is not a file in the folder")
        out.update(read_safetensors(folder / shard))
    missing = set(weight_map) - set(out)
    if missing:
        raise ExportError(f"{index}: tensors {sorted(missing)[:3]} are in no shard")
    return out
