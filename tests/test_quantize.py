"""The exporter's quantizers in C (export/quantize.c, export/build/libquantize.so) against their
NumPy definitions (export/block_formats.py, quantizers.py's q8_0 and q4_0), byte for byte, on
rows made to reach every branch:
random rows of many scales, all-zero blocks, blocks below ggml's GROUP_MAX_EPS, all-positive and
all-negative blocks (the k formats' min clamped to zero), a lone spike, equal values (a flat
sub-block), ties for the largest magnitude, huge and tiny magnitudes. test_gguf_blocks.py checks
the C ones (which export.py runs) against llama.cpp's own quantizer, byte for byte."""
from __future__ import annotations

import os

import numpy as np
import pytest

from common import REPO  # (and export/ on the path)
import block_formats  # noqa: E402
from quantizers import tensor_data  # noqa: E402

FORMATS = ("q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q8_0", "q4_0", "q8_0_ggml")


def hard_rows() -> np.ndarray:
    rng = np.random.default_rng(7)
    rows = [rng.standard_normal(1024) * s for s in (1e-3, 0.02, 1.0, 40.0, 3e4)]
    rows.append(np.zeros(1024))
    rows.append(np.full(1024, 1e-17))                                # below GROUP_MAX_EPS
    rows.append(np.abs(rng.standard_normal(1024)) + 0.5)             # all positive: the min stays 0
    rows.append(-np.abs(rng.standard_normal(1024)) - 0.5)            # all negative
    spike = np.zeros(1024)
    spike[::97] = 5.0
    rows.append(spike)
    rows.append(np.repeat(rng.standard_normal(32), 32))              # flat sub-blocks of 32
    ties = rng.standard_normal(1024)
    ties[::16] = 3.0
    ties[8::16] = -3.0                                               # equal magnitudes, opposite signs
    rows.append(ties)
    rows.append(rng.standard_normal(1024) * np.repeat(10.0 ** rng.uniform(-6, 3, 64), 16))
    half = np.zeros(1024)  # a group whose scale is 1, holding the float just below one half: roundf
    half[0], half[1], half[2] = 127.0, np.nextafter(np.float32(0.5), np.float32(0)), -2.5  # gives 0 and -3
    rows.append(half)
    return np.array(rows, np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_c_quantizers_write_the_numpy_definitions_bytes(fmt: str) -> None:
    assert block_formats.LIBRARY.exists(), f"{block_formats.LIBRARY.relative_to(REPO)} is missing: run make"
    rows = hard_rows()
    assert block_formats.c_library() is not None
    c = tensor_data(rows, fmt)
    os.environ["GPTC_NUMPY_QUANTIZERS"] = "1"
    block_formats.c_library.cache_clear()
    try:
        reference = tensor_data(rows, fmt)
    finally:
        del os.environ["GPTC_NUMPY_QUANTIZERS"]
        block_formats.c_library.cache_clear()
    assert block_formats.c_library() is not None
    if c != reference:
        first = next(i for i in range(len(c)) if c[i] != reference[i])
        pytest.fail(f"{fmt}: byte {first} of {len(c)} differs")


def test_q8_0_with_ggml_numbers_rounds_halves_as_roundf() -> None:
    """ggml's q8_0 rounds with roundf: the float just below one half is 0, -2.5 is -3 (by hand)."""
    out = tensor_data(hard_rows()[-1], "q8_0_ggml")
    assert list(np.frombuffer(out[:3], np.int8)) == [127, 0, -3]
