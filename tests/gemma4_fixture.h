/*
 * gemma4_fixture.h — (tests only) random-weight Gemma 4 models (`gemma4`) and an independent
 * float64 reference forward pass for them, written from llama.cpp's gemma4 graph and converter
 * (src/models/gemma4.cpp, conversion/gemma.py), not from engine/.
 *
 * What a file carries: local (sliding) and global layers by attention.sliding_window_pattern,
 * each kind with its own head size, KV heads and RoPE (global: "proportional", rope_freqs
 * leaving all but the first dims unrotated; local: rope.freq_base_swa); global layers without
 * attn_v (V is K's projection); V normed without weight; query scale 1; a per-layer output
 * scale; optionally the last layers sharing earlier layers' caches, per-layer embeddings and a
 * double-wide FFN on those layers (E2B / E4B), experts beside the dense FFN (26B-A4B). The keys
 * and vocabulary are engine_fixture.h's writers' (so that llama.cpp loads the files).
 */
#ifndef ATTND_TEST_GEMMA4_FIXTURE_H
#define ATTND_TEST_GEMMA4_FIXTURE_H

#include "engine_fixture.h"

typedef struct g4_spec {
    tiny_spec base;     /* arch "gemma4", vocabulary, n_embd, n_layer, n_head, local layers' n_head_kv and
                           head_dim, n_ff, rope_base (global) and rope_base_swa, window, rms_eps,
                           final_softcap, experts (n_expert > 0: every layer has them), seed */
    int hd_full, kv_full; /* global layers' head size and KV heads */
    int swa_every;      /* layer l is global when l % swa_every == swa_every - 1, and the last one */
    float partial_full; /* the share of a global head's dimensions that RoPE rotates */
    int n_shared;       /* attention.shared_kv_layers */
    int n_ple;          /* embedding_length_per_layer_input (0: none) */
    bool double_ff;     /* the shared layers' FFN twice n_ff wide (feed_forward_length an array) */
    bool fused_exps;    /* ffn_gate_up_exps instead of ffn_gate_exps and ffn_up_exps */
    bool gelu_f16;      /* the reference only: GELU as llama.cpp's CPU computes it (its input rounded
                           to F16, the value read from an F16 table; 0 below -10, x above 10) */
} g4_spec;

static inline bool g4_global(const g4_spec *gs, int l) {
    return l % gs->swa_every == gs->swa_every - 1 || l == gs->base.n_layer - 1;
}
static inline int g4_first_shared(const g4_spec *gs) { return gs->base.n_layer - gs->n_shared; }
static inline int g4_hd(const g4_spec *gs, int l) { return g4_global(gs, l) ? gs->hd_full : gs->base.head_dim; }
static inline int g4_kv(const g4_spec *gs, int l) { return g4_global(gs, l) ? gs->kv_full : gs->base.n_head_kv; }
static inline int g4_ff(const g4_spec *gs, int l) {
    return gs->double_ff && l >= g4_first_shared(gs) ? 2 * gs->base.n_ff : gs->base.n_ff;
}
/* The layer whose cache layer l reads (llama.cpp's pairing for shared layers). */
static inline int g4_kv_source(const g4_spec *gs, int l) {
    int first = g4_first_shared(gs);
    return l < first ? l : first - (g4_global(gs, l) ? 1 : 2);
}

#define GADD(nm, d0, d1, ty, scale, offs) tiny_add(ts, nt, rng, nm, (uint64_t)(d0), (uint64_t)(d1), ty, scale, offs)
#define GNAME(s) (snprintf(nm, sizeof(nm), "blk.%d.%s", l, s), nm)
#define GNORM(s, n) GADD(GNAME(s), n, 1, GGUF_TYPE_F32, 0.2f, 1.0f)

/* Layer l's attention tensors (a shared layer keeps attn_k, attn_v, attn_k_norm, unused). */
static inline void g4_attn_tensors(const g4_spec *gs, int l, tiny_tensor *ts, int *nt, uint64_t *rng) {
    const tiny_spec *sp = &gs->base;
    char nm[64];
    uint64_t E = (uint64_t)sp->n_embd, hd = (uint64_t)g4_hd(gs, l), Q = hd * (uint64_t)sp->n_head;
    uint64_t KV = hd * (uint64_t)g4_kv(gs, l);
    float ws = 1.7f / sqrtf((float)sp->n_embd);
    GNORM("attn_norm.weight", E);
    GADD(GNAME("attn_q.weight"), E, Q, sp->wtype, ws, 0.0f);
    GADD(GNAME("attn_k.weight"), E, KV, sp->wtype, ws, 0.0f);
    if (!g4_global(gs, l)) GADD(GNAME("attn_v.weight"), E, KV, sp->wtype, ws, 0.0f);
    /* the query scale is 1: the trained q-norm weights carry the temperature; here about
     * 1/sqrt(hd), so that scores spread as in a scaled attention */
    GADD(GNAME("attn_q_norm.weight"), hd, 1, GGUF_TYPE_F32, 0.2f / sqrtf((float)hd), 1.0f / sqrtf((float)hd));
    GNORM("attn_k_norm.weight", hd);
    GADD(GNAME("attn_output.weight"), Q, E, sp->wtype, 1.7f / sqrtf((float)Q), 0.0f);
    GNORM("post_attention_norm.weight", E);
}

/* Layer l's FFN tensors: the dense GeGLU, and the experts beside it when the spec has them. */
static inline void g4_ffn_tensors(const g4_spec *gs, int l, tiny_tensor *ts, int *nt, uint64_t *rng) {
    const tiny_spec *sp = &gs->base;
    char nm[64];
    uint64_t E = (uint64_t)sp->n_embd, F = (uint64_t)g4_ff(gs, l);
    float ws = 1.7f / sqrtf((float)sp->n_embd);
    GNORM("ffn_norm.weight", E);
    GADD(GNAME("ffn_gate.weight"), E, F, sp->wtype, ws, 0.0f);
    GADD(GNAME("ffn_up.weight"), E, F, sp->wtype, ws, 0.0f);
    GADD(GNAME("ffn_down.weight"), F, E, sp->wtype, 1.7f / sqrtf((float)F), 0.0f);
    GNORM("post_ffw_norm.weight", E);
    if (sp->n_expert) {
        uint64_t FE = (uint64_t)sp->n_ff_exp, NE = (uint64_t)sp->n_expert;
        GADD(GNAME("ffn_gate_inp.weight"), E, NE, GGUF_TYPE_F32, 3.0f * ws, 0.0f);
        GADD(GNAME("ffn_gate_inp.scale"), E, 1, GGUF_TYPE_F32, 0.3f, 1.0f);
        GNORM("pre_ffw_norm_2.weight", E);
        GNORM("post_ffw_norm_1.weight", E);
        GNORM("post_ffw_norm_2.weight", E);
        const char *names[3] = {gs->fused_exps ? "ffn_gate_up_exps.weight" : "ffn_gate_exps.weight",
                                "ffn_up_exps.weight", "ffn_down_exps.weight"};
        for (int i = 0; i < 3; i++) { /* [d0, d1, n_expert] */
            if (i == 1 && gs->fused_exps) continue;
            uint64_t d0 = i < 2 ? E : FE, d1 = i < 2 ? (gs->fused_exps ? 2 * FE : FE) : E;
            GADD(GNAME(names[i]), d0, d1 * NE, sp->wtype, i < 2 ? ws : 1.7f / sqrtf((float)FE), 0.0f);
            ts[*nt - 1].ne[1] = d1, ts[*nt - 1].ne[2] = NE, ts[*nt - 1].n_dims = 3;
        }
        GADD(GNAME("ffn_down_exps.scale"), NE, 1, GGUF_TYPE_F32, 0.4f, 1.0f);
    }
    if (gs->n_ple) {
        GADD(GNAME("inp_gate.weight"), E, (uint64_t)gs->n_ple, sp->wtype, ws, 0.0f);
        GADD(GNAME("proj.weight"), (uint64_t)gs->n_ple, E, sp->wtype, 1.7f / sqrtf((float)gs->n_ple), 0.0f);
        GNORM("post_norm.weight", E);
    }
    GADD(GNAME("layer_output_scale.weight"), 1, 1, GGUF_TYPE_F32, 0.3f, 0.8f);
}

/* The tensors of gs's model. */
static inline int g4_tensors(const g4_spec *gs, tiny_tensor *ts) {
    const tiny_spec *sp = &gs->base;
    int n = 0, *nt = &n;
    uint64_t seed = sp->seed, *rng = &seed, E = (uint64_t)sp->n_embd, NL = (uint64_t)sp->n_layer;
    GADD("token_embd.weight", E, (uint64_t)sp->n_vocab, sp->wtype, 1.0f / sqrtf((float)E), 0.0f);
    GADD("output_norm.weight", E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    /* proportional RoPE: the first partial_full of a global head's pairs turn, the rest do not */
    int pairs = gs->hd_full / 2, turning = (int)(gs->hd_full * gs->partial_full / 2);
    GADD("rope_freqs.weight", (uint64_t)pairs, 1, GGUF_TYPE_F32, 0.0f, 1.0f);
    for (int i = turning; i < pairs; i++) ts[*nt - 1].vals[i] = 1e30f;
    if (gs->n_ple) {
        uint64_t P = (uint64_t)gs->n_ple;
        GADD("per_layer_token_embd.weight", P * NL, (uint64_t)sp->n_vocab, sp->wtype, 1.0f, 0.0f);
        GADD("per_layer_model_proj.weight", E, P * NL, sp->wtype, 1.0f, 0.0f);
        GADD("per_layer_proj_norm.weight", P, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    }
    for (int l = 0; l < sp->n_layer; l++) {
        g4_attn_tensors(gs, l, ts, nt, rng);
        g4_ffn_tensors(gs, l, ts, nt, rng);
    }
    return n;
}
#undef GNORM
#undef GNAME
#undef GADD

/* gs's "gemma4." keys; returns how many were written. */
static inline uint64_t g4_keys(gbuf *b, const g4_spec *gs) {
    const tiny_spec *sp = &gs->base;
    int NL = sp->n_layer;
    uint64_t n = 2;
    char key[96];
    gb_kv_str(b, "general.architecture", "gemma4");
    gb_kv_str(b, "general.name", "tiny-gemma4");
#define GK(s) (n++, snprintf(key, sizeof(key), "gemma4.%s", s), key)
    gb_kv_u32(b, GK("context_length"), (uint32_t)sp->n_ctx);
    gb_kv_u32(b, GK("embedding_length"), (uint32_t)sp->n_embd);
    gb_kv_u32(b, GK("block_count"), (uint32_t)NL);
    int32_t arr[256];
    for (int l = 0; l < NL; l++) arr[l] = g4_ff(gs, l);
    if (gs->double_ff) gb_kv_arr_i32(b, GK("feed_forward_length"), arr, (uint64_t)NL);
    else gb_kv_u32(b, GK("feed_forward_length"), (uint32_t)sp->n_ff);
    gb_kv_u32(b, GK("attention.head_count"), (uint32_t)sp->n_head);
    for (int l = 0; l < NL; l++) arr[l] = g4_kv(gs, l);
    gb_kv_arr_i32(b, GK("attention.head_count_kv"), arr, (uint64_t)NL);
    gb_kv_f32(b, GK("attention.layer_norm_rms_epsilon"), sp->rms_eps);
    gb_kv_f32(b, GK("rope.freq_base"), sp->rope_base);
    gb_kv_f32(b, GK("rope.freq_base_swa"), sp->rope_base_swa);
    gb_kv_u32(b, GK("attention.key_length"), (uint32_t)gs->hd_full);
    gb_kv_u32(b, GK("attention.value_length"), (uint32_t)gs->hd_full);
    gb_kv_u32(b, GK("attention.key_length_swa"), (uint32_t)sp->head_dim);
    gb_kv_u32(b, GK("attention.value_length_swa"), (uint32_t)sp->head_dim);
    gb_kv_u32(b, GK("rope.dimension_count"), (uint32_t)gs->hd_full);
    gb_kv_u32(b, GK("rope.dimension_count_swa"), (uint32_t)sp->head_dim);
    gb_kv_u32(b, GK("attention.sliding_window"), (uint32_t)sp->window);
    gb_arr_head(b, GK("attention.sliding_window_pattern"), GGUF_VT_BOOL, (uint64_t)NL);
    for (int l = 0; l < NL; l++) gb_u8(b, !g4_global(gs, l));
    gb_kv_u32(b, GK("attention.shared_kv_layers"), (uint32_t)gs->n_shared);
    gb_kv_u32(b, GK("embedding_length_per_layer_input"), (uint32_t)gs->n_ple);
    if (sp->final_softcap > 0) gb_kv_f32(b, GK("final_logit_softcapping"), sp->final_softcap);
    if (sp->n_expert) {
        gb_kv_u32(b, GK("expert_count"), (uint32_t)sp->n_expert);
        gb_kv_u32(b, GK("expert_used_count"), (uint32_t)sp->n_expert_used);
        gb_kv_u32(b, GK("expert_feed_forward_length"), (uint32_t)sp->n_ff_exp);
    }
#undef GK
    return n + tiny_vocab_keys(b, sp);
}

/* Writes gs's model to path. Returns 0 on success. */
static inline int g4_write(const char *path, const g4_spec *gs) {
    tiny_tensor *ts = calloc(TINY_MAX_TENSORS, sizeof(*ts));
    int nt = g4_tensors(gs, ts);
    gbuf b = {0};
    gb_bytes(&b, "GGUF", 4);
    gb_u32(&b, 3);
    gb_u64(&b, (uint64_t)nt);
    gb_u64(&b, 0); /* the key count, patched below */
    uint64_t n_kv = g4_keys(&b, gs);
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

typedef struct g4_ref {
    const g4_spec *gs;
    gguf_file *f;
    int n_tok, E, H;
    double *x;          /* (n_tok, E) residual stream */
    double *ple;        /* (n_tok, n_layer, n_ple) per-layer inputs */
    double *k, *v;      /* (n_layer, n_tok, max kv_dim) each layer's keys and values (as cached) */
    size_t kv_stride;   /* max kv_dim */
    double *xn, *tmp, *side, *g, *u, *att, *q, *big;
} g4_ref;

static inline double g4_gelu(double z) { return 0.5 * z * (1 + tanh(sqrt(2 / M_PI) * (z + 0.044715 * z * z * z))); }

/* x rounded to the nearest F16 value (ties to even; F16's subnormals below 2^-14). */
static inline double g4_f16(double x) {
    double a = fabs(x), step;
    int e;
    if (a < ldexp(1, -14)) step = ldexp(1, -24);
    else frexp(a, &e), step = ldexp(1, e - 11);
    return nearbyint(x / step) * step;
}

/* GELU of the reference: exact, or (gelu_f16) as llama.cpp's CPU GELU table gives it. */
static inline double g4_act(const g4_spec *gs, double z) {
    if (!gs->gelu_f16) return g4_gelu(z);
    if (z <= -10 || z >= 10) return z <= -10 ? 0 : z;
    return g4_f16(g4_gelu(g4_f16(z)));
}

/* Plain RMSNorm of n values (no weight). */
static inline void g4_rms(double *out, const double *x, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double sc = 1 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * sc;
}

/* NEOX RoPE of one head of hd at position t: the layer's kind's base and dims; a global layer's
 * pairs divided by rope_freqs (1e30: unrotated). */
static inline void g4_rope(const g4_ref *r, double *v, int hd, bool global, int t) {
    const tiny_spec *sp = &r->gs->base;
    const gguf_tensor *ff = ref_t(r->f, "rope_freqs.weight");
    double base = global ? sp->rope_base : sp->rope_base_swa;
    for (int i = 0; i < hd / 2; i++) {
        double th = t * pow(base, -2.0 * i / hd) / (global ? ref_elem(ff, (uint64_t)i) : 1.0);
        double x0 = v[i], x1 = v[i + hd / 2];
        v[i] = x0 * cos(th) - x1 * sin(th);
        v[i + hd / 2] = x0 * sin(th) + x1 * cos(th);
    }
}

/* Layer l's keys and values of position t (a layer with a cache of its own). */
static inline void g4_ref_kv(g4_ref *r, int l, int t) {
    const g4_spec *gs = r->gs;
    int hd = g4_hd(gs, l), HK = g4_kv(gs, l);
    double eps = gs->base.rms_eps, *k = r->k + ((size_t)l * r->n_tok + t) * r->kv_stride;
    double *v = r->v + ((size_t)l * r->n_tok + t) * r->kv_stride;
    ref_matvec(k, ref_tl(r->f, l, "attn_k.weight"), r->xn);
    if (g4_global(gs, l)) memcpy(v, k, sizeof(double) * (size_t)HK * hd); /* V = K's projection */
    else ref_matvec(v, ref_tl(r->f, l, "attn_v.weight"), r->xn);
    for (int h = 0; h < HK; h++) {
        ref_rmsnorm(k + h * hd, k + h * hd, ref_tl(r->f, l, "attn_k_norm.weight"), hd, eps);
        g4_rope(r, k + h * hd, hd, g4_global(gs, l), t);
        g4_rms(v + h * hd, v + h * hd, hd, eps);
    }
}

/* tmp = the attention sub-layer's output of position t at layer l (before the residual). */
static inline void g4_ref_attention(g4_ref *r, int l, int t) {
    const g4_spec *gs = r->gs;
    int hd = g4_hd(gs, l), H = r->H, G = H / g4_kv(gs, l), src = g4_kv_source(gs, l);
    double eps = gs->base.rms_eps;
    bool global = g4_global(gs, l);
    int j0 = !global && t - gs->base.window + 1 > 0 ? t - gs->base.window + 1 : 0;
    ref_rmsnorm(r->xn, r->x + (size_t)t * r->E, ref_tl(r->f, l, "attn_norm.weight"), r->E, eps);
    ref_matvec(r->q, ref_tl(r->f, l, "attn_q.weight"), r->xn);
    if (src == l) g4_ref_kv(r, l, t);
    for (int h = 0; h < H; h++) {
        double *q = r->q + h * hd, mx = -INFINITY, sum = 0;
        ref_rmsnorm(q, q, ref_tl(r->f, l, "attn_q_norm.weight"), hd, eps);
        g4_rope(r, q, hd, global, t);
        for (int j = j0; j <= t; j++) { /* scale 1 */
            const double *k = r->k + ((size_t)src * r->n_tok + j) * r->kv_stride + (size_t)(h / G) * hd;
            double s = 0;
            for (int i = 0; i < hd; i++) s += q[i] * k[i];
            r->big[j] = s, mx = s > mx ? s : mx;
        }
        for (int j = j0; j <= t; j++) sum += r->big[j] = exp(r->big[j] - mx);
        for (int i = 0; i < hd; i++) {
            double a = 0;
            for (int j = j0; j <= t; j++)
                a += r->big[j] / sum * r->v[((size_t)src * r->n_tok + j) * r->kv_stride + (size_t)(h / G) * hd + i];
            r->att[h * hd + i] = a;
        }
    }
    ref_matvec(r->tmp, ref_tl(r->f, l, "attn_output.weight"), r->att);
    ref_rmsnorm(r->tmp, r->tmp, ref_tl(r->f, l, "post_attention_norm.weight"), r->E, eps);
}

/* out = W_down gelu(W_gate xn) * (W_up xn) over F rows (gate, up and down given). */
static inline void g4_geglu(g4_ref *r, double *out, const gguf_tensor *wg, const gguf_tensor *wu, uint64_t g0,
                            uint64_t u0, const gguf_tensor *wd, uint64_t d0, int F) {
    ref_matvec_rows(r->g, wg, g0, (uint64_t)F, r->xn);
    ref_matvec_rows(r->u, wu, u0, (uint64_t)F, r->xn);
    for (int i = 0; i < F; i++) r->g[i] = g4_act(r->gs, r->g[i]) * r->u[i];
    ref_matvec_rows(out, wd, d0, (uint64_t)r->E, r->g);
}

/* side += the experts of layer l for position t (x: the sub-layer's input): routed on
 * rmsnorm(x) / sqrt(E) * scale, softmax, top k renormalised, each output times its scale. */
static inline void g4_ref_experts(g4_ref *r, int l, const double *x) {
    const tiny_spec *sp = &r->gs->base;
    int NE = sp->n_expert, K = sp->n_expert_used, FE = sp->n_ff_exp, E = r->E;
    double *pr = malloc(sizeof(double) * (size_t)NE), *acc = calloc((size_t)E, sizeof(double)), mx = -INFINITY, z = 0;
    g4_rms(r->xn, x, E, sp->rms_eps);
    for (int i = 0; i < E; i++) r->xn[i] *= ref_elem(ref_tl(r->f, l, "ffn_gate_inp.scale"), (uint64_t)i) / sqrt((double)E);
    ref_matvec(pr, ref_tl(r->f, l, "ffn_gate_inp.weight"), r->xn);
    for (int i = 0; i < NE; i++) mx = pr[i] > mx ? pr[i] : mx;
    for (int i = 0; i < NE; i++) z += pr[i] = exp(pr[i] - mx);
    int sel[64];
    double wsum = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < NE; i++) {
            bool used = false;
            for (int j = 0; j < k; j++) used |= sel[j] == i;
            if (!used && (best < 0 || pr[i] > pr[best])) best = i;
        }
        sel[k] = best, wsum += pr[best] / z;
    }
    ref_rmsnorm(r->xn, x, ref_tl(r->f, l, "pre_ffw_norm_2.weight"), E, sp->rms_eps);
    const gguf_tensor *gu = ref_tl(r->f, l, "ffn_gate_up_exps.weight"), *wd = ref_tl(r->f, l, "ffn_down_exps.weight");
    for (int k = 0; k < K; k++) {
        uint64_t ex = (uint64_t)sel[k], g0 = gu ? ex * 2 * FE : ex * FE, u0 = gu ? g0 + FE : ex * FE;
        g4_geglu(r, r->tmp, gu ? gu : ref_tl(r->f, l, "ffn_gate_exps.weight"),
                 gu ? gu : ref_tl(r->f, l, "ffn_up_exps.weight"), g0, u0, wd, ex * E, FE);
        double w = pr[ex] / z / wsum * ref_elem(ref_tl(r->f, l, "ffn_down_exps.scale"), ex);
        for (int i = 0; i < E; i++) acc[i] += w * r->tmp[i];
    }
    ref_rmsnorm(acc, acc, ref_tl(r->f, l, "post_ffw_norm_2.weight"), E, sp->rms_eps);
    for (int i = 0; i < E; i++) r->side[i] += acc[i];
    free(pr), free(acc);
}

/* tmp = the FFN sub-layer's output of position t at layer l, x its input (post_ffw_norm applied). */
static inline void g4_ref_ffn(g4_ref *r, int l, const double *x) {
    const tiny_spec *sp = &r->gs->base;
    int E = r->E;
    ref_rmsnorm(r->xn, x, ref_tl(r->f, l, "ffn_norm.weight"), E, sp->rms_eps);
    g4_geglu(r, r->side, ref_tl(r->f, l, "ffn_gate.weight"), ref_tl(r->f, l, "ffn_up.weight"), 0, 0,
             ref_tl(r->f, l, "ffn_down.weight"), 0, g4_ff(r->gs, l));
    if (sp->n_expert) {
        ref_rmsnorm(r->side, r->side, ref_tl(r->f, l, "post_ffw_norm_1.weight"), E, sp->rms_eps);
        g4_ref_experts(r, l, x);
    }
    ref_rmsnorm(r->tmp, r->side, ref_tl(r->f, l, "post_ffw_norm.weight"), E, sp->rms_eps);
}

/* ple[t] = (rmsnorm((x W_model_proj)[l] / sqrt(E)) * norm + per_layer_token_embd[tok][l] sqrt(P)) / sqrt(2). */
static inline void g4_ref_ple_inputs(g4_ref *r, const int32_t *tokens) {
    const g4_spec *gs = r->gs;
    int P = gs->n_ple, NL = gs->base.n_layer, W = P * NL;
    double *proj = malloc(sizeof(double) * (size_t)W);
    const gguf_tensor *emb = ref_t(r->f, "per_layer_token_embd.weight"), *nw = ref_t(r->f, "per_layer_proj_norm.weight");
    for (int t = 0; t < r->n_tok; t++) {
        ref_matvec(proj, ref_t(r->f, "per_layer_model_proj.weight"), r->x + (size_t)t * r->E);
        for (int l = 0; l < NL; l++) {
            double *p = proj + (size_t)l * P;
            for (int i = 0; i < P; i++) p[i] /= sqrt((double)r->E);
            ref_rmsnorm(p, p, nw, P, gs->base.rms_eps);
        }
        for (int i = 0; i < W; i++)
            r->ple[(size_t)t * W + i] = (proj[i] + ref_elem(emb, (uint64_t)tokens[t] * W + i) * sqrt((double)P)) / sqrt(2.0);
    }
    free(proj);
}

/* x += rmsnorm((gelu(x W_inp_gate) * ple[t][l]) W_proj) * post_norm. */
static inline void g4_ref_ple(g4_ref *r, int l, int t, double *x) {
    const g4_spec *gs = r->gs;
    int P = gs->n_ple, W = P * gs->base.n_layer;
    ref_matvec(r->g, ref_tl(r->f, l, "inp_gate.weight"), x);
    for (int i = 0; i < P; i++) r->g[i] = g4_act(gs, r->g[i]) * r->ple[(size_t)t * W + (size_t)l * P + i];
    ref_matvec(r->tmp, ref_tl(r->f, l, "proj.weight"), r->g);
    ref_rmsnorm(r->tmp, r->tmp, ref_tl(r->f, l, "post_norm.weight"), r->E, gs->base.rms_eps);
    for (int i = 0; i < r->E; i++) x[i] += r->tmp[i];
}

/* Logits (n_tok, n_vocab) of every position of tokens, from scratch in double. */
static inline void g4_ref_forward(const g4_spec *gs, const char *path, const int32_t *tokens, int n_tok,
                                  double *logits) {
    const tiny_spec *sp = &gs->base;
    g4_ref r = {.gs = gs, .n_tok = n_tok, .E = sp->n_embd, .H = sp->n_head};
    if (gguf_open(&r.f, path, NULL) != ATTND_OK) abort();
    int E = r.E, NL = sp->n_layer, hdm = gs->hd_full > sp->head_dim ? gs->hd_full : sp->head_dim;
    int kvm = gs->kv_full > sp->n_head_kv ? gs->kv_full : sp->n_head_kv, F = 2 * sp->n_ff;
    if (sp->n_ff_exp > F) F = sp->n_ff_exp;
    if (gs->n_ple > F) F = gs->n_ple;
    r.kv_stride = (size_t)hdm * kvm;
    r.x = malloc(sizeof(double) * (size_t)n_tok * E);
    r.ple = malloc(sizeof(double) * (size_t)n_tok * NL * (gs->n_ple + 1));
    r.k = malloc(sizeof(double) * (size_t)NL * n_tok * r.kv_stride);
    r.v = malloc(sizeof(double) * (size_t)NL * n_tok * r.kv_stride);
    r.xn = malloc(sizeof(double) * E), r.tmp = malloc(sizeof(double) * E), r.side = malloc(sizeof(double) * E);
    r.g = malloc(sizeof(double) * (size_t)F), r.u = malloc(sizeof(double) * (size_t)F);
    r.att = malloc(sizeof(double) * (size_t)r.H * hdm), r.q = malloc(sizeof(double) * (size_t)r.H * hdm);
    r.big = malloc(sizeof(double) * (size_t)n_tok);
    const gguf_tensor *emb = ref_t(r.f, "token_embd.weight");
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < E; i++) r.x[(size_t)t * E + i] = ref_elem(emb, (uint64_t)tokens[t] * E + i) * sqrt((double)E);
    if (gs->n_ple) g4_ref_ple_inputs(&r, tokens);
    for (int l = 0; l < NL; l++)
        for (int t = 0; t < n_tok; t++) { /* position by position: t's keys are cached before t attends */
            double *x = r.x + (size_t)t * E;
            g4_ref_attention(&r, l, t);
            for (int i = 0; i < E; i++) x[i] += r.tmp[i];
            g4_ref_ffn(&r, l, x);
            for (int i = 0; i < E; i++) x[i] += r.tmp[i];
            if (gs->n_ple) g4_ref_ple(&r, l, t, x);
            double sc = ref_elem(ref_tl(r.f, l, "layer_output_scale.weight"), 0);
            for (int i = 0; i < E; i++) x[i] *= sc;
        }
    for (int t = 0; t < n_tok; t++) {
        double *lg = logits + (size_t)t * sp->n_vocab;
        ref_rmsnorm(r.xn, r.x + (size_t)t * E, ref_t(r.f, "output_norm.weight"), E, sp->rms_eps);
        ref_matvec(lg, ref_t(r.f, "token_embd.weight"), r.xn);
        for (int i = 0; sp->final_softcap > 0 && i < sp->n_vocab; i++)
            lg[i] = sp->final_softcap * tanh(lg[i] / sp->final_softcap);
    }
    free(r.x), free(r.ple), free(r.k), free(r.v), free(r.xn), free(r.tmp), free(r.side), free(r.g), free(r.u);
    free(r.att), free(r.q), free(r.big);
    gguf_close(r.f);
}

#endif /* ATTND_TEST_GEMMA4_FIXTURE_H */
