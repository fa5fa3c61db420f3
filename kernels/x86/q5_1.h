/* kernels/x86/q5_1.h: q5_1 on x86 (kernels/q5_1.h is the format and its portable definition):
 * none yet, so kernels/arch.h's fallback map gives x86 the portable products. Q5_1 appears in
 * Q5_K_M files only where a row is not a multiple of 256. */
#ifndef KERNELS_X86_Q5_1_H
#define KERNELS_X86_Q5_1_H

#include "../arch.h"

#endif
