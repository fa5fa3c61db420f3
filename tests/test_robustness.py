"""Malformed model files and killed exports (docs/testing.md, "Robustness").

Every malformed file derived here from a valid one must end with exit status 1, exactly one
line on stderr starting with `error:`, no signal, within 2 seconds. Crafted variants get their
header checksum recomputed, so that the loader's own field checks (not the checksum) catch them.
"""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from common import (REPO, RUN, TMP, GPTConfig, as_version, char_tokenizer, random_model, sentencepiece_like,
                    tokenizer_json_like)
from model import BIAS_QKV
from weight_file import TOK_BYTE_FALLBACK, TOK_SENTENCEPIECE, VERSION, write_model

CRC_OFFSET = 104
TENSORS_OFFSET = 88   # header fields (model.h)
HEADER = 256


def valid_file(kind: str = "f32", version: int = VERSION) -> Path:
    """A small valid model: GPT-2's block float32, or quantized (widths of 1 and 2 groups of 32);
    or the Llama family's (RMSNorm, rotary positions with the frequencies in the file, SwiGLU,
    2 query heads per key/value head, query/key/value biases); or GPT-2's block with a
    SentencePiece or tokenizer.json tokenizer section (merges, rules, token kinds)."""
    tok = {"sentencepiece": sentencepiece_like, "tokenizer_json": tokenizer_json_like}.get(kind, char_tokenizer)()
    n = len(tok.tokens)
    width = 32 if kind in ("q4_0", "q4_0_plain", "q8_0") else 256 if kind in ("blocks", "blocks_llama") else 16
    llama = dict(norm="rms", pos="rotary", ffn="swiglu", n_head=4, n_kv_head=2, bias=BIAS_QKV,
                 rope_freqs=[1.0, 0.5]) if kind == "llama" else dict(n_head=2)
    if kind == "blocks_llama":  # q4_k_m of the Llama family's block: the query, key and value apart (qkv_apart)
        llama = dict(norm="rms", pos="rotary", ffn="swiglu", n_head=4, n_kv_head=2, bias=BIAS_QKV)
    if kind == "layers":  # heads of 8 in a width of 16 (4 heads), a layer without rotary positions
        llama = dict(norm="rms", pos="rotary", ffn="swiglu", n_head=4, n_kv_head=2, head_dim=8, bias=BIAS_QKV,
                     layers=[{}, {"rotary": False, "rope_theta": 0.0}])
    if kind == "switches":  # every switch of version 5's block on: Gemma's, Granite's, Phi-3's, OLMo 2's
        llama = dict(norm="rms", pos="rotary", ffn="geglu", n_head=4, n_kv_head=2, head_dim=8, qk_norm="head", bias=0,
                     norm_after=True, embed_scale=3.0, attn_scale=0.3, residual_scale=0.5, logit_divisor=2.0,
                     attn_softcap=20.0, logit_softcap=10.0, rotary_dims=4, rope_scale=1.1, rope_original=16,
                     rope_freqs=[1.0, 0.1], rope_freqs_long=[0.5, 0.05],
                     layers=[{"window": 4, "rope_theta": 100.0}, {}])
    cfg = GPTConfig(n_layer=2, n_embd=width, n_hidden=2 * width, n_ctx=32, vocab_size=n, vocab_padded=n + 5, **llama)
    path = TMP / f"robust_valid_{kind}{'' if version == VERSION else f'_v{version}'}.bin"
    mix = {"h.1.*": "q8_0", "lm_head.weight": "q8_0"} if kind == "q4_0" and version >= 4 else None
    if kind == "blocks":  # GGUF's block formats: q4_k_m's q4_k and q6_k, and one matrix of each other
        cfg.n_hidden = 256
        mix = {"h.0.mlp.c_fc.weight": "q5_0", "h.1.mlp.c_fc.weight": "q5_1", "h.1.attn.c_proj.weight": "q5_k",
               "h.0.attn.c_proj.weight": "f16", "h.0.mlp.c_proj.weight": "bf16"}
    kind = "q4_0" if kind == "q4_0_plain" else kind
    metadata = {"general.name": "robust", "general.source": "random weights"} if version >= 4 else None
    write_model(path, random_model(cfg, seed=41), tok,
                {"q4_0": "q4_0", "q8_0": "q8_0", "blocks": "q4_k_m", "blocks_llama": "q4_k_m"}.get(kind, "f32"),
                version=version, tensor_types=mix, metadata=metadata)
    return path


def fix_crc(buf: bytearray) -> bytearray:
    """Recompute meta_crc32 when the (possibly altered) tensor table still lies in the file."""
    tensors_offset, = struct.unpack_from("<Q", buf, TENSORS_OFFSET)
    n_tensors, = struct.unpack_from("<I", buf, 68)
    end = tensors_offset + 64 * n_tensors
    if len(buf) >= HEADER and end <= len(buf) and end >= HEADER:
        struct.pack_into("<I", buf, CRC_OFFSET, 0)
        struct.pack_into("<I", buf, CRC_OFFSET, zlib.crc32(bytes(buf[:end])))
    return buf


def patched(base: bytes, fmt: str, offset: int, *values) -> bytes:
    buf = bytearray(base)
    struct.pack_into(fmt, buf, offset, *values)
    return bytes(fix_crc(buf))


def variants(base: bytes) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    size = len(base)
    tok_off, tok_size, table_off, _ = struct.unpack_from("<4Q", base, 72)
    # truncation at every header byte and at many offsets through the rest of the file
    for cut in range(0, HEADER + 64):
        out.append((f"truncated at {cut}", base[:cut]))
    for cut in range(HEADER + 64, size, max(1, size // 400)):
        out.append((f"truncated at {cut}", base[:cut]))
    out.append(("one byte appended", base + b"\0"))
    # every bit of the header flipped, and bits through the tokenizer section and tensor table
    for bit in range(HEADER * 8):
        buf = bytearray(base)
        buf[bit // 8] ^= 1 << (bit % 8)
        out.append((f"header bit {bit} flipped", bytes(buf)))
    n_tensors = struct.unpack_from("<I", base, 68)[0]
    for i, pos in enumerate(range(tok_off, table_off + 64 * n_tensors, 7)):
        buf = bytearray(base)
        buf[pos] ^= 1 << (i % 8)
        out.append((f"metadata bit at {pos} flipped", bytes(buf)))
    out.append(("wrong magic", patched(base, "<I", 0, 0x46554747)))
    for v in (0, VERSION + 1, 0xFFFFFFFF):
        out.append((f"version {v}", patched(base, "<I", 4, v)))
    # absurd dimensions (products overflowing 32 and 64 bits), each with a valid checksum
    fields = {"n_layer": 12, "n_head": 16, "n_embd": 20, "n_hidden": 24, "n_ctx": 28,
              "vocab_size": 32, "vocab_padded": 36, "gelu": 44, "bias": 48, "tied_head": 52,
              "pos_kind": 56, "weight_type": 60, "group_size": 64, "n_tensors": 68,
              "norm": 108, "ffn": 112, "n_kv_head": 116, "rope_freqs": 124}
    for name, off in fields.items():
        for v in (0, 3, 7, 1 << 16, (1 << 31) - 1, 1 << 31, 0xFFFFFFFF):
            out.append((f"{name} = {v}", patched(base, "<I", off, v)))
    out.append(("n_embd*n_hidden overflows 32 bits", patched(patched(base, "<I", 20, 1 << 20), "<I", 24, 1 << 22)))
    out.append(("n_ctx*n_embd*n_layer huge", patched(patched(patched(base, "<I", 12, 4096), "<I", 20, 1 << 20), "<I", 28, 1 << 20)))
    for v in (float("nan"), float("inf"), -1e-5, 0.0, 2.0):
        out.append((f"norm_eps {v}", patched(base, "<f", 40, v)))
    for v in (float("nan"), float("inf"), float("-inf"), -1e4, 0.0, -0.0, 1e-45, 1e4):
        out.append((f"rope_theta {v}", patched(base, "<f", 120, v)))
    for bias in range(16):  # every combination of biases the tensor table does not have
        out.append((f"bias bits {bias}", patched(base, "<I", 48, bias)))
    # offsets and sizes out of range, misaligned, overlapping, overflowing
    for name, off in {"tokenizer_offset": 72, "tokenizer_size": 80, "tensors_offset": 88, "file_size": 96,
                      "metadata_offset": 128, "metadata_size": 136}.items():
        for v in (0, 1, 64, size, size + 64, 1 << 40, (1 << 63) + 64, (1 << 64) - 64, (1 << 64) - 1):
            out.append((f"{name} = {v}", patched(base, "<Q", off, v)))
    out.append(("reserved byte set", patched(base, "<B", 200, 1)))
    out.append(("first reserved byte set", patched(base, "<B", 208, 1)))
    # format version 5's switches of the block
    for name, off, values in [("qk_norm", 160, (3, 0xFFFFFFFF)), ("norm_place", 164, (0, 4, 0xFFFFFFFF)),
                              ("rotary_dims", 192, (1, 3, 1 << 16, 0xFFFFFFFF)), ("rope_long", 200, (2, 0xFFFFFFFF))]:
        for v in values:
            out.append((f"{name} = {v}", patched(base, "<I", off, v)))
    for name, off in [("embed_scale", 168), ("attn_scale", 172), ("residual_scale", 176), ("logit_divisor", 180),
                      ("attn_softcap", 184), ("logit_softcap", 188), ("rope_scale", 196)]:
        for v in (float("nan"), float("inf"), -1.0, -0.0):
            out.append((f"{name} {v}", patched(base, "<f", off, v)))
    # format version 5: the head size and the layer table, each row's fields and zero bytes
    for v in (0, 1, 3, 1 << 16, (1 << 16) + 2, 0xFFFFFFFF):
        out.append((f"head_size = {v}", patched(base, "<I", 148, v)))
    layers = struct.unpack_from("<Q", base, 152)[0]
    for v in (0, 1, 64, layers + 8, table_off, size, 1 << 40, (1 << 64) - 64):
        out.append((f"layers_offset = {v}", patched(base, "<Q", 152, v)))
    for layer in range(struct.unpack_from("<I", base, 12)[0]):
        row = layers + 32 * layer
        for v in (33, (1 << 24) + 1, 0xFFFFFFFF):  # any window up to the context (32 positions) is one
            out.append((f"layer {layer} window {v}", patched(base, "<I", row, v)))
        for v in (0, 1, 2, 0xFFFFFFFF):  # a row that turns rotary off keeps its base, and on is refused
            out.append((f"layer {layer} rotary {v}", patched(base, "<I", row + 4, v)))  # without rotary positions
        for v in (float("nan"), float("inf"), -1.0, -0.0, 0.0):
            out.append((f"layer {layer} rope_theta {v}", patched(base, "<f", row + 8, v)))
        for at in (12, 31):
            out.append((f"layer {layer} reserved byte {at}", patched(base, "<B", row + at, 1)))
    entry0 = table_off
    n_entries = struct.unpack_from("<I", base, 68)[0]
    for i in range(n_entries):
        e = table_off + 64 * i
        name, t_off, t_size = struct.unpack_from("<40s8xQQ", base, e)
        for v in (0, t_off + 4, size, size - 64, 1 << 62, (1 << 64) - 64):
            out.append((f"tensor {i} offset {v}", patched(base, "<Q", e + 48, v)))
        for v in (0, t_size - 4, t_size + 64, 1 << 62, (1 << 64) - 1):
            out.append((f"tensor {i} size {v}", patched(base, "<Q", e + 56, v)))
        out.append((f"tensor {i} renamed", patched(base, "<40s", e, b"x" * 40)))
        for v in (3, 99, 0xFFFFFFFF, 1 if not name.rstrip(b"\0").endswith(b"weight") or b"ln_" in name else 0):
            out.append((f"tensor {i} type {v}", patched(base, "<I", e + 40, v)))
        out.append((f"tensor {i} reserved", patched(base, "<I", e + 44, 1)))
    second = struct.unpack_from("<Q", base, entry0 + 64 + 48)[0]
    out.append(("tensors overlap", patched(base, "<Q", entry0 + 48, second)))
    # a bad tokenizer section (valid checksum)
    for name, off, values in [("n_tokens", 0, (0, 1, 10**6, 0xFFFFFFFF)), ("pretokenizer", 4, (8, 0xFFFFFFFF)),
                              ("eot_id", 8, (10**6, 0x7FFFFFFF, 0xFFFFFFFE)), ("bytes_size", 12, (0, 1, 0xFFFFFFFF))]:
        for v in values:
            out.append((f"tokenizer {name} = {v}", patched(base, "<I", tok_off + off, v)))
    n_tok = struct.unpack_from("<I", base, tok_off)[0]
    offsets = tok_off + 16 + 4 * n_tok
    for i in (1, 2, n_tok // 2, n_tok):
        for v in (0, 0xFFFFFFFF, struct.unpack_from("<I", base, offsets + 4 * i)[0] - 1):
            out.append((f"token offset {i} = {v}", patched(base, "<I", offsets + 4 * i, v)))
    blob = offsets + 4 * (n_tok + 1)
    out.append(("duplicate token", patched(base, "<B", blob + 1, base[blob])))
    # the section's second part (format version 3): flags, bos, unk, counts, kinds, merges, rules
    bytes_size = struct.unpack_from("<I", base, tok_off + 12)[0]
    second = blob + bytes_size + (-(blob + bytes_size - tok_off) % 4)
    for name, off, values in [("flags", 0, (128, 0xFFFFFFFF, TOK_SENTENCEPIECE, TOK_BYTE_FALLBACK | TOK_SENTENCEPIECE)),
                              ("bos_id", 4, (n_tok, 0x7FFFFFFF, 0xFFFFFFFE)), ("unk_id", 8, (n_tok, 0xFFFFFFFE)),
                              ("n_merges", 12, (1 << 20, 0xFFFFFFFF)), ("n_rules", 16, (1 << 20, 0xFFFFFFFF)),
                              ("rules_size", 20, (1, 1 << 31, 0xFFFFFFFF))]:
        for v in values:
            out.append((f"tokenizer {name} = {v}", patched(base, "<I", second + off, v)))
    kinds = second + 24
    for i in (0, n_tok - 1):
        for v in (5, 255):
            out.append((f"token {i} kind {v}", patched(base, "<B", kinds + i, v)))
    n_merges, n_rules = struct.unpack_from("<II", base, second + 12)
    merges = kinds + n_tok + (-n_tok % 4)
    for i in range(min(3 * n_merges, 6)):
        out.append((f"merge value {i} = n_tokens", patched(base, "<I", merges + 4 * i, n_tok)))
    rule_offsets = merges + 12 * n_merges
    for i in range(2 * n_rules + 1 if n_rules else 0):
        for v in (0, 1, 0xFFFFFFFF):
            out.append((f"rule offset {i} = {v}", patched(base, "<I", rule_offsets + 4 * i, v)))
    # format version 4: the stop set at the section's end, and the metadata section
    rules_size = struct.unpack_from("<I", base, second + 20)[0]
    stop = rule_offsets + 4 * (2 * n_rules + 1) + rules_size
    stop += -(stop - tok_off) % 4
    n_stop = struct.unpack_from("<I", base, stop)[0]
    for v in (65, 1 << 20, 0xFFFFFFFF, n_stop + 1):
        out.append((f"stop set of {v}", patched(base, "<I", stop, v)))
    for i in range(n_stop):
        for v in (n_tok, 0xFFFFFFFF):
            out.append((f"stop token {i} = {v}", patched(base, "<I", stop + 4 + 4 * i, v)))
    meta, meta_size = struct.unpack_from("<QQ", base, 128)
    n_entries = struct.unpack_from("<I", base, meta)[0]
    for v in (n_entries + 1, 4097, 0xFFFFFFFF, 0 if n_entries else 1):
        out.append((f"metadata entries {v}", patched(base, "<I", meta, v)))
    key_len = struct.unpack_from("<I", base, meta + 4)[0]
    for v in (0, 65, meta_size, 0xFFFFFFFF):
        out.append((f"metadata key length {v}", patched(base, "<I", meta + 4, v)))
    for v in (b"A", b"/", b"\0", b" "):
        out.append((f"metadata key byte {v!r}", patched(base, "<1s", meta + 8, v)))
    value_len = struct.unpack_from("<I", base, meta + 8 + key_len)[0]
    for v in (value_len + 1, meta_size, 0xFFFFFFFF):
        out.append((f"metadata value length {v}", patched(base, "<I", meta + 8 + key_len, v)))
    if n_entries >= 2:  # the second key made the first's
        second_key = meta + 8 + key_len + 4 + value_len
        other_len = struct.unpack_from("<I", base, second_key)[0]
        if other_len == key_len:
            out.append(("metadata key twice", patched(base, f"<{key_len}s", second_key + 4, base[meta + 8:meta + 8 + key_len])))
    return [(name, data) for name, data in out if data != base]  # a patch may rewrite a value


def run_one(item: tuple[int, tuple[str, bytes]], folder: Path) -> tuple[str, str | None]:
    index, (name, data) = item
    path = folder / f"m{index}.bin"
    path.write_bytes(data)
    start = time.monotonic()
    try:
        r = subprocess.run([str(RUN), str(path), "-i", "And", "-n", "2", "-t", "0"], capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        return name, "hung"
    finally:
        path.unlink()
    elapsed = time.monotonic() - start
    lines = r.stderr.decode(errors="replace").splitlines()
    if r.returncode < 0:
        return name, f"killed by signal {-r.returncode}"
    if r.returncode != 1:
        return name, f"exit status {r.returncode}"
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return name, f"stderr {lines!r}"
    if elapsed > 2.0:
        return name, f"took {elapsed:.1f} s"
    return name, None


@pytest.mark.parametrize("kind", ["f32", "q4_0", "llama", "layers", "switches", "sentencepiece", "tokenizer_json",
                                  "blocks"])
def test_malformed_files_give_one_line_errors(kind: str) -> None:
    path = valid_file(kind)
    base = path.read_bytes()
    ok = subprocess.run([str(RUN), str(path), "-i", "And", "-n", "2"], capture_output=True)
    assert ok.returncode == 0, "the unaltered file must load"
    # changes that leave a valid file of another configuration: with rotary positions there is
    # no table of n_ctx rows, and a Llama file's norms read as LayerNorm without bias are valid
    still_valid = {"n_ctx = 3", "n_ctx = 7", "n_ctx = 65536", "norm = 0", "rope_theta 1e-45"} if kind == "llama" else set()
    if kind == "layers":  # the same; the header's base is no layer's here
        still_valid = {"n_ctx = 3", "n_ctx = 7", "n_ctx = 65536", "norm = 0", "rope_theta 1e-45"}
    if kind == "switches":  # the same, with a context still past rope_original or not (LongRoPE's choice)
        still_valid = {"n_ctx = 3", "n_ctx = 7", "n_ctx = 65536", "rope_theta 1e-45"}
    if kind == "sentencepiece":  # <unk> and <s> may be empty or other text; without byte
        # fallback or dummy prefix it is another valid SentencePiece tokenizer (it has <unk>)
        still_valid = {"token offset 1 = 0", "token offset 1 = 4", "token offset 2 = 7",  # 8 = len("<unk><s>")
                       "duplicate token", "tokenizer flags = 4", "tokenizer flags = 12"}
    cases = [c for c in variants(base) if c[0] not in still_valid]
    assert len(cases) >= 1000
    folder = TMP / "malformed"
    folder.mkdir(exist_ok=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda c: run_one(c, folder), enumerate(cases)))
    failures = [(n, why) for n, why in results if why]
    print(f"{len(cases)} malformed files, {len(failures)} not handled")
    assert not failures, failures[:10]


@pytest.mark.parametrize("kind", ["blocks", "blocks_llama"])
def test_hostile_blocks_refused_at_load(tmp_path, kind: str) -> None:
    """A block whose binary16 scale (d, or q4_k's dmin, q5_1's m) is NaN or infinite, in any
    block of any matrix of a block format, is refused at load with one line naming the tensor
    and the block; so is a tensor one super-block (or one byte) short of its shape. blocks_llama:
    the same in a file whose query, key and value projections are three tensors."""
    from weight_file import WEIGHT_TYPES, table_entries, unpack_header
    path = valid_file(kind)
    base = path.read_bytes()
    assert unpack_header(base)["qkv_apart"] == (kind == "blocks_llama")
    names = {v: k for k, v in WEIGHT_TYPES.items()}
    # where each format keeps its binary16 scales in a block of (values, bytes)
    scales = {"q5_0": (32, 22, [0]), "q5_1": (32, 24, [0, 2]), "q4_k": (256, 144, [0, 2]), "q5_k": (256, 176, [0, 2]),
              "q6_k": (256, 210, [208])}
    cases, seen = [], set()
    for i, (name, wtype, offset, size) in enumerate(table_entries(base, unpack_header(base))):
        fmt = names[wtype]
        if fmt not in scales:
            continue
        seen.add(fmt)
        _, block_bytes, at = scales[fmt]
        blocks = size // block_bytes
        for block in (0, blocks // 2, blocks - 1):
            for h in at:
                for bits in (0x7E00, 0x7C00, 0xFC00, 0xFFFF):  # NaN, +inf, -inf, a NaN with every bit
                    buf = bytearray(base)
                    struct.pack_into("<H", buf, offset + block * block_bytes + h, bits)
                    cases.append((f"{name} block {block}", bytes(buf), f"tensor '{name}' ({fmt}) block {block} has a scale"))
        for cut in (block_bytes, 1):  # one block (a super-block) short, one byte short
            buf = fix_crc(bytearray(patched(base, "<Q", unpack_header(base)["tensors_offset"] + 64 * i + 56, size - cut)))
            cases.append((f"{name} short by {cut}", bytes(buf), f"tensor '{name}' has {size - cut} bytes"))
    assert seen == (set(scales) if kind == "blocks" else {"q4_k", "q6_k"}), seen
    for what, data, message in cases:
        f = tmp_path / "hostile.bin"
        f.write_bytes(data)
        r = subprocess.run([str(RUN), str(f), "-i", "And", "-n", "2"], capture_output=True, timeout=10)
        lines = r.stderr.decode().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], \
            (what, lines)


@pytest.mark.parametrize("kind,version", [("f32", 1), ("q4_0", 1), ("f32", 2), ("q8_0", 2), ("f32", 3), ("q8_0", 3),
                                          ("q4_0", 3), ("llama", 3), ("sentencepiece", 3), ("tokenizer_json", 3),
                                          ("f32", 4), ("q4_0", 4), ("llama", 4), ("blocks_llama", 4)])
def test_earlier_versions_load_and_give_the_same_bytes(kind: str, version: int) -> None:
    """A file written before version 5 (version 4: no head size, no layer table; version 3 also:
    one weight type, each tensor stacked over the layers, no metadata or stop set; version 2
    also: the tokenizer section without its second part; version 1 also: GPT-2's block, no
    fields from byte 108) loads and gives exactly the logits and text of the same model written
    as today."""
    plain = "q4_0_plain" if kind == "q4_0" and version < 4 else kind  # today's q4_0 file mixes in q8_0
    today, v3 = valid_file(plain), valid_file(plain, min(version, 4) if version >= 3 else 3)
    old = TMP / f"robust_v{version}_{kind}.bin"
    old.write_bytes(v3.read_bytes() if version >= 3 else as_version(v3.read_bytes(), version))
    assert struct.unpack_from("<I", old.read_bytes(), 4)[0] == version
    outs = []
    for path in (old, today):
        logits = TMP / f"{path.stem}.logits"
        r = subprocess.run([str(RUN), str(path), "-i", "And the earth", "--logits", str(logits)], capture_output=True)
        assert r.returncode == 0, r.stderr
        gen = subprocess.run([str(RUN), str(path), "-i", "And", "-n", "40", "-s", "3"], capture_output=True)
        outs.append((logits.read_bytes(), gen.stdout))
    assert outs[0] == outs[1]


def test_a_window_longer_than_the_context_is_one_line(tmp_path) -> None:
    """A layer whose window is longer than the file's context (a Gemma file cut short) is refused
    naming the layer, the window and the context; the exporters write such a window as 0, the
    whole context, which is what it sees anyway."""
    base = valid_file("switches").read_bytes()
    layers = struct.unpack_from("<Q", base, 152)[0]
    path = tmp_path / "window.bin"
    path.write_bytes(patched(base, "<I", layers, 40))
    r = subprocess.run([str(RUN), str(path), "-i", "And", "-n", "2"], capture_output=True, timeout=10)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 1 and len(lines) == 1, lines
    assert "layer 0's window of 40 positions is longer than the context of 32" in lines[0], lines


def test_a_tokenizer_only_file_has_no_head_size_or_layer_table(tmp_path) -> None:
    """Version 5's fields belong to a model: a tokenizer-only file that sets either is refused."""
    path = tmp_path / "tokenizer_only.bin"
    write_model(path, None, char_tokenizer())
    base = path.read_bytes()
    assert subprocess.run([str(RUN), str(path), "--tokenize", "-i", "And"], capture_output=True).returncode == 0
    for fmt, offset, value, message in [("<I", 148, 64, "a tokenizer-only file has head_size 64, expected 0"),
                                        ("<Q", 152, 256, "a tokenizer-only file has a layer table offset of 256")]:
        path.write_bytes(patched(base, fmt, offset, value))
        r = subprocess.run([str(RUN), str(path), "--tokenize", "-i", "And"], capture_output=True, timeout=10)
        lines = r.stderr.decode().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and message in lines[0], lines


def test_empty_file_and_directory(tmp_path) -> None:
    (tmp_path / "empty.bin").write_bytes(b"")
    for path, message in [(tmp_path / "empty.bin", "shorter than the 256-byte header"),
                          (tmp_path, "is a folder, not a model file")]:
        r = subprocess.run([str(RUN), str(path)], capture_output=True, timeout=10)
        assert r.returncode == 1 and message in r.stderr.decode(), r.stderr


def test_killed_export_leaves_nothing(tmp_path) -> None:
    """SIGKILL an export at several moments: the target folder then holds either nothing new or
    the complete file, never a partial output or a stray temporary file."""
    from source_checkpoint import save_checkpoint
    tok = char_tokenizer()
    n = len(tok.tokens)
    model = random_model(GPTConfig(n_layer=4, n_head=4, n_embd=512, n_hidden=2048, n_ctx=64,
                                   vocab_size=n, vocab_padded=n), seed=3)
    save_checkpoint(tmp_path / "ckpt.pt", model, tok)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    outcomes = set()
    for delay in (0.3, 0.8, 1.2, 1.6, 2.0, 2.5, 3.0, 4.0):
        p = subprocess.Popen(["/usr/bin/python3", str(REPO / "export" / "export.py"), str(tmp_path / "ckpt.pt"),
                              str(out_dir / "model.bin")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        files = sorted(os.listdir(out_dir))
        assert files in ([], ["model.bin"]), files
        if files:
            r = subprocess.run([str(RUN), str(out_dir / "model.bin"), "--info"], capture_output=True)
            assert r.returncode == 0, r.stderr
            outcomes.add("complete")
            (out_dir / "model.bin").unlink()
        else:
            outcomes.add("nothing")
    assert "nothing" in outcomes  # at least one kill landed mid-export


@pytest.mark.parametrize("mutation,message", [
    ("missing", "missing key 'transformer.h.1.attn.c_proj.weight'"),
    ("shape", "key 'transformer.h.0.mlp.c_fc.weight' has shape"),
    ("option", "unknown model_args ['flash']"),
])
def test_corrupt_checkpoints_name_the_key(tmp_path, mutation: str, message: str) -> None:
    import torch
    model = random_model(GPTConfig(n_layer=2, n_head=2, n_embd=16, n_hidden=64, n_ctx=32, vocab_size=len(char_tokenizer().tokens),
                                   vocab_padded=len(char_tokenizer().tokens), gelu="erf"), seed=5)
    sd = dict(model.state_dict())
    args = dict(n_layer=2, n_head=2, n_embd=16, block_size=32, bias=True, vocab_size=model.config.vocab_size, dropout=0.0)
    if mutation == "missing":
        del sd["transformer.h.1.attn.c_proj.weight"]
    elif mutation == "shape":
        sd["transformer.h.0.mlp.c_fc.weight"] = torch.zeros(3, 3)
    else:
        args["flash"] = True
    import pickle
    torch.save({"model": sd, "model_args": args}, tmp_path / "ckpt.pt")
    chars = [t.decode() for t in char_tokenizer().tokens]
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({"itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}, f)
    r = subprocess.run(["/usr/bin/python3", str(REPO / "export" / "export.py"), str(tmp_path / "ckpt.pt"),
                        str(tmp_path / "model.bin")], capture_output=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.decode().startswith("error:") and message in r.stderr.decode(), r.stderr.decode()
    assert not (tmp_path / "model.bin").exists()
