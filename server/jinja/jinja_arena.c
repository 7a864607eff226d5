/*
 * jinja_arena.c — the arena a template's tree and values live in (jarena_*): 16-aligned, zeroed
 * chunks under one byte budget, freed at once when the render or the template goes.
 */
#include "jinja_internal.h"

#include <stdlib.h>
#include <string.h>

struct jarena_chunk {
    jarena_chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char mem[];
};

void *jarena_alloc(jarena *a, size_t n) {
    if (a->failed) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->budget && (n > a->budget || a->used > a->budget - n)) {
        a->failed = true;
        return NULL;
    }
    jarena_chunk *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > 64 * 1024 ? n : 64 * 1024;
        jarena_chunk *k = malloc(sizeof(*k) + cap);
        if (!k) {
            a->failed = true;
            return NULL;
        }
        k->next = a->head, k->cap = cap, k->used = 0;
        a->head = h = k;
    }
    void *p = h->mem + h->used;
    h->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void *jarena_grow(jarena *a, void *items, size_t n, size_t *cap, size_t elem) {
    if (n < *cap) return items;
    size_t grown = *cap ? *cap * 2 : 8;
    if (grown > SIZE_MAX / elem) return a->failed = true, NULL;
    void *p = jarena_alloc(a, grown * elem);
    if (!p) return NULL;
    if (n) memcpy(p, items, n * elem);
    *cap = grown;
    return p;
}

void jarena_free(jarena *a) {
    for (jarena_chunk *k = a->head, *next; k; k = next) {
        next = k->next;
        free(k);
    }
    a->head = NULL;
    a->used = 0;
}

