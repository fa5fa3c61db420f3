"""GGUF, llama.cpp's model file, read as data: the header, every key/value of its metadata, the
tensor infos and the aligned data section, each count, length and offset checked against the
file's size before it is used. Versions 2 and 3, little-endian (the format's default; nothing in
a file marks the other order). Writes nothing; gguf_import.py turns what this reads into our
weight file.

The layout (ggml's gguf.h and gguf.cpp, llama.cpp release v0.4.0, describe it; so does the
format's specification, docs/gguf.md in the ggml repository):

    "GGUF"  uint32 version  uint64 n_tensors  uint64 n_kv
    n_kv times:       string key, uint32 value type, the value
    n_tensors times:  string name, uint32 n_dims, uint64 ne[n_dims] (ne[0] the length of a row),
                      uint32 ggml type, uint64 offset (from the start of the data section)
    zero padding to a multiple of general.alignment (a uint32, a power of two; 32 when absent)
    the data section: each tensor at its offset, a multiple of the alignment

A string is a uint64 byte count and the bytes (no NUL); an array is a uint32 element type, a
uint64 count and the elements. Version 1 (uint32 counts) is no longer written by anyone and is
refused, as ggml refuses it.

usage: gguf_file.py FILE     prints FILE's metadata (arrays as their first elements) and tensors
"""
from __future__ import annotations

import argparse
import mmap
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from output_files import ExportError  # noqa: E402

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4          # GGML_MAX_DIMS
MAX_NAME = 64         # GGML_MAX_NAME: a tensor's name is shorter
MAX_KEY = 65535       # the specification's bound on a key's length

# Value types (gguf.h's enum gguf_type): name, and the struct code of a fixed-size value.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
VALUE_TYPES = {UINT8: ("uint8", "<B"), INT8: ("int8", "<b"), UINT16: ("uint16", "<H"), INT16: ("int16", "<h"),
               UINT32: ("uint32", "<I"), INT32: ("int32", "<i"), FLOAT32: ("float32", "<f"), BOOL: ("bool", "<B"),
               STRING: ("string", None), ARRAY: ("array", None), UINT64: ("uint64", "<Q"), INT64: ("int64", "<q"),
               FLOAT64: ("float64", "<d")}
INTEGER_TYPES = {UINT8, INT8, UINT16, INT16, UINT32, INT32, UINT64, INT64}

# ggml's tensor types: id -> (name, values per block, bytes per block), for every type a file may
# hold (ggml.h's enum ggml_type; the sizes are ggml-common.h's block structs), so that a tensor
# of a type gguf_import.py does not convert is still measured, placed and named.
TENSOR_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}


class GGUFError(ExportError):
    """A GGUF file that is malformed, or that asks for what we do not read: one line."""


def shown(name: str) -> str:
    """A name or text from the file as an error message shows it: as it is when it is short and
    printable, else escaped and cut, so that a message stays one readable line."""
    return name if name.isprintable() and len(name) <= 80 else repr(name[:80])[1:-1]


@dataclass
class TensorInfo:
    """One tensor of the file: its shape in PyTorch's order (rows first: ggml's ne reversed, so an
    nn.Linear weight (out, in) has ne = [in, out]), its ggml type, and where its bytes are."""
    name: str
    shape: tuple[int, ...]
    type: int
    offset: int  # in the file (the data section's start added)
    size: int

    @property
    def type_name(self) -> str:
        return TENSOR_TYPES[self.type][0]


@dataclass
class GGUFFile:
    """What a GGUF file holds. metadata maps each key to (value type, value): a number, a bool,
    bytes for a string, and for an array (ARRAY, (element type, values)) with the values a
    NumPy array of numbers or a list of bytes. data is the whole file (memory-mapped)."""
    path: Path
    version: int
    metadata: dict[str, tuple[int, object]]
    tensors: dict[str, TensorInfo]
    alignment: int
    data: mmap.mmap | bytes

    def tensor_bytes(self, info: TensorInfo) -> memoryview:
        return memoryview(self.data)[info.offset:info.offset + info.size]

    def release(self, array: np.ndarray) -> None:
        """The mapped pages wholly under a view of the file given back (read from the file again if
        touched): a tensor converted no longer counts in the process's memory."""
        if not isinstance(self.data, mmap.mmap) or not hasattr(self.data, "madvise") or array.size == 0:
            return
        base = np.frombuffer(self.data, np.uint8).ctypes.data
        start = array.__array_interface__["data"][0] - base
        if not 0 <= start < len(self.data) or not array.flags.c_contiguous:
            return  # not a view of this file
        first, end = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE, (start + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > first:
            self.data.madvise(mmap.MADV_DONTNEED, first, end - first)


LENGTH = struct.Struct("<Q")  # a string's length


class Reader:
    """Little-endian values at a moving position, every read checked against the end."""

    def __init__(self, data, path: Path):
        self.data, self.at, self.end, self.path = data, 0, len(data), path

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: {what}")

    def take(self, n: int, what: str) -> bytes:
        if n > self.end - self.at:
            raise self.fail(f"{what} at byte {self.at} needs {n} bytes, but the file ends at byte {self.end}")
        out = self.data[self.at:self.at + n]
        self.at += n
        return bytes(out)

    def number(self, code: str, what: str):
        return struct.unpack(code, self.take(struct.calcsize(code), what))[0]

    def string(self, what: str) -> bytes:
        n = self.number("<Q", f"the length of {what}")
        if n > self.end - self.at:
            raise self.fail(f"{what} at byte {self.at} claims {n} bytes, past the file's end at byte {self.end}")
        return self.take(n, what)

    def strings(self, n: int, key: str) -> list[bytes]:
        """n strings of an array (each a uint64 length and its bytes), as string() reads them,
        in one loop: a vocabulary holds hundreds of thousands."""
        data, at, end, length = self.data, self.at, self.end, LENGTH.unpack_from
        out = []
        for i in range(n):
            if end - at < 8:
                raise self.fail(f"the length of string {i} of key '{key}' at byte {at} needs 8 bytes, but the file "
                                f"ends at byte {end}")
            (k,) = length(data, at)
            at += 8
            if k > end - at:
                raise self.fail(f"string {i} of key '{key}' at byte {at} claims {k} bytes, past the file's end at "
                                f"byte {end}")
            out.append(bytes(data[at:at + k]))
            at += k
        self.at = at
        return out

    def count(self, what: str, smallest: int) -> int:
        """A uint64 count of items each at least `smallest` bytes long, bounded by the bytes left."""
        n = self.number("<Q", what)
        if n * smallest > self.end - self.at:
            raise self.fail(f"{what} is {n}, more than the {self.end - self.at} bytes left at byte {self.at} can hold")
        return n


def read_value(r: Reader, vtype: int, key: str, in_array: bool = False) -> object:
    """One value of type vtype, an array's elements included; key: the key as messages show it."""
    if vtype not in VALUE_TYPES:
        raise r.fail(f"key '{key}' has value type {vtype}, which GGUF does not define (0 to 12)")
    name, code = VALUE_TYPES[vtype]
    if vtype == STRING:
        return r.string(f"a string of key '{key}'")
    if vtype == ARRAY:
        if in_array:
            raise r.fail(f"key '{key}' is an array of arrays, which llama.cpp does not read either")
        etype = r.number("<I", f"the element type of key '{key}'")
        if etype not in VALUE_TYPES:
            raise r.fail(f"key '{key}' is an array of value type {etype}, which GGUF does not define (0 to 12)")
        ename, ecode = VALUE_TYPES[etype]
        if etype == ARRAY:
            raise r.fail(f"key '{key}' is an array of arrays, which llama.cpp does not read either")
        size = struct.calcsize(ecode) if ecode else 8  # a string is at least its length
        n = r.count(f"the element count of key '{key}'", size)
        if ecode is None:
            return etype, r.strings(n, key)
        raw = r.take(n * size, f"the {n} {ename} elements of key '{key}'")
        values = np.frombuffer(raw, dtype=np.dtype(ecode))
        if etype == BOOL and np.any(values > 1):
            raise r.fail(f"key '{key}' has a bool element that is neither 0 nor 1")
        return etype, values
    value = r.number(code, f"the {name} value of key '{key}'")
    if vtype == BOOL:
        if value > 1:
            raise r.fail(f"key '{key}' is a bool of value {value}, neither 0 nor 1")
        return bool(value)
    return value


def text(raw: bytes, what: str, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GGUFError(f"{path}: {what} {raw[:40]!r} is not UTF-8") from None


def read_gguf(path: str | Path) -> GGUFFile:
    """A GGUF file's header, metadata and tensor infos, every offset and size checked; the data
    stays in the file (memory-mapped) until a tensor's bytes are asked for."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < 24:
                raise GGUFError(f"{path}: {size} bytes, too short for a GGUF header (24 bytes)")
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise GGUFError(f"cannot read {path}: {e.strerror or e}") from e
    r = Reader(data, path)
    if r.take(4, "the magic") != MAGIC:
        raise r.fail("not a GGUF file (its first bytes are not 'GGUF')")
    version = r.number("<I", "the version")
    if version not in VERSIONS:
        if version & 0xFFFF == 0 and version:
            raise r.fail(f"version field {version:#010x} reads as a big-endian GGUF file, which is not read")
        if version == 1:
            raise r.fail("GGUF version 1 (32-bit counts) is not read, as llama.cpp no longer reads it: convert the "
                         "model again")
        raise r.fail(f"GGUF version {version}, this reads versions 2 and 3")
    n_tensors = r.count("the tensor count", 8 + 4 + 4 + 8)  # a name's length, n_dims, type, offset
    n_kv = r.count("the key/value count", 8 + 4 + 1)        # a key's length, its type, a one-byte value

    metadata: dict[str, tuple[int, object]] = {}
    for i in range(n_kv):
        key_raw = r.string(f"key {i}'s name")
        key = text(key_raw, f"key {i}'s name", path)
        if not key or len(key_raw) > MAX_KEY:
            raise r.fail(f"key {i}'s name is {len(key_raw)} bytes long (1 to {MAX_KEY})")
        if key in metadata:
            raise r.fail(f"key '{shown(key)}' appears twice")
        vtype = r.number("<I", f"the value type of key '{shown(key)}'")
        metadata[key] = (vtype, read_value(r, vtype, shown(key)))

    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        vtype, value = metadata["general.alignment"]
        if vtype != UINT32 or not value or value & (value - 1):
            raise r.fail(f"general.alignment must be a uint32 power of two, found {VALUE_TYPES.get(vtype, ('?',))[0]} "
                         f"{value!r}")
        alignment = value

    infos = []
    for i in range(n_tensors):
        name_raw = r.string(f"tensor {i}'s name")
        name = text(name_raw, f"tensor {i}'s name", path)
        what = shown(name)
        if not name or len(name_raw) >= MAX_NAME:
            raise r.fail(f"tensor {i}'s name is {len(name_raw)} bytes long (1 to {MAX_NAME - 1})")
        n_dims = r.number("<I", f"tensor '{what}''s dimension count")
        if not 1 <= n_dims <= MAX_DIMS:
            raise r.fail(f"tensor '{what}' has {n_dims} dimensions (1 to {MAX_DIMS})")
        ne = [r.number("<Q", f"tensor '{what}''s dimensions") for _ in range(n_dims)]
        ttype = r.number("<I", f"tensor '{what}''s type")
        offset = r.number("<Q", f"tensor '{what}''s offset")
        infos.append((name, ne, ttype, offset))

    data_start = r.at + (-r.at % alignment)
    if data_start > size:
        raise r.fail(f"the data section starts at byte {data_start}, past the file's end at byte {size}")
    tensors: dict[str, TensorInfo] = {}
    for name, ne, ttype, offset in infos:
        if name in tensors:
            raise r.fail(f"tensor '{shown(name)}' appears twice")
        if ttype not in TENSOR_TYPES:
            raise r.fail(f"tensor '{shown(name)}' has ggml type {ttype}, which is unknown")
        type_name, block, block_bytes = TENSOR_TYPES[ttype]
        count = 1
        for d in ne:
            count *= d
        if count >= 1 << 60 or any(d == 0 for d in ne):
            size = "an empty" if count == 0 else "too large a"
            raise r.fail(f"tensor '{shown(name)}' has dimensions {ne}, {size} tensor")
        if ne[0] % block:
            raise r.fail(f"tensor '{shown(name)}' of type {type_name} has rows of {ne[0]} values, not whole blocks "
                         f"of {block}")
        nbytes = count // block * block_bytes
        if offset % alignment:
            raise r.fail(f"tensor '{shown(name)}' is at offset {offset} of the data section, not a multiple of the "
                         f"alignment {alignment}")
        if offset > size - data_start or nbytes > size - data_start - offset:
            raise r.fail(f"tensor '{shown(name)}' ({nbytes} bytes at offset {offset} of the data section, which starts at "
                         f"byte {data_start}) runs past the file's end at byte {size}")
        tensors[name] = TensorInfo(name, tuple(reversed(ne)), ttype, data_start + offset, nbytes)
    placed = sorted(tensors.values(), key=lambda t: t.offset)
    for before, after in zip(placed, placed[1:]):
        if before.offset + before.size > after.offset:
            raise r.fail(f"tensors '{shown(before.name)}' and '{shown(after.name)}' overlap in the data section")
    return GGUFFile(path, version, metadata, tensors, alignment, data)


# ---- tensors as numbers ------------------------------------------------------------------------

def f16_to_f32(raw: np.ndarray) -> np.ndarray:
    """IEEE binary16 (as uint16 bits, little-endian) to float32: exact for every value."""
    return raw.view("<f2").astype(np.float32)


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 is the upper half of a float32: exact."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def float_values(g: GGUFFile, info: TensorInfo) -> np.ndarray:
    """An F32, F16 or BF16 tensor as float32 (exactly its values), in its shape."""
    raw = g.tensor_bytes(info)
    if info.type_name == "F32":
        values = np.frombuffer(raw, "<f4")
    elif info.type_name == "F16":
        values = f16_to_f32(np.frombuffer(raw, "<u2"))
    elif info.type_name == "BF16":
        values = bf16_to_f32(np.frombuffer(raw, "<u2"))
    else:
        raise GGUFError(f"{g.path}: tensor '{info.name}' is {info.type_name}, not a float type")
    return values.reshape(info.shape)


def q8_0_blocks(g: GGUFFile, info: TensorInfo) -> tuple[np.ndarray, np.ndarray]:
    """A Q8_0 tensor (ggml-common.h's block_q8_0: a binary16 scale d, then 32 int8 quants; value
    = quant * d) as its quants (int8, its shape) and scales (float32, exactly d, one per block)."""
    blocks = np.frombuffer(g.tensor_bytes(info), np.uint8).reshape(-1, 34)
    scales = f16_to_f32(np.ascontiguousarray(blocks[:, :2]).view("<u2").reshape(-1))
    quants = np.ascontiguousarray(blocks[:, 2:]).view(np.int8)
    return quants.reshape(info.shape), scales.reshape(*info.shape[:-1], info.shape[-1] // 32)


def q4_0_blocks(g: GGUFFile, info: TensorInfo) -> tuple[np.ndarray, np.ndarray]:
    """A Q4_0 tensor (block_q4_0: a binary16 scale d, then 16 bytes; byte i holds value i's
    quant in its low 4 bits and value i + 16's in its high 4 bits, each quant + 8; value =
    (nibble - 8) * d) as its 16 bytes per block (uint8, shape[:-1] + (cols // 2,)) and scales."""
    blocks = np.frombuffer(g.tensor_bytes(info), np.uint8).reshape(-1, 18)
    scales = f16_to_f32(np.ascontiguousarray(blocks[:, :2]).view("<u2").reshape(-1))
    packed = np.ascontiguousarray(blocks[:, 2:])
    return packed.reshape(*info.shape[:-1], info.shape[-1] // 2), scales.reshape(*info.shape[:-1], info.shape[-1] // 32)


def describe_value(vtype: int, value: object) -> str:
    if vtype == ARRAY:
        etype, values = value
        head = ", ".join(repr(v) for v in list(values[:4]))
        return f"array of {len(values)} {VALUE_TYPES[etype][0]}: [{head}{', ...' if len(values) > 4 else ''}]"
    if vtype == STRING:
        return repr(value[:200].decode("utf-8", "replace"))
    return f"{VALUE_TYPES[vtype][0]} {value!r}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path, help="a GGUF file")
    args = ap.parse_args()
    try:
        g = read_gguf(args.file)
    except GGUFError as e:
        sys.exit(f"error: {e}")
    print(f"GGUF version {g.version}, alignment {g.alignment}, {len(g.metadata)} keys, {len(g.tensors)} tensors")
    for key, (vtype, value) in g.metadata.items():
        print(f"{key:48} {describe_value(vtype, value)}")
    for info in g.tensors.values():
        print(f"tensor {info.name:32} {info.type_name:7} {str(list(info.shape)):20} offset {info.offset:12} "
              f"bytes {info.size}")


if __name__ == "__main__":
    main()
