/*
 * attn_api.c — JSON shapes of attention inspection (see attn_api.h). The response is built
 * row by row from the capture's storage; with the cap checked first it holds at most
 * max_values weights.
 */
#include "attn_api.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "attnd/utf8.h"

// ---- request --------------------------------------------------------------------------------

static attnd_status bad(const char **param, const char *field, attnd_err *err, const char *msg) {
    *param = field;
    return attnd_fail(err, ATTND_ERR_INVALID, "%s", msg);
}

/* An index list: a JSON integer or an array of them; absent or null leaves *list NULL (all). */
static attnd_status parse_list(const json_t *body, const char *field, int **list, int *n, const char **param,
                               attnd_err *err) {
    const json_t *v = json_object_get(body, field);
    if (!v || json_is_null(v)) return ATTND_OK;
    if (json_is_integer(v)) v = NULL; /* one index: handled below as a one-element list */
    else if (!json_is_array(v) || json_array_size(v) == 0) {
        *param = field;
        return attnd_fail(err, ATTND_ERR_INVALID, "'%s' must be a non-empty list of indices (omit it for all)", field);
    }
    size_t cnt = v ? json_array_size(v) : 1;
    if (cnt > 65536) return bad(param, field, err, "too many indices");
    *list = malloc(sizeof(int) * cnt);
    if (!*list) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    *n = (int)cnt;
    for (size_t i = 0; i < cnt; i++) {
        const json_t *e = v ? json_array_get(v, i) : json_object_get(body, field);
        json_int_t x = json_is_integer(e) ? json_integer_value(e) : -1;
        if (!json_is_integer(e) || x < 0 || x > 1 << 20) {
            *param = field;
            return attnd_fail(err, ATTND_ERR_INVALID, "'%s' must hold non-negative integers", field);
        }
        (*list)[i] = (int)x;
    }
    return ATTND_OK;
}

/* "weights", "logit_lens" and "experts" (the range of logit_lens, and whether the model has
 * experts, are checked against the model later). */
static attnd_status parse_inspection(const json_t *body, attn_api_request *out, const char **param, attnd_err *err) {
    const json_t *w = json_object_get(body, "weights");
    if (w && !json_is_null(w)) {
        const char *s = json_string_value(w);
        if (!s || (strcmp(s, "attention") && strcmp(s, "norm")))
            return bad(param, "weights", err, "'weights' must be \"attention\" or \"norm\"");
        out->weights = !strcmp(s, "norm") ? ATTN_WEIGHTS_NORM : ATTN_WEIGHTS_ATTENTION;
    }
    const json_t *k = json_object_get(body, "logit_lens");
    if (k && !json_is_null(k)) {
        if (!json_is_integer(k) || json_integer_value(k) < 0 || json_integer_value(k) > 1 << 24)
            return bad(param, "logit_lens", err, "'logit_lens' must be a non-negative integer (tokens per position)");
        out->lens_k = (int)json_integer_value(k);
    }
    const json_t *x = json_object_get(body, "experts");
    if (x && !json_is_null(x)) {
        if (!json_is_boolean(x)) return bad(param, "experts", err, "'experts' must be true or false");
        out->experts = json_is_true(x);
    }
    return ATTND_OK;
}

attnd_status attn_api_parse(const json_t *body, attn_api_request *out, const char **param, attnd_err *err) {
    memset(out, 0, sizeof(*out));
    *param = NULL;
    attnd_status st;
    if ((st = parse_list(body, "layers", &out->layers, &out->n_layers, param, err))) return st;
    if ((st = parse_list(body, "heads", &out->heads, &out->n_heads, param, err))) return st;
    const json_t *k = json_object_get(body, "top_k");
    if (k && !json_is_null(k)) {
        if (!json_is_integer(k) || json_integer_value(k) < 0 || json_integer_value(k) > 1 << 24)
            return bad(param, "top_k", err, "'top_k' must be a non-negative integer (0 = whole rows)");
        out->top_k = (int)json_integer_value(k);
    }
    return parse_inspection(body, out, param, err);
}

void attn_api_request_free(attn_api_request *r) {
    if (!r) return;
    free(r->layers);
    free(r->heads);
    memset(r, 0, sizeof(*r));
}

attn_capture_params attn_api_params(const attn_api_request *r, int n_positions) {
    return (attn_capture_params){.layers = r->layers, .n_layers = r->n_layers, .heads = r->heads,
                                 .n_heads = r->n_heads, .top_k = r->top_k, .n_positions = n_positions,
                                 .weights = r->weights, .lens_k = r->lens_k, .experts = r->experts,
                                 .deltanet = true};
}

/* The most JSON text one weight takes: "1.23457e-05," whole, "[1048576,1.23457e-05]," as a pair;
 * a row adds "[]," and a head its object's keys. */
enum { ATTN_WEIGHT_BYTES = 12, ATTN_PAIR_BYTES = 22, ATTN_ROW_BYTES = 3, ATTN_HEAD_BYTES = 48 };

uint64_t attn_api_bytes(const model_info *mi, const attn_capture_params *p) {
    uint64_t layers = p->layers ? (uint64_t)p->n_layers : (uint64_t)mi->n_layer;
    uint64_t blocks = attn_capture_blocks(mi, p); /* (layer, head) pairs */
    uint64_t per = p->top_k ? ATTN_PAIR_BYTES : ATTN_WEIGHT_BYTES;
    if (mi->n_recurrent_layers) per += 1; /* a signed weight's "-" */
    return attn_capture_count(mi, p) * per + blocks * ((uint64_t)p->n_positions * ATTN_ROW_BYTES + ATTN_HEAD_BYTES) +
           (uint64_t)p->n_positions * 64 + /* the tokens list: id and a short text each */
           layers * (uint64_t)p->n_positions * ((uint64_t)p->lens_k * ATTN_PAIR_BYTES + ATTN_ROW_BYTES) +
           (p->experts ? layers * (uint64_t)p->n_positions * ((uint64_t)mi->n_expert_used * ATTN_PAIR_BYTES + ATTN_ROW_BYTES) : 0);
}

attnd_status attn_api_check(const model_info *mi, const attn_capture_params *p, uint64_t max_values,
                            uint64_t max_bytes, const char **param, attnd_err *err) {
    const char *field = NULL;
    attnd_status st = attn_capture_check(mi, p, &field, err);
    if (st) {
        /* an encoder's positions are its prompts' tokens; a decoder's also max_tokens */
        *param = field && (!strcmp(field, "inputs") || (p->inputs && !strcmp(field, "n_positions"))) ? "prompt"
                 : field && !strcmp(field, "n_positions") ? "max_tokens"
                                                          : field;
        return st;
    }
    uint64_t n = attn_capture_count(mi, p);
    uint64_t bytes = attn_api_bytes(mi, p);
    if (max_bytes && bytes > max_bytes) {
        *param = !p->layers ? "layers" : !p->heads ? "heads" : "prompt";
        return attnd_fail(err, ATTND_ERR_INVALID,
                          "this answer would take up to %llu bytes (%llu weights, %d positions); the server sends at "
                          "most %llu (attention_max_bytes): narrow 'layers' or 'heads', lower 'top_k', or shorten "
                          "the prompt or max_tokens",
                          (unsigned long long)bytes, (unsigned long long)n, p->n_positions,
                          (unsigned long long)max_bytes);
    }
    if (max_values && n > max_values) {
        /* point at the first field that would narrow the ask */
        *param = !p->layers ? "layers" : !p->heads ? "heads" : !p->top_k ? "top_k" : "prompt";
        return attnd_fail(err, ATTND_ERR_INVALID,
                          "this asks for %llu attention weights (%d positions); the server returns at most %llu "
                          "(attention_max_weights): narrow 'layers' or 'heads', set 'top_k', or shorten the prompt "
                          "or max_tokens",
                          (unsigned long long)n, p->n_positions, (unsigned long long)max_values);
    }
    uint64_t dn = attn_capture_dn_weights(mi, p);
    if (max_values && dn > max_values) { /* top_k: the rows are still made whole */
        *param = !p->layers ? "layers" : !p->heads ? "heads" : "prompt";
        return attnd_fail(err, ATTND_ERR_INVALID,
                          "the Gated DeltaNet layers asked for make %llu effective weights (%d positions; each row "
                          "is computed whole, also with top_k); the server computes at most %llu "
                          "(attention_max_weights): narrow 'layers' or 'heads', or shorten the prompt or max_tokens",
                          (unsigned long long)dn, p->n_positions, (unsigned long long)max_values);
    }
    *param = NULL;
    return ATTND_OK;
}

// ---- response -------------------------------------------------------------------------------

json_t *attn_api_tokens(const tokenizer *tok, const int32_t *ids, int n) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        const char *b = "";
        size_t len = 0;
        if (!tok_token_bytes(tok, ids[i], true, &b, &len)) len = 0;
        size_t clean_n;
        char *clean = utf8_sanitize(b, len, true, &clean_n);
        json_t *o = clean ? json_pack("{s:i, s:s%}", "id", (json_int_t)ids[i], "text", clean, clean_n) : NULL;
        free(clean);
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* One row as a JSON array: weights, or [position, weight] pairs (new reference). */
static json_t *row_json(const attn_capture *c, int li, int hi, int pos) {
    const float *w;
    const int32_t *ix;
    int n = attn_capture_row(c, li, hi, pos, &w, &ix);
    json_t *row = json_array();
    for (int j = 0; row && j < n; j++) {
        json_t *v = ix ? json_pack("[i, f]", (json_int_t)ix[j], (double)w[j]) : json_real(w[j]);
        if (!v || json_array_append_new(row, v)) {
            json_decref(row);
            return NULL;
        }
    }
    return row;
}

/* {"layer", "head", "weights": [...]} for the li-th layer and hi-th head (new reference). */
static json_t *head_json(const attn_capture *c, bool hybrid, int li, int hi, int first, int n_rows) {
    json_t *rows = json_array();
    for (int r = 0; rows && r < n_rows; r++)
        if (json_array_append_new(rows, row_json(c, li, hi, first + r))) {
            json_decref(rows);
            rows = NULL;
        }
    if (!rows) return NULL;
    json_t *o = json_pack("{s:i, s:i}", "layer", (json_int_t)attn_capture_layer(c, li), "head",
                          (json_int_t)attn_capture_head(c, hi));
    if (o && hybrid && attn_capture_layer_deltanet(c, li))
        json_object_update_new(o, json_pack("{s:s, s:b, s:i}", "kind", "deltanet", "effective", true, "from",
                                            (json_int_t)attn_capture_layer_from(c, li)));
    else if (o && hybrid) json_object_set_new(o, "kind", json_string("attention"));
    if (!o || json_object_set_new(o, "weights", rows)) { /* set_new steals rows, also when it fails */
        if (!o) json_decref(rows);
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Per position of a selected layer: n (id, value) pairs, most probable first. */
typedef int (*pairs_fn)(const attn_capture *c, int li, int pos, const int32_t **ids, const float **v);

static int lens_pairs(const attn_capture *c, int li, int pos, const int32_t **ids, const float **v) {
    return attn_capture_lens(c, li, pos, v, ids);
}

/* [{"layer", key: [[[id, value], ...] per row]}] per selected layer (new reference; NULL when
 * out of memory): the logit lens ("top") and the experts ("routes"). */
static json_t *pairs_json(const attn_capture *c, int first, int n_rows, const char *key, pairs_fn get) {
    json_t *arr = json_array();
    for (int li = 0; arr && li < attn_capture_n_layers(c); li++) {
        json_t *rows = json_array();
        for (int r = 0; rows && r < n_rows; r++) {
            const float *p;
            const int32_t *ids;
            int k = get(c, li, first + r, &ids, &p);
            json_t *row = json_array();
            for (int i = 0; row && i < k; i++)
                if (json_array_append_new(row, json_pack("[i, f]", (json_int_t)ids[i], (double)p[i])))
                    json_decref(row), row = NULL;
            if (json_array_append_new(rows, row)) json_decref(rows), rows = NULL;
        }
        json_t *o = rows ? json_pack("{s:i, s:o}", "layer", (json_int_t)attn_capture_layer(c, li), key, rows) : NULL;
        if (json_array_append_new(arr, o)) json_decref(arr), arr = NULL;
    }
    return arr;
}

/* An encoder's [{"first", "n_tokens"}] per input (new reference; NULL when out of memory). */
static json_t *inputs_json(const attn_capture *c) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < attn_capture_n_inputs(c); i++) {
        int first, n = attn_capture_input(c, i, &first);
        if (json_array_append_new(arr, json_pack("{s:i, s:i}", "first", (json_int_t)first, "n_tokens", (json_int_t)n)))
            json_decref(arr), arr = NULL;
    }
    return arr;
}

json_t *attn_api_head(const char *model_name, const model_info *mi, const tokenizer *tok, const int32_t *ids,
                      int n_ids, int n_prompt, const attn_capture *c) {
    int first, n_rows = attn_capture_rows(c, &first);
    json_t *tokens = attn_api_tokens(tok, ids, n_ids);
    if (!tokens) return NULL;
    const char *kind = attn_capture_weights(c) == ATTN_WEIGHTS_NORM ? "norm" : "attention";
    /* "o" steals the array, also when json_pack fails. */
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:s, s:b, s:o}", "object", "attention", "model",
                          model_name ? model_name : "", "n_layer", (json_int_t)mi->n_layer, "n_head",
                          (json_int_t)mi->n_head, "n_prompt", (json_int_t)n_prompt, "first_row", (json_int_t)first,
                          "weights", kind, "causal", attn_capture_n_inputs(c) == 0, "tokens", tokens);
    if (o && attn_capture_n_inputs(c) && json_object_set_new(o, "inputs", inputs_json(c))) json_decref(o), o = NULL;
    if (o && mi->n_recurrent_layers && /* a hybrid model: which layers are DeltaNet, and their heads */
        json_object_update_new(o, json_pack("{s:i, s:i}", "n_value_heads", (json_int_t)mi->recurrent_heads,
                                            "full_attention_interval", (json_int_t)mi->recurrent_every)))
        json_decref(o), o = NULL;
    /* set_new steals the lens and the experts, also when it fails */
    if (o && attn_capture_lens_k(c) && json_object_set_new(o, "logit_lens", pairs_json(c, first, n_rows, "top", lens_pairs)))
        json_decref(o), o = NULL;
    if (o && attn_capture_n_experts(c) &&
        json_object_set_new(o, "experts", pairs_json(c, first, n_rows, "routes", attn_capture_experts)))
        json_decref(o), o = NULL;
    return o;
}

json_t *attn_api_response(const char *model_name, const model_info *mi, const tokenizer *tok, const int32_t *ids,
                          int n_ids, int n_prompt, const attn_capture *c) {
    int first, n_rows = attn_capture_rows(c, &first);
    json_t *heads = json_array();
    bool hybrid = attn_capture_hybrid(c);
    for (int li = 0; heads && li < attn_capture_n_layers(c); li++)
        for (int hi = 0; heads && hi < attn_capture_layer_heads(c, li); hi++)
            if (json_array_append_new(heads, head_json(c, hybrid, li, hi, first, n_rows))) {
                json_decref(heads);
                heads = NULL;
            }
    json_t *body = heads ? attn_api_head(model_name, mi, tok, ids, n_ids, n_prompt, c) : NULL;
    if (!body || json_object_set_new(body, "attention", heads)) { /* set_new steals heads */
        if (!body) json_decref(heads);
        json_decref(body);
        return NULL;
    }
    return body;
}

// ---- the answer as text, written straight from the capture ---------------------------------

/* A weight as jansson writes a real with ATTN_API_DIGITS digits: %g, and ".0" when that looks
 * like an integer, so both writers give the same text. */
static bool put_weight(buf *b, double w) {
    char t[32];
    int n = snprintf(t, sizeof(t), "%.*g", ATTN_API_DIGITS, w);
    if (!strpbrk(t, ".eEn")) n += snprintf(t + n, sizeof(t) - (size_t)n, ".0");
    char *e = strchr(t, 'e'); /* jansson writes the exponent without '+' or leading zeros: 4.8e-6 */
    if (e) {
        char *dst = e + 1 + (e[1] == '-'), *src = dst + (*dst == '+');
        while (*src == '0' && src[1]) src++;
        memmove(dst, src, strlen(src) + 1);
        n = (int)strlen(t);
    }
    return buf_append(b, t, (size_t)n);
}

/* "[...rows...]" of the li-th layer and hi-th head. */
static bool put_rows(buf *b, const attn_capture *c, int li, int hi, int first, int n_rows) {
    bool ok = buf_append(b, "[", 1);
    for (int r = 0; ok && r < n_rows; r++) {
        const float *w;
        const int32_t *ix;
        int n = attn_capture_row(c, li, hi, first + r, &w, &ix);
        ok = buf_append(b, r ? ",[" : "[", r ? 2 : 1);
        for (int j = 0; ok && j < n; j++) {
            if (j) ok = buf_append(b, ",", 1);
            if (ok && ix) ok = buf_printf(b, "[%d,", (int)ix[j]);
            if (ok) ok = put_weight(b, (double)w[j]);
            if (ok && ix) ok = buf_append(b, "]", 1);
        }
        if (ok) ok = buf_append(b, "]", 1);
    }
    return ok && buf_append(b, "]", 1);
}

char *attn_api_dump_with(const json_t *head, const attn_capture *c, size_t *len) {
    char *h = attn_api_dump(head);
    size_t hn = h ? strlen(h) : 0;
    if (!h || hn < 2 || h[hn - 1] != '}') {
        free(h);
        return NULL;
    }
    buf b;
    buf_init(&b);
    bool ok = buf_append(&b, h, hn - 1); /* the head's fields, then "attention" last */
    free(h);
    if (ok) ok = buf_puts(&b, hn > 2 ? ",\"attention\":[" : "\"attention\":[");
    int first, n_rows = attn_capture_rows(c, &first), k = 0;
    bool hybrid = attn_capture_hybrid(c);
    for (int li = 0; ok && li < attn_capture_n_layers(c); li++)
        for (int hi = 0; ok && hi < attn_capture_layer_heads(c, li); hi++, k++) {
            ok = buf_printf(&b, "%s{\"layer\":%d,\"head\":%d,", k ? "," : "", attn_capture_layer(c, li),
                            attn_capture_head(c, hi));
            if (ok && hybrid && attn_capture_layer_deltanet(c, li)) /* the keys in jansson's order, as head_json */
                ok = buf_printf(&b, "\"kind\":\"deltanet\",\"effective\":true,\"from\":%d,",
                                attn_capture_layer_from(c, li));
            else if (ok && hybrid) ok = buf_puts(&b, "\"kind\":\"attention\",");
            if (ok) ok = buf_puts(&b, "\"weights\":");
            if (ok) ok = put_rows(&b, c, li, hi, first, n_rows);
            if (ok) ok = buf_append(&b, "}", 1);
        }
    if (ok) ok = buf_append(&b, "]}", 2);
    if (!ok) {
        buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

char *attn_api_dump(const json_t *body) { return json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(ATTN_API_DIGITS)); }
