/*
 * jinja_builtins.c — the filters, tests, methods and global functions chat templates use, with
 * jinja2's and Python's behaviour, and the sandbox's refusals (no method mutates a value the
 * caller passed in). Strings that come out of a string keep the provenance of the bytes they
 * were cut from; case mapping marks each output character with its input character's mark.
 * Each one charges its work to the render's budget before doing it: a step per item it visits
 * and per 64 bytes it scans (jinja_charge), the strings it builds through jv_str_sb.
 */
#include "jinja_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define ARGS jinja_ctx *c, jinja_value *fn, jinja_value **a, size_t n, const char **kwn, jinja_value **kwv, size_t n_kw

jinja_value *jinja_kwarg(const char **kwn, jinja_value **kwv, size_t n_kw, const char *name) {
    for (size_t i = 0; i < n_kw; i++)
        if (!strcmp(kwn[i], name)) return kwv[i];
    return NULL;
}

/* Argument i, or keyword `name`, or NULL. */
static jinja_value *arg(jinja_value **a, size_t n, const char **kwn, jinja_value **kwv, size_t n_kw, size_t i,
                        const char *name) {
    if (i < n) return a[i];
    return name ? jinja_kwarg(kwn, kwv, n_kw, name) : NULL;
}
#define ARG(i, name) arg(a, n, kwn, kwv, n_kw, (i), (name))

static jinja_value *need_str(jinja_ctx *c, jinja_value *v, const char *what) {
    if (v && v->kind == JV_STR) return v;
    return jfail(c, "%s expects a string, not %s", what, v ? jv_type_name(v) : "nothing");
}

// ---- string helpers ---------------------------------------------------------------------------------

static bool is_space(unsigned char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f); }

static bool in_chars(const jinja_value *chars, unsigned char ch) {
    return chars ? memchr(chars->s.p, ch, chars->s.n) != NULL : is_space(ch);
}

/* strip / lstrip / rstrip: which = 1 left, 2 right, 3 both. chars NULL = whitespace. */
static jinja_value *strip(jinja_ctx *c, jinja_value *s, const jinja_value *chars, int which) {
    if (!jinja_charge_scan(c, s->s.n * (chars ? 1 + chars->s.n / 8 : 1))) return NULL;
    size_t a = 0, b = s->s.n;
    if (which & 1) while (a < b && in_chars(chars, (unsigned char)s->s.p[a])) a++;
    if (which & 2) while (b > a && in_chars(chars, (unsigned char)s->s.p[b - 1])) b--;
    return a == 0 && b == s->s.n ? s : jv_substr(c, s, a, b - a);
}

typedef enum { CASE_UPPER, CASE_LOWER, CASE_TITLE_WORDS, CASE_CAPITALIZE, CASE_TITLE_FILTER } casing;

static bool word_break_filter(int32_t cp) { return cp < 128 && (isspace(cp) || strchr("-({[<", (int)cp)); }

/* Case mapping by code point (utf8proc's simple mappings); each output character carries its
 * input character's provenance. */
static jinja_value *recase(jinja_ctx *c, jinja_value *s, casing how) {
    if (!jinja_charge(c, s->s.n)) return NULL; /* a step per byte: utf8proc per code point */
    jsb b = {.limit = c->lim.max_output};
    bool start = true;
    for (size_t i = 0; i < s->s.n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s->s.p + i, (utf8proc_ssize_t)(s->s.n - i), &cp);
        if (k <= 0) { /* an invalid byte: copied */
            jsb_put_sub(&b, s, i, 1);
            i++;
            continue;
        }
        int32_t out = cp;
        bool cased = utf8proc_category(cp) == UTF8PROC_CATEGORY_LU || utf8proc_category(cp) == UTF8PROC_CATEGORY_LL ||
                     utf8proc_category(cp) == UTF8PROC_CATEGORY_LT;
        switch (how) {
        case CASE_UPPER: out = utf8proc_toupper(cp); break;
        case CASE_LOWER: out = utf8proc_tolower(cp); break;
        case CASE_CAPITALIZE: out = i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp); break;
        case CASE_TITLE_WORDS: out = start ? utf8proc_totitle(cp) : utf8proc_tolower(cp); start = !cased; break;
        case CASE_TITLE_FILTER:
            out = start ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
            start = word_break_filter(cp);
            break;
        }
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t w = utf8proc_encode_char(out, enc);
        jsb_put(&b, (const char *)enc, (size_t)w, s->s.m && s->s.m[i]);
        i += (size_t)k;
    }
    return jv_str_sb(c, &b);
}

/* The first occurrence of x in s at or after byte from, or s->s.n. */
static size_t find_from(const jinja_value *s, const jinja_value *x, size_t from) {
    const char *hit = from <= s->s.n ? jv_find(s->s.p + from, s->s.n - from, x->s.p, x->s.n) : NULL;
    return hit ? (size_t)(hit - s->s.p) : s->s.n;
}

static jinja_value *replace(jinja_ctx *c, jinja_value *s, jinja_value *old, jinja_value *new, int64_t count) {
    if (!jinja_charge_scan(c, s->s.n + old->s.n)) return NULL;
    if (old->s.n && find_from(s, old, 0) == s->s.n) return s; /* nothing to replace: s itself */
    jsb b = {.limit = c->lim.max_output};
    int64_t done = 0;
    if (old->s.n == 0) { /* Python inserts `new` between every character */
        jinja_value *chars = jv_iter_list(c, s);
        if (!chars) return NULL;
        for (size_t k = 0; k <= chars->l.n && !b.failed; k++) {
            if (count < 0 || done < count) jsb_put_str(&b, new), done++;
            if (k < chars->l.n) jsb_put_str(&b, chars->l.v[k]);
        }
        return jv_str_sb(c, &b);
    }
    size_t i = 0;
    while (i < s->s.n && !b.failed) {
        size_t at = count >= 0 && done >= count ? s->s.n : find_from(s, old, i);
        jsb_put_sub(&b, s, i, at - i);
        if (at == s->s.n) break;
        jsb_put_str(&b, new);
        i = at + old->s.n, done++;
    }
    return jv_str_sb(c, &b);
}

static jinja_value *split(jinja_ctx *c, jinja_value *s, jinja_value *sep, int64_t maxsplit) {
    jinja_value *out = jinja_charge_scan(c, s->s.n + (sep && sep->kind == JV_STR ? sep->s.n : 0)) ? jv_new(c, JV_LIST) : NULL;
    if (!out) return NULL;
    size_t i = 0, n = s->s.n;
    if (!sep || sep->kind == JV_NONE) {
        for (;;) {
            while (i < n && is_space((unsigned char)s->s.p[i])) i++;
            if (i >= n) return out;
            size_t j = i;
            if (maxsplit >= 0 && (int64_t)out->l.n >= maxsplit) j = n;
            while (j < n && !is_space((unsigned char)s->s.p[j])) j++;
            if (maxsplit >= 0 && (int64_t)out->l.n >= maxsplit) {
                size_t e = n;
                while (e > i && is_space((unsigned char)s->s.p[e - 1])) e--;
                j = e;
            }
            if (!jv_push(c, out, jv_substr(c, s, i, j - i))) return NULL;
            i = j;
        }
    }
    if (sep->kind != JV_STR) return jfail(c, "split: the separator must be a string");
    if (!sep->s.n) return jfail(c, "empty separator");
    size_t start = 0;
    while (maxsplit < 0 || (int64_t)out->l.n < maxsplit) {
        size_t at = find_from(s, sep, start);
        if (at == n) break;
        if (!jinja_step(c) || !jv_push(c, out, jv_substr(c, s, start, at - start))) return NULL;
        start = at + sep->s.n;
    }
    return jv_push(c, out, jv_substr(c, s, start, n - start)) ? out : NULL;
}

static bool affix(const jinja_value *s, const jinja_value *x, bool prefix) {
    if (x->s.n > s->s.n) return false;
    return !memcmp(s->s.p + (prefix ? 0 : s->s.n - x->s.n), x->s.p, x->s.n);
}

// ---- methods -------------------------------------------------------------------------------------------

static jinja_value *m_str(ARGS);
static jinja_value *m_dict(ARGS);
static jinja_value *m_unsafe(ARGS);
static jinja_value *m_cycle(ARGS);

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith",
                                          "upper", "lower", "replace", "title", "capitalize", "find",
                                          "count", "join", "splitlines", "removeprefix", "removesuffix",
                                          "isdigit", "isspace", "isalpha", "isalnum", "islower", "isupper", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
static const char *const UNSAFE[] = {"append", "pop", "extend", "insert", "remove", "clear", "sort", "reverse",
                                     "update", "setdefault", "popitem", "copy", NULL};

static int name_in(const char *const *list, const char *name) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], name)) return i;
    return -1;
}

jinja_value *jinja_method(jinja_ctx *c, jinja_value *v, const char *name) {
    jbuiltin fn = NULL;
    if (v->kind == JV_STR && name_in(STR_METHODS, name) >= 0) fn = m_str;
    else if (v->kind == JV_DICT && name_in(DICT_METHODS, name) >= 0) fn = m_dict;
    else if ((v->kind == JV_DICT || v->kind == JV_LIST) && name_in(UNSAFE, name) >= 0) fn = m_unsafe;
    else if (v->kind == JV_LOOP && !strcmp(name, "cycle")) fn = m_cycle;
    if (!fn) return NULL;
    jinja_value *m = jv_new(c, JV_FUNC);
    if (m) m->fn.fn = fn, m->fn.self = v, m->fn.name = name;
    return m;
}

static jinja_value *m_unsafe(ARGS) {
    (void)a, (void)n, (void)kwn, (void)kwv, (void)n_kw;
    return jfail(c, "access to attribute '%s' of '%s' object is unsafe", fn->fn.name, jv_type_name(fn->fn.self));
}

static jinja_value *m_cycle(ARGS) {
    (void)kwn, (void)kwv, (void)n_kw;
    if (!n) return jfail(c, "no items for cycling given");
    return a[fn->fn.self->loop.index0 % (int64_t)n];
}

static jinja_value *str_predicate(jinja_ctx *c, jinja_value *s, const char *name) {
    if (!jinja_charge(c, 1 + s->s.n)) return NULL;
    bool all = s->s.n > 0, any_cased = false, lower = true, upper = true;
    for (size_t i = 0; i < s->s.n; i++) {
        unsigned char ch = (unsigned char)s->s.p[i];
        if (!strcmp(name, "isdigit")) all &= isdigit(ch) != 0;
        else if (!strcmp(name, "isspace")) all &= is_space(ch);
        else if (!strcmp(name, "isalpha")) all &= isalpha(ch) != 0;
        else if (!strcmp(name, "isalnum")) all &= isalnum(ch) != 0;
        if (isalpha(ch)) any_cased = true, lower &= islower(ch) != 0, upper &= isupper(ch) != 0;
    }
    if (!strcmp(name, "islower")) return jinja_bool(c, any_cased && lower);
    if (!strcmp(name, "isupper")) return jinja_bool(c, any_cased && upper);
    return jinja_bool(c, all);
}

static jinja_value *str_join(jinja_ctx *c, jinja_value *sep, jinja_value *items) {
    jinja_value *l = jv_iter_list(c, items);
    if (!l || !jinja_charge(c, l->l.n)) return NULL;
    jsb b = {.limit = c->lim.max_output};
    for (size_t i = 0; i < l->l.n && !b.failed; i++) {
        if (i) jsb_put_str(&b, sep);
        if (l->l.v[i]->kind != JV_STR) return jsb_free(&b), jfail(c, "sequence item %zu: expected str instance", i);
        jsb_put_str(&b, l->l.v[i]);
    }
    return jv_str_sb(c, &b);
}

static jinja_value *affix_test(jinja_ctx *c, jinja_value *s, jinja_value *x, bool prefix) {
    if (x && !jinja_charge(c, jv_is_seq(x) ? 1 + x->l.n : 1 + (x->kind == JV_STR ? x->s.n / JINJA_SCAN_BYTES_PER_STEP : 0)))
        return NULL;
    if (x && x->kind == JV_STR) return jinja_bool(c, affix(s, x, prefix));
    if (x && jv_is_seq(x)) {
        for (size_t i = 0; i < x->l.n; i++)
            if (x->l.v[i]->kind == JV_STR && affix(s, x->l.v[i], prefix)) return jinja_bool(c, true);
        return jinja_bool(c, false);
    }
    return jfail(c, "%s: the argument must be a string or a tuple of strings", prefix ? "startswith" : "endswith");
}

static jinja_value *count_or_find(jinja_ctx *c, jinja_value *s, jinja_value *x, bool find) {
    if (!need_str(c, x, find ? "find" : "count") || !jinja_charge_scan(c, s->s.n + x->s.n)) return NULL;
    if (!x->s.n) return jinja_int(c, find ? 0 : (int64_t)jv_utf8_len(s->s.p, s->s.n) + 1);
    int64_t hits = 0;
    for (size_t at = find_from(s, x, 0); at < s->s.n; at = find_from(s, x, at + x->s.n)) {
        if (find) return jinja_int(c, (int64_t)jv_utf8_len(s->s.p, at));
        hits++;
    }
    return jinja_int(c, find ? -1 : hits);
}

static jinja_value *splitlines(jinja_ctx *c, jinja_value *s) {
    jinja_value *out = jinja_charge(c, 1 + s->s.n) ? jv_new(c, JV_LIST) : NULL;
    size_t start = 0;
    for (size_t i = 0; out && i < s->s.n; i++) {
        if (s->s.p[i] != '\n' && s->s.p[i] != '\r') continue;
        if (!jv_push(c, out, jv_substr(c, s, start, i - start))) return NULL;
        if (s->s.p[i] == '\r' && i + 1 < s->s.n && s->s.p[i + 1] == '\n') i++;
        start = i + 1;
    }
    if (out && start < s->s.n && !jv_push(c, out, jv_substr(c, s, start, s->s.n - start))) return NULL;
    return out;
}

static int64_t int_or(jinja_value *v, int64_t def) {
    return v && v->kind == JV_INT ? v->i : v && v->kind == JV_BOOL ? v->b : def;
}

static jinja_value *m_str(ARGS) {
    jinja_value *s = fn->fn.self, *x = ARG(0, NULL);
    const char *m = fn->fn.name;
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        if (x && x->kind != JV_NONE && !need_str(c, x, m)) return NULL;
        return strip(c, s, x && x->kind == JV_STR ? x : NULL, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
    }
    if (!strcmp(m, "split")) return split(c, s, ARG(0, "sep"), int_or(ARG(1, "maxsplit"), -1));
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) return affix_test(c, s, x, m[0] == 's');
    if (!strcmp(m, "upper")) return recase(c, s, CASE_UPPER);
    if (!strcmp(m, "lower")) return recase(c, s, CASE_LOWER);
    if (!strcmp(m, "title")) return recase(c, s, CASE_TITLE_WORDS);
    if (!strcmp(m, "capitalize")) return recase(c, s, CASE_CAPITALIZE);
    if (!strcmp(m, "replace")) {
        jinja_value *y = ARG(1, NULL);
        if (!need_str(c, x, "replace") || !need_str(c, y, "replace")) return NULL;
        return replace(c, s, x, y, int_or(ARG(2, "count"), -1));
    }
    if (!strcmp(m, "find") || !strcmp(m, "count")) return count_or_find(c, s, x, m[0] == 'f');
    if (!strcmp(m, "join")) return x ? str_join(c, s, x) : jfail(c, "join() takes exactly one argument");
    if (!strcmp(m, "splitlines")) return splitlines(c, s);
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        if (!need_str(c, x, m)) return NULL;
        bool pre = m[6] == 'p';
        if (!affix(s, x, pre)) return s;
        return jv_substr(c, s, pre ? x->s.n : 0, s->s.n - x->s.n);
    }
    return str_predicate(c, s, m);
}

static jinja_value *dict_items(jinja_ctx *c, jinja_value *d) {
    jinja_value *out = jinja_charge(c, d->d.n) ? jv_new(c, JV_LIST) : NULL;
    for (size_t i = 0; out && i < d->d.n; i++) {
        jinja_value *t = jv_new(c, JV_TUPLE);
        if (!t || !jv_push(c, t, d->d.k[i]) || !jv_push(c, t, d->d.v[i]) || !jv_push(c, out, t)) return NULL;
    }
    return out;
}

static jinja_value *m_dict(ARGS) {
    jinja_value *d = fn->fn.self;
    const char *m = fn->fn.name;
    if (!strcmp(m, "items")) return dict_items(c, d);
    if (!strcmp(m, "get")) {
        jinja_value *k = ARG(0, NULL), *def = ARG(1, NULL);
        if (!k) return jfail(c, "get expected at least 1 argument");
        if (!jinja_charge(c, 1 + d->d.n / 16)) return NULL;
        jinja_value *v = jv_dict_get(d, k);
        return v ? v : def ? def : jinja_none(c);
    }
    jinja_value *out = jinja_charge(c, d->d.n) ? jv_new(c, JV_LIST) : NULL;
    for (size_t i = 0; out && i < d->d.n; i++)
        if (!jv_push(c, out, m[0] == 'k' ? d->d.k[i] : d->d.v[i])) return NULL;
    return out;
}

// ---- tests ---------------------------------------------------------------------------------------------

static bool is_number(const jinja_value *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }

jinja_value *jinja_call_test(jinja_ctx *c, const char *name, jinja_value *v, jinja_value **a, size_t n) {
    jinja_value *x = n ? a[0] : NULL;
    bool r;
    jkind k = v->kind;
    if (!strcmp(name, "defined")) r = k != JV_UNDEF;
    else if (!strcmp(name, "undefined")) r = k == JV_UNDEF;
    else if (!strcmp(name, "none")) r = k == JV_NONE;
    else if (!strcmp(name, "string")) r = k == JV_STR;
    else if (!strcmp(name, "mapping")) r = k == JV_DICT;
    else if (!strcmp(name, "iterable")) r = k == JV_STR || jv_is_seq(v) || k == JV_DICT || k == JV_UNDEF;
    else if (!strcmp(name, "sequence")) r = k == JV_STR || jv_is_seq(v) || k == JV_DICT;
    else if (!strcmp(name, "number")) r = is_number(v);
    else if (!strcmp(name, "integer")) r = k == JV_INT;
    else if (!strcmp(name, "float")) r = k == JV_FLOAT;
    else if (!strcmp(name, "boolean")) r = k == JV_BOOL;
    else if (!strcmp(name, "true")) r = k == JV_BOOL && v->b;
    else if (!strcmp(name, "false")) r = k == JV_BOOL && !v->b;
    else if (!strcmp(name, "callable")) r = k == JV_FUNC;
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (k != JV_INT) return jfail(c, "test '%s' needs an integer", name);
        r = (v->i % 2 != 0) == (name[0] == 'o');
    } else if (!strcmp(name, "divisibleby")) {
        if (k != JV_INT || !x || x->kind != JV_INT || x->i == 0) return jfail(c, "test 'divisibleby' needs integers");
        r = v->i % x->i == 0;
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        r = k == JV_STR && jv_truthy(str_predicate(c, v, name[0] == 'l' ? "islower" : "isupper"));
    } else if (x && (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "=="))) {
        if (!jv_equal_charged(c, v, x, &r)) return NULL;
    } else if (x && (!strcmp(name, "ne") || !strcmp(name, "!="))) {
        if (!jv_equal_charged(c, v, x, &r)) return NULL;
        r = !r;
    }
    else if (x && !strcmp(name, "sameas")) r = v == x || (k == x->kind && (k == JV_NONE || (k == JV_BOOL && v->b == x->b)));
    else if (x && (!strcmp(name, "lt") || !strcmp(name, "le") || !strcmp(name, "gt") || !strcmp(name, "ge"))) {
        bool ok;
        int cmp = jv_compare(c, v, x, &ok);
        if (!ok) return NULL;
        r = name[0] == 'l' ? (name[1] == 't' ? cmp < 0 : cmp <= 0) : (name[1] == 't' ? cmp > 0 : cmp >= 0);
    } else if (x && !strcmp(name, "in")) {
        jinja_value *l = x->kind == JV_STR ? NULL : jv_iter_list(c, x);
        if (x->kind == JV_STR) {
            if (!jinja_charge_scan(c, x->s.n + (v->kind == JV_STR ? v->s.n : 0))) return NULL;
            r = v->kind == JV_STR && jv_find(x->s.p, x->s.n, v->s.p, v->s.n) != NULL;
        } else {
            if (!l) return NULL;
            r = false;
            for (size_t i = 0; i < l->l.n && !r; i++)
                if (!jv_equal_charged(c, v, l->l.v[i], &r)) return NULL;
        }
    } else {
        return jfail(c, "no test named '%s'", name);
    }
    return jinja_bool(c, r);
}

// ---- filters --------------------------------------------------------------------------------------------

typedef jinja_value *(*filter_fn)(jinja_ctx *c, jinja_value *v, jinja_value **a, size_t n, const char **kwn,
                                  jinja_value **kwv, size_t n_kw);
#define FARGS jinja_ctx *c, jinja_value *v, jinja_value **a, size_t n, const char **kwn, jinja_value **kwv, size_t n_kw
#define FUNUSED (void)a, (void)n, (void)kwn, (void)kwv, (void)n_kw

static jinja_value *f_tojson(FARGS) {
    jinja_value *ind = ARG(0, "indent");
    int indent = ind && ind->kind == JV_INT ? (int)(ind->i < 0 ? 0 : ind->i > 64 ? 64 : ind->i) : -1;
    jsb b = {.limit = c->lim.max_output};
    if (!jv_tojson(c, &b, v, indent, 0)) return jsb_free(&b), NULL;
    return jv_str_sb(c, &b);
}

static jinja_value *f_trim(FARGS) {
    jinja_value *s = jv_str_of(c, v), *chars = ARG(0, "chars");
    if (!s) return NULL;
    return strip(c, s, chars && chars->kind == JV_STR ? chars : NULL, 3);
}

static jinja_value *f_length(FARGS) {
    FUNUSED;
    switch (v->kind) {
    case JV_STR: return jinja_charge_scan(c, v->s.n) ? jinja_int(c, (int64_t)jv_utf8_len(v->s.p, v->s.n)) : NULL;
    case JV_LIST: case JV_TUPLE: return jinja_int(c, (int64_t)v->l.n);
    case JV_DICT: case JV_NS: return jinja_int(c, (int64_t)v->d.n);
    case JV_UNDEF: return jinja_int(c, 0);
    default: return jfail(c, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static jinja_value *f_first_last(jinja_ctx *c, jinja_value *v, bool last) {
    jinja_value *l = jv_iter_list(c, v);
    if (!l) return NULL;
    if (!l->l.n) return jv_undef(c, "no first item, sequence was empty");
    return l->l.v[last ? l->l.n - 1 : 0];
}
static jinja_value *f_first(FARGS) { FUNUSED; return f_first_last(c, v, false); }
static jinja_value *f_last(FARGS) { FUNUSED; return f_first_last(c, v, true); }

static jinja_value *f_join(FARGS) {
    jinja_value *sep = ARG(0, "d"), *attr = ARG(1, "attribute");
    jinja_value *l = jv_iter_list(c, v);
    if (!l || !jinja_charge(c, l->l.n)) return NULL;
    jsb b = {.limit = c->lim.max_output};
    for (size_t i = 0; i < l->l.n && !b.failed; i++) {
        if (i && sep) jv_to_str(&b, sep);
        jinja_value *x = l->l.v[i];
        if (attr && attr->kind == JV_STR && !(x = jinja_getattr(c, x, attr->s.p))) return jsb_free(&b), NULL;
        jv_to_str(&b, x);
    }
    return jv_str_sb(c, &b);
}

static jinja_value *f_default(FARGS) {
    jinja_value *def = ARG(0, "default_value"), *boolean = ARG(1, "boolean");
    bool use = v->kind == JV_UNDEF || (boolean && jv_truthy(boolean) && !jv_truthy(v));
    return use ? (def ? def : jv_cstr(c, "")) : v;
}

static jinja_value *f_case(jinja_ctx *c, jinja_value *v, casing how) {
    jinja_value *s = jv_str_of(c, v);
    return s ? recase(c, s, how) : NULL;
}
static jinja_value *f_upper(FARGS) { FUNUSED; return f_case(c, v, CASE_UPPER); }
static jinja_value *f_lower(FARGS) { FUNUSED; return f_case(c, v, CASE_LOWER); }
static jinja_value *f_capitalize(FARGS) { FUNUSED; return f_case(c, v, CASE_CAPITALIZE); }
static jinja_value *f_title(FARGS) { FUNUSED; return f_case(c, v, CASE_TITLE_FILTER); }

static jinja_value *f_replace(FARGS) {
    jinja_value *s = jv_str_of(c, v), *old = ARG(0, "old"), *new = ARG(1, "new");
    if (!s || !old || !new) return s ? jfail(c, "replace needs two arguments") : NULL;
    if (!(old = jv_str_of(c, old)) || !(new = jv_str_of(c, new))) return NULL;
    return replace(c, s, old, new, int_or(ARG(2, "count"), -1));
}

/* select / reject / selectattr / rejectattr: attr NULL tests the items themselves. */
static jinja_value *select_items(FARGS, bool by_attr, bool keep) {
    jinja_value *l = jv_iter_list(c, v), *attr = by_attr ? ARG(0, NULL) : NULL;
    size_t t = by_attr ? 1 : 0;
    (void)kwn, (void)kwv, (void)n_kw;
    if (!l || (by_attr && (!attr || attr->kind != JV_STR))) return l ? jfail(c, "selectattr needs an attribute name") : NULL;
    jinja_value *test = n > t ? a[t] : NULL, *out = jv_new(c, JV_LIST);
    if (test && test->kind != JV_STR) return jfail(c, "the test name must be a string");
    for (size_t i = 0; out && i < l->l.n; i++) {
        if (!jinja_step(c)) return NULL;
        jinja_value *x = by_attr ? jinja_getattr(c, l->l.v[i], attr->s.p) : l->l.v[i];
        if (!x) return NULL;
        bool r;
        if (test) {
            jinja_value *tr = jinja_call_test(c, test->s.p, x, a + t + 1, n - t - 1);
            if (!tr) return NULL;
            r = tr->b;
        } else {
            r = jv_truthy(x);
        }
        if (r == keep && !jv_push(c, out, l->l.v[i])) return NULL;
    }
    return out;
}
static jinja_value *f_selectattr(FARGS) { return select_items(c, v, a, n, kwn, kwv, n_kw, true, true); }
static jinja_value *f_rejectattr(FARGS) { return select_items(c, v, a, n, kwn, kwv, n_kw, true, false); }
static jinja_value *f_select(FARGS) { return select_items(c, v, a, n, kwn, kwv, n_kw, false, true); }
static jinja_value *f_reject(FARGS) { return select_items(c, v, a, n, kwn, kwv, n_kw, false, false); }

static jinja_value *f_map(FARGS) {
    jinja_value *l = jv_iter_list(c, v), *attr = jinja_kwarg(kwn, kwv, n_kw, "attribute");
    jinja_value *def = jinja_kwarg(kwn, kwv, n_kw, "default"), *out = l ? jv_new(c, JV_LIST) : NULL;
    if (!out) return NULL;
    if (!attr && (!n || a[0]->kind != JV_STR)) return jfail(c, "map needs a filter name or attribute=");
    for (size_t i = 0; i < l->l.n; i++) {
        if (!jinja_step(c)) return NULL;
        jinja_value *x;
        if (attr) {
            x = attr->kind == JV_STR ? jinja_getattr(c, l->l.v[i], attr->s.p) : jinja_getitem(c, l->l.v[i], attr);
            if (x && x->kind == JV_UNDEF && def) x = def;
        } else {
            x = jinja_call_filter(c, a[0]->s.p, l->l.v[i], a + 1, n - 1, NULL, NULL, 0);
        }
        if (!x || !jv_push(c, out, x)) return NULL;
    }
    return out;
}

static jinja_value *f_items(FARGS) {
    FUNUSED;
    if (v->kind == JV_UNDEF) return jv_new(c, JV_LIST);
    if (v->kind != JV_DICT) return jfail(c, "can only get item pairs from a mapping");
    return dict_items(c, v);
}

/* dictsort: the mapping's (key, value) pairs sorted by key (by="value": by value), strings
 * compared case-folded unless case_sensitive, in reverse when asked; stable, as Python's sort. An
 * insertion sort: mappings in templates are small, and every comparison is charged. */
static jinja_value *f_dictsort(FARGS) {
    jinja_value *cs = ARG(0, "case_sensitive"), *by = ARG(1, "by"), *rev = ARG(2, "reverse");
    if (v->kind != JV_DICT) return jfail(c, "dictsort needs a mapping");
    int pos = by && jv_str_eq(by, "value") ? 1 : 0;
    bool fold = !(cs && jv_truthy(cs)), desc = rev && jv_truthy(rev);
    jinja_value *items = dict_items(c, v), *keys = items ? jv_new(c, JV_LIST) : NULL;
    for (size_t i = 0; keys && i < items->l.n; i++) { /* the sort key of each pair */
        jinja_value *k = items->l.v[i]->l.v[pos];
        if (fold && k->kind == JV_STR && !(k = recase(c, k, CASE_LOWER))) return NULL;
        if (!jv_push(c, keys, k)) return NULL;
    }
    for (size_t i = 1; keys && i < items->l.n; i++)
        for (size_t j = i; j > 0; j--) {
            bool ok;
            if (!jinja_step(c)) return NULL;
            int cmp = jv_compare(c, keys->l.v[j - 1], keys->l.v[j], &ok);
            if (!ok) return NULL;
            if (desc ? cmp >= 0 : cmp <= 0) break;
            jinja_value *t = items->l.v[j]; items->l.v[j] = items->l.v[j - 1], items->l.v[j - 1] = t;
            t = keys->l.v[j], keys->l.v[j] = keys->l.v[j - 1], keys->l.v[j - 1] = t;
        }
    return keys ? items : NULL;
}

static jinja_value *f_list(FARGS) {
    FUNUSED;
    jinja_value *l = jv_iter_list(c, v), *out = l && jinja_charge(c, l->l.n) ? jv_new(c, JV_LIST) : NULL;
    for (size_t i = 0; out && i < l->l.n; i++)
        if (!jv_push(c, out, l->l.v[i])) return NULL;
    return out;
}

static jinja_value *f_string(FARGS) { FUNUSED; return jv_str_of(c, v); }
static jinja_value *f_safe(FARGS) { FUNUSED; return jv_str_of(c, v); }

/* Python's int() / float() of a string (surrounding whitespace and '_' between digits allowed). */
static bool parse_number(const jinja_value *s, bool want_int, int64_t *i, double *f) {
    char buf[128];
    size_t k = 0, a = 0, b = s->s.n;
    while (a < b && is_space((unsigned char)s->s.p[a])) a++;
    while (b > a && is_space((unsigned char)s->s.p[b - 1])) b--;
    if (b == a || b - a >= sizeof(buf)) return false;
    for (size_t j = a; j < b; j++)
        if (s->s.p[j] != '_') buf[k++] = s->s.p[j];
    buf[k] = '\0';
    char *end;
    if (want_int) {
        *i = strtoll(buf, &end, 10);
        if (*end == '\0') return true;
    }
    *f = strtod(buf, &end);
    return *end == '\0' && !isspace((unsigned char)buf[0]);
}

static jinja_value *f_int(FARGS) {
    jinja_value *def = ARG(0, "default");
    int64_t i;
    double f;
    switch (v->kind) {
    case JV_INT: return v;
    case JV_BOOL: return jinja_int(c, v->b);
    case JV_FLOAT:
        if (isfinite(v->f) && fabs(v->f) < 9.2e18) return jinja_int(c, (int64_t)v->f);
        break;
    case JV_STR:
        if (parse_number(v, true, &i, &f)) {
            if (i != 0 || f == 0) return jinja_int(c, i);
        }
        if (parse_number(v, false, &i, &f) && isfinite(f) && fabs(f) < 9.2e18) return jinja_int(c, (int64_t)f);
        break;
    default: break;
    }
    return def ? def : jinja_int(c, 0);
}

static jinja_value *f_float(FARGS) {
    jinja_value *def = ARG(0, "default");
    int64_t i;
    double f;
    if (v->kind == JV_FLOAT) return v;
    if (v->kind == JV_INT || v->kind == JV_BOOL) return jinja_float(c, v->kind == JV_INT ? (double)v->i : v->b);
    if (v->kind == JV_STR && parse_number(v, false, &i, &f)) return jinja_float(c, f);
    return def ? def : jinja_float(c, 0.0);
}

static jinja_value *f_round(FARGS) {
    jinja_value *prec = ARG(0, "precision"), *method = ARG(1, "method");
    int p = prec && prec->kind == JV_INT ? (int)(prec->i > 30 ? 30 : prec->i < 0 ? 0 : prec->i) : 0;
    if (v->kind != JV_INT && v->kind != JV_FLOAT && v->kind != JV_BOOL) return jfail(c, "round needs a number");
    double x = v->kind == JV_FLOAT ? v->f : v->kind == JV_INT ? (double)v->i : v->b, scale = pow(10, p);
    if (method && jv_str_eq(method, "floor")) return jinja_float(c, floor(x * scale) / scale);
    if (method && jv_str_eq(method, "ceil")) return jinja_float(c, ceil(x * scale) / scale);
    if (v->kind != JV_FLOAT) return v->kind == JV_BOOL ? jinja_int(c, v->b) : v;
    char buf[400];
    snprintf(buf, sizeof(buf), "%.*f", p, x); /* exact decimal rounding, halves to even: Python's round() */
    return jinja_float(c, strtod(buf, NULL));
}

static jinja_value *f_abs(FARGS) {
    FUNUSED;
    if (v->kind == JV_FLOAT) return jinja_float(c, fabs(v->f));
    if (v->kind == JV_INT && v->i != INT64_MIN) return jinja_int(c, v->i < 0 ? -v->i : v->i);
    if (v->kind == JV_BOOL) return jinja_int(c, v->b);
    return jfail(c, "bad operand type for abs(): '%s'", jv_type_name(v));
}

static jinja_value *f_reverse(FARGS) {
    FUNUSED;
    if (v->kind == JV_STR) {
        jinja_value *chars = jv_iter_list(c, v);
        if (!chars) return NULL;
        jsb b = {.limit = c->lim.max_output};
        for (size_t i = chars->l.n; i-- > 0;) jsb_put_str(&b, chars->l.v[i]);
        return jv_str_sb(c, &b);
    }
    jinja_value *l = jv_iter_list(c, v), *out = l && jinja_charge(c, l->l.n) ? jv_new(c, JV_LIST) : NULL;
    for (size_t i = out ? l->l.n : 0; i-- > 0;)
        if (!jv_push(c, out, l->l.v[i])) return NULL;
    return out;
}

static jinja_value *f_indent(FARGS) {
    jinja_value *s = jv_str_of(c, v), *w = ARG(0, "width"), *first = ARG(1, "first"), *blank = ARG(2, "blank");
    if (!s) return NULL;
    jsb pad = {.limit = c->lim.max_output}, b = {.limit = c->lim.max_output};
    if (w && w->kind == JV_STR && w->s.n <= 256) jsb_put_str(&pad, w);
    else if (w && w->kind == JV_STR) return jsb_free(&pad), jfail(c, "indent: the indentation is longer than 256 bytes");
    else for (int64_t i = 0; i < int_or(w, 4) && i < 256; i++) jsb_puts(&pad, " ");
    jinja_value *lines = splitlines(c, s);
    if (!lines) return jsb_free(&pad), NULL;
    if (first && jv_truthy(first)) jsb_put(&b, pad.t.p ? pad.t.p : "", pad.t.len, JINJA_LITERAL);
    for (size_t i = 0; i < lines->l.n; i++) {
        jinja_value *line = lines->l.v[i];
        if (i) {
            jsb_puts(&b, "\n");
            if (line->s.n || (blank && jv_truthy(blank))) jsb_put(&b, pad.t.p ? pad.t.p : "", pad.t.len, JINJA_LITERAL);
        }
        jsb_put_str(&b, line);
    }
    if (s->s.n && (s->s.p[s->s.n - 1] == '\n')) jsb_puts(&b, "\n");
    jsb_free(&pad);
    return jv_str_sb(c, &b);
}

/* Each item is compared with those kept so far: every comparison is charged, so a long list
 * of distinct items runs out of steps rather than taking seconds. */
static jinja_value *f_unique(FARGS) {
    FUNUSED;
    jinja_value *l = jv_iter_list(c, v), *out = l ? jv_new(c, JV_LIST) : NULL;
    for (size_t i = 0; out && i < l->l.n; i++) {
        bool seen = false;
        for (size_t k = 0; k < out->l.n && !seen; k++)
            if (!jv_equal_charged(c, l->l.v[i], out->l.v[k], &seen)) return NULL;
        if (!seen && !jv_push(c, out, l->l.v[i])) return NULL;
    }
    return out;
}

/* soft: the filter takes an undefined value as jinja2's Undefined lets it (an empty string or
 * sequence); the others fail on one, as in jinja2. */
static const struct { const char *name; filter_fn fn; bool soft; } FILTERS[] = {
    {"tojson", f_tojson, false}, {"trim", f_trim, true}, {"length", f_length, true}, {"count", f_length, true},
    {"first", f_first, true}, {"last", f_last, true}, {"join", f_join, true}, {"default", f_default, true},
    {"d", f_default, true}, {"upper", f_upper, true}, {"lower", f_lower, true}, {"capitalize", f_capitalize, true},
    {"title", f_title, true}, {"replace", f_replace, true}, {"selectattr", f_selectattr, true},
    {"rejectattr", f_rejectattr, true}, {"select", f_select, true}, {"reject", f_reject, true}, {"map", f_map, true},
    {"items", f_items, true}, {"list", f_list, true}, {"string", f_string, true}, {"safe", f_safe, true},
    {"int", f_int, false}, {"float", f_float, false}, {"round", f_round, false}, {"abs", f_abs, false},
    {"reverse", f_reverse, true}, {"indent", f_indent, false}, {"unique", f_unique, true},
    {"dictsort", f_dictsort, false},
};

jinja_value *jinja_call_filter(jinja_ctx *c, const char *name, jinja_value *v, jinja_value **a, size_t n,
                               const char **kwn, jinja_value **kwv, size_t n_kw) {
    if (!jinja_step(c)) return NULL;
    for (size_t i = 0; i < ATTND_ARRAY_LEN(FILTERS); i++)
        if (!strcmp(FILTERS[i].name, name)) {
            if (v->kind == JV_UNDEF && !FILTERS[i].soft)
                return jfail(c, "'%s' is undefined (filter '%s')", v->undef ? v->undef : "value", name);
            return FILTERS[i].fn(c, v, a, n, kwn, kwv, n_kw);
        }
    return jfail(c, "no filter named '%s'", name);
}

// ---- global functions -----------------------------------------------------------------------------------

static jinja_value *g_range(ARGS) {
    (void)fn, (void)kwn, (void)kwv, (void)n_kw;
    int64_t lo = 0, hi, step = 1;
    for (size_t i = 0; i < n; i++)
        if (a[i]->kind != JV_INT) return jfail(c, "range() arguments must be integers");
    if (n == 1) hi = a[0]->i;
    else if (n == 2 || n == 3) lo = a[0]->i, hi = a[1]->i, step = n == 3 ? a[2]->i : 1;
    else return jfail(c, "range expected 1 to 3 arguments");
    if (step == 0) return jfail(c, "range() arg 3 must not be zero");
    /* the items are counted before any is made (a step each) */
    uint64_t span = step > 0 ? (hi > lo ? (uint64_t)hi - (uint64_t)lo : 0) : (lo > hi ? (uint64_t)lo - (uint64_t)hi : 0);
    uint64_t count = span ? (span - 1) / (step > 0 ? (uint64_t)step : 0 - (uint64_t)step) + 1 : 0;
    jinja_value *out = jinja_charge(c, count) ? jv_new(c, JV_LIST) : NULL;
    for (int64_t i = lo; out && (step > 0 ? i < hi : i > hi); i += step) {
        if (!jv_push(c, out, jinja_int(c, i))) return NULL;
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return out;
}

static jinja_value *g_namespace(ARGS) {
    (void)fn;
    jinja_value *ns = jv_new(c, JV_NS);
    for (size_t i = 0; ns && i < n; i++) { /* namespace(dict) copies it */
        if (a[i]->kind != JV_DICT) return jfail(c, "namespace() takes keyword arguments or a mapping");
        for (size_t k = 0; k < a[i]->d.n; k++)
            if (!jv_dict_put(c, ns, a[i]->d.k[k], a[i]->d.v[k])) return NULL;
    }
    for (size_t i = 0; ns && i < n_kw; i++)
        if (!jv_dict_put(c, ns, jv_cstr(c, kwn[i]), kwv[i])) return NULL;
    if (ns && fn->fn.name[0] == 'd') {
        if (ns->depth > c->lim.max_depth) return jv_too_deep(c);
        ns->kind = JV_DICT;
    }
    return ns;
}

static jinja_value *g_raise(ARGS) {
    (void)fn, (void)kwn, (void)kwv, (void)n_kw;
    jsb b = {.limit = 300};
    if (n) jv_to_str(&b, a[0]);
    jfail(c, "%s", b.t.p ? b.t.p : "");
    jsb_free(&b);
    return NULL;
}

static jinja_value *g_strftime(ARGS) {
    (void)fn, (void)kwn, (void)kwv, (void)n_kw;
    if (!n || a[0]->kind != JV_STR) return jfail(c, "strftime_now needs a format string");
    struct tm tm = c->now;
    if (!c->now_set) {
        time_t t = time(NULL);
        localtime_r(&t, &tm);
    }
    char out[512];
    if (memchr(a[0]->s.p, 0, a[0]->s.n) || a[0]->s.n > 200) return jfail(c, "strftime_now: bad format");
    size_t k = strftime(out, sizeof(out), a[0]->s.p, &tm);
    return jinja_str(c, out, k, JINJA_LITERAL);
}

jinja_value *jinja_global_fn(jinja_ctx *c, const char *name) {
    static const struct { const char *name; jbuiltin fn; } G[] = {
        {"range", g_range}, {"namespace", g_namespace}, {"dict", g_namespace},
        {"raise_exception", g_raise}, {"strftime_now", g_strftime}};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(G); i++)
        if (!strcmp(G[i].name, name)) {
            jinja_value *f = jv_new(c, JV_FUNC);
            if (f) f->fn.fn = G[i].fn, f->fn.name = G[i].name;
            return f;
        }
    return NULL;
}
