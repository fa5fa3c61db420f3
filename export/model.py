"""The PyTorch reference GPT: every switch of the weight file (model.h's header), GPT-2's block
and the Llama family's in one module, and a `generate` that uses exactly run.c's sampler and
random generator (sampler.h).

The two block designs differ in four places, each a switch of GPTConfig: the norm (LayerNorm
or RMSNorm), the positions (a table added to the embedding, or rotary positions applied to
each head's query and key), the feed-forward layer (GELU MLP or SwiGLU) and the key/value heads
(n_kv_head: as many as query heads, or fewer, shared). Biases are per kind of tensor.
Like run.c, it rounds keys and values to binary16 as its key/value cache stores them, unless
told `set_cache("f32")` (run's `--cache f32`; training does) or `set_cache("q8_0")`.

Reads nothing and writes nothing by itself; export.py, compare.py, train.py and the tests
import it. Module names follow GPT-2 / nanoGPT (transformer.wte, h.N.attn.c_attn, ...), so
their state dicts load directly; the SwiGLU gate is h.N.mlp.gate.

Run `python3 export/model.py --help` for a self-check that builds a tiny model and runs it.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


sys.path.insert(0, str(Path(__file__).resolve().parent))
from config import BIAS_ATTN_OUT, BIAS_FFN, BIAS_NORM, BIAS_QKV, GPTConfig, Weights  # noqa: E402


def sinusoid_table(n_ctx: int, n_embd: int) -> torch.Tensor:
    """"Attention Is All You Need" section 3.5: [n_ctx, n_embd], computed in float64 and
    rounded to float32 once, as run.c does."""
    pos = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    i = torch.arange(0, n_embd, 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), i / n_embd)
    table = torch.zeros(n_ctx, n_embd, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


def rotary_tables(n_ctx: int, dims: int, theta: float, freqs: list | None = None, scale: float = 1.0) -> tuple:
    """cos and sin of p * f_i, times scale, [n_ctx, dims / 2] (dims: a head's rotated
    dimensions), f_i = theta^(-2i/dims) or the file's frequencies: computed in float64 and
    rounded to float32 once, as run.c does (model.h)."""
    i = torch.arange(0, dims, 2, dtype=torch.float64)
    f = torch.tensor(freqs, dtype=torch.float32).double() if freqs is not None else \
        torch.pow(torch.tensor(theta, dtype=torch.float32).double(), -i / dims)
    angle = torch.arange(n_ctx, dtype=torch.float64)[:, None] * f[None, :]
    scale = float(torch.tensor(scale, dtype=torch.float32))
    return (torch.cos(angle) * scale).float(), (torch.sin(angle) * scale).float()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions (RoFormer, section 3.4.2): [B, heads, T, hs] with dimensions (2i, 2i+1)
    of each head rotated together by the angle of position t and pair i; cos, sin [T, r / 2]
    rotate the first r dimensions, the rest stay (partial rotary)."""
    r = 2 * cos.shape[-1]
    x0, x1 = x[..., 0:r:2], x[..., 1:r:2]
    out = x.clone()
    out[..., 0:r:2] = x0 * cos - x1 * sin
    out[..., 1:r:2] = x0 * sin + x1 * cos
    return out


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch 1.13's has no bias=False)."""

    def __init__(self, n: int, bias: bool, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [.., n] -> [.., n]
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """RMSNorm (Zhang and Sennrich 2019): x / sqrt(mean(x^2) + eps) * weight, no bias."""

    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [.., n] -> [.., n]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(c: GPTConfig, n: int = 0) -> nn.Module:
    """The block's norm over n values (n_embd unless given)."""
    n = n or c.n_embd
    return RMSNorm(n, c.ln_eps) if c.norm == "rms" else LayerNorm(n, c.has_bias(BIAS_NORM), c.ln_eps)


CACHES = ("f16", "f32", "q8_0")  # run's --cache


def q8_0_cache_round(x: torch.Tensor) -> torch.Tensor:
    """Keys, values or queries [..., head_size] as run.c's q8_0 cache holds them: each group of 32
    dimensions (the last one shorter when head_size is not a multiple of 32) quantized as
    kernels/quant.h does, scale = max|x| / 127, quant = round_half_even(x * (127 / max|x|)), all
    in float32; returned as quant * scale, the number each quant stands for."""
    out = torch.empty_like(x)
    for d0 in range(0, x.shape[-1], 32):
        group = x[..., d0:d0 + 32]
        amax = group.abs().amax(dim=-1, keepdim=True)
        inv = torch.where(amax > 0, torch.tensor(127.0) / amax, torch.zeros_like(amax))
        quant = torch.round((group * inv).clamp(-127.0, 127.0))
        out[..., d0:d0 + 32] = quant * (amax / 127.0)
    return out


class CausalSelfAttention(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        hs = c.head_size
        qkv = (c.n_head + 2 * c.n_kv_head) * hs  # n_head queries, then n_kv_head keys and values
        self.c_attn = nn.Linear(c.n_embd, qkv, bias=c.has_bias(BIAS_QKV))
        self.c_proj = nn.Linear(c.n_head * hs, c.n_embd, bias=c.has_bias(BIAS_ATTN_OUT))
        self.n_head, self.n_kv_head, self.head_size = c.n_head, c.n_kv_head, hs
        self.qk_norm = c.qk_norm
        if c.qk_norm != "none":  # each head's (Qwen3, Gemma 3), or the whole projection's (OLMo 2)
            whole = c.qk_norm == "whole"
            self.q_norm = RMSNorm(c.n_head * hs if whole else hs, c.ln_eps)
            self.k_norm = RMSNorm(c.n_kv_head * hs if whole else hs, c.ln_eps)
        self.scale, self.softcap = c.query_scale, c.attn_softcap
        self.window = 0  # the layer's row of the layer table sets it (GPT)
        mask = torch.tril(torch.ones(c.n_ctx, c.n_ctx, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, c.n_ctx, c.n_ctx), persistent=False)
        self.last_att: torch.Tensor | None = None  # [B, n_head, T, T] when keep_att is set
        self.keep_att = False
        self.cache = "f16"  # the key/value cache run.c keeps (GPT.set_cache)

    def forward(self, x: torch.Tensor, rope: tuple | None = None) -> torch.Tensor:  # [B, T, C] -> [B, T, C]
        B, T, C = x.shape
        hs = self.head_size
        query, key, value = self.c_attn(x).split([self.n_head * hs, self.n_kv_head * hs, self.n_kv_head * hs], dim=2)
        if self.qk_norm == "whole":
            query, key = self.q_norm(query), self.k_norm(key)
        elif self.qk_norm == "head":
            query = self.q_norm(query.reshape(B, T, self.n_head, hs)).reshape(B, T, -1)
            key = self.k_norm(key.reshape(B, T, self.n_kv_head, hs)).reshape(B, T, -1)
        query = query.view(B, T, self.n_head, hs).transpose(1, 2)  # [B, n_head, T, hs]
        key = key.view(B, T, self.n_kv_head, hs).transpose(1, 2)   # [B, n_kv_head, T, hs]
        value = value.view(B, T, self.n_kv_head, hs).transpose(1, 2)
        if rope is not None:  # this layer's rotary positions (None: the layer has none)
            query, key = rotate(query, *rope), rotate(key, *rope)
        if self.cache == "f16":  # run.c's binary16 cache: keys and values rounded to nearest even
            key, value = key.half().float(), value.half().float()
        elif self.cache == "q8_0":  # run.c's q8_0 cache: int8 quants, a scale per 32 dimensions
            key, value = q8_0_cache_round(key), q8_0_cache_round(value)
        group = self.n_head // self.n_kv_head  # query head h reads key/value head h // group
        key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
        scale = torch.tensor(self.scale, dtype=torch.float32)  # 1/sqrt(hs) in float32 unless the file says
        if self.cache == "q8_0":  # the query scaled, then quantized as the keys are
            scores = q8_0_cache_round(query * scale) @ key.transpose(-2, -1)  # [B, n_head, T, T]
        else:
            scores = (query @ key.transpose(-2, -1)) * scale  # [B, n_head, T, T]
        if self.softcap:  # Gemma 2's cap on the scores
            scores = self.softcap * torch.tanh(scores / self.softcap)
        visible = self.mask[:, :, :T, :T]
        if self.window:  # a query sees the last `window` positions, itself included
            visible = visible & ~torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-self.window)
        scores = scores.masked_fill(~visible, float("-inf"))
        att = F.softmax(scores, dim=-1)  # attention weights; masked positions get exactly 0
        if self.keep_att:
            self.last_att = att.detach()
        y = (att @ value).transpose(1, 2).contiguous().view(B, T, self.n_head * hs)  # heads side by side
        return self.c_proj(y)


class MLP(nn.Module):
    """GPT-2's feed-forward layer, c_proj(gelu(c_fc(x))), or SwiGLU (Shazeer 2020, Llama's):
    c_proj(silu(gate(x)) * c_fc(x)), or GEGLU (the same paper's, Gemma's): c_proj(gelu(gate(x))
    * c_fc(x))."""

    def __init__(self, c: GPTConfig):
        super().__init__()
        bias = c.has_bias(BIAS_FFN)
        if c.ffn != "gelu":
            self.gate = nn.Linear(c.n_embd, c.n_hidden, bias=bias)
        self.c_fc = nn.Linear(c.n_embd, c.n_hidden, bias=bias)      # up
        self.c_proj = nn.Linear(c.n_hidden, c.n_embd, bias=bias)    # down
        self.ffn = c.ffn
        self.approximate = "tanh" if c.gelu == "tanh" else "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, C] -> [B, T, C]
        if self.ffn == "swiglu":
            return self.c_proj(F.silu(self.gate(x)) * self.c_fc(x))
        if self.ffn == "geglu":
            return self.c_proj(F.gelu(self.gate(x), approximate=self.approximate) * self.c_fc(x))
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate))


class Block(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        if c.norm_before:  # the sublayers' inputs normalized (every block but OLMo 2's)
            self.ln_1 = make_norm(c)
        self.attn = CausalSelfAttention(c)
        if c.norm_before:
            self.ln_2 = make_norm(c)
        self.mlp = MLP(c)
        if c.norm_after:  # their outputs normalized (Gemma 2 and 3, OLMo 2)
            self.attn.post_norm = make_norm(c)
            self.mlp.post_norm = make_norm(c)
        self.norm_before, self.norm_after = c.norm_before, c.norm_after
        self.residual_scale = c.residual_scale
        self.dropout = 0.0  # training only (train.py sets it); inference never drops

    def forward(self, x: torch.Tensor, rope: tuple | None = None) -> torch.Tensor:  # [B, T, C] -> [B, T, C]
        drop = lambda y: F.dropout(y, self.dropout, self.training) if self.dropout else y  # noqa: E731

        def residual(sublayer: nn.Module, norm: str, y: torch.Tensor, *args) -> torch.Tensor:
            out = sublayer(getattr(self, norm)(y) if self.norm_before else y, *args)
            if self.norm_after:
                out = sublayer.post_norm(out)
            if self.residual_scale != 1.0:  # Granite's, in float32
                out = out * torch.tensor(self.residual_scale, dtype=torch.float32)
            return y + drop(out)

        x = residual(self.attn, "ln_1", x, rope)  # residual around attention
        x = residual(self.mlp, "ln_2", x)         # residual around the feed-forward layer
        return x


class GPT(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        c.check()
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_padded, c.n_embd),
            h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
            ln_f=make_norm(c),
        ))
        if c.pos == "learned":
            self.transformer["wpe"] = nn.Embedding(c.n_ctx, c.n_embd)
        elif c.pos == "sinusoidal":
            self.register_buffer("sinusoid", sinusoid_table(c.n_ctx, c.n_embd), persistent=False)
        else:  # each rotary layer's tables, one pair per base (the file's frequencies for the header's:
            # LongRoPE's long ones when the context is longer than the short ones serve)
            self.rope_of = []  # per layer: the index of its pair of tables, or None
            bases: list[float] = []
            freqs = c.rope_freqs_long if c.rope_freqs_long is not None and c.n_ctx > c.rope_original else c.rope_freqs
            for row in c.layer_rows():
                if not row["rotary"]:
                    self.rope_of.append(None)
                    continue
                if row["rope_theta"] not in bases:
                    base = row["rope_theta"]
                    cos, sin = rotary_tables(c.n_ctx, c.rotated, base, freqs if base == c.rope_theta else None,
                                             c.rope_scale)
                    self.register_buffer(f"rope_cos_{len(bases)}", cos, persistent=False)
                    self.register_buffer(f"rope_sin_{len(bases)}", sin, persistent=False)
                    bases.append(base)
                self.rope_of.append(bases.index(row["rope_theta"]))
        for block, row in zip(self.transformer.h, c.layer_rows()):
            block.attn.window = row["window"]
        self.lm_head = nn.Linear(c.n_embd, c.vocab_padded, bias=False)
        if c.tied_head:
            self.lm_head.weight = self.transformer.wte.weight

    @staticmethod
    def of(weights: Weights) -> "GPT":
        """The reference model computing with a Weights' arrays (config.weights_of checked them)."""
        model = GPT(weights.config)
        state = model.state_dict()
        model.load_state_dict({k: torch.from_numpy(np.array(weights.arrays[k], np.float32)) for k in state},
                              strict=True)
        return model.eval()

    def set_cache(self, cache: str) -> "GPT":
        """Compute as run.c does with that key/value cache: "f16" (its default, `--cache f16`:
        every key and value rounded to IEEE binary16, nearest even), "q8_0" (`--cache q8_0`:
        keys, values and each query, times 1/sqrt(head_size), through q8_0_cache_round) or "f32"
        (`--cache f32`, and training). A new GPT starts with "f16"."""
        assert cache in CACHES, cache
        for block in self.transformer.h:
            block.attn.cache = cache
        return self

    @property
    def cache(self) -> str:
        return self.transformer.h[0].attn.cache if len(self.transformer.h) else "f32"

    def init_random(self, seed: int, std: float = 0.02) -> "GPT":
        """GPT-2-style random weights from a fixed seed (tests, benchmarks, training start).
        LayerNorm weights and biases get noise too, so every parameter is exercised."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "norm.weight")):
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
                elif name.endswith(".bias"):
                    p.copy_(0.02 * torch.randn(p.shape, generator=gen))
                else:
                    p.copy_(std * torch.randn(p.shape, generator=gen))
        return self

    def positions(self, T: int) -> torch.Tensor:  # -> [T, C], added to the embedding
        if self.config.pos == "learned":
            return self.transformer.wpe.weight[:T]
        return self.sinusoid[:T]

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:  # [B, T] ids -> [B, T, C]
        B, T = idx.shape
        assert T <= self.config.n_ctx, f"sequence of {T} is longer than the context {self.config.n_ctx}"
        x = self.transformer.wte(idx)  # token embedding
        if self.config.embed_scale != 1.0:  # Gemma's, Granite's, in float32
            x = x * torch.tensor(self.config.embed_scale, dtype=torch.float32)
        rotary = self.config.pos == "rotary"
        if not rotary:  # positions added here; rotary ones enter each rotary layer's queries and keys
            x = x + self.positions(T)
        for layer, block in enumerate(self.transformer.h):
            pair = self.rope_of[layer] if rotary else None
            rope = None if pair is None else (getattr(self, f"rope_cos_{pair}")[:T], getattr(self, f"rope_sin_{pair}")[:T])
            x = block(x, rope)
        return self.transformer.ln_f(x)

    def head(self, x: torch.Tensor) -> torch.Tensor:  # [.., C] -> [.., vocab_size]
        logits = self.lm_head(x)[..., : self.config.vocab_size]  # padded rows are never scored
        c = self.config
        if c.logit_divisor != 1.0:  # Granite's
            logits = logits / torch.tensor(c.logit_divisor, dtype=torch.float32)
        if c.logit_softcap:  # Gemma 2's
            logits = c.logit_softcap * torch.tanh(logits / c.logit_softcap)
        return logits

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # [B, T] ids -> [B, T, vocab_size]
        return self.head(self.hidden(idx))

    def attention_weights(self, idx: torch.Tensor) -> torch.Tensor:
        """[T] ids -> [n_layer, n_head, T, T] attention probabilities."""
        for block in self.transformer.h:
            block.attn.keep_att = True
        try:
            self(idx[None])
            return torch.stack([b.attn.last_att[0] for b in self.transformer.h])
        finally:
            for block in self.transformer.h:
                block.attn.keep_att = False
                block.attn.last_att = None


# ---- q8_0 as run.c computes it ----------------------------------------------------------

def quantize_q8_0(x: torch.Tensor) -> torch.Tensor:
    """[.., n] -> [.., n], n a multiple of 32: x rounded as run.c quantizes a matrix product's
    input for q8_0 weights: per 32 values, scale = max|x| / 127, quant = round-half-even(x *
    127 / max|x|) (0 for an all-zero group), returned as quant * scale. Float32 throughout, in
    run.c's order of operations, so the quants agree except where x itself differs."""
    g = x.reshape(-1, 32)
    amax = g.abs().amax(dim=1, keepdim=True)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    return (torch.round(g * inv) * (amax / 127.0)).reshape(x.shape)


def with_q8_0_activations(model: GPT) -> GPT:
    """The model (weights already dequantized from a q8_0 file, weight_file.read_model) computing as
    run.c does with q8_0 weights: every nn.Linear quantizes its input with quantize_q8_0. Its
    logits are what the C integer kernels must reproduce, up to float summation order."""
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.forward = lambda x, m=m: F.linear(quantize_q8_0(x), m.weight, m.bias)
    return model


# ---- run.c's sampler, reproduced (see the comment at the top of sampler.h) -------------

MASK64 = (1 << 64) - 1


class Rng:
    """xorshift64*, seeded and stepped exactly as run.c's rng_next / rng_uniform."""

    def __init__(self, seed: int):
        self.state = (seed + 0x9E3779B97F4A7C15) & MASK64 or 1

    def next(self) -> int:
        s = self.state
        s ^= s >> 12
        s ^= (s << 25) & MASK64
        s ^= s >> 27
        self.state = s
        return (s * 0x2545F4914F6CDD1D) & MASK64

    def uniform(self) -> float:
        return (self.next() >> 11) * (1.0 / 9007199254740992.0)


def sample(logits: np.ndarray, rng: Rng, temperature: float, top_k: int, top_p: float) -> int:
    """logits: [vocab_size] float32 -> token id; same steps and precision as run.c's sample()
    (sampler.h): candidates by z = logits / temperature descending, top-k, weights
    exp(z - max z), top-p on the weights, one draw in id order."""
    if temperature == 0.0:
        return int(np.argmax(logits))  # first maximum, like run.c
    z = logits.astype(np.float64) / temperature
    w = np.exp(z - z.max())
    order = np.lexsort((np.arange(len(z)), -z))  # z descending, then id ascending
    if 0 < top_k < len(order):
        order = order[:top_k]
        mass = float(np.cumsum(w[order])[-1])  # the k weights, in that order
    else:
        mass = float(np.cumsum(w)[-1])  # every weight, in id order, like the C loop
    if top_p < 1.0:
        running = np.cumsum(w[order])
        reach = np.nonzero(running >= top_p * mass)[0]
        if len(reach):
            order = order[: reach[0] + 1]
    order = np.sort(order)  # the draw walks the kept tokens in id order
    running = np.cumsum(w[order])
    r = rng.uniform() * running[-1]
    above = np.nonzero(running > r)[0]
    return int(order[above[0]] if len(above) else order[-1])


@torch.no_grad()
def generate(model: GPT, prompt: list[int], max_new_tokens: int, temperature: float = 1.0,
             top_k: int = 0, top_p: float = 0.9, seed: int = 0, eot_id: int = -1,
             ignore_eos: bool = False, keep: int | None = None, repeat_penalty: float = 1.0,
             repeat_last: int = 64, trace: list | None = None, stop_ids: Iterable[int] = ()) -> list[int]:
    """Tokens run.c generates after `prompt` (which must be non-empty: run.c starts an empty
    prompt from the end-of-text token). Stops at eot_id or any of stop_ids, the file's stop set
    (not returned), or at max_new_tokens.
    The window of the sequence the model sees is run.c's key/value cache: a prompt longer than
    the context keeps its last n_ctx tokens; when a new token would not fit, the window moves
    to the last `keep` tokens before it (default n_ctx // 2) and the new token. The repetition
    penalty (sampler.h) is applied to the float32 logits before sampling. With trace, the
    logits each token was sampled from (after the penalty) are appended to it."""
    model.eval()
    rng = Rng(seed)
    ctx = model.config.n_ctx
    keep = ctx // 2 if keep is None else keep
    seq = list(prompt)
    window = max(0, len(seq) - ctx)
    out: list[int] = []
    penalty = np.float32(repeat_penalty)
    stops = set(stop_ids)
    while len(out) < max_new_tokens:
        logits = model.head(model.hidden(torch.tensor([seq[window:]]))[0, -1]).numpy().astype(np.float32)
        if repeat_penalty != 1.0:
            for t in set(seq[-repeat_last:]):
                if t < len(logits):
                    logits[t] = logits[t] / penalty if logits[t] > 0 else logits[t] * penalty
        if trace is not None:
            trace.append(logits)
        token = sample(logits, rng, temperature, top_k, top_p)
        if (token == eot_id or token in stops) and not ignore_eos:
            break
        out.append(token)
        seq.append(token)
        if len(seq) - window > ctx:  # the new token does not fit: move the window
            window = len(seq) - 1 - keep
    return out


@torch.no_grad()
def perplexity(model: GPT, ids: list[int], n_bytes: int) -> dict:
    """run.c's --perplexity: `ids` already start with end-of-text when the vocabulary has one.
    Windows of n_ctx inputs start every n_ctx // 2 tokens; each target is scored once, by the
    first window that reaches it. Log-softmax in float64 of the float32 logits, as in C."""
    model.eval()
    n, ctx = len(ids), model.config.n_ctx
    stride, scored_to, nll, count, begin = max(1, ctx // 2), 1, 0.0, 0, 0
    while True:
        end = min(begin + ctx, n - 1)
        logits = model(torch.tensor([ids[begin:end]]))[0].double()  # [end - begin, vocab]
        logp = torch.log_softmax(logits, dim=-1)
        for pos in range(begin, end):
            if pos + 1 >= scored_to:
                nll -= float(logp[pos - begin, ids[pos + 1]])
                count += 1
        scored_to = end + 1
        if end == n - 1:
            break
        begin += stride
    mean = nll / count
    return {"tokens": count, "nll": mean, "ppl": math.exp(mean), "bpb": nll / math.log(2) / n_bytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = GPT(GPTConfig()).init_random(args.seed)
    print(generate(model, [1, 2, 3], 10, temperature=0.8, top_k=40, seed=args.seed))


if __name__ == "__main__":
    main()
