"""Stop sets: an instruct model ends its turns with a token other than end-of-text (Llama 3.x
Instruct with <|eot_id|>, 128009, listed in generation_config.json's eos_token_id with 128001
and 128008; Qwen2.5-Instruct with <|im_end|>, 151645). export.py stores the union of
generation_config.json's and config.json's eos_token_id (an id or a list) and
tokenizer_config.json's eos_token, with end-of-text, as the file's stop set; run stops at any
of them (--ignore-eos at none), and --info lists them.

Each folder here holds a random Llama-shaped model whose output head is steered to one stop
token: its row is three times the row of the token the reference would choose, so that greedy
decoding reaches the stop token within a few steps. The reference (export/model.py's generate()
with the same stop set) says where; run must stop there, without printing the stop token."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from common import REPO, RUN, TMP, GPTConfig, beside, random_model
from llama_sources import write_hf_folder
from model import generate
from test_llama import LLAMA, gpt2_files
from weight_file import read_model

PYTHON = "/usr/bin/python3"
PROMPT = "And the earth was without form, and void"

LLAMA3 = ["<|begin_of_text|>", "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]
QWEN2 = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def tokenizer_json(specials: list[str]) -> tuple[bytes, int]:
    """A byte-level BPE tokenizer.json over the small GPT-2 vocabulary with the special tokens
    added after it; and the id of the first special."""
    files = gpt2_files()
    vocab = json.loads(files["vocab.json"])
    merges = [line.split(" ") for line in files["merges.txt"].decode().split("\n")[1:] if line]
    added = [{"id": len(vocab) + i, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, name in enumerate(specials)]
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    spec = {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": level,
            "post_processor": None, "decoder": level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False, "byte_fallback": False,
                      "vocab": vocab, "merges": merges}}
    return json.dumps(spec).encode(), len(vocab)


def folder_with(name: str, specials: list[str], steer: str, config_eos, generation_eos, tokenizer_eos) -> Path:
    """A Hugging Face Llama folder whose model is steered to emit `steer` soon; its config,
    generation_config and tokenizer_config name the given eos values (None: not written)."""
    data, first = tokenizer_json(specials)
    ids = {s: first + i for i, s in enumerate(specials)}
    vocab = first + len(specials)
    cfg = GPTConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, n_hidden=128, n_ctx=64, vocab_size=vocab,
                    vocab_padded=vocab, tied_head=False, **LLAMA)
    model = random_model(cfg, seed=sum(map(ord, name)))
    prompt = [ord(c) for c in "And"]  # byte tokens, enough to find a token to steer from
    chosen = generate(model, prompt, 4, temperature=0.0)[-1]
    with torch.no_grad():
        model.lm_head.weight[ids[steer]] = 3 * model.lm_head.weight[chosen]
    files = {"tokenizer.json": data}
    if generation_eos is not None:
        files["generation_config.json"] = json.dumps({"eos_token_id": generation_eos}).encode()
    if tokenizer_eos is not None:
        files["tokenizer_config.json"] = json.dumps({"eos_token": tokenizer_eos}).encode()
    folder = TMP / f"stop_{name}"
    for old in ("generation_config.json", "tokenizer_config.json"):
        (folder / old).unlink(missing_ok=True)
    beside(folder).unlink(missing_ok=True)
    extra = {} if config_eos is None else {"eos_token_id": config_eos}
    return write_hf_folder(folder, model, "llama", "F32", 1, files, **extra)


def export(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(folder), str(beside(folder))],
                          capture_output=True, text=True, timeout=600)


def name_ids(specials: list[str], *names: str) -> list[int]:
    first = len(json.loads(gpt2_files()["vocab.json"]))
    return [first + specials.index(n) for n in names]


# name: (specials, the token steered to, config.json's eos_token_id, generation_config.json's,
# tokenizer_config.json's eos_token (or its dict form), the stop set expected, as names)
CASES = {
    "llama3_eot": (LLAMA3, "<|eot_id|>", "<|end_of_text|>", ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
                   "<|eot_id|>", ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]),
    "llama3_eom": (LLAMA3, "<|eom_id|>", ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"], None,
                   {"content": "<|end_of_text|>"}, ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]),
    "qwen2_im_end": (QWEN2, "<|im_end|>", "<|endoftext|>", ["<|im_end|>", "<|endoftext|>"], "<|im_end|>",
                     ["<|endoftext|>", "<|im_end|>"]),
    "tokenizer_config_only": (LLAMA3, "<|eot_id|>", "<|end_of_text|>", None, "<|eot_id|>",
                              ["<|end_of_text|>", "<|eot_id|>"]),
}


@pytest.mark.parametrize("name", CASES)
def test_run_stops_at_each_stop_token(name: str) -> None:
    specials, steer, config_eos, generation_eos, tokenizer_eos, expected = CASES[name]
    as_ids = lambda value: name_ids(specials, value)[0] if isinstance(value, str) else \
        [name_ids(specials, v)[0] for v in value] if isinstance(value, list) else value  # noqa: E731
    folder = folder_with(name, specials, steer, as_ids(config_eos), as_ids(generation_eos), tokenizer_eos)
    r = export(folder)
    assert r.returncode == 0, r.stderr
    path = beside(folder)
    stop = name_ids(specials, *expected)
    info = subprocess.run([str(RUN), str(path), "--info"], capture_output=True, text=True).stdout
    assert f"stop tokens: {' '.join(map(str, stop))}\n" in info, info
    model, tok = read_model(path)
    assert tok.stop_ids == stop
    ids = subprocess.run([str(RUN), str(path), "--tokenize", "--ids", "-i", PROMPT], capture_output=True,
                         text=True).stdout.split()
    ref = generate(model, [int(i) for i in ids], 30, temperature=0.0, eot_id=tok.eot_id, stop_ids=tok.stop_ids)
    full = generate(model, [int(i) for i in ids], 30, temperature=0.0, ignore_eos=True)
    assert len(ref) < 30 and full[len(ref)] == name_ids(specials, steer)[0], "the steered model must stop on it"
    out = subprocess.run([str(RUN), str(path), "-i", PROMPT, "-n", "30", "-t", "0", "-s", "1"], capture_output=True)
    assert out.returncode == 0 and out.stdout == PROMPT.encode() + tok.decode(ref), (out.stdout, tok.decode(ref))
    past = subprocess.run([str(RUN), str(path), "-i", PROMPT, "-n", "30", "-t", "0", "-s", "1", "--ignore-eos"],
                          capture_output=True)
    assert past.stdout == PROMPT.encode() + tok.decode(full) and steer.encode() in past.stdout


@pytest.mark.parametrize("where,value,message", [
    ("generation_config.json", {"eos_token_id": "x"}, "eos token id 'x' is not an id"),
    ("generation_config.json", {"eos_token_id": [1, 10 ** 6]}, "eos token id 1000000 is not an id"),
    ("config.json", {"eos_token_id": [True]}, "eos token id True is not an id"),
    ("tokenizer_config.json", {"eos_token": "<|nowhere|>"}, "eos_token '<|nowhere|>' is not a token"),
    ("generation_config.json", [1, 2], "not a JSON object"),
])
def test_a_bad_stop_set_is_refused_naming_it(where: str, value, message: str) -> None:
    folder = folder_with("bad", QWEN2, "<|im_end|>", None, None, None)
    config = json.loads((folder / "config.json").read_text())
    if where == "config.json":
        config.update(value)
        (folder / where).write_text(json.dumps(config))
    else:
        (folder / where).write_text(json.dumps(value))
    r = export(folder)
    assert r.returncode == 1 and r.stderr.startswith("error: ") and message in r.stderr, r.stderr
    assert where in r.stderr and len(r.stderr.splitlines()) == 1
    assert not beside(folder).exists()
