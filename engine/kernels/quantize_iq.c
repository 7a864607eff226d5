/*
 * quantize_iq.c — encoders of the lattice types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
 * IQ1_M) for `attnd quantize` (quantize_iq.h; layouts and decoders in quant_iq.c).
 *
 * A lattice type writes each group of 8 (IQ2, IQ1) or 4 (IQ3) weights as one entry of a fixed
 * grid, times a scale per 16 or 32 weights (d * K * (2l + 1), l of 4 or 3 bits). The encoder is a
 * weighted least-squares search, w[i] being the importance of weight i:
 *   1. signs (IQ2/IQ3): the grid holds magnitudes; the types with 7 stored sign bits per 8 weights
 *      need an even count of negatives, so when it is odd the weight of least w x^2 gets the wrong
 *      sign (its target becomes -|x|). IQ1 has no signs: its entries are -1/0/1 plus a shift of
 *      +-1/8 shared by 32 (IQ1_S) or 8 (IQ1_M) weights.
 *   2. a scale per sub-block: IQ2/IQ3 try 12/16 coarse scales that put max|x| between the second
 *      level and 1.25 times the top one, then 6 fine ones around the best; at each, every group
 *      takes its nearest grid entry in weighted distance, the scale is refitted by least squares,
 *      and the assignment of the best fit is kept. IQ1 solves the three-level problem
 *      exactly for each shift pattern (sort, then every pair of split points, from prefix sums),
 *      then moves each group to the grid.
 *   3. the block: d from the largest sub-block scale, each l rounded and then l-1, l, l+1 tried with
 *      the groups re-picked at the scale the decoder will really use (and IQ1's shifts re-chosen),
 *      then d refitted by least squares over the block and kept when the error falls.
 *   4. IQ1 only: d scaled so that the decoded block has the target's weighted energy (the
 *      least-squares fit shrinks it: energy_gain).
 * The nearest entry to a point: each coordinate is rounded to the nearest level; when that point is
 * on the grid it is the weighted optimum, else the candidates are the grid entries nearest to it
 * (all those within the `nwant` smallest distances in level steps, precomputed per point).
 * Facts taken from llama.cpp's ggml-quants.c: the block layouts and grids, the weighting
 * imp * sqrt(sigma2 + x^2) (quantize.c's WEIGHT_RULES), the parity flip of the least important
 * weight, the neighbour lists by distance rank and their depth per type. The search itself
 * (levels at their true values, the re-pick at the stored scale, the refit of d) is ours.
 */
#include "quantize_iq.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "attnd/gguf.h"
#include "quant.h"
#include "quant_impl.h"
#include "quant_iq.h"

// ---- the grids as search tables -----------------------------------------------------------------

enum { LAT_IQ2XXS, LAT_IQ2XS, LAT_IQ2S, LAT_IQ3XXS, LAT_IQ3S, LAT_IQ1S, LAT_COUNT };

typedef struct lattice {
    int n, width, bits, nwant;  /* entries, values per entry, bits per level digit, neighbour depth */
    const uint16_t *codes;      /* the compact codes: digit k of entry i is codes[i] >> bits*k */
    int n_levels;
    float levels[8];            /* the value of each digit, ascending */
    float mids[7];              /* midpoints between consecutive levels (rounding thresholds) */
    float *val;                 /* (n, width) entry values */
    int32_t *map;               /* (1 << bits*width) point -> entry (>= 0), -(1 + offset) into nb, or INT32_MIN */
    uint16_t *nb;               /* at each offset: a count, then that many entries */
    atomic_bool ready;
} lattice;

#define LAT(N, W, B, D, CODES) {.n = (N), .width = (W), .bits = (B), .nwant = (D), .codes = (CODES)}
static lattice LATS[LAT_COUNT] = {
    [LAT_IQ2XXS] = LAT(256, 8, 2, 2, quant_iq2xxs_codes), [LAT_IQ2XS] = LAT(512, 8, 2, 2, quant_iq2xs_codes),
    [LAT_IQ2S] = LAT(1024, 8, 2, 1, quant_iq2s_codes),    [LAT_IQ3XXS] = LAT(256, 4, 3, 2, quant_iq3xxs_codes),
    [LAT_IQ3S] = LAT(512, 4, 3, 3, quant_iq3s_codes),     [LAT_IQ1S] = LAT(2048, 8, 2, 3, quant_iq1s_codes),
};
#undef LAT
static pthread_mutex_t g_build_lock = PTHREAD_MUTEX_INITIALIZER;

static int digit(const lattice *L, uint32_t code, int k) { return (int)(code >> (L->bits * k)) & ((1 << L->bits) - 1); }

/* The values of entry i as the decoder reads them (quant_iq_grids). */
static float grid_value(int lat, const quant_iq_grids *g, int i, int k) {
    switch (lat) {
    case LAT_IQ2XXS: return g->iq2xxs[i][k];
    case LAT_IQ2XS: return g->iq2xs[i][k];
    case LAT_IQ2S: return g->iq2s[i][k];
    case LAT_IQ3XXS: return g->iq3xxs[i][k];
    case LAT_IQ3S: return g->iq3s[i][k];
    default: return g->iq1s[i][k];
    }
}

/* Appends point `key`'s neighbour list: every entry within the nwant smallest distances (in level
 * steps; dg: the entries' digits, (n, 8)). */
static bool add_neighbours(buf *nb, const lattice *L, uint32_t key, const uint8_t *dg, int *d2) {
    int kd[8] = {0};
    for (int k = 0; k < L->width; k++) kd[k] = digit(L, key, k);
    for (int j = 0; j < L->n; j++) {
        int s = 0;
        for (int k = 0; k < 8; k++) s += (kd[k] - dg[8 * j + k]) * (kd[k] - dg[8 * j + k]);
        d2[j] = s;
    }
    int thr = -1;
    for (int r = 0; r < L->nwant; r++) {
        int next = INT_MAX;
        for (int j = 0; j < L->n; j++)
            if (d2[j] > thr && d2[j] < next) next = d2[j];
        if (next == INT_MAX) break;
        thr = next;
    }
    uint16_t count = 0;
    for (int j = 0; j < L->n; j++) count += d2[j] <= thr;
    if (!buf_append(nb, &count, sizeof count)) return false;
    for (int j = 0; j < L->n; j++) {
        uint16_t e = (uint16_t)j;
        if (d2[j] <= thr && !buf_append(nb, &e, sizeof e)) return false;
    }
    return true;
}

static attnd_status lattice_build(lattice *L, int lat) {
    const quant_iq_grids *g = quant_iq_grids_get();
    size_t n_keys = (size_t)1 << (L->bits * L->width);
    float *val = malloc(sizeof(float) * (size_t)L->n * (size_t)L->width);
    int32_t *map = malloc(sizeof(int32_t) * n_keys);
    int *d2 = malloc(sizeof(int) * (size_t)L->n);
    uint8_t *dg = calloc((size_t)L->n * 8, 1); /* (n, 8) digits of each entry, 0 past the width */
    buf nb;
    buf_init(&nb);
    if (!val || !map || !d2 || !dg) goto nomem;
    L->n_levels = 0;
    for (int i = 0; i < L->n; i++)
        for (int k = 0; k < L->width; k++) {
            int d = digit(L, L->codes[i], k);
            val[i * L->width + k] = L->levels[d] = grid_value(lat, g, i, k);
            dg[8 * i + k] = (uint8_t)d;
            if (d + 1 > L->n_levels) L->n_levels = d + 1;
        }
    for (int i = 0; i + 1 < L->n_levels; i++) {
        ATTND_ASSERT(L->levels[i] < L->levels[i + 1]);
        L->mids[i] = 0.5f * (L->levels[i] + L->levels[i + 1]);
    }
    for (size_t key = 0; key < n_keys; key++) map[key] = INT32_MIN;
    for (int i = 0; i < L->n; i++) map[L->codes[i]] = i;
    for (size_t key = 0; key < n_keys; key++) {
        bool valid = map[key] == INT32_MIN;
        for (int k = 0; valid && k < L->width; k++) valid = digit(L, (uint32_t)key, k) < L->n_levels;
        if (!valid) continue;
        map[key] = -(int32_t)(nb.len / sizeof(uint16_t)) - 1;
        if (!add_neighbours(&nb, L, (uint32_t)key, dg, d2)) goto nomem;
    }
    free(d2);
    free(dg);
    L->val = val, L->map = map, L->nb = (uint16_t *)(void *)nb.p; /* buf's storage is malloc'd: aligned */
    return ATTND_OK;
nomem:
    free(val);
    free(map);
    free(d2);
    free(dg);
    buf_free(&nb);
    return ATTND_ERR_NOMEM;
}

// ---- the types ----------------------------------------------------------------------------------

typedef enum { SIGNS_PARITY, SIGNS_FREE, SIGNS_NONE } sign_mode;

typedef struct iq_spec {
    uint32_t type;
    int lat;
    int sub;         /* weights per scale */
    int l_max;       /* largest scale digit: ls = 2l + 1 */
    float k;         /* x = d * k * ls * value (IQ1: d * ls * (value +- 1/8)) */
    sign_mode signs;
    int shift_group; /* IQ1: weights sharing the sign of the 1/8 shift; 0 for the others */
    int bytes;
} iq_spec;

static const iq_spec SPECS[] = {
    {GGUF_TYPE_IQ2_XXS, LAT_IQ2XXS, 32, 15, 0.125f, SIGNS_PARITY, 0, IQ2_XXS_BYTES},
    {GGUF_TYPE_IQ2_XS, LAT_IQ2XS, 16, 15, 0.125f, SIGNS_PARITY, 0, IQ2_XS_BYTES},
    {GGUF_TYPE_IQ2_S, LAT_IQ2S, 16, 15, 0.125f, SIGNS_FREE, 0, IQ2_S_BYTES},
    {GGUF_TYPE_IQ3_XXS, LAT_IQ3XXS, 32, 15, 0.25f, SIGNS_PARITY, 0, IQ3_XXS_BYTES},
    {GGUF_TYPE_IQ3_S, LAT_IQ3S, 32, 15, 1.f, SIGNS_FREE, 0, IQ3_S_BYTES},
    {GGUF_TYPE_IQ1_S, LAT_IQ1S, 32, 7, 1.f, SIGNS_NONE, 32, IQ1_S_BYTES},
    {GGUF_TYPE_IQ1_M, LAT_IQ1S, 16, 7, 1.f, SIGNS_NONE, 8, IQ1_M_BYTES},
};

static const iq_spec *spec_of(uint32_t type) {
    for (size_t i = 0; i < ATTND_ARRAY_LEN(SPECS); i++)
        if (SPECS[i].type == type) return &SPECS[i];
    return NULL;
}

bool quantize_iq_is_lattice(uint32_t type) { return spec_of(type) != NULL; }

attnd_status quantize_iq_prepare(uint32_t type) {
    const iq_spec *sp = spec_of(type);
    ATTND_ASSERT(sp);
    lattice *L = &LATS[sp->lat];
    if (atomic_load(&L->ready)) return ATTND_OK;
    pthread_mutex_lock(&g_build_lock);
    attnd_status st = atomic_load(&L->ready) ? ATTND_OK : lattice_build(L, sp->lat);
    if (st == ATTND_OK) atomic_store(&L->ready, true);
    pthread_mutex_unlock(&g_build_lock);
    return st;
}

// ---- the search ---------------------------------------------------------------------------------

static const float IQ1_SHIFT = 0.125f;

/* Weighted squared error of the group x (width) as entry e at scale s with shift delta; the widths
 * are spelled out so that the compiler unrolls (the encoders spend most of their time here). */
static inline float entry_err_w(const float *v, const float *x, const float *w, float s, float delta, int width) {
    float err = 0.f;
    for (int i = 0; i < width; i++) {
        float r = x[i] - s * (v[i] + delta);
        err += w[i] * r * r;
    }
    return err;
}

static float entry_err(const lattice *L, int e, const float *x, const float *w, float s, float delta) {
    return L->width == 8 ? entry_err_w(L->val + 8 * e, x, w, s, delta, 8) : entry_err_w(L->val + 4 * e, x, w, s, delta, 4);
}

/* The entry of least weighted error for the group x at scale s > 0 (see the file header). */
static int lattice_pick(const lattice *L, const float *x, const float *w, float s, float delta, float *err) {
    uint32_t key = 0;
    float is = 1.f / s;
    for (int i = 0; i < L->width; i++) {
        float t = x[i] * is - delta;
        int dg = 0;
        while (dg < L->n_levels - 1 && t > L->mids[dg]) dg++;
        key |= (uint32_t)dg << (L->bits * i);
    }
    int32_t m = L->map[key];
    if (m >= 0) {
        *err = entry_err(L, m, x, w, s, delta);
        return m;
    }
    const uint16_t *list = L->nb + (-(int64_t)m - 1);
    int best = list[1];
    float best_err = INFINITY;
    if (L->width == 8)
        for (int j = 1; j <= list[0]; j++) {
            float e = entry_err_w(L->val + 8 * list[j], x, w, s, delta, 8);
            if (e < best_err) best_err = e, best = list[j];
        }
    else
        for (int j = 1; j <= list[0]; j++) {
            float e = entry_err_w(L->val + 4 * list[j], x, w, s, delta, 4);
            if (e < best_err) best_err = e, best = list[j];
        }
    *err = best_err;
    return best;
}

/* The least-squares scale's numerator and denominator of groups idx (n weights, shifts neg). */
static void fit_sums(const lattice *L, const float *x, const float *w, int n, const uint16_t *idx, const int8_t *neg,
                     double *num, double *den) {
    *num = *den = 0;
    for (int i = 0; i < n; i++) {
        float delta = neg ? (neg[i / 8] ? -IQ1_SHIFT : IQ1_SHIFT) : 0.f;
        double q = L->val[idx[i / L->width] * L->width + i % L->width] + delta;
        *num += w[i] * x[i] * q, *den += w[i] * q * q;
    }
}

/* IQ2/IQ3 sub-block: the scale s (x ~ s * value) and the groups' entries; 0 for an all-zero target. */
static float search_magnitude(const lattice *L, const float *x, const float *w, int n, uint16_t *idx) {
    float mx = 0.f;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, x[i]);
    memset(idx, 0, sizeof(uint16_t) * (size_t)(n / L->width));
    if (!(mx > 1e-30f)) return 0.f;
    float vmax = L->levels[L->n_levels - 1], e, s_best = 0.f, r_best = 1.f;
    double best = 0;
    uint16_t cur[8];
    /* coarse ratios r (the largest target at r times the top level) from the second level's share
     * of the top one to 1.25 (12 for the 3 levels of IQ2, 16 for the 8 of IQ3), 6 fine ones
     * around the best, then the re-pick at the best least-squares scale */
    int n_coarse = L->n_levels > 3 ? 16 : 12;
    float r_lo = 0.95f * L->levels[1] / vmax, ratio = powf(1.25f / r_lo, 1.f / (float)(n_coarse - 1));
    for (int step = 0; step < n_coarse + 7; step++) {
        int fine = step - n_coarse; /* 0..5: -3..-1, 1..3 */
        if (fine == 0 && s_best > 0.f) r_best = mx / (vmax * s_best);
        float r = fine < 0 ? r_lo * powf(ratio, (float)step) : r_best * (1.f + 0.02f * (float)(fine < 3 ? fine - 3 : fine - 2));
        float s = fine < 6 ? mx / (vmax * r) : s_best;
        if (!(s > 0.f)) break;
        for (int gi = 0; gi < n / L->width; gi++)
            cur[gi] = (uint16_t)lattice_pick(L, x + gi * L->width, w + gi * L->width, s, 0.f, &e);
        double num, den;
        fit_sums(L, x, w, n, cur, NULL, &num, &den);
        if (num > 0 && den > 0 && num * num > best * den) {
            best = num * num / den, s_best = (float)(num / den);
            memcpy(idx, cur, sizeof(uint16_t) * (size_t)(n / L->width));
        }
    }
    return s_best;
}

/* IQ1 sub-block (n <= 32 weights, shifts per sp->shift_group): the exact three-level fit for each
 * shift pattern, then each group moved to the grid and the scale refitted. */
static float search_split(const iq_spec *sp, const lattice *L, const float *x, const float *w, int n, uint16_t *idx,
                          int8_t *neg) {
    int ord[32], units = n / sp->shift_group;
    for (int i = 0; i < n; i++) { /* ord: the weights by ascending x */
        int j = i;
        for (; j > 0 && x[ord[j - 1]] > x[i]; j--) ord[j] = ord[j - 1];
        ord[j] = i;
    }
    double best = 0, s = 0;
    int best_pat = 0;
    for (int pat = 0; pat < 1 << units; pat++) {
        double pa[33] = {0}, pc[33] = {0}, pd[33] = {0}, b = 0, e = 0;
        for (int r = 0; r < n; r++) {
            int i = ord[r];
            double dl = (pat >> (i / sp->shift_group)) & 1 ? -IQ1_SHIFT : IQ1_SHIFT;
            pa[r + 1] = pa[r] + w[i] * x[i], pc[r + 1] = pc[r] + w[i], pd[r + 1] = pd[r] + w[i] * dl;
            b += w[i] * x[i] * dl, e += w[i] * dl * dl;
        }
        for (int i1 = 0; i1 <= n; i1++) /* [0, i1): -1, [i1, i2): 0, [i2, n): +1 */
            for (int i2 = i1; i2 <= n; i2++) {
                double num = -pa[i1] + (pa[n] - pa[i2]) + b;
                double den = pc[i1] + (pc[n] - pc[i2]) + 2 * (-pd[i1] + (pd[n] - pd[i2])) + e;
                if (num > 0 && den > 0 && num * num > best * den) best = num * num / den, s = num / den, best_pat = pat;
            }
    }
    for (int g8 = 0; g8 < n / 8; g8++) neg[g8] = (int8_t)((best_pat >> (8 * g8 / sp->shift_group)) & 1);
    memset(idx, 0, sizeof(uint16_t) * (size_t)(n / 8));
    if (!(s > 0)) return 0.f;
    float err;
    for (int g8 = 0; g8 < n / 8; g8++)
        idx[g8] = (uint16_t)lattice_pick(L, x + 8 * g8, w + 8 * g8, (float)s, neg[g8] ? -IQ1_SHIFT : IQ1_SHIFT, &err);
    double num, den;
    fit_sums(L, x, w, n, idx, neg, &num, &den);
    return num > 0 && den > 0 ? (float)(num / den) : (float)s;
}

/* One super-block being encoded. */
typedef struct iq_block {
    float xv[QK_K];    /* the targets: |x| (one negated in an odd group of a parity type), or x (IQ1) */
    uint8_t sg[32];    /* per 8 weights, bit j: weight j is stored negative */
    uint16_t idx[64];  /* grid entry of each group */
    int8_t neg[32];    /* IQ1: per 8 weights, the shift is -1/8 */
    int l[16];         /* scale digit of each sub-block */
    float d;
} iq_block;

/* Sub-block j re-picked at step (= d * k * ls): its error; entries (and IQ1 shifts) into idx, neg. */
static float sub_fit(const iq_spec *sp, const lattice *L, const iq_block *b, const float *w, int j, float step,
                     uint16_t *idx, int8_t *neg) {
    const float *x = b->xv + j * sp->sub;
    const float *wj = w + j * sp->sub;
    float total = 0.f, e;
    if (!sp->shift_group) {
        for (int gi = 0; gi < sp->sub / L->width; gi++) {
            idx[gi] = (uint16_t)lattice_pick(L, x + gi * L->width, wj + gi * L->width, step, 0.f, &e);
            total += e;
        }
        return total;
    }
    int per = sp->shift_group / 8; /* groups of 8 per shift */
    for (int u = 0; u < sp->sub / sp->shift_group; u++) {
        float best = INFINITY;
        uint16_t cand[4];
        for (int ng = 0; ng < 2; ng++) {
            float sum = 0.f;
            for (int q = 0; q < per; q++) {
                int g8 = u * per + q;
                cand[q] = (uint16_t)lattice_pick(L, x + 8 * g8, wj + 8 * g8, step, ng ? -IQ1_SHIFT : IQ1_SHIFT, &e);
                sum += e;
            }
            if (sum < best) {
                best = sum;
                for (int q = 0; q < per; q++) idx[u * per + q] = cand[q], neg[u * per + q] = (int8_t)ng;
            }
        }
        total += best;
    }
    return total;
}

/* With d fixed: each sub-block's digit among l0-1..l0+1 (l0 from its scale s[j], or b->l when s is
 * NULL) and its groups re-picked, into b; returns the block's error. */
static float block_fit(const iq_spec *sp, const lattice *L, iq_block *b, const float *w, float d, const float *s) {
    int groups = sp->sub / L->width, g8s = sp->sub / 8;
    float total = 0.f;
    for (int j = 0; j < QK_K / sp->sub; j++) {
        int l0 = s ? (int)lrintf(0.5f * (s[j] / (d * sp->k) - 1.f)) : b->l[j];
        float best = INFINITY;
        uint16_t idx[8];
        int8_t neg[4] = {0};
        for (int l = l0 - 1; l <= l0 + 1; l++) {
            if (l < 0 || l > sp->l_max) continue;
            float e = sub_fit(sp, L, b, w, j, d * sp->k * (float)(2 * l + 1), idx, neg);
            if (e < best) {
                best = e, b->l[j] = l;
                memcpy(b->idx + j * groups, idx, sizeof(uint16_t) * (size_t)groups);
                if (sp->shift_group) memcpy(b->neg + j * g8s, neg, (size_t)g8s);
            }
        }
        total += best;
    }
    b->d = d;
    return total;
}

/* The least-squares d of b's choices, rounded to f16 (0 when there is none). */
static float refit_d(const iq_spec *sp, const lattice *L, const iq_block *b, const float *w) {
    double num, den, tn = 0, td = 0;
    for (int j = 0; j < QK_K / sp->sub; j++) {
        const int off = j * sp->sub;
        fit_sums(L, b->xv + off, w + off, sp->sub, b->idx + off / L->width, sp->shift_group ? b->neg + off / 8 : NULL,
                 &num, &den);
        double ls = sp->k * (2 * b->l[j] + 1);
        tn += num * ls, td += den * ls * ls;
    }
    return tn > 0 && td > 0 ? quant_f16_to_f32(quant_f32_to_f16((float)(tn / td))) : 0.f;
}

/* The factor that gives b's decoded block the weighted energy of its target: sqrt(sum w x^2 /
 * sum w y^2). A least-squares fit leaves sum w y^2 = sum w x y = rho^2 sum w x^2, rho the weighted
 * correlation of the code with the target: the decoded block is the target shrunk by rho^2 plus
 * noise. At the 1.5-1.75 bits of IQ1 rho^2 is about 0.83 on every block (attnd-sotu, IQ1_S: gain
 * 1.065-1.126 for 98 % of the blocks), so every matrix of the model shrinks alike and the
 * shrinkage compounds through the layers; the per-block error cannot see it. Matching the energy
 * costs 2(1 - rho) instead of 1 - rho^2 of the weighted error (+4-10 %) and buys perplexity: 53.05
 * -> 51.73 for IQ1_S (llama.cpp's 51.70; its encoder multiplies d by a fixed 1.125), 50.84 ->
 * 49.97 for IQ1_M (tools/quant/iq_ppl_vs_llamacpp.sh). IQ2/IQ3 (rho^2 >= 0.9) gain nothing from
 * it, so it stays IQ1's. */
static float energy_gain(const iq_spec *sp, const lattice *L, const iq_block *b, const float *w) {
    double sxx = 0, syy = 0;
    for (int j = 0; j < QK_K / sp->sub; j++) {
        double ls = b->d * sp->k * (2 * b->l[j] + 1);
        for (int i = j * sp->sub; i < (j + 1) * sp->sub; i++) {
            double y = ls * (L->val[b->idx[i / 8] * 8 + i % 8] + (b->neg[i / 8] ? -IQ1_SHIFT : IQ1_SHIFT));
            sxx += w[i] * (double)b->xv[i] * b->xv[i], syy += w[i] * y * y;
        }
    }
    return syy > 0 && sxx > 0 ? (float)sqrt(sxx / syy) : 1.f;
}

// ---- packing ------------------------------------------------------------------------------------

static void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static void pack(uint8_t *dst, const iq_spec *sp, const iq_block *b) {
    uint16_t dh = quant_f32_to_f16(b->d);
    memset(dst, 0, (size_t)sp->bytes);
    switch (sp->type) {
    case GGUF_TYPE_IQ2_XXS:
        st16(dst, dh);
        for (int ib = 0; ib < 8; ib++) {
            uint32_t aux = (uint32_t)b->l[ib] << 28;
            for (int q = 0; q < 4; q++) dst[2 + 8 * ib + q] = (uint8_t)b->idx[4 * ib + q], aux |= (uint32_t)(b->sg[4 * ib + q] & 127) << (7 * q);
            st32(dst + 2 + 8 * ib + 4, aux);
        }
        break;
    case GGUF_TYPE_IQ2_XS:
        st16(dst, dh);
        for (int g = 0; g < 32; g++) st16(dst + 2 + 2 * g, (uint16_t)(b->idx[g] | (b->sg[g] & 127) << 9));
        for (int j = 0; j < 16; j++) dst[66 + j / 2] |= (uint8_t)(b->l[j] << (4 * (j % 2)));
        break;
    case GGUF_TYPE_IQ2_S:
        st16(dst, dh);
        for (int g = 0; g < 32; g++) {
            dst[2 + g] = (uint8_t)b->idx[g], dst[34 + g] = b->sg[g];
            dst[66 + g / 4] |= (uint8_t)((b->idx[g] >> 8) << (2 * (g % 4)));
        }
        for (int j = 0; j < 16; j++) dst[74 + j / 2] |= (uint8_t)(b->l[j] << (4 * (j % 2)));
        break;
    case GGUF_TYPE_IQ3_XXS:
        st16(dst, dh);
        for (int g = 0; g < 64; g++) dst[2 + g] = (uint8_t)b->idx[g];
        for (int ib = 0; ib < 8; ib++) {
            uint32_t aux = (uint32_t)b->l[ib] << 28;
            for (int q = 0; q < 4; q++) aux |= (uint32_t)(b->sg[4 * ib + q] & 127) << (7 * q);
            st32(dst + 66 + 4 * ib, aux);
        }
        break;
    case GGUF_TYPE_IQ3_S:
        st16(dst, dh);
        for (int g = 0; g < 64; g++) {
            dst[2 + g] = (uint8_t)b->idx[g];
            dst[66 + g / 8] |= (uint8_t)((b->idx[g] >> 8) << (g % 8));
        }
        memcpy(dst + 74, b->sg, 32);
        for (int j = 0; j < 8; j++) dst[106 + j / 2] |= (uint8_t)(b->l[j] << (4 * (j % 2)));
        break;
    case GGUF_TYPE_IQ1_S:
        st16(dst, dh);
        for (int ib = 0; ib < 8; ib++) {
            uint16_t h = (uint16_t)(b->l[ib] << 12 | (b->neg[4 * ib] ? 0x8000 : 0));
            for (int q = 0; q < 4; q++) dst[2 + 4 * ib + q] = (uint8_t)b->idx[4 * ib + q], h |= (uint16_t)((b->idx[4 * ib + q] >> 8) << (3 * q));
            st16(dst + 34 + 2 * ib, h);
        }
        break;
    default: { /* IQ1_M */
        for (int g = 0; g < 32; g++) {
            dst[g] = (uint8_t)b->idx[g];
            dst[32 + g / 2] |= (uint8_t)(((b->idx[g] >> 8) | (b->neg[g] ? 8 : 0)) << (4 * (g % 2)));
        }
        for (int q = 0; q < 4; q++) {
            uint16_t sc = (uint16_t)((dh >> (4 * q)) & 15) << 12;
            for (int j = 0; j < 4; j++) sc |= (uint16_t)(b->l[4 * q + j] << (3 * j));
            st16(dst + 48 + 2 * q, sc);
        }
    }
    }
}

// ---- the block encoder --------------------------------------------------------------------------

void quantize_iq_block(uint8_t *dst, const float *x, const float *w, uint32_t type) {
    const iq_spec *sp = spec_of(type);
    ATTND_ASSERT(sp && atomic_load(&LATS[sp->lat].ready));
    const lattice *L = &LATS[sp->lat];
    iq_block b;
    memset(&b, 0, sizeof b);
    /* 1. signs */
    for (int g8 = 0; g8 < 32; g8++) {
        const float *xg = x + 8 * g8;
        float *t = b.xv + 8 * g8;
        if (sp->signs == SIGNS_NONE) {
            memcpy(t, xg, 8 * sizeof(float));
            continue;
        }
        uint8_t s = 0;
        for (int i = 0; i < 8; i++) t[i] = fabsf(xg[i]), s |= (uint8_t)((xg[i] < 0.f) << i);
        if (sp->signs == SIGNS_PARITY && __builtin_popcount(s) % 2) {
            int imin = 0;
            for (int i = 1; i < 8; i++)
                if (w[8 * g8 + i] * xg[i] * xg[i] < w[8 * g8 + imin] * xg[imin] * xg[imin]) imin = i;
            t[imin] = -t[imin], s ^= (uint8_t)(1u << imin);
        }
        b.sg[g8] = s;
    }
    /* 2. a scale per sub-block */
    int n_sub = QK_K / sp->sub;
    float s[16], smax = 0.f;
    for (int j = 0; j < n_sub; j++) {
        const int off = j * sp->sub;
        s[j] = sp->shift_group ? search_split(sp, L, b.xv + off, w + off, sp->sub, b.idx + off / 8, b.neg + off / 8)
                               : search_magnitude(L, b.xv + off, w + off, sp->sub, b.idx + off / L->width);
        smax = fmaxf(smax, s[j]);
    }
    /* 3. the block's d and digits, then d refitted */
    float d = quant_f16_to_f32(quant_f32_to_f16(smax / (sp->k * (float)(2 * sp->l_max + 1))));
    if (!(d > 0.f) || !isfinite(d)) {
        memset(dst, 0, (size_t)sp->bytes); /* d = 0: every weight decodes to 0 */
        return;
    }
    float err = block_fit(sp, L, &b, w, d, s);
    for (int it = 0; it < 2; it++) {
        float d2 = refit_d(sp, L, &b, w);
        if (!(d2 > 0.f) || d2 == b.d || !isfinite(d2)) break;
        iq_block trial = b;
        float err2 = block_fit(sp, L, &trial, w, d2, NULL);
        if (!(err2 < err)) break;
        b = trial, err = err2;
    }
    /* 4. IQ1: the least-squares fit shrinks the block (see energy_gain) */
    if (sp->shift_group) {
        float d2 = quant_f16_to_f32(quant_f32_to_f16(b.d * energy_gain(sp, L, &b, w)));
        if (d2 > 0.f && isfinite(d2)) b.d = d2;
    }
    pack(dst, sp, &b);
}
