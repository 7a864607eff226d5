/*
 * grammar_internal.h — the compiled form of a grammar, shared by the compiler (grammar.c) and
 * the matcher (grammar_match.c). Not a public header.
 *
 * Every rule is a run of elements in one flat array: its alternatives one after another, each
 * ended by G_ALT except the last, which G_END ends. A parse position is an element index; the
 * element at a position inside an alternative is a character set (G_CHARS), a token terminal
 * (G_TOKEN: one vocabulary token, matched by its id and never by bytes) or a rule reference
 * (G_REF), and a position at G_ALT / G_END means the alternative is done.
 */
#ifndef ATTND_GRAMMAR_INTERNAL_H
#define ATTND_GRAMMAR_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "attnd/grammar.h"

enum { G_END = 0, G_ALT = 1, G_REF = 2, G_CHARS = 3, G_TOKEN = 4 };

typedef struct gelem {
    uint32_t type; /* G_* */
    uint32_t v;    /* G_REF: rule id; G_CHARS: set index; G_TOKEN: index into toks */
} gelem;

typedef struct grange {
    uint32_t lo, hi; /* code points, inclusive */
} grange;

/* A token terminal: <[id]> names the id, <text> the token whose vocabulary string is text (found
 * in the vocabulary when a state first meets one: see grammar_match.c). */
typedef struct gtoken {
    int32_t id;   /* -1: by text */
    char *text;   /* (len, NUL-terminated) by text: the whole "<…>"; NULL by id */
    size_t len;
} gtoken;

typedef struct gset {
    uint32_t first, n; /* ranges[first .. first + n) */
    uint32_t neg;      /* 1: every code point outside the ranges (`.` is neg with n = 0) */
} gset;

struct grammar {
    atomic_int refs;
    gelem *el;            /* (n_el) */
    size_t n_el;
    uint32_t *alt_first;  /* (n_rules + 1) rule r's alternatives are alts[alt_first[r] .. alt_first[r + 1]) */
    uint32_t *alts;       /* start position of every alternative */
    int n_rules;
    uint32_t root;
    gset *sets;           /* (n_sets) */
    size_t n_sets;
    grange *ranges;       /* (n_ranges) */
    size_t n_ranges;
    gtoken *toks;         /* (n_toks) token terminals */
    size_t n_toks;
    uint32_t *rest;       /* (n_el) the fewest characters (a token terminal counts one) from each
                             position to the end of its alternative: the sentence's shortest
                             completion (GRAMMAR_FAR: none found) */
    char *trigger, *skip_open, *skip_close, *skip_break; /* the lazy start (grammar_set_lazy); NULL = none */
    bool skip_inside;                       /* the output starts inside the skipped block */
};

static inline int gelem_done(uint32_t type) { return type == G_END || type == G_ALT; }
/* A terminal: what a parse stack's top is once expanded. */
static inline int gelem_terminal(uint32_t type) { return type == G_CHARS || type == G_TOKEN; }

#endif
