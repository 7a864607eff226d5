/*
 * engine_fixture.h — test helpers for the engine tests (test_model.c, test_kv.c): tiny
 * random-weight llama / qwen2 models of any small shape (written with gguf_builder.h), and an independent
 * float64 reference forward pass (no KV cache, full causal attention recomputed per position)
 * to check the engine against. Everything is static: each test file gets its own copy.
 *
 * The reference reads the same GGUF back through gguf_open, dequantizing F32/F16 weights itself,
 * so it shares no code with the engine beyond the file reader.
 */
#ifndef ATTND_TEST_ENGINE_FIXTURE_H
#define ATTND_TEST_ENGINE_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/engine.h"
#include "gguf_builder.h"

typedef struct tiny_spec {
    const char *arch;      /* "llama" or "qwen2" */
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, rope_dims;
    float rope_base, rms_eps;
    uint32_t wtype;        /* GGUF_TYPE_F32 or GGUF_TYPE_F16 for the 2-D weights */
    bool tied;             /* no output.weight: reuse token_embd */
    bool vocab;            /* also write a SentencePiece-style vocabulary (n_vocab >= 300), so
                            * that llama.cpp can load the file */
    uint64_t seed;
    int vocab_extra;       /* with vocab: write n_vocab + vocab_extra tokens (tests of bad files) */
    int bos_id;            /* with vocab: tokenizer.ggml.bos_token_id; 0 = 1 */
} tiny_spec;

static inline tiny_spec tiny_default(const char *arch) {
    return (tiny_spec){.arch = arch, .n_vocab = 48, .n_embd = 32, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                       .n_ff = 40, .n_ctx = 320, .rope_dims = 8, .rope_base = 10000.0f, .rms_eps = 1e-5f,
                       .wtype = GGUF_TYPE_F32, .tied = false, .seed = 7};
}

static inline uint64_t tiny_rng(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}
/* Uniform in [-a, a). */
static inline float tiny_uniform(uint64_t *s, float a) { return ((float)tiny_rng(s) / (float)(1ULL << 31) * 2 - 1) * a; }

static inline uint16_t tiny_f32_to_f16(float f) {
    /* Test data are small normal numbers: truncating conversion is enough for a fixture. */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, man = x & 0x7fffff;
    if (e < 113) return (uint16_t)sign; /* flush tiny values to zero */
    return (uint16_t)(sign | ((e - 112) << 10) | (man >> 13));
}

typedef struct tiny_tensor {
    char name[64];
    int n_dims;
    uint64_t ne[2];
    uint32_t type;
    float *vals; /* (n_elems) F32 values, converted when written */
} tiny_tensor;

/* Writes the model described by spec to path. Returns 0 on success. */
static inline int tiny_write(const char *path, const tiny_spec *sp) {
    int hd = sp->n_embd / sp->n_head, kvd = hd * sp->n_head_kv;
    bool qwen = !strcmp(sp->arch, "qwen2");
    tiny_tensor ts[64];
    int nt = 0;
    uint64_t rng = sp->seed;
#define ADD(nm, d0, d1, ty, scale, offs)                                                \
    do {                                                                                \
        tiny_tensor *t = &ts[nt++];                                                     \
        snprintf(t->name, sizeof(t->name), "%s", nm);                                   \
        t->ne[0] = d0;                                                                  \
        t->ne[1] = d1;                                                                  \
        t->n_dims = d1 > 1 ? 2 : 1;                                                     \
        t->type = ty;                                                                   \
        t->vals = malloc(sizeof(float) * d0 * d1);                                      \
        for (uint64_t i_ = 0; i_ < (uint64_t)(d0) * (d1); i_++)                         \
            t->vals[i_] = (offs) + tiny_uniform(&rng, scale);                           \
    } while (0)
    char nm[64];
    ADD("token_embd.weight", (uint64_t)sp->n_embd, (uint64_t)sp->n_vocab, sp->wtype, 1.0f, 0.0f);
    ADD("output_norm.weight", (uint64_t)sp->n_embd, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    if (!sp->tied) ADD("output.weight", (uint64_t)sp->n_embd, (uint64_t)sp->n_vocab, sp->wtype, 0.5f, 0.0f);
    for (int l = 0; l < sp->n_layer; l++) {
        float ws = 1.0f / sqrtf((float)sp->n_embd) * 1.7f;
#define NAME(s) (snprintf(nm, sizeof(nm), "blk.%d.%s", l, s), nm)
        ADD(NAME("attn_norm.weight"), (uint64_t)sp->n_embd, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        ADD(NAME("attn_q.weight"), (uint64_t)sp->n_embd, (uint64_t)sp->n_embd, sp->wtype, ws, 0.0f);
        ADD(NAME("attn_k.weight"), (uint64_t)sp->n_embd, (uint64_t)kvd, sp->wtype, ws, 0.0f);
        ADD(NAME("attn_v.weight"), (uint64_t)sp->n_embd, (uint64_t)kvd, sp->wtype, ws, 0.0f);
        if (qwen) {
            ADD(NAME("attn_q.bias"), (uint64_t)sp->n_embd, 1, GGUF_TYPE_F32, 0.5f, 0.0f);
            ADD(NAME("attn_k.bias"), (uint64_t)kvd, 1, GGUF_TYPE_F32, 0.5f, 0.0f);
            ADD(NAME("attn_v.bias"), (uint64_t)kvd, 1, GGUF_TYPE_F32, 0.5f, 0.0f);
        }
        ADD(NAME("attn_output.weight"), (uint64_t)sp->n_embd, (uint64_t)sp->n_embd, sp->wtype, ws, 0.0f);
        ADD(NAME("ffn_norm.weight"), (uint64_t)sp->n_embd, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        ADD(NAME("ffn_gate.weight"), (uint64_t)sp->n_embd, (uint64_t)sp->n_ff, sp->wtype, ws, 0.0f);
        ADD(NAME("ffn_up.weight"), (uint64_t)sp->n_embd, (uint64_t)sp->n_ff, sp->wtype, ws, 0.0f);
        ADD(NAME("ffn_down.weight"), (uint64_t)sp->n_ff, (uint64_t)sp->n_embd, sp->wtype,
            1.7f / sqrtf((float)sp->n_ff), 0.0f);
#undef NAME
    }
#undef ADD
    gbuf b = {0};
    gb_bytes(&b, "GGUF", 4);
    gb_u32(&b, 3);
    gb_u64(&b, (uint64_t)nt);
    gb_u64(&b, sp->vocab ? 17 : 11);
    char key[96];
#define K(s) (snprintf(key, sizeof(key), "%s.%s", sp->arch, s), key)
    gb_kv_str(&b, "general.architecture", sp->arch);
    gb_kv_str(&b, "general.name", "tiny");
    gb_kv_u32(&b, K("context_length"), (uint32_t)sp->n_ctx);
    gb_kv_u32(&b, K("embedding_length"), (uint32_t)sp->n_embd);
    gb_kv_u32(&b, K("block_count"), (uint32_t)sp->n_layer);
    gb_kv_u32(&b, K("feed_forward_length"), (uint32_t)sp->n_ff);
    gb_kv_u32(&b, K("attention.head_count"), (uint32_t)sp->n_head);
    gb_kv_u32(&b, K("attention.head_count_kv"), (uint32_t)sp->n_head_kv);
    gb_kv_f32(&b, K("attention.layer_norm_rms_epsilon"), sp->rms_eps);
    gb_kv_f32(&b, K("rope.freq_base"), sp->rope_base);
    gb_kv_u32(&b, K("rope.dimension_count"), (uint32_t)sp->rope_dims);
#undef K
    if (sp->vocab) {
        /* <unk>, <s>, </s>, the 256 byte tokens, then plain pieces "t259", "t260", ... */
        gb_kv_str(&b, "tokenizer.ggml.model", "llama");
        gb_arr_head(&b, "tokenizer.ggml.tokens", GGUF_VT_STRING, (uint64_t)(sp->n_vocab + sp->vocab_extra));
        for (int i = 0; i < sp->n_vocab + sp->vocab_extra; i++) {
            char piece[32];
            if (i < 3) snprintf(piece, sizeof(piece), "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            else if (i < 259) snprintf(piece, sizeof(piece), "<0x%02X>", i - 3);
            else snprintf(piece, sizeof(piece), "t%d", i);
            gb_str(&b, piece);
        }
        gb_arr_head(&b, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, (uint64_t)(sp->n_vocab + sp->vocab_extra));
        for (int i = 0; i < sp->n_vocab + sp->vocab_extra; i++) {
            float sc = i < 259 ? 0.0f : -(float)i;
            gb_bytes(&b, &sc, 4);
        }
        gb_arr_head(&b, "tokenizer.ggml.token_type", GGUF_VT_INT32, (uint64_t)(sp->n_vocab + sp->vocab_extra));
        for (int i = 0; i < sp->n_vocab + sp->vocab_extra; i++) {
            int32_t ty = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1; /* unknown, control, byte, normal */
            gb_bytes(&b, &ty, 4);
        }
        gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", (uint32_t)(sp->bos_id ? sp->bos_id : 1));
        gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
    }
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        gb_str(&b, ts[i].name);
        gb_u32(&b, (uint32_t)ts[i].n_dims);
        for (int d = 0; d < ts[i].n_dims; d++) gb_u64(&b, ts[i].ne[d]);
        gb_u32(&b, ts[i].type);
        gb_u64(&b, off);
        uint64_t bytes = ts[i].ne[0] * ts[i].ne[1] * (ts[i].type == GGUF_TYPE_F32 ? 4 : 2);
        off += (bytes + 31) / 32 * 32;
    }
    static const uint8_t zeros[32];
    gb_bytes(&b, zeros, (32 - b.n % 32) % 32);
    for (int i = 0; i < nt; i++) {
        uint64_t n = ts[i].ne[0] * ts[i].ne[1], bytes = 0;
        for (uint64_t j = 0; j < n; j++) {
            if (ts[i].type == GGUF_TYPE_F32) {
                gb_bytes(&b, &ts[i].vals[j], 4);
                bytes += 4;
            } else {
                uint16_t h = tiny_f32_to_f16(ts[i].vals[j]);
                gb_bytes(&b, &h, 2);
                bytes += 2;
            }
        }
        gb_bytes(&b, zeros, (32 - bytes % 32) % 32);
        free(ts[i].vals);
    }
    FILE *f = fopen(path, "wb");
    int rc = !f || fwrite(b.p, 1, b.n, f) != b.n;
    if (f) fclose(f);
    free(b.p);
    return rc;
}

/* A fresh temp file name (caller unlinks). */
static inline void tiny_tmpname(char *buf, size_t n, const char *tag) {
    static int counter;
    snprintf(buf, n, "/tmp/attnd-test-%d-%d-%s.gguf", (int)getpid(), counter++, tag);
}

// ---- independent float64 reference -----------------------------------------------------------

static inline double ref_elem(const gguf_tensor *t, uint64_t i) {
    if (t->type == GGUF_TYPE_F32) return ((const float *)t->data)[i];
    uint16_t h = ((const uint16_t *)t->data)[i];
    int e = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = e ? ldexp(1.0 + man / 1024.0, e - 15) : ldexp(man / 1024.0, -14);
    return (h & 0x8000) ? -v : v;
}

static inline const gguf_tensor *ref_t(const gguf_file *f, const char *name) { return gguf_find_tensor(f, name); }
static inline const gguf_tensor *ref_tl(const gguf_file *f, int l, const char *s) {
    char nm[96];
    snprintf(nm, sizeof(nm), "blk.%d.%s", l, s);
    return gguf_find_tensor(f, nm);
}

/* out[r] = sum_c W[r][c] x[c] */
static inline void ref_matvec(double *out, const gguf_tensor *w, const double *x) {
    uint64_t cols = w->ne[0], rows = w->ne[1];
    for (uint64_t r = 0; r < rows; r++) {
        double s = 0;
        for (uint64_t c = 0; c < cols; c++) s += ref_elem(w, r * cols + c) * x[c];
        out[r] = s;
    }
}

static inline void ref_rmsnorm(double *out, const double *x, const gguf_tensor *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * sc * ref_elem(w, (uint64_t)i);
}

/*
 * Logits (n_tok, n_vocab) of every position of tokens, computed from scratch in double with the
 * math written out naively: embeddings, RMSNorm, Q/K/V (+bias), RoPE (adjacent pairs for llama,
 * halves for qwen2), causal softmax attention with grouped KV heads, SwiGLU, final norm, head.
 * attn (may be NULL) receives the softmax weights (n_layer, n_head, n_tok, n_tok): row t holds
 * position t's weights over positions 0..t, zeros after.
 */
static inline void ref_forward_attn(const tiny_spec *sp, const char *path, const int32_t *tokens, int n_tok,
                                    double *logits, double *attn) {
    gguf_file *f;
    if (gguf_open(&f, path, NULL) != ATTND_OK) abort();
    int E = sp->n_embd, H = sp->n_head, HK = sp->n_head_kv, hd = E / H, KVD = HK * hd, F = sp->n_ff,
        V = sp->n_vocab, rd = sp->rope_dims;
    bool neox = !strcmp(sp->arch, "qwen2");
    double *x = calloc((size_t)n_tok * E, sizeof(double));
    double *xn = malloc(sizeof(double) * E), *q = malloc(sizeof(double) * (size_t)n_tok * E);
    double *k = malloc(sizeof(double) * (size_t)n_tok * KVD), *v = malloc(sizeof(double) * (size_t)n_tok * KVD);
    double *att = malloc(sizeof(double) * E), *tmp = malloc(sizeof(double) * E);
    double *g = malloc(sizeof(double) * F), *u = malloc(sizeof(double) * F), *sc = malloc(sizeof(double) * n_tok);
    const gguf_tensor *emb = ref_t(f, "token_embd.weight");
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < E; i++) x[(size_t)t * E + i] = ref_elem(emb, (uint64_t)tokens[t] * E + i);
    for (int l = 0; l < sp->n_layer; l++) {
        for (int t = 0; t < n_tok; t++) {
            ref_rmsnorm(xn, x + (size_t)t * E, ref_tl(f, l, "attn_norm.weight"), E, sp->rms_eps);
            ref_matvec(q + (size_t)t * E, ref_tl(f, l, "attn_q.weight"), xn);
            ref_matvec(k + (size_t)t * KVD, ref_tl(f, l, "attn_k.weight"), xn);
            ref_matvec(v + (size_t)t * KVD, ref_tl(f, l, "attn_v.weight"), xn);
            if (neox) {
                for (int i = 0; i < E; i++) q[(size_t)t * E + i] += ref_elem(ref_tl(f, l, "attn_q.bias"), i);
                for (int i = 0; i < KVD; i++) k[(size_t)t * KVD + i] += ref_elem(ref_tl(f, l, "attn_k.bias"), i);
                for (int i = 0; i < KVD; i++) v[(size_t)t * KVD + i] += ref_elem(ref_tl(f, l, "attn_v.bias"), i);
            }
            for (int which = 0; which < 2; which++) {
                int nh = which ? HK : H;
                double *base = which ? k + (size_t)t * KVD : q + (size_t)t * E;
                for (int h = 0; h < nh; h++)
                    for (int i = 0; i < rd / 2; i++) {
                        double th = t * pow(sp->rope_base, -2.0 * i / rd);
                        int a = neox ? i : 2 * i, bb = neox ? i + rd / 2 : 2 * i + 1;
                        double *vv = base + (size_t)h * hd, x0 = vv[a], x1 = vv[bb];
                        vv[a] = x0 * cos(th) - x1 * sin(th);
                        vv[bb] = x0 * sin(th) + x1 * cos(th);
                    }
            }
        }
        for (int t = 0; t < n_tok; t++) {
            for (int h = 0; h < H; h++) {
                int kh = h / (H / HK);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int i = 0; i < hd; i++) s += q[(size_t)t * E + h * hd + i] * k[(size_t)j * KVD + kh * hd + i];
                    sc[j] = s / sqrt((double)hd);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j <= t; j++) sum += sc[j] = exp(sc[j] - mx);
                if (attn) {
                    double *row = attn + (((size_t)l * H + h) * n_tok + t) * n_tok;
                    for (int j = 0; j < n_tok; j++) row[j] = j <= t ? sc[j] / sum : 0;
                }
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += sc[j] / sum * v[(size_t)j * KVD + kh * hd + i];
                    att[h * hd + i] = a;
                }
            }
            ref_matvec(tmp, ref_tl(f, l, "attn_output.weight"), att);
            for (int i = 0; i < E; i++) x[(size_t)t * E + i] += tmp[i];
            ref_rmsnorm(xn, x + (size_t)t * E, ref_tl(f, l, "ffn_norm.weight"), E, sp->rms_eps);
            ref_matvec(g, ref_tl(f, l, "ffn_gate.weight"), xn);
            ref_matvec(u, ref_tl(f, l, "ffn_up.weight"), xn);
            for (int i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            ref_matvec(tmp, ref_tl(f, l, "ffn_down.weight"), g);
            for (int i = 0; i < E; i++) x[(size_t)t * E + i] += tmp[i];
        }
    }
    const gguf_tensor *out = ref_t(f, "output.weight");
    if (!out) out = emb;
    for (int t = 0; t < n_tok; t++) {
        ref_rmsnorm(xn, x + (size_t)t * E, ref_t(f, "output_norm.weight"), E, sp->rms_eps);
        ref_matvec(logits + (size_t)t * V, out, xn);
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(tmp), free(g), free(u), free(sc);
    gguf_close(f);
}

static inline void ref_forward(const tiny_spec *sp, const char *path, const int32_t *tokens, int n_tok, double *logits) {
    ref_forward_attn(sp, path, tokens, n_tok, logits, NULL);
}

#endif /* ATTND_TEST_ENGINE_FIXTURE_H */
