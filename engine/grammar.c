/*
 * grammar.c — compiling GBNF text (see attnd/grammar.h) into the flat element form of
 * grammar_internal.h.
 *
 * A recursive-descent parser builds each rule's elements in its own vector; groups become
 * rules of their own and repetition is rewritten into rules (x* as R ::= x R | ε, x? as
 * R ::= x | ε, x{m,n} as m copies of x then n - m nested optionals), so the matcher only ever
 * sees sequences, alternatives, references and character sets. Then every reference is checked,
 * left recursion is refused (nullable rules are found first, then a cycle search over the
 * leftmost references), and the rules are laid out in one array.
 */
#include "grammar_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/utf8.h"

// ---- building blocks ------------------------------------------------------------------------

typedef struct evec {
    gelem *p;
    size_t n, cap;
} evec;

typedef struct prule {
    const char *name; /* into the source; NULL for rules the compiler made */
    size_t name_len;
    evec body;
    bool defined;
    const char *ref_at;       /* where it was first referenced (for "undefined rule") */
} prule;

typedef struct parser {
    const char *src, *p, *end;
    prule *rules;
    size_t n_rules, cap_rules;
    gset *sets;
    size_t n_sets, cap_sets;
    grange *ranges;
    size_t n_ranges, cap_ranges;
    gtoken *toks;
    size_t n_toks, cap_toks;
    size_t n_elements; /* over all rules, against GRAMMAR_MAX_ELEMENTS */
    attnd_err *err;
    attnd_status st;   /* the first error */
} parser;

static void where(const parser *ps, const char *at, size_t *line, size_t *col) {
    *line = 1, *col = 1;
    for (const char *q = ps->src; q < at && q < ps->end; q++) {
        if (*q == '\n') (*line)++, *col = 1;
        else (*col)++;
    }
}

__attribute__((format(printf, 3, 4))) static bool fail_at(parser *ps, const char *at, const char *fmt, ...) {
    if (ps->st != ATTND_OK) return false;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t line, col;
    where(ps, at, &line, &col);
    ps->st = attnd_fail(ps->err, ATTND_ERR_INVALID, "grammar: line %zu, column %zu: %s", line, col, msg);
    return false;
}

static bool nomem(parser *ps) {
    if (ps->st == ATTND_OK) ps->st = attnd_fail(ps->err, ATTND_ERR_NOMEM, "grammar: out of memory");
    return false;
}

static bool emit(parser *ps, evec *v, uint32_t type, uint32_t val) {
    if (ps->st != ATTND_OK) return false;
    if (++ps->n_elements > GRAMMAR_MAX_ELEMENTS)
        return fail_at(ps, ps->p, "the grammar expands to more than %d elements", GRAMMAR_MAX_ELEMENTS);
    if (!attnd_grow(&v->p, &v->cap, v->n + 1, sizeof(*v->p), 16)) return nomem(ps);
    v->p[v->n++] = (gelem){type, val};
    return true;
}

/* A new rule; its index, or -1 (error set). */
static long new_rule(parser *ps, const char *name, size_t len) {
    if (ps->n_rules >= GRAMMAR_MAX_RULES) {
        fail_at(ps, ps->p, "the grammar has more than %d rules", GRAMMAR_MAX_RULES);
        return -1;
    }
    if (!attnd_grow(&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof(*ps->rules), 16)) {
        nomem(ps);
        return -1;
    }
    ps->rules[ps->n_rules] = (prule){.name = name, .name_len = len};
    return (long)ps->n_rules++;
}

static long find_rule(parser *ps, const char *name, size_t len) {
    for (size_t i = 0; i < ps->n_rules; i++)
        if (ps->rules[i].name && ps->rules[i].name_len == len && !memcmp(ps->rules[i].name, name, len)) return (long)i;
    return -1;
}

/* A set of n ranges; its index, or -1. */
static long new_set(parser *ps, const grange *r, size_t n, bool neg) {
    if (!attnd_grow(&ps->sets, &ps->cap_sets, ps->n_sets + 1, sizeof(*ps->sets), 16) ||
        !attnd_grow(&ps->ranges, &ps->cap_ranges, ps->n_ranges + n + 1, sizeof(*ps->ranges), 16)) {
        nomem(ps);
        return -1;
    }
    if (n) memcpy(ps->ranges + ps->n_ranges, r, n * sizeof(*r));
    ps->sets[ps->n_sets] = (gset){(uint32_t)ps->n_ranges, (uint32_t)n, neg};
    ps->n_ranges += n;
    return (long)ps->n_sets++;
}

/* A token terminal: <[id]> or <text> (the whole "<…>", up to the first '>') at ps->p. */
static bool parse_token(parser *ps, evec *out) {
    const char *at = ps->p, *q = at + 1;
    while (q < ps->end && *q != '>' && *q != '\n' && *q != '\r' && q - at < GRAMMAR_MAX_MARKER * 4) q++;
    if (q >= ps->end || *q != '>' || q == at + 1)
        return fail_at(ps, at, "expected a token <[id]> or <text>, closed by '>' on the same line");
    gtoken t = {-1, NULL, (size_t)(q + 1 - at)};
    if (at[1] == '[') {
        long id = 0;
        const char *d = at + 2;
        while (d < q && *d >= '0' && *d <= '9' && id <= INT32_MAX / 10) id = id * 10 + (*d++ - '0');
        if (d == at + 2 || d + 1 != q || *d != ']' || id > INT32_MAX)
            return fail_at(ps, at, "a token id is <[N]> with N a non-negative integer");
        t.id = (int32_t)id, t.len = 0;
    } else if (!(t.text = malloc(t.len + 1))) {
        return nomem(ps);
    } else {
        memcpy(t.text, at, t.len);
        t.text[t.len] = '\0';
    }
    ps->p = q + 1;
    if (!attnd_grow(&ps->toks, &ps->cap_toks, ps->n_toks + 1, sizeof(*ps->toks), 8)) {
        free(t.text);
        return nomem(ps);
    }
    ps->toks[ps->n_toks] = t;
    return emit(ps, out, G_TOKEN, (uint32_t)ps->n_toks++);
}

// ---- lexing ---------------------------------------------------------------------------------

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Skips blanks and comments; newlines too when newline_ok. */
static void skip_space(parser *ps, bool newline_ok) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t') ps->p++;
        else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        } else if ((c == '\n' || c == '\r') && newline_ok) ps->p++;
        else break;
    }
}

/* One UTF-8 character of the source; false (error set) for invalid UTF-8. */
static bool read_utf8(parser *ps, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    unsigned char b = s[0];
    int need = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : -1;
    if (need < 0 || (size_t)need >= left) return fail_at(ps, ps->p, "invalid UTF-8 in the grammar");
    uint32_t v = need == 0 ? b : need == 1 ? (b & 0x1Fu) : need == 2 ? (b & 0x0Fu) : (b & 0x07u);
    for (int i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80) return fail_at(ps, ps->p, "invalid UTF-8 in the grammar");
        v = v << 6 | (s[i] & 0x3Fu);
    }
    ps->p += need + 1;
    *cp = v;
    return true;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static bool read_char(parser *ps, uint32_t *cp) {
    *cp = 0;
    if (ps->p >= ps->end) return fail_at(ps, ps->p, "unexpected end of the grammar");
    if (*ps->p != '\\') return read_utf8(ps, cp);
    const char *at = ps->p++;
    if (ps->p >= ps->end) return fail_at(ps, at, "unfinished escape");
    char c = *ps->p++;
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = ps->p < ps->end ? utf8_hex_digit(*ps->p) : -1;
            if (h < 0) return fail_at(ps, at, "'\\%c' needs %d hex digits", c, digits);
            v = v << 4 | (uint32_t)h;
            ps->p++;
        }
        if (v > 0x10FFFF) return fail_at(ps, at, "code point U+%X is beyond Unicode", v);
        *cp = v;
        return true;
    }
    switch (c) {
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': *cp = (uint32_t)c; return true;
    default: return fail_at(ps, at, "unknown escape '\\%c'", c);
    }
}

// ---- literals, classes, repetition ----------------------------------------------------------

static bool parse_literal(parser *ps, evec *out) {
    ps->p++; /* the opening quote */
    while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p == '\n') return fail_at(ps, ps->p, "a string literal does not end on its line");
        uint32_t c;
        if (!read_char(ps, &c)) return false;
        long set = new_set(ps, &(grange){c, c}, 1, false);
        if (set < 0 || !emit(ps, out, G_CHARS, (uint32_t)set)) return false;
    }
    if (ps->p >= ps->end) return fail_at(ps, ps->p, "a string literal is not closed");
    ps->p++;
    return true;
}

enum { CLASS_MAX = 1024 };

static bool parse_class(parser *ps, evec *out) {
    const char *start = ps->p++;
    bool neg = ps->p < ps->end && *ps->p == '^';
    if (neg) ps->p++;
    grange r[CLASS_MAX];
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != ']') {
        uint32_t lo = 0, hi;
        if (!read_char(ps, &lo)) return false;
        hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            if (!read_char(ps, &hi)) return false;
            if (hi < lo) return fail_at(ps, start, "character range U+%X-U+%X is backwards", lo, hi);
        }
        if (n == CLASS_MAX) return fail_at(ps, start, "a character class may hold at most %d ranges", CLASS_MAX);
        r[n++] = (grange){lo, hi};
    }
    if (ps->p >= ps->end) return fail_at(ps, start, "a character class is not closed");
    ps->p++;
    if (n == 0) return fail_at(ps, start, "an empty character class matches nothing");
    long set = new_set(ps, r, n, neg);
    return set >= 0 && emit(ps, out, G_CHARS, (uint32_t)set);
}

/* Reads a decimal count of a {m,n} repetition. */
static bool read_count(parser *ps, long *v) {
    const char *at = ps->p;
    long x = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail_at(ps, at, "expected a number");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        x = x * 10 + (*ps->p++ - '0');
        if (x > GRAMMAR_MAX_REPEAT) return fail_at(ps, at, "repetition counts may be at most %d", GRAMMAR_MAX_REPEAT);
    }
    *v = x;
    return true;
}

/* Appends sym[n] (a copy: sym may live in out) n times... once. */
static bool append_copy(parser *ps, evec *out, const gelem *sym, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!emit(ps, out, sym[i].type, sym[i].v)) return false;
    return true;
}

/* R ::= sym R | ε when star, else R ::= sym | ε; or R ::= sym tail | ε with tail >= 0. */
static long repeat_rule(parser *ps, const gelem *sym, size_t n, bool star, long tail) {
    long r = new_rule(ps, NULL, 0);
    if (r < 0) return -1;
    evec *b = &ps->rules[r].body; /* ps->rules does not move below: no rule is created */
    if (!append_copy(ps, b, sym, n)) return -1;
    if (star && !emit(ps, b, G_REF, (uint32_t)r)) return -1;
    if (tail >= 0 && !emit(ps, b, G_REF, (uint32_t)tail)) return -1;
    if (!emit(ps, b, G_ALT, 0) || !emit(ps, b, G_END, 0)) return -1;
    ps->rules[r].defined = true;
    return r;
}

/* Rewrites out[start..) (the last symbol) for the quantifier at ps->p: * + ? {m,n}. */
static bool apply_quantifier(parser *ps, evec *out, size_t start) {
    const char *at = ps->p;
    char q = *ps->p++;
    long min = 0, max = -1; /* -1: unbounded */
    if (q == '+') min = 1;
    else if (q == '?') max = 1;
    else if (q == '{') {
        skip_space(ps, false);
        if (ps->p < ps->end && *ps->p != ',' && !read_count(ps, &min)) return false;
        skip_space(ps, false);
        max = min;
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip_space(ps, false);
            max = -1;
            if (ps->p < ps->end && *ps->p != '}' && !read_count(ps, &max)) return false;
            skip_space(ps, false);
        }
        if (ps->p >= ps->end || *ps->p != '}') return fail_at(ps, at, "expected '}' to close the repetition");
        ps->p++;
        if (max >= 0 && max < min) return fail_at(ps, at, "repetition {%ld,%ld} has its maximum below its minimum", min, max);
    }
    size_t n = out->n - start;
    if (n == 0) return true; /* repeating nothing ("" or an empty group) is nothing */
    gelem *sym = malloc(n * sizeof(*sym));
    if (!sym) return nomem(ps);
    memcpy(sym, out->p + start, n * sizeof(*sym));
    ps->n_elements -= n;
    out->n = start;
    bool ok = true;
    for (long i = 0; ok && i < min; i++) ok = append_copy(ps, out, sym, n);
    long tail = -1;
    if (ok && max < 0) tail = repeat_rule(ps, sym, n, true, -1);
    for (long i = min; ok && max >= 0 && i < max; i++) /* innermost first: R_k ::= sym R_{k+1} | ε */
        ok = (tail = repeat_rule(ps, sym, n, false, tail)) >= 0;
    ok = ok && ps->st == ATTND_OK;
    if (ok && tail >= 0) ok = emit(ps, out, G_REF, (uint32_t)tail);
    free(sym);
    return ok;
}

// ---- rules ----------------------------------------------------------------------------------

static bool parse_alternates(parser *ps, long rule, bool nested);

/* A group ( … ) becomes a rule of its own; the reference goes into out. */
static bool parse_group(parser *ps, evec *out) {
    const char *at = ps->p++;
    long r = new_rule(ps, NULL, 0);
    if (r < 0) return false;
    skip_space(ps, true);
    if (!parse_alternates(ps, r, true)) return false;
    if (ps->p >= ps->end || *ps->p != ')') return fail_at(ps, at, "expected ')' to close this group");
    ps->p++;
    ps->rules[r].defined = true;
    return emit(ps, out, G_REF, (uint32_t)r);
}

static bool parse_reference(parser *ps, evec *out) {
    const char *name = ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
    size_t len = (size_t)(ps->p - name);
    long r = find_rule(ps, name, len);
    if (r < 0) {
        if ((r = new_rule(ps, name, len)) < 0) return false;
        ps->rules[r].ref_at = name;
    }
    return emit(ps, out, G_REF, (uint32_t)r);
}

/* One sequence into rule's body; stops before '|', ')' or the end of the rule. */
static bool parse_sequence(parser *ps, long rule, bool nested) {
    for (;;) {
        skip_space(ps, nested);
        if (ps->p >= ps->end) return true;
        char c = *ps->p;
        size_t start = ps->rules[rule].body.n;
        bool ok;
        if (c == '"') ok = parse_literal(ps, &ps->rules[rule].body);
        else if (c == '[') ok = parse_class(ps, &ps->rules[rule].body);
        else if (c == '<') ok = parse_token(ps, &ps->rules[rule].body);
        else if (c == '.') {
            ps->p++;
            long set = new_set(ps, NULL, 0, true);
            ok = set >= 0 && emit(ps, &ps->rules[rule].body, G_CHARS, (uint32_t)set);
        } else if (c == '(') {
            evec tmp = {0}; /* the group adds rules: ps->rules may move */
            ok = parse_group(ps, &tmp) && append_copy(ps, &ps->rules[rule].body, tmp.p, tmp.n);
            if (ok) ps->n_elements -= tmp.n;
            free(tmp.p);
        } else if (is_name_char(c)) {
            evec tmp = {0};
            ok = parse_reference(ps, &tmp) && append_copy(ps, &ps->rules[rule].body, tmp.p, tmp.n);
            if (ok) ps->n_elements -= tmp.n;
            free(tmp.p);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            return fail_at(ps, ps->p, "'%c' follows nothing it could repeat", c);
        } else return true;
        if (!ok) return false;
        skip_space(ps, nested);
        while (ps->p < ps->end && (*ps->p == '*' || *ps->p == '+' || *ps->p == '?' || *ps->p == '{')) {
            evec tmp = ps->rules[rule].body; /* quantifiers add rules: work on a detached copy */
            ps->rules[rule].body = (evec){0};
            ok = apply_quantifier(ps, &tmp, start);
            ps->rules[rule].body = tmp;
            if (!ok) return false;
            skip_space(ps, nested);
        }
    }
}

static bool parse_alternates(parser *ps, long rule, bool nested) {
    for (;;) {
        if (!parse_sequence(ps, rule, nested)) return false;
        if (!nested) { /* a continuation line may start with '|' */
            const char *save = ps->p;
            skip_space(ps, true);
            if (ps->p >= ps->end || *ps->p != '|') ps->p = save;
        }
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            if (!emit(ps, &ps->rules[rule].body, G_ALT, 0)) return false;
            skip_space(ps, true);
            continue;
        }
        return emit(ps, &ps->rules[rule].body, G_END, 0);
    }
}

static bool parse_rule(parser *ps) {
    const char *name = ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
    size_t len = (size_t)(ps->p - name);
    if (len == 0) return fail_at(ps, name, "expected a rule name");
    skip_space(ps, false);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3)) return fail_at(ps, ps->p, "expected '::=' after the rule name");
    ps->p += 3;
    long r = find_rule(ps, name, len);
    if (r >= 0 && ps->rules[r].defined) return fail_at(ps, name, "rule '%.*s' is defined twice", (int)len, name);
    if (r < 0 && (r = new_rule(ps, name, len)) < 0) return false;
    skip_space(ps, true);
    if (!parse_alternates(ps, r, false)) return false;
    ps->rules[r].defined = true;
    skip_space(ps, false);
    if (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r')
        return fail_at(ps, ps->p, "unexpected '%c'; a rule ends at the end of its line", *ps->p);
    return true;
}

// ---- checks ---------------------------------------------------------------------------------

/* Marks the rules that can match the empty string (a fixpoint over the alternatives). */
static void find_nullable(const parser *ps, bool *nullable) {
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < ps->n_rules; r++) {
            if (nullable[r]) continue;
            const evec *b = &ps->rules[r].body;
            bool alt_ok = true;
            for (size_t i = 0; i < b->n && !nullable[r]; i++) {
                if (gelem_done(b->p[i].type)) {
                    if (alt_ok) nullable[r] = changed = true;
                    alt_ok = true;
                } else if (gelem_terminal(b->p[i].type) || !nullable[b->p[i].v]) alt_ok = false;
            }
        }
    }
}

static const char *rule_label(const prule *r, char *buf, size_t n) {
    if (r->name) snprintf(buf, n, "'%.*s'", (int)(r->name_len > 64 ? 64 : r->name_len), r->name);
    else snprintf(buf, n, "a group or repetition");
    return buf;
}

/* Refuses left recursion: a rule reachable from itself through leftmost references, each
 * preceded only by rules that can match nothing. Iterative depth-first search (color 1 = on
 * the path, 2 = done); next[r] is where r's scan of its body resumes. */
static bool check_left_recursion(parser *ps, const bool *nullable) {
    size_t n = ps->n_rules;
    unsigned char *color = calloc(n, 1);
    size_t *next = calloc(n, sizeof(*next)), *path = calloc(n, sizeof(*path));
    bool *lead = calloc(n, sizeof(*lead)); /* still at the left edge of the alternative */
    if (!color || !next || !path || !lead) {
        free(color), free(next), free(path), free(lead);
        return nomem(ps);
    }
    bool ok = true;
    for (size_t s = 0; s < n && ok; s++) {
        if (color[s]) continue;
        size_t depth = 0;
        path[depth++] = s, color[s] = 1, next[s] = 0, lead[s] = true;
        while (depth && ok) {
            size_t r = path[depth - 1];
            const evec *b = &ps->rules[r].body;
            size_t i = next[r];
            if (i >= b->n) {
                color[r] = 2, depth--;
                continue;
            }
            next[r] = i + 1;
            gelem e = b->p[i];
            if (gelem_done(e.type)) { lead[r] = true; continue; }
            if (!lead[r]) continue;
            if (gelem_terminal(e.type)) { lead[r] = false; continue; }
            if (!nullable[e.v]) lead[r] = false;
            if (color[e.v] == 1) {
                char a[80];
                const prule *pr = &ps->rules[ps->rules[e.v].name ? e.v : r];
                ps->st = attnd_fail(ps->err, ATTND_ERR_INVALID, "grammar: rule %s is left-recursive (it can reach itself "
                                    "without consuming input)", rule_label(pr, a, sizeof(a)));
                ok = false;
            } else if (color[e.v] == 0) {
                color[e.v] = 1, next[e.v] = 0, lead[e.v] = true;
                path[depth++] = e.v;
            }
        }
    }
    free(color), free(next), free(path), free(lead);
    return ok;
}

static bool check_rules(parser *ps) {
    for (size_t r = 0; r < ps->n_rules; r++)
        if (!ps->rules[r].defined) {
            char a[80];
            return fail_at(ps, ps->rules[r].ref_at, "rule %s is used but never defined",
                           rule_label(&ps->rules[r], a, sizeof(a)));
        }
    if (find_rule(ps, "root", 4) < 0) {
        ps->st = attnd_fail(ps->err, ATTND_ERR_INVALID, "grammar: there is no 'root' rule");
        return false;
    }
    bool *nullable = calloc(ps->n_rules, sizeof(*nullable));
    if (!nullable) return nomem(ps);
    find_nullable(ps, nullable);
    bool ok = check_left_recursion(ps, nullable);
    free(nullable);
    return ok;
}

// ---- layout ---------------------------------------------------------------------------------

static grammar *layout(parser *ps) {
    grammar *g = calloc(1, sizeof(*g));
    size_t n_el = 0, n_alts = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        n_el += ps->rules[r].body.n;
        for (size_t i = 0; i < ps->rules[r].body.n; i++) n_alts += gelem_done(ps->rules[r].body.p[i].type);
    }
    if (!g || !(g->el = malloc(n_el * sizeof(*g->el))) || !(g->alts = malloc(n_alts * sizeof(*g->alts))) ||
        !(g->alt_first = malloc((ps->n_rules + 1) * sizeof(*g->alt_first)))) {
        if (g) free(g->el), free(g->alts), free(g->alt_first);
        free(g);
        nomem(ps);
        return NULL;
    }
    size_t o = 0, a = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        const evec *b = &ps->rules[r].body;
        g->alt_first[r] = (uint32_t)a;
        g->alts[a++] = (uint32_t)o;
        for (size_t i = 0; i < b->n; i++) {
            g->el[o++] = b->p[i];
            if (b->p[i].type == G_ALT) g->alts[a++] = (uint32_t)o;
        }
    }
    g->alt_first[ps->n_rules] = (uint32_t)a;
    g->n_el = n_el;
    g->n_rules = (int)ps->n_rules;
    g->root = (uint32_t)find_rule(ps, "root", 4);
    g->sets = ps->sets, g->n_sets = ps->n_sets, ps->sets = NULL;
    g->ranges = ps->ranges, g->n_ranges = ps->n_ranges, ps->ranges = NULL;
    g->toks = ps->toks, g->n_toks = ps->n_toks, ps->toks = NULL, ps->n_toks = 0;
    atomic_init(&g->refs, 1);
    return g;
}

/* a + b, saturating at GRAMMAR_FAR */
static uint32_t far_add(uint32_t a, uint32_t b) { return a >= GRAMMAR_FAR - b ? GRAMMAR_FAR : a + b; }

/* g->rest: each rule's shortest sentence found by rounds of relaxation from "none" down (every
 * finite value is the length of a real derivation; a rule still unresolved after the rounds
 * keeps a longer one, or GRAMMAR_FAR), then each position's rest of its alternative. */
static bool shortest(grammar *g) {
    uint32_t *rule = malloc((size_t)(g->n_rules ? g->n_rules : 1) * sizeof(*rule));
    g->rest = malloc((g->n_el ? g->n_el : 1) * sizeof(*g->rest));
    if (!rule || !g->rest) {
        free(rule);
        return false;
    }
    for (int r = 0; r < g->n_rules; r++) rule[r] = GRAMMAR_FAR;
    for (int round = 0; round < 256; round++) {
        bool changed = false;
        for (size_t p = g->n_el; p-- > 0;) {
            gelem e = g->el[p];
            g->rest[p] = gelem_done(e.type) ? 0 : far_add(e.type == G_REF ? rule[e.v] : 1, g->rest[p + 1]);
        }
        for (int r = 0; r < g->n_rules; r++)
            for (uint32_t k = g->alt_first[r]; k < g->alt_first[r + 1]; k++)
                if (g->rest[g->alts[k]] < rule[r]) rule[r] = g->rest[g->alts[k]], changed = true;
        if (!changed) break;
    }
    free(rule);
    return true;
}

attnd_status grammar_compile(grammar **out, const char *src, size_t len, attnd_err *err) {
    *out = NULL;
    parser ps = {.src = src, .p = src, .end = src + len, .err = err};
    skip_space(&ps, true);
    while (ps.p < ps.end && parse_rule(&ps)) skip_space(&ps, true);
    if (ps.st == ATTND_OK && check_rules(&ps)) *out = layout(&ps);
    if (*out && !shortest(*out)) {
        grammar_unref(*out);
        *out = NULL;
        nomem(&ps);
    }
    for (size_t r = 0; r < ps.n_rules; r++) free(ps.rules[r].body.p);
    free(ps.rules);
    free(ps.sets);
    free(ps.ranges);
    for (size_t i = 0; i < ps.n_toks; i++) free(ps.toks[i].text);
    free(ps.toks);
    return ps.st;
}

grammar *grammar_ref(grammar *g) {
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void grammar_unref(grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    free(g->el);
    free(g->alts);
    free(g->alt_first);
    free(g->rest);
    free(g->sets);
    free(g->ranges);
    for (size_t i = 0; i < g->n_toks; i++) free(g->toks[i].text);
    free(g->toks);
    free(g->trigger);
    free(g->skip_open);
    free(g->skip_close);
    free(g->skip_break);
    free(g);
}

static attnd_status dup_marker(const char *s, const char *what, char **out, attnd_err *err) {
    if (!s) return ATTND_OK;
    size_t n = strlen(s);
    if (n == 0 || n > GRAMMAR_MAX_MARKER)
        return attnd_fail(err, ATTND_ERR_INVALID, "the grammar's %s must be 1..%d bytes", what, GRAMMAR_MAX_MARKER);
    return (*out = strdup(s)) ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
}

attnd_status grammar_set_lazy(grammar *g, const grammar_lazy *lz, attnd_err *err) {
    if (!lz->skip_open != !lz->skip_close)
        return attnd_fail(err, ATTND_ERR_INVALID, "a skipped block needs both its opening and its closing text");
    if (lz->skip_inside && !lz->skip_close)
        return attnd_fail(err, ATTND_ERR_INVALID, "starting inside a skipped block needs its closing text");
    if (lz->skip_break && !lz->skip_close)
        return attnd_fail(err, ATTND_ERR_INVALID, "a text that breaks a skipped block needs the block");
    char *t = NULL, *o = NULL, *c = NULL, *b = NULL;
    attnd_status st = dup_marker(lz->trigger, "trigger", &t, err);
    if (st == ATTND_OK) st = dup_marker(lz->skip_open, "skip_open", &o, err);
    if (st == ATTND_OK) st = dup_marker(lz->skip_close, "skip_close", &c, err);
    if (st == ATTND_OK) st = dup_marker(lz->skip_break, "skip_break", &b, err);
    if (st != ATTND_OK) {
        free(t), free(o), free(c), free(b);
        return st;
    }
    free(g->trigger), free(g->skip_open), free(g->skip_close), free(g->skip_break);
    g->trigger = t, g->skip_open = o, g->skip_close = c, g->skip_break = b;
    g->skip_inside = lz->skip_inside;
    return ATTND_OK;
}

grammar_lazy grammar_get_lazy(const grammar *g) {
    return (grammar_lazy){g->trigger, g->skip_open, g->skip_close, g->skip_inside, g->skip_break};
}

int grammar_n_rules(const grammar *g) { return g->n_rules; }

attnd_status grammar_check_tokenizer(const grammar *g, const tokenizer *tok, attnd_err *err) {
    for (size_t i = 0; i < g->n_toks; i++) {
        const gtoken *t = &g->toks[i];
        if (t->id >= tok_n_vocab(tok))
            return attnd_fail(err, ATTND_ERR_INVALID, "grammar: token <[%d]> is outside the %d-token vocabulary", (int)t->id,
                              tok_n_vocab(tok));
        if (t->id < 0 && tok_find(tok, t->text) < 0)
            return attnd_fail(err, ATTND_ERR_INVALID, "grammar: %s is not a token of the vocabulary", t->text);
    }
    return ATTND_OK;
}
