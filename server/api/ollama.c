/*
 * ollama.c — Ollama's /api/chat and /api/generate (see ollama.h): the body translated into a
 * chat or completion body, and the reply as Ollama's answer or NDJSON lines.
 */
#include "ollama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gotmpl.h"
#include "infill.h"
#include "oai.h"
#include "toolcall.h"

static bool str_is(const json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }

static attnd_status nomem(attnd_err *err) { return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory"); }

static const char *param_name(const char *fmt, size_t i) {
    static _Thread_local char name[64]; /* *param must outlive the call: one per thread */
    snprintf(name, sizeof(name), fmt, i);
    return name;
}

static bool has_images(const json_t *o) {
    const json_t *im = oai_field(o, "images");
    return im && !(json_is_array(im) && json_array_size(im) == 0);
}

// ---- the request ---------------------------------------------------------------------------

/* An assistant message's tool_calls in OpenAI's shape (new reference). */
static json_t *calls_of(const json_t *calls, size_t i, const char **param, attnd_err *err, attnd_status *rc) {
    json_t *out = json_array();
    size_t j;
    const json_t *c;
    json_array_foreach(calls, j, c) {
        const json_t *f = json_object_get(c, "function"), *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        if (!json_is_string(name) || (args && !json_is_object(args))) {
            *rc = oai_bad(param, param_name("messages[%zu].tool_calls", i), err,
                          "'messages[%zu].tool_calls[%zu]' must be {\"function\": {\"name\", \"arguments\": {...}}}", i, j);
            json_decref(out);
            return NULL;
        }
        char id[48];
        snprintf(id, sizeof(id), "call_%zu_%zu", i, j);
        const json_t *given = json_object_get(c, "id");
        char *a = args ? json_dumps(args, JSON_COMPACT) : NULL;
        json_array_append_new(out, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", json_is_string(given) ? json_string_value(given) : id,
                                             "type", "function", "function", "name", name, "arguments", a ? a : "{}"));
        free(a);
    }
    return out;
}

static attnd_status chat_messages(const json_t *body, json_t *msgs, const char **param, attnd_err *err) {
    const json_t *ms = oai_field(body, "messages");
    if (!json_is_array(ms)) return oai_bad(param, "messages", err, "'messages' must be an array");
    size_t i;
    const json_t *m;
    json_array_foreach(ms, i, m) {
        const json_t *role = json_object_get(m, "role"), *content = oai_field(m, "content");
        const json_t *thinking = oai_field(m, "thinking"), *calls = oai_field(m, "tool_calls");
        const char *where = param_name("messages[%zu]", i);
        if (!json_is_string(role) || (content && !json_is_string(content)) || (calls && !json_is_array(calls)))
            return oai_bad(param, where, err, "'%s' must be {\"role\", \"content\": string}", where);
        if (has_images(m)) return oai_bad(param, where, err, "'%s' has images: this server has no vision model (text only)", where);
        json_t *out = json_pack("{s:O, s:s}", "role", role, "content", content ? json_string_value(content) : "");
        if (!out || json_array_append_new(msgs, out)) return nomem(err);
        if (json_is_string(thinking)) json_object_set(out, "reasoning_content", (json_t *)thinking);
        const json_t *tn = oai_field(m, "tool_name"), *tid = oai_field(m, "tool_call_id");
        if (json_is_string(tn)) json_object_set(out, "name", (json_t *)tn);
        if (json_is_string(tid)) json_object_set(out, "tool_call_id", (json_t *)tid);
        if (calls && json_array_size(calls)) {
            attnd_status rc = ATTND_OK;
            json_t *oc = calls_of(calls, i, param, err, &rc);
            if (!oc) return rc ? rc : nomem(err);
            json_object_set_new(out, "tool_calls", oc);
        }
    }
    return ATTND_OK;
}

/* /api/generate's template (gotmpl.h) filled as Ollama fills it: .Prompt and .Suffix with a
 * suffix, else .System and .Prompt; the text runs as a completion. */
static attnd_status templated(const json_t *body, const json_t *tmpl, const char *text, ollama_request *out,
                              const char **param, attnd_err *err) {
    const json_t *sys = oai_field(body, "system");
    gotmpl_values v = {.prompt = text, .suffix = out->suffix, .system = out->suffix ? NULL : json_string_value(sys)};
    buf b;
    buf_init(&b);
    attnd_status st = gotmpl_render(json_string_value(tmpl), json_string_length(tmpl), &v, &b, err);
    if (st == ATTND_ERR_INVALID) *param = "template";
    if (st == ATTND_OK && json_object_set_new(out->body, "prompt", json_string(b.p ? b.p : ""))) st = nomem(err);
    buf_free(&b);
    out->chat = out->fim = false;
    return st;
}

/* /api/generate's prompt: a chat of one turn (system + prompt), raw text, or with a suffix the
 * prefix of a fill-in-the-middle prompt (ollama_fim_prompt lays it out). */
static attnd_status generate_prompt(const json_t *body, ollama_request *out, const char **param, attnd_err *err) {
    const json_t *prompt = oai_field(body, "prompt"), *sys = oai_field(body, "system"), *raw = oai_field(body, "raw");
    const json_t *tmpl = oai_field(body, "template"), *suffix = oai_field(body, "suffix");
    if (prompt && !json_is_string(prompt)) return oai_bad(param, "prompt", err, "'prompt' must be a string");
    if (sys && !json_is_string(sys)) return oai_bad(param, "system", err, "'system' must be a string");
    if (raw && !json_is_boolean(raw)) return oai_bad(param, "raw", err, "'raw' must be a boolean");
    if (suffix && !json_is_string(suffix)) return oai_bad(param, "suffix", err, "'suffix' must be a string");
    if (tmpl && !json_is_string(tmpl)) return oai_bad(param, "template", err, "'template' must be a string");
    if (has_images(body)) return oai_bad(param, "images", err, "'images': this server has no vision model (text only)");
    out->load_only = !prompt || !*json_string_value(prompt);
    out->suffix = suffix && *json_string_value(suffix) ? json_string_value(suffix) : NULL;
    out->fim = out->suffix && !json_is_true(raw); /* Ollama's template gets .Prompt and .Suffix, no .System */
    out->chat = !json_is_true(raw) && !out->fim;
    const char *text = prompt ? json_string_value(prompt) : "";
    if (tmpl && *json_string_value(tmpl) && !json_is_true(raw)) return templated(body, tmpl, text, out, param, err);
    if (!out->chat) return json_object_set_new(out->body, "prompt", json_string(text)) ? nomem(err) : ATTND_OK;
    json_t *msgs = json_array();
    if (!msgs || json_object_set_new(out->body, "messages", msgs)) return nomem(err);
    if (sys) json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", sys));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", text));
    return ATTND_OK;
}

/* options → the sampling fields of the body. */
static attnd_status options_of(const json_t *body, const server_settings *cfg, json_t *into, const char **param,
                               attnd_err *err) {
    const json_t *o = oai_field(body, "options"), *v;
    if (!o) return ATTND_OK;
    if (!json_is_object(o)) return oai_bad(param, "options", err, "'options' must be an object");
    static const char *const SAME[] = {"temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty",
                                       "repeat_last_n", "presence_penalty", "frequency_penalty", "seed", "stop"};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(SAME); i++)
        if ((v = oai_field(o, SAME[i]))) json_object_set(into, SAME[i], (json_t *)v);
    if ((v = oai_field(o, "num_predict"))) {
        if (!json_is_integer(v)) return oai_bad(param, "options.num_predict", err, "'options.num_predict' must be an integer");
        json_int_t n = json_integer_value(v); /* -1 (no limit) and -2 (fill the context): the server's limit */
        if (n == 0) n = 1;
        if (n > 0) json_object_set_new(into, "max_tokens", json_integer(n > cfg->max_tokens_cap ? cfg->max_tokens_cap : n));
    }
    return ATTND_OK;
}

/* format, think, tools. */
static attnd_status extras_of(const json_t *body, bool chat_api, json_t *into, const char **param, attnd_err *err) {
    const json_t *fmt = oai_field(body, "format"), *think = oai_field(body, "think"), *tools = oai_field(body, "tools");
    if (str_is(fmt, "json")) json_object_set_new(into, "response_format", json_pack("{s:s}", "type", "json_object"));
    else if (json_is_object(fmt))
        json_object_set_new(into, "response_format", json_pack("{s:s, s:{s:s, s:O, s:b}}", "type", "json_schema", "json_schema",
                                                               "name", "format", "schema", fmt, "strict", 1));
    else if (fmt && !str_is(fmt, "")) return oai_bad(param, "format", err, "'format' must be \"json\" or a JSON schema object");
    if (think) {
        bool on = json_is_true(think) || str_is(think, "low") || str_is(think, "medium") || str_is(think, "high");
        if (!on && !json_is_false(think))
            return oai_bad(param, "think", err, "'think' must be a boolean or \"low\", \"medium\", \"high\"");
        json_object_set_new(into, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", on));
    }
    if (tools && !chat_api) return oai_bad(param, "tools", err, "'tools' belong to /api/chat");
    if (tools) json_object_set(into, "tools", (json_t *)tools);
    return ATTND_OK;
}

bool ollama_model_matches(const char *served, const char *name) {
    size_t n = strlen(served);
    return !strncmp(name, served, n) && (!name[n] || !strcmp(name + n, ":latest"));
}

attnd_status ollama_parse(const json_t *body, bool chat_api, const server_settings *cfg, ollama_request *out,
                          const char **param, attnd_err *err) {
    *out = (ollama_request){.chat = true, .stream = true};
    *param = NULL;
    if (!json_is_object(body)) return oai_bad(param, NULL, err, "the body must be a JSON object");
    const json_t *model = oai_field(body, "model"), *stream = oai_field(body, "stream");
    if (!json_is_string(model) || !*json_string_value(model)) return oai_bad(param, "model", err, "model is required");
    out->model = json_string_value(model);
    if (stream && !json_is_boolean(stream)) return oai_bad(param, "stream", err, "'stream' must be a boolean");
    out->stream = !json_is_false(stream);
    if (!(out->body = json_object())) return nomem(err);
    attnd_status rc;
    if (chat_api) {
        json_t *msgs = json_array();
        if (!msgs || json_object_set_new(out->body, "messages", msgs)) return nomem(err);
        rc = chat_messages(body, msgs, param, err);
    } else {
        rc = generate_prompt(body, out, param, err);
    }
    if (rc == ATTND_OK) rc = options_of(body, cfg, out->body, param, err);
    if (rc == ATTND_OK) rc = extras_of(body, chat_api, out->body, param, err);
    return rc;
}

attnd_status ollama_fim_prompt(ollama_request *r, const tokenizer *tok, int n_ctx, int default_max_tokens,
                               attnd_err *err) {
    if (!r->suffix) return ATTND_OK;
    attnd_status st = infill_check_model(tok, err);
    if (st != ATTND_OK || !r->fim || r->load_only) return st;
    const json_t *mt = json_object_get(r->body, "max_tokens");
    infill_input in = {.prefix = json_string_value(json_object_get(r->body, "prompt")), .suffix = r->suffix, .prompt = ""};
    ATTND_ASSERT(in.prefix); /* generate_prompt wrote it */
    json_t *ids = NULL;
    st = infill_prompt_ids(tok, &in, n_ctx, json_is_integer(mt) ? json_integer_value(mt) : default_max_tokens, &ids, err);
    if (st == ATTND_OK && json_object_set_new(r->body, "prompt", ids)) st = nomem(err);
    if (st == ATTND_OK) r->fim = false; /* laid out */
    return st;
}

void ollama_request_free(ollama_request *r) {
    if (!r) return;
    json_decref(r->body);
    r->body = NULL;
}

// ---- the reply -----------------------------------------------------------------------------

bool ollama_stream_init(ollama_stream *st, bool chat_api, const toolcall_reading *how) {
    *st = (ollama_stream){.chat_api = chat_api};
    buf_init(&st->content);
    buf_init(&st->thinking);
    st->calls = json_array();
    if (!st->calls) return false;
    return !how || (st->tp = toolcall_parser_open(how)) != NULL;
}

void ollama_stream_free(ollama_stream *st) {
    toolcall_parser_destroy(st->tp);
    buf_free(&st->content);
    buf_free(&st->thinking);
    json_decref(st->calls);
    json_decref(st->open_call);
    *st = (ollama_stream){0};
}

/* One answer object: the piece (content, thinking, calls) and, when done, the timings. */
static json_t *line_of(const ollama_stream *st, const ollama_result *res, const buf *content, const buf *thinking,
                       const json_t *calls) {
    json_t *o = json_pack("{s:s, s:s}", "model", res->model ? res->model : "", "created_at", res->created_at ? res->created_at : "");
    if (!o) return NULL;
    if (st->chat_api) {
        json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content", oai_string(content->p ? content->p : "", content->len));
        if (thinking && thinking->len) json_object_set_new(m, "thinking", oai_string(thinking->p, thinking->len));
        if (calls && json_array_size(calls)) json_object_set(m, "tool_calls", (json_t *)calls);
        json_object_set_new(o, "message", m);
    } else {
        json_object_set_new(o, "response", oai_string(content->p ? content->p : "", content->len));
        if (thinking && thinking->len) json_object_set_new(o, "thinking", oai_string(thinking->p, thinking->len));
    }
    json_object_set_new(o, "done", json_boolean(res->done_reason != NULL));
    if (!res->done_reason) return o;
    json_t *t = json_pack("{s:s, s:I, s:I, s:i, s:I, s:i, s:I}", "done_reason", res->done_reason, "total_duration",
                          (json_int_t)res->total_ns, "load_duration", (json_int_t)res->load_ns, "prompt_eval_count",
                          res->prompt_eval_count, "prompt_eval_duration", (json_int_t)res->prompt_ns, "eval_count",
                          res->eval_count, "eval_duration", (json_int_t)res->eval_ns);
    json_object_update(o, t);
    json_decref(t);
    return o;
}

static void emit(buf *out, json_t *o /* stolen */) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s && out) buf_printf(out, "%s\n", s);
    free(s);
}

/* The parser's deltas as one piece: its content, thinking and the calls completed in it. */
static void take_deltas(ollama_stream *st, const json_t *deltas, buf *content, buf *thinking, json_t *calls) {
    size_t i, j;
    const json_t *d, *c;
    json_array_foreach(deltas, i, d) {
        const json_t *s;
        if (json_is_string(s = json_object_get(d, "content"))) buf_append(content, json_string_value(s), json_string_length(s));
        if (json_is_string(s = json_object_get(d, "reasoning_content")))
            buf_append(thinking, json_string_value(s), json_string_length(s));
        json_array_foreach(json_object_get(d, "tool_calls"), j, c) {
            const json_t *f = json_object_get(c, "function"), *id = json_object_get(c, "id");
            if (json_is_string(id)) {
                json_decref(st->open_call);
                st->open_call = json_pack("{s:O, s:{s:I, s:O, s:{}}}", "id", id, "function", "index",
                                          (json_int_t)json_array_size(st->calls), "name", json_object_get(f, "name"), "arguments");
            }
            const char *a = json_string_value(json_object_get(f, "arguments"));
            if (!st->open_call || !a || !*a) continue;
            json_t *args = json_loads(a, 0, NULL);
            if (json_is_object(args)) json_object_set(json_object_get(st->open_call, "function"), "arguments", args);
            json_decref(args);
            json_array_append(calls, st->open_call);
            json_array_append_new(st->calls, st->open_call);
            st->open_call = NULL;
        }
    }
}

/* How many bytes at the end of p[n] start a UTF-8 sequence that is not complete yet (0..3). */
static size_t utf8_incomplete_tail(const char *p, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)p[n - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return want > back ? back : 0;
    }
    return 0;
}

/* Raw text (nothing split): the piece, without a UTF-8 sequence cut at its end (held back for
 * the next piece, so that whole and streamed answers have the same characters). */
static void raw_piece(ollama_stream *st, const char *text, size_t n, buf *content) {
    buf_append(content, st->tail, st->n_tail);
    st->n_tail = 0;
    if (!text) return;
    buf_append(content, text, n);
    size_t keep = content->p ? utf8_incomplete_tail(content->p, content->len) : 0;
    memcpy(st->tail, content->p + content->len - keep, keep);
    st->n_tail = (int)keep;
    content->len -= keep;
    if (content->p) content->p[content->len] = '\0';
}

/* Feeds (or, text NULL, finishes) the parser; the piece's line goes to out unless it is empty. */
static void piece(ollama_stream *st, const ollama_result *res, const char *text, size_t n, buf *out) {
    buf content, thinking;
    buf_init(&content);
    buf_init(&thinking);
    json_t *calls = json_array(), *deltas = json_array();
    if (!st->tp) {
        raw_piece(st, text, n, &content);
    } else if (deltas) {
        if (text) toolcall_parser_feed(st->tp, text, n, deltas);
        else toolcall_parser_finish(st->tp, deltas);
        take_deltas(st, deltas, &content, &thinking, calls);
    }
    if (content.len) buf_append(&st->content, content.p, content.len);
    if (thinking.len) buf_append(&st->thinking, thinking.p, thinking.len);
    if (content.len || thinking.len || json_array_size(calls))
        emit(out, line_of(st, res, &content, &thinking, calls));
    buf_free(&content);
    buf_free(&thinking);
    json_decref(calls);
    json_decref(deltas);
}

void ollama_stream_delta(ollama_stream *st, const ollama_result *res, const char *text, size_t n, buf *out) {
    piece(st, res, text, n, out);
}

void ollama_stream_end(ollama_stream *st, const ollama_result *res, buf *out) {
    ollama_result running = *res;
    running.done_reason = NULL;
    piece(st, &running, NULL, 0, out);
    buf none = {0};
    emit(out, line_of(st, res, &none, NULL, NULL));
}

void ollama_stream_idle(const ollama_stream *st, const ollama_result *res, buf *out) {
    ollama_result running = *res;
    running.done_reason = NULL;
    buf none = {0};
    emit(out, line_of(st, &running, &none, NULL, NULL));
}

json_t *ollama_answer(const ollama_result *res, const char *text, size_t n, bool chat_api,
                      const toolcall_reading *how) {
    ollama_stream st;
    json_t *o = NULL;
    if (ollama_stream_init(&st, chat_api, how)) {
        ollama_result running = *res;
        running.done_reason = NULL;
        piece(&st, &running, text, n, NULL);
        piece(&st, &running, NULL, 0, NULL);
        o = line_of(&st, res, &st.content, &st.thinking, st.calls);
    }
    ollama_stream_free(&st);
    return o;
}
