"""GGUF's block formats (q5_0, q5_1, q4_k, q5_k, q6_k; read only: q4_1, iq4_nl, iq4_xs, q2_k, q3_k) and its
16-bit ones (f16, bf16), as kernels/types.h stores them: quantizers that follow llama.cpp's
reference quantizers step for
step in float32 (quantize_row_*_ref of ggml-quants.c: the same searches, the same float32
operations in the same order, the same rounding), and dequantizers that compute exactly what
ggml's dequantize_row_* computes. No imatrix: the quantizers llama-quantize uses without one.

A tensor's bytes are its rows' blocks back to back, each row cols / block blocks, as a GGUF file
holds them (kernels/types.h gives the byte layouts).

usage: imported by weight_file.py; block_formats.py --help lists the formats
"""
from __future__ import annotations

import argparse
import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np

from weight_types import GGUF_LAYOUT

# name -> (values per block, bytes per block): the types weight_types.py stores as GGUF's blocks;
# f16 and bf16 are one value of 2 bytes
FORMATS = GGUF_LAYOUT
# name -> the byte offsets of each block's binary16 scales (d, and dmin or m), as kernels/types.h's checks
SCALES = {"q5_0": (0,), "q5_1": (0, 2), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,), "q4_1": (0, 2),
          "iq4_nl": (0,), "iq4_xs": (0,), "q2_k": (80, 82), "q3_k": (108,)}
# iq4_nl's and iq4_xs's 16 levels (ggml-common.h's kvalues_iq4nl)
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int64)
GROUP_MAX_EPS = np.float32(1e-15)  # ggml: a group whose largest magnitude is below this is all zero

F32 = np.float32


def f16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> binary16 -> float32: round to nearest even, as GGML_FP32_TO_FP16."""
    with np.errstate(over="ignore"):
        return np.asarray(x, F32).astype(np.float16).astype(F32)


def f16_bytes(x: np.ndarray) -> np.ndarray:
    """float32 (..., k) -> the binary16 numbers' little-endian bytes (..., 2k)."""
    with np.errstate(over="ignore"):
        h = np.asarray(x, F32).astype("<f2")
    return h.view(np.uint8).reshape(*h.shape[:-1], -1)


def bf16_from_f32(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even, NaN kept quiet (ggml_compute_fp32_to_bf16)."""
    u = np.ascontiguousarray(x, F32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 64).astype(np.uint16), rounded)


def nearest_int(x: np.ndarray) -> np.ndarray:
    """ggml's nearest_int: to the nearest integer, ties to even (its magic-number addition)."""
    return np.rint(x).astype(np.int64)


def seq_sum(terms: np.ndarray) -> np.ndarray:
    """Sums over the last axis in float32, one term after another from 0, as a C loop adds."""
    total = np.zeros(terms.shape[:-1], F32)
    for i in range(terms.shape[-1]):
        total = (total + terms[..., i]).astype(F32)
    return total


def largest_magnitude(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of x: the value of largest magnitude (the first one on a tie) and its magnitude."""
    at = np.abs(x).argmax(axis=-1)
    value = np.take_along_axis(x, at[..., None], axis=-1)[..., 0]
    return value, np.abs(value)


# ---- the searches of the k formats (ggml-quants.c: make_qkx2_quants, make_qx_quants) ------------

def search_scale_min(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float,
                     nstep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """make_qkx2_quants for each row of x (k, n) with weights w: numbers L in 0..nmax, a scale
    and a min (returned as -min >= 0) with x ~ scale * L - (-min), chosen by weighted least
    squares over candidate inverse scales (rmin + rdelta * is + nmax) / (max - min), is =
    0..nstep. -> (scale (k,), -min (k,), L (k, n))."""
    lo = np.minimum(x.min(axis=-1), F32(0)).astype(F32)
    hi = x.max(axis=-1).astype(F32)
    flat = hi == lo
    sum_w = seq_sum(w)
    sum_x = seq_sum((w * x).astype(F32))
    span = np.where(flat, F32(1), (hi - lo).astype(F32))
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = (F32(nmax) / span).astype(F32)
        scale = (F32(1) / iscale).astype(F32)
    L = np.clip(nearest_int((iscale[:, None] * (x - lo[:, None]).astype(F32)).astype(F32)), 0, nmax)
    diff = ((scale[:, None] * L.astype(F32)).astype(F32) + lo[:, None]).astype(F32) - x
    best = seq_sum((w * (diff * diff).astype(F32)).astype(F32))
    for step in range(nstep + 1):  # each candidate from the min of the best so far, as ggml's loop does
        with np.errstate(divide="ignore", invalid="ignore"):
            span = np.where(flat, F32(1), (hi - lo).astype(F32))
            iscale = ((F32(rmin) + (F32(rdelta) * F32(step)).astype(F32) + F32(nmax)).astype(F32) / span).astype(F32)
        Laux = np.clip(nearest_int((iscale[:, None] * (x - lo[:, None]).astype(F32)).astype(F32)), 0, nmax)
        lf = Laux.astype(F32)
        wl = (w * lf).astype(F32)
        sum_l = seq_sum(wl)
        sum_l2 = seq_sum((wl * lf).astype(F32))
        sum_xl = seq_sum((wl * x).astype(F32))
        D = ((sum_w * sum_l2).astype(F32) - (sum_l * sum_l).astype(F32)).astype(F32)
        with np.errstate(divide="ignore", invalid="ignore"):
            this_scale = (((sum_w * sum_xl).astype(F32) - (sum_x * sum_l).astype(F32)).astype(F32) / D).astype(F32)
            this_min = (((sum_l2 * sum_x).astype(F32) - (sum_l * sum_xl).astype(F32)).astype(F32) / D).astype(F32)
            positive = this_min > 0
            this_scale = np.where(positive, (sum_xl / sum_l2).astype(F32), this_scale)
        this_min = np.where(positive, F32(0), this_min)
        with np.errstate(invalid="ignore", over="ignore"):  # rows with D <= 0 compute NaN, never taken
            diff = ((this_scale[:, None] * lf).astype(F32) + this_min[:, None]).astype(F32) - x
            error = seq_sum((w * (diff * diff).astype(F32)).astype(F32))
            better = (D > 0) & (error < best) & ~flat
        L = np.where(better[:, None], Laux, L)
        best = np.where(better, error, best)
        scale = np.where(better, this_scale, scale)
        lo = np.where(better, this_min, lo).astype(F32)
    scale = np.where(flat, F32(0), scale).astype(F32)
    L = np.where(flat[:, None], 0, L)
    return scale, (-lo).astype(F32), L


def search_symmetric(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """make_qx_quants with rmse_type 1 for each row of x (k, n): numbers L in 0..2 nmax - 1 (l +
    nmax, l in -nmax..nmax-1) and a scale with x ~ scale * l, weights x^2, chosen among inverse
    scales -(nmax + 0.1 is) / max, is = -9..9, by the largest sumlx^2 / suml2. -> (scale, L)."""
    mx, amax = largest_magnitude(x)
    zero = amax < GROUP_MAX_EPS
    safe = np.where(zero, F32(1), mx).astype(F32)
    w = (x * x).astype(F32)

    def attempt(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        l = np.clip(nearest_int((iscale[:, None] * x).astype(F32)), -nmax, nmax - 1)
        lf = l.astype(F32)
        sumlx = seq_sum(((w * x).astype(F32) * lf).astype(F32))
        suml2 = seq_sum(((w * lf).astype(F32) * lf).astype(F32))
        return l, sumlx, suml2

    l, sumlx, suml2 = attempt((F32(-nmax) / safe).astype(F32))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, (sumlx / suml2).astype(F32), F32(0)).astype(F32)
    best = (scale * sumlx).astype(F32)
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = (-(F32(nmax) + (F32(0.1) * F32(step)).astype(F32)).astype(F32) / safe).astype(F32)
        l2, sumlx2, suml22 = attempt(iscale)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            better = (suml22 > 0) & ((sumlx2 * sumlx2).astype(F32) > (best * suml22).astype(F32))
            new_scale = (sumlx2 / suml22).astype(F32)
        l = np.where(better[:, None], l2, l)
        scale = np.where(better, new_scale, scale)
        best = np.where(better, (new_scale * sumlx2).astype(F32), best)
    L = np.where(zero[:, None], 0, l + nmax)
    return np.where(zero, F32(0), scale).astype(F32), L


# ---- quantizers: float32 rows -> blocks (uint8 (blocks, bytes)) -----------------------------------

def quantize_q5_0(x: np.ndarray) -> np.ndarray:
    """quantize_row_q5_0_ref: d = (the value of largest magnitude) / -16, numbers
    min(31, trunc(x / d + 16.5)), d stored as binary16 (the numbers from the unrounded d)."""
    g = np.asarray(x, F32).reshape(-1, 32)
    mx, _ = largest_magnitude(g)
    d = (mx / F32(-16)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, (F32(1) / d).astype(F32), F32(0)).astype(F32)
    q = np.minimum(31, np.trunc(((g * inv[:, None]).astype(F32) + F32(16.5)).astype(F32))).astype(np.int64)
    return pack_q5(q, f16_bytes(d[:, None]), None)


def quantize_q5_1(x: np.ndarray) -> np.ndarray:
    """quantize_row_q5_1_ref: d = (max - min) / 31, m = min, numbers trunc((x - min) / d + 0.5)."""
    g = np.asarray(x, F32).reshape(-1, 32)
    lo, hi = g.min(axis=1), g.max(axis=1)
    d = ((hi - lo).astype(F32) / F32(31)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, (F32(1) / d).astype(F32), F32(0)).astype(F32)
    q = np.trunc((((g - lo[:, None]).astype(F32) * inv[:, None]).astype(F32) + F32(0.5)).astype(F32)).astype(np.int64) & 255
    return pack_q5(q, f16_bytes(d[:, None]), f16_bytes(lo[:, None]))


def pack_q5(q: np.ndarray, d: np.ndarray, m: np.ndarray | None) -> np.ndarray:
    """Blocks {d; [m;] qh[4]; qs[16]} of the numbers q (blocks, 32), 0..31."""
    qs = ((q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)).astype(np.uint8)
    qh = (((q >> 4) & 1).astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1).astype("<u4")
    parts = [d] + ([m] if m is not None else []) + [qh[:, None].view(np.uint8), qs]
    return np.concatenate(parts, axis=1)


def k_scale_bytes(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The 12 bytes of 8 6-bit scales and mins (blocks, 8) each (kernels/types.h)."""
    out = np.zeros((len(sc), 12), np.uint8)
    out[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    out[:, 4:8] = (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    return out


def quantize_k(x: np.ndarray, five: bool) -> np.ndarray:
    """quantize_row_q4_K_ref (five False) or quantize_row_q5_K_ref: per sub-block of 32 a scale and
    min by search_scale_min (weights sqrt(mean x^2) + |x|), both set to 6 bits against the
    super-block's largest (d, dmin = largest / 63 as binary16), then every value quantized again
    with the stored scale and min."""
    nmax = 31 if five else 15
    sb = np.asarray(x, F32).reshape(-1, 256)
    sub = sb.reshape(-1, 32)
    av = np.sqrt((seq_sum((sub * sub).astype(F32)) / F32(32)).astype(F32)).astype(F32)
    w = (av[:, None] + np.abs(sub)).astype(F32)
    scale, mins, L = search_scale_min(sub, w, nmax, -0.5 if five else -1.0, 0.1, 15 if five else 20)
    scale, mins, L = scale.reshape(-1, 8), mins.reshape(-1, 8), L.reshape(-1, 256)
    max_scale = np.maximum(scale.max(axis=1), F32(0)).astype(F32)
    max_min = np.maximum(mins.max(axis=1), F32(0)).astype(F32)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, (F32(63) / max_scale).astype(F32), F32(0)).astype(F32)
        inv_min = np.where(max_min > 0, (F32(63) / max_min).astype(F32), F32(0)).astype(F32)
    ls = np.minimum(63, nearest_int((inv_scale[:, None] * scale).astype(F32)) & 255)
    lm = np.minimum(63, nearest_int((inv_min[:, None] * mins).astype(F32)) & 255)
    d16 = f16_bytes(np.stack([(max_scale / F32(63)).astype(F32), (max_min / F32(63)).astype(F32)], axis=1))
    d = f16_round((max_scale / F32(63)).astype(F32))
    dmin = f16_round((max_min / F32(63)).astype(F32))
    step = (d[:, None] * ls.astype(F32)).astype(F32)  # (blocks, 8)
    shift = (dmin[:, None] * lm.astype(F32)).astype(F32)
    xs = sb.reshape(-1, 8, 32)
    with np.errstate(divide="ignore", invalid="ignore"):
        again = nearest_int(((xs + shift[:, :, None]).astype(F32) / step[:, :, None]).astype(F32))
    again = np.clip(np.where(step[:, :, None] != 0, again, 0), 0, nmax).reshape(-1, 256)
    L = np.where(np.repeat(step != 0, 32, axis=1), again, L)
    scales = k_scale_bytes(ls.astype(np.uint8), lm.astype(np.uint8))
    low = L & 15
    qs = (low.reshape(-1, 4, 2, 32)[:, :, 0, :] | (low.reshape(-1, 4, 2, 32)[:, :, 1, :] << 4)).reshape(-1, 128)
    parts = [d16, scales]
    if five:
        bits = (L >> 4).reshape(-1, 8, 32)  # bit j of qh[l]: sub-block j's value l
        qh = (bits << np.arange(8)[None, :, None]).sum(axis=1)
        parts.append(qh.astype(np.uint8))
    parts.append(qs.astype(np.uint8))
    return np.concatenate(parts, axis=1).astype(np.uint8)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q6_K_ref: per sub-block of 16 a scale by search_symmetric (nmax 32); the
    super-block's scale of largest magnitude sets d = 1 / (-128 / it) (binary16) and each int8
    scale min(127, round(-128 / it x scale)); then every value quantized again with them."""
    sb = np.asarray(x, F32).reshape(-1, 256)
    scale, L = search_symmetric(sb.reshape(-1, 16), 32)
    scale, L = scale.reshape(-1, 16), L.reshape(-1, 256)
    mx, amax = largest_magnitude(scale)
    zero = amax < GROUP_MAX_EPS
    with np.errstate(divide="ignore"):
        iscale = np.where(zero, F32(0), (F32(-128) / np.where(zero, F32(1), mx)).astype(F32)).astype(F32)
        d_unrounded = np.where(zero, F32(0), (F32(1) / np.where(zero, F32(1), iscale)).astype(F32)).astype(F32)
    sc = np.minimum(127, nearest_int((iscale[:, None] * scale).astype(F32)))
    sc = np.where(zero[:, None], 0, sc)
    d = f16_round(d_unrounded)
    step = (d[:, None] * sc.astype(F32)).astype(F32)
    xs = sb.reshape(-1, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        again = nearest_int((xs / step[:, :, None]).astype(F32))
    again = np.clip(np.where(step[:, :, None] != 0, again, 0), -32, 31) + 32
    L = np.where(np.repeat(step != 0, 16, axis=1), again.reshape(-1, 256), L)
    L = np.where(zero[:, None], 0, L)
    q = L.reshape(-1, 2, 4, 32)  # (block, half h, k, l): value 128h + 32k + l
    ql = np.concatenate([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4), (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)],
                        axis=2).reshape(-1, 128)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)).reshape(-1, 64)
    return np.concatenate([ql.astype(np.uint8), qh.astype(np.uint8), sc.astype(np.int8).view(np.uint8),
                           f16_bytes(d_unrounded[:, None])], axis=1)


NUMPY_QUANTIZERS = {"q5_0": quantize_q5_0, "q5_1": quantize_q5_1, "q6_k": quantize_q6_k,
                    "q4_k": lambda v: quantize_k(v, False), "q5_k": lambda v: quantize_k(v, True)}
LIBRARY = Path(__file__).resolve().parent / "build" / "libquantize.so"  # export/quantize.c, built by make


@lru_cache(maxsize=None)
def c_library() -> ctypes.CDLL | None:
    """export/quantize.c's quantizers (the same bytes as the NumPy ones here, at C's speed), or
    None when the library is not built: then the NumPy ones run, tens of times slower."""
    if os.environ.get("GPTC_NUMPY_QUANTIZERS") or not LIBRARY.exists():
        return None
    lib = ctypes.CDLL(str(LIBRARY))
    for fmt in NUMPY_QUANTIZERS:
        f = getattr(lib, f"quantize_{fmt}")
        f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p], None
    for fmt in GROUP_FORMATS:
        f = getattr(lib, f"quantize_{fmt}")
        f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p], None
    return lib


# our 32-value formats (quantizers.py's q8_0 and q4_0, and q8_0 with ggml's numbers): each C
# function writes a group's numbers and its float32 scale -> (numbers' dtype, numbers' bytes a group)
GROUP_FORMATS = {"q8_0": (np.int8, 32), "q8_0_ggml": (np.int8, 32), "q4_0": (np.uint8, 16)}


def quantize_groups(groups: np.ndarray, fmt: str, numbers: np.ndarray, scales: np.ndarray) -> bool:
    """Groups (n, 32) float32 in one of GROUP_FORMATS by export/quantize.c, their numbers into
    numbers (n, the format's width) and scales into scales (n), split between the CPUs; False
    (nothing written) when the library is not built: the caller's NumPy then runs."""
    lib = c_library()
    if lib is None:
        return False
    groups = np.ascontiguousarray(groups, F32)
    f = getattr(lib, f"quantize_{fmt}")
    step = max(1024, -(-len(groups) // (4 * threads())))

    def part(at: int) -> None:
        f(groups[at:].ctypes.data, min(step, len(groups) - at), numbers[at:].ctypes.data, scales[at:].ctypes.data)
    with ThreadPoolExecutor(threads()) as pool:
        list(pool.map(part, range(0, len(groups), step)))
    return True


def threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def quantize_blocks(rows: np.ndarray, fmt: str) -> np.ndarray:
    """Blocks of `fmt` (blocks, bytes) of rows (blocks, values per block): in C split between this
    process's CPUs (ctypes lets go of Python's lock while C runs), else in NumPy."""
    lib = c_library()
    if lib is None:
        out = [NUMPY_QUANTIZERS[fmt](rows[at:at + (1 << 14)])  # a chunk at a time: the searches hold copies
               for at in range(0, len(rows), 1 << 14)]
        return np.concatenate(out) if out else np.zeros((0, FORMATS[fmt][1]), np.uint8)
    out = np.empty((len(rows), FORMATS[fmt][1]), np.uint8)
    step = max(64, -(-len(rows) // (4 * threads())))
    f = getattr(lib, f"quantize_{fmt}")

    def part(at: int) -> None:
        n = min(step, len(rows) - at)
        f(rows[at:].ctypes.data, n, out[at:].ctypes.data)
    with ThreadPoolExecutor(threads()) as pool:
        list(pool.map(part, range(0, len(rows), step)))
    return out


def quantize(x: np.ndarray, fmt: str) -> bytes:
    """The bytes of x (rows of whole blocks) in format fmt."""
    x = np.ascontiguousarray(x, F32)
    if fmt == "f16":
        with np.errstate(over="ignore"):
            return x.astype("<f2").tobytes()
    if fmt == "bf16":
        return bf16_from_f32(x).astype("<u2").tobytes()
    return quantize_blocks(x.reshape(-1, FORMATS[fmt][0]), fmt).tobytes()


# ---- reading blocks back -----------------------------------------------------------------------

def halves(raw: np.ndarray, at: int) -> np.ndarray:
    """The binary16 number at byte `at` of each block (blocks, bytes), as float32."""
    return np.ascontiguousarray(raw[:, at:at + 2]).view("<f2")[:, 0].astype(F32)


def first_bad_block(raw: bytes | np.ndarray, fmt: str) -> int | None:
    """The first block whose binary16 scale is infinite or NaN (all exponent bits set), or None:
    what run's loader refuses (kernels/types.h), found before a file is written."""
    if fmt not in SCALES:
        return None
    blocks = np.frombuffer(raw, np.uint8).reshape(-1, FORMATS[fmt][1])
    bad = np.zeros(len(blocks), bool)
    for at in SCALES[fmt]:
        bits = np.ascontiguousarray(blocks[:, at:at + 2]).view("<u2")[:, 0]
        bad |= (bits & 0x7C00) == 0x7C00
    return int(np.argmax(bad)) if bad.any() else None


def k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 6-bit scales and mins (blocks, 8) of q4_k's and q5_k's 12 bytes (blocks, 12)."""
    s = s.astype(np.int64)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc, m


def nibbles(qs: np.ndarray) -> np.ndarray:
    """The 32 numbers of each group's 16 bytes (groups, 16): the low nibbles, then the high ones."""
    return np.concatenate([qs & 15, qs >> 4], axis=1)


def iq4_xs_scales(blocks: np.ndarray) -> np.ndarray:
    """iq4_xs's 6-bit scales (blocks, 8), not yet less 32."""
    b = blocks.astype(np.int64)
    high = b[:, 2] | b[:, 3] << 8
    low = np.stack([(b[:, 4 + g // 2] >> 4 * (g % 2)) & 15 for g in range(8)], axis=1)
    return low | (((high[:, None] >> (2 * np.arange(8))) & 3) << 4)


def two_bits(qs: np.ndarray) -> np.ndarray:
    """q2_k's and q3_k's 2-bit numbers (blocks, 256) of their 64 bytes (blocks, 64): value 128h +
    32k + l has bits 2k, 2k + 1 of byte 32h + l."""
    halves_ = qs.reshape(-1, 2, 1, 32)
    return ((halves_ >> (2 * np.arange(4))[None, None, :, None]) & 3).reshape(-1, 256)


def q3_k_scales(s: np.ndarray) -> np.ndarray:
    """q3_k's 16 6-bit scales (blocks, 16) of their 12 bytes, not yet less 32."""
    s = s.astype(np.int64)
    low = np.concatenate([s[:, 0:8] & 15, s[:, 0:8] >> 4], axis=1)
    high = np.stack([(s[:, 8 + j % 4] >> (2 * (j // 4))) & 3 for j in range(16)], axis=1)
    return low | high << 4


def numbers(blocks: np.ndarray, fmt: str) -> np.ndarray:
    """Each value's integer (blocks, block): q5_0's, q5_1's, q4_1's and the k formats' unsigned
    numbers, q6_k's number - 32, iq4_nl's and iq4_xs's levels."""
    b = blocks.astype(np.int64)
    if fmt == "q4_1":
        return nibbles(b[:, 4:20])
    if fmt == "iq4_nl":
        return IQ4_LEVELS[nibbles(b[:, 2:18])]
    if fmt == "iq4_xs":
        return IQ4_LEVELS[nibbles(b[:, 8:136].reshape(-1, 16))].reshape(-1, 256)
    if fmt == "q2_k":
        return two_bits(b[:, 16:80])
    if fmt == "q3_k":
        i = np.arange(256)
        high = (b[:, i % 32] >> (4 * (i // 128) + i % 128 // 32)) & 1
        return two_bits(b[:, 32:96]) - np.where(high == 1, 0, 4)
    if fmt in ("q5_0", "q5_1"):
        at = 2 if fmt == "q5_0" else 4
        qh = np.ascontiguousarray(blocks[:, at:at + 4]).view("<u4")[:, 0].astype(np.int64)
        qs = b[:, at + 4:at + 20]
        low = np.concatenate([qs & 15, qs >> 4], axis=1)
        return low | (((qh[:, None] >> np.arange(32)) & 1) << 4)
    if fmt in ("q4_k", "q5_k"):
        qs = b[:, 16:144] if fmt == "q4_k" else b[:, 48:176]
        pairs = qs.reshape(-1, 4, 1, 32)
        low = np.concatenate([pairs & 15, pairs >> 4], axis=2).reshape(-1, 256)
        if fmt == "q4_k":
            return low
        qh = b[:, 16:48]  # value 32j + l: bit j of qh[l]
        return low | (((qh[:, None, :] >> np.arange(8)[None, :, None]) & 1) << 4).reshape(-1, 256)
    ql, qh = b[:, :128].reshape(-1, 2, 64), b[:, 128:192].reshape(-1, 2, 32)
    low = np.stack([ql[:, :, :32] & 15, ql[:, :, 32:] & 15, ql[:, :, :32] >> 4, ql[:, :, 32:] >> 4], axis=2)
    top = np.stack([(qh >> (2 * k)) & 3 for k in range(4)], axis=2)
    return (low | (top << 4)).reshape(-1, 256) - 32


def parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Each value as (scale part, min part) in float64, value = scale part - min part exactly:
    (q - 16) d and 0; q d and -m; d sc q and dmin m; d sc q and 0. What a reference sums, and
    what its rounding bound scales with (the parts, not their difference)."""
    blocks = raw.reshape(-1, FORMATS[fmt][1])
    q = numbers(blocks, fmt).astype(np.float64)
    if fmt == "q5_0":
        return (q - 16) * halves(blocks, 0)[:, None], np.zeros_like(q)
    if fmt in ("q5_1", "q4_1"):
        return q * halves(blocks, 0)[:, None], np.repeat(-halves(blocks, 2)[:, None].astype(np.float64), 32, axis=1)
    if fmt == "iq4_nl":
        return q * halves(blocks, 0)[:, None], np.zeros_like(q)
    if fmt == "iq4_xs":
        scale = halves(blocks, 0)[:, None].astype(np.float64) * (iq4_xs_scales(blocks) - 32)
        return np.repeat(scale, 32, axis=1) * q, np.zeros_like(q)
    if fmt == "q2_k":
        sc = np.repeat(blocks[:, 0:16].astype(np.int64), 16, axis=1)
        return (halves(blocks, 80)[:, None].astype(np.float64) * (sc & 15) * q,
                halves(blocks, 82)[:, None].astype(np.float64) * (sc >> 4))
    if fmt == "q3_k":
        scale = halves(blocks, 108)[:, None].astype(np.float64) * (q3_k_scales(blocks[:, 96:108]) - 32)
        return np.repeat(scale, 16, axis=1) * q, np.zeros_like(q)
    if fmt == "q6_k":
        sc = np.repeat(blocks[:, 192:208].view(np.int8).astype(np.float64), 16, axis=1)
        return halves(blocks, 208)[:, None] * sc * q, np.zeros_like(q)
    sc, m = k_scales(blocks[:, 4:16])
    return (halves(blocks, 0)[:, None] * np.repeat(sc, 32, axis=1) * q,
            halves(blocks, 2)[:, None] * np.repeat(m, 32, axis=1).astype(np.float64))


def dequantize(raw: bytes | np.ndarray, fmt: str, shape: tuple) -> np.ndarray:
    """float32 values of a tensor of `shape` stored in format fmt: what ggml's dequantize_row_*
    computes, float32 operation for float32 operation."""
    raw = np.frombuffer(raw, np.uint8) if isinstance(raw, (bytes, bytearray, memoryview)) else np.asarray(raw, np.uint8)
    if fmt == "f16":
        return raw.view("<f2").astype(F32).reshape(shape)
    if fmt == "bf16":
        return (raw.view("<u2").astype(np.uint32) << 16).view(F32).reshape(shape)
    blocks = raw.reshape(-1, FORMATS[fmt][1])
    q = numbers(blocks, fmt).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt == "q5_0":
            out = ((q - F32(16)) * halves(blocks, 0)[:, None]).astype(F32)
        elif fmt in ("q5_1", "q4_1"):
            out = ((q * halves(blocks, 0)[:, None]).astype(F32) + halves(blocks, 2)[:, None]).astype(F32)
        elif fmt == "iq4_nl":
            out = (halves(blocks, 0)[:, None] * q).astype(F32)
        elif fmt == "iq4_xs":
            scale = (halves(blocks, 0)[:, None] * (iq4_xs_scales(blocks) - 32).astype(F32)).astype(F32)
            out = (np.repeat(scale, 32, axis=1) * q).astype(F32)
        elif fmt == "q2_k":
            sc = np.repeat(blocks[:, 0:16].astype(np.int64), 16, axis=1)
            step = (halves(blocks, 80)[:, None] * (sc & 15).astype(F32)).astype(F32)
            shift = (halves(blocks, 82)[:, None] * (sc >> 4).astype(F32)).astype(F32)
            out = ((step * q).astype(F32) - shift).astype(F32)
        elif fmt == "q3_k":
            scale = (halves(blocks, 108)[:, None] * (q3_k_scales(blocks[:, 96:108]) - 32).astype(F32)).astype(F32)
            out = (np.repeat(scale, 16, axis=1) * q).astype(F32)
        elif fmt == "q6_k":
            sc = np.repeat(blocks[:, 192:208].view(np.int8).astype(F32), 16, axis=1)
            out = ((halves(blocks, 208)[:, None] * sc).astype(F32) * q).astype(F32)
        else:
            sc, m = k_scales(blocks[:, 4:16])
            step = (halves(blocks, 0)[:, None] * sc.astype(F32)).astype(F32)
            shift = (halves(blocks, 2)[:, None] * m.astype(F32)).astype(F32)
            out = ((np.repeat(step, 32, axis=1) * q).astype(F32) - np.repeat(shift, 32, axis=1)).astype(F32)
    return out.reshape(shape)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()
    for name, (block, size) in FORMATS.items():
        print(f"{name:5} {block:4} values in {size:3} bytes")


if __name__ == "__main__":
    main()
