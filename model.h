/* model.h: the weight file format, and the declarations run.c, the kernels and tokenizer.c share.
 * export/weight_file.py is its Python mirror, field for field.
 *
 * One self-contained, little-endian, memory-mappable file, written by export/export.py:
 *
 *   offset              size                  what
 *   0                   256                   FileHeader (field table below)
 *   tokenizer_offset    tokenizer_size        tokenizer section (layout below), 64-aligned
 *   tensors_offset      n_tensors * 64        tensor table: TensorEntry per tensor, 64-aligned
 *   entry.offset        entry.size            each tensor's data, 64-aligned, in table order
 *   file_size                                 end of file (the loader checks the real size)
 *
 * FileHeader (all fields 4 bytes unless noted). Version 2 added the fields from byte 108;
 * a version 1 file (whose bytes there are zero) reads as LayerNorm, GELU, n_kv_head = n_head,
 * and its bias 1 as BIAS_ALL: GPT-2's block, as it always was. Version 3 added the tokenizer
 * section's second part (below); its header is version 2's.
 *   0   magic          "GPTC" (bytes 47 50 54 43)
 *   4   version        MODEL_VERSION (1 and 2 are read too); the loader names the versions it reads
 *   8   header_size    256
 *   12  n_layer        transformer layers; 0 = tokenizer-only file (`run --tokenize` only)
 *   16  n_head         query heads per layer; head_size = n_embd / n_head
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
 *   60  weight_type    WT_F32, WT_Q8_0 or WT_Q4_0 (matrices only; norms, biases, wpe stay f32)
 *   64  group_size     values per quantization scale (32 for q8_0 and q4_0, 0 for f32)
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
 *   112 ffn            FFN_GELU (c_proj(gelu(c_fc(x)))) or FFN_SWIGLU (c_proj(silu(gate(x)) *
 *                      c_fc(x)), "GLU Variants Improve Transformer", Shazeer 2020)
 *   116 n_kv_head      key/value heads, 1 to n_head, n_head % n_kv_head == 0: query head h uses
 *                      key/value head h / (n_head / n_kv_head) (grouped-query attention,
 *                      Ainslie et al. 2023; 1 = multi-query, n_head = multi-head)
 *   120 rope_theta     float32, POS_ROTARY only (else 0): the base of the rotary frequencies,
 *                      finite and > 0 (10000 Llama 2, 500000 Llama 3, 1000000 Qwen2.5)
 *   124 rope_freqs     1: the rotary frequencies are a tensor of the file (rope_freqs, head_size/2
 *                      float32: frequencies rescaled at export, as Llama 3's rope_scaling does);
 *                      0: freq_i = rope_theta^(-2i/head_size). POS_ROTARY only.
 *   128 reserved, zero up to byte 256
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
 *                            split with numbers one digit at a time); tokenizer.c spells out each
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
 * Tensor table entry (64 bytes): name (48 bytes, NUL-padded), offset (8), size (8).
 * The tensors appear in exactly this order, those in brackets only when the header says so.
 * QKV = (n_head + 2 n_kv_head) head_size: the rows of the fused projection, queries first.
 *   wte (Vp, C) token embedding
 *   [wpe (n_ctx, C)]                          POS_LEARNED
 *   [rope_freqs (head_size / 2)]              POS_ROTARY with rope_freqs = 1
 *   per layer, each stacked over the layers (e.g. attn.c_attn.weight is (n_layer, QKV, C)):
 *     ln_1.weight (C), [ln_1.bias (C)]        the norm before attention; bias: BIAS_NORM
 *     attn.c_attn.weight (QKV, C)             query, key and value projections, fused
 *     [attn.c_attn.bias (QKV)]                BIAS_QKV
 *     attn.c_proj.weight (C, C)               attention's output projection
 *     [attn.c_proj.bias (C)]                  BIAS_ATTN_OUT
 *     ln_2.weight (C), [ln_2.bias (C)]        the norm before the feed-forward; BIAS_NORM
 *     [mlp.gate.weight (H, C)]                FFN_SWIGLU: the gate
 *     [mlp.gate.bias (H)]                     FFN_SWIGLU and BIAS_FFN
 *     mlp.c_fc.weight (H, C)                  the up projection
 *     [mlp.c_fc.bias (H)]                     BIAS_FFN
 *     mlp.c_proj.weight (C, H)                the down projection
 *     [mlp.c_proj.bias (C)]                   BIAS_FFN
 *   ln_f.weight (C), [ln_f.bias (C)]          the final norm; BIAS_NORM
 *   [lm_head.weight (Vp, C)]                  when not tied
 * GPT-2's block has every bias and none of gate, rope_freqs; Llama's has no bias, a gate and
 * rotary positions; Qwen2's is Llama's with BIAS_QKV. load.h's tensor_list() and
 * export/weight_file.py's file_tensors() spell out the same list. Matrices are PyTorch
 * nn.Linear's (out_features, in_features), row-major: out[i] = sum_j W[i][j] * in[j].
 * A q8_0 matrix of n values is n int8 quants, zero padding to a multiple of 4, then n/32
 * float32 scales: value = quant * scale of its group of 32 along the row.
 * A q4_0 matrix of n values is n/2 bytes of quants, zero padding to a multiple of 4, then n/32
 * float32 scales. Each group of 32 values along a row has 16 bytes: byte i holds quant i + 8
 * in its low 4 bits and quant i + 16 + 8 in its high 4 bits (quants -8..7); value = quant *
 * scale. (export.py makes the group's largest magnitude quant -8: scale = that value / -8.)
 */
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

#define MODEL_MAGIC 0x43545047u /* "GPTC" read as a little-endian uint32 */
#define MODEL_VERSION 3u /* and 2 (its tokenizer section without the second part), and 1 (no
                            header fields from byte 108) */
#define HEADER_SIZE 256u
#define TENSOR_ALIGN 64u
#define TENSOR_NAME_LEN 48

enum { GELU_TANH = 0, GELU_ERF = 1 };
enum { POS_LEARNED = 0, POS_SINUSOIDAL = 1, POS_ROTARY = 2 };
enum { NORM_LAYER = 0, NORM_RMS = 1 };
enum { FFN_GELU = 0, FFN_SWIGLU = 1 };
enum { BIAS_QKV = 1, BIAS_ATTN_OUT = 2, BIAS_FFN = 4, BIAS_NORM = 8, BIAS_ALL = 15 };
enum { WT_F32 = 0, WT_Q8_0 = 1, WT_Q4_0 = 2, WT_COUNT }; /* kernels/matmul.h: weight_format() */
enum { PRETOK_CHAR = 0, PRETOK_GPT2 = 1, PRETOK_CL100K = 2, PRETOK_WHOLE = 3, PRETOK_DIGITS_GPT2 = 4,
       PRETOK_QWEN2 = 5, PRETOK_COUNT };
enum { TOK_MERGE_PAIRS = 1, TOK_WHOLE_PIECES = 2, TOK_SENTENCEPIECE = 4, TOK_BYTE_FALLBACK = 8,
       TOK_DUMMY_PREFIX = 16, TOK_REMOVE_EXTRA_SPACES = 32, TOK_NFC = 64, TOK_ALL = 127 };
enum { TOKEN_NORMAL = 0, TOKEN_CONTROL = 1, TOKEN_UNKNOWN = 2, TOKEN_BYTE = 3, TOKEN_SPECIAL = 4 };
#define RANK_NONE 0xFFFFFFFFu
#define QUANT_GROUP 32 /* values per scale in a q8_0 or q4_0 matrix: the header's group_size */

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
    uint8_t reserved[HEADER_SIZE - 128];
} FileHeader;

typedef struct {
    char name[TENSOR_NAME_LEN];
    uint64_t offset, size;
} TensorEntry;

_Static_assert(sizeof(FileHeader) == HEADER_SIZE, "FileHeader must be 256 bytes");
_Static_assert(offsetof(FileHeader, norm) == 108 && offsetof(FileHeader, rope_freqs) == 124, "model.h's byte table");
_Static_assert(sizeof(TensorEntry) == 64, "TensorEntry must be 64 bytes");

/* ---- tokenizer.c ---------------------------------------------------------------------- */

typedef struct {
    uint32_t n_tokens;
    int pretokenizer;          /* PRETOK_* */
    int32_t eot_id;            /* -1: none */
    int32_t bos_id;            /* prepended to every encoded text, -1: none */
    int32_t unk_id;            /* SentencePiece's unknown piece, -1: none */
    uint32_t flags;            /* TOK_* */
    const uint32_t *ranks;     /* (n_tokens) merge rank, RANK_NONE = not mergeable */
    const uint32_t *offsets;   /* (n_tokens + 1) into blob */
    const uint8_t *blob;       /* token byte strings */
    const uint8_t *kinds;      /* (n_tokens) TOKEN_*, or NULL: all TOKEN_NORMAL (versions 1, 2) */
    const uint32_t *merges;    /* (n_merges, 3) left, right, merged (TOK_MERGE_PAIRS) */
    uint32_t n_merges;
    const uint32_t *rule_offsets; /* (2 n_rules + 1) into rules_blob: key, value, key, ... */
    const uint8_t *rules_blob;
    uint32_t n_rules;
    int parse_special;         /* --special: the text of TOKEN_SPECIAL / TOKEN_CONTROL tokens in a
                                  prompt is that token (else it is plain text) */
    /* indexes built at load */
    uint32_t byte_token[256];  /* the normal token of each single byte, RANK_NONE if absent */
    uint32_t byte_piece[256];  /* SentencePiece's <0xNN> byte-fallback token, RANK_NONE if absent */
    uint32_t *table;           /* hash of normal tokens' bytes -> id + 1 (0 = empty slot) */
    uint64_t table_mask;
    uint32_t *pair_table;      /* hash of (left, right) -> merge index + 1 (TOK_MERGE_PAIRS) */
    uint64_t pair_mask;
    uint32_t *rule_table;      /* hash of a rule's key -> rule index + 1 */
    uint64_t rule_mask;
    uint64_t rule_lengths;     /* bit k set: some rule's key is k + 1 bytes long (k < 64) */
    uint32_t max_rule_value;   /* the longest rule value in bytes */
    uint32_t *specials;        /* ids --special recognises, longest text first */
    uint32_t n_specials;
    uint32_t max_token_len;    /* longest normal token in bytes */
    /* scratch reused by every encode call, grown as needed (not touched while decoding) */
    struct BpePart *parts;
    uint64_t *heap;
    size_t parts_cap;
    uint8_t *normalized;       /* a text after its normalizer */
    size_t normalized_cap;
} Tokenizer;

/* Validate and index the tokenizer section [data, data+size) of a file of format version
 * `version` (model.h). Returns NULL on success, else a static message naming the problem (the
 * caller adds "error: "). */
const char *tokenizer_init(Tokenizer *t, const uint8_t *data, uint64_t size, uint32_t version);
void tokenizer_free(Tokenizer *t);

/* Encode text (any bytes) and append the ids to *ids (capacity *cap, grown with realloc):
 * bos_id first when the vocabulary has one, special-token text as plain text unless
 * t->parse_special. Returns the number of ids, or -1 with *err set when the vocabulary cannot
 * represent the text (a character vocabulary missing a character). */
long tokenizer_encode(Tokenizer *t, const uint8_t *text, size_t len, uint32_t **ids, size_t *cap,
                      const char **err);

/* The bytes of token id (length in *len), or NULL for an id outside the vocabulary: its text
 * as the vocabulary spells it (a control token's name, such as <s>). */
const uint8_t *tokenizer_token(const Tokenizer *t, uint32_t id, size_t *len);

/* What token id prints when generated: its bytes, or nothing for a control token. */
const uint8_t *tokenizer_output(const Tokenizer *t, uint32_t id, size_t *len);

/* Length a UTF-8 sequence starting with lead byte b should have (1 for anything invalid). */
static inline size_t utf8_length(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 1;
}

#endif
