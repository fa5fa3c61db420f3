"""Train a byte-level BPE vocabulary on a text file, and encode text with it.

usage: train_tokenizer.py TEXT OUT.json --vocab-size N

Reads TEXT (UTF-8), splits it with GPT-2's pre-tokenization pattern (the one run.c's gpt2
mode implements; here through the `regex` module, Debian's python3-regex), and learns merges
the usual way: start from the 256 single bytes, repeatedly merge the most frequent adjacent
pair within pre-tokens (ties: the smaller pair of byte strings), until N tokens exist, the
last of them <|endoftext|>. Deterministic for a given input.

Writes OUT.json: {"kind": "gpt2", "tokens": [hex of each token's bytes], "ranks": [...],
"eot_id": N-1}. Ranks are the ids (a merge's rank is its order), as in tiktoken's files;
export.py embeds the vocabulary in model files, train.py encodes its corpus with `encode`.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import regex

sys.path.insert(0, str(Path(__file__).resolve().parent))
from output_files import ExportError, write_text  # noqa: E402
from weight_file import RANK_NONE, TokenizerData  # noqa: E402

# GPT-2's pre-tokenization pattern (published with GPT-2's encoder.py).
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
EOT = b"<|endoftext|>"


def pretokenize(text: str) -> list[bytes]:
    return [m.encode("utf-8") for m in GPT2_PATTERN.findall(text)]


def train(text: str, vocab_size: int, log: bool = False) -> TokenizerData:
    if vocab_size < 257:
        raise ValueError("vocab_size must be at least 257 (256 bytes and <|endoftext|>)")
    word_counts = collections.Counter(pretokenize(text))
    words = [[bytes([b]) for b in w] for w in word_counts]  # each word as a list of symbols
    freqs = list(word_counts.values())
    pair_count: collections.Counter = collections.Counter()
    where: dict[tuple[bytes, bytes], set[int]] = collections.defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[a, b] += freqs[wi]
            where[a, b].add(wi)

    tokens = [bytes([b]) for b in range(256)]
    known = set(tokens)
    while len(tokens) < vocab_size - 1 and pair_count:
        # most frequent pair; ties broken by the smaller byte strings, so the result is stable
        best = min(pair_count.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if pair_count[best] <= 0:
            break
        merged = best[0] + best[1]
        if merged not in known:
            tokens.append(merged)
            known.add(merged)
        for wi in list(where.pop(best, ())):
            w, f = words[wi], freqs[wi]
            for a, b in zip(w, w[1:]):  # forget this word's old pairs
                pair_count[a, b] -= f
                if pair_count[a, b] == 0:
                    del pair_count[a, b]
                where[a, b].discard(wi)
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for a, b in zip(out, out[1:]):
                pair_count[a, b] += f
                where[a, b].add(wi)
        pair_count.pop(best, None)
        if log and len(tokens) % 256 == 0:
            print(f"{len(tokens)} tokens", file=sys.stderr)
    tokens.append(EOT)
    ranks = list(range(len(tokens) - 1)) + [RANK_NONE]
    return TokenizerData("gpt2", tokens, ranks, len(tokens) - 1)


class Encoder:
    """tiktoken's algorithm, as run.c does it: a pre-token that is a token stays whole; else
    merge the adjacent pair whose concatenation has the lowest rank, leftmost first."""

    def __init__(self, tok: TokenizerData):
        self.rank = {t: r for t, r in zip(tok.tokens, tok.ranks) if r != RANK_NONE}
        self.id = {t: i for i, t in enumerate(tok.tokens)}
        self.cache: dict[bytes, list[int]] = {}

    def encode_piece(self, piece: bytes) -> list[int]:
        if piece in self.rank:
            return [self.id[piece]]
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            ranks = [self.rank.get(parts[i] + parts[i + 1], RANK_NONE) for i in range(len(parts) - 1)]
            best = min(range(len(ranks)), key=lambda i: ranks[i])
            if ranks[best] == RANK_NONE:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        return [self.id[p] for p in parts]

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in pretokenize(text):
            ids = self.cache.get(piece)
            if ids is None:
                ids = self.cache[piece] = self.encode_piece(piece)
            out.extend(ids)
        return out


def save(tok: TokenizerData, path: Path) -> None:
    write_text(path, json.dumps({"kind": tok.kind, "tokens": [t.hex() for t in tok.tokens],
                                 "ranks": tok.ranks, "eot_id": tok.eot_id}))


def load(path: Path) -> TokenizerData:
    d = json.loads(Path(path).read_text())
    return TokenizerData(d["kind"], [bytes.fromhex(t) for t in d["tokens"]], d["ranks"], d["eot_id"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("text", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--vocab-size", type=int, default=2048)
    args = ap.parse_args()
    tok = train(args.text.read_text(encoding="utf-8"), args.vocab_size, log=True)
    try:
        save(tok, args.out)
    except ExportError as e:
        sys.exit(f"error: {e}")
    print(f"wrote {args.out}: {len(tok.tokens)} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
