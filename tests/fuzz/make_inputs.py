"""Inputs for the fuzz targets (`make fuzz`).

usage: make_inputs.py seeds DIR    write the seed corpora (committed under tests/fuzz/seeds)
       make_inputs.py vocabs DIR   write the vocabularies fuzz_tokenizer loads (gpt2.bin,
                                   cl100k.bin, char.bin, sentencepiece.bin, tokenizer_json.bin,
                                   digits.bin, o200k.bin)
Seeds for the loader are tiny valid model files covering every switch of the format: GPT-2's
block as version 1 files (what files written before version 2 are), the Llama family's as
version 3 and as version 4 (a weight type per tensor, metadata, a stop set, block formats, the
query, key and value apart) and version 5 (a head size of its own, layers that differ); seeds
for the tokenizer are short texts in several scripts behind each selector byte.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "export"))
sys.path.insert(0, str(REPO / "tests"))

from common import (GPTConfig, as_version, char_tokenizer, gpt2_tokenizer, random_model, sentencepiece_like,  # noqa: E402
                    tokenizer_json_like)
from model import BIAS_QKV  # noqa: E402
from weight_file import write_model  # noqa: E402
from export_tokenizer import load_ranks  # noqa: E402


def seeds(out: Path) -> None:
    loader, tokenizer = out / "loader", out / "tokenizer"
    loader.mkdir(parents=True, exist_ok=True)
    tokenizer.mkdir(parents=True, exist_ok=True)
    tok = char_tokenizer()
    n = len(tok.tokens)
    variants = {
        "gpt2_layout": dict(bias=True, gelu="tanh", tied_head=True, pos="learned"),
        "no_bias_erf": dict(bias=False, gelu="erf", tied_head=True, pos="learned"),
        "sinusoidal_separate_head": dict(bias=True, gelu="tanh", tied_head=False, pos="sinusoidal"),
    }
    for name, switches in variants.items():
        cfg = GPTConfig(n_layer=1, n_head=2, n_embd=8, n_hidden=16, n_ctx=8, vocab_size=n,
                        vocab_padded=n + 3, **switches)
        write_model(loader / f"{name}.bin", random_model(cfg, seed=1), tok, version=3)
    for dtype in ("q8_0", "q4_0"):  # quantized widths: one and two groups of 32
        cfg = GPTConfig(n_layer=1, n_head=2, n_embd=32, n_hidden=64, n_ctx=8, vocab_size=n, vocab_padded=n + 3)
        write_model(loader / f"{dtype}.bin", random_model(cfg, seed=1), tok, dtype, version=3)
    write_model(loader / "tokenizer_only.bin", None, tok, version=3)
    for name in [*variants, "q8_0", "q4_0", "tokenizer_only"]:
        path = loader / f"{name}.bin"
        path.write_bytes(as_version(path.read_bytes(), 1))
    llama = dict(norm="rms", pos="rotary", ffn="swiglu", n_head=4, n_kv_head=2, bias=BIAS_QKV, tied_head=False)
    for name, dtype, extra in [("llama", "f32", {}), ("llama_q8_0", "q8_0", {}),
                               ("llama3_freqs_mqa", "q4_0", {"n_kv_head": 1, "bias": 0, "rope_freqs": [1.0, 0.1, 0.01, 0.001]})]:
        cfg = GPTConfig(n_layer=1, n_embd=32, n_hidden=64, n_ctx=8, vocab_size=n, vocab_padded=n + 3, **{**llama, **extra})
        write_model(loader / f"{name}.bin", random_model(cfg, seed=1), tok, dtype, version=3)
    cfg = GPTConfig(n_layer=2, n_embd=32, n_hidden=64, n_ctx=8, vocab_size=n, vocab_padded=n + 3, **llama)
    write_model(loader / "llama_v4_mixed.bin", random_model(cfg, seed=1), tok, "q4_0",
                tensor_types={"h.0.*": "q8_0", "lm_head.weight": "f32"},
                metadata={"general.name": "seed", "general.source": "random weights"}, version=4)
    # GGUF's block formats of 32 values, the query, key and value apart in types of their own
    write_model(loader / "llama_v4_blocks_apart.bin", random_model(cfg, seed=1), tok, "q5_0",
                tensor_types={"h.*.attn.k.weight": "f16", "h.*.attn.v.weight": "q5_1", "lm_head.weight": "bf16"},
                qkv_apart=True, version=4)
    # version 5: heads wider than n_embd / n_head, and a layer table whose rows differ
    cfg = GPTConfig(n_layer=3, n_embd=32, n_hidden=64, n_ctx=8, vocab_size=n, vocab_padded=n + 3, head_dim=16,
                    layers=[{}, {"rotary": False, "rope_theta": 0.0}, {"rope_theta": 1e6}], **llama)
    write_model(loader / "llama_v5_layers.bin", random_model(cfg, seed=1), tok, "q8_0",
                tensor_types={"h.2.*": "q4_0", "lm_head.weight": "f32"})
    # version 5's switches of the block, all on: norms of each query and key head, norms after each
    # sublayer, GEGLU, scales, caps, windows, partial rotary with LongRoPE's two tables
    cfg = GPTConfig(n_layer=2, n_embd=32, n_hidden=64, n_ctx=8, vocab_size=n, vocab_padded=n + 3, head_dim=16,
                    norm="rms", pos="rotary", ffn="geglu", n_head=4, n_kv_head=2, bias=0, qk_norm="head", norm_after=True,
                    embed_scale=3.0, attn_scale=0.3, residual_scale=0.5, logit_divisor=2.0, attn_softcap=20.0,
                    logit_softcap=10.0, rotary_dims=8, rope_scale=1.1, rope_original=4, rope_freqs=[1.0, 0.5, 0.1, 0.01],
                    rope_freqs_long=[0.5, 0.2, 0.05, 0.001], layers=[{"window": 3, "rope_theta": 100.0}, {}])
    write_model(loader / "v5_switches.bin", random_model(cfg, seed=1), tok, "q8_0")
    cfg.qk_norm, cfg.norm_before = "whole", False
    write_model(loader / "v5_olmo2_like.bin", random_model(cfg, seed=1), tok, "f32")
    texts = [b"Hello world, it's 2024!\n", "naïve café — 日本語 😀 \u00a0\ufeff".encode(),
             b"  \r\n\t  x  ", b"\xff\xfe invalid \xc3", b"1234567 'S 'll",
             "x\u00b2 \u00bd \u0663\u0664 \u216b 12 \U00011de0 ".encode() + b"\xc3 \xd9"]
    for i, t in enumerate(texts):
        for selector in range(6):
            (tokenizer / f"text{i}_{selector}").write_bytes(bytes([selector]) + t)
    (tokenizer / "ids").write_bytes(bytes([0x80]) + b"".join(i.to_bytes(4, "little") for i in
                                                             (0, 1, 50256, 50257, 100276, 2**32 - 1)))


def vocabs(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_model(out / "gpt2.bin", None, gpt2_tokenizer())
    write_model(out / "cl100k.bin", None,
                load_ranks(REPO / "node_modules" / "tiktoken" / "encoders" / "cl100k_base.json", None))
    write_model(out / "char.bin", None, char_tokenizer())
    write_model(out / "sentencepiece.bin", None, sentencepiece_like())
    write_model(out / "tokenizer_json.bin", None, tokenizer_json_like())
    write_model(out / "digits.bin", None, tokenizer_json_like("digits_gpt2"))
    write_model(out / "o200k.bin", None,
                load_ranks(REPO / "node_modules" / "tiktoken" / "encoders" / "o200k_base.json", None))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("seeds", "vocabs"):
        sys.exit(__doc__)
    (seeds if sys.argv[1] == "seeds" else vocabs)(Path(sys.argv[2]))
