/* attention_page.h: the --attention picture, one self-contained HTML page: the attention
 * weights as JSON plus a small inline script that draws one heatmap per layer and head and one
 * per layer for the average over heads, with the tokens on both axes and each cell's weight on
 * hover. A Content-Security-Policy forbids every fetch, so the page works offline and cannot
 * load anything. Included by run.c, which computes the weights; nothing here knows the model.
 */
#ifndef ATTENTION_PAGE_H
#define ATTENTION_PAGE_H

#include <stdio.h>
#include <string.h>

#include "tokenizer.h"
#include "utf8.h"

/* A heatmap per head stays readable up to this many tokens. */
#define ATTENTION_MAX_TOKENS 64

static const char attention_page_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
    "script-src 'unsafe-inline'; style-src 'unsafe-inline'\">\n"
    "<title>Attention weights</title>\n<style>\n"
    "body{font:14px system-ui,sans-serif;margin:20px;color:#222;max-width:1400px}\n"
    "h2{font-size:16px;margin:18px 0 6px}.layer{display:flex;flex-wrap:wrap;gap:20px}\n"
    "figure{margin:0}figcaption{font-weight:600;margin-bottom:2px}canvas{display:block}\n"
    ".legend{display:flex;align-items:center;gap:10px;flex-wrap:wrap}\n"
    ".bar{width:180px;height:14px;border:1px solid #999;"
    "background:linear-gradient(to right,#fff,#08306b)}\n"
    ".masked{width:14px;height:14px;background:#eee;border:1px solid #bbb}\n"
    "#tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:4px 8px;"
    "border-radius:4px;font-size:12px;display:none;white-space:pre}\n"
    "</style></head><body>\n<h1>Attention weights</h1>\n"
    "<p>Each heatmap is one attention head. <b>Row</b> = the query token (the position doing the "
    "looking); <b>column</b> = the key token it looks at. The colour is the attention weight, "
    "the softmax of the scaled query&middot;key scores: each row sums to 1. Cells right of the "
    "diagonal are masked: a token never attends to tokens after it. Hover over a cell to read "
    "its weight. The last map of each layer averages its heads.</p>\n"
    "<div class=\"legend\">weight 0 <span class=\"bar\"></span> 1 &nbsp; <span class=\"masked\">"
    "</span> masked (future) &nbsp; &#9251; = space, &#8629; = newline</div>\n"
    "<p id=\"summary\"></p><div id=\"maps\"></div><div id=\"tip\"></div>\n"
    "<script type=\"application/json\" id=\"attention-data\">";

static const char attention_page_tail[] =
    "</script>\n<script>\n"
    "const d = JSON.parse(document.getElementById('attention-data').textContent);\n"
    "const T = d.tokens.length, tip = document.getElementById('tip');\n"
    "document.getElementById('summary').textContent = `${T} tokens, ${d.n_layer} layers x "
    "${d.n_head} heads (${d.model})`;\n"
    "const cell = T <= 16 ? 22 : T <= 32 ? 16 : 12, font = Math.min(12, cell - 1);\n"
    "const label = t => t.length > 10 ? t.slice(0, 9) + '\\u2026' : t;\n"
    "const ctx0 = document.createElement('canvas').getContext('2d');\n"
    "ctx0.font = font + 'px monospace';\n"
    "const margin = 8 + Math.max(...d.tokens.map(t => ctx0.measureText(label(t)).width));\n"
    "function heatmap(rows, title) {\n"
    "  const fig = document.createElement('figure'), cap = document.createElement('figcaption');\n"
    "  cap.textContent = title; fig.appendChild(cap);\n"
    "  const c = document.createElement('canvas'); c.className = 'heatmap';\n"
    "  const size = margin + T * cell + 2; c.width = size; c.height = size;\n"
    "  const g = c.getContext('2d'); g.fillStyle = '#fff'; g.fillRect(0, 0, size, size);\n"
    "  g.font = font + 'px monospace'; g.fillStyle = '#222'; g.textBaseline = 'middle';\n"
    "  for (let i = 0; i < T; i++) {\n"
    "    g.textAlign = 'right'; g.fillText(label(d.tokens[i]), margin - 4, margin + (i + .5) * cell);\n"
    "    g.save(); g.translate(margin + (i + .5) * cell, margin - 4); g.rotate(-Math.PI / 2);\n"
    "    g.textAlign = 'left'; g.fillText(label(d.tokens[i]), 0, 0); g.restore();\n"
    "  }\n"
    "  for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {\n"
    "    if (j > i) { g.fillStyle = '#eee'; }\n"
    "    else { const w = rows[i][j];\n"
    "      g.fillStyle = `rgb(${255 - 247 * w},${255 - 207 * w},${255 - 148 * w})`; }\n"
    "    g.fillRect(margin + j * cell, margin + i * cell, cell, cell);\n"
    "  }\n"
    "  g.strokeStyle = '#999'; g.strokeRect(margin - .5, margin - .5, T * cell + 1, T * cell + 1);\n"
    "  c.addEventListener('mousemove', e => {\n"
    "    const r = c.getBoundingClientRect();\n"
    "    const j = Math.floor((e.clientX - r.left - margin) / cell);\n"
    "    const i = Math.floor((e.clientY - r.top - margin) / cell);\n"
    "    if (i < 0 || j < 0 || i >= T || j >= T) { tip.style.display = 'none'; return; }\n"
    "    tip.textContent = `${title}\\nquery #${i} \"${d.tokens[i]}\"\\nkey #${j} \"${d.tokens[j]}\"\\n` +\n"
    "      (j > i ? 'masked: weight 0' : `weight ${rows[i][j].toFixed(4)}`);\n"
    "    tip.style.left = (e.clientX + 14) + 'px'; tip.style.top = (e.clientY + 14) + 'px';\n"
    "    tip.style.display = 'block';\n"
    "  });\n"
    "  c.addEventListener('mouseleave', () => { tip.style.display = 'none'; });\n"
    "  fig.appendChild(c); return fig;\n"
    "}\n"
    "const maps = document.getElementById('maps');\n"
    "for (let l = 0; l < d.n_layer; l++) {\n"
    "  const h2 = document.createElement('h2'); h2.textContent = `Layer ${l}`; maps.appendChild(h2);\n"
    "  const row = document.createElement('div'); row.className = 'layer'; maps.appendChild(row);\n"
    "  const heads = d.weights[l];\n"
    "  heads.forEach((rows, h) => row.appendChild(heatmap(rows, `layer ${l}, head ${h}`)));\n"
    "  const avg = heads[0].map((r, i) => r.map((_, j) => heads.reduce((s, hd) => s + hd[i][j], 0) / heads.length));\n"
    "  row.appendChild(heatmap(avg, `layer ${l}, average of ${heads.length} heads`));\n"
    "}\n"
    "</script>\n</body></html>\n";

/* A token as a JSON string for a label: UTF-8 kept, space and newline made visible, other
 * control characters and bytes that are not valid UTF-8 written as \xNN text; '<' escaped so
 * that the JSON cannot close the <script> element around it. */
static void json_label(FILE *f, const uint8_t *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        size_t len = utf8_length(b), k = 1;
        if (len > 1 && i + len <= n)
            while (k < len && (s[i + k] & 0xC0) == 0x80) k++;
        if (len > 1 && k == len) { fwrite(s + i, 1, len, f); i += len; continue; }
        if (b == ' ') fputs("\\u2423", f);
        else if (b == '\n') fputs("\\u21b5", f);
        else if (b == '"' || b == '\\') fprintf(f, "\\%c", b);
        else if (b == '<') fputs("\\u003c", f);
        else if (b < 0x20 || b >= 0x7F) fprintf(f, "\\\\x%02X", b);
        else fputc(b, f);
        i++;
    }
    fputc('"', f);
}

/* The page for tokens ids[0..n) of a model with n_layer x n_head heads; weights (n_layer,
 * n_head, n, n) holds row i of each head's attention weights in its first i + 1 values. */
typedef struct {
    const char *model;        /* shown in the page's summary line */
    const Tokenizer *tokenizer;
    const uint32_t *ids;
    long n;
    int n_layer, n_head;
    const float *weights;
} AttentionPicture;

static void write_attention_page(FILE *f, const AttentionPicture *p) {
    fputs(attention_page_head, f);
    fprintf(f, "{\"n_layer\": %d, \"n_head\": %d, \"model\": ", p->n_layer, p->n_head);
    json_label(f, (const uint8_t *)p->model, strlen(p->model));
    fputs(", \"tokens\": [", f);
    for (long i = 0; i < p->n; i++) {
        size_t len;
        const uint8_t *token = tokenizer_token(p->tokenizer, p->ids[i], &len);
        if (i) fputs(", ", f);
        json_label(f, token, len);
    }
    /* weights[layer][head][query] = the query's weights over keys 0..query (the rest masked) */
    fputs("],\n\"weights\": [", f);
    for (int l = 0; l < p->n_layer; l++) {
        fputs(l ? ",\n[" : "[", f);
        for (int h = 0; h < p->n_head; h++) {
            fputs(h ? ", [" : "[", f);
            for (long i = 0; i < p->n; i++) {
                const float *row = p->weights + (((size_t)l * p->n_head + h) * p->n + i) * p->n;
                fputs(i ? ", [" : "[", f);
                for (long j = 0; j <= i; j++) fprintf(f, j ? ",%.7g" : "%.7g", (double)row[j]);
                fputc(']', f);
            }
            fputc(']', f);
        }
        fputc(']', f);
    }
    fputs("]}", f);
    fputs(attention_page_tail, f);
}

#endif
