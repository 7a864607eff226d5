/*
 * mla_fixture.h — (tests only) random-weight `deepseek2` models (multi-head latent attention,
 * DeepSeek's router) and an independent float64 reference forward pass for them, written from
 * llama.cpp's deepseek2 graph and converter (conversion/deepseek.py), not from engine/mla.c: the
 * reference expands every head's keys and values from the latent (the "naive" form) where the
 * engine multiplies the up-projections into the query and the output.
 *
 * The files are written with engine_fixture.h's key writer (its vocabulary, so that llama.cpp
 * loads them) and tensor helpers; the latent and router keys and tensors are this file's.
 */
#ifndef ATTND_TEST_MLA_FIXTURE_H
#define ATTND_TEST_MLA_FIXTURE_H

#include "engine_fixture.h"

typedef struct ml_spec {
    tiny_spec base;        /* vocabulary, width, heads (n_head), n_ff (the dense layers'), rope base and
                              dims (= qk_rope), eps, experts (n_expert, n_expert_used, n_ff_exp), YaRN */
    int q_lora, kv_lora, nope, v_head; /* q_lora 0: a plain attn_q */
    bool legacy_kv_b;      /* one attn_kv_b (old converters) instead of attn_k_b + attn_v_b */
    int n_dense;           /* leading_dense_block_count */
    int n_shared;          /* expert_shared_count */
    int gating;            /* expert_gating_func: 1 softmax, 2 sigmoid */
    bool probs_b;          /* exp_probs_b.bias */
    bool w_norm;           /* expert_weights_norm */
    float w_scale;         /* expert_weights_scale (0: not written) */
    int n_group, n_group_used; /* expert_group_count / _used_count (0: not written) */
    float log_mul;         /* rope.scaling.yarn_log_multiplier as written (0.1 mscale_all_dim; 0: none) */
    int n_mtp;             /* nextn_predict_layers: MTP blocks written after the main ones (GLM-4.7-Flash) */
    bool ref_q8;           /* the float64 reference rounds its latent rows as a Q8_0 cache holds them */
} ml_spec;

static inline int ml_qk(const ml_spec *ms) { return ms->nope + ms->base.rope_dims; }

#define MADD(nm, d0, d1, ty, scale, offs) tiny_add(ts, nt, rng, nm, (uint64_t)(d0), (uint64_t)(d1), ty, scale, offs)
#define MNAME(s) (snprintf(nm, sizeof(nm), "blk.%d.%s", l, s), nm)
/* a 3-D tensor [d0, d1, d2], written as the 2-D (d0, d1 * d2) then reshaped */
#define MADD3(nm, d0, d1, d2, ty, scale)                                                     \
    do {                                                                                     \
        MADD(nm, d0, (uint64_t)(d1) * (uint64_t)(d2), ty, scale, 0.0f);                      \
        ts[*nt - 1].ne[1] = (uint64_t)(d1), ts[*nt - 1].ne[2] = (uint64_t)(d2), ts[*nt - 1].n_dims = 3; \
    } while (0)

/* Layer l's latent attention tensors. */
static inline void ml_attn_tensors(const ml_spec *ms, int l, tiny_tensor *ts, int *nt, uint64_t *rng) {
    const tiny_spec *sp = &ms->base;
    char nm[64];
    uint64_t E = (uint64_t)sp->n_embd, H = (uint64_t)sp->n_head, QK = (uint64_t)ml_qk(ms), C = (uint64_t)ms->kv_lora;
    float ws = 1.7f / sqrtf((float)E);
    MADD(MNAME("attn_norm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    if (ms->q_lora) {
        MADD(MNAME("attn_q_a.weight"), E, (uint64_t)ms->q_lora, sp->wtype, ws, 0.0f);
        MADD(MNAME("attn_q_a_norm.weight"), (uint64_t)ms->q_lora, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        MADD(MNAME("attn_q_b.weight"), (uint64_t)ms->q_lora, H * QK, sp->wtype, 1.7f / sqrtf((float)ms->q_lora), 0.0f);
    } else {
        MADD(MNAME("attn_q.weight"), E, H * QK, sp->wtype, ws, 0.0f);
    }
    MADD(MNAME("attn_kv_a_mqa.weight"), E, C + (uint64_t)sp->rope_dims, sp->wtype, ws, 0.0f);
    MADD(MNAME("attn_kv_a_norm.weight"), C, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    float cs = 1.7f / sqrtf((float)C);
    if (ms->legacy_kv_b) {
        MADD(MNAME("attn_kv_b.weight"), C, H * (uint64_t)(ms->nope + ms->v_head), sp->wtype, cs, 0.0f);
    } else { /* per head: W_UK^T (kv_lora rows of nope), W_UV (v_head rows of kv_lora) */
        MADD3(MNAME("attn_k_b.weight"), (uint64_t)ms->nope, C, H, sp->wtype, 1.7f / sqrtf((float)ms->nope));
        MADD3(MNAME("attn_v_b.weight"), C, (uint64_t)ms->v_head, H, sp->wtype, cs);
    }
    MADD(MNAME("attn_output.weight"), H * (uint64_t)ms->v_head, E, sp->wtype, 1.7f / sqrtf((float)(H * ms->v_head)),
         0.0f);
}

/* Layer l's feed-forward tensors: a dense SwiGLU (leading layers) or the router, experts and
 * shared experts. */
static inline void ml_ffn_tensors(const ml_spec *ms, int l, tiny_tensor *ts, int *nt, uint64_t *rng) {
    const tiny_spec *sp = &ms->base;
    char nm[64];
    uint64_t E = (uint64_t)sp->n_embd, F = (uint64_t)sp->n_ff, NE = (uint64_t)sp->n_expert, FE = (uint64_t)sp->n_ff_exp;
    float ws = 1.7f / sqrtf((float)E);
    MADD(MNAME("ffn_norm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    if (l < ms->n_dense) {
        MADD(MNAME("ffn_gate.weight"), E, F, sp->wtype, ws, 0.0f);
        MADD(MNAME("ffn_up.weight"), E, F, sp->wtype, ws, 0.0f);
        MADD(MNAME("ffn_down.weight"), F, E, sp->wtype, 1.7f / sqrtf((float)F), 0.0f);
        return;
    }
    MADD(MNAME("ffn_gate_inp.weight"), E, NE, GGUF_TYPE_F32, 2.0f * ws, 0.0f);
    if (ms->probs_b) MADD(MNAME("exp_probs_b.bias"), NE, 1, GGUF_TYPE_F32, 0.05f, 0.0f);
    MADD3(MNAME("ffn_gate_exps.weight"), E, FE, NE, sp->wtype, ws);
    MADD3(MNAME("ffn_up_exps.weight"), E, FE, NE, sp->wtype, ws);
    MADD3(MNAME("ffn_down_exps.weight"), FE, E, NE, sp->wtype, 1.7f / sqrtf((float)FE));
    if (!ms->n_shared) return;
    uint64_t FS = FE * (uint64_t)ms->n_shared;
    MADD(MNAME("ffn_gate_shexp.weight"), E, FS, sp->wtype, ws, 0.0f);
    MADD(MNAME("ffn_up_shexp.weight"), E, FS, sp->wtype, ws, 0.0f);
    MADD(MNAME("ffn_down_shexp.weight"), FS, E, sp->wtype, 1.7f / sqrtf((float)FS), 0.0f);
}

static inline int ml_tensors(const ml_spec *ms, tiny_tensor *ts) {
    const tiny_spec *sp = &ms->base;
    int n = 0, *nt = &n;
    uint64_t seed = sp->seed, *rng = &seed, E = (uint64_t)sp->n_embd;
    MADD("token_embd.weight", E, (uint64_t)sp->n_vocab, sp->wtype, 1.0f, 0.0f);
    MADD("output_norm.weight", E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    if (!sp->tied) MADD("output.weight", E, (uint64_t)sp->n_vocab, sp->wtype, 0.5f, 0.0f);
    for (int l = 0; l < sp->n_layer + ms->n_mtp; l++) { /* MTP blocks last: the main ones stay the same */
        ml_attn_tensors(ms, l, ts, nt, rng);
        ml_ffn_tensors(ms, l, ts, nt, rng);
        if (l < sp->n_layer) continue;
        char nm[64];
        snprintf(nm, sizeof(nm), "blk.%d.nextn.eh_proj.weight", l);
        MADD(nm, 2 * E, E, sp->wtype, 0.1f, 0.0f);
        snprintf(nm, sizeof(nm), "blk.%d.nextn.enorm.weight", l);
        MADD(nm, E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        snprintf(nm, sizeof(nm), "blk.%d.nextn.hnorm.weight", l);
        MADD(nm, E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    }
    return n;
}
#undef MADD3
#undef MNAME
#undef MADD

/* The latent and router keys after tiny_keys' common ones; returns how many. */
static inline uint64_t ml_keys(gbuf *b, const ml_spec *ms) {
    uint64_t n = 0;
    char key[96];
    int C = ms->kv_lora, R = ms->base.rope_dims;
#define MK(s) (n++, snprintf(key, sizeof(key), "deepseek2.%s", s), key)
    if (ms->legacy_kv_b) { /* a head's sizes in key_length / value_length, no _mla keys */
        gb_kv_u32(b, MK("attention.key_length"), (uint32_t)ml_qk(ms));
        gb_kv_u32(b, MK("attention.value_length"), (uint32_t)ms->v_head);
    } else {
        gb_kv_u32(b, MK("attention.key_length"), (uint32_t)(C + R));
        gb_kv_u32(b, MK("attention.value_length"), (uint32_t)C);
        gb_kv_u32(b, MK("attention.key_length_mla"), (uint32_t)ml_qk(ms));
        gb_kv_u32(b, MK("attention.value_length_mla"), (uint32_t)ms->v_head);
    }
    gb_kv_u32(b, MK("attention.q_lora_rank"), (uint32_t)ms->q_lora); /* 0: llama.cpp's plain attn_q */
    gb_kv_u32(b, MK("attention.kv_lora_rank"), (uint32_t)C);
    gb_kv_u32(b, MK("leading_dense_block_count"), (uint32_t)ms->n_dense);
    gb_kv_u32(b, MK("expert_shared_count"), (uint32_t)ms->n_shared);
    gb_kv_u32(b, MK("expert_gating_func"), (uint32_t)ms->gating);
    gb_kv_u32(b, MK("vocab_size"), (uint32_t)ms->base.n_vocab);
    if (ms->w_norm) gb_kv_bool(b, MK("expert_weights_norm"), true);
    if (ms->w_scale != 0) gb_kv_f32(b, MK("expert_weights_scale"), ms->w_scale);
    if (ms->n_group) gb_kv_u32(b, MK("expert_group_count"), (uint32_t)ms->n_group);
    if (ms->n_group) gb_kv_u32(b, MK("expert_group_used_count"), (uint32_t)ms->n_group_used);
    if (ms->log_mul != 0) gb_kv_f32(b, MK("rope.scaling.yarn_log_multiplier"), ms->log_mul);
    if (ms->n_mtp) gb_kv_u32(b, MK("nextn_predict_layers"), (uint32_t)ms->n_mtp);
#undef MK
    return n;
}

/* Writes ms's model to path. Returns 0 on success. */
static inline int ml_write(const char *path, const ml_spec *ms) {
    tiny_tensor *ts = calloc(TINY_MAX_TENSORS, sizeof(*ts));
    int nt = ml_tensors(ms, ts);
    tiny_spec sp = ms->base;
    sp.head_dim = 0; /* ml_keys writes the lengths */
    sp.n_layer += ms->n_mtp; /* block_count counts the MTP blocks */
    sp.n_head_kv = ms->legacy_kv_b ? sp.n_head : 1; /* the converter's: one latent for every head (old
                                                       files: as many as heads) */
    gbuf b = {0};
    gb_bytes(&b, "GGUF", 4);
    gb_u32(&b, 3);
    gb_u64(&b, (uint64_t)nt);
    gb_u64(&b, 0); /* the key count, patched below */
    uint64_t n_kv = tiny_keys(&b, &sp);
    n_kv += ml_keys(&b, ms);
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
        if (ts[i].type == GGUF_TYPE_F32) {
            gb_bytes(&b, ts[i].vals, bytes);
        } else {
            uint16_t *h = malloc(bytes);
            for (uint64_t j = 0; j < n; j++) h[j] = tiny_f32_to_f16(ts[i].vals[j]);
            gb_bytes(&b, h, bytes);
            free(h);
        }
        gb_bytes(&b, zeros, (32 - bytes % 32) % 32);
        free(ts[i].vals);
    }
    free(ts);
    FILE *f = fopen(path, "wb");
    int rc = !f || fwrite(b.p, 1, b.n, f) != b.n;
    if (f) fclose(f);
    free(b.p);
    return rc;
}

// ---- float64 reference ------------------------------------------------------------------------

typedef struct ml_ref {
    const ml_spec *ms;
    const gguf_file *f;
    int E, H, QK, C, R, V, n_tok;
    double *x;     /* (n_tok, E) residual stream */
    double *xn;    /* (E) */
    double *kv;    /* (n_tok, H, QK + v_head) every position's expanded keys then values, per head */
    double *q;     /* (H, QK) */
    double *lat;   /* (C + R) */
    double *qa;    /* (q_lora) */
    double *att;   /* (H v_head) */
    double *big;   /* (max(F, FE n_shared, NE)) */
    double *g, *u; /* (max(F, FE n_shared)) */
    double *tmp;   /* (E) */
    double *cs;    /* (n_tok, R / 2, 2) cos, sin */
    double scale;  /* the softmax's scale */
    double *tap_lat;   /* (n_layer, n_tok, C + R) each cache row [c | k_pe], or NULL (ml_ref_forward_taps) */
    double *tap_alpha; /* (n_layer, n_tok, H, n_tok) each head's softmax row (0 past t), or NULL */
} ml_ref;

/* llama.cpp's "normal" RoPE: pairs (2i, 2i + 1) of x (R) by position t's angles. */
static inline void ml_rope(const ml_ref *r, double *x, int t) {
    for (int i = 0; i < r->R / 2; i++) {
        double c = r->cs[((size_t)t * (r->R / 2) + i) * 2], s = r->cs[((size_t)t * (r->R / 2) + i) * 2 + 1];
        double a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s, x[2 * i + 1] = a * s + b * c;
    }
}

/* x (n, a multiple of 32) as a Q8_0 cache row holds it (GGUF's Q8_0): per block of 32,
 * d = amax / 127, q = round(x / d), x = q * d with d rounded to F16 (11 significant bits). */
static inline void ml_round_q8(double *x, int n) {
    for (int b = 0; b < n; b += 32) {
        double amax = 0;
        for (int i = b; i < b + 32; i++) amax = fmax(amax, fabs(x[i]));
        double d = amax / 127, dh = d;
        int e = 0;
        if (d > 0) {
            double m = frexp(d, &e);
            dh = ldexp(nearbyint(ldexp(m, 11)), e - 11);
        }
        for (int i = b; i < b + 32; i++) x[i] = d > 0 ? round(x[i] / d) * dh : 0;
    }
}

/* W_UK,h c (nope) and W_UV,h c (v_head) of head h, from attn_k_b / attn_v_b or a legacy attn_kv_b. */
static inline void ml_expand(const ml_ref *r, int l, int h, const double *c, double *kn, double *v) {
    const ml_spec *ms = r->ms;
    int C = r->C, NP = ms->nope, VH = ms->v_head;
    const gguf_tensor *kvb = ref_tl(r->f, l, "attn_kv_b.weight"), *kb = ref_tl(r->f, l, "attn_k_b.weight");
    const gguf_tensor *vb = ref_tl(r->f, l, "attn_v_b.weight");
    for (int i = 0; i < NP; i++) {
        double s = 0;
        for (int k = 0; k < C; k++)
            s += c[k] * (kvb ? ref_elem(kvb, ((uint64_t)h * (NP + VH) + i) * C + k)
                             : ref_elem(kb, ((uint64_t)h * C + k) * NP + i));
        kn[i] = s;
    }
    for (int i = 0; i < VH; i++) {
        double s = 0;
        for (int k = 0; k < C; k++)
            s += c[k] * (kvb ? ref_elem(kvb, ((uint64_t)h * (NP + VH) + NP + i) * C + k)
                             : ref_elem(vb, ((uint64_t)h * VH + i) * C + k));
        v[i] = s;
    }
}

/* Position t of layer l: its keys and values into r->kv, then r->att = the heads' attention over
 * positions 0..t, each head with its own expanded keys [W_UK,h c | k_pe] and values W_UV,h c. */
static inline void ml_ref_attention(ml_ref *r, int l, int t) {
    const ml_spec *ms = r->ms;
    int H = r->H, QK = r->QK, C = r->C, NP = ms->nope, VH = ms->v_head, W = QK + VH;
    ref_matvec(r->lat, ref_tl(r->f, l, "attn_kv_a_mqa.weight"), r->xn);
    ref_rmsnorm(r->lat, r->lat, ref_tl(r->f, l, "attn_kv_a_norm.weight"), C, ms->base.rms_eps);
    ml_rope(r, r->lat + C, t);
    if (ms->ref_q8) ml_round_q8(r->lat, C + r->R);
    if (r->tap_lat) memcpy(r->tap_lat + ((size_t)l * r->n_tok + t) * (C + r->R), r->lat, sizeof(double) * (size_t)(C + r->R));
    for (int h = 0; h < H; h++) {
        double *kv = r->kv + ((size_t)t * H + h) * W;
        ml_expand(r, l, h, r->lat, kv, kv + QK);
        memcpy(kv + NP, r->lat + C, sizeof(double) * (size_t)r->R);
    }
    if (ms->q_lora) {
        ref_matvec(r->qa, ref_tl(r->f, l, "attn_q_a.weight"), r->xn);
        ref_rmsnorm(r->qa, r->qa, ref_tl(r->f, l, "attn_q_a_norm.weight"), ms->q_lora, ms->base.rms_eps);
        ref_matvec(r->q, ref_tl(r->f, l, "attn_q_b.weight"), r->qa);
    } else {
        ref_matvec(r->q, ref_tl(r->f, l, "attn_q.weight"), r->xn);
    }
    double *w = malloc(sizeof(double) * (size_t)(t + 1));
    for (int h = 0; h < H; h++) {
        double *q = r->q + (size_t)h * QK, mx = -INFINITY, z = 0;
        ml_rope(r, q + NP, t);
        for (int j = 0; j <= t; j++) {
            const double *k = r->kv + ((size_t)j * H + h) * W;
            double s = 0;
            for (int i = 0; i < QK; i++) s += q[i] * k[i];
            w[j] = s * r->scale, mx = w[j] > mx ? w[j] : mx;
        }
        for (int j = 0; j <= t; j++) z += w[j] = exp(w[j] - mx);
        for (int j = 0; r->tap_alpha && j <= t; j++)
            r->tap_alpha[(((size_t)l * r->n_tok + t) * H + h) * r->n_tok + j] = w[j] / z;
        for (int i = 0; i < VH; i++) {
            double s = 0;
            for (int j = 0; j <= t; j++) s += w[j] / z * r->kv[((size_t)j * H + h) * W + QK + i];
            r->att[(size_t)h * VH + i] = s;
        }
    }
    free(w);
}

/* out (E) += W_down silu(W_gate xn) * (W_up xn), rows r0.. of the (possibly 3-D) tensors. */
static inline void ml_swiglu(ml_ref *r, const char *g, const char *u, const char *d, int l, uint64_t r0, int F,
                             double wt, double *out) {
    ref_matvec_rows(r->g, ref_tl(r->f, l, g), r0 * F, (uint64_t)F, r->xn);
    ref_matvec_rows(r->u, ref_tl(r->f, l, u), r0 * F, (uint64_t)F, r->xn);
    for (int i = 0; i < F; i++) r->g[i] = r->g[i] / (1 + exp(-r->g[i])) * r->u[i];
    ref_matvec_rows(r->tmp, ref_tl(r->f, l, d), r0 * r->E, (uint64_t)r->E, r->g);
    for (int i = 0; i < r->E; i++) out[i] += wt * r->tmp[i];
}

/* The experts of position t (x += their weighted outputs and the shared experts'), as llama.cpp's
 * build_moe_ffn: probabilities by the gating, the choice on probabilities + exp_probs_b within
 * the best groups (sum of a group's two best), the weights the unbiased probabilities, normed and
 * scaled. */
static inline void ml_ref_moe(ml_ref *r, int l, double *x) {
    const ml_spec *ms = r->ms;
    int NE = ms->base.n_expert, K = ms->base.n_expert_used, G = ms->n_group > 1 ? ms->n_group : 1;
    double *p = r->big, sel_s[1024], wsum = 0;
    int sel[64], keep[1024] = {0};
    ref_matvec(p, ref_tl(r->f, l, "ffn_gate_inp.weight"), r->xn);
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < NE; i++) mx = p[i] > mx ? p[i] : mx;
    for (int i = 0; i < NE; i++) z += ms->gating == 2 ? 0 : exp(p[i] - mx);
    for (int i = 0; i < NE; i++) p[i] = ms->gating == 2 ? 1 / (1 + exp(-p[i])) : exp(p[i] - mx) / z;
    const gguf_tensor *pb = ref_tl(r->f, l, "exp_probs_b.bias");
    for (int i = 0; i < NE; i++) sel_s[i] = p[i] + (pb ? ref_elem(pb, (uint64_t)i) : 0);
    int per = NE / G;
    for (int k = 0; k < (G > 1 ? ms->n_group_used : 1); k++) { /* the groups that compete */
        int best = -1;
        double bs = 0;
        for (int g = 0; g < G; g++) {
            double a = -INFINITY, b = -INFINITY;
            for (int i = g * per; i < (g + 1) * per; i++)
                if (sel_s[i] > a) b = a, a = sel_s[i];
                else if (sel_s[i] > b) b = sel_s[i];
            double gs = per > 1 ? a + b : a;
            if (!keep[g] && (best < 0 || gs > bs)) best = g, bs = gs;
        }
        keep[best] = 1;
    }
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < NE; i++) {
            bool used = !keep[i / per];
            for (int j = 0; j < k; j++) used |= sel[j] == i;
            if (!used && (best < 0 || sel_s[i] > sel_s[best])) best = i;
        }
        sel[k] = best, wsum += p[best];
    }
    double div = ms->w_norm ? (wsum > 6.103515625e-5 ? wsum : 6.103515625e-5) : 1, sc = ms->w_scale != 0 ? ms->w_scale : 1;
    for (int k = 0; k < K; k++)
        ml_swiglu(r, "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight", l, (uint64_t)sel[k],
                  ms->base.n_ff_exp, p[sel[k]] / div * sc, x);
    if (ms->n_shared)
        ml_swiglu(r, "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight", l, 0,
                  ms->base.n_ff_exp * ms->n_shared, 1.0, x);
}

/* logits (n_tok, V) of tokens[0..n_tok) through the model at path. */
/* ml_ref_forward, also keeping every layer's cache rows (lat) and softmax rows (alpha) when not
 * NULL, in the shapes of ml_ref.tap_lat / tap_alpha (alpha zeroed by the caller). */
static inline void ml_ref_forward_taps(const ml_spec *ms, const char *path, const int32_t *tokens, int n_tok,
                                       double *logits, double *lat, double *alpha) {
    const tiny_spec *sp = &ms->base;
    gguf_file *f;
    attnd_err err;
    if (gguf_open(&f, path, &err)) abort();
    int FS = sp->n_ff_exp * ms->n_shared, FM = sp->n_ff > FS ? sp->n_ff : FS;
    FM = FM > sp->n_ff_exp ? FM : sp->n_ff_exp;
    ml_ref r = {.ms = ms, .f = f, .E = sp->n_embd, .H = sp->n_head, .QK = ml_qk(ms), .C = ms->kv_lora,
                .R = sp->rope_dims, .V = sp->n_vocab, .n_tok = n_tok, .tap_lat = lat, .tap_alpha = alpha};
    r.x = calloc((size_t)n_tok * r.E, sizeof(double)), r.xn = calloc((size_t)r.E, sizeof(double));
    r.kv = calloc((size_t)n_tok * r.H * (r.QK + ms->v_head), sizeof(double));
    r.q = calloc((size_t)r.H * r.QK, sizeof(double)), r.lat = calloc((size_t)(r.C + r.R), sizeof(double));
    r.qa = calloc((size_t)ms->q_lora + 1, sizeof(double)), r.att = calloc((size_t)r.H * ms->v_head, sizeof(double));
    r.big = calloc((size_t)(FM > sp->n_expert ? FM : sp->n_expert), sizeof(double));
    r.g = calloc((size_t)FM, sizeof(double)), r.u = calloc((size_t)FM, sizeof(double));
    r.tmp = calloc((size_t)(r.E > sp->n_vocab ? r.E : sp->n_vocab), sizeof(double));
    r.cs = calloc((size_t)n_tok * r.R, sizeof(double));
    /* YaRN: with yarn_log_multiplier the rotation is unscaled and the query scale takes
     * (1 + 0.1 mscale_all_dim ln factor)^2 (llama.cpp's deepseek2 graph and context) */
    double msc = 1, fac = sp->rope_yarn > 0 ? sp->rope_yarn : 1;
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < r.R / 2; i++) {
            double th = t * ref_inv_freq(sp, f, false, i, &msc);
            if (ms->log_mul != 0) msc = 1;
            r.cs[((size_t)t * (r.R / 2) + i) * 2] = cos(th) * msc, r.cs[((size_t)t * (r.R / 2) + i) * 2 + 1] = sin(th) * msc;
        }
    double m2 = msc * (1 + 0.1 * (ms->log_mul / 0.1) * log(fac));
    r.scale = m2 * m2 / sqrt((double)r.QK);
    const gguf_tensor *emb = ref_t(f, "token_embd.weight");
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < r.E; i++) r.x[(size_t)t * r.E + i] = ref_elem(emb, (uint64_t)tokens[t] * r.E + i);
    for (int l = 0; l < sp->n_layer; l++)
        for (int t = 0; t < n_tok; t++) {
            double *x = r.x + (size_t)t * r.E;
            ref_rmsnorm(r.xn, x, ref_tl(f, l, "attn_norm.weight"), r.E, sp->rms_eps);
            ml_ref_attention(&r, l, t);
            ref_matvec(r.tmp, ref_tl(f, l, "attn_output.weight"), r.att);
            for (int i = 0; i < r.E; i++) x[i] += r.tmp[i];
            ref_rmsnorm(r.xn, x, ref_tl(f, l, "ffn_norm.weight"), r.E, sp->rms_eps);
            if (l < ms->n_dense)
                ml_swiglu(&r, "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", l, 0, sp->n_ff, 1.0, x);
            else
                ml_ref_moe(&r, l, x);
        }
    const gguf_tensor *out = ref_t(f, "output.weight");
    for (int t = 0; t < n_tok; t++) {
        ref_rmsnorm(r.xn, r.x + (size_t)t * r.E, ref_t(f, "output_norm.weight"), r.E, sp->rms_eps);
        ref_matvec(logits + (size_t)t * r.V, out ? out : emb, r.xn);
    }
    free(r.x), free(r.xn), free(r.kv), free(r.q), free(r.lat), free(r.qa), free(r.att), free(r.big), free(r.g);
    free(r.u), free(r.tmp), free(r.cs);
    gguf_close(f);
}

static inline void ml_ref_forward(const ml_spec *ms, const char *path, const int32_t *tokens, int n_tok, double *logits) {
    ml_ref_forward_taps(ms, path, tokens, n_tok, logits, NULL, NULL);
}

#endif
