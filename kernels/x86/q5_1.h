/* kernels/x86/q5_1.h: q5_1 on x86 (kernels/q5_1.h is the format and its portable definition). */
#ifndef KERNELS_X86_Q5_1_H
#define KERNELS_X86_Q5_1_H

#include "../arch.h"

#endif
