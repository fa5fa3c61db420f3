/* info.h: --info, what a weight file holds as the loader read it (load.h), and how this run
 * will run it: the kernels this build uses on this CPU, the threads, the key/value cache. */
#ifndef INFO_H
#define INFO_H

#include "util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/matmul.h"
#include "kv_cache.h"
#include "load.h"
#include "model.h"
#include "threads.h"
#include "tokenizer.h"

/* What --info prints from. */
typedef struct {
    const ModelFile *file;
    const Config *config;      /* n_ctx: this run's context */
    int file_n_ctx;            /* the context the file's header gives */
    TransformerWeights *weights;
    const Tokenizer *tokenizer;
    CacheType cache;           /* this run's key/value cache */
    double load_seconds;
} FileInfo;

/* "block: Llama (RMSNorm, rotary positions theta 10000, SwiGLU, ...)": the four places where
 * GPT-2's and Llama's blocks differ, as this file chooses them */
static void print_block_design(const Config *c) {
    int gpt2 = c->norm == NORM_LAYER && c->pos_kind != POS_ROTARY && c->ffn == FFN_GELU;
    int llama = c->norm == NORM_RMS && c->pos_kind == POS_ROTARY && c->ffn == FFN_SWIGLU;
    printf("block: %s (%s, ", gpt2 ? "GPT-2" : llama ? "Llama" : "mixed", c->norm == NORM_RMS ? "RMSNorm" : "LayerNorm");
    if (c->norm_after) printf(c->norm_before ? "norms before and after each sublayer, " : "norms after each sublayer, ");
    if (c->qk_norm) printf("query and key norms %s, ", c->qk_norm == QK_NORM_HEAD ? "per head" : "over the projection");
    if (c->pos_kind == POS_ROTARY) {
        printf("rotary positions theta %g%s", (double)c->rope_theta,
               c->rope_long ? " rescaled by the file (LongRoPE)" : c->rope_freqs ? " rescaled by the file" : "");
        if (c->rotary_dims != c->head_size) printf(" on %d of %d dimensions", c->rotary_dims, c->head_size);
        if (c->rope_scale != 1.0f) printf(" scaled by %g", (double)c->rope_scale);
        printf(", ");
    } else {
        printf("%s positions added, ", c->pos_kind == POS_LEARNED ? "learned" : "sinusoidal");
    }
    if (c->ffn == FFN_SWIGLU) printf("SwiGLU feed-forward, ");
    else printf("%s (%s) feed-forward, ", c->ffn == FFN_GEGLU ? "GEGLU" : "GELU", c->gelu == GELU_TANH ? "tanh" : "erf");
    if (c->embed_scale != 1.0f) printf("embedding times %g, ", (double)c->embed_scale);
    if (c->attn_scale != 1.0f / sqrtf((float)c->head_size)) printf("queries times %g, ", (double)c->attn_scale);
    if (c->attn_softcap != 0.0f) printf("scores capped at %g, ", (double)c->attn_softcap);
    if (c->residual_scale != 1.0f) printf("sublayer outputs times %g, ", (double)c->residual_scale);
    if (c->logit_divisor != 1.0f) printf("logits divided by %g, ", (double)c->logit_divisor);
    if (c->logit_softcap != 0.0f) printf("logits capped at %g, ", (double)c->logit_softcap);
    if (c->n_kv_head == c->n_head) printf("multi-head attention, ");
    else if (c->n_kv_head == 1) printf("multi-query attention, ");
    else printf("grouped-query attention %d:%d, ", c->n_head, c->n_kv_head);
    static const char *parts[] = {"query/key/value", "attention output", "feed-forward", "norms"};
    if (c->bias == BIAS_ALL) printf("biases everywhere)\n");
    else if (c->bias == 0) printf("no biases)\n");
    else {
        printf("biases on");
        for (int b = 0, first = 1; b < 4; b++)
            if (c->bias & (1 << b)) printf("%s %s", first ? "" : ",", parts[b]), first = 0;
        printf(")\n");
    }
}

/* "layers 0-2 4-6: attention over the whole context, rotary positions theta 10000", a line per
 * kind of layer in the layer table (model.h), its layers listed as runs */
static void print_layer_kinds(const Config *c, const TransformerWeights *w) {
    for (int l = 0; l < c->n_layer; l++) {
        const LayerWeights *L = &w->layer[l];
        int first_of_kind = 1;
        for (int k = 0; k < l && first_of_kind; k++)
            first_of_kind = !same_layer_kind(&w->layer[k], L);
        if (!first_of_kind) continue;
        int members = 0;
        for (int a = l; a < c->n_layer; a++) members += same_layer_kind(&w->layer[a], L);
        printf("layer%s", members > 1 ? "s" : "");
        for (int a = l; a < c->n_layer; a++) {
            if (!same_layer_kind(&w->layer[a], L) || (a > l && same_layer_kind(&w->layer[a - 1], L))) continue;
            int b = a;
            while (b + 1 < c->n_layer && same_layer_kind(&w->layer[b + 1], L)) b++;
            if (b > a) printf(" %d-%d", a, b);
            else printf(" %d", a);
        }
        if (L->window) printf(": attention over the last %d positions, ", L->window);
        else printf(": attention over the whole context, ");
        if (L->rotary) printf("rotary positions theta %g\n", (double)L->rope_theta);
        else printf("%s\n", c->pos_kind == POS_ROTARY ? "no rotary positions" : "positions added to the embedding");
    }
}

/* "weights: q8_0", or with several types "weights: q4_0 (12 matrices), q8_0 (2)": the types of
 * the matrices (the embedding's and the products'); "; query, key and value apart" after them
 * when the file keeps the three apart. */
static void print_weight_types(const Config *c, TransformerWeights *w) {
    Matrix **matrices = calloc_or_die(((size_t)MATRICES_PER_LAYER * c->n_layer + 2) * sizeof(Matrix *), "matrix list");
    int n = product_matrices(c, w, matrices), count[WT_COUNT] = {0}, kinds = 0;
    if (!c->tied_head) matrices[n++] = &w->wte; /* tied: the head is the embedding */
    for (int i = 0; i < n; i++) kinds += count[matrices[i]->type]++ == 0;
    printf("weights:");
    for (int type = 0, first = 1; type < WT_COUNT; type++) {
        if (!count[type]) continue;
        printf("%s %s", first ? "" : ",", weight_types[type].name);
        if (kinds > 1) printf(" (%d matri%s)", count[type], count[type] == 1 ? "x" : "ces");
        first = 0;
    }
    /* model.h's qkv_apart: each layer's three counted as matrices of their own */
    printf("%s\n", c->qkv_apart ? "; query, key and value apart" : "");
    free(matrices);
}

/* The metadata section's entries, one a line, each value's first line cut at 100 bytes. */
static void print_metadata(const ModelFile *f) {
    uint64_t at = 4;
    for (uint32_t i = 0; i < f->n_metadata; i++) {
        MetadataEntry e = metadata_next(f, &at);
        uint32_t shown = 0;
        while (shown < e.value_len && shown < 100 && e.value[shown] != '\n') shown++;
        printf("  %.*s: %.*s%s\n", (int)e.key_len, (const char *)e.key, (int)shown, (const char *)e.value,
               shown < e.value_len ? " ..." : "");
    }
}

/* "chat template options: enable_thinking (default true: --think, --no-think)": the boolean
 * options --chat --template-option KEY=VALUE takes (the table's chat.option.NAME keys). */
static void print_template_options(const ModelFile *f) {
    uint64_t at = 4;
    int n = 0;
    for (uint32_t i = 0; i < f->n_metadata; i++) {
        MetadataEntry e = metadata_next(f, &at);
        if (e.key_len <= 12 || memcmp(e.key, "chat.option.", 12) != 0) continue;
        int thinking = e.key_len - 12 == 15 && memcmp(e.key + 12, "enable_thinking", 15) == 0;
        printf("%s%.*s (default %.*s%s)", n++ ? ", " : "chat template options: ", (int)(e.key_len - 12),
               (const char *)e.key + 12, (int)e.value_len, (const char *)e.value, thinking ? ": --think, --no-think" : "");
    }
    if (n) printf("; --template-option KEY=VALUE\n");
}

static void print_info(const FileInfo *t, const char *path) {
    const Config *c = t->config;
    const FileHeader *h = t->file->header;
    printf("file: %s (%zu bytes, format version %u), loaded in %.3f s\n", path, t->file->size,
           h->version, t->load_seconds);
    printf("kernels: %s, %d threads\n", kernels_description(), thread_count());
    static const char *pretokenizers[PRETOK_COUNT] = {"character", "gpt2", "cl100k", "whole-text", "digits+gpt2",
                                                      "qwen2", "o200k", "o200k (llama.cpp's ASCII case)"};
    const Tokenizer *tok = t->tokenizer;
    const char *merging = tok->flags & TOK_SENTENCEPIECE ? "SentencePiece BPE"
                        : tok->flags & TOK_MERGE_PAIRS ? "byte-level BPE by merge list"
                        : tok->pretokenizer == PRETOK_CHAR ? "characters" : "byte-level BPE by rank";
    printf("tokenizer: %u tokens, %s, %s pre-tokenizer, end-of-text id %d, beginning-of-text id %d\n",
           tok->n_tokens, merging, pretokenizers[tok->pretokenizer], tok->eot_id, tok->bos_id);
    if (tok->flags & TOK_SENTENCEPIECE)
        printf("  %u normalization rules%s%s, %s\n", tok->n_rules, tok->flags & TOK_DUMMY_PREFIX ? ", dummy prefix" : "",
               tok->flags & TOK_REMOVE_EXTRA_SPACES ? ", extra spaces removed" : "",
               tok->flags & TOK_BYTE_FALLBACK ? "byte fallback" : "unknown piece");
    else if (tok->flags & (TOK_NFC | TOK_MERGE_PAIRS))
        printf("  %u merges%s%s\n", tok->n_merges, tok->flags & TOK_NFC ? ", NFC normalizer" : "",
               tok->flags & TOK_WHOLE_PIECES ? ", whole pieces first (ignore_merges)" : "");
    printf("  stop tokens:");
    for (uint32_t i = 0; i < tok->n_stop; i++) printf(" %u", tok->stop[i]);
    printf(tok->n_stop ? "\n" : " none\n");
    if (t->file->n_metadata) {
        printf("metadata:\n");
        print_metadata(t->file);
        print_template_options(t->file);
    }
    if (c->n_layer == 0) { printf("tokenizer-only file (no model)\n"); return; }
    printf("n_layer %d, n_head %d, n_embd %d (head_size %d), n_hidden %d, n_ctx %d", c->n_layer,
           c->n_head, c->n_embd, c->head_size, c->n_hidden, t->file_n_ctx);
    if (c->n_ctx != t->file_n_ctx) printf(" (this run: %d)", c->n_ctx);
    printf("\n");
    print_block_design(c);
    print_layer_kinds(c, t->weights);
    printf("vocab_size %d (padded to %d), norm_eps %g, head %s, ", c->vocab_size, c->vocab_padded, (double)c->norm_eps,
           c->tied_head ? "tied" : "separate");
    print_weight_types(c, t->weights);
    CacheType cache = t->cache;
    printf("key/value cache: %s, %d positions at most, %.1f MB (generation holds the positions its tokens take)\n",
           cache_types[cache].name, c->n_ctx, 2 * kv_cache_bytes(c->n_layer, c->n_kv_head, c->head_size, c->n_ctx, cache) / 1e6);
    printf("%-26s %6s %12s %12s\n", "section", "type", "offset", "bytes");
    printf("%-26s %6s %12d %12u\n", "header", "", 0, HEADER_SIZE);
    printf("%-26s %6s %12llu %12llu\n", "tokenizer", "", (unsigned long long)h->tokenizer_offset,
           (unsigned long long)h->tokenizer_size);
    if (h->version >= 4)
        printf("%-26s %6s %12llu %12llu\n", "metadata", "", (unsigned long long)h->metadata_offset,
               (unsigned long long)h->metadata_size);
    if (h->version >= 5)
        printf("%-26s %6s %12llu %12llu\n", "layer table", "", (unsigned long long)h->layers_offset,
               (unsigned long long)h->n_layer * LAYER_ROW_SIZE);
    const TensorEntry *table = (const TensorEntry *)(const void *)(t->file->data + h->tensors_offset);
    printf("%-26s %6s %12llu %12llu\n", "tensor table", "", (unsigned long long)h->tensors_offset,
           (unsigned long long)h->n_tensors * sizeof(TensorEntry));
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        const char *type = h->version >= 4 ? weight_types[table[i].type].name : "";
        printf("%-26s %6s %12llu %12llu\n", table[i].name, type, (unsigned long long)table[i].offset,
               (unsigned long long)table[i].size);
    }
}

#endif
