/*
 * quant.c — the matmul driver: lays the activations' rounded form out in the caller's scratch,
 * fills it token by token, and hands row ranges of each weight to the kernel of the active
 * instruction set (quant_kernels_active), on the engine's pool when the work is large enough.
 *
 * Also quant_dequantize_row, over the formats' dequantizers.
 *
 * What lives elsewhere: the formats (conversions, sizes, dequantizers, the type-traits table) in
 * quant_format.c; the portable kernels and activation preparations in quant_ref.c; the choice of
 * instruction set and the one dispatch table in quant_dispatch.c; the load-time packing in
 * quant_pack.c; the x86 kernels in x86/ (quant_x86.inc lists its files; compiled by quant_avx2.c
 * and quant_avx512.c); the AMX tiles in amx/.
 */
#include "quant.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/common.h"
#include "attnd/gguf.h"
#include "quant_impl.h"
#include "quant_types.h"
#include "threads.h"

// ---- scratch and activation forms --------------------------------------------------------------

#define SCRATCH_ALIGN 64

static size_t round_up(size_t n) { return (n + SCRATCH_ALIGN - 1) & ~(size_t)(SCRATCH_ALIGN - 1); }

/* The activation form of wtype (a bug for a type that is not computed). */
static quant_act_form act_form(uint32_t wtype) {
    const quant_traits *tr = quant_traits_of(wtype);
    ATTND_ASSERT(tr != NULL);
    return tr->act;
}

size_t quant_scratch_bytes(uint32_t wtype, int n_tok, int64_t n_cols) {
    if (n_tok <= 0 || n_cols <= 0 || !quant_traits_of(wtype)) return 0;
    size_t n = (size_t)n_tok * (size_t)n_cols;
    size_t xb = round_up((size_t)(n_tok + 15) / 16 * 16 * (size_t)n_cols * sizeof(uint16_t)); /* the bf16 form */
    switch (act_form(wtype)) {
    case QUANT_ACT_F16:
    case QUANT_ACT_BF16: return SCRATCH_ALIGN + round_up(n * sizeof(float));
    case QUANT_ACT_Q8_0:
    case QUANT_ACT_Q8_1:
        return SCRATCH_ALIGN + 3 * round_up((size_t)n_tok * (size_t)(n_cols / QK8_0) * sizeof(float)) + round_up(n) + xb;
    case QUANT_ACT_Q8_K:
        return SCRATCH_ALIGN + round_up((size_t)n_tok * (size_t)(n_cols / QK_K) * sizeof(float)) + round_up(n) +
               round_up((size_t)n_tok * (size_t)(n_cols / 16) * sizeof(int16_t)) +
               round_up((size_t)n_tok * (size_t)(n_cols / 32) * sizeof(int16_t)) +
               round_up((size_t)n_tok * (size_t)(n_cols / 16) * sizeof(int32_t)) + xb;
    case QUANT_ACT_F32: break; /* F32 reads the activations in place */
    }
    return 0;
}

/* How one call prepares its activations: where each form lives in scratch and which function
 * fills it, so that the rows can be filled token by token (by one thread, or by the team). */
typedef struct act_plan {
    quant_act a;
    uint32_t wtype;
    const float *x;    /* (n_tok, n_cols) the caller's activations */
    float *xr;         /* F16/BF16: (n_tok, n_cols) rounded copies (a.x points here) */
    float *d;          /* Q8 forms: (n_tok, nb) */
    int8_t *q;         /* Q8 forms: (n_tok, n_cols) */
    int16_t *bs;       /* Q8_K form: (n_tok, n_cols / 16) */
    int16_t *bs32;     /* Q8_K form: (n_tok, n_cols / 32) */
    int32_t *off3;     /* Q8_K form: (n_tok, n_cols / 16) (quant_act.off3) */
    int32_t *xsum;     /* Q8_0 form: (n_tok, nb) */
    uint16_t *xb;      /* bf16 form: tiles of 16 tokens x 32 columns (QUANT_XB_AT), or NULL */
    quant_prep_bf16_fn bf16;
    float *s;          /* Q8_1 form: (n_tok, nb) */
    int q8_1;          /* the Q8_1 form: Q8_0's plus s */
    quant_prep_f16_fn f16;
    quant_prep_q8_0_fn q8_0;
    quant_prep_q8_k_fn q8_k;
} act_plan;

/* Lays out wtype's activation form in scratch (nothing is computed yet). */
static void act_plan_init(act_plan *pl, const quant_kernels *k, uint32_t wtype, const float *x, int n_tok, int64_t n_cols,
                          void *scratch) {
    memset(pl, 0, sizeof *pl);
    pl->wtype = wtype;
    pl->x = x;
    pl->a.n_cols = n_cols;
    pl->a.x = x;
    if (act_form(wtype) == QUANT_ACT_F32) return;
    ATTND_ASSERT(scratch != NULL);
    uint8_t *p = (uint8_t *)(((uintptr_t)scratch + SCRATCH_ALIGN - 1) & ~(uintptr_t)(SCRATCH_ALIGN - 1));
    switch (act_form(wtype)) {
    case QUANT_ACT_F16:
    case QUANT_ACT_BF16:
        pl->xr = (float *)p;
        pl->a.x = pl->xr;
        pl->f16 = act_form(wtype) == QUANT_ACT_F16 ? k->prep_f16 : quant_act_bf16;
        return;
    case QUANT_ACT_Q8_0:
    case QUANT_ACT_Q8_1: {
        pl->a.nb = n_cols / QK8_0;
        size_t per = round_up((size_t)n_tok * (size_t)pl->a.nb * sizeof(float));
        pl->d = (float *)p;
        pl->xsum = (int32_t *)(p + per);
        pl->s = (float *)(p + 2 * per);
        pl->q = (int8_t *)(p + 3 * per);
        p += 3 * per + round_up((size_t)n_tok * (size_t)n_cols);
        pl->q8_0 = k->prep_q8_0;
        pl->q8_1 = act_form(wtype) == QUANT_ACT_Q8_1;
        break;
    }
    case QUANT_ACT_Q8_K:
        pl->a.nb = n_cols / QK_K;
        pl->d = (float *)p;
        p += round_up((size_t)n_tok * (size_t)pl->a.nb * sizeof(float));
        pl->q = (int8_t *)p;
        p += round_up((size_t)n_tok * (size_t)n_cols);
        pl->bs = (int16_t *)p;
        p += round_up((size_t)n_tok * (size_t)(n_cols / 16) * sizeof(int16_t));
        pl->bs32 = (int16_t *)p;
        p += round_up((size_t)n_tok * (size_t)(n_cols / 32) * sizeof(int16_t));
        pl->off3 = (int32_t *)p;
        p += round_up((size_t)n_tok * (size_t)(n_cols / 16) * sizeof(int32_t));
        pl->q8_k = k->prep_q8_k;
        break;
    case QUANT_ACT_F32: return;
    }
    pl->a.d = pl->d;
    pl->a.q = pl->q;
    pl->a.bsums = pl->bs;
    pl->a.bsum32 = pl->bs32;
    pl->a.off3 = pl->off3;
    pl->a.xsum = pl->xsum;
    pl->a.s = pl->q8_1 ? pl->s : NULL;
    int from = k->bf16_from[quant_type_index(wtype)];
    if (from > 0 && n_tok >= from && n_cols % 32 == 0 && k->prep_bf16 && quant_amx_math_active() == QUANT_AMX_BF16) {
        pl->xb = (uint16_t *)p; /* after the form's last array */
        pl->bf16 = k->prep_bf16;
        pl->a.xb = pl->xb;
    }
}

/* Prepares the activations of token t. */
static void act_fill(const act_plan *pl, int t) {
    int64_t n = pl->a.n_cols, nb = pl->a.nb;
    const float *x = pl->x + t * n;
    if (pl->bf16) pl->bf16(pl->xb + QUANT_XB_AT(t, 0, n), x, n);
    if (pl->f16) pl->f16(pl->xr + t * n, x, n);
    else if (pl->q8_0) {
        const int8_t *q = pl->q + t * n;
        pl->q8_0(pl->d + t * nb, pl->q + t * n, x, n);
        for (int64_t b = 0; b < nb; b++, q += QK8_0) {
            int32_t s = 0;
            for (int j = 0; j < QK8_0; j++) s += q[j];
            pl->xsum[t * nb + b] = s;
        }
        if (pl->q8_1) quant_act_q8_1_sums(pl->s + t * nb, pl->xsum + t * nb, x, n);
    }
    else if (pl->q8_k) {
        int16_t *bs = pl->bs + t * (n / 16);
        pl->q8_k(pl->d + t * nb, pl->q + t * n, bs, x, n);
        for (int64_t j = 0; j < n / 32; j++) pl->bs32[t * (n / 32) + j] = (int16_t)(bs[2 * j] + bs[2 * j + 1]); /* |.| <= 4096 */
        for (int64_t j = 0; j < n / 16; j++) pl->off3[t * (n / 16) + j] = -4 * bs[j];
    }
}

// ---- matmul driver -----------------------------------------------------------------------------

/* Below this many multiply-adds (~30 us of one-thread work) a parallel region is not worth its
 * cost: ~1-5 us to wake the team on an idle machine, but up to ~0.5 ms when the cores are shared
 * with other work (measured: rand-Q4_K decode at 2 threads fell from 3700 to 164 tok/s with a
 * 2^17 threshold). Decode on small models stays serial; prefill and large matrices split. */
#define MATMUL_PAR_MIN_MACS (1 << 20)
/* Rows handed out per scheduling unit: a multiple of the kernels' row tiles (AVX-512: 16). */
#define ROW_GRAIN 16
/* Row chunks per thread: small enough that a thread descheduled in the middle of one (the cores
 * are shared with other work) holds back little; large enough that claiming costs nothing. */
#define CHUNKS_PER_THREAD 16

/* One weight of a matmul job: its rows in chunks of `per`. */
typedef struct matmul_part {
    float *out;
    const uint8_t *w; /* the mapping, or the packed copy (rb = its group bytes) */
    size_t rb;
    int64_t n_rows, per, n_chunks;
    quant_rows_fn fn;
} matmul_part;

/* One matmul call as pool tasks: first the activations of each token, then every part's row
 * chunks, numbered part after part. */
typedef struct matmul_job {
    matmul_part part[QUANT_MM_MAX];
    int n_part;
    act_plan *pl;
    int n_tok;
} matmul_job;

static void matmul_fill_task(void *ctx, int t, int worker) {
    (void)worker;
    act_fill(((matmul_job *)ctx)->pl, t);
}

static void matmul_rows_task(void *ctx, int c, int worker) {
    (void)worker;
    const matmul_job *j = ctx;
    const matmul_part *p = j->part;
    while (c >= p->n_chunks) c -= (int)(p++)->n_chunks;
    int64_t r0 = c * p->per, r1 = r0 + p->per < p->n_rows ? r0 + p->per : p->n_rows;
    p->fn(p->out, p->w, p->rb, r0, r1, p->n_rows, &j->pl->a, j->n_tok);
}

/* m's kernel and the bytes it reads (the packed copy where the instruction set has a kernel for it). */
static matmul_part matmul_part_of(const quant_kernels *k, const quant_mm *m, int64_t n_cols) {
    int qt = quant_type_index(m->wtype);
    uint32_t be = gguf_type_block_elems(m->wtype);
    ATTND_ASSERT(qt >= 0 && be > 0);
    ATTND_ASSERT(m->n_rows >= 0 && n_cols > 0 && n_cols % be == 0);
    matmul_part p = {m->out, m->w, quant_row_bytes(m->wtype, n_cols), m->n_rows, m->n_rows, 1, k->rows[qt]};
    ATTND_ASSERT(p.fn != NULL);
    quant_rows_fn pfn = k->packed[qt];
    if (m->pk && pfn) {
        ATTND_ASSERT(m->pk->wtype == m->wtype && m->pk->n_cols == n_cols);
        ATTND_ASSERT(m->pk_row0 >= 0 && m->pk_row0 % PACK_ROWS == 0 && m->pk_row0 + m->n_rows <= m->pk->n_rows);
        p.fn = pfn;
        p.w = m->pk->data + (size_t)(m->pk_row0 / PACK_ROWS) * m->pk->group_bytes;
        p.rb = m->pk->group_bytes;
    }
    return p;
}

/* Splits p's rows into chunks for n_threads: a multiple of ROW_GRAIN each, CHUNKS_PER_THREAD a thread. */
static void matmul_part_split(matmul_part *p, int n_threads) {
    int64_t n_units = (p->n_rows + ROW_GRAIN - 1) / ROW_GRAIN;
    int64_t n_chunks = (int64_t)n_threads * CHUNKS_PER_THREAD;
    if (n_chunks > n_units) n_chunks = n_units;
    p->per = (n_units + n_chunks - 1) / n_chunks * ROW_GRAIN;
    p->n_chunks = (p->n_rows + p->per - 1) / p->per;
}

void quant_matmul(float *out, const void *w, uint32_t wtype, int64_t n_rows, int64_t n_cols, const float *x,
                  int n_tok, void *scratch, int n_threads) {
    quant_matmul_packed(out, w, NULL, wtype, n_rows, n_cols, x, n_tok, scratch, n_threads);
}

void quant_matmul_packed(float *out, const void *w, const quant_packed *pk, uint32_t wtype, int64_t n_rows,
                         int64_t n_cols, const float *x, int n_tok, void *scratch, int n_threads) {
    quant_mm m = {out, w, pk, wtype, n_rows, false, 0};
    quant_matmul_many(&m, 1, n_cols, x, n_tok, scratch, n_threads);
}

void quant_matmul_many(const quant_mm *mm, int n_mm, int64_t n_cols, const float *x, int n_tok, void *scratch,
                       int n_threads) {
    ATTND_ASSERT(n_mm >= 1 && n_mm <= QUANT_MM_MAX && n_tok >= 0);
    for (int i = 1; i < n_mm; i++)
        if (act_form(mm[i].wtype) != act_form(mm[0].wtype)) { /* activations rounded differently: one by one */
            for (int m = 0; m < n_mm; m++) quant_matmul_many(&mm[m], 1, n_cols, x, n_tok, scratch, n_threads);
            return;
        }
    const quant_kernels *k = quant_kernels_active();
    matmul_job j = {.n_tok = n_tok};
    double work = 0;
    int64_t rows = 0;
    for (int i = 0; i < n_mm; i++) {
        matmul_part p = matmul_part_of(k, &mm[i], n_cols);
        if (p.n_rows == 0) continue;
        j.part[j.n_part++] = p;
        work += (double)p.n_rows * (double)n_cols * (double)n_tok;
        rows += p.n_rows;
    }
    if (j.n_part == 0 || n_tok == 0) return;

    act_plan pl;
    act_plan_init(&pl, k, mm[0].wtype, x, n_tok, n_cols, scratch);
    pl.a.gemm = mm[0].gemm;
    j.pl = &pl;
    if (n_threads <= 1 || work < MATMUL_PAR_MIN_MACS || rows < 2 * ROW_GRAIN) {
        for (int t = 0; t < n_tok; t++) act_fill(&pl, t);
        for (int i = 0; i < j.n_part; i++) matmul_rows_task(&j, i, 0); /* chunk i: all of part i's rows */
        return;
    }
    /* chunks claimed one at a time by the engine's pool (threads.h) */
    int64_t n_chunks = 0;
    for (int i = 0; i < j.n_part; i++) {
        matmul_part_split(&j.part[i], n_threads);
        n_chunks += j.part[i].n_chunks;
    }
    threads_run(n_threads, n_tok, matmul_fill_task, &j);
    threads_run(n_threads, (int)n_chunks, matmul_rows_task, &j);
}

// ---- dequantization ----------------------------------------------------------------------------

/* The format's dequantizer (quant_format.c), except aligned F16 rows, which take the active
 * instruction set's conversion (the same floats: every f16 is exact in f32). Here rather than in
 * quant_format.c, so that the formats do not call the dispatch table that calls the kernels that
 * call the formats. */
void quant_dequantize_row(float *dst, const void *src, uint32_t type, int64_t n) {
    const quant_traits *tr = quant_traits_of(type);
    uint32_t be = gguf_type_block_elems(type);
    ATTND_ASSERT(tr && be > 0 && n >= 0 && n % be == 0);
    if (type == GGUF_TYPE_F16 && ((uintptr_t)src & 1) == 0) /* tensor data is aligned */
        quant_kernels_active()->h2f(dst, (const uint16_t *)src, n);
    else tr->dequant(dst, src, n / be);
}
