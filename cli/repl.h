/*
 * repl.h — the pieces of `attnd chat` (cli/cmd_chat.c, the loop and its /commands):
 *   - the view (repl_view.c): prints a reply as it streams, reasoning ("<think>" ... "</think>",
 *     or a server's reasoning_content) dimmed when the output is a terminal, and keeps the
 *     reply's text for the history; and the Ctrl-C flag that cuts a reply short;
 *   - the backends, two ways to run a turn: in this process on the model, keeping one KV
 *     sequence across turns (repl_local.c), or on a running `attnd serve` over HTTP with a
 *     session (repl_remote.c).
 * A turn takes the whole conversation as chat messages (a JSON array, borrowed) and computes
 * only what its cache does not hold: the figure repl_stats.cached_tokens reports.
 */
#ifndef ATTND_CLI_REPL_H
#define ATTND_CLI_REPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "attnd/buf.h"
#include "attnd/common.h"
#include "commands.h"

// ---- the view ---------------------------------------------------------------------------------

typedef struct repl_view {
    FILE *out;
    bool dim;          /* ANSI dim for reasoning (out is a terminal) */
    bool in_think;     /* inside "<think>" ... "</think>" */
    bool in_apart;     /* printing a server's reasoning_content */
    char hold[16];     /* the start of a tag that may continue in the next piece */
    size_t n_hold;
    buf content;       /* the reply as the history keeps it: content, <think> blocks included */
    buf reasoning;     /* a server's reasoning_content, kept apart */
    buf scratch;       /* the held tag start and the new piece, joined */
} repl_view;

void repl_view_init(repl_view *v, FILE *out, bool dim);
void repl_view_free(repl_view *v);
/* A new reply; in_think: the prompt opened a reasoning block, so the reply starts inside it. */
void repl_view_begin(repl_view *v, bool in_think);
/* Reply text as generated: "<think>" and "</think>" switch the dimming (tags split across pieces
 * too). Printed and flushed at once. */
void repl_view_text(repl_view *v, const char *s, size_t n);
/* Reasoning a server sent apart from the content: printed dimmed, kept in v->reasoning. */
void repl_view_reasoning(repl_view *v, const char *s, size_t n);
/* The reply ended: prints what was held back, restores the attributes, ends the line. */
void repl_view_end(repl_view *v);

/* Ctrl-C while a reply streams ends that reply (repl_interrupt_arm), not the program. */
void repl_interrupt_arm(void);    /* SIGINT sets the flag (cleared here) until disarmed */
void repl_interrupt_disarm(void); /* SIGINT ends the program again */
bool repl_interrupted(void);

// ---- the backends -----------------------------------------------------------------------------

typedef struct repl_opts {
    cli_run_opts run;          /* --model, --threads, --kv-type */
    int ctx_size;              /* --ctx-size; 0 = the model's */
    int n_predict;             /* --n: most tokens per reply; 0 = until the turn ends or the context is full */
    cli_sampling sampling;
    const char *url;           /* --url http://HOST:PORT: a running attnd serve (NULL = local) */
    const char *api_key;       /* --api-key, else $ATTND_API_KEY (remote) */
} repl_opts;

typedef struct repl_stats {
    int prompt_tokens;         /* the conversation as the template renders it */
    int cached_tokens;         /* of those, found in the cache (not computed again) */
    int completion_tokens;
    double ms;                 /* the whole turn */
    const char *finish;        /* "stop", "length" or "interrupted" */
    bool too_long;             /* with an error: the conversation does not fit the context */
} repl_stats;

typedef struct repl_backend repl_backend;
struct repl_backend {
    /* One turn: messages end with the user's; the reply streams into v. Errors name the cause;
     * st->too_long says when dropping older messages would help. */
    attnd_status (*turn)(repl_backend *b, const json_t *messages, repl_view *v, repl_stats *st, attnd_err *err);
    /* /clear: the cache is dropped, the next turn computes everything. */
    void (*forget)(repl_backend *b);
    /* One line for the banner: the model and its template, or the server. */
    const char *(*describe)(repl_backend *b);
    void (*destroy)(repl_backend *b);
};

/* Borrows o (and its sampling) for the backend's lifetime. */
attnd_status repl_local_open(repl_backend **out, const repl_opts *o, attnd_err *err);
attnd_status repl_remote_open(repl_backend **out, const repl_opts *o, attnd_err *err);

#endif
