"""--attention: the page's embedded weights equal the reference model's
attention probabilities; the page is self-contained; headless Chromium (Debian's) draws
layers x (heads + 1) heatmaps with the network cut off and shows a non-blank picture."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from common import REPO, RUN, TEXT, TMP, GPTConfig, char_tokenizer, export, gpt2_tokenizer, random_model
from compare import c_tokens

CFG = GPTConfig(n_layer=3, n_head=4, n_embd=48, n_hidden=96, n_ctx=128, vocab_size=50257, vocab_padded=50257)


def page_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="attention-data">(.*?)</script>', html, re.S)
    assert m, "no embedded attention data"
    return json.loads(m.group(1))


def make_page(model, tok, path: Path, prompt: bytes, name: str, cache: str = "f16") -> tuple[dict, list[int]]:
    out = TMP / f"{name}.html"
    out.unlink(missing_ok=True)
    r = subprocess.run([str(RUN), str(path), "--attention", str(out), "-f", "/dev/stdin", "--cache", cache],
                       input=prompt, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return page_data(out.read_text(encoding="utf-8")), c_tokens(RUN, path, prompt)


LLAMA = dict(norm="rms", pos="rotary", ffn="swiglu", n_kv_head=2, bias=0)  # 2 query heads per key/value head


@pytest.mark.parametrize("cache", ["f16", "f32", "q8_0"])
def test_weights_equal_reference(cache: str) -> None:
    """The page's weights are the reference's within 1e-5, plus, with the binary16 or q8_0
    cache, the largest change rounding keys and values (and q8_0's queries) makes in the
    reference's weights (compare.py's cache_allowance explains why)."""
    for name, tok in [("gpt2", gpt2_tokenizer()), ("char", char_tokenizer()), ("llama", char_tokenizer())]:
        cfg = GPTConfig(**{**CFG.__dict__, "vocab_size": len(tok.tokens), "vocab_padded": len(tok.tokens),
                           **(LLAMA if name == "llama" else {})})
        model = random_model(cfg, seed=31)
        path = export(model, tok, f"attention_{name}")
        prompt = TEXT.encode()[:200 if name == "gpt2" else 60]
        data, ids = make_page(model, tok, path, prompt, f"attention_{name}", cache)
        assert len(data["tokens"]) == len(ids) <= 64
        ref = model.set_cache(cache).attention_weights(torch.tensor(ids)).numpy()  # [L, H, T, T]
        exact = model.set_cache("f32").attention_weights(torch.tensor(ids)).numpy()
        allowance = float(np.abs(ref - exact).max())
        T = len(ids)
        assert np.all(ref[:, :, np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)  # masked: exactly 0
        worst = 0.0
        for l in range(cfg.n_layer):
            for h in range(cfg.n_head):
                for i in range(T):
                    row = np.array(data["weights"][l][h][i])
                    assert row.shape == (i + 1,)
                    worst = max(worst, float(np.abs(row - ref[l, h, i, : i + 1]).max()))
        print(f"{name}, {cache} cache: largest difference {worst:.3g}, allowance {allowance:.3g}")
        assert worst <= 1e-5 + allowance, f"{name}, {cache} cache: largest difference {worst}"


def test_page_is_self_contained() -> None:
    html = (TMP / "attention_gpt2.html").read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=|https?://|@import|url\(", html), "the page refers to something outside"
    assert "default-src 'none'" in html


def test_long_prompt_is_refused() -> None:
    path = TMP / "attention_char.bin"
    r = subprocess.run([str(RUN), str(path), "--attention", str(TMP / "x.html"), "-i", "a" * 65],
                       capture_output=True, timeout=60)
    assert r.returncode == 1 and b"65 tokens" in r.stderr and b"at most 64" in r.stderr
    assert not (TMP / "x.html").exists()


def test_browser_draws_every_heatmap_offline() -> None:
    page = TMP / "attention_gpt2.html"
    shot = TMP / "attention_gpt2.png"
    shot.unlink(missing_ok=True)
    r = subprocess.run(["node", str(REPO / "tests" / "browser_check.js"), str(page), str(shot)],
                       capture_output=True, timeout=180, cwd=REPO)
    assert r.returncode == 0, f"headless chromium failed (make test installs it): {r.stderr.decode()}"
    result = json.loads(r.stdout)
    assert result["errors"] == []
    assert result["heatmaps"] == CFG.n_layer * (CFG.n_head + 1)
    assert result["requests"] == [], "the page tried to load something"
    assert "weight" in result["tip"] and "query #1" in result["tip"] and "key #0" in result["tip"]
    import matplotlib.image
    pixels = matplotlib.image.imread(str(shot))[..., :3]
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    distinct = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    non_white = float((pixels.min(axis=2) < 0.9).mean())
    assert distinct > 50 and non_white > 0.05, (distinct, non_white)
