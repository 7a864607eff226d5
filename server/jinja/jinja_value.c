/*
 * jinja_value.c — the engine's values (jv_*, and jinja_* for the constructors the rest of the server
 * calls) and their errors: the Python semantics templates rely on (truthiness,
 * equality, ordering, str() and repr(), json.dumps as HF's tojson calls it).
 */
#define _GNU_SOURCE /* memmem */
#include "jinja_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- errors -----------------------------------------------------------------------------------

attnd_status jinja_vfail(attnd_err *err, int line, const char *fmt, va_list ap) {
    char msg[400];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    return attnd_fail(err, ATTND_ERR_FORMAT, "template line %d: %s", line, msg);
}

jinja_value *jfail(jinja_ctx *c, const char *fmt, ...) {
    if (c->failed) return NULL;
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    c->st = jinja_vfail(&c->err, c->line, fmt, ap);
    va_end(ap);
    return NULL;
}

jinja_value *jlimit(jinja_ctx *c, const char *fmt, ...) {
    if (c->failed) return NULL;
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    jinja_vfail(&c->err, c->line, fmt, ap);
    va_end(ap);
    c->st = ATTND_ERR_NOMEM;
    return NULL;
}

jinja_value *jnomem(jinja_ctx *c) {
    jfail(c, "%s", c->arena.failed && c->arena.used ? "out of memory (the template's memory limit)" : "out of memory");
    c->st = ATTND_ERR_NOMEM;
    return NULL;
}

// ---- searching -------------------------------------------------------------------------------

const char *jv_find(const char *hay, size_t n, const char *x, size_t m) {
    if (m == 0) return hay;
    if (m > n) return NULL;
    if (n > 1024 || m > 16) return memmem(hay, n, x, m); /* linear (two-way), with a set-up cost */
    /* short text, short needle (chat markers): at most 1024 x 16 byte comparisons */
    for (const char *p = hay, *end = hay + n - m + 1; (p = memchr(p, x[0], (size_t)(end - p))); p++)
        if (!memcmp(p + 1, x + 1, m - 1)) return p;
    return NULL;
}

// ---- making values ---------------------------------------------------------------------------

jinja_value *jv_new(jinja_ctx *c, jkind k) {
    jinja_value *v = jarena_alloc(&c->arena, sizeof(*v));
    if (!v) return jnomem(c);
    v->kind = k;
    v->depth = k == JV_LIST || k == JV_TUPLE || k == JV_DICT || k == JV_NS;
    return v;
}

jinja_value *jv_undef(jinja_ctx *c, const char *what) {
    jinja_value *v = jv_new(c, JV_UNDEF);
    if (v) v->undef = what;
    return v;
}

static jinja_value *str_raw(jinja_ctx *c, const char *p, size_t n, const uint8_t *m, int all) {
    jinja_value *v = jv_new(c, JV_STR);
    char *s = v ? jarena_alloc(&c->arena, n + 1) : NULL;
    if (!s) return jnomem(c);
    if (n) memcpy(s, p, n);
    v->s.p = s, v->s.n = n;
    if (m || all) {
        uint8_t *mm = jarena_alloc(&c->arena, n ? n : 1);
        if (!mm) return jnomem(c);
        if (m) memcpy(mm, m, n);
        else memset(mm, 1, n);
        v->s.m = mm;
    }
    return v;
}

jinja_value *jv_str_sb(jinja_ctx *c, jsb *b) {
    if (b->failed) {
        jsb_free(b);
        return jlimit(c, "a string exceeds the template's size limit (%zu bytes)", c->lim.max_output);
    }
    if (!jinja_charge_bytes(c, b->t.len)) return jsb_free(b), NULL;
    jinja_value *v = str_raw(c, b->t.p ? b->t.p : "", b->t.len, b->any_data ? (const uint8_t *)b->m.p : NULL, 0);
    jsb_free(b);
    return v;
}

jinja_value *jv_cstr(jinja_ctx *c, const char *s) { return str_raw(c, s, strlen(s), NULL, 0); }

jinja_value *jv_substr(jinja_ctx *c, const jinja_value *s, size_t off, size_t n) {
    return str_raw(c, s->s.p + off, n, s->s.m ? s->s.m + off : NULL, 0);
}

jinja_value *jv_str_like(jinja_ctx *c, const char *p, size_t n, const jinja_value *src) {
    return str_raw(c, p, n, NULL, src && jv_has_data(src));
}

bool jv_has_data(const jinja_value *s) {
    return s->kind == JV_STR && s->s.m && memchr(s->s.m, 1, s->s.n) != NULL;
}

bool jv_str_eq(const jinja_value *s, const char *lit) {
    size_t n = strlen(lit);
    return s->kind == JV_STR && s->s.n == n && !memcmp(s->s.p, lit, n);
}

/* Deepens container d to hold item v; false (error set) beyond max_depth, so that nothing
 * that walks a value (printing, tojson, comparing) recurses deeper than the bound. */
static bool deepen(jinja_ctx *c, jinja_value *d, const jinja_value *v) {
    bool nests = v->kind == JV_LIST || v->kind == JV_TUPLE || v->kind == JV_DICT;
    if (!nests || v->depth < d->depth) return true;
    /* a namespace is never walked into: it may hold anything (dict() checks what it made) */
    if (v->depth >= c->lim.max_depth && d->kind != JV_NS) return jv_too_deep(c), false;
    d->depth = (uint16_t)(v->depth + 1);
    return true;
}

jinja_value *jv_too_deep(jinja_ctx *c) { return jlimit(c, "a value nested deeper than %d levels", c->lim.max_depth); }

bool jv_push(jinja_ctx *c, jinja_value *l, jinja_value *v) {
    if (!v || !deepen(c, l, v)) return false;
    jinja_value **items = jarena_grow(&c->arena, l->l.v, l->l.n, &l->l.cap, sizeof(*items));
    if (!items) return jnomem(c), false;
    l->l.v = items;
    l->l.v[l->l.n++] = v;
    return true;
}

static jinja_value **dict_slot(const jinja_value *d, const jinja_value *k) {
    for (size_t i = 0; i < d->d.n; i++)
        if (jv_equal(d->d.k[i], k)) return &d->d.v[i];
    return NULL;
}

bool jv_dict_put(jinja_ctx *c, jinja_value *d, jinja_value *k, jinja_value *v) {
    if (!k || !v || !jinja_charge(c, 1 + d->d.n / 16)) return false;
    jinja_value **slot = dict_slot(d, k);
    if (slot) {
        if (!deepen(c, d, v)) return false;
        *slot = v;
        return true;
    }
    return jv_dict_append(c, d, k, v);
}

bool jv_dict_append(jinja_ctx *c, jinja_value *d, jinja_value *k, jinja_value *v) {
    if (!k || !v || !deepen(c, d, k) || !deepen(c, d, v)) return false;
    size_t cap = d->d.cap; /* keys and values grow together */
    jinja_value **nk = jarena_grow(&c->arena, d->d.k, d->d.n, &cap, sizeof(*nk));
    jinja_value **nv = nk ? jarena_grow(&c->arena, d->d.v, d->d.n, &d->d.cap, sizeof(*nv)) : NULL;
    if (!nv) return jnomem(c), false;
    d->d.k = nk, d->d.v = nv;
    d->d.k[d->d.n] = k, d->d.v[d->d.n++] = v;
    return true;
}

jinja_value *jv_dict_get(const jinja_value *d, const jinja_value *k) {
    jinja_value **slot = dict_slot(d, k);
    return slot ? *slot : NULL;
}

jinja_value *jv_dict_gets(const jinja_value *d, const char *k) {
    for (size_t i = 0; i < d->d.n; i++)
        if (jv_str_eq(d->d.k[i], k)) return d->d.v[i];
    return NULL;
}

// ---- the public constructors --------------------------------------------------------------------

jinja_value *jinja_none(jinja_ctx *c) { return jv_new(c, JV_NONE); }
jinja_value *jinja_bool(jinja_ctx *c, bool b) {
    jinja_value *v = jv_new(c, JV_BOOL);
    if (v) v->b = b;
    return v;
}
jinja_value *jinja_int(jinja_ctx *c, int64_t i) {
    jinja_value *v = jv_new(c, JV_INT);
    if (v) v->i = i;
    return v;
}
jinja_value *jinja_float(jinja_ctx *c, double f) {
    jinja_value *v = jv_new(c, JV_FLOAT);
    if (v) v->f = f;
    return v;
}
jinja_value *jinja_str(jinja_ctx *c, const char *s, size_t n, int prov) {
    return str_raw(c, s, n, NULL, prov == JINJA_DATA && n > 0);
}
jinja_value *jinja_list(jinja_ctx *c) { return jv_new(c, JV_LIST); }
jinja_value *jinja_dict(jinja_ctx *c) { return jv_new(c, JV_DICT); }
void jinja_list_push(jinja_ctx *c, jinja_value *list, jinja_value *v) {
    if (list && v && list->kind == JV_LIST) jv_push(c, list, v);
}
bool jinja_dict_set_value(jinja_ctx *c, jinja_value *dict, jinja_value *key, jinja_value *v) {
    return dict && key && v && dict->kind == JV_DICT && jv_dict_put(c, dict, key, v);
}
void jinja_dict_set(jinja_ctx *c, jinja_value *dict, const char *key, jinja_value *v) {
    if (dict && v && key && dict->kind == JV_DICT) jv_dict_put(c, dict, jv_cstr(c, key), v);
}

// ---- Python semantics -----------------------------------------------------------------------------

bool jv_is_seq(const jinja_value *v) { return v->kind == JV_LIST || v->kind == JV_TUPLE; }

bool jv_truthy(const jinja_value *v) {
    switch (v->kind) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v->b;
    case JV_INT: return v->i != 0;
    case JV_FLOAT: return v->f != 0.0;
    case JV_STR: return v->s.n > 0;
    case JV_LIST: case JV_TUPLE: return v->l.n > 0;
    case JV_DICT: return v->d.n > 0;
    default: return true;
    }
}

static bool is_num(const jinja_value *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }
static double num_f(const jinja_value *v) {
    return v->kind == JV_FLOAT ? v->f : v->kind == JV_INT ? (double)v->i : (double)v->b;
}

bool jv_equal(const jinja_value *a, const jinja_value *b) {
    if (is_num(a) && is_num(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT)
            return (a->kind == JV_INT ? a->i : a->b) == (b->kind == JV_INT ? b->i : b->b);
        return num_f(a) == num_f(b);
    }
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a->s.n == b->s.n && !memcmp(a->s.p, b->s.p, a->s.n);
    case JV_LIST: case JV_TUPLE:
        if (a->l.n != b->l.n) return false;
        for (size_t i = 0; i < a->l.n; i++)
            if (!jv_equal(a->l.v[i], b->l.v[i])) return false;
        return true;
    case JV_DICT:
        if (a->d.n != b->d.n) return false;
        for (size_t i = 0; i < a->d.n; i++) {
            const jinja_value *o = jv_dict_get(b, a->d.k[i]);
            if (!o || !jv_equal(a->d.v[i], o)) return false;
        }
        return true;
    default: return a == b;
    }
}

/* The work of comparing with v: a step, plus its items or 64-byte runs. */
static uint64_t weight(const jinja_value *v) {
    switch (v->kind) {
    case JV_STR: return 1 + v->s.n / JINJA_BYTES_PER_STEP;
    case JV_LIST: case JV_TUPLE: return 1 + v->l.n;
    case JV_DICT: return 1 + v->d.n;
    default: return 1;
    }
}

bool jv_equal_charged(jinja_ctx *c, const jinja_value *a, const jinja_value *b, bool *eq) {
    if (!jinja_charge(c, weight(a))) return false;
    *eq = jv_equal(a, b);
    return true;
}

int jv_compare(jinja_ctx *c, const jinja_value *a, const jinja_value *b, bool *ok) {
    *ok = true;
    if (is_num(a) && is_num(b)) {
        if (a->kind == JV_INT && b->kind == JV_INT) return (a->i > b->i) - (a->i < b->i);
        double x = num_f(a), y = num_f(b);
        return (x > y) - (x < y);
    }
    if (a->kind == JV_STR && b->kind == JV_STR) {
        size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
        int r = memcmp(a->s.p, b->s.p, n);
        return r ? (r > 0 ? 1 : -1) : (a->s.n > b->s.n) - (a->s.n < b->s.n);
    }
    if (a->kind == b->kind && jv_is_seq(a)) {
        for (size_t i = 0; i < a->l.n && i < b->l.n; i++) {
            if (jv_equal(a->l.v[i], b->l.v[i])) continue;
            return jv_compare(c, a->l.v[i], b->l.v[i], ok);
        }
        return (a->l.n > b->l.n) - (a->l.n < b->l.n);
    }
    *ok = false;
    jfail(c, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
    return 0;
}

const char *jv_type_name(const jinja_value *v) {
    static const char *names[] = {"Undefined", "NoneType", "bool", "int", "float", "str",
                                  "list", "tuple", "dict", "Namespace", "function", "LoopContext"};
    return names[v->kind];
}

// ---- str(), repr() ---------------------------------------------------------------------------------

void jv_float_repr(char *out, size_t n, double f) {
    if (isnan(f)) { snprintf(out, n, "nan"); return; }
    if (isinf(f)) { snprintf(out, n, f < 0 ? "-inf" : "inf"); return; }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e = [-]d[.ddd]e[+-]XX: the digits and the decimal exponent */
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < sizeof(digits) - 1) digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    int exp = atoi(p + 1), decpt = exp + 1;
    char *o = out;
    size_t left = n;
#define EMIT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) EMIT("-");
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            EMIT("0.");
            for (int i = 0; i < -decpt; i++) EMIT("0");
            EMIT("%s", digits);
        } else {
            for (int i = 0; i < decpt; i++) EMIT("%c", i < (int)nd ? digits[i] : '0');
            EMIT(".");
            if ((int)nd > decpt) EMIT("%s", digits + decpt);
            else EMIT("0");
        }
    } else {
        EMIT("%c", digits[0]);
        if (nd > 1) EMIT(".%s", digits + 1);
        EMIT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
#undef EMIT
}

static void repr_string(jsb *b, const jinja_value *s) {
    bool sq = memchr(s->s.p, '\'', s->s.n) != NULL, dq = memchr(s->s.p, '"', s->s.n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jsb_put(b, &q, 1, JINJA_LITERAL);
    for (size_t i = 0; i < s->s.n; i++) {
        unsigned char ch = (unsigned char)s->s.p[i];
        int prov = s->s.m ? s->s.m[i] : 0;
        char esc[8];
        if (ch == '\\' || ch == (unsigned char)q) snprintf(esc, sizeof(esc), "\\%c", ch);
        else if (ch == '\n') snprintf(esc, sizeof(esc), "\\n");
        else if (ch == '\r') snprintf(esc, sizeof(esc), "\\r");
        else if (ch == '\t') snprintf(esc, sizeof(esc), "\\t");
        else if (ch < 0x20 || ch == 0x7f) snprintf(esc, sizeof(esc), "\\x%02x", ch);
        else {
            jsb_put(b, (const char *)&ch, 1, prov);
            continue;
        }
        jsb_put(b, esc, strlen(esc), prov);
    }
    jsb_put(b, &q, 1, JINJA_LITERAL);
}

void jv_repr(jsb *b, const jinja_value *v) {
    switch (v->kind) {
    case JV_STR: repr_string(b, v); return;
    case JV_LIST: case JV_TUPLE:
        jsb_puts(b, v->kind == JV_LIST ? "[" : "(");
        for (size_t i = 0; i < v->l.n && !b->failed; i++) {
            if (i) jsb_puts(b, ", ");
            jv_repr(b, v->l.v[i]);
        }
        jsb_puts(b, v->kind == JV_LIST ? "]" : v->l.n == 1 ? ",)" : ")");
        return;
    case JV_DICT:
        jsb_puts(b, "{");
        for (size_t i = 0; i < v->d.n && !b->failed; i++) {
            if (i) jsb_puts(b, ", ");
            jv_repr(b, v->d.k[i]);
            jsb_puts(b, ": ");
            jv_repr(b, v->d.v[i]);
        }
        jsb_puts(b, "}");
        return;
    default: jv_to_str(b, v);
    }
}

void jv_to_str(jsb *b, const jinja_value *v) {
    char num[64];
    switch (v->kind) {
    case JV_UNDEF: return;
    case JV_NONE: jsb_puts(b, "None"); return;
    case JV_BOOL: jsb_puts(b, v->b ? "True" : "False"); return;
    case JV_INT: snprintf(num, sizeof(num), "%lld", (long long)v->i); jsb_puts(b, num); return;
    case JV_FLOAT: jv_float_repr(num, sizeof(num), v->f); jsb_puts(b, num); return;
    case JV_STR: jsb_put_str(b, v); return;
    case JV_LIST: case JV_TUPLE: case JV_DICT: jv_repr(b, v); return;
    case JV_NS: jsb_puts(b, "<Namespace>"); return;
    case JV_FUNC: jsb_puts(b, "<function>"); return;
    case JV_LOOP: jsb_puts(b, "<LoopContext>"); return;
    }
}

jinja_value *jv_str_of(jinja_ctx *c, jinja_value *v) {
    if (v->kind == JV_STR) return v;
    jsb b = {.limit = c->lim.max_output};
    jv_to_str(&b, v);
    return jv_str_sb(c, &b);
}

// ---- tojson -----------------------------------------------------------------------------------------

static void json_string(jsb *b, const char *p, size_t n, const uint8_t *m) {
    jsb_put(b, "\"", 1, JINJA_LITERAL);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        int prov = m ? m[i] : 0;
        char esc[8];
        if (ch == '"' || ch == '\\') snprintf(esc, sizeof(esc), "\\%c", ch);
        else if (ch == '\n') snprintf(esc, sizeof(esc), "\\n");
        else if (ch == '\r') snprintf(esc, sizeof(esc), "\\r");
        else if (ch == '\t') snprintf(esc, sizeof(esc), "\\t");
        else if (ch == '\b') snprintf(esc, sizeof(esc), "\\b");
        else if (ch == '\f') snprintf(esc, sizeof(esc), "\\f");
        else if (ch < 0x20) snprintf(esc, sizeof(esc), "\\u%04x", ch);
        else {
            jsb_put(b, (const char *)&ch, 1, prov);
            continue;
        }
        jsb_put(b, esc, strlen(esc), prov);
    }
    jsb_put(b, "\"", 1, JINJA_LITERAL);
}

static void json_newline(jsb *b, int indent, int level) {
    static const char SPACES[] = "                                                                ";
    if (indent < 0) return;
    jsb_puts(b, "\n");
    for (size_t left = (size_t)indent * (size_t)level; left && !b->failed;) {
        size_t k = left < sizeof(SPACES) - 1 ? left : sizeof(SPACES) - 1;
        jsb_put(b, SPACES, k, JINJA_LITERAL);
        left -= k;
    }
}

static bool json_key(jinja_ctx *c, jsb *b, const jinja_value *k) {
    char num[64];
    switch (k->kind) {
    case JV_STR: json_string(b, k->s.p, k->s.n, k->s.m); return true;
    case JV_INT: snprintf(num, sizeof(num), "\"%lld\"", (long long)k->i); jsb_puts(b, num); return true;
    case JV_BOOL: jsb_puts(b, k->b ? "\"true\"" : "\"false\""); return true;
    case JV_NONE: jsb_puts(b, "\"null\""); return true;
    case JV_FLOAT: jv_float_repr(num + 1, sizeof(num) - 2, k->f); num[0] = '"'; strcat(num, "\""); jsb_puts(b, num); return true;
    default: jfail(c, "keys must be str, int, float, bool or None, not %s", jv_type_name(k)); return false;
    }
}

bool jv_tojson(jinja_ctx *c, jsb *b, const jinja_value *v, int indent, int level) {
    char num[64];
    if (b->failed) return true; /* over the size limit: jv_str_sb says so */
    if (!jinja_step(c)) return false; /* a step per value: a long list of small items costs its length */
    if (level > c->lim.max_depth) return jlimit(c, "tojson: a value nested deeper than %d levels", c->lim.max_depth), false;
    switch (v->kind) {
    case JV_NONE: jsb_puts(b, "null"); return true;
    case JV_BOOL: jsb_puts(b, v->b ? "true" : "false"); return true;
    case JV_INT: snprintf(num, sizeof(num), "%lld", (long long)v->i); jsb_puts(b, num); return true;
    case JV_FLOAT:
        if (isnan(v->f)) jsb_puts(b, "NaN");
        else if (isinf(v->f)) jsb_puts(b, v->f < 0 ? "-Infinity" : "Infinity");
        else jv_float_repr(num, sizeof(num), v->f), jsb_puts(b, num);
        return true;
    case JV_STR: json_string(b, v->s.p, v->s.n, v->s.m); return true;
    case JV_LIST: case JV_TUPLE:
        if (!v->l.n) return jsb_puts(b, "[]"), true;
        jsb_puts(b, "[");
        for (size_t i = 0; i < v->l.n; i++) {
            if (i) jsb_puts(b, indent < 0 ? ", " : ",");
            json_newline(b, indent, level + 1);
            if (!jv_tojson(c, b, v->l.v[i], indent, level + 1)) return false;
        }
        json_newline(b, indent, level);
        jsb_puts(b, "]");
        return true;
    case JV_DICT:
        if (!v->d.n) return jsb_puts(b, "{}"), true;
        jsb_puts(b, "{");
        for (size_t i = 0; i < v->d.n; i++) {
            if (i) jsb_puts(b, indent < 0 ? ", " : ",");
            json_newline(b, indent, level + 1);
            if (!json_key(c, b, v->d.k[i])) return false;
            jsb_puts(b, ": ");
            if (!jv_tojson(c, b, v->d.v[i], indent, level + 1)) return false;
        }
        json_newline(b, indent, level);
        jsb_puts(b, "}");
        return true;
    default: jfail(c, "Object of type %s is not JSON serializable", jv_type_name(v)); return false;
    }
}

// ---- iteration and UTF-8 ------------------------------------------------------------------------------

static size_t utf8_step(const char *p, size_t n, size_t i) {
    unsigned char ch = (unsigned char)p[i];
    size_t k = ch < 0x80 ? 1 : ch >= 0xf0 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc0 ? 2 : 1;
    if (i + k > n) k = n - i;
    for (size_t j = 1; j < k; j++)
        if (((unsigned char)p[i + j] & 0xc0) != 0x80) return j;
    return k;
}

size_t jv_utf8_len(const char *p, size_t n) {
    size_t cps = 0;
    for (size_t i = 0; i < n; i += utf8_step(p, n, i)) cps++;
    return cps;
}

size_t jv_utf8_offset(const char *p, size_t n, size_t cp) {
    size_t i = 0;
    for (; i < n && cp; cp--) i += utf8_step(p, n, i);
    return i;
}

jinja_value *jv_iter_list(jinja_ctx *c, jinja_value *v) {
    jinja_value *l;
    switch (v->kind) {
    case JV_LIST: case JV_TUPLE: return v;
    case JV_UNDEF: return jv_new(c, JV_LIST);
    case JV_DICT: case JV_NS:
        if (!jinja_charge(c, v->d.n) || !(l = jv_new(c, JV_LIST))) return NULL;
        for (size_t i = 0; i < v->d.n; i++)
            if (!jv_push(c, l, v->d.k[i])) return NULL;
        return l;
    case JV_STR: /* a value per character: a step each */
        if (!jinja_charge(c, v->s.n) || !(l = jv_new(c, JV_LIST))) return NULL;
        for (size_t i = 0, k; i < v->s.n; i += k) {
            k = utf8_step(v->s.p, v->s.n, i);
            if (!jv_push(c, l, jv_substr(c, v, i, k))) return NULL;
        }
        return l;
    default: return jfail(c, "'%s' object is not iterable", jv_type_name(v));
    }
}
