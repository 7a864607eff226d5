/*
 * gguf_builder.h — (tests only) the one GGUF writer of the tests: builds GGUF images byte by
 * byte in memory, so tests can craft valid and deliberately malformed files (and tiny models and
 * vocabularies, see engine_fixture.h) without fixtures. Header-only; every function is static inline.
 */
#ifndef ATTND_TEST_GGUF_BUILDER_H
#define ATTND_TEST_GGUF_BUILDER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gbuf {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_kv;   /* key/values written (gb_key), for a header written after them */
} gbuf;

static inline void gb_bytes(gbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static inline void gb_u8(gbuf *b, uint8_t v) { gb_bytes(b, &v, 1); }
static inline void gb_u32(gbuf *b, uint32_t v) { gb_bytes(b, &v, 4); }
static inline void gb_u64(gbuf *b, uint64_t v) { gb_bytes(b, &v, 8); }
static inline void gb_f32(gbuf *b, float v) { gb_bytes(b, &v, 4); }
static inline void gb_str(gbuf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}
static inline void gb_header(gbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
/* key + type u32 (value follows) */
static inline void gb_key(gbuf *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
    b->n_kv++;
}
static inline void gb_kv_u32(gbuf *b, const char *key, uint32_t v) { gb_key(b, key, 4); gb_u32(b, v); }
static inline void gb_kv_f32(gbuf *b, const char *key, float v) { gb_key(b, key, 6); gb_f32(b, v); }
static inline void gb_kv_str(gbuf *b, const char *key, const char *v) { gb_key(b, key, 8); gb_str(b, v); }
static inline void gb_kv_bool(gbuf *b, const char *key, bool v) { gb_key(b, key, 7); gb_u8(b, v ? 1 : 0); }
/* arrays: key, ARRAY (9), element type, count, elements */
static inline void gb_arr_head(gbuf *b, const char *key, uint32_t elem_type, uint64_t n) {
    gb_key(b, key, 9);
    gb_u32(b, elem_type);
    gb_u64(b, n);
}
static inline void gb_kv_arr_str(gbuf *b, const char *key, const char *const *v, uint64_t n) {
    gb_arr_head(b, key, 8, n);
    for (uint64_t i = 0; i < n; i++) gb_str(b, v[i]);
}
static inline void gb_kv_arr_i32(gbuf *b, const char *key, const int32_t *v, uint64_t n) {
    gb_arr_head(b, key, 5, n);
    gb_bytes(b, v, n * 4);
}
static inline void gb_kv_arr_f32(gbuf *b, const char *key, const float *v, uint64_t n) {
    gb_arr_head(b, key, 6, n);
    gb_bytes(b, v, n * 4);
}
/* tensor info: name, dims, type, offset */
static inline void gb_tensor(gbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static inline void gb_align(gbuf *b, size_t a) {
    while (b->n % a) gb_u8(b, 0);
}

/* A whole tokenizer-only image in *b (reset first): a SentencePiece ("llama") vocabulary of n
 * pieces with their types and scores, no tensors. */
static inline void gb_spm_vocab(gbuf *b, const char *const *pieces, const int32_t *types, const float *scores,
                                uint64_t n) {
    *b = (gbuf){0};
    gb_header(b, 3, 0, 4);
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_arr_str(b, "tokenizer.ggml.tokens", pieces, n);
    gb_kv_arr_i32(b, "tokenizer.ggml.token_type", types, n);
    gb_kv_arr_f32(b, "tokenizer.ggml.scores", scores, n);
    gb_align(b, 32);
}

#endif
