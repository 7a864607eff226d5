/*
 * quant_avx512.c — the kernels of quant_x86.inc compiled with AVX-512 VL + VNNI, which fuse
 * the int8 and int16 multiply-accumulate steps (vpdpbusd, vpdpwssd). Decode (1-3 tokens) uses the
 * 256-bit row-at-a-time kernels; from 4 tokens the quantized types go through the 512-bit
 * register tiles of quant_gemm512_tiles.inc (16 rows x 8 tokens, one lane per weight row). A
 * first region adds VBMI and GFNI for issue 47's low-bit types (quant_iq_vbmi.inc), called only
 * where the CPU has them (quant_tune.vbmi).
 */
#include "quant_impl.h"
#include "quant_iq.h"
#include "isa_target.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
/* the low-bit types with VBMI and GFNI: only run where quant_tune_get()->vbmi (quant_iq_x86.inc) */
ISA_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni")
#include "quant_iq_vbmi.inc"
ISA_TARGET_END
ISA_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define QX_VNNI 1
#define QX_512 1
#define QX_TABLE quant_kernels_avx512
#include "quant_x86.inc"
#include "quant_x86_more.inc"
#include "quant_iq_x86.inc"
#if QX_512
#include "quant_gemm512_tiles.inc"
#include "quant_gemm512_packed.inc"
#endif
#include "quant_x86_gemm.inc"
#include "quant_x86_table.inc"
ISA_TARGET_END
#endif
