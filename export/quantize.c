/* export/quantize.c: the exporter's quantizers for GGUF's block formats in C, a shared library
 * (export/build/libquantize.so, built by `make`) that export/block_formats.py calls through
 * ctypes. Each follows llama.cpp's reference quantizer of its format (quantize_row_*_ref of
 * ggml-quants.c, no importance matrix) step for step in float32: the same searches, the same
 * operations in the same order, rounding to nearest even, so that its bytes are llama.cpp's and
 * block_formats.py's NumPy definitions' (tests/test_quantize.py checks both). It is those
 * definitions at the speed of C: one thread per call, the caller splitting a tensor's rows
 * between threads.
 *
 * Built without -ffast-math and with -ffp-contract=off: a fused multiply-add rounds once where
 * the reference rounds twice. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../kernels/f16.h"

#define SUPER_BLOCK 256                 /* values per block of the k formats */
#define GROUP_MAX_EPS 1e-15f             /* ggml: a group whose largest magnitude is below this is all zero */

/* To the nearest integer, ties to even (ggml's nearest_int; rintf in the default rounding mode). */
static int nearest_int(float x) { return (int)rintf(x); }

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The binary16 number nearest x, as the block stores it (GGML_FP32_TO_FP16), and its value. */
static void put_half(uint8_t *at, float x) {
    uint16_t h = f16_from_f32(x);
    memcpy(at, &h, 2);
}
static float half_value(float x) { return f32_from_f16(f16_from_f32(x)); }

/* ---- q5_0 and q5_1: 32 values, 5-bit numbers ------------------------------------------------ */

/* qh: bit j is number j's fifth bit; qs[j]: number j's low four bits, number j + 16's above. */
static void pack_five_bits(uint8_t *qh, uint8_t *qs, const uint8_t *q) {
    uint32_t high = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 15) | ((q[j + 16] & 15) << 4));
        high |= (uint32_t)((q[j] >> 4) & 1) << j;
        high |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh, &high, 4);
}

/* d = (the value of largest magnitude) / -16; numbers min(31, trunc(x / d + 16.5)). */
void quantize_q5_0(const float *x, int64_t n_blocks, uint8_t *out) {
    for (int64_t b = 0; b < n_blocks; b++, x += 32, out += 22) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[32];
        for (int j = 0; j < 32; j++) {
            int v = (int8_t)(x[j] * id + 16.5f);
            q[j] = (uint8_t)(v < 31 ? v : 31);
        }
        put_half(out, d);
        pack_five_bits(out + 2, out + 6, q);
    }
}

/* d = (max - min) / 31, m = min; numbers trunc((x - min) / d + 0.5). */
void quantize_q5_1(const float *x, int64_t n_blocks, uint8_t *out) {
    for (int64_t b = 0; b < n_blocks; b++, x += 32, out += 24) {
        float min = x[0], max = x[0];
        for (int j = 1; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        float d = (max - min) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[32];
        for (int j = 0; j < 32; j++) q[j] = (uint8_t)((x[j] - min) * id + 0.5f);
        put_half(out, d);
        put_half(out + 2, min);
        pack_five_bits(out + 4, out + 8, q);
    }
}

/* ---- the k formats' searches ------------------------------------------------------------------ */

/* make_qkx2_quants: numbers L in 0..nmax, a scale and a min (returned as -min >= 0) with x ~
 * scale * L + min, chosen by weighted least squares over the inverse scales (rmin + rdelta * is
 * + nmax) / (max - min), is = 0..nstep, each from the min of the best so far. */
static float search_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                              float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min), scale = 1.0f / iscale, best = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        best += w[i] * (diff * diff);
    }
    uint8_t aux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            aux[i] = (uint8_t)l;
            float wl = w[i] * l;
            sum_l += wl;
            sum_l2 += wl * l;
            sum_xl += wl * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * aux[i] + this_min - x[i];
                error += w[i] * (diff * diff);
            }
            if (error < best) {
                memcpy(L, aux, (size_t)n);
                best = error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

/* make_qx_quants with rmse_type 1 (weights x^2): numbers L in 0..2 nmax - 1 (l + nmax) and a scale
 * with x ~ scale * l, among the inverse scales -(nmax + 0.1 is) / max, is = -9..9, by the
 * largest sumlx^2 / suml2. */
static float search_symmetric(int n, int nmax, const float *x, uint8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (uint8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (uint8_t)(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ---- q4_k and q5_k: 256 values, 8 sub-blocks of 32 with 6-bit scales and mins ------------------ */

/* The 12 bytes of 8 6-bit scales and mins (kernels/types.h's q4_k layout). */
static void put_k_scales(uint8_t *s, const uint8_t *sc, const uint8_t *m) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* quantize_row_q4_K_ref (bits 4) and quantize_row_q5_K_ref (bits 5): each sub-block's scale and
 * min by search_scale_min (weights sqrt(mean x^2) + |x|), both set to 6 bits against the
 * block's largest (d, dmin = largest / 63 as binary16), then every value quantized again with
 * the stored scale and min. */
static void quantize_k(const float *x, int64_t n_blocks, uint8_t *out, int bits) {
    int nmax = (1 << bits) - 1, block_bytes = bits == 4 ? 144 : 176;
    for (int64_t b = 0; b < n_blocks; b++, x += SUPER_BLOCK, out += block_bytes) {
        uint8_t L[SUPER_BLOCK], ls[8], lm[8];
        float scales[8], mins[8], weights[32], max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            const float *sub = x + 32 * j;
            float av = 0;
            for (int i = 0; i < 32; i++) av += sub[i] * sub[i];
            av = sqrtf(av / 32);
            for (int i = 0; i < 32; i++) weights[i] = av + fabsf(sub[i]);
            scales[j] = search_scale_min(32, nmax, sub, weights, L + 32 * j, &mins[j], bits == 4 ? -1.0f : -0.5f, 0.1f,
                                         bits == 4 ? 20 : 15);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        for (int j = 0; j < 8; j++) {
            uint8_t s = (uint8_t)nearest_int(inv_scale * scales[j]), m = (uint8_t)nearest_int(inv_min * mins[j]);
            ls[j] = s < 63 ? s : 63;
            lm[j] = m < 63 ? m : 63;
        }
        put_half(out, max_scale / 63.0f);
        put_half(out + 2, max_min / 63.0f);
        put_k_scales(out + 4, ls, lm);
        float d = half_value(max_scale / 63.0f), dmin = half_value(max_min / 63.0f);
        for (int j = 0; j < 8; j++) {
            float step = d * ls[j];
            if (step == 0.0f) continue;
            float shift = dmin * lm[j];
            for (int i = 0; i < 32; i++)
                L[32 * j + i] = (uint8_t)clamp_int(nearest_int((x[32 * j + i] + shift) / step), 0, nmax);
        }
        uint8_t *qs = out + (bits == 4 ? 16 : 48);
        for (int c = 0; c < 4; c++) /* each 64 values: the first 32 in the low nibbles, the next 32 above */
            for (int i = 0; i < 32; i++)
                qs[32 * c + i] = (uint8_t)((L[64 * c + i] & 15) | ((L[64 * c + 32 + i] & 15) << 4));
        if (bits == 5) { /* bit j of qh[i]: the fifth bit of sub-block j's value i */
            uint8_t *qh = out + 16;
            for (int i = 0; i < 32; i++) {
                uint8_t h = 0;
                for (int j = 0; j < 8; j++) h |= (uint8_t)(((L[32 * j + i] >> 4) & 1) << j);
                qh[i] = h;
            }
        }
    }
}

void quantize_q4_k(const float *x, int64_t n_blocks, uint8_t *out) { quantize_k(x, n_blocks, out, 4); }
void quantize_q5_k(const float *x, int64_t n_blocks, uint8_t *out) { quantize_k(x, n_blocks, out, 5); }

/* ---- q6_k: 256 values, 16 sub-blocks of 16 with int8 scales ----------------------------------- */

/* quantize_row_q6_K_ref: each sub-block's scale by search_symmetric (nmax 32); the block's scale
 * of largest magnitude sets d = 1 / (-128 / it) (binary16) and each int8 scale min(127,
 * round(-128 / it x scale)); then every value quantized again with them. */
void quantize_q6_k(const float *x, int64_t n_blocks, uint8_t *out) {
    for (int64_t b = 0; b < n_blocks; b++, x += SUPER_BLOCK, out += 210) {
        uint8_t L[SUPER_BLOCK];
        float scales[16], max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = search_symmetric(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) max_abs = fabsf(scales[j]), max_scale = scales[j];
        }
        memset(out, 0, 210);
        if (max_abs < GROUP_MAX_EPS) continue; /* all zero, d included */
        float iscale = -128.0f / max_scale;
        int8_t sc[16];
        put_half(out + 208, 1 / iscale);
        for (int j = 0; j < 16; j++) {
            int s = nearest_int(iscale * scales[j]);
            sc[j] = (int8_t)(s < 127 ? s : 127);
        }
        memcpy(out + 192, sc, 16);
        float d = half_value(1 / iscale);
        for (int j = 0; j < 16; j++) {
            float step = d * sc[j];
            if (step == 0.0f) continue;
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = (uint8_t)(32 + clamp_int(nearest_int(x[16 * j + i] / step), -32, 31));
        }
        uint8_t *ql = out, *qh = out + 128;
        for (int h = 0; h < 2; h++) /* each 128 values: four runs of 32 share ql's nibbles and qh's bit pairs */
            for (int i = 0; i < 32; i++) {
                const uint8_t *q = L + 128 * h + i;
                ql[64 * h + i] = (uint8_t)((q[0] & 15) | ((q[64] & 15) << 4));
                ql[64 * h + 32 + i] = (uint8_t)((q[32] & 15) | ((q[96] & 15) << 4));
                qh[32 * h + i] = (uint8_t)((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
            }
    }
}
