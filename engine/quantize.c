/*
 * quantize.c — weight re-encoding for `attnd quantize` (see attnd/quantize.h for the contract).
 *
 * Encoders write the GGUF/ggml block layouts that engine/quant_format.c decodes; each one is checked in
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
#include "quant.h"
#include "threads.h"

#define QK 32    /* Q8_0 / Q4_0 block */
#define QK_K 256 /* k-quant super-block */

// ---- targets --------------------------------------------------------------------------------

static const struct {
    const char *name;
    uint32_t type;      /* the tensor type of a plain target (Q4_K for the Q4_K_M mix) */
    uint32_t file_type; /* llama.cpp's general.file_type (LLAMA_FTYPE_*) */
} TARGETS[] = {
    [QUANTIZE_F16] = {"F16", GGUF_TYPE_F16, 1},       [QUANTIZE_BF16] = {"BF16", GGUF_TYPE_BF16, 32},
    [QUANTIZE_Q8_0] = {"Q8_0", GGUF_TYPE_Q8_0, 7},    [QUANTIZE_Q4_0] = {"Q4_0", GGUF_TYPE_Q4_0, 2},
    [QUANTIZE_Q4_K] = {"Q4_K", GGUF_TYPE_Q4_K, 14},   [QUANTIZE_Q6_K] = {"Q6_K", GGUF_TYPE_Q6_K, 18},
    [QUANTIZE_Q4_K_M] = {"Q4_K_M", GGUF_TYPE_Q4_K, 15},
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

const char *quantize_target_list(void) { return "F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q4_K_M"; }

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

/* The Q4_K_M choice for one tensor, before the row-size fallback. */
static uint32_t q4_k_m_type(const char *name, int n_layer, bool has_output) {
    if (!strcmp(name, "output.weight") || (!has_output && !strcmp(name, "token_embd.weight"))) return GGUF_TYPE_Q6_K;
    int layer = layer_of(name);
    if (layer >= 0 && (ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight")) &&
        use_more_bits(layer, n_layer))
        return GGUF_TYPE_Q6_K;
    return GGUF_TYPE_Q4_K;
}

uint32_t quantize_tensor_type(quantize_target t, const char *name, uint32_t n_dims, const uint64_t *ne,
                              uint32_t in_type, int n_layer, bool has_output) {
    if (n_dims < 2 || !ends_with(name, "weight")) return in_type;
    uint32_t type = t == QUANTIZE_Q4_K_M ? q4_k_m_type(name, n_layer, has_output) : TARGETS[t].type;
    /* rows the block does not divide (F16/BF16 blocks are 1 element: they always fit): llama.cpp's
     * fallbacks, Q6_K -> Q8_0 and Q4_K -> Q5_0 there (Q8_0 here: attnd does not compute Q5_0),
     * then F16 when 32 does not divide either */
    if (ne[0] % gguf_type_block_elems(type)) type = GGUF_TYPE_Q8_0;
    if (ne[0] % gguf_type_block_elems(type)) type = GGUF_TYPE_F16;
    return type;
}

// ---- block encoders ---------------------------------------------------------------------------

static void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Symmetric fit: x[i] ~ s * q[i], q in [-nmax, nmax - 1]; returns s (0 for an all-zero block).
 * The extreme value maps to -nmax, as ggml's symmetric types do, then nearby scales are tried. */
static float fit_symmetric(const float *x, int n, int nmax) {
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
            sqx += (double)q * x[i], sqq += (double)q * q;
        }
        if (sqq == 0) continue;
        float s = (float)(sqx / sqq), err = 0.f;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrintf(x[i] / s), -nmax, nmax - 1);
            err += (s * q - x[i]) * (s * q - x[i]);
        }
        if (err < best_err) best_err = err, best_s = s;
    }
    return best_s;
}

/* Affine fit: x[i] ~ s * q[i] - m, q in [0, nmax], m >= 0 (so 0 stays representable). */
static void fit_affine(const float *x, int n, int nmax, float *s_out, float *m_out) {
    float lo = 0.f, hi = x[0];
    for (int i = 0; i < n; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    *s_out = hi > lo ? (hi - lo) / nmax : 0.f, *m_out = -lo;
    if (hi <= lo) return;
    float best_err = INFINITY;
    for (int step = -10; step <= 10; step++) {
        float is = (nmax + 0.1f * step) / (hi - lo);
        double sq = 0, sqq = 0, sx = 0, sqx = 0;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrintf(is * (x[i] - lo)), 0, nmax);
            sq += q, sqq += (double)q * q, sx += x[i], sqx += (double)q * x[i];
        }
        double det = n * sqq - sq * sq, s, b;
        if (det <= 0) continue;
        s = (n * sqx - sq * sx) / det, b = (sqq * sx - sq * sqx) / det;
        if (b > 0) b = 0, s = sqx / sqq;
        if (s <= 0) continue;
        float err = 0.f;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrint((x[i] - b) / s), 0, nmax);
            err += (float)((s * q + b - x[i]) * (s * q + b - x[i]));
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
static void encode_q4_0(uint8_t *dst, const float *x) {
    float d = quant_f16_to_f32(quant_f32_to_f16(fit_symmetric(x, QK, 8))), id = d != 0.f ? 1.f / d : 0.f;
    st16(dst, quant_f32_to_f16(d));
    for (int j = 0; j < QK / 2; j++) {
        int a = clampi((int)lrintf(x[j] * id) + 8, 0, 15), b = clampi((int)lrintf(x[j + 16] * id) + 8, 0, 15);
        dst[2 + j] = (uint8_t)(a | b << 4);
    }
}

/* Q4_K super-block: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) pairs for 8 sub-blocks of 32,
 * 128 bytes of nibbles (sub-blocks 2p and 2p+1 share bytes 32p..32p+31: low and high nibble).
 * x = d * sc[j] * q - dmin * mn[j]. */
static void encode_q4_k(uint8_t *dst, const float *x) {
    float s[8], m[8], smax = 0.f, mmax = 0.f;
    for (int j = 0; j < 8; j++) {
        fit_affine(x + 32 * j, 32, 15, &s[j], &m[j]);
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
    uint8_t *scales = dst + 4, *qs = dst + 16;
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        scales[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    uint8_t q[QK_K];
    for (int j = 0; j < 8; j++) {
        float step = d * sc[j], off = dmin * mn[j];
        for (int i = 0; i < 32; i++)
            q[32 * j + i] = (uint8_t)(step > 0.f ? clampi((int)lrintf((x[32 * j + i] + off) / step), 0, 15) : 0);
    }
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) qs[32 * p + l] = (uint8_t)(q[64 * p + l] | q[64 * p + 32 + l] << 4);
}

/* Q6_K super-block: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] for sub-blocks
 * of 16, f16 d; x = d * scales[j] * (q - 32). In each 128-element half h, element 128h + l + 32k
 * (l < 32, k < 4) keeps its low bits in ql[64h + l + 32(k & 1)] (nibble k >> 1) and its high
 * bits in qh[32h + l] (bits 2k, 2k+1). */
static void encode_q6_k(uint8_t *dst, const float *x) {
    float s[16], smax = 0.f;
    for (int j = 0; j < 16; j++) {
        s[j] = fit_symmetric(x + 16 * j, 16, 32);
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

void quantize_row(void *dst, const float *src, uint32_t type, int64_t n) {
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
    for (int64_t b = 0; b < n / be; b++, d += bb, src += be) {
        switch (type) {
        case GGUF_TYPE_Q8_0: encode_q8_0(d, src); break;
        case GGUF_TYPE_Q4_0: encode_q4_0(d, src); break;
        case GGUF_TYPE_Q4_K: encode_q4_k(d, src); break;
        case GGUF_TYPE_Q6_K: encode_q6_k(d, src); break;
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
        quantize_row(j->dst + (size_t)r * j->out_row, row, j->type, j->n_cols);
    }
    free(row);
}

/* Converts the rows of tensor t into `type`; *out receives a malloc'd buffer of the new bytes. */
static attnd_status convert_tensor(const gguf_tensor *t, uint32_t type, void **out, uint64_t *n_bytes,
                                   attnd_err *err) {
    int64_t n_cols = (int64_t)t->ne[0], n_rows = (int64_t)(t->n_elems / t->ne[0]);
    size_t in_row = quant_row_bytes(t->type, n_cols), out_row = quant_row_bytes(type, n_cols);
    *n_bytes = (uint64_t)out_row * (uint64_t)n_rows;
    uint8_t *dst = malloc(*n_bytes ? *n_bytes : 1);
    if (!dst) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory converting %s", t->name);
    convert_job j = {t, type, dst, n_cols, n_rows, (n_rows + 63) / 64, in_row, out_row, false};
    if (j.per < 1) j.per = 1;
    threads_run(threads_default(), (int)((n_rows + j.per - 1) / j.per), convert_rows, &j);
    if (atomic_load(&j.nomem)) {
        free(dst);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory converting %s", t->name);
    }
    *out = dst;
    return ATTND_OK;
}

/* n_layer from "<arch>.block_count" (0 when absent). */
static int block_count(const gguf_file *f) {
    const char *arch = NULL;
    if (gguf_get_str(f, "general.architecture", &arch, NULL) != ATTND_OK) return 0;
    char key[128];
    uint32_t n = 0;
    snprintf(key, sizeof(key), "%.100s.block_count", arch);
    return gguf_get_u32(f, key, &n, NULL) == ATTND_OK ? (int)n : 0;
}

/* Copies the metadata, replacing the keys that describe the encoding. */
static void copy_metadata(gguf_writer *w, const gguf_file *f, quantize_target t) {
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (!strcmp(kv->key, "general.file_type") || !strcmp(kv->key, "general.quantization_version") ||
            !strcmp(kv->key, "general.alignment")) /* the writer aligns to 32, the default */
            continue;
        gguf_writer_add_kv(w, kv);
    }
    if (gguf_find_kv(f, "general.alignment")) gguf_writer_add_u32(w, "general.alignment", 32);
    gguf_writer_add_u32(w, "general.file_type", TARGETS[t].file_type);
    if (t != QUANTIZE_F16 && t != QUANTIZE_BF16) gguf_writer_add_u32(w, "general.quantization_version", 2);
}

static bool is_float_type(uint32_t type) {
    return type == GGUF_TYPE_F32 || type == GGUF_TYPE_F16 || type == GGUF_TYPE_BF16;
}

attnd_status quantize_file(const char *in_path, const char *out_path, quantize_target t,
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
    copy_metadata(w, f, t);
    int n_layer = block_count(f);
    bool has_output = gguf_find_tensor(f, "output.weight") != NULL;
    for (uint64_t i = 0; i < nt; i++) {
        const gguf_tensor *ti = gguf_tensor_at(f, i);
        uint32_t to = quantize_tensor_type(t, ti->name, ti->n_dims, ti->ne, ti->type, n_layer, has_output);
        const void *data = ti->data;
        if (to != ti->type) {
            if (!is_float_type(ti->type)) {
                st = attnd_fail(err, ATTND_ERR_UNSUPPORTED,
                                "%s: tensor %s is already quantized (%s); quantize from an F32, F16 or BF16 file",
                                in_path, ti->name, gguf_type_name(ti->type));
                goto done;
            }
            uint64_t n_bytes;
            if ((st = convert_tensor(ti, to, &bufs[i], &n_bytes, err)) != ATTND_OK) goto done;
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
