/* kernels/arm/q5_0.h: q5_0 on arm (kernels/q5_0.h is the format and its portable definition). */
#ifndef KERNELS_ARM_Q5_0_H
#define KERNELS_ARM_Q5_0_H

#include "../arch.h"

#endif
