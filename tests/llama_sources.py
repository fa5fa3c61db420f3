"""The Llama family's SOURCE kinds, written the way their own tools write them, and independent
references that compute logits from those files the way their own code does.

Writers: a Hugging Face folder (config.json, model.safetensors or shards with
model.safetensors.index.json, in float32, float16 or bfloat16; queries and keys in Hugging
Face's rotate_half layout, as its conversion scripts store them), a llama2.c ckpt.pt (its
train.py's dict: model, optimizer, model_args, iter_num, best_val_loss, config) and llama2.c
.bin files (its export.py's version 0 and 1 layouts).

References: hf_logits() follows Hugging Face's LlamaForCausalLM / Qwen2ForCausalLM forward
(rotate_half on the halves of each head, repeat_kv, RMSNorm computed as x * rsqrt(mean(x^2) +
eps) * weight, SiLU-gated MLP) from the safetensors tensors by their own names;
llama2c_logits() follows llama2.c's model.py (rotation of adjacent pairs as complex numbers,
feed_forward w2(silu(w1 x) * w3 x)) from the checkpoint's state dict. Neither shares code with
export.py or model.py, so an export that permuted, fused or named anything wrongly would part
from them."""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from model import BIAS_ATTN_OUT, BIAS_FFN, BIAS_QKV, GPT

# ---- the architectures that change Llama's block -------------------------------------------

_LLAMA = dict(norm="rms", ffn="swiglu", pos="rotary", bias=0, vocab_size=0, vocab_padded=0)
# Small random-weight models with each architecture's switches (GPTConfig's keywords), as its
# real configs set them: a window shorter than a 64-token prompt, a layer without rotary
# positions, LongRoPE past its original context, heads wider than n_embd / n_head.
ARCH_MODELS = {
    "qwen3": dict(n_layer=2, n_head=4, n_kv_head=2, n_embd=128, n_hidden=256, n_ctx=96, tied_head=True, head_dim=64,
                  qk_norm="head", rope_theta=1e6, **_LLAMA),
    "smollm3": dict(n_layer=4, n_head=4, n_kv_head=1, n_embd=128, n_hidden=256, n_ctx=96, tied_head=True, rope_theta=2e6,
                    layers=[{}, {}, {}, {"rotary": False}], **_LLAMA),
    "granite": dict(n_layer=2, n_head=4, n_kv_head=2, n_embd=128, n_hidden=256, n_ctx=96, tied_head=True, embed_scale=12.0,
                    attn_scale=0.015625, residual_scale=0.22, logit_divisor=8.0, **_LLAMA),
    "olmo2": dict(n_layer=2, n_head=4, n_kv_head=4, n_embd=128, n_hidden=256, n_ctx=96, tied_head=False, qk_norm="whole",
                  norm_before=False, norm_after=True, rope_theta=500000.0, **_LLAMA),
    "gemma2": dict(n_layer=3, n_head=4, n_kv_head=2, n_embd=96, head_dim=32, n_hidden=256, n_ctx=96, tied_head=True,
                   norm_after=True, attn_softcap=50.0, logit_softcap=30.0, gelu="tanh",
                   layers=[{"window": 8}, {}, {"window": 8}], **{**_LLAMA, "ffn": "geglu"}),
    "gemma3": dict(n_layer=3, n_head=4, n_kv_head=1, n_embd=96, head_dim=32, n_hidden=256, n_ctx=96, tied_head=True,
                   norm_after=True, qk_norm="head", gelu="tanh", rope_theta=1e6,
                   layers=[{"window": 12, "rope_theta": 10000.0}, {"window": 12, "rope_theta": 10000.0}, {}],
                   **{**_LLAMA, "ffn": "geglu"}),
    "phi3": dict(n_layer=2, n_head=4, n_kv_head=4, n_embd=128, n_hidden=256, n_ctx=96, tied_head=False, rotary_dims=24,
                 rope_original=32, rope_freqs=[10000.0 ** (-i / 24) for i in range(0, 24, 2)],
                 rope_freqs_long=[10000.0 ** (-i / 24) / (1 + i / 4) for i in range(0, 24, 2)],
                 layers=[{"window": 48}] * 2, **_LLAMA),
}

# ---- writing the files ------------------------------------------------------------------------


def to_rotate_half(w: torch.Tensor, n_heads: int, rotated: int = 0) -> torch.Tensor:
    """Adjacent pairs (2i, 2i+1) -> Hugging Face's layout (i, i + r/2) of each head's first r
    dimensions (all unless rotated says), the rest kept: what its conversion of Meta's weights
    does (convert_llama_weights_to_hf.py's permute)."""
    shape = w.shape
    hs = shape[0] // n_heads
    r = rotated or hs
    heads = w.reshape(n_heads, hs, *shape[1:])
    halves = heads[:, :r].reshape(n_heads, r // 2, 2, *shape[1:]).transpose(1, 2).reshape(n_heads, r, *shape[1:])
    return torch.cat([halves, heads[:, r:]], dim=1).reshape(shape)


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor], dtype: str) -> None:
    """safetensors: u64 length of a JSON header (padded with spaces to 8 bytes), the header,
    then each tensor's bytes; dtype F32, F16 or BF16 (the upper half of each float32)."""
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().float().contiguous().numpy()
        if dtype == "F16":
            data = a.astype("<f2").tobytes()
        elif dtype == "BF16":  # round to nearest even, as torch's conversion does
            bits = a.view(np.uint32).astype(np.uint64)
            data = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            data = a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


HF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM",
                    "qwen3": "Qwen3ForCausalLM", "smollm3": "SmolLM3ForCausalLM", "granite": "GraniteForCausalLM",
                    "olmo2": "Olmo2ForCausalLM", "gemma2": "Gemma2ForCausalLM", "gemma3": "Gemma3ForCausalLM",
                    "phi3": "Phi3ForCausalLM"}
GEMMA = ("gemma2", "gemma3")


def hf_state_dict(model: GPT, arch: str) -> dict[str, torch.Tensor]:
    """The reference model's weights under Hugging Face's names and layout for arch: queries and
    keys (and their norms' weights) in halves, Gemma's norms as w with the model's 1 + w,
    Phi-3's projections fused, OLMo 2's and Gemma's norms by their own names."""
    c, hs, r = model.config, model.config.head_size, model.config.rotated
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    norm = (lambda w: w - 1) if arch in GEMMA else (lambda w: w)
    out = {"model.embed_tokens.weight": sd["transformer.wte.weight"], "model.norm.weight": norm(sd["transformer.ln_f.weight"])}
    if not c.tied_head:
        out["lm_head.weight"] = sd["lm_head.weight"]
    q_rows, kv_rows = c.n_head * hs, c.n_kv_head * hs
    for i in range(c.n_layer):
        o, h = f"transformer.h.{i}.", f"model.layers.{i}."
        w = sd[o + "attn.c_attn.weight"]
        q, k, v = to_rotate_half(w[:q_rows], c.n_head, r), to_rotate_half(w[q_rows:q_rows + kv_rows], c.n_kv_head, r), \
            w[q_rows + kv_rows:]
        if arch == "phi3":
            out[h + "self_attn.qkv_proj.weight"] = torch.cat([q, k, v])
        else:
            out[h + "self_attn.q_proj.weight"], out[h + "self_attn.k_proj.weight"] = q, k
            out[h + "self_attn.v_proj.weight"] = v
        if c.has_bias(BIAS_QKV):
            b = sd[o + "attn.c_attn.bias"]
            out[h + "self_attn.q_proj.bias"] = to_rotate_half(b[:q_rows], c.n_head, r)
            out[h + "self_attn.k_proj.bias"] = to_rotate_half(b[q_rows:q_rows + kv_rows], c.n_kv_head, r)
            out[h + "self_attn.v_proj.bias"] = b[q_rows + kv_rows:]
        if c.qk_norm != "none":
            heads = (c.n_head, c.n_kv_head) if c.qk_norm == "whole" else (1, 1)
            out[h + "self_attn.q_norm.weight"] = norm(to_rotate_half(sd[o + "attn.q_norm.weight"], heads[0], r))
            out[h + "self_attn.k_norm.weight"] = norm(to_rotate_half(sd[o + "attn.k_norm.weight"], heads[1], r))
        out[h + "self_attn.o_proj.weight"] = sd[o + "attn.c_proj.weight"]
        if c.has_bias(BIAS_ATTN_OUT):
            out[h + "self_attn.o_proj.bias"] = sd[o + "attn.c_proj.bias"]
        if c.norm_before:
            out[h + "input_layernorm.weight"] = norm(sd[o + "ln_1.weight"])
            before_ffn = "pre_feedforward_layernorm" if arch in GEMMA else "post_attention_layernorm"
            out[h + before_ffn + ".weight"] = norm(sd[o + "ln_2.weight"])
        if c.norm_after:
            out[h + "post_attention_layernorm.weight"] = norm(sd[o + "attn.post_norm.weight"])
            out[h + "post_feedforward_layernorm.weight"] = norm(sd[o + "mlp.post_norm.weight"])
        if arch == "phi3":
            out[h + "mlp.gate_up_proj.weight"] = torch.cat([sd[o + "mlp.gate.weight"], sd[o + "mlp.c_fc.weight"]])
            out[h + "mlp.down_proj.weight"] = sd[o + "mlp.c_proj.weight"]
            continue
        for ours, theirs in (("gate", "gate_proj"), ("c_fc", "up_proj"), ("c_proj", "down_proj")):
            out[h + f"mlp.{theirs}.weight"] = sd[o + f"mlp.{ours}.weight"]
            if c.has_bias(BIAS_FFN):
                out[h + f"mlp.{theirs}.bias"] = sd[o + f"mlp.{ours}.bias"]
    return out


def hf_config(model: GPT, arch: str, **extra) -> dict:
    """config.json for the reference model as arch's checkpoints write it (their keys for what
    the model's configuration switches on)."""
    c = model.config
    conf = {"architectures": [HF_ARCHITECTURES[arch]],
            "model_type": arch, "hidden_size": c.n_embd, "intermediate_size": c.n_hidden,
            "num_hidden_layers": c.n_layer, "num_attention_heads": c.n_head, "num_key_value_heads": c.n_kv_head,
            "max_position_embeddings": c.n_ctx, "rms_norm_eps": c.ln_eps, "rope_theta": c.rope_theta,
            "vocab_size": c.vocab_padded, "hidden_act": "silu", "tie_word_embeddings": c.tied_head,
            "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    if c.head_dim:
        conf["head_dim"] = c.head_dim
    rows = c.layer_rows()
    if arch == "llama":
        conf.update(attention_bias=bool(c.bias & BIAS_QKV), mlp_bias=bool(c.bias & BIAS_FFN), rope_scaling=None)
    if arch in ("qwen2", "qwen3"):
        conf.update(use_sliding_window=False, sliding_window=c.n_ctx)
    if arch == "mistral":
        conf.update(sliding_window=None)
    if arch == "smollm3":
        conf.update(no_rope_layers=[int(row["rotary"]) for row in rows], use_sliding_window=False)
    if arch == "granite":
        conf.update(embedding_multiplier=c.embed_scale, attention_multiplier=c.attn_scale,
                    residual_multiplier=c.residual_scale, logits_scaling=c.logit_divisor)
    if arch in GEMMA:
        del conf["hidden_act"]
        windows = [row["window"] for row in rows]
        conf.update(hidden_activation="gelu_pytorch_tanh", head_dim=c.head_size,
                    query_pre_attn_scalar=round(c.query_scale ** -2), sliding_window=max(windows),
                    layer_types=["sliding_attention" if w else "full_attention" for w in windows],
                    final_logit_softcapping=c.logit_softcap or None)
        if arch == "gemma2":
            conf.update(attn_logit_softcapping=c.attn_softcap or None)
        else:
            conf.update(rope_local_base_freq=next(r["rope_theta"] for r in rows if r["window"]), rope_scaling=None)
    if arch == "phi3":
        conf.update(partial_rotary_factor=c.rotated / c.head_size, sliding_window=max(r["window"] for r in rows) or None)
        if c.rope_freqs_long is not None:  # LongRoPE: factors that divide the base frequencies
            base = [c.rope_theta ** (-i / c.rotated) for i in range(0, c.rotated, 2)]
            conf.update(original_max_position_embeddings=c.rope_original,
                        rope_scaling={"type": "longrope", "short_factor": [b / f for b, f in zip(base, c.rope_freqs)],
                                      "long_factor": [b / f for b, f in zip(base, c.rope_freqs_long)]})
    conf.update(extra)
    return conf


def write_hf_folder(folder: Path, model: GPT, arch: str, dtype: str = "F32", shards: int = 1,
                    tokenizer_files: dict[str, bytes] | None = None, **config) -> Path:
    """A Hugging Face folder of model: config.json, the weights (one file or `shards` shards
    with an index) and tokenizer files (name -> bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("model*.safetensors*"):
        old.unlink()
    (folder / "config.json").write_text(json.dumps(hf_config(model, arch, **config), indent=2))
    sd = hf_state_dict(model, arch)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", sd, dtype)
    else:
        names = list(sd)
        weight_map = {}
        for s in range(shards):
            part = {n: sd[n] for n in names[s::shards]}
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(folder / file, part, dtype)
            weight_map.update({n: file for n in part})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    for name, data in (tokenizer_files or {}).items():
        (folder / name).write_bytes(data)
    return folder


def llama2c_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The reference model's weights under llama2.c's names (adjacent pairs already)."""
    c, hs = model.config, model.config.head_size
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = {"tok_embeddings.weight": sd["transformer.wte.weight"], "norm.weight": sd["transformer.ln_f.weight"],
           "output.weight": sd["transformer.wte.weight"] if c.tied_head else sd["lm_head.weight"]}
    q_rows, kv_rows = c.n_head * hs, c.n_kv_head * hs
    for i in range(c.n_layer):
        o, h = f"transformer.h.{i}.", f"layers.{i}."
        w = sd[o + "attn.c_attn.weight"]
        out[h + "attention.wq.weight"] = w[:q_rows]
        out[h + "attention.wk.weight"] = w[q_rows:q_rows + kv_rows]
        out[h + "attention.wv.weight"] = w[q_rows + kv_rows:]
        out[h + "attention.wo.weight"] = sd[o + "attn.c_proj.weight"]
        out[h + "attention_norm.weight"] = sd[o + "ln_1.weight"]
        out[h + "ffn_norm.weight"] = sd[o + "ln_2.weight"]
        out[h + "feed_forward.w1.weight"] = sd[o + "mlp.gate.weight"]
        out[h + "feed_forward.w2.weight"] = sd[o + "mlp.c_proj.weight"]
        out[h + "feed_forward.w3.weight"] = sd[o + "mlp.c_fc.weight"]
    return out


def llama2c_args(model: GPT) -> dict:
    c = model.config
    return dict(dim=c.n_embd, n_layers=c.n_layer, n_heads=c.n_head, n_kv_heads=c.n_kv_head,
                vocab_size=c.vocab_padded, multiple_of=32, max_seq_len=c.n_ctx, dropout=0.0)


def write_llama2c_checkpoint(path: Path, model: GPT, compiled: bool = True) -> Path:
    """llama2.c's train.py checkpoint: state dict (keys with torch.compile's _orig_mod. prefix
    when compiled), optimizer state, model_args, iteration, loss, training config."""
    sd = llama2c_state_dict(model)
    if model.config.tied_head:  # one tensor under both names, as the tied nn.Module saves it
        sd["output.weight"] = sd["tok_embeddings.weight"]
    prefix = "_orig_mod." if compiled else ""
    params = list(sd.values())
    optimizer = {"state": {i: {"step": torch.tensor(10.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                           for i, p in enumerate(params[:3])},
                 "param_groups": [{"lr": 5e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "params": [0, 1, 2]}]}
    torch.save({"model": {prefix + k: v for k, v in sd.items()}, "optimizer": optimizer,
                "model_args": llama2c_args(model), "iter_num": 10, "best_val_loss": 2.5,
                "config": {"batch_size": 8, "learning_rate": 5e-4, "dataset": "tinystories"}}, path)
    return path


def write_llama2c_bin(path: Path, model: GPT, version: int = 0) -> Path:
    """llama2.c's export.py: version 0 (legacy_export: 7 int32, weights, rotary tables) or 1
    (version1_export: "ak42", version, 7 int32, tied flag, padding to 256, weights)."""
    c, hs = model.config, model.config.head_size
    sd = llama2c_state_dict(model)
    L = range(c.n_layer)
    f32 = lambda t: t.detach().float().contiguous().numpy().astype("<f4").tobytes()  # noqa: E731
    layers = lambda name: b"".join(f32(sd[f"layers.{i}.{name}"]) for i in L)  # noqa: E731
    hidden = sd["layers.0.feed_forward.w1.weight"].shape[0]
    vocab = c.vocab_padded
    ints = (c.n_embd, hidden, c.n_layer, c.n_head, c.n_kv_head, vocab if c.tied_head or version else -vocab, c.n_ctx)
    if version == 0:
        freqs = 1.0 / (10000.0 ** (torch.arange(0, hs, 2)[: hs // 2].float() / hs))
        angles = torch.outer(torch.arange(c.n_ctx), freqs).float()
        body = [f32(sd["tok_embeddings.weight"]), layers("attention_norm.weight"), layers("attention.wq.weight"),
                layers("attention.wk.weight"), layers("attention.wv.weight"), layers("attention.wo.weight"),
                layers("ffn_norm.weight"), layers("feed_forward.w1.weight"), layers("feed_forward.w2.weight"),
                layers("feed_forward.w3.weight"), f32(sd["norm.weight"]), f32(torch.cos(angles)), f32(torch.sin(angles))]
        head = struct.pack("<7i", *ints)
    else:
        body = [layers("attention_norm.weight"), layers("ffn_norm.weight"), f32(sd["norm.weight"]),
                f32(sd["tok_embeddings.weight"]), layers("attention.wq.weight"), layers("attention.wk.weight"),
                layers("attention.wv.weight"), layers("attention.wo.weight"), layers("feed_forward.w1.weight"),
                layers("feed_forward.w2.weight"), layers("feed_forward.w3.weight")]
        head = struct.pack("<Ii7iB", 0x616B3432, version, *ints, int(c.tied_head))
        head += b"\0" * (256 - len(head))
    if not c.tied_head:
        body.append(f32(sd["output.weight"]))
    path.write_bytes(head + b"".join(body))
    return path


# ---- independent references ------------------------------------------------------------------

def read_safetensors_plain(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a folder's safetensors files, as float32 (a reader of the tests' own)."""
    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        raw = file.read_bytes()
        n = struct.unpack_from("<Q", raw)[0]
        for name, info in json.loads(raw[8:8 + n]).items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            data = raw[8 + n + begin:8 + n + end]
            if info["dtype"] == "BF16":
                arr = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                arr = np.frombuffer(data, {"F32": "<f4", "F16": "<f2"}[info["dtype"]]).astype(np.float32)
            out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _causal_attention(q, k, v, n_rep: int, scaling: float | None = None, softcap: float | None = None,
                      window: int = 0) -> torch.Tensor:
    """q [H, T, hs], k and v [H_kv, T, hs] -> [T, H * hs]; key/value heads repeated n_rep times;
    scores times scaling (1/sqrt(hs) by default), capped by softcap * tanh(s / softcap), and with
    a window a query sees the last `window` positions (itself included), as transformers'
    eager_attention_forward and sliding-window masks do."""
    k, v = k.repeat_interleave(n_rep, dim=0), v.repeat_interleave(n_rep, dim=0)
    T, hs = q.shape[1], q.shape[2]
    scores = q @ k.transpose(1, 2) * (scaling if scaling is not None else 1 / math.sqrt(hs))
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    masked = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    if window:
        masked |= torch.tril(torch.ones(T, T, dtype=torch.bool), -window)
    scores = scores.masked_fill(masked, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, -1)


def _inv_freq(conf: dict, theta: float, r: int, T: int, scaled: bool) -> tuple[torch.Tensor, float]:
    """(inv_freq of the r rotated dimensions, the factor on cos and sin) as
    modeling_rope_utils.py computes them: default, llama3's, linear, longrope (chosen by the
    sequence's length against the original context; attention_factor)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, r, 2, dtype=torch.float64) / r)
    scaling = conf.get("rope_scaling") if scaled else None
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if kind == "llama3":  # wavelengths past the original context divided by factor, those
        # between high and low frequencies interpolated (Hugging Face's _compute_llama3_parameters)
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled_freq = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        return torch.where(medium, (1 - smooth) * scaled_freq / factor + smooth * scaled_freq, scaled_freq), 1.0
    if kind == "linear":
        return inv_freq / scaling["factor"], 1.0
    if kind in ("longrope", "su"):
        original = conf["original_max_position_embeddings"]
        factor = conf["max_position_embeddings"] / original
        attention = scaling.get("attention_factor") or math.sqrt(1 + math.log(factor) / math.log(original))
        ext = torch.tensor(scaling["long_factor"] if T > original else scaling["short_factor"], dtype=torch.float64)
        return inv_freq / ext, attention
    return inv_freq, 1.0


@torch.no_grad()
def hf_logits(folder: Path, ids: list[int]) -> torch.Tensor:
    """Logits [T, vocab rows] of a Hugging Face folder of the Llama family (Llama, Qwen2,
    Mistral, Qwen3, SmolLM3, Granite, OLMo 2, Gemma 2 and 3, Phi-3), computed as its modeling code
    does, from its own tensors: queries and keys rotated by rotate_half (on the first
    partial_rotary_factor of each head) with cos/sin of position * inv_freq; Qwen3's and Gemma 3's
    norm of each query and key head, OLMo 2's of the whole projections, before the rotation;
    Gemma's norms as x (1 + w), before and after each sublayer, its embedding times
    sqrt(hidden_size), GEGLU and caps; OLMo 2's norms after only; Granite's multipliers; Phi-3's
    fused projections; sliding windows on the layers layer_types names."""
    conf = json.loads((folder / "config.json").read_text())
    arch = {v: k for k, v in HF_ARCHITECTURES.items()}[conf["architectures"][0]]
    gemma = arch in GEMMA
    sd = read_safetensors_plain(folder)
    H, Hkv, C = conf["num_attention_heads"], conf["num_key_value_heads"], conf["hidden_size"]
    hs, eps, T = conf.get("head_dim") or C // H, conf["rms_norm_eps"], len(ids)
    r = int(hs * conf.get("partial_rotary_factor", 1.0))
    n_layer = conf["num_hidden_layers"]
    types = conf.get("layer_types") or ["full_attention"] * n_layer
    window = conf.get("sliding_window") or 0

    def tables(theta: float, scaled: bool) -> tuple:
        inv_freq, attention = _inv_freq(conf, theta, r, T, scaled)
        angle = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
        cos = (torch.cat([torch.cos(angle)] * 2, dim=-1) * attention).float()
        return cos, (torch.cat([torch.sin(angle)] * 2, dim=-1) * attention).float()

    full = tables(conf["rope_theta"], True)
    local = tables(conf.get("rope_local_base_freq", conf["rope_theta"]), False) if arch == "gemma3" else full
    rope = conf.get("no_rope_layers") or [1] * n_layer

    def rotate(x, cos, sin):  # the first r dimensions of each head, by halves
        x_rot, x_pass = x[..., :r], x[..., r:]
        half = torch.cat([-x_rot[..., r // 2:], x_rot[..., :r // 2]], dim=-1)
        return torch.cat([x_rot * cos + half * sin, x_pass], dim=-1)

    def norm(x, name):
        w = sd[name + ".weight"]
        return _rms_norm(x, 1.0 + w if gemma else w, eps)

    def linear(x, name):
        y = x @ sd[name + ".weight"].T
        return y + sd[name + ".bias"] if name + ".bias" in sd else y

    x = sd["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * torch.tensor(C ** 0.5, dtype=torch.float32)
    if arch == "granite":
        x = x * conf["embedding_multiplier"]
    scaling = conf["query_pre_attn_scalar"] ** -0.5 if gemma else conf["attention_multiplier"] if arch == "granite" else None
    residual = conf.get("residual_multiplier", 1.0)
    for i in range(n_layer):
        p = f"model.layers.{i}."
        h = x if arch == "olmo2" else norm(x, p + "input_layernorm")
        if arch == "phi3":
            q, k, v = linear(h, p + "self_attn.qkv_proj").split([H * hs, Hkv * hs, Hkv * hs], dim=-1)
        else:
            q, k, v = linear(h, p + "self_attn.q_proj"), linear(h, p + "self_attn.k_proj"), linear(h, p + "self_attn.v_proj")
        if arch == "olmo2":
            q, k = norm(q, p + "self_attn.q_norm"), norm(k, p + "self_attn.k_norm")
        q, k, v = q.view(T, H, hs).transpose(0, 1), k.view(T, Hkv, hs).transpose(0, 1), v.view(T, Hkv, hs).transpose(0, 1)
        if arch in ("qwen3", "gemma3"):
            q, k = norm(q, p + "self_attn.q_norm"), norm(k, p + "self_attn.k_norm")
        sliding = types[i] == "sliding_attention" or (arch == "phi3" and window)
        if rope[i]:
            cos, sin = local if sliding and arch == "gemma3" else full
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = linear(_causal_attention(q, k, v, H // Hkv, scaling, conf.get("attn_logit_softcapping") if arch == "gemma2" else None,
                                     window if sliding else 0), p + "self_attn.o_proj")
        if gemma or arch == "olmo2":
            y = norm(y, p + "post_attention_layernorm")
        x = x + y * residual
        h = x if arch == "olmo2" else norm(x, p + ("pre_feedforward_layernorm" if gemma else "post_attention_layernorm"))
        if arch == "phi3":
            gate, up = linear(h, p + "mlp.gate_up_proj").chunk(2, dim=-1)
        else:
            gate, up = linear(h, p + "mlp.gate_proj"), linear(h, p + "mlp.up_proj")
        act = F.gelu(gate, approximate="tanh") if gemma else F.silu(gate)
        y = linear(act * up, p + "mlp.down_proj")
        if gemma or arch == "olmo2":
            y = norm(y, p + "post_feedforward_layernorm")
        x = x + y * residual
    x = norm(x, "model.norm")
    logits = x @ sd.get("lm_head.weight", sd["model.embed_tokens.weight"]).T
    if arch == "granite":
        logits = logits / conf["logits_scaling"]
    if conf.get("final_logit_softcapping"):
        cap = conf["final_logit_softcapping"]
        logits = torch.tanh(logits / cap) * cap
    return logits


@torch.no_grad()
def llama2c_logits(sd: dict[str, torch.Tensor], args: dict, ids: list[int]) -> torch.Tensor:
    """Logits [T, vocab] of llama2.c weights (its names), computed as its model.py does: each
    head's dimensions taken as complex numbers (2i real, 2i+1 imaginary) times e^(i p f_i)."""
    sd = {k.removeprefix("_orig_mod."): v for k, v in sd.items()}
    H, C = args["n_heads"], args["dim"]
    Hkv, hs, T = args.get("n_kv_heads") or H, C // H, len(ids)
    eps = args.get("norm_eps", 1e-5)
    freqs = 1.0 / (10000.0 ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    rot = torch.polar(torch.ones(T, hs // 2, dtype=torch.float64), torch.arange(T, dtype=torch.float64)[:, None] * freqs)

    def rotate(x):  # [heads, T, hs]
        z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], hs // 2, 2).contiguous()) * rot
        return torch.view_as_real(z).reshape(x.shape).float()

    x = sd["tok_embeddings.weight"][ids]
    for i in range(args["n_layers"]):
        p = f"layers.{i}."
        h = _rms_norm(x, sd[p + "attention_norm.weight"], eps)
        q = (h @ sd[p + "attention.wq.weight"].T).view(T, H, hs).transpose(0, 1)
        k = (h @ sd[p + "attention.wk.weight"].T).view(T, Hkv, hs).transpose(0, 1)
        v = (h @ sd[p + "attention.wv.weight"].T).view(T, Hkv, hs).transpose(0, 1)
        x = x + _causal_attention(rotate(q), rotate(k), v, H // Hkv) @ sd[p + "attention.wo.weight"].T
        h = _rms_norm(x, sd[p + "ffn_norm.weight"], eps)
        gate, up = F.silu(h @ sd[p + "feed_forward.w1.weight"].T), h @ sd[p + "feed_forward.w3.weight"].T
        x = x + (gate * up) @ sd[p + "feed_forward.w2.weight"].T
    return _rms_norm(x, sd["norm.weight"], eps) @ sd["output.weight"].T
