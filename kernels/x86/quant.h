/* kernels/x86/quant.h: kernels/quant.h's activation quantizer for one group of 32 values, eight
 * values to a vector, each step exactly the portable one: the maximum of |x| is the same number
 * in any order (a NaN never wins: max returns its second operand, the running maximum, when the
 * first is NaN), NaN becomes 0, and the conversion to integers rounds to nearest even as rintf
 * does (the default rounding mode, which this program never changes).
 * The decode step quantizes every product's input on one thread, so this is on its critical
 * path (docs/speed.md). */
#ifndef KERNELS_X86_QUANT_H
#define KERNELS_X86_QUANT_H

#include "../arch.h"

#if defined(KERNELS_X86)
#include <immintrin.h>
#include <stdint.h>

static inline void quantize_group(int8_t *q, float *scale, const float *x) {
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[k]), amax);
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    float a = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    __m256 inv = _mm256_set1_ps(a > 0.0f ? 127.0f / a : 0.0f);
    *scale = a / 127.0f;
    __m256i i[4];
    for (int k = 0; k < 4; k++) {
        __m256 y = _mm256_mul_ps(v[k], inv);
        y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q)); /* NaN -> 0 */
        y = _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
        i[k] = _mm256_cvtps_epi32(y);
    }
    /* 4 x 8 int32 -> 32 int8: the packs work within 128-bit halves, leaving runs of four in
     * the order 0, 2, 4, 6, 1, 3, 5, 7 of the wanted ones */
    __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#define HAVE_QUANTIZE_GROUP_VECTOR 1
#endif

#endif
