/*
 * jinja_eval.c — rendering a syntax tree: scopes (a fresh one per loop iteration and per macro
 * call, as jinja2 has them), statements, expressions with Python's semantics, and the limits
 * (steps, depth, output bytes, memory, wall-clock time) that keep a hostile template bounded.
 */
#include "jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jinja_value *eval(jinja_ctx *c, const jnode *n);
static bool exec(jinja_ctx *c, const jnode *n);

/* The clock is read every CLOCK_EVERY steps of work. */
#define CLOCK_EVERY 256

bool jinja_charge(jinja_ctx *c, uint64_t units) {
    if (c->failed) return false;
    if (units > c->lim.max_steps - (c->steps < c->lim.max_steps ? c->steps : c->lim.max_steps)) {
        c->steps = c->lim.max_steps;
        jlimit(c, "the template ran more than %llu steps (loop iterations, calls, expressions and the items and "
                  "bytes they touch)", (unsigned long long)c->lim.max_steps);
        return false;
    }
    c->steps += units;
    if (c->steps < c->next_clock) return true;
    c->next_clock = c->steps + CLOCK_EVERY;
    double ms = c->now_ms(c->clock_user) - c->start_ms;
    if (ms <= c->lim.max_time_ms) return true;
    jlimit(c, "the template ran longer than %d ms", c->lim.max_time_ms);
    return false;
}

bool jinja_charge_bytes(jinja_ctx *c, size_t n) { return jinja_charge(c, 1 + n / JINJA_BYTES_PER_STEP); }

bool jinja_charge_scan(jinja_ctx *c, size_t n) { return jinja_charge(c, 1 + n / JINJA_SCAN_BYTES_PER_STEP); }

bool jinja_step(jinja_ctx *c) { return jinja_charge(c, 1); }

// ---- scopes ------------------------------------------------------------------------------------

static bool frame_set(jinja_ctx *c, jframe *f, const char *name, jinja_value *v) {
    if (!v) return false;
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->vars[i].name, name)) {
            f->vars[i].v = v;
            return true;
        }
    jvar *vars = jarena_grow(&c->arena, f->vars, f->n, &f->cap, sizeof(*vars));
    if (!vars) return jnomem(c), false;
    f->vars = vars;
    f->vars[f->n++] = (jvar){name, v};
    return true;
}

static jframe *frame_push(jinja_ctx *c, jframe *parent) {
    jframe *f = jarena_alloc(&c->arena, sizeof(*f));
    if (!f) return jnomem(c), NULL;
    f->parent = parent;
    return f;
}

static jinja_value *lookup(jinja_ctx *c, const char *name) {
    for (jframe *f = c->frame; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->vars[i].name, name)) return f->vars[i].v;
    jinja_value *g = jinja_global_fn(c, name);
    return g ? g : c->failed ? NULL : jv_undef(c, name);
}

void jinja_ctx_set(jinja_ctx *c, const char *name, jinja_value *v) {
    if (!c || !name || !v) return;
    size_t n = strlen(name);
    char *copy = jarena_alloc(&c->arena, n + 1);
    if (!copy) return;
    memcpy(copy, name, n);
    frame_set(c, &c->globals, copy, v);
}

// ---- attribute and item access ------------------------------------------------------------------

static jinja_value *loop_attr(jinja_ctx *c, jinja_value *l, const char *name) {
    int64_t i = l->loop.index0, n = l->loop.length;
    if (!strcmp(name, "index")) return jinja_int(c, i + 1);
    if (!strcmp(name, "index0")) return jinja_int(c, i);
    if (!strcmp(name, "revindex")) return jinja_int(c, n - i);
    if (!strcmp(name, "revindex0")) return jinja_int(c, n - i - 1);
    if (!strcmp(name, "first")) return jinja_bool(c, i == 0);
    if (!strcmp(name, "last")) return jinja_bool(c, i == n - 1);
    if (!strcmp(name, "length")) return jinja_int(c, n);
    if (!strcmp(name, "depth")) return jinja_int(c, 1);
    if (!strcmp(name, "depth0")) return jinja_int(c, 0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? l->loop.items->l.v[i - 1] : jv_undef(c, "there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? l->loop.items->l.v[i + 1] : jv_undef(c, "there is no next item");
    jinja_value *m = jinja_method(c, l, name);
    return m ? m : jv_undef(c, name);
}

jinja_value *jinja_getattr(jinja_ctx *c, jinja_value *v, const char *name) {
    if (v->kind == JV_UNDEF)
        return jfail(c, "'%s' is undefined (reading its attribute '%s')", v->undef ? v->undef : "value", name);
    if (v->kind == JV_LOOP) return loop_attr(c, v, name);
    if ((v->kind == JV_NS || v->kind == JV_DICT) && !jinja_charge(c, 1 + v->d.n / 16)) return NULL;
    if (v->kind == JV_NS) {
        jinja_value *x = jv_dict_gets(v, name);
        return x ? x : jv_undef(c, name);
    }
    jinja_value *m = jinja_method(c, v, name);
    if (m || c->failed) return m;
    if (v->kind == JV_DICT) {
        jinja_value *x = jv_dict_gets(v, name);
        if (x) return x;
    }
    return jv_undef(c, name);
}

static bool seq_index(const jinja_value *key, size_t len, size_t *at) {
    if (key->kind != JV_INT && key->kind != JV_BOOL) return false;
    int64_t i = key->kind == JV_INT ? key->i : key->b;
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return false;
    *at = (size_t)i;
    return true;
}

jinja_value *jinja_getitem(jinja_ctx *c, jinja_value *v, jinja_value *key) {
    size_t at;
    if (v->kind == JV_UNDEF) return jfail(c, "'%s' is undefined (reading an item)", v->undef ? v->undef : "value");
    if (v->kind == JV_DICT || v->kind == JV_NS) {
        if (!jinja_charge(c, 1 + v->d.n / 16)) return NULL;
        jinja_value *x = jv_dict_get(v, key);
        if (x) return x;
    } else if (jv_is_seq(v)) {
        if (seq_index(key, v->l.n, &at)) return v->l.v[at];
    } else if (v->kind == JV_STR && (key->kind == JV_INT || key->kind == JV_BOOL)) {
        if (!jinja_charge_scan(c, v->s.n)) return NULL;
        size_t cps = jv_utf8_len(v->s.p, v->s.n);
        if (seq_index(key, cps, &at)) {
            size_t a = jv_utf8_offset(v->s.p, v->s.n, at), b = jv_utf8_offset(v->s.p, v->s.n, at + 1);
            return jv_substr(c, v, a, b - a);
        }
    }
    if (key->kind == JV_STR && v->kind != JV_DICT) {
        char name[128];
        if (key->s.n < sizeof(name) && !memchr(key->s.p, 0, key->s.n)) {
            memcpy(name, key->s.p, key->s.n);
            name[key->s.n] = '\0';
            jinja_value *x = v->kind == JV_LOOP ? loop_attr(c, v, name) : jinja_method(c, v, name);
            if (x || c->failed) return x;
        }
    }
    return jv_undef(c, "item");
}

// ---- slices ------------------------------------------------------------------------------------------

static bool slice_bound(jinja_ctx *c, const jnode *e, int64_t def, int64_t len, int64_t *out) {
    if (!e) {
        *out = def;
        return true;
    }
    jinja_value *v = eval(c, e);
    if (!v) return false;
    if (v->kind == JV_NONE) {
        *out = def;
        return true;
    }
    if (v->kind != JV_INT && v->kind != JV_BOOL) return jfail(c, "slice indices must be integers or None"), false;
    int64_t i = v->kind == JV_INT ? v->i : v->b;
    if (i < 0) i = i + len < 0 ? (def < 0 ? -1 : 0) : i + len;
    if (i > len) i = def < 0 && def == -1 ? len - 1 : len;
    *out = i;
    return true;
}

/* The items a slice takes: the count, charged before the work. */
static uint64_t slice_count(int64_t start, int64_t stop, int64_t step) {
    if (step > 0) return start < stop ? (uint64_t)(stop - start - 1) / (uint64_t)step + 1 : 0;
    return start > stop ? (uint64_t)(start - stop - 1) / (uint64_t)(-step) + 1 : 0;
}

static jinja_value *eval_slice(jinja_ctx *c, const jnode *n) {
    jinja_value *v = eval(c, n->a);
    if (!v) return NULL;
    bool is_str = v->kind == JV_STR;
    if (!is_str && !jv_is_seq(v)) return v->kind == JV_UNDEF ? jfail(c, "'%s' is undefined", v->undef ? v->undef : "value")
                                                              : jfail(c, "'%s' object is not subscriptable", jv_type_name(v));
    if (is_str && !jinja_charge_scan(c, v->s.n)) return NULL;
    int64_t len = is_str ? (int64_t)jv_utf8_len(v->s.p, v->s.n) : (int64_t)v->l.n, step = 1, start, stop;
    if (n->d) {
        jinja_value *s = eval(c, n->d);
        if (!s) return NULL;
        if (s->kind == JV_INT) step = s->i;
        else if (s->kind != JV_NONE) return jfail(c, "slice indices must be integers or None");
        if (step == 0) return jfail(c, "slice step cannot be zero");
        if (step == INT64_MIN) step = -INT64_MAX;
    }
    if (!slice_bound(c, n->b, step > 0 ? 0 : len - 1, len, &start) ||
        !slice_bound(c, n->c, step > 0 ? len : -1, len, &stop))
        return NULL;
    if (step < 0 && start >= len) start = len - 1;
    if (is_str && step == 1) { /* a run of code points: one copy */
        size_t a = jv_utf8_offset(v->s.p, v->s.n, (size_t)start);
        size_t b = start < stop ? jv_utf8_offset(v->s.p, v->s.n, (size_t)stop) : a;
        return jv_substr(c, v, a, b - a);
    }
    jinja_value *items = is_str ? jv_iter_list(c, v) : v;
    jinja_value *out = items && jinja_charge(c, slice_count(start, stop, step)) ? jv_new(c, v->kind == JV_TUPLE ? JV_TUPLE : JV_LIST) : NULL;
    if (!out) return NULL;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (!jv_push(c, out, items->l.v[i])) return NULL;
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    if (!is_str) return out;
    jsb b = {.limit = c->lim.max_output};
    for (size_t i = 0; i < out->l.n; i++) jsb_put_str(&b, out->l.v[i]);
    return jv_str_sb(c, &b);
}

// ---- arithmetic ------------------------------------------------------------------------------------------

static bool num(const jinja_value *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }
static double fl(const jinja_value *v) { return v->kind == JV_FLOAT ? v->f : v->kind == JV_INT ? (double)v->i : v->b; }
static int64_t in(const jinja_value *v) { return v->kind == JV_INT ? v->i : v->b; }

static jinja_value *concat(jinja_ctx *c, jinja_value *a, jinja_value *b) {
    size_t na = a->kind == JV_STR ? a->s.n : 0, nb = b->kind == JV_STR ? b->s.n : 0;
    if (na > c->lim.max_output || nb > c->lim.max_output - na)
        return jlimit(c, "a string exceeds the template's size limit (%zu bytes)", c->lim.max_output);
    if (!jinja_charge_bytes(c, na + nb)) return NULL;
    jsb s = {.limit = c->lim.max_output};
    jv_to_str(&s, a);
    jv_to_str(&s, b);
    return jv_str_sb(c, &s);
}

/* seq * times. The size is checked before any work, without overflow: a count beyond the
 * output limit is refused even for an empty seq (no template needs one). */
static jinja_value *repeat(jinja_ctx *c, jinja_value *seq, int64_t times) {
    bool str = seq->kind == JV_STR;
    size_t n = str ? seq->s.n : seq->l.n;
    uint64_t t = times < 0 ? 0 : (uint64_t)times;
    if (t > c->lim.max_output || (n && t > c->lim.max_output / n))
        return jlimit(c, "repeating a %s of %zu %s %llu times exceeds the template's size limit (%zu)",
                      str ? "string" : "sequence", n, str ? "bytes" : "items", (unsigned long long)t, c->lim.max_output);
    if (!(str ? jinja_charge_bytes(c, n * t) : jinja_charge(c, n * t))) return NULL;
    if (str) {
        jsb s = {.limit = c->lim.max_output};
        jsb_repeat(&s, seq, t);
        return jv_str_sb(c, &s);
    }
    jinja_value *out = jv_new(c, seq->kind);
    for (uint64_t i = 0; out && i < t; i++)
        for (size_t k = 0; k < n; k++)
            if (!jv_push(c, out, seq->l.v[k])) return NULL;
    return out;
}

static jinja_value *int_arith(jinja_ctx *c, int op, int64_t x, int64_t y) {
    int64_t r = 0;
    bool ovf = false;
    switch (op) {
    case OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
    case OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
    case OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
    case OP_FLOORDIV: case OP_MOD:
        if (y == 0) return jfail(c, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) return jfail(c, "integer overflow");
        r = op == OP_MOD ? x % y : x / y;
        if (op == OP_MOD && r != 0 && ((r < 0) != (y < 0))) r += y;
        if (op == OP_FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0))) r -= 1;
        break;
    case OP_POW:
        if (y < 0) return jinja_float(c, pow((double)x, (double)y));
        r = 1;
        for (int64_t i = 0; i < y && !ovf; i++) {
            ovf = __builtin_mul_overflow(r, x, &r);
            if (x == 0 || x == 1 || r == 0) break;
            if (x == -1) { r = (y % 2) ? -1 : 1; break; }
        }
        break;
    }
    if (ovf) return jfail(c, "integer overflow");
    return jinja_int(c, r);
}

static jinja_value *float_arith(jinja_ctx *c, int op, double x, double y) {
    switch (op) {
    case OP_ADD: return jinja_float(c, x + y);
    case OP_SUB: return jinja_float(c, x - y);
    case OP_MUL: return jinja_float(c, x * y);
    case OP_DIV:
        if (y == 0) return jfail(c, "division by zero");
        return jinja_float(c, x / y);
    case OP_FLOORDIV:
        if (y == 0) return jfail(c, "float floor division by zero");
        return jinja_float(c, floor(x / y));
    case OP_MOD: {
        if (y == 0) return jfail(c, "float modulo");
        double r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return jinja_float(c, r);
    }
    default: return jinja_float(c, pow(x, y));
    }
}

static jinja_value *arith(jinja_ctx *c, int op, jinja_value *a, jinja_value *b) {
    if (op == OP_CONCAT) return concat(c, a, b);
    if (num(a) && num(b)) {
        if (op == OP_DIV) return float_arith(c, op, fl(a), fl(b));
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) return int_arith(c, op, in(a), in(b));
        return float_arith(c, op, fl(a), fl(b));
    }
    if (op == OP_ADD && a->kind == JV_STR && b->kind == JV_STR) return concat(c, a, b);
    if (op == OP_ADD && jv_is_seq(a) && a->kind == b->kind) {
        jinja_value *out = jinja_charge(c, a->l.n + b->l.n) ? jv_new(c, a->kind) : NULL;
        for (size_t i = 0; out && i < a->l.n; i++) if (!jv_push(c, out, a->l.v[i])) return NULL;
        for (size_t i = 0; out && i < b->l.n; i++) if (!jv_push(c, out, b->l.v[i])) return NULL;
        return out;
    }
    if (op == OP_MUL && (a->kind == JV_STR || jv_is_seq(a)) && (b->kind == JV_INT || b->kind == JV_BOOL)) return repeat(c, a, in(b));
    if (op == OP_MUL && (b->kind == JV_STR || jv_is_seq(b)) && (a->kind == JV_INT || a->kind == JV_BOOL)) return repeat(c, b, in(a));
    if (a->kind == JV_UNDEF || b->kind == JV_UNDEF) {
        const jinja_value *u = a->kind == JV_UNDEF ? a : b;
        return jfail(c, "'%s' is undefined", u->undef ? u->undef : "value");
    }
    static const char *sym[] = {"+", "-", "*", "/", "//", "%", "**"};
    return jfail(c, "unsupported operand type(s) for %s: '%s' and '%s'", sym[op], jv_type_name(a), jv_type_name(b));
}

static jinja_value *contains(jinja_ctx *c, jinja_value *hay, jinja_value *x) {
    if (hay->kind == JV_STR) {
        if (x->kind != JV_STR) return jfail(c, "'in <string>' requires string as left operand, not %s", jv_type_name(x));
        if (!jinja_charge_scan(c, hay->s.n + x->s.n)) return NULL;
        return jinja_bool(c, jv_find(hay->s.p, hay->s.n, x->s.p, x->s.n) != NULL);
    }
    if (hay->kind == JV_DICT || hay->kind == JV_NS)
        return jinja_charge(c, 1 + hay->d.n / 16) ? jinja_bool(c, jv_dict_get(hay, x) != NULL) : NULL;
    if (jv_is_seq(hay)) {
        bool eq = false;
        for (size_t i = 0; i < hay->l.n && !eq; i++)
            if (!jv_equal_charged(c, x, hay->l.v[i], &eq)) return NULL;
        return jinja_bool(c, eq);
    }
    if (hay->kind == JV_UNDEF) return jinja_bool(c, false);
    return jfail(c, "argument of type '%s' is not iterable", jv_type_name(hay));
}

static jinja_value *compare(jinja_ctx *c, int op, jinja_value *a, jinja_value *b) {
    bool eq;
    if (op == OP_EQ || op == OP_NE) return jv_equal_charged(c, a, b, &eq) ? jinja_bool(c, eq == (op == OP_EQ)) : NULL;
    bool ok;
    int r = jv_compare(c, a, b, &ok);
    if (!ok) return NULL;
    return jinja_bool(c, op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0);
}

// ---- calls ------------------------------------------------------------------------------------------------

typedef struct argv {
    jinja_value **v;
    size_t n;
    const char **kwn;
    jinja_value **kwv;
    size_t n_kw;
} argv;

static bool eval_args(jinja_ctx *c, const jnode *n, argv *a) {
    *a = (argv){0};
    a->v = jarena_alloc(&c->arena, (n->n_kids + 1) * sizeof(*a->v));
    a->kwv = jarena_alloc(&c->arena, (n->n_kw + 1) * sizeof(*a->kwv));
    if (!a->v || !a->kwv) return jnomem(c), false;
    for (size_t i = 0; i < n->n_kids; i++)
        if (!(a->v[i] = eval(c, n->kids[i]))) return false;
    for (size_t i = 0; i < n->n_kw; i++)
        if (!(a->kwv[i] = eval(c, n->kwv[i]))) return false;
    a->n = n->n_kids, a->kwn = n->kwn, a->n_kw = n->n_kw;
    return true;
}

/* A macro (or a call block's body, as caller()) with its arguments bound in a fresh scope. */
static jinja_value *call_macro(jinja_ctx *c, jinja_value *fn, jinja_value **args, size_t n, const char **kwn,
                               jinja_value **kwv, size_t n_kw) {
    const jnode *m = fn->fn.macro;
    if (n > m->n_names) return jfail(c, "macro '%s' takes not more than %zu argument(s)", fn->fn.name, m->n_names);
    if (++c->depth > c->lim.max_depth) {
        c->depth--;
        return jlimit(c, "macro calls nested deeper than %d", c->lim.max_depth);
    }
    jframe *saved = c->frame, *f = frame_push(c, fn->fn.scope);
    jsb *saved_out = c->out, out = {.limit = c->lim.max_output};
    jinja_value *caller = c->caller, *result = NULL;
    c->caller = NULL;
    if (!f) goto done;
    c->frame = f;
    for (size_t k = 0; k < n_kw; k++) {
        size_t i = 0;
        while (i < m->n_names && strcmp(m->names[i], kwn[k])) i++;
        if (i == m->n_names) {
            jfail(c, "macro '%s' takes no keyword argument '%s'", fn->fn.name, kwn[k]);
            goto done;
        }
    }
    for (size_t i = 0; i < m->n_names; i++) {
        jinja_value *v = i < n ? args[i] : jinja_kwarg(kwn, kwv, n_kw, m->names[i]);
        if (!v) v = m->defaults && m->defaults[i] ? eval(c, m->defaults[i]) : jv_undef(c, m->names[i]);
        if (!v || !frame_set(c, f, m->names[i], v)) goto done;
    }
    if (caller && !frame_set(c, f, "caller", caller)) goto done;
    c->out = &out;
    if (exec(c, m->b)) result = jv_str_sb(c, &out);
done:
    jsb_free(&out);
    c->out = saved_out, c->frame = saved, c->caller = caller;
    c->depth--;
    return result;
}

jinja_value *jinja_call_value(jinja_ctx *c, jinja_value *fn, jinja_value **args, size_t n, const char **kwn,
                              jinja_value **kwv, size_t n_kw) {
    if (!jinja_step(c)) return NULL;
    if (fn->kind == JV_UNDEF) return jfail(c, "'%s' is undefined", fn->undef ? fn->undef : "value");
    if (fn->kind != JV_FUNC) return jfail(c, "'%s' object is not callable", jv_type_name(fn));
    if (fn->fn.macro) return call_macro(c, fn, args, n, kwn, kwv, n_kw);
    return fn->fn.fn(c, fn, args, n, kwn, kwv, n_kw);
}

static jinja_value *eval_call(jinja_ctx *c, const jnode *n) {
    jinja_value *fn = eval(c, n->a);
    argv a;
    if (!fn || !eval_args(c, n, &a)) return NULL;
    return jinja_call_value(c, fn, a.v, a.n, a.kwn, a.kwv, a.n_kw);
}

/* A filter chain; the innermost filter without input (a filter block, a filtered set block)
 * takes `input`. */
static jinja_value *eval_filter(jinja_ctx *c, const jnode *n, jinja_value *input) {
    jinja_value *v = !n->a ? input : n->a->kind == E_FILTER ? eval_filter(c, n->a, input) : eval(c, n->a);
    argv a;
    if (!v || !eval_args(c, n, &a)) return NULL;
    c->line = n->line;
    return jinja_call_filter(c, n->name, v, a.v, a.n, a.kwn, a.kwv, a.n_kw);
}

static jinja_value *eval_test(jinja_ctx *c, const jnode *n) {
    jinja_value *v = eval(c, n->a);
    argv a;
    if (!v || !eval_args(c, n, &a)) return NULL;
    jinja_value *r = jinja_call_test(c, n->name, v, a.v, a.n);
    if (!r) return NULL;
    return n->op ? jinja_bool(c, !r->b) : r;
}

// ---- expressions --------------------------------------------------------------------------------------------

static jinja_value *eval_collection(jinja_ctx *c, const jnode *n) {
    jinja_value *v = jv_new(c, n->kind == E_LIST ? JV_LIST : n->kind == E_TUPLE ? JV_TUPLE : JV_DICT);
    if (!v) return NULL;
    for (size_t i = 0; i < n->n_kids; i++) {
        jinja_value *x = eval(c, n->kids[i]);
        if (!x) return NULL;
        if (n->kind != E_DICT) {
            if (!jv_push(c, v, x)) return NULL;
            continue;
        }
        jinja_value *y = eval(c, n->kids[++i]);
        if (!y || !jv_dict_put(c, v, x, y)) return NULL;
    }
    return v;
}

static jinja_value *eval_op(jinja_ctx *c, const jnode *n) {
    jinja_value *a = eval(c, n->a), *b;
    if (!a) return NULL;
    switch (n->kind) {
    case E_NEG: case E_POS:
        if (!num(a)) return jfail(c, "bad operand type for unary %c: '%s'", n->kind == E_NEG ? '-' : '+', jv_type_name(a));
        if (n->kind == E_POS) return a->kind == JV_BOOL ? jinja_int(c, a->b) : a;
        if (a->kind == JV_FLOAT) return jinja_float(c, -a->f);
        if (in(a) == INT64_MIN) return jfail(c, "integer overflow");
        return jinja_int(c, -in(a));
    case E_NOT: return jinja_bool(c, !jv_truthy(a));
    case E_AND: return !jv_truthy(a) ? a : eval(c, n->b);
    case E_OR: return jv_truthy(a) ? a : eval(c, n->b);
    default: break;
    }
    if (!(b = eval(c, n->b))) return NULL;
    c->line = n->line;
    if (n->kind == E_BIN) return arith(c, n->op, a, b);
    if (n->kind == E_CMP) return compare(c, n->op, a, b);
    jinja_value *r = contains(c, b, a); /* E_IN */
    return r && n->op ? jinja_bool(c, !r->b) : r;
}

static jinja_value *eval(jinja_ctx *c, const jnode *n) {
    if (!jinja_step(c)) return NULL;
    switch (n->kind) {
    case E_LIT: return n->lit;
    case E_NAME: return lookup(c, n->name);
    case E_LIST: case E_TUPLE: case E_DICT: return eval_collection(c, n);
    case E_ATTR: {
        jinja_value *v = eval(c, n->a);
        if (v) c->line = n->line;
        return v ? jinja_getattr(c, v, n->name) : NULL;
    }
    case E_INDEX: {
        jinja_value *v = eval(c, n->a), *k = v ? eval(c, n->b) : NULL;
        if (k) c->line = n->line;
        return k ? jinja_getitem(c, v, k) : NULL;
    }
    case E_SLICE: return eval_slice(c, n);
    case E_CALL: {
        int line = n->line;
        jinja_value *r = eval_call(c, n);
        if (!r && !c->failed) c->line = line;
        return r;
    }
    case E_FILTER: return eval_filter(c, n, NULL);
    case E_TEST: return eval_test(c, n);
    case E_COND: {
        jinja_value *cond = eval(c, n->b);
        if (!cond) return NULL;
        if (jv_truthy(cond)) return eval(c, n->a);
        return n->c ? eval(c, n->c) : jv_undef(c, "the conditional expression's else");
    }
    default: return eval_op(c, n);
    }
}

// ---- statements ----------------------------------------------------------------------------------------------

static bool bind_targets(jinja_ctx *c, jframe *f, const jnode *n, jinja_value *item) {
    if (n->n_names == 1) return frame_set(c, f, n->names[0], item);
    jinja_value *parts = jv_iter_list(c, item);
    if (!parts) return false;
    if (parts->l.n != n->n_names)
        return jfail(c, "cannot unpack %zu values into %zu names", parts->l.n, n->n_names), false;
    for (size_t i = 0; i < n->n_names; i++)
        if (!frame_set(c, f, n->names[i], parts->l.v[i])) return false;
    return true;
}

/* The items a loop visits: its iterable, filtered by its `if`, evaluated with each item bound. */
static jinja_value *loop_items(jinja_ctx *c, const jnode *n) {
    jinja_value *it = eval(c, n->a);
    if (!it) return NULL;
    c->line = n->line;
    jinja_value *items = jv_iter_list(c, it);
    if (!items || !n->d) return items;
    jinja_value *kept = jv_new(c, JV_LIST);
    jframe *saved = c->frame;
    for (size_t i = 0; kept && i < items->l.n; i++) {
        jframe *f = frame_push(c, saved);
        if (!f || !jinja_step(c) || !bind_targets(c, f, n, items->l.v[i])) return c->frame = saved, NULL;
        c->frame = f;
        jinja_value *keep = eval(c, n->d);
        c->frame = saved;
        if (!keep) return NULL;
        if (jv_truthy(keep) && !jv_push(c, kept, items->l.v[i])) return NULL;
    }
    return kept;
}

static bool exec_for(jinja_ctx *c, const jnode *n) {
    jinja_value *items = loop_items(c, n);
    if (!items) return false;
    jinja_value *loop = jv_new(c, JV_LOOP);
    if (!loop) return false;
    loop->loop.items = items, loop->loop.length = (int64_t)items->l.n;
    jframe *saved = c->frame;
    bool ok = true;
    for (size_t i = 0; ok && i < items->l.n; i++) {
        jinja_value *li = jv_new(c, JV_LOOP);
        jframe *f = li ? frame_push(c, saved) : NULL;
        if (!f || !jinja_step(c)) { ok = false; break; }
        *li = *loop, li->loop.index0 = (int64_t)i;
        c->frame = f;
        ok = bind_targets(c, f, n, items->l.v[i]) && frame_set(c, f, "loop", li) && exec(c, n->b);
        c->frame = saved;
        if (c->brk == 1) { c->brk = 0; break; }
        c->brk = 0;
    }
    if (ok && items->l.n == 0 && n->c) ok = exec(c, n->c);
    return ok;
}

/* A block's output as a string (a set block, a filter block), then through its filters. */
static jinja_value *capture(jinja_ctx *c, const jnode *body, const jnode *filters) {
    jsb *saved = c->out, out = {.limit = c->lim.max_output};
    c->out = &out;
    bool ok = exec(c, body);
    c->out = saved;
    jinja_value *v = ok ? jv_str_sb(c, &out) : NULL;
    jsb_free(&out);
    return v && filters ? eval_filter(c, filters, v) : v;
}

static bool exec_set(jinja_ctx *c, const jnode *n) {
    jinja_value *v;
    if (n->kind == N_SET_BLOCK) {
        v = capture(c, n->b, n->a);
    } else {
        v = eval(c, n->a);
    }
    if (!v) return false;
    c->line = n->line;
    if (n->attr) {
        jinja_value *ns = lookup(c, n->name);
        if (!ns) return false;
        if (ns->kind != JV_NS) return jfail(c, "cannot assign attribute on non-namespace object '%s'", n->name), false;
        return jv_dict_put(c, ns, jv_cstr(c, n->attr), v);
    }
    return n->n_names == 1 ? frame_set(c, c->frame, n->name, v) : bind_targets(c, c->frame, n, v);
}

static jinja_value *make_macro(jinja_ctx *c, const jnode *n, const char *name) {
    jinja_value *fn = jv_new(c, JV_FUNC);
    if (fn) fn->fn.macro = n, fn->fn.scope = c->frame, fn->fn.name = name;
    return fn;
}

/* Prints v where output goes now, charged by the bytes written. */
static bool print(jinja_ctx *c, const jinja_value *v) {
    size_t before = c->out->t.len;
    jv_to_str(c->out, v);
    return jinja_charge_bytes(c, c->out->t.len - before);
}

static bool exec_stmt(jinja_ctx *c, const jnode *n) {
    c->line = n->line;
    jinja_value *v;
    if (!jinja_step(c)) return false;
    switch (n->kind) {
    case N_BODY:
        for (size_t i = 0; i < n->n_kids && !c->brk; i++)
            if (!exec(c, n->kids[i])) return false;
        return true;
    case N_TEXT: return print(c, n->lit);
    case N_OUTPUT: return (v = eval(c, n->a)) && print(c, v);
    case N_IF:
        if (!(v = eval(c, n->a))) return false;
        return jv_truthy(v) ? exec(c, n->b) : n->c ? exec(c, n->c) : true;
    case N_FOR: return exec_for(c, n);
    case N_SET: case N_SET_BLOCK: return exec_set(c, n);
    case N_MACRO: return frame_set(c, c->frame, n->name, make_macro(c, n, n->name));
    case N_CALL_BLOCK: {
        jinja_value *body = make_macro(c, n, "caller"), *saved = c->caller;
        if (!body) return false;
        c->caller = body;
        v = eval(c, n->a);
        c->caller = saved;
        return v && print(c, v);
    }
    case N_FILTER_BLOCK: return (v = capture(c, n->b, n->a)) && print(c, v);
    case N_BREAK: c->brk = 1; return true;
    case N_CONTINUE: c->brk = 2; return true;
    default: return jfail(c, "internal: a statement of kind %d", (int)n->kind), false;
    }
}

static bool exec(jinja_ctx *c, const jnode *n) {
    if (c->failed) return false;
    bool ok = exec_stmt(c, n);
    if (ok && c->out->failed) {
        jlimit(c, "the rendering exceeds the output limit (%zu bytes)", c->lim.max_output);
        return false;
    }
    return ok && !c->failed;
}

// ---- the public entry points ---------------------------------------------------------------------------------

void jinja_template_destroy(jinja_template *t) {
    if (!t) return;
    jarena_free(&t->arena);
    free(t);
}

attnd_status jinja_parse(const char *src, size_t len, jinja_template **out, attnd_err *err) {
    *out = NULL;
    jinja_template *t = calloc(1, sizeof(*t));
    if (!t) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    attnd_status st = jinja_parse_tree(src ? src : "", src ? len : 0, &t->arena, &t->root, err);
    if (st != ATTND_OK) {
        jinja_template_destroy(t);
        return st;
    }
    *out = t;
    return ATTND_OK;
}

static double wall_ms(void *user) {
    (void)user;
    return attnd_now_s() * 1e3;
}

jinja_ctx *jinja_ctx_create(const jinja_limits *lim) {
    jinja_ctx *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->lim = (jinja_limits){8u << 20, 64u << 20, 4000000, 64, 1000};
    if (lim) {
        if (lim->max_output) c->lim.max_output = lim->max_output;
        if (lim->max_memory) c->lim.max_memory = lim->max_memory;
        if (lim->max_steps) c->lim.max_steps = lim->max_steps;
        if (lim->max_depth) c->lim.max_depth = lim->max_depth > UINT16_MAX - 1 ? UINT16_MAX - 1 : lim->max_depth;
        if (lim->max_time_ms) c->lim.max_time_ms = lim->max_time_ms;
    }
    c->now_ms = wall_ms;
    c->start_ms = wall_ms(NULL); /* jinja_render starts it again: building values is not its time */
    c->next_clock = CLOCK_EVERY;
    c->arena.budget = c->lim.max_memory;
    c->line = 1;
    return c;
}

void jinja_ctx_destroy(jinja_ctx *c) {
    if (!c) return;
    jarena_free(&c->arena);
    free(c);
}

void jinja_ctx_set_clock(jinja_ctx *c, double (*now_ms)(void *user), void *user) {
    if (!c) return;
    c->now_ms = now_ms ? now_ms : wall_ms;
    c->clock_user = now_ms ? user : NULL;
    c->start_ms = c->now_ms(c->clock_user);
}

void jinja_ctx_set_now(jinja_ctx *c, const struct tm *now) {
    if (!c || !now) return;
    c->now = *now;
    c->now_set = true;
}

static attnd_status output_take(jsb *b, jinja_output *out) {
    const char *m = b->m.p;
    size_t n = 0;
    for (size_t i = 0; i < b->t.len; i++) n += i == 0 || m[i] != m[i - 1];
    out->segs = malloc((n ? n : 1) * sizeof(*out->segs));
    if (!out->segs) return ATTND_ERR_NOMEM;
    for (size_t i = 0; i < b->t.len; i++) {
        if (i == 0 || m[i] != m[i - 1]) out->segs[out->n_segs++] = (jinja_seg){i, 0, m[i] != 0};
        out->segs[out->n_segs - 1].len++;
    }
    out->text = b->t.p ? b->t.p : calloc(1, 1);
    if (!out->text) return free(out->segs), out->segs = NULL, out->n_segs = 0, ATTND_ERR_NOMEM;
    out->len = b->t.len;
    buf_free(&b->m);
    *b = (jsb){0};
    return ATTND_OK;
}

attnd_status jinja_render(jinja_ctx *c, const jinja_template *t, jinja_output *out, attnd_err *err) {
    *out = (jinja_output){0};
    jsb b = {.limit = c->lim.max_output};
    c->start_ms = c->now_ms(c->clock_user);
    c->next_clock = c->steps + CLOCK_EVERY;
    jframe *root = frame_push(c, &c->globals);
    c->out = &b;
    c->frame = root;
    bool ok = root && !c->arena.failed && exec(c, t->root);
    if (!ok && !c->failed) jnomem(c);
    if (ok && output_take(&b, out) != ATTND_OK) {
        ok = false;
        c->st = ATTND_ERR_NOMEM;
        snprintf(c->err.msg, sizeof(c->err.msg), "out of memory");
    }
    jsb_free(&b);
    c->out = NULL;
    if (ok) return ATTND_OK;
    if (err) *err = c->err;
    return c->st;
}

void jinja_output_free(jinja_output *o) {
    if (!o) return;
    free(o->text);
    free(o->segs);
    *o = (jinja_output){0};
}
