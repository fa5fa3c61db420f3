"""Prepare the King James Bible corpus from Debian's bible-kjv package.

usage: kjv.py OUT_DIR

Runs `bible -f gen1:1-rev22:21` (all 31,102 verses, each after a reference such as `Ge1:1 `),
strips the references and writes OUT_DIR/train.txt and OUT_DIR/heldout.txt: one verse per line,
books separated by a blank line (train.py starts each book with <|endoftext|>). The held-out
books (HELDOUT, about 5% of the text) never appear in train.txt.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from output_files import ExportError, write_text  # noqa: E402

# Whole books held out for evaluation, from both testaments (bible-kjv's abbreviations).
HELDOUT = ["Ruth", "Est", "Eccl", "SSol", "Lam", "Jonah", "Mark", "Jas"]
REFERENCE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def verses() -> list[tuple[str, str]]:
    try:
        out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], stdin=subprocess.DEVNULL,
                             capture_output=True, check=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"error: cannot run `bible` ({e}); install it with: apt-get install -y bible-kjv")
    result = []
    for line in out.splitlines():
        m = REFERENCE.match(line)
        if not m:
            sys.exit(f"error: unexpected line from bible: {line[:60]!r}")
        result.append((m.group(1), m.group(4)))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    args = ap.parse_args()
    books: dict[str, list[str]] = {}
    for book, text in verses():
        books.setdefault(book, []).append(text)
    if len(books) != 66:
        sys.exit(f"error: expected 66 books, found {len(books)}")
    train = "\n\n".join("\n".join(v) for b, v in books.items() if b not in HELDOUT) + "\n"
    held = "\n\n".join("\n".join(v) for b, v in books.items() if b in HELDOUT) + "\n"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        write_text(args.out_dir / "train.txt", train)
        write_text(args.out_dir / "heldout.txt", held)
    except ExportError as e:
        sys.exit(f"error: {e}")
    share = len(held) / (len(held) + len(train))
    print(f"train.txt {len(train)} bytes, heldout.txt {len(held)} bytes ({share:.1%} held out: "
          f"{', '.join(HELDOUT)})", file=sys.stderr)


if __name__ == "__main__":
    main()
