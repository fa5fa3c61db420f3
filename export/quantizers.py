"""The weight types' numbers in Python: q8_0 and q4_0 made from float32 (in C by export/quantize.c
when `make` has built it, else in NumPy, the same bytes), a tensor's bytes in any type
(tensor_data: GGUF's block formats through block_formats.py), and matrices kept in the numbers
another file gave them (QuantizedMatrix, BlockMatrix), which an import writes bit for bit."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import block_formats
from weight_types import QUANT_GROUP


def numbers_then_scales(numbers: np.ndarray, scales: np.ndarray) -> bytearray:
    """All the numbers' bytes, zero padding to a multiple of 4 bytes, then all scales as float32,
    copied once into the result."""
    numbers, scales = np.ascontiguousarray(numbers), np.ascontiguousarray(scales, dtype="<f4")
    n = numbers.nbytes
    out = bytearray(n + (-n % 4) + scales.nbytes)
    out[:n] = numbers.reshape(-1).view(np.uint8).data
    out[n + (-n % 4):] = scales.reshape(-1).view(np.uint8).data
    return out


def quantized_in_c(groups: np.ndarray, fmt: str) -> bytearray | None:
    """The file's bytes of groups (n, 32) in q8_0, q4_0 or q8_0_ggml made by export/quantize.c
    straight into their places (numbers, padding, scales), or None without the library."""
    width = 16 if fmt == "q4_0" else 32
    n = len(groups) * width
    out = bytearray(n + (-n % 4) + 4 * len(groups))
    numbers = np.frombuffer(out, np.uint8, n).reshape(len(groups), width)
    scales = np.frombuffer(out, np.float32, len(groups), n + (-n % 4))
    return out if block_formats.quantize_groups(groups, fmt, numbers, scales) else None


def q8_0_bytes(quants: np.ndarray, scales: np.ndarray) -> bytearray:
    """q8_0's layout (kernels/types.h): all int8 quants, zero padding to a multiple of 4 bytes,
    then all scales as float32."""
    return numbers_then_scales(np.asarray(quants, dtype=np.int8), scales)


def q4_0_bytes(packed: np.ndarray, scales: np.ndarray) -> bytearray:
    """q4_0's layout: the quant bytes (16 a group: byte i holds quant i + 8 in its low 4 bits and
    quant i + 16 + 8 in its high 4 bits), zero padding to a multiple of 4 bytes, then the scales."""
    return numbers_then_scales(np.asarray(packed, dtype=np.uint8), scales)


def quantize_q8(arr: np.ndarray) -> bytes:
    """q8_0: per group of 32 consecutive values along a row, scale = max|w| / 127 (0 for an
    all-zero group, whose quants are 0) and quant = round(w / scale) in [-127, 127]. Stored as
    all quants, zero padding to a multiple of 4 bytes, then all scales as float32."""
    groups = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1, QUANT_GROUP)
    fast = quantized_in_c(groups, "q8_0")
    if fast is not None:
        return fast
    amax = np.abs(groups).max(axis=1)
    scale = (amax / 127.0).astype(np.float32)
    inv = np.divide(127.0, amax, out=np.zeros_like(amax), where=amax > 0)
    quants = np.clip(np.rint(groups * inv[:, None]), -127, 127).astype(np.int8)
    return q8_0_bytes(quants, scale)


def quantize_q4(arr: np.ndarray) -> bytes:
    """q4_0: per group of 32 consecutive values along a row, m = the value of largest magnitude
    (the first such), scale = m / -8 as float32 (0 for an all-zero group) and quant = round(w /
    scale) clipped to [-8, 7]: m itself becomes -8, so all 16 levels are used. Byte i of a
    group's 16 holds quant i + 8 in its low 4 bits and quant i + 16 + 8 in its high 4 bits.
    Stored as all quant bytes, zero padding to a multiple of 4 bytes, then all scales."""
    groups = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1, QUANT_GROUP)
    fast = quantized_in_c(groups, "q4_0")
    if fast is not None:
        return fast
    m = groups[np.arange(len(groups)), np.abs(groups).argmax(axis=1)]
    scale = (m / np.float32(-8)).astype(np.float32) + np.float32(0)  # + 0: -0.0 becomes 0.0
    safe = np.where(scale != 0, scale, np.float32(1)).astype(np.float64)
    quants = np.where(scale[:, None] != 0, np.clip(np.rint(groups / safe[:, None]), -8, 7), 0).astype(np.int16) + 8
    return q4_0_bytes((quants[:, :16] | (quants[:, 16:] << 4)).astype(np.uint8), scale)


def unpack_q4(packed: np.ndarray) -> np.ndarray:
    """q4_0 quant bytes (groups x 16) -> quants as int8 in [-8, 7], 32 per group in order."""
    g = packed.reshape(-1, 16)
    return np.concatenate([(g & 15).astype(np.int8) - 8, (g >> 4).astype(np.int8) - 8], axis=1).reshape(-1)


def quantize_q8_like_ggml(arr: np.ndarray) -> bytes:
    """q8_0 with ggml's numbers (quantize_row_q8_0_ref): d = max|w| / 127 rounded to binary16,
    quant = roundf(w / d) (halves away from zero) from the unrounded d; in our layout, d as a
    float32 scale: the values a GGUF Q8_0 tensor holds, for the mixes that follow llama.cpp."""
    groups = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1, QUANT_GROUP)
    fast = quantized_in_c(groups, "q8_0_ggml")
    if fast is not None:
        return fast
    d = (np.abs(groups).max(axis=1) / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0).astype(np.float32)
    scaled = (groups * inv[:, None]).astype(np.float32)
    # roundf: the fraction compared with one half exactly (|s| + 0.5 would round to 1 for the float
    # just below one half)
    magnitude = np.abs(scaled)
    whole = np.floor(magnitude)
    quants = (np.sign(scaled) * (whole + (magnitude - whole >= np.float32(0.5)))).astype(np.int8)
    q = quants.tobytes()
    return q + b"\0" * (-len(q) % 4) + block_formats.f16_round(d).astype("<f4").tobytes()


def tensor_data(arr: np.ndarray, dtype: str) -> bytes:
    """A tensor's bytes in the file in weight type dtype (q8_0_ggml: q8_0 with ggml's numbers)."""
    if dtype == "q8_0":
        return quantize_q8(arr)
    if dtype == "q8_0_ggml":
        return quantize_q8_like_ggml(arr)
    if dtype == "q4_0":
        return quantize_q4(arr)
    if dtype in block_formats.FORMATS:
        return block_formats.quantize(arr, dtype)
    return np.ascontiguousarray(arr, dtype="<f4").tobytes()


def stored_size(wtype: str, shape: tuple[int, ...]) -> int:
    """The bytes a tensor of `shape` takes in the file as weight type wtype (kernels/types.h's
    layouts; q8_0_ggml is q8_0's)."""
    n = int(np.prod(shape))
    if wtype in ("q8_0", "q8_0_ggml"):
        return n + (-n % 4) + 4 * (n // QUANT_GROUP)
    if wtype == "q4_0":
        return n // 2 + (-(n // 2) % 4) + 4 * (n // QUANT_GROUP)
    if wtype in block_formats.FORMATS:
        block, size = block_formats.FORMATS[wtype]
        return n // block * size
    return 4 * n


def type_block(wtype: str) -> int:
    """Values per block of a weight type: a row's length must be a multiple of it."""
    return block_formats.FORMATS[wtype][0] if wtype in block_formats.FORMATS else 1 if wtype == "f32" else QUANT_GROUP


@dataclass
class QuantizedMatrix:
    """A matrix (rows, cols) already in q8_0's or q4_0's numbers, kept as they are rather than
    quantized again: quants (q8_0: int8 (rows, cols); q4_0: the packed bytes (rows, cols / 2)) and
    float32 scales (rows, cols / QUANT_GROUP). What an import of another format's quantized
    matrices (gguf_import.py) writes bit for bit."""
    wtype: str
    quants: np.ndarray
    scales: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        rows, width = self.quants.shape
        return rows, width * (2 if self.wtype == "q4_0" else 1)

    def int8_quants(self) -> np.ndarray:
        """The quants as int8 (rows, cols): q4_0's unpacked to -8..7."""
        if self.wtype == "q8_0":
            return self.quants
        return unpack_q4(self.quants).reshape(self.shape)

    def widened(self) -> "QuantizedMatrix":
        """q4_0 as q8_0: the same quants (-8..7 fit int8) and scales, so the same numbers."""
        return self if self.wtype == "q8_0" else QuantizedMatrix("q8_0", self.int8_quants(), self.scales)

    def dequantized(self) -> np.ndarray:
        """float32 (rows, cols): quant * scale, exact in float32 for a binary16 scale (at most 8
        + 11 significant bits)."""
        scales = np.repeat(self.scales, QUANT_GROUP, axis=1)
        with np.errstate(invalid="ignore", over="ignore"):  # a file's infinite scale stays what it is
            return (self.int8_quants().astype(np.float32) * scales).astype(np.float32)

    def rows(self, order: np.ndarray) -> "QuantizedMatrix":
        """The matrix with its rows taken in `order` (whole rows move, with their scales)."""
        return QuantizedMatrix(self.wtype, self.quants[order], self.scales[order])

    def data(self) -> bytes:
        return (q8_0_bytes if self.wtype == "q8_0" else q4_0_bytes)(self.quants, self.scales)


@dataclass
class BlockMatrix:
    """A matrix (rows, cols) in one of GGUF's block or 16-bit formats (block_formats.py), kept as
    its bytes: raw (rows, bytes of a row). What an import of a GGUF's tensors copies block for
    block."""
    wtype: str
    raw: np.ndarray
    cols: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.raw.shape[0], self.cols

    def dequantized(self) -> np.ndarray:
        """float32 (rows, cols): as ggml's dequantize_row_* (and run's row read) gives them."""
        return block_formats.dequantize(np.ascontiguousarray(self.raw), self.wtype, self.shape)

    def rows(self, order: np.ndarray) -> "BlockMatrix":
        return BlockMatrix(self.wtype, self.raw[order], self.cols)

    def widened(self) -> QuantizedMatrix:
        """q5_0 as q8_0: the same numbers (its 5-bit numbers - 16 fit int8, d is the scale)."""
        assert self.wtype == "q5_0"
        blocks = np.ascontiguousarray(self.raw).reshape(-1, 22)
        quants = (block_formats.numbers(blocks, "q5_0") - 16).astype(np.int8)
        scales = block_formats.halves(blocks, 0)
        return QuantizedMatrix("q8_0", quants.reshape(self.shape), scales.reshape(self.shape[0], -1))

    def data(self) -> bytes:
        return np.ascontiguousarray(self.raw).tobytes()


def same_type(parts: list) -> bool:
    """Whether matrices are all of one weight type (float32 values, or one quantized type)."""
    kinds = {(type(p).__name__, getattr(p, "wtype", "f32")) for p in parts}
    return len(kinds) == 1


def stack_rows(parts: list["np.ndarray | QuantizedMatrix"]) -> "np.ndarray | QuantizedMatrix":
    """Matrices with the same columns, one below the other (the fused query/key/value
    projection), in the narrowest type that holds every part's numbers exactly: q4_0 if all are,
    q8_0 if all are quantized (q4_0 widened), else float32 (quantized parts dequantized, exactly)."""
    if all(isinstance(p, BlockMatrix) for p in parts) and same_type(parts):
        return BlockMatrix(parts[0].wtype, np.concatenate([p.raw for p in parts]), parts[0].cols)
    if all(isinstance(p, QuantizedMatrix) for p in parts):
        if len({p.wtype for p in parts}) > 1:
            parts = [p.widened() for p in parts]
        return QuantizedMatrix(parts[0].wtype, np.concatenate([p.quants for p in parts]),
                               np.concatenate([p.scales for p in parts]))
    return np.concatenate([p.dequantized() if isinstance(p, (QuantizedMatrix, BlockMatrix)) else np.asarray(p, np.float32)
                           for p in parts])
