/*
 * hybrid_fixture.h — (tests only) random-weight Qwen3.5 models (`qwen35`, `qwen35moe`): Gated
 * DeltaNet layers with every full_attention_interval-th layer gated attention, and an
 * independent float64 reference forward pass for them, written from the model's definition
 * (llama.cpp's qwen35 graph and the HF converter's conventions), not from engine/deltanet.c.
 *
 * The files are written with engine_fixture.h's key writer (its vocabulary, so that llama.cpp
 * loads them) and tensor helpers; the tensors, the hybrid keys and the reference are this file's.
 */
#ifndef ATTND_TEST_HYBRID_FIXTURE_H
#define ATTND_TEST_HYBRID_FIXTURE_H

#include "engine_fixture.h"

typedef struct hy_spec {
    tiny_spec base;       /* arch, vocabulary, widths, heads (head_dim), rope, eps, experts, seed;
                             base.n_layer = the layers run (MTP blocks come on top) */
    int interval;         /* full_attention_interval: layer l is attention when (l + 1) % interval == 0 */
    int conv_k, hk, hv, dk; /* DeltaNet: conv taps, key heads, value heads, head size (value = key) */
    int n_ff_shexp;       /* qwen35moe: the shared expert's width */
    int n_mtp;            /* nextn_predict_layers: MTP blocks written after the main ones */
    /* A drafting benchmark's file (tools/bench/bench_mtp.c; n_mtp 1): the main layers' output
     * projections scaled by 1/64, so the next token follows from the current one (output head on
     * the embedding), and an MTP block that passes its embedding half through (eh_proj [I | 0],
     * enorm 1, the block's outputs 0, shared_head_norm = output_norm) with its own embed_tokens:
     * the main model's row for a share mtp_share of the tokens (its draft then is the main
     * model's next token), a random row for the others. */
    bool mtp_good;
    float mtp_share;
} hy_spec;

static inline bool hy_is_attn(const hy_spec *hs, int l) { return (l + 1) % hs->interval == 0; }
static inline bool hy_moe(const hy_spec *hs) { return hs->base.n_expert > 0; }
/* Qwen3-Next's conventions: V heads in the checkpoint's grouped order (value head h reads key head
 * h / (hv / hk)) and beta, alpha fused per key head (ssm_ba); Qwen3.5's converter reorders
 * V heads (h reads h mod hk) and keeps ssm_beta, ssm_alpha apart. */
static inline bool hy_next(const hy_spec *hs) { return !strcmp(hs->base.arch, "qwen3next"); }
static inline int hy_conv_dim(const hy_spec *hs) { return 2 * hs->hk * hs->dk + hs->hv * hs->dk; }

#define HADD(nm, d0, d1, ty, scale, offs) tiny_add(ts, nt, rng, nm, (uint64_t)(d0), (uint64_t)(d1), ty, scale, offs)
#define HNAME(s) (snprintf(nm, sizeof(nm), "blk.%d.%s", l, s), nm)

/* The token mixer of layer l: gated attention, or the Gated DeltaNet's tensors. */
static inline void hy_mixer_tensors(const hy_spec *hs, int l, tiny_tensor *ts, int *nt, uint64_t *rng) {
    const tiny_spec *sp = &hs->base;
    char nm[64];
    uint64_t E = (uint64_t)sp->n_embd, hd = (uint64_t)tiny_head_dim(sp), Q = hd * (uint64_t)sp->n_head;
    uint64_t KV = hd * (uint64_t)sp->n_head_kv, C = (uint64_t)hy_conv_dim(hs), VD = (uint64_t)(hs->hv * hs->dk);
    float ws = 1.0f / sqrtf((float)sp->n_embd) * 1.7f;
    HADD(HNAME("attn_norm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    if (hy_is_attn(hs, l) || l >= sp->n_layer) { /* MTP blocks are attention blocks too */
        HADD(HNAME("attn_q.weight"), E, 2 * Q, sp->wtype, ws, 0.0f);
        HADD(HNAME("attn_k.weight"), E, KV, sp->wtype, ws, 0.0f);
        HADD(HNAME("attn_v.weight"), E, KV, sp->wtype, ws, 0.0f);
        HADD(HNAME("attn_q_norm.weight"), hd, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        HADD(HNAME("attn_k_norm.weight"), hd, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        HADD(HNAME("attn_output.weight"), Q, E, sp->wtype, 1.7f / sqrtf((float)Q), 0.0f);
    } else {
        HADD(HNAME("attn_qkv.weight"), E, C, sp->wtype, ws, 0.0f);
        HADD(HNAME("attn_gate.weight"), E, VD, sp->wtype, ws, 0.0f);
        HADD(HNAME("ssm_conv1d.weight"), (uint64_t)hs->conv_k, C, GGUF_TYPE_F32, 0.6f, 0.0f);
        HADD(HNAME("ssm_dt.bias"), (uint64_t)hs->hv, 1, GGUF_TYPE_F32, 1.0f, 0.0f);
        HADD(HNAME("ssm_a"), (uint64_t)hs->hv, 1, GGUF_TYPE_F32, 1.5f, 0.0f);
        tiny_tensor *a = &ts[*nt - 1]; /* stored as -exp(A_log) */
        for (int h = 0; h < hs->hv; h++) a->vals[h] = -expf(a->vals[h]);
        if (hy_next(hs)) {
            HADD(HNAME("ssm_ba.weight"), E, 2 * (uint64_t)hs->hv, sp->wtype, ws, 0.0f);
        } else {
            HADD(HNAME("ssm_beta.weight"), E, (uint64_t)hs->hv, sp->wtype, ws, 0.0f);
            HADD(HNAME("ssm_alpha.weight"), E, (uint64_t)hs->hv, sp->wtype, ws, 0.0f);
        }
        HADD(HNAME("ssm_norm.weight"), (uint64_t)hs->dk, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        HADD(HNAME("ssm_out.weight"), VD, E, sp->wtype, 1.7f / sqrtf((float)VD), 0.0f);
    }
    HADD(HNAME("post_attention_norm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
}

/* Layer l's FFN: SwiGLU, or routed experts with the gated shared expert. */
static inline void hy_ffn_tensors(const hy_spec *hs, int l, tiny_tensor *ts, int *nt, uint64_t *rng) {
    const tiny_spec *sp = &hs->base;
    char nm[64];
    uint64_t E = (uint64_t)sp->n_embd, F = (uint64_t)sp->n_ff;
    float ws = 1.0f / sqrtf((float)sp->n_embd) * 1.7f;
    if (!hy_moe(hs)) {
        HADD(HNAME("ffn_gate.weight"), E, F, sp->wtype, ws, 0.0f);
        HADD(HNAME("ffn_up.weight"), E, F, sp->wtype, ws, 0.0f);
        HADD(HNAME("ffn_down.weight"), F, E, sp->wtype, 1.7f / sqrtf((float)F), 0.0f);
        return;
    }
    uint64_t FE = (uint64_t)sp->n_ff_exp, NE = (uint64_t)sp->n_expert, FS = (uint64_t)hs->n_ff_shexp;
    HADD(HNAME("ffn_gate_inp.weight"), E, NE, GGUF_TYPE_F32, 2.0f * ws, 0.0f);
    const char *exps[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
    for (int i = 0; i < 3; i++) { /* [d0, d1, n_expert] */
        uint64_t d0 = i < 2 ? E : FE, d1 = i < 2 ? FE : E;
        HADD(HNAME(exps[i]), d0, d1 * NE, sp->wtype, i < 2 ? ws : 1.7f / sqrtf((float)FE), 0.0f);
        ts[*nt - 1].ne[1] = d1, ts[*nt - 1].ne[2] = NE, ts[*nt - 1].n_dims = 3;
    }
    HADD(HNAME("ffn_gate_inp_shexp.weight"), E, 1, GGUF_TYPE_F32, 2.0f * ws, 0.0f);
    HADD(HNAME("ffn_gate_shexp.weight"), E, FS, sp->wtype, ws, 0.0f);
    HADD(HNAME("ffn_up_shexp.weight"), E, FS, sp->wtype, ws, 0.0f);
    HADD(HNAME("ffn_down_shexp.weight"), FS, E, sp->wtype, 1.7f / sqrtf((float)FS), 0.0f);
}

static inline tiny_tensor *hy_find(tiny_tensor *ts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(ts[i].name, name)) return &ts[i];
    return NULL;
}

/* hy_spec.mtp_good's edits of the random tensors. */
static inline void hy_make_good(const hy_spec *hs, tiny_tensor *ts, int n) {
    const tiny_spec *sp = &hs->base;
    uint64_t E = (uint64_t)sp->n_embd, L = (uint64_t)sp->n_layer;
    char nm[96];
    for (int i = 0; i < n; i++) {
        unsigned l;
        char rest[64];
        if (sscanf(ts[i].name, "blk.%u.%63s", &l, rest) != 2) continue;
        bool out = !strcmp(rest, "attn_output.weight") || !strcmp(rest, "ssm_out.weight") ||
                   !strncmp(rest, "ffn_down", 8);
        uint64_t cnt = ts[i].ne[0] * ts[i].ne[1] * ts[i].ne[2];
        for (uint64_t k = 0; out && k < cnt; k++) ts[i].vals[k] *= l < L ? 1.0f / 64 : 0.0f;
    }
    snprintf(nm, sizeof(nm), "blk.%d.nextn.eh_proj.weight", (int)L);
    tiny_tensor *eh = hy_find(ts, n, nm);
    for (uint64_t r = 0; r < E; r++)
        for (uint64_t c = 0; c < 2 * E; c++) eh->vals[r * 2 * E + c] = c == r ? 1.0f : 0.0f;
    snprintf(nm, sizeof(nm), "blk.%d.nextn.enorm.weight", (int)L);
    tiny_tensor *en = hy_find(ts, n, nm);
    for (uint64_t c = 0; c < E; c++) en->vals[c] = 1.0f;
    snprintf(nm, sizeof(nm), "blk.%d.nextn.shared_head_norm.weight", (int)L);
    memcpy(hy_find(ts, n, nm)->vals, hy_find(ts, n, "output_norm.weight")->vals, sizeof(float) * E);
    snprintf(nm, sizeof(nm), "blk.%d.nextn.embed_tokens.weight", (int)L);
    tiny_tensor *me = hy_find(ts, n, nm);
    const tiny_tensor *te = hy_find(ts, n, "token_embd.weight");
    for (int v = 0; v < sp->n_vocab; v++) {
        uint64_t h = (uint64_t)v * 0x9E3779B97F4A7C15ULL;
        if ((double)(h >> 11) / 9007199254740992.0 < hs->mtp_share)
            memcpy(me->vals + (uint64_t)v * E, te->vals + (uint64_t)v * E, sizeof(float) * E);
    }
}

/* The tensors of hs's model (the MTP blocks last: the main ones are the same with or without). */
static inline int hy_tensors(const hy_spec *hs, tiny_tensor *ts) {
    const tiny_spec *sp = &hs->base;
    int n = 0, *nt = &n;
    uint64_t seed = sp->seed, *rng = &seed, E = (uint64_t)sp->n_embd;
    HADD("token_embd.weight", E, (uint64_t)sp->n_vocab, sp->wtype, 1.0f, 0.0f);
    HADD("output_norm.weight", E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
    if (!sp->tied) HADD("output.weight", E, (uint64_t)sp->n_vocab, sp->wtype, 0.5f, 0.0f);
    for (int l = 0; l < sp->n_layer + hs->n_mtp; l++) {
        hy_mixer_tensors(hs, l, ts, nt, rng);
        hy_ffn_tensors(hs, l, ts, nt, rng);
        if (l < sp->n_layer) continue;
        char nm[64];
        HADD(HNAME("nextn.eh_proj.weight"), 2 * E, E, sp->wtype, 0.1f, 0.0f);
        HADD(HNAME("nextn.enorm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        HADD(HNAME("nextn.hnorm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        HADD(HNAME("nextn.shared_head_norm.weight"), E, 1, GGUF_TYPE_F32, 0.2f, 1.0f);
        if (hs->mtp_good) HADD(HNAME("nextn.embed_tokens.weight"), E, (uint64_t)sp->n_vocab, sp->wtype, 1.0f, 0.0f);
    }
    if (hs->mtp_good) hy_make_good(hs, ts, n);
    return n;
}
#undef HNAME
#undef HADD

/* Writes hs's model to path (keys: engine_fixture.h's common ones and vocabulary, then the
 * hybrid ones). Returns 0 on success. */
static inline int hy_write(const char *path, const hy_spec *hs) {
    tiny_tensor *ts = calloc(TINY_MAX_TENSORS, sizeof(*ts));
    int nt = hy_tensors(hs, ts);
    tiny_spec sp = hs->base;
    sp.n_layer += hs->n_mtp; /* block_count counts the MTP blocks */
    gbuf b = {0};
    gb_bytes(&b, "GGUF", 4);
    gb_u32(&b, 3);
    gb_u64(&b, (uint64_t)nt);
    gb_u64(&b, 0); /* the key count, patched below */
    uint64_t n_kv = tiny_keys(&b, &sp);
    char key[96];
#define HK(s) (n_kv++, snprintf(key, sizeof(key), "%s.%s", sp.arch, s), key)
    gb_kv_u32(&b, HK("full_attention_interval"), (uint32_t)hs->interval);
    gb_kv_u32(&b, HK("ssm.conv_kernel"), (uint32_t)hs->conv_k);
    gb_kv_u32(&b, HK("ssm.state_size"), (uint32_t)hs->dk);
    gb_kv_u32(&b, HK("ssm.group_count"), (uint32_t)hs->hk);
    gb_kv_u32(&b, HK("ssm.time_step_rank"), (uint32_t)hs->hv);
    gb_kv_u32(&b, HK("ssm.inner_size"), (uint32_t)(hs->hv * hs->dk));
    int32_t sections[4] = {11, 11, 10, 0};
    if (!hy_next(hs)) gb_kv_arr_i32(&b, HK("rope.dimension_sections"), sections, 4);
    if (hs->n_mtp) gb_kv_u32(&b, HK("nextn_predict_layers"), (uint32_t)hs->n_mtp);
    if (hy_moe(hs)) gb_kv_u32(&b, HK("expert_shared_feed_forward_length"), (uint32_t)hs->n_ff_shexp);
#undef HK
    memcpy(b.p + 16, &n_kv, 8);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        gb_str(&b, ts[i].name);
        gb_u32(&b, (uint32_t)ts[i].n_dims);
        for (int d = 0; d < ts[i].n_dims; d++) gb_u64(&b, ts[i].ne[d]);
        gb_u32(&b, ts[i].type);
        gb_u64(&b, off);
        uint64_t bytes = ts[i].ne[0] * ts[i].ne[1] * ts[i].ne[2] * (ts[i].type == GGUF_TYPE_F32 ? 4 : 2);
        off += (bytes + 31) / 32 * 32;
    }
    static const uint8_t zeros[32];
    gb_bytes(&b, zeros, (32 - b.n % 32) % 32);
    for (int i = 0; i < nt; i++) {
        uint64_t n = ts[i].ne[0] * ts[i].ne[1] * ts[i].ne[2], bytes = n * (ts[i].type == GGUF_TYPE_F32 ? 4 : 2);
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

typedef struct hy_ref {
    const hy_spec *hs;
    gguf_file *f;
    int n_tok, E, H, HK, hd, Q, KV, C, VD;
    double *x;        /* (n_tok, E) residual stream */
    double *xn;       /* (n_tok, E) the current sub-layer's normed input */
    double *mix;      /* (n_tok, E) the mixer's output */
} hy_ref;

static inline double hy_sigmoid(double v) { return 1 / (1 + exp(-v)); }
static inline double hy_silu(double v) { return v / (1 + exp(-v)); }

/* Gated attention of layer l over all positions: [q | gate] per head, q and k RMS-normed, NEOX
 * RoPE over rope_dims, causal softmax with grouped KV heads, times sigmoid(gate), W_o. */
static inline void hy_ref_attention(hy_ref *r, int l) {
    const tiny_spec *sp = &r->hs->base;
    int n = r->n_tok, hd = r->hd, H = r->H, G = H / r->HK, rd = sp->rope_dims;
    double *qf = malloc(sizeof(double) * 2 * r->Q), *q = malloc(sizeof(double) * (size_t)n * r->Q);
    double *gate = malloc(sizeof(double) * (size_t)n * r->Q), *k = malloc(sizeof(double) * (size_t)n * r->KV);
    double *v = malloc(sizeof(double) * (size_t)n * r->KV), *att = malloc(sizeof(double) * r->Q);
    double *sc = malloc(sizeof(double) * (size_t)n);
    for (int t = 0; t < n; t++) {
        const double *xn = r->xn + (size_t)t * r->E;
        ref_matvec(qf, ref_tl(r->f, l, "attn_q.weight"), xn);
        ref_matvec(k + (size_t)t * r->KV, ref_tl(r->f, l, "attn_k.weight"), xn);
        ref_matvec(v + (size_t)t * r->KV, ref_tl(r->f, l, "attn_v.weight"), xn);
        for (int h = 0; h < H; h++) {
            memcpy(q + (size_t)t * r->Q + h * hd, qf + 2 * h * hd, sizeof(double) * hd);
            memcpy(gate + (size_t)t * r->Q + h * hd, qf + 2 * h * hd + hd, sizeof(double) * hd);
        }
        for (int which = 0; which < 2; which++) {
            int nh = which ? r->HK : H;
            double *base = which ? k + (size_t)t * r->KV : q + (size_t)t * r->Q;
            const gguf_tensor *nw = ref_tl(r->f, l, which ? "attn_k_norm.weight" : "attn_q_norm.weight");
            for (int h = 0; h < nh; h++) {
                double *vv = base + (size_t)h * hd;
                ref_rmsnorm(vv, vv, nw, hd, sp->rms_eps);
                for (int i = 0; i < rd / 2; i++) {
                    double th = t * pow(sp->rope_base, -2.0 * i / rd), x0 = vv[i], x1 = vv[i + rd / 2];
                    vv[i] = x0 * cos(th) - x1 * sin(th);
                    vv[i + rd / 2] = x0 * sin(th) + x1 * cos(th);
                }
            }
        }
    }
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < H; h++) {
            const double *qh = q + (size_t)t * r->Q + h * hd;
            int kh = h / G;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= t; j++) {
                double s = 0;
                for (int i = 0; i < hd; i++) s += qh[i] * k[(size_t)j * r->KV + kh * hd + i];
                sc[j] = s / sqrt((double)hd);
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j <= t; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int i = 0; i < hd; i++) {
                double a = 0;
                for (int j = 0; j <= t; j++) a += sc[j] / sum * v[(size_t)j * r->KV + kh * hd + i];
                att[h * hd + i] = a * hy_sigmoid(gate[(size_t)t * r->Q + h * hd + i]);
            }
        }
        ref_matvec(r->mix + (size_t)t * r->E, ref_tl(r->f, l, "attn_output.weight"), att);
    }
    free(qf), free(q), free(gate), free(k), free(v), free(att), free(sc);
}

/* The Gated DeltaNet of layer l over all positions, as the model defines it (deltanet.h's
 * equations), in double: the conv over the last conv_k raw projections (zeros before 0), SiLU,
 * L2 norms, the delta rule per value head on S (dk x dv), the gated RMSNorm, W_out. */
static inline void hy_ref_deltanet(hy_ref *r, int l) {
    const hy_spec *hs = r->hs;
    int n = r->n_tok, C = r->C, K = hs->conv_k, dk = hs->dk, hv = hs->hv, hk = hs->hk;
    double eps = hs->base.rms_eps;
    double *raw = malloc(sizeof(double) * (size_t)n * C), *c = malloc(sizeof(double) * C);
    double *z = malloc(sizeof(double) * r->VD), *b = malloc(sizeof(double) * 2 * hv), *a = malloc(sizeof(double) * hv);
    double *S = calloc((size_t)hv * dk * dk, sizeof(double)), *o = malloc(sizeof(double) * r->VD);
    double *u = malloc(sizeof(double) * dk);
    const gguf_tensor *cw = ref_tl(r->f, l, "ssm_conv1d.weight"), *nw = ref_tl(r->f, l, "ssm_norm.weight");
    for (int t = 0; t < n; t++) {
        const double *xn = r->xn + (size_t)t * r->E;
        ref_matvec(raw + (size_t)t * C, ref_tl(r->f, l, "attn_qkv.weight"), xn);
        ref_matvec(z, ref_tl(r->f, l, "attn_gate.weight"), xn);
        int rep = hv / hk;
        if (hy_next(hs)) { /* key head g: its rep betas, then its rep alphas */
            ref_matvec(b, ref_tl(r->f, l, "ssm_ba.weight"), xn);
            double *ba = malloc(sizeof(double) * 2 * hv);
            memcpy(ba, b, sizeof(double) * 2 * hv);
            for (int h = 0; h < hv; h++) b[h] = ba[(h / rep) * 2 * rep + h % rep], a[h] = ba[(h / rep) * 2 * rep + rep + h % rep];
            free(ba);
        } else {
            ref_matvec(b, ref_tl(r->f, l, "ssm_beta.weight"), xn);
            ref_matvec(a, ref_tl(r->f, l, "ssm_alpha.weight"), xn);
        }
        for (int ch = 0; ch < C; ch++) {
            double s = 0;
            for (int tap = 0; tap < K; tap++) { /* tap K - 1 is position t itself */
                int j = t - (K - 1) + tap;
                if (j >= 0) s += raw[(size_t)j * C + ch] * ref_elem(cw, (uint64_t)ch * K + tap);
            }
            c[ch] = hy_silu(s);
        }
        for (int h = 0; h < 2 * hk; h++) {
            double ss = 0, *vv = c + (size_t)h * dk;
            for (int i = 0; i < dk; i++) ss += vv[i] * vv[i];
            double nrm = sqrt(ss) > eps ? sqrt(ss) : eps;
            for (int i = 0; i < dk; i++) vv[i] /= nrm;
        }
        for (int h = 0; h < hv; h++) {
            int kh = hy_next(hs) ? h / rep : h % hk;
            const double *q = c + (size_t)kh * dk, *k = c + (size_t)(hk + kh) * dk;
            const double *v = c + (size_t)2 * hk * dk + (size_t)h * dk;
            double beta = hy_sigmoid(b[h]), sp_in = a[h] + ref_elem(ref_tl(r->f, l, "ssm_dt.bias"), (uint64_t)h);
            double g = ref_elem(ref_tl(r->f, l, "ssm_a"), (uint64_t)h) * log1p(exp(sp_in));
            double *Sh = S + (size_t)h * dk * dk; /* Sh[i * dk + j] = S[i][j], i over keys */
            double decay = exp(g);
            for (int i = 0; i < dk * dk; i++) Sh[i] *= decay;
            /* the sums over i run row by row (the same order for every j as a column walk) */
            double *sk = o + (size_t)h * dk; /* S^T k, in the output's place until o is formed */
            for (int j = 0; j < dk; j++) sk[j] = 0;
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dk; j++) sk[j] += Sh[i * dk + j] * k[i];
            for (int j = 0; j < dk; j++) u[j] = beta * (v[j] - sk[j]);
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dk; j++) Sh[i * dk + j] += k[i] * u[j];
            double ss = 0, *oh = o + (size_t)h * dk;
            for (int j = 0; j < dk; j++) oh[j] = 0;
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dk; j++) oh[j] += Sh[i * dk + j] * q[i];
            for (int j = 0; j < dk; j++) {
                oh[j] /= sqrt((double)dk);
                ss += oh[j] * oh[j];
            }
            double rs = 1 / sqrt(ss / dk + eps);
            for (int j = 0; j < dk; j++) oh[j] = oh[j] * rs * ref_elem(nw, (uint64_t)j) * hy_silu(z[h * dk + j]);
        }
        ref_matvec(r->mix + (size_t)t * r->E, ref_tl(r->f, l, "ssm_out.weight"), o);
    }
    free(raw), free(c), free(z), free(b), free(a), free(S), free(o), free(u);
}

/* out = rows [r0, r0 + n) of w (a 3-D expert tensor read as 2-D) times x. */
static inline void hy_rows(double *out, const gguf_tensor *w, uint64_t r0, uint64_t n, const double *x) {
    for (uint64_t i = 0; i < n; i++) {
        double s = 0;
        for (uint64_t c = 0; c < w->ne[0]; c++) s += ref_elem(w, (r0 + i) * w->ne[0] + c) * x[c];
        out[i] = s;
    }
}

/* out = W_down silu(W_gate x) * (W_up x) with the rows of one expert (r0 = its first row) or a
 * dense FFN (r0 = 0, rows = its width). */
static inline void hy_swiglu(double *out, const gguf_tensor *wg, const gguf_tensor *wu, const gguf_tensor *wd,
                             uint64_t ex, uint64_t F, uint64_t E, const double *x) {
    double *g = malloc(sizeof(double) * F), *u = malloc(sizeof(double) * F);
    hy_rows(g, wg, ex * F, F, x);
    hy_rows(u, wu, ex * F, F, x);
    for (uint64_t i = 0; i < F; i++) g[i] = hy_silu(g[i]) * u[i];
    hy_rows(out, wd, ex * E, E, g);
    free(g), free(u);
}

/* Position t's FFN of layer l (on r->xn), added to x: SwiGLU, or the top-k of a softmax router
 * renormalised plus sigmoid(w_shexp . xn) times the shared expert. */
static inline void hy_ref_ffn(hy_ref *r, int l, int t) {
    const tiny_spec *sp = &r->hs->base;
    uint64_t E = (uint64_t)r->E;
    const double *xn = r->xn + (size_t)t * E;
    double *x = r->x + (size_t)t * E, *o = malloc(sizeof(double) * E);
    if (!hy_moe(r->hs)) {
        hy_swiglu(o, ref_tl(r->f, l, "ffn_gate.weight"), ref_tl(r->f, l, "ffn_up.weight"),
                  ref_tl(r->f, l, "ffn_down.weight"), 0, (uint64_t)sp->n_ff, E, xn);
        for (uint64_t i = 0; i < E; i++) x[i] += o[i];
        free(o);
        return;
    }
    int NE = sp->n_expert, K = sp->n_expert_used;
    double *pr = malloc(sizeof(double) * NE), mx = -INFINITY, wsum = 0;
    int *sel = malloc(sizeof(int) * K);
    ref_matvec(pr, ref_tl(r->f, l, "ffn_gate_inp.weight"), xn);
    for (int i = 0; i < NE; i++) mx = pr[i] > mx ? pr[i] : mx;
    for (int i = 0; i < NE; i++) pr[i] = exp(pr[i] - mx); /* the softmax's sum cancels in the renormalisation */
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < NE; i++) {
            bool used = false;
            for (int j = 0; j < k; j++) used |= sel[j] == i;
            if (!used && (best < 0 || pr[i] > pr[best])) best = i;
        }
        sel[k] = best;
        wsum += pr[best];
    }
    for (int k = 0; k < K; k++) {
        hy_swiglu(o, ref_tl(r->f, l, "ffn_gate_exps.weight"), ref_tl(r->f, l, "ffn_up_exps.weight"),
                  ref_tl(r->f, l, "ffn_down_exps.weight"), (uint64_t)sel[k], (uint64_t)sp->n_ff_exp, E, xn);
        for (uint64_t i = 0; i < E; i++) x[i] += pr[sel[k]] / wsum * o[i];
    }
    hy_swiglu(o, ref_tl(r->f, l, "ffn_gate_shexp.weight"), ref_tl(r->f, l, "ffn_up_shexp.weight"),
              ref_tl(r->f, l, "ffn_down_shexp.weight"), 0, (uint64_t)r->hs->n_ff_shexp, E, xn);
    double gs = 0;
    for (uint64_t i = 0; i < E; i++) gs += ref_elem(ref_tl(r->f, l, "ffn_gate_inp_shexp.weight"), i) * xn[i];
    for (uint64_t i = 0; i < E; i++) x[i] += hy_sigmoid(gs) * o[i];
    free(pr), free(sel), free(o);
}

/* One decoder layer l over every position of r->x (the main layers' recipe; the MTP block's too). */
static inline void hy_ref_layer(hy_ref *r, int l, bool attention) {
    const tiny_spec *sp = &r->hs->base;
    size_t NE = (size_t)r->n_tok * r->E;
    for (int t = 0; t < r->n_tok; t++)
        ref_rmsnorm(r->xn + (size_t)t * r->E, r->x + (size_t)t * r->E, ref_tl(r->f, l, "attn_norm.weight"), r->E,
                    sp->rms_eps);
    if (attention) hy_ref_attention(r, l);
    else hy_ref_deltanet(r, l);
    for (size_t i = 0; i < NE; i++) r->x[i] += r->mix[i];
    for (int t = 0; t < r->n_tok; t++) {
        ref_rmsnorm(r->xn + (size_t)t * r->E, r->x + (size_t)t * r->E, ref_tl(r->f, l, "post_attention_norm.weight"),
                    r->E, sp->rms_eps);
        hy_ref_ffn(r, l, t);
    }
}

/* Opens path into r and runs the main layers over tokens: r->x holds the residual stream. */
static inline void hy_ref_main(hy_ref *r, const hy_spec *hs, const char *path, const int32_t *tokens, int n_tok) {
    const tiny_spec *sp = &hs->base;
    *r = (hy_ref){.hs = hs, .n_tok = n_tok, .E = sp->n_embd, .H = sp->n_head, .HK = sp->n_head_kv,
                  .hd = tiny_head_dim(sp), .C = hy_conv_dim(hs), .VD = hs->hv * hs->dk};
    if (gguf_open(&r->f, path, NULL) != ATTND_OK) abort();
    r->Q = r->H * r->hd, r->KV = r->HK * r->hd;
    size_t NE = (size_t)n_tok * r->E;
    r->x = malloc(sizeof(double) * NE), r->xn = malloc(sizeof(double) * NE), r->mix = malloc(sizeof(double) * NE);
    const gguf_tensor *emb = ref_t(r->f, "token_embd.weight");
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < r->E; i++) r->x[(size_t)t * r->E + i] = ref_elem(emb, (uint64_t)tokens[t] * r->E + i);
    for (int l = 0; l < sp->n_layer; l++) hy_ref_layer(r, l, hy_is_attn(hs, l));
}

/* logits (n_tok, n_vocab) = head(rmsnorm(r->x) norm) for every position. */
static inline void hy_ref_head(hy_ref *r, const gguf_tensor *norm, double *logits) {
    const gguf_tensor *out = ref_t(r->f, "output.weight");
    if (!out) out = ref_t(r->f, "token_embd.weight");
    for (int t = 0; t < r->n_tok; t++) {
        ref_rmsnorm(r->xn, r->x + (size_t)t * r->E, norm, r->E, r->hs->base.rms_eps);
        ref_matvec(logits + (size_t)t * r->hs->base.n_vocab, out, r->xn);
    }
}

static inline void hy_ref_free(hy_ref *r) {
    free(r->x), free(r->xn), free(r->mix);
    gguf_close(r->f);
}

/* Logits (n_tok, n_vocab) of every position of tokens through hs's model in path, from scratch in
 * double. The MTP blocks are not run. */
static inline void hy_ref_forward(const hy_spec *hs, const char *path, const int32_t *tokens, int n_tok, double *logits) {
    hy_ref r;
    hy_ref_main(&r, hs, path, tokens, n_tok);
    hy_ref_head(&r, ref_t(r.f, "output_norm.weight"), logits);
    hy_ref_free(&r);
}

/* The MTP block's logits (n_tok, n_vocab) at every position p of tokens, from scratch in double,
 * as llama.cpp's qwen35 graph_mtp defines them: h_{p-1} = rmsnorm(x_{p-1}) output_norm of the
 * main pass (zeros at p = 0); x' = eh_proj [rmsnorm(embd(tokens[p])) enorm | rmsnorm(h_{p-1})
 * hnorm]; the block (a gated-attention layer) over x'; then shared_head_norm and the output head. */
static inline void hy_ref_mtp(const hy_spec *hs, const char *path, const int32_t *tokens, int n_tok, double *logits) {
    hy_ref r;
    hy_ref_main(&r, hs, path, tokens, n_tok);
    int E = r.E, l = hs->base.n_layer;
    double eps = hs->base.rms_eps;
    double *h = malloc(sizeof(double) * (size_t)n_tok * E), *cat = malloc(sizeof(double) * 2 * (size_t)E);
    for (int t = 0; t < n_tok; t++)
        ref_rmsnorm(h + (size_t)t * E, r.x + (size_t)t * E, ref_t(r.f, "output_norm.weight"), E, eps);
    const gguf_tensor *emb = ref_t(r.f, "token_embd.weight");
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < E; i++) r.xn[i] = ref_elem(emb, (uint64_t)tokens[t] * E + i);
        ref_rmsnorm(cat, r.xn, ref_tl(r.f, l, "nextn.enorm.weight"), E, eps);
        if (t == 0) memset(cat + E, 0, sizeof(double) * (size_t)E);
        else ref_rmsnorm(cat + E, h + (size_t)(t - 1) * E, ref_tl(r.f, l, "nextn.hnorm.weight"), E, eps);
        ref_matvec(r.x + (size_t)t * E, ref_tl(r.f, l, "nextn.eh_proj.weight"), cat);
    }
    hy_ref_layer(&r, l, true);
    hy_ref_head(&r, ref_tl(r.f, l, "nextn.shared_head_norm.weight"), logits);
    free(h), free(cat);
    hy_ref_free(&r);
}

#endif /* ATTND_TEST_HYBRID_FIXTURE_H */
