/*
 * buf.h — a growable byte buffer, always NUL-terminated once anything was appended.
 *
 *     buf b;
 *     buf_init(&b);
 *     if (!buf_append(&b, "data: ", 6)) ... out of memory, b unchanged ...
 *     use(b.p, b.len);
 *     buf_free(&b);
 *
 * The caller owns the storage of the struct; the buffer owns b.p. Not thread-safe.
 */
#ifndef ATTND_BUF_H
#define ATTND_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct buf {
    char *p;        /* (len) bytes, p[len] == '\0' when p != NULL; owned */
    size_t len, cap;
} buf;

void buf_init(buf *b);
void buf_free(buf *b); /* accepts NULL; leaves b empty and reusable */
/* Makes room for len + extra bytes plus the NUL; false when out of memory (b unchanged). */
bool buf_reserve(buf *b, size_t extra);
/* Appends n bytes of p; false when out of memory (b unchanged). */
bool buf_append(buf *b, const void *p, size_t n);
bool buf_puts(buf *b, const char *s);
/* Appends printf-style text; false when out of memory (b unchanged). */
bool buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool buf_vprintf(buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Empties the buffer, keeping its storage. */
void buf_clear(buf *b);

#endif
