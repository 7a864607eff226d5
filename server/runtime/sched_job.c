/*
 * sched_job.c — a scheduler job's life and its readers (see scheduler.h): creation from a spec,
 * references, cancellation, and the reader's side (sched_job_wait, sched_job_output). The
 * scheduler thread fills the job in (scheduler.c); both sides meet under the job's mutex.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched_internal.h"

static void *alloc_n(size_t n, size_t size) { return malloc((n ? n : 1) * size); }

attnd_status sched_job_create(sched_job **out, sched_job_spec *spec, attnd_err *err) {
    *out = NULL;
    sched_job *j = calloc(1, sizeof(*j));
    if (!j) {
        free(spec->prompt);
        free(spec->bias);
        for (int i = 0; i < spec->n_stops; i++) free(spec->stops[i]);
        free(spec->stops), attn_capture_destroy(spec->capture), free(spec->ablate);
        grammar_unref(spec->grammar);
        spec->prompt = NULL, spec->bias = NULL, spec->stops = NULL, spec->capture = NULL, spec->grammar = NULL;
        spec->ablate = NULL;
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancel, false);
    /* the stolen parts first: unref frees them on every path below */
    j->prompt = spec->prompt, j->n_prompt = spec->n_prompt;
    j->bias = spec->bias;
    j->stops = spec->stops, j->n_stops = spec->n_stops, j->capture = spec->capture;
    j->grammar = spec->grammar;
    j->ablate = spec->ablate, j->n_ablate = spec->ablate ? spec->n_ablate : 0;
    spec->prompt = NULL, spec->bias = NULL, spec->stops = NULL, spec->capture = NULL, spec->grammar = NULL;
    spec->ablate = NULL;
    j->sp = spec->sp;
    j->sp.bias = j->bias;
    j->sp.n_bias = j->bias ? spec->n_bias : 0;
    j->max_tokens = spec->max_tokens;
    j->top_logprobs = spec->top_logprobs;
    j->draft_max = spec->draft_max;
    j->draft_min_p = spec->draft_min_p;
    j->prompt_logprobs = spec->prompt_logprobs;
    j->ignore_eos = spec->ignore_eos;
    j->think_budget = spec->think_budget;
    j->think_inside = spec->think_inside;
    j->grammar_close = spec->grammar_close;
    j->api = spec->api >= 0 && spec->api < SCHED_N_APIS ? spec->api : 0;
    j->se = spec->se;
    snprintf(j->owner, sizeof(j->owner), "%s", spec->owner ? spec->owner : "");
    snprintf(j->tenant, sizeof(j->tenant), "%s", spec->tenant ? spec->tenant : "");
    j->tenant_ix = -1;
    snprintf(j->request_id, sizeof(j->request_id), "%.64s", spec->request_id ? spec->request_id : "");
    size_t n_prompt = (size_t)(j->n_prompt > 0 ? j->n_prompt : 0), n_gen = (size_t)(j->max_tokens > 0 ? j->max_tokens : 0);
    size_t top = (size_t)(j->top_logprobs > 0 ? j->top_logprobs : 0);
    j->pieces = alloc_n(n_gen, sizeof(token_logprob));
    bool ok = j->prompt && j->pieces && buf_reserve(&j->text, 256);
    if (top) ok = ok && (j->tops = alloc_n(n_gen * top, sizeof(token_logprob)));
    if (j->prompt_logprobs) {
        ok = ok && (j->prompt_lp = alloc_n(n_prompt, sizeof(float)));
        if (top) ok = ok && (j->prompt_tops = calloc(n_prompt ? n_prompt * top : 1, sizeof(token_logprob)));
    }
    if (!ok) {
        sched_job_unref(j);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    *out = j;
    return ATTND_OK;
}

void sched_job_ref(sched_job *j) { atomic_fetch_add(&j->refs, 1); }

void sched_job_unref(sched_job *j) {
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    for (sched_job *f = j->forks, *next; f; f = next) { /* never submitted: the forks go too */
        next = f->next;
        sched_job_unref(f);
    }
    kv_seq_destroy(j->fork_kv);
    free(j->first_logits);
    free(j->prompt);
    free(j->bias);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->stops);
    buf_free(&j->text);
    free(j->pieces);
    free(j->tops);
    free(j->prompt_lp);
    free(j->prompt_tops), attn_capture_destroy(j->capture), free(j->ablate);
    grammar_unref(j->grammar);
    buf_free(&j->rd);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

bool sched_job_cancel(sched_job *j) { return atomic_exchange(&j->cancel, true); }

/* Moves what is new past the reader's cursor into *u (caller holds j->mu). */
static bool job_take_news(sched_job *j, sched_update *u) {
    size_t n = j->text.len - j->rd_text;
    buf_clear(&j->rd);
    if (!buf_append(&j->rd, j->text.p + j->rd_text, n)) n = 0; /* out of memory: handed out next time */
    *u = (sched_update){j->rd.p ? j->rd.p : "", n, j->rd_pieces, j->n_pieces, j->done};
    j->rd_text += n;
    j->rd_pieces = j->n_pieces;
    return n || u->from < u->to || j->done;
}

bool sched_job_wait(sched_job *j, int timeout_ms, sched_update *u) {
    struct timespec ts;
    attnd_deadline(&ts, timeout_ms);
    pthread_mutex_lock(&j->mu);
    bool news;
    while (!(news = job_take_news(j, u)) && timeout_ms > 0)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) != 0) {
            news = job_take_news(j, u);
            break;
        }
    pthread_mutex_unlock(&j->mu);
    return news;
}

void sched_job_output(sched_job *j, sched_output *o) {
    pthread_mutex_lock(&j->mu);
    *o = (sched_output){
        .prompt = j->prompt, .n_prompt = j->n_prompt,
        .pieces = j->pieces, .n_pieces = j->n_pieces,
        .tops = j->tops, .top_logprobs = j->top_logprobs,
        .prompt_lp = j->prompt_lp, .prompt_tops = j->prompt_tops,
        .text = j->done ? j->text.p : NULL, .text_len = j->done ? j->text.len : 0,
        .done = j->done, .finish_reason = j->finish_reason, .status = j->status, .errmsg = j->errmsg,
        .n_cached = j->n_cached, .n_generated = j->n_generated,
        .prompt_ms = j->prompt_ms, .gen_ms = j->gen_ms, .capture = j->capture,
    };
    pthread_mutex_unlock(&j->mu);
}

void sched_job_append_text(sched_job *j, const char *p, size_t n) { (void)buf_append(&j->text, p, n); }


/* A copy of n strings (and the array); NULL when out of memory. */
static char **dup_strings(char *const *v, int n) {
    char **c = calloc((size_t)n + 1, sizeof(char *));
    for (int i = 0; c && i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            while (i--) free(c[i]);
            free(c);
            return NULL;
        }
    return c;
}

attnd_status sched_job_fork(sched_job **out, sched_job *parent, uint64_t seed, attnd_err *err) {
    *out = NULL;
    ATTND_ASSERT(!parent->is_fork && !parent->prompt_logprobs && !parent->n_ablate);
    sched_job_spec spec = {
        .prompt = malloc((size_t)(parent->n_prompt ? parent->n_prompt : 1) * sizeof(int32_t)),
        .n_prompt = parent->n_prompt, .sp = parent->sp, .n_bias = parent->sp.n_bias,
        .stops = dup_strings(parent->stops, parent->n_stops), .n_stops = parent->n_stops,
        .max_tokens = parent->max_tokens, .top_logprobs = parent->top_logprobs, .draft_max = parent->draft_max, .owner = parent->owner,
        .draft_min_p = parent->draft_min_p, .ignore_eos = parent->ignore_eos,
        .think_budget = parent->think_budget, .think_inside = parent->think_inside, .api = parent->api,
        .grammar_close = parent->grammar_close,
        .tenant = parent->tenant,
        .grammar = parent->grammar ? grammar_ref(parent->grammar) : NULL,
    };
    spec.sp.seed = seed;
    if (spec.n_bias && (spec.bias = malloc((size_t)spec.n_bias * sizeof(logit_bias))))
        memcpy(spec.bias, parent->bias, (size_t)spec.n_bias * sizeof(logit_bias));
    if (spec.prompt) memcpy(spec.prompt, parent->prompt, (size_t)parent->n_prompt * sizeof(int32_t));
    if (!spec.prompt || !spec.stops || (spec.n_bias && !spec.bias)) {
        free(spec.prompt);
        free(spec.bias);
        for (int i = 0; spec.stops && i < spec.n_stops; i++) free(spec.stops[i]);
        free(spec.stops);
        grammar_unref(spec.grammar);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    sched_job *c;
    attnd_status rc = sched_job_create(&c, &spec, err);
    if (rc != ATTND_OK) return rc;
    c->is_fork = true;
    /* the parent's reference: it hands the fork to the scheduler when its prompt is read */
    sched_job_ref(c);
    sched_job **tail = &parent->forks;
    while (*tail) tail = &(*tail)->next;
    *tail = c;
    *out = c;
    return ATTND_OK;
}
