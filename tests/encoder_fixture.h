/*
 * encoder_fixture.h — (tests only) random-weight encoders (bert: tensor and key names as llama.cpp's
 * GGUF conventions spell them, src/llama-arch.cpp, src/models/bert.cpp) and an independent float64
 * reference forward: embeddings + token type + position, LayerNorm, then per layer post-LayerNorm
 * attention (every position of an input sees every position of it) and GELU FFN, then pooling and
 * the classification head. Written from the math, not from engine/encoder.c. Static, as
 * engine_fixture.h.
 */
#ifndef ATTND_TEST_ENCODER_FIXTURE_H
#define ATTND_TEST_ENCODER_FIXTURE_H

#include "engine_fixture.h"

/* A small bert: 32 wide, 4 heads, FFN 40, 2 layers, 2 token types, mean pooling, vocabulary 320
 * (llama.cpp loads it). */
static inline tiny_spec enc_small(void) {
    tiny_spec sp = tiny_default("bert");
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 128, sp.n_types = 2, sp.rms_eps = 1e-12f, sp.pooling = 1 + 1;
    sp.n_head_kv = 4;
    return sp;
}

/* bge-base's shape (768 wide, 12 heads, FFN 3072, 512 positions) at 2 layers, CLS pooling; F32
 * (F16 weights round the activations to F16, as llama.cpp does: not the float64 math). */
static inline tiny_spec enc_bge_base(void) {
    tiny_spec sp = enc_small();
    sp.n_embd = 768, sp.n_head = 12, sp.n_head_kv = 12, sp.n_ff = 3072, sp.n_ctx = 512, sp.rope_dims = 64;
    sp.pooling = 1 + 2;
    return sp;
}

/* EmbeddingGemma's layers at a small size llama.cpp loads (64 wide, 4 heads of 32, 2 KV heads,
 * 6 layers: 5 local with a window of 6, then a global one), tied, mean pooling. */
static inline tiny_spec gemma_emb_small(void) {
    tiny_spec sp = tiny_default("gemma-embedding");
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 512, sp.n_embd = 64, sp.n_head = 4, sp.n_head_kv = 2;
    sp.head_dim = 32, sp.rope_dims = 32, sp.n_ff = 96, sp.n_layer = 6, sp.window = 6, sp.rope_base = 1e6f;
    sp.rms_eps = 1e-6f, sp.tied = true, sp.pooling = 1 + 1;
    return sp;
}

/* XLM-RoBERTa as llama.cpp's converter writes it (XLMRobertaModel, arch bert): the real 250048-piece
 * unigram ("t5") vocabulary of vocab_path (tests/data/tokenizers/xlmr-ugm.gguf: <s> 0, <pad> 1,
 * </s> 2, <unk> 3, <mask> 250001, its character map) with add_sep_token, one token type, LayerNorm
 * epsilon 1e-5, the position rows from the first real position on (the converter drops the
 * pad_token_id + 1 rows before it), F16 weights; 32 wide, 4 heads, FFN 64, 2 layers, 512
 * positions. CLS pooling (bge-m3); rank: a one-logit head after the tanh dense layer
 * (XLMRobertaForSequenceClassification's classifier, bge-reranker-v2-m3). */
static inline tiny_spec enc_xlmr(const char *vocab_path, bool rank) {
    tiny_spec sp = enc_small();
    sp.vocab = false, sp.vocab_from = vocab_path, sp.n_vocab = 250048, sp.n_ctx = 512, sp.n_types = 1;
    sp.n_ff = 64, sp.rms_eps = 1e-5f, sp.wtype = GGUF_TYPE_F16, sp.pooling = 1 + 2, sp.seed = 11;
    if (rank) sp.pooling = 1 + 4, sp.n_cls_out = 1, sp.seed = 12;
    return sp;
}

/* The encoders of the llama.cpp comparison (tests/data/reference-embed.json, regenerate.sh through
 * tiny_model): the small bert (F32, mean pooling), bge-base's shape in F16 (CLS pooling), and a
 * cross-encoder of that shape (F16, rank: cls and one cls.output logit), and nomic-embed-text
 * v1.5's shape (768 wide, 12 heads of 64 all rotated, SwiGLU of 3072) at 2 layers, F16, mean, and
 * the small gemma-embedding (gemma_emb_small, F32), and two small qwen3 decoders: an embedder (last
 * token) and a reranker (cls.output's [yes, no] rows, softmaxed). */
static const char *const ENC_NAMES[] = {
    "bert", "bert-bge-base", "bert-reranker", "nomic-bert", "gemma-embedding", "qwen3-embedding", "qwen3-reranker"};
#define N_ENC (sizeof(ENC_NAMES) / sizeof(ENC_NAMES[0]))

static inline tiny_spec enc_named(const char *name) {
    tiny_spec sp = enc_small();
    if (strcmp(name, "bert")) sp = enc_bge_base(), sp.wtype = GGUF_TYPE_F16, sp.seed = 5;
    if (!strcmp(name, "bert-reranker")) sp.pooling = 1 + 4, sp.n_cls_out = 1, sp.seed = 6;
    if (!strcmp(name, "nomic-bert")) sp.arch = "nomic-bert", sp.pooling = 1 + 1, sp.seed = 8, sp.rope_base = 1000.0f;
    if (!strcmp(name, "gemma-embedding")) sp = gemma_emb_small();
    if (!strncmp(name, "qwen3-", 6)) { /* decoders: Qwen3-Embedding (last token), Qwen3-Reranker (yes/no head) */
        sp = tiny_default("qwen3");
        sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 512, sp.n_embd = 64, sp.n_head = 4, sp.n_head_kv = 2;
        sp.n_ff = 96, sp.head_dim = 32, sp.rope_dims = 32, sp.rope_base = 1e6f, sp.rms_eps = 1e-6f, sp.tied = true;
        sp.pooling = 1 + 3;
        if (!strcmp(name, "qwen3-reranker")) sp.pooling = 1 + 4, sp.n_cls_out = 2, sp.seed = 9;
    }
    return sp;
}

/* The inputs of the llama.cpp comparison: ENC_N_INPUTS token lists ([CLS]-like 1 first, 2 last),
 * 5 to 40 tokens long, written into ids (ENC_N_INPUTS, ENC_MAX_LEN) with their lengths. */
#define ENC_N_INPUTS 4
#define ENC_MAX_LEN 40
static inline void enc_inputs(int32_t ids[ENC_N_INPUTS][ENC_MAX_LEN], int len[ENC_N_INPUTS]) {
    static const int lens[ENC_N_INPUTS] = {12, 5, 40, 23};
    uint64_t s = 48;
    for (int i = 0; i < ENC_N_INPUTS; i++) {
        len[i] = lens[i];
        for (int t = 0; t < len[i]; t++)
            ids[i][t] = t == 0 ? 1 : t == len[i] - 1 ? 2 : 3 + (int32_t)(tiny_rng(&s) % 317);
    }
}

#define EADD(nm, d0, d1, ty, scale, offs) tiny_add(ts, &n, &seed, nm, (uint64_t)(d0), (uint64_t)(d1), ty, scale, offs)

/* The tensors of encoder sp (bert), with random values; a cls head (cls and cls.output of
 * n_cls_out rows, with biases) when sp->n_cls_out. */
static inline int enc_tensors(const tiny_spec *sp, tiny_tensor *ts) {
    int n = 0;
    uint64_t seed = sp->seed, E = (uint64_t)sp->n_embd, F = (uint64_t)sp->n_ff;
    uint32_t w = sp->wtype, f32 = GGUF_TYPE_F32;
    float ws = 1.7f / sqrtf((float)E);
    EADD("token_embd.weight", E, sp->n_vocab, w, 1.0f, 0.0f);
    bool nomic = !strcmp(sp->arch, "nomic-bert");                /* RoPE, fused qkv, SwiGLU, no biases */
    EADD("token_types.weight", E, sp->n_types, f32, 0.5f, 0.0f); /* F32 always, as the converter keeps them */
    ts[n - 1].n_dims = 2; /* [E, 1] for XLM-R's one type: today's converter keeps the row dimension */
    if (!nomic) EADD("position_embd.weight", E, sp->n_ctx, f32, 0.5f, 0.0f);
    EADD("token_embd_norm.weight", E, 1, f32, 0.2f, 1.0f);
    EADD("token_embd_norm.bias", E, 1, f32, 0.1f, 0.0f);
    if (sp->n_cls_out > 0) {
        EADD("cls.weight", E, E, w, ws, 0.0f);
        EADD("cls.bias", E, 1, f32, 0.1f, 0.0f);
        EADD("cls.output.weight", E, sp->n_cls_out, w, ws, 0.0f); /* logits of a few units, as trained heads give */
        ts[n - 1].n_dims = 2; /* [E, n_cls_out] even for one output, as the converter writes it */
        EADD("cls.output.bias", sp->n_cls_out, 1, f32, 0.1f, 0.0f);
    }
    char nm[64];
    for (int l = 0; l < sp->n_layer; l++) {
#define L(s) (snprintf(nm, sizeof(nm), "blk.%d.%s", l, s), nm)
        static const char *const qkv[] = {"attn_q", "attn_k", "attn_v"};
        if (nomic) EADD(L("attn_qkv.weight"), E, 3 * E, w, ws, 0.0f);
        for (int i = 0; !nomic && i < 3; i++) {
            char b[32];
            snprintf(b, sizeof(b), "%s.weight", qkv[i]);
            EADD(L(b), E, E, w, ws, 0.0f);
            snprintf(b, sizeof(b), "%s.bias", qkv[i]);
            EADD(L(b), E, 1, f32, 0.3f, 0.0f);
        }
        EADD(L("attn_output.weight"), E, E, w, ws, 0.0f);
        EADD(L("attn_output.bias"), E, 1, f32, 0.1f, 0.0f);
        EADD(L("attn_output_norm.weight"), E, 1, f32, 0.2f, 1.0f);
        EADD(L("attn_output_norm.bias"), E, 1, f32, 0.1f, 0.0f);
        if (nomic) EADD(L("ffn_gate.weight"), E, F, w, ws, 0.0f);
        EADD(L("ffn_up.weight"), E, F, w, ws, 0.0f);
        if (!nomic) EADD(L("ffn_up.bias"), F, 1, f32, 0.3f, 0.0f);
        EADD(L("ffn_down.weight"), F, E, w, 1.7f / sqrtf((float)F), 0.0f);
        if (!nomic) EADD(L("ffn_down.bias"), E, 1, f32, 0.1f, 0.0f);
        EADD(L("layer_output_norm.weight"), E, 1, f32, 0.2f, 1.0f);
        EADD(L("layer_output_norm.bias"), E, 1, f32, 0.1f, 0.0f);
#undef L
    }
    return n;
}
#undef EADD

/* Writes encoder sp to path (gemma-embedding and decoders: engine_fixture.h's tensors). 0 = done. */
static inline int enc_write(const char *path, const tiny_spec *sp) {
    if (strcmp(sp->arch, "bert") && strcmp(sp->arch, "nomic-bert")) return tiny_write(path, sp);
    tiny_tensor *ts = calloc(TINY_MAX_TENSORS, sizeof(*ts));
    int rc = tiny_write_tensors(path, sp, ts, enc_tensors(sp, ts));
    free(ts);
    return rc;
}

// ---- float64 reference --------------------------------------------------------------------------

static inline void eref_layer_norm(double *x, const gguf_file *f, const char *name, int E, double eps) {
    char nm[96];
    double mean = 0, var = 0;
    for (int i = 0; i < E; i++) mean += x[i];
    mean /= E;
    for (int i = 0; i < E; i++) var += (x[i] - mean) * (x[i] - mean);
    double sc = 1 / sqrt(var / E + eps);
    snprintf(nm, sizeof(nm), "%s.weight", name);
    const gguf_tensor *w = gguf_find_tensor(f, nm);
    snprintf(nm, sizeof(nm), "%s.bias", name);
    const gguf_tensor *b = gguf_find_tensor(f, nm);
    for (int i = 0; i < E; i++) x[i] = (x[i] - mean) * sc * ref_elem(w, (uint64_t)i) + ref_elem(b, (uint64_t)i);
}

/* out = W x + b for tensors "<name>.weight", "<name>.bias" (b optional). */
static inline void eref_linear(double *out, const gguf_file *f, const char *name, const double *x) {
    char nm[96];
    snprintf(nm, sizeof(nm), "%s.weight", name);
    const gguf_tensor *w = gguf_find_tensor(f, nm);
    ref_matvec(out, w, x);
    snprintf(nm, sizeof(nm), "%s.bias", name);
    const gguf_tensor *b = gguf_find_tensor(f, nm);
    for (uint64_t r = 0; b && r < w->ne[1]; r++) out[r] += ref_elem(b, r);
}

/* Layer l's attention over the n positions of one input, x (n, E) updated in place:
 * x = LN(x + W_o attn + b). attn (may be NULL): (H, n, n) softmax weights of the layer. */
static inline void eref_attention(const gguf_file *f, const tiny_spec *sp, int l, double *x, int n, double *attn) {
    int E = sp->n_embd, H = sp->n_head, hd = E / H;
    double *q = malloc(sizeof(double) * n * E), *k = malloc(sizeof(double) * n * E),
           *v = malloc(sizeof(double) * n * E);
    double *a = calloc((size_t)n * E, sizeof(double)), *s = malloc(sizeof(double) * n), *o = malloc(sizeof(double) * E);
    char nm[64];
    bool nomic = !strcmp(sp->arch, "nomic-bert");
    double *big = malloc(sizeof(double) * 3 * E);
    for (int t = 0; t < n; t++) {
        if (nomic) { /* fused q, k, v rows; then NEOX RoPE at the position within the input */
            snprintf(nm, sizeof(nm), "blk.%d.attn_qkv", l), eref_linear(big, f, nm, x + (size_t)t * E);
            memcpy(q + (size_t)t * E, big, sizeof(double) * E);
            memcpy(k + (size_t)t * E, big + E, sizeof(double) * E);
            memcpy(v + (size_t)t * E, big + 2 * E, sizeof(double) * E);
            for (int h = 0; h < 2 * H; h++)
                for (int i = 0; i < hd / 2; i++) {
                    double th = t * pow(sp->rope_base, -2.0 * i / hd),
                           *r = (h < H ? q : k) + (size_t)t * E + (h % H) * hd;
                    double x0 = r[i], x1 = r[i + hd / 2];
                    r[i] = x0 * cos(th) - x1 * sin(th), r[i + hd / 2] = x0 * sin(th) + x1 * cos(th);
                }
            continue;
        }
        snprintf(nm, sizeof(nm), "blk.%d.attn_q", l), eref_linear(q + (size_t)t * E, f, nm, x + (size_t)t * E);
        snprintf(nm, sizeof(nm), "blk.%d.attn_k", l), eref_linear(k + (size_t)t * E, f, nm, x + (size_t)t * E);
        snprintf(nm, sizeof(nm), "blk.%d.attn_v", l), eref_linear(v + (size_t)t * E, f, nm, x + (size_t)t * E);
    }
    free(big);
    for (int h = 0; h < H; h++)
        for (int t = 0; t < n; t++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += q[(size_t)t * E + h * hd + i] * k[(size_t)j * E + h * hd + i];
                s[j] = d / sqrt((double)hd);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < n; j++) sum += s[j] = exp(s[j] - mx);
            for (int j = 0; j < n; j++) {
                s[j] /= sum;
                if (attn) attn[((size_t)h * n + t) * n + j] = s[j];
                for (int i = 0; i < hd; i++) a[(size_t)t * E + h * hd + i] += s[j] * v[(size_t)j * E + h * hd + i];
            }
        }
    for (int t = 0; t < n; t++) {
        snprintf(nm, sizeof(nm), "blk.%d.attn_output", l), eref_linear(o, f, nm, a + (size_t)t * E);
        for (int i = 0; i < E; i++) x[(size_t)t * E + i] += o[i];
        snprintf(nm, sizeof(nm), "blk.%d.attn_output_norm", l),
            eref_layer_norm(x + (size_t)t * E, f, nm, E, sp->rms_eps);
    }
    free(q), free(k), free(v), free(a), free(s), free(o);
}

/* x = LN(x + W_down gelu(W_up x + b) + b) of one position, GELU in its tanh form. */
static inline void eref_ffn(const gguf_file *f, const tiny_spec *sp, int l, double *x) {
    int E = sp->n_embd, F = sp->n_ff;
    double *u = malloc(sizeof(double) * F), *o = malloc(sizeof(double) * E);
    char nm[64];
    snprintf(nm, sizeof(nm), "blk.%d.ffn_up", l), eref_linear(u, f, nm, x);
    if (!strcmp(sp->arch, "nomic-bert")) { /* SwiGLU: silu(gate x) * up x */
        double *g = malloc(sizeof(double) * F);
        snprintf(nm, sizeof(nm), "blk.%d.ffn_gate", l), eref_linear(g, f, nm, x);
        for (int i = 0; i < F; i++) u[i] *= g[i] / (1 + exp(-g[i]));
        free(g);
    } else {
        for (int i = 0; i < F; i++)
            u[i] = 0.5 * u[i] * (1 + tanh(sqrt(2 / M_PI) * (u[i] + 0.044715 * u[i] * u[i] * u[i])));
    }
    snprintf(nm, sizeof(nm), "blk.%d.ffn_down", l), eref_linear(o, f, nm, u);
    for (int i = 0; i < E; i++) x[i] += o[i];
    snprintf(nm, sizeof(nm), "blk.%d.layer_output_norm", l), eref_layer_norm(x, f, nm, E, sp->rms_eps);
    free(u), free(o);
}

/* The last hidden states (n, E) of one input (types NULL = 0); attn (may be NULL): (n_layer, H, n, n). */
static inline void eref_forward(const tiny_spec *sp, const char *path, const int32_t *tok, const uint8_t *types, int n,
                                double *x, double *attn) {
    gguf_file *f;
    if (gguf_open(&f, path, NULL) != ATTND_OK) abort();
    int E = sp->n_embd;
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight"), *ty = gguf_find_tensor(f, "token_types.weight");
    const gguf_tensor *pe = gguf_find_tensor(f, "position_embd.weight");
    for (int t = 0; t < n; t++) {
        double *r = x + (size_t)t * E;
        for (int i = 0; i < E; i++)
            r[i] = ref_elem(te, (uint64_t)tok[t] * E + i) + ref_elem(ty, (uint64_t)(types ? types[t] : 0) * E + i) +
                   (pe ? ref_elem(pe, (uint64_t)t * E + i) : 0);
        eref_layer_norm(r, f, "token_embd_norm", E, sp->rms_eps);
    }
    for (int l = 0; l < sp->n_layer; l++) {
        eref_attention(f, sp, l, x, n, attn ? attn + (size_t)l * sp->n_head * n * n : NULL);
        for (int t = 0; t < n; t++) eref_ffn(f, sp, l, x + (size_t)t * E);
    }
    gguf_close(f);
}

/* The rank score(s) of the first row h (E): cls.output (tanh(cls h + b)) + b. */
static inline void eref_rank(const tiny_spec *sp, const char *path, const double *h, double *out) {
    gguf_file *f;
    if (gguf_open(&f, path, NULL) != ATTND_OK) abort();
    double *y = malloc(sizeof(double) * sp->n_embd);
    eref_linear(y, f, "cls", h);
    for (int i = 0; i < sp->n_embd; i++) y[i] = tanh(y[i]);
    eref_linear(out, f, "cls.output", y);
    free(y);
    gguf_close(f);
}

#endif /* ATTND_TEST_ENCODER_FIXTURE_H */
