/*
 * gguf.h — read-only access to GGUF model files (llama.cpp's format, versions 2 and 3).
 *
 * The file is mmapped read-only and never copied: tensor data pointers point into the
 * mapping and stay valid until gguf_close(). Metadata is parsed once at open time into
 * native structures (strings NUL-terminated, scalar arrays naturally aligned).
 *
 * Every length, count, offset and shape is validated against the file size and for
 * integer overflow before use, so a hostile file yields ATTND_ERR_FORMAT with a message
 * naming the problem, never a crash.
 *
 *     gguf_file *f; attnd_err err;
 *     if (gguf_open(&f, "model.gguf", &err) != ATTND_OK) { puts(err.msg); return 1; }
 *     uint32_t n_layer;
 *     if (gguf_get_u32(f, "llama.block_count", &n_layer, &err) != ATTND_OK) ...
 *     const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
 *     gguf_close(f);
 *
 * Thread-safety: a gguf_file is immutable after open; any number of threads may read it.
 */
#ifndef ATTND_GGUF_H
#define ATTND_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"

/* Metadata value types, numbered as in the GGUF spec. */
typedef enum gguf_vtype {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
} gguf_vtype;

/* Tensor element types, numbered as in ggml. Only some are computed (gguf_type_computable). */
typedef enum gguf_type {
    GGUF_TYPE_F32 = 0,
    GGUF_TYPE_F16 = 1,
    GGUF_TYPE_Q4_0 = 2,
    GGUF_TYPE_Q4_1 = 3,
    GGUF_TYPE_Q5_0 = 6,
    GGUF_TYPE_Q5_1 = 7,
    GGUF_TYPE_Q8_0 = 8,
    GGUF_TYPE_Q8_1 = 9,
    GGUF_TYPE_Q2_K = 10,
    GGUF_TYPE_Q3_K = 11,
    GGUF_TYPE_Q4_K = 12,
    GGUF_TYPE_Q5_K = 13,
    GGUF_TYPE_Q6_K = 14,
    GGUF_TYPE_Q8_K = 15,
    GGUF_TYPE_IQ2_XXS = 16,
    GGUF_TYPE_IQ2_XS = 17,
    GGUF_TYPE_IQ3_XXS = 18,
    GGUF_TYPE_IQ1_S = 19,
    GGUF_TYPE_IQ4_NL = 20,
    GGUF_TYPE_IQ3_S = 21,
    GGUF_TYPE_IQ2_S = 22,
    GGUF_TYPE_IQ4_XS = 23,
    GGUF_TYPE_IQ1_M = 29,
    GGUF_TYPE_BF16 = 30,
    GGUF_TYPE_TQ1_0 = 34,
    GGUF_TYPE_TQ2_0 = 35,
    GGUF_TYPE_MXFP4 = 39,
    GGUF_TYPE_NVFP4 = 40,
} gguf_type;

/* Name ("Q4_K"), or NULL for a type id attnd does not know. */
const char *gguf_type_name(uint32_t type);
/* Elements per block and bytes per block; 0 for unknown types. */
uint32_t gguf_type_block_elems(uint32_t type);
uint32_t gguf_type_block_bytes(uint32_t type);
/* True for the types the engine computes with (the list is engine/kernels/quant_types.h's QUANT_TYPE_LIST). */
bool gguf_type_computable(uint32_t type);

/* Name of a metadata value type ("u32", "string", ...); "?" when unknown. */
const char *gguf_vtype_name(gguf_vtype t);
/* Bytes of one scalar of metadata type t in a file; 0 for strings, arrays and unknown types. */
size_t gguf_vtype_size(uint32_t t);

typedef struct gguf_string {
    const char *str; /* NUL-terminated copy (may also contain NULs; use len) */
    uint64_t len;
} gguf_string;

typedef struct gguf_array {
    gguf_vtype type; /* element type; never GGUF_VT_ARRAY (nested arrays are refused) */
    uint64_t n;
    const void *data;           /* scalar types: n native, aligned elements (bool as uint8_t) */
    const gguf_string *strings; /* GGUF_VT_STRING: n strings */
} gguf_array;

typedef struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u64; /* UINT8/16/32/64 */
        int64_t i64;  /* INT8/16/32/64 */
        double f64;   /* FLOAT32/64 */
        bool b;
        gguf_string str;
        gguf_array arr;
    } v;
} gguf_value;

typedef struct gguf_kv {
    const char *key; /* NUL-terminated */
    gguf_value value;
} gguf_kv;

typedef struct gguf_tensor {
    const char *name;   /* NUL-terminated */
    uint32_t type;      /* gguf_type id (always a known one) */
    uint32_t n_dims;    /* 1..4 */
    uint64_t ne[4];     /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint64_t n_elems;
    uint64_t n_bytes;
    uint64_t offset;    /* relative to the data section */
    const void *data;   /* into the mapping; valid until gguf_close */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Opens and validates `path`. On success *out owns the mapping; release with gguf_close. The first
 * file of a split set (NAME-00001-of-0000N.gguf, split.no 0 of split.count N, as llama.cpp's
 * gguf-split writes them) brings the set's other files, found beside it by name: its tensors are
 * every file's, its metadata the first's. Opening another file of a set is refused, naming the
 * first. */
attnd_status gguf_open(gguf_file **out, const char *path, attnd_err *err);
/* Parses a GGUF image already in memory. `data` is borrowed and must outlive the result. A split
 * set's first file opened this way holds only its own tensors. */
attnd_status gguf_open_memory(gguf_file **out, const void *data, size_t size, attnd_err *err);
void gguf_close(gguf_file *f); /* accepts NULL */
/* Tells the kernel that [p, p + n) of a file's mapped tensor data will not be read soon: its
 * whole pages leave the process's resident memory and are read again from the file if touched.
 * For a load-time copy (a packed matrix) that replaces the original in use. A no-op for a file
 * opened from memory, or for a range outside the mapping. */
void gguf_drop_pages(const gguf_file *f, const void *p, size_t n);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f); /* every file of a split set together */
int gguf_file_count(const gguf_file *f);      /* 1, or a split set's file count */
uint32_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f);

/* Metadata, in file order. Pointers stay valid until gguf_close. */
uint64_t gguf_kv_count(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i);
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key); /* NULL when absent */

/*
 * Typed getters. ATTND_ERR_NOT_FOUND when the key is missing, ATTND_ERR_FORMAT when it has
 * the wrong type or its value does not fit; the message names the key either way.
 * Integer getters accept any integer type whose value fits; gguf_get_f32 accepts FLOAT32/64.
 */
attnd_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, attnd_err *err);
attnd_status gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, attnd_err *err);
attnd_status gguf_get_f32(const gguf_file *f, const char *key, float *out, attnd_err *err);
attnd_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, attnd_err *err);
attnd_status gguf_get_str(const gguf_file *f, const char *key, const char **out, attnd_err *err);
/* Array getter; elem_type must match, or pass -1 to accept any element type. */
attnd_status gguf_get_arr(const gguf_file *f, const char *key, int elem_type, const gguf_array **out,
                          attnd_err *err);

/* Tensors, in file order. */
uint64_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL when absent */

#endif /* ATTND_GGUF_H */
