"""The weight file of model.h, in Python: its constants, header, tokenizer section, tensor list
and layer table, for writing (export.py, export_tokenizer.py) and reading back (compare.py, the
tests); the weight types' numbers are quantizers.py's, and a mix's choice of types mixes.py's. It mirrors model.h field for field, in the same order; load.h is the C side that checks
and reads what this writes.

usage: weight_file.py FILE    prints FILE's header fields and tensor table
"""
from __future__ import annotations

import argparse
import struct
import sys
import zlib
from dataclasses import dataclass, field
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from config import (BIAS_ALL, BIAS_ATTN_OUT, BIAS_FFN, BIAS_NORM, BIAS_QKV, GPTConfig, Weights,  # noqa: E402,F401
                    reference_shapes, weights_of)
import block_formats  # noqa: E402
from mixes import MIXES, dtype_type  # noqa: E402
from progress import Progress  # noqa: E402
from quantizers import stored_size, tensor_data, type_block, unpack_q4  # noqa: E402
from weight_types import QUANT_GROUP, TYPES, WRITTEN  # noqa: E402

if TYPE_CHECKING:  # the PyTorch reference, imported only by read_model
    from model import GPT

# ---- constants (model.h) -------------------------------------------------------------------

MAGIC = 0x43545047  # "GPTC" read as a little-endian uint32
VERSION = 5         # written; 4 and 3 are written too (for the tests of older files), and 1 to 4 read:
                    # 4 (no head size, no layer table), 3 (one weight type, stacked tensors), 2
                    # (tokenizer section without its second part), 1 (GPT-2's block only, no header
                    # fields from byte 108)
LAYER_ROW = struct.Struct("<IIf20x")  # the layer table's row: window, rotary, rope_theta, then zeros
HEADER_SIZE = 256
ALIGN = 64          # TENSOR_ALIGN: the tokenizer and metadata sections, the tensor table and each tensor start so
TENSOR_NAME_LEN = 40  # version 4; 48 before, over the type
METADATA_KEY_MAX = 64
MAX_STOP = 64
RANK_NONE = 0xFFFFFFFF
GELU = {"tanh": 0, "erf": 1}
POS = {"learned": 0, "sinusoidal": 1, "rotary": 2}
NORM = {"layer": 0, "rms": 1}
FFN = {"gelu": 0, "swiglu": 1, "geglu": 2}
QK_NORM = {"none": 0, "head": 1, "whole": 2}
NORM_BEFORE, NORM_AFTER = 1, 2
# kernels/types.h's WT_*, from weight_types.py's one list: name -> id
WEIGHT_TYPES = {t.name: t.id for t in TYPES}
WT_F32, WT_Q8_0, WT_Q4_0 = WEIGHT_TYPES["f32"], WEIGHT_TYPES["q8_0"], WEIGHT_TYPES["q4_0"]
PRETOK = {"char": 0, "gpt2": 1, "cl100k": 2, "whole": 3, "digits_gpt2": 4, "qwen2": 5, "o200k": 6, "o200k_ascii": 7}
# the tokenizer section's flags and token kinds (model.h)
TOK_MERGE_PAIRS, TOK_WHOLE_PIECES, TOK_SENTENCEPIECE, TOK_BYTE_FALLBACK = 1, 2, 4, 8
TOK_DUMMY_PREFIX, TOK_REMOVE_EXTRA_SPACES, TOK_NFC = 16, 32, 64
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNKNOWN, TOKEN_BYTE, TOKEN_SPECIAL = 0, 1, 2, 3, 4

# FileHeader, field by field from byte 0 (struct codes: I uint32, f float32, Q uint64); the
# reserved bytes after the last field are zero up to HEADER_SIZE.
HEADER_FIELDS = [
    ("magic", "I"), ("version", "I"), ("header_size", "I"), ("n_layer", "I"), ("n_head", "I"),
    ("n_embd", "I"), ("n_hidden", "I"), ("n_ctx", "I"), ("vocab_size", "I"), ("vocab_padded", "I"),
    ("norm_eps", "f"), ("gelu", "I"), ("bias", "I"), ("tied_head", "I"), ("pos_kind", "I"),
    ("weight_type", "I"), ("group_size", "I"), ("n_tensors", "I"), ("tokenizer_offset", "Q"),
    ("tokenizer_size", "Q"), ("tensors_offset", "Q"), ("file_size", "Q"), ("meta_crc32", "I"),
    ("norm", "I"), ("ffn", "I"), ("n_kv_head", "I"), ("rope_theta", "f"), ("rope_freqs", "I"),  # version 2
    ("metadata_offset", "Q"), ("metadata_size", "Q"), ("qkv_apart", "I"),  # version 4
    ("head_size", "I"), ("layers_offset", "Q"),  # version 5
    ("qk_norm", "I"), ("norm_place", "I"), ("embed_scale", "f"), ("attn_scale", "f"), ("residual_scale", "f"),
    ("logit_divisor", "f"), ("attn_softcap", "f"), ("logit_softcap", "f"), ("rotary_dims", "I"), ("rope_scale", "f"),
    ("rope_long", "I"), ("rope_original", "I"),  # version 5: the block's switches
]
HEADER_FORMAT = "<" + "".join(code for _, code in HEADER_FIELDS)
CRC_OFFSET = struct.calcsize("<" + "".join(code for _, code in HEADER_FIELDS[:22]))  # meta_crc32
assert CRC_OFFSET == 104 and struct.calcsize(HEADER_FORMAT) == 208 and LAYER_ROW.size == 32


from output_files import ExportError, write_output  # noqa: E402


def pack_header(fields: dict) -> bytes:
    """The 256-byte header from its fields by name (missing ones are 0)."""
    head = struct.pack(HEADER_FORMAT, *(fields.get(name, 0) for name, _ in HEADER_FIELDS))
    return head + b"\0" * (HEADER_SIZE - len(head))


def unpack_header(raw: bytes) -> dict:
    return dict(zip((name for name, _ in HEADER_FIELDS), struct.unpack_from(HEADER_FORMAT, raw)))


# ---- the tokenizer section -------------------------------------------------------------------

@dataclass
class TokenizerData:
    kind: str                 # the pre-tokenizer: "char", "gpt2", "cl100k", "whole", "digits_gpt2", "qwen2", "o200k", "o200k_ascii"
    tokens: list[bytes]       # id -> bytes (what the token prints; a control token's name)
    ranks: list[int]          # id -> merge rank, RANK_NONE for tokens merging never produces
    eot_id: int               # -1 when there is none
    flags: int = -1           # TOK_*; -1: tiktoken's rule (TOK_WHOLE_PIECES) for BPE, none for characters
    bos_id: int = -1          # prepended to every encoded text
    unk_id: int = -1          # SentencePiece's unknown piece (without byte fallback)
    kinds: list[int] | None = None   # id -> TOKEN_*; None: byte-level BPE's specials (RANK_NONE), others normal
    merges: list[tuple[int, int, int]] = field(default_factory=list)  # TOK_MERGE_PAIRS: (left, right, merged)
    rules: list[tuple[bytes, bytes]] = field(default_factory=list)    # SentencePiece's normalization rules
    stop_ids: list[int] | None = None  # the stop set; None: end-of-text alone (when there is one)

    def __post_init__(self) -> None:
        if self.flags == -1:
            self.flags = 0 if self.kind == "char" else TOK_WHOLE_PIECES
        if self.kinds is None:
            special = self.kind != "char"
            self.kinds = [TOKEN_SPECIAL if special and r == RANK_NONE else TOKEN_NORMAL for r in self.ranks]
        if self.stop_ids is None:
            self.stop_ids = [self.eot_id] if self.eot_id >= 0 else []

    def to_dict(self) -> dict:
        return dict(kind=self.kind, tokens=self.tokens, ranks=self.ranks, eot_id=self.eot_id, flags=self.flags,
                    bos_id=self.bos_id, unk_id=self.unk_id, kinds=self.kinds, merges=self.merges, rules=self.rules,
                    stop_ids=self.stop_ids)

    @staticmethod
    def from_dict(d: dict) -> "TokenizerData":
        return TokenizerData(d["kind"], list(d["tokens"]), list(d["ranks"]), int(d["eot_id"]), int(d.get("flags", -1)),
                             int(d.get("bos_id", -1)), int(d.get("unk_id", -1)), d.get("kinds"),
                             [tuple(m) for m in d.get("merges", [])], [tuple(r) for r in d.get("rules", [])],
                             d.get("stop_ids"))

    def decode(self, ids: list[int]) -> bytes:
        """What run.c prints for these tokens: their bytes, control tokens nothing."""
        return b"".join(self.tokens[i] for i in ids if self.kinds[i] != TOKEN_CONTROL)


def tokenizer_section(tok: TokenizerData, version: int = VERSION) -> bytes:
    """n_tokens, pretokenizer, eot_id, bytes_size; ranks; offsets; the byte blob; then version
    3's flags, bos_id, unk_id, n_merges, n_rules, rules_size, kinds, merges, rules; then version
    4's stop set (model.h)."""
    n = len(tok.tokens)
    blob = b"".join(tok.tokens)
    offsets = np.zeros(n + 1, dtype="<u4")
    offsets[1:] = np.cumsum([len(t) for t in tok.tokens])
    head = struct.pack("<IIiI", n, PRETOK[tok.kind], tok.eot_id, len(blob))
    out = head + np.asarray(tok.ranks, dtype="<u4").tobytes() + offsets.tobytes() + blob
    out += b"\0" * (-len(out) % 4)
    rule_blob = b"".join(k + v for k, v in tok.rules)
    rule_offsets = np.zeros(2 * len(tok.rules) + 1, dtype="<u4")
    rule_offsets[1:] = np.cumsum([len(x) for rule in tok.rules for x in rule]) if tok.rules else []
    kinds = bytes(tok.kinds) + b"\0" * (-n % 4)
    merges = np.asarray(tok.merges, dtype="<u4").reshape(-1, 3).tobytes()
    out += struct.pack("<IiiIII", tok.flags, tok.bos_id, tok.unk_id, len(tok.merges), len(tok.rules), len(rule_blob))
    out += kinds + merges + rule_offsets.tobytes() + rule_blob
    if version < 4:
        if tok.stop_ids != ([tok.eot_id] if tok.eot_id >= 0 else []):
            raise ExportError(f"format version {version} has no stop set: only end-of-text stops")
        return out
    stop = list(tok.stop_ids)
    if len(stop) > MAX_STOP or len(set(stop)) != len(stop) or any(not 0 <= i < len(tok.tokens) for i in stop):
        raise ExportError(f"the stop set {stop} must be at most {MAX_STOP} distinct token ids of the vocabulary")
    out += b"\0" * (-len(out) % 4)
    return out + struct.pack(f"<I{len(stop)}I", len(stop), *stop)


def read_tokenizer(raw: bytes, tok_off: int, version: int = VERSION) -> TokenizerData:
    """The tokenizer section of a weight file of format `version` starting at tok_off."""
    n_tok, kind, eot, bytes_size = struct.unpack_from("<IIiI", raw, tok_off)
    ranks = np.frombuffer(raw, "<u4", n_tok, tok_off + 16).tolist()
    offsets = np.frombuffer(raw, "<u4", n_tok + 1, tok_off + 16 + 4 * n_tok)
    blob = tok_off + 16 + 8 * n_tok + 4
    tokens = [raw[blob + offsets[i]:blob + offsets[i + 1]] for i in range(n_tok)]
    tok = TokenizerData({v: k for k, v in PRETOK.items()}[kind], tokens, ranks, eot)
    if version < 3:
        tok.kinds = [TOKEN_NORMAL] * n_tok  # versions 1 and 2: every token in the table, as before
        return tok
    at = blob + bytes_size
    at += -(at - tok_off) % 4
    tok.flags, tok.bos_id, tok.unk_id, n_merges, n_rules, rules_size = struct.unpack_from("<IiiIII", raw, at)
    at += 24
    tok.kinds = list(raw[at:at + n_tok])
    at += n_tok + (-n_tok % 4)
    tok.merges = [tuple(m) for m in np.frombuffer(raw, "<u4", 3 * n_merges, at).reshape(-1, 3).tolist()]
    at += 12 * n_merges
    o = np.frombuffer(raw, "<u4", 2 * n_rules + 1, at).tolist()
    at += 4 * (2 * n_rules + 1)
    tok.rules = [(raw[at + o[2 * i]:at + o[2 * i + 1]], raw[at + o[2 * i + 1]:at + o[2 * i + 2]]) for i in range(n_rules)]
    if version >= 4:
        at += o[-1]
        at += -(at - tok_off) % 4
        n_stop = struct.unpack_from("<I", raw, at)[0]
        tok.stop_ids = list(struct.unpack_from(f"<{n_stop}I", raw, at + 4))
    else:
        tok.stop_ids = [tok.eot_id] if tok.eot_id >= 0 else []
    return tok


# ---- the tensor list -------------------------------------------------------------------------

# Per layer, in file order (stacked over layers), each with what makes the file have it.
LAYER_PARTS = [
    ("ln_1.weight", lambda c: c.norm_before), ("ln_1.bias", lambda c: c.norm_before and c.has_bias(BIAS_NORM)),
    ("attn.c_attn.weight", lambda c: True), ("attn.c_attn.bias", lambda c: c.has_bias(BIAS_QKV)),
    ("attn.q_norm.weight", lambda c: c.qk_norm != "none"), ("attn.k_norm.weight", lambda c: c.qk_norm != "none"),
    ("attn.c_proj.weight", lambda c: True), ("attn.c_proj.bias", lambda c: c.has_bias(BIAS_ATTN_OUT)),
    ("attn.post_norm.weight", lambda c: c.norm_after),
    ("ln_2.weight", lambda c: c.norm_before), ("ln_2.bias", lambda c: c.norm_before and c.has_bias(BIAS_NORM)),
    ("mlp.gate.weight", lambda c: c.ffn != "gelu"),
    ("mlp.gate.bias", lambda c: c.ffn != "gelu" and c.has_bias(BIAS_FFN)),
    ("mlp.c_fc.weight", lambda c: True), ("mlp.c_fc.bias", lambda c: c.has_bias(BIAS_FFN)),
    ("mlp.c_proj.weight", lambda c: True), ("mlp.c_proj.bias", lambda c: c.has_bias(BIAS_FFN)),
    ("mlp.post_norm.weight", lambda c: c.norm_after),
]
# Matrices: quantized in a q8_0 or q4_0 file. Norms, biases and position tables stay float32.
MATRICES = {"wte", "attn.c_attn.weight", "attn.c_proj.weight", "mlp.gate.weight", "mlp.c_fc.weight",
            "mlp.c_proj.weight", "lm_head.weight", "attn.q.weight", "attn.k.weight", "attn.v.weight"}
QKV_PARTS = ("attn.q.weight", "attn.k.weight", "attn.v.weight")  # a qkv_apart file's, in place of attn.c_attn.weight


def layer_parts(c: GPTConfig) -> list[str]:
    """The per-layer tensors a configuration has, in file order."""
    return [name for name, present in LAYER_PARTS if present(c)]


def stacked_shapes(c: GPTConfig) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor of file_tensors()'s list (per-layer ones stacked over layers)."""
    ref = reference_shapes(c)
    shapes = {"wte": ref["transformer.wte.weight"], "ln_f.weight": ref["transformer.ln_f.weight"],
              "lm_head.weight": ref["lm_head.weight"]}
    if c.pos == "learned":
        shapes["wpe"] = ref["transformer.wpe.weight"]
    if c.pos == "rotary" and c.rope_freqs is not None:
        shapes["rope_freqs"] = (len(c.rope_freqs),)
    if c.pos == "rotary" and c.rope_freqs_long is not None:
        shapes["rope_freqs_long"] = (len(c.rope_freqs_long),)
    if "transformer.ln_f.bias" in ref:
        shapes["ln_f.bias"] = ref["transformer.ln_f.bias"]
    for part in layer_parts(c):
        shapes[part] = (c.n_layer, *ref[f"transformer.h.0.{part}"])
    return shapes


def file_tensors(model: "Weights | GPT") -> list[tuple[str, np.ndarray]]:
    """The tensors of model.h's list, in file order, as float32 arrays (layers stacked): the
    list load.h's tensor_list() expects. model: a Weights, or the PyTorch reference GPT."""
    c = model.config
    sd = {k: (v.detach().float().numpy() if hasattr(v, "detach") else np.asarray(v, np.float32))
          for k, v in model.state_dict().items()}
    out = [("wte", sd["transformer.wte.weight"])]
    if c.pos == "learned":
        out.append(("wpe", sd["transformer.wpe.weight"]))
    if c.pos == "rotary" and c.rope_freqs is not None:
        out.append(("rope_freqs", np.asarray(c.rope_freqs, dtype=np.float32)))
    if c.pos == "rotary" and c.rope_freqs_long is not None:
        out.append(("rope_freqs_long", np.asarray(c.rope_freqs_long, dtype=np.float32)))
    for part in layer_parts(c):
        out.append((part, np.stack([sd[f"transformer.h.{i}.{part}"] for i in range(c.n_layer)])))
    out.append(("ln_f.weight", sd["transformer.ln_f.weight"]))
    if c.has_bias(BIAS_NORM):
        out.append(("ln_f.bias", sd["transformer.ln_f.bias"]))
    if not c.tied_head:
        out.append(("lm_head.weight", sd["lm_head.weight"]))
    return out


# ---- the weight formats ----------------------------------------------------------------------


class Deferred:
    """A tensor's bytes, computed only when the file is written (so that the quantized tensors are
    never all in memory at once), of a size known beforehand (stored_size). produce() returns them;
    done is called after, with their length (the progress line, giving back the source's pages)."""

    def __init__(self, size: int, produce: Callable[[], bytes], done: Callable[[], None] | None = None):
        self.size, self._produce, self._done = size, produce, done

    def __len__(self) -> int:
        return self.size

    def produce(self) -> bytes:
        data = self._produce()
        if len(data) != self.size:
            raise ExportError(f"a tensor came out {len(data)} bytes long, not the {self.size} its type takes")
        if self._done is not None:
            self._done()
        return data


@dataclass
class FileTensor:
    """One tensor of a weight file as stored: float32 values, or for a q8_0 or q4_0 matrix its
    quants as int8 (shape) and float32 scales (shape[:-1] + (cols // group,)), or for a block or
    16-bit format (block_formats.py) its bytes (shape[:-1] + (bytes of a row,)) in fmt. A tensor
    stacked over layers whose layers have different types keeps them apart (parts, one a layer)."""
    values: np.ndarray | None
    scales: np.ndarray | None = None
    parts: list["FileTensor"] | None = None
    fmt: str | None = None
    raw: np.ndarray | None = None
    shape: tuple | None = None  # a block format's shape in values
    row_parts: list["FileTensor"] | None = None  # a matrix of parts (model.h's qkv_apart): their rows, in order

    def dequantized(self) -> np.ndarray:
        """float32 values; a quantized value is quant * scale rounded to float32, as run.c does;
        a block format's as ggml computes them (exactly what run.c's row read gives)."""
        if self.parts is not None:
            return np.stack([p.dequantized() for p in self.parts])
        if self.row_parts is not None:
            return np.concatenate([p.dequantized() for p in self.row_parts])
        if self.fmt is not None:
            return block_formats.dequantize(self.raw, self.fmt, self.shape)
        if self.scales is None:
            return self.values
        group = self.values.shape[-1] // self.scales.shape[-1]
        return self.values.astype(np.float32) * np.repeat(self.scales, group, axis=-1)

    def layer(self, i: int) -> "FileTensor":
        """Layer i of a tensor stacked over layers."""
        if self.parts is not None:
            return self.parts[i]
        if self.fmt is not None:
            return FileTensor(None, fmt=self.fmt, raw=self.raw[i], shape=self.shape[1:])
        return FileTensor(self.values[i], None if self.scales is None else self.scales[i])

    def rows(self, count: int) -> "FileTensor":
        """The first count rows of a matrix (the output head's real rows)."""
        if self.fmt is not None:
            return FileTensor(None, fmt=self.fmt, raw=self.raw[:count], shape=(count, *self.shape[1:]))
        return FileTensor(self.values[:count], None if self.scales is None else self.scales[:count])


def tensor_at(raw: bytes, offset: int, size: int, shape: tuple, wtype: int) -> FileTensor:
    """The tensor of the given shape and weight type stored at raw[offset:offset + size]."""
    count, group = int(np.prod(shape)), QUANT_GROUP
    if wtype == WT_F32 and size == 4 * count:
        return FileTensor(np.frombuffer(raw, "<f4", count, offset).reshape(shape))
    if wtype == WT_Q8_0 and size == count + (-count % 4) + 4 * (count // group):
        quants = np.frombuffer(raw, np.int8, count, offset).reshape(shape)
        scales = np.frombuffer(raw, "<f4", count // group, offset + count + (-count % 4))
        return FileTensor(quants, scales.reshape(*shape[:-1], shape[-1] // group))
    if wtype == WT_Q4_0 and size == count // 2 + (-(count // 2) % 4) + 4 * (count // group):
        quants = unpack_q4(np.frombuffer(raw, np.uint8, count // 2, offset)).reshape(shape)
        scales = np.frombuffer(raw, "<f4", count // group, offset + count // 2 + (-(count // 2) % 4))
        return FileTensor(quants, scales.reshape(*shape[:-1], shape[-1] // group))
    name = {v: k for k, v in WEIGHT_TYPES.items()}.get(wtype)
    if name in block_formats.FORMATS:
        block, block_bytes = block_formats.FORMATS[name]
        row = shape[-1] // block * block_bytes
        if shape[-1] % block == 0 and size == count // block * block_bytes:
            raw_bytes = np.frombuffer(raw, np.uint8, size, offset).reshape(*shape[:-1], row)
            return FileTensor(None, fmt=name, raw=raw_bytes, shape=tuple(shape))
    raise ExportError(f"tensor at {offset}: {size} bytes do not fit shape {shape} as weight type {wtype}")


# ---- writing -----------------------------------------------------------------------------------

def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def qkv_rows(c: GPTConfig) -> list[int]:
    """The rows of the query, key and value projections in the fused one."""
    hs = c.head_size
    return [c.n_head * hs, c.n_kv_head * hs, c.n_kv_head * hs]


def file_entries(tensors: list[tuple[str, np.ndarray]], version: int,
                 qkv_apart: GPTConfig | None = None) -> list[tuple[str, str, np.ndarray]]:
    """The tensor table's entries (name, base name, array) in file order: version 4 lists each
    layer's tensors apart, named h.L.NAME, after the model's first tensors and before its last
    ones (qkv_apart, a configuration: the fused query/key/value projection as its three parts);
    earlier versions list the stacked tensors as they are."""
    if version < 4:
        return [(name, name, arr) for name, arr in tensors]
    if qkv_apart is not None:
        bounds = np.cumsum([0, *qkv_rows(qkv_apart)])
        split = []
        for name, arr in tensors:
            if name == "attn.c_attn.weight":
                split += [(part, arr[:, bounds[i]:bounds[i + 1]]) for i, part in enumerate(QKV_PARTS)]
            else:
                split.append((name, arr))
        tensors = split
    layer_names = {name for name, _ in LAYER_PARTS} | set(QKV_PARTS)
    first = [t for t in tensors[:4] if t[0] in ("wte", "wpe", "rope_freqs", "rope_freqs_long")]
    stacked = [t for t in tensors if t[0] in layer_names]
    last = tensors[len(first) + len(stacked):]
    n_layer = stacked[0][1].shape[0] if stacked else 0
    out = [(name, name, arr) for name, arr in first]
    out += [(f"h.{layer}.{name}", name, arr[layer]) for layer in range(n_layer) for name, arr in stacked]
    return out + [(name, name, arr) for name, arr in last]


def entry_types(entries: list[tuple[str, str, np.ndarray]], dtype: str, tensor_types: dict[str, str] | None,
                n_layer: int = 0, tied: bool = False) -> list[str]:
    """Each entry's weight type: f32 for what is not a matrix; for a matrix the type of the first
    pattern of tensor_types (fnmatch, on the entry's name) that matches it, else dtype's
    (dtype_type: a mix chooses per matrix)."""
    import fnmatch
    types = []
    for pattern, chosen in (tensor_types or {}).items():
        if chosen not in WRITTEN:
            raise ExportError(f"unknown weight type {chosen!r} for {pattern}: choose from {', '.join(WRITTEN)}")
    for name, base, arr in entries:
        wtype = dtype_type(dtype, name, base, arr.shape[-1], n_layer, tied) if base in MATRICES else "f32"
        for pattern, chosen in (tensor_types or {}).items():
            if base in MATRICES and fnmatch.fnmatchcase(name, pattern):
                wtype = chosen
                break
        if arr.shape[-1] % type_block(wtype):
            raise ExportError(f"tensor {name}'s rows of {arr.shape[-1]} values are not a multiple of {wtype}'s "
                              f"{type_block(wtype)}: f16 and f32 fit any row, and the k types fall back where they "
                              "do not fit (q4_k, q5_k, q6_k, q4_k_m, q5_k_m)")
        types.append(wtype)
    return types


def metadata_section(metadata: dict[str, str | bytes]) -> bytes:
    """n_entries, then each key and value with their lengths (model.h); a str value as UTF-8."""
    import re
    out = struct.pack("<I", len(metadata))
    for key, value in metadata.items():
        if not re.fullmatch(rf"[a-z0-9._-]{{1,{METADATA_KEY_MAX}}}", key):
            raise ExportError(f"metadata key {key!r} must be 1 to {METADATA_KEY_MAX} of [a-z0-9._-]")
        k, v = key.encode(), value if isinstance(value, bytes) else value.encode()
        out += struct.pack("<I", len(k)) + k + struct.pack("<I", len(v)) + v
    return out


def model_table(c: GPTConfig | None, tensors: list[tuple[str, np.ndarray]], dtype: str = "f32",
                version: int = VERSION, tensor_types: dict[str, str] | None = None, metadata: dict[str, str] | None = None,
                qkv_apart: bool = False, progress: Progress | None = None) -> list[tuple[str, str, Deferred]]:
    """The tensor table of model.h's list of tensors: (entry name, weight type, the tensor's bytes
    in that type, computed as the file is written) in file order; progress: told of each."""
    if version < 4 and (tensor_types or metadata or qkv_apart or dtype not in ("f32", "q8_0", "q4_0")):
        raise ExportError(f"format version {version} has one weight type of f32, q8_0 and q4_0, and no metadata")
    entries = file_entries(tensors, version, c if qkv_apart else None)
    types = entry_types(entries, dtype, tensor_types, c.n_layer if c is not None else 0, bool(c and c.tied_head))
    table = []
    for i, ((name, _, arr), wtype) in enumerate(zip(entries, types)):
        done = None if progress is None else (lambda i=i, name=name, n=arr.nbytes: progress.step(i, name, n))
        table.append((name, wtype, Deferred(stored_size(wtype, arr.shape), lambda arr=arr, wtype=wtype: tensor_data(arr, wtype),
                                            done)))
    return table


def file_layout(c: GPTConfig | None, tok: TokenizerData, table: list[tuple[str, str, "bytes | Deferred"]], dtype: str = "f32",
                version: int = VERSION, metadata: dict[str, str] | None = None, qkv_apart: bool = False):
    """The pieces (offset, bytes) and size of a file whose tensor table is `table`: (entry name,
    weight type, the tensor's bytes in that type) in file order (q8_0_ggml: q8_0 with ggml's
    numbers). dtype: the header's weight type (versions 1-3)."""
    if version < 5 and c is not None and not c.fits_version_4():
        raise ExportError(f"format version {version} has no head size of its own, no layer table and none of the "
                          "switches of version 5: this block needs version 5")
    tok_bytes = tokenizer_section(tok, version)
    tok_off = HEADER_SIZE
    meta_bytes = metadata_section(metadata or {}) if version >= 4 else b""
    meta_off = align(tok_off + len(tok_bytes)) if version >= 4 else 0
    layer_bytes = b"".join(LAYER_ROW.pack(row["window"], int(row["rotary"]), row["rope_theta"] if row["rotary"] else 0.0)
                           for row in c.layer_rows()) if version >= 5 and c is not None else b""
    layers_off = align(meta_off + len(meta_bytes)) if layer_bytes else 0
    table_off = align(layers_off + len(layer_bytes) if layer_bytes else
                      (meta_off + len(meta_bytes)) if version >= 4 else tok_off + len(tok_bytes))
    offset = align(table_off + 64 * len(table))
    entries, placed = [], []
    for name, wtype, data in table:
        if version >= 4:
            entries.append(struct.pack(f"<{TENSOR_NAME_LEN}sIIQQ", name.encode(), WEIGHT_TYPES[wtype.removesuffix("_ggml")], 0,
                                       offset, len(data)))
        else:
            entries.append(struct.pack(f"<{TENSOR_NAME_LEN + 8}sQQ", name.encode(), offset, len(data)))
        placed.append((offset, data))
        offset = align(offset + len(data))
    meta_end = table_off + 64 * len(table)
    end = placed[-1][0] + len(placed[-1][1]) if placed else meta_end
    fields = dict(magic=MAGIC, version=version, header_size=HEADER_SIZE, n_tensors=len(table),
                  tokenizer_offset=tok_off, tokenizer_size=len(tok_bytes), tensors_offset=table_off, file_size=end)
    if version >= 4:
        fields.update(metadata_offset=meta_off, metadata_size=len(meta_bytes), qkv_apart=int(qkv_apart))
    if version >= 5 and c is not None:
        rotary = c.pos == "rotary"
        fields.update(head_size=c.head_size, layers_offset=layers_off, qk_norm=QK_NORM[c.qk_norm],
                      norm_place=(NORM_BEFORE if c.norm_before else 0) | (NORM_AFTER if c.norm_after else 0),
                      embed_scale=c.embed_scale, attn_scale=c.attn_scale, residual_scale=c.residual_scale,
                      logit_divisor=c.logit_divisor, attn_softcap=c.attn_softcap, logit_softcap=c.logit_softcap,
                      rotary_dims=c.rotated if rotary else 0, rope_scale=c.rope_scale if rotary else 0.0,
                      rope_long=int(rotary and c.rope_freqs_long is not None),
                      rope_original=c.rope_original if rotary and c.rope_freqs_long is not None else 0)
    if c is None:  # tokenizer-only file: n_layer 0, the rest zero
        fields.update(vocab_size=len(tok.tokens), vocab_padded=len(tok.tokens))
    else:
        rotary = c.pos == "rotary"
        fields.update(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, n_hidden=c.n_hidden, n_ctx=c.n_ctx,
                      vocab_size=c.vocab_size, vocab_padded=c.vocab_padded, norm_eps=c.ln_eps, gelu=GELU[c.gelu],
                      bias=c.bias, tied_head=int(c.tied_head), pos_kind=POS[c.pos],
                      norm=NORM[c.norm], ffn=FFN[c.ffn], n_kv_head=c.n_kv_head,
                      rope_theta=c.rope_theta if rotary else 0.0, rope_freqs=int(rotary and c.rope_freqs is not None))
        if version < 4:
            fields.update(weight_type=WEIGHT_TYPES[dtype], group_size=QUANT_GROUP if dtype != "f32" else 0)
    meta = bytearray(meta_end)
    meta[:HEADER_SIZE] = pack_header(fields)
    meta[tok_off:tok_off + len(tok_bytes)] = tok_bytes
    meta[meta_off:meta_off + len(meta_bytes)] = meta_bytes
    meta[layers_off:layers_off + len(layer_bytes)] = layer_bytes
    meta[table_off:meta_end] = b"".join(entries)
    struct.pack_into("<I", meta, CRC_OFFSET, zlib.crc32(meta))  # computed with the field at 0
    return [(0, bytes(meta)), *placed], end


def entry_names(c: GPTConfig, qkv_apart: bool = False) -> list[str]:
    """The tensor table's names of a version 4 file of configuration c, in file order (model.h's
    list; file_entries() gives the same for a model's tensors)."""
    first = ["wte"] + (["wpe"] if c.pos == "learned" else []) + \
        (["rope_freqs"] if c.pos == "rotary" and c.rope_freqs is not None else []) + \
        (["rope_freqs_long"] if c.pos == "rotary" and c.rope_freqs_long is not None else [])
    parts = [p for part in layer_parts(c) for p in (QKV_PARTS if qkv_apart and part == "attn.c_attn.weight" else [part])]
    layers = [f"h.{layer}.{part}" for layer in range(c.n_layer) for part in parts]
    last = ["ln_f.weight"] + (["ln_f.bias"] if c.has_bias(BIAS_NORM) else []) + \
        ([] if c.tied_head else ["lm_head.weight"])
    return first + layers + last


@dataclass
class Written:
    """What a write put in the file: its size and each tensor's (entry name, weight type)."""
    size: int
    types: list[tuple[str, str]]
    qkv_apart: bool = False

    def summary(self) -> str:
        """The matrices' weight types as run --info says them: "weights: q8_0", or with several
        types "weights: q4_k (98 matrices), q6_k (13 matrices)" in kernels/types.h's order."""
        counts: dict[str, int] = {}
        for name, wtype in self.types:
            if base_name(name) in MATRICES:
                wtype = wtype.removesuffix("_ggml")
                counts[wtype] = counts.get(wtype, 0) + 1
        kinds = [t for t in WEIGHT_TYPES if t in counts]
        listed = ", ".join(t + (f" ({counts[t]} matri{'x' if counts[t] == 1 else 'ces'})" if len(kinds) > 1 else "")
                           for t in kinds)
        return f"weights: {listed}" + ("; query, key and value apart" if self.qkv_apart else "")


def write_atomically(out: Path, pieces: list[tuple[int, bytes]], total: int) -> None:
    """The file of pieces (offset, bytes), in offset order, zeros between them, total bytes in
    all, written by output_files.write_output: whole or not at all, symlinks followed, devices
    and pipes written directly."""
    def write(f) -> None:
        # the next deferred tensor is made while this one is written: the CPUs quantize while the
        # kernel copies bytes, rather than each waiting for the other
        with ThreadPoolExecutor(1) as ahead:
            made = [ahead.submit(data.produce) if isinstance(data, Deferred) else None for _, data in pieces[:1]]
            at = 0
            for k, (offset, data) in enumerate(pieces):
                if k + 1 < len(pieces):
                    following = pieces[k + 1][1]
                    made.append(ahead.submit(following.produce) if isinstance(following, Deferred) else None)
                f.write(bytes(offset - at))
                f.write(made[k].result() if made[k] is not None else data)
                made[k] = None
                at = offset + len(data)
            f.write(bytes(total - at))
    write_output(out, write)


def write_model(out: Path, model: "Weights | GPT | None", tok: TokenizerData, dtype: str = "f32", *, version: int = VERSION,
                tensor_types: dict[str, str] | None = None, metadata: dict[str, str] | None = None,
                qkv_apart: bool | None = None, quiet: bool = False) -> Written:
    """The weight file of model (None: a tokenizer-only file) and tok, its matrices in weight type
    dtype unless a pattern of tensor_types names another (a mix), with metadata (version 5; 4 and 3
    for the tests of older files); returns its size and the types written. qkv_apart: the query, key and value
    projections as three tensors (model.h); None: as llama.cpp keeps them in its mixes, apart for
    the Llama family's block (a mix gives the value projection more bits), fused for GPT-2's."""
    c = model.config if model is not None else None
    if qkv_apart is None:
        qkv_apart = c is not None and dtype in MIXES and c.ffn == "swiglu"
    if c is not None and len(tok.tokens) != c.vocab_size:
        raise ExportError(f"tokenizer has {len(tok.tokens)} tokens but the model's vocab_size is {c.vocab_size}")
    if dtype not in WRITTEN and dtype not in MIXES:
        raise ExportError(f"unknown weight type {dtype!r}: choose from {', '.join([*WRITTEN, *MIXES])}")
    tensors = file_tensors(model) if model is not None else []
    progress = Progress(len(tensors), sum(arr.nbytes for _, arr in tensors), quiet)
    table = model_table(c, tensors, dtype, version, tensor_types, metadata, qkv_apart, progress)
    progress.tensors = len(table)
    pieces, total = file_layout(c, tok, table, dtype, version, metadata, qkv_apart)
    try:
        write_atomically(out, pieces, total)
    finally:
        progress.finish()
    return Written(total, [(name, wtype) for name, wtype, _ in table], qkv_apart)


def write_file(out: Path, c: GPTConfig, tok: TokenizerData, table: list[tuple[str, str, "bytes | Deferred"]],
               metadata: dict[str, str] | None = None, qkv_apart: bool = False) -> Written:
    """A version 5 file whose tensors are given already in their types' bytes: table holds (entry
    name, weight type, bytes) in entry_names(c, qkv_apart)'s order (an import that keeps another
    format's quantized numbers as they are). Returns its size and the types written."""
    if [name for name, _, _ in table] != entry_names(c, qkv_apart):
        raise ExportError(f"the tensors {[name for name, _, _ in table][:6]}... are not model.h's list for this block")
    if len(tok.tokens) != c.vocab_size:
        raise ExportError(f"tokenizer has {len(tok.tokens)} tokens but the model's vocab_size is {c.vocab_size}")
    pieces, total = file_layout(c, tok, table, "f32", VERSION, metadata, qkv_apart)
    write_atomically(out, pieces, total)
    return Written(total, [(name, wtype) for name, wtype, _ in table], qkv_apart)


# ---- reading -----------------------------------------------------------------------------------

def read_tensors(path: Path) -> tuple[GPTConfig | None, TokenizerData, dict[str, FileTensor]]:
    """A weight file as its configuration (None for a tokenizer-only file), tokenizer and tensors."""
    raw = Path(path).read_bytes()
    if len(raw) < HEADER_SIZE or struct.unpack_from("<I", raw)[0] != MAGIC:
        raise ExportError(f"{path} is not a model file")
    h = unpack_header(raw)
    if not 1 <= h["version"] <= VERSION:
        raise ExportError(f"{path}: format version {h['version']}, this reads versions 1 to {VERSION}")
    tok = read_tokenizer(raw, h["tokenizer_offset"], h["version"])
    if h["n_layer"] == 0:
        return None, tok, {}
    name_of = lambda table, value: {v: k for k, v in table.items()}[value]  # noqa: E731
    cfg = GPTConfig(n_layer=h["n_layer"], n_head=h["n_head"], n_embd=h["n_embd"], n_hidden=h["n_hidden"],
                    n_ctx=h["n_ctx"], vocab_size=h["vocab_size"], vocab_padded=h["vocab_padded"], ln_eps=h["norm_eps"],
                    gelu=name_of(GELU, h["gelu"]), tied_head=bool(h["tied_head"]), pos=name_of(POS, h["pos_kind"]))
    if h["version"] == 1:  # GPT-2's block; bias 1 meant every bias
        cfg.bias = BIAS_ALL if h["bias"] else 0
    else:
        cfg.bias, cfg.norm, cfg.ffn, cfg.n_kv_head = h["bias"], name_of(NORM, h["norm"]), name_of(FFN, h["ffn"]), h["n_kv_head"]
        cfg.rope_theta = h["rope_theta"] if cfg.pos == "rotary" else cfg.rope_theta
    if h["version"] >= 5:
        cfg.head_dim = h["head_size"]
        rows = [LAYER_ROW.unpack_from(raw, h["layers_offset"] + LAYER_ROW.size * layer) for layer in range(cfg.n_layer)]
        cfg.layers = [{"window": window, "rotary": bool(rotary), "rope_theta": theta} for window, rotary, theta in rows]
        cfg.qk_norm = name_of(QK_NORM, h["qk_norm"])
        cfg.norm_before, cfg.norm_after = bool(h["norm_place"] & NORM_BEFORE), bool(h["norm_place"] & NORM_AFTER)
        for key in ("embed_scale", "attn_scale", "residual_scale", "logit_divisor", "attn_softcap", "logit_softcap"):
            setattr(cfg, key, h[key])
        if cfg.pos == "rotary":
            cfg.rotary_dims, cfg.rope_scale = h["rotary_dims"], h["rope_scale"]
            cfg.rope_original = h["rope_original"]
        # what equals the defaults is said as a configuration before version 5 says it
        if cfg.n_embd % cfg.n_head == 0 and cfg.head_dim == cfg.n_embd // cfg.n_head:
            cfg.head_dim = 0
        if cfg.rotary_dims == cfg.head_size:
            cfg.rotary_dims = 0
        if cfg.layers == GPTConfig(n_layer=cfg.n_layer, pos=cfg.pos, rope_theta=cfg.rope_theta).layer_rows():
            cfg.layers = None
    table = {name: (offset, size, wtype) for name, wtype, offset, size in table_entries(raw, h)}
    if h["version"] > 1 and h["rope_freqs"]:
        offset, size, _ = table["rope_freqs"]
        cfg.rope_freqs = np.frombuffer(raw, "<f4", size // 4, offset).tolist()
    if h["version"] >= 5 and h["rope_long"]:
        offset, size, _ = table["rope_freqs_long"]
        cfg.rope_freqs_long = np.frombuffer(raw, "<f4", size // 4, offset).tolist()
    shapes = stacked_shapes(cfg)
    if h["version"] >= 4 and h["qkv_apart"]:
        shapes.update({part: (cfg.n_layer, rows, cfg.n_embd) for part, rows in zip(QKV_PARTS, qkv_rows(cfg))})
    tensors, layers = {}, {}
    for name, (offset, size, wtype) in table.items():
        if name.startswith("h."):  # version 4: one layer's; stacked below
            layer, base = int(name.split(".")[1]), base_name(name)
            layers.setdefault(base, {})[layer] = tensor_at(raw, offset, size, shapes[base][1:], wtype)
        else:
            tensors[name] = tensor_at(raw, offset, size, shapes[name], wtype)
    for base, parts in layers.items():
        parts = [parts[i] for i in range(cfg.n_layer)]
        if parts[0].fmt is not None and all(p.fmt == parts[0].fmt for p in parts):
            tensors[base] = FileTensor(None, fmt=parts[0].fmt, raw=np.stack([p.raw for p in parts]),
                                       shape=(cfg.n_layer, *parts[0].shape))
        elif all(p.fmt is None and (p.scales is None) == (parts[0].scales is None) and p.values.dtype == parts[0].values.dtype
                 for p in parts):
            tensors[base] = FileTensor(np.stack([p.values for p in parts]),
                                       None if parts[0].scales is None else np.stack([p.scales for p in parts]))
        else:
            tensors[base] = FileTensor(None, None, parts)
    if all(part in tensors for part in QKV_PARTS):  # qkv_apart: each layer's fused projection, of its parts
        parts = [tensors.pop(part) for part in QKV_PARTS]
        tensors["attn.c_attn.weight"] = FileTensor(None, None, [FileTensor(None, row_parts=[p.layer(i) for p in parts])
                                                                 for i in range(cfg.n_layer)])
    return cfg, tok, tensors


def read_header_and_table(path: Path) -> list[tuple[str, int]]:
    """A weight file's tensor entries as (name, weight type)."""
    raw = Path(path).read_bytes()
    return [(name, wtype) for name, wtype, _, _ in table_entries(raw, unpack_header(raw))]


def base_name(name: str) -> str:
    """A tensor's name without version 4's h.L. of its layer: attn.c_attn.weight."""
    return name.split(".", 2)[2] if name.startswith("h.") else name


def table_entries(raw: bytes, h: dict) -> list[tuple[str, int, int, int]]:
    """The tensor table: (name, weight type, offset, size) of each entry; before version 4 a
    matrix has the header's type."""
    out = []
    for i in range(h["n_tensors"]):
        at = h["tensors_offset"] + 64 * i
        if h["version"] >= 4:
            name, wtype, _, offset, size = struct.unpack_from(f"<{TENSOR_NAME_LEN}sIIQQ", raw, at)
        else:
            name, offset, size = struct.unpack_from(f"<{TENSOR_NAME_LEN + 8}sQQ", raw, at)
            wtype = h["weight_type"] if name.rstrip(b"\0").decode() in MATRICES else WT_F32
        out.append((name.rstrip(b"\0").decode(), wtype, offset, size))
    return out


def read_model(path: Path) -> tuple["GPT | None", TokenizerData]:
    """Read a weight file back into the reference model, quantized matrices dequantized: lets the
    tests and compare.py check a shipped .bin, whose training checkpoint is not shipped."""
    from model import GPT
    weights, tok = read_weights(path)
    return (None if weights is None else GPT.of(weights)), tok


def read_weights(path: Path) -> tuple[Weights | None, TokenizerData]:
    """A weight file's configuration and weights (quantized matrices dequantized) and tokenizer."""
    cfg, tok, tensors = read_tensors(path)
    if cfg is None:
        return None, tok
    arrays = {name: t.dequantized() for name, t in tensors.items()}
    sd = {"transformer.wte.weight": arrays["wte"], "transformer.ln_f.weight": arrays["ln_f.weight"]}
    if "wpe" in arrays:
        sd["transformer.wpe.weight"] = arrays["wpe"]
    if cfg.has_bias(BIAS_NORM):
        sd["transformer.ln_f.bias"] = arrays["ln_f.bias"]
    for part in layer_parts(cfg):
        for layer in range(cfg.n_layer):
            sd[f"transformer.h.{layer}.{part}"] = arrays[part][layer]
    sd["lm_head.weight"] = arrays.get("lm_head.weight", arrays["wte"])
    return weights_of(cfg, sd, str(path)), tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path, help="a weight file written by export.py or export_tokenizer.py")
    args = ap.parse_args()
    try:
        raw = args.file.read_bytes()
    except OSError as e:
        sys.exit(f"error: cannot read {args.file}: {e.strerror}")
    if len(raw) < HEADER_SIZE or struct.unpack_from("<I", raw)[0] != MAGIC:
        sys.exit(f"error: {args.file} is not a weight file (no GPTC magic)")
    h = unpack_header(raw)
    for name, value in h.items():
        print(f"{name:18} {value}")
    if h["version"] >= 5 and h["n_layer"]:
        for layer in range(min(h["n_layer"], max(0, len(raw) - h["layers_offset"]) // LAYER_ROW.size)):
            window, rotary, theta = LAYER_ROW.unpack_from(raw, h["layers_offset"] + LAYER_ROW.size * layer)
            print(f"layer {layer:<12} window {window}, rotary {rotary}, rope_theta {theta:g}")
    h["n_tensors"] = min(h["n_tensors"], max(0, len(raw) - h["tensors_offset"]) // 64)
    type_names = {v: k for k, v in WEIGHT_TYPES.items()}
    for name, wtype, offset, size in table_entries(raw, h):
        print(f"tensor {name:28} {type_names.get(wtype, str(wtype)):5} offset {offset:12} bytes {size:12}")


if __name__ == "__main__":
    main()
