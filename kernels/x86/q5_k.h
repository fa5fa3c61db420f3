/* kernels/x86/q5_k.h: q5_k on x86 (kernels/q5_k.h is the format and its portable definition). */
#ifndef KERNELS_X86_Q5_K_H
#define KERNELS_X86_Q5_K_H

#include "../arch.h"

#endif
