/*
 * quant.h — (engine-private) compute kernels over weights stored in their GGUF types:
 * F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K. Weights are never dequantized as a whole; kernels
 * read blocks straight from the mmap. Block layouts follow the GGUF/ggml spec.
 *
 * Pure functions: output first, then inputs, then sizes. Parallel (the pool of threads.h) over
 * output rows inside quant_matmul only. A portable C path is always present and correct;
 * vectorised paths (AVX2/AVX-512, AMX tiles for prefill) are chosen at run time, through one dispatch
 * table (quant_impl.h) shared with the attention loops of attn_ops.h.
 */
#ifndef ATTND_QUANT_H
#define ATTND_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of one row of n_cols elements of type (n_cols a multiple of the block size). */
size_t quant_row_bytes(uint32_t type, int64_t n_cols);

/* dst[0..n) = the n elements at src (n a multiple of the block size), as floats. */
void quant_dequantize_row(float *dst, const void *src, uint32_t type, int64_t n);

/* Scratch bytes quant_matmul needs for n_tok activation rows of n_cols when weights are wtype
 * (e.g. activations quantized to Q8 blocks); callers allocate it once, up front. */
size_t quant_scratch_bytes(uint32_t wtype, int n_tok, int64_t n_cols);

/*
 * out[t * n_rows + r] = sum_c W[r][c] * x[t * n_cols + c]   for t < n_tok, r < n_rows
 *   out:     (n_tok, n_rows) floats
 *   w:       (n_rows, n_cols) in wtype, rows contiguous (GGUF ne[0] = n_cols, ne[1] = n_rows)
 *   x:       (n_tok, n_cols) floats
 *   scratch: quant_scratch_bytes(wtype, n_tok, n_cols) bytes
 * Each weight row is read once per call, whatever n_tok is (prefill is matrix-matrix work).
 * Activations are first rounded as llama.cpp rounds them (Q8_0 blocks for Q8_0/Q4_0, Q8_K for
 * Q4_K/Q6_K, f16/bf16 for F16/BF16; F32 exact). Results do not depend on n_threads, and a
 * token's outputs are bit-identical whether it is computed alone or in a batch, with one
 * exception: with AVX-512, quantized weights go through 16-row x 8-token register tiles from 4
 * tokens on (prefill, batched decode) and through row-at-a-time kernels below (decode), which add
 * the per-block terms in different float orders; there the two agree within rounding (each is
 * bit-identical for any batch size on its side of the switch); and, only where the caller asks
 * (quant_mm.gemm: the encoder), F16 and BF16 weights from 16 tokens go through a register-blocked
 * float GEMM on AVX2 and AVX-512 (quant_gemm_f32's order: one fused chain per output), else
 * through dot-product tiles. Reentrant: calls
 * may run concurrently, each with its own scratch. Bad sizes or types are bugs (ATTND_ASSERT).
 */
void quant_matmul(float *out, const void *w, uint32_t wtype, int64_t n_rows, int64_t n_cols, const float *x,
                  int n_tok, void *scratch, int n_threads);

// ---- weights repacked at load ------------------------------------------------------------------

/*
 * A weight matrix copied, once at load, into the layout of the AVX-512 kernels: Q4_0, Q4_K and
 * Q6_K, 16 rows interleaved block by block with the weights left packed (each 64-byte vector holds
 * 4 bytes of each of 16 rows; scales travel with their blocks), so that one activation load and
 * one unpack serve 16 rows, each lane ends as one row's result, and the rows stream as one
 * sequential run. Q4_0 keeps its 18 bytes per row and block and Q6_K its 210 per super-block
 * (its 6-bit values re-encoded so that one vpternlogd unpacks a vector), Q4_K takes 148 bytes
 * per row and super-block for 144 (its 6-bit scales unpacked); the copy is anonymous memory, the
 * mapping stays as it was (its pages are not read again once packed).
 */
typedef struct quant_packed quant_packed;

/* The packed copy of (n_rows, n_cols) weights of wtype at w (borrowed only during the call), or
 * NULL when the active instruction set has no packed kernel for wtype, when the environment has
 * ATTND_NO_REPACK=1 (or =NAME, wtype's name: only that type is not packed), or when memory is short (the matmul then reads w as it is: slower, same
 * results within rounding). Owned by the caller: quant_packed_destroy (NULL accepted). */
quant_packed *quant_pack(const void *w, uint32_t wtype, int64_t n_rows, int64_t n_cols);

/* quant_pack in slices, for a load that makes room for other work between them (model_load_with):
 * quant_pack_begin makes the copy with its padding zeroed and no rows packed yet (NULL in the
 * cases quant_pack returns NULL), quant_pack_rows packs rows [r0, r1) of w (the whole matrix, as
 * quant_pack takes it; r0 a multiple of QUANT_PACK_ROWS, r1 <= n_rows). The copy is the same
 * bytes as quant_pack's once every row is packed, and is not read before that. Slices of one copy
 * may be packed on different threads when their rows do not overlap. */
#define QUANT_PACK_ROWS 16
quant_packed *quant_pack_begin(uint32_t wtype, int64_t n_rows, int64_t n_cols);
void quant_pack_rows(quant_packed *pk, const void *w, int64_t r0, int64_t r1);
void quant_packed_destroy(quant_packed *pk);
size_t quant_packed_bytes(const quant_packed *pk); /* 0 for NULL */

/* quant_matmul, reading the packed copy pk (may be NULL) where the active instruction set has a
 * kernel for it, w otherwise. On the packed path a token's result is bit-identical whatever the
 * batch size; it agrees with the mapped path within rounding (block terms summed per row in
 * block order either way, but in other groupings). */
void quant_matmul_packed(float *out, const void *w, const quant_packed *pk, uint32_t wtype, int64_t n_rows,
                         int64_t n_cols, const float *x, int n_tok, void *scratch, int n_threads);

/* One weight of quant_matmul_many: out (n_tok, n_rows) = x w^T, w of wtype read through its
 * packed copy pk when there is one (as quant_matmul_packed). */
typedef struct quant_mm {
    float *out;
    const void *w;
    const quant_packed *pk;
    uint32_t wtype;
    int64_t n_rows;
    bool gemm; /* F16/BF16 weights, 16 tokens and more: the register-blocked float GEMM may run
                  (an encoder's pass). Its sums run in another order than the dot-product tiles',
                  so a token's outputs then depend on the batch it is in: decoders leave it false,
                  where a token must give the same bits alone, in a batch, re-evaluated after a
                  prompt-cache hit or verified in a speculative step. Set on mm[0] for all. */
} quant_mm;

/* quant_matmul_packed for n_mm (<= QUANT_MM_MAX) weights of the same n_cols against the same x,
 * with the same results: when their types round the activations alike (Q4_K with Q6_K, Q4_0 with
 * Q8_0, ...) the activations are rounded once and all their rows go to the pool as one region
 * (one wake-up and one barrier instead of one per weight: q, k and v; gate and up). scratch:
 * the largest quant_scratch_bytes of their types. */
#define QUANT_MM_MAX 16 /* also a decode step's experts: gate and up of 8 */
void quant_matmul_many(const quant_mm *mm, int n_mm, int64_t n_cols, const float *x, int n_tok, void *scratch,
                       int n_threads);

// ---- conversions and instruction sets -----------------------------------------------------------

/* Scalar conversions, round-to-nearest-even, exact for subnormals, inf and nan. */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/*
 * Instruction sets the matmul kernels can use. The best one the CPU supports is picked at the
 * first call, unless the environment says otherwise: ATTND_ISA=portable|avx2|avx512|amx|amx-emu
 * (clamped to what the CPU has; amx-emu always runs), or ATTND_NO_SIMD=1 (portable).
 */
typedef enum quant_isa {
    QUANT_ISA_PORTABLE = 0,
    QUANT_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    QUANT_ISA_AVX512 = 2, /* AVX-512 F/BW/VL + VNNI */
    QUANT_ISA_AMX = 3,    /* AVX-512 plus AMX tiles for prefill from 128 tokens (bf16 or int8:
                             quant_amx_math below); needs the OS's permission */
    QUANT_ISA_AMX_EMU = 4, /* the AMX kernels over a C emulation of the tiles, on top of the
                             portable path: never picked, only forced (tests, debugging) */
} quant_isa;
#define QUANT_ISA_COUNT 5

quant_isa quant_isa_best(void);   /* best this CPU supports (never QUANT_ISA_AMX_EMU) */
quant_isa quant_isa_active(void); /* what quant_matmul uses now */
/* Forces `isa` (clamped to quant_isa_best, except QUANT_ISA_AMX_EMU) and returns the one it
 * replaced. For tests and benchmarks; not to be called while another thread is inside quant_matmul. */
quant_isa quant_isa_force(quant_isa isa);
const char *quant_isa_name(quant_isa isa);
/* Why the CPU's AMX tiles are not in use, for start-up logs: NULL when they are in use or the CPU
 * has none; else e.g. "refused by the OS" or "ATTND_ISA=avx512" (static strings). */
const char *quant_amx_unused_reason(void);
/* The weight types the AMX tiles multiply, as "Q8_0, Q4_0, ..." (QUANT_TYPE_LIST's order), read
 * from the tiles' kernel table, so that a start-up line never lists them by hand. Writes at most
 * cap bytes, NUL included (cut at a name's end when it does not fit); returns the length the whole
 * list needs. */
size_t quant_amx_type_names(char *out, size_t cap);

/*
 * The arithmetic of the AMX tile kernels (QUANT_ISA_AMX and QUANT_ISA_AMX_EMU) from 128 tokens:
 *   QUANT_AMX_BF16 (the default where the CPU has AMX-BF16): weights and activations rounded to
 *     bf16 (8 significant bits, nearest even), float32 sums over the whole row. About 3x the int8
 *     tiles' speed, and closer to float64 math than the int8 activations of every other path
 *     (docs/kernels.md), but a prompt's logits then differ in the last bits from those of the same
 *     tokens computed in smaller batches.
 *   QUANT_AMX_INT8: int8 activations as on the AVX-512 path, with its bits exactly.
 * ATTND_AMX=int8|bf16 chooses at the first call; quant_amx_math_force for tests. Real tiles on a
 * CPU without AMX-BF16 always run int8: quant_amx_math_active() says what runs.
 */
typedef enum quant_amx_math { QUANT_AMX_BF16 = 0, QUANT_AMX_INT8 = 1 } quant_amx_math;
quant_amx_math quant_amx_math_active(void);
quant_amx_math quant_amx_math_force(quant_amx_math m); /* returns the one it replaced */
const char *quant_amx_math_name(quant_amx_math m); /* "bf16", "int8" */

/*
 * Vector primitives for the rest of the engine (attention, activations, f16 KV caches), with the
 * same run-time instruction-set choice as quant_matmul. Single-threaded, no allocation; the
 * arrays must not overlap unless stated.
 */
/* scores[j] = scale * sum_i q[i] * K[j * k_stride + i]   for j < n, i < hd */
void quant_dot_rows(float *scores, const float *q, const float *K, int64_t k_stride, int n, int hd, float scale);
/* acc[i] += sum_j p[j] * V[j * v_stride + i]              for i < hd, j < n (j in order) */
void quant_axpy_rows(float *acc, const float *p, const float *V, int64_t v_stride, int n, int hd);
/* y[i] = e^x[i], within 2 ulp of the exact value; inf, nan, overflow and underflow as expf.
 * y may equal x. */
void quant_exp(float *y, const float *x, int64_t n);
/* Row conversions between f32 and f16 (round to nearest even), as quant_f32_to_f16 elementwise. */
void quant_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void quant_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n);
/*
 * C (m, n) = A (m, k) B (k, n), plus C's own values when acc: floats, row i of A at A + i * lda,
 * row c of B at B + c * ldb, row i of C at C + i * ldc (nothing past column n of B or C is read
 * or written). Each C element is one multiply-add chain over c in order (fused where the
 * instruction set has FMA), so k may be split across calls with acc and the result does not
 * depend on m, n or the tile an element falls in. Register-blocked on AVX2 / AVX-512.
 */
void quant_gemm_f32(float *C, int64_t ldc, const float *A, int64_t lda, const float *B, int64_t ldb, int m, int n, int k,
                    bool acc);
/* s[j] = e^(scale s[j] - m) / sum_j e^(scale s[j] - m), m the row's largest (scale > 0; n >= 1
 * with a finite score; -inf scores weigh 0, and so do those more than 87 below m). */
void quant_softmax(float *s, int n, float scale);
/* y[i] = gelu(x[i]) in its tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as
 * x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3))) (the same function; no cancellation for x < 0):
 * within a few ulp. y may equal x. */
void quant_gelu(float *y, const float *x, int64_t n);

#endif /* ATTND_QUANT_H */
