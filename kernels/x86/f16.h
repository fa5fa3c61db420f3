/* kernels/x86/f16.h: binary16 conversions in vectors (kernels/f16.h): AVX-512's, or F16C's
 * with AVX2, rounding to nearest even. */
#ifndef KERNELS_X86_F16_H
#define KERNELS_X86_F16_H

#include "../arch.h"

#if defined(KERNELS_X86) && (defined(__AVX512F__) || defined(__F16C__))
#include <stdint.h>

#include "../simd.h"

/* VW halves -> a vector of VW floats. */
static inline vf vf_load_f16(const uint16_t *p) {
#if defined(__AVX512F__)
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#else
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#endif
}

/* The first floats of src[0..n) -> halves, VW at a time; returns how many. */
static inline int f16_store_vectors(uint16_t *dst, const float *src, int n) {
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    return i;
}
#endif

#endif
