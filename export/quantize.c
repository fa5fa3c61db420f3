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

/* ---- q8_0 and q4_0: our 32-value groups with a float32 scale (kernels/types.h) ------------------
 * Each writes the groups' numbers to quants and their scales to scales: the file stores all
 * numbers, then all scales (weight_file.py puts them together). */

/* q8_0: scale = max|x| / 127 (0 for an all-zero group), number = round-to-even(x * (127 /
 * max|x|)) in -127..127. */
void quantize_q8_0(const float *x, int64_t n_groups, int8_t *quants, float *scales) {
    for (int64_t g = 0; g < n_groups; g++, x += 32, quants += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        float inv = amax > 0 ? 127.0f / amax : 0.0f;
        scales[g] = amax / 127.0f;
        for (int i = 0; i < 32; i++) quants[i] = (int8_t)clamp_int(nearest_int(x[i] * inv), -127, 127);
    }
}

/* q8_0 with ggml's numbers (quantize_row_q8_0_ref), a mix's fallback: d = max|x| / 127, number =
 * roundf(x / d) (halves away from zero) from the unrounded d; the scale stored is d rounded to
 * binary16, as a GGUF holds it. */
void quantize_q8_0_ggml(const float *x, int64_t n_groups, int8_t *quants, float *scales) {
    for (int64_t g = 0; g < n_groups; g++, x += 32, quants += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        scales[g] = half_value(d);
        for (int i = 0; i < 32; i++) quants[i] = (int8_t)roundf(x[i] * id);
    }
}

/* q4_0: m = the value of largest magnitude (the first such), scale = m / -8 (0 for an all-zero
 * group), number = round-to-even(x / scale) in -8..7, divided in double; byte i holds number
 * i + 8 in its low 4 bits and number i + 16 + 8 in its high 4 bits. */
void quantize_q4_0(const float *x, int64_t n_groups, uint8_t *packed, float *scales) {
    for (int64_t g = 0; g < n_groups; g++, x += 32, packed += 16) {
        float amax = 0, m = 0;
        for (int i = 0; i < 32; i++)
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]), m = x[i];
        float scale = m / -8.0f + 0.0f; /* + 0: -0 becomes 0 */
        uint8_t q[32];
        for (int i = 0; i < 32; i++) {
            int v = scale != 0.0f ? (int)rint((double)x[i] / (double)scale) : 0;
            q[i] = (uint8_t)(clamp_int(v, -8, 7) + 8);
        }
        for (int i = 0; i < 16; i++) packed[i] = (uint8_t)(q[i] | (q[i + 16] << 4));
        scales[g] = scale;
    }
}

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

/* ---- the k formats' searches ------------------------------------------------------------------
 * Each search runs on LANES sub-blocks at once, one per lane of a vector (GCC's vector extensions:
 * portable C, compiled to the CPU's SIMD), every lane doing the reference's scalar operations in
 * its order: a lane is exactly one call of the reference's function. Branches become masks. */

#define LANES 8
typedef float f8 __attribute__((vector_size(4 * LANES)));
typedef int32_t i8 __attribute__((vector_size(4 * LANES)));

static f8 f8_set(float x) { return (f8){0} + x; }
static i8 i8_set(int32_t x) { return (i8){0} + x; }
static f8 f8_blend(i8 mask, f8 yes, f8 no) { return (f8)((mask & (i8)yes) | (~mask & (i8)no)); }
static i8 i8_blend(i8 mask, i8 yes, i8 no) { return (mask & yes) | (~mask & no); }

/* ggml's nearest_int, lane by lane: adding 1.5 * 2^23 leaves the integer nearest x (ties to even)
 * in the low bits, for |x| < 2^22; a lane outside that range is one whose result is discarded. */
static i8 f8_nearest(f8 x) {
    f8 shifted = x + f8_set(12582912.0f);
    return ((i8)shifted & i8_set(0x007FFFFF)) - i8_set(0x00400000);
}
static i8 i8_clamp(i8 v, int lo, int hi) {
    v = i8_blend(v < i8_set(lo), i8_set(lo), v);
    return i8_blend(v > i8_set(hi), i8_set(hi), v);
}
static f8 f8_abs(f8 x) { return (f8)((i8)x & i8_set(0x7FFFFFFF)); }
static f8 f8_float(i8 v) { return __builtin_convertvector(v, f8); }

/* make_qkx2_quants on LANES sub-blocks of n values: x[i] and w[i] hold value i of every lane's
 * sub-block (transposed). Numbers L in 0..nmax, a scale and a min (returned as -min >= 0) with
 * x ~ scale * L + min, chosen by weighted least squares over the inverse scales (rmin + rdelta *
 * is + nmax) / (max - min), is = 0..nstep, each from the min of the best so far. */
static f8 search_scale_min(int n, int nmax, const f8 *x, const f8 *w, i8 *L, f8 *neg_min, float rmin, float rdelta,
                           int nstep) {
    f8 min = x[0], max = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        min = f8_blend(x[i] < min, x[i], min);
        max = f8_blend(x[i] > max, x[i], max);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    min = f8_blend(min > f8_set(0), f8_set(0), min);
    i8 flat = max == min;
    f8 iscale = (float)nmax / (max - min), scale = 1.0f / iscale, best = f8_set(0);
    for (int i = 0; i < n; i++) {
        L[i] = i8_clamp(f8_nearest(iscale * (x[i] - min)), 0, nmax);
        f8 diff = scale * f8_float(L[i]) + min - x[i];
        best += w[i] * (diff * diff);
    }
    i8 aux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        f8 sum_l = f8_set(0), sum_l2 = f8_set(0), sum_xl = f8_set(0);
        for (int i = 0; i < n; i++) {
            aux[i] = i8_clamp(f8_nearest(iscale * (x[i] - min)), 0, nmax);
            f8 l = f8_float(aux[i]), wl = w[i] * l;
            sum_l += wl;
            sum_l2 += wl * l;
            sum_xl += wl * x[i];
        }
        f8 D = sum_w * sum_l2 - sum_l * sum_l;
        f8 this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        f8 this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        i8 positive = this_min > f8_set(0);
        this_min = f8_blend(positive, f8_set(0), this_min);
        this_scale = f8_blend(positive, sum_xl / sum_l2, this_scale);
        f8 error = f8_set(0);
        for (int i = 0; i < n; i++) {
            f8 diff = this_scale * f8_float(aux[i]) + this_min - x[i];
            error += w[i] * (diff * diff);
        }
        i8 better = (D > f8_set(0)) & (error < best) & ~flat;
        for (int i = 0; i < n; i++) L[i] = i8_blend(better, aux[i], L[i]);
        best = f8_blend(better, error, best);
        scale = f8_blend(better, this_scale, scale);
        min = f8_blend(better, this_min, min);
    }
    for (int i = 0; i < n; i++) L[i] = i8_blend(flat, i8_set(0), L[i]);
    *neg_min = -min;
    return f8_blend(flat, f8_set(0), scale);
}

/* make_qx_quants with rmse_type 1 (weights x^2) on LANES sub-blocks of n values (transposed, as
 * above): numbers L in 0..2 nmax - 1 (l + nmax) and a scale with x ~ scale * l, among the inverse
 * scales -(nmax + 0.1 is) / max, is = -9..9, by the largest sumlx^2 / suml2. */
static f8 search_symmetric(int n, int nmax, const f8 *x, i8 *L) {
    f8 max = f8_set(0), amax = f8_set(0);
    for (int i = 0; i < n; i++) {
        i8 larger = f8_abs(x[i]) > amax;
        amax = f8_blend(larger, f8_abs(x[i]), amax);
        max = f8_blend(larger, x[i], max);
    }
    i8 zero = amax < f8_set(GROUP_MAX_EPS);
    f8 iscale = (float)-nmax / max, sumlx = f8_set(0), suml2 = f8_set(0);
    for (int i = 0; i < n; i++) {
        i8 l = i8_clamp(f8_nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = l + nmax;
        f8 lf = f8_float(l), w = x[i] * x[i];
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    f8 scale = f8_blend(suml2 != f8_set(0), sumlx / suml2, f8_set(0)), best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        i8 ls[32];
        f8 s_lx = f8_set(0), s_l2 = f8_set(0);
        for (int i = 0; i < n; i++) {
            ls[i] = i8_clamp(f8_nearest(iscale * x[i]), -nmax, nmax - 1);
            f8 lf = f8_float(ls[i]), w = x[i] * x[i];
            s_lx += w * x[i] * lf;
            s_l2 += w * lf * lf;
        }
        i8 better = (s_l2 > f8_set(0)) & (s_lx * s_lx > best * s_l2);
        for (int i = 0; i < n; i++) L[i] = i8_blend(better, ls[i] + nmax, L[i]);
        scale = f8_blend(better, s_lx / s_l2, scale);
        best = f8_blend(better, scale * s_lx, best);
    }
    for (int i = 0; i < n; i++) L[i] = i8_blend(zero, i8_set(0), L[i]);
    return f8_blend(zero, f8_set(0), scale);
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
 * min by search_scale_min (weights sqrt(mean x^2) + |x|; the 8 sub-blocks of a block are the 8
 * lanes), both set to 6 bits against the block's largest (d, dmin = largest / 63 as binary16),
 * then every value quantized again with the stored scale and min. */
static void quantize_k(const float *x, int64_t n_blocks, uint8_t *out, int bits) {
    int nmax = (1 << bits) - 1, block_bytes = bits == 4 ? 144 : 176;
    for (int64_t b = 0; b < n_blocks; b++, x += SUPER_BLOCK, out += block_bytes) {
        f8 xt[32], wt[32], scale_v, min_v; /* value i of sub-block j: lane j of xt[i] */
        i8 Lt[32];
        float av[8];
        for (int j = 0; j < 8; j++) {
            const float *sub = x + 32 * j;
            float sum = 0;
            for (int i = 0; i < 32; i++) sum += sub[i] * sub[i];
            av[j] = sqrtf(sum / 32);
        }
        for (int i = 0; i < 32; i++)
            for (int j = 0; j < 8; j++) xt[i][j] = x[32 * j + i], wt[i][j] = av[j] + fabsf(x[32 * j + i]);
        scale_v = search_scale_min(32, nmax, xt, wt, Lt, &min_v, bits == 4 ? -1.0f : -0.5f, 0.1f, bits == 4 ? 20 : 15);
        uint8_t L[SUPER_BLOCK], ls[8], lm[8];
        float scales[8], mins[8], max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            scales[j] = scale_v[j], mins[j] = min_v[j];
            for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)Lt[i][j];
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

/* quantize_row_q6_K_ref: each sub-block's scale by search_symmetric (nmax 32; the 16 sub-blocks
 * as two vectors of 8 lanes); the block's scale of largest magnitude sets d = 1 / (-128 / it)
 * (binary16) and each int8 scale min(127, round(-128 / it x scale)); then every value quantized
 * again with them. */
void quantize_q6_k(const float *x, int64_t n_blocks, uint8_t *out) {
    for (int64_t b = 0; b < n_blocks; b++, x += SUPER_BLOCK, out += 210) {
        uint8_t L[SUPER_BLOCK];
        float scales[16], max_scale = 0, max_abs = 0;
        for (int g = 0; g < 2; g++) {
            f8 xt[16]; /* value i of sub-block 8g + j: lane j of xt[i] */
            i8 Lt[16];
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 8; j++) xt[i][j] = x[16 * (8 * g + j) + i];
            f8 scale_v = search_symmetric(16, 32, xt, Lt);
            for (int j = 0; j < 8; j++) {
                scales[8 * g + j] = scale_v[j];
                for (int i = 0; i < 16; i++) L[16 * (8 * g + j) + i] = (uint8_t)Lt[i][j];
            }
        }
        for (int j = 0; j < 16; j++)
            if (fabsf(scales[j]) > max_abs) max_abs = fabsf(scales[j]), max_scale = scales[j];
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
