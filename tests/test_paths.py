"""Every instruction-set path of the kernels (tests/paths.py: the x86 builds this CPU runs, the
AVX-512 and AVX-VNNI ones also through SIMDe, and NEON without and with dotprod under qemu)
against references that do not depend on this CPU:

- every matrix product of a forward pass, one token at a time (decode's kernels) and in prefill
  blocks (the tiles, AMX, VNNI and maddubs kernels), float32, q8_0 and q4_0, recomputed in float64
  from the very input the C code multiplied (tests/trace.c). For q8_0 and q4_0 the reference quantizes that
  input exactly as run.c does, in float32, so both sides multiply the same integers; the only
  freedom left is float32 summation order, bounded by (number of additions + 8) x 2^-24 x (sum
  of the absolute terms). So the check holds on any CPU, and a wrong scale, group, sign or
  quant in any kernel breaks it by orders of magnitude.
- logits bit-identical on every path: every kernel performs the arithmetic kernels/simd.h defines, in
  the same order (tests/test_kernels.c checks each against it); quantized, one token at a time
  and in prefill blocks give the same bits too;
- float32 logits at every position against PyTorch (tolerance 1e-4 x (1 + max|logit|), orders of
  magnitude above float32 rounding differences between BLAS builds);
- q8_0 and q4_0 logits of the trained shipped model within 5% and 25% of its float32 logits (the
  quantization error dominates anything rounding can change);
- greedy tokens identical across paths and thread counts, random models and the shipped one
  (which follows from the bit-identical logits, near-ties included)."""
from __future__ import annotations

import platform
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from common import PATHS, REPO, TEXT, TMP, GPTConfig, export, random_model, small_gpt2_tokenizer
from model import BIAS_QKV
from compare import c_generate, c_logits, c_tokens, compare_logits
import block_formats
from weight_file import FileTensor, read_model, read_tensors, write_model
from paths import ARM_PATHS, SIMDE_PATHS, emulated

U = 2.0 ** -24  # float32's unit roundoff
MATRICES = ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj", "lm_head", "mlp.gate"]  # tests/trace.c's numbers
_models: dict = {}


def binary(program: str, path: str) -> Path:
    b = REPO / "tests" / "build" / f"{program}-{path}"
    assert b.exists(), f"{b} is missing: `make test` builds it"
    return b


def test_paths_checked() -> None:
    print(f"instruction-set paths checked on this machine: {PATHS}")
    assert {"scalar", "native", *ARM_PATHS} <= set(PATHS)
    if platform.machine() != "aarch64":  # the AVX-512 and AVX-VNNI kernels run on every x86 CPU here
        assert set(SIMDE_PATHS) <= set(PATHS), "the SIMDe builds need a CPU with AVX2, FMA and F16C"


def models() -> dict:
    if not _models:
        # GPT-2's byte-level BPE cut to 2001 tokens (tests/common.py): an output head of 125 whole
        # panels of 16 rows and one of 1, padded rows past it
        tok = small_gpt2_tokenizer(1745)
        V = len(tok.tokens)
        cfg = GPTConfig(n_layer=2, n_head=4, n_embd=64, n_hidden=256, n_ctx=256, vocab_size=V,
                        vocab_padded=2048, gelu="tanh", bias=True, tied_head=False)
        model = random_model(cfg, seed=51)
        f32 = export(model, tok, "paths_f32")
        q8 = TMP / "paths_q8_0.bin"
        write_model(q8, model, tok, "q8_0")
        # q8_0 widths of 3 and 9 groups of 32 (an odd count: AMX takes groups in pairs), no
        # bias, 48 rows per head block: part blocks of 16 rows nowhere but the output head
        odd_cfg = GPTConfig(n_layer=2, n_head=4, n_embd=96, n_hidden=288, n_ctx=256, vocab_size=V,
                            vocab_padded=V, gelu="erf", bias=False, tied_head=True)
        odd = TMP / "paths_odd_q8_0.bin"
        odd_model = random_model(odd_cfg, seed=52)
        write_model(odd, odd_model, tok, "q8_0")
        q4, odd_q4 = TMP / "paths_q4_0.bin", TMP / "paths_odd_q4_0.bin"
        write_model(q4, model, tok, "q4_0")
        write_model(odd_q4, odd_model, tok, "q4_0")
        # the Llama family's block: RMSNorm, rotary positions, SwiGLU, grouped-query attention
        # (4 query heads, 2 key/value heads of 24), query/key/value biases as Qwen2 has, widths of
        # 3 and 5 groups of 32
        llama_cfg = GPTConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=96, n_hidden=160, n_ctx=256, vocab_size=V,
                              vocab_padded=V, norm="rms", pos="rotary", ffn="swiglu", bias=BIAS_QKV, tied_head=False)
        llama_model = random_model(llama_cfg, seed=53)
        llama = export(llama_model, tok, "paths_llama")
        llama_q8, llama_q4 = TMP / "paths_llama_q8_0.bin", TMP / "paths_llama_q4_0.bin"
        write_model(llama_q8, llama_model, tok, "q8_0")
        write_model(llama_q4, llama_model, tok, "q4_0")
        # a file of mixed weight types (format version 4): q4_0 matrices, layer 0's and the
        # output head q8_0, one float32 matrix
        mixed = TMP / "paths_mixed.bin"
        write_model(mixed, llama_model, tok, "q4_0",
                    tensor_types={"h.0.*": "q8_0", "lm_head.weight": "q8_0", "h.1.attn.c_proj.weight": "f32"})
        # GGUF's block formats: a Llama-shaped model whose rows are multiples of 256 as llama.cpp's
        # Q4_K_M mixes it (q4_k; q6_k for the output head and, on layers 2 and 3 of 4, the
        # value and down projections: the query, key and value apart, model.h's qkv_apart, so
        # that the fused projection is a matrix of parts); one of width 96 (as SmolLM2's 576, not a
        # multiple of 256) where the mix falls back to q5_0 and q8_0, but its down projection
        # (rows of 256) is q4_k; and q5_1, q5_k, f16, bf16 in one file
        k_cfg = GPTConfig(n_layer=4, n_head=4, n_kv_head=2, n_embd=256, n_hidden=512, n_ctx=256, vocab_size=V,
                          vocab_padded=V, norm="rms", pos="rotary", ffn="swiglu", bias=0, tied_head=False)
        k_model = random_model(k_cfg, seed=54, std=0.1)
        q4_k_m = TMP / "paths_q4_k_m.bin"
        write_model(q4_k_m, k_model, tok, "q4_k_m")
        narrow_cfg = GPTConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=96, n_hidden=256, n_ctx=256, vocab_size=V,
                               vocab_padded=V, norm="rms", pos="rotary", ffn="swiglu", bias=0, tied_head=True)
        narrow_q4_k_m = TMP / "paths_narrow_q4_k_m.bin"
        write_model(narrow_q4_k_m, random_model(narrow_cfg, seed=55), tok, "q4_k_m")
        more_blocks = TMP / "paths_q5_k_m_halves.bin"
        write_model(more_blocks, k_model, tok, "q5_k_m",
                    tensor_types={"h.0.attn.c_attn.weight": "q5_1", "h.1.mlp.c_fc.weight": "f16",
                                  "h.1.mlp.gate.weight": "bf16", "lm_head.weight": "q5_0"})
        prompt = TMP / "paths_prompt.txt"  # 100 tokens: tiles of 16 and 32 and a ragged tail
        prompt.write_bytes(tok.decode(c_tokens(binary("run", "native"), f32, TEXT.encode())[:100]))
        _models.update(model=model, tok=tok, f32=f32, q8=q8, odd=odd, q4=q4, odd_q4=odd_q4, prompt=prompt,
                       llama_model=llama_model, llama=llama, llama_q8=llama_q8, llama_q4=llama_q4, mixed=mixed,
                       q4_k_m=q4_k_m, narrow_q4_k_m=narrow_q4_k_m, more_blocks=more_blocks)
    return _models


@pytest.mark.parametrize("design", ["gpt2", "llama"])
@pytest.mark.parametrize("path", PATHS)
def test_path_matches_pytorch(path: str, design: str) -> None:
    m = models()
    run = binary("run", path)
    prompt = m["prompt"].read_bytes()
    model, file = (m["model"], m["f32"]) if design == "gpt2" else (m["llama_model"], m["llama"])
    for block in (1, 128):
        rep = compare_logits(model, c_tokens(run, file, prompt), c_logits(run, file, prompt, model.config.vocab_size, block))
        assert rep.ok, f"{path} {design} f32 block {block}: {rep.max_diff} > {rep.tolerance}"


# ---- every product against its reference ---------------------------------------------------

def read_trace(path: Path):
    """(layer, matrix index, x (T, cols), out (T, rows)) for each product tests/trace.c wrote."""
    raw = path.read_bytes()
    at = 0
    while at < len(raw):
        layer, which, T, rows, cols = np.frombuffer(raw, "<i4", 5, at)
        at += 20
        x = np.frombuffer(raw, "<f4", T * cols, at).reshape(T, cols)
        at += 4 * T * cols
        out = np.frombuffer(raw, "<f4", T * rows, at).reshape(T, rows)
        at += 4 * T * rows
        yield int(layer), int(which), x, out


def quantize_q8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """run.c's quantize_q8 in float32, step for step: per 32 values scale = max|x| / 127,
    quant = rint(x * (127 / max|x|)), 0 for an all-zero group. -> quants (T, n), scales (T, n/32)."""
    g = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(g).max(axis=2)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    quants = np.rint(g * inv[..., None]).astype(np.float64).reshape(x.shape)
    return quants, (amax / np.float32(127)).astype(np.float32)


def product_reference(x: np.ndarray, w: FileTensor, bias: np.ndarray | None):
    """x (T, n) @ W^T + bias in float64 -> (result, sum of |terms|, additions per output)."""
    if w.row_parts is not None:  # a matrix of parts (qkv_apart): each part's product, its rows in order
        results, r0 = [], 0
        for part in w.row_parts:
            rows = part.shape[0] if part.fmt is not None else part.values.shape[0]
            results.append((*product_reference(x, part, None if bias is None else bias[r0:r0 + rows]), rows))
            r0 += rows
        return (np.concatenate([r[0] for r in results], axis=1), np.concatenate([r[1] for r in results], axis=1),
                np.concatenate([np.full(rows, r[2]) for r in results for rows in [r[3]]]))
    rows = w.shape[0] if w.fmt is not None else w.values.shape[0]
    b = np.zeros(rows) if bias is None else bias.astype(np.float64)
    if w.fmt in ("f16", "bf16"):
        w = FileTensor(w.dequantized())
    if w.fmt is not None:  # a block format: each value's two parts (block_formats.parts), exactly
        T, n = x.shape
        if not hasattr(w, "parts_of_values"):  # decoded once per matrix (check_trace keeps w)
            w.parts_of_values = tuple(p.reshape(rows, n) for p in block_formats.parts(w.raw, w.fmt))
        scale_part, min_part = w.parts_of_values
        xq, xs = quantize_q8(x)
        xv = xq * np.repeat(xs.astype(np.float64), 32, axis=1)
        # the scales combine per group and per super-block: two fma chains of n / 32 a row
        return xv @ (scale_part - min_part).T + b, np.abs(xv) @ (np.abs(scale_part) + np.abs(min_part)).T + np.abs(b), \
            2 * (n // 32) + 2 * (n // 256)
    if w.scales is None:
        x64, w64 = x.astype(np.float64), w.values.astype(np.float64)
        return x64 @ w64.T + b, np.abs(x64) @ np.abs(w64).T + np.abs(b), x.shape[1]
    xq, xs = quantize_q8(x)
    T, n = x.shape
    wq = w.values.astype(np.float64).reshape(-1, n // 32, 32)
    scale = xs.astype(np.float64)[:, None, :] * w.scales.astype(np.float64)[None, :, :]  # (T, rows, nb)
    dots = np.einsum("tgi,rgi->trg", xq.reshape(T, n // 32, 32), wq)
    size = np.einsum("tgi,rgi->trg", np.abs(xq).reshape(T, n // 32, 32), np.abs(wq))
    return (dots * scale).sum(axis=2) + b, (size * np.abs(scale)).sum(axis=2) + np.abs(b), n // 32  # q4_0 scales can be < 0


def check_trace(trace: Path, model_file: Path) -> float:
    """The worst |C - reference| / bound over every output of every product (at most 1)."""
    cfg, _, tensors = read_tensors(model_file)
    head = tensors.get("lm_head.weight", tensors["wte"])
    worst, seen, matrices = 0.0, set(), {}
    for layer, which, x, out in read_trace(trace):
        if (layer, which) not in matrices:
            if which == 4:
                matrices[layer, which] = head.rows(cfg.vocab_size), None
            else:
                b = tensors.get(MATRICES[which] + ".bias")
                matrices[layer, which] = (tensors[MATRICES[which] + ".weight"].layer(layer),
                                          None if b is None else b.layer(layer).values)
        w, bias = matrices[layer, which]
        ref, size, additions = product_reference(x, w, bias)
        ratio = float((np.abs(out - ref) / ((additions + 8) * U * size + 1e-30)).max())
        assert ratio <= 1, f"{trace.name}: layer {layer} {MATRICES[which]}: error {ratio:.3g} x its bound"
        worst = max(worst, ratio)
        seen.add((layer, which, x.shape[0] > 1))
    products = {0, 1, 2, 3, 4} | ({5} if cfg.ffn != "gelu" else set())  # 5: the gate
    assert {w for _, w, _ in seen} == products and {l for l, _, _ in seen} == {-1, *range(cfg.n_layer)}
    return worst


ALL_WEIGHTS = ["f32", "q8", "odd", "q4", "odd_q4", "llama", "llama_q8", "llama_q4", "mixed", "q4_k_m", "narrow_q4_k_m",
               "more_blocks"]


@pytest.mark.parametrize("weights", ALL_WEIGHTS)
@pytest.mark.parametrize("path", PATHS)
def test_every_product_matches_its_reference(path: str, weights: str) -> None:
    m = models()
    for block in (1, 128):
        trace = TMP / f"trace_{path}_{weights}_{block}.bin"
        r = subprocess.run([str(binary("trace", path)), str(m[weights]), str(m["prompt"]), str(block), str(trace)],
                           capture_output=True, timeout=600)
        assert r.returncode == 0, r.stderr.decode()
        worst = check_trace(trace, m[weights])
        print(f"{path} {m[weights].name} block {block}: worst error {worst:.2g} of its bound")
        trace.unlink()


# ---- every path gives the same bits -----------------------------------------------------------

@pytest.mark.parametrize("weights", ALL_WEIGHTS)
def test_logits_bit_identical_across_paths(weights: str) -> None:
    m = models()
    prompt = m["prompt"].read_bytes()
    logits = {(path, block): c_logits(binary("run", path), m[weights], prompt, m["model"].config.vocab_size, block)
              for path in PATHS for block in (1, 128)}
    for block in (1, 128):
        base = logits["native", block]
        differ = [path for path in PATHS if not np.array_equal(logits[path, block], base)]
        assert not differ, f"block {block}: {differ} differ from native by up to " \
                           f"{max(np.abs(logits[p, block] - base).max() for p in differ):.3g}"
    if weights not in ("f32", "llama", "mixed", "more_blocks"):  # quantized: one arithmetic for a token and a block
        assert np.array_equal(logits["native", 1], logits["native", 128])


@pytest.mark.parametrize("weights", ["f32", "odd", "llama_q4"])
def test_q8_0_cache_logits_bit_identical_across_paths(weights: str) -> None:
    """--cache q8_0: its keys' integer dot products (dpbusd, AVX-VNNI's, AVX2's maddubs, sdot,
    portable C) and its values' conversions give every path the same logits, in blocks of 1 and
    of 128 (a width of 36 gives heads of 12, one short group; Llama's grouped key/value heads)."""
    m = models()
    prompt = m["prompt"].read_bytes()
    for block in (1, 128):
        logits = {path: c_logits(binary("run", path), m[weights], prompt, m["model"].config.vocab_size, block,
                                 ("--cache", "q8_0")) for path in PATHS}
        differ = [path for path in PATHS if not np.array_equal(logits[path], logits["native"])]
        assert not differ, f"block {block}: {differ} differ from native by up to " \
                           f"{max(np.abs(logits[p] - logits['native']).max() for p in differ):.3g}"


@pytest.mark.parametrize("weights", ["f32", "odd", "q8", "q4", "llama", "llama_q4", "q4_k_m"])
@pytest.mark.parametrize("path", PATHS)
def test_samples_together_are_bit_identical_to_samples_alone(path: str, weights: str) -> None:
    """run --samples: 7 samples' decode steps through one forward() call give each sample the
    bits it gets decoded alone (tests/trace.c samples:N), float32 included: their products keep
    the one-token arithmetic. 7 samples: part tiles of 4 and of 6 tokens; widths 64 and 96; and
    q4_k_m's query, key and value apart (a matrix of parts: each part's product placed)."""
    m = models()
    out = TMP / f"samples_{path}_{weights}.bin"
    r = subprocess.run([str(binary("trace", path)), str(m[weights]), str(m["prompt"]), "samples:7", str(out)],
                       capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    together, alone = np.fromfile(out, dtype="<f4").reshape(2, 8, 7, -1)
    out.unlink()
    differ = np.argwhere(together != alone)
    assert not len(differ), f"{len(differ)} logits differ, first at (step, sample, id) {tuple(differ[0])}"


@pytest.mark.parametrize("cache", ["f16", "f32", "q8_0"])
@pytest.mark.parametrize("weights", ["f32", "odd", "q8", "q4", "llama", "llama_q4", "mixed", "q4_k_m", "narrow_q4_k_m",
                                     "more_blocks"])
def test_sequences_at_their_own_positions_step_together_as_alone(weights: str, cache: str) -> None:
    """Three sequences of different lengths (the prompt's first 100, 97 and 94 tokens, each in
    its own cache) stepped together through one forward pass, each at its own position, give
    each the bits it gets stepped alone (tests/trace.c steps:3), every weight type, every cache:
    what lets a server decode conversations of any lengths together."""
    m = models()
    out = TMP / f"steps_{weights}_{cache}.bin"
    r = subprocess.run([str(binary("trace", "native")), str(m[weights]), str(m["prompt"]), "steps:3", str(out), cache],
                       capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    together, alone = np.fromfile(out, dtype="<f4").reshape(2, 8, 3, -1)
    out.unlink()
    differ = np.argwhere(together != alone)
    assert not len(differ), f"{len(differ)} logits differ, first at (step, sequence, id) {tuple(differ[0])}"
    assert not np.array_equal(together[:, 0], together[:, 1])  # the sequences do differ


# ---- end to end ----------------------------------------------------------------------------

# Quantized logits of the trained shipped model against its float32 logits: the quantization
# error (measured on this model: about 1% of 1 + max|logit| for q8_0, 11% for q4_0) dominates
# anything float32 rounding can change.
BOUNDS = {"q8_0": 0.05, "q4_0": 0.25}


@lru_cache(maxsize=None)  # written once a session, never trusted from an older run
def shipped(dtype: str) -> Path:
    if dtype == "f32":
        return REPO / "models" / "kjv.bin"
    path = TMP / f"kjv_{dtype}.bin"
    model, tok = read_model(REPO / "models" / "kjv.bin")
    write_model(path, model, tok, dtype)
    return path


@pytest.mark.parametrize("dtype", BOUNDS)
@pytest.mark.parametrize("path", PATHS)
def test_quantized_within_bound_of_float32(path: str, dtype: str) -> None:
    model, tok = read_model(shipped("f32"))
    run = binary("run", path)
    ids = c_tokens(run, shipped("f32"), TEXT.encode())[:64]
    for block in (1, 128):
        rep = compare_logits(model, ids, c_logits(run, shipped(dtype), tok.decode(ids), model.config.vocab_size, block))
        print(f"{path}, block {block}: {dtype} vs float32 weights: max diff {rep.max_diff:.3g}, "
              f"max |logit| {rep.max_logit:.3g}")
        assert rep.max_diff <= BOUNDS[dtype] * (1 + rep.max_logit)


def threads_for(path: str) -> tuple[int, ...]:
    return (1, 2) if emulated(path) else (1, 2, 3)


@pytest.mark.parametrize("weights", ["f32", "q8", "q4", "llama", "llama_q8", "q4_k_m"])
def test_greedy_identical_across_paths_and_threads(weights: str) -> None:
    m = models()
    prompt = m["tok"].decode(c_tokens(binary("run", "native"), m["f32"], TEXT.encode())[:40])
    outs = {}
    for path in PATHS:
        for threads in threads_for(path):
            outs[path, threads] = c_generate(binary("run", path), m[weights], prompt, 48, 0.0, 0, 1.0, 1, threads)
    assert len(set(outs.values())) == 1, {k: v[:40] for k, v in outs.items()}


@pytest.mark.parametrize("weights", ["f32", "q8_0", "q4_0"])
def test_shipped_model_greedy_identical_across_paths(weights: str) -> None:
    model = shipped(weights)
    outs = {path: c_generate(binary("run", path), model, b"And God said", 64, 0.0, 0, 1.0, 1)
            for path in PATHS}
    print(outs["native"].decode(errors="replace"))
    assert len(set(outs.values())) == 1, {k: v[:60] for k, v in outs.items()}
