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
from functools import lru_cache
from pathlib import Path

import pytest

from chat_fixtures import FAMILIES, FIXTURES, exported, family_folder
from common import REPO, RUN, TMP, beside

CONVERSATIONS = 210


# ---- the reference ------------------------------------------------------------------------

def reference_render(template: str, messages: list[dict], add_generation_prompt: bool, specials: dict,
                     **options) -> str:
    """transformers' rendering: the sandboxed environment with trim_blocks, lstrip_blocks,
    loopcontrols and its {% generation %} tag (AssistantTracker: the body rendered as it is),
    raise_exception, strftime_now on the clock, json.dumps as tojson; options as
    apply_chat_template's keyword arguments (enable_thinking)."""
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    class AssistantTracker(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template).render(messages=messages, tools=None, documents=None,
                                            add_generation_prompt=add_generation_prompt, **specials, **options)


def rust_ids(tokenizer_json: Path, texts: list[str]) -> list[list[int]]:
    """Hugging Face's Rust tokenizers (npm tokenizers) on each text, add_special_tokens false."""
    assert (REPO / "node_modules" / "tokenizers").exists(), "npm tokenizers is missing: make deps"
    request = {"tokenizer": str(tokenizer_json), "texts": [base64.b64encode(t.encode()).decode() for t in texts],
               "add_special_tokens": False}
    r = subprocess.run(["node", str(REPO / "tests" / "hf_tokenizers_ids.js")], input=json.dumps(request).encode(),
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


THINKING = ["<think>\nI should answer.\n</think>\n\n", "<think>\n\n</think>\n\n", "<think>quick</think>",
            "\n<think>\n\nfirst\n\nsecond\n\n</think>\n\n\n", "</think>", "<think>a</think>b<think>c</think>"]
FLAGS = ["/think", "/no_think"]


def random_conversation(rng: random.Random, family: str) -> list[dict]:
    """Roles as the family's template takes them: Llama 2, Mistral and Gemma 3 alternate
    user/assistant after an optional system message; SmolLM3 takes a system message first only;
    the others take system messages anywhere too. The families with reasoning get think blocks
    in assistant turns and reasoning_content (Qwen3), SmolLM3 its /think and /no_think in the
    system message."""
    alternate = family in ("llama2", "mistral", "gemma3")
    later_system = family not in ("smollm3",)
    thinking = family in ("qwen3", "smollm3")
    messages = []
    if rng.random() < 0.5:
        content = rng.choice(CONTENTS)
        if family == "smollm3" and rng.random() < 0.5:
            content = rng.choice(["", content, content + " "]) + rng.choice(FLAGS) + rng.choice(["", "\n", " more"])
        messages.append({"role": "system", "content": content})
    for i in range(rng.randint(1, 6)):
        roles = ["user", "assistant", "user", "system"] if later_system else ["user", "assistant", "user"]
        role = ("user" if i % 2 == 0 else "assistant") if alternate else rng.choice(roles)
        content = "".join(rng.sample(CONTENTS, rng.randint(1, 3)))
        message = {"role": role, "content": content}
        if role == "assistant" and thinking and rng.random() < 0.5:
            message["content"] = rng.choice(THINKING) + content
        if role == "assistant" and family == "qwen3" and rng.random() < 0.2:
            message["reasoning_content"] = rng.choice(["", "Because.", "\nsteps\n\n"])
        messages.append(message)
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
    """210 random conversations and a few edge cases, with and without a generation prompt: the
    ids run feeds the model equal the Rust tokenizer's ids of the reference rendering."""
    model = exported(family)
    folder = family_folder(family)
    template = (FIXTURES / FAMILIES[family]["template"]).read_text(encoding="utf-8")
    rng = random.Random(f"chat {family}")
    edges = [  # a blank first user turn after a system message (Llama 2 strips the folded text whole),
        # empty and whitespace-only contents, spaces around a reply
        [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "   "}],
        [{"role": "system", "content": " "}, {"role": "user", "content": ""}],
        [{"role": "system", "content": ""}, {"role": "user", "content": "\n"}],
        [{"role": "user", "content": "  x  "}, {"role": "assistant", "content": "  y  "}, {"role": "user", "content": "\t"}],
    ]
    cases = [(m, gen, {}) for m in edges for gen in (True, False)]
    options = FAMILIES[family].get("options", {})
    for i in range(CONVERSATIONS):
        messages = random_conversation(rng, family)
        # each option at each of its values, and at its default (not given)
        chosen = {name: values[i % (len(values) + 1)] for name, values in options.items() if i % (len(values) + 1) < len(values)}
        cases.append((messages, i % 2 == 0, chosen))
    day = datetime.now().strftime("%d %b %Y")
    texts = [reference_render(template, m, gen, specials_of(family), **opts) for m, gen, opts in cases]
    expected = rust_ids(folder / "tokenizer.json", texts)
    got = [run_ids(model, m, *([] if gen else ["--no-generation-prompt"]),
                   *[f"--template-option={k}={'true' if v else 'false'}" for k, v in opts.items()])
           for m, gen, opts in cases]
    assert datetime.now().strftime("%d %b %Y") == day, "the date changed during the test: run it again"
    for (messages, gen, opts), text, want, ours in zip(cases, texts, expected, got):
        assert ours == want, (family, gen, opts, messages, text)
    assert len(cases) >= 200 + len(edges) and any(g for _, g, _ in cases) and not all(g for _, g, _ in cases)


# ---- replies ----------------------------------------------------------------------------------

def write_messages(messages: list[dict], name: str = "chat_messages.json") -> Path:
    path = TMP / name
    path.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    return path


def reference_reply(model_path: Path, messages: list[dict], n: int, **kw) -> tuple[list[int], bytes]:
    """export/model.py's greedy tokens after the conversation's ids (with the generation
    prompt), stopping at the file's stop set; and what run prints for them."""
    from model import generate
    from weight_file import read_model
    model, tok = read_model(model_path)
    ids = run_ids(model_path, messages)
    out = generate(model, ids, n, temperature=0.0, eot_id=tok.eot_id, stop_ids=tok.stop_ids, **kw)
    return out, tok.decode(out)


@pytest.mark.parametrize("family", ["smollm2", "llama3.2", "llama2", "phi3", "mistral"])
def test_scripted_reply_is_the_reference_greedy(family: str) -> None:
    model = exported(family)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello, who are you?"}]
    if family == "mistral":  # its system message goes into the last user turn: two turns show it move
        messages[1:1] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    _, expected = reference_reply(model, messages, 24)
    r = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(write_messages(messages)), "-t", "0", "-n", "24"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected + b"\n"
    assert b"timing:" in r.stderr and b"seed:" in r.stderr


@pytest.mark.parametrize("family,steer", [("llama3.2", "<|eot_id|>"), ("llama3.2", "<|eom_id|>"), ("qwen2.5", "<|im_end|>")])
def test_a_reply_ends_at_the_end_of_turn_token(family: str, steer: str) -> None:
    """A model steered to emit its end-of-turn token soon: the reply ends there, unprinted, as the
    reference stops; with --ignore-eos it goes on past it."""
    model = exported(family, steer)
    messages = [{"role": "user", "content": "Hello"}]
    ref, expected = reference_reply(model, messages, 30)
    full, _ = reference_reply(model, messages, 30, ignore_eos=True)
    from weight_file import read_model
    _, tok = read_model(model)
    target = tok.tokens.index(steer.encode())
    assert len(ref) < 30 and full[len(ref)] == target, "the steered model must reach the token"
    path = write_messages(messages)
    r = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(path), "-t", "0", "-n", "30"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == expected + b"\n", r.stderr
    r = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(path), "-t", "0", "-n", "30", "--ignore-eos"],
                       capture_output=True, timeout=60)
    assert steer.encode() in r.stdout


def timing(stderr: bytes) -> tuple[int, int]:
    """(prompt tokens, of them computed) from chat's timing line."""
    line = [x for x in stderr.decode().splitlines() if x.startswith("timing:")][-1]
    words = line.replace("(", " ").split()
    return int(words[words.index("prompt") + 1]), int(words[words.index("prompt") + 3])


@pytest.mark.parametrize("family", ["qwen2.5", "tinyllama", "llama2"])
def test_a_conversation_keeps_its_cache_and_equals_fresh_runs(family: str) -> None:
    """Turns read from stdin's lines, each reply streamed after the last: each equals the reply a
    fresh run gives to the whole conversation so far, and the turns after the first reuse the
    cache (ChatML and TinyLlama: only the new turn is computed)."""
    model = exported(family)
    turns = ["Hello there", "Tell me more, please.", "你好", "Thanks!"]
    r = subprocess.run([str(RUN), str(model), "--chat", "--system", "Be brief.", "-t", "0", "-n", "12"],
                       input="\n".join(turns).encode() + b"\n", capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    messages = [{"role": "system", "content": "Be brief."}]
    fresh_total, expected = 0, b""
    for turn in turns:
        messages.append({"role": "user", "content": turn})
        fresh = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(write_messages(messages)), "-t", "0",
                                "-n", "12"], capture_output=True, timeout=60)
        assert fresh.returncode == 0 and fresh.stdout.endswith(b"\n"), fresh.stderr
        expected += fresh.stdout
        fresh_total += len(run_ids(model, messages))
        messages.append({"role": "assistant", "content": fresh.stdout[:-1].decode(errors="replace")})
    assert r.stdout == expected
    prompt, computed = timing(r.stderr)
    assert prompt == fresh_total
    assert computed < prompt * 0.6, (prompt, computed)


def test_the_oldest_turns_go_when_the_context_fills() -> None:
    model = exported("qwen2.5")
    turns = [f"Turn number {i}: " + "words " * 8 for i in range(8)]
    r = subprocess.run([str(RUN), str(model), "--chat", "--system", "Keep me.", "-t", "0", "-n", "8", "-c", "96"],
                       input="\n".join(turns).encode() + b"\n", capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"its oldest turn was dropped" in r.stderr


def on_a_terminal_typing(model: Path, lines: list[bytes], *flags: str) -> bytes:
    """What run --chat shows on a terminal (a pty for stdin, stdout and stderr) while lines are
    typed one at a time, each after the prompt of the last."""
    import pty
    import select
    leader, follower = pty.openpty()
    p = subprocess.Popen([str(RUN), str(model), "--chat", *flags], stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    out = b""

    def read_until(marker: bytes, timeout: float = 30) -> None:
        nonlocal out
        import time
        end, start = time.time() + timeout, len(out)
        while not (len(out) > start and out.endswith(marker)) and time.time() < end:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    out += os.read(leader, 65536)
                except OSError:
                    return

    read_until(b"> ")
    out += b"|"  # what comes after each line is read from here on
    for line in lines:
        os.write(leader, line + b"\n")
        read_until(b". " if line.endswith(b"\\") else b"> ")
        out += b"|"
    os.write(leader, b"\x04")  # Ctrl-D
    read_until(b"tok/s\r\n")
    assert p.wait(timeout=60) == 0, out
    os.close(leader)
    return out.replace(b"\r\n", b"\n")


def test_a_conversation_on_a_terminal() -> None:
    """Typed turns, a turn over two lines (a line ending in a backslash), /reset, Ctrl-D: each
    reply equals a fresh run's reply to the conversation as it stands."""
    model = exported("smollm2")
    shown = on_a_terminal_typing(model, [b"Hello", b"first line\\", b"second line", b"/reset", b"Again"],
                                 "-t", "0", "-n", "10")

    def reply(messages: list[dict]) -> bytes:
        r = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(write_messages(messages)), "-t", "0",
                            "-n", "10"], capture_output=True, timeout=60)
        return r.stdout.rstrip(b"\n")

    first = reply([{"role": "user", "content": "Hello"}])
    second = reply([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": first.decode(errors="replace")},
                    {"role": "user", "content": "first line\nsecond line"}])
    third = reply([{"role": "user", "content": "Again"}])
    at = 0
    for expected in (first, second, third):
        at = shown.find(expected + b"\n", at)
        assert at >= 0, (expected, shown)
        at += len(expected)
    assert b"(the conversation starts over)" in shown and b"timing:" in shown
    assert shown.count(b"note: the reply was cut at 10 tokens (-n)") == 3, shown


# ---- what is refused --------------------------------------------------------------------------

def one_line_error(r: subprocess.CompletedProcess, *words: str) -> None:
    err = r.stderr.decode() if isinstance(r.stderr, bytes) else r.stderr
    assert r.returncode == 1 and err.startswith("error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("text,words", [
    (b'{"role": "user"}', ["JSON array", "line 1, column 1"]),
    (b'[{"role": "user", "content": "hi"', ["expected ',' or '}'"]),
    (b'[{"role": "tool", "content": "x"}]', ["message 1", "role 'tool'"]),
    (b'[{"role": "user", "content": "x"}, {"role": "", "content": "y"}]', ["message 2 has the role '' (run knows"]),
    (b'[{"role": "user", "content": ["a"]}]', ["message 1", "\"content\" that is an array"]),
    (b'[{"role": "user", "content": 3}]', ["a number, not a string"]),
    (b'[{"role": "user"}]', ["message 1 has no \"content\""]),
    (b'[{"role": "user", "content": "\\ud800"}]', ["surrogate"]),
    (b'[{"role": "user", "content": "\xff"}]', ["not valid UTF-8"]),
    (b'[]', ["no messages"]),
    (b'[{"role": "user", "content": "a"}] x', ["text follows"]),
    (b'[' * 100000, ["message 1 is an array"]),
    (b'[{"meta": ' + b'[' * 100000, ["nested deeper than 64 levels"]),
    (b'[{"role": "user", "content": "hi"},\n]', ["a trailing comma before ']'", "line 1, column 35"]),
    (b'[{"role": "user", "content": "hi",}]', ["a trailing comma before '}'", "line 1, column 34"]),
    (b'[{"role": "user", "content": "hi", "x": [1, 2, ]}]', ["a trailing comma before ']'", "column 46"]),
    (b'[{"role": "user", "content": hi}]', ["\"content\" that is text that is not JSON"]),
])
def test_a_bad_messages_file_is_one_line(text: bytes, words: list[str]) -> None:
    path = TMP / "chat_bad.json"
    path.write_bytes(text)
    r = subprocess.run([str(RUN), str(exported("smollm2")), "--chat", "--messages", str(path)], capture_output=True,
                       timeout=30)
    one_line_error(r, *words)


@pytest.mark.parametrize("family,roles,words", [
    ("llama2", ["user", "user"], ["message 2", "alternate"]),
    ("mistral", ["assistant"], ["message 1", "alternate"]),
    ("llama2", ["system", "user", "assistant", "system", "user"], ["message 4 is a system message"]),
])
def test_a_role_order_the_template_refuses_is_one_line(family: str, roles: list[str], words: list[str]) -> None:
    path = write_messages([{"role": r, "content": "x"} for r in roles])
    r = subprocess.run([str(RUN), str(exported(family)), "--chat", "--messages", str(path)], capture_output=True, timeout=30)
    one_line_error(r, *words)
    for roles_ok in (["user", "assistant", "user"], ["system", "user"]):
        assert run_ids(exported(family), [{"role": x, "content": "x"} for x in roles_ok])


def test_a_model_without_a_template_is_refused() -> None:
    r = subprocess.run([str(RUN), str(REPO / "models" / "kjv.bin"), "--chat"], input=b"Hello\n", capture_output=True)
    one_line_error(r, "has no chat template")


def export_with_template(name: str, template: str) -> subprocess.CompletedProcess:
    """The qwen2.5 fixture folder with another template, exported beside it to FOLDER.bin."""
    folder = TMP / f"chat_template_{name}"
    base = family_folder("qwen2.5")
    folder.mkdir(exist_ok=True)
    for f in base.iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return subprocess.run(["/usr/bin/python3", str(REPO / "export" / "export.py"), str(folder), str(beside(folder))],
                          capture_output=True, text=True, timeout=600)


def test_what_a_table_cannot_express_is_a_refusal_run_reports() -> None:
    """A template numbering its turns cannot be a table of plain strings: the export stores a
    refusal, and run --chat reports it in one line."""
    numbered = "{% for m in messages %}{{ loop.index }}. {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    assert export_with_template("numbered", numbered).returncode == 0
    path = write_messages([{"role": "user", "content": "hi"}])
    r = subprocess.run([str(RUN), str(beside(TMP / "chat_template_numbered")), "--chat", "--messages", str(path)],
                       capture_output=True, timeout=30)
    one_line_error(r, "chat template cannot be used")


def test_a_template_that_drops_system_messages_refuses_them() -> None:
    """Phi-3's first template (April 2024) prints no system message: a conversation with one is
    refused; without, its ids are the reference's."""
    template = (FIXTURES / "Phi-3-mini-4k-instruct.v1-2024-04-with-bos.jinja").read_text(encoding="utf-8")
    assert export_with_template("phi3_v1", template).returncode == 0
    model = beside(TMP / "chat_template_phi3_v1")
    path = write_messages([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    r = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(path)], capture_output=True, timeout=30)
    one_line_error(r, "drops or refuses system messages")
    messages = [{"role": "user", "content": "hi <|im_end|>"}, {"role": "assistant", "content": " ok "},
                {"role": "user", "content": "\n"}]
    text = reference_render(template, messages, True, specials_of("qwen2.5"))
    assert run_ids(model, messages) == rust_ids(TMP / "chat_template_phi3_v1" / "tokenizer.json", [text])[0]


@pytest.mark.parametrize("flags,words", [
    (["--chat", "-i", "hi"], ["not -i/-f"]),
    (["--messages", "x.json"], ["--messages goes with --chat"]),
    (["--chat", "--tokenize"], ["give one"]),
    (["--chat", "--system", "s", "--messages", "x.json"], ["the messages file holds"]),
    (["--chat", "--samples", "2"], ["--samples"]),
    (["--chat", "--keep", "2"], ["--keep does nothing"]),
    (["--chat", "--perplexity", "x"], ["two modes"]),
    (["--chat", "--messages", "x.json", "--no-generation-prompt"], ["only changes what --chat --tokenize shows"]),
])
def test_chat_flags_that_do_not_fit_are_refused(flags: list[str], words: list[str]) -> None:
    r = subprocess.run([str(RUN), str(exported("smollm2")), *flags], capture_output=True, timeout=30)
    one_line_error(r, *words)


@pytest.mark.parametrize("place", ["named list", "chat_template.jinja"])
def test_the_template_is_found_where_transformers_finds_it(place: str) -> None:
    """tokenizer_config.json's list of named templates (its "default"), or chat_template.jinja
    beside it: the export carries the template and its table either way."""
    template = (FIXTURES / FAMILIES["qwen2.5"]["template"]).read_text(encoding="utf-8")
    folder = TMP / f"chat_place_{place.replace(' ', '_').replace('.', '_')}"
    base = family_folder("qwen2.5")
    folder.mkdir(exist_ok=True)
    for f in base.iterdir():
        if f.is_file() and f.name != "chat_template.jinja":
            (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    if place == "named list":
        config["chat_template"] = [{"name": "tool_use", "template": "{{ raise_exception('tools') }}"},
                                   {"name": "default", "template": template}]
    else:
        del config["chat_template"]
        (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    r = subprocess.run(["/usr/bin/python3", str(REPO / "export" / "export.py"), str(folder), str(beside(folder))],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    messages = [{"role": "user", "content": "Where?"}]
    text = reference_render(template, messages, True, specials_of("qwen2.5"))
    assert run_ids(beside(folder), messages) == rust_ids(folder / "tokenizer.json", [text])[0]


# ---- the conversation on a terminal ---------------------------------------------------------

@lru_cache(maxsize=None)
def slow_chat_model() -> Path:
    """The qwen2.5 fixture's tokenizer and template on a model wide and deep enough that a reply
    of -n -1 --ignore-eos takes seconds on one thread: time to stop it half-way with Ctrl-C."""
    from common import GPTConfig, random_model
    from llama_sources import write_hf_folder
    from test_llama import LLAMA
    base = family_folder("qwen2.5")
    files = {name: (base / name).read_bytes() for name in ("tokenizer.json", "tokenizer_config.json",
                                                           "generation_config.json")}
    config = json.loads((base / "config.json").read_text())
    cfg = GPTConfig(n_layer=6, n_head=8, n_kv_head=4, n_embd=512, n_hidden=1536, n_ctx=2048,
                    vocab_size=config["vocab_size"], vocab_padded=config["vocab_size"], tied_head=False, **LLAMA)
    folder = write_hf_folder(TMP / "chat_slow", random_model(cfg, seed=5), "llama", "F32", 1, files,
                             eos_token_id=config["eos_token_id"], bos_token_id=config["bos_token_id"])
    r = subprocess.run(["/usr/bin/python3", str(REPO / "export" / "export.py"), str(folder), str(beside(folder))],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return beside(folder)


class Terminal:
    """run --chat with a pseudo-terminal as its controlling terminal, stdin and stderr (so Ctrl-C
    is the terminal's SIGINT and the prompts show there) and stdout a pipe (the replies' exact
    bytes)."""

    def __init__(self, *args: str):
        import fcntl
        import pty
        import termios
        self.leader, follower = pty.openpty()
        attrs = termios.tcgetattr(follower)
        attrs[1] &= ~termios.OPOST  # stderr's bytes as written, no CR added
        termios.tcsetattr(follower, termios.TCSANOW, attrs)

        def controlling() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.p = subprocess.Popen([str(RUN), *args], stdin=follower, stderr=follower, stdout=subprocess.PIPE,
                                  preexec_fn=controlling)
        os.close(follower)
        os.set_blocking(self.p.stdout.fileno(), False)
        self.err, self.out = b"", b""

    def read(self, timeout: float = 0.1) -> None:
        import select
        ready, _, _ = select.select([self.leader, self.p.stdout], [], [], timeout)
        if self.leader in ready:
            try:
                self.err += os.read(self.leader, 65536)
            except OSError:
                pass
        if self.p.stdout in ready:
            self.out += self.p.stdout.read() or b""

    def until(self, what, timeout: float = 60) -> None:
        """Reads until what(self) holds."""
        import time
        end = time.monotonic() + timeout
        while not what(self):
            assert time.monotonic() < end and self.p.poll() is None, (self.err[-600:], self.out[-200:])
            self.read()

    def type(self, keys: bytes) -> None:
        os.write(self.leader, keys)


def test_ctrl_c_stops_a_reply_and_the_conversation_goes_on() -> None:
    """On a terminal: Ctrl-C mid-reply stops it and the prompt returns; the stopped reply stays
    in the history (turn 2's prompt is the tokens of the conversation with it, from run's own
    --messages rendering); /help answers, an unknown /command is refused, not sent; a second
    Ctrl-C in a row at the prompt ends the session with status 0, the timing line on a line of
    its own. Ctrl-D likewise, after a prompt."""
    model = slow_chat_model()
    t = Terminal(str(model), "--chat", "-t", "0", "-n", "-1", "--ignore-eos", "--verbose", "--threads", "1")
    t.until(lambda t: t.err.endswith(b"> "))
    t.type(b"Hello\n")
    t.until(lambda t: len(t.out) >= 30)
    t.type(b"\x03")
    t.until(lambda t: b"reply was stopped" in t.err and t.err.endswith(b"> "))
    reply = t.out
    assert reply.endswith(b"\n"), reply
    first = t.err.split(b"turn 1: ")[1].split(b"\n")[0].decode()
    assert int(first.split("generated ")[1].split()[0]) < 2000, first  # stopped, not the whole context
    t.type(b"/help\n")
    t.until(lambda t: b"/reset" in t.err and t.err.endswith(b"> "))
    t.type(b"/nope\n")
    t.until(lambda t: b"unknown command '/nope'" in t.err and t.err.endswith(b"> "))
    assert t.out == reply  # the commands reached no model: nothing was generated for them
    t.type(b"Again\n")
    t.until(lambda t: b"turn 2: " in t.err or len(t.out) > len(reply) + 30)
    t.type(b"\x03")
    t.until(lambda t: b"turn 2: " in t.err and t.err.endswith(b"> "))
    t.type(b"\x03")
    assert t.p.wait(timeout=30) == 0
    t.read()
    t.read()
    assert t.err.count(b"reply was stopped") == 2
    assert b"\ntiming: load" in t.err and b"2 turns" in t.err, t.err[-400:]
    history = [{"role": "user", "content": "Hello"},
               {"role": "assistant", "content": reply[:-1].decode("utf-8", errors="replace")},
               {"role": "user", "content": "Again"}]
    want = run_ids(model, history)
    second = t.err.split(b"turn 2: ")[1].split(b"\n")[0].decode()
    assert second.startswith(f"prompt {len(want)} tokens"), (second, len(want))

    t = Terminal(str(model), "--chat", "-n", "4")
    t.until(lambda t: t.err.endswith(b"> "))
    t.type(b"\x04")
    assert t.p.wait(timeout=30) == 0
    t.read()
    assert b"> \ntiming: load" in t.err, t.err[-300:]


# ---- reasoning apart ----------------------------------------------------------------------------

def thinking_model() -> Path:
    """Qwen3's fixture model made to reply "<think>A</think>B" and end its turn, whatever the
    conversation: every layer's output projections zero, so that the logits see only the current
    token, and the output head's rows mapping the generation prompt's last token to <think>, then
    <think> to A, A to </think>, </think> to B and B to <|im_end|>."""
    from weight_file import read_model
    folder = family_folder("qwen3")
    out = TMP / "chat_thinking"
    if (out.parent / (out.name + ".bin")).exists():
        return out.parent / (out.name + ".bin")
    import torch
    from llama_sources import write_hf_folder
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    table = {**spec["model"]["vocab"], **{a["content"]: a["id"] for a in spec["added_tokens"]}}
    chain = ["\u010a", "<think>", "A", "</think>", "B", "<|im_end|>"]  # byte-level's "\n" first
    ids = [table[t] for t in chain]
    model, _ = read_model(exported("qwen3"))
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_proj.weight.zero_()
            block.mlp.c_proj.weight.zero_()
        model.transformer.ln_f.weight.fill_(1.0)
        head = model.lm_head.weight
        head.zero_()
        wte = model.transformer.wte.weight
        for a, b in zip(ids, ids[1:]):
            e = wte[a] / wte[a].norm()
            head[b] = 40 * e
    files = {name: (folder / name).read_bytes() for name in ("tokenizer.json", "tokenizer_config.json",
                                                             "generation_config.json")}
    write_hf_folder(out, model, "llama", "F32", 1, files, eos_token_id=table["<|im_end|>"])
    r = subprocess.run(["/usr/bin/python3", str(REPO / "export" / "export.py"), str(out), str(beside(out))],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return beside(out)


def test_reasoning_goes_apart_and_the_next_turn_drops_it_from_the_cache() -> None:
    """A model whose replies are "<think>A</think>B", in a conversation through a pipe: stdout
    holds the answers alone, stderr the reasoning; the second turn is rendered as Qwen3's template
    renders it (the first reply's reasoning gone, checked against the reference's tokens), and
    only what changed is computed."""
    model = thinking_model()
    r = subprocess.run([str(RUN), str(model), "--chat", "-t", "0", "-n", "10"], input=b"Hello\nAgain\n",
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"B\nB\n", r.stdout
    err = r.stderr.decode()
    assert err.count("A") >= 2 and "<think>" not in err and "B" not in err.split("timing:")[0], err
    messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "<think>A</think>B"},
                {"role": "user", "content": "Again"}]
    template = (FIXTURES / FAMILIES["qwen3"]["template"]).read_text(encoding="utf-8")
    text = reference_render(template, messages, True, specials_of("qwen3"))
    assert "<think>A" not in text  # the template drops the reasoning before the last user message
    assert run_ids(model, messages) == rust_ids(family_folder("qwen3") / "tokenizer.json", [text])[0]
    prompt, computed = timing(r.stderr)
    assert computed < prompt, (prompt, computed)


def test_reasoning_on_a_terminal_is_dimmed_on_stdout() -> None:
    """On a terminal the reasoning goes to stdout too, between the dim and reset escapes."""
    model = thinking_model()
    shown = on_a_terminal_typing(model, [b"Hello"], "-t", "0", "-n", "10")
    assert b"\x1b[2mA\x1b[0mB" in shown, shown


def test_think_and_no_think_change_the_generation_prompt() -> None:
    """--no-think gives Qwen3's generation prompt its empty think block, --think and no flag the
    bare prompt, as transformers' enable_thinking does; an option the template lacks, or a value
    that is not a boolean, is one line."""
    model = exported("qwen3")
    messages = [{"role": "user", "content": "Hi"}]
    template = (FIXTURES / FAMILIES["qwen3"]["template"]).read_text(encoding="utf-8")
    tokenizer = family_folder("qwen3") / "tokenizer.json"
    for flags, options in (([], {}), (["--think"], {"enable_thinking": True}), (["--no-think"], {"enable_thinking": False})):
        text = reference_render(template, messages, True, specials_of("qwen3"), **options)
        assert run_ids(model, messages, *flags) == rust_ids(tokenizer, [text])[0], flags
    path = write_messages(messages)
    for flag, words in (("--template-option=reasoning=true", "takes enable_thinking"),
                        ("--template-option=enable_thinking=maybe", "takes true or false")):
        r = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(path), "--tokenize", flag],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = subprocess.run([str(RUN), str(model), "--info"], capture_output=True, text=True, timeout=60)
    assert "chat template options: enable_thinking (default true: --think, --no-think)" in r.stdout
