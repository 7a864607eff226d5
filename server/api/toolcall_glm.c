/*
 * toolcall_glm.c — GLM's <arg_key>/<arg_value> call block (toolcall_glm.h).
 *
 * A forward scan over the block: the name up to the first tag, then tag pairs separated only by
 * blanks, then </tool_call>. Values end at the first </arg_value>, as llama.cpp's parser reads
 * them. Nothing is copied: the parameters go to the caller's function as spans of the text.
 */
#include "toolcall_glm.h"

#include <string.h>

static const char KEY[] = "<arg_key>", KEY_END[] = "</arg_key>", VAL[] = "<arg_value>", VAL_END[] = "</arg_value>",
                  CLOSE[] = "</tool_call>";

typedef struct glm_scan {
    const char *s;
    size_t n, i;
} glm_scan;

static void blanks(glm_scan *g) {
    while (g->i < g->n && strchr(" \t\r\n", g->s[g->i]) && g->s[g->i]) g->i++;
}

/* Whether tag stands at i (1, consumed), cannot (0), or the text ends inside it (-1). */
static int tag(glm_scan *g, const char *t) {
    size_t k = strlen(t), left = g->n - g->i;
    if (memcmp(g->s + g->i, t, left < k ? left : k)) return 0;
    if (left < k) return -1;
    g->i += k;
    return 1;
}

/* The text from i to the first `until` (i past it): its span, or -1 when until is not there yet. */
static int span_to(glm_scan *g, const char *until, size_t *at, size_t *len) {
    size_t k = strlen(until);
    for (size_t j = g->i; j + k <= g->n; j++)
        if (!memcmp(g->s + j, until, k)) {
            *at = g->i, *len = j - g->i;
            g->i = j + k;
            return 1;
        }
    return -1;
}

/* The name: from the start to the first '<' (blanks around it dropped, none inside). */
static int read_name(glm_scan *g, char *name, size_t cap) {
    blanks(g);
    size_t a = g->i;
    while (g->i < g->n && g->s[g->i] != '<' && !strchr(" \t\r\n", g->s[g->i]) && g->s[g->i]) g->i++;
    size_t len = g->i - a;
    blanks(g);
    if (g->i == g->n) return -1;
    if (g->s[g->i] != '<' || len == 0 || len >= cap) return 0;
    memcpy(name, g->s + a, len);
    name[len] = '\0';
    return 1;
}

/* One <arg_key>K</arg_key><arg_value>V</arg_value> (blanks between the pair allowed). */
static int read_pair(glm_scan *g, toolcall_glm_param_fn param, void *ctx) {
    size_t ka, kn, va, vn;
    int r = span_to(g, KEY_END, &ka, &kn);
    if (r <= 0) return r;
    if (memchr(g->s + ka, '<', kn)) return 0; /* a key holds no tag */
    blanks(g);
    if (g->i == g->n) return -1;
    if ((r = tag(g, VAL)) <= 0) return r;
    if ((r = span_to(g, VAL_END, &va, &vn)) <= 0) return r;
    if (param) param(ctx, g->s + ka, kn, g->s + va, vn);
    return 1;
}

static int read_call(glm_scan *g, char *name, size_t cap, toolcall_glm_param_fn param, void *ctx, size_t *end) {
    int r = read_name(g, name, cap);
    while (r > 0) {
        blanks(g);
        if (g->i == g->n) return -1;
        if ((r = tag(g, CLOSE)) != 0) break;
        if ((r = tag(g, KEY)) > 0) r = read_pair(g, param, ctx);
    }
    if (r > 0) *end = g->i;
    return r;
}

int toolcall_glm_read(const char *s, size_t n, bool final, char *name, size_t cap, toolcall_glm_param_fn param,
                      void *ctx, size_t *end) {
    glm_scan g = {s, n, 0};
    /* Measure first: the parameters go out only for a whole call. */
    int r = read_call(&g, name, cap, NULL, NULL, end);
    if (r < 0) return final ? 0 : -1;
    if (r == 0 || !param) return r;
    g.i = 0;
    return read_call(&g, name, cap, param, ctx, end);
}
