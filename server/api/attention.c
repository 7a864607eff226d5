/*
 * attention.c — POST /v1/attention (and /attention): the attention weights the engine computes
 * for a prompt, and for the tokens it generates when max_tokens > 0 (see attn_api.h for the JSON).
 *
 * The request runs as an ordinary generation job (same validation, API key, session, queue and
 * scheduler as a completion) carrying an attn_capture: the scheduler hooks it into the engine
 * only for the steps that evaluate this job's tokens. The selection and the size of the answer
 * are checked before anything is queued, and the capture's memory is allocated then, bounded by
 * attention_max_weights.
 */
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "attnd/embed.h"

#include "ablate_api.h"
#include "heads_api.h"
#include "attn_api.h"
#include "endpoints.h"
#include "genreq_http.h"
#include "models_http.h"

/* Reads the inspection fields (and the ablation sweep's, ablate_api.h) and leaves the body as oai_parse should see it: "top_k" is the
 * attention cut here; top-k sampling may be asked for as "sampling_top_k". false: 400 queued. */
static bool read_selection(req *r, genreq *g, json_t *b, attn_api_request *ar, ablate_measure *am,
                           http_result *ret) {
    const char *param = NULL;
    attnd_err err;
    if (attn_api_parse(b, ar, &param, &err) != ATTND_OK || ablate_api_parse_measure(b, am, &param, &err) != ATTND_OK) {
        *ret = http_respond_error(r, 400, err.msg, param);
        return false;
    }
    json_object_del(b, "top_k");
    json_t *stk = json_object_get(b, "sampling_top_k");
    if (stk) json_object_set(b, "top_k", stk);
    if (json_is_true(json_object_get(b, "stream"))) {
        *ret = http_respond_error(r, 400, "'stream' is not available on /v1/attention", "stream");
        return false;
    }
    /* a prompt is a completion; messages (and no prompt) go through the chat template */
    g->chat = !json_object_get(b, "prompt") && json_object_get(b, "messages");
    return true;
}

/* Validates the selection against the model and the cap, and allocates the capture. */
static attn_capture *make_capture(req *r, const genreq_env *env, const attn_api_request *ar, int n_positions,
                                  http_result *ret) {
    attn_capture_params p = attn_api_params(ar, n_positions);
    const char *param = NULL;
    attnd_err err;
    if (attn_api_check(model_info_get(env->m), &p, (uint64_t)env->cfg->attention_max_weights,
                       (uint64_t)env->cfg->attention_max_bytes, &param, &err)) {
        *ret = http_respond_error(r, 400, err.msg, param);
        return NULL;
    }
    attn_capture *c;
    if (attn_capture_create(&c, env->m, &p, &err) != ATTND_OK) {
        *ret = http_respond_error(r, 503, err.msg, NULL);
        return NULL;
    }
    return c;
}

/* The answer once the job is done: attn_api's object plus the generation's outcome. */
static http_result respond(req *r, const genreq *g) {
    const genreq_env *env = &g->env;
    sched_output o;
    sched_job_output(g->job, &o);
    if (o.status != ATTND_OK)
        return http_respond_error(r, http_status_of(o.status, HTTP_CTX_GENERATE),
                                  o.errmsg[0] ? o.errmsg : "evaluation failed", NULL);
    int n_ids = o.n_prompt + o.n_pieces;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_ids);
    json_t *body = NULL;
    if (ids) {
        memcpy(ids, o.prompt, sizeof(int32_t) * (size_t)o.n_prompt);
        for (int i = 0; i < o.n_pieces; i++) ids[o.n_prompt + i] = o.pieces[i].id;
        body = attn_api_head(env->model_id, model_info_get(env->m), env->tok, ids, n_ids, o.n_prompt, o.capture);
        free(ids);
    }
    if (!body) return http_respond_error(r, 503, "out of memory building the attention response", NULL);
    json_object_set_new(body, "text", oai_string(o.text ? o.text : "", o.text_len));
    json_object_set_new(body, "finish_reason", o.finish_reason ? json_string(o.finish_reason) : json_null());
    json_object_set_new(body, "usage", json_pack("{s:i, s:i, s:{s:i}}", "prompt_tokens", (json_int_t)o.n_prompt,
                                                 "completion_tokens", (json_int_t)o.n_generated,
                                                 "prompt_tokens_details", "cached_tokens", (json_int_t)o.n_cached));
    if (g->sess_id[0]) json_object_set_new(body, "session_id", json_string(g->sess_id));
    if (g->oreq.n_ablate) json_object_set_new(body, "ablate", ablate_api_json(g->oreq.ablate, g->oreq.n_ablate));
    size_t len = 0;
    char *text = attn_api_dump_with(body, o.capture, &len), *line = NULL;
    json_decref(body);
    if (text && (line = realloc(text, len + 2))) memcpy(line + len, "\n", 2); /* one JSON document per line, as elsewhere */
    else free(text);
    if (!line) return http_respond_error(r, 503, "out of memory building the attention response", NULL);
    return http_respond_text(r, 200, "application/json", line);
}

// ---- encoders: rows both ways, from one engine_embed of the prompts ---------------------------

typedef struct encode_task {
    const embed_input *in;
    int n, n_tokens;
    attn_capture *cap;
} encode_task;

/* On the scheduler thread: the inputs through the encoder in one call with the capture hooked
 * (entry = position over the call), every token's vector discarded. An encoder keeps no KV. */
static attnd_status run_encode(void *user, sched_task_turn *t, attnd_err *err) {
    encode_task *k = user;
    if (t->plan || t->stop) {
        t->kv_bytes = 0;
        return ATTND_OK;
    }
    float *out = malloc(sizeof(float) * (size_t)k->n_tokens * (size_t)model_info_get(engine_model(t->e))->n_embd);
    if (!out) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory encoding the prompt");
    attn_hook h;
    attn_hook_install(&h, t->e, k->cap, NULL, 0);
    attnd_status st = engine_embed_tokens(t->e, k->in, k->n, out, err);
    attn_hook_remove(&h);
    free(out);
    t->work = k->n_tokens;
    t->more = false;
    return st;
}

/* The prompts' tokens as inputs (each owned, freed by free_inputs); *lens their counts. NULL:
 * the error is queued in *ret. */
static embed_input *encoder_inputs(req *r, genreq *g, int **lens, int *n_tokens, http_result *ret) {
    int n = g->oreq.n_prompts;
    embed_input *in = calloc((size_t)n, sizeof(*in));
    *lens = calloc((size_t)n, sizeof(int));
    *n_tokens = 0;
    for (int i = 0; in && *lens && i < n; i++) {
        int32_t *ids;
        size_t k;
        genreq_err e;
        if (genreq_prompt_tokens(g, i, &ids, &k, &e) != ATTND_OK) {
            *ret = genreq_http_respond(r, &e);
            for (int j = 0; j < i; j++) free((void *)in[j].tokens);
            free(in), free(*lens);
            return NULL;
        }
        int cnt = k > (size_t)1 << 30 ? 1 << 30 : (int)k;
        in[i] = (embed_input){ids, cnt, NULL};
        (*lens)[i] = cnt;
        *n_tokens += cnt > (1 << 30) - *n_tokens ? (1 << 30) - *n_tokens : cnt;
    }
    if (in && *lens) return in;
    free(in), free(*lens);
    *ret = http_respond_error(r, 503, "out of memory", NULL);
    return NULL;
}

static void free_inputs(embed_input *in, int n) {
    for (int i = 0; in && i < n; i++) free((void *)in[i].tokens);
    free(in);
}

/* The answer's text: attn_api's object with every input's tokens one after another and its
 * "inputs", usage. NULL when out of memory. */
static char *encoder_answer(const genreq_env *env, const embed_input *in, int n, int n_tokens, const attn_capture *cap) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_tokens);
    for (int i = 0, at = 0; ids && i < n; at += in[i].n_tokens, i++)
        memcpy(ids + at, in[i].tokens, sizeof(int32_t) * (size_t)in[i].n_tokens);
    json_t *body = ids ? attn_api_head(env->model_id, model_info_get(env->m), env->tok, ids, n_tokens, n_tokens, cap) : NULL;
    free(ids);
    if (body) json_object_set_new(body, "usage", json_pack("{s:i, s:i}", "prompt_tokens", (json_int_t)n_tokens,
                                                           "completion_tokens", (json_int_t)0));
    size_t len = 0;
    char *text = body ? attn_api_dump_with(body, cap, &len) : NULL, *line = NULL;
    json_decref(body);
    if (text && !(line = realloc(text, len + 2))) free(text);
    if (line) memcpy(line + len, "\n", 2); /* one JSON document per line, as respond() */
    return line;
}

/* An encoder's inspection of the request's prompts: one engine_embed of them all, each row over
 * its own input's tokens ("causal": false, "inputs"). */
static http_result inspect_encoder(req *r, genreq *g, const attn_api_request *ar) {
    const genreq_env *env = &g->env;
    http_result ret = HTTP_NO;
    int *lens, n = g->oreq.n_prompts, n_tokens;
    embed_input *in = encoder_inputs(r, g, &lens, &n_tokens, &ret);
    if (!in) return ret;
    attn_capture_params p = attn_api_params(ar, n_tokens);
    p.inputs = lens, p.n_inputs = n;
    const char *param = NULL;
    attnd_err err;
    attn_capture *cap = NULL;
    char tenant[SCHED_TENANT_MAX + 1];
    http_tenant(r, tenant, sizeof(tenant)); /* the evaluation is charged to it */
    attnd_status st = attn_api_check(model_info_get(env->m), &p, (uint64_t)env->cfg->attention_max_weights,
                                     (uint64_t)env->cfg->attention_max_bytes, &param, &err);
    if (st == ATTND_OK && (st = attn_capture_create(&cap, env->m, &p, &err)) != ATTND_OK) st = ATTND_ERR_NOMEM;
    if (st == ATTND_OK)
        st = sched_run_task(env->sch, &(sched_task_spec){run_encode, &(encode_task){in, n, n_tokens, cap}, tenant},
                            &err);
    r->n_prompt = n_tokens;
    char *text = st == ATTND_OK ? encoder_answer(env, in, n, n_tokens, cap) : NULL;
    if (st != ATTND_OK)
        ret = http_respond_error(r, st == ATTND_ERR_INVALID || st == ATTND_ERR_UNSUPPORTED ? 400 : 503, err.msg,
                                 st == ATTND_ERR_NOMEM ? NULL : param ? param : "prompt");
    else
        ret = text ? http_respond_text(r, 200, "application/json", text)
                   : http_respond_error(r, 503, "out of memory building the attention response", NULL);
    attn_capture_destroy(cap);
    free_inputs(in, n);
    free(lens);
    return ret;
}

/* What an encoder's inspection cannot do: generate, sweep, ablate, keep a session, follow a chat
 * template; more prompts than embed_max_inputs. false: the 400 is queued. */
static bool encoder_alone(req *r, const genreq *g, const ablate_measure *am, http_result *ret) {
    const oai_request *q = &g->oreq;
    const char *field = g->chat ? "messages" : q->max_tokens > 0 ? "max_tokens" : am->on ? "measure"
                      : q->n_ablate ? "ablate" : q->session_id ? "session_id" : q->n > 1 ? "n" : NULL;
    char msg[240];
    if (field)
        snprintf(msg, sizeof(msg), "'%s' is not available on an encoder model ('%s'): it generates nothing, keeps no "
                 "KV and has no chat template; /v1/attention shows its prompts' attention", field,
                 model_info_get(g->env.m)->arch);
    else if (q->n_prompts > g->env.cfg->embed_max_inputs)
        field = "prompt", snprintf(msg, sizeof(msg), "%d prompts; the server inspects at most %d at once "
                                   "(embed_max_inputs)", q->n_prompts, g->env.cfg->embed_max_inputs);
    if (!field) return true;
    *ret = http_respond_error(r, 400, msg, field);
    return false;
}

// ---- "measure": "ablation": every head ablated in turn (attnd/ablate_sweep.h) ---------------

typedef struct sweep_task {
    const ablate_sweep_params *p;
    ablate_sweep_result *r;
    ablate_sweep *w;
} sweep_task;

/* On the scheduler thread (sched_run_task): the sweep, one batch a turn, with the server's
 * engine and KV pool. */
static attnd_status run_sweep(void *user, sched_task_turn *t, attnd_err *err) {
    sweep_task *k = user;
    if (t->plan) {
        t->kv_bytes = ablate_sweep_kv_bytes(t->e, t->pool, k->p);
        return ATTND_OK;
    }
    bool done = false;
    attnd_status st = t->stop ? ATTND_ERR_BUSY : k->w ? ATTND_OK : ablate_sweep_create(&k->w, t->e, t->pool, k->p, err);
    long before = k->w ? ablate_sweep_evaluated(k->w) : 0;
    if (st == ATTND_OK) st = ablate_sweep_next(k->w, t->max_entries, &done, err);
    t->work = k->w ? ablate_sweep_evaluated(k->w) - before : 0;
    if (st == ATTND_OK && done) ablate_sweep_take_result(k->w, k->r);
    t->more = st == ATTND_OK && !done;
    if (!t->more) ablate_sweep_destroy(k->w), k->w = NULL;
    return st;
}

/* Refuses what a sweep does not combine with: an attention selection, ablate, generation, a
 * session. false: the 400 is queued. */
static bool sweep_alone(req *r, const genreq *g, const attn_api_request *ar, http_result *ret) {
    const oai_request *q = &g->oreq;
    const char *field = ar->layers ? "layers" : ar->heads ? "heads" : ar->top_k ? "top_k"
                      : ar->weights != ATTN_WEIGHTS_ATTENTION ? "weights" : ar->lens_k ? "logit_lens"
                      : ar->experts ? "experts"
                      : q->n_ablate ? "ablate" : q->max_tokens > 0 ? "max_tokens" : q->session_id ? "session_id" : NULL;
    if (!field) return true;
    char msg[160];
    snprintf(msg, sizeof(msg), "'%s' cannot be combined with \"measure\": \"ablation\" (it reads one prompt, every head)",
             field);
    *ret = http_respond_error(r, 400, msg, field);
    return false;
}

/* The ablation sweep over prompt ids[0..n) (owned), run on env's scheduler thread. */
static http_result measure_ablation(req *r, const genreq_env *env, const ablate_measure *am, int32_t *ids, size_t n) {
    ablate_sweep_params p;
    ablate_sweep_result res = {0};
    const char *param = NULL;
    attnd_err err;
    http_result ret;
    char tenant[SCHED_TENANT_MAX + 1];
    http_tenant(r, tenant, sizeof(tenant)); /* the sweep's work is charged to it */
    attnd_status st = ablate_api_sweep_params(am, env->tok, ids, (int)n, &p, &param, &err);
    if (st == ATTND_OK) st = ablate_sweep_check(model_info_get(env->m), &p, &err);
    if (st != ATTND_OK) {
        ret = http_respond_error(r, 400, err.msg, param ? param : st == ATTND_ERR_UNSUPPORTED ? "measure" : "prompt");
    } else if ((st = sched_run_task(env->sch, &(sched_task_spec){run_sweep, &(sweep_task){&p, &res, NULL}, tenant},
                                    &err)) != ATTND_OK) {
        ret = http_respond_error(r, st == ATTND_ERR_INVALID ? 400 : 503, err.msg, NULL);
    } else {
        json_t *body = ablate_api_sweep_json(env->model_id, env->tok, &p, (int)n, am->target_position, &res);
        char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(ATTN_API_DIGITS)) : NULL;
        json_decref(body);
        ret = text ? http_respond_text(r, 200, "application/json", text)
                   : http_respond_error(r, 503, "out of memory building the ablation answer", NULL);
    }
    ablate_sweep_result_free(&res);
    free(ids);
    return ret;
}

/* Returns freed heap pages to the system: an inspection's capture and JSON run to hundreds of
 * MB, which glibc's per-thread arenas would otherwise keep after the request (64 asks at once
 * left 719 MB behind). */
static void trim_heap(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* At most attention_parallel inspections at once: each holds its capture and its answer's text
 * (up to attention_max_bytes). false: the 429 is queued. */
static bool attention_slot(req *r, http_result *ret) {
    struct server *s = r->srv;
    int limit = s->cfg.attention_parallel > 0 ? s->cfg.attention_parallel : 2;
    if (atomic_fetch_add(&s->attn_active, 1) < limit) return true;
    atomic_fetch_sub(&s->attn_active, 1);
    *ret = http_respond_error(r, 429, "too many attention inspections at once (attention_parallel); retry shortly", NULL);
    return false;
}

/* The checks of an inspection's body: one prompt, one choice, ablation alone. false: the 400 is
 * queued. */
static bool check_inspection(req *r, genreq *g, const attn_api_request *ar, const ablate_measure *am,
                             http_result *ret) {
    genreq_err e;
    if (!g->chat && g->oreq.n_prompts > 1) { /* only the first would be inspected */
        *ret = http_respond_error(r, 400, "/v1/attention inspects one prompt; send the others as separate requests",
                                  "prompt");
        return false;
    }
    if (g->oreq.n > 1) {
        *ret = http_respond_error(r, 400, "'n' must be 1 on /v1/attention (one inspection per request)", "n");
        return false;
    }
    if (genreq_check_ablate(g, &e) != ATTND_OK) {
        *ret = genreq_http_respond(r, &e);
        return false;
    }
    return !am->on || sweep_alone(r, g, ar, ret);
}

/* The inspection of prompt ids[0..n) (owned): its capture, its job on the session, the answer. */
static http_result inspect(req *r, genreq *g, const attn_api_request *ar, int32_t *ids, size_t n) {
    http_result ret = HTTP_NO;
    int max_tokens;
    sess *se = NULL;
    genreq_err e;
    attn_capture *cap = NULL;
    attnd_status st = genreq_fit_context(g, n, &max_tokens, &e);
    if (st == ATTND_OK && !(cap = make_capture(r, &g->env, ar, (int)n + max_tokens, &ret))) {
        free(ids);
        return ret;
    }
    if (st == ATTND_OK) st = genreq_acquire_session(g, &se, &e);
    if (st != ATTND_OK) {
        attn_capture_destroy(cap);
        free(ids);
        return genreq_http_respond(r, &e);
    }
    g->n_prompt = (int)n;
    if (genreq_submit(g, ids, n, max_tokens, se, cap, &e) != ATTND_OK) return genreq_http_respond(r, &e);
    if (!genreq_wait_all(g)) return HTTP_NO;
    return g->unsaved.fail ? genreq_http_respond(r, &g->unsaved) : respond(r, g);
}

http_result ep_attention(req *r) {
    struct server *s = r->srv;
    http_result ret = HTTP_NO;
    json_t *b;
    genreq *g = genreq_http_begin(r, &b, &ret);
    if (!g) return ret;
    attn_api_request ar = {0};
    if (!attention_slot(r, &ret)) return ret;
    ablate_measure am;
    if (!read_selection(r, g, b, &ar, &am, &ret)) goto out;
    const char *param = NULL;
    attnd_err err;
    attnd_status st = oai_parse(b, g->chat, g->env.cfg, g->env.n_vocab, &g->oreq, &param, &err);
    if (st != ATTND_OK) {
        ret = http_respond_error(r, http_status_of(st, HTTP_CTX_PARSE), err.msg, param);
        goto out;
    }
    bool enc = model_is_encoder(g->env.m); /* several prompts side by side, each attending to itself */
    if (enc ? !encoder_alone(r, g, &am, &ret) : !check_inspection(r, g, &ar, &am, &ret)) goto out;
    if (g->oreq.max_tokens < 0) g->oreq.max_tokens = 0; /* inspection of the prompt alone by default */
    if (enc) {
        ret = inspect_encoder(r, g, &ar);
        goto out;
    }
    int32_t *ids;
    size_t n;
    genreq_err e;
    if (genreq_prompt_tokens(g, 0, &ids, &n, &e) != ATTND_OK) ret = genreq_http_respond(r, &e);
    else if (am.on) ret = measure_ablation(r, &g->env, &am, ids, n);
    else ret = inspect(r, g, &ar, ids, n);
out:
    attn_api_request_free(&ar);
    atomic_fetch_sub(&s->attn_active, 1);
    trim_heap(); /* the capture and the parsed body are gone: give their pages back */
    return ret;
}

// ---- GET /v1/heads: head roles (attnd/head_roles.h), computed once per server ---------------

typedef struct heads_task {
    const head_roles_params *p;
    head_roles *hr;
} heads_task;

static attnd_status run_heads(void *user, sched_task_turn *turn, attnd_err *err) {
    heads_task *t = user;
    return turn->plan || turn->stop ? ATTND_OK : head_roles_compute(turn->e, turn->pool, t->p, t->hr, err);
}

/* The answer's text for env's model: computed on its scheduler thread the first time, then kept
 * in *cache (a request that raced another's computation drops its own copy). NULL: *st and *err
 * say why. */
static const char *heads_text(const genreq_env *env, _Atomic(char *) *cache, attnd_status *st, attnd_err *err) {
    char *text = atomic_load(cache);
    if (text) return text;
    head_roles_params p;
    int32_t *cand = NULL;
    head_roles hr = {0};
    sched_task_spec task = {run_heads, &(heads_task){&p, &hr}, NULL};
    *st = heads_api_params(env->tok, &p, &cand) ? sched_run_task(env->sch, &task, err)
                                                : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    json_t *body = *st == ATTND_OK ? heads_api_json(env->model_id, &hr, &p) : NULL;
    text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(ATTN_API_DIGITS)) : NULL;
    if (*st == ATTND_OK && !text) *st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory building the heads answer");
    json_decref(body);
    head_roles_free(&hr);
    free(cand);
    char *none = NULL;
    if (text && !atomic_compare_exchange_strong(cache, &none, text)) {
        free(text);
        text = none;
    }
    return text;
}

/* GET /v1/heads on env's model (its answer computed once and cached). */
static http_result heads(req *r, json_t *b, const genreq_env *env, const mreg_ref *ref) {
    (void)b;
    attnd_status st = ATTND_OK;
    attnd_err err;
    const char *text = heads_text(env, models_http_heads_cache(r, ref), &st, &err);
    if (!text) /* an encoder's heads have no causal roles: its 400 */
        return http_respond_error(r, st == ATTND_ERR_NOMEM ? 503 : st == ATTND_ERR_UNSUPPORTED ? 400 : 500, err.msg, NULL);
    char *copy = strdup(text); /* the cache is the model's: the answer takes its own copy */
    return copy ? http_respond_text(r, 200, "application/json", copy)
                : http_respond_error(r, 503, "out of memory", NULL);
}

/* On a server of several models, of the model ?model= names (loaded for it: the roles are
 * computed on its engine). */
http_result ep_heads(req *r) { return models_http_serve(r, MODELS_BODY_NONE, heads); }
