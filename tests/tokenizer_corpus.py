"""The texts the tokenizer exactness tests encode with tokenizer.c and with a reference
implementation: the committed fixture texts (tests/fixtures/tokenizer.json.gz: licence texts,
manual pages, C and Python sources, message catalogues in many scripts, hand-written edge
cases), each whole and line by line, verses of the King James Bible, and the cases below that
concern the Llama family's tokenizers (byte-piece look-alikes, special-token look-alikes,
whitespace runs, invalid UTF-8, characters that normalisation changes). Deterministic."""
from __future__ import annotations

import base64
import gzip
import json
import random
import struct
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

EXTRA = [
    "<0x41>", "<0x0A><0x0a>", "<0xE6><0x97><0xA5>", "text <0xZZ> <0x> <0x100>", "<s>", "</s>", "<unk>",
    "<s> hello </s>", "<|endoftext|>", "<|im_start|>user\nhi<|im_end|>", "<|begin_of_text|>x",
    "\u2581", "\u2581\u2581word \u2581", "a\u2581b", "  leading", "trailing  ", "   ", " ", "\t", "\n", "\r\n",
    "a  b   c    d", "\t\tx\t\ty", " \n \n  \n   x", "x\n\n\n\ny", "\u3000ideographic space", "a\u00a0b\u2009c\u200bd",
    "\ufeffbom", "\u0085next line", "ＦＵＬＬＷＩＤＴＨ　１２３", "ﬁ ligature ﬀ ﬃ", "Å Å Å", "e\u0301 é", "한국어 한국어",
    "\u1100\u1161\u11a8", "x² ½ ① ℌ ℍ ㍿", "ǅ ǲ", "\U0001d400\U0001d401", "Ⅻ", "café naïve coöperate",
    "1234567890", "3.14159 2,718 1e-9 0x1F", "١٢٣ ٤٥٦", "𝟘𝟙𝟚", "x=1;y=22;z=333;w=4444",
    "def f(x):\n    return x ** 2  # square\n", "int main(void) { return 0; }", "if (a && b || !c) {}",
    "😀😃😄 👍🏽 🇯🇵 👨‍👩‍👧", "中文文本，标点符号。", "日本語のテキスト", "ελληνικά русский עברית العربية",
    "I'm you're it's WE'LL", "ſ 'ſ", "‘quoted’ “double”", "a\x00b", "\x7f\x01\x1b[0m",
]
INVALID_UTF8 = [b"\xff", b"a\xffb", b"\xc0\xaf", b"\xed\xa0\x80x", b"\xf4\x90\x80\x80", b"\xe6\x97",
                b"ok \xe6\x97 cut", b"\x80\x80\x80", b"\xf0\x9f\x98", b"caf\xe9", b" \xff \xfe ", b"\xc3"]


def fixture_texts() -> list[bytes]:
    fixtures = json.load(gzip.open(REPO / "tests" / "fixtures" / "tokenizer.json.gz", "rt"))
    return [base64.b64decode(fx["text"]) for fx in fixtures]


def kjv_verses(every: int) -> list[bytes]:
    """Every `every`-th verse of Debian's bible-kjv, without its reference."""
    out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], stdin=subprocess.DEVNULL, capture_output=True,
                         check=True, timeout=120).stdout
    lines = [line for line in out.split(b"\n") if line.strip()]
    return [line.split(b" ", 1)[-1] for line in lines[::every]]


def corpus(kind: str) -> list[bytes]:
    """'lines': a few thousand single lines (SentencePiece encodes one sentence at a time);
    'texts': the fixture texts whole, with the extra cases."""
    fixtures = fixture_texts()
    extra = [t.encode() for t in EXTRA] + INVALID_UTF8
    if kind == "texts":
        return [t for t in fixtures if len(t) < 200_000] + extra
    rng = random.Random(23)
    lines = sorted({line for t in fixtures for line in t.split(b"\n") if line.strip()})
    lines = [line[:600] for line in lines]
    rng.shuffle(lines)
    return lines[:2500] + kjv_verses(31) + extra


def records(texts: list[bytes]) -> bytes:
    """tests/tokenize_lines.c's input."""
    return b"".join(struct.pack("<I", len(t)) + t for t in texts)
