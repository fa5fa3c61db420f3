"""SOURCE kinds 3 and 4: a Hugging Face folder (config.json, the weights, the tokenizer) of GPT-2
or of the Llama family (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM). Weights become
the reference model's names through architectures.py's table; what run.c does not implement is
refused naming the config key."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from architectures import layer_name, model_name
from config import (BIAS_ATTN_OUT, BIAS_FFN, BIAS_QKV, GPTConfig, Weights, as_arrays, same, strip_prefix, take,
                    weights_of, with_tokenizer)
from output_files import ExportError
from safetensors import read_safetensors, read_safetensors_folder
from source_checkpoint import read_checkpoint
from tokenizer_files import bpe_vocab, folder_stop_ids, read_tokenizer_source
from weight_file import TokenizerData


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
    return weights_of(cfg, ours, str(folder)), tok


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


def load_hf_llama(folder: Path, conf: dict, arch: str, tokenizer: Path | None) -> tuple[Weights, TokenizerData]:
    where = f"{folder}/config.json"
    cfg = llama_config(conf, arch, where)
    sd = strip_prefix(read_safetensors_folder(folder), "model.")
    tok = read_tokenizer_source(tokenizer if tokenizer is not None else folder)
    where = str(folder)
    hf = lambda layer, part, kind="weight": take(sd, layer_name("hf", layer, part, kind), where)  # noqa: E731
    wte = take(sd, model_name("hf", "embed"), where)
    with_tokenizer(cfg, wte.shape[0], tok, where)
    ours = {model_name("ours", "embed"): wte, model_name("ours", "norm"): take(sd, model_name("hf", "norm"), where)}
    head = sd.pop(model_name("hf", "head"), None)
    if head is not None and not (cfg.tied_head and same(head, wte)):
        cfg.tied_head = False
    ours[model_name("ours", "head")] = wte if cfg.tied_head else head if head is not None else \
        take(sd, model_name("hf", "head"), where)
    for i in range(cfg.n_layer):
        o = lambda part, kind="weight": layer_name("ours", i, part, kind)  # noqa: E731
        q, k, v = hf(i, "q"), hf(i, "k"), hf(i, "v")
        for part, w, heads in (("q", q, cfg.n_head), ("k", k, cfg.n_kv_head), ("v", v, cfg.n_kv_head)):
            if w.shape != (heads * cfg.head_size, cfg.n_embd):  # config.json's heads and head size, named
                raise ExportError(f"{where}: tensor '{layer_name('hf', i, part)}' has shape {w.shape}, expected "
                                  f"{(heads * cfg.head_size, cfg.n_embd)} ({heads} heads of {cfg.head_size} by "
                                  f"hidden_size {cfg.n_embd}, as config.json says)")
        ours[o("qkv")] = np.concatenate([adjacent_pairs(q, cfg.n_head), adjacent_pairs(k, cfg.n_kv_head), v])
        if cfg.has_bias(BIAS_QKV):
            qb, kb, vb = hf(i, "q", "bias"), hf(i, "k", "bias"), hf(i, "v", "bias")
            ours[o("qkv", "bias")] = np.concatenate([adjacent_pairs(qb, cfg.n_head), adjacent_pairs(kb, cfg.n_kv_head), vb])
        ours[o("attn_out")] = hf(i, "attn_out")
        if cfg.has_bias(BIAS_ATTN_OUT):
            ours[o("attn_out", "bias")] = hf(i, "attn_out", "bias")
        ours[o("attn_norm")] = hf(i, "attn_norm")
        ours[o("ffn_norm")] = hf(i, "ffn_norm")
        for part in ("gate", "up", "down"):
            ours[o(part)] = hf(i, part)
            if cfg.has_bias(BIAS_FFN):
                ours[o(part, "bias")] = hf(i, part, "bias")
    left = [k for k in sd if not k.endswith("rotary_emb.inv_freq")]  # a buffer some files keep
    if left:
        raise ExportError(f"{where}: tensors run.c has no place for: {', '.join(sorted(left)[:5])}")
    return weights_of(cfg, ours, where), tok
