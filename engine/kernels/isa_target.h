/*
 * isa_target.h - compile a region of a source file for an instruction set beyond the build's
 * baseline (the SIMD kernels), with GCC or clang:
 *
 *     ISA_TARGET_BEGIN("avx2,fma,f16c")
 *     ... functions using those intrinsics ...
 *     ISA_TARGET_END
 *
 * The functions are only called after cpuinfo has seen the instruction set (quant_kernels).
 */
#ifndef ATTND_ISA_TARGET_H
#define ATTND_ISA_TARGET_H

#define ISA_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define ISA_TARGET_BEGIN(isa) ISA_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define ISA_TARGET_END ISA_PRAGMA(clang attribute pop)
#else
#define ISA_TARGET_BEGIN(isa) ISA_PRAGMA(GCC push_options) ISA_PRAGMA(GCC target(isa))
#define ISA_TARGET_END ISA_PRAGMA(GCC pop_options)
#endif

#endif
