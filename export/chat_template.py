"""A model's chat template, rendered as transformers' apply_chat_template renders it, and the
table of plain strings run.c renders conversations with (docs/export.md, "Chat templates").

The template is read from a Hugging Face folder (tokenizer_config.json's chat_template: a string,
or a list of named templates whose "default" is taken; else chat_template.jinja beside it) or
given as a string with its special tokens (a GGUF's tokenizer.chat_template). It is rendered
with Debian's python3-jinja2 the way transformers does it: jinja2's ImmutableSandboxedEnvironment
(a template is data: it can call no Python), trim_blocks and lstrip_blocks, the loopcontrols
extension, raise_exception(), strftime_now(), a tojson filter that is json.dumps with
ensure_ascii=False, the special tokens of tokenizer_config.json as variables, the output unstripped.

derive_table() renders probe conversations whose contents are markers, and reads off what a
conversation begins with (with and without a system message), each role's prefix and suffix, the
generation prompt, how contents are transformed (Python's str.strip() or not), where a system
message goes (its own turn, folded into the first or the last user turn), today's date where
strftime_now() prints it, and which conversations the template refuses (roles that must
alternate, system messages it drops or raises on). verify_table() then renders random
conversations both ways; chat_metadata() stores the table only if every one is identical, else
a refusal that run reports in one line.

usage: chat_template.py FOLDER [--conversations N]   prints the table derived from FOLDER's
template and how many random conversations it was verified on
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import datetime
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokenizer_files import read_json_object  # noqa: E402
from weight_file import ExportError  # noqa: E402

# Markers stand for contents in probe conversations: private-use characters, no whitespace, so
# that stripping leaves them whole and no template prints them by itself.
MARK = "\ue000{}\ue001"
DATE = "\ue002"           # what strftime_now() returns while probing
DATE_BYTE = b"\xff"       # where today's date goes in a stored string (never a byte of UTF-8)
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
                 "additional_special_tokens")
TRANSFORMS = {"keep": lambda s: s, "strip": str.strip, "lstrip": str.lstrip, "rstrip": str.rstrip}
VERIFY_CONVERSATIONS = 500


class TemplateRefused(Exception):
    """What the table cannot express, said in one line."""


# ---- finding the template -------------------------------------------------------------------

def folder_template(folder: Path) -> tuple[str | None, dict]:
    """(the chat template or None, the special tokens the template sees) of a Hugging Face folder."""
    config = read_json_object(folder / "tokenizer_config.json")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: transformers takes "default" when no tools are given
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
        if template is None:
            raise ExportError(f"{folder}/tokenizer_config.json: chat_template lists no 'default' template")
    if template is None and (folder / "chat_template.jinja").exists():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if template is not None and not isinstance(template, str):
        raise ExportError(f"{folder}/tokenizer_config.json: chat_template is not a string")
    return template, special_tokens(config)


def special_tokens(config: dict) -> dict:
    """The special_tokens_map transformers passes to a template: each of bos_token, eos_token, ...
    that is set and non-empty, as a string (a dict's content)."""
    out = {}
    for name in SPECIAL_NAMES:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, list):
            value = [v.get("content") if isinstance(v, dict) else v for v in value]
        if value:
            out[name] = value
    return out


# ---- rendering as transformers does ---------------------------------------------------------

def jinja2_module():
    """Debian's python3-jinja2, imported when a template is to be rendered: a model without a
    chat template exports without it."""
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError as e:
        raise ExportError("this model has a chat template, which the export renders as transformers does with "
                          "jinja2: install it (Debian: apt install python3-jinja2)") from e
    return jinja2


def compile_template(template: str, strftime):
    jinja2 = jinja2_module()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime
    return env.from_string(template)


def render(template: str, messages: list[dict], add_generation_prompt: bool, specials: dict,
           now: datetime | None = None) -> str:
    """The template rendered as transformers' apply_chat_template(messages, tokenize=False) does;
    strftime_now() reads `now` (default: the clock)."""
    compiled = compile_template(template, lambda fmt: (now or datetime.now()).strftime(fmt))
    return compiled.render(messages=messages, tools=None, documents=None,
                           add_generation_prompt=add_generation_prompt, **specials)


# ---- the table --------------------------------------------------------------------------------

def common_prefix(strings: list[str], atoms: list[str]) -> str:
    """The longest common prefix of strings, cut back so that it ends nowhere inside an atom (a
    special token's text) in any of them."""
    n = min(len(s) for s in strings)
    k = 0
    while k < n and all(s[k] == strings[0][k] for s in strings):
        k += 1
    for s in strings:
        for atom in atoms:
            at = s.find(atom)
            while at >= 0:
                if at < k < at + len(atom):
                    k = at
                at = s.find(atom, at + 1)
    return strings[0][:k]


class Prober:
    """Renders probe conversations, recording the strftime_now formats asked for."""

    def __init__(self, template: str, specials: dict) -> None:
        self.formats: list[str] = []
        try:
            self.compiled = compile_template(template, self.strftime)
        except jinja2_module().exceptions.TemplateError as e:
            raise TemplateRefused(f"the chat template does not compile ({e})") from e
        self.specials = specials

    def strftime(self, fmt: str) -> str:
        if fmt not in self.formats:
            self.formats.append(fmt)
        return DATE

    def render(self, messages: list[tuple[str, str]], gen: bool) -> str | None:
        """The rendering, or None when the template raises on this conversation."""
        try:
            return self.compiled.render(messages=[{"role": r, "content": c} for r, c in messages], tools=None,
                                        documents=None, add_generation_prompt=gen, **self.specials)
        except Exception:  # noqa: BLE001 - raise_exception, undefined access, sandbox refusals alike
            return None

    def split(self, messages: list[tuple[str, str]], gen: bool, marks: list[str]) -> list[str]:
        """The rendering cut at each marker, which must each appear once, in order."""
        text = self.render(messages, gen)
        if text is None:
            raise TemplateRefused(f"the template raises on the conversation {[r for r, _ in messages]}")
        parts, at = [], 0
        for m in marks:
            if text.count(m) != 1 or text.find(m, at) < 0:
                raise TemplateRefused(f"the template does not print each message of {[r for r, _ in messages]} once")
            end = text.find(m, at)
            parts.append(text[at:end])
            at = end + len(m)
        return parts + [text[at:]]


def transform_of(before: str, rendered_with: str, after: str, content: str, text: str) -> str:
    """Which of TRANSFORMS turned content into what text shows between before and after."""
    if not (text.startswith(before) and text.endswith(after)):
        raise TemplateRefused("a content's neighbours change with the content")
    shown = text[len(before):len(text) - len(after)] if after else text[len(before):]
    for name, f in TRANSFORMS.items():
        if f(content) == shown:
            return name
    raise TemplateRefused(f"contents are transformed in a way the table cannot express ({content!r} -> {shown!r})")


def derive_table(template: str, specials: dict, atoms: list[str] | None = None) -> dict:
    """The table of plain strings that renders every conversation of user, assistant and system
    messages as the template does; raises TemplateRefused saying what it cannot express."""
    p = Prober(template, specials)
    atoms = [a for a in (atoms or []) if a] + [v for v in specials.values() if isinstance(v, str) and v]
    U1, A1, U2, A2, U3, S, S2 = (MARK.format(k) for k in ("U1", "A1", "U2", "A2", "U3", "S", "S2"))
    five = [("user", U1), ("assistant", A1), ("user", U2), ("assistant", A2), ("user", U3)]
    marks = [U1, A1, U2, A2, U3]
    pre, x1, x2, x3, x4, tail = p.split(five, False, marks)
    tail_gen = p.split(five, True, marks)[-1]
    if (pre, x1, x2, x3, x4) != tuple(p.split(five, True, marks)[:5]) or x1 != x3 or x2 != x4:
        raise TemplateRefused("the turns of a conversation are not printed alike")
    after_a = p.split(five[:2], False, [U1, A1])[-1]
    after_a_gen = p.split(five[:2], True, [U1, A1])[-1]
    t: dict = {}
    t["user.suffix"] = common_prefix([x1, tail, tail_gen], atoms)
    t["assistant.suffix"] = common_prefix([x2, after_a, after_a_gen], atoms)
    t["assistant.prefix"] = x1[len(t["user.suffix"]):]
    t["user.prefix"] = x2[len(t["assistant.suffix"]):]
    if not pre.endswith(t["user.prefix"]):
        raise TemplateRefused("the first user turn is printed unlike the others")
    t["begin"] = pre[:len(pre) - len(t["user.prefix"])]
    t["end"] = tail[len(t["user.suffix"]):]
    t["generation"] = tail_gen[len(t["user.suffix"]):]
    if after_a != t["assistant.suffix"] + t["end"] or after_a_gen != t["assistant.suffix"] + t["generation"]:
        raise TemplateRefused("the end of a conversation depends on its last role")

    # how each role's content is printed
    W = " \t\n\u3000\x1c" + MARK.format("W") + " \u00a0\n "
    t["user.content"] = transform_of(pre, "", t["user.suffix"] + t["end"], W, p.render([("user", W)], False) or "")
    t["assistant.content"] = transform_of(pre + U1 + x1, "", t["assistant.suffix"] + t["end"], W,
                                          p.render([("user", U1), ("assistant", W)], False) or "")

    # rules: what the template raises on
    rules = []
    if p.render([("user", U1), ("user", U2)], True) is None:
        rules.append("alternate")
    elif p.render([("assistant", A1), ("user", U1)], True) is None:
        rules.append("user-first")

    # a system message first: its own turn, or folded into the first or the last user turn
    four = [("system", S), ("user", U1), ("assistant", A1), ("user", U2)]
    text = p.render(four, True)
    if text is None or text.count(S) != 1:
        t["system.place"] = "none"
        rules.append("no-system")
    else:
        before, rest = text.split(S)
        if U1 in rest:  # before the first user turn
            mid = rest[:rest.index(U1)]
            if mid.endswith(t["user.prefix"]) and not before.startswith(t["begin"] + t["user.prefix"]):
                t["system.place"] = "turn"
                t["system.begin"] = before
                t["system.end"] = mid[:len(mid) - len(t["user.prefix"])]
            elif before.startswith(t["begin"] + t["user.prefix"]):
                t["system.place"] = "first-user"
                t["system.fold-prefix"] = before[len(t["begin"] + t["user.prefix"]):]
                t["system.fold-suffix"] = mid
            else:
                raise TemplateRefused("a system message is printed neither as a turn nor inside a user turn")
        else:
            seg = before[before.index(A1) + len(A1):] if A1 in before else ""
            lead = t["assistant.suffix"] + t["user.prefix"]
            if A1 not in before or not seg.startswith(lead) or U2 not in rest:
                raise TemplateRefused("a system message is printed somewhere the table cannot express")
            t["system.place"] = "last-user"
            t["system.fold-prefix"] = seg[len(lead):]
            t["system.fold-suffix"] = rest[:rest.index(U2)]
        if t["system.place"] == "turn":
            sys_text = p.render([("system", W), ("user", U1)], False) or ""
            t["system.content"] = transform_of(t["system.begin"], "", t["system.end"] + t["user.prefix"] + U1 +
                                               t["user.suffix"] + t["end"], W, sys_text)
        # a system message later in the conversation: a turn of its own, or refused
        later = p.render([("user", U1), ("assistant", A1), ("system", S2), ("user", U2)], True)
        seg_ok = later is not None and later.count(S2) == 1 and A1 in later and U2 in later
        if seg_ok:
            lead = later[later.index(A1) + len(A1):later.index(S2)]
            trail = later[later.index(S2) + len(S2):later.index(U2)]
            seg_ok = lead.startswith(t["assistant.suffix"]) and trail.endswith(t["user.prefix"])
        if seg_ok:
            t["system.prefix"] = lead[len(t["assistant.suffix"]):]
            t["system.suffix"] = trail[:len(trail) - len(t["user.prefix"])]
            t.setdefault("system.content", t["user.content"])
        else:
            rules.append("no-later-system")
    t["rules"] = " ".join(rules)
    if len(p.formats) > 1:
        raise TemplateRefused(f"the template prints the date in {len(p.formats)} formats")
    t["date"] = p.formats[0] if p.formats else ""
    return t


def table_render(t: dict, messages: list[tuple[str, str]], gen: bool, date: str = "") -> str:
    """A conversation rendered by the table: what run.c's chat.h does, in Python."""
    system, rest = None, list(messages)
    if rest and rest[0][0] == "system":
        system, rest = rest[0][1], rest[1:]
    fold = None
    place = t.get("system.place", "none")
    if system is not None and place == "first-user" and rest and rest[0][0] == "user":
        fold = 0
    if system is not None and place == "last-user" and rest and rest[-1][0] == "user":
        fold = len(rest) - 1
    out = t["begin"]
    if system is not None and place == "turn":
        out = t["system.begin"] + TRANSFORMS[t["system.content"]](system) + t["system.end"]
    for i, (role, content) in enumerate(rest):
        if i == fold:
            content = t["system.fold-prefix"] + system + t["system.fold-suffix"] + content
        out += t[f"{role}.prefix"] + TRANSFORMS[t[f"{role}.content"]](content) + t[f"{role}.suffix"]
    out += t["generation"] if gen else t["end"]
    return out.replace(DATE, date)


def accepts(t: dict, messages: list[tuple[str, str]]) -> bool:
    """Whether the table's rules let run take this conversation (run refuses the others)."""
    rules = t["rules"].split()
    roles = [r for r, _ in messages]
    if not roles:
        return False
    if "system" in roles and "no-system" in rules:
        return False
    if "system" in roles[1:] and "no-later-system" in rules:
        return False
    turns = roles[1:] if roles[0] == "system" else roles
    if "alternate" in rules and any(r != ("user" if i % 2 == 0 else "assistant") for i, r in enumerate(turns)):
        return False
    if "user-first" in rules and turns and turns[0] != "user":
        return False
    return True


# ---- verification ---------------------------------------------------------------------------

CONTENTS = ["", " ", "\n", "\t", "  \n\t ", "Hello", " leading", "trailing ", "  both  ", "two\nlines", "\nnewline first",
            "last newline\n", "tab\there", "你好，世界。", "日本語のテキスト", "🙂👍🏽 emoji", "\u3000full-width space\u3000",
            "\u00a0no-break\u00a0", "\x1cseparator\x1f", "What is 2 + 2?", "It is 4.", "a" * 40,
            "mixed 中文 and English 🚀\n\nsecond paragraph"]


def random_content(rng: random.Random) -> str:
    parts = rng.sample(CONTENTS, rng.randint(1, 3))
    return "".join(parts) if rng.random() < 0.5 else rng.choice(CONTENTS)


def random_conversation(rng: random.Random, t: dict) -> list[tuple[str, str]]:
    """A conversation the table's rules accept: an optional system message, then turns."""
    rules = t["rules"].split()
    messages = []
    if "no-system" not in rules and rng.random() < 0.5:
        messages.append(("system", random_content(rng)))
    n = rng.randint(1, 7)
    for i in range(n):
        if "alternate" in rules:
            role = "user" if i % 2 == 0 else "assistant"
        else:
            choices = ["user", "assistant"] + ([] if "no-later-system" in rules or "no-system" in rules else ["system"])
            role = "user" if i == 0 and "user-first" in rules else rng.choice(choices)
        messages.append((role, random_content(rng)))
    return messages


def verify_table(template: str, specials: dict, t: dict, n: int = VERIFY_CONVERSATIONS, seed: int = 0) -> int:
    """Renders n random conversations (with and without a system message and a generation prompt)
    directly and by the table; raises TemplateRefused at the first that differs. Returns n."""
    rng = random.Random(seed)
    now = datetime(2025, 1, 15, 12, 0, 0)
    date = now.strftime(t["date"]) if t["date"] else ""
    for i in range(n):
        messages = random_conversation(rng, t)
        gen = i % 2 == 0
        direct = render(template, [{"role": r, "content": c} for r, c in messages], gen, specials, now)
        ours = table_render(t, messages, gen, date)
        if direct != ours:
            raise TemplateRefused(f"the table renders {[r for r, _ in messages]} unlike the template "
                                  f"({direct[:60]!r} against {ours[:60]!r})")
    return n


def chat_metadata(template: str | None, specials: dict, atoms: list[str] | None = None,
                  n: int = VERIFY_CONVERSATIONS) -> dict[str, str | bytes]:
    """The metadata keys of a chat template: chat.template, and either the verified table
    (chat.begin, chat.user.prefix, ...) or chat.refusal saying why there is none."""
    if template is None:
        return {}
    out: dict[str, str | bytes] = {"chat.template": template}
    try:
        t = derive_table(template, specials, atoms)
        verify_table(template, specials, t, n)
    except TemplateRefused as e:
        out["chat.refusal"] = str(e)
        return out
    for key, value in t.items():
        out["chat." + key] = value.encode().replace(DATE.encode(), DATE_BYTE) if DATE in value else value
    return out


def tokenizer_chat_metadata(template: str, specials: dict, tok, folder: Path | None = None) -> dict[str, str | bytes]:
    """The chat metadata of a template for tokenizer tok: the template's table (chat_metadata) and
    how the rendered text is split into tokens (chat_tokenization: from the folder's
    tokenizer.json or added_tokens.json, or without a folder, as for a GGUF's tokenizer); a
    refusal instead when run could not tokenize it as Hugging Face's tokenizer does."""
    from tokenizer_files import chat_tokenization
    from weight_file import TOKEN_CONTROL, TOKEN_SPECIAL
    atoms = [t.decode(errors="replace") for t, k in zip(tok.tokens, tok.kinds) if k in (TOKEN_SPECIAL, TOKEN_CONTROL) and t]
    out = chat_metadata(template, specials, atoms)
    try:
        out.update(chat_tokenization(folder, tok))
    except ExportError as e:
        out = {"chat.template": template, "chat.refusal": str(e)}
    return out


def folder_chat_metadata(folder: Path, tok) -> dict[str, str | bytes]:
    """The chat metadata (tokenizer_chat_metadata) of a Hugging Face folder whose tokenizer is tok;
    nothing when the folder has no template."""
    template, specials = folder_template(folder)
    if template is None:
        return {}
    return tokenizer_chat_metadata(template, specials, tok, folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="a Hugging Face folder with tokenizer_config.json")
    ap.add_argument("--conversations", type=int, default=VERIFY_CONVERSATIONS)
    args = ap.parse_args()
    try:
        template, specials = folder_template(args.folder)
        if template is None:
            raise ExportError(f"{args.folder}: no chat template")
        for key, value in chat_metadata(template, specials, None, args.conversations).items():
            if key != "chat.template":
                print(f"{key}: {value!r}")
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
