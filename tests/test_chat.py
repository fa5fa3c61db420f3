"""Chat (run --chat): conversations rendered by each model's own template and tokenized as
transformers' apply_chat_template does, checked against an independent reference: the template
rendered by Debian's python3-jinja2 with transformers' settings (written out here, not the
exporter's code), tokenized by Hugging Face's Rust tokenizers (npm tokenizers) with
add_special_tokens false. The fixtures (tests/chat_fixtures.py) carry the seven covered
templates, byte for byte."""
from __future__ import annotations

import base64
import json
import os
import random
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from chat_fixtures import FAMILIES, FIXTURES, exported, ids_of
from common import REPO, RUN, TMP

CONVERSATIONS = 210


# ---- the reference ------------------------------------------------------------------------

def reference_render(template: str, messages: list[dict], add_generation_prompt: bool, specials: dict) -> str:
    """transformers' rendering: the sandboxed environment with trim_blocks, lstrip_blocks and
    loopcontrols, raise_exception, strftime_now on the clock, json.dumps as tojson."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template).render(messages=messages, tools=None, documents=None,
                                            add_generation_prompt=add_generation_prompt, **specials)


def rust_ids(tokenizer_json: Path, texts: list[str]) -> list[list[int]]:
    """Hugging Face's Rust tokenizers (npm tokenizers) on each text, add_special_tokens false."""
    assert (REPO / "node_modules" / "tokenizers").exists(), "npm tokenizers is missing: make deps"
    request = {"tokenizer": str(tokenizer_json), "texts": [base64.b64encode(t.encode()).decode() for t in texts]}
    r = subprocess.run(["node", str(REPO / "tests" / "hf_rust_ids.js")], input=json.dumps(request).encode(),
                       capture_output=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def specials_of(family: str) -> dict:
    return {k: v for k, v in FAMILIES[family]["config"].items() if k.endswith("_token")}


CONTENTS = ["", " ", "\n", "\t", "  \n ", "Hello!", " leading space", "trailing space ", "  both  ", "two\nlines",
            "\n\nblank lines first", "ends with newlines\n\n", "tab\tinside", "你好，世界。今天天气很好。", "日本語の文章です",
            "🙂👍🏽🚀 emoji", "\u3000ideographic space\u3000", "\u00a0no-break\u00a0", "1234567 digits", "What is 2+2?",
            "It is 4. Anything else?", "And God said, Let there be light: and there was light.", "x" * 30,
            "<|im_end|> inside", "a <s> and </s> in text", "[INST] brackets [/INST]", "<|user|> spelled",
            "<|eot_id|>!", "   \t  "]


def random_conversation(rng: random.Random, family: str) -> list[dict]:
    """Roles as the family's template takes them: Llama 2 and Mistral alternate user/assistant
    after an optional system message; the others take system messages anywhere too."""
    alternate = family in ("llama2", "mistral")
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rng.choice(CONTENTS)})
    for i in range(rng.randint(1, 6)):
        role = ("user" if i % 2 == 0 else "assistant") if alternate else rng.choice(["user", "assistant", "user", "system"])
        content = "".join(rng.sample(CONTENTS, rng.randint(1, 3)))
        messages.append({"role": role, "content": content})
    return messages


def run_ids(model: Path, messages: list[dict], *flags: str) -> list[int]:
    path = TMP / "chat_messages.json"
    path.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    r = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(path), "--tokenize", "--ids", *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (messages, r.stderr)
    return [int(i) for i in r.stdout.split()]


# ---- the tokens a conversation is fed as -----------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_conversation_ids_equal_transformers_and_rust_tokenizers(family: str) -> None:
    """200+ random conversations, with and without a generation prompt: the ids run feeds the
    model equal the Rust tokenizer's ids of the reference rendering."""
    model = exported(family)
    folder = model.parent
    template = (FIXTURES / FAMILIES[family]["template"]).read_text(encoding="utf-8")
    rng = random.Random(f"chat {family}")
    cases = []
    for i in range(CONVERSATIONS):
        messages = random_conversation(rng, family)
        cases.append((messages, i % 2 == 0))
    day = datetime.now().strftime("%d %b %Y")
    texts = [reference_render(template, m, gen, specials_of(family)) for m, gen in cases]
    expected = rust_ids(folder / "tokenizer.json", texts)
    got = [run_ids(model, m, *([] if gen else ["--no-generation-prompt"])) for m, gen in cases]
    assert datetime.now().strftime("%d %b %Y") == day, "the date changed during the test: run it again"
    for (messages, gen), text, want, ours in zip(cases, texts, expected, got):
        assert ours == want, (family, gen, messages, text)
    assert len(cases) >= 200 and any(g for _, g in cases) and not all(g for _, g in cases)
