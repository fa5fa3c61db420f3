"""The server (run --serve): OpenAI's API over HTTP. Its answers are checked against run's own
command line, which the other tests check against PyTorch and transformers (--chat --messages for
chat, -i --no-echo for completions): with temperature 0, or a seed, a request's text is the
command line's byte for byte, whatever runs beside it. The client is OpenAI's official Node
client (npm openai) and raw sockets for the framing and for hostile clients."""
from __future__ import annotations

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from chat_fixtures import exported
from common import REPO, RUN, TMP

KJV = REPO / "models" / "kjv.bin"


class Server:
    """run MODEL --serve 127.0.0.1:0 FLAGS, its port read from the line it prints."""

    def __init__(self, model: Path, *flags: str, address: str = "127.0.0.1:0"):
        self.p = subprocess.Popen([str(RUN), str(model), "--serve", address, *flags], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.p.stderr.readline().decode()
        assert line.startswith("listening on http://"), line + self.p.stderr.read().decode()
        self.host, port = line.split("http://")[1].split(" ")[0].rsplit(":", 1)
        self.port = int(port)
        self.url = f"http://{self.host}:{self.port}"

    def request(self, method: str, path: str, body=None, headers: dict | None = None) -> tuple[int, bytes]:
        c = http.client.HTTPConnection(self.host, self.port, timeout=120)
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        out = r.status, r.read()
        c.close()
        return out

    def post(self, path: str, body) -> dict:
        status, data = self.request("POST", path, body)
        assert status == 200, data
        return json.loads(data)

    def raw(self, data: bytes, wait: float = 30) -> bytes:
        """data sent on a socket as it is; all the server answers before it closes."""
        s = socket.create_connection((self.host, self.port), timeout=wait)
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        s.close()
        return out

    def health(self) -> dict:
        status, data = self.request("GET", "/health")
        assert status == 200, data
        return json.loads(data)

    def stop(self, signalled: bool = False) -> str:
        """SIGTERM (unless sent already), then its exit: 0, and what it said."""
        if not signalled:
            self.p.send_signal(signal.SIGTERM)
        _, err = self.p.communicate(timeout=60)
        assert self.p.returncode == 0, err
        return err.decode()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def cli_chat(model: Path, messages: list[dict], n: int, *flags: str) -> bytes:
    """What run --chat --messages prints for the next reply (its answer; no newline after), as
    JSON carries text: bytes that are not UTF-8 (a random model emits them) as U+FFFD."""
    path = TMP / f"server_messages_{os.getpid()}_{threading.get_ident()}.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    r = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(path), "-n", str(n), *flags],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith(b"\n")
    return r.stdout[:-1].decode(errors="replace").encode()


def cli_completion(model: Path, prompt: str, n: int, *flags: str) -> bytes:
    r = subprocess.run([str(RUN), str(model), "-i", prompt, "--no-echo", "-n", str(n), *flags], capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode(errors="replace").encode()


def sse_events(data: bytes) -> list[bytes]:
    """The body of a streamed answer as its events' data, after checking the framing."""
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Type: text/event-stream" in head, head
    events = body.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]", body[-200:]
    assert all(e.startswith(b"data: ") and b"\n" not in e for e in events[:-1]), body
    return [e[6:] for e in events[:-2]]


CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Who are you?"}],
    [{"role": "user", "content": "Tell me of the light."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again"}],
    [{"role": "user", "content": "Count: one, two"}],
    [{"role": "user", "content": "Ünïcödé ✓ 漢字"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}],
    [{"role": "user", "content": "The end"}],
]


# ---- OpenAI's client ---------------------------------------------------------------------------

def openai_client(url: str, requests: list[dict], key: str | None = None) -> list[dict]:
    env = dict(os.environ, **({"SERVER_KEY": key} if key else {}))
    r = subprocess.run(["node", str(REPO / "tests" / "openai_client.mjs"), url + "/v1", json.dumps(requests)],
                       capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_openai_client_gets_the_command_lines_answers() -> None:
    """Chat streamed and not, completions streamed and not, the model list and an error, through
    OpenAI's own client: the texts equal the command line's, and the streamed pieces concatenate
    to the whole answer."""
    model = exported("qwen3")
    messages = CONVERSATIONS[1]
    chat = {"model": "x", "messages": messages, "temperature": 0, "max_tokens": 20}
    completion = {"model": "x", "prompt": "And God said", "temperature": 0, "max_tokens": 24}
    with Server(model) as s, Server(KJV) as plain:
        got = openai_client(s.url, [
            {"kind": "models"},
            {"kind": "chat", "params": chat},
            {"kind": "chat", "params": {**chat, "stream": True, "stream_options": {"include_usage": True}}},
            {"kind": "chat", "params": {**chat, "tools": [{"type": "function", "function": {"name": "f"}}]}},
            {"kind": "chat", "params": {**chat, "temperature": 7}},
        ])
        texts = openai_client(plain.url, [
            {"kind": "completion", "params": completion},
            {"kind": "completion", "params": {**completion, "stream": True}},
            {"kind": "chat", "params": chat},
        ])
        s.stop()
        plain.stop()
    assert got[0] == {"ids": [model.name]}
    whole = got[1]["response"]
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["role"] == "assistant"
    assert whole["choices"][0]["finish_reason"] in ("stop", "length")
    content = whole["choices"][0]["message"]["content"]
    assert content.encode() == cli_chat(model, messages, 20, "-t", "0")
    usage = whole["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] and usage["completion_tokens"] > 0
    chunks = got[2]["chunks"]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == content
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == usage["completion_tokens"]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]].count(None) == len(chunks) - 2
    assert got[3]["status"] == 400 and got[3]["error"]["param"] == "tools" and "tools" in got[3]["error"]["message"]
    assert got[4]["status"] == 400 and got[4]["error"]["param"] == "temperature"
    text = texts[0]["response"]["choices"][0]["text"]
    assert text.encode() == cli_completion(KJV, "And God said", 24, "-t", "0") and len(text) > 20
    assert "".join(c["choices"][0]["text"] for c in texts[1]["chunks"]) == text
    assert texts[2]["status"] == 400 and "no chat template" in texts[2]["error"]["message"]


def test_raw_streaming_is_server_sent_events_and_errors_are_openai_objects() -> None:
    model = exported("qwen3")
    body = json.dumps({"messages": CONVERSATIONS[0], "temperature": 0, "max_tokens": 8, "stream": True}).encode()
    with Server(model, "--max-body", "4096") as s:
        data = s.raw(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        events = [json.loads(e) for e in sse_events(data)]
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
        assert text.encode() == cli_chat(model, CONVERSATIONS[0], 8, "-t", "0")
        for method, path, payload, status, words in [
            ("GET", "/nowhere", None, 404, "no such endpoint"),
            ("GET", "/v1/chat/completions", None, 405, "takes POST"),
            ("POST", "/v1/chat/completions", b"{not json", 400, "line 1, column 2"),
            ("POST", "/v1/chat/completions", b"[]", 400, "must be a JSON object"),
            ("POST", "/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, 400, "role 'tool'"),
            ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
             "an array, not a string"),
            ("POST", "/v1/chat/completions", {"messages": CONVERSATIONS[0], "n": 9}, 400, "at most 4"),
            ("POST", "/v1/chat/completions", {"messages": CONVERSATIONS[0], "response_format": {"type": "json_object"}},
             400, "response_format"),
            ("POST", "/v1/completions", {"prompt": ["a", "b"]}, 400, "one string"),
            ("POST", "/v1/completions", {"prompt": "x", "logprobs": 2}, 400, "logprobs"),
            ("POST", "/v1/completions", {"prompt": "x", "presence_penalty": 0.5}, 400, "presence_penalty"),
            ("POST", "/v1/completions", b"x" * 5000, 413, "4096 bytes"),
        ]:
            got, data = s.request(method, path, payload)
            error = json.loads(data)["error"]
            assert got == status and words in error["message"], (path, payload, got, data)
            assert set(error) == {"message", "type", "param", "code"}
        # what clients send for "none of this" is welcome: zero however written, null, false, empties
        neutral = {"presence_penalty": 0.0, "frequency_penalty": -0e1, "logprobs": False, "tools": [],
                   "logit_bias": {}, "tool_choice": "none", "response_format": {"type": "text"}, "suffix": None}
        got = s.post("/v1/chat/completions", {"messages": CONVERSATIONS[0], "temperature": 0, "max_tokens": 8, **neutral})
        assert got["choices"][0]["message"]["content"].encode() == cli_chat(model, CONVERSATIONS[0], 8, "-t", "0")
        assert s.health()["requests"] == 2
        s.stop()


def test_a_client_that_expects_100_continue_gets_it_before_sending_its_body() -> None:
    """curl sends large bodies after 'Expect: 100-continue': the go-ahead comes once the head is
    read, then the answer to the whole request."""
    body = json.dumps({"prompt": "And God said", "temperature": 0, "max_tokens": 8}).encode()
    with Server(KJV) as s:
        c = socket.create_connection((s.host, s.port), timeout=30)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert c.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        c.sendall(body)
        data = b""
        while chunk := c.recv(65536):
            data += chunk
        c.close()
        s.stop()
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK"), data
    assert json.loads(rest)["choices"][0]["text"].encode() == cli_completion(KJV, "And God said", 8, "-t", "0")


def test_eight_clients_at_once_each_get_the_command_lines_answer() -> None:
    """8 conversations at once on 4 slots (4 wait their turn), greedy and seeded, streamed and
    not: every answer is the same conversation's answer from the command line alone."""
    model = exported("qwen3")
    jobs = []
    for i, messages in enumerate(CONVERSATIONS):
        seeded = i % 2 == 1
        sampling = {"temperature": 1, "top_p": 1, "seed": 1000 + i} if seeded else {"temperature": 0}
        flags = ["-t", "1", "-p", "1", "-s", str(1000 + i)] if seeded else ["-t", "0"]
        jobs.append(({"messages": messages, "max_tokens": 16 + i, "stream": i % 3 == 0, **sampling}, flags))
    answers: dict[int, str] = {}
    with Server(model, "--slots", "4") as s:
        def client(i: int) -> None:
            body, _ = jobs[i]
            if body["stream"]:
                data = json.dumps(body).encode()
                raw = s.raw(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                answers[i] = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in sse_events(raw))
            else:
                answers[i] = s.post("/v1/chat/completions", body)["choices"][0]["message"]["content"]
        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        s.stop()
    for i, (body, flags) in enumerate(jobs):
        assert answers[i].encode() == cli_chat(model, body["messages"], body["max_tokens"], *flags), i


def test_n_choices_are_the_command_lines_samples() -> None:
    """n choices of a completion with a seed: choice i is --samples' sample i (seed + i)."""
    with Server(KJV) as s:
        got = s.post("/v1/completions", {"prompt": "In the beginning", "n": 3, "seed": 7, "max_tokens": 12,
                                         "temperature": 1, "top_p": 1})
        s.stop()
    assert [c["index"] for c in got["choices"]] == [0, 1, 2]
    for i, choice in enumerate(got["choices"]):
        assert choice["text"].encode() == cli_completion(KJV, "In the beginning", 12, "-t", "1", "-p", "1", "-s", str(7 + i))


def test_the_next_turn_reuses_the_slots_cache() -> None:
    """A conversation's second turn on a server with 2 slots: its prefix comes from the cache
    (usage and /health say so), and the answer is the command line's for the whole conversation."""
    model = exported("qwen3")
    first = CONVERSATIONS[2]
    with Server(model, "--slots", "2") as s:
        one = s.post("/v1/chat/completions", {"messages": first, "temperature": 0, "max_tokens": 12})
        reply = one["choices"][0]["message"]["content"]
        s.post("/v1/chat/completions", {"messages": CONVERSATIONS[4], "temperature": 0, "max_tokens": 4})
        second = first + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
        two = s.post("/v1/chat/completions", {"messages": second, "temperature": 0, "max_tokens": 12})
        cached = two["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= one["usage"]["prompt_tokens"] - 1, (cached, one["usage"])
        assert s.health()["cached_tokens"] >= cached
        s.stop()
    assert two["choices"][0]["message"]["content"].encode() == cli_chat(model, second, 12, "-t", "0")


def test_reasoning_comes_apart_and_template_options_apply() -> None:
    """The thinking fixture (replies "<think>A</think>B"): reasoning_content "A", content "B",
    streamed as delta.reasoning_content; chat_template_kwargs enable_thinking false renders as
    --no-think does (the prompt's token count says so)."""
    from test_chat import thinking_model
    model = thinking_model()
    with Server(model) as s:
        got = s.post("/v1/chat/completions", {"messages": CONVERSATIONS[0], "temperature": 0, "max_tokens": 10})
        message = got["choices"][0]["message"]
        assert message["content"] == "B" and message["reasoning_content"] == "A", message
        status, data = s.request("POST", "/v1/chat/completions", {"messages": CONVERSATIONS[0], "temperature": 0,
                                                                  "max_tokens": 10, "stream": True})
        deltas = [json.loads(e)["choices"][0]["delta"] for e in sse_events(b"HTTP/1.1 200 OK\r\nContent-Type: "
                                                                           b"text/event-stream\r\n\r\n" + data)]
        assert "".join(d.get("reasoning_content", "") for d in deltas) == "A"
        assert "".join(d.get("content", "") for d in deltas) == "B"
        off = s.post("/v1/chat/completions", {"messages": CONVERSATIONS[0], "temperature": 0, "max_tokens": 1,
                                              "chat_template_kwargs": {"enable_thinking": False}})
        s.stop()
    path = TMP / "server_think.json"
    path.write_text(json.dumps(CONVERSATIONS[0]))
    ids = subprocess.run([str(RUN), str(model), "--chat", "--messages", str(path), "--tokenize", "--no-think"],
                         capture_output=True, text=True, timeout=60).stdout.split()
    assert off["usage"]["prompt_tokens"] == len(ids) != got["usage"]["prompt_tokens"]


def test_stop_strings_end_the_text_before_them() -> None:
    """As OpenAI's API: the text ends before the first stop string generated, finish_reason stop."""
    reference = cli_completion(KJV, "And God said", 40, "-t", "0").decode()
    stop = reference[10:14]
    with Server(KJV) as s:
        got = s.post("/v1/completions", {"prompt": "And God said", "temperature": 0, "max_tokens": 40, "stop": [stop, "zzz"]})
        s.stop()
    assert got["choices"][0]["text"] == reference[:reference.index(stop)]
    assert got["choices"][0]["finish_reason"] == "stop"


# ---- hostile clients -----------------------------------------------------------------------------

def test_hostile_clients_get_answers_and_the_server_goes_on() -> None:
    """Garbage, a slow client, a body too large, a client gone mid-stream, more connections than
    allowed, and 200 random malformed requests: each is answered (or let go) and the server
    keeps serving, its slots free again."""
    rng = random.Random(5)
    with Server(KJV, "--timeout", "0.5", "--slots", "2") as s:
        assert s.raw(b"\x00\xff garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert s.raw(bytes(rng.randrange(256) for _ in range(3000)) + b"\r\n\r\n").startswith(b"HTTP/1.1 4")
        slow = s.raw(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{", wait=10)
        assert slow.startswith(b"HTTP/1.1 408 "), slow
        assert s.raw(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n").startswith(b"HTTP/1.1 413 ")
        assert s.raw(b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").startswith(b"HTTP/1.1 501 ")
        assert s.raw(b"GET /health HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n").startswith(b"HTTP/1.1 431 ")
        # a client gone mid-stream: its slot is free at once
        body = json.dumps({"prompt": "And", "max_tokens": 100000, "stream": True}).encode()
        gone = socket.create_connection((s.host, s.port))
        gone.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert gone.recv(100).startswith(b"HTTP/1.1 200 ")
        gone.close()
        for _ in range(100):
            if s.health()["slots_busy"] == 0:
                break
            time.sleep(0.05)
        assert s.health()["slots_busy"] == 0
        # more connections than the server holds: the rest are told 503
        idle = [socket.create_connection((s.host, s.port)) for _ in range(70)]
        answers = []
        for c in idle[64:]:
            c.settimeout(5)
            answers.append(c.recv(100))
        assert all(a.startswith(b"HTTP/1.1 503 ") for a in answers), answers
        for c in idle:
            c.close()
        for _ in range(100):  # the server sees them go at its next poll
            if s.raw(b"GET /health HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200 "):
                break
            time.sleep(0.05)
        # random malformed requests
        valid = json.dumps({"prompt": "And God", "max_tokens": 2, "temperature": 0, "stop": ["x"], "n": 1}).encode()
        for _ in range(200):
            body = bytearray(valid)
            for _ in range(rng.randrange(1, 6)):
                what = rng.randrange(3)
                at = rng.randrange(len(body))
                if what == 0:
                    body[at] = rng.randrange(256)
                elif what == 1:
                    del body[at:at + rng.randrange(1, 8)]
                else:
                    body[at:at] = bytes([rng.choice(b'{}[]",:0123456789-eE.\\ntrufalse\xff')])
            data = s.raw(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + bytes(body))
            head, _, rest = data.partition(b"\r\n\r\n")
            status = int(head.split(b" ")[1])
            assert status in (200, 400), data
            answer = json.loads(rest)
            assert ("choices" in answer) == (status == 200) and ("error" in answer) == (status == 400), data
            if status == 400:
                assert "\n" not in answer["error"]["message"]
        got = s.post("/v1/completions", {"prompt": "And God said", "temperature": 0, "max_tokens": 8})
        assert got["choices"][0]["text"].encode() == cli_completion(KJV, "And God said", 8, "-t", "0")
        s.stop()


def test_a_key_is_needed_beyond_loopback_and_checked() -> None:
    r = subprocess.run([str(RUN), str(KJV), "--serve", "0.0.0.0:0"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "--api-key" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    with Server(KJV, "--api-key", "sesame", address="0.0.0.0:0") as s:
        s.host = "127.0.0.1"
        status, data = s.request("GET", "/v1/models")
        assert status == 401 and json.loads(data)["error"]["type"] == "authentication_error"
        status, _ = s.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
        assert status == 401
        status, data = s.request("GET", "/v1/models", headers={"Authorization": "Bearer sesame"})
        assert status == 200 and json.loads(data)["data"][0]["id"] == "kjv.bin"
        got = openai_client(f"http://127.0.0.1:{s.port}", [{"kind": "models"}], key="sesame")
        assert got == [{"ids": ["kjv.bin"]}]
        s.stop()


def test_sigterm_ends_the_streams_and_exits_zero() -> None:
    with Server(KJV) as s:
        body = json.dumps({"prompt": "And", "max_tokens": 100000, "stream": True}).encode()
        c = socket.create_connection((s.host, s.port), timeout=30)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        data = c.recv(65536)
        while data.count(b"data: ") < 3:
            data += c.recv(65536)
        s.p.send_signal(signal.SIGTERM)
        while chunk := c.recv(65536):
            data += chunk
        assert data.endswith(b"data: [DONE]\n\n"), data[-200:]
        s.p.send_signal(signal.SIGTERM)  # a second one while it winds down changes nothing
        err = s.stop(signalled=True)
        assert "stopped: 1 requests" in err, err


@pytest.mark.parametrize("flags,words", [
    (["--slots", "2"], "go with --serve"),
    (["--serve", "0", "-n", "5"], "-n does nothing with --serve"),
    (["--serve", "0", "--chat"], "two modes"),
    (["--serve", "0", "--slots", "0"], "--slots must be between 1 and 256"),
    (["--serve", "127.0.0.1:notaport"], "--serve 127.0.0.1:notaport: "),
])
def test_server_flags_that_do_not_fit_are_one_line(flags: list[str], words: str) -> None:
    r = subprocess.run([str(RUN), str(KJV), *flags], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
