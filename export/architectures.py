"""What each source calls a model's tensors: one table for the block's parts, one for the tensors
outside the layers, with a column per source. Ours are the reference model's names (model.py,
config.reference_shapes: nanoGPT's), and a weight file's are theirs without "transformer."
(model.h's list: h.N.*, wte, ln_f.weight); Hugging Face's are its modeling code's state dict (the
Llama family's model.layers.N.*, here without the "model." a reader strips), GGUF's are llama.cpp's (blk.N.*, its llama-arch.cpp), and
llama2.c's are Meta's original checkpoints' (layers.N.*). A reader looks a name up here rather
than spelling it: an architecture that adds a part (a norm on the queries, a norm after
attention) adds a row.

usage: imported by source_hf.py, source_llama2c.py and gguf_import.py
"""
from __future__ import annotations

# The block's parts, each a weight (and, where the source has one, a bias of the same stem).
# ours: the reference model's name within transformer.h.N.; None: a part ours keeps fused
# (the query, key and value projections are rows of attn.c_attn)
#  part       ours             Hugging Face ([model.]layers.N.) GGUF (blk.N.)  llama2.c (layers.N.)
LAYER_PARTS = {
    "attn_norm": ("ln_1",          "input_layernorm",          "attn_norm",    "attention_norm"),
    "q":         (None,            "self_attn.q_proj",         "attn_q",       "attention.wq"),
    "k":         (None,            "self_attn.k_proj",         "attn_k",       "attention.wk"),
    "v":         (None,            "self_attn.v_proj",         "attn_v",       "attention.wv"),
    "qkv":       ("attn.c_attn",   "self_attn.qkv_proj",       "attn_qkv",     None),
    "q_norm":    ("attn.q_norm",   "self_attn.q_norm",         "attn_q_norm",  None),
    "k_norm":    ("attn.k_norm",   "self_attn.k_norm",         "attn_k_norm",  None),
    "attn_out":  ("attn.c_proj",   "self_attn.o_proj",         "attn_output",  "attention.wo"),
    "attn_post_norm": ("attn.post_norm", None,                 "post_attention_norm", None),
    "ffn_norm":  ("ln_2",          "post_attention_layernorm", "ffn_norm",     "ffn_norm"),
    "gate":      ("mlp.gate",      "mlp.gate_proj",            "ffn_gate",     "feed_forward.w1"),
    "up":        ("mlp.c_fc",      "mlp.up_proj",              "ffn_up",       "feed_forward.w3"),
    "gate_up":   (None,            "mlp.gate_up_proj",         "ffn_up",       None),
    "down":      ("mlp.c_proj",    "mlp.down_proj",            "ffn_down",     "feed_forward.w2"),
    "ffn_post_norm": ("mlp.post_norm", "post_feedforward_layernorm", "post_ffw_norm", None),
}
# Where an architecture's Hugging Face names part from the table: Gemma's and OLMo 2's
# post_attention_layernorm is the norm after attention, not before the feed-forward (Gemma's is
# pre_feedforward_layernorm; OLMo 2 has none); Phi-3 keeps the gate and up projections as one
# (gate_up, the gate first), in GGUF too.
HF_NAMES = {
    "gemma2": {"ffn_norm": "pre_feedforward_layernorm", "attn_post_norm": "post_attention_layernorm"},
    "gemma3": {"ffn_norm": "pre_feedforward_layernorm", "attn_post_norm": "post_attention_layernorm"},
    "olmo2": {"attn_post_norm": "post_attention_layernorm"},
}
# The tensors outside the layers, whole names.
#  part      ours                        Hugging Face                 GGUF                    llama2.c                 file
MODEL_PARTS = {
    "embed":     ("transformer.wte.weight",  "embed_tokens.weight",       "token_embd.weight",    "tok_embeddings.weight", "wte"),
    "positions": ("transformer.wpe.weight",  None,                        "position_embd.weight", None,                    "wpe"),
    "norm":      ("transformer.ln_f.weight", "norm.weight",               "output_norm.weight",   "norm.weight",           "ln_f.weight"),
    "head":      ("lm_head.weight",          "lm_head.weight",            "output.weight",        "output.weight",         "lm_head.weight"),
}
SOURCES = ("ours", "hf", "gguf", "llama2c", "file")
LAYER_PREFIX = {"ours": "transformer.h.{}.", "hf": "layers.{}.", "gguf": "blk.{}.", "llama2c": "layers.{}.",
                "file": "h.{}."}


def layer_name(source: str, layer: int, part: str, kind: str = "weight", arch: str = "") -> str:
    """The name `source` gives layer `layer`'s `part` (LAYER_PARTS), its weight or bias; arch: the
    Hugging Face architecture, for its own names (HF_NAMES)."""
    stem = LAYER_PARTS[part][0 if source == "file" else SOURCES.index(source)]  # a file's: ours
    if source == "hf":
        stem = HF_NAMES.get(arch, {}).get(part, stem)
    assert stem is not None, f"{source} has no tensor of its own for {part}"
    return f"{LAYER_PREFIX[source].format(layer)}{stem}.{kind}"


def model_name(source: str, part: str, kind: str = "weight") -> str:
    """The name `source` gives a tensor outside the layers (MODEL_PARTS), or its bias."""
    name = MODEL_PARTS[part][SOURCES.index(source)]
    assert name is not None, f"{source} has no tensor {part}"
    return name if kind == "weight" else f"{name.removesuffix('.weight')}.{kind}"
