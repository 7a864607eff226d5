/*
 * gguf_writer.h — writes GGUF v3 files: metadata in insertion order, then tensor infos and
 * 32-byte-aligned tensor data. Used by converters (attnd convert-llama2c) and tests.
 *
 *     gguf_writer *w; gguf_writer_create(&w);
 *     gguf_writer_add_str(w, "general.architecture", "llama");
 *     gguf_writer_add_tensor(w, "token_embd.weight", GGUF_TYPE_F32, 2, (uint64_t[]){64, 512}, data);
 *     gguf_writer_write(w, "out.gguf", &err);   // temp file + rename: never a half-written file
 *     gguf_writer_destroy(w);
 *
 * Tensor data is borrowed: it must stay valid until gguf_writer_write returns.
 */
#ifndef ATTND_GGUF_WRITER_H
#define ATTND_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

typedef struct gguf_writer gguf_writer;

attnd_status gguf_writer_create(gguf_writer **out);
void gguf_writer_destroy(gguf_writer *w); /* accepts NULL */

/* Metadata setters; an out-of-memory failure is remembered and reported by gguf_writer_write. */
void gguf_writer_add_str(gguf_writer *w, const char *key, const char *value);
void gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t value);
void gguf_writer_add_f32(gguf_writer *w, const char *key, float value);
void gguf_writer_add_bool(gguf_writer *w, const char *key, bool value);
void gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *values, uint64_t n);
void gguf_writer_add_arr_f32(gguf_writer *w, const char *key, const float *values, uint64_t n);
void gguf_writer_add_arr_i32(gguf_writer *w, const char *key, const int32_t *values, uint64_t n);

/* Copies one metadata entry of a file read with gguf_open (any value type, arrays included) under
 * its own key; the entry is serialised at once, so f may be closed afterwards. */
struct gguf_kv;
void gguf_writer_add_kv(gguf_writer *w, const struct gguf_kv *kv);

/* ne[0] is the row length. data holds the tensor's bytes in `type` (borrowed). */
void gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                            const void *data);

attnd_status gguf_writer_write(gguf_writer *w, const char *path, attnd_err *err);

/* Writes f as a split set of n files (2..9999, at most one per tensor), PREFIX-00001-of-0000N.gguf
 * ...: runs of f's tensors in file order, about total / n bytes each, whole tensors only; the
 * first file carries f's metadata; every file split.no, split.count and split.tensors.count, as
 * llama.cpp's gguf-split writes them (gguf_open joins them again). */
struct gguf_file;
attnd_status gguf_split_write(const struct gguf_file *f, const char *prefix, int n, attnd_err *err);

#endif
