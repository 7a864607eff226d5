/*
 * llama_api.c — llama-server's inspection endpoints, in its field names: GET /props (the
 * template, defaults, context, build), GET /slots (the running and queued sequences) and
 * POST /apply-template (the prompt a chat request renders to, as `attnd template` prints it).
 * The prompts themselves never leave through /slots: attnd has no admin key to ask with. On a
 * server of several models each answers for the model named (models_http.h); /props and /slots
 * never load one for it.
 */
#include "endpoints.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/embed.h"
#include "attnd/model.h"
#include "chat.h"
#include "completion_body.h"
#include "models_http.h"
#include "oai.h"
#include "scheduler.h"

#ifndef ATTND_VERSION
#define ATTND_VERSION "unknown"
#endif

/* llama-server's default_generation_settings.params from the server's defaults. */
static json_t *default_params(const server_settings *cfg) {
    const sampler_params *p = &cfg->sampling;
    json_t *o = json_object();
    json_object_set_new(o, "n_predict", json_integer(cfg->default_max_tokens));
    json_object_set_new(o, "temperature", completion_body_float(p->temperature));
    json_object_set_new(o, "top_k", json_integer(p->top_k));
    json_object_set_new(o, "top_p", completion_body_float(p->top_p));
    json_object_set_new(o, "min_p", completion_body_float(p->min_p));
    json_object_set_new(o, "typical_p", completion_body_float(p->typical_p));
    json_object_set_new(o, "repeat_penalty", completion_body_float(p->repeat_penalty));
    json_object_set_new(o, "repeat_last_n", json_integer(p->repeat_last_n));
    json_object_set_new(o, "presence_penalty", completion_body_float(p->presence_penalty));
    json_object_set_new(o, "frequency_penalty", completion_body_float(p->frequency_penalty));
    json_object_set_new(o, "seed", json_integer((json_int_t)p->seed));
    return o;
}

/* The props of a loaded model (env) in llama-server's fields, with attnd's roles. */
static json_t *props_json(const genreq_env *env) {
    const server_settings *cfg = env->cfg;
    const chat_template *chat = env->chat;
    json_t *o = json_object();
    json_object_set_new(o, "default_generation_settings",
                        json_pack("{s:i, s:o}", "n_ctx", env->n_ctx, "params", default_params(cfg)));
    json_object_set_new(o, "total_slots", json_integer(cfg->max_parallel));
    json_object_set_new(o, "model_alias", json_string(env->model_id));
    json_object_set_new(o, "model_path", json_string(cfg->model_path ? cfg->model_path : ""));
    json_object_set_new(o, "modalities", json_pack("{s:b, s:b, s:b}", "vision", 0, "video", 0, "audio", 0));
    json_object_set_new(o, "endpoint_slots", json_true());
    json_object_set_new(o, "endpoint_props", json_true());
    json_object_set_new(o, "endpoint_metrics", json_true());
    /* a built-in family has no Jinja source: "" as llama-server says for none, the family below */
    json_object_set_new(o, "chat_template", json_string(chat->text ? chat->text : ""));
    json_object_set_new(o, "chat_template_source", json_string(chat_source_str(chat)));
    json_object_set_new(o, "chat_template_family", chat->jinja ? json_null() : json_string(chat_family_name(chat->family)));
    json_object_set_new(o, "bos_token", json_string(chat->bos ? chat->bos : ""));
    json_object_set_new(o, "eos_token", json_string(chat->eos ? chat->eos : ""));
    json_object_set_new(o, "build_info", json_string("attnd " ATTND_VERSION));
    json_object_set_new(o, "is_sleeping", json_false());
    unsigned roles = http_model_roles(env->m, cfg); /* attnd's: what the model serves (generate, embed, rank) */
    json_object_set_new(o, "roles", completion_body_roles(roles));
    json_object_set_new(o, "embedding", json_boolean(roles & MODEL_ROLE_EMBED));
    json_object_set_new(o, "reranking", json_boolean(roles & MODEL_ROLE_RANK));
    return o;
}

/* A model of a server of several that is not loaded (or is draining to make room: it takes no
 * new requests until it loads again): what is known without loading it, and its state
 * ("is_sleeping", as llama-server says of a model it unloaded while idle). */
static json_t *props_unloaded(const mreg_info *in) {
    json_t *o = json_pack("{s:s, s:s, s:b, s:s, s:{s:s}}", "model_alias", in->name, "model_path", in->path,
                          "is_sleeping", in->state != MREG_LOADED, "build_info", "attnd " ATTND_VERSION, "status",
                          "value", mreg_state_str(in->state));
    if (in->state == MREG_FAILED) json_object_set_new(json_object_get(o, "status"), "error", json_string(in->error));
    return o;
}

http_result ep_props(req *r) {
    genreq_env env;
    mreg_ref ref;
    mreg_info info;
    http_result ret = HTTP_NO;
    if (!models_http_look(r, &env, &ref, &info, &ret)) return ret;
    if (r->srv->models && !ref.inst) return http_respond_json(r, 200, props_unloaded(&info));
    json_t *o = props_json(&env);
    if (r->srv->models) json_object_set_new(o, "status", json_pack("{s:s}", "value", "loaded"));
    models_http_done(r, &ref);
    return http_respond_json(r, 200, o);
}

/* llama-server's answer: {"prompt": text}; the body is a chat request (messages, tools,
 * chat_template_kwargs), validated as /v1/chat/completions validates it. */
static http_result apply_template(req *r, json_t *b, const genreq_env *env, const mreg_ref *ref) {
    (void)ref;
    http_result ret;
    oai_request q;
    const char *param = NULL;
    attnd_err err;
    attnd_status st = oai_parse(b, true, env->cfg, env->n_vocab, &q, &param, &err);
    if (st == ATTND_OK) st = oai_bind_template(&q, env->chat->takes_tools, env->chat->tool_format, &err);
    jinja_output out = {0};
    if (st == ATTND_OK) {
        chat_request cr;
        oai_chat_input(&q, &cr);
        if ((st = chat_template_render(env->chat, &cr, &out, &err)) != ATTND_OK) param = "messages";
    }
    if (st != ATTND_OK) ret = http_respond_error(r, http_status_of(st, HTTP_CTX_PARSE), err.msg, param);
    else ret = http_respond_json(r, 200, json_pack("{s:s%}", "prompt", out.text ? out.text : "", out.len));
    jinja_output_free(&out);
    oai_request_free(&q);
    return ret;
}

/* A server of several: the model named in the body. */
http_result ep_apply_template(req *r) { return models_http_serve(r, MODELS_BODY_JSON, apply_template); }

/* One sequence in llama-server's slot shape, with attnd's "state"; a queued one has no slot
 * (id null). */
static json_t *seq_json(const sched_seq_info *q, int n_ctx) {
    json_t *o = json_object();
    json_object_set_new(o, "id", q->slot >= 0 ? json_integer(q->slot) : json_null());
    json_object_set_new(o, "n_ctx", json_integer(n_ctx));
    json_object_set_new(o, "is_processing", json_boolean(q->slot >= 0));
    json_object_set_new(o, "state", json_string(q->slot < 0 ? "queued" : q->prefilling ? "prefilling" : "generating"));
    if (q->slot >= 0) json_object_set_new(o, "id_task", json_integer((json_int_t)q->admitted));
    json_object_set_new(o, "n_prompt_tokens", json_integer(q->n_prompt));
    json_object_set_new(o, "n_prompt_tokens_cache", json_integer(q->n_cached));
    json_object_set_new(o, "n_past", json_integer(q->n_past));
    json_t *next = json_object();
    json_object_set_new(next, "has_next_token", json_boolean(q->n_generated < q->max_tokens));
    json_object_set_new(next, "n_remain", json_integer(q->max_tokens - q->n_generated));
    json_object_set_new(next, "n_decoded", json_integer(q->n_generated));
    json_object_set_new(o, "next_token", json_pack("[o]", next));
    return o;
}

static http_result slots(req *r, const genreq_env *env) {
    const server_settings *c = env->cfg;
    int cap = c->max_parallel + 1 + (c->queue_limit > 0 ? c->queue_limit : 0), n = 0;
    sched_seq_info *seqs = calloc((size_t)cap, sizeof(*seqs));
    if (!seqs) return http_respond_error(r, 503, "out of memory", NULL);
    attnd_err err;
    attnd_status st = sched_list_seqs(env->sch, seqs, cap, &n, &err);
    if (st != ATTND_OK) {
        free(seqs);
        return http_respond_error(r, 503, err.msg, NULL);
    }
    json_t *a = json_array();
    for (int k = 0; k < n; k++) json_array_append_new(a, seq_json(&seqs[k], env->n_ctx));
    free(seqs);
    return http_respond_json(r, 200, a);
}

/* On a server of several models, a model not loaded runs nothing: [] (it is not loaded for this). */
http_result ep_slots(req *r) {
    genreq_env env;
    mreg_ref ref;
    mreg_info info;
    http_result ret = HTTP_NO;
    if (!models_http_look(r, &env, &ref, &info, &ret)) return ret;
    if (r->srv->models && !ref.inst) return http_respond_json(r, 200, json_array());
    ret = slots(r, &env);
    models_http_done(r, &ref);
    return ret;
}
