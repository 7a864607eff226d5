/*
 * completions.c — the generation endpoints: POST /v1/completions, /v1/chat/completions and
 * llama.cpp's /completion (see endpoints.h).
 *
 * A handler validates the body (oai.c), tokenizes the prompt (chat template for chat), acquires
 * the named session if one is given, submits a job to the scheduler and then either streams
 * (sse.c) or blocks until the job is done and answers with the whole response (oai_resp.c).
 * It never calls the engine and never touches the job's insides.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints.h"
#include "slog.h"
#include "sse.h"

void gen_view(const sched_output *o, oai_gen *g) {
    *g = (oai_gen){
        .text = o->text ? o->text : "", .text_len = o->text_len,
        .pieces = o->pieces, .n_pieces = o->n_pieces,
        .tops = o->tops, .top_logprobs = o->top_logprobs,
        .prompt = o->prompt, .n_prompt = o->n_prompt,
        .prompt_lp = o->prompt_lp, .prompt_tops = o->prompt_tops,
        .finish_reason = o->finish_reason,
        .n_cached = o->n_cached, .n_generated = o->n_generated,
        .prompt_ms = o->prompt_ms, .gen_ms = o->gen_ms,
    };
}

static bool token_bytes(void *user, int32_t id, const char **p, size_t *n) {
    return tok_token_bytes((const tokenizer *)user, id, false, p, n);
}

/* llama.cpp's /completion names max_tokens n_predict (-1 = until the context is full) and can
 * return the generated ids; maps them onto the OpenAI fields. false: a 400 is queued. */
static bool llama_fields(req *r, json_t *b, enum MHD_Result *ret) {
    json_t *np = json_object_get(b, "n_predict");
    if (np && !json_is_integer(np)) {
        *ret = http_respond_error(r, 400, "'n_predict' must be an integer", "n_predict");
        return false;
    }
    if (np && json_integer_value(np) >= 0) json_object_set(b, "max_tokens", np);
    else if (np) json_object_set_new(b, "max_tokens", json_integer(r->srv->cfg.max_tokens_cap));
    json_t *rt = json_object_get(b, "return_tokens");
    if (rt && !json_is_boolean(rt)) {
        *ret = http_respond_error(r, 400, "'return_tokens' must be a boolean", "return_tokens");
        return false;
    }
    r->return_tokens = json_is_true(rt);
    return true;
}

/* The tokens of prompt p into *ids (owned by the caller): the chat template, a text prompt or
 * token ids. */
static attnd_status prompt_tokens(req *r, int p, int32_t **ids, size_t *n, attnd_err *err) {
    struct server *s = r->srv;
    const oai_request *q = &r->oreq;
    *ids = NULL, *n = 0;
    /* chat: only the template's markers are special tokens, never the messages' content */
    if (r->chat) return chat_encode(s->tok, s->family, q->msgs, q->n_msgs, ids, n, err);
    const oai_prompt *pr = &q->prompts[p];
    if (pr->text) return tok_encode(s->tok, pr->text, strlen(pr->text), true, true, ids, n, err);
    *ids = malloc((size_t)(pr->n_ids ? pr->n_ids : 1) * sizeof(int32_t));
    if (!*ids) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    *n = (size_t)pr->n_ids;
    memcpy(*ids, pr->ids, *n * sizeof(int32_t));
    return ATTND_OK;
}

int gen_fit_context(req *r, size_t n, enum MHD_Result *ret) {
    struct server *s = r->srv;
    const char *pname = r->rsp ? "input" : r->chat ? "messages" : "prompt";
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

bool gen_acquire_session(req *r, sess **se, enum MHD_Result *ret) {
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
        *ret = http_respond_error(r, http_status_of(st, HTTP_CTX_ACQUIRE), err.msg, "session_id");
        return false;
    }
    snprintf(r->sess_id, sizeof(r->sess_id), "%s", id);
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
        .top_logprobs = q->logprobs, .prompt_logprobs = !r->chat && q->echo && q->logprobs >= 0, .se = se,
        .owner = r->owner, .tenant = r->tenant,
    };
    spec->sp.seed = seed;
    bool ok = true;
    if (q->n_bias && (ok = (spec->bias = malloc((size_t)q->n_bias * sizeof(*q->bias)))))
        memcpy(spec->bias, q->bias, (size_t)q->n_bias * sizeof(*q->bias));
    if (ok) ok = (spec->stops = calloc((size_t)q->n_stops + 1, sizeof(char *))) != NULL;
    for (int i = 0; ok && i < q->n_stops; i++) ok = (spec->stops[spec->n_stops++] = strdup(q->stops[i])) != NULL;
    /* the turn's end marker stops generation even where the vocabulary spells it as text */
    if (ok && r->chat) ok = (spec->stops[spec->n_stops++] = strdup(chat_end_marker(r->srv->family))) != NULL;
    if (ok) return true;
    free(ids);
    free(spec->bias);
    for (int i = 0; spec->stops && i < spec->n_stops; i++) free(spec->stops[i]);
    free(spec->stops);
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

attnd_status gen_prompt_tokens(req *r, int32_t **ids, size_t *n, attnd_err *err) { return prompt_tokens(r, 0, ids, n, err); }

bool gen_submit(req *r, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap, enum MHD_Result *ret) {
    return make_job(r, 0, ids, n, max_tokens, se, cap, ret) && submit(r, 0, se, ret);
}

bool gen_wait_done(req *r) { return gen_wait_all(r); }

void gen_usage_sum(const req *r, oai_gen *sum) {
    *sum = (oai_gen){0};
    for (int k = 0; k < req_n_jobs(r); k++) {
        sched_output o;
        sched_job_output(req_job(r, k), &o);
        if (k % r->oreq.n == 0) { /* n choices of one prompt read it once */
            sum->n_prompt += o.n_prompt;
            sum->n_cached += o.n_cached;
        }
        sum->n_generated += o.n_generated;
    }
}

/* The prompt of choice k as echoed back (completions with echo): the text as given, or the
 * token-id prompt decoded. Owned by the caller; NULL when not echoing (or out of memory). */
static char *echo_text(req *r, int k, const sched_output *o, size_t *len) {
    *len = 0;
    if (r->chat || !r->oreq.echo) return NULL;
    const char *text = r->oreq.prompts[k / r->oreq.n].text;
    if (text) {
        *len = strlen(text);
        return strdup(text);
    }
    char *d = NULL;
    if (tok_decode(r->srv->tok, o->prompt, (size_t)o->n_prompt, false, &d, len, NULL) == ATTND_OK) return d;
    *len = 0;
    return strdup(""); /* still an echo: the logprobs keep the prompt's entries */
}

void gen_hold_connection(req *r, bool waiting) {
    unsigned t = waiting ? 0u : (unsigned)(r->srv->cfg.request_timeout_s > 0 ? r->srv->cfg.request_timeout_s : 30);
    MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, t);
}

void gen_persist(req *r) {
    if (!r->sess_id[0]) return;
    attnd_err err;
    if (sess_persist(r->srv->store, r->owner, r->sess_id, &err) != ATTND_OK) slog_error("%s", err.msg);
}

bool gen_wait_all(req *r) {
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
    gen_persist(r); /* durable before the response is sent */
    return true;
}

/* Choice k's whole response; NULL with *failed set when its job failed. */
static json_t *choice_body(req *r, int k, sched_output *failed) {
    sched_output o;
    sched_job_output(req_job(r, k), &o);
    if (o.status != ATTND_OK) {
        *failed = o;
        return NULL;
    }
    oai_gen g;
    gen_view(&o, &g);
    size_t echo_len;
    char *echo = echo_text(r, k, &o, &echo_len);
    json_t *body = oai_final(&r->rctx, &g, echo, echo_len);
    free(echo);
    return body;
}

/* Blocks until the job is done (or the client leaves), then answers with the whole response:
 * one choice per prompt and n, in order, with the usage summed. */
static enum MHD_Result respond_whole(req *r) {
    if (!gen_wait_all(r)) return MHD_NO;
    gen_hold_connection(r, false); /* the idle timeout guards sending the body again */
    sched_output o;
    sched_job_output(r->job, &o);
    if (r->llama && o.status == ATTND_OK) {
        oai_gen g;
        gen_view(&o, &g);
        return http_respond_json(r, 200, oai_llama_response(&r->rctx, &g, g.text, g.text_len, r->return_tokens, 0,
                                                            g.n_pieces, true));
    }
    sched_output failed;
    json_t *body = choice_body(r, 0, &failed);
    json_t *choices = json_object_get(body, "choices");
    for (int k = 1; body && k < req_n_jobs(r); k++) {
        json_t *other = choice_body(r, k, &failed), *c = json_array_get(json_object_get(other, "choices"), 0);
        if (c) {
            json_object_set_new(c, "index", json_integer(k));
            json_array_append(choices, c);
        } else {
            json_decref(body);
            body = NULL;
        }
        json_decref(other);
    }
    if (!body)
        return http_respond_error(r, http_status_of(failed.status, HTTP_CTX_GENERATE),
                                  failed.errmsg[0] ? failed.errmsg : "generation failed", NULL);
    if (req_n_jobs(r) > 1) {
        oai_gen sum;
        gen_usage_sum(r, &sum);
        json_object_set_new(body, "usage", oai_usage(&sum));
    }
    return http_respond_json(r, 200, body);
}

static bool submit_choices(req *r, enum MHD_Result *ret) {
    const oai_request *q = &r->oreq;
    int n_prompts = r->chat ? 1 : q->n_prompts, n_choices = n_prompts * q->n;
    attnd_err err;
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
        if (prompt_tokens(r, p, &ids, &n, &err) != ATTND_OK) {
            free(ids);
            *ret = http_respond_error(r, 400, err.msg, r->rsp ? "input" : r->chat ? "messages" : "prompt");
            return false;
        }
        int max_tokens = gen_fit_context(r, n, ret);
        sess *se = NULL;
        if (max_tokens < 0 || (p == 0 && !gen_acquire_session(r, &se, ret))) {
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

bool gen_submit_all(req *r, enum MHD_Result *ret) {
    if (submit_choices(r, ret)) return true;
    /* an error answer ends the request: what was already submitted stops too */
    for (int k = 0; k < req_n_jobs(r); k++) sched_job_cancel(req_job(r, k));
    return false;
}

static enum MHD_Result generate(req *r, bool chat) {
    struct server *s = r->srv;
    enum MHD_Result ret = MHD_NO;
    json_t *b = http_work_body(r, &ret);
    if (!b) return ret;
    r->chat = chat;
    if (r->llama && !llama_fields(r, b, &ret)) return ret;
    const char *param = NULL;
    attnd_err err;
    attnd_status st = oai_parse(b, chat, &s->cfg, s->n_vocab, &r->oreq, &param, &err);
    if (st != ATTND_OK) return http_respond_error(r, http_status_of(st, HTTP_CTX_PARSE), err.msg, param);
    attnd_random_id(r->resp_id, sizeof(r->resp_id), r->chat ? "chatcmpl-" : "cmpl-");
    r->rctx = (oai_resp_ctx){r->resp_id, s->model_id, (long long)time(NULL), r->chat, r->oreq.include_usage,
                             r->sess_id, token_bytes, s->tok};
    if (!gen_submit_all(r, &ret)) return ret;
    gen_hold_connection(r, true);
    return r->oreq.stream ? sse_respond(r) : respond_whole(r);
}

enum MHD_Result ep_completions(req *r) { return generate(r, false); }
enum MHD_Result ep_chat(req *r) { return generate(r, true); }
enum MHD_Result ep_llama_completion(req *r) {
    r->llama = true;
    return generate(r, false);
}
