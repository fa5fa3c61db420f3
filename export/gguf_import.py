"""A GGUF file (llama.cpp's format, read by gguf_file.py) as our weight file: every number
llama.cpp computes with, kept.

Architectures: llama (Llama 2 and 3, TinyLlama, SmolLM, SmolLM2, Mistral without a sliding window
that bites), qwen2 (Qwen2, Qwen2.5), gpt2, qwen3, smollm3, granite, olmo2, gemma2, gemma3 and phi3
(Phi-3, Phi-3.5, Phi-4-mini), from their {arch}.* keys as llama.cpp reads them (its
src/models/*.cpp), with llama.cpp's rules where the file says nothing: Gemma's query scale from
its layer count, Gemma 3's local layers five of every six, SmolLM3's layers without rotary
positions every fourth. Any other architecture, and any setting run.c does not run (rope
scaling other than Llama 3's, Gemma 3's linear one and Phi-3's LongRoPE, a sliding window where
the architecture has none, mixture of experts, values of another size than keys, partial rotary
positions but Phi-3's), is refused naming the key. A head size of the model's own (attention.key_length) is
kept: format version 5 has one.

The converters' conventions, undone where ours differ (model.h is our side):
  - llama's, smollm3's and granite's query and key rows are already in adjacent rotary pairs
    (llama.cpp's converter permutes Hugging Face's halves into them, and its rope for them
    rotates pairs); the other architectures' are in Hugging Face's halves (llama.cpp rotates
    them as halves, "NEOX"; Phi-3's on the first rope.dimension_count of a head), so their rows,
    biases and the query and key norms' weights are permuted here into adjacent pairs: the same
    attention scores;
  - Phi-3's fused attn_qkv and ffn_up (the gate's rows first) are split; LongRoPE's
    rope_factors_short and rope_factors_long become the two frequency tables;
  - Gemma's norm weights are 1 + w already, as our file keeps them;
  - attn_q, attn_k and attn_v become one fused projection, queries first (gpt2's attn_qkv is
    one already); ggml's ne = [in, out] is nn.Linear's (out, in), row-major, as it is;
  - Llama 3's rope scaling arrives as rope_freqs.weight, a factor per rotary pair by which
    llama.cpp divides that pair's angle: our rope_freqs tensor is the frequency itself,
    rope_theta^(-2i/head_size) / factor_i;
  - no output.weight: the head is tied to token_embd;
  - a bias llama.cpp's llama lets some layers have and others not is zero where it is absent.

Weight types: F32 as it is; Q8_0 and Q4_0 kept bit for bit: the binary16 scales as float32
(exactly) and the quants as they are (our q4_0 packs a group's nibbles as ggml's block_q4_0
does); Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and F16, BF16 matrices copied block for block (our file
stores GGUF's blocks as they are: kernels/types.h), F16 and BF16 vectors as float32 (exactly).
Other types are refused, listing each tensor and its type. Where a layer's query, key and value
projections have different types (llama.cpp's Q4_K_M gives the value projection more bits on
some layers), the file keeps the three apart (model.h's qkv_apart) rather than widen them.
--dtype and --tensor-type (export.py) may ask for another type: a float matrix may become any,
a quantized one only a type that holds its numbers exactly (q4_0, q5_0 -> q8_0 -> f32; any ->
f32).

The tokenizer comes from tokenizer.ggml.*: "llama" (SentencePiece: pieces, scores, token types,
byte pieces) and "gpt2" (byte-level BPE: tokens and merges, tokenizer.ggml.pre naming the
pre-tokenizer), each encoding as llama.cpp encodes it (docs/export.md, "GGUF", says what GGUF
does not record and what is assumed instead). tokenizer.chat_template becomes the chat metadata
as a Hugging Face folder's template does (chat_template.py), its special tokens being the ones
the file's bos, eos, unknown and padding ids name.
"""
from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import block_formats  # noqa: E402
from chat_template import tokenizer_chat_metadata  # noqa: E402
from gguf_file import (ARRAY, BOOL, FLOAT32, FLOAT64, INTEGER_TYPES, STRING, VALUE_TYPES, GGUFError,  # noqa: E402
                       GGUFFile, TensorInfo, float_values, q4_0_blocks, q8_0_blocks, read_gguf, shown)
from architectures import layer_name, model_name  # noqa: E402
from config import BIAS_ALL, BIAS_ATTN_OUT, BIAS_FFN, BIAS_QKV, GPTConfig, Weights, weights_of  # noqa: E402
from progress import Progress  # noqa: E402
from tokenizer_files import gpt2_byte_decoder  # noqa: E402
from weight_types import TYPES as WEIGHT_TYPE_LIST, WRITTEN  # noqa: E402
from mixes import MIXES, dtype_type  # noqa: E402
from quantizers import BlockMatrix, QuantizedMatrix, same_type, stack_rows, stored_size, tensor_data, type_block  # noqa: E402
from weight_file import (MATRICES, MAX_STOP, QKV_PARTS, RANK_NONE, TOK_BYTE_FALLBACK, TOK_DUMMY_PREFIX,  # noqa: E402
                         TOK_MERGE_PAIRS, TOK_SENTENCEPIECE, TOK_WHOLE_PIECES, TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL,
                         TOKEN_SPECIAL, TOKEN_UNKNOWN, TokenizerData, Deferred, Written, base_name,
                         entry_names, write_file)

ARCHITECTURES = ("llama", "qwen2", "gpt2", "qwen3", "smollm3", "granite", "olmo2", "gemma2", "gemma3", "phi3")
# rotary positions by halves of each head ("NEOX" in llama.cpp: the converter keeps Hugging
# Face's layout), whose query and key rows are permuted here into adjacent pairs
HALVES = ("qwen2", "qwen3", "olmo2", "gemma2", "gemma3", "phi3")
WINDOWED = ("gemma2", "gemma3", "phi3")  # attention.sliding_window read, not refused

# tokenizer.ggml.pre names whose split run.c runs (llama.cpp's llama-vocab.cpp maps each name to a
# pre-tokenizer type; these are the types whose patterns tokenizer.c implements): name -> (our
# pre-tokenizer kind, whether a pre-token that is a whole token skips merging (llama.cpp's
# ignore_merges), whether BOS is added unless add_bos_token says otherwise).
PRE_TOKENIZERS = {
    **{name: ("gpt2", False, False) for name in ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                                                  "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "exaone4", "mpt",
                                                  "olmo", "jais", "trillion", "granite-docling")},
    **{name: ("cl100k", True, True) for name in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                                                 "midm-2.0", "lfm2", "jina-v5-nano")},
    "dbrx": ("cl100k", False, False), "smaug-bpe": ("cl100k", False, False),
    **{name: ("qwen2", False, False) for name in ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez",
                                                  "stablelm2", "hunyuan", "solar-open")},
    **{name: ("digits_gpt2", False, False) for name in ("smollm", "starcoder", "refact", "command-r", "codeshell",
                                                         "exaone", "minerva-7b", "mellum2")},
    "gpt-4o": ("o200k_ascii", False, False),  # Phi-4-mini's; llama.cpp's own approximation of o200k_base
}

# llama.cpp's token types (llama.h's enum llama_token_type)
GGUF_NORMAL, GGUF_UNKNOWN, GGUF_CONTROL, GGUF_USER_DEFINED, GGUF_UNUSED, GGUF_BYTE = 1, 2, 3, 4, 5, 6

# Tokens llama.cpp recognises by their text (llama-vocab.cpp, "auto-detect special tokens by
# text"): it treats them as control tokens whatever type the file gives them, and ends a
# generation at those of END_OF_GENERATION and at the fill-in-the-middle pad, repository and
# file-separator tokens (FIM_END: found by text when no tokenizer.ggml.fim_*_token_id names
# them). The texts of the models this reads; llama.cpp knows a few more.
END_OF_GENERATION = (b"<|eot_id|>", b"<|im_end|>", b"<|end|>", b"<end_of_turn>", b"<|endoftext|>", b"</s>",
                     b"<|eom_id|>", b"<EOT>", b"<|end_of_text|>")
FIM_END = {"tokenizer.ggml.fim_pad_token_id": (b"<|fim_pad|>", b"<fim-pad>", b"<fim_pad>"),
           "tokenizer.ggml.fim_rep_token_id": (b"<|fim_repo|>", b"<|repo_name|>", b"<fim-repo>", b"<reponame>"),
           "tokenizer.ggml.fim_sep_token_id": (b"<|file_sep|>",)}
FIM_OTHERS = {"tokenizer.ggml.fim_pre_token_id": (b"<|fim_prefix|>", b"<fim-prefix>", b"<fim_prefix>"),
              "tokenizer.ggml.fim_suf_token_id": (b"<|fim_suffix|>", b"<fim-suffix>", b"<fim_suffix>"),
              "tokenizer.ggml.fim_mid_token_id": (b"<|fim_middle|>", b"<fim-middle>", b"<fim_middle>")}

SP_SPACE = "\u2581"  # SentencePiece's escaped space
UNK_SURFACE = " \u2047 ".encode()  # what SentencePiece prints for its unknown piece, by default


class Metadata:
    """Typed access to a GGUF file's keys, each problem one line naming the key."""

    def __init__(self, g: GGUFFile):
        self.g, self.kv = g, g.metadata

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.g.path}: {what}")

    def __contains__(self, key: str) -> bool:
        return key in self.kv

    def found(self, key: str) -> str:
        """A key's value as a message shows it."""
        vtype, value = self.kv[key]
        if vtype == ARRAY:
            return f"an array of {len(value[1])} {VALUE_TYPES[value[0]][0]}"
        return f"{VALUE_TYPES[vtype][0]} {value[:60]!r}" if vtype == STRING else f"{VALUE_TYPES[vtype][0]} {value!r}"

    def absent(self, key: str, default):
        """A missing key's default; without one, the error naming the key."""
        if default is None:
            raise self.fail(f"key '{key}' is missing")
        return default

    def integer(self, key: str, default: int | None = None, low: int = 0, high: int = (1 << 31) - 1,
                per_layer: int = 0) -> int:
        """An integer key (any integer type) in [low, high]; per_layer: an array of that many
        equal values is accepted too (llama.cpp reads some keys per layer)."""
        if key not in self.kv:
            return self.absent(key, default)
        vtype, value = self.kv[key]
        if vtype == ARRAY and per_layer:
            etype, values = value
            if etype not in INTEGER_TYPES or len(values) != per_layer:
                raise self.fail(f"key '{key}' is {self.found(key)}, not an integer or {per_layer} of them")
            if len(set(values.tolist())) != 1:
                raise self.fail(f"key '{key}' differs between layers ({values.tolist()[:8]}): run.c gives every "
                                "layer the same shape")
            value = int(values[0])
        elif vtype not in INTEGER_TYPES:
            raise self.fail(f"key '{key}' is {self.found(key)}, expected an integer")
        if not low <= value <= high:
            raise self.fail(f"key '{key}' is {self.found(key)}, expected an integer from {low} to {high}")
        return int(value)

    def number(self, key: str, default: float | None = None) -> float:
        if key not in self.kv:
            return self.absent(key, default)
        vtype, value = self.kv[key]
        if vtype not in (FLOAT32, FLOAT64) or not np.isfinite(value):
            raise self.fail(f"key '{key}' is {self.found(key)}, expected a finite float")
        return float(value)

    def string(self, key: str, default: str | None = None) -> str:
        if key not in self.kv:
            return self.absent(key, default)
        vtype, value = self.kv[key]
        if vtype != STRING:
            raise self.fail(f"key '{key}' is {self.found(key)}, expected a string")
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"key '{key}' is not UTF-8") from None

    def flag(self, key: str, default: bool) -> bool:
        if key not in self.kv:
            return default
        vtype, value = self.kv[key]
        if vtype != BOOL:
            raise self.fail(f"key '{key}' is {self.found(key)}, expected a bool")
        return value

    def array(self, key: str, etypes: set[int], n: int | None = None, required: bool = True):
        """An array key's values, of one of etypes, n of them when n is given (or more: llama.cpp
        reads the first n)."""
        if key not in self.kv:
            if required:
                raise self.fail(f"key '{key}' is missing")
            return None
        vtype, value = self.kv[key]
        if vtype != ARRAY or value[0] not in etypes:
            raise self.fail(f"key '{key}' is {self.found(key)}, expected an array of "
                            f"{' or '.join(VALUE_TYPES[t][0] for t in sorted(etypes))}")
        values = value[1]
        if n is not None and len(values) < n:
            raise self.fail(f"key '{key}' has {len(values)} elements, fewer than the {n} tokens")
        return values if n is None else values[:n]


# ---- the architecture ---------------------------------------------------------------------------

def gguf_config(meta: Metadata) -> tuple[str, GPTConfig]:
    """(architecture, our configuration) from the {arch}.* keys; vocab_size and vocab_padded are
    the tokenizer's and the embedding's, filled in later. What run.c does not run is refused."""
    if "split.count" in meta and meta.integer("split.count", high=65535) > 1:
        raise meta.fail(f"one part of a split GGUF (split.count {meta.integer('split.count', high=65535)}): join the "
                        "parts first (llama.cpp's llama-gguf-split --merge)")
    arch = meta.string("general.architecture")
    if arch not in ARCHITECTURES:
        raise meta.fail(f"general.architecture is '{shown(arch)}': this reads {', '.join(ARCHITECTURES)}")

    def refuse(key: str, why: str) -> GGUFError:
        return meta.fail(f"key '{key}' {why}: run.c does not implement it")

    n_layer = meta.integer(f"{arch}.block_count", low=1, high=4096)
    n_embd = meta.integer(f"{arch}.embedding_length", low=1, high=1 << 20)
    n_ctx = meta.integer(f"{arch}.context_length", low=1, high=1 << 24)
    n_hidden = meta.integer(f"{arch}.feed_forward_length", low=1, high=1 << 22, per_layer=n_layer)
    n_head = meta.integer(f"{arch}.attention.head_count", low=1, high=4096, per_layer=n_layer)
    n_kv_head = meta.integer(f"{arch}.attention.head_count_kv", n_head, low=1, high=4096, per_layer=n_layer)
    key_length, value_length = f"{arch}.attention.key_length", f"{arch}.attention.value_length"
    head_dim = meta.integer(key_length, 0, low=2, high=1 << 16)  # its own, or embedding_length / head_count
    if value_length in meta and meta.integer(value_length, high=1 << 16) != (head_dim or n_embd // n_head):
        raise refuse(value_length, f"is {meta.integer(value_length, high=1 << 16)}, not the key length "
                                   f"{head_dim or n_embd // n_head} (values of another size than keys)")
    if (not head_dim and n_embd % n_head) or n_head % n_kv_head or head_dim % 2:
        raise meta.fail(f"{arch}.embedding_length {n_embd}, attention.head_count {n_head}, head_count_kv "
                        f"{n_kv_head} and key_length {head_dim} do not divide")
    head_size = head_dim or n_embd // n_head
    head_dim = head_dim if head_dim != n_embd // n_head or n_embd % n_head else 0
    for key in (f"{arch}.expert_count", f"{arch}.expert_used_count"):
        if key in meta and meta.integer(key, high=1 << 20, per_layer=n_layer):
            raise refuse(key, f"is {meta.integer(key, high=1 << 20, per_layer=n_layer)} (mixture of experts)")
    if f"{arch}.nextn_predict_layers" in meta and meta.integer(f"{arch}.nextn_predict_layers"):
        raise refuse(f"{arch}.nextn_predict_layers", "is set (layers predicting further tokens)")
    if not meta.flag(f"{arch}.attention.causal", True):
        raise refuse(f"{arch}.attention.causal", "is false (attention that sees later tokens)")
    window_key = f"{arch}.attention.sliding_window"
    window = meta.integer(window_key, high=(1 << 32) - 1, per_layer=n_layer) if window_key in meta else 0
    windowed = arch in WINDOWED  # Gemma's local layers; Phi-3's every layer (transformers' reading)
    if not windowed and 0 < window < n_ctx:
        raise refuse(window_key, f"is {window}, less than the context {n_ctx} (sliding-window attention)")

    if arch == "gpt2":
        return arch, GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_hidden=n_hidden, n_ctx=n_ctx,
                               ln_eps=meta.number("gpt2.attention.layer_norm_epsilon"), gelu="tanh", bias=BIAS_ALL,
                               pos="learned", norm="layer", ffn="gelu", n_kv_head=n_kv_head, head_dim=head_dim)

    rotary = f"{arch}.rope.dimension_count"
    rotated = meta.integer(rotary, head_size, low=2, high=1 << 20) if rotary in meta else head_size
    if rotated != head_size and (arch != "phi3" or rotated > head_size or rotated % 2):
        raise refuse(rotary, f"is {rotated}, not the head size {head_size} (rotary positions on part of a head)")
    scaling, factor = f"{arch}.rope.scaling.type", 1.0
    if scaling in meta and meta.string(scaling) not in ("none", "linear"):
        raise refuse(scaling, f"is '{shown(meta.string(scaling))}' (only Llama 3's scaling, by rope_freqs.weight, "
                              "is run)")
    for key in (f"{arch}.rope.scaling.factor", f"{arch}.rope.scale_linear"):
        if key in meta and meta.number(key) not in (0.0, 1.0):
            if arch != "gemma3":  # Gemma 3's global layers' positions are scaled linearly (its 4B and up)
                raise refuse(key, f"is {meta.number(key)} (positions scaled linearly)")
            factor = meta.number(key)
            if not factor > 0:
                raise meta.fail(f"key '{key}' is {factor}, not positive")
    attn_factor = f"{arch}.rope.scaling.attn_factor"
    rope_scale = meta.number(attn_factor) if attn_factor in meta else 1.0
    if rope_scale != 1.0 and arch != "phi3":
        raise refuse(attn_factor, f"is {rope_scale} (rotations scaled)")
    if not rope_scale > 0:
        raise meta.fail(f"key '{attn_factor}' is {rope_scale}, not positive")
    theta = meta.number(f"{arch}.rope.freq_base", 10000.0)
    if not theta > 0:
        raise meta.fail(f"key '{arch}.rope.freq_base' is {theta}, not positive")
    eps = meta.number(f"{arch}.attention.layer_norm_rms_epsilon")
    c = GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_hidden=n_hidden, n_ctx=n_ctx, ln_eps=eps, bias=0,
                  pos="rotary", norm="rms", ffn="swiglu", n_kv_head=n_kv_head, rope_theta=theta, head_dim=head_dim,
                  rotary_dims=rotated if rotated != head_size else 0, rope_scale=rope_scale)
    if factor != 1.0:  # the global layers' frequencies, divided by the factor (the local ones have their own base)
        c.rope_freqs = [theta ** (-i / rotated) / factor for i in range(0, rotated, 2)]
    gemma_block(meta, arch, c, window)
    if arch in ("qwen3", "gemma3"):
        c.qk_norm = "head"
    if arch == "olmo2":
        c.qk_norm, c.norm_before, c.norm_after = "whole", False, True
    if arch == "smollm3":  # llama.cpp's rule: no rotary positions in every fourth layer (the converter writes no key)
        c.layers = [{"rotary": (i + 1) % 4 != 0, "rope_theta": theta} for i in range(n_layer)]
    if arch == "phi3" and 0 < window < n_ctx:
        c.layers = [{"window": window}] * n_layer
    if arch == "phi3":  # LongRoPE's short frequencies serve up to this context (gguf_tensors reads them)
        key = "phi3.rope.scaling.original_context_length"
        c.rope_original = meta.integer(key, low=1, high=1 << 24) if key in meta else n_ctx
    if arch == "granite":
        c.embed_scale = meta.number("granite.embedding_scale", 1.0)
        c.attn_scale = meta.number("granite.attention.scale", 0.0)
        c.residual_scale = meta.number("granite.residual_scale", 1.0)
        c.logit_divisor = meta.number("granite.logit_scale")
        for key, value in (("embedding_scale", c.embed_scale), ("attention.scale", c.attn_scale or 1.0),
                           ("residual_scale", c.residual_scale), ("logit_scale", c.logit_divisor)):
            if not 0 < value < float("inf"):
                raise meta.fail(f"key 'granite.{key}' is {value}, expected a finite number above 0")
    return arch, c


def gemma_block(meta: Metadata, arch: str, c: GPTConfig, window: int) -> None:
    """Gemma 2's and 3's switches as llama.cpp reads them: norms before and after each sublayer
    (the file's weights are 1 + w already), GEGLU, the embedding times sqrt(n_embd), the query's
    scale (not in the file: llama.cpp derives it from the layer count), windows on all layers but
    every pattern-th (2 and 6 unless the file says) with their own rotary base, the caps."""
    if arch not in ("gemma2", "gemma3"):
        return
    n = c.n_layer
    c.ffn, c.gelu, c.norm_after = "geglu", "tanh", True
    c.embed_scale = float(np.sqrt(np.float32(c.n_embd)))
    big = n == 46 if arch == "gemma2" else n == 62  # the 27B models: query_pre_attn_scalar = n_embd / n_head
    c.attn_scale = float(np.float32((c.n_embd // c.n_head if big else c.head_size) ** -0.5))  # transformers' number
    pattern_key = f"{arch}.attention.sliding_window_pattern"
    pattern = meta.integer(pattern_key, 2 if arch == "gemma2" else 6, low=1, high=n + 1)
    local_theta = meta.number(f"{arch}.rope.freq_base_swa", c.rope_theta if arch == "gemma2" else 10000.0)
    if not local_theta > 0:
        raise meta.fail(f"key '{arch}.rope.freq_base_swa' is {local_theta}, not positive")
    if local_theta == c.rope_theta and c.rope_freqs is not None:
        raise meta.fail(f"key '{arch}.rope.freq_base_swa' is the global layers' base, whose scaling it must not share")
    if arch == "gemma2":
        c.attn_softcap = meta.number("gemma2.attn_logit_softcapping", 50.0)
        c.logit_softcap = meta.number("gemma2.final_logit_softcapping", 30.0)
    else:
        c.logit_softcap = meta.number("gemma3.final_logit_softcapping", 0.0)
    for key, value in (("attn_logit_softcapping", c.attn_softcap), ("final_logit_softcapping", c.logit_softcap)):
        if not 0 <= value < float("inf"):
            raise meta.fail(f"key '{arch}.{key}' is {value}, expected a finite number, 0 or above")
    if window > 0 and window >= c.n_ctx:
        window = 0
    if (arch == "gemma2" and window == 0 and f"{arch}.attention.sliding_window" not in meta):
        window = 4096 if 4096 < c.n_ctx else 0  # llama.cpp's default
    local = [window > 0 and i % pattern < pattern - 1 for i in range(n)]
    c.layers = [{"window": window if is_local else 0, "rope_theta": local_theta if is_local else c.rope_theta}
                for is_local in local]


# ---- the tensors --------------------------------------------------------------------------------

Matrix = "np.ndarray | QuantizedMatrix | BlockMatrix"  # as read: float32 values, q8_0 / q4_0 numbers, or blocks
# GGUF's types copied block for block into ours of the same layout
BLOCK_COPIES = {t.gguf: t.name for t in WEIGHT_TYPE_LIST if t.gguf is not None}
CONVERTED = ("F32", "Q8_0", "Q4_0", *BLOCK_COPIES)


class Tensors:
    """The file's tensors by name, each taken once; what is left at the end has no place in our
    file and is refused."""

    def __init__(self, g: GGUFFile):
        self.g, self.left = g, dict(g.tensors)

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.g.path}: {what}")

    def has(self, name: str) -> bool:
        return name in self.left

    def info(self, name: str, shape: tuple[int, ...]) -> TensorInfo:
        if name not in self.left:
            raise self.fail(f"tensor '{name}' is missing")
        info = self.left.pop(name)
        if info.shape != shape:
            raise self.fail(f"tensor '{name}' has shape {list(info.shape)} (rows first), expected {list(shape)}")
        return info

    def vector(self, name: str, n: int) -> np.ndarray:
        """A 1-D tensor (norm, bias, rope factors): F32, F16 or BF16, as float32."""
        info = self.info(name, (n,))
        if info.type_name not in ("F32", "F16", "BF16"):
            raise self.fail(f"tensor '{name}' is {info.type_name}: a norm, bias or rope factor is read in F32, F16 "
                            "or BF16")
        return np.array(float_values(self.g, info), np.float32)

    def matrix(self, name: str, rows: int, cols: int) -> Matrix:
        info = self.info(name, (rows, cols))
        if info.type_name in BLOCK_COPIES:
            wtype, data = BLOCK_COPIES[info.type_name], self.g.tensor_bytes(info)
            bad = block_formats.first_bad_block(data, wtype)
            if bad is not None:  # copied, run would refuse it: said here, where the stranger's file is
                raise self.fail(f"tensor '{shown(name)}' ({info.type_name}) block {bad} has a scale that is infinite "
                                "or NaN")
            return BlockMatrix(wtype, np.frombuffer(data, np.uint8).reshape(rows, -1), cols)
        if info.type_name == "Q8_0":
            return QuantizedMatrix("q8_0", *q8_0_blocks(self.g, info))
        if info.type_name == "Q4_0":
            return QuantizedMatrix("q4_0", *q4_0_blocks(self.g, info))
        return float_values(self.g, info)  # F32: a view of the mapped file, read when converted


def adjacent_pair_order(rows: int, n_heads: int, rotated: int = 0) -> np.ndarray:
    """Row order turning query or key rows in Hugging Face's halves (dimension i of a head pairs
    with i + r/2, "NEOX" in llama.cpp; r the rotated dimensions, the first of each head: all
    unless given) into adjacent pairs (2i, 2i+1): new row h*hs + 2i + j is old row h*hs + j*r/2
    + i; the rows past r stay."""
    hs = rows // n_heads
    r = rotated or hs
    heads = np.arange(rows).reshape(n_heads, hs)
    paired = heads[:, :r].reshape(n_heads, 2, r // 2).transpose(0, 2, 1).reshape(n_heads, r)
    return np.concatenate([paired, heads[:, r:]], axis=1).reshape(-1)


def in_rows(m: Matrix | np.ndarray, order: np.ndarray) -> Matrix:
    return m.rows(order) if isinstance(m, (QuantizedMatrix, BlockMatrix)) else m[order]


def refuse_unconverted(g: GGUFFile) -> None:
    """The tensors of types we do not convert, in one line: how many of each type, then each one
    with its type (the first 12)."""
    others = [t for t in g.tensors.values() if t.type_name not in CONVERTED]
    if others:
        counts: dict[str, int] = {}
        for t in others:
            counts[t.type_name] = counts.get(t.type_name, 0) + 1
        by_type = ", ".join(f"{n} of {name}" for name, n in sorted(counts.items(), key=lambda x: -x[1]))
        named = [f"{shown(t.name)} ({t.type_name})" for t in others]
        listed = ", ".join(named[:12]) + (f" and {len(named) - 12} more" if len(named) > 12 else "")
        raise GGUFError(f"{g.path}: {len(others)} tensors of types not converted ({by_type}; {', '.join(CONVERTED)} "
                        f"are): {listed}")


def gguf_tensors(g: GGUFFile, arch: str, c: GPTConfig) -> tuple[dict[str, Matrix | np.ndarray], dict[int, list]]:
    """Our tensors (entry_names' names) from the file's, in our layouts, but for the query, key and
    value projections: each layer's three, in rows of our layout (place_qkv fuses them or not);
    sets c's biases, tied head, rope_freqs and vocab_padded from what the file holds."""
    t = Tensors(g)
    C, H, hs = c.n_embd, c.n_hidden, c.head_size
    q_rows, kv_rows = c.n_head * hs, c.n_kv_head * hs
    embed, positions = model_name("gguf", "embed"), model_name("gguf", "positions")
    embd = g.tensors.get(embed)
    if embd is None:
        raise GGUFError(f"{g.path}: tensor '{embed}' is missing")
    c.vocab_padded = embd.shape[0]
    out: dict[str, Matrix | np.ndarray] = {model_name("file", "embed"): t.matrix(embed, c.vocab_padded, C)}
    if arch == "gpt2":
        info = t.info(positions, (c.n_ctx, C))
        if info.type_name not in ("F32", "F16", "BF16"):
            raise t.fail(f"tensor '{positions}' is {info.type_name}, expected F32, F16 or BF16")
        out[model_name("file", "positions")] = np.array(float_values(g, info), np.float32)
    r = c.rotated

    def frequencies(name: str) -> list:
        """llama.cpp divides pair i's angle, position * theta^(-2i/r), by factor i of the tensor."""
        factors = t.vector(name, r // 2).astype(np.float64)
        if not np.all(np.isfinite(factors) & (factors > 0)):
            raise t.fail(f"tensor '{name}' holds a factor that is not positive and finite")
        base = float(np.float32(c.rope_theta)) ** (-np.arange(0, r, 2, dtype=np.float64) / r)
        return (base / factors).astype(np.float32).tolist()

    if arch in ("llama", "granite", "smollm3") and t.has("rope_freqs.weight"):
        c.rope_freqs = frequencies("rope_freqs.weight")
    if arch == "phi3" and (t.has("rope_factors_short.weight") or t.has("rope_factors_long.weight")):
        # LongRoPE: the short factors for a context up to the original one, the long past it
        c.rope_freqs, c.rope_freqs_long = frequencies("rope_factors_short.weight"), frequencies("rope_factors_long.weight")
    if c.rope_freqs is not None:
        out["rope_freqs"] = np.asarray(c.rope_freqs, np.float32)
    if c.rope_freqs_long is not None:
        out["rope_freqs_long"] = np.asarray(c.rope_freqs_long, np.float32)

    # biases llama.cpp's llama and qwen2 may have (qwen2 only on q, k, v); gpt2 has every one
    present = set(g.tensors)
    layer_has = lambda parts: any(layer_name("gguf", i, p, "bias") in present  # noqa: E731
                                  for i in range(c.n_layer) for p in parts)
    if arch == "gpt2":
        c.bias = BIAS_ALL
    else:
        c.bias = (BIAS_QKV if layer_has(("q", "k", "v", "qkv")) else 0)
        if arch in ("llama", "granite"):
            c.bias |= BIAS_ATTN_OUT if layer_has(("attn_out",)) else 0
            c.bias |= BIAS_FFN if layer_has(("gate", "up", "down")) else 0

    def bias(name: str, n: int) -> np.ndarray:  # absent in this layer: zero, which is what it adds
        return t.vector(name, n) if t.has(name) else np.zeros(n, np.float32)

    qkv_parts = {}
    for i in range(c.n_layer):
        b = lambda part, kind="weight": layer_name("gguf", i, part, kind)  # noqa: E731
        o = lambda part, kind="weight": layer_name("file", i, part, kind)  # noqa: E731
        if c.norm_before:
            out[o("attn_norm")] = t.vector(b("attn_norm"), C)
        if arch == "gpt2":
            out[o("attn_norm", "bias")] = t.vector(b("attn_norm", "bias"), C)
        if t.has(b("qkv")):
            qkv = t.matrix(b("qkv"), q_rows + 2 * kv_rows, C)
            parts = [in_rows(qkv, np.arange(q_rows)), in_rows(qkv, np.arange(q_rows, q_rows + kv_rows)),
                     in_rows(qkv, np.arange(q_rows + kv_rows, q_rows + 2 * kv_rows))]
            qkv_bias = bias(b("qkv", "bias"), q_rows + 2 * kv_rows) if c.has_bias(BIAS_QKV) else None
            bias_parts = None if qkv_bias is None else [qkv_bias[:q_rows], qkv_bias[q_rows:q_rows + kv_rows],
                                                        qkv_bias[q_rows + kv_rows:]]
        else:
            parts = [t.matrix(b("q"), q_rows, C), t.matrix(b("k"), kv_rows, C), t.matrix(b("v"), kv_rows, C)]
            bias_parts = [bias(b("q", "bias"), q_rows), bias(b("k", "bias"), kv_rows),
                          bias(b("v", "bias"), kv_rows)] if c.has_bias(BIAS_QKV) else None
        # llama.cpp rotates these architectures' halves ("NEOX"); ours rotates adjacent pairs
        orders = [adjacent_pair_order(q_rows, c.n_head, r), adjacent_pair_order(kv_rows, c.n_kv_head, r)] \
            if arch in HALVES else [np.arange(q_rows), np.arange(kv_rows)]
        if arch in HALVES:
            parts[:2] = [in_rows(p, order) for p, order in zip(parts[:2], orders)]
            if bias_parts is not None:
                bias_parts[:2] = [p[order] for p, order in zip(bias_parts[:2], orders)]
        qkv_parts[i] = parts
        if bias_parts is not None:
            out[o("qkv", "bias")] = np.concatenate(bias_parts)
        if c.qk_norm == "head":  # one head's weights, in its rows' new order
            out[o("q_norm")] = t.vector(b("q_norm"), hs)[orders[0][:hs]]
            out[o("k_norm")] = t.vector(b("k_norm"), hs)[orders[1][:hs]]
        elif c.qk_norm == "whole":
            out[o("q_norm")] = t.vector(b("q_norm"), q_rows)[orders[0]]
            out[o("k_norm")] = t.vector(b("k_norm"), kv_rows)[orders[1]]
        out[o("attn_out")] = t.matrix(b("attn_out"), C, q_rows)
        if c.has_bias(BIAS_ATTN_OUT):
            out[o("attn_out", "bias")] = bias(b("attn_out", "bias"), C)
        if c.norm_after:
            out[o("attn_post_norm")] = t.vector(b("attn_post_norm"), C)
        if c.norm_before:
            out[o("ffn_norm")] = t.vector(b("ffn_norm"), C)
        if arch == "gpt2":
            out[o("ffn_norm", "bias")] = t.vector(b("ffn_norm", "bias"), C)
        elif arch == "phi3" and not t.has(b("gate")):  # gate and up in one matrix, the gate's rows first
            gate_up = t.matrix(b("gate_up"), 2 * H, C)
            out[o("gate")], out[o("up")] = in_rows(gate_up, np.arange(H)), in_rows(gate_up, np.arange(H, 2 * H))
        else:
            out[o("gate")] = t.matrix(b("gate"), H, C)
            if c.has_bias(BIAS_FFN):
                out[o("gate", "bias")] = bias(b("gate", "bias"), H)
        if o("up") not in out:
            out[o("up")] = t.matrix(b("up"), H, C)
        if c.has_bias(BIAS_FFN):
            out[o("up", "bias")] = bias(b("up", "bias"), H)
        out[o("down")] = t.matrix(b("down"), C, H)
        if c.has_bias(BIAS_FFN):
            out[o("down", "bias")] = bias(b("down", "bias"), C)
        if c.norm_after:
            out[o("ffn_post_norm")] = t.vector(b("ffn_post_norm"), C)
    out[model_name("file", "norm")] = t.vector(model_name("gguf", "norm"), C)
    if arch == "gpt2":
        out[model_name("file", "norm", "bias")] = t.vector(model_name("gguf", "norm", "bias"), C)
    head = model_name("gguf", "head")
    if arch == "gemma2" and t.has(head):  # llama.cpp's gemma2 always takes token_embd
        raise t.fail(f"tensor '{head}': Gemma 2's output is its embedding, and llama.cpp reads no other")
    if arch == "olmo2" and not t.has(head):
        raise t.fail(f"tensor '{head}' is missing (OLMo 2's output is not its embedding)")
    c.tied_head = not t.has(head)  # llama.cpp's rule: no output.weight, token_embd serves
    if not c.tied_head:
        out[model_name("file", "head")] = t.matrix(model_name("gguf", "head"), c.vocab_padded, C)
    if t.left:
        names = [shown(name) for name in sorted(t.left)]
        raise t.fail(f"tensors run.c has no place for: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}")
    return out, qkv_parts


def place_qkv(tensors: dict[str, Matrix | np.ndarray], qkv: dict[int, list], apart: bool) -> None:
    """Each layer's query, key and value projections into tensors: as three entries (model.h's
    qkv_apart), or fused into one (their rows one after another, in one type)."""
    for i, parts in qkv.items():
        if apart:
            tensors.update({f"h.{i}.{name}": part for name, part in zip(QKV_PARTS, parts)})
        else:
            tensors[f"h.{i}.attn.c_attn.weight"] = stack_rows(parts)


# ---- the tokenizer ------------------------------------------------------------------------------

def token_id(meta: Metadata, key: str, n_tokens: int, default: int = -1) -> int:
    """A special token's id, or -1: the key's, else llama.cpp's default for the vocabulary's kind;
    an id outside the vocabulary counts as absent (llama.cpp warns and keeps its default)."""
    default = default if 0 <= default < n_tokens else -1
    if key not in meta:
        return default
    value = meta.integer(key, high=(1 << 32) - 1)
    return value if value < n_tokens else default


def sentencepiece_tokens(meta: Metadata, tokens: list[bytes], types: np.ndarray, control: set[int]) -> TokenizerData:
    """tokenizer.ggml.model "llama": SentencePiece's pieces, scores and types as llama.cpp
    encodes with them (no normalization, a space before the text when add_space_prefix, merges by
    score, unknown text as byte pieces), as our TOK_SENTENCEPIECE section (tokenizer_files.py's
    sentencepiece_vocab builds the same from a tokenizer.model)."""
    n = len(tokens)
    scores = meta.array("tokenizer.ggml.scores", {FLOAT32}, n, required=False)
    scores = np.zeros(n, np.float32) if scores is None else np.asarray(scores, np.float32)
    out, kinds, normal_scores = [], [], []
    byte_pieces = set()
    for i, (piece, kind) in enumerate(zip(tokens, types)):
        try:
            text = piece.decode("utf-8")
        except UnicodeDecodeError:
            raise meta.fail(f"token {i} {piece[:40]!r} is not UTF-8") from None
        if kind == GGUF_BYTE:
            if not (len(text) == 6 and text.startswith("<0x") and text.endswith(">")):
                raise meta.fail(f"byte token {i} is {text!r}, not <0xNN>")
            try:
                value = int(text[3:5], 16)
            except ValueError:
                raise meta.fail(f"byte token {i} is {text!r}, not <0xNN>") from None
            out.append(bytes([value]))
            kinds.append(TOKEN_BYTE)
            byte_pieces.add(value)
        elif kind == GGUF_UNKNOWN:
            out.append(UNK_SURFACE)
            kinds.append(TOKEN_UNKNOWN)
        elif kind in (GGUF_CONTROL, GGUF_UNUSED) or i in control:
            out.append(b"" if kind == GGUF_UNUSED and i not in control else piece)
            kinds.append(TOKEN_CONTROL)
        elif kind == GGUF_USER_DEFINED:
            out.append(piece)
            kinds.append(TOKEN_SPECIAL)
        else:  # NORMAL, and UNDEFINED (0), which llama.cpp merges into as it does normal pieces
            if " " in text:
                raise meta.fail(f"token {i} {text!r} holds a space, which SentencePiece writes as U+2581")
            out.append(text.replace(SP_SPACE, " ").encode())
            kinds.append(TOKEN_NORMAL)
            normal_scores.append(float(scores[i]))
    if len(byte_pieces) != 256:
        raise meta.fail(f"the SentencePiece vocabulary has byte tokens for {len(byte_pieces)} of the 256 bytes: "
                        "llama.cpp spells unknown text with them, and run.c needs them all")
    # ranks from scores, as sentencepiece_vocab: a higher score merges first, equal scores share a
    # rank (llama.cpp, like SentencePiece, merges the leftmost of equal pairs first)
    order = {s: r for r, s in enumerate(sorted(set(normal_scores), reverse=True))}
    it = iter(normal_scores)
    ranks = [order[next(it)] if k == TOKEN_NORMAL else RANK_NONE for k in kinds]
    flags = TOK_SENTENCEPIECE | TOK_BYTE_FALLBACK
    if meta.flag("tokenizer.ggml.add_space_prefix", True):
        flags |= TOK_DUMMY_PREFIX
    bos = token_id(meta, "tokenizer.ggml.bos_token_id", n, 1)
    eos = token_id(meta, "tokenizer.ggml.eos_token_id", n, 2)
    unk = token_id(meta, "tokenizer.ggml.unknown_token_id", n, 0)
    add_bos = meta.flag("tokenizer.ggml.add_bos_token", True)
    return TokenizerData("whole", out, ranks, eos, flags, bos if add_bos else -1,
                         unk if unk >= 0 and kinds[unk] == TOKEN_UNKNOWN else -1, kinds, [], [])


@lru_cache(maxsize=None)
def byte_level_table() -> dict[int, int]:
    """str.translate's table from GPT-2's byte-level alphabet to the bytes it stands for (as
    code points below 256, which encode("latin-1") turns into those bytes); a character below
    the alphabet's last that is not in it becomes U+FFFF, which that encoding refuses, as it
    refuses every character past the alphabet."""
    byte_of = gpt2_byte_decoder()
    table = {code: 0xFFFF for code in range(max(map(ord, byte_of)) + 1)}
    table.update({ord(ch): b for ch, b in byte_of.items()})
    return table


def byte_level_tokens(meta: Metadata, tokens: list[bytes], types: np.ndarray, control: set[int]) -> TokenizerData:
    """tokenizer.ggml.model "gpt2": byte-level BPE with its merges, the pre-tokenizer named by
    tokenizer.ggml.pre, as our TOK_MERGE_PAIRS section (tokenizer_files.py's tokenizer_json_vocab
    builds the same from a tokenizer.json)."""
    n = len(tokens)
    pre = meta.string("tokenizer.ggml.pre", "")
    if pre not in PRE_TOKENIZERS:
        said = f"is '{shown(pre)}'" if pre else "is missing (llama.cpp then splits as its 'default')"
        raise meta.fail(f"tokenizer.ggml.pre {said}: run.c implements llama.cpp's splits gpt-2, llama-bpe, qwen2, "
                        "smollm and the names it gives the same ones (docs/export.md)")
    kind, ignore_merges, add_bos_default = PRE_TOKENIZERS[pre]
    to_bytes = byte_level_table()
    out, kinds = [], []
    ids: dict[str, int] = {}
    for i, (token, ttype) in enumerate(zip(tokens, types.tolist())):
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise meta.fail(f"token {i} {token[:40]!r} is not UTF-8") from None
        if ttype in (GGUF_CONTROL, GGUF_UNUSED) or i in control:
            # llama.cpp prints a control token as nothing, and matches its text only when asked to
            # parse specials; an unused one ([PAD]) never
            out.append(b"" if ttype == GGUF_UNUSED and i not in control else token)
            kinds.append(TOKEN_CONTROL)
        elif ttype == GGUF_USER_DEFINED:
            out.append(token)
            kinds.append(TOKEN_SPECIAL)
        else:
            try:
                if not text:
                    raise UnicodeEncodeError("latin-1", text, 0, 0, "empty")
                out.append(text.translate(to_bytes).encode("latin-1"))
            except UnicodeEncodeError:
                raise meta.fail(f"token {i} {text[:40]!r} is not in the byte-level alphabet (not byte-level BPE)") from None
            kinds.append(TOKEN_NORMAL)
            ids[text] = i
    merges = []
    seen = set()
    for line in meta.array("tokenizer.ggml.merges", {STRING}):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise meta.fail(f"merge {line[:40]!r} is not UTF-8") from None
        cut = text.find(" ", 1)  # llama.cpp splits at the first space after the first character
        left, right = (text[:cut], text[cut + 1:]) if cut > 0 else (None, None)
        if left not in ids or right not in ids or left + right not in ids:
            raise meta.fail(f"merge {text!r} is not of two tokens whose concatenation is a token")
        if (left, right) in seen:
            raise meta.fail(f"merge {text!r} is listed twice")
        seen.add((left, right))
        merges.append((ids[left], ids[right], ids[left + right]))
    if len({out[i] for i in ids.values() if len(out[i]) == 1}) != 256:
        raise meta.fail("the vocabulary has no token for some byte (not byte-level BPE)")
    flags = TOK_MERGE_PAIRS | (TOK_WHOLE_PIECES if ignore_merges else 0)
    ranks = [i if k == TOKEN_NORMAL else RANK_NONE for i, k in enumerate(kinds)]
    # llama.cpp's default for both, when no key names them, is 11 (GPT-NeoX's <|endoftext|>)
    bos = token_id(meta, "tokenizer.ggml.bos_token_id", n, 11)
    eos = token_id(meta, "tokenizer.ggml.eos_token_id", n, 11)
    add_bos = meta.flag("tokenizer.ggml.add_bos_token", add_bos_default)
    return TokenizerData(kind, out, ranks, eos, flags, bos if add_bos else -1, -1, kinds, merges, [])


def recognised_by_text(meta: Metadata, tokens: list[bytes]) -> tuple[set[int], list[int]]:
    """(the ids llama.cpp makes control tokens by their text, the ids among them and the keyed
    fill-in-the-middle ones it ends a generation at)."""
    n = len(tokens)
    wanted = set(END_OF_GENERATION).union(*FIM_END.values(), *FIM_OTHERS.values())
    ids_of: dict[bytes, list[int]] = {}  # each text looked for -> the ids that spell it, in order
    for i, t in enumerate(tokens):
        if t in wanted:
            ids_of.setdefault(t, []).append(i)
    control, end = set(), []
    for i in sorted(i for t in END_OF_GENERATION for i in ids_of.get(t, [])):
        control.add(i)
        end.append(i)
    for groups, ends in ((FIM_END, True), (FIM_OTHERS, False)):
        for key, texts in groups.items():
            keyed = token_id(meta, key, n)
            found = [keyed] if keyed >= 0 else sorted(i for t in texts for i in ids_of.get(t, []))
            if keyed < 0:
                control.update(found)
            if ends:
                end += found
    return control, end


def gguf_tokenizer(meta: Metadata) -> TokenizerData:
    model = meta.string("tokenizer.ggml.model")
    tokens = list(meta.array("tokenizer.ggml.tokens", {STRING}))
    n = len(tokens)
    if not n or n >= 1 << 31:
        raise meta.fail(f"tokenizer.ggml.tokens has {n} tokens")
    types = meta.array("tokenizer.ggml.token_type", INTEGER_TYPES, n, required=False)
    types = np.full(n, GGUF_NORMAL) if types is None else np.asarray(types)
    control, ends = recognised_by_text(meta, tokens)
    if model == "llama":
        tok = sentencepiece_tokens(meta, tokens, types, control)
    elif model == "gpt2":
        tok = byte_level_tokens(meta, tokens, types, control)
    else:
        raise meta.fail(f"tokenizer.ggml.model is '{shown(model)}': this reads 'llama' (SentencePiece) and 'gpt2' "
                        "(byte-level BPE)")
    normal = {}
    for i, (t, k) in enumerate(zip(tok.tokens, tok.kinds)):
        if k == TOKEN_NORMAL:
            if t in normal:
                raise meta.fail(f"tokens {normal[t]} and {i} are both {t[:40]!r}")
            normal[t] = i
    # the stop set: end of sequence, of turn, of message, and what llama.cpp recognises by text
    stop = []
    for i in [tok.eot_id, token_id(meta, "tokenizer.ggml.eot_token_id", n),
              token_id(meta, "tokenizer.ggml.eom_token_id", n), *sorted(ends)]:
        if i >= 0 and i not in stop:
            stop.append(i)
    if len(stop) > MAX_STOP:
        raise meta.fail(f"{len(stop)} end-of-generation tokens, more than the {MAX_STOP} a weight file holds")
    tok.stop_ids = stop
    return tok


# ---- the whole file ---------------------------------------------------------------------------

@dataclass
class Imported:
    arch: str
    config: GPTConfig
    tokenizer: TokenizerData
    tensors: dict[str, Matrix | np.ndarray]  # entry name -> float32 values, q8_0 / q4_0 numbers or blocks
    metadata: dict[str, str]
    qkv: dict[int, list]  # each layer's query, key and value projections, until place_qkv()
    specials: dict[str, str] = field(default_factory=dict)  # the special tokens a chat template sees
    qkv_apart: bool = False  # placed as three tensors (model.h)
    source: GGUFFile | None = None  # the file the tensors are views of

    def release(self, tensor: Matrix | np.ndarray) -> None:
        """A converted tensor's pages of the mapped GGUF given back."""
        if self.source is not None:
            for part in (tensor.raw,) if isinstance(tensor, BlockMatrix) else \
                    (tensor.quants, tensor.scales) if isinstance(tensor, QuantizedMatrix) else (tensor,):
                self.source.release(np.asarray(part))

    def place(self, apart: bool | None = None) -> "Imported":
        """The query, key and value projections placed: apart (None: where some layer's three
        have different types, which a fusion would widen) or fused."""
        if apart is None:
            apart = not all(same_type(parts) for parts in self.qkv.values())
        place_qkv(self.tensors, self.qkv, apart)
        self.qkv_apart = apart
        return self


def read_gguf_model(path: str | Path) -> Imported:
    """A GGUF file as our configuration, tokenizer, tensors (named as our file's entries) and
    metadata; nothing converted that changes a number."""
    g = read_gguf(path)
    meta = Metadata(g)
    arch, c = gguf_config(meta)
    refuse_unconverted(g)
    tok = gguf_tokenizer(meta)
    c.vocab_size = len(tok.tokens)
    embd = g.tensors.get("token_embd.weight")
    if embd is not None and embd.shape[0] != c.vocab_size:
        raise GGUFError(f"{g.path}: token_embd.weight has {embd.shape[0]} rows for {c.vocab_size} tokens (llama.cpp "
                        "requires one per token)")
    tensors, qkv = gguf_tensors(g, arch, c)
    metadata = {}
    if "general.name" in meta:
        metadata["general.name"] = meta.string("general.name")
    if "tokenizer.chat_template" in meta:
        metadata["chat.template"] = meta.string("tokenizer.chat_template")
    specials = {}  # as tokenizer_config.json would name them; only the ids the file names
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"),
                      ("pad_token", "padding_token_id")):
        i = token_id(meta, "tokenizer.ggml." + key, len(tok.tokens))
        if i >= 0 and tok.tokens[i]:
            specials[name] = tok.tokens[i].decode(errors="replace")
    return Imported(arch, c, tok, tensors, metadata, qkv, specials, source=g)


def choose_type(name: str, tensor: Matrix | np.ndarray, dtype: str | None, tensor_types: dict[str, str],
                c: GPTConfig) -> str:
    """An entry's weight type: f32 for what is not a matrix; for a matrix the first matching
    --tensor-type pattern's, else dtype's (a mix's choice for it), else the type it has. A
    quantized matrix may only widen to a type that holds its numbers exactly (q4_0 and q5_0 ->
    q8_0; anything -> f32); a float one (F32, F16, BF16) may become any (q8_0_ggml: q8_0 with
    ggml's numbers, a mix's)."""
    has = tensor.wtype if isinstance(tensor, (QuantizedMatrix, BlockMatrix)) else "f32"
    if base_name(name) not in MATRICES:
        return "f32"
    wanted = next((t for pattern, t in tensor_types.items() if fnmatch.fnmatchcase(name, pattern)), None)
    if wanted is None and dtype is not None:
        wanted = dtype_type(dtype, name, base_name(name), tensor.shape[-1], c.n_layer, c.tied_head)
    if wanted is not None and wanted.removesuffix("_ggml") not in WRITTEN:
        raise GGUFError(f"unknown weight type {wanted!r} for {name}: choose from {', '.join([*WRITTEN, *MIXES])}")
    wanted = wanted or has
    floating = has in ("f32", "f16", "bf16")
    if not floating and wanted not in (has, "f32") and not (has in ("q4_0", "q5_0") and wanted == "q8_0"):
        raise GGUFError(f"tensor {name} is {has} in the GGUF: {wanted} would quantize llama.cpp's numbers again "
                        f"(asked by --dtype or --tensor-type; {has} keeps them, f32 too)")
    shape = tensor.shape
    if shape[-1] % type_block(wanted):
        raise GGUFError(f"tensor {name}'s rows of {shape[-1]} values are not a multiple of {wanted}'s "
                        f"{type_block(wanted)}")
    return wanted


def source_bytes(tensor: Matrix | np.ndarray) -> int:
    """A tensor's bytes as the GGUF holds it (what the progress line counts)."""
    if isinstance(tensor, BlockMatrix):
        return tensor.raw.nbytes
    if isinstance(tensor, QuantizedMatrix):
        return tensor.quants.nbytes + tensor.scales.nbytes // 2
    return tensor.nbytes


def entry_bytes(tensor: Matrix | np.ndarray, wtype: str) -> bytes:
    if isinstance(tensor, (QuantizedMatrix, BlockMatrix)):
        if wtype == tensor.wtype:
            return tensor.data()
        if wtype == "f32" or tensor.wtype in ("f16", "bf16"):  # exact, or quantized from exact values
            return tensor_data(tensor.dequantized(), wtype)
        return tensor.widened().data()
    return tensor_data(tensor, wtype)


def export_gguf(path: str | Path, out: Path, dtype: str | None = None, tensor_types: dict[str, str] | None = None,
                metadata: dict[str, str] | None = None, quiet: bool = False) -> tuple[Imported, Written]:
    """Our weight file of a GGUF file; returns what was read and what was written."""
    m = read_gguf_model(path)
    return m, write_imported(m, out, dtype, tensor_types, metadata, quiet)


def write_imported(m: Imported, out: Path, dtype: str | None = None, tensor_types: dict[str, str] | None = None,
                   metadata: dict[str, str] | None = None, quiet: bool = False) -> Written:
    """Our weight file of what read_gguf_model() read; returns what was written. quiet: no
    progress line."""
    # llama.cpp's mixes keep a llama's value projection apart (it gets more bits); gpt2's is fused
    m.place(True if dtype in MIXES and m.arch != "gpt2" else None)
    names = entry_names(m.config, m.qkv_apart)
    progress = Progress(len(names), sum(source_bytes(m.tensors[name]) for name in names), quiet)
    table = []
    for i, name in enumerate(names):  # every type chosen (and refused) before anything is written
        tensor = m.tensors[name]
        wtype = choose_type(name, tensor, dtype, tensor_types or {}, m.config)

        def done(i=i, name=name, tensor=tensor) -> None:
            progress.step(i, name, source_bytes(tensor))
            m.release(tensor)
        table.append((name, wtype, Deferred(stored_size(wtype, tensor.shape), lambda t=tensor, w=wtype: entry_bytes(t, w),
                                            done)))
    keys = {**(metadata or {}), **m.metadata}
    if "chat.template" in keys:  # rendered as transformers would, with the file's special tokens
        keys.update(tokenizer_chat_metadata(keys["chat.template"], m.specials, m.tokenizer))
    try:
        return write_file(out, m.config, m.tokenizer, table, keys, m.qkv_apart)
    finally:
        progress.finish()


def load_gguf(path: str | Path) -> tuple:
    """The reference model (export/model.py's GPT) of a GGUF file, quantized matrices dequantized
    (exactly), and its tokenizer: what compare.py checks an export of it against."""
    from model import GPT
    weights, tok = read_gguf_weights(path)
    return GPT.of(weights), tok


def read_gguf_weights(path: str | Path) -> tuple[Weights, TokenizerData]:
    """A GGUF file's configuration and weights, quantized matrices dequantized (exactly), and its
    tokenizer."""
    m = read_gguf_model(path).place(False)
    dense = {name: (t.dequantized() if isinstance(t, (QuantizedMatrix, BlockMatrix)) else t) for name, t in m.tensors.items()}
    sd = {"transformer.wte.weight": dense["wte"], "transformer.ln_f.weight": dense["ln_f.weight"]}
    if "wpe" in dense:
        sd["transformer.wpe.weight"] = dense["wpe"]
    if "ln_f.bias" in dense:
        sd["transformer.ln_f.bias"] = dense["ln_f.bias"]
    for name, value in dense.items():
        if name.startswith("h."):
            sd["transformer." + name] = value
    sd["lm_head.weight"] = dense.get("lm_head.weight", dense["wte"])
    return weights_of(m.config, sd, str(path)), m.tokenizer
