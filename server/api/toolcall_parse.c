/*
 * toolcall_parse.c — splitting a chat model's output into content, reasoning and tool calls
 * (the parser of toolcall.h).
 *
 * A small state machine over the text not yet decided (pend): in plain text it looks for the
 * earliest marker and holds back only a tail that could still grow into one; inside a marker it
 * waits for the block's end (a closing tag, or the end of a balanced JSON value) and then
 * decides. Nothing depends on where chunks were cut: a chunk boundary only ever delays text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/common.h"
#include "oai.h"
#include "toolcall.h"

enum mode {
    M_TEXT, M_THINK, M_HERMES, M_PYTAG, M_PYTAG_SEP, M_MISTRAL, M_GRANITE, M_BARE, M_HARMONY_HEAD, M_HARMONY_BODY,
    M_ARGS,       /* inside a call's arguments: streamed as they come */
    M_CALL_TAIL,  /* after them, to the end of the call object */
    M_HERMES_END, /* after the call object, to </tool_call> */
    M_XML_FUNC,   /* Qwen3-Coder: <tool_call> <function= read, the name to '>' */
    M_XML_BODY,   /* between its parameters: <parameter= or </function> */
    M_XML_PNAME,  /* <parameter= read, the name to '>' */
    M_XML_VALUE,  /* a parameter's value, to </parameter> */
};
enum hkind { H_CONTENT, H_REASONING, H_CALL };

struct toolcall_parser {
    bool calls;
    enum mode mode;
    enum hkind hkind;      /* M_HARMONY_BODY: what the channel carries */
    char hname[128];       /* H_CALL: the function */
    bool started;          /* some content or a call came out (bare JSON only at the start) */
    bool after_reasoning;  /* leading blank lines after reasoning are dropped */
    buf pend;              /* text not decided yet */
    buf content, reasoning;
    json_t *tool_calls;    /* OpenAI's array */
    enum mode after;       /* M_ARGS / M_CALL_TAIL: the mode after the call object */
    int depth;             /* M_ARGS / M_CALL_TAIL: JSON nesting, strings tracked by in_str, esc */
    bool in_str, esc;
    buf args;              /* M_ARGS: the current call's arguments so far */
    size_t args_sent;      /* how many bytes of args went out as fragments */
    char id_base[48];      /* call ids are id_base + "_" + index; "" = random */
    const json_t *tools;   /* borrowed: types the XML calls' values; NULL = none */
    char pname[128];       /* M_XML_VALUE: the parameter */
    int n_params;          /* XML: parameters of the current call so far */
};

static const char XML_FUNC[] = "<function=", XML_FUNC_END[] = "</function>", XML_PARAM[] = "<parameter=",
                  XML_PARAM_END[] = "</parameter>";
static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>", HERMES_OPEN[] = "<tool_call>",
                  HERMES_CLOSE[] = "</tool_call>", PYTAG[] = "<|python_tag|>", MISTRAL[] = "[TOOL_CALLS]", GRANITE[] = "<|tool_call|>",
                  CHANNEL[] = "<|channel|>", MESSAGE[] = "<|message|>", START[] = "<|start|>assistant";
static const char *const HARMONY_ENDS[] = {"<|end|>", "<|call|>", "<|return|>"};

toolcall_parser *toolcall_parser_create(bool calls) {
    toolcall_parser *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->calls = calls;
    if (!(p->tool_calls = json_array())) {
        free(p);
        return NULL;
    }
    return p;
}

void toolcall_parser_set_id_base(toolcall_parser *p, const char *base) {
    snprintf(p->id_base, sizeof(p->id_base), "%s", base ? base : "");
}

void toolcall_parser_set_tools(toolcall_parser *p, const json_t *tools) { p->tools = tools; }

void toolcall_parser_start_in_reasoning(toolcall_parser *p) {
    if (p->mode == M_TEXT && p->pend.len == 0 && !p->started && !p->reasoning.len) {
        p->mode = M_THINK;
        p->after_reasoning = true;
    }
}

void toolcall_parser_destroy(toolcall_parser *p) {
    if (!p) return;
    buf_free(&p->pend);
    buf_free(&p->content);
    buf_free(&p->reasoning);
    buf_free(&p->args);
    json_decref(p->tool_calls);
    free(p);
}

// ---- releasing --------------------------------------------------------------------------

/* A delta {key: text} (invalid UTF-8 made U+FFFD), whose text is also appended to whole: the
 * whole answer is the concatenation of what was streamed, byte for byte. */
static void delta_text(json_t *deltas, buf *whole, const char *key, const char *s, size_t n) {
    if (!n) return;
    json_t *d = json_object(), *str = oai_string(s, n);
    buf_append(whole, json_string_value(str), json_string_length(str));
    json_object_set_new(d, key, str);
    json_array_append_new(deltas, d);
}

static void emit_content(toolcall_parser *p, const char *s, size_t n, json_t *deltas) {
    if (!p->started && (p->after_reasoning || p->calls)) /* blank lines before a call or answer go */
        while (n && (*s == '\n' || *s == ' ' || *s == '\r' || *s == '\t')) s++, n--;
    if (!n) return;
    p->started = true;
    delta_text(deltas, &p->content, "content", s, n);
}

static void emit_reasoning(toolcall_parser *p, const char *s, size_t n, json_t *deltas) {
    delta_text(deltas, &p->reasoning, "reasoning_content", s, n);
}

/* Removes the first n bytes of pend. */
static void consume(toolcall_parser *p, size_t n) {
    memmove(p->pend.p, p->pend.p + n, p->pend.len - n);
    p->pend.len -= n;
    if (p->pend.p) p->pend.p[p->pend.len] = '\0';
}

/* Opens a call: its entry (arguments "" until set) and its first stream delta. Returns its index. */
static int open_call(toolcall_parser *p, const char *name, json_t *deltas) {
    char id[64];
    int index = (int)json_array_size(p->tool_calls);
    if (p->id_base[0]) snprintf(id, sizeof(id), "call_%s_%d", p->id_base, index);
    else attnd_random_id(id, sizeof(id), "call_");
    /* the name as valid UTF-8 (invalid bytes U+FFFD), or json_pack would fail and the call's
     * fragments land on the one before */
    size_t n = strlen(name);
    json_array_append_new(p->tool_calls, json_pack("{s:s,s:s,s:{s:o,s:s}}", "id", id, "type", "function", "function",
                                                   "name", oai_string(name, n), "arguments", ""));
    json_array_append_new(deltas, json_pack("{s:[{s:i,s:s,s:s,s:{s:o,s:s}}]}", "tool_calls", "index", index, "id", id,
                                            "type", "function", "function", "name", oai_string(name, n),
                                            "arguments", ""));
    p->started = true;
    return index;
}

/* A fragment of the last call's arguments, as a stream delta. */
static void args_delta(toolcall_parser *p, const char *s, size_t n, json_t *deltas) {
    if (!n) return;
    int index = (int)json_array_size(p->tool_calls) - 1;
    json_t *frag = oai_string(s, n);
    json_array_append_new(deltas, json_pack("{s:[{s:i,s:{s:o}}]}", "tool_calls", "index", index, "function",
                                            "arguments", frag));
}

/* Sets the last call's arguments (what its fragments concatenate to). */
static void close_args(toolcall_parser *p, const char *s, size_t n) {
    json_t *fn = json_object_get(json_array_get(p->tool_calls, json_array_size(p->tool_calls) - 1), "function");
    json_object_set_new(fn, "arguments", oai_string(s ? s : "", n));
}

/* Adds one whole call (arguments as JSON text) and its two stream deltas. */
static void add_call(toolcall_parser *p, const char *name, const char *args, json_t *deltas) {
    open_call(p, name, deltas);
    args_delta(p, args, strlen(args), deltas);
    close_args(p, args, strlen(args));
}

/* A parsed call object {"name", "arguments" | "parameters"}: added; false when it is not one. */
static bool take_call(toolcall_parser *p, const json_t *o, json_t *deltas) {
    const json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (!json_is_object(o) || !json_is_string(name) || json_string_length(name) == 0) return false;
    if (args && !json_is_object(args) && !json_is_string(args)) return false;
    char *text = !args ? strdup("{}") : json_is_string(args) ? strdup(json_string_value(args))
                                                             : json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) return false;
    add_call(p, json_string_value(name), text, deltas);
    free(text);
    return true;
}

/* Calls from JSON text: an object, or an array of objects (all of them must be calls). */
static bool take_calls_json(toolcall_parser *p, const char *s, size_t n, json_t *deltas) {
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    bool ok = json_is_object(v) || (json_is_array(v) && json_array_size(v) > 0);
    for (size_t i = 0; ok && json_is_array(v) && i < json_array_size(v); i++) {
        const json_t *c = json_array_get(v, i);
        ok = json_is_object(c) && json_is_string(json_object_get(c, "name"));
    }
    if (ok && json_is_object(v)) ok = take_call(p, v, deltas);
    for (size_t i = 0; ok && json_is_array(v) && i < json_array_size(v); i++) ok = take_call(p, json_array_get(v, i), deltas);
    json_decref(v);
    return ok;
}

// ---- scanning ---------------------------------------------------------------------------

/* The length of the balanced JSON object or array at s[0] ('{' or '['), 0 while unfinished. */
static size_t json_span(const char *s, size_t n) {
    int depth = 0;
    bool str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') str = false;
        } else if (c == '"') str = true;
        else if (c == '{' || c == '[') depth++;
        else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
    }
    return 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
    return i;
}

/* The bytes of an unfinished UTF-8 character at the end of s[n] (0 when it ends whole), held
 * back so that no release splits a character. */
static size_t utf8_tail(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char b = (unsigned char)s[n - k];
        if ((b & 0xC0) == 0x80) continue;
        size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        return need > k && b >= 0xC0 ? k : 0;
    }
    return 0;
}

/* The longest tail of s[n] that is a proper prefix of m. */
static size_t partial_tail(const char *s, size_t n, const char *m) {
    size_t lm = strlen(m), best = 0;
    for (size_t k = 1; k < lm && k <= n; k++)
        if (!memcmp(s + n - k, m, k)) best = k;
    return best;
}

/* Finds the earliest of the markers in s[n]: its index into *which and its offset, or n. */
static size_t find_first(const char *s, size_t n, const char *const *m, size_t n_m, size_t *which) {
    size_t best = n;
    for (size_t i = 0; i < n_m; i++) {
        size_t lm = strlen(m[i]);
        for (size_t at = 0; at + lm <= n && at < best; at++)
            if (!memcmp(s + at, m[i], lm)) {
                best = at, *which = i;
                break;
            }
    }
    return best;
}

// ---- a call's head, so that its arguments can stream ----------------------------------------

enum head { HEAD_NO, HEAD_MORE, HEAD_OK };

/* lit at s[*i] after blanks: HEAD_OK (and *i past it), HEAD_MORE when s ends inside it. */
static enum head head_lit(const char *s, size_t n, size_t *i, const char *lit) {
    *i = skip_ws(s, n, *i);
    size_t l = strlen(lit), k = 0;
    for (; k < l && *i + k < n; k++)
        if (s[*i + k] != lit[k]) return HEAD_NO;
    if (k < l) return HEAD_MORE;
    *i += l;
    return HEAD_OK;
}

/* A JSON string at s[*i] after blanks into name[cap] (non-empty). */
static enum head head_string(const char *s, size_t n, size_t *i, char *name, size_t cap) {
    *i = skip_ws(s, n, *i);
    if (*i == n) return HEAD_MORE;
    if (s[*i] != '"') return HEAD_NO;
    size_t j = *i + 1;
    for (bool esc = false; j < n && (esc || s[j] != '"'); j++) esc = !esc && s[j] == '\\';
    if (j == n) return HEAD_MORE;
    json_t *str = json_loadb(s + *i, j + 1 - *i, JSON_DECODE_ANY, NULL);
    bool ok = json_is_string(str) && json_string_length(str) > 0 && json_string_length(str) < cap &&
              !memchr(json_string_value(str), 0, json_string_length(str));
    if (ok) memcpy(name, json_string_value(str), json_string_length(str) + 1);
    json_decref(str);
    *i = j + 1;
    return ok ? HEAD_OK : HEAD_NO;
}

/* {"name": "F", "arguments" | "parameters": { at s[0]: the name, and where the arguments
 * object starts. HEAD_NO: not this shape (the call is then taken whole, or is no call). */
static enum head call_head(const char *s, size_t n, char *name, size_t cap, size_t *args_at) {
    size_t i = 0, save;
    enum head h;
    if ((h = head_lit(s, n, &i, "{")) != HEAD_OK || (h = head_lit(s, n, &i, "\"name\"")) != HEAD_OK ||
        (h = head_lit(s, n, &i, ":")) != HEAD_OK || (h = head_string(s, n, &i, name, cap)) != HEAD_OK ||
        (h = head_lit(s, n, &i, ",")) != HEAD_OK)
        return h;
    save = i;
    if ((h = head_lit(s, n, &i, "\"arguments\"")) == HEAD_NO) i = save, h = head_lit(s, n, &i, "\"parameters\"");
    if (h != HEAD_OK || (h = head_lit(s, n, &i, ":")) != HEAD_OK) return h;
    i = skip_ws(s, n, i);
    if (i == n) return HEAD_MORE;
    if (s[i] != '{') return HEAD_NO;
    *args_at = i;
    return HEAD_OK;
}

/* Where a call object may start (pend at a '{'): its head opens the call and the arguments
 * stream (true); false with *wait when more text is needed to tell, else not this shape. */
static bool open_streaming(toolcall_parser *p, size_t at, enum mode after, json_t *deltas, bool final, bool *wait) {
    char name[128];
    size_t args_at = 0;
    enum head h = call_head(p->pend.p + at, p->pend.len - at, name, sizeof(name), &args_at);
    *wait = h == HEAD_MORE && !final;
    if (h != HEAD_OK) return false;
    open_call(p, name, deltas);
    consume(p, at + args_at);
    buf_clear(&p->args);
    p->args_sent = 0;
    p->mode = M_ARGS, p->after = after;
    p->depth = 0, p->in_str = p->esc = false;
    return true;
}

/* One byte of JSON through the scanner; returns whether it is kept (blanks outside strings are
 * not: the arguments come out compact, whatever the model's spacing). */
static bool scan_byte(toolcall_parser *p, char c) {
    if (p->in_str) {
        if (p->esc) p->esc = false;
        else if (c == '\\') p->esc = true;
        else if (c == '"') p->in_str = false;
        return true;
    }
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') return false;
    if (c == '"') p->in_str = true;
    else if (c == '{' || c == '[') p->depth++;
    else if (c == '}' || c == ']') p->depth--;
    return true;
}

/* Hermes: whether </tool_call> (outside a string) cuts the arguments at s[i]: 1 yes, 0 no, -1
 * s ends inside what could be it. */
static int hermes_cut(const toolcall_parser *p, const char *s, size_t n, size_t i) {
    if (p->after != M_HERMES_END || p->in_str || s[i] != '<') return 0;
    size_t l = strlen(HERMES_CLOSE), k = 0;
    while (k < l && i + k < n && s[i + k] == HERMES_CLOSE[k]) k++;
    return k == l ? 1 : i + k == n ? -1 : 0;
}

/* Sends args[args_sent, upto) as the last call's next fragment. */
static void args_release(toolcall_parser *p, size_t upto, json_t *deltas) {
    if (upto <= p->args_sent) return;
    args_delta(p, p->args.p + p->args_sent, upto - p->args_sent, deltas);
    p->args_sent = upto;
}

/* The arguments as they come: every byte up to the end of the object (but an unfinished UTF-8
 * character) is released as a fragment. A Hermes close tag before that end cuts them: the call
 * keeps what the model wrote. */
static bool step_args(toolcall_parser *p, json_t *deltas, bool final) {
    const char *s = p->pend.p;
    size_t n = p->pend.len, limit = final ? n : n - utf8_tail(s, n), i = 0;
    bool done = false, cut = false;
    for (; i < limit && !done && !cut; i++) {
        int c = hermes_cut(p, s, n, i);
        if (c < 0 && !final) break;
        if ((cut = c > 0)) break;
        if (scan_byte(p, s[i])) buf_append(&p->args, &s[i], 1);
        done = p->depth == 0;
    }
    /* a fragment never ends inside a character, also when the loop stopped early (a possible
     * close tag): the tail waits for the next release */
    args_release(p, done || cut || final ? p->args.len : p->args.len - utf8_tail(p->args.p, p->args.len), deltas);
    consume(p, i);
    if (done || cut) close_args(p, p->args.p, p->args.len);
    if (done) p->mode = M_CALL_TAIL, p->depth = 1; /* still inside the call object */
    if (cut) p->mode = M_HERMES_END;
    return done || cut;
}

/* After the arguments: the rest of the call object (other members are dropped). */
static bool step_call_tail(toolcall_parser *p, bool final) {
    size_t i = 0;
    bool done = false;
    while (i < p->pend.len && !done) {
        scan_byte(p, p->pend.p[i++]);
        done = p->depth == 0;
    }
    consume(p, i);
    if (done || final) p->mode = p->after;
    return done;
}

/* After a streamed Hermes call: up to and with </tool_call>. */
static bool step_hermes_end(toolcall_parser *p, bool final) {
    const char *m[] = {HERMES_CLOSE};
    size_t which, at = find_first(p->pend.p, p->pend.len, m, 1, &which);
    if (at == p->pend.len && !final) {
        size_t hold = partial_tail(p->pend.p, p->pend.len, HERMES_CLOSE);
        size_t j = skip_ws(p->pend.p, p->pend.len - hold, 0);
        consume(p, j); /* blanks go; anything else waits for the close */
        return false;
    }
    consume(p, at < p->pend.len ? at + strlen(HERMES_CLOSE) : at);
    p->mode = M_TEXT;
    return true;
}

// ---- the modes ----------------------------------------------------------------------------

/* Plain text: the earliest marker switches mode; a possible marker's prefix waits. */
static bool step_text(toolcall_parser *p, json_t *deltas, bool final) {
    const char *s = p->pend.p;
    size_t n = p->pend.len;
    if (p->calls && !p->started) { /* a bare JSON call may only be the whole answer's start */
        size_t i = skip_ws(s, n, 0), lm = strlen(MISTRAL);
        if (i == n && !final) return false;
        bool mistral = n - i >= lm ? !memcmp(s + i, MISTRAL, lm) : !memcmp(s + i, MISTRAL, n - i);
        if (mistral && n - i < lm && !final) return false; /* "[TOOL_C" could be either */
        if (i < n && (s[i] == '{' || (s[i] == '[' && !mistral))) {
            p->mode = M_BARE;
            return true;
        }
    }
    const char *markers[] = {THINK_OPEN, CHANNEL, START, HERMES_OPEN, PYTAG, MISTRAL, GRANITE};
    size_t n_m = p->calls ? 7 : 3, which = 0;
    size_t at = find_first(s, n, markers, n_m, &which);
    if (at < n) {
        emit_content(p, s, at, deltas);
        consume(p, at + strlen(markers[which]));
        static const enum mode next[] = {M_THINK, M_HARMONY_HEAD, M_TEXT, M_HERMES, M_PYTAG, M_MISTRAL, M_GRANITE};
        p->mode = next[which];
        if (which == 0) p->after_reasoning = true;
        return true;
    }
    size_t hold = final ? 0 : utf8_tail(s, n);
    for (size_t i = 0; !final && i < n_m; i++) {
        size_t t = partial_tail(s, n, markers[i]);
        if (t > hold) hold = t;
    }
    emit_content(p, s, n - hold, deltas);
    consume(p, n - hold);
    return false;
}

/* Text up to the close marker goes to emit (reasoning or content); then mode back to text. */
static bool step_until(toolcall_parser *p, const char *close, bool reasoning, json_t *deltas, bool final) {
    const char *s = p->pend.p;
    size_t n = p->pend.len, which = 0;
    const char *m[] = {close};
    size_t at = find_first(s, n, m, 1, &which);
    size_t tail = final ? 0 : partial_tail(s, n, close), u = final ? 0 : utf8_tail(s, n);
    size_t take = at < n ? at : n - (tail > u ? tail : u);
    if (reasoning) emit_reasoning(p, s, take, deltas);
    else emit_content(p, s, take, deltas);
    consume(p, at < n ? at + strlen(close) : take);
    if (at < n) p->mode = M_TEXT;
    return at < n;
}

/* <tool_call> JSON </tool_call>: a call, or (not one) content as written. */
static bool step_hermes(toolcall_parser *p, json_t *deltas, bool final) {
    size_t i = skip_ws(p->pend.p, p->pend.len, 0);
    bool wait = false;
    if (i == p->pend.len && !final) return false;
    if (i < p->pend.len && p->pend.p[i] == '{' && open_streaming(p, i, M_HERMES_END, deltas, final, &wait)) return true;
    if (wait) return false;
    size_t left = p->pend.len - i, lf = strlen(XML_FUNC);
    if (!memcmp(p->pend.p + i, XML_FUNC, left < lf ? left : lf)) {
        if (left < lf && !final) return false; /* "<func" could be either */
        if (left >= lf) {
            consume(p, i + lf);
            p->mode = M_XML_FUNC;
            return true;
        }
    }
    const char *m[] = {HERMES_CLOSE};
    size_t which, at = find_first(p->pend.p, p->pend.len, m, 1, &which);
    if (at == p->pend.len && !final) return false;
    if (!take_calls_json(p, p->pend.p, at, deltas)) {
        emit_content(p, HERMES_OPEN, strlen(HERMES_OPEN), deltas);
        emit_content(p, p->pend.p, at, deltas);
        if (at < p->pend.len) emit_content(p, HERMES_CLOSE, strlen(HERMES_CLOSE), deltas);
    }
    consume(p, at < p->pend.len ? at + strlen(HERMES_CLOSE) : at);
    p->mode = M_TEXT;
    return true;
}

/* A balanced JSON value after a marker (<|python_tag|>, [TOOL_CALLS], or none: bare JSON):
 * calls, then for python_tag more calls after ';'. Not calls: the text as written. */
static bool step_json(toolcall_parser *p, const char *marker, json_t *deltas, bool final) {
    const char *s = p->pend.p;
    size_t n = p->pend.len, i = skip_ws(s, n, 0);
    if (i == n && !final) return false;
    if (i == n) { /* only blanks after the marker (or after "; "): nothing more */
        consume(p, n);
        p->mode = M_TEXT;
        return true;
    }
    bool wait = false;
    if (s[i] == '{' && open_streaming(p, i, p->mode == M_PYTAG ? M_PYTAG_SEP : M_TEXT, deltas, final, &wait))
        return true;
    if (wait) return false;
    size_t span = i < n && (s[i] == '{' || s[i] == '[') ? json_span(s + i, n - i) : 0;
    if (!span && !final && i < n && (s[i] == '{' || s[i] == '[')) return false;
    bool ok = span && take_calls_json(p, s + i, span, deltas);
    if (!ok) { /* not a call after all: the marker and the text as written */
        p->mode = M_TEXT;
        p->started = true;
        size_t take = span ? i + span : 0; /* not JSON at all: the text goes on as text */
        emit_content(p, marker, strlen(marker), deltas);
        emit_content(p, s, take, deltas);
        consume(p, take);
        return true;
    }
    consume(p, i + span);
    p->mode = p->mode == M_PYTAG ? M_PYTAG_SEP : M_TEXT;
    return true;
}

/* After a python_tag call: ';' and another call, or back to text. */
static bool step_pytag_sep(toolcall_parser *p, bool final) {
    size_t j = skip_ws(p->pend.p, p->pend.len, 0);
    if (j == p->pend.len && !final) return false;
    if (j < p->pend.len && p->pend.p[j] == ';') {
        consume(p, j + 1);
        p->mode = M_PYTAG;
    } else {
        p->mode = M_TEXT;
    }
    return true;
}

/* harmony: <|channel|>NAME [to=functions.F] [<|constrain|>json]<|message|> */
static bool step_harmony_head(toolcall_parser *p, json_t *deltas, bool final) {
    const char *m[] = {MESSAGE};
    size_t which, at = find_first(p->pend.p, p->pend.len, m, 1, &which);
    if (at == p->pend.len) {
        if (final) {
            emit_content(p, p->pend.p, p->pend.len, deltas);
            consume(p, p->pend.len);
            p->mode = M_TEXT;
        }
        return final;
    }
    char head[256];
    snprintf(head, sizeof(head), "%.*s", (int)(at < 255 ? at : 255), p->pend.p);
    const char *to = strstr(head, "to=functions.");
    p->hkind = !strncmp(head, "analysis", 8) ? H_REASONING : (p->calls && to) ? H_CALL : H_CONTENT;
    if (p->hkind == H_CALL) {
        const char *nm = to + strlen("to=functions.");
        size_t k = 0;
        while (nm[k] && nm[k] != ' ' && nm[k] != '<' && k + 1 < sizeof(p->hname)) k++;
        snprintf(p->hname, sizeof(p->hname), "%.*s", (int)k, nm);
    }
    consume(p, at + strlen(MESSAGE));
    p->mode = M_HARMONY_BODY;
    return true;
}

static bool step_harmony_body(toolcall_parser *p, json_t *deltas, bool final) {
    size_t which = 0, n = p->pend.len;
    size_t at = find_first(p->pend.p, n, HARMONY_ENDS, ATTND_ARRAY_LEN(HARMONY_ENDS), &which);
    if (p->hkind == H_CALL) {
        if (at == n && !final) return false;
        json_t *args = json_loadb(p->pend.p, at, 0, NULL);
        char *text = json_is_object(args) ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        if (text) add_call(p, p->hname, text, deltas);
        else emit_content(p, p->pend.p, at, deltas);
        free(text);
        json_decref(args);
    } else {
        size_t hold = at == n && !final ? utf8_tail(p->pend.p, n) : 0;
        for (size_t i = 0; at == n && !final && i < ATTND_ARRAY_LEN(HARMONY_ENDS); i++) {
            size_t t = partial_tail(p->pend.p, n, HARMONY_ENDS[i]);
            if (t > hold) hold = t;
        }
        size_t take = at < n ? at : n - hold;
        if (p->hkind == H_REASONING) emit_reasoning(p, p->pend.p, take, deltas);
        else emit_content(p, p->pend.p, take, deltas);
        if (at == n) {
            consume(p, take);
            return false;
        }
    }
    consume(p, at < n ? at + strlen(HARMONY_ENDS[which]) : at);
    p->mode = M_TEXT;
    return true;
}

// ---- Qwen3-Coder's XML calls ---------------------------------------------------------------

/* A tag's name up to '>' at the start of pend into name[cap]: 1 read (pend past the '>'), 0 not
 * a name, -1 more text is needed. */
static int xml_name(toolcall_parser *p, char *name, size_t cap, bool final) {
    const char *s = p->pend.p;
    for (size_t i = 0; i < p->pend.len; i++) {
        char c = s[i];
        if (c == '>') {
            if (i == 0) return 0;
            memcpy(name, s, i);
            name[i] = '\0';
            consume(p, i + 1);
            return 1;
        }
        if (c == '<' || c == '\n' || c == '\0' || i + 1 >= cap) return 0;
    }
    return final ? 0 : -1;
}

/* Whether function fn's parameter pn takes its text as it is (schema type "string", or none). */
static bool xml_param_is_text(const toolcall_parser *p, const char *fn, const char *pn) {
    for (size_t i = 0; i < json_array_size(p->tools); i++) {
        const json_t *t = json_array_get(p->tools, i), *f = json_object_get(t, "function");
        if (!f) f = t;
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || strcmp(name, fn)) continue;
        const json_t *ty = json_object_get(json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), pn), "type");
        if (json_is_string(ty)) return !strcmp(json_string_value(ty), "string");
        for (size_t k = 0; k < json_array_size(ty); k++) /* a list of types: text when it allows a string */
            if (json_is_string(json_array_get(ty, k)) && !strcmp(json_string_value(json_array_get(ty, k)), "string"))
                return true;
        return !ty;
    }
    return true;
}

/* Appends s to the call's arguments and sends it as a fragment. */
static void xml_args(toolcall_parser *p, const char *s, size_t n, json_t *deltas) {
    buf_append(&p->args, s, n);
    args_release(p, p->args.len, deltas);
}

/* One parameter "name": value of the current call, from its text v[n]. */
static void xml_add_param(toolcall_parser *p, const char *v, size_t n, json_t *deltas) {
    if (n && v[0] == '\n') v++, n--;
    if (n && v[n - 1] == '\n') n--;
    const json_t *call = json_array_get(p->tool_calls, json_array_size(p->tool_calls) - 1);
    const char *fn = json_string_value(json_object_get(json_object_get(call, "function"), "name"));
    json_t *val = xml_param_is_text(p, fn ? fn : "", p->pname) ? NULL : json_loadb(v, n, JSON_DECODE_ANY, NULL);
    if (!val) val = oai_string(v, n);
    json_t *key = oai_string(p->pname, strlen(p->pname));
    char *kt = json_dumps(key, JSON_ENCODE_ANY), *vt = json_dumps(val, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (kt && vt) {
        if (p->n_params++) xml_args(p, ",", 1, deltas);
        xml_args(p, kt, strlen(kt), deltas);
        xml_args(p, ":", 1, deltas);
        xml_args(p, vt, strlen(vt), deltas);
    }
    free(kt), free(vt);
    json_decref(key), json_decref(val);
}

/* The end of the current call's arguments: "}", and on to </tool_call>. */
static void xml_close(toolcall_parser *p, json_t *deltas) {
    xml_args(p, "}", 1, deltas);
    close_args(p, p->args.p, p->args.len);
    p->mode = M_HERMES_END;
}

/* <function=NAME>: opens the call ("{" goes out); not a name: the markers are content. */
static bool step_xml_func(toolcall_parser *p, json_t *deltas, bool final) {
    char name[128];
    int r = xml_name(p, name, sizeof(name), final);
    if (r < 0) return false;
    if (r == 0) {
        emit_content(p, HERMES_OPEN, strlen(HERMES_OPEN), deltas);
        emit_content(p, XML_FUNC, strlen(XML_FUNC), deltas);
        p->mode = M_TEXT;
        return true;
    }
    open_call(p, name, deltas);
    buf_clear(&p->args);
    p->args_sent = 0, p->n_params = 0;
    xml_args(p, "{", 1, deltas);
    p->mode = M_XML_BODY;
    return true;
}

/* Between parameters: the next <parameter=, or </function>; anything else ends the call. */
static bool step_xml_body(toolcall_parser *p, json_t *deltas, bool final) {
    size_t i = skip_ws(p->pend.p, p->pend.len, 0), left = p->pend.len - i;
    consume(p, i);
    if (left == 0) return false;
    const char *m[] = {XML_PARAM, XML_FUNC_END};
    for (int k = 0; k < 2; k++) {
        size_t lm = strlen(m[k]);
        if (memcmp(p->pend.p, m[k], left < lm ? left : lm)) continue;
        if (left < lm && !final) return false;
        if (left < lm) break;
        consume(p, lm);
        if (k == 0) p->mode = M_XML_PNAME;
        else xml_close(p, deltas);
        return true;
    }
    xml_close(p, deltas); /* not the format: the call keeps what came, the rest of the block goes */
    return true;
}

static bool step_xml_pname(toolcall_parser *p, json_t *deltas, bool final) {
    int r = xml_name(p, p->pname, sizeof(p->pname), final);
    if (r < 0) return false;
    if (r == 0) xml_close(p, deltas);
    else p->mode = M_XML_VALUE;
    return true;
}

/* A value, whole once its </parameter> is read (or the reply ends). */
static bool step_xml_value(toolcall_parser *p, json_t *deltas, bool final) {
    const char *m[] = {XML_PARAM_END};
    size_t which, at = find_first(p->pend.p, p->pend.len, m, 1, &which);
    if (at == p->pend.len && !final) return false;
    xml_add_param(p, p->pend.p, at, deltas);
    consume(p, at < p->pend.len ? at + strlen(XML_PARAM_END) : at);
    p->mode = M_XML_BODY;
    return true;
}

static bool step(toolcall_parser *p, json_t *deltas, bool final) {
    if (p->pend.len == 0) return false;
    switch (p->mode) {
    case M_TEXT: return step_text(p, deltas, final);
    case M_THINK: return step_until(p, THINK_CLOSE, true, deltas, final);
    case M_HERMES: return step_hermes(p, deltas, final);
    case M_PYTAG: return step_json(p, PYTAG, deltas, final);
    case M_PYTAG_SEP: return step_pytag_sep(p, final);
    case M_MISTRAL: return step_json(p, MISTRAL, deltas, final);
    case M_GRANITE: return step_json(p, GRANITE, deltas, final);
    case M_BARE: return step_json(p, "", deltas, final);
    case M_HARMONY_HEAD: return step_harmony_head(p, deltas, final);
    case M_HARMONY_BODY: return step_harmony_body(p, deltas, final);
    case M_ARGS: return step_args(p, deltas, final);
    case M_CALL_TAIL: return step_call_tail(p, final);
    case M_HERMES_END: return step_hermes_end(p, final);
    case M_XML_FUNC: return step_xml_func(p, deltas, final);
    case M_XML_BODY: return step_xml_body(p, deltas, final);
    case M_XML_PNAME: return step_xml_pname(p, deltas, final);
    case M_XML_VALUE: return step_xml_value(p, deltas, final);
    }
    return false;
}

void toolcall_parser_feed(toolcall_parser *p, const char *text, size_t n, json_t *deltas) {
    if (n && !buf_append(&p->pend, text, n)) return;
    while (step(p, deltas, false)) {}
}

void toolcall_parser_finish(toolcall_parser *p, json_t *deltas) {
    while (step(p, deltas, true)) {}
    if (p->mode == M_ARGS) { /* cut short: the call keeps what came, held-back tail included */
        args_release(p, p->args.len, deltas);
        close_args(p, p->args.p, p->args.len);
    }
    if (p->mode == M_XML_BODY || p->mode == M_XML_PNAME || p->mode == M_XML_VALUE) xml_close(p, deltas);
    if (p->mode == M_XML_FUNC) { /* the reply ended right after <function= */
        emit_content(p, HERMES_OPEN, strlen(HERMES_OPEN), deltas);
        emit_content(p, XML_FUNC, strlen(XML_FUNC), deltas);
    }
    p->mode = M_TEXT;
    if (p->pend.len) { /* whatever a mode could not place */
        emit_content(p, p->pend.p, p->pend.len, deltas);
        consume(p, p->pend.len);
    }
}

json_t *toolcall_parser_content(const toolcall_parser *p) {
    if (p->content.len == 0 && json_array_size(p->tool_calls)) return json_null();
    return oai_string(p->content.p ? p->content.p : "", p->content.len);
}

json_t *toolcall_parser_reasoning(const toolcall_parser *p) {
    return p->reasoning.len ? oai_string(p->reasoning.p, p->reasoning.len) : NULL;
}

json_t *toolcall_parser_calls(const toolcall_parser *p) {
    return json_array_size(p->tool_calls) ? json_incref(p->tool_calls) : NULL;
}

int toolcall_parser_n_calls(const toolcall_parser *p) { return (int)json_array_size(p->tool_calls); }

// ---- a chat choice ------------------------------------------------------------------------

bool toolcall_apply(json_t *choice, const char *text, size_t n, bool calls, bool in_reasoning, const char *id_base,
                    const json_t *tools) {
    toolcall_parser *p = toolcall_parser_create(calls);
    if (p) toolcall_parser_set_id_base(p, id_base), toolcall_parser_set_tools(p, tools);
    if (p && in_reasoning) toolcall_parser_start_in_reasoning(p);
    json_t *deltas = json_array(), *msg = json_object_get(choice, "message");
    if (!p || !deltas || !msg) {
        toolcall_parser_destroy(p);
        json_decref(deltas);
        return false;
    }
    toolcall_parser_feed(p, text, n, deltas);
    toolcall_parser_finish(p, deltas);
    json_object_set_new(msg, "content", toolcall_parser_content(p));
    json_t *r = toolcall_parser_reasoning(p), *tc = toolcall_parser_calls(p);
    if (r) json_object_set_new(msg, "reasoning_content", r);
    if (tc) {
        json_object_set_new(msg, "tool_calls", tc);
        const json_t *fr = json_object_get(choice, "finish_reason");
        if (json_is_string(fr) && !strcmp(json_string_value(fr), "stop"))
            json_object_set_new(choice, "finish_reason", json_string("tool_calls"));
    }
    json_decref(deltas);
    toolcall_parser_destroy(p);
    return true;
}
