/* kernels/arm/q4_k.h: q4_k on arm (kernels/q4_k.h is the format and its portable definition). */
#ifndef KERNELS_ARM_Q4_K_H
#define KERNELS_ARM_Q4_K_H

#include "../arch.h"

#endif
