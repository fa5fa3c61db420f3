"""Write a tokenizer-only file (model.h format with n_layer = 0) from a tokenizer.

usage: export_tokenizer.py TOKENIZER OUT.bin [--kind gpt2|cl100k] [--eos TOKEN]

TOKENIZER is
  - a SentencePiece tokenizer.model, or a Hugging Face tokenizer.json (export/tokenizer_files.py
    reads both; what run.c does not implement exactly is refused, naming it); --eos names the
    end-of-text token of a tokenizer.json whose folder's configuration does not;
  - tiktoken ranks: OpenAI's `.tiktoken` format: one `base64(token bytes) rank` per line (what
    tiktoken caches and users have), or the npm package tiktoken's `encoders/NAME.json`:
    {"pat_str", "special_tokens", "bpe_ranks"}, where bpe_ranks is "! FIRST_RANK tok tok ..."
    with base64 tokens in rank order (a new "! RANK" starts another run of ranks).
The pre-tokenizer kind comes from --kind, else from the JSON's pattern, else from the file name
(cl100k_base.tiktoken -> cl100k). Special tokens come from the JSON, or for a .tiktoken file
from tiktoken's published tables (cl100k_base: <|endoftext|> 100257, FIM tokens 100258-100260,
<|endofprompt|> 100276; gpt2/r50k_base: <|endoftext|> 50256). Ids no token uses are filled with
placeholder special tokens that encoding never produces.

`run OUT.bin --tokenize` then encodes with it; generating with it is refused (no model).
"""
from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokenizer_files import O200K_PATTERN, folder_eos, sentencepiece_vocab, tokenizer_json_vocab  # noqa: E402
from output_files import refuse_input_as_output  # noqa: E402
from weight_file import RANK_NONE, ExportError, TokenizerData, write_model  # noqa: E402

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
KNOWN_SPECIALS = {
    "cl100k": {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
               "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276},
    "gpt2": {"<|endoftext|>": 50256},
    "o200k": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}


def parse_compact(bpe_ranks: str) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    fields = bpe_ranks.split()
    i, rank = 0, None
    while i < len(fields):
        if fields[i] == "!":
            rank = int(fields[i + 1])
            i += 2
            continue
        if rank is None:
            raise ExportError("bpe_ranks does not start with '! RANK'")
        ranks[base64.b64decode(fields[i])] = rank
        rank += 1
        i += 1
    return ranks


def parse_tiktoken(text: str, path: Path) -> dict[bytes, int]:
    ranks = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ExportError(f"{path}:{n}: expected 'base64 rank', found {line[:40]!r}")
        try:
            ranks[base64.b64decode(parts[0], validate=True)] = int(parts[1])
        except ValueError as e:
            raise ExportError(f"{path}:{n}: {e}") from e
    return ranks


def load_ranks(path: Path, kind: str | None) -> TokenizerData:
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ExportError(f"cannot read {path}: {e}") from e
    if raw.lstrip().startswith("{"):
        d = json.loads(raw)
        ranks = parse_compact(d["bpe_ranks"])
        specials = d.get("special_tokens", {})
        if kind is None:
            kind = {GPT2_PATTERN: "gpt2", CL100K_PATTERN: "cl100k", O200K_PATTERN: "o200k"}.get(d.get("pat_str"))
            if kind is None:
                raise ExportError(f"{path}: its split pattern is not gpt2's, cl100k_base's or o200k_base's")
    else:
        ranks = parse_tiktoken(raw, path)
        if kind is None:
            kind = "cl100k" if "cl100k" in path.name else "o200k" if "o200k" in path.name else \
                "gpt2" if ("gpt2" in path.name or "r50k" in path.name) else None
            if kind is None:
                raise ExportError(f"{path}: cannot tell the pre-tokenizer from the name; pass --kind")
        specials = KNOWN_SPECIALS[kind]
    n = max([*ranks.values(), *specials.values()]) + 1
    tokens: list[bytes | None] = [None] * n
    rank_of = [RANK_NONE] * n
    for tok, r in ranks.items():  # in tiktoken, a mergeable token's id is its rank
        tokens[r] = tok
        rank_of[r] = r
    for name, i in specials.items():
        if tokens[i] is not None:
            raise ExportError(f"{path}: special token {name} reuses id {i}")
        tokens[i] = name.encode()
    for i in range(n):
        if tokens[i] is None:
            tokens[i] = f"<|unused_{i}|>".encode()
    return TokenizerData(kind, tokens, rank_of, specials.get("<|endoftext|>", -1))


def load_tokenizer(path: Path, kind: str | None, eos: str | None) -> TokenizerData:
    """Any TOKENIZER kind above."""
    if path.suffix == ".model":
        return sentencepiece_vocab(path)
    if path.suffix == ".json":
        try:
            head = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ExportError(f"cannot read {path}: {e}") from e
        if isinstance(head, dict) and "model" in head:  # Hugging Face's tokenizer.json
            return tokenizer_json_vocab(path, eos if eos is not None else folder_eos(path.parent))
    return load_ranks(path, kind)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizer", type=Path, help="tokenizer.model, tokenizer.json, a .tiktoken file or tiktoken's JSON")
    ap.add_argument("out", type=Path)
    ap.add_argument("--kind", choices=["gpt2", "cl100k", "o200k"], help="the pre-tokenizer of tiktoken ranks")
    ap.add_argument("--eos", help="the end-of-text token of a tokenizer.json (its text)")
    args = ap.parse_args()
    try:
        refuse_input_as_output(args.out, [args.tokenizer, *(args.tokenizer.parent / name for name in
                                                           ("config.json", "tokenizer_config.json"))])
        tok = load_tokenizer(args.tokenizer, args.kind, args.eos)
        size = write_model(args.out, None, tok).size
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"wrote {args.out}: {size} bytes, {len(tok.tokens)} tokens ({tok.kind})", file=sys.stderr)


if __name__ == "__main__":
    main()
