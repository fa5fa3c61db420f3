"""Two builds of run on the same models, in alternating runs: whether a change moved speed.

usage: ab.py OLD_RUN NEW_RUN MODEL.bin [MODEL.bin ...] [--rounds N] [--threads 1,2] [--as-version V]
    Each round runs OLD then NEW (NEW then OLD every other round, so that neither always goes
    first) on a 128-token prompt with 128 greedy tokens after it (--ignore-eos), and reads the
    timing line. Prints per model and thread count the medians of prefill and decode tokens per
    second with half their spread, and the median of each round's NEW / OLD ratio: the two
    figures of a ratio are seconds apart, so a machine whose speed drifts between minutes moves
    them together. Both builds must read the models (for a format change, files of the old
    version: run reads every earlier one); --as-version V first rewrites each model as a file of
    format version V (export/weight_file.py's write_model, its matrices in the type they have),
    into tests/tmp.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

TIMING = re.compile(r"prompt (\d+) tokens ([\d.]+) tok/s, generated (\d+) tokens ([\d.]+) tok/s")


def as_version(model: Path, version: int, work: Path) -> Path:
    """model rewritten as format version `version`, its matrices in the one type they have."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "export"))
    from weight_file import MATRICES, WEIGHT_TYPES, base_name, read_header_and_table, read_model, write_model
    names = {v: k for k, v in WEIGHT_TYPES.items()}
    types = {names[t] for name, t in read_header_and_table(model) if base_name(name) in MATRICES}
    if len(types) != 1:
        sys.exit(f"{model}: matrices of types {sorted(types)}: --as-version rewrites a file of one type")
    out = work / f"ab_v{version}_{model.name}"
    gpt, tok = read_model(model)
    write_model(out, gpt, tok, types.pop(), version=version)
    return out


def prompt_for(binary: Path, model: Path, n: int, work: Path) -> Path:
    """A prompt of exactly n tokens for this model: a text long enough, cut by its ids."""
    text = ("And it came to pass, when the king heard the words of the law, that he rent his clothes. " * 40).encode()
    ids = subprocess.run([str(binary), str(model), "--tokenize", "--ids"], input=text, capture_output=True,
                         check=True).stdout.split()
    out = work / f"{model.stem}_prompt.ids"
    # the prompt as text: the decode of the first n ids is not available here, so cut the text by
    # bytes until it tokenizes to n ids or just more, then let run crop nothing (n < context)
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        got = len(subprocess.run([str(binary), str(model), "--tokenize", "--ids"], input=text[:mid],
                                 capture_output=True, check=True).stdout.split())
        lo, hi = (mid + 1, hi) if got < n else (lo, mid)
    out.write_bytes(text[:lo])
    assert len(ids) >= n
    return out


def one_run(binary: Path, model: Path, prompt: Path, threads: int) -> tuple[float, float]:
    r = subprocess.run([str(binary), str(model), "-f", str(prompt), "-n", "128", "-t", "0", "-s", "1", "--ignore-eos",
                        "--threads", str(threads)], capture_output=True, text=True)
    m = TIMING.search(r.stderr)
    if r.returncode or not m:
        sys.exit(f"error: {binary} on {model}: {r.stderr.strip()[-300:]}")
    return float(m.group(2)), float(m.group(4))


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("models", type=Path, nargs="+")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--as-version", type=int, default=None, help="rewrite each model as this format version first")
    args = ap.parse_args()
    args.old, args.new = args.old.resolve(), args.new.resolve()  # "run" is a path here, not a command
    work = Path(__file__).resolve().parent.parent / "tmp"
    work.mkdir(exist_ok=True)
    print("| model | threads | prefill old | prefill new | new / old | decode old | decode new | new / old |")
    print("|---|---|---|---|---|---|---|---|")
    if args.as_version is not None:
        args.models = [as_version(m, args.as_version, work) for m in args.models]
    for model in args.models:
        prompt = prompt_for(args.new, model, 128, work)
        for threads in (int(t) for t in args.threads.split(",")):
            got = {"old": [], "new": []}
            for r in range(args.rounds):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                for which in order:
                    got[which].append(one_run(getattr(args, which), model, prompt, threads))
            cells = []
            for k in (0, 1):  # prefill, decode
                old = [x[k] for x in got["old"]]
                new = [x[k] for x in got["new"]]
                ratio = statistics.median(n / o for n, o in zip(new, old))
                cells += [f"{statistics.median(old):.1f} ± {spread(old):.1f}",
                          f"{statistics.median(new):.1f} ± {spread(new):.1f}", f"{ratio:.3f}"]
            print(f"| {model.name} | {threads} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
