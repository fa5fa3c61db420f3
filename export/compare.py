"""Compare run.c with the PyTorch reference on the same weights.

usage: compare.py SOURCE MODEL.bin [--prompt TEXT] [--steps N] [--seeds N] [--samples N] [--run PATH]
                  [--tokenizer PATH] [--cache f16|f32|q8_0]

Reads SOURCE (any kind export.py reads) into the reference model and MODEL.bin (its export),
then reports:
  - logits: run.c's key/value-cache path (`run --logits`), one token at a time as generation
    runs and in prefill blocks as prompts run, against the reference's full-sequence forward at
    every prompt position: max |difference| per position and overall, against the tolerance
    1e-4 * (1 + max |logit|);
  - greedy: whether `run -t 0` and the reference's generate() produce the same bytes, or part
    only at a tie within the logit tolerance (generation_agrees() says exactly what that means);
  - sampled: the same at temperature 0.8, top-k 40, top-p 0.9 for each of --seeds seeds;
  - with --samples N: N samples from one `run --samples N` (seeds 0..N-1, decoded together),
    each against the reference's generate() with its seed and against a run of its own.
Both sides use the same key/value cache: binary16 (run's default; the reference rounds its keys
and values the same way), with --cache f32 float32, with --cache q8_0 int8 quants with a scale
per 32 dimensions (the reference quantizes them the same way).
A q8_0 or q4_0 MODEL.bin is compared by its logits, against a bound on the quantization error
(QUANTIZED_BOUND below), and its --samples against runs of their own only.
Exit status 0 when everything agrees, 1 otherwise. Writes nothing but a temporary file.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export import load_source  # noqa: E402
from weight_file import (MATRICES, TOK_DUMMY_PREFIX, TOK_REMOVE_EXTRA_SPACES, TOK_SENTENCEPIECE, TOKEN_NORMAL,  # noqa: E402
                         ExportError, TokenizerData, base_name, table_entries, unpack_header)
from model import CACHES, GPT, Rng, generate, sample  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PROMPT = ("And it came to pass, when men began to multiply on the face of the earth, and "
                  "daughters were born unto them, that the sons of God saw the daughters of men "
                  "that they were fair; and they took them wives of all which they chose.")


def run_c(run: Path, model: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(run), str(model), *args], input=stdin, capture_output=True, timeout=600)


def c_tokens(run: Path, model: Path, prompt: bytes) -> list[int]:
    with tempfile.NamedTemporaryFile() as f:
        f.write(prompt)
        f.flush()
        r = run_c(run, model, "--tokenize", "-f", f.name)
    if r.returncode != 0:
        raise RuntimeError(f"run --tokenize failed: {r.stderr.decode(errors='replace').strip()}")
    return [int(x) for x in r.stdout.split()]


def prompt_text(tok: TokenizerData, ids: list[int]) -> bytes:
    """The text run encodes to ids: their bytes, less the space SentencePiece's dummy prefix put
    before the text (run puts it back), dropped as SentencePiece's decode and tokenizer.c's
    decoder drop it: from the first normal token that prints something, or from each leading one
    when extra spaces are removed."""
    out = tok.decode(ids)
    if not (tok.flags & TOK_SENTENCEPIECE and tok.flags & (TOK_DUMMY_PREFIX | TOK_REMOVE_EXTRA_SPACES)):
        return out
    parts, dropped = [], False
    for k, i in enumerate(ids):
        piece = tok.decode([i])
        if tok.kinds[i] == TOKEN_NORMAL and not dropped and piece.startswith(b" "):
            piece, dropped = piece[1:], not tok.flags & TOK_REMOVE_EXTRA_SPACES
        parts.append(piece)
        if piece:
            return b"".join(parts) + tok.decode(ids[k + 1:])
    return b"".join(parts)


def c_logits(run: Path, model: Path, prompt: bytes, vocab_size: int, block: int = 1,
             extra: tuple[str, ...] = ()) -> np.ndarray:
    """[n_prompt, vocab_size] logits from run.c: block 1 feeds one token at a time through the
    key/value cache, as generation does; larger blocks are the prompt's prefill path. extra: more
    flags (--cache f32)."""
    with tempfile.TemporaryDirectory() as d:
        pf, lf = Path(d) / "prompt", Path(d) / "logits"
        pf.write_bytes(prompt)
        r = run_c(run, model, "-f", str(pf), "--logits", str(lf), "--block", str(block), *extra)
        if r.returncode != 0:
            raise RuntimeError(f"run --logits failed: {r.stderr.decode(errors='replace').strip()}")
        return np.fromfile(lf, dtype="<f4").reshape(-1, vocab_size)


def c_generate(run: Path, model: Path, prompt: bytes, n: int, temperature: float, top_k: int,
               top_p: float, seed: int, threads: int | None = None, extra: tuple[str, ...] = (),
               raw: bool = False) -> bytes:
    """Bytes run.c generates after the prompt (stdout minus the echoed prompt; all of stdout
    with raw); extra: more flags (--keep, --repeat-penalty ...)."""
    with tempfile.NamedTemporaryFile() as f:
        f.write(prompt)
        f.flush()
        args = ["-f", f.name, "-n", str(n), "-t", str(temperature), "-k", str(top_k),
                "-p", str(top_p), "-s", str(seed), *extra]
        if threads:
            args += ["--threads", str(threads)]
        r = run_c(run, model, *args)
    if r.returncode != 0:
        raise RuntimeError(f"run failed: {r.stderr.decode(errors='replace').strip()}")
    if raw:
        return r.stdout
    if not r.stdout.startswith(prompt):
        raise RuntimeError("run's stdout does not start with the prompt")
    return r.stdout[len(prompt):]


def split_samples(stdout: bytes, n: int, seed: int) -> list[bytes]:
    """The samples of `run --samples n -s seed` stdout: each follows its line "--- sample I of
    n, seed S ---" and is followed by a newline that is not part of it (docs/cli.md, "Many samples")."""
    heads = [f"--- sample {i + 1} of {n}, seed {seed + i} ---\n".encode() for i in range(n)]
    if not stdout.startswith(heads[0]) or not stdout.endswith(b"\n"):
        raise RuntimeError("run --samples: stdout does not start with the first sample's line")
    samples, at = [], len(heads[0])
    for i in range(n):
        end = stdout.index(b"\n" + heads[i + 1], at) if i + 1 < n else len(stdout) - 1
        samples.append(stdout[at:end])
        at = end + 1 + (len(heads[i + 1]) if i + 1 < n else 0)
    return samples


def c_generate_samples(run: Path, model: Path, prompt: bytes, n: int, temperature: float, top_k: int,
                       top_p: float, seed: int, samples: int, extra: tuple[str, ...] = ()) -> list[bytes]:
    """The bytes each of `run --samples` samples generates after the prompt: sample i is what
    c_generate() gives with seed + i."""
    out = c_generate(run, model, prompt, n, temperature, top_k, top_p, seed, extra=("--samples", str(samples), *extra),
                     raw=True)
    texts = split_samples(out, samples, seed)
    if not all(t.startswith(prompt) for t in texts):
        raise RuntimeError("a sample does not start with the prompt")
    return [t[len(prompt):] for t in texts]


@dataclass
class LogitReport:
    per_position: np.ndarray  # [T] max |C - PyTorch| at each position
    max_diff: float
    max_logit: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_diff <= self.tolerance


@torch.no_grad()
def cache_allowance(model: GPT, ids: list[int]) -> float:
    """What the logit tolerance grows by with the binary16 or q8_0 key/value cache (0 with
    float32): the largest change that rounding keys and values to that cache's numbers makes in
    the reference's logits on ids. Why: run.c's and PyTorch's float32 keys and values differ in their last bits, so the few
    that lie next to a midpoint between two halves round one way in one program and the other way
    in the other, one binary16 step (2^-11 relative) apart: a change of the kind, and of a part of
    the size, that rounding them all makes (measured on the parity models: at most 7% of it).
    q8_0 likewise: a quant next to a midpoint rounds the other way (one step, 1/127 of its
    group's largest magnitude, where rounding moves every number by up to half a step).
    Whether run.c rounds at all is checked apart (tests/test_parity.py), since a run that did not
    would differ by about this much."""
    cache = model.cache
    if cache == "f32":
        return 0.0
    idx = torch.tensor([ids[-model.config.n_ctx:]])
    rounded = model(idx)[0]
    try:
        exact = model.set_cache("f32")(idx)[0]
    finally:
        model.set_cache(cache)
    return float((rounded - exact).abs().max())


@torch.no_grad()
def compare_logits(model: GPT, ids: list[int], c: np.ndarray) -> LogitReport:
    """run.c's logits c at every position of ids against the reference's, within 1e-4 (1 +
    max |logit|), plus cache_allowance() with a binary16 or q8_0 cache."""
    ref = model(torch.tensor([ids]))[0].numpy()
    diff = np.abs(ref - c).max(axis=1)
    max_logit = float(np.abs(ref).max())
    return LogitReport(diff, float(diff.max()), max_logit, 1e-4 * (1 + max_logit) + cache_allowance(model, ids))


@torch.no_grad()
def generation_agrees(model: GPT, tok: TokenizerData, ids: list[int], c_out: bytes, n: int,
                      temperature: float, top_k: int, top_p: float, seed: int, **options) -> tuple[bool, str]:
    """Whether run.c's generated bytes c_out agree with the reference's generate(): the same
    bytes, or the same up to a step where the choice is a tie within the logit tolerance. At the
    first step where the texts part, run.c's token must be the reference sampler's choice (same
    random draw) once that token's logit is raised by twice the tolerance 1e-4 (1 + max|logit|)
    (plus cache_allowance() of the sequence so far, with a binary16 or q8_0 cache): the most favourable
    change for it that logits within the tolerance allow. Two correct
    programs whose logits differ in the sixth decimal can part there; anything else cannot.
    options: generate()'s keep, repeat_penalty, repeat_last. Returns (agrees, what happened)."""
    trace: list = []
    ref_ids = generate(model, ids, n, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                       eot_id=tok.eot_id, stop_ids=tok.stop_ids, trace=trace, **options)
    if c_out == tok.decode(ref_ids):
        return True, f"identical ({len(c_out)} bytes)"
    step, at = 0, 0  # the reference's tokens before `step` spell c_out[:at]
    while step < len(ref_ids) and c_out.startswith(tok.tokens[ref_ids[step]], at):
        at += len(tok.tokens[ref_ids[step]])
        step += 1
    rest = c_out[at:]
    # what run.c may have chosen at `step`: a token its remaining bytes start with (or that
    # starts with them, when it stopped part-way through a character), or end-of-text
    candidates = [j for j, b in enumerate(tok.tokens) if b and (rest.startswith(b) or (rest and b.startswith(rest)))]
    if not rest:  # it stopped: end-of-text, or another of the file's stop tokens
        candidates += sorted({tok.eot_id, *tok.stop_ids} - {-1})
    if step >= n or not candidates:
        return False, f"DIFFERENT at step {step}: run.c's text does not continue with any token"
    logits = trace[step]  # what the reference sampled from at that step (its window, its penalty)
    tol = 1e-4 * (1 + float(np.abs(logits).max())) + cache_allowance(model, ids + list(ref_ids[:step]))
    for j in candidates:
        rng = Rng(seed)
        for _ in range(step if temperature > 0 else 0):
            rng.uniform()  # one draw per sampled token before this step
        favoured = logits.copy()
        favoured[j] += 2 * tol
        if sample(favoured, rng, temperature, top_k, top_p) == j:
            return True, (f"identical for {step} tokens, then a tie within the tolerance {tol:.2g}: "
                          f"run.c chose {tok.tokens[j]!r}, the reference {tok.tokens[ref_ids[step]]!r}")
    return False, f"DIFFERENT at step {step}: run.c's choice is not a tie within the tolerance {tol:.2g}"


def compare_samples(args, prompt: bytes, reference: tuple | None) -> bool:
    """--samples N: one `run --samples N` at temperature 0.8, top-k 40, top-p 0.9, seeds 0..N-1;
    each sample against a run of its own and, with reference = (model, tok, ids), against the
    reference's generate(). Prints a line per sample; returns whether all agree."""
    t, k, p, ok = 0.8, 40, 0.9, True
    outs = c_generate_samples(args.run, args.model, prompt, args.steps, t, k, p, 0, args.samples, extra=args.flags)
    for seed, c_out in enumerate(outs):
        alone = c_out == c_generate(args.run, args.model, prompt, args.steps, t, k, p, seed, extra=args.flags)
        agrees, what = generation_agrees(*reference, c_out, args.steps, t, k, p, seed) if reference else (True, "")
        ok &= agrees and alone
        print(f"sample {seed + 1} of {args.samples} (seed {seed}): {what + '; ' if what else ''}"
              f"{'the same bytes as' if alone else 'DIFFERENT from'} a run of its own")
    return ok


# A quantized MODEL.bin computes with other weights than SOURCE (and quantizes activations), so
# its logits differ from the float32 reference by the quantization error: on the shipped model
# about 1% of 1 + max|logit| for q8_0 and 11% for q4_0. The bounds are several times that: only
# a broken file or kernel goes past them. The exact check of quantized kernels is the test
# suite's (tests/test_paths.py: every product against its own input, on every path).
QUANTIZED_BOUND = {1: ("q8_0", 0.10), 2: ("q4_0", 0.50)}


def coarsest_type(path: Path) -> int:
    """The weight type of MODEL.bin's matrices with the largest quantization error (f32 < q8_0 <
    q4_0): a file may mix them."""
    raw = Path(path).read_bytes()
    h = unpack_header(raw)
    types = {wtype for name, wtype, _, _ in table_entries(raw, h) if base_name(name) in MATRICES}
    return max(types, key=lambda t: QUANTIZED_BOUND.get(t, ("", 0.0))[1], default=0)


def compare_quantized(args, model: GPT, ids: list[int], prompt: bytes, weight_type: int) -> int:
    name, bound = QUANTIZED_BOUND[weight_type]
    ok = True
    for block, how in ((1, "one token at a time"), (128, "prefill blocks of 128")):
        rep = compare_logits(model, ids, c_logits(args.run, args.model, prompt, model.config.vocab_size, block,
                                                  args.flags))
        share = rep.max_diff / (1 + rep.max_logit)
        within = share <= bound
        print(f"logits, {how}: {len(ids)} positions, {name} weights against float32 SOURCE: max |diff| "
              f"{rep.max_diff:.3g} = {share:.1%} of 1 + max |logit| (quantization error; at most {bound:.0%}) "
              f"{'ok' if within else 'TOO LARGE'}")
        ok &= within
    print(f"generations: not compared ({name} weights are not SOURCE's; export with --dtype f32 to compare them)")
    if args.samples:  # what does hold for quantized weights: each sample is a run of its own
        ok &= compare_samples(args, prompt, None)
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("model", type=Path)
    ap.add_argument("--prompt", default=DEFAULT_PROMPT)
    ap.add_argument("--steps", type=int, default=64, help="tokens generated per comparison")
    ap.add_argument("--seeds", type=int, default=3, help="seeds for the sampled comparison")
    ap.add_argument("--samples", type=int, default=0,
                    help="also compare N samples decoded together by one run (run --samples N)")
    ap.add_argument("--run", type=Path, default=REPO / "run", help="the run executable")
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="the tokenizer, for a SOURCE that carries none (a llama2.c checkpoint): as export.py's")
    ap.add_argument("--cache", choices=CACHES, default="f16",
                    help="the key/value cache of both sides (run --cache; default f16, run's)")
    args = ap.parse_args()
    args.flags = ("--cache", args.cache)
    torch.set_num_threads(2)
    try:
        model, tok = load_source(args.source, tokenizer=args.tokenizer)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    model.set_cache(args.cache)
    prompt = args.prompt.encode("utf-8")
    ids = c_tokens(args.run, args.model, prompt)
    if len(ids) > model.config.n_ctx:  # the prompt cut to the context, as text
        ids = ids[:model.config.n_ctx]
        prompt = prompt_text(tok, ids)
        if c_tokens(args.run, args.model, prompt) != ids:
            print(f"error: the prompt's first {len(ids)} tokens (the context) do not encode back to themselves as "
                  "text: give a shorter --prompt", file=sys.stderr)
            return 1
    weight_type = coarsest_type(args.model)
    if weight_type in QUANTIZED_BOUND:
        return compare_quantized(args, model, ids, prompt, weight_type)
    ok = True
    for block, name in ((1, "one token at a time"), (128, "prefill blocks of 128")):
        rep = compare_logits(model, ids, c_logits(args.run, args.model, prompt, model.config.vocab_size, block,
                                                  args.flags))
        print(f"logits, {name}: {len(ids)} positions, max |diff| {rep.max_diff:.3g} (tolerance "
              f"{rep.tolerance:.3g}, max |logit| {rep.max_logit:.3g}) {'ok' if rep.ok else 'MISMATCH'}")
        for pos, d in enumerate(rep.per_position):
            print(f"  position {pos:4d}: max |diff| {d:.3g}")
        ok &= rep.ok
    runs = [("greedy", 0.0, 0, 1.0, 0)] + [(f"sampled seed {s}", 0.8, 40, 0.9, s) for s in range(args.seeds)]
    for name, t, k, p, seed in runs:
        c_out = c_generate(args.run, args.model, prompt, args.steps, t, k, p, seed, extra=args.flags)
        agrees, what = generation_agrees(model, tok, ids, c_out, args.steps, t, k, p, seed)
        ok &= agrees
        print(f"{name}: {what}")
    if args.samples:
        ok &= compare_samples(args, prompt, (model, tok, ids))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
