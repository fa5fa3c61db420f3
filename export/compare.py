"""Compare run.c with the PyTorch reference on the same weights (SPEC section 3, last point).

usage: compare.py SOURCE MODEL.bin [--prompt TEXT] [--steps N] [--seeds N] [--run PATH]

Reads SOURCE (any kind export.py reads) into the reference model and MODEL.bin (its export),
then reports:
  - logits: run.c's key/value-cache path (`run --logits`), one token at a time as generation
    runs and in prefill blocks as prompts run, against the reference's full-sequence forward at
    every prompt position: max |difference| per position and overall, against the tolerance
    1e-4 * (1 + max |logit|);
  - greedy: whether `run -t 0` and the reference's generate() produce the same bytes;
  - sampled: the same at temperature 0.8, top-k 40, top-p 0.9 for each of --seeds seeds.
Exit status 0 when everything agrees, 1 otherwise. Writes nothing but a temporary file.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export import ExportError, TokenizerData, load_source  # noqa: E402
from model import GPT, generate  # noqa: E402

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


def c_logits(run: Path, model: Path, prompt: bytes, vocab_size: int, block: int = 1) -> np.ndarray:
    """[n_prompt, vocab_size] logits from run.c: block 1 feeds one token at a time through the
    key/value cache, as generation does; larger blocks are the prompt's prefill path."""
    with tempfile.TemporaryDirectory() as d:
        pf, lf = Path(d) / "prompt", Path(d) / "logits"
        pf.write_bytes(prompt)
        r = run_c(run, model, "-f", str(pf), "--logits", str(lf), "--block", str(block))
        if r.returncode != 0:
            raise RuntimeError(f"run --logits failed: {r.stderr.decode(errors='replace').strip()}")
        return np.fromfile(lf, dtype="<f4").reshape(-1, vocab_size)


def c_generate(run: Path, model: Path, prompt: bytes, n: int, temperature: float, top_k: int,
               top_p: float, seed: int, threads: int | None = None) -> bytes:
    """Bytes run.c generates after the prompt (stdout minus the echoed prompt)."""
    with tempfile.NamedTemporaryFile() as f:
        f.write(prompt)
        f.flush()
        args = ["-f", f.name, "-n", str(n), "-t", str(temperature), "-k", str(top_k),
                "-p", str(top_p), "-s", str(seed)]
        if threads:
            args += ["--threads", str(threads)]
        r = run_c(run, model, *args)
    if r.returncode != 0:
        raise RuntimeError(f"run failed: {r.stderr.decode(errors='replace').strip()}")
    if not r.stdout.startswith(prompt):
        raise RuntimeError("run's stdout does not start with the prompt")
    return r.stdout[len(prompt):]


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
def compare_logits(model: GPT, ids: list[int], c: np.ndarray) -> LogitReport:
    ref = model(torch.tensor([ids]))[0].numpy()
    diff = np.abs(ref - c).max(axis=1)
    max_logit = float(np.abs(ref).max())
    return LogitReport(diff, float(diff.max()), max_logit, 1e-4 * (1 + max_logit))


def ref_generate(model: GPT, tok: TokenizerData, ids: list[int], n: int, temperature: float,
                 top_k: int, top_p: float, seed: int) -> bytes:
    out = generate(model, ids, n, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                   eot_id=tok.eot_id)
    return tok.decode(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("model", type=Path)
    ap.add_argument("--prompt", default=DEFAULT_PROMPT)
    ap.add_argument("--steps", type=int, default=64, help="tokens generated per comparison")
    ap.add_argument("--seeds", type=int, default=3, help="seeds for the sampled comparison")
    ap.add_argument("--run", type=Path, default=REPO / "run", help="the run executable")
    args = ap.parse_args()
    torch.set_num_threads(2)
    try:
        model, tok = load_source(args.source)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    prompt = args.prompt.encode("utf-8")
    ids = c_tokens(args.run, args.model, prompt)[: model.config.n_ctx]
    prompt = tok.decode(ids)
    ok = True
    for block, name in ((1, "one token at a time"), (128, "prefill blocks of 128")):
        rep = compare_logits(model, ids, c_logits(args.run, args.model, prompt, model.config.vocab_size, block))
        print(f"logits, {name}: {len(ids)} positions, max |diff| {rep.max_diff:.3g} (tolerance "
              f"{rep.tolerance:.3g}, max |logit| {rep.max_logit:.3g}) {'ok' if rep.ok else 'MISMATCH'}")
        for pos, d in enumerate(rep.per_position):
            print(f"  position {pos:4d}: max |diff| {d:.3g}")
        ok &= rep.ok
    runs = [("greedy", 0.0, 0, 1.0, 0)] + [(f"sampled seed {s}", 0.8, 40, 0.9, s) for s in range(args.seeds)]
    for name, t, k, p, seed in runs:
        c_out = c_generate(args.run, args.model, prompt, args.steps, t, k, p, seed)
        r_out = ref_generate(model, tok, ids, args.steps, t, k, p, seed)
        same = c_out == r_out
        ok &= same
        print(f"{name}: {'identical' if same else 'DIFFERENT'} ({len(r_out)} bytes)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
