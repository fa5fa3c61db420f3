/* kernels/arm/q5_k.h: q5_k on arm (kernels/q5_k.h is the format and its portable definition). */
#ifndef KERNELS_ARM_Q5_K_H
#define KERNELS_ARM_Q5_K_H

#include "../arch.h"

#endif
