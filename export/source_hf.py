"""SOURCE kinds 3 and 4: a Hugging Face folder (config.json, the weights, the tokenizer) of GPT-2
or of the Llama family (Llama, Qwen2, Mistral, and the architectures that change its block in a
few named places: Qwen3, SmolLM3, Granite, OLMo 2, Gemma 2 and 3, Phi-3; LLAMA_FAMILY). Weights become
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

LLAMA_FAMILY = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "MistralForCausalLM": "mistral",
                "Qwen3ForCausalLM": "qwen3", "SmolLM3ForCausalLM": "smollm3", "GraniteForCausalLM": "granite",
                "Olmo2ForCausalLM": "olmo2", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3",
                "Phi3ForCausalLM": "phi3"}
# What each architecture changes in Llama's block, as its modeling_*.py in transformers does it:
#   qwen3    an RMSNorm over each head of the query and the key, before rotary positions; head_dim
#   smollm3  no rotary positions in the layers no_rope_layers marks 0 (every fourth by default)
#   granite  embedding, attention, residual multipliers; the logits divided by logits_scaling
#   olmo2    norms after attention and the feed-forward only, RMSNorms of the whole query and key
#   gemma2   norms before and after each sublayer (weights as 1 + w), GEGLU, the embedding times
#            sqrt(hidden_size), query_pre_attn_scalar, sliding windows on alternate layers, caps
#            on the scores and the logits
#   gemma3   gemma2's without the caps on the scores, with qwen3's norms of each head, windows on
#            five layers of six with their own rotary base
#   phi3     query, key and value fused (qkv_proj) and gate and up fused (gate_up_proj), rotary
#            positions on part of each head, LongRoPE
GEMMA = ("gemma2", "gemma3")


def adjacent_pairs(w: np.ndarray, n_heads: int, rotated: int = 0) -> np.ndarray:
    """Query or key rows (or a bias, or a norm's weight) of Hugging Face's rotary layout, where
    dimension i of a head pairs with i + r/2 ("rotate_half"; r the rotated dimensions, the first
    of each head: all unless given), permuted into adjacent pairs (2i, 2i+1), the layout of
    model.h and of Meta's original weights: HF's row j * r/2 + i is pair i's member j; the rows
    past r stay. The same attention scores, with run.c's rotation."""
    shape = w.shape
    hs = shape[0] // n_heads
    r = rotated or hs
    heads = w.reshape(n_heads, hs, *shape[1:])
    paired = heads[:, :r].reshape(n_heads, 2, r // 2, *shape[1:]).swapaxes(1, 2).reshape(n_heads, r, *shape[1:])
    return np.ascontiguousarray(np.concatenate([paired, heads[:, r:]], axis=1)).reshape(shape)


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


class ConfigKeys:
    """config.json's keys, read as numbers, flags and lists, each refused by name when it is not
    what it must be."""

    def __init__(self, conf: dict, where: str):
        self.conf, self.where = conf, where

    def refuse(self, key: str, why: str) -> ExportError:
        return ExportError(f"{self.where}: config key '{key}' {why}: run.c does not implement it")

    def number(self, key: str, default=None) -> float:
        value = self.conf.get(key, default)
        if value is None and default is None and key not in self.conf:
            raise ExportError(f"{self.where}: config key '{key}' is missing")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ExportError(f"{self.where}: config key '{key}' is {value!r}, expected a number")
        return value

    def integer(self, key: str, default=None) -> int:
        value = self.number(key, default)
        if value != int(value):
            raise ExportError(f"{self.where}: config key '{key}' is {value!r}, expected a whole number")
        return int(value)

    def layer_list(self, key: str, n_layer: int, allowed: tuple) -> list | None:
        value = self.conf.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != n_layer or any(v not in allowed for v in value):
            raise ExportError(f"{self.where}: config key '{key}' is {str(value)[:80]}, expected a list of {n_layer} of "
                              f"{', '.join(map(repr, allowed))}")
        return value


def rope_settings(keys: ConfigKeys, arch: str, head_size: int, rotated: int) -> dict:
    """The rotary positions' base and frequencies as GPTConfig takes them: rope_theta, and from
    rope_scaling Llama 3's frequencies, a linear factor's (Gemma 3's global layers) or LongRoPE's
    (Phi-3: short and long frequencies, the context the short ones serve, the factor that scales
    cos and sin)."""
    conf = keys.conf
    params = conf.get("rope_parameters") if isinstance(conf.get("rope_parameters"), dict) else None
    if params and arch == "gemma3" and "full_attention" in params:  # transformers 5's per layer type
        params = params["full_attention"]
    theta = float(keys.number("rope_theta", (params or {}).get("rope_theta", 1e6 if arch == "gemma3" else
                                                                   2e6 if arch == "smollm3" else 10000.0)))
    scaling = conf.get("rope_scaling") or (params if params and params.get("rope_type", "default") != "default" else None)
    out = {"rope_theta": theta}
    if scaling is None:
        return out
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
    base = [theta ** (-i / rotated) for i in range(0, rotated, 2)]
    if kind == "default":
        return out
    if kind == "llama3" and arch in ("llama", "smollm3", "granite"):
        out["rope_freqs"] = llama3_frequencies(theta, rotated, scaling)
    elif kind == "linear" and arch == "gemma3":
        factor = float(scaling.get("factor", 1.0))
        if not factor > 0:
            raise keys.refuse("rope_scaling", f"has a linear factor of {factor}")
        out["rope_freqs"] = [f / factor for f in base]
    elif kind in ("longrope", "su") and arch == "phi3":
        try:
            short, long = [float(v) for v in scaling["short_factor"]], [float(v) for v in scaling["long_factor"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ExportError(f"{keys.where}: rope_scaling of type longrope lacks {e}") from e
        if len(short) != rotated // 2 or len(long) != rotated // 2 or min(short + long) <= 0:
            raise ExportError(f"{keys.where}: rope_scaling's short_factor and long_factor have {len(short)} and "
                              f"{len(long)} factors, expected {rotated // 2} positive ones (half the rotated dimensions)")
        original = keys.integer("original_max_position_embeddings")
        longest = keys.integer("max_position_embeddings")
        factor = float(scaling.get("factor") or longest / original)
        attention = scaling.get("attention_factor")
        attention = float(attention) if attention is not None else \
            1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
        out.update(rope_freqs=[f / s for f, s in zip(base, short)], rope_freqs_long=[f / s for f, s in zip(base, long)],
                   rope_original=original, rope_scale=attention)
    else:
        raise keys.refuse("rope_scaling", f"has type '{kind}' (read: llama3's for Llama, linear for Gemma 3, longrope "
                                          "for Phi-3)")
    return out


def layer_rows(keys: ConfigKeys, arch: str, n_layer: int, n_ctx: int, theta: float) -> list | None:
    """The layer table's rows the config implies (model.h): Gemma's sliding windows and their rotary
    base, SmolLM3's layers without rotary positions, Phi-3's window on every layer; None: every
    layer alike."""
    conf = keys.conf
    if arch == "smollm3":
        interval = keys.integer("no_rope_layer_interval", 4)
        rope = keys.layer_list("no_rope_layers", n_layer, (0, 1)) or [int((i + 1) % interval != 0) for i in range(n_layer)]
        if conf.get("use_sliding_window"):
            raise keys.refuse("use_sliding_window", "is true (sliding-window attention)")
        return [{"rotary": bool(r), "rope_theta": theta if r else 0.0} for r in rope]
    if arch in GEMMA:
        window = keys.integer("sliding_window", 4096)
        pattern = keys.integer("sliding_window_pattern", 2 if arch == "gemma2" else 6)
        types = keys.layer_list("layer_types", n_layer, ("sliding_attention", "full_attention")) or \
            ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layer)]
        local = theta
        if arch == "gemma3":
            params = conf.get("rope_parameters") if isinstance(conf.get("rope_parameters"), dict) else {}
            local = float(keys.number("rope_local_base_freq", params.get("sliding_attention", {}).get("rope_theta", 10000.0)))
            if local == theta and conf.get("rope_scaling"):
                raise keys.refuse("rope_local_base_freq", "is the global layers' base, whose scaling it must not share")
        if window <= 0:
            raise keys.refuse("sliding_window", f"is {window}")
        return [{"window": window if kind == "sliding_attention" and window < n_ctx else 0,
                 "rope_theta": local if kind == "sliding_attention" else theta} for kind in types]
    if arch == "phi3" and conf.get("sliding_window") is not None:  # transformers applies it to every layer
        window = keys.integer("sliding_window")
        return [{"window": window if 0 < window < n_ctx else 0}] * n_layer
    return None


def llama_config(conf: dict, arch: str, where: str) -> GPTConfig:
    """The reference configuration of a Hugging Face Llama-family config.json (and of the
    architectures LLAMA_FAMILY lists beside it). What run.c does not implement is refused,
    naming the config key."""
    keys = ConfigKeys(conf, where)
    for key in ("num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size"):
        if conf.get(key):
            raise keys.refuse(key, f"is {conf[key]} (mixture of experts)")
    for key in ("qk_norm", "use_qk_norm", "qk_layernorm"):
        if conf.get(key):
            raise keys.refuse(key, "is set (normalised queries and keys)")
    act_key = "hidden_activation" if arch in GEMMA else "hidden_act"
    act = conf.get(act_key, "gelu_pytorch_tanh" if arch in GEMMA else "silu")
    if arch in GEMMA and act not in ("gelu_pytorch_tanh", "gelu"):
        raise keys.refuse(act_key, f"is '{act}', not gelu_pytorch_tanh (GEGLU)")
    if arch not in GEMMA and act != "silu":
        raise keys.refuse("hidden_act", f"is '{act}', not silu (SwiGLU)")
    n_ctx = keys.integer("max_position_embeddings", 131072 if arch == "gemma3" else None)
    if arch in ("qwen2", "qwen3") and conf.get("use_sliding_window"):
        raise keys.refuse("use_sliding_window", "is true (sliding-window attention)")
    if arch == "mistral" and conf.get("sliding_window") is not None and keys.number("sliding_window") < n_ctx:
        raise keys.refuse("sliding_window", f"is {conf['sliding_window']}, less than the context {n_ctx} "
                                            "(sliding-window attention)")
    if arch == "gemma3" and conf.get("use_bidirectional_attention"):
        raise keys.refuse("use_bidirectional_attention", "is true (attention that sees later tokens)")
    n_embd, n_head = keys.integer("hidden_size"), keys.integer("num_attention_heads", 8 if arch == "gemma3" else None)
    n_kv_head = keys.integer("num_key_value_heads", n_head)
    head_dim = keys.integer("head_dim") if conf.get("head_dim") is not None else 256 if arch in GEMMA else 0
    if n_head <= 0 or (not head_dim and n_embd % n_head) or n_kv_head <= 0 or n_head % n_kv_head:
        raise ExportError(f"{where}: hidden_size {n_embd}, num_attention_heads {n_head} and num_key_value_heads "
                          f"{n_kv_head} do not divide")
    if head_dim < 0 or head_dim % 2 or head_dim > 1 << 16:
        raise ExportError(f"{where}: head_dim is {head_dim}, expected an even number from 2 to 65536")
    head_size = head_dim or n_embd // n_head
    partial = keys.number("partial_rotary_factor", 1.0)
    rotated = int(head_size * partial)
    if not 0 < partial <= 1 or rotated % 2 or (partial != 1.0 and arch != "phi3"):
        raise keys.refuse("partial_rotary_factor", f"is {partial} (rotary positions on part of a head)")
    rope = rope_settings(keys, arch, head_size, rotated)
    bias = BIAS_QKV if arch == "qwen2" else 0  # Qwen2's query, key and value projections have biases
    if conf.get("attention_bias"):
        bias |= BIAS_QKV | BIAS_ATTN_OUT
    if conf.get("mlp_bias"):
        bias |= BIAS_FFN
    n_layer = keys.integer("num_hidden_layers")
    cfg = GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_hidden=keys.integer("intermediate_size"),
                    n_ctx=n_ctx, ln_eps=float(keys.number("rms_norm_eps", 1e-6)), bias=bias, pos="rotary", norm="rms",
                    ffn="geglu" if arch in GEMMA else "swiglu", gelu="erf" if act == "gelu" else "tanh",
                    n_kv_head=n_kv_head, tied_head=bool(conf.get("tie_word_embeddings", arch in GEMMA)),
                    head_dim=head_dim if head_dim != n_embd // n_head or n_embd % n_head else 0,
                    rotary_dims=rotated if rotated != head_size else 0, **rope)
    cfg.layers = layer_rows(keys, arch, n_layer, n_ctx, rope["rope_theta"])
    if arch in ("qwen3", "gemma3"):
        cfg.qk_norm = "head"
    if arch == "olmo2":
        cfg.qk_norm, cfg.norm_before, cfg.norm_after = "whole", False, True
    if arch in GEMMA:  # the embedding times sqrt(hidden_size) in float32, as transformers computes in float32
        cfg.norm_after = True
        cfg.embed_scale = float(np.sqrt(np.float32(n_embd)))
        cfg.attn_scale = float(np.float32(keys.number("query_pre_attn_scalar", head_size) ** -0.5))
        if arch == "gemma2":
            cfg.attn_softcap = float(keys.number("attn_logit_softcapping", 50.0) or 0.0)
        cap = conf.get("final_logit_softcapping", 30.0 if arch == "gemma2" else None)
        cfg.logit_softcap = float(keys.number("final_logit_softcapping")) if cap is not None else 0.0
    if arch == "granite":
        cfg.embed_scale = float(keys.number("embedding_multiplier", 1.0))
        cfg.attn_scale = float(keys.number("attention_multiplier", 1.0))
        cfg.residual_scale = float(keys.number("residual_multiplier", 1.0))
        cfg.logit_divisor = float(keys.number("logits_scaling", 1.0))
    return cfg


def load_hf_llama(folder: Path, conf: dict, arch: str, tokenizer: Path | None) -> tuple[Weights, TokenizerData]:
    where = f"{folder}/config.json"
    cfg = llama_config(conf, arch, where)
    sd = strip_prefix(read_safetensors_folder(folder), "model.")
    tok = read_tokenizer_source(tokenizer if tokenizer is not None else folder)
    where = str(folder)
    hf = lambda layer, part, kind="weight": take(sd, layer_name("hf", layer, part, kind, arch), where)  # noqa: E731
    norm = (lambda w: w + np.float32(1)) if arch in GEMMA else (lambda w: w)  # Gemma's RMSNorm: x (1 + w)
    wte = take(sd, model_name("hf", "embed"), where)
    with_tokenizer(cfg, wte.shape[0], tok, where)
    ours = {model_name("ours", "embed"): wte, model_name("ours", "norm"): norm(take(sd, model_name("hf", "norm"), where))}
    head = sd.pop(model_name("hf", "head"), None)
    if head is not None and not (cfg.tied_head and same(head, wte)):
        cfg.tied_head = False
    ours[model_name("ours", "head")] = wte if cfg.tied_head else head if head is not None else \
        take(sd, model_name("hf", "head"), where)
    hs, r = cfg.head_size, cfg.rotated
    rows = {"q": cfg.n_head * hs, "k": cfg.n_kv_head * hs, "v": cfg.n_kv_head * hs}
    for i in range(cfg.n_layer):
        o = lambda part, kind="weight": layer_name("ours", i, part, kind)  # noqa: E731
        if arch == "phi3":  # query, key and value in one matrix, queries first
            qkv = hf(i, "qkv")
            q, k, v = np.split(qkv, np.cumsum([rows["q"], rows["k"]]))
        else:
            q, k, v = hf(i, "q"), hf(i, "k"), hf(i, "v")
        for part, w in (("q", q), ("k", k), ("v", v)):
            if w.shape != (rows[part], cfg.n_embd):  # config.json's heads and head size, named
                name = layer_name("hf", i, "qkv" if arch == "phi3" else part, arch=arch)
                raise ExportError(f"{where}: tensor '{name}' has shape {w.shape}, expected {(rows[part], cfg.n_embd)} "
                                  f"({rows[part] // hs} heads of {hs} by hidden_size {cfg.n_embd}, as config.json says)")
        ours[o("qkv")] = np.concatenate([adjacent_pairs(q, cfg.n_head, r), adjacent_pairs(k, cfg.n_kv_head, r), v])
        if cfg.has_bias(BIAS_QKV):
            qb, kb, vb = hf(i, "q", "bias"), hf(i, "k", "bias"), hf(i, "v", "bias")
            ours[o("qkv", "bias")] = np.concatenate([adjacent_pairs(qb, cfg.n_head, r), adjacent_pairs(kb, cfg.n_kv_head, r),
                                                    vb])
        if cfg.qk_norm == "head":  # a head's weights, in the rows' new order
            ours[o("q_norm")] = adjacent_pairs(norm(hf(i, "q_norm")), 1, r)
            ours[o("k_norm")] = adjacent_pairs(norm(hf(i, "k_norm")), 1, r)
        elif cfg.qk_norm == "whole":
            ours[o("q_norm")] = adjacent_pairs(hf(i, "q_norm"), cfg.n_head, r)
            ours[o("k_norm")] = adjacent_pairs(hf(i, "k_norm"), cfg.n_kv_head, r)
        ours[o("attn_out")] = hf(i, "attn_out")
        if cfg.has_bias(BIAS_ATTN_OUT):
            ours[o("attn_out", "bias")] = hf(i, "attn_out", "bias")
        if cfg.norm_before:
            ours[o("attn_norm")] = norm(hf(i, "attn_norm"))
            ours[o("ffn_norm")] = norm(hf(i, "ffn_norm"))
        if cfg.norm_after:
            ours[o("attn_post_norm")] = norm(hf(i, "attn_post_norm"))
            ours[o("ffn_post_norm")] = norm(hf(i, "ffn_post_norm"))
        if arch == "phi3":  # gate and up in one matrix, the gate first
            ours[o("gate")], ours[o("up")] = np.split(hf(i, "gate_up"), 2)
            ours[o("down")] = hf(i, "down")
            continue
        for part in ("gate", "up", "down"):
            ours[o(part)] = hf(i, part)
            if cfg.has_bias(BIAS_FFN):
                ours[o(part, "bias")] = hf(i, part, "bias")
    left = [k for k in sd if not k.endswith("rotary_emb.inv_freq")]  # a buffer some files keep
    if left:
        raise ExportError(f"{where}: tensors run.c has no place for: {', '.join(sorted(left)[:5])}")
    return weights_of(cfg, ours, where), tok
