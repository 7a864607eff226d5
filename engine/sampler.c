/*
 * sampler.c — the sampling chain of attnd/sampler.h: penalties -> logit_bias -> top-k ->
 * typical-p -> top-p -> min-p -> temperature -> draw, with a private random generator per
 * sampler (splitmix64 seeding xoshiro256**), and the raw log-probabilities OpenAI's logprobs need.
 *
 * Cost per token is O(V) for a vocabulary of V: the candidates are copied once, penalties touch
 * only the ids in the history, logit_bias only its own ids, and top-k / top-p use partial
 * selection (quickselect, then sorting only the selected block) instead of sorting all V.
 * typical-p is the one step that sorts every surviving candidate (its order is by distance to the
 * entropy, not by logit); it is off by default and, when on, usually follows a top-k.
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

const char *stop_reason_finish(stop_reason r) {
    switch (r) {
    case STOP_EOG:
    case STOP_STRING: return "stop";
    case STOP_LENGTH: return "length";
    case STOP_NONE: break;
    }
    return NULL;
}

// ---- Sampler state --------------------------------------------------------------------------

/* One candidate token. p is scratch: a probability, or typical-p's sort key. */
typedef struct cand {
    int32_t id;
    float logit;
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

    cand *cand; /* (n_vocab) candidates of the current sample */
};

attnd_status sampler_create(sampler **out, const sampler_params *p, int n_vocab, attnd_err *err) {
    *out = NULL;
    attnd_status st = sampler_params_validate(p, n_vocab, err);
    if (st != ATTND_OK) return st;
    sampler *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "sampler: out of memory");
    s->params = *p;
    s->n_vocab = n_vocab;
    s->params.bias = NULL;
    if (p->n_bias > 0) {
        s->bias = malloc(sizeof(*s->bias) * (size_t)p->n_bias);
        if (!s->bias) goto nomem;
        memcpy(s->bias, p->bias, sizeof(*s->bias) * (size_t)p->n_bias);
        s->params.bias = s->bias;
    }
    rng_seed(&s->rng, p->seed);

    s->penalize = p->repeat_last_n != 0 &&
                  (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
    if (p->repeat_last_n > 0) {
        s->ring = malloc(sizeof(*s->ring) * (size_t)p->repeat_last_n);
        if (!s->ring) goto nomem;
    }
    s->count = calloc((size_t)n_vocab, sizeof(*s->count));
    s->seen = malloc(sizeof(*s->seen) * (size_t)n_vocab);
    s->seen_pos = malloc(sizeof(*s->seen_pos) * (size_t)n_vocab);
    s->cand = malloc(sizeof(*s->cand) * (size_t)n_vocab);
    if (!s->count || !s->seen || !s->seen_pos || !s->cand) goto nomem;

    /* The fallback for logits that are all -inf: the first id not banned (validation
     * guarantees one exists). count doubles as the marker array and is cleared again. */
    for (int i = 0; i < p->n_bias; i++)
        if (isinf(p->bias[i].bias)) s->count[p->bias[i].id] = 1;
    while (s->count[s->fallback]) s->fallback++;
    memset(s->count, 0, sizeof(*s->count) * (size_t)n_vocab);

    *out = s;
    return ATTND_OK;
nomem:
    sampler_destroy(s);
    return attnd_fail(err, ATTND_ERR_NOMEM, "sampler: out of memory for a vocabulary of %d", n_vocab);
}

void sampler_destroy(sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->ring);
    free(s->count);
    free(s->seen);
    free(s->seen_pos);
    free(s->cand);
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

// ---- Candidate ordering and partial selection -----------------------------------------------

/* The candidate order: higher logit first, then lower id. A total order, so every selection
 * and sort below has exactly one result. */
static inline bool better(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_better(const void *x, const void *y) {
    const cand *a = x, *b = y;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

static inline void swap_cand(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/*
 * Rearranges c[0..n) so that c[0..k) holds the k best candidates (in no particular order) and
 * everything after them is worse (quickselect, Hoare partition, median-of-three pivot). Expected
 * O(n); if partitioning degenerates (more rounds than 2 log2 n), sorts the rest instead.
 */
static void select_best(cand *c, int n, int k) {
    if (k <= 0 || k >= n) return;
    int lo = 0, hi = n - 1, budget = 2;
    for (int m = n; m > 1; m >>= 1) budget += 2;
    while (hi > lo) {
        if (budget-- == 0) {
            qsort(c + lo, (size_t)(hi - lo + 1), sizeof(*c), cmp_better);
            return;
        }
        int mid = lo + (hi - lo) / 2;
        /* Order c[lo], c[mid], c[hi] so the median lands in mid. */
        if (better(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
        if (better(&c[hi], &c[lo])) swap_cand(&c[hi], &c[lo]);
        if (better(&c[hi], &c[mid])) swap_cand(&c[hi], &c[mid]);
        cand pivot = c[mid];
        int i = lo - 1, j = hi + 1;
        for (;;) {
            do i++; while (better(&c[i], &pivot));
            do j--; while (better(&pivot, &c[j]));
            if (i >= j) break;
            swap_cand(&c[i], &c[j]);
        }
        /* Now c[lo..j] are all at least as good as c[j+1..hi]. */
        if (k - 1 <= j) hi = j;
        else lo = j + 1;
    }
}

/* Makes c[0..m) the m best candidates in order, given c[0..done) already are (done <= m). */
static void sort_prefix(cand *c, int n, int done, int m) {
    if (m > n) m = n;
    if (m <= done) return;
    select_best(c + done, n - done, m - done);
    qsort(c + done, (size_t)(m - done), sizeof(*c), cmp_better);
}

/* Index of the best candidate of c[0..n) (n >= 1). */
static int argmax(const cand *c, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (better(&c[i], &c[best])) best = i;
    return best;
}

/* p = exp(logit - max) for c[0..n) (not normalised); returns the sum. */
static double exp_shifted(cand *c, int n, float max, float inv_temp) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - max) * inv_temp);
        sum += c[i].p;
    }
    return sum;
}

// ---- The chain ------------------------------------------------------------------------------

/* The penalised logit of a token that occurs n > 0 times in the window. As llama.cpp: a
 * positive logit is divided by repeat_penalty and a negative one multiplied, so both become less
 * likely (a plain division would favour negative ones); then the OpenAI-style penalties. */
static inline float penalize(const sampler_params *p, float l, int n) {
    if (p->repeat_penalty != 1.0f) l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
    return l - ((float)n * p->frequency_penalty + p->presence_penalty);
}

static void apply_penalties(const sampler *s, cand *c) {
    for (int i = 0; i < s->n_seen; i++) {
        int32_t id = s->seen[i];
        c[id].logit = penalize(&s->params, c[id].logit, s->count[id]);
    }
}

void sampler_adjust_logits(const sampler *s, float *logits) {
    if (s->penalize)
        for (int i = 0; i < s->n_seen; i++) {
            int32_t id = s->seen[i];
            logits[id] = penalize(&s->params, logits[id], s->count[id]);
        }
    for (int i = 0; i < s->params.n_bias; i++) logits[s->bias[i].id] += s->bias[i].bias;
}

/* typical-p's order: closer to the entropy first (the distance is in p), then lower id. */
static int cmp_typical(const void *x, const void *y) {
    const cand *a = x, *b = y;
    if (a->p != b->p) return a->p < b->p ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* typical-p (locally typical sampling, Meister et al. 2022): keep the tokens whose surprisal
 * -log p is closest to the entropy of the distribution, until their mass reaches typical_p.
 * Returns the new n (at least 1). */
static int apply_typical(cand *c, int n, float typical_p) {
    float max = c[argmax(c, n)].logit;
    double sum = exp_shifted(c, n, max, 1.0f);
    double log_sum = log(sum);
    double entropy = 0;
    for (int i = 0; i < n; i++) {
        double prob = c[i].p / sum;
        if (prob > 0) entropy -= prob * log(prob);
    }
    for (int i = 0; i < n; i++) {
        double surprisal = log_sum - (double)(c[i].logit - max);
        c[i].p = (float)fabs(surprisal - entropy);
    }
    qsort(c, (size_t)n, sizeof(*c), cmp_typical);
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += exp((double)(c[i].logit - max)) / sum;
        if (cum >= typical_p) return i + 1;
    }
    return n;
}

int32_t sampler_sample(sampler *s, const float *logits) {
    const sampler_params *p = &s->params;
    cand *c = s->cand;
    int n = s->n_vocab;
    for (int i = 0; i < n; i++) {
        c[i].id = i;
        c[i].logit = isnan(logits[i]) ? -INFINITY : logits[i];
    }
    if (s->penalize) apply_penalties(s, c);
    for (int i = 0; i < p->n_bias; i++) c[s->bias[i].id].logit += s->bias[i].bias;

    /* Drop banned (-inf) tokens. If some logit is +inf, only those remain, as equals. */
    float max = -INFINITY;
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].logit == -INFINITY) continue;
        if (c[i].logit > max) max = c[i].logit;
        c[m++] = c[i];
    }
    n = m;
    if (n == 0) return s->fallback;
    if (isinf(max)) {
        m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].logit == INFINITY) c[m++] = (cand){c[i].id, 0.0f, 0.0f};
        n = m;
    }

    if (p->temperature == 0.0f) return c[argmax(c, n)].id;

    /* c[0..sorted) are the best candidates in order; later steps extend that prefix lazily. */
    int sorted = 0;
    if (p->top_k > 0 && p->top_k < n) {
        select_best(c, n, p->top_k);
        n = p->top_k;
    }
    if (p->typical_p < 1.0f) n = apply_typical(c, n, p->typical_p);
    if (p->top_p < 1.0f && n > 1) {
        double sum = exp_shifted(c, n, c[argmax(c, n)].logit, 1.0f);
        double target = (double)p->top_p * sum, cum = 0;
        int keep = n; /* if rounding keeps cum below target, everything stays */
        /* Sort blocks of growing size until their mass reaches top_p: a peaked distribution
         * needs one small block, a flat one a few passes of O(n) each. */
        for (int block = 64, i = 0; i < n; block = block < n / 4 ? block * 4 : n) {
            sort_prefix(c, n, sorted, block);
            sorted = block < n ? block : n;
            for (; i < sorted && cum < target; i++) cum += c[i].p;
            if (cum >= target) {
                keep = i;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f && n > 1) {
        /* p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p). */
        float top = c[argmax(c, n)].logit;
        float threshold = top + logf(p->min_p);
        m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].logit >= threshold) c[m++] = c[i];
        n = m;
    }

    if (n == 1) {
        (void)rng_next(&s->rng); /* one draw per sample at temperature > 0, whatever survives */
        return c[0].id;
    }
    float top = c[argmax(c, n)].logit;
    double sum = exp_shifted(c, n, top, 1.0f / p->temperature);
    double u = rng_uniform(&s->rng) * sum, cum = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].p <= 0) continue;
        last = i;
        cum += c[i].p;
        if (u < cum) return c[i].id;
    }
    return c[last].id; /* u rounded up to the full sum */
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
    cand best[SAMPLER_MAX_TOP_LOGPROBS];
    int n_best = 0;
    float max = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
        float l = isnan(logits[i]) ? -INFINITY : logits[i];
        if (l > max) max = l;
        if (top_n == 0) continue;
        cand x = {i, l, 0};
        if (n_best == top_n && !better(&x, &best[n_best - 1])) continue;
        int j = n_best < top_n ? n_best++ : n_best - 1;
        while (j > 0 && better(&x, &best[j - 1])) {
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
        double sum = 0;
        for (int i = 0; i < n_vocab; i++)
            if (!isnan(logits[i])) sum += exp((double)logits[i] - max);
        log_z = max + log(sum);
    }
    if (chosen_out) *chosen_out = (token_logprob){chosen, logprob_of(logits[chosen], log_z, n_inf)};
    for (int i = 0; i < top_n; i++) {
        if (i < n_best) top_out[i] = (token_logprob){best[i].id, logprob_of(best[i].logit, log_z, n_inf)};
        else top_out[i] = (token_logprob){-1, -INFINITY};
    }
}
