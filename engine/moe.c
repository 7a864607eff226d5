/*
 * moe.c — the experts of a Mixture-of-Experts layer in two passes of the pool (moe.h).
 *
 * Why not one quant_matmul per expert: each call is a parallel region of its own (two wake-ups
 * and barriers), so a decode step paid 2K of them for its K experts' down projections, and a
 * batch spread over many experts (batched decode: one entry per expert) paid four per expert.
 * Here a pass is one region of (group, row block) tasks, claimed one at a time: a thread that
 * finishes one expert's rows takes the next expert's without waiting for the others. Each task
 * runs the row kernels of quant_matmul on one thread over its block of rows, for all of its
 * group's entries, rounding their activations itself (once for gate and up together): with
 * blocks of at least 16 rows that is at most 1/16 of the task's multiply-adds, and a decode step
 * at 2 threads, 2 blocks per expert, rounds each expert's input twice per pass.
 */
#include <math.h>
#include <string.h>

#include "moe.h"
#include "quant.h"
#include "threads.h"

/* As quant.c: below this many multiply-adds in a pass, waking the pool costs more than it saves. */
#define MOE_PAR_MIN_MACS (1L << 20)
/* Row blocks: a multiple of the kernels' 16-row tiles (so a block's rows are computed as in one
 * call over the expert's whole slice), as many rows as a worker's tiles hold for the pass's
 * largest group (at least MOE_ROWS_MAX: a tile holds max_tok * MOE_ROWS_MAX floats, and at least
 * MOE_TILE_MIN), and about MOE_CHUNKS_PER_THREAD of them a thread: enough that a descheduled
 * thread holds back little, few enough that rounding the activations again per task costs
 * little (a decode step at 2 threads: 2 blocks per expert). */
#define MOE_ROW_GRAIN 16
#define MOE_ROWS_MAX 256
#define MOE_TILE_MIN 32768
#define MOE_CHUNKS_PER_THREAD 8

void moe_plan_build(moe_plan *pl, const int *sel, int n_slots, int n_expert) {
    moe_group *g = pl->groups;
    for (int x = 0; x < n_expert; x++) g[x] = (moe_group){x, 0, 0};
    for (int s = 0; s < n_slots; s++) g[sel[s]].cnt++;
    for (int x = 0, start = 0; x < n_expert; x++) g[x].start = start, start += g[x].cnt, g[x].cnt = 0;
    for (int s = 0; s < n_slots; s++) pl->slot[g[sel[s]].start + g[sel[s]].cnt++] = s; /* counting sort */
    pl->n_groups = 0;
    for (int x = 0; x < n_expert; x++)
        if (g[x].cnt) g[pl->n_groups++] = g[x]; /* in increasing x: never overwrites one not yet read */
    pl->n_slots = n_slots;
}

/* The choice score of expert x: its probability plus its bias; -inf outside the kept groups. */
static float ds_score(const moe_ds_router *r, const float *p, const unsigned char *keep, int x) {
    if (r->n_group > 1 && !keep[x / (r->n_expert / r->n_group)]) return -INFINITY;
    return p[x] + (r->bias ? r->bias[x] : 0.0f);
}

/* keep[g] = 1 for the n_group_used groups with the largest sums of their two best scores. */
static void ds_groups(const moe_ds_router *r, const float *p, unsigned char *keep) {
    int per = r->n_expert / r->n_group;
    float gs[1024];
    for (int g = 0; g < r->n_group; g++) {
        float a = -INFINITY, b = -INFINITY; /* the two best of the group */
        for (int x = g * per; x < (g + 1) * per; x++) {
            float v = p[x] + (r->bias ? r->bias[x] : 0.0f);
            if (v > a) b = a, a = v;
            else if (v > b) b = v;
        }
        gs[g] = per > 1 ? a + b : a;
        keep[g] = 0;
    }
    for (int k = 0; k < r->n_group_used; k++) {
        int best = -1;
        for (int g = 0; g < r->n_group; g++)
            if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
        keep[best] = 1;
    }
}

void moe_ds_route(const moe_ds_router *r, float *p, int *sel, float *w) {
    int NE = r->n_expert;
    if (r->gating == 2) {
        for (int x = 0; x < NE; x++) p[x] = 1.0f / (1.0f + expf(-p[x]));
    } else {
        float mx = -INFINITY;
        double sum = 0;
        for (int x = 0; x < NE; x++) mx = p[x] > mx ? p[x] : mx;
        for (int x = 0; x < NE; x++) sum += p[x] = expf(p[x] - mx);
        for (int x = 0; x < NE; x++) p[x] = (float)(p[x] / sum);
    }
    unsigned char keep[1024];
    if (r->n_group > 1) ds_groups(r, p, keep);
    float wsum = 0;
    for (int k = 0; k < r->k; k++) { /* k is small: selection by repeated scans */
        int best = -1;
        float bs = -INFINITY;
        for (int x = 0; x < NE; x++) {
            bool taken = false;
            for (int j = 0; j < k && !taken; j++) taken = sel[j] == x;
            float v = taken ? -INFINITY : ds_score(r, p, keep, x);
            if (!taken && (best < 0 || v > bs)) best = x, bs = v;
        }
        sel[k] = best;
        wsum += w[k] = p[best];
    }
    float div = r->norm ? (wsum > 6.103515625e-5f ? wsum : 6.103515625e-5f) : 1.0f;
    float sc = r->scale != 0.0f ? r->scale : 1.0f;
    for (int k = 0; k < r->k; k++) w[k] = w[k] / div * sc;
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Floats of one of a worker's two tiles, for groups of up to max_tok entries (a multiple of 16). */
static size_t tile_floats(int max_tok) { return max_size((size_t)max_tok * MOE_ROWS_MAX, MOE_TILE_MIN); }

/* A worker's scratch: two tiles, then quant_matmul's scratch. */
size_t moe_scratch_bytes(const layer_weights *L, int64_t n_embd, int64_t n_ff_exp, int max_tok) {
    size_t q = quant_scratch_bytes(L->gate_exps.type, max_tok, n_embd);
    q = max_size(q, quant_scratch_bytes(L->up_exps.type, max_tok, n_embd));
    q = max_size(q, quant_scratch_bytes(L->down_exps.type, max_tok, n_ff_exp));
    return (2 * sizeof(float) * tile_floats(max_tok) + max_size(q, 1) + 63) / 64 * 64;
}

/* One pass: its tasks are (group t / n_chunks, row block t % n_chunks) of per rows. */
typedef struct moe_pass {
    const moe_job *j;
    int per, n_chunks, rows;
    int stride;      /* rows between two experts' first rows in the matrix */
} moe_pass;

/* Rows [row, ...) of matrix w. */
static const void *rows_at(const weight *w, int64_t row) {
    return (const uint8_t *)w->data + (size_t)row * quant_row_bytes(w->type, w->cols);
}

/* Gate and up in one tensor (ffn_gate_up_exps): up_exps is a view into gate_exps, never packed itself. */
static bool fused(const moe_job *j) { return j->L->exp_stride == 2 * j->FE; }

/* g[i] = act(g[i], u[i]) for i < n: silu(g) u, or gpt-oss's clamped form (arch.h ACT_SWIGLU_OAI). */
static void expert_act(float *g, const float *u, int n, arch_act act) {
    if (act == ACT_GELU_TANH) { /* gelu in its tanh form (Gemma 4's experts) */
        for (int i = 0; i < n; i++)
            g[i] = 0.5f * g[i] * (1.0f + tanhf(0.7978845608028654f * (g[i] + 0.044715f * g[i] * g[i] * g[i]))) * u[i];
        return;
    }
    if (act != ACT_SWIGLU_OAI) {
        for (int i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        return;
    }
    const float alpha = 1.702f, limit = 7.0f;
    for (int i = 0; i < n; i++) {
        float x = g[i] < limit ? g[i] : limit, y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        g[i] = x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
    }
}

static void add_row(float *x, const float *b, int n) {
    for (int i = 0; b && i < n; i++) x[i] += b[i];
}

/* Task t of pass p, on worker w: its group, its rows [r0, r0 + rb) of each of the group's experts'
 * rows (the matrix's first such row is `row`), and the worker's scratch: tiles t0 and t1 (a group's
 * (cnt, per) block each) and quant scratch qs. */
typedef struct moe_block {
    const moe_group *gr;
    int r0, rb;
    int64_t row;     /* the block's first row among all experts' (n_expert, rows): the biases' */
    int64_t wrow;    /* its first row in the matrix: expert * stride + r0 (fused gate/up: 2 FE apart) */
    float *t0, *t1;
    void *qs;
} moe_block;

static moe_block block_of(const moe_pass *p, int t, int w) {
    moe_block b = {.gr = &p->j->pl->groups[t / p->n_chunks], .r0 = t % p->n_chunks * p->per};
    b.rb = p->rows - b.r0 < p->per ? p->rows - b.r0 : p->per;
    b.row = (int64_t)b.gr->expert * p->rows + b.r0;
    b.wrow = (int64_t)b.gr->expert * p->stride + b.r0;
    char *s = p->j->scratch + (size_t)w * p->j->scratch_bytes;
    b.t0 = (float *)s;
    b.t1 = b.t0 + tile_floats(p->j->max_tok);
    b.qs = b.t1 + tile_floats(p->j->max_tok);
    return b;
}

/* Rows [r0, r0 + rb) of the group's gate and up projections, their biases and the act, into g. */
static void gate_up_task(void *ctx, int t, int worker) {
    const moe_pass *p = ctx;
    const moe_job *j = p->j;
    const layer_weights *L = j->L;
    moe_block b = block_of(p, t, worker);
    const float *x = j->x + (size_t)b.gr->start * j->E; /* (cnt, E) */
    /* fused gate/up (one packed copy, packed as gate_exps): expert x's up rows are FE after its gate rows */
    const quant_packed *up_pk = L->up_exps.packed ? L->up_exps.packed : fused(j) ? L->gate_exps.packed : NULL;
    int64_t up_row0 = L->up_exps.packed ? b.wrow : b.wrow + j->FE;
    quant_mm mm[2] = {{b.t0, rows_at(&L->gate_exps, b.wrow), L->gate_exps.packed, L->gate_exps.type, b.rb, false, b.wrow},
                      {b.t1, rows_at(&L->up_exps, b.wrow), up_pk, L->up_exps.type, b.rb, false, up_pk ? up_row0 : 0}};
    quant_matmul_many(mm, 2, j->E, x, b.gr->cnt, b.qs, 1); /* x rounded once for both */
    for (int c = 0; c < b.gr->cnt; c++) { /* (cnt, rb) */
        float *g = b.t0 + (size_t)c * b.rb, *u = b.t1 + (size_t)c * b.rb;
        add_row(g, L->gate_exps_b ? L->gate_exps_b + b.row : NULL, b.rb);
        add_row(u, L->up_exps_b ? L->up_exps_b + b.row : NULL, b.rb);
        expert_act(g, u, b.rb, j->act);
        memcpy(j->g + (size_t)(b.gr->start + c) * j->FE + b.r0, g, sizeof(float) * (size_t)b.rb);
    }
}

/* Rows [r0, r0 + rb) of the group's down projection and bias, into its slots' rows of o. */
static void down_task(void *ctx, int t, int worker) {
    const moe_pass *p = ctx;
    const moe_job *j = p->j;
    const layer_weights *L = j->L;
    moe_block b = block_of(p, t, worker);
    quant_mm mm = {b.t0, rows_at(&L->down_exps, b.wrow), L->down_exps.packed, L->down_exps.type, b.rb, false, b.wrow};
    quant_matmul_many(&mm, 1, j->FE, j->g + (size_t)b.gr->start * j->FE, b.gr->cnt, b.qs, 1);
    for (int c = 0; c < b.gr->cnt; c++) {
        float *o = b.t0 + (size_t)c * b.rb;
        add_row(o, L->down_exps_b ? L->down_exps_b + b.row : NULL, b.rb);
        memcpy(j->o + (size_t)j->pl->slot[b.gr->start + c] * j->E + b.r0, o, sizeof(float) * (size_t)b.rb);
    }
}

/* Runs fn over every (group, row block) of `rows` rows, macs multiply-adds in all. */
static void run_pass(const moe_job *j, int rows, int stride, double macs, threads_fn fn) {
    const moe_plan *pl = j->pl;
    if (!pl->n_groups) return;
    moe_pass p = {.j = j, .rows = rows, .stride = stride};
    int max_cnt = 1;
    for (int i = 0; i < pl->n_groups; i++) max_cnt = pl->groups[i].cnt > max_cnt ? pl->groups[i].cnt : max_cnt;
    ATTND_ASSERT(max_cnt <= j->max_tok);
    int cap = (int)(tile_floats(j->max_tok) / (size_t)max_cnt / MOE_ROW_GRAIN * MOE_ROW_GRAIN); /* >= MOE_ROWS_MAX */
    int nth = macs >= MOE_PAR_MIN_MACS ? j->n_threads : 1;
    int units = (rows + MOE_ROW_GRAIN - 1) / MOE_ROW_GRAIN;
    int want = (nth * MOE_CHUNKS_PER_THREAD + pl->n_groups - 1) / pl->n_groups; /* blocks per group */
    int least = (rows + cap - 1) / cap;
    int c = want > least ? want : least;
    if (c > units) c = units;
    p.per = (units + c - 1) / c * MOE_ROW_GRAIN; /* <= cap, as c >= least and cap is a multiple of 16 */
    p.n_chunks = (rows + p.per - 1) / p.per;
    threads_run(nth, pl->n_groups * p.n_chunks, fn, &p);
}

void moe_gate_up(const moe_job *j) {
    run_pass(j, j->FE, j->L->exp_stride, 2.0 * j->pl->n_slots * j->FE * j->E, gate_up_task);
}

void moe_down(const moe_job *j) {
    run_pass(j, j->E, j->E, (double)j->pl->n_slots * j->E * j->FE, down_task);
}
