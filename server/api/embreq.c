/*
 * embreq.c — the embedding request's body and answer (see embreq.h).
 */
#include "embreq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oai_field.h"

void embreq_free(embreq *r) {
    if (!r) return;
    for (int i = 0; i < r->n_items; i++) free(r->items[i].ids);
    free(r->items);
    r->items = NULL;
    r->n_items = 0;
}

// ---- the inputs ---------------------------------------------------------------------------------

/* Token ids of one input from a JSON array of integers (all checked against n_vocab). */
static attnd_status parse_ids(const json_t *a, int n_vocab, embreq_item *it, const char **param, attnd_err *err) {
    size_t n = json_array_size(a);
    if (n == 0) return oai_bad(param, "input", err, "'input' holds an empty array of token ids");
    it->ids = malloc(n * sizeof(*it->ids));
    if (!it->ids) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    it->n_ids = (int)n;
    for (size_t k = 0; k < n; k++) {
        const json_t *v = json_array_get(a, k);
        if (!json_is_integer(v)) return oai_bad(param, "input", err, "'input' mixes token ids with other values");
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= n_vocab)
            return oai_bad(param, "input", err, "token id %lld is outside the vocabulary (0..%d)", (long long)id, n_vocab - 1);
        it->ids[k] = (int32_t)id;
    }
    return ATTND_OK;
}

static attnd_status add_items(embreq *r, size_t n, int max_inputs, const char *name, const char **param, attnd_err *err) {
    if (n > (size_t)max_inputs)
        return oai_bad(param, name, err, "'%s' holds %zu inputs; this server takes at most %d per request (embed_max_inputs)",
                       name, n, max_inputs);
    if (n == 0) return ATTND_OK;
    r->items = calloc(n, sizeof(*r->items));
    if (!r->items) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    r->n_items = (int)n;
    return ATTND_OK;
}

/* input: a string, an array of strings and id arrays, or one array of ids (strings_only: Ollama,
 * which takes no ids). */
static attnd_status parse_input(embreq *r, const json_t *in, const char *name, bool strings_only, int max_inputs,
                                int n_vocab, const char **param, attnd_err *err) {
    attnd_status st;
    if (json_is_string(in)) {
        if ((st = add_items(r, 1, max_inputs, name, param, err)) != ATTND_OK) return st;
        r->items[0] = (embreq_item){.text = json_string_value(in), .len = json_string_length(in)};
        return ATTND_OK;
    }
    const char *want = strings_only ? "a string or an array of strings" : "a string, an array of strings or token ids, or an array of token id arrays";
    if (!json_is_array(in)) return oai_bad(param, name, err, "'%s' must be %s", name, want);
    size_t n = json_array_size(in);
    if (n == 0 && !strings_only) return oai_bad(param, name, err, "'%s' must not be empty", name);
    if (!strings_only && json_is_integer(json_array_get(in, 0))) { /* one input given as ids */
        if ((st = add_items(r, 1, max_inputs, name, param, err)) != ATTND_OK) return st;
        return parse_ids(in, n_vocab, &r->items[0], param, err);
    }
    if ((st = add_items(r, n, max_inputs, name, param, err)) != ATTND_OK) return st;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(in, i);
        if (json_is_string(v)) {
            r->items[i] = (embreq_item){.text = json_string_value(v), .len = json_string_length(v)};
        } else if (!strings_only && json_is_array(v)) {
            if ((st = parse_ids(v, n_vocab, &r->items[i], param, err)) != ATTND_OK) return st;
        } else {
            return oai_bad(param, name, err, "'%s'[%zu] must be %s", name, i, strings_only ? "a string" : "a string or an array of token ids");
        }
    }
    return ATTND_OK;
}

// ---- the request --------------------------------------------------------------------------------

static attnd_status parse_dimensions(const json_t *body, embreq *r, const char **param, attnd_err *err) {
    const json_t *d = oai_field(body, "dimensions");
    if (!d) return ATTND_OK;
    if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > 1 << 20)
        return oai_bad(param, "dimensions", err, "'dimensions' must be a positive integer");
    r->dimensions = (int)json_integer_value(d);
    return ATTND_OK;
}

/* OpenAI's (and llama-server's) fields beside input. */
static attnd_status parse_openai(const json_t *body, embreq *r, const char **param, attnd_err *err) {
    const char *fmt = NULL;
    attnd_status st = oai_get_string(body, "encoding_format", &fmt, param, err);
    if (st != ATTND_OK) return st;
    if (fmt && strcmp(fmt, "float") && strcmp(fmt, "base64"))
        return oai_bad(param, "encoding_format", err, "'encoding_format' must be \"float\" or \"base64\"");
    r->base64 = fmt && !strcmp(fmt, "base64");
    if ((st = oai_get_string(body, "user", NULL, param, err)) != ATTND_OK) return st;
    const json_t *nm = oai_field(body, "embd_normalize");
    if (nm) {
        if (!json_is_integer(nm) || json_integer_value(nm) < -1 || json_integer_value(nm) > 64)
            return oai_bad(param, "embd_normalize", err, "'embd_normalize' must be an integer from -1 to 64");
        r->norm = (int)json_integer_value(nm);
    }
    return ATTND_OK;
}

attnd_status embreq_parse(const json_t *body, embreq_api api, int max_inputs, int n_vocab, embreq *out,
                          const char **param, attnd_err *err) {
    *out = (embreq){.api = api, .model = "", .norm = api == EMBREQ_OLLAMA_LEGACY ? EMBREQ_NORM_NONE : EMBREQ_NORM_L2,
                    .truncate = api != EMBREQ_OPENAI};
    *param = NULL;
    if (!json_is_object(body)) return oai_bad(param, "body", err, "the body must be a JSON object");
    attnd_status st = oai_get_string(body, "model", &out->model, param, err);
    if (st != ATTND_OK) return st;
    if (api != EMBREQ_OPENAI && !out->model[0]) return oai_bad(param, "model", err, "model is required");
    if ((st = oai_get_bool(body, "truncate", &out->truncate, param, err)) != ATTND_OK) return st;
    if (api == EMBREQ_OLLAMA_LEGACY) { /* prompt → one embedding; an empty prompt gives an empty one */
        const char *p = NULL;
        if ((st = oai_get_string(body, "prompt", &p, param, err)) != ATTND_OK) return st;
        if (!p || !*p) return ATTND_OK;
        return parse_input(out, json_object_get(body, "prompt"), "prompt", true, max_inputs, n_vocab, param, err);
    }
    if ((st = parse_dimensions(body, out, param, err)) != ATTND_OK) return st;
    const json_t *in = oai_field(body, "input");
    if (api == EMBREQ_OLLAMA) return in ? parse_input(out, in, "input", true, max_inputs, n_vocab, param, err) : ATTND_OK;
    if ((st = parse_openai(body, out, param, err)) != ATTND_OK) return st;
    if (!in) return oai_bad(param, "input", err, "'input' is required");
    return parse_input(out, in, "input", false, max_inputs, n_vocab, param, err);
}

// ---- vectors ------------------------------------------------------------------------------------

int embreq_finish(const float *raw, int dim, int dims, int norm, float *out) {
    int n = dims > 0 && dims < dim ? dims : dim;
    double sum = 0;
    if (norm == EMBREQ_NORM_NONE) {
        sum = 1;
    } else if (norm == EMBREQ_NORM_MAXABS) { /* llama-server's: the largest component becomes 32760 */
        for (int i = 0; i < n; i++) sum = fmax(sum, fabs(raw[i]));
        sum /= 32760.0;
    } else if (norm == EMBREQ_NORM_L2) {
        for (int i = 0; i < n; i++) sum += (double)raw[i] * raw[i];
        sum = sqrt(sum);
    } else {
        for (int i = 0; i < n; i++) sum += pow(fabs(raw[i]), norm);
        sum = pow(sum, 1.0 / norm);
    }
    double scale = sum > 0 ? 1.0 / sum : 0.0;
    for (int i = 0; i < n; i++) out[i] = (float)(raw[i] * scale);
    return n;
}

char *embreq_base64(const void *p, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = p;
    char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;
    if (!s) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)b[i] << 16 | (i + 1 < n ? (unsigned)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        *o++ = A[v >> 18 & 63];
        *o++ = A[v >> 12 & 63];
        *o++ = i + 1 < n ? A[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? A[v & 63] : '=';
    }
    *o = 0;
    return s;
}

// ---- answers ------------------------------------------------------------------------------------

static json_t *float_array(const float *v, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* One vector as OpenAI's data entry: floats, or base64 of the little-endian float32 bytes. */
static json_t *openai_entry(const float *v, int dim, int index, bool base64) {
    json_t *e;
    if (base64) {
        unsigned char *le = malloc((size_t)dim * 4);
        for (int i = 0; le && i < dim; i++) { /* little-endian whatever the host's order */
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++) le[4 * i + k] = (unsigned char)(u >> (8 * k));
        }
        char *s = le ? embreq_base64(le, (size_t)dim * 4) : NULL;
        free(le);
        e = s ? json_string(s) : NULL;
        free(s);
    } else {
        e = float_array(v, dim);
    }
    if (!e) return NULL;
    return json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", index, "embedding", e);
}

json_t *embreq_answer(const embreq *r, const float *vecs, int dim, long n_tokens, const char *model,
                      long long total_ns) {
    const char *name = r->model && r->model[0] ? r->model : model;
    if (r->api == EMBREQ_OLLAMA_LEGACY) {
        json_t *v = r->n_items ? float_array(vecs, dim) : json_array();
        return v ? json_pack("{s:o}", "embedding", v) : NULL;
    }
    json_t *list = json_array();
    for (int i = 0; list && i < r->n_items; i++) {
        const float *v = vecs + (size_t)i * dim;
        json_t *e = r->api == EMBREQ_OPENAI ? openai_entry(v, dim, i, r->base64) : float_array(v, dim);
        if (!e || json_array_append_new(list, e)) {
            json_decref(list);
            return NULL;
        }
    }
    if (!list) return NULL;
    if (r->api == EMBREQ_OLLAMA)
        return json_pack("{s:s, s:o, s:I, s:i, s:I}", "model", name, "embeddings", list, "total_duration",
                         (json_int_t)total_ns, "load_duration", 0, "prompt_eval_count", (json_int_t)n_tokens);
    return json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", list, "model", name, "usage",
                     "prompt_tokens", (json_int_t)n_tokens, "total_tokens", (json_int_t)n_tokens);
}
