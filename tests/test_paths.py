"""Every instruction-set path of the kernels (tests/build/run-{scalar,avx2,avxvnni,avx512vnni,
native}, built by `make test`) against PyTorch, one token at a time (generation's
matrix-vector path) and in prefill blocks (the matrix-matrix path; q8_0 prefill runs on AMX
tiles in native where the CPU has them, on AVX512-VNNI in avx512vnni); greedy tokens identical
across paths and thread counts, for float32 and q8_0 weights. q8_0 quantizes activations too,
so its logits are bounded against the float32 weights on the trained shipped model (whose
activations are realistic): Q8_BOUND * (1 + max|logit|). NEON cannot run on this x86 machine."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from common import PATHS, REPO, TEXT, TMP, GPTConfig, export, gpt2_tokenizer, random_model
from compare import c_generate, c_logits, c_tokens, compare_logits
from export import read_model, write_model
from model import with_q8_0_activations

_models: dict = {}


def binary(path: str) -> Path:
    b = REPO / "tests" / "build" / f"run-{path}"
    assert b.exists(), f"{b} is missing: `make test` builds it"
    return b


def test_paths_checked() -> None:
    print(f"instruction-set paths checked on this CPU: {PATHS}")
    assert "scalar" in PATHS and "native" in PATHS


def models():
    if not _models:
        tok = gpt2_tokenizer()
        cfg = GPTConfig(n_layer=2, n_head=4, n_embd=64, n_hidden=256, n_ctx=256, vocab_size=50257,
                        vocab_padded=50304, gelu="tanh", bias=True, tied_head=False)
        model = random_model(cfg, seed=51)
        f32 = export(model, tok, "paths_f32")
        q8 = TMP / "paths_q8_0.bin"
        write_model(q8, model, tok, "q8_0")
        _models.update(model=model, tok=tok, f32=f32, q8=q8, dequantized=read_model(q8)[0])
    return _models


Q8_BOUND = 0.05


@pytest.mark.parametrize("path", PATHS)
def test_path_matches_pytorch(path: str) -> None:
    m = models()
    run = binary(path)
    ids = c_tokens(run, m["f32"], TEXT.encode())[:100]  # prefill: whole tiles and a part tile
    prompt = m["tok"].decode(ids)
    for block in (1, 128):
        rep = compare_logits(m["model"], ids, c_logits(run, m["f32"], prompt, 50257, block))
        assert rep.ok, f"{path} f32 block {block}: {rep.max_diff} > {rep.tolerance}"


def odd_groups_model():
    """q8_0 widths of 3 and 9 groups of 32 (an odd count: AMX takes groups in pairs)."""
    if "odd" not in _models:
        tok = gpt2_tokenizer()
        cfg = GPTConfig(n_layer=2, n_head=4, n_embd=96, n_hidden=288, n_ctx=256, vocab_size=50257,
                        vocab_padded=50257, gelu="tanh", bias=True, tied_head=True)
        q8 = TMP / "paths_odd_q8_0.bin"
        write_model(q8, random_model(cfg, seed=52), tok, "q8_0")
        _models["odd"] = q8
    return _models["odd"]


@pytest.mark.parametrize("path", PATHS)
def test_q8_0_matches_quantized_reference(path: str) -> None:
    """Every path against PyTorch computing what q8_0 means (model.with_q8_0_activations:
    dequantized weights times activations rounded as run.c rounds them). Most positions agree
    within the float32 tolerance; a few may not, where an activation lies on a rounding boundary
    and the two sides' float32 activations, different in the last bits, round to neighbouring
    quants (a difference of one quant, seen up to 0.12 on these random models). A wrong kernel
    moves every position. The exact check of the integer kernels is tests/test_kernels.c."""
    m = models()
    run = binary(path)
    ids = c_tokens(run, m["f32"], TEXT.encode())[:100]  # prefill: tiles of 16 and a ragged tail
    for q8 in (m["q8"], odd_groups_model()):
        ref = with_q8_0_activations(read_model(q8)[0])
        for block in (1, 128):
            rep = compare_logits(ref, ids, c_logits(run, q8, m["tok"].decode(ids), 50257, block))
            close = float((rep.per_position <= rep.tolerance).mean())
            print(f"{path} {q8.name} block {block}: {close:.0%} of {len(ids)} positions within "
                  f"{rep.tolerance:.3g}; max diff {rep.max_diff:.3g}")
            assert close >= 0.9, f"{path} {q8.name} block {block}: only {close:.0%} of positions agree"
            assert rep.max_diff <= Q8_BOUND * (1 + rep.max_logit)


@pytest.mark.parametrize("path", PATHS)
def test_q8_0_within_bound_of_float32(path: str) -> None:
    shipped = REPO / "models" / "kjv.bin"
    model, tok = read_model(shipped)
    q8 = TMP / "kjv_q8_0.bin"
    if not q8.exists():
        write_model(q8, model, tok, "q8_0")
    run = binary(path)
    ids = c_tokens(run, shipped, TEXT.encode())[:64]
    for block in (1, 128):
        rep = compare_logits(model, ids, c_logits(run, q8, tok.decode(ids), model.config.vocab_size, block))
        print(f"{path}, block {block}: q8_0 vs float32 weights: max diff {rep.max_diff:.3g}, "
              f"max |logit| {rep.max_logit:.3g}")
        assert rep.max_diff <= Q8_BOUND * (1 + rep.max_logit)


@pytest.mark.parametrize("weights", ["f32", "q8"])
def test_greedy_identical_across_paths_and_threads(weights: str) -> None:
    m = models()
    prompt = m["tok"].decode(c_tokens(binary("native"), m["f32"], TEXT.encode())[:40])
    outs = {}
    for path in PATHS:
        for threads in (1, 2, 3):
            outs[path, threads] = c_generate(binary(path), m[weights], prompt, 48, 0.0, 0, 1.0, 1, threads)
    assert len(set(outs.values())) == 1, {k: v[:40] for k, v in outs.items()}
