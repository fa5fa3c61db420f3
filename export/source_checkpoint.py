"""SOURCE kinds 1 and 2: our own checkpoints (export/train.py's) and nanoGPT's ckpt.pt, torch.save
files read as data (safe_pickle.py), never run. Also the writer of our checkpoints."""
from __future__ import annotations

import io
from pathlib import Path

from config import GPTConfig, Weights, as_arrays, same, strip_prefix, weights_of
from output_files import ExportError, write_bytes
from safe_pickle import UnsafeFile, load_torch
from tokenizer_files import char_vocab, gpt2_vocab
from weight_file import TokenizerData


def read_checkpoint(path: Path) -> object:
    """A torch.save file (checkpoint, pytorch_model.bin) read as data, never run: safe_pickle
    admits plain containers, numbers, strings and tensors, and refuses anything else."""
    try:
        import torch
        torch.set_num_threads(2)
    except ImportError as e:
        raise ExportError(f"'{path}' is a PyTorch file (torch.save): reading it needs PyTorch (Debian: "
                          "apt install python3-torch)") from e
    try:
        return load_torch(path)
    except UnsafeFile as e:
        raise ExportError(f"refusing to load '{path}': {e}") from e
    except Exception as e:  # a corrupt archive or pickle raises many kinds
        raise ExportError(f"cannot read checkpoint '{path}': {e}") from e


def load_own(ckpt: dict, path: Path) -> tuple[Weights, TokenizerData]:
    try:
        cfg = GPTConfig(**ckpt["config"])
        tok = TokenizerData.from_dict(ckpt["tokenizer"])
    except (KeyError, TypeError) as e:
        raise ExportError(f"{path}: bad checkpoint config or tokenizer ({e})") from e
    return weights_of(cfg, ckpt["model"], str(path)), tok


def load_nanogpt(ckpt: dict, path: Path, gpt2_dir: Path) -> tuple[Weights, TokenizerData]:
    args = ckpt["model_args"]
    try:
        n_embd = int(args["n_embd"])
        known = {"n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout"}
        unknown = set(args) - known
        if unknown:
            raise ExportError(f"{path}: unknown model_args {sorted(unknown)}")
        meta = path.parent / "meta.pkl"
        tok = char_vocab(meta) if meta.exists() else gpt2_vocab(gpt2_dir)
        cfg = GPTConfig(n_layer=int(args["n_layer"]), n_head=int(args["n_head"]), n_embd=n_embd,
                        n_hidden=4 * n_embd, n_ctx=int(args["block_size"]),
                        vocab_size=len(tok.tokens), vocab_padded=int(args["vocab_size"]),
                        ln_eps=1e-5, gelu="erf", bias=bool(args["bias"]), tied_head=True)
    except KeyError as e:
        raise ExportError(f"{path}: model_args lacks {e}") from e
    if cfg.vocab_padded < cfg.vocab_size:
        raise ExportError(f"{path}: model vocab_size {cfg.vocab_padded} is smaller than the "
                          f"tokenizer's {cfg.vocab_size} tokens")
    sd = as_arrays(strip_prefix(ckpt["model"], "_orig_mod."))
    sd = {k: v for k, v in sd.items() if not k.endswith(".attn.bias")}  # causal-mask buffers
    if "lm_head.weight" in sd and "transformer.wte.weight" in sd:
        cfg.tied_head = same(sd["lm_head.weight"], sd["transformer.wte.weight"])
    return weights_of(cfg, sd, str(path)), tok


def save_checkpoint(path: Path, model, tok: TokenizerData, extra: dict | None = None) -> None:
    """Our own checkpoint format (SOURCE kind 1): config, state dict, tokenizer."""
    import torch
    ckpt = {"format": "gptc", "config": model.config.__dict__.copy(),
            "model": model.state_dict(), "tokenizer": tok.to_dict()}
    ckpt.update(extra or {})
    buffer = io.BytesIO()  # torch.save seeks; the file itself is written front to back
    torch.save(ckpt, buffer)
    write_bytes(path, buffer.getvalue())
