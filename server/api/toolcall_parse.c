/*
 * toolcall_parse.c — splitting a chat model's output into content, reasoning and tool calls
 * (the parser of toolcall.h).
 *
 * A small state machine over the text not yet decided (pend): in plain text it looks for the
 * earliest marker and holds back only a tail that could still grow into one; inside a marker it
 * waits for the block's end (a closing tag, or the end of a balanced JSON value) and then
 * decides. Nothing depends on where chunks were cut: a chunk boundary only ever delays text.
 *
 * A call is what it claims or it is no call: it comes out only once it is whole and checked
 * (its name one of the request's tools, its arguments one complete JSON object, no key twice,
 * no raw control character), so a stream never sends a call the whole answer would not have.
 * A block that fails goes out as the content the model wrote, and counts as rejected (the
 * choice then keeps its natural finish_reason).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/common.h"
#include "oai.h"
#include "toolcall.h"
#include "toolcall_g4.h"
#include "toolcall_glm.h"

enum mode {
    M_TEXT, M_THINK, M_HERMES, M_PYTAG, M_PYTAG_SEP, M_PYTAG_NEXT, M_MISTRAL, M_GRANITE, M_BARE, M_HARMONY_HEAD,
    M_HARMONY_BODY,
    M_XML_FUNC,   /* Qwen3-Coder: <tool_call> <function= read, the name to '>' */
    M_XML_BODY,   /* between its parameters: <parameter= or </function> */
    M_XML_PNAME,  /* <parameter= read, the name to '>' */
    M_XML_VALUE,  /* a parameter's value, to </parameter> */
    M_XML_END,    /* after </function> (or what ended the call): to </tool_call>, then the verdict */
    M_G4_THOUGHT_HEAD, /* Gemma 4: <|channel> read, its "thought" label to drop */
    M_G4_THOUGHT, /* Gemma 4's reasoning, to <channel|> */
    M_G4_CALL,    /* Gemma 4: <|tool_call> read, the call to <tool_call|> (toolcall_g4.h) */
};
enum hkind { H_CONTENT, H_REASONING, H_CALL };

struct toolcall_parser {
    bool calls;
    enum mode mode;
    enum hkind hkind;      /* M_HARMONY_BODY: what the channel carries */
    char hname[128];       /* H_CALL and XML: the function */
    bool started;          /* some content or a call came out (bare JSON only at the start) */
    bool after_reasoning;  /* leading blank lines after reasoning are dropped */
    bool think_to_call;    /* a <tool_call> also ends a <think> block (toolcall_parser_end_think_at_call) */
    buf pend;              /* text not decided yet */
    buf content, reasoning;
    json_t *tool_calls;    /* OpenAI's array */
    int n_rejected;        /* call blocks that were not valid calls (they went out as content) */
    buf raw;               /* XML and harmony calls: the block's text so far (content if it fails) */
    buf args;              /* XML: the current call's arguments so far */
    bool xml_closed;       /* XML: the call ended with its </function> */
    char id_base[48];      /* call ids are id_base + "_" + index; "" = random */
    const json_t *tools;   /* borrowed: the names a call may have; types the XML calls' values */
    char pname[128];       /* M_XML_VALUE: the parameter */
    int n_params;          /* XML: parameters of the current call so far */
};

static const char XML_FUNC[] = "<function=", XML_FUNC_END[] = "</function>", XML_PARAM[] = "<parameter=",
                  XML_PARAM_END[] = "</parameter>";
static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>", HERMES_OPEN[] = "<tool_call>",
                  HERMES_CLOSE[] = "</tool_call>", PYTAG[] = "<|python_tag|>", MISTRAL[] = "[TOOL_CALLS]", GRANITE[] = "<|tool_call|>",
                  CHANNEL[] = "<|channel|>", MESSAGE[] = "<|message|>", START[] = "<|start|>assistant";
static const char *const HARMONY_ENDS[] = {"<|end|>", "<|call|>", "<|return|>"};
static const char G4_THOUGHT[] = "<|channel>", G4_THOUGHT_END[] = "<channel|>", G4_CALL[] = "<|tool_call>",
                  G4_CALL_END[] = "<tool_call|>";

/* How arguments' JSON is read to check it: a key twice is no call (which one would run?), and
 * an integer past 64 bits is still JSON (the text is kept as written, never re-encoded). */
enum { ARGS_JSON_FLAGS = JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL };

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

void toolcall_parser_end_think_at_call(toolcall_parser *p) { p->think_to_call = true; }

toolcall_parser *toolcall_parser_open(const toolcall_reading *how) {
    toolcall_parser *p = toolcall_parser_create(how->calls);
    if (!p) return NULL;
    toolcall_parser_set_tools(p, how->tools);
    toolcall_parser_set_id_base(p, how->id_base);
    if (how->in_reasoning) toolcall_parser_start_in_reasoning(p);
    if (how->think_to_call) toolcall_parser_end_think_at_call(p);
    return p;
}

void toolcall_parser_destroy(toolcall_parser *p) {
    if (!p) return;
    buf_free(&p->pend);
    buf_free(&p->content);
    buf_free(&p->reasoning);
    buf_free(&p->raw);
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

/* A block that claimed to be a call and is not: its text goes out as content. */
static void reject(toolcall_parser *p, const char *s, size_t n, json_t *deltas) {
    p->n_rejected++;
    emit_content(p, s, n, deltas);
}

/* Removes the first n bytes of pend. */
static void consume(toolcall_parser *p, size_t n) {
    memmove(p->pend.p, p->pend.p + n, p->pend.len - n);
    p->pend.len -= n;
    if (p->pend.p) p->pend.p[p->pend.len] = '\0';
}

/* consume, keeping the bytes in the block's raw text. */
static void consume_raw(toolcall_parser *p, size_t n) {
    buf_append(&p->raw, p->pend.p, n);
    consume(p, n);
}

/* Adds one checked call (arguments as JSON text) and its two stream deltas: the call's head
 * ({index, id, type, function: {name, arguments: ""}}) and its arguments in one fragment. */
static void add_call(toolcall_parser *p, const char *name, const char *args, json_t *deltas) {
    char id[64];
    int index = (int)json_array_size(p->tool_calls);
    if (p->id_base[0]) snprintf(id, sizeof(id), "call_%s_%d", p->id_base, index);
    else attnd_random_id(id, sizeof(id), "call_");
    size_t n = strlen(name), k = strlen(args);
    json_array_append_new(p->tool_calls, json_pack("{s:s,s:s,s:{s:o,s:o}}", "id", id, "type", "function", "function",
                                                   "name", oai_string(name, n), "arguments", oai_string(args, k)));
    json_array_append_new(deltas, json_pack("{s:[{s:i,s:s,s:s,s:{s:o,s:s}}]}", "tool_calls", "index", index, "id", id,
                                            "type", "function", "function", "name", oai_string(name, n),
                                            "arguments", ""));
    if (k)
        json_array_append_new(deltas, json_pack("{s:[{s:i,s:{s:o}}]}", "tool_calls", "index", index, "function",
                                                "arguments", oai_string(args, k)));
    p->started = true;
}

// ---- checking a call ----------------------------------------------------------------------

/* Whether name is one of the request's tools (OpenAI's {"function": {"name"}} or {"name"}).
 * Without tools no name is. */
static bool name_known(const toolcall_parser *p, const char *name) {
    for (size_t i = 0; i < json_array_size(p->tools); i++) {
        const json_t *t = json_array_get(p->tools, i), *f = json_object_get(t, "function");
        const char *tn = json_string_value(json_object_get(f ? f : t, "name"));
        if (tn && !strcmp(tn, name)) return true;
    }
    return false;
}

/* Where a scan of JSON text stands: nesting depth, inside a string, after a backslash in one. */
typedef struct json_scan {
    int depth;
    bool str, esc;
} json_scan;

/* Feeds c: true when it closes the outermost object or array. *code: c is outside strings (and
 * not a string's quote). */
static bool json_scan_step(json_scan *j, char c, bool *code) {
    *code = false;
    if (j->str) {
        if (j->esc) j->esc = false;
        else if (c == '\\') j->esc = true;
        else if (c == '"') j->str = false;
    } else if (c == '"') {
        j->str = true;
    } else if (c == '{' || c == '[') {
        j->depth++;
    } else if (c == '}' || c == ']') {
        return --j->depth == 0;
    } else {
        *code = true;
    }
    return false;
}

/* The length of the balanced JSON object or array at s[0] ('{' or '['), 0 while unfinished. */
static size_t json_span(const char *s, size_t n) {
    json_scan j = {0};
    bool code;
    for (size_t i = 0; i < n; i++)
        if (json_scan_step(&j, s[i], &code)) return i + 1;
    return 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
    return i;
}

/* The length of the JSON value at s[0] of text already known to be valid JSON. */
static size_t value_len(const char *s, size_t n) {
    if (n && (s[0] == '{' || s[0] == '[')) return json_span(s, n);
    if (n && s[0] == '"') {
        for (size_t i = 1, esc = 0; i < n; i++) {
            if (esc) esc = 0;
            else if (s[i] == '\\') esc = 1;
            else if (s[i] == '"') return i + 1;
        }
        return n;
    }
    size_t i = 0;
    while (i < n && !strchr(",}] \t\r\n", s[i])) i++;
    return i;
}

/* Where the k-th member (object; *key set to its decoded name, owned) or element (array) of
 * the valid JSON object or array s[n] has its value: *at and *len. false past the last. */
static bool json_item(const char *s, size_t n, size_t k, json_t **key, size_t *at, size_t *len) {
    bool obj = s[0] == '{';
    size_t i = skip_ws(s, n, 1);
    for (size_t idx = 0; i < n && s[i] != '}' && s[i] != ']'; idx++) {
        json_t *name = NULL;
        if (obj) {
            size_t kl = value_len(s + i, n - i);
            name = json_loadb(s + i, kl, JSON_DECODE_ANY, NULL);
            i = skip_ws(s, n, skip_ws(s, n, i + kl) + 1); /* past the ':' */
        }
        size_t vl = value_len(s + i, n - i);
        if (idx == k) {
            if (key) *key = name;
            else json_decref(name);
            *at = i, *len = vl;
            return true;
        }
        json_decref(name);
        i = skip_ws(s, n, i + vl);
        if (i < n && s[i] == ',') i = skip_ws(s, n, i + 1);
    }
    return false;
}

/* The raw text of member name of the valid JSON object s[n]: true with *at, *len. */
static bool json_member(const char *s, size_t n, const char *name, size_t *at, size_t *len) {
    json_t *key = NULL;
    for (size_t k = 0; json_item(s, n, k, &key, at, len); k++) {
        bool hit = json_is_string(key) && !strcmp(json_string_value(key), name);
        json_decref(key);
        key = NULL;
        if (hit) return true;
    }
    return false;
}

/* The valid JSON text s[n] without the blanks outside its strings (malloc'd; NULL: no memory). */
static char *json_compact(const char *s, size_t n) {
    char *out = malloc(n + 1);
    size_t k = 0;
    json_scan j = {0};
    bool code;
    for (size_t i = 0; out && i < n; i++) {
        json_scan_step(&j, s[i], &code);
        if (!(code && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t'))) out[k++] = s[i];
    }
    if (out) out[k] = '\0';
    return out;
}

/* Whether s[n] is one JSON object and nothing else, read strictly (ARGS_JSON_FLAGS; raw control
 * characters in a string are not JSON). */
static bool args_ok(const char *s, size_t n) {
    json_t *v = json_loadb(s, n, ARGS_JSON_FLAGS, NULL);
    bool ok = json_is_object(v);
    json_decref(v);
    return ok;
}

/* The call object o, whose text is s[n] (both already read with ARGS_JSON_FLAGS): its name
 * (borrowed from o) and its arguments' text into *args (malloc'd: the object compact as
 * written, a string's value as written, "{}" when absent). NULL when it is no valid call: no
 * name, a name not among the tools, arguments and parameters both, or arguments that are not
 * one JSON object. */
static const char *call_of(const toolcall_parser *p, const json_t *o, const char *s, size_t n, char **args) {
    *args = NULL;
    const json_t *name = json_object_get(o, "name"), *a = json_object_get(o, "arguments");
    const char *key = "arguments";
    if (!a) a = json_object_get(o, "parameters"), key = "parameters";
    else if (json_object_get(o, "parameters")) return NULL;
    if (!json_is_object(o) || !json_is_string(name) || !name_known(p, json_string_value(name))) return NULL;
    size_t at, len;
    if (!a) *args = strdup("{}");
    else if (json_is_string(a) && args_ok(json_string_value(a), json_string_length(a)))
        *args = strdup(json_string_value(a));
    else if (json_is_object(a) && json_member(s, n, key, &at, &len)) *args = json_compact(s + at, len);
    return *args ? json_string_value(name) : NULL;
}

enum calls_verdict { CALLS_NONE, CALLS_BAD, CALLS_OK };

/* Call k of the calls JSON v, whose text is s[n] (an object: k = 0; an array: its element k),
 * as call_of. */
static const char *call_at(const toolcall_parser *p, const json_t *v, const char *s, size_t n, size_t k, char **args) {
    size_t at = 0, len = n;
    *args = NULL;
    if (json_is_array(v) && !json_item(s, n, k, NULL, &at, &len)) return NULL;
    return call_of(p, json_is_array(v) ? json_array_get(v, k) : v, s + at, len, args);
}

/* Calls from the JSON text s[n]: an object, or an array of objects, every one a valid call
 * (then added: CALLS_OK). CALLS_BAD: it tried to be calls (an object with a "name", or an
 * array of objects with one) and one is not valid; CALLS_NONE: other JSON, or no JSON at all. */
static enum calls_verdict take_calls_json(toolcall_parser *p, const char *s, size_t n, json_t *deltas) {
    size_t i = skip_ws(s, n, 0);
    json_t *v = json_loadb(s, n, ARGS_JSON_FLAGS, NULL);
    size_t count = json_is_array(v) ? json_array_size(v) : json_is_object(v) ? 1 : 0;
    bool tried = count > 0;
    for (size_t k = 0; k < count; k++)
        tried = tried && json_object_get(json_is_array(v) ? json_array_get(v, k) : v, "name");
    enum calls_verdict verdict = tried ? CALLS_OK : CALLS_NONE;
    for (int pass = 0; pass < 2 && verdict == CALLS_OK; pass++) /* every call checked, then all added */
        for (size_t k = 0; k < count && verdict == CALLS_OK; k++) {
            char *args;
            const char *name = call_at(p, v, s + i, n - i, k, &args);
            if (!name) verdict = CALLS_BAD;
            else if (pass == 1) add_call(p, name, args, deltas);
            free(args);
        }
    json_decref(v);
    return verdict;
}

// ---- scanning ---------------------------------------------------------------------------

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

/* How s[n] starts against marker m: 1 with it, -1 with a proper prefix of it that ends s (more
 * text decides), 0 otherwise. */
static int starts_with(const char *s, size_t n, const char *m) {
    size_t lm = strlen(m);
    if (memcmp(s, m, n < lm ? n : lm)) return 0;
    return n >= lm ? 1 : -1;
}

/* The JSON value at s[0] ('{' or '[') of a <tool_call> block: its length once balanced (0 while
 * not), or *cut, where a </tool_call> outside its strings ends the block first (n when none;
 * *more when s ends inside what could be one). */
static size_t hermes_span(const char *s, size_t n, size_t *cut, bool *more) {
    json_scan j = {0};
    bool code;
    *cut = n, *more = false;
    for (size_t i = 0; i < n; i++) {
        if (json_scan_step(&j, s[i], &code)) return i + 1;
        if (code && s[i] == '<' && starts_with(s + i, n - i, HERMES_CLOSE)) {
            *more = starts_with(s + i, n - i, HERMES_CLOSE) < 0;
            if (!*more) *cut = i;
            return 0;
        }
    }
    return 0;
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
    const char *markers[] = {THINK_OPEN, CHANNEL, START, G4_THOUGHT, HERMES_OPEN, PYTAG, MISTRAL, GRANITE, G4_CALL};
    size_t n_m = p->calls ? 9 : 4, which = 0;
    size_t at = find_first(s, n, markers, n_m, &which);
    if (at < n) {
        emit_content(p, s, at, deltas);
        consume(p, at + strlen(markers[which]));
        static const enum mode next[] = {M_THINK,  M_HARMONY_HEAD, M_TEXT,    M_G4_THOUGHT_HEAD, M_HERMES,
                                         M_PYTAG, M_MISTRAL,      M_GRANITE, M_G4_CALL};
        p->mode = next[which];
        if (which == 0 || which == 3) p->after_reasoning = true;
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

/* Reasoning up to </think>, or (think_to_call) up to a <tool_call>, which stays in pend for the
 * text mode to read as the call it opens: Qwen3.5 may open a call without closing its thinking,
 * and llama.cpp's parser ends the reasoning there. */
static bool step_think(toolcall_parser *p, json_t *deltas, bool final) {
    if (!p->think_to_call) return step_until(p, THINK_CLOSE, true, deltas, final);
    const char *s = p->pend.p;
    const char *m[] = {THINK_CLOSE, HERMES_OPEN};
    size_t n = p->pend.len, which = 0, at = find_first(s, n, m, 2, &which), hold = 0;
    for (size_t k = 0; at == n && !final && k < 2; k++) {
        size_t t = partial_tail(s, n, m[k]);
        if (t > hold) hold = t;
    }
    size_t u = at == n && !final ? utf8_tail(s, n) : 0;
    size_t take = at < n ? at : n - (hold > u ? hold : u);
    emit_reasoning(p, s, take, deltas);
    consume(p, at < n && which == 0 ? at + strlen(THINK_CLOSE) : take);
    if (at < n) p->mode = M_TEXT;
    return at < n;
}

/* <tool_call> JSON </tool_call>: one call, or an array of them, when the JSON is valid calls
 * and only blanks stand between it and the close (or the end of the reply); else the block as
 * written is content, up to the end of its JSON or to the </tool_call> that cut it. */
static bool step_hermes_json(toolcall_parser *p, size_t i, json_t *deltas, bool final) {
    const char *s = p->pend.p;
    size_t n = p->pend.len, cut, close = strlen(HERMES_CLOSE);
    bool more;
    size_t span = hermes_span(s + i, n - i, &cut, &more);
    if (!span && (more || cut == n - i) && !final) return false;
    if (!span) { /* cut by </tool_call>, or the reply ended inside the JSON */
        size_t end = cut < n - i ? i + cut + close : n;
        emit_content(p, HERMES_OPEN, strlen(HERMES_OPEN), deltas);
        reject(p, s, end, deltas);
        consume(p, end);
        p->mode = M_TEXT;
        return true;
    }
    size_t after = skip_ws(s, n, i + span);
    int c = after < n ? starts_with(s + after, n - after, HERMES_CLOSE) : 0;
    if ((after == n || c < 0) && !final) return false;
    bool clean = after == n || c != 0; /* at the reply's end, a close cut short is its end too */
    if (clean && take_calls_json(p, s + i, span, deltas) == CALLS_OK) {
        consume(p, c > 0 ? after + close : c < 0 ? n : after);
    } else { /* not calls, or more than blanks after them: the block is text */
        emit_content(p, HERMES_OPEN, strlen(HERMES_OPEN), deltas);
        reject(p, s, i + span, deltas);
        consume(p, i + span);
    }
    p->mode = M_TEXT;
    return true;
}

// ---- GLM's calls ----------------------------------------------------------------------------

static void add_param(toolcall_parser *p, const char *fn, const char *key, const char *v, size_t n);

typedef struct glm_ctx {
    toolcall_parser *p;
    bool ok; /* every key fit */
} glm_ctx;

static void glm_param(void *ctx, const char *key, size_t kn, const char *v, size_t vn) {
    glm_ctx *g = ctx;
    if (kn >= sizeof(g->p->pname)) {
        g->ok = false;
        return;
    }
    memcpy(g->p->pname, key, kn);
    g->p->pname[kn] = '\0';
    add_param(g->p, g->p->hname, g->p->pname, v, vn);
}

/* After <tool_call>: GLM's NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>. 1: the
 * block was read (a call, or content when it names no tool or its arguments are no object);
 * -1: more text is needed; 0: not this syntax. */
static int step_glm(toolcall_parser *p, json_t *deltas, bool final) {
    size_t end = 0;
    glm_ctx g = {p, true};
    buf_clear(&p->args);
    buf_puts(&p->args, "{");
    p->n_params = 0;
    int r = toolcall_glm_read(p->pend.p, p->pend.len, final, p->hname, sizeof(p->hname), glm_param, &g, &end);
    if (r <= 0) return r;
    buf_puts(&p->args, "}");
    if (g.ok && name_known(p, p->hname) && args_ok(p->args.p, p->args.len)) {
        add_call(p, p->hname, p->args.p, deltas);
    } else {
        emit_content(p, HERMES_OPEN, strlen(HERMES_OPEN), deltas);
        reject(p, p->pend.p, end, deltas);
    }
    consume(p, end);
    p->mode = M_TEXT;
    return 1;
}

/* After <tool_call>: JSON, Qwen3-Coder's <function=, GLM's name and tags, or (none of them)
 * text up to </tool_call>. */
static bool step_hermes(toolcall_parser *p, json_t *deltas, bool final) {
    size_t i = skip_ws(p->pend.p, p->pend.len, 0), n = p->pend.len;
    if (i == n && !final) return false;
    if (i < n && (p->pend.p[i] == '{' || p->pend.p[i] == '[')) return step_hermes_json(p, i, deltas, final);
    int x = i < n ? starts_with(p->pend.p + i, n - i, XML_FUNC) : 0;
    if (x < 0 && !final) return false; /* "<func" could be either */
    if (x > 0) {
        buf_clear(&p->raw);
        buf_puts(&p->raw, HERMES_OPEN);
        consume_raw(p, i + strlen(XML_FUNC));
        p->mode = M_XML_FUNC;
        return true;
    }
    int g = step_glm(p, deltas, final);
    if (g != 0) return g > 0;
    const char *m[] = {HERMES_CLOSE};
    size_t which, at = find_first(p->pend.p, n, m, 1, &which);
    if (at == n && !final) return false;
    emit_content(p, HERMES_OPEN, strlen(HERMES_OPEN), deltas);
    reject(p, p->pend.p, at < n ? at + strlen(HERMES_CLOSE) : at, deltas);
    consume(p, at < n ? at + strlen(HERMES_CLOSE) : at);
    p->mode = M_TEXT;
    return true;
}

/* A balanced JSON value after a marker (<|python_tag|>, [TOOL_CALLS], or none: bare JSON):
 * calls, then for python_tag more calls after ';'. Not calls: the text as written. */
static bool step_json(toolcall_parser *p, const char *marker, json_t *deltas, bool final) {
    const char *s = p->pend.p;
    size_t n = p->pend.len, i = skip_ws(s, n, 0);
    if (i == n && !final) return false;
    if (i == n) { /* only blanks after the marker: no call, the text as written (after "; ": nothing) */
        if (p->mode != M_PYTAG_NEXT) {
            reject(p, marker, strlen(marker), deltas);
            emit_content(p, s, n, deltas);
        }
        consume(p, n);
        p->mode = M_TEXT;
        return true;
    }
    size_t span = s[i] == '{' || s[i] == '[' ? json_span(s + i, n - i) : 0;
    if (!span && !final && (s[i] == '{' || s[i] == '[')) return false;
    enum calls_verdict v = span ? take_calls_json(p, s + i, span, deltas) : CALLS_NONE;
    if (v != CALLS_OK) { /* not a call after all: the marker and the text as written */
        p->mode = M_TEXT;
        p->started = true;
        size_t take = span ? i + span : 0; /* not JSON at all: the text goes on as text */
        if (*marker || v == CALLS_BAD) p->n_rejected++;
        emit_content(p, marker, strlen(marker), deltas);
        emit_content(p, s, take, deltas);
        consume(p, take);
        return true;
    }
    consume(p, i + span);
    p->mode = p->mode == M_PYTAG || p->mode == M_PYTAG_NEXT ? M_PYTAG_SEP : M_TEXT;
    return true;
}

/* After a python_tag call: ';' and another call, or back to text. */
static bool step_pytag_sep(toolcall_parser *p, bool final) {
    size_t j = skip_ws(p->pend.p, p->pend.len, 0);
    if (j == p->pend.len && !final) return false;
    if (j < p->pend.len && p->pend.p[j] == ';') {
        consume(p, j + 1);
        p->mode = M_PYTAG_NEXT;
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
        if (final) { /* the reply ended inside the header: it is text */
            emit_content(p, CHANNEL, strlen(CHANNEL), deltas);
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
        buf_clear(&p->raw); /* the header goes out with the body when the call fails */
        buf_puts(&p->raw, CHANNEL);
        consume_raw(p, at + strlen(MESSAGE));
    } else {
        consume(p, at + strlen(MESSAGE));
    }
    p->mode = M_HARMONY_BODY;
    return true;
}

/* A harmony call's body pend[at] and its end marker (end bytes), taken: a call when the function
 * is one of the tools and the body one JSON object; else the header, body and marker are content. */
static void harmony_call(toolcall_parser *p, size_t at, size_t end, json_t *deltas) {
    const char *s = p->pend.p;
    size_t i = skip_ws(s, at, 0), e = at;
    while (e > i && (s[e - 1] == ' ' || s[e - 1] == '\n' || s[e - 1] == '\r' || s[e - 1] == '\t')) e--;
    char *args = name_known(p, p->hname) && args_ok(s + i, e - i) ? json_compact(s + i, e - i) : NULL;
    if (args) {
        add_call(p, p->hname, args, deltas);
        consume(p, at + end);
    } else {
        consume_raw(p, at + end);
        reject(p, p->raw.p, p->raw.len, deltas);
    }
    free(args);
}

static bool step_harmony_body(toolcall_parser *p, json_t *deltas, bool final) {
    size_t which = 0, n = p->pend.len;
    size_t at = find_first(p->pend.p, n, HARMONY_ENDS, ATTND_ARRAY_LEN(HARMONY_ENDS), &which);
    if (p->hkind == H_CALL) {
        if (at == n && !final) return false;
        harmony_call(p, at, at < n ? strlen(HARMONY_ENDS[which]) : 0, deltas);
        p->mode = M_TEXT;
        return true;
    }
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
    consume(p, at + strlen(HARMONY_ENDS[which]));
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
            consume_raw(p, i + 1);
            return 1;
        }
        if (c == '<' || c == '\n' || c == '\0' || i + 1 >= cap) return 0;
    }
    return final ? 0 : -1;
}

/* Whether function fn's parameter pn takes its text as it is: its schema may be a string
 * (toolcall_schema_is_text_at), or it has none (a parameter the tool does not list). */
static bool param_is_text(const toolcall_parser *p, const char *fn, const char *pn) {
    for (size_t i = 0; i < json_array_size(p->tools); i++) {
        const json_t *t = json_array_get(p->tools, i), *f = json_object_get(t, "function");
        if (!f) f = t;
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || strcmp(name, fn)) continue;
        const json_t *params = json_object_get(f, "parameters"), *prop = json_object_get(json_object_get(params, "properties"), pn);
        return !prop || toolcall_schema_is_text_at(prop, params, 0);
    }
    return true;
}

/* One parameter "key": value of function fn's call into p->args, from its text v[n]: the text
 * itself when the parameter is text, else its JSON (the text when it is not JSON). A key twice
 * is no call (args_ok refuses its arguments). */
static void add_param(toolcall_parser *p, const char *fn, const char *key, const char *v, size_t n) {
    json_t *val = param_is_text(p, fn, key) ? NULL : json_loadb(v, n, JSON_DECODE_ANY, NULL);
    if (!val) val = oai_string(v, n);
    json_t *k = oai_string(key, strlen(key));
    char *kt = json_dumps(k, JSON_ENCODE_ANY), *vt = json_dumps(val, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (kt && vt) {
        if (p->n_params++) buf_puts(&p->args, ",");
        buf_puts(&p->args, kt);
        buf_puts(&p->args, ":");
        buf_puts(&p->args, vt);
    }
    free(kt), free(vt);
    json_decref(k), json_decref(val);
}

/* Qwen's value text: one leading and one trailing newline are the format's. */
static void xml_add_param(toolcall_parser *p, const char *v, size_t n) {
    if (n && v[0] == '\n') v++, n--;
    if (n && v[n - 1] == '\n') n--;
    add_param(p, p->hname, p->pname, v, n);
}

/* The end of the current call's arguments: "}", and on to </tool_call>. closed: by its
 * </function> (anything else leaves the call unfinished: no call). */
static void xml_close(toolcall_parser *p, bool closed) {
    buf_puts(&p->args, "}");
    p->xml_closed = closed;
    p->mode = M_XML_END;
}

/* <function=NAME>: the call's name ("{" starts its arguments); not a name: the markers are content. */
static bool step_xml_func(toolcall_parser *p, json_t *deltas, bool final) {
    int r = xml_name(p, p->hname, sizeof(p->hname), final);
    if (r < 0) return false;
    if (r == 0) {
        reject(p, p->raw.p, p->raw.len, deltas);
        p->mode = M_TEXT;
        return true;
    }
    buf_clear(&p->args);
    buf_puts(&p->args, "{");
    p->n_params = 0;
    p->mode = M_XML_BODY;
    return true;
}

/* Between parameters: the next <parameter=, or </function>; anything else ends the call. */
static bool step_xml_body(toolcall_parser *p, bool final) {
    size_t i = skip_ws(p->pend.p, p->pend.len, 0), left = p->pend.len - i;
    consume_raw(p, i);
    if (left == 0) return false;
    const char *m[] = {XML_PARAM, XML_FUNC_END};
    for (int k = 0; k < 2; k++) {
        int w = starts_with(p->pend.p, left, m[k]);
        if (w < 0 && !final) return false;
        if (w <= 0) continue;
        consume_raw(p, strlen(m[k]));
        if (k == 0) p->mode = M_XML_PNAME;
        else xml_close(p, true);
        return true;
    }
    xml_close(p, false); /* not the format: no call */
    return true;
}

static bool step_xml_pname(toolcall_parser *p, bool final) {
    int r = xml_name(p, p->pname, sizeof(p->pname), final);
    if (r < 0) return false;
    if (r == 0) xml_close(p, false);
    else p->mode = M_XML_VALUE;
    return true;
}

/* A value, whole once its </parameter> is read (the reply ending first leaves the call unfinished). */
static bool step_xml_value(toolcall_parser *p, bool final) {
    const char *m[] = {XML_PARAM_END};
    size_t which, at = find_first(p->pend.p, p->pend.len, m, 1, &which);
    if (at == p->pend.len && !final) return false;
    if (at == p->pend.len) {
        consume_raw(p, at);
        xml_close(p, false);
        return true;
    }
    xml_add_param(p, p->pend.p, at);
    consume_raw(p, at + strlen(XML_PARAM_END));
    p->mode = M_XML_BODY;
    return true;
}

/* After the call: blanks and </tool_call> (or the reply's end), then the verdict: a call when
 * it closed with </function> and names one of the tools, else its text is content. Other text
 * before the close makes the block text too; that text is parsed on as text. */
static bool step_xml_end(toolcall_parser *p, json_t *deltas, bool final) {
    size_t n = p->pend.len, i = skip_ws(p->pend.p, n, 0);
    int c = i < n ? starts_with(p->pend.p + i, n - i, HERMES_CLOSE) : 0;
    if ((i == n || c < 0) && !final) return false;
    c = c < 0 ? 2 : c; /* at the reply's end, a close cut short is its end too */
    bool ok = p->xml_closed && (i == n || c > 0) && name_known(p, p->hname) && args_ok(p->args.p, p->args.len);
    consume_raw(p, c == 1 ? i + strlen(HERMES_CLOSE) : c == 2 ? n : i);
    if (ok) add_call(p, p->hname, p->args.p, deltas);
    else reject(p, p->raw.p, p->raw.len, deltas);
    p->mode = M_TEXT;
    return true;
}

// ---- Gemma 4 ----------------------------------------------------------------------------------

/* After <|channel>: the channel's "thought" label and its newline, then reasoning to <channel|>. */
static bool step_g4_thought_head(toolcall_parser *p, bool final) {
    static const char LABEL[] = "thought\n";
    int w = starts_with(p->pend.p, p->pend.len, LABEL);
    if (w < 0 && !final) return false; /* "thou" could be the label */
    if (w > 0) consume(p, strlen(LABEL));
    p->mode = M_G4_THOUGHT;
    return true;
}

/* <|tool_call>call:NAME{...}<tool_call|>: a call when the block reads as one (toolcall_g4.h) and
 * names a tool; else the block as written is content. */
static bool step_g4_call(toolcall_parser *p, json_t *deltas, bool final) {
    const char *m[] = {G4_CALL_END};
    size_t n = p->pend.len, which, at = find_first(p->pend.p, n, m, 1, &which);
    if (at == n && !final) return false;
    size_t end = at < n ? at + strlen(G4_CALL_END) : n;
    char name[128];
    buf args = {0};
    bool ok = at < n && toolcall_g4_read(p->pend.p, at, name, sizeof(name), &args) && name_known(p, name) &&
              args_ok(args.p, args.len);
    if (ok) {
        add_call(p, name, args.p, deltas);
    } else {
        emit_content(p, G4_CALL, strlen(G4_CALL), deltas);
        reject(p, p->pend.p, end, deltas);
    }
    buf_free(&args);
    consume(p, end);
    p->mode = M_TEXT;
    return true;
}

static bool step(toolcall_parser *p, json_t *deltas, bool final) {
    if (p->pend.len == 0 && !(final && p->mode == M_XML_END)) return false;
    switch (p->mode) {
    case M_TEXT: return step_text(p, deltas, final);
    case M_THINK: return step_think(p, deltas, final);
    case M_HERMES: return step_hermes(p, deltas, final);
    case M_PYTAG: return step_json(p, PYTAG, deltas, final);
    case M_PYTAG_SEP: return step_pytag_sep(p, final);
    case M_PYTAG_NEXT: return step_json(p, ";", deltas, final);
    case M_MISTRAL: return step_json(p, MISTRAL, deltas, final);
    case M_GRANITE: return step_json(p, GRANITE, deltas, final);
    case M_BARE: return step_json(p, "", deltas, final);
    case M_HARMONY_HEAD: return step_harmony_head(p, deltas, final);
    case M_HARMONY_BODY: return step_harmony_body(p, deltas, final);
    case M_XML_FUNC: return step_xml_func(p, deltas, final);
    case M_XML_BODY: return step_xml_body(p, final);
    case M_XML_PNAME: return step_xml_pname(p, final);
    case M_XML_VALUE: return step_xml_value(p, final);
    case M_XML_END: return step_xml_end(p, deltas, final);
    case M_G4_THOUGHT_HEAD: return step_g4_thought_head(p, final);
    case M_G4_THOUGHT: return step_until(p, G4_THOUGHT_END, true, deltas, final);
    case M_G4_CALL: return step_g4_call(p, deltas, final);
    }
    return false;
}

void toolcall_parser_feed(toolcall_parser *p, const char *text, size_t n, json_t *deltas) {
    if (n && !buf_append(&p->pend, text, n)) return;
    while (step(p, deltas, false)) {}
}

void toolcall_parser_finish(toolcall_parser *p, json_t *deltas) {
    while (step(p, deltas, true)) {}
    if (p->mode >= M_XML_FUNC && p->mode <= M_XML_VALUE) { /* the reply ended inside an XML call */
        consume_raw(p, p->pend.len);
        reject(p, p->raw.p, p->raw.len, deltas);
    } else if (p->mode == M_HARMONY_BODY && p->hkind == H_CALL) {
        harmony_call(p, p->pend.len, 0, deltas);
    } else if (p->mode == M_HARMONY_HEAD) { /* the reply ended right after the marker */
        emit_content(p, CHANNEL, strlen(CHANNEL), deltas);
    } else if (p->mode == M_HERMES || p->mode == M_PYTAG || p->mode == M_MISTRAL || p->mode == M_GRANITE ||
               p->mode == M_G4_CALL) {
        const char *m = p->mode == M_HERMES ? HERMES_OPEN : p->mode == M_PYTAG ? PYTAG : p->mode == M_MISTRAL ? MISTRAL
                        : p->mode == M_GRANITE ? GRANITE : G4_CALL;
        reject(p, m, strlen(m), deltas); /* a call's marker and nothing after it */
    }
    p->mode = M_TEXT;
    if (p->pend.len) { /* whatever a mode could not place */
        emit_content(p, p->pend.p, p->pend.len, deltas);
        consume(p, p->pend.len);
    }
}

json_t *toolcall_parser_content(const toolcall_parser *p) {
    return p->content.len ? oai_string(p->content.p, p->content.len) : json_null();
}

json_t *toolcall_parser_reasoning(const toolcall_parser *p) {
    return p->reasoning.len ? oai_string(p->reasoning.p, p->reasoning.len) : NULL;
}

json_t *toolcall_parser_calls(const toolcall_parser *p) {
    return json_array_size(p->tool_calls) ? json_incref(p->tool_calls) : NULL;
}

int toolcall_parser_n_calls(const toolcall_parser *p) { return (int)json_array_size(p->tool_calls); }

int toolcall_parser_n_rejected(const toolcall_parser *p) { return p->n_rejected; }

const char *toolcall_parser_finish_reason(const toolcall_parser *p, const char *natural) {
    bool calls = json_array_size(p->tool_calls) > 0 && p->n_rejected == 0;
    return calls && natural && !strcmp(natural, "stop") ? "tool_calls" : natural;
}

// ---- a chat choice ------------------------------------------------------------------------

bool toolcall_apply(json_t *choice, const char *text, size_t n, const toolcall_reading *how) {
    toolcall_parser *p = toolcall_parser_open(how);
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
    if (tc) json_object_set_new(msg, "tool_calls", tc);
    const char *fr = json_string_value(json_object_get(choice, "finish_reason"));
    if (fr && toolcall_parser_finish_reason(p, fr) != fr)
        json_object_set_new(choice, "finish_reason", json_string(toolcall_parser_finish_reason(p, fr)));
    json_decref(deltas);
    toolcall_parser_destroy(p);
    return true;
}
