"""How every tool under export/ writes a file (weight files, tokenizer files, checkpoints, the
trainer's loss picture, the corpus): a regular file appears under its name only when complete,
written beside its target (symlinks followed, so that the file the link names is replaced and
the link stays) and linked or renamed over it; a device, pipe or socket is written directly; "-"
is stdout. Every write and the close are checked: a failure raises ExportError, one line naming
the path and the reason, and leaves no partial regular file.

The C side is output.h's OutFile, with the same rules.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class ExportError(Exception):
    """A problem with a SOURCE, an output or a weight file, reported as one line."""


def refuse_input_as_output(out: str | Path, inputs: list[str | Path]) -> None:
    """An output must never be one of the files it is made from: refused when `out` is an input
    file (by its name, through a symlink, or as another hard link of the same file) or lies
    inside an input folder (a new file there too: the folder is the source as a whole). Checked
    before anything is read, so nothing is spent on an export that cannot be written."""
    name = str(out)
    if name == "-":
        return
    target = Path(os.path.realpath(name))
    try:
        target_id = (target.stat().st_dev, target.stat().st_ino) if target.is_file() else None
    except OSError:
        target_id = None
    for given in inputs:
        source = Path(os.path.realpath(given))
        if source.is_dir():
            if source == target or source in target.parents:
                raise ExportError(f"refusing to write '{name}': it is inside the source folder '{given}', "
                                  "which the export reads; write it elsewhere")
            if target_id is not None:  # a hard link elsewhere to one of the folder's files
                for path in _files_under(source):
                    if _file_id(path) == target_id:
                        raise ExportError(f"refusing to write '{name}': it is the same file as '{path}' in the "
                                          f"source folder '{given}' (a hard link); write it elsewhere")
        elif source.exists():
            if source == target:
                how = "a symlink to the source" if os.path.islink(name) else "the source"
                raise ExportError(f"refusing to write '{name}': it is {how} '{given}' itself; write it elsewhere")
            if target_id is not None and _file_id(source) == target_id:
                raise ExportError(f"refusing to write '{name}': it is the same file as the source '{given}' "
                                  "(a hard link); write it elsewhere")


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _files_under(folder: Path, limit: int = 10000) -> list[Path]:
    """The regular files in folder and its subfolders (at most `limit`: a model folder holds a few)."""
    found: list[Path] = []
    for root, _, files in os.walk(folder):
        found += [Path(root) / f for f in files]
        if len(found) >= limit:
            break
    return found


def write_output(out: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Call write(f) with a file object that writes `out` as the rules above say. f is written
    front to back (it may not be seekable)."""
    name = str(out)
    if name == "-":
        try:
            write(sys.stdout.buffer)
            sys.stdout.buffer.flush()
        except BrokenPipeError:  # the reader went away: a quiet success, as run's
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        return
    target = Path(os.path.realpath(name))  # symlinks followed, a dangling one to where it points
    if target.is_dir():
        raise ExportError(f"cannot write '{name}': it is a directory")
    if target.exists() and not target.is_file():  # a device, pipe or socket: written as it is
        try:
            with open(target, "wb") as f:
                write(f)
        except OSError as e:
            raise ExportError(f"cannot write '{name}': {e.strerror or e}") from e
        return
    if not target.parent.is_dir():
        raise ExportError(f"cannot write '{name}': its folder {target.parent} does not exist")
    try:
        write_replacing(target, write)
    except OSError as e:
        raise ExportError(f"cannot write '{name}': {e.strerror or e}") from e


def write_replacing(target: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write an unnamed file in target's folder (O_TMPFILE) and link it into place only when
    complete: a crash or kill at any point leaves no file. Falls back to a named temporary file,
    removed on failure, where the filesystem lacks O_TMPFILE."""
    folder = target.parent
    fd, tmp_name = None, None
    try:
        try:
            fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o644)
        except (OSError, AttributeError):
            tmp_name = folder / f".{target.name}.{os.getpid()}.tmp"
            fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb", closefd=False) as f:  # no fsync: the link makes it whole or absent
            write(f)
            f.flush()
        if tmp_name is None:
            # linkat(..., AT_SYMLINK_FOLLOW) through /proc gives the unnamed file a name;
            # passing dst_dir_fd makes Python call linkat rather than link.
            staged = f".{target.name}.{os.getpid()}.link"
            dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.link(f"/proc/self/fd/{fd}", staged, dst_dir_fd=dir_fd, follow_symlinks=True)
            finally:
                os.close(dir_fd)
            os.replace(folder / staged, target)
        else:
            os.replace(tmp_name, target)
            tmp_name = None
    finally:
        if fd is not None:
            os.close(fd)
        if tmp_name is not None and os.path.exists(tmp_name):
            os.unlink(tmp_name)


def write_bytes(out: str | Path, data: bytes) -> None:
    write_output(out, lambda f: f.write(data))


def write_text(out: str | Path, text: str) -> None:
    write_bytes(out, text.encode("utf-8"))
