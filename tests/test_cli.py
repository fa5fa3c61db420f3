"""The command line as docs/cli.md describes it: stdout holds exactly prompt + generation, stderr
the seed and the timing line, errors are one line with a non-zero exit; generation past the
context window, prompts from stdin, stop strings, the repetition penalty and --no-echo, each
against the PyTorch reference's generate() or bytes computed here; refused combinations."""
from __future__ import annotations

import re
import subprocess

import pytest

from common import REPO, RUN, TEXT, GPTConfig, char_tokenizer, export, gpt2_tokenizer, on_a_terminal, random_model
from compare import generation_agrees
from model import GPT, generate

_models: dict[str, tuple] = {}


def model(kind: str):
    """Small models with a context of 64: "gpt2" and "char" (learned positions), "sinusoidal"
    (a character vocabulary, sinusoidal positions), "llama" (a character vocabulary, the Llama
    family's block)."""
    if kind not in _models:
        tok = gpt2_tokenizer() if kind == "gpt2" else char_tokenizer()
        n = len(tok.tokens)
        design = dict(norm="rms", pos="rotary", ffn="swiglu", bias=0) if kind == "llama" else \
            dict(pos="sinusoidal" if kind == "sinusoidal" else "learned")
        cfg = GPTConfig(n_layer=1, n_head=2, n_embd=32, n_hidden=64, n_ctx=64, vocab_size=n, vocab_padded=n, **design)
        m = random_model(cfg, seed=5)
        _models[kind] = (m, tok, export(m, tok, f"cli_{kind}"))
    return _models[kind]


# A draw from the whole of GPT-2's 50257 near-equal probabilities of a random model (top-k 0,
# top-p 1) moves with every logit's rounding, which the tie rule of generation_agrees (one
# token's logit raised) does not cover. The binary16 cache's rounding flips (compare.py's
# cache_allowance) are far larger than float32's last bits, so those draws compare run and the
# reference with float32 caches; test_parity.py covers the binary16 cache with top-k draws.
def cache_for(kind: str, temperature: float) -> str:
    return "f32" if kind == "gpt2" and temperature > 0 else "f16"


def run(*args, input=None):
    return subprocess.run([str(RUN), *map(str, args)], input=input, capture_output=True, timeout=60)


def test_stdout_is_prompt_then_generation_and_stderr_has_seed_and_timing() -> None:
    m, tok, path = model("char")
    r = run(path, "-i", "And God said", "-n", "20", "-s", "7", "-t", "0.8")
    assert r.returncode == 0
    assert r.stdout.startswith(b"And God said")
    ids = [tok.tokens.index(bytes([b])) for b in b"And God said"]
    agrees, what = generation_agrees(m, tok, ids, r.stdout[len(b"And God said"):], 20, 0.8, 0, 0.9, 7)
    assert agrees, what
    err = r.stderr.decode().splitlines()
    assert "seed: 7" in err
    assert re.fullmatch(r"timing: load [0-9.]+ s, prompt 12 tokens [0-9.]+ tok/s, generated 20 tokens [0-9.]+ tok/s", err[-1])


def test_no_prompt_starts_from_end_of_text_which_is_not_printed() -> None:
    m, tok, path = model("gpt2")
    r = run(path, "-n", "10", "-s", "3", "-t", "0")
    assert r.returncode == 0
    agrees, what = generation_agrees(m, tok, [tok.eot_id], r.stdout, 10, 0.0, 0, 1.0, 3)
    assert agrees, what
    assert b"<|endoftext|>" not in r.stdout


def test_character_vocabulary_without_prompt_starts_from_newline() -> None:
    m, tok, path = model("char")
    r = run(path, "-n", "10", "-t", "0")
    assert r.returncode == 0
    agrees, what = generation_agrees(m, tok, [tok.tokens.index(b"\n")], r.stdout, 10, 0.0, 0, 1.0, 0)
    assert agrees, what


def test_seed_from_clock_is_echoed() -> None:
    _, _, path = model("char")
    r = run(path, "-i", "A", "-n", "2")
    assert r.returncode == 0 and re.search(r"^seed: \d+$", r.stderr.decode(), re.M)


# ---- past the context window ---------------------------------------------------------------

@pytest.mark.parametrize("kind,keep,temperature", [
    ("char", None, 0.0), ("char", None, 0.8), ("char", 0, 0.8), ("char", 63, 0.0),
    ("sinusoidal", None, 0.0), ("sinusoidal", 10, 0.8), ("gpt2", None, 0.8), ("gpt2", 40, 0.0),
])
def test_generation_goes_past_the_context_as_the_reference_does(kind, keep, temperature) -> None:
    """3 x the context of 64: the window moves (to the last `keep` tokens, default 32) as
    model.py's generate() moves it, which recomputes every step from the tokens alone."""
    m, tok, path = model(kind)
    prompt = "And God said"
    ids = [int(i) for i in run(path, "--tokenize", "--ids", "-i", prompt).stdout.split()]
    cache = cache_for(kind, temperature)
    extra = ["--keep", keep] if keep is not None else []
    r = run(path, "-i", prompt, "-n", 192, "-t", temperature, "-k", 0, "-p", 1, "-s", 11, "--ignore-eos", *extra,
            "--cache", cache)
    assert r.returncode == 0, r.stderr
    assert "context" not in r.stderr.decode()  # no note: nothing stopped, no prompt dropped
    out = r.stdout[len(prompt):]
    options = {"keep": keep} if keep is not None else {}
    try:
        agrees, what = generation_agrees(m.set_cache(cache), tok, ids, out, 192, temperature, 0, 1.0, 11,
                                         ignore_eos=True, **options)
    finally:
        m.set_cache("f16")
    assert agrees, what
    assert len(tok.decode(generate(m, ids, 192, temperature, 0, 1.0, 11, ignore_eos=True, **options))) >= 192


def with_context(m, ctx: int):
    """The reference model m with a context of ctx positions (its position table's first rows)."""
    cfg = GPTConfig(**{**m.config.__dict__, "n_ctx": ctx})
    small = GPT(cfg)
    small.load_state_dict({k: (v[:ctx] if k == "transformer.wpe.weight" else v) for k, v in m.state_dict().items()})
    return small.eval()


@pytest.mark.parametrize("kind,ctx", [("char", 40), ("sinusoidal", 24), ("llama", 17)])
def test_ctx_limits_the_window(kind: str, ctx: int) -> None:
    """-c/--ctx N: the run holds N positions, and generation past them moves the window as the
    reference with a context of N does."""
    m, tok, path = model(kind)
    prompt = "And God said"
    ids = [int(i) for i in run(path, "--tokenize", "--ids", "-i", prompt).stdout.split()]
    r = run(path, "-i", prompt, "-n", 100, "-t", 0.8, "-k", 0, "-p", 1, "-s", 4, "--ignore-eos", "--ctx", ctx)
    assert r.returncode == 0, r.stderr
    agrees, what = generation_agrees(with_context(m, ctx), tok, ids, r.stdout[len(prompt):], 100, 0.8, 0, 1.0, 4,
                                     ignore_eos=True)
    assert agrees, what
    info = run(path, "--info", "--ctx", ctx).stdout.decode()
    assert f"n_ctx 64 (this run: {ctx})" in info
    r = run(path, "-i", prompt, "--ctx", 65)
    assert r.returncode == 1 and "-c/--ctx must be between 1 and the model's context of 64, got 65" in r.stderr.decode()


def test_a_long_context_is_held_to_4096_positions_unless_ctx_says_more() -> None:
    tok = char_tokenizer()
    n = len(tok.tokens)
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=16, n_hidden=32, n_ctx=5000, vocab_size=n, vocab_padded=n)
    path = export(random_model(cfg, seed=6), tok, "cli_long_context")
    r = run(path, "-i", "And", "-n", 3)
    assert r.returncode == 0 and "the model's context is 5000 positions; this run holds 4096" in r.stderr.decode()
    assert "n_ctx 5000 (this run: 4096)" in run(path, "--info").stdout.decode()
    r = run(path, "-i", "And", "-n", 3, "--ctx", 5000)
    assert r.returncode == 0 and "holds" not in r.stderr.decode()
    assert "n_ctx 5000\n" in run(path, "--info", "--ctx", 5000).stdout.decode()


def test_a_prompt_longer_than_the_context_keeps_its_end() -> None:
    m, tok, path = model("char")
    prompt = (TEXT * 2)[:150]  # 150 characters: the first 86 are dropped
    r = run(path, "-i", prompt, "-n", 100, "-t", 0.8, "-k", 0, "-p", 1, "-s", 3)
    assert r.returncode == 0, r.stderr
    assert "the prompt is 150 tokens, longer than the context of 64: its first 86 tokens were dropped" \
        in r.stderr.decode()
    assert r.stdout.startswith(prompt.encode())  # stdout still echoes the whole prompt
    ids = [tok.tokens.index(c.encode()) for c in prompt]
    agrees, what = generation_agrees(m, tok, ids, r.stdout[len(prompt):], 100, 0.8, 0, 1.0, 3)
    assert agrees, what
    assert re.search(r"timing: load [0-9.]+ s, prompt 64 tokens", r.stderr.decode())


def test_generation_is_limited_only_by_n() -> None:
    _, _, path = model("char")
    r = run(path, "-i", "And", "-n", 500, "-t", 1, "-s", 2)
    gen = r.stdout[3:]
    assert r.returncode == 0 and len(gen) == 500  # one character per token, no end-of-text


# ---- prompts from stdin ------------------------------------------------------------------------

@pytest.mark.parametrize("how", [["-f", "-"], []])
def test_prompt_from_stdin(how) -> None:
    _, _, path = model("gpt2")
    prompt = "And God said, \u2014 naïve\n".encode()
    want = run(path, "-i", prompt.decode(), "-n", 20, "-s", 4)
    r = run(path, *how, "-n", 20, "-s", 4, input=prompt)
    assert r.returncode == 0 and want.returncode == 0
    assert r.stdout == want.stdout and r.stdout.startswith(prompt)


def test_empty_stdin_starts_from_end_of_text_as_no_prompt_does() -> None:
    _, _, path = model("gpt2")
    r = run(path, "-n", 10, "-s", 4, input=b"")
    want = subprocess.run([str(RUN), str(path), "-n", "10", "-s", "4"], stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == want.stdout and len(r.stdout) > 0


def test_tokenize_reads_stdin_too() -> None:
    _, tok, path = model("char")
    r = run(path, "--tokenize", input=b"And")
    assert r.stdout.decode().split() == [str(tok.tokens.index(bytes([b]))) for b in b"And"]


# ---- stop strings, repetition penalty, --no-echo -----------------------------------------------

@pytest.mark.parametrize("kind", ["char", "gpt2"])
def test_stop_strings_end_generation_on_the_token_that_completes_one(kind) -> None:
    """Against the same run without stops: the output is its prefix that ends with the token
    completing the first stop string. The character vocabulary has one byte per token, so the
    expected bytes are exact; with GPT-2's, the end lies within one token of the stop's end."""
    _, tok, path = model(kind)
    args = ["-i", "And", "-n", 80, "-t", 0.9, "-s", 8, "--ignore-eos", "--no-echo"]
    full = run(path, *args).stdout
    longest = max(len(t) for t in tok.tokens)
    for stops in ([full[8:10]], [full[37:40]], [full[37:40], full[8:10]], [b"never in it"]):
        r = run(path, *args, *[a for s in stops for a in ("--stop", s.decode(errors="surrogateescape"))])
        assert r.returncode == 0
        ends = [full.find(s) + len(s) for s in stops if s in full]
        if not ends:
            assert r.stdout == full, stops
            continue
        first = min(ends)  # the end of the first stop string in the text
        assert r.stdout.startswith(full[:first]) and full.startswith(r.stdout), stops
        assert any(r.stdout.endswith(s) or s in r.stdout[-(len(s) + longest):] for s in stops)
        if kind == "char":
            assert r.stdout == full[:first], stops
        else:
            assert len(r.stdout) - first < longest, stops


@pytest.mark.parametrize("kind,temperature,penalty,last", [
    ("char", 0.0, 1.3, 64), ("char", 0.8, 2.0, 8), ("gpt2", 0.0, 1.5, 16), ("gpt2", 0.8, 0.7, 64),
])
def test_repetition_penalty_as_the_reference_applies_it(kind, temperature, penalty, last) -> None:
    m, tok, path = model(kind)
    prompt = "And God said, and God said"
    ids = [int(i) for i in run(path, "--tokenize", "--ids", "-i", prompt).stdout.split()]
    cache = cache_for(kind, temperature)
    r = run(path, "-i", prompt, "-n", 100, "-t", temperature, "-k", 0, "-p", 1, "-s", 5, "--ignore-eos",
            "--repeat-penalty", penalty, "--repeat-last", last, "--cache", cache)
    assert r.returncode == 0, r.stderr
    out = r.stdout[len(prompt):]
    try:
        agrees, what = generation_agrees(m.set_cache(cache), tok, ids, out, 100, temperature, 0, 1.0, 5,
                                         ignore_eos=True, repeat_penalty=penalty, repeat_last=last)
    finally:
        m.set_cache("f16")
    assert agrees, what
    plain = run(path, "-i", prompt, "-n", 100, "-t", temperature, "-k", 0, "-p", 1, "-s", 5, "--ignore-eos")
    assert plain.stdout != r.stdout  # the penalty changed something


def test_no_echo_leaves_the_prompt_out() -> None:
    _, _, path = model("gpt2")
    echo = run(path, "-i", "And God", "-n", 12, "-s", 9)
    quiet = run(path, "-i", "And God", "-n", 12, "-s", 9, "--no-echo")
    assert quiet.returncode == 0 and echo.stdout == b"And God" + quiet.stdout


def test_zero_new_tokens_prints_the_prompt() -> None:
    _, _, path = model("char")
    r = run(path, "-i", "And God", "-n", "0")
    assert r.returncode == 0 and r.stdout == b"And God"


def test_prompt_file_raw_bytes(tmp_path) -> None:
    _, tok, path = model("gpt2")
    data = "naïve\x00 ünïcödé ✓\n".encode() + b"\xff\xfe"
    f = tmp_path / "prompt"
    f.write_bytes(data)
    r = run(path, "-f", f, "-n", "0")
    assert r.returncode == 0 and r.stdout == data


def test_tokenize_prints_ids() -> None:
    _, tok, path = model("char")
    r = run(path, "--tokenize", "-i", "And")
    assert r.returncode == 0
    assert r.stdout.decode().split() == [str(tok.tokens.index(bytes([b]))) for b in b"And"]


def test_info_describes_model() -> None:
    _, _, path = model("gpt2")
    r = run(path, "--info")
    assert r.returncode == 0
    out = r.stdout.decode()
    assert "n_layer 1, n_head 2, n_embd 32" in out and "wte" in out and "gpt2 pre-tokenizer" in out


@pytest.mark.parametrize("args,message", [
    (["--bogus"], "unknown option"),
    (["-n"], "needs a value"),
    (["-n", "abc"], "needs a whole number"),
    (["-n", "-2"], "must be between -1 and 1000000000, got -2"),
    (["-n", "99999999999999999999"], "must be between -1 and 1000000000"),
    (["-t", "-0.5"], "between"),
    (["-t", "nan"], "needs a number"),
    (["-t", "1e999"], "must be between"),
    (["-p", "1.5"], "between"),
    (["-p", "0"], "between"),
    (["-p", "And God said"], "the prompt is given with -i"),
    (["-k", "-3"], "between"),
    (["-s", "-1"], "seed"),
    (["-s", "99999999999999999999999"], "must be between 0 and 2^64-1"),
    (["--threads", "0"], "between"),
    (["--cache", "q4_0"], "--cache needs f16, f32 or q8_0, got 'q4_0'"),
    (["-i", "a", "-f", "b"], "not both"),
    (["-f", "/nonexistent/prompt"], "cannot open file '/nonexistent/prompt'"),
    (["-f", "/tmp"], "is a directory"),
    (["--stop", ""], "1 to 256 bytes"),
    (["--stop", "x" * 257], "1 to 256 bytes"),
    (["--keep", "64", "-i", "a"], "--keep must be between 0 and 63"),
    (["--repeat-penalty", "0"], "between"),
    (["--repeat-last", "0"], "between"),
    (["--tokenize", "--perplexity", "/dev/null"], "--tokenize and --perplexity are two modes"),
    (["--info", "--tokenize"], "--info and --tokenize are two modes"),
    (["--attention", "a.html", "--logits", "b"], "two modes"),
    (["--ids", "-i", "a"], "--ids only goes with --tokenize"),
    (["--perplexity", "/dev/null", "-i", "a"], "--perplexity takes no prompt"),
    (["--info", "-f", "/dev/null"], "--info takes no prompt"),
    (["--info", "-n", "5"], "-n only affects generation, not --info"),
    (["--logits", "out.bin", "-i", "a", "-t", "0"], "-t only affects generation, not --logits"),
    (["--perplexity", "/dev/null", "--stop", "x"], "--stop only affects generation"),
    (["--attention", "a.html", "-i", "a", "--no-echo"], "--no-echo only affects generation"),
    (["--tokenize", "-i", "a", "--block", "4"], "--block does nothing with --tokenize"),
    (["--tokenize", "-i", "a", "--threads=2"], "--threads does nothing with --tokenize"),
    (["--info", "--block", "4"], "--block does nothing with --info"),
    (["--attention", "/proc/x.html", "-i", "ab"], "cannot create '/proc/x.html'"),
    (["--logits", "/proc/x.bin", "-i", "ab"], "cannot create '/proc/x.bin'"),
])
def test_bad_arguments_are_one_line_errors(args, message) -> None:
    _, _, path = model("char")
    r = run(path, *args)
    assert r.returncode == 1
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
    assert r.stdout == b""


def test_info_takes_threads() -> None:
    _, _, path = model("char")
    r = run(path, "--info", "--threads", 3)
    assert r.returncode == 0 and ", 3 threads" in r.stdout.decode()


def test_missing_model_file() -> None:
    r = run("/nonexistent/model.bin")
    assert r.returncode == 1 and r.stderr.decode().startswith("error: cannot open model file")


def test_character_missing_from_vocabulary() -> None:
    _, _, path = model("char")
    r = run(path, "-i", "日本")
    assert r.returncode == 1 and "not in the model's character vocabulary" in r.stderr.decode()


def test_closed_pipe_exits_quietly() -> None:
    _, _, path = model("gpt2")
    r = subprocess.run(f"'{RUN}' '{path}' -i 'And' -n 60 --ignore-eos | head -c 5", shell=True,
                       capture_output=True, timeout=60)
    assert r.stdout == b"And" + r.stdout[3:] and len(r.stdout) == 5
    assert b"error" not in r.stderr


def test_threads_give_identical_greedy_output() -> None:
    _, _, path = model("gpt2")
    outs = {run(path, "-i", TEXT[:40], "-n", "40", "-t", "0", "--threads", n).stdout for n in (1, 2, 3)}
    assert len(outs) == 1


def test_help_lists_every_flag_and_ends_with_three_examples() -> None:
    r = run("--help")
    assert r.returncode == 0
    text = r.stdout.decode()
    for flag in ("--prompt", "--prompt-file", "--max-new-tokens", "--temperature", "--top-k", "--top-p",
                 "--seed", "--repeat-penalty", "--repeat-last", "--stop", "--keep", "--ignore-eos", "--no-echo",
                 "--tokenize", "--ids", "--perplexity", "--attention", "--logits", "--info", "--threads",
                 "--block", "--ctx", "--help", "--version", "--chat", "--system", "--messages",
                 "--no-generation-prompt"):
        assert flag in text, flag
    lines = text.rstrip("\n").splitlines()
    assert lines[-4] == "examples:" and all(line.startswith("  run models/kjv.bin") or "| run models/kjv.bin" in line
                                            for line in lines[-3:])


def test_help_examples_run() -> None:
    """The three examples of --help, on the shipped model."""
    lines = run("--help").stdout.decode().rstrip("\n").splitlines()[-3:]
    for line in lines:
        cmd = line.strip().replace("run models/kjv.bin", f"'{RUN}' '{REPO / 'models' / 'kjv.bin'}'")
        r = subprocess.run(cmd, shell=True, capture_output=True, timeout=120, cwd=REPO)
        assert r.returncode == 0, (line, r.stderr)


def test_version() -> None:
    r = run("--version")
    assert r.returncode == 0 and re.fullmatch(rb"run \d+\.\d+\.\d+ \(model file format version \d+\)\n", r.stdout)


def test_timing_line_starts_its_own_line_on_a_terminal() -> None:
    """stdout and stderr on one terminal (a pty): text that did not end a line gets a newline
    on stderr before the timing line; stdout's bytes are still exactly the prompt."""
    _, _, path = model("char")
    text = on_a_terminal(path, "-i", "And", "-n", "0")
    assert b"Andtiming" not in text and re.search(rb"(^|\n)timing: ", text), text
    piped = run(path, "-i", "And", "-n", 0)
    assert piped.stdout == b"And" and piped.stderr.decode().splitlines()[-1].startswith("timing:")


def test_a_gguf_or_a_folder_is_named_with_the_command_that_converts_it(tmp_path) -> None:
    """What people pass before they have exported anything gets the export command, not "bad
    magic" or "is a directory"."""
    gguf = tmp_path / "qwen2.5-0.5b-q8_0.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    hf = tmp_path / "Qwen2.5-0.5B"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    shelf = tmp_path / "ggufs"
    shelf.mkdir()
    (shelf / "a-Q4_K_M.gguf").write_bytes(b"GGUF")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [(gguf, f"export/export.py {gguf} {tmp_path}/qwen2.5-0.5b-q8_0.bin"),
             (hf, f"is a Hugging Face folder: convert it first with `/usr/bin/python3 export/export.py {hf} model.bin`"),
             (shelf, f"a folder of 1 .gguf file: convert one of them with `/usr/bin/python3 export/export.py "
                     f"{shelf}/a-Q4_K_M.gguf a-Q4_K_M.bin`"),
             (empty, "is a folder, not a model file")]
    for path, words in cases:
        r = run(path, "-i", "hi")
        err = r.stderr.decode()
        assert r.returncode == 1 and err.startswith("error: ") and err.count("\n") == 1 and words in err, err


def test_n_minus_one_generates_until_the_context_is_full() -> None:
    """-n -1 (llama.cpp's "until the end"): a 3-token prompt in a context of 64 generates 62 tokens,
    the last one never fed back, and stops there with a note; the same bytes as -n 62, which the
    PyTorch reference checks; -n 63 would have moved the window."""
    m, tok, path = model("char")
    r = run(path, "-i", "And", "-n", "-1", "--ignore-eos", "-s", "3", "-t", "0.8")
    assert r.returncode == 0, r.stderr
    assert "note: generation reached the end of the context of 64 positions (-n -1)" in r.stderr.decode()
    assert "generated 62 tokens" in r.stderr.decode().splitlines()[-1]
    ids = [tok.tokens.index(bytes([b])) for b in b"And"]
    agrees, what = generation_agrees(m, tok, ids, r.stdout[3:], 62, 0.8, 0, 0.9, 3)
    assert agrees, what
    assert run(path, "-i", "And", "-n", "62", "--ignore-eos", "-s", "3", "-t", "0.8").stdout == r.stdout


def test_binary_logits_are_refused_on_a_terminal() -> None:
    """--logits - would write float32 bytes to the terminal: refused, one line, nothing written."""
    import os
    import pty
    _, _, path = model("char")
    leader, follower = pty.openpty()
    p = subprocess.run([str(RUN), str(path), "--logits", "-", "-i", "And"], stdout=follower, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=60)
    os.close(follower)
    os.set_blocking(leader, False)
    try:
        shown = os.read(leader, 65536)
    except OSError:  # nothing was written (EAGAIN, or EIO once the other end closed)
        shown = b""
    os.close(leader)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1 and "--logits - writes binary float32" in err, err
    assert shown == b""
    piped = run(path, "--logits", "-", "-i", "And")
    assert piped.returncode == 0 and len(piped.stdout) == 3 * 4 * len(char_tokenizer().tokens)
