"""The texts the tokenizer exactness tests encode with tokenizer.c and with a reference
implementation: the committed fixture texts (tests/fixtures/tokenizer.json.gz: licence texts,
manual pages, C and Python sources, message catalogues in many scripts, hand-written edge
cases), each whole and line by line, verses of the King James Bible, and the cases below that
concern the Llama family's tokenizers (byte-piece look-alikes, special-token look-alikes,
whitespace runs, invalid UTF-8, characters that normalisation changes, numbers of every Unicode
category in several scripts, whitespace that regex engines disagree on). Deterministic."""
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
    "I'm you're it's WE'LL", "ſ 'ſ", "it'ſtrue IT'ſ x'ſſ", "'ſ'S'ſt", "‘quoted’ “double”", "a\x00b", "\x7f\x01\x1b[0m",
]
# Numbers of every general category (Nd, Nl, No) from several scripts, among letters and ASCII
# digits: where "a number" differs between the regexes' \p{N}, Rust's char::is_numeric (Hugging
# Face's Digits) and an ASCII-only reading. Tolong Siki's digits and the Yangqin signs are numbers
# from Unicode 17.0 on, unassigned in 16.0.
NUMBERS = {
    "arabic-indic": "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669",
    "devanagari": "\u0966\u0967\u0968\u0969\u096a\u096b\u096c\u096d\u096e\u096f",
    "thai": "\u0e50\u0e51\u0e52\u0e53\u0e54\u0e55\u0e56\u0e57\u0e58\u0e59",
    "fullwidth": "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19",
    "roman": "".join(chr(c) for c in range(0x2160, 0x216c)),
    "fractions": "\u00bd\u00be\u2153",
    "superscripts": "\u00b2\u00b3\u00b9",
    "subscripts": "\u2082\u2080\u2089",
    "circled": "\u2460\u2473",
    "tolong siki": "".join(chr(c) for c in range(0x11de0, 0x11dea)),
    "yangqin": "\U00016ff4\U00016ff5\U00016ff6",
}
# Whitespace that some engines disagree on: White_Space (U+0085, U+00A0, U+2028, U+3000) and not
# (U+FEFF, U+180E, U+200B, once White_Space), with ASCII's vertical tab for comparison.
ODD_SPACES = ["\u0085", "\ufeff", "\u2028", "\u3000", "\u180e", "\u00a0", "\u200b", "\x0b"]


def number_cases() -> list[str]:
    out = []
    for digits in NUMBERS.values():
        first, rest = digits[0], digits[1:] or digits
        out += [digits, f"x{digits}y", f"abc{first}123{rest}def", f"12{digits}34", f" {digits} {first}",
                f"{digits}{digits}", f"page {first}, item {rest}.", f"{first}kg {rest}km", f"'s{first}'{rest}",
                f"\n{first}\n{rest}\n", f"v1.{first}.2{rest}", f"{first} {first}  {first}"]
        out += ["".join(f"{a}{c}" for a, c in zip("a1b2c3d4e5f6", digits))]
    return out


def whitespace_cases() -> list[str]:
    out = []
    for w in ODD_SPACES:
        out += [f"a{w}b", f"a {w}b", f"a{w} b", f"a{w}{w} b", f"a{w} ", f"{w}{w}", f"!{w}?", f"{w}word", f"word{w}",
                f"x{w}\n", f"\n{w}y", f"1{w}2", f"it's{w}'s", f"  {w}  word {w}", f"{w} . {w}, a{w}.",
                f"\u4e2d{w}\u6587", f"a\t{w}\tb", f"{w}1{w}a{w}!"]
    return out


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
    extra = [t.encode() for t in EXTRA + number_cases() + whitespace_cases()] + INVALID_UTF8
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
