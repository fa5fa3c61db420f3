"""Where run and the exporters write (issue: output paths that are symlinks, pipes or devices).
A regular file appears whole or not at all, written beside its target: a symlink (or a chain of
them, or a dangling one) is followed, so the file it names is written and the link stays; a
device, pipe or socket is written as it is, never replaced; "-" is stdout. A write that fails
(a full device, a folder that is not there, a directory) is one line naming the path and the
reason, exit status 1, and no partial or temporary file anywhere."""
from __future__ import annotations

import os
import stat
import subprocess
import threading
from functools import lru_cache
from pathlib import Path

import pytest

from common import REPO, RUN, TMP, GPTConfig, char_tokenizer, export, random_model

PYTHON = "/usr/bin/python3"


def small_model() -> Path:
    n = len(char_tokenizer().tokens)
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=32, n_hidden=64, n_ctx=64, vocab_size=n, vocab_padded=n)
    return export(random_model(cfg, seed=61), char_tokenizer(), "outputs_model")


@lru_cache(maxsize=None)  # written once a session, never trusted from an older run
def checkpoint() -> Path:
    from source_checkpoint import save_checkpoint
    path = TMP / "outputs_ckpt.pt"
    n = len(char_tokenizer().tokens)
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=32, n_hidden=64, n_ctx=64, vocab_size=n, vocab_padded=n)
    save_checkpoint(path, random_model(cfg, seed=62), char_tokenizer())
    return path


# tool -> (arguments writing OUT, how the expected bytes are made)
def tool_command(tool: str, out: str) -> list[str]:
    if tool == "logits":
        return [str(RUN), str(small_model()), "-i", "And God", "--logits", out]
    if tool == "attention":
        return [str(RUN), str(small_model()), "-i", "And God", "--attention", out]
    return [PYTHON, str(REPO / "export" / "export.py"), str(checkpoint()), out]


_expected: dict[str, bytes] = {}


def expected(tool: str) -> bytes:
    """What the tool writes to a plain new file."""
    if tool not in _expected:
        plain = TMP / f"outputs_plain_{tool}"
        plain.unlink(missing_ok=True)
        r = subprocess.run(tool_command(tool, str(plain)), capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr
        _expected[tool] = plain.read_bytes()
    return _expected[tool]


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp" in p.name or p.name.startswith(".")]


TOOLS = ["logits", "attention", "export"]


@pytest.mark.parametrize("tool", TOOLS)
def test_symlinks_are_followed(tool: str, tmp_path: Path) -> None:
    """A link to a new file, to an existing one, a chain of two, and a dangling link: the file
    the link names is written whole, the links stay links."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "existing").write_bytes(b"old contents")
    links = {"to_new": real / "new", "to_existing": real / "existing", "dangling": real / "not_yet"}
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
    (tmp_path / "second").symlink_to(real / "chained")
    (tmp_path / "first").symlink_to(tmp_path / "second")
    links["first"] = real / "chained"
    for name, target in links.items():
        r = subprocess.run(tool_command(tool, str(tmp_path / name)), capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / name).is_symlink() and target.read_bytes() == expected(tool), name
    assert (tmp_path / "second").is_symlink()
    assert not leftovers(tmp_path) and not leftovers(real)


@pytest.mark.parametrize("tool", TOOLS)
def test_a_pipe_is_written_not_replaced(tool: str, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    r = subprocess.run(tool_command(tool, str(fifo)), capture_output=True, timeout=300)
    reader.join(timeout=60)
    assert r.returncode == 0, r.stderr
    assert got == [expected(tool)] and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("tool", TOOLS)
def test_devices_and_stdout(tool: str) -> None:
    null = subprocess.run(tool_command(tool, "/dev/null"), capture_output=True, timeout=300)
    assert null.returncode == 0, null.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    full = subprocess.run(tool_command(tool, "/dev/full"), capture_output=True, timeout=300)
    lines = full.stderr.decode().strip().splitlines()
    assert full.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), full.stderr
    assert "/dev/full" in lines[0] and "No space left on device" in lines[0]
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    out = subprocess.run(tool_command(tool, "-"), capture_output=True, timeout=300)
    assert out.returncode == 0 and out.stdout == expected(tool), out.stderr
    closed = subprocess.run(" ".join(f"'{a}'" for a in tool_command(tool, "-")) + " | head -c 10 > /dev/null",
                            shell=True, capture_output=True, timeout=300)
    assert closed.returncode == 0 and closed.stderr.decode().count("error") == 0, closed.stderr


@pytest.mark.parametrize("tool", TOOLS)
def test_paths_that_cannot_be_written(tool: str, tmp_path: Path) -> None:
    for path, reason in [(tmp_path, "is a directory"), (tmp_path / "no_such_folder" / "out", "does not exist")]:
        r = subprocess.run(tool_command(tool, str(path)), capture_output=True, timeout=300)
        lines = r.stderr.decode().strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
        assert str(path) in lines[0] and reason in lines[0], lines[0]
    assert not (tmp_path / "no_such_folder").exists() and leftovers(tmp_path) == []
