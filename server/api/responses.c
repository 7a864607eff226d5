/*
 * responses.c — OpenAI's Responses API for text (see responses.h): request validation into chat
 * messages, the Response object, and its streamed events.
 *
 * The request is translated, not reimplemented: sampling fields are handed to oai_parse as a
 * chat completion body, so both endpoints validate them by one set of rules.
 */
#include "responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"
#include "toolcall.h"

#define MAX_METADATA 16

static bool str_is(const json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }

// ---- refusing what is not text generation ------------------------------------------------

/* Fields that ask for more than text generation: refused rather than ignored. */
static attnd_status refuse_unsupported(const json_t *b, const char **param, attnd_err *err) {
    const json_t *v;
    if ((v = oai_field(b, "reasoning")) && (!json_is_object(v) || oai_field(v, "effort") || oai_field(v, "summary")))
        return oai_bad(param, "reasoning", err, "'reasoning' is not supported: this model has no reasoning mode");
    const json_t *text = oai_field(b, "text");
    if (text && !json_is_object(text)) return oai_bad(param, "text", err, "'text' must be an object");
    const json_t *fmt = text ? oai_field(text, "format") : NULL, *ft = json_object_get(fmt, "type");
    if (fmt && !(json_is_object(fmt) && (str_is(ft, "text") || str_is(ft, "json_object") || str_is(ft, "json_schema"))))
        return oai_bad(param, "text.format", err,
                   "'text.format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
    if (str_is(ft, "json_schema") && !json_is_object(json_object_get(fmt, "schema")))
        return oai_bad(param, "text.format", err, "'text.format' of type json_schema needs a 'schema' object");
    if (text && oai_field(text, "verbosity") && !str_is(oai_field(text, "verbosity"), "medium"))
        return oai_bad(param, "text.verbosity", err, "'text.verbosity' is not supported");
    if ((v = oai_field(b, "background")) && !json_is_false(v))
        return oai_bad(param, "background", err, "'background' responses are not supported");
    if ((v = oai_field(b, "include")) && !(json_is_array(v) && json_array_size(v) == 0))
        return oai_bad(param, "include", err, "'include' is not supported");
    static const char *const never[] = {"conversation", "prompt", "context_management", "max_tool_calls"};
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
        if (oai_field(b, never[i])) return oai_bad(param, never[i], err, "'%s' is not supported", never[i]);
    if ((v = oai_field(b, "top_logprobs")) && !(json_is_integer(v) && json_integer_value(v) == 0))
        return oai_bad(param, "top_logprobs", err, "'top_logprobs' is not supported by /v1/responses; use /v1/chat/completions");
    if ((v = oai_field(b, "truncation")) && !str_is(v, "disabled"))
        return oai_bad(param, "truncation", err,
                   "'truncation' must be \"disabled\": attnd does not drop earlier turns (send a shorter conversation)");
    return ATTND_OK;
}

// ---- input -------------------------------------------------------------------------------

/* Joins an item's content parts (input_text / output_text) into one string (new reference). */
static json_t *item_text(const json_t *content, size_t i, const char **param, attnd_err *err, attnd_status *st) {
    static _Thread_local char name[64]; /* *param must outlive the call: one per thread */
    if (json_is_string(content)) return json_incref((json_t *)content);
    if (!json_is_array(content)) {
        snprintf(name, sizeof(name), "input[%zu].content", i);
        *st = oai_bad(param, name, err, "'input[%zu].content' must be a string or an array of text parts", i);
        return NULL;
    }
    size_t total = 0;
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *part = json_array_get(content, k), *type = json_object_get(part, "type");
        if (!(str_is(type, "input_text") || str_is(type, "output_text")) || !json_is_string(json_object_get(part, "text"))) {
            snprintf(name, sizeof(name), "input[%zu].content[%zu]", i, k);
            *st = oai_bad(param, name, err, "'input[%zu].content[%zu]' of type '%.32s' is not supported: attnd takes text only",
                      i, k, json_is_string(type) ? json_string_value(type) : "?");
            return NULL;
        }
        total += json_string_length(json_object_get(part, "text"));
    }
    char *buf = malloc(total + 1);
    if (!buf) {
        *st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        return NULL;
    }
    size_t o = 0;
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *t = json_object_get(json_array_get(content, k), "text");
        memcpy(buf + o, json_string_value(t), json_string_length(t));
        o += json_string_length(t);
    }
    json_t *s = json_stringn(buf, o);
    free(buf);
    if (!s) *st = oai_bad(param, "input", err, "'input[%zu].content' is not valid UTF-8", i);
    return s;
}

/* A function_call item as the assistant message that made the call, a function_call_output as
 * the tool message with its result. */
static json_t *tool_item(const json_t *item, size_t i, const char *name, const char **param, attnd_err *err,
                         attnd_status *st) {
    const json_t *id = json_object_get(item, "call_id");
    if (!json_is_string(id)) {
        *st = oai_bad(param, name, err, "'input[%zu].call_id' must be a string", i);
        return NULL;
    }
    if (str_is(json_object_get(item, "type"), "function_call_output")) {
        const json_t *out = json_object_get(item, "output");
        if (!json_is_string(out)) {
            *st = oai_bad(param, name, err, "'input[%zu].output' must be a string", i);
            return NULL;
        }
        return json_pack("{s:s,s:O,s:O}", "role", "tool", "tool_call_id", (json_t *)id, "content", (json_t *)out);
    }
    const json_t *fn = json_object_get(item, "name"), *args = json_object_get(item, "arguments");
    if (!json_is_string(fn) || !json_is_string(args)) {
        *st = oai_bad(param, name, err, "'input[%zu]' (function_call) needs string 'name' and 'arguments'", i);
        return NULL;
    }
    return json_pack("{s:s,s:s,s:[{s:O,s:s,s:{s:O,s:O}}]}", "role", "assistant", "content", "", "tool_calls", "id",
                     (json_t *)id, "type", "function", "function", "name", (json_t *)fn, "arguments", (json_t *)args);
}

/* One input item as a chat message {"role", "content"}; NULL with *st set on error. */
static json_t *input_item(const json_t *item, size_t i, const char **param, attnd_err *err, attnd_status *st) {
    static _Thread_local char name[64]; /* *param must outlive the call: one per thread */
    snprintf(name, sizeof(name), "input[%zu]", i);
    if (!json_is_object(item)) {
        *st = oai_bad(param, name, err, "'input[%zu]' must be a message object", i);
        return NULL;
    }
    const json_t *type = oai_field(item, "type"), *role = json_object_get(item, "role");
    if (str_is(type, "function_call") || str_is(type, "function_call_output")) return tool_item(item, i, name, param, err, st);
    if (type && !str_is(type, "message")) {
        *st = oai_bad(param, name, err, "'input[%zu]' of type '%.32s' is not supported: attnd takes messages only", i,
                  json_is_string(type) ? json_string_value(type) : "?");
        return NULL;
    }
    if (!(str_is(role, "user") || str_is(role, "assistant") || str_is(role, "system") || str_is(role, "developer"))) {
        *st = oai_bad(param, name, err, "'input[%zu].role' must be one of %s", i, OAI_ROLES);
        return NULL;
    }
    json_t *text = item_text(json_object_get(item, "content"), i, param, err, st);
    if (!text) return NULL;
    return json_pack("{s:O,s:o}", "role", (json_t *)role, "content", text);
}

static attnd_status parse_input(const json_t *b, responses_request *r, const char **param, attnd_err *err) {
    const json_t *in = oai_field(b, "input");
    if (!in) return oai_bad(param, "input", err, "'input' is required");
    r->input = json_array();
    if (!r->input) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    if (json_is_string(in)) {
        json_array_append_new(r->input, json_pack("{s:s,s:O}", "role", "user", "content", (json_t *)in));
        return ATTND_OK;
    }
    if (!json_is_array(in) || json_array_size(in) == 0)
        return oai_bad(param, "input", err, "'input' must be a string or a non-empty array of messages");
    for (size_t i = 0; i < json_array_size(in); i++) {
        attnd_status st = ATTND_ERR_NOMEM;
        json_t *m = input_item(json_array_get(in, i), i, param, err, &st);
        if (!m) return st == ATTND_ERR_NOMEM ? attnd_fail(err, st, "out of memory") : st;
        json_array_append_new(r->input, m);
    }
    return ATTND_OK;
}

// ---- the request -------------------------------------------------------------------------

/* The sampling fields handed to oai_parse unchanged (OpenAI's and attnd's extensions). */
static const char *const SAMPLING[] = {"temperature", "top_p", "seed", "top_k", "min_p", "typical_p", "repeat_penalty",
                                       "presence_penalty", "frequency_penalty", "repeat_last_n", "logit_bias", "stop"};

static attnd_status parse_scalars(const json_t *b, const server_settings *cfg, responses_request *r,
                                  const char **param, attnd_err *err) {
    attnd_status st;
    if ((st = oai_get_string(b, "model", NULL, param, err)) ||
        (st = oai_get_string(b, "instructions", &r->instructions, param, err)) ||
        (st = oai_get_string(b, "previous_response_id", &r->previous_id, param, err)) ||
        (st = oai_get_bool(b, "store", &r->store, param, err)) || (st = oai_get_bool(b, "stream", &r->stream, param, err)))
        return st;
    const json_t *v;
    if ((v = oai_field(b, "max_output_tokens"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return oai_bad(param, "max_output_tokens", err, "'max_output_tokens' must be a non-negative integer");
        if (json_integer_value(v) > cfg->max_tokens_cap)
            return oai_bad(param, "max_output_tokens", err, "'max_output_tokens' is %lld; this server allows at most %d",
                       (long long)json_integer_value(v), cfg->max_tokens_cap);
        r->max_output_tokens = (int)json_integer_value(v);
    }
    if ((st = oai_get_string(b, "user", &r->user, param, err))) return st;
    if ((v = oai_field(b, "metadata"))) {
        if (!json_is_object(v) || json_object_size(v) > MAX_METADATA)
            return oai_bad(param, "metadata", err, "'metadata' must be an object of at most %d strings", MAX_METADATA);
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            if (!json_is_string(x)) return oai_bad(param, "metadata", err, "'metadata' values must be strings");
        }
        json_object_update(r->metadata, (json_t *)v);
    }
    return ATTND_OK;
}

/* Responses' function tools ({"type": "function", "name", ...}) and tool_choice into chat's
 * shapes in the sampling fields; validated here so errors name Responses' fields. */
static attnd_status tools_to_sampling(const json_t *b, responses_request *r, const char **param, attnd_err *err) {
    toolcall_spec s;
    attnd_status st = toolcall_parse_spec(b, true, &s, param, err);
    json_t *tools = json_array();
    for (size_t i = 0; st == ATTND_OK && tools && i < json_array_size(s.tools); i++)
        json_array_append_new(tools, json_pack("{s:s,s:O}", "type", "function", "function", json_array_get(s.tools, i)));
    if (st == ATTND_OK && json_array_size(tools)) {
        r->tools = s.choice != TOOLCALL_NONE;
        json_object_set(r->sampling, "tools", tools);
        static const char *const CH[] = {"auto", "none", "required"};
        json_object_set_new(r->sampling, "tool_choice",
                            s.choice == TOOLCALL_NAMED ? json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", s.name)
                                                       : json_string(CH[s.choice]));
        json_object_set_new(r->sampling, "parallel_tool_calls", json_boolean(s.parallel));
    }
    json_decref(tools);
    toolcall_spec_free(&s);
    return st;
}

/* text.format {type json_schema, name, schema, strict} | {type json_object} becomes chat's
 * response_format in the sampling fields, which oai_parse compiles (naming "response_format"
 * in its errors). */
static attnd_status format_to_sampling(const json_t *b, responses_request *r, attnd_err *err) {
    const json_t *fmt = oai_field(oai_field(b, "text"), "format"), *ft = json_object_get(fmt, "type");
    json_t *rf = NULL;
    if (str_is(ft, "json_object")) rf = json_pack("{s:s}", "type", "json_object");
    else if (str_is(ft, "json_schema"))
        rf = json_pack("{s:s,s:{s:O}}", "type", "json_schema", "json_schema", "schema", json_object_get(fmt, "schema"));
    else return ATTND_OK;
    if (!rf || json_object_set_new(r->sampling, "response_format", rf))
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    return ATTND_OK;
}

attnd_status responses_parse(const json_t *b, const server_settings *cfg, responses_request *r, const char **param,
                             attnd_err *err) {
    memset(r, 0, sizeof(*r));
    *param = NULL;
    r->store = true;
    r->max_output_tokens = -1;
    r->metadata = json_object();
    r->sampling = json_object();
    if (!r->metadata || !r->sampling) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    if (!json_is_object(b)) return oai_bad(param, NULL, err, "the request body must be a JSON object");
    attnd_status st;
    if ((st = refuse_unsupported(b, param, err)) != ATTND_OK) return st;
    if ((st = parse_scalars(b, cfg, r, param, err)) != ATTND_OK) return st;
    if ((st = parse_input(b, r, param, err)) != ATTND_OK) return st;
    for (size_t i = 0; i < sizeof(SAMPLING) / sizeof(SAMPLING[0]); i++) {
        json_t *v = json_object_get(b, SAMPLING[i]);
        if (v && !json_is_null(v)) json_object_set(r->sampling, SAMPLING[i], v);
    }
    if ((st = tools_to_sampling(b, r, param, err)) != ATTND_OK) return st;
    return format_to_sampling(b, r, err);
}

void responses_request_free(responses_request *r) {
    if (!r) return;
    json_decref(r->input);
    json_decref(r->sampling);
    json_decref(r->metadata);
    memset(r, 0, sizeof(*r));
}

json_t *responses_chat_body(const responses_request *r, const json_t *earlier) {
    json_t *body = json_deep_copy(r->sampling), *msgs = json_array();
    if (!body || !msgs) goto fail;
    if (r->instructions) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", r->instructions));
    if (earlier) json_array_extend(msgs, (json_t *)earlier);
    json_array_extend(msgs, r->input);
    if (json_object_set_new(body, "messages", msgs)) {
        msgs = NULL;
        goto fail;
    }
    if (r->max_output_tokens >= 0) json_object_set_new(body, "max_tokens", json_integer(r->max_output_tokens));
    json_object_set_new(body, "stream", json_boolean(r->stream));
    return body;
fail:
    json_decref(body);
    json_decref(msgs);
    return NULL;
}

json_t *responses_conversation(const responses_request *r, const json_t *earlier, const char *reply, size_t n) {
    json_t *c = earlier ? json_deep_copy(earlier) : json_array();
    if (!c) return NULL;
    json_array_extend(c, r->input);
    json_array_append_new(c, json_pack("{s:s,s:o}", "role", "assistant", "content", oai_string(reply, n)));
    return c;
}

// ---- the Response object -----------------------------------------------------------------

static json_t *output_text_part(const responses_result *res) {
    return json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text", oai_string(res->text, res->text_len),
                     "annotations", "logprobs");
}

/* The assistant message; status follows the response's. */
static json_t *output_message(const responses_result *res, bool with_text) {
    const char *status = !strcmp(res->status, "in_progress") ? "in_progress" : res->cut_short ? "incomplete" : "completed";
    json_t *content = json_array();
    if (with_text) json_array_append_new(content, output_text_part(res));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", res->msg_id, "type", "message", "status", status, "role",
                     "assistant", "content", content);
}

/* A function_call item's id from its call id: the stream and the final object agree. */
static void fc_id(const char *call_id, char *out, size_t n) {
    snprintf(out, n, "fc_%.80s", call_id && !strncmp(call_id, "call_", 5) ? call_id + 5 : call_id ? call_id : "");
}

/* With tools: the reply split by the tool-call parser into a message (when there is text) and
 * function_call items. */
static void tool_output(const responses_result *res, json_t *output) {
    json_t *choice = json_pack("{s:{s:s},s:s}", "message", "role", "assistant", "finish_reason", "stop");
    if (!choice || !toolcall_apply(choice, res->text, res->text_len, true, res->id)) {
        json_array_append_new(output, output_message(res, true));
        json_decref(choice);
        return;
    }
    json_t *msg = json_object_get(choice, "message"), *content = json_object_get(msg, "content");
    if (json_is_string(content) && json_string_length(content)) {
        responses_result text = *res;
        text.text = json_string_value(content), text.text_len = json_string_length(content);
        json_array_append_new(output, output_message(&text, true));
    }
    json_t *calls = json_object_get(msg, "tool_calls");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *c = json_array_get(calls, i), *f = json_object_get(c, "function");
        char id[96];
        fc_id(json_string_value(json_object_get(c, "id")), id, sizeof(id));
        json_array_append_new(output, json_pack("{s:s,s:s,s:s,s:O,s:O,s:O}", "type", "function_call", "id", id, "status",
                                                "completed", "call_id", json_object_get(c, "id"), "name",
                                                json_object_get(f, "name"), "arguments", json_object_get(f, "arguments")));
    }
    json_decref(choice);
}

static json_t *usage(const responses_result *res) {
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", res->input_tokens, "input_tokens_details",
                     "cached_tokens", res->cached_tokens, "output_tokens", res->output_tokens, "output_tokens_details",
                     "reasoning_tokens", 0, "total_tokens", res->input_tokens + res->output_tokens);
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

json_t *responses_object(const responses_result *res) {
    const responses_request *q = res->req;
    bool running = !strcmp(res->status, "in_progress");
    json_t *o = json_object(), *output = json_array();
    if (!o || !output) {
        json_decref(o);
        json_decref(output);
        return NULL;
    }
    if (!running && !q->tools) json_array_append_new(output, output_message(res, true));
    if (!running && q->tools) tool_output(res, output);
    json_object_set_new(o, "id", json_string(res->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(res->created_at));
    json_object_set_new(o, "status", json_string(res->status));
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details",
                        res->cut_short && !running ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(o, "instructions", str_or_null(q->instructions));
    json_object_set_new(o, "max_output_tokens", q->max_output_tokens >= 0 ? json_integer(q->max_output_tokens) : json_null());
    json_object_set_new(o, "model", json_string(res->model));
    json_object_set_new(o, "output", output);
    json_object_set_new(o, "parallel_tool_calls", json_false());
    json_object_set_new(o, "previous_response_id", str_or_null(q->previous_id));
    json_object_set_new(o, "reasoning", json_pack("{s:n,s:n}", "effort", "summary"));
    json_object_set_new(o, "store", json_boolean(q->store));
    json_object_set_new(o, "temperature", json_real(res->temperature));
    json_object_set_new(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    const json_t *tc = json_object_get(q->sampling, "tool_choice"), *tools = json_object_get(q->sampling, "tools");
    json_object_set_new(o, "tool_choice", tc ? json_deep_copy(tc) : json_string("none"));
    json_t *rtools = json_array();
    for (size_t i = 0; i < json_array_size(tools); i++) { /* back in Responses' shape */
        json_t *t = json_deep_copy(json_object_get(json_array_get(tools, i), "function"));
        if (t) json_object_set_new(t, "type", json_string("function")), json_array_append_new(rtools, t);
    }
    json_object_set_new(o, "tools", rtools);
    json_object_set_new(o, "top_p", json_real(res->top_p));
    json_object_set_new(o, "truncation", json_string("disabled"));
    json_object_set_new(o, "usage", running ? json_null() : usage(res));
    json_object_set_new(o, "user", str_or_null(q->user));
    json_object_set_new(o, "metadata", json_deep_copy(q->metadata));
    return o;
}

json_t *responses_deleted(const char *id) {
    return json_pack("{s:s,s:s,s:b}", "id", id, "object", "response.deleted", "deleted", 1);
}

// ---- streamed events ---------------------------------------------------------------------

typedef struct sse_buf {
    char *p;
    size_t n, cap;
    bool failed;
} sse_buf;

/* Appends one event frame built from ev (stolen): type and sequence_number are added here. */
static void frame(sse_buf *b, responses_stream *st, const char *type, json_t *ev) {
    if (!ev) b->failed = true;
    if (b->failed) {
        json_decref(ev);
        return;
    }
    json_object_set_new(ev, "type", json_string(type));
    json_object_set_new(ev, "sequence_number", json_integer(st->seq++));
    char *data = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (!data) {
        b->failed = true;
        return;
    }
    size_t need = strlen(type) + strlen(data) + 20;
    if (b->n + need + 1 > b->cap) {
        size_t cap = (b->cap + need) * 2;
        char *g = realloc(b->p, cap);
        if (!g) {
            free(data);
            b->failed = true;
            return;
        }
        b->p = g, b->cap = cap;
    }
    b->n += (size_t)snprintf(b->p + b->n, b->cap - b->n, "event: %s\ndata: %s\n\n", type, data);
    free(data);
}

/* The frames (an empty string when there were none: text held back by the parser); NULL when
 * out of memory. */
static char *finish(sse_buf *b) {
    if (b->failed) {
        free(b->p);
        return NULL;
    }
    return b->p ? b->p : strdup("");
}

/* Position fields shared by the item-level events. */
static json_t *item_at(const char *item_id, int output_index, bool content) {
    json_t *o = json_pack("{s:s,s:i}", "item_id", item_id, "output_index", output_index);
    if (o && content) json_object_set_new(o, "content_index", json_integer(0));
    return o;
}

static void open_message(sse_buf *b, responses_stream *st, const responses_result *res) {
    frame(b, st, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", st->msg_index, "item",
                                                         output_message(res, false)));
    json_t *ev = item_at(res->msg_id, st->msg_index, true);
    if (ev) json_object_set_new(ev, "part", json_pack("{s:s,s:s,s:[],s:[]}", "type", "output_text", "text", "",
                                                      "annotations", "logprobs"));
    frame(b, st, "response.content_part.added", ev);
}

char *responses_stream_begin(responses_stream *st, const responses_result *res) {
    sse_buf b = {0};
    st->msg_index = st->call_index = -1;
    if (res->req->tools) {
        if (!(st->tp = toolcall_parser_create(true))) return NULL;
        toolcall_parser_set_id_base(st->tp, res->id);
    }
    frame(&b, st, "response.created", json_pack("{s:o}", "response", responses_object(res)));
    frame(&b, st, "response.in_progress", json_pack("{s:o}", "response", responses_object(res)));
    if (!st->tp) st->msg_index = st->n_items++, open_message(&b, st, res);
    return finish(&b);
}

static void text_delta(sse_buf *b, responses_stream *st, const responses_result *res, const char *text, size_t n) {
    json_t *ev = item_at(res->msg_id, st->msg_index, true);
    if (ev) {
        json_object_set_new(ev, "delta", oai_string(text, n));
        json_object_set_new(ev, "logprobs", json_array());
    }
    frame(b, st, "response.output_text.delta", ev);
}

static json_t *call_item(const responses_stream *st, const char *status) {
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:O}", "type", "function_call", "id", st->call_item, "status", status,
                     "call_id", st->call_id, "name", st->call_name, "arguments", st->call_args);
}

static void close_call(sse_buf *b, responses_stream *st) {
    if (st->call_index < 0) return;
    json_t *ev = item_at(st->call_item, st->call_index, false);
    if (ev) json_object_set(ev, "arguments", st->call_args);
    frame(b, st, "response.function_call_arguments.done", ev);
    frame(b, st, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", st->call_index, "item",
                                                        call_item(st, "completed")));
    st->call_index = -1;
}

/* One parser delta as Responses events. */
static void tool_event(sse_buf *b, responses_stream *st, const responses_result *res, const json_t *d) {
    const json_t *c = json_object_get(d, "content"), *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
    if (json_is_string(c)) {
        if (st->msg_index < 0) st->msg_index = st->n_items++, open_message(b, st, res);
        text_delta(b, st, res, json_string_value(c), json_string_length(c));
        return;
    }
    if (!tc) return; /* reasoning is not streamed as items */
    const json_t *f = json_object_get(tc, "function"), *id = json_object_get(tc, "id");
    const char *frag = json_string_value(json_object_get(f, "arguments"));
    if (id) {
        close_call(b, st);
        st->call_index = st->n_items++;
        snprintf(st->call_id, sizeof(st->call_id), "%s", json_string_value(id));
        fc_id(st->call_id, st->call_item, sizeof(st->call_item));
        snprintf(st->call_name, sizeof(st->call_name), "%s", json_string_value(json_object_get(f, "name")));
        json_string_set(st->call_args, "");
        frame(b, st, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", st->call_index, "item",
                                                             call_item(st, "in_progress")));
    }
    if (!frag || !*frag || st->call_index < 0) return;
    size_t n = json_string_length(st->call_args), k = strlen(frag);
    char *joined = malloc(n + k + 1);
    if (!joined) return (void)(b->failed = true);
    memcpy(joined, json_string_value(st->call_args), n), memcpy(joined + n, frag, k + 1);
    json_string_setn(st->call_args, joined, n + k);
    free(joined);
    json_t *ev = item_at(st->call_item, st->call_index, false);
    if (ev) json_object_set_new(ev, "delta", json_string(frag));
    frame(b, st, "response.function_call_arguments.delta", ev);
}

static void tool_events(sse_buf *b, responses_stream *st, const responses_result *res, json_t *deltas) {
    if (!deltas) return (void)(b->failed = true);
    for (size_t i = 0; i < json_array_size(deltas); i++) tool_event(b, st, res, json_array_get(deltas, i));
    json_decref(deltas);
}

char *responses_stream_delta(responses_stream *st, const responses_result *res, const char *text, size_t n) {
    sse_buf b = {0};
    if (!st->tp) {
        text_delta(&b, st, res, text, n);
        return finish(&b);
    }
    if (!st->call_args) st->call_args = json_string("");
    json_t *deltas = json_array();
    if (deltas) toolcall_parser_feed(st->tp, text, n, deltas);
    tool_events(&b, st, res, deltas);
    return finish(&b);
}

/* The message's closing events, with its text (the whole reply without tools, else the
 * parser's content). */
static void close_message(sse_buf *b, responses_stream *st, const responses_result *res) {
    json_t *ev = item_at(res->msg_id, st->msg_index, true);
    if (ev) {
        json_object_set_new(ev, "text", oai_string(res->text, res->text_len));
        json_object_set_new(ev, "logprobs", json_array());
    }
    frame(b, st, "response.output_text.done", ev);
    ev = item_at(res->msg_id, st->msg_index, true);
    if (ev) json_object_set_new(ev, "part", output_text_part(res));
    frame(b, st, "response.content_part.done", ev);
    frame(b, st, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", st->msg_index, "item",
                                                        output_message(res, true)));
}

char *responses_stream_end(responses_stream *st, const responses_result *res) {
    sse_buf b = {0};
    if (st->tp) {
        if (!st->call_args) st->call_args = json_string("");
        json_t *deltas = json_array();
        if (deltas) toolcall_parser_finish(st->tp, deltas);
        tool_events(&b, st, res, deltas);
        close_call(&b, st);
    }
    if (st->msg_index >= 0) {
        responses_result text = *res;
        json_t *content = st->tp ? toolcall_parser_content(st->tp) : NULL;
        if (json_is_string(content)) text.text = json_string_value(content), text.text_len = json_string_length(content);
        close_message(&b, st, &text);
        json_decref(content);
    }
    const char *last = res->cut_short ? "response.incomplete" : "response.completed";
    frame(&b, st, last, json_pack("{s:o}", "response", responses_object(res)));
    return finish(&b);
}

void responses_stream_free(responses_stream *st) {
    if (!st) return;
    toolcall_parser_destroy(st->tp);
    json_decref(st->call_args);
    st->tp = NULL, st->call_args = NULL;
}

char *responses_stream_failed(responses_stream *st, const responses_result *res, const char *message) {
    sse_buf b = {0};
    json_t *o = responses_object(res);
    if (o) json_object_set_new(o, "error", json_pack("{s:s,s:o}", "code", "server_error", "message",
                                                     oai_string(message, strlen(message))));
    frame(&b, st, "response.failed", o ? json_pack("{s:o}", "response", o) : NULL);
    return finish(&b);
}
