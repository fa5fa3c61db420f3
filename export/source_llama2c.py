"""SOURCE kinds 5 and 6: llama2.c's training checkpoints (ckpt.pt) and its .bin files of version
0 and 1, with the tokenizer beside them or named by --tokenizer."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from architectures import layer_name, model_name
from config import GPTConfig, Weights, as_arrays, same, strip_prefix, take, weights_of, with_tokenizer
from output_files import ExportError
from tokenizer_files import read_tokenizer_source
from weight_file import TokenizerData


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
    wte = take(sd, model_name("llama2c", "embed"), where)
    gate = layer_name("llama2c", 0, "gate")
    cfg.n_hidden = int(sd[gate].shape[0]) if gate in sd else 0
    with_tokenizer(cfg, wte.shape[0], tok, where)
    head = take(sd, model_name("llama2c", "head"), where)
    cfg.tied_head = same(head, wte)
    ours = {model_name("ours", "embed"): wte, model_name("ours", "head"): head,
            model_name("ours", "norm"): take(sd, model_name("llama2c", "norm"), where)}
    for i in range(cfg.n_layer):
        theirs = lambda part: take(sd, layer_name("llama2c", i, part), where)  # noqa: E731
        q, k, v = theirs("q"), theirs("k"), theirs("v")
        ours[layer_name("ours", i, "qkv")] = np.concatenate([q, k, v])  # already in adjacent pairs
        for part in ("attn_out", "attn_norm", "ffn_norm", "gate", "up", "down"):
            ours[layer_name("ours", i, part)] = theirs(part)
    for i in range(cfg.n_layer):
        check_causal_mask(sd.pop(f"layers.{i}.attention.mask", None), f"layers.{i}.attention.mask", cfg.n_ctx, where)
    left = [k for k in sd if not k.startswith(("freqs_cos", "freqs_sin"))]
    if left:
        raise ExportError(f"{where}: tensors run.c has no place for: {', '.join(sorted(left)[:5])}")
    return weights_of(cfg, ours, where)


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
