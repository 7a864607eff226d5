/*
 * ablate_api.c — the "ablate" request field (see ablate_api.h): a JSON list read into the
 * engine's ablation entries, every refusal naming the entry and key at fault.
 */
#include "ablate_api.h"

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
