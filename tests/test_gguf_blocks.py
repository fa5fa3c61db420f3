"""GGUF's block formats (Q4_K, Q6_K, Q5_0, Q5_K, Q5_1, Q4_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, and F16,
BF16) against llama.cpp itself, as tests/test_gguf.py checks the others (its files, helpers and
tolerance; tests/llama_ref.c drives llama.cpp's prebuilt libraries, and nothing here passes
without them).

The files: two tiny random models written in F32 by tests/gguf_writer.py and quantized by
llama.cpp's own quantizer to its mixes Q4_K_M, Q5_K_M, Q6_K, Q4_1, IQ4_NL, IQ4_XS, Q2_K,
Q3_K_S, Q3_K_M and Q3_K_L (no importance matrix: none of them needs one), and to F16 and BF16:
  llama_k    a Llama shape whose rows are multiples of 256 (width 256, feed-forward 512, 4
             layers): Q4_K_M gives it q4_k, and q6_k for the output head and the value and down
             projections of layers 2 and 3 (use_more_bits of 4 layers)
  smollm2_k  SmolLM2's shape: a width (192, as 576) that 256 does not divide, so Q4_K_M falls back
             to Q5_0, Q5_K_M to Q5_1 and Q6_K to Q8_0 there, but not for the down projection, whose
             rows (512, as 1536) it does divide; tied head, 3 heads sharing one key/value head
For each:
  - the export copies every block as it is (its bytes are the GGUF's), each matrix in its GGUF
    type, the query, key and value apart where a layer has them in different types;
  - every weight as run reads it back (its row read, tests/trace.c rows) and as export/ reads the
    file (block_formats.py) equals ggml's own to_float, bit for bit;
  - logits at every position within test_gguf.py's tolerance of llama.cpp's, and greedy tokens
    equal where llama.cpp's choice is clear;
  - our quantizer (export.py --dtype q4_k_m, q5_k_m, q6_k on the F32 GGUF) writes the tensors
    llama.cpp's quantizer writes, byte for byte, in the same types.
And the held-out bits per byte of the shipped model and of llama_k with our q4_k_m against
llama.cpp's Q4_K_M of the same weights: within 1% (the issue's bound; they are in fact equal).
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from common import REPO, RUN, TMP
from gguf_file import read_gguf
from gguf_import import Imported, gguf_tensors, write_imported
from gguf_writer import gguf_of_model
import test_gguf  # its checks are called, not imported (pytest would collect them here too)
from test_gguf import export_cli, ggml_dequantized, llama_ref, made
from weight_file import WEIGHT_TYPES, read_header_and_table, read_model, read_tensors, table_entries, unpack_header

MODELS = ("llama_k", "smollm2_k")
TYPES = ("q4_k_m", "q5_k_m", "q6_k", "f16", "bf16", "q4_1", "iq4_nl", "iq4_xs", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l")
OURS = {"F32": "f32", "F16": "f16", "BF16": "bf16", "Q8_0": "q8_0", "Q5_0": "q5_0", "Q5_1": "q5_1", "Q4_K": "q4_k",
        "Q5_K": "q5_k", "Q6_K": "q6_k", "Q4_1": "q4_1", "IQ4_NL": "iq4_nl", "IQ4_XS": "iq4_xs", "Q2_K": "q2_k", "Q3_K": "q3_k", "Q4_0": "q4_0"}
NAMES = {v: k for k, v in WEIGHT_TYPES.items()}
PARTS = {"attn.q.weight": "attn_q", "attn.k.weight": "attn_k", "attn.v.weight": "attn_v",
         "attn.c_proj.weight": "attn_output", "mlp.gate.weight": "ffn_gate", "mlp.c_fc.weight": "ffn_up",
         "mlp.c_proj.weight": "ffn_down"}


def our_entries(path: Path) -> dict[str, tuple[str, bytes]]:
    """Our file's tensors: name -> (weight type, bytes)."""
    raw = path.read_bytes()
    return {name: (NAMES[wtype], raw[offset:offset + size]) for name, wtype, offset, size in
            table_entries(raw, unpack_header(raw))}


def gguf_name(ours: str) -> list[str]:
    """The GGUF tensors whose rows make our entry (several for a fused query/key/value)."""
    if ours in ("wte", "lm_head.weight"):
        return ["token_embd.weight" if ours == "wte" else "output.weight"]
    layer, part = ours.split(".")[1], ours.split(".", 2)[2]
    if part == "attn.c_attn.weight":
        return [f"blk.{layer}.attn_{x}.weight" for x in "qkv"]
    return [f"blk.{layer}.{PARTS[part]}.weight"]


@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("name", MODELS)
def test_blocks_copied_as_they_are(name: str, wtype: str) -> None:
    gguf, out = made(name, wtype)
    g = read_gguf(gguf)
    types = {info.name: info.type_name for info in g.tensors.values()}
    entries = our_entries(out)
    layers = range(4)
    mixed = any(len({types[f"blk.{i}.attn_{x}.weight"] for x in "qkv"}) > 1 for i in layers)
    assert unpack_header(out.read_bytes())["qkv_apart"] == int(mixed)
    seen = set()
    for entry, (ours, data) in entries.items():
        if entry.split(".", 2)[-1] not in (*PARTS, "attn.c_attn.weight") and entry not in ("wte", "lm_head.weight"):
            continue
        theirs = gguf_name(entry)
        assert {OURS[types[t]] for t in theirs} == {ours}, (entry, ours, [types[t] for t in theirs])
        seen.add(ours)
        if ours not in ("q8_0", "q4_0"):  # their scales are float32 in our layout: their numbers are checked below
            assert data == b"".join(g.tensor_bytes(g.tensors[t]) for t in theirs), f"{entry}: the blocks differ"
    # llama.cpp's choices: the output head q6_k (llama_k's own) or the embedding q8_0 (smollm2_k's
    # tied one); iq4_xs falls back to iq4_nl where 256 does not divide a row, q2_k and q3_k to q4_0
    # (and the k types of Q3_K_M and Q3_K_L's more important matrices to q5_0, q5_1)
    want = {"llama_k": {"q4_k_m": {"q4_k", "q6_k"}, "q5_k_m": {"q5_k", "q6_k"}, "q6_k": {"q6_k"},
                        "q4_1": {"q4_1", "q6_k"}, "iq4_nl": {"iq4_nl", "q6_k"}, "iq4_xs": {"iq4_xs", "q6_k"},
                        "q2_k": {"q2_k", "q3_k", "q6_k"}, "q3_k_s": {"q3_k", "q6_k"},
                        "q3_k_m": {"q3_k", "q4_k", "q5_k", "q6_k"}, "q3_k_l": {"q3_k", "q5_k", "q6_k"}},
            "smollm2_k": {"q4_k_m": {"q5_0", "q8_0", "q4_k", "q6_k"}, "q5_k_m": {"q5_1", "q8_0", "q5_k", "q6_k"},
                          "q6_k": {"q8_0", "q6_k"}, "q4_1": {"q4_1", "q8_0"}, "iq4_nl": {"iq4_nl", "q8_0"},
                          "iq4_xs": {"iq4_nl", "iq4_xs", "q8_0"}, "q2_k": {"q4_0", "q3_k", "q8_0"},
                          "q3_k_s": {"q4_0", "q3_k", "q8_0"}, "q3_k_m": {"q4_0", "q5_0", "q5_1", "q4_k", "q8_0"},
                          "q3_k_l": {"q4_0", "q5_1", "q5_k", "q8_0"}}}[name].get(wtype, {wtype})
    assert seen == want, seen


@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("name", MODELS)
def test_every_weight_as_run_reads_it_is_llama_cpps_dequantization(name: str, wtype: str) -> None:
    """Both readings of our file against ggml's to_float: export/'s (test_gguf.py's test, which
    reads it through block_formats.py) and run's own row read, matrix by matrix."""
    test_gguf.test_every_weight_is_llama_cpps_dequantization(name, wtype)
    gguf, out = made(name, wtype)
    with tempfile.TemporaryDirectory() as d:
        theirs = ggml_dequantized(gguf, Path(d))
        rows = Path(d) / "rows"
        r = subprocess.run([str(REPO / "tests" / "build" / "trace-native"), str(out), "rows", str(rows)],
                           capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr.decode()
        raw = rows.read_bytes()
    cfg, _, _ = read_tensors(out)
    names = [name for name, _ in read_header_and_table(out) if name.split(".", 2)[-1] in (*PARTS, "attn.c_attn.weight")]
    names += ["lm_head.weight" if not cfg.tied_head else None, "wte"]
    at, checked = 0, 0
    for entry in names:  # product_matrices()'s order: each layer's, the head (tied: the embedding), the embedding
        n_rows, n_cols = np.frombuffer(raw, "<i4", 2, at)
        values = np.frombuffer(raw, "<f4", n_rows * n_cols, at + 8).reshape(n_rows, n_cols)
        at += 8 + 4 * n_rows * n_cols
        want = np.concatenate([theirs[t] for t in gguf_name(entry or "wte")])[:n_rows]
        assert np.array_equal(values.view(np.uint32), want.view(np.uint32)), f"{entry}: run's row read differs"
        checked += 1
    assert at == len(raw) and checked == len(names)


@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("name", MODELS)
def test_logits_against_llama_cpp(name: str, wtype: str) -> None:
    test_gguf.test_logits_every_position(name, wtype)


@pytest.mark.parametrize("wtype", ("q4_k_m", "q6_k", "q4_1", "iq4_xs", "q3_k_m"))
@pytest.mark.parametrize("name", MODELS)
def test_greedy_tokens_against_llama_cpp(name: str, wtype: str) -> None:
    test_gguf.test_greedy_tokens_equal_llama_cpps(name, wtype)


@pytest.mark.parametrize("wtype", ("q4_k_m", "q5_k_m", "q6_k"))
@pytest.mark.parametrize("name", MODELS)
def test_our_quantizer_writes_llama_cpps_blocks(name: str, wtype: str) -> None:
    """export.py --dtype MIX of the F32 GGUF: the same tensor table as the export of llama.cpp's
    own quantization of it, every tensor the same bytes (our quantizers follow ggml's reference
    ones float32 operation for float32 operation, and the mixes its choice of type per tensor)."""
    f32, _ = made(name, "f32")
    _, theirs = made(name, wtype)
    ours = TMP / f"gguf_{name}_ours_{wtype}.bin"
    r = export_cli(f32, ours, "--dtype", wtype)
    assert r.returncode == 0, r.stderr
    a, b = our_entries(ours), our_entries(theirs)
    assert [(k, t) for k, (t, _) in a.items()] == [(k, t) for k, (t, _) in b.items()]
    differ = [k for k in a if a[k][1] != b[k][1]]
    assert not differ, f"tensors that differ: {differ}"


# ---- held-out bits per byte ----------------------------------------------------------------------

def bits_per_byte(model: Path, text: Path) -> float:
    r = subprocess.run([str(RUN), str(model), "--perplexity", str(text)], capture_output=True, timeout=900)
    assert r.returncode == 0, r.stderr.decode()
    return float(re.search(r"bpb=([0-9.]+)", r.stdout.decode())[1])


def heldout() -> Path:
    """The shipped model's held-out books (test_perplexity.py checks them against export/kjv.py's)."""
    return REPO / "models" / "heldout.txt"


def test_shipped_model_q4_k_m_bits_per_byte_within_1_percent_of_llama_cpps() -> None:
    """models/kjv.bin as our q4_k_m (export.py --dtype q4_k_m) and as llama.cpp's Q4_K_M of the
    same weights (its GGUF, llama.cpp's quantizer, its tensors in our file with the shipped
    tokenizer): held-out bits per byte within 1% of each other, both within 1% of float32's."""
    shipped = REPO / "models" / "kjv.bin"
    model, tok = read_model(shipped)
    f32, q4 = TMP / "gguf_kjv_f32.gguf", TMP / "gguf_kjv_q4_k_m.gguf"
    gguf_of_model(model, "gpt2").write(f32)
    llama_ref("quantize", f32, q4, "q4_k_m")
    cfg, _, _ = read_tensors(shipped)
    tensors, qkv = gguf_tensors(read_gguf(q4), "gpt2", cfg)
    theirs, ours = TMP / "kjv_llama_q4_k_m.bin", TMP / "kjv_ours_q4_k_m.bin"
    write_imported(Imported("gpt2", cfg, tok, tensors, {}, qkv), theirs)
    r = subprocess.run(["/usr/bin/python3", str(REPO / "export" / "export.py"), str(shipped), str(ours), "--dtype",
                        "q4_k_m"], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    held = heldout()
    base, mine, llama = (bits_per_byte(p, held) for p in (shipped, ours, theirs))
    print(f"held-out bits per byte: float32 {base}, ours q4_k_m {mine}, llama.cpp's Q4_K_M {llama}")
    assert abs(mine - llama) <= 0.01 * llama and abs(mine - base) <= 0.01 * base


def test_llama_shape_q4_k_m_bits_per_byte_within_1_percent_of_llama_cpps() -> None:
    """llama_k (random weights: its bits per byte are a random model's) as our q4_k_m of its F32
    GGUF and as llama.cpp's Q4_K_M of it, on the first 20 KB of the held-out books."""
    f32, _ = made("llama_k", "f32")
    _, theirs = made("llama_k", "q4_k_m")
    ours = TMP / "gguf_llama_k_ours_q4_k_m.bin"
    r = export_cli(f32, ours, "--dtype", "q4_k_m")
    assert r.returncode == 0, r.stderr
    text = heldout().read_bytes()[:20000]
    part = TMP / "heldout_20k.txt"
    part.write_bytes(text[: text.rindex(b"\n") + 1])
    mine, llama = bits_per_byte(ours, part), bits_per_byte(theirs, part)
    print(f"held-out bits per byte of llama_k: ours q4_k_m {mine}, llama.cpp's Q4_K_M {llama}")
    assert abs(mine - llama) <= 0.01 * llama
