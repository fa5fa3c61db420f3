/* kernels/x86/q5_0.h: q5_0 on x86 (kernels/q5_0.h is the format and its portable definition). */
#ifndef KERNELS_X86_Q5_0_H
#define KERNELS_X86_Q5_0_H

#include "../arch.h"

#endif
