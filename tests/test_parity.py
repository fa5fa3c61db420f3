"""run.c against the PyTorch reference (export/model.py) on random weights, for every switch of
the weight file: per-position logits through the key/value cache, greedy generation, and seeded
sampling with run.c's sampler reproduced in Python; each with the binary16 key/value cache (run's
default; the reference rounds its keys and values the same way), with --cache q8_0 (quantized
alike) and with --cache f32."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch

from common import RUN, TEXT, GPTConfig, char_tokenizer, export, gpt2_tokenizer, random_model
from compare import c_generate, c_logits, c_tokens, compare_logits, generation_agrees
from model import CACHES, generate

GPT2_V = 50257
# name -> (config, vocabulary). Together: GPT-2 layout; nanoGPT layout (no bias, erf GELU,
# vocabulary padded to 50304); sinusoidal positions; a separate output head; a character
# vocabulary; a width that is not a multiple of 8; head counts 1, 2, 3 and 4; heads wider than the
# width over the head count, layers with and without rotary positions and of two bases (version 5's
# head size and layer table).
CONFIGS = {
    "gpt2": (GPTConfig(n_layer=2, n_head=4, n_embd=48, n_hidden=192, n_ctx=256, vocab_size=GPT2_V,
                       vocab_padded=GPT2_V, gelu="tanh", bias=True, tied_head=True), "gpt2"),
    "nanogpt": (GPTConfig(n_layer=2, n_head=2, n_embd=64, n_hidden=256, n_ctx=256, vocab_size=GPT2_V,
                          vocab_padded=50304, gelu="erf", bias=False, tied_head=True), "gpt2"),
    "sinusoidal": (GPTConfig(n_layer=2, n_head=2, n_embd=32, n_hidden=128, n_ctx=300,
                             pos="sinusoidal"), "char"),
    "separate_head": (GPTConfig(n_layer=1, n_head=1, n_embd=40, n_hidden=160, n_ctx=256,
                                vocab_size=GPT2_V, vocab_padded=GPT2_V, tied_head=False), "gpt2"),
    "char": (GPTConfig(n_layer=3, n_head=4, n_embd=64, n_hidden=256, n_ctx=300, gelu="erf"), "char"),
    "layers": (GPTConfig(n_layer=3, n_head=4, n_kv_head=2, n_embd=48, head_dim=16, n_hidden=128, n_ctx=300,
                         norm="rms", pos="rotary", ffn="swiglu", bias=0,
                         layers=[{}, {"rotary": False}, {"rope_theta": 1e6}]), "char"),
    "odd_width": (GPTConfig(n_layer=2, n_head=3, n_embd=36, n_hidden=100, n_ctx=120,
                            ln_eps=1e-6), "char"),
}

_built: dict[str, tuple] = {}


def built(name: str):
    """(model, tokenizer, weight file) for a configuration, made once per test session."""
    if name not in _built:
        cfg, vocab = CONFIGS[name]
        tok = gpt2_tokenizer() if vocab == "gpt2" else char_tokenizer()
        if vocab == "char":
            cfg.vocab_size = cfg.vocab_padded = len(tok.tokens)
        model = random_model(cfg, seed=sum(map(ord, name)))
        if cfg.vocab_padded > cfg.vocab_size:
            # Padded rows so large that any code scoring them would pick them every time.
            with torch.no_grad():
                model.transformer.wte.weight[cfg.vocab_size:] = 1e3
        _built[name] = (model, tok, export(model, tok, f"parity_{name}"))
    return _built[name]


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name", CONFIGS)
def test_logits_every_position(name: str, cache: str) -> None:
    model, tok, path = built(name)
    model.set_cache(cache)
    ids = c_tokens(RUN, path, TEXT.encode())[:64]
    assert len(ids) == 64, "the prompt must give 64 tokens"
    prompt = tok.decode(ids)
    assert c_tokens(RUN, path, prompt) == ids
    # one token at a time (generation), the prompt in one prefill block, and in blocks of 24
    # (later blocks start past position 0 and end in a part of a 16-position attention tile)
    for block in (1, 128, 24):
        rep = compare_logits(model, ids, c_logits(RUN, path, prompt, model.config.vocab_size, block,
                                                  ("--cache", cache)))
        print(f"{name}, {cache} cache, block {block}: max |logit diff| {rep.max_diff:.3g}, tolerance "
              f"{rep.tolerance:.3g}")
        assert rep.per_position.shape == (64,)
        assert rep.ok, f"{name}, {cache} cache, block {block}: max diff {rep.max_diff} > {rep.tolerance}"


@pytest.mark.parametrize("cache", ("f16", "q8_0"))
@pytest.mark.parametrize("name", CONFIGS)
def test_the_cache_is_what_rounds(name: str, cache: str) -> None:
    """run.c's binary16 (q8_0) cache rounds as the reference's does: its logits are on average
    several times closer to the reference's binary16 (q8_0) logits than run.c's float32-cache
    logits are, and they differ from those (the allowance of compare_logits could not tell a
    cache that does not round, so this checks it apart)."""
    model, tok, path = built(name)
    model.set_cache(cache)
    ids = c_tokens(RUN, path, TEXT.encode())[:64]
    prompt = tok.decode(ids)
    with torch.no_grad():
        ref = model(torch.tensor([ids]))[0].numpy()
    rounded = c_logits(RUN, path, prompt, model.config.vocab_size, 1, ("--cache", cache))
    unrounded = c_logits(RUN, path, prompt, model.config.vocab_size, 1, ("--cache", "f32"))
    near, far = float(np.abs(rounded - ref).mean()), float(np.abs(unrounded - ref).mean())
    print(f"{name}: mean |logit diff| from the {cache} reference: {cache} cache {near:.3g}, float32 cache {far:.3g}")
    assert far > 0 and near * 4 < far


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name", CONFIGS)
def test_greedy_200_steps(name: str, cache: str) -> None:
    """Greedy: identical for 200 steps (odd_width, with a context of 120, moves its window on
    the way), or until end-of-text."""
    model, tok, path = built(name)
    model.set_cache(cache)
    prompt = TEXT.split(".")[0].encode()
    ids = c_tokens(RUN, path, prompt)
    ref_ids = generate(model, ids, 200, temperature=0.0, eot_id=tok.eot_id)
    assert len(ref_ids) == 200 or tok.eot_id >= 0
    out = c_generate(RUN, path, prompt, 200, 0.0, 0, 1.0, seed=1, extra=("--cache", cache))
    agrees, what = generation_agrees(model, tok, ids, out, 200, 0.0, 0, 1.0, 1)
    print(f"{name}, {cache} cache: {what}")
    assert agrees, what


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name", CONFIGS)
def test_seeded_sampling(name: str, cache: str) -> None:
    model, tok, path = built(name)
    model.set_cache(cache)
    prompt = b"And God said"
    ids = c_tokens(RUN, path, prompt)
    for seed in range(10):
        c_out = c_generate(RUN, path, prompt, 64, 0.8, 40, 0.9, seed=seed, extra=("--cache", cache))
        agrees, what = generation_agrees(model, tok, ids, c_out, 64, 0.8, 40, 0.9, seed)
        assert agrees, f"{name}: seed {seed}: {what}"


def test_padded_logits_never_sampled() -> None:
    """The nanoGPT layout's 47 padded rows are set so large (1e3) that any code scoring them
    would choose them nearly every time; they have no bytes, so run.c could not print them.
    Sampling the whole distribution (no top-k, no top-p) must still print 32 real tokens, the
    logits have exactly vocab_size columns, and greedy decoding matches the reference, which
    scores only the real vocabulary. (Exact agreement of full-distribution draws over 50257
    near-equal probabilities is not asserted: a logit difference of 1e-6 can move a
    cumulative boundary past the random number; test_seeded_sampling checks exactness.)"""
    model, tok, path = built("nanogpt")
    model.set_cache("f16")
    for seed in range(10):
        r = subprocess.run([str(RUN), str(path), "-i", "And", "-n", "32", "-t", "1", "-k", "0", "-p", "1",
                            "-s", str(seed), "--ignore-eos"], capture_output=True, timeout=60)
        assert r.returncode == 0 and "generated 32 tokens" in r.stderr.decode(), r.stderr
    ids = c_tokens(RUN, path, b"And God")
    assert c_logits(RUN, path, tok.decode(ids), model.config.vocab_size).shape == (len(ids), 50257)
    agrees, what = generation_agrees(model, tok, ids, c_generate(RUN, path, b"And God", 32, 0.0, 0, 1.0, 0),
                                     32, 0.0, 0, 1.0, 0)
    assert agrees, what


def test_generation_comparison_catches_a_wrong_token() -> None:
    """The tie allowance of generation_agrees cannot hide a real difference: run.c's own output
    with one token replaced by another (neither a tie nor the reference's choice) is refused,
    greedy and sampled."""
    model, tok, path = built("char")
    model.set_cache("f16")
    ids = c_tokens(RUN, path, b"And God said")
    for t, k, p, seed in [(0.0, 0, 1.0, 0), (0.8, 40, 0.9, 3)]:
        out = c_generate(RUN, path, b"And God said", 40, t, k, p, seed)
        assert generation_agrees(model, tok, ids, out, 40, t, k, p, seed)[0]
        wrong = out[:20] + (b"Q" if out[20:21] != b"Q" else b"Z") + out[21:]
        agrees, what = generation_agrees(model, tok, ids, wrong, 40, t, k, p, seed)
        assert not agrees and "DIFFERENT at step 20" in what, what


def test_different_seeds_differ() -> None:
    """Sampling really depends on the seed (guards against a sampler that ignores it)."""
    model, tok, path = built("char")
    outs = {c_generate(RUN, path, b"And", 32, 1.0, 0, 1.0, seed=s) for s in range(4)}
    assert len(outs) == 4


def test_info_prints_the_head_size_and_the_layer_table() -> None:
    """--info gives the header's head size and each kind of layer of the layer table with its
    layers, as the configuration written says."""
    model, _, path = built("layers")
    c = model.config
    out = subprocess.run([str(RUN), str(path), "--info"], capture_output=True, text=True, check=True).stdout
    assert f"n_head {c.n_head}, n_embd {c.n_embd} (head_size {c.head_dim})" in out
    whole = "attention over the whole context"
    assert f"layer 0: {whole}, rotary positions theta 10000\n" in out
    assert f"layer 1: {whole}, no rotary positions\n" in out
    assert f"layer 2: {whole}, rotary positions theta 1e+06\n" in out
    assert "layer table" in out
