/*
 * anthropic.c — Anthropic's Messages API (see anthropic.h): the body translated into a chat
 * completion body, and the reply as content blocks, whole or as stream events.
 */
#include "anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"
#include "toolcall.h"

static bool str_is(const json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }

/* A field name built at run time for *param (one per thread: *param must outlive the call). */
static const char *param_name(const char *fmt, size_t i, size_t j) {
    static _Thread_local char name[80];
    snprintf(name, sizeof(name), fmt, i, j);
    return name;
}

static attnd_status nomem(attnd_err *err) { return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory"); }

// ---- the request: system and messages ----------------------------------------------------

/* Appends the text of text blocks (or a string) to out; other block types are refused. */
static attnd_status text_of(const json_t *v, const char *where, buf *out, const char **param, attnd_err *err) {
    if (json_is_string(v)) return buf_puts(out, json_string_value(v)) ? ATTND_OK : nomem(err);
    if (!json_is_array(v)) return oai_bad(param, where, err, "'%s' must be a string or an array of text blocks", where);
    size_t i;
    const json_t *b;
    json_array_foreach(v, i, b) {
        const json_t *t = json_object_get(b, "type");
        if (str_is(t, "image") || str_is(t, "document"))
            return oai_bad(param, where, err, "'%s' has an %s block: this server has no vision model (text only)", where,
                           json_string_value(t));
        if (!str_is(t, "text") || !json_is_string(json_object_get(b, "text")))
            return oai_bad(param, where, err, "'%s[%zu]' must be a block {\"type\": \"text\", \"text\": string}", where, i);
        if ((out->len && !buf_puts(out, "\n")) || !buf_puts(out, json_string_value(json_object_get(b, "text"))))
            return nomem(err);
    }
    return ATTND_OK;
}

static attnd_status push_msg(json_t *msgs, const char *role, const char *content, attnd_err *err) {
    json_t *m = json_pack("{s:s, s:s}", "role", role, "content", content);
    return m && !json_array_append_new(msgs, m) ? ATTND_OK : nomem(err);
}

/* A tool_result block as a role "tool" message. */
static attnd_status tool_result(const json_t *b, size_t i, size_t j, json_t *msgs, const char **param, attnd_err *err) {
    const char *where = param_name("messages[%zu].content[%zu]", i, j);
    const json_t *id = json_object_get(b, "tool_use_id"), *c = oai_field(b, "content"), *e = oai_field(b, "is_error");
    if (!json_is_string(id)) return oai_bad(param, where, err, "'%s' (tool_result) needs a 'tool_use_id' string", where);
    if (e && !json_is_boolean(e)) return oai_bad(param, where, err, "'%s.is_error' must be a boolean", where);
    buf text;
    buf_init(&text);
    attnd_status rc = json_is_true(e) && !buf_puts(&text, "Error: ") ? nomem(err) : ATTND_OK;
    if (rc == ATTND_OK && c) {
        buf body; /* the blocks' text on its own, so the "Error: " prefix does not read as a block */
        buf_init(&body);
        rc = text_of(c, where, &body, param, err);
        if (rc == ATTND_OK && body.len && !buf_append(&text, body.p, body.len)) rc = nomem(err);
        buf_free(&body);
    }
    json_t *m = rc == ATTND_OK ? json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", json_string_value(id),
                                           "content", text.p ? text.p : "")
                               : NULL;
    buf_free(&text);
    if (rc != ATTND_OK) return rc;
    return m && !json_array_append_new(msgs, m) ? ATTND_OK : nomem(err);
}

/* A user turn: its text blocks as user messages, its tool_result blocks as tool messages, in
 * their order. */
static attnd_status user_turn(const json_t *content, size_t i, json_t *msgs, const char **param, attnd_err *err) {
    buf text;
    buf_init(&text);
    attnd_status rc = ATTND_OK;
    size_t j;
    const json_t *b;
    json_array_foreach(content, j, b) {
        const json_t *t = json_object_get(b, "type");
        if (str_is(t, "tool_result")) {
            if (text.len && (rc = push_msg(msgs, "user", text.p, err))) break;
            buf_clear(&text);
            if ((rc = tool_result(b, i, j, msgs, param, err))) break;
            continue;
        }
        json_t *one = json_pack("[O]", b);
        rc = one ? text_of(one, param_name("messages[%zu].content[%zu]", i, j), &text, param, err) : nomem(err);
        json_decref(one);
        if (rc) break;
    }
    if (rc == ATTND_OK && (text.len || !json_array_size(content))) rc = push_msg(msgs, "user", text.p ? text.p : "", err);
    buf_free(&text);
    return rc;
}

/* An assistant tool_use block as one of OpenAI's tool_calls. */
static attnd_status tool_use(const json_t *b, const char *where, json_t *calls, const char **param, attnd_err *err) {
    const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *in = json_object_get(b, "input");
    if (!json_is_string(id) || !json_is_string(name) || !json_is_object(in))
        return oai_bad(param, where, err, "'%s' (tool_use) needs 'id' and 'name' strings and an 'input' object", where);
    char *args = json_dumps(in, JSON_COMPACT);
    json_t *c = args ? json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function", "name", name,
                                 "arguments", args)
                     : NULL;
    free(args);
    return c && !json_array_append_new(calls, c) ? ATTND_OK : nomem(err);
}

/* An assistant turn: text, thinking and tool_use blocks as one assistant message. */
static attnd_status assistant_turn(const json_t *content, size_t i, json_t *msgs, const char **param, attnd_err *err) {
    buf text, think;
    buf_init(&text);
    buf_init(&think);
    json_t *calls = json_array();
    attnd_status rc = calls ? ATTND_OK : nomem(err);
    size_t j;
    const json_t *b;
    json_array_foreach(content, j, b) {
        if (rc) break;
        const char *where = param_name("messages[%zu].content[%zu]", i, j);
        const json_t *t = json_object_get(b, "type");
        if (str_is(t, "tool_use")) rc = tool_use(b, where, calls, param, err);
        else if (str_is(t, "redacted_thinking")) continue; /* opaque data: nothing a local model can read */
        else if (str_is(t, "thinking") && json_is_string(json_object_get(b, "thinking")))
            rc = buf_puts(&think, json_string_value(json_object_get(b, "thinking"))) ? ATTND_OK : nomem(err);
        else if (str_is(t, "text")) {
            json_t *one = json_pack("[O]", b);
            rc = one ? text_of(one, where, &text, param, err) : nomem(err);
            json_decref(one);
        } else
            rc = oai_bad(param, where, err, "'%s': an assistant turn holds text, thinking and tool_use blocks", where);
    }
    json_t *m = rc ? NULL : json_pack("{s:s, s:s}", "role", "assistant", "content", text.p ? text.p : "");
    if (!rc && !m) rc = nomem(err);
    if (m && think.len) json_object_set_new(m, "reasoning_content", json_string(think.p));
    if (m && json_array_size(calls)) json_object_set(m, "tool_calls", calls);
    if (m && json_array_append_new(msgs, m)) rc = nomem(err);
    json_decref(calls);
    buf_free(&text);
    buf_free(&think);
    return rc;
}

static attnd_status messages_of(const json_t *body, json_t *msgs, const char **param, attnd_err *err) {
    const json_t *sys = oai_field(body, "system"), *ms = oai_field(body, "messages");
    attnd_status rc;
    if (sys) {
        buf text;
        buf_init(&text);
        rc = text_of(sys, "system", &text, param, err);
        if (rc == ATTND_OK) rc = push_msg(msgs, "system", text.p ? text.p : "", err);
        buf_free(&text);
        if (rc) return rc;
    }
    if (!json_is_array(ms) || !json_array_size(ms))
        return oai_bad(param, "messages", err, "'messages' must be a non-empty array of {\"role\", \"content\"}");
    size_t i;
    const json_t *m;
    json_array_foreach(ms, i, m) {
        const json_t *role = json_object_get(m, "role"), *c = json_object_get(m, "content");
        const char *where = param_name("messages[%zu]", i, 0);
        if (!str_is(role, "user") && !str_is(role, "assistant"))
            return oai_bad(param, where, err, "'%s.role' must be \"user\" or \"assistant\"", where);
        json_t *blocks = json_is_string(c) ? json_pack("[{s:s, s:O}]", "type", "text", "text", c) : json_incref((json_t *)c);
        if (!json_is_array(blocks)) {
            json_decref(blocks);
            return oai_bad(param, where, err, "'%s.content' must be a string or an array of content blocks", where);
        }
        rc = str_is(role, "user") ? user_turn(blocks, i, msgs, param, err) : assistant_turn(blocks, i, msgs, param, err);
        json_decref(blocks);
        if (rc) return rc;
    }
    return ATTND_OK;
}

// ---- the request: tools, limits, sampling ------------------------------------------------

static attnd_status tools_of(const json_t *body, json_t *chat, const char **param, attnd_err *err) {
    const json_t *tools = oai_field(body, "tools"), *tc = oai_field(body, "tool_choice");
    if (tools) {
        if (!json_is_array(tools)) return oai_bad(param, "tools", err, "'tools' must be an array");
        json_t *out = json_array();
        json_object_set_new(chat, "tools", out);
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            const json_t *type = json_object_get(t, "type"), *name = json_object_get(t, "name");
            const json_t *schema = json_object_get(t, "input_schema"), *desc = oai_field(t, "description");
            const char *where = param_name("tools[%zu]", i, 0);
            if (type && !json_is_null(type) && !str_is(type, "custom"))
                return oai_bad(param, where, err, "'%s': tool type '%s' is not supported (client tools only)", where,
                               json_is_string(type) ? json_string_value(type) : "?");
            if (!json_is_string(name) || !json_is_object(schema) || (desc && !json_is_string(desc)))
                return oai_bad(param, where, err, "'%s' must be {\"name\", \"description\", \"input_schema\": {...}}", where);
            json_t *f = json_pack("{s:s, s:{s:O, s:O}}", "type", "function", "function", "name", name, "parameters", schema);
            if (!f) return nomem(err);
            if (desc) json_object_set(json_object_get(f, "function"), "description", (json_t *)desc);
            json_array_append_new(out, f);
        }
    }
    if (!tc) return ATTND_OK;
    const json_t *type = json_object_get(tc, "type"), *dp = oai_field(tc, "disable_parallel_tool_use");
    if (!json_is_object(tc) || (dp && !json_is_boolean(dp)))
        return oai_bad(param, "tool_choice", err, "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    if (json_is_true(dp)) json_object_set_new(chat, "parallel_tool_calls", json_false());
    if (str_is(type, "auto")) return json_object_set_new(chat, "tool_choice", json_string("auto")) ? nomem(err) : ATTND_OK;
    if (str_is(type, "any")) return json_object_set_new(chat, "tool_choice", json_string("required")) ? nomem(err) : ATTND_OK;
    if (str_is(type, "none")) return json_object_set_new(chat, "tool_choice", json_string("none")) ? nomem(err) : ATTND_OK;
    const json_t *name = json_object_get(tc, "name");
    if (!str_is(type, "tool") || !json_is_string(name))
        return oai_bad(param, "tool_choice", err,
                       "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\"}");
    json_t *named = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name);
    return named && !json_object_set_new(chat, "tool_choice", named) ? ATTND_OK : nomem(err);
}

/* max_tokens (required unless count_only; clamped to the cap), thinking, stop_sequences. */
static attnd_status limits_of(const json_t *body, const server_settings *cfg, bool count_only, anthropic_request *out,
                              const char **param, attnd_err *err) {
    json_t *chat = out->chat_body;
    const json_t *mt = oai_field(body, "max_tokens"), *th = oai_field(body, "thinking"), *st = oai_field(body, "stop_sequences");
    if (!mt && !count_only) return oai_bad(param, "max_tokens", err, "'max_tokens' is required");
    if (mt && (!json_is_integer(mt) || json_integer_value(mt) < 1))
        return oai_bad(param, "max_tokens", err, "'max_tokens' must be an integer of at least 1");
    if (mt && !count_only) {
        json_int_t v = json_integer_value(mt);
        out->clamped = v > cfg->max_tokens_cap;
        json_object_set_new(chat, "max_tokens", json_integer(out->clamped ? cfg->max_tokens_cap : v));
    }
    if (th) {
        const json_t *type = json_object_get(th, "type"), *budget = oai_field(th, "budget_tokens");
        bool on = str_is(type, "enabled") || str_is(type, "adaptive");
        if (!json_is_object(th) || (!on && !str_is(type, "disabled")))
            return oai_bad(param, "thinking", err, "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\"} or {\"type\": \"disabled\"}");
        if (budget && (!json_is_integer(budget) || json_integer_value(budget) < 1))
            return oai_bad(param, "thinking.budget_tokens", err, "'thinking.budget_tokens' must be a positive integer");
        json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", on));
        /* the budget closes the thinking block when it is spent (gen.h's think_budget) */
        if (on && budget) json_object_set(chat, "reasoning_budget_tokens", (json_t *)budget);
    }
    if (st) {
        if (!json_is_array(st)) return oai_bad(param, "stop_sequences", err, "'stop_sequences' must be an array of strings");
        if (json_array_size(st)) json_object_set(chat, "stop", (json_t *)st);
    }
    return ATTND_OK;
}

attnd_status anthropic_parse(const json_t *body, const server_settings *cfg, bool count_only, anthropic_request *out,
                             const char **param, attnd_err *err) {
    *out = (anthropic_request){0};
    *param = NULL;
    if (!json_is_object(body)) return oai_bad(param, NULL, err, "the body must be a JSON object");
    const json_t *v;
    if ((v = oai_field(body, "stream")) && !json_is_boolean(v)) return oai_bad(param, "stream", err, "'stream' must be a boolean");
    out->stream = json_is_true(v) && !count_only;
    if ((v = oai_field(body, "metadata")) && !json_is_object(v)) return oai_bad(param, "metadata", err, "'metadata' must be an object");
    out->chat_body = json_object();
    json_t *msgs = json_array();
    if (!out->chat_body || !msgs || json_object_set_new(out->chat_body, "messages", msgs)) return nomem(err);
    attnd_status rc = messages_of(body, msgs, param, err);
    if (rc == ATTND_OK) rc = tools_of(body, out->chat_body, param, err);
    if (rc == ATTND_OK) rc = limits_of(body, cfg, count_only, out, param, err);
    /* the same meaning in a chat body: Anthropic's sampling fields, and attnd's extensions */
    static const char *const PASS[] = {"temperature", "top_p", "top_k", "seed", "min_p", "typical_p",
                                       "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty",
                                       "grammar", "json_schema", "session_id", "draft_max", "draft_min_p"};
    for (size_t i = 0; rc == ATTND_OK && i < ATTND_ARRAY_LEN(PASS); i++)
        if ((v = oai_field(body, PASS[i]))) json_object_set(out->chat_body, PASS[i], (json_t *)v);
    return rc;
}

void anthropic_request_free(anthropic_request *r) {
    if (!r) return;
    json_decref(r->chat_body);
    r->chat_body = NULL;
}

// ---- the reply: content blocks and stream events -------------------------------------------

enum { K_NONE = 0, K_TEXT, K_THINKING, K_TOOL };

static void frame(buf *out, const char *event, json_t *data /* stolen */) {
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (s) buf_printf(out, "event: %s\ndata: %s\n\n", event, s);
    free(s);
}

bool anthropic_stream_init(anthropic_stream *st, const toolcall_reading *how) {
    *st = (anthropic_stream){.open = -1};
    st->tp = toolcall_parser_open(how);
    st->blocks = json_array();
    return st->tp && st->blocks;
}

void anthropic_stream_free(anthropic_stream *st) {
    toolcall_parser_destroy(st->tp);
    json_decref(st->blocks);
    json_decref(st->args);
    buf_free(&st->blank);
    *st = (anthropic_stream){.open = -1};
}

/* Closes the open block: a tool_use block gets its input from the arguments streamed. */
static void block_close(anthropic_stream *st, buf *out) {
    buf_clear(&st->blank); /* blanks before another kind of block: dropped */
    if (st->open < 0) return;
    if (st->kind == K_TOOL) {
        json_t *in = json_loads(json_string_value(st->args), 0, NULL);
        if (json_is_object(in)) json_object_set(json_array_get(st->blocks, (size_t)st->open), "input", in);
        json_decref(in);
        json_decref(st->args);
        st->args = NULL;
    }
    if (out) frame(out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", st->open));
    st->open = -1;
    st->kind = K_NONE;
}

static void block_open(anthropic_stream *st, int kind, json_t *block /* stolen */, buf *out) {
    block_close(st, out);
    if (!block) return;
    st->open = (int)json_array_size(st->blocks);
    st->kind = kind;
    json_array_append(st->blocks, block);
    json_t *shown = json_deep_copy(block);
    if (kind == K_TOOL) json_object_set_new(shown, "input", json_object()); /* the input streams as JSON */
    if (out) frame(out, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", st->open, "content_block", shown));
    else json_decref(shown);
    json_decref(block);
}

/* More text (or thinking) for a block of kind, opened when another kind is open. */
static void block_text(anthropic_stream *st, int kind, const char *s, buf *out) {
    if (!*s) return;
    if (kind == K_TEXT && st->kind != K_TEXT) { /* blanks alone (between two calls) open no text block */
        if (!buf_puts(&st->blank, s)) return;
        if (strspn(st->blank.p, " \t\r\n") == st->blank.len) return;
        char *held = st->blank.p;
        st->blank = (buf){0};
        block_open(st, K_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""), out);
        block_text(st, K_TEXT, held, out);
        free(held);
        return;
    }
    const char *key = kind == K_TEXT ? "text" : "thinking";
    if (st->kind != kind)
        block_open(st, kind, kind == K_TEXT ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                                            : json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""),
                   out);
    json_t *b = json_array_get(st->blocks, (size_t)st->open);
    const char *was = json_string_value(json_object_get(b, key));
    size_t n = strlen(was), m = strlen(s);
    char *joined = malloc(n + m + 1);
    if (!joined) return;
    memcpy(joined, was, n);
    memcpy(joined + n, s, m + 1);
    json_object_set_new(b, key, json_string(joined));
    free(joined);
    if (out)
        frame(out, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", st->open,
                                                    "delta", "type", kind == K_TEXT ? "text_delta" : "thinking_delta", key, s));
}

/* A tool_calls delta: an entry with an id opens a tool_use block; arguments stream into it. */
static void block_call(anthropic_stream *st, const json_t *call, buf *out) {
    const json_t *f = json_object_get(call, "function"), *id = json_object_get(call, "id");
    if (json_is_string(id)) {
        block_open(st, K_TOOL, json_pack("{s:s, s:O, s:O, s:{}}", "type", "tool_use", "id", id, "name", json_object_get(f, "name"), "input"), out);
        st->args = json_string("");
    }
    const char *a = json_string_value(json_object_get(f, "arguments"));
    if (st->kind != K_TOOL || !a || !*a) return;
    size_t n = strlen(json_string_value(st->args)), m = strlen(a);
    char *joined = malloc(n + m + 1);
    if (!joined) return;
    memcpy(joined, json_string_value(st->args), n);
    memcpy(joined + n, a, m + 1);
    json_string_set(st->args, joined);
    free(joined);
    if (out)
        frame(out, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", st->open,
                                                    "delta", "type", "input_json_delta", "partial_json", a));
}

static void apply_deltas(anthropic_stream *st, const json_t *deltas, buf *out) {
    size_t i, j;
    const json_t *d, *c;
    json_array_foreach(deltas, i, d) {
        const char *s;
        if ((s = json_string_value(json_object_get(d, "reasoning_content")))) block_text(st, K_THINKING, s, out);
        if ((s = json_string_value(json_object_get(d, "content")))) block_text(st, K_TEXT, s, out);
        json_array_foreach(json_object_get(d, "tool_calls"), j, c) block_call(st, c, out);
    }
}

static json_t *usage_of(const anthropic_result *res) {
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", res->input_tokens, "output_tokens", res->output_tokens,
                     "cache_read_input_tokens", res->cache_read_tokens, "cache_creation_input_tokens", 0);
}

/* The Message object around blocks (borrowed); stop_reason null while running. */
static json_t *message_of(const anthropic_result *res, const json_t *blocks, const char *stop_reason) {
    json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:O, s:o, s:o, s:o}", "id", res->id, "type", "message", "role",
                          "assistant", "model", res->model ? res->model : "", "content", blocks, "stop_reason",
                          stop_reason ? json_string(stop_reason) : json_null(), "stop_sequence",
                          res->stop_sequence && stop_reason && !strcmp(stop_reason, "stop_sequence")
                              ? json_string(res->stop_sequence) : json_null(),
                          "usage", usage_of(res));
    return m;
}

/* The stop reason the Message reports: tool_use when the reply ended naturally with calls. */
static const char *stop_reason_of(const anthropic_stream *st, const char *natural) {
    if (!natural || strcmp(natural, "end_turn")) return natural;
    return !strcmp(toolcall_parser_finish_reason(st->tp, "stop"), "tool_calls") ? "tool_use" : natural;
}

void anthropic_stream_begin(anthropic_stream *st, const anthropic_result *res, buf *out) {
    json_t *empty = json_array();
    frame(out, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", message_of(res, empty, NULL)));
    json_decref(empty);
    frame(out, "ping", json_pack("{s:s}", "type", "ping"));
    (void)st;
}

void anthropic_stream_delta(anthropic_stream *st, const char *text, size_t n, buf *out) {
    json_t *deltas = json_array();
    if (!deltas) return;
    toolcall_parser_feed(st->tp, text, n, deltas);
    apply_deltas(st, deltas, out);
    json_decref(deltas);
}

/* Finishes the parser and closes the last block (frames to out, or none when out is NULL). */
static void stream_finish(anthropic_stream *st, buf *out) {
    if (st->ended) return;
    st->ended = true;
    json_t *deltas = json_array();
    if (deltas) toolcall_parser_finish(st->tp, deltas);
    apply_deltas(st, deltas, out);
    json_decref(deltas);
    block_close(st, out);
}

void anthropic_stream_end(anthropic_stream *st, const anthropic_result *res, buf *out) {
    stream_finish(st, out);
    const char *reason = stop_reason_of(st, res->stop_reason);
    bool seq = reason && !strcmp(reason, "stop_sequence") && res->stop_sequence;
    frame(out, "message_delta", json_pack("{s:s, s:{s:s?, s:s?}, s:o}", "type", "message_delta", "delta", "stop_reason",
                                          reason, "stop_sequence", seq ? res->stop_sequence : NULL, "usage", usage_of(res)));
    frame(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

void anthropic_stream_error(anthropic_stream *st, int http_status, const char *message, buf *out) {
    st->ended = true;
    frame(out, "error", anthropic_error(http_status, message));
}

json_t *anthropic_message(const anthropic_result *res, const char *text, size_t n, const toolcall_reading *how) {
    anthropic_stream st;
    json_t *m = NULL;
    if (anthropic_stream_init(&st, how)) {
        anthropic_stream_delta(&st, text, n, NULL);
        stream_finish(&st, NULL);
        m = message_of(res, st.blocks, stop_reason_of(&st, res->stop_reason));
    }
    anthropic_stream_free(&st);
    return m;
}

const char *anthropic_error_type(int http_status) {
    switch (http_status) {
    case 400: case 405: case 409: case 421: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return "api_error";
    }
}

json_t *anthropic_error(int http_status, const char *message) {
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", anthropic_error_type(http_status),
                     "message", message ? message : "");
}
