/* kernels/arm/q5_1.h: q5_1 on AArch64 (kernels/q5_1.h is the format and its portable
 * definition): a block's 32 5-bit numbers built as q5_0's are (kernels/arm/q5_0.h), then their
 * exact integer dot product with the activations, row by row from the file's layout. */
#ifndef KERNELS_ARM_Q5_1_H
#define KERNELS_ARM_Q5_1_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "q5_0.h"
#include "quant.h"

static inline int32_t q5_1_group_dot(const uint8_t *block, const int8_t *x) {
    uint32_t qh;
    memcpy(&qh, block + 4, 4);
    int8x16_t first, second;
    q5_numbers_neon(qh, block + 8, 0, &first, &second);
    return int8_dot32(first, second, x);
}

static const char *q5_1_describe(void) { return q5_0_describe(); }
#endif

#endif
