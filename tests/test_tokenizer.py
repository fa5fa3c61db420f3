"""tokenizer.c against OpenAI's tiktoken (npm package `tiktoken`, encode_ordinary), for gpt2
and cl100k_base on the committed fixtures (tests/gen_tokenizer_fixtures.py made them), and for
o200k_base on the same texts asked of tiktoken as the test runs, plus byte-exact
decode(encode(x)) on arbitrary bytes, invalid UTF-8 included."""
from __future__ import annotations

import base64
import gzip
import json
import random
import subprocess
from pathlib import Path

import pytest

from common import REPO, RUN, TMP, TEXT, export, gpt2_tokenizer
from export_tokenizer import load_ranks

FIXTURES = json.load(gzip.open(REPO / "tests" / "fixtures" / "tokenizer.json.gz", "rt"))
ENCODERS = REPO / "node_modules" / "tiktoken" / "encoders"
_files: dict[str, tuple] = {}


def tokenizer_file(name: str):
    """(path, TokenizerData): 'gpt2' from GPT-2's encoder.json/vocab.bpe as export.py reads
    them; 'gpt2_tiktoken', 'cl100k' and 'o200k' from the npm tiktoken package's rank files."""
    if name not in _files:
        if name == "gpt2":
            tok = gpt2_tokenizer()
        else:
            files = {"gpt2_tiktoken": "gpt2.json", "cl100k": "cl100k_base.json", "o200k": "o200k_base.json"}
            tok = load_ranks(ENCODERS / files[name], None)
        _files[name] = (export(None, tok, f"tokenizer_{name}"), tok)
    return _files[name]


def c_ids(path: Path, text: bytes) -> list[int]:
    TMP.mkdir(exist_ok=True)
    f = TMP / "tokenize_input"
    f.write_bytes(text)
    r = subprocess.run([str(RUN), str(path), "--tokenize", "-f", str(f)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return [int(x) for x in r.stdout.split()]


@pytest.mark.parametrize("vocab,key", [("gpt2", "gpt2"), ("gpt2_tiktoken", "gpt2"), ("cl100k", "cl100k")])
def test_fixtures_match_tiktoken_exactly(vocab: str, key: str) -> None:
    path, tok = tokenizer_file(vocab)
    assert len(FIXTURES) >= 200
    mismatches = []
    for fx in FIXTURES:
        text = base64.b64decode(fx["text"])
        ids = c_ids(path, text)
        if ids != fx[key]:
            mismatches.append(fx["name"])
        assert tok.decode(ids) == text, f"{fx['name']}: decode(encode(x)) != x"
    print(f"{vocab}: {len(FIXTURES) - len(mismatches)}/{len(FIXTURES)} exact")
    assert not mismatches, f"{len(mismatches)} of {len(FIXTURES)} differ from tiktoken: {mismatches[:10]}"


def test_what_is_the_capital_of_france_is_7_cl100k_tokens() -> None:
    path, _ = tokenizer_file("cl100k")
    assert c_ids(path, b"What is the capital of France?") == [3923, 374, 279, 6864, 315, 9822, 30]


# o200k_base splits words by case: runs of upper-case letters, then lower-case ones, with the
# letters that have no case (Lm, Lo) and the marks on both sides; its contractions only end a word
O200K_CASES = ["camelCaseWord HTTPServer getHTTPResponseCode XMLHttpRequest iPhone", "DON'T I'M you'RE It'S "
               "ſ'S we'LL 'd 'Ll", "中文ABC abc中文 A中B文c 中A 中A文 文AB. ǅungla ǈub ǅ", "e\u0301cole ÉCOLE\u0301s "
               "\u0301x x\u0301Y A\u0301b ʰAb aʰB", "x/y\n/z // a/\r\n/ ?/\n", "123456 ١٢٣٤٥ 12a3b", "Straße STRASSE "
               "ΣΊΣΥΦΟΣ Ωmega ǄǅǆA", " \t\n  x\t\ty  \n\n  \r\n z", "Ünïcödé ✓ 漢字かなカナ한국어 العربية हिन्दी"]


def tiktoken_ids(encoding: str, texts: list[bytes]) -> list[list[int]]:
    """tiktoken's encode_ordinary of each text (tests/tiktoken_ids.js), asked now."""
    request = {"encoding": encoding, "texts": [base64.b64encode(t).decode() for t in texts]}
    r = subprocess.run(["node", str(REPO / "tests" / "tiktoken_ids.js")], input=json.dumps(request).encode(),
                       capture_output=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def test_o200k_matches_tiktoken_exactly() -> None:
    """o200k_base (GPT-4o's, Phi-4-mini's split): the fixtures' texts, their lines, and the
    cases of its case rules, against tiktoken itself."""
    from test_tokenizer_kinds import c_encode
    path, tok = tokenizer_file("o200k")
    texts = [base64.b64decode(fx["text"]) for fx in FIXTURES]
    texts += sorted({line for t in texts for line in t.split(b"\n") if line.strip()})[:3000]
    texts += [t.encode() for t in O200K_CASES]
    ours = c_encode(path, texts)
    reference = tiktoken_ids("o200k_base", texts)
    wrong = [t for t, got, ref in zip(texts, ours, reference) if got != ref]
    print(f"o200k_base: {len(texts) - len(wrong)}/{len(texts)} exact")
    assert not wrong, f"{len(wrong)} of {len(texts)} differ from tiktoken, first {wrong[:3]}"
    assert all(tok.decode(ids) == t for t, ids in zip(texts, ours))


@pytest.mark.parametrize("vocab", ["gpt2", "cl100k", "o200k"])
def test_round_trip_arbitrary_bytes(vocab: str) -> None:
    """Random byte strings (mostly invalid UTF-8) and truncated multi-byte characters."""
    path, tok = tokenizer_file(vocab)
    rng = random.Random(7)
    samples = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))) for _ in range(40)]
    samples += ["日本語".encode()[:4], b"\xf0\x9f\x98", b"\xc0\xaf overlong", b"\xed\xa0\x80 surrogate",
                b"\xf4\x90\x80\x80 too large", b"a\xffb\xfe", TEXT.encode() + b"\x80\x80"]
    for s in samples:
        assert tok.decode(c_ids(path, s)) == s


def test_tokenizer_only_file_refuses_generation() -> None:
    path, _ = tokenizer_file("cl100k")
    r = subprocess.run([str(RUN), str(path), "-i", "hello"], capture_output=True, timeout=60)
    assert r.returncode == 1 and b"only a tokenizer" in r.stderr


def test_tiktoken_file_format_gives_the_same_tokenizer(tmp_path) -> None:
    """A .tiktoken ranks file (base64 token, rank per line) exports to the same vocabulary."""
    _, tok = tokenizer_file("cl100k")
    lines = [f"{base64.b64encode(t).decode()} {r}" for t, r in zip(tok.tokens, tok.ranks) if r != 0xFFFFFFFF]
    f = tmp_path / "cl100k_base.tiktoken"
    f.write_text("\n".join(lines) + "\n")
    out = tmp_path / "cl100k.bin"
    r = subprocess.run(["/usr/bin/python3", str(REPO / "export" / "export_tokenizer.py"), str(f), str(out)],
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    text = base64.b64decode(FIXTURES[0]["text"])
    assert c_ids(out, text) == FIXTURES[0]["cl100k"]
