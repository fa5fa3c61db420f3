"""--samples N: N continuations of one prompt decoded together. Sample i must be byte for byte
what a run of its own with seed S + i prints, and (float32 weights) what the PyTorch reference's
generate() makes with that seed; with every sampler option, stop strings, end-of-text at
different steps, and generation past the context window (the small models here have a context
of 64 and generate up to 150 tokens).

For q8_0 and q4_0 weights the samples are checked against runs of their own, bit for bit. Not
against the reference's generate(): the reference quantizes activations after summing in
another order, and a quant that rounds the other way moves a logit by far more than float32
rounding does, so a correct q8_0 program and the reference part now and then at a step that is
no tie (seen on 3 of 8 seeds within 100 tokens). Their arithmetic is checked product by product
against the reference in test_paths.py instead, and a run of its own is what samples must equal."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from common import REPO, RUN, GPTConfig, char_tokenizer, export, gpt2_tokenizer, random_model, run
from compare import c_generate, c_generate_samples, c_tokens, generation_agrees, split_samples

PROMPT = b"And God said"
_models: dict[tuple[str, str], tuple] = {}


def model(kind: str, dtype: str = "f32"):
    """(reference model, tokenizer, file): a character or GPT-2 vocabulary, context 64."""
    if (kind, dtype) not in _models:
        tok = gpt2_tokenizer() if kind == "gpt2" else char_tokenizer()
        n = len(tok.tokens)
        cfg = GPTConfig(n_layer=2, n_head=2, n_embd=64, n_hidden=128, n_ctx=64, vocab_size=n, vocab_padded=n)
        m = random_model(cfg, seed=9)
        _models[kind, dtype] = (m, tok, export(m, tok, f"samples_{kind}_{dtype}", dtype))
    return _models[kind, dtype]


# (vocabulary, samples, temperature, top-k, top-p, more flags, the same as generate() options)
CASES = [
    ("char", 4, 0.8, 0, 0.9, (), {}),
    ("gpt2", 3, 1.0, 40, 1.0, (), {}),                      # end-of-text ends samples at different steps
    ("char", 3, 0.9, 0, 1.0, ("--keep", "10"), {"keep": 10}),
    # nearly the whole of GPT-2's 50257 near-equal probabilities: float32 caches (see test_cli.py's cache_for)
    ("gpt2", 4, 0.8, 0, 0.95, ("--repeat-penalty", "1.3", "--repeat-last", "20", "--ignore-eos", "--cache", "f32"),
     {"repeat_penalty": 1.3, "repeat_last": 20, "ignore_eos": True}),
    ("char", 16, 1.0, 5, 0.9, ("--ignore-eos",), {"ignore_eos": True}),
]


@pytest.mark.parametrize("kind,n,temperature,top_k,top_p,flags,options", CASES)
def test_samples_are_runs_of_their_own_and_the_references(kind, n, temperature, top_k, top_p, flags, options) -> None:
    m, tok, path = model(kind)
    ids = c_tokens(RUN, path, PROMPT)
    samples = c_generate_samples(RUN, path, PROMPT, 150, temperature, top_k, top_p, 40, n, extra=flags)
    assert len(set(samples)) > 1  # the seeds really differ
    m.set_cache("f32" if "f32" in flags else "f16")
    try:
        for i, out in enumerate(samples):
            assert out == c_generate(RUN, path, PROMPT, 150, temperature, top_k, top_p, 40 + i, extra=flags), f"sample {i}"
            agrees, what = generation_agrees(m, tok, ids, out, 150, temperature, top_k, top_p, 40 + i, **options)
            assert agrees, f"sample {i}: {what}"
    finally:
        m.set_cache("f16")


LONG_PROMPT = (b"In the beginning God created the heaven and the earth. And the earth was without form, "
               b"and void; and darkness was upon the face of the deep.")


@pytest.mark.parametrize("dtype,cache", [("f32", "f16"), ("q4_0", "f16"), ("f32", "q8_0")])
def test_samples_sharing_a_long_prompt_are_runs_of_their_own_and_the_references(dtype, cache) -> None:
    """A prompt of 140 characters in a context of 128 keeps its last 128: all of them (two
    steps of 64) shared by every sample (kv_cache.h's share_prompt); at once the windows move (to
    the last 40 tokens) and each sample has a cache of its own again. A prompt of 100: 64 shared,
    36 copied (with a q8_0 cache, their quants and scales). Each sample is byte for byte a run
    of its own, and the float32 ones the reference's."""
    tok = char_tokenizer()
    n = len(tok.tokens)
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=64, n_hidden=128, n_ctx=128, vocab_size=n, vocab_padded=n)
    m = random_model(cfg, seed=11).set_cache(cache)
    path = export(m, tok, f"samples_long_{dtype}", dtype)
    for prompt in (LONG_PROMPT, LONG_PROMPT[:100]):  # 100 characters: 64 shared, 36 copied
        ids = c_tokens(RUN, path, prompt)
        flags = ("--keep", "40", "--ignore-eos", "--cache", cache)
        samples = c_generate_samples(RUN, path, prompt, 150, 0.9, 0, 0.95, 3, 5, extra=flags)
        assert len(set(samples)) > 1
        for i, out in enumerate(samples):
            assert out == c_generate(RUN, path, prompt, 150, 0.9, 0, 0.95, 3 + i, extra=flags), f"sample {i}"
            if dtype == "f32":
                agrees, what = generation_agrees(m, tok, ids, out, 150, 0.9, 0, 0.95, 3 + i, keep=40, ignore_eos=True)
                assert agrees, f"sample {i}: {what}"


@pytest.mark.parametrize("kind,dtype,flags", [
    ("char", "q8_0", ("-t", "0.8", "-p", "0.9", "--ignore-eos")),
    ("gpt2", "q8_0", ("-t", "1.0", "-k", "40", "--repeat-penalty", "1.2", "--keep", "20")),
    ("gpt2", "q4_0", ("-t", "0.8", "-p", "0.95")),
    ("char", "q4_0", ("-t", "1.0", "-p", "1", "--stop", ".", "--ignore-eos")),
])
def test_quantized_samples_are_runs_of_their_own(kind, dtype, flags) -> None:
    _, _, path = model(kind, dtype)
    for threads in ("1", "2"):
        r = run(path, "-i", PROMPT, "-n", 150, "-s", 7, "--samples", 6, "--threads", threads, *flags)
        assert r.returncode == 0, r.stderr
        samples = split_samples(r.stdout, 6, 7)
        for i, text in enumerate(samples):
            alone = run(path, "-i", PROMPT, "-n", 150, "-s", 7 + i, *flags)
            assert text == alone.stdout, f"{dtype} sample {i}, {threads} threads"


def test_stop_strings_end_each_sample_and_all_are_printed_in_order() -> None:
    _, _, path = model("char")
    flags = ("-i", PROMPT, "-n", 300, "-t", 1.0, "-p", 1, "--stop", "e", "--no-echo", "--ignore-eos")
    r = run(path, *flags, "-s", 3, "--samples", 5)
    assert r.returncode == 0, r.stderr
    samples = split_samples(r.stdout, 5, 3)
    assert len({len(s) for s in samples}) > 1  # they stopped at different steps
    for i, text in enumerate(samples):  # each ends at its first "e", or after 300 tokens without one
        assert (text.endswith(b"e") and text.count(b"e") == 1) or (len(text) == 300 and b"e" not in text), text
        assert text == run(path, *flags, "-s", 3 + i).stdout
    total = sum(len(s) for s in samples)  # one byte per token in a character vocabulary
    assert re.search(rf"generated {total} tokens", r.stderr.decode())


def test_output_layout() -> None:
    """Each sample after its own line, then a newline of its own; the prompt echoed in each."""
    _, _, path = model("char")
    r = run(path, "-i", PROMPT, "-n", 5, "-t", 1.0, "-s", 11, "--samples", 2, "--ignore-eos")
    assert r.returncode == 0, r.stderr
    a = run(path, "-i", PROMPT, "-n", 5, "-t", 1.0, "-s", 11, "--ignore-eos").stdout
    b = run(path, "-i", PROMPT, "-n", 5, "-t", 1.0, "-s", 12, "--ignore-eos").stdout
    assert r.stdout == b"--- sample 1 of 2, seed 11 ---\n" + a + b"\n--- sample 2 of 2, seed 12 ---\n" + b + b"\n"
    assert "generated 10 tokens" in r.stderr.decode()


def test_greedy_samples_are_all_the_same_and_stderr_says_so() -> None:
    _, _, path = model("gpt2")
    r = run(path, "-i", PROMPT, "-n", 30, "-t", 0, "-s", 1, "--samples", 3)
    assert r.returncode == 0
    assert "note: -t 0 (greedy) makes all 3 samples the same" in r.stderr.decode()
    samples = split_samples(r.stdout, 3, 1)
    assert samples[0] == samples[1] == samples[2] == run(path, "-i", PROMPT, "-n", 30, "-t", 0).stdout


def test_samples_without_a_prompt_start_from_end_of_text() -> None:
    m, tok, path = model("gpt2")
    samples = c_generate_samples(RUN, path, b"", 20, 0.9, 0, 1.0, 5, 3)
    for i, out in enumerate(samples):
        agrees, what = generation_agrees(m, tok, [tok.eot_id], out, 20, 0.9, 0, 1.0, 5 + i)
        assert agrees, what


@pytest.mark.parametrize("args,message", [
    (["--samples", "0"], "--samples must be between 1 and"),
    (["--samples", "x"], "--samples needs a whole number"),
    (["--samples", "3", "--perplexity", "-"], "--samples only affects generation, not --perplexity"),
    (["--samples", "1000000000"], "--samples 1000000000 needs"),
])
def test_bad_sample_counts_are_one_line_errors(args, message) -> None:
    _, _, path = model("char")
    r = run(path, *args, input=b"")
    err = r.stderr.decode()
    assert r.returncode != 0 and r.stdout == b""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    if "1000000000" in args:
        assert "memory" in err


@pytest.mark.parametrize("dtype", ["f32", "q8_0"])
def test_compare_py_checks_samples(dtype) -> None:
    """export/compare.py --samples N on the shipped model: float32 samples against the reference
    and against runs of their own; q8_0 against runs of their own."""
    from weight_file import read_model
    shipped = REPO / "models" / "kjv.bin"
    target = shipped
    if dtype != "f32":
        target = export(*read_model(shipped), f"samples_kjv_{dtype}", dtype)
    r = subprocess.run([sys.executable, str(REPO / "export" / "compare.py"), str(shipped), str(target), "--samples", "3",
                        "--steps", "40", "--seeds", "1"], capture_output=True, timeout=600)
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    lines = [line for line in out.splitlines() if line.startswith("sample ")]
    assert len(lines) == 3 and all(line.endswith("the same bytes as a run of its own") for line in lines), out
    if dtype == "f32":
        assert all("(seed %d): identical" % i in line for i, line in enumerate(lines)), out
