/*
 * oai.c — validating OpenAI-style request bodies and shaping error bodies (see oai.h).
 * Strict: wrong types are refused (never coerced) and numbers are range-checked, because a
 * silently ignored field makes a client believe it got what it asked for.
 */
#include "oai.h"

#include "attnd/buf.h"
#include "attnd/utf8.h"
#include "ablate_api.h"
#include "json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOPS 16
#define MAX_STOP_LEN 256
#define MAX_BIAS 1024



static attnd_status get_num(const json_t *body, const char *name, double lo, double hi, float *out,
                            const char **param, attnd_err *err) {
    const json_t *v = oai_field(body, name);
    if (!v) return ATTND_OK;
    if (!json_is_number(v)) return oai_bad(param, name, err, "'%s' must be a number", name);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) return oai_bad(param, name, err, "'%s' must be between %g and %g", name, lo, hi);
    *out = (float)d;
    return ATTND_OK;
}

static attnd_status get_int(const json_t *body, const char *name, long long lo, long long hi, int *out,
                            const char **param, attnd_err *err) {
    const json_t *v = oai_field(body, name);
    if (!v) return ATTND_OK;
    if (!json_is_integer(v)) return oai_bad(param, name, err, "'%s' must be an integer", name);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return oai_bad(param, name, err, "'%s' must be between %lld and %lld", name, lo, hi);
    *out = (int)x;
    return ATTND_OK;
}



static attnd_status parse_stop(const json_t *body, oai_request *r, const char **param, attnd_err *err) {
    const json_t *v = oai_field(body, "stop");
    if (!v) return ATTND_OK;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
    if (n == (size_t)-1) return oai_bad(param, "stop", err, "'stop' must be a string or an array of strings");
    if (n > MAX_STOPS) return oai_bad(param, "stop", err, "'stop' has %zu entries; at most %d are allowed", n, MAX_STOPS);
    r->stops = calloc(n ? n : 1, sizeof(char *));
    if (!r->stops) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s)) return oai_bad(param, "stop", err, "'stop[%zu]' must be a string", i);
        size_t len = json_string_length(s);
        if (len == 0) return oai_bad(param, "stop", err, "'stop' strings must not be empty");
        if (len > MAX_STOP_LEN) return oai_bad(param, "stop", err, "'stop' strings may be at most %d bytes", MAX_STOP_LEN);
        r->stops[i] = strdup(json_string_value(s));
        if (!r->stops[i]) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        r->n_stops++;
    }
    return ATTND_OK;
}

static attnd_status parse_bias(const json_t *body, int n_vocab, oai_request *r, const char **param, attnd_err *err) {
    const json_t *v = oai_field(body, "logit_bias");
    if (!v) return ATTND_OK;
    if (!json_is_object(v)) return oai_bad(param, "logit_bias", err, "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(v);
    if (n > MAX_BIAS) return oai_bad(param, "logit_bias", err, "'logit_bias' has more than %d entries", MAX_BIAS);
    r->bias = calloc(n ? n : 1, sizeof(*r->bias));
    if (!r->bias) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (end == key || *end || id < 0 || id >= n_vocab)
            return oai_bad(param, "logit_bias", err, "'logit_bias' key '%.32s' is not a token id below %d", key, n_vocab);
        if (!json_is_number(val) || !isfinite(json_number_value(val)) || json_number_value(val) < -100 ||
            json_number_value(val) > 100)
            return oai_bad(param, "logit_bias", err, "'logit_bias' values must be numbers between -100 and 100");
        double b = json_number_value(val);
        /* -100 means "never" in OpenAI's API */
        r->bias[r->n_bias++] = (logit_bias){(int32_t)id, b <= -100 ? -INFINITY : (float)b};
    }
    r->sp.bias = r->bias;
    r->sp.n_bias = r->n_bias;
    return ATTND_OK;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined). */
static attnd_status parse_content(const json_t *c, size_t i, char **out, const char **param, attnd_err *err) {
    if (!c || json_is_null(c)) {
        *out = strdup("");
    } else if (json_is_string(c)) {
        *out = strdup(json_string_value(c));
    } else if (json_is_array(c)) {
        size_t total = 1;
        for (size_t k = 0; k < json_array_size(c); k++) {
            const json_t *part = json_array_get(c, k), *type = json_object_get(part, "type"),
                         *text = json_object_get(part, "text");
            if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text))
                return oai_bad(param, "messages", err, "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} parts are supported", i, k);
            total += json_string_length(text);
        }
        *out = malloc(total);
        if (*out) {
            size_t o = 0;
            for (size_t k = 0; k < json_array_size(c); k++) {
                const json_t *text = json_object_get(json_array_get(c, k), "text");
                memcpy(*out + o, json_string_value(text), json_string_length(text));
                o += json_string_length(text);
            }
            (*out)[o] = '\0';
        }
    } else {
        return oai_bad(param, "messages", err, "messages[%zu].content must be a string or an array of text parts", i);
    }
    return *out ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
}

/* The tool side of a history message, as the built-in families' models write it: an assistant's
 * tool_calls after its content, a tool result as the user turn that brings it back. *content is
 * replaced (owned); *role may become "user". */
static attnd_status tool_history(const json_t *msg, size_t i, const char **role, char **content, const char **param,
                                 attnd_err *err) {
    const json_t *calls = oai_field(msg, "tool_calls");
    bool tool = !strcmp(*role, "tool");
    if (!tool && !(calls && !strcmp(*role, "assistant"))) return ATTND_OK;
    buf b = {0};
    attnd_status st = ATTND_OK;
    if (tool) {
        *role = "user";
        if (!toolcall_render_result(*content, &b)) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    } else {
        bool ok = buf_puts(&b, *content) && (!**content || buf_puts(&b, "\n"));
        attnd_err e;
        st = ok ? toolcall_render_calls(calls, &b, &e) : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        if (st == ATTND_ERR_INVALID) st = oai_bad(param, "messages", err, "messages[%zu]: %s", i, e.msg);
    }
    if (st == ATTND_OK) {
        free(*content);
        *content = b.p ? b.p : strdup("");
        return *content ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    buf_free(&b);
    return st;
}

/* The messages as the built-in families see them (r->fmsgs): tool results and calls rendered as
 * text. Only built when some message needs it; describe_tools adds to it. */
static attnd_status family_messages(oai_request *r, bool always, const char **param, attnd_err *err) {
    bool need = always;
    for (size_t i = 0; i < r->n_msgs && !need; i++)
        need = !strcmp(r->msgs[i].role, "tool") || oai_field(json_array_get(r->messages_json, i), "tool_calls");
    if (!need || r->fmsgs) return ATTND_OK;
    if (!(r->fmsgs = calloc(r->n_msgs + 1, sizeof(*r->fmsgs)))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < r->n_msgs; i++) {
        const char *role = r->msgs[i].role;
        char *content = strdup(r->msgs[i].content);
        attnd_status st = content ? tool_history(json_array_get(r->messages_json, i), i, &role, &content, param, err)
                                  : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        if (st != ATTND_OK) {
            free(content);
            return st;
        }
        r->fmsgs[r->n_fmsgs++] = (chat_msg){role, content};
    }
    return ATTND_OK;
}

static attnd_status parse_messages(const json_t *body, oai_request *r, const char **param, attnd_err *err) {
    const json_t *m = oai_field(body, "messages");
    if (!m) return oai_bad(param, "messages", err, "'messages' is required");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return oai_bad(param, "messages", err, "'messages' must be a non-empty array");
    size_t n = json_array_size(m);
    r->msgs = calloc(n, sizeof(*r->msgs));
    r->messages_json = m;
    if (!r->msgs) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *msg = json_array_get(m, i);
        if (!json_is_object(msg)) return oai_bad(param, "messages", err, "messages[%zu] must be an object", i);
        const json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role)) return oai_bad(param, "messages", err, "messages[%zu].role must be a string", i);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "developer") &&
            strcmp(rs, "tool"))
            return oai_bad(param, "messages", err, "messages[%zu].role '%.32s' is not supported; the roles are %s", i, rs,
                       OAI_ROLES);
        char *content = NULL;
        attnd_status rc = parse_content(json_object_get(msg, "content"), i, &content, param, err);
        if (rc != ATTND_OK) {
            free(content);
            return rc;
        }
        r->msgs[i] = (chat_msg){rs, content};
        r->n_msgs++;
    }
    return ATTND_OK;
}

/* One prompt (named `name` in errors): a string, or a non-empty array of token ids. */
static attnd_status parse_one_prompt(const json_t *p, const char *name, int n_vocab, oai_prompt *out,
                                     attnd_err *err) {
    if (json_is_string(p)) {
        out->text = json_string_value(p);
        return ATTND_OK;
    }
    size_t n = json_is_array(p) ? json_array_size(p) : 0;
    if (n == 0)
        return attnd_fail(err, ATTND_ERR_INVALID, "'%s' must be a string or a non-empty array of token ids", name);
    out->ids = malloc(n * sizeof(int32_t));
    if (!out->ids) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(p, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s[%zu] is not a token id in 0..%d", name, i, n_vocab - 1);
        out->ids[i] = (int32_t)json_integer_value(t);
    }
    out->n_ids = (int)n;
    return ATTND_OK;
}

attnd_status oai_parse_prompts(const json_t *prompt, int n_vocab, int max_prompts, oai_prompt **out, int *n_out,
                               attnd_err *err) {
    *out = NULL;
    *n_out = 0;
    if (!prompt || json_is_null(prompt)) return attnd_fail(err, ATTND_ERR_INVALID, "'prompt' is required");
    bool list = json_is_array(prompt) && json_array_size(prompt) > 0 &&
                (json_is_string(json_array_get(prompt, 0)) || json_is_array(json_array_get(prompt, 0)));
    size_t n = list ? json_array_size(prompt) : 1;
    if (!json_is_string(prompt) && !json_is_array(prompt))
        return attnd_fail(err, ATTND_ERR_INVALID,
                          "'prompt' must be a string, an array of token ids, or an array of those");
    if (json_is_array(prompt) && json_array_size(prompt) == 0)
        return attnd_fail(err, ATTND_ERR_INVALID, "'prompt' must not be an empty array");
    if (n > (size_t)max_prompts)
        return attnd_fail(err, ATTND_ERR_INVALID, "'prompt' holds %zu prompts; this server takes at most %d per request",
                          n, max_prompts);
    oai_prompt *ps = calloc(n, sizeof(*ps));
    if (!ps) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    attnd_status st = ATTND_OK;
    for (size_t i = 0; i < n && st == ATTND_OK; i++) {
        char name[32] = "prompt";
        if (list) snprintf(name, sizeof(name), "prompt[%zu]", i);
        st = parse_one_prompt(list ? json_array_get(prompt, i) : prompt, name, n_vocab, &ps[i], err);
    }
    if (st != ATTND_OK) {
        oai_prompts_free(ps, (int)n);
        return st;
    }
    *out = ps;
    *n_out = (int)n;
    return ATTND_OK;
}

void oai_prompts_free(oai_prompt *ps, int n) {
    if (!ps) return;
    for (int i = 0; i < n; i++) free(ps[i].ids);
    free(ps);
}

static attnd_status parse_prompt(const json_t *body, int n_vocab, oai_request *r, const char **param,
                                 attnd_err *err) {
    attnd_status st = oai_parse_prompts(oai_field(body, "prompt"), n_vocab, OAI_MAX_PROMPTS, &r->prompts, &r->n_prompts, err);
    if (st != ATTND_OK) *param = "prompt";
    return st;
}

// ---- tools ----------------------------------------------------------------------------------

/* For the built-in families: appends the tools' description to the first system message, or
 * adds one in front (a Jinja template gets the tools themselves). */
static attnd_status describe_tools(oai_request *r, const char **param, attnd_err *err) {
    attnd_status st = family_messages(r, true, param, err);
    if (st != ATTND_OK) return st;
    size_t at = 0;
    while (at < r->n_fmsgs && strcmp(r->fmsgs[at].role, "system") && strcmp(r->fmsgs[at].role, "developer")) at++;
    buf b = {0};
    bool ok = at == r->n_fmsgs || buf_puts(&b, r->fmsgs[at].content);
    ok = ok && toolcall_system_prompt(&r->tools, &b);
    if (ok && at == r->n_fmsgs) {
        chat_msg *m = r->fmsgs; /* allocated with one spare entry */
        if ((ok = m != NULL)) {
            memmove(m + 1, m, r->n_fmsgs * sizeof(*m));
            r->n_fmsgs++, at = 0;
            /* the description starts with blank lines meant to follow a system text */
            memmove(b.p, b.p + 2, b.len - 1), b.len -= 2;
            m[0] = (chat_msg){"system", NULL};
        }
    }
    if (!ok) {
        buf_free(&b);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    free((char *)r->fmsgs[at].content);
    r->fmsgs[at].content = b.p;
    return ATTND_OK;
}

static attnd_status parse_tools(const json_t *body, bool chat, oai_request *r, const char **param, attnd_err *err) {
    attnd_status st = toolcall_parse_spec(body, false, &r->tools, param, err);
    if (st != ATTND_OK || json_array_size(r->tools.tools) == 0) return st;
    if (!chat) return oai_bad(param, "tools", err, "'tools' needs /v1/chat/completions (or /v1/responses)");
    if (r->tools.choice == TOOLCALL_NONE) return ATTND_OK;
    r->tools_json = oai_field(body, "tools");
    if ((st = describe_tools(r, param, err)) != ATTND_OK) return st;
    if (r->tools.choice == TOOLCALL_AUTO) return ATTND_OK;
    if (r->grammar)
        return oai_bad(param, "tool_choice", err, "'tool_choice' %s cannot be combined with a response format or grammar",
                   r->tools.choice == TOOLCALL_NAMED ? "naming a function" : "required");
    buf g = {0};
    attnd_err terr;
    st = toolcall_grammar(&r->tools, TOOLCALL_FMT_HERMES, &g, &terr);
    if (st == ATTND_OK) {
        if ((st = grammar_compile(&r->grammar, g.p, g.len, &terr)) == ATTND_OK) r->format = OAI_FORMAT_TOOL_CALL;
    }
    buf_free(&g);
    if (st == ATTND_ERR_NOMEM) return attnd_fail(err, st, "out of memory");
    if (st != ATTND_OK) return oai_bad(param, "tools", err, "'tools': a tool's parameters: %s", terr.msg);
    return ATTND_OK;
}

// ---- structured output ----------------------------------------------------------------------

/* Compiles GBNF text into r->grammar; a grammar that does not compile is the field's fault. */
static attnd_status compile_into(oai_request *r, oai_format f, const char *text, size_t len, const char *name,
                                 const char **param, attnd_err *err) {
    attnd_err gerr;
    attnd_status st = grammar_compile(&r->grammar, text, len, &gerr);
    if (st == ATTND_ERR_NOMEM) return attnd_fail(err, st, "out of memory");
    if (st != ATTND_OK) return oai_bad(param, name, err, "'%s': %s", name, gerr.msg);
    r->format = f;
    return ATTND_OK;
}

static attnd_status schema_into(oai_request *r, const json_t *schema, const char *name, const char **param,
                                attnd_err *err) {
    buf g = {0};
    attnd_err serr;
    attnd_status st = json_schema_to_gbnf(schema, &g, &serr);
    if (st == ATTND_OK) st = compile_into(r, OAI_FORMAT_JSON_SCHEMA, g.p, g.len, name, param, err);
    else if (st == ATTND_ERR_NOMEM) attnd_fail(err, st, "out of memory");
    else st = oai_bad(param, name, err, "'%s': %s", name, serr.msg);
    buf_free(&g);
    return st;
}

/* response_format (OpenAI), and grammar / json_schema (llama.cpp): at most one of them. */
static attnd_status parse_format(const json_t *body, oai_request *r, const char **param, attnd_err *err) {
    const json_t *rf = oai_field(body, "response_format"), *gr = oai_field(body, "grammar"),
                 *js = oai_field(body, "json_schema");
    const json_t *rft = json_object_get(rf, "type");
    bool rf_on = rf && !(json_is_string(rft) && !strcmp(json_string_value(rft), "text"));
    if ((rf_on + !!gr + !!js) > 1)
        return oai_bad(param, gr ? "grammar" : "json_schema", err,
                   "give at most one of 'response_format', 'grammar' and 'json_schema'");
    if (gr) {
        if (!json_is_string(gr)) return oai_bad(param, "grammar", err, "'grammar' must be a string (GBNF)");
        if (json_string_length(gr) == 0) return ATTND_OK; /* llama.cpp clients send "" for none */
        return compile_into(r, OAI_FORMAT_GRAMMAR, json_string_value(gr), json_string_length(gr), "grammar", param, err);
    }
    if (js) {
        if (!json_is_object(js) && !json_is_boolean(js))
            return oai_bad(param, "json_schema", err, "'json_schema' must be a JSON Schema object");
        return schema_into(r, js, "json_schema", param, err);
    }
    if (!rf) return ATTND_OK;
    if (!json_is_object(rf) || !json_is_string(rft))
        return oai_bad(param, "response_format", err, "'response_format' must be an object with a string 'type'");
    const char *t = json_string_value(rft);
    if (!strcmp(t, "text")) return ATTND_OK;
    if (!strcmp(t, "json_object")) {
        const char *any = json_schema_any_object_gbnf();
        attnd_status st = compile_into(r, OAI_FORMAT_JSON_OBJECT, any, strlen(any), "response_format", param, err);
        return st;
    }
    if (strcmp(t, "json_schema"))
        return oai_bad(param, "response_format", err,
                   "'response_format.type' '%.32s' is not one of text, json_object, json_schema", t);
    const json_t *spec = json_object_get(rf, "json_schema"), *schema = json_object_get(spec, "schema");
    if (!json_is_object(spec))
        return oai_bad(param, "response_format", err, "'response_format.json_schema' must be an object with a 'schema'");
    if (!schema || json_is_null(schema)) { /* a schema-less json_schema format: any JSON object */
        const char *any = json_schema_any_object_gbnf();
        return compile_into(r, OAI_FORMAT_JSON_SCHEMA, any, strlen(any), "response_format", param, err);
    }
    return schema_into(r, schema, "response_format", param, err);
}

/* OpenAI features attnd does not implement are refused by name rather than silently ignored:
 * a client asking for tool calls or JSON mode must not believe it got them. Their harmless
 * "off" forms (null, an empty tools list, tool_choice "none", response_format "text",
 * modalities ["text"], best_of 1, an empty suffix) are accepted, since clients send those. */
static attnd_status refuse_unsupported(const json_t *body, const char **param, attnd_err *err) {
    const json_t *v = oai_field(body, "functions");
    if (v && !(json_is_array(v) && json_array_size(v) == 0))
        return oai_bad(param, "functions", err, "'functions' (the deprecated form) is not supported; use 'tools'");
    v = oai_field(body, "function_call");
    if (v && !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
        return oai_bad(param, "function_call", err, "'function_call' (the deprecated form) is not supported; use "
                       "'tool_choice'");
    const json_t *mod = oai_field(body, "modalities");
    if (mod && !(json_is_array(mod) && json_array_size(mod) == 1 &&
                 json_is_string(json_array_get(mod, 0)) && !strcmp(json_string_value(json_array_get(mod, 0)), "text")))
        return oai_bad(param, "modalities", err, "only 'modalities': [\"text\"] is supported");
    if (oai_field(body, "audio")) return oai_bad(param, "audio", err, "'audio' output is not supported");
    const json_t *best = oai_field(body, "best_of"), *suffix = oai_field(body, "suffix");
    if (best && !(json_is_integer(best) && json_integer_value(best) == 1))
        return oai_bad(param, "best_of", err, "only 'best_of': 1 is supported");
    if (suffix && !(json_is_string(suffix) && json_string_length(suffix) == 0))
        return oai_bad(param, "suffix", err, "'suffix' (insertion) is not supported");
    return ATTND_OK;
}

/* max_tokens (max_completion_tokens in chat) into r->max_tokens, within max_tokens_cap, and what
 * the whole request may generate (every prompt and choice) within max_request_tokens. */
static attnd_status parse_max_tokens(const json_t *body, bool chat, const server_settings *cfg, int n_prompts,
                                     oai_request *r, const char **param, attnd_err *err) {
    const char *mt_name = chat && oai_field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (oai_field(body, mt_name)) {
        const json_t *v = oai_field(body, mt_name);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return oai_bad(param, mt_name, err, "'%s' must be a non-negative integer", mt_name);
        if (json_integer_value(v) > cfg->max_tokens_cap)
            return oai_bad(param, mt_name, err, "'%s' is %lld; this server allows at most %d", mt_name,
                       (long long)json_integer_value(v), cfg->max_tokens_cap);
        r->max_tokens = (int)json_integer_value(v);
    }
    /* what the whole request may generate: one request must not hold the engine for minutes */
    long long per = r->max_tokens >= 0 ? r->max_tokens : cfg->default_max_tokens;
    if (cfg->max_request_tokens > 0 && per * n_prompts * r->n > cfg->max_request_tokens)
        return oai_bad(param, mt_name, err,
                       "%s %lld x n %d x %d prompts = %lld tokens; this server allows at most %d per request "
                       "(max_request_tokens)", mt_name, per, r->n, n_prompts, per * n_prompts * r->n,
                       cfg->max_request_tokens);
    return ATTND_OK;
}

/* The sampler's fields, draft_max and seed. */
/* llama-server's sampling fields that this sampler does not have: accepted at the value that
 * means off (clients such as llama.cpp's web UI send them all), refused by name otherwise. The
 * dry_* / xtc_* / mirostat_* details only act through the switch of their family. */
static const struct {
    const char *name;
    double off_max;  /* the largest value that changes nothing */
    const char *instead;
} UNSUPPORTED_SAMPLING[] = {
    {"n_probs", 0, "use 'logprobs' (/v1/completions) or 'top_logprobs' (chat)"},
    {"min_keep", 1, "top_p, min_p and typical_p keep at least one token"},
    {"dry_multiplier", 0, "DRY is not implemented; 'repeat_penalty', 'presence_penalty' and 'frequency_penalty' are"},
    {"xtc_probability", 0, "XTC is not implemented"},
    {"mirostat", 0, "Mirostat is not implemented"},
};

static attnd_status refuse_sampling(const json_t *body, const char **param, attnd_err *err) {
    for (size_t i = 0; i < ATTND_ARRAY_LEN(UNSUPPORTED_SAMPLING); i++) {
        const char *name = UNSUPPORTED_SAMPLING[i].name;
        const json_t *v = oai_field(body, name);
        if (!v || json_is_null(v)) continue;
        if (!json_is_number(v)) return oai_bad(param, name, err, "'%s' must be a number", name);
        if (json_number_value(v) > UNSUPPORTED_SAMPLING[i].off_max)
            return oai_bad(param, name, err, "'%s' is not supported (only %g, off): %s", name,
                           UNSUPPORTED_SAMPLING[i].off_max, UNSUPPORTED_SAMPLING[i].instead);
    }
    return ATTND_OK;
}

/* llama-server's reasoning_budget_tokens: -1 (no limit) or the tokens a <think> block may take
 * before it is closed (gen.h). 0, which llama-server reads as "close at once", is refused: a
 * template's thinking switch says that (chat_template_kwargs.enable_thinking). */
static attnd_status parse_reasoning_budget(const json_t *body, oai_request *r, const char **param, attnd_err *err) {
    int b = -1;
    attnd_status rc = get_int(body, "reasoning_budget_tokens", -1, 1 << 30, &b, param, err);
    if (rc == ATTND_OK && b == 0)
        return oai_bad(param, "reasoning_budget_tokens", err,
                       "'reasoning_budget_tokens' must be -1 (no limit) or at least 1; to turn thinking off, send "
                       "chat_template_kwargs {\"enable_thinking\": false}");
    r->reasoning_budget = b > 0 ? b : 0;
    return rc;
}

static attnd_status parse_sampling(const json_t *body, int n_vocab, oai_request *r, const char **param,
                                   attnd_err *err) {
    attnd_status rc;
    if ((rc = refuse_sampling(body, param, err)) != ATTND_OK) return rc;
    if ((rc = oai_get_bool(body, "ignore_eos", &r->ignore_eos, param, err)) != ATTND_OK) return rc;
    if ((rc = parse_reasoning_budget(body, r, param, err)) != ATTND_OK) return rc;
    if ((rc = get_num(body, "temperature", 0, 100, &r->sp.temperature, param, err)) ||
        (rc = get_num(body, "top_p", 0, 1, &r->sp.top_p, param, err)) ||
        (rc = get_num(body, "min_p", 0, 1, &r->sp.min_p, param, err)) ||
        (rc = get_num(body, "typical_p", 0, 1, &r->sp.typical_p, param, err)) ||
        (rc = get_num(body, "repeat_penalty", 0, 100, &r->sp.repeat_penalty, param, err)) ||
        (rc = get_num(body, "presence_penalty", -2, 2, &r->sp.presence_penalty, param, err)) ||
        (rc = get_num(body, "frequency_penalty", -2, 2, &r->sp.frequency_penalty, param, err)) ||
        (rc = get_int(body, "top_k", 0, n_vocab, &r->sp.top_k, param, err)) ||
        (rc = get_int(body, "repeat_last_n", -1, 1 << 20, &r->sp.repeat_last_n, param, err)))
        return rc;
    if (r->sp.top_p == 0) return oai_bad(param, "top_p", err, "'top_p' must be greater than 0");
    r->draft_max = -1;
    r->draft_min_p = -1;
    if ((rc = get_int(body, "draft_max", 0, 32, &r->draft_max, param, err)) ||
        (rc = get_num(body, "draft_min_p", 0, 1, &r->draft_min_p, param, err)))
        return rc;
    const json_t *seed = oai_field(body, "seed");
    if (seed) {
        if (!json_is_integer(seed)) return oai_bad(param, "seed", err, "'seed' must be an integer");
        r->sp.seed = (uint64_t)json_integer_value(seed);
    }
    return ATTND_OK;
}

attnd_status oai_parse(const json_t *body, bool chat, const server_settings *cfg, int n_vocab, oai_request *r,
                       const char **param, attnd_err *err) {
    memset(r, 0, sizeof(*r));
    *param = NULL;
    r->chat = chat;
    r->max_tokens = -1;
    r->logprobs = -1;
    r->sp = cfg->sampling;
    attnd_random(&r->sp.seed, sizeof(r->sp.seed));
    if (!json_is_object(body)) return oai_bad(param, NULL, err, "the request body must be a JSON object");

    attnd_status rc;
    if ((rc = refuse_unsupported(body, param, err)) != ATTND_OK) return rc;
    if ((rc = chat ? parse_messages(body, r, param, err) : parse_prompt(body, n_vocab, r, param, err)) != ATTND_OK)
        return rc;
    if ((rc = oai_get_string(body, "model", NULL, param, err)) != ATTND_OK) return rc;
    r->n = 1;
    if ((rc = get_int(body, "n", 1, OAI_MAX_N, &r->n, param, err)) != ATTND_OK) return rc;
    int n_prompts = chat ? 1 : r->n_prompts;
    if (n_prompts * r->n > OAI_MAX_CHOICES)
        return oai_bad(param, "n", err, "%d prompts x n = %d make %d choices; at most %d per request", n_prompts, r->n,
                   n_prompts * r->n, OAI_MAX_CHOICES);
    if ((rc = parse_max_tokens(body, chat, cfg, n_prompts, r, param, err)) != ATTND_OK) return rc;
    if ((rc = parse_sampling(body, n_vocab, r, param, err)) != ATTND_OK) return rc;
    if ((rc = oai_get_bool(body, "stream", &r->stream, param, err)) != ATTND_OK) return rc;
    const json_t *so = oai_field(body, "stream_options");
    if (so) {
        if (!json_is_object(so)) return oai_bad(param, "stream_options", err, "'stream_options' must be an object");
        if ((rc = oai_get_bool(so, "include_usage", &r->include_usage, param, err)) != ATTND_OK) return rc;
    }
    if (chat) {
        bool lp = false;
        if ((rc = oai_get_bool(body, "logprobs", &lp, param, err)) != ATTND_OK) return rc;
        int top = 0;
        if ((rc = get_int(body, "top_logprobs", 0, 20, &top, param, err)) != ATTND_OK) return rc;
        if (oai_field(body, "top_logprobs") && !lp)
            return oai_bad(param, "top_logprobs", err, "'top_logprobs' requires 'logprobs': true");
        r->logprobs = lp ? top : -1;
    } else {
        if ((rc = get_int(body, "logprobs", 0, 20, &r->logprobs, param, err)) != ATTND_OK) return rc;
        if ((rc = oai_get_bool(body, "echo", &r->echo, param, err)) != ATTND_OK) return rc;
        if (r->echo && r->stream) return oai_bad(param, "echo", err, "'echo' cannot be combined with 'stream'");
    }
    if ((rc = oai_get_string(body, "user", NULL, param, err)) != ATTND_OK ||
        (rc = oai_get_string(body, "session_id", &r->session_id, param, err)) != ATTND_OK)
        return rc;
    if (chat) {
        const json_t *kw = oai_field(body, "chat_template_kwargs");
        if (kw && !json_is_object(kw))
            return oai_bad(param, "chat_template_kwargs", err, "'chat_template_kwargs' must be an object");
        r->template_kwargs = kw;
    }
    if ((rc = parse_stop(body, r, param, err)) != ATTND_OK) return rc;
    if ((rc = parse_bias(body, n_vocab, r, param, err)) != ATTND_OK) return rc;
    if ((rc = parse_format(body, r, param, err)) != ATTND_OK ||
        (rc = ablate_api_parse(body, &r->ablate, &r->n_ablate, param, err)) != ATTND_OK)
        return rc;
    if ((rc = parse_tools(body, chat, r, param, err)) != ATTND_OK) return rc;
    /* JSON answers and forced calls close within max_tokens unless the request says not to; a
     * GBNF grammar is the user's, left as written unless asked */
    r->grammar_close = r->format == OAI_FORMAT_JSON_OBJECT || r->format == OAI_FORMAT_JSON_SCHEMA ||
                       r->format == OAI_FORMAT_TOOL_CALL;
    if ((rc = oai_get_bool(body, "close_within_budget", &r->grammar_close, param, err)) != ATTND_OK) return rc;
    if (chat && (rc = family_messages(r, false, param, err)) != ATTND_OK) return rc;
    attnd_err verr;
    if (sampler_params_validate(&r->sp, n_vocab, &verr) != ATTND_OK)
        return oai_bad(param, NULL, err, "%s", verr.msg);
    return ATTND_OK;
}

void oai_request_free(oai_request *r) {
    if (!r) return;
    oai_prompts_free(r->prompts, r->n_prompts);
    for (size_t i = 0; i < r->n_msgs; i++) free((char *)r->msgs[i].content);
    free(r->msgs);
    free(r->bias);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->stops);
    grammar_unref(r->grammar);
    toolcall_spec_free(&r->tools);
    for (size_t i = 0; i < r->n_fmsgs; i++) free((char *)r->fmsgs[i].content);
    free(r->fmsgs);
    free(r->ablate);
    memset(r, 0, sizeof(*r));
}

/* tool_choice required / named in format f (when it is not the Hermes form oai_parse compiled),
 * or auto's lazy call grammar. For auto a tool whose schema does not convert leaves the calls
 * free (they were free before grammars existed), rather than refusing the request. */
static attnd_status call_grammar(oai_request *r, toolcall_format f, bool lazy, attnd_err *err) {
    buf g = {0};
    grammar *gr = NULL;
    attnd_err e;
    attnd_status st = toolcall_grammar(&r->tools, f, &g, &e);
    if (st == ATTND_OK) st = grammar_compile(&gr, g.p, g.len, &e);
    buf_free(&g);
    if (st == ATTND_ERR_NOMEM) return attnd_fail(err, st, "out of memory");
    if (st != ATTND_OK) return lazy ? ATTND_OK : attnd_fail(err, st, "%s", e.msg);
    grammar_unref(r->grammar);
    r->grammar = gr;
    return ATTND_OK;
}

attnd_status oai_bind_template(oai_request *r, bool takes_tools, toolcall_format f, attnd_err *err) {
    if (!r->chat) return ATTND_OK;
    r->template_tools = takes_tools;
    toolcall_format use = takes_tools ? f : TOOLCALL_FMT_HERMES; /* what the prompt taught */
    r->think_to_call = toolcall_format_think_ends_at_call(use);
    /* a call that opens with a special token cannot start at a byte trigger: auto leaves it free */
    bool lazy_calls = r->tools_json && r->tools.choice == TOOLCALL_AUTO && !r->grammar && !toolcall_format_uses_tokens(use);
    attnd_status st = ATTND_OK;
    if (lazy_calls || (r->format == OAI_FORMAT_TOOL_CALL && use != TOOLCALL_FMT_HERMES))
        st = call_grammar(r, use, lazy_calls, err);
    if (st != ATTND_OK || !r->grammar || r->format == OAI_FORMAT_GRAMMAR) return st; /* GBNF: as given */
    if (r->format == OAI_FORMAT_TOOL_CALL && toolcall_format_uses_tokens(use)) return ATTND_OK; /* no <think> there */
    /* reasoning is never constrained: JSON and calls start after </think> (Gemma 4: <channel|>) */
    grammar_lazy lz = {lazy_calls ? toolcall_trigger(use) : NULL, NULL, NULL, false, NULL};
    toolcall_reasoning_markers(use, &lz.skip_open, &lz.skip_close);
    /* a call opened inside unclosed reasoning (Qwen3.5) ends it: the call grammar begins there */
    if (r->think_to_call && lz.skip_close && (lazy_calls || r->format == OAI_FORMAT_TOOL_CALL))
        lz.skip_break = toolcall_trigger(use);
    return grammar_set_lazy(r->grammar, &lz, err);
}

attnd_status oai_open_reasoning(oai_request *r, attnd_err *err) {
    r->open_reasoning = true;
    if (!r->grammar || r->format == OAI_FORMAT_GRAMMAR) return ATTND_OK; /* GBNF: as given */
    grammar_lazy lz = grammar_get_lazy(r->grammar);
    if (!lz.skip_close || lz.skip_inside) return ATTND_OK;
    lz.skip_inside = true;
    return grammar_set_lazy(r->grammar, &lz, err);
}

toolcall_reading oai_reply_reading(const oai_request *r, const char *id_base) {
    return (toolcall_reading){.calls = json_array_size(r->tools.tools) > 0 && r->tools.choice != TOOLCALL_NONE,
                              .tools = r->tools.tools, .id_base = id_base, .in_reasoning = r->open_reasoning,
                              .think_to_call = r->think_to_call};
}

void oai_chat_input(const oai_request *r, chat_request *out) {
    if (r->template_tools) *out = (chat_request){r->msgs, r->n_msgs, r->messages_json, r->tools_json, r->template_kwargs, true, NULL};
    else if (r->fmsgs) *out = (chat_request){r->fmsgs, r->n_fmsgs, NULL, NULL, r->template_kwargs, true, NULL};
    else *out = (chat_request){r->msgs, r->n_msgs, r->messages_json, NULL, r->template_kwargs, true, NULL};
}

// ---- responses ----------------------------------------------------------------------------

const char *oai_error_type(int st) {
    switch (st) {
    case 400: case 405: case 409: case 413: return "invalid_request_error";
    case 404: return "not_found_error";
    case 401: return "authentication_error";
    case 403: case 421: return "permission_error";
    case 429: return "rate_limit_error";
    case 503: return "unavailable_error";
    default: return "server_error";
    }
}

static const char *error_code(int st) {
    switch (st) {
    case 400: return "invalid_request";
    case 401: return "invalid_api_key";
    case 403: return "forbidden_origin";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 409: return "conflict";
    case 413: return "request_too_large";
    case 421: return "misdirected_request";
    case 429: return "rate_limit_exceeded";
    case 503: return "unavailable";
    default: return "internal_error";
    }
}

json_t *oai_error_coded(int st, const char *type, const char *code, const char *message, const char *param) {
    json_t *e = json_object();
    json_object_set_new(e, "message", oai_string(message, strlen(message)));
    json_object_set_new(e, "type", json_string(type ? type : oai_error_type(st)));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", json_string(code ? code : error_code(st)));
    json_t *root = json_object();
    json_object_set_new(root, "error", e);
    return root;
}

json_t *oai_error(int st, const char *message, const char *param) {
    return oai_error_coded(st, NULL, NULL, message, param);
}

json_t *oai_error_context_length(long long n_prompt, int n_ctx, int n_reserved, const char *param) {
    char msg[300];
    snprintf(msg, sizeof(msg),
             "This model's maximum context length is %d tokens, but the prompt is %lld tokens and %d more must remain "
             "for the completion. Shorten the prompt.",
             n_ctx, n_prompt, n_reserved);
    return oai_error_coded(400, NULL, "context_length_exceeded", msg, param);
}

json_t *oai_error_model_not_found(const char *id) {
    char msg[300];
    snprintf(msg, sizeof(msg), "The model '%.200s' does not exist", id ? id : "");
    /* OpenAI answers an unknown model with 404 and type invalid_request_error */
    return oai_error_coded(404, "invalid_request_error", "model_not_found", msg, "model");
}

json_t *oai_string(const char *s, size_t n) {
    /* NUL bytes become U+FFFD as well: clients choke on \u0000 */
    if (utf8_valid(s, n, true)) return json_stringn(s, n);
    size_t m;
    char *fixed = utf8_sanitize(s, n, true, &m);
    if (!fixed) return json_string("");
    json_t *j = json_stringn(fixed, m);
    free(fixed);
    return j;
}
