/* kernels/arm/q6_k.h: q6_k on arm (kernels/q6_k.h is the format and its portable definition). */
#ifndef KERNELS_ARM_Q6_K_H
#define KERNELS_ARM_Q6_K_H

#include "../arch.h"

#endif
