/* kernels/arm/f16.h: binary16 conversions in vectors (kernels/f16.h): NEON's, rounding to
 * nearest even. */
#ifndef KERNELS_ARM_F16_H
#define KERNELS_ARM_F16_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <stdint.h>

#include "../simd.h"

/* VW halves -> a vector of VW floats. */
static inline vf vf_load_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

/* The first floats of src[0..n) -> halves, VW at a time; returns how many. */
static inline int f16_store_vectors(uint16_t *dst, const float *src, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    return i;
}
#endif

#endif
