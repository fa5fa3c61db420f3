"""Regenerate tests/fixtures/tokenizer.json.gz: texts and their ids from OpenAI's tiktoken.

usage: /usr/bin/python3 tests/gen_tokenizer_fixtures.py

Gathers varied texts from files of a Debian system (licence texts, manual pages, C headers,
Python sources, message catalogues in many languages and scripts), adds hand-written edge
cases and a 1 MB line, and asks the npm package `tiktoken` (OpenAI's Rust core as wasm;
encode_ordinary) for the gpt2 and cl100k_base ids of each. Texts are cut at 3,000 bytes on a
character boundary. The selection is deterministic for a given system; the committed file is
the reference, this script only explains and renews it.
"""
from __future__ import annotations

import base64
import gettext
import glob
import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "tokenizer.json.gz"
LIMIT = 3000

EDGE_CASES = {
    "empty": "",
    "spaces between words": "a   b    c     d",
    "only spaces": "     ",
    "tabs before word": "\t\t\tindented",
    "space newline runs": " \n \n  \n   x",
    "trailing spaces": "word   ",
    "trailing newline spaces": "end \n  ",
    "crlf lines": "line one\r\nline two\r\n\r\nline four\r\n",
    "lone cr": "a\rb\r\rc",
    "newline runs": "\n\n\n\nx\n\n",
    "spaces then crlf": "  \r\n  x  \r\n",
    "digit run": "1234567890123456789012345678901234567890",
    "decimals and separators": "3.14159265358979 1,000,000.00 10^9 0x7FFF_FFFF",
    "arabic-indic digits": "٠١٢٣٤٥٦٧٨٩ and ۱۲۳",
    "superscripts and numerals": "x² + y³ = z⁴; Ⅻ ⅷ ½ ¾ ①②③",
    "fullwidth digits": "１２３４５ＡＢＣ",
    "contractions lower": "it's don't we're I've I'm you'll he'd",
    "contractions upper": "IT'S DON'T WE'RE I'VE I'M YOU'LL HE'D",
    "contractions mixed": "We'Re It'S I'Ll THEY'rE 'S 's' ''s '''",
    "long s contraction": "ſ 'ſ Iſ'ſ 'ſt",
    "typographic apostrophe": "it’s “quoted” ‘single’",
    "emoji": "I ❤️ 🍕! 😀😃😄 👍🏽👍🏿",
    "flags": "🇯🇵🇺🇸🇩🇪 🏳️‍🌈 🏴‍☠️",
    "family zwj": "👨‍👩‍👧‍👦 👩🏽‍💻",
    "japanese": "日本語のテキストです。東京は晴れ。",
    "chinese": "中文文本，标点符号。简体与繁體。",
    "korean": "한국어 텍스트입니다. 안녕하세요!",
    "combining marks": "e\u0301 n\u0303 a\u0308\u0304 Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
    "devanagari": "नमस्ते दुनिया, यह एक परीक्षण है।",
    "thai": "สวัสดีครับ นี่คือการทดสอบ",
    "greek cyrillic hebrew arabic": "Ελληνικά русский текст עברית العربية",
    "nul bytes": "a\x00b\x00\x00c \x00 \x00",
    "bom at start": "\ufeffBOM at the start",
    "bom inside": "x \ufeff y\ufeff\ufeffz",
    "next line u0085": "a\u0085b a \u0085 b \u0085\u0085",
    "no-break space": "100\u00a0km a\u00a0\u00a0b \u00a0x",
    "other spaces": "a\u2028b\u2029c\u3000d\u2003e\u200bf\u180eg\u202fh",
    "control characters": "\x01\x02\x1b[31mred\x1b[0m\x7f",
    "endoftext as text": "before <|endoftext|> after <|fim_prefix|>",
    "punctuation runs": "!!!???...,,,;;; --- ((())) ...\n\n\"'`",
    "code": "for (int i = 0; i < n; i++) {\n\tx[i] += 1;\n}\n// done\n",
    "json": '{"key": [1, 2.5, null, true], "nested": {"a": "b\\n"}}',
    "url and email": "https://example.org/a/b?q=1&r=%20 user.name+tag@example.com",
    "very long word": "supercalifragilisticexpialidocious" * 60,
    "very long digits": "9876543210" * 100,
    "very long punctuation": "=-" * 1000,
    "mixed scripts in one word": "abcабвαβγ日本123٣",
}


def cut(text: str) -> str:
    data = text.encode("utf-8")[:LIMIT]
    return data.decode("utf-8", errors="ignore")


def every(paths: list[str], count: int) -> list[str]:
    paths = sorted(paths)
    step = max(1, len(paths) // count)
    return paths[::step][:count]


def gather() -> list[tuple[str, str]]:
    texts: list[tuple[str, str]] = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        texts.append((p, cut(Path(p).read_text(errors="replace"))))
    for p in every(glob.glob("/usr/share/man/man1/*.1.gz"), 40):
        texts.append((p, cut(gzip.decompress(Path(p).read_bytes()).decode(errors="replace"))))
    for p in every(glob.glob("/usr/include/*.h"), 30):
        texts.append((p, cut(Path(p).read_text(errors="replace"))))
    for p in every(glob.glob("/usr/lib/python3/dist-packages/**/*.py", recursive=True), 30):
        texts.append((p, cut(Path(p).read_text(errors="replace"))))
    langs = sorted({Path(p).parts[4] for p in glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo")})
    for lang in every(langs, 90):
        mo = sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo"))[0]
        try:
            with open(mo, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog  # msgid -> msgstr
        except Exception:
            continue
        text = "\n".join(v for k, v in sorted(catalog.items(), key=str) if k and isinstance(v, str))
        if text:
            texts.append((mo, cut(text)))
    texts += [(f"edge: {k}", v) for k, v in EDGE_CASES.items()]
    words = " ".join(t for _, t in texts[:17]).split()
    rng = random.Random(1611)
    line = []
    while sum(map(len, line)) + len(line) < 1_000_000:
        line.append(rng.choice(words))
    texts.append(("edge: 1 MB line", " ".join(line)[:1_000_000]))
    return texts


def tiktoken_ids(encoding: str, texts: list[str]) -> list[list[int]]:
    req = {"encoding": encoding, "texts": [base64.b64encode(t.encode()).decode() for t in texts]}
    r = subprocess.run(["node", str(REPO / "tests" / "tiktoken_ids.js")], input=json.dumps(req).encode(),
                       capture_output=True, cwd=REPO)
    if r.returncode != 0:
        sys.exit(f"error: node tiktoken failed: {r.stderr.decode()}")
    return json.loads(r.stdout)


def main() -> None:
    texts = gather()
    names, bodies = [n for n, _ in texts], [t for _, t in texts]
    gpt2, cl100k = tiktoken_ids("gpt2", bodies), tiktoken_ids("cl100k_base", bodies)
    fixtures = [{"name": n, "text": base64.b64encode(t.encode()).decode(), "gpt2": g, "cl100k": c}
                for n, t, g, c in zip(names, bodies, gpt2, cl100k)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(OUT, "wt", compresslevel=9) as f:
        json.dump(fixtures, f)
    print(f"wrote {OUT}: {len(fixtures)} texts", file=sys.stderr)


if __name__ == "__main__":
    main()
