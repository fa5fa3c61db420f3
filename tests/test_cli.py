"""The command line of SPEC section 1: stdout holds exactly prompt + generation, stderr the
seed and the timing line, errors are one line with a non-zero exit."""
from __future__ import annotations

import re
import subprocess

import pytest

from common import RUN, TEXT, TMP, GPTConfig, char_tokenizer, export, gpt2_tokenizer, random_model
from compare import generation_agrees

_models: dict[str, tuple] = {}


def model(kind: str):
    if kind not in _models:
        tok = gpt2_tokenizer() if kind == "gpt2" else char_tokenizer()
        n = len(tok.tokens)
        cfg = GPTConfig(n_layer=1, n_head=2, n_embd=32, n_hidden=64, n_ctx=64, vocab_size=n, vocab_padded=n)
        m = random_model(cfg, seed=5)
        _models[kind] = (m, tok, export(m, tok, f"cli_{kind}"))
    return _models[kind]


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


def test_stops_at_context_with_a_note() -> None:
    m, tok, path = model("char")
    r = run(path, "-i", "And", "-n", "500", "-t", "0")
    assert r.returncode == 0
    assert len(r.stdout) == 64  # 3 prompt characters + 61 generated fill the context of 64
    assert "context length of 64" in r.stderr.decode()


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
    (["-n", "-1"], "between"),
    (["-n", "99999999999999999999"], "needs a whole number"),
    (["-t", "-0.5"], "between"),
    (["-t", "nan"], "needs a number"),
    (["-p", "1.5"], "between"),
    (["-p", "0"], "between"),
    (["-k", "-3"], "between"),
    (["-s", "-1"], "seed"),
    (["--threads", "0"], "between"),
    (["-i", "a", "-f", "b"], "not both"),
    (["-f", "/nonexistent/prompt"], "cannot open file"),
    (["-f", "/tmp"], "is a directory"),
])
def test_bad_arguments_are_one_line_errors(args, message) -> None:
    _, _, path = model("char")
    r = run(path, *args)
    assert r.returncode == 1
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
    assert r.stdout == b""


def test_missing_model_file() -> None:
    r = run("/nonexistent/model.bin")
    assert r.returncode == 1 and r.stderr.decode().startswith("error: cannot open model file")


def test_prompt_longer_than_context_gives_both_lengths() -> None:
    _, _, path = model("char")
    r = run(path, "-i", "a" * 100)
    assert r.returncode == 1
    assert "100 tokens" in r.stderr.decode() and "64 tokens" in r.stderr.decode()


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


def test_help() -> None:
    r = run("--help")
    assert r.returncode == 0 and b"--max-new-tokens" in r.stdout
