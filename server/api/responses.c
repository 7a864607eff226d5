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

#include "completion_body.h"
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

/* A reasoning item (one the server returned, or a client's): its reasoning_text parts, joined
 * to the text of the items before it (prev, stolen; NULL = none). The next assistant message
 * gets it as reasoning_content, which a template that renders reasoning shows; an item without
 * reasoning text (only a summary or encrypted_content) adds nothing. Never an error. */
static json_t *add_reasoning(json_t *prev, const json_t *item) {
    const json_t *content = json_object_get(item, "content");
    buf b = {0};
    bool any = false, ok = true;
    if (prev) ok = buf_append(&b, json_string_value(prev), json_string_length(prev));
    for (size_t k = 0; ok && k < json_array_size(content); k++) {
        const json_t *part = json_array_get(content, k), *text = json_object_get(part, "text");
        if (!str_is(json_object_get(part, "type"), "reasoning_text") || !json_is_string(text)) continue;
        if (b.len) ok = buf_puts(&b, "\n");
        ok = ok && buf_append(&b, json_string_value(text), json_string_length(text));
        any = true;
    }
    json_t *joined = any && ok ? oai_string(b.p ? b.p : "", b.len) : NULL;
    buf_free(&b);
    if (!joined) return prev;
    json_decref(prev);
    return joined;
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
    json_t *thought = NULL; /* reasoning for the next assistant message */
    for (size_t i = 0; i < json_array_size(in); i++) {
        const json_t *item = json_array_get(in, i);
        if (json_is_object(item) && str_is(oai_field(item, "type"), "reasoning")) {
            thought = add_reasoning(thought, item);
            continue;
        }
        attnd_status st = ATTND_ERR_NOMEM;
        json_t *m = input_item(item, i, param, err, &st);
        if (!m) {
            json_decref(thought);
            return st == ATTND_ERR_NOMEM ? attnd_fail(err, st, "out of memory") : st;
        }
        if (thought && str_is(json_object_get(m, "role"), "assistant")) json_object_set(m, "reasoning_content", thought);
        json_decref(thought);
        thought = NULL; /* reasoning before anything but the assistant's turn goes */
        json_array_append_new(r->input, m);
    }
    json_decref(thought);
    return ATTND_OK;
}

// ---- the request -------------------------------------------------------------------------

/* The sampling fields handed to oai_parse unchanged (OpenAI's and attnd's extensions). */
static const char *const SAMPLING[] = {"temperature", "top_p", "seed", "top_k", "min_p", "typical_p", "repeat_penalty",
                                       "presence_penalty", "frequency_penalty", "repeat_last_n", "logit_bias", "stop",
                                       "draft_max", "draft_min_p", "grammar", "json_schema", "ignore_eos",
                                       "n_probs", "min_keep", "dry_multiplier", "xtc_probability", "mirostat",
                                       "reasoning_budget_tokens"};

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

/* How res's reply is read (toolcall_parser_open): its chat body's tools, its id for the calls. */
static toolcall_reading reading_of(const responses_result *res) {
    return (toolcall_reading){.calls = res->req->tools, .tools = json_object_get(res->req->sampling, "tools"),
                              .id_base = res->id, .in_reasoning = res->open_reasoning,
                              .think_to_call = res->think_to_call};
}

/* The reply as the assistant message of the stored conversation (new reference). */
static json_t *reply_message(const responses_result *res) {
    toolcall_reading how = reading_of(res);
    toolcall_parser *p = toolcall_parser_open(&how);
    json_t *deltas = json_array(), *msg = NULL;
    if (p && deltas) {
        toolcall_parser_feed(p, res->text, res->text_len, deltas);
        toolcall_parser_finish(p, deltas);
        json_t *content = toolcall_parser_content(p), *r = toolcall_parser_reasoning(p);
        json_t *calls = toolcall_parser_calls(p);
        if (!json_is_string(content)) json_decref(content), content = json_string(""); /* null beside calls */
        msg = json_pack("{s:s,s:o}", "role", "assistant", "content", content);
        if (msg && r) json_object_set(msg, "reasoning_content", r);
        if (msg && calls) json_object_set(msg, "tool_calls", calls);
        json_decref(r);
        json_decref(calls);
    }
    json_decref(deltas);
    toolcall_parser_destroy(p);
    return msg;
}

json_t *responses_conversation(const responses_result *res, const json_t *earlier) {
    json_t *c = earlier ? json_deep_copy(earlier) : json_array(), *msg = reply_message(res);
    if (!c || !msg) {
        json_decref(c);
        json_decref(msg);
        return NULL;
    }
    json_array_extend(c, res->req->input);
    json_array_append_new(c, msg);
    return c;
}

// ---- output items: one builder for the stream and the final object -------------------------
//
// The reply goes through the tool-call parser (toolcall.h), which splits off reasoning and, with
// tools, the calls. Its deltas open output items in the order they appear: a reasoning item at
// the first reasoning text, the message at the first text of the answer, a function_call item
// at each call. The final Response object is made by running the same builder over the whole
// reply with its events dropped, so its items, ids and order are the stream's.

typedef struct sse_buf {
    char *p;
    size_t n, cap;
    bool failed;
    bool quiet; /* building the final object: frames are dropped */
} sse_buf;

/* Appends one event frame built from ev (stolen): type and sequence_number are added here. */
static void frame(sse_buf *b, responses_stream *st, const char *type, json_t *ev) {
    if (!ev) b->failed = true;
    if (b->failed || b->quiet) {
        json_decref(ev);
        return;
    }
    json_object_set_new(ev, "type", json_string(type));
    json_object_set_new(ev, "sequence_number", json_integer(st->seq++));
    char *data = json_dumps(ev, OAI_DUMP_FLAGS);
    json_decref(ev);
    if (!data) {
        b->failed = true;
        return;
    }
    size_t need = strlen(type) + strlen(data) + 20;
    if (!attnd_grow(&b->p, &b->cap, b->n + need + 1, 1, 256)) {
        free(data);
        b->failed = true;
        return;
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

static const char *item_status(const responses_result *res) {
    return !strcmp(res->status, "in_progress") ? "in_progress" : res->cut_short ? "incomplete" : "completed";
}

static json_t *output_text_part(const char *text, size_t n) {
    return json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text", oai_string(text, n), "annotations",
                     "logprobs");
}

/* The assistant message (text NULL: no content part yet); status follows the response's. */
static json_t *output_message(const responses_result *res, const char *status, const char *text, size_t n) {
    json_t *content = json_array();
    if (text) json_array_append_new(content, output_text_part(text, n));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", res->msg_id, "type", "message", "status", status, "role",
                     "assistant", "content", content);
}

/* Records item (stolen) as output[index] of the final object. */
static void item_set(sse_buf *b, responses_stream *st, int index, json_t *item) {
    if (!item) return (void)(b->failed = true);
    if ((size_t)index < json_array_size(st->items)) json_array_set_new(st->items, (size_t)index, item);
    else json_array_append_new(st->items, item);
}

/* Announces output[index] = item (stolen) with response.output_item.added (or .done). */
static void item_frame(sse_buf *b, responses_stream *st, const char *type, int index, json_t *item) {
    item_set(b, st, index, json_incref(item));
    frame(b, st, type, item ? json_pack("{s:i,s:o}", "output_index", index, "item", item) : NULL);
}

// ---- the message ----

static void open_message(sse_buf *b, responses_stream *st, const responses_result *res) {
    st->msg_index = st->n_items++;
    item_frame(b, st, "response.output_item.added", st->msg_index, output_message(res, "in_progress", NULL, 0));
    json_t *ev = item_at(res->msg_id, st->msg_index, true);
    if (ev) json_object_set_new(ev, "part", output_text_part("", 0));
    frame(b, st, "response.content_part.added", ev);
}

/* An output_text event (type) of the message: text[n] as its key, no logprobs. */
static void text_event(sse_buf *b, responses_stream *st, const responses_result *res, const char *type,
                       const char *key, const char *text, size_t n) {
    json_t *ev = item_at(res->msg_id, st->msg_index, true);
    if (ev) {
        json_object_set_new(ev, key, oai_string(text, n));
        json_object_set_new(ev, "logprobs", json_array());
    }
    frame(b, st, type, ev);
}

/* The message's closing events with its whole text, text[n]. */
static void close_message(sse_buf *b, responses_stream *st, const responses_result *res, const char *text, size_t n) {
    text_event(b, st, res, "response.output_text.done", "text", text, n);
    json_t *ev = item_at(res->msg_id, st->msg_index, true);
    if (ev) json_object_set_new(ev, "part", output_text_part(text, n));
    frame(b, st, "response.content_part.done", ev);
    item_frame(b, st, "response.output_item.done", st->msg_index, output_message(res, item_status(res), text, n));
    st->msg_closed = true;
}

// ---- reasoning ----

static json_t *reasoning_item(const responses_stream *st, const char *status, bool with_text) {
    json_t *content = json_array();
    if (with_text) /* a copy: rs_text changes when the next reasoning item opens */
        json_array_append_new(content, json_pack("{s:s,s:s%}", "type", "reasoning_text", "text",
                                                 json_string_value(st->rs_text), json_string_length(st->rs_text)));
    return json_pack("{s:s,s:s,s:[],s:o,s:s}", "id", st->rs_id, "type", "reasoning", "summary", "content", content,
                     "status", status);
}

/* A reasoning item opens: rs_ plus the message id's tail (and _k for the k-th after the first). */
static void open_reasoning(sse_buf *b, responses_stream *st, const responses_result *res) {
    const char *tail = !strncmp(res->msg_id, "msg_", 4) ? res->msg_id + 4 : res->msg_id;
    if (st->n_rs) snprintf(st->rs_id, sizeof(st->rs_id), "rs_%.56s_%d", tail, st->n_rs);
    else snprintf(st->rs_id, sizeof(st->rs_id), "rs_%.56s", tail);
    st->n_rs++;
    st->rs_index = st->n_items++;
    json_string_set(st->rs_text, "");
    item_frame(b, st, "response.output_item.added", st->rs_index, reasoning_item(st, "in_progress", false));
    json_t *ev = item_at(st->rs_id, st->rs_index, true);
    if (ev) json_object_set_new(ev, "part", json_pack("{s:s,s:s}", "type", "reasoning_text", "text", ""));
    frame(b, st, "response.content_part.added", ev);
}

static void reasoning_delta(sse_buf *b, responses_stream *st, const char *text, size_t n) {
    size_t have = json_string_length(st->rs_text);
    char *joined = malloc(have + n + 1);
    if (!joined) return (void)(b->failed = true);
    memcpy(joined, json_string_value(st->rs_text), have), memcpy(joined + have, text, n);
    json_string_setn(st->rs_text, joined, have + n);
    free(joined);
    json_t *ev = item_at(st->rs_id, st->rs_index, true);
    if (ev) json_object_set_new(ev, "delta", oai_string(text, n));
    frame(b, st, "response.reasoning_text.delta", ev);
}

static void close_reasoning(sse_buf *b, responses_stream *st, const char *status) {
    if (st->rs_index < 0) return;
    json_t *ev = item_at(st->rs_id, st->rs_index, true);
    if (ev) json_object_set(ev, "text", st->rs_text);
    frame(b, st, "response.reasoning_text.done", ev);
    ev = item_at(st->rs_id, st->rs_index, true);
    if (ev) json_object_set_new(ev, "part", json_pack("{s:s,s:O}", "type", "reasoning_text", "text", st->rs_text));
    frame(b, st, "response.content_part.done", ev);
    item_frame(b, st, "response.output_item.done", st->rs_index, reasoning_item(st, status, true));
    st->rs_index = -1;
}

// ---- function calls ----

/* A function_call item's id from its call id: the stream and the final object agree. */
static void fc_id(const char *call_id, char *out, size_t n) {
    snprintf(out, n, "fc_%.80s", call_id && !strncmp(call_id, "call_", 5) ? call_id + 5 : call_id ? call_id : "");
}

static json_t *call_item(const responses_stream *st, const char *status) {
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s%}", "type", "function_call", "id", st->call_item, "status", status,
                     "call_id", st->call_id, "name", st->call_name, "arguments", json_string_value(st->call_args),
                     json_string_length(st->call_args));
}

static void close_call(sse_buf *b, responses_stream *st) {
    if (st->call_index < 0) return;
    json_t *ev = item_at(st->call_item, st->call_index, false);
    if (ev) json_object_set(ev, "arguments", st->call_args);
    frame(b, st, "response.function_call_arguments.done", ev);
    item_frame(b, st, "response.output_item.done", st->call_index, call_item(st, "completed"));
    st->call_index = -1;
}

static void open_call(sse_buf *b, responses_stream *st, const json_t *id, const json_t *f) {
    st->call_index = st->n_items++;
    st->n_calls++;
    snprintf(st->call_id, sizeof(st->call_id), "%s", json_string_value(id));
    fc_id(st->call_id, st->call_item, sizeof(st->call_item));
    snprintf(st->call_name, sizeof(st->call_name), "%s", json_string_value(json_object_get(f, "name")));
    json_string_set(st->call_args, "");
    item_frame(b, st, "response.output_item.added", st->call_index, call_item(st, "in_progress"));
}

static void call_delta(sse_buf *b, responses_stream *st, const char *frag) {
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

// ---- from parser deltas to items ----

/* One parser delta as Responses events; an item of one kind closes the open one of another. */
static void item_event(sse_buf *b, responses_stream *st, const responses_result *res, const json_t *d) {
    const json_t *c = json_object_get(d, "content"), *r = json_object_get(d, "reasoning_content");
    const json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
    if (json_is_string(r)) {
        close_call(b, st);
        if (st->rs_index < 0) open_reasoning(b, st, res);
        reasoning_delta(b, st, json_string_value(r), json_string_length(r));
        return;
    }
    if (json_is_string(c) || tc) close_reasoning(b, st, "completed");
    if (json_is_string(c)) {
        close_call(b, st);
        if (st->msg_index < 0) open_message(b, st, res);
        text_event(b, st, res, "response.output_text.delta", "delta", json_string_value(c),
                   json_string_length(c));
        return;
    }
    if (!tc) return;
    const json_t *f = json_object_get(tc, "function"), *id = json_object_get(tc, "id");
    const char *frag = json_string_value(json_object_get(f, "arguments"));
    if (id) close_call(b, st), open_call(b, st, id, f);
    if (frag && *frag && st->call_index >= 0) call_delta(b, st, frag);
}

static void item_events(sse_buf *b, responses_stream *st, const responses_result *res, json_t *deltas) {
    if (!deltas) return (void)(b->failed = true);
    for (size_t i = 0; i < json_array_size(deltas); i++) item_event(b, st, res, json_array_get(deltas, i));
    json_decref(deltas);
}

/* The builder's state before the first text; false when out of memory. */
static bool items_start(responses_stream *st, const responses_result *res) {
    st->msg_index = st->call_index = st->rs_index = -1;
    toolcall_reading how = reading_of(res);
    st->tp = toolcall_parser_open(&how);
    st->items = json_array();
    st->call_args = json_string("");
    st->rs_text = json_string("");
    return st->tp && st->items && st->call_args && st->rs_text;
}

static void items_feed(sse_buf *b, responses_stream *st, const responses_result *res, const char *text, size_t n) {
    json_t *deltas = json_array();
    if (deltas) toolcall_parser_feed(st->tp, text, n, deltas);
    item_events(b, st, res, deltas);
}

/* The end of the reply: what the parser held back, then every open item closes. A reply without
 * calls always has its message, empty if need be. */
static void items_end(sse_buf *b, responses_stream *st, const responses_result *res) {
    json_t *deltas = json_array();
    if (deltas) toolcall_parser_finish(st->tp, deltas);
    item_events(b, st, res, deltas);
    close_call(b, st);
    close_reasoning(b, st, res->cut_short && st->msg_index < 0 && !st->n_calls ? "incomplete" : "completed");
    if (st->msg_index < 0 && !st->n_calls) open_message(b, st, res);
    if (st->msg_index >= 0 && !st->msg_closed) {
        json_t *content = toolcall_parser_content(st->tp);
        bool text = json_is_string(content);
        close_message(b, st, res, text ? json_string_value(content) : "", text ? json_string_length(content) : 0);
        json_decref(content);
    }
    st->ended = true;
}

/* The output items of a finished reply (new reference; NULL when out of memory). */
static json_t *output_items(const responses_result *res) {
    responses_stream st = {0};
    sse_buf b = {.quiet = true};
    json_t *items = NULL;
    if (items_start(&st, res)) {
        items_feed(&b, &st, res, res->text, res->text_len);
        items_end(&b, &st, res);
        if (!b.failed) items = json_incref(st.items);
    }
    responses_stream_free(&st);
    free(b.p);
    return items;
}

// ---- the Response object -----------------------------------------------------------------

static json_t *usage(const responses_result *res) {
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", res->input_tokens, "input_tokens_details",
                     "cached_tokens", res->cached_tokens, "output_tokens", res->output_tokens, "output_tokens_details",
                     "reasoning_tokens", res->reasoning_tokens, "total_tokens", res->input_tokens + res->output_tokens);
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

/* The request's tools, back in Responses' shape (new reference). */
static json_t *echo_tools(const responses_request *q) {
    const json_t *tools = json_object_get(q->sampling, "tools");
    json_t *rtools = json_array();
    for (size_t i = 0; rtools && i < json_array_size(tools); i++) {
        json_t *t = json_deep_copy(json_object_get(json_array_get(tools, i), "function"));
        if (t) json_object_set_new(t, "type", json_string("function")), json_array_append_new(rtools, t);
    }
    return rtools;
}

json_t *responses_object(const responses_result *res) {
    const responses_request *q = res->req;
    bool running = !strcmp(res->status, "in_progress");
    json_t *o = json_object(), *output = running ? json_array() : output_items(res);
    if (!o || !output) {
        json_decref(o);
        json_decref(output);
        return NULL;
    }
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
    json_object_set_new(o, "temperature", completion_body_float((float)res->temperature));
    json_object_set_new(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    const json_t *tc = json_object_get(q->sampling, "tool_choice");
    json_object_set_new(o, "tool_choice", tc ? json_deep_copy(tc) : json_string("none"));
    json_object_set_new(o, "tools", echo_tools(q));
    json_object_set_new(o, "top_p", completion_body_float((float)res->top_p));
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

char *responses_stream_begin(responses_stream *st, const responses_result *res) {
    sse_buf b = {0};
    if (!items_start(st, res)) return NULL;
    frame(&b, st, "response.created", json_pack("{s:o}", "response", responses_object(res)));
    frame(&b, st, "response.in_progress", json_pack("{s:o}", "response", responses_object(res)));
    return finish(&b);
}

char *responses_stream_delta(responses_stream *st, const responses_result *res, const char *text, size_t n) {
    sse_buf b = {0};
    if (!st->tp) return NULL;
    items_feed(&b, st, res, text, n);
    return finish(&b);
}

char *responses_stream_end(responses_stream *st, const responses_result *res) {
    sse_buf b = {0};
    if (st->tp && !st->ended) items_end(&b, st, res);
    const char *last = res->cut_short ? "response.incomplete" : "response.completed";
    frame(&b, st, last, json_pack("{s:o}", "response", responses_object(res)));
    return finish(&b);
}

void responses_stream_free(responses_stream *st) {
    if (!st) return;
    toolcall_parser_destroy(st->tp);
    json_decref(st->items);
    json_decref(st->call_args);
    json_decref(st->rs_text);
    st->tp = NULL, st->items = st->call_args = st->rs_text = NULL;
}

char *responses_stream_failed(responses_stream *st, const responses_result *res, const char *message) {
    sse_buf b = {0};
    json_t *o = responses_object(res);
    if (o) json_object_set_new(o, "error", json_pack("{s:s,s:o}", "code", "server_error", "message",
                                                     oai_string(message, strlen(message))));
    frame(&b, st, "response.failed", o ? json_pack("{s:o}", "response", o) : NULL);
    return finish(&b);
}
