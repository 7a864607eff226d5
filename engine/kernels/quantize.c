/*
 * quantize.c — weight re-encoding for `attnd quantize` (see attnd/quantize.h for the contract).
 *
 * Encoders write the GGUF/ggml block layouts that quant_format.c decodes; each one is checked in
 * tests/test_quantize.c by decoding with quant_dequantize_row and bounding the error. The
 * scale of every block is chosen by a small search around the plain max-based scale, refitting
 * it by least squares for each candidate rounding, and keeping the one with the lowest squared
 * error (the idea behind llama.cpp's k-quant search; this is our own code).
 */
#include "attnd/quantize.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"
#include "attnd/imatrix.h"
#include "quant.h"
#include "quant_impl.h"
#include "quantize_iq.h"
#include "threads.h"

#define QK 32 /* Q8_0 / Q4_0 block (QK_K, the k-quant super-block, is quant_impl.h's) */

// ---- targets --------------------------------------------------------------------------------

static const struct {
    const char *name;
    uint32_t type;      /* the tensor type of a plain target; a mix's base type (Q4_K for Q4_K_M) */
    uint32_t file_type; /* llama.cpp's general.file_type (LLAMA_FTYPE_*) */
    bool mix;           /* llama.cpp's per-tensor choices (false: every weight in `type`, --pure) */
} TARGETS[] = {
    [QUANTIZE_F16] = {"F16", GGUF_TYPE_F16, 1, false},        [QUANTIZE_BF16] = {"BF16", GGUF_TYPE_BF16, 32, false},
    [QUANTIZE_Q8_0] = {"Q8_0", GGUF_TYPE_Q8_0, 7, false},     [QUANTIZE_Q4_0] = {"Q4_0", GGUF_TYPE_Q4_0, 2, true},
    [QUANTIZE_Q4_K] = {"Q4_K", GGUF_TYPE_Q4_K, 14, false},    [QUANTIZE_Q6_K] = {"Q6_K", GGUF_TYPE_Q6_K, 18, false},
    [QUANTIZE_Q4_K_M] = {"Q4_K_M", GGUF_TYPE_Q4_K, 15, true}, [QUANTIZE_Q2_K] = {"Q2_K", GGUF_TYPE_Q2_K, 10, true},
    [QUANTIZE_Q3_K_S] = {"Q3_K_S", GGUF_TYPE_Q3_K, 11, true}, [QUANTIZE_Q3_K_M] = {"Q3_K_M", GGUF_TYPE_Q3_K, 12, true},
    [QUANTIZE_Q4_K_S] = {"Q4_K_S", GGUF_TYPE_Q4_K, 14, true}, [QUANTIZE_Q5_K_S] = {"Q5_K_S", GGUF_TYPE_Q5_K, 16, true},
    [QUANTIZE_Q5_K_M] = {"Q5_K_M", GGUF_TYPE_Q5_K, 17, true}, [QUANTIZE_Q4_1] = {"Q4_1", GGUF_TYPE_Q4_1, 3, true},
    [QUANTIZE_Q5_0] = {"Q5_0", GGUF_TYPE_Q5_0, 8, true},      [QUANTIZE_Q5_1] = {"Q5_1", GGUF_TYPE_Q5_1, 9, true},
    [QUANTIZE_IQ4_NL] = {"IQ4_NL", GGUF_TYPE_IQ4_NL, 25, true}, [QUANTIZE_IQ4_XS] = {"IQ4_XS", GGUF_TYPE_IQ4_XS, 30, true},
    /* every weight MXFP4 (llama.cpp's MXFP4_MOE puts it on the experts only; this is for testing
     * the type on dense models) */
    [QUANTIZE_MXFP4] = {"MXFP4", GGUF_TYPE_MXFP4, 38, false},
    /* the lattice mixes (issue 47): llama.cpp's llama_ftype_get_default_type gives the base type */
    [QUANTIZE_IQ2_XXS] = {"IQ2_XXS", GGUF_TYPE_IQ2_XXS, 19, true}, [QUANTIZE_IQ2_XS] = {"IQ2_XS", GGUF_TYPE_IQ2_XS, 20, true},
    [QUANTIZE_IQ2_S] = {"IQ2_S", GGUF_TYPE_IQ2_XS, 28, true},      [QUANTIZE_IQ2_M] = {"IQ2_M", GGUF_TYPE_IQ2_S, 29, true},
    [QUANTIZE_IQ3_XXS] = {"IQ3_XXS", GGUF_TYPE_IQ3_XXS, 23, true}, [QUANTIZE_IQ3_XS] = {"IQ3_XS", GGUF_TYPE_IQ3_S, 22, true},
    [QUANTIZE_IQ3_S] = {"IQ3_S", GGUF_TYPE_IQ3_S, 26, true},       [QUANTIZE_IQ3_M] = {"IQ3_M", GGUF_TYPE_IQ3_S, 27, true},
    [QUANTIZE_IQ1_S] = {"IQ1_S", GGUF_TYPE_IQ1_S, 24, true},       [QUANTIZE_IQ1_M] = {"IQ1_M", GGUF_TYPE_IQ1_M, 31, true},
};

attnd_status quantize_target_parse(const char *name, quantize_target *out) {
    for (size_t i = 0; i < ATTND_ARRAY_LEN(TARGETS); i++)
        if (!strcasecmp(name, TARGETS[i].name)) {
            *out = (quantize_target)i;
            return ATTND_OK;
        }
    return ATTND_ERR_INVALID;
}

const char *quantize_target_name(quantize_target t) { return TARGETS[t].name; }

const char *quantize_target_list(void) {
    return "F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q2_K, Q3_K_S, Q3_K_M, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q4_1, Q5_0, Q5_1, "
           "IQ4_NL, IQ4_XS, MXFP4, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M";
}

/* llama.cpp's use_more_bits(): the first and last eighth of the layers, and every third between. */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* "blk.12.ffn_down.weight" -> 12; -1 when the name has no layer. */
static int layer_of(const char *name) {
    int layer, end = 0;
    if (sscanf(name, "blk.%d.%n", &layer, &end) == 1 && end > 0) return layer;
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

#define T_IS(...) target_in(t, (const quantize_target[]){__VA_ARGS__}, sizeof((quantize_target[]){__VA_ARGS__}) / sizeof(quantize_target))

static bool target_in(quantize_target t, const quantize_target *set, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (set[i] == t) return true;
    return false;
}

/* attn_v: more bits where llama.cpp's llama_tensor_get_type gives them. */
static uint32_t mix_attn_v(quantize_target t, uint32_t type, int layer, const quantize_model *m) {
    if (t == QUANTIZE_Q2_K) type = m->n_gqa >= 4 ? GGUF_TYPE_Q4_K : GGUF_TYPE_Q3_K;
    else if (t == QUANTIZE_Q3_K_M) type = layer < 2 ? GGUF_TYPE_Q5_K : GGUF_TYPE_Q4_K;
    else if (T_IS(QUANTIZE_IQ4_NL, QUANTIZE_IQ4_XS) && m->n_gqa >= 4) type = GGUF_TYPE_Q5_K;
    else if (T_IS(QUANTIZE_Q4_K_M, QUANTIZE_Q5_K_M) && use_more_bits(layer, m->n_layer)) type = GGUF_TYPE_Q6_K;
    else if (t == QUANTIZE_Q4_K_S && layer < 4) type = GGUF_TYPE_Q5_K;
    return m->n_expert == 8 ? GGUF_TYPE_Q8_0 : type;
}

static uint32_t mix_ffn_down(quantize_target t, uint32_t type, int layer, const quantize_model *m) {
    int n = m->n_layer;
    if (t == QUANTIZE_Q2_K) return GGUF_TYPE_Q3_K;
    if (t == QUANTIZE_Q3_K_M) return layer < n / 16 ? GGUF_TYPE_Q5_K : GGUF_TYPE_Q4_K;
    if (T_IS(QUANTIZE_Q4_K_M, QUANTIZE_Q5_K_M) && use_more_bits(layer, n)) return GGUF_TYPE_Q6_K;
    if (T_IS(QUANTIZE_IQ4_NL, QUANTIZE_IQ4_XS) && layer < n / 8) return m->has_imatrix ? type : GGUF_TYPE_Q5_K;
    if (t == QUANTIZE_Q4_K_S && layer < n / 8) return GGUF_TYPE_Q5_K;
    /* "guard against craziness in the first few ffn_down layers", with a matrix only */
    if (T_IS(QUANTIZE_Q4_0, QUANTIZE_Q5_0) && m->has_imatrix && layer < n / 8)
        return t == QUANTIZE_Q4_0 ? GGUF_TYPE_Q4_1 : GGUF_TYPE_Q5_1;
    return type;
}

static uint32_t mix_attn_output(quantize_target t, uint32_t type, const quantize_model *m) {
    if (m->n_expert == 8)
        return T_IS(QUANTIZE_Q2_K, QUANTIZE_Q3_K_S, QUANTIZE_Q3_K_M, QUANTIZE_IQ4_NL, QUANTIZE_Q4_K_S, QUANTIZE_Q4_K_M,
                    QUANTIZE_IQ4_XS)
                   ? GGUF_TYPE_Q5_K
                   : type;
    if (t == QUANTIZE_Q2_K) return GGUF_TYPE_Q3_K;
    if (t == QUANTIZE_Q3_K_M) return GGUF_TYPE_Q4_K;
    return type;
}

/* llama.cpp's attn_v-like tensors (category_is_attn_v): V, fused QKV, MLA's kv_b. */
static bool attn_v_like(const char *name) {
    return strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight");
}

#define IQ12_MIXES QUANTIZE_IQ2_XXS, QUANTIZE_IQ2_XS, QUANTIZE_IQ2_S, QUANTIZE_IQ2_M, QUANTIZE_IQ1_S, QUANTIZE_IQ1_M
#define IQ3_MIXES QUANTIZE_IQ3_XXS, QUANTIZE_IQ3_XS, QUANTIZE_IQ3_S, QUANTIZE_IQ3_M

/* The IQ1/IQ2 mixes share one branch of llama.cpp's rules: more bits for attn_v-like tensors, the
 * first eighth of ffn_down and attn_output (IQ3_S for IQ2_S/IQ2_M, Q2_K for the others). */
static uint32_t mix_iq12(quantize_target t, uint32_t type, const char *name, int layer, const quantize_model *m) {
    uint32_t more = T_IS(QUANTIZE_IQ2_S, QUANTIZE_IQ2_M) ? GGUF_TYPE_IQ3_S : GGUF_TYPE_Q2_K;
    if (attn_v_like(name)) return m->n_gqa >= 4 || m->n_expert >= 4 ? GGUF_TYPE_Q4_K : more;
    if (m->n_expert == 8 && strstr(name, "attn_k.weight")) return GGUF_TYPE_Q4_K;
    if (strstr(name, "ffn_down")) return layer >= 0 && layer < m->n_layer / 8 ? more : type;
    if (strstr(name, "attn_output.weight")) {
        if (m->n_expert == 8) return GGUF_TYPE_Q5_K;
        if (T_IS(QUANTIZE_IQ1_S, QUANTIZE_IQ1_M)) return GGUF_TYPE_IQ2_XXS;
        if (more == GGUF_TYPE_IQ3_S) return GGUF_TYPE_IQ3_S;
    }
    return type;
}

/* The IQ3 mixes' rules (their cases in each tensor branch of llama.cpp's rules). */
static uint32_t mix_iq3(quantize_target t, uint32_t type, const char *name, int layer, const quantize_model *m) {
    int n = m->n_layer;
    bool middle = layer >= n / 8 && layer < 7 * n / 8;
    if (attn_v_like(name)) {
        if (t == QUANTIZE_IQ3_XXS)
            type = m->n_gqa >= 4 ? GGUF_TYPE_Q4_K : m->has_imatrix ? GGUF_TYPE_IQ3_XXS : GGUF_TYPE_IQ3_S;
        else if ((T_IS(QUANTIZE_IQ3_XS, QUANTIZE_IQ3_S) && m->n_gqa >= 4) || t == QUANTIZE_IQ3_M) type = GGUF_TYPE_Q4_K;
        return m->n_expert == 8 ? GGUF_TYPE_Q8_0 : type;
    }
    if (strstr(name, "attn_k.weight") || strstr(name, "attn_q.weight")) {
        if (m->n_expert == 8 && strstr(name, "attn_k.weight")) return GGUF_TYPE_Q8_0;
        return t == QUANTIZE_IQ3_XS ? GGUF_TYPE_IQ3_XXS : t == QUANTIZE_IQ3_XXS ? GGUF_TYPE_IQ2_S : type;
    }
    if (strstr(name, "attn_output.weight")) {
        if (m->n_expert == 8) return GGUF_TYPE_Q5_K;
        return t == QUANTIZE_IQ3_XXS ? GGUF_TYPE_IQ3_S : t == QUANTIZE_IQ3_M ? GGUF_TYPE_Q4_K : type;
    }
    if (layer < 0) return type;
    /* llama.cpp tests ffn_up, then ffn_gate, then ffn_down in the name */
    if (strstr(name, "ffn_up") || strstr(name, "ffn_gate")) return t == QUANTIZE_IQ3_XS && middle ? GGUF_TYPE_IQ3_XXS : type;
    if (strstr(name, "ffn_down")) {
        if (t == QUANTIZE_IQ3_XXS && !m->has_imatrix) return layer < n / 8 ? GGUF_TYPE_Q4_K : GGUF_TYPE_Q3_K;
        if (t == QUANTIZE_IQ3_M && (layer < n / 8 || (m->n_expert == 8 && use_more_bits(layer, n)))) return GGUF_TYPE_Q4_K;
    }
    return type;
}

/* A mix's choice for one tensor, before the row-size fallback (llama.cpp's llama_tensor_get_type,
 * for the targets attnd writes; Falcon's and 70B's special cases are left out, and the layer of a
 * tensor is read from its name where llama.cpp counts the tensors of each kind seen so far: the
 * same for one ffn_down and one attn_v per layer). */
static uint32_t mix_type(quantize_target t, const char *name, const uint64_t *ne, const quantize_model *m) {
    uint32_t type = TARGETS[t].type;
    int layer = layer_of(name);
    if (!strcmp(name, "output.weight") || (!m->has_output && !strcmp(name, "token_embd.weight"))) {
        if (ne[0] % gguf_type_block_elems(type)) return GGUF_TYPE_Q8_0;
        if (T_IS(IQ12_MIXES, QUANTIZE_IQ3_XXS)) return GGUF_TYPE_Q5_K;
        return type == GGUF_TYPE_Q8_0 ? type : GGUF_TYPE_Q6_K;
    }
    if (!strcmp(name, "token_embd.weight")) {
        if (T_IS(QUANTIZE_IQ2_XXS, QUANTIZE_IQ2_XS, QUANTIZE_IQ1_S, QUANTIZE_IQ1_M)) return GGUF_TYPE_Q2_K;
        if (T_IS(QUANTIZE_IQ2_S, QUANTIZE_IQ2_M, QUANTIZE_IQ3_XXS)) return GGUF_TYPE_IQ3_S;
        return type;
    }
    if (T_IS(IQ12_MIXES)) return mix_iq12(t, type, name, layer, m);
    if (T_IS(IQ3_MIXES)) return mix_iq3(t, type, name, layer, m);
    if (strstr(name, "attn_v.weight")) return mix_attn_v(t, type, layer, m);
    if (strstr(name, "attn_k.weight")) return m->n_expert == 8 ? GGUF_TYPE_Q8_0 : type;
    if (strstr(name, "ffn_down")) return layer >= 0 ? mix_ffn_down(t, type, layer, m) : type;
    if (strstr(name, "attn_output.weight")) return mix_attn_output(t, type, m);
    if (strstr(name, "attn_qkv.weight")) {
        if (t == QUANTIZE_Q3_K_M) return GGUF_TYPE_Q4_K;
        if (t == QUANTIZE_Q4_K_M) return GGUF_TYPE_Q5_K;
        if (t == QUANTIZE_Q5_K_M) return GGUF_TYPE_Q6_K;
    }
    return type;
}

/* llama.cpp's fallback for rows the block does not divide (then F16 if that fails too). */
static uint32_t shape_fallback(uint32_t type) {
    switch (type) {
    case GGUF_TYPE_Q2_K:
    case GGUF_TYPE_Q3_K: return GGUF_TYPE_Q4_0;
    case GGUF_TYPE_IQ1_S:
    case GGUF_TYPE_IQ1_M:
    case GGUF_TYPE_IQ2_XXS:
    case GGUF_TYPE_IQ2_XS:
    case GGUF_TYPE_IQ2_S:
    case GGUF_TYPE_IQ3_XXS:
    case GGUF_TYPE_IQ3_S:
    case GGUF_TYPE_IQ4_XS: return GGUF_TYPE_IQ4_NL;
    case GGUF_TYPE_Q4_K: return GGUF_TYPE_Q5_0;
    case GGUF_TYPE_Q5_K: return GGUF_TYPE_Q5_1;
    case GGUF_TYPE_Q6_K: return GGUF_TYPE_Q8_0;
    default: return type;
    }
}

uint32_t quantize_tensor_type_for(quantize_target t, const char *name, uint32_t n_dims, const uint64_t *ne,
                                  uint32_t in_type, const quantize_model *m) {
    /* 1-D tensors, non-weights, and (as llama.cpp) the MoE router and the recurrent layers' small
     * conv1d keep their type: llama.cpp reads ssm_conv1d as F32 only */
    static const char *const KEEP[] = {"ffn_gate_inp.weight", "ssm_conv1d"};
    if (n_dims < 2 || !ends_with(name, "weight")) return in_type;
    for (size_t i = 0; i < sizeof(KEEP) / sizeof(KEEP[0]); i++)
        if (strstr(name, KEEP[i])) return in_type;
    uint32_t type = TARGETS[t].mix ? mix_type(t, name, ne, m) : TARGETS[t].type;
    if (ne[0] % gguf_type_block_elems(type)) type = shape_fallback(type);
    if (ne[0] % gguf_type_block_elems(type)) type = GGUF_TYPE_F16; /* F16/BF16 blocks are 1 element */
    return type;
}

uint32_t quantize_tensor_type(quantize_target t, const char *name, uint32_t n_dims, const uint64_t *ne,
                              uint32_t in_type, int n_layer, bool has_output) {
    quantize_model m = {n_layer, has_output, 1, 1, false};
    return quantize_tensor_type_for(t, name, n_dims, ne, in_type, &m);
}

// ---- block encoders ---------------------------------------------------------------------------

static void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The weight of element i in a fit's squared error: w[i] (quantize --imatrix), or 1 without. */
#define WT(w, i) ((w) ? (w)[i] : 1.0f)

/* Symmetric fit: x[i] ~ s * q[i], q in [-nmax, nmax - 1]; returns s (0 for an all-zero block).
 * The extreme value maps to -nmax, as ggml's symmetric types do, then nearby scales are tried;
 * errors and the least-squares scale are weighted by w (NULL: all 1). */
static float fit_symmetric(const float *x, int n, int nmax, const float *w) {
    float vmax = 0.f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(vmax)) vmax = x[i];
    if (vmax == 0.f) return 0.f;
    float best_s = vmax / -nmax, best_err = INFINITY;
    for (int step = -9; step <= 9; step++) {
        float is = -(nmax + 0.1f * step) / vmax;
        double sqx = 0, sqq = 0;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrintf(is * x[i]), -nmax, nmax - 1);
            sqx += (double)WT(w, i) * q * x[i], sqq += (double)WT(w, i) * q * q;
        }
        if (sqq == 0) continue;
        float s = (float)(sqx / sqq), err = 0.f;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrintf(x[i] / s), -nmax, nmax - 1);
            err += WT(w, i) * (s * q - x[i]) * (s * q - x[i]);
        }
        if (err < best_err) best_err = err, best_s = s;
    }
    return best_s;
}

/* Affine fit: x[i] ~ s * q[i] - m, q in [0, nmax], m >= 0 (so 0 stays representable). */
static void fit_affine(const float *x, int n, int nmax, const float *w, float *s_out, float *m_out) {
    float lo = 0.f, hi = x[0];
    for (int i = 0; i < n; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    *s_out = hi > lo ? (hi - lo) / nmax : 0.f, *m_out = -lo;
    if (hi <= lo) return;
    float best_err = INFINITY;
    for (int step = -10; step <= 10; step++) {
        float is = (nmax + 0.1f * step) / (hi - lo);
        double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrintf(is * (x[i] - lo)), 0, nmax);
            double wi = WT(w, i);
            sw += wi, sq += wi * q, sqq += wi * q * q, sx += wi * x[i], sqx += wi * q * x[i];
        }
        double det = sw * sqq - sq * sq, s, b;
        if (det <= 0) continue;
        s = (sw * sqx - sq * sx) / det, b = (sqq * sx - sq * sqx) / det;
        if (b > 0) b = 0, s = sqx / sqq;
        if (s <= 0) continue;
        float err = 0.f;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrint((x[i] - b) / s), 0, nmax);
            err += (float)(WT(w, i) * (s * q + b - x[i]) * (s * q + b - x[i]));
        }
        if (err < best_err) best_err = err, *s_out = (float)s, *m_out = (float)-b;
    }
}

/* Q8_0: f16 d, int8 q[32]; x = d * q. */
static void encode_q8_0(uint8_t *dst, const float *x) {
    float amax = 0.f;
    for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    st16(dst, quant_f32_to_f16(d));
    for (int i = 0; i < QK; i++) dst[2 + i] = (uint8_t)(int8_t)clampi((int)lrintf(x[i] * id), -127, 127);
}

/* Q4_0: f16 d, 16 bytes of nibbles (low: element j, high: element j + 16); x = d * (q - 8). */
static void encode_q4_0(uint8_t *dst, const float *x, const float *w) {
    float d = quant_f16_to_f32(quant_f32_to_f16(fit_symmetric(x, QK, 8, w))), id = d != 0.f ? 1.f / d : 0.f;
    st16(dst, quant_f32_to_f16(d));
    for (int j = 0; j < QK / 2; j++) {
        int a = clampi((int)lrintf(x[j] * id) + 8, 0, 15), b = clampi((int)lrintf(x[j + 16] * id) + 8, 0, 15);
        dst[2 + j] = (uint8_t)(a | b << 4);
    }
}

/* Q4_K (nmax 15) / Q5_K (nmax 31) super-block: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min)
 * pairs for 8 sub-blocks of 32, then (Q5_K) 32 bytes of fifth bits, then 128 bytes of nibbles
 * (sub-blocks 2p and 2p+1 share bytes 32p..32p+31: low and high nibble; Q5_K's fifth bit of
 * element 64p + 32h + l is bit 2p + h of qh[l]). x = d * sc[j] * q - dmin * mn[j]. */
static void encode_q4_k(uint8_t *dst, const float *x, int nmax, const float *w) {
    float s[8], m[8], smax = 0.f, mmax = 0.f;
    for (int j = 0; j < 8; j++) {
        fit_affine(x + 32 * j, 32, nmax, w ? w + 32 * j : NULL, &s[j], &m[j]);
        smax = fmaxf(smax, s[j]), mmax = fmaxf(mmax, m[j]);
    }
    float d = quant_f16_to_f32(quant_f32_to_f16(smax / 63.f));
    float dmin = quant_f16_to_f32(quant_f32_to_f16(mmax / 63.f));
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0.f ? clampi((int)lrintf(s[j] / d), 0, 63) : 0);
        mn[j] = (uint8_t)(dmin > 0.f ? clampi((int)lrintf(m[j] / dmin), 0, 63) : 0);
    }
    st16(dst, quant_f32_to_f16(d));
    st16(dst + 2, quant_f32_to_f16(dmin));
    uint8_t *scales = dst + 4, *qh = dst + 16, *qs = dst + (nmax == 15 ? 16 : 48);
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        scales[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    uint8_t q[QK_K];
    for (int j = 0; j < 8; j++) {
        float step = d * sc[j], off = dmin * mn[j];
        for (int i = 0; i < 32; i++)
            q[32 * j + i] = (uint8_t)(step > 0.f ? clampi((int)lrintf((x[32 * j + i] + off) / step), 0, nmax) : 0);
    }
    if (nmax == 31) memset(qh, 0, 32);
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
            uint8_t a = q[64 * p + l], b = q[64 * p + 32 + l];
            qs[32 * p + l] = (uint8_t)((a & 15) | (b & 15) << 4);
            if (nmax == 31) qh[l] |= (uint8_t)((a >> 4) << (2 * p) | (b >> 4) << (2 * p + 1));
        }
}

/* Q6_K super-block: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] for sub-blocks
 * of 16, f16 d; x = d * scales[j] * (q - 32). In each 128-element half h, element 128h + l + 32k
 * (l < 32, k < 4) keeps its low bits in ql[64h + l + 32(k & 1)] (nibble k >> 1) and its high
 * bits in qh[32h + l] (bits 2k, 2k+1). */
static void encode_q6_k(uint8_t *dst, const float *x, const float *w) {
    float s[16], smax = 0.f;
    for (int j = 0; j < 16; j++) {
        s[j] = fit_symmetric(x + 16 * j, 16, 32, w ? w + 16 * j : NULL);
        if (fabsf(s[j]) > fabsf(smax)) smax = s[j];
    }
    float d = quant_f16_to_f32(quant_f32_to_f16(smax / -128.f));
    uint8_t *ql = dst, *qh = dst + 128, q[QK_K];
    int8_t *scales = (int8_t *)(dst + 192);
    for (int j = 0; j < 16; j++) {
        scales[j] = (int8_t)(d != 0.f ? clampi((int)lrintf(s[j] / d), -128, 127) : 0);
        float step = d * scales[j];
        for (int i = 0; i < 16; i++)
            q[16 * j + i] = (uint8_t)(step != 0.f ? clampi((int)lrintf(x[16 * j + i] / step), -32, 31) + 32 : 32);
    }
    st16(dst + 208, quant_f32_to_f16(d));
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *y = q + 128 * h + l;
            ql[64 * h + l] = (uint8_t)((y[0] & 15) | (y[64] & 15) << 4);
            ql[64 * h + l + 32] = (uint8_t)((y[32] & 15) | (y[96] & 15) << 4);
            qh[32 * h + l] = (uint8_t)(y[0] >> 4 | (y[32] >> 4) << 2 | (y[64] >> 4) << 4 | (y[96] >> 4) << 6);
        }
}

static void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static float f16r(float v) { return quant_f16_to_f32(quant_f32_to_f16(v)); }

/* Q4_1 / Q5_1 (nmax 15 / 31): x = d * q + m with m the block minimum, d its range over nmax
 * (both kept at f16 precision before the q are chosen). Q5's fifth bits go to qh (bit j). */
static void encode_q41_q51(uint8_t *dst, const float *x, int nmax) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < QK; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    float d = f16r((hi - lo) / nmax), m = f16r(lo), id = d != 0.f ? 1.f / d : 0.f;
    st16(dst, quant_f32_to_f16(d));
    st16(dst + 2, quant_f32_to_f16(m));
    uint8_t *qs = dst + (nmax == 15 ? 4 : 8);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        int a = clampi((int)lrintf((x[j] - m) * id), 0, nmax), b = clampi((int)lrintf((x[j + 16] - m) * id), 0, nmax);
        qs[j] = (uint8_t)((a & 15) | (b & 15) << 4);
        qh |= (uint32_t)(a >> 4) << j | (uint32_t)(b >> 4) << (j + 16);
    }
    if (nmax == 31) st32(dst + 4, qh);
}

/* Q5_0: x = d * (q - 16), q in 0..31. */
static void encode_q5_0(uint8_t *dst, const float *x, const float *w) {
    float d = f16r(fit_symmetric(x, QK, 16, w)), id = d != 0.f ? 1.f / d : 0.f;
    st16(dst, quant_f32_to_f16(d));
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        int a = clampi((int)lrintf(x[j] * id) + 16, 0, 31), b = clampi((int)lrintf(x[j + 16] * id) + 16, 0, 31);
        dst[6 + j] = (uint8_t)((a & 15) | (b & 15) << 4);
        qh |= (uint32_t)(a >> 4) << j | (uint32_t)(b >> 4) << (j + 16);
    }
    st32(dst + 2, qh);
}

/* Nearest of the 16 codebook values to v (values sorted ascending). */
static int nearest16(const int8_t *values, float v) {
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabsf(v - values[k]) < fabsf(v - values[best])) best = k;
    return best;
}

/* Codebook fit: x[i] ~ s * values[q[i]]; tries scales around the max-based one, refitting each by
 * least squares, keeps the best. Returns s (0 for an all-zero block); q receives the indices. */
static float fit_codebook(const float *x, int n, const int8_t *values, int vmin, uint8_t *q, const float *w) {
    float amax = 0.f, vmax = 0.f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), vmax = x[i];
    if (amax == 0.f) {
        for (int i = 0; i < n; i++) q[i] = (uint8_t)nearest16(values, 0.f);
        return 0.f;
    }
    float best_s = vmax / vmin, best_err = INFINITY;
    for (int step = -8; step <= 8; step++) {
        float s = vmax / (vmin + 0.1f * step * (vmin < 0 ? -1 : 1)), is = 1.f / s;
        double sxv = 0, svv = 0;
        for (int i = 0; i < n; i++) {
            int k = nearest16(values, x[i] * is);
            sxv += (double)WT(w, i) * x[i] * values[k], svv += (double)WT(w, i) * values[k] * values[k];
        }
        if (svv == 0) continue;
        float s2 = (float)(sxv / svv), is2 = 1.f / s2, err = 0.f;
        for (int i = 0; i < n; i++) {
            float e = s2 * values[nearest16(values, x[i] * is2)] - x[i];
            err += WT(w, i) * e * e;
        }
        if (err < best_err) best_err = err, best_s = s2;
    }
    float is = 1.f / best_s;
    for (int i = 0; i < n; i++) q[i] = (uint8_t)nearest16(values, x[i] * is);
    return best_s;
}

static void pack_nibbles(uint8_t *qs, const uint8_t *q) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

/* IQ4_NL: x = d * iq4nl[q]. */
static void encode_iq4_nl(uint8_t *dst, const float *x, const float *w) {
    uint8_t q[QK];
    float d = f16r(fit_codebook(x, QK, quant_iq4nl_values, -127, q, w)), id = d != 0.f ? 1.f / d : 0.f;
    for (int i = 0; i < QK; i++) q[i] = (uint8_t)nearest16(quant_iq4nl_values, x[i] * id);
    st16(dst, quant_f32_to_f16(d));
    pack_nibbles(dst + 2, q);
}

/* MXFP4: x = 2^(e - 128) * mxfp4[q] (the doubled E2M1 values, largest 12): the two exponents
 * around amax / 12 are tried, the one of lower squared error kept. */
static void encode_mxfp4(uint8_t *dst, const float *x) {
    static const int8_t sorted[16] = {-12, -8, -6, -4, -3, -2, -1, 0, 0, 1, 2, 3, 4, 6, 8, 12};
    static const uint8_t code[16] = {15, 14, 13, 12, 11, 10, 9, 0, 0, 1, 2, 3, 4, 5, 6, 7}; /* sorted -> nibble */
    float amax = 0.f;
    for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(x[i]));
    int e0 = amax > 0.f ? clampi((int)ceilf(log2f(amax / 12.f)) + 128, 1, 254) : 0, best_e = e0;
    float best_err = INFINITY;
    for (int e = e0 > 1 ? e0 - 1 : e0; e <= e0 && amax > 0.f; e++) {
        float d = quant_e8m0_half((uint8_t)e), err = 0.f;
        for (int i = 0; i < QK; i++) {
            float r = d * sorted[nearest16(sorted, x[i] / d)] - x[i];
            err += r * r;
        }
        if (err < best_err) best_err = err, best_e = e;
    }
    float d = quant_e8m0_half((uint8_t)best_e);
    uint8_t q[QK];
    for (int i = 0; i < QK; i++) q[i] = amax > 0.f ? code[nearest16(sorted, x[i] / d)] : 0;
    dst[0] = (uint8_t)best_e;
    pack_nibbles(dst + 1, q);
}

/* Q2_K: 16 sub-blocks of 16, x = d * sc * q - dmin * mn, q in 0..3, sc and mn 4-bit. */
static void encode_q2_k(uint8_t *dst, const float *x, const float *w) {
    float s[16], m[16], smax = 0.f, mmax = 0.f;
    for (int j = 0; j < 16; j++) {
        fit_affine(x + 16 * j, 16, 3, w ? w + 16 * j : NULL, &s[j], &m[j]);
        smax = fmaxf(smax, s[j]), mmax = fmaxf(mmax, m[j]);
    }
    float d = f16r(smax / 15.f), dmin = f16r(mmax / 15.f);
    uint8_t q[QK_K];
    for (int j = 0; j < 16; j++) {
        int sc = d > 0.f ? clampi((int)lrintf(s[j] / d), 0, 15) : 0, mn = dmin > 0.f ? clampi((int)lrintf(m[j] / dmin), 0, 15) : 0;
        dst[j] = (uint8_t)(sc | mn << 4);
        float step = d * sc, off = dmin * mn;
        for (int i = 0; i < 16; i++)
            q[16 * j + i] = (uint8_t)(step > 0.f ? clampi((int)lrintf((x[16 * j + i] + off) / step), 0, 3) : 0);
    }
    memset(dst + 16, 0, 64);
    for (int e = 0; e < QK_K; e++) dst[16 + 32 * (e / 128) + e % 32] |= (uint8_t)(q[e] << (2 * (e % 128 / 32)));
    st16(dst + 80, quant_f32_to_f16(d));
    st16(dst + 82, quant_f32_to_f16(dmin));
}

/* Q3_K: 16 sub-blocks of 16, x = d * (sc - 32) * q, q in -4..3 (2 bits in qs, the third in
 * hmask: set for q >= 0), sc 6-bit (quant_q3k_scales' layout). */
static void encode_q3_k(uint8_t *dst, const float *x, const float *w) {
    float s[16], smax = 0.f;
    for (int j = 0; j < 16; j++) {
        s[j] = fit_symmetric(x + 16 * j, 16, 4, w ? w + 16 * j : NULL);
        if (fabsf(s[j]) > fabsf(smax)) smax = s[j];
    }
    float d = f16r(smax / -32.f);
    memset(dst, 0, Q3_K_BYTES);
    int8_t q[QK_K];
    for (int j = 0; j < 16; j++) {
        int sc = d != 0.f ? clampi((int)lrintf(s[j] / d), -32, 31) : 0, u = sc + 32;
        dst[96 + j % 8] |= (uint8_t)((u & 15) << (4 * (j / 8)));
        dst[104 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
        float step = d * sc;
        for (int i = 0; i < 16; i++) q[16 * j + i] = (int8_t)(step != 0.f ? clampi((int)lrintf(x[16 * j + i] / step), -4, 3) : 0);
    }
    for (int e = 0; e < QK_K; e++) {
        int u = q[e] + 4; /* 0..7: low 2 bits, and the hmask bit */
        dst[32 + 32 * (e / 128) + e % 32] |= (uint8_t)((u & 3) << (2 * (e % 128 / 32)));
        if (u & 4) dst[e % 32] |= (uint8_t)(1u << (4 * (e / 128) + e % 128 / 32));
    }
    st16(dst + 108, quant_f32_to_f16(d));
}

/* IQ4_XS: 8 sub-blocks of 32, x = d * (sc - 32) * iq4nl[q], sc 6-bit. */
static void encode_iq4_xs(uint8_t *dst, const float *x, const float *w) {
    float s[8], smax = 0.f;
    uint8_t q[32];
    for (int j = 0; j < 8; j++) {
        s[j] = fit_codebook(x + 32 * j, 32, quant_iq4nl_values, -127, q, w ? w + 32 * j : NULL);
        if (fabsf(s[j]) > fabsf(smax)) smax = s[j];
    }
    float d = f16r(smax / -32.f);
    memset(dst, 0, IQ4_XS_BYTES);
    uint16_t h = 0;
    for (int j = 0; j < 8; j++) {
        int sc = d != 0.f ? clampi((int)lrintf(s[j] / d), -32, 31) : 0, u = sc + 32;
        dst[4 + j / 2] |= (uint8_t)((u & 15) << (4 * (j % 2)));
        h |= (uint16_t)((u >> 4) << (2 * j));
        float step = d * sc, is = step != 0.f ? 1.f / step : 0.f;
        for (int i = 0; i < 32; i++) q[i] = (uint8_t)nearest16(quant_iq4nl_values, x[32 * j + i] * is);
        pack_nibbles(dst + 8 + 16 * j, q);
    }
    st16(dst, quant_f32_to_f16(d));
    st16(dst + 2, h);
}

/* How llama.cpp's quantizer of each type weighs an element's squared error (ggml-quants.c):
 * imp[i] * sqrt(sigma2 + x[i]^2) with sigma2 = k times the mean square of the super-block (or of
 * the whole row: Q4_0, Q5_0), or imp[i] alone (Q6_K, k 0). The lattice types (always) weigh
 * even without a matrix, with imp[i] = 1: their grid search has no unweighted form. */
typedef struct weight_rule {
    uint32_t type;
    float k;
    bool whole_row, always;
} weight_rule;

static const weight_rule WEIGHT_RULES[] = {
    {GGUF_TYPE_Q2_K, 1, false, false},    {GGUF_TYPE_Q3_K, 2, false, false},    {GGUF_TYPE_Q4_K, 2, false, false},
    {GGUF_TYPE_Q5_K, 2, false, false},    {GGUF_TYPE_Q6_K, 0, false, false},    {GGUF_TYPE_Q4_0, 1, true, false},
    {GGUF_TYPE_Q5_0, 1, true, false},     {GGUF_TYPE_IQ4_NL, 2, false, false},  {GGUF_TYPE_IQ4_XS, 2, false, false},
    {GGUF_TYPE_IQ2_XXS, 1, false, true},  {GGUF_TYPE_IQ2_XS, 1, false, true},   {GGUF_TYPE_IQ2_S, 2, false, true},
    {GGUF_TYPE_IQ3_XXS, 2, false, true},  {GGUF_TYPE_IQ3_S, 2, false, true},    {GGUF_TYPE_IQ1_S, 2, false, true},
    {GGUF_TYPE_IQ1_M, 2, false, true},
};

static const weight_rule *weight_rule_of(uint32_t type) {
    for (size_t i = 0; i < sizeof(WEIGHT_RULES) / sizeof(WEIGHT_RULES[0]); i++)
        if (WEIGHT_RULES[i].type == type) return &WEIGHT_RULES[i];
    return NULL;
}

static float mean_square(const float *x, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return (float)(ss / (double)n);
}

/* w (be) for the block at x under rule r; row_ms is the whole row's mean square. */
static void block_weights(float *w, const float *x, const float *imp, uint32_t be, const weight_rule *r, float row_ms) {
    if (r->k == 0) {
        memcpy(w, imp, sizeof(float) * be);
        return;
    }
    float sigma2 = r->k * (r->whole_row ? row_ms : mean_square(x, be));
    for (uint32_t i = 0; i < be; i++) w[i] = (imp ? imp[i] : 1.f) * sqrtf(sigma2 + x[i] * x[i]);
}

bool quantize_type_weighted(uint32_t type) { return weight_rule_of(type) != NULL; }

void quantize_row(void *dst, const float *src, uint32_t type, int64_t n) {
    quantize_row_weighted(dst, src, type, n, NULL);
}

void quantize_row_weighted(void *dst, const float *src, uint32_t type, int64_t n, const float *imp) {
    uint8_t *d = dst;
    uint32_t be = gguf_type_block_elems(type), bb = gguf_type_block_bytes(type);
    ATTND_ASSERT(be > 0 && n % be == 0);
    switch (type) {
    case GGUF_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case GGUF_TYPE_F16:
        for (int64_t i = 0; i < n; i++) st16(d + 2 * i, quant_f32_to_f16(src[i]));
        return;
    case GGUF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) st16(d + 2 * i, quant_f32_to_bf16(src[i]));
        return;
    default: break;
    }
    const weight_rule *rule = weight_rule_of(type);
    if (rule && !imp && !rule->always) rule = NULL;
    float wbuf[QK_K], *w = rule && be <= QK_K ? wbuf : NULL; /* (be) */
    float row_ms = rule && rule->whole_row ? mean_square(src, n) : 0;
    if (quantize_iq_is_lattice(type)) { /* quantize_file prepared already; this builds for direct callers */
        attnd_status ready = quantize_iq_prepare(type);
        ATTND_ASSERT(ready == ATTND_OK && w);
    }
    for (int64_t b = 0; b < n / be; b++, d += bb, src += be) {
        if (w) block_weights(w, src, imp ? imp + b * be : NULL, be, rule, row_ms);
        switch (type) {
        case GGUF_TYPE_Q8_0: encode_q8_0(d, src); break;
        case GGUF_TYPE_Q4_0: encode_q4_0(d, src, w); break;
        case GGUF_TYPE_Q4_K: encode_q4_k(d, src, 15, w); break;
        case GGUF_TYPE_Q6_K: encode_q6_k(d, src, w); break;
        case GGUF_TYPE_Q4_1: encode_q41_q51(d, src, 15); break;
        case GGUF_TYPE_Q5_1: encode_q41_q51(d, src, 31); break;
        case GGUF_TYPE_Q5_0: encode_q5_0(d, src, w); break;
        case GGUF_TYPE_IQ4_NL: encode_iq4_nl(d, src, w); break;
        case GGUF_TYPE_MXFP4: encode_mxfp4(d, src); break;
        case GGUF_TYPE_Q2_K: encode_q2_k(d, src, w); break;
        case GGUF_TYPE_Q3_K: encode_q3_k(d, src, w); break;
        case GGUF_TYPE_Q5_K: encode_q4_k(d, src, 31, w); break;
        case GGUF_TYPE_IQ4_XS: encode_iq4_xs(d, src, w); break;
        case GGUF_TYPE_IQ2_XXS:
        case GGUF_TYPE_IQ2_XS:
        case GGUF_TYPE_IQ2_S:
        case GGUF_TYPE_IQ3_XXS:
        case GGUF_TYPE_IQ3_S:
        case GGUF_TYPE_IQ1_S:
        case GGUF_TYPE_IQ1_M: quantize_iq_block(d, src, w, type); break;
        default: ATTND_ASSERT(!"quantize_row: type without an encoder");
        }
    }
}

// ---- files ------------------------------------------------------------------------------------

/* One conversion as pool tasks: task c converts rows [c * per, (c + 1) * per). */
typedef struct convert_job {
    const gguf_tensor *t;
    uint32_t type;
    uint8_t *dst;
    int64_t n_cols, n_rows, per;
    size_t in_row, out_row;
    atomic_bool nomem;
    const float *imp; /* (n_mat, n_cols) column importances, or NULL */
    int64_t mat_rows; /* rows of one matrix of imp (a 3-D expert tensor has n_mat of them) */
} convert_job;

static void convert_rows(void *ctx, int c, int worker) {
    (void)worker;
    convert_job *j = ctx;
    float *row = malloc(sizeof(float) * (size_t)j->n_cols); /* (n_cols) one row as F32 */
    if (!row) {
        atomic_store(&j->nomem, true);
        return;
    }
    int64_t r1 = (c + 1) * j->per < j->n_rows ? (c + 1) * j->per : j->n_rows;
    for (int64_t r = c * j->per; r < r1; r++) {
        quant_dequantize_row(row, (const uint8_t *)j->t->data + (size_t)r * j->in_row, j->t->type, j->n_cols);
        const float *imp = j->imp ? j->imp + (size_t)(r / j->mat_rows) * j->n_cols : NULL;
        quantize_row_weighted(j->dst + (size_t)r * j->out_row, row, j->type, j->n_cols, imp);
    }
    free(row);
}

/* Converts the rows of tensor t into `type`; *out receives a malloc'd buffer of the new bytes. */
static attnd_status convert_tensor(const gguf_tensor *t, uint32_t type, const float *imp, void **out, uint64_t *n_bytes,
                                   attnd_err *err) {
    int64_t n_cols = (int64_t)t->ne[0], n_rows = (int64_t)(t->n_elems / t->ne[0]);
    size_t in_row = quant_row_bytes(t->type, n_cols), out_row = quant_row_bytes(type, n_cols);
    if (quantize_iq_is_lattice(type) && quantize_iq_prepare(type) != ATTND_OK)
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory building the %s grid tables", gguf_type_name(type));
    *n_bytes = (uint64_t)out_row * (uint64_t)n_rows;
    uint8_t *dst = malloc(*n_bytes ? *n_bytes : 1);
    if (!dst) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory converting %s", t->name);
    convert_job j = {t, type, dst, n_cols, n_rows, (n_rows + 63) / 64, in_row, out_row, false, imp, (int64_t)t->ne[1]};
    if (j.per < 1) j.per = 1;
    threads_run(threads_default(), (int)((n_rows + j.per - 1) / j.per), convert_rows, &j);
    if (atomic_load(&j.nomem)) {
        free(dst);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory converting %s", t->name);
    }
    *out = dst;
    return ATTND_OK;
}

/* "<arch>.<suffix>" as an integer, or dflt when absent. */
static int arch_int(const gguf_file *f, const char *suffix, int dflt) {
    const char *arch = NULL;
    if (gguf_get_str(f, "general.architecture", &arch, NULL) != ATTND_OK) return dflt;
    char key[160];
    uint32_t n = 0;
    snprintf(key, sizeof(key), "%.100s.%s", arch, suffix);
    return gguf_get_u32(f, key, &n, NULL) == ATTND_OK ? (int)n : dflt;
}

quantize_model quantize_model_of(const gguf_file *f, bool has_imatrix) {
    int n_head = arch_int(f, "attention.head_count", 0), n_kv = arch_int(f, "attention.head_count_kv", n_head);
    quantize_model m = {arch_int(f, "block_count", 0), gguf_find_tensor(f, "output.weight") != NULL, 1,
                        arch_int(f, "expert_count", 1), has_imatrix};
    if (n_head > 0 && n_kv > 0) m.n_gqa = n_head / n_kv;
    if (m.n_expert < 1) m.n_expert = 1;
    return m;
}

/* Copies the metadata, replacing the keys that describe the encoding (and, with a matrix, the
 * quantize.imatrix.* keys llama-quantize writes: file, dataset, entries_count, chunks_count). */
static void copy_metadata(gguf_writer *w, const gguf_file *f, quantize_target t, const imatrix *im) {
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (!strcmp(kv->key, "general.file_type") || !strcmp(kv->key, "general.quantization_version") ||
            !strcmp(kv->key, "general.alignment") || /* the writer aligns to 32, the default */
            (im && !strncmp(kv->key, "quantize.imatrix.", 17)))
            continue;
        gguf_writer_add_kv(w, kv);
    }
    if (gguf_find_kv(f, "general.alignment")) gguf_writer_add_u32(w, "general.alignment", 32);
    gguf_writer_add_u32(w, "general.file_type", TARGETS[t].file_type);
    if (t != QUANTIZE_F16 && t != QUANTIZE_BF16) gguf_writer_add_u32(w, "general.quantization_version", 2);
    if (!im) return;
    char v[128]; /* llama-quantize keeps 127 bytes of each string */
    snprintf(v, sizeof(v), "%s", im->file ? im->file : "");
    gguf_writer_add_str(w, "quantize.imatrix.file", v);
    if (im->dataset) {
        snprintf(v, sizeof(v), "%s", im->dataset);
        gguf_writer_add_str(w, "quantize.imatrix.dataset", v);
    }
    gguf_writer_add_u32(w, "quantize.imatrix.entries_count", (uint32_t)im->n);
    if (im->chunk_count) gguf_writer_add_u32(w, "quantize.imatrix.chunks_count", im->chunk_count);
}

/* llama.cpp's tensor_requires_imatrix: the lattice types below 3 bits (and IQ3_XXS) make garbage
 * without importances, so llama-quantize refuses them; the head and the embedding are exempt. */
static bool needs_imatrix(const char *name, uint32_t type) {
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight")) return false;
    switch (type) {
    case GGUF_TYPE_IQ1_S:
    case GGUF_TYPE_IQ1_M:
    case GGUF_TYPE_IQ2_XXS:
    case GGUF_TYPE_IQ2_XS:
    case GGUF_TYPE_IQ2_S:
    case GGUF_TYPE_IQ3_XXS: return true;
    default: return false;
    }
}

/* Refuses, before anything is converted, a target that would write a tensor in a type that
 * needs importances the matrix does not have (none at all, or none for that tensor). */
static attnd_status check_importances(const gguf_file *f, quantize_target t, const imatrix *im,
                                      const quantize_model *m, attnd_err *err) {
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *ti = gguf_tensor_at(f, i);
        uint32_t to = quantize_tensor_type_for(t, ti->name, ti->n_dims, ti->ne, ti->type, m);
        if (to == ti->type || !needs_imatrix(ti->name, to)) continue;
        if (!im)
            return attnd_fail(err, ATTND_ERR_INVALID,
                              "%s needs an importance matrix (--imatrix FILE): tensor %s would be %s, which makes "
                              "garbage without one (llama.cpp refuses it too)",
                              TARGETS[t].name, ti->name, gguf_type_name(to));
        if (!imatrix_find(im, ti->name))
            return attnd_fail(err, ATTND_ERR_INVALID,
                              "the importance matrix has no entry for %s, which %s would write as %s: a very low-bit "
                              "type without importances makes garbage (llama.cpp refuses it too)",
                              ti->name, TARGETS[t].name, gguf_type_name(to));
    }
    return ATTND_OK;
}

static bool is_float_type(uint32_t type) {
    return type == GGUF_TYPE_F32 || type == GGUF_TYPE_F16 || type == GGUF_TYPE_BF16;
}

/* t's importances from im (malloc'd (n_mat, cols) into *out; NULL when im has no entry for t).
 * ATTND_ERR_FORMAT when the entry's shape is not t's. */
static attnd_status tensor_importance(const imatrix *im, const gguf_tensor *t, float **out, attnd_err *err) {
    *out = NULL;
    const imatrix_entry *e = im ? imatrix_find(im, t->name) : NULL;
    if (!e) return ATTND_OK;
    uint64_t n_mat = t->n_dims >= 3 ? t->ne[2] : 1;
    if ((uint64_t)e->cols != t->ne[0] || (uint64_t)e->n_mat != n_mat)
        return attnd_fail(err, ATTND_ERR_FORMAT,
                          "imatrix entry %s is %d x %d; the tensor has %llu columns, %llu matrices", t->name, e->n_mat,
                          e->cols, (unsigned long long)t->ne[0], (unsigned long long)n_mat);
    if (!(*out = malloc(sizeof(float) * (size_t)e->n_mat * (size_t)e->cols)))
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    for (int m = 0; m < e->n_mat; m++) imatrix_importance(e, m, *out + (size_t)m * e->cols);
    return ATTND_OK;
}

attnd_status quantize_file(const char *in_path, const char *out_path, quantize_target t,
                           quantize_progress_fn progress, void *user, attnd_err *err) {
    return quantize_file_imatrix(in_path, out_path, t, NULL, progress, user, err);
}

attnd_status quantize_file_imatrix(const char *in_path, const char *out_path, quantize_target t, const imatrix *im,
                                   quantize_progress_fn progress, void *user, attnd_err *err) {
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    void **bufs = NULL;
    uint64_t nt = 0;
    attnd_status st = gguf_open(&f, in_path, err);
    if (st != ATTND_OK) goto done;
    nt = gguf_tensor_count(f);
    if (nt == 0) {
        st = attnd_fail(err, ATTND_ERR_UNSUPPORTED, "%s: no tensors (a vocabulary-only file?)", in_path);
        goto done;
    }
    bufs = calloc(nt, sizeof(*bufs));
    if (!bufs || gguf_writer_create(&w) != ATTND_OK) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        goto done;
    }
    quantize_model m = quantize_model_of(f, im != NULL);
    if ((st = check_importances(f, t, im, &m, err)) != ATTND_OK) goto done;
    copy_metadata(w, f, t, im);
    for (uint64_t i = 0; i < nt; i++) {
        const gguf_tensor *ti = gguf_tensor_at(f, i);
        uint32_t to = quantize_tensor_type_for(t, ti->name, ti->n_dims, ti->ne, ti->type, &m);
        const void *data = ti->data;
        if (to != ti->type) {
            if (!is_float_type(ti->type)) {
                st = attnd_fail(err, ATTND_ERR_UNSUPPORTED,
                                "%s: tensor %s is already quantized (%s); quantize from an F32, F16 or BF16 file",
                                in_path, ti->name, gguf_type_name(ti->type));
                goto done;
            }
            uint64_t n_bytes;
            float *imp;
            if ((st = tensor_importance(im, ti, &imp, err)) != ATTND_OK) goto done;
            st = convert_tensor(ti, to, imp, &bufs[i], &n_bytes, err);
            free(imp);
            if (st != ATTND_OK) goto done;
            data = bufs[i];
        }
        if (progress) progress(user, ti->name, ti->type, to);
        gguf_writer_add_tensor(w, ti->name, to, ti->n_dims, ti->ne, data);
    }
    st = gguf_writer_write(w, out_path, err);
done:
    for (uint64_t i = 0; bufs && i < nt; i++) free(bufs[i]);
    free(bufs);
    gguf_writer_destroy(w);
    gguf_close(f);
    return st;
}
