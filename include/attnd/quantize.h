/*
 * quantize.h — re-encodes the weights of a GGUF model file in another tensor type
 * (`attnd quantize IN OUT TYPE`): F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K (plain), or one of llama.cpp's
 * mixes Q2_K, Q3_K_S, Q3_K_M, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS.
 *
 *     quantize_target t;
 *     if (quantize_target_parse("Q4_K_M", &t) != ATTND_OK) ...
 *     attnd_err err;
 *     if (quantize_file("in.gguf", "out.gguf", t, NULL, NULL, &err) != ATTND_OK) puts(err.msg);
 *
 * Which tensors change: 2-D (or higher) tensors whose name ends in "weight"; 1-D tensors (norms,
 * biases) stay as they are. A plain type (Q8_0, Q4_K, ...) puts every such tensor in that type
 * (llama-quantize's --pure). A mix makes llama.cpp's per-tensor choices (llama_tensor_get_type):
 * e.g. Q4_K_M is Q4_K, with Q6_K for the output head (the token embedding when the head is tied)
 * and for attn_v / ffn_down in the layers llama.cpp's use_more_bits() picks (the first and last
 * eighth, and every third layer in between); Q2_K, Q3_K_M, Q4_K_S, IQ4_NL/XS give attn_v,
 * ffn_down and attn_output their own types; Q4_1, Q5_0, Q5_1 are their type with a Q6_K head.
 * Rows that do not divide into the block size fall back as llama.cpp does: Q2_K, Q3_K, IQ4_XS ->
 * IQ4_NL; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; then F16 when 32 does not divide either.
 * Q8_0/Q4_0 rows that 32 does not divide become F16 (llama.cpp refuses the file).
 * The lattice mixes IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M follow
 * llama.cpp's rules too (e.g. IQ2_M: IQ2_S, with IQ3_S for attn_v and attn_output and a Q5_K
 * head); their IQ1/IQ2/IQ3_XXS tensors fall back to IQ4_NL, and they need an importance matrix
 * wherever a tensor would be IQ1_*, IQ2_* or IQ3_XXS (quantize_file_imatrix refuses otherwise).
 * All metadata is copied; general.file_type and general.quantization_version are set. The output
 * is written to a temporary file and renamed, so OUT is never half-written. The input must hold
 * F32, F16 or BF16 weights: already-quantized weights are refused (quantizing twice loses more).
 * Memory: the output tensors are held in memory until written (about the size of OUT).
 */
#ifndef ATTND_QUANTIZE_H
#define ATTND_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/gguf.h"

typedef enum quantize_target {
    QUANTIZE_F16,
    QUANTIZE_BF16,
    QUANTIZE_Q8_0,
    QUANTIZE_Q4_0,
    QUANTIZE_Q4_K,
    QUANTIZE_Q6_K,
    QUANTIZE_Q4_K_M,
    QUANTIZE_Q2_K,
    QUANTIZE_Q3_K_S,
    QUANTIZE_Q3_K_M,
    QUANTIZE_Q4_K_S,
    QUANTIZE_Q5_K_S,
    QUANTIZE_Q5_K_M,
    QUANTIZE_Q4_1,
    QUANTIZE_Q5_0,
    QUANTIZE_Q5_1,
    QUANTIZE_IQ4_NL,
    QUANTIZE_IQ4_XS,
    QUANTIZE_MXFP4, /* plain: every weight MXFP4 */
    /* the lattice mixes of issue 47 (all but IQ3_S and IQ3_M need an importance matrix) */
    QUANTIZE_IQ2_XXS,
    QUANTIZE_IQ2_XS,
    QUANTIZE_IQ2_S,
    QUANTIZE_IQ2_M,
    QUANTIZE_IQ3_XXS,
    QUANTIZE_IQ3_XS,
    QUANTIZE_IQ3_S,
    QUANTIZE_IQ3_M,
    QUANTIZE_IQ1_S,
    QUANTIZE_IQ1_M,
} quantize_target;

/* "Q4_K_M" (case-insensitive) -> QUANTIZE_Q4_K_M; ATTND_ERR_INVALID for an unknown name. */
attnd_status quantize_target_parse(const char *name, quantize_target *out);
const char *quantize_target_name(quantize_target t);
/* The names quantize_target_parse accepts, comma-separated (static string). */
const char *quantize_target_list(void);

/*
 * The type tensor `name` of shape ne[0..n_dims) gets under target t, in a model with n_layer
 * layers whose output head is (has_output) or is not (tied embedding) a tensor of its own.
 * Returns the input type unchanged for tensors that are not quantized (1-D, not a weight).
 */
uint32_t quantize_tensor_type(quantize_target t, const char *name, uint32_t n_dims, const uint64_t *ne,
                              uint32_t in_type, int n_layer, bool has_output);

/* What the mixes look at besides a tensor's name and shape (read from the file's metadata). */
typedef struct quantize_model {
    int n_layer;     /* <arch>.block_count */
    bool has_output; /* output.weight is a tensor of its own (not tied to token_embd) */
    int n_gqa;       /* query heads per KV head (1 when unknown) */
    int n_expert;    /* experts per MoE layer (1: dense) */
    bool has_imatrix; /* an importance matrix is given (some of llama.cpp's choices depend on it) */
} quantize_model;

/* What the mixes look at in the open file f (its metadata and whether output.weight is a tensor),
 * with has_imatrix as given: what quantize_file uses. */
quantize_model quantize_model_of(const gguf_file *f, bool has_imatrix);

/* quantize_tensor_type with the whole model description (quantize_tensor_type: n_gqa = n_expert = 1). */
uint32_t quantize_tensor_type_for(quantize_target t, const char *name, uint32_t n_dims, const uint64_t *ne,
                                  uint32_t in_type, const quantize_model *m);

/* dst = the n floats of src encoded in `type` (F32, F16, BF16 or any quantized type the engine
 * computes, gguf_type_computable; n a multiple of the type's block size); quant_row_bytes(type, n)
 * bytes are written. */
void quantize_row(void *dst, const float *src, uint32_t type, int64_t n);
/* quantize_row with an importance per column (imp, n floats; NULL = none): the types with a
 * weighted path (quantize_type_weighted: Q2_K..Q6_K, Q4_0, Q5_0, IQ4_NL, IQ4_XS, and the lattice
 * types IQ1_S..IQ3_S, which weigh with imp = 1 when imp is NULL) weigh each
 * element's squared error in their scale searches as llama.cpp's quantizers weigh quant_weights:
 * imp[i] * sqrt(sigma2 + x[i]^2), sigma2 the type's mean-square term (imp[i] alone for Q6_K); the
 * others ignore imp (Q8_0, Q4_1, Q5_1, MXFP4, F16, BF16). */
void quantize_row_weighted(void *dst, const float *src, uint32_t type, int64_t n, const float *imp);
bool quantize_type_weighted(uint32_t type);

/* Called once per tensor as it is converted (may be NULL). */
typedef void (*quantize_progress_fn)(void *user, const char *tensor, uint32_t from_type, uint32_t to_type);

/* Reads in_path, writes out_path (atomically) with weights in target t. Errors: ATTND_ERR_IO,
 * ATTND_ERR_INVALID (a target that needs an importance matrix, given none or one without an
 * entry for a tensor that needs it: checked before anything is converted; the message names it),
 * ATTND_ERR_FORMAT (not a GGUF / malformed), ATTND_ERR_UNSUPPORTED (already quantized input,
 * or nothing to write), ATTND_ERR_NOMEM. OUT may be IN: the old file stays readable until the rename. */
attnd_status quantize_file(const char *in_path, const char *out_path, quantize_target t,
                           quantize_progress_fn progress, void *user, attnd_err *err);
/* quantize_file with an importance matrix (attnd/imatrix.h; borrowed, NULL = none): each tensor
 * with an entry of its name is encoded with quantize_row_weighted on its columns' mean squared
 * inputs (per expert for a 3-D expert tensor), and the output gets llama-quantize's
 * quantize.imatrix.file / dataset / entries_count / chunks_count keys. ATTND_ERR_FORMAT when an
 * entry's shape is not its tensor's. */
struct imatrix;
attnd_status quantize_file_imatrix(const char *in_path, const char *out_path, quantize_target t,
                                   const struct imatrix *im, quantize_progress_fn progress, void *user, attnd_err *err);

#endif /* ATTND_QUANTIZE_H */
