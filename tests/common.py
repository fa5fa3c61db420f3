"""Shared pieces of the tests: paths, test vocabularies, random models and their export.
Every check compares run.c with an independent reference: PyTorch (export/model.py), the npm
package tiktoken, or numbers computed by hand."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "export"))
# `make sanitize` points RUN_BINARY at the AddressSanitizer + UBSan build
RUN = Path(os.environ.get("RUN_BINARY", REPO / "run")).resolve()
TMP = REPO / "tests" / "tmp"

from export import DEFAULT_GPT2_VOCAB  # noqa: E402
from tokenizer_files import gpt2_vocab  # noqa: E402
from weight_file import (RANK_NONE, TOK_BYTE_FALLBACK, TOK_DUMMY_PREFIX, TOK_MERGE_PAIRS, TOK_NFC, TOK_SENTENCEPIECE,  # noqa: E402
                         TOK_WHOLE_PIECES, TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_SPECIAL, TOKEN_UNKNOWN,
                         TokenizerData, write_model)
from model import GPT, GPTConfig  # noqa: E402
import paths  # noqa: E402

torch.set_num_threads(2)

# The instruction-set paths of the kernels this machine runs (tests/paths.py; each built by
# `make test` as tests/build/run-PATH, test_kernels-PATH and trace-PATH): on x86-64 those this
# CPU has, plus NEON without and with dotprod under qemu-user.
PATHS = [path for path, why_not in paths.paths().items() if why_not is None]

# English text for prompts; long enough for 64+ tokens in every test vocabulary.
TEXT = ("In the beginning God created the heaven and the earth. And the earth was without "
        "form, and void; and darkness was upon the face of the deep. And the Spirit of God "
        "moved upon the face of the waters. And God said, Let there be light: and there was "
        "light. And God saw the light, that it was good: and God divided the light from the "
        "darkness.\n")
CHARS = sorted(set(TEXT + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 .,;:!?'\n-"))

_gpt2: TokenizerData | None = None


def gpt2_tokenizer() -> TokenizerData:
    global _gpt2
    if _gpt2 is None:
        _gpt2 = gpt2_vocab(DEFAULT_GPT2_VOCAB)
    return _gpt2


def small_gpt2_tokenizer(merges: int) -> TokenizerData:
    """GPT-2's vocabulary cut to its 256 byte tokens and first `merges` merges (the token of merge
    i is id 256 + i and its rank, so the cut is a byte-level BPE vocabulary of its own, with no
    end-of-text token): GPT-2's tokenizer, small enough that products over the vocabulary are
    quick in tests."""
    full = gpt2_tokenizer()
    n = 256 + merges
    assert all(r == i for i, r in enumerate(full.ranks[:n]))
    return TokenizerData("gpt2", full.tokens[:n], full.ranks[:n], -1)


def char_tokenizer() -> TokenizerData:
    return TokenizerData("char", [c.encode() for c in CHARS], [RANK_NONE] * len(CHARS), -1)


def beside(folder: Path) -> Path:
    """Where a test exports a source folder: FOLDER.bin next to it (never inside it: the exporter
    refuses to write into a folder it reads)."""
    return folder.with_name(folder.name + ".bin")


def random_model(cfg: GPTConfig, seed: int, std: float = 0.3) -> GPT:
    """Random weights, large enough (std 0.3) that attention is far from uniform and logits
    span several units, so the comparisons below are sharp."""
    return GPT(cfg).init_random(seed, std=std).eval()


def export(model: GPT | None, tok: TokenizerData, name: str, dtype: str = "f32") -> Path:
    TMP.mkdir(exist_ok=True)
    path = TMP / f"{name}.bin"
    write_model(path, model, tok, dtype)
    return path


def sentencepiece_like() -> TokenizerData:
    """A hand-made SentencePiece tokenizer: <unk> <s> </s>, 256 byte pieces, four pieces, a
    normalization rule (tab -> space), byte fallback, dummy prefix."""
    pieces = [b" ", b"a", b" a", b"ab"]
    tokens = [b"<unk>", b"<s>", b"</s>", *[bytes([b]) for b in range(256)], *pieces]
    kinds = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL, *[TOKEN_BYTE] * 256, *[TOKEN_NORMAL] * len(pieces)]
    ranks = [RANK_NONE] * 259 + [0, 0, 1, 2]
    return TokenizerData("whole", tokens, ranks, 2, TOK_SENTENCEPIECE | TOK_BYTE_FALLBACK | TOK_DUMMY_PREFIX,
                         bos_id=1, unk_id=0, kinds=kinds, rules=[(b"\t", b" ")])


def tokenizer_json_like(pretokenizer: str = "qwen2") -> TokenizerData:
    """A hand-made tokenizer.json BPE: 256 bytes, two merges by pairs, one added token; Qwen2's
    split after NFC, or SmolLM2's numbers-alone split ('digits_gpt2'), which has no normalizer."""
    tokens = [bytes([b]) for b in range(256)] + [b"ab", b"abc", b"<|im_start|>"]
    kinds = [TOKEN_NORMAL] * 258 + [TOKEN_SPECIAL]
    merges = [(ord("a"), ord("b"), 256), (256, ord("c"), 257)]
    flags = TOK_MERGE_PAIRS | TOK_WHOLE_PIECES | (TOK_NFC if pretokenizer == "qwen2" else 0)
    return TokenizerData(pretokenizer, tokens, [*range(256), 256, 257, RANK_NONE], 258, flags, kinds=kinds,
                         merges=merges)


def as_version(raw: bytes, version: int) -> bytes:
    """A version 3 weight file (write_model(..., version=3)) as an earlier version of the format
    wrote it. Version 2: the tokenizer
    section without its version 3 part (a byte-level BPE of tiktoken's kind or a character
    vocabulary), zeros up to the tensor table. Version 1 also: GPT-2's block, bias 1 for every
    bias (version 2's BIAS_ALL), the header fields from byte 108 zero. The checksum recomputed."""
    import struct
    import zlib
    from weight_file import CRC_OFFSET, HEADER_FIELDS, HEADER_SIZE, TOKEN_NORMAL, TOKEN_SPECIAL, read_tokenizer, unpack_header
    h = unpack_header(raw)
    assert h["version"] == 3
    buf = bytearray(raw)
    struct.pack_into("<I", buf, 4, version)
    tok, start = read_tokenizer(raw, h["tokenizer_offset"], 3), h["tokenizer_offset"]
    assert tok.kind in ("gpt2", "cl100k", "char") and tok.bos_id < 0 and not tok.merges and not tok.rules
    assert set(tok.kinds) <= {TOKEN_NORMAL, TOKEN_SPECIAL}, "before version 3 every token was normal"
    n_tok, _, _, bytes_size = struct.unpack_from("<IIiI", raw, start)
    first_part = 16 + 8 * n_tok + 4 + bytes_size
    buf[start + first_part:start + h["tokenizer_size"]] = bytes(h["tokenizer_size"] - first_part)
    names = [name for name, _ in HEADER_FIELDS]
    size_at = struct.calcsize("<" + "".join(code for _, code in HEADER_FIELDS[:names.index("tokenizer_size")]))
    struct.pack_into("<Q", buf, size_at, first_part)
    if version == 1:
        assert h["norm"] == 0 and h["ffn"] == 0 and h["pos_kind"] < 2 and h["n_kv_head"] == h["n_head"]
        assert h["bias"] in (0, 15), "version 1 had every bias or none"
        struct.pack_into("<I", buf, 48, 1 if h["bias"] else 0)
        buf[108:HEADER_SIZE] = bytes(HEADER_SIZE - 108)
    meta_end = h["tensors_offset"] + 64 * h["n_tensors"]
    struct.pack_into("<I", buf, CRC_OFFSET, 0)
    struct.pack_into("<I", buf, CRC_OFFSET, zlib.crc32(bytes(buf[:meta_end])))
    return bytes(buf)


def run(*args: str, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUN), *map(str, args)], input=input, capture_output=True, timeout=timeout)


def on_a_terminal(*args: str) -> bytes:
    """What `run ARGS` writes to a terminal (a pty holding both stdout and stderr), with the
    terminal's CR LF turned back into LF; run must exit with status 0."""
    import pty
    leader, follower = pty.openpty()
    p = subprocess.Popen([str(RUN), *map(str, args)], stdout=follower, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert p.wait(timeout=60) == 0, out
    return out.replace(b"\r\n", b"\n")
