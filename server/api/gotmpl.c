/*
 * gotmpl.c — Ollama's prompt templates, the subset of Go's text/template in gotmpl.h: one pass
 * over the template that writes text and fields while a stack of {{ if }} branches says whether
 * the current place is written. Text is written only when the next action is known, so that its
 * "{{- " can trim the text's end first.
 */
#include "gotmpl.h"

#include <stdio.h>
#include <string.h>

/* One open {{ if }}: whether its surroundings are written, whether a branch was taken, whether
 * the {{ else }} was seen. */
typedef struct gt_branch {
    bool outer, taken, in_else;
} gt_branch;

typedef struct gt_state {
    const gotmpl_values *v;
    buf *out;
    gt_branch stack[GOTMPL_MAX_DEPTH];
    int depth;
    bool emit; /* the current place is written */
    bool cut;  /* past {{ .Response }}: nothing more is written */
    const char *tmpl;
} gt_state;

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static attnd_status refuse(const gt_state *s, const char *at, const char *a, size_t n, const char *why, attnd_err *err) {
    return attnd_fail(err, ATTND_ERR_INVALID, "template: {{ %.*s }} at byte %zu %s", (int)(n > 60 ? 60 : n), a,
                      (size_t)(at - s->tmpl), why);
}

static const char UNSUPPORTED[] = "is not supported: attnd renders .System, .Prompt, .Response, .Suffix, "
                                  "if / else if / else / end, comments and trim markers";

/* The value of field a[n] (".System" ...) into *val; false: not one of them. *response: it is
 * .Response. */
static bool field_of(const gt_state *s, const char *a, size_t n, const char **val, bool *response) {
    static const char *const NAMES[] = {".System", ".Prompt", ".Suffix", ".Response"};
    const char *vals[] = {s->v->system, s->v->prompt, s->v->suffix, NULL};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(NAMES); i++)
        if (strlen(NAMES[i]) == n && !memcmp(a, NAMES[i], n)) {
            *val = vals[i] ? vals[i] : "";
            *response = i == 3;
            return true;
        }
    return false;
}

static bool is_word(const char *a, size_t n, const char *w) { return strlen(w) == n && !memcmp(a, w, n); }
static bool starts_with(const char *a, size_t n, const char *w) { return n > strlen(w) && !memcmp(a, w, strlen(w)); }

/* {{ if .X }} (else_if: {{ else if .X }}), the condition a[n] after the keyword. */
static attnd_status branch(gt_state *s, const char *at, const char *a, size_t n, const char *cond, size_t nc, bool else_if,
                           attnd_err *err) {
    const char *val;
    bool response;
    if (!field_of(s, cond, nc, &val, &response)) return refuse(s, at, a, n, UNSUPPORTED, err);
    bool truth = !response && *val;
    if (!else_if) {
        if (s->depth == GOTMPL_MAX_DEPTH) return refuse(s, at, a, n, "nests {{ if }} too deep", err);
        s->stack[s->depth++] = (gt_branch){.outer = s->emit, .taken = truth};
        s->emit = s->emit && truth;
        return ATTND_OK;
    }
    gt_branch *b = s->depth ? &s->stack[s->depth - 1] : NULL;
    if (!b || b->in_else) return refuse(s, at, a, n, "has no {{ if }} to continue", err);
    s->emit = b->outer && !b->taken && truth;
    b->taken = b->taken || truth;
    return ATTND_OK;
}

/* One action, a[n] without its delimiters, trim markers and surrounding spaces. */
static attnd_status action(gt_state *s, const char *at, const char *a, size_t n, attnd_err *err) {
    const char *val;
    bool response;
    if (n >= 4 && !memcmp(a, "/*", 2) && !memcmp(a + n - 2, "*/", 2)) return ATTND_OK; /* a comment */
    if (field_of(s, a, n, &val, &response)) {
        if (response) s->cut = true; /* as Ollama: the prompt ends where the response begins */
        if (s->emit && !s->cut && !buf_puts(s->out, val)) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        return ATTND_OK;
    }
    if (starts_with(a, n, "if ")) return branch(s, at, a, n, a + 3, n - 3, false, err);
    if (starts_with(a, n, "else if ")) return branch(s, at, a, n, a + 8, n - 8, true, err);
    gt_branch *b = s->depth ? &s->stack[s->depth - 1] : NULL;
    if (is_word(a, n, "else")) {
        if (!b || b->in_else) return refuse(s, at, a, n, "has no {{ if }} to continue", err);
        s->emit = b->outer && !b->taken;
        b->taken = b->in_else = true;
        return ATTND_OK;
    }
    if (is_word(a, n, "end")) {
        if (!b) return refuse(s, at, a, n, "has no {{ if }} to close", err);
        s->emit = b->outer;
        s->depth--;
        return ATTND_OK;
    }
    return refuse(s, at, a, n, UNSUPPORTED, err);
}

/* Writes text[from, to) when the place is written. */
static bool text(gt_state *s, const char *from, const char *to) {
    return !s->emit || s->cut || from >= to || buf_append(s->out, from, (size_t)(to - from));
}

attnd_status gotmpl_render(const char *tmpl, size_t n, const gotmpl_values *v, buf *out, attnd_err *err) {
    gt_state s = {.v = v, .out = out, .emit = true, .tmpl = tmpl};
    const char *p = tmpl, *end = tmpl + n;
    bool trim_next = false; /* the last action ended with " -}}" */
    for (;;) {
        const char *open = p;
        while (open + 1 < end && !(open[0] == '{' && open[1] == '{')) open++;
        if (open + 1 >= end) open = end;
        bool trim_prev = open + 3 < end && open[2] == '-' && is_space(open[3]);
        const char *t0 = p, *t1 = open;
        while (trim_next && t0 < t1 && is_space(*t0)) t0++;
        while (trim_prev && t1 > t0 && is_space(t1[-1])) t1--;
        if (!text(&s, t0, t1)) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        if (open == end) break;
        const char *a = open + 2 + (trim_prev ? 1 : 0), *close = a;
        while (close + 1 < end && !(close[0] == '}' && close[1] == '}')) close++;
        if (close + 1 >= end) return attnd_fail(err, ATTND_ERR_INVALID, "template: the \"{{\" at byte %zu is never closed", (size_t)(open - tmpl));
        trim_next = close - a >= 2 && close[-1] == '-' && is_space(close[-2]);
        const char *b = trim_next ? close - 1 : close;
        while (a < b && is_space(*a)) a++;
        while (b > a && is_space(b[-1])) b--;
        attnd_status st = action(&s, open, a, (size_t)(b - a), err);
        if (st != ATTND_OK) return st;
        p = close + 2;
    }
    if (s.depth) return attnd_fail(err, ATTND_ERR_INVALID, "template: an {{ if }} is never closed with {{ end }}");
    return ATTND_OK;
}
