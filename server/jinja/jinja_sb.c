/*
 * jinja_sb.c — strings being built (jsb_*): text with a mark per byte saying whether it came from
 * the caller's data (its provenance), grown through buf.h within the render's output limit.
 */
#include "jinja_internal.h"

#include <stdint.h>
#include <string.h>

/* Room for extra more bytes of text and marks, within the limit; latches failed. */
static bool jsb_room(jsb *b, size_t extra) {
    if (b->failed) return false;
    if (extra < b->t.cap - b->t.len && extra < b->m.cap - b->m.len && (!b->limit || b->t.len + extra <= b->limit))
        return true; /* the common case: room already made */
    if (extra > SIZE_MAX / 2 - b->t.len || (b->limit && b->t.len + extra > b->limit) || !buf_reserve(&b->t, extra) ||
        !buf_reserve(&b->m, extra)) {
        b->failed = true;
        return false;
    }
    return true;
}

/* Ends an append of n bytes whose text and marks are written. */
static void jsb_commit(jsb *b, size_t n) {
    b->t.len += n, b->m.len += n;
    b->t.p[b->t.len] = '\0';
    b->m.p[b->m.len] = '\0';
}

void jsb_put(jsb *b, const char *p, size_t n, int prov) {
    if (!jsb_room(b, n)) return;
    if (n) memcpy(b->t.p + b->t.len, p, n);
    memset(b->m.p + b->m.len, prov ? 1 : 0, n);
    if (prov && n) b->any_data = true;
    jsb_commit(b, n);
}

void jsb_puts(jsb *b, const char *s) { jsb_put(b, s, strlen(s), JINJA_LITERAL); }

void jsb_put_sub(jsb *b, const jinja_value *s, size_t off, size_t n) {
    if (!s->s.m) {
        jsb_put(b, s->s.p + off, n, JINJA_LITERAL);
        return;
    }
    if (!jsb_room(b, n)) return;
    memcpy(b->t.p + b->t.len, s->s.p + off, n);
    memcpy(b->m.p + b->m.len, s->s.m + off, n);
    if (!b->any_data) b->any_data = memchr(s->s.m + off, 1, n) != NULL;
    jsb_commit(b, n);
}

void jsb_put_str(jsb *b, const jinja_value *s) { jsb_put_sub(b, s, 0, s->s.n); }

void jsb_repeat(jsb *b, const jinja_value *s, uint64_t times) {
    if (!times || !s->s.n) return;
    if (times > SIZE_MAX / s->s.n || !jsb_room(b, s->s.n * times)) {
        b->failed = true;
        return;
    }
    size_t start = b->t.len, total = s->s.n * times;
    jsb_put_str(b, s);
    while (b->t.len - start < total) { /* doubling copies of what is written: log2(times) of them */
        size_t k = b->t.len - start < total - (b->t.len - start) ? b->t.len - start : total - (b->t.len - start);
        memcpy(b->t.p + b->t.len, b->t.p + start, k);
        memcpy(b->m.p + b->m.len, b->m.p + start, k);
        jsb_commit(b, k);
    }
}

void jsb_free(jsb *b) {
    buf_free(&b->t);
    buf_free(&b->m);
}

