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

# ---- writing the files ------------------------------------------------------------------------


def to_rotate_half(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Adjacent pairs (2i, 2i+1) -> Hugging Face's layout (i, i + head_size/2): what its
    conversion of Meta's weights does (convert_llama_weights_to_hf.py's permute)."""
    shape = w.shape
    return w.reshape(n_heads, shape[0] // n_heads // 2, 2, *shape[1:]).transpose(1, 2).reshape(shape)


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


def hf_state_dict(model: GPT, arch: str) -> dict[str, torch.Tensor]:
    """The reference model's weights under Hugging Face's names and layout."""
    c, hs = model.config, model.config.head_size
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = {"model.embed_tokens.weight": sd["transformer.wte.weight"], "model.norm.weight": sd["transformer.ln_f.weight"]}
    if not c.tied_head:
        out["lm_head.weight"] = sd["lm_head.weight"]
    q_rows, kv_rows = c.n_head * hs, c.n_kv_head * hs
    for i in range(c.n_layer):
        o, h = f"transformer.h.{i}.", f"model.layers.{i}."
        w = sd[o + "attn.c_attn.weight"]
        q, k, v = w[:q_rows], w[q_rows:q_rows + kv_rows], w[q_rows + kv_rows:]
        out[h + "self_attn.q_proj.weight"] = to_rotate_half(q, c.n_head)
        out[h + "self_attn.k_proj.weight"] = to_rotate_half(k, c.n_kv_head)
        out[h + "self_attn.v_proj.weight"] = v
        if c.has_bias(BIAS_QKV):
            b = sd[o + "attn.c_attn.bias"]
            out[h + "self_attn.q_proj.bias"] = to_rotate_half(b[:q_rows], c.n_head)
            out[h + "self_attn.k_proj.bias"] = to_rotate_half(b[q_rows:q_rows + kv_rows], c.n_kv_head)
            out[h + "self_attn.v_proj.bias"] = b[q_rows + kv_rows:]
        out[h + "self_attn.o_proj.weight"] = sd[o + "attn.c_proj.weight"]
        if c.has_bias(BIAS_ATTN_OUT):
            out[h + "self_attn.o_proj.bias"] = sd[o + "attn.c_proj.bias"]
        out[h + "input_layernorm.weight"] = sd[o + "ln_1.weight"]
        out[h + "post_attention_layernorm.weight"] = sd[o + "ln_2.weight"]
        for ours, theirs in (("gate", "gate_proj"), ("c_fc", "up_proj"), ("c_proj", "down_proj")):
            out[h + f"mlp.{theirs}.weight"] = sd[o + f"mlp.{ours}.weight"]
            if c.has_bias(BIAS_FFN):
                out[h + f"mlp.{theirs}.bias"] = sd[o + f"mlp.{ours}.bias"]
    return out


def hf_config(model: GPT, arch: str, **extra) -> dict:
    c = model.config
    conf = {"architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                               "mistral": "MistralForCausalLM"}[arch]],
            "model_type": arch, "hidden_size": c.n_embd, "intermediate_size": c.n_hidden,
            "num_hidden_layers": c.n_layer, "num_attention_heads": c.n_head, "num_key_value_heads": c.n_kv_head,
            "max_position_embeddings": c.n_ctx, "rms_norm_eps": c.ln_eps, "rope_theta": c.rope_theta,
            "vocab_size": c.vocab_padded, "hidden_act": "silu", "tie_word_embeddings": c.tied_head,
            "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    if c.head_dim:
        conf["head_dim"] = c.head_dim
    if arch == "llama":
        conf.update(attention_bias=bool(c.bias & BIAS_QKV), mlp_bias=bool(c.bias & BIAS_FFN), rope_scaling=None)
    if arch == "qwen2":
        conf.update(use_sliding_window=False, sliding_window=c.n_ctx)
    if arch == "mistral":
        conf.update(sliding_window=None)
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


def _causal_attention(q, k, v, n_rep: int) -> torch.Tensor:
    """q [H, T, hs], k and v [H_kv, T, hs] -> [T, H * hs]; key/value heads repeated n_rep times."""
    k, v = k.repeat_interleave(n_rep, dim=0), v.repeat_interleave(n_rep, dim=0)
    T, hs = q.shape[1], q.shape[2]
    scores = q @ k.transpose(1, 2) / math.sqrt(hs)
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, -1)


@torch.no_grad()
def hf_logits(folder: Path, ids: list[int]) -> torch.Tensor:
    """Logits [T, vocab rows] of a Hugging Face Llama/Qwen2/Mistral folder, computed as its
    modeling code does: queries and keys rotated by rotate_half with cos/sin of position *
    inv_freq on both halves of each head."""
    conf = json.loads((folder / "config.json").read_text())
    sd = read_safetensors_plain(folder)
    H, Hkv, C = conf["num_attention_heads"], conf["num_key_value_heads"], conf["hidden_size"]
    hs, eps, T = conf.get("head_dim") or C // H, conf["rms_norm_eps"], len(ids)
    inv_freq = 1.0 / conf["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    scaling = conf.get("rope_scaling")
    if scaling:  # Llama 3's: wavelengths past the original context divided by factor, those
        # between high and low frequencies interpolated (Hugging Face's _compute_llama3_parameters)
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        inv_freq = torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([torch.cos(angle)] * 2, dim=-1).float()
    sin = torch.cat([torch.sin(angle)] * 2, dim=-1).float()

    def rotate_half(x):
        return torch.cat([-x[..., hs // 2:], x[..., :hs // 2]], dim=-1)

    def linear(x, name):
        y = x @ sd[name + ".weight"].T
        return y + sd[name + ".bias"] if name + ".bias" in sd else y

    x = sd["model.embed_tokens.weight"][ids]
    for i in range(conf["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms_norm(x, sd[p + "input_layernorm.weight"], eps)
        q = linear(h, p + "self_attn.q_proj").view(T, H, hs).transpose(0, 1)
        k = linear(h, p + "self_attn.k_proj").view(T, Hkv, hs).transpose(0, 1)
        v = linear(h, p + "self_attn.v_proj").view(T, Hkv, hs).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        x = x + linear(_causal_attention(q, k, v, H // Hkv), p + "self_attn.o_proj")
        h = _rms_norm(x, sd[p + "post_attention_layernorm.weight"], eps)
        x = x + linear(F.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = _rms_norm(x, sd["model.norm.weight"], eps)
    return x @ sd.get("lm_head.weight", sd["model.embed_tokens.weight"]).T


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
