/*
 * jinja_lex.h — the template's tokens: text between tags (whitespace control already applied
 * as HF's trim_blocks and lstrip_blocks want it) and the tokens inside {{ }} and {% %}.
 */
#ifndef ATTND_SERVER_JINJA_LEX_H
#define ATTND_SERVER_JINJA_LEX_H

#include "jinja_internal.h"

typedef enum jtk {
    T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP,
} jtk;

typedef struct jtoken {
    jtk kind;
    int line;
    const char *p;  /* T_TEXT, T_NAME, T_OP: into the normalised source; T_STRING: decoded, arena */
    size_t n;
    int64_t i;      /* T_INT */
    double f;       /* T_FLOAT */
} jtoken;

/* Tokenises src into *toks (n_toks, the last one T_EOF; malloc'd, the caller frees it); the
 * texts the tokens point to live in arena a. */
attnd_status jinja_lex(const char *src, size_t len, jarena *a, jtoken **toks, size_t *n_toks, attnd_err *err);

#endif
