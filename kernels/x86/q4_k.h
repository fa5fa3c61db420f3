/* kernels/x86/q4_k.h: q4_k on x86 (kernels/q4_k.h is the format and its portable definition). */
#ifndef KERNELS_X86_Q4_K_H
#define KERNELS_X86_Q4_K_H

#include "../arch.h"

#endif
