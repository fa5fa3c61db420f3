"""llama.cpp's mixes: the weight type llama-quantize gives each matrix of a Q4_K_M or Q5_K_M
file (without an imatrix), and its fallbacks where a k type's 256 values do not divide a row.
export.py's --dtype q4_k_m and q5_k_m, and every k type's fallback, follow it."""
from __future__ import annotations

from weight_types import QUANT_GROUP

# --dtype's mixes: a type per matrix as llama.cpp's llama-quantize chooses it (dtype_type)
MIXES = ("q4_k_m", "q5_k_m")


def use_more_bits(layer: int, n_layer: int) -> bool:
    """llama.cpp's layers that get more bits in its _M mixes: the first and last eighth, and
    every third between."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


# llama.cpp's replacement for a k type where a row is not a multiple of its 256 values
K_FALLBACK = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0_ggml"}


def dtype_type(dtype: str, name: str, base: str, cols: int, n_layer: int, tied: bool) -> str:
    """The weight type --dtype gives matrix `name` as llama.cpp's llama-quantize gives its GGUF
    tensor (without an imatrix): q4_k_m and q5_k_m: the output head (and a tied embedding)
    q6_k, the value projection (our fused query/key/value, as llama.cpp treats GPT-2's fused
    one) and the down projection q6_k on use_more_bits() layers, the rest q4_k (q5_k); any other
    dtype is every matrix's type. Then, as llama.cpp does for every k type, one whose 256 values
    do not divide the row falls back (q4_k to q5_0, q5_k to q5_1, q6_k to q8_0 with ggml's
    numbers), and to f16 where 32 does not divide it either. A type of 32 values on a row it does
    not divide is refused (entry_types), as llama.cpp refuses it."""
    layer = int(name.split(".")[1]) if name.startswith("h.") else -1
    wtype = dtype
    if dtype in MIXES:
        wtype = {"q4_k_m": "q4_k", "q5_k_m": "q5_k"}[dtype]
        if base == "lm_head.weight" or (base == "wte" and tied):
            wtype = "q6_k"
        elif base in ("attn.c_attn.weight", "attn.v.weight", "mlp.c_proj.weight") and layer >= 0 \
                and use_more_bits(layer, n_layer):
            wtype = "q6_k"
    if wtype in K_FALLBACK and cols % 256:
        wtype = K_FALLBACK[wtype]
        if cols % QUANT_GROUP:
            wtype = "f16"
    return wtype
