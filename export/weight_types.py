"""The one list of weight types, Python's: what each is called, its id in a weight file, its
block, and how a GGUF file holds it. kernels/types.h's WEIGHT_TYPE_LIST is C's; tests/test_build.py
checks that the two agree. Everything per type in export/ is derived from TYPES: weight_file.py's
WEIGHT_TYPES (name -> id), block_formats.py's FORMATS (the types stored as GGUF's blocks), and
gguf_import.py's copies (a GGUF type read block for block).

usage: imported by weight_file.py, quantizers.py, mixes.py, block_formats.py and gguf_import.py
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WeightType:
    name: str             # as --dtype and run --info say it
    id: int               # kernels/types.h's WT_*: the number a weight file names a tensor's type by
    block: int            # values per block: a row's length is a multiple of it
    block_bytes: int      # bytes per block when stored in GGUF's block layout, 0 for ours (q8_0, q4_0, f32)
    gguf: str | None      # the GGUF type whose blocks it stores as they are, or None


# In the order of their ids.
TYPES = (
    WeightType("f32", 0, 1, 0, None),
    WeightType("q8_0", 1, 32, 0, None),
    WeightType("q4_0", 2, 32, 0, None),
    WeightType("q5_0", 3, 32, 22, "Q5_0"),
    WeightType("q4_k", 4, 256, 144, "Q4_K"),
    WeightType("q6_k", 5, 256, 210, "Q6_K"),
    WeightType("q5_k", 6, 256, 176, "Q5_K"),
    WeightType("q5_1", 7, 32, 24, "Q5_1"),
    WeightType("f16", 8, 1, 0, "F16"),
    WeightType("bf16", 9, 1, 0, "BF16"),
    WeightType("q4_1", 10, 32, 20, "Q4_1"),
    WeightType("iq4_nl", 11, 32, 18, "IQ4_NL"),
    WeightType("iq4_xs", 12, 256, 136, "IQ4_XS"),
    WeightType("q2_k", 13, 256, 84, "Q2_K"),
    WeightType("q3_k", 14, 256, 110, "Q3_K"),
)
assert [t.id for t in TYPES] == list(range(len(TYPES)))

BY_NAME = {t.name: t for t in TYPES}
# the types read from GGUF files block for block but not written by our quantizers (--dtype)
READ_ONLY = ("q4_1", "iq4_nl", "iq4_xs", "q2_k", "q3_k")
WRITTEN = tuple(t.name for t in TYPES if t.name not in READ_ONLY)
QUANT_GROUP = 32  # values per scale in a q8_0 or q4_0 matrix: the header's group_size
# the types stored as a GGUF stores them: name -> (values per block, bytes per block); the
# 16-bit ones are one value of 2 bytes
GGUF_LAYOUT = {t.name: (t.block, t.block_bytes or 2) for t in TYPES if t.gguf is not None}
