"""The tokenizers export.py and export_tokenizer.py read, as the tokenizer section of model.h
(weight_file.TokenizerData), each read as data:

  GPT-2's byte-level BPE      vocab.json + merges.txt (or encoder.json + vocab.bpe): tiktoken's
                              ranks (a merge's token gets rank 256 + its line), as tiktoken
                              encodes GPT-2;
  a character vocabulary      nanoGPT's meta.pkl (safe_pickle: plain data only);
  SentencePiece BPE           tokenizer.model (Llama 2, TinyLlama, llama2.c): the protobuf read by
                              hand (sentencepiece_model.proto's field numbers), the normalization
                              rules out of its precompiled double-array trie;
  Hugging Face tokenizers     tokenizer.json of byte-level BPE (SmolLM2, Qwen2.5, Llama 3): the
                              vocabulary, the merges in either spelling, the added tokens, and the
                              pre-tokenizer, normalizer and post-processor when run.c implements
                              them exactly.
What run.c does not implement exactly is refused with an error naming it, never encoded some
other way. read_tokenizer_source() finds the right one in a folder.
"""
from __future__ import annotations

import json
import struct
import sys
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parent))
from safe_pickle import UnsafeFile, load_plain  # noqa: E402
from weight_file import (MAGIC, MAX_STOP, RANK_NONE, TOK_BYTE_FALLBACK, TOK_DUMMY_PREFIX, TOK_MERGE_PAIRS,  # noqa: E402
                         TOK_NFC, TOK_REMOVE_EXTRA_SPACES, TOK_SENTENCEPIECE, TOK_WHOLE_PIECES, TOKEN_BYTE,
                         TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_SPECIAL, TOKEN_UNKNOWN, ExportError, TokenizerData,
                         read_tensors)


# ---- GPT-2's byte-level BPE ------------------------------------------------------------------

@lru_cache(maxsize=None)
def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's reversible map from bytes to printable characters, inverted: printable ASCII
    and Latin-1 bytes stand for themselves, the other 68 bytes map to U+0100 onwards in byte
    order (the scheme published with GPT-2's encoder.py)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    decoder, extra = {}, 0
    for b in range(256):
        if b in printable:
            decoder[chr(b)] = b
        else:
            decoder[chr(256 + extra)] = b
            extra += 1
    return MappingProxyType(decoder)  # shared by every caller: read-only


def bpe_vocab(vocab_path: Path, merges_path: Path) -> TokenizerData:
    """GPT-2-style vocabulary (encoder.json or vocab.json) and merges (vocab.bpe or merges.txt)
    -> token bytes and tiktoken-style ranks: a merge's result gets rank 256 + its line index,
    single bytes get their id, anything else (<|endoftext|>) is special. For GPT-2 itself these
    ranks equal the ids, as in tiktoken's gpt2 encoding."""
    try:
        vocab: dict[str, int] = json.loads(vocab_path.read_text(encoding="utf-8"))
        merge_lines = merges_path.read_text(encoding="utf-8").split("\n")
    except (OSError, ValueError) as e:
        raise ExportError(f"cannot read the BPE vocabulary: {e}") from e
    byte_of = gpt2_byte_decoder()
    n = max(vocab.values()) + 1
    if sorted(vocab.values()) != list(range(n)):
        raise ExportError(f"{vocab_path}: token ids are not 0..{n - 1} without gaps")
    tokens: list[bytes] = [b""] * n
    for text, i in vocab.items():
        if all(ch in byte_of for ch in text):
            tokens[i] = bytes(byte_of[ch] for ch in text)
        else:  # special tokens such as <|endoftext|> are written as themselves
            tokens[i] = text.encode("utf-8")
    ranks = [RANK_NONE] * n
    for text, i in vocab.items():
        if len(text) == 1 and text in byte_of:  # the 256 single-byte tokens
            ranks[i] = i
    rank = 256
    for line in merge_lines:
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ExportError(f"{merges_path}: bad merge line {line!r}")
        merged = parts[0] + parts[1]
        if merged not in vocab:
            raise ExportError(f"{merges_path}: merge result {merged!r} is not in {vocab_path.name}")
        ranks[vocab[merged]] = rank
        rank += 1
    eot = vocab.get("<|endoftext|>", -1)
    return TokenizerData("gpt2", tokens, ranks, eot)


def gpt2_vocab(folder: Path) -> TokenizerData:
    enc, bpe = folder / "encoder.json", folder / "vocab.bpe"
    if not enc.exists() or not bpe.exists():
        raise ExportError(f"GPT-2's vocabulary (encoder.json, vocab.bpe) is not in {folder}: "
                          "run `npm install` in the repository or pass --gpt2-vocab DIR")
    return bpe_vocab(enc, bpe)


def char_vocab(meta_path: Path) -> TokenizerData:
    """nanoGPT's meta.pkl: stoi / itos for a character-level vocabulary, read as plain data
    (safe_pickle: a pickle that asks to run anything is refused)."""
    try:
        meta = load_plain(meta_path)
    except UnsafeFile as e:
        raise ExportError(f"refusing to load '{meta_path}': {e}") from e
    except Exception as e:  # a corrupt pickle raises many kinds
        raise ExportError(f"cannot read '{meta_path}': {e}") from e
    itos = meta.get("itos") if isinstance(meta, dict) else None
    if not isinstance(itos, dict) or sorted(itos) != list(range(len(itos))) \
            or not all(isinstance(ch, str) for ch in itos.values()):
        raise ExportError(f"{meta_path}: no 'itos' mapping 0..n-1 to characters (expected nanoGPT's meta.pkl)")
    n = len(itos)
    tokens = [itos[i].encode("utf-8") for i in range(n)]
    return TokenizerData("char", tokens, [RANK_NONE] * n, -1)


# ---- SentencePiece's tokenizer.model -----------------------------------------------------------

def protobuf_fields(data: bytes, where: str):
    """(field number, wire type, value) of a protobuf message: varints as ints, 32- and 64-bit
    values as their raw bytes, length-delimited ones as bytes (protobuf's wire format)."""
    at = 0

    def varint() -> int:
        nonlocal at
        value, shift = 0, 0
        while True:
            if at >= len(data) or shift > 63:
                raise ExportError(f"{where}: malformed protobuf (a varint runs past the end)")
            b = data[at]
            at += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while at < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            yield number, wire, varint()
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if at + size > len(data):
                raise ExportError(f"{where}: malformed protobuf (a value runs past the end)")
            yield number, wire, data[at:at + size]
            at += size
        elif wire == 2:
            size = varint()
            if at + size > len(data):
                raise ExportError(f"{where}: malformed protobuf (a field runs past the end)")
            yield number, wire, data[at:at + size]
            at += size
        else:
            raise ExportError(f"{where}: malformed protobuf (wire type {wire})")


def darts_entries(units: list[int]) -> dict[bytes, int]:
    """Every (key, value) of a double-array trie as darts-clone stores it (SentencePiece's
    precompiled_charsmap): unit bit 8 says a key ends at the node, the offset to a node's
    children is (unit >> 10) << ((unit & 0x200) >> 6), a child's label is the key byte xor'ed
    in, and a leaf unit's low 31 bits are the value."""
    def offset(u: int) -> int:
        return (u >> 10) << ((u & (1 << 9)) >> 6)

    out: dict[bytes, int] = {}
    stack = [(0, b"")]
    while stack:
        node, key = stack.pop()
        if len(key) > 64:
            raise ExportError("precompiled_charsmap: a rule longer than 64 bytes")
        base = node ^ offset(units[node])
        if key and (units[node] >> 8) & 1:
            if base >= len(units):
                raise ExportError("precompiled_charsmap: a leaf outside the trie")
            out[key] = units[base] & ((1 << 31) - 1)
        for c in range(1, 256):
            child = base ^ c
            if child < len(units) and units[child] & ((1 << 31) | 0xFF) == c:
                stack.append((child, key + bytes([c])))
    return out


def charsmap_rules(blob: bytes, where: str) -> list[tuple[bytes, bytes]]:
    """SentencePiece's precompiled_charsmap: a 4-byte trie size, the trie, then NUL-terminated
    replacements the trie's values point into (normalizer.cc DecodePrecompiledCharsMap)."""
    if len(blob) < 4:
        raise ExportError(f"{where}: precompiled_charsmap is too short")
    trie_size = struct.unpack_from("<I", blob)[0]
    if trie_size % 4 or 4 + trie_size > len(blob):
        raise ExportError(f"{where}: precompiled_charsmap's trie does not fit")
    units = list(struct.unpack_from(f"<{trie_size // 4}I", blob, 4))
    strings = blob[4 + trie_size:]
    rules = []
    for key, value in sorted(darts_entries(units).items()):
        end = strings.find(b"\0", value)
        if value >= len(strings) or end < 0:
            raise ExportError(f"{where}: precompiled_charsmap points past its strings")
        rules.append((key, strings[value:end]))
    return rules


NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # ModelProto.SentencePiece.Type


def sentencepiece_vocab(path: Path) -> TokenizerData:
    """tokenizer.model: SentencePiece's ModelProto. Pieces (1: piece, score, type), trainer_spec
    (2: model_type 3, treat_whitespace_as_suffix 24, byte_fallback 35, unk_id 40, bos_id 41,
    eos_id 42, unk_surface 44), normalizer_spec (3: name 1, precompiled_charsmap 2,
    add_dummy_prefix 3, remove_extra_whitespaces 4, escape_whitespaces 5), denormalizer_spec (5).
    BPE models only; user-defined and unused pieces, whitespace as suffix and unescaped spaces
    are refused. The tokens' bytes are what they print: spaces for U+2581, a byte piece's byte,
    the unknown piece as unk_surface; a normal piece's rank orders it by score."""
    where = str(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror}") from e
    pieces: list[tuple[bytes, float, int]] = []
    trainer: dict[int, object] = {}
    normalizer: dict[int, object] = {}
    for number, wire, value in protobuf_fields(data, where):
        if number == 1 and wire == 2:
            piece, score, kind = b"", 0.0, NORMAL
            for n, w, v in protobuf_fields(value, where):
                if n == 1 and w == 2:
                    piece = v
                elif n == 2 and w == 5:
                    score = struct.unpack("<f", v)[0]
                elif n == 3 and w == 0:
                    kind = v
            pieces.append((piece, score, kind))
        elif number in (2, 3) and wire == 2:
            (trainer if number == 2 else normalizer).update({n: v for n, _, v in protobuf_fields(value, where)})
        elif number == 5 and wire == 2:
            if {n: v for n, _, v in protobuf_fields(value, where)}.get(2):
                raise ExportError(f"{where}: a denormalizer (denormalizer_spec) is not implemented")
    if not pieces:
        raise ExportError(f"{where}: not a SentencePiece model (no pieces)")
    if trainer.get(3, 1) != 2:
        raise ExportError(f"{where}: SentencePiece model_type {trainer.get(3, 1)} (1: unigram) is not implemented: "
                          "only BPE (2)")
    if trainer.get(24, 0):
        raise ExportError(f"{where}: treat_whitespace_as_suffix is not implemented")
    if not normalizer.get(5, 1):
        raise ExportError(f"{where}: escape_whitespaces false is not implemented")
    byte_fallback = bool(trainer.get(35, 0))
    unk_surface = trainer.get(44, " \u2047 ".encode())
    rules = charsmap_rules(normalizer[2], where) if normalizer.get(2) else []
    tokens, kinds, scores = [], [], []
    for i, (piece, score, kind) in enumerate(pieces):
        text = piece.decode("utf-8", errors="strict") if piece else ""
        if kind in (USER_DEFINED, UNUSED):
            raise ExportError(f"{where}: piece {i} {text!r} is {'user-defined' if kind == USER_DEFINED else 'unused'}: "
                              "not implemented")
        if kind == BYTE:
            if not (len(text) == 6 and text.startswith("<0x") and text.endswith(">")):
                raise ExportError(f"{where}: byte piece {i} is {text!r}, not <0xNN>")
            tokens.append(bytes([int(text[3:5], 16)]))
            kinds.append(TOKEN_BYTE)
        elif kind == UNKNOWN:
            tokens.append(unk_surface)
            kinds.append(TOKEN_UNKNOWN)
        elif kind == CONTROL:
            tokens.append(piece)
            kinds.append(TOKEN_CONTROL)
        else:
            if " " in text:
                raise ExportError(f"{where}: piece {i} {text!r} holds a space, which SentencePiece escapes")
            tokens.append(text.replace("\u2581", " ").encode())
            kinds.append(TOKEN_NORMAL)
            scores.append(score)
    # ranks from scores: a higher score merges first; equal scores share a rank (the leftmost
    # pair of those merges first, as SentencePiece's agenda orders them)
    order = {s: r for r, s in enumerate(sorted(set(scores), reverse=True))}
    normal_scores = iter(scores)
    ranks = [order[next(normal_scores)] if k == TOKEN_NORMAL else RANK_NONE for k in kinds]
    def control_id(field: int, default: int) -> int:
        i = trainer.get(field, default)
        i = i if i < (1 << 63) else i - (1 << 64)  # int32 -1 as a varint
        return i if 0 <= i < len(tokens) and kinds[i] == TOKEN_CONTROL else -1
    unk = trainer.get(40, 0)
    unk = unk if unk < len(tokens) and kinds[unk] == TOKEN_UNKNOWN else -1
    if not byte_fallback and unk < 0:
        raise ExportError(f"{where}: neither byte fallback nor an unknown piece")
    flags = TOK_SENTENCEPIECE | (TOK_BYTE_FALLBACK if byte_fallback else 0)
    flags |= TOK_DUMMY_PREFIX if normalizer.get(3, 1) else 0
    flags |= TOK_REMOVE_EXTRA_SPACES if normalizer.get(4, 1) else 0
    return TokenizerData("whole", tokens, ranks, control_id(42, 2), flags, control_id(41, 1), unk, kinds, [], rules)


# ---- Hugging Face's tokenizer.json ------------------------------------------------------------

# The Split patterns of the pre-tokenizers run.c implements (tokenizer.c spells them out).
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
# GPT-4o's (tiktoken's o200k_base; Phi-4-mini's tokenizer.json splits by it too)
O200K_PATTERN = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
                 r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
                 r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def describe(node: object) -> str:
    """A pre-tokenizer / normalizer node, briefly, for error messages."""
    if not isinstance(node, dict):
        return repr(node)
    if node.get("type") == "Sequence":
        inner = node.get("pretokenizers") or node.get("normalizers") or node.get("processors") or []
        return "Sequence[" + ", ".join(describe(x) for x in inner) + "]"
    extra = {k: v for k, v in node.items() if k != "type"}
    return f"{node.get('type')}{extra}" if extra else str(node.get("type"))


def pre_tokenizer_kind(node: object, where: str) -> str:
    """The PRETOK kind of a tokenizer.json pre_tokenizer, or an error naming it."""
    def byte_level(x: object, use_regex: bool) -> bool:
        return isinstance(x, dict) and x.get("type") == "ByteLevel" and not x.get("add_prefix_space", False) \
            and bool(x.get("use_regex", True)) == use_regex
    if byte_level(node, True):
        return "gpt2"
    if isinstance(node, dict) and node.get("type") == "Sequence":
        steps = node.get("pretokenizers") or []
        if len(steps) == 2 and steps[0].get("type") == "Digits" and steps[0].get("individual_digits") \
                and byte_level(steps[1], True):
            return "digits_gpt2"
        if len(steps) == 2 and steps[0].get("type") == "Split" and byte_level(steps[1], False) \
                and steps[0].get("behavior") == "Isolated" and not steps[0].get("invert", False):
            pattern = (steps[0].get("pattern") or {}).get("Regex")
            if pattern == LLAMA3_SPLIT:
                return "cl100k"
            if pattern == QWEN2_SPLIT:
                return "qwen2"
            if pattern == O200K_PATTERN:
                return "o200k"
    raise ExportError(f"{where}: pre_tokenizer {describe(node)} is not implemented (run.c splits as GPT-2's "
                      "ByteLevel, SmolLM2's Digits + ByteLevel, Llama 3's, Qwen2's and o200k's Split + ByteLevel)")


def bos_of_post_processor(node: object, ids: dict[str, int], where: str) -> int:
    """The token a tokenizer.json's post_processor puts before every text, or -1."""
    if node is None or (isinstance(node, dict) and node.get("type") == "ByteLevel"):
        return -1
    if isinstance(node, dict) and node.get("type") == "Sequence":
        found = [bos_of_post_processor(p, ids, where) for p in node.get("processors") or []]
        return max(found, default=-1)
    if isinstance(node, dict) and node.get("type") == "TemplateProcessing":
        single = node.get("single") or []
        names = [next(iter(step)) for step in single if isinstance(step, dict) and step]
        if names == ["Sequence"]:
            return -1
        if names == ["SpecialToken", "Sequence"]:
            name = single[0]["SpecialToken"]["id"]
            if name not in ids:
                raise ExportError(f"{where}: post_processor adds {name!r}, which is no token")
            return ids[name]
    raise ExportError(f"{where}: post_processor {describe(node)} is not implemented (a BOS token before the text, or nothing)")


def tokenizer_json_vocab(path: Path, eos: str | int | None = None) -> TokenizerData:
    """tokenizer.json of byte-level BPE: model.vocab (byte-level strings -> ids), model.merges
    ("a b" strings or ["a", "b"] pairs; rank = position), added_tokens (TOKEN_SPECIAL: plain text
    unless run --special), the pre-tokenizer, an NFC normalizer or none, a BOS from the
    post-processor, ignore_merges. eos: the end-of-text token (its text or id) when the folder's
    configuration names one."""
    where = str(path)
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
        model = spec["model"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{where}: not a tokenizer.json ({e})") from e
    if model.get("type", "BPE") != "BPE":
        raise ExportError(f"{where}: model type {model.get('type')} is not implemented (only BPE)")
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise ExportError(f"{where}: model.{key} {model[key]!r} is not implemented")
    if model.get("byte_fallback"):
        raise ExportError(f"{where}: model.byte_fallback (a SentencePiece tokenizer converted to tokenizer.json) "
                          "is not implemented: export with its tokenizer.model")
    kind = pre_tokenizer_kind(spec.get("pre_tokenizer"), where)
    normalizer = spec.get("normalizer")
    flags = TOK_MERGE_PAIRS | (TOK_WHOLE_PIECES if model.get("ignore_merges") else 0)
    if normalizer is not None:
        if normalizer.get("type") != "NFC":
            raise ExportError(f"{where}: normalizer {describe(normalizer)} is not implemented (only NFC)")
        flags |= TOK_NFC
    decoder = spec.get("decoder")
    if decoder is not None and decoder.get("type") != "ByteLevel":
        raise ExportError(f"{where}: decoder {describe(decoder)} is not implemented (only ByteLevel)")
    vocab: dict[str, int] = model.get("vocab") or {}
    byte_of = gpt2_byte_decoder()
    added = spec.get("added_tokens") or []
    n = max([*vocab.values(), *(a["id"] for a in added)], default=-1) + 1
    tokens: list[bytes | None] = [None] * n
    kinds = [TOKEN_NORMAL] * n
    for text, i in vocab.items():
        if not all(ch in byte_of for ch in text):
            raise ExportError(f"{where}: token {i} {text!r} is not in the byte-level alphabet (not byte-level BPE)")
        tokens[i] = bytes(byte_of[ch] for ch in text)
    for a in added:
        # lstrip and rstrip (whitespace swallowed beside the token) reach chat through chat.tokens
        if a.get("single_word") or (not a.get("special") and (a.get("lstrip") or a.get("rstrip"))):
            key = "single_word" if a.get("single_word") else "lstrip or rstrip on a token that is not special"
            raise ExportError(f"{where}: added token {a['content']!r} has {key}: not implemented")
        tokens[a["id"]] = a["content"].encode("utf-8")
        kinds[a["id"]] = TOKEN_SPECIAL
    for i in (i for i, t in enumerate(tokens) if t is None):
        # an id the file leaves unused (cl100k_base has 100256 and 100258..100263): a control
        # token with no text, which encoding never produces and decoding prints as nothing
        tokens[i], kinds[i] = b"", TOKEN_CONTROL
    ids = {**vocab, **{a["content"]: a["id"] for a in added}}
    merges, seen = [], set()
    for m in model.get("merges") or []:
        left, right = m if isinstance(m, list) else m.split(" ", 1) if isinstance(m, str) and " " in m else (None, None)
        if left is None or left not in vocab or right not in vocab or left + right not in vocab:
            raise ExportError(f"{where}: merge {m!r} is not of two tokens whose concatenation is a token")
        if (left, right) in seen:
            raise ExportError(f"{where}: merge {m!r} is listed twice")
        seen.add((left, right))
        merges.append((vocab[left], vocab[right], vocab[left + right]))
    single_bytes = {tokens[i] for i in vocab.values() if len(tokens[i]) == 1}
    for b in range(256):
        if bytes([b]) not in single_bytes:
            raise ExportError(f"{where}: no token for byte {b} (not byte-level BPE)")
    eot = -1
    if isinstance(eos, int):
        eot = eos
    elif isinstance(eos, str):
        eot = ids.get(eos, -1)
    else:
        eot = next((ids[name] for name in ("<|endoftext|>", "<|end_of_text|>", "</s>") if name in ids), -1)
    ranks = [i if k == TOKEN_NORMAL else RANK_NONE for i, k in enumerate(kinds)]
    bos = bos_of_post_processor(spec.get("post_processor"), ids, where)
    return TokenizerData(kind, tokens, ranks, eot, flags, bos, -1, kinds, merges, [])


def folder_eos(folder: Path) -> str | int | None:
    """The end-of-text token a Hugging Face folder names: config.json's eos_token_id (the first
    of a list), else tokenizer_config.json's eos_token."""
    try:
        eos = json.loads((folder / "config.json").read_text()).get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        if isinstance(eos, int):
            return eos
    except (OSError, ValueError, AttributeError):
        pass
    try:
        eos = json.loads((folder / "tokenizer_config.json").read_text()).get("eos_token")
        return eos.get("content") if isinstance(eos, dict) else eos
    except (OSError, ValueError, AttributeError):
        return None


def folder_stop_ids(folder: Path, tok: TokenizerData) -> list[int]:
    """The stop set of a Hugging Face folder: the end-of-text token, then every id of
    generation_config.json's eos_token_id and of config.json's (an id or a list of ids: Llama 3
    Instruct lists [128001, 128008, 128009] and ends its turns with 128009, Qwen2.5-Instruct
    [151645, 151643]), then tokenizer_config.json's eos_token (a token's text), each once. A value
    of the wrong kind, or an id or text the vocabulary does not have, is an error naming it."""
    stop = [tok.eot_id] if tok.eot_id >= 0 else []

    def add(token_id: object, where: str) -> None:
        if not isinstance(token_id, int) or isinstance(token_id, bool) or not 0 <= token_id < len(tok.tokens):
            raise ExportError(f"{where}: eos token id {token_id!r} is not an id of the {len(tok.tokens)}-token vocabulary")
        if token_id not in stop:
            stop.append(token_id)

    for name in ("generation_config.json", "config.json"):
        conf = read_json_object(folder / name)
        eos = conf.get("eos_token_id")
        for token_id in (eos if isinstance(eos, list) else [] if eos is None else [eos]):
            add(token_id, f"{folder / name}")
    eos = read_json_object(folder / "tokenizer_config.json").get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    if eos is not None:
        text = eos.encode() if isinstance(eos, str) else None
        matches = [i for i, t in enumerate(tok.tokens) if t == text and tok.kinds[i] != TOKEN_NORMAL] or \
                  [i for i, t in enumerate(tok.tokens) if t == text]
        if not matches:
            raise ExportError(f"{folder / 'tokenizer_config.json'}: eos_token {eos!r} is not a token of the vocabulary")
        add(matches[0], f"{folder / 'tokenizer_config.json'}")
    if len(stop) > MAX_STOP:
        raise ExportError(f"{folder}: {len(stop)} stop tokens, more than the {MAX_STOP} a weight file holds")
    return stop


def read_json_object(path: Path) -> dict:
    """A JSON file's top-level object, {} when the file is missing; anything else is an error."""
    if not path.exists():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ExportError(f"{path}: not JSON ({e})") from e
    if not isinstance(value, dict):
        raise ExportError(f"{path}: not a JSON object")
    return value


# ---- a SentencePiece model's added tokens, and how Hugging Face splits text on them ---------------

def hf_added_tokens(folder: Path | None) -> list[dict] | None:
    """The added tokens of a folder's Hugging Face tokenizer: tokenizer.json's added_tokens (id,
    content, lstrip, rstrip, single_word, normalized, special), else added_tokens.json's
    {content: id} with the flags of tokenizer_config.json's added_tokens_decoder; None when the
    folder has neither (or there is no folder: a GGUF's tokenizer)."""
    if folder is None:
        return None
    if (folder / "tokenizer.json").exists():
        try:
            spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
            added = spec.get("added_tokens") or []
            return [dict(a, id=int(a["id"]), content=str(a["content"])) for a in added]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ExportError(f"{folder / 'tokenizer.json'}: unreadable added_tokens ({e})") from e
    if (folder / "added_tokens.json").exists():
        names = read_json_object(folder / "added_tokens.json")
        decoder = read_json_object(folder / "tokenizer_config.json").get("added_tokens_decoder") or {}
        out = []
        for content, i in names.items():
            if not isinstance(i, int) or isinstance(i, bool):
                raise ExportError(f"{folder / 'added_tokens.json'}: the id of {content!r} is not a number")
            flags = decoder.get(str(i)) if isinstance(decoder.get(str(i)), dict) else {}
            out.append({"id": i, "content": content, "lstrip": bool(flags.get("lstrip")),
                        "rstrip": bool(flags.get("rstrip")), "single_word": bool(flags.get("single_word")),
                        "normalized": bool(flags.get("normalized", False)), "special": bool(flags.get("special", True))})
        return out
    return None


def with_added_tokens(tok: TokenizerData, folder: Path) -> TokenizerData:
    """A SentencePiece vocabulary with the added tokens of its folder's Hugging Face tokenizer
    after its pieces (Phi-3's <|user|>, <|end|>, ... from 32000): TOKEN_SPECIAL tokens whose text
    --special and chat recognise. An added token at a piece's id must spell that piece."""
    added = hf_added_tokens(folder) or []
    n = len(tok.tokens)
    extra = sorted((a for a in added if a["id"] >= n), key=lambda a: a["id"])
    for a in added:
        if a["id"] < n and tok.tokens[a["id"]] != a["content"].encode() and tok.kinds[a["id"]] != TOKEN_UNKNOWN:
            raise ExportError(f"{folder}: added token {a['content']!r} has id {a['id']}, the piece "
                              f"{tok.tokens[a['id']].decode(errors='replace')!r}")
    if [a["id"] for a in extra] != list(range(n, n + len(extra))):
        raise ExportError(f"{folder}: the added tokens after the {n} pieces leave gaps in the ids")
    for a in extra:
        tok.tokens.append(a["content"].encode())
        tok.ranks.append(RANK_NONE)
        tok.kinds.append(TOKEN_SPECIAL)
    return tok


def chat_tokenization(folder: Path | None, tok: TokenizerData) -> dict[str, str]:
    """How Hugging Face's tokenizer of the folder splits a rendered conversation, as metadata:
    chat.tokens, the added tokens whose text is that token wherever it appears ("ID", "ID:r" when
    the whitespace after it is swallowed (rstrip), "ID:l" before it (lstrip), "ID:FLAGS:HEX" when
    its text is not the token's bytes); and for SentencePiece,
    chat.spaces, which of the texts between them get SentencePiece's leading space: "every" (a
    Prepend normalizer: transformers' legacy Llama tokenizer), "first" (Metaspace's prepend_scheme
    first: only a text at the start that does not begin with a space), "always", "never".
    Without a folder (a GGUF's tokenizer), the special, control and unknown tokens are the added
    tokens, and SentencePiece's texts each get the leading space (transformers' legacy default).
    Raises ExportError for what run cannot split the same way."""
    added = hf_added_tokens(folder)
    where = folder / "tokenizer.json" if folder is not None else "the tokenizer"
    if added is None:  # transformers converts tokenizer.model: the unknown and control pieces are added tokens
        added = [{"id": i, "content": t.decode(errors="replace")} for i, t in enumerate(tok.tokens)
                 if tok.kinds[i] in (TOKEN_CONTROL, TOKEN_UNKNOWN, TOKEN_SPECIAL) and t]
    entries = []
    for a in sorted(added, key=lambda a: a["id"]):
        if not a["content"]:
            continue
        if a.get("single_word"):
            raise ExportError(f"{where}: added token {a['content']!r} has single_word: not implemented")
        if a.get("normalized") and any(c.isspace() or c == "\u2581" for c in a["content"]):
            raise ExportError(f"{where}: added token {a['content']!r} is normalized and holds a space: not implemented")
        if not 0 <= a["id"] < len(tok.tokens):
            raise ExportError(f"{where}: added token {a['content']!r} has id {a['id']}, outside the vocabulary")
        flags = ("l" if a.get("lstrip") else "") + ("r" if a.get("rstrip") else "")
        text = a["content"].encode()
        # the text, in hex, when the token's bytes spell something else (SentencePiece's <unk> prints " ⁇ ")
        spelled = "" if tok.tokens[a["id"]] == text else ":" + text.hex()
        entries.append(f"{a['id']}:{flags}{spelled}" if flags or spelled else str(a["id"]))
    out = {"chat.tokens": " ".join(entries)}
    if tok.flags & TOK_SENTENCEPIECE:
        if tok.rules or tok.flags & TOK_REMOVE_EXTRA_SPACES:
            raise ExportError(f"{folder}: the SentencePiece model normalizes its text (rules or extra spaces "
                              "removed), which Hugging Face's Llama tokenizer does not: chat would differ")
        out["chat.spaces"] = sentencepiece_spaces(folder)
    return out


def sentencepiece_spaces(folder: Path | None) -> str:
    """chat.spaces (chat_tokenization) from tokenizer.json's normalizer and pre-tokenizer, or from
    tokenizer_config.json's legacy flag (true unless said: transformers' default) when there is no
    tokenizer.json."""
    if folder is None:
        return "every"
    if not (folder / "tokenizer.json").exists():
        legacy = read_json_object(folder / "tokenizer_config.json").get("legacy", True)
        return "every" if legacy in (True, None) else "first"
    spec = read_json_object(folder / "tokenizer.json")
    norm, pre = spec.get("normalizer"), spec.get("pre_tokenizer")
    steps = norm.get("normalizers") if isinstance(norm, dict) and norm.get("type") == "Sequence" else [norm] if norm else []
    kinds = [s.get("type") if isinstance(s, dict) else None for s in steps]
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    if pre is None and kinds == ["Prepend", "Replace"] and steps[0].get("prepend") == "\u2581" and steps[1] == replace:
        return "every"
    if pre is None and steps == [replace]:
        return "never"
    if not steps and isinstance(pre, dict) and pre.get("type") == "Metaspace" and pre.get("replacement") == "\u2581" \
            and not pre.get("split", True) and pre.get("prepend_scheme", "always") in ("first", "always", "never"):
        return pre.get("prepend_scheme", "always")
    raise ExportError(f"{folder / 'tokenizer.json'}: normalizer {describe(norm)} with pre_tokenizer {describe(pre)} "
                      "is not implemented for chat (Llama's Prepend + Replace, or Metaspace without split)")


# ---- finding one -------------------------------------------------------------------------------

def with_stop_ids(tok: TokenizerData, folder: Path, is_folder: bool) -> TokenizerData:
    """tok with its folder's stop set, when the tokenizer came from a model's folder."""
    if is_folder:
        tok.stop_ids = folder_stop_ids(folder, tok)
    return tok


def read_tokenizer_source(path: Path) -> TokenizerData:
    """A tokenizer from a file or folder: one of our weight files (its tokenizer section), a
    SentencePiece tokenizer.model, a Hugging Face tokenizer.json, or a folder with vocab.json +
    merges.txt or encoder.json + vocab.bpe (GPT-2's byte-level BPE). In a folder, tokenizer.model
    comes first (SentencePiece's own file, where a tokenizer.json beside it is a conversion), then
    tokenizer.json, then vocab.json."""
    path = Path(path)
    if path.is_file():
        with open(path, "rb") as f:
            if f.read(4) == struct.pack("<I", MAGIC):
                return read_tensors(path)[1]
        folder, names = path.parent, [path.name]
    elif path.is_dir():
        folder, names = path, ["tokenizer.model", "tokenizer.json", "vocab.json", "encoder.json"]
    else:
        raise ExportError(f"tokenizer '{path}' does not exist")
    for name in names:
        if not (folder / name).exists():
            continue
        if name.endswith(".model"):
            tok = sentencepiece_vocab(folder / name)
            return with_stop_ids(with_added_tokens(tok, folder) if path.is_dir() else tok, folder, path.is_dir())
        if name.endswith(".json") and name not in ("vocab.json", "encoder.json"):
            return with_stop_ids(tokenizer_json_vocab(folder / name, folder_eos(folder)), folder, path.is_dir())
        merges = {"vocab.json": "merges.txt", "encoder.json": "vocab.bpe"}.get(name)
        if merges is not None:
            return with_stop_ids(bpe_vocab(folder / name, folder / merges), folder, path.is_dir())
        raise ExportError(f"tokenizer '{path}': expected tokenizer.model, tokenizer.json, vocab.json, encoder.json "
                          "or one of our weight files")
    raise ExportError(f"no tokenizer in {folder} (tokenizer.model, tokenizer.json, vocab.json + merges.txt)")
