/* kernels/x86/vector.h: kernels/simd.h's vector of VW floats on x86: 16 lanes with AVX-512, 8
 * with AVX2 and FMA; and the x86 helpers the kernels share: an int8 dot-product step with its
 * operand broadcast from memory, and lane masks for the rows at the bottom of a matrix. */
#ifndef KERNELS_X86_VECTOR_H
#define KERNELS_X86_VECTOR_H

#include "../arch.h"

#if defined(KERNELS_X86)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#define VW 16
typedef __m512 vf;
static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_round(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vf_pow2(vf k) { /* 2^k for whole k in [-126, 127]: the exponent field */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23));
}
static inline vf vf_abs(vf a) { return _mm512_abs_ps(a); }
static inline float vf_reduce(vf v) { /* lane i + lane i+8, then i+4, i+2, i+1 */
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
static inline vf vf_copysign(vf mag, vf sign) { /* mag's magnitude with sign's sign bit */
    __m512i m = _mm512_set1_epi32(INT32_MIN);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(m, _mm512_castps_si512(mag)),
                                               _mm512_and_si512(m, _mm512_castps_si512(sign))));
}
static inline unsigned vf_lanes_above(vf a, float t) { return _mm512_cmp_ps_mask(a, _mm512_set1_ps(t), _CMP_GT_OQ); }
static inline unsigned vf_lanes_at_least(vf a, float t) { return _mm512_cmp_ps_mask(a, _mm512_set1_ps(t), _CMP_GE_OQ); }
static inline vf vf_load_i8(const int8_t *p) { /* VW int8 -> floats (exact) */
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
static inline vf vf_from_i32(const int32_t *p) { return _mm512_cvtepi32_ps(_mm512_loadu_si512(p)); }
static inline vf vf_load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
#else
#define VW 8
typedef __m256 vf;
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vf_set1(float x) { return _mm256_set1_ps(x); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_round(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vf_pow2(vf k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
}
static inline vf vf_abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline float vf_reduce(vf v) { /* lane i + lane i+4, then i+2, i+1 */
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
static inline vf vf_copysign(vf mag, vf sign) {
    __m256 s = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign));
}
static inline unsigned vf_lanes_above(vf a, float t) {
    return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(t), _CMP_GT_OQ));
}
static inline unsigned vf_lanes_at_least(vf a, float t) {
    return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(t), _CMP_GE_OQ));
}
static inline vf vf_load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline vf vf_from_i32(const int32_t *p) { return _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline vf vf_load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
#endif

/* ONE_LOAD(v): kernels/simd.h says what it is for; in a vector register ("v") */
#if !defined(ONE_LOAD) && (defined(__GNUC__) || defined(__clang__))
#define ONE_LOAD(v) __asm__("" : "+v"(v))
#endif

#if defined(__AVX512VNNI__)
/* acc plus, in each 32-bit lane, the dot product of u's four unsigned bytes there with the four
 * signed bytes at x: _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(x's four bytes)). GCC 12
 * broadcasts the four bytes with an instruction of its own, one more vector operation for each
 * dpbusd; AVX-512 can broadcast a memory operand within the dpbusd ({1to16}), written here as
 * that one instruction (the test build of tests/simde_shim.h sets DPBUSD_PORTABLE: no asm).
 * (docs/speed.md has what it gained.) */
typedef int32_t __attribute__((may_alias)) four_bytes; /* read where int8 quants were written */
static inline __m512i dpbusd_four(__m512i acc, __m512i u, const int8_t *x) {
#if (defined(__GNUC__) || defined(__clang__)) && !defined(DPBUSD_PORTABLE)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const four_bytes *)(const void *)x));
    return acc;
#else
    int32_t four;
    memcpy(&four, x, 4);
    return _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(four));
#endif
}
#endif

/* ---- lane masks for the rows at the bottom of a matrix ------------------------------------ */

#if defined(__AVX512F__)
/* the first n of 16 lanes (all for n >= 16) */
static inline __mmask16 first_lanes(int n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }
#endif
/* the first n of 8 lanes, as a mask for maskload / maskstore */
static inline __m256i first_lanes8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
#endif
