/* kernels/x86/q6_k.h: q6_k on x86 (kernels/q6_k.h is the format and its portable definition). */
#ifndef KERNELS_X86_Q6_K_H
#define KERNELS_X86_Q6_K_H

#include "../arch.h"

#endif
