/*
 * model_internal.h — (engine-private) the loaded model's layout, shared by model.c (loading and
 * validation) and engine.c (evaluation). Weight matrices stay in their GGUF type inside the
 * mmap; only the small vectors (norm weights, biases) are copied out as F32 at load.
 */
#ifndef ATTND_MODEL_INTERNAL_H
#define ATTND_MODEL_INTERNAL_H

#include "attnd/engine.h"

typedef enum model_arch { ARCH_LLAMA = 0, ARCH_QWEN2 = 1 } model_arch;

/* A weight matrix in the mapping: (rows, cols) with rows contiguous, elements of `type`. */
typedef struct weight {
    const void *data;
    uint32_t type;
    int64_t rows, cols;
    struct quant_packed *packed; /* owned: a decode kernel's copy made at load (quant_pack), or NULL */
} weight;

typedef struct layer_weights {
    float *attn_norm;        /* (n_embd) */
    weight wq, wk, wv, wo;   /* (q_dim, n_embd), (kv_dim, n_embd) x2, (n_embd, q_dim) */
    float *bq, *bk, *bv;     /* (q_dim), (kv_dim), (kv_dim), or NULL when the file has none */
    float *ffn_norm;         /* (n_embd) */
    weight w_gate, w_up;     /* (n_ff, n_embd) */
    weight w_down;           /* (n_embd, n_ff) */
} layer_weights;

struct model {
    gguf_file *f;
    model_info info;
    model_arch arch;
    int q_dim, kv_dim;       /* n_head * head_dim, n_head_kv * head_dim */
    weight tok_embd;         /* (n_vocab, n_embd) */
    float *output_norm;      /* (n_embd) */
    weight output;           /* (n_vocab, n_embd); token_embd when the file has no output.weight */
    layer_weights *layers;   /* (n_layer) */
    double *rope_inv_freq;   /* (rope_dims / 2): base^(-2i / rope_dims) */
    size_t packed_bytes;     /* memory of the weights' packed copies (weight.packed) */
};

#endif /* ATTND_MODEL_INTERNAL_H */
