"""The engine as a library (tests/engine_library.c): one process loads a chat model, keeps two
conversations side by side, and is fed a truncated model file, hostile messages files, a turn
that is not UTF-8 and one too long for the context: each is an error returned with its message,
and the engine goes on. Its replies are the command line's (`run --chat --messages`, greedy) for
the same conversations, byte for byte, though the two conversations' turns interleave in one
process; and its AddressSanitizer + LeakSanitizer build fails a thousand rounds of requests with
nothing leaked."""
from __future__ import annotations

import json
import os
import subprocess

from chat_fixtures import exported
from common import REPO, RUN, TMP

ENGINE = REPO / "tests" / "build" / "engine_library"


def engine_run(binary, rounds: int, env: dict | None = None) -> subprocess.CompletedProcess:
    model = exported("qwen2.5")
    truncated = TMP / "engine_truncated.bin"
    truncated.write_bytes(model.read_bytes()[:20000])
    assert binary.exists(), f"{binary} is missing: make {binary.relative_to(REPO)}"
    return subprocess.run([str(binary), str(model), str(truncated), str(rounds)], capture_output=True, timeout=900,
                          env={**os.environ, **(env or {})})


def cli_reply(messages: list[dict]) -> bytes:
    path = TMP / "engine_messages.json"
    path.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    r = subprocess.run([str(RUN), str(exported("qwen2.5")), "--chat", "--messages", str(path), "-t", "0", "-n", "12"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout[:-1]  # the reply, then the newline the command line adds


def test_two_conversations_in_one_process_reply_as_the_command_line_does() -> None:
    r = engine_run(ENGINE, 3)
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    refusals = [line for line in lines if line.startswith("refused ")]
    for kind, words in [("truncated model", "truncated"), ("messages file", "trailing comma"),
                        ("messages file", "role 'tool'"), ("messages file", "surrogate"),
                        ("invalid UTF-8 turn", "not valid UTF-8"), ("turn longer than the context", "does not fit"),
                        ("conversation of no messages", "no messages")]:
        assert any(line.startswith(f"refused {kind}: ") and words in line for line in refusals), (kind, refusals)
    replies = {}
    for line in lines:
        if line.startswith("REPLY "):
            _, name, turn, *hexed = line.split(" ")
            replies[name, int(turn)] = bytes.fromhex(hexed[0] if hexed else "")
    turns = {"A": ["Hello", "More, please", "And then?"], "B": ["What is this?", "Again"]}
    for name, texts in turns.items():
        history = []
        for k, text in enumerate(texts, start=1):
            history.append({"role": "user", "content": text})
            assert replies[name, k] == cli_reply(history), (name, k)
            history.append({"role": "assistant", "content": replies[name, k].decode("utf-8", errors="replace")})
    assert replies["A", 1] != replies["B", 1]


def test_a_thousand_failed_requests_leak_nothing() -> None:
    r = engine_run(REPO / "tests" / "build" / "engine_library-asan", 1000,
                   {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "halt_on_error=1"})
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert "REPLY B 2" in r.stdout.decode()
