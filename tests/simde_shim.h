/* tests/simde_shim.h: the AVX-512 and AVX-VNNI kernels, run on a CPU that has only AVX2.
 *
 * A test build (Makefile: the paths avx512vnni-simde and avxvnni-simde) compiles run.c, or
 * tests/test_kernels.c, for AVX2 + FMA + F16C with `-include tests/simde_shim.h` and one of
 * SHIM_AVX512VNNI or SHIM_AVXVNNI. This header then
 *   1. includes GCC's <immintrin.h> as the AVX2 build sees it, and Debian's SIMDe (libsimde-dev,
 *      0.7.4), which implements AVX-512 and VNNI intrinsics in portable C under the names
 *      simde_mm512_... (its own "native aliases" cannot be used: they typedef __m512 again,
 *      which GCC's header has already declared);
 *   2. supplies the few intrinsics the kernels use that SIMDe 0.7.4 lacks, in plain C;
 *   3. renames every AVX-512 / VNNI intrinsic and type the kernels use to those, by macro;
 *   4. defines the feature macros (__AVX512F__, __AVXVNNI__, ...) that select the kernels.
 * The kernels then compile unchanged and run, slowly, with the same arithmetic: their results
 * are checked bit for bit by tests/test_kernels.c and tests/test_paths.py like any path's.
 * AMX (tile registers, TMUL) has no portable emulation here: its kernel runs only on a CPU
 * with AMX, through the native build.
 *
 * An intrinsic the kernels start to use that is not listed below fails the build of these
 * paths ("implicit declaration" or a target-option error): add it to the list.
 */
#ifndef TESTS_SIMDE_SHIM_H
#define TESTS_SIMDE_SHIM_H

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "the SIMDe test build is compiled for AVX2 + FMA + F16C"
#endif
#if defined(__AVX512F__) || defined(__AVXVNNI__)
#error "the SIMDe test build is for a compiler target without AVX-512 and AVX-VNNI"
#endif

#define _POSIX_C_SOURCE 200809L /* as util.h, which comes later */
#define _DEFAULT_SOURCE
#include <immintrin.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <simde/x86/avx512.h>

/* ---- 2. what SIMDe 0.7.4 lacks ------------------------------------------------------------- */

/* lane arrays for the plain C below */
typedef union { simde__m512 v; float f[16]; } shim_ps;
typedef union { simde__m512i v; int32_t i[16]; } shim_si;

static inline simde__m512 shim_mm512_cvtepi32_ps(simde__m512i a) {
    shim_si in = {.v = a};
    shim_ps out;
    for (int i = 0; i < 16; i++) out.f[i] = (float)in.i[i]; /* rounds to nearest even, as cvtdq2ps */
    return out.v;
}

/* cvtps2dq: round to nearest even (the default MXCSR mode); NaN and out of range give INT32_MIN */
/* vpmovsxbd: 16 int8 sign-extended to 32-bit lanes */
static inline simde__m512i shim_mm512_cvtepi8_epi32(__m128i a) {
    int8_t in[16];
    shim_si out;
    _mm_storeu_si128((__m128i *)in, a);
    for (int i = 0; i < 16; i++) out.i[i] = in[i];
    return out.v;
}

/* vpmovzxbd: 16 uint8 zero-extended to 32-bit lanes */
static inline simde__m512i shim_mm512_cvtepu8_epi32(__m128i a) {
    uint8_t in[16];
    shim_si out;
    _mm_storeu_si128((__m128i *)in, a);
    for (int i = 0; i < 16; i++) out.i[i] = in[i];
    return out.v;
}

/* vpmovzxwd: 16 uint16 zero-extended to 32-bit lanes */
static inline simde__m512i shim_mm512_cvtepu16_epi32(__m256i a) {
    uint16_t in[16];
    shim_si out;
    _mm256_storeu_si256((__m256i *)in, a);
    for (int i = 0; i < 16; i++) out.i[i] = in[i];
    return out.v;
}

static inline simde__m512i shim_mm512_cvtps_epi32(simde__m512 a) {
    shim_ps in = {.v = a};
    shim_si out;
    for (int i = 0; i < 16; i++) {
        float r = nearbyintf(in.f[i]);
        out.i[i] = r >= -2147483648.0f && r < 2147483648.0f ? (int32_t)r : INT32_MIN;
    }
    return out.v;
}

/* arithmetic shift right of each 32-bit lane (>> on a negative int is arithmetic in GCC) */
static inline simde__m512i shim_mm512_srai_epi32(simde__m512i a, unsigned int count) {
    shim_si in = {.v = a}, out;
    for (int i = 0; i < 16; i++) out.i[i] = count > 31 ? (in.i[i] < 0 ? -1 : 0) : in.i[i] >> count;
    return out.v;
}

static inline __m256 shim_mm512_extractf32x8_ps(simde__m512 a, int half) {
    shim_ps in = {.v = a};
    return _mm256_loadu_ps(in.f + 8 * (half & 1));
}

/* only the lanes in mask are read or written: the others may lie past the end of an array */
static inline void shim_mm512_mask_storeu_ps(void *p, uint16_t mask, simde__m512 a) {
    shim_ps in = {.v = a};
    for (int i = 0; i < 16; i++)
        if (mask >> i & 1) memcpy((char *)p + 4 * i, &in.f[i], 4);
}
static inline simde__m512 shim_mm512_maskz_loadu_ps(uint16_t mask, const void *p) {
    shim_ps out;
    for (int i = 0; i < 16; i++) {
        out.f[i] = 0.0f;
        if (mask >> i & 1) memcpy(&out.f[i], (const char *)p + 4 * i, 4);
    }
    return out.v;
}

/* binary16 <-> float32, 16 lanes: F16C's 8-lane conversions (the build has F16C) twice */
#define shim_mm512_cvtps_ph(a, rounding) shim_cvtps_ph16((a), (rounding))
static inline __m256i shim_cvtps_ph16(simde__m512 a, const int rounding) {
    shim_ps in = {.v = a};
    __m128i lo, hi;
    if (rounding != (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)) __builtin_trap(); /* the one the kernels use */
    lo = _mm256_cvtps_ph(_mm256_loadu_ps(in.f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    hi = _mm256_cvtps_ph(_mm256_loadu_ps(in.f + 8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}
static inline simde__m512 shim_mm512_cvtph_ps(__m256i a) {
    shim_ps out;
    _mm256_storeu_ps(out.f, _mm256_cvtph_ps(_mm256_castsi256_si128(a)));
    _mm256_storeu_ps(out.f + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1)));
    return out.v;
}

/* AVX-VNNI's dpbusd is AVX512-VNNI's 256-bit one under another name */
#define shim_mm256_dpbusd_avx_epi32 simde_mm256_dpbusd_epi32

/* SIMDe's 512-bit types are structs in memory, not registers: no register barrier */
#define ONE_LOAD(v) (void)(v)
/* nor the asm that broadcasts a memory operand inside a dpbusd (kernels/simd.h) */
#define DPBUSD_PORTABLE 1

/* ---- 3. the names the kernels use ------------------------------------------------------------ */

#undef __m512
#define __m512 simde__m512
#undef __m512i
#define __m512i simde__m512i
#undef __mmask16
#define __mmask16 simde__mmask16

#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps shim_mm512_cvtepi32_ps
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32 shim_mm512_cvtepi8_epi32
#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32 shim_mm512_cvtepu8_epi32
#undef _mm512_mullo_epi32
#define _mm512_mullo_epi32 simde_mm512_mullo_epi32
#undef _mm512_test_epi8_mask
#define _mm512_test_epi8_mask simde_mm512_test_epi8_mask
#undef _mm512_mask_add_epi8
#define _mm512_mask_add_epi8 simde_mm512_mask_add_epi8
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 shim_mm512_cvtepu16_epi32
#undef _mm512_srai_epi32
#define _mm512_srai_epi32 shim_mm512_srai_epi32
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32 shim_mm512_cvtps_epi32
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps shim_mm512_extractf32x8_ps
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps shim_mm512_mask_storeu_ps
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps shim_mm512_maskz_loadu_ps
#undef _mm512_cvtps_ph
#define _mm512_cvtps_ph shim_mm512_cvtps_ph
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps shim_mm512_cvtph_ps
#undef _mm256_dpbusd_avx_epi32
#define _mm256_dpbusd_avx_epi32 shim_mm256_dpbusd_avx_epi32

#undef _mm256_dpbusd_epi32
#define _mm256_dpbusd_epi32 simde_mm256_dpbusd_epi32
#undef _mm512_abs_epi8
#define _mm512_abs_epi8 simde_mm512_abs_epi8
#undef _mm512_abs_ps
#define _mm512_abs_ps simde_mm512_abs_ps
#undef _mm512_add_epi32
#define _mm512_add_epi32 simde_mm512_add_epi32
#undef _mm512_add_ps
#define _mm512_add_ps simde_mm512_add_ps
#undef _mm512_and_si512
#define _mm512_and_si512 simde_mm512_and_si512
#undef _mm512_andnot_si512
#define _mm512_andnot_si512 simde_mm512_andnot_si512
#undef _mm512_castps512_ps128
#define _mm512_castps512_ps128 simde_mm512_castps512_ps128
#undef _mm512_castps512_ps256
#define _mm512_castps512_ps256 simde_mm512_castps512_ps256
#undef _mm512_castps_si512
#define _mm512_castps_si512 simde_mm512_castps_si512
#undef _mm512_castsi512_ps
#define _mm512_castsi512_ps simde_mm512_castsi512_ps
#undef _mm512_div_ps
#define _mm512_div_ps simde_mm512_div_ps
#undef _mm512_dpbusd_epi32
#define _mm512_dpbusd_epi32 simde_mm512_dpbusd_epi32
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps simde_mm512_fmadd_ps
#undef _mm512_load_ps
#define _mm512_load_ps simde_mm512_load_ps
#undef _mm512_load_si512
#define _mm512_load_si512 simde_mm512_load_si512
#undef _mm512_loadu_ps
#define _mm512_loadu_ps simde_mm512_loadu_ps
#undef _mm512_loadu_si512
#define _mm512_loadu_si512 simde_mm512_loadu_si512
#undef _mm512_cmp_ps_mask
#define _mm512_cmp_ps_mask simde_mm512_cmp_ps_mask
#undef _mm512_mask_max_ps
#define _mm512_mask_max_ps simde_mm512_mask_max_ps
#undef _mm512_mask_mov_ps
#define _mm512_mask_mov_ps simde_mm512_mask_mov_ps
#undef _mm512_mask_sub_epi8
#define _mm512_mask_sub_epi8 simde_mm512_mask_sub_epi8
#undef _mm512_maskz_mov_ps
#define _mm512_maskz_mov_ps simde_mm512_maskz_mov_ps
#undef _mm512_max_ps
#define _mm512_max_ps simde_mm512_max_ps
#undef _mm512_min_ps
#define _mm512_min_ps simde_mm512_min_ps
#undef _mm512_movepi8_mask
#define _mm512_movepi8_mask simde_mm512_movepi8_mask
#undef _mm512_mul_ps
#define _mm512_mul_ps simde_mm512_mul_ps
#undef _mm512_or_si512
#define _mm512_or_si512 simde_mm512_or_si512
#undef _mm512_roundscale_ps
#define _mm512_roundscale_ps simde_mm512_roundscale_ps
#undef _mm512_set1_epi32
#define _mm512_set1_epi32 simde_mm512_set1_epi32
#undef _mm512_set1_epi8
#define _mm512_set1_epi8 simde_mm512_set1_epi8
#undef _mm512_set1_ps
#define _mm512_set1_ps simde_mm512_set1_ps
#undef _mm512_setzero_ps
#define _mm512_setzero_ps simde_mm512_setzero_ps
#undef _mm512_setzero_si512
#define _mm512_setzero_si512 simde_mm512_setzero_si512
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4 simde_mm512_shuffle_f32x4
#undef _mm512_shuffle_ps
#define _mm512_shuffle_ps simde_mm512_shuffle_ps
#undef _mm512_slli_epi32
#define _mm512_slli_epi32 simde_mm512_slli_epi32
#undef _mm512_srli_epi16
#define _mm512_srli_epi16 simde_mm512_srli_epi16
#undef _mm512_storeu_ps
#define _mm512_storeu_ps simde_mm512_storeu_ps
#undef _mm512_storeu_si512
#define _mm512_storeu_si512 simde_mm512_storeu_si512
#undef _mm512_xor_si512
#define _mm512_xor_si512 simde_mm512_xor_si512
#undef _mm512_sub_epi32
#define _mm512_sub_epi32 simde_mm512_sub_epi32
#undef _mm512_unpackhi_ps
#define _mm512_unpackhi_ps simde_mm512_unpackhi_ps
#undef _mm512_unpacklo_ps
#define _mm512_unpacklo_ps simde_mm512_unpacklo_ps

/* ---- 4. the instruction sets the kernels may now use --------------------------------------- */

#if defined(SHIM_AVX512VNNI) /* x86-64-v4 + VNNI, as the avx512vnni path's -march */
#define __AVX512F__ 1
#define __AVX512CD__ 1
#define __AVX512BW__ 1
#define __AVX512DQ__ 1
#define __AVX512VL__ 1
#define __AVX512VNNI__ 1
#elif defined(SHIM_AVXVNNI) /* AVX2 + FMA + F16C + AVX-VNNI, as the avxvnni path's flags */
#define __AVXVNNI__ 1
#else
#error "define SHIM_AVX512VNNI or SHIM_AVXVNNI"
#endif

#endif
