/*
 * quant_avx2.c — AVX2 + FMA + F16C kernels for quant_matmul: the body is quant_x86.inc,
 * compiled here without VNNI. The target is set for this file only (`#pragma GCC target`, or
 * clang's attribute push), so the rest of the binary stays baseline x86-64; quant.c calls these
 * kernels only after CPUID (and XGETBV, for OS support) reported the features.
 */
#include "quant_impl.h"

#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define QX_VNNI 0
#define QX_512 0
#define QX_TABLE quant_kernels_avx2
#include "quant_x86.inc"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
