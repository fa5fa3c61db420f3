/* kernels/x86/q5_k.h: q5_k on x86 (kernels/q5_k.h is the format and its portable definition):
 * none yet, so kernels/arch.h's fallback map gives x86 the portable products, row by row
 * (--info says so); the place for its panels, as kernels/x86/q4_k.h has them. */
#ifndef KERNELS_X86_Q5_K_H
#define KERNELS_X86_Q5_K_H

#include "../arch.h"

#endif
