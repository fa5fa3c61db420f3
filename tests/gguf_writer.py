"""GGUF files for the tests, written here byte by byte as ggml's own writer lays them out (header,
key/values, tensor infos, zero padding to the alignment, each tensor padded to it), sharing no
code with export/gguf_file.py, which reads them:

  GGUF                 the container: typed keys (every value type, arrays included), tensors in
                       F32, F16 or BF16 (rounded to nearest even, as NumPy's float16 and ggml's
                       converter round), in Q8_0 or Q4_0 blocks of a simple quantizer of ours
                       (test data for the reader), or given as raw blocks of any type;
  gguf_of_model()      one of our reference models (export/model.py) as llama.cpp's converter
                       (convert_hf_to_gguf.py) writes that architecture: llama's query and key
                       rows in adjacent pairs (the converter permutes Hugging Face's), qwen2's in
                       Hugging Face's halves (the converter leaves them), gpt2's fused query/key/
                       value; a tied head as no output.weight; Llama 3's rope scaling as the
                       rope_freqs.weight factors the converter computes;
  gguf_of_hf_folder()  a Hugging Face folder of tests/llama_sources.py as the converter writes it;
  vocabularies         SentencePiece's tokenizer.model as tokens, scores and token types, and
                       byte-level BPE (vocab.json + merges.txt, added tokens) as tokens, token
                       types and merges, with a pre-tokenizer name.
The quantized files compared with llama.cpp come from its own quantizer (tests/llama_ref.c
quantize), not from here."""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import torch

from llama_sources import GEMMA, HF_ARCHITECTURES, read_safetensors_plain, to_rotate_half

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
CODES = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i", FLOAT32: "<f", BOOL: "<B",
         UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
F32, F16, Q4_0, Q8_0, BF16 = 0, 1, 2, 8, 30
# llama.cpp's token types (llama.h's enum llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def gguf_string(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def f32_to_bf16(a: np.ndarray) -> np.ndarray:
    """Round to nearest even, as ggml's fp32 -> bf16 conversion does (NaNs do not occur here)."""
    bits = np.ascontiguousarray(a, dtype="<f4").view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def q8_0_blocks(a: np.ndarray) -> bytes:
    """Rows of a matrix as ggml's block_q8_0 (a binary16 scale d = max|x| / 127, then 32 int8
    quants round(x / d)): test data of that layout; llama.cpp's own quantizer makes the files
    that are compared with llama.cpp."""
    groups = a.reshape(-1, 32).astype(np.float32)
    d = (np.abs(groups).max(axis=1) / 127).astype("<f2")
    safe = np.where(d.astype(np.float32) > 0, d.astype(np.float32), 1)
    quants = np.clip(np.rint(groups / safe[:, None]), -127, 127).astype(np.int8)
    return b"".join(d[i].tobytes() + quants[i].tobytes() for i in range(len(groups)))


def q4_0_blocks(a: np.ndarray) -> bytes:
    """Rows of a matrix as ggml's block_q4_0 (a binary16 scale d, then 16 bytes: value i's
    quant + 8 in the low nibble of byte i, value i + 16's in its high nibble): test data."""
    groups = a.reshape(-1, 32).astype(np.float32)
    d = (np.abs(groups).max(axis=1) / -8).astype("<f2")
    safe = np.where(d.astype(np.float32) != 0, d.astype(np.float32), 1)
    q = (np.clip(np.rint(groups / safe[:, None]), -8, 7) + 8).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    return b"".join(d[i].tobytes() + packed[i].tobytes() for i in range(len(groups)))


class GGUF:
    def __init__(self, version: int = 3, alignment: int | None = None):
        self.version, self.alignment = version, alignment or 32
        self.kv: list[tuple[str, int, object]] = []
        self.tensors: list[tuple[str, int, tuple[int, ...], bytes]] = []
        if alignment is not None:
            self.add("general.alignment", UINT32, alignment)

    def add(self, key: str, vtype: int, value: object) -> None:
        """vtype ARRAY takes (element type, list of values)."""
        self.kv.append((key, vtype, value))

    def tensor(self, name: str, values: np.ndarray | torch.Tensor, ggml_type: int = F32) -> None:
        a = values.detach().float().numpy() if isinstance(values, torch.Tensor) else np.asarray(values, np.float32)
        data = {F32: lambda: a.astype("<f4").tobytes(), F16: lambda: a.astype("<f2").tobytes(),
                BF16: lambda: f32_to_bf16(a).tobytes(), Q8_0: lambda: q8_0_blocks(a),
                Q4_0: lambda: q4_0_blocks(a)}[ggml_type]()
        self.tensors.append((name, ggml_type, tuple(a.shape), data))

    def raw_tensor(self, name: str, ggml_type: int, shape: tuple[int, ...], data: bytes) -> None:
        self.tensors.append((name, ggml_type, tuple(shape), data))

    @staticmethod
    def value(vtype: int, value: object) -> bytes:
        if vtype == STRING:
            return gguf_string(value)
        if vtype == ARRAY:
            etype, values = value
            out = struct.pack("<IQ", etype, len(values))
            if etype == STRING:
                return out + b"".join(gguf_string(v) for v in values)
            return out + b"".join(struct.pack(CODES[etype], v) for v in values)
        return struct.pack(CODES[vtype], value)

    def to_bytes(self) -> bytes:
        out = b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv))
        for key, vtype, value in self.kv:
            out += gguf_string(key) + struct.pack("<I", vtype) + self.value(vtype, value)
        offset = 0
        for name, ggml_type, shape, data in self.tensors:
            ne = list(reversed(shape))  # ggml's order: the length of a row first
            out += gguf_string(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, ggml_type, offset)
            offset += len(data) + (-len(data) % self.alignment)
        out += bytes(-len(out) % self.alignment)
        for _, _, _, data in self.tensors:
            out += data + bytes(-len(data) % self.alignment)
        return out

    def write(self, path: Path) -> Path:
        path.write_bytes(self.to_bytes())
        return path


# ---- vocabularies ------------------------------------------------------------------------------

def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's map of bytes to printable characters (the scheme of its encoder.py): printable
    ASCII and Latin-1 bytes stand for themselves, the other 68 take U+0100 onwards in order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def add_bpe_vocab(g: GGUF, vocab_json: bytes, merges_txt: bytes, pre: str | None, specials: list[str],
                  user_defined: list[str] = (), padded_to: int = 0) -> list[str]:
    """A byte-level BPE vocabulary (vocab.json's tokens in the byte-level alphabet, merges.txt's
    lines) as llama.cpp's converter writes it: tokenizer.ggml.model "gpt2", the tokens by id, their
    types (NORMAL; the added tokens CONTROL, or USER_DEFINED when not special; ids up to
    padded_to as [PADn] UNUSED), the merges as "left right" strings, the pre-tokenizer's name.
    Returns the tokens."""
    vocab = json.loads(vocab_json)
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    types = [NORMAL] * len(tokens)
    for name in specials:
        tokens.append(name)
        types.append(CONTROL)
    for name in user_defined:
        tokens.append(name)
        types.append(USER_DEFINED)
    while len(tokens) < padded_to:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(UNUSED)
    merges = [line for line in merges_txt.decode().split("\n") if line and not line.startswith("#version")]
    g.add("tokenizer.ggml.model", STRING, "gpt2")
    if pre is not None:
        g.add("tokenizer.ggml.pre", STRING, pre)
    g.add("tokenizer.ggml.tokens", ARRAY, (STRING, tokens))
    g.add("tokenizer.ggml.token_type", ARRAY, (INT32, types))
    g.add("tokenizer.ggml.merges", ARRAY, (STRING, merges))
    return tokens


def sentencepiece_pieces(model: Path) -> list[tuple[bytes, float, int]]:
    """(piece, score, type) of each piece of a SentencePiece .model, by SentencePiece itself."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(model))
    out = []
    for i in range(sp.get_piece_size()):
        kind = (UNKNOWN if sp.is_unknown(i) else CONTROL if sp.is_control(i) else UNUSED if sp.is_unused(i)
                else BYTE if sp.is_byte(i) else NORMAL)
        out.append((sp.id_to_piece(i).encode(), sp.get_score(i), kind))
    return out


def add_sentencepiece_vocab(g: GGUF, model: Path, add_bos: bool | None = True) -> list[bytes]:
    """A SentencePiece model as llama.cpp's converter writes it (_set_vocab_sentencepiece): model
    "llama", pre "default", pieces, scores, types, and SentencePiece's own bos/eos/unk ids."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(model))
    pieces = sentencepiece_pieces(model)
    g.add("tokenizer.ggml.model", STRING, "llama")
    g.add("tokenizer.ggml.pre", STRING, "default")
    g.add("tokenizer.ggml.tokens", ARRAY, (STRING, [p for p, _, _ in pieces]))
    g.add("tokenizer.ggml.scores", ARRAY, (FLOAT32, [s for _, s, _ in pieces]))
    g.add("tokenizer.ggml.token_type", ARRAY, (INT32, [k for _, _, k in pieces]))
    g.add("tokenizer.ggml.bos_token_id", UINT32, sp.bos_id())
    g.add("tokenizer.ggml.eos_token_id", UINT32, sp.eos_id())
    g.add("tokenizer.ggml.unknown_token_id", UINT32, sp.unk_id())
    if add_bos is not None:
        g.add("tokenizer.ggml.add_bos_token", BOOL, add_bos)
    return [p for p, _, _ in pieces]


# ---- models ------------------------------------------------------------------------------------

def llama3_factors(theta: float, head_size: int, scaling: dict) -> np.ndarray:
    """rope_freqs.weight as llama.cpp's converter computes it for rope_type "llama3": 1 for short
    wavelengths, factor for long ones, 1 / ((1 - s) / factor + s) between (s the smoothing)."""
    freqs = 1.0 / theta ** (np.arange(0, head_size, 2, dtype=np.float64) / head_size)
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, np.float32)


def add_hparams(g: GGUF, arch: str, n_layer: int, n_embd: int, n_hidden: int, n_head: int, n_kv_head: int,
                n_ctx: int, eps: float, theta: float | None, head_dim: int | None = None) -> None:
    """The {arch}.* keys; head_dim: a head size of the model's own (the converter writes
    key_length and value_length from config.json's head_dim)."""
    g.add("general.architecture", STRING, arch)
    # (not "phi3" in a name: llama.cpp then sets attributes of tokens, </s>, that a test vocabulary lacks)
    g.add("general.name", STRING, "tiny random model" if arch == "phi3" else f"tiny random {arch}")
    g.add(f"{arch}.context_length", UINT32, n_ctx)
    g.add(f"{arch}.embedding_length", UINT32, n_embd)
    g.add(f"{arch}.block_count", UINT32, n_layer)
    g.add(f"{arch}.feed_forward_length", UINT32, n_hidden)
    g.add(f"{arch}.attention.head_count", UINT32, n_head)
    if arch == "gpt2":
        g.add("gpt2.attention.layer_norm_epsilon", FLOAT32, eps)
        return
    g.add(f"{arch}.attention.head_count_kv", UINT32, n_kv_head)
    g.add(f"{arch}.attention.layer_norm_rms_epsilon", FLOAT32, eps)
    if theta is not None:
        g.add(f"{arch}.rope.freq_base", FLOAT32, theta)
    if head_dim is not None:
        g.add(f"{arch}.attention.key_length", UINT32, head_dim)
        g.add(f"{arch}.attention.value_length", UINT32, head_dim)
    if arch == "llama":
        g.add("llama.rope.dimension_count", UINT32, head_dim or n_embd // n_head)


def gguf_of_model(model, arch: str, ggml_type: int = F32, llama3_scaling: dict | None = None) -> GGUF:
    """Our reference model's weights under llama.cpp's names and conventions for arch ("llama",
    "qwen2", "gpt2"), matrices in ggml_type (F32, F16, BF16), norms, biases and rope_freqs in F32
    (the converter's rule for 1-D tensors). The tokenizer's keys are the caller's to add."""
    c = model.config
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    g = GGUF()
    add_hparams(g, arch, c.n_layer, c.n_embd, c.n_hidden, c.n_head, c.n_kv_head, c.n_ctx, c.ln_eps,
                None if arch == "gpt2" else c.rope_theta, c.head_dim or None)
    hs, q_rows, kv_rows = c.head_size, c.n_head * c.head_size, c.n_kv_head * c.head_size
    if llama3_scaling is not None:
        g.tensor("rope_freqs.weight", llama3_factors(c.rope_theta, hs, llama3_scaling))
    g.tensor("token_embd.weight", sd["transformer.wte.weight"], ggml_type)
    if arch == "gpt2":
        g.tensor("position_embd.weight", sd["transformer.wpe.weight"])
    g.tensor("output_norm.weight", sd["transformer.ln_f.weight"])
    if "transformer.ln_f.bias" in sd:
        g.tensor("output_norm.bias", sd["transformer.ln_f.bias"])
    if not c.tied_head:
        g.tensor("output.weight", sd["lm_head.weight"], ggml_type)
    for i in range(c.n_layer):
        o, b = f"transformer.h.{i}.", f"blk.{i}."

        def put(ours: str, theirs: str, matrix: bool = False) -> None:
            if o + ours in sd:
                g.tensor(b + theirs, sd[o + ours], ggml_type if matrix else F32)

        put("ln_1.weight", "attn_norm.weight")
        put("ln_1.bias", "attn_norm.bias")
        if arch == "gpt2":
            put("attn.c_attn.weight", "attn_qkv.weight", True)
            put("attn.c_attn.bias", "attn_qkv.bias")
        else:
            w, bias = sd[o + "attn.c_attn.weight"], sd.get(o + "attn.c_attn.bias")
            parts = {"q": (slice(0, q_rows), c.n_head), "k": (slice(q_rows, q_rows + kv_rows), c.n_kv_head),
                     "v": (slice(q_rows + kv_rows, q_rows + 2 * kv_rows), None)}
            for part, (rows, heads) in parts.items():
                wp, bp = w[rows], None if bias is None else bias[rows]
                if arch == "qwen2" and heads:  # the converter keeps Hugging Face's halves for qwen2
                    wp = to_rotate_half(wp, heads)
                    bp = None if bp is None else to_rotate_half(bp, heads)
                g.tensor(b + f"attn_{part}.weight", wp, ggml_type)
                if bp is not None:
                    g.tensor(b + f"attn_{part}.bias", bp)
        put("attn.c_proj.weight", "attn_output.weight", True)
        put("attn.c_proj.bias", "attn_output.bias")
        put("ln_2.weight", "ffn_norm.weight")
        put("ln_2.bias", "ffn_norm.bias")
        put("mlp.gate.weight", "ffn_gate.weight", True)
        put("mlp.c_fc.weight", "ffn_up.weight", True)
        put("mlp.c_fc.bias", "ffn_up.bias")
        put("mlp.c_proj.weight", "ffn_down.weight", True)
        put("mlp.c_proj.bias", "ffn_down.bias")
    return g


def gguf_of_hf_folder(folder: Path, bos_eos: tuple[int, int] | None = None) -> GGUF:
    """A Hugging Face folder (tests/llama_sources.py: Llama, Qwen2, Qwen3, SmolLM3, Granite,
    OLMo 2, Gemma 2 and 3, Phi-3) as llama.cpp's converter writes it in F32 (its conversion/*.py):
    its config's hyperparameters under the architecture's keys, q_proj and k_proj (and biases)
    permuted from halves into adjacent pairs for the Llama-derived (llama, smollm3, granite) and
    kept for the others, Gemma's norms stored as 1 + w, Phi-3's fused projections kept fused and
    LongRoPE's factors as rope_factors_short/long, Llama 3's rope_scaling as rope_freqs.weight, no
    output.weight when lm_head is absent (and none for Gemma 2); its vocab.json + merges.txt as
    a "gpt-2" byte-level BPE vocabulary."""
    conf = json.loads((folder / "config.json").read_text())
    arch = {v: k for k, v in HF_ARCHITECTURES.items()}[conf["architectures"][0]]
    sd = read_safetensors_plain(folder)
    n_embd, n_head, n_kv = conf["hidden_size"], conf["num_attention_heads"], conf["num_key_value_heads"]
    hs = conf.get("head_dim") or n_embd // n_head
    g = GGUF()
    add_hparams(g, arch, conf["num_hidden_layers"], n_embd, conf["intermediate_size"], n_head, n_kv,
                conf["max_position_embeddings"], conf["rms_norm_eps"], None if arch == "gemma2" else conf["rope_theta"],
                conf.get("head_dim"))
    if arch in ("smollm3", "granite"):
        g.add(f"{arch}.rope.dimension_count", UINT32, hs)
    if arch == "granite":
        for theirs, ours in (("attention_multiplier", "attention.scale"), ("embedding_multiplier", "embedding_scale"),
                             ("residual_multiplier", "residual_scale"), ("logits_scaling", "logit_scale")):
            if conf.get(theirs):
                g.add(f"granite.{ours}", FLOAT32, conf[theirs])
    if arch in GEMMA:
        g.add(f"{arch}.attention.sliding_window", UINT32, conf["sliding_window"])
        if conf.get("final_logit_softcapping"):
            g.add(f"{arch}.final_logit_softcapping", FLOAT32, conf["final_logit_softcapping"])
    if arch == "gemma2":
        g.add("gemma2.attn_logit_softcapping", FLOAT32, conf["attn_logit_softcapping"])
    if arch == "gemma3":
        g.add("gemma3.rope.freq_base_swa", FLOAT32, conf["rope_local_base_freq"])
    rotated = hs
    if arch == "phi3":
        rotated = int(conf.get("partial_rotary_factor", 1.0) * n_embd) // n_head
        g.add("phi3.rope.dimension_count", UINT32, rotated)
        g.add("phi3.attention.sliding_window", UINT32, conf.get("sliding_window") or 0)
        g.add("phi3.rope.scaling.original_context_length", UINT32,
              conf.get("original_max_position_embeddings", conf["max_position_embeddings"]))
        scaling = conf.get("rope_scaling")
        if scaling:  # LongRoPE: its factor tables, and the factor on cos and sin
            scale = conf["max_position_embeddings"] / conf["original_max_position_embeddings"]
            g.add("phi3.rope.scaling.attn_factor", FLOAT32, math.sqrt(1 + math.log(scale) / math.log(
                conf["original_max_position_embeddings"])))
            g.tensor("rope_factors_long.weight", np.asarray(scaling["long_factor"], np.float32))
            g.tensor("rope_factors_short.weight", np.asarray(scaling["short_factor"], np.float32))
    elif conf.get("rope_scaling"):
        g.tensor("rope_freqs.weight", llama3_factors(conf["rope_theta"], hs, conf["rope_scaling"]))

    def adjacent(w: torch.Tensor, heads: int) -> torch.Tensor:  # the converter's LlamaModel.permute
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
                 "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
                 "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
                 "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm"}
    if arch in GEMMA or arch == "olmo2":
        per_layer["post_attention_layernorm"] = "post_attention_norm"
    for name, t in sd.items():
        if arch in GEMMA and name.endswith("norm.weight"):  # the converter's norm_shift
            t = t + 1
        if name in names:
            if not (arch == "gemma2" and name == "lm_head.weight"):
                g.tensor(names[name], t)
            continue
        _, _, layer, rest = name.split(".", 3)
        module, kind = rest.rsplit(".", 1)
        if arch in ("llama", "smollm3", "granite") and module in ("self_attn.q_proj", "self_attn.k_proj"):
            t = adjacent(t, n_head if module.endswith("q_proj") else n_kv)
        g.tensor(f"blk.{layer}.{per_layer[module]}.{kind}", t)
    add_bpe_vocab(g, (folder / "vocab.json").read_bytes(), (folder / "merges.txt").read_bytes(), "gpt-2", [])
    if bos_eos is not None:
        g.add("tokenizer.ggml.bos_token_id", UINT32, bos_eos[0])
        g.add("tokenizer.ggml.eos_token_id", UINT32, bos_eos[1])
    return g
