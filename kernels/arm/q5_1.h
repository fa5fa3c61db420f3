/* kernels/arm/q5_1.h: q5_1 on arm (kernels/q5_1.h is the format and its portable definition). */
#ifndef KERNELS_ARM_Q5_1_H
#define KERNELS_ARM_Q5_1_H

#include "../arch.h"

#endif
