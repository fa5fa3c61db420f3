"""Hugging Face folders of instruct models for the chat tests: each of the covered chat templates
(tests/fixtures/chat/, the models' published templates, byte for byte; Qwen3-0.6B's, Gemma 3
1B's, SmolLM3-3B's, Phi-4-mini's and Llama 3.1's as the public copies of their tokenizer_config.json
or chat_template.jinja in microsoft/onnxruntime-extensions' test data and huggingface.js' tests
hold them, two copies agreeing) with a tokenizer of its family and a small random Llama-shaped
model.

Tokenizers: for the byte-level BPE families (SmolLM2, Qwen2.5, Llama 3.2, Qwen3, SmolLM3, Llama
3.1, Phi-4-mini with its o200k_base split) a tokenizer.json over GPT-2's first 1,500 merges with
the family's pre-tokenizer and its special tokens as added tokens; for the SentencePiece families (TinyLlama, Llama 2, Phi-3, Mistral v0.3) a SentencePiece
BPE model trained here with Llama's settings (byte fallback, digits split, no normalization, no
removal of spaces; Mistral's [INST] and [/INST] as control pieces), with the tokenizer.json
transformers' converter would write for it: the pieces as a BPE vocabulary with byte fallback,
merges ordered by the merged piece's score, the control and unknown pieces as added tokens, and
either the legacy normalizer (Prepend and Replace: Llama 2, Mistral) or the Metaspace
pre-tokenizer of prepend_scheme "first" (TinyLlama, Phi-3); Phi-3's chat tokens after the pieces
as added tokens with rstrip, as its tokenizer has them."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch

from common import REPO, TMP, GPTConfig, random_model
from llama_sources import write_hf_folder
from test_llama import LLAMA, gpt2_files
from tokenizer_files import LLAMA3_SPLIT, O200K_PATTERN, QWEN2_SPLIT

FIXTURES = REPO / "tests" / "fixtures" / "chat"
SP = "\u2581"


def added(i: int, content: str, rstrip: bool = False, special: bool = True) -> dict:
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": rstrip, "normalized": False,
            "special": special}


LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
PHI3_ADDED = [("<|endoftext|>", False), ("<|assistant|>", True), ("<|placeholder1|>", True), ("<|placeholder2|>", True),
              ("<|placeholder3|>", True), ("<|placeholder4|>", True), ("<|system|>", True), ("<|end|>", True),
              ("<|placeholder5|>", True), ("<|placeholder6|>", True), ("<|user|>", True)]
MISTRAL_CONTROL = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                   "[/TOOL_RESULTS]"]
GEMMA_CONTROL = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]
# Phi-4-mini's: its role tokens, and its tool tokens, which are added but not special
PHI4_SPECIALS = ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>", "<|tool|>", "<|/tool|>"]

# family -> its template file, tokenizer kind (pre-tokenizer, or SentencePiece's chat.spaces),
# special tokens (BPE) and tokenizer_config.json's special tokens, generation_config's eos (names)
FAMILIES = {
    "smollm2": dict(template="HuggingFaceTB-SmolLM2-135M-Instruct.jinja", bpe="digits",
                    specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                    config={"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
                            "pad_token": "<|im_end|>"}, eos=["<|im_end|>"]),
    "qwen2.5": dict(template="Qwen-Qwen2.5-0.5B-Instruct.jinja", bpe="qwen2",
                    specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                    config={"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, eos=["<|im_end|>", "<|endoftext|>"]),
    "llama3.2": dict(template="meta-llama-Llama-3.2-1B-Instruct.jinja", bpe="llama3", specials=LLAMA3_SPECIALS,
                     config={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                     eos=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]),
    "tinyllama": dict(template="TinyLlama-TinyLlama-1.1B-Chat-v1.0.jinja", sp="first",
                      config={"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": False},
                      eos=["</s>"]),
    "llama2": dict(template="meta-llama-Llama-2-7b-chat-hf.jinja", sp="every",
                   config={"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, eos=["</s>"]),
    "phi3": dict(template="microsoft-Phi-3-mini-4k-instruct.jinja", sp="first",
                 config={"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>",
                         "pad_token": "<|endoftext|>", "legacy": False},
                 eos=["<|endoftext|>", "<|assistant|>", "<|end|>"]),
    "mistral": dict(template="mistralai-Mistral-7B-Instruct-v0.3.jinja", sp="every", control=MISTRAL_CONTROL,
                    config={"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, eos=["</s>"]),
    # the templates with per-message rules and options (issue 48); their think tags are added
    # tokens that are not special, as Qwen3's and SmolLM3's tokenizers have them
    "qwen3": dict(template="Qwen-Qwen3-0.6B.jinja", bpe="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                  plain=["<think>", "</think>"], config={"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
                  eos=["<|im_end|>", "<|endoftext|>"], options={"enable_thinking": (True, False)}),
    "smollm3": dict(template="HuggingFaceTB-SmolLM3-3B.jinja", bpe="llama3",
                    specials=["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"],
                    plain=["<think>", "</think>"], config={"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"},
                    eos=["<|im_end|>"], options={"enable_thinking": (True, False)}, template_file=True),
    "gemma3": dict(template="google-gemma-3-1b-it.jinja", sp="never", control=GEMMA_CONTROL,
                   config={"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                           "add_bos_token": True}, eos=["<eos>", "<end_of_turn>"]),
    "phi4mini": dict(template="microsoft-Phi-4-mini-instruct.jinja", bpe="o200k", specials=PHI4_SPECIALS,
                     rstrip=["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
                     config={"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                             "unk_token": "<|endoftext|>"}, eos=["<|endoftext|>", "<|end|>"]),
    "llama3.1": dict(template="meta-llama-Llama-3.1-8B-Instruct.jinja", bpe="llama3", specials=LLAMA3_SPECIALS,
                     config={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                     eos=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]),
}


# ---- byte-level BPE -------------------------------------------------------------------------

def bpe_tokenizer_json(kind: str, specials: list[str], plain: list[str] = (), rstrip: list[str] = ()) -> dict:
    files = gpt2_files()
    vocab = json.loads(files["vocab.json"])
    merges = [line.split(" ") for line in files["merges.txt"].decode().split("\n")[1:] if line]
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    unsplit = dict(level, use_regex=False)
    split = lambda p: {"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}  # noqa: E731
    pre = {"digits": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, level]},
           "qwen2": {"type": "Sequence", "pretokenizers": [split(QWEN2_SPLIT), unsplit]},
           "llama3": {"type": "Sequence", "pretokenizers": [split(LLAMA3_SPLIT), unsplit]},
           "o200k": {"type": "Sequence", "pretokenizers": [split(O200K_PATTERN), unsplit]}}[kind]
    tokens = [added(len(vocab) + i, s, s in rstrip) for i, s in enumerate(specials)]
    tokens += [added(len(vocab) + len(specials) + i, s, special=False) for i, s in enumerate(plain)]
    return {"version": "1.0", "added_tokens": tokens,
            "normalizer": {"type": "NFC"} if kind == "qwen2" else None, "pre_tokenizer": pre, "post_processor": None,
            "decoder": level, "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                                        "byte_fallback": False, "ignore_merges": kind == "llama3", "vocab": vocab,
                                        "merges": merges}}


# ---- SentencePiece ----------------------------------------------------------------------------

@lru_cache(maxsize=None)
def sp_model(control: tuple[str, ...] = ()) -> Path:
    """A SentencePiece BPE model of 1,000 pieces with Llama's settings, trained on the King James
    text and the tokenizer fixtures' lines (many scripts)."""
    import sentencepiece as spm
    from test_tokenizer_kinds import training_text
    prefix = TMP / ("chat_sp_llama" if not control else "chat_sp_mistral" if "[INST]" in control else "chat_sp_gemma")
    if not prefix.with_suffix(".model").exists():
        spm.set_random_generator_seed(29)
        spm.SentencePieceTrainer.train(
            input=str(training_text(True)), model_prefix=str(prefix), model_type="bpe", vocab_size=1000,
            byte_fallback=True, split_digits=True, normalization_rule_name="identity", add_dummy_prefix=True,
            remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, input_sentence_size=40000,
            shuffle_input_sentence=True, minloglevel=2, max_sentence_length=8192,
            control_symbols=list(control) if control else [])
    return prefix.with_suffix(".model")


def sp_tokenizer_json(model: Path, spaces: str, extra: list[tuple[str, bool]]) -> dict:
    """The tokenizer.json transformers' Llama converter writes for a SentencePiece model (see the
    module's docstring), with extra added tokens after the pieces."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(model))
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    merges = []
    for i in range(n):  # each piece's splits into two pieces, by their ids; then all by the piece's score
        piece = sp.id_to_piece(i)
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges += [(sp.get_score(i), m) for m in local]
    merges = [list(m) for _, m in sorted(merges, key=lambda x: x[0], reverse=True)]
    tokens = [added(i, sp.id_to_piece(i)) for i in range(n) if sp.is_control(i) or sp.is_unknown(i)]
    tokens += [added(n + k, text, rstrip, True) for k, (text, rstrip) in enumerate(extra)]
    if extra:  # Phi-3's </s>: rstrip, not special
        tokens = [dict(t, rstrip=True, special=False) if t["content"] == "</s>" else t for t in tokens]
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SP}
    normalizer = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SP}, replace]} \
        if spaces == "every" else replace if spaces == "never" else None
    metaspace = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
            "normalizer": normalizer,
            "pre_tokenizer": metaspace if spaces == "first" else None, "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}


# ---- the folders ------------------------------------------------------------------------------

def ids_of(spec: dict, names: list[str]) -> list[int]:
    """Token ids of names in a tokenizer.json (its vocabulary and added tokens)."""
    table = {**spec["model"]["vocab"], **{a["content"]: a["id"] for a in spec["added_tokens"]}}
    return [table[n] for n in names]


@lru_cache(maxsize=None)
def family_folder(family: str, steer: str | None = None) -> Path:
    """The Hugging Face folder of a family's fixture model (exported to FOLDER.bin beside it by
    exported()). steer: a token the model's output head is steered to emit soon (test_stop_sets'
    way: its row three times the row of the token the model would choose first)."""
    f = FAMILIES[family]
    folder = TMP / f"chat_{family}{'_' + steer.strip('<|>').replace('/', '') if steer else ''}"
    files: dict[str, bytes] = {}
    if "bpe" in f:
        spec = bpe_tokenizer_json(f["bpe"], f["specials"], f.get("plain", ()), f.get("rstrip", ()))
    else:
        model = sp_model(tuple(f.get("control", ())))
        spec = sp_tokenizer_json(model, f["sp"], PHI3_ADDED if family == "phi3" else [])
        files["tokenizer.model"] = model.read_bytes()
    files["tokenizer.json"] = json.dumps(spec, ensure_ascii=False).encode()
    template = (FIXTURES / f["template"]).read_text(encoding="utf-8")
    if f.get("template_file"):  # SmolLM3's: chat_template.jinja beside a tokenizer_config.json without one
        files["tokenizer_config.json"] = json.dumps(f["config"]).encode()
        files["chat_template.jinja"] = template.encode()
    else:
        files["tokenizer_config.json"] = json.dumps({**f["config"], "chat_template": template}).encode()
    eos = ids_of(spec, f["eos"])
    files["generation_config.json"] = json.dumps({"eos_token_id": eos}).encode()
    vocab = max(ids_of(spec, list(spec["model"]["vocab"])) + [a["id"] for a in spec["added_tokens"]]) + 1
    cfg = GPTConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, n_hidden=128, n_ctx=512, vocab_size=vocab,
                    vocab_padded=vocab + (53 if family == "phi3" else 0), tied_head=False, **LLAMA)
    net = random_model(cfg, seed=sum(map(ord, family)))
    if steer:
        target = ids_of(spec, [steer])[0]
        with torch.no_grad():
            net.lm_head.weight[target] = 3 * net.lm_head.weight[steer_from(family)]
    return write_hf_folder(folder, net, "llama", "F32", 1, files, eos_token_id=eos[0],
                           bos_token_id=ids_of(spec, [f["config"].get("bos_token", f["eos"][0])])[0])


def steer_from(family: str) -> int:
    """The token the unsteered model chooses first after a one-turn conversation (its reply's first)."""
    import subprocess
    from common import RUN
    path = exported(family)
    messages = TMP / f"chat_{family}_steer.json"
    messages.write_text(json.dumps([{"role": "user", "content": "Hello"}]))
    ids = subprocess.run([str(RUN), str(path), "--chat", "--messages", str(messages), "--tokenize", "--ids"],
                         capture_output=True, text=True, check=True).stdout.split()
    from model import generate
    from weight_file import read_model
    model, _ = read_model(path)
    return generate(model, [int(i) for i in ids], 1, temperature=0.0, ignore_eos=True)[-1]


@lru_cache(maxsize=None)
def exported(family: str, steer: str | None = None) -> Path:
    """The family's fixture folder exported by export.py, beside it: FOLDER.bin."""
    import subprocess
    folder = family_folder(family, steer)
    out = folder.with_name(folder.name + ".bin")
    if True:  # once a process: the folder was written anew
        r = subprocess.run(["/usr/bin/python3", str(REPO / "export" / "export.py"), str(folder), str(out)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    return out
