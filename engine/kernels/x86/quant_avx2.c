/*
 * quant_avx2.c — AVX2 + FMA + F16C kernels for quant_matmul: the body is quant_x86.inc and the
 * files it lists, compiled here without VNNI. The target is set for this region only
 * (ISA_TARGET_BEGIN of isa_target.h), so the rest of the binary stays baseline x86-64;
 * quant_dispatch.c selects these kernels only after CPUID (and XGETBV, for OS support) reported
 * the features.
 */
#include "quant_impl.h"
#include "quant_iq.h"
#include "isa_target.h"

#if defined(__x86_64__)
ISA_TARGET_BEGIN("avx2,fma,f16c")
#define QX_VNNI 0
#define QX_512 0
#define QX_TABLE quant_kernels_avx2
#include "quant_x86.inc"
#include "quant_x86_more.inc"
#include "quant_iq_x86.inc"
#include "quant_gemm256_tiles.inc"
#if QX_512
#include "quant_gemm512_tiles.inc"
#include "quant_gemm512_packed.inc"
#endif
#include "quant_x86_gemm.inc"
#include "quant_x86_table.inc"
ISA_TARGET_END
#endif
