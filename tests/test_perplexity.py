"""run --perplexity against the same computation in PyTorch
(export/model.py's perplexity()), to 1e-4 relative: random models over several windows, and
the shipped model on a held-out excerpt of the King James Bible."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from common import REPO, RUN, TEXT, TMP, GPTConfig, char_tokenizer, export, gpt2_tokenizer, random_model
from compare import c_tokens
from weight_file import read_model
from model import perplexity

SHIPPED = REPO / "models" / "kjv.bin"


def c_perplexity(model: Path, text_file: Path) -> dict:
    r = subprocess.run([str(RUN), str(model), "--perplexity", str(text_file)], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    m = re.fullmatch(r"tokens=(\d+) nll=([0-9.]+) ppl=([0-9.]+) bpb=([0-9.]+)\n", r.stdout.decode())
    assert m, f"unexpected output: {r.stdout!r}"
    return {"tokens": int(m[1]), "nll": float(m[2]), "ppl": float(m[3]), "bpb": float(m[4])}


def check(model, tok, path: Path, text: bytes) -> dict:
    f = TMP / f"{path.stem}.txt"
    f.write_bytes(text)
    c = c_perplexity(path, f)
    ids = ([tok.eot_id] if tok.eot_id >= 0 else []) + c_tokens(RUN, path, text)
    ref = perplexity(model, ids, len(text))
    assert c["tokens"] == ref["tokens"]
    for key in ("nll", "ppl", "bpb"):  # the printed figures have 4-6 decimals
        assert abs(c[key] - ref[key]) <= 1e-4 * abs(ref[key]) + 5e-5, (key, c, ref)
    return c


@pytest.mark.parametrize("vocab", ["char", "gpt2"])
def test_random_model_several_windows(vocab: str) -> None:
    tok = char_tokenizer() if vocab == "char" else gpt2_tokenizer()
    n = len(tok.tokens)
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=32, n_hidden=64, n_ctx=48, vocab_size=n, vocab_padded=n)
    model = random_model(cfg, seed=21)
    path = export(model, tok, f"ppl_{vocab}")
    c = check(model, tok, path, TEXT.encode() * 2)
    assert c["tokens"] > 3 * cfg.n_ctx  # several windows, overlapping by half


def test_shipped_heldout_text_is_the_books_training_never_saw() -> None:
    """models/heldout.txt, which the docs' perplexity examples score, is export/kjv.py's held-out
    text of Debian's bible-kjv, byte for byte."""
    out = TMP / "kjv"
    r = subprocess.run(["/usr/bin/python3", str(REPO / "export" / "kjv.py"), str(out)], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    assert (REPO / "models" / "heldout.txt").read_bytes() == (out / "heldout.txt").read_bytes()


def test_shipped_model_heldout_excerpt() -> None:
    assert SHIPPED.exists(), f"{SHIPPED} is missing"
    text = (REPO / "models" / "heldout.txt").read_bytes()[:16000]
    text = text[: text.rindex(b"\n") + 1]
    model, tok = read_model(SHIPPED)
    c = check(model, tok, SHIPPED, text)
    print(f"shipped model, held-out excerpt: {c}")
    assert c["bpb"] < 2.5  # a trained model, far from the 8 bits of a uniform guess


def test_shipped_model_q8_0_perplexity_rises_less_than_1_percent() -> None:
    from weight_file import write_model
    model, tok = read_model(SHIPPED)
    q8 = TMP / "kjv_q8_0.bin"
    write_model(q8, model, tok, "q8_0")
    excerpt = TMP / "kjv.txt"  # the 16 kB held-out excerpt test_shipped_model_heldout_excerpt wrote
    assert excerpt.exists(), "made by test_shipped_model_heldout_excerpt"
    f32 = c_perplexity(SHIPPED, excerpt)
    quant = c_perplexity(q8, excerpt)
    print(f"held-out perplexity: f32 {f32['ppl']}, q8_0 {quant['ppl']} (+{quant['ppl'] / f32['ppl'] - 1:.3%})")
    assert quant["ppl"] < 1.01 * f32["ppl"]


def test_shipped_model_q4_0_perplexity_rises_less_than_5_percent() -> None:
    """q4_0's cost in quality on the held-out excerpt: under 5% in perplexity (on all held-out
    books it is about +1% in bits per byte: `make bench` prints it)."""
    from weight_file import write_model
    model, tok = read_model(SHIPPED)
    q4 = TMP / "kjv_q4_0.bin"
    write_model(q4, model, tok, "q4_0")
    excerpt = TMP / "kjv.txt"
    assert excerpt.exists(), "made by test_shipped_model_heldout_excerpt"
    f32 = c_perplexity(SHIPPED, excerpt)
    quant = c_perplexity(q4, excerpt)
    print(f"held-out perplexity: f32 {f32['ppl']}, q4_0 {quant['ppl']} (+{quant['ppl'] / f32['ppl'] - 1:.3%})")
    assert quant["ppl"] < 1.05 * f32["ppl"]
