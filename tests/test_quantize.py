"""The exporter's quantizers in C (export/quantize.c, export/build/libquantize.so) against their
NumPy definitions (export/block_formats.py), byte for byte, on rows made to reach every branch:
random rows of many scales, all-zero blocks, blocks below ggml's GROUP_MAX_EPS, all-positive and
all-negative blocks (the k formats' min clamped to zero), a lone spike, equal values (a flat
sub-block), ties for the largest magnitude, huge and tiny magnitudes. test_gguf_blocks.py checks
the C ones (which export.py runs) against llama.cpp's own quantizer, byte for byte."""
from __future__ import annotations

import os

import numpy as np
import pytest

import common  # noqa: F401 (puts export/ on the path)
import block_formats  # noqa: E402

FORMATS = ("q5_0", "q5_1", "q4_k", "q5_k", "q6_k")


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
    return np.array(rows, np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_c_quantizers_write_the_numpy_definitions_bytes(fmt: str) -> None:
    assert block_formats.LIBRARY.exists(), f"{block_formats.LIBRARY} is missing: run make"
    rows = hard_rows()
    assert block_formats.c_library() is not None
    c = block_formats.quantize(rows, fmt)
    os.environ["GPTC_NUMPY_QUANTIZERS"] = "1"
    block_formats.c_library.cache_clear()
    try:
        reference = block_formats.quantize(rows, fmt)
    finally:
        del os.environ["GPTC_NUMPY_QUANTIZERS"]
        block_formats.c_library.cache_clear()
    assert block_formats.c_library() is not None
    if c != reference:
        size = block_formats.FORMATS[fmt][1]
        first = next(i for i in range(0, len(c), size) if c[i:i + size] != reference[i:i + size]) // size
        pytest.fail(f"{fmt}: block {first} differs (row {first * block_formats.FORMATS[fmt][0] // 1024})")
