/*
 * toolcall_g4.c — Gemma 4's tool-call syntax read as JSON (toolcall_g4.h).
 *
 * A recursive reader over the block with a depth limit; each value is written as JSON as it is
 * read (strings through jansson, so they come out escaped and checked as UTF-8), numbers as
 * written once they read as JSON numbers. Strict: anything the template would not write is no
 * call, and the reply parser then gives the block back as text.
 */
#include "toolcall_g4.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define G4_STR "<|\"|>"
#define G4_STR_LEN 5
#define G4_MAX_DEPTH 64

typedef struct g4_reader {
    const char *s;
    size_t n, i;
    buf *out;
    int depth;
} g4_reader;

static bool g4_value(g4_reader *r);

static bool at_mark(const g4_reader *r) { return r->n - r->i >= G4_STR_LEN && !memcmp(r->s + r->i, G4_STR, G4_STR_LEN); }

/* s[0..n) as a JSON string (false when it is not UTF-8). */
static bool put_json_string(buf *out, const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    char *d = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    bool ok = d && buf_puts(out, d);
    free(d);
    json_decref(j);
    return ok;
}

/* <|"|>text<|"|>: the text as it is. */
static bool g4_string(g4_reader *r) {
    r->i += G4_STR_LEN;
    const char *end = NULL;
    for (size_t k = r->i; !end && k + G4_STR_LEN <= r->n; k++)
        if (!memcmp(r->s + k, G4_STR, G4_STR_LEN)) end = r->s + k;
    if (!end) return false;
    size_t len = (size_t)(end - (r->s + r->i));
    if (!put_json_string(r->out, r->s + r->i, len)) return false;
    r->i += len + G4_STR_LEN;
    return true;
}

/* true, false, None (null) or a number: up to the next ',', '}' or ']'. */
static bool g4_scalar(g4_reader *r) {
    size_t k = r->i;
    while (k < r->n && !strchr(",}]", r->s[k])) k++;
    const char *p = r->s + r->i;
    size_t len = k - r->i;
    const char *as = NULL;
    if (len == 4 && !memcmp(p, "true", 4)) as = "true";
    else if (len == 5 && !memcmp(p, "false", 5)) as = "false";
    else if (len == 4 && !memcmp(p, "None", 4)) as = "null";
    if (!as) { /* a number: exactly one JSON number */
        json_t *v = len ? json_loadb(p, len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, NULL) : NULL;
        bool num = json_is_number(v);
        json_decref(v);
        if (!num) return false;
    }
    bool ok = as ? buf_puts(r->out, as) : buf_append(r->out, p, len);
    r->i = k;
    return ok;
}

/* A key: bare (to the ':') or between marks; then the ':'. */
static bool g4_key(g4_reader *r) {
    if (at_mark(r)) {
        if (!g4_string(r)) return false;
    } else {
        size_t k = r->i;
        while (k < r->n && r->s[k] != ':' && !strchr(",{}[]", r->s[k])) k++;
        if (k == r->i || !put_json_string(r->out, r->s + r->i, k - r->i)) return false;
        r->i = k;
    }
    if (r->i >= r->n || r->s[r->i] != ':') return false;
    r->i++;
    return buf_puts(r->out, ":");
}

/* {key:value,...} or [value,...], at its opening bracket. */
static bool g4_container(g4_reader *r, bool object) {
    char close = object ? '}' : ']';
    if (++r->depth > G4_MAX_DEPTH || !buf_puts(r->out, object ? "{" : "[")) return false;
    r->i++;
    for (bool first = true; r->i < r->n && r->s[r->i] != close; first = false) {
        if (!first && (r->s[r->i] != ',' || (r->i++, !buf_puts(r->out, ",")))) return false;
        if ((object && !g4_key(r)) || !g4_value(r)) return false;
    }
    if (r->i >= r->n) return false;
    r->i++;
    r->depth--;
    return buf_puts(r->out, object ? "}" : "]");
}

static bool g4_value(g4_reader *r) {
    if (r->i >= r->n) return false;
    if (at_mark(r)) return g4_string(r);
    if (r->s[r->i] == '{' || r->s[r->i] == '[') return g4_container(r, r->s[r->i] == '{');
    return g4_scalar(r);
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool toolcall_g4_read(const char *s, size_t n, char *name, size_t cap, buf *args) {
    while (n && blank(*s)) s++, n--;
    while (n && blank(s[n - 1])) n--;
    if (n < 5 || memcmp(s, "call:", 5)) return false;
    size_t k = 5;
    while (k < n && s[k] != '{') k++;
    size_t len = k - 5;
    if (k == n || len == 0 || len >= cap || memchr(s + 5, '<', len) || memchr(s + 5, ' ', len)) return false;
    memcpy(name, s + 5, len);
    name[len] = '\0';
    g4_reader r = {.s = s, .n = n, .i = k, .out = args};
    return g4_container(&r, true) && r.i == n;
}
