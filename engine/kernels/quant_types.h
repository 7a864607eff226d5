/*
 * quant_types.h — (private to engine/kernels/) the one list of the weight types
 * the engine computes, and what each needs: its activation form and its dequantizer.
 *
 * Adding a weight type is a line in QUANT_TYPE_LIST plus its kernel files (docs/kernels.md has
 * the checklist): the enum of dense indices, the traits table (quant_format.c), the portable
 * kernel table (quant_ref.c) and gguf_type_computable are all generated from the list, so a type
 * cannot be computable without a dequantizer and a portable kernel (the build fails).
 */
#ifndef ATTND_QUANT_TYPES_H
#define ATTND_QUANT_TYPES_H

#include <stddef.h>
#include <stdint.h>

/*
 * X(NAME, name, ACT): GGUF_TYPE_<NAME>, the functions dequant_<name> (quant_format.c) and
 * rows_<name> (quant_ref.c; the low-bit types of issue 47: both in quant_iq.c, declared in
 * quant_iq.h), and QUANT_ACT_<ACT>, the form its dot product reads activations in
 * (llama.cpp's vec_dot_type for the type).
 */
#define QUANT_TYPE_LIST(X) \
    X(F32, f32, F32)       \
    X(F16, f16, F16)       \
    X(BF16, bf16, BF16)    \
    X(Q8_0, q8_0, Q8_0)    \
    X(Q4_0, q4_0, Q8_0)    \
    X(Q4_K, q4_k, Q8_K)    \
    X(Q6_K, q6_k, Q8_K)    \
    X(Q4_1, q4_1, Q8_1)    \
    X(Q5_0, q5_0, Q8_0)    \
    X(Q5_1, q5_1, Q8_1)    \
    X(IQ4_NL, iq4_nl, Q8_0) \
    X(MXFP4, mxfp4, Q8_0)  \
    X(Q2_K, q2_k, Q8_K)    \
    X(Q3_K, q3_k, Q8_K)    \
    X(Q5_K, q5_k, Q8_K)    \
    X(IQ4_XS, iq4_xs, Q8_K) \
    X(IQ2_XXS, iq2_xxs, Q8_K) \
    X(IQ2_XS, iq2_xs, Q8_K)  \
    X(IQ2_S, iq2_s, Q8_K)    \
    X(IQ3_XXS, iq3_xxs, Q8_K) \
    X(IQ3_S, iq3_s, Q8_K)    \
    X(IQ1_S, iq1_s, Q8_K)    \
    X(IQ1_M, iq1_m, Q8_K)    \
    X(TQ1_0, tq1_0, Q8_K)    \
    X(TQ2_0, tq2_0, Q8_K)    \
    X(NVFP4, nvfp4, Q8_0)

/* Dense index of a computable type: QT_F32, QT_F16, ... (kernel tables are arrays of QT_COUNT). */
typedef enum quant_type_idx {
#define QT_ENUM_(N, n, A) QT_##N,
    QUANT_TYPE_LIST(QT_ENUM_)
#undef QT_ENUM_
    QT_COUNT
} quant_type_idx;

/* How activations are rounded before a dot product (quant_matmul's scratch holds the form). */
typedef enum quant_act_form {
    QUANT_ACT_F32,  /* the caller's floats, exact */
    QUANT_ACT_F16,  /* rounded to f16, kept as floats */
    QUANT_ACT_BF16, /* rounded to bf16, kept as floats */
    QUANT_ACT_Q8_0, /* blocks of 32: f16-precision d, int8 q, and the sums of each block's q */
    QUANT_ACT_Q8_1, /* Q8_0's, plus s = d * (sum of q) at f16 precision (for types with a minimum) */
    QUANT_ACT_Q8_K, /* super-blocks of 256: f32 d, int8 q, sums of 16 and of 32 */
} quant_act_form;

/* Dequantizer: y[0 .. nb * block elements) from nb blocks at src. */
typedef void (*quant_dequant_fn)(float *y, const uint8_t *src, int64_t nb);

typedef struct quant_traits {
    uint32_t type;       /* GGUF_TYPE_* */
    quant_act_form act;
    quant_dequant_fn dequant;
} quant_traits;

/* The traits of a computable type, by dense index (QT_*), or NULL / -1 for one that is not. */
extern const quant_traits quant_traits_table[QT_COUNT];
int quant_type_index(uint32_t gguf_type);
const quant_traits *quant_traits_of(uint32_t gguf_type);

#endif /* ATTND_QUANT_TYPES_H */
