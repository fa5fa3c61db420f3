"""GGUF files from strangers, read as data (export/gguf_file.py, export/gguf_import.py): every
malformed or unsupported file gives one line `error: ...` naming the problem and exit status 1,
never a crash, a hang or a half-written file.

- the structure: truncation at every byte of the header, metadata and tensor infos and through
  the data; every count, length, type and offset of the file (found by a walk of the tests' own,
  below) set to values past the end, unknown, zero or huge; wrong magic and versions; arrays of
  arrays; duplicate keys and tensor names; misaligned, overlapping and out-of-file tensors; a bad
  general.alignment;
- the meaning: an unknown architecture, settings run does not run (each named by its key), a
  missing or misshapen tensor, a tensor of a type not converted (listed with its type), a block
  whose scale is infinite or NaN, a broken vocabulary;
- a fuzz loop: random mutations of valid files (F32, Q8_0, Q4_0 and the block formats' matrices) for a bounded time, each read in-process under a
  time limit: an error of ours, or a file that exports; anything else (an exception of another
  kind, a hang) fails;
- a sample through the command line: one line on stderr, exit status 1, no output left behind.
No llama.cpp here: these files are wrong on purpose."""
from __future__ import annotations

import random
import signal
import struct
import subprocess
import time

import numpy as np
import pytest

from common import REPO, RUN, TMP, GPTConfig, random_model
import block_formats  # noqa: E402 (export/, on the path common.py sets)
from gguf_import import export_gguf, read_gguf_model
from gguf_writer import (ARRAY, BOOL, F32, FLOAT32, GGUF, INT32, Q4_0, Q8_0, STRING, UINT8, UINT32, UINT64,
                         add_bpe_vocab, gguf_of_model)
from output_files import ExportError
from test_llama import LLAMA, gpt2_files

PYTHON = "/usr/bin/python3"


def tiny_gguf(arch: str = "llama", ggml_type: int = F32) -> GGUF:
    """A valid GGUF of a small random two-layer model of arch (llama, qwen2 or gpt2), matrices in
    ggml_type, with GPT-2's 256 byte tokens, its first 40 merges and two added tokens."""
    files = gpt2_files(40)
    n_vocab = 256 + 40 + 2
    base = dict(n_layer=2, n_head=2, n_embd=64, n_hidden=96, n_ctx=32, vocab_size=n_vocab, vocab_padded=n_vocab,
                tied_head=arch != "llama")
    cfg = GPTConfig(**base) if arch == "gpt2" else GPTConfig(**base, **{**LLAMA, "bias": 1 if arch == "qwen2" else 0},
                                                             n_kv_head=1)
    g = gguf_of_model(random_model(cfg, seed=3), arch, ggml_type)
    add_bpe_vocab(g, files["vocab.json"], files["merges.txt"], {"llama": "llama-bpe", "qwen2": "qwen2", "gpt2": "gpt-2"}[arch],
                  ["<|endoftext|>", "<|im_end|>"])
    g.add("tokenizer.ggml.eos_token_id", UINT32, 296)
    return g


# GGUF's block formats (ggml's type ids) as tiny_block_gguf() places them: the query and key Q4_K,
# the value Q6_K (so the export keeps the three apart), the feed-forward Q5_K, Q5_0 and Q5_1, the
# attention output and the embedding F16 and BF16
BLOCK_TYPES = {"attn_q": (12, "q4_k"), "attn_k": (12, "q4_k"), "attn_v": (14, "q6_k"), "ffn_gate": (13, "q5_k"),
               "ffn_up": (6, "q5_0"), "ffn_down": (7, "q5_1"), "attn_output": (1, "f16"), "token_embd": (30, "bf16")}


def tiny_block_gguf() -> GGUF:
    """tiny_gguf()'s llama, 256 wide so that rows are whole super-blocks, its matrices in GGUF's
    block formats by our quantizers (export/block_formats.py: the bytes llama.cpp's write)."""
    files = gpt2_files(40)
    n_vocab = 256 + 40 + 2
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=256, n_hidden=256, n_ctx=32, vocab_size=n_vocab,
                    vocab_padded=n_vocab, tied_head=True, **{**LLAMA, "bias": 0}, n_kv_head=1)
    g = gguf_of_model(random_model(cfg, seed=3), "llama")
    for i, (name, ggml_type, shape, data) in enumerate(g.tensors):
        kind = name.split(".")[-2]
        if kind in BLOCK_TYPES:
            ggml_type, fmt = BLOCK_TYPES[kind]
            g.tensors[i] = (name, ggml_type, shape, block_formats.quantize(np.frombuffer(data, "<f4").reshape(shape), fmt))
    add_bpe_vocab(g, files["vocab.json"], files["merges.txt"], "llama-bpe", ["<|endoftext|>", "<|im_end|>"])
    g.add("tokenizer.ggml.eos_token_id", UINT32, 296)
    return g


# ---- the tests' own walk of a GGUF: where each field is -----------------------------------------

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def fields(raw: bytes) -> list[tuple[str, int, str]]:
    """(what, offset, struct code) of every count, length, type, dimension and offset of a valid
    file, in order."""
    out = [("magic", 0, "<I"), ("version", 4, "<I"), ("n_tensors", 8, "<Q"), ("n_kv", 16, "<Q")]
    n_tensors, n_kv = struct.unpack_from("<QQ", raw, 8)
    at = 24

    def string(what: str) -> None:
        nonlocal at
        out.append((f"{what} length", at, "<Q"))
        at += 8 + struct.unpack_from("<Q", raw, at)[0]

    for k in range(n_kv):
        string(f"key {k}")
        out.append((f"key {k} type", at, "<I"))
        vtype = struct.unpack_from("<I", raw, at)[0]
        at += 4
        if vtype == STRING:
            string(f"key {k} value")
        elif vtype == ARRAY:
            out.append((f"key {k} element type", at, "<I"))
            etype, n = struct.unpack_from("<IQ", raw, at)
            out.append((f"key {k} count", at + 4, "<Q"))
            at += 12
            for i in range(n):
                if etype == STRING:
                    if i < 3:
                        string(f"key {k} element {i}")
                    else:
                        at += 8 + struct.unpack_from("<Q", raw, at)[0]
                else:
                    at += SIZES[etype]
        else:
            at += SIZES[vtype]
    for t in range(n_tensors):
        string(f"tensor {t} name")
        n_dims = struct.unpack_from("<I", raw, at)[0]
        out.append((f"tensor {t} n_dims", at, "<I"))
        for d in range(n_dims):
            out.append((f"tensor {t} ne[{d}]", at + 4 + 8 * d, "<Q"))
        at += 4 + 8 * n_dims
        out += [(f"tensor {t} type", at, "<I"), (f"tensor {t} offset", at + 4, "<Q")]
        at += 12
    out.append(("end of infos", at, ""))
    return out


def structured_mutations(raw: bytes, every_byte: bool) -> list[tuple[str, bytes]]:
    """Every field set to values a file may not have; the file cut at every byte up to the data
    (every_byte) or at every field, and at 200 places through the data."""
    out = []
    spots = fields(raw)
    end_of_infos = spots[-1][1]
    cuts = range(0, end_of_infos + 64) if every_byte else sorted({at + d for _, at, _ in spots for d in (0, 1, 5)})
    for cut in cuts:
        out.append((f"cut at byte {cut}", raw[:cut]))
    for cut in range(end_of_infos + 64, len(raw), max(1, (len(raw) - end_of_infos) // 200)):
        out.append((f"cut at byte {cut}", raw[:cut]))
    for what, at, code in spots[:-1]:
        size = struct.calcsize(code)
        current = struct.unpack_from(code, raw, at)[0]
        values = {0, 1, current + 1, current - 1 if current else 2, 2 ** (8 * size) - 1, 2 ** (8 * size - 1),
                  len(raw), len(raw) - at, 255, 13, 9, 31, 1 << 31}
        for v in sorted(values):
            if v == current or v < 0:
                continue
            out.append((f"{what} = {v}", raw[:at] + struct.pack(code, v % 2 ** (8 * size)) + raw[at + size:]))
    return out


def one_line_error(call) -> str:
    """call() must raise our error, one line, within 10 s; returns the message."""
    def alarm(*_):
        raise TimeoutError("no answer within 10 s")
    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(10)
    try:
        call()
    except ExportError as e:
        message = str(e)
        assert message and "\n" not in message, repr(message)
        return message
    finally:
        signal.alarm(0)
    raise AssertionError("no error")


@pytest.mark.parametrize("ggml_type", [F32, Q8_0, Q4_0])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_the_valid_files_export(arch: str, ggml_type: int) -> None:
    path = tiny_gguf(arch, ggml_type).write(TMP / f"gguf_tiny_{arch}.gguf")
    m = read_gguf_model(path)
    assert m.arch == arch and m.config.n_layer == 2
    export_gguf(path, TMP / f"gguf_tiny_{arch}.bin")


def test_a_file_of_block_formats_exports_each_matrix_as_it_is() -> None:
    """Each matrix in its GGUF type, its bytes the GGUF's (the query, key and value apart, as
    their types differ), and run loads it."""
    from weight_file import WEIGHT_TYPES, table_entries, unpack_header
    g = tiny_block_gguf()
    path, out = g.write(TMP / "gguf_tiny_blocks.gguf"), TMP / "gguf_tiny_blocks.bin"
    export_gguf(path, out)
    raw = out.read_bytes()
    header = unpack_header(raw)
    assert header["qkv_apart"] == 1
    names = {v: k for k, v in WEIGHT_TYPES.items()}
    ours = {name: (names[wtype], raw[offset:offset + size]) for name, wtype, offset, size in table_entries(raw, header)}
    theirs = {name: data for name, _, _, data in g.tensors}
    ours_of = {"attn_q": "attn.q", "attn_k": "attn.k", "attn_v": "attn.v", "ffn_gate": "mlp.gate",
               "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj", "attn_output": "attn.c_proj"}
    for kind, (_, fmt) in BLOCK_TYPES.items():
        for layer in range(2):
            entry, tensor = (("wte", "token_embd.weight") if kind == "token_embd" else
                             (f"h.{layer}.{ours_of[kind]}.weight", f"blk.{layer}.{kind}.weight"))
            assert ours[entry] == (fmt, theirs[tensor]), entry
    r = subprocess.run([str(RUN), str(out), "-i", "And", "-n", "4", "-s", "1"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    info = subprocess.run([str(RUN), str(out), "--info"], capture_output=True, timeout=60).stdout.decode()
    assert "weights: q5_0 (2 matrices), q4_k (4 matrices), q6_k (2 matrices), q5_k (2 matrices), q5_1 (2 matrices), " \
        "f16 (2 matrices), bf16 (1 matrix); query, key and value apart\n" in info, info  # kernels/types.h's order


SCALES = {12: [0, 2], 13: [0, 2], 14: [208], 6: [0], 7: [0, 2]}  # ggml type -> its blocks' binary16 scales
BLOCK_BYTES = {12: 144, 13: 176, 14: 210, 6: 22, 7: 24}


def test_hostile_blocks_are_refused_naming_them() -> None:
    """A block whose binary16 scale (d, or dmin, or Q5_1's m) is NaN or infinite, first, middle
    or last of a tensor of each block format, is refused with one line naming the tensor, its
    type and the block (run would refuse the copy; the export says so first); a tensor cut short
    of its last super-block, or whose rows are not whole blocks, is refused naming it."""
    g = tiny_block_gguf()
    names = [t[0] for t in g.tensors]
    g.tensors.append(g.tensors.pop(names.index("blk.1.attn_v.weight")))  # a Q6_K tensor last in the file
    raw = g.to_bytes()
    spots = {what: at for what, at, _ in fields(raw)}
    data_start = spots["end of infos"] + (-spots["end of infos"] % 32)
    path = TMP / "gguf_hostile_blocks.gguf"
    checked = set()
    for index, (name, ggml_type, shape, data) in enumerate(g.tensors):
        if ggml_type not in SCALES or not name.startswith("blk.1."):
            continue
        checked.add(ggml_type)
        at = data_start + struct.unpack_from("<Q", raw, spots[f"tensor {index} offset"])[0]
        blocks = len(data) // BLOCK_BYTES[ggml_type]
        for block in (0, blocks // 2, blocks - 1):
            for h in SCALES[ggml_type]:
                for bits in (0x7E00, 0x7C00, 0xFC00, 0xFFFF):  # NaN, +inf, -inf, a NaN with every bit
                    buf = bytearray(raw)
                    struct.pack_into("<H", buf, at + block * BLOCK_BYTES[ggml_type] + h, bits)
                    path.write_bytes(bytes(buf))
                    got = one_line_error(lambda: read_gguf_model(path))
                    type_name = {12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 6: "Q5_0", 7: "Q5_1"}[ggml_type]
                    assert got.endswith(f"tensor '{name}' ({type_name}) block {block} has a scale that is infinite "
                                        "or NaN"), got
    assert checked == set(SCALES), checked
    assert len(g.tensors[-1][3]) % 32 == 0  # no padding after it: a cut is in its blocks
    for cut in (1, 210):  # one byte short, one super-block short
        path.write_bytes(raw[:len(raw) - cut])
        got = one_line_error(lambda: read_gguf_model(path))
        assert "tensor 'blk.1.attn_v.weight' (26880 bytes" in got and "runs past the file's end" in got, got
    for name, ggml_type, shape, data in g.tensors:
        if ggml_type == 12:  # a Q4_K tensor's rows of 255 values: not whole super-blocks
            at = spots[f"tensor {[t[0] for t in g.tensors].index(name)} ne[0]"]
            path.write_bytes(raw[:at] + struct.pack("<Q", 255) + raw[at + 8:])
            got = one_line_error(lambda: read_gguf_model(path))
            assert f"tensor '{name}' of type Q4_K has rows of 255 values, not whole blocks of 256" in got, got
            break


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_every_structured_mutation_gives_one_line(arch: str) -> None:
    """Each mutation either reads (a value that happens to be harmless, such as a shorter string
    that is still valid) or is refused with one line; none raises anything else, none hangs.
    llama's file is cut at every byte of its header, metadata and tensor infos."""
    raw = tiny_gguf(arch).to_bytes()
    path = TMP / f"gguf_mutated_{arch}.gguf"
    refused, started = 0, time.time()
    mutations = structured_mutations(raw, every_byte=arch == "llama")
    for what, data in mutations:
        path.write_bytes(data)
        try:
            one_line_error(lambda: read_gguf_model(path))
            refused += 1
        except AssertionError as e:
            if str(e) != "no error":
                raise AssertionError(f"{what}: {e}") from None
    print(f"{arch}: {len(mutations)} mutations, {refused} refused with one line, in {time.time() - started:.1f} s")
    assert refused > 0.9 * len(mutations)


# ---- refused by name -------------------------------------------------------------------------------

def edited(g: GGUF, **changes) -> GGUF:
    for key, (vtype, value) in changes.items():
        key = key.replace("__", ".")
        g.kv = [kv for kv in g.kv if kv[0] != key]
        if vtype is not None:
            g.add(key, vtype, value)
    return g


REFUSED = {
    "an unknown architecture": (dict(general__architecture=(STRING, "mamba")), "general.architecture is 'mamba'"),
    "a part of a split file": (dict(split__count=(UINT32, 3)), "one part of a split GGUF (split.count 3)"),
    "no architecture": (dict(general__architecture=(None, None)), "key 'general.architecture' is missing"),
    "a count of the wrong type": (dict(llama__block_count=(STRING, "2")), "key 'llama.block_count' is string"),
    "mixture of experts": (dict(llama__expert_count=(UINT32, 8)), "key 'llama.expert_count' is 8"),
    "yarn": (dict(llama__rope__scaling__type=(STRING, "yarn")), "key 'llama.rope.scaling.type' is 'yarn'"),
    "linear scaling": (dict(llama__rope__scaling__factor=(FLOAT32, 4.0)), "key 'llama.rope.scaling.factor' is 4.0"),
    "a sliding window": (dict(llama__attention__sliding_window=(UINT32, 16)),
                         "key 'llama.attention.sliding_window' is 16"),
    "values of another size": (dict(llama__attention__value_length=(UINT32, 64)),
                               "key 'llama.attention.value_length' is 64, not the key length 32"),
    "an odd head size": (dict(llama__attention__key_length=(UINT32, 33)), "and key_length 33 do not divide"),
    "partial rotary": (dict(llama__rope__dimension_count=(UINT32, 16)), "key 'llama.rope.dimension_count' is 16"),
    "per-layer shapes": (dict(llama__feed_forward_length=(ARRAY, (INT32, [96, 128]))),
                         "key 'llama.feed_forward_length' differs between layers"),
    "heads that do not divide": (dict(llama__attention__head_count=(UINT32, 3)), "do not divide"),
    "an unknown tokenizer": (dict(tokenizer__ggml__model=(STRING, "t5")), "tokenizer.ggml.model is 't5'"),
    "an unknown pre-tokenizer": (dict(tokenizer__ggml__pre=(STRING, "deepseek-llm")),
                                 "tokenizer.ggml.pre is 'deepseek-llm'"),
    "llama.cpp's default split": (dict(tokenizer__ggml__pre=(STRING, "default")), "tokenizer.ggml.pre is 'default'"),
    "no pre-tokenizer": (dict(tokenizer__ggml__pre=(None, None)), "tokenizer.ggml.pre is missing"),
    "a merge of no tokens": (dict(tokenizer__ggml__merges=(ARRAY, (STRING, ["h e", "zq qz"]))), "merge 'zq qz'"),
    "tokens of the wrong type": (dict(tokenizer__ggml__tokens=(ARRAY, (UINT32, [1, 2]))),
                                 "key 'tokenizer.ggml.tokens' is an array"),
    "a bad alignment": (dict(general__alignment=(UINT32, 48)), "general.alignment must be a uint32 power of two"),
    "an alignment of the wrong type": (dict(general__alignment=(UINT64, 32)), "general.alignment must be a uint32"),
    "a bool of 2": (dict(tokenizer__ggml__add_bos_token=(BOOL, 2)), "key 'tokenizer.ggml.add_bos_token' is a bool of value 2"),
    "a bool of another type": (dict(tokenizer__ggml__add_bos_token=(UINT8, 1)),
                               "key 'tokenizer.ggml.add_bos_token' is uint8 1, expected a bool"),
    "an array of arrays": (dict(x__y=(ARRAY, (ARRAY, []))), "key 'x.y' is an array of arrays"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_is_not_run_is_refused_naming_it(case: str) -> None:
    changes, message = REFUSED[case]
    path = edited(tiny_gguf(), **changes).write(TMP / "gguf_refused.gguf")
    got = one_line_error(lambda: read_gguf_model(path))
    assert message in got, got


def test_tensors_of_types_not_converted_are_listed() -> None:
    """The feed-forward matrices as Q8_1 (type 9, 36 bytes a block of 32; ggml's activations'
    type, which no model file uses), the up projection as MXFP4 (type 39, 17 bytes a block of 32):
    counted by type, each one named with its type, in one line."""
    g = tiny_gguf()
    for i, (name, ggml_type, shape, data) in enumerate(g.tensors):
        if name in ("blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"):
            g.tensors[i] = (name, 39, shape, bytes(shape[0] * shape[1] // 32 * 17)) if name == "blk.0.ffn_up.weight" \
                else (name, 9, shape, bytes(shape[0] * shape[1] // 32 * 36))
    path = g.write(TMP / "gguf_not_converted.gguf")
    got = one_line_error(lambda: read_gguf_model(path))
    assert got.endswith("3 tensors of types not converted (2 of Q8_1, 1 of MXFP4; F32, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, "
                        "Q5_K, Q5_1, F16, BF16, Q4_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K are): blk.0.ffn_gate.weight (Q8_1), "
                        "blk.0.ffn_up.weight (MXFP4), blk.0.ffn_down.weight (Q8_1)"), got


@pytest.mark.parametrize("change,message", [
    ("drop blk.0.ffn_up.weight", "tensor 'blk.0.ffn_up.weight' is missing"),
    ("add output.bias", "tensors run.c has no place for: output.bias"),
    ("shape blk.0.attn_k.weight", "tensor 'blk.0.attn_k.weight' has shape [64, 64] (rows first), expected [32, 64]"),
    ("rows token_embd.weight", "token_embd.weight has 299 rows for 298 tokens"),
    ("duplicate blk.0.attn_k.weight", "tensor 'blk.0.attn_k.weight' appears twice"),
    ("misalign blk.0.attn_k.weight", "not a multiple of the alignment 32"),
    ("overlap blk.0.attn_v.weight", "overlap in the data section"),
    ("past blk.0.attn_v.weight", "runs past the file's end"),
])
def test_bad_tensors_are_refused_naming_them(change: str, message: str) -> None:
    g = tiny_gguf()
    how, name = change.split()
    if how == "drop":
        g.tensors = [t for t in g.tensors if t[0] != name]
    elif how == "add":
        g.tensor(name, np.zeros(298, np.float32))
    elif how == "shape":
        g.tensors = [(n, t, (64, 64), bytes(64 * 64 * 4)) if n == name else (n, t, s, d) for n, t, s, d in g.tensors]
    elif how == "rows":
        g.tensors = [(n, t, (299, 64), bytes(299 * 64 * 4)) if n == name else (n, t, s, d) for n, t, s, d in g.tensors]
    elif how == "duplicate":
        g.tensors.append(next(t for t in g.tensors if t[0] == name))
    raw = bytearray(g.to_bytes())
    if how in ("misalign", "overlap", "past"):
        spots = {what: at for what, at, _ in fields(bytes(raw))}
        index = [t[0] for t in g.tensors].index(name)
        at = spots[f"tensor {index} offset"]
        offset = struct.unpack_from("<Q", raw, at)[0]
        new = {"misalign": offset + 4, "overlap": offset - 32, "past": len(raw)}[how]
        struct.pack_into("<Q", raw, at, new)
    path = TMP / "gguf_bad_tensor.gguf"
    path.write_bytes(bytes(raw))
    got = one_line_error(lambda: read_gguf_model(path))
    assert message in got, got


# ---- fuzzing --------------------------------------------------------------------------------------

INTERESTING = [0, 1, 7, 8, 9, 13, 31, 32, 33, 255, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 32, 1 << 62, (1 << 64) - 1]


def mutate(raw: bytes, rng: random.Random, metadata_end: int) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(0, metadata_end if rng.random() < 0.8 else len(data))
        kind = rng.randrange(5)
        if kind == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            size = rng.choice([1, 2, 4, 8])
            data[at:at + size] = (rng.choice(INTERESTING) % (1 << (8 * size))).to_bytes(size, "little")
        elif kind == 2:
            del data[at:at + rng.randint(1, 16)]
        elif kind == 3:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        else:
            other = rng.randrange(0, len(data))
            data[at:at + 8] = data[other:other + 8]
    return bytes(data)


FUZZ_SECONDS = 15


def test_fuzzing_the_reader_and_the_import() -> None:
    """Random mutations of valid files of each architecture, for FUZZ_SECONDS: each exports or
    is refused with one line, in-process under a time limit, and a refusal leaves no output."""
    rng = random.Random(42)
    sources = [tiny_gguf(arch, ggml_type).to_bytes() for arch, ggml_type in (("llama", F32), ("qwen2", Q8_0),
                                                                               ("gpt2", Q4_0))]
    sources.append(tiny_block_gguf().to_bytes())
    ends = [fields(raw)[-1][1] for raw in sources]
    path, out = TMP / "gguf_fuzz.gguf", TMP / "gguf_fuzz.bin"
    tried = refused = 0
    messages = set()
    deadline = time.time() + FUZZ_SECONDS
    while time.time() < deadline:
        k = rng.randrange(len(sources))
        data = mutate(sources[k], rng, ends[k])
        path.write_bytes(data)
        out.unlink(missing_ok=True)
        tried += 1
        try:
            messages.add(one_line_error(lambda: export_gguf(path, out)).split(":", 1)[-1][:40])
            refused += 1
            assert not out.exists(), f"a refused file left {out} behind"
        except AssertionError as e:
            if str(e) != "no error":
                (TMP / "gguf_fuzz_failure.gguf").write_bytes(data)
                raise AssertionError(f"{e} (the file: tests/tmp/gguf_fuzz_failure.gguf)") from None
    print(f"fuzz: {tried} mutated files in {FUZZ_SECONDS} s, {refused} refused with one line "
          f"({len(messages)} kinds of message), the rest exported")
    assert tried > 200 and refused > tried // 4


def test_the_command_line_gives_one_line_and_leaves_nothing() -> None:
    raw = tiny_gguf().to_bytes()
    spots = {what: at for what, at, _ in fields(raw)}
    cases = {
        "wrong magic": b"GGUG" + raw[4:],
        "version 1": raw[:4] + struct.pack("<I", 1) + raw[8:],
        "cut in the metadata": raw[:spots["tensor 0 name length"] - 5],
        "cut in the data": raw[:len(raw) - 100],
        "a huge count": raw[:16] + struct.pack("<Q", 1 << 60) + raw[24:],
        "an unknown value type": raw[:spots["key 3 type"]] + struct.pack("<I", 77) + raw[spots["key 3 type"] + 4:],
        "empty": b"",
    }
    for what, data in cases.items():
        source, out = TMP / "gguf_cli.gguf", TMP / "gguf_cli.bin"
        source.write_bytes(data)
        out.unlink(missing_ok=True)
        r = subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(source), str(out)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, (what, r.stderr)
        assert not out.exists(), what
