/*
 * ablate_api.c — the "ablate" request field (see ablate_api.h): a JSON list read into the
 * engine's ablation entries, every refusal naming the entry and key at fault.
 */
#include "ablate_api.h"

#include "attn_api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static attnd_status bad(const char **param, attnd_err *err, const char *fmt, int i, const char *what) {
    *param = "ablate";
    return attnd_fail(err, ATTND_ERR_INVALID, fmt, i, what);
}

/* An integer field of entry i in 0..2^20 into *out. */
static attnd_status get_index(const json_t *o, const char *key, int i, int *out, const char **param, attnd_err *err) {
    const json_t *v = json_object_get(o, key);
    if (!v) return bad(param, err, "'ablate[%d]' needs '%s' (an index)", i, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 20)
        return bad(param, err, "'ablate[%d].%s' must be a non-negative integer", i, key);
    *out = (int)json_integer_value(v);
    return ATTND_OK;
}

/* Entry i: {"layer", "head", "mode"?, "scale"?} and nothing else. */
static attnd_status parse_entry(const json_t *o, int i, engine_ablation_head *h, const char **param, attnd_err *err) {
    if (!json_is_object(o)) return bad(param, err, "'ablate[%d]' must be an object {\"layer\", \"head\"%s}", i, "");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (strcmp(key, "layer") && strcmp(key, "head") && strcmp(key, "mode") && strcmp(key, "scale"))
            return bad(param, err, "'ablate[%d]' has an unknown key '%.40s' (layer, head, mode, scale)", i, key);
    }
    *h = (engine_ablation_head){.mode = ENGINE_ABLATE_ZERO, .scale = 0};
    attnd_status st;
    if ((st = get_index(o, "layer", i, &h->layer, param, err)) || (st = get_index(o, "head", i, &h->head, param, err)))
        return st;
    const json_t *m = json_object_get(o, "mode");
    if (m && !json_is_null(m)) {
        const char *s = json_string_value(m);
        if (!s || (strcmp(s, "zero") && strcmp(s, "mean")))
            return bad(param, err, "'ablate[%d].mode' must be \"zero\" or \"mean\"%s", i, "");
        h->mode = !strcmp(s, "mean") ? ENGINE_ABLATE_MEAN : ENGINE_ABLATE_ZERO;
    }
    const json_t *sc = json_object_get(o, "scale");
    if (sc && !json_is_null(sc)) {
        double x = json_is_number(sc) ? json_number_value(sc) : NAN;
        if (!isfinite(x) || fabs(x) > 1e6)
            return bad(param, err, "'ablate[%d].scale' must be a number within +-1e6 (0 = removed, 1 = unchanged)%s", i,
                       "");
        h->scale = (float)x;
    }
    return ATTND_OK;
}

attnd_status ablate_api_parse(const json_t *body, engine_ablation_head **heads, int *n, const char **param,
                              attnd_err *err) {
    *heads = NULL;
    *n = 0;
    const json_t *a = json_is_object(body) ? json_object_get(body, "ablate") : NULL;
    if (!a || json_is_null(a)) return ATTND_OK;
    if (!json_is_array(a)) {
        *param = "ablate";
        return attnd_fail(err, ATTND_ERR_INVALID, "'ablate' must be a list of {\"layer\", \"head\", \"mode\", \"scale\"}");
    }
    size_t cnt = json_array_size(a);
    if (cnt == 0) return ATTND_OK;
    if (cnt > ABLATE_API_MAX) {
        *param = "ablate";
        return attnd_fail(err, ATTND_ERR_INVALID, "'ablate' lists %zu heads; at most %d", cnt, ABLATE_API_MAX);
    }
    engine_ablation_head *h = malloc(sizeof(*h) * cnt);
    if (!h) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < cnt; i++) {
        attnd_status st = parse_entry(json_array_get(a, i), (int)i, &h[i], param, err);
        for (size_t k = 0; st == ATTND_OK && k < i; k++)
            if (h[k].layer == h[i].layer && h[k].head == h[i].head) {
                *param = "ablate";
                st = attnd_fail(err, ATTND_ERR_INVALID, "'ablate[%d]' repeats ablate[%d] (layer %d, head %d)", (int)i,
                                (int)k, h[i].layer, h[i].head);
            }
        if (st != ATTND_OK) {
            free(h);
            return st;
        }
    }
    *heads = h;
    *n = (int)cnt;
    return ATTND_OK;
}

attnd_status ablate_api_check(const model_info *mi, const engine_ablation_head *heads, int n, attnd_err *err) {
    /* mean storage is the scheduler's: checked here without it */
    for (int i = 0; i < n; i++) {
        engine_ablation_head h = heads[i];
        h.mode = ENGINE_ABLATE_ZERO;
        attnd_status st = engine_ablation_check(mi, &(engine_ablation){.heads = &h, .n = 1}, err);
        if (st != ATTND_OK) {
            char why[sizeof(err->msg)];
            const char *colon = strchr(err->msg, ':');
            snprintf(why, sizeof(why), "%s", colon ? colon + 1 : err->msg);
            return attnd_fail(err, st, "'ablate[%d]':%s", i, why);
        }
    }
    return ATTND_OK;
}

json_t *ablate_api_json(const engine_ablation_head *heads, int n) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        const engine_ablation_head *h = &heads[i];
        json_t *o = json_pack("{s:i, s:i, s:s, s:f}", "layer", (json_int_t)h->layer, "head", (json_int_t)h->head, "mode",
                              h->mode == ENGINE_ABLATE_MEAN ? "mean" : "zero", "scale", (double)h->scale);
        if (json_array_append_new(arr, o)) json_decref(arr), arr = NULL;
    }
    return arr;
}

// ---- "measure": "ablation" -------------------------------------------------------------------

static attnd_status field_bad(const char **param, const char *field, attnd_err *err, const char *msg) {
    *param = field;
    return attnd_fail(err, ATTND_ERR_INVALID, "%s", msg);
}

/* The mode, scale and start of the sweep's ablation. */
static attnd_status parse_sweep_ablation(const json_t *body, ablate_measure *out, const char **param, attnd_err *err) {
    const json_t *v = json_object_get(body, "ablate_from");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 24)
            return field_bad(param, "ablate_from", err, "'ablate_from' must be a position (0 = every position)");
        out->from = (int)json_integer_value(v);
    }
    v = json_object_get(body, "ablate_mode");
    if (v && !json_is_null(v)) {
        const char *s = json_string_value(v);
        if (!s || (strcmp(s, "zero") && strcmp(s, "mean")))
            return field_bad(param, "ablate_mode", err, "'ablate_mode' must be \"zero\" or \"mean\"");
        out->mode = !strcmp(s, "mean") ? ENGINE_ABLATE_MEAN : ENGINE_ABLATE_ZERO;
    }
    v = json_object_get(body, "ablate_scale");
    if (v && !json_is_null(v)) {
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!isfinite(x) || fabs(x) > 1e6)
            return field_bad(param, "ablate_scale", err, "'ablate_scale' must be a number within +-1e6");
        out->scale = (float)x;
    }
    return ATTND_OK;
}

attnd_status ablate_api_parse_measure(const json_t *body, ablate_measure *out, const char **param, attnd_err *err) {
    *out = (ablate_measure){.target_position = -1, .from = -1};
    const json_t *m = json_object_get(body, "measure");
    static const char *const only[] = {"target_position", "target_token", "ablate_from", "ablate_mode", "ablate_scale"};
    if (!m || json_is_null(m)) {
        for (size_t i = 0; i < ATTND_ARRAY_LEN(only); i++)
            if (json_object_get(body, only[i]))
                return field_bad(param, only[i], err, "this field belongs to \"measure\": \"ablation\"");
        return ATTND_OK;
    }
    if (!json_is_string(m) || strcmp(json_string_value(m), "ablation"))
        return field_bad(param, "measure", err, "'measure' must be \"ablation\"");
    out->on = true;
    const json_t *tp = json_object_get(body, "target_position"), *tt = json_object_get(body, "target_token");
    if (tp && !json_is_null(tp)) {
        if (!json_is_integer(tp) || json_integer_value(tp) < 1 || json_integer_value(tp) > 1 << 24)
            return field_bad(param, "target_position", err, "'target_position' must be a prompt position >= 1");
        out->target_position = (int)json_integer_value(tp);
    }
    if (tt && !json_is_null(tt)) {
        if (!json_is_string(tt) && !json_is_integer(tt))
            return field_bad(param, "target_token", err, "'target_token' must be a token id or its text");
        if (out->target_position >= 0)
            return field_bad(param, "target_token", err, "give 'target_position' or 'target_token', not both");
        out->target_token = tt;
    }
    return parse_sweep_ablation(body, out, param, err);
}

/* The target token's id from m->target_token (an id, or a text of one token), or -1. */
static attnd_status target_id(const ablate_measure *m, const tokenizer *tok, int32_t *id, const char **param,
                              attnd_err *err) {
    *id = -1;
    if (!m->target_token) return ATTND_OK;
    if (json_is_integer(m->target_token)) {
        json_int_t v = json_integer_value(m->target_token);
        if (v < 0 || v >= tok_n_vocab(tok))
            return field_bad(param, "target_token", err, "'target_token' is outside the vocabulary");
        *id = (int32_t)v;
        return ATTND_OK;
    }
    const char *s = json_string_value(m->target_token);
    size_t len = json_string_length(m->target_token);
    /* a token spelled exactly so (" States", "."): the last such, a merged piece rather than the
     * byte-fallback one the vocabulary starts with */
    for (int32_t v = tok_n_vocab(tok) - 1; v >= 0; v--) {
        const char *b;
        size_t bn;
        if (!tok_is_control(tok, v) && tok_token_bytes(tok, v, false, &b, &bn) && bn == len && !memcmp(b, s, len)) {
            *id = v;
            return ATTND_OK;
        }
    }
    int32_t *ids = NULL;
    size_t n = 0;
    attnd_status st = tok_encode(tok, s, len, false, false, &ids, &n, err);
    if (st == ATTND_OK && n == 1) *id = ids[0];
    else if (st == ATTND_OK) {
        *param = "target_token";
        st = attnd_fail(err, ATTND_ERR_INVALID, "'target_token' encodes to %zu tokens%s; give one token (or its id)", n,
                        n > 1 ? " (the first is its start)" : "");
    } else *param = "target_token";
    free(ids);
    return st;
}

attnd_status ablate_api_sweep_params(const ablate_measure *m, const tokenizer *tok, const int32_t *ids, int n,
                                     ablate_sweep_params *p, const char **param, attnd_err *err) {
    *p = (ablate_sweep_params){.tokens = ids, .n_tokens = n, .mode = m->mode, .scale = m->scale};
    attnd_status st = target_id(m, tok, &p->target, param, err);
    if (st) return st;
    if (m->target_position >= 0) {
        if (m->target_position >= n) {
            *param = "target_position";
            return attnd_fail(err, ATTND_ERR_INVALID, "'target_position' %d is outside the prompt's 1..%d",
                              m->target_position, n - 1);
        }
        p->n_tokens = m->target_position;
        p->target = ids[m->target_position];
    }
    p->from = m->from >= 0 ? m->from : p->n_tokens - 1;
    if (p->from >= p->n_tokens) {
        *param = "ablate_from";
        return attnd_fail(err, ATTND_ERR_INVALID, "'ablate_from' %d is after the measured position %d", p->from,
                          p->n_tokens - 1);
    }
    return ATTND_OK;
}

/* {"id", "text"} of one token (new reference, NULL when out of memory). */
static json_t *token_json(const tokenizer *tok, int32_t id) {
    json_t *arr = attn_api_tokens(tok, &id, 1), *o = arr ? json_incref(json_array_get(arr, 0)) : NULL;
    json_decref(arr);
    return o;
}

/* "heads": [{"layer", "head", "delta_logprob", "kl", "top"}, ...] */
static json_t *heads_json(const tokenizer *tok, const ablate_sweep_result *r) {
    json_t *arr = json_array();
    for (int c = 0; arr && c < r->n_layer * r->n_head; c++) {
        json_t *o = json_pack("{s:i, s:i, s:f, s:f, s:o}", "layer", (json_int_t)(c / r->n_head), "head",
                              (json_int_t)(c % r->n_head), "delta_logprob", r->dlogprob[c], "kl", r->kl[c], "top",
                              token_json(tok, r->top[c]));
        if (json_array_append_new(arr, o)) json_decref(arr), arr = NULL;
    }
    return arr;
}

json_t *ablate_api_sweep_json(const char *model_name, const tokenizer *tok, const ablate_sweep_params *p,
                              int n_prompt, int target_position, const ablate_sweep_result *r) {
    json_t *t = token_json(tok, r->target);
    json_t *target = t ? json_pack("{s:o, s:i, s:O, s:f}", "position",
                                   target_position >= 0 ? json_integer(target_position) : json_null(), "id",
                                   (json_int_t)r->target, "text", json_object_get(t, "text"), "logprob",
                                   r->base_logprob)
                       : NULL;
    json_decref(t);
    json_t *cost = json_pack("{s:f, s:i, s:i, s:i, s:I}", "wall_ms", r->wall_ms, "sequences", (json_int_t)r->n_sequences,
                             "batch_size", (json_int_t)r->batch_seqs, "batches", (json_int_t)r->n_batches,
                             "tokens_evaluated", (json_int_t)r->n_evaluated);
    /* "o" steals each value, also when json_pack fails */
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:o, s:o, s:o, s:i, s:s, s:f, s:o, s:o}", "object",
                     "attention.ablation", "model", model_name ? model_name : "", "n_layer", (json_int_t)r->n_layer,
                     "n_head", (json_int_t)r->n_head, "n_prompt", (json_int_t)n_prompt, "tokens",
                     attn_api_tokens(tok, p->tokens, p->n_tokens), "target", target, "predicted",
                     token_json(tok, r->base_top), "ablate_from", (json_int_t)p->from, "ablate_mode",
                     p->mode == ENGINE_ABLATE_MEAN ? "mean" : "zero", "ablate_scale", (double)p->scale, "heads",
                     heads_json(tok, r), "cost", cost);
}
