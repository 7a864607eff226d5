/*
 * json_schema.c — JSON Schema to GBNF (see json_schema.h).
 *
 * One recursive walk: each schema node becomes a GBNF expression; objects, arrays and $ref
 * targets become rules of their own (rN), so repetition copies a reference and a recursive
 * $ref is just a rule that names itself. Shared pieces (strings, numbers, whitespace, dates...)
 * are emitted once at the end, as the walk asked for them. Every keyword of a node is checked
 * against what the walk understands before anything is generated for it.
 */
#include "json_schema.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "attnd/grammar.h"

enum {
    P_WS = 1 << 0, P_STRING = 1 << 1, P_CHAR = 1 << 2, P_NUMBER = 1 << 3, P_INTEGER = 1 << 4, P_VALUE = 1 << 5,
    P_OBJECT = 1 << 6, P_ARRAY = 1 << 7, P_DATE = 1 << 8, P_TIME = 1 << 9, P_UUID = 1 << 10, P_EMAIL = 1 << 11,
    P_URI = 1 << 12, P_UNUMBER = 1 << 13, P_KEY = 1 << 14,
};

enum { MAX_DEPTH = 64, MAX_RULES = 4096, MAX_BOUND_DIGITS = 15 };

typedef struct ref_memo {
    const json_t *node;
    int id;
} ref_memo;

typedef struct conv {
    const json_t *root;
    buf rules;          /* rule definitions so far */
    int n_rules;
    ref_memo *refs;
    size_t n_refs, cap_refs;
    unsigned prims;
    int depth;
    char path[256];     /* JSON pointer of the node at hand, for messages */
    attnd_err *err;
    attnd_status st;
    bool g4;            /* Gemma 4's call syntax (json_schema_rules_gemma4) instead of JSON */
} conv;

__attribute__((format(printf, 3, 4))) static bool cfail(conv *c, attnd_status st, const char *fmt, ...) {
    if (c->st != ATTND_OK) return false;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->st = attnd_fail(c->err, st, "%s (at '%s' in the schema)", msg, c->path[0] ? c->path : "/");
    return false;
}

static bool cput(conv *c, buf *b, const char *s) {
    if (c->st != ATTND_OK) return false;
    if (!buf_puts(b, s)) return cfail(c, ATTND_ERR_NOMEM, "out of memory");
    return true;
}

__attribute__((format(printf, 3, 4))) static bool cprintf(conv *c, buf *b, const char *fmt, ...) {
    if (c->st != ATTND_OK) return false;
    va_list ap;
    va_start(ap, fmt);
    bool ok = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return ok || cfail(c, ATTND_ERR_NOMEM, "out of memory");
}

/* A GBNF string literal for bytes s[n]. */
static bool put_literal(conv *c, buf *b, const char *s, size_t n) {
    if (!cput(c, b, "\"")) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char tmp[8];
        if (ch == '"' || ch == '\\') snprintf(tmp, sizeof(tmp), "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) snprintf(tmp, sizeof(tmp), "\\x%02X", ch);
        else tmp[0] = (char)ch, tmp[1] = 0;
        if (!cput(c, b, tmp)) return false;
    }
    return cput(c, b, "\"");
}

// ---- Gemma 4's syntax ------------------------------------------------------------------------

#define G4_MARK "<|\"|>"

/* Whether an object key can be written bare in Gemma's syntax: what toolcall_g4.c reads as one
 * (up to the ':', none of ",{}[]"), without '<' (a mark) or blanks and control characters. */
static bool g4_plain_key(const char *k) {
    if (!*k) return false;
    for (const unsigned char *p = (const unsigned char *)k; *p; p++)
        if (*p <= 0x20 || strchr(":,{}[]<", *p)) return false;
    return true;
}

/* A key as Gemma's template writes one: bare, or between marks when it is not a plain name. */
static bool g4_key_text(buf *out, const char *k) {
    return g4_plain_key(k) ? buf_puts(out, k) : buf_puts(out, G4_MARK) && buf_puts(out, k) && buf_puts(out, G4_MARK);
}

static int key_order(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    int d = strcasecmp(x, y);
    return d ? d : strcmp(x, y);
}

/* v as Gemma's template writes a value (format_argument): strings between marks as they are, None
 * for null, keys sorted as dictsort sorts them. false: out of memory or a string holding a mark
 * (no way to write it). */
static bool g4_text(buf *out, const json_t *v, int depth) {
    if (depth > MAX_DEPTH) return false;
    if (json_is_string(v))
        return !strstr(json_string_value(v), G4_MARK) && buf_puts(out, G4_MARK) &&
               buf_append(out, json_string_value(v), json_string_length(v)) && buf_puts(out, G4_MARK);
    if (json_is_null(v)) return buf_puts(out, "None");
    if (json_is_array(v)) {
        bool ok = buf_puts(out, "[");
        for (size_t i = 0; ok && i < json_array_size(v); i++)
            ok = (!i || buf_puts(out, ",")) && g4_text(out, json_array_get(v, i), depth + 1);
        return ok && buf_puts(out, "]");
    }
    if (json_is_object(v)) {
        size_t n = json_object_size(v), k = 0;
        const char **keys = calloc(n ? n : 1, sizeof(*keys)), *key;
        json_t *x;
        if (!keys) return false;
        json_object_foreach((json_t *)v, key, x) keys[k++] = key;
        qsort(keys, n, sizeof(*keys), key_order);
        bool ok = buf_puts(out, "{");
        for (size_t i = 0; ok && i < n; i++)
            ok = (!i || buf_puts(out, ",")) && g4_key_text(out, keys[i]) && buf_puts(out, ":") &&
                 g4_text(out, json_object_get(v, keys[i]), depth + 1);
        free(keys);
        return ok && buf_puts(out, "}");
    }
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY); /* numbers, true, false */
    bool ok = t && buf_puts(out, t);
    free(t);
    return ok;
}

/* The literal of a JSON value as compact JSON text (Gemma's syntax in g4). */
static bool put_json_literal(conv *c, buf *b, const json_t *v) {
    if (c->g4) {
        buf t = {0};
        bool ok = g4_text(&t, v, 0) ? put_literal(c, b, t.p, t.len)
                                    : cfail(c, ATTND_ERR_UNSUPPORTED, "a value that Gemma's call syntax cannot write "
                                            "(a string holding " G4_MARK ")");
        buf_free(&t);
        return ok;
    }
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return cfail(c, ATTND_ERR_NOMEM, "out of memory");
    bool ok = put_literal(c, b, text, strlen(text));
    free(text);
    return ok;
}

/* Defines "rN ::= body" and appends rN to expr. */
static bool define_rule(conv *c, int id, const buf *body) {
    return cprintf(c, &c->rules, "r%d ::= %s\n", id, body->p && body->len ? body->p : "\"\"");
}

static int new_rule_id(conv *c) {
    if (c->n_rules >= MAX_RULES) {
        cfail(c, ATTND_ERR_UNSUPPORTED, "the schema needs more than %d grammar rules", MAX_RULES);
        return -1;
    }
    return c->n_rules++;
}

// ---- keywords -------------------------------------------------------------------------------

static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", "strict", "$anchor", "contentMediaType",
                                          "contentEncoding"};
static const char *const HANDLED[] = {"type", "properties", "required", "additionalProperties", "items",
                                      "prefixItems", "additionalItems", "minItems", "maxItems", "enum", "const",
                                      "anyOf", "oneOf", "allOf", "$ref", "nullable", "minLength", "maxLength",
                                      "format", "pattern", "minimum", "maximum", "exclusiveMinimum",
                                      "exclusiveMaximum", "multipleOf", "uniqueItems"};

static bool in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}

static bool check_keywords(conv *c, const json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!strncmp(k, "x-", 2) || in_list(k, ANNOTATIONS, ATTND_ARRAY_LEN(ANNOTATIONS))) continue;
        if (!in_list(k, HANDLED, ATTND_ARRAY_LEN(HANDLED)))
            return cfail(c, ATTND_ERR_UNSUPPORTED, "JSON Schema keyword '%.64s' is not supported", k);
    }
    const json_t *u = json_object_get(s, "uniqueItems");
    if (u && !json_is_false(u))
        return cfail(c, ATTND_ERR_UNSUPPORTED, "JSON Schema keyword 'uniqueItems' is not supported (only false)");
    return true;
}

/* An optional non-negative integer keyword (absent: def). */
static bool get_count(conv *c, const json_t *s, const char *name, long long def, long long max, long long *out) {
    const json_t *v = json_object_get(s, name);
    *out = def;
    if (!v) return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return cfail(c, ATTND_ERR_INVALID, "'%s' must be a non-negative integer", name);
    if (json_integer_value(v) > max)
        return cfail(c, ATTND_ERR_UNSUPPORTED, "'%s' above %lld is not supported", name, max);
    *out = json_integer_value(v);
    return true;
}

// ---- the walk -------------------------------------------------------------------------------

static bool gen(conv *c, const json_t *s, buf *expr);

/* gen for a child at path + "/" + seg. */
static bool gen_child(conv *c, const json_t *s, const char *seg, buf *expr) {
    size_t len = strlen(c->path);
    snprintf(c->path + len, sizeof(c->path) - len, "/%s", seg);
    bool ok = gen(c, s, expr);
    if (c->st == ATTND_OK) c->path[len] = '\0';
    return ok;
}

/* A child schema as a rule reference (so that repeating it copies one element). */
static bool gen_child_rule(conv *c, const json_t *s, const char *seg, buf *expr) {
    int id = new_rule_id(c);
    buf body = {0};
    bool ok = id >= 0 && gen_child(c, s, seg, &body) && define_rule(c, id, &body) && cprintf(c, expr, "r%d", id);
    buf_free(&body);
    return ok;
}

static const json_t *resolve_ref(conv *c, const char *ref) {
    if (ref[0] != '#') {
        cfail(c, ATTND_ERR_UNSUPPORTED, "'$ref' '%.100s': only references inside the schema (#...) are supported", ref);
        return NULL;
    }
    const json_t *node = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof(seg)) seg[n++] = ch;
        }
        seg[n] = '\0';
        node = json_is_object(node) ? json_object_get(node, seg) : NULL;
        if (!node) break;
    }
    if (!node || *p) cfail(c, ATTND_ERR_INVALID, "'$ref' '%.100s' points at nothing in the schema", ref);
    return node && !*p ? node : NULL;
}

static bool gen_ref(conv *c, const char *ref, buf *expr) {
    const json_t *target = resolve_ref(c, ref);
    if (!target) return false;
    for (size_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].node == target) return cprintf(c, expr, "r%d", c->refs[i].id);
    int id = new_rule_id(c);
    if (id < 0) return false;
    if (!attnd_grow(&c->refs, &c->cap_refs, c->n_refs + 1, sizeof(*c->refs), 8))
        return cfail(c, ATTND_ERR_NOMEM, "out of memory");
    c->refs[c->n_refs++] = (ref_memo){target, id}; /* before the body: a recursive $ref finds it */
    buf body = {0};
    char save[sizeof(c->path)];
    memcpy(save, c->path, sizeof(save));
    snprintf(c->path, sizeof(c->path), "%.250s", ref + 1);
    bool ok = gen(c, target, &body) && define_rule(c, id, &body);
    if (ok) memcpy(c->path, save, sizeof(save));
    buf_free(&body);
    return ok && cprintf(c, expr, "r%d", id);
}

/* anyOf / oneOf: ( a | b | ... ). */
static bool gen_alternatives(conv *c, const json_t *list, const char *name, buf *expr) {
    if (!json_is_array(list) || json_array_size(list) == 0)
        return cfail(c, ATTND_ERR_INVALID, "'%s' must be a non-empty array of schemas", name);
    if (!cput(c, expr, "( ")) return false;
    for (size_t i = 0; i < json_array_size(list); i++) {
        char seg[48];
        snprintf(seg, sizeof(seg), "%s/%zu", name, i);
        if ((i && !cput(c, expr, " | ")) || !gen_child(c, json_array_get(list, i), seg, expr)) return false;
    }
    return cput(c, expr, " )");
}

static bool gen_enum(conv *c, const json_t *list, buf *expr) {
    if (!json_is_array(list) || json_array_size(list) == 0)
        return cfail(c, ATTND_ERR_INVALID, "'enum' must be a non-empty array");
    if (!cput(c, expr, "( ")) return false;
    for (size_t i = 0; i < json_array_size(list); i++)
        if ((i && !cput(c, expr, " | ")) || !put_json_literal(c, expr, json_array_get(list, i))) return false;
    return cput(c, expr, " )");
}


// ---- patterns -------------------------------------------------------------------------------

/* A regular expression (the subset JSON Schema users write) inside a JSON string: every
 * character is matched as it appears in JSON text, escaped where JSON must escape it. */
typedef struct rx {
    conv *c;
    const char *p, *end, *start;
} rx;

static bool rx_fail(rx *r, const char *what) {
    return cfail(r->c, ATTND_ERR_UNSUPPORTED, "'pattern': %s is not supported (at offset %d)", what,
                 (int)(r->p - r->start));
}

/* One character (UTF-8 sequence of n bytes) as JSON text, as a GBNF literal. */
static bool rx_literal(rx *r, buf *o, const char *ch, size_t n) {
    char j[8];
    if (r->c->g4) memcpy(j, ch, n); /* Gemma's strings are the text as it is */
    else if (n == 1 && (*ch == '"' || *ch == '\\')) j[0] = '\\', j[1] = *ch, n = 2;
    else if (n == 1 && (unsigned char)*ch < 0x20) n = (size_t)snprintf(j, sizeof(j), "\\u%04x", (unsigned char)*ch);
    else memcpy(j, ch, n);
    return cput(r->c, o, " ") && put_literal(r->c, o, j, n);
}

static size_t utf8_len(const char *p, const char *end) {
    unsigned char b = (unsigned char)*p;
    size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
    return (size_t)(end - p) < n ? (size_t)(end - p) : n;
}

/* The code point of the UTF-8 sequence p[n] (as far as it goes). */
static uint32_t utf8_cp(const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p;
    uint32_t v = n == 1 ? u[0] : n == 2 ? (u[0] & 0x1Fu) : n == 3 ? (u[0] & 0x0Fu) : (u[0] & 0x07u);
    for (size_t i = 1; i < n; i++) v = v << 6 | (u[i] & 0x3Fu);
    return v;
}

/* A class member character for GBNF (escaped where a GBNF class needs it). */
static bool rx_class_char(rx *r, buf *o, const char *ch, size_t n, bool neg) {
    unsigned char b = (unsigned char)*ch;
    if (!neg && n == 1 && (b == '"' || b == '\\' || b < 0x20)) return rx_fail(r, "a class holding '\"', '\\' or a control character");
    if (n == 1 && (b == ']' || b == '\\' || b == '-' || b == '^')) return cprintf(r->c, o, "\\%c", b);
    if (n == 1 && b < 0x20) return cprintf(r->c, o, "\\x%02X", b);
    if (!buf_append(o, ch, n)) return cfail(r->c, ATTND_ERR_NOMEM, "out of memory");
    return true;
}

static const char *rx_shorthand(char e) {
    switch (e) {
    case 'd': return "0-9";
    case 'w': return "a-zA-Z0-9_";
    case 's': return " ";
    default: return NULL;
    }
}

static bool rx_class(rx *r, buf *o) {
    r->p++;
    bool neg = r->p < r->end && *r->p == '^';
    if (neg) r->p++;
    if (!cput(r->c, o, neg ? " [^" : " [")) return false;
    for (bool first = true; r->p < r->end && (*r->p != ']' || first); first = false) {
        if (*r->p == '\\' && r->p + 1 < r->end) {
            char e = r->p[1];
            r->p += 2;
            if (rx_shorthand(e)) {
                if (!cput(r->c, o, rx_shorthand(e))) return false;
                continue;
            }
            if (e == 'n' || e == 't' || e == 'r' || strchr("dDwWsSbB", e)) return rx_fail(r, "this escape in a class");
            if (!rx_class_char(r, o, &e, 1, neg)) return false;
            continue;
        }
        size_t n = utf8_len(r->p, r->end);
        if (!rx_class_char(r, o, r->p, n, neg)) return false;
        r->p += n;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            uint32_t lo = utf8_cp(r->p - n, n);
            r->p++;
            n = utf8_len(r->p, r->end);
            if (*r->p == '\\') return rx_fail(r, "an escaped range end");
            if (utf8_cp(r->p, n) < lo) return rx_fail(r, "a backwards range");
            if (!cput(r->c, o, "-") || !rx_class_char(r, o, r->p, n, neg)) return false;
            r->p += n;
        }
    }
    if (r->p >= r->end) return rx_fail(r, "an unclosed class");
    r->p++;
    return cput(r->c, o, neg ? "\"\\\\\\x00-\\x1f]" : "]");
}

static bool rx_alt(rx *r, buf *o);

static bool rx_escape(rx *r, buf *o) {
    char e = r->p[1];
    r->p += 2;
    if (rx_shorthand(e)) return cprintf(r->c, o, " [%s]", rx_shorthand(e));
    if (e == 'D' || e == 'W' || e == 'S')
        return cprintf(r->c, o, " [^%s\"\\\\\\x00-\\x1f]", rx_shorthand((char)(e - 'A' + 'a')));
    if (e == 'n' || e == 't' || e == 'r') return cprintf(r->c, o, " \"\\\\%c\"", e);
    if (strchr(".*+?()[]{}|\\/^$-", e)) return rx_literal(r, o, &e, 1);
    return rx_fail(r, "this escape");
}

static bool rx_atom(rx *r, buf *o) {
    char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
            else return rx_fail(r, "a lookaround or named group");
        }
        if (!cput(r->c, o, " (") || !rx_alt(r, o)) return false;
        if (r->p >= r->end || *r->p != ')') return rx_fail(r, "an unclosed group");
        r->p++;
        return cput(r->c, o, " )");
    }
    if (ch == '[') return rx_class(r, o);
    if (ch == '.') {
        r->p++;
        r->c->prims |= P_CHAR;
        return cput(r->c, o, " char");
    }
    if (ch == '\\' && r->p + 1 < r->end) return rx_escape(r, o);
    if (ch == '^' || ch == '$') return rx_fail(r, "an anchor inside the pattern");
    if (strchr("*+?{", ch)) return rx_fail(r, "a quantifier without an atom");
    size_t n = utf8_len(r->p, r->end);
    bool ok = rx_literal(r, o, r->p, n);
    r->p += n;
    return ok;
}

static bool rx_quantifier(rx *r, buf *o) {
    char ch = *r->p;
    if (ch == '*' || ch == '+' || ch == '?') {
        r->p++;
        if (!cprintf(r->c, o, "%c", ch)) return false;
    } else if (ch == '{') {
        const char *close = memchr(r->p, '}', (size_t)(r->end - r->p));
        if (!close) return rx_fail(r, "an unclosed repetition");
        long m = -1, x = -1, *cur = &m;
        int commas = 0;
        for (const char *q = r->p + 1; q < close; q++) {
            if (*q == ',' && !commas++) cur = &x;
            else if (*q >= '0' && *q <= '9' && (*cur < 0 ? 0 : *cur) <= GRAMMAR_MAX_REPEAT)
                *cur = (*cur < 0 ? 0 : *cur * 10) + (*q - '0');
            else return rx_fail(r, "this repetition");
        }
        if (m < 0 || m > GRAMMAR_MAX_REPEAT || x > GRAMMAR_MAX_REPEAT || (x >= 0 && x < m))
            return rx_fail(r, "this repetition");
        if (!buf_append(o, r->p, (size_t)(close - r->p) + 1)) return cfail(r->c, ATTND_ERR_NOMEM, "out of memory");
        r->p = close + 1;
    } else return true;
    if (r->p < r->end && (*r->p == '?' || *r->p == '+')) r->p++; /* lazy / possessive: same language */
    return true;
}

static bool rx_alt(rx *r, buf *o) {
    for (;;) {
        bool empty = true;
        while (r->p < r->end && *r->p != '|' && *r->p != ')') {
            if (!rx_atom(r, o) || (r->p < r->end && !rx_quantifier(r, o))) return false;
            empty = false;
        }
        if (empty && !cput(r->c, o, " \"\"")) return false;
        if (r->p >= r->end || *r->p != '|') return true;
        r->p++;
        if (!cput(r->c, o, " |")) return false;
    }
}

static bool json_schema_pattern(conv *c, const char *re, buf *expr) {
    size_t n = strlen(re);
    bool start = n && re[0] == '^', end = n > (size_t)start && re[n - 1] == '$' && (n < 2 || re[n - 2] != '\\');
    rx r = {c, re + start, re + n - end, re};
    c->prims |= P_CHAR;
    /* unanchored sides match anything there */
    if (!cput(c, expr, start ? "(" : "( char*") || !cput(c, expr, " (") || !rx_alt(&r, expr)) return false;
    if (r.p != r.end) return rx_fail(&r, "an unbalanced ')'");
    return cput(c, expr, end ? " ) )" : " ) char* )");
}

// ---- strings --------------------------------------------------------------------------------

static bool gen_string(conv *c, const json_t *s, buf *expr) {
    const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    /* the quotes: JSON's, or Gemma's marks */
    const char *q = c->g4 ? "\"<|\\\"|>\"" : "\"\\\"\"";
    if (pat) {
        if (!json_is_string(pat)) return cfail(c, ATTND_ERR_INVALID, "'pattern' must be a string");
        return cprintf(c, expr, "%s ", q) && json_schema_pattern(c, json_string_value(pat), expr) &&
               cprintf(c, expr, " %s", q);
    }
    if (fmt) {
        static const struct { const char *name; unsigned prim; const char *rule; } F[] = {
            {"date", P_DATE, "date"}, {"time", P_TIME, "time"}, {"date-time", P_DATE | P_TIME, "date \"T\" time"},
            {"uuid", P_UUID, "uuid"}, {"email", P_EMAIL, "email"}, {"uri", P_URI, "uri"},
        };
        if (!json_is_string(fmt)) return cfail(c, ATTND_ERR_INVALID, "'format' must be a string");
        for (size_t i = 0; i < ATTND_ARRAY_LEN(F); i++)
            if (!strcmp(json_string_value(fmt), F[i].name)) {
                c->prims |= F[i].prim;
                return cprintf(c, expr, "%s %s %s", q, F[i].rule, q);
            }
        return cfail(c, ATTND_ERR_UNSUPPORTED, "string 'format' '%.64s' is not supported (date, time, date-time, "
                     "uuid, email, uri are)", json_string_value(fmt));
    }
    long long lo, hi;
    if (!get_count(c, s, "minLength", 0, GRAMMAR_MAX_REPEAT, &lo) ||
        !get_count(c, s, "maxLength", -1, GRAMMAR_MAX_REPEAT, &hi))
        return false;
    if (hi >= 0 && hi < lo) return cfail(c, ATTND_ERR_INVALID, "'maxLength' is below 'minLength'");
    if (lo == 0 && hi < 0 && c->g4) { /* any text without a mark (the shared rule) */
        c->prims |= P_STRING;
        return cput(c, expr, "string");
    }
    c->prims |= P_CHAR;
    if (lo == 0 && hi < 0) return cprintf(c, expr, "%s char* %s", q, q);
    if (hi < 0) return cprintf(c, expr, "%s char{%lld,} %s", q, lo, q);
    return cprintf(c, expr, "%s char{%lld,%lld} %s", q, lo, hi, q);
}

// ---- integers and numbers -------------------------------------------------------------------

/* Digits d (length n) as GBNF: equal-length decimal ranges [a, b] (no leading zeros beyond
 * what a and b have), the classic digit-by-digit split. */
static bool range_same_len(conv *c, buf *o, const char *a, const char *b, size_t n) {
    if (n == 0) return cput(c, o, "\"\"");
    if (n == 1) return cprintf(c, o, "[%c-%c]", a[0], b[0]);
    if (a[0] == b[0]) return cprintf(c, o, "\"%c\" ", a[0]) && range_same_len(c, o, a + 1, b + 1, n - 1);
    char nines[32], zeros[32];
    memset(nines, '9', n - 1), memset(zeros, '0', n - 1);
    bool a_low = !memcmp(a + 1, zeros, n - 1), b_high = !memcmp(b + 1, nines, n - 1);
    char lo_mid = a_low ? a[0] : (char)(a[0] + 1), hi_mid = b_high ? b[0] : (char)(b[0] - 1);
    bool first = true, ok = cput(c, o, "( ");
    if (ok && !a_low) {
        ok = cprintf(c, o, "\"%c\" ( ", a[0]) && range_same_len(c, o, a + 1, nines, n - 1) && cput(c, o, " )");
        first = false;
    }
    if (ok && lo_mid <= hi_mid) {
        ok = cprintf(c, o, "%s[%c-%c] [0-9]{%zu}", first ? "" : " | ", lo_mid, hi_mid, n - 1);
        first = false;
    }
    if (ok && !b_high)
        ok = cprintf(c, o, "%s\"%c\" ( ", first ? "" : " | ", b[0]) && range_same_len(c, o, zeros, b + 1, n - 1) &&
             cput(c, o, " )");
    return ok && cput(c, o, " )");
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded above). */
static bool range_nonneg(conv *c, buf *o, long long lo, long long hi) {
    char a[32], b[32];
    int na = snprintf(a, sizeof(a), "%lld", lo);
    int nb = hi < 0 ? 16 : snprintf(b, sizeof(b), "%lld", hi);
    bool ok = cput(c, o, "( "), first = true;
    for (int len = na; ok && len <= nb; len++) {
        char x[32], y[32];
        if (len == na) memcpy(x, a, (size_t)na + 1);
        else x[0] = '1', memset(x + 1, '0', (size_t)len - 1), x[len] = 0;
        if (len == nb && hi >= 0) memcpy(y, b, (size_t)nb + 1);
        else memset(y, '9', (size_t)len), y[len] = 0;
        if (len == 1 || x[0] != '0') {
            ok = cput(c, o, first ? "" : " | ") && range_same_len(c, o, x, y, (size_t)len);
            first = false;
        }
    }
    return ok && cput(c, o, " )");
}

/* A bound of integer s: minimum / exclusiveMinimum (lower) or maximum / exclusiveMaximum. */
static bool int_bound(conv *c, const json_t *s, bool lower, bool *has, long long *v) {
    const char *incl = lower ? "minimum" : "maximum", *excl = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    const json_t *i = json_object_get(s, incl), *e = json_object_get(s, excl);
    *has = false;
    double best = lower ? -INFINITY : INFINITY;
    if (i && !json_is_number(i)) return cfail(c, ATTND_ERR_INVALID, "'%s' must be a number", incl);
    if (e && !json_is_number(e) && !json_is_boolean(e)) return cfail(c, ATTND_ERR_INVALID, "'%s' must be a number", excl);
    if (i) {
        double x = json_number_value(i);
        bool ex = json_is_true(e); /* draft 4: a boolean beside the bound */
        best = lower ? (ex ? floor(x) + 1 : ceil(x)) : (ex ? ceil(x) - 1 : floor(x));
        *has = true;
    }
    if (e && json_is_number(e)) {
        double x = json_number_value(e), y = lower ? floor(x) + 1 : ceil(x) - 1;
        best = !*has ? y : lower ? fmax(best, y) : fmin(best, y);
        *has = true;
    }
    /* The largest integer a double holds exactly, 2^53 - 1 (JavaScript's Number.MAX_SAFE_INTEGER,
     * which zod's .int() writes as the bounds of every integer): a bound at or beyond it on its
     * own side means no bound; on the other side it leaves no value. */
    const double safe = 9007199254740991.0;
    if (*has && (lower ? best <= -safe : best >= safe)) *has = false;
    if (*has && !(fabs(best) < safe))
        return cfail(c, ATTND_ERR_INVALID, "integer bound '%s' leaves no value (beyond 2^53)", i ? incl : excl);
    *v = *has ? (long long)best : 0; /* no bound: best is infinite, and converting it is undefined */
    return true;
}

// ---- bounded numbers ------------------------------------------------------------------------
/* A decimal range is a regular language, so bounds on a number are kept exactly: the value is
 * split by sign, the integer part ranges like an integer's, and an integer part at a bound
 * constrains the fraction digits after it. Bounded numbers have no exponent. Each bound is read
 * as the shortest decimal that reads back as it (what the schema's author wrote), moved inward
 * onto the grammar's lattice of 10^-nf; an exclusive bound is first moved one double inward, so
 * every accepted text, read as a double, satisfies the bound (texts within a double's step of
 * an exclusive bound may be refused). */

enum { NUM_IP = 16, NUM_FP = 16 }; /* integer and fraction digits a number may have */

/* A value on the lattice: sign, integer part (< 10^16) and NUM_FP fraction digits ('0' past nf). */
typedef struct nbound {
    bool neg;
    long long ip;
    char fr[NUM_FP + 1];
} nbound;

/* Adds one at digit k of d (NUM_IP + NUM_FP digits); false on a carry out of the top. */
static bool digits_bump(char *d, int k) {
    for (; k >= 0; k--) {
        if (d[k] != '9') return d[k]++, true;
        d[k] = '0';
    }
    return false;
}

/* x (finite) as its shortest round-trip decimal, moved to the lattice of 10^-nf: toward +inf
 * (up) or -inf. False when the result has 10^16 or more as its magnitude. */
static bool nbound_from(nbound *b, double x, int nf, bool up) {
    char s[48], d[NUM_IP + NUM_FP];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(s, sizeof(s), "%.*e", p - 1, x);
        if (strtod(s, NULL) == x) break;
    }
    if (p == 17) snprintf(s, sizeof(s), "%.16e", x);
    const char *q = s;
    bool neg = *q == '-', rest = false;
    if (neg) q++;
    const char *e = strchr(q, 'e');
    int ex = e ? atoi(e + 1) : 0;
    memset(d, '0', sizeof(d));
    if (!e) return false;
    for (int i = 0; q < e; q++) {
        if (*q < '0' || *q > '9') continue;
        long k = (long)NUM_IP - 1 - ex + i; /* digit i weighs 10^(ex - i) */
        i++;
        if (k < 0 && *q != '0') return false;
        if (k >= NUM_IP + nf) rest |= *q != '0';
        else if (k >= 0) d[k] = *q;
    }
    if (rest && up != neg && !digits_bump(d, NUM_IP + nf - 1)) return false;
    b->ip = 0;
    for (int k = 0; k < NUM_IP; k++) b->ip = b->ip * 10 + (d[k] - '0');
    memcpy(b->fr, d + NUM_IP, NUM_FP);
    b->fr[NUM_FP] = '\0';
    b->neg = neg && (b->ip || strspn(b->fr, "0") < NUM_FP); /* no negative zero */
    return true;
}

static int nbound_cmp(const nbound *a, const nbound *b) {
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int m = a->ip != b->ip ? (a->ip < b->ip ? -1 : 1) : strcmp(a->fr, b->fr);
    return a->neg ? -m : m;
}

/* Whether the first n characters of s (or all, if fewer) are ch. */
static bool all_of(const char *s, char ch, int n) {
    for (; *s && n > 0; s++, n--)
        if (*s != ch) return false;
    return true;
}

/* Fraction digits from position i of nf on: read padded with zeros, at least lo[i..] while tl
 * and at most hi[i..] while th; need: at least one digit. */
static bool frac_digits(conv *c, buf *o, const char *lo, const char *hi, int i, int nf, bool tl, bool th, bool need) {
    int rest = nf - i;
    if (tl && all_of(lo + i, '0', NUM_FP)) tl = false;
    if (th && (i >= nf || all_of(hi + i, '9', nf - i))) th = false;
    if (!tl && !th) return rest ? cprintf(c, o, "[0-9]{%d,%d}", need, rest) : cput(c, o, "\"\"");
    if (!tl && all_of(hi + i, '0', NUM_FP)) return cprintf(c, o, "\"0\"{%d,%d}", need, rest);
    char dl = tl ? lo[i] : '0', dh = th ? hi[i] : '9';
    char fl = tl ? (char)(dl + 1) : dl, fh = th ? (char)(dh - 1) : dh; /* digits free of both bounds */
    bool first = true, ok = cput(c, o, "( ");
    if (ok && fl <= fh) {
        ok = cprintf(c, o, "[%c-%c]", fl, fh) && (rest == 1 || cprintf(c, o, " [0-9]{0,%d}", rest - 1));
        first = false;
    }
    if (ok && tl) {
        ok = cprintf(c, o, "%s\"%c\" ", first ? "" : " | ", dl) &&
             frac_digits(c, o, lo, hi, i + 1, nf, true, th && dl == dh, false);
        first = false;
    }
    if (ok && th && !(tl && dl == dh))
        ok = cprintf(c, o, "%s\"%c\" ", first ? "" : " | ", dh) && frac_digits(c, o, lo, hi, i + 1, nf, false, true, false);
    if (ok && !need && !tl) ok = cput(c, o, " | \"\"");
    return ok && cput(c, o, " )");
}

/* An integer part (an expression) and the fraction after it, within lo / hi (NULL: free). */
static bool int_and_frac(conv *c, buf *o, const char *lo, const char *hi, int nf) {
    static const char zeros[NUM_FP + 1] = "0000000000000000", nines[NUM_FP + 1] = "9999999999999999";
    bool tl = lo && !all_of(lo, '0', NUM_FP);
    if (nf == 0) return true;
    return cput(c, o, tl ? " \".\" " : " ( \".\" ") &&
           frac_digits(c, o, lo ? lo : zeros, hi ? hi : nines, 0, nf, lo != NULL, hi != NULL, true) &&
           cput(c, o, tl ? "" : " )?");
}

/* Magnitudes (no sign) in [lo, hi] (hi NULL: below 10^16), as JSON number text. */
static bool mag_range(conv *c, buf *o, const nbound *lo, const nbound *hi, int nf) {
    if (hi && lo->ip == hi->ip)
        return cprintf(c, o, "\"%lld\"", lo->ip) && int_and_frac(c, o, lo->fr, hi->fr, nf);
    /* an integer part at a bound whose fraction bound is no bound joins the middle */
    bool lo_free = all_of(lo->fr, '0', NUM_FP), hi_free = !hi || all_of(hi->fr, '9', nf);
    long long mid_lo = lo_free ? lo->ip : lo->ip + 1, mid_hi = !hi ? -1 : hi_free ? hi->ip : hi->ip - 1;
    bool first = true, ok = cput(c, o, "( ");
    if (ok && !lo_free) {
        ok = cprintf(c, o, "\"%lld\"", lo->ip) && int_and_frac(c, o, lo->fr, NULL, nf);
        first = false;
    }
    if (ok && (hi ? mid_lo <= mid_hi : mid_lo < 10000000000000000LL)) {
        ok = cput(c, o, first ? "" : " | ") && range_nonneg(c, o, mid_lo, mid_hi) && int_and_frac(c, o, NULL, NULL, nf);
        first = false;
    }
    if (ok && !hi_free)
        ok = cprintf(c, o, "%s\"%lld\"", first ? "" : " | ", hi->ip) && int_and_frac(c, o, NULL, hi->fr, nf);
    return ok && cput(c, o, " )");
}

/* One side of a number's bounds as an inclusive double (an exclusive one moved one double
 * inward); *has false when there is none. */
static bool num_bound(conv *c, const json_t *s, bool lower, bool *has, double *v) {
    const char *incl = lower ? "minimum" : "maximum", *excl = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    const json_t *i = json_object_get(s, incl), *e = json_object_get(s, excl);
    double inward = lower ? INFINITY : -INFINITY;
    *has = false;
    *v = -inward;
    if (i && !json_is_number(i)) return cfail(c, ATTND_ERR_INVALID, "'%s' must be a number", incl);
    if (e && !json_is_number(e) && !json_is_boolean(e)) return cfail(c, ATTND_ERR_INVALID, "'%s' must be a number", excl);
    if (i) {
        double x = json_number_value(i);
        *v = json_is_true(e) ? nextafter(x, inward) : x; /* draft 4: a boolean beside the bound */
        *has = true;
    }
    if (e && json_is_number(e)) {
        double y = nextafter(json_number_value(e), inward);
        *v = !*has ? y : lower ? fmax(*v, y) : fmin(*v, y);
        *has = true;
    }
    return true;
}

/* multipleOf m (> 0): *nf = k when m is 10^-k (0 <= k <= 16), else -1 with *m set. */
static bool num_step(conv *c, const json_t *s, int *nf, double *m) {
    const json_t *v = json_object_get(s, "multipleOf");
    *nf = NUM_FP;
    *m = 0;
    if (!v) return true;
    if (!json_is_number(v) || !(json_number_value(v) > 0))
        return cfail(c, ATTND_ERR_INVALID, "'multipleOf' must be a number above 0");
    *m = json_number_value(v);
    for (int k = 0; k <= NUM_FP; k++) {
        char t[24];
        snprintf(t, sizeof(t), "1e-%d", k);
        if (strtod(t, NULL) == *m) return *nf = k, true;
    }
    *nf = -1;
    return true;
}

enum { MAX_MULTIPLES = 256, MAX_INT_STEP = 100 };

/* m as a decimal a * 10^-k from its shortest digits; false when a would pass 10^17 or k 16. */
static bool step_decimal(double m, long long *a, int *k) {
    char t[48];
    int p = 1;
    for (; p < 17 && (snprintf(t, sizeof(t), "%.*e", p - 1, m), strtod(t, NULL) != m); p++) {}
    if (p == 17) snprintf(t, sizeof(t), "%.16e", m);
    int ex = atoi(strchr(t, 'e') + 1);
    *k = p - 1 - ex;
    *a = 0;
    if (*k > NUM_FP || *k < p - 17) return false;
    for (const char *q = t; *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') *a = *a * 10 + (*q - '0');
    for (; *k < 0; (*k)++) *a *= 10;
    return true;
}

/* Every multiple n * a * 10^-k within [lo, hi], listed (the caller checked there are few). */
static bool gen_multiples(conv *c, long long a, int k, double lo, double hi, bool integer, buf *expr) {
    double m = (double)a / pow(10.0, k);
    long long scale = 1;
    for (int j = 0; j < k; j++) scale *= 10;
    bool ok = cput(c, expr, "( "), any = false;
    for (long long n = (long long)floor(lo / m) - 1; ok && n <= (long long)ceil(hi / m) + 1; n++) {
        long long q = n * a, mag = q < 0 ? -q : q;
        char num[48];
        int len = snprintf(num, sizeof(num), "%s%lld", q < 0 ? "-" : "", mag / scale);
        if (mag % scale) {
            snprintf(num + len, sizeof(num) - (size_t)len, ".%0*lld", k, mag % scale);
            for (size_t end = strlen(num); num[end - 1] == '0'; end--) num[end - 1] = '\0';
        }
        double v = strtod(num, NULL);
        if (v < lo || v > hi || (integer && mag % scale)) continue;
        ok = cput(c, expr, any ? " | " : "") && put_literal(c, expr, num, strlen(num));
        any = true;
    }
    if (ok && !any) return cfail(c, ATTND_ERR_INVALID, "no multiple of 'multipleOf' lies within the bounds");
    return ok && cput(c, expr, " )");
}

/* Integers divisible by m, digit by digit: rule (r, e, f) is e digits and then up to f more that
 * take the remainder r (mod m) to 0, made when first referred to. */
typedef struct divis {
    conv *c;
    int m;
    int ids[NUM_IP + 1][NUM_IP + 1][MAX_INT_STEP];           /* rule id + 1; 0: not made */
    signed char reach[NUM_IP + 1][NUM_IP + 1][MAX_INT_STEP]; /* 0: not known, 1: none, 2: some */
} divis;

/* Whether any digits make rule (r, e, f). */
static bool divis_reach(divis *d, int r, int e, int f) {
    signed char *known = &d->reach[e][f][r];
    if (!*known) {
        bool any = e == 0 && r == 0;
        for (int k = 0; k < 10 && !any && (e > 0 || f > 0); k++)
            any = e > 0 ? divis_reach(d, (10 * r + k) % d->m, e - 1, f) : divis_reach(d, (10 * r + k) % d->m, 0, f - 1);
        *known = any ? 2 : 1;
    }
    return *known == 2;
}

/* Appends rule (r, e, f), which divis_reach says exists. */
static bool divis_ref(divis *d, buf *o, int r, int e, int f) {
    conv *c = d->c;
    if (e == 0 && f == 0) return cput(c, o, "\"\"");
    if (!d->ids[e][f][r]) {
        int id = new_rule_id(c);
        buf body = {0};
        bool ok = id >= 0, first = e > 0 || r != 0;
        if (ok) d->ids[e][f][r] = id + 1; /* the body never refers to it: e + f falls */
        if (ok && !first) ok = cput(c, &body, "\"\"");
        for (int k = 0; ok && k < 10; k++) {
            int r2 = (10 * r + k) % d->m, e2 = e > 0 ? e - 1 : 0, f2 = e > 0 ? f : f - 1;
            if (!divis_reach(d, r2, e2, f2)) continue;
            ok = cprintf(c, &body, "%s\"%d\"", first ? "" : " | ", k) &&
                 (!(e2 || f2) || (cput(c, &body, " ") && divis_ref(d, &body, r2, e2, f2)));
            first = false;
        }
        ok = ok && define_rule(c, id, &body);
        buf_free(&body);
        if (!ok) return false;
    }
    return cprintf(c, o, "r%d", d->ids[e][f][r] - 1);
}

/* Digits i.. of an L-digit number within [x, y] (tl / th: the digits so far are x's / y's),
 * with remainder r so far, that end divisible; *some false (nothing written) when none do. */
static bool divis_walk(divis *d, buf *o, const char *x, const char *y, int i, int L, int r, bool tl, bool th,
                       bool *some) {
    *some = false;
    if (tl && all_of(x + i, '0', L - i)) tl = false; /* at the bound's digits, all free from here */
    if (th && all_of(y + i, '9', L - i)) th = false;
    if (!tl && !th) return !divis_reach(d, r, L - i, 0) || ((*some = true) && divis_ref(d, o, r, L - i, 0));
    buf alts = {0};
    bool ok = true;
    for (char k = tl ? x[i] : '0'; ok && k <= (th ? y[i] : '9'); k++) {
        buf sub = {0};
        bool any;
        ok = divis_walk(d, &sub, x, y, i + 1, L, (10 * r + (k - '0')) % d->m, tl && k == x[i], th && k == y[i], &any);
        if (ok && any) ok = cprintf(d->c, &alts, "%s\"%c\" %s", *some ? " | " : "", k, sub.p);
        *some |= any;
        buf_free(&sub);
    }
    if (ok && *some) ok = cprintf(d->c, o, "( %s )", alts.p);
    buf_free(&alts);
    return ok;
}

/* One length of multiples: L digits within [x, y] (each L long or NULL: 10..0 / 99..9). */
static bool divis_length(divis *d, buf *o, const char *x, const char *y, int L, bool *some) {
    char xs[32], ys[32];
    memcpy(xs, x ? x : "1000000000000000", (size_t)L), xs[L] = 0;
    memcpy(ys, y ? y : "9999999999999999", (size_t)L), ys[L] = 0;
    buf one = {0};
    bool any, ok = divis_walk(d, &one, xs, ys, 0, L, 0, true, true, &any);
    if (ok && any) ok = cprintf(d->c, o, "%s%s", *some ? " | " : "( ", one.p);
    *some |= any;
    buf_free(&one);
    return ok;
}

/* Non-negative multiples of d->m in [lo, hi] (hi < 10^15); *some as divis_walk. The lengths
 * that are whole (every L-digit number in range) are one chain, a first digit and then up to
 * the longest, not one alternative per length, so that reading a number keeps few parses
 * alive and the rules stay about 16 per remainder. */
static bool range_divisible(divis *d, buf *o, long long lo, long long hi, bool *some) {
    char a[32], b[32];
    int na = snprintf(a, sizeof(a), "%lld", lo), nb = snprintf(b, sizeof(b), "%lld", hi);
    *some = false;
    if (na == nb) return divis_length(d, o, a, b, na, some) && (!*some || cput(d->c, o, " )"));
    bool lo_whole = na > 1 && a[0] == '1' && all_of(a + 1, '0', na - 1), hi_whole = all_of(b, '9', nb);
    int c1 = lo_whole ? na : na + 1, c2 = hi_whole ? nb : nb - 1;
    bool ok = lo_whole || divis_length(d, o, a, NULL, na, some);
    for (int k = 1; ok && c1 <= c2 && k <= 9; k++) { /* lengths c1 .. c2 */
        if (!divis_reach(d, k % d->m, c1 - 1, c2 - c1)) continue;
        ok = cprintf(d->c, o, "%s\"%d\" ", *some ? " | " : "( ", k) && divis_ref(d, o, k % d->m, c1 - 1, c2 - c1);
        *some = true;
    }
    ok = ok && (hi_whole || divis_length(d, o, NULL, b, nb, some));
    return !ok || !*some || cput(d->c, o, " )");
}

/* Integers in [lo, hi] (has_*: bounded) divisible by m (1: all), by sign; with a step, within
 * +-(10^15 - 1). */
static bool gen_int_range(conv *c, buf *expr, bool has_lo, long long lo, bool has_hi, long long hi, int m) {
    if (has_lo && has_hi && hi < lo) return cfail(c, ATTND_ERR_INVALID, "the integer bounds leave no value");
    if (m > 1 && ((has_lo && lo > 999999999999999LL) || (has_hi && hi < -999999999999999LL)))
        return cfail(c, ATTND_ERR_INVALID, "the bounds leave no value (a multipleOf step keeps within 15 digits)");
    divis *d = m > 1 ? calloc(1, sizeof(*d)) : NULL;
    if (m > 1 && !d) return cfail(c, ATTND_ERR_NOMEM, "out of memory");
    if (d) d->c = c, d->m = m;
    const long long top = 999999999999999LL; /* 15 digits: a double tells multiples apart below 2^53 */
    if (d && (!has_lo || lo < -top)) has_lo = true, lo = -top;
    if (d && (!has_hi || hi > top)) has_hi = true, hi = top;
    bool neg = !has_lo || lo < 0, pos = !has_hi || hi >= 0, some[2] = {false, false}, ok = true;
    buf part[2] = {{0}, {0}};
    long long from[2] = {has_hi && hi < 0 ? -hi : 1, has_lo && lo > 0 ? lo : 0}; /* -x, x >= 1; then x >= 0 */
    long long to[2] = {has_lo ? -lo : -1, has_hi ? hi : -1};
    for (int s = 0; s < 2 && ok; s++) {
        if (!(s ? pos : neg)) continue;
        if (d) ok = range_divisible(d, &part[s], from[s], to[s], &some[s]);
        else ok = (some[s] = true) && range_nonneg(c, &part[s], from[s], to[s]);
    }
    if (ok && !some[0] && !some[1]) ok = cfail(c, ATTND_ERR_INVALID, "no multiple of 'multipleOf' lies within the bounds");
    if (ok) ok = cprintf(c, expr, "( %s%s%s%s )", some[0] ? "\"-\" " : "", some[0] ? part[0].p : "",
                         some[0] && some[1] ? " | " : "", some[1] ? part[1].p : "");
    buf_free(&part[0]), buf_free(&part[1]);
    free(d);
    return ok;
}

/* multipleOf m that is not a power of ten: its multiples listed when both bounds leave at most
 * MAX_MULTIPLES; an integer step up to MAX_INT_STEP digit by digit; anything else refused. */
static bool gen_step(conv *c, double m, bool has_lo, double lo, bool has_hi, double hi, bool integer, buf *expr) {
    long long a;
    int k;
    bool exact = step_decimal(m, &a, &k);
    if (exact && has_lo && has_hi && (hi - lo) / m <= MAX_MULTIPLES && (fmax(fabs(lo), fabs(hi)) / m + 2) * (double)a < 1e18)
        return gen_multiples(c, a, k, lo, hi, integer, expr);
    if (exact && k == 0 && a >= 2 && a <= MAX_INT_STEP) {
        const double big = 9999999999999999.0; /* as the grammar's 16 digits */
        bool hl = has_lo && lo > -big, hh = has_hi && hi < big;
        if ((has_lo && lo > big) || (has_hi && hi < -big)) return cfail(c, ATTND_ERR_INVALID, "the bounds leave no value");
        return gen_int_range(c, expr, hl, hl ? (long long)ceil(lo) : 0, hh, hh ? (long long)floor(hi) : 0, (int)a);
    }
    return cfail(c, ATTND_ERR_UNSUPPORTED, "'multipleOf' %.17g is supported as a power of ten, an integer up to %d, or "
                 "with both bounds and at most %d multiples between them", m, MAX_INT_STEP, MAX_MULTIPLES);
}

/* A number in [lo, hi] (NULL: no bound) on the lattice of 10^-nf, by sign. */
static bool gen_signed(conv *c, buf *o, const nbound *lo, const nbound *hi, int nf) {
    nbound zero = {.fr = "0000000000000000"}, step = zero;
    if (nf) step.fr[nf - 1] = '1';
    else step.ip = 1;
    bool neg = !lo || lo->neg, pos = !hi || !hi->neg, ok = cput(c, o, "( ");
    if (ok && neg) { /* -x for x in [max(step, -hi), -lo]: no negative zero */
        nbound mlo = hi && hi->neg ? *hi : step, mhi = lo ? *lo : zero;
        mlo.neg = mhi.neg = false;
        ok = cput(c, o, "\"-\" ") && mag_range(c, o, &mlo, lo ? &mhi : NULL, nf);
    }
    if (ok && pos) {
        nbound mlo = lo && !lo->neg ? *lo : zero;
        ok = cput(c, o, neg ? " | " : "") && mag_range(c, o, &mlo, hi, nf);
    }
    return ok && cput(c, o, " )");
}

static bool gen_number(conv *c, const json_t *s, buf *expr) {
    bool has_lo, has_hi;
    double lo, hi, m;
    int nf;
    if (!num_step(c, s, &nf, &m) || !num_bound(c, s, true, &has_lo, &lo) || !num_bound(c, s, false, &has_hi, &hi))
        return false;
    bool bounded = has_lo || has_hi;           /* then no exponent, even with bounds beyond reach */
    if (has_lo && lo <= -1e16) has_lo = false; /* every number the grammar writes is within 10^16 */
    if (has_hi && hi >= 1e16) has_hi = false;
    if ((has_lo && lo >= 1e16) || (has_hi && hi <= -1e16) || (has_lo && has_hi && lo > hi))
        return cfail(c, ATTND_ERR_INVALID, "the number bounds leave no value");
    if (nf < 0) return gen_step(c, m, has_lo, lo, has_hi, hi, false, expr);
    if (!bounded && nf == NUM_FP) {
        c->prims |= P_NUMBER;
        return cput(c, expr, "number");
    }
    nbound a = {0}, b = {0};
    if ((has_lo && !nbound_from(&a, lo, nf, true)) || (has_hi && !nbound_from(&b, hi, nf, false)) ||
        (has_lo && has_hi && nbound_cmp(&a, &b) > 0))
        return cfail(c, ATTND_ERR_INVALID, "the number bounds leave no value with %d fraction digits", nf);
    return gen_signed(c, expr, has_lo ? &a : NULL, has_hi ? &b : NULL, nf);
}

static bool gen_integer(conv *c, const json_t *s, buf *expr) {
    bool has_lo, has_hi;
    long long lo = 0, hi = 0;
    int nf;
    double m;
    if (!int_bound(c, s, true, &has_lo, &lo) || !int_bound(c, s, false, &has_hi, &hi) || !num_step(c, s, &nf, &m))
        return false;
    if (nf < 0) /* (every integer is a multiple of 10^-k) */
        return gen_step(c, m, has_lo, (double)lo, has_hi, (double)hi, true, expr);
    if (!has_lo && !has_hi) {
        c->prims |= P_INTEGER;
        return cput(c, expr, "integer");
    }
    return gen_int_range(c, expr, has_lo, lo, has_hi, hi, 1);
}

// ---- objects and arrays ---------------------------------------------------------------------

/* additionalProperties: 0 none, 1 any value, 2 the schema ap. */
static int extra_kind(const json_t *s, const json_t **ap) {
    *ap = json_object_get(s, "additionalProperties");
    if (!*ap) return json_object_get(s, "properties") ? 0 : 1;
    if (json_is_false(*ap)) return 0;
    if (json_is_true(*ap) || (json_is_object(*ap) && json_object_size(*ap) == 0)) return 1;
    return 2;
}

static bool gen_object_rules(conv *c, const json_t *s, const json_t *props, int *first0) {
    size_t n = json_object_size(props);
    const json_t *req = json_object_get(s, "required"), *ap;
    int kind = extra_kind(s, &ap);
    if (req && !json_is_array(req)) return cfail(c, ATTND_ERR_INVALID, "'required' must be an array of names");
    for (size_t i = 0; i < json_array_size(req); i++) {
        const json_t *name = json_array_get(req, i);
        if (!json_is_string(name)) return cfail(c, ATTND_ERR_INVALID, "'required' must be an array of names");
        if (!json_object_get(props, json_string_value(name)))
            return cfail(c, ATTND_ERR_UNSUPPORTED, "required property '%.64s' is not in 'properties'",
                         json_string_value(name));
    }
    buf extra = {0};
    bool ok = true;
    if (kind) {
        c->prims |= (c->g4 ? P_KEY : P_STRING) | P_WS | (kind == 1 ? P_VALUE : 0);
        int id = new_rule_id(c);
        buf body = {0};
        ok = id >= 0 && cput(c, &body, c->g4 ? "key \":\" ws " : "string \":\" ws ") &&
             (kind == 1 ? cput(c, &body, "value") : gen_child(c, ap, "additionalProperties", &body)) &&
             define_rule(c, id, &body) && cprintf(c, &extra, "r%d", id);
        buf_free(&body);
    }
    /* after_i: the members from i on, something before them; first_i: nothing before them */
    int after = -1, first = -1;
    if (ok && (after = new_rule_id(c)) >= 0 && (first = new_rule_id(c)) >= 0) {
        ok = kind ? cprintf(c, &c->rules, "r%d ::= ( \",\" ws %s )*\nr%d ::= ( %s ( \",\" ws %s )* )?\n", after,
                            extra.p, first, extra.p, extra.p)
                  : cprintf(c, &c->rules, "r%d ::= \"\"\nr%d ::= \"\"\n", after, first);
    }
    ok = ok && after >= 0 && first >= 0;
    /* properties in reverse, so each rule refers to the one after it */
    const char **keys = ok && n ? calloc(n, sizeof(*keys)) : NULL;
    if (ok && n && !keys) ok = cfail(c, ATTND_ERR_NOMEM, "out of memory");
    size_t k = 0;
    const char *key;
    json_t *sub;
    if (keys) /* NULL when n is 0 or something above failed */
        json_object_foreach((json_t *)props, key, sub) if (k < n) keys[k++] = key;
    if (keys && c->g4) qsort(keys, k, sizeof(*keys), key_order); /* in the order Gemma's template writes them */
    for (size_t i = n; ok && i-- > 0;) {
        bool required = false;
        for (size_t r = 0; r < json_array_size(req); r++)
            required |= !strcmp(json_string_value(json_array_get(req, r)), keys[i]);
        int kv = new_rule_id(c), a = new_rule_id(c), f = new_rule_id(c);
        buf body = {0};
        char seg[200];
        snprintf(seg, sizeof(seg), "properties/%.180s", keys[i]);
        json_t *js = json_string(keys[i]);
        buf g4key = {0};
        bool key_ok = c->g4 ? g4_key_text(&g4key, keys[i]) && put_literal(c, &body, g4key.p, g4key.len)
                            : js && put_json_literal(c, &body, js);
        buf_free(&g4key);
        ok = kv >= 0 && a >= 0 && f >= 0 && js && key_ok && cput(c, &body, " \":\" ws ") &&
             gen_child(c, json_object_get(props, keys[i]), seg, &body) && define_rule(c, kv, &body);
        json_decref(js);
        buf_free(&body);
        if (ok && required)
            ok = cprintf(c, &c->rules, "r%d ::= \",\" ws r%d r%d\nr%d ::= r%d r%d\n", a, kv, after, f, kv, after);
        else if (ok)
            ok = cprintf(c, &c->rules, "r%d ::= ( \",\" ws r%d )? r%d\nr%d ::= r%d r%d | r%d\n", a, kv, after, f, kv,
                         after, first);
        after = a, first = f;
    }
    free(keys);
    buf_free(&extra);
    *first0 = first;
    return ok;
}

static bool gen_object(conv *c, const json_t *s, buf *expr) {
    const json_t *props = json_object_get(s, "properties");
    if (props && !json_is_object(props)) return cfail(c, ATTND_ERR_INVALID, "'properties' must be an object");
    int first; /* no properties: jansson reads NULL as an empty object */
    if (!gen_object_rules(c, s, props, &first)) return false;
    c->prims |= P_WS;
    return cprintf(c, expr, "\"{\" ws r%d ws \"}\"", first);
}

static bool gen_array(conv *c, const json_t *s, buf *expr) {
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    long long lo, hi;
    if (json_object_get(s, "contains")) return cfail(c, ATTND_ERR_UNSUPPORTED, "'contains' is not supported");
    if (!get_count(c, s, "minItems", 0, GRAMMAR_MAX_REPEAT, &lo) ||
        !get_count(c, s, "maxItems", -1, GRAMMAR_MAX_REPEAT, &hi))
        return false;
    if (hi >= 0 && hi < lo) return cfail(c, ATTND_ERR_INVALID, "'maxItems' is below 'minItems'");
    c->prims |= P_WS;
    const json_t *tuple = prefix ? prefix : json_is_array(items) ? items : NULL;
    if (tuple) { /* every listed item, nothing after them */
        size_t n = json_array_size(tuple);
        if (!json_is_array(tuple) || (long long)n < lo || (hi >= 0 && (long long)n > hi))
            return cfail(c, ATTND_ERR_UNSUPPORTED, "a tuple ('%s') must list between minItems and maxItems items",
                         prefix ? "prefixItems" : "items");
        bool ok = cput(c, expr, "\"[\" ws");
        for (size_t i = 0; ok && i < n; i++) {
            char seg[48];
            snprintf(seg, sizeof(seg), "%s/%zu", prefix ? "prefixItems" : "items", i);
            ok = cput(c, expr, i ? " \",\" ws " : " ") && gen_child_rule(c, json_array_get(tuple, i), seg, expr);
        }
        return ok && cput(c, expr, " ws \"]\"");
    }
    buf item = {0};
    bool ok;
    if (!items || json_is_true(items)) {
        c->prims |= P_VALUE;
        ok = cput(c, &item, "value");
    } else {
        ok = gen_child_rule(c, items, "items", &item);
    }
    if (ok && hi == 0) ok = cput(c, expr, "\"[\" ws \"]\"");
    else if (ok) {
        char rep[64];
        if (hi < 0) snprintf(rep, sizeof(rep), "{%lld,}", lo > 0 ? lo - 1 : 0);
        else snprintf(rep, sizeof(rep), "{%lld,%lld}", lo > 0 ? lo - 1 : 0, hi - 1);
        ok = cprintf(c, expr, "\"[\" ws %s%s ( \",\" ws %s )%s%s ws \"]\"", lo == 0 ? "( " : "", item.p, item.p, rep,
                     lo == 0 ? " )?" : "");
    }
    buf_free(&item);
    return ok;
}

// ---- dispatch -------------------------------------------------------------------------------

static bool gen_typed(conv *c, const json_t *s, const char *type, buf *expr) {
    if (!strcmp(type, "string")) return gen_string(c, s, expr);
    if (!strcmp(type, "integer")) return gen_integer(c, s, expr);
    if (!strcmp(type, "number")) return gen_number(c, s, expr);
    if (!strcmp(type, "boolean")) return cput(c, expr, "( \"true\" | \"false\" )");
    if (!strcmp(type, "null")) return cput(c, expr, c->g4 ? "\"None\"" : "\"null\"");
    if (!strcmp(type, "object")) return gen_object(c, s, expr);
    if (!strcmp(type, "array")) return gen_array(c, s, expr);
    return cfail(c, ATTND_ERR_INVALID, "'type' '%.32s' is not a JSON Schema type", type);
}

/* The node's type(s), or inferred from its keywords; NULL with *any for "any value". */
static bool gen_types(conv *c, const json_t *s, buf *expr) {
    const json_t *t = json_object_get(s, "type");
    if (json_is_string(t)) return gen_typed(c, s, json_string_value(t), expr);
    if (json_is_array(t) && json_array_size(t) > 0) {
        bool ok = cput(c, expr, "( ");
        for (size_t i = 0; ok && i < json_array_size(t); i++) {
            const json_t *x = json_array_get(t, i);
            if (!json_is_string(x)) return cfail(c, ATTND_ERR_INVALID, "'type' must be a string or array of strings");
            ok = cput(c, expr, i ? " | " : "") && gen_typed(c, s, json_string_value(x), expr);
        }
        return ok && cput(c, expr, " )");
    }
    if (t) return cfail(c, ATTND_ERR_INVALID, "'type' must be a string or a non-empty array of strings");
    if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties")) return gen_object(c, s, expr);
    if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) return gen_array(c, s, expr);
    if (json_object_get(s, "pattern") || json_object_get(s, "format") || json_object_get(s, "minLength") ||
        json_object_get(s, "maxLength"))
        return gen_string(c, s, expr);
    if (json_object_get(s, "minimum") || json_object_get(s, "maximum") || json_object_get(s, "exclusiveMinimum") ||
        json_object_get(s, "exclusiveMaximum") || json_object_get(s, "multipleOf"))
        return gen_number(c, s, expr);
    c->prims |= P_VALUE;
    return cput(c, expr, "value");
}

static bool gen(conv *c, const json_t *s, buf *expr) {
    if (c->st != ATTND_OK) return false;
    if (json_is_true(s)) {
        c->prims |= P_VALUE;
        return cput(c, expr, "value");
    }
    if (json_is_false(s)) return cfail(c, ATTND_ERR_UNSUPPORTED, "the schema 'false' matches nothing");
    if (!json_is_object(s)) return cfail(c, ATTND_ERR_INVALID, "a schema must be an object or a boolean");
    if (++c->depth > MAX_DEPTH) return cfail(c, ATTND_ERR_UNSUPPORTED, "the schema nests deeper than %d", MAX_DEPTH);
    bool ok = check_keywords(c, s);
    const json_t *ref = json_object_get(s, "$ref"), *nullable = json_object_get(s, "nullable");
    bool or_null = json_is_true(nullable);
    if (ok && or_null) ok = cput(c, expr, "( ");
    if (!ok) {
    } else if (ref) {
        ok = json_is_string(ref) ? gen_ref(c, json_string_value(ref), expr)
                                 : cfail(c, ATTND_ERR_INVALID, "'$ref' must be a string");
    } else if (json_object_get(s, "const")) {
        ok = put_json_literal(c, expr, json_object_get(s, "const"));
    } else if (json_object_get(s, "enum")) {
        ok = gen_enum(c, json_object_get(s, "enum"), expr);
    } else if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) {
        const char *name = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
        ok = gen_alternatives(c, json_object_get(s, name), name, expr);
    } else if (json_object_get(s, "allOf")) {
        const json_t *all = json_object_get(s, "allOf");
        ok = json_is_array(all) && json_array_size(all) == 1
                 ? gen_child(c, json_array_get(all, 0), "allOf/0", expr)
                 : cfail(c, ATTND_ERR_UNSUPPORTED, "'allOf' is supported with one schema only");
    } else {
        ok = gen_types(c, s, expr);
    }
    if (ok && or_null) ok = cput(c, expr, c->g4 ? " | \"None\" )" : " | \"null\" )");
    c->depth--;
    return ok;
}

// ---- shared rules ---------------------------------------------------------------------------

static const char ANY_OBJECT[] =
    "root ::= \" \"? object\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? ws \"}\"\n"
    "array ::= \"[\" ws ( value ( \",\" ws value )* )? ws \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= \"-\"? unumber\n"
    "unumber ::= ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "ws ::= ( \" \" | \"\\n\" \" \"{0,16} )?\n";

const char *json_schema_any_object_gbnf(void) { return ANY_OBJECT; }

static bool emit_prims(conv *c) {
    unsigned p = c->prims;
    if (p & P_VALUE) p |= P_OBJECT | P_ARRAY | P_STRING | P_NUMBER;
    if (p & (P_OBJECT | P_ARRAY)) p |= P_VALUE | P_STRING | P_NUMBER | P_WS;
    if (p & P_STRING) p |= P_CHAR;
    if (p & P_NUMBER) p |= P_UNUMBER;
    static const struct { unsigned bit; const char *text; } R[] = {
        {P_VALUE, "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"},
        {P_OBJECT, "object ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? ws \"}\"\n"},
        {P_ARRAY, "array ::= \"[\" ws ( value ( \",\" ws value )* )? ws \"]\"\n"},
        {P_STRING, "string ::= \"\\\"\" char* \"\\\"\"\n"},
        {P_CHAR, "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"},
        {P_NUMBER, "number ::= \"-\"? unumber\n"},
        {P_UNUMBER, "unumber ::= ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"},
        {P_INTEGER, "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"},
        {P_WS, "ws ::= ( \" \" | \"\\n\" \" \"{0,16} )?\n"},
        {P_DATE, "date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )\n"},
        {P_TIME, "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
                 "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"},
        {P_UUID, "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\nhex ::= [0-9a-f]\n"},
        {P_EMAIL, "email ::= [a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} ( \".\" [a-zA-Z0-9-]{1,63} )* \".\" "
                  "[a-zA-Z]{2,24}\n"},
        {P_URI, "uri ::= [a-zA-Z] [a-zA-Z0-9+.-]{0,31} \":\" [^\"\\\\\\x00-\\x20]{1,2000}\n"},
    };
    /* Gemma's syntax: strings between marks holding no mark (nor ending inside one), keys bare or
     * marked, None, no whitespace; a string of bounded length holds no '<' at all */
    static const struct { unsigned bit; const char *text; } G[] = {
        {P_VALUE, "value ::= object | array | string | number | \"true\" | \"false\" | \"None\"\n"},
        {P_OBJECT, "object ::= \"{\" ( key \":\" value ( \",\" key \":\" value )* )? \"}\"\n"},
        {P_ARRAY, "array ::= \"[\" ( value ( \",\" value )* )? \"]\"\n"},
        {P_STRING, "string ::= \"<|\\\"|>\" gtext \"<|\\\"|>\"\ngtext ::= ( [^<] | \"<\" gt1 )*\n"
                   "gt1 ::= [^|<] | \"|\" gt2 | \"<\" gt1\ngt2 ::= [^\"<] | \"\\\"\" gt3 | \"<\" gt1\n"
                   "gt3 ::= [^|<] | \"|\" gt4 | \"<\" gt1\ngt4 ::= [^><] | \"<\" gt1\n"},
        {P_KEY, "key ::= [^:,{}\\[\\]<\\x00-\\x20]{1,64} | string\n"},
        {P_CHAR, "char ::= [^<]\n"},
        {P_WS, "ws ::= \"\"\n"},
        {P_URI, "uri ::= [a-zA-Z] [a-zA-Z0-9+.-]{0,31} \":\" [^<\\x00-\\x20]{1,2000}\n"},
    };
    if (c->g4) {
        if (p & (P_KEY | P_OBJECT)) p |= P_KEY | P_STRING;
        for (size_t i = 0; i < ATTND_ARRAY_LEN(G); i++)
            if ((p & G[i].bit) && !cput(c, &c->rules, G[i].text)) return false;
        p &= ~(unsigned)(P_VALUE | P_OBJECT | P_ARRAY | P_STRING | P_KEY | P_CHAR | P_WS | P_URI);
    }
    for (size_t i = 0; i < ATTND_ARRAY_LEN(R); i++)
        if ((p & R[i].bit) && !cput(c, &c->rules, R[i].text)) return false;
    return true;
}

static attnd_status schema_rules(const json_t *const *schemas, size_t n, bool g4, buf *out, attnd_err *err) {
    conv c = {.err = err, .g4 = g4};
    for (size_t i = 0; i < n && c.st == ATTND_OK; i++) {
        buf expr = {0};
        c.root = schemas[i];
        c.path[0] = '\0';
        if (gen(&c, schemas[i], &expr)) cprintf(&c, &c.rules, "s%zu ::= %s\n", i, expr.p);
        buf_free(&expr);
    }
    if (c.st == ATTND_OK && emit_prims(&c) && !buf_append(out, c.rules.p, c.rules.len))
        c.st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    buf_free(&c.rules);
    free(c.refs);
    return c.st;
}

attnd_status json_schema_rules(const json_t *const *schemas, size_t n, buf *out, attnd_err *err) {
    return schema_rules(schemas, n, false, out, err);
}

attnd_status json_schema_rules_gemma4(const json_t *const *schemas, size_t n, buf *out, attnd_err *err) {
    return schema_rules(schemas, n, true, out, err);
}

attnd_status json_schema_to_gbnf(const json_t *schema, buf *out, attnd_err *err) {
    if (!buf_puts(out, "root ::= \" \"? s0\n")) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    return json_schema_rules(&schema, 1, out, err);
}
