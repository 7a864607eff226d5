/*
 * genreq.c — the generation request (see genreq.h): a request's prompts become scheduler jobs,
 * and the request waits for them. Completions, the Responses API and attention are its peers.
 * It never calls the engine and never touches a job's insides.
 */
#include "genreq.h"

#include "ablate_api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reasoning.h"
#include "slog.h"

const char *genreq_prompt_param(const req *r) {
    return r->prompt_param ? r->prompt_param : r->chat ? "messages" : "prompt";
}

void genreq_view(const sched_output *o, oai_gen *g) {
    *g = (oai_gen){
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

/* The tokens of prompt p into *ids (owned by the caller): the chat template, a text prompt or
 * token ids. */
attnd_status genreq_prompt_tokens(req *r, int p, int32_t **ids, size_t *n, attnd_err *err) {
    struct server *s = r->srv;
    const oai_request *q = &r->oreq;
    *ids = NULL, *n = 0;
    /* chat: only the template's markers are special tokens, never the messages' content */
    if (r->chat) {
        /* a template that shows tools gets them and the tool turns as sent; the others the
         * Hermes description and the turns written out (oai.h's fmsgs), the format the
         * forcing grammar and the parser share */
        chat_request cr;
        bool opens = false;
        oai_chat_input(q, &cr);
        cr.opens_reasoning = &opens;
        attnd_status st = chat_template_encode(&s->chat, s->tok, &cr, ids, n, err);
        if (st == ATTND_OK && opens) st = oai_open_reasoning(&r->oreq, err);
        return st;
    }
    const oai_prompt *pr = &q->prompts[p];
    if (pr->text) return tok_encode(s->tok, pr->text, strlen(pr->text), true, true, ids, n, err);
    *ids = malloc((size_t)(pr->n_ids ? pr->n_ids : 1) * sizeof(int32_t));
    if (!*ids) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    *n = (size_t)pr->n_ids;
    memcpy(*ids, pr->ids, *n * sizeof(int32_t));
    return ATTND_OK;
}

int genreq_fit_context(req *r, size_t n, enum MHD_Result *ret) {
    struct server *s = r->srv;
    const char *pname = genreq_prompt_param(r);
    int need = r->oreq.max_tokens == 0 ? 0 : 1;
    if (n == 0) {
        *ret = http_respond_error(r, 400, "the prompt is empty (no tokens)", pname);
        return -1;
    }
    if (n + (size_t)need > (size_t)s->n_ctx) {
        *ret = http_respond_json(r, 400, oai_error_context_length((long long)n, s->n_ctx, need, pname));
        return -1;
    }
    int room = s->n_ctx - (int)n;
    int max_tokens = r->oreq.max_tokens >= 0 ? r->oreq.max_tokens : s->cfg.default_max_tokens;
    return max_tokens > room ? room : max_tokens;
}

bool genreq_acquire_session(req *r, sess **se, enum MHD_Result *ret) {
    const char *id = r->oreq.session_id;
    *se = NULL;
    if (!id) return true;
    if (!sess_id_valid(id)) {
        *ret = http_respond_error(r, 400, "'session_id' must be 1..64 characters of A-Z a-z 0-9 . _ -", "session_id");
        return false;
    }
    attnd_err err;
    attnd_status st = sess_acquire(r->srv->store, r->owner, id, se, &err);
    if (st != ATTND_OK) {
        /* behind a proxy that routes by session (deploy/nginx), an id only in the body cannot be
         * seen, so the turn may reach an instance that never had the session */
        const char *hdr = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Session-Id");
        if (st == ATTND_ERR_NOT_FOUND && !(hdr && !strcmp(hdr, id))) {
            size_t n = strlen(err.msg);
            snprintf(err.msg + n, sizeof(err.msg) - n,
                     "; behind a load balancer, send the id in the X-Session-Id header too, so that every turn "
                     "reaches the instance holding the session");
        }
        *ret = http_respond_error(r, http_status_of(st, HTTP_CTX_ACQUIRE), err.msg, "session_id");
        return false;
    }
    snprintf(r->sess_id, sizeof(r->sess_id), "%s", id);
    r->sess_turn = (*se)->turn; /* set by sess_acquire, which only this request can call now */
    return true;
}

/* The job spec for one choice: the prompt (stolen), sampling with the choice's seed, and copies
 * of the request's stops and bias; chat adds the template's end-of-turn marker as a stop string.
 * false: out of memory (ids freed). */
static bool job_spec(req *r, int32_t *ids, size_t n, int max_tokens, sess *se, uint64_t seed, sched_job_spec *spec) {
    const oai_request *q = &r->oreq;
    http_tenant(r, r->tenant, sizeof(r->tenant));
    *spec = (sched_job_spec){
        .prompt = ids, .n_prompt = (int)n, .sp = q->sp, .n_bias = q->n_bias, .max_tokens = max_tokens,
        .top_logprobs = q->logprobs, .draft_max = q->draft_max, .draft_min_p = q->draft_min_p, .prompt_logprobs = !r->chat && q->echo && q->logprobs >= 0, .se = se,
        .owner = r->owner, .request_id = r->request_id, .tenant = r->tenant,
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
    if (ok && r->chat) ok = (spec->stops[spec->n_stops++] = strdup(chat_end_marker(r->srv->chat.family))) != NULL;
    if (ok) return true;
    free(ids);
    free(spec->bias);
    for (int i = 0; spec->stops && i < spec->n_stops; i++) free(spec->stops[i]);
    free(spec->stops);
    free(spec->ablate);
    grammar_unref(spec->grammar);
    return false;
}

/* Builds choice k's job into its place in r (r->job or r->extra). false: an error response is
 * queued (the session, if any, is given back). */
static bool make_job(req *r, int k, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap,
                     enum MHD_Result *ret) {
    sched_job_spec spec;
    attnd_err err;
    sched_job *j = NULL;
    uint64_t seed = sampler_seed_stream(r->oreq.sp.seed, k % r->oreq.n);
    if (!job_spec(r, ids, n, max_tokens, se, seed, &spec)) {
        attn_capture_destroy(cap);
        attnd_fail(&err, ATTND_ERR_NOMEM, "out of memory");
    } else if ((spec.capture = cap), sched_job_create(&j, &spec, &err) == ATTND_OK) {
        if (k == 0) r->job = j;
        else r->extra[r->n_extra++] = j;
        return true;
    }
    if (se) sess_abandon(r->srv->store, se);
    *ret = http_respond_error(r, 503, err.msg, NULL);
    return false;
}

/* The n - 1 other choices of the prompt whose first choice is k0: forks of its job, which read
 * the prompt once and share its KV blocks; separate jobs where every prompt position's logits
 * are wanted (echo with logprobs). */
static bool make_siblings(req *r, int k0, int32_t *ids, size_t n, int max_tokens, enum MHD_Result *ret) {
    const oai_request *q = &r->oreq;
    sched_job *parent = req_job(r, k0);
    bool fork = !(!r->chat && q->echo && q->logprobs >= 0);
    attnd_err err;
    for (int i = 1; i < q->n; i++) {
        if (!fork) {
            int32_t *copy = malloc(n * sizeof(int32_t));
            if (copy) memcpy(copy, ids, n * sizeof(int32_t));
            if (copy && make_job(r, k0 + i, copy, n, max_tokens, NULL, NULL, ret)) continue;
            if (!copy) *ret = http_respond_error(r, 503, "out of memory", NULL);
            return false;
        }
        if (sched_job_fork(&r->extra[r->n_extra], parent, sampler_seed_stream(q->sp.seed, i), &err) != ATTND_OK) {
            *ret = http_respond_error(r, 503, err.msg, NULL);
            return false;
        }
        r->n_extra++;
    }
    return true;
}

/* Submits choice k's job (forks go with their parent). */
static bool submit(req *r, int k, sess *se, enum MHD_Result *ret) {
    struct server *s = r->srv;
    attnd_err err;
    attnd_status rc = sched_submit(s->sch, req_job(r, k), &err);
    if (rc == ATTND_OK) return true;
    if (se) sess_abandon(s->store, se);
    /* INVALID: its KV could never fit the budget (400); else the queue is full (429) */
    int code = atomic_load(&s->stopping) ? 503 : rc == ATTND_ERR_INVALID ? 400 : 429;
    *ret = http_respond_error(r, code, err.msg, rc == ATTND_ERR_INVALID ? "max_tokens" : NULL);
    return false;
}

bool genreq_submit(req *r, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap, enum MHD_Result *ret) {
    return make_job(r, 0, ids, n, max_tokens, se, cap, ret) && submit(r, 0, se, ret);
}

static bool special_bytes(void *user, int32_t id, const char **p, size_t *n) {
    return tok_token_bytes((const tokenizer *)user, id, true, p, n);
}

int genreq_reasoning_tokens(const req *r, const sched_output *o) {
    int n = o->n_pieces;
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof(*ids));
    if (!ids) return 0;
    for (int i = 0; i < n; i++) ids[i] = o->pieces[i].id;
    int count = reasoning_count_tokens(ids, n, r->oreq.open_reasoning, special_bytes, (void *)r->srv->tok);
    free(ids);
    return count;
}

void genreq_usage_sum(const req *r, oai_gen *sum) {
    *sum = (oai_gen){.n_reasoning = r->chat ? 0 : -1};
    for (int k = 0; k < req_n_jobs(r); k++) {
        sched_output o;
        sched_job_output(req_job(r, k), &o);
        if (k % r->oreq.n == 0) { /* n choices of one prompt read it once */
            sum->n_prompt += o.n_prompt;
            sum->n_cached += o.n_cached;
        }
        sum->n_generated += o.n_generated;
        if (r->chat) sum->n_reasoning += genreq_reasoning_tokens(r, &o);
    }
}

void genreq_hold_connection(req *r, bool waiting) {
    unsigned t = waiting ? 0u : (unsigned)(r->srv->cfg.request_timeout_s > 0 ? r->srv->cfg.request_timeout_s : 30);
    http_idle_timeout(r, t);
}

bool genreq_persist(req *r) {
    if (!r->sess_id[0]) return true;
    if (r->unsaved) return false;
    attnd_err err;
    int e = 0;
    attnd_status st = sess_persist_turn(r->srv->store, r->owner, r->sess_id, r->sess_turn, &e, &err);
    if (st == ATTND_OK) return true;
    slog_error("%s", err.msg);
    if (st == ATTND_ERR_BUSY || st == ATTND_ERR_NOT_FOUND || (st == ATTND_ERR_IO && !e)) {
        /* the shared store: another turn saved first (409), or it is unreachable (503) */
        r->unsaved = st == ATTND_ERR_IO ? 503 : 409;
        snprintf(r->unsaved_msg, sizeof(r->unsaved_msg), "%.199s", err.msg);
        return false;
    }
    r->unsaved = e == ENOSPC || e == EDQUOT ? 507 : 503;
    snprintf(r->unsaved_msg, sizeof(r->unsaved_msg),
             "session '%s' could not be saved (%.60s): this turn is not part of it; retry later", r->sess_id,
             e ? strerror(e) : err.msg);
    return false;
}

enum MHD_Result genreq_respond_unsaved(req *r) { return http_respond_error(r, r->unsaved, r->unsaved_msg, "session_id"); }

json_t *genreq_unsaved_error(const req *r) { return oai_error(r->unsaved, r->unsaved_msg, "session_id"); }

bool genreq_wait_all(req *r) {
    for (int k = 0; k < req_n_jobs(r); k++) {
        sched_update u;
        do {
            while (!sched_job_wait(req_job(r, k), 100, &u))
                if (http_client_gone(r)) {
                    for (int i = 0; i < req_n_jobs(r); i++) sched_job_cancel(req_job(r, i));
                    r->cancelled = true;
                    return false;
                }
        } while (!u.done);
    }
    genreq_persist(r); /* durable before the response is sent */
    return true;
}

bool genreq_check_ablate(req *r, enum MHD_Result *ret) {
    const oai_request *q = &r->oreq;
    attnd_err err;
    if (!q->n_ablate) return true;
    if (ablate_api_check(model_info_get(r->srv->m), q->ablate, q->n_ablate, &err) != ATTND_OK)
        *ret = http_respond_error(r, 400, err.msg, "ablate");
    else if (q->session_id)
        *ret = http_respond_error(r, 400,
                                  "'ablate' cannot be combined with 'session_id': an ablated sequence's KV never "
                                  "enters a session or the prompt cache",
                                  "ablate");
    else if (q->n > 1)
        *ret = http_respond_error(r, 400, "'ablate' takes one choice: 'n' must be 1", "n");
    else
        return true;
    return false;
}

static bool submit_choices(req *r, enum MHD_Result *ret) {
    const oai_request *q = &r->oreq;
    int n_prompts = r->chat ? 1 : q->n_prompts, n_choices = n_prompts * q->n;
    attnd_err err;
    if (!genreq_check_ablate(r, ret)) return false;
    if (q->grammar && r->srv->tok && grammar_check_tokenizer(q->grammar, r->srv->tok, &err) != ATTND_OK) { /* its token terminals */
        *ret = http_respond_error(r, 400, err.msg, q->format == OAI_FORMAT_TOOL_CALL ? "tool_choice" : "grammar");
        return false;
    }
    if (r->llama && n_choices > 1) {
        *ret = http_respond_error(r, 400, "/completion takes one prompt; use /v1/completions for prompt lists", "prompt");
        return false;
    }
    if (q->session_id && n_prompts > 1) {
        *ret = http_respond_error(r, 400, "'session_id' works with one prompt, not a list", "session_id");
        return false;
    }
    if (n_choices > 1 && !(r->extra = calloc((size_t)n_choices - 1, sizeof(*r->extra)))) {
        *ret = http_respond_error(r, 503, "out of memory", NULL);
        return false;
    }
    for (int p = 0; p < n_prompts; p++) {
        int k0 = p * q->n;
        int32_t *ids;
        size_t n;
        if (genreq_prompt_tokens(r, p, &ids, &n, &err) != ATTND_OK) {
            free(ids);
            *ret = http_respond_error(r, 400, err.msg, genreq_prompt_param(r));
            return false;
        }
        int max_tokens = genreq_fit_context(r, n, ret);
        sess *se = NULL;
        if (max_tokens < 0 || (p == 0 && !genreq_acquire_session(r, &se, ret))) {
            free(ids);
            return false;
        }
        r->n_prompt += (int)n;
        bool fork = !(!r->chat && q->echo && q->logprobs >= 0);
        int32_t *copy = q->n > 1 && !fork ? malloc(n * sizeof(int32_t)) : NULL;
        if (copy) memcpy(copy, ids, n * sizeof(int32_t));
        else if (q->n > 1 && !fork) {
            free(ids);
            if (se) sess_abandon(r->srv->store, se);
            *ret = http_respond_error(r, 503, "out of memory", NULL);
            return false;
        }
        if (!make_job(r, k0, ids, n, max_tokens, se, NULL, ret)) {
            free(copy);
            return false;
        }
        bool ok = make_siblings(r, k0, copy, n, max_tokens, ret);
        free(copy);
        if (!ok) {
            if (se) sess_abandon(r->srv->store, se);
            return false;
        }
        for (int i = 0; i < q->n; i++)
            if ((i == 0 || !fork) && !submit(r, k0 + i, i == 0 ? se : NULL, ret)) return false;
    }
    return true;
}

bool genreq_submit_all(req *r, enum MHD_Result *ret) {
    if (submit_choices(r, ret)) return true;
    /* an error answer ends the request: what was already submitted stops too */
    for (int k = 0; k < req_n_jobs(r); k++) sched_job_cancel(req_job(r, k));
    return false;
}


bool genreq_was_cut(const sched_output *o) { return o->status == ATTND_ERR_BUSY; }
