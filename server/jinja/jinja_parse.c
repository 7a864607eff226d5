/*
 * jinja_parse.c — tokens to a syntax tree, by recursive descent in jinja2's precedence order
 * (lowest first): conditional expression, or, and, not, comparisons and `in`, + and -, ~,
 * * / // %, **, unary minus, then postfix (attribute, subscript, slice, call) and filters /
 * tests. Nesting is bounded so that a hostile template cannot exhaust the stack.
 */
#include "jinja_lex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NEST 200

typedef struct parser {
    const jtoken *t;
    size_t n, i;
    jarena *a;
    int depth;
    attnd_err *err;
    bool failed;
} parser;

static const jtoken *peek(const parser *P) { return &P->t[P->i < P->n ? P->i : P->n - 1]; }
static const jtoken *next(parser *P) {
    const jtoken *t = peek(P);
    if (P->i < P->n - 1) P->i++;
    return t;
}

static void *pfail(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *pfail(parser *P, const char *fmt, ...) {
    if (P->failed) return NULL;
    P->failed = true;
    va_list ap;
    va_start(ap, fmt);
    jinja_vfail(P->err, peek(P)->line, fmt, ap);
    va_end(ap);
    return NULL;
}

static void *nomem(parser *P) {
    if (!P->failed) attnd_fail(P->err, ATTND_ERR_NOMEM, "out of memory");
    P->failed = true;
    return NULL;
}

static bool is_op(const jtoken *t, const char *op) {
    return t->kind == T_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}
static bool is_name(const jtoken *t, const char *name) {
    return t->kind == T_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}
static bool accept_op(parser *P, const char *op) {
    if (!is_op(peek(P), op)) return false;
    next(P);
    return true;
}
static bool accept_name(parser *P, const char *name) {
    if (!is_name(peek(P), name)) return false;
    next(P);
    return true;
}

static const char *describe(const jtoken *t, char *buf, size_t n) {
    switch (t->kind) {
    case T_EOF: return "end of template";
    case T_VAR_END: case T_BLOCK_END: return "end of tag";
    case T_TEXT: return "text";
    case T_STRING: return "a string";
    default: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    }
}

static bool expect_op(parser *P, const char *op) {
    if (accept_op(P, op)) return true;
    char b[64];
    pfail(P, "expected '%s', got %s", op, describe(peek(P), b, sizeof(b)));
    return false;
}

static jnode *node(parser *P, jnk kind, int line) {
    jnode *n = jarena_alloc(P->a, sizeof(*n));
    if (!n) return nomem(P);
    n->kind = kind, n->line = line;
    return n;
}

static char *tok_str(parser *P, const jtoken *t) {
    char *s = jarena_alloc(P->a, t->n + 1);
    if (!s) return nomem(P);
    memcpy(s, t->p, t->n);
    return s;
}

static const char *expect_ident(parser *P) {
    const jtoken *t = peek(P);
    char b[64];
    if (t->kind != T_NAME) return pfail(P, "expected a name, got %s", describe(t, b, sizeof(b)));
    return tok_str(P, next(P));
}

/* A growable array of node pointers in the arena. */
typedef struct nvec {
    const jnode **v;
    size_t n, cap;
} nvec;

static bool nvec_push(parser *P, nvec *vec, const void *x) {
    const jnode **v = jarena_grow(P->a, (void *)vec->v, vec->n, &vec->cap, sizeof(*v));
    if (!v) return nomem(P), false;
    vec->v = v;
    vec->v[vec->n++] = x;
    return true;
}

// ---- expressions ---------------------------------------------------------------------------------

static const jnode *parse_expr(parser *P);
static const jnode *parse_or(parser *P);
static const jnode *parse_unary(parser *P, bool with_filter);

static jinja_value *lit_value(parser *P, jkind k) {
    jinja_value *v = jarena_alloc(P->a, sizeof(*v));
    if (!v) return nomem(P);
    v->kind = k;
    return v;
}

/* Arguments of a call, filter or test: positional then keyword (name=value). */
static bool parse_args(parser *P, jnode *n) {
    nvec pos = {0}, kwn = {0}, kwv = {0};
    while (!accept_op(P, ")")) {
        if (pos.n + kwn.n && !expect_op(P, ",")) return false;
        if (accept_op(P, ")")) break; /* a trailing comma */
        if (peek(P)->kind == T_NAME && is_op(&P->t[P->i + 1 < P->n ? P->i + 1 : P->i], "=")) {
            const char *k = tok_str(P, next(P));
            next(P);
            const jnode *v = parse_expr(P);
            if (!k || !v || !nvec_push(P, &kwn, k) || !nvec_push(P, &kwv, v)) return false;
        } else {
            if (kwn.n) return pfail(P, "a positional argument follows a keyword argument"), false;
            const jnode *v = parse_expr(P);
            if (!v || !nvec_push(P, &pos, v)) return false;
        }
    }
    n->kids = pos.v, n->n_kids = pos.n;
    n->kwn = (const char **)kwn.v, n->kwv = kwv.v, n->n_kw = kwn.n;
    return true;
}

static const jnode *parse_literal(parser *P, const jtoken *t) {
    jnode *n = node(P, E_LIT, t->line);
    if (!n) return NULL;
    if (t->kind == T_INT) {
        if (!(n->lit = lit_value(P, JV_INT))) return NULL;
        n->lit->i = t->i;
    } else if (t->kind == T_FLOAT) {
        if (!(n->lit = lit_value(P, JV_FLOAT))) return NULL;
        n->lit->f = t->f;
    } else { /* strings; adjacent literals concatenate */
        size_t total = t->n;
        size_t j = P->i;
        while (P->t[j].kind == T_STRING) total += P->t[j++].n;
        char *s = jarena_alloc(P->a, total + 1);
        if (!s || !(n->lit = lit_value(P, JV_STR))) return nomem(P);
        memcpy(s, t->p, t->n);
        size_t k = t->n;
        while (peek(P)->kind == T_STRING) {
            const jtoken *u = next(P);
            memcpy(s + k, u->p, u->n);
            k += u->n;
        }
        n->lit->s.p = s, n->lit->s.n = k;
    }
    return n;
}

static const jnode *parse_name_primary(parser *P, const jtoken *t) {
    static const char *consts[] = {"true", "True", "false", "False", "none", "None"};
    for (size_t k = 0; k < ATTND_ARRAY_LEN(consts); k++) {
        if (!is_name(t, consts[k])) continue;
        jnode *n = node(P, E_LIT, t->line);
        if (!n || !(n->lit = lit_value(P, k < 4 ? JV_BOOL : JV_NONE))) return NULL;
        n->lit->b = k < 2;
        return n;
    }
    jnode *n = node(P, E_NAME, t->line);
    if (n && !(n->name = tok_str(P, t))) return NULL;
    return n;
}

/* ( expr ) or a tuple; [ list ]; { dict } */
static const jnode *parse_collection(parser *P, const jtoken *t) {
    char open = t->p[0], close = open == '(' ? ')' : open == '[' ? ']' : '}';
    char cl[2] = {close, 0};
    nvec items = {0};
    bool comma = false;
    while (!accept_op(P, cl)) {
        if (items.n && !expect_op(P, ",")) return NULL;
        if (items.n) comma = true;
        if (accept_op(P, cl)) break;
        const jnode *k = parse_expr(P);
        if (!k || !nvec_push(P, &items, k)) return NULL;
        if (open == '{') {
            const jnode *v = expect_op(P, ":") ? parse_expr(P) : NULL;
            if (!v || !nvec_push(P, &items, v)) return NULL;
        }
    }
    if (open == '(' && items.n == 1 && !comma) return items.v[0];
    jnode *n = node(P, open == '(' ? E_TUPLE : open == '[' ? E_LIST : E_DICT, t->line);
    if (n) n->kids = items.v, n->n_kids = items.n;
    return n;
}

static const jnode *parse_primary(parser *P) {
    const jtoken *t = next(P);
    char b[64];
    if (t->kind == T_NAME) return parse_name_primary(P, t);
    if (t->kind == T_STRING || t->kind == T_INT || t->kind == T_FLOAT) return parse_literal(P, t);
    if (is_op(t, "(") || is_op(t, "[") || is_op(t, "{")) return parse_collection(P, t);
    P->i--;
    return pfail(P, "unexpected %s", describe(t, b, sizeof(b)));
}

static const jnode *parse_subscript(parser *P, const jnode *obj, int line) {
    const jnode *parts[3] = {0};
    int colons = 0;
    for (;;) {
        if (is_op(peek(P), "]")) break;
        if (accept_op(P, ":")) {
            if (++colons > 2) return pfail(P, "too many ':' in a slice");
            continue;
        }
        if (parts[colons]) return pfail(P, "expected ':' or ']'");
        if (!(parts[colons] = parse_expr(P))) return NULL;
    }
    next(P);
    jnode *n = node(P, colons ? E_SLICE : E_INDEX, line);
    if (!n) return NULL;
    n->a = obj, n->b = parts[0], n->c = parts[1], n->d = parts[2];
    if (!colons && !parts[0]) return pfail(P, "empty subscript");
    return n;
}

static const jnode *parse_postfix(parser *P, const jnode *n) {
    for (;;) {
        int line = peek(P)->line;
        if (accept_op(P, ".")) {
            jnode *m = node(P, E_ATTR, line);
            const jtoken *t = peek(P);
            if (!m) return NULL;
            if (t->kind == T_INT) { /* x.0 is x[0] */
                m->kind = E_INDEX, m->b = parse_literal(P, next(P));
            } else if (!(m->name = expect_ident(P))) {
                return NULL;
            }
            m->a = n, n = m;
        } else if (accept_op(P, "[")) {
            if (!(n = parse_subscript(P, n, line))) return NULL;
        } else if (accept_op(P, "(")) {
            jnode *m = node(P, E_CALL, line);
            if (!m || !parse_args(P, m)) return NULL;
            m->a = n, n = m;
        } else {
            return n;
        }
    }
}

static bool test_arg_follows(const jtoken *t) {
    if (t->kind == T_NAME) return !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and") &&
                                  !is_name(t, "if") && !is_name(t, "in") && !is_name(t, "is") && !is_name(t, "not");
    return t->kind == T_STRING || t->kind == T_INT || t->kind == T_FLOAT || is_op(t, "[") || is_op(t, "{");
}

static const jnode *parse_filters(parser *P, const jnode *n) {
    for (;;) {
        int line = peek(P)->line;
        if (accept_op(P, "|")) {
            jnode *m = node(P, E_FILTER, line);
            if (!m || !(m->name = expect_ident(P))) return NULL;
            if (accept_op(P, "(") && !parse_args(P, m)) return NULL;
            m->a = n, n = m;
        } else if (accept_name(P, "is")) {
            jnode *m = node(P, E_TEST, line);
            if (!m) return NULL;
            m->op = accept_name(P, "not");
            if (!(m->name = expect_ident(P))) return NULL;
            if (accept_op(P, "(")) {
                if (!parse_args(P, m)) return NULL;
            } else if (test_arg_follows(peek(P))) {
                const jnode *arg = parse_unary(P, false);
                nvec one = {0};
                if (!arg || !nvec_push(P, &one, arg)) return NULL;
                m->kids = one.v, m->n_kids = 1;
            }
            m->a = n, n = m;
        } else {
            return n;
        }
    }
}

static const jnode *parse_unary(parser *P, bool with_filter) {
    if (++P->depth > MAX_NEST) return pfail(P, "expression nested too deeply");
    int line = peek(P)->line;
    const jnode *n;
    if (accept_op(P, "-") || accept_op(P, "+")) {
        jnode *m = node(P, P->t[P->i - 1].p[0] == '-' ? E_NEG : E_POS, line);
        if (!m || !(m->a = parse_unary(P, false))) return NULL;
        n = m;
    } else {
        n = parse_primary(P);
        if (n) n = parse_postfix(P, n);
    }
    if (n && with_filter) n = parse_filters(P, n);
    P->depth--;
    return n;
}

static const jnode *binary(parser *P, int op, const jnode *l, const jnode *r, int line) {
    if (!l || !r) return NULL;
    jnode *n = node(P, E_BIN, line);
    if (n) n->op = op, n->a = l, n->b = r;
    return n;
}

static const jnode *parse_pow(parser *P) {
    const jnode *l = parse_unary(P, true);
    while (l && is_op(peek(P), "**")) {
        int line = next(P)->line;
        l = binary(P, OP_POW, l, parse_unary(P, true), line);
    }
    return l;
}

static const jnode *parse_math2(parser *P) {
    const jnode *l = parse_pow(P);
    for (;;) {
        int op = is_op(peek(P), "*") ? OP_MUL : is_op(peek(P), "/") ? OP_DIV : is_op(peek(P), "//") ? OP_FLOORDIV
               : is_op(peek(P), "%") ? OP_MOD : -1;
        if (!l || op < 0) return l;
        int line = next(P)->line;
        l = binary(P, op, l, parse_pow(P), line);
    }
}

static const jnode *parse_concat(parser *P) {
    const jnode *l = parse_math2(P);
    while (l && is_op(peek(P), "~")) {
        int line = next(P)->line;
        l = binary(P, OP_CONCAT, l, parse_math2(P), line);
    }
    return l;
}

static const jnode *parse_math1(parser *P) {
    const jnode *l = parse_concat(P);
    for (;;) {
        int op = is_op(peek(P), "+") ? OP_ADD : is_op(peek(P), "-") ? OP_SUB : -1;
        if (!l || op < 0) return l;
        int line = next(P)->line;
        l = binary(P, op, l, parse_concat(P), line);
    }
}

static const jnode *parse_compare(parser *P) {
    static const struct { const char *op; int code; } ops[] = {
        {"==", OP_EQ}, {"!=", OP_NE}, {"<=", OP_LE}, {">=", OP_GE}, {"<", OP_LT}, {">", OP_GT}};
    const jnode *l = parse_math1(P);
    while (l) {
        int line = peek(P)->line, op = -1;
        for (size_t k = 0; k < ATTND_ARRAY_LEN(ops) && op < 0; k++)
            if (is_op(peek(P), ops[k].op)) op = ops[k].code;
        bool in = false, neg = false;
        if (op < 0 && is_name(peek(P), "in")) in = true;
        else if (op < 0 && is_name(peek(P), "not") && P->i + 1 < P->n && is_name(&P->t[P->i + 1], "in"))
            in = neg = true, next(P);
        if (op < 0 && !in) return l;
        next(P);
        jnode *n = node(P, in ? E_IN : E_CMP, line);
        if (!n || !(n->b = parse_math1(P))) return NULL;
        n->a = l, n->op = in ? neg : op;
        l = n;
    }
    return l;
}

static const jnode *parse_not(parser *P) {
    int line = peek(P)->line;
    if (!accept_name(P, "not")) return parse_compare(P);
    if (++P->depth > MAX_NEST) return pfail(P, "expression nested too deeply");
    jnode *n = node(P, E_NOT, line);
    if (!n || !(n->a = parse_not(P))) return NULL;
    P->depth--;
    return n;
}

/* operand (word operand)*, left-associative: "and" over not-expressions, "or" over and-expressions */
static const jnode *parse_logical(parser *P, const char *word, jnk kind, const jnode *(*operand)(parser *)) {
    const jnode *l = operand(P);
    while (l && is_name(peek(P), word)) {
        jnode *n = node(P, kind, next(P)->line);
        if (!n || !(n->b = operand(P))) return NULL;
        n->a = l, l = n;
    }
    return l;
}

static const jnode *parse_and(parser *P) { return parse_logical(P, "and", E_AND, parse_not); }

static const jnode *parse_or(parser *P) { return parse_logical(P, "or", E_OR, parse_and); }

/* or-expression [if cond [else expr]] */
static const jnode *parse_expr(parser *P) {
    if (++P->depth > MAX_NEST) return pfail(P, "expression nested too deeply");
    const jnode *l = parse_or(P);
    while (l && is_name(peek(P), "if")) {
        jnode *n = node(P, E_COND, next(P)->line);
        if (!n || !(n->b = parse_or(P))) return NULL;
        if (accept_name(P, "else") && !(n->c = parse_expr(P))) return NULL;
        n->a = l, l = n;
    }
    P->depth--;
    return l;
}

/* An expression, or several separated by commas (a tuple), as {{ }} and `for ... in` take. */
static const jnode *parse_tuple(parser *P, bool with_cond) {
    int line = peek(P)->line;
    const jnode *first = with_cond ? parse_expr(P) : parse_or(P);
    if (!first || !is_op(peek(P), ",")) return first;
    nvec items = {0};
    if (!nvec_push(P, &items, first)) return NULL;
    while (accept_op(P, ",")) {
        const jtoken *t = peek(P);
        if (t->kind == T_VAR_END || t->kind == T_BLOCK_END || is_name(t, "if")) break;
        const jnode *e = with_cond ? parse_expr(P) : parse_or(P);
        if (!e || !nvec_push(P, &items, e)) return NULL;
    }
    jnode *n = node(P, E_TUPLE, line);
    if (n) n->kids = items.v, n->n_kids = items.n;
    return n;
}

// ---- statements ---------------------------------------------------------------------------------------

static const jnode *parse_body(parser *P, const char *const *stops, const char **stopped);

static bool expect_block_end(parser *P) {
    char b[64];
    if (peek(P)->kind == T_BLOCK_END) {
        next(P);
        return true;
    }
    pfail(P, "expected end of tag, got %s", describe(peek(P), b, sizeof(b)));
    return false;
}

static const jnode *parse_if(parser *P, int line) {
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    jnode *n = node(P, N_IF, line);
    const char *stop = NULL;
    if (!n || !(n->a = parse_tuple(P, true)) || !expect_block_end(P) || !(n->b = parse_body(P, stops, &stop)))
        return NULL;
    if (!strcmp(stop, "elif")) {
        n->c = parse_if(P, peek(P)->line);
        return n->c ? n : NULL;
    }
    if (!strcmp(stop, "else")) {
        static const char *const end[] = {"endif", NULL};
        if (!expect_block_end(P) || !(n->c = parse_body(P, end, &stop))) return NULL;
    }
    return expect_block_end(P) ? n : NULL;
}

static bool parse_targets(parser *P, jnode *n) {
    nvec names = {0};
    bool paren = accept_op(P, "(");
    do {
        const char *s = expect_ident(P);
        if (!s || !nvec_push(P, &names, s)) return false;
    } while (accept_op(P, ","));
    if (paren && !expect_op(P, ")")) return false;
    n->names = (const char **)names.v, n->n_names = names.n;
    return true;
}

static const jnode *parse_for(parser *P, int line) {
    static const char *const stops[] = {"else", "endfor", NULL};
    jnode *n = node(P, N_FOR, line);
    if (!n || !parse_targets(P, n)) return NULL;
    if (!accept_name(P, "in")) return pfail(P, "expected 'in' in a for loop");
    if (!(n->a = parse_tuple(P, false))) return NULL;
    if (accept_name(P, "if") && !(n->d = parse_expr(P))) return NULL;
    if (is_name(peek(P), "recursive")) return pfail(P, "recursive loops are not supported");
    const char *stop = NULL;
    if (!expect_block_end(P) || !(n->b = parse_body(P, stops, &stop))) return NULL;
    if (!strcmp(stop, "else")) {
        static const char *const end[] = {"endfor", NULL};
        if (!expect_block_end(P) || !(n->c = parse_body(P, end, &stop))) return NULL;
    }
    return expect_block_end(P) ? n : NULL;
}

static const jnode *parse_set(parser *P, int line) {
    jnode *n = node(P, N_SET, line);
    if (!n || !parse_targets(P, n)) return NULL;
    if (n->n_names == 1 && accept_op(P, ".")) {
        n->name = n->names[0];
        if (!(n->attr = expect_ident(P))) return NULL;
    } else if (n->n_names == 1) {
        n->name = n->names[0];
    }
    if (accept_op(P, "=")) {
        if (!(n->a = parse_tuple(P, true))) return NULL;
        return expect_block_end(P) ? n : NULL;
    }
    if (n->n_names != 1 || n->attr) return pfail(P, "expected '='");
    /* {% set x %}...{% endset %}, optionally filtered: {% set x | trim %} */
    static const char *const end[] = {"endset", NULL};
    const char *stop;
    n->kind = N_SET_BLOCK;
    jnode *f = NULL;
    while (is_op(peek(P), "|")) {
        const jnode *inner = f;
        if (!(f = (jnode *)parse_filters(P, inner)) || f == inner) return NULL;
    }
    n->a = f;
    if (!expect_block_end(P) || !(n->b = parse_body(P, end, &stop))) return NULL;
    return expect_block_end(P) ? n : NULL;
}

static bool parse_params(parser *P, jnode *n) {
    nvec names = {0}, defs = {0};
    if (!expect_op(P, "(")) return false;
    while (!accept_op(P, ")")) {
        if (names.n && !expect_op(P, ",")) return false;
        if (accept_op(P, ")")) break;
        const char *s = expect_ident(P);
        const jnode *d = NULL;
        if (!s || (accept_op(P, "=") && !(d = parse_expr(P)))) return false;
        if (!d && defs.n && defs.v[defs.n - 1]) return pfail(P, "a parameter without a default follows one with"), false;
        if (!nvec_push(P, &names, s) || !nvec_push(P, &defs, d)) return false;
    }
    n->names = (const char **)names.v, n->defaults = defs.v, n->n_names = names.n;
    return true;
}

static const jnode *parse_macro(parser *P, int line) {
    static const char *const end[] = {"endmacro", NULL};
    jnode *n = node(P, N_MACRO, line);
    const char *stop;
    if (!n || !(n->name = expect_ident(P)) || !parse_params(P, n) || !expect_block_end(P) ||
        !(n->b = parse_body(P, end, &stop)))
        return NULL;
    if (peek(P)->kind == T_NAME) next(P); /* {% endmacro name %} */
    return expect_block_end(P) ? n : NULL;
}

static const jnode *parse_call_block(parser *P, int line) {
    static const char *const end[] = {"endcall", NULL};
    jnode *n = node(P, N_CALL_BLOCK, line);
    const char *stop;
    if (!n || (is_op(peek(P), "(") && !parse_params(P, n))) return NULL;
    if (!(n->a = parse_expr(P))) return NULL;
    if (n->a->kind != E_CALL) return pfail(P, "{%% call %%} needs a macro call");
    if (!expect_block_end(P) || !(n->b = parse_body(P, end, &stop))) return NULL;
    return expect_block_end(P) ? n : NULL;
}

static const jnode *parse_filter_block(parser *P, int line) {
    static const char *const end[] = {"endfilter", NULL};
    jnode *n = node(P, N_FILTER_BLOCK, line);
    const char *stop;
    if (!n) return NULL;
    jnode *f = node(P, E_FILTER, line);
    if (!f || !(f->name = expect_ident(P))) return NULL;
    if (accept_op(P, "(") && !parse_args(P, f)) return NULL;
    if (!(n->a = parse_filters(P, f)) || !expect_block_end(P) || !(n->b = parse_body(P, end, &stop))) return NULL;
    return expect_block_end(P) ? n : NULL;
}

/* After "{%" and a keyword that is not a stop word of the enclosing body. */
static const jnode *parse_stmt(parser *P, const jtoken *kw) {
    int line = kw->line;
    if (is_name(kw, "if")) return parse_if(P, line);
    if (is_name(kw, "for")) return parse_for(P, line);
    if (is_name(kw, "set")) return parse_set(P, line);
    if (is_name(kw, "macro")) return parse_macro(P, line);
    if (is_name(kw, "call")) return parse_call_block(P, line);
    if (is_name(kw, "filter")) return parse_filter_block(P, line);
    if (is_name(kw, "break") || is_name(kw, "continue")) {
        jnode *n = node(P, is_name(kw, "break") ? N_BREAK : N_CONTINUE, line);
        return n && expect_block_end(P) ? n : NULL;
    }
    if (is_name(kw, "generation")) { /* HF's assistant-mask marker: renders its body */
        static const char *const end[] = {"endgeneration", NULL};
        const char *stop;
        const jnode *b = expect_block_end(P) ? parse_body(P, end, &stop) : NULL;
        return b && expect_block_end(P) ? b : NULL;
    }
    char b[64];
    P->i--;
    return pfail(P, "unknown tag %s", describe(kw, b, sizeof(b)));
}

/* Statements up to one of stops (NULL: the end of the template); *stopped names the stop word
 * found, and the parser is left just after it. */
static const jnode *parse_body(parser *P, const char *const *stops, const char **stopped) {
    if (++P->depth > MAX_NEST) return pfail(P, "blocks nested too deeply");
    jnode *body = node(P, N_BODY, peek(P)->line);
    nvec kids = {0};
    if (!body) return NULL;
    for (;;) {
        const jtoken *t = next(P);
        const jnode *s = NULL;
        if (t->kind == T_EOF) {
            if (!stops) break;
            P->i = P->n - 1;
            size_t last = 0;
            while (stops[last + 1]) last++;
            return pfail(P, "missing {%% %s %%} before the end of the template", stops[last]);
        }
        if (t->kind == T_TEXT) {
            jnode *n = node(P, N_TEXT, t->line);
            if (!n || !(n->lit = lit_value(P, JV_STR))) return NULL;
            n->lit->s.p = t->p, n->lit->s.n = t->n;
            s = n;
        } else if (t->kind == T_VAR_BEGIN) {
            jnode *n = node(P, N_OUTPUT, t->line);
            if (!n || !(n->a = parse_tuple(P, true))) return NULL;
            char b[64];
            if (peek(P)->kind != T_VAR_END) return pfail(P, "expected '}}', got %s", describe(peek(P), b, sizeof(b)));
            next(P);
            s = n;
        } else if (t->kind == T_BLOCK_BEGIN) {
            const jtoken *kw = next(P);
            char b[64];
            if (kw->kind != T_NAME) return pfail(P, "expected a tag name, got %s", describe(kw, b, sizeof(b)));
            for (size_t k = 0; stops && stops[k]; k++)
                if (is_name(kw, stops[k])) {
                    *stopped = stops[k];
                    body->kids = kids.v, body->n_kids = kids.n;
                    P->depth--;
                    return body;
                }
            if (!(s = parse_stmt(P, kw))) return NULL;
        } else {
            char b[64];
            P->i--;
            return pfail(P, "unexpected %s", describe(t, b, sizeof(b)));
        }
        if (!nvec_push(P, &kids, s)) return NULL;
    }
    body->kids = kids.v, body->n_kids = kids.n;
    P->depth--;
    return body;
}

attnd_status jinja_parse_tree(const char *src, size_t len, jarena *a, const jnode **root, attnd_err *err) {
    jtoken *toks = NULL;
    size_t n = 0;
    attnd_status st = jinja_lex(src, len, a, &toks, &n, err);
    if (st != ATTND_OK) return st;
    parser P = {.t = toks, .n = n, .a = a, .err = err};
    const char *stop = NULL;
    const jnode *body = parse_body(&P, NULL, &stop);
    free(toks);
    if (!body) return P.failed && a->failed ? attnd_fail(err, ATTND_ERR_NOMEM, "out of memory") : ATTND_ERR_FORMAT;
    *root = body;
    return ATTND_OK;
}
