/*
 * block.h — (engine-private) several arrays carved out of one allocation: one allocation, one
 * out-of-memory check and one free for an object whose arrays are all sized when it is made
 * (STYLE: allocate big and early). A layout function places each array with block_take; called
 * on a block without memory it only measures, then again on the allocated block:
 *
 *     static size_t layout(thing *t, char *mem, size_t n) {
 *         block b = {.mem = mem};
 *         t->count = block_take(&b, n, sizeof(*t->count));
 *         t->cand = block_take(&b, n, sizeof(*t->cand));
 *         return block_size(&b);
 *     }
 *     if (!(t->mem = calloc(1, layout(t, NULL, n)))) ... out of memory ...
 *     layout(t, t->mem, n);
 *     ...
 *     free(t->mem);   // every array at once
 *
 * An array of no elements is NULL. Each array starts a multiple of 64 bytes into the block, so it
 * is aligned as the block itself is (malloc: for any type).
 */
#ifndef ATTND_ENGINE_BLOCK_H
#define ATTND_ENGINE_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct block {
    char *mem;     /* NULL while measuring; borrowed */
    size_t used;   /* bytes laid out so far */
    bool overflow; /* a size did not fit in size_t */
} block;

/* The next n elements of elem bytes: a pointer into b->mem, or NULL when measuring or n == 0. */
static inline void *block_take(block *b, size_t n, size_t elem) {
    size_t bytes;
    if (n == 0) return NULL;
    if (__builtin_mul_overflow(n, elem, &bytes) || bytes > SIZE_MAX - 64 - b->used) {
        b->overflow = true;
        return NULL;
    }
    char *p = b->mem ? b->mem + b->used : NULL;
    b->used += (bytes + 63) & ~(size_t)63;
    return p;
}

/* The bytes the layout needs; SIZE_MAX (which no allocation satisfies) after an overflow. */
static inline size_t block_size(const block *b) { return b->overflow ? SIZE_MAX : b->used; }

/* A zeroed block of size bytes (a layout's block_size), or NULL when out of memory or when the
 * layout overflowed (SIZE_MAX). */
static inline void *block_alloc(size_t size) { return size == SIZE_MAX ? NULL : calloc(1, size); }

#endif
