/*
 * deltanet.c — the Gated DeltaNet token mixer (deltanet.h): the causal conv, the L2 norms, the
 * delta-rule recurrence and the gated RMSNorm. The recurrence runs token by token (the
 * sequential form: decode, short runs, a verify's per-step states) or by chunks of 64 entries
 * (the chunked WY / UT-transform form: long prefills). The sequential form's sums run in the
 * order llama.cpp's CPU kernels use (conv taps oldest first; the state's rows as dot products
 * over d_k), so near-ties of greedy decoding break the same way more often.
 */
#include "deltanet.h"

#include <math.h>
#include <string.h>

#include "isa_target.h"
#include "quant.h"
#include "threads.h"

/* Conv channels per work item: decode has one entry per sequence, so the channels are the split. */
#define DN_CONV_CHUNK 512

size_t dn_state_floats(const dn_dims *d) {
    return (size_t)(d->K - 1) * (size_t)d->conv_dim + (size_t)d->hv * (size_t)d->dv * (size_t)d->dk;
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* log(1 + e^x), x itself where e^x would swamp the 1. */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Where copy q of run r takes the layer's state after entry i (an index into order), or NULL. */
static float *snap_dst(const dn_job *j, int r, int q, int i) {
    const dn_snap *s = j->snap ? &j->snap[(size_t)r * DN_SNAPS + q] : NULL;
    return s && s->dst && i >= s->at && i < s->at + s->n ? s->dst + (size_t)(i - s->at) * j->snap_stride : NULL;
}

size_t dn_log_floats(const dn_dims *d) {
    return (size_t)(d->K - 1) * (size_t)d->conv_dim + (size_t)d->hv * (1 + (size_t)d->dv + (size_t)d->dk);
}

/* Where run r's verify record (dn_steps) keeps entry i's log, or NULL. */
static float *log_at(const dn_job *j, int r, int i) {
    const dn_steps *s = j->steps ? &j->steps[r] : NULL;
    return s && s->log && i >= s->at && i < s->at + s->n ? s->log + (size_t)(i - s->at) * j->log_stride : NULL;
}

/* Value head h's part of a log entry: e^g, u (dv), k (dk). */
static float *log_head(const dn_dims *d, float *log, int h) {
    return log + (size_t)(d->K - 1) * d->conv_dim + (size_t)h * (1 + d->dv + d->dk);
}

/* conv: item w = (run w / n_chunks, channel chunk w % n_chunks); each entry of the run in order,
 * out = silu(sum over the K taps, the oldest first and the entry's own input last), then the
 * tail moves on by one input. In place: qkv's row becomes the conv's output. */
static void conv_task(void *ctx, int w, int worker) {
    (void)worker;
    const dn_job *j = ctx;
    const dn_dims *d = j->d;
    int n_chunks = (d->conv_dim + DN_CONV_CHUNK - 1) / DN_CONV_CHUNK, r = w / n_chunks;
    int c0 = (w % n_chunks) * DN_CONV_CHUNK, c1 = c0 + DN_CONV_CHUNK < d->conv_dim ? c0 + DN_CONV_CHUNK : d->conv_dim;
    float *tail = j->state[r]; /* (K - 1, conv_dim) */
    int K = d->K, C = d->conv_dim;
    for (int i = j->run_start[r]; i < j->run_start[r + 1]; i++) {
        float *x = j->qkv + (size_t)j->order[i] * C;
        for (int c = c0; c < c1; c++) {
            const float *wc = j->conv_w + (size_t)c * K;
            float acc = 0;
            for (int k = 0; k < K - 1; k++) acc += tail[(size_t)k * C + c] * wc[k];
            acc += x[c] * wc[K - 1];
            for (int k = 0; k + 1 < K - 1; k++) tail[(size_t)k * C + c] = tail[(size_t)(k + 1) * C + c];
            if (K > 1) tail[(size_t)(K - 2) * C + c] = x[c];
            x[c] = silu(acc);
        }
        for (int q = 0; q <= DN_SNAPS; q++) { /* the checkpoints', then the verify's log */
            float *dst = q < DN_SNAPS ? snap_dst(j, r, q, i) : log_at(j, r, i);
            for (int k = 0; dst && k < K - 1; k++)
                memcpy(dst + (size_t)k * C + c0, tail + (size_t)k * C + c0, sizeof(float) * (size_t)(c1 - c0));
        }
    }
}

/* x / max(|x|, eps) over n elements (the sum of squares in double, as llama.cpp's l2_norm). */
static void l2_normalise(float *x, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = 1.0f / fmaxf(sqrtf((float)ss), eps);
    for (int i = 0; i < n; i++) x[i] *= s;
}

/* Each entry's q and k heads L2-normalised. */
static void norm_task(void *ctx, int t, int worker) {
    (void)worker;
    const dn_job *j = ctx;
    const dn_dims *d = j->d;
    float *x = j->qkv + (size_t)t * d->conv_dim;
    for (int h = 0; h < 2 * d->hk; h++) l2_normalise(x + (size_t)h * d->dk, d->dk, d->eps);
}

/* a . b over n elements in 8 partial sums (lane i of the sum takes elements i, i + 8, ...): the
 * compiler keeps them in vector registers, as a SIMD dot product does; then the partial sums in
 * pairs. */
static float dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++) acc[i % 8] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* The gated RMSNorm of one value head's output o (dv): o / rms(o) * norm_w * silu(z). */
static void gate_norm(float *o, const float *z, const dn_job *j) {
    int dv = j->d->dv;
    double ss = 0;
    for (int c = 0; c < dv; c++) ss += (double)o[c] * o[c];
    float rs = 1.0f / sqrtf((float)(ss / dv) + j->d->eps);
    for (int c = 0; c < dv; c++) o[c] = o[c] * rs * j->norm_w[c] * silu(z[c]);
}

/* Entry t's beta = sigmoid(b) and log-decay g = a softplus(alpha + dt_bias) for value head h. */
static void head_gates(const dn_job *j, int t, int h, float *beta, float *g) {
    int hv = j->d->hv;
    *beta = 1.0f / (1.0f + expf(-j->beta[(size_t)t * hv + h]));
    *g = j->ssm_a[h] * softplus(j->alpha[(size_t)t * hv + h] + j->dt_bias[h]);
}

/* The key head value head h reads. */
static int key_head(const dn_dims *d, int h) { return d->grouped ? h / (d->hv / d->hk) : h % d->hk; }

/* One entry's step of one value head's state S (dv rows of dk), row by row so that each row is
 * read once while it is in L1: row c decays (f[0]), gives u_c = beta (v_c - row . k) (f[1]), takes
 * k u_c, and then o_c = (row . q) scale (f[2]). Each row's sums are those of the step written as
 * whole-state passes (decay all, then every u, then the rank-1 update, then every output): the
 * rows do not mix, so the order of the rows changes no bit. */
static void step_rows_portable(float *S, int dv, int dk, const float *q, const float *k, const float *v,
                               const float *f, float *o, float *u) {
    for (int c = 0; c < dv; c++) {
        float *row = S + (size_t)c * dk;
        for (int e = 0; e < dk; e++) row[e] *= f[0];
        float uc = (v[c] - dot(row, k, dk)) * f[1];
        if (u) u[c] = uc;
        for (int e = 0; e < dk; e++) row[e] += k[e] * uc;
        o[c] = dot(row, q, dk) * f[2];
    }
}

/* A logged step of one state row (dk): row <- row e^g, then row + k u_c, rounded as
 * step_rows_portable rounds them. */
static void replay_row_portable(float *row, int dk, float f, const float *k, float uc) {
    for (int e = 0; e < dk; e++) row[e] *= f;
    for (int e = 0; e < dk; e++) row[e] += k[e] * uc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
ISA_TARGET_BEGIN("avx2")
/* dot's last step for its 8 partial sums in a: ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)). */
static float sum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)); /* a_i + a_(i+4) */
    __m128 h = _mm_hadd_ps(s, s);                                                  /* s0 + s1, s2 + s3 */
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* step_rows_portable, two rows at a time (two independent chains of adds), dk a multiple of 8: lane
 * l of a sum takes elements l, l + 8, ... as dot's partial sums do, products and sums rounded
 * apart (no FMA), so every bit is the portable form's. */
static void step_rows_avx2(float *S, int dv, int dk, const float *q, const float *k, const float *v, const float *f,
                           float *o, float *u) {
    __m256 dec = _mm256_set1_ps(f[0]);
    int c = 0;
    for (; c + 2 <= dv; c += 2) {
        float *r0 = S + (size_t)c * dk, *r1 = r0 + dk;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int e = 0; e < dk; e += 8) {
            __m256 ke = _mm256_loadu_ps(k + e);
            __m256 x0 = _mm256_mul_ps(_mm256_loadu_ps(r0 + e), dec), x1 = _mm256_mul_ps(_mm256_loadu_ps(r1 + e), dec);
            _mm256_storeu_ps(r0 + e, x0), _mm256_storeu_ps(r1 + e, x1);
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(x0, ke)), a1 = _mm256_add_ps(a1, _mm256_mul_ps(x1, ke));
        }
        float s0 = (v[c] - sum8(a0)) * f[1], s1 = (v[c + 1] - sum8(a1)) * f[1];
        if (u) u[c] = s0, u[c + 1] = s1;
        __m256 u0 = _mm256_set1_ps(s0), u1 = _mm256_set1_ps(s1);
        a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int e = 0; e < dk; e += 8) {
            __m256 ke = _mm256_loadu_ps(k + e), qe = _mm256_loadu_ps(q + e);
            __m256 x0 = _mm256_add_ps(_mm256_loadu_ps(r0 + e), _mm256_mul_ps(ke, u0));
            __m256 x1 = _mm256_add_ps(_mm256_loadu_ps(r1 + e), _mm256_mul_ps(ke, u1));
            _mm256_storeu_ps(r0 + e, x0), _mm256_storeu_ps(r1 + e, x1);
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(x0, qe)), a1 = _mm256_add_ps(a1, _mm256_mul_ps(x1, qe));
        }
        o[c] = sum8(a0) * f[2], o[c + 1] = sum8(a1) * f[2];
    }
    if (c < dv) step_rows_portable(S + (size_t)c * dk, dv - c, dk, q, k, v + c, f, o + c, u ? u + c : NULL);
}

/* replay_row_portable, 8 lanes at a time (dk a multiple of 8): the same products and sums. */
static void replay_row_avx2(float *row, int dk, float f, const float *k, float uc) {
    __m256 dec = _mm256_set1_ps(f), u = _mm256_set1_ps(uc);
    for (int e = 0; e < dk; e += 8) {
        __m256 x = _mm256_mul_ps(_mm256_loadu_ps(row + e), dec);
        _mm256_storeu_ps(row + e, _mm256_add_ps(x, _mm256_mul_ps(_mm256_loadu_ps(k + e), u)));
    }
}
ISA_TARGET_END
#endif

/* step_rows_portable, or its AVX2 form where the kernels run AVX2 or better (quant_isa_active). */
static void step_rows(float *S, int dv, int dk, const float *q, const float *k, const float *v, const float *f,
                      float *o, float *u) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (dk % 8 == 0 && quant_isa_active() != QUANT_ISA_PORTABLE) {
        step_rows_avx2(S, dv, dk, q, k, v, f, o, u);
        return;
    }
#endif
    step_rows_portable(S, dv, dk, q, k, v, f, o, u);
}

static unsigned flush_begin(void);
static void flush_end(unsigned csr);

void dn_replay(const dn_dims *d, float *state, const float *before, const float *log, size_t log_stride, int k) {
    size_t tail = (size_t)(d->K - 1) * d->conv_dim, hs = (size_t)d->dv * d->dk;
    memcpy(state, log + (size_t)(k - 1) * log_stride, sizeof(float) * tail);
    bool vec = false;
#if defined(__x86_64__) && defined(__GNUC__)
    vec = d->dk % 8 == 0 && quant_isa_active() != QUANT_ISA_PORTABLE;
#endif
    unsigned csr = flush_begin(); /* as the recurrence ran */
    for (int h = 0; h < d->hv; h++)
        for (int c = 0; c < d->dv; c++) {
            float *row = state + tail + h * hs + (size_t)c * d->dk;
            memcpy(row, before + tail + h * hs + (size_t)c * d->dk, sizeof(float) * (size_t)d->dk);
            for (int t = 0; t < k; t++) {
                const float *rec = log + (size_t)t * log_stride + tail + (size_t)h * (1 + d->dv + d->dk);
#if defined(__x86_64__) && defined(__GNUC__)
                if (vec) {
                    replay_row_avx2(row, d->dk, rec[0], rec + 1 + d->dv, rec[1 + c]);
                    continue;
                }
#endif
                replay_row_portable(row, d->dk, rec[0], rec + 1 + d->dv, rec[1 + c]);
            }
        }
    flush_end(csr);
}

/* The sequential form: the recurrence of value head h over run r's entries [i0, i1) one at a
 * time, then each output's gated RMSNorm. S is the head's state in the sequence's layout (dv, dk). */
static void recur_sequential(const dn_job *j, int r, int h, float *S, int i0, int i1) {
    const dn_dims *d = j->d;
    int dk = d->dk, dv = d->dv, C = d->conv_dim, hk = key_head(d, h);
    float scale = 1.0f / sqrtf((float)dk);
    for (int i = i0; i < i1; i++) {
        int t = j->order[i];
        const float *x = j->qkv + (size_t)t * C;
        const float *q = x + (size_t)hk * dk, *k = x + (size_t)(d->hk + hk) * dk, *v = x + (size_t)2 * d->hk * dk + (size_t)h * dv;
        float beta, g;
        head_gates(j, t, h, &beta, &g);
        float *o = j->out + (size_t)t * d->hv * dv + (size_t)h * dv, f[3] = {expf(g), beta, scale};
        float *lg = log_at(j, r, i), *rec = lg ? log_head(d, lg, h) : NULL;
        if (rec && i == j->steps[r].at) /* the state before the verify's first logged entry */
            memcpy(j->steps[r].before + (S - j->state[r]), S, sizeof(float) * (size_t)dv * dk);
        if (rec) rec[0] = f[0], memcpy(rec + 1 + dv, k, sizeof(float) * (size_t)dk);
        step_rows(S, dv, dk, q, k, v, f, o, rec ? rec + 1 : NULL);
        for (int q = 0; q < DN_SNAPS; q++) {
            float *dst = snap_dst(j, r, q, i);
            if (dst) memcpy(dst + (S - j->state[r]), S, sizeof(float) * (size_t)dv * dk);
        }
        if (!j->raw) gate_norm(o, j->z + (size_t)t * d->hv * dv + (size_t)h * dv, j);
    }
}

/* ---- the chunked form ----
 * Within a chunk of L entries of one value head, with S the state before it and
 * gam_t = g_1 + ... + g_t the log decay from the chunk's start to entry t (t = 1 .. L), unrolling
 * S <- e^g S + k u^T gives, for s <= t:
 *   S_t = e^gam_t S + sum_{s<=t} e^(gam_t - gam_s) k_s u_s^T
 *   u_t = beta_t (v_t - e^gam_t S^T k_t - sum_{s<t} e^(gam_t - gam_s) (k_s . k_t) u_s)
 * that is (I + A) U = diag(beta) (V - (K * e^gam) S), A strictly lower with
 * A_ts = beta_t e^(gam_t - gam_s) k_t . k_s. The UT transform T = (I + A)^-1 diag(beta) makes
 * W = T (K * e^gam) and U = T V - W S; here T is applied to V - (K * e^gam) S at once by forward
 * substitution (one L x dv solve, no L x L inverse). Then
 *   o_t = e^gam_t S^T q_t + sum_{s<=t} e^(gam_t - gam_s) (k_s . q_t) u_s
 *   S_L = e^gam_L S + sum_s e^(gam_L - gam_s) k_s u_s^T.
 * Every exponent is <= 0 (the decays shrink), so nothing overflows. The products with S are
 * (L x dk) x (dk x dv) matrix products (mm_fn) where the sequential form makes two matrix-vector
 * products and a rank-1 update per entry. */

/* Entries per chunk (llama.cpp's chunk size too). */
#define DN_CHUNK 64

/* Run length from which DN_FORM_AUTO takes the chunked form (docs/engine.md: the measurement). */
#define DN_CHUNKED_MIN 16

size_t dn_scratch_floats(const dn_dims *d) {
    size_t L = DN_CHUNK, dk = (size_t)d->dk, dv = (size_t)d->dv;
    return d->hv ? dk * dv + 2 * L + 4 * L * dk + 2 * L * dv + 2 * L * L : 0;
}

/* out (m, n; row stride ldo) += a b over kk: a(i, p) = a[i si + p sp], b (kk, n; row stride ldb).
 * causal: a(i, p) = 0 for p > i, so rows stop at their own p (by tiles of 4 rows). */
typedef void (*mm_fn)(float *out, int ldo, const float *a, int si, int sp, const float *b, int ldb, int m, int n, int kk,
                      bool causal);

/* One worker's part of dn_job.scratch. */
typedef struct chunk_buf {
    float *St;           /* (dk, dv) the head's state S (the sequence keeps its transpose) */
    float *gam, *beta;   /* (DN_CHUNK) log decay from the chunk's start, beta */
    float *q, *k, *x;    /* (DN_CHUNK, dk) the chunk's queries, keys, and a scaled copy of either */
    float *kt;           /* (dk, DN_CHUNK) the keys transposed */
    float *u, *p;        /* (DN_CHUNK, dv) V, then the rhs, then U; products with S */
    float *a;            /* (DN_CHUNK, DN_CHUNK) -A, then the masked, decayed Q K^T */
    float *e;            /* (DN_CHUNK, DN_CHUNK) e^(gam_t - gam_s) for s <= t */
    mm_fn mm;
} chunk_buf;

/* The tile rows 4 x 8 (portable) or 4 x 16 (AVX2) left over: columns [j0, n) of rows
 * [i0, i0 + mi), p below pk. */
static void mm_rest(float *out, int ldo, const float *a, int si, int sp, const float *b, int ldb, int i0, int mi, int j0,
                    int n, int pk) {
    for (int i = i0; i < i0 + mi; i++)
        for (int p = 0; p < pk; p++) {
            float av = a[(size_t)i * si + (size_t)p * sp];
            for (int c = j0; c < n; c++) out[(size_t)i * ldo + c] += av * b[(size_t)p * ldb + c];
        }
}

/* mm_fn, portable: tiles of 4 x 8 outputs stay in registers while p runs. */
static void mm_acc_portable(float *out, int ldo, const float *a, int si, int sp, const float *b, int ldb, int m, int n,
                            int kk, bool causal) {
    for (int i0 = 0; i0 < m; i0 += 4) {
        int mi = m - i0 < 4 ? m - i0 : 4, pk = causal && i0 + mi < kk ? i0 + mi : kk, j0 = 0;
        for (; mi == 4 && j0 + 8 <= n; j0 += 8) {
            float acc[4][8];
            for (int i = 0; i < 4; i++)
                for (int l = 0; l < 8; l++) acc[i][l] = out[(size_t)(i0 + i) * ldo + j0 + l];
            for (int p = 0; p < pk; p++) {
                const float *bp = b + (size_t)p * ldb + j0;
                for (int i = 0; i < 4; i++) {
                    float av = a[(size_t)(i0 + i) * si + (size_t)p * sp];
                    for (int l = 0; l < 8; l++) acc[i][l] += av * bp[l];
                }
            }
            for (int i = 0; i < 4; i++)
                for (int l = 0; l < 8; l++) out[(size_t)(i0 + i) * ldo + j0 + l] = acc[i][l];
        }
        mm_rest(out, ldo, a, si, sp, b, ldb, i0, mi, j0, n, pk);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
ISA_TARGET_BEGIN("avx2,fma")
/* mm_fn, AVX2 + FMA: tiles of 4 x 16 outputs in 8 registers. */
static void mm_acc_avx2(float *out, int ldo, const float *a, int si, int sp, const float *b, int ldb, int m, int n, int kk,
                        bool causal) {
    for (int i0 = 0; i0 < m; i0 += 4) {
        int mi = m - i0 < 4 ? m - i0 : 4, pk = causal && i0 + mi < kk ? i0 + mi : kk, j0 = 0;
        for (; mi == 4 && j0 + 16 <= n; j0 += 16) {
            __m256 c[4][2];
            for (int i = 0; i < 4; i++)
                for (int h = 0; h < 2; h++) c[i][h] = _mm256_loadu_ps(out + (size_t)(i0 + i) * ldo + j0 + 8 * h);
            for (int p = 0; p < pk; p++) {
                __m256 b0 = _mm256_loadu_ps(b + (size_t)p * ldb + j0), b1 = _mm256_loadu_ps(b + (size_t)p * ldb + j0 + 8);
                for (int i = 0; i < 4; i++) {
                    __m256 av = _mm256_set1_ps(a[(size_t)(i0 + i) * si + (size_t)p * sp]);
                    c[i][0] = _mm256_fmadd_ps(av, b0, c[i][0]);
                    c[i][1] = _mm256_fmadd_ps(av, b1, c[i][1]);
                }
            }
            for (int i = 0; i < 4; i++)
                for (int h = 0; h < 2; h++) _mm256_storeu_ps(out + (size_t)(i0 + i) * ldo + j0 + 8 * h, c[i][h]);
        }
        mm_rest(out, ldo, a, si, sp, b, ldb, i0, mi, j0, n, pk);
    }
}
ISA_TARGET_END
#endif

/* The products' kernel for the kernels' instruction set (quant_isa_active: ATTND_ISA=portable
 * picks the portable one here too). */
static mm_fn mm_pick(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (quant_isa_active() != QUANT_ISA_PORTABLE) return mm_acc_avx2;
#endif
    return mm_acc_portable;
}

static chunk_buf chunk_buf_at(const dn_job *j, int worker) {
    size_t L = DN_CHUNK, dk = (size_t)j->d->dk, dv = (size_t)j->d->dv;
    float *m = j->scratch + (size_t)worker * dn_scratch_floats(j->d);
    chunk_buf b = {.St = m, .mm = mm_pick()};
    b.gam = b.St + dk * dv, b.beta = b.gam + L;
    b.q = b.beta + L, b.k = b.q + L * dk, b.x = b.k + L * dk, b.kt = b.x + L * dk;
    b.u = b.kt + L * dk, b.p = b.u + L * dv;
    b.a = b.p + L * dv, b.e = b.a + L * L;
    return b;
}

/* dst (cols, rows; row stride ld) = the transpose of src (rows, cols). */
static void transpose(float *dst, int ld, const float *src, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * ld + r] = src[(size_t)r * cols + c];
}

/* x[s] = e^(to - gam[s]) src[s] for the L rows of dk (from_start: e^gam[s] src[s]). */
static void decay_rows(float *x, const float *src, const float *gam, float to, int L, int dk, bool from_start) {
    for (int s = 0; s < L; s++) {
        float f = expf(from_start ? gam[s] : to - gam[s]);
        for (int e = 0; e < dk; e++) x[(size_t)s * dk + e] = src[(size_t)s * dk + e] * f;
    }
}

/* Gathers the L entries order[i0 ..] of value head h into b: q, k, v (in u), beta, gam; the keys
 * transposed, and the decays between entries. */
static void chunk_gather(const dn_job *j, int h, int i0, int L, chunk_buf *b) {
    const dn_dims *d = j->d;
    int dk = d->dk, dv = d->dv, hk = key_head(d, h);
    double acc = 0;
    for (int s = 0; s < L; s++) {
        int t = j->order[i0 + s];
        const float *x = j->qkv + (size_t)t * d->conv_dim;
        float g;
        head_gates(j, t, h, &b->beta[s], &g);
        acc += g;
        b->gam[s] = (float)acc;
        memcpy(b->q + (size_t)s * dk, x + (size_t)hk * dk, sizeof(float) * (size_t)dk);
        memcpy(b->k + (size_t)s * dk, x + (size_t)(d->hk + hk) * dk, sizeof(float) * (size_t)dk);
        memcpy(b->u + (size_t)s * dv, x + (size_t)2 * d->hk * dk + (size_t)h * dv, sizeof(float) * (size_t)dv);
    }
    transpose(b->kt, DN_CHUNK, b->k, L, dk);
    for (int t = 0; t < L; t++) {
        float *et = b->e + (size_t)t * DN_CHUNK;
        for (int s = 0; s <= t; s++) et[s] = b->gam[t] - b->gam[s];
        quant_exp(et, et, t + 1);
    }
}

/* U of the chunk in b->u (V there on entry): the rhs beta (V - (K * e^gam) S), then forward
 * substitution through I + A, by blocks of 16 rows: the earlier blocks' part as one product. */
static void chunk_solve(chunk_buf *b, int L, int dk, int dv) {
    decay_rows(b->x, b->k, b->gam, 0, L, dk, true);
    memset(b->p, 0, sizeof(float) * (size_t)L * dv);
    b->mm(b->p, dv, b->x, dk, 1, b->St, dv, L, dv, dk, false);
    for (int s = 0; s < L; s++)
        for (int c = 0; c < dv; c++) b->u[(size_t)s * dv + c] = b->beta[s] * (b->u[(size_t)s * dv + c] - b->p[(size_t)s * dv + c]);
    memset(b->a, 0, sizeof(float) * DN_CHUNK * DN_CHUNK);
    b->mm(b->a, DN_CHUNK, b->k, dk, 1, b->kt, DN_CHUNK, L, L, dk, false);
    for (int t = 0; t < L; t++) /* -A: -beta_t e^(gam_t - gam_s) k_t . k_s, s < t */
        for (int s = 0; s < t; s++) b->a[(size_t)t * DN_CHUNK + s] *= -b->beta[t] * b->e[(size_t)t * DN_CHUNK + s];
    for (int b0 = 0; b0 < L; b0 += 16) {
        int bl = L - b0 < 16 ? L - b0 : 16;
        b->mm(b->u + (size_t)b0 * dv, dv, b->a + (size_t)b0 * DN_CHUNK, DN_CHUNK, 1, b->u, dv, bl, dv, b0, false);
        for (int t = b0 + 1; t < b0 + bl; t++) {
            float *ut = b->u + (size_t)t * dv;
            for (int s = b0; s < t; s++) {
                float na = b->a[(size_t)t * DN_CHUNK + s];
                const float *us = b->u + (size_t)s * dv;
                for (int c = 0; c < dv; c++) ut[c] += na * us[c];
            }
        }
    }
}

/* The outputs of the chunk's L entries order[i0 ..] of value head h, gated and normalised, from
 * S (b->St, the state before the chunk) and U. */
static void chunk_outputs(const dn_job *j, int h, int i0, int L, chunk_buf *b) {
    const dn_dims *d = j->d;
    int dk = d->dk, dv = d->dv;
    decay_rows(b->x, b->q, b->gam, 0, L, dk, true);
    memset(b->p, 0, sizeof(float) * (size_t)L * dv);
    b->mm(b->p, dv, b->x, dk, 1, b->St, dv, L, dv, dk, false);
    memset(b->a, 0, sizeof(float) * DN_CHUNK * DN_CHUNK);
    b->mm(b->a, DN_CHUNK, b->q, dk, 1, b->kt, DN_CHUNK, L, L, dk, false);
    for (int t = 0; t < L; t++)
        for (int s = 0; s < L; s++) b->a[(size_t)t * DN_CHUNK + s] *= s <= t ? b->e[(size_t)t * DN_CHUNK + s] : 0.0f;
    b->mm(b->p, dv, b->a, DN_CHUNK, 1, b->u, dv, L, dv, L, true);
    float scale = 1.0f / sqrtf((float)dk);
    for (int s = 0; s < L; s++) {
        int t = j->order[i0 + s];
        float *o = j->out + (size_t)t * d->hv * dv + (size_t)h * dv;
        for (int c = 0; c < dv; c++) o[c] = b->p[(size_t)s * dv + c] * scale;
        if (!j->raw) gate_norm(o, j->z + (size_t)t * d->hv * dv + (size_t)h * dv, j);
    }
}

/* S <- e^gam_L S + (K * e^(gam_L - gam))^T U: the state after the chunk. */
static void chunk_state(chunk_buf *b, int L, int dk, int dv) {
    float last = b->gam[L - 1], f = expf(last);
    for (size_t e = 0; e < (size_t)dk * dv; e++) b->St[e] *= f;
    decay_rows(b->x, b->k, b->gam, last, L, dk, false);
    b->mm(b->St, dv, b->x, 1, dk, b->u, dv, dk, dv, L, false);
}

/* The chunked form of value head h over the entries order[i0 .. i1), by chunks of DN_CHUNK; S in the
 * sequence's layout (dv, dk). */
static void recur_chunked(const dn_job *j, int h, float *S, int i0, int i1, int worker) {
    const dn_dims *d = j->d;
    chunk_buf b = chunk_buf_at(j, worker);
    transpose(b.St, d->dv, S, d->dv, d->dk);
    for (int c0 = i0; c0 < i1; c0 += DN_CHUNK) {
        int L = i1 - c0 < DN_CHUNK ? i1 - c0 : DN_CHUNK;
        chunk_gather(j, h, c0, L, &b);
        chunk_solve(&b, L, d->dk, d->dv);
        chunk_outputs(j, h, c0, L, &b);
        chunk_state(&b, L, d->dk, d->dv);
    }
    transpose(S, d->dk, b.St, d->dk, d->dv);
}

/* Subnormal floats flushed to zero (MXCSR FTZ and DAZ) while a task runs the recurrence: a head
 * whose decay e^g is tiny turns its whole state subnormal at each step (S e^g), and x86 takes a
 * microcode assist of some hundred cycles for each subnormal result or input: on a random-weight
 * Qwen3.6-35B-A3B shape that made the recurrence 7x slower (docs/performance.md, 2026-12-07).
 * Values below 2^-126 change the outputs by less than that; the caller's mode is restored. */
static unsigned flush_begin(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ (bit 15) and DAZ (bit 6) */
    return csr;
#else
    return 0;
#endif
}

static void flush_end(unsigned csr) {
#if defined(__x86_64__) && defined(__GNUC__)
    _mm_setcsr(csr);
#else
    (void)csr;
#endif
}

/* Whether run r keeps a speculative verify's record (dn_steps). */
static bool keeps_steps(const dn_job *j, int r) { return j->steps && j->steps[r].log && j->steps[r].n > 0; }

/* Where run r's segment from entry i0 ends (exclusive): the run's end, or just after an entry
 * whose state a snap copies (a checkpoint). */
static int segment_end(const dn_job *j, int r, int i0) {
    int i1 = j->run_start[r + 1];
    for (int q = 0; j->snap && q < DN_SNAPS; q++) {
        const dn_snap *s = &j->snap[(size_t)r * DN_SNAPS + q];
        if (s->dst && s->n > 0 && s->at >= i0 && s->at + 1 < i1) i1 = s->at + 1;
    }
    return i1;
}

/* The recurrence of value head h = w % hv over run r = w / hv. A run whose states after each
 * entry are kept runs sequentially; any other goes by segments ending at its state copies, each
 * in the form its length picks (dn_form), so a copy taken inside a batch is bit for bit the state
 * a batch ending there leaves. */
static void recur_task(void *ctx, int w, int worker) {
    const dn_job *j = ctx;
    const dn_dims *d = j->d;
    unsigned csr = flush_begin();
    int r = w / d->hv, h = w % d->hv, end = j->run_start[r + 1];
    float *S = j->state[r] + (size_t)(d->K - 1) * d->conv_dim + (size_t)h * d->dv * d->dk; /* (dv, dk) */
    bool steps = keeps_steps(j, r);
    for (int i0 = j->run_start[r], i1; i0 < end; i0 = i1) {
        i1 = steps ? end : segment_end(j, r, i0);
        bool chunked = !steps && j->scratch && j->form != DN_FORM_SEQUENTIAL &&
                       (j->form == DN_FORM_CHUNKED || i1 - i0 >= DN_CHUNKED_MIN);
        if (!chunked) {
            recur_sequential(j, r, h, S, i0, i1);
            continue;
        }
        recur_chunked(j, h, S, i0, i1, worker);
        for (int q = 0; q < DN_SNAPS; q++) {
            float *dst = snap_dst(j, r, q, i1 - 1);
            if (dst) memcpy(dst + (S - j->state[r]), S, sizeof(float) * (size_t)d->dv * d->dk);
        }
    }
    flush_end(csr);
}

void dn_gates(const dn_job *j, float *beta, float *g) {
    for (int t = 0; t < j->n; t++)
        for (int h = 0; h < j->d->hv; h++) {
            float b, a;
            head_gates(j, t, h, &b, &a);
            beta[(size_t)t * j->d->hv + h] = b, g[(size_t)t * j->d->hv + h] = a;
        }
}

void dn_gate_out(const dn_job *j) {
    int hv = j->d->hv, dv = j->d->dv;
    for (size_t r = 0; r < (size_t)j->n * hv; r++) gate_norm(j->out + r * dv, j->z + r * dv, j);
}

void dn_forward(const dn_job *j) {
    const dn_dims *d = j->d;
    int n_chunks = (d->conv_dim + DN_CONV_CHUNK - 1) / DN_CONV_CHUNK;
    threads_run(j->n_threads, j->n_runs * n_chunks, conv_task, (void *)j);
    threads_run(j->n >= 4 ? j->n_threads : 1, j->n, norm_task, (void *)j);
    threads_run(j->n_threads, j->n_runs * d->hv, recur_task, (void *)j);
}
