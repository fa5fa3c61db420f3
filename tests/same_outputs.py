"""Checks that a change leaves every output byte-identical: builds another revision's `run` for
each instruction-set path (in a git worktree), then runs a battery of commands with that build
and with this tree's build of the same path on a set of weight files, and compares stdout, the
files written (logits, attention pages) and stderr without its timing line.

The weight files must be ones both builds read: by default the .bin files a test run leaves in
tests/tmp (copied first to tests/tmp/same_outputs/models, so that a later export cannot change
them), plus models/kjv.bin. For a change of the file format, export the models with the old
revision's exporter (`--models DIR` of files it wrote) and the new one reads them too.

usage: same_outputs.py REV [--paths scalar,avx2,...] [--models DIR] [--quick]
    REV: a git revision (e.g. HEAD~3 or a commit); its builds go to tests/tmp/same_outputs/REV.
    --paths: the paths to check (default: every path this machine runs, tests/paths.py).
    --quick: fewer commands per file (the ARM paths under qemu always get the quick set).
Prints one line per path and file, and every difference; exits 1 if any.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import paths  # noqa: E402

WORK = REPO / "tests" / "tmp" / "same_outputs"
TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and "
        "void; and darkness was upon the face of the deep. 3.14159 + 42 = ünïcødé 日本語 🙂\n")
TIMING = re.compile(rb"^timing: .*$", re.M)


def build_revision(rev: str, path_names: list[str]) -> Path:
    """REV's run-PATH builds, made in a worktree of REV (kept for the next call)."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True,
                            check=True).stdout.strip()
    tree = WORK / commit[:12]
    if not tree.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True)
    targets = [f"tests/build/run-{p}" for p in path_names]
    subprocess.run(["make", "-C", str(tree), "-j2", *targets], check=True, capture_output=True)
    return tree


def build_here(path_names: list[str]) -> None:
    subprocess.run(["make", "-C", str(REPO), "-j2", *[f"tests/build/run-{p}" for p in path_names]], check=True,
                   capture_output=True)


def model_files(models: Path | None) -> list[Path]:
    if models is not None:
        return sorted(models.glob("*.bin"))
    keep = WORK / "models"
    keep.mkdir(parents=True, exist_ok=True)
    for f in sorted((REPO / "tests" / "tmp").glob("*.bin")):
        if f.read_bytes()[:4] == b"GPTC" and not (keep / f.name).exists():
            shutil.copy(f, keep / f.name)
    if not (keep / "kjv.bin").exists():
        shutil.copy(REPO / "models" / "kjv.bin", keep / "kjv.bin")
    return sorted(keep.glob("*.bin"))


def battery(model: Path, quick: bool) -> list[tuple[str, list[str], str | None]]:
    """(name, arguments, output file or None) of each command for one weight file."""
    prompt = WORK / "prompt.txt"
    prompt.write_bytes(TEXT.encode())
    short = ["-i", "And God said"]
    full = ["-f", str(prompt)]
    runs = [
        ("greedy", [*full, "-n", "40", "-t", "0", "-s", "1"], None),
        ("sampled", [*short, "-n", "40", "-s", "7", "-k", "40", "-p", "0.9", "--repeat-penalty", "1.2"], None),
        ("logits", [*full, "--logits", "{out}"], "logits.bin"),
    ]
    if quick:
        return runs
    return runs + [
        ("no prompt", ["-n", "30", "-s", "3"], None),
        ("samples", [*short, "-n", "40", "-s", "5", "--samples", "3"], None),
        ("window", [*short, "-n", "200", "-t", "0", "--keep", "10", "--ctx", "48", "-s", "1"], None),
        ("stop", [*full, "-n", "60", "-s", "2", "--stop", "e", "--stop", "th"], None),
        ("f32 cache", [*full, "--logits", "{out}", "--cache", "f32", "--block", "7"], "logits.bin"),
        ("q8_0 cache", [*full, "--logits", "{out}", "--cache", "q8_0"], "logits.bin"),
        ("q8_0 samples", [*short, "-n", "30", "-s", "1", "--samples", "2", "--cache", "q8_0"], None),
        ("perplexity", ["--perplexity", str(prompt), "--ctx", "32"], None),
        ("attention", [*short, "--attention", "{out}"], "attention.html"),
        ("tokenize", [*full, "--tokenize", "--ids"], None),
        ("special", ["-i", "<|endoftext|><s>[INST] hi", "--tokenize", "--ids", "--special"], None),
    ]


def run_one(binary: Path, model: Path, args: list[str], out_name: str | None) -> bytes:
    """stdout, stderr without timing, exit status and the file written, as one digestible record."""
    out = WORK / "out" / (out_name or "none")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    argv = [str(binary), str(model), *[a.replace("{out}", str(out)) for a in args]]
    p = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=900)
    written = out.read_bytes() if out_name and out.exists() else b""
    return b"\0".join([p.stdout, TIMING.sub(b"", p.stderr.replace(str(out).encode(), b"OUT")),
                       str(p.returncode).encode(), written])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev")
    ap.add_argument("--paths", default=None)
    ap.add_argument("--models", type=Path, default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    path_names = args.paths.split(",") if args.paths else [p for p, why in paths.paths().items() if why is None]
    old = build_revision(args.rev, path_names)
    build_here(path_names)
    models = model_files(args.models)
    failures = 0
    for path in path_names:
        quick = args.quick or path.startswith("neon")
        for model in models:
            differ = []
            for name, cmd, out_name in battery(model, quick):
                a = run_one(old / "tests" / "build" / f"run-{path}", model, cmd, out_name)
                b = run_one(REPO / "tests" / "build" / f"run-{path}", model, cmd, out_name)
                if a != b:
                    differ.append(name)
                    if failures < 20:
                        print(f"  {path} {model.name} {name}: {len(a)} vs {len(b)} bytes;\n    old: {a[-300:]!r}\n"
                              f"    new: {b[-300:]!r}")
            failures += len(differ)
            n = len(battery(model, quick))
            print(f"{path:18} {model.name:36} {f'{n} commands the same' if not differ else 'DIFFERENT: ' + ', '.join(differ)}",
                  flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
