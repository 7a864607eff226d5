/*
 * jinja_internal.h — the engine's shared types: values, the arena they live in, the syntax
 * tree, and the render context. Private to server/jinja/.
 */
#ifndef ATTND_SERVER_JINJA_INTERNAL_H
#define ATTND_SERVER_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "attnd/buf.h"
#include "jinja.h"

// ---- arena: everything of one template or one render, freed at once ---------------------

typedef struct jarena_chunk jarena_chunk;
typedef struct jarena {
    jarena_chunk *head;
    size_t used, budget; /* bytes handed out in all; budget 0 = unbounded */
    bool failed;         /* latched: an allocation failed or the budget ran out */
} jarena;

void *jarena_alloc(jarena *a, size_t n); /* zeroed, 16-aligned; NULL when failed */
/* The arena's one growth helper for arrays: items (n of elem bytes, room for *cap) itself when
 * there is room for one more, else a copy with *cap doubled (from 8); the old block stays in the
 * arena. NULL when the arena is out of room. */
void *jarena_grow(jarena *a, void *items, size_t n, size_t *cap, size_t elem);
void jarena_free(jarena *a);

// ---- values -----------------------------------------------------------------------------

typedef enum jkind {
    JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
    JV_LIST, JV_TUPLE, JV_DICT, JV_NS, JV_FUNC, JV_LOOP,
} jkind;

typedef struct jnode jnode;
typedef struct jframe jframe;
typedef struct jinja_ctx jinja_ctx;
typedef jinja_value *(*jbuiltin)(jinja_ctx *c, jinja_value *fn, jinja_value **args, size_t n,
                                 const char **kwn, jinja_value **kwv, size_t n_kw);

struct jinja_value {
    jkind kind;
    uint16_t depth;         /* list, tuple, dict, namespace: 1 + the deepest item's (items that
                             * are not lists, tuples or dicts count 0); bounded by max_depth */
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; const uint8_t *m; size_t n; } s;       /* m: (n) 1 = data; NULL = all literal */
        struct { jinja_value **v; size_t n, cap; } l;                  /* list, tuple */
        struct { jinja_value **k, **v; size_t n, cap; } d;             /* dict, namespace */
        struct { jbuiltin fn; jinja_value *self; const jnode *macro; jframe *scope; const char *name; } fn;
        struct { int64_t index0, length; jinja_value *items; } loop;
        const char *undef;                                             /* what was missing, for messages */
    };
};

// ---- strings being built, with their provenance ----------------------------------------------

typedef struct jsb {
    buf t;           /* the text (t.len bytes) */
    buf m;           /* (t.len) provenance of each byte: 1 = data */
    bool any_data;
    bool failed;     /* latched: out of memory or over the limit */
    size_t limit;    /* 0 = none */
} jsb;

void jsb_put(jsb *b, const char *p, size_t n, int prov);
void jsb_puts(jsb *b, const char *s);
void jsb_put_str(jsb *b, const jinja_value *s); /* a JV_STR, with its marks */
void jsb_put_sub(jsb *b, const jinja_value *s, size_t off, size_t n);
void jsb_repeat(jsb *b, const jinja_value *s, uint64_t times); /* s written times times */
void jsb_free(jsb *b);

// ---- the syntax tree ------------------------------------------------------------------------

typedef enum jnk {
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_CALL_BLOCK,
    N_FILTER_BLOCK, N_BREAK, N_CONTINUE,
    /* expressions */
    E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_INDEX, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_NEG, E_POS, E_NOT, E_BIN, E_AND, E_OR, E_CMP, E_IN, E_COND,
} jnk;

/* Binary and comparison operators (E_BIN, E_CMP). */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };

struct jnode {
    jnk kind;
    int line;
    int op;                 /* operator; E_TEST / E_IN: 1 = negated */
    const jnode *a, *b, *c, *d;
    const jnode **kids;     /* (n_kids) body statements, items, positional arguments */
    size_t n_kids;
    const char *name;       /* E_NAME, E_ATTR, E_FILTER, E_TEST, N_SET target, N_MACRO */
    const char *attr;       /* N_SET: namespace attribute */
    const char **names;     /* (n_names) N_FOR / N_SET targets, N_MACRO / N_CALL_BLOCK parameters */
    const jnode **defaults; /* (n_names) parameter defaults, NULL entries for none */
    size_t n_names;
    const char **kwn;       /* (n_kw) keyword arguments */
    const jnode **kwv;
    size_t n_kw;
    jinja_value *lit;       /* E_LIT, N_TEXT */
};

struct jinja_template {
    jarena arena;
    const jnode *root;
};

/* Lexes and parses src into a tree in arena a (jinja_parse's work). */
attnd_status jinja_parse_tree(const char *src, size_t len, jarena *a, const jnode **root, attnd_err *err);

// ---- rendering -----------------------------------------------------------------------------

typedef struct jvar {
    const char *name;
    jinja_value *v;
} jvar;

struct jframe {
    jframe *parent;
    jvar *vars;
    size_t n, cap;
};

struct jinja_ctx {
    jarena arena;
    jinja_limits lim;
    jframe globals;
    jframe *frame;           /* innermost scope */
    jsb *out;                /* where output goes now (a set block or macro swaps it) */
    uint64_t steps;          /* work done, against lim.max_steps */
    uint64_t next_clock;     /* steps at which the wall clock is read next */
    double (*now_ms)(void *user);
    void *clock_user;
    double start_ms;         /* when jinja_render began, by now_ms */
    int depth;
    int line;                /* the line being rendered, for errors */
    bool failed;             /* an error is set in err */
    attnd_status st;
    attnd_err err;
    struct tm now;
    bool now_set;
    int brk;                 /* 1 = break, 2 = continue pending */
    jinja_value *caller;     /* the call block's body inside a macro called from one */
};

/* Writes "template line <line>: <message>" into err (NULL: nowhere) and returns
 * ATTND_ERR_FORMAT: the one shape of every parse and render error. */
attnd_status jinja_vfail(attnd_err *err, int line, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
/* Sets the render error (first one wins) and returns NULL, for `return jfail(c, ...)`. */
jinja_value *jfail(jinja_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jinja_value *jnomem(jinja_ctx *c);
/* Like jfail, for a render that ran out of one of its bounds: the status is ATTND_ERR_NOMEM. */
jinja_value *jlimit(jinja_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// ---- value helpers (jinja_value.c) ----------------------------------------------------------

jinja_value *jv_new(jinja_ctx *c, jkind k);
jinja_value *jv_undef(jinja_ctx *c, const char *what);
jinja_value *jv_str_sb(jinja_ctx *c, jsb *b);          /* takes b's text (b freed) */
jinja_value *jv_cstr(jinja_ctx *c, const char *s);     /* literal */
jinja_value *jv_substr(jinja_ctx *c, const jinja_value *s, size_t off, size_t n);
jinja_value *jv_str_like(jinja_ctx *c, const char *p, size_t n, const jinja_value *src); /* data if src had any */
bool jv_push(jinja_ctx *c, jinja_value *list, jinja_value *v);
jinja_value *jv_too_deep(jinja_ctx *c); /* the depth error (NULL) */
bool jv_dict_put(jinja_ctx *c, jinja_value *d, jinja_value *k, jinja_value *v);
jinja_value *jv_dict_get(const jinja_value *d, const jinja_value *k);
jinja_value *jv_dict_gets(const jinja_value *d, const char *k);
bool jv_str_eq(const jinja_value *s, const char *lit);
bool jv_has_data(const jinja_value *s);
bool jv_truthy(const jinja_value *v);
bool jv_equal(const jinja_value *a, const jinja_value *b);
/* jv_equal charged to the budget by the size of a (false, error set, when over it). */
bool jv_equal_charged(jinja_ctx *c, const jinja_value *a, const jinja_value *b, bool *eq);
/* Appends k: v to a dict whose keys are known distinct (no lookup): building from JSON. */
bool jv_dict_append(jinja_ctx *c, jinja_value *d, jinja_value *k, jinja_value *v);
int jv_compare(jinja_ctx *c, const jinja_value *a, const jinja_value *b, bool *ok); /* <0, 0, >0 */
const char *jv_type_name(const jinja_value *v);
bool jv_is_seq(const jinja_value *v);                  /* list or tuple */
/* str(v) and repr(v) into b, with provenance. */
void jv_to_str(jsb *b, const jinja_value *v);
void jv_repr(jsb *b, const jinja_value *v);
jinja_value *jv_str_of(jinja_ctx *c, jinja_value *v);  /* v itself when a string */
/* HF's tojson: json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=False); indent < 0 =
 * none. False (error set) for a value JSON cannot hold. */
bool jv_tojson(jinja_ctx *c, jsb *b, const jinja_value *v, int indent, int level);
void jv_float_repr(char *out, size_t n, double f);
/* The items to iterate over (a list, tuple, a dict's keys, a string's characters); NULL with
 * the error set when v is not iterable. Undefined iterates as empty. */
jinja_value *jv_iter_list(jinja_ctx *c, jinja_value *v);
/* The first occurrence of x (m bytes) in hay (n bytes), or NULL; m == 0 finds hay. Linear
 * time: charge it as a scan of n + m bytes. */
const char *jv_find(const char *hay, size_t n, const char *x, size_t m);
size_t jv_utf8_len(const char *p, size_t n);
size_t jv_utf8_offset(const char *p, size_t n, size_t cp); /* byte offset of code point cp */

// ---- builtins (jinja_builtins.c) --------------------------------------------------------------

jinja_value *jinja_call_filter(jinja_ctx *c, const char *name, jinja_value *v, jinja_value **args, size_t n,
                               const char **kwn, jinja_value **kwv, size_t n_kw);
jinja_value *jinja_call_test(jinja_ctx *c, const char *name, jinja_value *v, jinja_value **args, size_t n);
/* The method `name` of v bound to it, or NULL (no error) when v has none. */
jinja_value *jinja_method(jinja_ctx *c, jinja_value *v, const char *name);
/* A global function (range, namespace, dict, raise_exception, strftime_now) or NULL. */
jinja_value *jinja_global_fn(jinja_ctx *c, const char *name);
jinja_value *jinja_kwarg(const char **kwn, jinja_value **kwv, size_t n_kw, const char *name);

// ---- evaluation (jinja_eval.c), used by builtins that call back --------------------------------

jinja_value *jinja_call_value(jinja_ctx *c, jinja_value *fn, jinja_value **args, size_t n, const char **kwn,
                              jinja_value **kwv, size_t n_kw);
jinja_value *jinja_getattr(jinja_ctx *c, jinja_value *v, const char *name);
jinja_value *jinja_getitem(jinja_ctx *c, jinja_value *v, jinja_value *key);
/* The work budget (jinja_limits.max_steps) and the wall-clock cap. A step is about the work of
 * a loop iteration (tens of ns): jinja_charge counts steps, jinja_charge_bytes a step per
 * JINJA_BYTES_PER_STEP bytes copied, jinja_charge_scan a step per JINJA_SCAN_BYTES_PER_STEP
 * bytes searched or decoded (memmem and UTF-8 walks cost up to ~15 ns a byte). False, with
 * the error set, when a bound is passed: the caller stops before doing the work it charged. */
#define JINJA_BYTES_PER_STEP 64
#define JINJA_SCAN_BYTES_PER_STEP 8
bool jinja_charge(jinja_ctx *c, uint64_t units);
bool jinja_charge_bytes(jinja_ctx *c, size_t n);
bool jinja_charge_scan(jinja_ctx *c, size_t n);
bool jinja_step(jinja_ctx *c);

#endif
