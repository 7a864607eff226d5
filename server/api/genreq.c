/*
 * genreq.c — the generation request (see genreq.h): a request's prompts become scheduler jobs,
 * and the request waits for them. Completions, the Responses API and attention are its users.
 * It never calls the engine, never touches a job's insides and knows no HTTP.
 */
#include "genreq.h"

#include "ablate_api.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reasoning.h"

/* Fills *e (fail, st, param, a printf message); returns st. */
static attnd_status fail(genreq_err *e, genreq_fail kind, attnd_status st, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static attnd_status fail(genreq_err *e, genreq_fail kind, attnd_status st, const char *param, const char *fmt, ...) {
    *e = (genreq_err){.fail = kind, .st = st, .param = param};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return st;
}

// ---- lifecycle ----------------------------------------------------------------------------

genreq *genreq_create(const genreq_env *env, const genreq_who *who) {
    genreq *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->env = *env;
    g->who = *who;
    snprintf(g->owner, sizeof(g->owner), "%s", who->owner ? who->owner : "");
    snprintf(g->request_id, sizeof(g->request_id), "%s", who->request_id ? who->request_id : "");
    snprintf(g->tenant, sizeof(g->tenant), "%s", who->tenant ? who->tenant : "");
    g->who.owner = g->owner, g->who.request_id = g->request_id, g->who.tenant = g->tenant;
    return g;
}

void genreq_destroy(genreq *g) {
    if (!g) return;
    sched_job_unref(g->job);
    for (int k = 0; k < g->n_extra; k++) sched_job_unref(g->extra[k]);
    free(g->extra);
    oai_request_free(&g->oreq);
    json_decref(g->body);
    free(g);
}

void genreq_cancel(genreq *g) {
    for (int k = 0; k < genreq_n_jobs(g); k++) sched_job_cancel(genreq_job(g, k));
    g->cancelled = true;
}

int genreq_end(genreq *g, bool completed, const char *what) {
    if (!g->job) return 0;
    if (!completed || g->cancelled) {
        bool fresh = false; /* a job this cancels (not cancelled before) */
        for (int k = 0; k < genreq_n_jobs(g); k++) fresh = !sched_job_cancel(genreq_job(g, k)) || fresh;
        if (fresh || g->cancelled) slog_info("client disconnected from %s; sequence cancelled", what);
        g->cancelled = true;
    }
    sched_output o;
    int n_gen = 0;
    for (int k = 0; k < genreq_n_jobs(g); k++) {
        sched_job_output(genreq_job(g, k), &o);
        n_gen += o.n_generated;
    }
    sched_job_output(g->job, &o); /* only choice 0 runs on the named session */
    if (g->sess_id[0] && o.done) {
        attnd_err err;
        if (sess_persist_turn(g->env.store, g->owner, g->sess_id, g->sess_turn, NULL, &err) != ATTND_OK &&
            !g->unsaved.fail)
            slog_error("%s", err.msg);
    }
    return n_gen;
}

// ---- the steps ----------------------------------------------------------------------------

const char *genreq_prompt_param(const genreq *g) {
    return g->prompt_param ? g->prompt_param : g->chat ? "messages" : "prompt";
}

void genreq_view(const sched_output *o, completion_body_gen *out) {
    *out = (completion_body_gen){
        .text = o->text ? o->text : "", .text_len = o->text_len,
        .pieces = o->pieces, .n_pieces = o->n_pieces,
        .tops = o->tops, .top_logprobs = o->top_logprobs,
        .prompt = o->prompt, .n_prompt = o->n_prompt,
        .prompt_lp = o->prompt_lp, .prompt_tops = o->prompt_tops,
        .finish_reason = o->finish_reason,
        .n_cached = o->n_cached, .n_generated = o->n_generated,
        .prompt_ms = o->prompt_ms, .gen_ms = o->gen_ms, .n_reasoning = -1,
    };
}

/* The tokens of prompt p: the chat template, a text prompt or token ids. */
static attnd_status prompt_tokens(genreq *g, int p, int32_t **ids, size_t *n, attnd_err *err) {
    const oai_request *q = &g->oreq;
    *ids = NULL, *n = 0;
    /* chat: only the template's markers are special tokens, never the messages' content */
    if (g->chat) {
        /* a template that shows tools gets them and the tool turns as sent; the others the
         * Hermes description and the turns written out (oai.h's fmsgs), the format the
         * forcing grammar and the parser share */
        chat_request cr;
        bool opens = false;
        oai_chat_input(q, &cr);
        cr.opens_reasoning = &opens;
        attnd_status st = chat_template_encode(g->env.chat, g->env.tok, &cr, ids, n, err);
        if (st == ATTND_OK && opens) st = oai_open_reasoning(&g->oreq, err);
        return st;
    }
    const oai_prompt *pr = &q->prompts[p];
    if (pr->text) return tok_encode(g->env.tok, pr->text, strlen(pr->text), true, true, ids, n, err);
    *ids = malloc((size_t)(pr->n_ids ? pr->n_ids : 1) * sizeof(int32_t));
    if (!*ids) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    *n = (size_t)pr->n_ids;
    memcpy(*ids, pr->ids, *n * sizeof(int32_t));
    return ATTND_OK;
}

attnd_status genreq_prompt_tokens(genreq *g, int p, int32_t **ids, size_t *n, genreq_err *e) {
    attnd_err err;
    attnd_status st = prompt_tokens(g, p, ids, n, &err);
    if (st == ATTND_OK) return ATTND_OK;
    free(*ids);
    *ids = NULL;
    /* whatever went wrong, it was this request's prompt that could not be read */
    return fail(e, GENREQ_BAD_REQUEST, ATTND_ERR_INVALID, genreq_prompt_param(g), "%s", err.msg);
}

attnd_status genreq_fit_context(genreq *g, size_t n, int *max_tokens, genreq_err *e) {
    int n_ctx = g->env.n_ctx, need = g->oreq.max_tokens == 0 ? 0 : 1;
    const char *pname = genreq_prompt_param(g);
    *max_tokens = -1;
    if (n == 0) return fail(e, GENREQ_BAD_REQUEST, ATTND_ERR_INVALID, pname, "the prompt is empty (no tokens)");
    if (n + (size_t)need > (size_t)n_ctx) {
        fail(e, GENREQ_TOO_LONG, ATTND_ERR_INVALID, pname,
             "This model's maximum context length is %d tokens, but the prompt is %lld tokens and %d more must "
             "remain for the completion. Shorten the prompt.",
             n_ctx, (long long)n, need);
        e->code = "context_length_exceeded";
        return e->st;
    }
    int room = n_ctx - (int)n;
    int want = g->oreq.max_tokens >= 0 ? g->oreq.max_tokens : g->env.cfg->default_max_tokens;
    *max_tokens = want > room ? room : want;
    return ATTND_OK;
}

attnd_status genreq_acquire_session(genreq *g, sess **se, genreq_err *e) {
    const char *id = g->oreq.session_id;
    *se = NULL;
    if (!id) return ATTND_OK;
    if (!sess_id_valid(id))
        return fail(e, GENREQ_BAD_REQUEST, ATTND_ERR_INVALID, "session_id",
                    "'session_id' must be 1..64 characters of A-Z a-z 0-9 . _ -");
    attnd_err err;
    attnd_status st = sess_acquire(g->env.store, g->owner, id, se, &err);
    if (st != ATTND_OK) {
        /* behind a proxy that routes by session (deploy/nginx), an id only in the body cannot be
         * seen, so the turn may reach an instance that never had the session: said only where
         * instances share sessions (a store) or a proxy sent the header */
        const char *hdr = g->who.session_header, *shared = g->env.cfg ? g->env.cfg->session_store : NULL;
        char home[128];
        if (st == ATTND_ERR_NOT_FOUND && g->session_home && g->session_home(g->home_user, g->owner, id, home, sizeof(home)))
            return fail(e, GENREQ_SESSION, ATTND_ERR_BUSY, "session_id", /* a 409, as a chain of another model's */
                        "session '%.64s' belongs to model '%.100s', not '%.100s': a session is its model's; "
                        "continue it with \"model\": \"%.100s\"", id, home, g->env.model_id, home);
        fail(e, GENREQ_SESSION, st, "session_id", "%s", err.msg);
        if (st == ATTND_ERR_NOT_FOUND) {
            size_t n = strlen(e->msg);
            n += (size_t)snprintf(e->msg + n, sizeof(e->msg) - n,
                                  "; create it first with POST /v1/sessions {\"id\": \"%.64s\"}", id);
            if (n < sizeof(e->msg) && ((shared && *shared) || hdr) && !(hdr && !strcmp(hdr, id)))
                snprintf(e->msg + n, sizeof(e->msg) - n,
                         "; behind a load balancer, send the id in the X-Session-Id header too, so that every "
                         "turn reaches the instance holding the session");
        }
        return st;
    }
    snprintf(g->sess_id, sizeof(g->sess_id), "%s", id);
    g->sess_turn = (*se)->turn; /* set by sess_acquire, which only this request can call now */
    return ATTND_OK;
}

/* The job spec for one choice: the prompt (stolen), sampling with the choice's seed, and copies
 * of the request's stops and bias; chat adds the template's end-of-turn marker as a stop string.
 * false: out of memory (ids freed). */
static bool job_spec(genreq *g, int32_t *ids, size_t n, int max_tokens, sess *se, uint64_t seed,
                     sched_job_spec *spec) {
    const oai_request *q = &g->oreq;
    *spec = (sched_job_spec){
        .prompt = ids, .n_prompt = (int)n, .sp = q->sp, .n_bias = q->n_bias, .max_tokens = max_tokens,
        .top_logprobs = q->logprobs, .draft_max = q->draft_max, .draft_min_p = q->draft_min_p,
        .prompt_logprobs = !g->chat && q->echo && q->logprobs >= 0, .ignore_eos = q->ignore_eos, .se = se,
        .think_budget = q->reasoning_budget, .think_inside = q->open_reasoning, .api = g->api,
        .grammar_close = q->grammar_close,
        .owner = g->owner, .request_id = g->request_id, .tenant = g->tenant,
        .grammar = q->grammar ? grammar_ref(q->grammar) : NULL,
    };
    spec->sp.seed = seed;
    bool ok = true;
    if (q->n_bias && (ok = (spec->bias = malloc((size_t)q->n_bias * sizeof(*q->bias)))))
        memcpy(spec->bias, q->bias, (size_t)q->n_bias * sizeof(*q->bias));
    if (ok) ok = (spec->stops = calloc((size_t)q->n_stops + 1, sizeof(char *))) != NULL;
    if (ok && q->n_ablate && (ok = (spec->ablate = malloc(sizeof(*q->ablate) * (size_t)q->n_ablate)))) {
        memcpy(spec->ablate, q->ablate, sizeof(*q->ablate) * (size_t)q->n_ablate);
        spec->n_ablate = q->n_ablate;
    }
    for (int i = 0; ok && i < q->n_stops; i++) ok = (spec->stops[spec->n_stops++] = strdup(q->stops[i])) != NULL;
    /* the turn's end marker stops generation even where the vocabulary spells it as text */
    if (ok && g->chat && !q->ignore_eos) ok = (spec->stops[spec->n_stops++] = strdup(chat_end_marker(g->env.chat->family))) != NULL;
    if (ok) return true;
    free(ids);
    free(spec->bias);
    for (int i = 0; spec->stops && i < spec->n_stops; i++) free(spec->stops[i]);
    free(spec->stops);
    free(spec->ablate);
    grammar_unref(spec->grammar);
    return false;
}

/* Builds choice k's job into its place in g (g->job or g->extra). On failure the session, if
 * any, is given back. */
static attnd_status make_job(genreq *g, int k, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap,
                             genreq_err *e) {
    sched_job_spec spec;
    attnd_err err;
    sched_job *j = NULL;
    attnd_status st;
    uint64_t seed = sampler_seed_stream(g->oreq.sp.seed, k % g->oreq.n);
    if (!job_spec(g, ids, n, max_tokens, se, seed, &spec)) {
        attn_capture_destroy(cap);
        st = attnd_fail(&err, ATTND_ERR_NOMEM, "out of memory");
    } else if ((spec.capture = cap), (st = sched_job_create(&j, &spec, &err)) == ATTND_OK) {
        if (k == 0) g->job = j;
        else g->extra[g->n_extra++] = j;
        return ATTND_OK;
    }
    if (se) sess_abandon(g->env.store, se);
    return fail(e, GENREQ_OVERLOADED, ATTND_ERR_NOMEM, NULL, "%s", err.msg);
}

/* Whether the n choices of a prompt fork its first job (they read the prompt once and share its
 * KV blocks), rather than run as separate jobs: where every prompt position's logits are wanted
 * (echo with logprobs) they cannot. */
static bool choices_fork(const genreq *g) { return !(!g->chat && g->oreq.echo && g->oreq.logprobs >= 0); }

/* The n - 1 other choices of the prompt whose first choice is k0 (ids: a copy of its prompt,
 * borrowed, for separate jobs). */
static attnd_status make_siblings(genreq *g, int k0, const int32_t *ids, size_t n, int max_tokens, genreq_err *e) {
    const oai_request *q = &g->oreq;
    sched_job *parent = genreq_job(g, k0);
    attnd_err err;
    attnd_status st;
    for (int i = 1; i < q->n; i++) {
        if (!choices_fork(g)) {
            int32_t *copy = malloc(n * sizeof(int32_t));
            if (!copy) return fail(e, GENREQ_OVERLOADED, ATTND_ERR_NOMEM, NULL, "out of memory");
            memcpy(copy, ids, n * sizeof(int32_t));
            if ((st = make_job(g, k0 + i, copy, n, max_tokens, NULL, NULL, e)) != ATTND_OK) return st;
            continue;
        }
        if ((st = sched_job_fork(&g->extra[g->n_extra], parent, sampler_seed_stream(q->sp.seed, i), &err)) != ATTND_OK)
            return fail(e, GENREQ_OVERLOADED, ATTND_ERR_NOMEM, NULL, "%s", err.msg);
        g->n_extra++;
    }
    return ATTND_OK;
}

/* Submits choice k's job (forks go with their parent). */
static attnd_status submit(genreq *g, int k, sess *se, genreq_err *e) {
    attnd_err err;
    attnd_status rc = sched_submit(g->env.sch, genreq_job(g, k), &err);
    if (rc == ATTND_OK) return ATTND_OK;
    if (se) sess_abandon(g->env.store, se);
    /* INVALID: its KV could never fit the budget; else the queue is full */
    const char *param = rc == ATTND_ERR_INVALID ? "max_tokens" : NULL;
    if (g->env.stopping && atomic_load(g->env.stopping)) return fail(e, GENREQ_STOPPING, rc, param, "%s", err.msg);
    if (rc == ATTND_ERR_INVALID) return fail(e, GENREQ_BAD_REQUEST, rc, param, "%s", err.msg);
    return fail(e, GENREQ_OVERLOADED, ATTND_ERR_BUSY, NULL, "%s", err.msg);
}

attnd_status genreq_submit(genreq *g, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap,
                           genreq_err *e) {
    attnd_status st = make_job(g, 0, ids, n, max_tokens, se, cap, e);
    return st != ATTND_OK ? st : submit(g, 0, se, e);
}

static bool special_bytes(void *user, int32_t id, const char **p, size_t *n) {
    return tok_token_bytes((const tokenizer *)user, id, true, p, n);
}

int genreq_reasoning_tokens(const genreq *g, const sched_output *o) {
    int n = o->n_pieces;
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof(*ids));
    if (!ids) return 0;
    for (int i = 0; i < n; i++) ids[i] = o->pieces[i].id;
    int count = reasoning_count_tokens(ids, n, g->oreq.open_reasoning, g->oreq.think_to_call, special_bytes, (void *)g->env.tok);
    free(ids);
    return count;
}

void genreq_usage_sum(const genreq *g, completion_body_gen *sum) {
    *sum = (completion_body_gen){.n_reasoning = g->chat ? 0 : -1};
    for (int k = 0; k < genreq_n_jobs(g); k++) {
        sched_output o;
        sched_job_output(genreq_job(g, k), &o);
        if (k % g->oreq.n == 0) { /* n choices of one prompt read it once */
            sum->n_prompt += o.n_prompt;
            sum->n_cached += o.n_cached;
        }
        sum->n_generated += o.n_generated;
        if (g->chat) sum->n_reasoning += genreq_reasoning_tokens(g, &o);
    }
}

bool genreq_persist(genreq *g) {
    if (!g->sess_id[0]) return true;
    if (g->unsaved.fail) return false;
    attnd_err err;
    int e = 0;
    attnd_status st = sess_persist_turn(g->env.store, g->owner, g->sess_id, g->sess_turn, &e, &err);
    if (st == ATTND_OK) return true;
    slog_error("%s", err.msg);
    if (st == ATTND_ERR_BUSY || st == ATTND_ERR_NOT_FOUND || (st == ATTND_ERR_IO && !e)) {
        /* the shared store: another turn saved first (BUSY), or it is unreachable (IO) */
        fail(&g->unsaved, GENREQ_UNSAVED, st == ATTND_ERR_IO ? ATTND_ERR_IO : ATTND_ERR_BUSY, "session_id", "%.199s",
             err.msg);
        return false;
    }
    fail(&g->unsaved, GENREQ_UNSAVED, ATTND_ERR_IO, "session_id",
         "session '%s' could not be saved (%.60s): this turn is not part of it; retry later", g->sess_id,
         e ? strerror(e) : err.msg);
    g->unsaved.no_space = e == ENOSPC || e == EDQUOT;
    return false;
}

bool genreq_wait_all(genreq *g) {
    for (int k = 0; k < genreq_n_jobs(g); k++) {
        sched_update u;
        do {
            while (!sched_job_wait(genreq_job(g, k), 100, &u))
                if (g->who.client_gone && g->who.client_gone(g->who.user)) {
                    genreq_cancel(g);
                    return false;
                }
        } while (!u.done);
    }
    genreq_persist(g); /* durable before the response is sent */
    return true;
}

attnd_status genreq_check_ablate(genreq *g, genreq_err *e) {
    const oai_request *q = &g->oreq;
    attnd_err err;
    if (!q->n_ablate) return ATTND_OK;
    if (ablate_api_check(model_info_get(g->env.m), q->ablate, q->n_ablate, &err) != ATTND_OK)
        return fail(e, GENREQ_BAD_REQUEST, ATTND_ERR_INVALID, "ablate", "%s", err.msg);
    if (q->session_id)
        return fail(e, GENREQ_BAD_REQUEST, ATTND_ERR_INVALID, "ablate",
                    "'ablate' cannot be combined with 'session_id': an ablated sequence's KV never enters a session or "
                    "the prompt cache");
    if (q->n > 1) return fail(e, GENREQ_BAD_REQUEST, ATTND_ERR_INVALID, "n", "'ablate' takes one choice: 'n' must be 1");
    return ATTND_OK;
}

/* The checks of the whole request before any prompt is read. */
static attnd_status check_request(genreq *g, int n_prompts, int n_choices, genreq_err *e) {
    const oai_request *q = &g->oreq;
    attnd_err err;
    attnd_status st = genreq_check_ablate(g, e);
    if (st != ATTND_OK) return st;
    if (q->grammar && g->env.tok && grammar_check_tokenizer(q->grammar, g->env.tok, &err) != ATTND_OK) /* its token terminals */
        return fail(e, GENREQ_BAD_REQUEST, ATTND_ERR_INVALID, q->format == OAI_FORMAT_TOOL_CALL ? "tool_choice" : "grammar",
                    "%s", err.msg);
    if (q->session_id && n_prompts > 1)
        return fail(e, GENREQ_BAD_REQUEST, ATTND_ERR_INVALID, "session_id", "'session_id' works with one prompt, not a list");
    if (n_choices > 1 && !(g->extra = calloc((size_t)n_choices - 1, sizeof(*g->extra))))
        return fail(e, GENREQ_OVERLOADED, ATTND_ERR_NOMEM, NULL, "out of memory");
    return ATTND_OK;
}

/* Prompt p's n choices: its first job (on the session for prompt 0), its siblings, submitted. */
static attnd_status submit_prompt(genreq *g, int p, genreq_err *e) {
    const oai_request *q = &g->oreq;
    int k0 = p * q->n, max_tokens;
    int32_t *ids;
    size_t n;
    sess *se = NULL;
    attnd_status st = genreq_prompt_tokens(g, p, &ids, &n, e);
    if (st == ATTND_OK) st = genreq_fit_context(g, n, &max_tokens, e);
    if (st == ATTND_OK && p == 0) st = genreq_acquire_session(g, &se, e);
    if (st != ATTND_OK) {
        free(ids);
        return st;
    }
    g->n_prompt += (int)n;
    bool fork = choices_fork(g);
    int32_t *copy = q->n > 1 && !fork ? malloc(n * sizeof(int32_t)) : NULL;
    if (copy) memcpy(copy, ids, n * sizeof(int32_t));
    else if (q->n > 1 && !fork) {
        free(ids);
        if (se) sess_abandon(g->env.store, se);
        return fail(e, GENREQ_OVERLOADED, ATTND_ERR_NOMEM, NULL, "out of memory");
    }
    if ((st = make_job(g, k0, ids, n, max_tokens, se, NULL, e)) != ATTND_OK) {
        free(copy);
        return st;
    }
    st = make_siblings(g, k0, copy, n, max_tokens, e);
    free(copy);
    if (st != ATTND_OK) {
        if (se) sess_abandon(g->env.store, se);
        return st;
    }
    for (int i = 0; i < q->n; i++)
        if ((i == 0 || !fork) && (st = submit(g, k0 + i, i == 0 ? se : NULL, e)) != ATTND_OK) return st;
    return ATTND_OK;
}

attnd_status genreq_submit_all(genreq *g, genreq_err *e) {
    const oai_request *q = &g->oreq;
    int n_prompts = g->chat ? 1 : q->n_prompts;
    attnd_status st = check_request(g, n_prompts, n_prompts * q->n, e);
    for (int p = 0; st == ATTND_OK && p < n_prompts; p++) st = submit_prompt(g, p, e);
    if (st == ATTND_OK) return ATTND_OK;
    /* an error answer ends the request: what was already submitted stops too */
    for (int k = 0; k < genreq_n_jobs(g); k++) sched_job_cancel(genreq_job(g, k));
    return st;
}

bool genreq_shut_down(const genreq *g, const sched_output *o) {
    return o->status == ATTND_ERR_BUSY && g->env.stopping && atomic_load(g->env.stopping);
}

bool genreq_was_cut(const genreq *g, const sched_output *o) { return o->status == ATTND_ERR_BUSY && !genreq_shut_down(g, o); }
