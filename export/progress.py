"""Progress of a long export on stderr: one line, rewritten in place, saying which tensor of how
many is being converted, how many of the source's bytes are done and at what rate. It appears only
on a terminal (a pipe or a log gets nothing), only once the export has run for a second (a small
model's export says nothing until its summary), and never with --quiet.

usage: imported by export.py, weight_file.py and gguf_import.py
"""
from __future__ import annotations

import os
import sys
import time

# Seconds an export runs before its progress shows (the environment's EXPORT_PROGRESS_AFTER, for
# tests that show it on a small model).
DELAY = float(os.environ.get("EXPORT_PROGRESS_AFTER", "1"))


class Progress:
    """Tensors converted so far, out of a known total."""

    def __init__(self, tensors: int, total_bytes: int, quiet: bool = False, delay: float = DELAY):
        self.tensors, self.total = tensors, max(total_bytes, 1)
        self.shown = not quiet and sys.stderr.isatty()
        self.start, self.delay, self.last, self.done_bytes, self.wrote = time.monotonic(), delay, 0.0, 0, False

    def step(self, index: int, name: str, nbytes: int) -> None:
        """Tensor `index` (from 0), of nbytes source bytes, is done."""
        self.done_bytes += nbytes
        now = time.monotonic()
        if not self.shown or now - self.start < self.delay or (now - self.last < 0.2 and index + 1 < self.tensors):
            return
        self.last = now
        rate = self.done_bytes / 1e6 / (now - self.start)
        line = (f"tensor {index + 1} of {self.tensors} ({name}): {self.done_bytes / 1e6:.0f} of {self.total / 1e6:.0f} MB, "
                f"{rate:.0f} MB/s")
        sys.stderr.write("\r\033[K" + line[:200])
        sys.stderr.flush()
        self.wrote = True

    def finish(self) -> None:
        """The line goes, so that what follows (the summary) starts clean."""
        if self.wrote:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
