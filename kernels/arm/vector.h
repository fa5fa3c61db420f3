/* kernels/arm/vector.h: kernels/simd.h's vector of VW floats on AArch64: NEON's 4 lanes. */
#ifndef KERNELS_ARM_VECTOR_H
#define KERNELS_ARM_VECTOR_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#define VW 4
typedef float32x4_t vf;
static inline vf vf_load(const float *p) { return vld1q_f32(p); }
static inline void vf_store(float *p, vf v) { vst1q_f32(p, v); }
static inline vf vf_set1(float x) { return vdupq_n_f32(x); }
static inline vf vf_add(vf a, vf b) { return vaddq_f32(a, b); }
static inline vf vf_mul(vf a, vf b) { return vmulq_f32(a, b); }
static inline vf vf_div(vf a, vf b) { return vdivq_f32(a, b); }
/* a > b ? a : b, as x86's max (b when either is NaN); NEON's own max would return the NaN */
static inline vf vf_max(vf a, vf b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
static inline vf vf_min(vf a, vf b) { return vminq_f32(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
static inline vf vf_round(vf a) { return vrndnq_f32(a); }
static inline vf vf_pow2(vf k) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(k), vdupq_n_s32(127)), 23));
}
static inline vf vf_abs(vf a) { return vabsq_f32(a); }
static inline float vf_reduce(vf v) { /* lane i + lane i+2, then i+1 */
    return vpadds_f32(vadd_f32(vget_low_f32(v), vget_high_f32(v)));
}
static inline vf vf_copysign(vf mag, vf sign) {
    return vbslq_f32(vdupq_n_u32(0x80000000u), sign, mag);
}
static inline unsigned vf_lanes_of(uint32x4_t set) { /* lane l's all-ones or zero as bit l */
    const uint32x4_t bit = {1, 2, 4, 8};
    return vaddvq_u32(vandq_u32(set, bit));
}
static inline unsigned vf_lanes_above(vf a, float t) { return vf_lanes_of(vcgtq_f32(a, vdupq_n_f32(t))); }
static inline unsigned vf_lanes_at_least(vf a, float t) { return vf_lanes_of(vcgeq_f32(a, vdupq_n_f32(t))); }
static inline vf vf_load_i8(const int8_t *p) {
    int32_t four;
    memcpy(&four, p, sizeof four);
    int16x8_t wide = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(four)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide)));
}
static inline vf vf_from_i32(const int32_t *p) { return vcvtq_f32_s32(vld1q_s32(p)); }
static inline vf vf_load_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }

/* ONE_LOAD(v): kernels/simd.h says what it is for; in a vector register ("w") */
#if !defined(ONE_LOAD) && (defined(__GNUC__) || defined(__clang__))
#define ONE_LOAD(v) __asm__("" : "+w"(v))
#endif

#endif
#endif
