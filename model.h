/* model.h: the weight file format. export/weight_file.py is its Python mirror, field for field;
 * load.h reads and checks it, tokenizer.c reads its tokenizer section.
 *
 * One self-contained, little-endian, memory-mappable file, written by export/export.py:
 *
 *   offset              size                  what
 *   0                   256                   FileHeader (field table below)
 *   tokenizer_offset    tokenizer_size        tokenizer section (layout below), 64-aligned
 *   metadata_offset     metadata_size         metadata section (version 4, below), 64-aligned
 *   layers_offset       n_layer * 32          layer table: LayerRow per layer (version 5), 64-aligned
 *   tensors_offset      n_tensors * 64        tensor table: TensorEntry per tensor, 64-aligned
 *   entry.offset        entry.size            each tensor's data, 64-aligned, in table order
 *   file_size                                 end of file (the loader checks the real size)
 *
 * FileHeader (all fields 4 bytes unless noted). Version 2 added the fields from byte 108;
 * a version 1 file (whose bytes there are zero) reads as LayerNorm, GELU, n_kv_head = n_head,
 * and its bias 1 as BIAS_ALL: GPT-2's block, as it always was. Version 3 added the tokenizer
 * section's second part (below); its header is version 2's. Version 4 gives each tensor its own
 * weight type and entry (the table below), adds the metadata section and the tokenizer's stop
 * set. Version 5 gives the head size and the layer table (what may differ per layer).
 *   0   magic          "GPTC" (bytes 47 50 54 43)
 *   4   version        MODEL_VERSION (1 to 3 are read too); the loader names the versions it reads
 *   8   header_size    256
 *   12  n_layer        transformer layers; 0 = tokenizer-only file (`run --tokenize` only)
 *   16  n_head         query heads per layer; head_size from byte 148 (before version 5:
 *                      n_embd / n_head)
 *   20  n_embd         residual stream width C
 *   24  n_hidden       feed-forward width H (4*C in GPT-2)
 *   28  n_ctx          context length: most positions one sequence can have
 *   32  vocab_size     real tokens V (only these are ever sampled)
 *   36  vocab_padded   rows of the embedding and output head Vp >= V (nanoGPT pads to 50304)
 *   40  norm_eps       epsilon of LayerNorm or RMSNorm, float32
 *   44  gelu           GELU_TANH (GPT-2's approximation) or GELU_ERF (exact, nanoGPT); read
 *                      only with FFN_GELU
 *   48  bias           which tensors have biases: BIAS_QKV | BIAS_ATTN_OUT | BIAS_FFN |
 *                      BIAS_NORM (GPT-2: BIAS_ALL; Llama: 0; Qwen2: BIAS_QKV); BIAS_NORM only
 *                      with NORM_LAYER. Version 1: 1 = BIAS_ALL, 0 = none
 *   52  tied_head      1: the output head is the token embedding (no lm_head tensor)
 *   56  pos_kind       POS_LEARNED (wpe table added to the embedding), POS_SINUSOIDAL ("Attention
 *                      Is All You Need", section 3.5: PE(p,2i)=sin(p/10000^(2i/C)), PE(p,2i+1)
 *                      =cos(same), added to the embedding) or POS_ROTARY (RoPE, below)
 *   60  weight_type    versions 1-3: WT_F32, WT_Q8_0 or WT_Q4_0, the type of every matrix
 *                      (norms, biases, wpe stay f32); version 4: 0, each tensor names its type
 *   64  group_size     versions 1-3: values per quantization scale (32 for q8_0 and q4_0, 0 for
 *                      f32); version 4: 0
 *   68  n_tensors      entries in the tensor table
 *   72  tokenizer_offset   8 bytes
 *   80  tokenizer_size     8 bytes
 *   88  tensors_offset     8 bytes
 *   96  file_size          8 bytes
 *   104 meta_crc32     CRC-32 (zlib's) of bytes [0, tensors_offset + 64 * n_tensors) with this
 *                      field read as zero: header, tokenizer section and tensor table, so that
 *                      corruption the field checks cannot see (a flipped token byte) is caught
 *   108 norm           NORM_LAYER (LayerNorm: weight, and bias with BIAS_NORM) or NORM_RMS
 *                      (RMSNorm: x / sqrt(mean(x^2) + norm_eps) * weight)
 *   112 ffn            FFN_GELU (c_proj(gelu(c_fc(x)))), FFN_SWIGLU (c_proj(silu(gate(x)) *
 *                      c_fc(x)), "GLU Variants Improve Transformer", Shazeer 2020) or, version
 *                      5, FFN_GEGLU (c_proj(gelu(gate(x)) * c_fc(x)), the same paper's GEGLU,
 *                      with the header's GELU: Gemma's)
 *   116 n_kv_head      key/value heads, 1 to n_head, n_head % n_kv_head == 0: query head h uses
 *                      key/value head h / (n_head / n_kv_head) (grouped-query attention,
 *                      Ainslie et al. 2023; 1 = multi-query, n_head = multi-head)
 *   120 rope_theta     float32, POS_ROTARY only (else 0): the base of the rotary frequencies,
 *                      finite and > 0 (10000 Llama 2, 500000 Llama 3, 1000000 Qwen2.5)
 *   124 rope_freqs     1: the rotary frequencies are a tensor of the file (rope_freqs, head_size/2
 *                      float32: frequencies rescaled at export, as Llama 3's rope_scaling does);
 *                      0: freq_i = rope_theta^(-2i/head_size). POS_ROTARY only.
 *   128 metadata_offset    8 bytes, version 4
 *   136 metadata_size      8 bytes, version 4
 *   144 qkv_apart      version 4: 1 when each layer's query, key and value projections are three
 *                      tensors of their own types (attn.q.weight, attn.k.weight, attn.v.weight:
 *                      a GGUF's, or llama.cpp's mixes, give the value projection more bits), in
 *                      place of the fused attn.c_attn.weight; their rows are its rows, in order
 *   148 head_size      version 5: each head's query, key and value dimensions, even with rotary
 *                      positions; n_head head_size need not be n_embd (Qwen3-0.6B: 1024 wide,
 *                      16 heads of 128; Gemma 3 1B: 1152, 4 heads of 256)
 *   152 layers_offset  8 bytes, version 5: the layer table, after the metadata section and
 *                      before the tensor table; the checksum covers it
 *   160 qk_norm        version 5: QK_NORM_NONE, QK_NORM_HEAD (an RMSNorm over each head of the
 *                      query and of the key before rotary positions, one weight of head_size
 *                      for every head: Qwen3, Gemma 3) or QK_NORM_WHOLE (an RMSNorm over the
 *                      whole query projection and the whole key projection: OLMo 2)
 *   164 norm_place     version 5: NORM_BEFORE | NORM_AFTER, at least one. NORM_BEFORE: ln_1 and
 *                      ln_2 normalize attention's and the feed-forward's input (every model
 *                      before); NORM_AFTER: attn.post_norm and mlp.post_norm normalize their
 *                      output before the residual add (Gemma 2 and 3 both, OLMo 2 after only).
 *                      Files before version 5: NORM_BEFORE
 *   168 embed_scale    version 5, float32: the token embedding times this (Gemma: sqrt(n_embd);
 *                      Granite: its embedding multiplier); 1: none
 *   172 attn_scale     version 5, float32: the query times this before its scores (Gemma:
 *                      query_pre_attn_scalar^-1/2; Granite: its attention multiplier); 0: the
 *                      usual 1/sqrt(head_size)
 *   176 residual_scale version 5, float32: each sublayer's output times this before the
 *                      residual add (Granite); 1: none
 *   180 logit_divisor  version 5, float32: the logits divided by this (Granite); 1: none
 *   184 attn_softcap   version 5, float32: each score s becomes cap tanh(s / cap) before the
 *                      softmax (Gemma 2: 50); 0: none
 *   188 logit_softcap  version 5, float32: each logit likewise (Gemma 2: 30); 0: none
 *   192 rotary_dims    version 5, POS_ROTARY only (else 0): the dimensions of each head rotated,
 *                      even, at most head_size: the first ones, the rest kept (Phi-4-mini: 96 of
 *                      128); the tables and rope_freqs have rotary_dims / 2 pairs
 *   196 rope_scale     version 5, float32, POS_ROTARY only (else 0): cos and sin times this
 *                      (LongRoPE's and YaRN's attention factor); 1: none
 *   200 rope_long      version 5, POS_ROTARY with rope_freqs only: 1 when the file also has
 *                      rope_freqs_long, the frequencies for a context longer than rope_original
 *                      (LongRoPE: Phi-3.5, Phi-4-mini); a run whose context is longer uses them
 *   204 rope_original  version 5: with rope_long, the context the short frequencies serve
 *   208 reserved, zero up to byte 256 (from 148 in version 4, from 128 in versions 2 and 3)
 *
 * Layer table (version 5): a LayerRow of 32 bytes per layer, in order, for what a model's
 * layers need not share: window (the attention of a position sees the last `window`
 * positions, itself included: Gemma's local layers; 0 = every earlier one), rotary
 * (1 = rotary positions in this layer, only in a POS_ROTARY file; 0 = none, as SmolLM3's every
 * fourth layer) and rope_theta (that layer's base: Gemma 3's local and global layers differ;
 * the file's rope_freqs tensor, when it has one, replaces the frequencies of the layers whose
 * base is the header's rope_theta), then zero bytes for what a later version adds. A file before
 * version 5 reads as every layer whole-context, rotary as the header says, with its base.
 *
 * Rotary positions (RoPE, Su et al. 2021, "RoFormer", section 3.4.2): after the query/key/value
 * projection, each head's query and key are rotated by their position p, dimensions (2i, 2i+1)
 * together as a pair: x'_2i = x_2i cos(p f_i) - x_2i+1 sin(p f_i), x'_2i+1 = x_2i sin(p f_i) +
 * x_2i+1 cos(p f_i). Adjacent pairs are the paper's convention, and llama2.c's and Meta's
 * original weights use it: a pair is two neighbours, rotated as one 2-D vector. Hugging Face's
 * checkpoints pair dimension i with i + head_size/2 instead ("rotate_half"); export.py permutes
 * their query and key rows into adjacent pairs, which gives the same attention scores. cos and
 * sin are computed in double from p * f_i and rounded to float32 once; the rotation is the four
 * float32 products and two sums written above.
 *
 * Tokenizer section (all 4-byte little-endian integers, then raw bytes):
 *   n_tokens                 must equal vocab_size in a model file
 *   pretokenizer             how text is split before merging: PRETOK_CHAR (a character
 *                            vocabulary), PRETOK_GPT2, PRETOK_CL100K, PRETOK_WHOLE (none: the
 *                            whole text, SentencePiece), PRETOK_DIGITS_GPT2 (each ASCII digit
 *                            alone, GPT-2's split between them: SmolLM2), PRETOK_QWEN2 (cl100k's
 *                            split with numbers one digit at a time), PRETOK_O200K (GPT-4o's
 *                            o200k_base: words split by case; Phi-4-mini), PRETOK_O200K_ASCII
 *                            (the same as llama.cpp splits a GGUF's "gpt-4o": the case of A-Z
 *                            and a-z alone); tokenizer.c spells out each
 *   eot_id                   end-of-text token id, or -1 when the vocabulary has none
 *   bytes_size               length of the byte blob
 *   ranks[n_tokens]          merge rank of each token (by rank of the concatenation: tiktoken's
 *                            rule, and SentencePiece's with ranks from scores, equal scores
 *                            equal ranks); RANK_NONE for tokens never produced by merging
 *   offsets[n_tokens + 1]    token i's bytes are blob[offsets[i] .. offsets[i+1])
 *   blob[bytes_size]         token byte strings, back to back: what each token prints
 *                            (SentencePiece's U+2581 as a space, its byte pieces as the byte)
 * Version 3 continues, from the next multiple of 4 bytes (a version 1 or 2 section ends here,
 * and reads as tiktoken's byte-level BPE or a character vocabulary: no bos, no unk, every token
 * TOKEN_NORMAL, pre-tokenizer PRETOK_CHAR, PRETOK_GPT2 or PRETOK_CL100K):
 *   flags                    TOK_* bits (below)
 *   bos_id                   prepended to every encoded text, or -1
 *   unk_id                   SentencePiece's unknown piece, for characters no piece spells
 *                            (without byte fallback), or -1
 *   n_merges, n_rules, rules_size
 *   kinds[n_tokens]          one byte each, TOKEN_*, then zero padding to a multiple of 4
 *   merges[n_merges][3]      TOK_MERGE_PAIRS: left id, right id, merged id; rank = index
 *                            (Hugging Face BPE: a pair merges only if listed)
 *   rule_offsets[2 n_rules + 1], rules_blob[rules_size]   SentencePiece's normalization rules:
 *                            rule i replaces the bytes [o[2i], o[2i+1]) by [o[2i+1], o[2i+2]),
 *                            the longest rule matching at each position wins
 * Version 4 continues, from the next multiple of 4 bytes (before it the stop set is end-of-text
 * alone, when there is one):
 *   n_stop, stop[n_stop]     the stop set: generation ends at any of these ids (at most 64,
 *                            each listed once): end-of-text, and an instruct model's end of turn
 *   TOK_MERGE_PAIRS          merges by the pair table, not by ranks of concatenations
 *   TOK_WHOLE_PIECES         a pre-token that is itself a token becomes that token before
 *                            merging (tiktoken; Hugging Face's ignore_merges)
 *   TOK_SENTENCEPIECE        SentencePiece's pipeline: normalize (rules, dummy prefix, extra
 *                            spaces, spaces as U+2581), merge from UTF-8 characters, then a
 *                            piece no token spells becomes byte pieces or unk_id
 *   TOK_BYTE_FALLBACK        (SentencePiece) unknown pieces as their bytes' TOKEN_BYTE tokens
 *   TOK_DUMMY_PREFIX         (SentencePiece) a space before the text
 *   TOK_REMOVE_EXTRA_SPACES  (SentencePiece) no leading, trailing or repeated spaces
 *   TOK_NFC                  the text in Unicode Normalization Form C first (Qwen2)
 *   TOKEN_NORMAL             text merging may produce; TOKEN_CONTROL: SentencePiece's <s>,
 *                            </s>, or an id tokenizer.json leaves unused (no text): prints
 *                            nothing, and --special recognises its text; TOKEN_UNKNOWN: prints its bytes (SentencePiece's
 *                            unk_surface); TOKEN_BYTE: a byte-fallback piece, its one byte;
 *                            TOKEN_SPECIAL: an added token (<|endoftext|>, <|im_start|>), whose
 *                            text --special recognises in a prompt; prints its text
 *
 * Metadata section (version 4): n_entries (4 bytes), then per entry key_len (4), the key's
 * bytes (1 to 64 of [a-z0-9._-]), value_len (4), the value's bytes (any), back to back; keys
 * unique. What a tool may want to know and the forward pass does not: general.name,
 * general.source, general.license, ... (export.py's --info lists what it writes).
 *
 * Tensor table entry (64 bytes): version 4: name (40 bytes, NUL-padded), type (4: its WT_*),
 * reserved (4, zero), offset (8), size (8); versions 1-3: name (48 bytes, NUL-padded), offset,
 * size, every matrix of the header's weight_type.
 * The tensors appear in exactly this order, those in brackets only when the header says so.
 * Version 4 lists each layer's tensors apart, layer by layer, named h.L.NAME (h.0.ln_1.weight,
 * h.0.attn.c_attn.weight, ..., h.1.ln_1.weight, ...); versions 1-3 list each one stacked over
 * the layers, named NAME (attn.c_attn.weight of shape (n_layer, QKV, C)).
 * QKV = (n_head + 2 n_kv_head) head_size: the rows of the fused projection, queries first.
 *   wte (Vp, C) token embedding
 *   [wpe (n_ctx, C)]                          POS_LEARNED
 *   [rope_freqs (rotary_dims / 2)]            POS_ROTARY with rope_freqs = 1 (head_size / 2
 *                                             before version 5)
 *   [rope_freqs_long (rotary_dims / 2)]       rope_long = 1
 *   per layer:
 *     [ln_1.weight (C)], [ln_1.bias (C)]      NORM_BEFORE: the norm before attention; bias: BIAS_NORM
 *     attn.c_attn.weight (QKV, C)             query, key and value projections, fused; with
 *                                             qkv_apart (version 4) in its place:
 *       attn.q.weight (n_head head_size, C)     the query projection
 *       attn.k.weight (n_kv_head head_size, C)  the key projection
 *       attn.v.weight (n_kv_head head_size, C)  the value projection
 *     [attn.c_attn.bias (QKV)]                BIAS_QKV
 *     [attn.q_norm.weight (head_size)]        QK_NORM_HEAD (QK_NORM_WHOLE: n_head head_size)
 *     [attn.k_norm.weight (head_size)]        QK_NORM_HEAD (QK_NORM_WHOLE: n_kv_head head_size)
 *     attn.c_proj.weight (C, n_head head_size)   attention's output projection
 *     [attn.c_proj.bias (C)]                  BIAS_ATTN_OUT
 *     [attn.post_norm.weight (C)]             NORM_AFTER: the norm of attention's output
 *     [ln_2.weight (C)], [ln_2.bias (C)]      NORM_BEFORE: the norm before the feed-forward; BIAS_NORM
 *     [mlp.gate.weight (H, C)]                FFN_SWIGLU, FFN_GEGLU: the gate
 *     [mlp.gate.bias (H)]                     FFN_SWIGLU, FFN_GEGLU and BIAS_FFN
 *     mlp.c_fc.weight (H, C)                  the up projection
 *     [mlp.c_fc.bias (H)]                     BIAS_FFN
 *     mlp.c_proj.weight (C, H)                the down projection
 *     [mlp.c_proj.bias (C)]                   BIAS_FFN
 *     [mlp.post_norm.weight (C)]              NORM_AFTER: the norm of the feed-forward's output
 *   ln_f.weight (C), [ln_f.bias (C)]          the final norm; BIAS_NORM
 *   [lm_head.weight (Vp, C)]                  when not tied
 * GPT-2's block has every bias and none of gate, rope_freqs; Llama's has no bias, a gate and
 * rotary positions; Qwen2's is Llama's with BIAS_QKV. load.h's tensor_list() and
 * export/weight_file.py's file_tensors() spell out the same list. Matrices are PyTorch
 * nn.Linear's (out_features, in_features), row-major: out[i] = sum_j W[i][j] * in[j]. A matrix
 * may have any weight type whose block divides its row (cols); every other tensor is f32. The
 * weight types' layouts are kernels/types.h's: f32, q8_0 (int8 quants, then a float32 scale per
 * 32 along a row), q4_0 (4-bit quants two to a byte, then the scales; export.py makes a group's
 * largest magnitude quant -8: scale = that value / -8); and GGUF's formats exactly as a GGUF file
 * stores them (ggml's block structs, rows of whole blocks): q5_0, q5_1, q4_1, iq4_nl (blocks of 32
 * values), q4_k, q5_k, q6_k, iq4_xs, q2_k, q3_k (super-blocks of 256), f16 and bf16 (version 4
 * and later).
 * The loader refuses a block whose binary16 scale is infinite or NaN.
 */
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h" /* WT_*, GELU_*: the weight types and GELU's forms */

#define LAYER_ROW_SIZE 32u
#define MODEL_MAGIC 0x43545047u /* "GPTC" read as a little-endian uint32 */
#define MODEL_VERSION 5u /* and 4 (no head_size, no layer table), 3 (one weight type, stacked
                            tensors, no metadata or stop set), 2 (its tokenizer section without
                            the second part), 1 (no header fields from byte 108) */
#define HEADER_SIZE 256u
#define TENSOR_ALIGN 64u
#define TENSOR_NAME_LEN 40    /* version 4; 48 before, over what is now the type */
#define METADATA_KEY_MAX 64

enum { POS_LEARNED = 0, POS_SINUSOIDAL = 1, POS_ROTARY = 2 };
enum { NORM_LAYER = 0, NORM_RMS = 1 };
enum { FFN_GELU = 0, FFN_SWIGLU = 1, FFN_GEGLU = 2 };
enum { QK_NORM_NONE = 0, QK_NORM_HEAD = 1, QK_NORM_WHOLE = 2 };
enum { NORM_BEFORE = 1, NORM_AFTER = 2 };
enum { BIAS_QKV = 1, BIAS_ATTN_OUT = 2, BIAS_FFN = 4, BIAS_NORM = 8, BIAS_ALL = 15 };

typedef struct {
    uint32_t magic, version, header_size;
    uint32_t n_layer, n_head, n_embd, n_hidden, n_ctx;
    uint32_t vocab_size, vocab_padded;
    float norm_eps;
    uint32_t gelu, bias, tied_head, pos_kind, weight_type, group_size, n_tensors;
    uint64_t tokenizer_offset, tokenizer_size, tensors_offset, file_size;
    uint32_t meta_crc32;
    uint32_t norm, ffn, n_kv_head; /* version 2 */
    float rope_theta;
    uint32_t rope_freqs;
    uint64_t metadata_offset, metadata_size; /* version 4 */
    uint32_t qkv_apart;                      /* version 4 */
    uint32_t head_size;                      /* version 5 */
    uint64_t layers_offset;                  /* version 5 */
    uint32_t qk_norm, norm_place;            /* version 5 */
    float embed_scale, attn_scale, residual_scale, logit_divisor, attn_softcap, logit_softcap;
    uint32_t rotary_dims;
    float rope_scale;
    uint32_t rope_long, rope_original;
    uint8_t reserved[HEADER_SIZE - 208];
} FileHeader;

/* A row of the layer table (version 5): what may differ from one layer to the next. */
typedef struct {
    uint32_t window;      /* attention over the last `window` positions, 0: the whole context */
    uint32_t rotary;      /* 1: rotary positions in this layer (POS_ROTARY files), 0: none */
    float rope_theta;     /* with rotary: this layer's base, finite and > 0; else 0 */
    uint32_t reserved[5]; /* zero */
} LayerRow;

typedef struct {
    char name[TENSOR_NAME_LEN];
    uint32_t type;     /* version 4 */
    uint32_t reserved; /* version 4: zero */
    uint64_t offset, size;
} TensorEntry;

_Static_assert(sizeof(FileHeader) == HEADER_SIZE, "FileHeader must be 256 bytes");
_Static_assert(offsetof(FileHeader, norm) == 108 && offsetof(FileHeader, rope_freqs) == 124 &&
               offsetof(FileHeader, metadata_size) == 136 && offsetof(FileHeader, qkv_apart) == 144 &&
               offsetof(FileHeader, head_size) == 148 && offsetof(FileHeader, layers_offset) == 152 &&
               offsetof(FileHeader, qk_norm) == 160 && offsetof(FileHeader, logit_softcap) == 188 &&
               offsetof(FileHeader, rope_original) == 204,
               "model.h's byte table");
_Static_assert(sizeof(LayerRow) == 32, "a layer table row is 32 bytes");
_Static_assert(sizeof(TensorEntry) == 64, "TensorEntry must be 64 bytes");

#endif
