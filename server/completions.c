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

/* The prompt's tokens into *ids (owned by the caller), from the chat template, the text prompt
 * or the token-id prompt. */
attnd_status gen_prompt_tokens(req *r, int32_t **ids, size_t *n, attnd_err *err) {
    struct server *s = r->srv;
    const oai_request *q = &r->oreq;
    *ids = NULL, *n = 0;
    /* chat: only the template's markers are special tokens, never the messages' content */
    if (r->chat) return chat_encode(s->tok, s->family, q->msgs, q->n_msgs, ids, n, err);
    if (q->prompt) return tok_encode(s->tok, q->prompt, strlen(q->prompt), true, true, ids, n, err);
    *ids = malloc((size_t)(q->n_prompt_ids ? q->n_prompt_ids : 1) * sizeof(int32_t));
    if (!*ids) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    *n = (size_t)q->n_prompt_ids;
    memcpy(*ids, q->prompt_ids, *n * sizeof(int32_t));
    return ATTND_OK;
}

/* Checks the prompt's length against the context; returns max_tokens clamped to the room
 * left, or -1 with the 400 queued. */
int gen_fit_context(req *r, size_t n, enum MHD_Result *ret) {
    struct server *s = r->srv;
    const char *pname = r->chat ? "messages" : "prompt";
    int need = r->oreq.max_tokens == 0 ? 0 : 1;
    if (n == 0) {
        *ret = http_respond_error(r, 400, "the prompt is empty (no tokens)", pname);
        return -1;
    }
    if (n + (size_t)need > (size_t)s->n_ctx) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "the prompt is %zu tokens but the context length is %d (%d token%s must remain for the completion)", n,
                 s->n_ctx, need, need == 1 ? "" : "s");
        *ret = http_respond_error(r, 400, msg, pname);
        return -1;
    }
    int room = s->n_ctx - (int)n;
    int max_tokens = r->oreq.max_tokens >= 0 ? r->oreq.max_tokens : s->cfg.default_max_tokens;
    return max_tokens > room ? room : max_tokens;
}

/* The named session, acquired (busy) into *se; NULL when none is asked for. false: an error
 * response is queued. */
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

/* The job spec: the prompt (stolen), sampling, and the request's stops and bias moved out of
 * oreq; chat adds the template's end-of-turn marker as a stop string. */
static void job_spec(req *r, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap,
                     sched_job_spec *spec) {
    oai_request *q = &r->oreq;
    *spec = (sched_job_spec){
        .prompt = ids, .n_prompt = (int)n, .sp = q->sp, .bias = q->bias, .n_bias = q->sp.n_bias,
        .stops = q->stops, .n_stops = q->n_stops, .max_tokens = max_tokens, .top_logprobs = q->logprobs,
        .prompt_logprobs = !r->chat && q->echo && q->logprobs >= 0, .capture = cap, .se = se, .owner = r->owner,
    };
    q->bias = NULL, q->stops = NULL, q->n_stops = 0;
    if (!r->chat) return;
    /* the turn's end marker stops generation even where the vocabulary spells it as text */
    char **g = realloc(spec->stops, (size_t)(spec->n_stops + 1) * sizeof(char *));
    if (!g) return;
    spec->stops = g;
    if ((g[spec->n_stops] = strdup(chat_end_marker(r->srv->family)))) spec->n_stops++;
}

bool gen_submit(req *r, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap, enum MHD_Result *ret) {
    struct server *s = r->srv;
    sched_job_spec spec;
    job_spec(r, ids, n, max_tokens, se, cap, &spec);
    attnd_err err;
    if (sched_job_create(&r->job, &spec, &err) != ATTND_OK) {
        if (se) sess_abandon(s->store, se);
        *ret = http_respond_error(r, 503, err.msg, NULL);
        return false;
    }
    attnd_random_id(r->resp_id, sizeof(r->resp_id), r->chat ? "chatcmpl-" : "cmpl-");
    r->rctx = (oai_resp_ctx){r->resp_id, s->model_id, (long long)time(NULL), r->chat, r->oreq.include_usage,
                             r->sess_id, token_bytes, s->tok};
    if (sched_submit(s->sch, r->job, &err) != ATTND_OK) {
        if (se) sess_abandon(s->store, se);
        *ret = http_respond_error(r, atomic_load(&s->stopping) ? 503 : 429, err.msg, NULL);
        return false;
    }
    return true;
}

/* The prompt as echoed back (completions with echo): the text as given, or the token-id
 * prompt decoded. Owned by the caller; NULL when not echoing (or out of memory). */
static char *echo_text(req *r, const sched_output *o, size_t *len) {
    *len = 0;
    if (r->chat || !r->oreq.echo) return NULL;
    if (r->oreq.prompt) {
        *len = strlen(r->oreq.prompt);
        return strdup(r->oreq.prompt);
    }
    char *d = NULL;
    if (tok_decode(r->srv->tok, o->prompt, (size_t)o->n_prompt, false, &d, len, NULL) == ATTND_OK) return d;
    *len = 0;
    return strdup(""); /* still an echo: the logprobs keep the prompt's entries */
}

bool gen_wait_done(req *r) {
    sched_update u;
    do {
        while (!sched_job_wait(r->job, 100, &u))
            if (http_client_gone(r)) {
                sched_job_cancel(r->job);
                r->cancelled = true;
                return false;
            }
    } while (!u.done);
    return true;
}

/* Blocks until the job is done (or the client leaves), then answers with the whole response. */
static enum MHD_Result respond_whole(req *r) {
    if (!gen_wait_done(r)) return MHD_NO;
    sched_output o;
    sched_job_output(r->job, &o);
    if (o.status != ATTND_OK)
        return http_respond_error(r, http_status_of(o.status, HTTP_CTX_GENERATE),
                                  o.errmsg[0] ? o.errmsg : "generation failed", NULL);
    oai_gen g;
    gen_view(&o, &g);
    if (r->llama) return http_respond_json(r, 200, oai_llama_response(&r->rctx, &g, g.text, g.text_len,
                                                                      r->return_tokens, 0, g.n_pieces, true));
    size_t echo_len;
    char *echo = echo_text(r, &o, &echo_len);
    json_t *body = oai_final(&r->rctx, &g, echo, echo_len);
    free(echo);
    return http_respond_json(r, 200, body);
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
    int32_t *ids;
    size_t n;
    if (gen_prompt_tokens(r, &ids, &n, &err) != ATTND_OK) {
        free(ids);
        return http_respond_error(r, 400, err.msg, chat ? "messages" : "prompt");
    }
    int max_tokens = gen_fit_context(r, n, &ret);
    if (max_tokens >= 0) r->n_prompt = (int)n;
    sess *se = NULL;
    if (max_tokens < 0 || !gen_acquire_session(r, &se, &ret)) {
        free(ids);
        return ret;
    }
    if (!gen_submit(r, ids, n, max_tokens, se, NULL, &ret)) return ret;
    return r->oreq.stream ? sse_respond(r) : respond_whole(r);
}

enum MHD_Result ep_completions(req *r) { return generate(r, false); }
enum MHD_Result ep_chat(req *r) { return generate(r, true); }
enum MHD_Result ep_llama_completion(req *r) {
    r->llama = true;
    return generate(r, false);
}
