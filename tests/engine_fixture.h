/*
 * engine_fixture.h — test helpers for the engine tests (test_model.c, test_kv.c): random-weight
 * models of every family attnd runs (llama, qwen2, qwen3, smollm3, gemma2, gemma3, phi3), of any
 * shape (written with gguf_builder.h, tensor and key names as llama.cpp's GGUF conventions spell
 * them), and an independent float64 reference forward pass (no KV cache, full causal attention
 * recomputed per position) to check the engine against. The family facts the reference uses are
 * written out here again (tiny_family_of), not taken from the engine's table. Everything is
 * static: each test file gets its own copy.
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
    const char *arch;      /* general.architecture */
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, rope_dims;
    float rope_base, rms_eps;
    uint32_t wtype;        /* GGUF_TYPE_F32 or GGUF_TYPE_F16 for the 2-D weights */
    bool tied;             /* no output.weight: reuse token_embd */
    bool vocab;            /* also write a SentencePiece-style vocabulary (n_vocab >= 300), so
                            * that llama.cpp can load the file */
    uint64_t seed;
    int vocab_extra;       /* with vocab: write n_vocab + vocab_extra tokens (tests of bad files) */
    int bos_id;            /* with vocab: tokenizer.ggml.bos_token_id; 0 = 1 */
    int head_dim;          /* > 0: attention.key_length / value_length (else n_embd / n_head) */
    int window;            /* > 0: attention.sliding_window (the families with local layers); -1: the
                            * key written as 0 (no window) */
    float rope_base_swa;   /* > 0: rope.freq_base_swa (the local layers' RoPE base) */
    float attn_softcap, final_softcap; /* > 0: gemma2's soft-capping keys */
    float rope_linear;     /* > 0: rope.scaling.type linear with this factor */
    float rope_yarn;       /* > 0: rope.scaling.type yarn with this factor ... */
    int yarn_orig_ctx;     /* ... and rope.scaling.original_context_length */
    bool rope_freqs;       /* write rope_freqs.weight (Llama 3's frequency factors) */
    int longrope_orig_ctx; /* > 0: LongRoPE (phi3): rope_factors_short/long.weight, this
                            * rope.scaling.original_context_length and an attn_factor */
    float longrope_attn;   /* with longrope_orig_ctx: rope.scaling.attn_factor (0: not written) */
    int n_expert, n_expert_used, n_ff_exp; /* qwen3moe: experts, used per token, their width */
    const char *extra_key; /* tests of refusal: also write "<arch>.<extra_key>" = extra_value + 1 (u32) ... */
    int extra_value;
    const char *extra_tensor; /* ... or an F32 vector of n_embd elements of this name */
    const char *const *specials; /* with vocab: the last n_specials pieces are these control tokens */
    int n_specials;
    const char *chat_template; /* with vocab: tokenizer.chat_template (NULL = none) */
    int pooling;           /* > 0: <arch>.pooling_type = pooling - 1 (so 4 = last, 5 = rank) */
    int n_cls_out;         /* > 0: cls.output.weight of n_cls_out rows and classifier.output_labels */
    int n_types;           /* > 0: an encoder (encoder_fixture.h): token_types rows, and the keys
                            * attention.layer_norm_epsilon, attention.causal false, token_type_count */
    const char *vocab_from; /* instead of vocab: every tokenizer.* key of this GGUF, as it is (its token
                             * count must be n_vocab), then tokenizer.ggml.add_sep_token true */
} tiny_spec;

/* What a family computes, as llama.cpp does it (written independently of engine/arch.c). */
typedef struct tiny_family {
    bool neox, bias, qk_norm, post_norms, embd_scale, gelu, fused_qkv, fused_gate_up, moe;
    bool gpt_oss;          /* o bias, sinks, post_attention_norm as the FFN norm, expert biases, top-k
                              then softmax, the clamped SwiGLU */
    int swa_pattern;       /* layer l local unless l % pattern == pattern - 1 */
    bool swa_every;        /* phi3: every layer local when the file has a window */
    bool swa_optional;     /* gemma3, phi3: no window key (or 0) means no local layer */
    double swa_base;       /* local layers' RoPE base without rope.freq_base_swa (0: the global base) */
    bool swa_scaled;       /* local layers take the global layers' RoPE scaling (else unscaled) */
    int nope_step;         /* layer l without RoPE when (l + 1) % step == 0 */
    int wide_layers;       /* at this depth the query scale is 1/sqrt(n_embd / n_head) */
    bool bidir;            /* gemma-embedding: attention both ways, local layers see window / 2 either side */
} tiny_family;

static inline tiny_family tiny_family_of(const char *a) {
    tiny_family f = {0};
    f.neox = strcmp(a, "llama") && strcmp(a, "smollm3");
    f.bias = !strcmp(a, "qwen2");
    f.bidir = !strcmp(a, "gemma-embedding");
    f.qk_norm = !strcmp(a, "qwen3") || !strcmp(a, "gemma3") || !strcmp(a, "qwen3moe") || f.bidir;
    f.gpt_oss = !strcmp(a, "gpt-oss");
    f.moe = !strcmp(a, "qwen3moe") || f.gpt_oss;
    f.bias |= f.gpt_oss;
    f.post_norms = f.embd_scale = f.gelu = !strncmp(a, "gemma", 5);
    f.fused_qkv = f.fused_gate_up = !strcmp(a, "phi3");
    f.swa_pattern = !strcmp(a, "gemma2") || f.gpt_oss ? 2 : !strcmp(a, "gemma3") || f.bidir ? 6 : 0;
    f.swa_every = !strcmp(a, "phi3");
    f.swa_optional = !strcmp(a, "gemma3") || f.swa_every;
    f.swa_base = !strcmp(a, "gemma3") || f.bidir ? 10000.0 : 0;
    f.swa_scaled = !strcmp(a, "gemma2") || f.gpt_oss;
    f.nope_step = !strcmp(a, "smollm3") ? 4 : 0;
    f.wide_layers = !strcmp(a, "gemma2") ? 46 : !strcmp(a, "gemma3") ? 62 : 0;
    return f;
}

static inline tiny_spec tiny_default(const char *arch) {
    return (tiny_spec){.arch = arch, .n_vocab = 48, .n_embd = 32, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                       .n_ff = 40, .n_ctx = 320, .rope_dims = 8, .rope_base = 10000.0f, .rms_eps = 1e-5f,
                       .wtype = GGUF_TYPE_F32, .tied = false, .seed = 7};
}

static inline int tiny_head_dim(const tiny_spec *sp) { return sp->head_dim ? sp->head_dim : sp->n_embd / sp->n_head; }

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
    uint64_t ne[3];
    uint32_t type;
    float *vals; /* (n_elems) F32 values, converted when written */
    uint8_t *raw; /* when set: the tensor's bytes as written (raw_bytes; any type), vals unused */
    size_t raw_bytes;
} tiny_tensor;

#define TINY_MAX_TENSORS 1024

/* Appends tensor nm (d0, d1) of type ty with values offs + uniform(scale) to ts[*nt]. */
static inline void tiny_add(tiny_tensor *ts, int *nt, uint64_t *rng, const char *nm, uint64_t d0, uint64_t d1,
                            uint32_t ty, float scale, float offs) {
    tiny_tensor *t = &ts[(*nt)++];
    snprintf(t->name, sizeof(t->name), "%s", nm);
    t->ne[0] = d0, t->ne[1] = d1, t->ne[2] = 1;
    t->n_dims = d1 > 1 ? 2 : 1;
    t->type = ty;
    t->vals = malloc(sizeof(float) * d0 * d1);
    for (uint64_t i = 0; i < d0 * d1; i++) t->vals[i] = offs + tiny_uniform(rng, scale);
}

#define ADD(nm, d0, d1, ty, scale, offs) tiny_add(ts, nt, rng, nm, (uint64_t)(d0), (uint64_t)(d1), ty, scale, offs)
/* a 3-D expert tensor [d0, d1, n_expert], written as the 2-D (d0, d1 * n_expert) then reshaped */
#define ADD3(nm, d0, d1, ty, scale)                                                                  \
    do {                                                                                             \
        ADD(nm, d0, (uint64_t)(d1) * (uint64_t)sp->n_expert, ty, scale, 0.0f);                       \
        ts[*nt - 1].ne[1] = d1, ts[*nt - 1].ne[2] = (uint64_t)sp->n_expert, ts[*nt - 1].n_dims = 3; \
    } while (0)
#define NAME(s) (snprintf(nm, sizeof(nm), "blk.%d.%s", l, s), nm)

/* Layer l's feed-forward tensors, from its norm on: experts (with gpt-oss's biases) or a gated FFN. */
static inline void tiny_ffn_tensors(const tiny_spec *sp, const tiny_family *fam, int l, tiny_tensor *ts, int *nt,
                                    uint64_t *rng) {
    char nm[64];
    uint64_t E = (uint64_t)sp->n_embd, F = (uint64_t)sp->n_ff;
    float ws = 1.0f / sqrtf((float)sp->n_embd) * 1.7f;
    ADD(NAME(fam->gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    if (fam->moe) {
        uint64_t FE = (uint64_t)sp->n_ff_exp, NE = (uint64_t)sp->n_expert;
        ADD(NAME("ffn_gate_inp.weight"), E, NE, GGUF_TYPE_F32, 2.0f * ws, 0.0f);
        ADD3(NAME("ffn_gate_exps.weight"), E, FE, sp->wtype, ws);
        ADD3(NAME("ffn_up_exps.weight"), E, FE, sp->wtype, ws);
        ADD3(NAME("ffn_down_exps.weight"), FE, E, sp->wtype, 1.7f / sqrtf((float)FE));
        if (fam->gpt_oss) {
            ADD(NAME("ffn_gate_inp.bias"), NE, 1, GGUF_TYPE_F32, 0.5f, 0.0f);
            ADD(NAME("ffn_gate_exps.bias"), FE, NE, GGUF_TYPE_F32, 0.5f, 0.0f);
            ADD(NAME("ffn_up_exps.bias"), FE, NE, GGUF_TYPE_F32, 0.5f, 0.0f);
            ADD(NAME("ffn_down_exps.bias"), E, NE, GGUF_TYPE_F32, 0.5f, 0.0f);
        }
    } else if (fam->fused_gate_up) {
        ADD(NAME("ffn_up.weight"), E, 2 * F, sp->wtype, ws, 0.0f);
    } else {
        ADD(NAME("ffn_gate.weight"), E, F, sp->wtype, ws, 0.0f);
        ADD(NAME("ffn_up.weight"), E, F, sp->wtype, ws, 0.0f);
    }
    if (!fam->moe) ADD(NAME("ffn_down.weight"), F, E, sp->wtype, 1.7f / sqrtf((float)sp->n_ff), 0.0f);
    if (fam->post_norms) ADD(NAME("post_ffw_norm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
}

/* Layer l's tensors up to its FFN norm. */
static inline void tiny_attn_tensors(const tiny_spec *sp, const tiny_family *fam, int l, tiny_tensor *ts, int *nt,
                                     uint64_t *rng) {
    char nm[64];
    int hd = tiny_head_dim(sp), qd = hd * sp->n_head, kvd = hd * sp->n_head_kv;
    uint64_t E = (uint64_t)sp->n_embd;
    float ws = 1.0f / sqrtf((float)sp->n_embd) * 1.7f;
    ADD(NAME("attn_norm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    if (fam->fused_qkv) {
        ADD(NAME("attn_qkv.weight"), E, (uint64_t)(qd + 2 * kvd), sp->wtype, ws, 0.0f);
    } else {
        ADD(NAME("attn_q.weight"), E, (uint64_t)qd, sp->wtype, ws, 0.0f);
        ADD(NAME("attn_k.weight"), E, (uint64_t)kvd, sp->wtype, ws, 0.0f);
        ADD(NAME("attn_v.weight"), E, (uint64_t)kvd, sp->wtype, ws, 0.0f);
    }
    if (fam->bias) {
        ADD(NAME("attn_q.bias"), (uint64_t)qd, 1, GGUF_TYPE_F32, 0.5f, 0.0f);
        ADD(NAME("attn_k.bias"), (uint64_t)kvd, 1, GGUF_TYPE_F32, 0.5f, 0.0f);
        ADD(NAME("attn_v.bias"), (uint64_t)kvd, 1, GGUF_TYPE_F32, 0.5f, 0.0f);
    }
    if (fam->qk_norm) {
        ADD(NAME("attn_q_norm.weight"), (uint64_t)hd, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        ADD(NAME("attn_k_norm.weight"), (uint64_t)hd, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    }
    ADD(NAME("attn_output.weight"), (uint64_t)qd, E, sp->wtype, 1.0f / sqrtf((float)qd) * 1.7f, 0.0f);
    if (fam->gpt_oss) {
        ADD(NAME("attn_output.bias"), E, 1, GGUF_TYPE_F32, 0.5f, 0.0f);
        ADD(NAME("attn_sinks.weight"), (uint64_t)sp->n_head, 1, GGUF_TYPE_F32, 2.0f, 0.0f);
    }
    if (fam->post_norms) ADD(NAME("post_attention_norm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
}
#undef NAME

/* The tensors of sp's model, with their random values (the same for the same spec). */
static inline int tiny_tensors(const tiny_spec *sp, tiny_tensor *ts) {
    tiny_family fam = tiny_family_of(sp->arch);
    int n = 0, *nt = &n;
    uint64_t seed = sp->seed, *rng = &seed;
    uint64_t E = (uint64_t)sp->n_embd;
    ADD("token_embd.weight", E, (uint64_t)sp->n_vocab, sp->wtype, fam.embd_scale ? 1.0f / sqrtf((float)E) : 1.0f, 0.0f);
    ADD("output_norm.weight", E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    if (!sp->tied) ADD("output.weight", E, (uint64_t)sp->n_vocab, sp->wtype, 0.5f, 0.0f);
    if (sp->rope_freqs) ADD("rope_freqs.weight", (uint64_t)sp->rope_dims / 2, 1, GGUF_TYPE_F32, 3.0f, 4.0f);
    if (sp->longrope_orig_ctx > 0) {
        ADD("rope_factors_short.weight", (uint64_t)sp->rope_dims / 2, 1, GGUF_TYPE_F32, 0.5f, 1.5f);
        ADD("rope_factors_long.weight", (uint64_t)sp->rope_dims / 2, 1, GGUF_TYPE_F32, 4.0f, 8.0f);
    }
    if (sp->extra_tensor) ADD(sp->extra_tensor, E, 1, GGUF_TYPE_F32, 1.0f, 0.0f);
    if (sp->n_cls_out > 0) ADD("cls.output.weight", E, (uint64_t)sp->n_cls_out, sp->wtype, 0.5f, 0.0f);
    for (int l = 0; l < sp->n_layer; l++) {
        tiny_attn_tensors(sp, &fam, l, ts, nt, rng);
        tiny_ffn_tensors(sp, &fam, l, ts, nt, rng);
    }
    return n;
}
#undef ADD3
#undef ADD

static inline uint64_t tiny_vocab_keys(gbuf *b, const tiny_spec *sp);

/* The "<arch>." keys and the vocabulary of sp; returns how many keys were written. */
static inline uint64_t tiny_keys(gbuf *b, const tiny_spec *sp) {
    uint64_t n = 0;
    char key[96];
#define K(s) (n++, snprintf(key, sizeof(key), "%s.%s", sp->arch, s), key)
    n += 2;
    gb_kv_str(b, "general.architecture", sp->arch);
    gb_kv_str(b, "general.name", "tiny");
    gb_kv_u32(b, K("context_length"), (uint32_t)sp->n_ctx);
    gb_kv_u32(b, K("embedding_length"), (uint32_t)sp->n_embd);
    gb_kv_u32(b, K("block_count"), (uint32_t)sp->n_layer);
    gb_kv_u32(b, K("feed_forward_length"), (uint32_t)sp->n_ff);
    gb_kv_u32(b, K("attention.head_count"), (uint32_t)sp->n_head);
    gb_kv_u32(b, K("attention.head_count_kv"), (uint32_t)sp->n_head_kv);
    gb_kv_f32(b, K("attention.layer_norm_rms_epsilon"), sp->rms_eps);
    gb_kv_f32(b, K("rope.freq_base"), sp->rope_base);
    gb_kv_u32(b, K("rope.dimension_count"), (uint32_t)sp->rope_dims);
    if (sp->head_dim) {
        gb_kv_u32(b, K("attention.key_length"), (uint32_t)sp->head_dim);
        gb_kv_u32(b, K("attention.value_length"), (uint32_t)sp->head_dim);
    }
    if (sp->window) gb_kv_u32(b, K("attention.sliding_window"), sp->window > 0 ? (uint32_t)sp->window : 0);
    if (sp->rope_base_swa > 0) gb_kv_f32(b, K("rope.freq_base_swa"), sp->rope_base_swa);
    if (sp->attn_softcap > 0) gb_kv_f32(b, K("attn_logit_softcapping"), sp->attn_softcap);
    if (sp->final_softcap > 0) gb_kv_f32(b, K("final_logit_softcapping"), sp->final_softcap);
    if (sp->rope_linear > 0 || sp->rope_yarn > 0) {
        gb_kv_str(b, K("rope.scaling.type"), sp->rope_yarn > 0 ? "yarn" : "linear");
        gb_kv_f32(b, K("rope.scaling.factor"), sp->rope_yarn > 0 ? sp->rope_yarn : sp->rope_linear);
    }
    if (sp->rope_yarn > 0) gb_kv_u32(b, K("rope.scaling.original_context_length"), (uint32_t)sp->yarn_orig_ctx);
    if (sp->longrope_orig_ctx > 0)
        gb_kv_u32(b, K("rope.scaling.original_context_length"), (uint32_t)sp->longrope_orig_ctx);
    if (sp->longrope_orig_ctx > 0 && sp->longrope_attn > 0) gb_kv_f32(b, K("rope.scaling.attn_factor"), sp->longrope_attn);
    if (sp->extra_key) gb_kv_u32(b, K(sp->extra_key), (uint32_t)sp->extra_value + 1);
    if (sp->pooling > 0) gb_kv_u32(b, K("pooling_type"), (uint32_t)sp->pooling - 1);
    if (sp->n_types > 0) {
        gb_kv_f32(b, K("attention.layer_norm_epsilon"), sp->rms_eps);
        gb_kv_bool(b, K("attention.causal"), false);
        n++, gb_kv_u32(b, "tokenizer.ggml.token_type_count", (uint32_t)sp->n_types);
    }
    if (sp->n_cls_out > 0) {
        static const char *const labels[] = {"yes", "no", "c", "d", "e", "f", "g", "h"};
        gb_kv_arr_str(b, K("classifier.output_labels"), labels, (uint64_t)sp->n_cls_out);
    }
    if (sp->n_expert) {
        gb_kv_u32(b, K("expert_count"), (uint32_t)sp->n_expert);
        gb_kv_u32(b, K("expert_used_count"), (uint32_t)sp->n_expert_used);
        gb_kv_u32(b, K("expert_feed_forward_length"), (uint32_t)sp->n_ff_exp);
    }
#undef K
    return n + tiny_vocab_keys(b, sp);
}

/* The bytes of the GGUF value of type ty at p (end: the data's end); 0 when it runs past end. */
static inline size_t tiny_value_size(const uint8_t *p, const uint8_t *end, uint32_t ty) {
    static const size_t fixed[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    uint64_t n;
    if (ty == 8) {
        if (end - p < 8) return 0;
        memcpy(&n, p, 8);
        return n <= (uint64_t)(end - p) - 8 ? 8 + (size_t)n : 0;
    }
    if (ty != 9) return ty < 13 && (size_t)(end - p) >= fixed[ty] ? fixed[ty] : 0;
    uint32_t et;
    if (end - p < 12) return 0;
    memcpy(&et, p, 4), memcpy(&n, p + 4, 8);
    size_t at = 12;
    for (uint64_t i = 0; i < n; i++) {
        size_t k = et == 9 ? 0 : tiny_value_size(p + at, end, et);
        if (!k) return 0;
        at += k;
    }
    return at;
}

/* sp->vocab_from's tokenizer.* keys (but token_type_count, written by tiny_keys) copied into b, and
 * add_sep_token; returns how many. A file that cannot be read or does not fit aborts: a fixture. */
static inline uint64_t tiny_copy_vocab_keys(gbuf *b, const tiny_spec *sp) {
    FILE *f = fopen(sp->vocab_from, "rb");
    long size = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
    uint8_t *d = size > 24 ? malloc((size_t)size) : NULL;
    if (!d || fseek(f, 0, SEEK_SET) || fread(d, 1, (size_t)size, f) != (size_t)size || memcmp(d, "GGUF", 4)) {
        fprintf(stderr, "engine_fixture: cannot read the vocabulary of %s\n", sp->vocab_from);
        abort();
    }
    fclose(f);
    const uint8_t *p = d + 24, *end = d + size;
    uint64_t n_kv, n = 0, klen, n_tok = 0;
    memcpy(&n_kv, d + 16, 8);
    for (uint64_t i = 0; i < n_kv; i++) {
        size_t ks = tiny_value_size(p, end, 8), vs = 0;
        uint32_t ty = 0;
        if (ks && (size_t)(end - p) >= ks + 4) memcpy(&ty, p + ks, 4), vs = tiny_value_size(p + ks + 4, end, ty);
        if (!vs) {
            fprintf(stderr, "engine_fixture: %s: key %llu is malformed\n", sp->vocab_from, (unsigned long long)i);
            abort();
        }
        memcpy(&klen, p, 8);
        char key[96] = {0};
        memcpy(key, p + 8, klen < sizeof(key) - 1 ? klen : sizeof(key) - 1);
        if (!strcmp(key, "tokenizer.ggml.tokens")) memcpy(&n_tok, p + ks + 8, 8);
        if (!strncmp(key, "tokenizer.", 10) && strcmp(key, "tokenizer.ggml.token_type_count") &&
            strcmp(key, "tokenizer.ggml.add_sep_token"))
            gb_bytes(b, p, ks + 4 + vs), n++;
        p += ks + 4 + vs;
    }
    free(d);
    if (n_tok != (uint64_t)sp->n_vocab) {
        fprintf(stderr, "engine_fixture: %s has %llu tokens, not %d\n", sp->vocab_from, (unsigned long long)n_tok,
                sp->n_vocab);
        abort();
    }
    gb_kv_bool(b, "tokenizer.ggml.add_sep_token", true);
    return n + 1;
}

/* sp's vocabulary keys, when sp->vocab (or sp->vocab_from); returns how many were written. */
static inline uint64_t tiny_vocab_keys(gbuf *b, const tiny_spec *sp) {
    uint64_t n = 0;
    if (sp->vocab_from) return tiny_copy_vocab_keys(b, sp);
    if (sp->vocab) {
        n += 6;
        /* <unk>, <s>, </s>, the 256 byte tokens, then plain pieces "t259", "t260", ... */
        gb_kv_str(b, "tokenizer.ggml.model", "llama");
        gb_arr_head(b, "tokenizer.ggml.tokens", GGUF_VT_STRING, (uint64_t)(sp->n_vocab + sp->vocab_extra));
        for (int i = 0; i < sp->n_vocab + sp->vocab_extra; i++) {
            char piece[32];
            if (i < 3) snprintf(piece, sizeof(piece), "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            else if (i < 259) snprintf(piece, sizeof(piece), "<0x%02X>", i - 3);
            else if (i >= sp->n_vocab + sp->vocab_extra - sp->n_specials)
                snprintf(piece, sizeof(piece), "%s", sp->specials[i - (sp->n_vocab + sp->vocab_extra - sp->n_specials)]);
            else snprintf(piece, sizeof(piece), "t%d", i);
            gb_str(b, piece);
        }
        gb_arr_head(b, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, (uint64_t)(sp->n_vocab + sp->vocab_extra));
        for (int i = 0; i < sp->n_vocab + sp->vocab_extra; i++) {
            float sc = i < 259 ? 0.0f : -(float)i;
            gb_bytes(b, &sc, 4);
        }
        gb_arr_head(b, "tokenizer.ggml.token_type", GGUF_VT_INT32, (uint64_t)(sp->n_vocab + sp->vocab_extra));
        for (int i = 0; i < sp->n_vocab + sp->vocab_extra; i++) {
            bool special = i >= sp->n_vocab + sp->vocab_extra - sp->n_specials;
            int32_t ty = i == 0 ? 2 : i < 3 || special ? 3 : i < 259 ? 6 : 1; /* unknown, control, byte, normal */
            gb_bytes(b, &ty, 4);
        }
        gb_kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)(sp->bos_id ? sp->bos_id : 1));
        gb_kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
        if (sp->chat_template) n++, gb_kv_str(b, "tokenizer.chat_template", sp->chat_template);
    }
    return n;
}

/* The bytes tensor t takes in the file. */
static inline uint64_t tiny_bytes(const tiny_tensor *t) {
    return t->raw ? t->raw_bytes : t->ne[0] * t->ne[1] * t->ne[2] * (t->type == GGUF_TYPE_F32 ? 4 : 2);
}

/* Writes the model of spec sp with tensors ts[0..nt) to path (freeing their values and bytes).
 * Returns 0 on success. */
static inline int tiny_write_tensors(const char *path, const tiny_spec *sp, tiny_tensor *ts, int nt) {
    gbuf b = {0};
    gb_bytes(&b, "GGUF", 4);
    gb_u32(&b, 3);
    gb_u64(&b, (uint64_t)nt);
    gb_u64(&b, 0); /* the key count, patched below */
    uint64_t n_kv = tiny_keys(&b, sp);
    memcpy(b.p + 16, &n_kv, 8);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        gb_str(&b, ts[i].name);
        gb_u32(&b, (uint32_t)ts[i].n_dims);
        for (int d = 0; d < ts[i].n_dims; d++) gb_u64(&b, ts[i].ne[d]);
        gb_u32(&b, ts[i].type);
        gb_u64(&b, off);
        off += (tiny_bytes(&ts[i]) + 31) / 32 * 32;
    }
    static const uint8_t zeros[32];
    gb_bytes(&b, zeros, (32 - b.n % 32) % 32);
    for (int i = 0; i < nt; i++) {
        uint64_t n = ts[i].ne[0] * ts[i].ne[1] * ts[i].ne[2], bytes = tiny_bytes(&ts[i]);
        if (ts[i].raw) {
            gb_bytes(&b, ts[i].raw, bytes);
        } else if (ts[i].type == GGUF_TYPE_F32) {
            gb_bytes(&b, ts[i].vals, bytes);
        } else {
            uint16_t *h = malloc(bytes);
            for (uint64_t j = 0; j < n; j++) h[j] = tiny_f32_to_f16(ts[i].vals[j]);
            gb_bytes(&b, h, bytes);
            free(h);
        }
        gb_bytes(&b, zeros, (32 - bytes % 32) % 32);
        free(ts[i].vals);
        free(ts[i].raw);
    }
    FILE *f = fopen(path, "wb");
    int rc = !f || fwrite(b.p, 1, b.n, f) != b.n;
    if (f) fclose(f);
    free(b.p);
    return rc;
}

/* Writes the model described by spec to path. Returns 0 on success. */
static inline int tiny_write(const char *path, const tiny_spec *sp) {
    tiny_tensor *ts = calloc(TINY_MAX_TENSORS, sizeof(*ts));
    int rc = tiny_write_tensors(path, sp, ts, tiny_tensors(sp, ts));
    free(ts);
    return rc;
}

/* A fresh temp file name (caller unlinks). */
static inline void tiny_tmpname(char *buf, size_t n, const char *tag) {
    static int counter;
    snprintf(buf, n, "/tmp/attnd-test-%d-%d-%s.gguf", (int)getpid(), counter++, tag);
}

// ---- independent float64 reference -----------------------------------------------------------

/* The value of F16 bits h, exactly: normal numbers by moving the fields into a float's (fast:
 * the real-shape models read hundreds of millions of weights), the rest written out. */
static inline double ref_f16(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1f, man = h & 0x3ffu, sign = (uint32_t)(h & 0x8000) << 16;
    if (e == 0) return (h & 0x8000 ? -1.0 : 1.0) * ldexp(man, -24);
    if (e == 31) return man ? NAN : (h & 0x8000 ? -INFINITY : INFINITY);
    uint32_t bits = sign | ((e + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline double ref_elem(const gguf_tensor *t, uint64_t i) {
    if (t->type == GGUF_TYPE_F32) return ((const float *)t->data)[i];
    return ref_f16(((const uint16_t *)t->data)[i]);
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

/* Rotation angles per position of pair i: pos * ref_inv_freq(...). Global layers: the file's base,
 * rope.scaling (linear: / factor; YaRN: NTK-by-parts between interpolation and extrapolation)
 * and rope_freqs factors; a family's local layers: their own base, unscaled. *mscale: YaRN's
 * factor on cos and sin. */
static inline double ref_inv_freq(const tiny_spec *sp, const gguf_file *f, bool local, int i, double *mscale) {
    tiny_family fam = tiny_family_of(sp->arch);
    int rd = sp->rope_dims;
    *mscale = 1;
    double local_base = sp->rope_base_swa > 0 ? sp->rope_base_swa : fam.swa_base;
    if (local && local_base > 0 && !fam.swa_scaled) return pow(local_base, -2.0 * i / rd);
    double base = local && local_base > 0 ? local_base : sp->rope_base, fr = pow(base, -2.0 * i / rd);
    if (sp->rope_linear > 0) fr /= sp->rope_linear;
    if (sp->rope_yarn > 0) {
        double s = 1 / sp->rope_yarn, n0 = sp->yarn_orig_ctx;
        double lo = floor(rd * log(n0 / (32 * 2 * M_PI)) / (2 * log(base)));
        double hi = ceil(rd * log(n0 / (1 * 2 * M_PI)) / (2 * log(base)));
        lo = lo < 0 ? 0 : lo, hi = hi > rd - 1 ? rd - 1 : hi;
        double y = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
        double ramp = 1 - (y < 0 ? 0 : y > 1 ? 1 : y); /* 1: extrapolate (high frequencies) */
        fr *= s * (1 - ramp) + ramp;
        *mscale = 1 + 0.1 * log(sp->rope_yarn);
    }
    const gguf_tensor *ff = gguf_find_tensor(f, "rope_freqs.weight");
    if (ff) fr /= ref_elem(ff, (uint64_t)i);
    if (sp->longrope_orig_ctx > 0) { /* LongRoPE: long factors when the context is beyond the original */
        ff = gguf_find_tensor(f, sp->n_ctx > sp->longrope_orig_ctx ? "rope_factors_long.weight"
                                                                   : "rope_factors_short.weight");
        fr /= ref_elem(ff, (uint64_t)i);
        if (sp->longrope_attn > 0) *mscale = sp->longrope_attn;
    }
    return fr;
}

/* The reference's working state: dimensions and (n_tok, .) activations in double. */
typedef struct ref_run {
    const tiny_spec *sp;
    tiny_family fam;
    gguf_file *f;
    int n_tok, E, H, HK, hd, QD, KVD, F, V;
    double *x, *q, *k, *v, *xn, *att, *tmp, *g, *u, *sc, *big;
    int *route;        /* (n_layer, n_tok, n_expert_used) or NULL: ref_moe's experts per position */
    double *route_w;   /* (n_layer, n_tok, n_expert_used) their weights, with route */
} ref_run;

/* Whether layer l is local (a sliding window; the local RoPE table where the family has one): by
 * the family's pattern, or every layer (phi3); none when an optional window is absent or 0. */
static inline bool ref_local(const ref_run *r, int l) {
    const tiny_family *fam = &r->fam;
    if (fam->swa_optional && r->sp->window <= 0) return false;
    return fam->swa_every || (fam->swa_pattern && l % fam->swa_pattern != fam->swa_pattern - 1);
}

/* q, k, v of position t of layer l: projections (+ biases), QK-norm, RoPE (unless NoPE). */
static inline void ref_qkv(ref_run *r, int l, int t) {
    const tiny_spec *sp = r->sp;
    int E = r->E, QD = r->QD, KVD = r->KVD, hd = r->hd;
    double *q = r->q + (size_t)t * QD, *k = r->k + (size_t)t * KVD, *v = r->v + (size_t)t * KVD;
    ref_rmsnorm(r->xn, r->x + (size_t)t * E, ref_tl(r->f, l, "attn_norm.weight"), E, sp->rms_eps);
    if (r->fam.fused_qkv) {
        ref_matvec(r->big, ref_tl(r->f, l, "attn_qkv.weight"), r->xn);
        memcpy(q, r->big, sizeof(double) * QD);
        memcpy(k, r->big + QD, sizeof(double) * KVD);
        memcpy(v, r->big + QD + KVD, sizeof(double) * KVD);
    } else {
        ref_matvec(q, ref_tl(r->f, l, "attn_q.weight"), r->xn);
        ref_matvec(k, ref_tl(r->f, l, "attn_k.weight"), r->xn);
        ref_matvec(v, ref_tl(r->f, l, "attn_v.weight"), r->xn);
    }
    if (r->fam.bias) {
        for (int i = 0; i < QD; i++) q[i] += ref_elem(ref_tl(r->f, l, "attn_q.bias"), i);
        for (int i = 0; i < KVD; i++) k[i] += ref_elem(ref_tl(r->f, l, "attn_k.bias"), i);
        for (int i = 0; i < KVD; i++) v[i] += ref_elem(ref_tl(r->f, l, "attn_v.bias"), i);
    }
    if (r->fam.qk_norm) {
        for (int h = 0; h < r->H; h++)
            ref_rmsnorm(q + h * hd, q + h * hd, ref_tl(r->f, l, "attn_q_norm.weight"), hd, sp->rms_eps);
        for (int h = 0; h < r->HK; h++)
            ref_rmsnorm(k + h * hd, k + h * hd, ref_tl(r->f, l, "attn_k_norm.weight"), hd, sp->rms_eps);
    }
    if (r->fam.nope_step && (l + 1) % r->fam.nope_step == 0) return;
    bool local = ref_local(r, l);
    int rd = sp->rope_dims;
    for (int which = 0; which < 2; which++) {
        int nh = which ? r->HK : r->H;
        double *base = which ? k : q;
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < rd / 2; i++) {
                double ms, th = t * ref_inv_freq(sp, r->f, local, i, &ms);
                int a = r->fam.neox ? i : 2 * i, bb = r->fam.neox ? i + rd / 2 : 2 * i + 1;
                double *vv = base + (size_t)h * hd, x0 = vv[a], x1 = vv[bb];
                vv[a] = (x0 * cos(th) - x1 * sin(th)) * ms;
                vv[bb] = (x0 * sin(th) + x1 * cos(th)) * ms;
            }
    }
}

/* Position t's attention output of layer l into r->att: softmax over 0..t (within the window on
 * a local layer) of the scaled (and soft-capped) scores, grouped KV heads. */
static inline void ref_attention(ref_run *r, int l, int t, double *attn) {
    const tiny_spec *sp = r->sp;
    int hd = r->hd, H = r->H, HK = r->HK, n_tok = r->n_tok;
    bool local = ref_local(r, l);
    int j0 = local && sp->window > 0 && t - sp->window + 1 > 0 ? t - sp->window + 1 : 0, j1 = t;
    if (r->fam.bidir) /* both ways: every position, or those within window / 2 on either side */
        j0 = local && t - sp->window / 2 > 0 ? t - sp->window / 2 : 0,
        j1 = local && t + sp->window / 2 < n_tok - 1 ? t + sp->window / 2 : n_tok - 1;
    bool wide = r->fam.wide_layers && sp->n_layer == r->fam.wide_layers;
    double scale = 1 / sqrt(wide ? (double)r->E / H : (double)hd);
    for (int h = 0; h < H; h++) {
        int kh = h / (H / HK);
        double mx = -INFINITY, sum = 0;
        for (int j = j0; j <= j1; j++) {
            double s = 0;
            for (int i = 0; i < hd; i++) s += r->q[(size_t)t * r->QD + h * hd + i] * r->k[(size_t)j * r->KVD + kh * hd + i];
            s *= scale;
            if (sp->attn_softcap > 0) s = sp->attn_softcap * tanh(s / sp->attn_softcap);
            r->sc[j] = s;
            mx = s > mx ? s : mx;
        }
        const gguf_tensor *sk = r->fam.gpt_oss ? ref_tl(r->f, l, "attn_sinks.weight") : NULL;
        double sink = sk ? ref_elem(sk, (uint64_t)h) : -INFINITY; /* one more logit, no value */
        if (sink > mx) mx = sink;
        if (sk) sum = exp(sink - mx);
        for (int j = j0; j <= j1; j++) sum += r->sc[j] = exp(r->sc[j] - mx);
        if (attn) {
            double *row = attn + (((size_t)l * H + h) * n_tok + t) * n_tok;
            for (int j = 0; j < n_tok; j++) row[j] = j >= j0 && j <= j1 ? r->sc[j] / sum : 0;
        }
        for (int i = 0; i < hd; i++) {
            double a = 0;
            for (int j = j0; j <= j1; j++) a += r->sc[j] / sum * r->v[(size_t)j * r->KVD + kh * hd + i];
            r->att[h * hd + i] = a;
        }
    }
}

/* rows [r0, r0 + n) of a matrix tensor (a 3-D expert tensor read as 2-D) times x */
static inline void ref_matvec_rows(double *out, const gguf_tensor *w, uint64_t r0, uint64_t n, const double *x) {
    uint64_t cols = w->ne[0];
    for (uint64_t r = 0; r < n; r++) {
        double s = 0;
        for (uint64_t c = 0; c < cols; c++) s += ref_elem(w, (r0 + r) * cols + c) * x[c];
        out[r] = s;
    }
}

/* x += the MoE FFN of r->xn: softmax of the router over every expert, the n_expert_used most
 * probable, their probabilities renormalised, each one's SwiGLU FFN. */
static inline void ref_moe(ref_run *r, int l, int t, double *x) {
    const tiny_spec *sp = r->sp;
    int NE = sp->n_expert, K = sp->n_expert_used, FE = sp->n_ff_exp, E = r->E;
    double *pr = malloc(sizeof(double) * NE), mx = -INFINITY, z = 0, wsum = 0;
    int *sel = malloc(sizeof(int) * K);
    bool oss = r->fam.gpt_oss;
    ref_matvec(pr, ref_tl(r->f, l, "ffn_gate_inp.weight"), r->xn);
    for (int i = 0; oss && i < NE; i++) pr[i] += ref_elem(ref_tl(r->f, l, "ffn_gate_inp.bias"), (uint64_t)i);
    for (int i = 0; i < NE; i++) mx = pr[i] > mx ? pr[i] : mx;
    for (int i = 0; i < NE; i++) z += pr[i] = exp(pr[i] - mx); /* the order is that of the logits either way */
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < NE; i++) {
            bool used = false;
            for (int j = 0; j < k; j++) used |= sel[j] == i;
            if (!used && (best < 0 || pr[i] > pr[best])) best = i;
        }
        sel[k] = best;
        wsum += pr[best] / z;
    }
    /* the top k's weights: renormalised probabilities, or (gpt-oss) a softmax over their logits,
     * which is the same ratio of exponentials */
    for (int k = 0; k < K; k++) {
        int ex = sel[k];
        ref_matvec_rows(r->g, ref_tl(r->f, l, "ffn_gate_exps.weight"), (uint64_t)ex * FE, FE, r->xn);
        ref_matvec_rows(r->u, ref_tl(r->f, l, "ffn_up_exps.weight"), (uint64_t)ex * FE, FE, r->xn);
        for (int i = 0; i < FE; i++) {
            if (!oss) {
                r->g[i] = r->g[i] / (1 + exp(-r->g[i])) * r->u[i];
                continue;
            }
            double gx = r->g[i] + ref_elem(ref_tl(r->f, l, "ffn_gate_exps.bias"), (uint64_t)ex * FE + i);
            double ux = r->u[i] + ref_elem(ref_tl(r->f, l, "ffn_up_exps.bias"), (uint64_t)ex * FE + i);
            gx = gx < 7 ? gx : 7, ux = ux < -7 ? -7 : ux > 7 ? 7 : ux;
            r->g[i] = gx / (1 + exp(-1.702 * gx)) * (ux + 1);
        }
        ref_matvec_rows(r->tmp, ref_tl(r->f, l, "ffn_down_exps.weight"), (uint64_t)ex * E, E, r->g);
        for (int i = 0; oss && i < E; i++) r->tmp[i] += ref_elem(ref_tl(r->f, l, "ffn_down_exps.bias"), (uint64_t)ex * E + i);
        for (int i = 0; i < E; i++) x[i] += pr[ex] / z / wsum * r->tmp[i];
        if (r->route) {
            size_t at = ((size_t)l * r->n_tok + t) * K + k;
            r->route[at] = ex, r->route_w[at] = pr[ex] / z / wsum;
        }
    }
    free(pr), free(sel);
}

/* x[t] += post(ffn(rmsnorm(x[t]))) of layer l: gated (SwiGLU or GeGLU, fused or not). */
static inline void ref_ffn(ref_run *r, int l, int t) {
    int E = r->E, F = r->F;
    double *x = r->x + (size_t)t * E;
    ref_rmsnorm(r->xn, x, ref_tl(r->f, l, r->fam.gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), E,
                r->sp->rms_eps);
    if (r->fam.moe) {
        ref_moe(r, l, t, x);
        return;
    }
    if (r->fam.fused_gate_up) {
        ref_matvec(r->big, ref_tl(r->f, l, "ffn_up.weight"), r->xn);
        memcpy(r->g, r->big, sizeof(double) * F);
        memcpy(r->u, r->big + F, sizeof(double) * F);
    } else {
        ref_matvec(r->g, ref_tl(r->f, l, "ffn_gate.weight"), r->xn);
        ref_matvec(r->u, ref_tl(r->f, l, "ffn_up.weight"), r->xn);
    }
    for (int i = 0; i < F; i++) {
        double z = r->g[i];
        double act = r->fam.gelu ? 0.5 * z * (1 + tanh(sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)))
                                 : z / (1 + exp(-z));
        r->g[i] = act * r->u[i];
    }
    ref_matvec(r->tmp, ref_tl(r->f, l, "ffn_down.weight"), r->g);
    if (r->fam.post_norms) ref_rmsnorm(r->tmp, r->tmp, ref_tl(r->f, l, "post_ffw_norm.weight"), E, r->sp->rms_eps);
    for (int i = 0; i < E; i++) x[i] += r->tmp[i];
}

/*
 * Logits (n_tok, n_vocab) of every position of tokens, computed from scratch in double with the
 * math written out naively: embeddings (x sqrt(n_embd) for Gemma), RMSNorm, Q/K/V (+bias,
 * QK-norm), RoPE (adjacent pairs or halves, scaled, NoPE layers skipped), causal softmax
 * attention with grouped KV heads (sliding windows, soft-capping), post-norms, SwiGLU/GeGLU,
 * final norm, head (soft-capped). attn (may be NULL) receives the softmax weights (n_layer,
 * n_head, n_tok, n_tok): row t holds position t's weights over positions 0..t, zeros elsewhere;
 * ex (may be NULL) says what else to record (ref_extra).
 */
/* What ref_forward_ex records besides the logits (each may be NULL). */
typedef struct ref_extra {
    double *attn;  /* (n_layer, n_head, n_tok, n_tok) softmax weights, as ref_forward_attn */
    double *vnorm; /* (n_layer, n_head, n_tok) ‖W_O^h v_j‖: head h's value at position j through
                      its columns of attn_output */
    double *lens;  /* (n_layer, n_tok, n_vocab) logits of the residual stream after each layer,
                      through the final norm and the output head (soft-capped) */
    const double *head_scale; /* (n_layer, n_head) factor on each head's output before W_O
                                 (0 = the head ablated); NULL = 1 */
    const int *head_mean;     /* (n_layer, n_head) 1: the scale is applied around the head's
                                 causal mean output over positions 0..t (mean ablation),
                                 base + scale (o - base); NULL or 0 = around zero */
    int scale_from;           /* positions before this one are left unscaled (their outputs still
                                 count in the means) */
    int *experts;             /* (n_layer, n_tok, n_expert_used) MoE: the experts each position was
                                 routed to, most probable first */
    double *expert_w;         /* (n_layer, n_tok, n_expert_used) their weights (with experts) */
} ref_extra;

/* vnorm of every head of layer l at every position (r->v holds the layer's values). */
static inline void ref_vnorm(ref_run *r, int l, double *vnorm) {
    const gguf_tensor *wo = ref_tl(r->f, l, "attn_output.weight");
    int hd = r->hd, H = r->H, G = r->H / r->HK;
    for (int h = 0; h < H; h++)
        for (int j = 0; j < r->n_tok; j++) {
            double sq = 0;
            for (int e = 0; e < r->E; e++) {
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += ref_elem(wo, (uint64_t)e * r->QD + (uint64_t)h * hd + i) * r->v[(size_t)j * r->KVD + (h / G) * hd + i];
                sq += d * d;
            }
            vnorm[((size_t)l * H + h) * r->n_tok + j] = sqrt(sq);
        }
}

/* lg = head(final_norm(x)), soft-capped: the logits of one residual-stream row. */
static inline void ref_head(ref_run *r, const double *x, double *lg) {
    const gguf_tensor *out = ref_t(r->f, "output.weight");
    if (!out) out = ref_t(r->f, "token_embd.weight");
    ref_rmsnorm(r->xn, x, ref_t(r->f, "output_norm.weight"), r->E, r->sp->rms_eps);
    ref_matvec(lg, out, r->xn);
    if (r->sp->final_softcap > 0)
        for (int i = 0; i < r->V; i++) lg[i] = r->sp->final_softcap * tanh(lg[i] / r->sp->final_softcap);
}

/* Head scaling (ablation) of position t's attention output r->att at layer l: around 0, or
 * around the head's mean output over positions 0..t (msum: running sums, (n_layer, QD)). */
static inline void ref_scale_heads(ref_run *r, int l, int t, const ref_extra *ex, double *msum) {
    for (int h = 0; h < r->H; h++) {
        double sc = ex->head_scale[l * r->H + h], *sum = msum + (size_t)l * r->QD + (size_t)h * r->hd;
        bool mean = ex->head_mean && ex->head_mean[l * r->H + h];
        for (int i = 0; i < r->hd; i++) {
            double *o = &r->att[h * r->hd + i];
            sum[i] += *o;
            double base = mean ? sum[i] / (t + 1) : 0;
            if (t >= ex->scale_from) *o = base + sc * (*o - base);
        }
    }
}

static inline void ref_forward_ex(const tiny_spec *sp, const char *path, const int32_t *tokens, int n_tok,
                                  double *logits, const ref_extra *ex) {
    double *attn = ex ? ex->attn : NULL;
    ref_run r = {.sp = sp, .fam = tiny_family_of(sp->arch), .n_tok = n_tok, .E = sp->n_embd, .H = sp->n_head,
                 .HK = sp->n_head_kv, .hd = tiny_head_dim(sp), .F = sp->n_ff, .V = sp->n_vocab};
    if (gguf_open(&r.f, path, NULL) != ATTND_OK) abort();
    r.QD = r.H * r.hd, r.KVD = r.HK * r.hd;
    int E = r.E, big = r.QD + 2 * r.KVD > 2 * r.F ? r.QD + 2 * r.KVD : 2 * r.F;
    r.x = calloc((size_t)n_tok * E, sizeof(double));
    r.q = malloc(sizeof(double) * (size_t)n_tok * r.QD);
    r.k = malloc(sizeof(double) * (size_t)n_tok * r.KVD), r.v = malloc(sizeof(double) * (size_t)n_tok * r.KVD);
    r.xn = malloc(sizeof(double) * E), r.att = malloc(sizeof(double) * r.QD), r.tmp = malloc(sizeof(double) * E);
    size_t gw = (size_t)(r.F > sp->n_ff_exp ? r.F : sp->n_ff_exp);
    r.g = malloc(sizeof(double) * gw), r.u = malloc(sizeof(double) * gw), r.sc = malloc(sizeof(double) * n_tok);
    r.big = malloc(sizeof(double) * (size_t)big);
    r.route = ex ? ex->experts : NULL, r.route_w = ex ? ex->expert_w : NULL;
    double *msum = calloc((size_t)sp->n_layer * r.QD, sizeof(double)); /* (n_layer, n_head, hd) running sums */
    const gguf_tensor *emb = ref_t(r.f, "token_embd.weight");
    double es = r.fam.embd_scale ? sqrt((double)E) : 1;
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < E; i++) r.x[(size_t)t * E + i] = ref_elem(emb, (uint64_t)tokens[t] * E + i) * es;
    for (int l = 0; l < sp->n_layer; l++) {
        for (int t = 0; t < n_tok; t++) ref_qkv(&r, l, t);
        if (ex && ex->vnorm) ref_vnorm(&r, l, ex->vnorm);
        for (int t = 0; t < n_tok; t++) {
            ref_attention(&r, l, t, attn);
            if (ex && ex->head_scale) ref_scale_heads(&r, l, t, ex, msum);
            ref_matvec(r.tmp, ref_tl(r.f, l, "attn_output.weight"), r.att);
            if (r.fam.gpt_oss)
                for (int i = 0; i < E; i++) r.tmp[i] += ref_elem(ref_tl(r.f, l, "attn_output.bias"), (uint64_t)i);
            if (r.fam.post_norms)
                ref_rmsnorm(r.tmp, r.tmp, ref_tl(r.f, l, "post_attention_norm.weight"), E, sp->rms_eps);
            for (int i = 0; i < E; i++) r.x[(size_t)t * E + i] += r.tmp[i];
            ref_ffn(&r, l, t);
            if (ex && ex->lens) ref_head(&r, r.x + (size_t)t * E, ex->lens + ((size_t)l * n_tok + t) * r.V);
        }
    }
    for (int t = 0; t < n_tok; t++) ref_head(&r, r.x + (size_t)t * E, logits + (size_t)t * r.V);
    free(r.x), free(r.q), free(r.k), free(r.v), free(r.xn), free(r.att), free(r.tmp), free(r.g), free(r.u);
    free(r.sc), free(r.big), free(msum);
    gguf_close(r.f);
}

static inline void ref_forward_attn(const tiny_spec *sp, const char *path, const int32_t *tokens, int n_tok,
                                    double *logits, double *attn) {
    ref_forward_ex(sp, path, tokens, n_tok, logits, &(ref_extra){.attn = attn});
}

static inline void ref_forward(const tiny_spec *sp, const char *path, const int32_t *tokens, int n_tok, double *logits) {
    ref_forward_attn(sp, path, tokens, n_tok, logits, NULL);
}

#endif /* ATTND_TEST_ENGINE_FIXTURE_H */
