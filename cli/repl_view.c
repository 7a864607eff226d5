/*
 * repl_view.c — how `attnd chat` prints a reply while it streams (repl.h): text as it comes,
 * reasoning dimmed (ANSI SGR 2) on a terminal and plain elsewhere, so a pipe or a file gets the
 * text alone; and the Ctrl-C flag that ends a reply instead of the program.
 *
 * A "<think>" or "</think>" tag may arrive split over two pieces ("<th", "ink>"): the start of a
 * tag at the end of a piece is held back until the next piece (or the end) says what it is.
 */
#include <signal.h>
#include <string.h>

#include "repl.h"

#define DIM_ON "\x1b[2m"
#define DIM_OFF "\x1b[0m"

void repl_view_init(repl_view *v, FILE *out, bool dim) {
    memset(v, 0, sizeof(*v));
    v->out = out;
    v->dim = dim;
    buf_init(&v->content);
    buf_init(&v->reasoning);
    buf_init(&v->scratch);
}

void repl_view_free(repl_view *v) {
    buf_free(&v->content);
    buf_free(&v->reasoning);
    buf_free(&v->scratch);
}

static void set_dim(repl_view *v, bool on) {
    if (v->dim) fputs(on ? DIM_ON : DIM_OFF, v->out);
}

/* Printed and kept as the reply's content. */
static void emit(repl_view *v, const char *s, size_t n) {
    if (!n) return;
    fwrite(s, 1, n, v->out);
    buf_append(&v->content, s, n);
}

void repl_view_begin(repl_view *v, bool in_think) {
    buf_clear(&v->content);
    buf_clear(&v->reasoning);
    v->n_hold = 0;
    v->in_apart = false;
    v->in_think = in_think;
    if (in_think) set_dim(v, true);
}

/* Prints p[0..n): tags switch the dimming; the start of a tag at the end is held back. */
static void scan(repl_view *v, const char *p, size_t n) {
    if (!n) return; /* p may be NULL then */
    size_t i = 0, run = 0;
    while (i < n) {
        const char *tag = v->in_think ? "</think>" : "<think>";
        size_t tl = strlen(tag), rest = n - i;
        if (p[i] != '<' || memcmp(p + i, tag, rest < tl ? rest : tl) != 0) {
            i++;
            continue;
        }
        emit(v, p + run, i - run);
        if (rest < tl) { /* maybe a tag: the next piece says */
            memcpy(v->hold, p + i, rest);
            v->n_hold = rest;
            return;
        }
        if (!v->in_think) set_dim(v, true);
        emit(v, tag, tl);
        if (v->in_think) set_dim(v, false);
        v->in_think = !v->in_think;
        i += tl;
        run = i;
    }
    emit(v, p + run, n - run);
}

void repl_view_text(repl_view *v, const char *s, size_t n) {
    if (v->in_apart) { /* the server's reasoning ended: the answer follows */
        set_dim(v, false);
        fputc('\n', v->out);
        v->in_apart = false;
    }
    if (v->n_hold) {
        buf_clear(&v->scratch);
        buf_append(&v->scratch, v->hold, v->n_hold);
        buf_append(&v->scratch, s, n);
        v->n_hold = 0;
        if (v->scratch.p) scan(v, v->scratch.p, v->scratch.len);
    } else {
        scan(v, s, n);
    }
    fflush(v->out);
}

void repl_view_reasoning(repl_view *v, const char *s, size_t n) {
    if (!v->in_apart) set_dim(v, true);
    v->in_apart = true;
    fwrite(s, 1, n, v->out);
    buf_append(&v->reasoning, s, n);
    fflush(v->out);
}

void repl_view_end(repl_view *v) {
    emit(v, v->hold, v->n_hold);
    v->n_hold = 0;
    if (v->in_think || v->in_apart) set_dim(v, false);
    v->in_apart = false;
    fputc('\n', v->out);
    fflush(v->out);
}

// ---- Ctrl-C -------------------------------------------------------------------------------------

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

void repl_interrupt_arm(void) {
    interrupted = 0;
    struct sigaction sa = {.sa_handler = on_sigint}; /* no SA_RESTART: a blocking read returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

void repl_interrupt_disarm(void) {
    struct sigaction sa = {.sa_handler = SIG_DFL};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

bool repl_interrupted(void) { return interrupted != 0; }
