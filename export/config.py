"""The block's configuration and a model's weights as arrays, without PyTorch: what the readers of
every SOURCE (export.py, gguf_import.py) fill in and the writer (weight_file.py) writes, so that a
GGUF file or a safetensors folder converts with NumPy alone. export/model.py, the PyTorch
reference, builds its GPT from the same GPTConfig and loads a Weights' arrays as they are.

usage: imported by export.py, the source_*.py readers, gguf_import.py, weight_file.py and model.py
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from output_files import ExportError  # noqa: E402

if TYPE_CHECKING:
    from weight_file import TokenizerData

# Which tensors have biases (model.h's BIAS_* bits).
BIAS_QKV, BIAS_ATTN_OUT, BIAS_FFN, BIAS_NORM = 1, 2, 4, 8
BIAS_ALL = 15


@dataclass
class GPTConfig:
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    n_hidden: int = 256          # feed-forward width (4 * n_embd in GPT-2)
    n_ctx: int = 128             # context length (nanoGPT's block_size)
    vocab_size: int = 256        # real tokens
    vocab_padded: int = 256      # rows of wte / lm_head, >= vocab_size
    ln_eps: float = 1e-5         # the norm's epsilon (LayerNorm or RMSNorm)
    gelu: str = "tanh"           # "tanh" (GPT-2) or "erf" (exact, nanoGPT); with ffn "gelu" and "geglu"
    bias: bool | int = True      # True: every Linear and LayerNorm (BIAS_ALL); False: none; or BIAS_* bits
    tied_head: bool = True
    pos: str = "learned"         # "learned", "sinusoidal" (both added to the embedding) or "rotary"
    norm: str = "layer"          # "layer" (LayerNorm) or "rms" (RMSNorm)
    ffn: str = "gelu"            # "gelu" (GPT-2's MLP), "swiglu" (Llama's) or "geglu" (Gemma's)
    n_kv_head: int = 0           # key/value heads; 0: as many as n_head
    rope_theta: float = 10000.0  # rotary positions' base
    rope_freqs: list | None = None  # rotary frequencies given by the file (rotary_dims / 2), or None
    head_dim: int = 0            # each head's dimensions; 0: n_embd // n_head
    layers: list | None = None   # per layer, what may differ (model.h's layer table): dicts of window
                                 # (0: the whole context), rotary (bool), rope_theta; None: every layer
                                 # whole-context, rotary as pos says, with rope_theta
    # version 5's switches of the block (model.h), each at what a block before them does
    qk_norm: str = "none"        # "head": RMSNorm of each query and key head (Qwen3, Gemma 3);
                                 # "whole": of the whole query and key projections (OLMo 2)
    norm_before: bool = True     # ln_1, ln_2 before each sublayer
    norm_after: bool = False     # attn.post_norm, mlp.post_norm on each sublayer's output (Gemma, OLMo 2)
    embed_scale: float = 1.0     # the embedding times this (Gemma, Granite)
    attn_scale: float = 0.0      # the query times this before its scores; 0: 1/sqrt(head_size)
    residual_scale: float = 1.0  # each sublayer's output times this before the residual add (Granite)
    logit_divisor: float = 1.0   # the logits divided by this (Granite)
    attn_softcap: float = 0.0    # scores s -> cap tanh(s / cap) (Gemma 2); 0: none
    logit_softcap: float = 0.0   # logits likewise (Gemma 2); 0: none
    rotary_dims: int = 0         # each head's rotated dimensions, the first ones; 0: all (head_size)
    rope_scale: float = 1.0      # cos and sin times this (LongRoPE's attention factor)
    rope_freqs_long: list | None = None  # LongRoPE: the frequencies for a context past rope_original
    rope_original: int = 0       # LongRoPE: the context rope_freqs serve

    def __post_init__(self) -> None:
        if isinstance(self.bias, bool):
            self.bias = BIAS_ALL if self.bias else 0
        if not self.n_kv_head:
            self.n_kv_head = self.n_head

    @property
    def head_size(self) -> int:
        return self.head_dim or self.n_embd // self.n_head

    @property
    def rotated(self) -> int:
        """The dimensions of each head that rotary positions rotate."""
        return self.rotary_dims or self.head_size

    @property
    def query_scale(self) -> float:
        """The query's scale before its scores, in float32 as run computes it."""
        return float(np.float32(self.attn_scale)) if self.attn_scale else \
            float(np.float32(1.0) / np.sqrt(np.float32(self.head_size)))

    def layer_rows(self) -> list[dict]:
        """Each layer's row of the layer table, the defaults filled in."""
        rotary = self.pos == "rotary"
        default = {"window": 0, "rotary": rotary, "rope_theta": self.rope_theta if rotary else 0.0}
        rows = [{**default, **row} for row in (self.layers if self.layers is not None else [{}] * self.n_layer)]
        return [{**row, "rope_theta": row["rope_theta"] if row["rotary"] else 0.0} for row in rows]

    def fits_version_4(self) -> bool:
        """Whether a file before version 5 (no head size, no layer table, none of its switches)
        describes this block."""
        v5 = GPTConfig(n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd, pos=self.pos, rope_theta=self.rope_theta)
        switches = ("qk_norm", "norm_before", "norm_after", "embed_scale", "attn_scale", "residual_scale", "logit_divisor",
                    "attn_softcap", "logit_softcap", "rope_scale", "rope_freqs_long", "rope_original")
        return self.head_size * self.n_head == self.n_embd and self.n_embd % self.n_head == 0 and \
            self.ffn in ("gelu", "swiglu") and self.rotated == self.head_size and \
            all(getattr(self, k) == getattr(v5, k) for k in switches) and self.layer_rows() == v5.layer_rows()

    def has_bias(self, part: int) -> bool:
        return bool(self.bias & part)

    def check(self) -> None:
        assert self.head_dim or self.n_embd % self.n_head == 0, "n_embd must be a multiple of n_head"
        assert self.n_head % self.n_kv_head == 0, "n_head must be a multiple of n_kv_head"
        assert self.layers is None or len(self.layers) == self.n_layer, "a layer table row per layer"
        for row in self.layer_rows():
            assert row["window"] >= 0, "a window is a number of positions"
            assert not row["rotary"] or (self.pos == "rotary" and row["rope_theta"] > 0), "rotary layers need a base"
        assert self.vocab_padded >= self.vocab_size
        assert self.gelu in ("tanh", "erf") and self.pos in ("learned", "sinusoidal", "rotary")
        assert self.norm in ("layer", "rms") and self.ffn in ("gelu", "swiglu", "geglu") and 0 <= self.bias <= BIAS_ALL
        assert self.qk_norm in ("none", "head", "whole") and (self.qk_norm == "none" or self.norm == "rms")
        assert self.norm_before or self.norm_after, "a block normalizes somewhere"
        assert self.rotated % 2 == 0 and self.rotated <= self.head_size, "rotary dimensions come in pairs"
        assert self.rope_freqs_long is None or (self.rope_freqs is not None and self.rope_original > 0)
        assert self.norm == "layer" or not self.has_bias(BIAS_NORM), "RMSNorm has no bias"
        assert self.pos != "sinusoidal" or self.n_embd % 2 == 0, "sinusoidal needs an even n_embd"
        assert self.pos != "rotary" or self.head_size % 2 == 0, "rotary positions need an even head size"


def reference_shapes(c: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every weight of the reference model (export/model.py's GPT state dict: nanoGPT's names,
    the SwiGLU gate as h.N.mlp.gate) and its shape, lm_head.weight included when it is tied."""
    C, H, hs = c.n_embd, c.n_hidden, c.head_size
    norm_bias = c.norm == "layer" and c.has_bias(BIAS_NORM)
    shapes: dict[str, tuple[int, ...]] = {"transformer.wte.weight": (c.vocab_padded, C)}
    if c.pos == "learned":
        shapes["transformer.wpe.weight"] = (c.n_ctx, C)
    for i in range(c.n_layer):
        h = f"transformer.h.{i}."
        whole = c.qk_norm == "whole"
        layer = {"ln_1.weight": (C,) if c.norm_before else None, "ln_1.bias": (C,) if norm_bias and c.norm_before else None,
                 "attn.c_attn.weight": ((c.n_head + 2 * c.n_kv_head) * hs, C),
                 "attn.c_attn.bias": ((c.n_head + 2 * c.n_kv_head) * hs,) if c.has_bias(BIAS_QKV) else None,
                 "attn.q_norm.weight": (c.n_head * hs if whole else hs,) if c.qk_norm != "none" else None,
                 "attn.k_norm.weight": (c.n_kv_head * hs if whole else hs,) if c.qk_norm != "none" else None,
                 "attn.c_proj.weight": (C, c.n_head * hs), "attn.c_proj.bias": (C,) if c.has_bias(BIAS_ATTN_OUT) else None,
                 "attn.post_norm.weight": (C,) if c.norm_after else None,
                 "ln_2.weight": (C,) if c.norm_before else None, "ln_2.bias": (C,) if norm_bias and c.norm_before else None}
        if c.ffn in ("swiglu", "geglu"):
            layer.update({"mlp.gate.weight": (H, C), "mlp.gate.bias": (H,) if c.has_bias(BIAS_FFN) else None})
        layer.update({"mlp.c_fc.weight": (H, C), "mlp.c_fc.bias": (H,) if c.has_bias(BIAS_FFN) else None,
                      "mlp.c_proj.weight": (C, H), "mlp.c_proj.bias": (C,) if c.has_bias(BIAS_FFN) else None,
                      "mlp.post_norm.weight": (C,) if c.norm_after else None})
        shapes.update({h + name: shape for name, shape in layer.items() if shape is not None})
    shapes["transformer.ln_f.weight"] = (C,)
    if norm_bias:
        shapes["transformer.ln_f.bias"] = (C,)
    shapes["lm_head.weight"] = (c.vocab_padded, C)
    return shapes


@dataclass
class Weights:
    """A model as its configuration and float32 arrays under the reference model's names
    (reference_shapes): what a SOURCE reader returns and the writer takes. The PyTorch reference
    of the same weights is export/model.py's GPT.of(weights)."""
    config: GPTConfig
    arrays: dict[str, np.ndarray]

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.arrays


class ShapeError(ExportError):
    """A weight missing or of the wrong shape, said in one line."""


def weights_of(c: GPTConfig, sd: dict, what: str) -> Weights:
    """sd (name -> an array, or a torch tensor) checked against c's reference_shapes, every
    missing or misshapen weight named, as float32 arrays; a tied head is the embedding itself."""
    c.check()
    arrays = {}
    for name, shape in reference_shapes(c).items():
        if name == "lm_head.weight" and c.tied_head:
            continue
        if name not in sd:
            raise ShapeError(f"{what}: missing key '{name}'")
        value = sd[name]
        if hasattr(value, "detach"):  # a torch tensor: its numbers as NumPy's
            value = value.detach().float().numpy()
        value = np.asarray(value)
        if tuple(value.shape) != shape:
            raise ShapeError(f"{what}: key '{name}' has shape {tuple(value.shape)}, expected {shape}")
        arrays[name] = value if value.dtype == np.float32 else value.astype(np.float32)
    if c.tied_head:
        arrays["lm_head.weight"] = arrays["transformer.wte.weight"]
    return Weights(c, arrays)


# ---- a source's tensors, on their way to Weights ------------------------------------------------

def strip_prefix(sd: dict, prefix: str) -> dict:
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in sd.items()}


def as_arrays(sd: dict) -> dict:
    """A checkpoint's state dict with its tensors as float32 NumPy arrays (other values as they are)."""
    return {k: (v.detach().float().numpy() if hasattr(v, "detach") else v) for k, v in sd.items()}


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def take(sd: dict, key: str, where: str) -> np.ndarray:
    if key not in sd:
        raise ExportError(f"{where}: missing tensor '{key}'")
    return sd.pop(key)


def with_tokenizer(cfg: GPTConfig, rows: int, tok: TokenizerData, where: str) -> None:
    """vocab_size from the tokenizer, vocab_padded from the embedding's rows."""
    if len(tok.tokens) > rows:
        raise ExportError(f"{where}: the tokenizer has {len(tok.tokens)} tokens, more than the {rows} rows of the embedding")
    cfg.vocab_size, cfg.vocab_padded = len(tok.tokens), rows
