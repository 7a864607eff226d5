/* buf.c — the growable byte buffer declared in attnd/buf.h: doubling growth from 256 bytes, by
 * attnd_grow (attnd/common.h), the one growth helper of arrays and buffers alike. */
#include "attnd/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/common.h"

void buf_init(buf *b) { *b = (buf){0}; }

void buf_free(buf *b) {
    if (!b) return;
    free(b->p);
    *b = (buf){0};
}

bool buf_reserve(buf *b, size_t extra) {
    if (extra > SIZE_MAX - 1 - b->len) return false; /* len + extra + 1 would overflow */
    return attnd_grow(&b->p, &b->cap, b->len + extra + 1, 1, 256);
}

bool buf_append(buf *b, const void *p, size_t n) {
    if (!buf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool buf_puts(buf *b, const char *s) { return buf_append(b, s, strlen(s)); }

void buf_clear(buf *b) {
    b->len = 0;
    if (b->p) b->p[0] = '\0';
}

bool buf_vprintf(buf *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || !buf_reserve(b, (size_t)n)) return false;
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return true;
}

bool buf_printf(buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bool ok = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return ok;
}
