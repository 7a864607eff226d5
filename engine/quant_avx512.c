/*
 * quant_avx512.c — the kernels of quant_x86.inc compiled with AVX-512 VL + VNNI, which fuse
 * the int8 and int16 multiply-accumulate steps (vpdpbusd, vpdpwssd). Q8_0 uses 512-bit registers
 * (two blocks each: +15% decode at 768 columns, +20-40% prefill); the K-quants stay on 256-bit
 * vectors, because 512-bit versions measured slower here (512-bit integer work loses a port, and
 * spreading their sub-block scales costs shuffles).
 */
#include "quant_impl.h"

#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif
#define QX_VNNI 1
#define QX_512 1
#define QX_TABLE quant_kernels_avx512
#include "quant_x86.inc"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
