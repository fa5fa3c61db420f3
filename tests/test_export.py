"""export/export.py on every SOURCE kind (our trainer's checkpoint, nanoGPT's ckpt.pt with or
without meta.pkl, a Hugging Face GPT-2 folder). Each test starts from a reference model with
random weights, writes it the way that SOURCE's own tools would (with what they store beside the
weights: configs with floats, optimizer state, random-generator state), exports it with the
command a user runs, and checks run.c's logits and generations against the original reference
model. Files whose unpickling would run a command are refused, and the command never runs."""
from __future__ import annotations

import json
import pickle
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from common import (DEFAULT_GPT2_VOCAB, REPO, RUN, TEXT, TMP, GPTConfig, beside, char_tokenizer,
                    gpt2_tokenizer, random_model, small_gpt2_tokenizer)
from weight_file import file_tensors, write_model
from compare import c_generate, c_logits, c_tokens, compare_logits, generation_agrees
from source_checkpoint import save_checkpoint

PYTHON = "/usr/bin/python3"


def export_cli(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(source), str(out)],
                          capture_output=True, timeout=300)


def check_matches(model, tok, out: Path) -> None:
    """run.c on the exported file against the original reference model."""
    ids = c_tokens(RUN, out, TEXT.encode())[:64]
    prompt = tok.decode(ids)
    rep = compare_logits(model, ids, c_logits(RUN, out, prompt, model.config.vocab_size))
    assert rep.ok, f"max logit diff {rep.max_diff} > {rep.tolerance}"
    short = ids[:8]
    for t, k, p, seed in [(0.0, 0, 1.0, 0), (0.8, 40, 0.9, 1), (0.8, 40, 0.9, 2)]:
        c_out = c_generate(RUN, out, tok.decode(short), 48, t, k, p, seed)
        agrees, what = generation_agrees(model, tok, short, c_out, 48, t, k, p, seed)
        assert agrees, what


def folder(name: str) -> Path:
    d = TMP / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def optimizer_state(model) -> dict:
    """An AdamW state after one step, as train.py and nanoGPT store it: tensors, floats, tuples."""
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    model(torch.zeros(1, 4, dtype=torch.long)).sum().backward()
    opt.step()
    model.zero_grad(set_to_none=True)
    return opt.state_dict()


def test_own_checkpoint() -> None:
    tok = gpt2_tokenizer()
    model = random_model(GPTConfig(n_layer=2, n_head=2, n_embd=32, n_hidden=96, n_ctx=128,
                                   vocab_size=50257, vocab_padded=50257, pos="sinusoidal",
                                   tied_head=False), seed=11)
    d = folder("own")
    # what train.py stores beside the weights
    save_checkpoint(d / "ckpt.pt", model, tok, {"step": 200, "optimizer": optimizer_state(model),
                                                "history": [{"step": 200, "train": 3.5, "heldout": 3.7, "minutes": 1.5}],
                                                "torch_rng": torch.get_rng_state()})
    r = export_cli(d / "ckpt.pt", d / "model.bin")
    assert r.returncode == 0, r.stderr.decode()
    check_matches(model, tok, d / "model.bin")


def nanogpt_checkpoint(d: Path, model, vocab_padded: int, mask_buffers: bool) -> None:
    """What nanoGPT's train.py saves: torch.compile's `_orig_mod.` prefix on every key,
    lm_head tied to wte, and (without flash attention) a causal-mask buffer per layer."""
    c = model.config
    sd = dict(model.state_dict())
    if mask_buffers:
        for i in range(c.n_layer):
            sd[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(c.n_ctx, c.n_ctx)).view(1, 1, c.n_ctx, c.n_ctx)
    ckpt = {"model": {"_orig_mod." + k: v for k, v in sd.items()},
            "optimizer": optimizer_state(model),
            "model_args": dict(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, block_size=c.n_ctx,
                               bias=c.bias, vocab_size=vocab_padded, dropout=0.0),
            "iter_num": 100, "best_val_loss": torch.tensor(1.5),
            # nanoGPT's train.py saves its whole configuration: floats, strings, booleans
            "config": {"dataset": "test", "learning_rate": 6e-4, "beta2": 0.99, "compile": True,
                       "dtype": "bfloat16", "eval_interval": 250}}
    torch.save(ckpt, d / "ckpt.pt")


def test_nanogpt_gpt2_vocab() -> None:
    tok = gpt2_tokenizer()
    model = random_model(GPTConfig(n_layer=2, n_head=2, n_embd=32, n_hidden=128, n_ctx=128,
                                   vocab_size=50257, vocab_padded=50304, gelu="erf", bias=False),
                         seed=12)
    d = folder("nanogpt_bpe")
    nanogpt_checkpoint(d, model, 50304, mask_buffers=True)
    r = export_cli(d / "ckpt.pt", d / "model.bin")
    assert r.returncode == 0, r.stderr.decode()
    check_matches(model, tok, d / "model.bin")


def test_nanogpt_char_meta() -> None:
    tok = char_tokenizer()
    n = len(tok.tokens)
    model = random_model(GPTConfig(n_layer=2, n_head=4, n_embd=32, n_hidden=128, n_ctx=128,
                                   vocab_size=n, vocab_padded=n, gelu="erf", bias=True), seed=13)
    d = folder("nanogpt_char")
    nanogpt_checkpoint(d, model, n, mask_buffers=False)
    chars = [t.decode() for t in tok.tokens]
    with open(d / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": n, "itos": dict(enumerate(chars)),
                     "stoi": {ch: i for i, ch in enumerate(chars)}}, f)
    r = export_cli(d / "ckpt.pt", d / "model.bin")
    assert r.returncode == 0, r.stderr.decode()
    check_matches(model, tok, d / "model.bin")


def hf_state_dict(model, prefix: str) -> dict[str, torch.Tensor]:
    """Hugging Face GPT2LMHeadModel naming: Conv1D weights stored (in, out)."""
    out = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight":
            continue
        name = k[len("transformer."):]
        if name.endswith(".weight") and any(p in name for p in ("c_attn", "c_proj", "c_fc")):
            v = v.t().contiguous()
        out[prefix + name] = v.clone()
    return out


def hf_folder(name: str, model) -> Path:
    c = model.config
    d = folder(name)
    (d / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "n_layer": c.n_layer, "n_head": c.n_head, "n_embd": c.n_embd,
        "n_positions": c.n_ctx, "n_ctx": c.n_ctx, "vocab_size": c.vocab_size, "n_inner": None,
        "layer_norm_epsilon": c.ln_eps, "activation_function": "gelu_new"}))
    shutil.copy(DEFAULT_GPT2_VOCAB / "encoder.json", d / "vocab.json")
    shutil.copy(DEFAULT_GPT2_VOCAB / "vocab.bpe", d / "merges.txt")
    return d


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """safetensors layout: u64 header length, JSON header, then the raw little-endian data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def hf_model(seed: int, width: int = 48):
    return random_model(GPTConfig(n_layer=2, n_head=4, n_embd=width, n_hidden=4 * width, n_ctx=128,
                                  vocab_size=50257, vocab_padded=50257, gelu="tanh", bias=True),
                        seed=seed)


def test_hf_safetensors() -> None:
    model = hf_model(14)
    d = hf_folder("hf_safetensors", model)
    sd = hf_state_dict(model, prefix="")  # the published gpt2 files have no prefix
    for i in range(model.config.n_layer):
        n = model.config.n_ctx
        sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
    write_safetensors(d / "model.safetensors", sd)
    r = export_cli(d, beside(d))
    assert r.returncode == 0, r.stderr.decode()
    check_matches(model, gpt2_tokenizer(), beside(d))


def test_hf_pytorch_model_bin() -> None:
    model = hf_model(15)
    d = hf_folder("hf_bin", model)
    sd = hf_state_dict(model, prefix="transformer.")
    n = model.config.n_ctx
    for i in range(model.config.n_layer):
        sd[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        sd[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    sd["lm_head.weight"] = model.lm_head.weight.detach().clone()
    torch.save(sd, d / "pytorch_model.bin")
    r = export_cli(d, beside(d))
    assert r.returncode == 0, r.stderr.decode()
    check_matches(model, gpt2_tokenizer(), beside(d))


def test_failed_export_leaves_nothing() -> None:
    model = hf_model(16)
    d = hf_folder("hf_broken", model)
    sd = hf_state_dict(model, prefix="")
    del sd["h.1.mlp.c_fc.weight"]
    write_safetensors(d / "model.safetensors", sd)
    before = set(d.parent.iterdir()) - {beside(d)}
    beside(d).unlink(missing_ok=True)
    r = export_cli(d, beside(d))
    assert r.returncode == 1
    assert r.stderr.decode().startswith("error:") and "h.1.mlp.c_fc.weight" in r.stderr.decode()
    assert set(d.parent.iterdir()) == before


class RunsCommand:
    """Unpickling this object runs a shell command that creates `marker` (what a malicious
    checkpoint does with torch.load or pickle.load)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch '{self.marker}'",))


def refused(r: subprocess.CompletedProcess, marker: Path, name: str) -> None:
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert err.count("\n") == 1 and err.startswith("error: refusing to load") and name in err, err
    assert "system" in err, err  # names what the file asked to run
    assert not marker.exists(), "the file's command ran"


def test_malicious_checkpoint_is_refused() -> None:
    d = folder("evil_ckpt")
    marker = d / "pwned"
    torch.save({"model_args": {"n_layer": 1}, "model": RunsCommand(marker)}, d / "ckpt.pt")
    r = export_cli(d / "ckpt.pt", d / "model.bin")
    refused(r, marker, "ckpt.pt")
    assert not (d / "model.bin").exists()
    # compare.py reads SOURCE the same way
    r = subprocess.run([PYTHON, str(REPO / "export" / "compare.py"), str(d / "ckpt.pt"), str(d / "model.bin")],
                       capture_output=True, timeout=300)
    refused(r, marker, "ckpt.pt")


def test_malicious_meta_pkl_is_refused() -> None:
    tok = char_tokenizer()
    n = len(tok.tokens)
    model = random_model(GPTConfig(n_layer=1, n_head=2, n_embd=16, n_hidden=32, n_ctx=32,
                                   vocab_size=n, vocab_padded=n, gelu="erf"), seed=17)
    d = folder("evil_meta")
    marker = d / "pwned"
    nanogpt_checkpoint(d, model, n, mask_buffers=False)
    with open(d / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": n, "itos": RunsCommand(marker)}, f)
    r = export_cli(d / "ckpt.pt", d / "model.bin")
    refused(r, marker, "meta.pkl")
    assert not (d / "model.bin").exists()


def test_malicious_pytorch_model_bin_is_refused() -> None:
    model = hf_model(18)
    d = hf_folder("evil_hf", model)
    marker = d / "pwned"
    sd = hf_state_dict(model, prefix="")
    sd["h.0.attn.bias"] = RunsCommand(marker)
    torch.save(sd, d / "pytorch_model.bin")
    r = export_cli(d, beside(d))
    refused(r, marker, "pytorch_model.bin")
    assert not beside(d).exists()


def test_train_resume_refuses_malicious_checkpoint() -> None:
    d = folder("evil_resume")
    marker = d / "pwned"
    torch.save({"format": "gptc", "config": {}, "model": {}, "tokenizer": RunsCommand(marker)}, d / "ckpt.pt")
    text = d / "text.txt"
    text.write_text("In the beginning God created the heaven and the earth.\n\nAnd God said\n" * 50)
    import train_tokenizer
    train_tokenizer.save(train_tokenizer.train(text.read_text(), 260), d / "tok.json")
    r = subprocess.run([PYTHON, str(REPO / "export" / "train.py"), "--train", str(text), "--heldout", str(text),
                        "--tokenizer", str(d / "tok.json"), "--out", str(d), "--resume"],
                       capture_output=True, timeout=300)
    assert not marker.exists(), "the checkpoint's command ran"
    assert r.returncode == 1 and "refusing to load" in r.stderr.decode(), r.stderr.decode()


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
def test_quantized_export_reads_back_within_half_a_step(dtype: str) -> None:
    """export.py --dtype on a Hugging Face folder: every matrix read back from the file (the
    reader the per-product tests of tests/test_paths.py share with run.c's kernels) lies within
    half a quantization step of the original weight (q4_0: a whole step where the value was
    clipped from 8 to 7); the norms, biases and positions stay exact; run generates from it."""
    from weight_file import MATRICES, read_tensors
    model = hf_model(16, width=64)
    d = hf_folder(f"hf_{dtype}", model)
    write_safetensors(d / "model.safetensors", hf_state_dict(model, prefix=""))
    r = subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(d), str(beside(d)), "--dtype", dtype],
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    _, _, tensors = read_tensors(beside(d))
    originals = dict(file_tensors(model))
    for name, t in tensors.items():
        want = originals[name].astype(np.float64)
        if name not in MATRICES:
            assert t.scales is None and np.array_equal(t.values, originals[name]), name
            continue
        q = t.values.astype(np.float64)
        step = np.abs(np.repeat(t.scales, 32, axis=-1)).astype(np.float64)
        err = np.abs(q * step * np.sign(np.repeat(t.scales, 32, axis=-1)) - want)
        if dtype == "q8_0":
            assert q.min() >= -127 and q.max() <= 127
            # 127 / max|w| is rounded to float32 before the product: up to ~1e-5 of a step more
            assert (err <= (0.5 + 1e-4) * step + 1e-12).all(), name
        else:
            assert q.min() >= -8 and q.max() <= 7
            groups = q.reshape(-1, 32)
            largest = np.abs(want.reshape(-1, 32)).argmax(axis=1)
            assert (groups[np.arange(len(groups)), largest] == -8).all(), name  # the largest is -8
            assert (err <= (np.where(q == 7, 1.0, 0.5) + 1e-4) * step + 1e-12).all(), name
    out = subprocess.run([str(RUN), str(beside(d)), "-i", "Hello", "-n", "8", "-s", "1"], capture_output=True)
    assert out.returncode == 0 and out.stdout.startswith(b"Hello"), out.stderr


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
def test_compare_reports_a_quantized_export_by_its_quantization_error(dtype: str) -> None:
    """compare.py with a quantized MODEL.bin: logits within the quantization bound, generations
    not compared; another model's weights in the same format go past the bound."""
    from weight_file import read_model, write_model
    shipped = REPO / "models" / "kjv.bin"
    model, tok = read_model(shipped)
    good = TMP / f"compare_kjv_{dtype}.bin"
    write_model(good, model, tok, dtype)
    compare = [PYTHON, str(REPO / "export" / "compare.py"), str(shipped)]
    r = subprocess.run(compare + [str(good)], capture_output=True, timeout=600)
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    assert out.count("quantization error") == 2 and "generations: not compared" in out
    other = TMP / f"compare_other_{dtype}.bin"
    write_model(other, random_model(model.config, seed=99), tok, dtype)
    r = subprocess.run(compare + [str(other)], capture_output=True, timeout=600)
    assert r.returncode == 1 and "TOO LARGE" in r.stdout.decode()


def test_a_mix_of_weight_types_per_tensor() -> None:
    """export.py --dtype q4_0 --tensor-type ...: each matrix in the type its first matching
    pattern names (layer 0's q8_0, the output head float32), every other matrix q4_0, the rest
    float32; --info counts them; the file reads back matrix by matrix as written, and run's
    logits stay within q4_0's quantization bound of the float32 export's."""
    from weight_file import WEIGHT_TYPES, read_header_and_table
    model = hf_model(17, width=64)
    d = hf_folder("hf_mixed", model)
    write_safetensors(d / "model.safetensors", hf_state_dict(model, prefix=""))
    export = [PYTHON, str(REPO / "export" / "export.py"), str(d)]
    r = subprocess.run(export + [str(TMP / "hf_mixed.bin"), "--dtype", "q4_0", "--tensor-type", "h.0.*=q8_0",
                                 "--tensor-type", "wte=f32"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    types = {name: wtype for name, wtype in read_header_and_table(TMP / "hf_mixed.bin")}
    names = {v: k for k, v in WEIGHT_TYPES.items()}
    for name, wtype in types.items():
        matrix = name.split(".", 2)[-1] in ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                             "mlp.c_proj.weight") or name in ("wte", "lm_head.weight")
        want = "f32" if not matrix or name == "wte" else "q8_0" if name.startswith("h.0.") else "q4_0"
        assert names[wtype] == want, (name, names[wtype])
    info = subprocess.run([str(RUN), str(TMP / "hf_mixed.bin"), "--info"], capture_output=True).stdout.decode()
    n_layer = model.config.n_layer
    assert f"weights: f32 (1 matrix), q8_0 (4 matrices), q4_0 ({4 * (n_layer - 1)} matrices)" in info, info
    r = subprocess.run(export + [str(TMP / "hf_mixed_f32.bin")], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    cmp = subprocess.run([PYTHON, str(REPO / "export" / "compare.py"), str(TMP / "hf_mixed_f32.bin"), str(TMP / "hf_mixed.bin")],
                         capture_output=True, timeout=600)
    assert cmp.returncode == 0 and "quantization error" in cmp.stdout.decode(), cmp.stdout.decode()
    bad = subprocess.run(export + [str(TMP / "hf_mixed_bad.bin"), "--tensor-type", "h.*=q3_k"], capture_output=True, timeout=300)
    assert bad.returncode == 1 and "unknown weight type 'q3_k'" in bad.stderr.decode(), bad.stderr
    assert not (TMP / "hf_mixed_bad.bin").exists()


def test_llama_cpp_mixes_choose_its_types() -> None:
    """--dtype q4_k_m, q5_k_m, q6_k: each matrix the type llama.cpp's llama-quantize gives its GGUF
    tensor (its published rule, research notes of llama-quant.cpp): the output head q6_k; the
    value projection (kept apart from the query and key, model.h's qkv_apart, as llama.cpp keeps
    attn_v; q6_k, one type for all three, fuses them) and the down projection q6_k on the layers use_more_bits picks (of 8: 0, 3, 6, 7: the
    first and last eighth and every third between), else q4_k (q5_k); an untied embedding the
    mix's own type.
    Where 256 does not divide a row (width 96): q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0; the down
    projection, whose rows are n_hidden = 512 long, keeps its k type."""
    from weight_file import WEIGHT_TYPES, read_header_and_table
    names = {v: k for k, v in WEIGHT_TYPES.items()}
    tok = small_gpt2_tokenizer(100)
    more_bits = {0, 3, 6, 7}
    for width, tied in ((256, False), (96, True)):
        cfg = GPTConfig(n_layer=8, n_head=4, n_kv_head=2, n_embd=width, n_hidden=512, n_ctx=64,
                        vocab_size=len(tok.tokens), vocab_padded=len(tok.tokens), norm="rms", pos="rotary",
                        ffn="swiglu", bias=0, tied_head=tied)
        model = random_model(cfg, seed=7, std=0.05)
        for dtype, base in (("q4_k_m", "q4_k"), ("q5_k_m", "q5_k"), ("q6_k", "q6_k")):
            path = TMP / f"mix_{dtype}_{width}.bin"
            write_model(path, model, tok, dtype)
            fallback = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}
            table = read_header_and_table(path)
            apart = dtype != "q6_k"  # q6_k gives the three one type: fused, as before
            assert sum(name.endswith("attn.c_attn.weight") for name, _ in table) == (0 if apart else 8)
            assert sum(name.endswith(("attn.q.weight", "attn.k.weight", "attn.v.weight")) for name, _ in table) == \
                (3 * 8 if apart else 0)
            for name, wtype in table:
                part = name.split(".", 2)[-1]
                layer = int(name.split(".")[1]) if name.startswith("h.") else -1
                if not (part.endswith("weight") and ("attn" in part or "mlp" in part)) and name not in ("wte", "lm_head.weight"):
                    want = "f32"
                elif name == "lm_head.weight" or (name == "wte" and tied):
                    want = "q6_k"
                elif part in ("attn.v.weight", "mlp.c_proj.weight") and layer in more_bits and dtype != "q6_k":
                    want = "q6_k"
                else:
                    want = base
                cols = 512 if part == "mlp.c_proj.weight" else width
                if want != "f32" and cols % 256:
                    want = fallback[want]
                assert names[wtype] == want, (dtype, width, name, names[wtype], want)
            assert subprocess.run([str(RUN), str(path), "-n", "4", "-t", "0", "-i", "a"], capture_output=True).returncode == 0


def test_export_never_writes_over_its_input() -> None:
    """The output may not be the SOURCE file, by its name, a symlink or a hard link, nor any file
    in a SOURCE folder: one line naming both, exit 1, every input byte for byte as it was (a GGUF
    through its own reader, a Hugging Face folder's config.json and a new file in it)."""
    import os
    from test_gguf_files import tiny_gguf
    d = folder("own_input")
    gguf = d / "copy.gguf"
    tiny_gguf().write(gguf)
    model = hf_model(16)
    hf = hf_folder("own_input_hf", model)
    os.symlink(gguf.name, d / "link.gguf")
    os.link(gguf, d / "hard.gguf")
    os.link(hf / "config.json", d / "hard_config.json")
    before = {p: p.read_bytes() for p in [gguf, *hf.iterdir()]}
    cases = [(gguf, gguf, "itself"), (gguf, d / "link.gguf", "a symlink to the source"),
             (gguf, d / "hard.gguf", "hard link"), (hf, hf / "config.json", "inside the source folder"),
             (hf, hf / "model.bin", "inside the source folder"), (hf, d / "hard_config.json", "hard link")]
    for source, out, why in cases:
        r = export_cli(source, out)
        err = r.stderr.decode()
        assert r.returncode == 1 and err.count("\n") == 1 and err.startswith("error: refusing to write"), err
        assert why in err and str(out) in err and str(source) in err, err
    assert {p: p.read_bytes() for p in before} == before
    assert not (hf / "model.bin").exists()


def test_reference_shapes_are_the_pytorch_models() -> None:
    """config.reference_shapes, which checks a SOURCE's weights without PyTorch, names exactly the
    weights (and shapes) of export/model.py's GPT, for each block design."""
    from config import reference_shapes
    from model import GPT
    designs = [dict(), dict(bias=False, pos="sinusoidal", tied_head=False),
               dict(norm="rms", pos="rotary", ffn="swiglu", bias=1, n_kv_head=1),
               dict(norm="rms", pos="rotary", ffn="swiglu", bias=7, n_head=4, n_kv_head=2, tied_head=False)]
    for design in designs:
        cfg = GPTConfig(n_layer=2, n_embd=32, n_hidden=48, n_ctx=16, vocab_size=40, vocab_padded=48,
                        **{"n_head": 2, **design})
        want = {k: tuple(v.shape) for k, v in GPT(cfg).state_dict().items()}
        assert reference_shapes(cfg) == want, design


def without(modules: str, *args: str) -> subprocess.CompletedProcess:
    """export.py on a Python where importing each of modules (comma-separated) fails."""
    hide = "import runpy, sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules.split(",")) + \
        f"sys.argv = {[str(REPO / 'export' / 'export.py'), *args]!r}\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    return subprocess.run([PYTHON, "-c", hide], capture_output=True, timeout=300)


def test_gguf_and_safetensors_export_with_numpy_alone() -> None:
    """A GGUF file and Hugging Face safetensors folders (GPT-2's, and a Llama's with a chat template)
    export with PyTorch not importable, byte for byte as with it; without jinja2 too when there is no
    chat template (a nanoGPT checkpoint needs PyTorch, not jinja2); a model with a chat template and
    no jinja2 is one line saying what to install."""
    from chat_fixtures import family_folder
    from test_gguf_files import tiny_gguf
    d = folder("numpy_alone")
    gguf = tiny_gguf().write(d / "tiny.gguf")
    model = hf_model(16)
    hf = hf_folder("numpy_alone_hf", model)
    write_safetensors(hf / "model.safetensors", hf_state_dict(model, prefix="transformer."))
    chat = family_folder("qwen2.5")
    for source, hidden in ((gguf, "torch,jinja2"), (hf, "torch,jinja2"), (chat, "torch")):
        with_all = export_cli(source, d / "with.bin")
        alone = without(hidden, str(source), str(d / "alone.bin"))
        assert with_all.returncode == 0 and alone.returncode == 0, alone.stderr.decode()
        assert (d / "with.bin").read_bytes() == (d / "alone.bin").read_bytes(), source
    r = without("jinja2", str(chat), str(d / "refused.bin"))
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1 and "apt install python3-jinja2" in err, err
    chars = [t.decode() for t in char_tokenizer().tokens]
    model = random_model(GPTConfig(n_layer=1, n_head=2, n_embd=32, n_hidden=128, n_ctx=32, vocab_size=len(chars),
                                   vocab_padded=len(chars), gelu="erf", bias=False), seed=2)
    nanogpt_checkpoint(d, model, len(chars), mask_buffers=False)
    with open(d / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                     "stoi": {ch: i for i, ch in enumerate(chars)}}, f)
    r = without("jinja2", str(d / "ckpt.pt"), str(d / "nano.bin"))
    assert r.returncode == 0, r.stderr.decode()
    r = without("torch", str(d / "ckpt.pt"), str(d / "nano.bin"))
    assert r.returncode == 1 and "needs PyTorch" in r.stderr.decode() and r.stderr.decode().count("\n") == 1


def llama_folder(name: str, width: int, hidden: int) -> Path:
    """A Llama-shaped Hugging Face folder (two layers, GPT-2's first 200 merges) of that width and
    feed-forward width."""
    from llama_sources import write_hf_folder
    from test_llama import LLAMA, gpt2_files
    n = 256 + 200
    cfg = GPTConfig(n_layer=2, n_head=2, n_kv_head=1, n_embd=width, n_hidden=hidden, n_ctx=64, vocab_size=n,
                    vocab_padded=n, tied_head=False, **LLAMA)
    return write_hf_folder(TMP / name, random_model(cfg, seed=width), "llama", "F32", 1, gpt2_files(200))


@pytest.mark.parametrize("dtype,down,rest", [("Q4_K", "q4_k", "q5_0"), ("q5_k", "q5_k", "q5_1"),
                                             ("q6_k", "q6_k", "q8_0"), ("Q8_0", "q8_0", "q8_0")])
def test_every_k_type_falls_back_per_matrix_and_the_summary_says_what_was_written(dtype: str, down: str,
                                                                                  rest: str) -> None:
    """Width 128, feed-forward 256: each k type falls back as llama.cpp's quantizer does where 256
    does not divide a row (every matrix but the down projection, whose rows are 256 long), llama.cpp's
    spellings accepted; the export's summary is --info's line of the file it wrote."""
    from weight_file import WEIGHT_TYPES, read_header_and_table
    d = llama_folder("dtype_128", 128, 256)
    r = export_cli_with(d, beside(d), "--dtype", dtype)
    assert r.returncode == 0, r.stderr.decode()
    names = {v: k for k, v in WEIGHT_TYPES.items()}
    types = {name: names[t] for name, t in read_header_and_table(beside(d))}
    for name, wtype in types.items():
        matrix = name.split(".", 2)[-1] in ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.gate.weight",
                                             "mlp.c_fc.weight", "mlp.c_proj.weight") or name in ("wte", "lm_head.weight")
        assert wtype == (down if name.endswith("mlp.c_proj.weight") else rest if matrix else "f32"), (name, wtype)
    info = subprocess.run([str(RUN), str(beside(d)), "--info"], capture_output=True, text=True).stdout
    said = r.stderr.decode().strip().split("; ", 1)[1]
    assert said.startswith("weights: ") and said in info, (said, info)


def test_a_type_of_32_on_rows_it_does_not_divide_is_refused_and_the_k_types_reach_f16() -> None:
    """Width 48 (a multiple of 16, not of 32): --dtype q8_0 is refused naming the first matrix and
    what fits, nothing written; --dtype q4_k falls back to f16 there, as llama.cpp's does."""
    d = llama_folder("dtype_48", 48, 256)
    beside(d).unlink(missing_ok=True)
    r = export_cli_with(d, beside(d), "--dtype", "q8_0")
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1 and "tensor wte's rows of 48 values are not a multiple of q8_0's 32" in err
    assert "f16 and f32 fit any row" in err and not beside(d).exists()
    r = export_cli_with(d, beside(d), "--dtype", "q4_k")
    assert r.returncode == 0, r.stderr.decode()
    assert "weights: q4_k (2 matrices), f16 (" in r.stderr.decode(), r.stderr.decode()


def export_cli_with(source: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(source), str(out), *args],
                          capture_output=True, timeout=300)


def test_progress_shows_on_a_terminal_only() -> None:
    """On a terminal (a pty as stderr) the progress line names tensors as they are converted and
    is erased before the summary; on a pipe, or with --quiet, there is only the summary."""
    import os
    import pty
    d = llama_folder("progress", 128, 256)
    env = {**os.environ, "EXPORT_PROGRESS_AFTER": "0"}
    for quiet in ((), ("--quiet",)):
        leader, follower = pty.openpty()
        p = subprocess.Popen([PYTHON, str(REPO / "export" / "export.py"), str(d), str(beside(d)), "--dtype", "q4_k_m",
                              *quiet], stderr=follower, stdout=subprocess.DEVNULL, env=env)
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        assert p.wait(timeout=120) == 0
        os.close(leader)
        assert (b"tensor 1 of " in shown and b"MB/s" in shown and b"\r\x1b[K" in shown) == (not quiet), shown
        assert shown.rstrip().split(b"\n")[-1].split(b"\r\x1b[K")[-1].startswith(b"wrote "), shown
    piped = subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(d), str(beside(d)), "--dtype", "q4_k_m"],
                           capture_output=True, env=env, timeout=120)
    assert piped.returncode == 0 and piped.stderr.count(b"\n") == 1 and piped.stderr.startswith(b"wrote ")


def test_a_folder_that_is_no_model_folder_is_named() -> None:
    """A SOURCE folder without config.json: a folder of GGUF files says to pass one of them, any
    other says it is not a Hugging Face folder; one line each, no traceback."""
    d = folder("no_config")
    r = export_cli(d, TMP / "no_config.bin")
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1 and "has no config.json: not a Hugging Face model folder" in err
    (d / "a-Q4_K_M.gguf").write_bytes(b"GGUF")
    (d / "a-Q8_0.gguf").write_bytes(b"GGUF")
    r = export_cli(d, TMP / "no_config.bin")
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1, err
    assert "is a folder of 2 GGUF files, not a Hugging Face folder: pass one of them, e.g." in err and "a-Q4_K_M.gguf" in err
