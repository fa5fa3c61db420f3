"""tokenizer.c against OpenAI's tiktoken (npm package `tiktoken`, encode_ordinary)."""
from __future__ import annotations

import base64
import json
import subprocess

from common import REPO, RUN, TEXT, export, gpt2_tokenizer

ENGLISH = [
    TEXT,
    "Hello world", " leading space", "trailing space ", "two  spaces", "tabs\tand\nnewlines\n\n",
    "It's, they're, we've, I'm, you'll, he'd, can't", "IT'S UPPER CASE CONTRACTIONS",
    "numbers 1234567890 and 3.14159, 1,000,000", "punctuation!!! ... ??? --- ((()))",
    "mixed123abc456", "   \n   \n", "<|endoftext|> is plain text here", "a" * 300,
    "def f(x):\n    return x ** 2  # comment\n", "email@example.com https://example.org/path?q=1",
]


def tiktoken_ids(encoding: str, texts: list[str]) -> list[list[int]]:
    req = {"encoding": encoding, "texts": [base64.b64encode(t.encode()).decode() for t in texts]}
    r = subprocess.run(["node", str(REPO / "tests" / "tiktoken_ids.js")], input=json.dumps(req).encode(),
                       capture_output=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, f"node tiktoken failed (run `make test` to install it): {r.stderr.decode()}"
    return json.loads(r.stdout)


def c_ids(model, text: bytes) -> list[int]:
    r = subprocess.run([str(RUN), str(model), "--tokenize", "-f", "/dev/stdin"], input=text,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return [int(x) for x in r.stdout.split()]


def gpt2_file():
    return export(None, gpt2_tokenizer(), "gpt2_tokenizer_only")


def test_gpt2_english_matches_tiktoken() -> None:
    path = gpt2_file()
    for text, want in zip(ENGLISH, tiktoken_ids("gpt2", ENGLISH)):
        assert c_ids(path, text.encode()) == want, repr(text)


def test_decode_round_trip() -> None:
    tok = gpt2_tokenizer()
    path = gpt2_file()
    for text in ENGLISH:
        assert tok.decode(c_ids(path, text.encode())) == text.encode()
