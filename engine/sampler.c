/*
 * sampler.c — the sampling chain of attnd/sampler.h: penalties -> logit_bias -> top-k ->
 * typical-p -> top-p -> min-p -> temperature -> draw, with a private random generator per
 * sampler (splitmix64 seeding xoshiro256**), and the raw log-probabilities OpenAI's logprobs need.
 *
 * Cost per token is O(V) for a vocabulary of V, never a sort of V: penalties and logit_bias
 * touch only their own ids (the other logits are read from the caller's array in place);
 * greedy is one pass; a small top-k keeps a heap of k while reading the logits once; a large
 * top-k is a quickselect; top-p and typical-p find their cut with a quickselect that follows the
 * probability mass (select_mass), so only what survives is ever examined twice.
 * Every buffer is allocated in sampler_create; sampler_sample allocates nothing.
 *
 * Determinism: ties are broken by id everywhere (the candidate order is a total order), the
 * generator is per sampler, and nothing here is parallel, so a given seed, parameters, history
 * and logits always produce the same token.
 */
#include "attnd/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"

// ---- Random generator -----------------------------------------------------------------------

/* xoshiro256** (Blackman & Vigna), state filled by splitmix64 from the 64-bit seed so that any
 * seed, including 0, gives a well-mixed non-zero state. */
typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void rng_seed(rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

uint64_t sampler_seed_stream(uint64_t seed, int k) {
    if (k == 0) return seed;
    /* not seed + k * step: splitmix64 walks seed by its own step, so such seeds would give the
     * same sequence shifted by k */
    uint64_t x = seed ^ ((uint64_t)k * 0xd1b54a32d192ed03ULL);
    return splitmix64(&x);
}

static uint64_t rng_next(rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

// ---- Parameters -----------------------------------------------------------------------------

void sampler_params_default(sampler_params *p) {
    memset(p, 0, sizeof(*p));
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->typical_p = 1.0f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->seed = 0;
    p->bias = NULL;
    p->n_bias = 0;
}

/* True when the bias list bans every id of the vocabulary (then nothing could be sampled). Only
 * possible with at least n_vocab entries, so the bitmap is allocated only in that odd case. */
static attnd_status bans_everything(const sampler_params *p, int n_vocab, bool *all, attnd_err *err) {
    *all = false;
    if (p->n_bias < n_vocab) return ATTND_OK;
    unsigned char *seen = calloc((size_t)n_vocab, 1);
    if (!seen) return attnd_fail(err, ATTND_ERR_NOMEM, "logit_bias: out of memory checking %d entries", p->n_bias);
    int n_banned = 0;
    for (int i = 0; i < p->n_bias; i++) {
        int32_t id = p->bias[i].id;
        if (isinf(p->bias[i].bias) && p->bias[i].bias < 0 && !seen[id]) {
            seen[id] = 1;
            n_banned++;
        }
    }
    free(seen);
    *all = n_banned == n_vocab;
    return ATTND_OK;
}

attnd_status sampler_params_validate(const sampler_params *p, int n_vocab, attnd_err *err) {
    if (!p) return attnd_fail(err, ATTND_ERR_INVALID, "sampler parameters missing");
    if (n_vocab <= 0) return attnd_fail(err, ATTND_ERR_INVALID, "vocabulary size must be positive, got %d", n_vocab);
    /* Written as !(ok) so that NaN, which fails every comparison, is rejected too. */
    if (!(isfinite(p->temperature) && p->temperature >= 0))
        return attnd_fail(err, ATTND_ERR_INVALID, "temperature must be a finite number >= 0, got %g", p->temperature);
    if (p->top_k < 0) return attnd_fail(err, ATTND_ERR_INVALID, "top_k must be >= 0 (0 = off), got %d", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return attnd_fail(err, ATTND_ERR_INVALID, "top_p must be in (0, 1] (1 = off), got %g", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return attnd_fail(err, ATTND_ERR_INVALID, "min_p must be in [0, 1] (0 = off), got %g", p->min_p);
    if (!(p->typical_p > 0 && p->typical_p <= 1))
        return attnd_fail(err, ATTND_ERR_INVALID, "typical_p must be in (0, 1] (1 = off), got %g", p->typical_p);
    if (!(isfinite(p->repeat_penalty) && p->repeat_penalty > 0))
        return attnd_fail(err, ATTND_ERR_INVALID, "repeat_penalty must be a finite number > 0 (1 = off), got %g",
                          p->repeat_penalty);
    if (p->repeat_last_n < -1)
        return attnd_fail(err, ATTND_ERR_INVALID, "repeat_last_n must be >= -1 (-1 = whole history, 0 = off), got %d",
                          p->repeat_last_n);
    if (!isfinite(p->presence_penalty))
        return attnd_fail(err, ATTND_ERR_INVALID, "presence_penalty must be a finite number, got %g",
                          p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return attnd_fail(err, ATTND_ERR_INVALID, "frequency_penalty must be a finite number, got %g",
                          p->frequency_penalty);
    if (p->n_bias < 0) return attnd_fail(err, ATTND_ERR_INVALID, "logit_bias: negative entry count %d", p->n_bias);
    if (p->n_bias > 0 && !p->bias)
        return attnd_fail(err, ATTND_ERR_INVALID, "logit_bias: %d entries but no list", p->n_bias);
    for (int i = 0; i < p->n_bias; i++) {
        const logit_bias *b = &p->bias[i];
        if (b->id < 0 || b->id >= n_vocab)
            return attnd_fail(err, ATTND_ERR_INVALID, "logit_bias: token id %d is outside the vocabulary (0..%d)",
                              (int)b->id, n_vocab - 1);
        if (isnan(b->bias) || (isinf(b->bias) && b->bias > 0))
            return attnd_fail(err, ATTND_ERR_INVALID,
                              "logit_bias: bias for token %d must be a finite number or -inf (ban), got %g",
                              (int)b->id, b->bias);
    }
    bool all;
    attnd_status st = bans_everything(p, n_vocab, &all, err);
    if (st != ATTND_OK) return st;
    if (all) return attnd_fail(err, ATTND_ERR_INVALID, "logit_bias bans every token of the vocabulary");
    return ATTND_OK;
}

// ---- Sampler state --------------------------------------------------------------------------

/* One candidate token. key orders the candidates of the step at hand (lower first, then lower
 * id): -logit for top-k and top-p, the distance to the entropy for typical-p. p is the
 * (unnormalised) probability when a step needs it. */
typedef struct cand {
    int32_t id;
    float logit;
    float key;
    float p;
} cand;

struct sampler {
    sampler_params params; /* params.bias points at bias below */
    int n_vocab;
    logit_bias *bias;  /* (n_bias) own copy */
    int32_t fallback;  /* lowest id the bias list does not ban */
    rng rng;

    /* Penalty history: the last repeat_last_n accepted ids (all of them when -1). */
    bool penalize;     /* any penalty on and the window non-empty */
    int32_t *ring;     /* (repeat_last_n) circular buffer of the window; NULL when -1 or 0 */
    int ring_len, ring_head;
    int32_t *count;    /* (n_vocab) occurrences of each id in the window */
    int32_t *seen;     /* (n_vocab) the distinct ids with count > 0, in no particular order */
    int32_t *seen_pos; /* (n_vocab) index of an id in seen, valid while its count > 0 */
    int n_seen;

    /* The ids penalties or bias change in the current sample, and their changed logits: the
     * other logits are read straight from the caller's array, never copied for nothing. */
    unsigned char *touched; /* (n_vocab) 1 for ids in touched_ids, 0 otherwise between samples */
    int32_t *touched_ids;   /* (n_vocab) */
    int n_touched;
    float *adj;             /* (n_vocab) adjusted logit, valid where touched */

    cand *cand; /* (n_vocab) candidates of the current sample */

    char *mem; /* owns every array above (engine/block.h) */
};

/* Lays out the sampler's arrays in mem (block.h); returns the bytes they need. */
static size_t layout(sampler *s, char *mem, int n_bias, int repeat_last_n) {
    size_t v = (size_t)s->n_vocab;
    block b = {.mem = mem};
    s->bias = block_take(&b, (size_t)n_bias, sizeof(*s->bias));
    s->ring = block_take(&b, repeat_last_n > 0 ? (size_t)repeat_last_n : 0, sizeof(*s->ring));
    s->count = block_take(&b, v, sizeof(*s->count));
    s->seen = block_take(&b, v, sizeof(*s->seen));
    s->seen_pos = block_take(&b, v, sizeof(*s->seen_pos));
    s->touched = block_take(&b, v, sizeof(*s->touched));
    s->touched_ids = block_take(&b, v, sizeof(*s->touched_ids));
    s->adj = block_take(&b, v, sizeof(*s->adj));
    s->cand = block_take(&b, v, sizeof(*s->cand));
    return block_size(&b);
}

attnd_status sampler_create(sampler **out, const sampler_params *p, int n_vocab, attnd_err *err) {
    *out = NULL;
    attnd_status st = sampler_params_validate(p, n_vocab, err);
    if (st != ATTND_OK) return st;
    sampler *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "sampler: out of memory");
    s->params = *p;
    s->n_vocab = n_vocab;
    if (!(s->mem = calloc(1, layout(s, NULL, p->n_bias, p->repeat_last_n)))) goto nomem;
    layout(s, s->mem, p->n_bias, p->repeat_last_n); /* every array zeroed */
    if (p->n_bias > 0) memcpy(s->bias, p->bias, sizeof(*s->bias) * (size_t)p->n_bias);
    s->params.bias = s->bias;
    rng_seed(&s->rng, p->seed);

    s->penalize = p->repeat_last_n != 0 &&
                  (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
    size_t v = (size_t)n_vocab;

    /* The fallback for logits that are all -inf: the first id not banned (validation
     * guarantees one exists). touched doubles as the marker array and is cleared again. */
    for (int i = 0; i < p->n_bias; i++)
        if (isinf(p->bias[i].bias)) s->touched[p->bias[i].id] = 1;
    while (s->touched[s->fallback]) s->fallback++;
    memset(s->touched, 0, v);

    *out = s;
    return ATTND_OK;
nomem:
    sampler_destroy(s);
    return attnd_fail(err, ATTND_ERR_NOMEM, "sampler: out of memory for a vocabulary of %d", n_vocab);
}

void sampler_destroy(sampler *s) {
    if (!s) return;
    free(s->mem);
    free(s);
}

static void history_add(sampler *s, int32_t id) {
    if (s->count[id]++ == 0) {
        s->seen_pos[id] = s->n_seen;
        s->seen[s->n_seen++] = id;
    }
}

static void history_remove(sampler *s, int32_t id) {
    if (--s->count[id] == 0) {
        int32_t last = s->seen[--s->n_seen];
        s->seen[s->seen_pos[id]] = last;
        s->seen_pos[last] = s->seen_pos[id];
    }
}

void sampler_accept(sampler *s, int32_t id) {
    if (id < 0 || id >= s->n_vocab || s->params.repeat_last_n == 0) return;
    if (s->ring) {
        int cap = s->params.repeat_last_n;
        if (s->ring_len == cap) {
            history_remove(s, s->ring[s->ring_head]);
            s->ring[s->ring_head] = id;
            s->ring_head = (s->ring_head + 1) % cap;
        } else {
            s->ring[(s->ring_head + s->ring_len) % cap] = id;
            s->ring_len++;
        }
    }
    history_add(s, id);
}

void sampler_reset(sampler *s) {
    for (int i = 0; i < s->n_seen; i++) s->count[s->seen[i]] = 0;
    s->n_seen = 0;
    s->ring_len = 0;
    s->ring_head = 0;
}

// ---- Penalties and bias ---------------------------------------------------------------------

/* The penalised logit of a token that occurs n > 0 times in the window. As llama.cpp: a
 * positive logit is divided by repeat_penalty and a negative one multiplied, so both become less
 * likely (a plain division would favour negative ones); then the OpenAI-style penalties. */
static inline float penalize(const sampler_params *p, float l, int n) {
    if (p->repeat_penalty != 1.0f) l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
    return l - ((float)n * p->frequency_penalty + p->presence_penalty);
}

void sampler_adjust_logits(const sampler *s, float *logits) {
    if (s->penalize)
        for (int i = 0; i < s->n_seen; i++) {
            int32_t id = s->seen[i];
            logits[id] = penalize(&s->params, logits[id], s->count[id]);
        }
    for (int i = 0; i < s->params.n_bias; i++) logits[s->bias[i].id] += s->bias[i].bias;
}

static inline float raw_logit(float l) { return isnan(l) ? -INFINITY : l; }

static void touch(sampler *s, const float *logits, int32_t id) {
    if (s->touched[id]) return;
    s->touched[id] = 1;
    s->touched_ids[s->n_touched++] = id;
    s->adj[id] = raw_logit(logits[id]);
}

/* Computes the adjusted logits of the ids penalties and bias change (steps 1 and 2). */
static void touch_adjusted(sampler *s, const float *logits) {
    if (s->penalize)
        for (int i = 0; i < s->n_seen; i++) {
            int32_t id = s->seen[i];
            touch(s, logits, id);
            s->adj[id] = penalize(&s->params, s->adj[id], s->count[id]);
        }
    for (int i = 0; i < s->params.n_bias; i++) {
        int32_t id = s->bias[i].id;
        touch(s, logits, id);
        s->adj[id] += s->bias[i].bias;
        if (isnan(s->adj[id])) s->adj[id] = -INFINITY; /* +inf logit banned with -inf */
    }
}

static void untouch(sampler *s) {
    for (int i = 0; i < s->n_touched; i++) s->touched[s->touched_ids[i]] = 0;
    s->n_touched = 0;
}

/* The logit of id after steps 1 and 2 (NaN read as -inf). */
static inline float adjusted(const sampler *s, const float *logits, int i) {
    return s->touched[i] ? s->adj[i] : raw_logit(logits[i]);
}

// ---- Ordering, partial selection ------------------------------------------------------------

/* The candidate order: lower key first, then lower id. A total order, so every selection below
 * has exactly one result. */
static inline bool before(const cand *a, const cand *b) {
    return a->key < b->key || (a->key == b->key && a->id < b->id);
}

static int cmp_before(const void *x, const void *y) {
    const cand *a = x, *b = y;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

static inline void swap_cand(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Partitions c[lo..hi] (lo < hi) around a median-of-three pivot (Hoare): on return every
 * element of c[lo..j] comes before every element of c[j+1..hi], and lo <= j < hi. */
static int partition(cand *c, int lo, int hi) {
    int mid = lo + (hi - lo) / 2;
    if (before(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
    if (before(&c[hi], &c[lo])) swap_cand(&c[hi], &c[lo]);
    if (before(&c[hi], &c[mid])) swap_cand(&c[hi], &c[mid]);
    cand pivot = c[mid];
    int i = lo - 1, j = hi + 1;
    for (;;) {
        do i++; while (before(&c[i], &pivot));
        do j--; while (before(&pivot, &c[j]));
        if (i >= j) return j;
        swap_cand(&c[i], &c[j]);
    }
}

/* Rounds of partitioning allowed before falling back to a sort: 2 log2 n + 2 (introselect's
 * guard against inputs that make median-of-three degenerate). */
static int round_budget(int n) {
    int budget = 2;
    for (int m = n; m > 1; m >>= 1) budget += 2;
    return budget;
}

/* Rearranges c[0..n) so that c[0..k) holds the first k candidates in key order (unordered among
 * themselves). Expected O(n). */
static void select_first(cand *c, int n, int k) {
    if (k <= 0 || k >= n) return;
    int lo = 0, hi = n - 1, budget = round_budget(n);
    while (lo < hi) {
        if (budget-- == 0) {
            qsort(c + lo, (size_t)(hi - lo + 1), sizeof(*c), cmp_before);
            return;
        }
        int j = partition(c, lo, hi);
        if (k - 1 <= j) hi = j;
        else lo = j + 1;
    }
}

/*
 * Rearranges c[0..n) so that c[0..keep) is the shortest prefix, in key order, whose p adds up
 * to target, and returns keep (n when the total falls short by rounding). This is top-p's and
 * typical-p's cut without sorting: each round partitions the range still in question and keeps
 * going into the side where the mass runs out. Expected O(n).
 */
static int select_mass(cand *c, int n, double target) {
    int lo = 0, hi = n - 1, budget = round_budget(n);
    double need = target; /* mass still missing after c[0..lo) */
    while (lo < hi) {
        if (budget-- == 0) {
            qsort(c + lo, (size_t)(hi - lo + 1), sizeof(*c), cmp_before);
            for (int i = lo; i < hi; i++) {
                need -= c[i].p;
                if (need <= 0) return i + 1;
            }
            return hi + 1;
        }
        int j = partition(c, lo, hi);
        double mass = 0;
        for (int i = lo; i <= j; i++) mass += c[i].p;
        if (mass >= need) {
            hi = j;
        } else {
            need -= mass;
            lo = j + 1;
        }
    }
    return lo + 1;
}

/* Index of the highest logit of c[0..n) (n >= 1), lowest id on ties. */
static int argmax(const cand *c, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (c[i].logit > c[best].logit || (c[i].logit == c[best].logit && c[i].id < c[best].id)) best = i;
    return best;
}

/* p = exp((logit - max) / temperature) for c[0..n); returns their sum. */
static double exp_shifted(cand *c, int n, float max, float inv_temp) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - max) * inv_temp);
        sum += c[i].p;
    }
    return sum;
}

// ---- The chain ------------------------------------------------------------------------------

int32_t sampler_argmax(const float *logits, int n_vocab) {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i; /* strict: ties keep the lower id */
    return best;
}

/* Greedy: the argmax of the adjusted logits, in one read of the caller's array. */
/* Scans skip runs of SKIP_RUN ids that cannot change their result: none touched and no raw
 * logit above the bar (a NaN compares false, as its -inf would). The test is branch-free, so the
 * compiler vectorises it: most of a large vocabulary is passed over at a few ns per run. */
enum { SKIP_RUN = 16 };

static inline bool run_passes(const sampler *s, const float *logits, int i, float bar) {
    int hit = 0;
    for (int j = 0; j < SKIP_RUN; j++) hit |= (logits[i + j] > bar) | s->touched[i + j];
    return hit != 0;
}

static int32_t pick_greedy(const sampler *s, const float *logits) {
    int32_t best = -1;
    float best_l = -INFINITY;
    for (int i = 0; i < s->n_vocab; i++) {
        if (i % SKIP_RUN == 0 && i + SKIP_RUN <= s->n_vocab && !run_passes(s, logits, i, best_l)) {
            i += SKIP_RUN - 1; /* nothing above the best so far: ties keep the lower id */
            continue;
        }
        float l = adjusted(s, logits, i);
        if (l > best_l) { /* strictly: the lowest id wins ties; NaN was read as -inf */
            best = i;
            best_l = l;
        }
    }
    return best < 0 ? s->fallback : best;
}

/* Heap of the k first candidates in key order, worst at c[0]: sift c[i] down. */
static void heap_down(cand *c, int k, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && before(&c[w], &c[l])) w = l;
        if (r < k && before(&c[w], &c[r])) w = r;
        if (w == i) return;
        swap_cand(&c[i], &c[w]);
        i = w;
    }
}

/*
 * Steps 1-3 for a small top_k: one read of the logits keeping a heap of the k best, so most
 * tokens cost a comparison with the heap's worst. Returns the candidate count (< k when fewer
 * than k tokens are not banned).
 */
static int gather_top_k(sampler *s, const float *logits, int k) {
    cand *c = s->cand;
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++) {
        /* once the heap is full, an id enters only above its worst logit (ties lose: lower ids
         * came first) */
        if (n == k && i % SKIP_RUN == 0 && i + SKIP_RUN <= s->n_vocab && !run_passes(s, logits, i, c[0].logit)) {
            i += SKIP_RUN - 1;
            continue;
        }
        float l = adjusted(s, logits, i);
        if (l == -INFINITY) continue;
        cand x = {i, l, -l, 0};
        if (n < k) {
            /* sift up */
            int j = n++;
            c[j] = x;
            while (j > 0 && before(&c[(j - 1) / 2], &c[j])) {
                swap_cand(&c[(j - 1) / 2], &c[j]);
                j = (j - 1) / 2;
            }
        } else if (before(&x, &c[0])) {
            c[0] = x;
            heap_down(c, k, 0);
        }
    }
    return n;
}

/* Steps 1-2 for everything else: all tokens not banned. */
static int gather_all(sampler *s, const float *logits) {
    cand *c = s->cand;
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++) {
        float l = adjusted(s, logits, i);
        if (l != -INFINITY) c[n++] = (cand){i, l, -l, 0};
    }
    return n;
}

/* typical-p (locally typical sampling, Meister et al. 2022): keep the tokens whose surprisal
 * -log p is closest to the entropy H, until their mass reaches typical_p. Surprisal equals H
 * exactly at the logit centre = max + log(sum) - H, so the order is by |logit - centre|. */
static int apply_typical(cand *c, int n, float typical_p) {
    float max = c[argmax(c, n)].logit;
    double sum = exp_shifted(c, n, max, 1.0f);
    double entropy = 0;
    for (int i = 0; i < n; i++) {
        double prob = c[i].p / sum;
        if (prob > 0) entropy -= prob * log(prob);
    }
    double centre = max + log(sum) - entropy;
    for (int i = 0; i < n; i++) c[i].key = (float)fabs((double)c[i].logit - centre);
    int keep = select_mass(c, n, typical_p * sum);
    for (int i = 0; i < keep; i++) c[i].key = -c[i].logit; /* back to logit order */
    return keep;
}

/* Candidates whose count exceeds this multiple of top_k are gathered with the heap. */
enum { HEAP_RATIO = 8 };

static int32_t pick(sampler *s, const float *logits) {
    const sampler_params *p = &s->params;
    if (p->temperature == 0.0f) return pick_greedy(s, logits);

    cand *c = s->cand;
    int n;
    if (p->top_k > 0 && p->top_k < s->n_vocab / HEAP_RATIO) {
        n = gather_top_k(s, logits, p->top_k);
    } else {
        n = gather_all(s, logits);
        if (p->top_k > 0 && p->top_k < n) {
            select_first(c, n, p->top_k);
            n = p->top_k;
        }
    }
    if (n == 0) return s->fallback;

    /* A +inf logit takes all the probability; several share it equally. */
    float max = c[argmax(c, n)].logit;
    if (max == INFINITY) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].logit == INFINITY) c[m++] = (cand){c[i].id, 0.0f, 0.0f, 0.0f};
        n = m;
        max = 0.0f;
    }

    if (p->typical_p < 1.0f && n > 1) {
        n = apply_typical(c, n, p->typical_p);
        max = c[argmax(c, n)].logit;
    }
    if (p->top_p < 1.0f && n > 1) {
        double sum = exp_shifted(c, n, max, 1.0f);
        n = select_mass(c, n, (double)p->top_p * sum);
    }
    if (p->min_p > 0.0f && n > 1) {
        /* p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p); max survives top-p. */
        float threshold = max + logf(p->min_p);
        int m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].logit >= threshold) c[m++] = c[i];
        n = m;
    }

    /* Temperature and the draw: one random number per sample, whatever survived. */
    double u = rng_uniform(&s->rng);
    if (n == 1) return c[0].id;
    /* A temperature so small that 1/T overflows is the limit T -> 0: the best survivor. */
    if (!(1.0f / p->temperature < INFINITY)) return c[argmax(c, n)].id;
    double sum = exp_shifted(c, n, max, 1.0f / p->temperature);
    double target = u * sum, cum = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].p <= 0) continue;
        last = i;
        cum += c[i].p;
        if (target < cum) return c[i].id;
    }
    return c[last].id; /* u * sum rounded up to the full sum */
}

int32_t sampler_sample(sampler *s, const float *logits) {
    touch_adjusted(s, logits);
    int32_t id = pick(s, logits);
    untouch(s);
    return id;
}

// ---- Log-probabilities ----------------------------------------------------------------------

static float logprob_of(float l, double log_z, int n_inf) {
    if (isnan(l) || l == -INFINITY) return -INFINITY;
    if (n_inf > 0) return l == INFINITY ? (float)-log((double)n_inf) : -INFINITY;
    return (float)((double)l - log_z);
}

void sampler_logprobs(const float *logits, int n_vocab, int32_t chosen, int top_n, token_logprob *chosen_out,
                      token_logprob *top_out) {
    ATTND_ASSERT(n_vocab > 0 && chosen >= 0 && chosen < n_vocab);
    ATTND_ASSERT(top_n >= 0 && top_n <= SAMPLER_MAX_TOP_LOGPROBS && (top_n == 0 || top_out));
    /* One pass for the maximum and the top_n best (insertion into a short sorted list: almost
     * every logit fails the first comparison with its worst entry). */
    cand best[SAMPLER_MAX_TOP_LOGPROBS]; /* key = -logit */
    int n_best = 0;
    float max = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
        float l = isnan(logits[i]) ? -INFINITY : logits[i];
        if (l > max) max = l;
        if (top_n == 0) continue;
        cand x = {i, l, -l, 0};
        if (n_best == top_n && !before(&x, &best[n_best - 1])) continue;
        int j = n_best < top_n ? n_best++ : n_best - 1;
        while (j > 0 && before(&x, &best[j - 1])) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = x;
    }
    /* log_softmax = l - (max + log sum exp(l - max)). A +inf logit takes all the mass, shared
     * with any other +inf; NaN counts as -inf. */
    double log_z = max;
    int n_inf = 0;
    if (max == INFINITY) {
        for (int i = 0; i < n_vocab; i++) n_inf += logits[i] == INFINITY;
    } else if (max != -INFINITY) {
        double sum = 0; /* float exponentials (each term is within [0, 1]), double sum */
        for (int i = 0; i < n_vocab; i++)
            if (!isnan(logits[i])) sum += expf(logits[i] - max);
        log_z = max + log(sum);
    }
    if (chosen_out) *chosen_out = (token_logprob){chosen, logprob_of(logits[chosen], log_z, n_inf)};
    for (int i = 0; i < top_n; i++) {
        if (i < n_best) top_out[i] = (token_logprob){best[i].id, logprob_of(best[i].logit, log_z, n_inf)};
        else top_out[i] = (token_logprob){-1, -INFINITY};
    }
}
