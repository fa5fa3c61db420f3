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
import re
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
TRANSFORMS = {"keep": lambda s: s, "strip": str.strip, "lstrip": str.lstrip, "rstrip": str.rstrip,
              "lstrip-newlines": lambda s: s.lstrip("\n")}
THINK = ("<think>", "</think>")  # the reasoning tags of the templates that keep reasoning apart (Qwen3, SmolLM3)
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


def generation_extension():
    """transformers' {% generation %} ... {% endgeneration %} tag (its AssistantTracker): it marks
    the assistant's text for a training mask; rendering prints the body as it is."""
    jinja2 = jinja2_module()
    from jinja2 import nodes

    class Generation(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()
    return Generation


def compile_template(template: str, strftime):
    jinja2 = jinja2_module()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols, generation_extension()])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime
    return env.from_string(template)


def render(template: str, messages: list[dict], add_generation_prompt: bool, specials: dict,
           now: datetime | None = None, options: dict | None = None) -> str:
    """The template rendered as transformers' apply_chat_template(messages, tokenize=False,
    **options) does; strftime_now() reads `now` (default: the clock)."""
    compiled = compile_template(template, lambda fmt: (now or datetime.now()).strftime(fmt))
    return compiled.render(messages=messages, tools=None, documents=None,
                           add_generation_prompt=add_generation_prompt, **specials, **(options or {}))


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

    def __init__(self, template: str, specials: dict, options: dict | None = None) -> None:
        self.formats: list[str] = []
        try:
            self.compiled = compile_template(template, self.strftime)
        except jinja2_module().exceptions.TemplateError as e:
            raise TemplateRefused(f"the chat template does not compile ({e})") from e
        self.specials, self.options = specials, options or {}

    def strftime(self, fmt: str) -> str:
        if fmt not in self.formats:
            self.formats.append(fmt)
        return DATE

    def render(self, messages: list, gen: bool) -> str | None:
        """The rendering of (role, content) pairs or message dicts, or None when the template
        raises on this conversation."""
        try:
            return self.compiled.render(messages=[m if isinstance(m, dict) else {"role": m[0], "content": m[1]}
                                                  for m in messages], tools=None, documents=None,
                                        add_generation_prompt=gen, **self.specials, **self.options)
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


def reasoning_rule(p: Prober, t: dict, template: str, before: str, after: str, W: str, last: str) -> None:
    """A template that prints an assistant turn after the last user message unlike the others: Qwen3's
    (its reasoning, split from the content at </think> or given as reasoning_content, between
    think.open and think.close; the last turn with an empty block). Sets the table's reasoning
    keys, or raises TemplateRefused."""
    if not all(tag in template for tag in THINK):
        raise TemplateRefused("the last assistant turn is printed unlike the others")
    R, A = MARK.format("R"), MARK.format("A")
    text = p.render([("user", MARK.format("U1")), ("assistant", f"{THINK[0]}\n{R}\n{THINK[1]}\n\n{A}")], False) or ""
    shown = text[len(before):len(text) - len(after)] if text.startswith(before) and text.endswith(after) else ""
    if shown.count(R) != 1 or not shown.endswith(A) or shown.index(R) > shown.index(A):
        raise TemplateRefused("the last assistant turn's reasoning is printed in a way the table cannot express")
    t["reasoning"] = "after-last-user"
    t["think.open"], t["think.close"] = shown[:shown.index(R)], shown[shown.index(R) + len(R):shown.index(A)]
    t["think.tags"] = " ".join(THINK)
    if last != before + t["think.open"] + t["think.close"] + W.lstrip("\n") + after:
        raise TemplateRefused("the last assistant turn is printed in a way the table cannot express")


def derive_table(template: str, specials: dict, atoms: list[str] | None = None, options: dict | None = None) -> dict:
    """The table of plain strings that renders every conversation of user, assistant and system
    messages as the template does (with these template options); raises TemplateRefused saying
    what it cannot express."""
    p = Prober(template, specials, options)
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

    # how each role's content is printed; an assistant turn after the last user message may be
    # printed otherwise (reasoning_rule)
    W = "\n \t\n\u3000\x1c" + MARK.format("W") + " \u00a0\n "
    t["user.content"] = transform_of(pre, "", t["user.suffix"] + t["end"], W, p.render([("user", W)], False) or "")
    t["assistant.content"] = transform_of(pre + U1 + x1, "", t["assistant.suffix"] + t["user.prefix"] + U2 +
                                          t["user.suffix"] + t["end"], W,
                                          p.render([("user", U1), ("assistant", W), ("user", U2)], False) or "")
    last = p.render([("user", U1), ("assistant", W)], False) or ""
    before, after = pre + U1 + x1, t["assistant.suffix"] + t["end"]
    if last != before + TRANSFORMS[t["assistant.content"]](W) + after:
        reasoning_rule(p, t, template, before, after, W, last)

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
                # the user's content transformed with the system message before it (Llama 2), or
                # alone after it (Gemma 3)
                folded = p.render([("system", W), ("user", W)], False)
                head = t["begin"] + t["user.prefix"]
                fold = t["system.fold-prefix"] + W + t["system.fold-suffix"]
                tail = t["user.suffix"] + t["end"]
                content = TRANSFORMS[t["user.content"]]
                if folded == head + content(fold + W) + tail:
                    t["system.fold"] = "inside"
                elif folded == head + fold + content(W) + tail:
                    t["system.fold"] = "outside"
                else:
                    raise TemplateRefused("a system message folded into the first user turn is transformed in a way "
                                          "the table cannot express")
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
            # a system message that comes out empty printed as if there were none (SmolLM3's)
            if p.render([("system", ""), ("user", U1)], False) == p.render([("user", U1)], False):
                t["system.empty"] = "none"
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


def variant(t: dict, options: dict) -> dict:
    """The table for these option values: the keys a non-default value changes
    (when.NAME.VALUE.KEY) over the default's."""
    out = {k: v for k, v in t.items() if not k.startswith("when.")}
    for name, value in options.items():
        prefix = f"when.{name}.{'true' if value else 'false'}."
        out.update({k[len(prefix):]: v for k, v in t.items() if k.startswith(prefix)})
    return out


def option_values(t: dict, options: dict | None) -> dict:
    """Every option of the table at its default, but those given."""
    values = {k[len("option."):]: v == "true" for k, v in t.items() if k.startswith("option.")}
    values.update({k: v for k, v in (options or {}).items() if k in values})
    return values


def system_flag_options(t: dict, content: str, options: dict) -> tuple[str, dict]:
    """A first system message's flags (SmolLM3's /think, /no_think): the options the first one found
    sets, and the content with every flag removed."""
    flags = [f.split("=", 1) for f in t.get("system.flags", "").split()]
    options = dict(options)
    for flag, setting in flags:
        if flag in content:
            name, value = setting.rsplit(".", 1)
            options[name] = value == "true"
            break
    for flag, _ in flags:
        content = content.replace(flag, "")
    return content, options


def last_query(messages: list[dict]) -> int:
    """The index of the last user message that is not a tool's response (Qwen3's last_query_index),
    or the last message's when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m["role"] == "user" and not (m["content"].startswith("<tool_response>") and m["content"].endswith("</tool_response>")):
            return i
    return len(messages) - 1


def assistant_text(t: dict, m: dict, after_query: bool, last: bool) -> str:
    """An assistant message's printed content: transformed, or by Qwen3's rule (reasoning_rule)
    its reasoning (reasoning_content, else what its content holds before the closing tag) in a
    think block after the last user message, dropped before."""
    content = m["content"]
    if t.get("reasoning") != "after-last-user":
        return TRANSFORMS[t["assistant.content"]](content)
    open_tag, close_tag = t["think.tags"].split(" ")
    reasoning = m.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = ""
        if close_tag in content:
            reasoning = content.split(close_tag)[0].rstrip("\n").split(open_tag)[-1].lstrip("\n")
            content = content.split(close_tag)[-1].lstrip("\n")
    if after_query and (last or reasoning):
        return t["think.open"] + reasoning.strip("\n") + t["think.close"] + content.lstrip("\n")
    return TRANSFORMS[t["assistant.content"]](content)


def table_render(t: dict, messages: list, gen: bool, date: str = "", options: dict | None = None) -> str:
    """A conversation rendered by the table: what run.c's chat.h does, in Python. messages: (role,
    content) pairs or message dicts (an assistant's may carry reasoning_content); options: the
    template's options (option.NAME), the defaults where not given."""
    messages = [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in messages]
    values = option_values(t, options)
    system, rest = None, list(messages)
    if rest and rest[0]["role"] == "system":
        system, values = system_flag_options(t, rest[0]["content"], values)
        rest = rest[1:]
    t = variant(t, values)
    fold = None
    place = t.get("system.place", "none")
    if system is not None and place == "turn" and t.get("system.empty") == "none" and \
            not TRANSFORMS[t["system.content"]](system):
        system = None  # printed as if there were none
    if system is not None and place == "first-user" and rest and rest[0]["role"] == "user":
        fold = 0
    if system is not None and place == "last-user" and rest and rest[-1]["role"] == "user":
        fold = len(rest) - 1
    out = t["begin"]
    if system is not None and place == "turn":
        out = t["system.begin"] + TRANSFORMS[t["system.content"]](system) + t["system.end"]
    query = last_query(messages) - (len(messages) - len(rest))
    for i, m in enumerate(rest):
        role = m["role"]
        if role == "assistant":
            text = assistant_text(t, m, i > query, i == len(rest) - 1)
        elif i == fold and t.get("system.fold", "inside") == "outside":
            text = t["system.fold-prefix"] + system + t["system.fold-suffix"] + TRANSFORMS[t[f"{role}.content"]](m["content"])
        elif i == fold:
            text = TRANSFORMS[t[f"{role}.content"]](t["system.fold-prefix"] + system + t["system.fold-suffix"] + m["content"])
        else:
            text = TRANSFORMS[t[f"{role}.content"]](m["content"])
        out += t[f"{role}.prefix"] + text + t[f"{role}.suffix"]
    out += t["generation"] if gen else t["end"]
    return out.replace(DATE, date)


def accepts(t: dict, messages: list) -> bool:
    """Whether the table's rules let run take this conversation (run refuses the others)."""
    messages = [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in messages]
    rules = t["rules"].split()
    roles = [m["role"] for m in messages]
    if not roles:
        return False
    if "system" in roles and "no-system" in rules:
        return False
    if "system" in roles[1:] and "no-later-system" in rules:
        return False
    if roles[0] == "system" and any(text in messages[0]["content"] for text in t.get("system.refuse", "").split()):
        return False
    turns = roles[1:] if roles[0] == "system" else roles
    if "alternate" in rules and any(r != ("user" if i % 2 == 0 else "assistant") for i, r in enumerate(turns)):
        return False
    if "user-first" in rules and turns and turns[0] != "user":
        return False
    return True


# ---- options and flags ---------------------------------------------------------------------------

OPTION_PROBES = [[("user", MARK.format("U1"))], [("system", MARK.format("S")), ("user", MARK.format("U1"))],
                 [("user", MARK.format("U1")), ("assistant", MARK.format("A1")), ("user", MARK.format("U2"))],
                 [("user", MARK.format("U1")), ("assistant", MARK.format("A1"))]]


def boolean_options(template: str, specials: dict) -> dict[str, bool]:
    """The template's boolean options (enable_thinking): variables it reads that a conversation
    does not give, where one of True and False renders as the template does without them (the
    default) and the other otherwise. Options that are not booleans are not offered."""
    jinja2 = jinja2_module()
    import jinja2.meta
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(extensions=[jinja2.ext.loopcontrols, generation_extension()])
    known = {"messages", "tools", "documents", "add_generation_prompt", "raise_exception", "strftime_now", "namespace",
             "range", "dict", "lipsum", "cycler", "joiner", *SPECIAL_NAMES}
    names = sorted(jinja2.meta.find_undeclared_variables(env.parse(template)) - known)
    out = {}
    for name in names:
        runs = {}
        for value in (None, True, False):
            p = Prober(template, specials, {} if value is None else {name: value})
            runs[value] = [p.render(m, g) for m in OPTION_PROBES for g in (False, True)]
        if any(r is None for rs in runs.values() for r in rs):
            continue
        if runs[True] == runs[None] != runs[False]:
            out[name] = True
        elif runs[False] == runs[None] != runs[True]:
            out[name] = False
    return out


def system_flags(template: str, specials: dict, options: dict[str, bool]) -> tuple[list[str], list[str]]:
    """(flags, refused): the texts the template looks for in a system message ("/no_think" in ...):
    those that set an option as its other value would (SmolLM3's /think, /no_think) as
    "TEXT=NAME.VALUE" in the template's order, and the others, whose conversations run refuses."""
    literals = list(dict.fromkeys(re.findall(r"""["'](/[A-Za-z_]+)["']\s+in\s""", template)))
    flags, refused = [], []
    U1, S = MARK.format("U1"), MARK.format("S")
    for text in literals:
        found = None
        for name in options:
            for value in (True, False):
                flagged = Prober(template, specials).render([("system", f"{S} {text}"), ("user", U1)], True)
                plain = Prober(template, specials, {name: value}).render([("system", S), ("user", U1)], True)
                if flagged is not None and flagged == plain and found is None:
                    found = f"{text}={name}.{'true' if value else 'false'}"
        if found:
            flags.append(found)
        else:
            refused.append(text)
    return flags, refused


def derive_chat(template: str, specials: dict, atoms: list[str] | None = None) -> dict:
    """The whole table: the default options' (derive_table), the keys each other option value
    changes (when.NAME.VALUE.KEY), the options (option.NAME: the default), the system message's
    flags and the texts refused in it."""
    options = boolean_options(template, specials)
    if len(options) > 2:
        raise TemplateRefused(f"the template takes {len(options)} options ({', '.join(options)}): at most two are run")
    t = derive_table(template, specials, atoms)
    for name, default in options.items():
        other = derive_table(template, specials, atoms, {name: not default})
        value = "false" if default else "true"
        t.update({f"when.{name}.{value}.{k}": v for k, v in other.items() if t.get(k) != v})
        t[f"option.{name}"] = "true" if default else "false"
    if "think.tags" not in t and all(tag in template for tag in THINK):  # what run shows apart as reasoning
        t["think.tags"] = " ".join(THINK)
    flags, refused = system_flags(template, specials, options)
    if flags:
        t["system.flags"] = " ".join(flags)
    if refused:
        t["system.refuse"] = " ".join(refused)
    return t


# ---- verification ---------------------------------------------------------------------------

CONTENTS = ["", " ", "\n", "\t", "  \n\t ", "Hello", " leading", "trailing ", "  both  ", "two\nlines", "\nnewline first",
            "last newline\n", "tab\there", "你好，世界。", "日本語のテキスト", "🙂👍🏽 emoji", "\u3000full-width space\u3000",
            "\u00a0no-break\u00a0", "\x1cseparator\x1f", "What is 2 + 2?", "It is 4.", "a" * 40,
            "mixed 中文 and English 🚀\n\nsecond paragraph"]
REASONING = ["<think>\nLet me think.\n</think>\n\n", "<think>\n\n</think>\n\n", "<think>steps</think>", "</think>",
             "\n<think>\n\nfirst\n\n</think>\n\n\n", "<think>a</think>b<think>c</think>"]


def random_content(rng: random.Random, t: dict | None = None, role: str = "") -> str:
    parts = rng.sample(CONTENTS, rng.randint(1, 3))
    text = "".join(parts) if rng.random() < 0.5 else rng.choice(CONTENTS)
    if t and role == "assistant" and "think.tags" in t and rng.random() < 0.5:
        text = rng.choice(REASONING) + text
    if t and role == "system" and rng.random() < 0.5:
        words = [f.split("=")[0] for f in t.get("system.flags", "").split()]
        if words:
            text = rng.choice(["", text + " ", text + "\n"]) + rng.choice(words) + rng.choice(["", " ", "\n", text])
    return text


def random_conversation(rng: random.Random, t: dict) -> list[dict]:
    """A conversation the table's rules accept: an optional system message, then turns; an
    assistant's sometimes with reasoning (in its content, or as reasoning_content)."""
    rules = t["rules"].split()
    while True:
        messages = []
        if "no-system" not in rules and rng.random() < 0.5:
            messages.append({"role": "system", "content": random_content(rng, t, "system")})
        n = rng.randint(1, 7)
        for i in range(n):
            if "alternate" in rules:
                role = "user" if i % 2 == 0 else "assistant"
            else:
                choices = ["user", "assistant"] + ([] if "no-later-system" in rules or "no-system" in rules else ["system"])
                role = "user" if i == 0 and "user-first" in rules else rng.choice(choices)
            m = {"role": role, "content": random_content(rng, t, role)}
            if role == "assistant" and "think.tags" in t and rng.random() < 0.25:
                m["reasoning_content"] = rng.choice(["", "why\n", "\nbecause\n\n"])
            messages.append(m)
        if accepts(t, messages):
            return messages


def verify_table(template: str, specials: dict, t: dict, n: int = VERIFY_CONVERSATIONS, seed: int = 0) -> int:
    """Renders n random conversations (with and without a system message and a generation prompt,
    each option value in turn) directly and by the table; raises TemplateRefused at the first
    that differs. Returns n."""
    rng = random.Random(seed)
    now = datetime(2025, 1, 15, 12, 0, 0)
    date = now.strftime(t["date"]) if t["date"] else ""
    names = [k[len("option."):] for k in t if k.startswith("option.")]
    for i in range(n):
        messages = random_conversation(rng, t)
        gen = i % 2 == 0
        options = {name: rng.random() < 0.5 for name in names} if rng.random() < 0.7 else {}
        direct = render(template, messages, gen, specials, now, options)
        ours = table_render(t, messages, gen, date, options)
        if direct != ours:
            raise TemplateRefused(f"the table renders {[m['role'] for m in messages]} unlike the template "
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
        t = derive_chat(template, specials, atoms)
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
