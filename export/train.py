"""Train the reference GPT (export/model.py) on a text file.

usage: train.py --train TRAIN.txt --heldout HELDOUT.txt --tokenizer TOK.json --out DIR [options]

Reads the texts (documents separated by a blank line; each document starts with
<|endoftext|>) and a vocabulary from train_tokenizer.py. Writes into DIR:
  ckpt.pt       our checkpoint (export.py SOURCE kind 1), rewritten atomically at every
                evaluation; with --resume training continues from it after a kill
  best.pt       the checkpoint with the lowest held-out loss so far (what `make model` ships)
  loss.png      training and held-out loss curves (matplotlib)
  log.txt       one line per evaluation
Optimiser: AdamW (weight decay on matrices only), linear warm-up then cosine decay to 10% of
the peak learning rate, gradient clipping at 1.0, dropout on the residual branches. With --bf16
(default) matrix products run in bfloat16 autocast, several times faster on CPUs with AMX or
AVX512-BF16; the weights and the optimiser stay float32. A progress line shows step, loss,
tokens/s and the time left.
"""
from __future__ import annotations

import argparse
import io
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export import load_source  # noqa: E402
from source_checkpoint import read_checkpoint, save_checkpoint  # noqa: E402
from output_files import write_bytes  # noqa: E402
from weight_file import ExportError, TokenizerData  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from train_tokenizer import Encoder, load as load_tokenizer  # noqa: E402


def encode_documents(text: str, tok: TokenizerData) -> np.ndarray:
    enc = Encoder(tok)
    ids: list[int] = []
    for doc in text.split("\n\n"):
        ids.append(tok.eot_id)
        ids.extend(enc.encode(doc if doc.endswith("\n") else doc + "\n"))
    return np.array(ids, dtype=np.int64)


def lr_at(step: int, max_steps: int, warmup: int, peak: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, max_steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@torch.no_grad()
def heldout_loss(model: GPT, data: np.ndarray, ctx: int, max_windows: int = 10**9) -> float:
    """Mean loss over consecutive non-overlapping windows of the held-out ids."""
    model.eval()
    total, count = 0.0, 0
    starts = list(range(0, len(data) - 1, ctx))[:max_windows]
    for i in range(0, len(starts), 16):
        batch = [data[s:s + ctx + 1] for s in starts[i:i + 16]]
        batch = [b for b in batch if len(b) == ctx + 1]
        if not batch:
            continue
        xy = torch.from_numpy(np.stack(batch))
        logits = model(xy[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), xy[:, 1:].reshape(-1), reduction="sum")
        total += float(loss)
        count += xy[:, 1:].numel()
    model.train()
    return total / max(1, count)


def plot(history: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [h["step"] for h in history]
    ax.plot(steps, [h["train"] for h in history], label="training loss")
    ax.plot(steps, [h["heldout"] for h in history], label="held-out loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    picture = io.BytesIO()
    fig.savefig(picture, format="png", dpi=100)
    plt.close(fig)
    write_bytes(path, picture.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", type=Path, required=True)
    ap.add_argument("--heldout", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-ctx", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--stop-step", type=int, default=None,
                    help="stop after this step; the learning-rate schedule still spans --steps")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                    help="bfloat16 autocast for the forward pass (default on)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--resume", action="store_true", help="continue from OUT/ckpt.pt when it exists")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    ckpt_path = args.out / "ckpt.pt"

    tok = load_tokenizer(args.tokenizer)
    train_ids = encode_documents(args.train.read_text(encoding="utf-8"), tok)
    held_ids = encode_documents(args.heldout.read_text(encoding="utf-8"), tok)
    print(f"train {len(train_ids)} tokens, held-out {len(held_ids)} tokens, vocab {len(tok.tokens)}",
          file=sys.stderr)

    step, history = 0, []
    if args.resume and ckpt_path.exists():
        try:  # read as data only: safe_pickle refuses a file that asks to run code
            model, _ = load_source(str(ckpt_path))
            state = read_checkpoint(ckpt_path)
        except ExportError as e:
            sys.exit(f"error: {e}")
        step, history = state["step"], state["history"]
        torch.set_rng_state(state["torch_rng"])
        print(f"resumed at step {step}", file=sys.stderr)
    else:
        torch.manual_seed(args.seed)
        cfg = GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd,
                        n_hidden=4 * args.n_embd, n_ctx=args.n_ctx, vocab_size=len(tok.tokens),
                        vocab_padded=len(tok.tokens), gelu="tanh", bias=True, tied_head=True)
        model = GPT(cfg).init_random(args.seed, std=0.02)
        with torch.no_grad():  # start LayerNorms at identity
            for name, p in model.named_parameters():
                if "ln_" in name:
                    p.fill_(1.0 if name.endswith("weight") else 0.0)
    model.set_cache("f32")  # training keeps float32 keys and values (the cache is run.c's)
    for block in model.transformer.h:
        block.dropout = args.dropout
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    if step > 0:
        opt.load_state_dict(state["optimizer"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{n_params / 1e6:.2f}M parameters", file=sys.stderr)

    ctx, B = model.config.n_ctx, args.batch_size
    gen = np.random.default_rng(args.seed + step)  # a resumed run draws new, still fixed, batches
    t_start, tokens_done, running = time.time(), 0, None
    last = min(args.steps, args.stop_step or args.steps)
    while step < last:
        lr = lr_at(step, args.steps, args.warmup, args.lr)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = gen.integers(0, len(train_ids) - ctx - 1, size=B)
        xy = torch.from_numpy(np.stack([train_ids[s:s + ctx + 1] for s in starts]))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(xy[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_done += B * ctx
        running = float(loss) if running is None else 0.98 * running + 0.02 * float(loss)
        if step % 10 == 0:
            elapsed = time.time() - t_start
            rate = tokens_done / elapsed
            left = (args.steps - step) * B * ctx / rate
            print(f"\rstep {step}/{args.steps} loss {running:.3f} lr {lr:.2e} {rate:.0f} tok/s "
                  f"{elapsed / 60:.1f} min, {left / 60:.1f} min left ", end="", file=sys.stderr)
        if step % args.eval_every == 0 or step == last:
            held = heldout_loss(model, held_ids, ctx)  # float32: the figure the C program reproduces
            history.append({"step": step, "train": running, "heldout": held,
                            "minutes": (time.time() - t_start) / 60})
            line = f"step {step} train {running:.4f} heldout {held:.4f} nats/token"
            print("\n" + line, file=sys.stderr)
            with open(args.out / "log.txt", "a") as f:
                f.write(line + "\n")
            save_checkpoint(ckpt_path, model, tok, {"step": step, "history": history,
                                                    "optimizer": opt.state_dict(),
                                                    "torch_rng": torch.get_rng_state()})
            if held <= min(h["heldout"] for h in history):
                save_checkpoint(args.out / "best.pt", model, tok, {"step": step, "heldout": held})
            plot(history, args.out / "loss.png")
    print(f"done: {step} steps in {(time.time() - t_start) / 60:.1f} min", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except ExportError as e:  # a checkpoint or picture that cannot be written
        sys.exit(f"error: {e}")
