"""GGUF files (llama.cpp's format) through export/export.py, checked against llama.cpp itself:
its prebuilt libraries from npm (node-llama-cpp 3.21.1, llama.cpp release v0.4.0) driven by
tests/llama_ref.c. Nothing here passes without them: a missing build fails, loudly.

The files: a tiny random model of each architecture and tokenizer people run from GGUF files,
written in F32 by tests/gguf_writer.py with llama.cpp's converter's conventions, and quantized by
llama.cpp's own quantizer to F16, BF16, Q8_0 and Q4_0 (Q4_0 with a Q8_0 output head, a file of
mixed types as llama.cpp's Q4_0 files are):

  llama2   llama, SentencePiece (a tokenizer.model trained here, as Llama 2 and TinyLlama carry
           one), grouped-query attention 4:2, untied head
  llama3   llama, byte-level BPE with pre-tokenizer "llama-bpe", Llama 3's rope scaling as
           rope_freqs.weight, multi-query attention, theta 500000, untied head
  smollm   llama, byte-level BPE with pre-tokenizer "smollm", tied head
  qwen2    qwen2, byte-level BPE with pre-tokenizer "qwen2", biases on query/key/value, queries
           and keys in halves (llama.cpp's NEOX rotation), theta 1e6, tied head, a chat template
  gpt2     gpt2, byte-level BPE with pre-tokenizer "gpt-2", LayerNorm, learned positions, GELU,
           fused query/key/value, tied head

For each file and type:
  - our tokenization of the tokenizer corpus (tests/tokenizer_corpus.py) equals llama.cpp's
    llama_tokenize on the same GGUF, BOS included as it adds it. Invalid UTF-8 is where they part,
    and on purpose: llama.cpp's byte-level BPE throws on it (so those texts are left out), and its
    SentencePiece encodes the raw bytes as byte pieces where SentencePiece itself, and run, encode
    U+FFFD (those texts are checked to be the only ones that differ, and to equal SentencePiece's);
  - per model, run --special against llama.cpp's parse_special on the same texts and the
    special tokens' own, and the one deliberate difference: llama.cpp matches a user-defined
    token's text in any text, run only with --special;
  - the stop set and BOS equal llama.cpp's (llama_vocab_is_eog, llama_vocab_get_add_bos);
  - every weight as llama.cpp's own dequantizer (ggml's to_float) gives it, bit for bit;
  - logits at every position of a prompt within a tolerance derived from what each side rounds
    (below); greedy tokens equal to llama.cpp's where its top choice is clear by more than twice
    that tolerance at every step (the test asserts the margins, so its premise cannot lapse).
And a GGUF made from a Hugging Face folder of tests/llama_sources.py exports to the folder's own
export, byte for byte; a Q8_0 file with quants of -128 (which llama.cpp's quantizer never writes)
computes every product exactly and logits as llama.cpp's.

The tolerance. Both programs multiply the same weights; they differ in what they round the
activations to before a matrix product. llama.cpp rounds them to the vec_dot type of the
weight's type: binary16 for F16 weights, bfloat16 for BF16, Q8_0 (int8 per 32 with a binary16
scale) for Q8_0 and Q4_0, nothing for F32; and its GELU looks its argument up in a binary16
table. run rounds them to int8 per 32 with a float32 scale for q8_0 and q4_0 weights, and
nothing else (F16 and BF16 arrive as float32 weights). Each program's rounding moves its logits
away from the logits of the same weights with unrounded activations by about what that rounding
does in the PyTorch reference (export/model.py on the GGUF's exact weights), so by the triangle
inequality through the reference's unrounded logits, |run - llama.cpp| <= 1e-4 (1 + max|logit|)
+ 1.5 (A_run + A_llama.cpp). A_x is the largest change rounding as x does makes in the
reference's logits; 1e-4 (1 + max|logit|) is this suite's tolerance for float32 summation order
(README, "How exactness is checked"); the half again is because each A is one draw, measured on
the reference's own inputs, while each program rounds inputs that differ from those in their
last bits, another draw of the same rounding, which may move the logits a little more. With F32
weights both A are 0 (GPT-2's GELU table aside); where both quantize, the two roundings are
alike (the same quants unless an input differs in its last bits) and the difference stays well
under the sum.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from common import REPO, RUN, TEXT, TMP, GPTConfig, random_model
from compare import c_generate, c_logits, c_tokens
from gguf_file import read_gguf
from gguf_import import load_gguf
from gguf_writer import (BOOL, STRING, UINT32, add_bpe_vocab, add_sentencepiece_vocab, gguf_of_hf_folder,
                         gguf_of_model, sentencepiece_pieces)
from llama_sources import ARCH_MODELS, write_hf_folder
from model import BIAS_QKV, quantize_q8_0
from test_chat import CONTENTS, reference_render, run_ids
from test_llama import LLAMA, LLAMA3_SCALING, gpt2_files
from test_paths import check_trace
from test_tokenizer_kinds import c_encode, sp_model
from tokenizer_corpus import corpus, records
from weight_file import WEIGHT_TYPES, read_header_and_table, read_tensors, table_entries, unpack_header

PYTHON = "/usr/bin/python3"
LLAMA_REF = REPO / "tests" / "build" / "llama_ref"
TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>"]  # control tokens
# added tokens that are not special (user-defined): two llama.cpp treats as control tokens by their
# text, and ends a generation at, and one it matches in any text
USER_DEFINED = ["<|fim_pad|>", "<|file_sep|>", "<tool_call>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def llama_ref(*args, stdin: bytes | None = None) -> bytes:
    """llama.cpp itself (tests/llama_ref.c): its stdout; it must succeed."""
    assert LLAMA_REF.exists(), (f"{LLAMA_REF} is missing: `make test` builds it against npm node-llama-cpp 3.21.1 and "
                                "@node-llama-cpp/linux-x64 or linux-arm64 (tests/deps.sh installs them)")
    r = subprocess.run([str(LLAMA_REF), *map(str, args)], input=stdin, capture_output=True, timeout=600)
    assert r.returncode == 0, f"llama_ref {args[0]} failed: {r.stderr.decode(errors='replace')[-2000:]}"
    return r.stdout


def export_cli(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(source), str(out), *extra],
                          capture_output=True, text=True, timeout=600)


# ---- the files -------------------------------------------------------------------------------------

MODELS = {
    "llama2": dict(arch="llama", vocab="sentencepiece", n_kv_head=2, tied=False),
    "llama3": dict(arch="llama", vocab="llama-bpe", n_kv_head=1, tied=False, theta=500000.0, scaling=LLAMA3_SCALING),
    "smollm": dict(arch="llama", vocab="smollm", n_kv_head=4, tied=True),
    "qwen2": dict(arch="qwen2", vocab="qwen2", n_kv_head=2, tied=True, theta=1e6, bias=BIAS_QKV),
    "gpt2": dict(arch="gpt2", vocab="gpt-2", tied=True),
}
# GGUF's block formats (tests/test_gguf_blocks.py): a Llama shape whose rows are multiples of 256
# (Q4_K_M's q4_k and q6_k), and SmolLM2's, whose width is not (576 = 2.25 x 256: here 192), so that
# Q4_K_M falls back to Q5_0 and Q8_0 but for the down projection (rows of n_hidden, 1536 there)
BLOCK_MODELS = {
    "llama_k": dict(arch="llama", vocab="sentencepiece", n_kv_head=2, tied=False, n_layer=4, n_embd=256, n_hidden=512),
    "smollm2_k": dict(arch="llama", vocab="smollm", n_kv_head=1, tied=True, n_layer=4, n_head=3, n_embd=192,
                      n_hidden=512),
}
# heads of their own size (attention.key_length): 4 heads of 64 in a width of 128, as Qwen3's and
# Gemma 3's heads are wider than their width divided by their heads
HEAD_MODELS = {"wide_heads": dict(arch="llama", vocab="sentencepiece", n_kv_head=2, tied=False, head_dim=64)}
SPECS = {**MODELS, **BLOCK_MODELS, **HEAD_MODELS}
_made: dict[str, tuple[Path, Path]] = {}


def model_config(name: str, vocab_size: int) -> GPTConfig:
    spec = SPECS[name]
    shape = dict(head_dim=spec.get("head_dim", 0), n_layer=spec.get("n_layer", 2), n_head=spec.get("n_head", 4), n_embd=spec.get("n_embd", 128),
                 n_hidden=spec.get("n_hidden", 256), n_ctx=128, vocab_size=vocab_size, vocab_padded=vocab_size,
                 tied_head=spec["tied"])
    if spec["arch"] == "gpt2":
        return GPTConfig(**shape)
    return GPTConfig(**shape, **{**LLAMA, "bias": spec.get("bias", 0)}, n_kv_head=spec["n_kv_head"],
                     rope_theta=spec.get("theta", 10000.0))


def write_f32_gguf(name: str, path: Path) -> None:
    """The model's GGUF in F32: random weights, the vocabulary, its special tokens."""
    spec = SPECS[name]
    if spec["vocab"] == "sentencepiece":
        vocab_size = len(sentencepiece_pieces(sp_model("llama2c_512")))
    else:
        vocab_size = len(json.loads(gpt2_files()["vocab.json"])) + len(SPECIALS) + len(USER_DEFINED)
    cfg = model_config(name, vocab_size)
    seed = sum(map(ord, name))
    model = random_model(cfg, seed=seed, std=0.05)
    with torch.no_grad():  # large embeddings, small blocks, and an untied head whose rows are the
        # embeddings shuffled: each position's next token stands well clear of the rest, while the
        # blocks still move the logits by far more than any tolerance here
        gen = torch.Generator().manual_seed(seed)
        model.transformer.wte.weight.copy_(torch.randn(model.transformer.wte.weight.shape, generator=gen))
        if not cfg.tied_head:
            model.lm_head.weight.copy_(model.transformer.wte.weight[torch.randperm(vocab_size, generator=gen)])
    g = gguf_of_model(model, spec["arch"], llama3_scaling=spec.get("scaling"))
    if spec["vocab"] == "sentencepiece":
        add_sentencepiece_vocab(g, sp_model("llama2c_512"))
    else:
        first = vocab_size - len(SPECIALS) - len(USER_DEFINED)
        special = {s: first + i for i, s in enumerate(SPECIALS)}
        add_bpe_vocab(g, gpt2_files()["vocab.json"], gpt2_files()["merges.txt"], spec["vocab"], SPECIALS, USER_DEFINED)
        g.add("tokenizer.ggml.bos_token_id", UINT32, special["<|begin_of_text|>"])
        g.add("tokenizer.ggml.eos_token_id", UINT32, special["<|im_end|>" if name == "qwen2" else "<|endoftext|>"])
        if name == "llama3":
            g.add("tokenizer.ggml.eot_token_id", UINT32, special["<|eot_id|>"])
        if name == "qwen2":
            g.add("tokenizer.chat_template", STRING, CHAT_TEMPLATE)
    g.write(path)


def made(name: str, wtype: str) -> tuple[Path, Path]:
    """(the GGUF, its export by export.py) for a model and type, made once per session: F32 by
    gguf_writer.py, the others by llama.cpp's quantizer from it (Q4_0 with a Q8_0 output head:
    its default there, Q6_K, is a type not read)."""
    key = f"{name}_{wtype}"
    if key not in _made:
        TMP.mkdir(exist_ok=True)
        gguf = TMP / f"gguf_{key}.gguf"
        if wtype == "f32":
            write_f32_gguf(name, gguf)
        else:
            llama_ref("quantize", made(name, "f32")[0], gguf, wtype, *(["q8_0"] if wtype == "q4_0" else []))
        out = TMP / f"gguf_{key}.bin"
        r = export_cli(gguf, out)
        assert r.returncode == 0, r.stderr
        _made[key] = (gguf, out)
    return _made[key]


def test_the_files_are_what_they_claim() -> None:
    """Each quantized file holds the types it is meant to (llama.cpp's quantizer decides), and the
    export keeps them: each matrix in its own type (F16 as f16, Q8_0 as q8_0, ...)."""
    ours = {"F32": "f32", "F16": "f16", "BF16": "bf16", "Q8_0": "q8_0", "Q4_0": "q4_0"}
    for wtype in TYPES:
        gguf, out = made("llama2", wtype)
        types = {info.name: info.type_name for info in read_gguf(gguf).tensors.values()}
        matrices = {n: t for n, t in types.items() if n.endswith(".weight") and "norm" not in n}
        expected = {"f32": {"F32"}, "f16": {"F16"}, "bf16": {"BF16"}, "q8_0": {"Q8_0"}, "q4_0": {"Q4_0", "Q8_0"}}
        assert set(matrices.values()) == expected[wtype], matrices
        table = dict(read_header_and_table(out))
        names = {v: k for k, v in WEIGHT_TYPES.items()}
        assert names[table["wte"]] == ours[types["token_embd.weight"]]
        assert names[table["lm_head.weight"]] == ours[types["output.weight"]]
        assert names[table["h.1.mlp.c_proj.weight"]] == ours[types["blk.1.ffn_down.weight"]]


# ---- tokenization ------------------------------------------------------------------------------

def valid_utf8(text: bytes) -> bool:
    try:
        text.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@lru_cache(maxsize=None)
def corpus_texts() -> tuple[bytes, ...]:
    return tuple(corpus("lines") + corpus("texts"))


def llama_tokenize(gguf: Path, texts: list[bytes], special: bool = False) -> list[list[int]]:
    out = llama_ref("tokenize", gguf, *(["--special"] if special else []), stdin=records(texts)).decode()
    lines = out.split("\n")[:-1]
    assert len(lines) == len(texts)
    return [[int(x) for x in line.split()] for line in lines]


@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("name", MODELS)
def test_tokenization_equals_llama_cpp(name: str, wtype: str) -> None:
    gguf, out = made(name, wtype)
    texts = list(corpus_texts())
    sentencepiece = MODELS[name]["vocab"] == "sentencepiece"
    if not sentencepiece:  # llama.cpp's byte-level BPE throws on invalid UTF-8 ("invalid codepoint")
        texts = [t for t in texts if valid_utf8(t)]
    ours, theirs = c_encode(out, texts), llama_tokenize(gguf, texts)
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    print(f"{name} {wtype}: {len(texts) - len(differ)}/{len(texts)} texts tokenized as llama.cpp does")
    assert len(texts) > 3000
    if sentencepiece:
        # the invalid UTF-8 texts part, as they must: there run encodes what SentencePiece encodes
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=str(sp_model("llama2c_512")))
        assert {i for i in differ} == {i for i, t in enumerate(texts) if not valid_utf8(t)}
        assert all(ours[i] == [sp.bos_id()] + sp.encode(texts[i]) for i in differ)
    else:
        assert not differ, f"{len(differ)} differ, first {[texts[i][:60] for i in differ[:3]]}"


PROBE_LEFT = b"a1! "  # a letter, a number, a punctuation mark, a space


def probe_gguf(arch: str, pre: str) -> tuple[Path, Path]:
    """A tiny model whose byte-level vocabulary shows where llama.cpp's split ends a piece: the 256
    bytes and each byte after 'a', '1', '!' or ' ' (a merge joins bytes of one piece only), with
    pre-tokenizer `pre`; and its export."""
    from tokenizer_files import gpt2_byte_decoder
    alphabet = {b: ch for ch, b in gpt2_byte_decoder().items()}
    spell = lambda bs: "".join(alphabet[b] for b in bs)  # noqa: E731
    vocab = {spell(bytes([b])): b for b in range(256)}
    merges = []
    for left in PROBE_LEFT:
        for b in range(256):
            vocab[spell(bytes([left, b]))] = len(vocab)
            merges.append(f"{spell(bytes([left]))} {spell(bytes([b]))}")
    shape = dict(n_layer=1, n_head=1, n_embd=32, n_hidden=32, n_ctx=16, vocab_size=len(vocab), vocab_padded=len(vocab))
    cfg = GPTConfig(**shape) if arch == "gpt2" else GPTConfig(**shape, **LLAMA, n_kv_head=1)
    g = gguf_of_model(random_model(cfg, seed=1), arch)
    add_bpe_vocab(g, json.dumps(vocab).encode(), "\n".join(merges).encode(), pre, [])
    g.add("tokenizer.ggml.add_bos_token", BOOL, False)  # what the probe shows is the split alone
    gguf, out = TMP / f"gguf_probe_{pre}.gguf", TMP / f"gguf_probe_{pre}.bin"
    g.write(gguf)
    r = export_cli(gguf, out)
    assert r.returncode == 0, r.stderr
    return gguf, out


@lru_cache(maxsize=None)
def assigned_in_15_0() -> frozenset[int]:
    """Every code point Unicode 15.0 assigns (Debian's unicode-data: DerivedAge.txt)."""
    assigned = set()
    for line in open("/usr/share/unicode/DerivedAge.txt", encoding="utf-8"):
        line = line.split("#")[0].strip()
        if line:
            first, _, last = line.split(";")[0].strip().partition("..")
            assigned.update(range(int(first, 16), int(last or first, 16) + 1))
    return frozenset(assigned)


@pytest.mark.parametrize("arch,pre", [("gpt2", "gpt-2"), ("llama", "llama-bpe"), ("qwen2", "qwen2"),
                                      ("llama", "smollm"), ("phi3", "gpt-4o")])
def test_every_character_is_split_as_llama_cpp_splits_it(arch: str, pre: str) -> None:
    """Every code point of planes 0-3 and 14 after a letter, a number, a punctuation mark and a
    space, through the probe vocabulary. They part only on characters Unicode assigned after 15.0:
    llama.cpp's character classes come from an older Unicode than run's (16.0, and 17.0 for
    SmolLM's numbers, as tiktoken and Hugging Face's library), so it leaves them unclassed."""
    gguf, out = probe_gguf(arch, pre)
    assert llama_tokenize(gguf, [b"a1", b"ab"]) == c_encode(out, [b"a1", b"ab"]) == [[97, 49], [256 + 98]], \
        "the probe does not show where a piece ends"
    def probes(code_points: list[int]) -> bytes:
        return "".join(f"a{chr(c)}1{chr(c)}!{chr(c)} {chr(c)}" for c in code_points).encode()

    code_points = [c for c in [*range(0x40000), *range(0xE0000, 0xE1000)] if not 0xD800 <= c <= 0xDFFF]
    blocks = [code_points[i:i + 2048] for i in range(0, len(code_points), 2048)]
    texts = [probes(block) for block in blocks]
    differ_blocks = [b for b, ours, theirs in zip(blocks, c_encode(out, texts), llama_tokenize(gguf, texts))
                     if ours != theirs]
    alone = [c for block in differ_blocks for c in block]
    texts = [probes([c]) for c in alone]
    differ = [c for c, ours, theirs in zip(alone, c_encode(out, texts), llama_tokenize(gguf, texts)) if ours != theirs]
    older = [f"U+{c:04X}" for c in differ if c in assigned_in_15_0()]
    print(f"{pre}: {len(code_points) - len(differ):,} / {len(code_points):,} code points split as llama.cpp splits "
          f"them; the {len(differ):,} others are characters Unicode assigned after 15.0")
    assert not older, f"{len(older)} characters of Unicode 15.0 split otherwise: {' '.join(older[:40])}"


def test_gpt_4o_split_of_the_corpus_equals_llama_cpps() -> None:
    """Phi-4-mini's GGUF split ("gpt-4o": llama.cpp's approximation of o200k_base, the case of
    A-Z and a-z alone) on the suite's texts and o200k_base's case rules, through the probe
    vocabulary, where every split shows in the ids."""
    from test_tokenizer import O200K_CASES
    gguf, out = probe_gguf("phi3", "gpt-4o")
    texts = [t for t in corpus_texts() if valid_utf8(t)] + [t.encode() for t in O200K_CASES]
    ours, theirs = c_encode(out, texts), llama_tokenize(gguf, texts)
    differ = [texts[i][:60] for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert len(texts) > 3000 and not differ, f"{len(differ)} of {len(texts)} differ, first {differ[:3]}"


@pytest.mark.parametrize("name", MODELS)
def test_tokenization_of_special_tokens_equals_llama_cpp(name: str) -> None:
    """run --special against llama.cpp's parse_special: a control or user-defined token's text is
    that token. The differences, on purpose: llama.cpp's parse_special makes SentencePiece's <unk>
    text the unknown token too, where --special (which names tokens a text may ask for) does not;
    and llama.cpp matches a user-defined token's text in any text, where run does only with
    --special, as it does a tokenizer.json's added tokens (a text cannot inject tokens)."""
    gguf, out = made(name, "f32")
    texts = [t for t in corpus_texts() if valid_utf8(t) and b"<unk>" not in t]
    texts += [s.encode() for s in SPECIALS + USER_DEFINED] + [b"a<|endoftext|>b", b"x<tool_call>y<|file_sep|>",
                                                                b"<|im_start|>user\nhi<|im_end|>\n<s>x</s>"]
    ours, theirs = c_encode(out, texts, "--special"), llama_tokenize(gguf, texts, special=True)
    differ = [texts[i][:60] for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert not differ, f"{len(differ)} of {len(texts)} differ, first {differ[:3]}"
    if MODELS[name]["vocab"] != "sentencepiece":
        plain = [b"x<tool_call>y"]
        assert c_encode(out, plain) != llama_tokenize(gguf, plain) == c_encode(out, plain, "--special")


@pytest.mark.parametrize("name", MODELS)
def test_bos_and_stop_set_are_llama_cpps(name: str) -> None:
    """BOS before every text exactly when llama.cpp puts it there; the stop set exactly the tokens
    llama.cpp ends a generation at (end of sequence, of turn, and its end tokens by text)."""
    gguf, out = made(name, "f32")
    lines = llama_ref("vocab", gguf).decode().split("\n")
    _, bos, add_bos = lines[0].split()
    eog = sorted(int(x) for x in lines[1].split()[1:])
    _, tok, _ = read_tensors(out)
    assert tok.bos_id == (int(bos) if add_bos == "1" else -1)
    assert sorted(tok.stop_ids) == eog, (tok.stop_ids, eog)


def test_chat_template_becomes_the_chat_table() -> None:
    """tokenizer.chat_template: a conversation is fed as llama.cpp tokenizes (specials parsed)
    what transformers' rendering of the template gives."""
    gguf, out = made("qwen2", "f32")
    r = subprocess.run([str(RUN), str(out), "--info"], capture_output=True, timeout=60)
    assert r.returncode == 0 and "chat.template: " + CHAT_TEMPLATE.split("\n")[0] in r.stdout.decode()
    rng = random.Random(7)
    conversations = [[{"role": rng.choice(["system", "user", "assistant", "user"]),
                       "content": "".join(rng.sample(CONTENTS, rng.randint(1, 3)))} for _ in range(rng.randint(1, 5))]
                     for _ in range(40)]
    texts = [reference_render(CHAT_TEMPLATE, m, True, {"eos_token": "<|im_end|>"}).encode() for m in conversations]
    theirs = llama_tokenize(gguf, texts, special=True)
    for messages, ids in zip(conversations, theirs):
        assert run_ids(out, messages) == ids, messages


# ---- weights ------------------------------------------------------------------------------------

def ggml_dequantized(gguf: Path, d: Path) -> dict[str, np.ndarray]:
    """Every tensor of gguf through ggml's own to_float (llama_ref dequantize into folder d), as
    float32 [rows, ne0], rows the product of its other dimensions."""
    out = {}
    for line in llama_ref("dequantize", gguf, d).decode().split("\n")[:-1]:
        tensor, _, *ne = line.split()
        out[tensor] = np.fromfile(d / f"{tensor}.f32", "<f4").reshape(-1, int(ne[0]))
    return out


@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("name", ["llama2", "qwen2", "gpt2"])
def test_every_weight_is_llama_cpps_dequantization(name: str, wtype: str) -> None:
    """Every tensor of the export, read back (quant times scale, as run computes it), equals
    ggml's to_float of the GGUF's tensor bit for bit, after the conventions undone (qwen2's rows
    into adjacent pairs, q/k/v fused); the quantized ones keep their quants and scales."""
    gguf, out = made(name, wtype)
    with tempfile.TemporaryDirectory() as d:
        theirs = {t: a.squeeze(0) if a.shape[0] == 1 else a for t, a in ggml_dequantized(gguf, Path(d)).items()}
    cfg, _, tensors = read_tensors(out)
    hs = cfg.head_size

    def pairs(w: np.ndarray, heads: int) -> np.ndarray:  # halves -> adjacent pairs, as model.h rotates
        return w.reshape(heads, 2, hs // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    def ours(name_: str, layer: int | None = None) -> np.ndarray:
        t = tensors[name_]
        return (t.layer(layer) if layer is not None else t).dequantized()

    same = lambda a, b: a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))  # noqa: E731
    assert same(ours("wte"), theirs["token_embd.weight"])
    assert same(ours("lm_head.weight") if "lm_head.weight" in tensors else ours("wte"),
                theirs.get("output.weight", theirs["token_embd.weight"]))
    for i in range(cfg.n_layer):
        b = f"blk.{i}."
        if name == "gpt2":
            qkv = theirs[b + "attn_qkv.weight"]
        else:
            q, k = theirs[b + "attn_q.weight"], theirs[b + "attn_k.weight"]
            if name == "qwen2":
                q, k = pairs(q, cfg.n_head), pairs(k, cfg.n_kv_head)
            qkv = np.concatenate([q, k, theirs[b + "attn_v.weight"]])
            assert same(ours("mlp.gate.weight", i), theirs[b + "ffn_gate.weight"])
        assert same(ours("attn.c_attn.weight", i), qkv)
        assert same(ours("attn.c_proj.weight", i), theirs[b + "attn_output.weight"])
        assert same(ours("mlp.c_fc.weight", i), theirs[b + "ffn_up.weight"])
        assert same(ours("mlp.c_proj.weight", i), theirs[b + "ffn_down.weight"])
        assert same(ours("ln_1.weight", i), theirs[b + "attn_norm.weight"])


# ---- logits and greedy tokens -------------------------------------------------------------------

def f16_round(x: torch.Tensor) -> torch.Tensor:
    return x.half().float()


def bf16_round(x: torch.Tensor) -> torch.Tensor:
    return x.bfloat16().float()  # round to nearest even, as ggml's fp32 -> bf16


def q8_0_round(x: torch.Tensor) -> torch.Tensor:
    """llama.cpp's Q8_0 activations (ggml-cpu's quantize_row_q8_0): per 32 values quant =
    round-half-even(x * 127 / max|x|), scale = max|x| / 127 stored in binary16."""
    g = x.reshape(-1, 32)
    amax = g.abs().amax(dim=1, keepdim=True)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    return (torch.round(g * inv) * f16_round(amax / 127.0)).reshape(x.shape)


def q8_k_round(x: torch.Tensor) -> torch.Tensor:
    """llama.cpp's activations for the k formats (ggml's quantize_row_q8_K_ref, their vec_dot
    type Q8_K): per 256 values the one of largest magnitude m, quant = min(127,
    round-half-even(x * -127 / m)), value = quant / (-127 / m), the scale float32."""
    g = x.reshape(-1, 256)
    at = g.abs().argmax(dim=1, keepdim=True)
    m = torch.gather(g, 1, at)
    iscale = torch.where(m != 0, -127.0 / m, torch.zeros_like(m))
    q = torch.clamp(torch.round(g * iscale), max=127)
    return torch.where(m != 0, q / iscale, torch.zeros_like(g)).reshape(x.shape)


# per GGUF type, what llama.cpp rounds a product's input to (its vec_dot type): Q5_0's and
# IQ4_NL's is Q8_0, Q5_1's and Q4_1's Q8_1 (Q8_0's quants and scale, with their sum), the k
# formats' (Q2_K and Q3_K too) and IQ4_XS's Q8_K
LLAMA_CPP_ROUNDS = {"F32": None, "F16": f16_round, "BF16": bf16_round, "Q8_0": q8_0_round, "Q4_0": q8_0_round,
                    "Q5_0": q8_0_round, "Q5_1": q8_0_round, "Q4_K": q8_k_round, "Q5_K": q8_k_round, "Q6_K": q8_k_round,
                    "Q4_1": q8_0_round, "IQ4_NL": q8_0_round, "IQ4_XS": q8_k_round, "Q2_K": q8_k_round,
                    "Q3_K": q8_k_round}
# run's: every quantized type int8 per 32 with a float32 scale; f16 and bf16 none (their values are float32's)
RUN_ROUNDS = {"f32": None, "f16": None, "bf16": None, **{t: quantize_q8_0 for t in
                                                        ("q8_0", "q4_0", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k",
                                                         "q4_1", "iq4_nl", "iq4_xs", "q2_k", "q3_k")}}


def matrix_types(gguf: Path, out: Path, cfg: GPTConfig) -> tuple[dict[str, str], dict[str, str]]:
    """Each nn.Linear of the reference (by module name): the GGUF type llama.cpp multiplies, and
    the weight type run multiplies."""
    g = read_gguf(gguf).tensors
    names = {v: k for k, v in WEIGHT_TYPES.items()}
    ours = dict(read_header_and_table(out))
    llama, run_types = {}, {}
    for i in range(cfg.n_layer):
        m, b = f"transformer.h.{i}.", f"blk.{i}."
        pairs = {"attn.c_attn": "attn_qkv" if b + "attn_qkv.weight" in g else "attn_q", "attn.c_proj": "attn_output",
                 "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
        if cfg.ffn != "gelu":  # Phi-3's gate is the first half of ffn_up
            pairs["mlp.gate"] = "ffn_gate" if b + "ffn_gate.weight" in g else "ffn_up"
        for module, theirs in pairs.items():
            llama[m + module] = g[b + theirs + ".weight"].type_name
            # a file with the query, key and value apart: their inputs are rounded alike (each of
            # run's quantized types the same way, and llama.cpp's too here), so the query's stands
            ours_name = f"h.{i}.{module}.weight" if f"h.{i}.{module}.weight" in ours else f"h.{i}.attn.q.weight"
            run_types[m + module] = names[ours[ours_name]]
    llama["lm_head"] = g.get("output.weight", g["token_embd.weight"]).type_name
    run_types["lm_head"] = names[ours.get("lm_head.weight", ours["wte"])]
    return llama, run_types


@torch.no_grad()
def reference_logits(model, ids: list[int], rounding: dict[str, object], gelu_f16: bool) -> np.ndarray:
    """The reference's logits with each matrix product's input rounded as `rounding` says (module
    name -> function or None), and with gelu_f16 GELU as ggml computes it: its argument rounded
    to binary16 and looked up in a table of binary16 results (|x| >= 10 passes as it is or 0)."""
    patched = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and rounding.get(name) is not None:
            module.forward = lambda x, m=module, r=rounding[name]: F.linear(r(x), m.weight, m.bias)
            patched.append(module)
        if gelu_f16 and name.endswith(".mlp"):
            def mlp(x, m=module):
                h = m.gate(x) if m.ffn == "geglu" else m.c_fc(x)  # GEGLU: the gate's GELU (ggml_vec_geglu_f32)
                table = f16_round(F.gelu(f16_round(h), approximate="tanh"))
                act = torch.where(h <= -10, torch.zeros_like(h), torch.where(h >= 10, h, table))
                return m.c_proj(act * m.c_fc(x) if m.ffn == "geglu" else act)
            module.forward = mlp
            patched.append(module)
    try:
        return model(torch.tensor([ids]))[0].numpy()
    finally:
        for module in patched:
            del module.forward


@lru_cache(maxsize=None)
def reference(gguf: Path):
    """export/model.py on the GGUF's weights (quantized ones dequantized, exactly), with float32
    keys and values as llama.cpp's context here keeps them."""
    model, _ = load_gguf(gguf)
    return model.set_cache("f32")


def tolerance(gguf: Path, out: Path, ids: list[int]) -> tuple[float, float, float]:
    """(tolerance, A_run, A_llama.cpp) for the logits of ids: the module docstring's derivation."""
    model = reference(gguf)
    llama, run_types = matrix_types(gguf, out, model.config)
    gpt2 = model.config.ffn in ("gelu", "geglu")  # ggml's GELU through its binary16 table
    exact = reference_logits(model, ids, {}, False)
    a_run = float(np.abs(reference_logits(model, ids, {k: RUN_ROUNDS[t] for k, t in run_types.items()}, False)
                         - exact).max())
    a_llama = float(np.abs(reference_logits(model, ids, {k: LLAMA_CPP_ROUNDS[t] for k, t in llama.items()}, gpt2)
                           - exact).max())
    return 1e-4 * (1 + float(np.abs(exact).max())) + 1.5 * (a_run + a_llama), a_run, a_llama


def llama_logits(gguf: Path, ids: list[int]) -> np.ndarray:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "ids").write_text(" ".join(map(str, ids)))
        llama_ref("logits", gguf, Path(d) / "ids", Path(d) / "logits")
        return np.fromfile(Path(d) / "logits", "<f4").reshape(len(ids), -1)


PROMPT = TEXT[:240].encode()


# every model in every type, and the heads of their own size in two
MODEL_TYPES = [(name, wtype) for name in MODELS for wtype in TYPES] + [("wide_heads", "f32"), ("wide_heads", "q8_0")]


def logits_within_tolerance(gguf: Path, out: Path, label: str) -> list[int]:
    """PROMPT's ids alike in both programs, and run's logits at every position (prefilled one
    token at a time and in one block) within tolerance() of llama.cpp's; the ids."""
    ids = c_tokens(RUN, out, PROMPT)
    assert llama_tokenize(gguf, [PROMPT]) == [ids]
    theirs = llama_logits(gguf, ids)
    tol, a_run, a_llama = tolerance(gguf, out, ids)
    for block in (1, 128):
        ours = c_logits(RUN, out, PROMPT, theirs.shape[1], block, ("--cache", "f32"))
        diff = float(np.abs(ours - theirs).max())
        print(f"{label} block {block}: {len(ids)} positions, max |run - llama.cpp| {diff:.3g}, tolerance "
              f"{tol:.3g} (run's rounding {a_run:.3g}, llama.cpp's {a_llama:.3g}), max |logit| "
              f"{np.abs(theirs).max():.3g}")
        assert diff <= tol
    return ids


@pytest.mark.parametrize("name,wtype", MODEL_TYPES)
def test_logits_every_position(name: str, wtype: str) -> None:
    gguf, out = made(name, wtype)
    logits_within_tolerance(gguf, out, f"{name} {wtype}")


@pytest.mark.parametrize("name", ["llama2", "gpt2"])
def test_compare_py_checks_a_gguf_export(name: str) -> None:
    """export/compare.py GGUF MODEL.bin, the user's check, on a prompt within the context and on
    one cut to it (as text: SentencePiece's dummy-prefix space is not doubled)."""
    gguf, out = made(name, "f32")
    for prompt in ("And it came to pass", "And God said, Let there be light. " * 40):
        r = subprocess.run(["/usr/bin/python3", str(REPO / "export" / "compare.py"), str(gguf), str(out), "--prompt",
                            prompt, "--steps", "16", "--seeds", "1"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert "greedy: identical" in r.stdout


@pytest.mark.parametrize("name,wtype", MODEL_TYPES)
def test_greedy_tokens_equal_llama_cpps(name: str, wtype: str) -> None:
    gguf, out = made(name, wtype)
    ids = c_tokens(RUN, out, PROMPT[:60])
    steps = 24
    lines = llama_ref("generate", gguf, write_ids(ids), steps).decode().split("\n")[:-1]
    theirs = [int(line.split()[0]) for line in lines]
    margins = [float(line.split()[1]) for line in lines]
    tol, _, _ = tolerance(gguf, out, ids + theirs[:-1])
    print(f"{name} {wtype}: smallest margin of llama.cpp's choices {min(margins):.3g}, tolerance {tol:.3g}")
    assert min(margins) > 2 * tol, "the model's top choice is not clear enough to compare greedy tokens"
    _, tok, _ = read_tensors(out)
    ours = c_generate(RUN, out, PROMPT[:60], steps, 0.0, 0, 1.0, 1, extra=("--ignore-eos", "--cache", "f32"))
    assert ours == tok.decode(theirs), (ours, tok.decode(theirs))


def write_ids(ids: list[int]) -> Path:
    path = TMP / "gguf_prompt_ids.txt"
    path.write_text(" ".join(map(str, ids)))
    return path


def test_q8_0_quants_of_minus_128() -> None:
    """llama.cpp's quantizer never writes a Q8_0 quant of -128 (its largest magnitude maps to
    127), but the format holds one and another tool may write it. A tenth of the blocks of every
    Q8_0 matrix get one: every product run computes from them equals its reference built from its
    own input (tests/trace.c), one token at a time and in blocks, and the logits agree with
    llama.cpp's as above."""
    gguf, _ = made("llama2", "q8_0")
    raw, g = bytearray(gguf.read_bytes()), read_gguf(gguf)
    rng = np.random.default_rng(128)
    for info in (t for t in g.tensors.values() if t.type_name == "Q8_0"):
        blocks = np.frombuffer(raw, np.uint8, info.size, info.offset).reshape(-1, 34).copy()
        quants = blocks[:, 2:].view(np.int8)
        for b in rng.choice(len(blocks), len(blocks) // 10, replace=False):
            quants[b, np.abs(quants[b].astype(np.int32)).argmax()] = -128
        raw[info.offset:info.offset + info.size] = blocks.tobytes()
    path, out = TMP / "gguf_minus_128.gguf", TMP / "gguf_minus_128.bin"
    path.write_bytes(bytes(raw))
    r = export_cli(path, out)
    assert r.returncode == 0, r.stderr
    assert (read_tensors(out)[2]["attn.c_attn.weight"].values == -128).any()
    prompt = TMP / "gguf_minus_128_prompt.txt"
    prompt.write_bytes(PROMPT)
    trace_binary = REPO / "tests" / "build" / "trace-native"
    assert trace_binary.exists(), f"{trace_binary} is missing: `make test` builds it"
    for block in (1, 128):
        trace = TMP / "gguf_minus_128.trace"
        r = subprocess.run([str(trace_binary), str(out), str(prompt), str(block), str(trace)], capture_output=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr.decode()
        assert check_trace(trace, out) <= 1
    ids = c_tokens(RUN, out, PROMPT)
    theirs = llama_logits(path, ids)
    ours = c_logits(RUN, out, PROMPT, theirs.shape[1], 128, ("--cache", "f32"))
    assert float(np.abs(ours - theirs).max()) <= tolerance(path, out, ids)[0]


# ---- the architectures that change Llama's block --------------------------------------------

def arch_files(arch: str) -> tuple[Path, Path, Path]:
    """(the Hugging Face folder of llama_sources.ARCH_MODELS' model of arch, the GGUF llama.cpp's
    converter makes of it, that GGUF's export), made once. Phi-3's without a window: llama.cpp's
    phi3 runs none (transformers does; test_llama.py checks it there)."""
    folder = TMP / f"gguf_arch_{arch}"
    gguf, out = TMP / f"gguf_arch_{arch}.gguf", TMP / f"gguf_arch_{arch}.bin"
    if not out.exists() or not (folder / "config.json").exists():
        kw = {**ARCH_MODELS[arch], "vocab_size": 1756, "vocab_padded": 1756}
        if arch == "phi3":
            kw.pop("layers")
        shutil.rmtree(folder, ignore_errors=True)
        seed = sum(map(ord, arch))
        model = random_model(GPTConfig(**kw), seed=seed, std=0.05)
        with torch.no_grad():  # as write_f32_gguf's: next tokens that stand clear of the rest
            gen = torch.Generator().manual_seed(seed)
            model.transformer.wte.weight.copy_(torch.randn(model.transformer.wte.weight.shape, generator=gen))
            if not model.config.tied_head:
                model.lm_head.weight.copy_(model.transformer.wte.weight[torch.randperm(1756, generator=gen)])
        write_hf_folder(folder, model, arch, "F32", 1, gpt2_files())
        gguf_of_hf_folder(folder).write(gguf)
        r = export_cli(gguf, out)
        assert r.returncode == 0, r.stderr
    return folder, gguf, out


@pytest.mark.parametrize("arch", ARCH_MODELS)
def test_the_architectures_gguf_export_is_the_folders(arch: str) -> None:
    """The GGUF the converter makes of a folder (Gemma's norms as 1 + w, Phi-3's projections
    fused, q/k rows in halves or in pairs as the architecture keeps them) exports to the header and
    tensors the folder does, byte for byte but for the rotary frequencies LongRoPE's float32
    factors give (within 1e-6 of the folder's)."""
    folder, gguf, out = arch_files(arch)
    from_folder = TMP / f"gguf_arch_{arch}_folder.bin"
    r = export_cli(folder, from_folder)
    assert r.returncode == 0, r.stderr
    a, b = from_folder.read_bytes(), out.read_bytes()
    ha, hb = unpack_header(a), unpack_header(b)
    layout = ("tokenizer_size", "tensors_offset", "file_size", "meta_crc32", "metadata_offset", "metadata_size",
              "layers_offset", "rope_scale")
    assert {k: v for k, v in ha.items() if k not in layout} == {k: v for k, v in hb.items() if k not in layout}
    assert abs(ha["rope_scale"] - hb["rope_scale"]) <= 1e-6 * ha["rope_scale"]
    assert read_header_and_table(from_folder) == read_header_and_table(out)
    for (name, _, oa, sa), (_, _, ob, sb) in zip(table_entries(a, ha), table_entries(b, hb)):
        if name.startswith("rope_freqs"):
            fa, fb = np.frombuffer(a, "<f4", sa // 4, oa), np.frombuffer(b, "<f4", sb // 4, ob)
            assert np.allclose(fa, fb, rtol=1e-6, atol=0), name
        else:
            assert a[oa:oa + sa] == b[ob:ob + sb], f"{arch}: tensor {name} differs"


@pytest.mark.parametrize("arch", ARCH_MODELS)
def test_the_architectures_logits_and_greedy_tokens_are_llama_cpps(arch: str) -> None:
    """Logits at every position of a prompt and 24 greedy tokens, run against llama.cpp on the same
    F32 GGUF (the tolerance of test_logits_every_position: float32 rounding, and ggml's GELU
    through its binary16 table for Gemma's GEGLU)."""
    _, gguf, out = arch_files(arch)
    ids = logits_within_tolerance(gguf, out, arch)
    steps = 24
    ids = ids[:20]
    lines = llama_ref("generate", gguf, write_ids(ids), steps).decode().split("\n")[:-1]
    generated = [int(line.split()[0]) for line in lines]
    margins = [float(line.split()[1]) for line in lines]
    tol, _, _ = tolerance(gguf, out, ids + generated[:-1])
    assert min(margins) > 2 * tol, "the model's top choice is not clear enough to compare greedy tokens"
    _, tok, _ = read_tensors(out)
    prompt = tok.decode(ids)
    ours = c_generate(RUN, out, prompt, steps, 0.0, 0, 1.0, 1, extra=("--ignore-eos", "--cache", "f32"))
    assert ours == tok.decode(generated), (ours, tok.decode(generated))


@pytest.mark.parametrize("arch", ARCH_MODELS)
def test_the_architectures_q4_k_m_logits_are_as_close_to_float64_as_llama_cpps(arch: str) -> None:
    """A Q4_K_M file of each (llama.cpp's quantizer on the F32 GGUF, 256 wide so that its k types
    are used): run and llama.cpp round the activations differently (q8_0 per 32 values, q8_K
    per 256), so neither equals the other; judged against a float64 forward pass of the file's
    dequantized weights, run's logits are at least as close as llama.cpp's (root mean square
    over every position)."""
    folder = TMP / f"gguf_arch_{arch}_256"
    gguf, q4 = TMP / f"gguf_arch_{arch}_256.gguf", TMP / f"gguf_arch_{arch}_256_q4_k_m.gguf"
    out = TMP / f"gguf_arch_{arch}_256_q4_k_m.bin"
    kw = {**ARCH_MODELS[arch], "vocab_size": 1756, "vocab_padded": 1756, "n_embd": 256, "n_hidden": 512}
    kw.pop("layers") if arch == "phi3" else None
    if "head_dim" not in kw:
        kw["head_dim"] = 64
    shutil.rmtree(folder, ignore_errors=True)
    write_hf_folder(folder, random_model(GPTConfig(**kw), seed=sum(map(ord, arch)), std=0.05), arch, "F32", 1,
                    gpt2_files())
    gguf_of_hf_folder(folder).write(gguf)
    llama_ref("quantize", gguf, q4, "q4_k_m")
    r = export_cli(q4, out)
    assert r.returncode == 0, r.stderr
    ids = c_tokens(RUN, out, PROMPT)
    model = reference(q4).double()
    with torch.no_grad():
        exact = model(torch.tensor([ids]))[0].numpy()
    theirs = llama_logits(q4, ids).astype(np.float64)
    ours = c_logits(RUN, out, PROMPT, theirs.shape[1], 128, ("--cache", "f32")).astype(np.float64)
    rms = lambda a: float(np.sqrt(np.mean((a - exact) ** 2)))  # noqa: E731
    print(f"{arch} Q4_K_M ({len(read_header_and_table(out))} tensors): rms from float64: run {rms(ours):.3g}, "
          f"llama.cpp {rms(theirs):.3g}")
    assert rms(ours) <= rms(theirs)


def edited_gguf(arch: str, drop: tuple = (), keys: dict | None = None, tensors: dict | None = None) -> Path:
    """The converter's GGUF of arch's folder (arch_files) with tensors dropped, keys set and
    tensors replaced (name -> array)."""
    folder, _, _ = arch_files(arch)
    g = gguf_of_hf_folder(folder)
    g.kv = [kv for kv in g.kv if kv[0] not in (keys or {})] + [(k, *v) for k, v in (keys or {}).items()]
    g.tensors = [t for t in g.tensors if t[0] not in drop and t[0] not in (tensors or {})]
    for name, values in (tensors or {}).items():
        g.tensor(name, values)
    return g.write(TMP / f"gguf_arch_{arch}_edited.gguf")


BAD_ARCH_FILES = {
    "a head size that does not divide": ("qwen3", dict(keys={"qwen3.attention.key_length": (UINT32, 33),
                                                             "qwen3.attention.value_length": (UINT32, 33)}),
                                         "do not divide"),
    "a missing query norm": ("qwen3", dict(drop=("blk.1.attn_q_norm.weight",)), "tensor 'blk.1.attn_q_norm.weight' is missing"),
    "a missing norm after attention": ("olmo2", dict(drop=("blk.0.post_attention_norm.weight",)),
                                       "tensor 'blk.0.post_attention_norm.weight' is missing"),
    "a LongRoPE table of the wrong length": ("phi3", dict(tensors={"rope_factors_long.weight": np.ones(5, np.float32)}),
                                             "tensor 'rope_factors_long.weight' has shape [5]"),
    "a Gemma 2 file with an output": ("gemma2", dict(tensors={"output.weight": np.zeros((1756, 96), np.float32)}),
                                      "Gemma 2's output is its embedding"),
}


@pytest.mark.parametrize("case", BAD_ARCH_FILES)
def test_bad_files_of_the_architectures_are_one_line_errors(case: str) -> None:
    arch, edits, message = BAD_ARCH_FILES[case]
    r = export_cli(edited_gguf(arch, **edits), TMP / "gguf_arch_edited.bin")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and message in lines[0], r.stderr


# ---- a GGUF of a Hugging Face folder -----------------------------------------------------------

@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_gguf_of_a_hugging_face_folder_exports_to_the_folders_numbers(arch: str) -> None:
    """A Hugging Face folder (tests/llama_sources.py) and the GGUF llama.cpp's converter would make
    of it (F32; llama's q/k rows permuted into pairs, qwen2's kept) export to the same header and
    the same tensors, byte for byte, in f32 and q8_0 (our quantizer on the same float32 numbers)."""
    base = dict(n_layer=2, n_head=4, n_embd=128, n_hidden=256, n_ctx=96, vocab_size=1756, vocab_padded=1756)
    cfg = GPTConfig(**base, **{**LLAMA, "bias": BIAS_QKV if arch == "qwen2" else 0}, n_kv_head=2,
                    tied_head=arch == "qwen2", rope_theta=1e6 if arch == "qwen2" else 10000.0)
    folder = TMP / f"gguf_hf_{arch}"
    shutil.rmtree(folder, ignore_errors=True)
    write_hf_folder(folder, random_model(cfg, seed=7), arch, "BF16" if arch == "llama" else "F32", 1, gpt2_files())
    gguf = gguf_of_hf_folder(folder).write(TMP / f"gguf_hf_{arch}.gguf")
    for dtype in ("f32", "q8_0"):
        from_folder, from_gguf = TMP / f"gguf_hf_{arch}_folder.bin", TMP / f"gguf_hf_{arch}_gguf.bin"
        for source, target in ((folder, from_folder), (gguf, from_gguf)):
            r = export_cli(source, target, "--dtype", dtype)
            assert r.returncode == 0, r.stderr
        a, b = from_folder.read_bytes(), from_gguf.read_bytes()
        ha, hb = unpack_header(a), unpack_header(b)
        layout = ("tokenizer_size", "tensors_offset", "file_size", "meta_crc32", "metadata_offset", "metadata_size",
                  "layers_offset")
        assert {k: v for k, v in ha.items() if k not in layout} == {k: v for k, v in hb.items() if k not in layout}
        ta, tb = read_header_and_table(from_folder), read_header_and_table(from_gguf)
        assert ta == tb
        entries = lambda raw, h: [raw[o:o + s] for _, _, o, s in table_entries(raw, h)]  # noqa: E731
        assert entries(a, ha) == entries(b, hb), f"{arch} {dtype}: the tensors differ"

